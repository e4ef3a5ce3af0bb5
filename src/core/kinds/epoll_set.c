/*
 * epoll_set.c: the table of an epoll set's members that are shunt's (see
 * epoll_set.h): slots, the fd index, the hot list, doorbell requests of
 * cold members, and the journal shared across fork.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/clock.h"
#include "base/real.h"
#include "base/self.h"
#include "core/fd/fdtable.h"
#include "core/kinds/epoll_set.h"
#include "core/wait/wait.h"
#include "core/wait/xwake.h"

/*
 * After fork, parent and child hold one kernel epoll set but each its own
 * table of our members.  The kernel sees every EPOLL_CTL_ADD, MOD and DEL
 * of an accelerated member only as a tagged registration, so each process
 * also writes them into a journal in memory both share (mapped before the
 * fork), and applies the others' records before its next wait or change.
 * A reader that falls more than JOURNAL_RECORDS behind loses the oldest.
 */
#define JOURNAL_RECORDS 63

struct ctl_record {
    _Atomic uint64_t seq;        /* its position + 1 once written; 0 while being written */
    int32_t pid, op, fd;
    uint32_t events;
    uint64_t data, inode;
};

struct ctl_journal {
    _Atomic uint64_t head;       /* records written so far */
    uint64_t pad[7];
    struct ctl_record r[JOURNAL_RECORDS];
};

static bool grow(void **p, uint32_t *cap, uint32_t need, size_t size)
{
    if (need <= *cap)
        return true;
    uint32_t c = *cap ? *cap : 8;
    while (c < need)
        c *= 2;
    void *n = realloc(*p, (size_t)c * size);
    if (!n)
        return false;
    memset((char *)n + (size_t)*cap * size, 0, (size_t)(c - *cap) * size);
    *p = n;
    *cap = c;
    return true;
}

void epoll_set_hot_add(struct epoll_obj *ep, struct ep_entry *e)
{
    if (e->hot_pos != EPOLL_SET_NO_SLOT || e->off)
        return;
    if (ep->nhot == ep->caphot && !grow((void **)&ep->hot, &ep->caphot, ep->nhot + 1, sizeof *ep->hot))
        return;   /* cannot happen once the slot exists: hot[] is grown with the slots */
    e->hot_pos = ep->nhot;
    ep->hot[ep->nhot++] = (uint32_t)(e - ep->v);
    e->idle = 0;
    e->active_ns = clock_now_ns();
}

void epoll_set_hot_remove(struct epoll_obj *ep, struct ep_entry *e)
{
    if (e->hot_pos == EPOLL_SET_NO_SLOT)
        return;
    uint32_t last = ep->hot[--ep->nhot];
    ep->hot[e->hot_pos] = last;
    ep->v[last].hot_pos = e->hot_pos;
    e->hot_pos = EPOLL_SET_NO_SLOT;
}

/* Takes the doorbell request back; drains what was rung only if the fd is
 * still this socket's (a closed fd number may name another file now). */
void epoll_set_disarm(struct epoll_obj *ep, struct ep_entry *e, bool fd_valid)
{
    if (!e->armed)
        return;
    xwake_drop(e->xkeep);
    e->xkeep = -1;
    if (fd_valid)
        doorbell_leave(epoll_set_sock_of(e), e->io_fd, e->armed);
    else
        doorbell_forget(epoll_set_sock_of(e), e->armed);
    e->armed = 0;
    ep->cold--;
}

void epoll_set_make_hot(struct epoll_obj *ep, struct ep_entry *e)
{
    epoll_set_disarm(ep, e, true);
    epoll_set_hot_add(ep, e);
}

/* The doorbells a wait for this member's events needs. */
static int entry_wants(const struct ep_entry *e)
{
    int w = 0;
    if (e->events & (EPOLLIN | EPOLLRDNORM | EPOLLPRI | EPOLLRDHUP))
        w |= WANT_DATA;
    if (e->events & (EPOLLOUT | EPOLLWRNORM))
        w |= WANT_SPACE;
    return w ? w : WANT_DATA;
}

