/*
 * sock.h: a socket as shunt sees it, and the operations every kind of socket
 * provides.
 *
 * Every fd the program holds is one of two things in the fd table: an fd
 * shunt does not manage (files, pipes, Unix and UDP sockets...), served by
 * passthrough_ops, or an object (struct shunt_sock) of one of the kinds in
 * core/kinds/ (a TCP socket, an epoll set) with its own ops.  Wrappers
 * never test which: they look the fd up and call the ops; code that must
 * tell kinds apart reads the object's kind.
 *
 * Operations return a non-negative result or a negative errno; only the
 * outermost wrapper turns that into -1/errno.
 */
#ifndef SHUNT_SOCK_H
#define SHUNT_SOCK_H

#include <stdatomic.h>
#include <stdbool.h>

#include "base/signals.h"
#include "base/sys_headers.h"
#include "base/tls.h"


struct shunt_sock;
struct sock_ops;

/* One fd looked up: the object (NULL for passthrough) is held until fdref_put. */
struct fdref {
    int fd;
    struct shunt_sock *sock;
    const struct sock_ops *ops;
    bool blocked;       /* this call waited in wait_channel (counted in tcp_sock.blocked_calls) */
    uint64_t wait_until; /* when the socket's timeout ends this call, fixed at its first sleep (0: not yet) */
    struct call_sig sig; /* the handlers this call has seen (base/signals.h), from its lookup */
};

/* The data calls, described once so that each kind needs one recv and one send. */
enum io_kind { IO_READ, IO_READV, IO_RECV, IO_RECVFROM, IO_RECVMSG, IO_WRITE, IO_WRITEV, IO_SEND, IO_SENDTO, IO_SENDMSG };

struct io_call {
    enum io_kind kind;
    int flags;                      /* MSG_* for recv/send kinds */
    void *buf;                      /* READ, RECV, RECVFROM, WRITE, SEND, SENDTO */
    size_t len;
    const struct iovec *iov;        /* READV, WRITEV */
    int iovcnt;
    struct msghdr *msg;             /* RECVMSG, SENDMSG */
    struct sockaddr *addr;          /* RECVFROM: where to put the source */
    socklen_t *addrlen;
    const struct sockaddr *dest;    /* SENDTO */
    socklen_t destlen;
};

struct sock_ops {
    const char *kind;
    ssize_t (*recv)(struct fdref *f, struct io_call *c);
    ssize_t (*send)(struct fdref *f, struct io_call *c);
    int (*recvmmsg)(struct fdref *f, struct mmsghdr *vec, unsigned int n, int flags, struct timespec *tmo);
    int (*sendmmsg)(struct fdref *f, struct mmsghdr *vec, unsigned int n, int flags);
    ssize_t (*sendfile)(struct fdref *out, int in_fd, off64_t *off, size_t count);
    int (*bind)(struct fdref *f, const struct sockaddr *a, socklen_t len);
    int (*listen)(struct fdref *f, int backlog);
    /* returns the new fd, already entered in the fd table */
    int (*accept)(struct fdref *f, struct sockaddr *a, socklen_t *len, int flags);
    int (*connect)(struct fdref *f, const struct sockaddr *a, socklen_t len);
    int (*shutdown)(struct fdref *f, int how);
    int (*getsockopt)(struct fdref *f, int level, int name, void *val, socklen_t *len);
    int (*setsockopt)(struct fdref *f, int level, int name, const void *val, socklen_t len);
    int (*getsockname)(struct fdref *f, struct sockaddr *a, socklen_t *len);
    int (*getpeername)(struct fdref *f, struct sockaddr *a, socklen_t *len);
    int (*fcntl)(struct fdref *f, int cmd, void *arg);
    int (*ioctl)(struct fdref *f, unsigned long req, void *arg);
    /* The last fd of this process referring to the object is about to be
     * closed by the kernel (close, dup2 over it, close_range, fclose). */
    void (*release_fd)(struct fdref *f);
    /* The last reference is gone: free the object. */
    void (*destroy)(struct shunt_sock *s);
};

/* What an object is; code that must tell kinds apart tests this field
 * (never which ops table it has, which would tie it to the kind's file). */
enum sock_kind { SOCK_TCP = 1, SOCK_EPOLL = 2 };

struct shunt_sock {
    atomic_int refs;
    atomic_int fds;     /* fd-table entries of this process that point here */
    enum sock_kind kind;
    const struct sock_ops *ops;
    int domain;     /* AF_INET or AF_INET6 */
};

extern const struct sock_ops passthrough_ops;

static inline void sock_get(struct shunt_sock *s)
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

static inline void sock_put(struct shunt_sock *s)
{
    /* release: our writes to the object happen before its destruction;
     * acquire: the last one sees every other holder's.  One acq_rel
     * exchange rather than release plus an acquire fence on the last: the
     * same instruction on x86, and ThreadSanitizer (make SANITIZE=thread)
     * cannot see fences, so it would take the destruction for a race. */
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1)
        s->ops->destroy(s);
}

/* Converts a libc-style result (-1 and errno) to shunt's convention. */
static inline long sysret(long r)
{
    return r < 0 ? -errno : r;
}

#endif
