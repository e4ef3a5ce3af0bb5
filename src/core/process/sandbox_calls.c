/*
 * sandbox_calls.c: the list of system calls shunt makes of its own accord
 * (sandbox_calls.h), read off the code: the registry, channels and fd
 * tables in /dev/shm (open, size, map, remove), sock_diag, the local wake
 * and the fds kept near the top of the limit, the wake FIFOs, sleeping and
 * doorbells, the downgrade, the judgement of an exec, signals deferred,
 * malloc, and the calls the program's own become under shunt (an accept
 * made with accept4, a sendfile made of preadv, an epoll_wait made with
 * epoll_pwait2).  A call added to shunt's code that no filter may refuse
 * belongs here: a filter that allows everything listed is taken to allow
 * shunt (sandbox.c).  x86_64 system call numbers and flags.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/netlink.h>
#include <sys/epoll.h>
#include <linux/sock_diag.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/process/sandbox_calls.h"

#define BADFD ((uint64_t)-1)     /* no such fd: EBADF */
#define BADPTR 1                 /* no such address: EFAULT */
#define X(...) { __VA_ARGS__ }

/* name, nr, fixed arguments (bits), refusable, makes_fd, arguments */
#define MUST(nm, nr, fixed, ...) { nm, nr, fixed, SANDBOX_MUST_RUN, false, X(__VA_ARGS__) }
#define OPT(nm, nr, fixed, err, ...) { nm, nr, fixed, err, false, X(__VA_ARGS__) }
#define MAKES_FD(nm, nr, fixed, ...) { nm, nr, fixed, SANDBOX_MUST_RUN, true, X(__VA_ARGS__) }

#define A0 1u
#define A1 2u
#define A2 4u
#define A3 8u
#define A4 16u

/* openat as glibc's open, fopen and opendir make it: every set of flags shunt uses */
#define OPEN(flags) MUST("openat " #flags, SYS_openat, A2, BADFD, 0, (flags), 0)

