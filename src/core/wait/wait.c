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
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <string.h>
#include <time.h>

#include "core/fd/call_marks.h"
#include "base/self.h"
#include "base/log.h"
#include "base/signals.h"
#include "core/conn/downgrade.h"
#include "core/kinds/epoll.h"
#include "core/wait/turns.h"
#include "core/wait/wait.h"
#include "core/wait/xwake.h"
#include "base/real.h"

static long online_cpus = 1;
static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;

static void drain_locked(struct tcp_sock *t, int fd);

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
    return !atomic_load_explicit(&t->ch.peer->sleepers, memory_order_relaxed) &&
           !atomic_load_explicit(&t->ch.peer->space_sleepers, memory_order_relaxed);
}

bool wait_peer_here(struct tcp_sock *t)
{
    int cpu = sched_getcpu() + 1;
    atomic_store_explicit(&t->ch.self->cpu, cpu, memory_order_relaxed);
    return cpu > 0 && atomic_load_explicit(&t->ch.peer->cpu, memory_order_relaxed) == cpu;
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
 * never happens on one CPU, and it stops at once when the peer itself is
 * asleep waiting for us (its doorbell request is pending): then nothing
 * will arrive until we act.  When the peer last ran on this very CPU the
 * spin yields at every look, not every 64th: the peer, queued behind us,
 * runs at the yield, and as neither end sleeps no doorbell is rung either
 * way.  Two ends that share a CPU (more busy threads than CPUs) then hand
 * it to each other for the price of a sched_yield, where sleeping costs
 * each a doorbell (a TCP segment), a kernel wait and a drain: memcached with
 * 8 connections went from 2.1x to 3.1x kernel TCP (docs/benchmarks.md).
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
    bool here = wait_peer_here(t);
    uint64_t deadline = wait_now_ns() + (uint64_t)budget_us * 1000u;
    for (unsigned i = 1;; i++) {
        if (ready(t)) {
            t->spin_fails = 0;
            atomic_fetch_add_explicit(&t->ch.self->spins_won, 1, memory_order_relaxed);
            return true;
        }
        wait_cpu_relax();
        if ((i & 63) == 0 || here) {
            uint64_t now = wait_now_ns();
            if (now > deadline || shunt_sig_ran != handlers_ran ||
                atomic_load_explicit(&t->close_waiting, memory_order_relaxed) ||
                atomic_load_explicit(&t->ch.peer->sleepers, memory_order_relaxed) ||
                atomic_load_explicit(&t->ch.peer->space_sleepers, memory_order_relaxed))
                break;
            turn_spin_yield(now);
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

/* The socket's own timeout for this direction, if it has one.  SO_RCVTIMEO
 * is asked of the kernel once (an accepted socket inherits the listener's)
 * and kept up to date by setsockopt; while another process holds the
 * socket, which may change it, it is asked every time. */
static bool socket_timeout(struct tcp_sock *t, int fd, bool for_write, struct timespec *out)
{
    struct timeval tv = t->sndtimeo;
    if (!for_write) {
        bool shared = atomic_load_explicit(&t->ch.self->holders, memory_order_relaxed) > 1;
        if (!t->rcvtimeo_known || shared) {
            socklen_t len = sizeof tv;
            if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) < 0)
                return false;
            t->rcvtimeo = tv;
            t->rcvtimeo_known = true;
        }
        tv = t->rcvtimeo;
    }
    if (!tv.tv_sec && !tv.tv_usec)
        return false;
    out->tv_sec = tv.tv_sec;
    out->tv_nsec = tv.tv_usec * 1000;
    return true;
}

/*
 * The local wake.  A thread asleep in the kernel for a socket wakes for a
 * doorbell from the peer, but shutdown by another thread of this process
 * must wake it too (the kernel's shutdown wakes every waiter of the
 * socket).  So a kernel sleeper watches, beside its companion, one
 * eventfd of the process (made at the first sleep, close-on-exec, kept at
 * a high fd number that the program's close and dup2 never take).  A
 * sleeper registers (lw_pollers, the socket's local_sleepers) under
 * wait_lock before its last look at the rings; shutdown, having changed
 * the state, writes the eventfd if that socket has a registered sleeper
 * and it is not written already (lw_dirty): every registered sleeper then
 * wakes and looks again.  The eventfd is read empty when the last
 * registered sleeper leaves; until then nobody registers anew (a new
 * sleeper would wake at once, again and again): such a sleeper sleeps
 * without it, a millisecond at a time.  So a wake is never lost and a
 * stale one makes nobody spin.
 */
static int lw_fd = -1;          /* wait_lock */
static unsigned lw_pollers;     /* wait_lock */
static bool lw_dirty;           /* wait_lock */
static bool lw_failed;          /* wait_lock */

/* Private fds live near the top of the fd limit, away from the low numbers
 * a program expects its next socket or file to get. */
int wait_private_dup(int fd)
{
    struct rlimit rl;
    long floor = 3;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        long cur = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1 << 20) ? (1 << 20) : (long)rl.rlim_cur;
        floor = cur > 256 ? cur - 64 : cur / 2;
    }
    int hi = shunt_real.fcntl(fd, F_DUPFD_CLOEXEC, floor > 3 ? floor : 3);
    if (hi < 0)
        hi = shunt_real.fcntl(fd, F_DUPFD_CLOEXEC, 3);
    return hi;
}

