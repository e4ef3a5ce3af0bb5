/*
 * synopt_peer.c: both ends of tests/integration/test_fabric_synopt.py.
 *
 *   synopt_peer serve ADDR PORT N   listens with TCP_SAVE_SYN, prints "ready",
 *                                   then for each of N accepted connections
 *                                   what registry/synopt.c reads off its SYN:
 *                                   "syn TAG COOKIE FLAGS" (hex) or "syn none"
 *   synopt_peer connect ADDR PORT N makes N connections one after another and
 *                                   prints each socket's own SO_COOKIE:
 *                                   "cookie COOKIE" (hex)
 *   synopt_peer connect-marked ADDR PORT N
 *                                   the same, each socket marked as a shunt
 *                                   process's first (SYNOPT_CLIENT_MARK in
 *                                   TCP_NOTSENT_LOWAT): "cookie COOKIE lowat
 *                                   V", V what the option holds after connect
 *   synopt_peer rate ADDR PORT N    the same N connections without a word
 *                                   each, then "rate N SECONDS" (for
 *                                   bench/fabric_cost.py)
 *
 * ADDR is IPv4 or IPv6.  Every failure is a message and exit status 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "registry/synopt.h"

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

static void die(const char *what)
{
    fprintf(stderr, "synopt_peer: %s: %s\n", what, strerror(errno));
    exit(1);
}

static socklen_t address(const char *addr, int port, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, addr, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)port);
        return sizeof *in;
    }
    if (inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)port);
        return sizeof *in6;
    }
    fprintf(stderr, "synopt_peer: not an address: %s\n", addr);
    exit(1);
}

static int serve(struct sockaddr_storage *ss, socklen_t len, int n)
{
    int l = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
        die("socket");
    int e = synopt_save_syns(l);
    if (e < 0) {
        errno = -e;
        die("TCP_SAVE_SYN");
    }
    if (bind(l, (struct sockaddr *)ss, len) < 0 || listen(l, 4096) < 0)
        die("bind/listen");
    printf("ready\n");
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        int c = accept(l, NULL, NULL);
        if (c < 0)
            die("accept");
        struct synopt o;
        int r = synopt_read(c, &o);
        if (r < 0) {
            errno = -r;
            die("TCP_SAVED_SYN");
        }
        if (r == 1)
            printf("syn %08" PRIx32 " %016" PRIx64 " %02x\n", o.boot_tag, o.cookie, o.flags);
        else
            printf("syn none\n");
        fflush(stdout);
        close(c);
    }
    close(l);
    return 0;
}

/* mark: the socket is marked as a shunt process's (SYNOPT_CLIENT_MARK in
 * TCP_NOTSENT_LOWAT) before connect, and what the option holds after it is
 * printed: 0 when the program consumed the mark. */
static int connect_n(struct sockaddr_storage *ss, socklen_t len, int n, int quiet, int mark)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        int c = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int v = SYNOPT_CLIENT_MARK;
        if (c < 0 || (mark && setsockopt(c, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof v) < 0))
            die("socket");
        if (connect(c, (struct sockaddr *)ss, len) < 0)
            die("connect");
        socklen_t vl = sizeof v;
        if (mark && getsockopt(c, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &vl) < 0)
            die("TCP_NOTSENT_LOWAT");
        uint64_t cookie;
        socklen_t cl = sizeof cookie;
        if (getsockopt(c, SOL_SOCKET, SO_COOKIE, &cookie, &cl) < 0)
            die("SO_COOKIE");
        if (!quiet && mark) {
            printf("cookie %016" PRIx64 " lowat %x\n", cookie, (unsigned)v);
            fflush(stdout);
        } else if (!quiet) {
            printf("cookie %016" PRIx64 "\n", cookie);
            fflush(stdout);
        }
        close(c);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (quiet)
        printf("rate %d %.6f\n", n, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5 || (strcmp(argv[1], "serve") && strcmp(argv[1], "connect") && strcmp(argv[1], "connect-marked") &&
                      strcmp(argv[1], "rate"))) {
        fprintf(stderr, "usage: synopt_peer serve|connect|connect-marked|rate ADDR PORT N\n");
        return 2;
    }
    struct sockaddr_storage ss;
    socklen_t len = address(argv[2], atoi(argv[3]), &ss);
    int n = atoi(argv[4]);
    if (!strcmp(argv[1], "serve"))
        return serve(&ss, len, n);
    return connect_n(&ss, len, n, !strcmp(argv[1], "rate"), !strcmp(argv[1], "connect-marked"));
}
