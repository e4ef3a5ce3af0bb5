/*
 * tcp_sock.h: the state of one TCP socket shunt manages (AF_INET and
 * AF_INET6 stream sockets), as the fd table holds it, and the locks of its
 * two directions.  Its operations are the TCP kind's (core/kinds/); the
 * fields are grouped by the module that owns them.
 *
 * A TCP socket is on one of three paths:
 *   PATH_TCP      the kernel's: never negotiated, or fell back (reason says why)
 *   PATH_OFFERED  a client that offered a channel and waits for the claim;
 *                 it sends over TCP and counts the bytes (core/conn/negotiate.c)
 *   PATH_SHM      the bytes move through the channel's rings (core/conn/stream.c)
 *   PATH_FABRIC   a peer out of the rings' reach that runs shunt: the fabric
 *                 stream over the engine (core/conn/fabric_conn.c); it leaves
 *                 for TCP before any call it does not carry
 * A socket only moves forward: TCP is final, SHM is final, FABRIC goes to
 * TCP only.
 */
#ifndef SHUNT_CORE_FD_TCP_SOCK_H
#define SHUNT_CORE_FD_TCP_SOCK_H

#include <pthread.h>

#include "base/log.h"
#include "base/signals.h"
#include "core/fd/sock.h"
#include "registry/procstat.h"
#include "registry/registry.h"
#include "transport/channel.h"

struct fabric_conn;

enum tcp_path { PATH_TCP, PATH_OFFERED, PATH_SHM, PATH_FABRIC };

/* Why a connection is on kernel TCP; shown by SHUNT_LOG and shunt stat. */
enum fallback_reason {
    FB_NONE,
    FB_DISABLED,            /* SHUNT_ACCEL=0 */
    FB_NOT_NEGOTIATED,      /* not connected or accepted through shunt yet */
    FB_NO_LISTENER,         /* no accelerated listener for the destination */
    FB_NOT_LOOPBACK,        /* destination is not a loopback address */
    FB_REGISTRY,            /* the registry could not be opened */
    FB_REGISTRY_FULL,
    FB_BIND,                /* could not bind to learn the local port */
    FB_CHANNEL,             /* no shared memory for the channel */
    FB_NO_OFFER,            /* the client does not run shunt */
    FB_VERIFY,              /* the offer is not this connection's (sock_diag) */
    FB_OTHER_USER,          /* the peer runs as another user */
    FB_CLAIM,               /* the claim did not settle in time */
    FB_REFUSED,             /* the server refused the offer */
    FB_ATTACH,              /* the channel could not be mapped */
    FB_CONNECT_FAILED,
    FB_INHERITED,           /* an inherited connection shunt does not know */
    FB_WITHDRAWN,           /* the client shut down before the server claimed */
    FB_DOWNGRADED,          /* an end was handed to a program without shunt (downgrade.c) */
    FB_SHM_LIMIT,           /* SHUNT_SHM_LIMIT reached, or /dev/shm full */
    FB_STDIO,               /* stdio on it that shunt cannot carry (interpose/stdio_calls.c) */
    FB_SANDBOX,             /* a seccomp filter keeps shunt out (core/process/sandbox.c) */
    FB_NOT_OURS,            /* a file shunt needs in /dev/shm is another user's (base/own_file.h) */
    FB_URING,               /* io_uring in the process (core/fd/uring_watch.h, core/process/uring_failsafe.c) */
    FB_SHORT,               /* this destination's connections were too short to pay for a channel (core/conn/short_conns.c) */
    FB_CROSS_VERIFY,        /* across namespaces: the offer the SYN's cookie names is not this connection's */
    FB_SAVED_SYN,           /* across namespaces: the program reads the listener's saved SYNs itself */
    FB_NO_COOKIE,           /* across namespaces: the socket's cookie (SO_COOKIE) could not be read */
    FB_REMOTE_SHUNT,        /* the client process runs shunt (its SYN says so) but its offer is not in our registry */
    FB_FABRIC,              /* the fabric path could not be taken: no engine, or the peer not proven (the log says which) */
    FB_FABRIC_LEFT,         /* left the fabric before a call it does not carry (fork, exec, epoll...: the log says which) */
    FB_FABRIC_SHARED,       /* a server's hello was due while another process held the socket too */
    FB_FABRIC_GONE,         /* the peer closed (or its process ended) before this end checked its proof */
    FB_FABRIC_FORKED,       /* a forking server's child would open an engine for this one connection */
    FB_FABRIC_NO_FD,        /* no fd left for the engine or the peer's proof (the process is at its fd limit) */
    FB_FABRIC_FSIZE,        /* RLIMIT_FSIZE set: UCX's shared-memory files would draw SIGXFSZ */
    FB_FABRIC_FORK_BUSY,    /* forked while the parent's engine, on UCX's TCP lanes, was in use */
    FB_FABRIC_NO_ROOM,      /* no room above the fd limit for the engine's fds (soft == hard, a small limit) */
    FB_RAW_CLONE,           /* a process made by a raw clone got it (core/process/raw_clone.c) */
    FB_BOTH_FULL,           /* both ends waited to send into full rings, neither reading (core/conn/stream.c) */
    FB_STALLED_READER,      /* a blocking send waited SHUNT_SEND_STALL_MS for a reader that read nothing (core/conn/stream.c) */
};

