/*
 * channel.c: the shared-memory segment of one accelerated connection (see
 * channel.h).
 *
 * Owns: the segment's name, its file under /dev/shm, its layout and the
 * checks made before a process trusts a segment someone else created.
 *
 * Layout (CHANNEL_ALIGN is fixed, not the run-time page size, because both
 * processes must compute the same offsets; on x86_64 it is the page size):
 *
 *   0                       struct chan_hdr (magic ... ring[2])
 *   HDR_BYTES               data of ring 0 (client to server), ring_size bytes
 *   HDR_BYTES + ring_size   data of ring 1 (server to client), ring_size bytes
 *
 * HDR_BYTES is sizeof(struct chan_hdr) rounded up to CHANNEL_ALIGN, and
 * ring_size is a power of two >= RING_MIN_SIZE (a multiple of it), so each
 * ring's data starts on a page.  The file has that full size but only the
 * header and the rings' first start_size bytes are allocated at creation;
 * a ring's further pages are allocated when it grows (channel_tx_grow), so
 * an idle connection holds HDR_BYTES + 2 * start_size of memory.  The views are computed from the ring size
 * this process chose (create) or checked (attach), never from the header
 * again.
 *
 * Names: "shunt-<euid>-<netns>-c<CHANNEL_VERSION>-<pid>-<counter>-<12 hex
 * digits from getrandom>", made with O_EXCL.  The random digits keep
 * another user from making the name first; the namespace (the registry's
 * that records the channel, channel_set_scope) lets a sweep tell whose it
 * is once that namespace is gone (src/registry/sweep.c); the version keeps
 * the sweep from misreading another format's names.  At most 6 + 10 + 1 +
 * 10 + 2 + 2 + 1 + 10 + 1 + 6 + 1 + 12 = 62 characters (a uid and an nsfs
 * inode are 32-bit, a pid at most 10 digits, the counter kept below 10^6).
 * Only [A-Za-z0-9-] are accepted on the way in, so a name taken from shared
 * memory cannot climb out of /dev/shm or reach the registry's file (whose
 * name has a '.').
 *
 * The files beside a segment (the ends' wake FIFOs, a handed-back prefix)
 * are "<segment>-w<side>-<aux_key>" and "<segment>-b-<aux_key>": aux_key is
 * 64 random bits in the segment's header, which only this user can read.
 * Anybody can list /dev/shm and see a segment the moment it is made; with
 * names that followed from it alone, another user made them first and the
 * holders of an end could not wake one another (issue 16, finding 3).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/fd_place.h"
#include "base/fsize.h"
#include "base/own_file.h"
#include "base/real.h"
#include "transport/channel.h"
#include "transport/shm_budget.h"

/* The segment's fd lives only until it is mapped; it is made in the room
 * above the program's fd limit (base/fd_place.h), so that a program that
 * took every number it may still gets its connections accelerated. */
static int create_file(void *path)
{
    return open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
}

struct own_open {
    const char *path;
    struct stat *st;
};

static int open_own(void *arg)
{
    struct own_open *o = arg;
    return own_file_open("channel", o->path, O_RDWR, 0600, o->st);
}

#define CHANNEL_ALIGN 4096u
#define CHANNEL_DIR "/dev/shm/"
#define CHANNEL_PREFIX "shunt-"
#define HDR_BYTES ((sizeof(struct chan_hdr) + CHANNEL_ALIGN - 1) & ~(size_t)(CHANNEL_ALIGN - 1))
#define CREATE_TRIES 8

