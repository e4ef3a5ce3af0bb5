/*
 * test_fabric_ring.c: unit tests of a connection's byte stream over UCX's
 * one-sided puts (src/transport/fabric_ring.c).
 *
 * Two processes (each a child that opens the engine itself: a child may
 * not use its parent's UCX state) trade blobs over a socketpair, with a
 * nonce each that must arrive, and then:
 *   stream   16 MiB each way at once, chunks of random sizes written from
 *            three iovecs (the first skipped) and read into two, some
 *            peeked first, through rings of 64 KiB and 16 KiB (so the
 *            writer meets a full ring: counted), every byte checked
 *            against a pattern of its own direction; then FIN, which the
 *            reader sees as EOF after the last byte, and -EPIPE for a
 *            write after it;
 *   wake     the hints for the caller's doorbell: a write into a ring the
 *            peer had read up says so, one into a ring with unread bytes
 *            does not; a read of a full ring says so, the next does not;
 *   garbage  the test itself writes into its own region what a broken or
 *            hostile peer could put: a count one byte beyond the ring, one going
 *            back, all ones, a count moved after FIN, a consumed count
 *            beyond what was written (each with a valid check word), and
 *            a count without one (a put that never finishes landing): each
 *            is -EIO (the last within the bound of a torn put), never a
 *            byte that was not written, and the end stays broken;
 *   blobs    a blob cut short, lengthened, of another magic or version, or
 *            with a ring size not a power of two is refused (-EPROTO);
 *   stalled  (TCP lanes) a write and a flush while the peer sleeps without
 *            driving its worker: the first that waits for the peer ends
 *            with -ETIMEDOUT after the engine's 5 s;
 *   gone     (TCP lanes) the peer's process ends without a FIN after its
 *            bytes landed: a reader about to sleep is told 0, not an
 *            error (the socket says how the peer ended), as often as it
 *            asks, and the bytes stay readable; a write is -EPIPE.
 *            Before, the sleep's failed put said -EPIPE, which the stream
 *            took for a broken lane (a reset where the kernel gives the
 *            bytes, then the peer's end).
 * Once on the default lanes (which must be shared memory here) and once
 * with UCX's TCP lanes forced (which must be TCP); each side checks the
 * lanes its end used.  Nothing may reach stdout or stderr.
 * UCX must be installed (libucx0): under CI its absence fails the test.
 */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fabric_fixture.h"
#include "base/real.h"
#include "transport/fabric_engine.h"
#include "transport/fabric_ring.h"

#define STREAM (16u << 20)
#define MAX_CHUNK (128u * 1024)
#define PERIOD ((1u << 20) + 7)   /* the pattern's: not a multiple of any ring size */
#define RX_SIZE(i) ((i) == 0 ? 64u * 1024 : 16u * 1024)
#define WRITTEN_AT 0     /* the slots of a region, as fabric_ring_internal.h lays them out */
#define CONSUMED_AT 64
#define BLOB_RING_SIZE_AT 40

/* Each direction's pattern, extended by MAX_CHUNK so that any chunk from
 * position p is contiguous at pat[dir][p % PERIOD]. */
static unsigned char pat[2][PERIOD + MAX_CHUNK];

static void make_patterns(void)
{
    for (int d = 0; d < 2; d++) {
        uint64_t x = 0x9E3779B97F4A7C15ull * (uint64_t)(d + 1);
        for (size_t i = 0; i < PERIOD; i++) {
            x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
            pat[d][i] = (unsigned char)((x * 0x2545F4914F6CDD1Dull) >> 56);
        }
        memcpy(pat[d] + PERIOD, pat[d], MAX_CHUNK);
    }
}

static uint64_t rng = 88172645463325252ull;

static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng % n;
}

/* A chunk size: mostly small, sometimes larger than either ring. */
static size_t chunk(void)
{
    static const size_t most[] = { 64, 4096, 65536, MAX_CHUNK };
    return 1 + (size_t)rnd(most[rnd(4)]);
}

/* A ring pair with the other side: blobs (with nonces) both ways, and the
 * lanes as the setting wants them. */
