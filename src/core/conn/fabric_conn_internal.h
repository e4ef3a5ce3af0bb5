/*
 * fabric_conn_internal.h: what the files of a connection on the fabric
 * share (fabric_conn.c, fabric_conn_pending.c, fabric_conn_wait.c,
 * fabric_conn_calls.c, fabric_conn_leave.c); nothing outside core/conn's
 * fabric_conn*.c includes it.  The public side is fabric_conn.h.
 */
#ifndef SHUNT_CORE_CONN_FABRIC_CONN_INTERNAL_H
#define SHUNT_CORE_CONN_FABRIC_CONN_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/un.h>

#include "core/conn/fabric_conn.h"
#include "core/conn/fabric_pending.h"
#include "core/conn/fabric_proof.h"
#include "core/conn/fabric_stream.h"
#include "core/conn/fallback.h"
#include "core/conn/stream.h"
#include "core/fd/fdtable.h"
#include "transport/fabric_ring.h"

struct fabric_conn {
    struct fabric_stream s;
    struct fabric_ring *ring;     /* this end's (NULL: a client before its hello) */
    pid_t pid;                    /* the process that made ring: nobody else touches it */
    bool server;
    pid_t accepted_by;            /* server: the process whose accept made it */
    atomic_bool pending;          /* server: its hello goes at the first call (fabric_pending.h) */
    struct fabric_pending pend;
    uint32_t hello_tag;           /* server: the client's SYN's, for the hello */
    uint64_t hello_cookie;
    bool attached;                /* to the peer's ring: this end may move */
    bool hello_seen;              /* client: the server's hello came (proven or not) */
    bool peer_closed;             /* client: its proof named a process or fd gone by then */
    bool no_fd;                   /* client: no fd was left to check the proof with */
    uint8_t unbuilt;              /* client: why its end of the fabric could not be made (a reason) */
    bool no_attach;               /* client: a hello still to come is taken off, not attached to */
    bool withdrew;                /* client: its end (shutdown) came before its hello: it never moves */
    bool announced;               /* "accelerated" logged */
    bool reset_sent;              /* broken: the socket was shut down both ways, once */
    enum fallback_reason otherwise;   /* client: recorded if no hello comes */
    struct sockaddr_un peer_bell;     /* the proven peer's doorbell (sun_path[0] 0: none) */
    uint32_t peer_pid;                /* the proven peer's process (0: not proven) */
    uint8_t nonce[FABRIC_RING_NONCE];
    uint8_t hand[FABRIC_PROOF_LEN + FABRIC_STREAM_BLOB_MAX];
    struct tcp_sock *t;
};

/* A socket of this process went on the fabric once (fabric_conn.c). */
extern atomic_bool fconn_any;

/* fabric_conn.c: the connection and its hand-over. */
bool fconn_at_fd_limit(int fd);                   /* no fd left for a copy of fd: the reason says so */
enum fallback_reason fconn_unbuilt_reason(void);  /* why an engine or ring could not be had */
int fconn_send_hello(struct fabric_conn *c, int fd, char *why, size_t whylen);   /* under the lock */
struct fabric_conn *fconn_of(struct tcp_sock *t, int fd);   /* under the lock: t's, with the fd now used */
bool fconn_after_call(struct fabric_conn *c, int fd);       /* under the lock: still on the fabric? */
int fconn_broken(struct fabric_conn *c, int fd);            /* a broken stream: -ECONNRESET, the peer told */
void fconn_trace(struct fabric_conn *c, const char *what, ssize_t r);

/* fabric_conn_pending.c: a server whose hello waits for its first call. */
bool fconn_pending(const struct tcp_sock *t);
short fconn_pending_poll(int fd, short events);
bool fconn_settle_pending(struct tcp_sock *t, int fd);   /* not with the lock: still on the fabric? */
ssize_t fconn_pending_recv(struct tcp_sock *t, struct fdref *f, struct io_call *call, int flags, bool *gone);
bool fconn_pending_to_tcp(struct tcp_sock *t, int fd, const char *why);
void fconn_pending_dropped(struct fabric_conn *c);

/* fabric_conn_wait.c: how a call on the fabric sleeps. */
void fconn_follow_close(struct tcp_sock *t, struct fdref *f);
int fconn_call_sleep(struct tcp_sock *t, struct fdref *f, short events, int efd, bool socket_busy, bool nap,
                     uint64_t deadline, unsigned ran, unsigned norestart);
uint64_t fconn_timeout_deadline(int fd, int name);
short fconn_prepare_sleep(struct fabric_conn *c, int *efd);
bool fconn_spin_for_bytes(struct fabric_conn *c);

#endif
