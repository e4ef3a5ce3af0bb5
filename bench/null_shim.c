/*
 * null_shim.c: an interposer that does nothing but forward.
 *
 * Preloaded as libshunt.so is (python3 bench/pairs.py --mode crr --preload
 * build/bench/null_shim.so), it wraps every call a short connection makes
 * and hands it to libc through a pointer found once with dlsym(RTLD_NEXT):
 * what being an LD_PRELOAD interposer costs by itself, against which
 * libshunt.so's own work on such a connection is measured
 * (docs/benchmarks.md, "Where the cold cost is").
 */
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#define NEXT(name)                                                              \
    static __typeof__(name) *next_##name;                                       \
    __attribute__((constructor)) static void find_##name(void)                  \
    {                                                                           \
        *(void **)&next_##name = dlsym(RTLD_NEXT, #name);                       \
    }

NEXT(socket)
NEXT(connect)
NEXT(accept)
NEXT(accept4)
NEXT(close)
NEXT(read)
NEXT(write)
NEXT(recv)
NEXT(send)
NEXT(poll)
NEXT(ppoll)
NEXT(setsockopt)
NEXT(shutdown)

int socket(int d, int t, int p) { return next_socket(d, t, p); }
int connect(int fd, const struct sockaddr *a, socklen_t l) { return next_connect(fd, a, l); }
int accept(int fd, struct sockaddr *a, socklen_t *l) { return next_accept(fd, a, l); }
int accept4(int fd, struct sockaddr *a, socklen_t *l, int f) { return next_accept4(fd, a, l, f); }
int close(int fd) { return next_close(fd); }
ssize_t read(int fd, void *b, size_t n) { return next_read(fd, b, n); }
ssize_t write(int fd, const void *b, size_t n) { return next_write(fd, b, n); }
ssize_t recv(int fd, void *b, size_t n, int f) { return next_recv(fd, b, n, f); }
ssize_t send(int fd, const void *b, size_t n, int f) { return next_send(fd, b, n, f); }
int poll(struct pollfd *p, nfds_t n, int t) { return next_poll(p, n, t); }
int ppoll(struct pollfd *p, nfds_t n, const struct timespec *t, const sigset_t *s) { return next_ppoll(p, n, t, s); }
int setsockopt(int fd, int l, int o, const void *v, socklen_t n) { return next_setsockopt(fd, l, o, v, n); }
int shutdown(int fd, int h) { return next_shutdown(fd, h); }
