/*
 * readiness.c: poll and select over mixed sets.
 *
 * Without an accelerated fd in the set the call is the kernel's, unchanged.
 * With one: the rings are looked at first; if something is ready (or the
 * timeout is zero) the other fds get a zero-timeout kernel poll and the
 * answers are merged; a zero-timeout call asks it only as often as
 * kernel_looks.c allows (a loop of them would enter the kernel every time).
 * Otherwise doorbells are armed, the rings looked at again, and the kernel
 * waits on everything at once: the companion of each
 * accelerated socket is watched for POLLIN, which a doorbell (or the peer's
 * death) produces.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/real.h"
#include "base/signals.h"
#include "core/conn/fabric_conn.h"
#include "core/conn/negotiate.h"
#include "core/conn/stream.h"
#include "core/fd/fdtable.h"
#include "core/kinds/epoll.h"
#include "core/kinds/readiness.h"
#include "core/wait/kernel_looks.h"
#include "core/wait/turns.h"
#include "core/wait/wait.h"
#include "core/wait/xwake.h"

bool timeout_valid(const struct timespec *tmo)
{
    return !tmo || (tmo->tv_sec >= 0 && tmo->tv_nsec >= 0 && tmo->tv_nsec < 1000000000);
}

void deadline_start(struct deadline *d, const struct timespec *tmo)
{
    d->forever = tmo == NULL;
    if (d->forever)
        return;
    if (tmo->tv_sec == 0 && tmo->tv_nsec == 0) {
        d->at = (struct timespec){ 0, 0 };   /* passed already: no need to read the clock */
        return;
    }
    clock_gettime(CLOCK_MONOTONIC, &d->at);
    d->at.tv_sec += tmo->tv_sec;
    d->at.tv_nsec += tmo->tv_nsec;
    if (d->at.tv_nsec >= 1000000000) {
        d->at.tv_sec++;
        d->at.tv_nsec -= 1000000000;
    }
}

const struct timespec *deadline_left(const struct deadline *d, struct timespec *buf)
{
    if (d->forever)
        return NULL;
    *buf = (struct timespec){ 0, 0 };
    if (d->at.tv_sec == 0 && d->at.tv_nsec == 0)
        return buf;   /* a zero timeout */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    buf->tv_sec = d->at.tv_sec - now.tv_sec;
    buf->tv_nsec = d->at.tv_nsec - now.tv_nsec;
    if (buf->tv_nsec < 0) {
        buf->tv_sec--;
        buf->tv_nsec += 1000000000;
    }
    if (buf->tv_sec < 0)
        buf->tv_sec = buf->tv_nsec = 0;
    return buf;
}

bool deadline_passed(const struct deadline *d)
{
    struct timespec left;
    const struct timespec *l = deadline_left(d, &left);
    return l && l->tv_sec == 0 && l->tv_nsec == 0;
}

static struct tcp_sock *accelerated(struct fdref *f)
{
    if (!f->sock || f->sock->kind != SOCK_TCP)
        return NULL;
    struct tcp_sock *t = tcp_of(f->sock);
    if (negotiate_observe(t, f->fd) != PATH_SHM || !t->ch.hdr || stream_prefix_left(t) > 0)
        return NULL;
    return t;
}

/* A connection on the fabric: its readiness is the stream's. */
static struct tcp_sock *fabric_of(struct fdref *f)
{
    if (!f->sock || f->sock->kind != SOCK_TCP || atomic_load(&tcp_of(f->sock)->path) != PATH_FABRIC)
        return NULL;
    return tcp_of(f->sock);
}

/* A client waiting for the server's claim: the kernel may call it readable
 * for the claim's doorbell (claims_landed). */
static bool offered(struct fdref *f)
{
    return f->sock && f->sock->kind == SOCK_TCP && atomic_load(&tcp_of(f->sock)->path) == PATH_OFFERED;
}

/* An epoll fd with accelerated members: its readiness is ours to tell. */
static bool nested_epoll(struct fdref *f)
{
    return f->sock && f->sock->kind == SOCK_EPOLL && epoll_has_members(f->sock);
}

/* The readiness of an fd whose answer is ours, or -1 for the kernel's. */
static int ours(struct fdref *f, struct pollfd *p)
{
    if (p->fd < 0)
        return -1;
    struct tcp_sock *t = accelerated(f);
    if (t)
        return stream_poll(t, p->fd, p->events);
    if ((t = fabric_of(f)))
        return fabric_conn_poll(t, p->fd, p->events);
    if (nested_epoll(f))
        return epoll_poll_events(f->sock, p->fd, p->events);
    return -1;
}

