/*
 * registry.c: the host-local registry of accelerated listeners and
 * connection records (see registry.h for the contract and
 * registry_file.h for the file layout).
 *
 * Owns: creating, checking and mapping the per-user, per-namespace file (and
 * the host's, namespace id 0); its lock (a bounded pid word,
 * transport/seg_lock.h: nothing in it is an address); the reclaiming of dead
 * entries; addresses.  Who a recorded pid is and whether it lives is
 * owners.c's; the table operations are in listeners.c, connections.c and
 * processes.c, which share these through registry_impl.h.
 *
 * Creation is race-free without any waiting: the first process builds the
 * whole file under a temporary name (an O_TMPFILE inode, or a uniquely named
 * file where O_TMPFILE is missing), then publishes it with link(), which
 * never replaces an existing name.  Whoever loses the race opens the
 * winner's file, which is complete by construction.
 *
 * Every operation takes the lock with all signals blocked (a handler that
 * re-entered the registry would find the lock held by its own thread) and
 * with a bounded wait, so a stopped process holding it costs a missed
 * acceleration, never a hang.  A process that died holding it leaves entries
 * that are each valid or free on their own (registry_file.h), so taking
 * the lock over needs no repair.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/fsize.h"
#include "base/log.h"
#include "base/own_file.h"
#include "base/real.h"
#include "registry/registry.h"
#include "registry/registry_impl.h"
#include "transport/channel.h"
#include "transport/seg_lock.h"

_Static_assert(sizeof(struct reg_listener) == 64, "listener entry is one cache line");
_Static_assert(sizeof(struct reg_conn_ent) % 8 == 0, "connection records stay aligned");
_Static_assert(sizeof(struct reg_proc) == 32, "process entries stay aligned");
_Static_assert(REG_FILE_SIZE <= (4u << 20), "the registry stays a few MiB");
_Static_assert((REG_FREE == 0), "a zeroed file is an empty registry");

bool reg_test_named_tmp;
int reg_lock_timeout_ms = 2000;

static _Atomic(struct reg_file *) reg_map;

/* The directory of the last reg_open_at (tests), which later implicit opens
 * keep using; empty: /dev/shm. */
static char reg_dir[PATH_MAX];

/* ---- addresses ---------------------------------------------------------- */

int reg_addr_from_sockaddr(struct reg_addr *out, const struct sockaddr *sa, socklen_t len)
{
    if (!out || !sa || len < (socklen_t)sizeof(sa_family_t))
        return -EINVAL;
    memset(out, 0, sizeof *out);
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in sin;
        if (len < (socklen_t)sizeof sin)
            return -EINVAL;
        memcpy(&sin, sa, sizeof sin);
        out->addr.s6_addr[10] = 0xff;
        out->addr.s6_addr[11] = 0xff;
        memcpy(&out->addr.s6_addr[12], &sin.sin_addr, 4);
        out->port = ntohs(sin.sin_port);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 sin6;
        /* 24 bytes (RFC 2133, without the scope id) is what the kernel accepts too */
        if (len < 24)
            return -EINVAL;
        memset(&sin6, 0, sizeof sin6);
        memcpy(&sin6, sa, len < (socklen_t)sizeof sin6 ? len : sizeof sin6);
        out->addr = sin6.sin6_addr;
        out->port = ntohs(sin6.sin6_port);
        return 0;
    }
    return -EAFNOSUPPORT;
}

