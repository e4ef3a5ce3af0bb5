/*
 * stream.h: TCP's stream semantics over a channel: recv and send with
 * their flags, shutdown, close, and what a dead or misbehaving peer looks
 * like (DESIGN sections 4 and 7).
 */
#ifndef SHUNT_STREAM_H
#define SHUNT_STREAM_H

#include "core/kinds/tcp_socket.h"

/* A call's buffers as one vector (total: their bytes): 0, or the
 * kernel's -errno for what it would refuse. */
struct iobuf {
    struct iovec one;
    const struct iovec *iov;
    int iovcnt;
    size_t total;
};
int iobuf_from_call(struct iobuf *b, struct io_call *c);
/* The iovecs of b from byte skip on (at most IOV_MAX of them): their count. */
int iobuf_rest(const struct iobuf *b, size_t skip, struct iovec *part);
/* A MSG_WAITALL receive that took got bytes before its socket went back to
 * kernel TCP goes on there for the rest, as the kernel's call would (short
 * only for a signal, an error or EOF): got plus what the kernel gave. */
ssize_t iobuf_recv_rest_kernel(int fd, const struct iobuf *b, size_t got, int flags);

/* Whether this call must not wait (MSG_DONTWAIT, or O_NONBLOCK).  A
 * socket believed blocking is not asked: if that changed, the kernel's
 * call in the wait says EAGAIN. */
bool stream_nonblocking(struct tcp_sock *t, int fd, int flags);

/* A send on an end whose write side is shut: EPIPE, and SIGPIPE unless
 * flags has MSG_NOSIGNAL (as the kernel's). */
ssize_t stream_send_failed(int flags);

ssize_t stream_recv(struct tcp_sock *t, struct fdref *f, struct io_call *c);
ssize_t stream_send(struct tcp_sock *t, struct fdref *f, struct io_call *c);
int stream_shutdown(struct tcp_sock *t, int fd, int how);

/* Called by stream_shutdown after the state changed, for the waits of a
 * higher layer (the epoll sets: core/kinds/epoll_sets.c gives it at start-up). */
typedef void (*shutdown_hook_fn)(struct tcp_sock *t, int fd);
void stream_set_shutdown_hook(shutdown_hook_fn fn);

/* The last holder of this endpoint closes it: FIN, or a reset when
 * SO_LINGER is {1, 0} or data was left unread (as TCP would). */
void stream_close(struct tcp_sock *t, int fd);

/* Bytes readable (FIONREAD) and bytes sent but not yet read by the peer (SIOCOUTQ). */
long stream_readable(struct tcp_sock *t);
long stream_unread_by_peer(struct tcp_sock *t);

/* Readiness in poll(2) terms for the requested events. */
short stream_poll(struct tcp_sock *t, int fd, short events);

/* Rings the doorbell a corked send (MSG_MORE, TCP_CORK) put off, if any. */
void stream_flush_held(struct tcp_sock *t, int fd);

/* A blocking writer's wait for ring space (or the peer's end): 0, or
 * -EAGAIN (SO_SNDTIMEO), -EINTR, or STREAM_DOWNGRADED when both ends
 * waited to send into full rings, or the reader read nothing for
 * SHUNT_SEND_STALL_MS, and this one moved the connection to kernel TCP
 * (reason both_full, stalled_reader): the caller goes on there.  Counted in f->blocked as a send's wait
 * (the caller ends with deferred_close_call_done); f->fd becomes shunt's copy of the
 * socket if the program closed it meanwhile. */
int stream_wait_writable(struct tcp_sock *t, struct fdref *f);

/* The peer will send nothing more: its process is gone (the kernel says
 * so), it reset, or it closed after its FIN (a close puts the FIN first:
 * the bit alone, scribbled, must not end a live stream). */
static inline bool stream_peer_finished(struct tcp_sock *t)
{
    if (atomic_load(&t->peer_gone))
        return true;
    unsigned ps = tcp_sock_peer_state(t);
    return (ps & SIDE_RESET) || ((ps & SIDE_CLOSED) && ring_fin_stored(&t->ch.rx));
}

/* The TCP bytes the server must still deliver before the ring (a count
 * this process keeps: core/fd/tcp_sock.h). */
static inline uint64_t stream_prefix_left(struct tcp_sock *t)
{
    return tcp_sock_prefix_left(t);
}

/* The segment is corrupt: the connection ends for both ends (our end
 * reset in the segment, and the companion shut down both ways, which the
 * peer's kernel reports whatever the segment says).  From then on every
 * call on it fails.  Returns -ECONNRESET. */
int stream_corrupt(struct tcp_sock *t, int fd);

/* What a receive on a connection found corrupt returns: ECONNRESET, every
 * time; and a send: ECONNRESET if no call reported it yet, then EPIPE (and
 * SIGPIPE unless MSG_NOSIGNAL), as after a TCP reset. */
ssize_t stream_broken_recv(struct tcp_sock *t, int fd);
ssize_t stream_broken_send(struct tcp_sock *t, int fd, const struct io_call *c);

#endif