int wait_local_fd(void)
{
    return __atomic_load_n(&lw_fd, __ATOMIC_RELAXED);
}

static void lw_drain(void)
{
    uint64_t v;
    if (shunt_real.read(lw_fd, &v, sizeof v) < 0 && errno != EAGAIN)
        shunt_log(LOG_DEBUG, "local wake: read: %s", strerror(errno));
    lw_dirty = false;
}

/* Under wait_lock. */
static int lw_register(struct tcp_sock *t, int *efd)
{
    if (lw_fd < 0) {
        if (lw_failed)
            return LW_NONE;
        int e = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        int hi = e >= 0 ? wait_private_dup(e) : -1;
        if (e >= 0)
            shunt_real.close(e);
        if (hi < 0) {
            lw_failed = true;
            shunt_log(LOG_WARN, "local wake: no eventfd (%s): a shutdown by one thread will not wake "
                      "another blocked on the socket", strerror(errno));
            return LW_NONE;
        }
        __atomic_store_n(&lw_fd, hi, __ATOMIC_RELAXED);
    }
    if (lw_dirty && lw_pollers == 0)
        lw_drain();
    if (lw_dirty)
        return LW_BUSY;
    lw_pollers++;
    t->local_sleepers++;
    *efd = lw_fd;
    return LW_ON;
}

/* Under wait_lock. */
static void lw_unregister(struct tcp_sock *t, int lw)
{
    if (lw != LW_ON)
        return;
    lw_pollers--;
    t->local_sleepers--;
    if (lw_pollers == 0 && lw_dirty)
        lw_drain();
}

void wait_wake_local(struct tcp_sock *t)
{
    crit_lock(&wait_lock);
    if (t->local_sleepers > 0 && !lw_dirty && lw_fd >= 0) {
        uint64_t one = 1;
        if (shunt_real.write(lw_fd, &one, sizeof one) == (ssize_t)sizeof one)
            lw_dirty = true;
    }
    atomic_fetch_add(&t->wait_gen, 1);
    bool others = t->futex_waiters > 0;
    crit_unlock(&wait_lock);
    if (others)
        futex_wake_all(&t->wait_gen);
}

void wait_local_lost(int efd)
{
    crit_lock(&wait_lock);
    if (lw_fd == efd) {
        /* closed behind libc's back (a raw close system call): a new one at
         * the next sleep, rather than a sleep that never blocks */
        shunt_log(LOG_WARN, "local wake: fd %d was closed under shunt; making another", efd);
        __atomic_store_n(&lw_fd, -1, __ATOMIC_RELAXED);
        lw_dirty = false;
    }
    crit_unlock(&wait_lock);
}

