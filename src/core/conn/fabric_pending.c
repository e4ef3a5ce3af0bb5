/*
 * fabric_pending.c: the family's page of pending hellos (fabric_pending.h):
 * which holder of an accepted socket sends the server's hello, decided
 * once under a compare-and-swap in a page that fork hands down.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/real.h"
#include "base/self.h"
#include "base/pid_gone.h"
#include "core/conn/fabric_pending.h"

#define SLOTS 1024
#define HOLDERS 6
#define STATE_PENDING 0u
#define STATE_NONE 0xffffffffu   /* otherwise: the pid that claimed it */

struct slot {
    _Atomic uint64_t key;                /* the socket's cookie; 0: free */
    _Atomic uint32_t state;
    _Atomic uint32_t forks;              /* forks under way in holders */
    _Atomic uint32_t holder[HOLDERS];    /* pids; 0: none */
    _Atomic uint64_t read;               /* the client's bytes the holders read before the hello */
};

static struct slot *_Atomic page;

static struct slot *the_page(void)
{
    struct slot *p = atomic_load(&page);
    if (p)
        return p;
    void *m = mmap(NULL, SLOTS * sizeof(struct slot), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    struct slot *none = NULL;
    if (!atomic_compare_exchange_strong(&page, &none, (struct slot *)m)) {
        munmap(m, SLOTS * sizeof(struct slot));
        return none;
    }
    return m;
}

/* The socket's slot, if it is still the socket's. */
static struct slot *slot_of(const struct fabric_pending *p)
{
    struct slot *pg = atomic_load(&page);
    if (!pg || !p->key || p->slot >= SLOTS)
        return NULL;
    struct slot *s = &pg[p->slot];
    return atomic_load(&s->key) == p->key ? s : NULL;
}

/* Whether a holder other than me is alive. */
static bool others_alive(struct slot *s, uint32_t me)
{
    for (int i = 0; i < HOLDERS; i++) {
        uint32_t h = atomic_load(&s->holder[i]);
        if (h && h != me && !pid_gone(h))
            return true;
    }
    return false;
}

static bool all_gone(struct slot *s)
{
    for (int i = 0; i < HOLDERS; i++) {
        uint32_t h = atomic_load(&s->holder[i]);
        if (h && !pid_gone(h))
            return false;
    }
    return true;
}

static void set_none(struct slot *s)
{
    uint32_t want = STATE_PENDING;
    atomic_compare_exchange_strong(&s->state, &want, STATE_NONE);
}

/* pid becomes a holder (once); with no entry left (a dead one is reused),
 * the socket is nobody's to claim. */
static void add_holder(struct slot *s, uint32_t pid)
{
    for (int i = 0; i < HOLDERS; i++)
        if (atomic_load(&s->holder[i]) == pid)
            return;
    for (int i = 0; i < HOLDERS; i++) {
        uint32_t h = 0;
        if (atomic_compare_exchange_strong(&s->holder[i], &h, pid))
            return;
    }
    for (int i = 0; i < HOLDERS; i++) {
        uint32_t h = atomic_load(&s->holder[i]);
        if (pid_gone(h) && atomic_compare_exchange_strong(&s->holder[i], &h, pid))
            return;
    }
    set_none(s);
}

static bool take_slot(struct slot *s, uint64_t key, uint64_t was)
{
    if (!atomic_compare_exchange_strong(&s->key, &was, key))
        return false;
    atomic_store(&s->state, STATE_PENDING);
    atomic_store(&s->forks, 0);
    atomic_store(&s->read, 0);
    for (int i = 0; i < HOLDERS; i++)
        atomic_store(&s->holder[i], 0);
    atomic_store(&s->holder[0], (uint32_t)shunt_pid);
    return true;
}

bool fabric_pending_open(struct fabric_pending *p, uint64_t key)
{
    p->key = 0;
    struct slot *pg = the_page();
    if (!pg || !key)
        return false;
    for (uint32_t i = 0; i < SLOTS; i++)
        if (take_slot(&pg[i], key, 0)) {
            p->slot = i;
            p->key = key;
            return true;
        }
    /* full: a slot whose holders all died without closing is free again */
    for (uint32_t i = 0; i < SLOTS; i++) {
        uint64_t was = atomic_load(&pg[i].key);
        if (was && all_gone(&pg[i]) && take_slot(&pg[i], key, was)) {
            p->slot = i;
            p->key = key;
            return true;
        }
    }
    return false;
}

bool fabric_pending_claim(const struct fabric_pending *p)
{
    uint32_t me = (uint32_t)shunt_pid;
    uint64_t deadline = 0;
    for (;;) {
        struct slot *s = slot_of(p);
        if (!s)
            return false;
        uint32_t st = atomic_load(&s->state);
        if (st == me)
            return true;   /* another thread of this process claimed it */
        if (st != STATE_PENDING)
            return false;
        if (atomic_load(&s->forks) == 0 && !others_alive(s, me)) {
            if (atomic_compare_exchange_strong(&s->state, &st, me))
                return true;
            continue;
        }
        uint64_t now = clock_now_ns();
        if (!deadline) {
            deadline = now + FABRIC_PENDING_WAIT_NS;
        } else if (now >= deadline) {
            set_none(s);
            continue;
        }
        struct timespec ms = { 0, 1000 * 1000 };
        nanosleep(&ms, NULL);
    }
}

void fabric_pending_count_read(const struct fabric_pending *p, uint64_t n)
{
    struct slot *s = slot_of(p);
    if (s)
        atomic_fetch_add(&s->read, n);
}

uint64_t fabric_pending_read(const struct fabric_pending *p)
{
    struct slot *s = slot_of(p);
    return s ? atomic_load(&s->read) : 0;
}

void fabric_pending_none(const struct fabric_pending *p)
{
    struct slot *s = slot_of(p);
    if (s)
        set_none(s);
}

void fabric_pending_drop(const struct fabric_pending *p)
{
    struct slot *s = slot_of(p);
    if (!s)
        return;
    uint32_t me = (uint32_t)shunt_pid;
    bool left = false;
    for (int i = 0; i < HOLDERS; i++) {
        uint32_t h = me;
        atomic_compare_exchange_strong(&s->holder[i], &h, 0);
        left |= atomic_load(&s->holder[i]) != 0;
    }
    uint64_t key = p->key;
    if (!left && atomic_load(&s->forks) == 0)
        atomic_compare_exchange_strong(&s->key, &key, 0);   /* nobody holds it: free */
}

void fabric_pending_before_fork(const struct fabric_pending *p)
{
    struct slot *s = slot_of(p);
    if (s)
        atomic_fetch_add(&s->forks, 1);
}

void fabric_pending_after_fork(const struct fabric_pending *p, pid_t pid)
{
    struct slot *s = slot_of(p);
    if (!s)
        return;
    if (pid == 0) {
        add_holder(s, (uint32_t)shunt_pid);
        return;
    }
    if (pid > 0)
        add_holder(s, (uint32_t)pid);
    atomic_fetch_sub(&s->forks, 1);
}
