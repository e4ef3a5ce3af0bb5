/*
 * test_shm_files.c: the files shunt makes in /dev/shm, against another
 * user who got there first (issue 16, finding 3).
 *
 * Each case runs in a child of its own, in private mount and network
 * namespaces with a tmpfs of its own on /dev/shm (mode 1777, as the real
 * one), so it can squat the names shunt uses without disturbing anybody
 * else's shunt on this machine.  The attacker is user nobody (65534),
 * a forked child that drops to it.  Root only: as another user it skips.
 *
 * Covers: a process's fd table whose name another user made first (mode
 * 0666), then truncated (the SIGBUS); the registry's name as
 * another user's file, a symlink to a file of ours and a FIFO (refused,
 * nothing written, the owner named in the log); the shm budget's the
 * same (refused as "not ours", not as "limit reached"); the wake FIFOs'
 * names, which another user must not be able to make from the segment's
 * visible name; a registry removed between a process's map and its lock
 * (the process opens the new one).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "check.h"
#include "registry/bell_name.h"
#include "registry/procstat.h"
#include "registry/registry_file.h"
#include "registry/registry_impl.h"
#include "transport/channel.h"
#include "transport/shm_budget.h"

#define NOBODY 65534
#define SHM "/dev/shm"

/* ---- isolation and the attacker ------------------------------------------ */

/* This process gets mount and network namespaces of its own and a fresh
 * tmpfs on /dev/shm: whatever it squats or sweeps is its own. */
static bool isolate(void)
{
    if (unshare(CLONE_NEWNS | CLONE_NEWNET) < 0)
        return false;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return false;
    return mount("shunt-test", SHM, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m") == 0;
}

static void wait_clean(pid_t pid, const char *what)
{
    int st = 0;
    CHECK(waitpid(pid, &st, 0), ==, pid);
    if (WIFSIGNALED(st))
        FAIL("%s: killed by signal %d (%s)\n", what, WTERMSIG(st), strsignal(WTERMSIG(st)));
    if (WEXITSTATUS(st) != 0)
        FAIL("%s: exit status %d\n", what, WEXITSTATUS(st));
}

static const char *only;   /* argv[1]: run the cases whose description has it */

static void in_private_shm(const char *what, void (*fn)(void))
{
    if (only && !strstr(what, only))
        return;
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid, >=, 0);
    if (pid == 0) {
        if (!isolate()) {
            printf("skip: %s: no private namespaces here (%s)\n", what, strerror(errno));
            _exit(0);
        }
        fn();
        fflush(NULL);
        _exit(0);
    }
    wait_clean(pid, what);
    printf("ok: %s\n", what);
}

/* Runs fn(arg) in a child that is user and group nobody, umask 0 (so the
 * files it makes have exactly the modes it asks for). */
static void as_nobody(void (*fn)(const char *), const char *arg)
{
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid, >=, 0);
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 || setresuid(NOBODY, NOBODY, NOBODY) < 0)
            _exit(3);
        umask(0);
        fn(arg);
        _exit(0);
    }
    wait_clean(pid, "the attacker");
}

static void make_file_0666(const char *path)
{
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0666);
    CHECK(fd, >=, 0);
    CHECK(write(fd, "junk", 4), ==, 4);
    close(fd);
}

static void make_empty_0666(const char *path)
{
    int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0666);
    CHECK(fd, >=, 0);
    close(fd);
}

static void make_fifo_0666(const char *path)
{
    CHECK(mkfifo(path, 0666), ==, 0);
}

static char link_target[128];

static void make_symlink(const char *path)
{
    CHECK(symlink(link_target, path), ==, 0);
}

static void truncate_to_zero(const char *path)
{
    CHECK(truncate(path, 0), ==, 0);
}

