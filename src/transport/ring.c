/*
 * ring.c: the single-producer, single-consumer byte ring (see ring.h).
 *
 * Owns: the index arithmetic, the copies in and out of the ring's data, the
 * FIN marker, and the validation of everything read from the shared header.
 *
 * Indexes.  head and tail are free-running byte counts (they are never
 * masked in shared memory); a byte at stream position p lives at
 * data[p & (size - 1)].  An honest ring always has 0 <= head - tail <= size
 * in unsigned 64-bit arithmetic; anything else is a peer that scribbled on
 * the header, and the call answers -EIO.  Each call loads every shared index
 * it uses once, checks that value, and then works only with its own copy, so
 * a peer changing the header in the middle of a call cannot widen a copy:
 * every copy is bounded by min(checked distance, size, max), and every
 * offset into data is masked by the private size.
 *
 * Size.  The ring's size now (hdr->size, 0 meaning the whole capacity) is
 * loaded after head by the consumer and changed by the producer before its
 * next W1, only while the ring is empty (ring_resize) or while every unread
 * byte keeps its place under both sizes (ring_grow_in_place): a consumer
 * that sees the new head therefore sees the new size, and one that sees
 * the old head either has nothing to read or reads the same bytes by
 * either size (read_size).  Every size loaded is checked against the private
 * capacity, so a scribbled one is -EIO, never a wider copy.
 *
 * Copies.  A check of bounds cannot tell a scribbled head one byte ahead
 * from a true one: the consumer would read a byte nobody wrote.  So each
 * word has a copy beside it, stored by its one writer just before the word
 * itself (head_copy, then head; tail_copy, then tail; the same for fin and
 * size), and a reader loads the word first, then its copy: the copy is then
 * never older than the word, so an honest pair has copy == word for a side's
 * own index, and for the other side's index a copy no further back.  The
 * other side's index is taken as the pair's more cautious value: the head
 * nearer to tail (the consumer reads no byte either one does not promise),
 * the tail further from head (the producer overwrites no byte either one
 * does not free).  A side's own index, fin and size must have equal copies
 * (their writer is not moving them: a mismatch is a scribble, -EIO).  One
 * scribbled word therefore makes a side wait, stop or fail with -EIO, never
 * read stale bytes or overwrite unread ones; only a scribbler writing both
 * copies alike can, as a peer could by sending wrong bytes.
 *
 * Memory ordering (each pair is named again where it happens):
 *   W1  ring_write: release store of head, after the copy into data.
 *   R1  ring_read, ring_readable, ring_at_eof: acquire load of head, before
 *       the copy out of data.  R1 pairs with W1: the bytes below head are
 *       visible to the consumer before it reads them.
 *   R2  ring_read: release store of tail, after the copy out of data.
 *   W2  ring_write, ring_writable: acquire load of tail, before the copy into
 *       data.  W2 pairs with R2: the consumer is done with the bytes below
 *       tail before the producer overwrites them.
 *   F1  ring_set_fin: release store of fin, after the producer's last W1.
 *   E1  ring_at_eof: acquire load of fin, before its load of head.  E1 pairs
 *       with F1: having seen fin, the consumer sees head == fin - 1.
 * Each side loads its own index (head for the producer, tail for the
 * consumer) relaxed: only that side stores it.  A handover of a side between
 * threads or processes must go through a lock of that endpoint, which orders
 * it.  The bytes of data are plain memory: a hostile peer racing on them
 * only changes what is read, never where.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "transport/ring.h"

/* The private view must describe a ring this process set up; a broken one
 * is a bug of the caller, reported rather than dereferenced. */
static bool view_ok(const struct ring_view *r)
{
    return r != NULL && r->hdr != NULL && r->data != NULL && r->size != 0 &&
           (r->size & (r->size - 1)) == 0;
}

/* The header is still this ring's: a whole header written over it (zeroed,
 * or another ring's copied in, indexes and their copies alike) is not. */
