/*
 * test_ring.c: unit tests of the SPSC byte ring (src/transport/ring.c).
 *
 * Functional: empty, full, wrap-around with odd sizes and split iovecs, skip
 * and max, peek, FIN/EOF, degenerate iovecs.  Stress: two threads stream
 * 256 MiB of a position-derived pattern through a 64 KiB ring with random
 * chunks and iovec splits, checked byte for byte, while a third thread asks
 * readable/writable/at_eof and must never get -EIO.  Corruption: random
 * garbage in head/tail/fin (both copies of each, as a peer that writes the
 * protocol wrong), both between calls and from a racing thread; every call
 * must answer -EIO or a value within bounds, and the ring data and the
 * caller's buffers sit between PROT_NONE pages so that any access outside
 * them faults, with or without ASan.  One word of the header scribbled (a
 * copy apart from its word, as a third process would): never a byte read
 * that was not written, nor one overwritten that was not read.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "transport/ring.h"

/* ---- helpers ---------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

static uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return n ? rng_next(s) % n : 0;
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The byte at stream position p: no short period, so a misplaced chunk
 * (wrong offset, wrong wrap) cannot match by accident. */
static unsigned char pattern(uint64_t p)
{
    return (unsigned char)(mix64(p >> 3) >> ((p & 7) * 8));
}

static size_t page_size(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* len bytes ending exactly at a PROT_NONE page, with another PROT_NONE page
 * before the first page: an overrun faults at once.  len may be 0. */
struct guarded {
    unsigned char *map;
    size_t map_len;
    unsigned char *p;
    size_t len;
};

static struct guarded guarded_alloc(size_t len)
{
    size_t pg = page_size();
    size_t body = (len + pg - 1) / pg * pg;
    if (body == 0)
        body = pg;
    struct guarded g;
    g.map_len = body + 2 * pg;
    g.map = mmap(NULL, g.map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(g.map, !=, MAP_FAILED);
    CHECK(mprotect(g.map + pg, body, PROT_READ | PROT_WRITE), ==, 0);
    g.p = g.map + pg + body - len;
    g.len = len;
    return g;
}

static void guarded_free(struct guarded *g)
{
    munmap(g->map, g->map_len);
}

/* A ring whose data fills whole pages between two guard pages. */
struct test_ring {
    struct ring_hdr *hdr;
    struct guarded data;
    struct ring_view v;
};

static void test_ring_new(struct test_ring *t, uint64_t size)
{
    t->hdr = aligned_alloc(64, sizeof(struct ring_hdr));
    CHECK(t->hdr, !=, NULL);
    memset(t->hdr, 0xa5, sizeof *t->hdr);
    ring_init(t->hdr, 0x7a6e1ab5);
    t->data = guarded_alloc(size);
    t->v.hdr = t->hdr;
    t->v.data = t->data.p;
    t->v.size = size;
    /* one view plays both sides here: it keeps both of its own indexes */
    t->v.my_head = t->v.my_tail = 0;
    t->v.mine_known = true;
    t->v.tag = 0x7a6e1ab5;
}

static void test_ring_free(struct test_ring *t)
{
    guarded_free(&t->data);
    free(t->hdr);
}

/* A word and its copy, as their one honest writer stores them. */
static void store2(_Atomic uint64_t *word, _Atomic uint64_t *copy, uint64_t v)
{
    atomic_store(copy, v);
    atomic_store(word, v);
}

static void set_indexes(struct ring_hdr *h, uint64_t head, uint64_t tail, uint64_t fin)
{
    store2(&h->head, &h->head_copy, head);
    store2(&h->tail, &h->tail_copy, tail);
    store2(&h->fin, &h->fin_copy, fin);
}

static ssize_t write1(struct ring_view *v, const void *buf, size_t len)
{
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
    return ring_write(v, &iov, 1, 0, len);
}

static ssize_t read1(struct ring_view *v, void *buf, size_t len, bool peek)
{
    struct iovec iov = { .iov_base = buf, .iov_len = len };
    return ring_read(v, &iov, 1, 0, len, peek);
}

static void fill_pattern(unsigned char *buf, uint64_t pos, size_t len)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = pattern(pos + i);
}

static void check_pattern(const unsigned char *buf, uint64_t pos, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != pattern(pos + i))
            FAIL("stream byte %llu: got 0x%02x, expected 0x%02x", (unsigned long long)(pos + i), buf[i],
                 pattern(pos + i));
    }
}

/* Splits len bytes of buf into up to max_segs iovec entries of random
 * lengths (zero-length entries included).  Returns the count. */
static int random_split(uint64_t *rng, unsigned char *buf, size_t len, struct iovec *iov, int max_segs)
{
    int n = 1 + (int)rng_below(rng, (uint64_t)max_segs);
    size_t left = len;
    for (int i = 0; i < n; i++) {
        size_t take = i == n - 1 ? left : (size_t)rng_below(rng, left + 1);
        iov[i].iov_base = buf;
        iov[i].iov_len = take;
        buf += take;
        left -= take;
    }
    return n;
}

/* ---- functional ------------------------------------------------------------- */

