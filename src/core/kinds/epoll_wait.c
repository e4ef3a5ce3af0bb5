/*
 * epoll_wait.c: epoll_wait on a set that may hold sockets of ours (epoll.c
 * has the design): one look without sleeping (the hot members, and the
 * kernel's part within its bound, taking turns at being first), a spin
 * while a peer is busy, then every hot member cold and a sleep in the
 * kernel, and what its answer gives the program; a set with no members of
 * ours is the kernel's, its answer still cleared of our tags.
 */
#include "base/clock.h"
#include "base/self.h"
#include "base/settings.h"
#include "base/signals.h"
#include "core/kinds/epoll.h"
#include "core/kinds/epoll_shared.h"
#include "core/kinds/readiness.h"
#include "core/wait/kernel_looks.h"
#include "core/wait/turns.h"
#include "core/wait/wait.h"

/* Zero-timeout waits turn no member cold while the set has at most this many
 * hot ones: cold is how a wait that sleeps is woken, and a loop of waits that
 * never sleep would only pay the kernel for it (a cold member is seen through
 * the kernel alone); beyond it, looking at every idle member on every call
 * would cost more than the kernel's question. */
#define ZERO_WAIT_HOT 64

static bool needs_kernel(const struct epoll_obj *ep)
{
    return ep->kernel_members || ep->cold || ep->nested;
}

/* Looks between two questions to the kernel by a set that has, as far as
 * we know, nothing else there: the program may have registered fds where
 * we could not see it, whose events must still arrive. */
#define KERNEL_EVERY 64

/* One look without sleeping: the hot members and, when the set has a
 * kernel part, the kernel's answer too, ours and the kernel's taking turns
 * at being first.  A call that finds none of ours ready and may wait skips
 * the kernel here: the wait that follows asks it anyway; a zero-timeout
 * call asks it only as often as the set's bound allows (kernel_looks.c).
 * Returns a count or -errno. */
static int gather(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int max, bool zero_wait)
{
    static const struct timespec zero = { 0, 0 };
    epoll_set_journal_apply(ep);
    ep_sweep_closed(ep);
    ep_hand_back_fallen(epfd, ep);
    bool kernel_first = ep->kernel_first;
    ep->kernel_first = !kernel_first;
    bool kernel = needs_kernel(ep);
    /* Within the set's bound the program's own kernel members wait
     * (kernel_looks.c); members of ours that are cold or nested sets are
     * seen only through the kernel, and are never left for later. */
    if (kernel && zero_wait && !ep->cold && !ep->nested && kernel_look_skip(&ep->zero_looks))
        kernel = false;
    else if (!kernel)
        kernel = ++ep->looks % KERNEL_EVERY == 0;
    struct look_stamp asked = kernel ? kernel_look_stamp() : (struct look_stamp){ 0, 0 };
    int n = 0;
    bool woke = false;
    if (kernel_first && kernel && (ep->nhot > 0 || zero_wait)) {
        int k = ep_kernel_wait(epfd, evs, max, &zero, NULL);
        if (k < 0)
            return k;
        kernel_look_asked(&ep->zero_looks, asked, k > 0);
        n = ep_filter_kernel(ep, evs, k, &woke);
        kernel_first = true;
    } else {
        kernel_first = false;
    }
    n += ep_collect_hot(epfd, ep, evs + n, max - n, !zero_wait || ep->nhot > ZERO_WAIT_HOT);
    if (!kernel_first && n < max && kernel && (n > 0 || zero_wait)) {
        int k = ep_kernel_wait(epfd, evs + n, max - n, &zero, NULL);
        kernel_look_asked(&ep->zero_looks, asked, k != 0);
        if (k > 0)
            n += ep_filter_kernel(ep, evs + n, k, &woke);
        if (woke && n < max)
            n += ep_collect_woken(epfd, ep, evs + n, max - n);
    }
    return n;
}

/*
 * Spinning pays only while a peer is running and about to produce: not on
 * one CPU, not when every hot member's peer sleeps waiting for us, and not
 * after it kept failing (then only now and then).  The kernel's part is
 * looked at every few microseconds meanwhile.
 */