int readiness_settled(struct fdref *f, short events, short kernel_revents)
{
    if (!(kernel_revents & POLLIN) || !f->sock || f->sock->kind != SOCK_TCP)
        return kernel_revents;
    int rev = readiness_of(f, events);
    return rev >= 0 ? rev : kernel_revents;
}

int readiness_of(struct fdref *f, short events)
{
    struct tcp_sock *t = accelerated(f);
    if (t)
        return stream_poll(t, f->fd, events);
    t = fabric_of(f);
    return t ? fabric_conn_poll(t, f->fd, events) : -1;
}

static int kernel_ppoll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask)
{
    int r = shunt_real.ppoll(fds, n, tmo, mask);
    return r < 0 ? -errno : r;
}

#define STACK_FDS 32

/* A member's entry: a pipe, a Unix socket, TCP for good need no lookup. */
static struct fdref look_up(int fd)
{
    return fdt_kernel_only(fd) ? (struct fdref){ .fd = fd, .ops = &passthrough_ops } : fdt_get(fd);
}

/* The doorbells a readiness wait for these events needs. */
static int wants(short events)
{
    int w = 0;
    if (events & (POLLIN | POLLRDNORM | POLLRDBAND | POLLPRI | POLLRDHUP))
        w |= WANT_DATA;
    if (events & (POLLOUT | POLLWRNORM | POLLWRBAND))
        w |= WANT_SPACE;
    return w ? w : WANT_DATA;   /* errors and hang-ups come with data's doorbell */
}

/*
 * The kernel's answer for a set without accelerated sockets is the
 * program's, except for a client whose offer the server claimed while the
 * kernel waited: the byte that made it readable was the claim's doorbell
 * (negotiate_claim.c), not data, and from now on its readiness is the
 * channel's.  Settles those (negotiate_observe, through readiness_settled)
 * and corrects *count; true if one of them changed.
 */
static bool claims_landed(struct pollfd *fds, struct fdref *refs, nfds_t n, int *count)
{
    bool changed = false;
    for (nfds_t i = 0; i < n; i++) {
        short was = fds[i].revents;
        if (fds[i].fd < 0 || !(was & POLLIN) || !refs[i].sock || refs[i].sock->kind != SOCK_TCP)
            continue;
        fds[i].revents = (short)readiness_settled(&refs[i], fds[i].events, was);
        if (fds[i].revents != was) {
            changed = true;
            *count -= was && !fds[i].revents;
        }
    }
    return changed;
}

/* What is left of tmo (NULL: none) since started. */
static const struct timespec *time_left(const struct timespec *tmo, uint64_t started, struct timespec *buf)
{
    if (!tmo)
        return NULL;
    uint64_t total = (uint64_t)tmo->tv_sec * 1000000000u + (uint64_t)tmo->tv_nsec;
    uint64_t spent = clock_now_ns() - started;
    uint64_t left = spent < total ? total - spent : 0;
    buf->tv_sec = (time_t)(left / 1000000000u);
    buf->tv_nsec = (long)(left % 1000000000u);
    return buf;
}

/*
 * A zero-timeout wait, its own fds answered: may it leave out the kernel's
 * look at the others (k: the set with ours at -1)?  *looks: the set's
 * bound, to be told of the question otherwise.  Yes when the bound of
 * kernel_looks.c allows it (also when there are none) and every one is
 * open as far as the fd table knows: a closed fd must be POLLNVAL (select's
 * EBADF) at once, and only the kernel says so.  An fd the program closed
 * behind shunt's back is still reported within the bound.
 */
static bool kernel_left_out(const struct pollfd *k, nfds_t n, struct kernel_looks **looks)
{
    uint64_t key = KERNEL_LOOKS_KEY0 ^ n;
    bool open = true;
    for (nfds_t i = 0; i < n; i++) {
        if (k[i].fd < 0)
            continue;
        open &= fdt_known_open(k[i].fd);
        key = kernel_looks_key(key, k[i].fd, k[i].events);
    }
    /* A set of ours alone is bounded the same way: the kernel's question
     * also says EINVAL when the set is larger than RLIMIT_NOFILE, which a
     * program may have lowered to 0 (vsftpd; rlimit_nofile_zero) */
    *looks = kernel_looks_of_thread(key);
    return open && kernel_look_skip(*looks);
}

