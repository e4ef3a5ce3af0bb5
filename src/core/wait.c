/*
 * wait.c: spinning, sleeping and doorbells.
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
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <string.h>
#include <time.h>

#include "core/init.h"
#include "core/log.h"
#include "core/signals.h"
#include "core/downgrade.h"
#include "core/wait.h"
#include "interpose/real.h"

static long online_cpus = 1;
static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;

void wait_init(void)
{
    online_cpus = sysconf(_SC_NPROCESSORS_ONLN);
}

uint64_t wait_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void wait_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

bool wait_may_spin(void)
{
    return online_cpus >= 2 && shunt_settings.spin_us > 0;
}

bool wait_peer_busy(struct tcp_sock *t)
{
    if (atomic_load_explicit(&t->ch.peer->sleepers, memory_order_relaxed) ||
        atomic_load_explicit(&t->ch.peer->space_sleepers, memory_order_relaxed))
        return false;   /* it sleeps until we act */
    int cpu = sched_getcpu() + 1;
    atomic_store_explicit(&t->ch.self->cpu, cpu, memory_order_relaxed);
    return cpu <= 0 || atomic_load_explicit(&t->ch.peer->cpu, memory_order_relaxed) != cpu;
}

/* Kernel waits that wake for nothing several times in a row (a doorbell
 * another holder of the socket has not drained yet) pause before the next
 * one, 20 us at first and doubling up to 1 ms, so that they never spin. */
void backoff_fruitless(struct backoff *b)
{
    if (++b->fruitless <= 2)
        return;
    unsigned us = b->us ? b->us : 20;
    struct timespec ts = { 0, (long)us * 1000 };
    nanosleep(&ts, NULL);
    b->us = us < 1000 ? us * 2 : 1000;
}

/* After this many fruitless spins in a row a socket stops spinning, and
 * tries again only once in SPIN_RETRY waits. */
#define SPIN_GIVE_UP 8
#define SPIN_RETRY 32

/*
 * Spinning pays only while the peer is running and about to produce.  It
 * never happens on one CPU nor when the peer last ran on this very CPU
 * (the spin would only keep it from running), and it stops at once when
 * the peer itself is asleep waiting for us (its doorbell request is
 * pending): then nothing will arrive until we act.
 */
static bool spin(struct tcp_sock *t, ready_fn ready)
{
    unsigned handlers_ran = shunt_sig_ran;
    unsigned budget_us = shunt_settings.spin_us;
    if (!wait_may_spin())
        return false;
    if (t->spin_fails >= SPIN_GIVE_UP) {
        if (++t->spin_fails < SPIN_GIVE_UP + SPIN_RETRY)
            return false;
        t->spin_fails = SPIN_GIVE_UP - 1;   /* one more chance */
    }
    /* Two ends on one CPU: a spin only keeps the peer from running. */
    int cpu = sched_getcpu() + 1;
    atomic_store_explicit(&t->ch.self->cpu, cpu, memory_order_relaxed);
    if (cpu > 0 && atomic_load_explicit(&t->ch.peer->cpu, memory_order_relaxed) == cpu)
        return false;
    uint64_t deadline = wait_now_ns() + (uint64_t)budget_us * 1000u;
    for (unsigned i = 1;; i++) {
        if (ready(t)) {
            t->spin_fails = 0;
            atomic_fetch_add_explicit(&t->ch.self->spins_won, 1, memory_order_relaxed);
            return true;
        }
        wait_cpu_relax();
        if ((i & 63) == 0) {
            if (wait_now_ns() > deadline || shunt_sig_ran != handlers_ran ||
                atomic_load_explicit(&t->ch.peer->sleepers, memory_order_relaxed) ||
                atomic_load_explicit(&t->ch.peer->space_sleepers, memory_order_relaxed))
                break;
            if ((i & 1023) == 0)
                sched_yield();   /* a peer queued on this CPU gets to run */
        }
    }
    t->spin_fails++;
    atomic_fetch_add_explicit(&t->ch.self->spins_lost, 1, memory_order_relaxed);
    return false;
}

static void retract(atomic_uint *count)
{
    unsigned n = atomic_load(count);
    while (n > 0 && !atomic_compare_exchange_weak(count, &n, n - 1))
        ;
}

static void doorbell_arm(struct tcp_sock *t, int what)
{
    /* seq_cst: ordered before the caller's re-check of the rings; pairs
     * with the fence in wake_peer. */
    if (what & WANT_DATA)
        atomic_fetch_add(&t->ch.self->sleepers, 1);
    if (what & WANT_SPACE)
        atomic_fetch_add(&t->ch.self->space_sleepers, 1);
}

static void doorbell_disarm(struct tcp_sock *t, int what)
{
    if (what & WANT_DATA)
        retract(&t->ch.self->sleepers);
    if (what & WANT_SPACE)
        retract(&t->ch.self->space_sleepers);
}

