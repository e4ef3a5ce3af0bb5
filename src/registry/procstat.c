/*
 * procstat.c: a process's table of its TCP sockets (procstat.h): making,
 * adopting after exec, growing and writing it in the owning process, and
 * reading another process's table safely in `shunt stat`.
 *
 * The whole table's address range (PST_FILE_MAX) is reserved at open and
 * the file grows under it with fallocate, a page at a time: entries never
 * move, so a writer needs no lock once its fd's page exists, and a page
 * that a full tmpfs could not provide is refused at fallocate, never a
 * SIGBUS at the first write.  No fd of the table stays open: the program's
 * fds are the program's (a daemon that closes every fd, or dup2s onto a
 * high one, meets nothing of ours).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/fsize.h"
#include "base/log.h"
#include "base/own_file.h"
#include "base/real.h"
#include "registry/procstat.h"
#include "registry/registry_impl.h"

#define PAGE 4096u
#define FORK_WAIT_MS 20

static _Atomic(char *) table;           /* the mapping (PST_FILE_MAX bytes reserved), or NULL */
static _Atomic uint32_t table_fds;      /* fds the file covers now */
static uint64_t table_ino;              /* the file's inode: growing checks it is still ours */
static uint64_t table_tag;              /* the random part of its name (the registry's entry keeps it) */
static bool table_failed;               /* do not try again (no registry, no memory) */
static atomic_bool table_closed;        /* the process is ending: no table is made again */
/* A forked child that could not make its table at once keeps the parent's
 * mapping, to copy from when it next records something. */
static char *parent_table;
static uint32_t parent_fds;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

/* The table's path (processes.c builds it); "" without a registry. */
static void table_name(char *out, size_t len, int32_t pid, uint64_t tag)
{
    struct reg_file *f = reg_mapped();
    if (f)
        reg_table_path(out, len, f, pid, tag);
    else
        snprintf(out, len, "%s", "");
}

static uint32_t fds_of_size(uint64_t size)
{
    if (size < PST_OFFSET(0))
        return 0;
    uint64_t n = size / PST_ENTRY_SIZE - 1;
    return n > PST_MAX_FDS ? PST_MAX_FDS : (uint32_t)n;
}

/* Makes the file cover fd (table_lock held).  The file is opened for it
 * by name and checked by inode: no fd of ours stays open for a program's
 * close_range or dup2 to take over. */
static int grow(int fd)
{
    if (fd < 0 || (uint32_t)fd >= PST_MAX_FDS)
        return -EMFILE;
    if ((uint32_t)fd < atomic_load(&table_fds))
        return 0;
    uint64_t want = (PST_OFFSET(fd + 1) + PAGE - 1) / PAGE * PAGE;
    if (want > PST_FILE_MAX)
        want = PST_FILE_MAX;
    int32_t pid;
    reg_self_identity(&pid);
    char path[4200];
    table_name(path, sizeof path, pid, table_tag);
    int f = open(path, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (f < 0)
        return -errno;
    struct stat st;
    int r = 0;
    if (fstat(f, &st) < 0 || (uint64_t)st.st_ino != table_ino)
        r = -ESTALE;   /* removed, and another file made under the name */
    else if (fsize_fallocate(f, 0, 0, (off_t)want) < 0 && (errno != EOPNOTSUPP || fsize_ftruncate(f, (off_t)want) < 0))
        r = -errno;
    shunt_real.close(f);
    if (r == 0)
        atomic_store_explicit(&table_fds, fds_of_size(want), memory_order_release);
    return r;
}

/* Is the existing file at fd this process's own table (left by the image
 * before exec)? */
static bool ours(int fd, int32_t pid, const struct reg_owner *self)
{
    struct pst_header h;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 07777) != 0600)
        return false;
    if (shunt_real.pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h)
        return false;
    return h.magic == PST_MAGIC && h.version == PST_VERSION && h.entry_size == PST_ENTRY_SIZE && h.pid == pid &&
           h.owner.start == self->start && (uint64_t)st.st_size <= PST_FILE_MAX;
}

static struct pst_entry *entry_at(void *base, int fd)
{
    return (struct pst_entry *)(void *)((char *)base + PST_OFFSET(fd));
}

static uint64_t inode_of(int fd);
static void copy_parent(void);

/* The process's table: the one the image before exec left (its name is in
 * the registry's entry with our pid), or a new file.  A new one is made
 * with O_EXCL under a name with 64 random bits: no other user can have
 * made it first, and nothing of ours is ever written into a file we did
 * not make (issue 16, finding 3: a table named after the pid alone was
 * made first by another user, mapped, written and then truncated under
 * us, a SIGBUS).  A crash between the file and its registry entry leaves
 * a file no entry names, which the sweep of /dev/shm removes (sweep.c). */
