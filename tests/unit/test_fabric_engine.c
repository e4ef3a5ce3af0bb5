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
#define WARM_AT (REGION - 192u)
#define SMALL 4096u   /* what a writer's puts may leave in flight as it dies */

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

/* Trades worker addresses, and the key and base of each of n regions,
 * with the other end of sock, and connects peers[k] to the other's region
 * k (its regions mapped as many as ours). */
static void trade(struct fabric_engine *e, int sock, const char *tls, const struct fabric_region *regs, size_t n,
                  struct fabric_peer **peers)
{
    void *addr;
    size_t alen;
    CHECK(fabric_engine_address(e, &addr, &alen), ==, 0);
    send_blob(sock, addr, (uint32_t)alen);
    fabric_engine_address_free(e, addr);
    for (size_t k = 0; k < n; k++) {
        uint64_t base = (uint64_t)(uintptr_t)regs[k].base;
        send_blob(sock, regs[k].rkey, (uint32_t)regs[k].rkey_len);
        send_blob(sock, &base, sizeof base);
    }
    uint32_t palen;
    void *paddr = recv_blob(sock, &palen);
    for (size_t k = 0; k < n; k++) {
        uint32_t prklen, n8;
        void *prkey = recv_blob(sock, &prklen);
        uint64_t *pbase = recv_blob(sock, &n8);
        CHECK(n8, ==, 8);
        char why[200] = "";
        int r = fabric_peer_connect(e, paddr, palen, prkey, prklen, *pbase, &peers[k], why, sizeof why);
        if (r != 0)
            FAIL("fabric_peer_connect(%s): %d %s", tls ? tls : "default", r, why);
        free(prkey);
        free(pbase);
    }
    free(paddr);
}

/* One side: opens the engine, trades addresses and keys with the other
 * end of sock, and plays its part.  Returns the lanes it used in lanes. */