bool wait_relocate_local(int fd)
{
    bool moved = false;
    crit_lock(&wait_lock);
    if (lw_fd >= 0 && lw_fd == fd) {
        /* the same eventfd under another number: a sleeper that watches
         * the old one still sees every wake */
        int hi = wait_private_dup(fd);
        if (hi >= 0) {
            __atomic_store_n(&lw_fd, hi, __ATOMIC_RELAXED);
            moved = true;
        }
    }
    crit_unlock(&wait_lock);
    return moved;
}

void wait_wake_shutdown(struct tcp_sock *t, int fd)
{
    wait_wake_local(t);
    epoll_socket_changed(t, fd);
    xwake_send(t);
}

void wait_after_fork_child(void)
{
    /* the parent's threads are not here, and its eventfd is its own */
    lw_pollers = 0;
    lw_dirty = false;
    if (lw_fd >= 0) {
        int e = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (e < 0 || shunt_real.dup3(e, lw_fd, O_CLOEXEC) < 0) {
            shunt_real.close(lw_fd);
            lw_fd = -1;
        }
        if (e >= 0)
            shunt_real.close(e);
    }
}

void wait_forget_threads(struct tcp_sock *t)
{
    t->kernel_sleeper = false;
    t->futex_waiters = 0;
    t->local_sleepers = 0;
    t->blocked_calls = 0;
    t->close_deferred = false;
}

void wait_calls_settle(struct tcp_sock *t)
{
    atomic_store(&t->close_waiting, true);
    uint64_t give_up = wait_now_ns() + 2000000000ull;
    for (unsigned i = 0;; i++) {
        crit_lock(&wait_lock);
        bool settled = call_marks_on(&t->base) <= t->blocked_calls;
        crit_unlock(&wait_lock);
        /* after a downgrade a call may wait in the kernel's TCP: the close
         * is downgrade.c's then */
        if (settled || atomic_load(&t->path) != PATH_SHM || atomic_load(&t->ch.hdr->down))
            break;
        if (wait_now_ns() > give_up) {
            shunt_log_sock(LOG_WARN, t, -1, "closed while a call of another thread is under way, "
                           "which neither returned nor slept for 2 s: the peer sees the end now");
            break;
        }
        if (i < 64) {
            sched_yield();
        } else {
            struct timespec pause = { 0, 100000 };
            nanosleep(&pause, NULL);
        }
    }
    atomic_store(&t->close_waiting, false);
}

bool wait_defer_close(struct tcp_sock *t, int fd)
{
    crit_lock(&wait_lock);
    bool defer = t->blocked_calls > 0 && !t->close_deferred;
    if (defer) {
        int own = wait_private_dup(fd);
        if (own < 0) {
            shunt_log_sock(LOG_WARN, t, fd, "closed while a call waits on it, and no fd left to keep it "
                           "(%s): the peer sees the end at once", strerror(errno));
            defer = false;
        } else {
            atomic_store(&t->own_fd, own);
            t->close_deferred = true;
        }
    }
    crit_unlock(&wait_lock);
    return defer;
}

void wait_undefer_close(struct tcp_sock *t)
{
    crit_lock(&wait_lock);
    t->close_deferred = false;
    crit_unlock(&wait_lock);
}

/* This call now waits (wait_lock held): a close of the socket meanwhile
 * leaves the connection open until it returns (tcp_call_done). */
static void count_blocked(struct tcp_sock *t, bool *blocked)
{
    if (!*blocked) {
        *blocked = true;
        t->blocked_calls++;
    }
}

void wait_call_blocks(struct tcp_sock *t, bool *blocked)
{
    crit_lock(&wait_lock);
    count_blocked(t, blocked);
    crit_unlock(&wait_lock);
}

