/*
 * fabric_conn.c: a TCP connection on the fabric (PATH_FABRIC): the object,
 * the hand-over that brings it there at accept and connect (the server's
 * hello, the client's proof and ring behind its header), and its state
 * after each call (fabric_conn.h; docs/architecture.md, "Built: the
 * connection paths").  The calls it carries are fabric_conn_calls.c's,
 * their sleeps fabric_conn_wait.c's, a server whose hello waits for its
 * first call fabric_conn_pending.c's, leaving fabric_conn_leave.c's; the
 * bytes' protocol is fabric_stream.c's, the proof of the peer
 * fabric_proof.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/fsize.h"
#include "base/log.h"
#include "base/pid_gone.h"
#include "base/real.h"
#include "base/self.h"
#include "base/settings.h"
#include "core/conn/fabric_conn_internal.h"
#include "core/conn/fabric_process.h"
#include "core/conn/sockstat.h"
#include "core/fd/uring_watch.h"
#include "core/process/sandbox.h"
#include "registry/hello.h"
#include "registry/synopt.h"
#include "transport/fabric_engine.h"

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

/* A socket of this process went on the fabric once: only then do fork,
 * exec and the rest look through the fd table for such sockets. */
atomic_bool fconn_any;

/* The stream's doorbell hook: a byte to the proven peer's socket. */
static void ring_peer(void *ctx)
{
    struct fabric_conn *c = ctx;
    if (c->peer_bell.sun_path[0])
        fabric_process_ring(&c->peer_bell);
}

/* The proven peer's process is gone (or a zombie). */
static bool peer_gone(void *ctx)
{
    struct fabric_conn *c = ctx;
    return c->peer_pid && pid_gone(c->peer_pid);
}

static void peer_proven(struct fabric_conn *c, const struct fabric_peer_id *id)
{
    c->peer_pid = id->pid;
    fabric_process_peer_bell(&c->peer_bell, id->pid, id->bell);
}

bool fabric_conn_wanted(void)
{
    return shunt_settings.fabric && shunt_settings.accel && !shunt_sandbox_refuses() && !uring_seen();
}

static size_t ring_bytes(void)
{
    size_t n = shunt_settings.ring_size;
    return n < FABRIC_RING_MIN ? FABRIC_RING_MIN : n > FABRIC_RING_MAX ? FABRIC_RING_MAX : n;
}

static struct fabric_conn *conn_new(struct tcp_sock *t, int fd, bool server)
{
    struct fabric_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    fabric_stream_init(&c->s, fd, NULL, NULL);
    c->s.ctx = c;
    c->s.on_bell = ring_peer;
    c->s.peer_gone = peer_gone;
    c->pid = shunt_pid;
    c->server = server;
    c->t = t;
    return c;
}

/* What `shunt stat` shows of a connection on the fabric, published once
 * this end attached: its lanes by transport ("sysv/memory,posix/memory"
 * is "sysv,posix"), the proven peer's process and its host (the boot tag
 * of the SYN's host for a server; a client's proven server is on its own
 * host). */
static void stat_fabric(struct fabric_conn *c)
{
    struct tcp_sock *t = c->t;
    char lanes[80] = "";
    fabric_ring_lanes(c->ring, lanes, sizeof lanes);
    size_t o = 0;
    for (const char *p = lanes; *p && o + 1 < sizeof t->stat.lanes;) {
        size_t n = strcspn(p, "/,");
        if (o && o + 1 < sizeof t->stat.lanes)
            t->stat.lanes[o++] = ',';
        for (size_t i = 0; i < n && o + 1 < sizeof t->stat.lanes; i++)
            t->stat.lanes[o++] = p[i];
        p += n;
        p += strcspn(p, ",");   /* past "/device" */
        if (*p == ',')
            p++;
    }
    t->stat.lanes[o] = 0;
    t->stat.peer_pid = c->peer_pid;
    t->stat.peer_boot = c->server ? c->hello_tag : c->s.hello_tag;
    sockstat_publish(t, c->s.fd, 0, 0, NULL, 0);
}

/* After the engine, a ring or a proof could not be had: whether the
 * process is at its fd limit (no fd for a copy of fd), so that the reason
 * says so (by design) rather than "fabric" (something failed). */
bool fconn_at_fd_limit(int fd)
{
    int d = shunt_real.fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0)
        return errno == EMFILE || errno == EINVAL;   /* (EINVAL: a limit of 0, at or below the lowest number) */
    shunt_real.close(d);
    return false;
}

