/*
 * sandbox_probe.c: trying shunt's own calls under an inherited seccomp
 * filter, in a child that may die of it (sandbox_probe.h).
 *
 * The kernel shows nobody a process's filter (only a tracer with
 * CAP_SYS_ADMIN may read it), so the child makes each call of
 * sandbox_calls.c with the arguments a filter may judge as shunt passes
 * them and the others harmless (a bad fd, a null address, a zero length:
 * the kernel answers at once, never with EPERM, EACCES or ENOSYS).  A child
 * killed (SIGSYS from SECCOMP_RET_KILL_* or an untrapped SECCOMP_RET_TRAP),
 * answered EPERM, EACCES or ENOSYS where shunt would not cope (the usual
 * errno answers of filters: containers, systemd), stuck (a supervisor that
 * does not answer) or not made at all means no.
 *
 * The child is a raw clone: no atfork handler of the program runs, and no
 * signal announces its end (its exit signal is 0, so the program's SIGCHLD
 * handler and its waitpid(-1) never see it; only a wait with __WALL does).
 * It blocks every signal first, so that no handler of the program runs in
 * it and a trapped call kills it, and makes itself undumpable, so that a
 * death from the filter leaves no core file (the kernel's audit log may
 * still record it).
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include "base/real.h"
#include "core/process/sandbox_calls.h"
#include "core/process/sandbox_probe.h"

#define PROBE_MS 2000   /* a supervisor (SECCOMP_RET_USER_NOTIF) may keep a call waiting */

/* Exit statuses of the child: 0 all ran; PROBE_REFUSED + i, call i got an
 * errno shunt does not cope with. */
#define PROBE_REFUSED 1

static _Noreturn void child(void)
{
    uint64_t all = ~0ull;
    struct rlimit none = { 0, 0 };
    shunt_syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, NULL, sizeof all);
    shunt_syscall(SYS_prlimit64, 0, RLIMIT_CORE, &none, NULL);
    shunt_syscall(SYS_prctl, PR_SET_DUMPABLE, 0, 0, 0, 0);
    int status = 0;
    for (size_t i = 0; i < sandbox_call_count && !status; i++) {
        const struct sandbox_call *c = &sandbox_calls[i];
        long r = shunt_syscall(c->nr, c->args[0], c->args[1], c->args[2], c->args[3], c->args[4], c->args[5]);
        if (r >= 0 && c->makes_fd)
            shunt_syscall(SYS_close, r);
        if (r < 0 && sandbox_call_refused(i, errno))
            status = PROBE_REFUSED + (int)i;
    }
    for (;;)
        shunt_syscall(SYS_exit_group, status > 255 ? 255 : status);
}

static long ms_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - start->tv_sec) * 1000 + (now.tv_nsec - start->tv_nsec) / 1000000;
}

bool sandbox_probe(char *why, size_t whylen)
{
    /* clone(2) with no flags and exit signal 0: a copy of this process, as
     * fork makes it, that tells nobody when it ends */
    long pid = shunt_syscall(SYS_clone, 0L, 0L, 0L, 0L, 0L);
    if (pid == 0)
        child();
    if (pid < 0) {
        snprintf(why, whylen, "no child to try the calls in: %s", strerror(errno));
        return false;
    }
    siginfo_t si;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int i = 0;; i++) {
        memset(&si, 0, sizeof si);
        int r = waitid(P_PID, (id_t)pid, &si, WEXITED | __WALL | WNOHANG);
        if (r == 0 && si.si_pid == (pid_t)pid)
            break;
        if (r < 0 && errno != EINTR) {
            snprintf(why, whylen, "the child that tried the calls was lost: %s", strerror(errno));
            return false;
        }
        if (ms_since(&start) >= PROBE_MS) {
            kill((pid_t)pid, SIGKILL);
            while (waitid(P_PID, (id_t)pid, &si, WEXITED | __WALL) < 0 && errno == EINTR)
                ;
            snprintf(why, whylen, "a call did not return within %d ms", PROBE_MS);
            return false;
        }
        /* the calls take some tens of microseconds: look often at first */
        struct timespec pause = { 0, i < 50 ? 20000 : 1000000 };
        nanosleep(&pause, NULL);
    }
    if (si.si_code == CLD_EXITED && si.si_status == 0)
        return true;
    if (si.si_code == CLD_EXITED && si.si_status >= PROBE_REFUSED &&
        (size_t)(si.si_status - PROBE_REFUSED) < sandbox_call_count)
        snprintf(why, whylen, "%s was refused with an errno",
                 sandbox_calls[si.si_status - PROBE_REFUSED].name);
    else if (si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED)
        snprintf(why, whylen, "a call was answered with signal %d", si.si_status);
    else
        snprintf(why, whylen, "the child that tried the calls ended with %d", si.si_status);
    return false;
}
