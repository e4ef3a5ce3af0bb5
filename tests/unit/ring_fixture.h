/*
 * ring_fixture.h: what the ring's unit tests share (test_ring.c,
 * test_ring_corrupt.c): a random generator, a position-derived pattern,
 * buffers and rings between PROT_NONE guard pages, and one-call helpers.
 */
#ifndef SHUNT_TESTS_RING_FIXTURE_H
#define SHUNT_TESTS_RING_FIXTURE_H

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

static inline uint64_t rng_next(uint64_t *s)
{
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

static inline uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return n ? rng_next(s) % n : 0;
}

static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The byte at stream position p: no short period, so a misplaced chunk
 * (wrong offset, wrong wrap) cannot match by accident. */
static inline unsigned char pattern(uint64_t p)
{
    return (unsigned char)(mix64(p >> 3) >> ((p & 7) * 8));
}

static inline size_t page_size(void)
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

static inline struct guarded guarded_alloc(size_t len)
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

static inline void guarded_free(struct guarded *g)
{
    munmap(g->map, g->map_len);
}

/* A ring whose data fills whole pages between two guard pages. */
struct test_ring {
    struct ring_hdr *hdr;
    struct guarded data;
    struct ring_view v;
};

static inline void test_ring_new(struct test_ring *t, uint64_t size)
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

static inline void test_ring_free(struct test_ring *t)
{
    guarded_free(&t->data);
    free(t->hdr);
}

/* A word and its copy, as their one honest writer stores them. */
static inline void store2(_Atomic uint64_t *word, _Atomic uint64_t *copy, uint64_t v)
{
    atomic_store(copy, v);
    atomic_store(word, v);
}

static inline void set_indexes(struct ring_hdr *h, uint64_t head, uint64_t tail, uint64_t fin)
{
    store2(&h->head, &h->head_copy, head);
    store2(&h->tail, &h->tail_copy, tail);
    store2(&h->fin, &h->fin_copy, fin);
}

static inline ssize_t write1(struct ring_view *v, const void *buf, size_t len)
{
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
    return ring_write(v, &iov, 1, 0, len);
}

static inline ssize_t read1(struct ring_view *v, void *buf, size_t len, bool peek)
{
    struct iovec iov = { .iov_base = buf, .iov_len = len };
    return ring_read(v, &iov, 1, 0, len, peek);
}

static inline void fill_pattern(unsigned char *buf, uint64_t pos, size_t len)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = pattern(pos + i);
}

static inline void check_pattern(const unsigned char *buf, uint64_t pos, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (buf[i] != pattern(pos + i))
            FAIL("stream byte %llu: got 0x%02x, expected 0x%02x", (unsigned long long)(pos + i), buf[i],
                 pattern(pos + i));
    }
}

/* Splits len bytes of buf into up to max_segs iovec entries of random
 * lengths (zero-length entries included).  Returns the count. */
static inline int random_split(uint64_t *rng, unsigned char *buf, size_t len, struct iovec *iov, int max_segs)
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


#endif
