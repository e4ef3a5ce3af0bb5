/*
 * uring_failsafe.c: the process uses io_uring, whose I/O shunt cannot see:
 * its connections move back to kernel TCP (uring_failsafe.h).
 *
 * Why every connection and not the ones the ring touches: an operation's
 * fd is in the ring's memory, read by the kernel, and may be submitted
 * without a system call (SQPOLL) or from fds registered with the ring; the
 * process's connections are the only set shunt can name.  Why the
 * downgrade protocol (core/conn/downgrade.c) rather than leaving the
 * channel: bytes are in the rings, unread by either end, and only the
 * protocol puts them into TCP in order, with the other end's cooperation;
 * that end (another process, under shunt) follows at its next call, or
 * woken by this end's last doorbell, and keeps working on kernel TCP.
 */
#include <stdatomic.h>

#include "base/log.h"
#include "base/self.h"
#include "core/conn/downgrade.h"
#include "core/conn/fabric_conn.h"
#include "core/conn/negotiate.h"
#include "core/conn/sockstat.h"
#include "core/fd/fdtable.h"
#include "core/fd/uring_watch.h"
#include "core/process/downgrade_points.h"
#include "core/process/uring_failsafe.h"

static void leave(int fd, void *ctx)
{
    (void)ctx;
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->kind == SOCK_TCP) {
        struct tcp_sock *t = tcp_of(f.sock);
        if (t->listener_pid == shunt_pid) {
            negotiate_unlisten(t);
            sockstat_publish(t, fd, 0, 0, NULL, 0);
            shunt_log_sock(LOG_INFO, t, fd, "listener withdrawn from the registry: io_uring in this process");
        }
        if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr && downgrade_leave_because(t, fd, FB_URING))
            shunt_log_sock(LOG_INFO, t, fd, "moved back to kernel TCP: io_uring in this process");
    }
    fdt_put(&f);
}

void uring_failsafe_run(void)
{
    static atomic_bool inherited_taken;
    /* sandboxed (or on the way): the sandbox moves every connection back
     * itself (reason "sandbox"), and shunt makes no call of its own there */
    if (shunt_in_vfork_child || !uring_seen() || !shunt_settings.accel || shunt_sandbox_refuses())
        return;
    /* an accelerated socket this image inherited and never used is not in
     * the table yet: look every fd up once (a forked child's parent did) */
    if (!atomic_exchange(&inherited_taken, true))
        downgrade_take_up_inherited();
    fabric_conn_leave_all("io_uring", true);
    fdt_for_each_object(0, ~0U, leave, NULL);
}
