/*
 * fabric_ring_ends.c: a fabric ring's ends and the way back (fabric_ring.h):
 * the writing side's end (shutdown, the way back to TCP), the reader's ask
 * and leave, the owner_left word, the peer's counts and flags as last
 * looked at, what this end wrote that the peer did not read, and the
 * sleep, the doorbell and the flush.  The design is fabric_ring.c's
 * comment.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "transport/fabric_engine.h"
#include "transport/fabric_ring.h"
#include "transport/fabric_ring_internal.h"

/* The writing side's last count: its bytes so far, then the end (FIN_BIT)
 * or the way back to TCP (BACK_BIT), in one put after them, so that the
 * reader never sees the one before or apart from the other. */
static int end_with(struct fabric_ring *f, uint64_t bit)
{
    int r = fring_attached(f);
    if (r != 0)
        return r;
    if (f->tx_shut)
        return -EPIPE;
    f->tx_shut = true;
    r = fring_order(f);   /* after every byte */
    if (r == 0)
        r = fring_put_slot(f, SLOT_WRITTEN, f->tx_written | bit);
    return r ? (int)fring_broke(f, r) : 0;
}

int fabric_ring_shutdown(struct fabric_ring *f)
{
    int r = end_with(f, FIN_BIT);
    f->tx_fin |= r == 0;
    return r;
}

int fabric_ring_go_back(struct fabric_ring *f)
{
    return end_with(f, BACK_BIT);
}

/* Two puts, so that a reader that leaves meanwhile (its count with
 * LEAVE_BIT) and this end agree on where the bytes sent again by TCP
 * start: the taken word, landed, then a look at the reader's count, then
 * the final word.  A leaver that saw the first waits for the second; one
 * that did not see it put its leave before this end's look (each stores,
 * then loads), so this end sees the leave and starts at its count, as for
 * any leave; otherwise at the count it took back from. */
int fabric_ring_take_back(struct fabric_ring *f, uint64_t keep, uint64_t *from)
{
    int r = fring_attached(f);
    if (r != 0)
        return r;
    fabric_engine_progress(f->e);
    if ((r = fring_refresh_consumed(f)) != 0)
        return (int)fring_broke(f, r);
    if (f->peer_lost || f->tx_peer_left || f->tx_taken || f->tx_fin)
        return -EPIPE;   /* (a leave is served as a leave: fabric_ring_peer_left) */
    uint64_t at = f->tx_consumed > keep ? f->tx_consumed : keep;
    if (at > f->tx_written)
        at = f->tx_written;
    f->tx_shut = true;
    f->tx_taken = true;
    f->tx_take_at = at;
    r = fring_order(f);   /* after every byte: a reader that reads on reads whole bytes */
    if (r == 0)
        r = fring_put_slot(f, SLOT_WRITTEN, at | BACK_BIT | TAKE_BIT);
    if (r == 0)
        r = fring_landed(f);
    if (r == 0)
        r = fring_refresh_consumed(f);
    if (r != 0)
        return (int)fring_broke(f, r);
    if (f->tx_peer_left && f->tx_consumed > at)
        f->tx_take_at = at = f->tx_consumed;
    r = fring_put_slot(f, SLOT_WRITTEN, at | BACK_BIT | TAKE_BIT | TAKE_FINAL_BIT);
    if (r == 0 && !f->tx_peer_left)
        r = fabric_flush(f->peer);   /* (a leaver that waits for it drives its engine; one gone may not) */
    if (r != 0 && !f->tx_peer_left)
        return (int)fring_broke(f, r);
    *from = at;
    return 0;
}

int fabric_ring_peer_took_back(struct fabric_ring *f, uint64_t *skip)
{
    *skip = 0;
    if (f->broken)
        return -EIO;
    fabric_engine_progress(f->e);
    if (fring_refresh_written(f) != 0)
        return (int)fring_broke(f, -EIO);
    if (!f->rx_take)
        return 0;
    if (!f->rx_take_final)
        return -EAGAIN;
    *skip = f->rx_consumed > f->rx_take_at ? f->rx_consumed - f->rx_take_at : 0;
    return 1;
}

/* Sets a flag that every consumed count we put from now on carries, and
 * puts one now, flushed. */
static int tell_peer(struct fabric_ring *f, bool *flag)
{
    int r = fring_attached(f);
    if (r != 0 || f->peer_lost)
        return r ? r : -EPIPE;
    *flag = true;
    r = fring_put_slot(f, SLOT_CONSUMED, fring_consumed_word(f));
    if (r == 0)
        r = fabric_flush(f->peer);
    return r ? (int)fring_broke(f, r) : 0;
}

int fabric_ring_ask(struct fabric_ring *f)
{
    return tell_peer(f, &f->rx_asked);
}

bool fabric_ring_peer_asked(const struct fabric_ring *f)
{
    return f->tx_peer_asks;
}

