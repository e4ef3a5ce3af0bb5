/*
 * test_procstat.c: the per-process fd tables `shunt stat` reads
 * (src/registry/procstat.c, processes.c).
 *
 * Runs on a private registry in /dev/shm/shunt-<uid>-pst-<pid>/.  Covers:
 * records written, grown past a page, cleared, read back by the reader; a
 * writer thread hammering one entry while the reader copies the table (no
 * torn record may come out); scribbled entries refused or sanitised; a
 * forked child's own table with the parent's records of the fds it holds;
 * the table of a process that died without a word swept with its registry
 * entry; a normal exit removing both.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "registry/procstat.h"
#include "registry/registry_file.h"
#include "registry/registry_impl.h"

static char dir[128];

static void rm_dir(const char *d)
{
    DIR *dp = opendir(d);
    if (!dp)
        return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(dp)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "%s/%s", d, de->d_name);
        unlink(p);
    }
    closedir(dp);
    rmdir(d);
}

struct tag_of {
    int32_t pid;
    uint64_t tag;
    bool found;
};

static void find_tag(int32_t pid, const struct reg_owner *o, uint64_t tag, void *ctx)
{
    (void)o;
    struct tag_of *t = ctx;
    if (pid == t->pid) {
        t->tag = tag;
        t->found = true;
    }
}

/* The random part of pid's table's name, from the registry (0 if pid has
 * no entry yet). */
static uint64_t tag_of(pid_t pid)
{
    struct tag_of t = { (int32_t)pid, 0, false };
    reg_proc_each(find_tag, &t);
    return t.tag;
}

/* The path of pid's table ("" while it has none); the name has a random
 * part only the registry knows. */
static void table_path(pid_t pid, char *out, size_t len)
{
    struct tag_of t = { (int32_t)pid, 0, false };
    reg_proc_each(find_tag, &t);
    if (t.found)
        reg_table_path(out, len, reg_mapped(), (int32_t)pid, t.tag);
    else
        snprintf(out, len, "%s", "");
}

static struct pst_rec rec(int fd, uint64_t sock)
{
    struct pst_rec r;
    memset(&r, 0, sizeof r);
    r.kind = PST_KIND_CONN;
    r.path = PST_PATH_TCP;
    r.role = PST_ROLE_CLIENT;
    r.fd = fd;
    r.sock = sock;
    r.local.port = (uint16_t)sock;
    r.peer.port = (uint16_t)(sock >> 16);
    snprintf(r.reason, sizeof r.reason, "no_listener");
    return r;
}

static size_t read_own(struct pst_rec **out)
{
    size_t n = 0;
    CHECK(pst_read(getpid(), NULL, tag_of(getpid()), out, &n), ==, 0);
    return n;
}

static const struct pst_rec *find(const struct pst_rec *v, size_t n, int fd)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].fd == fd)
            return &v[i];
    return NULL;
}

static void test_put_read_clear(void)
{
    struct pst_rec a = rec(3, 1001), b = rec(100, 1002), c = rec(5000, 1003);
    CHECK(pst_put(&a), ==, 0);
    CHECK(pst_put(&b), ==, 0);
    CHECK(pst_put(&c), ==, 0);   /* grows the file past many pages */
    struct pst_rec big = rec((int)PST_MAX_FDS, 1);
    CHECK(pst_put(&big), ==, -EMFILE);
    struct pst_rec *v;
    size_t n = read_own(&v);
    CHECK(n, ==, 3);
    const struct pst_rec *r = find(v, n, 100);
    CHECK(r != NULL, ==, 1);
    CHECK(r->sock, ==, 1002);
    CHECK(strcmp(r->reason, "no_listener"), ==, 0);
    CHECK(r->changed_ns > 0, ==, 1);
    free(v);
    pst_clear(100);
    pst_clear(4999);   /* never recorded */
    n = read_own(&v);
    CHECK(n, ==, 2);
    CHECK(find(v, n, 100) == NULL, ==, 1);
    free(v);
    /* every fd recorded with the same socket (dup'd copies) at once */
    struct pst_rec d = rec(3, 1001);
    d.path = PST_PATH_SHM;
    d.reason[0] = 0;
    pst_put_all(&d);
    n = read_own(&v);
    CHECK(find(v, n, 3)->path, ==, PST_PATH_SHM);
    CHECK(find(v, n, 5000)->path, ==, PST_PATH_TCP);
    free(v);
    struct pst_rec got;
    CHECK(pst_get(3, &got), ==, 0);
    CHECK(got.sock, ==, 1001);
    CHECK(pst_get(100, &got), ==, -ENOENT);
    pst_clear_range(0, ~0u);
    n = read_own(&v);
    CHECK(n, ==, 0);
    free(v);
}