static void test_empty_full(void)
{
    struct test_ring t;
    test_ring_new(&t, 4096);
    unsigned char buf[8192];

    CHECK(ring_readable(&t.v), ==, 0);
    CHECK(ring_writable(&t.v), ==, 4096);
    CHECK(ring_at_eof(&t.v), ==, 0);
    CHECK(read1(&t.v, buf, sizeof buf, false), ==, 0);
    CHECK(read1(&t.v, buf, sizeof buf, true), ==, 0);

    fill_pattern(buf, 0, sizeof buf);
    CHECK(write1(&t.v, buf, sizeof buf), ==, 4096);    /* only the room */
    CHECK(ring_readable(&t.v), ==, 4096);
    CHECK(ring_writable(&t.v), ==, 0);
    CHECK(write1(&t.v, buf, 1), ==, 0);                 /* full */
    CHECK(atomic_load(&t.hdr->head), ==, 4096);
    CHECK(atomic_load(&t.hdr->tail), ==, 0);

    memset(buf, 0, sizeof buf);
    CHECK(read1(&t.v, buf, sizeof buf, false), ==, 4096);
    check_pattern(buf, 0, 4096);
    CHECK(ring_readable(&t.v), ==, 0);
    CHECK(ring_writable(&t.v), ==, 4096);
    CHECK(atomic_load(&t.hdr->tail), ==, 4096);

    /* max == 0 moves nothing, even with room and data */
    CHECK(write1(&t.v, buf, 0), ==, 0);
    struct iovec iov = { .iov_base = buf, .iov_len = sizeof buf };
    CHECK(ring_write(&t.v, &iov, 1, 0, 0), ==, 0);
    CHECK(ring_read(&t.v, &iov, 1, 0, 0, false), ==, 0);
    test_ring_free(&t);
}

/* Odd chunk sizes through a small ring, so the copies wrap at every
 * possible offset, with the iovec split at random on both sides. */
static void test_wrap_odd(void)
{
    uint64_t rng = 0x1234567;
    uint64_t sizes[] = { 4096, 8192, 65536 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        struct test_ring t;
        test_ring_new(&t, sizes[s]);
        size_t odd[] = { 1, 3, 7, 999, 1001, 4095, 4097, 12345 };
        unsigned char in[20000], out[20000];
        uint64_t wpos = 0, rpos = 0;
        for (int round = 0; round < 3000; round++) {
            size_t n = odd[rng_below(&rng, sizeof odd / sizeof odd[0])];
            if (n > sizes[s])
                n = (size_t)sizes[s] - 1;
            int64_t room = ring_writable(&t.v);
            CHECK(room, >=, 0);
            CHECK((uint64_t)room, ==, sizes[s] - (wpos - rpos));
            fill_pattern(in, wpos, n);
            struct iovec iov[8];
            int cnt = random_split(&rng, in, n, iov, 8);
            ssize_t w = ring_write(&t.v, iov, cnt, 0, n);
            CHECK(w, ==, (int64_t)n < room ? (int64_t)n : room);
            wpos += (uint64_t)w;

            size_t m = odd[rng_below(&rng, sizeof odd / sizeof odd[0])];
            cnt = random_split(&rng, out, m, iov, 8);
            memset(out, 0, m);
            ssize_t r = ring_read(&t.v, iov, cnt, 0, m, false);
            uint64_t avail = wpos - rpos;
            CHECK(r, ==, (int64_t)(m < avail ? m : avail));
            check_pattern(out, rpos, (size_t)r);
            rpos += (uint64_t)r;
            CHECK(ring_readable(&t.v), ==, (int64_t)(wpos - rpos));
        }
        /* drain */
        ssize_t r;
        while ((r = read1(&t.v, out, 777, false)) > 0) {
            check_pattern(out, rpos, (size_t)r);
            rpos += (uint64_t)r;
        }
        CHECK(r, ==, 0);
        CHECK(rpos, ==, wpos);
        CHECK(rpos, >, 4 * sizes[s]);   /* it really went round */
        test_ring_free(&t);
    }
}

/* skip resumes a partly filled iovec; max caps the copy; both meet the
 * segment boundaries in every way. */
