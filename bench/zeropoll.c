/*
 * zeropoll: the zero-timeout polling ping-pong of `shunt bench` (issue 18,
 * item 4b).  A progress loop as MPI runtimes and libevent's poll backend
 * run it: two processes of one host (this one and a forked child), each
 * watching a set of three fds: its end of the connection under test, a
 * pipe and a Unix socket that stay idle.  Each loops a zero-timeout wait
 * over the set until the connection is readable, reads 1 byte and sends
 * 1 byte back.  The waits are poll, epoll_wait and select, one after the
 * other, and then none: a loop of non-blocking recv (MSG_PEEK) on the
 * connection alone, as a program that reads instead of polling makes.  Owns the exchange and its timing; bench/shuntbench.py owns the
 * runs, the statistics and the reports.
 *
 *   zeropoll [-t tcp|unix] [-n ROUND_TRIPS] [-d SECONDS] [-e EMPTY_BATCHES]
 *
 *   -t tcp    the connection is TCP over 127.0.0.1 (under shunt: accelerated)
 *   -t unix   the connection is a Unix domain socket pair
 *
 * Prints, per wait,
 *   zpoll wait=W one_way_ns=O empty_ns=E skipped=K
 * O: the median over -n round trips (after 1000 unmeasured; fewer if they
 * take more than -d seconds, default 2: a machine with more busy threads
 * than CPUs makes every round trip wait for a scheduler slice) of half the
 * round trip; E: the median over -e batches of 1000 zero-timeout waits
 * that find nothing ready (the peer is blocked in read meanwhile), per
 * wait; K: how many of those empty waits left the kernel out (shunt's
 * "os_polls_skipped" counter; -1 without shunt).  Then
 *   result transport=T libshunt=yes|no accel_parent=A accel_child=B
 * as bench/pingpong.c prints it (A, B: what shunt_fd_accelerated() said
 * on each end, -1 without libshunt).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

#define WARMUP 1000
#define BATCH 1000

enum wait_kind { W_POLL, W_EPOLL, W_SELECT, W_RECV, W_COUNT };
static const char *const wait_name[W_COUNT] = { "poll", "epoll", "select", "recv" };

/* One process's set: the connection, an idle pipe, an idle Unix socket. */
struct set {
    int conn, pipe_rd, unix_end;
    int ep;
};

static long long skipped(int fd)
{
    long long (*get)(int, const char *) = (long long (*)(int, const char *))dlsym(RTLD_DEFAULT, "shunt_fd_counter");
    return get ? get(fd, "os_polls_skipped") : -1;
}

static int accelerated(int fd)
{
    int (*query)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
    return query ? query(fd) : -1;
}

/* One zero-timeout wait over the set: whether the connection is readable. */
static int conn_ready(const struct set *s, enum wait_kind w)
{
    switch (w) {
    case W_POLL: {
        struct pollfd p[3] = { { .fd = s->conn, .events = POLLIN }, { .fd = s->pipe_rd, .events = POLLIN },
                               { .fd = s->unix_end, .events = POLLIN } };
        if (poll(p, 3, 0) < 0)
            die("poll");
        return (p[0].revents & POLLIN) != 0;
    }
    case W_EPOLL: {
        struct epoll_event ev[3];
        int n = epoll_wait(s->ep, ev, 3, 0);
        if (n < 0)
            die("epoll_wait");
        for (int i = 0; i < n; i++)
            if (ev[i].data.fd == s->conn)
                return 1;
        return 0;
    }
    case W_RECV: {   /* no wait at all: a non-blocking look at the connection itself */
        char c;
        ssize_t n = recv(s->conn, &c, 1, MSG_DONTWAIT | MSG_PEEK);
        if (n < 0 && errno != EAGAIN)
            die("recv");
        return n > 0;
    }
    default: {
        fd_set r;
        struct timeval tv = { 0, 0 };
        FD_ZERO(&r);
        FD_SET(s->conn, &r);
        FD_SET(s->pipe_rd, &r);
        FD_SET(s->unix_end, &r);
        int hi = s->conn > s->pipe_rd ? s->conn : s->pipe_rd;
        hi = hi > s->unix_end ? hi : s->unix_end;
        if (select(hi + 1, &r, NULL, NULL, &tv) < 0)
            die("select");
        return FD_ISSET(s->conn, &r);
    }
    }
}

static void set_epoll(struct set *s)
{
    s->ep = epoll_create1(0);
    if (s->ep < 0)
        die("epoll_create1");
    int fds[3] = { s->conn, s->pipe_rd, s->unix_end };
    for (int i = 0; i < 3; i++) {
        struct epoll_event ev = { .events = EPOLLIN, .data.fd = fds[i] };
        if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fds[i], &ev) < 0)
            die("epoll_ctl");
    }
}

static void send_byte(int fd, char c)
{
    if (write(fd, &c, 1) != 1)
        die("write");
}

static char recv_byte(int fd)
{
    char c;
    if (read(fd, &c, 1) != 1)
        die("read");
    return c;
}

