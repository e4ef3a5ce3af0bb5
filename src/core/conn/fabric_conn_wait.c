/*
 * fabric_conn_wait.c: how a call on a connection on the fabric sleeps:
 * outside the lock, on the socket and the process's wake fd (the engine's,
 * armed), bounded, as another thread's close of its fd allows; a blocking
 * receive spins on its ring first where that can pay.
 */
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "base/clock.h"
#include "base/real.h"
#include "base/settings.h"
#include "base/signals.h"
#include "core/conn/fabric_conn_internal.h"
#include "core/conn/fabric_process.h"
#include "core/wait/wait.h"
#include "transport/fabric_engine.h"

#define WAIT_MS 100            /* a sleep is re-checked this often (every wait is bounded) */

static int wait_news(int fd, short events, int efd, bool socket_busy, bool nap, uint64_t deadline, unsigned ran,
                     unsigned norestart);

/* A call that sleeps counts as waiting on the socket (call_sleep), so that
 * another thread's close of its last fd is put off until it returns, as the
 * kernel's file outlives the fd (deferred_close.c); from such a close on,
 * the call goes on through shunt's private copy of the socket, never
 * through the number, which the program may have reused already. */
void fconn_follow_close(struct tcp_sock *t, struct fdref *f)
{
    if (f->blocked)
        f->fd = tcp_call_fd(t, f->fd);
}

/* wait_news for a call (counted first), which a close by another thread
 * between its last look and the poll does not end: the number is gone
 * (POLLNVAL), the copy goes on (0: look again). */
int fconn_call_sleep(struct tcp_sock *t, struct fdref *f, short events, int efd, bool socket_busy, bool nap,
                      uint64_t deadline, unsigned ran, unsigned norestart)
{
    wait_call_blocks(t, &f->blocked);
    int w = wait_news(f->fd, events, efd, socket_busy, nap, deadline, ran, norestart);
    if (w == -EBADF && tcp_call_fd(t, f->fd) != f->fd) {
        fconn_follow_close(t, f);
        return 0;
    }
    return w;
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
uint64_t fconn_timeout_deadline(int fd, int name)
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
short fconn_prepare_sleep(struct fabric_conn *c, int *efd)
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
bool fconn_spin_for_bytes(struct fabric_conn *c)
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
