/*
 * fabric_ring.h: a connection's byte stream between two processes that do
 * not share /dev/shm, as shunt's own ring protocol over the fabric engine's
 * one-sided puts (docs/architecture.md, "Between namespaces and hosts": the
 * fabric transport mirrors shunt's ring protocol with one-sided puts).
 *
 * Each end maps one region of its own that the peer may put into, holding
 * its receive ring and two published words:
 *   - written: the peer's count of bytes ever put into this ring (with the
 *     FIN bit, or the way back to TCP: fabric_ring_go_back), put by the
 *     peer after a fence behind the bytes it covers;
 *   - consumed: the peer's count of bytes ever read out of *our* outgoing
 *     ring (which lives in the peer's region), put back by the peer after
 *     each read (with its sleep, ask and leave bits);
 * and one word the owner writes and the peer reads back, owner_left
 * (fabric_ring_leave_unattached).
 * A writer never puts past the consumed count it read, so a ring is the
 * flow-control window, as in shunt's own rings: nothing queues without
 * bound (why UCX's stream API was rejected).
 *
 * Every word the peer writes into our region is input: each is read once,
 * checked (a check word the region's owner keyed, then monotonic and within
 * the ring), and garbage is -EIO, after which the caller falls back to
 * kernel TCP; nothing read from the region ever widens a copy.
 *
 * A put wakes nobody; a doorbell (fabric_ring_bell, the engine's active
 * message, which makes the peer's wake-up fd readable) does, when the
 * caller decides one is due: a write says whether the peer had read everything before
 * it (was_empty: the reader may be asleep), a read whether the ring was
 * full before it (was_full: the writer may be).  Both are exact only if a
 * side about to sleep first makes its own last index land at the peer
 * (fabric_ring_flush) and then looks once more (fabric_ring_readable or
 * _writable): either it sees the peer's new index, or the peer's decision,
 * taken after its own index landed, sees ours.
 *
 * Not thread-safe: calls on one end, and on the engine beneath it (a
 * worker made UCS_THREAD_MODE_SERIALIZED), are serialized by the caller.
 * Over UCX's TCP lanes bytes land only while the receiving process drives
 * its worker: every call here drives it once.
 */
#ifndef SHUNT_TRANSPORT_FABRIC_RING_H
#define SHUNT_TRANSPORT_FABRIC_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct fabric_engine;
struct fabric_ring;

#define FABRIC_RING_MIN (4096u)
#define FABRIC_RING_MAX (1u << 30)
#define FABRIC_RING_NONCE 16
/* A blob is a fixed header, then the worker address and the region's key,
 * which UCX sizes (a few hundred bytes on these lanes). */
#define FABRIC_RING_BLOB_MAX 4096u

/* Maps this end's region with a receive ring of rx_size bytes (a power of
 * two, FABRIC_RING_MIN..FABRIC_RING_MAX).  0 or -errno, with why. */
int fabric_ring_open(struct fabric_engine *e, size_t rx_size, struct fabric_ring **out, char *why,
                     size_t whylen);

/* What the peer needs to attach to this end: version, worker address, the
 * region's key, base and sizes, the keys of its check words, and the
 * caller's nonce (NULL: zeros; this layer never reads it).  Its length, or
 * -ENOSPC if cap is too small, -EIO if the engine cannot give its address. */
ssize_t fabric_ring_blob(struct fabric_ring *f, const uint8_t nonce[FABRIC_RING_NONCE], void *out,
                         size_t cap);

/* Attaches to the peer's blob (len bytes, input: every field checked): 0,
 * -EPROTO (not a blob of this version, or inconsistent), or the engine's
 * -errno with why.  nonce, if not NULL, receives the peer's.  Only a
 * proven peer's blob: over UCX's shared-memory lanes a forged key or base
 * makes this end's puts land outside the peer's region, anywhere in this
 * process (docs/architecture.md, "Built: the fabric ring"). */
int fabric_ring_attach(struct fabric_ring *f, const void *blob, size_t len,
                       uint8_t nonce[FABRIC_RING_NONCE], char *why, size_t whylen);

