/*
 * fdtable.c: the fd table.
 *
 * Two levels: a directory with one pointer per chunk of 1024 slots, sized
 * for every fd the kernel can hand out (fs.nr_open, at least RLIMIT_NOFILE),
 * and chunks mapped on first use.  The directory never moves and chunks are
 * never freed, so lookups are lock-free and signal-safe, and the table grows
 * with the fds actually in use rather than with the limit.
 *
 * Object lifetime: a reader announces itself in the slot's inflight counter
 * before it trusts the pointer; a closer swaps the pointer out and waits for
 * inflight to drain before it drops the table's reference.  Holders of a
 * reference (a blocked recv, say) keep the object alive past close.
 */
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "core/fd/fdtable.h"
#include "base/log.h"
#include "base/signals.h"
#include "core/fd/passthrough.h"
#include "core/fd/uring_watch.h"
#include "base/real.h"
#include "registry/procstat.h"

SHUNT_TLS bool shunt_in_vfork_child;   /* set and cleared by interpose/vfork.c */

_Atomic(struct slot *) *fdt_directory;
size_t fdt_directory_chunks;
#define directory fdt_directory
#define directory_chunks fdt_directory_chunks

static void *map_zeroed(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static long read_nr_open(void)
{
    int fd = open("/proc/sys/fs/nr_open", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[32];
    ssize_t n = shunt_real.read(fd, buf, sizeof buf - 1);
    shunt_real.close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    return strtol(buf, NULL, 10);
}

static inline struct slot *chunk_for(size_t c, bool create)
{
    struct slot *chunk = atomic_load_explicit(&directory[c], memory_order_acquire);
    if (chunk || !create)
        return chunk;
    struct slot *fresh = map_zeroed(CHUNK_SLOTS * sizeof(struct slot));
    if (!fresh)
        return NULL;
    /* release: the zeroed chunk is visible before its pointer (pairs with the acquire above) */
    if (atomic_compare_exchange_strong_explicit(&directory[c], &chunk, fresh, memory_order_acq_rel,
                                                memory_order_acquire))
        return fresh;
    munmap(fresh, CHUNK_SLOTS * sizeof(struct slot));
    return chunk;
}

/* Every fd whose slot was ever handed out for a lookup or a change is at
 * most this: the walks over the table (at exit, close_range, fork and exec)
 * stop here instead of at the limit, so a process that never had a socket
 * pays nothing for them (20,000 slots read at exit cost /bin/true some 80
 * page faults and 340,000 instructions).  It only grows; a stale larger
 * value costs a longer walk, never a missed slot, because it moves before
 * the slot it covers can be written. */
static atomic_uint highest_fd;

static inline void cover(int fd)
{
    unsigned cur = atomic_load_explicit(&highest_fd, memory_order_relaxed);
    while ((unsigned)fd > cur &&
           !atomic_compare_exchange_weak_explicit(&highest_fd, &cur, (unsigned)fd, memory_order_seq_cst,
                                                  memory_order_relaxed))
        ;
}

static inline struct slot *slot_for(int fd, bool create)
{
    if (fd < 0 || !directory || shunt_in_vfork_child || shunt_sandboxed())
        return NULL;
    size_t c = (size_t)fd >> CHUNK_SHIFT;
    if (c >= directory_chunks)
        return NULL;
    struct slot *chunk = chunk_for(c, create);
    if (!chunk)
        return NULL;
    cover(fd);
    return &chunk[fd & (CHUNK_SLOTS - 1)];
}

void fdt_init(void)
{
    struct rlimit rl = { 0, 0 };
    getrlimit(RLIMIT_NOFILE, &rl);
    long cap = read_nr_open();
    if (rl.rlim_max != RLIM_INFINITY && (long)rl.rlim_max > cap)
        cap = (long)rl.rlim_max;
    if (cap < 1 << 20)
        cap = 1 << 20;
    size_t chunks = ((size_t)cap + CHUNK_SLOTS - 1) >> CHUNK_SHIFT;
    _Atomic(struct slot *) *dir = map_zeroed(chunks * sizeof *dir);
    if (!dir) {
        shunt_log(LOG_ERROR, "fd table: no memory for %zu chunks; every fd passes through", chunks);
        return;
    }
    directory_chunks = chunks;
    atomic_store_explicit((_Atomic(void *) *)(void *)&directory, (void *)dir, memory_order_release);
    /* The first chunk now, where nearly every process's fds are; the others
     * at their first use (an mmap each: a process that starts pays for none
     * it never needs) */
    chunk_for(0, true);
}

static bool is_object(uintptr_t v) { return v >= FDT_SENTINELS; }
/* a socket the table knows: an object, or a connection kept without one */
static bool is_known_sock(uintptr_t v) { return is_object(v) || v == FDT_KERNEL_SOCK || fdt_is_lazy_value(v); }
static bool is_kernel_only(uintptr_t v) { return is_object(v) && (v & KERNEL_TAG); }
static struct shunt_sock *obj(uintptr_t v) { return (struct shunt_sock *)(v & ~KERNEL_TAG); }

/* Slots holding an object: the look for an io_uring fd shunt has not seen
 * (uring_watch.c) tells the kernel's other fds from these by count. */
static atomic_long object_slots;

static void count_slot(uintptr_t old, uintptr_t nv)
{
    if (is_known_sock(old) != is_known_sock(nv))
        atomic_fetch_add_explicit(&object_slots, is_known_sock(nv) ? 1 : -1, memory_order_relaxed);
}

long fdt_object_slots(void)
{
    return atomic_load_explicit(&object_slots, memory_order_relaxed);
}

static _Atomic(const struct fdt_probe_hooks *) probe_hooks;

void fdt_set_probe_hooks(const struct fdt_probe_hooks *h)
{
    atomic_store_explicit(&probe_hooks, h, memory_order_release);
}

static struct fdref passthrough_ref(int fd)
{
    return (struct fdref){ .fd = fd, .sock = NULL, .ops = &passthrough_ops };
}

/*
 * Probes run one at a time, each with the install of what it found: an fd
 * that is another fd of a socket this process already knows (dup'ed before
 * an exec: a shell's `<&4 >&4`) must find that socket's object in the table
 * and share it (tcp_socket_share), not make a second one, or the one hold
 * the process has on the channel would be let go of twice.  Recursive: a
 * probe may look other fds up.  Probes are rare (an fd's first use).
 */
static pthread_mutex_t probe_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

/* Decides what an fd the table has not seen is.  Only TCP sockets get an
 * object; *shared: one that another fd of this process already had. */
static uintptr_t probe(int fd, bool passed, bool *shared)
{
    struct stat st;
    *shared = false;
    if (fstat(fd, &st) < 0)
        return FDT_UNKNOWN;   /* closed or bad: the kernel will say so; remember nothing */
    if (!S_ISSOCK(st.st_mode)) {
        uring_check_fd(fd, &st);   /* a ring shunt had not seen (uring_watch.h) */
        return FDT_PASSTHROUGH;
    }
    const struct fdt_probe_hooks *h = atomic_load_explicit(&probe_hooks, memory_order_acquire);
    if (!h)
        return FDT_PASSTHROUGH;
    struct shunt_sock *s = h->share(fd, (uint64_t)st.st_ino, passed);
    if (s) {
        *shared = true;
        return (uintptr_t)s;
    }
    s = h->probe(fd, (uint64_t)st.st_ino, passed);
    return s ? (uintptr_t)s : FDT_PASSTHROUGH;
}

/* The table's count of fds on what probe found. */
static void count_fd(uintptr_t found, bool shared)
{
    if (!is_object(found))
        return;
    if (shared)
        atomic_fetch_add(&((struct shunt_sock *)found)->fds, 1);
    else
        atomic_store(&((struct shunt_sock *)found)->fds, 1);
}

/* Probes fd if its slot is still unknown and installs the answer; false if
 * the fd is closed or bad. */
static bool probe_unknown(int fd, struct slot *sl)
{
    bool ok = true, shared;
    crit_lock(&probe_lock);
    if (atomic_load(&sl->val) == FDT_UNKNOWN) {
        uintptr_t found = probe(fd, false, &shared);
        uintptr_t expected = FDT_UNKNOWN;
        ok = found != FDT_UNKNOWN;
        count_fd(found, shared);
        if (ok && atomic_compare_exchange_strong(&sl->val, &expected, found)) {
            count_slot(FDT_UNKNOWN, found);
        } else if (ok && is_object(found)) {
            /* the fd was closed and its number reused meanwhile */
            if (shared)
                atomic_fetch_sub(&((struct shunt_sock *)found)->fds, 1);
            sock_put((struct shunt_sock *)found);
        }
    }
    crit_unlock(&probe_lock);
    return ok;
}

void fdt_after_fork_child(void)
{
    /* another thread of the parent may have held it: it does not exist here */
    pthread_mutex_t fresh = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    memcpy(&probe_lock, &fresh, sizeof fresh);
}

/* Makes the object of fd's LAZY entry v; false if the entry changed
 * meanwhile (look again) or no object could be made (then fd passes through
 * as the kernel's: nothing was promised for it yet). */
static bool make_lazy(int fd, struct slot *sl, uintptr_t v)
{
    const struct fdt_probe_hooks *h = atomic_load_explicit(&probe_hooks, memory_order_acquire);
    struct shunt_sock *s = h && h->make ? h->make(fd, v) : NULL;
    uintptr_t expected = v;
    if (!s) {
        if (atomic_compare_exchange_strong(&sl->val, &expected, FDT_PASSTHROUGH))
            count_slot(v, FDT_PASSTHROUGH);
        return false;
    }
    atomic_store(&s->fds, 1);
    if (atomic_compare_exchange_strong(&sl->val, &expected, (uintptr_t)s))
        return true;
    /* another thread made it first, or fd was closed: ours goes */
    atomic_store(&s->fds, 0);
    sock_put(s);
    return false;
}

struct fdref fdt_get(int fd)
{
    return fdt_get_marked(fd, NULL);
}

struct fdref fdt_get_marked(int fd, _Atomic(struct shunt_sock *) *mark)
{
    struct slot *sl = slot_for(fd, true);
    if (!sl)
        return passthrough_ref(fd);
    for (;;) {
        uintptr_t v = atomic_load_explicit(&sl->val, memory_order_acquire);
        if (v == FDT_UNKNOWN) {
            if (!probe_unknown(fd, sl))
                return passthrough_ref(fd);
            continue;
        }
        if (fdt_is_lazy_value(v)) {
            make_lazy(fd, sl, v);
            continue;
        }
        if (!is_object(v) || is_kernel_only(v))
            return passthrough_ref(fd);
        /* seq_cst: the increment must be visible before we re-read val,
         * as the closer's exchange must be before its read of inflight. */
        atomic_fetch_add(&sl->inflight, 1);
        if (atomic_load(&sl->val) == v) {
            struct shunt_sock *s = (struct shunt_sock *)v;
            sock_get(s);
            if (mark)   /* before the decrement a closer waits for: it sees the mark */
                atomic_store_explicit(mark, s, memory_order_relaxed);
            atomic_fetch_sub(&sl->inflight, 1);
            /* a lookup starts a call: the handlers it will see are counted from here */
            return (struct fdref){ .fd = fd, .sock = s, .ops = s->ops,
                                   .sig = { shunt_sig_ran, shunt_sig_ran_norestart } };
        }
        atomic_fetch_sub(&sl->inflight, 1);
    }
}

bool fdt_holds(int fd, const struct shunt_sock *s)
{
    struct slot *sl = slot_for(fd, false);
    if (!sl)
        return false;
    uintptr_t v = atomic_load_explicit(&sl->val, memory_order_acquire);
    return is_object(v) && obj(v) == s;
}

bool fdt_known_open(int fd)
{
    struct slot *sl = slot_for(fd, false);
    if (!sl)
        return false;
    uintptr_t v = atomic_load_explicit(&sl->val, memory_order_acquire);
    return v == FDT_PASSTHROUGH || is_known_sock(v);
}

void fdt_put(struct fdref *r)
{
    if (r->sock)
        sock_put(r->sock);
    r->sock = NULL;
}

static uintptr_t swap_out(struct slot *sl, uintptr_t nv)
{
    uintptr_t old = atomic_exchange(&sl->val, nv);
    count_slot(old, nv);
    if (is_object(old))
        while (atomic_load(&sl->inflight))
            sched_yield();
    return old;
}

void fdt_install(int fd, struct shunt_sock *s)
{
    struct slot *sl = slot_for(fd, true);
    if (!sl) {
        if (s) {
            shunt_log(LOG_WARN, "fd %d is beyond the fd table; it passes through", fd);
            sock_put(s);
        }
        return;
    }
    if (s)
        atomic_fetch_add(&s->fds, 1);
    uintptr_t old = swap_out(sl, s ? (uintptr_t)s : FDT_PASSTHROUGH);
    if (is_object(old))
        sock_put(obj(old));   /* a stale entry the kernel had already closed */
}

atomic_uint fdt_closes;

struct shunt_sock *fdt_close_begin(int fd)
{
    pt_kernel_touches++;   /* its other end may hang up, or it turns bad */
    struct slot *sl = slot_for(fd, false);
    if (!sl)
        return NULL;
    uintptr_t old = swap_out(sl, FDT_CLOSING);
    if (is_object(old))
        atomic_fetch_add(&fdt_closes, 1);
    return is_object(old) ? obj(old) : NULL;
}

void fdt_close_end(int fd)
{
    struct slot *sl = slot_for(fd, false);
    if (!sl)
        return;
    uintptr_t expected = FDT_CLOSING;
    /* An fd the kernel reused meanwhile has been installed already: keep that. */
    if (atomic_compare_exchange_strong(&sl->val, &expected, FDT_UNKNOWN) && !shunt_in_vfork_child)
        pst_clear(fd);   /* shunt stat's record of it */
}

void fdt_adopt_passed(int fd)
{
    struct slot *sl = slot_for(fd, true);
    if (!sl)
        return;
    bool shared;
    crit_lock(&probe_lock);
    uintptr_t found = probe(fd, true, &shared);
    count_fd(found, shared);
    uintptr_t old = swap_out(sl, found);
    crit_unlock(&probe_lock);
    if (is_object(old))
        sock_put(obj(old));
}

void fdt_settle_kernel(int fd, struct shunt_sock *s)
{
    struct slot *sl = slot_for(fd, false);
    if (!sl)
        return;
    uintptr_t expected = (uintptr_t)s;
    atomic_compare_exchange_strong(&sl->val, &expected, (uintptr_t)s | KERNEL_TAG);
}

/* A sentinel for a new fd (the kernel's number, free in its table). */
static void install_value(int fd, uintptr_t v)
{
    struct slot *sl = slot_for(fd, true);
    if (!sl)
        return;
    uintptr_t old = swap_out(sl, v);
    if (is_object(old))
        sock_put(obj(old));   /* a stale entry the kernel had already closed */
}

void fdt_install_kernel_sock(int fd)
{
    install_value(fd, FDT_KERNEL_SOCK);
}

void fdt_drop_settled(int fd, struct shunt_sock *s)
{
    struct slot *sl = slot_for(fd, false);
    if (!sl)
        return;
    uintptr_t expected = (uintptr_t)s | KERNEL_TAG;
    if (!atomic_compare_exchange_strong(&sl->val, &expected, FDT_KERNEL_SOCK))
        return;   /* closed or replaced meanwhile: that closer has it */
    /* lookups of a settled entry take no reference (is_kernel_only); one
     * that read the entry before it was settled finishes taking its own
     * before the table's reference goes, as swap_out waits */
    while (atomic_load(&sl->inflight))
        sched_yield();
    atomic_fetch_sub(&s->fds, 1);
    sock_put(s);
}

void fdt_install_lazy(int fd, uintptr_t lazy)
{
    install_value(fd, lazy);
}

uintptr_t fdt_lazy(int fd)
{
    struct slot *sl = slot_for(fd, false);
    uintptr_t v = sl ? atomic_load_explicit(&sl->val, memory_order_acquire) : 0;
    return fdt_is_lazy_value(v) ? v : 0;
}

bool fdt_lazy_set(int fd, uintptr_t bit, bool on)
{
    struct slot *sl = slot_for(fd, false);
    if (!sl)
        return false;
    uintptr_t v = atomic_load(&sl->val);
    while (fdt_is_lazy_value(v))
        if (atomic_compare_exchange_weak(&sl->val, &v, on ? v | bit : v & ~bit))
            return true;
    return false;
}

bool fdt_lazy_to_kernel(int fd, uintptr_t lazy)
{
    struct slot *sl = slot_for(fd, false);
    uintptr_t expected = lazy;
    return sl && atomic_compare_exchange_strong(&sl->val, &expected, FDT_KERNEL_SOCK);
}

bool fdt_is_kernel_sock(int fd)
{
    struct slot *sl = slot_for(fd, false);
    return sl && atomic_load_explicit(&sl->val, memory_order_acquire) == FDT_KERNEL_SOCK;
}

void fdt_forget(int fd)
{
    struct slot *sl = slot_for(fd, false);
    if (!sl)
        return;
    uintptr_t old = swap_out(sl, FDT_UNKNOWN);
    if (is_object(old))
        sock_put(obj(old));
}

void fdt_install_own(int fd)
{
    install_value(fd, FDT_OWN);
}

bool fdt_is_own(int fd)
{
    struct slot *sl = slot_for(fd, false);
    return sl && atomic_load_explicit(&sl->val, memory_order_acquire) == FDT_OWN;
}

bool fdt_has_object(int fd)
{
    struct slot *sl = slot_for(fd, false);
    return sl && is_known_sock(atomic_load_explicit(&sl->val, memory_order_acquire));
}

/* Visits the slots of [first, last] that exist; chunks never made hold nothing. */
static void for_each_slot(unsigned first, unsigned last, void (*fn)(int fd, struct slot *sl, void *ctx), void *ctx)
{
    if (!directory || shunt_in_vfork_child || shunt_sandboxed())
        return;
    unsigned top = atomic_load_explicit(&highest_fd, memory_order_seq_cst);
    if (last > top)
        last = top;
    if (first > last)
        return;
    for (size_t c = first >> CHUNK_SHIFT; c < directory_chunks && (c << CHUNK_SHIFT) <= last; c++) {
        struct slot *chunk = chunk_for(c, false);
        if (!chunk)
            continue;
        size_t base = c << CHUNK_SHIFT;
        unsigned from = first > base ? (unsigned)(first - base) : 0;
        unsigned to = last - base < CHUNK_SLOTS - 1 ? (unsigned)(last - base) : CHUNK_SLOTS - 1;
        for (unsigned i = from; i <= to; i++)
            fn((int)(base + i), &chunk[i], ctx);
    }
}

static void forget_slot(int fd, struct slot *sl, void *ctx)
{
    (void)fd;
    (void)ctx;
    uintptr_t v = atomic_load_explicit(&sl->val, memory_order_relaxed);
    if (v == FDT_UNKNOWN || v == FDT_OWN)
        return;   /* (an own fd: close_range went around it) */
    uintptr_t old = swap_out(sl, FDT_UNKNOWN);
    if (is_object(old))
        sock_put(obj(old));
}

void fdt_forget_range(unsigned first, unsigned last)
{
    pt_kernel_touches++;
    for_each_slot(first, last, forget_slot, NULL);
    if (!shunt_in_vfork_child)
        pst_clear_range(first, last);
}

struct visit { void (*fn)(int fd, void *ctx); void *ctx; };

static void visit_object(int fd, struct slot *sl, void *ctx)
{
    struct visit *v = ctx;
    if (is_object(atomic_load_explicit(&sl->val, memory_order_acquire)))
        v->fn(fd, v->ctx);
}

void fdt_for_each_object(unsigned first, unsigned last, void (*fn)(int fd, void *ctx), void *ctx)
{
    struct visit v = { fn, ctx };
    for_each_slot(first, last, visit_object, &v);
}

static void visit_lazy(int fd, struct slot *sl, void *ctx)
{
    struct visit *v = ctx;
    if (fdt_is_lazy_value(atomic_load_explicit(&sl->val, memory_order_acquire)))
        v->fn(fd, v->ctx);
}

void fdt_for_each_lazy(void (*fn)(int fd, void *ctx), void *ctx)
{
    struct visit v = { fn, ctx };
    for_each_slot(0, ~0U, visit_lazy, &v);
}

struct own_find { int found; };

static void find_own(int fd, struct slot *sl, void *ctx)
{
    struct own_find *o = ctx;
    if (o->found < 0 && atomic_load_explicit(&sl->val, memory_order_acquire) == FDT_OWN)
        o->found = fd;
}

int fdt_next_own(unsigned from, unsigned last)
{
    struct own_find o = { -1 };
    for_each_slot(from, last, find_own, &o);
    return o.found;
}
