/*
 * pingpong: the measuring program of shunt's benchmarks.  Two processes of
 * one host (this one and a forked child) exchange messages over kernel TCP
 * on 127.0.0.1, a Unix domain socket, or a bare shared-memory ring with no
 * system call at all (the floor, bench/floor_ring.h: what any shared-memory transport with a
 * copy in and a copy out must pay).  -t memcpy is no transport but the
 * reference of issue 6: one thread copying the message with memcpy, from
 * and to buffers reused as NetPIPE reuses its own (sweep mode only; its
 * one-way time is one copy).  Owns the wire protocol between the two
 * processes and the timing; bench/shuntbench.py and bench/overhead.py own
 * the runs, the statistics and the reports.
 *
 *   pingpong [-t tcp|unix|shm|memcpy] [-m pp|sweep|stream|rr|cc|crr|get] [options]
 *
 *   -m pp      (default) -n ROUND_TRIPS of -s SIZE bytes after -w WARMUP
 *              ones; prints  size=S n=N total_ns=T rtt_ns=R libshunt=yes|no ...
 *   -m sweep   NetPIPE's ping-pong (seed 002, section 4.2) for every size
 *              from -l MIN to -u MAX: base sizes 2^k (and 3*2^(k-1) unless
 *              -b pow2), each also perturbed by -p PERT bytes (default 3)
 *              either way; per size -r TRIALS trials of about -T MS each,
 *              the shortest kept; prints  point size=S repeats=N rtt_ns=R
 *   -m stream  -s SIZE messages one way for about -d SECONDS, timed from the
 *              first byte sent to the receiver's acknowledgement of the last;
 *              prints  stream size=S messages=N total_ns=T
 *   -m rr      -s SIZE requests and responses for about -d SECONDS;
 *              prints  rr size=S transactions=N total_ns=T
 *   -m cc      connect, accept, close (netperf's TCP_CC) for about -d
 *              SECONDS or -n connections; prints  cc connections=N total_ns=T
 *   -m crr     the same with a request of -s SIZE bytes and an answer as
 *              long on each connection, the client closing first (netperf's
 *              TCP_CRR);
 *              prints  crr size=S connections=N total_ns=T
 *   -m get     the same with a 1-byte request and an answer of -s SIZE
 *              bytes, after which the server closes at once and the client
 *              reads to the end and closes (a download over HTTP/1.0, FTP's
 *              data connection, `nc < file`);
 *              prints  get size=S connections=N total_ns=T
 *
 * Between two network namespaces (shunt bench --netns): -a ADDR makes the
 * parent listen on ADDR instead of 127.0.0.1, -U PATH binds the Unix socket
 * to PATH instead of an abstract name (abstract names belong to one network
 * namespace), and each -X WORD is a word of a command the child runs this
 * program under after the fork (e.g. -X ip -X netns -X exec -X NS, then
 * maybe -X shunt -X run -X --): the child execs it with its own arguments
 * and -C REPORT_FD,STOP_FD,PORT, its role, so that its libraries (libshunt)
 * start in the namespace it connects from.
 *
 * Every mode ends with a line
 *   result transport=T libshunt=yes|no accel_parent=A accel_child=B
 * where A and B are what shunt_fd_accelerated() said on each end (-1: no
 * libshunt in the process); in cc mode they count accelerated connections.
 *
 * The child connects and serves; the parent listens, accepts and times.
 * Before each batch the parent sends a header saying what comes (echo N
 * messages of S bytes, or sink them), so the child reads whole messages as
 * NetPIPE's receiver does; headers are never timed.  Everything is bounded:
 * sockets time out after 120 s and the floor's waits give up after as long.
 *
 * This file: the options, the parent's timing and the child's serving;
 * the connections are pingpong_conn.c's, the client of cc, crr and get is
 * pingpong_cc.c's, what they share is pingpong.h.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "floor_ring.h"
#include "pingpong.h"
#include "shunt_query.h"

enum op { OP_END = 0, OP_ECHO = 1, OP_SINK = 2 };

struct header {
    uint32_t op;
    uint32_t pad;
    uint64_t size;
    uint64_t count;
};

static const char *transport_names[] = { "tcp", "unix", "shm", "memcpy" };

long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void must_recv(struct conn *c, void *b, size_t n, const char *what)
{
    int r = conn_recv(c, b, n);
    if (r < 0)
        die(what);
    if (r == 0) {
        fprintf(stderr, "pingpong: %s: unexpected end of stream\n", what);
        exit(1);
    }
}

static void must_send(struct conn *c, const void *b, size_t n, const char *what)
{
    if (conn_send(c, b, n) < 0)
        die(what);
}

/* ------------------------------------------------------------------ child */

