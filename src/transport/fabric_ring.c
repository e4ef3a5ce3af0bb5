/*
 * fabric_ring.c: a connection's two rings over the fabric engine's puts
 * (fabric_ring.h).
 *
 * Owns: the layout of an end's region and of the blob that describes it,
 * the checks of every word the peer puts into the region, and the order of
 * the puts that move and publish bytes.
 *
 * Indexes.  written and consumed are free-running byte counts, as in
 * ring.c; a byte at stream position p lives at data[p & (size - 1)] of the
 * reader's region.  Each side keeps its own count privately and believes
 * only that one: the peer's word is read once per call, checked, and kept
 * as the last good value.  A reader takes a written count only if it does
 * not go back, is not more than the ring beyond what it consumed, and does
 * not move after a FIN; a writer takes a consumed count only if it does
 * not go back nor pass what it wrote.  Anything else is -EIO, for good:
 * the end is broken and the caller falls back to kernel TCP.
 *
 * Check words.  A put is not one store: over UCX's TCP lanes the bytes of
 * an index come out of a socket into our memory as they arrive, and over
 * cma the kernel copies them, so a word may be seen half written.  Each
 * index is therefore put with a check word beside it (value ^ the key the
 * region's owner chose for that slot, sent in its blob), in one put of 16
 * bytes.  A pair that does not match is a put still landing: the call goes
 * on with the last good value, and only a pair that stays torn for
 * TORN_NS is garbage.  The key also refuses words from anyone who did not
 * read this region's blob (a region reused, a stray put).
 *
 * Order of puts.  A writer puts the bytes, a fence, then the index (the
 * engine's fence: the peer sees no index before the bytes it covers).  A
 * reader copies the bytes out before it puts the consumed count back, so
 * the writer never overwrites a byte still being read.  FIN is a bit of
 * the written count, in the same put, so it can never be seen ahead of or
 * apart from the last bytes.
 *
 * Wake decisions (the doorbell, fabric_ring_bell).  A side about to sleep
 * flushes its own index first, then looks again (fabric_ring.h); a side
 * deciding whether to ring must, the other way, have its index landed
 * before it reads the peer's.  Over shared-memory lanes a put has landed
 * when it returns (the writer stores into the mapped segment, or the
 * kernel copies in process_vm_writev; measured with sysv and posix: the
 * count is in the reader's memory before the reader drives its worker),
 * and a fence between that store and
 * the load is enough; over other lanes (TCP, RDMA) it has not, and the
 * decision costs a flush, paid only by a caller that asks for it and only
 * when the first look does not already say "wake".
 */
#include <errno.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/clock.h"
#include "base/own_file.h"
#include "transport/fabric_engine.h"
#include "transport/fabric_ring.h"

#define FIN_BIT (1ull << 63)
/* In the written count instead: the writer went back to TCP after these
 * bytes (fabric_ring_go_back); final, as FIN is. */
#define BACK_BIT (1ull << 62)
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
#define FRING_VERSION 4u   /* 2: SLEEP_BIT in the consumed count; 3: ASK_BIT, LEAVE_BIT, BACK_BIT in
                            * written, owner_left; 4: OWNER_LEFT_SEEN */
/* owner_left's values: 0, 1 (the owner left, or refused the peer, before it
 * attached), OWNER_LEFT_SEEN (put by the peer: it saw that, and sends by TCP
 * what it put into the ring) */
#define OWNER_LEFT_SEEN 2u

/* The blob's fixed part, then addr_len bytes of worker address and
 * rkey_len bytes of the region's key.  Native byte order: both ends run
 * the same shunt (a different version is refused). */
struct fring_blob {
    uint64_t magic;
    uint32_t version;
    uint32_t addr_len;
    uint32_t rkey_len;
    uint32_t pad;
    uint64_t base;        /* the region's address in its owner's process */
    uint64_t region_len;
    uint64_t ring_size;   /* the owner's receive ring: the peer's outgoing window */
    uint64_t keys[2];     /* the check keys of the owner's slots, by SLOT_ */
    uint8_t nonce[FABRIC_RING_NONCE];
};

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
    bool puts_land;              /* a put has reached the peer's memory when it returns */
    bool broken;
    bool peer_lost;              /* a put of our count to the peer failed: the peer (or the
                                  * lane) is gone; our ring stays readable, nothing goes out */
};

/* Our consumed count as the peer gets it: with ASK_BIT once we asked,
 * LEAVE_BIT once we left. */