bool reg_in6_eq(const struct in6_addr *a, const struct in6_addr *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

static bool addr_mapped(const struct in6_addr *a)
{
    return IN6_IS_ADDR_V4MAPPED(a);
}

/* :: or ::ffff:0.0.0.0 */
bool reg_in6_unspecified(const struct in6_addr *a)
{
    static const uint8_t zero[16];
    return IN6_IS_ADDR_UNSPECIFIED(a) ||
           (addr_mapped(a) && memcmp(&a->s6_addr[12], zero, 4) == 0);
}

bool reg_addr_is_loopback(const struct reg_addr *a)
{
    return IN6_IS_ADDR_LOOPBACK(&a->addr) || (addr_mapped(&a->addr) && a->addr.s6_addr[12] == 127);
}

bool reg_addr_eq(const struct reg_addr *a, const struct reg_addr *b)
{
    return a->port == b->port && reg_in6_eq(&a->addr, &b->addr);
}

/* Would a listener bound to l (with IPV6_V6ONLY as given) take a connection to dst?
 * The kernel's rules: the exact address; :: takes every IPv6 destination and,
 * unless v6only, every IPv4 one; 0.0.0.0 takes every IPv4 one. */
bool reg_listener_covers(const struct reg_listener *l, const struct reg_addr *dst)
{
    if (l->addr.port != dst->port)
        return false;
    if (reg_in6_eq(&l->addr.addr, &dst->addr))
        return true;
    if (IN6_IS_ADDR_UNSPECIFIED(&l->addr.addr))
        return !(l->v6only && addr_mapped(&dst->addr));
    if (addr_mapped(&l->addr.addr) && reg_in6_unspecified(&l->addr.addr))
        return addr_mapped(&dst->addr);
    return false;
}

/* ---- the lock ----------------------------------------------------------- */

int reg_lock(struct reg_file *f, sigset_t *old)
{
    return reg_lock_within(f, old, reg_lock_timeout_ms);
}

/* The threads of this process take the registry's lock in turn: a word of
 * our own (the pid and thread of the holder) in front of the shared one,
 * which then never sees two of our threads at once (seg_lock.h: a shared
 * word naming our own pid is garbage).  Taken with the same bound as the
 * shared one, never untimed; a word left by the thread of a process we were
 * forked from (its pid is not ours) is free for us. */
static _Atomic uint64_t local_owner;

static uint64_t local_self(void)
{
    return ((uint64_t)(uint32_t)getpid() << 32) | (uint32_t)shunt_syscall(SYS_gettid);
}

static bool local_take(uint64_t deadline)
{
    uint64_t me = local_self();
    for (unsigned i = 0;; i++) {
        uint64_t w = atomic_load(&local_owner);
        if ((w == 0 || (uint32_t)(w >> 32) != (uint32_t)(me >> 32)) &&
            atomic_compare_exchange_weak(&local_owner, &w, me))
            return true;
        if (clock_now_ns() >= deadline)
            return false;
        if (i < 32) {
            sched_yield();
        } else {
            struct timespec ts = { 0, 200 * 1000 };
            nanosleep(&ts, NULL);
        }
    }
}

static void local_give(void)
{
    atomic_store(&local_owner, 0);
}

int reg_lock_within(struct reg_file *f, sigset_t *old, int ms)
{
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, old);

    if (ms <= 0)
        ms = 1;
    uint64_t budget = (uint64_t)ms * 1000000u, deadline = clock_now_ns() + budget;
    if (!local_take(deadline)) {
        shunt_log(LOG_WARN, "registry: cannot take the lock: another thread of this process kept it");
        pthread_sigmask(SIG_SETMASK, old, NULL);
        return -ETIMEDOUT;
    }
    /* the path a holder's maps show: this registry's name, from the header
     * (checked when it was mapped; a scribbled one only makes a live holder
     * look like garbage: -EIO, this call falls back) */
    char path[PATH_MAX];
    uint32_t uid = f->hdr.uid;
    uint64_t netns = f->hdr.netns;
    int n = reg_name_of(path, sizeof path, reg_directory(), (uid_t)uid, netns);
    int r = -ENAMETOOLONG;
    bool took_over = false;
    if (n > 0 && (size_t)n < sizeof path) {
        uint64_t now = clock_now_ns();
        r = seg_lock_take_file(&f->hdr.lock, path, now < deadline ? deadline - now : 1, &took_over);
    }
    if (r == 0 && took_over) {
        /* The owner died inside an update.  Each entry is valid or free on
         * its own, so the tables need no repair; dead entries go by the
         * usual reclaiming. */
        f->hdr.recoveries++;
        shunt_log(LOG_WARN, "registry: a process died holding the lock; taken over");
    }
    if (r != 0) {
        local_give();
        shunt_log(LOG_WARN, "registry: cannot take the lock: %s", r == -EIO ? "its word is garbage (scribbled on)" : strerror(-r));
        pthread_sigmask(SIG_SETMASK, old, NULL);
        return r;
    }
    return 0;
}

