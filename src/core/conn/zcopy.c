/*
 * zcopy.c: single-copy sends (see zcopy.h).
 *
 * Owns: the description of a posted send in the segment (struct zc_desc in
 * the sender's chan_side), its states, the receiver's process_vm_readv,
 * and the sender's wait for it.
 *
 * Protocol.  The sender holds its end's tx lock while it fills the
 * description (state ZC_IDLE) and publishes it with a release store of
 * ZC_POSTED; the ring's head is not moved meanwhile, and no other send
 * puts bytes into the ring until the state is back at ZC_IDLE
 * (zc_tx_busy), so the posted bytes sit exactly at stream position pos.
 * The receiver reads the ring up to pos, then moves the state ZC_POSTED ->
 * ZC_COPYING (acquire: it sees the description), copies, advances done,
 * and releases the state back to ZC_POSTED, or to ZC_DONE when all is
 * taken.  A withdrawal by the sender is a ZC_POSTED -> ZC_IDLE exchange:
 * it succeeds only while no copy is under way, so once the sender's send
 * returns, nobody reads its buffer any more.
 *
 * When the receiver stops taking bytes (it is busy elsewhere, or it is
 * itself stuck sending to us), the sender withdraws the rest after
 * ZC_IDLE_US without progress and lets the ring carry it: a send must not
 * wait on a single copy where kernel TCP (or the ring) would have buffered
 * the bytes, or two programs that send to each other at once deadlock.
 *
 * A kernel refusal (EPERM from ptrace rules, ENOSYS from seccomp) and
 * processes in different pid namespaces turn single copy off for that
 * direction, recorded in the sender's chan_side.zc_off for shunt stat.
 * Everything read from the description is checked before use: it only
 * ever widens what the receiver copies from the sender's own memory, never
 * where it writes, which is its own program's buffers.
 */
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>

#include "base/self.h"
#include "base/log.h"
#include "base/settings.h"
#include "core/conn/stream.h"
#include "core/wait/wait.h"
#include "core/conn/zcopy.h"
#include "base/real.h"

/* How long a posted send waits for the receiver to make progress before
 * the ring takes the rest. */
#define ZC_IDLE_US 2000

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* This process's pid namespace (0: unknown).  A pid in a description
 * means the same process to both ends only within one namespace. */
