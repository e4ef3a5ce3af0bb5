/*
 * downgrade.c: an accelerated connection goes back to kernel TCP because
 * one end (the leaver) is handed to a program that does not run shunt, or
 * both ends are, at the same moment.  This file: the protocol (below), the
 * records, what both parts share, the leaver, and a closing end's copy;
 * the other end's part and the calls that meet the move are in
 * downgrade_follow.c.
 *
 * Each program will read its TCP socket directly, so before it can: no
 * doorbell byte may be left in that socket's queue, and every byte its end
 * never read from its ring must arrive there, in order, once.  Only the
 * writer of a ring can put bytes into its reader's socket, so each
 * direction's unread bytes are re-sent over TCP by their own writer while
 * that writer still runs shunt: the leaver re-sends its outgoing ring
 * before it goes (the other end may be on its way out too, and then nobody
 * would be left to do it), the other end re-sends its own at its next call.
 * Rings are left as they are; the reader of a re-sent ring removes from its
 * socket the copies of what it read from the ring after the snapshot.
 *
 * The leaver L, holding its end's rx, tx and wait locks (no copy, drain or
 * sleep announcement of any holder of its end is under way):
 *   1. sets the downgrade word to DOWN_SET | its side, by one
 *      compare-exchange from 0: of two ends leaving at once, the one that
 *      fails is "the other end" P below and does P's part before its own
 *      exec.  From now on no holder of either end writes its outgoing ring
 *      (both look at the word under the tx lock), and L's end reads nothing
 *      more from its incoming one;
 *   2. freezes P's doorbell count (chan_side.bells): P sends no doorbell
 *      any more, and the count is exactly the doorbells it sent;
 *   3. records its rx tail (down_tail): P re-sends from there;
 *   4. a server whose client's TCP prefix is not all read takes it off the
 *      socket and hands it back in a file beside the segment (it must come
 *      before the ring's bytes); P re-sends it first (unless P closed and
 *      left a copy, below: the prefix then stays ahead of it);
 *   5. removes exactly (P's frozen count - doorbells its end removed
 *      already) bytes from its socket: the doorbells, no more;
 *   6. records P's rx tail T (down_txtail): the snapshot it re-sends from;
 *   7. waits until no holder of P's end is in an unbounded drain of
 *      doorbells (chan_side.draining is set before a drain looks at the
 *      word: either that drain sees DOWN_SET and takes at most the counted
 *      doorbells, or we see the flag and wait for the drain to end), and
 *      publishes DOWN_READY;
 *   8. sends one last doorbell (counted), freezes its own count (every
 *      doorbell of its end is now ahead in P's queue), and sends over TCP
 *      its tx ring's bytes from T to its head, then its FIN if it wrote
 *      one into the ring (to a closed P neither: its kernel would answer
 *      with a reset);
 *   9. lets go of its hold on the channel and is on kernel TCP.
 * The other end P, at its next call on the socket (or woken by that
 * doorbell or those bytes), once DOWN_READY is there:
 *   a. under its tx lock, once for all its holders (DOWN_RESENT): sends
 *      over TCP the handed-back prefix, then its ring's bytes from down_tail
 *      to its head, then its FIN if it wrote one into the ring; every later
 *      send (or shutdown) of its goes to TCP, after them;
 *   b. lets its program read the server prefix and what is left in its rx
 *      ring (it may have peeked at those bytes: a read after a peek finds
 *      them at once, as in the kernel's queue);
 *   c. then, once no thread of its end is asleep on the doorbells (a
 *      sleeper must see the last doorbell or the re-sent bytes first), under
 *      its rx and wait locks, once for all its holders (DOWN_DUPS): removes
 *      L's frozen count of doorbells minus those its end already drained,
 *      then (its rx tail now - T) bytes, the copies of what it read from the
 *      ring after the snapshot (a read that was under way then included),
 *      waiting a bounded time for bytes known to be on their way;
 *   d. is on kernel TCP: the next byte in its socket is the first it never
 *      read.
 * Step a waits for room in L's socket, which L's program makes only once
 * L is done, and L's step 8 waits for room in P's, which only c makes: so
 * a call that only reads or looks does a after c (downgrade_look), and a
 * call that sends (its bytes go after a's) does a piece by piece, under
 * the tx lock each time, with the position in down_resent, doing c in
 * between once the ring is read (resend); the last holder's close drops
 * what comes meanwhile instead.  A call that must not wait (a look, a
 * non-blocking send) sends one piece and goes on: the send answers EAGAIN
 * until a is done, and waits on the end look again every millisecond
 * meanwhile (channel_resend_pending), room in L's socket ringing nothing.
 * After c the program reads its socket (downgrade_recv, downgrade_poll).
 * A second leaver, which finds DOWN_SET of the other side, waits for
 * DOWN_READY and does a and c at once, reading nothing more (the new
 * program gets the rest from its socket) and not waiting for sleepers of
 * its own (its exec ends them), before its exec.
 *
 * After a close.  P's last holder closing while L has not read all P sent
 * leaves nobody to re-send it, so the close copies it into TCP at once
 * (downgrade_close_copy): P freezes its doorbells and L's, waits for L's
 * unbounded drains to end, records where the copy starts (copy_from) and
 * ends (copy_end: what the kernel took without waiting, its send buffer
 * first asked to hold all of it) and publishes
 * COPY_DONE.  A later leaver L that finds it (waiting out COPY_WRITING)
 * takes the doorbells, then the copies of what it read from the ring after
 * copy_from, and is done.  A close that finds the word set marks
 * COPY_RESENDS and does step a instead (seq_cst store of COPY_WRITING, then
 * load of the word, against L's compare-exchange and load of the state).
 * No doorbell ever goes behind a server's unread prefix (doorbell_send):
 * a second leaver could not take it out from behind the prefix.
 *
 * Why the counts are the whole story: on each socket every doorbell is
 * sent before its end's count freezes and every re-sent byte after it.
 * Nothing read from the segment sizes a copy: T, down_tail and back_len are
 * checked against the ring's size and the file's, and bytes taken off a
 * socket are discarded by the kernel (MSG_TRUNC), never copied.  Single
 * copy: a posted send's bytes are not in the ring and move none of its
 * indexes; the reader takes none once
 * the word is set and its ring is empty, and the sender withdraws the rest
 * after its idle bound and sends it by TCP, after the re-sent bytes (it
 * needs the tx lock).  A peer that makes no call on the socket (and sleeps
 * in no wait on it) delays step a: the new program waits for those bytes as
 * it would for a slow sender.
 *
 * A leaver killed before DOWN_READY (its socket closes while the other end
 * waits) has sent nothing by TCP: the other end sets the word back to 0
 * and reads its ring to the end, as from any killed peer
 * (dg_forget_dead_leaver).
 */
