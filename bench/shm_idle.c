/*
 * shm_idle: the idle-connections experiment without shunt (bench/idle.py's
 * control).  Does a spinning shared-memory ping-pong between two processes
 * get slower when each process also maps N idle segments, holds N idle
 * loopback TCP connections, or watches them with epoll?
 *
 *   shm_idle N [-r ROUND_TRIPS] [-k] [-e]
 *
 * The process maps N+1 files of /dev/shm laid out as shunt's channel
 * segments (a 4 KiB header and two 1 MiB rings, of which the header and the
 * first 16 KiB of each ring are touched; the rest is a hole), then forks.
 * Both processes have every segment mapped, as both ends of N+1 shunt
 * connections do.  On the last segment they ping-pong 64-byte messages: the
 * client copies a message into one ring and publishes a count, the server
 * spins on the count, copies the message out and answers through the other
 * ring.  Neither ever sleeps.  -k adds N idle loopback TCP connections (the
 * companions), the server's ends accepted by the server; -e puts the
 * server's ends in an epoll set (edge-triggered EPOLLIN, as shunt registers
 * them) and makes the server ask it without blocking every other round trip,
 * as shunt's epoll_wait does when the set has cold members.  Prints:
 *
 *   n=N rtt_ns=R
 *
 * (median of batches of 1000 round trips).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "idle_common.h"

#define HDR 4096
#define RING (1u << 20)
#define TOUCH (16u << 10)
#define SEG (HDR + 2 * RING)

struct seg_hdr {
    _Alignas(64) atomic_uint_fast64_t sent[2];   /* messages published per direction */
    _Alignas(64) atomic_uint_fast64_t taken[2];
};

static char *map_segment(long i)
{
    char name[64];
    snprintf(name, sizeof name, "/dev/shm/shm_idle-%d-%ld", (int)getpid(), i);
    int fd = open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, SEG) < 0)
        die("segment");
    unlink(name);
    char *p = mmap(NULL, SEG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        die("mmap");
    close(fd);
    memset(p, 0, HDR);
    memset(p + HDR, 0, TOUCH);
    memset(p + HDR + RING, 0, TOUCH);
    return p;
}

/* One message of 64 bytes from direction d's ring, in order. */
static void send_msg(char *seg, int d, const char *msg)
{
    struct seg_hdr *h = (struct seg_hdr *)seg;
    uint64_t k = atomic_load_explicit(&h->sent[d], memory_order_relaxed);
    memcpy(seg + HDR + (size_t)d * RING + (k * MSG) % TOUCH, msg, MSG);
    atomic_store_explicit(&h->sent[d], k + 1, memory_order_release);
}

static void recv_msg(char *seg, int d, char *msg)
{
    struct seg_hdr *h = (struct seg_hdr *)seg;
    uint64_t k = atomic_load_explicit(&h->taken[d], memory_order_relaxed);
    while (atomic_load_explicit(&h->sent[d], memory_order_acquire) == k)
        __builtin_ia32_pause();
    memcpy(msg, seg + HDR + (size_t)d * RING + (k * MSG) % TOUCH, MSG);
    atomic_store_explicit(&h->taken[d], k + 1, memory_order_release);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: shm_idle N [-r ROUND_TRIPS] [-k] [-e]\n");
        return 2;
    }
    long n = atol(argv[1]), rounds = 20000;
    int tcp = 0, ep_look = 0, opt;
    optind = 2;
    while ((opt = getopt(argc, argv, "r:ke")) != -1) {
        if (opt == 'r')
            rounds = atol(optarg);
        else if (opt == 'k')
            tcp = 1;
        else if (opt == 'e')
            tcp = ep_look = 1;
        else
            return 2;
    }
    if (n < 0 || rounds < BATCH)
        return 2;
    struct rlimit rl = { (rlim_t)(2 * n + 64), (rlim_t)(2 * n + 64) };
    if (tcp && getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)(2 * n + 64)) {
        rl.rlim_cur = (rlim_t)(2 * n + 64);
        if (rl.rlim_max < rl.rlim_cur)
            rl.rlim_max = rl.rlim_cur;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            die("setrlimit");
    }
    rounds -= rounds % BATCH;
    char *busy = NULL;
    for (long i = 0; i <= n; i++)
        busy = map_segment(i);

    /* the companions: connected here, each end kept by the process it belongs to after fork */
    int *cli = calloc((size_t)n + 1, sizeof(int)), *srv = calloc((size_t)n + 1, sizeof(int));
    if (tcp) {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t alen = sizeof a;
        int lfd = socket(AF_INET, SOCK_STREAM, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 4096) < 0 ||
            getsockname(lfd, (struct sockaddr *)&a, &alen) < 0)
            die("listen");
        for (long i = 0; i < n; i++) {
            cli[i] = socket(AF_INET, SOCK_STREAM, 0);
            if (cli[i] < 0 || connect(cli[i], (struct sockaddr *)&a, sizeof a) < 0 ||
                (srv[i] = accept(lfd, NULL, NULL)) < 0)
                die("connect");
        }
        close(lfd);
    }

    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    char msg[MSG];
    if (pid == 0) {   /* the server */
        for (long i = 0; tcp && i < n; i++)
            close(cli[i]);
        int ep = -1;
        if (ep_look) {
            ep = epoll_create1(0);
            for (long i = 0; i < n; i++) {
                struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u64 = (uint64_t)i };
                if (epoll_ctl(ep, EPOLL_CTL_ADD, srv[i], &ev) < 0)
                    die("epoll_ctl");
            }
        }
        struct epoll_event evs[64];
        for (uint64_t k = 0;; k++) {
            if (ep >= 0 && (k & 1))
                epoll_wait(ep, evs, 64, 0);
            recv_msg(busy, 0, msg);
            if (msg[0] == 'Q')
                _exit(0);
            send_msg(busy, 1, msg);
        }
    }
    for (long i = 0; tcp && i < n; i++)
        close(srv[i]);
    memset(msg, 'p', sizeof msg);
    for (int i = 0; i < BATCH; i++) {   /* warm-up */
        send_msg(busy, 0, msg);
        recv_msg(busy, 1, msg);
    }
    long batches = rounds / BATCH;
    uint64_t *t = malloc(sizeof(uint64_t) * (size_t)batches);
    for (long b = 0; b < batches; b++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < BATCH; i++) {
            send_msg(busy, 0, msg);
            recv_msg(busy, 1, msg);
        }
        t[b] = (now_ns() - t0) / BATCH;
    }
    qsort(t, (size_t)batches, sizeof *t, cmp_u64);
    memset(msg, 'Q', sizeof msg);
    send_msg(busy, 0, msg);
    int status;
    waitpid(pid, &status, 0);
    printf("n=%ld rtt_ns=%llu\n", n, (unsigned long long)t[batches / 2]);
    return 0;
}
