/*
 * wait.c: spinning, sleeping and doorbells.
 *
 * Doorbell accounting.  chan_side.sleepers counts requests for a doorbell.
 * A waker takes the whole count with one exchange and sends that many
 * bytes.  A sleeper blocked in recv() consumes exactly one byte; a sleeper
 * that stops waiting without a byte takes one count back if any is left.
 * So queued bytes plus counts never fall below the number of blocked
 * sleepers: nobody misses a wake-up, and the worst case is a spurious one.
 * Bytes nobody consumed are drained by doorbell_drain, under wait_lock so
 * that no sleeper can be about to block on one of them.
 */
#include <poll.h>
#include <sched.h>
#include <time.h>

#include "core/init.h"
#include "core/wait.h"
#include "interpose/real.h"

static long online_cpus = 1;
static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;

void wait_init(void)
{
    online_cpus = sysconf(_SC_NPROCESSORS_ONLN);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* After this many fruitless spins in a row a socket stops spinning, and
 * tries again only once in SPIN_RETRY waits. */
#define SPIN_GIVE_UP 8
#define SPIN_RETRY 32

/*
 * Spinning pays only while the peer is running and about to produce.  It
 * never happens on one CPU, and it stops at once when the peer itself is
 * asleep waiting for us (its doorbell request is pending): then nothing
 * will arrive until we act.
 */
static bool spin(struct tcp_sock *t, ready_fn ready)
{
    unsigned budget_us = shunt_settings.spin_us;
    if (online_cpus < 2 || budget_us == 0)
        return false;
    if (t->spin_fails >= SPIN_GIVE_UP) {
        if (++t->spin_fails < SPIN_GIVE_UP + SPIN_RETRY)
            return false;
        t->spin_fails = SPIN_GIVE_UP - 1;   /* one more chance */
    }
    uint64_t deadline = now_ns() + (uint64_t)budget_us * 1000u;
    for (unsigned i = 1;; i++) {
        if (ready(t)) {
            t->spin_fails = 0;
            return true;
        }
        cpu_relax();
        if ((i & 63) == 0) {
            if (now_ns() > deadline || atomic_load_explicit(&t->ch.peer->sleepers, memory_order_relaxed))
                break;
            if ((i & 4095) == 0)
                sched_yield();   /* a peer queued on this CPU gets to run */
        }
    }
    t->spin_fails++;
    return false;
}

static void retract(struct chan_side *self)
{
    unsigned n = atomic_load(&self->sleepers);
    while (n > 0 && !atomic_compare_exchange_weak(&self->sleepers, &n, n - 1))
        ;
}

void doorbell_arm(struct tcp_sock *t)
{
    /* seq_cst: ordered before the caller's re-check of the rings; pairs
     * with the fence in wake_peer. */
    atomic_fetch_add(&t->ch.self->sleepers, 1);
}

void doorbell_disarm(struct tcp_sock *t)
{
    retract(t->ch.self);
}

int wait_channel(struct tcp_sock *t, int fd, ready_fn ready, bool for_write)
{
    if (spin(t, ready))
        return 0;
    struct chan_side *self = t->ch.self;
    pthread_mutex_lock(&wait_lock);
    atomic_fetch_add(&self->waiters, 1);
    doorbell_arm(t);
    pthread_mutex_unlock(&wait_lock);

    int result = 0;
    bool consumed = false;
    if (!ready(t)) {
        unsigned char b;
        ssize_t r;
        struct timeval tv = t->sndtimeo;
        if (for_write && (tv.tv_sec || tv.tv_usec)) {
            struct pollfd p = { .fd = fd, .events = POLLIN };
            int ms = (int)(tv.tv_sec * 1000 + tv.tv_usec / 1000);
            int n = shunt_real.poll(&p, 1, ms > 0 ? ms : 1);
            if (n == 0) {
                r = -1;
                errno = EAGAIN;
            } else if (n < 0) {
                r = -1;
            } else {
                r = shunt_real.recv(fd, &b, 1, MSG_DONTWAIT);
                if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
                    r = -1, errno = EINPROGRESS;   /* woken but the byte went to another thread */
            }
        } else {
            r = shunt_real.recv(fd, &b, 1, 0);   /* sleeps in the kernel until a doorbell */
        }
        if (r == 1) {
            consumed = true;
        } else if (r == 0) {
            atomic_store(&t->peer_gone, true);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            /* For a reader this is SO_RCVTIMEO or O_NONBLOCK set meanwhile.
             * A writer without SO_SNDTIMEO only stops for O_NONBLOCK. */
            int fl = shunt_real.fcntl(fd, F_GETFL);
            bool nb = fl >= 0 && (fl & O_NONBLOCK);
            atomic_store(&t->nonblock, nb);
            result = for_write && !(tv.tv_sec || tv.tv_usec) && !nb ? 0 : -EAGAIN;
        } else if (errno == EINTR) {
            result = -EINTR;
        } else if (errno != EINPROGRESS) {
            atomic_store(&t->peer_gone, true);
        }
    }
    if (!consumed)
        retract(self);
    atomic_fetch_sub(&self->waiters, 1);
    return result;
}

void wake_peer(struct tcp_sock *t, int fd)
{
    static const char zeros[256];
    /* seq_cst fence: our ring update is ordered before the load of the
     * peer's request, pairing with the seq_cst increment in doorbell_arm:
     * either the peer's re-check sees the update or we see its request. */
    atomic_thread_fence(memory_order_seq_cst);
    struct chan_side *peer = t->ch.peer;
    if (atomic_load_explicit(&peer->sleepers, memory_order_relaxed) == 0)
        return;
    unsigned n = atomic_exchange(&peer->sleepers, 0);
    if (n > sizeof zeros)
        n = sizeof zeros;   /* a scribbled count must not make us loop */
    if (n)
        shunt_real.send(fd, zeros, n, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void doorbell_drain(struct tcp_sock *t, int fd)
{
    /* A server's companion starts with the client's TCP prefix: data, not doorbells. */
    if (t->ch.side == 1 && (atomic_load(&t->ch.hdr->neg) & NEG_PREFIX_MASK))
        return;
    pthread_mutex_lock(&wait_lock);
    if (atomic_load(&t->ch.self->waiters) == 0) {
        char buf[256];
        for (;;) {
            ssize_t r = shunt_real.recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (r > 0)
                continue;
            if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                atomic_store(&t->peer_gone, true);
            break;
        }
    }
    pthread_mutex_unlock(&wait_lock);
}
