/*
 * fabric_progress.c: the thread that drives an engine whose peers need this
 * process's progress (fabric_progress.h).
 *
 * It sleeps on the engine's wake-up fd, as the program's own sleepers in
 * shunt do, and when that fd fires drives the worker under the fabric lock
 * and arms it again.  Arming takes the fd's news: a sleeper of the
 * program's that armed it before and has not yet reached its poll would
 * then sleep through what this thread took (a doorbell, a peer's bytes put
 * into a ring).  So whenever the thread's progress did anything it rings
 * the process's own doorbell, which every sleeper in shunt waits on
 * (fabric_process_wake_fd); a sleeper wakes, looks, and sleeps again if
 * that was not its news.  Costs a wake-up per burst of the engine's work,
 * on the engines that need the thread (UCX's TCP lanes, a setting for
 * tests; UCX 1.22 and later, whose wire-up needs the peer's progress) and
 * nowhere else.
 *
 * All signals are blocked in it: the program's handlers run on its own
 * threads.  A forked child has no such thread (its parent's engine is not
 * its own either); its own engine starts one.  A process under a seccomp
 * filter starts none, and a filter shunt leaves the fabric for ends it
 * before it is installed (core/process/sandbox.c).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/fd_place.h"
#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "core/conn/fabric_process.h"
#include "core/conn/fabric_progress.h"
#include "core/fd/fdtable.h"
#include "transport/fabric_engine.h"

/* Rounds of progress in one go before the lock is let go (the program's
 * threads wait for it meanwhile). */
#define ROUNDS_MAX 4096

static pthread_t thread;
static pid_t thread_pid;      /* the process it runs in (0: none) */
static int stop_fd = -1;      /* an eventfd, written to end it (shunt's own: FDT_OWN) */
static atomic_bool stopping;

static void close_stop_fd(void)
{
    shunt_real.close(stop_fd);
    fdt_forget(stop_fd);
    stop_fd = -1;
}

static void *drive(void *arg)
{
    struct fabric_engine *e = arg;
    int tmo = -1;
    while (!atomic_load(&stopping)) {
        struct pollfd p[2] = { { .fd = fabric_engine_efd(e), .events = POLLIN },
                               { .fd = stop_fd, .events = POLLIN } };
        if (shunt_real.poll(p, 2, tmo) < 0 && errno != EINTR)
            break;
        if (atomic_load(&stopping))
            break;
        fabric_process_lock();
        uint64_t bells = fabric_engine_bells_heard(e);
        unsigned n = 0;
        for (unsigned k; n < ROUNDS_MAX && (k = fabric_engine_progress(e)) > 0;)
            n += k;
        bool armed = fabric_engine_arm(e);
        bool news = n > 0 || fabric_engine_bells_heard(e) != bells;
        fabric_process_unlock();
        if (news)
            fabric_process_wake_self();
        /* not armed: events still pending, progress again (at once if this
         * round did something, else after a millisecond: never a hot loop) */
        tmo = armed ? -1 : n > 0 ? 0 : 1;
    }
    return NULL;
}

static int make_eventfd(void *arg)
{
    (void)arg;
    return shunt_real.eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

void fabric_progress_start(struct fabric_engine *e)
{
    if (thread_pid == shunt_pid)
        return;   /* one engine per process, one thread for it */
    if (!fabric_engine_needs_progress(e) || atomic_load(&shunt_filtered))
        return;
    stop_fd = fd_place_make(make_eventfd, NULL, true);
    if (stop_fd < 0) {
        shunt_log(LOG_INFO, "fabric: no progress thread (no fd: %s): a peer waits while this process is "
                  "outside shunt", strerror(errno));
        return;
    }
    fdt_install_own(stop_fd);   /* never the program's to close */
    atomic_store(&stopping, false);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* the thread's mask: every signal blocked */
    int r = pthread_create(&thread, NULL, drive, e);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (r != 0) {
        shunt_log(LOG_INFO, "fabric: no progress thread (%s): a peer waits while this process is outside shunt",
                  strerror(r));
        close_stop_fd();
        return;
    }
    thread_pid = shunt_pid;
    shunt_log(LOG_DEBUG, "fabric: progress thread started (its peers' puts, gets and flushes need this process)");
}

void fabric_progress_after_fork_child(void)
{
    if (thread_pid && stop_fd >= 0)
        close_stop_fd();   /* its parent's thread's, not its own */
    thread_pid = 0;
}

void fabric_progress_stop(void)
{
    if (thread_pid != shunt_pid || thread_pid == 0)
        return;
    atomic_store(&stopping, true);
    uint64_t one = 1;
    if (shunt_real.write(stop_fd, &one, sizeof one) < 0)
        shunt_log(LOG_DEBUG, "fabric: progress thread's stop: %s", strerror(errno));
    pthread_join(thread, NULL);
    close_stop_fd();
    thread_pid = 0;
}
