/*
 * process_calls.c: wrappers for fork, clone, exec, posix_spawn and _exit,
 * the points where a process's sockets change hands or it ends: clone also
 * as the system call through syscall() (clone and clone3; the trampoline
 * in sandbox_calls.c jumps here).  vfork lives in vfork.c: it cannot be an
 * ordinary C function; system and popen, whose spawn is inside libc, in
 * shell_calls.c.
 */
#include <linux/sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "base/signals.h"
#include "core/conn/downgrade.h"
#include "core/conn/fabric_conn.h"
#include "core/conn/fabric_process.h"
#include "core/conn/sockstat.h"
#include "core/kinds/epoll.h"
#include "core/kinds/tcp_socket.h"
#include "core/process/downgrade_points.h"
#include "core/process/holders.h"
#include "core/process/raw_clone.h"
#include "core/process/spawn_plan.h"
#include "interpose/wrap.h"

extern char **environ;

/* Both processes hold every channel after fork: count the child in first,
 * so that whichever closes first does not end the connection for the other. */
SHUNT_EXPORT pid_t fork(void)
{
    SANDBOX_PASS(shunt_real.fork());
    fabric_conn_before_fork();   /* a child may not use its parent's engine */
    spawn_actions_before_fork();
    epoll_before_fork();
    holders_before_fork();
    fabric_process_fork_lock();
    pid_t pid = shunt_real.fork();
    int err = errno;
    fabric_process_fork_unlock(pid == 0);
    spawn_actions_after_fork();
    if (pid == 0) {
        shunt_sig_deferred = 0;   /* the parent's deferred signals stay the parent's */
        shunt_after_fork_child();
        holders_after_fork_child();
        fabric_conn_after_fork(0);
    } else {
        epoll_after_fork_parent();
        fabric_conn_after_fork(pid);
    }
    holders_after_fork();
    if (pid < 0)
        holders_fork_failed();
    errno = err;
    return pid;
}

/* A process made by clone itself: its connections leave first, and the
 * new process passes every call through (core/process/raw_clone.c).
 * libc's clone() starts the child on its own stack, in fn: only the parent
 * returns here. */
SHUNT_EXPORT int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    pid_t *ptid = va_arg(ap, pid_t *);
    void *tls = va_arg(ap, void *);
    pid_t *ctid = va_arg(ap, pid_t *);
    va_end(ap);
    SANDBOX_PASS(shunt_real.clone(fn, stack, flags, arg, ptid, tls, ctid));
    bool ours = raw_clone_before((unsigned)flags);
    int r = shunt_real.clone(fn, stack, flags, arg, ptid, tls, ctid);
    if (ours)
        raw_clone_after(r);
    return r;
}

/* clone3's flags, from the program's struct clone_args, read as the kernel
 * will (a pointer it cannot read fails there with EFAULT, not here);
 * CLONE_VM, which raw_clone_before leaves alone, when the kernel will
 * refuse the call anyway or the flags cannot be read. */
static unsigned long clone3_flags(const void *args, unsigned long size)
{
    uint64_t flags;
    if (!args || size < CLONE_ARGS_SIZE_VER0)
        return CLONE_VM;
    struct iovec local = { &flags, sizeof flags }, remote = { (void *)args, sizeof flags };
    ssize_t r = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (r == (ssize_t)sizeof flags)
        return (unsigned long)flags;
    return CLONE_VM;   /* unreadable, or the read refused: left alone, as before */
}

/* syscall(SYS_clone, flags, stack, ...) or syscall(SYS_clone3, args,
 * size): with no new stack the child returns here, as from fork. */
long shunt_syscall_clone(long number, long a1, long a2, long a3, long a4, long a5, long a6);

__attribute__((used)) long shunt_syscall_clone(long number, long a1, long a2, long a3, long a4, long a5, long a6)
{
    int saved = errno;
    shunt_ensure_init();
    unsigned long flags = number == SYS_clone ? (unsigned long)a1 : clone3_flags((const void *)a1, (unsigned long)a2);
    errno = saved;
    bool ours = raw_clone_before(flags);
    long r = shunt_real.syscall(number, a1, a2, a3, a4, a5, a6);
    if (ours)
        raw_clone_after(r);
    return r;
}

/* _exit runs no destructor, so what shunt's destructor does for exit is
 * done here: the channels are let go of as at a close (the holder count goes
 * down, so that the last holder's close writes the end into the ring, and a
 * last holder with bytes its peer has not read leaves their copy in TCP for
 * a later downgrade of the peer: downgrade.c), and the table for shunt stat
 * goes.  Not stdio: _exit flushes nothing.  A vfork child's _exit is the
 * parent's business: its memory is the parent's. */
