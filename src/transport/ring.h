/*
 * ring.h: a single-producer, single-consumer byte ring living in shared
 * memory, one per direction of a connection.
 *
 * head and tail are free-running 64-bit byte counts on cache lines of their
 * own; the free space is the flow-control window.  The shared header may be
 * written by a buggy or hostile peer, so the size and data pointer are kept
 * in a private view, every index read from shared memory is checked (a bad
 * one gives -EIO, never an access outside the ring), and every word is
 * stored twice, so that one scribbled word cannot pass for a valid one, and
 * the header carries a tag of its own, so that a whole header copied from
 * another ring (or zeroed) cannot either.
 *
 * A ring may start smaller than its capacity and grow while it is empty
 * (ring_resize): its size now lives in the shared header, checked against
 * the private capacity at every use, so growing needs no new mapping.
 */
#ifndef SHUNT_RING_H
#define SHUNT_RING_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define RING_MIN_SIZE 4096u
#define RING_MAX_SIZE (1u << 30)

/* In shared memory.  Each word has one writer, which stores it twice, the
 * copy first (ring.c, "Copies"): one scribbled word can then make a reader
 * wait or fail, never read bytes that were not written or overwrite bytes
 * that were not read. */
struct ring_hdr {
    alignas(64) _Atomic uint64_t head;  /* bytes ever written; producer stores, consumer loads */
    _Atomic uint64_t head_copy;         /* the same, stored just before head */
    _Atomic uint64_t tag;               /* this ring's, set once at creation: a header copied from elsewhere is not it */
    alignas(64) _Atomic uint64_t tail;  /* bytes ever consumed; consumer stores, producer loads */
    _Atomic uint64_t tail_copy;         /* the same, stored just before tail */
    alignas(64) _Atomic uint64_t fin;   /* 0, or 1 + the head at which the producer shut down */
    _Atomic uint64_t size;              /* bytes in use now (0: all of the capacity); producer stores */
    _Atomic uint64_t fin_copy;          /* stored just before fin */
    _Atomic uint64_t size_copy;         /* stored just before size */
    char pad[64 - 4 * sizeof(uint64_t)];
};

/* struct ring_hdr as both ends of a channel (and `shunt stat`) read it: a
 * change must bump CHANNEL_VERSION (transport/channel.h). */