/* A file of ours (root's, 0600) that a symlink of the attacker points at. */
static void make_target(void)
{
    snprintf(link_target, sizeof link_target, SHM "/roots-own-file");
    int fd = open(link_target, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    CHECK(fd, >=, 0);
    CHECK(write(fd, "secret", 6), ==, 6);
    close(fd);
}

static void target_unchanged(void)
{
    char buf[64];
    int fd = open(link_target, O_RDONLY);
    CHECK(fd, >=, 0);
    CHECK(read(fd, buf, sizeof buf), ==, 6);
    close(fd);
    CHECK(memcmp(buf, "secret", 6), ==, 0);
}

/* What the attacker left at path is as it left it: its kind, its owner,
 * its size (nothing of ours was written into it). */
static void attacker_file_unchanged(const char *path, mode_t kind, off_t size)
{
    struct stat st;
    CHECK(lstat(path, &st), ==, 0);
    CHECK(st.st_mode & S_IFMT, ==, kind);
    CHECK(st.st_uid, ==, NOBODY);
    if (kind == S_IFREG)
        CHECK(st.st_size, ==, size);
}

/* ---- the log, captured ---------------------------------------------------- */

static int saved_stderr = -1;

static void log_capture_begin(void)
{
    fflush(stderr);
    int fd = open(SHM "/captured.log", O_CREAT | O_TRUNC | O_RDWR, 0600);
    CHECK(fd, >=, 0);
    saved_stderr = dup(2);
    CHECK(dup2(fd, 2), ==, 2);
    close(fd);
    shunt_log_level = LOG_DEBUG;
}

/* The log since log_capture_begin must name path and its owner. */
static void log_capture_end(const char *path)
{
    shunt_log_level = LOG_OFF;
    fflush(stderr);
    CHECK(dup2(saved_stderr, 2), ==, 2);
    close(saved_stderr);
    static char buf[16384];
    int fd = open(SHM "/captured.log", O_RDONLY);
    CHECK(fd, >=, 0);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    unlink(SHM "/captured.log");
    CHECK(n, >=, 0);
    buf[n] = 0;
    if (!strstr(buf, path) || !strstr(buf, "uid 65534"))
        FAIL("the log does not name %s and its owner (uid 65534):\n%s\n", path, buf);
}

/* ---- a process's fd table ------------------------------------------------- */

static struct pst_rec rec(int fd, uint64_t sock)
{
    struct pst_rec r;
    memset(&r, 0, sizeof r);
    r.kind = PST_KIND_CONN;
    r.path = PST_PATH_TCP;
    r.role = PST_ROLE_CLIENT;
    r.fd = fd;
    r.sock = sock;
    snprintf(r.reason, sizeof r.reason, "no_listener");
    return r;
}

static void find_tag(int32_t pid, const struct reg_owner *o, uint64_t tag, void *ctx)
{
    (void)o;
    uint64_t *t = ctx;
    if (pid == (int32_t)t[0])
        t[1] = tag;
}

/* The random part of pid's table's name, which only the registry knows. */
static uint64_t tag_of(pid_t pid)
{
    uint64_t t[2] = { (uint64_t)pid, 0 };
    reg_proc_each(find_tag, t);
    return t[1];
}

static void say(int fd, char c)
{
    CHECK(write(fd, &c, 1), ==, 1);
}

static char hear(int fd)
{
    char c = 0;
    CHECK(read(fd, &c, 1), ==, 1);
    return c;
}

/* The finding 3: nobody makes the file a process's table used to
 * be named (shunt-<uid>-<netns>-<pid>.fds, from its pid) before the
 * process starts, mode 0666; the process must not map or write it, and
 * nobody truncating it must not kill the process (SIGBUS). */
static void case_table_squat(void)
{
    int go[2], back[2];
    CHECK(pipe(go), ==, 0);
    CHECK(pipe(back), ==, 0);
    fflush(NULL);
    pid_t v = fork();
    CHECK(v, >=, 0);
    if (v == 0) {
        close(go[1]);
        close(back[0]);
        hear(go[0]);
        struct pst_rec r = rec(3, 1111);
        CHECK(pst_put(&r), ==, 0);
        say(back[1], 'a');
        hear(go[0]);   /* the attacker truncated its file meanwhile */
        r.sock = 2222;
        CHECK(pst_put(&r), ==, 0);
        struct pst_rec far = rec(700, 3333);
        CHECK(pst_put(&far), ==, 0);
        say(back[1], 'b');
        hear(go[0]);
        _exit(0);
    }
    close(go[0]);
    close(back[1]);   /* a victim that dies ends the parent's read */
    char squat[256];
    snprintf(squat, sizeof squat, SHM "/shunt-%u-%llu-%d.fds", (unsigned)geteuid(), (unsigned long long)reg_netns(),
             (int)v);
    as_nobody(make_empty_0666, squat);
    say(go[1], 'x');
    CHECK(hear(back[0]), ==, 'a');
    as_nobody(truncate_to_zero, squat);
    say(go[1], 'x');
    char c = 0;
    if (read(back[0], &c, 1) != 1) {
        wait_clean(v, "the process whose table name was squatted");
        FAIL("the process ended early\n");
    }
    /* its records are there to read, in a table of its own */
    struct pst_rec *recs = NULL;
    size_t n = 0;
    CHECK(pst_read(v, NULL, tag_of(v), &recs, &n), ==, 0);
    CHECK(n, ==, 2);
    free(recs);
    attacker_file_unchanged(squat, S_IFREG, 0);
    say(go[1], 'x');
    wait_clean(v, "the process whose table name was squatted");
}

/* ---- the registry --------------------------------------------------------- */

static void registry_path(char *out, size_t len)
{
    snprintf(out, len, SHM "/shunt-%u-%llu-r%u.reg", (unsigned)geteuid(), (unsigned long long)reg_netns(), REG_VERSION);
}

/* The registry's name, made first by nobody as squat() makes it: refused
 * (the connection would fall back), nothing of ours written into it or
 * through it, and the log names the file and its owner. */
static void registry_squatted(void (*squat)(const char *), mode_t kind, off_t size)
{
    char path[256];
    registry_path(path, sizeof path);
    make_target();
    as_nobody(squat, path);
    log_capture_begin();
    CHECK(reg_open(), ==, -EPERM);
    CHECK(reg_mapped() == NULL, ==, 1);
    log_capture_end(path);
    attacker_file_unchanged(path, kind, size);
    target_unchanged();
}

static void case_registry_file(void) { registry_squatted(make_file_0666, S_IFREG, 4); }
static void case_registry_symlink(void) { registry_squatted(make_symlink, S_IFLNK, 0); }
static void case_registry_fifo(void) { registry_squatted(make_fifo_0666, S_IFIFO, 0); }

/* A registry removed (a sweep) between a process's map and its lock: the
 * process must end up with the file that has the name, not the one that
 * lost it, or it would meet nobody there. */
static void case_registry_replaced(void)
{
    char path[256];
    registry_path(path, sizeof path);
    int locked[2], opened[2];
    CHECK(pipe(locked), ==, 0);
    CHECK(pipe(opened), ==, 0);
    fflush(NULL);
    pid_t holder = fork();
    CHECK(holder, >=, 0);
    if (holder == 0) {
        struct reg_file *f;
        sigset_t old;
        CHECK(reg_enter(&f, &old), ==, 0);
        say(locked[1], 'l');
        pid_t opener = 0;
        CHECK(read(opened[0], &opener, sizeof opener), ==, (long long)sizeof opener);
        /* until the opener has mapped it (it then waits for the lock) */
        char maps[64], line[512];
        snprintf(maps, sizeof maps, "/proc/%d/maps", (int)opener);
        bool mapped = false;
        for (int i = 0; i < 2000 && !mapped; i++) {
            FILE *m = fopen(maps, "r");
            while (m && fgets(line, sizeof line, m))
                mapped |= strstr(line, path) != NULL;
            if (m)
                fclose(m);
            if (!mapped)
                usleep(1000);
        }
        CHECK(mapped, ==, 1);
        usleep(20000);
        CHECK(unlink(path), ==, 0);
        reg_unlock(f, &old);
        _exit(0);
    }
    hear(locked[0]);
    fflush(NULL);
    pid_t opener = fork();
    CHECK(opener, >=, 0);
    if (opener == 0) {
        CHECK(reg_open(), ==, 0);
        /* the mapping is the file at the name now */
        struct reg_file *f = reg_mapped();
        f->hdr.pad0 = 0x5eed;
        uint32_t seen = 0;
        int fd = open(path, O_RDONLY);
        CHECK(fd, >=, 0);
        CHECK(pread(fd, &seen, sizeof seen, offsetof(struct reg_header, pad0)), ==, (long long)sizeof seen);
        close(fd);
        CHECK(seen, ==, 0x5eed);
        _exit(0);
    }
    CHECK(write(opened[1], &opener, sizeof opener), ==, (long long)sizeof opener);
    wait_clean(holder, "the lock holder");
    wait_clean(opener, "the process that opened");
}

/* ---- the shm budget ------------------------------------------------------- */

static void budget_squatted(void (*squat)(const char *), mode_t kind, off_t size)
{
    char path[128];
    snprintf(path, sizeof path, SHM "/shunt-%u.budget", (unsigned)geteuid());
    make_target();
    as_nobody(squat, path);
    log_capture_begin();
    /* refused as another user's file, which is not the limit being reached */
    CHECK(shm_budget_take(4096, 1u << 30), ==, -EPERM);
    struct channel ch;
    CHECK(channel_create(&ch, 1u << 16, 1u << 14, 1u << 30), ==, -EPERM);
    log_capture_end(path);
    attacker_file_unchanged(path, kind, size);
    target_unchanged();
}

static void case_budget_file(void) { budget_squatted(make_file_0666, S_IFREG, 4); }
static void case_budget_symlink(void) { budget_squatted(make_symlink, S_IFLNK, 0); }
static void case_budget_fifo(void) { budget_squatted(make_fifo_0666, S_IFIFO, 0); }

/* ---- the files beside a segment ------------------------------------------- */

/* Anybody can list /dev/shm and see a segment's name the moment it is
 * made: the names of its wake FIFOs must not follow from it, or another
 * user makes them first (the holders of an end then cannot wake one
 * another). */
static void case_wake_names(void)
{
    struct channel ch;
    CHECK(channel_create(&ch, 1u << 16, 1u << 14, 0), ==, 0);
    char p[256];
    /* every name another user could make from what it sees */
    const char *suffixes[] = { "-w0", "-w1", "-back", "-b", "-w0-0", "-w1-0" };
    for (unsigned i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        snprintf(p, sizeof p, SHM "/%s%s", ch.name, suffixes[i]);
        as_nobody(i % 2 ? make_file_0666 : make_fifo_0666, p);
    }
    for (int side = 0; side < 2; side++) {
        channel_wake_path(&ch, side, p, sizeof p);
        struct stat st;
        if (lstat(p, &st) == 0 && st.st_uid != geteuid())
            FAIL("the wake FIFO of side %d, %s, is another user's\n", side, p);
    }
    channel_unlink(ch.name);
    channel_detach(&ch);
}

/* ---- the sweep of what nobody can use any more (finding 6) -------------- */

/* What a process made in its namespace: the registry, a segment with its
 * offer posted, a wake FIFO beside it, a segment never posted (killed in
 * between), its fd table. */
struct made {
    char registry[160];
    char posted[160];
    char beside[160];
    char unposted[160];
    char table[200];
};

static void make_all(struct made *m)
{
    memset(m, 0, sizeof *m);
    CHECK(reg_open(), ==, 0);
    reg_name_of(m->registry, sizeof m->registry, SHM, geteuid(), reg_netns());
    struct channel a, b;
    CHECK(channel_create(&a, 1u << 16, 1u << 14, 0), ==, 0);
    struct reg_conn c;
    memset(&c, 0, sizeof c);
    c.client_inode = 1000 + (uint64_t)getpid();
    c.client.port = 1;
    c.server.port = 2;
    c.client_pid = (int32_t)getpid();
    snprintf(c.channel, sizeof c.channel, "%s", a.name);
    CHECK(reg_conn_post(&c), ==, 0);
    snprintf(m->posted, sizeof m->posted, SHM "/%s", a.name);
    channel_wake_path(&a, 0, m->beside, sizeof m->beside);
    CHECK(mkfifo(m->beside, 0600), ==, 0);
    CHECK(channel_create(&b, 1u << 16, 1u << 14, 0), ==, 0);
    snprintf(m->unposted, sizeof m->unposted, SHM "/%s", b.name);
    struct pst_rec r = rec(3, 77);
    CHECK(pst_put(&r), ==, 0);
    reg_table_path(m->table, sizeof m->table, reg_mapped(), (int32_t)getpid(), tag_of(getpid()));
    CHECK(access(m->table, F_OK), ==, 0);
}

/* A child in a network namespace of its own makes everything and reports
 * it; it then exits without a word (killed, as far as shunt knows), or,
 * with stay, waits for a byte on stay_fd first. */
static pid_t make_in_new_netns(struct made *m, const int *stay)
{
    int p[2];
    CHECK(pipe(p), ==, 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid, >=, 0);
    if (pid == 0) {
        close(p[0]);
        if (stay)
            close(stay[1]);   /* the parent's end: its exit ends our wait */
        CHECK(unshare(CLONE_NEWNET), ==, 0);
        /* what a process does at fork, and at its first open in a namespace */
        reg_close_for_test();
        pst_after_fork_child();
        struct made mine;
        make_all(&mine);
        CHECK(write(p[1], &mine, sizeof mine), ==, (long long)sizeof mine);
        if (stay) {
            char c;
            if (read(stay[0], &c, 1) < 0)
                _exit(1);
        }
        _exit(0);
    }
    close(p[1]);
    CHECK(read(p[0], m, sizeof *m), ==, (long long)sizeof *m);
    close(p[0]);
    return pid;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Every file of /dev/shm an hour old, as a sweep's grace needs them. */
static void age_everything(void)
{
    DIR *d = opendir(SHM);
    CHECK(d != NULL, ==, 1);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= 3600;
    t[1] = t[0];
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            CHECK(utimensat(dirfd(d), e->d_name, t, AT_SYMLINK_NOFOLLOW), ==, 0);
    closedir(d);
}

static char squat_path[160];

static void make_aged_0666(const char *path)
{
    make_file_0666(path);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= 3600;
    t[1] = t[0];
    CHECK(utimensat(AT_FDCWD, path, t, 0), ==, 0);
}

/* A fabric doorbell's socket file (registry/bell_name.h) bound at its
 * name by a process of pid, which then exits if dies. */
static void make_bell(char *path, size_t len, uint32_t pid, uint64_t id)
{
    bell_path(path, len, "", (uint32_t)geteuid(), pid, id);   /* SHM is /dev/shm, a tmpfs of this test's */
    int s = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    CHECK(bind(s, (struct sockaddr *)&a, sizeof a), ==, 0);
    close(s);
}

static void case_sweep(void)
{
    reg_sweep_interval_s = 0;   /* every first open sweeps */
    reg_entries_sweep_interval_s = 0;
    /* a namespace that goes: its process made everything, then died */
    struct made gone;
    pid_t d = make_in_new_netns(&gone, NULL);
    wait_clean(d, "the process of the namespace that goes");
    /* a namespace with a process still in it */
    int stay[2];
    CHECK(pipe(stay), ==, 0);
    struct made alive;
    pid_t l = make_in_new_netns(&alive, stay);
    /* ours: a process that died between making a segment and posting it,
     * and our own live connection */
    struct made own;
    make_all(&own);
    /* what no sweep may take: names of another format, another user's file
     * under a name of ours */
    char old_format[160], old_registry[160];
    snprintf(old_format, sizeof old_format, SHM "/shunt-%u-12345-7-0123456789abcdef", (unsigned)geteuid());
    snprintf(old_registry, sizeof old_registry, SHM "/shunt-%u-%llu-r2.reg", (unsigned)geteuid(),
             (unsigned long long)reg_netns() + 1);
    int fd = open(old_format, O_CREAT | O_WRONLY, 0600);
    close(fd);
    fd = open(old_registry, O_CREAT | O_WRONLY, 0600);
    close(fd);
    snprintf(squat_path, sizeof squat_path, SHM "/shunt-%u-4000000000-c%u-1-1-0123456789ab", (unsigned)geteuid(),
             CHANNEL_VERSION);
    as_nobody(make_aged_0666, squat_path);
    /* fabric doorbells: of a process gone (killed: its file stays), and of
     * this live one */
    char dead_bell[200], live_bell[200], young_bell[200];
    pid_t b = fork();
    if (b == 0)
        _exit(0);
    CHECK(waitpid(b, NULL, 0), ==, b);
    make_bell(dead_bell, sizeof dead_bell, (uint32_t)b, 0x1234);
    make_bell(live_bell, sizeof live_bell, (uint32_t)getpid(), 0x5678);
    age_everything();
    make_bell(young_bell, sizeof young_bell, (uint32_t)b, 0x9abc);   /* gone, but younger than the grace */
    /* and a namespace that just went: its files are younger than the grace */
    struct made young;
    pid_t y = make_in_new_netns(&young, NULL);
    wait_clean(y, "the process of the young namespace");

    /* the first open of a process sweeps */
    reg_close_for_test();
    if (getenv("SHUNT_TEST_DEBUG"))
        shunt_log_level = LOG_DEBUG;
    CHECK(reg_open(), ==, 0);
    shunt_log_level = LOG_OFF;

    /* a dead process's records go at any age (as they always did), with
     * what they name; what nothing names goes once older than the grace;
     * a registry once nobody is in its namespace */
    const char *went[] = { gone.registry, gone.posted, gone.beside, gone.unposted, gone.table,
                           alive.unposted, own.unposted, young.posted, young.beside, young.table, dead_bell };
    for (unsigned i = 0; i < sizeof went / sizeof went[0]; i++)
        if (exists(went[i]))
            FAIL("%s is still there\n", went[i]);
    const char *kept[] = { alive.registry, alive.posted, alive.beside, alive.table, own.posted, own.beside,
                           own.table, young.registry, young.unposted, old_format, old_registry, squat_path,
                           live_bell, young_bell };
    for (unsigned i = 0; i < sizeof kept / sizeof kept[0]; i++)
        if (!exists(kept[i]))
            FAIL("%s went\n", kept[i]);
    CHECK(write(stay[1], "x", 1), ==, 1);
    wait_clean(l, "the process of the namespace that stays");
}

int main(int argc, char **argv)
{
    only = argc > 1 ? argv[1] : NULL;
    if (geteuid() != 0) {
        printf("skip: test_shm_files needs root (namespaces, a second user)\n");
        PASS();
    }
    in_private_shm("a table name squatted and truncated by another user", case_table_squat);
    in_private_shm("the registry as another user's file: refused, untouched", case_registry_file);
    in_private_shm("the registry as a symlink to a file of ours: refused, not followed", case_registry_symlink);
    in_private_shm("the registry as another user's FIFO: refused", case_registry_fifo);
    in_private_shm("a registry replaced between map and lock: the new one is used", case_registry_replaced);
    in_private_shm("the shm budget as another user's file: not ours", case_budget_file);
    in_private_shm("the shm budget as a symlink: not ours, not followed", case_budget_symlink);
    in_private_shm("the shm budget as a FIFO: not ours", case_budget_fifo);
    in_private_shm("the wake FIFOs' names cannot be made from the segment's", case_wake_names);
    in_private_shm("a sweep takes the files of namespaces nobody is in and of nobody's records, and nothing else",
                   case_sweep);
    PASS();
}