const struct sandbox_call sandbox_calls[] = {
    /* files in /dev/shm and /proc: the registry, channels, fd tables, the budget, wake FIFOs */
    OPEN(O_RDONLY | O_CLOEXEC),
    OPEN(O_RDONLY | O_DIRECTORY | O_CLOEXEC),
    OPEN(O_RDONLY | O_NONBLOCK | O_DIRECTORY | O_CLOEXEC),
    OPEN(O_TMPFILE | O_RDWR | O_CLOEXEC),
    OPEN(O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC),
    OPEN(O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC),
    OPEN(O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC),
    OPEN(O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC),
    OPEN(O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC),
    OPEN(O_RDWR | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC),
    OPEN(O_RDONLY | O_NOFOLLOW | O_CLOEXEC),
    OPEN(O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC),
    OPEN(O_WRONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC),
    OPEN(O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC),
    /* a file that must be this user's own (base/own_file.c), and the log (base/log.c) */
    OPEN(O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC),
    OPEN(O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC),
    OPEN(O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC),
    OPEN(O_WRONLY | O_APPEND | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC),
    MUST("fstatat nofollow", SYS_newfstatat, A3, BADFD, 0, 0, AT_SYMLINK_NOFOLLOW),
    MUST("fstat", SYS_newfstatat, A3, BADFD, 0, 0, AT_EMPTY_PATH),
    MUST("stat", SYS_newfstatat, A3, BADFD, 0, 0, 0),
    MUST("access", SYS_access, A1, 0, X_OK),
    OPT("faccessat2", SYS_faccessat2, A2 | A3, ENOSYS, BADFD, 0, X_OK, AT_EACCESS),   /* glibc falls back */
    MUST("faccessat", SYS_faccessat, A2, BADFD, 0, X_OK),
    MUST("read", SYS_read, 0, BADFD, 0, 0),
    MUST("write", SYS_write, 0, BADFD, 0, 0),
    MUST("readv", SYS_readv, 0, BADFD, 0, 0),
    MUST("writev", SYS_writev, 0, BADFD, 0, 0),
    MUST("preadv", SYS_preadv, 0, BADFD, 0, 0, 0, 0),
    MUST("pread64", SYS_pread64, 0, BADFD, 0, 0, 0),
    MUST("pwrite64", SYS_pwrite64, 0, BADFD, 0, 0, 0),
    MUST("lseek", SYS_lseek, 0, BADFD, 0, SEEK_CUR),
    MUST("close", SYS_close, 0, BADFD),
    MUST("close_range", SYS_close_range, 0, 1, 0, 0),
    MUST("ftruncate", SYS_ftruncate, 0, BADFD, 0),
    MUST("fallocate", SYS_fallocate, A1, BADFD, 0, 0, 0),
    MUST("fchmod", SYS_fchmod, 0, BADFD, 0),
    MUST("unlink", SYS_unlink, 0, 0),
    MUST("link", SYS_link, 0, 0, 0),
    MUST("linkat", SYS_linkat, A4, BADFD, 0, BADFD, 0, AT_SYMLINK_FOLLOW),
    MUST("mknodat", SYS_mknodat, A2, BADFD, 0, S_IFIFO | 0600, 0),
    MUST("getdents64", SYS_getdents64, 0, BADFD, 0, 0),
    MUST("readlinkat", SYS_readlinkat, 0, BADFD, 0, 0, 0),
    /* memory: shared segments, the fd table, malloc */
    MUST("mmap shared", SYS_mmap, A2 | A3, 0, 0, PROT_READ | PROT_WRITE, MAP_SHARED, BADFD, 0),
    MUST("mmap shared anonymous", SYS_mmap, A2 | A3, 0, 0, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
         BADFD, 0),
    MUST("mmap private anonymous", SYS_mmap, A2 | A3, 0, 0, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
         BADFD, 0),
    MUST("munmap", SYS_munmap, 0, 0, 0),
    MUST("mprotect", SYS_mprotect, A2, 0, 0, PROT_READ | PROT_WRITE),
    MUST("brk", SYS_brk, 0, 0),
    MUST("madvise dontneed", SYS_madvise, A2, 0, 0, MADV_DONTNEED),
    OPT("madvise populate", SYS_madvise, A2, SANDBOX_ANY_ERRNO, 0, 0, MADV_POPULATE_WRITE),   /* the ring stays small */
    /* fds of shunt's own: the local wake, copies near the top of the limit, sock_diag */
    MAKES_FD("eventfd2", SYS_eventfd2, A0 | A1, 0, EFD_CLOEXEC | EFD_NONBLOCK),
    MUST("fcntl F_DUPFD_CLOEXEC", SYS_fcntl, A1, BADFD, F_DUPFD_CLOEXEC, 0),
    MUST("fcntl F_GETFD", SYS_fcntl, A1, BADFD, F_GETFD, 0),
    MUST("fcntl F_GETFL", SYS_fcntl, A1, BADFD, F_GETFL, 0),
    MUST("fcntl F_SETFL", SYS_fcntl, A1, BADFD, F_SETFL, 0),
    MUST("dup3", SYS_dup3, A2, BADFD, BADFD, O_CLOEXEC),
    MAKES_FD("socket netlink", SYS_socket, A0 | A1 | A2, AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG),
    /* sockets: doorbells, drains, peeks, the companion's options, learning a port */
    MUST("sendto", SYS_sendto, 0, BADFD, 0, 0, 0, 0, 0),
    MUST("recvfrom", SYS_recvfrom, 0, BADFD, 0, 0, 0, 0, 0),
    MUST("sendmsg", SYS_sendmsg, 0, BADFD, 0, 0),
    MUST("recvmsg", SYS_recvmsg, 0, BADFD, 0, 0),
    MUST("accept4", SYS_accept4, 0, BADFD, 0, 0, 0),
    MUST("bind", SYS_bind, 0, BADFD, 0, 0),
    MUST("getsockname", SYS_getsockname, 0, BADFD, 0, 0),
    MUST("getpeername", SYS_getpeername, 0, BADFD, 0, 0),
    MUST("getsockopt SO_ACCEPTCONN", SYS_getsockopt, A1 | A2, BADFD, SOL_SOCKET, SO_ACCEPTCONN, 0, 0),
    MUST("getsockopt SO_DOMAIN", SYS_getsockopt, A1 | A2, BADFD, SOL_SOCKET, SO_DOMAIN, 0, 0),
    MUST("getsockopt SO_TYPE", SYS_getsockopt, A1 | A2, BADFD, SOL_SOCKET, SO_TYPE, 0, 0),
    MUST("getsockopt SO_PROTOCOL", SYS_getsockopt, A1 | A2, BADFD, SOL_SOCKET, SO_PROTOCOL, 0, 0),
    MUST("getsockopt SO_LINGER", SYS_getsockopt, A1 | A2, BADFD, SOL_SOCKET, SO_LINGER, 0, 0),
    MUST("getsockopt SO_PEERCRED", SYS_getsockopt, A1 | A2, BADFD, SOL_SOCKET, SO_PEERCRED, 0, 0),
    MUST("getsockopt SO_RCVTIMEO", SYS_getsockopt, A1 | A2, BADFD, SOL_SOCKET, SO_RCVTIMEO, 0, 0),
    MUST("getsockopt SO_SNDTIMEO", SYS_getsockopt, A1 | A2, BADFD, SOL_SOCKET, SO_SNDTIMEO, 0, 0),
    MUST("getsockopt SO_PEEK_OFF", SYS_getsockopt, A1 | A2, BADFD, SOL_SOCKET, SO_PEEK_OFF, 0, 0),
    MUST("getsockopt IPV6_V6ONLY", SYS_getsockopt, A1 | A2, BADFD, IPPROTO_IPV6, IPV6_V6ONLY, 0, 0),
    MUST("setsockopt SO_RCVTIMEO", SYS_setsockopt, A1 | A2, BADFD, SOL_SOCKET, SO_RCVTIMEO, 0, 0),
    MUST("setsockopt SO_PEEK_OFF", SYS_setsockopt, A1 | A2, BADFD, SOL_SOCKET, SO_PEEK_OFF, 0, 0),
    MUST("setsockopt TCP_NODELAY", SYS_setsockopt, A1 | A2, BADFD, IPPROTO_TCP, TCP_NODELAY, 0, 0),
    MUST("ioctl SIOCINQ", SYS_ioctl, A1, BADFD, SIOCINQ, 0),
    /* waiting */
    MUST("poll", SYS_poll, 0, 0, 0, 0),
    MUST("ppoll", SYS_ppoll, 0, 0, 0, BADPTR, 0, 8),
    MUST("epoll_wait", SYS_epoll_wait, 0, BADFD, 0, 1, 0),
    MUST("epoll_pwait", SYS_epoll_pwait, 0, BADFD, 0, 1, 0, 0, 8),
    OPT("epoll_pwait2", SYS_epoll_pwait2, 0, ENOSYS, BADFD, 0, 1, 0, 0, 8),   /* epoll_pwait instead */
    MUST("epoll_ctl ADD", SYS_epoll_ctl, A1, BADFD, EPOLL_CTL_ADD, BADFD, 0),
    MUST("epoll_ctl MOD", SYS_epoll_ctl, A1, BADFD, EPOLL_CTL_MOD, BADFD, 0),
    MUST("epoll_ctl DEL", SYS_epoll_ctl, A1, BADFD, EPOLL_CTL_DEL, BADFD, 0),
    MUST("futex wait", SYS_futex, A1, 0, FUTEX_WAIT, 0, 0, 0, 0),
    MUST("futex wake", SYS_futex, A1, 0, FUTEX_WAKE, 0, 0, 0, 0),
    MUST("futex wait private", SYS_futex, A1, 0, FUTEX_WAIT_PRIVATE, 0, 0, 0, 0),
    MUST("futex wake private", SYS_futex, A1, 0, FUTEX_WAKE_PRIVATE, 0, 0, 0, 0),
    MUST("futex wait bitset", SYS_futex, A1, 0, FUTEX_WAIT_BITSET, 0, 0, 0, 0),
    MUST("futex wait bitset private", SYS_futex, A1, 0, FUTEX_WAIT_BITSET_PRIVATE, 0, 0, 0, 0),
    MUST("futex wait bitset realtime", SYS_futex, A1, 0, FUTEX_WAIT_BITSET | FUTEX_CLOCK_REALTIME, 0, 0, 0, 0),
    MUST("futex wait bitset private realtime", SYS_futex, A1, 0,
         FUTEX_WAIT_BITSET_PRIVATE | FUTEX_CLOCK_REALTIME, 0, 0, 0, 0),
    MUST("clock_nanosleep", SYS_clock_nanosleep, A0 | A1, CLOCK_REALTIME, 0, BADPTR, 0),
    MUST("clock_gettime", SYS_clock_gettime, 0, CLOCK_MONOTONIC, BADPTR),
    MUST("sched_yield", SYS_sched_yield, 0, 0),
    MUST("getcpu", SYS_getcpu, 0, 0, 0, 0),
    MUST("getrusage RUSAGE_THREAD", SYS_getrusage, A0, RUSAGE_THREAD, 0),   /* did a spin's yield give the CPU away */
    /* who we are, who lives, signals */
    MUST("getpid", SYS_getpid, 0, 0),
    MUST("gettid", SYS_gettid, 0, 0),
    MUST("geteuid", SYS_geteuid, 0, 0),
    MUST("kill 0", SYS_kill, A1, 0, 0),
    MUST("tgkill", SYS_tgkill, 0, 0, 0, 0),
    MUST("rt_tgsigqueueinfo", SYS_rt_tgsigqueueinfo, 0, 0, 0, 0, 0),
    MUST("rt_sigprocmask", SYS_rt_sigprocmask, 0, SIG_BLOCK, 0, 0, 8),
    MUST("rt_sigpending", SYS_rt_sigpending, 0, BADPTR, 8),              /* around a file's growth (base/fsize.c) */
    MUST("rt_sigtimedwait", SYS_rt_sigtimedwait, 0, BADPTR, 0, 0, 8),
    MUST("prlimit64 RLIMIT_NOFILE", SYS_prlimit64, A1, 0, RLIMIT_NOFILE, 0, 0),
    MUST("getrandom", SYS_getrandom, A2, 0, 0, GRND_NONBLOCK),
    /* single copy (off by default) turns itself off when refused */
    OPT("process_vm_readv", SYS_process_vm_readv, 0, SANDBOX_ANY_ERRNO, 0, 0, 0, 0, 0, 0),
};
const size_t sandbox_call_count = sizeof sandbox_calls / sizeof sandbox_calls[0];

bool sandbox_call_refused(size_t i, int err)
{
    if (err != EPERM && err != EACCES && err != ENOSYS)
        return false;
    int ok = sandbox_calls[i].refusable;
    return ok != SANDBOX_ANY_ERRNO && ok != err;
}
