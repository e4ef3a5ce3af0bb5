/*
 * fabric_stream.h: one connection's byte stream once both processes are
 * proven and their fabric rings attached (issue 19): the bytes each end
 * sent by TCP before it moved, then the ring, with the TCP connection left
 * as the companion whose end tells of the peer's.  Driven by the TCP
 * kind's connection paths (core/conn/fabric_conn.c; docs/architecture.md,
 * "Built: the fabric stream" and "Built: the connection paths").
 *
 * The move, for each direction on its own (no word is shared: over the
 * fabric nothing can be compare-exchanged as a segment's negotiation word
 * is on one host):
 *   - an end moves its sending side (fabric_stream_move) by putting, as the
 *     first bytes of its ring, the count P of bytes it sent by TCP, and
 *     flushing that put; from then on its writes go to the ring, and it
 *     sends nothing by TCP;
 *   - the reading end reads the peer's TCP bytes until it finds that
 *     header, then P of them in all, then the ring.  A TCP byte beyond P
 *     while the ring shows no way back (below) is not this protocol's (the
 *     stream breaks).
 * The TCP stream thus carries the program's bytes only.  Doorbells are the
 * engine's active messages (fabric_ring_bell), which wake a wait on the
 * engine's fd, and they are hints (the ring is the truth): a write that
 * found the peer's ring empty rings one only if the peer said it sleeps (a
 * reader that spins needs none: fabric_ring_sleep), a read that found the
 * ring full always; a waiting end says it sleeps, which lands before it
 * looks at the ring once more, and only then sleeps on the engine's fd and
 * on the socket (whose end, EOF or a reset, tells that the peer is gone).
 *
 * Not thread-safe: the caller serializes the calls on one stream (and on
 * the engine beneath it).
 */
#ifndef SHUNT_CORE_CONN_FABRIC_STREAM_H
#define SHUNT_CORE_CONN_FABRIC_STREAM_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct fabric_engine;
struct fabric_ring;
struct hello;

/* First in each ring: the count P and the length of a blob that follows
 * (0: none), both 64 bits little-endian.  The blob is how an end that has
 * the peer's ring but whose own the peer does not have yet (the client,
 * after the server's hello) hands over its own: the server reads it in its
 * ring before it has attached to anything (docs/architecture.md, "Planned:
 * how a connection reaches the stream"). */
#define FABRIC_STREAM_HEADER 16
#define FABRIC_STREAM_BLOB_MAX 2048u   /* half the smallest ring: header and blob fit at once */

