/*
 * release.c: a process lets go of a connection (release.h): the last fd
 * closes or the process exits; the last holder of an end closes the end.
 */
#include "base/real.h"
#include "base/self.h"
#include "core/conn/deferred_close.h"
#include "core/conn/downgrade.h"
#include "core/conn/fabric_conn.h"
#include "core/conn/negotiate.h"
#include "core/conn/release.h"
#include "core/conn/short_conns.h"
#include "core/conn/stream.h"
#include "core/wait/wait.h"

/* The client's last holder closes its end: was the channel worth it?
 * The counters are this end's own (a peer's scribble on them misleads this
 * judgement only). */
static void short_conns_judge(struct tcp_sock *t)
{
    struct chan_side *me = t->ch.self;
    uint64_t bytes = atomic_load_explicit(&me->bytes_out, memory_order_relaxed) +
                     atomic_load_explicit(&me->bytes_in, memory_order_relaxed);
    short_conns_record(&t->dest, atomic_load_explicit(&me->sends, memory_order_relaxed),
                       atomic_load_explicit(&me->recvs, memory_order_relaxed), bytes);
}

/* This process holds the end's last hold: the segment's count says so, or
 * the end was never shared. */
static bool last_holder(struct tcp_sock *t)
{
    return !atomic_load(&t->end_shared) || atomic_load(&t->ch.self->holders) <= 1;
}

/* The short-connection rule's sample, on kernel TCP: judged by the calls
 * it counted (tcp_socket.c), as a channel's end is. */
static void short_sample_judge(struct tcp_sock *t)
{
    pid_t mine = shunt_pid;
    if (atomic_load(&t->path) != PATH_TCP || !atomic_compare_exchange_strong(&t->watch_pid, &mine, 0))
        return;   /* (judged once) */
    short_conns_record(&t->dest, atomic_load_explicit(&t->watch_sends, memory_order_relaxed),
                       atomic_load_explicit(&t->watch_recvs, memory_order_relaxed),
                       atomic_load_explicit(&t->watch_bytes, memory_order_relaxed));
}

/* Let go of the channel, and when no process holds this end any more,
 * close it as TCP would. */
void release_channel(struct fdref *f)
{
    struct tcp_sock *t = tcp_of(f->sock);
    short_sample_judge(t);
    /* An offer the program never looked at again (a connect, maybe a send,
     * then the close): claimed meanwhile, it closes as an accelerated end,
     * with its FIN in the ring and the claim's doorbell taken out of the
     * socket, whose kernel would answer the close with a reset where the
     * kernel alone sends a FIN; not claimed yet, it is withdrawn, and the
     * server takes the connection as kernel TCP.  Only by the end's last
     * holder: a forked child's close or exit is not the connection's
     * (fork_child_leaves_offer). */
    if (atomic_load(&t->path) == PATH_OFFERED && t->ch.hdr && last_holder(t))
        negotiate_settle(t, f->fd);
    /* the other end left for a program without shunt: our unread bytes go
     * to it over TCP before this end closes (by the last holder, with
     * nothing read from its socket any more) */
    if (atomic_load(&t->path) == PATH_SHM && t->ch.hdr && atomic_load(&t->ch.hdr->down)) {
        if (last_holder(t))
            downgrade_closing(t, f->fd);
        else
            downgrade_observe(t, f->fd);
    }
    crit_lock(&t->lock);
    if (t->released) {
        crit_unlock(&t->lock);
        return;
    }
    t->released = true;
    int path = atomic_load(&t->path);
    if (path != PATH_TCP && t->ch.hdr) {
        /* never shared: the last holder, whatever the segment's count says
         * (a scribbled one left the segment behind) */
        if (atomic_fetch_sub(&t->ch.self->holders, 1) == 1 || !atomic_load(&t->end_shared)) {
            if (path == PATH_SHM && !atomic_load(&t->broken) && !atomic_load(&t->ch.hdr->down)) {
                if (t->ch.side == 0)
                    short_conns_judge(t);
                stream_close(t, f->fd);
                downgrade_close_copy(t, f->fd);
                doorbell_await_peer(t);   /* none arrives after the drain */
                /* the last holder of this end: nobody else waits on the
                 * companion, so its doorbells can go; what follows them
                 * tells whether the peer's processes are gone; behind
                 * them may be the peer's closing copy, up to a ring of it
                 * (downgrade_close_copy): discarded, never copied out */
                ssize_t r;
                while ((r = shunt_discard(f->fd, SHUNT_DISCARD_ALL)) > 0)
                    doorbell_ate(t, (size_t)r);
                if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                    atomic_store(&t->peer_gone, true);
            }
            negotiate_forget(t);
        }
    }
    crit_unlock(&t->lock);
}

/* The last fd of this process closes.  Calls of other threads that wait on
 * the socket keep it open until the last of them returns, as the kernel's
 * file outlives the fd (deferred_close.c); otherwise the channel closes now. */
void release_last_fd(struct fdref *f)
{
    if (deferred_close_hold(tcp_of(f->sock), f->fd))
        return;   /* the fabric's release too waits for the last call (finish_deferred) */
    fabric_conn_release(tcp_of(f->sock), f->fd);
    release_channel(f);
}
