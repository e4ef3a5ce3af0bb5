/*
 * fd_place.h: where shunt puts the fds it keeps for itself: near the top of
 * the fd limit, away from the low numbers a program expects its next socket
 * or file to get.
 */
#ifndef SHUNT_CORE_FD_FD_PLACE_H
#define SHUNT_CORE_FD_FD_PLACE_H

/* A close-on-exec duplicate of fd near the top of the fd limit, or -1. */
int fd_place_high(int fd);

#endif
