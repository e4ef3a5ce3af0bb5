/*
 * signals.c: the program's signal handlers behind shunt's trampoline, and
 * signals deferred while a thread is inside one of shunt's critical
 * sections (see signals.h for why).
 *
 * The kernel is given the trampoline with the program's own flags and
 * mask, so blocking, SA_RESTART, SA_NODEFER, SA_ONSTACK and SA_RESETHAND
 * behave as the program asked; sigaction reports the program's handler.
 * A deferred signal is queued to the same thread again with its original
 * siginfo (rt_tgsigqueueinfo allows any si_code for oneself), so the
 * handler gets a real context and the kernel applies the mask.
 */
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/signals.h"
#include "base/real.h"

SHUNT_TLS unsigned shunt_crit;
SHUNT_TLS unsigned shunt_sig_deferred;
SHUNT_TLS unsigned shunt_sig_ran;
SHUNT_TLS unsigned shunt_sig_ran_norestart;

#define MAX_SIG 65
#define DEFER_SLOTS 4

/* The program's handler for each signal, as the trampoline needs it. */
static struct {
    _Atomic(void *) fn;         /* sa_handler or sa_sigaction; NULL: not behind the trampoline */
    atomic_int flags;           /* the program's sa_flags */
} handlers[MAX_SIG];

/* What sigaction reports; under table_lock. */
static struct sigaction program_action[MAX_SIG];
static bool program_known[MAX_SIG];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static SHUNT_TLS struct {
    int sig;
    siginfo_t info;
} deferred[DEFER_SLOTS];

static void trampoline(int sig, siginfo_t *info, void *uc)
{
    if (sig <= 0 || sig >= MAX_SIG)
        return;
    /* a fault is never deferred: returning would only fault again */
    bool synchronous = sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGTRAP ||
                       sig == SIGSYS;
    if (shunt_crit > 0 && !synchronous) {
        /* a standard signal already waiting is one signal, as in the kernel */
        for (unsigned i = 0; i < shunt_sig_deferred; i++)
            if (deferred[i].sig == sig && sig < SIGRTMIN)
                return;
        if (shunt_sig_deferred < DEFER_SLOTS) {
            deferred[shunt_sig_deferred].sig = sig;
            deferred[shunt_sig_deferred].info = *info;
            shunt_sig_deferred++;
        }
        return;
    }
    void *fn = atomic_load(&handlers[sig].fn);
    int flags = atomic_load(&handlers[sig].flags);
    shunt_sig_ran++;
    if (!(flags & SA_RESTART))
        shunt_sig_ran_norestart++;
    if (!fn)
        return;
    if (flags & SA_RESETHAND)
        atomic_store(&handlers[sig].fn, NULL);   /* the kernel reset its disposition */
    if (flags & SA_SIGINFO)
        ((void (*)(int, siginfo_t *, void *))fn)(sig, info, uc);
    else
        ((void (*)(int))fn)(sig);
}

void signals_run_deferred(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    unsigned n = shunt_sig_deferred;
    shunt_sig_deferred = 0;
    pid_t pid = getpid(), tid = (pid_t)shunt_real.syscall(SYS_gettid);
    for (unsigned i = 0; i < n && i < DEFER_SLOTS; i++)
        shunt_real.syscall(SYS_rt_tgsigqueueinfo, pid, tid, deferred[i].sig, &deferred[i].info);
    pthread_sigmask(SIG_SETMASK, &old, NULL);   /* they are delivered here */
}

static bool is_handler(const struct sigaction *a)
{
    void *fn = (a->sa_flags & SA_SIGINFO) ? (void *)a->sa_sigaction : (void *)a->sa_handler;
    return fn != (void *)SIG_DFL && fn != (void *)SIG_IGN;
}

int signals_sigaction(int sig, const struct sigaction *act, struct sigaction *oact)
{
    if (sig <= 0 || sig >= MAX_SIG || sig == SIGKILL || sig == SIGSTOP)
        return shunt_real.sigaction(sig, act, oact);
    crit_lock(&table_lock);
    struct sigaction kernel_old, mine;
    const struct sigaction *give = act;
    if (act && is_handler(act)) {
        mine = *act;
        mine.sa_sigaction = trampoline;
        mine.sa_flags |= SA_SIGINFO;
        give = &mine;
    }
    /* the trampoline knows the handler before the kernel can call it */
    if (act && is_handler(act)) {
        atomic_store(&handlers[sig].flags, act->sa_flags);
        atomic_store(&handlers[sig].fn, (act->sa_flags & SA_SIGINFO) ? (void *)act->sa_sigaction
                                                                     : (void *)act->sa_handler);
    }
    int r = shunt_real.sigaction(sig, give, &kernel_old);
    if (r == 0) {
        bool behind = kernel_old.sa_sigaction == trampoline && (kernel_old.sa_flags & SA_SIGINFO);
        if (oact)
            *oact = behind && program_known[sig] ? program_action[sig] : kernel_old;
        if (act) {
            program_action[sig] = *act;
            program_known[sig] = true;
            if (!is_handler(act))
                atomic_store(&handlers[sig].fn, NULL);
        }
    }
    crit_unlock(&table_lock);
    return r;
}
