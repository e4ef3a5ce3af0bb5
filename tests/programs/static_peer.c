/*
 * static_peer: an echo server / verifying client in C.
 *
 * Built with `cc -static` it contains its own copy of libc, so LD_PRELOAD
 * (and therefore libshunt.so) has no effect on it: the tests use it as a
 * peer that cannot be intercepted.  The same source built as an ordinary
 * dynamic executable is used as a C program that *is* run under shunt.
 *
 * Protocol (shared with tests/programs/goecho and tests/programs/pyecho.py):
 * byte i of the client's stream on a connection is table[i % 65521] with
 * table[j] = (uint8_t)(((uint32_t)j * 2654435761u) >> 16).  The server
 * echoes everything, verifies the pattern, and on EOF shuts down its write
 * side and prints "CONN <n> RECV <bytes> OK" (or "... BAD <offset>").
 *
 * Both roles first print "LIBSHUNT_MAPPED yes|no": whether libshunt.so is
 * in /proc/self/maps (never, for the static build, even under shunt).
 *
 *   static_peer server [--host 127.0.0.1] [--port 0]
 *       prints "LISTENING <port>"; forks one child per connection.
 *   static_peer client --port P [--host H] [--bytes N]
 *       [--mode bulk|pingpong|halfclose] [--chunk C] [--conns K]
 *       [--timeout SECONDS]
 *       prints "CLIENT OK conns=K bytes=N mode=M", exit 0; else exit 1.
 *
 * Only IP literals are accepted as hosts (no resolver: getaddrinfo in a
 * static glibc binary would need the shared NSS modules).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "shunt_query.h"

#define PERIOD 65521

static uint8_t table[PERIOD];

static void init_table(void)
{
    for (uint32_t j = 0; j < PERIOD; j++)
        table[j] = (uint8_t)((j * 2654435761u) >> 16);
}

static void fill(uint8_t *b, size_t n, uint64_t off)
{
    size_t j = off % PERIOD;
    for (size_t i = 0; i < n; i++) {
        b[i] = table[j];
        if (++j == PERIOD)
            j = 0;
    }
}

/* Index of the first mismatch, or -1. */
static long check(const uint8_t *b, size_t n, uint64_t off)
{
    size_t j = off % PERIOD;
    for (size_t i = 0; i < n; i++) {
        if (b[i] != table[j])
            return (long)i;
        if (++j == PERIOD)
            j = 0;
    }
    return -1;
}

/* One write(2) per line so that lines from forked children do not mix. */
static void say(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (n > (int)sizeof line - 2)
        n = sizeof line - 2;
    line[n++] = '\n';
    ssize_t w = write(1, line, (size_t)n);
    (void)w;
}

static void fail(const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "CLIENT FAIL %s\n", msg);
    exit(1);
}

struct addr {
    struct sockaddr_storage ss;
    socklen_t len;
};

static int parse_addr(const char *host, int port, struct addr *a)
{
    memset(a, 0, sizeof *a);
    struct sockaddr_in *s4 = (struct sockaddr_in *)&a->ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&a->ss;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        a->len = sizeof *s4;
        return 0;
    }
    if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        a->len = sizeof *s6;
        return 0;
    }
    return -1;
}

