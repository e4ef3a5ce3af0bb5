/*
 * registry_fuzz.c: issue 16, suite (b), the registry's half.  A process
 * under shunt makes connections in a loop (client and server both in it,
 * each connection's bytes checksummed both ways); another process of the
 * same user (the scribbler, forked before any socket) overwrites one field
 * of the registry file at a time (the header with its lock word, the
 * listener entry of the victim's listener, the connection record the
 * victim's connections use, the first process entry) with boundary and
 * random values, and keeps writing it while the case's connections run;
 * after the case it puts the field's old bytes back.
 *
 * It runs in a network namespace of its own (unshare: root only, exit 77
 * otherwise), so that the registry it scribbles on is nobody else's.
 *
 * What must hold (a failure prints FAIL and exits 1; a hang is caught by the
 * watchdog, which prints HANG and exits 3; a crash is the exit status):
 *   - every byte of every connection is exact, accelerated or fallen back
 *     (the connection may not fail: the registry only decides whether a
 *     connection is accelerated);
 *   - every call returns (SO_RCVTIMEO/SO_SNDTIMEO, and the watchdog).
 *
 * usage: registry_fuzz SEED
 * stdout: one line of figures.  stderr: one line per field.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "registry/registry_file.h"

/* A field added to the file must be listed below (and fuzzed). */
_Static_assert(sizeof(struct reg_header) == 192, "struct reg_header changed: list its fields in registry_fuzz.c");
_Static_assert(sizeof(struct reg_listener) == 64, "struct reg_listener changed: list its fields");
_Static_assert(sizeof(struct reg_conn_ent) == 184, "struct reg_conn_ent changed: list its fields");
_Static_assert(sizeof(struct reg_proc) == 32, "struct reg_proc changed: list its fields");

#define CONNS_PER_CASE 2
#define BYTES (24u << 10)
#define TMO_MS 8000             /* a socket call that takes longer is a hang */
#define WATCHDOG_MS 12000

/* ---- the fields -------------------------------------------------------- */

enum table { T_HDR, T_LISTENER, T_CONN, T_PROC };

struct field {
    char name[48];
    enum table table;
    size_t off, len;   /* within the header or the entry */
};

static struct field fields[128];
static int nfields;

#define MSIZE(type, m) sizeof(((type *)0)->m)
#define ADD(tbl, type, m) add(#type "." #m, tbl, offsetof(struct type, m), MSIZE(struct type, m))

static void add(const char *name, enum table t, size_t off, size_t len)
{
    struct field *f = &fields[nfields++];
    snprintf(f->name, sizeof f->name, "%s", name);
    f->table = t;
    f->off = off;
    f->len = len;
}

