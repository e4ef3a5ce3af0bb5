/*
 * call_marks.h: which thread of this process is inside a data call (recv,
 * send and their kin) on which socket, so that a close of the socket's last
 * fd can leave those calls their socket, as the kernel does (a call holds
 * the file until it returns; deferred_close.c).
 *
 * Each thread has one mark, in its own thread-local storage, listed once
 * (the thread's first data call; taken off the list when it exits).  A data
 * call sets it with a plain store while it looks its fd up, before the fd
 * table lets a closer of that fd go on (fdt_get_marked), and puts the
 * previous value back with a plain store as it returns: no locked
 * instruction is added to a call.  Only a closer reads the marks of other
 * threads, under the list's lock.
 */
#ifndef SHUNT_CALL_MARKS_H
#define SHUNT_CALL_MARKS_H

#include "core/fd/fdtable.h"

struct call_mark {
    _Atomic(struct shunt_sock *) sock;   /* the socket of the call under way, or NULL */
    struct call_mark *prev, *next;        /* the list (its lock) */
    bool listed;
};

extern SHUNT_TLS struct call_mark shunt_call_mark;

/* Lists this thread's mark (its first data call). */
void call_mark_list(void);

/* fdt_get for a data call: marks the call on the fd's object.  *saved gets
 * the mark as it was (a signal handler's call inside another call), which
 * fdt_put_call puts back. */
static inline struct fdref fdt_get_call(int fd, struct shunt_sock **saved)
{
    if (__builtin_expect(!shunt_call_mark.listed, 0))
        call_mark_list();
    *saved = atomic_load_explicit(&shunt_call_mark.sock, memory_order_relaxed);
    return fdt_get_marked(fd, &shunt_call_mark.sock);
}

static inline void fdt_put_call(struct fdref *f, struct shunt_sock *saved)
{
    atomic_store_explicit(&shunt_call_mark.sock, saved, memory_order_relaxed);
    fdt_put(f);
}

/* How many threads other than this one are inside a data call on s. */
unsigned call_marks_on(const struct shunt_sock *s);

/* In the child after fork: only this thread came along. */
void call_marks_after_fork_child(void);

#endif
