/*
 * doorbell.c: doorbells, and announcing a sleep.
 *
 * A doorbell is one byte on the companion TCP socket; the peer sends one
 * when it made progress and found a request for it (chan_side.sleepers).
 * Every wait in the kernel (the one recv of a blocked reader or writer, and
 * every poll or epoll) watches for such a byte without consuming it
 * (MSG_PEEK, POLLIN), so one byte wakes every thread of the endpoint that
 * sleeps: no consumer can hide it from another.  Bytes are drained only
 * when no thread of the endpoint is inside a kernel wait, under wait_lock,
 * which is also where a thread announces that it is going to sleep: so a
 * byte is never drained between a sleeper's last look at the rings and its
 * entry into the kernel.  A drained byte has therefore been seen by every
 * sleeper it was meant for; the worst case is a spurious wake-up.
 */
#include <sched.h>
#include <string.h>

#include "base/log.h"
#include "base/real.h"
#include "core/wait/wait_shared.h"
#include "core/wait/xwake.h"

pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;

/* fork: the lock is taken before it and let go of in both processes after
 * it (holders.c), as the rings' locks are.  A child made while another
 * thread was inside a wait section (announcing a sleep, draining
 * doorbells) had the lock held by a thread it does not have, and its own
 * first wait hung for ever (threads_fork_waiting).  Re-initialising it in
 * the child, as the epoll sets' locks are, would not do here: the section
 * the parent's thread was in may have taken the local lock alone (one
 * holder then), while the child, counted in, takes the end's lock in the
 * segment, so the two would not exclude each other until it finished. */
void wait_before_fork(void)
{
    crit_lock(&wait_lock);
}

void wait_after_fork(void)
{
    crit_unlock(&wait_lock);
}

static void drain_locked(struct tcp_sock *t, int fd);

static void retract(atomic_uint *count)
{
    unsigned n = atomic_load(count);
    while (n > 0 && !atomic_compare_exchange_weak(count, &n, n - 1))
        ;
}

static void doorbell_arm(struct tcp_sock *t, int what)
{
    /* seq_cst: ordered before the caller's re-check of the rings; pairs
     * with the fence in doorbell_wake_peer. */
    if (what & WANT_DATA)
        atomic_fetch_add(&t->ch.self->sleepers, 1);
    if (what & WANT_SPACE)
        atomic_fetch_add(&t->ch.self->space_sleepers, 1);
}

/* A thread of ours enters a wait on the end, or leaves it: true for the
 * last one out of the end's waits, who drains the doorbells.  The segment's
 * count is the end's among all its holders; while this process alone holds
 * the end it is only a copy (a scribbled one stopped every drain, and the
 * doorbells left in the socket woke each sleep at once, for ever). */
static void waiters_enter(struct tcp_sock *t)
{
    atomic_fetch_add(&t->waiters_here, 1);
    atomic_fetch_add(&t->ch.self->waiters, 1);
}

static bool waiters_leave(struct tcp_sock *t)
{
    bool mine = atomic_fetch_sub(&t->waiters_here, 1) == 1;
    bool end = atomic_fetch_sub(&t->ch.self->waiters, 1) == 1;
    return tcp_sock_end_shared(t) ? end : mine;
}

unsigned doorbell_waiters(struct tcp_sock *t)
{
    return tcp_sock_end_shared(t) ? atomic_load(&t->ch.self->waiters) : atomic_load(&t->waiters_here);
}

static void doorbell_disarm(struct tcp_sock *t, int what)
{
    if (what & WANT_DATA)
        retract(&t->ch.self->sleepers);
    if (what & WANT_SPACE)
        retract(&t->ch.self->space_sleepers);
}


/* Announces a sleep (as doorbell_enter) and registers for the local wake,
 * in one section of the wait locks; opens the end's wake FIFO first (a
 * path lookup, outside the locks), before the caller's last look. */
int doorbell_enter_local(struct tcp_sock *t, int what, int *efd, int *xfd)
{
    *xfd = xwake_open(t);
    int lk = doorbell_lock(t);
    waiters_enter(t);
    doorbell_arm(t, what);
    if (lk < 0)
        return LW_NONE;   /* the lock is not held: the local state is left alone */
    int lw = local_wake_register(t, efd);
    doorbell_unlock(t, lk);
    return lw;
}

