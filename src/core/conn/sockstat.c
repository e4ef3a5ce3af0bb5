/*
 * sockstat.c: turns a TCP socket's state into its record in this
 * process's fd table (registry/procstat.h) for `shunt stat`.  Everything
 * here runs at a state change of a socket (or a fork, exec or exit), never
 * on a send or a receive.
 */
#include <string.h>
#include <sys/stat.h>

#include "core/fd/fdtable.h"
#include "base/self.h"
#include "base/log.h"
#include "core/conn/sockstat.h"
#include "core/fd/uring_watch.h"
#include "core/conn/fallback.h"
#include "base/real.h"
#include "registry/procstat.h"

static void sock_address(int fd, bool peer, struct reg_addr *out)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int r = peer ? shunt_real.getpeername(fd, (struct sockaddr *)&ss, &len)
                 : shunt_real.getsockname(fd, (struct sockaddr *)&ss, &len);
    if (r == 0)
        reg_addr_from_sockaddr(out, (struct sockaddr *)&ss, len);
}

static void copy_reason(struct pst_rec *r, const char *reason)
{
    /* a copy, not snprintf: a tenth of its instructions, on every connection */
    size_t n = strnlen(reason, sizeof r->reason - 1);
    memcpy(r->reason, reason, n);
    r->reason[n] = '\0';
}

static void fill(struct pst_rec *r, struct tcp_sock *t, int fd)
{
    memset(r, 0, sizeof *r);
    r->kind = t->stat.kind;
    r->role = t->stat.role;
    r->fd = fd;
    /* known when the connection negotiated (or listens); else 0: `shunt
     * stat` asks /proc which socket the fd is, so that a connection on
     * kernel TCP costs no fstat (docs/benchmarks.md, "Short connections") */
    r->sock = t->inode;
    r->local = t->stat.local;
    r->peer = t->stat.peer;
    r->broken = atomic_load(&t->broken);
    int path = atomic_load(&t->path);
    const char *reason = NULL;
    if (t->stat.kind == PST_KIND_LISTENER) {
        bool registered = t->listener_pid != 0;
        r->path = registered ? PST_PATH_SHM : PST_PATH_TCP;
        if (!registered)
            reason = !shunt_settings.accel       ? fallback_reason_key(FB_DISABLED)
                     : shunt_sandbox_refuses() ? fallback_reason_key(FB_SANDBOX)
                     : uring_seen()            ? fallback_reason_key(FB_URING)   /* not registered, or withdrawn */
                                               : "registry";
    } else {
        r->path = path == PATH_SHM       ? PST_PATH_SHM
                  : path == PATH_OFFERED ? PST_PATH_OFFERED
                  : path == PATH_FABRIC  ? PST_PATH_FABRIC
                                         : PST_PATH_TCP;
        if (path == PATH_FABRIC) {
            memcpy(r->lanes, t->stat.lanes, sizeof r->lanes);
            r->peer_pid = t->stat.peer_pid;
            r->peer_boot = t->stat.peer_boot;
        }
        if (path == PATH_TCP)
            reason = fallback_reason_key((enum fallback_reason)atomic_load(&t->reason));
    }
    if (reason)
        copy_reason(r, reason);
}

static void put(struct tcp_sock *t, int fd)
{
    struct pst_rec r;
    fill(&r, t, fd);
    bool dups = atomic_load(&t->base.fds) > 1;
    if (dups)
        r.sock = tcp_sock_id(t, fd);   /* the key of its other fds' records */
    int e = pst_put(&r);
    if (e == 0 && dups)
        pst_put_all(&r);   /* dup'd fds of the same socket */
    shunt_log_sock(LOG_TRACE, t, fd, "stat: %s %s %s%s%s (%s)", pst_kind_name(r.kind), pst_role_name(r.role),
                   pst_path_name(r.path), r.reason[0] ? " " : "", r.reason, e == 0 ? "recorded" : strerror(-e));
}

