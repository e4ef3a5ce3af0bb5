/*
 * readiness.h: poll, ppoll, select, pselect and epoll over sets that mix
 * accelerated sockets with anything else (DESIGN section 6).  Accelerated
 * sockets are answered from their rings; the kernel is entered only with
 * doorbells armed, and then also answers for every other fd.
 */
#ifndef SHUNT_READINESS_H
#define SHUNT_READINESS_H

#include <limits.h>

#include "core/fd/sock.h"

/* poll/ppoll: tmo NULL waits forever; returns a count or a negative errno. */
int readiness_poll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask);

/* A select's timeout: tv for select (written back with the time not used,
 * as Linux's select does), ts for pselect; NULL both: forever. */
struct select_time {
    struct timeval *tv;
    const struct timespec *ts;
};

/* readiness_select's answer for a set without an accelerated socket (nor one
 * waiting for its claim, nor an epoll fd with such members): nothing was
 * done, the call is the kernel's, unchanged. */
#define READINESS_KERNELS INT_MIN

/* select/pselect: a count or a negative errno, or READINESS_KERNELS. */
int readiness_select(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct select_time *st, const sigset_t *mask);

/* Readiness of one managed fd from its channel: revents, or -1 when the
 * kernel must answer (not accelerated). */
int readiness_of(struct fdref *f, short events);

/* The kernel said POLLIN for a socket that was still negotiating: the claim's
 * doorbell may be what it saw, and the claim is visible by then.  The
 * rings' answer if it is accelerated now, else the kernel's. */
int readiness_settled(struct fdref *f, short events, short kernel_revents);

/* Monotonic deadlines. */
struct deadline {
    bool forever;
    struct timespec at;
};
void deadline_start(struct deadline *d, const struct timespec *tmo);
/* A timeout the kernel would take (EINVAL otherwise); NULL is. */
bool timeout_valid(const struct timespec *tmo);
/* Time left (zero when passed); NULL when forever. */
const struct timespec *deadline_left(const struct deadline *d, struct timespec *buf);
bool deadline_passed(const struct deadline *d);

#endif
