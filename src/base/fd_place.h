/*
 * fd_place.h: where shunt puts the fds it keeps for itself, so that they
 * never take a number the program would have had.
 *
 * The kernel hands out the lowest free number below the soft limit of
 * RLIMIT_NOFILE and fails with EMFILE at it.  shunt's fds go at or above
 * that limit, where the program's never go: made while the soft limit is
 * raised for a moment (up to the hard limit), which is then put back.  So
 * the program meets EMFILE at exactly the count it would without shunt.
 * When the hard limit leaves no room (soft == hard, as `ulimit -n N` sets
 * both), they go near the top below it, taking one of the program's numbers
 * each (fd_place_in_room says which): the holder of one gives it up when the
 * program runs out (core/conn/private_fds.h).
 */
#ifndef SHUNT_BASE_FD_PLACE_H
#define SHUNT_BASE_FD_PLACE_H

#include <stdbool.h>

/* A close-on-exec duplicate of fd where the program's fds never go (or, with
 * no room, near the top of its range), or -1. */
int fd_place_high(int fd);

/* Runs make(arg), which makes one fd, while the room above the program's
 * limit is open, so that it succeeds even when the program has taken every
 * number it may (EMFILE otherwise).  kept: the fd is one shunt keeps, placed
 * as fd_place_high places it (the one make made is closed); otherwise it is
 * returned where it landed, for a caller that closes it at once.  Returns the
 * fd or -1 (errno set). */
int fd_place_make(int (*make)(void *arg), void *arg, bool kept);

/* An fd just made for shunt or its engine moved where fd_place_high puts
 * one (the number made is closed); fd itself if it cannot be moved. */
int fd_place_move(int fd);

/* Whether fd sits in the room above the program's limit (false: it takes
 * one of the program's numbers). */
bool fd_place_in_room(int fd);

#endif