static void side(int sock, bool writer, const char *tls, char *lanes, size_t lanes_len)
{
    struct fabric_engine *e = engine_open(tls);
    CHECK(fabric_engine_efd(e), >=, 0);

    struct fabric_region reg;
    CHECK(fabric_region_map(e, REGION, &reg), ==, 0);
    memset(reg.base, 0, REGION);
    struct fabric_peer *p;
    trade(e, sock, tls, &reg, 1, &p);
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
    fabric_engine_close(e);
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

/* Over UCX's TCP lanes, a writer whose process ends (_exit, as a kill
 * would) right after its puts went, before the reader drove its worker:
 * the reader then takes them and must go on.  UCX's own software put had
 * the reader answer each one, and an answer that could not go (the
 * writer's socket gone) aborted the reader's process ("unexpected error",
 * the fabric-tcp mode's poll_before_claim and procs_epoll_peer_killed).
 * The reader also checks that what came landed, that a put for a region
 * given back lands nowhere (it finds no region by its id), and that a
 * get of a region the peer gave back says so (-ENOENT). */
static void dying_writer_side(int sock, int i, const void *arg)
{
    (void)arg;
    struct fabric_engine *e = engine_open("tcp");
    struct fabric_region regs[2];   /* the live one, and one the reader gives back */
    CHECK(fabric_region_map(e, REGION, &regs[0]), ==, 0);
    CHECK(fabric_region_map(e, REGION, &regs[1]), ==, 0);
    memset(regs[0].base, 0, REGION);
    memset(regs[1].base, 0, REGION);
    struct fabric_region reg = regs[0], old = regs[1];
    struct fabric_peer *peers[2];
    trade(e, sock, "tcp", regs, 2, peers);
    struct fabric_peer *p = peers[0], *p_old = peers[1];
    /* both endpoints wired up first, both sides driving their workers (a
     * first put waits for the peer's progress over TCP lanes) */
    uint64_t one = 1;
    CHECK(fabric_put(p, WARM_AT, &one, 8), ==, 0);
    CHECK(fabric_put(p_old, WARM_AT, &one, 8), ==, 0);
    await_word(e, (volatile uint64_t *)((char *)reg.base + WARM_AT), 1);
    await_word(e, (volatile uint64_t *)((char *)old.base + WARM_AT), 1);
    meet(sock, e);
    volatile uint64_t *index = (volatile uint64_t *)((char *)reg.base + INDEX_AT);
    if (i == 0) {
        /* the writer: its old region's key is given back first */
        static unsigned char data[SMALL];   /* (in the sockets' buffers: the reader drives nothing now) */
        for (size_t k = 0; k < SMALL; k++)
            data[k] = pattern(k);
        CHECK(fabric_put(p, 0, data, SMALL), ==, 0);
        uint64_t published = SMALL;
        CHECK(fabric_put(p, INDEX_AT, &published, 8), ==, 0);
        char c;
        CHECK(read(sock, &c, 1), ==, 1);   /* the reader gave its old region back */
        static unsigned char stray[SMALL];
        memset(stray, 0xAB, sizeof stray);   /* would show in the live region if misrouted */
        CHECK(fabric_put(p_old, 0, stray, SMALL), ==, 0);
        uint64_t late = 1;
        CHECK(fabric_put(p, ACK_AT, &late, 8), ==, 0);   /* after the late put, on the same lane */
        _exit(0);   /* no flush, no close: the reader has not driven its worker since */
    }
    /* the reader: gives its old region back, then sleeps while the writer
     * puts and goes, then takes it all */
    fabric_region_unmap(e, &old);
    char c = 'g';
    CHECK(write(sock, &c, 1), ==, 1);
    CHECK(read(sock, &c, 1), <=, 0);   /* the writer's process is gone (its end closed) */
    uint64_t got = await_word(e, index, SMALL);
    CHECK(got, ==, SMALL);
    await_word(e, (volatile uint64_t *)((char *)reg.base + ACK_AT), 1);
    for (int k = 0; k < 1000; k++)
        fabric_engine_progress(e);   /* whatever else of the dead writer's comes (the late put), here */
    for (size_t k = 0; k < SMALL; k++)
        if (((unsigned char *)reg.base)[k] != pattern(k))
            FAIL("byte %zu: %u, not %u", k, ((unsigned char *)reg.base)[k], pattern(k));
    fabric_peer_close(p_old);
    fabric_peer_close(p);
    fabric_region_unmap(e, &reg);
    fabric_engine_close(e);
}

/* Over UCX's TCP lanes, a get of a region its peer gave back answers
 * -ENOENT (its owner went with it: fabric_ring_peer_owner_left). */
static void region_gone_side(int sock, int i, const void *arg)
{
    (void)arg;
    struct fabric_engine *e = engine_open("tcp");
    struct fabric_region reg;
    CHECK(fabric_region_map(e, REGION, &reg), ==, 0);
    struct fabric_peer *p;
    trade(e, sock, "tcp", &reg, 1, &p);
    uint64_t v = 0x1234;
    if (i == 1) {
        memcpy((char *)reg.base + ACK_AT, &v, 8);
        meet(sock, e);
        meet(sock, e);   /* (the other side read it) */
        fabric_region_unmap(e, &reg);
        meet(sock, e);
        meet(sock, e);   /* (the other side asked again) */
    } else {
        meet(sock, e);
        uint64_t got = 0;
        CHECK(fabric_get(p, ACK_AT, &got, 8), ==, 0);
        CHECK(got, ==, v);
        CHECK(fabric_get(p, REGION - 4, &got, 8), ==, -ENOENT);   /* past its end: no such range */
        meet(sock, e);
        meet(sock, e);
        CHECK(fabric_get(p, ACK_AT, &got, 8), ==, -ENOENT);
        meet(sock, e);
        fabric_region_unmap(e, &reg);
    }
    fabric_peer_close(p);
    fabric_engine_close(e);
}

/* Over UCX's TCP lanes, a get from a peer whose process ended while the
 * connection's socket said nothing (a killed peer's FIN can wait behind
 * bytes this end has not read: procs_epoll_peer_killed in the fabric-tcp
 * mode) is -EPIPE, the peer gone, as soon as its process is seen gone:
 * before, the wait ran its 5 s and the stream broke (-ETIMEDOUT, or -EIO
 * from UCX).  A flush then waits for nothing. */
static void peer_ended_side(int sock, int i, const void *arg)
{
    (void)arg;
    struct fabric_engine *e = engine_open("tcp");
    struct fabric_region reg;
    CHECK(fabric_region_map(e, REGION, &reg), ==, 0);
    memset(reg.base, 0, REGION);
    struct fabric_peer *p;
    trade(e, sock, "tcp", &reg, 1, &p);
    uint64_t one = 1;   /* wired up both ways first */
    CHECK(fabric_put(p, WARM_AT, &one, 8), ==, 0);
    await_word(e, (volatile uint64_t *)((char *)reg.base + WARM_AT), 1);
    uint32_t me = (uint32_t)getpid(), peer = 0;
    CHECK(write(sock, &me, sizeof me), ==, (ssize_t)sizeof me);
    CHECK(read(sock, &peer, sizeof peer), ==, (ssize_t)sizeof peer);
    meet(sock, e);
    if (i == 1)
        _exit(0);   /* gone, its engine's sockets with it: no close */
    char c;
    CHECK(read(sock, &c, 1), <=, 0);   /* its process has ended */
    fabric_peer_watch(p, -1, peer);    /* no socket to tell: its process alone */
    uint64_t got = 0;
    CHECK(fabric_get(p, ACK_AT, &got, 8), ==, -EPIPE);
    CHECK(fabric_flush(p), ==, 0);
    fabric_peer_close(p);
    fabric_region_unmap(e, &reg);
    fabric_engine_close(e);
}

/* Both ends in one process (UCX's `self` lane: it reads and writes the
 * region's address itself): an end that gives its region back while the
 * other's endpoint to it remains keeps it mapped until that endpoint goes,
 * so a last look at the region (a peer's close reads its owner's words)
 * reads what was there.  With UCX 1.15 and later it was a SIGSEGV (dup_close
 * and three more conformance programs in the fabric mode); Debian's 1.13.1
 * made the same look harmless (run again on other versions by
 * tests/integration/test_ucx_versions.py).  Then, both gone, the engine is
 * idle. */
static void test_self_region_kept(void)
{
    struct fabric_engine *e = engine_open(NULL);
    struct fabric_region reg;
    CHECK(fabric_region_map(e, REGION, &reg), ==, 0);
    memset(reg.base, 0, REGION);
    void *addr;
    size_t alen;
    CHECK(fabric_engine_address(e, &addr, &alen), ==, 0);
    struct fabric_peer *p;
    char why[200] = "", lanes[200] = "";
    CHECK(fabric_peer_connect(e, addr, alen, reg.rkey, reg.rkey_len, (uint64_t)(uintptr_t)reg.base, &p, why,
                              sizeof why), ==, 0);
    fabric_engine_address_free(e, addr);
    fabric_peer_lanes(p, lanes, sizeof lanes);
    if (!strstr(lanes, "self"))
        FAIL("an endpoint of the worker to itself uses lanes %s, not self", lanes);
    uint64_t v = 0x5eed, got = 0;
    CHECK(fabric_put(p, ACK_AT, &v, 8), ==, 0);
    CHECK(fabric_flush(p), ==, 0);
    CHECK(*(volatile uint64_t *)((char *)reg.base + ACK_AT), ==, v);
    fabric_region_unmap(e, &reg);
    CHECK(fabric_engine_idle(e), ==, 0);   /* (the peer) */
    for (int k = 0; k < 3; k++) {
        got = 0;
        CHECK(fabric_get(p, ACK_AT, &got, 8), ==, 0);
        CHECK(got, ==, v);
    }
    CHECK(fabric_put(p, WARM_AT, &v, 8), ==, 0);
    fabric_peer_close(p);
    CHECK(fabric_engine_idle(e), ==, 1);
    fabric_engine_close(e);
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
    run_sides(dying_writer_side, NULL);
    run_sides(region_gone_side, NULL);
    run_sides(peer_ended_side, NULL);
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
    void (*alone[])(void) = { test_bad_lanes, test_self_region_kept };
    for (size_t k = 0; k < sizeof alone / sizeof alone[0]; k++) {
        pid_t pid = fork();   /* (the engine opened after the fork: see the top) */
        CHECK(pid, >=, 0);
        if (pid == 0) {
            dup2(child_err, 1);
            dup2(child_err, 2);
            alone[k]();
            _exit(0);
        }
        int st;
        CHECK(waitpid(pid, &st, 0), ==, pid);
        children_silent();
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            FAIL("case %zu of one process: %s %d", k, WIFEXITED(st) ? "exit" : "signal",
                 WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    PASS();
}
