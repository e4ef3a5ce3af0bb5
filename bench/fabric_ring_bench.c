/*
 * fabric_ring_bench: shunt's fabric ring (src/transport/fabric_ring.c) on
 * UCX's shared-memory lanes and on its TCP lanes, against kernel TCP over
 * loopback, in one run (docs/benchmarks.md, "The fabric ring against
 * kernel TCP").  Two processes each (forked before either loads UCX),
 * rings of 1 MiB a direction (SHUNT_RING_SIZE's default); UCX is loaded
 * with dlopen, as libshunt.so loads it.
 *
 *   fabric_ring_bench [SECONDS_PER_TEST] [ROUNDS] [KIND]   (default 0.5, 3, all)
 *
 * KIND, one of the names below, runs that one alone (for strace or perf).
 *
 * The fabric stream (src/core/conn/fabric_stream.c) is measured too: the
 * ring behind a TCP connection, both ends moved at once, its calls
 * blocking (a reader with nothing to read says it sleeps and sleeps on the
 * engine's fd, so every message costs a doorbell, an active message),
 * blocking after a spin of up to 50 us (SHUNT_SPIN_US's default), and
 * nonblocking in a loop (a reader that never sleeps is never rung).
 *
 * Per transport:
 *   one_way  64 B ping-pong, half the mean round trip over SECONDS;
 *   stream   64 KiB writes for SECONDS, the receiver's bytes over the time
 *            from its first byte to EOF (FIN, or the kernel's shutdown).
 * The bare ring is polled (its wake-ups are the stream's), so kernel TCP
 * is measured both blocking (what programs do) and polled (MSG_DONTWAIT in
 * a loop: the kernel's floor), and a Unix socketpair blocking (what a user
 * would otherwise pick on one host).
 * Rounds alternate the order of the transports; ratios are taken within
 * each round (other work on the machine moves all of them), then the
 * median over rounds is printed.  Prints a line per transport and round,
 * then the medians and the ratios: how many times faster one way, and how
 * many times the stream's bytes, against kernel TCP blocking (K) and
 * polled (P).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "fabric_fixture.h"
#include "base/real.h"
#include "core/conn/fabric_stream.h"

#define RING (1u << 20)
#define MSG 64
#define CHUNK (64u * 1024)
#define MAX_ROUNDS 15

enum kind { RING_SHM, RING_TCP, KERNEL, KERNEL_POLLED, UNIX_SOCK, STREAM_SHM, STREAM_SHM_SPIN, STREAM_SHM_POLLED,
             NKINDS };
static const char *const kind_names[] = { "ring_shm_lanes", "ring_tcp_lanes", "kernel_tcp", "kernel_tcp_polled",
                                          "unix_socket", "stream_shm_lanes", "stream_shm_spin", "stream_shm_polled" };

struct result {
    double one_way_ns;
    double mbytes_s;
    char lanes[64];
};

struct spec {
    enum kind kind;
    bool stream;
    double secs;
    int listener;
    int upair[2];         /* UNIX_SOCK: a socketpair, one end a side */
    struct result *out;   /* shared with the parent */
};

/* One end of the connection under test: the ring, a socket, or the
 * fabric stream (the ring behind a TCP connection). */
struct conn {
    enum kind kind;
    struct fabric_ring *f;
    int fd;
    bool stream;
    struct fabric_stream st;
};

/* Writes all n bytes; false if the peer went away. */
static bool put_all(struct conn *c, const unsigned char *p, size_t n)
{
    while (n) {
        ssize_t w;
        if (c->stream) {
            struct iovec v = { (void *)p, n };
            w = fabric_stream_send(&c->st, &v, 1, c->kind == STREAM_SHM_POLLED);
            if (w == -EAGAIN)
                continue;
        } else if (c->f) {
            struct iovec v = { (void *)p, n };
            w = fabric_ring_write(c->f, &v, 1, 0, NULL);
            if (w == -EAGAIN)
                continue;
        } else
            w = send(c->fd, p, n, 0);
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Reads up to n bytes (all n if all), polling or blocking as the kind
 * does: the bytes, or 0 at EOF. */
static size_t get(struct conn *c, unsigned char *p, size_t n, bool all)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r;
        if (c->stream) {
            struct iovec v = { p + got, n - got };
            r = fabric_stream_recv(&c->st, &v, 1, false, c->kind == STREAM_SHM_POLLED);
            if (r == -EAGAIN)
                continue;
        } else if (c->f) {
            struct iovec v = { p + got, n - got };
            r = fabric_ring_read(c->f, &v, 1, false, NULL);
            if (r == -EAGAIN)
                continue;
        } else {
            r = recv(c->fd, p + got, n - got, c->kind == KERNEL_POLLED ? MSG_DONTWAIT : 0);
            if (r < 0 && errno == EAGAIN)
                continue;
        }
        CHECK(r, >=, 0);
        if (r == 0)
            break;
        got += (size_t)r;
        if (!all)
            break;
    }
    return got;
}

