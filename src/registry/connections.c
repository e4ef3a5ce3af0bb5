/*
 * connections.c: the registry's connection records: offers posted by
 * clients, claimed by servers, found by either end's inode, and ended.
 */
#include <errno.h>
#include <string.h>

#include "base/log.h"
#include "registry/registry_impl.h"

static int free_conn(struct reg_file *f)
{
    for (uint32_t i = 0; i < REG_CONNS; i++)
        if (reg_entry_state(&f->conns[i].state) == REG_FREE)
            return (int)i;
    return -1;
}

/* The record as the caller may see it: terminated, and with no server
 * until claimed. */
static void copy_out(const struct reg_conn_ent *e, uint32_t state, struct reg_conn *out)
{
    if (!out)
        return;
    *out = e->c;
    out->channel[CHANNEL_NAME_MAX - 1] = 0;
    if (state != REG_CLAIMED) {
        out->server_inode = 0;
        out->server_pid = 0;
    }
}

int reg_conn_post_in(enum reg_scope scope, const struct reg_conn *c)
{
    if (!c || c->client_inode == 0 || c->channel[0] == 0 ||
        memchr(c->channel, 0, CHANNEL_NAME_MAX) == NULL || (scope == REG_HOST) != (c->cookie != 0))
        return -EINVAL;
    int saved = errno;
    struct reg_owner owner = reg_owner_of(c->client_pid);   /* reads /proc: before the lock */
    struct reg_file *f;
    sigset_t old;
    int r = reg_enter_in(scope, &f, &old);
    if (r < 0) {
        errno = saved;
        return r;
    }
    int slot = free_conn(f);
    if (slot < 0) {
        struct reg_live_cache lc;
        reg_live_cache_init(&lc);
        reg_sweep_conns(f, &lc);
        slot = free_conn(f);
    }
    if (slot < 0) {
        r = -ENOSPC;
    } else {
        struct reg_conn_ent *e = &f->conns[slot];
        e->seq = ++f->hdr.conn_seq;
        e->client_owner = owner;
        memset(&e->server_owner, 0, sizeof e->server_owner);
        e->c = *c;
        e->c.server_inode = 0;
        e->c.server_pid = 0;
        if ((uint32_t)slot + 1 > f->hdr.conn_hwm)
            f->hdr.conn_hwm = (uint32_t)slot + 1;
        reg_entry_publish(&e->state, REG_OFFER);
        atomic_fetch_add_explicit(&f->hdr.offers, 1, memory_order_release);
    }
    reg_unlock(f, &old);
    errno = saved;
    return r;
}

int reg_conn_post(const struct reg_conn *c)
{
    return reg_conn_post_in(REG_NS, c);
}

/* The count of offers posted in scope's registry, read without the lock;
 * if_none: the answer when that registry cannot be had. */
static bool offers_maybe(enum reg_scope scope, bool if_none)
{
    struct reg_file *f;
    if (reg_get_in(scope, &f) < 0)
        return if_none;
    return atomic_load_explicit(&f->hdr.offers, memory_order_acquire) != 0;
}

bool reg_conn_offers_maybe(void)
{
    return offers_maybe(REG_NS, true);   /* the lookup will say why */
}

bool reg_host_offers_maybe(void)
{
    return offers_maybe(REG_HOST, false);   /* no host registry: nobody offered across namespaces */
}

/* What an offer is looked up by: both addresses (a namespace's registry),
 * or the client socket's cookie (the host's). */
struct offer_key {
    const struct reg_addr *client, *server;
    uint64_t cookie;
};

static bool offer_matches(const struct reg_conn *c, const struct offer_key *k)
{
    if (k->cookie)
        return c->cookie == k->cookie;
    /* The client may have bound to a wildcard address before it learnt its
     * port: such a record matches any client address with that port. */
    return reg_addr_eq(&c->server, k->server) && c->client.port == k->client->port &&
           (reg_in6_eq(&c->client.addr, &k->client->addr) || reg_in6_unspecified(&c->client.addr));
}

/* The newest offer that matches k (an older one is left over), copied to
 * out; the header's count of offers is recounted on the way. */
static int find_offer(enum reg_scope scope, const struct offer_key *k, struct reg_conn *out)
{
    int saved = errno;
    struct reg_file *f;
    sigset_t old;
    int r = reg_enter_in(scope, &f, &old);
    if (r < 0) {
        errno = saved;
        return r;
    }
    /* An offer whose client died stays posted until a sweep, and with it
     * the count that sends every accept here: swept now when one is due (at
     * most once per reg_entries_sweep_interval_s for all processes), or a
     * long-running server whose clients are long-running too would pay a
     * lookup under the lock at every accept until some new process opened
     * the registry. */
    if (atomic_load_explicit(&f->hdr.offers, memory_order_relaxed) != 0 && reg_entries_sweep_due(f)) {
        struct reg_live_cache lc;
        reg_live_cache_init(&lc);
        reg_sweep_conns(f, &lc);
    }
    struct reg_conn_ent *best = NULL;
    uint32_t hwm = reg_conn_hwm(f);
    uint32_t offers = 0;
    for (uint32_t i = 0; i < hwm; i++) {
        struct reg_conn_ent *e = &f->conns[i];
        if (reg_entry_state(&e->state) != REG_OFFER)
            continue;
        offers++;
        if (e->c.client_inode == 0 || !offer_matches(&e->c, k))
            continue;
        if (!best || e->seq > best->seq)
            best = e;
    }
    atomic_store_explicit(&f->hdr.offers, offers, memory_order_relaxed);   /* whatever drifted */
    if (best)
        copy_out(best, REG_OFFER, out);
    else
        r = -ENOENT;
    reg_unlock(f, &old);
    errno = saved;
    return r;
}

