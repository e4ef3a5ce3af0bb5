/*
 * fabric_ring_internal.h: what the files of a fabric ring share
 * (fabric_ring.c, fabric_ring_data.c, fabric_ring_ends.c): the layout of an
 * end's region, the bits of its counts, and the ring object; nothing outside
 * transport's fabric_ring*.c includes it.  The public side is fabric_ring.h.
 */
#ifndef SHUNT_TRANSPORT_FABRIC_RING_INTERNAL_H
#define SHUNT_TRANSPORT_FABRIC_RING_INTERNAL_H

#include <errno.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "transport/fabric_engine.h"
#include "transport/fabric_ring.h"

#define FIN_BIT (1ull << 63)
/* In the written count instead: the writer went back to TCP after these
 * bytes (fabric_ring_go_back); final, as FIN is. */
#define BACK_BIT (1ull << 62)
/* With BACK_BIT, the writer went back taking back what its reader had not
 * consumed (fabric_ring_take_back): the count is then where the bytes it
 * sends again by TCP start, not where its bytes end.  Put twice: without
 * TAKE_FINAL_BIT (taken, the reader's leave not yet looked at), then with
 * it, the count where the bytes sent again start (the same, or the count
 * of a reader that left meanwhile); final, as FIN is. */
#define TAKE_BIT (1ull << 61)
#define TAKE_FINAL_BIT (1ull << 60)
/* In the consumed count: the reader has read everything and is about to
 * sleep (fabric_ring_sleep); its next read's count clears it. */
#define SLEEP_BIT (1ull << 62)
/* In the consumed count, from some count on in every one: the reader asks
 * the writer to stop writing into the ring (fabric_ring_ask). */
#define ASK_BIT (1ull << 61)
/* ... or leaves: it reads nothing past this count, which stays as it is,
 * and the writer sends again by TCP what it wrote past it
 * (fabric_ring_leave).  Implies ASK_BIT. */
#define LEAVE_BIT (1ull << 60)
/* How long an index may stay half-landed before it counts as garbage: a
 * TCP lane finishes a split put with its next segment, which a
 * retransmission may delay by a few hundred ms. */
#define TORN_NS (1000ull * 1000 * 1000)

/* An index and its check word, put together in one put of 16 bytes. */
struct fring_word {
    _Atomic uint64_t value;
    _Atomic uint64_t check;
};

/* The start of an end's region: written only by the peer's puts, but for
 * owner_left, which only its owner writes and the peer reads back. */
struct fring_words {
    alignas(64) struct fring_word written;    /* bytes the peer put into our ring (| FIN_BIT) */
    alignas(64) struct fring_word consumed;   /* bytes the peer read out of its ring, our outgoing one */
    alignas(64) _Atomic uint64_t owner_left;  /* we left before we attached (fabric_ring_leave_unattached) */
};
#define SLOT_WRITTEN 0
#define SLOT_CONSUMED 1
#define DATA_AT 192u

/* Both ends compute these offsets: a change must bump FRING_VERSION. */
_Static_assert(offsetof(struct fring_words, written) == 0, "fring_words moved: bump FRING_VERSION");
_Static_assert(offsetof(struct fring_words, consumed) == 64, "fring_words moved: bump FRING_VERSION");
_Static_assert(offsetof(struct fring_words, owner_left) == 128, "fring_words moved: bump FRING_VERSION");
_Static_assert(sizeof(struct fring_words) <= DATA_AT, "fring_words overlaps the data: bump FRING_VERSION");
_Static_assert(__atomic_always_lock_free(sizeof(uint64_t), 0), "fabric ring indexes need lock-free 64-bit atomics");

#define FRING_MAGIC 0x474e495242414653ull   /* "SFABRING" */
#define FRING_VERSION 5u   /* 2: SLEEP_BIT in the consumed count; 3: ASK_BIT, LEAVE_BIT, BACK_BIT in
                            * written, owner_left; 4: OWNER_LEFT_SEEN; 5: TAKE_BIT, TAKE_FINAL_BIT */
