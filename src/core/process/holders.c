/*
 * holders.c: the holders of each channel's ends across fork, vfork,
 * posix_spawn, exec, SCM_RIGHTS and exit (holders.h); and whether a listener
 * this process listed may be held by another process since (listener_shared,
 * for negotiate_listener_closed).
 *
 * Holders: how many processes hold each end of a channel.  Who counts:
 *   fork          the parent counts the child in before it exists;
 *   vfork, posix_spawn
 *                 the parent counts in the new program, for every channel
 *                 with an fd that survives exec (not close-on-exec);
 *   exec          the old image hands its holds to the new one, except for
 *                 channels all of whose fds close at exec;
 *   SCM_RIGHTS    the sender counts the receiver in before sending.
 * A process that finds an inherited fd (after exec, or received) attaches
 * without counting: its hold was taken for it.  A hold whose process never
 * attaches only delays the FIN marker; its TCP socket's FIN, when the
 * process is gone, still ends the connection for the peer.
 *
 * Each pass visits every fd of this process; an object is adjusted once,
 * told apart by an epoch number.
 */
#include "base/real.h"
#include "core/conn/deferred_close.h"
#include "core/conn/release.h"
#include "core/fd/call_marks.h"
#include "core/fd/fdtable.h"
#include "core/kinds/epoll.h"
#include "core/process/holders.h"
#include "core/wait/wait.h"

static unsigned epoch;

enum holders_which { ALL_CHANNELS, SURVIVING_EXEC, CLOSED_BY_EXEC };

struct holders_ctx {
    int delta;
    unsigned mark;
    enum holders_which which;
    bool survivors_pass;    /* first pass: which channels have an fd that survives exec */
    bool quiesce;           /* fork: hold each channel's local locks across it */
};

static struct tcp_sock *channel_of(struct fdref *f)
{
    if (!f->sock || f->sock->kind != SOCK_TCP)
        return NULL;
    struct tcp_sock *t = tcp_of(f->sock);
    return atomic_load(&t->path) != PATH_TCP && t->ch.hdr ? t : NULL;
}

/* A listener this process listed may now be held by another process too
 * (negotiate_listener_closed keeps its entry then, when sock_diag cannot see
 * its namespace). */
static void listener_shared(struct fdref *f)
{
    if (f->sock && f->sock->kind == SOCK_TCP && tcp_of(f->sock)->listener_pid == shunt_pid)
        tcp_of(f->sock)->listener_shared = true;
}

static void adjust_holders(int fd, void *ctx)
{
    struct holders_ctx *h = ctx;
    struct fdref f = fdt_get(fd);
    struct tcp_sock *t = channel_of(&f);
    if (h->delta > 0)
        listener_shared(&f);
    if (t && h->survivors_pass) {
        int fl = shunt_real.fcntl(fd, F_GETFD);
        if (t->exec_epoch != h->mark) {
            t->exec_epoch = h->mark;
            t->survives_exec = false;
        }
        if (fl >= 0 && !(fl & FD_CLOEXEC))
            t->survives_exec = true;
    } else if (t && t->fork_epoch != h->mark) {
        bool survives = t->exec_epoch == h->mark && t->survives_exec;
        if (h->which == ALL_CHANNELS || survives == (h->which == SURVIVING_EXEC)) {
            t->fork_epoch = h->mark;
            if (h->quiesce) {
                /* no copy of this process's may be half done as fork
                 * snapshots it: from now on both processes lock for real */
                crit_lock(&t->rx_lock);
                crit_lock(&t->tx_lock);
            }
            if (h->delta > 0)
                tcp_sock_hold_more(t, (unsigned)h->delta);   /* from now on its end is shared */
            else
                atomic_fetch_sub(&t->ch.self->holders, (unsigned)-h->delta);
            if (h->delta > 0 && h->which == SURVIVING_EXEC)
                epoll_socket_shared(t, fd);   /* the new program may shut it down */
        }
    }
    fdt_put(&f);
}