#include <sys/stat.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/conn/downgrade.h"
#include "core/conn/downgrade_internal.h"
#include "core/conn/fallback.h"
#include "core/conn/sockstat.h"
#include "core/fd/fdtable.h"
#include "base/self.h"
#include "base/fsize.h"
#include "base/log.h"
#include "core/conn/negotiate.h"
#include "core/fd/passthrough.h"
#include "core/conn/stream.h"
#include "core/wait/wait.h"
#include "core/wait/xwake.h"
#include "base/real.h"

bool downgrade_leaving_side(struct tcp_sock *t)
{
    return channel_self_left(&t->ch);
}

unsigned downgrade_word(struct tcp_sock *t)
{
    unsigned d = atomic_load(&t->ch.hdr->down);
    if (d == 0)
        return 0;
    /* one leaver's DOWN_SET and side, then its steps in order */
    if ((d & ~DOWN_ALL) || !(d & DOWN_SET) || ((d & (DOWN_RESENT | DOWN_DUPS)) && !(d & DOWN_READY)))
        return DOWN_CORRUPT;
    /* our own end left: only this process can have done it while it never
     * shared the end */
    if ((int)(d & DOWN_SIDE) == t->ch.side && !atomic_load(&t->end_shared) && !atomic_load(&t->leaving))
        return DOWN_CORRUPT;
    return d;
}

bool downgrade_ring_done(struct tcp_sock *t)
{
    return downgrade_leaving_side(t) || (atomic_load(&t->ch.hdr->down) & DOWN_DUPS);
}

uint64_t downgrade_bells_left(struct tcp_sock *t)
{
    return channel_bells_unread(&t->ch);
}