#define SPIN_GIVE_UP 8
#define SPIN_RETRY 32
#define KERNEL_LOOK_NS 4000u

/* here: a busy peer last ran on our CPU, so the spin yields at every look
 * (see core/wait/spin.c); known: a busy peer's CPU is known */
static bool worth_spinning(struct epoll_obj *ep, bool *here, bool *known)
{
    if (!wait_may_spin() || ep->nhot == 0)
        return false;
    if (ep->spin_fails >= SPIN_GIVE_UP) {
        if (++ep->spin_fails < SPIN_GIVE_UP + SPIN_RETRY)
            return false;
        ep->spin_fails = SPIN_GIVE_UP - 1;
    }
    bool busy = false;
    *here = *known = false;
    for (uint32_t i = 0; i < ep->nhot; i++) {
        struct tcp_sock *t = epoll_set_sock_of(&ep->v[ep->hot[i]]);
        if (t && t->ch.hdr && atomic_load(&t->path) == PATH_SHM && wait_peer_busy(t)) {
            busy = true;
            *known |= wait_peer_known(t);
            if (wait_peer_here(t)) {
                *here = true;
                break;
            }
        }
    }
    return busy;
}

static int spin_phase(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int max, const struct deadline *dl)
{
    bool here, known;
    if (wait_crowded(clock_now_ns()) || !worth_spinning(ep, &here, &known))
        return 0;
    uint64_t start = clock_now_ns(), end = start + (uint64_t)shunt_settings.spin_us * 1000u;
    uint64_t next_kernel = start + KERNEL_LOOK_NS;
    static const struct timespec zero = { 0, 0 };
    for (unsigned i = 1;; i++) {
        int n = ep_collect_hot(epfd, ep, evs, max, false);
        if (n > 0) {
            ep->spin_fails = 0;
            return n;
        }
        if (ep->nhot == 0)
            break;
        wait_cpu_relax();
        if ((i & 15) == 0 || here) {
            uint64_t now = clock_now_ns();
            if (now > end || deadline_passed(dl))
                break;
            if (now > next_kernel && needs_kernel(ep)) {
                bool woke = false;
                int k = ep_kernel_wait(epfd, evs, max, &zero, NULL);
                if (k > 0 && (n = ep_filter_kernel(ep, evs, k, &woke)) > 0)
                    return n;
                next_kernel = now + KERNEL_LOOK_NS;
            }
            if (wait_spin_yield_long(now) && !here && known) {
                wait_crowded_found();   /* the CPU is wanted by others (core/wait/spin.c) */
                if ((n = ep_collect_hot(epfd, ep, evs, max, false)) > 0) {
                    ep->spin_fails = 0;
                    return n;
                }
                break;
            }
        }
    }
    ep->spin_fails++;
    return 0;
}

/* Whether the kernel's answer may hold registrations of ours: only in a set
 * that had one, or is shared with another process (which may add one). */
static bool kernel_tags(struct epoll_obj *ep, const struct epoll_event *evs, int n)
{
    if (!atomic_load(&ep->tagged) && !ep->journal)
        return false;
    for (int i = 0; i < n; i++) {
        uint64_t tag = evs[i].data.u64 >> 32;
        if (tag == TAG_HIGH || tag == TAG_XWAKE || tag == TAG_FABRIC)
            return true;
    }
    return false;
}

/* What the r events of a kernel wait give the program: our tags taken out,
 * the members they name looked at with the other hot ones. */
static int after_sleep(int epfd, struct epoll_obj *ep, struct epoll_event *evs, int r, int max)
{
    crit_lock(&ep->lock);
    bool woke = false;
    /* fds closed while it slept: their members are gone before the kernel's
     * tags and the hot members (a fabric member stays hot through a sleep)
     * are looked at */
    ep_sweep_closed(ep);
    int k = ep_filter_kernel(ep, evs, r, &woke);
    if (k < max)
        k += ep_collect_hot(epfd, ep, evs + k, max - k, true);
    crit_unlock(&ep->lock);
    return k;
}