static void set_timeouts(int fd, double seconds)
{
    struct timeval tv;
    tv.tv_sec = (time_t)seconds;
    tv.tv_usec = (suseconds_t)((seconds - (double)tv.tv_sec) * 1e6);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static int write_all(int fd, const uint8_t *b, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int read_full(int fd, uint8_t *b, size_t n)
{
    while (n > 0) {
        ssize_t r = read(fd, b, n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0) {
            errno = EPIPE; /* early EOF */
            return -1;
        }
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* ------------------------------------------------------------------ */

static void serve(int fd, int n)
{
    static uint8_t buf[65536];
    uint64_t total = 0;
    long long bad = -1;
    set_timeouts(fd, 120.0);
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            say("CONN %d ERROR read: %s", n, strerror(errno));
            _exit(1);
        }
        if (r == 0)
            break;
        if (bad < 0) {
            long i = check(buf, (size_t)r, total);
            if (i >= 0)
                bad = (long long)(total + (uint64_t)i);
        }
        if (write_all(fd, buf, (size_t)r) < 0) {
            say("CONN %d ERROR write: %s", n, strerror(errno));
            _exit(1);
        }
        total += (uint64_t)r;
    }
    shutdown(fd, SHUT_WR);
    if (bad >= 0)
        say("CONN %d RECV %llu BAD %lld", n, (unsigned long long)total, bad);
    else
        say("CONN %d RECV %llu OK", n, (unsigned long long)total);
    close(fd);
}

static int run_server(const char *host, int port)
{
    struct addr a;
    if (parse_addr(host, port, &a) < 0) {
        fprintf(stderr, "bad host %s\n", host);
        return 2;
    }
    int ls = socket(a.ss.ss_family, SOCK_STREAM, 0);
    if (ls < 0) {
        perror("socket");
        return 2;
    }
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(ls, (struct sockaddr *)&a.ss, a.len) < 0) {
        perror("bind");
        return 2;
    }
    if (listen(ls, 64) < 0) {
        perror("listen");
        return 2;
    }
    struct sockaddr_storage bound;
    socklen_t blen = sizeof bound;
    getsockname(ls, (struct sockaddr *)&bound, &blen);
    int bport = bound.ss_family == AF_INET
                    ? ntohs(((struct sockaddr_in *)&bound)->sin_port)
                    : ntohs(((struct sockaddr_in6 *)&bound)->sin6_port);
    signal(SIGCHLD, SIG_IGN); /* no zombies */
    say("LISTENING %d", bport);
    for (int n = 1;; n++) {
        int c = accept(ls, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                n--;
                continue;
            }
            perror("accept");
            return 2;
        }
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 2;
        }
        if (pid == 0) {
            close(ls);
            serve(c, n);
            _exit(0);
        }
        close(c);
    }
}

/* ------------------------------------------------------------------ */

static void expect_eof(int fd)
{
    uint8_t one;
    ssize_t r;
    do
        r = read(fd, &one, 1);
    while (r < 0 && errno == EINTR);
    if (r > 0)
        fail("extra data after the echo");
    if (r < 0)
        fail("expected EOF: %s", strerror(errno));
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void client_bulk(int fd, uint64_t nbytes, size_t chunk, double timeout)
{
    /* Non-blocking, poll-driven: send and receive at the same time. */
    uint8_t *sbuf = malloc(chunk), *rbuf = malloc(65536);
    if (!sbuf || !rbuf)
        fail("malloc");
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    uint64_t sent = 0, got = 0;
    size_t spos = 0, slen = 0; /* pending part of sbuf */
    int wr_open = 1;
    double deadline = now() + timeout;
    for (;;) {
        if (wr_open && slen == spos && sent == nbytes) {
            if (shutdown(fd, SHUT_WR) < 0)
                fail("shutdown: %s", strerror(errno));
            wr_open = 0;
        }
        struct pollfd p = {fd, POLLIN | (wr_open ? POLLOUT : 0), 0};
        int left = (int)((deadline - now()) * 1000);
        if (left <= 0)
            fail("timeout (sent %llu, echoed %llu)", (unsigned long long)sent,
                 (unsigned long long)got);
        int pr = poll(&p, 1, left);
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            fail("poll: %s", strerror(errno));
        }
        if (pr == 0)
            continue;
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            ssize_t r = read(fd, rbuf, 65536);
            if (r < 0 && errno != EAGAIN && errno != EINTR)
                fail("read at %llu: %s", (unsigned long long)got, strerror(errno));
            if (r == 0) {
                if (wr_open)
                    fail("EOF before we finished sending");
                break;
            }
            if (r > 0) {
                if (got + (uint64_t)r > nbytes)
                    fail("received more than sent");
                long i = check(rbuf, (size_t)r, got);
                if (i >= 0)
                    fail("echo mismatch at offset %llu", (unsigned long long)(got + (uint64_t)i));
                got += (uint64_t)r;
            }
        }
        if (wr_open && (p.revents & POLLOUT)) {
            if (spos == slen) {
                size_t k = chunk;
                if (nbytes - sent < k)
                    k = (size_t)(nbytes - sent);
                fill(sbuf, k, sent);
                sent += k;
                spos = 0;
                slen = k;
            }
            ssize_t w = write(fd, sbuf + spos, slen - spos);
            if (w < 0 && errno != EAGAIN && errno != EINTR)
                fail("write: %s", strerror(errno));
            if (w > 0)
                spos += (size_t)w;
        }
    }
    if (got != nbytes)
        fail("echoed %llu bytes, sent %llu", (unsigned long long)got, (unsigned long long)nbytes);
    free(sbuf);
    free(rbuf);
}

