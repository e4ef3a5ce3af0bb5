/*
 * test_fabric_engine.c: unit tests of UCX through dlopen
 * (src/transport/fabric_engine.c).
 *
 * Two processes (a fork, each opening the engine after it: a child may not
 * use its parent's UCX state) exchange worker addresses and region keys
 * over a socketpair; the parent puts 256 KiB of a pattern into the child's
 * region in pieces, each followed by a fence and the index that publishes
 * it (the ring discipline the fabric transport will use), and the child
 * checks every byte as the index moves, then puts an acknowledgement back.
 * Once on the lanes of the default setting (which must be shared memory
 * here: no TCP lane) and once with UCX's TCP lanes forced (which must be
 * TCP).  The memory hooks stay off: the first bytes of libc's mmap, munmap,
 * brk and malloc are what they were before UCX was loaded, and UCM's
 * options say so.  A lane setting that names nothing fails with a reason.
 * SHUNT_TEST_FABRIC_TLS and SHUNT_TEST_FABRIC_LANES run the exchange once
 * more on lanes this machine may not have (RDMA), checking their names.
 * Nothing of UCX's reaches stdout or stderr (UCX logs to stdout by default;
 * a first endpoint attempt that the shared-memory lanes refuse would log an
 * error there, and a lane setting that names nothing a warning).
 * UCX must be installed (libucx0): under CI its absence fails the test.
 */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ucm/api/ucm.h>

#include "check.h"
#include "fabric_fixture.h"
#include "base/real.h"
#include "transport/fabric_engine.h"

#define REGION (512u * 1024u)
#define DATA (256u * 1024u)
#define PIECE (16u * 1024u)
#define INDEX_AT (REGION - 64u)   /* the publishing word, after the data */
#define ACK_AT (REGION - 128u)

static const char *hooked_functions[] = { "mmap", "munmap", "brk", "malloc", "free", "shmat" };
#define NHOOKED (sizeof hooked_functions / sizeof hooked_functions[0])
static unsigned char code_before[NHOOKED][16];

static void remember_code(unsigned char out[NHOOKED][16])
{
    for (size_t i = 0; i < NHOOKED; i++) {
        void *f = dlsym(RTLD_DEFAULT, hooked_functions[i]);
        CHECK(f != NULL, ==, 1);
        memcpy(out[i], f, 16);
    }
}

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 131u + (i >> 9));
}

/* Waits, driving the worker, until the word *w is at least want, and
 * returns it (bounded: a lost put fails the test instead of hanging it). */
static uint64_t await_word(struct fabric_engine *e, volatile uint64_t *w, uint64_t want)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t v;
    while ((v = *w) < want) {
        fabric_engine_progress(e);
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > 10)
            FAIL("word stayed %llu, waited for %llu", (unsigned long long)v, (unsigned long long)want);
    }
    return v;
}

/* One side: opens the engine, trades addresses and keys with the other
 * end of sock, and plays its part.  Returns the lanes it used in lanes. */
static void side(int sock, bool writer, const char *tls, char *lanes, size_t lanes_len)
{
    struct fabric_engine *e = engine_open(tls);
    char why[200] = "";
    int r;
    CHECK(fabric_engine_efd(e), >=, 0);

    struct fabric_region reg;
    CHECK(fabric_region_map(e, REGION, &reg), ==, 0);
    memset(reg.base, 0, REGION);
    void *addr;
    size_t alen;
    CHECK(fabric_engine_address(e, &addr, &alen), ==, 0);
    send_blob(sock, addr, (uint32_t)alen);
    send_blob(sock, reg.rkey, (uint32_t)reg.rkey_len);
    uint64_t base = (uint64_t)(uintptr_t)reg.base;
    send_blob(sock, &base, 8);
    uint32_t palen, prklen, n8;
    void *paddr = recv_blob(sock, &palen);
    void *prkey = recv_blob(sock, &prklen);
    uint64_t *pbase = recv_blob(sock, &n8);
    CHECK(n8, ==, 8);

    struct fabric_peer *p;
    r = fabric_peer_connect(e, paddr, palen, prkey, prklen, *pbase, &p, why, sizeof why);
    if (r != 0)
        FAIL("fabric_peer_connect(%s): %d %s", tls ? tls : "default", r, why);
    fabric_peer_lanes(p, lanes, lanes_len);
    CHECK(lanes[0] != '\0', ==, 1);

    volatile uint64_t *index = (volatile uint64_t *)((char *)reg.base + INDEX_AT);
    volatile uint64_t *ack = (volatile uint64_t *)((char *)reg.base + ACK_AT);
    if (writer) {
        static unsigned char data[DATA];
        for (size_t i = 0; i < DATA; i++)
            data[i] = pattern(i);
        for (uint64_t off = 0; off < DATA; off += PIECE) {
            CHECK(fabric_put(p, off, data + off, PIECE), ==, 0);
            CHECK(fabric_fence(p), ==, 0);   /* the data before the index that publishes it */
            uint64_t published = off + PIECE;
            CHECK(fabric_put(p, INDEX_AT, &published, 8), ==, 0);
        }
        CHECK(fabric_flush(p), ==, 0);
        await_word(e, ack, DATA);
    } else {
        const unsigned char *got = reg.base;
        for (uint64_t seen = 0; seen < DATA;) {
            /* every byte below the index must be there once it is seen */
            uint64_t published = await_word(e, index, seen + 1);
            CHECK(published, <=, DATA);
            for (uint64_t i = seen; i < published; i++)
                if (got[i] != pattern(i))
                    FAIL("byte %llu: %u, not %u", (unsigned long long)i, got[i], pattern(i));
            seen = published;
        }
        uint64_t done = DATA;
        CHECK(fabric_put(p, ACK_AT, &done, 8), ==, 0);
        CHECK(fabric_flush(p), ==, 0);
    }
    /* both sides done before either goes away, each driving its worker
     * meanwhile: over TCP lanes the other's last put completes only so */
    char c = 'x';
    CHECK(write(sock, &c, 1), ==, 1);
    struct pollfd pf = { .fd = sock, .events = POLLIN };
    for (int waited = 0; poll(&pf, 1, 0) == 0; waited++) {
        fabric_engine_progress(e);
        if (waited > 10 * 1000 * 1000)
            FAIL("the other side never finished");
    }
    CHECK(read(sock, &c, 1), ==, 1);
    fabric_peer_close(p);
    fabric_region_unmap(e, &reg);
    fabric_engine_address_free(e, addr);
    fabric_engine_close(e);
    free(paddr);
    free(prkey);
    free(pbase);
}