/* A poll of one accelerated socket (the fd and events of this thread's
 * current one) waits as a blocking call does (wait_poll_one). */
static _Thread_local struct pollfd poll_one;

static bool poll_one_ready(struct tcp_sock *t)
{
    return stream_poll(t, poll_one.fd, poll_one.events) != 0;
}

/* 1: look again; 0: sleep on the companion; -EINTR.  Not with a signal
 * mask to apply for the sleep (ppoll's), which only the kernel's wait sets
 * atomically. */
static int poll_one_wait(struct fdref *ref, struct pollfd *p, const sigset_t *mask, const struct deadline *dl)
{
    struct tcp_sock *t = p->fd >= 0 && !mask ? accelerated(ref) : NULL;
    if (!t)
        return 0;
    poll_one = *p;
    struct timespec left;
    return wait_poll_one(t, p->fd, poll_one_ready, wants(p->events), deadline_left(dl, &left));
}

/* poll over fds with their fd table entries looked up already (refs, one
 * reference each, which this call puts); any: one of them is accelerated or
 * an epoll set with accelerated members. */
static int poll_looked_up(struct pollfd *fds, struct fdref *refs, nfds_t n, bool any, const struct timespec *tmo,
                          const sigset_t *mask)
{
    struct pollfd stack_k[2 * STACK_FDS + 2];
    int stack_lw[STACK_FDS];
    /* the fds as the kernel waits on them, the local wake, then the wakes
     * from other processes of the accelerated ones (xwake.c), then the
     * engine's wake-up fd of the fabric ones */
    struct pollfd *k = stack_k;
    int *lw = stack_lw;
    int result;
    if (n > STACK_FDS) {
        k = malloc((2 * n + 2) * sizeof *k);
        lw = malloc(n * sizeof *lw);
        if (!k || !lw) {
            free(k);
            free(lw);
            k = stack_k;   /* not to be freed below */
            result = kernel_ppoll(fds, n, tmo, mask);
            goto out;
        }
    }
    if (!any) {
        uint64_t started = tmo ? clock_now_ns() : 0;
        result = kernel_ppoll(fds, n, tmo, mask);
        if (result > 0 && claims_landed(fds, refs, n, &result) && result == 0) {
            /* every fd it named was a client whose claim rang meanwhile:
             * wait again, through the channel, for what is left of tmo */
            struct timespec left;
            result = readiness_poll(fds, n, time_left(tmo, started, &left), mask);
        }
        goto out;
    }
    if (!timeout_valid(tmo)) {
        result = -EINVAL;
        goto out;
    }

    /* A zero timeout never takes turns: the kernel's poll(0) never yields
     * either (architecture.md, "Taking turns"). */
    bool zero_wait = tmo && tmo->tv_sec == 0 && tmo->tv_nsec == 0;
    if (!zero_wait)
        turn_take();
    struct deadline dl;
    deadline_start(&dl, tmo);
    static const struct timespec zero = { 0, 0 };
    struct backoff bo = { 0 };
    unsigned handlers_ran = shunt_sig_ran;
    bool one_waited = n != 1;
    for (;;) {
        int count = 0;
        for (nfds_t i = 0; i < n; i++) {
            int rev = ours(&refs[i], &fds[i]);
            fds[i].revents = rev > 0 ? (short)rev : 0;
            if (rev > 0)
                count++;
            /* the kernel is asked about the others only (below) */
            k[i] = fds[i];
            if (rev >= 0)
                k[i].fd = -1;
        }
        if (count > 0 || zero_wait || deadline_passed(&dl)) {
            /* the other fds, without waiting */
            struct kernel_looks *looks = NULL;
            if (zero_wait && kernel_left_out(k, n, &looks)) {
                result = count;
                goto out;
            }
            struct look_stamp asked = looks ? kernel_look_stamp() : (struct look_stamp){ 0, 0 };
            int r = kernel_ppoll(k, n, &zero, NULL);
            if (looks)
                kernel_look_asked(looks, asked, r != 0);
            if (r < 0 && count == 0) {
                result = r;
                goto out;
            }
            for (nfds_t i = 0; r > 0 && i < n; i++)
                if (k[i].fd >= 0 && (fds[i].revents = (short)readiness_settled(&refs[i], fds[i].events, k[i].revents)))
                    count++;
            result = count;
            goto out;
        }

        if (!one_waited) {
            one_waited = true;
            int w = poll_one_wait(&refs[0], &fds[0], mask, &dl);
            if (w < 0) {
                result = w;
                goto out;
            }
            if (w > 0)
                continue;
        }

        bool ready = false;
        bool busy = false;   /* the local wake is being emptied: look again soon */
        k[n] = (struct pollfd){ .fd = -1, .events = POLLIN };
        k[2 * n + 1] = (struct pollfd){ .fd = -1, .events = POLLIN };
        bool fabric_nap = false;   /* a fabric member could not arm the engine: a short sleep */
        for (nfds_t i = 0; i < n; i++) {
            struct tcp_sock *t = fds[i].fd >= 0 ? accelerated(&refs[i]) : NULL;
            struct tcp_sock *ft = fds[i].fd >= 0 && !t ? fabric_of(&refs[i]) : NULL;
            k[i] = fds[i];
            lw[i] = -1;   /* not entered */
            k[n + 1 + i] = (struct pollfd){ .fd = -1, .events = POLLIN };
            if (ft) {
                /* the stream says it sleeps; its socket is watched for what
                 * the socket itself can tell, the engine's fd for the rest */
                int efd = -1;
                short sock_events = 0;
                ready |= fabric_conn_before_sleep(ft, fds[i].fd, fds[i].events, &efd, &sock_events) != 0;
                k[i].events = sock_events;
                if (efd >= 0)
                    k[2 * n + 1].fd = efd;
                else if (efd != FABRIC_SOCKET_ONLY)
                    fabric_nap = true;
            } else if (t) {
                /* a shutdown of t by another thread wakes us through the
                 * local wake, by another process through the end's wake */
                int efd = -1;
                lw[i] = doorbell_enter_local(t, wants(fds[i].events), &efd, &k[n + 1 + i].fd);
                if (lw[i] == LW_ON)
                    k[n].fd = efd;
                busy |= lw[i] == LW_BUSY || channel_resend_pending(&t->ch);   /* it rings nothing */
                k[i].events = POLLIN | POLLRDHUP;
            } else if (fds[i].fd >= 0 && nested_epoll(&refs[i])) {
                ready |= epoll_before_sleep(refs[i].sock);   /* its members ask for doorbells */
            }
        }
        /* armed: anything produced from now on rings; look once more */
        for (nfds_t i = 0; i < n && !ready; i++) {
            struct tcp_sock *t = fds[i].fd >= 0 ? accelerated(&refs[i]) : NULL;
            ready = t && stream_poll(t, fds[i].fd, fds[i].events);
        }
        struct timespec left;
        const struct timespec *sleep_for = deadline_left(&dl, &left);
        static const struct timespec busy_cap = { 0, 1000000 };
        static const struct timespec fabric_cap = { 0, 100000000 };   /* every fabric wait is bounded */
        if (k[2 * n + 1].fd >= 0 &&
            (!sleep_for || sleep_for->tv_sec > 0 || sleep_for->tv_nsec > fabric_cap.tv_nsec))
            sleep_for = &fabric_cap;
        busy |= fabric_nap;
        if (busy && (!sleep_for || sleep_for->tv_sec > 0 || sleep_for->tv_nsec > busy_cap.tv_nsec))
            sleep_for = &busy_cap;
        /* a handler that ran meanwhile (deferred to the end of a critical
         * section) ends the call as the kernel's sleep would: poll and select
         * are never restarted */
        int r = ready ? 0 : shunt_sig_ran != handlers_ran ? -EINTR
                          : kernel_ppoll(k, 2 * n + 2, sleep_for, mask);
        if (!ready)
            turn_gave_way(clock_now_ns());
        if (r > 0 && k[n].fd >= 0 && (k[n].revents & POLLNVAL))
            wait_local_lost(k[n].fd);
        int count2 = 0;
        for (nfds_t i = 0; i < n; i++) {
            /* left as entered, even if the socket left the channel meanwhile */
            struct tcp_sock *t = lw[i] >= 0 ? tcp_of(refs[i].sock) : NULL;
            if (t) {
                doorbell_leave_local(t, fds[i].fd, wants(fds[i].events), lw[i], k[n + 1 + i].fd);
                if (r > 0 && (k[i].revents & (POLLHUP | POLLERR | POLLRDHUP)))
                    doorbell_check_end(t, fds[i].fd);
            } else if (r > 0 && k[i].revents && !(fds[i].fd >= 0 && (nested_epoll(&refs[i]) || fabric_of(&refs[i])))) {
                fds[i].revents = (short)readiness_settled(&refs[i], fds[i].events, k[i].revents);
                count2 += fds[i].revents != 0;
            }
        }
        if (r < 0) {
            result = r;
            goto out;
        }
        if (count2 > 0) {
            for (nfds_t i = 0; i < n; i++) {
                if (k[i].fd >= 0 && !accelerated(&refs[i]) && !nested_epoll(&refs[i]) && !fabric_of(&refs[i]))
                    continue;
                int rev = ours(&refs[i], &fds[i]);
                if (rev > 0) {
                    fds[i].revents = (short)rev;
                    count2++;
                }
            }
            result = count2;
            goto out;
        }
        if (r > 0 && !ready && k[2 * n + 1].fd < 0 && !fabric_nap)
            backoff_fruitless(&bo);   /* (a fabric member's news comes by the engine or its socket: no backoff) */   /* woken by a doorbell meant for another holder */
    }
out:
    for (nfds_t i = 0; i < n; i++)
        fdt_put(&refs[i]);
    if (k != stack_k) {
        free(k);
        free(lw);
    }
    return result;
}