/* After the engine or a ring could not be had: the reason when it is one
 * by design, else FB_FABRIC (something failed). */
enum fallback_reason fconn_unbuilt_reason(void)
{
    return fsize_limited() ? FB_FABRIC_FSIZE : fabric_process_fork_refused() ? FB_FABRIC_FORK_BUSY
           : fabric_process_no_room() && !fabric_process_has_engine() ? FB_FABRIC_NO_ROOM : FB_FABRIC;
}

/* The server's side of the hand-over: the client's proof and ring, behind
 * its header in ours.  0 attached, 1 refused (not proven: it goes back,
 * fabric_stream.h), -1 a proven peer whose nonce is not ours. */
static int server_takes_blob(void *ctx, const void *blob, size_t len)
{
    struct fabric_conn *c = ctx;
    char why[200] = "no proof";
    struct fabric_peer_id id;
    if (len <= FABRIC_PROOF_LEN || fabric_proof_check(blob, c->s.fd, &id, why, sizeof why) < 0) {
        /* (also a client that closed before this end looked: its bytes come all the same) */
        shunt_log_sock(LOG_INFO, c->t, c->s.fd, "fabric: the client is not proven (%s): its bytes come by TCP", why);
        return 1;
    }
    uint8_t nonce[FABRIC_RING_NONCE];
    if (fabric_ring_attach(c->ring, (const uint8_t *)blob + FABRIC_PROOF_LEN, len - FABRIC_PROOF_LEN, nonce, why,
                           sizeof why) < 0) {
        shunt_log_sock(LOG_WARN, c->t, c->s.fd, "fabric: cannot attach to the client's ring (%s): kernel TCP", why);
        return 1;
    }
    if (memcmp(nonce, c->nonce, sizeof nonce)) {
        shunt_log_sock(LOG_ERROR, c->t, c->s.fd, "fabric: the client's ring carries another nonce");
        return -1;
    }
    peer_proven(c, &id);
    c->attached = true;
    stat_fabric(c);
    return 0;
}

/* The client's side: the server's hello for this socket (taken off the
 * stream already).  Attaches to a proven server's ring and sets what
 * this end hands over; anything short of that leaves the socket on plain
 * TCP (the server attaches to nothing until it gets our ring). */
static int client_takes_hello(void *ctx, const struct hello *h)
{
    struct fabric_conn *c = ctx;
    char why[200] = "no proof";
    c->hello_seen = true;
    if (c->no_attach)
        return 0;
    if (c->s.back && !c->s.moved) {
        /* this end shut down before the hello came (it went by TCP): it
         * never moves, and a ring attached to would only keep the server
         * waiting for a header on the fabric's books (both ends stayed
         * there, neither saying why) */
        c->withdrew = true;
        return 0;
    }
    struct fabric_peer_id id;
    int proven = h->addr_len <= FABRIC_PROOF_LEN ? -EPROTO : fabric_proof_check(h->addr, c->s.fd, &id, why, sizeof why);
    if (proven < 0) {
        c->peer_closed = proven == -ENOENT;
        c->no_fd = proven == -EMFILE;
        /* (also a server that closed before this end looked) */
        shunt_log_sock(LOG_INFO, c->t, c->s.fd, "fabric: the server's hello is not proven (%s): kernel TCP", why);
        return 0;
    }
    struct fabric_engine *e = fabric_process_engine(why, sizeof why);
    struct fabric_ring *ring = NULL;
    if (!e || fabric_ring_open(e, ring_bytes(), &ring, why, sizeof why) < 0 ||
        fabric_ring_attach(ring, h->addr + FABRIC_PROOF_LEN, h->addr_len - FABRIC_PROOF_LEN, NULL, why,
                           sizeof why) < 0 ||
        fabric_proof_make(c->s.fd, fabric_process_bell_id(), c->hand) < 0) {
        shunt_log_sock(LOG_WARN, c->t, c->s.fd, "fabric: %s: kernel TCP", why);
        c->no_fd = fconn_at_fd_limit(c->s.fd);
        c->unbuilt = fconn_unbuilt_reason();
        if (ring)
            fabric_ring_close(ring);
        return 0;
    }
    ssize_t n = fabric_ring_blob(ring, h->nonce, c->hand + FABRIC_PROOF_LEN, sizeof c->hand - FABRIC_PROOF_LEN);
    if (n <= 0) {
        shunt_log_sock(LOG_WARN, c->t, c->s.fd, "fabric: this end's ring does not fit a hand-over: kernel TCP");
        fabric_ring_close(ring);
        return 0;
    }
    peer_proven(c, &id);
    c->ring = ring;
    c->s.ring = ring;
    c->s.engine = e;
    c->s.hand_blob = c->hand;
    c->s.hand_len = FABRIC_PROOF_LEN + (size_t)n;
    c->attached = true;
    stat_fabric(c);
    return 0;
}

