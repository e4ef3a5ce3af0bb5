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
    return end_with(f, FIN_BIT);
}

int fabric_ring_go_back(struct fabric_ring *f)
{
    return end_with(f, BACK_BIT);
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
    if (!f->peer || from - f->tx_consumed > f->tx_written - f->tx_consumed)
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
