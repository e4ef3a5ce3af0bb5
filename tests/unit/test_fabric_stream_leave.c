/*
 * test_fabric_stream_leave.c: unit test of the fabric stream
 * (src/core/conn/fabric_stream.c) when an end leaves the ring, between two
 * processes as in test_fabric_stream.c (what both share is
 * fabric_stream_fixture.h): an end leaves for plain TCP after its attach
 * (leave), the server soon after its hello, attached or not (leave
 * unattached), or the server refuses the client's hand-over (refused).
 * The other end must notice and send again by TCP what the leaver did not
 * read from the ring; every byte in both directions, then EOF.
 */
#include "fabric_stream_fixture.h"

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
 * come before its TCP bytes; and which side takes back what its reader has
 * not read (fabric_stream_take_back, as a send to a stalled reader does;
 * 2: neither), when (its bytes sent): before, after or while the leaver
 * leaves, which must agree on where the bytes sent again start; and
 * whether that take must be made (a run where nobody leaves: run_take). */
#define PLAN_N 7
static void leave_plan(int sock, int i, uint64_t plan[PLAN_N], uint64_t leaver, uint64_t leave_within, bool may_close)
{
    if (i == 0) {
        plan[0] = leaver;
        plan[1] = rnd(leave_within);
        plan[2] = may_close && rnd(2);
        plan[3] = rnd(2) ? rnd(STREAM_BYTES / 2) : UINT64_MAX;
        plan[4] = rnd(3);   /* 2: nobody takes back */
        plan[5] = rnd(STREAM_BYTES / 2);
        plan[6] = 0;
        send_blob(sock, plan, PLAN_N * sizeof *plan);
    } else {
        uint32_t n;
        uint64_t *p = recv_blob(sock, &n);
        CHECK(n, ==, PLAN_N * sizeof *plan);
        memcpy(plan, p, PLAN_N * sizeof *plan);
        free(p);
    }
}

static void leave_loop(struct fabric_engine *e, int sock, int fd, struct fabric_ring *f, int i, const uint64_t plan[PLAN_N],
                       uint64_t move_at);

static void run_leave(struct fabric_engine *e, int sock, int i, const char *tls)
{
    int fd;
    struct fabric_ring *f;
    start(e, sock, i, tls, rnd(2) ? 4096 : 65536, &fd, &f);
    uint64_t plan[PLAN_N];
    leave_plan(sock, i, plan, rnd(2), STREAM_BYTES / 2, tls == NULL);
    leave_loop(e, sock, fd, f, i, plan, rnd(4) == 0 ? 0 : rnd(STREAM_BYTES / 2));
}

static void leave_loop(struct fabric_engine *e, int sock, int fd, struct fabric_ring *f, int i, const uint64_t plan[PLAN_N],
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
        if (plan[4] == (uint64_t)i && !left && !shut && stream.moved && !stream.took_back && !stream.peer_left &&
            sent >= plan[5]) {
            int t = fabric_stream_take_back(&stream);
            if (t != -EPIPE || plan[6])   /* (the peer left first: served as a leave) */
                CHECK(t, ==, 0);
        }
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
    if (plan[6] && plan[4] == (uint64_t)i)
        CHECK(stream.took_back, ==, 1);
    if (!leaver)
        CHECK(fabric_stream_settle(&stream, true), ==, 0);   /* as a close would */
    /* an end that stayed on the ring had to notice to send the rest (one
     * that went back on its own may have had nothing left to send again) */
    if (!leaver && plan[0] != 2 && stream.moved && plan[3] == UINT64_MAX && !stream.took_back)
        CHECK(stream.peer_left, ==, 1);
    finish(e, sock, fd, f);
}

/* One side takes back what its reader has not read, at a random point,
 * the reader reading on at its own pace (it may have read past where the
 * writer took back from: it drops those bytes from the socket); nobody
 * leaves.  Every byte in both directions, then EOF. */
static void run_take(struct fabric_engine *e, int sock, int i, const char *tls)
{
    int fd;
    struct fabric_ring *f;
    start(e, sock, i, tls, rnd(2) ? 4096 : 65536, &fd, &f);
    uint64_t plan[PLAN_N] = { 2, 0, 0, UINT64_MAX, 0, 0, 1 };
    if (i == 0) {
        plan[4] = rnd(2);
        plan[5] = rnd(STREAM_BYTES / 2);
        send_blob(sock, plan, sizeof plan);
    } else {
        uint32_t n;
        uint64_t *p = recv_blob(sock, &n);
        CHECK(n, ==, sizeof plan);
        memcpy(plan, p, sizeof plan);
        free(p);
    }
    leave_loop(e, sock, fd, f, i, plan, rnd(4) == 0 ? 0 : rnd(STREAM_BYTES / 4));
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
    uint64_t plan[PLAN_N];
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
        } else if (!shut && (i == 0 || stream.moved)) {
            /* the client's end comes after its move: a client that sent all
             * and shut before the hello came (a server slow to send it) had
             * nothing to hand over, and the server nothing to refuse */
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
    struct fabric_engine *e = side_begin(tls, i);
    for (run_no = 0; run_no < RUNS / 2; run_no++) {
        phase = "refused";
        run_refused(e, sock, i, tls, false);
    }
    phase = "refused_client_dies";
    run_refused(e, sock, i, tls, true);
    fabric_engine_close(e);
}

static void side(int sock, int i, const void *arg)
{
    const char *tls = arg;
    struct fabric_engine *e = side_begin(tls, i);
    for (run_no = 0; run_no < RUNS; run_no++) {
        phase = "leave";
        run_leave(e, sock, i, tls);
        phase = "leave_unattached";
        run_leave_unattached(e, sock, i, tls);
        phase = "take";
        run_take(e, sock, i, tls);
    }
    fabric_engine_close(e);
}

int main(void)
{
    shunt_real_resolve();   /* the stream and the engine call libc through the table */
    children_output_open("test_fabric_stream_leave");
    seed_rng();
    run_sides(side, NULL);
    run_sides(side, "tcp");
    run_sides(refused_side, NULL);
    run_sides(refused_side, "tcp");
    PASS();
}