/* Under the lock: the server's engine, ring and hello, from this process.
 * 0, or -errno with a line in why (nothing was sent). */
int fconn_send_hello(struct fabric_conn *c, int fd, char *why, size_t whylen)
{
    uint8_t blob[FABRIC_PROOF_LEN + FABRIC_RING_BLOB_MAX];
    int r = -EIO;
    struct fabric_engine *e = fabric_process_engine(why, whylen);
    ssize_t n = -1;
    c->pid = shunt_pid;
    if (e && fabric_ring_open(e, ring_bytes(), &c->ring, why, whylen) == 0 &&
        fabric_proof_make(fd, fabric_process_bell_id(), blob) == 0 &&
        getrandom(c->nonce, sizeof c->nonce, GRND_NONBLOCK) == (ssize_t)sizeof c->nonce)
        n = fabric_ring_blob(c->ring, NULL, blob + FABRIC_PROOF_LEN, sizeof blob - FABRIC_PROOF_LEN);
    if (n > 0) {
        c->s.ring = c->ring;
        c->s.engine = e;
        c->s.on_peer_blob = server_takes_blob;
        r = fabric_stream_hello(&c->s, c->hello_tag, c->hello_cookie, c->nonce, blob, FABRIC_PROOF_LEN + (size_t)n);
        if (r < 0)
            snprintf(why, whylen, "the hello could not be sent: %s", strerror(-r));
    } else if (!why[0]) {
        snprintf(why, whylen, "no ring to offer");
    }
    if (r < 0 && c->ring) {
        fabric_ring_close(c->ring);
        c->ring = NULL;
        c->s.ring = NULL;
    }
    return r;
}

int fabric_conn_accept(struct tcp_sock *t, int fd, uint32_t tag, uint64_t cookie)
{
    struct fabric_conn *c = conn_new(t, fd, true);
    if (!c)
        return -ENOMEM;
    c->hello_tag = tag;
    c->hello_cookie = cookie;
    c->accepted_by = shunt_pid;
    uint64_t key = 0;
    socklen_t kl = sizeof key;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_COOKIE, &key, &kl) == 0 && fabric_pending_open(&c->pend, key)) {
        /* the hello waits for the first call, in whichever process makes it */
        atomic_store(&c->pending, true);
    } else {
        char why[200] = "";
        fabric_process_lock();
        int r = fconn_send_hello(c, fd, why, sizeof why);
        fabric_process_unlock();
        if (r < 0) {
            shunt_log_sock(LOG_WARN, t, fd, "fabric: %s", why);
            free(c);
            return r;
        }
    }
    t->fab = c;
    atomic_store(&fconn_any, true);
    atomic_store(&t->reason, FB_NONE);
    atomic_store(&t->path, PATH_FABRIC);
    shunt_log_sock(LOG_INFO, t, fd, "fabric: %s a shunt client (cookie %llu)",
                   atomic_load(&c->pending) ? "the hello goes before the first byte to" : "hello sent to",
                   (unsigned long long)cookie);
    return 0;
}

bool fabric_conn_await(struct tcp_sock *t, int fd, enum fallback_reason otherwise)
{
    uint64_t cookie = 0;
    socklen_t cl = sizeof cookie;
    uint32_t tag = 0;
    struct fabric_conn *c = NULL;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_COOKIE, &cookie, &cl) < 0 || !cookie || synopt_boot_tag(&tag) < 0 ||
        !(c = conn_new(t, fd, false))) {
        fallback_record(t, fd, otherwise, false);
        return false;
    }
    c->otherwise = otherwise;
    c->s.await_hello = true;
    c->s.hello_tag = tag;
    c->s.hello_cookie = cookie & SYNOPT_COOKIE_MASK;
    c->s.on_hello = client_takes_hello;
    t->fab = c;
    atomic_store(&fconn_any, true);
    atomic_store(&t->reason, FB_NONE);
    atomic_store(&t->path, PATH_FABRIC);
    return true;
}

/* After each call on the stream, under fab_lock: an end attached moves at
 * once (the client right after its hello, the server once the client's
 * ring came), and a client whose hello settled without a ring is plain
 * TCP.  Returns whether t is still on the fabric. */