/* A short pause: blocked behind another thread's sleep on the doorbells,
 * or waiting for the other end's step. */
void dg_pause_briefly(void)
{
    struct timespec ts = { 0, 100000 };
    nanosleep(&ts, NULL);
}

/* Stops an end's doorbells and returns how many it sent.  A sender that
 * died inside its send leaves it busy: after a while that one byte is
 * given up on (the peer's processes are dying anyway). */
uint64_t dg_bells_freeze(_Atomic uint64_t *w)
{
    for (int i = 0;; i++) {
        uint64_t v = atomic_load(w);
        if (v & BELLS_FROZEN)
            return v & BELLS_COUNT_MASK;
        if ((v & BELLS_BUSY_MASK) && i < 100000) {
            sched_yield();
            continue;
        }
        if (atomic_compare_exchange_weak(w, &v, v | BELLS_FROZEN))
            return v & BELLS_COUNT_MASK;
    }
}

/* Takes exactly n bytes off the socket (into buf if not NULL): bytes that
 * are known to be queued or on their way.  Returns what it took. */
uint64_t dg_take_exact(int fd, uint64_t n, char *buf)
{
    uint64_t got = 0;
    int waited = 0;
    while (got < n) {
        uint64_t want = n - got;
        if (want > SHUNT_DISCARD_ALL)
            want = SHUNT_DISCARD_ALL;
        ssize_t r = buf ? shunt_real.recv(fd, buf + got, (size_t)want, MSG_DONTWAIT) : shunt_discard(fd, (size_t)want);
        if (r > 0) {
            got += (uint64_t)r;
            waited = 0;   /* bounded is the time without progress */
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) || waited >= ARRIVAL_MS / 10)
            break;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        shunt_real.poll(&p, 1, 10);
        waited++;
    }
    return got;
}

/* Writes buf to the kernel socket, whether or not it is O_NONBLOCK: all of
 * it, or (wait false) what the kernel takes now.  Adds what went to *sent. */
int dg_send_all(int fd, const char *buf, size_t len, bool wait, uint64_t *sent)
{
    while (len > 0) {
        ssize_t r = shunt_real.send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r > 0) {
            buf += r;
            len -= (size_t)r;
            *sent += (uint64_t)r;
            continue;
        }
        if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -errno;
        if (!wait && r < 0 && errno != EINTR)
            return -EAGAIN;
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        shunt_real.poll(&p, 1, 100);
    }
    return 0;
}

/* Sends the bytes [from, head) of a ring this end produces over TCP (all,
 * or with wait false what the kernel takes now; *sent says how many).  The
 * caller holds the tx lock: head stays, and nothing is overwritten (the
 * consumer only reads).  from comes from the segment: checked. */
int dg_send_ring_span(int fd, const struct ring_view *r, uint64_t from, uint64_t head, bool wait,
                          uint64_t *sent)
{
    uint64_t size = ring_size_now(r);   /* rings grow: the size in use, not the capacity */
    *sent = 0;
    if (size == 0 || head - from > size)
        return -EIO;   /* a tail the ring never had: the peer scribbled */
    int err = 0;
    while (!err && from != head) {
        uint64_t at = from & (size - 1);
        uint64_t len = head - from < size - at ? head - from : size - at;
        err = dg_send_all(fd, (const char *)r->data + at, (size_t)len, wait, sent);
        from += len;
    }
    return err;
}

void dg_back_path(const struct tcp_sock *t, char *out, size_t len)
{
    channel_back_path(&t->ch, out, len);   /* a name another user cannot tell from the segment's */
}

/* The leaver hands a server's unread TCP prefix back to the client. */
static void hand_back_prefix(struct tcp_sock *t, int fd)
{
    uint64_t k = tcp_sock_prefix_left(t);   /* this process's count (core/fd/tcp_sock.h) */
    if (t->ch.side != 1 || k == 0)
        return;
    char *buf = k <= (64u << 20) ? malloc(k) : NULL;
    char path[128];
    dg_back_path(t, path, sizeof path);
    int out = buf ? open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
    uint64_t got = out >= 0 ? dg_take_exact(fd, k, buf) : 0;
    if (out < 0 || got != k || fsize_write(out, buf, got) != (ssize_t)got) {
        shunt_log(LOG_ERROR, "fd %d: downgrade: could not hand back %llu bytes of TCP prefix", fd, (unsigned long long)k);
        atomic_store(&t->broken, true);
    } else {
        atomic_store(&t->ch.hdr->back_len, (uint32_t)got);
    }
    if (out >= 0)
        shunt_real.close(out);
    tcp_sock_prefix_read(t, got);
    free(buf);
}

