/*
 * real.c: fills the table of real libc functions.
 *
 * The table starts out pointing at stand-ins that make the system call
 * directly, so a wrapper that runs before or during initialisation (another
 * library's constructor, or a malloc replacement that reads a file while
 * dlsym allocates) still reaches the kernel instead of recursing into shunt.
 * shunt_real_resolve() then swaps in what dlsym(RTLD_NEXT) finds, which keeps
 * preloads stacked in the order the user gave.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdatomic.h>

#include "base/env_override.h"
#include "base/real.h"

/* System calls this architecture lacks: the stand-in answers ENOSYS. */
#ifndef SYS_poll
#define SYS_poll -1
#endif
#ifndef SYS_select
#define SYS_select -1
#endif
#ifndef SYS_epoll_create
#define SYS_epoll_create -1
#endif
#ifndef SYS_dup2
#define SYS_dup2 -1
#endif
#ifndef SYS_epoll_wait
#define SYS_epoll_wait -1
#endif

long shunt_syscall_va(long nr, ...)
{
    va_list ap;
    va_start(ap, nr);
    long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long);
    long a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
    va_end(ap);
#if defined(__x86_64__)
    /* Six arguments whatever the call takes, as libc's syscall(): the
     * kernel ignores the ones it does not use. */
    register long r10 __asm__("r10") = a4;
    register long r8 __asm__("r8") = a5;
    register long r9 __asm__("r9") = a6;
    long r;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "0"(nr), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    if (r < 0 && r > -4096) {
        errno = (int)-r;
        return -1;
    }
    return r;
#else
#error "shunt_syscall_va needs the system call instruction of this architecture"
#endif
}

#define SHUNT_UNPAREN(...) __VA_ARGS__

#define SHUNT_SYS(ret, name, params, args, sysno) \
    static ret boot_##name params { return (ret)shunt_syscall(sysno, SHUNT_UNPAREN args); }
#define SHUNT_LIB(ret, name, params)
#include "base/calls.def"
#undef SHUNT_SYS
#undef SHUNT_LIB

static int nosys(void)
{
    errno = ENOSYS;
    return -1;
}

static ssize_t boot_recv(int fd, void *buf, size_t n, int flags)
{
    return shunt_syscall(SYS_recvfrom, fd, buf, n, flags, NULL, NULL);
}
static ssize_t boot_send(int fd, const void *buf, size_t n, int flags)
{
    return shunt_syscall(SYS_sendto, fd, buf, n, flags, NULL, 0);
}
static char *boot_getenv(const char *name) { return env_lookup(name); }
static void boot_closefrom(int lowfd) { shunt_syscall(SYS_close_range, (unsigned)lowfd, ~0U, 0); }
static int boot_fclose(FILE *f) { (void)f; return nosys(); }
static FILE *boot_fdopen(int fd, const char *m) { (void)fd; (void)m; nosys(); return NULL; }
static int boot_fileno(FILE *f)
{
    if (f->_fileno >= 0)
        return f->_fileno;
    errno = EBADF;
    return -1;
}
#define boot_fileno_unlocked boot_fileno
static FILE *boot_freopen(const char *p, const char *m, FILE *f) { (void)p; (void)m; (void)f; nosys(); return NULL; }
#define boot_freopen64 boot_freopen
static wint_t boot_fgetwc(FILE *f) { (void)f; nosys(); return WEOF; }
#define boot_getwc boot_fgetwc
#define boot_fgetwc_unlocked boot_fgetwc
#define boot_getwc_unlocked boot_fgetwc
static wint_t boot_getwchar(void) { nosys(); return WEOF; }
#define boot_getwchar_unlocked boot_getwchar
static wchar_t *boot_fgetws(wchar_t *restrict w, int n, FILE *restrict f) { (void)w; (void)n; (void)f; nosys(); return NULL; }
#define boot_fgetws_unlocked boot_fgetws
static int boot___isoc99_vfwscanf(FILE *restrict f, const wchar_t *restrict fmt, va_list ap)
{
    (void)f, (void)fmt, (void)ap;
    nosys();
    return EOF;
}
static int boot___isoc99_vwscanf(const wchar_t *restrict fmt, va_list ap)
{
    return boot___isoc99_vfwscanf(stdin, fmt, ap);
}
static int boot___isoc99_fwscanf(FILE *restrict f, const wchar_t *restrict fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = boot___isoc99_vfwscanf(f, fmt, ap);
    va_end(ap);
    return r;
}
static int boot___isoc99_wscanf(const wchar_t *restrict fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = boot___isoc99_vfwscanf(stdin, fmt, ap);
    va_end(ap);
    return r;
}
#define boot___isoc23_vfwscanf boot___isoc99_vfwscanf
#define boot___isoc23_vwscanf boot___isoc99_vwscanf
#define boot___isoc23_fwscanf boot___isoc99_fwscanf
#define boot___isoc23_wscanf boot___isoc99_wscanf
#define boot_vfwscanf boot___isoc99_vfwscanf
#define boot_vwscanf boot___isoc99_vwscanf
#define boot_fwscanf boot___isoc99_fwscanf
#define boot_wscanf boot___isoc99_wscanf
static int boot_fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return (int)shunt_syscall(SYS_fcntl, fd, cmd, arg);
}
#define boot_fcntl64 boot_fcntl