static struct fabric_ring *connect_pair(struct fabric_engine *e, int sock, int i, const char *tls)
{
    uint8_t nonce[FABRIC_RING_NONCE], got[FABRIC_RING_NONCE];
    for (int k = 0; k < FABRIC_RING_NONCE; k++)
        nonce[k] = (uint8_t)(0xA0 + 16 * i + k);
    struct fabric_ring *f = ring_connect(e, sock, RX_SIZE(i), nonce, got, tls);
    for (int k = 0; k < FABRIC_RING_NONCE; k++)
        CHECK(got[k], ==, 0xA0 + 16 * (1 - i) + k);
    char lanes[128];
    fabric_ring_lanes(f, lanes, sizeof lanes);
    bool tcp = strstr(lanes, "tcp") != NULL;
    if (tls ? !tcp : tcp || !strstr(lanes, "memory"))
        FAIL("%s: lanes %s", tls ? tls : "default", lanes);
    CHECK(fabric_ring_writable(f), ==, RX_SIZE(1 - i));
    return f;
}

static void finish_pair(struct fabric_ring *f, int sock, struct fabric_engine *e)
{
    meet(sock, e);
    fabric_ring_close(f);
}

static void test_stream(struct fabric_engine *e, int sock, int i, const char *tls)
{
    struct fabric_ring *f = connect_pair(e, sock, i, tls);
    const unsigned char *out = pat[i], *in = pat[1 - i];
    static unsigned char buf[MAX_CHUNK], junk[100];
    uint64_t sent = 0, got = 0, fulls = 0, peeks = 0;
    bool shut = false, eof = false;
    double until = now_s() + 60;
    while (!shut || !eof) {
        if (sent < STREAM) {
            size_t n = chunk(), a = (size_t)rnd(n + 1), k = (size_t)rnd(sizeof junk);
            if (n > STREAM - sent)
                n = STREAM - sent, a = a > n ? n : a;
            const unsigned char *p = out + sent % PERIOD;
            struct iovec iov[3] = { { junk, k }, { (void *)p, a }, { (void *)(p + a), n - a } };
            ssize_t w = fabric_ring_write(f, iov, 3, k, NULL);
            if (w == -EAGAIN)
                fulls++;
            else {
                CHECK(w, >, 0);
                CHECK(w, <=, (long long)n);
                sent += (uint64_t)w;
            }
            CHECK(fabric_ring_writable(f), <=, RX_SIZE(1 - i));
        } else if (!shut) {
            CHECK(fabric_ring_shutdown(f), ==, 0);
            shut = true;
            struct iovec one = { junk, 1 };
            CHECK(fabric_ring_write(f, &one, 1, 0, NULL), ==, -EPIPE);
        }
        if (!eof) {
            size_t n = chunk(), a = (size_t)rnd(n + 1);
            struct iovec iov[2] = { { buf, a }, { buf + a, n - a } };
            bool peek = rnd(8) == 0;
            int64_t readable = fabric_ring_readable(f);
            CHECK(readable, >=, 0);
            CHECK(readable, <=, RX_SIZE(i));
            ssize_t r = fabric_ring_read(f, iov, 2, peek, NULL);
            if (r == 0) {
                CHECK(got, ==, STREAM);   /* EOF only after the last byte */
                eof = true;
            } else if (r != -EAGAIN) {
                CHECK(r, >, 0);
                CHECK(r, <=, (long long)n);
                CHECK(got + (uint64_t)r, <=, STREAM);
                if (memcmp(buf, in + got % PERIOD, (size_t)r) != 0)
                    FAIL("side %d: bytes %llu..%llu differ", i, (unsigned long long)got,
                         (unsigned long long)(got + (uint64_t)r));
                if (peek)
                    peeks++;
                else
                    got += (uint64_t)r;
            }
        }
        if (now_s() > until)
            FAIL("side %d: stuck at sent %llu, read %llu", i, (unsigned long long)sent, (unsigned long long)got);
    }
    CHECK(fulls, >, 0);   /* flow control: the writer met a full ring */
    CHECK(peeks, >, 0);
    struct iovec one = { buf, 1 };
    CHECK(fabric_ring_read(f, &one, 1, false, NULL), ==, 0);   /* EOF stays */
    CHECK(fabric_ring_flush(f), ==, 0);
    finish_pair(f, sock, e);
}

static ssize_t write_n(struct fabric_ring *f, size_t n, bool *was_empty)
{
    static unsigned char zeros[64 * 1024];
    struct iovec iov = { zeros, n };
    return fabric_ring_write(f, &iov, 1, 0, was_empty);
}

static ssize_t read_n(struct fabric_ring *f, size_t n, bool *was_full)
{
    static unsigned char sink[64 * 1024];
    struct iovec iov = { sink, n };
    return fabric_ring_read(f, &iov, 1, false, was_full);
}

