/*
 * fabric_conn_leave.c: a connection leaving the fabric for kernel TCP,
 * losing nothing (fabric_conn.h's "left"): one socket before a call the
 * fabric does not carry, all of the process's before an exec or a fork
 * (a pending server's hello stays pending across a fork), and what a
 * close owes the peer by TCP, pushed, bounded.
 */
#include <poll.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "core/conn/fabric_conn_internal.h"
#include "core/conn/fabric_process.h"
#include "core/conn/sockstat.h"
#include "registry/hello.h"
#include "transport/fabric_ring.h"

#define RELEASE_WAIT_NS (1000ull * 1000 * 1000)   /* a close pushes what is owed this long at most */

/* Under fab_lock: c leaves; true when it is plain TCP now. */
static bool leave_locked(struct fabric_conn *c, int fd, bool exec)
{
    struct fabric_stream *s = &c->s;
    if (!c->ring) {
        /* a client still awaiting its hello: it is taken off when it
         * comes, never attached to; before an exec (this memory goes) at
         * most HELLO_HOLD_NS is given to it */
        c->no_attach = true;
        if (!exec)
            return false;
        uint64_t until = clock_now_ns() + HELLO_HOLD_NS;
        while (s->await_hello && clock_now_ns() < until) {
            (void)fabric_stream_poll(s);   /* settles the first bytes once they are there */
            struct pollfd p = { .fd = fd, .events = POLLIN };
            if (s->await_hello)
                shunt_real.poll(&p, 1, 1);
        }
        return !s->await_hello;
    }
    int r = fabric_stream_leave(s);
    if (r == -EAGAIN || r == -ENOTCONN)
        return false;
    if (r < 0)
        (void)fconn_broken(c, fd);
    /* what the peer is owed by TCP goes now, bounded: nothing of this
     * process will carry it after this call */
    uint64_t until = clock_now_ns() + RELEASE_WAIT_NS;
    while (fabric_stream_settle(s, false) == -EAGAIN && clock_now_ns() < until) {
        struct pollfd p = { .fd = fd, .events = 0 };
        shunt_real.poll(&p, 1, 1);
    }
    return true;
}

static void leave(struct tcp_sock *t, int fd, const char *why, bool exec)
{
    if (atomic_load(&t->path) != PATH_FABRIC || fconn_pending_to_tcp(t, fd, why))
        return;
    fabric_process_lock();
    struct fabric_conn *c = fconn_of(t, fd);
    bool gone = leave_locked(c, fd, exec);
    bool tcp = gone || !fconn_after_call(c, fd);
    fabric_process_unlock();
    if (gone && atomic_load(&t->path) == PATH_FABRIC) {
        shunt_log_sock(LOG_INFO, t, fd, "fabric: left for kernel TCP before %s", why);
        fallback_record(t, fd, FB_FABRIC_LEFT, false);
        sockstat_publish(t, fd, 0, 0, NULL, 0);
    } else if (!tcp) {
        shunt_log_sock(LOG_DEBUG, t, fd, "fabric: before %s: its hello, if one comes, is taken off, not attached", why);
    }
}

void fabric_conn_leave(struct tcp_sock *t, int fd, const char *why)
{
    leave(t, fd, why, true);   /* the call goes to the kernel: a hello must not be left for it */
}

void fabric_conn_leave_no_wait(struct tcp_sock *t, int fd, const char *why)
{
    leave(t, fd, why, false);
}

struct leave_all {
    const char *why;
    bool exec;
    bool fork;      /* a fork: pending hellos stay pending, the child a holder too */
    pid_t child;    /* after the fork: the child's pid, 0 in the child, < 0 none */
    bool after;
};

static void leave_fd(int fd, void *ctx)
{
    struct leave_all *a = ctx;
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->kind == SOCK_TCP && atomic_load(&tcp_of(f.sock)->path) == PATH_FABRIC) {
        struct tcp_sock *t = tcp_of(f.sock);
        struct fabric_conn *c = t->fab;
        if (a->fork && c && atomic_load(&c->pending)) {
            if (a->after)
                fabric_pending_after_fork(&c->pend, a->child);
            else
                fabric_pending_before_fork(&c->pend);
        } else if (!a->after) {
            leave(t, fd, a->why, a->exec);
        }
    }
    fdt_put(&f);
}

void fabric_conn_leave_all(const char *why, bool exec)
{
    if (!atomic_load_explicit(&fconn_any, memory_order_relaxed))
        return;
    struct leave_all a = { .why = why, .exec = exec };
    fdt_for_each_object(0, ~0U, leave_fd, &a);
}

void fabric_conn_before_fork(void)
{
    if (!atomic_load_explicit(&fconn_any, memory_order_relaxed))
        return;
    struct leave_all a = { .why = "fork", .fork = true };
    fdt_for_each_object(0, ~0U, leave_fd, &a);
}

void fabric_conn_after_fork(pid_t pid)
{
    if (!atomic_load_explicit(&fconn_any, memory_order_relaxed))
        return;
    struct leave_all a = { .why = "fork", .fork = true, .child = pid, .after = true };
    fdt_for_each_object(0, ~0U, leave_fd, &a);
}

void fabric_conn_leave_fds(const int *fds, size_t n, const char *why)
{
    if (!atomic_load_explicit(&fconn_any, memory_order_relaxed))
        return;
    struct leave_all a = { .why = why, .exec = true };   /* the receiver cannot take a hello off */
    for (size_t i = 0; i < n; i++)
        leave_fd(fds[i], &a);
}

void fabric_conn_release(struct tcp_sock *t, int fd)
{
    fconn_pending_dropped(t->fab);
    if (atomic_load(&t->path) != PATH_FABRIC || !t->fab || t->fab->pid != shunt_pid)
        return;
    fabric_process_lock();
    struct fabric_conn *c = fconn_of(t, fd);
    if (!c->server && !c->ring && c->s.await_hello) {
        /* a hello that came is taken off (never attached to): left unread
         * in the socket, it would turn the close's FIN into a reset the
         * kernel's close would not send (poll_errors saw POLLERR where
         * the kernel shows POLLRDHUP|POLLHUP) */
        c->no_attach = true;
        (void)fabric_stream_poll(&c->s);
    }
    uint64_t until = clock_now_ns() + RELEASE_WAIT_NS;
    while (!c->s.broken && fabric_stream_settle(&c->s, false) == -EAGAIN && clock_now_ns() < until) {
        struct pollfd p = { .fd = fd, .events = 0 };
        shunt_real.poll(&p, 1, 1);
    }
    if (c->ring && c->s.moved && !c->s.broken)
        (void)fabric_ring_flush(c->ring);
    fabric_process_unlock();
}
