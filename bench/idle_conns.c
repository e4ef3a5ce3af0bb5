/*
 * idle_conns: one busy connection among N idle ones, served by one epoll
 * loop (the experiment of O2G's figure 5: does the cost of the socket API
 * grow with the connections watched, or with the connections active?).
 *
 *   idle_conns N [-r ROUND_TRIPS] [-b STREAM_MiB] [-i both|server|client|unwatched] [-v]
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
 * -i says which process holds the idle ends (to find which side pays for
 * them): both (the default, as above); server (a helper process opens the
 * idle connections, so the timing client holds none); client (the client
 * opens them to a helper process's listener, so the server holds none and
 * its epoll set has the busy connection only); unwatched (as both, but the
 * server keeps the idle ones open outside its epoll set).
 *
 * -v also writes to standard error what happened on the machine during the
 * timed round trips, to tell a cost of the idle connections from the
 * machine's noise: each batch's round trip in time order, the softirqs
 * of /proc/softirqs that ran meanwhile (on all CPUs), and the client's
 * context switches.
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

#include "idle_common.h"

#define CHUNK 65536

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
static void serve(int lfd, long n, long stream_bytes, int watch_idle)
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
        if (!watch_idle && i < n)
            continue;
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

static int listen_loopback(struct sockaddr_in *a)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t alen = sizeof *a;
    *a = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    if (lfd < 0 || bind(lfd, (struct sockaddr *)a, sizeof *a) < 0 || listen(lfd, 4096) < 0 ||
        getsockname(lfd, (struct sockaddr *)a, &alen) < 0)
        die("listen");
    return lfd;
}

static void connect_idle(const struct sockaddr_in *a, long n)
{
    for (long i = 0; i < n; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (const struct sockaddr *)a, sizeof *a) < 0)
            die("connect (idle)");
    }
}

/* A process that holds the idle ends a timing process should not: it
 * connects them to the server (lfd < 0) or accepts them on lfd, says so
 * with a byte, and keeps them until its pipe's other end (*keep) closes. */
static void idle_helper(int lfd, const struct sockaddr_in *a, long n, int *keep)
{
    int ready[2], hold[2];
    if (pipe(ready) < 0 || pipe(hold) < 0)
        die("pipe");
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        close(ready[0]);
        close(hold[1]);
        if (lfd < 0)
            connect_idle(a, n);
        for (long i = 0; lfd >= 0 && i < n; i++)
            if (accept(lfd, NULL, NULL) < 0)
                die("accept (idle)");
        char c = 'r';
        if (write(ready[1], &c, 1) != 1)
            die("write");
        while (read(hold[0], &c, 1) > 0)
            ;
        _exit(0);
    }
    close(ready[1]);
    close(hold[0]);
    *keep = hold[1];
    if (lfd >= 0)
        connect_idle(a, n);
    char c;
    if (read(ready[0], &c, 1) != 1)
        die("idle helper");
    close(ready[0]);
}

/* Sum over CPUs of each softirq's count (the first 10 lines of /proc/softirqs). */
static int softirqs(char names[][16], unsigned long long *sum)
{
    FILE *f = fopen("/proc/softirqs", "r");
    char line[4096];
    int k = 0;
    if (!f)
        return 0;
    if (!fgets(line, sizeof line, f)) {   /* the CPU names */
        fclose(f);
        return 0;
    }
    while (k < 10 && fgets(line, sizeof line, f)) {
        char *p = line, *end;
        while (*p == ' ')
            p++;
        end = strchr(p, ':');
        if (!end)
            break;
        snprintf(names[k], 16, "%.*s", (int)(end - p), p);
        sum[k] = 0;
        for (p = end + 1;; p = end) {
            unsigned long long v = strtoull(p, &end, 10);
            if (end == p)
                break;
            sum[k] += v;
        }
        k++;
    }
    fclose(f);
    return k;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: idle_conns N [-r ROUND_TRIPS] [-b STREAM_MiB] [-i both|server|client|unwatched]\n");
        return 2;
    }
    long n = atol(argv[1]);
    long rounds = 20000, stream_mib = 256;
    const char *place = "both";
    int opt;
    optind = 2;
    int verbose = 0;
    while ((opt = getopt(argc, argv, "r:b:i:v")) != -1) {
        if (opt == 'r')
            rounds = atol(optarg);
        else if (opt == 'b')
            stream_mib = atol(optarg);
        else if (opt == 'i')
            place = optarg;
        else if (opt == 'v')
            verbose = 1;
        else
            return 2;
    }
    int unwatched = !strcmp(place, "unwatched");
    int server_holds = unwatched || !strcmp(place, "both") || !strcmp(place, "server");
    int client_holds = unwatched || !strcmp(place, "both") || !strcmp(place, "client");
    if (n < 0 || rounds < BATCH || !(server_holds || client_holds))
        return 2;
    rounds -= rounds % BATCH;
    raise_nofile(n + 64);   /* each process holds one end of each connection */

    struct sockaddr_in a;
    int lfd = listen_loopback(&a);
    long stream_bytes = stream_mib << 20;
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        serve(lfd, server_holds ? n : 0, stream_bytes, !unwatched);
        exit(0);
    }
    close(lfd);

    int keep = -1;   /* the helper's pipe, if any: it holds the idle ends until this closes */
    if (client_holds && server_holds) {
        connect_idle(&a, n);
    } else if (server_holds) {
        idle_helper(-1, &a, n, &keep);
    } else {
        struct sockaddr_in ha;
        int hfd = listen_loopback(&ha);
        idle_helper(hfd, &ha, n, &keep);
        close(hfd);
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
    char sq_names[10][16];
    unsigned long long sq0[10], sq1[10];
    struct rusage ru0, ru1;
    int nsq = verbose ? softirqs(sq_names, sq0) : 0;
    getrusage(RUSAGE_SELF, &ru0);
    for (long b = 0; b < batches; b++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < BATCH; i++) {
            write_full(c, msg, MSG);
            read_full(c, msg, MSG);
        }
        t[b] = (now_ns() - t0) / BATCH;
    }
    if (verbose) {
        getrusage(RUSAGE_SELF, &ru1);
        nsq = nsq ? softirqs(sq_names, sq1) : 0;
        fprintf(stderr, "n=%ld batches_ns", n);
        for (long b = 0; b < batches; b++)
            fprintf(stderr, " %llu", (unsigned long long)t[b]);
        fprintf(stderr, "\nn=%ld softirqs", n);
        for (int k = 0; k < nsq; k++)
            fprintf(stderr, " %s=%llu", sq_names[k], sq1[k] - sq0[k]);
        fprintf(stderr, " client_csw=%ld client_icsw=%ld\n", ru1.ru_nvcsw - ru0.ru_nvcsw, ru1.ru_nivcsw - ru0.ru_nivcsw);
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
    close(c);
    if (keep >= 0) {
        close(keep);
        wait(NULL);
    }

    printf("n=%ld rtt_ns=%llu stream_mbps=%.1f accelerated=%s\n", n, (unsigned long long)rtt,
           (double)stream_bytes / secs / 1e6, accelerated ? "yes" : "no");
    return status == 0 ? 0 : 1;
}
