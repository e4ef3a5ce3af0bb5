/*
 * downgrade.h: moving an accelerated connection back to kernel TCP when one
 * end is handed to a program that does not run shunt (exec, SCM_RIGHTS),
 * with the other end's cooperation and no byte lost, duplicated, or seen
 * that the program should not see (protocol in downgrade.c).
 */
#ifndef SHUNT_DOWNGRADE_H
#define SHUNT_DOWNGRADE_H

#include "core/conn/stream.h"
#include "core/conn/deferred_close.h"
#include "core/fd/tcp_sock.h"

/* What stream_recv/stream_send return when the connection left the channel
 * under them: the caller goes on through the downgrade (never an errno). */
#define STREAM_DOWNGRADED (-4096)

/* This process hands the socket to a program without shunt: the connection
 * moves back to kernel TCP now (an offer not yet claimed is withdrawn).
 * Afterwards this process's object is on PATH_TCP too. */
void downgrade_leave(struct tcp_sock *t, int fd);

/* downgrade_leave for a reason of this process's (io_uring, a raw clone):
 * once on kernel TCP the reason is recorded and shown to shunt stat; false
 * if the connection could not move. */
bool downgrade_leave_because(struct tcp_sock *t, int fd, enum fallback_reason why);

/* The channel's downgrade word is set: bring this object along.  A holder
 * of the leaving end just goes to TCP; the other end puts back into TCP
 * what the leaver never read, and goes to TCP once its program has read
 * what is left in its ring and the leaver's doorbells and the copies of
 * what it read after the leaver's snapshot are off its socket.
 * downgrade_observe is for a call about to send (or shut down, or close):
 * the re-send comes first, whatever else is still to do.  downgrade_look is
 * for any other call: the re-send waits until the ring is read and the
 * copies are taken (then the leaver is done), so that a leaver whose
 * re-send waits for room in this end's socket is never waited for by it.
 * Both return the path now. */
int downgrade_observe(struct tcp_sock *t, int fd);
int downgrade_look(struct tcp_sock *t, int fd);

/* downgrade_observe for a call about to send: true when its bytes may go
 * to TCP now (nothing is to be re-sent, or it is all sent); with wait
 * false, what the kernel takes of the re-send now, and false while some
 * is left (the call answers EAGAIN, as a full kernel socket would). */
bool downgrade_before_send(struct tcp_sock *t, int fd, bool wait);

/* shutdown of an end whose peer left: the FIN goes after the re-sent
 * bytes.  The kernel's shutdown never waits: while the re-send is not all
 * in, the write side is marked shut (sends fail with EPIPE) and the
 * re-send's last piece sends the FIN, at whichever call of the end sends
 * it. */
int downgrade_shutdown(struct tcp_sock *t, struct fdref *f, int how);

/* downgrade_observe for the close of the end's last holder: nothing reads
 * its socket any more, so what arrives there while the re-send waits for
 * room is dropped (the leaver may be waiting for room in it). */
int downgrade_closing(struct tcp_sock *t, int fd);

/* downgrade_look until this object is on kernel TCP (the caller has no
 * server prefix left to read).  Returns the path. */
int downgrade_until_tcp(struct tcp_sock *t, int fd);

/* The last holder of this end closes it (after stream_close): what the
 * peer has not read yet is copied into TCP, behind this end's last
 * doorbell and ahead of its FIN, with the stream position it starts at, so
 * that the peer, if it is ever handed to a program without shunt, finds
 * those bytes in its socket (it takes off the ones it read from the ring
 * meanwhile); otherwise nobody reads the copy.  Nothing to copy costs a
 * few loads and stores.  Should the peer be leaving already, this end
 * re-sends as the other end of that downgrade instead. */
void downgrade_close_copy(struct tcp_sock *t, int fd);

/* The calls that found the channel gone under them (STREAM_DOWNGRADED). */
ssize_t downgrade_recv(struct tcp_sock *t, struct fdref *f, struct io_call *c);
ssize_t downgrade_send(struct tcp_sock *t, struct fdref *f, struct io_call *c);

/* stream_recv, going on over TCP when the connection left the channel
 * under it, for a call that goes on with the ring afterwards (splice): it
 * ends with deferred_close_call_done if f->blocked. */
static inline ssize_t channel_recv_more(struct tcp_sock *t, struct fdref *f, struct io_call *c)
{
    ssize_t r = stream_recv(t, f, c);
    return r == STREAM_DOWNGRADED ? downgrade_recv(t, f, c) : r;
}

/* stream_recv and stream_send, going on over TCP when the connection left
 * the channel under them. */
static inline ssize_t channel_recv(struct tcp_sock *t, struct fdref *f, struct io_call *c)
{
    ssize_t r = channel_recv_more(t, f, c);
    if (__builtin_expect(f->blocked, 0))
        deferred_close_call_done(t, f);
    return r;
}

static inline ssize_t channel_send(struct tcp_sock *t, struct fdref *f, struct io_call *c)
{
    ssize_t r = stream_send(t, f, c);
    if (r == STREAM_DOWNGRADED)
        r = downgrade_send(t, f, c);
    if (__builtin_expect(f->blocked, 0))
        deferred_close_call_done(t, f);
    return r;
}

/* This end is the one that left (it drains nothing more); and the
 * doorbells of the peer still queued for this end (channel.h). */
bool downgrade_leaving_side(struct tcp_sock *t);

/* The downgrade word, if the protocol can have made it (one leaver's side
 * and DOWN_SET, its steps in order, our own side only if this process left
 * or shared its end), else DOWN_CORRUPT. */
#define DOWN_CORRUPT 0x80000000u
unsigned downgrade_word(struct tcp_sock *t);

/* The downgrade word is set and this end reads nothing more from its ring:
 * it is the leaving end, or the copies were taken off its socket already
 * (by a second leaver: the rest of the ring is in its socket, for the new
 * program and any other holder alike). */
bool downgrade_ring_done(struct tcp_sock *t);
uint64_t downgrade_bells_left(struct tcp_sock *t);

/* readiness of an object whose downgrade is not finished yet */
short downgrade_poll(struct tcp_sock *t, int fd, short events);

#endif
