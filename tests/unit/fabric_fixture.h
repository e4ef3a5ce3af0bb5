/*
 * fabric_fixture.h: what the fabric's unit tests share (test_fabric_engine.c,
 * test_fabric_ring.c, and bench/fabric_ring_bench.c): libshunt.so's getenv,
 * length-prefixed blobs over a socketpair, an engine and a ring pair made
 * over them, both sides meeting there, and two sides run in children of their own whose stdout and
 * stderr must stay empty.
 *
 * Each side is a child because a child may not use what its parent made of
 * UCX: the test's own process never loads it.
 */
#ifndef SHUNT_TESTS_FABRIC_FIXTURE_H
#define SHUNT_TESTS_FABRIC_FIXTURE_H

#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "base/env_override.h"
#include "transport/fabric_engine.h"
#include "transport/fabric_ring.h"

/* What interpose/env_calls.c does in libshunt.so, which unit tests do not
 * link: getenv answers the loading thread's overrides first. */
__attribute__((visibility("default"))) char *getenv(const char *name)
{
    const char *v = env_override_get(name);
    return v ? (char *)v : env_lookup(name);
}

static inline void send_blob(int fd, const void *p, uint32_t n)
{
    CHECK(write(fd, &n, 4), ==, 4);
    CHECK(write(fd, p, n), ==, (long long)n);
}

static inline void *recv_blob(int fd, uint32_t *n)
{
    CHECK(read(fd, n, 4), ==, 4);
    char *p = malloc(*n ? *n : 1);
    CHECK(p != NULL, ==, 1);
    for (uint32_t got = 0; got < *n;) {
        ssize_t r = read(fd, p + got, *n - got);
        CHECK(r, >, 0);
        got += (uint32_t)r;
    }
    return p;
}

/* This process's engine on the lanes of tls (NULL: the default); a
 * missing UCX is a skip (a failure under CI). */
static inline struct fabric_engine *engine_open(const char *tls)
{
    struct fabric_engine *e;
    char why[200] = "";
    int r = fabric_engine_open(&e, tls, why, sizeof why);
    if (r == -ENOENT)
        MISSING("UCX (Debian package libucx0): %s", why);
    if (r != 0)
        FAIL("fabric_engine_open(%s): %d %s", tls ? tls : "default", r, why);
    return e;
}

/* A ring pair with the other end of sock: this end's receive ring of
 * rx_size bytes, blobs both ways carrying nonce (NULL: zeros); the peer's
 * nonce in got (if not NULL). */
static inline struct fabric_ring *ring_connect(struct fabric_engine *e, int sock, size_t rx_size,
                                        const uint8_t *nonce, uint8_t *got, const char *tls)
{
    struct fabric_ring *f;
    char why[200] = "";
    if (fabric_ring_open(e, rx_size, &f, why, sizeof why) != 0)
        FAIL("fabric_ring_open: %s", why);
    unsigned char blob[FABRIC_RING_BLOB_MAX];
    ssize_t n = fabric_ring_blob(f, nonce, blob, sizeof blob);
    CHECK(n, >, 0);
    send_blob(sock, blob, (uint32_t)n);
    uint32_t plen;
    void *peer = recv_blob(sock, &plen);
    int r = fabric_ring_attach(f, peer, plen, got, why, sizeof why);
    if (r != 0)
        FAIL("fabric_ring_attach(%s): %d %s", tls ? tls : "default", r, why);
    free(peer);
    return f;
}

static inline double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Both sides at the same point, each driving its worker meanwhile (over
 * TCP lanes the other's puts and flushes complete only so). */
static inline void meet(int sock, struct fabric_engine *e)
{
    char c = 'm';
    CHECK(write(sock, &c, 1), ==, 1);
    struct pollfd pf = { .fd = sock, .events = POLLIN };
    double until = now_s() + 20;
    while (poll(&pf, 1, 0) == 0) {
        fabric_engine_progress(e);
        if (now_s() > until)
            FAIL("the other side never came");
    }
    CHECK(read(sock, &c, 1), ==, 1);
}

/* Where the children's stdout and stderr go: UCX must leave them empty
 * (it logs to stdout by default). */
static int child_err = -1;

static inline void children_output_open(const char *name)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/%s.XXXXXX", name);
    child_err = mkstemp(path);
    CHECK(child_err, >=, 0);
    unlink(path);
}

/* Whatever the children said, as the failure it is. */
static inline void children_silent(void)
{
    char said[1024] = "";
    ssize_t n = pread(child_err, said, sizeof said - 1, 0);
    if (n != 0)
        FAIL("the children wrote %zd bytes to stdout or stderr: %s", n, said);
}

/* Runs side(sock, 0, arg) and side(sock, 1, arg) in two children joined by
 * a socketpair; both must exit 0 and say nothing. */
static inline void run_sides(void (*side)(int sock, int i, const void *arg), const void *arg)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), ==, 0);
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        pids[i] = fork();
        CHECK(pids[i], >=, 0);
        if (pids[i] == 0) {
            dup2(child_err, 1);
            dup2(child_err, 2);
            close(sv[1 - i]);
            side(sv[i], i, arg);
            _exit(0);
        }
    }
    close(sv[0]);
    close(sv[1]);
    for (int i = 0; i < 2; i++) {
        int st;
        CHECK(waitpid(pids[i], &st, 0), ==, pids[i]);
        children_silent();
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, ==, 1);
    }
}

#endif