int readiness_poll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask)
{
    struct fdref stack_refs[STACK_FDS];
    struct fdref *refs = n > STACK_FDS ? malloc(n * sizeof *refs) : stack_refs;
    if (!refs)
        return kernel_ppoll(fds, n, tmo, mask);
    bool any = false, offered_any = false;
    for (nfds_t i = 0; i < n; i++) {
        refs[i] = look_up(fds[i].fd);
        if (!refs[i].sock)
            continue;
        tcp_socket_watched(refs[i].sock, fds[i].fd);
        if (fds[i].fd >= 0 && (accelerated(&refs[i]) || fabric_of(&refs[i]) || nested_epoll(&refs[i])))
            any = true;
        offered_any |= offered(&refs[i]);
    }
    int result;
    if (!any && !offered_any) {
        /* nothing of ours, no claim to land: the kernel's answer is the
         * program's (a listener's readiness is the kernel's accept queue) */
        result = kernel_ppoll(fds, n, tmo, mask);
        for (nfds_t i = 0; i < n; i++)
            fdt_put(&refs[i]);
    } else {
        result = poll_looked_up(fds, refs, n, any, tmo, mask);
    }
    if (refs != stack_refs)
        free(refs);
    return result;
}

/*
 * select's sets, a word at a time: a zero-timeout select loop went through
 * nfds bits five times (routing, counting, building, clearing three sets),
 * a third of its cost.
 */
