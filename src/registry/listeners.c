/*
 * listeners.c: the registry's table of accelerated listeners: add, remove
 * (each process its own entries), and whether one would take a connection.
 */
#include <errno.h>
#include <string.h>

#include "base/log.h"
#include "registry/registry_impl.h"

/* Lowers the table's high-water mark past free entries at its end (lock
 * held): what a look without the lock goes through (listed_unlocked) stays
 * as long as the listeners are, not as long as the most there ever were. */
static void shrink_hwm(struct reg_file *f)
{
    uint32_t hwm = reg_listener_hwm(f);
    while (hwm > 0 && reg_entry_state(&f->listeners[hwm - 1].state) == REG_FREE)
        hwm--;
    f->hdr.listener_hwm = hwm;
}

/* Frees this process's entries for inode (lock held). */
static void drop_own(struct reg_file *f, uint64_t inode, int32_t pid)
{
    uint32_t hwm = reg_listener_hwm(f);
    for (uint32_t i = 0; i < hwm; i++) {
        struct reg_listener *l = &f->listeners[i];
        if (reg_entry_state(&l->state) == REG_USED && l->inode == inode && l->pid == pid)
            reg_entry_publish(&l->state, REG_FREE);
    }
    shrink_hwm(f);
}

static int free_listener(struct reg_file *f, uint32_t skip)
{
    for (uint32_t i = 0; i < REG_LISTENERS; i++)
        if (i != skip && reg_entry_state(&f->listeners[i].state) == REG_FREE)
            return (int)i;
    return -1;
}

int reg_listener_add(uint64_t inode, const struct reg_addr *bound, bool v6only)
{
    if (inode == 0 || !bound)
        return -EINVAL;
    int saved = errno;
    int32_t pid;
    struct reg_owner owner = *reg_self_identity(&pid);   /* reads /proc: before the lock */
    struct reg_file *f;
    sigset_t old;
    int r = reg_enter(&f, &old);
    if (r < 0) {
        errno = saved;
        return r;
    }
    /* listen() again on the same socket: replace our entry, after the new
     * one is in (a crash in between leaves a harmless duplicate). */
    uint32_t prev = UINT32_MAX;
    uint32_t hwm = reg_listener_hwm(f);
    for (uint32_t i = 0; i < hwm; i++) {
        struct reg_listener *l = &f->listeners[i];
        if (reg_entry_state(&l->state) == REG_USED && l->inode == inode && l->pid == pid) {
            prev = i;
            break;
        }
    }
    int slot = free_listener(f, prev);
    if (slot < 0) {
        struct reg_live_cache lc;
        reg_live_cache_init(&lc);
        reg_sweep_listeners(f, &lc);
        if (prev != UINT32_MAX && reg_entry_state(&f->listeners[prev].state) != REG_USED)
            prev = UINT32_MAX;
        slot = free_listener(f, prev);
    }
    if (slot < 0 && prev != UINT32_MAX) {
        /* Full: rewrite ours in place, through free. */
        reg_entry_publish(&f->listeners[prev].state, REG_FREE);
        slot = (int)prev;
        prev = UINT32_MAX;
    }
    if (slot < 0) {
        r = -ENOSPC;
    } else {
        struct reg_listener *l = &f->listeners[slot];
        l->v6only = v6only;
        l->inode = inode;
        l->pid = pid;
        l->owner = owner;
        l->addr = *bound;
        if ((uint32_t)slot + 1 > f->hdr.listener_hwm)
            f->hdr.listener_hwm = (uint32_t)slot + 1;
        reg_entry_publish(&l->state, REG_USED);
        if (prev != UINT32_MAX)
            reg_entry_publish(&f->listeners[prev].state, REG_FREE);
    }
    reg_unlock(f, &old);
    errno = saved;
    return r;
}

/* This process's own entries for inode go from scope's registry: a child
 * closing the listening socket it inherited must not unregister the parent
 * that still listens. */
static void remove_own(enum reg_scope scope, uint64_t inode)
{
    if (inode == 0)
        return;
    int saved = errno;
    int32_t pid;
    reg_self_identity(&pid);
    struct reg_file *f;
    sigset_t old;
    if (reg_enter_in(scope, &f, &old) == 0) {
        drop_own(f, inode, pid);
        reg_unlock(f, &old);
    }
    errno = saved;
}

void reg_listener_remove(uint64_t inode)
{
    remove_own(REG_NS, inode);
}

/* Whether some entry would take dst (exact: names it, as the host's
 * registry lists addresses; else the kernel's rules), read without the
 * lock: a hint.  Another process may write anything here; each entry's
 * address is copied once and a torn or scribbled one costs a look under
 * the lock, or this connection's acceleration, never more. */
static bool listed_unlocked(struct reg_file *f, const struct reg_addr *dst, bool exact, uint64_t *inode)
{
    uint32_t hwm = reg_listener_hwm(f);
    for (uint32_t i = 0; i < hwm; i++) {
        struct reg_listener *l = &f->listeners[i];
        if (reg_entry_state(&l->state) != REG_USED)
            continue;
        struct reg_listener copy;
        memcpy(&copy.addr, (const void *)&l->addr, sizeof copy.addr);
        copy.v6only = *(volatile uint32_t *)&l->v6only;
        if (exact ? reg_addr_eq(&copy.addr, dst) : reg_listener_covers(&copy, dst)) {
            if (inode)
                *inode = *(volatile uint64_t *)&l->inode;
            return true;
        }
    }
    return false;
}