/* Side 0 writes, side 1 (16 KiB ring) reads; they meet between steps. */
static void test_wake(struct fabric_engine *e, int sock, int i, const char *tls)
{
    struct fabric_ring *f = connect_pair(e, sock, i, tls);
    bool hint = false;
    if (i == 0) {
        CHECK(write_n(f, 10, &hint), ==, 10);
        CHECK(hint, ==, true);   /* nothing unread before: the reader may sleep */
        CHECK(fabric_ring_flush(f), ==, 0);   /* landed before the reader looks (TCP lanes) */
        meet(sock, e);
        CHECK(write_n(f, 10, &hint), ==, 10);
        CHECK(hint, ==, false);   /* 10 bytes unread: the reader is not waiting */
        CHECK(fabric_ring_flush(f), ==, 0);
        meet(sock, e);
        meet(sock, e);   /* the reader read them all */
        CHECK(write_n(f, 10, &hint), ==, 10);
        CHECK(hint, ==, true);
        CHECK(write_n(f, 64 * 1024, &hint), ==, 16 * 1024 - 10);   /* up to the ring's size */
        CHECK(hint, ==, false);
        CHECK(write_n(f, 1, &hint), ==, -EAGAIN);
        CHECK(fabric_ring_writable(f), ==, 0);
        CHECK(fabric_ring_flush(f), ==, 0);   /* landed, as a writer about to sleep would */
        meet(sock, e);
        meet(sock, e);
        CHECK(fabric_ring_writable(f), ==, 200);
    } else {
        meet(sock, e);
        meet(sock, e);
        CHECK(read_n(f, 100, &hint), ==, 20);
        CHECK(hint, ==, false);
        CHECK(fabric_ring_flush(f), ==, 0);   /* as a reader about to sleep */
        meet(sock, e);
        meet(sock, e);   /* the writer filled the ring */
        CHECK(fabric_ring_readable(f), ==, 16 * 1024);
        CHECK(read_n(f, 100, &hint), ==, 100);
        CHECK(hint, ==, true);   /* it was full: the writer may wait for space */
        CHECK(read_n(f, 100, &hint), ==, 100);
        CHECK(hint, ==, false);
        CHECK(fabric_ring_flush(f), ==, 0);
        meet(sock, e);
    }
    finish_pair(f, sock, e);
}

/* Over TCP lanes a put or a flush completes only while the peer drives
 * its worker: with the peer asleep in a read of the socketpair, the first
 * that waits for it gives up after the engine's 5 s, and the end stays
 * broken.  (The engine's wait after its
 * cancel was unbounded: this spun for minutes in the bench.) */
static void test_stalled_peer(struct fabric_engine *e, int sock, int i, const char *tls)
{
    struct fabric_ring *f = connect_pair(e, sock, i, tls);
    char c = 's';
    if (i == 0) {   /* the lane's connection up while both drive their workers */
        CHECK(write_n(f, 100, NULL), ==, 100);
        CHECK(fabric_ring_flush(f), ==, 0);
    }
    meet(sock, e);
    if (i == 0) {
        /* only once the peer says it stopped driving its worker: meet()
         * lets it drive a little longer than us, which completed our put
         * now and then (seen under ASan, where it is slower) */
        CHECK(read(sock, &c, 1), ==, 1);
        double t0 = now_s();
        alarm(30);   /* a wait that never returns fails the test, not hangs it */
        ssize_t r = write_n(f, 100, NULL);   /* its put may wait for the peer already */
        if (r == 100)
            r = fabric_ring_flush(f);
        CHECK(r, ==, -ETIMEDOUT);
        alarm(0);
        CHECK(now_s() - t0, >, 4.5);
        CHECK(now_s() - t0, <, 8);
        CHECK(write_n(f, 1, NULL), ==, -EIO);
        CHECK(write(sock, &c, 1), ==, 1);   /* wakes the peer */
    } else {
        CHECK(write(sock, &c, 1), ==, 1);   /* no progress from here on */
        struct pollfd pf = { .fd = sock, .events = POLLIN };
        CHECK(poll(&pf, 1, 30 * 1000), ==, 1);   /* asleep: no progress */
        CHECK(read(sock, &c, 1), ==, 1);
    }
    finish_pair(f, sock, e);
}

/* Side 1 puts 100 bytes, and its process ends (no FIN, no close of the
 * engine) once they landed; side 0 then sleeps and reads. */