_Static_assert(sizeof(size_t) >= 8, "channel_size needs 64-bit sizes");
_Static_assert((RING_MIN_SIZE & (RING_MIN_SIZE - 1)) == 0, "RING_MIN_SIZE is a power of two");
_Static_assert(RING_MIN_SIZE % CHANNEL_ALIGN == 0, "ring data must stay page-aligned");
_Static_assert(RING_MAX_SIZE <= UINT32_MAX, "ring_size is stored in 32 bits");
_Static_assert(sizeof(CHANNEL_DIR) + CHANNEL_NAME_MAX + sizeof("-w0-0123456789abcdef") <= 128, "path buffer");
/* where the rings' data starts in the file: a change must bump CHANNEL_VERSION */
_Static_assert(HDR_BYTES == 4096, "the rings' data moved: bump CHANNEL_VERSION");

static atomic_uint name_counter;
static _Atomic uint64_t name_scope;

void channel_set_scope(uint64_t netns)
{
    atomic_store(&name_scope, netns);
}

static bool ring_size_ok(uint64_t size)
{
    return size >= RING_MIN_SIZE && size <= RING_MAX_SIZE && (size & (size - 1)) == 0;
}

size_t channel_size(uint32_t ring_size)
{
    return HDR_BYTES + 2 * (size_t)ring_size;
}

/*
 * Copies a name into out (CHANNEL_NAME_MAX bytes) and checks the copy:
 * "shunt-" and at least one more character, only [A-Za-z0-9-], shorter than
 * CHANNEL_NAME_MAX.  The source may be in shared memory and unterminated, so
 * it is read at most CHANNEL_NAME_MAX bytes, once; only the copy is used.
 */
