/*
 * busyserv: servers on a busy machine (issue 18, item 4a).  A server with a
 * process per connection (accept, fork a child per connection, as a
 * database forks a backend) or a thread per connection, doing a fixed
 * amount of CPU work per request, driven by N client processes, each one
 * connection sending requests back to back with blocking send and recv.
 * The measuring program of the "busy servers" section of `shunt bench`
 * (bench/shuntbench.py owns the runs, the statistics and the report).
 *
 *   busyserv -m calibrate [-w WORK_US]
 *       prints  calibrate work_us=W iterations=I : the busy loop's
 *       iterations for W µs of CPU on this machine (the driver measures it
 *       once and passes -i to every run, so every transport does the same
 *       work per request)
 *   busyserv [-t tcp|unix] [-s fork|threads] [-c CLIENTS] [-i ITERATIONS]
 *            [-d SECONDS] [-q REQUEST_BYTES] [-r RESPONSE_BYTES] [-p]
 *       (-p: every recv, of the servers and the clients, waits in poll() for
 *       POLLIN first, as a program with an event loop would: a wait shunt
 *       sleeps through on the companion, with doorbells)
 *       prints  busy server=S clients=N requests=R total_ns=T cpu_ns=C
 *               nvcsw=V nivcsw=I
 *       (R requests completed in T ns after a warm-up of 0.2 s; C is the
 *       CPU time of every process of the run, server and clients, over all
 *       the requests they did, warm-up included, as are the voluntary and
 *       involuntary context switches V and I; per-request figures are
 *       C, V and I over all_requests=A, printed on the same line)
 *   and then  result transport=T libshunt=yes|no accel_server=A accel_client=B
 *       where A and B count the connections shunt_fd_accelerated() said were
 *       accelerated on each side (-1: no libshunt in the processes).
 *
 * The process that runs it listens; it forks the clients, then accepts and
 * serves.  Counters live in an anonymous shared mapping made before any
 * fork (not a socket: no transport sees it).  Every socket times out after
 * 120 s, so nothing hangs for ever.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shunt_query.h"

#define MAX_CLIENTS 64

enum transport { T_TCP, T_UNIX };
enum server { S_FORK, S_THREADS };

struct opts {
    enum transport transport;
    enum server server;
    int clients;
    long iterations;
    double seconds;
    double work_us;
    size_t req, resp;
    int calibrate;
    int poll_first;     /* -p: wait in poll() before each recv, as event-driven code does */
};

/* One cache line per client, so that counting costs no sharing. */
struct slot {
    _Alignas(64) atomic_long done;
    atomic_int accel_client;
    atomic_int accel_server;
};

struct shared {
    atomic_int stop;
    struct slot slot[MAX_CLIENTS];
};

static struct shared *sh;
static struct opts o;

