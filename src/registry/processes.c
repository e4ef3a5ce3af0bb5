/*
 * processes.c: the registry's list of processes that publish an fd table
 * for `shunt stat` (procstat.h): added when a process makes its table,
 * removed at its exit, and swept (with the table's file) when the process
 * died without a word.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "registry/procstat.h"
#include "registry/registry_impl.h"

/* The file of a process's table.  Names are built here only, from numbers:
 * "shunt-<uid>-<netns>-p<PST_VERSION>-<pid>-<tag>.fds".  The tag, 64
 * random bits kept in the process's entry, is what another user cannot
 * tell in advance: with the pid alone, anybody could make the file of a
 * process before it starts (issue 16, finding 3).  The version is in the
 * name because the sweep (sweep.c) reads names: it never takes another
 * format's for its own. */
void reg_table_path(char *out, size_t len, const struct reg_file *f, int32_t pid, uint64_t tag)
{
    snprintf(out, len, "%s/shunt-%u-%llu-p%u-%d-%016llx.fds", reg_directory(), (unsigned)f->hdr.uid,
             (unsigned long long)f->hdr.netns, PST_VERSION, (int)pid, (unsigned long long)tag);
}

/* Digits up to a character that is not one: p after them, or NULL when
 * there were none or too many. */
static const char *digits(const char *p, uint64_t *v)
{
    uint64_t n = 0;
    int k = 0;
    for (; *p >= '0' && *p <= '9'; p++, k++) {
        if (k == 19)
            return NULL;
        n = n * 10 + (uint64_t)(*p - '0');
    }
    *v = n;
    return k ? p : NULL;
}

bool reg_table_name_parse(const char *name, uint32_t *uid, uint64_t *netns, int32_t *pid, uint64_t *tag)
{
    uint64_t u, ns, ver, id;
    const char *p = strncmp(name, "shunt-", 6) == 0 ? digits(name + 6, &u) : NULL;
    if (!p || *p++ != '-' || !(p = digits(p, &ns)) || *p++ != '-' || *p++ != 'p' || !(p = digits(p, &ver)) ||
        ver != PST_VERSION || *p++ != '-' || !(p = digits(p, &id)) || *p++ != '-')
        return false;
    uint64_t t = 0;
    for (int i = 0; i < 16; i++, p++) {
        int x = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : -1;
        if (x < 0)
            return false;
        t = t << 4 | (uint64_t)x;
    }
    if (strcmp(p, ".fds") != 0 || u > UINT32_MAX || id > INT32_MAX)
        return false;
    *uid = (uint32_t)u;
    *netns = ns;
    *pid = (int32_t)id;
    *tag = t;
    return true;
}

/* Removes one entry whose process is gone, with its table's file. */
static void drop_proc(struct reg_file *f, struct reg_proc *p)
{
    char path[4200];
    reg_table_path(path, sizeof path, f, p->pid, p->table_tag);
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

int reg_proc_find_self(int wait_ms, uint64_t *tag)
{
    int saved = errno;
    int32_t pid;
    reg_self_identity(&pid);
    struct reg_file *f;
    sigset_t old;
    int r = reg_get(&f);
    if (r == 0)
        r = reg_lock_within(f, &old, wait_ms > 0 ? wait_ms : reg_lock_timeout_ms);
    if (r < 0) {
        errno = saved;
        return r;
    }
    r = -ENOENT;
    uint32_t hwm = reg_proc_hwm(f);
    for (uint32_t i = 0; i < hwm && r < 0; i++) {
        struct reg_proc *p = &f->procs[i];
        if (reg_entry_state(&p->state) == REG_USED && p->pid == pid) {
            *tag = p->table_tag;
            r = 0;
        }
    }
    reg_unlock(f, &old);
    errno = saved;
    return r;
}

int reg_proc_add(int wait_ms, uint64_t tag)
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
     * pid we got: either way it is taken over.  Its table, if it is not
     * the one we now publish, goes with it (a sweep must not find the
     * entry naming a file that is not there, nor a file no entry names). */
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
        if (f->procs[slot].table_tag != tag) {
            char path[4200];
            reg_table_path(path, sizeof path, f, pid, f->procs[slot].table_tag);
            unlink(path);
        }
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
        p->table_tag = tag;
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
            reg_table_path(path, sizeof path, f, pid, p->table_tag);
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

void reg_proc_each(void (*fn)(int32_t pid, const struct reg_owner *o, uint64_t tag, void *ctx), void *ctx)
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
        uint64_t tag = p->table_tag;
        if (reg_owner_alive(pid, &o, &lc))
            fn(pid, &o, tag, ctx);
    }
}