static void ping_pong(struct conn *c, int i, const struct spec *s)
{
    unsigned char msg[MSG] = { 0 };
    if (i == 1) {   /* echoes until a message says stop */
        while (get(c, msg, MSG, true) == MSG && put_all(c, msg, MSG) && msg[0] == 0)
            ;
        return;
    }
    for (int k = 0; k < 200; k++)   /* warm up */
        CHECK(put_all(c, msg, MSG) && get(c, msg, MSG, true) == MSG, ==, 1);
    double t0 = now_s(), t;
    uint64_t trips = 0;
    do {
        for (int k = 0; k < 100; k++, trips++)
            CHECK(put_all(c, msg, MSG) && get(c, msg, MSG, true) == MSG, ==, 1);
    } while ((t = now_s()) - t0 < s->secs);
    s->out->one_way_ns = (t - t0) / (double)trips / 2 * 1e9;
    msg[0] = 1;
    CHECK(put_all(c, msg, MSG) && get(c, msg, MSG, true) == MSG, ==, 1);
}

static void stream(struct conn *c, int i, const struct spec *s)
{
    static unsigned char buf[CHUNK];
    if (i == 0) {
        double t0 = now_s();
        while (now_s() - t0 < s->secs)
            CHECK(put_all(c, buf, CHUNK), ==, 1);
        if (c->stream) {
            CHECK(fabric_stream_shutdown(&c->st), ==, 0);
            CHECK(get(c, buf, 1, true), ==, 0);
        } else if (c->f) {
            CHECK(fabric_ring_shutdown(c->f), ==, 0);
            CHECK(get(c, buf, 1, true), ==, 0);   /* the peer's FIN: it read everything */
        } else {
            CHECK(shutdown(c->fd, SHUT_WR), ==, 0);
            CHECK(get(c, buf, 1, true), ==, 0);
        }
        return;
    }
    uint64_t total = get(c, buf, CHUNK, false);
    double t0 = now_s();
    size_t n;
    while ((n = get(c, buf, CHUNK, false)) > 0)
        total += n;
    s->out->mbytes_s = (double)total / (now_s() - t0) / 1e6;
    if (c->stream)
        CHECK(fabric_stream_shutdown(&c->st), ==, 0);
    else if (c->f)
        CHECK(fabric_ring_shutdown(c->f), ==, 0);
    else
        CHECK(shutdown(c->fd, SHUT_WR), ==, 0);
}

