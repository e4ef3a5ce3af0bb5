/*
 * sweep.c: this user's files in /dev/shm that nobody can use any more
 * (issue 16, finding 6): registries of network namespaces no process of
 * ours is in (3 MiB each), and segments, the files beside them and fd
 * tables that no record names (left by a process killed between making
 * one and recording it, or by a whole namespace that is gone).
 *
 * When and by whom: by the first process that opens a registry after
 * reg_sweep_interval_s since its last sweep (the header keeps the time,
 * under the lock, so one process of the namespace does it), at that open,
 * outside the lock.  A new namespace's first process therefore sweeps at
 * once: namespaces come and go at the rate their leftovers appear.
 *
 * What goes, and why it is safe:
 *   - A segment, a file beside one, or an fd table of namespace N that no
 *     live entry of N's registry names, older than reg_sweep_grace_s.  A
 *     segment is recorded (its offer) microseconds after it is made, and
 *     its record lives until both ends are gone; a table is recorded just
 *     after it is made; so past the grace, a file no record names has no
 *     process that can find it by name again (one that mapped it keeps
 *     its mapping: unlink takes only the name).  The records are read
 *     under N's lock; nothing is unlinked that another process could
 *     still be about to record.
 *   - The registry of a namespace N other than ours when none of its
 *     entries is alive (after its dead ones are swept), it is older than
 *     the grace, and no process we can see is in N (/proc/PID/ns/net).
 *     A namespace lives as long as any of its sockets does, and every
 *     accelerated connection has a TCP socket there: once N is gone, no
 *     channel of N can be used.  The name goes under N's lock, and a
 *     process that mapped the file just before asks again, under the
 *     lock, whether the name still leads to it (registry.c): it then
 *     makes a new one instead of living in one nobody else can find.
 *   - Files of a namespace whose registry is gone, once no process we
 *     can see is in that namespace.
 * Never: another user's files, a name this version does not make (old
 * formats, the tests' own directories), channels of scope 0 (a test's
 * private registry), anything younger than the grace, the host's registry
 * (namespace id 0: its dead entries go when a process opens it) and the
 * segments its records name (connections between namespaces).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/real.h"
#include "registry/bell_name.h"
#include "registry/procstat.h"
#include "registry/registry_impl.h"
#include "transport/channel.h"

int reg_sweep_interval_s = 60;
int reg_sweep_grace_s = 60;
/* Each dead entry costs its process's check (kill, /proc/PID/stat) and a
 * lookup that meets one removes it anyway: a new process need not pay for
 * every live one's check, which made a process's start cost grow with the
 * number of processes under shunt (40 idle ones: 300 more system calls). */
int reg_entries_sweep_interval_s = 1;

#define SWEEP_LOCK_MS 100        /* a registry whose lock is held longer is left for the next sweep */
#define SWEEP_MAX_FILES 65536    /* candidates looked at per sweep: the work stays bounded */

/* The second of CLOCK_BOOTTIME, plus one: 0 in the header is "never". */
static uint64_t boot_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec + 1;
}

/* Is a sweep due whose last one went at last, interval seconds apart?  A
 * time ahead of now (a scribble, or another boot's file) is a sweep due. */
static bool due(uint64_t last, uint64_t now, int interval)
{
    return !last || last > now || now - last >= (uint64_t)interval;
}

bool reg_files_sweep_due(struct reg_file *f)
{
    uint64_t now = boot_s();
    if (!due(f->hdr.files_swept_at, now, reg_sweep_interval_s))
        return false;
    f->hdr.files_swept_at = now;
    return true;
}

bool reg_entries_sweep_due(struct reg_file *f)
{
    uint32_t now = (uint32_t)boot_s();
    if (!due(f->hdr.entries_swept_at, now, reg_entries_sweep_interval_s))
        return false;
    f->hdr.entries_swept_at = now;
    return true;
}