static uint64_t pidns_self(void)
{
    static _Atomic uint64_t cached;
    uint64_t v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v == 0) {
        struct stat st;
        if (stat("/proc/self/ns/pid", &st) == 0)
            v = (uint64_t)st.st_ino;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

bool zc_tx_busy(struct tcp_sock *t)
{
    /* Only while the receiver may still take bytes: a thread waiting to
     * write is woken by the receiver's last wake-up, which comes with
     * ZC_DONE (or ZC_FAILED), not with the sender's return to ZC_IDLE.
     * acquire: pairs with the receiver's release of those states. */
    uint32_t st = atomic_load_explicit(&t->ch.self->zc.state, memory_order_acquire);
    return st == ZC_POSTED || st == ZC_COPYING;
}

uint64_t zc_pending(struct tcp_sock *t)
{
    struct zc_desc *d = &t->ch.peer->zc;
    uint32_t st = atomic_load_explicit(&d->state, memory_order_acquire);
    if (st != ZC_POSTED && st != ZC_COPYING)
        return 0;
    uint64_t len = d->len, done = atomic_load_explicit(&d->done, memory_order_relaxed);
    /* advisory (readiness, FIONREAD): a torn or hostile pair reads as 1 */
    return done < len && len - done <= SSIZE_MAX ? len - done : 1;
}

/* ---- sender ---- */

static bool eligible(struct tcp_sock *t, const struct iovec *iov, int iovcnt, size_t total, bool may_block)
{
    size_t thr = shunt_settings.zcopy_threshold;
    if (!may_block || thr == 0 || total < thr)
        return false;
    if (atomic_load_explicit(&t->ch.self->zc_off, memory_order_relaxed) != ZC_ON)
        return false;
    int used = 0;
    for (int i = 0; i < iovcnt; i++)
        used += iov[i].iov_len != 0;
    return used <= ZC_SEGS;
}

/* Posts the description under the tx lock; false if the end is shut or
 * another thread's single copy is still out. */
static bool post(struct tcp_sock *t, const struct iovec *iov, int iovcnt, size_t total)
{
    int lk = dir_lock(t, &t->tx_lock, &t->ch.self->tx_lock);
    if (lk < 0)
        return false;
    struct zc_desc *d = &t->ch.self->zc;
    uint64_t head = 0;
    bool ok = !(tcp_sock_own_state(t) & SIDE_SHUT_WR) &&
              atomic_load_explicit(&d->state, memory_order_relaxed) == ZC_IDLE &&
              ring_head_mine(&t->ch.tx, &head) == 0;   /* this end's own index, under the tx lock */
    if (ok) {
        d->pid = (int32_t)getpid();
        d->taker = 0;
        d->pidns = pidns_self();
        d->pos = head;
        d->len = total;
        uint32_t n = 0;
        for (int i = 0; i < iovcnt; i++) {
            if (iov[i].iov_len == 0)
                continue;
            d->seg[n].addr = (uint64_t)(uintptr_t)iov[i].iov_base;
            d->seg[n].len = iov[i].iov_len;
            n++;
        }
        d->nseg = n;
        atomic_store_explicit(&d->done, 0, memory_order_relaxed);
        /* release: pairs with the receiver's acquire exchange to
         * ZC_COPYING; the fields above are visible before the post. */
        atomic_store_explicit(&d->state, ZC_POSTED, memory_order_release);
    }
    dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, lk);
    return ok;
}

/* Takes the description back.  After this returns, the receiver copies
 * nothing more from our buffer. */
static void withdraw(struct tcp_sock *t, int fd)
{
    struct zc_desc *d = &t->ch.self->zc;
    for (;;) {
        uint32_t exp = ZC_POSTED;
        /* acq_rel: the receiver's last copy (its release of ZC_POSTED)
         * happens before we reuse the buffer. */
        if (atomic_compare_exchange_strong_explicit(&d->state, &exp, ZC_IDLE, memory_order_acq_rel,
                                                    memory_order_acquire))
            return;
        if (exp != ZC_COPYING)
            return;   /* ZC_DONE or ZC_FAILED: the caller settles it */
        /* One copy is under way; it ends soon, unless its taker died. */
        pid_t taker = d->taker;
        doorbell_check_peer(t, fd);
        if (stream_peer_finished(t) || (taker > 0 && kill(taker, 0) < 0 && errno == ESRCH)) {
            atomic_store_explicit(&d->state, ZC_IDLE, memory_order_release);
            return;
        }
        sched_yield();
    }
}

/* Waits for progress of the receiver, at most until deadline: spins first
 * (as core/wait/sleep.c would), then sleeps on the companion with a space doorbell
 * armed, which the receiver rings each time it takes bytes. */
static void wait_progress(struct tcp_sock *t, int fd, uint32_t st0, uint64_t done0, uint64_t deadline)
{
    struct zc_desc *d = &t->ch.self->zc;
    uint64_t spin_end = now_ns() + (uint64_t)shunt_settings.spin_us * 1000u;
    if (spin_end > deadline)
        spin_end = deadline;
    static long cpus;
    if (cpus == 0)
        cpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (unsigned i = 1; cpus > 1 && now_ns() < spin_end; i++) {
        if (atomic_load_explicit(&d->state, memory_order_acquire) != st0 ||
            atomic_load_explicit(&d->done, memory_order_relaxed) != done0)
            return;
        if ((i & 255) == 0)
            sched_yield();
    }
    doorbell_enter(t, WANT_SPACE);
    uint64_t now = now_ns();
    if (atomic_load_explicit(&d->state, memory_order_acquire) == st0 &&
        atomic_load_explicit(&d->done, memory_order_relaxed) == done0 && now < deadline) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        struct timespec tmo = { 0, (long)(deadline - now) };
        /* EINTR: looked at again by the caller; a signal never loses bytes */
        shunt_real.ppoll(&p, 1, &tmo, NULL);
    }
    doorbell_leave(t, fd, WANT_SPACE);
}

