/*
 * fabric_conn.c: a TCP connection on the fabric (PATH_FABRIC): the paths
 * of accept and connect that bring it there, the calls it carries, and
 * leaving it (fabric_conn.h; docs/architecture.md, "Built: the connection
 * paths").  The bytes' protocol is fabric_stream.c's, the proof of the
 * peer fabric_proof.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sockios.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/ioctl.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fsize.h"
#include "base/log.h"
#include "base/pid_gone.h"
#include "base/real.h"
#include "base/self.h"
#include "base/settings.h"
#include "base/signals.h"
#include "core/conn/deferred_close.h"
#include "core/conn/fabric_conn.h"
#include "core/conn/fabric_pending.h"
#include "core/conn/fabric_process.h"
#include "core/conn/fabric_proof.h"
#include "core/conn/fabric_stream.h"
#include "core/conn/fallback.h"
#include "core/conn/sockstat.h"
#include "core/conn/stream.h"
#include "core/fd/fdtable.h"
#include "core/fd/passthrough.h"
#include "core/fd/uring_watch.h"
#include "core/process/sandbox.h"
#include "core/wait/wait.h"
#include "registry/hello.h"
#include "registry/synopt.h"
#include "transport/fabric_engine.h"
#include "transport/fabric_ring.h"

#ifndef SO_COOKIE
#define SO_COOKIE 57
#endif

#define WAIT_MS 100            /* a sleep is re-checked this often (every wait is bounded) */
#define RELEASE_WAIT_NS (1000ull * 1000 * 1000)   /* a close pushes what is owed this long at most */

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

/* A socket of this process went on the fabric once: only then do fork,
 * exec and the rest look through the fd table for such sockets. */
static atomic_bool any_fabric;

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
static bool at_fd_limit(int fd)
{
    int d = shunt_real.fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0)
        return errno == EMFILE || errno == EINVAL;   /* (EINVAL: a limit of 0, at or below the lowest number) */
    shunt_real.close(d);
    return false;
}

/* After the engine or a ring could not be had: the reason when it is one
 * by design, else FB_FABRIC (something failed). */
static enum fallback_reason unbuilt_reason(void)
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
        c->no_fd = at_fd_limit(c->s.fd);
        c->unbuilt = unbuilt_reason();
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
static int send_hello(struct fabric_conn *c, int fd, char *why, size_t whylen)
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
        int r = send_hello(c, fd, why, sizeof why);
        fabric_process_unlock();
        if (r < 0) {
            shunt_log_sock(LOG_WARN, t, fd, "fabric: %s", why);
            free(c);
            return r;
        }
    }
    t->fab = c;
    atomic_store(&any_fabric, true);
    atomic_store(&t->reason, FB_NONE);
    atomic_store(&t->path, PATH_FABRIC);
    shunt_log_sock(LOG_INFO, t, fd, "fabric: %s a shunt client (cookie %llu)",
                   atomic_load(&c->pending) ? "the hello goes before the first byte to" : "hello sent to",
                   (unsigned long long)cookie);
    return 0;
}

/* A pending server's socket will never have a hello: kernel TCP for every
 * holder, with the reason.  False if another thread decided first. */
static bool no_hello(struct tcp_sock *t, int fd, enum fallback_reason why)
{
    struct fabric_conn *c = t->fab;
    if (!c || !atomic_exchange(&c->pending, false))
        return false;
    fabric_pending_none(&c->pend);
    fabric_pending_drop(&c->pend);
    fallback_record(t, fd, why, false);
    sockstat_publish(t, fd, 0, 0, NULL, 0);
    return true;
}

/* A pending server's hello, before its first byte to the client (not with
 * the lock): sent if this process holds the socket alone, otherwise never
 * (kernel TCP for every holder); the stream it starts has the client's
 * bytes the holders read already.  Whether t is still on the fabric. */
static bool settle_pending(struct tcp_sock *t, int fd)
{
    struct fabric_conn *c = t->fab;
    if (c && atomic_load(&c->pending)) {
        struct pollfd p = { .fd = fd, .events = POLLRDHUP };
        if (shunt_real.poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            /* the client shut down, or closed, before this first call: a
             * hello now might meet a closed socket, whose reset the program
             * would see where the kernel's TCP sends none */
            (void)no_hello(t, fd, FB_WITHDRAWN);
            return atomic_load(&t->path) == PATH_FABRIC;
        }
        if (c->accepted_by != shunt_pid && !shunt_settings.fabric_forked) {
            fabric_process_lock();
            bool own = fabric_process_has_engine();
            fabric_process_unlock();
            if (!own) {
                /* a forking server's child: an engine of its own for this one
                 * connection costs more than a short one gains */
                (void)no_hello(t, fd, FB_FABRIC_FORKED);
                return atomic_load(&t->path) == PATH_FABRIC;
            }
        }
        bool mine = fabric_pending_claim(&c->pend);
        char why[200] = "";
        int r = 0;
        fabric_process_lock();
        bool decided = atomic_exchange(&c->pending, false);
        if (decided) {
            c->s.fd = fd;
            c->s.tcp_read = fabric_pending_read(&c->pend);
            if (mine)
                r = send_hello(c, fd, why, sizeof why);
            else
                snprintf(why, sizeof why, "another process held the socket too");
            fabric_pending_drop(&c->pend);
        }
        fabric_process_unlock();
        if (decided && r == 0 && mine) {
            shunt_log_sock(LOG_INFO, t, fd, "fabric: hello sent to a shunt client (cookie %llu)",
                           (unsigned long long)c->hello_cookie);
        } else if (decided) {
            shunt_log_sock(LOG_INFO, t, fd, "fabric: no hello: %s", why);
            fallback_record(t, fd, !mine ? FB_FABRIC_SHARED : at_fd_limit(fd) ? FB_FABRIC_NO_FD : unbuilt_reason(),
                            false);
            sockstat_publish(t, fd, 0, 0, NULL, 0);
        }
    }
    return atomic_load(&t->path) == PATH_FABRIC;
}

