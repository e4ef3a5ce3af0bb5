/*
 * pxt.c: client and server of the experiments in FINDINGS.md (issue 19 item 1).
 *
 *   pxt server ADDR PORT MODE N [hs]
 *       MODE shunt: TCP_SAVE_SYN=1 before listen (what a shunt listener would do);
 *            late:  TCP_SAVE_SYN=1 after listen; plain: nothing.
 *       For each of N connections: reads the saved SYN, reports shunt's fabric option
 *       (0x5348: tag, cookie) and the experiment's P option (0x5350); with "hs", when P
 *       was there, writes the server hello H_s = "SHUNT-HS" + client cookie (BE) first,
 *       then "DATA\n"; without, writes "DATA\n" only.  Then reads until EOF.
 *   pxt client ADDR PORT MODE [writefirst]
 *       MODE shunt: TCP_SAVE_SYN=1 before connect; lowat: TCP_NOTSENT_LOWAT=0x7F534850
 *       before connect (experiment 3; also reports the value after connect); plain: nothing.  Reports
 *       TCP_SAVE_SYN after connect (the program's answer: 2 = SYN-ACK carried S,
 *       0 = it did not, 1 = no program ran), TCP_SAVED_SYN on the active socket, the
 *       socket's cookie, then reads the stream start and says whether it is H_s with
 *       its own cookie.
 *   pxt bench ADDR PORT MODE N   connect/close N times (MODE as client), prints rate.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif
static const char HS[8] = { 'S', 'H', 'U', 'N', 'T', '-', 'H', 'S' };

static uint64_t be64(const uint8_t *p) { uint64_t v = 0; for (int i = 0; i < 8; i++) v = v << 8 | p[i]; return v; }

static void addr(struct sockaddr_in *a, const char *ip, int port)
{
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET; a->sin_port = htons(port); inet_pton(AF_INET, ip, &a->sin_addr);
}

/* walks the TCP options of an IPv4 SYN; reports kind 253 options */
static int parse(const uint8_t *p, int n, uint64_t *cookie, int *haveP, int *haveF)
{
    *haveP = *haveF = 0;
    if (n < 20) return -1;
    int ihl = (p[0] & 15) * 4;
    const uint8_t *t = p + ihl;
    int doff = (t[12] >> 4) * 4;
    const uint8_t *o = t + 20, *end = t + doff;
    while (o < end) {
        if (*o == 0) break;
        if (*o == 1) { o++; continue; }
        if (o + 1 >= end || o[1] < 2 || o + o[1] > end) break;
        if (o[0] == 253 && o[1] >= 4) {
            int exid = o[2] << 8 | o[3];
            if (exid == 0x5348 && o[1] == 16) { *haveF = 1; *cookie = be64(o + 8); }
            if (exid == 0x5350) *haveP = 1;
        }
        o += o[1];
    }
    return 0;
}

static int server(int argc, char **argv)
{
    const char *mode = argv[4];
    int n = atoi(argv[5]), hs = argc > 6 && !strcmp(argv[6], "hs");
    int one = 1;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a; addr(&a, argv[2], atoi(argv[3]));
    if (bind(l, (void *)&a, sizeof a) < 0) { perror("bind"); return 1; }
    if (!strcmp(mode, "shunt")) setsockopt(l, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof one);
    if (listen(l, 4096) < 0) { perror("listen"); return 1; }
    if (!strcmp(mode, "late")) setsockopt(l, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof one);
    printf("server: listening (%s)\n", mode); fflush(stdout);
    for (int i = 0; i < n; i++) {
        int c = accept(l, NULL, NULL);
        if (c < 0) { perror("accept"); return 1; }
        uint8_t syn[512]; socklen_t sl = sizeof syn;
        uint64_t cookie = 0; int P = 0, F = 0;
        if (getsockopt(c, IPPROTO_TCP, TCP_SAVED_SYN, syn, &sl) == 0 && sl > 0) parse(syn, sl, &cookie, &P, &F);
        else sl = 0;
        if (n <= 5) { printf("server: conn %d saved_syn %u bytes, fabric option %s cookie %#llx, P option %s\n", i, sl, F ? "yes" : "no",
                      (unsigned long long)cookie, P ? "yes" : "no"); fflush(stdout); }
        if (hs && P && F) {
            uint8_t h[16]; memcpy(h, HS, 8);
            for (int k = 0; k < 8; k++) h[8 + k] = cookie >> (56 - 8 * k);
            write(c, h, 16);
        }
        if (n <= 5) write(c, "DATA\n", 5);
        char b[256];
        while (read(c, b, sizeof b) > 0) {}
        close(c);
    }
    return 0;
}