static bool name_copy_ok(char out[CHANNEL_NAME_MAX], const char *name)
{
    if (name == NULL)
        return false;
    size_t n = 0;
    while (n < CHANNEL_NAME_MAX && (out[n] = name[n]) != '\0')
        n++;
    if (n == CHANNEL_NAME_MAX || n <= sizeof(CHANNEL_PREFIX) - 1)
        return false;
    /* From here on only the private copy is looked at. */
    if (memcmp(out, CHANNEL_PREFIX, sizeof(CHANNEL_PREFIX) - 1) != 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = out[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'))
            return false;
    }
    return true;
}

static void name_path(char *path, size_t len, const char *name)
{
    snprintf(path, len, "%s%s", CHANNEL_DIR, name);
}

/* Fills ch's private part for side from a mapping of a segment whose ring
 * size the caller chose or checked. */
static void set_views(struct channel *ch, void *base, size_t map_size, uint32_t ring_size, int side)
{
    struct chan_hdr *hdr = base;
    unsigned char *data = (unsigned char *)base + HDR_BYTES;
    int other = 1 - side;

    ch->hdr = hdr;
    ch->map_size = map_size;
    /* ring s carries side s's output: ring 0 client to server, ring 1 back */
    ch->tx.hdr = &hdr->ring[side];
    ch->tx.data = data + (size_t)side * ring_size;
    ch->tx.size = ring_size;
    ch->rx.hdr = &hdr->ring[other];
    ch->rx.data = data + (size_t)other * ring_size;
    ch->rx.size = ring_size;
    ch->self = &hdr->side[side];
    ch->peer = &hdr->side[other];
    ch->side = side;
    /* Our own indexes as the segment has them now; kept and believed only
     * when the caller knows nobody else moves them (channel_own_indexes). */
    /* each ring's tag, read once: the header must keep it (ring.c) */
    ch->tx.tag = atomic_load(&ch->tx.hdr->tag);
    ch->rx.tag = atomic_load(&ch->rx.hdr->tag);
    ch->tx.my_head = atomic_load(&ch->tx.hdr->head);
    ch->rx.my_tail = atomic_load(&ch->rx.hdr->tail);
    ch->tx.mine_known = ch->rx.mine_known = false;
}

void channel_own_indexes(struct channel *ch, bool own)
{
    /* relaxed atomics: a thread passing the socket on clears it while
     * another may be in a ring call, which only loses a check by it */
    __atomic_store_n(&ch->tx.mine_known, own, __ATOMIC_RELAXED);
    __atomic_store_n(&ch->rx.mine_known, own, __ATOMIC_RELAXED);
}

/* Backs [off, off + len) of the segment's file with memory now, so that a
 * full /dev/shm is an error here rather than a SIGBUS in a copy later. */
static int reserve_range(int fd, size_t off, size_t len)
{
    if (fsize_fallocate(fd, 0, (off_t)off, (off_t)len) < 0 && errno != EOPNOTSUPP)
        return -errno;
    return 0;
}

static int create(struct channel *ch, uint32_t ring_size, uint32_t start_size, uint64_t shm_limit)
{
    if (ch == NULL)
        return -EINVAL;
    memset(ch, 0, sizeof *ch);
    if (!ring_size_ok(ring_size))
        return -EINVAL;
    if (start_size > ring_size || !ring_size_ok(start_size))
        start_size = ring_size;

    size_t total = channel_size(ring_size);
    size_t reserved = HDR_BYTES + 2 * (size_t)start_size;
    int b = shm_budget_take(reserved, shm_limit);
    if (b < 0)
        return b;
    char name[CHANNEL_NAME_MAX];
    char path[128];
    int fd = -1;
    for (int i = 0; i < CREATE_TRIES && fd < 0; i++) {
        unsigned counter = atomic_fetch_add_explicit(&name_counter, 1, memory_order_relaxed) % 1000000u;
        int len = snprintf(name, sizeof name, CHANNEL_PREFIX "%u-%llu-c%u-%d-%u-%012llx", (unsigned)geteuid(),
                           (unsigned long long)atomic_load(&name_scope), CHANNEL_VERSION, (int)getpid(), counter,
                           (unsigned long long)(own_file_random() & 0xffffffffffffull));
        if (len < 0 || (size_t)len >= sizeof name)
            return -ENAMETOOLONG;
        name_path(path, sizeof path, name);
        fd = fd_place_make(create_file, path, false);   /* even when the program took every number */
        if (fd < 0 && errno != EEXIST)
            return -errno;
    }
    if (fd < 0) {
        shm_budget_give(reserved);
        return -EEXIST;
    }

    int err = 0;
    /* The umask may have removed bits of 0600; attach insists on exactly
     * 0600.  Then size the file, and reserve its pages: on tmpfs a page that
     * cannot be allocated later is a SIGBUS in the middle of a copy, so a
     * full /dev/shm must show up here, as an error, instead. */
    if (fchmod(fd, 0600) < 0 || fsize_ftruncate(fd, (off_t)total) < 0)
        err = -errno;
    if (err == 0)
        err = reserve_range(fd, 0, HDR_BYTES + start_size);
    if (err == 0)
        err = reserve_range(fd, HDR_BYTES + ring_size, start_size);
    void *base = MAP_FAILED;
    if (err == 0) {
        base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base == MAP_FAILED)
            err = -errno;
    }
    shunt_real.close(fd);
    if (err != 0) {
        unlink(path);
        shm_budget_give(reserved);
        return err == -ENOSPC || err == -ENOMEM ? -ENOSPC : err;
    }

    /* The file is new and all zero; the peer learns its name only through
     * the registry, whose lock publishes these plain stores. */
    struct chan_hdr *hdr = base;
    hdr->magic = CHANNEL_MAGIC;
    hdr->version = CHANNEL_VERSION;
    hdr->ring_size = ring_size;
    hdr->total_size = total;
    hdr->aux_key = own_file_random();
    atomic_store_explicit(&hdr->reserved, reserved, memory_order_relaxed);
    atomic_store_explicit(&hdr->neg, 0, memory_order_relaxed);
    ring_init(&hdr->ring[0], own_file_random());
    ring_init(&hdr->ring[1], own_file_random());
    /* the ends' locks (struct seg_lock) are free as all zero */

    set_views(ch, base, total, ring_size, 0);
    channel_own_indexes(ch, true);   /* a new segment: ours alone until we pass the socket on */
    ring_resize(&ch->tx, start_size);
    ring_resize(&ch->rx, start_size);
    ch->aux_key = hdr->aux_key;
    memcpy(ch->name, name, sizeof name);
    return 0;
}