/* owner_left's values: 0, 1 (the owner left, or refused the peer, before it
 * attached), OWNER_LEFT_SEEN (put by the peer: it saw that, and sends by TCP
 * what it put into the ring) */
#define OWNER_LEFT_SEEN 2u

struct fabric_ring {
    struct fabric_engine *e;
    struct fabric_region reg;
    struct fring_words *words;   /* reg.base */
    unsigned char *rx;           /* reg.base + DATA_AT */
    uint64_t rx_size;
    uint64_t keys[2];            /* ours, for the words the peer puts here */
    uint64_t torn_since[2];      /* when a slot was first seen torn, 0 if it is not */

    uint64_t rx_written;         /* the last good count the peer put here */
    bool rx_fin;                 /* ... carried the FIN */
    bool rx_back;                /* ... carried BACK_BIT */
    bool rx_take;                /* ... carried TAKE_BIT: the writer takes back from rx_take_at */
    bool rx_take_final;          /* ... and TAKE_FINAL_BIT: rx_take_at is where its TCP bytes start */
    uint64_t rx_take_at;
    uint64_t rx_consumed;        /* ours */
    bool rx_asked;               /* we asked the writer to stop (ASK_BIT in every count we put) */
    bool rx_left;                /* we left the ring (LEAVE_BIT): rx_consumed is final */

    struct fabric_peer *peer;
    uint64_t tx_size;
    uint64_t tx_keys[2];         /* the peer's, for the words we put there */
    uint64_t tx_written;         /* ours */
    uint64_t tx_consumed;        /* the last good count the peer put back */
    uint64_t tx_peer_sleeps;     /* ... carried SLEEP_BIT: 1, else 0 (a count for wake_hint) */
    bool tx_peer_asks;           /* a count the peer put back carried ASK_BIT (kept once seen) */
    bool tx_peer_left;           /* ... LEAVE_BIT: tx_consumed is final */
    unsigned char *tx_copy;      /* what we put into the peer's ring, by the same offsets (tx_size
                                  * bytes, touched as used), to send again by TCP if the peer
                                  * leaves; NULL where we read it back from there instead */
    bool tx_shut;
    bool tx_fin;                 /* ... by a FIN */
    bool tx_taken;               /* we took back what the peer had not consumed ... */
    uint64_t tx_take_at;         /* ... from this count on: we send it again by TCP */
    bool puts_land;              /* a put has reached the peer's memory when it returns */
    bool broken;
    bool peer_lost;              /* a put of our count to the peer failed: the peer (or the
                                  * lane) is gone; our ring stays readable, nothing goes out */
};

/* The start of a call that puts to the peer: 0, -EIO or -ENOTCONN. */
static inline int fring_attached(const struct fabric_ring *f)
{
    return f->broken ? -EIO : !f->peer ? -ENOTCONN : 0;
}

/* The puts so far reach the peer before the next ones (fabric_ring.c,
 * "Order of puts"): 0 or -EIO. */
static inline int fring_order(const struct fabric_ring *f)
{
    if (f->puts_land) {
        atomic_thread_fence(memory_order_release);   /* they are there: only the CPU's stores to order */
        return 0;
    }
    return fabric_fence(f->peer);
}

/* fabric_ring_data.c: what fabric_ring.c and fabric_ring_ends.c use of it. */
uint64_t fring_consumed_word(const struct fabric_ring *f);   /* our consumed count as the peer gets it */
ssize_t fring_broke(struct fabric_ring *f, int err);          /* err; the end broken, or the peer lost (-EPIPE) */
int fring_put_slot(struct fabric_ring *f, int s, uint64_t v); /* an index into slot s of the peer's region */
int fring_landed(struct fabric_ring *f);                      /* our last put has reached the peer */
int fring_refresh_consumed(struct fabric_ring *f);            /* the peer's consumed count, checked: 0 or -EIO */
int fring_refresh_written(struct fabric_ring *f);             /* the peer's written count, checked: 0 or -EIO */

#endif