bool wait_call_done(struct tcp_sock *t)
{
    crit_lock(&wait_lock);
    bool finish = t->blocked_calls > 0 && --t->blocked_calls == 0 && t->close_deferred;
    if (finish)
        t->close_deferred = false;
    crit_unlock(&wait_lock);
    return finish;
}

/* Announces a sleep (as doorbell_enter) and registers for the local wake,
 * in one section of the wait locks; opens the end's wake FIFO first (a
 * path lookup, outside the locks), before the caller's last look. */
int doorbell_enter_local(struct tcp_sock *t, int what, int *efd, int *xfd)
{
    *xfd = xwake_open(t);
    int lk = dir_lock(t, &wait_lock, &t->ch.self->wait_lock);
    atomic_fetch_add(&t->ch.self->waiters, 1);
    doorbell_arm(t, what);
    if (lk < 0)
        return LW_NONE;   /* the lock is not held: the local state is left alone */
    int lw = lw_register(t, efd);
    dir_unlock(&wait_lock, &t->ch.self->wait_lock, lk);
    return lw;
}

void doorbell_leave_local(struct tcp_sock *t, int fd, int what, int lw, int xfd)
{
    doorbell_disarm(t, what);
    int lk = dir_lock(t, &wait_lock, &t->ch.self->wait_lock);
    if (lk >= 0)
        lw_unregister(t, lw);
    if (atomic_fetch_sub(&t->ch.self->waiters, 1) == 1 && lk >= 0)
        drain_locked(t, fd);
    if (lk >= 0)
        dir_unlock(&wait_lock, &t->ch.self->wait_lock, lk);
    xwake_close(xfd);
}


/* The kernel wait itself: the companion (a doorbell, the peer's death),
 * the local wake and the end's wake from other processes, with the
 * socket's timeout for this direction. */
static int kernel_wait(struct tcp_sock *t, int fd, bool for_write, int lw, int efd, int xfd)
{
    if (atomic_load_explicit(&t->nonblock, memory_order_relaxed) == 1)
        return -EAGAIN;   /* O_NONBLOCK set meanwhile (fcntl or FIONBIO of this process) */
    bool shared = atomic_load_explicit(&t->ch.self->holders, memory_order_relaxed) > 1;
    if (shared) {
        /* another holder may have made the open file non-blocking */
        int fl = shunt_real.fcntl(fd, F_GETFL);
        if (fl >= 0 && (fl & O_NONBLOCK)) {
            atomic_store(&t->nonblock, 1);
            return -EAGAIN;
        }
    }
    struct timespec tmo, cap = { 0, 1000000 };
    bool timed = socket_timeout(t, fd, for_write, &tmo);
    bool capped = false;
    if (lw == LW_BUSY && (!timed || tmo.tv_sec > 0 || tmo.tv_nsec > cap.tv_nsec)) {
        tmo = cap;   /* a wake is being emptied: look again soon */
        capped = true;
    }
    struct pollfd p[3] = {
        { .fd = fd, .events = POLLIN | POLLRDHUP },
        { .fd = lw == LW_ON ? efd : -1, .events = POLLIN },
        { .fd = xfd, .events = POLLIN },
    };
    unsigned ran = shunt_sig_ran, ran_norestart = shunt_sig_ran_norestart;
    int n = shunt_real.ppoll(p, 3, timed || capped ? &tmo : NULL, NULL);
    if (n < 0) {
        if (errno == EINTR)   /* SA_RESTART without a timeout goes on, as recv would */
            return shunt_sig_ran == ran ? -EINTR : signal_interrupts(ran, ran_norestart, timed);
        atomic_store(&t->peer_gone, true);
        return 0;
    }
    if (n == 0)
        return capped ? 0 : -EAGAIN;   /* the socket's timeout */
    if (p[1].revents & POLLNVAL)
        wait_local_lost(efd);
    if (p[0].revents & POLLNVAL) {
        if (tcp_call_fd(t, fd) == fd)   /* else the program closed it meanwhile: look again */
            atomic_store(&t->peer_gone, true);
    } else if (p[0].revents & (POLLHUP | POLLERR | POLLRDHUP)) {
        doorbell_check_peer(t, fd);   /* the end, or doorbells still ahead of it */
    }
    return 0;
}