/* ---- what /dev/shm holds ------------------------------------------------ */

enum cand_kind { CAND_REGISTRY, CAND_TABLE, CAND_SEGMENT, CAND_BESIDE };

struct cand {
    enum cand_kind kind;
    bool old;                       /* older than the grace */
    bool drop;
    uint64_t netns;
    int32_t pid;                    /* a table's */
    uint64_t tag;                   /* a table's */
    char name[128];
    char segment[CHANNEL_NAME_MAX]; /* a segment's own name, or the one a file is beside */
};

struct cands {
    struct cand *v;
    size_t n, cap;
};

static struct cand *cand_add(struct cands *c)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        struct cand *v = realloc(c->v, cap * sizeof *v);
        if (!v)
            return NULL;
        c->v = v;
        c->cap = cap;
    }
    struct cand *k = &c->v[c->n++];
    memset(k, 0, sizeof *k);
    return k;
}

static bool registry_name_parse(const char *name, uint32_t *uid, uint64_t *netns)
{
    unsigned long long ns;
    unsigned u, ver;
    int end = 0;
    if (sscanf(name, "shunt-%u-%llu-r%u.reg%n", &u, &ns, &ver, &end) != 3 || name[end] || ver != REG_VERSION)
        return false;
    /* digits only where sscanf would also take signs and spaces */
    for (const char *p = name + 6; *p != '.'; p++)
        if (!((*p >= '0' && *p <= '9') || *p == '-' || *p == 'r'))
            return false;
    *uid = u;
    *netns = ns;
    return true;
}

/* This user's files of this version in dir (channels only when they live
 * there too), with their namespaces and ages. */
static void gather(struct cands *c, const char *dir, bool channels, uint64_t own_netns)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    uid_t me = geteuid();
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL && c->n < SWEEP_MAX_FILES) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "shunt-", 6) != 0 || len >= sizeof c->v[0].name)
            continue;   /* none of the names we make is that long */
        uint32_t uid;
        uint64_t netns, tag = 0;
        int32_t pid = 0;
        struct channel_file cf;
        enum cand_kind kind;
        uint32_t buid, bpid;
        if (channels && bell_name_parse(e->d_name, &buid, &bpid)) {
            /* a fabric doorbell whose process is gone (killed: a normal exit
             * removes its own); never another user's, never a live one's */
            struct stat st;
            if (buid == me && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid == me &&
                S_ISSOCK(st.st_mode) && now - st.st_mtime >= (time_t)reg_sweep_grace_s &&
                kill((pid_t)bpid, 0) < 0 && errno == ESRCH)
                unlinkat(dirfd(d), e->d_name, 0);
            continue;
        }
        if (registry_name_parse(e->d_name, &uid, &netns)) {
            if (netns == own_netns)
                continue;   /* ours, in use by this very process */
            kind = CAND_REGISTRY;
        } else if (reg_table_name_parse(e->d_name, &uid, &netns, &pid, &tag)) {
            kind = CAND_TABLE;
        } else if (channels && channel_file_parse(e->d_name, &cf)) {
            uid = cf.uid;
            netns = cf.netns;
            kind = cf.beside ? CAND_BESIDE : CAND_SEGMENT;
        } else {
            continue;
        }
        if (uid != me || netns == 0)
            continue;
        struct stat st;
        /* never another user's file, whatever its name says */
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_uid != me ||
            !(S_ISREG(st.st_mode) || (kind == CAND_BESIDE && S_ISFIFO(st.st_mode))))
            continue;
        bool old = now - st.st_mtime >= (time_t)reg_sweep_grace_s;
        if (!old && kind != CAND_REGISTRY)
            continue;
        struct cand *k = cand_add(c);
        if (!k)
            break;
        k->kind = kind;
        k->old = old;
        k->netns = netns;
        k->pid = pid;
        k->tag = tag;
        memcpy(k->name, e->d_name, len + 1);
        if (kind == CAND_SEGMENT || kind == CAND_BESIDE)
            memcpy(k->segment, cf.segment, sizeof k->segment);
    }
    closedir(d);
}

