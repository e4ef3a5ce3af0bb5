/*
 * test_fabric_stream.c: unit test of the fabric stream
 * (src/core/conn/fabric_stream.c): a TCP connection on loopback between two
 * processes, each with its fabric ring attached to the other's (UCX's
 * shared-memory lanes, then its TCP lanes), and the program's bytes first
 * by TCP, then, from a point each end picks at random, through the ring.
 *
 * What must hold whatever the points: the bytes each side receives are
 * exactly the other's, in order, then EOF after its shutdown; a peek
 * shows the bytes the next read returns.  Each run also checks that the
 * ring really carried bytes (a stream that stayed on TCP would pass the
 * byte checks too), that each end moved exactly where it chose (a
 * doorbell moves nothing), and that doorbells were sent and heard.
 *
 *   exchange  both directions at once, nonblocking, chunks of random
 *             sizes, each side moving at a random offset of its stream
 *             (also 0, and "never": then at its shutdown), small rings so
 *             that writers fill them and wait, readers pausing now and
 *             then so that the last TCP bytes and the ring's first
 *             reach them at once;
 *   handover  as exchange, but the server's ring is attached only once the
 *             client's blob comes behind the client's header in it (how a
 *             connection will reach the stream after the server's hello),
 *             checked against the nonce the server handed out; with a
 *             wrong nonce the server refuses it and its stream breaks;
 *   peer dies the writer's process exits without a shutdown after its
 *             bytes went into the ring: the reader gets them all, then EOF
 *             (or a reset), never EIO, never a hang;
 *   blocking  one direction, a blocking writer and a blocking reader with
 *             random read sizes and peeks, the reader moving first or last;
 *             the waits must end by doorbells, not by their bound (a writer
 *             that does not ring a reader that said it sleeps shows here).
 */
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

static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return n ? rng % n : 0;
}

/* Byte k of side i's stream. */
static uint8_t pat(int i, uint64_t k)
{
    return (uint8_t)(k * 131u + (k >> 9) * 7u + (uint64_t)i * 91u);
}

/* A TCP connection on loopback between the two sides: side 0 listens. */
static int tcp_pair(int sock, int i)
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

static void fill(int i, uint64_t from, uint8_t *buf, size_t n)
{
    for (size_t k = 0; k < n; k++)
        buf[k] = pat(i, from + k);
}

static void check_bytes(int from_side, uint64_t at, const uint8_t *buf, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (buf[k] != pat(from_side, at + k))
            FAIL("byte %llu from side %d is %u, not %u", (unsigned long long)(at + k), from_side, buf[k],
                 pat(from_side, at + k));
}

static struct fabric_stream stream;

static void start(struct fabric_engine *e, int sock, int i, const char *tls, size_t ring, int *fd,
                  struct fabric_ring **f)
{
    *fd = tcp_pair(sock, i);
    *f = ring_connect(e, sock, ring, NULL, NULL, tls);
    fabric_stream_init(&stream, *fd, *f, e);
    stream.spin_ns = rnd(2) ? 20000 : 0;   /* a blocking call spins first, or sleeps at once */
}

static void finish(struct fabric_engine *e, int sock, int fd, struct fabric_ring *f)
{
    meet(sock, e);
    fabric_ring_close(f);
    close(fd);
}

/* The next read of a loop: a random size, mostly small; now and then a
 * pause first, so that bytes pile up and writers wait. */
static struct iovec next_read(uint8_t *in, size_t cap)
{
    struct iovec v = { in, 1 + rnd(rnd(4) ? 3000 : cap - 1) };
    if (rnd(8) == 0)
        usleep((useconds_t)rnd(300));
    return v;
}

/* A read's answer r, checked: bytes against the pattern (got moves), or
 * 0 once every byte came (EOF).  Whether anything happened. */
static bool took(int from_side, ssize_t r, const uint8_t *in, uint64_t *got, bool *eof)
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
static void nap(struct fabric_engine *e, int fd)
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

/* Both directions at once until both ends saw EOF; this end moves once it
 * sent move_at bytes (UINT64_MAX: at its shutdown), or as soon after as its
 * ring is attached; goes back to TCP once it sent back_at bytes, and asks
 * the peer to once it got ask_at (UINT64_MAX: never). */