int reg_host_find_cookie(uint64_t cookie, struct reg_conn *out)
{
    if (cookie == 0)
        return -EINVAL;
    struct offer_key k = { NULL, NULL, cookie };
    return find_offer(REG_HOST, &k, out);
}

int reg_conn_find_offer(const struct reg_addr *client, const struct reg_addr *server, struct reg_conn *out)
{
    if (!client || !server)
        return -EINVAL;
    struct offer_key k = { client, server, 0 };
    return find_offer(REG_NS, &k, out);
}

int reg_conn_claimed_in(enum reg_scope scope, uint64_t client_inode, uint64_t server_inode, int32_t server_pid)
{
    if (client_inode == 0 || server_inode == 0)
        return -EINVAL;
    int saved = errno;
    struct reg_owner owner = reg_owner_of(server_pid);   /* reads /proc: before the lock */
    struct reg_file *f;
    sigset_t old;
    int r = reg_enter_in(scope, &f, &old);
    if (r < 0) {
        errno = saved;
        return r;
    }
    struct reg_conn_ent *best = NULL;
    bool claimed_already = false;
    uint32_t hwm = reg_conn_hwm(f);
    for (uint32_t i = 0; i < hwm; i++) {
        struct reg_conn_ent *e = &f->conns[i];
        uint32_t st = reg_entry_state(&e->state);
        if (st == REG_FREE || e->c.client_inode != client_inode)
            continue;
        if (st == REG_CLAIMED) {
            claimed_already = true;
            continue;
        }
        if (!best || e->seq > best->seq)
            best = e;
    }
    if (best) {
        /* The server's fields first, the state last: until then they mean nothing. */
        best->server_owner = owner;
        best->c.server_pid = server_pid;
        best->c.server_inode = server_inode;
        reg_entry_publish(&best->state, REG_CLAIMED);
        reg_offer_gone(f);
    } else {
        r = claimed_already ? -EALREADY : -ENOENT;
    }
    reg_unlock(f, &old);
    errno = saved;
    return r;
}

int reg_conn_claimed(uint64_t client_inode, uint64_t server_inode, int32_t server_pid)
{
    return reg_conn_claimed_in(REG_NS, client_inode, server_inode, server_pid);
}

/* The record in which inode is a present end (the newest if several). */
static struct reg_conn_ent *find_end(struct reg_file *f, uint64_t inode, int *side, uint32_t *state)
{
    struct reg_conn_ent *best = NULL;
    uint32_t hwm = reg_conn_hwm(f);
    for (uint32_t i = 0; i < hwm; i++) {
        struct reg_conn_ent *e = &f->conns[i];
        uint32_t st = reg_entry_state(&e->state);
        if (st == REG_FREE)
            continue;
        int s;
        if (e->c.client_inode == inode)
            s = 0;
        else if (reg_server_present(e, st) && e->c.server_inode == inode)
            s = 1;
        else
            continue;
        if (!best || e->seq > best->seq) {
            best = e;
            *side = s;
            *state = st;
        }
    }
    return best;
}

int reg_conn_find_inode_in(enum reg_scope scope, uint64_t inode, struct reg_conn *out, int *side)
{
    if (inode == 0)
        return -EINVAL;
    int saved = errno;
    struct reg_file *f;
    sigset_t old;
    int r = reg_enter_in(scope, &f, &old);
    if (r < 0) {
        errno = saved;
        return r;
    }
    int s = 0;
    uint32_t st = REG_FREE;
    struct reg_conn_ent *e = find_end(f, inode, &s, &st);
    if (e) {
        copy_out(e, st, out);
        if (side)
            *side = s;
    } else {
        r = -ENOENT;
    }
    reg_unlock(f, &old);
    errno = saved;
    return r;
}

int reg_conn_find_inode(uint64_t inode, struct reg_conn *out, int *side)
{
    return reg_conn_find_inode_in(REG_NS, inode, out, side);
}

static bool conn_end(enum reg_scope scope, uint64_t inode, bool both)
{
    if (inode == 0)
        return false;
    int saved = errno;
    struct reg_file *f;
    sigset_t old;
    if (reg_enter_in(scope, &f, &old) < 0) {
        errno = saved;
        return false;
    }
    bool removed = false;
    int side = 0;
    uint32_t st = REG_FREE;
    struct reg_conn_ent *e = find_end(f, inode, &side, &st);
    if (e) {
        /* One field at a time, the inode first: a record whose inode is 0
         * has lost that end whatever its pid says. */
        if (side == 0) {
            e->c.client_inode = 0;
            e->c.client_pid = 0;
        } else {
            e->c.server_inode = 0;
            e->c.server_pid = 0;
        }
        if (both) {   /* the other end's processes are gone too */
            e->c.client_inode = e->c.server_inode = 0;
            e->c.client_pid = e->c.server_pid = 0;
        }
        /* An offer nobody claimed goes with its client. */
        if (!reg_client_present(e) && !reg_server_present(e, st)) {
            reg_entry_publish(&e->state, REG_FREE);
            if (st == REG_OFFER)
                reg_offer_gone(f);
            removed = true;
        }
    }
    reg_unlock(f, &old);
    errno = saved;
    return removed;
}

bool reg_conn_end_in(enum reg_scope scope, uint64_t inode)
{
    return conn_end(scope, inode, false);
}

bool reg_conn_end_all_in(enum reg_scope scope, uint64_t inode)
{
    return conn_end(scope, inode, true);
}

bool reg_conn_end(uint64_t inode)
{
    return conn_end(REG_NS, inode, false);
}

bool reg_conn_end_all(uint64_t inode)
{
    return conn_end(REG_NS, inode, true);
}
