/*
 * sandbox.c: shunt and seccomp (sandbox.h).
 *
 * A process under a seccomp filter is killed (or trapped, or refused) by
 * the kernel for calls the filter does not allow, and shunt's own calls
 * (the registry and channels in /dev/shm, the local wake, private fds,
 * sock_diag, its table for shunt stat) are calls the program never makes:
 * OpenSSH's pre-authentication child died of the unlink of that table at
 * exit, even with SHUNT_ACCEL=0.  So the rule: once a process has a filter,
 * shunt makes only calls the filter is known to allow, and if that is not
 * known, none of its own at all.
 *
 * A filter the process installs (prctl, the seccomp system call through
 * syscall(), a libc's seccomp(): interpose/sandbox_calls.c) is read before
 * the kernel gets it and run on every call shunt makes of its own accord
 * (sandbox_filter.c, over the list in sandbox_calls.c).  If each is allowed
 * whatever its varying arguments, nothing changes: the process stays
 * accelerated (a container-like filter, one that refuses a call shunt
 * copes without).  Otherwise, and always for strict mode, the process is
 * sandboxed before the filter is installed:
 *   1. nothing new is accelerated (SANDBOX_LEAVING);
 *   2. every accelerated connection it holds (its fds, inherited ones it
 *      never used, sockets closed while a call waits on them) moves back to
 *      kernel TCP with the downgrade protocol used for an exec into a
 *      program without shunt (core/conn/downgrade.c): the peer, still under
 *      shunt, takes its part at its next call; its listeners leave the
 *      registry; each socket's reason becomes "sandbox";
 *   3. every epoll set is the kernel's alone again (each member of ours
 *      registered with the program's events and data), the wake FIFOs it
 *      kept are closed, and so is the local wake;
 *   4. SANDBOXED: from now on every wrapper hands its call to libc as it is
 *      (no fd table, registry, shared memory, private fd, log line, or
 *      anything at fork or exit).  The table for shunt stat stays as it was
 *      (the sweep removes it once the process is gone, as a killed one's).
 * A filter that the kernel then refuses leaves the process sandboxed: the
 * moves back cannot be undone, and only speed is lost.
 *
 * A process that starts with a filter (/proc/self/status says Seccomp: 2:
 * inherited across exec, under systemd's SystemCallFilter= or a container
 * runtime's profile) cannot show it to shunt: a short-lived child makes
 * every call of the list (sandbox_probe.c), and only if all of them ran is
 * shunt what it always is.  Container profiles allow them all, so
 * containers keep their acceleration; SHUNT_SANDBOX_PROBE=0 skips the probe
 * (the probe itself needs clone and waitid, which a filter may kill) and
 * sandboxes such a process from the start.
 */
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "core/conn/deferred_close.h"
#include "core/conn/downgrade.h"
#include "core/conn/fabric_conn.h"
#include "core/conn/fabric_progress.h"
#include "core/conn/fallback.h"
#include "core/conn/negotiate.h"
#include "core/conn/sockstat.h"
#include "core/fd/fdtable.h"
#include "core/kinds/epoll.h"
#include "core/process/downgrade_points.h"
#include "core/process/sandbox.h"
#include "core/process/sandbox_filter.h"
#include "core/process/sandbox_probe.h"
#include "core/wait/wait.h"

/* ---- a process that starts under a filter ---- */

/* Seccomp's mode from /proc/self/status (0 none, 1 strict, 2 filter; -1
 * unknown).  open, read and close: the loader made them before us, so any
 * filter the process lives under allows them. */
static int status_seccomp(void)
{
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[4096];
    ssize_t n = shunt_real.read(fd, buf, sizeof buf - 1);
    shunt_real.close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    const char *p = strstr(buf, "\nSeccomp:");
    return p ? (int)strtol(p + 9, NULL, 10) : -1;
}

/* After this, shunt writes nothing anywhere: not even its log. */
static void go_quiet(void)
{
    shunt_log_level = LOG_OFF;
}

void sandbox_at_start(void)
{
    int mode = status_seccomp();
    if (mode <= 0)
        return;   /* no filter (or no /proc to say so: taken as none) */
    atomic_store(&shunt_filtered, true);
    char why[200] = "SHUNT_SANDBOX_PROBE=0";
    if (mode == 2 && shunt_settings.sandbox_probe && sandbox_probe(why, sizeof why)) {
        shunt_log(LOG_INFO, "started under a seccomp filter that lets every call of shunt's run (probed)");
        return;
    }
    if (mode != 2)
        snprintf(why, sizeof why, "seccomp mode %d", mode);
    atomic_store(&shunt_sandbox, SANDBOXED);
    shunt_log(LOG_INFO, "started under a seccomp filter (%s): every connection stays on kernel TCP "
              "(reason sandbox) and shunt passes every call through", why);
    go_quiet();
}

/* ---- a filter the process installs ---- */

/* Copies len bytes of the program's memory at src, as the kernel will read
 * them: false where the kernel would answer EFAULT. */
