/*
 * listeners.c: the registry's table of accelerated listeners: add, remove
 * (each process its own entries), and whether one would take a connection.
 */
#include <errno.h>
#include <string.h>

#include "base/log.h"
#include "registry/registry_impl.h"

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

void reg_listener_remove(uint64_t inode)
{
    if (inode == 0)
        return;
    int saved = errno;
    int32_t pid;
    reg_self_identity(&pid);
    struct reg_file *f;
    sigset_t old;
    if (reg_enter(&f, &old) < 0) {
        errno = saved;
        return;
    }
    /* Only this process's own entries: a child closing the listening socket
     * it inherited must not unregister the parent that still listens. */
    uint32_t hwm = reg_listener_hwm(f);
    for (uint32_t i = 0; i < hwm; i++) {
        struct reg_listener *l = &f->listeners[i];
        if (reg_entry_state(&l->state) == REG_USED && l->inode == inode && l->pid == pid)
            reg_entry_publish(&l->state, REG_FREE);
    }
    reg_unlock(f, &old);
    errno = saved;
}

int reg_listener_match(const struct reg_addr *dst)
{
    if (!dst)
        return 0;
    int saved = errno;
    struct reg_file *f;
    sigset_t old;
    int r = reg_enter(&f, &old);
    if (r < 0) {
        errno = saved;
        return r;   /* the registry cannot be used now (its lock timed out, or is garbage) */
    }
    bool found = false;
    struct reg_live_cache lc;
    reg_live_cache_init(&lc);
    uint32_t hwm = reg_listener_hwm(f);
    for (uint32_t i = 0; i < hwm && !found; i++) {
        struct reg_listener *l = &f->listeners[i];
        if (reg_entry_state(&l->state) != REG_USED || !reg_listener_covers(l, dst))
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
    errno = saved;
    return found ? 1 : 0;
}