static int futex_wait(atomic_uint *word, unsigned expected, const struct timespec *tmo)
{
    return syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, tmo, NULL, 0) < 0 ? -errno : 0;
}

static void futex_wake_all(atomic_uint *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* The socket's own timeout for this direction, if it has one. */
static bool socket_timeout(struct tcp_sock *t, int fd, bool for_write, struct timespec *out)
{
    struct timeval tv = t->sndtimeo;
    if (!for_write) {
        socklen_t len = sizeof tv;
        if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) < 0)
            return false;
    }
    if (!tv.tv_sec && !tv.tv_usec)
        return false;
    out->tv_sec = tv.tv_sec;
    out->tv_nsec = tv.tv_usec * 1000;
    return true;
}

/* The one thread of this process that sleeps in the kernel for this
 * endpoint: entered (armed), it blocks in recv(MSG_PEEK) until a doorbell
 * is queued, the peer goes away, a signal or the socket's timeout. */
static int sleep_in_kernel(struct tcp_sock *t, int fd, ready_fn ready, bool for_write)
{
    int result = 0;
    int what = for_write ? WANT_SPACE : WANT_DATA;
    doorbell_enter(t, what);
    /* counted when the doorbell is asked for: the peer may ring for it even
     * if the last look below finds the bytes and the sleep never happens */
    atomic_fetch_add_explicit(&t->ch.self->sleeps, 1, memory_order_relaxed);
    if (!ready(t)) {
        unsigned char b;
        ssize_t r;
        struct timeval tv = t->sndtimeo;
        if (for_write && (tv.tv_sec || tv.tv_usec)) {
            /* recv would time out by SO_RCVTIMEO: wait by the send timeout */
            struct pollfd p = { .fd = fd, .events = POLLIN };
            int ms = (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
            int n = shunt_real.poll(&p, 1, ms > 0 ? ms : 1);
            r = n > 0 ? shunt_real.recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) : -1;
            if (n == 0)
                errno = EAGAIN;
        } else {
            r = shunt_real.recv(fd, &b, 1, MSG_PEEK);   /* sleeps in the kernel until a doorbell */
        }
        if (r == 0) {
            atomic_store(&t->peer_gone, true);
        } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            /* For a reader this is SO_RCVTIMEO or O_NONBLOCK set meanwhile.
             * A writer without SO_SNDTIMEO only stops for O_NONBLOCK. */
            int fl = shunt_real.fcntl(fd, F_GETFL);
            bool nb = fl >= 0 && (fl & O_NONBLOCK);
            atomic_store(&t->nonblock, nb);
            result = for_write && !(tv.tv_sec || tv.tv_usec) && !nb ? 0 : -EAGAIN;
        } else if (r < 0 && errno == EINTR) {
            result = -EINTR;
        } else if (r < 0) {
            atomic_store(&t->peer_gone, true);
        }
    }
    doorbell_leave(t, fd, what);
    return result;
}

/*
 * Several threads of one process may wait on one socket (a reader and a
 * writer, say).  A doorbell byte wakes only the thread that consumes it, so
 * only one of them sleeps in the kernel; the others sleep on a futex and
 * are woken, all of them, whenever that one wakes.  futex waits restart
 * under SA_RESTART like recv does, and take the socket's timeout.
 */
int wait_channel(struct tcp_sock *t, int fd, ready_fn ready, bool for_write)
{
    unsigned ran = shunt_sig_ran, ran_norestart = shunt_sig_ran_norestart;
    if (spin(t, ready))
        return 0;
    if (shunt_sig_ran != ran) {
        /* a handler ran while we spun: the kernel's call would have been
         * interrupted by it (restarted under SA_RESTART, unless the socket
         * has a timeout) */
        struct timespec tmo;
        return signal_interrupts(ran, ran_norestart, socket_timeout(t, fd, for_write, &tmo));
    }
    if (t->ch.side == 1 && (atomic_load(&t->ch.hdr->neg) & NEG_PREFIX_MASK)) {
        /* The client's TCP prefix is still queued ahead of any doorbell, so
         * the companion cannot be slept on: a writer (the only kind that
         * waits now) looks again in a little while. */
        struct timespec pause = { 0, 200000 };
        nanosleep(&pause, NULL);
        return 0;
    }
    crit_lock(&wait_lock);
    unsigned gen = atomic_load(&t->wait_gen);
    /* The kernel sleeper's own signal handler, waiting on the same socket,
     * sleeps in the kernel too: on the futex it would wait for itself. */
    bool nested = t->kernel_sleeper && pthread_equal(t->sleeper, pthread_self());
    bool in_kernel = !t->kernel_sleeper || nested;
    if (in_kernel && !nested) {
        t->kernel_sleeper = true;
        t->sleeper = pthread_self();
    }
    crit_unlock(&wait_lock);

    int result = 0;
    if (in_kernel) {
        uint64_t slept = wait_now_ns();
        result = sleep_in_kernel(t, fd, ready, for_write);
        /* Woken soon after giving up: the peer is busy with us, and a spin
         * a little longer would have caught it.  Spin again at once. */
        if (wait_now_ns() - slept < 4000u * (uint64_t)shunt_settings.spin_us)
            t->spin_fails = 0;
        if (nested)
            return result;
        crit_lock(&wait_lock);
        t->kernel_sleeper = false;
        atomic_fetch_add(&t->wait_gen, 1);
        bool others = t->futex_waiters > 0;
        crit_unlock(&wait_lock);
        if (others)
            futex_wake_all(&t->wait_gen);
    } else if (!ready(t)) {
        struct timespec tmo;
        bool timed = socket_timeout(t, fd, for_write, &tmo);
        crit_lock(&wait_lock);
        t->futex_waiters++;
        crit_unlock(&wait_lock);
        int r = futex_wait(&t->wait_gen, gen, timed ? &tmo : NULL);
        crit_lock(&wait_lock);
        t->futex_waiters--;
        crit_unlock(&wait_lock);
        if (r == -ETIMEDOUT)
            result = -EAGAIN;
        else if (r == -EINTR)
            result = -EINTR;
    }
    return result;
}

