/*
 * sleep.c: a call that waits for its channel (wait_channel): a spin, then
 * one thread of the process asleep in the kernel on the companion, the
 * others on a futex, with the socket's timeout and the program's signals.
 */
#include <poll.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>

#include "base/clock.h"
#include "base/real.h"
#include "base/self.h"
#include "base/signals.h"
#include "core/wait/turns.h"
#include "core/wait/wait_shared.h"

/* The socket's own timeout for this direction, if it has one.  SO_RCVTIMEO
 * is asked of the kernel once (an accepted socket inherits the listener's)
 * and kept up to date by setsockopt; while another process holds the
 * socket, which may change it, it is asked every time. */
static bool socket_timeout(struct tcp_sock *t, int fd, bool for_write, struct timespec *out)
{
    struct timeval tv = t->sndtimeo;
    if (!for_write) {
        bool shared = tcp_sock_end_shared(t);
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

/* What is left of the call's time under the socket's timeout: 0 if it has
 * none, 1 with *left set, -EAGAIN if it ran out.  The deadline is fixed at
 * the call's first sleep (*until), as the kernel counts a recv's timeout
 * across its waits: a call that keeps waking to find nothing (a wake-up
 * that was not for it, doorbells another holder has not drained, or a
 * scribbled segment) still ends when the kernel's call would have. */
static int call_timeout(struct tcp_sock *t, int fd, bool for_write, uint64_t *until, struct timespec *left)
{
    struct timespec tmo;
    if (!socket_timeout(t, fd, for_write, &tmo))
        return 0;
    uint64_t now = clock_now_ns();
    if (*until == 0)
        *until = now + timespec_ns(&tmo);
    if (now >= *until)
        return -EAGAIN;
    *left = ns_timespec(*until - now);
    return 1;
}

/* The kernel refuses ppoll of more fds than RLIMIT_NOFILE allows (EINVAL):
 * a process that lowered it below the count (vsftpd's unprivileged child
 * sets 0) sleeps in pselect instead, which has no such rule, on the same
 * fds and with the same timeout (*tmo, or none when timed is false),
 * readiness reported as POLLIN, a closed fd (EBADF) as POLLNVAL.  An fd
 * too high for an fd_set is left out and the sleep cut to cap: look again
 * soon (*capped). */
static int ppoll_without_rlimit(struct pollfd *p, int n, bool timed, struct timespec *tmo, bool *capped,
                                struct timespec cap)
{
    fd_set rd;
    FD_ZERO(&rd);
    int top = -1;
    for (int i = 0; i < n; i++) {
        p[i].revents = 0;
        if (p[i].fd < 0)
            continue;
        if (p[i].fd >= FD_SETSIZE) {
            if (!timed || tmo->tv_sec > 0 || tmo->tv_nsec > cap.tv_nsec) {
                *tmo = cap;
                timed = *capped = true;
            }
            continue;
        }
        FD_SET(p[i].fd, &rd);
        if (p[i].fd > top)
            top = p[i].fd;
    }
    fd_set asked = rd;
    int r = shunt_real.pselect(top + 1, &rd, NULL, NULL, timed ? tmo : NULL, NULL);
    if (r < 0 && errno == EBADF) {
        r = 0;
        for (int i = 0; i < n; i++)
            if (p[i].fd >= 0 && p[i].fd < FD_SETSIZE && FD_ISSET(p[i].fd, &asked) &&
                shunt_real.fcntl(p[i].fd, F_GETFD) < 0) {
                p[i].revents = POLLNVAL;
                r++;
            }
        return r ? r : (errno = EBADF, -1);
    }
    if (r < 0)
        return r;
    for (int i = 0; i < n; i++)
        if (p[i].fd >= 0 && p[i].fd < FD_SETSIZE && FD_ISSET(p[i].fd, &rd))
            p[i].revents = POLLIN;
    return r;
}

/* The kernel wait itself: the companion (a doorbell, the peer's death),
 * the local wake and the end's wake from other processes, with what is left
 * of the socket's timeout for this direction.  cut_ns (0: none): cut the
 * sleep to that (FUTEX_SLEEP_NS, as a futex sleep is; or what is left
 * until a stalled reader is given up on), and say whether that time ran
 * out with nothing come (*ran_out). */
#define FUTEX_SLEEP_NS 20000000u

/* Whether a sleep of *tmo (no bound unless timed) is longer than cut_ns:
 * then *tmo becomes cut_ns. */
static bool cut_sleep(bool timed, struct timespec *tmo, uint64_t cut_ns)
{
    if (timed && timespec_ns(tmo) <= cut_ns)
        return false;
    *tmo = ns_timespec(cut_ns);
    return true;
}

static int kernel_wait(struct tcp_sock *t, int fd, bool for_write, int lw, int efd, int xfd, uint64_t *until,
                       struct call_sig *sig, uint64_t cut_ns, bool *ran_out)
{
    if (atomic_load_explicit(&t->nonblock, memory_order_relaxed) == 1)
        return -EAGAIN;   /* O_NONBLOCK set meanwhile (fcntl or FIONBIO of this process) */
    bool shared = tcp_sock_end_shared(t);
    if (shared) {
        /* another holder may have made the open file non-blocking */
        int fl = shunt_real.fcntl(fd, F_GETFL);
        if (fl >= 0 && (fl & O_NONBLOCK)) {
            atomic_store(&t->nonblock, 1);
            return -EAGAIN;
        }
    }
    struct timespec tmo, cap = { 0, 1000000 };
    int timed = call_timeout(t, fd, for_write, until, &tmo);
    if (timed < 0)
        return timed;
    bool capped = false, cut = false;
    if ((lw == LW_BUSY || channel_resend_pending(&t->ch)) && (!timed || tmo.tv_sec > 0 || tmo.tv_nsec > cap.tv_nsec)) {
        tmo = cap;   /* a wake is being emptied, or a re-send waits for room: look again soon */
        capped = true;
    } else if (cut_ns && cut_sleep(timed, &tmo, cut_ns)) {
        capped = cut = true;
    }
    struct pollfd p[3] = {
        { .fd = fd, .events = POLLIN | POLLRDHUP },
        { .fd = lw == LW_ON ? efd : -1, .events = POLLIN },
        { .fd = xfd, .events = POLLIN },
    };
    if (call_sig_new(sig))
        return call_sig_interrupts(sig, timed != 0);   /* one ran since the call's last look */
    int n = shunt_real.ppoll(p, 3, timed || capped ? &tmo : NULL, NULL);
    if (n < 0 && errno == EINVAL)
        n = ppoll_without_rlimit(p, 3, timed || capped, &tmo, &capped, cap);
    if (n < 0) {
        if (errno == EINTR)   /* SA_RESTART without a timeout goes on, as recv would */
            return !call_sig_new(sig) ? -EINTR : call_sig_interrupts(sig, timed != 0);
        atomic_store(&t->peer_gone, true);
        return 0;
    }
    if (n == 0) {
        *ran_out = cut;
        return capped ? 0 : -EAGAIN;   /* the socket's timeout */
    }
    if (p[1].revents & POLLNVAL)
        wait_local_lost(efd);
    if (p[0].revents & POLLNVAL) {
        if (tcp_call_fd(t, fd) == fd)   /* else the program closed it meanwhile: look again */
            atomic_store(&t->peer_gone, true);
    } else if (p[0].revents & (POLLHUP | POLLERR | POLLRDHUP)) {
        doorbell_check_end(t, fd);   /* the end, after the doorbells still ahead of it */
    }
    return 0;
}

/*
 * The first FUTEX_SLEEP_NS of a blocking call's sleep, while this process
 * alone holds the end, are on the end's futex (chan_side.fwake) rather than
 * on the companion.  The peer's wake is then one futex system call instead
 * of a doorbell (a TCP send through the loopback stack), and the sleeper's
 * a futex wait instead of a ppoll and a recv to drain the byte: on the
 * busy servers of docs/benchmarks.md a sleep and its wake cost about what
 * a Unix socket's do.  Only shunt's own blocking calls, and a poll of one
 * socket (wait_poll_one), sleep there: a poll of several fds, select or
 * epoll sleeps in the kernel on the companion beside the program's other
 * fds (or on a set shunt does not see) and keeps its doorbells.  The futex
 * tells nothing of the peer's death, so the wait is bounded: after
 * FUTEX_SLEEP_NS the call sleeps on the companion as before, whose end the
 * kernel reports, so a dead peer is seen within that time.  The word is the peer's to write
 * and so anyone's: it is read once, a change only wakes us to look again,
 * and a scribble can cost a spurious wake or, at worst, FUTEX_SLEEP_NS.
 * Another thread's shutdown (wait_wake_local) and another holder's
 * (xwake_send) add one to it and wake it too.  0: look again (woken, or
 * the time is up: *moved_on); -EAGAIN, -EINTR as kernel_wait.
 */
static bool futex_sleep_fits(struct tcp_sock *t)
{
    return !tcp_sock_end_shared(t) && !atomic_load_explicit(&t->peer_gone, memory_order_relaxed) &&
           !atomic_load_explicit(&t->ch.hdr->down, memory_order_relaxed);
}

/* Announces the sleep, reads fwake, looks a last time and waits on the word
 * for tmo at most: 0 woken (or ready at the last look), -ETIMEDOUT, -EINTR. */
static int futex_sleep_armed(struct tcp_sock *t, int fd, ready_fn ready, int what, const struct timespec *tmo)
{
    doorbell_enter_futex(t, what);
    atomic_fetch_add_explicit(&t->ch.self->sleeps, 1, memory_order_relaxed);
    unsigned seen = atomic_load(&t->ch.self->fwake);   /* before the last look */
    int r = 0;
    if (!ready(t)) {
        r = futex_wait_shared(&t->ch.self->fwake, seen, tmo);
        turn_gave_way(clock_now_ns());
        if (r != -ETIMEDOUT && r != -EINTR)
            r = 0;   /* woken, or the word had moved on already */
    }
    doorbell_leave_futex(t, tcp_call_fd(t, fd), what);
    return r;
}

static int futex_sleep(struct tcp_sock *t, int fd, ready_fn ready, bool for_write, uint64_t *until,
                       bool *moved_on, struct call_sig *sig)
{
    struct timespec tmo;
    int timed = call_timeout(t, fd, for_write, until, &tmo);
    if (timed < 0)
        return -EAGAIN;
    bool cut = !timed || tmo.tv_sec > 0 || tmo.tv_nsec > (long)FUTEX_SLEEP_NS;
    if (cut)
        tmo = (struct timespec){ 0, FUTEX_SLEEP_NS };
    if (call_sig_new(sig))
        return call_sig_interrupts(sig, timed != 0);
    int r = futex_sleep_armed(t, fd, ready, for_write ? WANT_SPACE : WANT_DATA, &tmo);
    if (r == -EINTR)
        return !call_sig_new(sig) ? -EINTR : call_sig_interrupts(sig, timed != 0);
    if (r == -ETIMEDOUT) {
        *moved_on = cut;
        return cut ? 0 : -EAGAIN;   /* the time is up: on to the companion, or the socket's timeout */
    }
    return 0;
}

int wait_poll_one(struct tcp_sock *t, int fd, ready_fn ready, int what, const struct timespec *left)
{
    if (!futex_sleep_fits(t))
        return 0;
    unsigned ran = shunt_sig_ran;
    if (wait_spin(t, ready) || shunt_sig_ran != ran)
        return 1;
    struct timespec tmo = { 0, FUTEX_SLEEP_NS };
    bool cut = !left || left->tv_sec > 0 || left->tv_nsec > (long)FUTEX_SLEEP_NS;
    if (!cut)
        tmo = *left;
    int r = futex_sleep_armed(t, fd, ready, what, &tmo);
    if (r == -EINTR)
        return -EINTR;   /* poll and select are never restarted */
    return r == -ETIMEDOUT && cut ? 0 : 1;
}

/* Our tail as the segment has it (a writer thread looks, without the rx
 * lock: shared words only, not the reader's own record). */
static uint64_t rx_tail_now(struct tcp_sock *t)
{
    return ring_tail_seen(&t->ch.rx, 0);
}

static bool rx_full(struct tcp_sock *t)
{
    uint64_t size = ring_size_now(&t->ch.rx);   /* (0: the peer is growing it, or scribbled) */
    return size != 0 && ring_readable(&t->ch.rx) >= (int64_t)size;
}

/*
 * A writer that slept FUTEX_SLEEP_NS for room and got none, while the
 * peer's ring to us is full and none of it was read meanwhile, and the
 * peer asks to be woken for room too: each waits for the other to read.
 * Kernel TCP's buffers would have held more (a few MB each way here: two
 * programs that both send 4 MB before they read finish on kernel TCP, and
 * hung on 1 MiB rings), so the writer moves the connection there
 * (WAIT_BOTH_FULL).  An end held by several processes has no futex
 * sleep: its first sleep on the companion is cut to as long for the same
 * look, when the peer's ring to us is full.  The peer's words are hints: a
 * scribble can only move a connection to kernel TCP, which loses nothing.
 * rx_tail: our tail before the sleep.
 */
static bool both_full(struct tcp_sock *t, uint64_t rx_tail)
{
    const struct chan_side *peer = t->ch.peer;
    return ring_writable(&t->ch.tx) == 0 && rx_full(t) && rx_tail_now(t) == rx_tail &&
           (atomic_load(&peer->space_sleepers) || atomic_load(&peer->fspace_sleepers));
}

/*
 * A reader that reads nothing while a blocking send waits for room.  Kernel
 * TCP over loopback takes about 4 MB from a sender whose reader has not
 * read (measured here), a ring at most SHUNT_RING_SIZE (1 MiB): a program
 * that sends more and whose peer reads only after something else happens
 * (the sender's exit, a signal, another connection) finishes on the kernel
 * and hung under shunt.  A slow reader looks the same for a while, so the
 * writer waits SHUNT_SEND_STALL_MS (1 s) with its ring full and unable to
 * grow, its reader's tail not moving at all, and then moves the connection
 * to kernel TCP (WAIT_STALLED): the bytes in the ring are re-sent there, the
 * send goes on there, and a merely slow reader costs only the ring's speed
 * from then on.  Not once a non-blocking send was told the ring is full:
 * after the kernel's EAGAIN a blocking send waits for the reader.
 *
 * The kernel sleeper looks at the tail before and after each sleep; a look
 * before a sleep more than STALL_GAP_NS after the last one starts a new
 * count (another send's wait, not this one's).  The tail is the peer's word:
 * a scribble can only move the connection to kernel TCP, or keep it waiting
 * as before.  Returns how long the tail has stood still, in ns.
 */
#define STALL_GAP_NS 50000000u
static bool stall_watched(struct tcp_sock *t)
{
    return shunt_settings.send_stall_ms && ring_writable(&t->ch.tx) == 0 &&
           !atomic_load_explicit(&t->ch.tx_told_full, memory_order_relaxed) && !channel_tx_may_grow_in_place(&t->ch);
}

static uint64_t reader_still(struct tcp_sock *t, bool after_sleep)
{
    uint64_t now = clock_now_ns(), head = 0;
    if (ring_head_mine(&t->ch.tx, &head) < 0)
        return 0;
    uint64_t tail = ring_tail_seen(&t->ch.tx, head);
    uint64_t seen = atomic_load_explicit(&t->stall_seen, memory_order_relaxed);
    if (tail != atomic_load_explicit(&t->stall_tail, memory_order_relaxed) || seen == 0 ||
        (!after_sleep && now - seen > STALL_GAP_NS)) {
        atomic_store_explicit(&t->stall_tail, tail, memory_order_relaxed);
        atomic_store_explicit(&t->stall_since, now, memory_order_relaxed);
    }
    atomic_store_explicit(&t->stall_seen, now, memory_order_relaxed);
    return now - atomic_load_explicit(&t->stall_since, memory_order_relaxed);
}

/* What is left, in ns, of the wait for a stalled reader (0: it is over;
 * UINT64_MAX: not watched). */
static uint64_t stall_left(struct tcp_sock *t, bool after_sleep)
{
    if (!stall_watched(t))
        return UINT64_MAX;
    uint64_t limit = (uint64_t)shunt_settings.send_stall_ms * 1000000u, still = reader_still(t, after_sleep);
    return still >= limit ? 0 : limit - still;
}

/* The one thread of this process that sleeps in the kernel for this
 * endpoint: it asks for a doorbell, looks at the rings a last time and
 * waits in the kernel until a doorbell is queued, the peer goes away,
 * another thread shuts the socket down, a signal or the socket's timeout.
 * A blocking call's first sleep of a while is on the end's futex
 * (futex_sleep, above). */
static int sleep_in_kernel(struct tcp_sock *t, int fd, ready_fn ready, bool for_write, uint64_t *until,
                           struct call_sig *sig)
{
    int result = 0;
    uint64_t stall = for_write ? stall_left(t, false) : UINT64_MAX;
    if (stall == 0 && !ready(t))
        return WAIT_STALLED;
    bool futexed = futex_sleep_fits(t);
    if (futexed) {
        bool moved_on = false;
        uint64_t rx_tail = for_write ? rx_tail_now(t) : 0;
        result = futex_sleep(t, fd, ready, for_write, until, &moved_on, sig);
        if (result || !moved_on || ready(t))
            return result;
        if (for_write && channel_tx_may_grow_in_place(&t->ch))
            return WAIT_GROW;
        if (for_write && both_full(t, rx_tail))
            return WAIT_BOTH_FULL;
        if (stall != UINT64_MAX && (stall = stall_left(t, true)) == 0)
            return WAIT_STALLED;
    }
    int what = for_write ? WANT_SPACE : WANT_DATA;
    int efd = -1, xfd = -1;
    int lw = doorbell_enter_local(t, what, &efd, &xfd);
    /* counted when the doorbell is asked for: the peer may ring for it even
     * if the last look below finds the bytes and the sleep never happens */
    atomic_fetch_add_explicit(&t->ch.self->sleeps, 1, memory_order_relaxed);
    /* With the peer's ring to us full, the sleep is cut to the futex's 20 ms
     * to look for both ends full again: an end without the futex sleep (held
     * by several processes) looks only here, and a look after the futex
     * sleep may have met the peer between its two sleeps, no sleeper flag
     * up; both ends then slept on their companions for ever, no byte read
     * (both_send_first under load: 3 runs in 30 hung). */
    bool watch = for_write && rx_full(t), ran_out = false;
    uint64_t rx_tail = watch ? rx_tail_now(t) : 0;
    uint64_t cut = watch ? FUTEX_SLEEP_NS : 0;
    if (stall != UINT64_MAX && (!cut || stall < cut))
        cut = stall ? stall : 1;
    if (!ready(t)) {
        result = kernel_wait(t, fd, for_write, lw, efd, xfd, until, sig, cut, &ran_out);
        turn_gave_way(clock_now_ns());
    }
    doorbell_leave_local(t, tcp_call_fd(t, fd), what, lw, xfd);
    if (ran_out && !ready(t) && watch && both_full(t, rx_tail))
        return WAIT_BOTH_FULL;
    if (stall != UINT64_MAX && !result && !ready(t) && stall_left(t, true) == 0)
        return WAIT_STALLED;
    return result;
}

/* The client's TCP prefix is still queued ahead of any doorbell, so the
 * companion cannot be slept on: a writer (the only kind that waits now)
 * looks again in a little while, until the socket's timeout, and until the
 * companion shows that the client's socket is closed (its process killed:
 * only poll's end flags tell, with the prefix queued ahead of the end). The
 * reader that would take the prefix may never come back (it met that end,
 * or the program only sends), and a wait that looked at neither hung for
 * ever (prefix_unread_peer_killed). After a downgrade the end is the
 * program's own, not a death: the caller's loop finds the connection on
 * TCP. */
static int wait_behind_prefix(struct tcp_sock *t, int fd, bool for_write, uint64_t *until)
{
    struct timespec left;
    if (call_timeout(t, fd, for_write, until, &left) < 0)
        return -EAGAIN;
    struct pollfd p = { .fd = fd, .events = POLLRDHUP };
    if (shunt_real.poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) &&
        !atomic_load(&t->ch.hdr->down)) {
        shunt_log_sock(LOG_DEBUG, t, fd, "companion says the peer is gone (its end behind the TCP prefix)");
        atomic_store(&t->peer_gone, true);
        return 0;
    }
    struct timespec pause = { 0, 200000 };
    nanosleep(&pause, NULL);
    return 0;
}

/*
 * Several threads of one process may wait on one socket (a reader and a
 * writer, say).  A doorbell byte wakes only the thread that consumes it, so
 * only one of them sleeps in the kernel; the others sleep on a futex and
 * are woken, all of them, whenever that one wakes.  futex waits restart
 * under SA_RESTART like recv does, and take the socket's timeout.
 */
int wait_channel(struct tcp_sock *t, int fd, ready_fn ready, bool for_write, bool *blocked, uint64_t *until,
                 struct call_sig *sig)
{
    fd = tcp_call_fd(t, fd);
    if (wait_spin(t, ready))
        return 0;
    if (call_sig_new(sig)) {
        /* a handler ran in this call (while we spun, or before): the
         * kernel's call would have been interrupted by it (restarted under
         * SA_RESTART, unless the socket has a timeout) */
        struct timespec tmo;
        return call_sig_interrupts(sig, socket_timeout(t, fd, for_write, &tmo));
    }
    if (tcp_sock_prefix_left(t))
        return wait_behind_prefix(t, fd, for_write, until);
    crit_lock(&wait_lock);
    if (blocked)
        blocked_calls_count(t, blocked);
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
        uint64_t slept = clock_now_ns();
        result = sleep_in_kernel(t, fd, ready, for_write, until, sig);
        /* Woken soon after giving up: the peer is busy with us, and a spin
         * a little longer would have caught it.  Spin again at once. */
        if (clock_now_ns() - slept < 4000u * (uint64_t)shunt_settings.spin_us)
            wait_spin_paid(t);
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
        struct timespec tmo = { 0, 0 };
        int timed = ready(t) ? 0 : call_timeout(t, fd, for_write, until, &tmo);
        /* A writer grows its ring, and looks for a stalled reader, here too,
         * after as long as the kernel sleeper would: that one may be a reader
         * thread, which does neither, and wakes only for the peer's bytes
         * (send_to_stalled_reader's threads round hung at a 16 KiB ring). */
        bool grow = for_write && timed >= 0 && channel_tx_may_grow_in_place(&t->ch);
        uint64_t cut = grow ? FUTEX_SLEEP_NS : for_write && timed >= 0 ? stall_left(t, false) : UINT64_MAX;
        struct timespec wait_tmo = tmo;
        bool cut_short = cut != UINT64_MAX && cut_sleep(timed > 0, &wait_tmo, cut);
        if (timed < 0) {
            result = -EAGAIN;
        } else if (!grow && cut == 0 && !ready(t)) {
            result = WAIT_STALLED;
        } else if (call_sig_new(sig)) {
            result = call_sig_interrupts(sig, timed != 0);
        } else if (!ready(t)) {
            crit_lock(&wait_lock);
            t->futex_waiters++;
            crit_unlock(&wait_lock);
            int r = futex_wait(&t->wait_gen, gen, timed || cut_short ? &wait_tmo : NULL);
            turn_gave_way(clock_now_ns());
            crit_lock(&wait_lock);
            t->futex_waiters--;
            crit_unlock(&wait_lock);
            if (r == -ETIMEDOUT && !cut_short)
                result = -EAGAIN;
            else if (r == -ETIMEDOUT && !ready(t))
                result = grow ? (channel_tx_may_grow_in_place(&t->ch) ? WAIT_GROW : 0)
                              : stall_left(t, true) == 0 ? WAIT_STALLED : 0;
            else if (r == -EINTR)
                result = !call_sig_new(sig) ? -EINTR : call_sig_interrupts(sig, timed != 0);
        }
        doorbell_leave(t, fd, what);
    }
    return result;
}
