/*
 * ringlab: what two processes on two CPUs can do with a bare shared-memory
 * ring, to tell shunt's limits from the machine's.  Owns nothing of shunt:
 * it is a laboratory for one question, how fast a message of -m bytes goes
 * there and back through two single-producer single-consumer rings, as a
 * function of the published piece size (-p), the consumer's piece (-q), the
 * copy routine (-c), the ring size (-r) and where the rings' pages come from.
 * Beside it, in the same process and run, the reference of issue 6: one
 * thread copying the message with memcpy between two reused buffers.
 *
 *   ringlab [-m BYTES] [-r RING] [-p PIECE] [-q PIECE] [-c ROUTINE] [-n ROUNDS]
 *           [-a CPU_A] [-b CPU_B] [-o OFFSET] [-t]
 *   ROUTINE: memcpy (glibc's), movsb (rep movsb), avx2 and avx512 (plain
 *   loops of unaligned loads and stores), nt (AVX-512 loads, streaming
 *   stores on the producer side only), pf (AVX2 with a software prefetch
 *   -D bytes ahead), pfw (AVX-512 with prefetchw of the destination -D
 *   bytes ahead), clwb (AVX-512, then each written line written back),
 *   avx2a (AVX2 with the destination aligned to 64 bytes first)
 *   -o OFFSET puts both programs' buffers that far into a page (a malloc'd
 *   1 MiB buffer, as NetPIPE's, sits 16 bytes in); -H asks for huge pages
 *   for the rings (MADV_HUGEPAGE, where shared memory may have them)
 *
 * Prints the median and minimum round trip of -n round trips (after as
 * many for warm-up), the memcpy reference's median of the same, and with -t
 * each side's cycles in copying and in waiting per one-way trip (rdtsc).
 * Waiters spin with pause on their own CPU: both processes are pinned.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <immintrin.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

struct ring {
    _Alignas(64) _Atomic uint64_t head;
    _Alignas(64) _Atomic uint64_t tail;
};

/* one message's cycles copying and waiting, summed over its pieces */
struct stats {
    uint64_t copy_cycles, wait_cycles;
};

static size_t buf_off = 0, msg = 1 << 20, ring_size = 1 << 20, piece = 64 << 10, cpiece = 0, pf_dist = 2048;
static int routine = 0, timing = 0;
static long rounds = 2000;

static void copy_movsb(void *d, const void *s, size_t n)
{
    __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
}

/* One turn of 128 bytes of the AVX2 loops; pf: prefetch the source -D
 * bytes ahead; aligned: the destination is 32-byte aligned */
#define AVX2_TURN(dp, sp, pf, aligned)                                                   \
    do {                                                                             \
        if (pf) {                                                                    \
            _mm_prefetch((const char *)(sp) + pf_dist, _MM_HINT_T0);                 \
            _mm_prefetch((const char *)(sp) + pf_dist + 64, _MM_HINT_T0);            \
        }                                                                            \
        __m256i v[4];                                                                \
        for (int k = 0; k < 4; k++)                                                  \
            v[k] = _mm256_loadu_si256((const __m256i *)((sp) + 32 * k));             \
        for (int k = 0; k < 4; k++) {                                                \
            if (aligned)                                                             \
                _mm256_store_si256((__m256i *)((dp) + 32 * k), v[k]);                \
            else                                                                     \
                _mm256_storeu_si256((__m256i *)((dp) + 32 * k), v[k]);               \
        }                                                                            \
    } while (0)

/* One turn of 256 bytes of the AVX-512 loops; nt: streaming stores; pfw:
 * the destination asked for in exclusive state -D bytes ahead */
#define AVX512_TURN(dp, sp, nt, pfw)                                                 \
    do {                                                                             \
        if (pfw)                                                                     \
            for (int k = 0; k < 256; k += 64)                                        \
                _m_prefetchw((dp) + pf_dist + k);                                    \
        __m512i v[4];                                                                \
        for (int k = 0; k < 4; k++)                                                  \
            v[k] = _mm512_loadu_si512((sp) + 64 * k);                                \
        for (int k = 0; k < 4; k++) {                                                \
            if (nt)                                                                  \
                _mm512_stream_si512((void *)((dp) + 64 * k), v[k]);                  \
            else                                                                     \
                _mm512_storeu_si512((dp) + 64 * k, v[k]);                            \
        }                                                                            \
    } while (0)