void epoll_set_make_cold(struct epoll_obj *ep, struct ep_entry *e)
{
    epoll_set_hot_remove(ep, e);
    int w = entry_wants(e);
    doorbell_enter(epoll_set_sock_of(e), w);
    e->armed = w;
    ep->cold++;
    if (xwake_shared(epoll_set_sock_of(e)) || atomic_load_explicit(&epoll_forking, memory_order_relaxed))
        epoll_set_watch_xwake(ep, e);
}

atomic_int epoll_forking;

bool epoll_set_fd_names(int fd, struct shunt_sock *s)
{
    /* not fdt_get: a member that fell back to kernel TCP is settled there,
     * and fdt_get answers passthrough for it: it looked closed (ep_sweep_closed
     * then dropped it with its tagged registration still in the kernel, and
     * its events were thrown away: epoll_fallback_close) */
    return fdt_holds(fd, s);
}

/*
 * Another process holding the member's end may shut it down, which rings
 * no doorbell.  The kernel's shutdown wakes every epoll set holding the
 * socket, so a cold member of a shared end keeps the end's wake FIFO open
 * (opened before the caller's last look at the member) and registered in
 * the kernel set under the member's fd, edge-triggered: a wake makes it
 * report EPOLLHUP once, which names the member.  The member turning hot
 * closes it, and the kernel takes it out of the set with its last fd.
 */
void epoll_set_watch_xwake(struct epoll_obj *ep, struct ep_entry *e)
{
    if (!e->armed || e->xkeep >= 0 || e->kind != M_SOCKET || !epoll_set_fd_names(ep->kfd, &ep->base))
        return;
    int h = xwake_keep(epoll_set_sock_of(e));
    struct epoll_event k = { .events = EPOLLIN | EPOLLET, .data.u64 = TAG_XWAKE << 32 | (uint32_t)e->fd };
    if (h >= 0 && shunt_real.epoll_ctl(ep->kfd, EPOLL_CTL_ADD, xwake_kept_fd(h), &k) == 0)
        e->xkeep = h;
    else
        xwake_drop(h);
}

void epoll_set_hold(struct ep_entry *e, struct shunt_sock *s, enum member_kind kind)
{
    sock_get(s);
    e->s = s;
    e->kind = (uint8_t)kind;
    if (kind == M_SOCKET)
        atomic_fetch_add(&tcp_of(s)->epoll_entries, 1);
}

void epoll_set_release_slot(struct epoll_obj *ep, struct ep_entry *e, bool fd_valid)
{
    epoll_set_disarm(ep, e, fd_valid);
    epoll_set_hot_remove(ep, e);
    if (e->kind == M_EPOLL)
        ep->nested--;
    else
        atomic_fetch_sub(&tcp_of(e->s)->epoll_entries, 1);
    if (e->pending)
        ep->pending--;
    if (epoll_set_slot_for_fd(ep, e->fd) == e)
        ep->slot_of[e->fd] = 0;
    sock_put(e->s);
    e->s = NULL;
    ep->members--;
    ep->free_slots[ep->nfree++] = (uint32_t)(e - ep->v);
}

struct ep_entry *epoll_set_new_slot(struct epoll_obj *ep, int fd)
{
    if (!grow((void **)&ep->slot_of, &ep->nslot_of, (uint32_t)fd + 1, sizeof *ep->slot_of))
        return NULL;
    uint32_t i;
    if (ep->nfree) {
        i = ep->free_slots[--ep->nfree];
    } else {
        if (!grow((void **)&ep->v, &ep->capv, ep->nv + 1, sizeof *ep->v))
            return NULL;
        /* every slot can be free, or hot, at once */
        if (!grow((void **)&ep->free_slots, &ep->capfree, ep->capv, sizeof *ep->free_slots) ||
            !grow((void **)&ep->hot, &ep->caphot, ep->capv, sizeof *ep->hot) ||
            !grow((void **)&ep->woken, &ep->capwoken, ep->capv, sizeof *ep->woken))
            return NULL;
        i = ep->nv++;
    }
    struct ep_entry *e = &ep->v[i];
    memset(e, 0, sizeof *e);
    e->hot_pos = EPOLL_SET_NO_SLOT;
    e->xkeep = -1;
    e->fd = e->io_fd = fd;
    ep->slot_of[fd] = i + 1;
    ep->members++;
    return e;
}

