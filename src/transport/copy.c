/*
 * copy.c: the byte copy of the ring (the copy into it on send, out of it on
 * recv).  Owns the choice of routine for large blocks.
 *
 * glibc's memcpy copies blocks from a few KiB up to about the L2 size with
 * "rep movsb" on CPUs with fast string moves.  Two things make that a poor
 * fit for the ring on AMD Zen 3/4 (the project's machine):
 *
 * - it runs about ten times slower when (dst - src) mod 4096 is 1..15
 *   (glibc bug 30994), and the ring's page offset drifts against the
 *   program's buffer with every odd-sized message, so any size can land
 *   there (a 768 KiB copy took 250 us instead of 20);
 * - in a large ping-pong the copy in (this CPU) and the copy out (the
 *   peer's CPU, reading what we just wrote) run at once, one piece apart,
 *   and there a plain loop of 32-byte loads and stores is faster than
 *   rep movsb: a bare ring's 1 MiB ping-pong about 7 % faster with the
 *   programs' buffers 16 bytes into a page, as malloc gives NetPIPE's
 *   (bench/ringlab.c; docs/benchmarks.md, "The 1 MiB ping-pong against
 *   memcpy").
 *
 * So blocks from VEC_MIN up go through an AVX2 loop when the CPU and the
 * kernel support it (decided once, lazily: this may run before any
 * constructor); below that, and on other CPUs, memcpy, which copies small
 * blocks with vector moves anyway.  Without AVX2 a block in the aliasing
 * window is copied in pieces below glibc's rep movsb threshold instead.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "transport/copy.h"

#define VEC_MIN 2048
#define ALIAS_WINDOW 16
#define ALIAS_PIECE 1024

static void copy_libc(unsigned char *dst, const unsigned char *src, size_t n)
{
    size_t dist = (size_t)((uintptr_t)dst - (uintptr_t)src) & 4095;
    if (dist == 0 || dist >= ALIAS_WINDOW || n <= ALIAS_PIECE) {
        memcpy(dst, src, n);
        return;
    }
    while (n > 0) {
        size_t k = n < ALIAS_PIECE ? n : ALIAS_PIECE;
        memcpy(dst, src, k);
        dst += k;
        src += k;
        n -= k;
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* 128 bytes a turn, unaligned loads and stores; the rest (< 128) by memcpy */
__attribute__((target("avx2"))) static void copy_avx2(unsigned char *dst, const unsigned char *src, size_t n)
{
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(src + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(src + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(const void *)(src + i + 64));
        __m256i d = _mm256_loadu_si256((const __m256i *)(const void *)(src + i + 96));
        _mm256_storeu_si256((__m256i *)(void *)(dst + i), a);
        _mm256_storeu_si256((__m256i *)(void *)(dst + i + 32), b);
        _mm256_storeu_si256((__m256i *)(void *)(dst + i + 64), c);
        _mm256_storeu_si256((__m256i *)(void *)(dst + i + 96), d);
    }
    memcpy(dst + i, src + i, n - i);
}

/* 0: not asked yet, 1: AVX2, 2: libc.  Relaxed: every thread that asks
 * gets the same answer, so a race only asks twice. */
static _Atomic int kind;

static int copy_kind(void)
{
    int k = atomic_load_explicit(&kind, memory_order_relaxed);
    if (k == 0) {
        __builtin_cpu_init();
        k = __builtin_cpu_supports("avx2") ? 1 : 2;
        atomic_store_explicit(&kind, k, memory_order_relaxed);
    }
    return k;
}

void ring_copy(void *dst, const void *src, size_t n)
{
    if (n >= VEC_MIN && copy_kind() == 1)
        copy_avx2(dst, src, n);
    else
        copy_libc(dst, src, n);
}
#else
void ring_copy(void *dst, const void *src, size_t n)
{
    copy_libc(dst, src, n);
}
#endif