static void side(int sock, int i, const void *arg)
{
    const struct spec *s = arg;
    struct conn c = { .kind = s->kind, .fd = -1, .stream = s->kind >= STREAM_SHM };
    struct fabric_engine *e = NULL;
    if (s->kind == RING_SHM || s->kind == RING_TCP) {
        e = engine_open(s->kind == RING_TCP ? "tcp" : NULL);
        c.f = ring_connect(e, sock, RING, NULL, NULL, s->kind == RING_TCP ? "tcp" : NULL);
        if (i == 0)
            fabric_ring_lanes(c.f, s->out->lanes, sizeof s->out->lanes);
    }
    if (s->kind == UNIX_SOCK) {
        c.fd = s->upair[i];
        close(s->upair[1 - i]);
        if (i == 0)
            snprintf(s->out->lanes, sizeof s->out->lanes, "%s", "unix");
    } else if (s->kind != RING_SHM && s->kind != RING_TCP) {
        if (i == 0)
            c.fd = accept(s->listener, NULL, NULL);
        else {
            struct sockaddr_in a;
            socklen_t alen = sizeof a;
            CHECK(getsockname(s->listener, (struct sockaddr *)&a, &alen), ==, 0);
            c.fd = socket(AF_INET, SOCK_STREAM, 0);
            CHECK(connect(c.fd, (struct sockaddr *)&a, alen), ==, 0);
        }
        CHECK(c.fd, >=, 0);
        int one = 1;
        CHECK(setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one), ==, 0);
        if (i == 0)
            snprintf(s->out->lanes, sizeof s->out->lanes, "%s", "loopback");
    }
    if (c.stream) {   /* both ends move at once: no TCP bytes before the ring */
        e = engine_open(NULL);
        c.f = ring_connect(e, sock, RING, NULL, NULL, NULL);
        if (i == 0)
            fabric_ring_lanes(c.f, s->out->lanes, sizeof s->out->lanes);
        fabric_stream_init(&c.st, c.fd, c.f, e);
        if (s->kind == STREAM_SHM_SPIN)
            c.st.spin_ns = 50000;   /* SHUNT_SPIN_US's default */
        CHECK(fabric_stream_move(&c.st), ==, 0);
    }
    if (s->stream)
        stream(&c, i, s);
    else
        ping_pong(&c, i, s);
    if (c.f) {
        fabric_ring_flush(c.f);
        meet(sock, e);   /* neither end closes while the other may still drive a put to it */
        fabric_ring_close(c.f);
        fabric_engine_close(e);
    }
    if (c.fd >= 0)
        close(c.fd);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 0.5;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    const char *only = argc > 3 ? argv[3] : NULL;
    if (secs <= 0 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: fabric_ring_bench [SECONDS_PER_TEST] [ROUNDS (1..%d)]\n", MAX_ROUNDS);
        return 2;
    }
    shunt_real_resolve();   /* what libshunt.so's start-up does: the engine calls libc through the table */
    children_output_open("fabric_ring_bench");
    struct result *res = mmap(NULL, sizeof(struct result) * NKINDS * MAX_ROUNDS, PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(res != MAP_FAILED, ==, 1);
    int listener = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    CHECK(bind(listener, (struct sockaddr *)&a, sizeof a), ==, 0);
    CHECK(listen(listener, 8), ==, 0);
    for (int r = 0; r < rounds; r++) {
        for (int j = 0; j < NKINDS; j++) {
            enum kind k = (enum kind)(r % 2 ? NKINDS - 1 - j : j);   /* every other round backwards */
            if (only && strcmp(only, kind_names[k]) != 0)
                continue;
            struct result *out = &res[r * NKINDS + k];
            for (int st = 0; st < 2; st++) {
                struct spec s = { k, st == 1, secs, listener, { -1, -1 }, out };
                if (k == UNIX_SOCK)
                    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, s.upair), ==, 0);
                run_sides(side, &s);
                if (k == UNIX_SOCK) {
                    close(s.upair[0]);
                    close(s.upair[1]);
                }
            }
            printf("round %d %-18s lanes=%-24s one_way_64B_ns=%.0f stream_64KiB_MB_s=%.0f\n", r + 1,
                   kind_names[k], out->lanes, out->one_way_ns, out->mbytes_s);
            fflush(stdout);
        }
    }
    /* per round: how many times faster one way, how many times the stream,
     * against kernel TCP blocking (K) and polled (P) */
    double lat[NKINDS][MAX_ROUNDS], bw[NKINDS][MAX_ROUNDS], ratio[6][NKINDS][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (int k = 0; k < NKINDS; k++) {
            const struct result *x = &res[r * NKINDS + k], *kb = &res[r * NKINDS + KERNEL],
                                *kp = &res[r * NKINDS + KERNEL_POLLED], *u = &res[r * NKINDS + UNIX_SOCK];
            lat[k][r] = x->one_way_ns;
            bw[k][r] = x->mbytes_s;
            ratio[0][k][r] = kb->one_way_ns / x->one_way_ns;
            ratio[1][k][r] = x->mbytes_s / kb->mbytes_s;
            ratio[2][k][r] = kp->one_way_ns / x->one_way_ns;
            ratio[3][k][r] = x->mbytes_s / kp->mbytes_s;
            ratio[4][k][r] = u->one_way_ns / x->one_way_ns;
            ratio[5][k][r] = x->mbytes_s / u->mbytes_s;
        }
    for (int k = 0; k < NKINDS; k++)
        if (!only)
            printf("median %-18s one_way_64B_ns=%.0f stream_64KiB_MB_s=%.0f  faster one way: x%.2f (K) x%.2f (P) "
               "x%.2f (U)  stream: x%.2f (K) x%.2f (P) x%.2f (U)\n",
               kind_names[k], median(lat[k], rounds), median(bw[k], rounds), median(ratio[0][k], rounds),
               median(ratio[2][k], rounds), median(ratio[4][k], rounds), median(ratio[1][k], rounds),
               median(ratio[3][k], rounds), median(ratio[5][k], rounds));
    printf("(K: against kernel_tcp, blocking; P: against kernel_tcp_polled; U: against unix_socket, blocking; "
           "medians of each round's ratio)\n");
    return 0;
}