static uint64_t consumed_word(const struct fabric_ring *f)
{
    return f->rx_consumed | (f->rx_asked ? ASK_BIT : 0) | (f->rx_left ? LEAVE_BIT : 0);
}

static void say(char *why, size_t len, const char *what)
{
    if (why && len)
        snprintf(why, len, "%s", what);
}

static bool pow2_in_range(uint64_t n)
{
    return n >= FABRIC_RING_MIN && n <= FABRIC_RING_MAX && (n & (n - 1)) == 0;
}

static ssize_t broke(struct fabric_ring *f, int err)
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

int fabric_ring_open(struct fabric_engine *e, size_t rx_size, struct fabric_ring **out, char *why,
                     size_t whylen)
{
    if (!pow2_in_range(rx_size)) {
        say(why, whylen, "ring size not a power of two in range");
        return -EINVAL;
    }
    struct fabric_ring *f = calloc(1, sizeof *f);
    if (!f)
        return -ENOMEM;
    int r = fabric_region_map(e, DATA_AT + rx_size, &f->reg);
    if (r != 0) {
        free(f);
        say(why, whylen, "cannot map the ring's region");
        return r;
    }
    f->e = e;
    f->words = f->reg.base;
    f->rx = (unsigned char *)f->reg.base + DATA_AT;
    f->rx_size = rx_size;
    for (int s = 0; s < 2; s++) {
        /* a zero key would take a zeroed pair (0, 0) for an index */
        while ((f->keys[s] = own_file_random()) == 0)
            ;
    }
    /* Relaxed: the peer learns of the region from the blob, sent after. */
    struct fring_word *w[2] = { &f->words->written, &f->words->consumed };
    for (int s = 0; s < 2; s++) {
        atomic_store_explicit(&w[s]->value, 0, memory_order_relaxed);
        atomic_store_explicit(&w[s]->check, f->keys[s], memory_order_relaxed);
    }
    atomic_store_explicit(&f->words->owner_left, 0, memory_order_relaxed);
    *out = f;
    return 0;
}

ssize_t fabric_ring_blob(struct fabric_ring *f, const uint8_t nonce[FABRIC_RING_NONCE], void *out,
                         size_t cap)
{
    void *addr;
    size_t alen;
    if (fabric_engine_address(f->e, &addr, &alen) != 0)
        return -EIO;
    size_t total = sizeof(struct fring_blob) + alen + f->reg.rkey_len;
    if (total > cap || total > FABRIC_RING_BLOB_MAX) {
        fabric_engine_address_free(f->e, addr);
        return -ENOSPC;
    }
    struct fring_blob b = {
        .magic = FRING_MAGIC,
        .version = FRING_VERSION,
        .addr_len = (uint32_t)alen,
        .rkey_len = (uint32_t)f->reg.rkey_len,
        .base = (uint64_t)(uintptr_t)f->reg.base,
        .region_len = f->reg.len,
        .ring_size = f->rx_size,
        .keys = { f->keys[0], f->keys[1] },
    };
    if (nonce)
        memcpy(b.nonce, nonce, FABRIC_RING_NONCE);
    unsigned char *o = out;
    memcpy(o, &b, sizeof b);
    memcpy(o + sizeof b, addr, alen);
    memcpy(o + sizeof b + alen, f->reg.rkey, f->reg.rkey_len);
    fabric_engine_address_free(f->e, addr);
    return (ssize_t)total;
}

/* Whether every lane maps the peer's region into this process (UCX's sysv
 * and posix transports): the region then outlives the peer's process for
 * as long as we keep the mapping, and what we put there can be read back
 * after the peer left, even across its exec, at no cost before. */
static bool lanes_map_peer(const char *lanes)
{
    if (!*lanes)
        return false;
    for (const char *l = lanes; *l; l += strcspn(l, ",") + (l[strcspn(l, ",")] == ','))
        if (strncmp(l, "sysv/", 5) != 0 && strncmp(l, "posix/", 6) != 0)
            return false;
    return true;
}

/* Whether every lane stores into the peer's memory before the put
 * returns: UCX's shared-memory transports do (a copy into a mapped
 * segment, or the kernel's process_vm_writev). */
static bool lanes_land_at_once(const char *lanes)
{
    static const char *const shm[] = { "sysv/", "posix/", "cma/", "xpmem/", "knem/" };
    if (!*lanes)
        return false;
    for (const char *l = lanes; *l; l += strcspn(l, ",") + (l[strcspn(l, ",")] == ',')) {
        bool known = false;
        for (size_t i = 0; i < sizeof shm / sizeof shm[0]; i++)
            known |= strncmp(l, shm[i], strlen(shm[i])) == 0;
        if (!known)
            return false;
    }
    return true;
}

