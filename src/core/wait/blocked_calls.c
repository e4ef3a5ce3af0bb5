/*
 * blocked_calls.c: the calls of this process that wait on a socket,
 * counted so that a close of its last fd meanwhile leaves them their
 * socket, as the kernel does (core/conn/deferred_close.c finishes it).
 */
#include <sched.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "core/fd/call_marks.h"
#include "base/fd_place.h"
#include "core/wait/wait_shared.h"

void wait_forget_threads(struct tcp_sock *t)
{
    t->kernel_sleeper = false;
    t->futex_waiters = 0;
    t->local_sleepers = 0;
    t->blocked_calls = 0;
    t->close_deferred = false;
    /* the parent's threads in waits are not here (the end's count in the
     * segment still has them: they wait in the parent) */
    atomic_store(&t->waiters_here, 0);
}

void wait_calls_settle(struct tcp_sock *t)
{
    atomic_store(&t->close_waiting, true);
    uint64_t give_up = clock_now_ns() + 2000000000ull;
    for (unsigned i = 0;; i++) {
        crit_lock(&wait_lock);
        bool settled = call_marks_on(&t->base) <= t->blocked_calls;
        crit_unlock(&wait_lock);
        /* after a downgrade a call may wait in the kernel's TCP: the close
         * is downgrade.c's then */
        int path = atomic_load(&t->path);
        if (settled || (path != PATH_SHM && path != PATH_FABRIC) || (t->ch.hdr && atomic_load(&t->ch.hdr->down)))
            break;
        if (clock_now_ns() > give_up) {
            shunt_log_sock(LOG_WARN, t, -1, "closed while a call of another thread is under way, "
                           "which neither returned nor slept for 2 s: the peer sees the end now");
            break;
        }
        if (i < 64) {
            sched_yield();
        } else {
            struct timespec pause = { 0, 100000 };
            nanosleep(&pause, NULL);
        }
    }
    atomic_store(&t->close_waiting, false);
}

bool wait_defer_close(struct tcp_sock *t, int fd)
{
    crit_lock(&wait_lock);
    bool defer = t->blocked_calls > 0 && !t->close_deferred;
    if (defer) {
        int own = fd_place_high(fd);
        if (own < 0) {
            shunt_log_sock(LOG_WARN, t, fd, "closed while a call waits on it, and no fd left to keep it "
                           "(%s): the peer sees the end at once", strerror(errno));
            defer = false;
        } else {
            atomic_store(&t->own_fd, own);
            t->close_deferred = true;
        }
    }
    crit_unlock(&wait_lock);
    return defer;
}

void wait_undefer_close(struct tcp_sock *t)
{
    crit_lock(&wait_lock);
    t->close_deferred = false;
    crit_unlock(&wait_lock);
}

/* This call now waits (wait_lock held): a close of the socket meanwhile
 * leaves the connection open until it returns (deferred_close_call_done). */
void blocked_calls_count(struct tcp_sock *t, bool *blocked)
{
    if (!*blocked) {
        *blocked = true;
        t->blocked_calls++;
    }
}

void wait_call_blocks(struct tcp_sock *t, bool *blocked)
{
    crit_lock(&wait_lock);
    blocked_calls_count(t, blocked);
    crit_unlock(&wait_lock);
}

bool wait_call_done(struct tcp_sock *t)
{
    crit_lock(&wait_lock);
    bool finish = t->blocked_calls > 0 && --t->blocked_calls == 0 && t->close_deferred;
    if (finish)
        t->close_deferred = false;
    crit_unlock(&wait_lock);
    return finish;
}