uint64_t reg_listener_hint(const struct reg_addr *dst)
{
    uint64_t inode = 0;
    struct reg_file *f = reg_mapped();
    if (f && dst)
        listed_unlocked(f, dst, false, &inode);
    return inode;
}

/* Is there a live listener in f that takes dst (exact: listed addresses,
 * as the host's registry keeps them; else the kernel's rules)?  Dead ones
 * met on the way go.  1, 0, or a negative errno (the lock). */
static int match_live(struct reg_file *f, const struct reg_addr *dst, bool exact)
{
    sigset_t old;
    int r = reg_lock(f, &old);
    if (r < 0)
        return r;   /* the registry cannot be used now (its lock timed out, or is garbage) */
    bool found = false;
    struct reg_live_cache lc;
    reg_live_cache_init(&lc);
    uint32_t hwm = reg_listener_hwm(f);
    for (uint32_t i = 0; i < hwm && !found; i++) {
        struct reg_listener *l = &f->listeners[i];
        if (reg_entry_state(&l->state) != REG_USED ||
            !(exact ? reg_addr_eq(&l->addr, dst) : reg_listener_covers(l, dst)))
            continue;
        if (reg_owner_alive(l->pid, &l->owner, &lc)) {
            found = true;
        } else {
            reg_entry_publish(&l->state, REG_FREE);
            f->hdr.reclaimed_listeners++;
            shunt_log(LOG_DEBUG, "registry: listener of dead pid %d removed", (int)l->pid);
        }
    }
    reg_unlock(f, &old);
    return found ? 1 : 0;
}

int reg_listener_match(const struct reg_addr *dst)
{
    if (!dst)
        return 0;
    int saved = errno;
    struct reg_file *f;
    /* the lock, which blocks signals, asks for the pid and takes a word
     * other processes share, only for a candidate: a client of a server
     * without shunt pays a look through the table */
    int r = reg_get(&f);
    if (r == 0)
        r = listed_unlocked(f, dst, false, NULL) ? match_live(f, dst, false) : 0;
    errno = saved;
    return r;
}

/* ---- the host's registry: listeners reachable from other namespaces ----- */

int reg_host_listener_add(uint64_t inode, const struct reg_addr *addrs, unsigned n)
{
    if (inode == 0 || !addrs || n == 0 || n > REG_HOST_ADDRS)
        return -EINVAL;
    int saved = errno;
    int32_t pid;
    struct reg_owner owner = *reg_self_identity(&pid);   /* reads /proc: before the lock */
    int r = reg_open_host(true);
    struct reg_file *f;
    sigset_t old;
    if (r == 0)
        r = reg_enter_in(REG_HOST, &f, &old);
    if (r < 0) {
        errno = saved;
        return r;
    }
    /* listen() again: the old list goes first (a crash in between loses
     * the entries, which costs acceleration, never a byte) */
    drop_own(f, inode, pid);
    int slots[REG_HOST_ADDRS];
    unsigned got = 0;
    for (uint32_t i = 0; i < REG_LISTENERS && got < n; i++)
        if (reg_entry_state(&f->listeners[i].state) == REG_FREE)
            slots[got++] = (int)i;
    if (got < n) {
        struct reg_live_cache lc;
        reg_live_cache_init(&lc);
        reg_sweep_listeners(f, &lc);
        got = 0;
        for (uint32_t i = 0; i < REG_LISTENERS && got < n; i++)
            if (reg_entry_state(&f->listeners[i].state) == REG_FREE)
                slots[got++] = (int)i;
    }
    if (got < n) {
        r = -ENOSPC;
    } else {
        for (unsigned k = 0; k < n; k++) {
            struct reg_listener *l = &f->listeners[slots[k]];
            l->v6only = 1;   /* an address listed is matched exactly */
            l->inode = inode;
            l->pid = pid;
            l->owner = owner;
            l->addr = addrs[k];
            if ((uint32_t)slots[k] + 1 > f->hdr.listener_hwm)
                f->hdr.listener_hwm = (uint32_t)slots[k] + 1;
            reg_entry_publish(&l->state, REG_USED);
        }
    }
    reg_unlock(f, &old);
    errno = saved;
    return r;
}

void reg_host_listener_remove(uint64_t inode)
{
    remove_own(REG_HOST, inode);
}

int reg_host_listener_match(const struct reg_addr *dst)
{
    if (!dst)
        return 0;
    int saved = errno;
    struct reg_file *f;
    int r = 0;
    /* no host registry: no listener of ours in any namespace; and the
     * look without the lock, which a client connecting to another host (or
     * to a namespace whose server does not run shunt) pays: the lock, which
     * blocks signals and asks for the pid and thread, only for a candidate */
    if (reg_get_in(REG_HOST, &f) == 0 && listed_unlocked(f, dst, true, NULL))
        r = match_live(f, dst, true);
    errno = saved;
    return r;
}