/* This object is on TCP from now on, and this process lets go of its hold
 * on the channel (the mapping stays until the object goes: another thread
 * may still be looking at it).  Under t->lock. */
void dg_settle_on_tcp(struct tcp_sock *t, int fd)
{
    if (atomic_load(&t->path) != PATH_SHM)
        return;
    if (!t->released) {
        /* a vfork child shares this object with its parent: the parent's
         * hold goes, and the one it took for the new program if it took one
         * (holders_before_spawn counts channels with an fd surviving exec) */
        unsigned holds = shunt_in_vfork_child ? 1u + (t->survives_exec ? 1u : 0u) : 1u;
        t->released = true;
        /* never shared: the last holder, whatever the segment's count says */
        if (atomic_fetch_sub(&t->ch.self->holders, holds) == holds || !atomic_load(&t->end_shared))
            negotiate_forget(t);
    }
    atomic_store(&t->reason, FB_DOWNGRADED);
    atomic_store_explicit(&t->path, PATH_TCP, memory_order_release);
    fallback_count_leave(t);
    sockstat_publish(t, fd, 0, 0, NULL, 0);   /* shunt stat: on TCP, and why */
}

/* The peer's socket is closed: its end (FIN) or a reset is in ours.  A
 * socket stays open while any call on it is under way (a close meanwhile
 * is put off: deferred_close.c), so no holder of the peer's end can still
 * be in a drain or a close's copy: a flag that says so was left by a
 * holder killed in the middle.  Looked at every 10 ms of a wait. */
static bool peer_socket_closed(int fd, int looks)
{
    if (looks % 100 != 99)
        return false;
    struct pollfd p = { .fd = fd, .events = POLLRDHUP };
    return shunt_real.poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Step 7: no holder of the other end drains its socket without a bound. */
static void wait_peer_drain(struct tcp_sock *t, int fd)
{
    for (int i = 0; atomic_load(&t->ch.peer->draining); i++) {
        if (peer_socket_closed(fd, i))
            return;
        if (i >= ARRIVAL_MS * 10) {
            shunt_log(LOG_WARN, "fd %d: downgrade: the peer's drain of doorbells did not end", fd);
            return;
        }
        dg_pause_briefly();
    }
}

/* Whether the peer's last close left in TCP what this end had not read
 * (downgrade_close_copy), waiting for a close under way.  Then nobody is
 * left to re-send, and nothing may be sent to the peer's socket. */
static bool peer_left_copy(struct tcp_sock *t, int fd)
{
    for (int i = 0; atomic_load(&t->ch.peer->closed_copy) == COPY_WRITING && i < ARRIVAL_MS * 10 &&
                    !peer_socket_closed(fd, i);
         i++)
        dg_pause_briefly();
    return atomic_load(&t->ch.peer->closed_copy) == COPY_DONE;
}

/* The peer's close copied [copy_from, copy_end) of the ring into our
 * socket; the copies of what this end read since go, the rest is the new
 * program's.  The positions come from the segment: checked. */
static void take_closed_copy(struct tcp_sock *t, int fd)
{
    uint64_t from = atomic_load(&t->ch.peer->copy_from), tail;
    int own = ring_tail_mine(&t->ch.rx, &tail);
    uint64_t read = tail - from;
    uint64_t copied = atomic_load(&t->ch.peer->copy_end) - from;
    uint64_t sent = ring_head_seen(&t->ch.rx, from) - from;
    if (own < 0 || sent > ring_size_now(&t->ch.rx) || read > sent || copied > sent) {
        shunt_log(LOG_ERROR, "fd %d: downgrade: the peer's closing copy is not in the ring", fd);
        atomic_store(&t->broken, true);
        return;
    }
    uint64_t dups = read < copied ? read : copied;
    uint64_t took = stream_prefix_left(t) > 0 && dups ? 0 : dg_take_exact(fd, dups, NULL);
    if (took != dups)
        shunt_log(LOG_ERROR, "fd %d: downgrade: %llu of the %llu bytes copied at the peer's close that were read "
                  "already could be taken off the socket", fd, (unsigned long long)took, (unsigned long long)dups);
    uint64_t past = read > copied ? read : copied;
    if (past < sent)
        shunt_log(LOG_ERROR, "fd %d: downgrade: the kernel took only part of the peer's closing copy; the %llu bytes "
                  "after it are lost (see compatibility.md)", fd, (unsigned long long)(sent - past));
}

/* After an end's re-sent bytes: a FIN it wrote into its ring (a shutdown
 * or a close while accelerated) goes to its TCP socket too, as the kernel
 * would have sent it.  Without it the other end, reading TCP now, never
 * saw the end of the stream again (a read after its EOF waited, or got the
 * bytes of a write the kernel would have refused with EPIPE). */
void dg_shut_on_tcp(struct tcp_sock *t, int fd)
{
    if (tcp_sock_own_state(t) & SIDE_SHUT_WR)
        shunt_real.shutdown(fd, SHUT_WR);
}

/* The other end waits for the leaver's records (a few system calls away,
 * or at most the leaver's bounded waits): DG_NEVER if they never come,
 * DG_DEAD if the leaver's socket closed first (a leaver holds it to the
 * end of its steps: one killed in the middle never finishes). */
int dg_wait_ready(struct tcp_sock *t, int fd)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int i = 0; !(atomic_load(&t->ch.hdr->down) & DOWN_READY); i++) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 > READY_MS)
            return DG_NEVER;
        if (peer_socket_closed(fd, i) || !atomic_load(&t->ch.hdr->down))   /* (0: another holder forgot it) */
            return (atomic_load(&t->ch.hdr->down) & DOWN_READY) ? DG_READY : DG_DEAD;
        dg_pause_briefly();
    }
    return DG_READY;
}