static int open_table(int wait_ms, bool after_fork)
{
    if (table_failed || atomic_load(&table_closed))
        return -ENOENT;
    int32_t pid;
    const struct reg_owner *self = reg_self_identity(&pid);
    char path[4200] = "";
    uint64_t tag = 0;
    int fd = -1;
    bool adopt = false;
    struct stat st;
    struct reg_file *f;
    int r = reg_get(&f);   /* the table's name needs the registry's namespace */
    if (r < 0)
        goto no_registry;
    /* a forked child has a pid of its own, with no table before it (an
     * entry a dead process left with that pid, reg_proc_add takes over),
     * and waits for the lock once, not twice */
    r = after_fork ? -ENOENT : reg_proc_find_self(wait_ms, &tag);
    if (r == 0) {
        table_name(path, sizeof path, pid, tag);
        fd = own_file_open("stat", path, O_RDWR, 0600, &st);
        adopt = fd >= 0 && ours(fd, pid, self);
        if (fd >= 0 && !adopt) {
            shunt_real.close(fd);
            fd = -1;
        }
    } else if (r != -ENOENT) {
        goto no_registry;
    }
    for (int i = 0; i < 4 && fd < 0; i++) {
        tag = own_file_random();
        table_name(path, sizeof path, pid, tag);
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) {
            r = -errno;
            goto fail;
        }
    }
    if (fd < 0) {
        r = -EEXIST;
        goto fail;
    }
    if (!adopt) {
        struct pst_header h = { .magic = PST_MAGIC, .version = PST_VERSION, .entry_size = PST_ENTRY_SIZE,
                                .max_fds = PST_MAX_FDS, .pid = pid, .owner = *self };
        h.netns = f->hdr.netns;
        h.uid = f->hdr.uid;
        /* the umask may have taken bits of 0600: shunt stat insists on it */
        if (fchmod(fd, 0600) < 0 || fsize_pwrite(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
            r = -errno;
            shunt_real.close(fd);
            unlink(path);
            goto fail;
        }
    }
    /* published after the file exists, so that the registry never names a
     * table that is not there */
    r = reg_proc_add(wait_ms, tag);
    if (r < 0) {
        shunt_real.close(fd);
        if (!adopt)
            unlink(path);
        goto no_registry;
    }
    struct stat now;
    void *p = fstat(fd, &now) == 0 ? mmap(NULL, PST_FILE_MAX, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                                   : MAP_FAILED;
    r = p == MAP_FAILED ? -errno : 0;
    shunt_real.close(fd);   /* the mapping is all we keep */
    if (r < 0)
        goto fail_listed;
    table_ino = (uint64_t)now.st_ino;
    table_tag = tag;
    atomic_store(&table_fds, adopt ? fds_of_size((uint64_t)now.st_size) : 0);
    if (adopt) {
        /* the image before exec recorded fds that closed at exec */
        uint32_t n = atomic_load(&table_fds);
        for (uint32_t i = 0; i < n; i++) {
            struct pst_entry *e = entry_at(p, (int)i);
            if (!e->used)
                continue;
            uint64_t ino = inode_of((int)i);   /* an id of 0: not known then, any socket still there */
            if (!ino || (e->r.sock && ino != e->r.sock))
                e->used = 0;
        }
    }
    atomic_store_explicit(&table, (char *)p, memory_order_release);
    shunt_log(LOG_DEBUG, "stat: fd table %s %s", path, adopt ? "taken over after exec" : "created");
    return 0;
no_registry:
    shunt_log(LOG_WARN, "stat: no fd table for shunt stat: %s", strerror(-r));
    table_failed = r != -ETIMEDOUT || !wait_ms;   /* a short wait may be tried again */
    return r;
fail_listed:
    reg_proc_remove();   /* unlinks the file too */
fail:
    shunt_log(LOG_WARN, "stat: cannot make the fd table %s: %s", path, strerror(-r));
    table_failed = true;
    return r;
}

/* Takes the entry's sequence lock: even to odd.  Only threads of this
 * process write here; one that holds it for long is another thread in the
 * middle of a copy, so a bounded wait suffices, and giving up costs one
 * stale line in `shunt stat`. */
static bool entry_lock(struct pst_entry *e, uint32_t *seq)
{
    for (int i = 0; i < 1000; i++) {
        uint32_t s = atomic_load_explicit(&e->seq, memory_order_relaxed);
        if (!(s & 1) && atomic_compare_exchange_weak_explicit(&e->seq, &s, s + 1, memory_order_acquire,
                                                              memory_order_relaxed)) {
            *seq = s + 1;
            /* the odd sequence is visible before any field changes */
            atomic_thread_fence(memory_order_release);
            return true;
        }
        sched_yield();
    }
    return false;
}

static void entry_unlock(struct pst_entry *e, uint32_t seq)
{
    /* release: the fields are written before the sequence says so */
    atomic_store_explicit(&e->seq, seq + 1, memory_order_release);
}

int pst_put(const struct pst_rec *r)
{
    int fd = r->fd;
    if (fd < 0 || (uint32_t)fd >= PST_MAX_FDS)
        return -EMFILE;
    char *base = atomic_load_explicit(&table, memory_order_acquire);
    if (!base || (uint32_t)fd >= atomic_load_explicit(&table_fds, memory_order_acquire)) {
        int e = 0;
        pthread_mutex_lock(&table_lock);
        if (!atomic_load(&table))
            e = open_table(0, false);
        if (e == 0)
            e = grow(fd);
        pthread_mutex_unlock(&table_lock);
        if (e == 0 && parent_table)
            copy_parent();
        if (e < 0)
            return e;
        base = atomic_load_explicit(&table, memory_order_acquire);
    }
    struct pst_entry *e = entry_at(base, fd);
    uint32_t seq;
    if (!entry_lock(e, &seq))
        return -EBUSY;
    e->r = *r;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);   /* a tick's precision will do; no clock read */
    e->r.changed_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    e->used = 1;
    entry_unlock(e, seq);
    return 0;
}