/* Serves headers until OP_END: echoes or sinks the messages announced. */
static void serve(struct conn *c, char *buf)
{
    for (;;) {
        struct header h;
        int r = conn_recv(c, &h, sizeof h);
        if (r < 0)
            die("child: read header");
        if (r == 0 || h.op == OP_END)
            return;
        for (uint64_t i = 0; i < h.count; i++) {
            must_recv(c, buf, h.size, "child: read");
            if (h.op == OP_ECHO)
                must_send(c, buf, h.size, "child: write");
        }
        if (h.op == OP_SINK) {
            char ack = 1;
            must_send(c, &ack, 1, "child: write ack");
        }
    }
}

/* ----------------------------------------------------------------- parent */

static void send_header(struct conn *c, uint32_t op, uint64_t size, uint64_t count)
{
    struct header h = { op, 0, size, count };
    must_send(c, &h, sizeof h, "write header");
}

/* count round trips of size bytes; returns the time they took. */
static long long trial(struct conn *c, char *buf, size_t size, long count)
{
    if (c->mirror) {
        /* a round trip is the message copied there and back */
        long long t0 = now_ns();
        for (long i = 0; i < count; i++) {
            memcpy(c->mirror, buf, size);
            __asm__ volatile("" ::: "memory");
            memcpy(buf, c->mirror, size);
            __asm__ volatile("" ::: "memory");
        }
        return now_ns() - t0;
    }
    send_header(c, OP_ECHO, size, (uint64_t)count);
    long long t0 = now_ns();
    for (long i = 0; i < count; i++) {
        must_send(c, buf, size, "write");
        must_recv(c, buf, size, "read");
    }
    return now_ns() - t0;
}

static long long sink(struct conn *c, char *buf, size_t size, long count)
{
    char ack;
    send_header(c, OP_SINK, size, (uint64_t)count);
    long long t0 = now_ns();
    for (long i = 0; i < count; i++)
        must_send(c, buf, size, "write");
    must_recv(c, &ack, 1, "read ack");
    return now_ns() - t0;
}

static long repeats_for(long long target_ns, double per_ns, long lo)
{
    double n = per_ns > 0 ? (double)target_ns / per_ns : 1;
    if (n < lo)
        n = lo;
    if (n > 100000000.0)
        n = 100000000.0;
    return (long)n;
}

/* The child: connects (cc, crr: over and over) and serves, then reports
 * what shunt_fd_accelerated said at its end to the parent. */
static _Noreturn void child_run(const struct opts *o, const struct endpoint *e, struct floor_ring *rings,
                                pid_t parent, int report_fd, int stop_fd, char *buf)
{
    long a = 0, made = 0;
    if (CONN_MODE(o->mode)) {
        if (fcntl(stop_fd, F_SETFL, O_NONBLOCK) < 0)
            die("fcntl");
        cc_client(e, stop_fd, o->mode == M_CC ? 0 : o->size, o->mode == M_GET, buf, &made, &a);
    } else {
        struct conn c = { -1, NULL, NULL, parent, NULL };
        if (rings) {
            c.tx = &rings[1];
            c.rx = &rings[0];
        } else {
            c.fd = connect_to(e);
            if (c.fd < 0)
                die("child: connect");
            socket_options(c.fd, o->transport);
        }
        serve(&c, buf);
        a = c.fd >= 0 ? accelerated(c.fd) : -1;
        if (c.fd >= 0)
            close(c.fd);
    }
    char line[64];
    int n = snprintf(line, sizeof line, "%ld %ld\n", a, made);
    if (write(report_fd, line, (size_t)n) != n)
        _exit(1);
    _exit(0);
}

/* -X: the child runs this program again under the command given (another
 * network namespace, shunt run ...), in the role -C: its report and stop
 * fds are inherited, the listener's port is told. */
