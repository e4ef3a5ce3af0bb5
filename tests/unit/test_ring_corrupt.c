/*
 * test_ring_corrupt.c: the SPSC byte ring (src/transport/ring.c) against a
 * peer that writes its shared header wrong.  Random garbage in head/tail/fin
 * (both copies of each, as a peer that writes the protocol wrong), both
 * between calls and from a racing thread: every call must answer -EIO or a
 * value within bounds, and the ring data and the caller's buffers sit
 * between PROT_NONE pages so that any access outside them faults, with or
 * without ASan.  One word of the header scribbled (a copy apart from its
 * word, as a third process would): never a byte read that was not written,
 * nor one overwritten that was not read.
 */
#include "ring_fixture.h"

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

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_corruption();
    test_one_word();
    test_corruption_racing();
    printf("test_ring_corrupt: ok\n");
    PASS();
}