void sockstat_publish(struct tcp_sock *t, int fd, unsigned kind, unsigned role, const struct sockaddr *dst,
                      socklen_t dstlen)
{
    if (shunt_in_vfork_child || fd < 0)
        return;
    if (kind) {
        t->stat.kind = (uint8_t)kind;
        t->stat.role = (uint8_t)role;
        memset(&t->stat.local, 0, sizeof t->stat.local);
        memset(&t->stat.peer, 0, sizeof t->stat.peer);
        /* A connection's addresses are left to `shunt stat`, which finds
         * them in the kernel's table by the socket's inode: two system
         * calls less on every connect and accept (docs/benchmarks.md,
         * "Short connections").  A client's destination comes free. */
        if (kind == PST_KIND_LISTENER)
            sock_address(fd, false, &t->stat.local);
        else if (dst)
            reg_addr_from_sockaddr(&t->stat.peer, dst, dstlen);
    }
    if (!t->stat.kind)
        return;   /* nothing known about it yet: a fresh socket */
    t->stat.published = true;
    put(t, fd);
}

void sockstat_publish_kernel(int fd, unsigned role, enum fallback_reason why, const struct sockaddr *dst,
                             socklen_t dstlen)
{
    if (shunt_in_vfork_child || fd < 0)
        return;
    struct pst_rec r;
    memset(&r, 0, sizeof r);
    r.kind = PST_KIND_CONN;
    r.role = (uint8_t)role;
    r.fd = fd;
    r.path = PST_PATH_TCP;   /* sock 0: `shunt stat` asks /proc which socket fd is */
    if (dst)
        reg_addr_from_sockaddr(&r.peer, dst, dstlen);
    copy_reason(&r, fallback_reason_key(why));
    pst_put(&r);
}

void sockstat_inherited(struct tcp_sock *t, int fd)
{
    if (shunt_in_vfork_child)
        return;
    /* After exec the image before this one may have recorded the fd, with
     * what it knew (the role, a fallback's reason): keep that. */
    struct pst_rec old;
    /* a record without an id is this fd's: the table keeps records only of
     * fds that are still sockets, and one exec does not change what an fd is */
    if (pst_open() == 0 && pst_get(fd, &old) == 0 && (!old.sock || old.sock == tcp_sock_id(t, fd)) &&
        old.kind != PST_KIND_NONE) {
        t->stat.kind = old.kind;
        t->stat.role = old.role;
        t->stat.local = old.local;
        t->stat.peer = old.peer;
        if (atomic_load(&t->path) == PATH_TCP && old.path == PST_PATH_TCP)
            return;   /* the record stands, reason and all */
        t->stat.published = true;
        put(t, fd);
        return;
    }
    int listening = 0;
    socklen_t len = sizeof listening;
    shunt_real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);
    if (listening) {
        sockstat_publish(t, fd, PST_KIND_LISTENER, PST_ROLE_UNKNOWN, NULL, 0);
        return;
    }
    unsigned role = PST_ROLE_UNKNOWN;
    if (t->ch.hdr)
        role = t->ch.side == 0 ? PST_ROLE_CLIENT : PST_ROLE_SERVER;
    if (atomic_load(&t->path) == PATH_TCP)
        atomic_store(&t->reason, FB_INHERITED);
    sockstat_publish(t, fd, PST_KIND_CONN, role, NULL, 0);
}

void sockstat_dup(int fd, int newfd)
{
    if (shunt_in_vfork_child)
        return;
    struct pst_rec r;
    if (pst_get(fd, &r) == 0) {
        if (!r.sock) {   /* two fds now: records of one socket share its id */
            struct stat st;
            if (fstat(fd, &st) == 0)
                r.sock = (uint64_t)st.st_ino;
            pst_put(&r);
        }
        r.fd = newfd;
        pst_put(&r);
    } else {
        pst_clear(newfd);
    }
}

void sockstat_after_fork_child(void)
{
    pst_after_fork_child();
}

void sockstat_at_exit(void)
{
    if (!shunt_in_vfork_child)   /* the table is the parent's */
        pst_exit();
}