/* ---- who is in which namespace ------------------------------------------ */

struct netns_seen {
    bool scanned, usable;
    uint64_t *v;
    size_t n;
};

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Is any process we can see in namespace ns?  (/proc once per sweep; a
 * scan that sees no namespace at all, not even ours, is not believed.) */
static bool netns_in_use(struct netns_seen *s, uint64_t ns, uint64_t own)
{
    if (!s->scanned) {
        s->scanned = true;
        size_t cap = 0;
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (e->d_name[0] < '1' || e->d_name[0] > '9' || strlen(e->d_name) > 20)
                continue;
            char path[320], link[64];
            snprintf(path, sizeof path, "/proc/%s/ns/net", e->d_name);
            ssize_t n = readlink(path, link, sizeof link - 1);
            unsigned long long ino;
            if (n <= 0)
                continue;
            link[n] = 0;
            if (sscanf(link, "net:[%llu]", &ino) != 1)
                continue;
            if (s->n == cap) {
                cap = cap ? cap * 2 : 256;
                uint64_t *v = realloc(s->v, cap * sizeof *v);
                if (!v)
                    break;
                s->v = v;
            }
            s->v[s->n++] = ino;
        }
        if (d)
            closedir(d);
        qsort(s->v, s->n, sizeof *s->v, cmp_u64);
        s->usable = s->n && bsearch(&own, s->v, s->n, sizeof *s->v, cmp_u64);
    }
    return !s->usable || bsearch(&ns, s->v, s->n, sizeof *s->v, cmp_u64);
}

/* ---- what a registry names ---------------------------------------------- */

/* A set of 64-bit hashes (open addressing; 0 stands for empty, so 0 is
 * stored as 1).  Two names with one hash only keep a file: never remove
 * one. */
struct hset {
    uint64_t *v;
    size_t mask;
};

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 0x100000001b3ull;
    return h ? h : 1;
}

static bool hset_init(struct hset *s, size_t entries)
{
    size_t cap = 64;
    while (cap < entries * 2)
        cap *= 2;
    s->v = calloc(cap, sizeof *s->v);
    s->mask = cap - 1;
    return s->v != NULL;
}

static void hset_add(struct hset *s, uint64_t h)
{
    for (size_t i = h & s->mask;; i = (i + 1) & s->mask) {
        if (s->v[i] == h)
            return;
        if (s->v[i] == 0) {
            s->v[i] = h;
            return;
        }
    }
}

static bool hset_has(const struct hset *s, uint64_t h)
{
    for (size_t i = h & s->mask;; i = (i + 1) & s->mask) {
        if (s->v[i] == h)
            return true;
        if (s->v[i] == 0)
            return false;
    }
}

static uint64_t name_hash(const char *name)
{
    return hash_bytes(name, strnlen(name, CHANNEL_NAME_MAX), 0xcbf29ce484222325ull);
}

static uint64_t table_hash(int32_t pid, uint64_t tag)
{
    return hash_bytes(&tag, sizeof tag, hash_bytes(&pid, sizeof pid, 0x84222325cbf29ce4ull));
}

/* The channels f's records name, into s (lock held). */
static void add_channels(struct reg_file *f, struct hset *s)
{
    uint32_t nc = reg_conn_hwm(f);
    for (uint32_t i = 0; i < nc; i++) {
        struct reg_conn_ent *e = &f->conns[i];
        if (reg_entry_state(&e->state) == REG_FREE)
            continue;
        char name[CHANNEL_NAME_MAX];
        memcpy(name, e->c.channel, sizeof name);   /* copied once: another process may write it */
        name[CHANNEL_NAME_MAX - 1] = 0;
        hset_add(s, name_hash(name));
    }
}