static void client_pingpong(int fd, uint64_t nbytes, size_t chunk)
{
    uint8_t *sbuf = malloc(chunk), *rbuf = malloc(chunk);
    if (!sbuf || !rbuf)
        fail("malloc");
    uint64_t off = 0;
    for (uint64_t i = 0; off < nbytes; i++) {
        size_t k = 1 + (size_t)((i * 37) % chunk);
        if (nbytes - off < k)
            k = (size_t)(nbytes - off);
        fill(sbuf, k, off);
        if (write_all(fd, sbuf, k) < 0)
            fail("write at %llu: %s", (unsigned long long)off, strerror(errno));
        if (read_full(fd, rbuf, k) < 0)
            fail("read at %llu: %s", (unsigned long long)off, strerror(errno));
        long m = check(rbuf, k, off);
        if (m >= 0)
            fail("echo mismatch at offset %llu", (unsigned long long)(off + (uint64_t)m));
        off += k;
    }
    if (shutdown(fd, SHUT_WR) < 0)
        fail("shutdown: %s", strerror(errno));
    expect_eof(fd);
    free(sbuf);
    free(rbuf);
}

static void client_halfclose(int fd, uint64_t nbytes)
{
    uint8_t *buf = malloc(nbytes ? nbytes : 1);
    if (!buf)
        fail("malloc");
    fill(buf, nbytes, 0);
    if (write_all(fd, buf, nbytes) < 0)
        fail("write: %s", strerror(errno));
    if (shutdown(fd, SHUT_WR) < 0)
        fail("shutdown: %s", strerror(errno));
    memset(buf, 0, nbytes);
    if (read_full(fd, buf, nbytes) < 0)
        fail("read echo: %s", strerror(errno));
    long m = check(buf, nbytes, 0);
    if (m >= 0)
        fail("echo mismatch at offset %ld", m);
    expect_eof(fd);
    free(buf);
}

static int run_client(const char *host, int port, uint64_t nbytes, const char *mode,
                      size_t chunk, int conns, double timeout)
{
    struct addr a;
    if (parse_addr(host, port, &a) < 0)
        fail("bad host %s", host);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i <= conns; i++) {
        int fd = socket(a.ss.ss_family, SOCK_STREAM, 0);
        if (fd < 0)
            fail("socket: %s", strerror(errno));
        set_timeouts(fd, timeout);
        if (connect(fd, (struct sockaddr *)&a.ss, a.len) < 0)
            fail("conn %d: connect: %s", i, strerror(errno));
        if (strcmp(mode, "bulk") == 0)
            client_bulk(fd, nbytes, chunk, timeout);
        else if (strcmp(mode, "pingpong") == 0)
            client_pingpong(fd, nbytes, chunk);
        else if (strcmp(mode, "halfclose") == 0)
            client_halfclose(fd, nbytes);
        else
            fail("unknown mode %s", mode);
        close(fd);
    }
    say("CLIENT OK conns=%d bytes=%llu mode=%s", conns, (unsigned long long)nbytes, mode);
    return 0;
}


static void usage(void)
{
    fprintf(stderr, "usage: static_peer server [--host H] [--port P]\n"
                    "       static_peer client --port P [--host H] [--bytes N] "
                    "[--mode bulk|pingpong|halfclose] [--chunk C] [--conns K] "
                    "[--timeout S]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    init_table();
    const char *host = "127.0.0.1", *mode = "bulk";
    int port = 0, conns = 1;
    uint64_t nbytes = 1 << 20;
    size_t chunk = 65536;
    double timeout = 60;
    for (int i = 2; i < argc; i++) {
        const char *k = argv[i];
        if (i + 1 >= argc)
            usage();
        const char *v = argv[++i];
        if (k[0] == '-' && k[1] == '-')
            k += 2;
        else if (k[0] == '-')
            k += 1;
        if (!strcmp(k, "host"))
            host = v;
        else if (!strcmp(k, "port"))
            port = atoi(v);
        else if (!strcmp(k, "bytes"))
            nbytes = strtoull(v, NULL, 10);
        else if (!strcmp(k, "mode"))
            mode = v;
        else if (!strcmp(k, "chunk"))
            chunk = (size_t)strtoull(v, NULL, 10);
        else if (!strcmp(k, "conns"))
            conns = atoi(v);
        else if (!strcmp(k, "timeout"))
            timeout = atof(v);
        else
            usage();
    }
    say("LIBSHUNT_MAPPED %s", libshunt_mapped() ? "yes" : "no");
    if (!strcmp(argv[1], "server"))
        return run_server(host, port);
    if (!strcmp(argv[1], "client")) {
        if (port <= 0 || chunk == 0)
            usage();
        return run_client(host, port, nbytes, mode, chunk, conns, timeout);
    }
    usage();
    return 2;
}
