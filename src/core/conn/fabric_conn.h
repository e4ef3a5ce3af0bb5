/*
 * fabric_conn.h: a TCP connection on the fabric (PATH_FABRIC, issue 19):
 * how a connection reaches the fabric stream at accept and connect, the
 * calls it carries, and leaving it for kernel TCP before anything else
 * (docs/architecture.md, "Built: the connection paths").
 *
 *   accept   a SYN that says the client process runs shunt and whose
 *            offer is out of the rings' reach: the engine (once per
 *            process), a ring, and the hello before the program has the
 *            fd (it names the client's socket, carries a nonce and this
 *            end's proof and ring);
 *   connect  a socket marked as a shunt process's awaits the hello: its
 *            first bytes are settled before any read or readiness answer;
 *            a hello for it, from a proven process, opens the engine and
 *            attaches, and the client moves, handing its own proof and
 *            ring over behind its header; anything else is the program's,
 *            and the socket is plain kernel TCP from then on;
 *   carried  recv and send (their vector and message forms without
 *            ancillary data or MSG_OOB), shutdown, poll, select and epoll
 *            (the process's wake fd joins the kernel's set), close (what is
 *            owed is pushed, bounded);
 *            A server's hello goes before its first byte to the client, from
 *            the process that sends it if it holds the socket alone
 *            (fabric_pending.h): a forking server's child meets the client;
 *            until then its socket is the kernel's (reads counted);
 *   left     everything else first makes the connection leave the fabric
 *            (fabric_conn_leave: it waits only for a hello still to come,
 *            at most HELLO_HOLD_NS), after which it is
 *            plain kernel TCP, losing nothing: fork, exec, posix_spawn,
 *            SCM_RIGHTS, sendfile and splice, ioctl,
 *            stdio, io_uring, a seccomp sandbox.
 *
 * One lock for every stream and the engine of the process (UCX's worker
 * is not thread-safe); no call waits while it holds it: the streams are
 * driven without blocking and a blocking call sleeps outside the lock on
 * the socket and the engine's wake-up fd.
 */
#ifndef SHUNT_CORE_CONN_FABRIC_CONN_H
#define SHUNT_CORE_CONN_FABRIC_CONN_H

#include "core/fd/tcp_sock.h"
#include "core/fd/sock.h"

/* Whether this process may put connections on the fabric now (the setting,
 * no sandbox, no io_uring). */
bool fabric_conn_wanted(void);

/* Server, at accept: the engine, a ring and the hello (tag and cookie from
 * the client's SYN).  0: t is on PATH_FABRIC; -errno: nothing was sent,
 * the log says why, and the caller records FB_FABRIC. */
int fabric_conn_accept(struct tcp_sock *t, int fd, uint32_t tag, uint64_t cookie);

/* Client, at connect, its socket marked: it awaits the hello (t goes on
 * PATH_FABRIC); otherwise is the reason recorded if none comes.  False
 * when it cannot (no memory, no fd to ask with): kernel TCP (otherwise),
 * and the caller takes the mark off before the SYN goes. */
bool fabric_conn_await(struct tcp_sock *t, int fd, enum fallback_reason otherwise);

ssize_t fabric_conn_recv(struct tcp_sock *t, struct fdref *f, struct io_call *c);
ssize_t fabric_conn_send(struct tcp_sock *t, struct fdref *f, struct io_call *c);
int fabric_conn_shutdown(struct tcp_sock *t, struct fdref *f, int how);

/* poll's revents for events now, without waiting. */
short fabric_conn_poll(struct tcp_sock *t, int fd, short events);
/* Before a poll or select sleeps with t among its fds: says this end
 * sleeps, and answers as fabric_conn_poll (sleep only if it is 0), with
 * *efd the engine's armed wake-up fd to sleep on too (-1: none; then the
 * sleep must be short: its events were pending) and *sock_events what to
 * ask the kernel of the socket itself (its end, and room while this end's
 * bytes go by TCP). */
