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

bool wait_peer_known(struct tcp_sock *t)
{
    return atomic_load_explicit(&t->ch.peer->cpu, memory_order_relaxed) != 0;
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

/*
 * A crowded CPU.  A spin's yield that gave the CPU away (the peer, or
 * another thread, was queued behind us) ends the spin, unless what it waits
 * for is there, and no spin of this thread starts for CROWDED_NS: the
 * thread sleeps, and the scheduler, which places a woken thread on an idle
 * CPU, can part two ends that hand one CPU to each other by yields (a
 * ping-pong stuck so ran at 4.5 us a round trip, against 0.3 us apart).
 *
 * But a yield whose CPU went to a thread that runs out its slice costs the
 * spinner that whole slice (3 to 4 ms here, where a wait is microseconds),
 * and the scheduler (EEVDF) puts a thread that yields behind the others for
 * a slice more: on two CPUs with two busy loops beside it, 4 MiB downloads
 * whose ends spun ran at 0.46x kernel TCP, 16 MiB ones at 0.65x, every 2 ms
 * paying a slice again (docs/benchmarks.md, "Downloads").  So a yield away
 * for CROWDED_AWAY_NS or more while the peer runs on another CPU (known: it
 * has spun once; a peer that never did is one starting, a process exec'd
 * and connecting, which is no crowd) marks the CPU crowded for longer:
 * CROWDED_FIRST_NS, doubled by each such finding that follows the last
 * while's end within twice its length, up to CROWDED_MAX_NS, so that a busy
 * machine's thread pays a slice in 20 ms at first and one in 1.6 s at
 * length.  Why 2 ms: the busy servers of bench/busyserv.c (many threads
 * per CPU, each running briefly) come back from most yields within 2 ms,
 * and their spins pay (with 0.5 ms, 8 clients fell from 1.1x kernel TCP to
 * 1.0x); a busy loop's slice here is 3 to 4 ms.
 */
#define CROWDED_NS 2000000u
#define CROWDED_AWAY_NS 2000000u
#define CROWDED_FIRST_NS 20000000u
#define CROWDED_MAX_NS 1600000000u
static _Thread_local uint64_t crowded_until, crowded_hold, crowded_long_end;

bool wait_crowded(uint64_t now)
{
    return now < crowded_until;
}

/* Whether the yield just made (the spin's last look at the clock: now)
 * kept this thread away for long. */
static bool away_long(uint64_t now)
{
    return clock_now_ns() - now >= CROWDED_AWAY_NS;
}

int wait_spin_yield(uint64_t now)
{
    long before = switches_taken();
    turn_spin_yield(now);
    if (before < 0 || switches_taken() == before)
        return YIELD_KEPT;
    return away_long(now) ? YIELD_LONG : YIELD_SHORT;
}

bool wait_spin_yield_long(uint64_t now)
{
    turn_spin_yield(now);
    return away_long(now);
}

void wait_crowded_briefly(void)
{
    uint64_t until = clock_now_ns() + CROWDED_NS;
    if (until > crowded_until)
        crowded_until = until;
}

void wait_crowded_found(void)
{
    uint64_t now = clock_now_ns();
    /* in a row: found again soon after the last such while ended */
    bool again = crowded_hold && (now < crowded_long_end || now - crowded_long_end < 2 * crowded_hold);
    crowded_hold = !again ? CROWDED_FIRST_NS : crowded_hold < CROWDED_MAX_NS / 2 ? 2 * crowded_hold : CROWDED_MAX_NS;
    crowded_long_end = now + crowded_hold;
    if (crowded_long_end > crowded_until)
        crowded_until = crowded_long_end;
}

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
    if (wait_crowded(start))
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
            int y = wait_spin_yield(now);
            if (y != YIELD_KEPT) {
                if (y == YIELD_LONG && !here && wait_peer_known(t))
                    wait_crowded_found();
                else
                    wait_crowded_briefly();
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