struct fabric_stream {
    struct fabric_ring *ring;     /* attached to the peer's */
    struct fabric_engine *engine; /* its wake-up fd joins every wait (NULL: none) */
    uint64_t spin_ns;             /* a blocking call polls the ring this long before it
                                   * sleeps (0: never; the caller's choice, as SHUNT_SPIN_US) */
    int fd;                       /* the connection's TCP socket */
    /* sending */
    bool moved;                   /* the header is in the ring: writes go there */
    bool fin;                     /* shut down for writing (a FIN in the ring, or TCP's once back) */
    bool back;                    /* went back to TCP: the ring's count is marked, writes go by TCP */
    uint64_t header_len;          /* the header and blob at the start of the ring (once moved) */
    bool peer_left;               /* the peer left the ring (fabric_stream_leave) ... */
    uint64_t resend_pos, resend_end; /* ... and this is what it had not read, owed by TCP first */
    bool fin_owed;                /* a FIN owed by TCP, after what is owed before it */
    bool took_back;               /* went back taking back what the peer had not read
                                   * (fabric_stream_take_back): resend_pos.. is owed first */
    bool told_full;               /* a nonblocking send was told the ring is full: no take-back */
    uint64_t stall_consumed, stall_since, stall_seen;   /* fabric_stream_send_stalled's watch */
    bool left;                    /* this end left the fabric (fabric_stream_leave): done with */
    uint64_t tcp_sent;            /* program bytes sent by TCP before the move */
    bool tcp_full;                /* it moved while its TCP bytes filled the socket's send
                                   * buffer: the ring takes nothing until the socket has room
                                   * again (a move is no drain: the kernel's room would not
                                   * have grown; fabric_stream_held) */
    uint64_t bells_sent;
    /* receiving */
    bool peer_moved;              /* the peer's header was read: peer_tcp is final */
    bool peer_back;               /* the ring was read to the peer's mark, or this end left: the rest comes by TCP */
    bool asked;                   /* this end asked the peer to go back (fabric_stream_ask) */
    uint64_t tcp_skip;            /* the peer took back from before what this end had read:
                                   * these first bytes of its TCP are those, dropped */
    bool refused;                 /* the peer's blob was refused (on_peer_blob > 0): nothing attached */
    uint64_t refused_tcp;         /* ... and the TCP count its header said */
    bool refused_tcp_all;         /* ... and the peer saw it: all its bytes come by TCP */
    bool peer_refused;            /* the peer refused this end (or left) before it attached, after our move */
    uint64_t peer_tcp;            /* the peer's TCP bytes before its move (P) */
    uint64_t tcp_read;            /* of the peer's TCP bytes, those read here */
    bool tcp_eof;                 /* the TCP socket reported EOF or a reset */
    int tcp_error;                /* the reset's errno, returned once the ring is drained (then 0) */
    bool tcp_reset;               /* the socket ended in an error (a reset): POLLHUP from then on */
    bool broken;                  /* garbage from the peer: every call fails with EIO */
    int broken_line;              /* where it broke, for the log: the line, */
    const char *broken_file;      /* and which of fabric_stream*.c (a literal of the library's) */
    /* What follows this end's header when it moves, whenever that is: at most FABRIC_STREAM_BLOB_MAX bytes,
     * kept by the caller.  And where the peer's goes: set, the peer's header
     * must carry one, which the caller attaches to (0), cannot take (< 0:
     * the stream breaks) or refuses (> 0: a peer not proven; nothing is
     * attached, the peer finds out and sends again by TCP what it put into
     * the ring, and if its TCP ends first the ring is read after its TCP
     * bytes); ctx is the caller's. */
    const void *hand_blob;
    size_t hand_len;
    int (*on_peer_blob)(void *ctx, const void *blob, size_t len);
    void *ctx;
    /* A client whose SYN said it runs shunt: the first bytes may be the
     * server's hello naming this socket (boot tag and cookie), which is
     * removed and handed to on_hello (which attaches to the server's blob
     * and sets hand_blob; < 0 breaks the stream).  Anything else is the
     * program's; a strict prefix of a hello is held at most HELLO_HOLD_NS. */
    bool await_hello;
    /* This end shut its reading side while it awaited the hello (the
     * kernel's shutdown(SHUT_RD) was made on the socket): with nothing to
     * read a read answers 0 at once, and the socket's end is this end's own,
     * not the peer's: a hello may still come (the peer's bytes after a
     * SHUT_RD are delivered, as Linux does), and is taken off then. */
    bool rd_shut;
    uint32_t hello_tag;
    uint64_t hello_cookie;
    int (*on_hello)(void *ctx, const struct hello *h);
    /* Rung with every doorbell the engine sends (NULL: none): a second
     * doorbell of the caller's, for waits the engine's cannot reach. */
    void (*on_bell)(void *ctx);
    /* Whether the peer's process is gone (NULL: only a reset says so):
     * asked once its TCP end came while this end waits for room. */
    bool (*peer_gone)(void *ctx);
    uint64_t hello_partial_since; /* when a prefix of a hello was first seen (0: not) */
    unsigned empty_looks;         /* nonblocking reads that found the ring empty */
    /* the waits of blocking calls, and those no doorbell ended (counters) */
    uint64_t sleeps, sleeps_timed_out;
};

void fabric_stream_init(struct fabric_stream *s, int fd, struct fabric_ring *ring, struct fabric_engine *engine);

/* Moves this end's sending side onto the ring (idempotent).  0, -ENOTCONN
 * while its ring is not attached to the peer's (it may wait for the peer's
 * blob: nothing changes), or another -errno (the stream is then broken). */
int fabric_stream_move(struct fabric_stream *s);

/* send(2)'s answer: bytes sent, or -errno (-EAGAIN when nonblock and no
 * room, -EPIPE after shutdown, -EIO broken).  A blocking send sends all. */
ssize_t fabric_stream_send(struct fabric_stream *s, const struct iovec *iov, int iovcnt, bool nonblock);

/* recv(2)'s answer: bytes read (peek leaves them), 0 at EOF, or -errno. */
ssize_t fabric_stream_recv(struct fabric_stream *s, const struct iovec *iov, int iovcnt, bool peek,
                           bool nonblock);

/* Whether writes wait for the socket's room (tcp_full), looked at now:
 * the poll or epoll of a writer must then watch the socket's POLLOUT. */
bool fabric_stream_held(struct fabric_stream *s);

/* ioctl's FIONREAD and SIOCOUTQ: the program's bytes a read would find
 * now (never the protocol's: a hello, a header), and those this end sent
 * that the peer has not read (TCP's and the ring's).  >= 0, or -errno
 * (-EIO broken).  Never blocks. */
int64_t fabric_stream_readable(struct fabric_stream *s);
int64_t fabric_stream_unread_by_peer(struct fabric_stream *s);