void pst_put_all(const struct pst_rec *r)
{
    char *base = atomic_load_explicit(&table, memory_order_acquire);
    if (!base)
        return;
    uint32_t n = atomic_load_explicit(&table_fds, memory_order_acquire);
    for (uint32_t fd = 0; fd < n; fd++) {
        struct pst_entry *e = entry_at(base, (int)fd);
        if (e->used && r->sock && e->r.sock == r->sock) {
            struct pst_rec c = *r;
            c.fd = (int32_t)fd;
            pst_put(&c);
        }
    }
}

void pst_clear(int fd)
{
    char *base = atomic_load_explicit(&table, memory_order_acquire);
    if (!base || fd < 0 || (uint32_t)fd >= atomic_load_explicit(&table_fds, memory_order_acquire))
        return;
    struct pst_entry *e = entry_at(base, fd);
    if (!e->used)
        return;
    uint32_t seq;
    if (!entry_lock(e, &seq))
        return;
    e->used = 0;
    entry_unlock(e, seq);
}

void pst_clear_range(unsigned first, unsigned last)
{
    uint32_t n = atomic_load_explicit(&table_fds, memory_order_acquire);
    for (uint64_t fd = first; fd <= last && fd < n; fd++)
        pst_clear((int)fd);
}

static uint64_t inode_of(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) ? (uint64_t)st.st_ino : 0;
}

