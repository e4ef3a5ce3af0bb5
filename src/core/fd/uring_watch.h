/*
 * uring_watch.h: whether this process uses io_uring, as far as shunt can
 * tell.  A ring's I/O never passes through libc: a recv through it reads
 * the companion socket (doorbells), a send through it bypasses the rings,
 * an epoll_ctl through it adds the companion to a set.  So once io_uring is
 * seen, no connection of the process may stay on a channel (the fail-safe:
 * core/process/uring_failsafe.c) and none becomes accelerated.
 *
 * What tells (each says where it is called from):
 *   - an io_uring system call made through libc's syscall() (uring_note,
 *     from interpose/sandbox_calls.c, before the call);
 *   - an fd that is an io_uring instance (anon_inode:[io_uring]) met by the
 *     fd table's probe of an fd it had not seen (uring_check_fd): the ring's
 *     fd handed to epoll_ctl, poll, close, dup, fcntl...;
 *   - a look through /proc/self/fd for such an fd (uring_look), before a
 *     connection is accelerated (listen, connect, accept), for a ring made
 *     with the raw system call instruction (liburing as Debian builds it).
 * Nothing tells about a ring made with the raw instruction after a
 * connection was accelerated and used on it before the process makes one of
 * those calls (docs/architecture.md, "io_uring").
 */
#ifndef SHUNT_CORE_FD_URING_WATCH_H
#define SHUNT_CORE_FD_URING_WATCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/stat.h>

/* Set for good once io_uring was seen; a forked child keeps it (it holds
 * the ring too), an exec'd image starts without (rings are close-on-exec;
 * one that is not is found by the image's first look). */
extern atomic_bool uring_seen_flag;

static inline bool uring_seen(void)
{
    return atomic_load_explicit(&uring_seen_flag, memory_order_acquire);
}

/* Who runs the fail-safe when asked: given at start-up by the layer that
 * can (interpose/init.c), since the moments of detection are inside calls
 * that may hold locks the fail-safe takes. */
void uring_set_hook(void (*want_fail_safe)(void));

/* io_uring was met (how: for the log): marks the process and asks for the
 * fail-safe. */
void uring_note(const char *how);

/* Asks for the fail-safe again: a connection became accelerated while (or
 * just before) io_uring was seen, after the last fail-safe had looked. */
void uring_request(void);

/* The probe of fd found it is not a socket (st: its fstat): an io_uring
 * instance is noted. */
void uring_check_fd(int fd, const struct stat *st);

/* Whether io_uring is seen, after a look for a ring's fd when the process
 * may have one shunt has not seen (its count of fds without an object in
 * the table grew since the last look).  Called where a connection is about
 * to be accelerated; fd is that socket, which may not be in the table yet
 * (an accepted one): it is not counted as a stranger.  Costs a stat of
 * /proc/self/fd when nothing changed. */
bool uring_look(int fd);

#endif
