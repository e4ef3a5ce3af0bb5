/*
 * init.c: the ordered start-up of libshunt.so.
 *
 * Stages, in order, and why there:
 *   1. real functions: everything after this reaches libc through the table;
 *      until then the table's stand-ins make system calls directly.
 *   2. settings: read once from the environment; a bad value is reported in
 *      one line and leaves every connection on kernel TCP.
 *   3. log: needs the settings, and is needed by everything after it.
 *   4. seccomp: a process that starts under a filter (inherited across
 *      exec) must make no call of shunt's own before it is known that the
 *      filter allows them (core/process/sandbox.c); it needs the settings
 *      and the log, and every stage after it makes such calls.
 *   5. hooks: the lower layers learn what the higher ones want told
 *      (the fd table probes unknown sockets through the TCP kind, a
 *      shutdown wakes epoll sets, io_uring seen asks for the fail-safe),
 *      before the table can probe anything.
 *   6. fd table and waiting: need the log for their own errors.  Until it exists every
 *      lookup answers passthrough, which is what a call re-entering shunt
 *      from inside stages 1 to 3 (a malloc replacement reading a file while
 *      dlsym allocates) must get; a sandboxed process never makes them.
 *
 * Start-up sits on top, in interpose/, so that it may call every layer and
 * none of them has to reach up to it.
 */
#include <sched.h>
#include <stdbool.h>
#include <string.h>

#include "base/log.h"
#include "base/real.h"
#include "core/conn/sockstat.h"
#include "core/fd/fdtable.h"
#include "core/fd/uring_watch.h"
#include "core/kinds/epoll.h"
#include "core/kinds/tcp_socket.h"
#include "core/process/holders.h"
#include "core/process/sandbox.h"
#include "core/process/uring_failsafe.h"
#include "core/wait/wait.h"
#include "interpose/init.h"
#include "interpose/stdio_calls.h"

atomic_int shunt_init_state;
static SHUNT_TLS bool initialising;

/* The hook uring_watch calls: the fail-safe runs at the start (or end) of
 * an intercepted call, where this thread holds none of shunt's locks.  A
 * sandboxed process has none to run: its connections left with the sandbox
 * (reason "sandbox"), and it makes no call of shunt's own. */
static void want_fail_safe(void)
{
    if (shunt_sandboxed())
        return;
    int done = 2;
    atomic_compare_exchange_strong(&shunt_init_state, &done, 3);
}

void shunt_init_slow(void)
{
    if (initialising)
        return;
    int pending = 3;
    if (atomic_load(&shunt_init_state) == 3) {
        /* a vfork child leaves it to its parent: it must not change the table
         * they share; a sandboxed process only clears the request
         * (uring_failsafe_run does nothing there) */
        if (!shunt_in_vfork_child && atomic_compare_exchange_strong(&shunt_init_state, &pending, 2))
            uring_failsafe_run();
        return;
    }
    int expected = 0;
    if (!atomic_compare_exchange_strong(&shunt_init_state, &expected, 1)) {
        /* Another thread is initialising: it waits for nothing, so this ends. */
        while (!shunt_initialised())
            sched_yield();
        return;
    }
    initialising = true;

    shunt_real_resolve();

    char err[400];
    if (settings_load(&shunt_settings, err, sizeof err) < 0) {
        size_t len = strlen(err);
        err[len] = '\n';
        shunt_real.write(2, err, len + 1);
        memset(&shunt_settings, 0, sizeof shunt_settings);
        shunt_settings.accel = false;
    }

    shunt_log_open(&shunt_settings);
    shunt_log(LOG_INFO, "libshunt loaded: accel=%d strict=%d", shunt_settings.accel, shunt_settings.strict);

    sandbox_at_start();
    if (shunt_sandboxed())
        shunt_log_close();   /* (its file's number given back: nothing of shunt's stays in the program's way) */
    else
        shunt_log_place();
    tcp_socket_init();
    epoll_init();
    uring_set_hook(want_fail_safe);
    if (!shunt_sandboxed()) {
        fdt_init();
        if (shunt_log_own_fd() >= 0)
            fdt_install_own(shunt_log_own_fd());   /* the program's close loops leave it (FDT_OWN) */
        shunt_pid = getpid();
    }

    initialising = false;
    atomic_store_explicit(&shunt_init_state, 2, memory_order_release);
}

void shunt_after_fork_child(void)
{
    /* The fd table is lock-free and copied with the process; the epoll
     * sets' doorbell requests are the parent's. */
    shunt_pid = getpid();
    fdt_after_fork_child();
    epoll_after_fork_child();
    sockstat_after_fork_child();   /* the child's own table for shunt stat */
    stdio_after_fork_child();
}

__attribute__((constructor(101))) static void shunt_constructor(void)
{
    shunt_ensure_init();
    /* after init (not in it: init may run inside another library's call),
     * and before main: an image exec'd onto an accelerated socket on fd 0,
     * 1 or 2 gets standard streams that go through shunt */
    if (!shunt_sandboxed())
        stdio_at_start();
}

/* Runs at exit() (not at _exit or on a fatal signal: the registry's sweep
 * and the companion's FIN cover those). */
__attribute__((destructor(101))) static void shunt_destructor(void)
{
    if (shunt_initialised() && !shunt_sandboxed()) {
        epoll_release_all();
        stdio_at_exit();   /* exit flushes stdio only after the destructors: too late for the channels */
        holders_at_exit();
        sockstat_at_exit();
    }
}