#define WORD_BITS (8 * (int)sizeof(long))

static void bit_set(fd_set *s, int fd)
{
    s->fds_bits[fd / WORD_BITS] |= 1UL << (fd % WORD_BITS);
}

static bool bit_isset(const fd_set *s, int fd)
{
    return s && (s->fds_bits[fd / WORD_BITS] & (1UL << (fd % WORD_BITS)));
}

/* The fds below nfds in word w of any of the three sets. */
static unsigned long asked_in_word(const fd_set *r, const fd_set *w, const fd_set *e, int nfds, int word)
{
    unsigned long m = (r ? r->fds_bits[word] : 0) | (w ? w->fds_bits[word] : 0) | (e ? e->fds_bits[word] : 0);
    int below = nfds - word * WORD_BITS;
    return below >= WORD_BITS ? m : m & ((1UL << below) - 1);
}

static int words_of(int nfds)
{
    return (nfds + WORD_BITS - 1) / WORD_BITS;
}

/* What select reports of the answers in p[count] (the sets cleared and
 * filled in); -EBADF for a closed fd.  The kernel writes back whole words
 * of each set, zero but for the ready fds: so do we. */
static int select_bits(const struct pollfd *p, int count, int nfds, fd_set *r, fd_set *w, fd_set *e)
{
    for (int i = 0; i < count; i++)
        if (p[i].revents & POLLNVAL)
            return -EBADF;
    fd_set *sets[3] = { r, w, e };
    for (int s = 0; s < 3; s++)
        if (sets[s])
            for (int word = 0; word < words_of(nfds); word++)
                sets[s]->fds_bits[word] = 0;
    int bits = 0;
    for (int i = 0; i < count; i++) {
        short rev = p[i].revents;
        int fd = p[i].fd;
        if (r && (p[i].events & POLLIN) && (rev & (POLLIN | POLLHUP | POLLERR))) {
            bit_set(r, fd);
            bits++;
        }
        if (w && (p[i].events & POLLOUT) && (rev & (POLLOUT | POLLERR))) {
            bit_set(w, fd);
            bits++;
        }
        if (e && (p[i].events & POLLPRI) && (rev & POLLPRI)) {
            bit_set(e, fd);
            bits++;
        }
    }
    return bits;
}

