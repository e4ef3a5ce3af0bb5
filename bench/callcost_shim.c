/*
 * callcost_shim.c: how long each socket call takes, as the program sees it.
 *
 * Preloaded first (LD_PRELOAD=callcost_shim.so[:libshunt.so]), it wraps the
 * calls a short connection makes, times each one from the program's side
 * (CLOCK_MONOTONIC before and after, the call forwarded with
 * dlsym(RTLD_NEXT): to libshunt.so when that is preloaded after it, to libc
 * otherwise) and, at exit or _exit, writes each call's count and
 * percentiles to $CALLCOST_DIR/<$CALLCOST_TAG>.<pid>.  bench/callcost.py
 * runs a program with and without libshunt.so behind it and subtracts: what
 * is left is what shunt adds to each call, system call included.  The tag
 * is read at load, so that a child whose environment was cleared (nginx's
 * workers) still has it; a forked child starts its counts afresh.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define CALLS(X) X(socket) X(connect) X(accept) X(accept4) X(read) X(write) X(recv) X(recvfrom) X(send) \
    X(sendto) X(writev) X(poll) X(epoll_wait) X(epoll_pwait) X(epoll_ctl) X(close) X(fcntl) X(setsockopt) \
    X(shutdown)

#define ENUM(name) C_##name,
enum { CALLS(ENUM) C_N };
#define NAME(name) #name,
static const char *const names[C_N] = { CALLS(NAME) };

#define MAX_SAMPLES 400000
static uint32_t *samples[C_N];
static atomic_uint counts[C_N];
static char tag[64] = "run", dir[256] = "/tmp";
static atomic_int dumped;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void record(int c, uint64_t t0)
{
    uint64_t d = now_ns() - t0;
    unsigned i = atomic_fetch_add_explicit(&counts[c], 1, memory_order_relaxed);
    if (i < MAX_SAMPLES && samples[c])
        samples[c][i] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

static void forked_child(void)
{
    for (int c = 0; c < C_N; c++)
        atomic_store(&counts[c], 0);
}

__attribute__((constructor)) static void start(void)
{
    const char *t = getenv("CALLCOST_TAG"), *d = getenv("CALLCOST_DIR");
    if (t)
        snprintf(tag, sizeof tag, "%s", t);
    if (d)
        snprintf(dir, sizeof dir, "%s", d);
    for (int c = 0; c < C_N; c++)
        samples[c] = calloc(MAX_SAMPLES, sizeof(uint32_t));
    pthread_atfork(NULL, NULL, forked_child);
}

static int by_value(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

__attribute__((destructor)) static void dump(void)
{
    if (atomic_exchange(&dumped, 1))
        return;
    char path[400];
    snprintf(path, sizeof path, "%s/%s.%d", dir, tag, (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    for (int c = 0; c < C_N; c++) {
        unsigned n = atomic_load(&counts[c]);
        unsigned k = n < MAX_SAMPLES ? n : MAX_SAMPLES;
        if (k == 0 || !samples[c])
            continue;
        qsort(samples[c], k, sizeof(uint32_t), by_value);
        fprintf(f, "%s %u %u %u %u %u\n", names[c], n, samples[c][k / 10], samples[c][k / 4], samples[c][k / 2],
                samples[c][3 * k / 4]);
    }
    fclose(f);
}

/* The next definition of name, looked up once. */
#define NEXT(name)                                                  \
    static __typeof__(name) *next_;                                 \
    if (!next_)                                                     \
        next_ = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

#define TIMED(name, ...)                                            \
    NEXT(name);                                                     \
    uint64_t t0_ = now_ns();                                        \
    __typeof__(next_(__VA_ARGS__)) r_ = next_(__VA_ARGS__);         \
    record(C_##name, t0_);                                          \
    return r_

int socket(int d, int t, int p) { TIMED(socket, d, t, p); }
int connect(int fd, const struct sockaddr *a, socklen_t l) { TIMED(connect, fd, a, l); }
int accept(int fd, struct sockaddr *a, socklen_t *l) { TIMED(accept, fd, a, l); }
int accept4(int fd, struct sockaddr *a, socklen_t *l, int fl) { TIMED(accept4, fd, a, l, fl); }
ssize_t read(int fd, void *b, size_t n) { TIMED(read, fd, b, n); }
ssize_t write(int fd, const void *b, size_t n) { TIMED(write, fd, b, n); }
ssize_t recv(int fd, void *b, size_t n, int fl) { TIMED(recv, fd, b, n, fl); }
ssize_t recvfrom(int fd, void *b, size_t n, int fl, struct sockaddr *a, socklen_t *l) { TIMED(recvfrom, fd, b, n, fl, a, l); }
ssize_t send(int fd, const void *b, size_t n, int fl) { TIMED(send, fd, b, n, fl); }
ssize_t sendto(int fd, const void *b, size_t n, int fl, const struct sockaddr *a, socklen_t l) { TIMED(sendto, fd, b, n, fl, a, l); }
ssize_t writev(int fd, const struct iovec *v, int n) { TIMED(writev, fd, v, n); }
int poll(struct pollfd *p, nfds_t n, int t) { TIMED(poll, p, n, t); }
int epoll_wait(int e, struct epoll_event *ev, int m, int t) { TIMED(epoll_wait, e, ev, m, t); }
int epoll_pwait(int e, struct epoll_event *ev, int m, int t, const sigset_t *s) { TIMED(epoll_pwait, e, ev, m, t, s); }
int epoll_ctl(int e, int op, int fd, struct epoll_event *ev) { TIMED(epoll_ctl, e, op, fd, ev); }
int close(int fd) { TIMED(close, fd); }
int setsockopt(int fd, int l, int o, const void *v, socklen_t n) { TIMED(setsockopt, fd, l, o, v, n); }
int shutdown(int fd, int how) { TIMED(shutdown, fd, how); }

int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);   /* every command's argument fits a pointer */
    va_end(ap);
    TIMED(fcntl, fd, cmd, arg);
}

void _exit(int status)
{
    dump();
    NEXT(_exit);
    next_(status);
    __builtin_unreachable();
}