/* The paths whose readiness is shunt's to tell (an epoll set's members):
 * the channel's (offered, or on it) and the fabric's. */
static inline bool tcp_path_member(int path)
{
    return path == PATH_OFFERED || path == PATH_SHM || path == PATH_FABRIC;
}

/* Kept in the socket object: what does not change with its path. */
struct sockstat_info {
    bool published;         /* the socket has a record */
    uint8_t kind;           /* enum pst_kind */
    uint8_t role;           /* enum pst_role */
    struct reg_addr local;
    struct reg_addr peer;
    char lanes[PST_LANES_MAX];   /* on the fabric (core/conn/fabric_conn.c): its lanes and proven peer */
    uint32_t peer_pid;
    uint32_t peer_boot;
};

struct tcp_sock {
    struct shunt_sock base;

    /* the path and the channel (core/conn/negotiate.c, stream.c, downgrade.c) */
    _Atomic int path;                   /* enum tcp_path */
    _Atomic int reason;                 /* enum fallback_reason (core/conn/fallback.c) */
    bool negotiated;                    /* connect or accept has run the negotiation */
    pid_t listener_pid;                 /* the process whose registry entry this listener has (0: none);
                                         * a forked child sees its parent's pid here, not its own */
    unsigned char bound[24];            /* listener: its address (struct reg_addr) */
    uint64_t inode;                     /* the socket's, once known (tcp_sock_id) */
    struct reg_addr dest;               /* client: where it offered a channel to (core/conn/short_conns.c) */
    _Atomic pid_t watch_pid;            /* client: a sample of the short-connection rule, on kernel TCP: the
                                         * process that connected counts its data calls (0: not one) */
    _Atomic uint64_t watch_sends, watch_recvs, watch_bytes;
    bool host_rec;                      /* its connection record is in the host's registry (across namespaces) */
    bool cross_listener;                /* listener: listed in the host's registry by this process */
    uint64_t listener_netns;            /* listener: its network namespace's SO_NETNS_COOKIE (0: unknown) */
    bool listener_shared;               /* listener: since this process listed it, a child or a receiver
                                         * may hold it too (fork, spawn, SCM_RIGHTS: core/process/holders.c) */
    bool syn_ours;                      /* TCP_SAVE_SYN is set by shunt, not the program: the SYNs are shunt's */
    bool syn_program;                   /* the program set TCP_SAVE_SYN: its SYNs are the program's */
    int program_save_syn;               /* TCP_SAVE_SYN as the program set it (answered while syn_ours) */
    bool program_lowat;                 /* the program set TCP_NOTSENT_LOWAT: no process mark on it */
    bool lowat_marked;                  /* shunt set TCP_NOTSENT_LOWAT to SYNOPT_CLIENT_MARK (negotiate_offer.c) */
    struct fabric_conn *fab;            /* PATH_FABRIC's stream, kept until tcp_destroy (core/conn/fabric_conn.c) */
    pthread_mutex_t lock;               /* path changes, attach, close */
    pthread_mutex_t rx_lock;            /* one consumer of the rx ring at a time */
    pthread_mutex_t tx_lock;            /* one producer of the tx ring at a time */
    pthread_mutex_t wait_turn;          /* one thread of ours at the end's wait lock at a time (dir_lock) */
    struct channel ch;                  /* set before path first leaves TCP (a release store), then
                                         * mapped until tcp_destroy even after a fall back to TCP:
                                         * threads that saw OFFERED may still touch it (negotiate.c) */
    atomic_bool peer_gone;              /* the companion reported EOF or reset */
    atomic_bool broken;                 /* the peer corrupted the channel */
    atomic_bool reset_reported;         /* ECONNRESET was returned once */
    atomic_bool lock_failed;            /* a lock of the end in the segment timed out or was garbage (dir_lock) */
    atomic_bool peer_told;              /* broken: our end reset, the companion shut down (core/conn/stream.c) */