/* Polls until the connection is readable, then reads its byte. */
static char poll_recv(const struct set *s, enum wait_kind w)
{
    while (!conn_ready(s, w))
        ;
    return recv_byte(s->conn);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    return v[n / 2];
}

/* The child: answers every byte by polling until an 'e', then blocks in
 * read while the parent times its empty waits, until an 'n'. */
static void child(struct set *s)
{
    set_epoll(s);
    for (int w = 0; w < W_COUNT; w++) {
        char c;
        while ((c = poll_recv(s, (enum wait_kind)w)) != 'e')
            send_byte(s->conn, c);
        if (recv_byte(s->conn) != 'n')
            exit(1);
    }
    int a = accelerated(s->conn);
    if (write(s->conn, &a, sizeof a) != (ssize_t)sizeof a)
        die("write");
}

static void parent(struct set *s, long rounds, long batches, double seconds)
{
    uint64_t *rtt = malloc((size_t)rounds * sizeof *rtt);
    uint64_t *per_call = malloc((size_t)batches * sizeof *per_call);
    if (!rtt || !per_call)
        die("malloc");
    set_epoll(s);
    for (int w = 0; w < W_COUNT; w++) {
        uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
        long done = 0;
        for (long i = 0; i < rounds + WARMUP && (done == 0 || now_ns() < end); i++) {
            uint64_t t0 = now_ns();
            send_byte(s->conn, 'p');
            poll_recv(s, (enum wait_kind)w);
            if (i >= WARMUP)
                rtt[done++] = now_ns() - t0;
        }
        send_byte(s->conn, 'e');
        long long skipped_before = skipped(s->conn);
        for (long b = 0; b < batches; b++) {
            uint64_t t0 = now_ns();
            for (int k = 0; k < BATCH; k++)
                if (conn_ready(s, (enum wait_kind)w)) {
                    fprintf(stderr, "zeropoll: the connection is readable with nothing sent\n");
                    exit(1);
                }
            per_call[b] = (now_ns() - t0) / BATCH;
        }
        long long skipped_after = skipped(s->conn);
        send_byte(s->conn, 'n');
        printf("zpoll wait=%s one_way_ns=%.1f empty_ns=%llu skipped=%lld\n", wait_name[w], median(rtt, done) / 2.0,
               (unsigned long long)median(per_call, batches),
               skipped_after < 0 ? -1 : skipped_after - skipped_before);
        fflush(stdout);
    }
    free(rtt);
    free(per_call);
}

/* A TCP connection over 127.0.0.1: the parent accepts, the child connects. */
static int tcp_listener(int *port)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&a, &len) < 0)
        die("listen");
    *port = ntohs(a.sin_port);
    return l;
}

static int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
        die("connect");
    return fd;
}

static void nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int main(int argc, char **argv)
{
    const char *transport = "tcp";
    long rounds = 100000, batches = 200;
    double seconds = 2;
    int opt;
    while ((opt = getopt(argc, argv, "t:n:d:e:")) != -1) {
        switch (opt) {
        case 't': transport = optarg; break;
        case 'n': rounds = atol(optarg); break;
        case 'd': seconds = atof(optarg); break;
        case 'e': batches = atol(optarg); break;
        default:
            fprintf(stderr, "usage: zeropoll [-t tcp|unix] [-n ROUND_TRIPS] [-d SECONDS] [-e EMPTY_BATCHES]\n");
            return 2;
        }
    }
    if (rounds < 1 || batches < 1 || seconds <= 0 || (strcmp(transport, "tcp") && strcmp(transport, "unix"))) {
        fprintf(stderr, "zeropoll: -t tcp|unix, -n and -e at least 1, -d positive\n");
        return 2;
    }
    int pipe_p[2], pipe_c[2], idle[2], conn[2] = { -1, -1 }, port = 0, l = -1;
    if (pipe(pipe_p) < 0 || pipe(pipe_c) < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, idle) < 0)
        die("pipe");
    if (!strcmp(transport, "unix")) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, conn) < 0)
            die("socketpair");
    } else {
        l = tcp_listener(&port);
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        struct set s = { .conn = l >= 0 ? tcp_connect(port) : conn[1], .pipe_rd = pipe_c[0], .unix_end = idle[1] };
        if (l >= 0) {
            close(l);
            nodelay(s.conn);
        }
        child(&s);
        _exit(0);
    }
    struct set s = { .conn = conn[0], .pipe_rd = pipe_p[0], .unix_end = idle[0] };
    if (l >= 0) {
        s.conn = accept(l, NULL, NULL);
        if (s.conn < 0)
            die("accept");
        nodelay(s.conn);
    }
    parent(&s, rounds, batches, seconds);
    int child_accel = -1, status = 0;
    if (read(s.conn, &child_accel, sizeof child_accel) != (ssize_t)sizeof child_accel)
        die("read");
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "zeropoll: the child failed\n");
        return 1;
    }
    printf("result transport=%s libshunt=%s accel_parent=%d accel_child=%d\n", transport,
           dlsym(RTLD_DEFAULT, "shunt_fd_accelerated") ? "yes" : "no", accelerated(s.conn), child_accel);
    return 0;
}