static bool tag_ok(const struct ring_view *r)
{
    return atomic_load_explicit(&r->hdr->tag, memory_order_relaxed) == r->tag;
}

void ring_init(struct ring_hdr *hdr, uint64_t tag)
{
    atomic_store_explicit(&hdr->tag, tag, memory_order_relaxed);
    /* Relaxed: the segment is published to the peer later, by the channel's
     * name travelling through the registry, whose lock orders these stores. */
    atomic_store_explicit(&hdr->head, 0, memory_order_relaxed);
    atomic_store_explicit(&hdr->head_copy, 0, memory_order_relaxed);
    atomic_store_explicit(&hdr->tail, 0, memory_order_relaxed);
    atomic_store_explicit(&hdr->tail_copy, 0, memory_order_relaxed);
    atomic_store_explicit(&hdr->fin, 0, memory_order_relaxed);
    atomic_store_explicit(&hdr->fin_copy, 0, memory_order_relaxed);
    atomic_store_explicit(&hdr->size, 0, memory_order_relaxed);
    atomic_store_explicit(&hdr->size_copy, 0, memory_order_relaxed);
    memset(hdr->pad, 0, sizeof hdr->pad);
}

/* A stored size (0: the whole capacity) as a size, or 0 if out of range. */
static uint64_t size_of(const struct ring_view *r, uint64_t s)
{
    if (s == 0)
        return r->size;
    return s >= RING_MIN_SIZE && s <= r->size && (s & (s - 1)) == 0 ? s : 0;
}

/* The size now, checked against the capacity and its copy; 0 for a corrupt
 * header.  relaxed: ordered by the head load before it (see "Size" above).
 * Only where the copies cannot be moving: the producer's own, or a
 * consumer's with bytes to read (no resize while the ring is not empty). */
static uint64_t live_size(const struct ring_view *r)
{
    uint64_t s = atomic_load_explicit(&r->hdr->size, memory_order_relaxed);
    uint64_t c = atomic_load_explicit(&r->hdr->size_copy, memory_order_relaxed);
    return s == c ? size_of(r, s) : 0;
}

/* The consumer's size for the bytes [tail, tail + avail) it is about to
 * read: both copies alike; or, while the producer grows the ring in place
 * (ring_grow_in_place: the copy first, then the word), two sizes under
 * which every one of those bytes has the same place, so that either gives
 * the same offsets (the smaller is used, and bounds the read).  Anything
 * else is 0, a corrupt header: one scribbled size word can thus make a read
 * use the other size only where both name the same bytes. */
static uint64_t read_size(const struct ring_view *r, uint64_t tail, uint64_t avail)
{
    uint64_t s = size_of(r, atomic_load_explicit(&r->hdr->size, memory_order_relaxed));
    uint64_t c = size_of(r, atomic_load_explicit(&r->hdr->size_copy, memory_order_relaxed));
    if (s == c || s == 0 || c == 0)
        return s == c ? s : 0;
    uint64_t lo = s < c ? s : c, hi = s < c ? c : s;
    uint64_t base = tail & ~(hi - 1);
    return tail - base + avail <= lo ? lo : 0;
}

/* For the advisory counts and an empty ring's answer, which may come while
 * the producer resizes (its two stores of the size apart): the larger of the
 * two sizes, a bound and never an offset, or 0 if either is out of range. */
static uint64_t loose_size(const struct ring_view *r)
{
    uint64_t a = size_of(r, atomic_load_explicit(&r->hdr->size, memory_order_relaxed));
    uint64_t b = size_of(r, atomic_load_explicit(&r->hdr->size_copy, memory_order_relaxed));
    return a && b ? (a > b ? a : b) : 0;
}

uint64_t ring_size_now(const struct ring_view *r)
{
    return view_ok(r) && tag_ok(r) ? live_size(r) : 0;
}

/* The smaller of two distances from base, free-running. */
static uint64_t nearer(uint64_t base, uint64_t a, uint64_t b)
{
    return a - base < b - base ? a - base : b - base;
}

