/*
 * spawn_plan.c: posix_spawn's file actions, replayed over this process's
 * accelerated sockets to learn which ones the new program will hold.
 *
 * Owns: the side table of file actions (one record per
 * posix_spawn_file_actions_t in use, keyed by its address) and the
 * decision around posix_spawn: downgrade (a program without shunt) or
 * count the new program in as a holder (a program under shunt, which
 * attaches by inode after exec).  An accelerated socket that the program
 * will hold is one whose fd, after the actions in order (close, dup2 --
 * which clears close-on-exec, also onto itself --, open, closefrom; chdir,
 * fchdir and tcsetpgrp leave fds alone), is still open and not
 * close-on-exec.
 *
 * A record is trusted only when it saw every action of its object: libc's
 * count of actions (the public header's __used) must equal the record's.
 * An object shunt never saw initialised (copied with memcpy, say), one
 * whose record was evicted, or one changed behind shunt's back, is
 * unknown: then every accelerated socket of this process, close-on-exec or
 * not, is taken as reaching the new program (correct by default: a
 * needless downgrade costs speed, a missed one corrupts a stream).
 *
 * Programs that never call destroy leave records behind: a new init at
 * the same address replaces its record, and past RECORDS_MAX the least
 * recently used record goes.
 *
 * system and popen spawn /bin/sh inside libc, where no wrapper sees it:
 * the same decision is made for that shell and environ, with popen's
 * stdin or stdout replaced by its pipe (the fds of earlier popen streams,
 * which the child closes, are pipes: never a socket of the table's).
 */
#include <paths.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/real.h"
#include "base/signals.h"
#include "core/conn/downgrade.h"
#include "core/conn/fabric_conn.h"
#include "core/fd/fdtable.h"
#include "core/kinds/epoll.h"
#include "core/kinds/tcp_socket.h"
#include "core/process/downgrade_points.h"
#include "core/process/runs_shunt.h"
#include "core/process/spawn_plan.h"

extern char **environ;

#define RECORDS_MAX 256
#define ACTIONS_MAX 4096

struct action {
    enum spawn_action kind;
    int fd, newfd;
};

struct record {
    const void *key;
    unsigned long used_at;      /* for eviction */
    bool broken;                /* an action was missed: unknown */
    size_t n, cap;
    struct action *a;
};

static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct record *table[RECORDS_MAX];
static size_t table_n;
static unsigned long tick;

/* libc's own count of the actions in fa (spawn.h's public layout). */
static int libc_count(const posix_spawn_file_actions_t *fa)
{
    return fa->__used;
}

static struct record **find(const void *key)
{
    for (size_t i = 0; i < table_n; i++)
        if (table[i]->key == key)
            return &table[i];
    return NULL;
}

static void drop(struct record **slot)
{
    free((*slot)->a);
    free(*slot);
    *slot = table[--table_n];
    table[table_n] = NULL;
}

/* A fresh empty record for key (under the lock); NULL without memory. */
static struct record *start(const void *key)
{
    struct record **old = find(key);
    if (old)
        drop(old);
    if (table_n == RECORDS_MAX) {
        size_t lru = 0;
        for (size_t i = 1; i < table_n; i++)
            if (table[i]->used_at < table[lru]->used_at)
                lru = i;
        drop(&table[lru]);
    }
    struct record *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->key = key;
    r->used_at = ++tick;
    table[table_n++] = r;
    return r;
}

void spawn_actions_init(const posix_spawn_file_actions_t *fa)
{
    crit_lock(&table_lock);
    start(fa);
    crit_unlock(&table_lock);
}

void spawn_actions_destroy(const posix_spawn_file_actions_t *fa)
{
    crit_lock(&table_lock);
    struct record **r = find(fa);
    if (r)
        drop(r);
    crit_unlock(&table_lock);
}