static void exchange_back(struct fabric_engine *e, int fd, int i, uint64_t move_at, uint64_t back_at,
                          uint64_t ask_at)
{
    uint64_t sent = 0, got = 0;
    bool shut = false, eof = false;
    static uint8_t out[70000], in[70000];
    double until = now_s() + 60;
    while (!(shut && eof)) {
        bool progress = false;
        if (!stream.moved && sent >= move_at) {
            int m = fabric_stream_move(&stream);
            if (m != -ENOTCONN && m != 0)
                FAIL("move: %d (broken at %s:%d)", m, stream.broken_file ? stream.broken_file : "?",
                     stream.broken_line);
        }
        if (!stream.back && !shut && sent >= back_at)
            CHECK(fabric_stream_return(&stream), ==, 0);
        if (!stream.asked && got >= ask_at) {
            int a = fabric_stream_ask(&stream);
            if (a != -ENOTCONN)   /* not before this end's ring is attached */
                CHECK(a, ==, 0);
        }
        if (sent < STREAM_BYTES) {
            size_t n = 1 + rnd(rnd(4) ? 2000 : sizeof out - 1);
            if (n > STREAM_BYTES - sent)
                n = STREAM_BYTES - sent;
            if (!stream.moved && move_at != UINT64_MAX && move_at > sent && n > move_at - sent)
                n = (size_t)(move_at - sent);   /* the move falls between two sends */
            if (!stream.back && back_at != UINT64_MAX && back_at > sent && n > back_at - sent)
                n = (size_t)(back_at - sent);   /* and so does the way back */
            fill(i, sent, out, n);
            struct iovec v = { out, n };
            ssize_t r = fabric_stream_send(&stream, &v, 1, true);
            if (r != -EAGAIN) {
                CHECK(r, >, 0);
                sent += (uint64_t)r;
                progress = true;
            }
        } else if (!shut) {
            int r = fabric_stream_shutdown(&stream);
            if (r != -ENOTCONN) {   /* not before the peer's blob came */
                CHECK(r, ==, 0);
                shut = progress = true;
            }
        }
        if (!eof) {
            struct iovec v = next_read(in, sizeof in);
            if (rnd(5) == 0) {   /* a peek shows what the read then returns */
                ssize_t p = fabric_stream_recv(&stream, &v, 1, true, true);
                if (p > 0)
                    check_bytes(1 - i, got, in, (size_t)p);
            }
            if (took(1 - i, fabric_stream_recv(&stream, &v, 1, false, true), in, &got, &eof))
                progress = true;
        }
        if (!progress)
            nap(e, fd);
        if (now_s() > until)
            FAIL("stuck: sent %llu, got %llu, moved %d, peer moved %d", (unsigned long long)sent,
                 (unsigned long long)got, stream.moved, stream.peer_moved);
    }
    CHECK(fabric_stream_settle(&stream, true), ==, 0);   /* as a close would: what is owed by TCP */
    CHECK(stream.moved || (stream.back && back_at < move_at), ==, 1);
    if (stream.moved)
        CHECK(stream.bells_sent, >, 0);   /* at least the move's */
}

static void exchange(struct fabric_engine *e, int fd, int i, uint64_t move_at)
{
    exchange_back(e, fd, i, move_at, UINT64_MAX, UINT64_MAX);
    CHECK(stream.moved && stream.peer_moved, ==, 1);
    CHECK(stream.tcp_read, ==, stream.peer_tcp);
}

static void run_exchange(struct fabric_engine *e, int sock, int i, const char *tls)
{
    int fd;
    struct fabric_ring *f;
    start(e, sock, i, tls, rnd(2) ? 4096 : 65536, &fd, &f);
    uint64_t move_at = rnd(4) == 0 ? UINT64_MAX : rnd(4) == 0 ? 0 : rnd(STREAM_BYTES);
    exchange(e, fd, i, move_at);
    /* where it chose: its shutdown moves it if nothing did before */
    CHECK(stream.tcp_sent, ==, (move_at == UINT64_MAX ? STREAM_BYTES : move_at));
    finish(e, sock, fd, f);
}

/* Going back to TCP: each end moves, then may go back at a random offset
 * (also before it moved: then it never does) and may ask the peer to; the
 * ends tell each other their plans, so that what must have happened is
 * checked: an end that went back did, and its reader read to its mark;
 * whatever the timing, every byte arrives once, in order, then EOF. */
static void run_back(struct fabric_engine *e, int sock, int i, const char *tls)
{
    int fd;
    struct fabric_ring *f;
    start(e, sock, i, tls, rnd(2) ? 4096 : 65536, &fd, &f);
    uint64_t plan[3];
    plan[0] = rnd(4) == 0 ? 0 : rnd(STREAM_BYTES / 2);                 /* move_at */
    plan[1] = rnd(4) == 0 ? UINT64_MAX : rnd(STREAM_BYTES);           /* back_at */
    plan[2] = rnd(3) == 0 ? rnd(STREAM_BYTES) : UINT64_MAX;           /* ask_at */
    send_blob(sock, plan, sizeof plan);
    uint32_t n;
    uint64_t *peer = recv_blob(sock, &n);
    CHECK(n, ==, sizeof plan);
    exchange_back(e, fd, i, plan[0], plan[1], plan[2]);
    if (plan[1] != UINT64_MAX) {
        CHECK(stream.back, ==, 1);
        CHECK(stream.moved, ==, plan[0] <= plan[1]);   /* back first: never moved */
    }
    bool peer_moves = peer[1] == UINT64_MAX || peer[0] <= peer[1];
    CHECK(stream.peer_moved, ==, peer_moves);
    if (peer_moves)
        CHECK(stream.tcp_read, ==, stream.peer_tcp);
    if (peer[1] != UINT64_MAX && peer_moves)
        CHECK(stream.peer_back, ==, 1);   /* its ring read to the mark, the rest by TCP */
    if (!stream.moved)
        CHECK(stream.tcp_sent, ==, STREAM_BYTES);
    free(peer);
    finish(e, sock, fd, f);
}