/* The leaver was killed before DOWN_READY (its socket closed first).  Up
 * to there its steps took things only off its own socket and wrote only
 * records: nothing of the stream went by TCP yet (its re-send is step 8),
 * so the rings are still the whole of it.  The word goes back to 0, from
 * the value seen (under t->lock), and the connection ends as any killed
 * peer's does (stream.c, end_of_stream): what the dead end sent is read,
 * then EOF, or ECONNRESET if it left bytes of ours unread, as in the
 * kernel.  Once a connection: a word set again after that is no leaver's,
 * and resets it.  False: not done (reset, as for a leaver that never
 * finished). */
bool dg_forget_dead_leaver(struct tcp_sock *t, int fd)
{
    unsigned seen = atomic_load(&t->ch.hdr->down);
    if (atomic_exchange(&t->leaver_forgotten, true) || (seen & DOWN_READY) || downgrade_word(t) == DOWN_CORRUPT ||
        (!atomic_compare_exchange_strong(&t->ch.hdr->down, &seen, 0) && seen != 0))
        return false;   /* (seen 0: another holder of our end did it) */
    atomic_store(&t->peer_gone, true);
    shunt_log(LOG_INFO, "fd %d: the peer was killed while it left for kernel TCP: its end, as a killed peer's", fd);
    return true;
}

