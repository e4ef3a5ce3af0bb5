/*
 * floor_ring.h: pingpong's shared-memory floor (-t shm): two bare rings in
 * memory both processes map, a copy in and a copy out and no system call,
 * what any shared-memory transport must pay at least.  The waiting that
 * keeps two processes on two cores (or one) from starving each other, the
 * copy that avoids glibc's slow overlapping-page memcpy, and the map.
 */
#ifndef SHUNT_BENCH_FLOOR_RING_H
#define SHUNT_BENCH_FLOOR_RING_H

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <time.h>

#define GIVE_UP_NS (120LL * 1000000000LL)
#define FLOOR_RING (1u << 20)  /* as shunt's default ring: 1 MiB each way */
#define FLOOR_PIECE (64u << 10) /* published piece by piece, so the reader copies out while the writer copies in */
#define CACHE_LINE 64

/* One direction of the floor: indexes on their own cache lines. */
struct floor_ring {
    _Alignas(CACHE_LINE) _Atomic uint64_t head; /* written by the producer */
    _Alignas(CACHE_LINE) _Atomic uint64_t tail; /* written by the consumer */
    _Alignas(CACHE_LINE) char data[FLOOR_RING];
};

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

/* The floor's wait: spin with pause a bounded number of times, then yield
 * the CPU at every look, so that when both processes share a core (2 cores,
 * other programs) the other side runs at once; only after a long wait (the
 * peer is busy elsewhere) nap.  Gives up after GIVE_UP_NS or when the peer
 * has gone. */
struct waiter {
    unsigned long spins;
    long long since;
};

#define SPIN_LOOKS 1000        /* pause, look again: well under 100 us */
#define YIELD_NS 10000000LL    /* then sched_yield between looks, 10 ms */

static void waiter_pause(struct waiter *w, pid_t peer)
{
    if (++w->spins < SPIN_LOOKS) {
        cpu_relax();
        return;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long t = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    if (!w->since)
        w->since = t;
    if (t - w->since < YIELD_NS) {
        sched_yield();
        return;
    }
    if (t - w->since > GIVE_UP_NS || (peer > 0 && kill(peer, 0) < 0 && errno == ESRCH)) {
        fprintf(stderr, "pingpong: the peer stopped answering on the shared-memory floor\n");
        exit(1);
    }
    struct timespec nap = { 0, 50000 };
    nanosleep(&nap, NULL);
}

/* glibc's memcpy of about 2 KiB to 1 MiB runs several times slower when
 * the destination sits just ahead of the source within a 4 KiB page (glibc
 * bug 30994); the ring's position drifts with odd sizes, so such copies go
 * in 1 KiB pieces, as shunt's ring does.  A floor must not trip on it. */
static void copy(char *dst, const char *src, size_t n)
{
    size_t ahead = (size_t)(dst - src) & 4095;
    if (n < 2048 || ahead == 0 || ahead >= 64) {
        memcpy(dst, src, n);
        return;
    }
    for (size_t off = 0; off < n; off += 1024)
        memcpy(dst + off, src + off, n - off < 1024 ? n - off : 1024);
}

/* floor_send, floor_recv and floor_map are inline: pingpong_conn.c uses the
 * first two and pingpong.c the last, and neither may warn of the others. */
static inline int floor_send(struct floor_ring *r, pid_t peer, const char *b, size_t n)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    while (n > 0) {
        struct waiter w = { 0, 0 };
        uint64_t tail;
        /* acquire: pairs with the consumer's release of tail, so its copy
         * out of the space we reuse is finished */
        while (head - (tail = atomic_load_explicit(&r->tail, memory_order_acquire)) == FLOOR_RING)
            waiter_pause(&w, peer);
        size_t space = FLOOR_RING - (size_t)(head - tail);
        size_t off = (size_t)(head % FLOOR_RING);
        size_t len = n < space ? n : space;
        if (len > FLOOR_RING - off)
            len = FLOOR_RING - off;
        if (len > FLOOR_PIECE)
            len = FLOOR_PIECE;
        copy(r->data + off, b, len);
        head += len;
        /* release: pairs with the consumer's acquire of head; the bytes are there */
        atomic_store_explicit(&r->head, head, memory_order_release);
        b += len;
        n -= len;
    }
    return 0;
}

static inline int floor_recv(struct floor_ring *r, pid_t peer, char *b, size_t n)
{
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    while (n > 0) {
        struct waiter w = { 0, 0 };
        uint64_t head;
        /* acquire: pairs with the producer's release of head */
        while ((head = atomic_load_explicit(&r->head, memory_order_acquire)) == tail)
            waiter_pause(&w, peer);
        size_t avail = (size_t)(head - tail);
        size_t off = (size_t)(tail % FLOOR_RING);
        size_t len = n < avail ? n : avail;
        if (len > FLOOR_RING - off)
            len = FLOOR_RING - off;
        copy(b, r->data + off, len);
        tail += len;
        /* release: pairs with the producer's acquire of tail; we are done reading */
        atomic_store_explicit(&r->tail, tail, memory_order_release);
        b += len;
        n -= len;
    }
    return 1;
}

static inline void *floor_map(void)
{
    void *m = mmap(NULL, 2 * sizeof(struct floor_ring), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return m;
}

#endif