/* One end leaves the fabric at a random point, as a process about to exec
 * a program without shunt (or a child after fork) will, and goes on as
 * plain TCP: its reads and writes are the socket's own from then on; on
 * shared-memory lanes it may also close its ring at once (an exec ends its
 * memory).  The other end goes on with the stream: it must notice, send
 * again by TCP what the leaver had not read from the ring, then the rest,
 * and read the leaver's ring to its mark, then its TCP bytes.  Every byte
 * in both directions, then EOF. */
/* The plan of a leave run, side 0's, sent to side 1: the leaving side,
 * when (its bytes read), whether it closes its ring, and when the other
 * goes back to TCP on its own before (UINT64_MAX: never), so that its ring
 * may hold bytes before its mark that the leaver never reads, which must
 * come before its TCP bytes. */
static void leave_plan(int sock, int i, uint64_t plan[4], uint64_t leaver, uint64_t leave_within, bool may_close)
{
    if (i == 0) {
        plan[0] = leaver;
        plan[1] = rnd(leave_within);
        plan[2] = may_close && rnd(2);
        plan[3] = rnd(2) ? rnd(STREAM_BYTES / 2) : UINT64_MAX;
        send_blob(sock, plan, 4 * sizeof *plan);
    } else {
        uint32_t n;
        uint64_t *p = recv_blob(sock, &n);
        CHECK(n, ==, 4 * sizeof *plan);
        memcpy(plan, p, 4 * sizeof *plan);
        free(p);
    }
}

static void leave_loop(struct fabric_engine *e, int sock, int fd, struct fabric_ring *f, int i, const uint64_t plan[4],
                       uint64_t move_at);

static void run_leave(struct fabric_engine *e, int sock, int i, const char *tls)
{
    int fd;
    struct fabric_ring *f;
    start(e, sock, i, tls, rnd(2) ? 4096 : 65536, &fd, &f);
    uint64_t plan[4];
    leave_plan(sock, i, plan, rnd(2), STREAM_BYTES / 2, tls == NULL);
    leave_loop(e, sock, fd, f, i, plan, rnd(4) == 0 ? 0 : rnd(STREAM_BYTES / 2));
}

static void leave_loop(struct fabric_engine *e, int sock, int fd, struct fabric_ring *f, int i, const uint64_t plan[4],
                       uint64_t move_at)
{
    bool leaver = plan[0] == (uint64_t)i, left = false;
    uint64_t sent = 0, got = 0;
    bool shut = false, eof = false;
    static uint8_t out[70000], in[70000];
    double until = now_s() + 60;
    while (!(shut && eof)) {
        bool progress = false;
        if (leaver && !left && got >= plan[1]) {
            CHECK(fabric_stream_leave(&stream), ==, 0);
            left = true;
            if (plan[2]) {   /* its memory gone, as after an exec */
                fabric_ring_close(f);
                f = NULL;
            }
        }
        if (!left && !stream.moved && sent >= move_at) {
            int m = fabric_stream_move(&stream);
            if (m != -ENOTCONN)   /* not before the hello attached it */
                CHECK(m, ==, 0);
        }
        if (!leaver && stream.moved && !stream.back && sent >= plan[3])
            CHECK(fabric_stream_return(&stream), ==, 0);
        if (left && !plan[2])
            fabric_engine_progress(e);   /* a process that keeps its engine drives it */
        if (sent < STREAM_BYTES) {
            size_t n = 1 + rnd(rnd(4) ? 2000 : sizeof out - 1);
            if (n > STREAM_BYTES - sent)
                n = STREAM_BYTES - sent;
            fill(i, sent, out, n);
            struct iovec v = { out, n };
            ssize_t r;
            if (left) {
                r = send(fd, out, n, MSG_DONTWAIT | MSG_NOSIGNAL);
                r = r < 0 ? -errno : r;
            } else {
                r = fabric_stream_send(&stream, &v, 1, true);
            }
            if (r == -EWOULDBLOCK)
                r = -EAGAIN;
            if (r != -EAGAIN) {
                if (r <= 0)
                    FAIL("send: %zd after %llu bytes (broken at %s:%d)", r, (unsigned long long)sent,
                         stream.broken_file ? stream.broken_file : "?", stream.broken_line);
                sent += (uint64_t)r;
                progress = true;
            }
        } else if (!shut) {
            int r = left ? (shutdown(fd, SHUT_WR) == 0 ? 0 : -errno) : fabric_stream_shutdown(&stream);
            if (r != -ENOTCONN) {   /* not before the hello attached it */
                CHECK(r, ==, 0);
                shut = progress = true;
            }
        }
        if (!eof) {
            struct iovec v = next_read(in, sizeof in);
            /* after the leave, the socket's; or, its ring kept, now and
             * then the stream's again, as a call that was asleep in it
             * when another thread left (a fork) comes back to it */
            bool by_socket = left && (plan[2] || rnd(2));
            ssize_t r = by_socket ? recv(fd, in, v.iov_len, MSG_DONTWAIT) : fabric_stream_recv(&stream, &v, 1, false, true);
            if (by_socket && r < 0)
                r = errno == EWOULDBLOCK ? -EAGAIN : -errno;
            if (took(1 - i, r, in, &got, &eof))
                progress = true;
        }
        if (!progress) {
            if (left) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                poll(&p, 1, 1);
            } else {
                nap(e, fd);
            }
        }
        if (now_s() > until)
            FAIL("stuck: sent %llu, got %llu, left %d, leaver %d", (unsigned long long)sent, (unsigned long long)got,
                 left, leaver);
    }
    CHECK(left, ==, leaver);
    if (!leaver)
        CHECK(fabric_stream_settle(&stream, true), ==, 0);   /* as a close would */
    /* an end that stayed on the ring had to notice to send the rest (one
     * that went back on its own may have had nothing left to send again) */
    if (!leaver && stream.moved && plan[3] == UINT64_MAX)
        CHECK(stream.peer_left, ==, 1);
    finish(e, sock, fd, f);
}