uint64_t ring_head_seen(const struct ring_view *r, uint64_t from)
{
    /* acquire (R1), word before copy (see "Copies") */
    uint64_t h = atomic_load_explicit(&r->hdr->head, memory_order_acquire);
    uint64_t c = atomic_load_explicit(&r->hdr->head_copy, memory_order_acquire);
    return from + nearer(from, h, c);
}

uint64_t ring_tail_seen(const struct ring_view *r, uint64_t head)
{
    /* acquire (W2), word before copy: the further of the two from head */
    uint64_t t = atomic_load_explicit(&r->hdr->tail, memory_order_acquire);
    uint64_t c = atomic_load_explicit(&r->hdr->tail_copy, memory_order_acquire);
    return head - t > head - c ? t : c;
}

int ring_head_mine(const struct ring_view *r, uint64_t *out)
{
    if (!tag_ok(r))
        return -EIO;
    /* relaxed: head is this side's own index (see the top of the file) */
    uint64_t h = atomic_load_explicit(&r->hdr->head, memory_order_relaxed);
    uint64_t c = atomic_load_explicit(&r->hdr->head_copy, memory_order_relaxed);
    *out = h;
    return h == c && (!__atomic_load_n(&r->mine_known, __ATOMIC_RELAXED) || h == r->my_head) ? 0 : -EIO;
}

int ring_tail_mine(const struct ring_view *r, uint64_t *out)
{
    if (!tag_ok(r))
        return -EIO;
    /* relaxed: tail is this side's own index */
    uint64_t t = atomic_load_explicit(&r->hdr->tail, memory_order_relaxed);
    uint64_t c = atomic_load_explicit(&r->hdr->tail_copy, memory_order_relaxed);
    *out = t;
    return t == c && (!__atomic_load_n(&r->mine_known, __ATOMIC_RELAXED) || t == r->my_tail) ? 0 : -EIO;
}

/* Stores a side's own index, copy first, and keeps it (*mine); release (W1
 * for head, R2 for tail): the bytes it covers were copied before. */
static void publish(_Atomic uint64_t *word, _Atomic uint64_t *copy, uint64_t *mine, uint64_t v)
{
    atomic_store_explicit(copy, v, memory_order_release);
    atomic_store_explicit(word, v, memory_order_release);
    *mine = v;
}

/*
 * How much of the ring is in use, for the two functions that may be called
 * by either side, or by a third thread while the owners of both indexes keep
 * working (poll on one thread, recv on another).  tail is loaded before and
 * after head.  When both loads agree, tail did not move while head was read
 * and the honest invariant head - tail <= size holds exactly for the pair:
 * the producer stored that head after its W2 load saw a tail no later than
 * ours (a later one would have reached us through W1/R1 and made our second
 * load of tail differ), and the consumer stored our tail after its R1 load
 * saw a head no later than ours.  So a pair outside [0, size] is -EIO.
 * Which of the copies counts is the side's whose question it is: for the
 * reader, the head nearer to tail (ring_readable); for the writer, the tail
 * further from head (ring_writable, writer true).
 *
 * When tail keeps moving (a consumer is draining right now), no pair can be
 * trusted to be simultaneous, and a mismatch proves nothing: the answer is
 * then taken from head and the newest tail, or, when tail already ran past
 * the head we saw (producer and consumer both busy), -EAGAIN, which the
 * callers turn into "nothing readable / nothing writable yet".  Only these
 * two advisory functions do this; ring_read and ring_write, which load their
 * own index, always check exactly before they touch data.
 */
#define USAGE_TRIES 8