static void test_hooks_off(void)
{
    unsigned char after[NHOOKED][16];
    remember_code(after);
    for (size_t i = 0; i < NHOOKED; i++)
        if (memcmp(code_before[i], after[i], 16) != 0)
            FAIL("%s was patched after UCX was loaded", hooked_functions[i]);
    void *ucm = dlopen("libucm.so.0", RTLD_NOW | RTLD_NOLOAD);   /* loaded with libucp, locally */
    CHECK(ucm != NULL, ==, 1);
    const ucm_global_config_t *opts = dlsym(ucm, "ucm_global_opts");
    CHECK(opts != NULL, ==, 1);
    CHECK(opts->enable_events, ==, 0);
    CHECK(opts->enable_malloc_hooks, ==, 0);
    CHECK(opts->enable_malloc_reloc, ==, 0);
}

/* What a pair runs on: the lane setting, what must be among the lanes the
 * writer used and what must not (if anything). */
struct lanes_want {
    const char *tls, *want, *refuse;
};

static void pair_side(int sock, int i, const void *arg)
{
    const struct lanes_want *w = arg;
    char lanes[128];
    side(sock, i == 0, w->tls, lanes, sizeof lanes);
    if (i == 0) {
        if (!strstr(lanes, w->want) || (w->refuse && strstr(lanes, w->refuse)))
            FAIL("%s: lanes %s, wanted %s%s%s", w->tls ? w->tls : "default", lanes, w->want,
                 w->refuse ? " and no " : "", w->refuse ? w->refuse : "");
        test_hooks_off();
    }
}

/* The pair, each side a child of its own (this process never loads UCX:
 * a child may not use what its parent made of it).  The writer checks the
 * lanes it used: want among them, refuse (if any) not. */
static void pair(const char *tls, const char *want, const char *refuse)
{
    struct lanes_want w = { tls, want, refuse };
    run_sides(pair_side, &w);
}

static void test_bad_lanes(void)
{
    struct fabric_engine *e = NULL;
    char why[200] = "";
    CHECK(fabric_engine_open(&e, "no_such_transport", why, sizeof why), <, 0);
    CHECK(why[0] != '\0', ==, 1);
    CHECK(e == NULL, ==, 1);
}

int main(void)
{
    shunt_real_resolve();   /* what libshunt.so's start-up does: the engine calls libc through the table */
    remember_code(code_before);
    children_output_open("test_fabric_engine");
    pair(NULL, "memory", "tcp");   /* shared memory here: sysv, posix or cma */
    pair("tcp", "tcp", NULL);
    /* On a machine with other lanes (RDMA: rc, ud, dc), the same exchange on
     * them: SHUNT_TEST_FABRIC_TLS names UCX's transports, and the lanes must
     * name SHUNT_TEST_FABRIC_LANES (docs/testing.md, "On a machine with RDMA
     * hardware").  Named without the other, a failure, not a silent skip. */
    const char *tls = getenv("SHUNT_TEST_FABRIC_TLS"), *lanes = getenv("SHUNT_TEST_FABRIC_LANES");
    if (tls || lanes) {
        if (!tls || !lanes || !*tls || !*lanes)
            FAIL("SHUNT_TEST_FABRIC_TLS and SHUNT_TEST_FABRIC_LANES go together (%s, %s)", tls ? tls : "unset",
                 lanes ? lanes : "unset");
        pair(tls, lanes, NULL);
        printf("ok: lanes %s on SHUNT_TEST_FABRIC_TLS=%s\n", lanes, tls);
    }
    pid_t pid = fork();
    CHECK(pid, >=, 0);
    if (pid == 0) {
        dup2(child_err, 1);
        dup2(child_err, 2);
        test_bad_lanes();
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0), ==, pid);
    children_silent();
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, ==, 1);
    PASS();
}