void reg_unlock(struct reg_file *f, const sigset_t *old)
{
    if (seg_lock_give(&f->hdr.lock) < 0)
        shunt_log(LOG_WARN, "registry: the lock's word was scribbled on while we held it");
    local_give();
    pthread_sigmask(SIG_SETMASK, old, NULL);
}

int reg_enter(struct reg_file **f, sigset_t *old)
{
    int r = reg_get(f);
    return r < 0 ? r : reg_lock(*f, old);
}

/* Publishes an entry's state, after its fields. */
void reg_offer_gone(struct reg_file *f)
{
    uint32_t n = atomic_load_explicit(&f->hdr.offers, memory_order_relaxed);
    if (n)   /* never below zero: a scribbled count is recounted at the next lookup */
        atomic_store_explicit(&f->hdr.offers, n - 1, memory_order_relaxed);
}

void reg_entry_publish(_Atomic uint32_t *state, uint32_t value)
{
    /* release: the entry's fields are in memory before the state says so,
     * also for whoever takes the lock over after this process dies */
    atomic_store_explicit(state, value, memory_order_release);
}

/* ---- reclaiming --------------------------------------------------------- */

/* Channel names come from shared memory: only a plain "shunt-..." name,
 * terminated inside the field, is ever unlinked. */
static void unlink_channel(const char *field)
{
    char name[CHANNEL_NAME_MAX];
    memcpy(name, field, sizeof name);
    if (memchr(name, 0, sizeof name) == NULL)
        return;
    if (strncmp(name, "shunt-", 6) != 0 || strchr(name, '/') != NULL)
        return;
    channel_unlink(name);
}

unsigned reg_sweep_listeners(struct reg_file *f, struct reg_live_cache *lc)
{
    unsigned freed = 0;
    uint32_t top = 0;
    uint32_t hwm = reg_listener_hwm(f);
    for (uint32_t i = 0; i < hwm; i++) {
        struct reg_listener *l = &f->listeners[i];
        if (reg_entry_state(&l->state) == REG_FREE)
            continue;
        if (!reg_owner_alive(l->pid, &l->owner, lc)) {
            reg_entry_publish(&l->state, REG_FREE);
            freed++;
            continue;
        }
        top = i + 1;
    }
    f->hdr.listener_hwm = top;
    f->hdr.reclaimed_listeners += freed;
    return freed;
}

bool reg_client_present(const struct reg_conn_ent *e)
{
    return e->c.client_inode != 0;
}

bool reg_server_present(const struct reg_conn_ent *e, uint32_t state)
{
    return state == REG_CLAIMED && e->c.server_inode != 0;
}

unsigned reg_sweep_conns(struct reg_file *f, struct reg_live_cache *lc)
{
    unsigned freed = 0;
    uint32_t top = 0;
    uint32_t hwm = reg_conn_hwm(f);
    for (uint32_t i = 0; i < hwm; i++) {
        struct reg_conn_ent *e = &f->conns[i];
        uint32_t st = reg_entry_state(&e->state);
        if (st == REG_FREE)
            continue;
        /* An end counts while its socket is recorded and its process lives;
         * a record left with no end (its last end died inside reg_conn_end)
         * is dead as well. */
        bool live = (reg_client_present(e) && reg_owner_alive(e->c.client_pid, &e->client_owner, lc)) ||
                    (reg_server_present(e, st) && reg_owner_alive(e->c.server_pid, &e->server_owner, lc));
        if (!live) {
            char name[CHANNEL_NAME_MAX];
            memcpy(name, e->c.channel, sizeof name);
            reg_entry_publish(&e->state, REG_FREE);
            if (st == REG_OFFER)
                reg_offer_gone(f);
            unlink_channel(name);
            shunt_log(LOG_DEBUG, "registry: reclaimed the record of dead pids %d/%d",
                      (int)e->c.client_pid, (int)e->c.server_pid);
            freed++;
            continue;
        }
        top = i + 1;
    }
    f->hdr.conn_hwm = top;
    f->hdr.reclaimed_conns += freed;
    return freed;
}

/* ---- creating and opening the file -------------------------------------- */