/* Marks the old candidates of namespace ns that f does not name (lock
 * held).  false if it could not tell (no memory): then nothing goes. */
static bool mark_unnamed(struct reg_file *f, struct cands *c, uint64_t ns)
{
    uint32_t nc = reg_conn_hwm(f), np = reg_proc_hwm(f);
    struct hset chans, tables;
    if (!hset_init(&chans, nc))
        return false;
    if (!hset_init(&tables, np)) {
        free(chans.v);
        return false;
    }
    add_channels(f, &chans);
    for (uint32_t i = 0; i < np; i++) {
        struct reg_proc *p = &f->procs[i];
        if (reg_entry_state(&p->state) != REG_FREE)
            hset_add(&tables, table_hash(p->pid, p->table_tag));
    }
    for (size_t i = 0; i < c->n; i++) {
        struct cand *k = &c->v[i];
        if (k->netns != ns || !k->old || k->kind == CAND_REGISTRY)
            continue;
        if (k->kind == CAND_TABLE)
            k->drop = !hset_has(&tables, table_hash(k->pid, k->tag));
        else
            k->drop = !hset_has(&chans, name_hash(k->segment));
    }
    free(chans.v);
    free(tables.v);
    return true;
}

/* Segments of connections between namespaces carry their client's
 * namespace but are recorded in the host's registry (REG_HOST_NETNS):
 * those it names, and the files beside them, stay.  A host registry that
 * cannot be read or locked now keeps every segment (for the next sweep). */
static void keep_host_named(struct cands *c, const char *dir)
{
    bool any = false;
    for (size_t i = 0; i < c->n && !any; i++)
        any = c->v[i].drop && (c->v[i].kind == CAND_SEGMENT || c->v[i].kind == CAND_BESIDE);
    if (!any)
        return;
    char path[4200];
    reg_name_of(path, sizeof path, dir, geteuid(), REG_HOST_NETNS);
    struct reg_file *f = NULL;
    struct stat st;
    int r = reg_map_file(path, geteuid(), REG_HOST_NETNS, &f, &st);
    if (r == -ENOENT)
        return;
    struct hset chans = { NULL, 0 };
    bool known = false;
    sigset_t old;
    if (r == 0 && reg_lock_within(f, &old, SWEEP_LOCK_MS) == 0) {
        uint32_t nc = reg_conn_hwm(f);
        if (hset_init(&chans, nc)) {
            known = true;
            add_channels(f, &chans);
        }
        reg_unlock(f, &old);
    }
    if (r == 0)
        munmap(f, REG_FILE_SIZE);
    for (size_t i = 0; i < c->n; i++) {
        struct cand *k = &c->v[i];
        if (k->drop && (k->kind == CAND_SEGMENT || k->kind == CAND_BESIDE) &&
            (!known || hset_has(&chans, name_hash(k->segment))))
            k->drop = false;
    }
    free(chans.v);
}

static bool registry_empty(struct reg_file *f)
{
    for (uint32_t i = 0; i < reg_listener_hwm(f); i++)
        if (reg_entry_state(&f->listeners[i].state) != REG_FREE)
            return false;
    for (uint32_t i = 0; i < reg_conn_hwm(f); i++)
        if (reg_entry_state(&f->conns[i].state) != REG_FREE)
            return false;
    for (uint32_t i = 0; i < reg_proc_hwm(f); i++)
        if (reg_entry_state(&f->procs[i].state) != REG_FREE)
            return false;
    return true;
}

/* ---- the sweep ------------------------------------------------------------ */

struct sweep_counts {
    unsigned registries, files;
};

/* Another namespace's registry (the candidate k): its dead entries go,
 * then what it does not name, then the file itself if nothing in it lives
 * and nobody is in its namespace. */