/* The timeout of a select (tv: written back with the time left, as Linux
 * does) or a pselect (ts); EINVAL for one the kernel would refuse. */
static int select_timeout(const struct select_time *st, struct timespec *ts, const struct timespec **tmo)
{
    *tmo = st->ts;
    if (st->tv) {
        if (st->tv->tv_sec < 0 || st->tv->tv_usec < 0 || st->tv->tv_usec >= 1000000)
            return -EINVAL;
        *ts = (struct timespec){ st->tv->tv_sec, st->tv->tv_usec * 1000 };
        *tmo = ts;
    }
    return timeout_valid(*tmo) ? 0 : -EINVAL;
}

/* One pass over the sets makes the poll array and looks each fd up once:
 * the lookups are the poll's too (a zero-timeout select loop is as cheap
 * as poll's). */
int readiness_select(int nfds, fd_set *r, fd_set *w, fd_set *e, const struct select_time *st, const sigset_t *mask)
{
    if (nfds < 0)
        return READINESS_KERNELS;
    int count = 0;
    for (int word = 0; word < words_of(nfds); word++)
        count += __builtin_popcountl(asked_in_word(r, w, e, nfds, word));
    struct pollfd stack_p[STACK_FDS];   /* a zero-timeout loop makes no malloc */
    struct fdref stack_refs[STACK_FDS];
    struct pollfd *p = stack_p;
    struct fdref *refs = stack_refs;
    if (count > STACK_FDS) {
        p = malloc((size_t)count * sizeof *p);
        refs = malloc((size_t)count * sizeof *refs);
        if (!p || !refs) {
            free(p);
            free(refs);
            return READINESS_KERNELS;   /* the kernel's answer is right, only slower */
        }
    }
    bool any = false, offered_only = false;
    int i = 0;
    for (int word = 0; word < words_of(nfds); word++) {
        for (unsigned long m = asked_in_word(r, w, e, nfds, word); m; m &= m - 1) {
            int fd = word * WORD_BITS + __builtin_ctzl(m);
            short ev = (short)((bit_isset(r, fd) ? POLLIN : 0) | (bit_isset(w, fd) ? POLLOUT : 0) |
                               (bit_isset(e, fd) ? POLLPRI : 0));
            p[i] = (struct pollfd){ .fd = fd, .events = ev };
            refs[i] = look_up(fd);
            if (refs[i].sock) {
                tcp_socket_watched(refs[i].sock, fd);
                any |= accelerated(&refs[i]) != NULL || fabric_of(&refs[i]) != NULL || nested_epoll(&refs[i]);
                offered_only |= offered(&refs[i]);
            }
            i++;
        }
    }
    int n = READINESS_KERNELS;
    if (any || offered_only) {
        struct timespec ts, left;
        const struct timespec *tmo;
        n = select_timeout(st, &ts, &tmo);
        if (n == 0) {
            /* a zero timeout leaves nothing to count down: no clock read */
            bool zero = tmo && tmo->tv_sec == 0 && tmo->tv_nsec == 0;
            struct deadline dl;
            if (!zero)
                deadline_start(&dl, tmo);
            n = poll_looked_up(p, refs, (nfds_t)count, any, tmo, mask);
            count = 0;   /* poll_looked_up put the references */
            if (st->tv && !zero) {   /* Linux's select reports the time it did not use */
                deadline_left(&dl, &left);
                st->tv->tv_sec = left.tv_sec;
                st->tv->tv_usec = left.tv_nsec / 1000;
            }
            if (n >= 0)
                n = select_bits(p, i, nfds, r, w, e);
        }
    }
    for (int j = 0; j < count; j++)
        fdt_put(&refs[j]);
    if (p != stack_p) {
        free(p);
        free(refs);
    }
    return n;
}
