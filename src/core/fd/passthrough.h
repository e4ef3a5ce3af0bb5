/*
 * passthrough.h: the kernel's own implementation of each socket operation,
 * for kinds of socket that leave some operations to the kernel.
 */
#ifndef SHUNT_PASSTHROUGH_H
#define SHUNT_PASSTHROUGH_H

#include "base/tls.h"
#include "core/fd/sock.h"

/*
 * Calls of the calling thread that may have made some fd of the kernel's
 * ready (or bad): data moved or a shutdown through these operations, a
 * close or close_range.  A zero-timeout wait that leaves the kernel out
 * asks again after any of them, so that a thread never misses what it did
 * itself (core/wait/kernel_looks.c).  A count, never reset.
 */
extern SHUNT_TLS uint64_t pt_kernel_touches;

ssize_t pt_recv(struct fdref *f, struct io_call *c);
ssize_t pt_send(struct fdref *f, struct io_call *c);
int pt_recvmmsg(struct fdref *f, struct mmsghdr *vec, unsigned int n, int flags, struct timespec *tmo);
int pt_sendmmsg(struct fdref *f, struct mmsghdr *vec, unsigned int n, int flags);
ssize_t pt_sendfile(struct fdref *out, int in_fd, off64_t *off, size_t count);
int pt_bind(struct fdref *f, const struct sockaddr *a, socklen_t len);
int pt_listen(struct fdref *f, int backlog);
int pt_accept(struct fdref *f, struct sockaddr *a, socklen_t *len, int flags);
int pt_connect(struct fdref *f, const struct sockaddr *a, socklen_t len);
int pt_shutdown(struct fdref *f, int how);
int pt_getsockopt(struct fdref *f, int level, int name, void *val, socklen_t *len);
int pt_setsockopt(struct fdref *f, int level, int name, const void *val, socklen_t len);
int pt_getsockname(struct fdref *f, struct sockaddr *a, socklen_t *len);
int pt_getpeername(struct fdref *f, struct sockaddr *a, socklen_t *len);
int pt_fcntl(struct fdref *f, int cmd, void *arg);
int pt_ioctl(struct fdref *f, unsigned long req, void *arg);
void pt_release_fd(struct fdref *f);

#endif