/* What poll would say now: POLLIN (bytes of the program, or EOF) and
 * POLLOUT (room), never blocking. */
short fabric_stream_poll(struct fabric_stream *s);

/* For a caller about to sleep on the socket itself (poll, epoll): says
 * this end sleeps, then answers as fabric_stream_poll; sleep only if it
 * has no POLLIN. */
short fabric_stream_before_sleep(struct fabric_stream *s);

#define HELLO_HOLD_NS (200ull * 1000 * 1000)

/* The server's side: sends the hello (docs/fabric-discovery.md, step 3)
 * naming the client's socket, with the nonce and this end's ring blob,
 * before any byte of the program (it is not one of them).  0 or -errno. */
int fabric_stream_hello(struct fabric_stream *s, uint32_t tag, uint64_t cookie, const uint8_t *nonce,
                        const void *blob, size_t len);

/* shutdown(SHUT_WR): moves if it had not, then a FIN in the ring
 * (-ENOTCONN as fabric_stream_move), or TCP's own once this end is back. */
int fabric_stream_shutdown(struct fabric_stream *s);

/* Going back to kernel TCP, each direction on its own (the TCP stream
 * carries the program's bytes only, so nothing needs taking out of it):
 *   - an end's sending side goes back by marking its ring's last count
 *     (fabric_ring_go_back: no room needed, so a full ring, or a reader
 *     that never reads again, never holds it), flushing it, then ringing;
 *     its writes go by TCP from then on.  The reader reads the ring to the
 *     mark, then the socket.  A TCP byte it finds while its ring shows no
 *     mark breaks the stream (the mark lands before the first such byte is
 *     sent, and the ring is looked at after the socket);
 *   - an end asks the peer to send that way (fabric_stream_ask): the peer
 *     goes back at its next call on the stream (a doorbell brings a
 *     sleeper to it), and the asking end reads its ring to the mark.
 *
 * fabric_stream_return: 0 (also for an end that never moved: it never
 * will), or -errno. */
int fabric_stream_return(struct fabric_stream *s);
int fabric_stream_ask(struct fabric_stream *s);

/* A blocking send whose ring is full (or whose way back waits for the
 * reader to read to the mark) and whose reader has read nothing for
 * stall_ns: whether it is time to take back (kernel TCP would hold more:
 * docs/architecture.md, "A stalled reader").  Each call is a look; a look
 * more than 50 ms after the previous starts a new count (another send's
 * wait).  Never after a nonblocking send was told the ring is full
 * (told_full). */
bool fabric_stream_send_stalled(struct fabric_stream *s, uint64_t now, uint64_t stall_ns);
/* The sending side goes back to TCP taking back what the peer has not
 * read (fabric_ring_take_back): sent again by TCP first, at once, with no
 * wait for the reader, then the program's next bytes; the reader drops
 * from the socket what it had read of them.  0, or -errno (-EPIPE: no
 * take, after a FIN, or the peer left: the leave is served instead). */
int fabric_stream_take_back(struct fabric_stream *s);

/* This end leaves the fabric for good, for a process about to lose its
 * engine (an exec, a child after fork): it reads nothing more from its
 * ring, whose bytes past what it read the peer sends again by TCP (it kept
 * a copy: fabric_ring_leave), and its sending side goes back.  From then
 * on the socket is plain TCP to whoever holds it: its next bytes are the
 * peer's TCP bytes not read yet, then those the peer sends again, then the
 * rest, in order; nothing waits for the peer, which does its part at its
 * next call on the stream, but for a peer that took back (its bytes sent
 * again) at the same time: then this end waits for where they start, and
 * drops from the socket those it had read (bounded; -EIO past the bound,
 * never bytes twice).  A client whose server's hello may still come
 * (nothing arrived yet, or a prefix held) waits for it at most
 * HELLO_HOLD_NS, then answers -EAGAIN with nothing changed: a program
 * without shunt after it would take a late hello for data, and whether to
 * wait longer is the caller's.  0, -ENOTCONN (this end's ring is not
 * attached: the peer could not be told), -EAGAIN, or -errno. */
int fabric_stream_leave(struct fabric_stream *s);

/* What this end owes by TCP and could not send yet, with no call of the
 * program's to carry it: after it went back, its first TCP byte and its
 * FIN wait until the peer read the ring to the mark (a peer leaving
 * later would get what it had not read sent again behind them), and if
 * the peer left, what it had not read goes first.  Every call on the
 * stream pushes it; a close must (the program makes no call after).
 * 0 once nothing is owed, -EAGAIN (!wait) while something is, -errno.
 * With wait, it waits for the peer's reading as long as that takes. */
int fabric_stream_settle(struct fabric_stream *s, bool wait);

#endif
