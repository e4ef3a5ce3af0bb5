/*
 * short_conns.c: connections too short to pay for a channel.
 *
 * An accelerated connection costs more to make than a kernel TCP one: a
 * segment in /dev/shm made, mapped, unmapped and unlinked, an offer posted
 * and claimed, the claim proved with sock_diag.  On this machine that is
 * about 250 us of CPU over both ends, against 50 us for the kernel's whole
 * connect, accept and close (docs/benchmarks.md, "Short connections").  A
 * connection pays it back through its exchanges (a kernel TCP round trip
 * costs some 70 us, the ring's under 1 us) or its bulk bytes; one that
 * carries a request and its answer never does.
 *
 * The connections a process makes to one destination tend to be alike (a
 * load generator's, an HTTP client without keep-alive, a pool of long
 * ones), so the client judges each accelerated connection at its close and
 * remembers, per destination, how many in a row were short.  After
 * STREAK_MIN of them the destination's new connections stay on kernel TCP
 * (reason "short"), except samples at growing intervals (every 2nd, 4th,
 * ... 16384th connection, and at least every SAMPLE_SECONDS): a sample
 * that was worth its channel accelerates the destination's connections
 * again at once.  A sample costs a channel's making (a few hundred us);
 * the count bounds their share of a busy client's connections, the time
 * how long a slow one's change from short to long goes unnoticed.  Nothing here touches the
 * byte stream or the server: a connection not offered is plain kernel TCP
 * from its first byte.  SHUNT_SHORT_CONNS=0 offers every connection.
 *
 * The table is this process's, a few slots indexed by a hash of the
 * destination, updated with relaxed atomics: a lost update or two
 * destinations in one slot cost a sample more or less, never a byte.
 */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "base/self.h"
#include "core/conn/short_conns.h"

/* A connection pays for its channel with this many data calls at the
 * client's end (four request/response round trips), or this many bytes. */
#define WORTH_CALLS 8u
#define WORTH_BYTES (512u * 1024u)
/* Short connections in a row before a destination's start on TCP, and the
 * widest gap between two samples. */
#define STREAK_MIN 4u
#define GAP_MAX 16384u
#define SAMPLE_SECONDS 10u

#define SLOTS 64u
#define PROBES 4u

struct dest {
    _Atomic uint64_t key;       /* hash of the destination, never 0; 0: a free slot */
    atomic_uint streak;         /* short connections in a row */
    atomic_uint skip;           /* connections left to put on TCP before the next sample */
    atomic_uint sampled;        /* when the last sample went (now_s) */
};

/* Seconds of the coarse monotonic clock: no clock read, a tick's precision. */
static unsigned now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (unsigned)ts.tv_sec;
}

static struct dest table[SLOTS];

static uint64_t mix(uint64_t h)
{
    /* the finalizer of splitmix64: every bit of h moves every bit out */
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

static uint64_t dest_key(const struct reg_addr *a)
{
    /* the address a word at a time, then the port: on every connect, so a
     * dozen instructions rather than a byte-wise hash's hundred */
    uint64_t w[2];
    memcpy(w, a->addr.s6_addr, sizeof w);
    uint64_t h = mix(w[0] ^ 0x9e3779b97f4a7c15ull);
    h = mix(h ^ w[1]);
    h = mix(h ^ a->port);
    return h ? h : 1;
}

/* The destination's slot; with make, a free one (or the home slot, whose
 * destination is forgotten) if it has none. */
static struct dest *dest_slot(uint64_t key, bool make)
{
    for (unsigned i = 0; i < PROBES; i++) {
        struct dest *d = &table[(key + i) % SLOTS];
        uint64_t k = atomic_load_explicit(&d->key, memory_order_relaxed);
        if (k == key)
            return d;
        if (k == 0) {
            if (!make)
                return NULL;
            if (atomic_compare_exchange_strong(&d->key, &k, key) || k == key) {
                return d;
            }
        }
    }
    if (!make)
        return NULL;
    struct dest *d = &table[key % SLOTS];
    atomic_store_explicit(&d->streak, 0, memory_order_relaxed);
    atomic_store_explicit(&d->skip, 0, memory_order_relaxed);
    atomic_store_explicit(&d->key, key, memory_order_relaxed);
    return d;
}

/* Connections to put on TCP after a sample, once streak were short. */
static unsigned gap(unsigned streak)
{
    unsigned shift = streak - STREAK_MIN + 1;
    return shift >= 14 ? GAP_MAX : 1u << shift;
}

bool short_conns_skip(const struct reg_addr *dst)
{
    if (!shunt_settings.short_conns)
        return false;
    struct dest *d = dest_slot(dest_key(dst), false);
    if (!d)
        return false;
    unsigned streak = atomic_load_explicit(&d->streak, memory_order_relaxed);
    if (streak < STREAK_MIN)
        return false;
    unsigned now = now_s();
    bool due = now - atomic_load_explicit(&d->sampled, memory_order_relaxed) >= SAMPLE_SECONDS;
    unsigned s = atomic_load_explicit(&d->skip, memory_order_relaxed);
    for (;;) {
        /* none left, or its time: this one is the sample, and the
         * connections made while it runs wait for its verdict on TCP */
        bool sample = s == 0 || due;
        unsigned next = sample ? gap(streak) : s - 1;
        if (atomic_compare_exchange_weak_explicit(&d->skip, &s, next, memory_order_relaxed, memory_order_relaxed)) {
            if (sample)
                atomic_store_explicit(&d->sampled, now, memory_order_relaxed);
            return !sample;
        }
    }
}

void short_conns_record(const struct reg_addr *dst, uint64_t calls, uint64_t bytes)
{
    if (!shunt_settings.short_conns)
        return;
    uint64_t key = dest_key(dst);
    bool worth = calls >= WORTH_CALLS || bytes >= WORTH_BYTES;
    struct dest *d = dest_slot(key, !worth);
    if (!d)
        return;   /* worth it, and nothing was held against it */
    if (worth) {
        atomic_store_explicit(&d->streak, 0, memory_order_relaxed);
        atomic_store_explicit(&d->skip, 0, memory_order_relaxed);
        return;
    }
    unsigned streak = atomic_load_explicit(&d->streak, memory_order_relaxed);
    if (streak < 64)
        atomic_store_explicit(&d->streak, streak + 1, memory_order_relaxed);
    if (streak + 1 == STREAK_MIN) {
        atomic_store_explicit(&d->skip, gap(STREAK_MIN), memory_order_relaxed);
        atomic_store_explicit(&d->sampled, now_s(), memory_order_relaxed);
    }
}