static int boot_shm_open(const char *name, int oflag, mode_t mode)
{
    char path[256];
    while (*name == '/')
        name++;
    if (snprintf(path, sizeof path, "/dev/shm/%s", name) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return (int)shunt_syscall(SYS_openat, AT_FDCWD, path, oflag | O_NOFOLLOW | O_CLOEXEC, mode);
}

static int boot_ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return (int)shunt_syscall(SYS_ioctl, fd, req, arg);
}
static int boot_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *m)
{
    return (int)shunt_syscall(SYS_ppoll, fds, n, t, m, _NSIG / 8);
}
static int boot_pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t, const sigset_t *m)
{
    struct { const sigset_t *set; size_t size; } data = { m, _NSIG / 8 };
    struct timespec copy, *tp = NULL;
    if (t) { copy = *t; tp = &copy; }   /* the kernel updates it; the caller's is const */
    return (int)shunt_syscall(SYS_pselect6, n, r, w, e, tp, &data);
}
static int boot_epoll_wait(int ep, struct epoll_event *ev, int max, int tmo)
{
    return (int)shunt_syscall(SYS_epoll_pwait, ep, ev, max, tmo, NULL, _NSIG / 8);
}
static int boot_epoll_pwait(int ep, struct epoll_event *ev, int max, int tmo, const sigset_t *m)
{
    return (int)shunt_syscall(SYS_epoll_pwait, ep, ev, max, tmo, m, _NSIG / 8);
}
static int boot_epoll_pwait2(int ep, struct epoll_event *ev, int max, const struct timespec *t, const sigset_t *m)
{
    return (int)shunt_syscall(SYS_epoll_pwait2, ep, ev, max, t, m, _NSIG / 8);
}
/* Variadic: each argument read as a long, as libc reads them. */
static int boot_prctl(int option, ...)
{
    va_list ap;
    va_start(ap, option);
    unsigned long a2 = va_arg(ap, unsigned long), a3 = va_arg(ap, unsigned long);
    unsigned long a4 = va_arg(ap, unsigned long), a5 = va_arg(ap, unsigned long);
    va_end(ap);
    return (int)shunt_syscall(SYS_prctl, option, a2, a3, a4, a5);
}
static long boot_syscall(long nr, ...)
{
    va_list ap;
    va_start(ap, nr);
    long a1 = va_arg(ap, long), a2 = va_arg(ap, long), a3 = va_arg(ap, long);
    long a4 = va_arg(ap, long), a5 = va_arg(ap, long), a6 = va_arg(ap, long);
    va_end(ap);
    return shunt_syscall(nr, a1, a2, a3, a4, a5, a6);
}
/* Handlers need libc's bookkeeping (its signal restorer): refuse until it is
 * known.  The sigaction wrapper does not get here before start-up: it calls
 * libc's __sigaction then (interpose/signal_calls.c). */