void wake_peer(struct tcp_sock *t, int fd, int what)
{
    /* seq_cst fence: our ring update is ordered before the load of the
     * peer's requests, pairing with the seq_cst increment in doorbell_arm:
     * either the peer's last look sees the update or we see its request. */
    atomic_thread_fence(memory_order_seq_cst);
    struct chan_side *peer = t->ch.peer;
    bool ring = false;
    /* Only a peer waiting for what we made happen is woken: a reader is not
     * woken because we freed space, nor a writer because we wrote. */
    if ((what & WANT_DATA) && atomic_load_explicit(&peer->sleepers, memory_order_relaxed))
        ring |= atomic_exchange(&peer->sleepers, 0) != 0;
    if ((what & WANT_SPACE) && atomic_load_explicit(&peer->space_sleepers, memory_order_relaxed))
        ring |= atomic_exchange(&peer->space_sleepers, 0) != 0;
    /* One byte wakes every sleeper of the peer: none of them consumes it. */
    if (ring) {
        atomic_fetch_add_explicit(&t->ch.self->doorbells, 1, memory_order_relaxed);
        doorbell_send(t, fd);
    }
}

bool doorbell_send(struct tcp_sock *t, int fd)
{
    _Atomic uint64_t *w = &t->ch.self->bells;
    uint64_t v = atomic_load(w);
    do {
        if (v & BELLS_FROZEN)
            return false;   /* the connection is moving back to TCP: no byte may follow */
    } while (!atomic_compare_exchange_weak(w, &v, v + BELLS_BUSY));
    ssize_t r = shunt_real.send(fd, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    /* busy to counted in one step: a freeze never sees a sent byte uncounted */
    atomic_fetch_add(w, (r == 1 ? 1 : 0) - BELLS_BUSY);
    return r == 1;
}

void doorbell_ate(struct tcp_sock *t, size_t n)
{
    atomic_fetch_add(&t->ch.self->bells_eaten, (uint64_t)n);
}

int doorbell_lock(struct tcp_sock *t)
{
    return dir_lock(t, &wait_lock, &t->ch.self->wait_lock);
}

void doorbell_unlock(struct tcp_sock *t, int token)
{
    dir_unlock(&wait_lock, &t->ch.self->wait_lock, token);
}

/* Consumes every queued doorbell; a server's TCP prefix is data and stays. */
static void drain_locked(struct tcp_sock *t, int fd)
{
    if (t->ch.side == 1 && (atomic_load(&t->ch.hdr->neg) & NEG_PREFIX_MASK))
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
        if (downgrade_leaving_side(t))
            return;
        limit = downgrade_bells_left(t);
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
    int lk = dir_lock(t, &wait_lock, &t->ch.self->wait_lock);
    atomic_fetch_add(&t->ch.self->waiters, 1);
    doorbell_arm(t, what);
    if (lk >= 0)
        dir_unlock(&wait_lock, &t->ch.self->wait_lock, lk);
}

void doorbell_leave(struct tcp_sock *t, int fd, int what)
{
    doorbell_disarm(t, what);
    int lk = dir_lock(t, &wait_lock, &t->ch.self->wait_lock);
    if (atomic_fetch_sub(&t->ch.self->waiters, 1) == 1 && lk >= 0)
        drain_locked(t, fd);
    if (lk >= 0)
        dir_unlock(&wait_lock, &t->ch.self->wait_lock, lk);
}

void doorbell_forget(struct tcp_sock *t, int what)
{
    doorbell_disarm(t, what);
    int lk = dir_lock(t, &wait_lock, &t->ch.self->wait_lock);
    atomic_fetch_sub(&t->ch.self->waiters, 1);
    if (lk >= 0)
        dir_unlock(&wait_lock, &t->ch.self->wait_lock, lk);
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