/* The server's side of the planned hand-over: the client's blob after its
 * header carries the hello's nonce, then its ring's blob. */
static uint8_t nonce_sent[FABRIC_RING_NONCE];
static int attached;

static int server_attach(void *ctx, const void *blob, size_t len)
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

/* Side 0 the server, which hands its ring's blob and a nonce to the client
 * (as its hello will) and learns the client's only from its own ring; side
 * 1 the client, which moves with the nonce and its ring's blob behind its
 * header (or a wrong nonce: the server must refuse it and its stream
 * break, never take the bytes). */
/* This end's ring, not attached to anything yet, and the stream over fd. */
static struct fabric_ring *unattached_end(struct fabric_engine *e, int fd, size_t ring)
{
    struct fabric_ring *f;
    char why[200] = "";
    if (fabric_ring_open(e, ring, &f, why, sizeof why) != 0)
        FAIL("fabric_ring_open: %s", why);
    fabric_stream_init(&stream, fd, f, e);
    return f;
}

static void run_handover(struct fabric_engine *e, int sock, int i, const char *tls, bool wrong_nonce)
{
    (void)tls;
    int fd = tcp_pair(sock, i);
    struct fabric_ring *f = unattached_end(e, fd, rnd(2) ? 4096 : 65536);
    char why[200] = "";
    uint8_t blob[FABRIC_RING_NONCE + FABRIC_RING_BLOB_MAX];
    uint64_t move_at = rnd(4) == 0 ? UINT64_MAX : rnd(4) == 0 ? 0 : rnd(STREAM_BYTES);
    if (i == 0) {
        for (int k = 0; k < FABRIC_RING_NONCE; k++)
            nonce_sent[k] = (uint8_t)rnd(256);
        ssize_t n = fabric_ring_blob(f, NULL, blob, sizeof blob);
        CHECK(n, >, 0);
        send_blob(sock, blob, (uint32_t)n);
        send_blob(sock, nonce_sent, FABRIC_RING_NONCE);
        stream.on_peer_blob = server_attach;
        stream.ctx = f;
        attached = 0;
        if (wrong_nonce) {
            uint8_t buf[64];
            struct iovec v = { buf, sizeof buf };
            ssize_t r;
            double until = now_s() + 10;
            while ((r = fabric_stream_recv(&stream, &v, 1, false, true)) == -EAGAIN && now_s() < until)
                fabric_engine_progress(e);
            CHECK(r, ==, -EIO);
            CHECK(attached, ==, 0);
            /* the log names the file of the split stream where it broke, and the line */
            CHECK(stream.broken_file != NULL && strstr(stream.broken_file, "fabric_stream") != NULL, ==, 1);
            CHECK(stream.broken_line, >, 0);
        } else {
            exchange(e, fd, i, move_at);
            CHECK(attached, ==, 1);
        }
    } else {
        uint32_t plen, nlen;
        void *peer = recv_blob(sock, &plen);
        if (fabric_ring_attach(f, peer, plen, NULL, why, sizeof why) != 0)
            FAIL("attach to the server's blob: %s", why);
        free(peer);
        uint8_t *nonce = recv_blob(sock, &nlen);   /* what the hello would carry */
        CHECK(nlen, ==, FABRIC_RING_NONCE);
        memcpy(blob, nonce, FABRIC_RING_NONCE);
        free(nonce);
        if (wrong_nonce)
            blob[3] ^= 1;
        ssize_t n = fabric_ring_blob(f, NULL, blob + FABRIC_RING_NONCE, sizeof blob - FABRIC_RING_NONCE);
        CHECK(n, >, 0);
        stream.hand_blob = blob;
        stream.hand_len = FABRIC_RING_NONCE + (size_t)n;
        if (wrong_nonce) {
            CHECK(fabric_stream_move(&stream), ==, 0);
        } else {
            exchange(e, fd, i, move_at);
            CHECK(stream.tcp_sent, <=, (move_at == UINT64_MAX ? STREAM_BYTES : move_at));
        }
    }
    finish(e, sock, fd, f);
}

