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
 * visible name.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "check.h"
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
    in_private_shm("the shm budget as another user's file: not ours", case_budget_file);
    in_private_shm("the shm budget as a symlink: not ours, not followed", case_budget_symlink);
    in_private_shm("the shm budget as a FIFO: not ours", case_budget_fifo);
    in_private_shm("the wake FIFOs' names cannot be made from the segment's", case_wake_names);
    PASS();
}