static _Noreturn void child_exec(const struct opts *o, int argc, char **argv, const struct endpoint *e,
                                 int report_fd, int stop_fd)
{
    char self[PATH_MAX], role[64];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        die("child: readlink /proc/self/exe");
    self[n] = 0;
    int port = o->transport == T_TCP ? ntohs(((const struct sockaddr_in *)&e->addr)->sin_port) : 0;
    snprintf(role, sizeof role, "%d,%d,%d", report_fd, stop_fd, port);
    char **args = calloc((size_t)o->nwrap + (size_t)argc + 3, sizeof *args);
    if (!args)
        die("child: calloc");
    int k = 0;
    for (int i = 0; i < o->nwrap; i++)
        args[k++] = o->wrap[i];
    args[k++] = self;
    for (int i = 1; i < argc; i++)
        args[k++] = argv[i];
    args[k++] = "-C";
    args[k++] = role;
    execvp(args[0], args);
    die("child: exec");
}


static void sweep(struct conn *c, char *buf, const struct opts *o)
{
    /* a first estimate of the round trip, and a warm-up */
    long long t = trial(c, buf, 1, o->warmup > 0 ? o->warmup : 1);
    double est = (double)t / (double)(o->warmup > 0 ? o->warmup : 1);
    long long target = (long long)(o->target_ms * 1e6);
    size_t last = 0;
    for (size_t base = 1; base <= o->max; base *= 2) {
        size_t bases[2] = { base, base * 3 / 2 };
        int nb = (o->pow2 || base < 2 || base * 3 / 2 > o->max) ? 1 : 2;
        for (int b = 0; b < nb; b++) {
            for (long d = -o->pert; d <= o->pert; d += o->pert ? o->pert : 1) {
                long long s = (long long)bases[b] + d;
                if (s < (long long)o->min || s < 1 || (size_t)s <= last)
                    continue;
                size_t size = (size_t)s;
                last = size;
                long best_n = 0;
                double best = -1;
                for (long tr = 0; tr < o->trials; tr++) {
                    long n = repeats_for(target, est, 1);
                    double rtt = (double)trial(c, buf, size, n) / (double)n;
                    est = rtt;
                    if (best < 0 || rtt < best) {
                        best = rtt;
                        best_n = n;
                    }
                }
                printf("point size=%zu repeats=%ld rtt_ns=%.1f\n", size, best_n, best);
                fflush(stdout);
                if (o->pert == 0)
                    break;
            }
        }
    }
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [-t tcp|unix|shm|memcpy] [-m pp|sweep|stream|rr|cc|crr|get] [-n N] [-s SIZE] [-w WARMUP]\n"
            "       [-l MIN] [-u MAX] [-p PERT] [-b pow2] [-r TRIALS] [-T MS] [-d SECONDS]\n"
            "       [-a ADDR] [-U PATH] [-X WORD]...\n",
            argv0);
    exit(2);
}