static void test_peer_gone(struct fabric_engine *e, int sock, int i, const char *tls)
{
    struct fabric_ring *f = connect_pair(e, sock, i, tls);
    if (i == 1) {
        CHECK(write_n(f, 100, NULL), ==, 100);
        CHECK(fabric_ring_flush(f), ==, 0);
        meet(sock, e);
        _exit(0);   /* as a killed process: nothing more of ours */
    }
    meet(sock, e);
    fabric_ring_watch(f, sock, 0);   /* the stream's socket: here the socketpair */
    char c;
    struct pollfd pf = { .fd = sock, .events = POLLIN };
    CHECK(poll(&pf, 1, 20 * 1000), ==, 1);
    CHECK(read(sock, &c, 1), ==, 0);   /* the peer's process is gone */
    for (int k = 0; k < 5; k++) {
        CHECK(fabric_ring_sleep(f), ==, 0);
        fabric_engine_progress(e);
        usleep(10 * 1000);   /* the engine's socket to the peer meets its end meanwhile */
    }
    CHECK(fabric_ring_readable(f), ==, 100);
    CHECK(read_n(f, 1000, NULL), ==, 100);
    CHECK(read_n(f, 1000, NULL), ==, -EAGAIN);   /* no FIN came: the socket tells the end */
    CHECK(write_n(f, 1, NULL), ==, -EPIPE);
    fabric_ring_close(f);
}

enum garbage { BEYOND, BACK, ALL_ONES, AFTER_FIN, TORN, CONSUMED_BEYOND, NGARBAGE };
static const char *const garbage_names[] = { "beyond", "back", "all_ones", "after_fin", "torn", "consumed_beyond" };

/* The pair scribble() wrote over, which unscribble() puts back. */
static uint64_t saved[2];
static size_t saved_at;

static _Atomic uint64_t *slot_in(struct fabric_ring *f, size_t at)
{
    size_t len;
    return (_Atomic uint64_t *)((char *)fabric_ring_region(f, &len) + at);
}

/* Writes value into slot at of our region, with the check word of the
 * key the pair now there was made with (unless keyed is false). */
static void scribble(struct fabric_ring *f, size_t at, uint64_t value, bool keyed)
{
    _Atomic uint64_t *w = slot_in(f, at);
    saved[0] = atomic_load(&w[0]);
    saved[1] = atomic_load(&w[1]);
    saved_at = at;
    atomic_store(&w[1], keyed ? value ^ saved[0] ^ saved[1] : saved[1]);
    atomic_store(&w[0], value);
}

/* The honest pair back: an end that reported garbage stays broken. */
static void unscribble(struct fabric_ring *f)
{
    _Atomic uint64_t *w = slot_in(f, saved_at);
    atomic_store(&w[0], saved[0]);
    atomic_store(&w[1], saved[1]);
}

/* Side 0 writes 100 bytes (and a FIN for after_fin); side 1 reads 50;
 * then the side whose region holds the slot scribbles on it. */
static void test_garbage(struct fabric_engine *e, int sock, int i, const char *tls, enum garbage g)
{
    struct fabric_ring *f = connect_pair(e, sock, i, tls);
    unsigned char got[100];
    struct iovec iov = { got, sizeof got };
    if (i == 0) {
        struct iovec src = { pat[0], 100 };
        CHECK(fabric_ring_write(f, &src, 1, 0, NULL), ==, 100);
        if (g == AFTER_FIN)
            CHECK(fabric_ring_shutdown(f), ==, 0);
        CHECK(fabric_ring_flush(f), ==, 0);
        meet(sock, e);
        meet(sock, e);   /* the reader took 50: its count is here */
        if (g == CONSUMED_BEYOND) {
            CHECK(fabric_ring_writable(f), ==, 16 * 1024 - 50);
            scribble(f, CONSUMED_AT, 101, true);
            CHECK(write_n(f, 1, NULL), ==, -EIO);
            CHECK(fabric_ring_writable(f), ==, -EIO);
            unscribble(f);
            CHECK(write_n(f, 1, NULL), ==, -EIO);   /* broken for good */
        }
    } else {
        meet(sock, e);
        iov.iov_len = 50;
        CHECK(fabric_ring_read(f, &iov, 1, false, NULL), ==, 50);
        CHECK(memcmp(got, pat[0], 50), ==, 0);
        CHECK(fabric_ring_flush(f), ==, 0);
        meet(sock, e);
        iov.iov_len = sizeof got;
        double t0 = now_s();
        switch (g) {
        case BEYOND:
            scribble(f, WRITTEN_AT, 50 + 16 * 1024 + 1, true);   /* one byte more than the ring holds */
            break;
        case BACK:
            scribble(f, WRITTEN_AT, 99, true);
            break;
        case ALL_ONES:
            scribble(f, WRITTEN_AT, UINT64_MAX, true);
            break;
        case AFTER_FIN:
            scribble(f, WRITTEN_AT, 100, true);   /* the FIN bit gone */
            break;
        case TORN: {
            scribble(f, WRITTEN_AT, 1000, false);
            /* the bytes before still come, no more; then -EIO within the bound */
            ssize_t r = fabric_ring_read(f, &iov, 1, false, NULL);
            CHECK(r, ==, 50);
            CHECK(memcmp(got, pat[0] + 50, 50), ==, 0);
            while ((r = fabric_ring_read(f, &iov, 1, false, NULL)) == -EAGAIN)
                CHECK(now_s() - t0, <, 3);
            CHECK(r, ==, -EIO);
            CHECK(now_s() - t0, >, 0.5);   /* a put still landing is not garbage at once */
            break;
        }
        default:
            break;
        }
        if (g != CONSUMED_BEYOND) {
            if (g != TORN)
                CHECK(fabric_ring_read(f, &iov, 1, false, NULL), ==, -EIO);
            CHECK(fabric_ring_readable(f), ==, -EIO);
            unscribble(f);
            CHECK(fabric_ring_read(f, &iov, 1, true, NULL), ==, -EIO);   /* broken for good */
        }
    }
    finish_pair(f, sock, e);
}

