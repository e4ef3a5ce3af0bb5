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
 *
 * The leave runs (an end leaves the ring after its attach or before it,
 * or the server refuses the hand-over) are test_fabric_stream_leave.c;
 * what both share is fabric_stream_fixture.h.
 */
#include "fabric_stream_fixture.h"

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

/* Side 0 the server, which hands its ring's blob and a nonce to the client
 * (as its hello will) and learns the client's only from its own ring; side
 * 1 the client, which moves with the nonce and its ring's blob behind its
 * header (or a wrong nonce: the server must refuse it and its stream
 * break, never take the bytes). */
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

static void run_hello(struct fabric_engine *e, int sock, int i, const char *tls);

static void side(int sock, int i, const void *arg)
{
    const char *tls = arg;
    struct fabric_engine *e = side_begin(tls, i);
    for (run_no = 0; run_no < RUNS; run_no++) {
        phase = "exchange";
        run_exchange(e, sock, i, tls);
        phase = "blocking";
        run_blocking(e, sock, i, tls);
        phase = "back";
        run_back(e, sock, i, tls);
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
    struct fabric_engine *e = side_begin(tls, i);
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

int main(void)
{
    shunt_real_resolve();   /* the stream and the engine call libc through the table */
    children_output_open("test_fabric_stream");
    seed_rng();
    run_sides(side, NULL);
    run_sides(side, "tcp");
    run_sides(no_hello_side, NULL);
    run_sides(dying_side, NULL);
    run_sides(dying_side, "tcp");
    run_sides(refusing_side, NULL);
    run_sides(refusing_side, "tcp");
    PASS();
}