static int64_t ring_used(const struct ring_view *r, bool writer)
{
    struct ring_hdr *h = r->hdr;
    uint64_t t1 = 0, tc = 0, hd = 0, t2 = 0;
    for (int i = 0; i < USAGE_TRIES; i++) {
        /* acquire: pairs with R2, the consumer's release of tail (and its copy) */
        t1 = atomic_load_explicit(&h->tail, memory_order_acquire);
        tc = atomic_load_explicit(&h->tail_copy, memory_order_acquire);
        /* acquire (R1): pairs with W1, the producer's release of head */
        hd = writer ? atomic_load_explicit(&h->head, memory_order_acquire) : ring_head_seen(r, t1);
        /* acquire: pairs with R2 again; coherence orders it after t1 */
        t2 = atomic_load_explicit(&h->tail, memory_order_acquire);
        if (t1 == t2) {
            uint64_t size = loose_size(r);
            uint64_t used = writer && hd - tc > hd - t1 ? hd - tc : hd - t1;
            return size == 0 || used > size ? -EIO : (int64_t)used;
        }
    }
    uint64_t size = loose_size(r);
    if (size == 0)
        return -EIO;
    return hd - t2 > size ? -EAGAIN : (int64_t)(hd - t2);
}

int64_t ring_readable(const struct ring_view *r)
{
    if (!view_ok(r))
        return -EINVAL;
    if (!tag_ok(r))
        return -EIO;
    int64_t used = ring_used(r, false);
    return used == -EAGAIN ? 0 : used;
}

int64_t ring_writable(const struct ring_view *r)
{
    if (!view_ok(r))
        return -EINVAL;
    if (!tag_ok(r))
        return -EIO;
    int64_t used = ring_used(r, true);
    if (used == -EAGAIN)
        return 0;
    uint64_t size = live_size(r);
    if (used >= 0 && (size == 0 || (uint64_t)used > size))
        return 0;   /* the ring grew between the loads (or is growing): nothing promised */
    return used < 0 ? used : (int64_t)size - used;
}

bool ring_fin_stored(const struct ring_view *r)
{
    if (!view_ok(r) || !tag_ok(r))
        return false;
    /* acquire (E1); the copy, stored first, is there once fin is */
    uint64_t fin = atomic_load_explicit(&r->hdr->fin, memory_order_acquire);
    return fin != 0 && atomic_load_explicit(&r->hdr->fin_copy, memory_order_acquire) == fin;
}

int ring_at_eof(const struct ring_view *r)
{
    if (!view_ok(r))
        return -EINVAL;
    if (!tag_ok(r))
        return -EIO;
    struct ring_hdr *h = r->hdr;
    /* acquire (E1): pairs with F1, the release of fin in ring_set_fin, so the
     * head load below sees at least the head the producer stopped at. */
    uint64_t fin = atomic_load_explicit(&h->fin, memory_order_acquire);
    if (fin == 0)
        return 0;
    /* stored before fin: equal once fin is there */
    if (atomic_load_explicit(&h->fin_copy, memory_order_acquire) != fin)
        return -EIO;
    /* acquire (R1): pairs with W1, like every load of head by the consumer */
    uint64_t head = atomic_load_explicit(&h->head, memory_order_acquire);
    uint64_t hcopy = atomic_load_explicit(&h->head_copy, memory_order_acquire);
    /* acquire: pairs with R2; the caller may be a thread other than the one
     * reading, and tail, loaded after head, is then at least as recent. */
    uint64_t tail = atomic_load_explicit(&h->tail, memory_order_acquire);
    /* Once fin is set the producer writes no more, so head (both copies) is
     * frozen at fin - 1.  Anything else, or a tail outside [head - size,
     * head], is a broken or hostile header.  With head frozen, tail loaded
     * after it can only be closer to it, so no retry is needed. */
    if (head != fin - 1 || hcopy != head || head - tail > loose_size(r))
        return -EIO;
    return tail == head ? 1 : 0;
}

/*
 * memcpy, but never a long "rep movsb" with the destination just ahead of
 * the source within a 4 KiB page.  glibc copies blocks from about 2 KiB up
 * to the L2 size with rep movsb on CPUs with fast string moves, and on some
 * (AMD Zen 3/4, glibc bug 30994) that runs ten times slower when
 * (dst - src) mod 4096 is 1..15.  The ring's page offset drifts against the
 * program's buffer with every odd-sized message, so any size can land
 * there (a 768 KiB copy then took 250 us instead of 20).  Such copies go in
 * pieces below glibc's default rep movsb threshold (2 KiB or more), which its
 * vector loop copies at full speed.
 */