void doorbell_leave_local(struct tcp_sock *t, int fd, int what, int lw, int xfd)
{
    doorbell_disarm(t, what);
    int lk = doorbell_lock(t);
    if (lk >= 0)
        local_wake_unregister(t, lw);
    if (waiters_leave(t) && lk >= 0)
        drain_locked(t, fd);
    doorbell_unlock(t, lk);
    xwake_close(xfd);
}


/* Takes the peer's requests for what we made happen (the counts of its
 * sleepers for data and for space): true if there was one.  Only a peer
 * waiting for that is woken: a reader is not woken because we freed space,
 * nor a writer because we wrote. */
static bool take_requests(atomic_uint *data, atomic_uint *space, int what)
{
    bool any = false;
    if ((what & WANT_DATA) && atomic_load_explicit(data, memory_order_relaxed))
        any |= atomic_exchange(data, 0) != 0;
    if ((what & WANT_SPACE) && atomic_load_explicit(space, memory_order_relaxed))
        any |= atomic_exchange(space, 0) != 0;
    return any;
}

void doorbell_wake_peer(struct tcp_sock *t, int fd, int what)
{
    /* seq_cst fence: our ring update is ordered before the load of the
     * peer's requests, pairing with the seq_cst increment in doorbell_arm:
     * either the peer's last look sees the update or we see its request. */
    atomic_thread_fence(memory_order_seq_cst);
    struct chan_side *peer = t->ch.peer;
    /* One byte wakes every sleeper of the peer: none of them consumes it. */
    if (take_requests(&peer->sleepers, &peer->space_sleepers, what)) {
        atomic_fetch_add_explicit(&t->ch.self->doorbells, 1, memory_order_relaxed);
        doorbell_send(t, fd);
    }
    /* A blocking call of the peer asleep on its futex: one system call,
     * where a doorbell costs a TCP segment, the sleeper's poll and a drain. */
    if (take_requests(&peer->fsleepers, &peer->fspace_sleepers, what))
        doorbell_wake_peer_futex(t);
}