static uint64_t timeout_deadline(int fd, int name);
static int wait_news(int fd, short events, int efd, bool socket_busy, bool nap, uint64_t deadline, unsigned ran,
                     unsigned norestart);

static bool pending(const struct tcp_sock *t)
{
    return t->fab && atomic_load(&t->fab->pending);
}

/* A pending server's readiness: the kernel's (no byte of the protocol
 * goes either way before the hello). */
static short pending_poll(int fd, short events)
{
    struct pollfd p = { .fd = fd, .events = events };
    return shunt_real.poll(&p, 1, 0) > 0 ? p.revents : 0;
}

/* A call that sleeps counts as waiting on the socket (call_sleep), so that
 * another thread's close of its last fd is put off until it returns, as the
 * kernel's file outlives the fd (deferred_close.c); from such a close on,
 * the call goes on through shunt's private copy of the socket, never
 * through the number, which the program may have reused already. */
static void follow_close(struct tcp_sock *t, struct fdref *f)
{
    if (f->blocked)
        f->fd = tcp_call_fd(t, f->fd);
}

/* wait_news for a call (counted first), which a close by another thread
 * between its last look and the poll does not end: the number is gone
 * (POLLNVAL), the copy goes on (0: look again). */
static int call_sleep(struct tcp_sock *t, struct fdref *f, short events, int efd, bool socket_busy, bool nap,
                      uint64_t deadline, unsigned ran, unsigned norestart)
{
    wait_call_blocks(t, &f->blocked);
    int w = wait_news(f->fd, events, efd, socket_busy, nap, deadline, ran, norestart);
    if (w == -EBADF && tcp_call_fd(t, f->fd) != f->fd) {
        follow_close(t, f);
        return 0;
    }
    return w;
}

/* A pending server's receive: the client's bytes before the hello are all
 * the program's, the kernel's to give, counted for the stream the hello
 * will start (fabric_pending.h); driven without blocking under the lock,
 * so that a hello sent meanwhile by another thread counts them all.
 * *gone: the hello went meanwhile (after the bytes returned, if any): the
 * caller goes the fabric's way. */
static ssize_t pending_recv(struct tcp_sock *t, struct fdref *f, struct io_call *call, int flags, bool *gone)
{
    struct fabric_conn *c = t->fab;
    struct iobuf b;
    int e = iobuf_from_call(&b, call);
    if (e < 0)
        return e;
    bool peek = flags & MSG_PEEK, waitall = (flags & MSG_WAITALL) && !peek;
    bool nb = stream_nonblocking(t, f->fd, flags);
    unsigned ran = shunt_sig_ran, norestart = shunt_sig_ran_norestart;
    uint64_t deadline = 0;
    bool timed = false;
    size_t got = 0;
    *gone = false;
    for (;;) {
        struct iovec rest[IOV_MAX];
        struct msghdr mh = { .msg_iov = rest, .msg_iovlen = (size_t)iobuf_rest(&b, got, rest) };
        follow_close(t, f);
        fabric_process_lock();
        if (!atomic_load(&c->pending)) {
            fabric_process_unlock();
            *gone = true;
            return (ssize_t)got;
        }
        ssize_t k = shunt_real.recvmsg(f->fd, &mh, (peek ? MSG_PEEK : 0) | MSG_DONTWAIT);
        int err = errno;
        if (k > 0 && !peek)
            fabric_pending_count_read(&c->pend, (uint64_t)k);
        fabric_process_unlock();
        if (k > 0) {
            got += (size_t)k;
            if (!waitall || got == b.total)
                return (ssize_t)got;
            continue;
        }
        if (k == 0)
            return (ssize_t)got;
        if (err != EAGAIN && err != EWOULDBLOCK)
            return got ? (ssize_t)got : -err;
        if (nb)
            return got ? (ssize_t)got : -EAGAIN;
        if (!timed) {
            timed = true;
            deadline = timeout_deadline(f->fd, SO_RCVTIMEO);
        }
        int w = call_sleep(t, f, POLLIN | POLLRDHUP, -1, false, false, deadline, ran, norestart);   /* the socket alone */
        if (w < 0)
            return got ? (ssize_t)got : w;
    }
}

