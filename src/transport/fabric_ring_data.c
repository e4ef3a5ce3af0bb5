/*
 * fabric_ring_data.c: a fabric ring's slots and its data path
 * (fabric_ring.h): the peer's counts read from this end's region and
 * checked, this end's put into the peer's, whether a put has landed, the
 * bytes moved in pieces, the write and the read, and the looks the send
 * and receive paths make: bytes readable, room writable, whether the peer
 * went back, whether it sleeps (after a write).  The design (indexes,
 * check words, the order of puts, wake decisions) is fabric_ring.c's
 * comment.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "base/clock.h"
#include "transport/fabric_engine.h"
#include "transport/fabric_ring.h"
#include "transport/fabric_ring_internal.h"

/* Our consumed count as the peer gets it: with ASK_BIT once we asked,
 * LEAVE_BIT once we left. */
uint64_t fring_consumed_word(const struct fabric_ring *f)
{
    return f->rx_consumed | (f->rx_asked ? ASK_BIT : 0) | (f->rx_left ? LEAVE_BIT : 0);
}

ssize_t fring_broke(struct fabric_ring *f, int err)
{
    if (err == -EPIPE) {
        /* the engine says the peer is gone, its socket closing (over TCP
         * lanes: fabric_peer_watch): as a dead peer's memory on the
         * shared-memory lanes, it takes nothing more of ours, and the
         * socket tells how it ended */
        f->peer_lost = true;
        return err;
    }
    f->broken = true;
    return err;
}

/* Reads slot s of our region: 1 and *v if its pair is whole, 0 if it is
 * still landing (the caller keeps its last good value), -EIO if it stayed
 * torn for TORN_NS.  The value is read before and after the check, so a
 * pair whose put lands while we read is not taken for whole. */
static int slot_load(struct fabric_ring *f, int s, uint64_t *v)
{
    struct fring_word *w = s == SLOT_WRITTEN ? &f->words->written : &f->words->consumed;
    /* acquire: the bytes an index covers are read after it (the peer's
     * fence put them first) */
    uint64_t a = atomic_load_explicit(&w->value, memory_order_acquire);
    uint64_t c = atomic_load_explicit(&w->check, memory_order_acquire);
    uint64_t b = atomic_load_explicit(&w->value, memory_order_acquire);
    if (a == b && (a ^ f->keys[s]) == c) {
        f->torn_since[s] = 0;
        *v = a;
        return 1;
    }
    uint64_t now = clock_now_ns();
    if (!f->torn_since[s])
        f->torn_since[s] = now;
    else if (now - f->torn_since[s] > TORN_NS)
        return -EIO;
    return 0;
}

/* The writer's take-back word (fabric_ring_take_back), checked: well
 * formed (ok), never after a FIN, at most a ring from what we consumed
 * either way; once seen, the same count again, or
 * the final word with it, or, if we left meanwhile, with our final count
 * (the writer saw our leave after its take: it sends again from there);
 * once final, never moved.  rx_written stays the writer's last count of
 * bytes.  0 or -EIO. */
static int take_word(struct fabric_ring *f, uint64_t n, bool ok, bool final)
{
    if (!ok || f->rx_fin)
        return -EIO;
    if (f->rx_take_final)
        return final && n == f->rx_take_at ? 0 : -EIO;
    if (f->rx_take) {
        if (n != f->rx_take_at && !(final && f->rx_left && n == f->rx_consumed))
            return -EIO;
    } else if ((n < f->rx_consumed ? f->rx_consumed - n : n - f->rx_consumed) > f->rx_size) {
        return -EIO;   /* further than a ring from what we read, either way (our last look at
                        * its count may be old: a reader that never looked has none) */
    }
    f->rx_take = true;
    f->rx_take_final = final;
    f->rx_take_at = n;
    f->rx_back = true;
    return 0;
}

/* The peer's count in slot s, checked and kept as the last good value:
 * written (rx_written, rx_fin) against what we consumed, consumed
 * (tx_consumed) against what we wrote.  0 or -EIO. */
