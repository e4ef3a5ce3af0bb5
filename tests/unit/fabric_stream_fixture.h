/*
 * fabric_stream_fixture.h: what the fabric stream's two unit tests share
 * (test_fabric_stream.c, test_fabric_stream_leave.c): the random numbers
 * and their seed, the pattern of each side's bytes, the TCP pair, the
 * stream over it, the checks of what a read returns, the wait when nothing
 * moved; the ends that meet over the stream (the server's attach by the
 * client's blob, the client's by the hello); and the phase a failing side
 * names.
 */
#ifndef SHUNT_TESTS_FABRIC_STREAM_FIXTURE_H
#define SHUNT_TESTS_FABRIC_STREAM_FIXTURE_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>

#include "fabric_fixture.h"
#include "base/real.h"
#include "core/conn/fabric_stream.h"
#include "registry/hello.h"

#define RUNS 10
#define STREAM_BYTES (512u * 1024u)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t seed;   /* TEST_SEED, or a new one each run: printed when a side fails */

static inline uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return n ? rng % n : 0;
}

/* Byte k of side i's stream. */
static inline uint8_t pat(int i, uint64_t k)
{
    return (uint8_t)(k * 131u + (k >> 9) * 7u + (uint64_t)i * 91u);
}

/* A TCP connection on loopback between the two sides: side 0 listens. */
static inline int tcp_pair(int sock, int i)
{
    if (i == 0) {
        int l = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof a;
        CHECK_OK(bind(l, (struct sockaddr *)&a, sizeof a));
        CHECK_OK(listen(l, 1));
        CHECK_OK(getsockname(l, (struct sockaddr *)&a, &len));
        send_blob(sock, &a.sin_port, sizeof a.sin_port);
        int c = accept(l, NULL, NULL);
        CHECK(c, >=, 0);
        close(l);
        return c;
    }
    uint32_t n;
    uint16_t *port = recv_blob(sock, &n);
    CHECK(n, ==, sizeof *port);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = *port, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    CHECK_OK(connect(c, (struct sockaddr *)&a, sizeof a));
    free(port);
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return c;
}

static inline void fill(int i, uint64_t from, uint8_t *buf, size_t n)
{
    for (size_t k = 0; k < n; k++)
        buf[k] = pat(i, from + k);
}

static inline void check_bytes(int from_side, uint64_t at, const uint8_t *buf, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (buf[k] != pat(from_side, at + k))
            FAIL("byte %llu from side %d is %u, not %u", (unsigned long long)(at + k), from_side, buf[k],
                 pat(from_side, at + k));
}

static struct fabric_stream stream;

static inline void start(struct fabric_engine *e, int sock, int i, const char *tls, size_t ring, int *fd,
                  struct fabric_ring **f)
{
    *fd = tcp_pair(sock, i);
    *f = ring_connect(e, sock, ring, NULL, NULL, tls);
    fabric_stream_init(&stream, *fd, *f, e);
    stream.spin_ns = rnd(2) ? 20000 : 0;   /* a blocking call spins first, or sleeps at once */
}

static inline void finish(struct fabric_engine *e, int sock, int fd, struct fabric_ring *f)
{
    meet(sock, e);
    fabric_ring_close(f);
    close(fd);
}

/* The next read of a loop: a random size, mostly small; now and then a
 * pause first, so that bytes pile up and writers wait. */
static inline struct iovec next_read(uint8_t *in, size_t cap)
{
    struct iovec v = { in, 1 + rnd(rnd(4) ? 3000 : cap - 1) };
    if (rnd(8) == 0)
        usleep((useconds_t)rnd(300));
    return v;
}

/* A read's answer r, checked: bytes against the pattern (got moves), or
 * 0 once every byte came (EOF).  Whether anything happened. */
static inline bool took(int from_side, ssize_t r, const uint8_t *in, uint64_t *got, bool *eof)
{
    if (r == -EAGAIN)
        return false;
    if (r == 0) {
        CHECK(*got, ==, STREAM_BYTES);
        *eof = true;
        return true;
    }
    if (r < 0)
        FAIL("recv: %zd after %llu bytes (broken at %s:%d)", r, (unsigned long long)*got,
             stream.broken_file ? stream.broken_file : "?", stream.broken_line);
    check_bytes(from_side, *got, in, (size_t)r);
    *got += (uint64_t)r;
    return true;
}

/* Nothing moved: the wait a program under shunt makes (the stream says it
 * sleeps, then a poll on the socket and the engine's fd), briefly. */
static inline void nap(struct fabric_engine *e, int fd)
{
    short ev = fabric_stream_before_sleep(&stream);
    CHECK(ev & POLLERR, ==, 0);
    if (!(ev & POLLIN)) {
        struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = fabric_engine_efd(e), .events = POLLIN } };
        if (fabric_engine_arm(e))
            poll(p, 2, 1);
        fabric_engine_progress(e);
    }
}