bool doorbell_send(struct tcp_sock *t, int fd)
{
    /* Two sockets take no doorbell: a server's whose client's TCP prefix is
     * still queued (it never sleeps on it: the prefix keeps it readable, and
     * a byte queued behind the prefix could not be taken out without it
     * when the server is handed to a program without shunt), and a closed
     * end's (nobody waits there, and its kernel would answer with a reset
     * that cuts off the copy it left in TCP; downgrade.c). */
    if (t->ch.side == 0 && tcp_sock_peer_prefix_pending(t))
        return false;
    _Atomic uint64_t *w = &t->ch.self->bells;
    uint64_t v = atomic_load(w);
    do {
        if (v & BELLS_FROZEN) {
            /* the connection is moving back to TCP (a downgrade, or a close
             * that left a copy: downgrade.c): no byte may follow.  Frozen
             * without either is a scribble, which would only make the peer
             * wait for ever: the connection ends instead. */
            if (!atomic_load(&t->ch.hdr->down) && atomic_load(&t->ch.self->closed_copy) == COPY_NONE &&
                atomic_load(&t->ch.peer->closed_copy) == COPY_NONE)
                tcp_sock_corrupt(t, fd, "our doorbells were frozen with no downgrade or close under way");
            return false;
        }
    } while (!atomic_compare_exchange_weak(w, &v, v + BELLS_BUSY));
    /* Looked at once busy (seq_cst, pairing with doorbell_await_peer): either
     * a closing peer waits for this send to finish, then takes the byte out,
     * or we see it closed and send nothing. */
    if (tcp_sock_peer_state(t) & SIDE_CLOSED) {
        atomic_fetch_sub(w, BELLS_BUSY);
        return false;
    }
    ssize_t r = shunt_real.send(fd, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    /* busy to counted in one step: a freeze never sees a sent byte uncounted */
    atomic_fetch_add(w, (r == 1 ? 1 : 0) - BELLS_BUSY);
    return r == 1;
}

void doorbell_await_peer(struct tcp_sock *t)
{
    /* seq_cst, after our SIDE_CLOSED: pairs with doorbell_send's look.  The
     * word is the peer's: a sender that died inside its send, or a
     * scribble, holds it busy for ever, so the wait is bounded (as
     * bells_freeze's); what is lost then is the reset that one late byte
     * may cause, not a byte of the program's. */
    for (int i = 0; i < 100000 && (atomic_load(&t->ch.peer->bells) & BELLS_BUSY_MASK); i++)
        sched_yield();
}

void doorbell_wake_peer_futex(struct tcp_sock *t)
{
    atomic_fetch_add(&t->ch.peer->fwake, 1);
    futex_wake_shared(&t->ch.peer->fwake);
}

void doorbell_ate(struct tcp_sock *t, size_t n)
{
    atomic_fetch_add(&t->ch.self->bells_eaten, (uint64_t)n);
}

/* The end's wait lock in the segment is taken (with its bound) under this
 * socket's own turn, and the process-wide wait_lock only after it: a lock
 * in shared memory is never waited for while a lock every socket of the
 * process needs is held (a scribbled one had stopped every other
 * connection's sleeps, their close and the process's exit). */
int doorbell_lock(struct tcp_sock *t)
{
    int lk = dir_lock(t, &t->wait_turn, &t->ch.self->wait_lock);
    if (lk >= 0)
        crit_lock(&wait_lock);
    return lk;
}

void doorbell_unlock(struct tcp_sock *t, int token)
{
    if (token < 0)
        return;   /* nothing is held */
    crit_unlock(&wait_lock);
    dir_unlock(&t->wait_turn, &t->ch.self->wait_lock, token);
}

/* Consumes every queued doorbell; a server's TCP prefix is data and stays. */
static void drain_locked(struct tcp_sock *t, int fd)
{
    /* the program may have closed fd since the caller looked: the close
     * kept its copy under this lock (wait_defer_close) */
    fd = tcp_call_fd(t, fd);
    if (tcp_sock_prefix_left(t))
        return;
    /* After a downgrade the program's bytes follow the doorbells: only the
     * doorbells the peer counted may go (the leaving side drains none).
     * Before it, everything queued is a doorbell; the flag says so to a
     * peer that starts to leave meanwhile, which re-sends its own bytes
     * into this socket only once the flag is clear (seq_cst store, then
     * load: either we see its downgrade word or it sees our flag). */
    uint64_t limit = SIZE_MAX;
    atomic_store(&t->ch.self->draining, 1);
    if (atomic_load(&t->ch.hdr->down)) {
        atomic_store_explicit(&t->ch.self->draining, 0, memory_order_release);
        if (channel_self_left(&t->ch))
            return;
        limit = channel_bells_unread(&t->ch);
    } else if (atomic_load(&t->ch.peer->bells) & BELLS_FROZEN) {
        /* the peer closed and left behind its doorbells a copy of what we
         * had not read (downgrade_close_copy): the same bound */
        limit = channel_bells_unread(&t->ch);
    }
    char buf[256];
    while (limit > 0) {
        ssize_t r = shunt_real.recv(fd, buf, limit < sizeof buf ? (size_t)limit : sizeof buf, MSG_DONTWAIT);
        if (r > 0) {
            doorbell_ate(t, (size_t)r);
            limit -= (uint64_t)r;
        }
        if (r > 0 && (size_t)r < sizeof buf)
            break;   /* a short read took all that was queued: no call just to hear EAGAIN */
        if (r > 0)
            continue;
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            shunt_log_sock(LOG_DEBUG, t, fd, "companion says the peer is gone (drain: %zd, %s)", r,
                           r ? strerror(errno) : "EOF");
            atomic_store(&t->peer_gone, true);
        }
        break;
    }
    /* release: our recv calls are done before a leaver sees the flag clear */
    atomic_store_explicit(&t->ch.self->draining, 0, memory_order_release);
}

/* Announcing a sleep and draining doorbells exclude each other among all
 * the holders of this end: in this process by wait_lock, and across
 * processes (when there are others) by the end's lock in the segment. */
void doorbell_enter(struct tcp_sock *t, int what)
{
    int lk = doorbell_lock(t);
    waiters_enter(t);
    doorbell_arm(t, what);
    doorbell_unlock(t, lk);
}

void doorbell_leave(struct tcp_sock *t, int fd, int what)
{
    doorbell_disarm(t, what);
    int lk = doorbell_lock(t);
    if (waiters_leave(t) && lk >= 0)
        drain_locked(t, fd);
    doorbell_unlock(t, lk);
}

