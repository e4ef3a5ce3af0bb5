/*
 * test_spin.c: unit test of spinning before a sleep (src/core/wait/spin.c).
 *
 * wait_may_spin: only with SHUNT_SPIN_US above 0, and only on a machine
 * with two online CPUs or more, which it reads at the first wait that asks
 * (nothing at start-up tells it: a process that never waits on a socket of
 * shunt's does not pay for the read); the same answer at every ask after.
 *
 * A crowded CPU: the test pins itself to one CPU and runs two busy threads
 * there, the peer said to run on another CPU.  A spin's yield then hands
 * the CPU to the busy threads for their slices (2 ms or more; one busy
 * thread got 1.9 ms after a yield here, two get twice that): the spin ends
 * and the CPU is marked crowded, so that no spin starts (each wait would
 * pay a slice) for at least 20 ms, and for twice that when found again
 * right after.  Before
 * 2026-11-29 the mark lasted 2 ms: in the 15 ms after it, spins started
 * again and paid slices.  The same yields with the peer's CPU not known yet
 * (a peer that never spun: one starting), or with the peer on our CPU (the
 * time may have been its own), mark it for 2 ms only.  And with the busy
 * thread gone, spins start again.  Spins are counted by the end's
 * spins_lost (a spin that ended without what it waited for).
 * Links core/wait and what it stands on.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "base/clock.h"
#include "base/self.h"
#include "base/settings.h"
#include "core/fd/tcp_sock.h"
#include "core/wait/wait.h"
#include "core/wait/wait_shared.h"

static atomic_bool stop;

static void *busy(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
        ;
    return NULL;
}

static bool never(struct tcp_sock *t)
{
    (void)t;
    return false;
}

static void sleep_us(long us)
{
    struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
    nanosleep(&ts, NULL);
}

/* Runs for us microseconds without sleeping, as a program between its
 * waits: the busy threads then get whole slices when a yield lets it in
 * (after a sleep of ours, the scheduler gave it less than 2 ms). */
static void run_us(long us)
{
    uint64_t end = clock_now_ns() + (uint64_t)us * 1000u;
    while (clock_now_ns() < end)
        ;
}

/* The spins that started while waits were asked for during ms milliseconds. */
static unsigned long long spins_during(struct tcp_sock *t, long ms)
{
    unsigned long long before = atomic_load(&t->ch.self->spins_lost);
    uint64_t end = clock_now_ns() + (uint64_t)ms * 1000000u;
    while (clock_now_ns() < end) {
        atomic_store(&t->spin_fails, 0);   /* the give-up rule apart */
        wait_spin(t, never);
        run_us(200);
    }
    return atomic_load(&t->ch.self->spins_lost) - before;
}

/* Spins until one yield gives the CPU to the busy threads for a slice and
 * ends the spin (a spin whose yields all came back at once runs out its
 * 50 us).  With long_mark, until such a spin leaves a mark longer than a
 * brief one (the peer on another CPU); else until a spin took 3 ms or more
 * and left a mark.  The time a spin took alone does not tell: a thread
 * preempted again right after a short yield (under 2 ms, marked briefly)
 * took as long, and CI's ASan run met that once (2026-11-29: a spin
 * started 10 ms after such a "finding"). */
static void spin_until_crowded(struct tcp_sock *t, bool long_mark)
{
    for (int i = 0; i < 200; i++) {
        uint64_t start = clock_now_ns();
        atomic_store(&t->spin_fails, 0);
        wait_spin(t, never);
        uint64_t end = clock_now_ns();
        if (long_mark ? wait_crowded(end + 4000000u)
                      : end - start >= 3000000u && wait_crowded(end))
            return;
        run_us(100);   /* (a 2 ms mark may still be on) */
    }
    FAIL("in 200 spins none left the mark looked for (%s): the busy threads' slices are shorter here, or the mark is wrong", long_mark ? "longer than 2 ms" : "after 3 ms away");
}

int main(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    shunt_settings.spin_us = 0;
    CHECK(wait_may_spin(), ==, false);   /* (asks nothing of the machine) */
    shunt_settings.spin_us = 50;
    for (int i = 0; i < 3; i++)
        CHECK(wait_may_spin(), ==, cpus >= 2);
    shunt_settings.spin_us = 0;
    CHECK(wait_may_spin(), ==, false);
    printf("%ld online CPUs: a wait %s spin\n", cpus, cpus >= 2 ? "may" : "may not");
    if (cpus < 2)
        SKIP("the rest needs two CPUs: on one, no wait spins");

    /* the end: ours and the peer's halves, the peer awake (no sleepers) */
    static struct chan_side self, peer;
    static struct tcp_sock sock;
    struct tcp_sock *t = &sock;
    t->ch.self = &self;
    t->ch.peer = &peer;
    shunt_settings.spin_us = 50;

    cpu_set_t one;
    int cpu = sched_getcpu();
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    CHECK(sched_setaffinity(0, sizeof one, &one), ==, 0);
    pthread_t hog[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&hog[i], NULL, busy, NULL), ==, 0);   /* inherits the one CPU */
    int elsewhere = cpu == 0 ? 2 : 1;   /* the peer's CPU + 1: not ours */

    /* a peer on another CPU: a crowded CPU, no spin for 20 ms, then 40
     * (looked at for 10 and 25 ms: a wake-up behind the busy threads may
     * come a slice late) */
    atomic_store(&peer.cpu, elsewhere);
    spin_until_crowded(t, true);
    CHECK(spins_during(t, 10), ==, 0ull);
    sleep_us(12000);   /* past the 20 ms */
    spin_until_crowded(t, true);   /* found again right after: twice as long */
    CHECK(spins_during(t, 25), ==, 0ull);

    /* the peer's CPU unknown (it never spun), or ours: 2 ms only */
    sleep_us(50000);
    atomic_store(&peer.cpu, 0);
    spin_until_crowded(t, false);
    CHECK(spins_during(t, 15), >, 0ull);
    atomic_store(&peer.cpu, cpu + 1);
    spin_until_crowded(t, false);
    CHECK(spins_during(t, 15), >, 0ull);

    /* the busy threads gone: spins start again once the mark is over (found
     * long after the last one: 20 ms) */
    sleep_us(200000);
    atomic_store(&peer.cpu, elsewhere);
    spin_until_crowded(t, true);
    atomic_store(&stop, true);
    for (int i = 0; i < 2; i++)
        CHECK(pthread_join(hog[i], NULL), ==, 0);
    sleep_us(30000);
    CHECK(spins_during(t, 5), >, 0ull);
    PASS();
}