static void list_fields(void)
{
    ADD(T_HDR, reg_header, magic);
    ADD(T_HDR, reg_header, version);
    ADD(T_HDR, reg_header, header_size);
    ADD(T_HDR, reg_header, listener_count);
    ADD(T_HDR, reg_header, listener_size);
    ADD(T_HDR, reg_header, conn_count);
    ADD(T_HDR, reg_header, conn_size);
    ADD(T_HDR, reg_header, proc_count);
    ADD(T_HDR, reg_header, proc_size);
    ADD(T_HDR, reg_header, total_size);
    ADD(T_HDR, reg_header, netns);
    ADD(T_HDR, reg_header, uid);
    ADD(T_HDR, reg_header, pad0);
#if REG_VERSION >= 5
    ADD(T_HDR, reg_header, lock.word);
    ADD(T_HDR, reg_header, lock.spare);
#else
    /* built against version 4, to show what the robust mutex did: its
     * words one by one (glibc's layout), the list pointers included */
    ADD(T_HDR, reg_header, lock.__data.__lock);
    ADD(T_HDR, reg_header, lock.__data.__owner);
    ADD(T_HDR, reg_header, lock.__data.__kind);
    ADD(T_HDR, reg_header, lock.__data.__list);
#endif
    ADD(T_HDR, reg_header, lock);
    ADD(T_HDR, reg_header, listener_hwm);
    ADD(T_HDR, reg_header, conn_hwm);
    ADD(T_HDR, reg_header, proc_hwm);
    ADD(T_HDR, reg_header, proc_sweep_next);
    ADD(T_HDR, reg_header, conn_seq);
    ADD(T_HDR, reg_header, recoveries);
    ADD(T_HDR, reg_header, reclaimed_listeners);
    ADD(T_HDR, reg_header, reclaimed_conns);
    ADD(T_HDR, reg_header, reclaimed_procs);
    ADD(T_HDR, reg_header, files_swept_at);
    ADD(T_HDR, reg_header, offers);
    ADD(T_HDR, reg_header, entries_swept_at);
    add("reg_header.*", T_HDR, 0, sizeof(struct reg_header));
    ADD(T_LISTENER, reg_listener, state);
    ADD(T_LISTENER, reg_listener, v6only);
    ADD(T_LISTENER, reg_listener, inode);
    ADD(T_LISTENER, reg_listener, pid);
    ADD(T_LISTENER, reg_listener, pad0);
    ADD(T_LISTENER, reg_listener, owner.start);
    ADD(T_LISTENER, reg_listener, owner.pidns);
    ADD(T_LISTENER, reg_listener, addr.addr);
    ADD(T_LISTENER, reg_listener, addr.port);
    ADD(T_LISTENER, reg_listener, pad1);
    add("reg_listener.*", T_LISTENER, 0, sizeof(struct reg_listener));
    ADD(T_CONN, reg_conn_ent, state);
    ADD(T_CONN, reg_conn_ent, pad0);
    ADD(T_CONN, reg_conn_ent, seq);
    ADD(T_CONN, reg_conn_ent, client_owner.start);
    ADD(T_CONN, reg_conn_ent, client_owner.pidns);
    ADD(T_CONN, reg_conn_ent, server_owner.start);
    ADD(T_CONN, reg_conn_ent, server_owner.pidns);
    ADD(T_CONN, reg_conn_ent, c.client_inode);
    ADD(T_CONN, reg_conn_ent, c.server_inode);
    ADD(T_CONN, reg_conn_ent, c.client);
    ADD(T_CONN, reg_conn_ent, c.server);
    ADD(T_CONN, reg_conn_ent, c.channel);
    ADD(T_CONN, reg_conn_ent, c.client_pid);
    ADD(T_CONN, reg_conn_ent, c.server_pid);
    ADD(T_CONN, reg_conn_ent, c.cookie);
    add("reg_conn_ent.*", T_CONN, 0, sizeof(struct reg_conn_ent));
    ADD(T_PROC, reg_proc, state);
    ADD(T_PROC, reg_proc, pid);
    ADD(T_PROC, reg_proc, owner.start);
    ADD(T_PROC, reg_proc, owner.pidns);
    ADD(T_PROC, reg_proc, table_tag);
    add("reg_proc.*", T_PROC, 0, sizeof(struct reg_proc));
}

/* ---- the values -------------------------------------------------------- */

enum vkind { V_ZERO, V_ONE, V_ONES, V_MAX_SIGNED, V_TABLE, V_PID_OTHER, V_PID_SELF, V_RANDOM, V_RANDOM2, V_TEXT,
             V_COUNT };
static const char *const vnames[V_COUNT] = { "0", "1", "~0", "INT_MAX", "table-size", "pid-other", "pid-self",
                                             "random", "random2", "text" };

static uint64_t rng;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Fills buf (len bytes) with value kind k. */
static void make_value(uint8_t *buf, size_t len, enum vkind k, pid_t victim, pid_t other)
{
    uint64_t v = 0;
    switch (k) {
    case V_ZERO: v = 0; break;
    case V_ONE: v = 1; break;
    case V_ONES: memset(buf, 0xff, len); return;
    case V_MAX_SIGNED: v = len >= 8 ? 0x7fffffffffffffffULL : 0x7fffffffULL; break;
    case V_TABLE: v = REG_CONNS + 1; break;
    case V_PID_OTHER: v = (uint32_t)other; break;
    case V_PID_SELF: v = (uint32_t)victim | 0x40000000u; break;
    case V_RANDOM:
    case V_RANDOM2:
        for (size_t i = 0; i < len; i++)
            buf[i] = (uint8_t)next_rand();
        return;
    case V_TEXT: {
        /* a name that leads elsewhere, unterminated */
        static const char t[] = "../../../../etc/shunt-passwd/////////////////////////////////////////";
        for (size_t i = 0; i < len; i++)
            buf[i] = (uint8_t)t[i % (sizeof t - 1)];
        return;
    }
    default: break;
    }
    memset(buf, 0, len);
    memcpy(buf, &v, len < 8 ? len : 8);
}