static void die(const char *what)
{
    fprintf(stderr, "busyserv: %s: %s\n", what, strerror(errno));
    exit(1);
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The work of one request: a dependent chain of multiplications the
 * compiler cannot drop or shorten. */
static uint64_t work(long iterations, uint64_t seed)
{
    volatile uint64_t sink;
    uint64_t x = seed | 1;
    for (long i = 0; i < iterations; i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    sink = x;
    return sink;
}

/* Iterations for work_us µs of CPU: the fastest of several timed batches
 * (the one least disturbed by anything else on the machine). */
static long calibrate(double work_us)
{
    const long batch = 1000000;
    long long best = -1;
    for (int k = 0; k < 15; k++) {
        long long t0 = now_ns();
        work(batch, (uint64_t)k);
        long long dt = now_ns() - t0;
        if (best < 0 || dt < best)
            best = dt;
    }
    return (long)(work_us * 1000.0 * (double)batch / (double)best);
}

static int accelerated(int fd)
{
    return shunt_query_accelerated(fd);
}

static void socket_options(int fd)
{
    int one = 1;
    struct timeval tv = { 120, 0 };
    if (o.transport == T_TCP && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
        die("TCP_NODELAY");
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* 1 with n bytes read, 0 at the end of the stream before any, -1 error. */
static int recv_all(int fd, char *b, size_t n)
{
    size_t got = 0;
    while (got < n) {
        if (o.poll_first) {
            struct pollfd p = { .fd = fd, .events = POLLIN };
            if (poll(&p, 1, 120000) < 0 && errno != EINTR)
                return -1;
        }
        ssize_t r = recv(fd, b + got, n - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 && got == 0 ? 0 : -1;
        got += (size_t)r;
    }
    return 1;
}

static int send_all(int fd, const char *b, size_t n)
{
    size_t put = 0;
    while (put < n) {
        ssize_t r = send(fd, b + put, n - put, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        put += (size_t)r;
    }
    return 0;
}

/* ------------------------------------------------------------ the server */

struct served {
    int fd;
    int slot;
};

/* Reads requests and answers each after the work, until the client closes. */
static void serve(int fd, int slot)
{
    char *req = malloc(o.req), *resp = malloc(o.resp);
    if (!req || !resp)
        die("malloc");
    memset(resp, 'r', o.resp);
    for (int first = 1;; first = 0) {
        int r = recv_all(fd, req, o.req);
        if (r == 0)
            break;
        if (r < 0)
            die("server: recv");
        if (first)
            atomic_store(&sh->slot[slot].accel_server, accelerated(fd));
        uint64_t v = work(o.iterations, (uint64_t)req[0]);
        resp[0] = (char)v;
        if (send_all(fd, resp, o.resp) < 0)
            die("server: send");
    }
    free(req);
    free(resp);
}

static void *serve_thread(void *arg)
{
    struct served *s = arg;
    serve(s->fd, s->slot);
    close(s->fd);
    return NULL;
}

/* ------------------------------------------------------------ the clients */

static void client(const struct sockaddr_storage *addr, socklen_t len, int slot)
{
    int fd = socket(addr->ss_family, SOCK_STREAM, 0);
    if (fd < 0)
        die("client: socket");
    if (connect(fd, (const struct sockaddr *)addr, len) < 0)
        die("client: connect");
    socket_options(fd);
    /* The slot number goes first, so the server knows whose it is. */
    unsigned char id = (unsigned char)slot;
    if (send_all(fd, (const char *)&id, 1) < 0)
        die("client: send id");
    char *req = malloc(o.req), *resp = malloc(o.resp);
    if (!req || !resp)
        die("malloc");
    memset(req, 'q', o.req);
    long done = 0;
    while (!atomic_load_explicit(&sh->stop, memory_order_relaxed)) {
        req[0] = (char)done;
        if (send_all(fd, req, o.req) < 0)
            die("client: send");
        if (recv_all(fd, resp, o.resp) != 1)
            die("client: recv");
        if (done == 0) /* after a whole exchange: the connection is what it will stay */
            atomic_store(&sh->slot[slot].accel_client, accelerated(fd));
        atomic_store_explicit(&sh->slot[slot].done, ++done, memory_order_relaxed);
    }
    close(fd);
    exit(0);
}

static long total_done(void)
{
    long n = 0;
    for (int i = 0; i < o.clients; i++)
        n += atomic_load(&sh->slot[i].done);
    return n;
}

static void usage(void)
{
    fprintf(stderr, "usage: busyserv [-m calibrate] [-t tcp|unix] [-s fork|threads] [-c CLIENTS] "
                    "[-i ITERATIONS] [-w WORK_US] [-d SECONDS] [-q BYTES] [-r BYTES] [-p]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    o = (struct opts){ .transport = T_TCP, .server = S_FORK, .clients = 1, .seconds = 2.0, .work_us = 30,
                       .req = 100, .resp = 1024 };
    int c;
    while ((c = getopt(argc, argv, "m:t:s:c:i:w:d:q:r:p")) != -1) {
        switch (c) {
        case 'm': o.calibrate = strcmp(optarg, "calibrate") == 0; if (!o.calibrate) usage(); break;
        case 't': o.transport = strcmp(optarg, "unix") == 0 ? T_UNIX : T_TCP; break;
        case 's': o.server = strcmp(optarg, "threads") == 0 ? S_THREADS : S_FORK; break;
        case 'c': o.clients = atoi(optarg); break;
        case 'i': o.iterations = atol(optarg); break;
        case 'w': o.work_us = atof(optarg); break;
        case 'd': o.seconds = atof(optarg); break;
        case 'q': o.req = (size_t)atol(optarg); break;
        case 'r': o.resp = (size_t)atol(optarg); break;
        case 'p': o.poll_first = 1; break;
        default: usage();
        }
    }
    if (o.calibrate) {
        printf("calibrate work_us=%g iterations=%ld\n", o.work_us, calibrate(o.work_us));
        return 0;
    }
    if (o.clients < 1 || o.clients > MAX_CLIENTS || o.req < 1 || o.resp < 1 || o.seconds <= 0)
        usage();
    if (o.iterations <= 0)
        o.iterations = calibrate(o.work_us);
    signal(SIGPIPE, SIG_IGN);

    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        die("mmap");
    for (int i = 0; i < MAX_CLIENTS; i++)
        atomic_store(&sh->slot[i].accel_client, -2), atomic_store(&sh->slot[i].accel_server, -2);

    struct sockaddr_storage addr;
    socklen_t len;
    memset(&addr, 0, sizeof addr);
    if (o.transport == T_TCP) {
        struct sockaddr_in *a = (struct sockaddr_in *)&addr;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof *a;
    } else {
        struct sockaddr_un *a = (struct sockaddr_un *)&addr; /* abstract: nothing on disk */
        a->sun_family = AF_UNIX;
        int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "shunt-busy-%d-%lld", (int)getpid(), now_ns());
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    }
    int lfd = socket(addr.ss_family, SOCK_STREAM, 0);
    if (lfd < 0)
        die("socket");
    if (bind(lfd, (struct sockaddr *)&addr, len) < 0 || listen(lfd, 128) < 0)
        die("bind/listen");
    if (o.transport == T_TCP && getsockname(lfd, (struct sockaddr *)&addr, &len) < 0)
        die("getsockname");

    pid_t kids[MAX_CLIENTS * 2];
    int nkids = 0;
    for (int i = 0; i < o.clients; i++) {
        pid_t p = fork();
        if (p < 0)
            die("fork");
        if (p == 0) {
            close(lfd);
            client(&addr, len, i);
        }
        kids[nkids++] = p;
    }

    pthread_t threads[MAX_CLIENTS];
    struct served served[MAX_CLIENTS];
    for (int i = 0; i < o.clients; i++) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            die("accept");
        socket_options(fd);
        unsigned char id;
        if (recv_all(fd, (char *)&id, 1) != 1 || id >= o.clients)
            die("accept: read the client's number");
        if (o.server == S_FORK) {
            pid_t p = fork();
            if (p < 0)
                die("fork");
            if (p == 0) {
                close(lfd);
                serve(fd, id);
                close(fd);
                _exit(0);
            }
            kids[nkids++] = p;
            close(fd);
        } else {
            served[i] = (struct served){ fd, id };
            if (pthread_create(&threads[i], NULL, serve_thread, &served[i]) != 0)
                die("pthread_create");
        }
    }

    usleep(200 * 1000); /* warm-up: every connection made and running */
    long n0 = total_done();
    long long t0 = now_ns();
    usleep((useconds_t)(o.seconds * 1e6));
    long n1 = total_done();
    long long t1 = now_ns();
    atomic_store(&sh->stop, 1);

    int failed = 0;
    for (int i = 0; i < nkids; i++) {
        int st;
        while (waitpid(kids[i], &st, 0) < 0)
            if (errno != EINTR)
                die("waitpid");
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed = 1;
    }
    if (o.server == S_THREADS)
        for (int i = 0; i < o.clients; i++)
            pthread_join(threads[i], NULL);
    if (failed) {
        fprintf(stderr, "busyserv: a client or a server process failed\n");
        return 1;
    }

    struct rusage self, kids_ru;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &kids_ru);
#define TV_NS(tv) ((long long)(tv).tv_sec * 1000000000LL + (long long)(tv).tv_usec * 1000LL)
    long long cpu = TV_NS(self.ru_utime) + TV_NS(self.ru_stime) + TV_NS(kids_ru.ru_utime) + TV_NS(kids_ru.ru_stime);
    long nv = self.ru_nvcsw + kids_ru.ru_nvcsw, niv = self.ru_nivcsw + kids_ru.ru_nivcsw;
    printf("busy server=%s clients=%d requests=%ld total_ns=%lld cpu_ns=%lld nvcsw=%ld nivcsw=%ld "
           "all_requests=%ld iterations=%ld\n",
           o.server == S_FORK ? "fork" : "threads", o.clients, n1 - n0, t1 - t0, cpu, nv, niv, total_done(),
           o.iterations);
    int acc_s = 0, acc_c = 0;
    for (int i = 0; i < o.clients; i++) {
        int s = atomic_load(&sh->slot[i].accel_server), cl = atomic_load(&sh->slot[i].accel_client);
        if (s < 0 || acc_s < 0)
            acc_s = -1;
        else
            acc_s += s == 1;
        if (cl < 0 || acc_c < 0)
            acc_c = -1;
        else
            acc_c += cl == 1;
    }
    printf("result transport=%s libshunt=%s accel_server=%d accel_client=%d\n",
           o.transport == T_TCP ? "tcp" : "unix", libshunt_mapped() ? "yes" : "no", acc_s, acc_c);
    return 0;
}