static void test_skip_max(void)
{
    struct test_ring t;
    test_ring_new(&t, 4096);
    unsigned char src[64];
    fill_pattern(src, 0, sizeof src);

    /* write: iovec of 5 + 10 + 20 bytes, start at byte 7 (inside the
     * second segment), at most 15 bytes: src[7..22) */
    struct iovec iov[3] = {
        { .iov_base = src, .iov_len = 5 },
        { .iov_base = src + 5, .iov_len = 10 },
        { .iov_base = src + 15, .iov_len = 20 },
    };
    CHECK(ring_write(&t.v, iov, 3, 7, 15), ==, 15);
    unsigned char out[64];
    memset(out, 0, sizeof out);
    CHECK(read1(&t.v, out, sizeof out, false), ==, 15);
    CHECK(memcmp(out, src + 7, 15), ==, 0);

    /* skip exactly at a boundary, and skip past the whole iovec */
    CHECK(ring_write(&t.v, iov, 3, 5, 100), ==, 30);
    CHECK(read1(&t.v, out, sizeof out, false), ==, 30);
    CHECK(memcmp(out, src + 5, 30), ==, 0);
    CHECK(ring_write(&t.v, iov, 3, 35, 100), ==, 0);
    CHECK(ring_write(&t.v, iov, 3, 1000, 100), ==, 0);

    /* read side: 30 bytes in, read into a 3-segment iovec from byte 4, max 12 */
    CHECK(write1(&t.v, src, 30), ==, 30);
    unsigned char a[6], b[6], c[20];
    memset(a, 0xee, sizeof a);
    memset(b, 0xee, sizeof b);
    memset(c, 0xee, sizeof c);
    struct iovec riov[3] = {
        { .iov_base = a, .iov_len = sizeof a },
        { .iov_base = b, .iov_len = sizeof b },
        { .iov_base = c, .iov_len = sizeof c },
    };
    CHECK(ring_read(&t.v, riov, 3, 4, 12, false), ==, 12);
    for (int i = 0; i < 4; i++)
        CHECK(a[i], ==, 0xee);          /* skipped bytes untouched */
    CHECK(memcmp(a + 4, src, 2), ==, 0);
    CHECK(memcmp(b, src + 2, 6), ==, 0);
    CHECK(memcmp(c, src + 8, 4), ==, 0);
    CHECK(c[4], ==, 0xee);              /* max honoured */
    CHECK(ring_readable(&t.v), ==, 18);
    /* the rest into what is left of the iovec: skip 16 lands at c[4] */
    CHECK(ring_read(&t.v, riov, 3, 16, 100, false), ==, 16);
    CHECK(memcmp(c + 4, src + 12, 16), ==, 0);
    CHECK(ring_readable(&t.v), ==, 2);
    CHECK(ring_read(&t.v, riov, 3, 32, 100, false), ==, 0);   /* no room left in the iovec */
    CHECK(ring_readable(&t.v), ==, 2);
    test_ring_free(&t);
}

static void test_peek(void)
{
    struct test_ring t;
    test_ring_new(&t, 4096);
    unsigned char src[5000], out[5000];
    /* put the data across the wrap point */
    fill_pattern(src, 0, sizeof src);
    CHECK(write1(&t.v, src, 3000), ==, 3000);
    CHECK(read1(&t.v, out, 3000, false), ==, 3000);
    CHECK(write1(&t.v, src, 2000), ==, 2000);

    uint64_t tail = atomic_load(&t.hdr->tail);
    memset(out, 0, sizeof out);
    CHECK(read1(&t.v, out, sizeof out, true), ==, 2000);
    CHECK(memcmp(out, src, 2000), ==, 0);
    CHECK(atomic_load(&t.hdr->tail), ==, tail);
    CHECK(ring_readable(&t.v), ==, 2000);
    memset(out, 0, sizeof out);
    struct iovec iov = { .iov_base = out, .iov_len = sizeof out };
    CHECK(ring_read(&t.v, &iov, 1, 100, 50, true), ==, 50);     /* peek with skip and max */
    CHECK(memcmp(out + 100, src, 50), ==, 0);
    CHECK(read1(&t.v, out, sizeof out, false), ==, 2000);
    CHECK(memcmp(out, src, 2000), ==, 0);
    CHECK(ring_readable(&t.v), ==, 0);
    test_ring_free(&t);
}

static void test_fin(void)
{
    struct test_ring t;
    test_ring_new(&t, 4096);
    unsigned char buf[100];
    fill_pattern(buf, 0, sizeof buf);

    CHECK(ring_at_eof(&t.v), ==, 0);
    CHECK(write1(&t.v, buf, 10), ==, 10);
    ring_set_fin(&t.v);
    CHECK(atomic_load(&t.hdr->fin), ==, 11);
    CHECK(ring_at_eof(&t.v), ==, 0);        /* data before the FIN */
    CHECK(read1(&t.v, buf, 4, false), ==, 4);
    CHECK(ring_at_eof(&t.v), ==, 0);
    CHECK(read1(&t.v, buf, 4, true), ==, 4);
    CHECK(ring_at_eof(&t.v), ==, 0);        /* peek does not consume */
    CHECK(read1(&t.v, buf, sizeof buf, false), ==, 6);
    CHECK(ring_at_eof(&t.v), ==, 1);
    CHECK(ring_at_eof(&t.v), ==, 1);        /* and stays */
    CHECK(read1(&t.v, buf, sizeof buf, false), ==, 0);

    /* FIN on an empty ring, and FIN at position 0 */
    struct test_ring u;
    test_ring_new(&u, 4096);
    ring_set_fin(&u.v);
    CHECK(atomic_load(&u.hdr->fin), ==, 1);
    CHECK(ring_at_eof(&u.v), ==, 1);

    /* inconsistent FIN positions (both copies alike) */
    set_indexes(u.hdr, 100, 50, 1 + 100);
    CHECK(ring_at_eof(&u.v), ==, 0);        /* consistent: 50 bytes before EOF */
    store2(&u.hdr->fin, &u.hdr->fin_copy, 1 + 99);
    CHECK(ring_at_eof(&u.v), ==, -EIO);     /* producer wrote past its FIN */
    store2(&u.hdr->fin, &u.hdr->fin_copy, 1 + 101);
    CHECK(ring_at_eof(&u.v), ==, -EIO);     /* FIN beyond head */
    store2(&u.hdr->fin, &u.hdr->fin_copy, 1 + 49);
    CHECK(ring_at_eof(&u.v), ==, -EIO);     /* FIN before tail */
    store2(&u.hdr->fin, &u.hdr->fin_copy, UINT64_MAX);
    CHECK(ring_at_eof(&u.v), ==, -EIO);
    store2(&u.hdr->fin, &u.hdr->fin_copy, 1 + 100);
    store2(&u.hdr->tail, &u.hdr->tail_copy, 101);        /* tail past head */
    CHECK(ring_at_eof(&u.v), ==, -EIO);
    store2(&u.hdr->tail, &u.hdr->tail_copy, 100 - 4097); /* more than size apart (wraps) */
    CHECK(ring_at_eof(&u.v), ==, -EIO);
    /* one copy apart from its word: a FIN nobody stored, or a head that moved */
    set_indexes(u.hdr, 100, 100, 0);
    atomic_store(&u.hdr->fin, 1 + 100);
    CHECK(ring_at_eof(&u.v), ==, -EIO);     /* fin without its copy: not an EOF */
    atomic_store(&u.hdr->fin, 0);
    atomic_store(&u.hdr->fin_copy, 1 + 100);
    CHECK(ring_at_eof(&u.v), ==, 0);        /* the copy alone says nothing yet */
    set_indexes(u.hdr, 100, 100, 1 + 100);
    atomic_store(&u.hdr->head_copy, 101);
    CHECK(ring_at_eof(&u.v), ==, -EIO);
    test_ring_free(&u);
    test_ring_free(&t);
}