size_t zc_send(struct tcp_sock *t, int fd, const struct iovec *iov, int iovcnt, size_t total, bool may_block)
{
    if (!eligible(t, iov, iovcnt, total, may_block) || !post(t, iov, iovcnt, total))
        return 0;
    struct zc_desc *d = &t->ch.self->zc;
    doorbell_wake_peer(t, fd, WANT_DATA);
    uint64_t last = 0;
    uint64_t deadline = now_ns() + ZC_IDLE_US * 1000u;
    for (;;) {
        uint32_t st = atomic_load_explicit(&d->state, memory_order_acquire);
        if (st == ZC_DONE || st == ZC_FAILED)
            break;
        uint64_t dn = atomic_load_explicit(&d->done, memory_order_relaxed);
        if (dn != last || st == ZC_COPYING) {
            last = dn;
            deadline = now_ns() + ZC_IDLE_US * 1000u;
        } else if (now_ns() >= deadline || stream_peer_finished(t)) {
            withdraw(t, fd);
            break;
        }
        wait_progress(t, fd, st, dn, deadline);
    }
    /* acquire: pairs with the receiver's release of done */
    uint64_t done = atomic_load_explicit(&d->done, memory_order_acquire);
    if (atomic_load_explicit(&d->state, memory_order_relaxed) == ZC_DONE)
        done = total;
    if (done > total)
        done = total;   /* a peer that scribbled: the ring resends, it never skips */
    /* Counters while the state still keeps other senders out of the ring,
     * which is what the tx lock would otherwise do for them. */
    if (done > 0) {
        counter_add(&t->ch.self->zc_sends, 1);
        counter_add(&t->ch.self->sends, 1);
        counter_add(&t->ch.self->zc_bytes, done);
        counter_add(&t->ch.self->bytes_out, done);
    }
    /* release: the next post or ring write comes after everything above */
    atomic_store_explicit(&d->state, ZC_IDLE, memory_order_release);
    if (done < total)
        doorbell_wake_peer(t, fd, WANT_DATA);   /* the ring carries the rest */
    return (size_t)done;
}

/* ---- receiver ---- */

static void refuse(struct tcp_sock *t, int fd, struct zc_desc *d, unsigned reason, int err)
{
    unsigned old = ZC_ON;
    if (reason != ZC_ON &&
        atomic_compare_exchange_strong(&t->ch.peer->zc_off, &old, reason))
        shunt_log(LOG_INFO, "fd %d: single copy off for this connection: %s", fd,
                  reason == ZC_OFF_PIDNS ? "other pid namespace" : strerror(err));
    /* release: the sender sees the state after our last use of it */
    atomic_store_explicit(&d->state, ZC_FAILED, memory_order_release);
    doorbell_wake_peer(t, fd, WANT_SPACE);
}

/* Builds at most cnt iovecs of (addr, len) pieces covering [skip, skip + want). */
static int slice(struct iovec *out, int cnt, const struct iovec *in, int incnt, size_t skip, size_t want)
{
    int n = 0;
    for (int i = 0; i < incnt && want > 0 && n < cnt; i++) {
        size_t len = in[i].iov_len;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        size_t take = len - skip < want ? len - skip : want;
        out[n].iov_base = (char *)in[i].iov_base + skip;
        out[n].iov_len = take;
        n++;
        want -= take;
        skip = 0;
    }
    return n;
}

