/*
 * deferred_close.c: closing a socket while calls of other threads of this
 * process wait on it.
 *
 * Owns: the list of such sockets, shunt's private copies of their fds
 * (t->own_fd, close-on-exec, near the top of the fd limit) and the fds the
 * program must not touch (tcp_private_fd*: those, the local wake, and the
 * wake FIFOs epoll sets keep), and finishing each close when
 * its last waiting call returns, at exit, or (forgotten) in a forked child.
 *
 * The kernel keeps a socket open until the last call using it returns, so
 * the connection stays whole (no FIN, bytes still flow) until then
 * (wait_defer_close counts the calls).
 */
#include <stdatomic.h>

#include "core/conn/deferred_close.h"
#include "base/log.h"
#include "base/signals.h"
#include "core/wait/wait.h"
#include "core/wait/xwake.h"
#include "base/real.h"

#define DEFERRED_MAX 64
_Static_assert(1 + DEFERRED_MAX + XWAKE_KEPT_MAX <= TCP_PRIVATE_MAX, "every private fd fits");
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

bool tcp_private_fd(int fd)
{
    if (fd < 0)
        return false;
    if (fd == wait_local_fd() || xwake_kept_is(fd))
        return true;
    if (atomic_load_explicit(&deferred_count, memory_order_relaxed) == 0)
        return false;
    bool found = false;
    crit_lock(&deferred_lock);
    for (int i = 0; i < DEFERRED_MAX && !found; i++)
        found = deferred[i] && atomic_load(&deferred[i]->own_fd) == fd;
    crit_unlock(&deferred_lock);
    return found;
}

int tcp_private_fds(int *out, int max)
{
    int n = 0;
    int lw = wait_local_fd();
    if (lw >= 0 && n < max)
        out[n++] = lw;
    n += xwake_kept_fds(out + n, max - n);
    if (atomic_load_explicit(&deferred_count, memory_order_relaxed) != 0) {
        crit_lock(&deferred_lock);
        for (int i = 0; i < DEFERRED_MAX && n < max; i++) {
            int own = deferred[i] ? atomic_load(&deferred[i]->own_fd) : -1;
            if (own >= 0)
                out[n++] = own;
        }
        crit_unlock(&deferred_lock);
    }
    for (int i = 1; i < n; i++)   /* sorted, for close_range */
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int x = out[j];
            out[j] = out[j - 1];
            out[j - 1] = x;
        }
    return n;
}

bool tcp_relocate_private(int fd)
{
    if (wait_relocate_local(fd) || xwake_kept_relocate(fd))
        return true;
    bool moved = false;
    crit_lock(&deferred_lock);
    for (int i = 0; i < DEFERRED_MAX && !moved; i++) {
        if (deferred[i] && atomic_load(&deferred[i]->own_fd) == fd) {
            int hi = wait_private_dup(fd);
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
    tcp_release_channel(&g);
    shunt_log_sock(LOG_DEBUG, t, own, "the last call that waited returned: closed");
    if (deferred_remove(t)) {
        atomic_store(&t->own_fd, -1);
        shunt_real.close(own);
        sock_put(&t->base);   /* the list's reference; t may be gone after this */
    }
}

void tcp_call_done(struct tcp_sock *t, struct fdref *f)
{
    f->blocked = false;
    if (wait_call_done(t))
        finish_deferred(t);
}


bool deferred_close_hold(struct tcp_sock *t, int fd)
{
    if (atomic_load(&t->path) != PATH_SHM || !t->ch.hdr)
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