static int refresh(struct fabric_ring *f, int s)
{
    uint64_t v;
    int r = slot_load(f, s, &v);
    if (r <= 0)
        return r;
    if (s == SLOT_CONSUMED) {
        bool sleeps = v & SLEEP_BIT, asks = v & (ASK_BIT | LEAVE_BIT), left = v & LEAVE_BIT;
        v &= ~(SLEEP_BIT | ASK_BIT | LEAVE_BIT);
        if (v - f->tx_consumed > f->tx_written - f->tx_consumed || v & (FIN_BIT | BACK_BIT) ||
            (f->tx_peer_left && (v != f->tx_consumed || !left)))
            return -EIO;   /* back, past what we wrote, or moved after it left */
        f->tx_consumed = v;
        f->tx_peer_sleeps = sleeps;   /* 0 or 1 */
        f->tx_peer_asks |= asks;      /* an ask is never taken back */
        f->tx_peer_left = left;
        return 0;
    }
    bool fin = v & FIN_BIT, back = v & BACK_BIT, take = v & TAKE_BIT, final = v & TAKE_FINAL_BIT;
    uint64_t n = v & ~(FIN_BIT | BACK_BIT | TAKE_BIT | TAKE_FINAL_BIT);
    if (take || final)
        return take_word(f, n, back && take && !fin, final);
    if (n - f->rx_written > f->rx_size || n - f->rx_consumed > f->rx_size || (fin && back) || f->rx_take ||
        ((f->rx_fin || f->rx_back) && (n != f->rx_written || fin != f->rx_fin || back != f->rx_back)))
        return -EIO;   /* back, beyond the ring, both ends at once, or moved after its end */
    f->rx_written = n;
    f->rx_fin = fin;
    f->rx_back = back;
    return 0;
}

/* Bytes readable as last looked at: up to the writer's count, or up to
 * where it took back from (none once we read past it). */
static uint64_t fring_readable_now(const struct fabric_ring *f)
{
    if (f->rx_take)
        return f->rx_take_at > f->rx_consumed ? f->rx_take_at - f->rx_consumed : 0;
    return f->rx_written - f->rx_consumed;   /* <= rx_size: checked */
}

int fring_refresh_consumed(struct fabric_ring *f)
{
    return refresh(f, SLOT_CONSUMED);
}

int fring_refresh_written(struct fabric_ring *f)
{
    return refresh(f, SLOT_WRITTEN);
}

/* The start of every call on a connected end: not broken, the worker
 * driven once (over TCP lanes the peer's puts land only so), the peer's
 * count in slot s taken.  0, -EIO or -ENOTCONN. */
static int look(struct fabric_ring *f, int s)
{
    if (f->broken)
        return -EIO;
    if (!f->peer && s != SLOT_WRITTEN)
        return -ENOTCONN;   /* before the attach an end may read its ring, nothing else */
    fabric_engine_progress(f->e);
    return refresh(f, s) ? (int)fring_broke(f, -EIO) : 0;
}

/* Puts an index into slot s of the peer's region, with its check word. */
int fring_put_slot(struct fabric_ring *f, int s, uint64_t v)
{
    uint64_t pair[2] = { v, v ^ f->tx_keys[s] };
    return fabric_put(f->peer, s == SLOT_WRITTEN ? offsetof(struct fring_words, written)
                                                 : offsetof(struct fring_words, consumed),
                      pair, sizeof pair);
}

/* Whether our last put has reached the peer, so that the peer's word read
 * next is as new as the peer's look at ours ("Wake decisions"). */
int fring_landed(struct fabric_ring *f)
{
    if (f->puts_land) {
        atomic_thread_fence(memory_order_seq_cst);   /* our store before our load */
        return 0;
    }
    return fabric_flush(f->peer);
}

/* Moves up to max bytes between iov (from its byte skip) and the ring
 * from stream position pos, in pieces that do not cross the ring's end;
 * *done is what moved.  0, or the first piece's error. */
static int pieces(struct fabric_ring *f, const struct iovec *iov, int iovcnt, size_t skip, uint64_t pos,
                  uint64_t size, uint64_t max, int (*move)(struct fabric_ring *, uint64_t, void *, size_t),
                  uint64_t *done)
{
    *done = 0;
    for (int i = 0; i < iovcnt && *done < max; i++) {
        unsigned char *p = iov[i].iov_base;
        size_t len = iov[i].iov_len;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        p += skip;
        len -= skip;
        skip = 0;
        while (len && *done < max) {
            uint64_t at = (pos + *done) & (size - 1);
            uint64_t n = len;
            if (n > max - *done)
                n = max - *done;
            if (n > size - at)
                n = size - at;   /* up to the end of the ring, the rest from its start */
            int r = move(f, at, p, n);
            if (r != 0)
                return r;
            p += n;
            len -= n;
            *done += n;
        }
    }
    return 0;
}

/* Puts from the copy where there is one, which keeps the bytes until the
 * peer consumed them (on shared-memory lanes it cost a quarter of the
 * 64 KiB stream's rate in fabric_ring_bench, so there the bytes are read
 * back from the peer's region instead; on RDMA lanes a put's source is
 * best memory the engine registered anyway). */
static int put_piece(struct fabric_ring *f, uint64_t at, void *src, size_t n)
{
    if (!f->tx_copy)
        return fabric_put(f->peer, DATA_AT + at, src, n);
    memcpy(f->tx_copy + at, src, n);
    return fabric_put(f->peer, DATA_AT + at, f->tx_copy + at, n);
}

static int copy_piece(struct fabric_ring *f, uint64_t at, void *dst, size_t n)
{
    memcpy(dst, f->rx + at, n);
    return 0;
}