/* A copy routine: turns of step bytes, then `after`, then the rest by memcpy */
#define LOOP_FN(name, isa, step, turn, after)                                        \
    __attribute__((target(isa))) static void name(void *d, const void *s, size_t n)  \
    {                                                                                \
        unsigned char *dp = d;                                                       \
        const unsigned char *sp = s;                                                 \
        size_t i = 0;                                                                \
        for (; i + (step) <= n; i += (step))                                         \
            turn;                                                                    \
        after;                                                                       \
        memcpy(dp + i, sp + i, n - i);                                               \
    }

LOOP_FN(copy_avx2, "avx2", 128, AVX2_TURN(dp + i, sp + i, 0, 0), (void)0)
LOOP_FN(copy_pf, "avx2", 128, AVX2_TURN(dp + i, sp + i, 1, 0), (void)0)
LOOP_FN(copy_avx2_aligned, "avx2", 128, AVX2_TURN(dp + i, sp + i, 0, 1), (void)0)
LOOP_FN(copy_avx512, "avx512f", 256, AVX512_TURN(dp + i, sp + i, 0, 0), (void)0)
/* streaming stores: the destination (the ring) is 64-byte aligned */
LOOP_FN(copy_nt, "avx512f", 256, AVX512_TURN(dp + i, sp + i, 1, 0), _mm_sfence())
LOOP_FN(copy_pfw, "avx512f,prfchw", 256, AVX512_TURN(dp + i, sp + i, 0, 1), (void)0)

/* the destination brought to a 64-byte boundary first, so that only the
 * loads may straddle cache lines */
static void copy_avx2a(void *d, const void *s, size_t n)
{
    size_t head = (64 - ((uintptr_t)d & 63)) & 63;
    if (n < 256) {
        memcpy(d, s, n);
        return;
    }
    memcpy(d, s, head);
    copy_avx2_aligned((unsigned char *)d + head, (const unsigned char *)s + head, n - head);
}

/* AVX-512, then each written line written back (clwb), so that the
 * consumer does not have to take it out of the producer's cache */
__attribute__((target("avx512f,clwb"))) static void copy_clwb(void *d, const void *s, size_t n)
{
    copy_avx512(d, s, n);
    for (size_t i = 0; i < n; i += 64)
        _mm_clwb((unsigned char *)d + i);
}

typedef void (*copy_fn)(void *, const void *, size_t);
static const char *names[] = { "memcpy", "movsb", "avx2", "avx512", "nt", "pf", "pfw", "clwb", "avx2a" };
#define ROUTINES 9
static void copy_libc(void *d, const void *s, size_t n) { memcpy(d, s, n); }
static copy_fn in_fns[] = { copy_libc, copy_movsb, copy_avx2, copy_avx512, copy_nt, copy_pf, copy_pfw, copy_clwb, copy_avx2a };
static copy_fn out_fns[] = { copy_libc, copy_movsb, copy_avx2, copy_avx512, copy_avx512, copy_pf, copy_avx512, copy_avx512, copy_avx2a };

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* TSC ticks per nanosecond, measured against the monotonic clock */
static double tsc_ghz(void)
{
    long long t0 = now_ns();
    uint64_t c0 = __rdtsc();
    while (now_ns() - t0 < 20000000)
        ;
    return (double)(__rdtsc() - c0) / (double)(now_ns() - t0);
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        perror("sched_setaffinity");
        exit(1);
    }
}

/* -t: a piece waited from t0 to t1 and was copied from t1 to now */
static void account(struct stats *st, uint64_t t0, uint64_t t1)
{
    if (timing) {
        uint64_t t2 = __rdtsc();
        st->wait_cycles += t1 - t0;
        st->copy_cycles += t2 - t1;
    }
}

