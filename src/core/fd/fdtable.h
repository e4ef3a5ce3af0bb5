/*
 * fdtable.h: what shunt knows about each fd number of this process.
 *
 * An entry is one atomic word: UNKNOWN (never seen, or closed: probed lazily
 * on next use, which is how fds inherited across exec or received with
 * SCM_RIGHTS are recognised), PASSTHROUGH (not a socket shunt manages),
 * CLOSING (being closed or replaced: callers go straight to the kernel),
 * KERNEL_SOCK (a TCP connection shunt made or accepted that is kernel TCP
 * for good, kept without an object: see fdt_install_kernel_sock), or a
 * pointer to a struct shunt_sock holding one reference for the table.
 */
#ifndef SHUNT_FDTABLE_H
#define SHUNT_FDTABLE_H

#include <stdint.h>

#include "base/self.h"
#include "core/fd/sock.h"

/* True in the child of vfork, which shares our memory but not our fds:
 * the table then answers passthrough for everything and changes nothing.
 * So it does in a sandboxed process (base/self.h), whose fds are all the
 * kernel's from then on. */
extern SHUNT_TLS bool shunt_in_vfork_child;

enum { FDT_UNKNOWN = 0, FDT_PASSTHROUGH = 1, FDT_CLOSING = 2, FDT_KERNEL_SOCK = 3, FDT_OWN = 4 };
/* FDT_OWN: an fd of shunt's own that the program never opened (the fabric
 * engine's, the fabric's doorbell and wake set, its progress thread's stop
 * fd): the program's close of it fails with EBADF and close_range and
 * closefrom go around it, as without shunt (the number would not exist);
 * the kernel's for everything else (fdt_install_own). */

/*
 * A TCP socket the program made whose object is not made yet (LAZY): the
 * socket is new and unconnected, and nothing shunt would keep for it has
 * happened but what these bits hold.  The first lookup that needs more
 * makes the object (the hooks' make); a connect that is kernel TCP for good
 * from its first byte never does (KERNEL_SOCK then).  Values 8 to 15.
 */
#define FDT_LAZY ((uintptr_t)8)
#define FDT_LAZY_V6 ((uintptr_t)1)        /* AF_INET6 (else AF_INET) */
#define FDT_LAZY_NONBLOCK ((uintptr_t)2)  /* O_NONBLOCK as the program set it */
#define FDT_LAZY_NODELAY ((uintptr_t)4)   /* TCP_NODELAY as the program set it */
static inline bool fdt_is_lazy_value(uintptr_t v) { return (v & ~(uintptr_t)7) == FDT_LAZY; }

/* Values below are not objects (no object lives in the first page). */
#define FDT_SENTINELS ((uintptr_t)4096)

/*
 * A TCP socket whose path is settled on the kernel's (it fell back, or was
 * never to be accelerated) keeps its object, tagged in the low bit: lookups
 * then answer passthrough at the cost of one load, so a program whose
 * connections all fall back pays next to nothing for shunt.
 */
#define KERNEL_TAG ((uintptr_t)1)

#define CHUNK_SHIFT 10
#define CHUNK_SLOTS (1u << CHUNK_SHIFT)

struct slot {
    _Atomic uintptr_t val;
    atomic_uint inflight;
};

extern _Atomic(struct slot *) *fdt_directory;
extern size_t fdt_directory_chunks;

/* True when fd is surely the kernel's alone (not a socket shunt manages, or
 * one settled on kernel TCP): the data wrappers then call libc at once.
 * False means "look it up" (fdt_get), never a wrong answer. */
static inline bool fdt_kernel_only(int fd)
{
    _Atomic(struct slot *) *dir = atomic_load_explicit(&fdt_directory, memory_order_acquire);
    if (fd < 0 || !dir || shunt_in_vfork_child || shunt_sandboxed())
        return true;
    size_t c = (size_t)fd >> CHUNK_SHIFT;
    if (c >= fdt_directory_chunks)
        return true;
    struct slot *chunk = atomic_load_explicit(&dir[c], memory_order_acquire);
    if (!chunk)
        return false;
    uintptr_t v = atomic_load_explicit(&chunk[fd & (CHUNK_SLOTS - 1)].val, memory_order_acquire);
    return v == FDT_PASSTHROUGH || v == FDT_KERNEL_SOCK || v == FDT_OWN || (v >= FDT_SENTINELS && (v & KERNEL_TAG));
}

/* Bumped whenever an fd with an object is closed or replaced: epoll sets
 * look for members that lost their fd only when it moved. */
extern atomic_uint fdt_closes;

/* Sizes the table from RLIMIT_NOFILE and fs.nr_open.  Before it runs every
 * lookup answers passthrough. */
void fdt_init(void);

/*
 * How the table takes up a socket it has not seen (an fd inherited across
 * exec, received with SCM_RIGHTS, or dup'ed behind its back): given at
 * start-up by the kind that manages such sockets (core/kinds/tcp_socket.c),
 * so that the table, a layer below the kinds, knows none of them.  Without
 * hooks every socket is passthrough.
 *   share  the object another fd of this process already has for the
 *          socket with this inode, with one reference for the caller, or NULL
 *   probe  a new object for it (one reference), or NULL: not managed
 * passed: the fd just arrived with SCM_RIGHTS (see tcp_socket_probe).
 */
