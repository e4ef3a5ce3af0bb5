/*
 * stat_collect.c: builds one `shunt stat` snapshot.  Reads, never writes
 * (apart from the sweep every opening of the registry does): the fd tables
 * with pread, the channel headers with pread, the registry's records, and
 * the kernel's sock_diag (kernel_tcp.c) and /proc/<pid>/fd.  Everything read from
 * another process is checked before use; a record that does not hold up is
 * skipped, never trusted.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "registry/registry_file.h"
#include "tool/kernel_tcp.h"
#include "tool/stat.h"

/* ---- the fd tables ------------------------------------------------------- */

struct gather {
    struct stat_snapshot *s;
    int32_t only_pid;
    int err;
};

/* Does pid's fd still hold this socket?  (A record may lag: an fd closed by
 * exec, or a process that never came back to update it.) */
/* The inode of the socket pid holds at fd, or 0 (not a socket, gone, or
 * not ours to look at). */
static uint64_t fd_socket(int32_t pid, int32_t fd)
{
    char path[64], link[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)fd);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n < 0)
        return 0;
    link[n] = 0;
    unsigned long long ino;
    char end;
    return sscanf(link, "socket:[%llu%c", &ino, &end) == 2 && end == ']' ? (uint64_t)ino : 0;
}

static struct stat_sock *sock_for(struct stat_snapshot *s, uint64_t id)
{
    for (size_t i = 0; i < s->nsocks; i++)
        if (s->socks[i].rec.sock == id)
            return &s->socks[i];
    return NULL;
}

/* How much a record says: a process that negotiated knows more than one
 * that inherited the fd. */
static int informative(const struct pst_rec *r)
{
    int score = r->role != PST_ROLE_UNKNOWN;
    if (r->path != PST_PATH_TCP || (strcmp(r->reason, "inherited") && strcmp(r->reason, "not_negotiated")))
        score += 2;
    return score;
}

static void add_record(int32_t pid, const struct reg_owner *o, uint64_t tag, void *ctx)
{
    struct gather *g = ctx;
    struct stat_snapshot *s = g->s;
    struct pst_rec *recs;
    size_t n;
    if (g->err || pst_read(pid, o, tag, &recs, &n) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        struct pst_rec *r = &recs[i];
        /* A connection on kernel TCP is recorded without its id (the
         * library spares itself an fstat): the fd says which socket it is.
         * A record with an id is stale once the fd holds another. */
        uint64_t held = fd_socket(pid, r->fd);
        if (!held || (r->sock && r->sock != held)) {
            s->stale++;
            continue;
        }
        r->sock = held;
        struct stat_sock *k = sock_for(s, r->sock);
        if (!k) {
            struct stat_sock *v = realloc(s->socks, (s->nsocks + 1) * sizeof *v);
            if (!v) {
                g->err = -ENOMEM;
                break;
            }
            s->socks = v;
            k = &s->socks[s->nsocks++];
            memset(k, 0, sizeof *k);
            k->rec = *r;
        } else if (informative(r) > informative(&k->rec)) {
            k->rec = *r;
        }
        struct stat_holder *h = realloc(k->holders, (k->nholders + 1) * sizeof *h);
        if (!h) {
            g->err = -ENOMEM;
            break;
        }
        k->holders = h;
        k->holders[k->nholders++] = (struct stat_holder){ pid, r->fd };
    }
    free(recs);
}

/* ---- the registry: listeners, and the channel of each connection --------- */

static void from_registry(struct stat_snapshot *s, struct reg_file *f, bool host)
{
    for (uint32_t i = 0; i < REG_LISTENERS; i++) {
        struct reg_listener *l = &f->listeners[i];
        if (atomic_load_explicit(&l->state, memory_order_acquire) != REG_USED)
            continue;
        struct stat_sock *k = sock_for(s, l->inode);
        if (k && kill(l->pid, 0) == 0)
            k->registered = true;
    }
    for (uint32_t i = 0; i < REG_CONNS; i++) {
        struct reg_conn_ent *e = &f->conns[i];
        if (atomic_load_explicit(&e->state, memory_order_acquire) == REG_FREE)
            continue;
        struct reg_conn c = e->c;   /* a copy: the fields may change under us */
        c.channel[CHANNEL_NAME_MAX - 1] = 0;
        for (char *p = c.channel; *p; p++)   /* printed as is, in JSON too */
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
                  *p == '_'))
                *p = '?';
        for (int side = 0; side < 2; side++) {
            uint64_t me = side ? c.server_inode : c.client_inode;
            struct stat_sock *k = me ? sock_for(s, me) : NULL;
            if (!k || k->rec.path == PST_PATH_TCP)
                continue;
            memcpy(k->channel, c.channel, sizeof k->channel);
            k->peer_sock = side ? c.client_inode : c.server_inode;
            k->via_host = host;
            k->rec.role = side ? PST_ROLE_SERVER : PST_ROLE_CLIENT;
        }
    }
}

static uint64_t ld(_Atomic uint64_t *v)
{
    return atomic_load_explicit(v, memory_order_relaxed);
}