static void ring_send(struct ring *r, unsigned char *data, const unsigned char *b, size_t n, struct stats *st)
{
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    while (n > 0) {
        uint64_t t0 = timing ? __rdtsc() : 0, tail;
        while (head - (tail = atomic_load_explicit(&r->tail, memory_order_acquire)) == ring_size)
            _mm_pause();
        uint64_t t1 = timing ? __rdtsc() : 0;
        size_t off = head & (ring_size - 1), len = ring_size - (head - tail);
        if (len > n) len = n;
        if (len > ring_size - off) len = ring_size - off;
        if (len > piece) len = piece;
        in_fns[routine](data + off, b, len);
        head += len;
        atomic_store_explicit(&r->head, head, memory_order_release);
        account(st, t0, t1);
        b += len;
        n -= len;
    }
}

static void ring_recv(struct ring *r, unsigned char *data, unsigned char *b, size_t n, struct stats *st)
{
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    while (n > 0) {
        uint64_t t0 = timing ? __rdtsc() : 0, head;
        while ((head = atomic_load_explicit(&r->head, memory_order_acquire)) == tail)
            _mm_pause();
        uint64_t t1 = timing ? __rdtsc() : 0;
        size_t off = tail & (ring_size - 1), len = head - tail;
        if (len > n) len = n;
        if (len > ring_size - off) len = ring_size - off;
        if (cpiece && len > cpiece) len = cpiece;
        out_fns[routine](b, data + off, len);
        tail += len;
        atomic_store_explicit(&r->tail, tail, memory_order_release);
        account(st, t0, t1);
        b += len;
        n -= len;
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* median of one field over n messages */
static double median_field(struct stats *st, long n, int wait)
{
    uint64_t *v = malloc(sizeof *v * (size_t)n);
    for (long i = 0; i < n; i++)
        v[i] = wait ? st[i].wait_cycles : st[i].copy_cycles;
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    double m = (double)v[n / 2];
    free(v);
    return m;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}

/* With huge: the mapping is rounded up to and aligned on 2 MiB and advised
 * before it is touched, so that shared memory that may have huge pages
 * (shmem_enabled "advise" or "always") gets them. */
static void *map_shared(size_t n, int huge)
{
    const size_t hp = 2u << 20;
    size_t len = huge ? (n + hp - 1) / hp * hp : n;
    char *m = mmap(NULL, huge ? len + hp : len, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS | (huge ? 0 : MAP_POPULATE), -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    if (huge) {
        char *aligned = (char *)(((uintptr_t)m + hp - 1) & ~(uintptr_t)(hp - 1));
        if (madvise(aligned, len, MADV_HUGEPAGE) != 0)
            perror("madvise(MADV_HUGEPAGE)");
        m = aligned;
    }
    memset(m, 0, n);
    return m;
}

int main(int argc, char **argv)
{
    int opt, cpu_a = 0, cpu_b = 1, huge = 0;
    while ((opt = getopt(argc, argv, "m:r:p:q:c:n:a:b:D:o:tH")) != -1) {
        switch (opt) {
        case 'm': msg = strtoull(optarg, NULL, 0); break;
        case 'r': ring_size = strtoull(optarg, NULL, 0); break;
        case 'p': piece = strtoull(optarg, NULL, 0); break;
        case 'q': cpiece = strtoull(optarg, NULL, 0); break;
        case 'o': buf_off = strtoull(optarg, NULL, 0); break;
        case 'D': pf_dist = strtoull(optarg, NULL, 0); break;
        case 'n': rounds = atol(optarg); break;
        case 'a': cpu_a = atoi(optarg); break;
        case 'b': cpu_b = atoi(optarg); break;
        case 't': timing = 1; break;
        case 'H': huge = 1; break;
        case 'c':
            routine = -1;
            for (int i = 0; i < ROUTINES; i++)
                if (!strcmp(optarg, names[i]))
                    routine = i;
            if (routine < 0) {
                fprintf(stderr, "ringlab: unknown routine %s\n", optarg);
                return 2;
            }
            break;
        default:
            fprintf(stderr, "usage: ringlab [-m BYTES] [-r RING] [-p PIECE] [-q PIECE] [-c ROUTINE] [-n N] [-t] [-H]\n");
            return 2;
        }
    }
    struct ring *rings = map_shared(4096, 0);
    /* four series (A send, A recv, B send, B recv) of rounds messages */
    struct stats *stats = map_shared(4 * sizeof(struct stats) * (size_t)rounds + 4096, 0);
#define ST(series, i) (&stats[(series) * rounds + ((i) % rounds)])
    unsigned char *ab = map_shared(ring_size, huge), *ba = map_shared(ring_size, huge);
    struct ring *r_ab = &rings[0], *r_ba = &rings[1];

    pid_t child = fork();
    if (child == 0) {
        pin(cpu_b);
        unsigned char *buf = (unsigned char *)aligned_alloc(4096, msg + 4096) + buf_off;
        memset(buf, 2, msg);
        for (long i = 0; i < 2 * rounds; i++) {
            memset(ST(3, i), 0, sizeof *stats);
            memset(ST(2, i), 0, sizeof *stats);
            ring_recv(r_ab, ab, buf, msg, ST(3, i));
            ring_send(r_ba, ba, buf, msg, ST(2, i));
        }
        _exit(0);
    }
    pin(cpu_a);
    /* -o: the programs' buffers start this far into a page, as a malloc'd
     * one does (NetPIPE's sits 16 bytes in); the reference uses the same */
    unsigned char *buf = (unsigned char *)aligned_alloc(4096, msg + 4096) + buf_off;
    unsigned char *mirror = (unsigned char *)aligned_alloc(4096, msg + 4096) + buf_off;
    memset(buf, 1, msg);
    memset(mirror, 3, msg);
    long long *rtt = malloc(sizeof(long long) * (size_t)rounds), *ref = malloc(sizeof(long long) * (size_t)rounds);
    for (long i = 0; i < 2 * rounds; i++) {
        memset(ST(0, i), 0, sizeof *stats);
        memset(ST(1, i), 0, sizeof *stats);
        long long t0 = now_ns();
        ring_send(r_ab, ab, buf, msg, ST(0, i));
        ring_recv(r_ba, ba, buf, msg, ST(1, i));
        if (i >= rounds)
            rtt[i - rounds] = now_ns() - t0;
    }
    waitpid(child, NULL, 0);
    /* the reference: one thread, the message there and back, as NetPIPE's
     * buffers are reused (bench/pingpong.c -t memcpy) */
    for (long i = 0; i < 2 * rounds; i++) {
        long long t0 = now_ns();
        memcpy(mirror, buf, msg);
        __asm__ volatile("" ::: "memory");
        memcpy(buf, mirror, msg);
        __asm__ volatile("" ::: "memory");
        if (i >= rounds)
            ref[i - rounds] = now_ns() - t0;
    }
    qsort(rtt, (size_t)rounds, sizeof *rtt, cmp_ll);
    qsort(ref, (size_t)rounds, sizeof *ref, cmp_ll);
    double med = rtt[rounds / 2] / 2.0, rmed = ref[rounds / 2] / 2.0;
    printf("off=%zu msg=%zu ring=%zu piece=%zu cpiece=%zu routine=%s huge=%d one_way_med_us=%.2f min_us=%.2f "
           "memcpy_med_us=%.2f ratio=%.3f\n",
           buf_off, msg, ring_size, piece, cpiece, names[routine], huge, med / 1000, rtt[0] / 2000.0, rmed / 1000,
           rmed / med);
    if (timing) {
        /* medians per message, in microseconds at the TSC's rate */
        double ghz = tsc_ghz();
        printf("  us per message, medians: A send copy %.2f wait %.2f, recv copy %.2f wait %.2f; "
               "B send copy %.2f wait %.2f, recv copy %.2f wait %.2f\n",
               median_field(ST(0, 0), rounds, 0) / ghz / 1e3, median_field(ST(0, 0), rounds, 1) / ghz / 1e3,
               median_field(ST(1, 0), rounds, 0) / ghz / 1e3, median_field(ST(1, 0), rounds, 1) / ghz / 1e3,
               median_field(ST(2, 0), rounds, 0) / ghz / 1e3, median_field(ST(2, 0), rounds, 1) / ghz / 1e3,
               median_field(ST(3, 0), rounds, 0) / ghz / 1e3, median_field(ST(3, 0), rounds, 1) / ghz / 1e3);
    }
    return 0;
}