static _Noreturn void exit_now(void (*real)(int), int status)
{
    static atomic_bool released;
    if (shunt_sandboxed())
        real(status);
    if (shunt_initialised() && !shunt_in_vfork_child &&
        !atomic_exchange(&released, true)) {
        epoll_release_all();
        holders_at_exit();
    }
    if (shunt_initialised())
        sockstat_at_exit();
    real(status);
    __builtin_unreachable();
}

SHUNT_EXPORT void _exit(int status)
{
    exit_now(shunt_real._exit, status);
}

SHUNT_EXPORT void _Exit(int status)
{
    exit_now(shunt_real._Exit, status);
}

/* exec replaces this image: its holds on channels end here, and the new
 * image (under shunt) takes them up again when it finds the fds. */
#define AROUND_EXEC(call, path, fd, envp, search) \
    SANDBOX_PASS(call);                     \
    if (!shunt_in_vfork_child)              \
        fabric_conn_leave_all("exec", true); \
    downgrade_before_exec(path, fd, envp, search); \
    holders_before_exec();              \
    int r_ = call;                          \
    int err_ = errno;                       \
    holders_exec_failed();              \
    errno = err_;                           \
    return r_

SHUNT_EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    AROUND_EXEC(shunt_real.execve(path, argv, envp), path, -1, envp, false);
}

SHUNT_EXPORT int execv(const char *path, char *const argv[])
{
    AROUND_EXEC(shunt_real.execv(path, argv), path, -1, environ, false);
}

SHUNT_EXPORT int execvp(const char *file, char *const argv[])
{
    AROUND_EXEC(shunt_real.execvp(file, argv), file, -1, environ, true);
}

SHUNT_EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    AROUND_EXEC(shunt_real.execvpe(file, argv, envp), file, -1, envp, true);
}

SHUNT_EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    AROUND_EXEC(shunt_real.fexecve(fd, argv, envp), NULL, fd, envp, false);
}

/* The execl family: gather the variadic arguments into an argv on the stack
 * (exec replaces the process or fails, so nothing needs freeing). */
/* As glibc does, the list ends at the first NULL after arg. */
static size_t count_args(va_list ap)
{
    size_t n = 1;
    while (va_arg(ap, const char *))
        n++;
    return n;
}

#define GATHER_ARGS(arg, argv)                              \
    va_list ap;                                             \
    va_start(ap, arg);                                      \
    size_t argc_ = count_args(ap);                     \
    va_end(ap);                                             \
    char *argv[argc_ + 1];                                  \
    argv[0] = (char *)arg;                                  \
    va_start(ap, arg);                                      \
    for (size_t i_ = 1; i_ <= argc_; i_++)                  \
        argv[i_] = va_arg(ap, char *)

SHUNT_EXPORT int execl(const char *path, const char *arg, ...)
{
    GATHER_ARGS(arg, argv);
    va_end(ap);
    return execve(path, argv, environ);
}

SHUNT_EXPORT int execlp(const char *file, const char *arg, ...)
{
    GATHER_ARGS(arg, argv);
    va_end(ap);
    return execvp(file, argv);
}

SHUNT_EXPORT int execle(const char *path, const char *arg, ...)
{
    GATHER_ARGS(arg, argv);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}

/* posix_spawn is fork and exec in one: the new program gets the fds that
 * survive its file actions and are not close-on-exec (spawn_plan.c).  From
 * a vfork child (which must change nothing of its parent's) only the
 * exec rule applies. */
static int spawn(bool search, pid_t *restrict pid, const char *restrict path, const posix_spawn_file_actions_t *fa,
                 const posix_spawnattr_t *restrict attr, char *const argv[restrict], char *const envp[restrict])
{
    SANDBOX_PASS(search ? shunt_real.posix_spawnp(pid, path, fa, attr, argv, envp)
                        : shunt_real.posix_spawn(pid, path, fa, attr, argv, envp));
    struct spawn_plan plan = { 0 };
    if (shunt_in_vfork_child)
        downgrade_before_exec(path, -1, envp, search);
    else
        spawn_prepare(&plan, path, fa, envp, search);
    int r = search ? shunt_real.posix_spawnp(pid, path, fa, attr, argv, envp)
                   : shunt_real.posix_spawn(pid, path, fa, attr, argv, envp);
    spawn_finish(&plan, r == 0);
    return r;
}

SHUNT_EXPORT int posix_spawn(pid_t *restrict pid, const char *restrict path, const posix_spawn_file_actions_t *fa,
                             const posix_spawnattr_t *restrict attr, char *const argv[restrict],
                             char *const envp[restrict])
{
    return spawn(false, pid, path, fa, attr, argv, envp);
}

SHUNT_EXPORT int posix_spawnp(pid_t *restrict pid, const char *restrict file, const posix_spawn_file_actions_t *fa,
                              const posix_spawnattr_t *restrict attr, char *const argv[restrict],
                              char *const envp[restrict])
{
    return spawn(true, pid, file, fa, attr, argv, envp);
}