static void init_header(struct reg_file *f, uid_t uid, uint64_t netns)
{
    struct reg_header *h = &f->hdr;
    h->version = REG_VERSION;
    h->header_size = sizeof(struct reg_header);
    h->listener_count = REG_LISTENERS;
    h->listener_size = sizeof(struct reg_listener);
    h->conn_count = REG_CONNS;
    h->conn_size = sizeof(struct reg_conn_ent);
    h->proc_count = REG_PROCS;
    h->proc_size = sizeof(struct reg_proc);
    h->total_size = REG_FILE_SIZE;
    h->netns = netns;
    h->uid = (uint32_t)uid;
}

/* Builds a complete registry in fd (an unnamed or private file). */
static int fill_new(int fd, uid_t uid, uint64_t netns)
{
    if (fchmod(fd, 0600) < 0)
        return -errno;
    /* Allocate every page now: a write to a hole of a full tmpfs would be SIGBUS. */
    if (fsize_fallocate(fd, 0, 0, (off_t)REG_FILE_SIZE) < 0) {
        if (errno != EOPNOTSUPP)
            return -errno;
        if (fsize_ftruncate(fd, (off_t)REG_FILE_SIZE) < 0)
            return -errno;
    }
    void *p = mmap(NULL, REG_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    struct reg_file *f = p;
    init_header(f, uid, netns);
    /* the lock: all zero (free), as the file came */
    atomic_store_explicit(&f->hdr.magic, REG_MAGIC, memory_order_release);
    munmap(p, REG_FILE_SIZE);
    return 0;
}

/* Creates the registry at path, fully initialised before its name appears.
 * 0, -EEXIST if another process published one first, or a negative errno. */
static int reg_create(const char *dir, const char *path, uid_t uid, uint64_t netns)
{
    static atomic_uint tmp_counter;
    char tmp[PATH_MAX];
    bool named = reg_test_named_tmp;
    int fd = -1;
    int r;

    if (!named) {
        fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL))
            named = true;
        else if (fd < 0)
            return -errno;
    }
    if (named) {
        /* random: a name another user could tell in advance would be one
         * it could make first */
        int n = snprintf(tmp, sizeof tmp, "%s.%d.%u.%016llx.tmp", path, (int)getpid(),
                         atomic_fetch_add(&tmp_counter, 1), (unsigned long long)own_file_random());
        if (n < 0 || (size_t)n >= sizeof tmp)
            return -ENAMETOOLONG;
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return -errno;
    }

    r = fill_new(fd, uid, netns);
    if (r == 0) {
        /* link() never replaces an existing name: exactly one creator wins. */
        int lr;
        if (named) {
            lr = link(tmp, path);
        } else {
            char self[64];
            snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
            lr = linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW);
        }
        r = lr < 0 ? -errno : 0;
    }
    if (named)
        unlink(tmp);
    shunt_real.close(fd);
    return r;
}

/* The layout's version is part of the name: processes of two versions of
 * shunt (an upgrade while programs run, two builds side by side) use two
 * files and never meet, instead of the newer refusing the older's file and
 * every connection of that namespace falling back. */
int reg_name_of(char *out, size_t len, const char *dir, uid_t uid, uint64_t netns)
{
    return snprintf(out, len, "%s/shunt-%u-%llu-r%u.reg", dir, (unsigned)uid,
                    (unsigned long long)netns, REG_VERSION);
}

/* Opens, checks and maps an existing registry: this user's own file (a
 * name another user made first is refused, never mapped: -EPERM), of
 * this version, for this namespace (-EPROTO).  -ENOENT if there is none.
 * *st gets what was mapped (its inode tells a file replaced since). */