/* The peer's blob with one thing wrong: refused before any endpoint. */
static void test_blobs(struct fabric_engine *e, int sock, int i, const char *tls)
{
    struct fabric_ring *f;
    char why[200] = "";
    CHECK(fabric_ring_open(e, RX_SIZE(i), &f, why, sizeof why), ==, 0);
    CHECK(fabric_ring_open(e, 5000, &(struct fabric_ring *){ NULL }, why, sizeof why), ==, -EINVAL);
    unsigned char blob[FABRIC_RING_BLOB_MAX], bad[FABRIC_RING_BLOB_MAX + 1];
    ssize_t n = fabric_ring_blob(f, NULL, blob, sizeof blob);
    CHECK(n, >, 0);
    CHECK(fabric_ring_blob(f, NULL, blob, 100), ==, -ENOSPC);
    for (int k = 0; k < 5; k++) {
        memcpy(bad, blob, (size_t)n);
        size_t len = (size_t)n;
        switch (k) {
        case 0: len = 60; break;                               /* short of the fixed part */
        case 1: bad[len++] = 0; break;                         /* a byte more than its lengths say */
        case 2: bad[0] ^= 1; break;                            /* magic */
        case 3: bad[8] ^= 1; break;                            /* version */
        case 4: {                                              /* ring size 16 bytes short: fits, not a power of two */
            uint64_t size;
            memcpy(&size, bad + BLOB_RING_SIZE_AT, 8);
            size -= 16;
            memcpy(bad + BLOB_RING_SIZE_AT, &size, 8);
            break;
        }
        }
        CHECK(fabric_ring_attach(f, bad, len, NULL, why, sizeof why), ==, -EPROTO);
        CHECK(why[0] != '\0', ==, 1);
    }
    struct iovec one = { blob, 1 };
    CHECK(fabric_ring_write(f, &one, 1, 0, NULL), ==, -ENOTCONN);
    fabric_ring_close(f);
    (void)sock;
    (void)tls;
}

/* Which test a failed CHECK was in (its line is shared by the cases). */
static const char *phase = "start", *lanes_set = "";

static void say_phase(int status, void *side_no)
{
    if (status != 0)
        fprintf(stderr, "(side %d, lanes %s, in %s)\n", (int)(intptr_t)side_no, lanes_set, phase);
}

static void side(int sock, int i, const void *arg)
{
    const char *tls = arg;
    struct fabric_engine *e = engine_open(tls);
    rng += (uint64_t)i * 7919;   /* the two sides' chunks differ */
    on_exit(say_phase, (void *)(intptr_t)i);
    lanes_set = tls ? tls : "default";
    phase = "blobs";
    test_blobs(e, sock, i, tls);
    phase = "stream";
    test_stream(e, sock, i, tls);
    phase = "wake";
    test_wake(e, sock, i, tls);
    for (int g = 0; g < NGARBAGE; g++) {
        phase = garbage_names[g];
        test_garbage(e, sock, i, tls, (enum garbage)g);
    }
    if (tls) {   /* shared-memory puts land without the peer */
        phase = "stalled_peer";
        test_stalled_peer(e, sock, i, tls);
        phase = "peer_gone";   /* the last: side 1 ends in it */
        test_peer_gone(e, sock, i, tls);
    }
    fabric_engine_close(e);
}

int main(void)
{
    shunt_real_resolve();   /* what libshunt.so's start-up does: the engine calls libc through the table */
    make_patterns();
    children_output_open("test_fabric_ring");
    run_sides(side, NULL);
    run_sides(side, "tcp");
    PASS();
}