/* A pending server's socket before a call the fabric does not carry:
 * kernel TCP for every holder.  Whether it was pending. */
static bool pending_to_tcp(struct tcp_sock *t, int fd, const char *why)
{
    if (!no_hello(t, fd, FB_FABRIC_LEFT))
        return false;
    shunt_log_sock(LOG_INFO, t, fd, "fabric: no hello, before %s", why);
    return true;
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
    atomic_store(&any_fabric, true);
    atomic_store(&t->reason, FB_NONE);
    atomic_store(&t->path, PATH_FABRIC);
    return true;
}

/* After each call on the stream, under fab_lock: an end attached moves at
 * once (the client right after its hello, the server once the client's
 * ring came), and a client whose hello settled without a ring is plain
 * TCP.  Returns whether t is still on the fabric. */
static bool after_call(struct fabric_conn *c, int fd)
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
static int broken_conn(struct fabric_conn *c, int fd)
{
    if (!c->reset_sent) {
        c->reset_sent = true;
        shunt_log_sock(LOG_ERROR, c->t, fd, "fabric: the stream broke (fabric_stream.c line %d): connection reset",
                       c->s.broken_line);
        shunt_real.shutdown(fd, SHUT_RDWR);
    }
    return -ECONNRESET;
}

static struct fabric_conn *conn_of(struct tcp_sock *t, int fd)
{
    struct fabric_conn *c = t->fab;
    c->s.fd = fd;   /* the number the program uses now (a dup may have replaced the first) */
    if (c->ring)
        fabric_ring_watch(c->ring, fd, c->peer_pid);
    return c;
}

/* The stream's state, for SHUNT_LOG=trace. */
static void trace(struct fabric_conn *c, const char *what, ssize_t r)
{
    struct fabric_stream *s = &c->s;
    shunt_log_sock(LOG_TRACE, c->t, s->fd, "fabric %s: %zd (moved %d back %d fin %d sent %llu | peer moved %d back %d "
                   "tcp %llu of %llu, eof %d, await %d, refused %d/%d, left %d/%d)", what, r, s->moved, s->back, s->fin,
                   (unsigned long long)s->tcp_sent, s->peer_moved, s->peer_back, (unsigned long long)s->tcp_read,
                   (unsigned long long)s->peer_tcp, s->tcp_eof, s->await_hello, s->refused, s->peer_refused, s->left,
                   s->peer_left);
}

/* Sleeps until the socket (events; not while socket_busy: it stays ready
 * without news for the stream) or the engine (efd, -1: none) has news, the
 * deadline (0: none) or WAIT_MS (1 ms for a nap: busy, or engine events
 * pending).  Not with fab_lock.  1 the socket was ready, 0,
 * -EINTR (a handler ran that ends the call), -EAGAIN (the deadline
 * passed), -EBADF. */
static int wait_news(int fd, short events, int efd, bool socket_busy, bool nap, uint64_t deadline, unsigned ran,
                     unsigned norestart)
{
    /* a handler that ran in this call outside the poll (deferred to the end
     * of the process lock's section, say) ends it as one during the poll
     * would: the poll itself would sleep through it (eintr_first_sleep,
     * fabric-tcp, in CI) */
    if (shunt_sig_ran != ran && signal_interrupts(ran, norestart, deadline != 0) < 0)
        return -EINTR;
    struct pollfd p[2] = { { .fd = socket_busy ? -1 : fd, .events = events }, { .fd = efd, .events = POLLIN } };
    int tmo = socket_busy || nap ? 1 : WAIT_MS;
    if (deadline) {
        uint64_t now = clock_now_ns();
        if (now >= deadline)
            return -EAGAIN;
        uint64_t left_ms = (deadline - now + 999999) / 1000000;
        if (left_ms < (uint64_t)tmo)
            tmo = (int)left_ms;
    }
    int r = shunt_real.poll(p, 2, tmo);
    if (r < 0 && errno == EINTR)
        return signal_interrupts(ran, norestart, deadline != 0) ? -EINTR : 0;
    if (r > 0 && (p[0].revents & POLLNVAL))
        return -EBADF;
    return r > 0 && p[0].revents ? 1 : 0;
}

/* The socket's SO_RCVTIMEO or SO_SNDTIMEO as a deadline from now (0: none). */
static uint64_t timeout_deadline(int fd, int name)
{
    struct timeval tv = { 0, 0 };
    socklen_t len = sizeof tv;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, name, &tv, &len) < 0 || (tv.tv_sec == 0 && tv.tv_usec == 0))
        return 0;
    return clock_now_ns() + (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull;
}

/* The engine's fd armed for a sleep, under the lock: -2 when its events
 * are pending (driven here: look again), -1 without an engine. */
