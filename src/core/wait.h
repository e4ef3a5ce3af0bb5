/*
 * wait.h: waiting for a channel (DESIGN section 5).  A waiter spins a
 * bounded, adaptive time, then asks the peer for a doorbell and sleeps in
 * the kernel on its own TCP socket, the companion.  Doorbells are single
 * bytes on the companion that shunt consumes; the program never sees them.
 */
#ifndef SHUNT_WAIT_H
#define SHUNT_WAIT_H

#include "core/tcp_socket.h"

typedef bool (*ready_fn)(struct tcp_sock *t);

/* What a sleeper waits for, and what a waker made happen. */
enum { WANT_DATA = 1, WANT_SPACE = 2, WANT_ANY = 3 };

/* Waits until ready(t) may have become true.  0: check again; -EAGAIN:
 * the socket's timeout ran out; -EINTR: a signal the program asked to
 * interrupt calls.  Sets t->peer_gone when the companion closes. */
int wait_channel(struct tcp_sock *t, int fd, ready_fn ready, bool for_write);

/* After producing into (WANT_DATA), consuming from (WANT_SPACE) a ring, or
 * closing (WANT_ANY): rings the peer's doorbell if it asked for that. */
void wake_peer(struct tcp_sock *t, int fd, int what);

/* A readiness wait (poll, epoll) that is about to sleep in the kernel
 * watching this socket: enter asks the peer for a doorbell; leave takes the
 * request back and drains the doorbells if no other thread is still asleep
 * on them (setting peer_gone on EOF or error).  Always in pairs. */
void doorbell_enter(struct tcp_sock *t, int what);
void doorbell_leave(struct tcp_sock *t, int fd, int what);

/* As doorbell_leave, for an fd that may be closed already: nothing drained. */
void doorbell_forget(struct tcp_sock *t, int what);

/* Looks at the companion without consuming anything: EOF or an error mean
 * the peer is gone. */
void doorbell_check_peer(struct tcp_sock *t, int fd);

/* For waits that spin over several sockets (epoll): whether spinning can
 * pay on this machine at all, and whether this peer is running (not asleep
 * waiting for us, not on our CPU). */
bool wait_may_spin(void);
bool wait_peer_busy(struct tcp_sock *t);
uint64_t wait_now_ns(void);
void wait_cpu_relax(void);

/* Pauses a wait loop whose kernel waits keep waking for nothing. */
struct backoff {
    unsigned fruitless, us;
};
void backoff_fruitless(struct backoff *b);

/* Sends one doorbell byte, counted in the end's bells word; none once the
 * word is frozen (the connection is moving back to TCP).  True if sent. */
bool doorbell_send(struct tcp_sock *t, int fd);

/* n doorbell bytes were taken off this end's TCP socket. */
void doorbell_ate(struct tcp_sock *t, size_t n);

/* The lock under which sleeps are announced and doorbells drained, among
 * all holders of this end (a dir_lock token, or -EIO). */
int doorbell_lock(struct tcp_sock *t);
void doorbell_unlock(struct tcp_sock *t, int token);

/* Called once at start-up: how many CPUs may run at once. */
void wait_init(void);

#endif
