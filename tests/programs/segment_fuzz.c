/*
 * segment_fuzz.c: issue 16, suite (b).  A process with several accelerated
 * connections transferring checksummed data; another process of the same
 * user (the scribbler, forked before any socket) overwrites one field of one
 * live connection's segment at a time, with boundary and random values.
 *
 * Every field of struct chan_hdr, of both struct chan_side and of both
 * struct ring_hdr is listed below (the _Static_asserts make a new field a
 * compile error here until it is listed), and gets each value of enum vkind.
 * Each case is a fresh connection (both ends in this process), its two
 * directions streaming a position-derived pattern; the field is overwritten
 * either right after accept (with a TCP prefix sent before the claim, still
 * unread) or in the middle of the transfer.  Then the writers stop and shut
 * down, the readers read to the end, and both ends are closed.
 *
 * What must hold (a failure prints FAIL and the process exits 1; a hang is
 * caught by the watchdog thread, which prints HANG and exits 3):
 *   - no byte ever differs from the pattern, on any connection;
 *   - the background connections (throttled, so their readers sleep in the
 *     kernel and take the doorbell paths) never fail, stall or lose a byte;
 *   - the corrupted connection ends: exact to EOF, or ECONNRESET, EIO,
 *     EPIPE, or a timeout of its reader (SO_RCVTIMEO, 1 s: a lost wake-up,
 *     as a peer that stops sending), never a clean EOF before the last byte
 *     its writer sent (counted as eof-short; the caller fails on it); every
 *     one of its calls returns;
 *   - close() of its ends returns within CLOSE_BOUND_MS, and every thread
 *     of the case within JOIN_BOUND_MS;
 *   - the process's exit (exit or _exit, with the last corrupted
 *     connections still open) is timed by the caller.
 *
 * usage: segment_fuzz GROUP SEED EXIT_HOW
 *   GROUP: fields and groups, comma-separated: all, hdr, side0, side1, rings,
 *          or a field's name (side0.holders, side0.tx_lock+holders2, ring1.*)
 *   EXIT_HOW: exit or _exit
 * stdout: "ready", "exiting", and one line of figures; stderr: one line per
 * case.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "transport/channel.h"

/* A field added to the segment must be listed below (and fuzzed). */
_Static_assert(sizeof(struct chan_hdr) == 2688, "struct chan_hdr changed: list its fields in segment_fuzz.c");
_Static_assert(sizeof(struct chan_side) == 1088, "struct chan_side changed: list its fields in segment_fuzz.c");
_Static_assert(sizeof(struct ring_hdr) == 192, "struct ring_hdr changed: list its fields in segment_fuzz.c");

#define NBG 4                   /* background connections */
#define NPAR 3                  /* cases at once */
#define NOPEN 3                 /* corrupted connections left open at exit */
#define CASE_TMO_MS 1000        /* SO_RCVTIMEO/SO_SNDTIMEO of a case's sockets */
#define BG_TMO_MS 10000         /* ... of the background's: a timeout there is a hang */
#define CLOSE_BOUND_MS 8000
#define JOIN_BOUND_MS 15000
#define WARM_BYTES (32u << 10)

/* ---- the fields -------------------------------------------------------- */

struct field {
    char name[48];
    size_t off, len;
    long other;   /* the same field of the other side or ring, or -1 */
    long pre;     /* a 32-bit word set to pre_val first (a lock is used only while holders > 1), or -1 */
    uint32_t pre_val;
};

#define MSIZE(type, m) sizeof(((type *)0)->m)
#define HDR_FIELDS(X) X(magic) X(version) X(ring_size) X(total_size) X(reserved) X(neg) X(down) X(back_len) \
    X(down_tail) X(down_txtail)
