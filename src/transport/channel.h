/*
 * channel.h: the shared-memory segment of one accelerated connection.
 *
 * One file in /dev/shm (mode 0600, made with O_EXCL under a name with
 * random bits) per connection, created by the client
 * when it offers acceleration and opened by the server when it claims the
 * offer (and later by any process that comes to hold an end: after exec, or
 * an fd received, by the name in the registry's record).  It holds the
 * negotiation word, one header per endpoint (side 0 is the client, side 1
 * the server) and one ring per direction: ring 0 carries client to server,
 * ring 1 server to client.  The code that runs the protocols on these words
 * is in core/ (core/conn/negotiate.c, downgrade.c, zcopy.c; core/wait/).
 *
 * Everything in the segment can be scribbled on by the peer; the layout is
 * computed from the ring size this process chose or checked at attach time,
 * and never re-read (a ring's size now, which grows, is read at every use
 * and checked against that: ring.h).
 */
#ifndef SHUNT_CHANNEL_H
#define SHUNT_CHANNEL_H

#include <stdatomic.h>
#include <stddef.h>

#include "transport/ring.h"
#include "transport/seg_lock.h"

#define CHANNEL_MAGIC 0x6c6e6e6168637368ULL   /* "shchannl" */
#define CHANNEL_VERSION 14u
#define CHANNEL_NAME_MAX 64

/* The negotiation word (DESIGN section 2): until the server claims, the
 * client sends over TCP and counts those bytes here. */
#define NEG_CLAIMED  (1ull << 63)   /* server took the channel: bytes after the prefix are doorbells */
#define NEG_REFUSED  (1ull << 62)   /* server will not take it: the connection stays TCP */
#define NEG_SENDING  (1ull << 61)   /* client is inside a TCP send; the prefix is not final */
#define NEG_PREFIX_MASK (NEG_SENDING - 1)

/* The doorbells an end has sent (chan_side.bells): a count, the sends in
 * progress, and a freeze that stops further ones.  A sender adds itself to
 * the busy part before its send and moves to the count after it; a freeze
 * waits for no send to be busy, so the count it freezes is exactly the
 * doorbell bytes that entered the connection (core/conn/downgrade.c). */
#define BELLS_FROZEN  (1ull << 63)
#define BELLS_BUSY    (1ull << 40)
#define BELLS_COUNT_MASK (BELLS_BUSY - 1)
#define BELLS_BUSY_MASK (BELLS_FROZEN - BELLS_BUSY)

/* The downgrade word (chan_hdr.down), protocol in core/conn/downgrade.c: 0 while the
 * channel carries the bytes.  DOWN_SET | the side that leaves, set first
 * (one compare-exchange from 0, so of two ends leaving at once exactly one
 * is the leaver): from then on neither end puts bytes into its outgoing
 * ring, and only the other end reads what is left in its incoming one.
 * DOWN_READY once the leaver has recorded its tails and removed the
 * doorbells queued for it: the other end may act.  DOWN_RESENT once the
 * other end has put back into TCP the bytes the leaver never read;
 * DOWN_DUPS once it has removed from its socket the leaver's doorbells and
 * the re-sent bytes it had read from the ring. */
#define DOWN_SIDE     1u
#define DOWN_SET      4u
#define DOWN_RESENT   8u
#define DOWN_READY    16u
#define DOWN_DUPS     32u
#define DOWN_ALL      (DOWN_SIDE | DOWN_SET | DOWN_RESENT | DOWN_READY | DOWN_DUPS)

/* The copy an end that closes leaves in TCP of what its peer had not read
 * yet (chan_side.closed_copy, core/conn/downgrade.c): COPY_WRITING while it is being
 * made; COPY_DONE once [copy_from, copy_end) of its outgoing ring is in the
 * peer's socket, after every doorbell it sent; COPY_RESENDS when it found
 * the peer leaving instead and re-sends as the other end of a downgrade. */
#define COPY_NONE     0u
#define COPY_WRITING  1u
#define COPY_DONE     2u
#define COPY_RESENDS  3u