/* *hint: whether the peer's count in slot s (*seen) is target, by a look after our
 * last put landed ("Wake decisions"): the first look suffices when it
 * says yes.  0 or -errno. */
static int wake_hint(struct fabric_ring *f, int s, const uint64_t *seen,
                     uint64_t target, bool *hint)
{
    if ((*hint = *seen == target))
        return 0;
    int r = fring_landed(f);
    if (r == 0)
        r = refresh(f, s);
    *hint = *seen == target;
    return r;
}

ssize_t fabric_ring_write(struct fabric_ring *f, const struct iovec *iov, int iovcnt, size_t skip,
                          bool *was_empty)
{
    int r = look(f, SLOT_CONSUMED);
    if (r != 0)
        return r;
    if (f->tx_shut || f->peer_lost || f->tx_peer_left)
        return -EPIPE;
    uint64_t before = f->tx_written;
    uint64_t space = f->tx_size - (before - f->tx_consumed);
    if (space == 0)
        return -EAGAIN;
    uint64_t done;
    r = pieces(f, iov, iovcnt, skip, before, f->tx_size, space, put_piece, &done);
    if (r != 0)
        return fring_broke(f, r);
    if (done == 0)
        return 0;
    r = fring_order(f);   /* the bytes before the index that publishes them */
    if (r == 0)
        r = fring_put_slot(f, SLOT_WRITTEN, before + done);
    if (r != 0)
        return fring_broke(f, r);
    f->tx_written = before + done;
    /* the peer had read all before this write: it may be asleep */
    if (was_empty && (r = wake_hint(f, SLOT_CONSUMED, &f->tx_consumed, before, was_empty)) != 0)
        return fring_broke(f, r);
    return (ssize_t)done;
}

ssize_t fabric_ring_read(struct fabric_ring *f, const struct iovec *iov, int iovcnt, bool peek,
                         bool *was_full)
{
    if (f->rx_left)
        return -EPIPE;   /* its count is final: the writer sends the rest by TCP */
    int r = look(f, SLOT_WRITTEN);
    if (r != 0)
        return r;
    uint64_t before = f->rx_consumed;
    uint64_t avail = fring_readable_now(f);
    if (avail == 0)   /* (a take-back's way back once it is final: where its TCP bytes start is known) */
        return f->rx_fin ? 0 : f->rx_take && !f->rx_take_final ? -EAGAIN : f->rx_back ? -EXDEV : -EAGAIN;
    uint64_t done;
    pieces(f, iov, iovcnt, 0, before, f->rx_size, avail, copy_piece, &done);
    if (peek || done == 0)
        return (ssize_t)done;
    f->rx_consumed = before + done;
    if (!f->peer || f->peer_lost || f->tx_peer_left)
        return (ssize_t)done;   /* the space goes back at the attach; or to nobody (a peer that
                                 * left may not drive its engine any more: over TCP lanes a put
                                 * to it would wait for nothing) */
    atomic_thread_fence(memory_order_release);   /* the copies out before the put that frees their space */
    r = fring_put_slot(f, SLOT_CONSUMED, fring_consumed_word(f));   /* after the copy out: the space is free now */
    if (r != 0) {
        /* the peer is gone (over TCP lanes its socket is closed): the bytes
         * it put before are ours all the same, delivered as kernel TCP
         * delivers what it acknowledged; what follows tells the caller */
        f->peer_lost = true;
        return (ssize_t)done;
    }
    /* the ring was full before this read: the peer may wait for space.
     * A look that fails (the peer gone: over TCP lanes its flush fails)
     * takes nothing back: these bytes are the caller's, as above */
    if (was_full && wake_hint(f, SLOT_WRITTEN, &f->rx_written, before + f->rx_size, was_full) != 0)
        f->peer_lost = true;
    return (ssize_t)done;
}

int64_t fabric_ring_readable(struct fabric_ring *f)
{
    int r = look(f, SLOT_WRITTEN);
    return r ? r : (int64_t)fring_readable_now(f);
}

bool fabric_ring_peer_fin(const struct fabric_ring *f)
{
    return f->rx_fin;
}

int64_t fabric_ring_writable(struct fabric_ring *f)
{
    int r = look(f, SLOT_CONSUMED);
    if (r != 0 || f->tx_shut)
        return r;
    return (int64_t)(f->tx_size - (f->tx_written - f->tx_consumed));
}

bool fabric_ring_peer_went_back(struct fabric_ring *f)
{
    return look(f, SLOT_WRITTEN) == 0 && f->rx_back;
}

int fabric_ring_peer_sleeps(struct fabric_ring *f, bool *sleeps)
{
    *sleeps = false;
    int r = fring_attached(f);
    if (r != 0 || f->peer_lost || f->tx_peer_left)
        return r;
    /* read after our last index landed, as every wake decision */
    r = wake_hint(f, SLOT_CONSUMED, &f->tx_peer_sleeps, 1, sleeps);
    return r ? (int)fring_broke(f, r) : 0;
}