static int put_slot(struct fabric_ring *f, int s, uint64_t v);

int fabric_ring_attach(struct fabric_ring *f, const void *blob, size_t len,
                       uint8_t nonce[FABRIC_RING_NONCE], char *why, size_t whylen)
{
    struct fring_blob b;
    if (f->peer) {
        say(why, whylen, "already attached");
        return -EISCONN;
    }
    if (len < sizeof b) {
        say(why, whylen, "blob too short");
        return -EPROTO;
    }
    memcpy(&b, blob, sizeof b);   /* once: the caller's buffer may be anyone's */
    if (b.magic != FRING_MAGIC || b.version != FRING_VERSION) {
        say(why, whylen, "not a fabric ring blob of this version");
        return -EPROTO;
    }
    if (b.addr_len == 0 || b.rkey_len == 0 || (uint64_t)b.addr_len + b.rkey_len != len - sizeof b ||
        !pow2_in_range(b.ring_size) || b.region_len < DATA_AT + b.ring_size || b.keys[0] == 0 ||
        b.keys[1] == 0) {
        say(why, whylen, "inconsistent blob");
        return -EPROTO;
    }
    const unsigned char *p = (const unsigned char *)blob + sizeof b;
    int r = fabric_peer_connect(f->e, p, b.addr_len, p + b.addr_len, b.rkey_len, b.base, &f->peer, why,
                                whylen);
    if (r != 0)
        return r;
    char lanes[128];
    fabric_peer_lanes(f->peer, lanes, sizeof lanes);
    if (!lanes_map_peer(lanes)) {
        /* the copy of what we put (touched as used): the peer's memory may
         * be gone when we need it back (RDMA, TCP lanes) */
        void *copy = mmap(NULL, b.ring_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (copy == MAP_FAILED) {
            fabric_peer_close(f->peer);
            f->peer = NULL;
            say(why, whylen, "no memory for the copy of the outgoing ring");
            return -ENOMEM;
        }
        f->tx_copy = copy;
    }
    f->tx_size = b.ring_size;
    f->tx_keys[0] = b.keys[0];
    f->tx_keys[1] = b.keys[1];
    f->puts_land = lanes_land_at_once(lanes);
    if (nonce)
        memcpy(nonce, b.nonce, FABRIC_RING_NONCE);
    /* what was read before the attach: the peer learns of it now */
    if ((f->rx_consumed || f->rx_asked) && (r = put_slot(f, SLOT_CONSUMED, consumed_word(f))) != 0)
        return (int)broke(f, r);
    return 0;
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
    bool fin = v & FIN_BIT, back = v & BACK_BIT;
    uint64_t n = v & ~(FIN_BIT | BACK_BIT);
    if (n - f->rx_written > f->rx_size || n - f->rx_consumed > f->rx_size || (fin && back) ||
        ((f->rx_fin || f->rx_back) && (n != f->rx_written || fin != f->rx_fin || back != f->rx_back)))
        return -EIO;   /* back, beyond the ring, both ends at once, or moved after its end */
    f->rx_written = n;
    f->rx_fin = fin;
    f->rx_back = back;
    return 0;
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
    return refresh(f, s) ? (int)broke(f, -EIO) : 0;
}

/* Puts an index into slot s of the peer's region, with its check word. */
static int put_slot(struct fabric_ring *f, int s, uint64_t v)
{
    uint64_t pair[2] = { v, v ^ f->tx_keys[s] };
    return fabric_put(f->peer, s == SLOT_WRITTEN ? offsetof(struct fring_words, written)
                                                 : offsetof(struct fring_words, consumed),
                      pair, sizeof pair);
}

/* Whether our last put has reached the peer, so that the peer's word read
 * next is as new as the peer's look at ours ("Wake decisions"). */
static int landed(struct fabric_ring *f)
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
    int r = landed(f);
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
        return broke(f, r);
    if (done == 0)
        return 0;
    r = fabric_fence(f->peer);   /* the bytes before the index that publishes them */
    if (r == 0)
        r = put_slot(f, SLOT_WRITTEN, before + done);
    if (r != 0)
        return broke(f, r);
    f->tx_written = before + done;
    /* the peer had read all before this write: it may be asleep */
    if (was_empty && (r = wake_hint(f, SLOT_CONSUMED, &f->tx_consumed, before, was_empty)) != 0)
        return broke(f, r);
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
    uint64_t avail = f->rx_written - before;   /* <= rx_size: checked */
    if (avail == 0)
        return f->rx_fin ? 0 : f->rx_back ? -EXDEV : -EAGAIN;
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
    r = put_slot(f, SLOT_CONSUMED, consumed_word(f));   /* after the copy out: the space is free now */
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
    return r ? r : (int64_t)(f->rx_written - f->rx_consumed);
}