#define RING_HDR_AT(f, off) \
    _Static_assert(offsetof(struct ring_hdr, f) == (off), "ring_hdr." #f " moved: bump CHANNEL_VERSION")
RING_HDR_AT(head, 0);
RING_HDR_AT(head_copy, 8);
RING_HDR_AT(tag, 16);
RING_HDR_AT(tail, 64);
RING_HDR_AT(tail_copy, 72);
RING_HDR_AT(fin, 128);
RING_HDR_AT(size, 136);
RING_HDR_AT(fin_copy, 144);
RING_HDR_AT(size_copy, 152);
RING_HDR_AT(pad, 160);
#undef RING_HDR_AT
_Static_assert(sizeof(struct ring_hdr) == 192 && alignof(struct ring_hdr) == 64,
               "ring_hdr resized: bump CHANNEL_VERSION");
/* The indexes are atomics that two processes share: lock-free, hence
 * address-free (an atomic emulated with a lock would keep the lock in each
 * process's own memory). */
_Static_assert(__atomic_always_lock_free(sizeof(uint64_t), 0), "ring indexes need lock-free 64-bit atomics");

/* Private to each process: never read back from shared memory. */
struct ring_view {
    struct ring_hdr *hdr;
    unsigned char *data;
    uint64_t size;      /* the capacity mapped: a power of two, the most the ring may grow to */
    /* This process's last store of its own index (head where it produces,
     * tail where it consumes), believed over the segment's while mine_known:
     * no other process moves that index (the end was never shared), so a
     * segment that says otherwise was scribbled on, even with both copies
     * alike (a whole header overwritten). */
    uint64_t my_head, my_tail;
    bool mine_known;
    uint64_t tag;       /* the ring's tag as read once (or set) at creation or attach */
};

/* Prepares a ring in memory the caller owns, with a tag of its choosing
 * (random: what tells this ring's header from any other's). */
void ring_init(struct ring_hdr *hdr, uint64_t tag);

/* Bytes readable now (0..size), or -EIO if the shared indexes are
 * inconsistent.  Advisory (any thread may ask): ring_read decides. */
int64_t ring_readable(const struct ring_view *r);

/* Bytes writable now (0..size), or -EIO. */
int64_t ring_writable(const struct ring_view *r);

/* True when the producer has shut down and every byte before it was read;
 * -EIO if the FIN position is inconsistent (or its two copies differ). */
int ring_at_eof(const struct ring_view *r);

/* Whether the producer has stored a FIN: both copies alike (one scribbled
 * word is no FIN); where it lies is ring_at_eof's to check. */
bool ring_fin_stored(const struct ring_view *r);

/* The producer's head (producer), the consumer's tail (consumer): this
 * side's own index, 0 with *out set, or -EIO if its two copies differ (or
 * differ from this process's own record, while it has one). */
int ring_head_mine(const struct ring_view *r, uint64_t *out);
int ring_tail_mine(const struct ring_view *r, uint64_t *out);

/* The other side's index as one may count on it: the head that promises
 * the fewest bytes past from (consumer), the tail that frees the fewest
 * bytes before head (producer). */
uint64_t ring_head_seen(const struct ring_view *r, uint64_t from);
uint64_t ring_tail_seen(const struct ring_view *r, uint64_t head);

/* Copies up to max readable bytes into iov, starting at byte offset skip of
 * the iovec (so a partly filled buffer can be resumed), and unless peek
 * advances tail.  Returns the bytes copied (0 when empty) or -EIO. */
ssize_t ring_read(struct ring_view *r, const struct iovec *iov, int iovcnt, size_t skip, size_t max, bool peek);

/* Copies up to max bytes in from iov, starting at byte offset skip of the
 * iovec, and advances head.  Returns the bytes copied (0 when full) or -EIO. */
ssize_t ring_write(struct ring_view *r, const struct iovec *iov, int iovcnt, size_t skip, size_t max);

/* For a read(2) or write(2) straight between the ring and another fd: the
 * free space (producer) or the readable bytes (consumer), up to max, as at
 * most two pieces of the ring's memory.  Returns the bytes (0: full or
 * empty) or -EIO.  Then ring_commit publishes n <= that many written
 * bytes, and ring_consume frees n <= that many read bytes (each -EIO, and
 * nothing moved, if this side's index changed under it: scribbled). */
ssize_t ring_space(const struct ring_view *r, struct iovec out[2], size_t max, int *cnt);
ssize_t ring_filled(const struct ring_view *r, struct iovec out[2], size_t max, int *cnt);
int ring_commit(struct ring_view *r, size_t n);
int ring_consume(struct ring_view *r, size_t n);

/* The ring's size now, or 0 if the header's is corrupt (out of range, or
 * its two copies differ). */
uint64_t ring_size_now(const struct ring_view *r);

/* Producer only: makes the ring new_size bytes (a power of two from
 * RING_MIN_SIZE up to the capacity).  Only while it is empty, so no byte in
 * flight changes place: 0, -EBUSY (not empty), -EINVAL or -EIO.  The memory
 * must be backed before (the channel reserves it). */
int ring_resize(const struct ring_view *r, uint64_t new_size);

/* Producer only: makes the ring new_size bytes although it holds unread
 * bytes, when every one of them keeps its place (they lie in the first
 * size-now bytes of a window of new_size: a ring that has not wrapped
 * since it was last empty at such a boundary, as a fresh one whose reader
 * has not caught up).  0, -EBUSY (some byte would move), -EINVAL or -EIO;
 * ring_may_grow_in_place only asks.  The memory must be backed before. */
int ring_grow_in_place(const struct ring_view *r, uint64_t new_size);
int ring_may_grow_in_place(const struct ring_view *r, uint64_t new_size);

/* Records the producer's shut down at the current head. */
void ring_set_fin(const struct ring_view *r);

#endif