/* Degenerate iovecs: none of these may crash or move an index. */
static void test_degenerate_iov(void)
{
    struct test_ring t;
    test_ring_new(&t, 4096);
    unsigned char buf[16];
    fill_pattern(buf, 0, sizeof buf);
    CHECK(write1(&t.v, buf, 16), ==, 16);

    CHECK(ring_read(&t.v, NULL, 0, 0, 100, false), ==, 0);
    CHECK(ring_read(&t.v, NULL, 5, 0, 100, false), ==, 0);
    CHECK(ring_read(&t.v, NULL, -1, 0, 100, false), ==, 0);
    CHECK(ring_write(&t.v, NULL, 3, 0, 100), ==, 0);
    struct iovec iov = { .iov_base = buf, .iov_len = sizeof buf };
    CHECK(ring_read(&t.v, &iov, 0, 0, 100, false), ==, 0);
    CHECK(ring_read(&t.v, &iov, -7, 0, 100, false), ==, 0);
    CHECK(ring_read(&t.v, &iov, INT32_MIN, 0, 100, false), ==, 0);
    CHECK(ring_write(&t.v, &iov, -1, 0, 100), ==, 0);
    struct iovec nul[3] = { { NULL, 0 }, { NULL, 0 }, { NULL, 0 } };
    CHECK(ring_read(&t.v, nul, 3, 0, 100, false), ==, 0);
    CHECK(ring_write(&t.v, nul, 3, 0, 100), ==, 0);
    CHECK(ring_readable(&t.v), ==, 16);
    CHECK(atomic_load(&t.hdr->tail), ==, 0);
    CHECK(atomic_load(&t.hdr->head), ==, 16);

    /* a huge iovcnt whose real array is shorter: the walk stops as soon as
     * the bytes are done, so only the first entry is touched */
    unsigned char out[16];
    struct iovec one = { .iov_base = out, .iov_len = sizeof out };
    CHECK(ring_read(&t.v, &one, INT32_MAX, 0, SIZE_MAX, false), ==, 16);
    CHECK(memcmp(out, buf, 16), ==, 0);
    CHECK(write1(&t.v, buf, 16), ==, 16);
    CHECK(ring_read(&t.v, &one, INT32_MAX, 0, 16, false), ==, 16);
    /* NULL entries with zero length among real ones */
    CHECK(write1(&t.v, buf, 16), ==, 16);
    struct iovec mix[3] = { { NULL, 0 }, { out, 10 }, { out + 10, 6 } };
    CHECK(ring_read(&t.v, mix, 3, 0, 100, false), ==, 16);
    CHECK(memcmp(out, buf, 16), ==, 0);

    /* a broken private view is refused, not dereferenced */
    struct ring_view bad = t.v;
    bad.size = 4095;
    CHECK(ring_readable(&bad), ==, -EINVAL);
    CHECK(ring_read(&bad, &one, 1, 0, 16, false), ==, -EINVAL);
    bad = t.v;
    bad.hdr = NULL;
    CHECK(ring_write(&bad, &one, 1, 0, 16), ==, -EINVAL);
    CHECK(ring_at_eof(&bad), ==, -EINVAL);
    ring_set_fin(&bad);
    CHECK(ring_writable(NULL), ==, -EINVAL);
    test_ring_free(&t);
}

/* ---- stress ----------------------------------------------------------------- */

#define STRESS_RING (64u * 1024)
#define STRESS_BYTES (256ull * 1024 * 1024)
#define STRESS_MAXCHUNK (3 * STRESS_RING)

struct stress {
    struct test_ring t;
    atomic_int done;
    atomic_ullong observer_calls;
};