int fabric_ring_leave(struct fabric_ring *f)
{
    return tell_peer(f, &f->rx_left);
}

int fabric_ring_leave_unattached(struct fabric_ring *f, bool *header)
{
    *header = false;
    if (f->peer)
        return -EISCONN;
    /* Dekker with the peer's fabric_ring_peer_owner_left: our store, then
     * our look at the ring; its put of a count, then its read of the word */
    atomic_store_explicit(&f->words->owner_left, 1, memory_order_seq_cst);
    atomic_thread_fence(memory_order_seq_cst);
    int64_t n = fabric_ring_readable(f);
    if (n < 0)
        return (int)n;
    *header = n > 0;
    return 0;
}

int fabric_ring_peer_owner_left(struct fabric_ring *f, bool *left)
{
    *left = true;   /* what cannot be read back counts as gone */
    int r = fring_attached(f);
    if (r != 0)
        return r;
    atomic_thread_fence(memory_order_seq_cst);   /* our count's store before this load */
    uint64_t v = 1;
    r = fabric_get(f->peer, offsetof(struct fring_words, owner_left), &v, sizeof v);
    if (r == 0)
        *left = v != 0;
    if (r == -ENOENT) {
        r = 0;   /* (over TCP lanes: its ring is gone, its owner with it) */
    } else if (r == -EPIPE) {
        *left = false;   /* closing without an answer (over TCP lanes): its socket tells how it ended */
        r = 0;
    }
    return r;
}

int fabric_ring_ack_owner_left(struct fabric_ring *f)
{
    int r = fring_attached(f);
    if (r != 0)
        return r;
    uint64_t v = OWNER_LEFT_SEEN;
    r = fabric_put(f->peer, offsetof(struct fring_words, owner_left), &v, sizeof v);
    if (r == 0)
        r = fabric_flush(f->peer);
    return r ? (int)fring_broke(f, r) : 0;
}

bool fabric_ring_owner_left_seen(const struct fabric_ring *f)
{
    return atomic_load_explicit(&f->words->owner_left, memory_order_acquire) == OWNER_LEFT_SEEN;
}

bool fabric_ring_peer_left(const struct fabric_ring *f)
{
    return f->tx_peer_left;
}

uint64_t fabric_ring_peer_written(const struct fabric_ring *f)
{
    return f->rx_written;
}

uint64_t fabric_ring_peer_consumed(const struct fabric_ring *f)
{
    return f->tx_consumed;
}

uint64_t fabric_ring_written(const struct fabric_ring *f)
{
    return f->tx_written;
}

ssize_t fabric_ring_unread(struct fabric_ring *f, uint64_t from, void *buf, size_t cap)
{
    /* after a take-back, what the peer read past where it was taken from
     * is sent again too (the peer drops it) */
    uint64_t low = f->tx_taken && f->tx_take_at < f->tx_consumed ? f->tx_take_at : f->tx_consumed;
    if (!f->peer || from - low > f->tx_written - low)
        return -EINVAL;   /* (from is ours: within what the peer had not read) */
    uint64_t n = f->tx_written - from, at = from & (f->tx_size - 1);
    if (n > cap)
        n = cap;
    if (n > f->tx_size - at)
        n = f->tx_size - at;   /* up to the ring's end; the caller asks again for the rest */
    if (n == 0)
        return 0;
    if (f->tx_copy) {
        memcpy(buf, f->tx_copy + at, n);
        return (ssize_t)n;
    }
    int r = fabric_get(f->peer, DATA_AT + at, buf, n);
    return r ? r : (ssize_t)n;
}

int fabric_ring_sleep(struct fabric_ring *f)
{
    int r = fring_attached(f);
    if (r != 0 || f->peer_lost || f->tx_peer_left)
        return r;   /* (lost or left: nobody to tell) */
    r = fring_put_slot(f, SLOT_CONSUMED, fring_consumed_word(f) | SLEEP_BIT);
    if (r == 0)
        r = fring_landed(f);
    if (r)
        r = (int)fring_broke(f, r);
    return r == -EPIPE ? 0 : r;   /* the peer lost now: as above (the caller's socket says how it ended) */
}

int fabric_ring_bell(struct fabric_ring *f)
{
    int r = fring_attached(f);
    if (r != 0 || f->peer_lost || f->tx_peer_left)
        return r ? r : -EPIPE;   /* (lost or left: nobody to wake) */
    return fabric_bell(f->peer);   /* a failure leaves the end as it is: a doorbell is a hint */
}

int fabric_ring_flush(struct fabric_ring *f)
{
    if (f->broken)
        return -EIO;
    if (!f->peer || f->tx_peer_left)
        return 0;   /* (a peer that left waits for nothing of ours) */
    int r = fabric_flush(f->peer);
    return r ? (int)fring_broke(f, r) : 0;
}
