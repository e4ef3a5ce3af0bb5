/*
 * tcp_sock.c: a TCP socket's connection id, the count of its end's holders
 * when this process passes it on, and what a corrupt segment does to the
 * connection (tcp_sock.h).
 */
#include <sys/socket.h>
#include <sys/stat.h>

#include "base/real.h"
#include "core/fd/tcp_sock.h"

uint64_t tcp_sock_id(struct tcp_sock *t, int fd)
{
    if (!t->inode) {
        struct stat st;
        if (fstat(fd, &st) == 0)
            t->inode = (uint64_t)st.st_ino;
    }
    return t->inode;
}

void tcp_sock_hold_more(struct tcp_sock *t, unsigned n)
{
    atomic_store_explicit(&t->end_shared, true, memory_order_relaxed);
    channel_own_indexes(&t->ch, false);   /* another process may move our indexes too */
    atomic_fetch_add(&t->ch.self->holders, n);
}

void tcp_sock_corrupt(struct tcp_sock *t, int fd, const char *why)
{
    if (!atomic_exchange(&t->broken, true) && why)
        shunt_log_sock(LOG_ERROR, t, fd, "%s; connection reset", why);
    /* No channel (an inherited end we could not map): its other holders go
     * on.  Else the peer may find nothing wrong in the segment (the
     * scribble was in a word only we read) and wait on it for ever: its
     * kernel tells it.  Our own sleepers, and those of other holders of
     * this end, wake on the same shutdown. */
    if (!t->ch.hdr || atomic_exchange(&t->peer_told, true))
        return;
    tcp_sock_set_state(t, SIDE_RESET);
    shunt_real.shutdown(tcp_call_fd(t, fd), SHUT_RDWR);
}