void spawn_actions_added(const posix_spawn_file_actions_t *fa, enum spawn_action kind, int fd, int newfd)
{
    crit_lock(&table_lock);
    struct record **slot = find(fa);
    struct record *r = slot ? *slot : NULL;
    if (!r && libc_count(fa) == 1)
        r = start(fa);   /* zeroed without init, which glibc allows: the first action */
    if (r && !r->broken) {
        if (r->n + 1 != (size_t)libc_count(fa) || r->n == ACTIONS_MAX) {
            r->broken = true;
        } else {
            if (r->n == r->cap) {
                size_t cap = r->cap ? 2 * r->cap : 8;
                struct action *a = realloc(r->a, cap * sizeof *a);
                if (!a) {
                    r->broken = true;
                    goto out;
                }
                r->a = a;
                r->cap = cap;
            }
            r->a[r->n++] = (struct action){ kind, fd, newfd };
            r->used_at = ++tick;
        }
    }
out:
    crit_unlock(&table_lock);
}

void spawn_actions_before_fork(void)
{
    crit_lock(&table_lock);
}

void spawn_actions_after_fork(void)
{
    crit_unlock(&table_lock);
}

/* A copy of fa's actions (*n of them, malloc'd; NULL with *n 0 for none),
 * or false when they are unknown. */
static bool copy_actions(const posix_spawn_file_actions_t *fa, struct action **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    if (!fa || libc_count(fa) == 0)
        return true;
    bool known = false;
    crit_lock(&table_lock);
    struct record **slot = find(fa);
    if (slot && !(*slot)->broken && (*slot)->n == (size_t)libc_count(fa)) {
        struct record *r = *slot;
        r->used_at = ++tick;
        *out = malloc(r->n * sizeof **out);
        if (*out) {
            memcpy(*out, r->a, r->n * sizeof **out);
            *n = r->n;
            known = true;
        }
    }
    crit_unlock(&table_lock);
    return known;
}

/* The replay: one slot per fd number of the new program that holds one of
 * this process's accelerated sockets. */
struct fdslot {
    int fd;
    size_t src;         /* index into the collected sockets */
    bool cloexec;
};

struct collected {
    struct spawn_hold *s;   /* the sockets (with a reference each) */
    size_t n, cap;
    struct fdslot *slots;   /* one per fd of this process */
    size_t nslots, slotcap;
    bool failed;
};

struct spawn_hold {
    struct tcp_sock *t;
    int fd;             /* an fd of this process for it */
    bool counted;       /* the new program was counted in */
    bool reaches;       /* the new program will hold it */
};

static bool grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? 2 * *cap : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * size);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

static void collect(int fd, void *ctx)
{
    struct collected *c = ctx;
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->kind == SOCK_TCP) {
        struct tcp_sock *t = tcp_of(f.sock);
        int fl = shunt_real.fcntl(fd, F_GETFD);
        if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr && fl >= 0) {
            size_t i = 0;
            while (i < c->n && c->s[i].t != t)
                i++;
            if (i == c->n) {
                if (!grow((void **)&c->s, &c->cap, c->n + 1, sizeof *c->s)) {
                    c->failed = true;
                    goto out;
                }
                sock_get(f.sock);
                c->s[c->n++] = (struct spawn_hold){ t, fd, false, false };
            }
            if (!grow((void **)&c->slots, &c->slotcap, c->nslots + 1, sizeof *c->slots)) {
                c->failed = true;
                goto out;
            }
            c->slots[c->nslots++] = (struct fdslot){ fd, i, (fl & FD_CLOEXEC) != 0 };
        }
    }
out:
    fdt_put(&f);
}

static struct fdslot *slot_of(struct collected *c, int fd)
{
    for (size_t i = 0; i < c->nslots; i++)
        if (c->slots[i].fd == fd)
            return &c->slots[i];
    return NULL;
}

static void slot_remove(struct collected *c, struct fdslot *s)
{
    *s = c->slots[--c->nslots];
}

/* Replays the actions; false if memory ran out (the caller then takes every
 * socket as reaching the program). */
