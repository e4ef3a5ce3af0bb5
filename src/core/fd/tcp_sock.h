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
 * A socket only moves forward: TCP is final, SHM is final.
 */
#ifndef SHUNT_CORE_FD_TCP_SOCK_H
#define SHUNT_CORE_FD_TCP_SOCK_H

#include <pthread.h>

#include "base/log.h"
#include "base/signals.h"
#include "core/fd/sock.h"
#include "registry/registry.h"
#include "transport/channel.h"

enum tcp_path { PATH_TCP, PATH_OFFERED, PATH_SHM };

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
    FB_URING,               /* io_uring in the process (core/fd/uring_watch.h, core/process/uring_failsafe.c) */
};

/* Kept in the socket object: what does not change with its path. */
struct sockstat_info {
    bool published;         /* the socket has a record */
    uint8_t kind;           /* enum pst_kind */
    uint8_t role;           /* enum pst_role */
    struct reg_addr local;
    struct reg_addr peer;
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
    pthread_mutex_t lock;               /* path changes, attach, close */
    pthread_mutex_t rx_lock;            /* one consumer of the rx ring at a time */
    pthread_mutex_t tx_lock;            /* one producer of the tx ring at a time */
    struct channel ch;                  /* mapped while path is OFFERED or SHM */
    atomic_bool peer_gone;              /* the companion reported EOF or reset */
    atomic_bool broken;                 /* the peer corrupted the channel */
    atomic_bool reset_reported;         /* ECONNRESET was returned once */
    bool strict_failed;                 /* SHUNT_STRICT: this socket must fail */
    bool released;                      /* this process let go of it (core/conn/release.c) */

    /* what the program set, kept where the companion may differ (core/kinds/tcp_socket.c) */
    atomic_int nonblock;                /* O_NONBLOCK as last seen: 0, 1, or -1 unknown */
    int program_nodelay;                /* TCP_NODELAY as the program set it */
    struct timeval sndtimeo;            /* SO_SNDTIMEO as the program set it */
    struct timeval rcvtimeo;            /* SO_RCVTIMEO as last read or set (rcvtimeo_known; core/wait/sleep.c) */
    bool rcvtimeo_known;

    /* waiting (core/wait/); the fields marked wait_lock are under it */
    unsigned spin_fails;                /* consecutive spins that found nothing (spin.c) */
    atomic_uint wait_gen;               /* futex: bumped when the kernel sleeper wakes (sleep.c) */
    bool kernel_sleeper;                /* a thread of ours sleeps in recv() (wait_lock) */
    pthread_t sleeper;                  /* which one: its signal handler may wait too (wait_lock) */
    unsigned futex_waiters;             /* threads of ours on wait_gen (wait_lock) */
    unsigned local_sleepers;            /* kernel sleeps of ours that watch the local wake (wait_lock) */

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

/*
 * One direction of an endpoint, locked: always by this process's mutex, and
 * also by the endpoint's mutex in the segment while another process holds
 * the same end (after fork, exec or SCM_RIGHTS).  Returns whether the
 * shared one was taken (pass it to dir_unlock), or -EIO if the peer has
 * scribbled over it.  A holder that died inside it leaves it to us: the
 * rings only publish whole copies, so there is nothing to repair.
 */
static inline int dir_lock(struct tcp_sock *t, pthread_mutex_t *local, pthread_mutex_t *shared)
{
    crit_lock(local);   /* a signal handler of this thread must not come here now */
    if (atomic_load_explicit(&t->ch.self->holders, memory_order_acquire) <= 1)
        return 0;
    int r = pthread_mutex_lock(shared);
    if (r == EOWNERDEAD) {
        pthread_mutex_consistent(shared);
        r = 0;
    }
    if (r) {
        crit_unlock(local);
        return -EIO;
    }
    return 1;
}

static inline void dir_unlock(pthread_mutex_t *local, pthread_mutex_t *shared, int token)
{
    if (token > 0)
        pthread_mutex_unlock(shared);
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