/* The one thread of this process that sleeps in the kernel for this
 * endpoint: it asks for a doorbell, looks at the rings a last time and
 * waits in the kernel until a doorbell is queued, the peer goes away,
 * another thread shuts the socket down, a signal or the socket's timeout. */
static int sleep_in_kernel(struct tcp_sock *t, int fd, ready_fn ready, bool for_write)
{
    int result = 0;
    int what = for_write ? WANT_SPACE : WANT_DATA;
    int efd = -1, xfd = -1;
    int lw = doorbell_enter_local(t, what, &efd, &xfd);
    /* counted when the doorbell is asked for: the peer may ring for it even
     * if the last look below finds the bytes and the sleep never happens */
    atomic_fetch_add_explicit(&t->ch.self->sleeps, 1, memory_order_relaxed);
    if (!ready(t)) {
        result = kernel_wait(t, fd, for_write, lw, efd, xfd);
        turn_gave_way(wait_now_ns());
    }
    doorbell_leave_local(t, tcp_call_fd(t, fd), what, lw, xfd);
    return result;
}

/*
 * Several threads of one process may wait on one socket (a reader and a
 * writer, say).  A doorbell byte wakes only the thread that consumes it, so
 * only one of them sleeps in the kernel; the others sleep on a futex and
 * are woken, all of them, whenever that one wakes.  futex waits restart
 * under SA_RESTART like recv does, and take the socket's timeout.
 */
int wait_channel(struct tcp_sock *t, int fd, ready_fn ready, bool for_write, bool *blocked)
{
    fd = tcp_call_fd(t, fd);
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
    if (blocked)
        count_blocked(t, blocked);
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
    } else {
        /* Our want is asked for too, though the kernel sleeper may wait for
         * something else (a reader, while we wait for space): the peer's
         * byte wakes it, and it wakes us.  Unasked, the peer would free
         * space without a word while the reader waits for bytes the peer
         * sends only after more of ours: both ends stuck. */
        int what = for_write ? WANT_SPACE : WANT_DATA;
        doorbell_enter(t, what);
        atomic_fetch_add_explicit(&t->ch.self->sleeps, 1, memory_order_relaxed);
        if (!ready(t)) {
            struct timespec tmo;
            bool timed = socket_timeout(t, fd, for_write, &tmo);
            crit_lock(&wait_lock);
            t->futex_waiters++;
            crit_unlock(&wait_lock);
            int r = futex_wait(&t->wait_gen, gen, timed ? &tmo : NULL);
            turn_gave_way(wait_now_ns());
            crit_lock(&wait_lock);
            t->futex_waiters--;
            crit_unlock(&wait_lock);
            if (r == -ETIMEDOUT)
                result = -EAGAIN;
            else if (r == -EINTR)
                result = -EINTR;
        }
        doorbell_leave(t, fd, what);
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
    /* Two sockets take no doorbell: a server's whose client's TCP prefix is
     * still queued (it never sleeps on it: the prefix keeps it readable, and
     * a byte queued behind the prefix could not be taken out without it
     * when the server is handed to a program without shunt), and a closed
     * end's (nobody waits there, and its kernel would answer with a reset
     * that cuts off the copy it left in TCP; downgrade.c). */
    if ((t->ch.side == 0 && (atomic_load(&t->ch.hdr->neg) & NEG_PREFIX_MASK)) ||
        (atomic_load(&t->ch.peer->state) & SIDE_CLOSED))
        return false;
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
    /* the program may have closed fd since the caller looked: the close
     * kept its copy under this lock (wait_defer_close) */
    fd = tcp_call_fd(t, fd);
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
    } else if (atomic_load(&t->ch.peer->bells) & BELLS_FROZEN) {
        /* the peer closed and left behind its doorbells a copy of what we
         * had not read (downgrade_close_copy): the same bound */
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
