/*
 * kcopy: what a copy through the kernel costs on this machine, against
 * memcpy, to tell whether a single-copy path could beat the ring's two
 * copies (issue 6).  Owns nothing of shunt.  For each size, in one process
 * and run, the median time of:
 *   memcpy   one thread copying between two reused buffers (issue 6's
 *            reference, as pingpong -t memcpy and ringlab measure it)
 *   pvreadv  process_vm_readv of a child's reused buffer into ours: the
 *            receiver-side single copy (SHUNT_ZCOPY_THRESHOLD)
 *   pread    pread of a file in /dev/shm into a reused buffer: the kernel's
 *            own copy to user memory, with no pages to pin
 *
 *   kcopy [-n ROUNDS] [-r RUNS] SIZE...     (sizes in bytes; K and M suffixes)
 *
 * Each figure is the median over -r runs of -n back-to-back copies (after
 * as many for warm-up); the buffers stay in the cache between copies, as
 * NetPIPE's do.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long n = strtoull(s, &end, 10);
    if (*end == 'K' || *end == 'k')
        n <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        n <<= 20, end++;
    if (end == s || *end || n == 0) {
        fprintf(stderr, "kcopy: bad size '%s'\n", s);
        exit(2);
    }
    return (size_t)n;
}

enum way { MEMCPY, PVREADV, PREAD };

struct target {
    pid_t child;        /* holds src at the same address as ours */
    char *src, *dst;
    int file;
};

/* One copy of size bytes the given way; -1 on failure. */
static int copy_once(enum way w, struct target *t, size_t size)
{
    switch (w) {
    case MEMCPY:
        memcpy(t->dst, t->src, size);
        __asm__ __volatile__("" : : "r"(t->dst) : "memory");
        return 0;
    case PVREADV: {
        struct iovec local = { t->dst, size }, remote = { t->src, size };
        return process_vm_readv(t->child, &local, 1, &remote, 1, 0) == (ssize_t)size ? 0 : -1;
    }
    case PREAD:
        return pread(t->file, t->dst, size, 0) == (ssize_t)size ? 0 : -1;
    }
    return -1;
}

static double median_us(enum way w, struct target *t, size_t size, int rounds, int runs)
{
    double per[64];
    for (int i = 0; i < rounds; i++)
        if (copy_once(w, t, size) < 0) {
            perror("kcopy: copy");
            exit(1);
        }
    for (int r = 0; r < runs; r++) {
        double t0 = now_us();
        for (int i = 0; i < rounds; i++)
            copy_once(w, t, size);
        per[r] = (now_us() - t0) / rounds;
    }
    qsort(per, (size_t)runs, sizeof per[0], cmp_double);
    return per[runs / 2];
}

int main(int argc, char **argv)
{
    int rounds = 1000, runs = 5, opt;
    while ((opt = getopt(argc, argv, "n:r:")) != -1) {
        if (opt == 'n')
            rounds = atoi(optarg);
        else if (opt == 'r')
            runs = atoi(optarg);
        else
            goto usage;
    }
    if (optind >= argc || rounds < 1 || runs < 1 || runs > 64)
        goto usage;
    size_t max = 0;
    for (int i = optind; i < argc; i++) {
        size_t s = parse_size(argv[i]);
        max = s > max ? s : max;
    }
    struct target t;
    t.src = mmap(NULL, max, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    t.dst = mmap(NULL, max, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t.src == MAP_FAILED || t.dst == MAP_FAILED) {
        perror("kcopy: mmap");
        return 1;
    }
    memset(t.src, 0x5a, max);
    memset(t.dst, 0xa5, max);
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/kcopy-%d", (int)getpid());
    t.file = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (t.file < 0 || write(t.file, t.src, max) != (ssize_t)max) {
        perror("kcopy: /dev/shm file");
        return 1;
    }
    unlink(path);
    /* The child's copy of src (same address, its own pages after it writes
     * them) is what process_vm_readv reads; it just waits to be killed. */
    t.child = fork();
    if (t.child == 0) {
        memset(t.src, 0x3c, max);
        pause();
        _exit(0);
    }
    usleep(100000);
    printf("%10s %12s %12s %12s %10s %10s\n", "bytes", "memcpy us", "pvreadv us", "pread us",
           "pvreadv/mc", "pread/mc");
    for (int i = optind; i < argc; i++) {
        size_t size = parse_size(argv[i]);
        double mc = median_us(MEMCPY, &t, size, rounds, runs);
        double pv = median_us(PVREADV, &t, size, rounds, runs);
        double pr = median_us(PREAD, &t, size, rounds, runs);
        /* the ratios are speeds: memcpy's time over the other's */
        printf("%10zu %12.2f %12.2f %12.2f %10.2f %10.2f\n", size, mc, pv, pr, mc / pv, mc / pr);
    }
    kill(t.child, SIGKILL);
    waitpid(t.child, NULL, 0);
    return 0;
usage:
    fprintf(stderr, "usage: %s [-n ROUNDS] [-r RUNS] SIZE...\n", argv[0]);
    return 2;
}