int reg_map_file(const char *path, uid_t uid, uint64_t netns, struct reg_file **out, struct stat *st)
{
    int fd = own_file_open("registry", path, O_RDWR, 0600, st);
    if (fd < 0)
        return fd;
    if ((uint64_t)st->st_size != REG_FILE_SIZE) {
        shunt_real.close(fd);
        shunt_log(LOG_WARN, "registry: refusing %s: %lld bytes, not a registry of this version", path,
                  (long long)st->st_size);
        return -EPROTO;
    }
    void *p = mmap(NULL, REG_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    shunt_real.close(fd);
    if (p == MAP_FAILED)
        return -e;
    struct reg_file *f = p;
    const struct reg_header *h = &f->hdr;
    if (atomic_load_explicit(&f->hdr.magic, memory_order_acquire) != REG_MAGIC ||
        h->version != REG_VERSION || h->header_size != sizeof(struct reg_header) ||
        h->listener_count != REG_LISTENERS || h->listener_size != sizeof(struct reg_listener) ||
        h->conn_count != REG_CONNS || h->conn_size != sizeof(struct reg_conn_ent) ||
        h->proc_count != REG_PROCS || h->proc_size != sizeof(struct reg_proc) ||
        h->total_size != REG_FILE_SIZE || h->netns != netns || h->uid != (uint32_t)uid) {
        munmap(p, REG_FILE_SIZE);
        shunt_log(LOG_WARN, "registry: refusing %s: not a registry of this version", path);
        return -EPROTO;
    }
    *out = f;
    return 0;
}

/* Does the name still lead to the file we mapped?  Asked under the
 * registry's lock, under which alone a sweep removes a registry (sweep.c):
 * a process that mapped one just before it went would otherwise meet
 * nobody there for the rest of its life. */
static bool still_named(const char *path, const struct stat *mapped)
{
    struct stat now;
    return stat(path, &now) == 0 && now.st_ino == mapped->st_ino && now.st_dev == mapped->st_dev;
}

/* Maps the registry of netns (REG_HOST_NETNS: the host's) in directory d,
 * creating it when create is set, and sweeps what dead processes left in
 * it.  *sweep_files: a sweep of the files of /dev/shm is due.  0 or a
 * negative errno (-ENOENT: none, and not to be created). */
static int map_registry(const char *d, uid_t uid, uint64_t netns, bool create, struct reg_file **out,
                        bool *sweep_files)
{
    char path[PATH_MAX];
    int n = reg_name_of(path, sizeof path, d, uid, netns);
    if (n < 0 || (size_t)n >= sizeof path)
        return -ENAMETOOLONG;
    struct reg_file *f = NULL;
    int r = -ENOENT;
    /* Bounded: the name can only vanish between create and open if someone
     * removes registries by hand, or a sweep removed this one as unused. */
    for (int attempt = 0; attempt < 4 && r == -ENOENT; attempt++) {
        struct stat st;
        r = reg_map_file(path, uid, netns, &f, &st);
        if (r == -ENOENT) {
            if (!create)
                return r;
            r = reg_create(d, path, uid, netns);
            if (r == 0 || r == -EEXIST) {
                shunt_log(LOG_DEBUG, "registry: %s %s", r == 0 ? "created" : "raced to create", path);
                r = -ENOENT;    /* now open it */
            }
            continue;
        }
        if (r < 0)
            break;
        /* The first open in this process sweeps out what dead processes
         * left (at most once a second for all processes: reg_entries_sweep_due),
         * once it knows the file it mapped is still the registry. */
        sigset_t old;
        if (reg_lock(f, &old) == 0) {
            if (!still_named(path, &st)) {
                reg_unlock(f, &old);
                munmap(f, REG_FILE_SIZE);
                f = NULL;
                r = -ENOENT;
                shunt_log(LOG_DEBUG, "registry: %s was replaced while we opened it; again", path);
                continue;
            }
            unsigned nl = 0, nc = 0, np = 0;
            if (reg_entries_sweep_due(f)) {
                struct reg_live_cache lc;
                reg_live_cache_init(&lc);
                nl = reg_sweep_listeners(f, &lc);
                nc = reg_sweep_conns(f, &lc);
                np = reg_sweep_procs(f, &lc);
            }
            /* the host's registry has no files of its own to sweep */
            *sweep_files = netns != REG_HOST_NETNS && reg_files_sweep_due(f);
            reg_unlock(f, &old);
            if (nl || nc || np)
                shunt_log(LOG_DEBUG, "registry: reclaimed %u listeners, %u connection records, %u fd tables", nl,
                          nc, np);
        }
    }
    if (r < 0) {
        shunt_log(LOG_WARN, "registry: cannot open %s: %s", path, strerror(-r));
        return r;
    }
    *out = f;
    return 0;
}

int reg_open_at(const char *dir)
{
    if (atomic_load_explicit(&reg_map, memory_order_acquire))
        return 0;
    int saved = errno;
    if (dir && dir != reg_dir)
        snprintf(reg_dir, sizeof reg_dir, "%s", dir);
    uint64_t netns = reg_netns();
    if (netns == 0) {
        /* Without the namespace, processes of different namespaces could
         * meet here: better no acceleration. */
        shunt_log(LOG_WARN, "registry: the network namespace is unknown (/proc?)");
        errno = saved;
        return -ENOENT;
    }
    const char *d = dir ? dir : "/dev/shm";
    struct reg_file *f = NULL;
    bool sweep_files = false;
    int r = map_registry(d, geteuid(), netns, true, &f, &sweep_files);
    if (r < 0) {
        errno = saved;
        return r;
    }

    struct reg_file *expected = NULL;
    if (!atomic_compare_exchange_strong(&reg_map, &expected, f)) {
        munmap(f, REG_FILE_SIZE);   /* another thread was quicker */
        errno = saved;
        return 0;
    }
    /* Channel names carry the namespace of the registry that records them,
     * so that a sweep can tell whose they are; a test's private registry
     * gives none (0), and its channels are never swept. */
    channel_set_scope(strcmp(d, "/dev/shm") == 0 ? netns : 0);
    if (sweep_files)
        reg_sweep_files(f);
    errno = saved;
    return 0;
}

/* ---- the host's registry ------------------------------------------------ */

static _Atomic(struct reg_file *) reg_host_map;
/* CLOCK_MONOTONIC ns until which a missing host registry is not looked
 * for again (a client's connect to another host pays one open a second) */
static _Atomic uint64_t host_absent_until;

int reg_open_host(bool create)
{
    if (atomic_load_explicit(&reg_host_map, memory_order_acquire))
        return 0;
    uint64_t now = clock_now_ns();
    if (!create && now < atomic_load_explicit(&host_absent_until, memory_order_relaxed))
        return -ENOENT;
    int saved = errno;
    struct reg_file *f = NULL;
    bool unused = false;
    int r = map_registry(reg_directory(), geteuid(), REG_HOST_NETNS, create, &f, &unused);
    if (r < 0) {
        if (r == -ENOENT)
            atomic_store_explicit(&host_absent_until, now + 1000000000ull, memory_order_relaxed);
        errno = saved;
        return r;
    }
    struct reg_file *expected = NULL;
    if (!atomic_compare_exchange_strong(&reg_host_map, &expected, f))
        munmap(f, REG_FILE_SIZE);   /* another thread was quicker */
    errno = saved;
    return 0;
}

int reg_get_in(enum reg_scope scope, struct reg_file **out)
{
    if (scope == REG_NS)
        return reg_get(out);
    int r = reg_open_host(false);
    if (r < 0)
        return r;
    *out = atomic_load_explicit(&reg_host_map, memory_order_acquire);
    return 0;
}

int reg_enter_in(enum reg_scope scope, struct reg_file **f, sigset_t *old)
{
    int r = reg_get_in(scope, f);
    return r < 0 ? r : reg_lock(*f, old);
}

struct reg_file *reg_host_mapped(void)
{
    return atomic_load_explicit(&reg_host_map, memory_order_acquire);
}

int reg_open(void)
{
    return reg_open_at(reg_dir[0] ? reg_dir : NULL);
}

int reg_file_path(char *out, size_t len)
{
    uint64_t netns = reg_netns();
    if (netns == 0)
        return -ENOENT;
    int n = reg_name_of(out, len, reg_directory(), geteuid(), netns);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

const char *reg_directory(void)
{
    return reg_dir[0] ? reg_dir : "/dev/shm";
}

struct reg_file *reg_mapped(void)
{
    return atomic_load_explicit(&reg_map, memory_order_acquire);
}

struct reg_verdict *reg_verdicts(void)
{
    struct reg_file *f = reg_mapped();
    return f ? f->verdicts : NULL;
}

void reg_close_for_test(void)
{
    struct reg_file *f = atomic_exchange(&reg_map, NULL);
    if (f)
        munmap(f, REG_FILE_SIZE);
    f = atomic_exchange(&reg_host_map, NULL);
    if (f)
        munmap(f, REG_FILE_SIZE);
    atomic_store(&host_absent_until, 0);
    channel_set_scope(0);
}

/* Every operation opens the registry if this process has not yet. */
int reg_get(struct reg_file **out)
{
    struct reg_file *f = reg_mapped();
    if (!f) {
        int r = reg_open();
        if (r < 0)
            return r;
        f = reg_mapped();
    }
    *out = f;
    return 0;
}