ssize_t zc_recv(struct tcp_sock *t, int fd, const struct iovec *iov, int iovcnt, size_t skip, size_t max, bool peek)
{
    struct zc_desc *d = &t->ch.peer->zc;
    if (atomic_load_explicit(&d->state, memory_order_relaxed) != ZC_POSTED || max == 0)
        return 0;
    uint32_t exp = ZC_POSTED;
    /* acquire: pairs with the sender's release of ZC_POSTED (the fields) */
    if (!atomic_compare_exchange_strong_explicit(&d->state, &exp, ZC_COPYING, memory_order_acquire,
                                                 memory_order_relaxed))
        return -EAGAIN;
    d->taker = (int32_t)getpid();

    /* A private copy of the description, checked once. */
    struct zc_desc c;
    c.pid = d->pid;
    c.pidns = d->pidns;
    c.pos = d->pos;
    c.len = d->len;
    c.nseg = d->nseg;
    uint64_t done = atomic_load_explicit(&d->done, memory_order_relaxed);
    struct iovec remote[ZC_SEGS];
    uint64_t sum = 0;
    bool ok = c.nseg <= ZC_SEGS && c.len <= SSIZE_MAX && done < c.len && c.pid > 0;
    for (uint32_t i = 0; ok && i < c.nseg; i++) {
        remote[i].iov_base = (void *)(uintptr_t)d->seg[i].addr;
        remote[i].iov_len = (size_t)d->seg[i].len;
        ok = remote[i].iov_len <= SSIZE_MAX - sum;
        sum += remote[i].iov_len;
    }
    ok = ok && sum == c.len;
    uint64_t tail = 0;
    ok = ok && ring_tail_mine(&t->ch.rx, &tail) == 0;   /* this end's own index */
    if (ok && c.pos != tail) {
        /* The ring still holds bytes from before the post (our look at
         * head came before it): those come first. */
        atomic_store_explicit(&d->state, ZC_POSTED, memory_order_release);
        return c.pos - tail <= t->ch.rx.size ? -EAGAIN : -EIO;
    }
    if (!ok) {
        atomic_store_explicit(&d->state, ZC_FAILED, memory_order_release);
        return -EIO;
    }
    uint64_t mine = pidns_self();
    if (mine == 0 || mine != c.pidns) {
        refuse(t, fd, d, ZC_OFF_PIDNS, 0);
        return -EAGAIN;
    }

    size_t want = c.len - done < max ? (size_t)(c.len - done) : max;
    struct iovec local[IOV_MAX], rem[ZC_SEGS];
    int ln = slice(local, IOV_MAX, iov, iovcnt, skip, want);
    int rn = slice(rem, ZC_SEGS, remote, (int)c.nseg, (size_t)done, want);
    ssize_t n = process_vm_readv(c.pid, local, (unsigned long)ln, rem, (unsigned long)rn, 0);
    if (n <= 0) {
        int e = n < 0 ? errno : EFAULT;
        if (e == EPERM || e == EACCES)
            refuse(t, fd, d, ZC_OFF_EPERM, e);
        else if (e == ENOSYS)
            refuse(t, fd, d, ZC_OFF_ENOSYS, e);
        else
            refuse(t, fd, d, ZC_ON, e);   /* sender gone (ESRCH), or its buffer is bad: the ring decides */
        return -EAGAIN;
    }
    if (peek) {
        atomic_store_explicit(&d->state, ZC_POSTED, memory_order_release);
        return n;
    }
    done += (uint64_t)n;
    /* release: our copy is complete before the sender sees done move and
     * may reuse its buffer (pairs with its acquire of done and state) */
    atomic_store_explicit(&d->done, done, memory_order_release);
    atomic_store_explicit(&d->state, done == c.len ? ZC_DONE : ZC_POSTED, memory_order_release);
    doorbell_wake_peer(t, fd, WANT_SPACE);
    return n;
}