static void run_blocking(struct fabric_engine *e, int sock, int i, const char *tls)
{
    int fd;
    struct fabric_ring *f;
    start(e, sock, i, tls, 4096, &fd, &f);
    static uint8_t buf[70000];
    /* the writer moves at a random offset; the reader asks it back to TCP
     * in half the runs; each tells the other */
    uint64_t plan[2] = { 1 + rnd(STREAM_BYTES - 1), rnd(2) ? 1 + rnd(STREAM_BYTES / 2) : UINT64_MAX };
    send_blob(sock, &plan[i], sizeof plan[i]);
    uint32_t len;
    uint64_t *theirs = recv_blob(sock, &len);
    CHECK(len, ==, sizeof plan[0]);
    plan[1 - i] = *theirs;
    free(theirs);
    uint64_t move_at = plan[0], ask_at = plan[1];
    /* asked while it still sent through the ring when it moved in the first
     * half (the rest cannot all fit a 4 KiB ring before the reader has
     * nearly all, and it asks in the first half); a writer that moved later
     * may have had everything in the socket's buffers by then */
    bool must_go_back = ask_at != UINT64_MAX && move_at <= STREAM_BYTES / 2;
    if (i == 0) {
        uint64_t sent = 0;
        while (sent < STREAM_BYTES) {
            if (!stream.moved && sent >= move_at)
                CHECK(fabric_stream_move(&stream), ==, 0);
            size_t n = 1 + rnd(sizeof buf - 1);
            if (n > STREAM_BYTES - sent)
                n = STREAM_BYTES - sent;
            if (!stream.moved && n > move_at - sent)
                n = (size_t)(move_at - sent);   /* the move falls between two sends */
            fill(0, sent, buf, n);
            struct iovec v = { buf, n };
            ssize_t r = fabric_stream_send(&stream, &v, 1, false);
            CHECK(r, >, 0);
            if (stream.moved)
                CHECK(r, ==, (ssize_t)n);   /* a blocking send on the ring sends everything */
            sent += (uint64_t)r;
        }
        CHECK(fabric_stream_shutdown(&stream), ==, 0);
        CHECK(fabric_stream_settle(&stream, true), ==, 0);   /* as a close would */
        if (must_go_back)
            CHECK(stream.back, ==, 1);
        if (ask_at == UINT64_MAX)
            CHECK(stream.back, ==, 0);
    } else {   /* the reader: moves first or never (it sends nothing) */
        if (rnd(2))
            CHECK(fabric_stream_move(&stream), ==, 0);
        uint64_t got = 0;
        for (;;) {
            size_t n = 1 + rnd(rnd(2) ? 100 : sizeof buf - 1);
            struct iovec v = { buf, n };
            if (rnd(3) == 0)
                usleep((useconds_t)rnd(300));   /* lets bytes pile up, and the writer wait */
            if (rnd(4) == 0) {
                ssize_t p = fabric_stream_recv(&stream, &v, 1, true, false);
                CHECK(p, >=, 0);
                check_bytes(0, got, buf, (size_t)p);
            }
            ssize_t r = fabric_stream_recv(&stream, &v, 1, false, false);
            CHECK(r, >=, 0);
            if (r == 0)
                break;
            check_bytes(0, got, buf, (size_t)r);
            got += (uint64_t)r;
            if (got >= ask_at && !stream.asked)
                CHECK(fabric_stream_ask(&stream), ==, 0);
        }
        CHECK(got, ==, STREAM_BYTES);
        CHECK(stream.peer_moved, ==, 1);
        CHECK(stream.peer_tcp, <, STREAM_BYTES);   /* the ring carried the rest */
        if (must_go_back)
            CHECK(stream.peer_back, ==, 1);
        if (ask_at == UINT64_MAX)
            CHECK(stream.peer_back, ==, 0);
    }
    /* a wait is ended by a doorbell, not by its bound (100 ms): one that is
     * never rung shows as waits that time out */
    if (stream.sleeps_timed_out > 3 + stream.sleeps / 8)
        FAIL("%llu of %llu waits ended without a doorbell (move at %llu, ask at %llu, back %d, peer back %d, "
             "peer moved %d, peer tcp %llu)", (unsigned long long)stream.sleeps_timed_out,
             (unsigned long long)stream.sleeps, (unsigned long long)move_at, (unsigned long long)ask_at,
             stream.back, stream.peer_back, stream.peer_moved, (unsigned long long)stream.peer_tcp);
    finish(e, sock, fd, f);
}

static const char *phase = "start";
static int run_no;

static void say_phase(int status, void *side_no)
{
    if (status != 0)
        fprintf(stderr, "(side %d, in %s, run %d; TEST_SEED=%llu)\n", (int)(intptr_t)side_no, phase, run_no,
                (unsigned long long)seed);
}

static void run_hello(struct fabric_engine *e, int sock, int i, const char *tls);
static void run_leave_unattached(struct fabric_engine *e, int sock, int i, const char *tls);

static void side(int sock, int i, const void *arg)
{
    const char *tls = arg;
    struct fabric_engine *e = engine_open(tls);
    rng += (uint64_t)i * 7919;
    on_exit(say_phase, (void *)(intptr_t)i);
    for (run_no = 0; run_no < RUNS; run_no++) {
        phase = "exchange";
        run_exchange(e, sock, i, tls);
        phase = "blocking";
        run_blocking(e, sock, i, tls);
        phase = "back";
        run_back(e, sock, i, tls);
        phase = "leave";
        run_leave(e, sock, i, tls);
        phase = "leave_unattached";
        run_leave_unattached(e, sock, i, tls);
        phase = "handover";
        run_handover(e, sock, i, tls, false);
        phase = "hello";
        run_hello(e, sock, i, tls);
    }
    /* the doorbells are the engine's messages: the blocking runs' waits
     * ended by them, and they reached this side's worker */
    CHECK(fabric_engine_bells_heard(e), >, 0);
    fabric_engine_close(e);
}