void epoll_set_free(struct epoll_obj *ep)
{
    for (uint32_t i = 0; i < ep->nv; i++)
        if (ep->v[i].s)
            epoll_set_release_slot(ep, &ep->v[i], false);
    free(ep->v);
    free(ep->free_slots);
    free(ep->slot_of);
    free(ep->hot);
    free(ep->woken);
    epoll_set_journal_free(ep);
}

void epoll_set_member_reset(struct ep_entry *e, const struct epoll_event *ev)
{
    e->events = ev->events;
    e->data = ev->data;
    e->off = false;
    e->idle = 0;
    e->last = 0;
    e->last_rx = e->last_tx = 0;
    e->last_end = false;
}

/* ---- the journal ---- */

void epoll_set_journal_create(struct epoll_obj *ep)
{
    if (ep->journal)
        return;
    void *m = mmap(NULL, sizeof(struct ctl_journal), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED)
        ep->journal = m;
}

void epoll_set_journal_free(struct epoll_obj *ep)
{
    if (ep->journal)
        munmap(ep->journal, sizeof *ep->journal);
    ep->journal = NULL;
}

void epoll_set_journal_append(struct epoll_obj *ep, int op, int fd, const struct epoll_event *ev, uint64_t inode)
{
    struct ctl_journal *j = ep->journal;
    if (!j || !inode)
        return;
    uint64_t at = atomic_fetch_add(&j->head, 1);
    struct ctl_record *r = &j->r[at % JOURNAL_RECORDS];
    atomic_store_explicit(&r->seq, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    r->pid = shunt_pid;
    r->op = op;
    r->fd = fd;
    r->events = ev ? ev->events : 0;
    r->data = ev ? ev->data.u64 : 0;
    r->inode = inode;
    atomic_store_explicit(&r->seq, at + 1, memory_order_release);
    ep->applied = ep->applied == at ? at + 1 : ep->applied;
}

static void journal_apply_one(struct epoll_obj *ep, const struct ctl_record *r)
{
    struct epoll_event ev = { .events = r->events, .data.u64 = r->data };
    struct ep_entry *e = epoll_set_slot_for_fd(ep, r->fd);
    if (e && (e->kind != M_SOCKET || tcp_of(e->s)->inode != r->inode))
        return;   /* that number names something else here */
    if (r->op == EPOLL_CTL_ADD && !e) {
        struct fdref f = fdt_get(r->fd);
        if (f.sock && f.sock->kind == SOCK_TCP && tcp_of(f.sock)->inode == r->inode &&
            tcp_path_member(atomic_load(&tcp_of(f.sock)->path)) && (e = epoll_set_new_slot(ep, r->fd))) {
            epoll_set_hold(e, f.sock, M_SOCKET);
            epoll_set_member_reset(e, &ev);
            epoll_set_hot_add(ep, e);
        }
        fdt_put(&f);
    } else if (r->op == EPOLL_CTL_MOD && e) {
        epoll_set_member_reset(e, &ev);
        epoll_set_make_hot(ep, e);
    } else if (r->op == EPOLL_CTL_DEL && e) {
        epoll_set_release_slot(ep, e, true);
    }
}

/* Applies what the other processes sharing this set changed.  Caller holds ep->lock. */
void epoll_set_journal_apply(struct epoll_obj *ep)
{
    struct ctl_journal *j = ep->journal;
    if (!j)
        return;
    uint64_t head = atomic_load_explicit(&j->head, memory_order_acquire);
    if (head - ep->applied > JOURNAL_RECORDS)
        ep->applied = head - JOURNAL_RECORDS;
    for (; ep->applied < head; ep->applied++) {
        const struct ctl_record *r = &j->r[ep->applied % JOURNAL_RECORDS];
        uint64_t want = ep->applied + 1;
        for (int spins = 0; atomic_load_explicit(&r->seq, memory_order_acquire) < want && spins < 100000; spins++)
            wait_cpu_relax();   /* its writer is between two stores */
        struct ctl_record copy;
        memcpy(&copy, (const void *)r, sizeof copy);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load(&copy.seq) != want || atomic_load(&r->seq) != want || copy.pid == shunt_pid)
            continue;   /* overwritten meanwhile, or our own */
        journal_apply_one(ep, &copy);
    }
}