static int boot_sigaction(int s, const struct sigaction *a, struct sigaction *o) { (void)s; (void)a; (void)o; return nosys(); }
static __sighandler_t boot_signal(int s, __sighandler_t h) { (void)s; (void)h; nosys(); return SIG_ERR; }
/* Process creation and exec need libc's bookkeeping too: refuse until it is known. */
static pid_t boot_fork(void) { return nosys(); }
static pid_t boot_vfork(void) { return nosys(); }
static int boot_clone(int (*f)(void *), void *st, int fl, void *a, ...) { (void)f; (void)st; (void)fl; (void)a; return nosys(); }
static void boot__exit(int status)
{
    shunt_syscall(SYS_exit_group, status);
    __builtin_unreachable();
}
#define boot__Exit boot__exit
static int boot_execv(const char *p, char *const a[]) { (void)p; (void)a; return nosys(); }
static int boot_execvp(const char *p, char *const a[]) { (void)p; (void)a; return nosys(); }
static int boot_execvpe(const char *p, char *const a[], char *const e[]) { (void)p; (void)a; (void)e; return nosys(); }
static int boot_execl(const char *p, const char *a, ...) { (void)p; (void)a; return nosys(); }
static int boot_execlp(const char *p, const char *a, ...) { (void)p; (void)a; return nosys(); }
static int boot_execle(const char *p, const char *a, ...) { (void)p; (void)a; return nosys(); }
static int boot_fexecve(int fd, char *const a[], char *const e[]) { (void)fd; (void)a; (void)e; return nosys(); }
static int boot_posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                            const posix_spawnattr_t *at, char *const a[], char *const e[])
{
    (void)pid; (void)path; (void)fa; (void)at; (void)a; (void)e;
    return ENOSYS;
}
#define boot_posix_spawnp boot_posix_spawn
static int boot_system(const char *c) { (void)c; return nosys(); }
static FILE *boot_popen(const char *c, const char *m) { (void)c; (void)m; nosys(); return NULL; }
static int boot_fa(posix_spawn_file_actions_t *fa) { (void)fa; return ENOSYS; }
static int boot_fa_fd(posix_spawn_file_actions_t *fa, int fd) { (void)fa; (void)fd; return ENOSYS; }
static int boot_posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t *fa, int fd, int nfd)
{
    (void)fa; (void)fd; (void)nfd;
    return ENOSYS;
}
static int boot_posix_spawn_file_actions_addopen(posix_spawn_file_actions_t *fa, int fd, const char *p, int fl, mode_t m)
{
    (void)fa; (void)fd; (void)p; (void)fl; (void)m;
    return ENOSYS;
}
static int boot_posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *fa, const char *p)
{
    (void)fa; (void)p;
    return ENOSYS;
}
#define boot_posix_spawn_file_actions_init boot_fa
#define boot_posix_spawn_file_actions_destroy boot_fa
#define boot_posix_spawn_file_actions_addclose boot_fa_fd
#define boot_posix_spawn_file_actions_addclosefrom_np boot_fa_fd
#define boot_posix_spawn_file_actions_addfchdir_np boot_fa_fd
#define boot_posix_spawn_file_actions_addtcsetpgrp_np boot_fa_fd
static ssize_t boot___read_chk(int fd, void *b, size_t n, size_t bl) { (void)bl; return boot_read(fd, b, n); }
static ssize_t boot___pread_chk(int fd, void *b, size_t n, off_t o, size_t bl) { (void)bl; return boot_pread(fd, b, n, o); }
static ssize_t boot___pread64_chk(int fd, void *b, size_t n, off64_t o, size_t bl) { (void)bl; return boot_pread64(fd, b, n, o); }
static ssize_t boot___recv_chk(int fd, void *b, size_t n, size_t bl, int f) { (void)bl; return boot_recv(fd, b, n, f); }
static ssize_t boot___recvfrom_chk(int fd, void *restrict b, size_t n, size_t bl, int f, __SOCKADDR_ARG a, socklen_t *restrict l)
{
    (void)bl;
    return boot_recvfrom(fd, b, n, f, a, l);
}
static int boot___poll_chk(struct pollfd *f, nfds_t n, int t, size_t fl) { (void)fl; return boot_poll(f, n, t); }
static int boot___ppoll_chk(struct pollfd *f, nfds_t n, const struct timespec *t, const sigset_t *m, size_t fl)
{
    (void)fl;
    return boot_ppoll(f, n, t, m);
}

struct shunt_real_table shunt_real = {
#define SHUNT_SYS(ret, name, params, args, sysno) .name = boot_##name,
#define SHUNT_LIB(ret, name, params) .name = boot_##name,
#include "base/calls.def"
#undef SHUNT_SYS
#undef SHUNT_LIB
};

/*
 * A symbol this libc lacks (close_range on an old one, say) keeps its
 * stand-in.  Each entry is one aligned pointer, published with a relaxed
 * atomic store, so a thread racing with resolution sees either the stand-in
 * or the real function, both correct.
 */
#define RESOLVE(name)                                                              \
    do {                                                                           \
        void *p = dlsym(RTLD_NEXT, #name);                                         \
        if (p)                                                                     \
            atomic_store_explicit((_Atomic(void *) *)(void *)&shunt_real.name, p,  \
                                  memory_order_relaxed);                           \
    } while (0)

long (*shunt_syscall_next)(long nr, ...) = boot_syscall;

void shunt_real_resolve(void)
{
#define SHUNT_SYS(ret, name, params, args, sysno) RESOLVE(name);
#define SHUNT_LIB(ret, name, params) RESOLVE(name);
#include "base/calls.def"
#undef SHUNT_SYS
#undef SHUNT_LIB
    atomic_store_explicit((_Atomic(void *) *)(void *)&shunt_syscall_next, (void *)shunt_real.syscall,
                          memory_order_relaxed);
}