bool fabric_ring_peer_fin(const struct fabric_ring *f)
{
    return f->rx_fin;
}

/* The start of a call that puts to the peer: 0, -EIO or -ENOTCONN. */
static int attached(const struct fabric_ring *f)
{
    return f->broken ? -EIO : !f->peer ? -ENOTCONN : 0;
}

/* The writing side's last count: its bytes so far, then the end (FIN_BIT)
 * or the way back to TCP (BACK_BIT), in one put after them, so that the
 * reader never sees the one before or apart from the other. */
static int end_with(struct fabric_ring *f, uint64_t bit)
{
    int r = attached(f);
    if (r != 0)
        return r;
    if (f->tx_shut)
        return -EPIPE;
    f->tx_shut = true;
    r = fabric_fence(f->peer);   /* after every byte */
    if (r == 0)
        r = put_slot(f, SLOT_WRITTEN, f->tx_written | bit);
    return r ? (int)broke(f, r) : 0;
}

int64_t fabric_ring_writable(struct fabric_ring *f)
{
    int r = look(f, SLOT_CONSUMED);
    if (r != 0 || f->tx_shut)
        return r;
    return (int64_t)(f->tx_size - (f->tx_written - f->tx_consumed));
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
    int r = attached(f);
    if (r != 0 || f->peer_lost)
        return r ? r : -EPIPE;
    *flag = true;
    r = put_slot(f, SLOT_CONSUMED, consumed_word(f));
    if (r == 0)
        r = fabric_flush(f->peer);
    return r ? (int)broke(f, r) : 0;
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
    int r = attached(f);
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
    int r = attached(f);
    if (r != 0)
        return r;
    uint64_t v = OWNER_LEFT_SEEN;
    r = fabric_put(f->peer, offsetof(struct fring_words, owner_left), &v, sizeof v);
    if (r == 0)
        r = fabric_flush(f->peer);
    return r ? (int)broke(f, r) : 0;
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

bool fabric_ring_peer_went_back(struct fabric_ring *f)
{
    return look(f, SLOT_WRITTEN) == 0 && f->rx_back;
}

int fabric_ring_sleep(struct fabric_ring *f)
{
    int r = attached(f);
    if (r != 0 || f->peer_lost || f->tx_peer_left)
        return r;   /* (lost or left: nobody to tell) */
    r = put_slot(f, SLOT_CONSUMED, consumed_word(f) | SLEEP_BIT);
    if (r == 0)
        r = landed(f);
    return r ? (int)broke(f, r) : 0;
}

int fabric_ring_peer_sleeps(struct fabric_ring *f, bool *sleeps)
{
    *sleeps = false;
    int r = attached(f);
    if (r != 0 || f->peer_lost || f->tx_peer_left)
        return r;
    /* read after our last index landed, as every wake decision */
    r = wake_hint(f, SLOT_CONSUMED, &f->tx_peer_sleeps, 1, sleeps);
    return r ? (int)broke(f, r) : 0;
}

int fabric_ring_bell(struct fabric_ring *f)
{
    int r = attached(f);
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
    return r ? (int)broke(f, r) : 0;
}

void fabric_ring_watch(struct fabric_ring *f, int fd, uint32_t pid)
{
    if (f->peer)
        fabric_peer_watch(f->peer, fd, pid);
}

void fabric_ring_lanes(struct fabric_ring *f, char *out, size_t len)
{
    if (f->peer)
        fabric_peer_lanes(f->peer, out, len);
    else if (len)
        out[0] = '\0';
}

void fabric_ring_close(struct fabric_ring *f)
{
    if (!f)
        return;
    fabric_peer_close(f->peer);
    fabric_region_unmap(f->e, &f->reg);
    if (f->tx_copy)
        munmap(f->tx_copy, f->tx_size);
    free(f);
}

void *fabric_ring_region(struct fabric_ring *f, size_t *len)
{
    *len = f->reg.len;
    return f->reg.base;
}