#define SIDE_FIELDS(X) X(sleepers) X(space_sleepers) X(waiters) X(holders) X(state) X(cpu) X(pid) X(tx_lock)  \
    X(rx_lock) X(wait_lock) X(bytes_out) X(sends) X(bytes_in) X(recvs) X(doorbells) X(spins_won)             \
    X(spins_lost) X(sleeps) X(bells) X(bells_eaten) X(draining) X(closed_copy) X(copy_from) X(copy_end)      \
    X(zc_sends) X(zc_bytes) X(zc_off) X(doorbells_held) X(doorbell_owed) X(corked) X(fwake) X(fsleepers) X(fspace_sleepers) X(zc.state) X(zc.pid)     \
    X(zc.taker) X(zc.pidns) X(zc.pos) X(zc.len) X(zc.nseg) X(zc.seg) X(zc.done)
#define RING_FIELDS(X) X(head) X(head_copy) X(tag) X(tail) X(tail_copy) X(fin) X(size) X(fin_copy) X(size_copy)

static struct field fields[160];
static int nfields;

static struct field *add_field(const char *name, size_t off, size_t len, long other)
{
    struct field *f = &fields[nfields++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->off = off;
    f->len = len;
    f->other = other;
    f->pre = -1;
    return f;
}

/* Every field, in the order of the layout. */
static void list_all_fields(void)
{
#define HDR_ONE(m) add_field("hdr." #m, offsetof(struct chan_hdr, m), MSIZE(struct chan_hdr, m), -1);
    HDR_FIELDS(HDR_ONE)
    /* and the words before the sides all at once */
    add_field("hdr.*", 0, offsetof(struct chan_hdr, side), -1);
    for (int s = 0; s < 2; s++) {
        char g[8];
        snprintf(g, sizeof g, "side%d", s);
        size_t base = offsetof(struct chan_hdr, side) + (size_t)s * sizeof(struct chan_side);
        size_t obase = offsetof(struct chan_hdr, side) + (size_t)(1 - s) * sizeof(struct chan_side);
#define SIDE_ONE(m)                                                                                          \
    {                                                                                                        \
        char n[48];                                                                                          \
        snprintf(n, sizeof n, "%s." #m, g);                                                                  \
        add_field(n, base + offsetof(struct chan_side, m), MSIZE(struct chan_side, m),                       \
                  (long)(obase + offsetof(struct chan_side, m)));                                            \
    }
        SIDE_FIELDS(SIDE_ONE)
        /* The end's locks are engaged only while another process holds the
         * end: each again with holders at 2 first.  Then the whole side. */
        static const struct { const char *name; size_t off; } locks[] = {
            { "tx_lock", offsetof(struct chan_side, tx_lock) },
            { "rx_lock", offsetof(struct chan_side, rx_lock) },
            { "wait_lock", offsetof(struct chan_side, wait_lock) },
        };
        for (size_t i = 0; i < sizeof locks / sizeof locks[0]; i++) {
            char n[48];
            snprintf(n, sizeof n, "%s.%s+holders2", g, locks[i].name);
            struct field *f = add_field(n, base + locks[i].off, MSIZE(struct chan_side, tx_lock),
                                        (long)(obase + locks[i].off));
            f->pre = (long)(base + offsetof(struct chan_side, holders));
            f->pre_val = 2;
        }
        char n[48];
        snprintf(n, sizeof n, "%s.*", g);
        add_field(n, base, sizeof(struct chan_side), (long)obase);
    }
    for (int r = 0; r < 2; r++) {
        size_t base = offsetof(struct chan_hdr, ring) + (size_t)r * sizeof(struct ring_hdr);
        size_t obase = offsetof(struct chan_hdr, ring) + (size_t)(1 - r) * sizeof(struct ring_hdr);
#define RING_ONE(m)                                                                                          \
    {                                                                                                        \
        char n[48];                                                                                          \
        snprintf(n, sizeof n, "ring%d." #m, r);                                                              \
        add_field(n, base + offsetof(struct ring_hdr, m), MSIZE(struct ring_hdr, m),                         \
                  (long)(obase + offsetof(struct ring_hdr, m)));                                             \
    }
        RING_FIELDS(RING_ONE)
        char n[48];
        snprintf(n, sizeof n, "ring%d.*", r);
        add_field(n, base, sizeof(struct ring_hdr), (long)obase);
    }
}

/* Keeps the fields a comma-separated list of names and groups selects:
 * all, hdr, side0, side1, rings, or a field's full name. */
static void select_fields(const char *list)
{
    list_all_fields();
    int keep = 0;
    for (int i = 0; i < nfields; i++) {
        const char *name = fields[i].name;
        bool on = false;
        for (const char *tok = list; *tok && !on;) {
            size_t n = strcspn(tok, ",");
            on = (n == 3 && !strncmp(tok, "all", 3)) || (n == 5 && !strncmp(tok, "rings", 5) && !strncmp(name, "ring", 4)) ||
                 (strlen(name) == n && !strncmp(name, tok, n)) || (!strncmp(name, tok, n) && name[n] == '.');
            tok += n + (tok[n] == ',');
        }
        if (on)
            fields[keep++] = fields[i];
    }
    nfields = keep;
}

/* The values: boundaries, the other side's, next to the current, random. */
enum vkind { V_ZERO, V_ONE, V_ONES, V_MAX, V_HUGE, V_HUGE2, V_OTHER, V_PLUS1, V_MINUS1, V_RANDOM, V_RANDOM2, V_COUNT };
static const char *vname[V_COUNT] = { "0", "1", "-1", "max", "huge", "huge2", "other", "+1", "-1'", "random", "random2" };

/* ---- the scribbler ----------------------------------------------------- */

struct scribble_cmd {
    char path[128];
    uint32_t off, len;
    int32_t other, pre;
    uint32_t pre_val;
    uint32_t kind;
    uint64_t rnd;
};

struct scribble_rep {
    uint64_t before, after;
    int err;
};

static uint64_t mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t word_of(const unsigned char *p, size_t len)
{
    uint64_t v = 0;
    memcpy(&v, p, len < 8 ? len : 8);
    return v;
}

/* The other process: maps the segment's header page as a peer would, and
 * stores the new value with one atomic store where the field is a word. */
static void scribbler(int in, int out)
{
    struct scribble_cmd c;
    while (read(in, &c, sizeof c) == (ssize_t)sizeof c) {
        struct scribble_rep r = { 0, 0, 0 };
        int fd = open(c.path, O_RDWR | O_CLOEXEC);
        void *m = fd >= 0 ? mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (fd >= 0)
            close(fd);
        if (m == MAP_FAILED) {
            r.err = errno;
            if (write(out, &r, sizeof r) != (ssize_t)sizeof r)
                _exit(1);
            continue;
        }
        unsigned char *p = (unsigned char *)m + c.off, nw[2048];
        size_t len = c.len, w = len >= 8 ? 8 : len;
        memcpy(nw, p, len);
        uint64_t cur = word_of(nw, len), v = cur;
        r.before = cur;
        if (c.pre >= 0)
            __atomic_store_n((uint32_t *)((unsigned char *)m + c.pre), c.pre_val, __ATOMIC_SEQ_CST);
        switch (c.kind) {
        case V_ZERO: memset(nw, 0, len); break;
        case V_ONES: memset(nw, 0xff, len); break;
        case V_ONE: v = 1; break;
        case V_MAX: v = w == 8 ? (uint64_t)INT64_MAX : (uint64_t)INT32_MAX; break;
        case V_HUGE: v = w == 8 ? 1ull << 40 : 1ull << 30; break;
        case V_HUGE2: v = w == 8 ? 1ull << 62 : 0xfffffff0u; break;
        case V_OTHER:
            if (c.other < 0)
                r.err = ENOENT;
            else
                memcpy(nw, (unsigned char *)m + c.other, len);
            break;
        case V_PLUS1: v = cur + 1; break;
        case V_MINUS1: v = cur - 1; break;
        default:
            for (size_t i = 0; i < len; i++)
                nw[i] = (unsigned char)(mix64(c.rnd + i / 8) >> (i % 8 * 8));
            break;
        }
        if (c.kind == V_ONE || c.kind == V_MAX || c.kind == V_HUGE || c.kind == V_HUGE2 || c.kind == V_PLUS1 ||
            c.kind == V_MINUS1)
            memcpy(nw, &v, w);
        if (!r.err) {
            if (len == 8)
                __atomic_store_n((uint64_t *)p, word_of(nw, 8), __ATOMIC_SEQ_CST);
            else if (len == 4)
                __atomic_store_n((uint32_t *)p, (uint32_t)word_of(nw, 4), __ATOMIC_SEQ_CST);
            else
                memcpy(p, nw, len);
        }
        r.after = word_of(p, len);
        munmap(m, 4096);
        if (write(out, &r, sizeof r) != (ssize_t)sizeof r)
            _exit(1);
    }
    _exit(0);
}

static int scr_in = -1, scr_out = -1;
static pthread_mutex_t scr_lock = PTHREAD_MUTEX_INITIALIZER;

static struct scribble_rep scribble(const char *seg, const struct field *f, int kind, uint64_t rnd)
{
    struct scribble_cmd c;
    memset(&c, 0, sizeof c);
    snprintf(c.path, sizeof c.path, "/dev/shm/%s", seg);
    c.off = (uint32_t)f->off;
    c.len = (uint32_t)f->len;
    c.other = (int32_t)f->other;
    c.pre = (int32_t)f->pre;
    c.pre_val = f->pre_val;
    c.kind = (uint32_t)kind;
    c.rnd = rnd;
    struct scribble_rep r = { 0, 0, EIO };
    pthread_mutex_lock(&scr_lock);
    if (write(scr_out, &c, sizeof c) != (ssize_t)sizeof c || read(scr_in, &r, sizeof r) != (ssize_t)sizeof r)
        r.err = EIO;
    pthread_mutex_unlock(&scr_lock);
    return r;
}

/* ---- the streams ------------------------------------------------------- */

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The byte at stream position p of stream key. */
static void pattern(uint64_t key, uint64_t pos, unsigned char *buf, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint64_t p = pos + i, w = mix64(key ^ mix64(p >> 3));
        for (unsigned b = (unsigned)(p & 7); b < 8 && i < n; b++, i++)
            buf[i] = (unsigned char)(w >> (b * 8));
    }
}

static _Atomic uint64_t bytes_checked;
static _Atomic int failures;

#define FAIL(...)                                                                                          \
    do {                                                                                                   \
        fprintf(stderr, "FAIL: " __VA_ARGS__);                                                             \
        fputc('\n', stderr);                                                                               \
        atomic_fetch_add(&failures, 1);                                                                    \
    } while (0)

struct dir {
    const char *what;
    int wfd, rfd;
    uint64_t key;
    uint64_t prefix;        /* bytes the writer sent before the claim */
    bool throttle;
    atomic_bool stop;
    _Atomic uint64_t sent, recvd;
    int werr, rerr;
    bool eof, wrong;
    uint64_t wrong_at;
    pthread_t wt, rt;
};

static void *writer(void *arg)
{
    struct dir *d = arg;
    unsigned char buf[65536];
    uint64_t pos = d->prefix, rnd = d->key;
    while (!atomic_load(&d->stop)) {
        rnd = mix64(rnd);
        size_t n = 1 + (size_t)(rnd % (d->throttle ? 8192 : sizeof buf));
        pattern(d->key, pos, buf, n);
        size_t off = 0;
        while (off < n) {
            ssize_t w = send(d->wfd, buf + off, n - off, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                d->werr = w < 0 ? errno : EIO;
                atomic_store(&d->sent, pos + off);
                return NULL;
            }
            off += (size_t)w;
        }
        pos += n;
        atomic_store(&d->sent, pos);
        if (d->throttle && (rnd >> 32) % 4 == 0) {
            struct timespec ts = { 0, 300000 + (long)((rnd >> 40) % 700000) };
            nanosleep(&ts, NULL);
        }
    }
    if (shutdown(d->wfd, SHUT_WR) < 0)
        d->werr = errno;
    return NULL;
}

static void *reader(void *arg)
{
    struct dir *d = arg;
    unsigned char buf[65536], want[65536];
    uint64_t pos = 0, rnd = ~d->key;
    for (;;) {
        rnd = mix64(rnd);
        size_t cap = 1 + (size_t)(rnd % sizeof buf);
        ssize_t r = recv(d->rfd, buf, cap, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            d->rerr = errno;
            break;
        }
        if (r == 0) {
            d->eof = true;
            break;
        }
        pattern(d->key, pos, want, (size_t)r);
        if (memcmp(buf, want, (size_t)r) != 0) {
            size_t i = 0;
            while (buf[i] == want[i])
                i++;
            d->wrong = true;
            d->wrong_at = pos + i;
            FAIL("%s: wrong byte at stream position %llu (got %#x, want %#x; %zd bytes read there)", d->what,
                 (unsigned long long)(pos + i), buf[i], want[i], r);
            break;
        }
        pos += (uint64_t)r;
        atomic_store(&d->recvd, pos);
        atomic_fetch_add(&bytes_checked, (uint64_t)r);
    }
    return NULL;
}

static void set_timeouts(int fd, int ms)
{
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static void dir_start(struct dir *d, const char *what, int wfd, int rfd, uint64_t key, uint64_t prefix, bool throttle)
{
    d->what = what;
    d->wfd = wfd;
    d->rfd = rfd;
    d->key = key;
    d->prefix = prefix;
    d->throttle = throttle;
    atomic_store(&d->stop, false);
    atomic_store(&d->sent, prefix);
    atomic_store(&d->recvd, 0);
    d->werr = d->rerr = 0;
    d->eof = d->wrong = false;
    if (pthread_create(&d->wt, NULL, writer, d) || pthread_create(&d->rt, NULL, reader, d)) {
        fprintf(stderr, "FAIL: pthread_create\n");
        exit(1);
    }
}

/* Joins a thread within a bound; false if it is still running. */
static bool join_by(pthread_t t, uint64_t deadline_ms)
{
    uint64_t now = now_ms();
    uint64_t left = deadline_ms > now ? deadline_ms - now : 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(left / 1000);
    ts.tv_nsec += (long)(left % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return pthread_timedjoin_np(t, NULL, &ts) == 0;
}

/* ---- connections ------------------------------------------------------- */

static int lfd;
static struct sockaddr_in laddr;
static pthread_mutex_t make_lock = PTHREAD_MUTEX_INITIALIZER;
static int (*accelerated)(int);
static char known[4096][CHANNEL_NAME_MAX];
static int nknown;

/* The segment this process created since the last call: its name. */
static bool new_segment(char *out)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    bool found = false;
    /* shunt-<uid>-<netns>-c<version>-<pid>-<n>-<random> (transport/channel.c) */
    char uid[32], pid[48];
    snprintf(uid, sizeof uid, "shunt-%u-", (unsigned)geteuid());
    snprintf(pid, sizeof pid, "-c%u-%d-", (unsigned)CHANNEL_VERSION, (int)getpid());
    while (f && fgets(line, sizeof line, f)) {
        char *p = strstr(line, "/dev/shm/");
        if (!p || strncmp(p + 9, uid, strlen(uid)) != 0 || !strstr(p + 9, pid))
            continue;
        p += 9;
        p[strcspn(p, " \n")] = '\0';
        bool seen = false;
        for (int i = 0; i < nknown && !seen; i++)
            seen = !strcmp(known[i], p);
        if (!seen && nknown < 4096) {
            snprintf(known[nknown++], CHANNEL_NAME_MAX, "%s", p);
            snprintf(out, CHANNEL_NAME_MAX, "%s", p);
            found = true;
        }
    }
    if (f)
        fclose(f);
    return found;
}

/* A connection with both ends here; prefix bytes of the client's stream
 * key are sent before the server accepts (and claims). */
static bool make_pair(int *c, int *s, char *seg, uint64_t key, uint64_t prefix)
{
    pthread_mutex_lock(&make_lock);
    *c = socket(AF_INET, SOCK_STREAM, 0);
    bool ok = *c >= 0 && connect(*c, (struct sockaddr *)&laddr, sizeof laddr) == 0;
    if (ok && prefix) {
        unsigned char buf[4096];
        pattern(key, 0, buf, (size_t)prefix);
        ok = send(*c, buf, (size_t)prefix, MSG_NOSIGNAL) == (ssize_t)prefix;
    }
    *s = ok ? accept(lfd, NULL, NULL) : -1;
    ok = ok && *s >= 0 && new_segment(seg);
    pthread_mutex_unlock(&make_lock);
    if (!ok || !accelerated(*c) || !accelerated(*s)) {
        FAIL("connection %d/%d not made or not accelerated (%s)", *c, *s, strerror(errno));
        return false;
    }
    return true;
}

/* ---- the cases --------------------------------------------------------- */

struct fuzz_case {
    int field, kind;
    bool early;
};

static struct fuzz_case *cases;
static int ncases;
static _Atomic int next_case;
static uint64_t seed;

enum outcome { O_EXACT, O_EOF_SHORT, O_RESET, O_EIO, O_EPIPE, O_STALL, O_OTHER, O_WRONG, O_COUNT };
static const char *oname[O_COUNT] = { "exact", "eof-short", "reset", "eio", "epipe", "stalled", "other-error",
                                      "WRONG" };
static _Atomic int outcomes[O_COUNT];
static _Atomic uint64_t close_max_ms;
static _Atomic int connections, skipped;

/* The watchdog: every phase of a case has a bound. */
struct slot {
    _Atomic uint64_t since;   /* 0: idle */
    _Atomic int case_no;
    const char *_Atomic phase;
    _Atomic uint64_t bound;
};
static struct slot slots[NPAR];

static void phase(struct slot *sl, const char *what, uint64_t bound_ms)
{
    atomic_store(&sl->phase, what);
    atomic_store(&sl->bound, bound_ms);
    atomic_store(&sl->since, now_ms());
}

static void *watchdog(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ts = { 0, 200000000 };
        nanosleep(&ts, NULL);
        for (int i = 0; i < NPAR; i++) {
            uint64_t since = atomic_load(&slots[i].since);
            if (since && now_ms() - since > atomic_load(&slots[i].bound)) {
                int k = atomic_load(&slots[i].case_no);
                printf("HANG: case %d (%s, value %s, %s) stuck in %s for %llu ms\n", k, fields[cases[k].field].name,
                       vname[cases[k].kind], cases[k].early ? "early" : "mid", atomic_load(&slots[i].phase),
                       (unsigned long long)(now_ms() - since));
                fflush(stdout);
                _exit(3);
            }
        }
    }
    return NULL;
}

static enum outcome classify(const struct dir *d)
{
    if (d->wrong)
        return O_WRONG;
    if (d->eof)
        return atomic_load(&d->recvd) == atomic_load(&d->sent) ? O_EXACT : O_EOF_SHORT;
    switch (d->rerr) {
    case ECONNRESET: return O_RESET;
    case EIO: return O_EIO;
    case EPIPE: return O_EPIPE;
    case EAGAIN: return O_STALL;
    default: return O_OTHER;
    }
}

struct open_pair {
    int c, s;
};
static struct open_pair left_open[NOPEN];
static _Atomic int nleft;

static void run_case(int k, struct slot *sl)
{
    struct fuzz_case *fc = &cases[k];
    const struct field *f = &fields[fc->field];
    uint64_t key = mix64(seed ^ (uint64_t)k << 20);
    uint64_t prefix = fc->early ? 1 + mix64(key) % 3000 : 0;
    int c, s;
    char seg[CHANNEL_NAME_MAX];
    atomic_store(&sl->case_no, k);
    phase(sl, "connect", 10000);
    if (!make_pair(&c, &s, seg, key, prefix))
        return;
    atomic_fetch_add(&connections, 1);
    set_timeouts(c, CASE_TMO_MS);
    set_timeouts(s, CASE_TMO_MS);
    struct dir up, down;   /* client to server, and back */
    dir_start(&up, "case c2s", c, s, key, prefix, false);
    dir_start(&down, "case s2c", s, c, ~key, 0, false);
    struct scribble_rep r;
    if (fc->early) {
        phase(sl, "scribble", 10000);
        r = scribble(seg, f, fc->kind, mix64(key + 7));
    } else {
        phase(sl, "warm up", 10000);
        uint64_t until = now_ms() + 3000;
        while ((atomic_load(&up.recvd) < WARM_BYTES || atomic_load(&down.recvd) < WARM_BYTES) && now_ms() < until &&
               !up.rerr && !down.rerr) {
            struct timespec ts = { 0, 200000 };
            nanosleep(&ts, NULL);
        }
        if (atomic_load(&up.recvd) < WARM_BYTES || atomic_load(&down.recvd) < WARM_BYTES)
            FAIL("case %d: the connection did not carry %u bytes each way before the scribble", k, WARM_BYTES);
        phase(sl, "scribble", 10000);
        r = scribble(seg, f, fc->kind, mix64(key + 7));
    }
    if (r.err == ENOENT)
        atomic_fetch_add(&skipped, 1);
    phase(sl, "transfer", 10000);
    struct timespec linger = { 0, 5000000 + (long)(mix64(key + 9) % 25000000) };
    nanosleep(&linger, NULL);
    atomic_store(&up.stop, true);
    atomic_store(&down.stop, true);
    phase(sl, "join", JOIN_BOUND_MS + 1000);
    uint64_t deadline = now_ms() + JOIN_BOUND_MS;
    if (!join_by(up.wt, deadline) || !join_by(down.wt, deadline) || !join_by(up.rt, deadline) ||
        !join_by(down.rt, deadline)) {
        printf("HANG: case %d (%s, value %s): a call on the corrupted connection did not return in %d ms\n", k,
               f->name, vname[fc->kind], JOIN_BOUND_MS);
        fflush(stdout);
        _exit(3);
    }
    enum outcome ou = classify(&up), od = classify(&down);
    atomic_fetch_add(&outcomes[ou], 1);
    atomic_fetch_add(&outcomes[od], 1);
    uint64_t t0 = now_ms(), took = 0;
    int slot = -1;
    if (k >= ncases - NOPEN && (slot = atomic_fetch_add(&nleft, 1)) < NOPEN) {
        left_open[slot] = (struct open_pair){ c, s };   /* the exit closes these */
    } else {
        phase(sl, "close", CLOSE_BOUND_MS + 1000);
        close(c);
        close(s);
        took = now_ms() - t0;
        uint64_t m = atomic_load(&close_max_ms);
        while (took > m && !atomic_compare_exchange_weak(&close_max_ms, &m, took))
            ;
        if (took > CLOSE_BOUND_MS)
            FAIL("case %d: close took %llu ms", k, (unsigned long long)took);
    }
    atomic_store(&sl->since, 0);
    fprintf(stderr, "case %d %s=%s %s [%#llx -> %#llx]%s: c2s %s (%llu of %llu, err %d), s2c %s (%llu of %llu, err %d), close %llu ms\n",
            k, f->name, vname[fc->kind], fc->early ? "early" : "mid", (unsigned long long)r.before,
            (unsigned long long)r.after, r.err == ENOENT ? " (no other side)" : "", oname[ou],
            (unsigned long long)atomic_load(&up.recvd), (unsigned long long)atomic_load(&up.sent), up.rerr, oname[od],
            (unsigned long long)atomic_load(&down.recvd), (unsigned long long)atomic_load(&down.sent), down.rerr,
            (unsigned long long)took);
}

static void *case_thread(void *arg)
{
    struct slot *sl = arg;
    int k;
    while ((k = atomic_fetch_add(&next_case, 1)) < ncases)
        run_case(k, sl);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s GROUP SEED exit|_exit\n", argv[0]);
        return 2;
    }
    seed = strtoull(argv[2], NULL, 0);
    bool quick_exit = !strcmp(argv[3], "_exit");
    select_fields(argv[1]);
    if (nfields == 0) {
        fprintf(stderr, "no field matches %s\n", argv[1]);
        return 2;
    }
    accelerated = (int (*)(int))dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
    if (!accelerated) {
        printf("not under shunt\n");
        return 77;
    }

    /* The scribbler: another process, forked before any socket exists. */
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) || pipe2(from, O_CLOEXEC))
        return 1;
    pid_t pid = fork();
    if (pid == 0) {
        close(to[1]);
        close(from[0]);
        scribbler(to[0], from[1]);
    }
    close(to[0]);
    close(from[1]);
    scr_out = to[1];
    scr_in = from[0];

    ncases = nfields * V_COUNT;
    cases = calloc((size_t)ncases, sizeof *cases);
    for (int i = 0; i < ncases; i++) {
        cases[i].field = i / V_COUNT;
        cases[i].kind = i % V_COUNT;
        cases[i].early = (i + i / V_COUNT) % 2 == 0;
    }

    lfd = socket(AF_INET, SOCK_STREAM, 0);
    laddr = (struct sockaddr_in){ .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof laddr;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&laddr, sizeof laddr) || listen(lfd, 64) ||
        getsockname(lfd, (struct sockaddr *)&laddr, &alen)) {
        perror("listener");
        return 1;
    }

    struct dir bg[NBG][2];
    int bgfd[NBG][2];
    for (int i = 0; i < NBG; i++) {
        char seg[CHANNEL_NAME_MAX];
        if (!make_pair(&bgfd[i][0], &bgfd[i][1], seg, 1000 + (uint64_t)i, 0))
            return 1;
        atomic_fetch_add(&connections, 1);
        set_timeouts(bgfd[i][0], BG_TMO_MS);
        set_timeouts(bgfd[i][1], BG_TMO_MS);
        dir_start(&bg[i][0], "background c2s", bgfd[i][0], bgfd[i][1], 1000 + (uint64_t)i, 0, true);
        dir_start(&bg[i][1], "background s2c", bgfd[i][1], bgfd[i][0], 2000 + (uint64_t)i, 0, true);
    }
    printf("ready %d fields, %d cases\n", nfields, ncases);
    fflush(stdout);

    pthread_t wd, ct[NPAR];
    pthread_create(&wd, NULL, watchdog, NULL);
    for (int i = 0; i < NPAR; i++)
        pthread_create(&ct[i], NULL, case_thread, &slots[i]);
    for (int i = 0; i < NPAR; i++)
        pthread_join(ct[i], NULL);

    /* The background connections end exactly: every byte, then EOF. */
    uint64_t deadline = now_ms() + JOIN_BOUND_MS;
    for (int i = 0; i < NBG; i++)
        for (int j = 0; j < 2; j++)
            atomic_store(&bg[i][j].stop, true);
    for (int i = 0; i < NBG; i++)
        for (int j = 0; j < 2; j++) {
            struct dir *d = &bg[i][j];
            if (!join_by(d->wt, deadline) || !join_by(d->rt, deadline)) {
                printf("HANG: background connection %d did not end\n", i);
                fflush(stdout);
                _exit(3);
            }
            if (!d->eof || d->werr || atomic_load(&d->recvd) != atomic_load(&d->sent))
                FAIL("background connection %d %s: %s (received %llu of %llu, reader errno %d, writer errno %d)", i,
                     j ? "s2c" : "c2s", d->eof ? "short" : "no EOF", (unsigned long long)atomic_load(&d->recvd),
                     (unsigned long long)atomic_load(&d->sent), d->rerr, d->werr);
        }
    for (int i = 0; i < NBG; i++) {
        close(bgfd[i][0]);
        close(bgfd[i][1]);
    }

    int values = V_COUNT;
    printf("fields %d values %d cases %d skipped %d connections %d bytes_checked %llu wrong_bytes %d failures %d "
           "close_max_ms %llu outcomes",
           nfields, values, ncases, atomic_load(&skipped), atomic_load(&connections),
           (unsigned long long)atomic_load(&bytes_checked), atomic_load(&outcomes[O_WRONG]), atomic_load(&failures),
           (unsigned long long)atomic_load(&close_max_ms));
    for (int i = 0; i < O_COUNT; i++)
        printf(" %s=%d", oname[i], atomic_load(&outcomes[i]));
    printf("\n");
    printf("exiting (%d corrupted connections left open, %s)\n", atomic_load(&nleft) < NOPEN ? atomic_load(&nleft) : NOPEN,
           quick_exit ? "_exit" : "exit");
    fflush(stdout);
    int status = atomic_load(&failures) ? 1 : 0;
    close(scr_out);
    waitpid(pid, NULL, 0);
    if (quick_exit)
        _exit(status);
    exit(status);
}
