/*
 * seg_lock.h: a lock in a channel's segment, for the processes that hold
 * one end of a connection at once (after fork, exec or SCM_RIGHTS), which
 * any process of the user can scribble on.
 *
 * Why not a process-shared robust pthread mutex (CHANNEL_VERSION 9 and
 * before): glibc keeps a robust mutex on its owner thread's list through
 * pointers stored in the mutex itself, and unlocking it writes through
 * them, so a scribbled mutex made an unlock write where the scribbler chose
 * (or crash); a scribbled lock word made pthread_mutex_lock wait for ever,
 * and that wait was taken under the process-wide wait lock, so every other
 * connection of the process, its close and its exit waited too.  This lock
 * is one 32-bit word holding the owner's pid: nothing in it is ever used as
 * an address, every wait is bounded, and a word that names no process that
 * could hold it is reported at once instead of waited for.
 */
#ifndef SHUNT_SEG_LOCK_H
#define SHUNT_SEG_LOCK_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* In shared memory; all zero is free. */
struct seg_lock {
    alignas(8) _Atomic uint32_t word;   /* 0 free, else the owner's pid, | SEG_LOCK_WAITERS while someone sleeps on it */
    uint32_t spare[3];
};

#define SEG_LOCK_PID_MASK  0x3fffffffu
#define SEG_LOCK_WAITERS   0x40000000u
/* the kernel's PID_MAX_LIMIT: a larger "pid" is garbage */
#define SEG_LOCK_PID_LIMIT (1u << 22)

_Static_assert(sizeof(struct seg_lock) == 16, "seg_lock resized: bump CHANNEL_VERSION");
_Static_assert(__atomic_always_lock_free(sizeof(uint32_t), 0), "seg_lock's word needs a lock-free atomic");

/*
 * Takes the lock for this process, waiting at most timeout_ns for a live
 * holder.  The caller makes sure no other thread of its process holds or
 * waits for the same lock (it holds a process-local lock first), so a word
 * naming our own pid is garbage.  A holder whose process is gone (or a
 * zombie) leaves the lock to us: what it guarded publishes only whole
 * updates.  seg_name: the segment's name (a live holder maps it: a live
 * process that does not is named by a scribble).  0, or -ETIMEDOUT (a live
 * holder kept it), -EIO (the word is garbage).
 */
int seg_lock_take(struct seg_lock *l, const char *seg_name, uint64_t timeout_ns);

/* The same for a lock in any shared file (the registry: registry.c): file
 * is the absolute path a holder's /proc/PID/maps shows.  *took_over (if
 * given) says whether the lock was taken from a holder that died. */
int seg_lock_take_file(struct seg_lock *l, const char *file, uint64_t timeout_ns, bool *took_over);

/* Lets it go; -EIO if the word no longer named us (scribbled meanwhile:
 * it is free now all the same), else 0. */
int seg_lock_give(struct seg_lock *l);

#endif
