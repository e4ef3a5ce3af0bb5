/*
 * turns.c: taking turns on a crowded CPU.
 *
 * Kernel TCP's waits block, and every block lets a thread queued on the CPU
 * run.  Under shunt a thread whose waits keep finding data (say, two
 * connections served from the other CPU in turn) never blocks, and the
 * scheduler lets it run out its slice, up to a tick (4 ms at HZ=250): a
 * thread it woke meanwhile waits that long, which is what made nginx+wrk's
 * 99th percentile three times the kernel's (docs/benchmarks.md).  So such a
 * thread yields at its next epoll, poll or select after SHUNT_YIELD_US;
 * not at one with a zero timeout, which the kernel never makes yield either
 * (a thread that polls without waiting has chosen to keep its CPU).
 * sched_yield when that thread is alone costs a system call; with others
 * queued it is the switch the kernel would have made at a block.  Sleeping
 * in the kernel and the yields of a spin count as giving way.
 */
#include <sched.h>

#include "base/clock.h"
#include "base/self.h"
#include "core/wait/turns.h"
#include "core/wait/wait.h"

static _Thread_local uint64_t gave_way_ns;
static _Thread_local long long turns_given;

long long turn_count(void)
{
    return turns_given;
}

void turn_gave_way(uint64_t now)
{
    gave_way_ns = now;
}

void turn_spin_yield(uint64_t now)
{
    sched_yield();
    gave_way_ns = now;
}

void turn_take(void)
{
    if (!shunt_settings.yield_us)
        return;
    uint64_t now = clock_now_ns();
    if (now - gave_way_ns > (uint64_t)shunt_settings.yield_us * 1000u) {
        if (gave_way_ns) {
            sched_yield();
            turns_given++;
        }
        gave_way_ns = now;
    }
}