bool fconn_after_call(struct fabric_conn *c, int fd)
{
    struct tcp_sock *t = c->t;
    struct fabric_stream *s = &c->s;
    if (c->attached && !s->moved && !s->back && !s->broken && !s->left)
        (void)fabric_stream_move(s);
    if (!c->server && !s->await_hello && !c->ring) {
        /* no hello (a server without shunt), or one not taken */
        fallback_record(t, fd, !c->hello_seen ? c->otherwise : c->no_attach ? FB_FABRIC_LEFT
                               : c->withdrew ? FB_WITHDRAWN : c->peer_closed ? FB_FABRIC_GONE
                               : c->no_fd ? FB_FABRIC_NO_FD : c->unbuilt ? c->unbuilt : FB_FABRIC, false);
        sockstat_publish(t, fd, 0, 0, NULL, 0);
        return false;
    }
    if (c->server && !s->moved && !s->peer_moved && s->tcp_eof && !s->tcp_reset && !s->broken) {
        /* the client's end came by TCP before any header of its (a header
         * lands before any TCP byte sent after it, the FIN too): it never
         * moves (it shut down before its hello came), and this end, which
         * moves only once the client's ring came, never will either.  (Not
         * after a reset: the stream still owes the program its error.) */
        fallback_record(t, fd, FB_WITHDRAWN, false);
        sockstat_publish(t, fd, 0, 0, NULL, 0);
        return false;
    }
    if (!c->announced && s->moved && s->peer_moved) {
        c->announced = true;
        char lanes[80] = "";
        fabric_ring_lanes(c->ring, lanes, sizeof lanes);
        shunt_log_sock(LOG_INFO, t, fd, "accelerated (%s, fabric, lanes %s)", c->server ? "server" : "client", lanes);
    }
    return true;
}

/* A broken stream (garbage from the peer, a lane that failed): the
 * program sees a reset, and the peer too (the socket is shut down both
 * ways, once). */
int fconn_broken(struct fabric_conn *c, int fd)
{
    if (!c->reset_sent) {
        c->reset_sent = true;
        shunt_log_sock(LOG_ERROR, c->t, fd, "fabric: the stream broke (%s line %d): connection reset",
                       c->s.broken_file ? c->s.broken_file : "?", c->s.broken_line);
        shunt_real.shutdown(fd, SHUT_RDWR);
    }
    return -ECONNRESET;
}

struct fabric_conn *fconn_of(struct tcp_sock *t, int fd)
{
    struct fabric_conn *c = t->fab;
    c->s.fd = fd;   /* the number the program uses now (a dup may have replaced the first) */
    if (c->ring)
        fabric_ring_watch(c->ring, fd, c->peer_pid);
    return c;
}

/* The stream's state, for SHUNT_LOG=trace. */
void fconn_trace(struct fabric_conn *c, const char *what, ssize_t r)
{
    struct fabric_stream *s = &c->s;
    shunt_log_sock(LOG_TRACE, c->t, s->fd, "fabric %s: %zd (moved %d back %d fin %d sent %llu | peer moved %d back %d "
                   "tcp %llu of %llu, eof %d, await %d, refused %d/%d, left %d/%d)", what, r, s->moved, s->back, s->fin,
                   (unsigned long long)s->tcp_sent, s->peer_moved, s->peer_back, (unsigned long long)s->tcp_read,
                   (unsigned long long)s->peer_tcp, s->tcp_eof, s->await_hello, s->refused, s->peer_refused, s->left,
                   s->peer_left);
}

bool fabric_conn_accelerated(struct tcp_sock *t)
{
    struct fabric_conn *c = t->fab;
    if (!c || atomic_load(&t->path) != PATH_FABRIC)
        return false;
    fabric_process_lock();
    bool on = c->s.moved && c->s.peer_moved && !c->s.back && !c->s.peer_back && !c->s.broken && !c->s.left;
    fabric_process_unlock();
    return on;
}

void fabric_conn_forget(struct tcp_sock *t)
{
    atomic_store(&t->path, PATH_TCP);
    atomic_store(&t->reason, FB_NOT_NEGOTIATED);
    fallback_count_leave(t);
    fabric_conn_destroy(t);
}

void fabric_conn_destroy(struct tcp_sock *t)
{
    struct fabric_conn *c = t->fab;
    if (!c)
        return;
    fconn_pending_dropped(c);
    t->fab = NULL;
    if (c->pid == shunt_pid && c->ring) {
        fabric_process_lock();
        fabric_ring_close(c->ring);
        fabric_process_unlock();
    }
    free(c);
}