static void sweep_foreign(struct cands *c, struct cand *k, const char *dir, struct netns_seen *seen,
                          uint64_t own, struct sweep_counts *n)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, k->name);
    struct reg_file *f;
    struct stat st;
    if (reg_map_file(path, geteuid(), k->netns, &f, &st) < 0)
        return;   /* not one we can read: its files stay too */
    sigset_t old;
    if (reg_lock_within(f, &old, SWEEP_LOCK_MS) == 0) {
        struct reg_live_cache lc;
        reg_live_cache_init(&lc);
        reg_sweep_listeners(f, &lc);
        reg_sweep_conns(f, &lc);   /* unlinks the channels of dead records */
        reg_sweep_procs(f, &lc);   /* and the tables of dead processes */
        if (mark_unnamed(f, c, k->netns) && k->old && registry_empty(f) && !netns_in_use(seen, k->netns, own)) {
            /* under the lock: an opener that mapped it asks, under the
             * lock, whether its name is still there (registry.c) */
            if (unlink(path) == 0)
                n->registries++;
        }
        reg_unlock(f, &old);
    }
    munmap(f, REG_FILE_SIZE);
}

static void drop_marked(struct cands *c, const char *dir, struct sweep_counts *n)
{
    char path[4200];
    for (size_t i = 0; i < c->n; i++) {
        struct cand *k = &c->v[i];
        if (!k->drop)
            continue;
        shunt_log(LOG_DEBUG, "registry: sweeping %s (namespace %llu%s)", k->name, (unsigned long long)k->netns,
                  k->kind == CAND_TABLE ? ": no process has this table" : ": no record names it");
        if (k->kind == CAND_SEGMENT) {
            channel_unlink(k->segment);   /* gives its memory back to the budget, and the files beside it */
        } else {
            snprintf(path, sizeof path, "%s/%s", dir, k->name);
            if (k->kind == CAND_BESIDE) {
                /* beside a segment that is still there: that one decides */
                char seg[4200];
                struct stat st;
                snprintf(seg, sizeof seg, "%s/%s", dir, k->segment);
                if (lstat(seg, &st) == 0)
                    continue;
            }
            unlink(path);
        }
        n->files++;
    }
}

void reg_sweep_files(struct reg_file *own)
{
    int saved = errno;
    const char *dir = reg_directory();
    uint64_t own_ns = own->hdr.netns;
    struct cands c = { 0 };
    struct netns_seen seen = { 0 };
    struct sweep_counts n = { 0, 0 };
    /* channels live in /dev/shm; a test's private registry directory holds
     * none (and its channels have scope 0) */
    gather(&c, dir, strcmp(dir, "/dev/shm") == 0, own_ns);

    /* our namespace: what our registry does not name */
    sigset_t old;
    if (c.n && reg_lock_within(own, &old, SWEEP_LOCK_MS) == 0) {
        mark_unnamed(own, &c, own_ns);
        reg_unlock(own, &old);
    }
    /* other namespaces: each registry of ours there, in turn */
    for (size_t i = 0; i < c.n; i++)
        if (c.v[i].kind == CAND_REGISTRY)
            sweep_foreign(&c, &c.v[i], dir, &seen, own_ns, &n);
    /* files of namespaces whose registry is gone, once nobody is there */
    for (size_t i = 0; i < c.n; i++) {
        struct cand *k = &c.v[i];
        if (k->kind == CAND_REGISTRY || !k->old || k->drop || k->netns == own_ns)
            continue;
        char path[4200];
        struct stat st;
        reg_name_of(path, sizeof path, dir, geteuid(), k->netns);
        if (lstat(path, &st) < 0 && errno == ENOENT && !netns_in_use(&seen, k->netns, own_ns))
            k->drop = true;
    }
    keep_host_named(&c, dir);
    drop_marked(&c, dir, &n);
    if (n.registries || n.files)
        shunt_log(LOG_DEBUG, "registry: swept %u registries of namespaces nobody is in and %u files nobody names",
                  n.registries, n.files);
    free(c.v);
    free(seen.v);
    errno = saved;
}