short fabric_conn_before_sleep(struct tcp_sock *t, int fd, short events, int *efd, short *sock_events);
/* *efd for a socket whose readiness is the kernel's alone (a server whose
 * hello is still to go): sleep on the socket as asked, no nap. */
#define FABRIC_SOCKET_ONLY (-3)

/* For an edge-triggered epoll member: counts that move when bytes come in
 * (rx) or room is made (tx), and whether the peer's end came. */
void fabric_conn_edge(struct tcp_sock *t, uint64_t *rx, uint64_t *tx, bool *end);

/* ioctl FIONREAD (SIOCINQ) or SIOCOUTQ on a socket on the fabric, answered
 * in *v without leaving it (a server whose hello is still to go: the
 * kernel's answer): 0, or -1 when the caller goes its usual way (not on
 * the fabric, a broken stream, the kernel's error). */
int fabric_conn_queue(struct tcp_sock *t, int fd, unsigned long req, int *v);

/* Both ends moved onto the ring: what shunt_fd_accelerated says. */
bool fabric_conn_accelerated(struct tcp_sock *t);

/* Leaves the fabric for good before a call it does not carry, which goes
 * to the kernel (why: which, for the log); t is on PATH_TCP after it
 * (FB_FABRIC_LEFT).  A client still awaiting its hello waits for it at
 * most HELLO_HOLD_NS (the kernel's call must not meet it); if none came it
 * keeps awaiting it (it is taken off when it comes, never attached to). */
void fabric_conn_leave(struct tcp_sock *t, int fd, const char *why);
/* The same before a call in which the kernel only writes to the socket
 * (sendfile, splice into it) or which reads after
 * fabric_conn_before_kernel_read: a client awaiting its hello does not
 * wait for it here (it will never attach, and takes it off when it comes). */
void fabric_conn_leave_no_wait(struct tcp_sock *t, int fd, const char *why);
/* Before a read the kernel makes on the program's behalf after the leave
 * (splice from the socket): a client still awaiting its hello first waits
 * for its first bytes (O_NONBLOCK: not at all) and takes a hello off, so
 * that the kernel's read never meets one.  0 to go on (f->fd may now be
 * shunt's copy: another thread closed the number meanwhile), -EAGAIN,
 * -EINTR, or another -errno. */
int fabric_conn_before_kernel_read(struct tcp_sock *t, struct fdref *f);

/* f's connection when it is on the fabric (awaiting its hello, or on the
 * engine), else NULL. */
static inline struct tcp_sock *fabric_conn_on(const struct fdref *f)
{
    if (!f->sock || f->sock->kind != SOCK_TCP)
        return NULL;
    struct tcp_sock *t = tcp_of(f->sock);
    return atomic_load(&t->path) == PATH_FABRIC ? t : NULL;
}

/* Every fabric connection of the process, before exec, spawn, a sandbox,
 * io_uring (exec true).  A server's hello still pending goes never: the
 * socket is kernel TCP for every holder. */
void fabric_conn_leave_all(const char *why, bool exec);
/* Around fork: before it every connection on the fabric leaves (a child
 * may not use its parent's engine), but a server's hello still pending
 * stays so, the child becoming a holder too (after it, in the parent with
 * the child's pid or -1, in the child with 0): whichever holder makes the
 * first call alone sends it (fabric_pending.h). */
void fabric_conn_before_fork(void);
void fabric_conn_after_fork(pid_t pid);
/* Those of fds that are on the fabric, before they go to another process
 * (SCM_RIGHTS). */
void fabric_conn_leave_fds(const int *fds, size_t n, const char *why);

/* The last fd closes: what is owed by TCP pushed (bounded), the ring's
 * last puts flushed. */
void fabric_conn_release(struct tcp_sock *t, int fd);
/* A client's connect failed before a SYN went: t is as new (PATH_TCP, not
 * negotiated), its awaiting stream forgotten. */
void fabric_conn_forget(struct tcp_sock *t);

/* The object goes: the stream and ring freed (only in the process that
 * made them: a forked child never touches its parent's engine). */
void fabric_conn_destroy(struct tcp_sock *t);

#endif