static int armed_efd(struct fabric_conn *c)
{
    struct fabric_engine *e = c->s.engine;
    if (!e)
        return -1;
    if (!fabric_engine_arm(e)) {
        fabric_engine_progress(e);
        return -2;
    }
    return fabric_process_wake_fd();
}

/* Under the lock, before a sleep: the doorbells that came taken out (one
 * that comes after rings the sleep), the stream says it sleeps (its
 * answer now), and the fd to sleep on (armed_efd's). */
static short prepare_sleep(struct fabric_conn *c, int *efd)
{
    fabric_process_drain_bells();
    short rev = fabric_stream_before_sleep(&c->s);
    *efd = armed_efd(c);
    return rev;
}

/* Before a blocking receive sleeps: polls this end's ring for up to
 * SHUNT_SPIN_US (where spinning may pay: two CPUs or more), as the
 * channel's waits do; a peer on another CPU usually answers sooner than a
 * doorbell and a wake-up would take (the wake through the process's
 * doorbell made a 1-byte ping-pong between namespaces slower than kernel
 * TCP over the veth).  True as soon as the ring has bytes, or news. */
static bool spin_for_bytes(struct fabric_conn *c)
{
    if (!wait_may_spin())
        return false;
    uint64_t until = clock_now_ns() + (uint64_t)shunt_settings.spin_us * 1000;
    do {
        fabric_process_lock();
        int64_t n = c->ring && c->s.moved && c->s.peer_moved && !c->s.peer_back && !c->s.broken
                        ? fabric_ring_readable(c->ring) : -1;
        fabric_process_unlock();
        if (n != 0)
            return n > 0;   /* bytes; or no ring phase to spin on (-1): sleep */
        for (int k = 0; k < 64; k++)
            wait_cpu_relax();
    } while (clock_now_ns() < until);
    return false;
}

/* A call the fabric path does not carry: leave first, then the kernel's. */
static bool not_carried_recv(struct io_call *call, int flags)
{
    return (flags & ~(MSG_PEEK | MSG_DONTWAIT | MSG_WAITALL | MSG_NOSIGNAL | MSG_CMSG_CLOEXEC)) ||
           (call->kind == IO_RECVMSG && call->msg->msg_controllen > 0);
}

static ssize_t conn_recv(struct tcp_sock *t, struct fdref *f, struct io_call *call)
{
    int flags = call->kind == IO_READ || call->kind == IO_READV ? 0 : call->flags;
    if (not_carried_recv(call, flags)) {
        fabric_conn_leave(t, f->fd, "a receive with flags or ancillary data");
        if (atomic_load(&t->path) != PATH_FABRIC)
            return pt_recv(f, call);
    }
    struct iobuf b;
    int r = iobuf_from_call(&b, call);
    if (r < 0)
        return r;
    if (call->kind == IO_RECVFROM && call->addrlen)
        *call->addrlen = 0;
    if (call->kind == IO_RECVMSG) {
        call->msg->msg_flags = 0;
        call->msg->msg_controllen = 0;
        call->msg->msg_namelen = 0;
    }
    if (b.total == 0 && (call->kind == IO_READ || call->kind == IO_READV))
        return 0;
    /* recv(2) of nothing waits for bytes (EAGAIN if it may not), then
     * answers 0 leaving them: a peek at one byte stands in for it */
    char one;
    bool zero = b.total == 0;
    bool peek = (flags & MSG_PEEK) || zero, waitall = (flags & MSG_WAITALL) && !peek;
    size_t got = 0;
    if (pending(t)) {
        bool gone = false;
        ssize_t pr = pending_recv(t, f, call, flags, &gone);
        if (!gone || (pr > 0 && !waitall))
            return pr;
        got = (size_t)pr;   /* the hello went: a MSG_WAITALL goes on on the fabric */
    }
    if (atomic_load(&t->path) != PATH_FABRIC)
        return got ? iobuf_recv_rest_kernel(f->fd, &b, got, flags) : pt_recv(f, call);
    bool nb = stream_nonblocking(t, f->fd, flags);
    unsigned ran = shunt_sig_ran, norestart = shunt_sig_ran_norestart;
    uint64_t deadline = 0;
    bool timed = false, socket_busy = false, spun = false;
    unsigned quick = 0;   /* looks in a row the socket woke, which found nothing */
    for (;;) {
        struct iovec rest[IOV_MAX];
        int n = zero ? 1 : iobuf_rest(&b, got, rest);
        if (zero)
            rest[0] = (struct iovec){ &one, 1 };
        follow_close(t, f);
        fabric_process_lock();
        struct fabric_conn *c = conn_of(t, f->fd);
        ssize_t k = fabric_stream_recv(&c->s, rest, n, peek, true);
        trace(c, "recv", k);
        short rev = 0;
        int efd = -1;
        if (k == -EAGAIN && !nb && spun) {
            rev = prepare_sleep(c, &efd);
        }
        bool on = after_call(c, f->fd);
        bool broke = c->s.broken;
        bool ringless = !c->ring;   /* (awaiting its hello, or never attached: the socket brings all news) */
        fabric_process_unlock();
        if (k == -EIO || broke)
            return got ? (ssize_t)got : broken_conn(c, f->fd);
        if (!on && k == -EAGAIN) {   /* plain TCP now: the kernel's, for the rest */
            if (got)
                return waitall ? iobuf_recv_rest_kernel(f->fd, &b, got, flags) : (ssize_t)got;
            return pt_recv(f, call);
        }
        if (k > 0 && zero)
            return 0;
        if (k > 0) {
            got += (size_t)k;
            socket_busy = false;
            quick = 0;
            if (!waitall || got == b.total)
                return (ssize_t)got;
            continue;
        }
        if (k == 0 || k != -EAGAIN)
            return got ? (ssize_t)got : k;
        if (nb)
            return got ? (ssize_t)got : -EAGAIN;
        if (!spun) {
            /* once a call, before it says it sleeps (a peer that sees it
             * rings at every write): then the sleep */
            spun = true;
            (void)spin_for_bytes(c);
            continue;
        }
        if ((rev & POLLIN) || efd == -2) {
            if (++quick < 3)
                continue;         /* look again at once */
            socket_busy = true;   /* readable, but not the program's bytes yet: naps */
        }
        if (!timed) {
            timed = true;
            deadline = timeout_deadline(f->fd, SO_RCVTIMEO);
        }
        int w = call_sleep(t, f, POLLIN | POLLRDHUP, efd < 0 ? -1 : efd, socket_busy, efd < 0 && !ringless,
                          deadline, ran, norestart);
        if (w < 0)
            return got ? (ssize_t)got : w;
        if (w == 1 && ++quick >= 3)
            socket_busy = true;
    }
}