/* The client's side of the hello: attach to the server's blob, and hand
 * over the nonce and this end's blob when it moves. */
static uint8_t client_hand[FABRIC_RING_NONCE + FABRIC_RING_BLOB_MAX];
static int hellos;

static int client_on_hello(void *ctx, const struct hello *h)
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
static void meet_by_hello(int sock, int i, struct fabric_ring *f)
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

/* The whole meeting over the TCP connection itself: the server's hello
 * first in the stream (naming the client's socket by a tag and cookie the
 * test makes up, as the SYN's option would give them), the client strips it
 * and attaches, then hands its blob over in the server's ring. */
static void run_hello(struct fabric_engine *e, int sock, int i, const char *tls)
{
    (void)tls;
    int fd = tcp_pair(sock, i);
    struct fabric_ring *f = unattached_end(e, fd, rnd(2) ? 4096 : 65536);
    stream.ctx = f;
    uint64_t move_at = rnd(4) == 0 ? UINT64_MAX : rnd(4) == 0 ? 0 : rnd(STREAM_BYTES);
    meet_by_hello(sock, i, f);
    exchange(e, fd, i, move_at);
    CHECK(i == 0 ? attached : hellos, ==, 1);
    finish(e, sock, fd, f);
}

/* A client awaiting a hello from a server that sends none: its first
 * bytes are the program's, also when they start like a hello (the magic's
 * first bytes, then a pause longer than the hold: held, then delivered) or
 * are a whole hello for another socket.  The server here is plain TCP. */
static void run_no_hello(struct fabric_engine *e, int sock, int i, int variant)
{
    int fd = tcp_pair(sock, i);
    uint8_t data[HELLO_MAX + 100];
    size_t n;
    if (variant == 0) {   /* the program's bytes start with the magic's first five */
        memcpy(data, hello_magic, 5);
        n = 5 + 60;
        fill(0, 5, data + 5, n - 5);
    } else if (variant == 2) {   /* plain bytes, sent only once the client tried to leave */
        n = 60;
        fill(0, 0, data, n);
    } else {   /* a whole hello, for another cookie */
        uint8_t nonce[HELLO_NONCE] = { 1 };
        n = hello_build(data, sizeof data, 7, 1234, nonce, "blob", 4);
        CHECK(n, >, 0);
    }
    if (i == 0) {
        if (variant == 2) {
            uint32_t len;
            free(recv_blob(sock, &len));   /* the client tried */
            CHECK(send(fd, data, n, 0), ==, (ssize_t)n);
        } else if (variant == 0) {   /* the prefix, then the rest after the hold */
            CHECK(send(fd, data, 3, 0), ==, 3);
            usleep((useconds_t)(HELLO_HOLD_NS / 1000 + 100000));
            CHECK(send(fd, data + 3, n - 3, 0), ==, (ssize_t)(n - 3));
        } else {
            CHECK(send(fd, data, n, 0), ==, (ssize_t)n);
        }
        shutdown(fd, SHUT_WR);
    } else {
        struct fabric_ring *f = unattached_end(e, fd, 4096);
        stream.await_hello = true;
        stream.hello_tag = 7;
        stream.hello_cookie = 1235;   /* not the hello's */
        stream.on_hello = client_on_hello;
        hellos = 0;
        if (variant == 2) {
            /* nothing came yet: a hello may still come, which a program
             * without shunt would take for data; leaving waits for it a
             * while, then gives up with nothing changed */
            double t0 = now_s();
            CHECK(fabric_stream_leave(&stream), ==, -EAGAIN);
            CHECK(now_s() - t0, >=, HELLO_HOLD_NS / 1e9 * 0.9);
            CHECK(stream.left || !stream.await_hello, ==, 0);
            send_blob(sock, "", 1);
        }
        uint8_t in[sizeof data];
        size_t got = 0;
        for (;;) {
            struct iovec v = { in + got, sizeof in - got };
            ssize_t r = fabric_stream_recv(&stream, &v, 1, false, false);
            CHECK(r, >=, 0);
            if (r == 0)
                break;
            got += (size_t)r;
        }
        CHECK(got, ==, n);
        CHECK(memcmp(in, data, n), ==, 0);
        CHECK(hellos, ==, 0);
        CHECK(stream.tcp_read, ==, n);
        fabric_ring_close(f);
    }
    meet(sock, e);
    close(fd);
}

/* A refused hand-over, then a connection between the same two processes:
 * with UCX's peer error handling on the endpoints, the new endpoint's
 * first put failed (EOPNOTSUPP, on both kinds of lanes), which is why the
 * engine does without it (src/transport/fabric_engine.c). */
