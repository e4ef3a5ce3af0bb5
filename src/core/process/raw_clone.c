/*
 * raw_clone.c: a process made by the clone system call itself (raw_clone.h).
 *
 * vsftpd makes every session so (syscall(SYS_clone, CLONE_NEWPID |
 * CLONE_NEWIPC | SIGCHLD)), and its session's unprivileged half with
 * CLONE_NEWNET; container tools and sandboxes (bubblewrap, systemd's
 * raw_clone, Chromium's zygote) do the same.  Such a child is a copy of
 * the process that no fork handler ran for, often in namespaces where
 * shunt's identities mean nothing: a pid of another pid namespace (which
 * the channels' holder counts and the registry's proofs are made of), a
 * network namespace whose registry is not the one mapped.  Following it as
 * fork does would count a holder by a pid nobody can check; not following
 * it at all (before) let the parent's close of its copy end the connection
 * for the peer while the child still used it.
 *
 * So the rule, as for an exec into a program without shunt: before the
 * clone, every accelerated connection of the process moves back to kernel
 * TCP with the downgrade protocol (bytes exact; the other end follows,
 * reason "downgraded"), and the new process passes every call through,
 * from its first instruction: the flag that says so is this thread's (TLS),
 * set before the clone and cleared after it in the parent only, so the
 * child's copy of memory keeps it whether it returns here (clone with no
 * new stack, as fork) or starts on a stack of its own (libc's clone(),
 * clone3).  The parent goes on accelerating what it makes next: only the
 * window of the clone itself refuses new channels (shunt_raw_clones), so
 * that none is made for the child to inherit (a negotiation another thread
 * had begun before the count went up can still end in a channel after the
 * pass: the window fork's counting of holders has too).  Listeners stay registered:
 * a child that accepts on one accepts kernel TCP, as a program without
 * shunt does.
 *
 * A clone that shares the memory (CLONE_VM: a thread made by hand, a vfork
 * made by hand) is left alone: the flag would be the parent's too.
 */
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>

#include "base/log.h"
#include "base/self.h"
#include "core/conn/downgrade.h"
#include "core/conn/fabric_conn.h"
#include "core/fd/fdtable.h"
#include "core/process/downgrade_points.h"
#include "core/process/raw_clone.h"

struct leave_count {
    int moved, stuck;
};

static void leave(int fd, void *ctx)
{
    struct leave_count *n = ctx;
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->kind == SOCK_TCP) {
        struct tcp_sock *t = tcp_of(f.sock);
        if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr) {
            if (downgrade_leave_because(t, fd, FB_RAW_CLONE)) {
                shunt_log_sock(LOG_INFO, t, fd, "moved back to kernel TCP: a raw clone of this process gets it");
                n->moved++;
            } else {
                shunt_log_sock(LOG_ERROR, t, fd, "raw clone: the connection could not move back to kernel TCP");
                n->stuck++;
            }
        }
    }
    fdt_put(&f);
}

bool raw_clone_before(unsigned long flags)
{
    if ((flags & CLONE_VM) || shunt_in_vfork_child || shunt_sandboxed())
        return false;
    int saved = errno;
    atomic_fetch_add_explicit(&shunt_raw_clones, 1, memory_order_acq_rel);
    if (shunt_settings.accel) {
        struct leave_count n = { 0, 0 };
        downgrade_take_up_inherited();   /* an accelerated socket inherited and never used */
        downgrade_queued_before_exec();  /* ones in SCM_RIGHTS messages the child could receive */
        fabric_conn_leave_all("a raw clone", true);
        fdt_for_each_object(0, ~0U, leave, &n);
        shunt_log(LOG_INFO, "raw clone (flags %#lx): %d connection(s) moved back to kernel TCP%s; the new process "
                  "passes every call through", flags, n.moved, n.stuck ? ", some could not (see above)" : "");
    }
    shunt_thread_passes = true;
    errno = saved;
    return true;
}

void raw_clone_after(long result)
{
    if (result == 0)
        return;   /* the new process, on this stack: it keeps passing through */
    shunt_thread_passes = false;
    atomic_fetch_sub_explicit(&shunt_raw_clones, 1, memory_order_acq_rel);
}
