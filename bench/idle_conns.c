/*
 * idle_conns: one busy connection among N idle ones, served by one epoll
 * loop (the experiment of O2G's figure 5: does the cost of the socket API
 * grow with the connections watched, or with the connections active?).
 *
 *   idle_conns N [-r ROUND_TRIPS] [-b STREAM_MiB]
 *
 * The process listens on 127.0.0.1 and forks.  The child is the server:
 * it accepts N+1 connections, puts every one in one epoll set
 * (level-triggered EPOLLIN) and loops: a readable connection is read and,
 * for the busy one, answered.  The parent opens the N idle connections
 * first (they stay open and silent), then the busy one, on which it
 *   1. times ROUND_TRIPS ping-pongs of 64 bytes, in batches of 1000, and
 *      keeps the median batch (one-way latency = round trip / 2);
 *   2. streams STREAM_MiB in 64 KiB writes, which the server reads and
 *      acknowledges with one byte at the end (throughput).
 * It prints one line:
 *
 *   n=N rtt_ns=R stream_mbps=T accelerated=yes|no
 *
 * Used by bench/idle.py, which runs it over kernel TCP and under shunt.
 * RLIMIT_NOFILE is raised to what N needs, within the hard limit.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG 64
#define CHUNK 65536
#define BATCH 1000

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void read_full(int fd, char *b, size_t n)
{
    while (n) {
        ssize_t r = read(fd, b, n);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            die("read");
        }
        b += r;
        n -= (size_t)r;
    }
}

static void write_full(int fd, const char *b, size_t n)
{
    while (n) {
        ssize_t r = write(fd, b, n);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            die("write");
        }
        b += r;
        n -= (size_t)r;
    }
}

static void raise_nofile(long need)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        die("getrlimit");
    if ((long)rl.rlim_cur >= need)
        return;
    rl.rlim_cur = (rlim_t)need;
    if (rl.rlim_max != RLIM_INFINITY && (long)rl.rlim_max < need)
        rl.rlim_max = (rlim_t)need;   /* only a privileged process may */
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        fprintf(stderr, "idle_conns: %ld fds needed, the limit is %ld and cannot be raised\n", need,
                (long)rl.rlim_cur);
        exit(1);
    }
}

/* The server: the busy connection is the last accepted.  Reads what is
 * readable; 64-byte messages on the busy one are echoed; in stream mode
 * (after the client's "S"), bytes are counted and acknowledged. */
static void serve(int lfd, long n, long stream_bytes)
{
    int ep = epoll_create1(0);
    if (ep < 0)
        die("epoll_create1");
    int busy = -1;
    for (long i = 0; i <= n; i++) {
        int c = accept(lfd, NULL, NULL);
        if (c < 0)
            die("accept");
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct epoll_event ev = { .events = EPOLLIN, .data.fd = c };
        if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) < 0)
            die("epoll_ctl");
        busy = c;
    }
    static char buf[CHUNK];
    long streamed = -1;   /* -1: ping-pong; then bytes received in stream mode */
    struct epoll_event evs[64];
    for (;;) {
        int k = epoll_wait(ep, evs, 64, -1);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait");
        }
        for (int i = 0; i < k; i++) {
            int fd = evs[i].data.fd;
            if (fd != busy) {
                ssize_t r = read(fd, buf, sizeof buf);   /* an idle one spoke: it is closing */
                if (r <= 0)
                    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL), close(fd);
                continue;
            }
            if (streamed < 0) {
                read_full(fd, buf, MSG);
                if (buf[0] == 'S') {
                    streamed = 0;
                    continue;
                }
                if (buf[0] == 'Q')
                    return;
                write_full(fd, buf, MSG);
            } else {
                ssize_t r = read(fd, buf, sizeof buf);
                if (r <= 0)
                    return;
                streamed += r;
                if (streamed >= stream_bytes) {
                    write_full(fd, "A", 1);
                    streamed = -1;
                }
            }
        }
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: idle_conns N [-r ROUND_TRIPS] [-b STREAM_MiB]\n");
        return 2;
    }
    long n = atol(argv[1]);
    long rounds = 20000, stream_mib = 256;
    int opt;
    optind = 2;
    while ((opt = getopt(argc, argv, "r:b:")) != -1) {
        if (opt == 'r')
            rounds = atol(optarg);
        else if (opt == 'b')
            stream_mib = atol(optarg);
        else
            return 2;
    }
    if (n < 0 || rounds < BATCH)
        return 2;
    rounds -= rounds % BATCH;
    raise_nofile(n + 64);   /* each process holds one end of each connection */

    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 4096) < 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &alen) < 0)
        die("listen");
    long stream_bytes = stream_mib << 20;
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        serve(lfd, n, stream_bytes);
        exit(0);
    }
    close(lfd);

    int *idle = malloc(sizeof(int) * (size_t)(n ? n : 1));
    for (long i = 0; i < n; i++) {
        idle[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (idle[i] < 0 || connect(idle[i], (struct sockaddr *)&a, sizeof a) < 0)
            die("connect (idle)");
    }
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) < 0)
        die("connect (busy)");
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    char msg[MSG];
    memset(msg, 'p', sizeof msg);
    for (int i = 0; i < BATCH; i++) {   /* warm-up */
        write_full(c, msg, MSG);
        read_full(c, msg, MSG);
    }
    long batches = rounds / BATCH;
    uint64_t *t = malloc(sizeof(uint64_t) * (size_t)batches);
    for (long b = 0; b < batches; b++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < BATCH; i++) {
            write_full(c, msg, MSG);
            read_full(c, msg, MSG);
        }
        t[b] = (now_ns() - t0) / BATCH;
    }
    qsort(t, (size_t)batches, sizeof *t, cmp_u64);
    uint64_t rtt = t[batches / 2];

    static char chunk[CHUNK];
    memset(chunk, 's', sizeof chunk);
    memset(msg, 'S', sizeof msg);
    write_full(c, msg, MSG);
    uint64_t t0 = now_ns();
    for (long sent = 0; sent < stream_bytes; sent += CHUNK)
        write_full(c, chunk, CHUNK);
    char ack;
    read_full(c, &ack, 1);
    double secs = (double)(now_ns() - t0) / 1e9;

    /* asked before the end: shunt's answer for the busy connection */
    int (*query)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
    int accelerated = query && query(c) == 1;
    memset(msg, 'Q', sizeof msg);
    write_full(c, msg, MSG);
    int status;
    waitpid(pid, &status, 0);
    for (long i = 0; i < n; i++)
        close(idle[i]);
    close(c);

    printf("n=%ld rtt_ns=%llu stream_mbps=%.1f accelerated=%s\n", n, (unsigned long long)rtt,
           (double)stream_bytes / secs / 1e6, accelerated ? "yes" : "no");
    return status == 0 ? 0 : 1;
}