static void refusing_side(int sock, int i, const void *arg)
{
    const char *tls = arg;
    struct fabric_engine *e = engine_open(tls);
    rng += (uint64_t)i * 7919;
    on_exit(say_phase, (void *)(intptr_t)i);
    phase = "handover_wrong_nonce";
    run_handover(e, sock, i, tls, true);
    phase = "exchange_after_refusal";
    run_exchange(e, sock, i, tls);
    fabric_engine_close(e);
}

/* The peer's process dies (it exits without a shutdown) after its bytes went
 * into the ring: the reader gets every one of them, then the end TCP shows
 * (EOF, or a reset), never EIO and never a hang, also when giving the space
 * back to the dead peer fails (over TCP lanes). */
#define DYING_BYTES (40u * 1024)

static void dying_side(int sock, int i, const void *arg)
{
    const char *tls = arg;
    struct fabric_engine *e = engine_open(tls);
    on_exit(say_phase, (void *)(intptr_t)i);
    phase = "peer_dies";
    int fd;
    struct fabric_ring *f;
    start(e, sock, i, tls, 65536, &fd, &f);
    meet(sock, e);   /* both attached before either goes on */
    static uint8_t buf[DYING_BYTES];
    if (i == 0) {
        CHECK(fabric_stream_move(&stream), ==, 0);
        fill(0, 0, buf, sizeof buf);
        struct iovec v = { buf, sizeof buf };
        CHECK(fabric_stream_send(&stream, &v, 1, false), ==, (ssize_t)sizeof buf);   /* fits the ring */
        CHECK(fabric_ring_flush(f), ==, 0);
        _exit(0);   /* no shutdown, no close: as a process killed */
    }
    /* the other side's process is gone (its end of the socketpair closes);
     * meanwhile this side drives its worker, as a waiting end does */
    struct pollfd p = { .fd = sock, .events = POLLIN };
    while (poll(&p, 1, 1) == 0)
        fabric_engine_progress(e);
    char c;
    CHECK(read(sock, &c, 1), ==, 0);
    alarm(30);
    uint64_t got = 0;
    ssize_t r;
    for (;;) {
        struct iovec v = { buf, 1 + rnd(4096) };
        r = fabric_stream_recv(&stream, &v, 1, false, false);
        if (r <= 0)
            break;
        check_bytes(0, got, buf, (size_t)r);
        got += (uint64_t)r;
    }
    alarm(0);
    CHECK(got, ==, DYING_BYTES);
    CHECK(r == 0 || r == -ECONNRESET, ==, 1);
    fabric_ring_close(f);
    close(fd);
    fabric_engine_close(e);
}

static void no_hello_side(int sock, int i, const void *arg)
{
    struct fabric_engine *e = engine_open(arg);
    on_exit(say_phase, (void *)(intptr_t)i);
    phase = "no_hello_prefix";
    run_no_hello(e, sock, i, 0);
    phase = "no_hello_other_cookie";
    run_no_hello(e, sock, i, 1);
    phase = "leave_before_hello";
    run_no_hello(e, sock, i, 2);
    fabric_engine_close(e);
}

/* The server leaves soon after its hello, before or after the client's
 * move put the client's header and blob into its ring: attached by them
 * and leaving as usual, or leaving unattached, which the client's move
 * must notice (fabric_ring_peer_owner_left) and stay on TCP. */
static void run_leave_unattached(struct fabric_engine *e, int sock, int i, const char *tls)
{
    (void)tls;
    int fd = tcp_pair(sock, i);
    struct fabric_ring *f = unattached_end(e, fd, rnd(2) ? 4096 : 65536);
    stream.ctx = f;
    meet_by_hello(sock, i, f);
    uint64_t plan[4];
    leave_plan(sock, i, plan, 0, 3000, false);
    leave_loop(e, sock, fd, f, i, plan, rnd(2) ? 0 : rnd(3000));
}

/* A server that refuses the client's hand-over (its process not proven,
 * fabric_proof.h): nothing is attached; the client, which moved, finds the
 * refusal in the server's word, says it saw it and sends again by TCP what
 * it had put into the ring; or, when the client's process is gone before it
 * looked (dies), the server reads the ring after the client's TCP bytes.
 * Both directions, every byte checked, then EOF both ways. */
#define REFUSED_DYING 2000u
static int refusals;

static int refuse_blob(void *ctx, const void *blob, size_t len)
{
    (void)ctx;
    (void)blob;
    (void)len;
    refusals++;
    return 1;
}

