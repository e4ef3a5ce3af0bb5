/*
 * kernel_looks.c: the bound on zero-timeout waits that leave the kernel out.
 *
 * A progress loop (an MPI runtime, libevent's poll backend) polls with a
 * zero timeout, over and over, a set that mixes an accelerated socket with
 * pipes and Unix sockets.  The rings answer for the socket in user space;
 * asking the kernel about the others costs a system call (about half a
 * microsecond) on every call.  So a zero-timeout wait asks the kernel only
 * once every SHUNT_POLL_KERNEL_CALLS calls on the same set or once
 * SHUNT_POLL_KERNEL_US passed since the set's last question, whichever comes
 * first (libvma's "OS poll ratio"): an event on one of the others is
 * reported at most that many calls, or that long, late.  Blocking waits
 * always ask.  Inside the bound, a wait still asks when:
 *   - the last question found one of the others ready: a busy pipe is
 *     asked about every time, and a small maxevents cannot starve it;
 *   - the calling thread itself, since then, moved data or shut down
 *     through an fd of the kernel's, or closed an fd (pt_kernel_touches):
 *     a thread never misses readiness it caused itself (wrote to its own
 *     pipe, closed a writer), only what other threads and processes do,
 *     which it cannot tell from an event that came a little later;
 *   - another thread asked last (an epoll set shared by threads).
 * And poll and select ask when an fd of the set is not open as far as the
 * fd table knows, which must be POLLNVAL (EBADF) at once (readiness.c);
 * epoll_ctl on a set starts its bound afresh (epoll_ctl.c).
 *
 * The bound lives with the set it is for.  An epoll set has one of its own
 * (epoll_wait.c keeps it under the set's lock, so threads sharing the set
 * share it).  A poll or select set is only an array the program passes anew,
 * so each thread remembers the last few sets it polled, by a hash of their
 * other fds and events: a thread that alternates between two sets must not
 * have the questions of one count for the other.  A set it does not remember
 * starts with a question.
 *
 * The same bound holds for the look an empty non-blocking read of an
 * accelerated socket takes at its companion (stream.c): a loop of such reads
 * made a kernel recv at every turn, twice the cost of the kernel's own
 * EAGAIN.  Each thread remembers the last few sockets it read that way,
 * apart from its sets.
 *
 * "Has T passed" is asked on every call that could skip, so it reads the
 * tick clock (base/ticks.h: 10 ns against the vDSO clock's 24, which was a
 * fifth of an empty select's cost) once that is calibrated, from the stamps
 * of the questions themselves.
 */
#include "base/clock.h"
#include "base/self.h"
#include "base/ticks.h"
#include "base/tls.h"
#include "core/fd/passthrough.h"
#include "core/wait/kernel_looks.h"

#define SETS_PER_THREAD 4

struct remembered {
    uint64_t key;
    struct kernel_looks looks;
};

static SHUNT_TLS struct remembered sets[SETS_PER_THREAD];
static SHUNT_TLS unsigned next_victim;
static SHUNT_TLS struct remembered socks[SETS_PER_THREAD];
static SHUNT_TLS unsigned next_sock_victim;
static SHUNT_TLS long long skipped_total;

/* Whether us microseconds passed since r's last question. */
static bool bound_passed(const struct kernel_looks *r, uint64_t us)
{
    uint64_t per_ms = ticks_per_ms();
    if (per_ms && r->asked_ticks)
        return ticks_now() - r->asked_ticks >= us * per_ms / 1000u;
    return clock_now_ns() - r->asked_ns >= us * 1000u;
}

bool kernel_look_skip(struct kernel_looks *r)
{
    uint32_t calls = shunt_settings.poll_kernel_calls;
    uint64_t us = shunt_settings.poll_kernel_us;
    if (calls <= 1 || us == 0 || !r->quiet || r->thread != &pt_kernel_touches || r->touches != pt_kernel_touches ||
        r->skipped + 1 >= calls || bound_passed(r, us))
        return false;
    r->skipped++;
    skipped_total++;
    return true;
}

struct look_stamp kernel_look_stamp(void)
{
    struct look_stamp at = { clock_now_ns(), ticks_now() };
    ticks_sample(at.ns, at.ticks);
    return at;
}

void kernel_look_asked(struct kernel_looks *r, struct look_stamp at, bool found)
{
    r->asked_ns = at.ns;
    r->asked_ticks = at.ticks;
    r->skipped = 0;
    r->quiet = !found;
    r->thread = &pt_kernel_touches;
    r->touches = pt_kernel_touches;
}

static struct kernel_looks *remembered_in(struct remembered *r, unsigned *victim, uint64_t key)
{
    for (unsigned i = 0; i < SETS_PER_THREAD; i++)
        if (r[i].key == key)
            return &r[i].looks;
    struct remembered *m = &r[(*victim)++ % SETS_PER_THREAD];
    *m = (struct remembered){ .key = key };   /* asked_ns 0: the first wait asks */
    return &m->looks;
}

struct kernel_looks *kernel_looks_of_thread(uint64_t key)
{
    return remembered_in(sets, &next_victim, key);
}

struct kernel_looks *kernel_looks_of_socket(uint64_t key)
{
    return remembered_in(socks, &next_sock_victim, key);
}

long long kernel_looks_skipped(void)
{
    return skipped_total;
}