/* A blocking call's sleep on the end's futex (sleep.c): counted among the
 * end's waiters like any sleeper, so that no other thread drains doorbells
 * meant for it, but asking the peer for a futex wake, not a byte. */
void doorbell_enter_futex(struct tcp_sock *t, int what)
{
    int lk = doorbell_lock(t);
    waiters_enter(t);
    /* seq_cst: ordered before the caller's load of fwake and re-check of
     * the rings; pairs with the fence in doorbell_wake_peer */
    if (what & WANT_DATA)
        atomic_fetch_add(&t->ch.self->fsleepers, 1);
    if (what & WANT_SPACE)
        atomic_fetch_add(&t->ch.self->fspace_sleepers, 1);
    doorbell_unlock(t, lk);
}

/* Doorbells reach this socket while a futex sleeper is away from it only
 * when something else of ours asked for them (a poll or epoll sleeper, a
 * wait that moved on to the companion) or the peer leaves for kernel TCP:
 * the peer counts every byte it sends, we count those we took, and the
 * drain's system call is made only when they differ (a scribbled count
 * costs a drain too many, or leaves a byte for the next companion sleeper,
 * whose leave drains it).  Once the peer leaves, its last doorbell is what
 * wakes the companion sleep that follows (sleep.c), and the downgrade takes
 * the doorbells (core/conn/downgrade.c): none is drained here then. */
void doorbell_leave_futex(struct tcp_sock *t, int fd, int what)
{
    if (what & WANT_DATA)
        retract(&t->ch.self->fsleepers);
    if (what & WANT_SPACE)
        retract(&t->ch.self->fspace_sleepers);
    int lk = doorbell_lock(t);
    bool owed = !atomic_load(&t->ch.hdr->down) &&
                (atomic_load(&t->ch.peer->bells) & BELLS_COUNT_MASK) != atomic_load(&t->ch.self->bells_eaten);
    if (waiters_leave(t) && lk >= 0 && owed)
        drain_locked(t, fd);
    doorbell_unlock(t, lk);
}

void doorbell_forget(struct tcp_sock *t, int what)
{
    doorbell_disarm(t, what);
    int lk = doorbell_lock(t);
    waiters_leave(t);
    doorbell_unlock(t, lk);
}

void doorbell_check_peer(struct tcp_sock *t, int fd)
{
    char b;
    ssize_t r = shunt_real.recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        shunt_log_sock(LOG_DEBUG, t, fd, "companion says the peer is gone (check: %zd, %s)", r,
                       r ? strerror(errno) : "EOF");
        atomic_store(&t->peer_gone, true);
    }
}

/*
 * The caller saw the companion report its end (POLLRDHUP, POLLHUP or
 * POLLERR): the peer's socket is closed, its process perhaps killed.  A
 * look at the companion may still find doorbells queued ahead of the end,
 * and an epoll set, whose registration is edge-triggered, names the member
 * for that end once: the member turned hot, its doorbells were drained
 * later, it went cold again and nothing named it any more, so its reader
 * waited for ever (procs_epoll_peer_killed).  So the doorbells ahead of the
 * end are drained now, and the end is seen.  Draining while other threads
 * sleep on the companion hides nothing from them: no doorbell comes after
 * the end, and the end itself stays queued, for every sleeper to see.
 * drain_locked takes only counted doorbells after a downgrade or a close
 * that left a copy (program bytes that follow them stay), and nothing ahead
 * of a client's prefix; then the peek finds those bytes and says nothing.
 */
void doorbell_check_end(struct tcp_sock *t, int fd)
{
    /* Only a socket on the channel has doorbells.  One that fell back
     * (an offer refused or withdrawn: its channel stays mapped) may still be
     * watched by an epoll set under its tag until the set's next look, and
     * what its TCP socket holds is the program's (threads_epoll_withdrawn);
     * while offered, it may be either, so it is only looked at. */
    int path = atomic_load_explicit(&t->path, memory_order_acquire);
    if (path == PATH_TCP)
        return;
    char b;
    if (path == PATH_SHM && shunt_real.recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0) {
        int lk = doorbell_lock(t);
        if (lk >= 0) {
            drain_locked(t, fd);
            doorbell_unlock(t, lk);
        }
    }
    doorbell_check_peer(t, fd);
}