/* ---- the scribbler ----------------------------------------------------- */

struct order {
    int field;          /* -1: the end */
    int vkind;
    uint32_t entry[4];  /* the entry of each table */
};

static void *map_registry(void)
{
    char path[256];
    struct stat ns;
    if (stat("/proc/self/ns/net", &ns) < 0)
        return NULL;
    snprintf(path, sizeof path, "/dev/shm/shunt-%u-%llu-r%u.reg", (unsigned)geteuid(), (unsigned long long)ns.st_ino,
             REG_VERSION);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    void *p = mmap(NULL, REG_FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

/* The header or entry that holds the field, and its size. */
static uint8_t *entry_at(struct reg_file *f, const struct field *fd, const struct order *o, size_t *len)
{
    switch (fd->table) {
    case T_HDR: *len = sizeof f->hdr; return (uint8_t *)&f->hdr;
    case T_LISTENER: *len = sizeof f->listeners[0]; return (uint8_t *)&f->listeners[o->entry[T_LISTENER]];
    case T_CONN: *len = sizeof f->conns[0]; return (uint8_t *)&f->conns[o->entry[T_CONN]];
    default: *len = sizeof f->procs[0]; return (uint8_t *)&f->procs[o->entry[T_PROC]];
    }
}

/* Reads orders from in; for each: saves the entry (or header) that holds
 * the field, writes the value, says so on out, keeps writing it until the
 * next byte on in, then puts the entry's old bytes back (the victim is
 * between connections then: a listener it lost meanwhile is its own again)
 * and says so. */
static void scribbler(int in, int out, pid_t victim, pid_t other)
{
    struct reg_file *f = NULL;
    struct order o;
    while (read(in, &o, sizeof o) == (ssize_t)sizeof o && o.field >= 0) {
        if (!f)
            f = map_registry();
        if (!f)
            _exit(2);
        const struct field *fd = &fields[o.field];
        uint8_t saved[256], val[256];
        size_t elen;
        uint8_t *entry = entry_at(f, fd, &o, &elen);
        uint8_t *at = entry + fd->off;
        memcpy(saved, entry, elen);
        make_value(val, fd->len, (enum vkind)o.vkind, victim, other);
        memcpy(at, val, fd->len);
        char c = 1;
        if (write(out, &c, 1) != 1)
            _exit(2);
        /* again and again while the case runs: whatever the victim wrote
         * meanwhile is scribbled over at once */
        int fl = fcntl(in, F_GETFL);
        fcntl(in, F_SETFL, fl | O_NONBLOCK);
        for (unsigned n = 0; read(in, &c, 1) != 1; n++) {
            memcpy(at, val, fd->len);
            if (n % 64 == 63) {
                struct timespec ts = { 0, 100 * 1000 };
                nanosleep(&ts, NULL);
            } else {
                sched_yield();
            }
        }
        fcntl(in, F_SETFL, fl);
        memcpy(entry, saved, elen);
        if (write(out, &c, 1) != 1)
            _exit(2);
    }
    _exit(0);
}

/* ---- the victim -------------------------------------------------------- */

static int (*accelerated)(int);
static const char *(*fallback)(int);
static _Atomic uint64_t progress_ms;
static const char *_Atomic doing = "start";

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void *watchdog(void *arg)
{
    (void)arg;
    for (;;) {
        usleep(200 * 1000);
        if (now_ms() - atomic_load(&progress_ms) > WATCHDOG_MS) {
            printf("HANG: no progress for %d ms in %s\n", WATCHDOG_MS, atomic_load(&doing));
            fflush(stdout);
            _exit(3);
        }
    }
    return NULL;
}

static uint8_t pattern(uint64_t conn, size_t pos, int dir)
{
    uint64_t x = (conn * 0x9e3779b97f4a7c15ULL) ^ (pos * 0xbf58476d1ce4e5b9ULL) ^ (uint64_t)dir;
    x ^= x >> 29;
    return (uint8_t)x;
}

static void timeouts(int fd)
{
    struct timeval tv = { TMO_MS / 1000, (TMO_MS % 1000) * 1000 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static void fail(const char *what, uint64_t conn)
{
    printf("FAIL: %s (connection %llu, %s): %s\n", what, (unsigned long long)conn, atomic_load(&doing),
           strerror(errno));
    fflush(stdout);
    _exit(1);
}

struct server_arg {
    int lfd;
    uint64_t conn;
    uint64_t checked;
};

/* Accepts one connection: reads the client's pattern to its EOF, checking
 * it, then sends its own and closes. */
static void *server(void *arg)
{
    struct server_arg *a = arg;
    int s = accept(a->lfd, NULL, NULL);
    if (s < 0)
        fail("accept", a->conn);
    timeouts(s);
    static _Thread_local uint8_t buf[BYTES];
    /* the server speaks first: the client's offer is claimed before it
     * shuts down (an offer still open then is withdrawn) */
    for (size_t i = 0; i < BYTES; i++)
        buf[i] = pattern(a->conn, i, 1);
    for (size_t sent = 0; sent < BYTES;) {
        ssize_t w = send(s, buf + sent, BYTES - sent, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            fail("server send", a->conn);
        sent += (size_t)w;
    }
    size_t got = 0;
    for (;;) {
        ssize_t r = recv(s, buf, sizeof buf, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            fail("server recv", a->conn);
        if (r == 0)
            break;
        for (ssize_t i = 0; i < r; i++)
            if (buf[i] != pattern(a->conn, got + (size_t)i, 0))
                fail("WRONG byte at the server", a->conn);
        got += (size_t)r;
        atomic_store(&progress_ms, now_ms());
    }
    if (got != BYTES) {
        errno = 0;
        fail("short at the server", a->conn);
    }
    a->checked = got;
    close(s);
    return NULL;
}

struct figures {
    unsigned long long connections, accelerated, bytes;
};

static void one_connection(int lfd, const struct sockaddr_in *sa, uint64_t conn, struct figures *fig)
{
    struct server_arg a = { lfd, conn, 0 };
    pthread_t t;
    if (pthread_create(&t, NULL, server, &a) != 0)
        fail("pthread_create", conn);
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0)
        fail("socket", conn);
    timeouts(c);
    if (connect(c, (const struct sockaddr *)sa, sizeof *sa) < 0)
        fail("connect", conn);
    static uint8_t buf[BYTES];
    size_t got = 0;
    while (got < BYTES) {
        ssize_t r = recv(c, buf, BYTES - got, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            fail("client recv", conn);
        if (r == 0) {
            errno = 0;
            fail("short at the client", conn);
        }
        for (ssize_t i = 0; i < r; i++)
            if (buf[i] != pattern(conn, got + (size_t)i, 1))
                fail("WRONG byte at the client", conn);
        got += (size_t)r;
        atomic_store(&progress_ms, now_ms());
    }
    for (size_t i = 0; i < BYTES; i++)
        buf[i] = pattern(conn, i, 0);
    for (size_t sent = 0; sent < BYTES;) {
        ssize_t w = send(c, buf + sent, BYTES - sent, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            fail("client send", conn);
        sent += (size_t)w;
    }
    /* what decided it, before the shutdown ends the offer's life */
    bool acc = accelerated && accelerated(c) > 0;
    if (shutdown(c, SHUT_WR) < 0)
        fail("shutdown", conn);
    for (;;) {
        ssize_t r = recv(c, buf, 1, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            fail("client recv at the end", conn);
        if (r == 0)
            break;
        errno = 0;
        fail("WRONG: bytes after the server's last", conn);
    }
    if (acc)
        fig->accelerated++;
    else if (getenv("REGFUZZ_DEBUG") && fallback)
        fprintf(stderr, "connection %llu: %s\n", (unsigned long long)conn, fallback(c));
    pthread_join(t, NULL);
    close(c);
    fig->connections++;
    fig->bytes += got + a.checked;
    atomic_store(&progress_ms, now_ms());
}

/* Loopback up in the new namespace. */
static int lo_up(void)
{
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    if (s < 0)
        return -1;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    int r = ioctl(s, SIOCGIFFLAGS, &ifr);
    if (r == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        r = ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    close(s);
    return r;
}

/* The entry of each table the victim uses: its listener's, the first
 * connection record (the one its connections take: nobody else is in this
 * namespace), the first process entry. */
static void pick_entries(struct order *o, pid_t self)
{
    struct reg_file *f = map_registry();
    o->entry[T_HDR] = 0;
    o->entry[T_LISTENER] = 0;
    o->entry[T_CONN] = 0;
    o->entry[T_PROC] = 0;
    if (!f)
        return;
    for (uint32_t i = 0; i < REG_LISTENERS; i++)
        if (atomic_load(&f->listeners[i].state) == REG_USED && f->listeners[i].pid == self) {
            o->entry[T_LISTENER] = i;
            break;
        }
    for (uint32_t i = 0; i < REG_PROCS; i++)
        if (atomic_load(&f->procs[i].state) == REG_USED && f->procs[i].pid == self) {
            o->entry[T_PROC] = i;
            break;
        }
    munmap(f, REG_FILE_SIZE);
}

int main(int argc, char **argv)
{
    uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 16;
    rng = seed * 2654435761u + 1;
    list_fields();
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (unshare(CLONE_NEWNET) < 0 || lo_up() < 0) {
        printf("SKIP: no network namespace of our own (%s)\n", strerror(errno));
        return 77;
    }
    pid_t self = getpid(), other = getppid();
    int to_s[2], from_s[2];
    if (pipe(to_s) < 0 || pipe(from_s) < 0)
        return 2;
    pid_t scr = fork();
    if (scr == 0) {
        close(to_s[1]);
        close(from_s[0]);
        scribbler(to_s[0], from_s[1], self, other);
    }
    close(to_s[0]);
    close(from_s[1]);
    signal(SIGPIPE, SIG_IGN);
    accelerated = (int (*)(int))dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
    fallback = (const char *(*)(int))dlsym(RTLD_DEFAULT, "shunt_fd_fallback");

    atomic_store(&progress_ms, now_ms());
    pthread_t wd;
    pthread_create(&wd, NULL, watchdog, NULL);

    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t sl = sizeof sa;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 64) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0)
        fail("listen", 0);
    struct figures fig = { 0, 0, 0 }, before;
    uint64_t conn = 0;
    /* warm up: the registry exists, the listener is in it */
    one_connection(lfd, &sa, conn++, &fig);
    unsigned long long warm_accel = fig.accelerated;
    struct order o;
    pick_entries(&o, self);
    unsigned cases = 0;
    char what[160];
    for (int fi = 0; fi < nfields; fi++) {
        before = fig;
        for (int v = 0; v < V_COUNT; v++) {
            o.field = fi;
            o.vkind = v;
            snprintf(what, sizeof what, "%.47s = %.15s", fields[fi].name, vnames[v]);
            atomic_store(&doing, what);
            char c;
            if (write(to_s[1], &o, sizeof o) != (ssize_t)sizeof o || read(from_s[0], &c, 1) != 1)
                fail("the scribbler is gone", conn);
            for (int k = 0; k < CONNS_PER_CASE; k++)
                one_connection(lfd, &sa, conn++, &fig);
            if (write(to_s[1], &c, 1) != 1 || read(from_s[0], &c, 1) != 1)
                fail("the scribbler is gone", conn);
            cases++;
        }
        fprintf(stderr, "%-34s %llu connections, %llu accelerated\n", fields[fi].name,
                fig.connections - before.connections, fig.accelerated - before.accelerated);
    }
    atomic_store(&doing, "after the fuzz");
    /* the registry, its old bytes back, accelerates again */
    struct figures last = fig;
    one_connection(lfd, &sa, conn++, &fig);
    o.field = -1;
    if (write(to_s[1], &o, sizeof o) != (ssize_t)sizeof o)
        fail("the scribbler is gone", conn);
    int st;
    waitpid(scr, &st, 0);
    printf("fields %d values %d cases %u connections %llu accelerated %llu bytes_checked %llu crashes 0 hangs 0 "
           "warm_accelerated=%llu after_accelerated=%llu\n",
           nfields, (int)V_COUNT, cases, fig.connections, fig.accelerated, fig.bytes, warm_accel,
           fig.accelerated - last.accelerated);
    close(lfd);
    return 0;
}