static void *stress_producer(void *arg)
{
    struct stress *s = arg;
    uint64_t rng = 0xfeedface;
    unsigned char *buf = malloc(STRESS_MAXCHUNK + 64);
    CHECK(buf, !=, NULL);
    uint64_t pos = 0;
    while (pos < STRESS_BYTES) {
        size_t n = 1 + (size_t)rng_below(&rng, rng_below(&rng, 4) == 0 ? STRESS_MAXCHUNK : 512);
        if (n > STRESS_BYTES - pos)
            n = (size_t)(STRESS_BYTES - pos);
        /* a random prefix of the buffer was "already sent": skip it */
        size_t skip = (size_t)rng_below(&rng, 64);
        fill_pattern(buf + skip, pos, n);
        struct iovec iov[8];
        int cnt = random_split(&rng, buf, skip + n, iov, 8);
        size_t off = 0;
        while (off < n) {
            ssize_t w = ring_write(&s->t.v, iov, cnt, skip + off, n - off);
            CHECK(w, >=, 0);
            CHECK((size_t)w, <=, n - off);
            if (w == 0)
                sched_yield();
            off += (size_t)w;
        }
        pos += n;
    }
    ring_set_fin(&s->t.v);
    free(buf);
    return NULL;
}

static void *stress_consumer(void *arg)
{
    struct stress *s = arg;
    uint64_t rng = 0xdecafbad;
    unsigned char *buf = malloc(STRESS_MAXCHUNK + 64);
    CHECK(buf, !=, NULL);
    uint64_t pos = 0;
    for (;;) {
        size_t n = 1 + (size_t)rng_below(&rng, rng_below(&rng, 4) == 0 ? STRESS_MAXCHUNK : 512);
        size_t skip = (size_t)rng_below(&rng, 64);
        struct iovec iov[8];
        int cnt = random_split(&rng, buf, skip + n, iov, 8);
        bool peek = rng_below(&rng, 16) == 0;
        ssize_t r = ring_read(&s->t.v, iov, cnt, skip, n, peek);
        CHECK(r, >=, 0);
        CHECK((size_t)r, <=, n);
        check_pattern(buf + skip, pos, (size_t)r);
        if (!peek)
            pos += (uint64_t)r;
        if (r == 0) {
            int eof = ring_at_eof(&s->t.v);
            CHECK(eof, >=, 0);
            if (eof == 1)
                break;
            sched_yield();
        }
    }
    CHECK(pos, ==, STRESS_BYTES);
    CHECK(ring_readable(&s->t.v), ==, 0);
    free(buf);
    return NULL;
}

/* A third thread, like poll running beside recv and send: the advisory
 * calls must stay within bounds and never mistake motion for corruption. */
static void *stress_observer(void *arg)
{
    struct stress *s = arg;
    unsigned long long calls = 0;
    while (!atomic_load(&s->done)) {
        int64_t r = ring_readable(&s->t.v);
        int64_t w = ring_writable(&s->t.v);
        int e = ring_at_eof(&s->t.v);
        CHECK(r, >=, 0);
        CHECK(r, <=, STRESS_RING);
        CHECK(w, >=, 0);
        CHECK(w, <=, STRESS_RING);
        CHECK(e, >=, 0);
        calls++;
    }
    atomic_store(&s->observer_calls, calls);
    return NULL;
}

static void test_stress(void)
{
    struct stress *s = calloc(1, sizeof *s);
    CHECK(s, !=, NULL);
    test_ring_new(&s->t, STRESS_RING);
    pthread_t p, c, o;
    CHECK(pthread_create(&o, NULL, stress_observer, s), ==, 0);
    CHECK(pthread_create(&c, NULL, stress_consumer, s), ==, 0);
    CHECK(pthread_create(&p, NULL, stress_producer, s), ==, 0);
    CHECK(pthread_join(p, NULL), ==, 0);
    CHECK(pthread_join(c, NULL), ==, 0);
    atomic_store(&s->done, 1);
    CHECK(pthread_join(o, NULL), ==, 0);
    CHECK(atomic_load(&s->t.hdr->head), ==, STRESS_BYTES);
    CHECK(atomic_load(&s->t.hdr->tail), ==, STRESS_BYTES);
    CHECK(ring_at_eof(&s->t.v), ==, 1);
    printf("stress: %llu MiB streamed, %llu observer rounds\n", STRESS_BYTES >> 20,
           (unsigned long long)atomic_load(&s->observer_calls));
    test_ring_free(&s->t);
    free(s);
}

/* ---- corruption ------------------------------------------------------------- */

/* Index values a hostile peer might pick: anything, the ends of the range,
 * and values just inside and just outside the window around base. */
static uint64_t nasty(uint64_t *rng, uint64_t base, uint64_t size)
{
    switch (rng_below(rng, 8)) {
    case 0: return rng_next(rng);
    case 1: return UINT64_MAX - rng_below(rng, 2 * size);
    case 2: return rng_below(rng, 2 * size);
    case 3: return base + rng_below(rng, 2 * size + 2);
    case 4: return base - rng_below(rng, 2 * size + 2);
    case 5: return base + size + rng_below(rng, 3);
    case 6: return base - size - rng_below(rng, 3);
    default: return (uint64_t)1 << rng_below(rng, 64);
    }
}

#define CORRUPT_ROUNDS 300000