/* The leaver's steps 2 to 8, under its rx, tx and wait locks. */
static void leave_first(struct tcp_sock *t, int fd)
{
    struct chan_hdr *h = t->ch.hdr;
    uint64_t peer_bells = dg_bells_freeze(&t->ch.peer->bells), rx_tail = 0;
    if (ring_tail_mine(&t->ch.rx, &rx_tail) < 0)
        atomic_store(&t->broken, true);   /* the re-send below fails its check then */
    atomic_store(&h->down_tail, rx_tail);
    /* A peer that closed left its unread bytes in TCP, behind the server's
     * prefix if there is one: both stay for the new program. */
    bool closed = peer_left_copy(t, fd);
    if (!closed)
        hand_back_prefix(t, fd);
    uint64_t eaten = atomic_load(&t->ch.self->bells_eaten);
    uint64_t due = peer_bells > eaten ? peer_bells - eaten : 0;
    /* no doorbell is sent behind a prefix (doorbell_send): none is due then */
    uint64_t took = stream_prefix_left(t) > 0 ? 0 : dg_take_exact(fd, due, NULL);
    doorbell_ate(t, (size_t)took);
    if (took != due)
        shunt_log(LOG_WARN, "fd %d: downgrade: %llu of %llu doorbells arrived (the peer is gone?)", fd,
                  (unsigned long long)took, (unsigned long long)due);
    int64_t unread = ring_readable(&t->ch.rx);
    if (closed)
        take_closed_copy(t, fd);
    else if (unread > 0 && atomic_load(&t->peer_gone))
        shunt_log(LOG_ERROR, "fd %d: downgrade: the peer's processes are gone without closing; the %lld bytes it "
                  "sent that were not read are lost (see compatibility.md)", fd, (long long)unread);
    uint64_t head = 0, resent = 0;
    int own = ring_head_mine(&t->ch.tx, &head);
    uint64_t snap = ring_tail_seen(&t->ch.tx, head);
    atomic_store(&h->down_txtail, snap);
    wait_peer_drain(t, fd);
    atomic_fetch_or(&h->down, DOWN_READY);
    doorbell_send(t, fd);   /* wakes a peer asleep on its socket */
    doorbell_wake_peer_futex(t);   /* or on its end's futex: it then sleeps on its socket, and sees the byte */
    dg_bells_freeze(&t->ch.self->bells);
    /* A closed peer reads nothing more: bytes sent to its socket would only
     * make its kernel reset the connection and drop the rest of its copy
     * (the new program's own sends do that as they would under the kernel) */
    int err = closed ? 0 : own < 0 ? -EIO : dg_send_ring_span(fd, &t->ch.tx, snap, head, true, &resent);
    if (!closed && !err)
        dg_shut_on_tcp(t, fd);
    if (err) {
        shunt_log(LOG_ERROR, "fd %d: downgrade: re-sending the bytes the peer had not read failed: %s", fd,
                  strerror(-err));
        /* -EIO: the segment's records failed their checks, so what our
         * socket holds is not known to be the stream (broken: nothing is
         * read from it).  A kernel error (the peer gone) loses only what
         * we sent it. */
        if (err == -EIO)
            atomic_store(&t->broken, true);
    }
    shunt_log(LOG_DEBUG, "fd %d: leaving: rx tail %llu head %llu, peer's doorbells %llu (took %llu), resent %llu from %llu%s",
              fd, (unsigned long long)rx_tail, (unsigned long long)ring_head_seen(&t->ch.rx, rx_tail),
              (unsigned long long)peer_bells,
              (unsigned long long)took, (unsigned long long)resent, (unsigned long long)snap,
              closed ? " (the peer closed and left its unread bytes in TCP)" : "");
}

void downgrade_leave(struct tcp_sock *t, int fd)
{
    if (negotiate_settle(t, fd) != PATH_SHM || !t->ch.hdr)
        return;   /* an offer not yet claimed was withdrawn: TCP already */
    crit_lock(&t->lock);
    atomic_store(&t->leaving, true);   /* the word will name our side: not a scribble (downgrade_word) */
    int rx = dir_lock(t, &t->rx_lock, &t->ch.self->rx_lock);
    int tx = rx < 0 ? -1 : dir_lock(t, &t->tx_lock, &t->ch.self->tx_lock);
    int w = tx < 0 ? -1 : doorbell_lock(t);
    unsigned expect = 0;
    /* Both ends may leave at once: the first one is the leaver, the other
     * then does the other end's part (observe) before its exec. */
    bool first = w >= 0 && atomic_load(&t->path) == PATH_SHM &&
                 atomic_compare_exchange_strong(&t->ch.hdr->down, &expect, DOWN_SET | (unsigned)t->ch.side);
    if (first)
        leave_first(t, fd);
    if (w >= 0)
        doorbell_unlock(t, w);
    if (tx >= 0)
        dir_unlock(&t->tx_lock, &t->ch.self->tx_lock, tx);
    if (rx >= 0)
        dir_unlock(&t->rx_lock, &t->ch.self->rx_lock, rx);
    if (first) {
        /* a holder of this end in another process, asleep for ring space,
         * gets no doorbell any more: it goes on by TCP, after our re-sent
         * bytes (the tx lock it waits for) */
        xwake_send(t);
        dg_settle_on_tcp(t, fd);
        shunt_log(LOG_INFO, "fd %d: moved back to kernel TCP (this end left the ring)", fd);
    }
    crit_unlock(&t->lock);
    if (!first && atomic_load(&t->path) == PATH_SHM) {
        shunt_log(LOG_DEBUG, "fd %d: leaving after another (down %#x)", fd, atomic_load(&t->ch.hdr->down));
        dg_follow_as_leaver(t, fd);
    }
}

