/*
 * deferred_close.c: closing a socket while calls of other threads of this
 * process wait on it.
 *
 * Owns: the list of such sockets, shunt's private copies of their fds
 * (t->own_fd, close-on-exec, near the top of the fd limit: private fds,
 * private_fds.c), and finishing each close when its last waiting call
 * returns, at exit, or (forgotten) in a forked child.
 *
 * The kernel keeps a socket open until the last call using it returns, so
 * the connection stays whole (no FIN, bytes still flow) until then
 * (wait_defer_close counts the calls).
 */
#include <stdatomic.h>

#include "base/log.h"
#include "base/self.h"
#include "base/real.h"
#include "base/signals.h"
#include "core/conn/deferred_close.h"
#include "core/conn/fabric_conn.h"
#include "core/conn/release.h"
#include "base/fd_place.h"
#include "core/wait/wait.h"
#define DEFERRED_MAX DEFERRED_CLOSE_MAX
static pthread_mutex_t deferred_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tcp_sock *deferred[DEFERRED_MAX];
static atomic_int deferred_count;

static bool deferred_add(struct tcp_sock *t)
{
    bool ok = false;
    crit_lock(&deferred_lock);
    for (int i = 0; i < DEFERRED_MAX && !ok; i++) {
        if (!deferred[i]) {
            sock_get(&t->base);   /* the list's own reference: dropped when the close is finished */
            deferred[i] = t;
            atomic_fetch_add(&deferred_count, 1);
            ok = true;
        }
    }
    crit_unlock(&deferred_lock);
    return ok;
}

static bool deferred_remove(struct tcp_sock *t)
{
    bool found = false;
    crit_lock(&deferred_lock);
    for (int i = 0; i < DEFERRED_MAX; i++) {
        if (deferred[i] == t) {
            deferred[i] = NULL;
            atomic_fetch_sub(&deferred_count, 1);
            found = true;
        }
    }
    crit_unlock(&deferred_lock);
    return found;
}

bool deferred_close_owns(int fd)
{
    if (atomic_load_explicit(&deferred_count, memory_order_relaxed) == 0)
        return false;
    bool found = false;
    crit_lock(&deferred_lock);
    for (int i = 0; i < DEFERRED_MAX && !found; i++)
        found = deferred[i] && atomic_load(&deferred[i]->own_fd) == fd;
    crit_unlock(&deferred_lock);
    return found;
}

int deferred_close_fds(int *out, int max)
{
    int n = 0;
    if (atomic_load_explicit(&deferred_count, memory_order_relaxed) != 0) {
        crit_lock(&deferred_lock);
        for (int i = 0; i < DEFERRED_MAX && n < max; i++) {
            int own = deferred[i] ? atomic_load(&deferred[i]->own_fd) : -1;
            if (own >= 0)
                out[n++] = own;
        }
        crit_unlock(&deferred_lock);
    }
    return n;
}

bool deferred_close_relocate(int fd)
{
    bool moved = false;
    crit_lock(&deferred_lock);
    for (int i = 0; i < DEFERRED_MAX && !moved; i++) {
        if (deferred[i] && atomic_load(&deferred[i]->own_fd) == fd && shunt_sandboxed()) {
            /* a sandboxed process makes no fd of shunt's: the copy is
             * forgotten, the program's dup2 closes it, and the waiting call
             * keeps the socket open until it returns (as the kernel would) */
            atomic_store(&deferred[i]->own_fd, -1);
            moved = true;
        } else if (deferred[i] && atomic_load(&deferred[i]->own_fd) == fd) {
            int hi = fd_place_high(fd);
            if (hi >= 0) {
                atomic_store(&deferred[i]->own_fd, hi);
                moved = true;
            }
        }
    }
    crit_unlock(&deferred_lock);
    return moved;
}

/* Closes the channel on shunt's private copy, then the copy. */
static void finish_deferred(struct tcp_sock *t)
{
    int own = atomic_load(&t->own_fd);
    if (own < 0)
        return;
    struct fdref g = { .fd = own, .sock = &t->base, .ops = t->base.ops };
    fabric_conn_release(t, own);   /* what the calls left owed, on the fabric */
    release_channel(&g);
    shunt_log_sock(LOG_DEBUG, t, own, "the last call that waited returned: closed");
    if (deferred_remove(t)) {
        atomic_store(&t->own_fd, -1);
        shunt_real.close(own);
        sock_put(&t->base);   /* the list's reference; t may be gone after this */
    }
}

void deferred_close_call_done(struct tcp_sock *t, struct fdref *f)
{
    f->blocked = false;
    if (wait_call_done(t))
        finish_deferred(t);
}

bool deferred_close_hold(struct tcp_sock *t, int fd)
{
    int path = atomic_load(&t->path);
    if (!(path == PATH_SHM && t->ch.hdr) && !(path == PATH_FABRIC && t->fab))
        return false;
    wait_calls_settle(t);
    if (!wait_defer_close(t, fd))
        return false;
    if (deferred_add(t)) {
        shunt_log_sock(LOG_DEBUG, t, fd, "closed while calls wait on it: the connection stays open "
                       "until they return");
        return true;
    }
    /* no room to remember it: close now, as before */
    int own = atomic_exchange(&t->own_fd, -1);
    wait_undefer_close(t);
    shunt_real.close(own);
    return false;
}

void deferred_close_each(void (*fn)(struct tcp_sock *t, int own_fd))
{
    for (int i = 0; i < DEFERRED_MAX; i++) {
        crit_lock(&deferred_lock);
        struct tcp_sock *t = deferred[i];
        if (t)
            sock_get(&t->base);
        crit_unlock(&deferred_lock);
        if (t) {
            int own = atomic_load(&t->own_fd);
            if (own >= 0)
                fn(t, own);
            sock_put(&t->base);
        }
    }
}

void deferred_close_at_exit(void)
{
    for (int i = 0; i < DEFERRED_MAX; i++) {
        crit_lock(&deferred_lock);
        struct tcp_sock *t = deferred[i];
        if (t)
            sock_get(&t->base);
        crit_unlock(&deferred_lock);
        if (t) {
            finish_deferred(t);
            sock_put(&t->base);
        }
    }
}

/* The parent's waiting threads did not come along: the copies go, and the
 * sockets were never the program's in the child. */
void deferred_close_after_fork_child(void)
{
    for (int i = 0; i < DEFERRED_MAX; i++) {
        struct tcp_sock *t = deferred[i];
        if (t) {
            deferred[i] = NULL;
            int own = atomic_exchange(&t->own_fd, -1);
            if (own >= 0)
                shunt_real.close(own);
            sock_put(&t->base);   /* the list's reference */
        }
    }
    atomic_store(&deferred_count, 0);
}