static ssize_t conn_send(struct tcp_sock *t, struct fdref *f, struct io_call *call)
{
    int flags = call->kind == IO_WRITE || call->kind == IO_WRITEV ? 0 : call->flags;
    if ((flags & ~(MSG_DONTWAIT | MSG_NOSIGNAL | MSG_MORE | MSG_EOR)) ||
        (call->kind == IO_SENDMSG && call->msg->msg_controllen > 0)) {
        fabric_conn_leave(t, f->fd, "a send with flags or ancillary data");
        if (atomic_load(&t->path) != PATH_FABRIC)
            return pt_send(f, call);
    }
    struct iobuf b;
    int r = iobuf_from_call(&b, call);
    if (r < 0)
        return r;
    if (b.total == 0)
        return 0;
    if (!settle_pending(t, f->fd))
        return pt_send(f, call);
    bool nb = stream_nonblocking(t, f->fd, flags);
    unsigned ran = shunt_sig_ran, norestart = shunt_sig_ran_norestart;
    uint64_t deadline = 0;
    bool timed = false;
    size_t done = 0;
    for (;;) {
        struct iovec rest[IOV_MAX];
        int n = iobuf_rest(&b, done, rest);
        follow_close(t, f);
        fabric_process_lock();
        struct fabric_conn *c = conn_of(t, f->fd);
        if (!done && !c->server && !c->ring && c->no_attach) {
            /* a client that will never attach (it left awaiting its hello:
             * a fork, a call the fabric does not carry): what it sends is
             * the kernel's to send, as one call (two processes writing
             * records after a fork must not see them split by a send
             * driven in pieces) */
            fabric_process_unlock();
            return pt_send(f, call);
        }
        ssize_t k = fabric_stream_send(&c->s, rest, n, true);
        trace(c, "send", k);
        short rev = 0;
        int efd = -1;
        if (k == -EAGAIN && !nb) {
            rev = prepare_sleep(c, &efd);
        }
        bool on = after_call(c, f->fd);
        bool broke = c->s.broken;
        bool on_ring = c->s.moved && !c->s.back && !c->s.tcp_full;   /* (else room comes on the socket) */
        bool ringless = !c->ring;
        fabric_process_unlock();
        if (k == -EIO || broke)
            return done ? (ssize_t)done : broken_conn(c, f->fd);
        if (k > 0) {
            done += (size_t)k;
            if (nb || done == b.total)
                return (ssize_t)done;
            continue;
        }
        if (!on && k == -EAGAIN) {
            if (done)
                return (ssize_t)done;
            return pt_send(f, call);
        }
        if (k == -EPIPE && !(flags & MSG_NOSIGNAL) && !done)
            raise(SIGPIPE);   /* as the kernel's send would */
        if (k != -EAGAIN)
            return done ? (ssize_t)done : k;
        if (nb)
            return done ? (ssize_t)done : -EAGAIN;
        if ((rev & POLLOUT) || efd == -2)
            continue;
        if (!timed) {
            timed = true;
            deadline = timeout_deadline(f->fd, SO_SNDTIMEO);
        }
        /* room comes with the reader's doorbell; the socket tells of the
         * peer's end (and, while the bytes still go by TCP, of room) */
        int w = call_sleep(t, f, (on_ring ? 0 : POLLOUT) | POLLRDHUP, efd < 0 ? -1 : efd, false,
                          efd < 0 && !ringless, deadline, ran, norestart);
        if (w < 0)
            return done ? (ssize_t)done : w;
    }
}