    /* What this process knows of the connection without the segment
     * (docs/architecture.md, "Shared memory is input"): kept here, because
     * every word of the segment may have been scribbled on since. */
    atomic_bool end_shared;             /* another process may hold this end (counted in, or inherited) */
    atomic_bool leaving;                /* this process is moving the connection back to TCP (downgrade.c) */
    atomic_bool leaver_forgotten;       /* the peer died leaving, and its word was undone (dg_forget_dead_leaver) */
    atomic_uint own_state;              /* SIDE_* this process set on its end (the segment's is a copy) */
    _Atomic uint64_t prefix_left;       /* server: the client's TCP bytes before the claim not read yet */
    _Atomic uint64_t prefix_sent;       /* client: bytes it sent by TCP before the claim (UINT64_MAX: unknown) */
    bool strict_failed;                 /* SHUNT_STRICT: this socket must fail */
    bool released;                      /* this process let go of it (core/conn/release.c) */

    /* what the program set, kept where the companion may differ (core/kinds/tcp_socket.c) */
    atomic_int nonblock;                /* O_NONBLOCK as last seen: 0, 1, or -1 unknown */
    int program_nodelay;                /* TCP_NODELAY as the program set it */
    struct timeval sndtimeo;            /* SO_SNDTIMEO as the program set it */
    struct timeval rcvtimeo;            /* SO_RCVTIMEO as last read or set (rcvtimeo_known; core/wait/sleep.c) */
    bool rcvtimeo_known;

    /* waiting (core/wait/); the fields marked wait_lock are under it */
    atomic_uint spin_fails;             /* consecutive spins that found nothing (spin.c): a hint
                                         * that a reader and a writer thread both update, relaxed */
    atomic_uint wait_gen;               /* futex: bumped when the kernel sleeper wakes (sleep.c) */
    bool kernel_sleeper;                /* a thread of ours sleeps in recv() (wait_lock) */
    pthread_t sleeper;                  /* which one: its signal handler may wait too (wait_lock) */
    unsigned futex_waiters;             /* threads of ours on wait_gen (wait_lock) */
    unsigned local_sleepers;            /* kernel sleeps of ours that watch the local wake (wait_lock) */
    atomic_uint waiters_here;           /* threads of ours inside a wait: the end's count while it is ours alone (doorbell.c) */
    _Atomic uint64_t stall_tail;        /* blocked writers' look at their reader (sleep.c, reader_still): */
    _Atomic uint64_t stall_since;       /* the tail seen, since when, and when last looked (relaxed: */
    _Atomic uint64_t stall_seen;        /* two writer threads at once may lose a look, no more) */

    /* a close while calls wait (core/wait/blocked_calls.c, core/conn/deferred_close.c) */
    unsigned blocked_calls;             /* calls of ours that waited and have not returned (wait_lock) */
    bool close_deferred;                /* the program closed its last fd meanwhile (wait_lock) */
    atomic_bool close_waiting;          /* a close waits for calls of ours to sleep or return: spins end */
    _Atomic int own_fd;                 /* after such a close: shunt's private copy of the socket, or -1 */