/* Puts up to the free space of the peer's ring from iov (skipping skip
 * bytes of it), then the index that publishes them.  The bytes written
 * (> 0), -EAGAIN (full), -EPIPE (after fabric_ring_shutdown), -EIO
 * (garbage from the peer, or the lane failed), -ETIMEDOUT (a put not done
 * in 5 s).  After any error but -EAGAIN and -EPIPE the end is broken for
 * good: every call answers -EIO, and the caller closes it.  *was_empty (if not NULL): the peer had read everything before
 * this write, so it may be waiting for bytes. */
ssize_t fabric_ring_write(struct fabric_ring *f, const struct iovec *iov, int iovcnt, size_t skip,
                          bool *was_empty);

/* Copies up to the readable bytes into iov and, unless peek, gives the
 * space back to the peer (before fabric_ring_attach, which an end may read
 * its ring without: at the attach).  If giving it back fails, the peer is
 * taken for gone: the bytes are returned all the same, what is left in the
 * ring stays readable, and writes answer -EPIPE from then on.  The bytes read (> 0), 0 at EOF (the peer shut
 * down and every byte before it was read), -EXDEV (the peer went back to
 * TCP and every byte before was read), -EAGAIN (nothing yet), -EIO,
 * -ETIMEDOUT.  *was_full (if not NULL): the ring was full before this
 * read, so the peer may be waiting for space. */
ssize_t fabric_ring_read(struct fabric_ring *f, const struct iovec *iov, int iovcnt, bool peek,
                         bool *was_full);

/* Bytes readable now, bytes writable now, or -EIO. */
int64_t fabric_ring_readable(struct fabric_ring *f);
/* The peer's last count, as the last look saw it, carried its FIN (its
 * end comes after the bytes still unread). */
bool fabric_ring_peer_fin(const struct fabric_ring *f);

int64_t fabric_ring_writable(struct fabric_ring *f);

/* Shuts the writing side down: a FIN after the bytes already written,
 * which the peer reads as EOF after them.  0 or -errno (also -EPIPE twice). */
int fabric_ring_shutdown(struct fabric_ring *f);
/* The writing side goes back to TCP: after the bytes already written, a
 * mark in the same count (BACK_BIT), needing no room, which the reader
 * meets as -EXDEV once it has read them all.  Writes answer -EPIPE from
 * then on.  0 or -errno (also -EPIPE after a shutdown). */
int fabric_ring_go_back(struct fabric_ring *f);

/* The writing side goes back to TCP taking back what the reader has not
 * read (a reader that reads nothing while a blocking send waits for room:
 * kernel TCP would take more): from the reader's count as last looked at
 * (at least keep: bytes before it are never sent again), or from the
 * count of a reader that left meanwhile.  *from: where the bytes this end
 * must send by TCP, before any other, start (fabric_ring_unread has them).
 * The reader reads its ring up to there at most, then drops from the
 * socket what it had read past it (fabric_ring_peer_took_back).  Writes
 * answer -EPIPE from then on.  0, -EPIPE (after a FIN, a take, or the
 * reader left or is lost: its leave is served as such), or -errno. */
int fabric_ring_take_back(struct fabric_ring *f, uint64_t keep, uint64_t *from);
/* Whether the writer took back (a look now): 0 no, -EAGAIN taken but not
 * final yet (it puts the final word in the same call), 1 with *skip: the
 * bytes this end read past where the writer's TCP bytes start, which it
 * must drop from the socket; -EIO. */
int fabric_ring_peer_took_back(struct fabric_ring *f, uint64_t *skip);

/* Asks the writer to stop writing into this end's ring (ASK_BIT, in this
 * count and every one this end puts back from now on), flushed.  The
 * writer sees it with fabric_ring_peer_asked after any call that looked at
 * its consumed count (write, writable), and what it does about it is its
 * caller's.  0 or -errno. */
int fabric_ring_ask(struct fabric_ring *f);
bool fabric_ring_peer_asked(const struct fabric_ring *f);

/* This end leaves the ring: it reads nothing more from it, and the writer
 * is to send by TCP everything it wrote past what this end consumed
 * (LEAVE_BIT, which asks too, in this count and every one after; the count
 * never moves again), flushed.  For an end whose process is about to lose
 * its engine (exec, or a child after fork).  0 or -errno. */
