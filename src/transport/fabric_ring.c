/*
 * fabric_ring.c: a connection's two rings over the fabric engine's puts
 * (fabric_ring.h): the design, below, and the ring object: an end's region
 * opened, the blob that describes it, the attach to the peer's, the lanes,
 * the close.  The slots, the puts and the data path are fabric_ring_data.c;
 * the ends and the way back (shutdown, go back, take back, ask, leave,
 * owner_left, sleep, bell, flush) are fabric_ring_ends.c; what the three share is
 * fabric_ring_internal.h.
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
 * not move after a FIN (a take-back's count, which goes back on purpose,
 * only within a ring of what it consumed, and final: take_word); a writer
 * takes a consumed count only if it does not go back nor pass what it
 * wrote.  Anything else is -EIO, for good:
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
 * peer sees no index before the bytes it covers).  Where puts land as they
 * return (shared-memory lanes) the fence is a store fence of our own: UCX's
 * worker fence became a flush of every endpoint of the worker once its new
 * protocols were on (UCX 1.16 and later, FENCE_MODE "auto"), which costs a
 * round of every peer's lanes and waits without bound for a peer that died
 * on those lanes (found with UCX 1.22: procs_epoll_peer_killed hung in the
 * fabric mode).  Other lanes keep the engine's fence.  A
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
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/own_file.h"
#include "transport/fabric_engine.h"
#include "transport/fabric_ring.h"
#include "transport/fabric_ring_internal.h"

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

static void say(char *why, size_t len, const char *what)
{
    if (why && len)
        snprintf(why, len, "%s", what);
}

static bool pow2_in_range(uint64_t n)
{
    return n >= FABRIC_RING_MIN && n <= FABRIC_RING_MAX && (n & (n - 1)) == 0;
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
    if ((f->rx_consumed || f->rx_asked) && (r = fring_put_slot(f, SLOT_CONSUMED, fring_consumed_word(f))) != 0)
        return (int)fring_broke(f, r);
    return 0;
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
