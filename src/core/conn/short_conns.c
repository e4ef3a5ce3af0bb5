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
 * that was worth a channel accelerates the destination's connections
 * again at once.  A sample stays on kernel TCP too, with an object that
 * counts its data calls and bytes as a channel's end would
 * (tcp_socket.c), judged at its close by the same rule: it costs next to
 * nothing, where an accelerated sample cost a channel's making (a few
 * hundred us, about 1 ms with a ring grown to 1 MiB), up to a tenth of a
 * run of downloads.  The count bounds how many connections wait for a
 * sample's verdict, the time how long a slow one's change from short to
 * long goes unnoticed.  Nothing here touches the
 * byte stream or the server: a connection not offered is plain kernel TCP
 * from its first byte.  SHUNT_SHORT_CONNS=0 offers every connection.
 *
 * A program started again and again for one connection each (a script's
 * redis-cli, curl or psql -c) never makes four in one process, and paid a
 * channel for every run (about 1 ms over both ends, with both processes on
 * one CPU).  So the verdicts are also kept in the namespace's registry,
 * keyed by the program's name and the destination, and a process that has
 * no history of its own for a destination follows them: its connections
 * stay on kernel TCP while that program's recent ones there were short,
 * with samples counted across its runs.  Only while the listener is the
 * one they were judged against (its inode): a new server on the port, say
 * the next test's, starts afresh.  The shared table is written by any
 * process of the user; every word of it only decides whether a connection
 * is offered.
 *
 * Both tables are a few slots indexed by a hash, updated with relaxed
 * atomics: a lost update or two destinations in one slot cost a sample
 * more or less, never a byte.
 */
#include <errno.h>   /* program_invocation_short_name */
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "base/self.h"
#include "core/conn/short_conns.h"

/* A connection pays for its channel with this many exchanges at the
 * client's end (request/response round trips: each a kernel TCP round trip
 * of some 70 us saved), with this many small data calls one way (a stream
 * of messages, each a wake-up saved), or with this many bytes.  Bulk bytes
 * pay least: the ring's pages are new to every channel (about 2 us each to
 * make and free here), so a download of 1 MiB that the server closes took
 * three times kernel TCP's time on a channel, 4 MiB as long (where a
 * channel starts to pay), 16 MiB a third
 * (docs/benchmarks.md, "Downloads"); the calls of such a download (a read
 * of 16 KiB at a time) are not exchanges. */
#define WORTH_EXCHANGES 4u
#define WORTH_SMALL_CALLS 64u
#define SMALL_CALL_BYTES 4096u
#define WORTH_BYTES (4u << 20)
/* Short connections in a row before a destination's start on TCP, and the
 * widest gap between two samples. */
#define STREAK_MIN 4u
#define GAP_MAX 16384u
#define SAMPLE_SECONDS 10u

#define SLOTS 64u
#define PROBES 4u

/* Seconds of the coarse monotonic clock: no clock read, a tick's precision. */
static unsigned now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (unsigned)ts.tv_sec;
}

static struct reg_verdict table[SLOTS];

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

/* The key of the shared table: the program's name (its file's, as glibc
 * keeps it from argv[0]) and the destination. */
static uint64_t shared_key(uint64_t dest)
{
    static _Atomic uint64_t program;
    uint64_t p = atomic_load_explicit(&program, memory_order_relaxed);
    if (p == 0) {
        p = 0xcbf29ce484222325ull;   /* FNV-1a */
        for (const char *c = program_invocation_short_name; c && *c; c++)
            p = (p ^ (unsigned char)*c) * 0x100000001b3ull;
        p |= 1;
        atomic_store_explicit(&program, p, memory_order_relaxed);
    }
    uint64_t h = mix(dest ^ p);
    return h ? h : 1;
}

/* The destination's slot in t (n slots); with make, a free one (or the
 * home slot, whose destination is forgotten) if it has none. */
static struct reg_verdict *dest_slot(struct reg_verdict *t, unsigned n, uint64_t key, bool make)
{
    for (unsigned i = 0; i < PROBES; i++) {
        struct reg_verdict *d = &t[(key + i) % n];
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
    struct reg_verdict *d = &t[key % n];
    atomic_store_explicit(&d->streak, 0, memory_order_relaxed);
    atomic_store_explicit(&d->skip, 0, memory_order_relaxed);
    atomic_store_explicit(&d->key, key, memory_order_relaxed);
    return d;
}

/* The slot of this program's verdict on dst (key: dest_key) in the
 * namespace registry's table, as dest_slot; only loopback destinations
 * have one (across namespaces the history stays the process's). */
static struct reg_verdict *shared_slot(const struct reg_addr *dst, uint64_t key, bool make)
{
    struct reg_verdict *shared = reg_verdicts();
    if (!shared || !reg_addr_is_loopback(dst))
        return NULL;
    return dest_slot(shared, REG_VERDICTS, shared_key(key), make);
}

/* Connections to put on TCP after a sample, once streak were short (any
 * streak: a shared one may be anything). */
static unsigned gap(unsigned streak)
{
    unsigned shift = streak - STREAK_MIN + 1;
    return streak < STREAK_MIN || shift >= 14 ? GAP_MAX : 1u << shift;
}

/* Whether d's verdict, streak short connections read from it, keeps
 * this connection on TCP (false: it is not short); *sample: this one is
 * the sample. */
static bool verdict_skip(struct reg_verdict *d, unsigned streak, bool *sample_out)
{
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
            *sample_out = sample;
            return true;
        }
    }
}

bool short_conns_skip(const struct reg_addr *dst, bool *sample)
{
    *sample = false;
    if (!shunt_settings.short_conns)
        return false;
    uint64_t key = dest_key(dst);
    struct reg_verdict *d = dest_slot(table, SLOTS, key, false);
    if (d)   /* this process's own history decides once it has one */
        return verdict_skip(d, atomic_load_explicit(&d->streak, memory_order_relaxed), sample);
    d = shared_slot(dst, key, false);
    if (!d)
        return false;
    /* each shared word once: another process may change any of them */
    unsigned streak = atomic_load_explicit(&d->streak, memory_order_relaxed);
    if (streak < STREAK_MIN)
        return false;
    uint64_t listener = reg_listener_hint(dst);
    if (listener == 0 || listener != atomic_load_explicit(&d->listener, memory_order_relaxed))
        return false;
    return verdict_skip(d, streak, sample);
}

/* One judged connection into d's verdict. */
static void verdict_record(struct reg_verdict *d, bool worth)
{
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

void short_conns_record(const struct reg_addr *dst, uint64_t sends, uint64_t recvs, uint64_t bytes)
{
    if (!shunt_settings.short_conns)
        return;
    uint64_t key = dest_key(dst);
    uint64_t calls = sends + recvs, exchanges = sends < recvs ? sends : recvs;
    bool worth = exchanges >= WORTH_EXCHANGES || bytes >= WORTH_BYTES ||
                 (calls >= WORTH_SMALL_CALLS && bytes / calls < SMALL_CALL_BYTES);
    /* worth it, and nothing was held against it: no slot taken */
    struct reg_verdict *d = dest_slot(table, SLOTS, key, !worth);
    if (d)
        verdict_record(d, worth);
    d = shared_slot(dst, key, !worth);
    if (!d)
        return;
    /* judged against another listener (or none): that history is not this one's */
    uint64_t listener = reg_listener_hint(dst);
    if (atomic_exchange_explicit(&d->listener, listener, memory_order_relaxed) != listener)
        atomic_store_explicit(&d->streak, 0, memory_order_relaxed);
    verdict_record(d, worth);
}