static int attach(struct channel *ch, const char *name, int side)
{
    if (ch == NULL)
        return -EINVAL;
    memset(ch, 0, sizeof *ch);
    char nm[CHANNEL_NAME_MAX];
    if ((side != 0 && side != 1) || !name_copy_ok(nm, name))
        return -EINVAL;

    char path[128];
    name_path(path, sizeof path, nm);
    /* Ours alone: a file of another user, or one others may write, is not a
     * channel this process created a peer for (-EPERM, never mapped); opened
     * in the room above the program's fd limit (base/fd_place.h). */
    struct stat st;
    struct own_open o = { path, &st };
    int fd = fd_place_make(open_own, &o, false);
    if (fd < 0)
        return fd;

    int err = 0;
    uint64_t magic = 0, total = 0, aux_key = 0;
    uint32_t version = 0, ring_size = 0;
    unsigned char raw[offsetof(struct chan_hdr, aux_key) + sizeof(uint64_t)];
    void *base = MAP_FAILED;

    if (st.st_size < (off_t)sizeof(struct chan_hdr)) {
        err = -EPROTO;
        goto out;
    }
    /* The fixed fields are read once, into private memory, and checked
     * there; the mapping's size comes from the checked ring size. */
    ssize_t got = shunt_real.pread(fd, raw, sizeof raw, 0);
    if (got < 0) {
        err = -errno;
        goto out;
    }
    if ((size_t)got != sizeof raw) {
        err = -EPROTO;
        goto out;
    }
    memcpy(&magic, raw + offsetof(struct chan_hdr, magic), sizeof magic);
    memcpy(&version, raw + offsetof(struct chan_hdr, version), sizeof version);
    memcpy(&ring_size, raw + offsetof(struct chan_hdr, ring_size), sizeof ring_size);
    memcpy(&total, raw + offsetof(struct chan_hdr, total_size), sizeof total);
    memcpy(&aux_key, raw + offsetof(struct chan_hdr, aux_key), sizeof aux_key);
    if (magic != CHANNEL_MAGIC || version != CHANNEL_VERSION || !ring_size_ok(ring_size) ||
        total != channel_size(ring_size) || (uint64_t)st.st_size != total) {
        err = -EPROTO;
        goto out;
    }

    size_t map_size = channel_size(ring_size);
    base = mmap(NULL, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        err = -errno;
        goto out;
    }
    set_views(ch, base, map_size, ring_size, side);
    ch->aux_key = aux_key;
    memcpy(ch->name, nm, sizeof nm);

out:
    shunt_real.close(fd);
    return err;
}

/* errno is this process's, not ours: every entry point leaves it as it
 * found it (the interposed call that got us here may yet succeed). */


int channel_create(struct channel *ch, uint32_t ring_size, uint32_t start_size, uint64_t shm_limit)
{
    int saved = errno;
    int r = create(ch, ring_size, start_size, shm_limit);
    errno = saved;
    return r;
}

int channel_attach(struct channel *ch, const char *name, int side)
{
    int saved = errno;
    int r = attach(ch, name, side);
    errno = saved;
    return r;
}

int channel_peek(const char *name, struct chan_hdr *out)
{
    char copy[CHANNEL_NAME_MAX];
    char path[128];
    if (!name_copy_ok(copy, name))
        return -EINVAL;
    name_path(path, sizeof path, copy);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    ssize_t n = shunt_real.pread(fd, out, sizeof *out, 0);
    int err = errno;
    shunt_real.close(fd);
    if (n < 0)
        return -err;
    if ((size_t)n < sizeof *out || out->magic != CHANNEL_MAGIC || out->version != CHANNEL_VERSION)
        return -EPROTO;
    return 0;
}