ssize_t fabric_conn_recv(struct tcp_sock *t, struct fdref *f, struct io_call *call)
{
    ssize_t r = conn_recv(t, f, call);
    if (f->blocked)
        deferred_close_call_done(t, f);   /* a close put off for it is finished now */
    return r;
}

ssize_t fabric_conn_send(struct tcp_sock *t, struct fdref *f, struct io_call *call)
{
    ssize_t r = conn_send(t, f, call);
    if (f->blocked)
        deferred_close_call_done(t, f);
    return r;
}

int fabric_conn_before_kernel_read(struct tcp_sock *t, struct fdref *f)
{
    bool nb = stream_nonblocking(t, f->fd, 0);
    unsigned ran = shunt_sig_ran, norestart = shunt_sig_ran_norestart;
    uint64_t deadline = 0;
    bool timed = false;
    for (;;) {
        if (atomic_load(&t->path) != PATH_FABRIC || !t->fab || pending(t))
            return 0;
        follow_close(t, f);
        fabric_process_lock();
        struct fabric_conn *c = conn_of(t, f->fd);
        if (c->s.await_hello)
            (void)fabric_stream_poll(&c->s);   /* the first bytes settled, once they are there */
        bool awaiting = c->s.await_hello;
        bool partial = awaiting && c->s.hello_partial_since;
        fabric_process_unlock();
        if (!awaiting)
            return 0;
        if (nb)
            return -EAGAIN;
        if (!timed) {
            timed = true;
            deadline = timeout_deadline(f->fd, SO_RCVTIMEO);
        }
        /* a prefix of a hello keeps the socket readable: nap */
        int w = call_sleep(t, f, POLLIN | POLLRDHUP, -1, partial, true, deadline, ran, norestart);
        if (w < 0)
            return w;
    }
}

/* shutdown(SHUT_RD or SHUT_RDWR) of a client still awaiting its hello: the
 * kernel's shutdown at once, as the program asked (it wakes every sleeper
 * on the socket, in every process, and the socket reports its end), and a
 * hello that comes later is taken off, never attached to: the connection is
 * kernel TCP's.  A leave first waited 200 ms for a hello that a server
 * sends only before its first byte, then wrote the client's FIN instead:
 * the peer saw an EOF nobody sent, and a recv asleep on the socket stayed
 * asleep (shutdown_rd, threads_shutdown_blocked). */
static bool shut_reading_awaiting(struct tcp_sock *t, struct fdref *f, int how, int *r)
{
    fabric_process_lock();
    struct fabric_conn *c = conn_of(t, f->fd);
    bool awaiting = !c->server && !c->ring && c->s.await_hello;
    if (awaiting) {
        c->no_attach = true;
        c->s.rd_shut = true;
        if (how == SHUT_RDWR) {
            (void)fabric_stream_return(&c->s);   /* never moved: TCP's for good */
            c->s.fin = true;                      /* both ways shut: POLLHUP */
        }
    }
    fabric_process_unlock();
    if (awaiting)
        *r = pt_shutdown(f, how);
    return awaiting;
}

int fabric_conn_shutdown(struct tcp_sock *t, struct fdref *f, int how)
{
    int sr;
    if (how != SHUT_WR && !pending(t) && shut_reading_awaiting(t, f, how, &sr))
        return sr;
    if (how != SHUT_WR) {
        /* the reading side's shutdown is the kernel's: leave first */
        fabric_conn_leave(t, f->fd, "shutdown of the reading side");
        if (atomic_load(&t->path) != PATH_FABRIC)
            return pt_shutdown(f, how);
    }
    if (!settle_pending(t, f->fd))
        return pt_shutdown(f, how);
    fabric_process_lock();
    struct fabric_conn *c = conn_of(t, f->fd);
    int r = fabric_stream_shutdown(&c->s);
    if (r == -ENOTCONN && fabric_stream_return(&c->s) == 0)
        r = fabric_stream_shutdown(&c->s);   /* nothing to move onto yet: this direction is TCP's for good */
    after_call(c, f->fd);
    fabric_process_unlock();
    if (r == -EIO)
        return broken_conn(c, f->fd);
    return r;
}

short fabric_conn_poll(struct tcp_sock *t, int fd, short events)
{
    if (pending(t))
        return pending_poll(fd, events);
    bool on = atomic_load(&t->path) == PATH_FABRIC;
    short rev = 0;
    if (on) {
        fabric_process_lock();
        struct fabric_conn *c = conn_of(t, fd);
        rev = fabric_stream_poll(&c->s);
        trace(c, "poll", rev);
        on = after_call(c, fd);
        fabric_process_unlock();
    }
    if (!on) {
        struct pollfd p = { .fd = fd, .events = events };
        return shunt_real.poll(&p, 1, 0) > 0 ? p.revents : 0;
    }
    if (rev & POLLERR)
        return (short)((events & (POLLIN | POLLRDNORM | POLLOUT | POLLWRNORM)) | POLLERR | POLLHUP);
    rev |= (rev & POLLIN ? POLLRDNORM : 0) | (rev & POLLOUT ? POLLWRNORM : 0);   /* as the kernel's */
    return (short)(rev & (events | POLLHUP | POLLERR));
}

