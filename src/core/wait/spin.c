/*
 * spin.c: spinning before a sleep, and whether it can pay: the CPUs, where
 * the peer runs, and how often spins on a socket found nothing.
 */
#include <sched.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/self.h"
#include "base/signals.h"
#include "core/wait/turns.h"
#include "core/wait/wait_shared.h"

/* The CPUs that may run at once, read at the first wait that asks (0: not
 * yet): a file read (/sys/devices/system/cpu/online) that a process which
 * never waits on a socket of ours, a program run once per connection say,
 * does not pay at its start (17 to 30 us there, docs/benchmarks.md).  Two
 * threads that ask at once read the same number. */
static atomic_long online_cpus;

static long cpus(void)
{
    long n = atomic_load_explicit(&online_cpus, memory_order_relaxed);
    if (n == 0) {
        n = sysconf(_SC_NPROCESSORS_ONLN);
        if (n < 1)
            n = 1;   /* unknown: as one, which never spins */
        atomic_store_explicit(&online_cpus, n, memory_order_relaxed);
    }
    return n;
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
    return shunt_settings.spin_us > 0 && cpus() >= 2;
}

/* The peer asleep waiting for us: for a doorbell, or on its futex. */
static bool peer_asleep(struct tcp_sock *t)
{
    struct chan_side *p = t->ch.peer;
    return atomic_load_explicit(&p->sleepers, memory_order_relaxed) ||
           atomic_load_explicit(&p->space_sleepers, memory_order_relaxed) ||
           atomic_load_explicit(&p->fsleepers, memory_order_relaxed) ||
           atomic_load_explicit(&p->fspace_sleepers, memory_order_relaxed);
}

bool wait_peer_busy(struct tcp_sock *t)
{
    return !peer_asleep(t);
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
/* The count of fruitless spins is the socket's, so a reader and a writer
 * thread of it update it at once (issue 16: a data race, as a plain int).
 * Relaxed loads and stores, not read-modify-writes: it is a hint, a lost
 * update costs one spin more or less, and no locked instruction is added
 * to the data path. */
static unsigned fails_get(struct tcp_sock *t)
{
    return atomic_load_explicit(&t->spin_fails, memory_order_relaxed);
}

static void fails_set(struct tcp_sock *t, unsigned n)
{
    atomic_store_explicit(&t->spin_fails, n, memory_order_relaxed);
}

void wait_spin_paid(struct tcp_sock *t)
{
    fails_set(t, 0);
}

/* This thread's involuntary context switches so far: it rises across a
 * sched_yield only if the yield gave the CPU to another runnable thread. */
static long switches_taken(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) < 0)
        return -1;
    return ru.ru_nivcsw;
}

/* Until when this thread does not spin: a yield of its spin gave the CPU
 * away and it was still not ready, so the CPU is wanted by others. */
static _Thread_local uint64_t crowded_until;
#define CROWDED_NS 2000000u

bool wait_spin(struct tcp_sock *t, ready_fn ready)
{
    unsigned handlers_ran = shunt_sig_ran;
    unsigned budget_us = shunt_settings.spin_us;
    if (!wait_may_spin())
        return false;
    unsigned fails = fails_get(t);
    if (fails >= SPIN_GIVE_UP) {
        if (fails + 1 < SPIN_GIVE_UP + SPIN_RETRY) {
            fails_set(t, fails + 1);
            return false;
        }
        fails_set(t, SPIN_GIVE_UP - 1);   /* one more chance */
    }
    uint64_t start = clock_now_ns();
    if (start < crowded_until)
        return false;
    bool here = wait_peer_here(t);
    uint64_t deadline = start + (uint64_t)budget_us * 1000u;
    for (unsigned i = 1;; i++) {
        if (ready(t)) {
            fails_set(t, 0);
            atomic_fetch_add_explicit(&t->ch.self->spins_won, 1, memory_order_relaxed);
            return true;
        }
        wait_cpu_relax();
        if ((i & 63) == 0 || here) {
            uint64_t now = clock_now_ns();
            if (now > deadline || shunt_sig_ran != handlers_ran ||
                atomic_load_explicit(&t->close_waiting, memory_order_relaxed) || peer_asleep(t))
                break;
            long before = switches_taken();
            turn_spin_yield(now);
            if (before >= 0 && switches_taken() != before) {
                crowded_until = clock_now_ns() + CROWDED_NS;
                if (ready(t))
                    continue;
                break;
            }
        }
    }
    fails_set(t, fails_get(t) + 1);
    atomic_fetch_add_explicit(&t->ch.self->spins_lost, 1, memory_order_relaxed);
    return false;
}
