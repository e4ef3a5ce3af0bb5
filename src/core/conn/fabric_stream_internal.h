/*
 * fabric_stream_internal.h: what the files of a fabric stream share
 * (fabric_stream.c, fabric_stream_send.c, fabric_stream_recv.c,
 * fabric_stream_poll.c); nothing outside core/conn's fabric_stream*.c
 * includes it.  The public side is fabric_stream.h.
 */
#ifndef SHUNT_CORE_CONN_FABRIC_STREAM_INTERNAL_H
#define SHUNT_CORE_CONN_FABRIC_STREAM_INTERNAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "core/conn/fabric_stream.h"

#define MAX_IOV IOV_MAX   /* a call's every buffer in one kernel call, as the kernel's own call would take them */
#define WAIT_MS 100          /* a sleep on the socket is re-checked this often */

/* The stream is broken for good; the line that found it, for the log. */
#define broken(s) fstream_broken_at((s), __FILE__, __LINE__)

/* Every send and receive calls these: inline, as they were before the
 * stream was split into files. */
static inline size_t fstream_iov_total(const struct iovec *iov, int n)
{
    size_t t = 0;
    for (int i = 0; i < n; i++)
        t += iov[i].iov_len;
    return t;
}

/* iov cut to at most max bytes, into out (MAX_IOV entries): its count. */
static inline int fstream_iov_cut(const struct iovec *iov, int n, size_t max, struct iovec *out)
{
    int k = 0;
    for (int i = 0; i < n && k < MAX_IOV && max > 0; i++) {
        size_t len = iov[i].iov_len < max ? iov[i].iov_len : max;
        out[k].iov_base = iov[i].iov_base;
        out[k++].iov_len = len;
        max -= len;
    }
    return k;
}

/* iov from its byte skip on, into out (MAX_IOV entries): its count. */
static inline int fstream_iov_skip(const struct iovec *iov, int n, size_t skip, struct iovec *out)
{
    int k = 0;
    for (int i = 0; i < n && k < MAX_IOV; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        out[k].iov_base = (char *)iov[i].iov_base + skip;
        out[k++].iov_len = iov[i].iov_len - skip;
        skip = 0;
    }
    return k;
}

/* The peer's bytes come from the ring now: it moved, every byte it sent
 * by TCP before was read, and the ring was not read to its way back.  The
 * socket has nothing more to say then but the peer's end, or the bytes
 * the peer sends once it went back (after the mark in the ring). */
static inline bool fstream_ring_phase(const struct fabric_stream *s)
{
    return s->peer_moved && s->tcp_read == s->peer_tcp && !s->peer_back;
}

/* fabric_stream.c: what the files share. */
int fstream_take_error(struct fabric_stream *s);   /* the socket's error, once */
bool fstream_peer_dead(struct fabric_stream *s);   /* the peer's process is gone */
int fstream_broken_at(struct fabric_stream *s, const char *file, int line);   /* -EIO (through broken(s)) */
void fstream_bell(struct fabric_stream *s);        /* a doorbell to the peer (a hint) */

/* fabric_stream.c: the hand-over. */
int fstream_settle_hello(struct fabric_stream *s);   /* a client's first bytes: 0 once settled, -EAGAIN */
int fstream_look_header(struct fabric_stream *s);    /* the peer's header, if it has landed */

/* fabric_stream.c: how a blocking call waits. */
void fstream_wait_news(struct fabric_stream *s, bool socket_news);
bool fstream_spin_for(struct fabric_stream *s, bool read);

/* fabric_stream.c: the way back to TCP. */
void fstream_serve_peer(struct fabric_stream *s, bool look);   /* goes back if the peer asked, or left */
int fstream_clear_tcp(struct fabric_stream *s, bool nonblock);   /* what is owed by TCP first: 0 once clear */
void fstream_push_owed(struct fabric_stream *s);
/* The peer's bytes sent again that this end had read: dropped, waiting
 * for them on the socket until the monotonic ns until (0: no wait,
 * UINT64_MAX: none); 0 once dropped, -EAGAIN. */
int fstream_drop_skip(struct fabric_stream *s, uint64_t until);
void fstream_look_owner_left(struct fabric_stream *s);   /* the peer refused or left before it attached */

/* fabric_stream_recv.c: the receiving side. */
void fstream_look_socket_end(struct fabric_stream *s);
ssize_t fstream_read_ring(struct fabric_stream *s, const struct iovec *iov, int iovcnt, bool peek);

/* fabric_stream_poll.c: the socket's own readiness (a poll that does not wait). */
short fstream_socket_ready(const struct fabric_stream *s, short events);

#endif