short fabric_conn_before_sleep(struct tcp_sock *t, int fd, short events, int *efd, short *sock_events)
{
    if (pending(t)) {   /* the kernel's: sleep on the socket for what is asked */
        *efd = FABRIC_SOCKET_ONLY;
        *sock_events = events;
        return pending_poll(fd, events);
    }
    if (atomic_load(&t->path) != PATH_FABRIC) {
        *efd = -1;
        *sock_events = events;
        return (short)(events | POLLIN);   /* look again at once: the kernel's answer */
    }
    fabric_process_lock();
    struct fabric_conn *c = conn_of(t, fd);
    int e;
    short rev = prepare_sleep(c, &e);
    *sock_events = POLLIN | POLLRDHUP;
    if ((events & POLLOUT) && (!c->s.moved || c->s.back || c->s.tcp_full))
        *sock_events |= POLLOUT;
    bool on = after_call(c, fd);
    fabric_process_unlock();
    *efd = e >= 0 ? e : -1;
    if (!on || e == -2)
        return (short)(events | POLLIN);   /* look again at once (answered then by the kernel, or again here) */
    return (short)(rev & (events | POLLHUP | POLLERR));
}

void fabric_conn_edge(struct tcp_sock *t, uint64_t *rx, uint64_t *tx, bool *end)
{
    struct fabric_conn *c = t->fab;
    if (pending(t)) {   /* the kernel's counts, until the hello */
        int queued = 0;
        if (shunt_real.ioctl(c->s.fd, FIONREAD, &queued) < 0)
            queued = 0;
        *rx = fabric_pending_read(&c->pend) + (uint64_t)queued;   /* moves as bytes come */
        *tx = 0;   /* nothing is sent before the hello */
        *end = (pending_poll(c->s.fd, POLLRDHUP) & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
        return;
    }
    fabric_process_lock();
    *rx = c->s.tcp_read + (c->ring ? fabric_ring_peer_written(c->ring) : 0);
    /* (+1 once the socket's room freed the ring after a move when full by TCP) */
    *tx = c->s.tcp_sent + (c->ring ? fabric_ring_peer_consumed(c->ring) : 0) + !fabric_stream_held(&c->s);
    *end = c->s.tcp_eof || c->s.peer_back;
    fabric_process_unlock();
}

int fabric_conn_queue(struct tcp_sock *t, int fd, unsigned long req, int *v)
{
    if (atomic_load(&t->path) != PATH_FABRIC || !t->fab)
        return -1;
    if (pending(t))   /* until the hello, every byte either way is the program's */
        return shunt_real.ioctl(fd, req, v) < 0 ? -1 : 0;
    fabric_process_lock();
    struct fabric_conn *c = conn_of(t, fd);
    int64_t q = req == SIOCOUTQ ? fabric_stream_unread_by_peer(&c->s) : fabric_stream_readable(&c->s);
    bool on = after_call(c, fd);
    fabric_process_unlock();
    if (q < 0 || !on)
        return -1;
    *v = q > INT_MAX ? INT_MAX : (int)q;
    return 0;
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

/* Under fab_lock: c leaves; true when it is plain TCP now. */
static bool leave_locked(struct fabric_conn *c, int fd, bool exec)
{
    struct fabric_stream *s = &c->s;
    if (!c->ring) {
        /* a client still awaiting its hello: it is taken off when it
         * comes, never attached to; before an exec (this memory goes) at
         * most HELLO_HOLD_NS is given to it */
        c->no_attach = true;
        if (!exec)
            return false;
        uint64_t until = clock_now_ns() + HELLO_HOLD_NS;
        while (s->await_hello && clock_now_ns() < until) {
            (void)fabric_stream_poll(s);   /* settles the first bytes once they are there */
            struct pollfd p = { .fd = fd, .events = POLLIN };
            if (s->await_hello)
                shunt_real.poll(&p, 1, 1);
        }
        return !s->await_hello;
    }
    int r = fabric_stream_leave(s);
    if (r == -EAGAIN || r == -ENOTCONN)
        return false;
    if (r < 0)
        (void)broken_conn(c, fd);
    /* what the peer is owed by TCP goes now, bounded: nothing of this
     * process will carry it after this call */
    uint64_t until = clock_now_ns() + RELEASE_WAIT_NS;
    while (fabric_stream_settle(s, false) == -EAGAIN && clock_now_ns() < until) {
        struct pollfd p = { .fd = fd, .events = 0 };
        shunt_real.poll(&p, 1, 1);
    }
    return true;
}

static void leave(struct tcp_sock *t, int fd, const char *why, bool exec)
{
    if (atomic_load(&t->path) != PATH_FABRIC || pending_to_tcp(t, fd, why))
        return;
    fabric_process_lock();
    struct fabric_conn *c = conn_of(t, fd);
    bool gone = leave_locked(c, fd, exec);
    bool tcp = gone || !after_call(c, fd);
    fabric_process_unlock();
    if (gone && atomic_load(&t->path) == PATH_FABRIC) {
        shunt_log_sock(LOG_INFO, t, fd, "fabric: left for kernel TCP before %s", why);
        fallback_record(t, fd, FB_FABRIC_LEFT, false);
        sockstat_publish(t, fd, 0, 0, NULL, 0);
    } else if (!tcp) {
        shunt_log_sock(LOG_DEBUG, t, fd, "fabric: before %s: its hello, if one comes, is taken off, not attached", why);
    }
}

void fabric_conn_leave(struct tcp_sock *t, int fd, const char *why)
{
    leave(t, fd, why, true);   /* the call goes to the kernel: a hello must not be left for it */
}

void fabric_conn_leave_no_wait(struct tcp_sock *t, int fd, const char *why)
{
    leave(t, fd, why, false);
}

struct leave_all {
    const char *why;
    bool exec;
    bool fork;      /* a fork: pending hellos stay pending, the child a holder too */
    pid_t child;    /* after the fork: the child's pid, 0 in the child, < 0 none */
    bool after;
};

static void leave_fd(int fd, void *ctx)
{
    struct leave_all *a = ctx;
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->kind == SOCK_TCP && atomic_load(&tcp_of(f.sock)->path) == PATH_FABRIC) {
        struct tcp_sock *t = tcp_of(f.sock);
        struct fabric_conn *c = t->fab;
        if (a->fork && c && atomic_load(&c->pending)) {
            if (a->after)
                fabric_pending_after_fork(&c->pend, a->child);
            else
                fabric_pending_before_fork(&c->pend);
        } else if (!a->after) {
            leave(t, fd, a->why, a->exec);
        }
    }
    fdt_put(&f);
}

void fabric_conn_leave_all(const char *why, bool exec)
{
    if (!atomic_load_explicit(&any_fabric, memory_order_relaxed))
        return;
    struct leave_all a = { .why = why, .exec = exec };
    fdt_for_each_object(0, ~0U, leave_fd, &a);
}

void fabric_conn_before_fork(void)
{
    if (!atomic_load_explicit(&any_fabric, memory_order_relaxed))
        return;
    struct leave_all a = { .why = "fork", .fork = true };
    fdt_for_each_object(0, ~0U, leave_fd, &a);
}

void fabric_conn_after_fork(pid_t pid)
{
    if (!atomic_load_explicit(&any_fabric, memory_order_relaxed))
        return;
    struct leave_all a = { .why = "fork", .fork = true, .child = pid, .after = true };
    fdt_for_each_object(0, ~0U, leave_fd, &a);
}

void fabric_conn_leave_fds(const int *fds, size_t n, const char *why)
{
    if (!atomic_load_explicit(&any_fabric, memory_order_relaxed))
        return;
    struct leave_all a = { .why = why, .exec = true };   /* the receiver cannot take a hello off */
    for (size_t i = 0; i < n; i++)
        leave_fd(fds[i], &a);
}

/* This process holds a pending server's socket no more. */
static void pending_dropped(struct fabric_conn *c)
{
    if (c && atomic_exchange(&c->pending, false))
        fabric_pending_drop(&c->pend);
}

void fabric_conn_release(struct tcp_sock *t, int fd)
{
    pending_dropped(t->fab);
    if (atomic_load(&t->path) != PATH_FABRIC || !t->fab || t->fab->pid != shunt_pid)
        return;
    fabric_process_lock();
    struct fabric_conn *c = conn_of(t, fd);
    if (!c->server && !c->ring && c->s.await_hello) {
        /* a hello that came is taken off (never attached to): left unread
         * in the socket, it would turn the close's FIN into a reset the
         * kernel's close would not send (poll_errors saw POLLERR where
         * the kernel shows POLLRDHUP|POLLHUP) */
        c->no_attach = true;
        (void)fabric_stream_poll(&c->s);
    }
    uint64_t until = clock_now_ns() + RELEASE_WAIT_NS;
    while (!c->s.broken && fabric_stream_settle(&c->s, false) == -EAGAIN && clock_now_ns() < until) {
        struct pollfd p = { .fd = fd, .events = 0 };
        shunt_real.poll(&p, 1, 1);
    }
    if (c->ring && c->s.moved && !c->s.broken)
        (void)fabric_ring_flush(c->ring);
    fabric_process_unlock();
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
    pending_dropped(c);
    t->fab = NULL;
    if (c->pid == shunt_pid && c->ring) {
        fabric_process_lock();
        fabric_ring_close(c->ring);
        fabric_process_unlock();
    }
    free(c);
}