bool downgrade_leave_because(struct tcp_sock *t, int fd, enum fallback_reason why)
{
    downgrade_leave(t, fd);
    if (atomic_load(&t->path) != PATH_TCP)
        return false;
    atomic_store(&t->reason, why);
    sockstat_publish(t, fd, 0, 0, NULL, 0);
    return true;
}

/* The closing copy is what the kernel takes at once, and its send buffer
 * grows with the route's segment size: several MB on loopback, about 200 KB
 * over a veth between namespaces (MTU 1500), where most of a ring was lost.
 * The socket is going (its last holder's close): room for the whole copy is
 * asked for, within net.core.wmem_max; never less than it has. */
static void copy_room(int fd, uint64_t len)
{
    int have = 0;
    socklen_t l = sizeof have;
    if (len > INT_MAX / 2 || shunt_real.getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &have, &l) < 0)
        return;
    int want = (int)len;   /* the kernel doubles it (its bookkeeping) */
    if (have < 2 * want)
        shunt_real.setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof want);
}

void downgrade_close_copy(struct tcp_sock *t, int fd)
{
    struct chan_side *self = t->ch.self;
    /* seq_cst store, then load, against the leaver's compare-exchange of
     * the word and its load of our state: either it waits for our copy, or
     * we see it leaving and do the other end's part instead */
    atomic_store(&self->closed_copy, COPY_WRITING);
    unsigned d = downgrade_word(t);
    if (d == DOWN_CORRUPT || atomic_load(&t->broken))
        return;   /* a scribbled word starts no re-send, and waits for no leaver */
    if (d) {
        atomic_store(&self->closed_copy, COPY_RESENDS);
        if (!downgrade_leaving_side(t) && dg_wait_ready(t, fd) == DG_READY)
            dg_resend_closing(t, fd);
        return;
    }
    /* nothing unread (the common close) takes no lock: the FIN is in, no
     * send of ours moves head any more */
    int tx = ring_readable(&t->ch.tx) == 0 ? -1 : dir_lock(t, &t->tx_lock, &self->tx_lock);
    uint64_t head = 0, sent = 0;
    int own = ring_head_mine(&t->ch.tx, &head);
    uint64_t from = ring_tail_seen(&t->ch.tx, head);
    if (tx >= 0 && own == 0 && from != head && head - from <= ring_size_now(&t->ch.tx) &&
        !atomic_load(&t->peer_gone) && !(tcp_sock_peer_state(t) & SIDE_CLOSED)) {
        /* Every doorbell of ours goes ahead of the copy, and the peer's
         * doorbells stop (the last of ours to our socket is there before it
         * closes: a byte left unread would make our kernel reset, not end,
         * the connection).  A drain of the peer's that started without a
         * bound ends before the copy enters its socket. */
        dg_bells_freeze(&self->bells);
        dg_bells_freeze(&t->ch.peer->bells);
        wait_peer_drain(t, fd);
        atomic_store(&self->copy_from, from);
        copy_room(fd, head - from);
        int err = dg_send_ring_span(fd, &t->ch.tx, from, head, false, &sent);
        shunt_log_sock(LOG_DEBUG, t, fd, "closing: %llu of the %llu bytes the peer has not read copied into TCP%s",
                       (unsigned long long)sent, (unsigned long long)(head - from), err ? " (the kernel took no more)" : "");
    }
    atomic_store(&self->copy_from, from);
    atomic_store(&self->copy_end, from + sent);
    atomic_store(&self->closed_copy, COPY_DONE);
    if (tx >= 0)
        dir_unlock(&t->tx_lock, &self->tx_lock, tx);
}
