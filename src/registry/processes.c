/*
 * processes.c: the registry's list of processes that publish an fd table
 * for `shunt stat` (procstat.h): added when a process makes its table,
 * removed at its exit, and swept (with the table's file) when the process
 * died without a word.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "registry/procstat.h"
#include "registry/registry_impl.h"

/* The file of a process's table.  Names are built here only, from numbers. */
static void table_path(char *out, size_t len, const struct reg_file *f, int32_t pid)
{
    snprintf(out, len, "%s/shunt-%u-%llu-%d.fds", reg_directory(), (unsigned)f->hdr.uid,
             (unsigned long long)f->hdr.netns, (int)pid);
}

/* Removes one entry whose process is gone, with its table's file. */
static void drop_proc(struct reg_file *f, struct reg_proc *p)
{
    char path[4200];
    table_path(path, sizeof path, f, p->pid);
    unlink(path);
    reg_entry_publish(&p->state, REG_FREE);
    shunt_log(LOG_DEBUG, "registry: removed the fd table of dead pid %d", (int)p->pid);
}

/* Each table added first looks at the next few entries, round the list
 * (lock held).  A process killed without a word leaves its table until a
 * sweep, and a forking server whose children are killed would otherwise
 * gather them until some process opens the registry anew: this way, with
 * PROC_SWEEP_STEP entries looked at per table added, a dead one is found
 * within (entries / PROC_SWEEP_STEP) additions, so the dead tables stay
 * at most about a third as many as the live ones, at the cost of a few kill(2) and
 * /proc reads per process start. */
#define PROC_SWEEP_STEP 4

static void sweep_some_procs(struct reg_file *f)
{
    uint32_t hwm = reg_proc_hwm(f);
    if (hwm == 0)
        return;
    uint32_t i = f->hdr.proc_sweep_next % hwm;
    struct reg_live_cache lc;
    reg_live_cache_init(&lc);
    for (uint32_t n = 0; n < PROC_SWEEP_STEP && n < hwm; n++, i = (i + 1) % hwm) {
        struct reg_proc *p = &f->procs[i];
        if (reg_entry_state(&p->state) != REG_FREE && !reg_owner_alive(p->pid, &p->owner, &lc)) {
            drop_proc(f, p);
            f->hdr.reclaimed_procs++;
        }
    }
    f->hdr.proc_sweep_next = i;
}

int reg_proc_add(int wait_ms)
{
    int saved = errno;
    int32_t pid;
    struct reg_owner owner = *reg_self_identity(&pid);   /* reads /proc: before the lock */
    struct reg_file *f;
    sigset_t old;
    int r = reg_get(&f);
    if (r == 0)
        r = reg_lock_within(f, &old, wait_ms > 0 ? wait_ms : reg_lock_timeout_ms);
    if (r < 0) {
        errno = saved;
        return r;
    }
    sweep_some_procs(f);   /* before the search: a dead process's entry with our pid may go */
    /* An entry with our pid is ours after exec, or a dead process's whose
     * pid we got: either way it is taken over (a sweep must not remove the
     * file we are about to make under the same name). */
    int slot = -1, free_slot = -1;
    uint32_t hwm = reg_proc_hwm(f);
    for (uint32_t i = 0; i < REG_PROCS && slot < 0; i++) {
        uint32_t st = reg_entry_state(&f->procs[i].state);
        if (i < hwm && st == REG_USED && f->procs[i].pid == pid)
            slot = (int)i;
        else if (st == REG_FREE && free_slot < 0)
            free_slot = (int)i;
        if (i >= hwm && free_slot >= 0)
            break;
    }
    if (slot < 0 && free_slot < 0) {
        struct reg_live_cache lc;
        reg_live_cache_init(&lc);
        reg_sweep_procs(f, &lc);
        for (uint32_t i = 0; i < REG_PROCS && free_slot < 0; i++)
            if (reg_entry_state(&f->procs[i].state) == REG_FREE)
                free_slot = (int)i;
    }
    if (slot >= 0) {
        reg_entry_publish(&f->procs[slot].state, REG_FREE);   /* rewritten through free */
    } else {
        slot = free_slot;
    }
    if (slot < 0) {
        r = -ENOSPC;
    } else {
        struct reg_proc *p = &f->procs[slot];
        p->pid = pid;
        p->owner = owner;
        if ((uint32_t)slot + 1 > f->hdr.proc_hwm)
            f->hdr.proc_hwm = (uint32_t)slot + 1;
        reg_entry_publish(&p->state, REG_USED);
    }
    reg_unlock(f, &old);
    errno = saved;
    return r;
}

void reg_proc_remove(void)
{
    int saved = errno;
    int32_t pid;
    reg_self_identity(&pid);
    struct reg_file *f;
    sigset_t old;
    if (reg_enter(&f, &old) < 0) {
        errno = saved;
        return;
    }
    uint32_t hwm = reg_proc_hwm(f);
    for (uint32_t i = 0; i < hwm; i++) {
        struct reg_proc *p = &f->procs[i];
        if (reg_entry_state(&p->state) == REG_USED && p->pid == pid) {
            char path[4200];
            table_path(path, sizeof path, f, pid);
            unlink(path);
            reg_entry_publish(&p->state, REG_FREE);
        }
    }
    reg_unlock(f, &old);
    errno = saved;
}

unsigned reg_sweep_procs(struct reg_file *f, struct reg_live_cache *lc)
{
    unsigned freed = 0;
    uint32_t top = 0;
    uint32_t hwm = reg_proc_hwm(f);
    for (uint32_t i = 0; i < hwm; i++) {
        struct reg_proc *p = &f->procs[i];
        if (reg_entry_state(&p->state) == REG_FREE)
            continue;
        if (!reg_owner_alive(p->pid, &p->owner, lc)) {
            drop_proc(f, p);
            freed++;
            continue;
        }
        top = i + 1;
    }
    f->hdr.proc_hwm = top;
    f->hdr.reclaimed_procs += freed;
    return freed;
}

void reg_proc_each(void (*fn)(int32_t pid, const struct reg_owner *o, void *ctx), void *ctx)
{
    struct reg_file *f;
    if (reg_get(&f) < 0)
        return;
    struct reg_live_cache lc;
    reg_live_cache_init(&lc);
    uint32_t hwm = reg_proc_hwm(f);
    for (uint32_t i = 0; i < hwm; i++) {
        struct reg_proc *p = &f->procs[i];
        if (reg_entry_state(&p->state) != REG_USED)
            continue;
        int32_t pid = p->pid;
        struct reg_owner o = p->owner;
        if (reg_owner_alive(pid, &o, &lc))
            fn(pid, &o, ctx);
    }
}
