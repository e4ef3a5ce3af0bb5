/*
 * test_ring.c: unit tests of the SPSC byte ring (src/transport/ring.c).
 *
 * Functional: empty, full, wrap-around with odd sizes and split iovecs, skip
 * and max, peek, FIN/EOF, degenerate iovecs, resizing and pieces.  Stress:
 * two threads stream 256 MiB of a position-derived pattern through a 64 KiB
 * ring with random chunks and iovec splits, checked byte for byte, while a
 * third thread asks readable/writable/at_eof and must never get -EIO.  The
 * corruption tests are test_ring_corrupt.c's.
 */
#include "ring_fixture.h"

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

/* A ring that holds unread bytes grows in place only where none of them
 * would move, and a reader that meets the two size words apart (the
 * producer stores the copy, then the word) reads the same bytes by either
 * size, or refuses. */
static void test_grow_in_place(void)
{
    struct test_ring t;
    test_ring_new(&t, 65536);
    unsigned char in[20000], out[20000];
    CHECK(ring_resize(&t.v, 4096), ==, 0);
    /* fresh, full, nothing read: grows, then takes 4096 more */
    fill_pattern(in, 0, 8192);
    CHECK(write1(&t.v, in, 8192), ==, 4096);
    CHECK(ring_may_grow_in_place(&t.v, 8192), ==, 0);
    CHECK(ring_grow_in_place(&t.v, 12288), ==, -EINVAL);
    CHECK(ring_grow_in_place(&t.v, 131072), ==, -EINVAL);
    CHECK(ring_grow_in_place(&t.v, 8192), ==, 0);
    CHECK(ring_size_now(&t.v), ==, 8192);
    CHECK(write1(&t.v, in + 4096, 4096), ==, 4096);
    CHECK(read1(&t.v, out, 3000, false), ==, 3000);
    /* [3000, 8192) in the first half of a 16 KiB window: grows again */
    CHECK(ring_grow_in_place(&t.v, 16384), ==, 0);
    fill_pattern(in, 8192, 8192);
    CHECK(write1(&t.v, in, 8192), ==, 8192);
    CHECK(read1(&t.v, out + 3000, 13384, false), ==, 13384);
    check_pattern(out, 0, 16384);
    /* it wrapped since: [20000, 30000) spans the 16 KiB boundary of a 32 KiB
     * window at 0, so a byte would move; refused, nothing changed */
    fill_pattern(in, 16384, 3616);
    CHECK(write1(&t.v, in, 3616), ==, 3616);
    CHECK(read1(&t.v, out, 3616, false), ==, 3616);
    fill_pattern(in, 20000, 10000);
    CHECK(write1(&t.v, in, 10000), ==, 10000);
    CHECK(ring_may_grow_in_place(&t.v, 32768), ==, -EBUSY);
    CHECK(ring_grow_in_place(&t.v, 32768), ==, -EBUSY);
    CHECK(ring_size_now(&t.v), ==, 16384);
    CHECK(read1(&t.v, out, 10000, false), ==, 10000);
    check_pattern(out, 20000, 10000);
    /* the reader between the producer's two stores: [30000, 32768) lies in
     * the first 16 KiB of neither... of a 32 KiB window at 0 it is the second
     * half: refused (-EIO), as for a scribble */
    fill_pattern(in, 30000, 2000);
    CHECK(write1(&t.v, in, 2000), ==, 2000);
    atomic_store(&t.hdr->size_copy, 32768);
    CHECK(read1(&t.v, out, 2000, false), ==, -EIO);
    atomic_store(&t.hdr->size_copy, 16384);
    CHECK(read1(&t.v, out, 2000, false), ==, 2000);
    check_pattern(out, 30000, 2000);
    /* at 32000: [32000, 33000) is in the second 16 KiB of the window at 0
     * of 32 KiB, and [32768, ...) starts the next; position 33000 to 34000
     * lies in the first 16 KiB of the window at 32768: either size, the
     * same bytes */
    fill_pattern(in, 32000, 2000);
    CHECK(write1(&t.v, in, 1000), ==, 1000);
    CHECK(read1(&t.v, out, 1000, false), ==, 1000);
    check_pattern(out, 32000, 1000);
    CHECK(write1(&t.v, in + 1000, 1000), ==, 1000);
    atomic_store(&t.hdr->size_copy, 32768);   /* the copy first, as the producer stores them */
    CHECK(read1(&t.v, out, 1000, true), ==, 1000);
    check_pattern(out, 33000, 1000);
    atomic_store(&t.hdr->size, 32768);
    CHECK(read1(&t.v, out, 1000, false), ==, 1000);
    check_pattern(out, 33000, 1000);
    test_ring_free(&t);
    printf("ok: grow in place\n");
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
    test_grow_in_place();
    test_stress();
    printf("test_ring: ok\n");
    PASS();
}