static void adjust_all(int delta, enum holders_which which)
{
    struct holders_ctx h = { delta, ++epoch, which, false, false };
    if (which != ALL_CHANNELS) {
        h.survivors_pass = true;
        fdt_for_each_object(0, ~0U, adjust_holders, &h);
        h.survivors_pass = false;
    }
    fdt_for_each_object(0, ~0U, adjust_holders, &h);
}

/* At exit the kernel closes every fd; shunt lets go of the channels first,
 * as close would, so that nothing of them outlives the last holder. */
static void release_at_exit(int fd, void *ctx)
{
    (void)ctx;
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->kind == SOCK_TCP)
        release_last_fd(&f);
    fdt_put(&f);
}

void holders_at_exit(void)
{
    fdt_for_each_object(0, ~0U, release_at_exit, NULL);
    deferred_close_at_exit();   /* exit ends the calls that still wait: their sockets close now */
}

void holders_in_flight(const int *fds, size_t n, int delta)
{
    for (size_t i = 0; i < n; i++) {
        struct fdref f = fdt_get(fds[i]);
        if (delta > 0)
            listener_shared(&f);
        if (f.sock && f.sock->kind == SOCK_TCP) {
            struct tcp_sock *t = tcp_of(f.sock);
            if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr) {
                if (delta > 0) {
                    tcp_sock_hold_more(t, (unsigned)delta);
                    epoll_socket_shared(t, fds[i]);   /* the receiver may shut it down */
                } else {
                    atomic_fetch_sub(&t->ch.self->holders, (unsigned)-delta);
                }
            }
        }
        fdt_put(&f);
    }
}

void holders_before_fork(void)
{
    struct holders_ctx h = { 1, ++epoch, ALL_CHANNELS, false, true };
    fdt_for_each_object(0, ~0U, adjust_holders, &h);
    wait_before_fork();   /* last: the wait sections take it after the rings' locks */
}

static void unlock_after_fork(int fd, void *ctx)
{
    unsigned mark = *(unsigned *)ctx;
    struct fdref f = fdt_get(fd);
    struct tcp_sock *t = channel_of(&f);
    if (t && t->fork_epoch == mark && !t->fork_unlocked) {
        t->fork_unlocked = true;
        crit_unlock(&t->tx_lock);
        crit_unlock(&t->rx_lock);
    }
    fdt_put(&f);
}

static void clear_unlocked(int fd, void *ctx)
{
    (void)ctx;
    struct fdref f = fdt_get(fd);
    struct tcp_sock *t = channel_of(&f);
    if (t)
        t->fork_unlocked = false;
    fdt_put(&f);
}

/* In both processes after fork (and in the parent when it failed). */
void holders_after_fork(void)
{
    wait_after_fork();
    unsigned mark = epoch;
    fdt_for_each_object(0, ~0U, unlock_after_fork, &mark);
    fdt_for_each_object(0, ~0U, clear_unlocked, NULL);
}

void holders_fork_failed(void) { adjust_all(-1, ALL_CHANNELS); }

static void forget_threads(int fd, void *ctx)
{
    (void)ctx;
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->kind == SOCK_TCP)
        wait_forget_threads(tcp_of(f.sock));
    fdt_put(&f);
}

/* In the child after fork: only the forking thread came along.  The
 * parent's waiting threads are not here, and the sockets the parent closed
 * while they waited were never the program's in the child. */
void holders_after_fork_child(void)
{
    wait_after_fork_child();
    call_marks_after_fork_child();
    fdt_for_each_object(0, ~0U, forget_threads, NULL);
    deferred_close_after_fork_child();
}

/* The new program holds what survives exec: counted in by the parent. */
void holders_before_spawn(void) { adjust_all(1, SURVIVING_EXEC); }
void holders_spawn_failed(void) { adjust_all(-1, SURVIVING_EXEC); }

/* This image lets go of the channels whose every fd closes at exec (a vfork
 * child has nothing to let go of: its parent counted the new program). */
void holders_before_exec(void)
{
    if (!shunt_in_vfork_child) {
        epoll_release_all();
        adjust_all(-1, CLOSED_BY_EXEC);
    }
}

void holders_exec_failed(void)
{
    if (!shunt_in_vfork_child)
        adjust_all(1, CLOSED_BY_EXEC);
}