static bool replay(struct collected *c, const struct action *a, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct fdslot *s;
        switch (a[i].kind) {
        case SPAWN_CLOSE:
        case SPAWN_OPEN:    /* closes fd, then opens a file there (never a socket) */
            if ((s = slot_of(c, a[i].fd)))
                slot_remove(c, s);
            break;
        case SPAWN_DUP2:
            s = slot_of(c, a[i].fd);
            if (a[i].fd == a[i].newfd) {
                if (s)
                    s->cloexec = false;   /* glibc clears FD_CLOEXEC, as POSIX 2024 says */
                break;
            }
            size_t src = s ? s->src : 0;
            bool from = s != NULL;
            struct fdslot *old = slot_of(c, a[i].newfd);
            if (old)
                slot_remove(c, old);
            if (from) {
                if (!grow((void **)&c->slots, &c->slotcap, c->nslots + 1, sizeof *c->slots))
                    return false;
                c->slots[c->nslots++] = (struct fdslot){ a[i].newfd, src, false };
            }
            break;
        case SPAWN_CLOSEFROM:
            for (size_t k = 0; k < c->nslots;)
                if (c->slots[k].fd >= a[i].fd)
                    slot_remove(c, &c->slots[k]);
                else
                    k++;
            break;
        case SPAWN_OTHER:
            break;
        }
    }
    return true;
}

/* The decision for a new program that runs shunt or not (runs), given the
 * actions a (n of them) before its exec, or none known (known false). */
static void prepare(struct spawn_plan *p, bool runs, const struct action *a, size_t n, bool known)
{
    p->n = 0;
    p->held = NULL;
    fabric_conn_leave_all("a new program", true);   /* its image cannot use this engine */
    if (!runs) {
        downgrade_queued_before_exec();  /* messages waiting on the Unix sockets it gets */
        downgrade_take_up_inherited();   /* inherited accelerated sockets this image never used */
    }
    else
        for (size_t i = 0; i < n; i++)
            if (a[i].kind == SPAWN_DUP2) {   /* a source this image never used */
                struct fdref f = fdt_get(a[i].fd);
                fdt_put(&f);
            }

    struct collected c = { 0 };
    fdt_for_each_object(0, ~0U, collect, &c);
    bool exact = known && !c.failed && replay(&c, a, n);
    if (!exact && (n || !known) && c.n)
        shunt_log(LOG_INFO, "posix_spawn: file actions %s: every accelerated socket is taken as reaching the new program",
                  known ? "not followed (no memory)" : "unknown to shunt");
    for (size_t i = 0; i < c.nslots; i++)
        if (!c.slots[i].cloexec)
            c.s[c.slots[i].src].reaches = true;
    for (size_t i = 0; i < c.n; i++) {
        struct spawn_hold *h = &c.s[i];
        if (!exact)
            h->reaches = true;
        if (!h->reaches)
            continue;
        if (!runs) {
            downgrade_leave(h->t, h->fd);
        } else if (atomic_load(&h->t->path) != PATH_TCP) {
            tcp_sock_hold_more(h->t, 1u);
            epoll_socket_shared(h->t, h->fd);   /* the new program may shut it down */
            h->counted = true;
        }
    }
    free(c.slots);
    p->n = c.n;
    p->held = c.s;
}

void spawn_prepare(struct spawn_plan *p, const char *path, const posix_spawn_file_actions_t *fa,
                   char *const envp[], bool search)
{
    /* a spawn that will fail keeps its holds until spawn_finish gives them back */
    bool runs = runs_shunt_exec_fails(path, -1, search) || runs_shunt_exec(path, -1, envp, search);
    struct action *a;
    size_t n;
    bool known = copy_actions(fa, &a, &n);
    prepare(p, runs, a, n, known);
    free(a);
}

void spawn_prepare_shell(struct spawn_plan *p, int replaced_fd)
{
    /* the fd is replaced by a pipe: for the sockets, as an open of a file there */
    struct action a = { SPAWN_OPEN, replaced_fd, -1 };
    prepare(p, runs_shunt_exec(_PATH_BSHELL, -1, environ, false), &a, replaced_fd >= 0, true);
}

void spawn_finish(struct spawn_plan *p, bool spawned)
{
    for (size_t i = 0; i < p->n; i++) {
        struct spawn_hold *h = &p->held[i];
        if (h->counted && !spawned)
            atomic_fetch_sub(&h->t->ch.self->holders, 1u);
        sock_put(&h->t->base);
    }
    free(p->held);
    p->held = NULL;
    p->n = 0;
}