static int client(int argc, char **argv)
{
    const char *mode = argv[4];
    int one = 1, v; socklen_t vl;
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (!strcmp(mode, "shunt")) setsockopt(s, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof one);
    int magic = 0x7F534850;
    if (!strcmp(mode, "lowat") && setsockopt(s, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &magic, sizeof magic) < 0) perror("setsockopt lowat");
    struct sockaddr_in a; addr(&a, argv[2], atoi(argv[3]));
    if (connect(s, (void *)&a, sizeof a) < 0) { perror("connect"); return 1; }
    if (!strcmp(mode, "lowat")) { vl = sizeof v; getsockopt(s, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &vl);
        printf("client: TCP_NOTSENT_LOWAT after connect = %#x (%s)\n", v, v == magic ? "not consumed: no program" : v == 0 ? "consumed by the program" : "?"); }
    vl = sizeof v; v = -1;
    getsockopt(s, IPPROTO_TCP, TCP_SAVE_SYN, &v, &vl);
    uint64_t ck = 0; socklen_t cl = sizeof ck;
    getsockopt(s, SOL_SOCKET, SO_COOKIE, &ck, &cl);
    uint8_t syn[512]; socklen_t sl = sizeof syn;
    int r = getsockopt(s, IPPROTO_TCP, TCP_SAVED_SYN, syn, &sl);
    printf("client: uid %d, TCP_SAVE_SYN after connect = %d (%s), TCP_SAVED_SYN on active socket: rc %d errno %d len %u, cookie %#llx\n",
           getuid(), v, v == 2 ? "server listener marked (S on SYN-ACK)" : v == 0 ? "program ran, no S" : v == 1 ? "no program" : "-",
           r, r ? errno : 0, r ? 0 : sl, (unsigned long long)ck);
    if (argc > 5 && !strcmp(argv[5], "writefirst")) write(s, "GET / HTTP/1.0\r\n\r\n", 18);
    /* the stream start: wait for 16 bytes or 1 s */
    uint8_t b[64]; int got = 0;
    struct pollfd p = { s, POLLIN, 0 };
    while (got < 16 && poll(&p, 1, 1000) > 0) {
        int k = recv(s, b + got, sizeof b - got, MSG_PEEK);
        if (k <= 0 || k == got) break;
        got = k;
    }
    if (got >= 16 && !memcmp(b, HS, 8) && be64(b + 8) == ck) {
        recv(s, b, 16, 0);
        printf("client: stream starts with H_s naming my cookie: server process runs shunt; stripped 16 bytes\n");
    } else
        printf("client: stream starts with %d bytes, not H_s\n", got);
    int k = read(s, b, sizeof b - 1);
    if (k > 0) { b[k] = 0; printf("client: program data: %s", (char *)b); }
    shutdown(s, SHUT_WR);
    close(s);
    fflush(stdout);
    return 0;
}

static int bench(int argc, char **argv)
{
    const char *mode = argv[4];
    int n = atoi(argv[5]), one = 1;
    struct sockaddr_in a; addr(&a, argv[2], atoi(argv[3]));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (!strcmp(mode, "shunt")) setsockopt(s, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof one);
        int magic = 0x7F534850;
        if (!strcmp(mode, "lowat")) setsockopt(s, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &magic, sizeof magic);
        if (connect(s, (void *)&a, sizeof a) < 0) { perror("connect"); return 1; }
        if (!strcmp(mode, "lowat")) { int v; socklen_t vl = sizeof v; getsockopt(s, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, &vl); }
        if (!strcmp(mode, "shunt") || !strcmp(mode, "lowat")) { int v; socklen_t vl = sizeof v; getsockopt(s, IPPROTO_TCP, TCP_SAVE_SYN, &v, &vl); }
        close(s);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("bench %s: %d connects in %.3f s, %.0f/s\n", mode, n, dt, n / dt);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 6 && !strcmp(argv[1], "server")) return server(argc, argv);
    if (argc >= 5 && !strcmp(argv[1], "client")) return client(argc, argv);
    if (argc >= 6 && !strcmp(argv[1], "bench")) return bench(argc, argv);
    fprintf(stderr, "usage: see the comment at the top\n");
    return 2;
}