    /* epoll sets (core/kinds/epoll.c) */
    atomic_uint epoll_entries;          /* members of this process's epoll sets that name it */

    /* holders across fork and exec (core/process/holders.c) */
    unsigned fork_epoch;
    unsigned exec_epoch;
    bool survives_exec;
    bool fork_unlocked;

    /* what shunt stat shows (core/conn/sockstat.c) */
    struct sockstat_info stat;
};

static inline struct tcp_sock *tcp_of(struct shunt_sock *s)
{
    return (struct tcp_sock *)s;
}

/* Another process may hold this end now: this process counted one in (fork,
 * posix_spawn, SCM_RIGHTS) or found the end inherited, and the segment's
 * count agrees.  Never shared: the count is not even read (a scribbled one
 * must not engage a lock nobody else takes). */
static inline bool tcp_sock_end_shared(struct tcp_sock *t)
{
    return atomic_load_explicit(&t->end_shared, memory_order_relaxed) &&
           atomic_load_explicit(&t->ch.self->holders, memory_order_acquire) > 1;
}

/* This process counts n more holders of its end in (it passes the socket
 * on): from now on its end is shared (tcp_sock.c). */
void tcp_sock_hold_more(struct tcp_sock *t, unsigned n);

/* The segment cannot be trusted (why: logged the first time, if not NULL):
 * the connection is broken (every call on it fails: core/conn/stream.c),
 * and, once, our end is marked reset in the segment and the companion shut
 * down both ways, so that the peer's kernel tells the peer whatever the
 * segment says (tcp_sock.c). */
void tcp_sock_corrupt(struct tcp_sock *t, int fd, const char *why);

/* Server: the client's TCP bytes (sent before the claim) still to be read
 * before the ring: the count taken once at the claim, less what this
 * process read.  While another process holds the end, the segment's count
 * is the only record of what the others read: it is taken when it is lower
 * (it cannot be higher).  Never re-read alone: a scribbled count made the
 * reader take doorbells from the socket as data. */
static inline uint64_t tcp_sock_prefix_left(struct tcp_sock *t)
{
    if (t->ch.side != 1)
        return 0;
    uint64_t mine = atomic_load_explicit(&t->prefix_left, memory_order_relaxed);
    if (mine == 0 || !tcp_sock_end_shared(t))
        return mine;
    uint64_t seg = atomic_load(&t->ch.hdr->neg) & NEG_PREFIX_MASK;
    return seg < mine ? seg : mine;
}

/* This process read n bytes of the prefix. */
static inline void tcp_sock_prefix_read(struct tcp_sock *t, uint64_t n)
{
    atomic_fetch_sub(&t->prefix_left, n);
    atomic_fetch_sub(&t->ch.hdr->neg, n);   /* for the other holders of the end */
}

/* Client: whether the server may still have TCP bytes of ours to read
 * (then no doorbell goes behind them: core/wait/doorbell.c).  The
 * segment's count, if it is no more than what we sent; a larger one is
 * scribbled, and a doorbell too many costs nothing a missing one does. */
static inline bool tcp_sock_peer_prefix_pending(struct tcp_sock *t)
{
    uint64_t seg = atomic_load(&t->ch.hdr->neg) & NEG_PREFIX_MASK;
    return seg != 0 && seg <= atomic_load_explicit(&t->prefix_sent, memory_order_relaxed);
}

/* The SIDE_* bits of this end: those this process set, and while another
 * process holds the end (its shutdown counts too) the segment's, of the
 * closed set, kept from then on (a shutdown is for good, whoever did it).
 * Never shared: a scribbled word is not read (it ended a stream with a
 * clean EOF short of its last bytes). */
static inline unsigned tcp_sock_own_state(struct tcp_sock *t)
{
    unsigned mine = atomic_load_explicit(&t->own_state, memory_order_relaxed);
    if (tcp_sock_end_shared(t)) {
        unsigned seg = atomic_load(&t->ch.self->state) & SIDE_ALL;
        if (seg & ~mine)
            atomic_fetch_or(&t->own_state, seg);
        mine |= seg;
    }
    return mine;
}