static volatile int stop_writer;

static void *writer(void *arg)
{
    (void)arg;
    for (uint64_t i = 1; !stop_writer; i++) {
        struct pst_rec r = rec(7, i);
        r.local.port = r.peer.port = (uint16_t)i;   /* every field says i */
        memset(r.reason, 'a' + (int)(i % 26), sizeof r.reason - 1);
        pst_put(&r);
        if (i % 256 == 0)
            sched_yield();   /* on 2 busy CPUs the reader must get whole records now and then */
    }
    return NULL;
}

/* The reader must never return a record half of one write and half of another. */
static void test_no_torn_records(void)
{
    pthread_t th;
    stop_writer = 0;
    CHECK(pthread_create(&th, NULL, writer, NULL), ==, 0);
    unsigned seen = 0;
    /* 20000 looks, and more (up to 10 s) until one found the record whole:
     * a reader that only ever met the writer mid-record checked nothing */
    time_t give_up = time(NULL) + 10;
    for (int round = 0; round < 20000 || (seen == 0 && time(NULL) < give_up); round++) {
        struct pst_rec *v;
        size_t n = read_own(&v);
        const struct pst_rec *r = find(v, n, 7);
        if (r) {
            CHECK(r->local.port, ==, r->peer.port);
            CHECK((uint16_t)r->sock, ==, r->local.port);
            CHECK(r->reason[0], ==, 'a' + (int)(r->sock % 26));
            CHECK(r->reason[PST_REASON_MAX - 2], ==, r->reason[0]);
            seen++;
        }
        free(v);
    }
    stop_writer = 1;
    pthread_join(th, NULL);
    CHECK(seen > 0, ==, 1);
    pst_clear(7);
}

/* Scribbled entries: out-of-range fields are refused, a strange reason is
 * made harmless. */
static void test_scribbled(void)
{
    struct pst_rec a = rec(10, 77), b = rec(11, 78);
    CHECK(pst_put(&a), ==, 0);
    CHECK(pst_put(&b), ==, 0);
    char path[256];
    table_path(getpid(), path, sizeof path);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0, ==, 1);
    struct pst_entry e;
    CHECK(pread(fd, &e, sizeof e, (off_t)PST_OFFSET(10)), ==, (ssize_t)sizeof e);
    e.r.kind = 9;
    CHECK(pwrite(fd, &e, sizeof e, (off_t)PST_OFFSET(10)), ==, (ssize_t)sizeof e);
    CHECK(pread(fd, &e, sizeof e, (off_t)PST_OFFSET(11)), ==, (ssize_t)sizeof e);
    memset(e.r.reason, '"', sizeof e.r.reason);   /* no terminator, and a character JSON would need escaped */
    CHECK(pwrite(fd, &e, sizeof e, (off_t)PST_OFFSET(11)), ==, (ssize_t)sizeof e);
    e.r.fd = 99;   /* a record that names another slot's fd */
    CHECK(pwrite(fd, &e, sizeof e, (off_t)PST_OFFSET(12)), ==, (ssize_t)sizeof e);
    close(fd);
    struct pst_rec *v;
    size_t n = read_own(&v);
    CHECK(n, ==, 1);
    CHECK(v[0].fd, ==, 11);
    CHECK(strlen(v[0].reason), ==, PST_REASON_MAX - 1);
    CHECK(strspn(v[0].reason, "?"), ==, PST_REASON_MAX - 1);
    free(v);
    pst_clear_range(0, 100);
}