int fabric_ring_leave(struct fabric_ring *f);
/* An end that leaves before it attached (it has not the peer's blob, so
 * it cannot tell the peer anything): it says so in a word of its own
 * region, then looks at its ring; *header: the peer had already put bytes
 * there (its header and blob: the caller attaches and leaves as usual).
 * Otherwise the peer finds the word when it reads it back after its first
 * put (fabric_ring_peer_owner_left): each side stores before it loads, so
 * one of them sees the other.  0, -EISCONN (attached: fabric_ring_leave),
 * or -errno. */
int fabric_ring_leave_unattached(struct fabric_ring *f, bool *header);
/* Reads the peer's word back (after this end's first put landed): *left
 * says it left before it attached, and is true too when the word cannot be
 * read (0 or the engine's -errno then). */
int fabric_ring_peer_owner_left(struct fabric_ring *f, bool *left);

/* After the peer's word said it left (or refused this end) before it
 * attached: this end says it saw that, in the same word, flushed, before it
 * sends by TCP what it had put into the ring.  0 or -errno. */
int fabric_ring_ack_owner_left(struct fabric_ring *f);
/* Whether the peer said so (read in this end's own region: only a hint
 * from the peer, which decides whose bytes it delivers, never where). */
bool fabric_ring_owner_left_seen(const struct fabric_ring *f);

/* Whether the peer left, by its count as last looked at (tx_consumed is
 * then where it stopped reading). */
bool fabric_ring_peer_left(const struct fabric_ring *f);
/* Copies into buf (at most cap bytes, and not past the ring's end: call
 * again for the rest) what this end wrote from stream position from on,
 * which the peer has not consumed: from a copy kept of what was put, or,
 * on lanes that map the peer's region here (sysv, posix), read back from
 * it, which stays mapped after the peer's process let go of it.  The bytes
 * copied, 0 when there are none, -EINVAL if from is not within what the
 * peer had not read, or the engine's -errno. */
ssize_t fabric_ring_unread(struct fabric_ring *f, uint64_t from, void *buf, size_t cap);
/* The peer's consumed count as last looked at, and this end's written. */
uint64_t fabric_ring_peer_consumed(const struct fabric_ring *f);
/* What the peer put into this end's ring so far, as last looked at. */
uint64_t fabric_ring_peer_written(const struct fabric_ring *f);
uint64_t fabric_ring_written(const struct fabric_ring *f);
/* Whether the peer's last count carries the way back (fabric_ring_go_back),
 * by a look now: bytes may still come before it. */
bool fabric_ring_peer_went_back(struct fabric_ring *f);

/* This end has read everything and is about to sleep: says so in the
 * count it puts back (its next read's count unsays it), after which that
 * put has landed.  The caller then looks at the ring once more before it
 * sleeps.  0 or -errno. */
int fabric_ring_sleep(struct fabric_ring *f);

/* After a write: whether the peer said it sleeps, read after this end's
 * last put landed, so that a peer that said so after its last look at the
 * ring is seen (a fence on shared-memory lanes, a flush on others, and
 * only when the first look says no).  0 or -errno. */
int fabric_ring_peer_sleeps(struct fabric_ring *f, bool *sleeps);

/* Rings the peer's doorbell (fabric_bell): 0, -ENOTCONN before the attach,
 * -EPIPE once the peer is taken for gone, -EIO.  Never waits. */
int fabric_ring_bell(struct fabric_ring *f);

/* Every put so far has reached the peer's memory (before a close that
 * must not lose the last bytes or the FIN).  0 or -errno (5 s at most). */
int fabric_ring_flush(struct fabric_ring *f);

/* The lanes UCX uses to the peer (fabric_peer_lanes), "" before attach. */
void fabric_ring_lanes(struct fabric_ring *f, char *out, size_t len);
/* The connection's socket, fd, and the peer's process, pid (0: as it was)
 * (fabric_peer_watch), once attached. */
void fabric_ring_watch(struct fabric_ring *f, int fd, uint32_t pid);

/* Frees the end without waiting for a peer that may be dead. */
void fabric_ring_close(struct fabric_ring *f);

/* For tests that scribble on purpose: where this end's region is, the
 * words the peer writes first. */
void *fabric_ring_region(struct fabric_ring *f, size_t *len);

#endif