static bool copy_in(void *dst, const void *src, size_t len)
{
    if (!src)
        return false;
    struct iovec local = { dst, len }, remote = { (void *)src, len };
    ssize_t r = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (r == (ssize_t)len)
        return true;
    if (r < 0 && errno != EFAULT) {
        /* refused (an earlier filter may answer it with an errno): the
         * program's own pointer, read as it is */
        memcpy(dst, src, len);
        return true;
    }
    return false;
}

/* The filter at prog (a struct sock_fprog of the program's) would let
 * every call of shunt's run: true, or false with why.  *installs: whether
 * the kernel will install it at all (not for a pointer it cannot read or a
 * length it refuses: nothing changes then). */
static bool filter_allows(const void *prog, bool *installs, char *why, size_t whylen)
{
    struct sock_fprog fp;
    *installs = copy_in(&fp, prog, sizeof fp) && fp.len > 0 && fp.len <= BPF_MAXINSNS;
    if (!*installs)
        return true;
    struct sock_filter *insns = malloc((size_t)fp.len * sizeof *insns);
    if (!insns) {
        snprintf(why, whylen, "no memory to read the filter");
        return false;
    }
    bool ok;
    if (!copy_in(insns, fp.filter, (size_t)fp.len * sizeof *insns)) {
        *installs = false;
        ok = true;
    } else {
        ok = sandbox_filter_allows(insns, fp.len, why, whylen);
    }
    free(insns);
    return ok;
}

/* Step 2 for one fd of the process. */
static void leave_fd(int fd, void *ctx)
{
    (void)ctx;
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->kind == SOCK_TCP) {
        struct tcp_sock *t = tcp_of(f.sock);
        if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr) {
            downgrade_leave(t, fd);
            if (atomic_load(&t->path) == PATH_TCP)
                atomic_store(&t->reason, FB_SANDBOX);
            else
                shunt_log_sock(LOG_ERROR, t, fd, "sandbox: the connection could not move back to kernel TCP");
        } else if (t->listener_pid != 0) {
            negotiate_unlisten(t);
        } else if (!t->negotiated) {
            t->negotiated = true;   /* it will connect, or be accepted, on kernel TCP */
            fallback_record(t, fd, FB_SANDBOX, false);
        }
        sockstat_publish(t, fd, 0, 0, NULL, 0);
    }
    fdt_put(&f);
}

/* Step 2 for a socket the program closed while a call of another thread
 * waits on it (the call goes on on kernel TCP). */
static void leave_deferred(struct tcp_sock *t, int own_fd)
{
    if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr) {
        downgrade_leave(t, own_fd);
        atomic_store(&t->reason, FB_SANDBOX);
    }
}

static void enter(const char *why)
{
    int state = SANDBOX_NONE;
    if (!atomic_compare_exchange_strong(&shunt_sandbox, &state, SANDBOX_LEAVING)) {
        /* another thread is on its way: its filter waits for the same */
        for (int i = 0; i < 100000 && atomic_load(&shunt_sandbox) != SANDBOXED; i++) {
            struct timespec ms = { 0, 100000 };
            nanosleep(&ms, NULL);
        }
        return;
    }
    shunt_log(LOG_INFO, "seccomp filter coming (%s): every connection moves back to kernel TCP, and shunt "
              "passes every call through from now on (reason sandbox)", why);
    atomic_store(&shunt_filtered, true);
    downgrade_take_up_inherited();
    fabric_conn_leave_all("a seccomp sandbox", true);
    fabric_progress_stop();   /* its calls are not the filter's to allow */
    fdt_for_each_object(0, ~0U, leave_fd, NULL);
    deferred_close_each(leave_deferred);
    epoll_sandbox();
    wait_local_sandbox();
    atomic_store(&shunt_sandbox, SANDBOXED);
    go_quiet();
}

void sandbox_before_filter(unsigned long mode, const void *prog)
{
    if (shunt_sandboxed() || (mode != SECCOMP_MODE_STRICT && mode != SECCOMP_MODE_FILTER))
        return;
    char why[200] = "strict mode: read, write and exit only";
    if (mode == SECCOMP_MODE_FILTER) {
        bool installs;
        if (filter_allows(prog, &installs, why, sizeof why)) {
            if (installs) {
                shunt_log(LOG_INFO, "seccomp filter coming, which lets every call of shunt's run: nothing changes");
                if (!shunt_in_vfork_child)   /* (its parent's memory: not its own to mark) */
                    atomic_store(&shunt_filtered, true);
            }
            return;
        }
    }
    if (shunt_in_vfork_child) {
        /* it shares its parent's memory, and only its own fds are its own:
         * as for an exec into a program without shunt, then nothing more */
        shunt_log(LOG_INFO, "seccomp filter coming in a vfork child (%s): its sockets move back to kernel TCP", why);
        downgrade_vfork_child_leave();
        shunt_thread_passes = true;
        return;
    }
    enter(why);
}