void channel_detach(struct channel *ch)
{
    int saved = errno;
    if (ch == NULL)
        return;
    if (ch->hdr != NULL && ch->map_size != 0)
        munmap(ch->hdr, ch->map_size);
    memset(ch, 0, sizeof *ch);
    errno = saved;
}

/* The files beside segment nm, named with its aux_key. */
static void beside_path(char *out, size_t len, const char *nm, const char *what, uint64_t key)
{
    snprintf(out, len, "%s%s-%s-%016llx", CHANNEL_DIR, nm, what, (unsigned long long)key);
}

void channel_unlink(const char *name)
{
    char nm[CHANNEL_NAME_MAX];
    char path[160];
    if (!name_copy_ok(nm, name))
        return;
    name_path(path, sizeof path, nm);
    /* ENOENT (already gone) is the expected race between the two ends, and
     * there is nothing else a caller could do about a failure here.  The
     * one whose unlink removed the file gives its memory back to the
     * budget (the header's figure is only advisory: the budget is
     * recounted from the files at the limit), and removes the files beside
     * it, whose names it learns from the header (the key may be scribbled:
     * the names built from it are still "<this segment>-...-<hex>"). */
    int saved = errno;
    uint64_t head[2] = { 0, 0 };   /* reserved, aux_key */
    _Static_assert(offsetof(struct chan_hdr, aux_key) == offsetof(struct chan_hdr, reserved) + 8,
                   "channel_unlink reads reserved and aux_key at once");
    bool known = false;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd >= 0) {
        struct stat st;
        known = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
                shunt_real.pread(fd, head, sizeof head, offsetof(struct chan_hdr, reserved)) == (ssize_t)sizeof head;
        shunt_real.close(fd);
    }
    if (unlink(path) == 0 && known && head[0] <= RING_MAX_SIZE * 2ull + HDR_BYTES)
        shm_budget_give(head[0]);
    if (known) {
        static const char *const beside[] = { "w0", "w1", "b" };
        for (unsigned i = 0; i < sizeof beside / sizeof beside[0]; i++) {
            beside_path(path, sizeof path, nm, beside[i], head[1]);
            unlink(path);
        }
    }
    errno = saved;
}

void channel_wake_path(const struct channel *ch, int side, char *out, size_t len)
{
    beside_path(out, len, ch->name, side ? "w1" : "w0", ch->aux_key);
}

void channel_back_path(const struct channel *ch, char *out, size_t len)
{
    beside_path(out, len, ch->name, "b", ch->aux_key);
}

/* Digits up to a character that is not one: p after them, or NULL when
 * there were none or too many. */
static const char *digits(const char *p, uint64_t *v)
{
    uint64_t n = 0;
    int k = 0;
    for (; *p >= '0' && *p <= '9'; p++, k++) {
        if (k == 19)
            return NULL;
        n = n * 10 + (uint64_t)(*p - '0');
    }
    *v = n;
    return k ? p : NULL;
}