static void channel_counters(struct stat_sock *k)
{
    struct chan_hdr h;
    if (!k->channel[0] || channel_peek(k->channel, &h) < 0)
        return;
    int side = k->rec.role == PST_ROLE_SERVER;
    struct chan_side *me = &h.side[side];
    k->have_channel = true;
    k->c.bytes_out = ld(&me->bytes_out);
    k->c.sends = ld(&me->sends);
    k->c.bytes_in = ld(&me->bytes_in);
    k->c.recvs = ld(&me->recvs);
    k->c.doorbells = ld(&me->doorbells);
    k->c.spins_won = ld(&me->spins_won);
    k->c.spins_lost = ld(&me->spins_lost);
    k->c.sleeps = ld(&me->sleeps);
    /* side s writes ring s; the differences are what the other has not read */
    uint64_t out = ld(&h.ring[side].head) - ld(&h.ring[side].tail);
    uint64_t in = ld(&h.ring[1 - side].head) - ld(&h.ring[1 - side].tail);
    k->c.unread_by_peer = out <= h.ring_size ? out : 0;
    k->c.unread_by_us = in <= h.ring_size ? in : 0;
    k->side_state = atomic_load(&me->state);
    k->peer_state = atomic_load(&h.side[1 - side].state);
}

static int by_id(const void *a, const void *b)
{
    const struct stat_sock *x = a, *y = b;
    if (x->rec.kind != y->rec.kind)
        return x->rec.kind == PST_KIND_LISTENER ? -1 : 1;
    return x->rec.sock < y->rec.sock ? -1 : x->rec.sock > y->rec.sock;
}

static int by_holder(const void *a, const void *b)
{
    const struct stat_holder *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->fd < y->fd ? -1 : x->fd > y->fd;
}

int stat_collect(struct stat_snapshot *s, int32_t only_pid)
{
    memset(s, 0, sizeof *s);
    /* what dead processes left goes before it is shown, however recently
     * another process swept */
    reg_entries_sweep_interval_s = 0;
    int r = reg_open();
    struct reg_file *f = reg_mapped();
    if (r < 0 || !f)
        return r < 0 ? r : -ENOENT;
    struct gather g = { s, only_pid, 0 };
    reg_proc_each(add_record, &g);
    if (g.err) {
        stat_free(s);
        return g.err;
    }
    /* -p: the sockets that process holds, with all their holders */
    if (only_pid > 0) {
        size_t keep = 0;
        for (size_t i = 0; i < s->nsocks; i++) {
            bool held = false;
            for (size_t j = 0; j < s->socks[i].nholders; j++)
                held |= s->socks[i].holders[j].pid == only_pid;
            if (held)
                s->socks[keep++] = s->socks[i];
            else
                free(s->socks[i].holders);
        }
        s->nsocks = keep;
    }
    from_registry(s, f, false);
    /* a connection between namespaces is recorded in the host's registry
     * (one file per user for every namespace): its channel, peer, counters */
    struct reg_file *hf;
    if (reg_open_host(false) == 0 && (hf = reg_host_mapped()) != NULL)
        from_registry(s, hf, true);
    struct ktcp_view kv = { 0 };
    ktcp_dump(&kv);   /* without it: states "?", no kernel counters */
    for (size_t i = 0; i < s->nsocks; i++) {
        struct stat_sock *k = &s->socks[i];
        const struct ktcp *t = ktcp_find(&kv, k->rec.sock);
        k->kstate = t ? ktcp_state_name(t->state) : "?";
        /* the library leaves a connection's addresses to us (sockstat.c) */
        if (t && !k->rec.local.port)
            k->rec.local = t->local;
        if (t && !k->rec.peer.port)
            k->rec.peer = t->peer;
        if (k->rec.kind == PST_KIND_LISTENER) {
            k->rec.path = k->registered ? PST_PATH_SHM : PST_PATH_TCP;
            if (k->registered)
                k->rec.reason[0] = 0;
            else if (!k->rec.reason[0])
                snprintf(k->rec.reason, sizeof k->rec.reason, "not_registered");
        } else if (k->rec.path == PST_PATH_FABRIC) {
            /* the engine's stream: no channel in a registry, no counters yet */
        } else if (k->rec.path != PST_PATH_TCP) {
            channel_counters(k);
        } else if (t) {
            /* kernel TCP: the kernel's own counts (segments, not calls) */
            k->have_kernel = true;
            k->c.unread_by_peer = t->wqueue;
            k->c.unread_by_us = t->rqueue;
            if (t->have_info) {
                k->have_kernel_info = true;
                k->c.bytes_out = t->bytes_acked;
                k->c.bytes_in = t->bytes_received;
                k->c.sends = t->segs_out;
                k->c.recvs = t->segs_in;
            }
        }
        qsort(k->holders, k->nholders, sizeof *k->holders, by_holder);
    }
    ktcp_free(&kv);
    qsort(s->socks, s->nsocks, sizeof *s->socks, by_id);
    return 0;
}

void stat_free(struct stat_snapshot *s)
{
    for (size_t i = 0; i < s->nsocks; i++)
        free(s->socks[i].holders);
    free(s->socks);
    memset(s, 0, sizeof *s);
}