/* Endpoint state bits (chan_side.state). */
#define SIDE_SHUT_WR  1u    /* wrote FIN into its outgoing ring */
#define SIDE_SHUT_RD  2u
#define SIDE_CLOSED   4u    /* the last holder closed it */
#define SIDE_RESET    8u    /* closed abortively (SO_LINGER 0, or unread data) */
#define SIDE_ALL      15u   /* any other bit is a scribble */

/*
 * A single-copy send (core/conn/zcopy.c): the sender describes its own buffer
 * here, at stream position pos of its outgoing ring, and the receiver
 * copies straight out of it with process_vm_readv.  Written by the sender
 * while state is ZC_IDLE, read by the receiver after it moved state from
 * ZC_POSTED to ZC_COPYING; the receiver alone advances done.
 */
#define ZC_SEGS 8
enum { ZC_IDLE, ZC_POSTED, ZC_COPYING, ZC_DONE, ZC_FAILED };

/* Why single copy is off for a direction (chan_side.zc_off), as
 * shunt_fd_counter(fd, "zc_off") reports it (include/shunt.h). */
enum zc_off_reason { ZC_ON, ZC_OFF_EPERM, ZC_OFF_ENOSYS, ZC_OFF_PIDNS, ZC_OFF_OTHER };

struct zc_desc {
    alignas(64) _Atomic uint32_t state;     /* ZC_* */
    int32_t pid;                            /* the sender's process */
    int32_t taker;                          /* the receiving process that moved it to ZC_COPYING */
    uint64_t pidns;                         /* inode of its pid namespace: pids mean something only within one */
    uint64_t pos;                           /* ring head at which these bytes sit in the stream */
    uint64_t len;
    uint32_t nseg;
    struct { uint64_t addr, len; } seg[ZC_SEGS];
    alignas(64) _Atomic uint64_t done;      /* bytes the receiver took so far */
};

/* The segment's layout (struct zc_desc, struct chan_side, struct chan_hdr;
 * struct ring_hdr in ring.h), which both ends and `shunt stat` read: a
 * change must bump CHANNEL_VERSION. */