/* n lower-case hex digits: p after them, or NULL. */
static const char *hex(const char *p, int n)
{
    for (int i = 0; i < n; i++, p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return NULL;
    return p;
}

bool channel_file_parse(const char *file_name, struct channel_file *out)
{
    uint64_t uid, netns, ver, pid, counter;
    const char *p = strncmp(file_name, CHANNEL_PREFIX, sizeof CHANNEL_PREFIX - 1) == 0
                        ? digits(file_name + sizeof CHANNEL_PREFIX - 1, &uid)
                        : NULL;
    if (!p || *p++ != '-' || !(p = digits(p, &netns)) || *p++ != '-' || *p++ != 'c' || !(p = digits(p, &ver)) ||
        ver != CHANNEL_VERSION || *p++ != '-' || !(p = digits(p, &pid)) || *p++ != '-' ||
        !(p = digits(p, &counter)) || *p++ != '-' || !(p = hex(p, 12)) || uid > UINT32_MAX)
        return false;
    size_t seg_len = (size_t)(p - file_name);
    if (seg_len >= CHANNEL_NAME_MAX)
        return false;
    bool beside = false;
    if (*p) {
        if (!strncmp(p, "-w0-", 4) || !strncmp(p, "-w1-", 4))
            p += 4;
        else if (!strncmp(p, "-b-", 3))
            p += 3;
        else
            return false;
        if (!(p = hex(p, 16)) || *p)
            return false;
        beside = true;
    }
    out->uid = (uint32_t)uid;
    out->netns = netns;
    out->beside = beside;
    memcpy(out->segment, file_name, seg_len);
    out->segment[seg_len] = 0;
    return true;
}

/* Grows by at least 8 times, and to the whole send when that is more. */
#define GROW_FACTOR 8

/* Backs [cur, next) of the outgoing ring within the user's budget: false
 * (and no more growth asked for) when there is no memory for it. */
static bool back_growth(struct channel *ch, uint64_t cur, uint64_t next, uint64_t shm_limit)
{
    int saved = errno;
    uint64_t more = next - cur;
    bool ok = shm_budget_take(more, shm_limit) == 0;
    /* Back the new pages now: on tmpfs a page that cannot be had later is a
     * SIGBUS in the middle of a copy.  MADV_POPULATE_WRITE fails cleanly
     * instead (an older kernel without it keeps the ring as it is). */
    if (ok && madvise(ch->tx.data + cur, (size_t)more, MADV_POPULATE_WRITE) < 0) {
        shm_budget_give(more);
        ok = false;
    }
    if (!ok)
        ch->grow_refused = true;
    errno = saved;
    return ok;
}

/* The new size is in the ring: its pages counted as the segment's. */
static void grown(struct channel *ch, uint64_t cur, uint64_t next, int r)
{
    if (r == 0) {
        atomic_fetch_add(&ch->hdr->reserved, next - cur);
        ch->tx_was_full = false;
    } else {
        shm_budget_give(next - cur);   /* pages stay backed; the next try finds them */
    }
}

void channel_tx_grow(struct channel *ch, uint64_t want, uint64_t shm_limit)
{
    uint64_t cur = ring_size_now(&ch->tx);
    uint64_t cap = ch->tx.size;
    if (cur == 0 || cur >= cap || ch->grow_refused || (!ch->tx_was_full && want <= cur))
        return;
    if (ring_readable(&ch->tx) != 0)
        return;   /* only an empty ring changes size */
    uint64_t next = cur * GROW_FACTOR;
    while (next < want && next < cap)
        next *= 2;
    if (next > cap)
        next = cap;
    if (back_growth(ch, cur, next, shm_limit))
        grown(ch, cur, next, ring_resize(&ch->tx, next));
}

bool channel_tx_may_grow_in_place(const struct channel *ch)
{
    uint64_t cur = ring_size_now(&ch->tx);
    /* full, once a program was told so (EAGAIN or a short send), stays full
     * until the reader reads, as the kernel's answer promised */
    return cur != 0 && cur < ch->tx.size && !atomic_load_explicit(&ch->grow_refused, memory_order_relaxed) &&
           !atomic_load_explicit(&ch->tx_told_full, memory_order_relaxed) &&
           ring_may_grow_in_place(&ch->tx, 2 * cur) == 0;
}

bool channel_tx_grow_in_place(struct channel *ch, uint64_t shm_limit)
{
    uint64_t cur = ring_size_now(&ch->tx);
    if (!channel_tx_may_grow_in_place(ch) || !back_growth(ch, cur, 2 * cur, shm_limit))
        return false;
    int r = ring_grow_in_place(&ch->tx, 2 * cur);
    grown(ch, cur, 2 * cur, r);
    return r == 0;
}

uint64_t channel_reserved(const struct channel *ch)
{
    return ch->hdr ? atomic_load(&ch->hdr->reserved) : 0;
}