#define ALIAS_WINDOW 16
#define ALIAS_PIECE 1024

static void copy_bytes(unsigned char *dst, const unsigned char *src, size_t n)
{
    size_t dist = (size_t)((uintptr_t)dst - (uintptr_t)src) & 4095;
    if (dist == 0 || dist >= ALIAS_WINDOW || n <= ALIAS_PIECE) {
        memcpy(dst, src, n);
        return;
    }
    while (n > 0) {
        size_t k = n < ALIAS_PIECE ? n : ALIAS_PIECE;
        memcpy(dst, src, k);
        dst += k;
        src += k;
        n -= k;
    }
}

/* Copies n bytes (n <= size) at stream position pos out of the ring: at most
 * two copies, the second for the part that wraps to data[0]. */
static void copy_out(const struct ring_view *r, uint64_t pos, unsigned char *dst, size_t n)
{
    size_t off = (size_t)(pos & (r->size - 1));
    size_t first = (size_t)r->size - off;
    if (first > n)
        first = n;
    copy_bytes(dst, r->data + off, first);
    if (n > first)
        copy_bytes(dst + first, r->data, n - first);
}

static void copy_in(const struct ring_view *r, uint64_t pos, const unsigned char *src, size_t n)
{
    size_t off = (size_t)(pos & (r->size - 1));
    size_t first = (size_t)r->size - off;
    if (first > n)
        first = n;
    copy_bytes(r->data + off, src, first);
    if (n > first)
        copy_bytes(r->data, src + first, n - first);
}

/*
 * Walks the iovec from byte skip and moves up to want bytes between it and
 * the ring starting at stream position pos.  Only the iovec entries that
 * take part are touched: the walk stops when want bytes are done, so a
 * wrong iovcnt is harmless as long as the entries before that point exist.
 * Zero-length and NULL entries are stepped over without a memcpy.
 */
static size_t copy_iov(const struct ring_view *r, uint64_t pos, const struct iovec *iov, int iovcnt,
                       size_t skip, size_t want, bool out)
{
    size_t done = 0;
    if (iov == NULL)
        return 0;
    for (int i = 0; i < iovcnt && done < want; i++) {
        size_t len = iov[i].iov_len;
        if (skip >= len) {
            skip -= len;
            continue;
        }
        size_t n = len - skip;
        if (n > want - done)
            n = want - done;
        unsigned char *base = (unsigned char *)iov[i].iov_base + skip;
        if (out)
            copy_out(r, pos + done, base, n);
        else
            copy_in(r, pos + done, base, n);
        done += n;
        skip = 0;
    }
    return done;
}

ssize_t ring_read(struct ring_view *r, const struct iovec *iov, int iovcnt, size_t skip, size_t max,
                  bool peek)
{
    if (!view_ok(r))
        return -EINVAL;
    struct ring_hdr *h = r->hdr;
    uint64_t tail;
    if (ring_tail_mine(r, &tail) < 0)
        return -EIO;
    /* acquire (R1): pairs with W1, the producer's release of head, so the
     * bytes in [tail, head) are visible before copy_out reads them; the
     * nearer of head and its copy (see "Copies"). */
    uint64_t avail = ring_head_seen(r, tail) - tail;
    if (avail == 0)
        return loose_size(r) ? 0 : -EIO;   /* nothing to read, and no size needed but a sane one */
    struct ring_view v = *r;
    v.size = read_size(r, tail, avail);
    if (v.size == 0 || avail > v.size)
        return -EIO;
    size_t want = avail < max ? (size_t)avail : max;
    if (want > SSIZE_MAX)
        want = SSIZE_MAX;
    size_t n = copy_iov(&v, tail, iov, iovcnt, skip, want, true);
    if (n != 0 && !peek) {
        /* release (R2): pairs with W2, the producer's acquire of tail; the
         * copy out is complete before the producer may reuse the bytes. */
        publish(&h->tail, &h->tail_copy, &r->my_tail, tail + n);
    }
    return (ssize_t)n;
}