/* The peer's SIDE_* bits.  A word with any other bit set is scribbled and
 * counts as a reset (SIDE_SCRIBBLED says why): the connection ends with
 * ECONNRESET, not with a clean EOF a program would take for the whole
 * stream, and the stream layer ends it for the peer too. */
#define SIDE_SCRIBBLED 0x80000000u
static inline unsigned tcp_sock_peer_state(struct tcp_sock *t)
{
    unsigned s = atomic_load(&t->ch.peer->state);
    return s & ~SIDE_ALL ? SIDE_RESET | SIDE_CLOSED | SIDE_SCRIBBLED : s;
}

/* Sets bits of this end's state, here and in the segment (for the peer);
 * returns the bits set before, as tcp_sock_own_state counts them. */
static inline unsigned tcp_sock_set_state(struct tcp_sock *t, unsigned bits)
{
    unsigned old = atomic_fetch_or(&t->own_state, bits);
    unsigned seg = atomic_fetch_or(&t->ch.self->state, bits);
    if (tcp_sock_end_shared(t))
        old |= seg & SIDE_ALL;
    return old;
}

/* How long a holder waits for another live holder's hold of a lock of the
 * end: a hold lasts a copy, at worst a downgrade's bounded waits. */
#define DIR_LOCK_WAIT_NS (10ull * 1000 * 1000 * 1000)

/*
 * One direction of an endpoint, locked: always by this process's mutex, and
 * also by the endpoint's lock in the segment while another process holds
 * the same end (after fork, exec or SCM_RIGHTS), taken only after the local
 * one (so no other thread of ours holds or waits for it: seg_lock.h) and
 * with a bound.  Returns whether the shared one was taken (pass it to
 * dir_unlock), or -EIO (and nothing held) if it timed out or was scribbled
 * over; from then on every dir_lock of the socket fails at once, so that a
 * corrupt segment costs at most one wait.  A holder that died inside it
 * leaves it to us: the rings only publish whole copies, so there is nothing
 * to repair.
 */
static inline int dir_lock(struct tcp_sock *t, pthread_mutex_t *local, struct seg_lock *shared)
{
    crit_lock(local);   /* a signal handler of this thread must not come here now */
    if (!tcp_sock_end_shared(t))
        return 0;
    if (!atomic_load(&t->lock_failed) && !atomic_load(&t->broken) &&
        seg_lock_take(shared, t->ch.name, DIR_LOCK_WAIT_NS) == 0)
        return 1;
    /* the segment cannot be trusted: the connection ends (every call fails,
     * and the first to see it tells the peer: core/conn/stream.c) */
    if (!atomic_exchange(&t->lock_failed, true))
        shunt_log(LOG_ERROR, "channel %s: a lock of this end was not to be had (held past its bound, or "
                  "scribbled on); connection reset", t->ch.name);
    atomic_store(&t->broken, true);
    crit_unlock(local);
    return -EIO;
}

static inline void dir_unlock(pthread_mutex_t *local, struct seg_lock *shared, int token)
{
    if (token > 0)
        seg_lock_give(shared);   /* -EIO: scribbled while held; free now, and what it guarded is checked */
    crit_unlock(local);
}

/* The fd an in-flight call goes on with: the program's, or, once the
 * program closed it while the call was blocked, shunt's private copy of
 * the socket (the kernel's file outlives the fd number the same way). */
static inline int tcp_call_fd(struct tcp_sock *t, int fd)
{
    int own = atomic_load_explicit(&t->own_fd, memory_order_relaxed);
    return own >= 0 ? own : fd;
}

/* The connection id of t at fd, which its log lines and `shunt stat` carry:
 * its socket's inode (looked up once). */
uint64_t tcp_sock_id(struct tcp_sock *t, int fd);

/* A log line about a socket, with pid (from the log), fd and connection id. */
#define shunt_log_sock(level, t, fd, fmt, ...)                                                            \
    do {                                                                                                  \
        if (__builtin_expect((level) <= shunt_log_level, 0))                                              \
            shunt_log_write((level), "fd %d sock %llu: " fmt, (fd),                                        \
                            (unsigned long long)tcp_sock_id((t), (fd)), ##__VA_ARGS__);                   \
    } while (0)

#endif
