/*
 * shunt.h: the query API of libshunt.so.  Programs never need it; tests and
 * tools that want to know what shunt did with an fd look it up with
 * dlsym(RTLD_DEFAULT, "shunt_fd_accelerated"), so they also run without shunt.
 */
#ifndef SHUNT_H
#define SHUNT_H

/* 1 if fd is a connection on an accelerated path, 0 if it is not (kernel
 * TCP, or not a socket shunt manages). */
int shunt_fd_accelerated(int fd);

#endif