static void run_refused(struct fabric_engine *e, int sock, int i, const char *tls, bool dies)
{
    (void)tls;
    int fd = tcp_pair(sock, i);
    struct fabric_ring *f = unattached_end(e, fd, rnd(2) ? 4096 : 65536);
    stream.ctx = f;
    meet_by_hello(sock, i, f);
    static uint8_t out[70000], in[70000];
    uint64_t sent = 0, got = 0;
    uint64_t to_send = i == 1 && dies ? REFUSED_DYING : STREAM_BYTES, to_get = i == 0 && dies ? REFUSED_DYING
                                                                                          : STREAM_BYTES;
    bool shut = false, eof = false;
    if (i == 0) {
        stream.on_peer_blob = refuse_blob;
        refusals = 0;
        if (dies) {   /* the client's bytes are in the ring, and its process gone, before this end looks */
            struct pollfd p = { .fd = sock, .events = POLLIN };
            while (poll(&p, 1, 1) == 0)
                fabric_engine_progress(e);   /* as a waiting end under shunt drives its worker */
            uint32_t n;
            free(recv_blob(sock, &n));
        }
    } else if (dies) {
        double until = now_s() + 10;
        while (!hellos && now_s() < until) {   /* its hello taken off: attached */
            struct iovec v = { in, 1 };
            CHECK(fabric_stream_recv(&stream, &v, 1, true, true), ==, -EAGAIN);
            nap(e, fd);
        }
        int m = fabric_stream_move(&stream);
        if (m != 0)
            FAIL("move: %d (broken at %s:%d)", m, stream.broken_file ? stream.broken_file : "?", stream.broken_line);
        fill(1, 0, out, REFUSED_DYING);
        struct iovec v = { out, REFUSED_DYING };
        CHECK(fabric_stream_send(&stream, &v, 1, true), ==, (ssize_t)REFUSED_DYING);   /* fits the ring */
        CHECK(fabric_ring_flush(f), ==, 0);
        send_blob(sock, "w", 1);
        _exit(0);   /* as a process killed: nothing more */
    }
    double until = now_s() + 60;
    while (!(shut && eof)) {
        bool progress = false;
        if (i == 1 && !stream.moved && hellos)
            CHECK(fabric_stream_move(&stream), ==, 0);
        if (sent < to_send && !(i == 0 && dies)) {
            size_t n = 1 + rnd(rnd(4) ? 2000 : sizeof out - 1);
            if (n > to_send - sent)
                n = (size_t)(to_send - sent);
            fill(i, sent, out, n);
            struct iovec v = { out, n };
            ssize_t r = fabric_stream_send(&stream, &v, 1, true);
            if (r != -EAGAIN) {
                CHECK(r, >, 0);
                sent += (uint64_t)r;
                progress = true;
            }
        } else if (!shut) {
            int r = fabric_stream_shutdown(&stream);
            if (r == -ENOTCONN && fabric_stream_return(&stream) == 0)   /* never attached: TCP's FIN */
                r = fabric_stream_shutdown(&stream);
            CHECK(r, ==, 0);
            shut = progress = true;
        }
        if (!eof) {
            struct iovec v = next_read(in, sizeof in);
            ssize_t r = fabric_stream_recv(&stream, &v, 1, false, true);
            if (r == 0) {
                CHECK(got, ==, to_get);
                eof = progress = true;
            } else if (r > 0) {
                check_bytes(1 - i, got, in, (size_t)r);
                got += (uint64_t)r;
                progress = true;
            } else if (r != -EAGAIN) {
                FAIL("recv: %zd after %llu bytes (broken at %s:%d)", r, (unsigned long long)got,
                     stream.broken_file ? stream.broken_file : "?", stream.broken_line);
            }
        }
        if (!progress)
            nap(e, fd);
        if (now_s() > until)
            FAIL("stuck: sent %llu, got %llu, moved %d, refused %d/%d", (unsigned long long)sent,
                 (unsigned long long)got, stream.moved, stream.refused, stream.peer_refused);
    }
    CHECK(fabric_stream_settle(&stream, true), ==, 0);
    if (i == 0) {
        CHECK(refusals, ==, 1);
        CHECK(stream.refused, ==, 1);
        CHECK(stream.moved, ==, 0);   /* nothing attached to move onto */
    } else {
        CHECK(stream.moved, ==, 1);
        CHECK(stream.peer_refused, ==, 1);   /* it saw the refusal, and sent its ring's bytes again */
    }
    if (dies) {   /* the peer is gone: nothing to meet */
        fabric_ring_close(f);
        close(fd);
        return;
    }
    finish(e, sock, fd, f);
}

static void refused_side(int sock, int i, const void *arg)
{
    const char *tls = arg;
    struct fabric_engine *e = engine_open(tls);
    rng += (uint64_t)i * 7919;
    on_exit(say_phase, (void *)(intptr_t)i);
    for (run_no = 0; run_no < RUNS / 2; run_no++) {
        phase = "refused";
        run_refused(e, sock, i, tls, false);
    }
    phase = "refused_client_dies";
    run_refused(e, sock, i, tls, true);
    fabric_engine_close(e);
}

int main(void)
{
    shunt_real_resolve();   /* the stream and the engine call libc through the table */
    children_output_open("test_fabric_stream");
    const char *given = getenv("TEST_SEED");
    seed = given ? strtoull(given, NULL, 10) : (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
    rng ^= seed * 0x9E3779B97F4A7C15ull;
    if (!rng)
        rng = 1;
    run_sides(side, NULL);
    run_sides(side, "tcp");
    run_sides(no_hello_side, NULL);
    run_sides(dying_side, NULL);
    run_sides(dying_side, "tcp");
    run_sides(refusing_side, NULL);
    run_sides(refusing_side, "tcp");
    run_sides(refused_side, NULL);
    run_sides(refused_side, "tcp");
    PASS();
}
