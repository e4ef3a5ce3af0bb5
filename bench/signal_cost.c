/*
 * signal_cost: what each signal a waiting thread could consult about a
 * busy machine costs to read (issue 18 item 1; docs/architecture.md,
 * "Waiting on a busy machine").  Each is read 20,000 times in a row by one
 * thread; prints the mean in ns.  No shunt involved: run it bare.
 *
 *   signal_cost
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define N 20000

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static volatile long sink;

static void report(const char *what, long long t0, int n)
{
    printf("%-44s %6.0f ns\n", what, (double)(now_ns() - t0) / n);
}

static void file_cost(const char *what, const char *path)
{
    char buf[512];
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        printf("%-44s (cannot open %s)\n", what, path);
        return;
    }
    long long t0 = now_ns();
    for (int i = 0; i < N; i++)
        sink += pread(fd, buf, sizeof buf, 0);
    report(what, t0, N);
    close(fd);
}

int main(void)
{
    long long t0 = now_ns();
    for (int i = 0; i < N; i++)
        sink += now_ns();
    report("clock_gettime (vDSO)", t0, N);

    t0 = now_ns();
    for (int i = 0; i < N; i++)
        sink += sched_getcpu();
    report("sched_getcpu (vDSO)", t0, N);

    t0 = now_ns();
    for (int i = 0; i < N; i++) {
        struct rusage ru;
        getrusage(RUSAGE_THREAD, &ru);
        sink += ru.ru_nivcsw;
    }
    report("getrusage(RUSAGE_THREAD) (ru_nivcsw)", t0, N);

    t0 = now_ns();
    for (int i = 0; i < N; i++)
        sched_yield();
    report("sched_yield, nobody else runnable here", t0, N);

    file_cost("pread /proc/loadavg (fd kept open)", "/proc/loadavg");
    char buf[512];
    t0 = now_ns();
    for (int i = 0; i < N; i++) {
        int fd = open("/proc/loadavg", O_RDONLY);
        sink += read(fd, buf, sizeof buf);
        close(fd);
    }
    report("open, read, close /proc/loadavg", t0, N);
    file_cost("pread /proc/pressure/cpu (fd kept open)", "/proc/pressure/cpu");
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", (int)gettid());
    file_cost("pread /proc/self/task/TID/schedstat", path);
    return 0;
}