static void test_corruption(void)
{
    const uint64_t size = 4096;
    struct test_ring t;
    test_ring_new(&t, size);
    uint64_t rng = 0x5eed5eed;
    /* caller buffers at the end of their pages, plus a canary area */
    struct guarded rbuf = guarded_alloc(3 * size);
    struct guarded wbuf = guarded_alloc(3 * size);
    memset(wbuf.p, 0x5a, wbuf.len);
    unsigned long long eio = 0, ok = 0;
    /* the indexes as a holder of a shared end finds them: it has no record
     * of its own to hold them against, only their copies (test_one_word
     * has the record too) */
    t.v.mine_known = false;

    for (int i = 0; i < CORRUPT_ROUNDS; i++) {
        uint64_t base = rng_next(&rng);
        uint64_t tail = nasty(&rng, base, size);
        /* half of the rounds consistent, at any place of the 2^64 range */
        uint64_t head = rng_below(&rng, 2) ? tail + rng_below(&rng, size + 1) : nasty(&rng, base, size);
        uint64_t fin = rng_below(&rng, 3) == 0 ? 0 : rng_below(&rng, 2) ? head + 1 : nasty(&rng, head + 1, size);
        set_indexes(t.hdr, head, tail, fin);
        bool consistent = head - tail <= size;

        int64_t r = ring_readable(&t.v);
        int64_t w = ring_writable(&t.v);
        if (consistent) {
            CHECK(r, ==, (int64_t)(head - tail));
            CHECK(w, ==, (int64_t)(size - (head - tail)));
        } else {
            CHECK(r, ==, -EIO);
            CHECK(w, ==, -EIO);
        }
        int e = ring_at_eof(&t.v);
        if (fin == 0)
            CHECK(e, ==, 0);
        else if (!consistent || fin - 1 != head)
            CHECK(e, ==, -EIO);
        else
            CHECK(e, ==, head == tail ? 1 : 0);

        /* a read into a random window of the guarded buffer */
        size_t max = (size_t)rng_below(&rng, 3 * size + 1);
        if (rng_below(&rng, 8) == 0)
            max = SIZE_MAX;
        size_t blen = (size_t)rng_below(&rng, rbuf.len + 1);
        unsigned char *bp = rbuf.p + rbuf.len - blen;
        struct iovec iov[4];
        int cnt = random_split(&rng, bp, blen, iov, 4);
        size_t skip = (size_t)rng_below(&rng, 16);
        bool peek = rng_below(&rng, 2);
        ssize_t n = ring_read(&t.v, iov, cnt, skip, max, peek);
        if (!consistent) {
            CHECK(n, ==, -EIO);
            CHECK(atomic_load(&t.hdr->tail), ==, tail);
        } else {
            uint64_t room = blen > skip ? blen - skip : 0;
            uint64_t expect = head - tail;
            if (expect > max) expect = max;
            if (expect > room) expect = room;
            CHECK(n, ==, (int64_t)expect);
            CHECK(atomic_load(&t.hdr->tail), ==, peek ? tail : tail + (uint64_t)n);
        }
        CHECK(atomic_load(&t.hdr->head), ==, head);

        /* and a write from the other guarded buffer, on fresh garbage */
        tail = nasty(&rng, base, size);
        head = rng_below(&rng, 2) ? tail + rng_below(&rng, size + 1) : nasty(&rng, base, size);
        store2(&t.hdr->head, &t.hdr->head_copy, head);
        store2(&t.hdr->tail, &t.hdr->tail_copy, tail);
        consistent = head - tail <= size;
        max = (size_t)rng_below(&rng, 3 * size + 1);
        blen = (size_t)rng_below(&rng, wbuf.len + 1);
        bp = wbuf.p + wbuf.len - blen;
        cnt = random_split(&rng, bp, blen, iov, 4);
        skip = (size_t)rng_below(&rng, 16);
        n = ring_write(&t.v, iov, cnt, skip, max);
        if (!consistent) {
            CHECK(n, ==, -EIO);
            CHECK(atomic_load(&t.hdr->head), ==, head);
            eio++;
        } else {
            uint64_t room = blen > skip ? blen - skip : 0;
            uint64_t expect = size - (head - tail);
            if (expect > max) expect = max;
            if (expect > room) expect = room;
            CHECK(n, ==, (int64_t)expect);
            CHECK(atomic_load(&t.hdr->head), ==, head + (uint64_t)n);
            ok++;
        }
        CHECK(atomic_load(&t.hdr->tail), ==, tail);
    }
    printf("corruption: %d rounds, writes refused %llu, within bounds %llu\n", CORRUPT_ROUNDS, eio, ok);
    CHECK(eio, >, CORRUPT_ROUNDS / 10);
    CHECK(ok, >, CORRUPT_ROUNDS / 10);
    guarded_free(&rbuf);
    guarded_free(&wbuf);
    test_ring_free(&t);
}

/* A peer scribbling on the header while this side reads and writes: the
 * values change between and within calls, and the calls must still stay
 * inside the ring and the buffers. */
struct scribbler {
    struct ring_hdr *hdr;
    atomic_int stop;
};

static void *scribble(void *arg)
{
    struct scribbler *s = arg;
    uint64_t rng = 0xabcdef;
    _Atomic uint64_t *words[] = { &s->hdr->head, &s->hdr->head_copy, &s->hdr->tail, &s->hdr->tail_copy,
                                  &s->hdr->fin, &s->hdr->fin_copy, &s->hdr->size, &s->hdr->size_copy };
    while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
        uint64_t base = rng_next(&rng);
        atomic_store_explicit(&s->hdr->head, nasty(&rng, base, 4096), memory_order_relaxed);
        atomic_store_explicit(&s->hdr->tail, nasty(&rng, base, 4096), memory_order_relaxed);
        atomic_store_explicit(&s->hdr->fin, nasty(&rng, base, 4096), memory_order_relaxed);
        /* and any word, copies and sizes too */
        atomic_store_explicit(words[rng_below(&rng, 8)], nasty(&rng, base, 4096), memory_order_relaxed);
    }
    return NULL;
}