static int parse_enum(const char *s, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

static void parse(int argc, char **argv, struct opts *o)
{
    static const char *const modes[] = { "pp", "sweep", "stream", "rr", "cc", "crr", "get" };
    *o = (struct opts){ .transport = T_TCP, .mode = M_PP, .n = 200000, .warmup = 2000, .trials = 3,
                        .size = 1, .min = 1, .max = 8u << 20, .pert = 3, .seconds = 1, .target_ms = 20,
                        .child_report = -1, .child_stop = -1 };
    o->wrap = calloc((size_t)argc + 1, sizeof *o->wrap);
    if (!o->wrap)
        die("calloc");
    int opt, v;
    while ((opt = getopt(argc, argv, "t:m:n:s:w:l:u:p:b:r:T:d:a:U:X:C:")) != -1) {
        switch (opt) {
        case 't':
            if ((v = parse_enum(optarg, transport_names, 4)) < 0)
                usage(argv[0]);
            o->transport = (enum transport)v;
            break;
        case 'm':
            if ((v = parse_enum(optarg, modes, 7)) < 0)
                usage(argv[0]);
            o->mode = (enum mode)v;
            break;
        case 'n': o->n = atol(optarg); break;
        case 's': o->size = (size_t)atol(optarg); break;
        case 'w': o->warmup = atol(optarg); break;
        case 'l': o->min = (size_t)atol(optarg); break;
        case 'u': o->max = (size_t)atol(optarg); break;
        case 'p': o->pert = atol(optarg); break;
        case 'b': o->pow2 = !strcmp(optarg, "pow2"); break;
        case 'r': o->trials = atol(optarg); break;
        case 'T': o->target_ms = atof(optarg); break;
        case 'd': o->seconds = atof(optarg); break;
        case 'a': o->addr = optarg; break;
        case 'U': o->path = optarg; break;
        case 'X': o->wrap[o->nwrap++] = optarg; break;
        case 'C':
            if (sscanf(optarg, "%d,%d,%d", &o->child_report, &o->child_stop, &o->child_port) != 3)
                usage(argv[0]);
            break;
        default: usage(argv[0]);
        }
    }
    if (o->n <= 0 || o->size == 0 || o->warmup < 0 || o->min == 0 || o->max < o->min || o->pert < 0 ||
        o->trials <= 0 || o->target_ms <= 0 || o->seconds <= 0 || o->max > (1u << 30)) {
        fprintf(stderr, "pingpong: bad arguments\n");
        exit(2);
    }
    if (o->transport == T_MEMCPY && o->mode != M_SWEEP) {
        fprintf(stderr, "pingpong: -t memcpy is a reference for the sweep only (-m sweep)\n");
        exit(2);
    }
    if ((o->nwrap > 0 || o->child_report >= 0) && o->transport != T_TCP && o->transport != T_UNIX) {
        fprintf(stderr, "pingpong: -X and -C are for tcp and unix only\n");
        exit(2);
    }
    if (CONN_MODE(o->mode) && o->transport == T_SHM) {
        fprintf(stderr, "pingpong: cc has no meaning on the shared-memory floor (no connections)\n");
        exit(2);
    }
}


int main(int argc, char **argv)
{
    struct opts o;
    parse(argc, argv, &o);
    size_t bufsize = o.mode == M_SWEEP ? o.max + (size_t)o.pert : o.size;
    char *buf;
    if (posix_memalign((void **)&buf, 4096, bufsize + 1) != 0)
        die("posix_memalign");
    memset(buf, 'x', bufsize + 1);

    if (o.transport == T_MEMCPY) {
        struct conn c = { .fd = -1 };
        if (posix_memalign((void **)&c.mirror, 4096, bufsize + 1) != 0)
            die("posix_memalign");
        memset(c.mirror, 'y', bufsize + 1);
        sweep(&c, buf, &o);
        printf("result transport=memcpy libshunt=%s accel_parent=-1 accel_child=-1\n",
               libshunt_mapped() ? "yes" : "no");
        return 0;
    }

    if (o.child_report >= 0) {   /* -C: the child of -X, exec'd */
        struct endpoint e;
        endpoint_address(&e, &o, o.child_port);
        child_run(&o, &e, NULL, getppid(), o.child_report, o.child_stop, buf);
    }

    struct endpoint e = { .fd = -1 };
    struct floor_ring *rings = NULL;
    if (o.transport == T_SHM)
        rings = floor_map();
    else
        listen_on(&e, &o);

    /* child -> parent: the child's report at its end; parent -> child (cc):
     * closed when the parent has accepted enough */
    int report[2], stop[2];
    if (pipe(report) < 0 || pipe(stop) < 0)
        die("pipe");
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        close(report[0]);
        close(stop[1]);
        if (e.fd >= 0)
            close(e.fd);
        if (o.nwrap > 0)
            child_exec(&o, argc, argv, &e, report[1], stop[0]);
        child_run(&o, &e, rings, parent, report[1], stop[0], buf);
    }
    close(report[1]);
    close(stop[0]);

    struct conn c = { -1, NULL, NULL, pid, NULL };
    long accel_parent = -1;
    if (rings) {
        c.tx = &rings[0];
        c.rx = &rings[1];
    } else if (!CONN_MODE(o.mode)) {
        c.fd = accept_from_child(e.fd, report[0]);
        if (c.fd < 0)
            die(errno == ECHILD ? "accept: the child ended before connecting" : "accept");
        close(e.fd);
        socket_options(c.fd, o.transport);
    }

    switch (o.mode) {
    case M_PP: {
        if (o.warmup > 0)
            trial(&c, buf, o.size, o.warmup);
        long long total = trial(&c, buf, o.size, o.n);
        printf("size=%zu n=%ld total_ns=%lld rtt_ns=%.1f libshunt=%s transport=%s\n", o.size, o.n, total,
               (double)total / (double)o.n, libshunt_mapped() ? "yes" : "no", transport_names[o.transport]);
        break;
    }
    case M_SWEEP:
        sweep(&c, buf, &o);
        break;
    case M_RR:
    case M_STREAM: {
        /* a warm-up batch, then timed batches of about a tenth of the time
         * each, every one sized from the last, until the time is up: a
         * rate that changes midway cannot stretch the run */
        long long target = (long long)(o.seconds * 1e9), total = 0;
        long n = o.mode == M_RR ? 1000 : 100, count = 0;
        long long t = o.mode == M_RR ? trial(&c, buf, o.size, n) : sink(&c, buf, o.size, n);
        while (total < target) {
            n = repeats_for(target / 10, (double)t / (double)n, 10);
            t = o.mode == M_RR ? trial(&c, buf, o.size, n) : sink(&c, buf, o.size, n);
            total += t;
            count += n;
        }
        printf("%s size=%zu %s=%ld total_ns=%lld\n", o.mode == M_RR ? "rr" : "stream", o.size,
               o.mode == M_RR ? "transactions" : "messages", count, total);
        break;
    }
    case M_CC:
    case M_CRR:
    case M_GET: {
        long long deadline = now_ns() + (long long)(o.seconds * 1e9);
        long long t0 = now_ns();
        long accepted = 0;
        accel_parent = 0;
        /* the child connects as fast as it can; once enough connections were
         * accepted, closing stop tells it to end after the current one */
        while (accepted < o.n && now_ns() < deadline) {
            int fd = accept_from_child(e.fd, report[0]);
            if (fd < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == ECHILD)
                    break; /* it ran out of ports, or failed: waitpid tells */
                die("accept");
            }
            int a = accelerated(fd);
            if (a == 1)
                accel_parent++;
            else if (a < 0)
                accel_parent = -1;
            struct conn k = { .fd = fd };
            char b;
            if (o.mode == M_GET) {
                must_recv(&k, buf, 1, "get: request");
                must_send(&k, buf, o.size, "get: answer");   /* and the close at once, below */
            } else if (o.mode == M_CRR) {
                must_recv(&k, buf, o.size, "crr: request");
                must_send(&k, buf, o.size, "crr: answer");
                if (conn_recv(&k, &b, 1) != 0) {   /* the client's close */
                    fprintf(stderr, "pingpong: crr: expected the client's close\n");
                    exit(1);
                }
            }
            close(fd);
            accepted++;
        }
        long long total = now_ns() - t0;
        close(stop[1]);
        stop[1] = -1;
        /* the child may be inside one last connect: let it finish */
        for (;;) {
            struct timeval tv = { 0, 200000 };
            fd_set rd;
            FD_ZERO(&rd);
            FD_SET(e.fd, &rd);
            if (select(e.fd + 1, &rd, NULL, NULL, &tv) <= 0)
                break;
            int fd = accept(e.fd, NULL, NULL);
            if (fd >= 0)
                close(fd);
        }
        close(e.fd);
        if (o.mode == M_CRR || o.mode == M_GET)
            printf("%s size=%zu connections=%ld total_ns=%lld\n", o.mode == M_GET ? "get" : "crr", o.size, accepted,
                   total);
        else
            printf("cc connections=%ld total_ns=%lld\n", accepted, total);
        break;
    }
    }
    if (!CONN_MODE(o.mode)) {
        send_header(&c, OP_END, 0, 0);
        accel_parent = c.fd >= 0 ? accelerated(c.fd) : -1;
        if (c.fd >= 0)
            shutdown(c.fd, SHUT_WR);
    }

    char line[64] = "";
    ssize_t got = 0, r;
    while ((r = read(report[0], line + got, sizeof line - 1 - (size_t)got)) > 0)
        got += r;
    line[got] = 0;
    if (c.fd >= 0)
        close(c.fd);
    if (stop[1] >= 0)
        close(stop[1]);
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "pingpong: the child failed\n");
        return 1;
    }
    long accel_child = -1, made = 0;
    if (sscanf(line, "%ld %ld", &accel_child, &made) != 2) {
        fprintf(stderr, "pingpong: no report from the child\n");
        return 1;
    }
    printf("result transport=%s libshunt=%s accel_parent=%ld accel_child=%ld\n", transport_names[o.transport],
           libshunt_mapped() ? "yes" : "no", accel_parent, accel_child);
    return 0;
}