#define CHAN_AT(s, f, off) \
    _Static_assert(offsetof(struct s, f) == (off), #s "." #f " moved: bump CHANNEL_VERSION")
CHAN_AT(zc_desc, state, 0);
CHAN_AT(zc_desc, pid, 4);
CHAN_AT(zc_desc, taker, 8);
CHAN_AT(zc_desc, pidns, 16);
CHAN_AT(zc_desc, pos, 24);
CHAN_AT(zc_desc, len, 32);
CHAN_AT(zc_desc, nseg, 40);
CHAN_AT(zc_desc, seg, 48);
CHAN_AT(zc_desc, done, 192);
_Static_assert(sizeof(((struct zc_desc *)0)->seg) == ZC_SEGS * 16, "zc_desc.seg resized: bump CHANNEL_VERSION");
_Static_assert(sizeof(struct zc_desc) == 256, "zc_desc resized: bump CHANNEL_VERSION");

struct chan_side {
    alignas(64) atomic_uint sleepers;  /* threads of this endpoint that want a doorbell when data comes */
    atomic_uint space_sleepers;        /* ... when ring space is freed */
    atomic_uint waiters;               /* threads of this endpoint inside a wait */
    atomic_uint holders;               /* processes holding this endpoint's socket */
    atomic_uint state;                 /* SIDE_* */
    atomic_int cpu;                    /* the CPU its last waiter spun on, plus one (0: none): a spin hint */
    atomic_int pid;
    /* Engaged only while more than one process holds this end (holders > 1,
     * and this process has shared it: core/fd/tcp_sock.h): a pid and a
     * futex, taken with a bound, never a pointer (transport/seg_lock.h); a
     * holder that dies inside does not stall the others.  tx: producing
     * into this end's outgoing ring; rx: consuming its incoming one; wait:
     * announcing sleeps and draining doorbells. */
    struct seg_lock tx_lock;
    struct seg_lock rx_lock;
    struct seg_lock wait_lock;
    /* Counters for `shunt stat`, on lines of their own.  Each is written by
     * this end only (the tx ones under tx_lock, the rx ones under rx_lock),
     * with a plain relaxed load and store: no locked instruction on the
     * data path.  Readers get a recent value; a peer may scribble on them,
     * which misleads only the statistics. */
    alignas(64) _Atomic uint64_t bytes_out, sends;
    alignas(64) _Atomic uint64_t bytes_in, recvs;
    /* sleeps: a blocked call asked for a doorbell to sleep on (its last
     * look may still have found what it waited for) */
    alignas(64) _Atomic uint64_t doorbells, spins_won, spins_lost, sleeps;
    /* Downgrade bookkeeping (downgrade.c): doorbell bytes sent to the
     * peer (BELLS_*), and doorbell bytes the holders of this end took off
     * their TCP socket (under wait_lock). */
    alignas(64) _Atomic uint64_t bells;
    _Atomic uint64_t bells_eaten;
    /* A holder of this end is taking doorbells off its socket without a
     * bound (no downgrade seen yet): a leaver re-sends its own bytes into
     * that socket only once this is clear (core/conn/downgrade.c, core/wait/doorbell.c). */
    atomic_uint draining;
    /* This end's last close left the bytes its peer had not read in TCP
     * (COPY_*): the stream positions the copy covers. */
    atomic_uint closed_copy;
    _Atomic uint64_t copy_from, copy_end;
    /* Single copy out of this end (core/conn/zcopy.c): sends and bytes that went
     * by it, and zc_off, set by the receiving end when the kernel refused
     * (enum zc_off_reason): from then on this direction uses the ring. */
    alignas(64) _Atomic uint64_t zc_sends, zc_bytes;
    atomic_uint zc_off;
    atomic_uint doorbells_held;          /* doorbells put off while corked (MSG_MORE, TCP_CORK) */
    atomic_uint doorbell_owed;           /* one of them is still owed to the peer */
    atomic_uint corked;                  /* TCP_CORK as the program set it on this end */
    /* A blocking recv or send of this end, while one process holds it,
     * sleeps on fwake, a futex, for a while before it sleeps on its
     * companion (core/wait/sleep.c): fsleepers and fspace_sleepers ask the
     * peer, as sleepers and space_sleepers ask for a doorbell, to add one
     * to fwake and wake it when it made progress (since CHANNEL_VERSION 13). */
    atomic_uint fwake;
    atomic_uint fsleepers, fspace_sleepers;
    struct zc_desc zc;
};

/* The three locks were pthread mutexes until CHANNEL_VERSION 9 (everything
 * after them moved then). */
CHAN_AT(chan_side, sleepers, 0);
CHAN_AT(chan_side, space_sleepers, 4);
CHAN_AT(chan_side, waiters, 8);
CHAN_AT(chan_side, holders, 12);
CHAN_AT(chan_side, state, 16);
CHAN_AT(chan_side, cpu, 20);
CHAN_AT(chan_side, pid, 24);
CHAN_AT(chan_side, tx_lock, 32);
CHAN_AT(chan_side, rx_lock, 48);
CHAN_AT(chan_side, wait_lock, 64);
CHAN_AT(chan_side, bytes_out, 128);
CHAN_AT(chan_side, sends, 192);
CHAN_AT(chan_side, bytes_in, 256);
CHAN_AT(chan_side, recvs, 320);
CHAN_AT(chan_side, doorbells, 384);
CHAN_AT(chan_side, spins_won, 448);
CHAN_AT(chan_side, spins_lost, 512);
CHAN_AT(chan_side, sleeps, 576);
CHAN_AT(chan_side, bells, 640);
CHAN_AT(chan_side, bells_eaten, 648);
CHAN_AT(chan_side, draining, 656);
CHAN_AT(chan_side, closed_copy, 660);
CHAN_AT(chan_side, copy_from, 664);
CHAN_AT(chan_side, copy_end, 672);
CHAN_AT(chan_side, zc_sends, 704);
CHAN_AT(chan_side, zc_bytes, 768);
CHAN_AT(chan_side, zc_off, 776);
CHAN_AT(chan_side, doorbells_held, 780);
CHAN_AT(chan_side, doorbell_owed, 784);
CHAN_AT(chan_side, corked, 788);
CHAN_AT(chan_side, fwake, 792);
CHAN_AT(chan_side, fsleepers, 796);
CHAN_AT(chan_side, fspace_sleepers, 800);
CHAN_AT(chan_side, zc, 832);
_Static_assert(sizeof(struct chan_side) == 1088, "chan_side resized: bump CHANNEL_VERSION");

/* Adds to a counter that only one thread writes at a time. */
static inline void counter_add(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

struct chan_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t ring_size;
    uint64_t total_size;
    _Atomic uint64_t reserved;          /* bytes of the file backed by memory (header and rings as grown) */
    uint64_t aux_key;                   /* random, in the names of the files beside the segment (channel.c) */
    alignas(64) _Atomic uint64_t neg;
    /* Moving back to kernel TCP (core/conn/downgrade.c); read on every call, written
     * once, so it shares the read-mostly line of neg. */
    _Atomic uint32_t down;              /* DOWN_* */
    _Atomic uint32_t back_len;          /* server's unread TCP prefix handed back, in "<name>-back" */
    _Atomic uint64_t down_tail;         /* the leaver's rx tail when it left: the other end resends from here */
    _Atomic uint64_t down_txtail;       /* the other end's rx tail when the leaver left: the leaver resent from here */
    _Atomic uint64_t down_resent;       /* bytes of the other end's re-send done (prefix, then ring), under its tx lock */
    struct chan_side side[2];
    struct ring_hdr ring[2];
};

CHAN_AT(chan_hdr, magic, 0);
CHAN_AT(chan_hdr, version, 8);
CHAN_AT(chan_hdr, ring_size, 12);
CHAN_AT(chan_hdr, total_size, 16);
CHAN_AT(chan_hdr, reserved, 24);
CHAN_AT(chan_hdr, aux_key, 32);
CHAN_AT(chan_hdr, neg, 64);
CHAN_AT(chan_hdr, down, 72);
CHAN_AT(chan_hdr, back_len, 76);
CHAN_AT(chan_hdr, down_tail, 80);
CHAN_AT(chan_hdr, down_txtail, 88);
CHAN_AT(chan_hdr, down_resent, 96);
CHAN_AT(chan_hdr, side, 128);
CHAN_AT(chan_hdr, ring, 2304);
#undef CHAN_AT
_Static_assert(sizeof(struct chan_hdr) == 2688, "chan_hdr resized: bump CHANNEL_VERSION");
/* Atomics two processes share must be lock-free, hence address-free (an
 * atomic emulated with a lock would keep the lock in each process's own
 * memory): the 32-bit words (atomic_uint, atomic_int, _Atomic uint32_t)
 * and the 64-bit ones. */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the segment's 32-bit words need lock-free atomics");
_Static_assert(__atomic_always_lock_free(sizeof(uint32_t), 0) && __atomic_always_lock_free(sizeof(uint64_t), 0),
               "the segment's words need lock-free atomics");

/* A mapped channel, private to this process. */
struct channel {
    struct chan_hdr *hdr;
    size_t map_size;
    struct ring_view rx;        /* the ring this endpoint reads */
    struct ring_view tx;        /* the ring this endpoint writes */
    struct chan_side *self;
    struct chan_side *peer;
    int side;                   /* 0 client, 1 server */
    bool tx_was_full;           /* the outgoing ring filled up since it last grew */
    atomic_bool grow_refused;   /* no memory to grow it: do not ask again (a waiting writer asks too) */
    atomic_bool tx_told_full;   /* a non-blocking send was told the ring is full: it grows in place no more */
    uint64_t aux_key;           /* the header's, read once at create or attach */
    char name[CHANNEL_NAME_MAX];
};

/* The downgrade word names this end as the one that left for a program
 * without shunt: it reads nothing more from its ring (downgrade.c). */
static inline bool channel_self_left(const struct channel *ch)
{
    unsigned d = atomic_load(&ch->hdr->down);
    return (d & DOWN_SET) && (int)(d & DOWN_SIDE) == ch->side;
}

/* The peer left and this end's re-send of what the peer never read has
 * begun but is not done (downgrade.c): a wait on this end looks again
 * every millisecond, since the re-send goes on only in calls, and what it
 * waits for (room in the peer's socket) rings no doorbell.  A scribbled
 * word costs those looks, nothing more. */
static inline bool channel_resend_pending(const struct channel *ch)
{
    unsigned d = atomic_load_explicit(&ch->hdr->down, memory_order_relaxed);
    return (d & (DOWN_SET | DOWN_READY | DOWN_RESENT)) == (DOWN_SET | DOWN_READY) && (int)(d & DOWN_SIDE) != ch->side;
}

/* Doorbells the peer sent that this end has not taken off its TCP socket. */
static inline uint64_t channel_bells_unread(const struct channel *ch)
{
    uint64_t sent = atomic_load(&ch->peer->bells) & BELLS_COUNT_MASK;
    uint64_t eaten = atomic_load(&ch->self->bells_eaten);
    return sent > eaten ? sent - eaten : 0;
}

/* Bytes the segment takes for a ring size. */
size_t channel_size(uint32_t ring_size);

/* The network namespace (inode) that the names of the channels this
 * process creates from now on carry: the registry's, which records them,
 * set when it is opened (0 for a registry of the tests' own, whose
 * channels no sweep may take). */
void channel_set_scope(uint64_t netns);

/* Client: creates a fresh segment (a unique name under /dev/shm, 0600) and
 * maps it as side 0, with room for rings of ring_size bytes of which only
 * start_size are backed by memory at first.  shm_limit bounds what all of
 * this user's channels reserve (0: no bound).  0, -ENOSPC at the bound (or
 * when /dev/shm is full), -EPERM when the budget's file is another user's
 * (shm_budget.h), or another negative errno. */
int channel_create(struct channel *ch, uint32_t ring_size, uint32_t start_size, uint64_t shm_limit);

/* Producer: before writing want more bytes, grows the outgoing ring when it
 * is empty and either filled up since it last grew or is smaller than want
 * (up to the capacity, as memory and the limit allow). */
void channel_tx_grow(struct channel *ch, uint64_t want, uint64_t shm_limit);

/* Producer, its ring full and its reader behind: doubles the ring in place
 * (ring_grow_in_place) when no unread byte would move, up to the capacity,
 * as a kernel socket's buffer takes more from a sender whose reader has
 * not started (a send larger than the ring, then a close, before the peer
 * reads); never once a non-blocking send was told it is full.  channel_tx_may_grow_in_place only asks (any thread, no lock). */
bool channel_tx_grow_in_place(struct channel *ch, uint64_t shm_limit);
bool channel_tx_may_grow_in_place(const struct channel *ch);

/* Bytes of /dev/shm this channel's segment holds. */
uint64_t channel_reserved(const struct channel *ch);

/* Opens the named segment, checks the file (this user's, mode 0600, or
 * -EPERM) and its header and size (a mismatch is -EPROTO), and maps it as
 * side (1: the server claiming an offer; 0 or 1: a process that came to
 * hold an end and found the segment by the registry's record). */
int channel_attach(struct channel *ch, const char *name, int side);

/* Whether this process alone moves its end's indexes (own: true for the
 * creator, and for a server that claims, whose rings nobody used yet; false
 * once another process may hold the end): then the ring checks them against
 * what it stored last (transport/ring.h, mine_known). */
void channel_own_indexes(struct channel *ch, bool own);

/* Reads the header of the named segment without mapping it (for tools):
 * 0, or a negative errno. */
int channel_peek(const char *name, struct chan_hdr *out);

/* Unmaps; the name stays until channel_unlink, which also removes the
 * files beside it (the ends' wake FIFOs, a handed-back prefix). */
void channel_detach(struct channel *ch);
void channel_unlink(const char *name);

/* The files beside a segment are named after it with the header's random
 * aux_key, so that another user who sees the segment's name cannot make
 * them first.  The path of an end's wake FIFO (core/wait/xwake.c): */
void channel_wake_path(const struct channel *ch, int side, char *out, size_t len);
/* ... and of the file in which a leaver hands back a server's unread TCP
 * prefix (core/conn/downgrade.c). */
void channel_back_path(const struct channel *ch, char *out, size_t len);

/* A file of /dev/shm that is a channel's segment or a file beside one, of
 * this version (for the sweep, src/registry/sweep.c). */
struct channel_file {
    uint32_t uid;
    uint64_t netns;                 /* its scope (channel_set_scope) */
    bool beside;                    /* a wake FIFO or a handed-back prefix, not the segment */
    char segment[CHANNEL_NAME_MAX]; /* the segment's name (its own, or the one it is beside) */
};
bool channel_file_parse(const char *file_name, struct channel_file *out);

#endif