/*
 * One word scribbled by a third process while the two sides are honest:
 * each word of the header, and each copy, set to a nasty value (among them
 * the true value plus or minus a little, which no bound can tell from a
 * true one).  The consumer must then read no byte the producer did not
 * write (what it gets is the pattern at the right place, at most the bytes
 * written), and the producer must overwrite no byte the consumer has not
 * read (the unread ones are still the pattern afterwards); -EIO or reading
 * or writing less is fine.  Then the header is put back and the ring goes
 * on.  Both with the sides' own records of their indexes (an end never
 * shared) and without (copies only); with the records, every eighth round
 * overwrites the whole header with a consistent fake instead (copies
 * alike, head - tail within the size), which the records must refuse.
 */
#define ONE_WORD_ROUNDS 20000

static void test_one_word(void)
{
    const uint64_t size = 4096;
    struct test_ring t;
    test_ring_new(&t, size);
    uint64_t rng = 0x0e0e0e;
    unsigned char in[2 * 4096], out[2 * 4096];
    uint64_t wpos = 0, rpos = 0;   /* the honest head and tail */
    unsigned long long refused = 0, less = 0, fakes = 0;
    for (int i = 0; i < ONE_WORD_ROUNDS; i++) {
        t.v.mine_known = i < ONE_WORD_ROUNDS / 2;
        /* honest traffic: some bytes in, some out */
        size_t n = (size_t)rng_below(&rng, size - (wpos - rpos) + 1);
        fill_pattern(in, wpos, n);
        CHECK(write1(&t.v, in, n), ==, (ssize_t)n);
        wpos += n;
        n = (size_t)rng_below(&rng, wpos - rpos + 1);
        CHECK(read1(&t.v, out, n, false), ==, (ssize_t)n);
        check_pattern(out, rpos, n);
        rpos += n;

        _Atomic uint64_t *words[] = { &t.hdr->head, &t.hdr->head_copy, &t.hdr->tail, &t.hdr->tail_copy,
                                      &t.hdr->fin, &t.hdr->fin_copy, &t.hdr->size, &t.hdr->size_copy, &t.hdr->tag };
        int k = (int)rng_below(&rng, 9);
        uint64_t was = atomic_load(words[k]);
        uint64_t v = rng_below(&rng, 2) ? was + rng_below(&rng, 2 * size + 1) - size : nasty(&rng, was, size);
        bool fake = t.v.mine_known && i % 8 == 7;
        if (fake) {
            uint64_t ft = rpos + rng_below(&rng, 2 * size + 1) - size;
            if (ft == rpos)
                ft++;
            set_indexes(t.hdr, ft + rng_below(&rng, size + 1), ft, 0);
            fakes++;
        } else {
            atomic_store(words[k], v);
        }

        /* the consumer: no byte beyond what was written */
        ssize_t r = read1(&t.v, out, sizeof out, true);
        if (fake)
            CHECK(r, ==, -EIO);   /* not our tail */
        if (r < 0) {
            CHECK(r, ==, -EIO);
            refused++;
        } else {
            CHECK((uint64_t)r, <=, wpos - rpos);
            check_pattern(out, rpos, (size_t)r);
            less += (uint64_t)r < wpos - rpos;
        }
        int64_t rd = ring_readable(&t.v);
        CHECK(rd == -EIO || (rd >= 0 && rd <= (int64_t)size), ==, 1);
        int e = ring_at_eof(&t.v);
        CHECK(e == -EIO || e == 0, ==, 1);   /* no FIN was ever stored */
        /* the producer: no unread byte overwritten */
        fill_pattern(in, wpos, sizeof in);
        unsigned char junk[2 * 4096];
        memset(junk, 0xa5, sizeof junk);
        ssize_t w = write1(&t.v, junk, sizeof junk);
        CHECK(w == -EIO || (w >= 0 && (uint64_t)w <= size - (wpos - rpos)), ==, 1);
        if (fake)
            CHECK(w, ==, -EIO);   /* not our head (the fake tail is never ours, nor the head built on it) */
        for (uint64_t p = rpos; p < wpos; p++)
            CHECK(t.v.data[p & (size - 1)], ==, pattern(p));

        /* put the honest header back; the bytes the junk write took stay
         * unpublished (head goes back), so the stream goes on */
        atomic_store(words[k], was);
        set_indexes(t.hdr, wpos, rpos, 0);
        store2(&t.hdr->size, &t.hdr->size_copy, 0);
        t.v.my_head = wpos;
        t.v.my_tail = rpos;
    }
    printf("one word: %d rounds, %llu refused, %llu read less, %llu whole headers faked\n", ONE_WORD_ROUNDS, refused,
           less, fakes);
    CHECK(refused, >, 0);
    test_ring_free(&t);
}