ssize_t ring_write(struct ring_view *r, const struct iovec *iov, int iovcnt, size_t skip, size_t max)
{
    if (!view_ok(r))
        return -EINVAL;
    struct ring_hdr *h = r->hdr;
    uint64_t head;
    if (ring_head_mine(r, &head) < 0)
        return -EIO;
    /* acquire (W2): pairs with R2, the consumer's release of tail, so its
     * reads of [old tail, tail) are done before copy_in overwrites them;
     * the further of tail and its copy (see "Copies"). */
    uint64_t used = head - ring_tail_seen(r, head);
    struct ring_view v = *r;
    v.size = live_size(r);
    if (v.size == 0 || used > v.size)
        return -EIO;
    uint64_t room = v.size - used;
    size_t want = room < max ? (size_t)room : max;
    if (want > SSIZE_MAX)
        want = SSIZE_MAX;
    size_t n = copy_iov(&v, head, iov, iovcnt, skip, want, false);
    if (n != 0) {
        /* release (W1): pairs with R1, the consumer's acquire of head; the
         * bytes are in data before head says so. */
        publish(&h->head, &h->head_copy, &r->my_head, head + n);
    }
    return (ssize_t)n;
}

/* [pos, pos + n) of the ring (n <= size) as at most two pieces of data. */
static int pieces(const struct ring_view *v, uint64_t pos, size_t n, struct iovec out[2])
{
    size_t off = (size_t)(pos & (v->size - 1));
    size_t first = (size_t)v->size - off;
    if (first > n)
        first = n;
    out[0].iov_base = v->data + off;
    out[0].iov_len = first;
    if (n == first)
        return n ? 1 : 0;
    out[1].iov_base = v->data;
    out[1].iov_len = n - first;
    return 2;
}

ssize_t ring_space(const struct ring_view *r, struct iovec out[2], size_t max, int *cnt)
{
    *cnt = 0;
    if (!view_ok(r))
        return -EINVAL;
    struct ring_view v = *r;
    uint64_t head;
    if (ring_head_mine(r, &head) < 0)
        return -EIO;
    /* acquire (W2): pairs with R2; the consumer is done with what it freed */
    uint64_t used = head - ring_tail_seen(r, head);
    v.size = live_size(r);
    if (v.size == 0 || used > v.size)
        return -EIO;
    uint64_t room = v.size - used;
    size_t n = room < max ? (size_t)room : max;
    if (n > SSIZE_MAX)
        n = SSIZE_MAX;
    *cnt = pieces(&v, head, n, out);
    return (ssize_t)n;
}

ssize_t ring_filled(const struct ring_view *r, struct iovec out[2], size_t max, int *cnt)
{
    *cnt = 0;
    if (!view_ok(r))
        return -EINVAL;
    struct ring_view v = *r;
    uint64_t tail;
    if (ring_tail_mine(r, &tail) < 0)
        return -EIO;
    /* acquire (R1): pairs with W1; the bytes below head are visible */
    uint64_t avail = ring_head_seen(r, tail) - tail;
    if (avail == 0)
        return loose_size(r) ? 0 : -EIO;
    v.size = read_size(r, tail, avail);
    if (v.size == 0 || avail > v.size)
        return -EIO;
    size_t n = avail < max ? (size_t)avail : max;
    if (n > SSIZE_MAX)
        n = SSIZE_MAX;
    *cnt = pieces(&v, tail, n, out);
    return (ssize_t)n;
}

int ring_commit(struct ring_view *r, size_t n)
{
    uint64_t head;
    if (ring_head_mine(r, &head) < 0)
        return -EIO;
    /* release (W1): the bytes another fd's read put in data come first */
    publish(&r->hdr->head, &r->hdr->head_copy, &r->my_head, head + n);
    return 0;
}