struct fdt_probe_hooks {
    struct shunt_sock *(*share)(int fd, uint64_t inode, bool passed);
    struct shunt_sock *(*probe)(int fd, uint64_t inode, bool passed);
    /* the object of a LAZY entry (lazy: its value), one reference, or NULL */
    struct shunt_sock *(*make)(int fd, uintptr_t lazy);
};
void fdt_set_probe_hooks(const struct fdt_probe_hooks *h);

/* Looks fd up, probing it if unknown.  Never fails: an fd shunt does not
 * manage (or a bad fd) gives passthrough_ops. */
struct fdref fdt_get(int fd);
void fdt_put(struct fdref *r);

/* Whether fd's entry is s, also once s is settled on kernel TCP (which
 * fdt_get answers as passthrough).  No probe, no reference: the caller holds
 * s, so no other object can be at its address. */
bool fdt_holds(int fd, const struct shunt_sock *s);

/* fdt_get that also stores the object found in *mark (a call mark,
 * call_marks.h) before a closer of fd may go on: a closer that waited for
 * the lookup sees the mark. */
struct fdref fdt_get_marked(int fd, _Atomic(struct shunt_sock *) *mark);

/* Records a new fd the program got from an intercepted call; takes over one
 * reference to s.  NULL records passthrough. */
void fdt_install(int fd, struct shunt_sock *s);

/* Marks fd as being closed and returns its object with the table's
 * reference (NULL if none); fdt_close_end() ends the closing state. */
struct shunt_sock *fdt_close_begin(int fd);
void fdt_close_end(int fd);

/* The socket s at fd will stay on kernel TCP: from now on lookups of fd
 * answer passthrough without touching s. */
void fdt_settle_kernel(int fd, struct shunt_sock *s);

/*
 * fd is a TCP connection on kernel TCP for good whose object nobody needs
 * (no channel, nothing of the program's that shunt answers for, one fd):
 * the table keeps the fact, not an object.  Lookups answer passthrough, as
 * for a settled object; its close costs the kernel's close and the record's
 * clearing.  A short connection (accepted or made) costs no object's making
 * and freeing (docs/architecture.md, "Short connections").  The first form
 * installs a new fd; fdt_drop_settled replaces the settled object s at fd
 * (the caller's reference to s stays the caller's).
 */
void fdt_install_kernel_sock(int fd);
void fdt_drop_settled(int fd, struct shunt_sock *s);

/* Whether fd's entry is KERNEL_SOCK (no probe). */
bool fdt_is_kernel_sock(int fd);

/* A new TCP socket at fd, kept LAZY (its object made at its first lookup
 * that needs one).  Not in a vfork child or a sandbox (no table there). */
void fdt_install_lazy(int fd, uintptr_t lazy);

/* fd's entry if it is LAZY (0 if not). */
uintptr_t fdt_lazy(int fd);

/* Changes a LAZY entry's bit: true if done, false if fd is not LAZY (any
 * more): then the caller takes the object's way. */
bool fdt_lazy_set(int fd, uintptr_t bit, bool on);

/* A LAZY entry (still lazy, exactly) becomes KERNEL_SOCK: true if so. */
bool fdt_lazy_to_kernel(int fd, uintptr_t lazy);

/* Calls fn for every LAZY fd (the look for another fd of a socket). */
void fdt_for_each_lazy(void (*fn)(int fd, void *ctx), void *ctx);

/* Forgets fd, so that its next use probes it again. */
void fdt_forget(int fd);

/* fd is one of shunt's own (FDT_OWN); whether it is; the lowest such fd in
 * [from, last], or -1.  A slot marked so is cleared by the close of its fd
 * through the wrappers (the engine's own closes) or fdt_forget (shunt's
 * closes through shunt_real), never by fdt_forget_range. */
void fdt_install_own(int fd);
bool fdt_is_own(int fd);
int fdt_next_own(unsigned from, unsigned last);

/* An fd that just arrived with SCM_RIGHTS: forgets what the table knew
 * about its number and takes it up at once (see tcp_socket_probe). */
void fdt_adopt_passed(int fd);

/* In the child of fork: the lock of the probes is free. */
void fdt_after_fork_child(void);

/* Forgets every fd in [first, last] (after close_range). */
void fdt_forget_range(unsigned first, unsigned last);

/* How many fds have an object (the fds of sockets and epoll sets shunt
 * manages) or are a KERNEL_SOCK, and whether fd is one of them; neither
 * probes. */
long fdt_object_slots(void);
bool fdt_has_object(int fd);

/* Whether the table knows fd as open: it was looked up (probed) or made
 * through shunt, and not closed since (no probe: an fd never looked up, or
 * closed, or being closed, says false).  An fd closed behind shunt's back
 * (the raw system call) still says true. */
bool fdt_known_open(int fd);

/* Calls fn for every fd in [first, last] that has an object. */
void fdt_for_each_object(unsigned first, unsigned last, void (*fn)(int fd, void *ctx), void *ctx);

#endif