static void test_corruption_racing(void)
{
    const uint64_t size = 4096;
    struct test_ring t;
    test_ring_new(&t, size);
    struct guarded buf = guarded_alloc(2 * size);
    memset(buf.p, 0x11, buf.len);
    struct scribbler s = { .hdr = t.hdr };
    pthread_t th;
    CHECK(pthread_create(&th, NULL, scribble, &s), ==, 0);
    uint64_t rng = 0x777;
    unsigned long long eio = 0;
    for (int i = 0; i < CORRUPT_ROUNDS; i++) {
        size_t blen = (size_t)rng_below(&rng, buf.len + 1);
        struct iovec iov[3];
        int cnt = random_split(&rng, buf.p + buf.len - blen, blen, iov, 3);
        size_t max = rng_below(&rng, 2) ? SIZE_MAX : (size_t)rng_below(&rng, 2 * size);
        ssize_t n = (i & 1) ? ring_write(&t.v, iov, cnt, 0, max) : ring_read(&t.v, iov, cnt, 0, max, i & 2);
        if (n == -EIO) {
            eio++;
        } else {
            CHECK(n, >=, 0);
            CHECK((uint64_t)n, <=, size);
            CHECK((size_t)n <= max, ==, 1);   /* max may be SIZE_MAX */
            CHECK((size_t)n, <=, blen);
        }
        int64_t r = ring_readable(&t.v);
        CHECK(r == -EIO || (r >= 0 && r <= (int64_t)size), ==, 1);
        r = ring_writable(&t.v);
        CHECK(r == -EIO || (r >= 0 && r <= (int64_t)size), ==, 1);
        int e = ring_at_eof(&t.v);
        CHECK(e == -EIO || e == 0 || e == 1, ==, 1);
    }
    atomic_store(&s.stop, 1);
    CHECK(pthread_join(th, NULL), ==, 0);
    printf("racing corruption: %d calls, %llu refused\n", CORRUPT_ROUNDS, eio);
    guarded_free(&buf);
    test_ring_free(&t);
}

/* Growth: only while empty, never past the capacity, and a scribbled size is -EIO;
 * bytes written after a growth wrap at the new size.  ring_space/ring_commit and
 * ring_filled/ring_consume move bytes as ring_write/ring_read do. */
static void test_resize_and_pieces(void)
{
    struct test_ring t;
    test_ring_new(&t, 65536);
    unsigned char in[20000], out[20000];
    CHECK(ring_resize(&t.v, 4096), ==, 0);
    CHECK(ring_size_now(&t.v), ==, 4096);
    CHECK(ring_writable(&t.v), ==, 4096);
    fill_pattern(in, 0, 3000);
    CHECK(write1(&t.v, in, 3000), ==, 3000);
    CHECK(ring_resize(&t.v, 16384), ==, -EBUSY);
    CHECK(ring_resize(&t.v, 131072), ==, -EINVAL);
    CHECK(ring_resize(&t.v, 12288), ==, -EINVAL);
    CHECK(read1(&t.v, out, 3000, false), ==, 3000);
    check_pattern(out, 0, 3000);
    CHECK(ring_resize(&t.v, 16384), ==, 0);
    /* 20000 bytes through a 16 KiB ring starting at position 3000: it wraps */
    fill_pattern(in, 3000, sizeof in);
    struct iovec sp[2];
    int cnt;
    CHECK(ring_space(&t.v, sp, sizeof in, &cnt), ==, 16384);
    CHECK(cnt, ==, 2);
    memcpy(sp[0].iov_base, in, sp[0].iov_len);
    memcpy(sp[1].iov_base, in + sp[0].iov_len, sp[1].iov_len);
    ring_commit(&t.v, 16384);
    CHECK(ring_filled(&t.v, sp, 10000, &cnt), ==, 10000);
    memcpy(out, sp[0].iov_base, sp[0].iov_len);
    if (cnt == 2)
        memcpy(out + sp[0].iov_len, sp[1].iov_base, sp[1].iov_len);
    ring_consume(&t.v, 10000);
    check_pattern(out, 3000, 10000);
    CHECK(write1(&t.v, in + 16384, sizeof in - 16384), ==, (ssize_t)(sizeof in - 16384));
    CHECK(read1(&t.v, out, sizeof out, false), ==, (ssize_t)(sizeof in - 10000));
    check_pattern(out, 13000, sizeof in - 10000);
    /* a size scribbled by the peer is refused, never used (one word, or
     * both: a size that is not one) */
    atomic_store(&t.hdr->size, 3000);
    CHECK(ring_readable(&t.v), ==, -EIO);
    CHECK(write1(&t.v, in, 10), ==, -EIO);
    atomic_store(&t.hdr->size, 1u << 20);
    CHECK(read1(&t.v, out, 10, false), ==, -EIO);
    store2(&t.hdr->size, &t.hdr->size_copy, 3000);
    CHECK(ring_readable(&t.v), ==, -EIO);
    CHECK(write1(&t.v, in, 10), ==, -EIO);
    /* another valid size in one word: the copies disagree, the writer
     * refuses it, and with bytes in the ring so does the reader */
    store2(&t.hdr->size, &t.hdr->size_copy, 0);
    CHECK(write1(&t.v, in, 10), ==, 10);
    atomic_store(&t.hdr->size, 4096);
    CHECK(write1(&t.v, in, 10), ==, -EIO);
    CHECK(read1(&t.v, out, 10, false), ==, -EIO);
    test_ring_free(&t);
    printf("ok: resize and pieces\n");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_empty_full();
    test_wrap_odd();
    test_skip_max();
    test_peek();
    test_fin();
    test_degenerate_iov();
    test_resize_and_pieces();
    test_corruption();
    test_one_word();
    test_corruption_racing();
    test_stress();
    printf("test_ring: ok\n");
    PASS();
}