int ring_consume(struct ring_view *r, size_t n)
{
    uint64_t tail;
    if (ring_tail_mine(r, &tail) < 0)
        return -EIO;
    /* release (R2): the write out of data to another fd is complete */
    publish(&r->hdr->tail, &r->hdr->tail_copy, &r->my_tail, tail + n);
    return 0;
}

int ring_resize(const struct ring_view *r, uint64_t new_size)
{
    if (!view_ok(r))
        return -EINVAL;
    if (new_size < RING_MIN_SIZE || new_size > r->size || (new_size & (new_size - 1)))
        return -EINVAL;
    struct ring_hdr *h = r->hdr;
    uint64_t head;
    if (ring_head_mine(r, &head) < 0)
        return -EIO;
    /* acquire (W2): the consumer is done with every byte before tail; both
     * copies at head, or not empty */
    uint64_t tail = ring_tail_seen(r, head);
    if (head != tail)
        return head - tail > r->size ? -EIO : -EBUSY;
    /* relaxed: published by our next W1 (see "Size" at the top); the copy
     * first, as for every word */
    uint64_t v = new_size == r->size ? 0 : new_size;
    atomic_store_explicit(&h->size_copy, v, memory_order_relaxed);
    atomic_store_explicit(&h->size, v, memory_order_relaxed);
    return 0;
}

/* Whether growing to new_size keeps every unread byte in place: [tail,
 * head) within the first cur bytes of a window of new_size (offsets are
 * positions masked by the size, and there both masks agree). */
static int grow_check(const struct ring_view *r, uint64_t new_size, uint64_t *cur, bool ask)
{
    if (!view_ok(r) || !tag_ok(r))
        return -EINVAL;
    *cur = ask ? loose_size(r) : live_size(r);
    if (*cur == 0)
        return -EIO;
    if (new_size <= *cur || new_size > r->size || (new_size & (new_size - 1)))
        return -EINVAL;
    uint64_t head;
    if (ask)
        head = atomic_load_explicit(&r->hdr->head, memory_order_relaxed);   /* any thread: the shared word */
    else if (ring_head_mine(r, &head) < 0)
        return -EIO;
    /* acquire (W2), as for a write: a tail further on only narrows it */
    uint64_t tail = ring_tail_seen(r, head);
    if (head - tail > *cur)
        return -EIO;
    return head - (tail & ~(new_size - 1)) <= *cur ? 0 : -EBUSY;
}

int ring_may_grow_in_place(const struct ring_view *r, uint64_t new_size)
{
    uint64_t cur;
    return grow_check(r, new_size, &cur, true);
}

int ring_grow_in_place(const struct ring_view *r, uint64_t new_size)
{
    uint64_t cur;
    int err = grow_check(r, new_size, &cur, false);
    if (err)
        return err;
    /* relaxed, the copy first, published by our next W1 as ring_resize's;
     * a consumer that meets the two apart reads by read_size's rule */
    uint64_t v = new_size == r->size ? 0 : new_size;
    atomic_store_explicit(&r->hdr->size_copy, v, memory_order_relaxed);
    atomic_store_explicit(&r->hdr->size, v, memory_order_relaxed);
    return 0;
}

void ring_set_fin(const struct ring_view *r)
{
    if (!view_ok(r))
        return;
    struct ring_hdr *h = r->hdr;
    uint64_t head;
    if (ring_head_mine(r, &head) < 0)
        return;   /* scribbled: no FIN a reader could believe; it fails with -EIO instead */
    /* release (F1): pairs with E1, the consumer's acquire of fin in
     * ring_at_eof; every W1 store of head before this one is visible to a
     * consumer that sees fin.  The producer must not write after this. */
    atomic_store_explicit(&h->fin_copy, head + 1, memory_order_release);
    atomic_store_explicit(&h->fin, head + 1, memory_order_release);
}
