/*
 * test_kernel_looks.c: unit tests of the bound on zero-timeout waits that
 * leave the kernel out (src/core/wait/kernel_looks.c).
 *
 * With SHUNT_POLL_KERNEL_CALLS at 4: a set's first wait asks; after a
 * question that found the others quiet, three waits skip and the fourth asks;
 * a question that found something makes the next wait ask; so does anything
 * the calling thread did to an fd of the kernel's since (pt_kernel_touches),
 * and a question asked by another thread; SHUNT_POLL_KERNEL_US passed asks;
 * either setting at 0 (and the count at 1) asks every time.  The per-thread
 * sets: a key finds its own bound, a fifth key pushes the oldest out (which
 * then starts with a question), and "os_polls_skipped" counts the skips.
 * The time bound holds on the vDSO clock and again once the tick clock is
 * calibrated from the questions' stamps (on an x86-64 CPU whose counter is
 * invariant, which must then be calibrated after 2 ms).
 * Links core/wait and what it stands on.
 */
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "base/clock.h"
#include "base/self.h"
#include "base/settings.h"
#include "base/ticks.h"
#include "core/fd/passthrough.h"
#include "core/wait/kernel_looks.h"

static void set_bound(unsigned calls, unsigned us)
{
    shunt_settings.poll_kernel_calls = calls;
    shunt_settings.poll_kernel_us = us;
}

/* Asks (as a caller told no) and records a quiet answer. */
static void ask_quiet(struct kernel_looks *r)
{
    CHECK(kernel_look_skip(r), ==, false);
    kernel_look_asked(r, kernel_look_stamp(), false);
}

/* A set's bound under these settings, just asked (zeroed, the first wait asks). */
static struct kernel_looks fresh(unsigned calls, unsigned us)
{
    struct kernel_looks r;
    memset(&r, 0, sizeof r);
    set_bound(calls, us);
    ask_quiet(&r);
    return r;
}

static void test_count(void)
{
    struct kernel_looks r = fresh(4, 1000000);
    long long before = kernel_looks_skipped();
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 3; i++)
            CHECK(kernel_look_skip(&r), ==, true);
        ask_quiet(&r);   /* the fourth */
    }
    CHECK(kernel_looks_skipped() - before, ==, 9);
}

static void test_found(void)
{
    struct kernel_looks r;
    memset(&r, 0, sizeof r);
    set_bound(1000, 1000000);
    CHECK(kernel_look_skip(&r), ==, false);
    kernel_look_asked(&r, kernel_look_stamp(), true);
    for (int i = 0; i < 5; i++) {   /* something was ready: every wait asks */
        CHECK(kernel_look_skip(&r), ==, false);
        kernel_look_asked(&r, kernel_look_stamp(), true);
    }
    kernel_look_asked(&r, kernel_look_stamp(), false);
    CHECK(kernel_look_skip(&r), ==, true);
}

static void test_touches(void)
{
    struct kernel_looks r = fresh(1000, 1000000);
    CHECK(kernel_look_skip(&r), ==, true);
    pt_kernel_touches++;   /* this thread wrote, read or closed an fd of the kernel's */
    ask_quiet(&r);
    CHECK(kernel_look_skip(&r), ==, true);
}

static void *skip_elsewhere(void *arg)
{
    return (void *)(intptr_t)kernel_look_skip(arg);
}

static void test_other_thread(void)
{
    struct kernel_looks r = fresh(1000, 1000000);
    pthread_t t;
    void *got;
    CHECK(pthread_create(&t, NULL, skip_elsewhere, &r), ==, 0);
    CHECK(pthread_join(t, &got), ==, 0);
    CHECK((intptr_t)got, ==, 0);   /* asked by this thread: the other asks */
    CHECK(kernel_look_skip(&r), ==, true);
}

static void test_time(void)
{
    struct kernel_looks r = fresh(1000000, 200);
    uint64_t start = clock_now_ns();
    bool skipped = kernel_look_skip(&r);
    if (clock_now_ns() - start < 100000)
        CHECK(skipped, ==, true);
    struct timespec pause = { 0, 300000 };
    nanosleep(&pause, NULL);
    ask_quiet(&r);   /* 300 us > 200 us: asks, however few the calls */
}

/* Stamps 3 ms apart calibrate the tick clock; its rate is the clock's. */
static void test_calibrated(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000007u), "c"(0));
    if (!(d & (1u << 8)))
        return;   /* no invariant counter: the vDSO clock is all there is (test_time) */
    uint64_t ns0 = clock_now_ns(), t0 = ticks_now();
    kernel_look_stamp();
    struct timespec pause = { 0, 3000000 };
    nanosleep(&pause, NULL);
    kernel_look_stamp();
    uint64_t rate = ticks_per_ms();
    CHECK(rate, >, 0);
    /* against a rate measured here over the same span: within 5% */
    uint64_t mine = (ticks_now() - t0) * 1000000u / (clock_now_ns() - ns0);
    CHECK(rate * 100, >, mine * 95);
    CHECK(rate * 100, <, mine * 105);
    test_time();   /* the same bound, on the tick clock now */
#endif
}

static void test_off(void)
{
    unsigned bounds[][2] = { { 0, 1000000 }, { 1, 1000000 }, { 1000000, 0 } };
    for (size_t b = 0; b < 3; b++) {
        struct kernel_looks r = fresh(bounds[b][0], bounds[b][1]);
        for (int i = 0; i < 10; i++)
            ask_quiet(&r);
    }
}

static void test_thread_sets(void)
{
    set_bound(1000, 1000000);
    struct kernel_looks *a = kernel_looks_of_thread(11);
    ask_quiet(a);
    CHECK(kernel_looks_of_thread(11) == a, ==, 1);
    CHECK(kernel_look_skip(kernel_looks_of_thread(11)), ==, true);
    /* three more sets fit beside it */
    for (uint64_t k = 12; k < 15; k++)
        ask_quiet(kernel_looks_of_thread(k));
    CHECK(kernel_look_skip(kernel_looks_of_thread(11)), ==, true);
    /* a fifth pushes the oldest out; coming back, it asks first */
    ask_quiet(kernel_looks_of_thread(15));
    ask_quiet(kernel_looks_of_thread(11));
}

int main(void)
{
    test_count();
    test_found();
    test_touches();
    test_other_thread();
    test_time();
    test_calibrated();
    test_off();
    test_thread_sets();
    PASS();
}