static uint64_t inode_of(int fd)
{
    struct stat st;
    CHECK(fstat(fd, &st), ==, 0);
    return (uint64_t)st.st_ino;
}

/* fork: the child's table holds the parent's records of the fds it really
 * holds; when it dies without a word, the sweep removes its table. */
static void test_fork_and_sweep(void)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), ==, 0);
    struct pst_rec real = rec(sv[0], inode_of(sv[0]));
    struct pst_rec fake = rec(sv[1], 12345);   /* not what the kernel says sv[1] is */
    CHECK(pst_put(&real), ==, 0);
    CHECK(pst_put(&fake), ==, 0);
    int go[2];
    CHECK(pipe(go), ==, 0);
    pid_t child = fork();
    if (child == 0) {
        pst_after_fork_child();
        char c;
        if (read(go[0], &c, 1) != 1)
            _exit(1);
        _exit(0);   /* no pst_exit: as if killed */
    }
    CHECK(child > 0, ==, 1);
    char path[256] = "";
    for (int i = 0; i < 5000 && (!path[0] || access(path, F_OK) < 0); i++) {
        table_path(child, path, sizeof path);
        if (!path[0] || access(path, F_OK) < 0)
            usleep(1000);
    }
    struct pst_rec *v = NULL;
    size_t n = 0;
    for (int i = 0; i < 5000; i++) {   /* the child copies after it made the file */
        free(v);
        if (pst_read(child, NULL, tag_of(child), &v, &n) == 0 && n == 1)
            break;
        usleep(1000);
    }
    CHECK(n, ==, 1);
    CHECK(v[0].fd, ==, sv[0]);
    CHECK(v[0].sock, ==, real.sock);
    free(v);
    CHECK(write(go[1], "x", 1), ==, 1);
    int status;
    CHECK(waitpid(child, &status, 0), ==, child);
    CHECK(access(path, F_OK), ==, 0);   /* left behind */
    reg_close_for_test();
    CHECK(reg_open_at(dir), ==, 0);     /* the first open sweeps */
    CHECK(access(path, F_OK), ==, -1);
    close(go[0]);
    close(go[1]);
    close(sv[0]);
    close(sv[1]);
    pst_clear_range(0, 100);
}

static void count_self(int32_t pid, const struct reg_owner *o, uint64_t tag, void *ctx)
{
    (void)o;
    (void)tag;
    if (pid == getpid())
        (*(int *)ctx)++;
}

static void test_exit_removes(void)
{
    int n = 0;
    reg_proc_each(count_self, &n);
    CHECK(n, ==, 1);
    char path[256];
    table_path(getpid(), path, sizeof path);
    CHECK(access(path, F_OK), ==, 0);
    pst_exit();
    CHECK(access(path, F_OK), ==, -1);
    n = 0;
    reg_proc_each(count_self, &n);
    CHECK(n, ==, 0);
}

int main(void)
{
    snprintf(dir, sizeof dir, "/dev/shm/shunt-%u-pst-%d", (unsigned)geteuid(), (int)getpid());
    rm_dir(dir);
    CHECK(mkdir(dir, 0700), ==, 0);
    CHECK(reg_open_at(dir), ==, 0);
    test_put_read_clear();
    printf("ok: records written, grown, cleared, read back\n");
    test_no_torn_records();
    printf("ok: no torn record while a writer hammers one entry\n");
    test_scribbled();
    printf("ok: scribbled entries refused or made harmless\n");
    test_fork_and_sweep();
    printf("ok: a forked child's own table; swept when it died\n");
    test_exit_removes();
    printf("ok: exit removes the table and its registry entry\n");
    reg_close_for_test();
    rm_dir(dir);
    return 0;
}