/* The server's side of the planned hand-over: the client's blob after its
 * header carries the hello's nonce, then its ring's blob. */
static uint8_t nonce_sent[FABRIC_RING_NONCE];
static int attached;

static inline int server_attach(void *ctx, const void *blob, size_t len)
{
    struct fabric_ring *f = ctx;
    if (len <= FABRIC_RING_NONCE || memcmp(blob, nonce_sent, FABRIC_RING_NONCE) != 0)
        return -EACCES;
    char why[200] = "";
    int r = fabric_ring_attach(f, (const uint8_t *)blob + FABRIC_RING_NONCE, len - FABRIC_RING_NONCE, NULL,
                               why, sizeof why);
    if (r != 0)
        FAIL("attach to the client's blob: %d %s", r, why);
    attached++;
    return 0;
}

/* This end's ring, not attached to anything yet, and the stream over fd. */
static inline struct fabric_ring *unattached_end(struct fabric_engine *e, int fd, size_t ring)
{
    struct fabric_ring *f;
    char why[200] = "";
    if (fabric_ring_open(e, ring, &f, why, sizeof why) != 0)
        FAIL("fabric_ring_open: %s", why);
    fabric_stream_init(&stream, fd, f, e);
    return f;
}

/* The client's side of the hello: attach to the server's blob, and hand
 * over the nonce and this end's blob when it moves. */
static uint8_t client_hand[FABRIC_RING_NONCE + FABRIC_RING_BLOB_MAX];
static int hellos;

static inline int client_on_hello(void *ctx, const struct hello *h)
{
    struct fabric_ring *f = ctx;
    char why[200] = "";
    if (fabric_ring_attach(f, h->addr, h->addr_len, NULL, why, sizeof why) != 0)
        FAIL("attach to the hello's blob: %s", why);
    memcpy(client_hand, h->nonce, FABRIC_RING_NONCE);
    ssize_t n = fabric_ring_blob(f, NULL, client_hand + FABRIC_RING_NONCE, sizeof client_hand - FABRIC_RING_NONCE);
    CHECK(n, >, 0);
    stream.hand_blob = client_hand;
    stream.hand_len = FABRIC_RING_NONCE + (size_t)n;
    hellos++;
    return 0;
}

/* The start of a connection as it will be under shunt: the server's hello
 * first on the TCP connection (naming the client's socket by a tag and
 * cookie the test makes up, as the SYN's option would give them), which
 * the client strips and attaches by; the client hands its blob over in
 * the server's ring when it moves. */
static inline void meet_by_hello(int sock, int i, struct fabric_ring *f)
{
    uint64_t names[2];
    if (i == 0) {
        names[0] = rnd(1u << 31);
        names[1] = rng;
        send_blob(sock, names, sizeof names);
        for (int k = 0; k < FABRIC_RING_NONCE; k++)
            nonce_sent[k] = (uint8_t)rnd(256);
        uint8_t blob[FABRIC_RING_BLOB_MAX];
        ssize_t n = fabric_ring_blob(f, NULL, blob, sizeof blob);
        CHECK(n, >, 0);
        stream.on_peer_blob = server_attach;
        attached = 0;
        CHECK(fabric_stream_hello(&stream, (uint32_t)names[0], names[1], nonce_sent, blob, (size_t)n), ==, 0);
    } else {
        uint32_t len;
        uint64_t *got = recv_blob(sock, &len);
        CHECK(len, ==, sizeof names);
        stream.await_hello = true;
        stream.hello_tag = (uint32_t)got[0];
        stream.hello_cookie = got[1];
        stream.on_hello = client_on_hello;
        free(got);
        hellos = 0;
    }
}

static const char *phase = "start";
static int run_no;

static inline void say_phase(int status, void *side_no)
{
    if (status != 0)
        fprintf(stderr, "(side %d, in %s, run %d; TEST_SEED=%llu)\n", (int)(intptr_t)side_no, phase, run_no,
                (unsigned long long)seed);
}

/* The start of a side's process: the engine on tls lanes, its own random
 * numbers (the side's number mixed in), and the phase said if it fails. */
static inline struct fabric_engine *side_begin(const char *tls, int i)
{
    struct fabric_engine *e = engine_open(tls);
    rng += (uint64_t)i * 7919;
    on_exit(say_phase, (void *)(intptr_t)i);
    return e;
}

/* The random numbers' seed: TEST_SEED, or a new one each run (said when a
 * side fails). */
static inline void seed_rng(void)
{
    const char *given = getenv("TEST_SEED");
    seed = given ? strtoull(given, NULL, 10) : (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
    rng ^= seed * 0x9E3779B97F4A7C15ull;
    if (!rng)
        rng = 1;
}

#endif