int pst_open(void)
{
    if (atomic_load_explicit(&table, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&table_lock);
    int r = atomic_load(&table) ? 0 : open_table(0, false);
    pthread_mutex_unlock(&table_lock);
    return r;
}

int pst_get(int fd, struct pst_rec *out)
{
    char *base = atomic_load_explicit(&table, memory_order_acquire);
    if (!base || fd < 0 || (uint32_t)fd >= atomic_load_explicit(&table_fds, memory_order_acquire))
        return -ENOENT;
    struct pst_entry *e = entry_at(base, fd);
    uint32_t seq;
    if (!entry_lock(e, &seq))
        return -EBUSY;
    bool used = e->used != 0;
    if (used)
        *out = e->r;
    entry_unlock(e, seq);
    return used ? 0 : -ENOENT;
}

/* The parent's records of the fds this child holds (checked against the
 * kernel: the parent may have changed its table since the fork). */
static void copy_parent(void)
{
    char *parent = parent_table;
    uint32_t n = parent_fds;
    parent_table = NULL;
    for (uint32_t fd = 0; fd < n; fd++) {
        struct pst_entry *e = entry_at(parent, (int)fd);
        if (!e->used)
            continue;
        struct pst_rec r = e->r;
        uint64_t ino = r.fd == (int32_t)fd ? inode_of((int)fd) : 0;
        if (ino && (!r.sock || ino == r.sock))
            pst_put(&r);
    }
    munmap(parent, PST_FILE_MAX);
}

void pst_after_fork_child(void)
{
    if (parent_table)   /* a grandchild: what its parent never copied is lost */
        munmap(parent_table, PST_FILE_MAX);
    parent_table = atomic_exchange(&table, NULL);
    parent_fds = atomic_exchange(&table_fds, 0);
    table_failed = false;
    atomic_store(&table_closed, false);
    pthread_mutex_init(&table_lock, NULL);   /* another thread of the parent may have held it */
    if (!parent_table)
        return;
    /* Made now, so that shunt stat shows the child's holds at once; but a
     * parent thread may have held the registry's lock at the fork, and the
     * child must not stall for it: then the copy waits for the child's
     * next record. */
    if (open_table(FORK_WAIT_MS, true) == 0)
        copy_parent();
}

void pst_exit(void)
{
    /* Once (exit's destructor, then an _exit in another library's: the
     * same process).  The mapping stays: another thread may still write
     * into it, and a record it makes later must not make the file again. */
    atomic_store(&table_closed, true);
    if (atomic_exchange(&table, NULL))
        reg_proc_remove();   /* unlinks the file too */
}

/* ---- the reader ---------------------------------------------------------- */

static const char *const path_names[PST_PATH_COUNT] = { "tcp", "offered", "shm", "single-copy", "fabric" };
static const char *const kind_names[PST_KIND_COUNT] = { "none", "listener", "connection" };
static const char *const role_names[PST_ROLE_COUNT] = { "unknown", "client", "server" };

const char *pst_path_name(unsigned p) { return p < PST_PATH_COUNT ? path_names[p] : "?"; }
const char *pst_kind_name(unsigned k) { return k < PST_KIND_COUNT ? kind_names[k] : "?"; }
const char *pst_role_name(unsigned r) { return r < PST_ROLE_COUNT ? role_names[r] : "?"; }

/* A record from another process's memory: every field checked, the reason
 * made a plain short key. */
static bool valid_rec(struct pst_rec *r, int fd)
{
    if (r->kind == PST_KIND_NONE || r->kind >= PST_KIND_COUNT || r->path >= PST_PATH_COUNT ||
        r->role >= PST_ROLE_COUNT || r->fd != fd)
        return false;
    r->reason[PST_REASON_MAX - 1] = 0;
    for (char *c = r->reason; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
            *c = '?';
    r->lanes[PST_LANES_MAX - 1] = 0;
    for (char *c = r->lanes; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_' || *c == ','))
            *c = '?';
    return true;
}

int pst_read(int32_t pid, const struct reg_owner *owner, uint64_t tag, struct pst_rec **out, size_t *count)
{
    *out = NULL;
    *count = 0;
    char path[4200];
    table_name(path, sizeof path, pid, tag);
    if (!path[0])
        return -ENOENT;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = 0;
    char *a = NULL, *b = NULL, *c = NULL;
    struct stat st;
    struct pst_header h;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 07777) != 0600) {
        r = -EPERM;
        goto out;
    }
    if (shunt_real.pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h || h.magic != PST_MAGIC ||
        h.version != PST_VERSION ||
        h.entry_size != PST_ENTRY_SIZE || h.pid != pid || (owner && owner->start && h.owner.start != owner->start)) {
        r = -EPROTO;
        goto out;
    }
    size_t size = (size_t)(st.st_size < 0 ? 0 : st.st_size);
    if (size > PST_FILE_MAX)
        size = PST_FILE_MAX;
    uint32_t n = fds_of_size(size);
    size = PST_OFFSET(n);
    a = malloc(size ? size : 1);
    b = malloc(size ? size : 1);
    c = malloc(size ? size : 1);
    *out = calloc(n ? n : 1, sizeof **out);
    if (!a || !b || !c || !*out) {
        r = -ENOMEM;
        goto out;
    }
    /* Three copies: sequences, fields, sequences again.  An entry is kept
     * when its sequence was even and the same before and after the copy of
     * its fields, so no write overlapped that copy.  (One copy cannot tell:
     * the kernel's copy may read an entry's bytes in any order.) */
    ssize_t la = shunt_real.pread(fd, a, size, 0);
    ssize_t lb = la < 0 ? -1 : shunt_real.pread(fd, b, size, 0);
    ssize_t lc = lb < 0 ? -1 : shunt_real.pread(fd, c, size, 0);
    if (la < 0 || lb < 0 || lc < 0) {
        r = -errno;
        goto out;
    }
    size_t got = (size_t)la;
    if ((size_t)lb < got)
        got = (size_t)lb;
    if ((size_t)lc < got)
        got = (size_t)lc;
    for (uint32_t i = 0; i < n && PST_OFFSET(i + 1) <= got; i++) {
        struct pst_entry *ea = (struct pst_entry *)(void *)(a + PST_OFFSET(i));
        struct pst_entry *eb = (struct pst_entry *)(void *)(b + PST_OFFSET(i));
        struct pst_entry *ec = (struct pst_entry *)(void *)(c + PST_OFFSET(i));
        uint32_t sa = atomic_load_explicit(&ea->seq, memory_order_relaxed);
        uint32_t sc = atomic_load_explicit(&ec->seq, memory_order_relaxed);
        if (sa == 0 || (sa & 1) || sa != sc || !eb->used)
            continue;
        struct pst_rec rec = eb->r;
        if (valid_rec(&rec, (int)i))
            (*out)[(*count)++] = rec;
    }
out:
    free(a);
    free(b);
    free(c);
    if (r < 0) {
        free(*out);
        *out = NULL;
        *count = 0;
    }
    shunt_real.close(fd);
    return r;
}
