/*
 * api.c: the small query API libshunt.so exports beside the intercepted
 * calls, for tests and tools that want to know what shunt did with an fd.
 */
#include "core/conn/fallback.h"
#include "core/fd/fdtable.h"
#include "interpose/init.h"
#include "core/kinds/tcp_socket.h"
#include "core/wait/kernel_looks.h"
#include "core/wait/turns.h"
#include "registry/procstat.h"
#include "shunt.h"
#include <sched.h>
#include <stdio.h>
#include <string.h>

/* 1 if fd is a connection on an accelerated path, 0 if not (kernel TCP, or
 * not a socket shunt manages). */
__attribute__((visibility("default"))) int shunt_fd_accelerated(int fd)
{
    shunt_ensure_init();
    if (fdt_kernel_only(fd))
        return 0;   /* one load: a measuring program asks this on every connection */
    struct fdref f = fdt_get(fd);
    int r = f.sock && f.sock->kind == SOCK_TCP ? tcp_socket_accelerated(f.sock, fd) : 0;
    fdt_put(&f);
    return r;
}

static long long counter_of(struct tcp_sock *t, const char *name)
{
    struct chan_side *me = t->ch.self;
    if (!strcmp(name, "turns_given"))   /* the thread's, not the end's */
        return turn_count();
    if (!strcmp(name, "os_polls_skipped"))
        return kernel_looks_skipped();
    if (!me || atomic_load(&t->path) != PATH_SHM)
        return -1;   /* no channel: an end on the fabric counts nothing here */
    static const struct { const char *name; size_t off; } tab[] = {
        { "bytes_out", offsetof(struct chan_side, bytes_out) },
        { "bytes_in", offsetof(struct chan_side, bytes_in) },
        { "sends", offsetof(struct chan_side, sends) },
        { "recvs", offsetof(struct chan_side, recvs) },
        { "doorbells", offsetof(struct chan_side, doorbells) },
        { "sleeps", offsetof(struct chan_side, sleeps) },
        { "zc_sends", offsetof(struct chan_side, zc_sends) },
        { "zc_bytes", offsetof(struct chan_side, zc_bytes) },
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(name, tab[i].name))
            return (long long)atomic_load((_Atomic uint64_t *)((char *)me + tab[i].off));
    if (!strcmp(name, "zc_off"))
        return atomic_load(&me->zc_off);
    if (!strcmp(name, "doorbells_held"))
        return atomic_load(&me->doorbells_held);
    if (!strcmp(name, "ring_size"))
        return (long long)ring_size_now(&t->ch.tx);
    if (!strcmp(name, "holders"))
        return atomic_load(&me->holders);
    if (!strcmp(name, "shm_bytes"))
        return (long long)channel_reserved(&t->ch);
    return -1;
}

/* A counter of this end, by name (see shunt.h), or -1. */
__attribute__((visibility("default"))) long long shunt_fd_counter(int fd, const char *name)
{
    shunt_ensure_init();
    if (name && !strcmp(name, "object"))   /* any fd: does the table keep an object for it */
        return fdt_has_object(fd) && !fdt_is_kernel_sock(fd) && !fdt_lazy(fd);
    struct fdref f = fdt_get(fd);
    long long r = -1;
    if (name && f.sock && f.sock->kind == SOCK_TCP && tcp_socket_accelerated(f.sock, fd))
        r = counter_of(tcp_of(f.sock), name);
    fdt_put(&f);
    return r;
}

/* The record `shunt stat` reads of a connection at fd: false if none. */
static bool conn_record(int fd, struct pst_rec *r)
{
    shunt_ensure_init();
    int e;
    for (int i = 0; (e = pst_get(fd, r)) == -EBUSY && i < 1000; i++)
        sched_yield();   /* a writer of this entry is a few stores away */
    return e == 0 && r->kind == PST_KIND_CONN;
}

/* Why fd's connection is on kernel TCP, as `shunt stat` shows it: the key
 * of its fallback reason, "" while it is accelerated or offered, NULL if
 * shunt has no record of a connection at fd.  The string is the calling
 * thread's until its next call. */
__attribute__((visibility("default"))) const char *shunt_fd_fallback(int fd)
{
    static SHUNT_TLS char key[PST_REASON_MAX + 1];
    struct pst_rec r;
    if (!conn_record(fd, &r)) {
        /* no record (a forked child's table may not have it yet): the object's */
        struct fdref f = fdt_get(fd);
        bool conn = f.sock && f.sock->kind == SOCK_TCP && tcp_of(f.sock)->stat.kind == PST_KIND_CONN;
        if (conn)
            snprintf(key, sizeof key, "%s", atomic_load(&tcp_of(f.sock)->path) != PATH_TCP ? ""
                     : fallback_reason_key((enum fallback_reason)atomic_load(&tcp_of(f.sock)->reason)));
        fdt_put(&f);
        return conn ? key : NULL;
    }
    snprintf(key, sizeof key, "%.*s", (int)sizeof r.reason, r.reason);
    return key;
}

/* How fd's connection moves its bytes now (see shunt.h), or NULL: the
 * socket object's path (a forked child's table may not hold its records
 * yet), else the record of a connection kept without one. */
__attribute__((visibility("default"))) const char *shunt_fd_path(int fd)
{
    shunt_ensure_init();
    struct fdref f = fdt_get(fd);   /* an fd met first here (after exec) is probed */
    int path = f.sock && f.sock->kind == SOCK_TCP ? (int)atomic_load(&tcp_of(f.sock)->path) : -1;
    fdt_put(&f);
    switch (path) {
    case PATH_SHM: return pst_path_name(PST_PATH_SHM);
    case PATH_OFFERED: return pst_path_name(PST_PATH_OFFERED);
    case PATH_FABRIC: return pst_path_name(PST_PATH_FABRIC);
    case PATH_TCP: return pst_path_name(PST_PATH_TCP);
    default: break;
    }
    struct pst_rec r;
    return conn_record(fd, &r) ? pst_path_name(r.path) : NULL;
}