int epoll_wait_ready(int epfd, struct epoll_event *evs, int max, const struct timespec *tmo, const sigset_t *mask)
{
    if (max <= 0)
        return ep_kernel_wait(epfd, evs, max, tmo, mask);
    struct epoll_obj *ep = epoll_of(epfd, false);
    if (!ep)
        return ep_kernel_wait(epfd, evs, max, tmo, mask);
    if (!timeout_valid(tmo)) {
        sock_put(&ep->base);
        return -EINVAL;
    }
    struct deadline dl;
    deadline_start(&dl, tmo);
    bool zero_wait = tmo && tmo->tv_sec == 0 && tmo->tv_nsec == 0;
    unsigned handlers_ran = shunt_sig_ran;
    int result;
    /* Counted before the members are looked at: a thread adding one
     * either is seen here or sees this wait (added_while_waiting). */
    if (!zero_wait)
        atomic_fetch_add(&ep->waiting, 1);
    if (!ep->members) {
        /* Nothing of ours: the kernel answers, unless a registration of
         * ours turns up in its answer after all: another thread added the
         * set's first member while this one slept, a process sharing the
         * set added one, or a member that left is still registered (its
         * socket fell back while one-shot had fired, its file lives on
         * elsewhere).  Then the tags are taken out, the members they name
         * looked at, and the wait goes on if nothing is left. */
        result = ep_kernel_wait(epfd, evs, max, tmo, mask);
        if (result <= 0 || !kernel_tags(ep, evs, result))
            goto out;
        result = after_sleep(epfd, ep, evs, result, max);
        if (result > 0 || zero_wait || deadline_passed(&dl))
            goto out;
    }
    if (!zero_wait)
        turn_take();   /* a zero timeout never takes turns (as readiness.c) */
    for (;;) {
        crit_lock(&ep->lock);
        ep->kfd = epfd;
        int n = gather(epfd, ep, evs, max, zero_wait);
        if (n == 0 && !zero_wait)
            n = spin_phase(epfd, ep, evs, max, &dl);
        if (n != 0 || zero_wait || deadline_passed(&dl)) {
            crit_unlock(&ep->lock);
            result = n;
            break;
        }
        /* About to sleep: every hot member asks for a doorbell, then one
         * more look (a member that moved meanwhile stays hot). */
        bool ready = ep_quiesce(ep);
        bool resend_nap = ep->resend_nap;   /* read under the lock: another waiter's quiesce writes it */
        crit_unlock(&ep->lock);
        if (ready)
            continue;
        if (shunt_sig_ran != handlers_ran) {
            /* a handler ran while we looked (deferred to the end of a
             * critical section, or during the spin): the kernel's wait
             * would have ended with EINTR, which epoll never restarts */
            result = -EINTR;
            break;
        }
        struct timespec left;
        const struct timespec *sleep_for = deadline_left(&dl, &left);
        static const struct timespec fabric_cap = { 0, 100000000 };   /* every fabric wait is bounded */
        if (ep->fabric_wake && (!sleep_for || sleep_for->tv_sec > 0 || sleep_for->tv_nsec > fabric_cap.tv_nsec))
            sleep_for = &fabric_cap;
        static const struct timespec resend_cap = { 0, 1000000 };
        if (resend_nap && (!sleep_for || sleep_for->tv_sec > 0 || sleep_for->tv_nsec > resend_cap.tv_nsec))
            sleep_for = &resend_cap;
        int r = ep_kernel_wait(epfd, evs, max, sleep_for, mask);
        turn_gave_way(clock_now_ns());
        if (r < 0) {
            result = r;
            break;
        }
        int k = after_sleep(epfd, ep, evs, r, max);
        if (k > 0) {
            result = k;
            break;
        }
        /* Woken for nothing: a doorbell that came after its data had been
         * read, or one meant for another holder.  Our registrations are
         * edge-triggered, so this cannot repeat without a new doorbell:
         * just wait again. */
    }
out:
    if (!zero_wait)
        atomic_fetch_sub(&ep->waiting, 1);
    sock_put(&ep->base);
    return result;
}
