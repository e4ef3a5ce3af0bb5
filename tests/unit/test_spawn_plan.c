/*
 * test_spawn_plan.c: unit tests of posix_spawn's file-action replay
 * (src/core/process/spawn_plan.c).
 *
 * spawn_prepare() decides which of this process's accelerated sockets the
 * spawned program will hold, from the side table of file actions that
 * spawn_actions_init/added/destroy keep (the wrappers of
 * posix_spawn_file_actions_* call them; here the test calls libc and then
 * them, as those wrappers do).  No live connection is needed: each
 * "accelerated socket" is a tcp_sock made here (path PATH_SHM, a channel
 * side of its own) and entered in the fd table on a pipe's fd.  The program
 * spawned is one that will run shunt (a path that does not exist, which
 * spawn_prepare treats so, or /bin/true with libshunt in LD_PRELOAD), so
 * spawn_prepare counts each socket that reaches it in as a holder of its
 * channel side, and spawn_finish gives the holds back; the holder counts
 * are what the test reads.  The other branch (a program without shunt:
 * the sockets move back to kernel TCP, downgrade.c) needs live connections
 * and is left to the conformance tests (spawn_file_actions,
 * spawn_downgrade).
 *
 * Covered: no actions; close, dup2 (onto another fd, onto itself, onto a
 * socket's fd), open, closefrom and the actions that move no fd; chains of
 * them; close-on-exec; sockets on kernel TCP or without a channel; objects
 * shunt cannot follow (copied with memcpy, an action behind its back,
 * destroyed, over ACTIONS_MAX actions) taking every socket as reaching;
 * an object zeroed without init; init again at the same address; LRU
 * eviction past 256 objects; spawn_finish after a failed and a successful
 * spawn; references balanced; the table across fork; threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <paths.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "base/self.h"
#include "core/conn/downgrade.h"
#include "core/fd/fdtable.h"
#include "core/kinds/tcp_socket.h"
#include "core/process/runs_shunt.h"
#include "core/process/spawn_plan.h"

extern char **environ;

#define NFAKE 4
#define NOWHERE "/nonexistent/shunt-test/program"   /* an exec that fails: held, as if under shunt */

struct fake {
    struct tcp_sock *t;
    struct chan_side *side;
    int fd, other;      /* the pipe: fd is the socket's number, other its other end */
};

static struct fake fakes[NFAKE];
static char fake_hdr[64];   /* only its address matters: a mapped channel */

/* A tcp_sock on path (PATH_SHM: accelerated) at a fresh fd; the table holds
 * one reference, the test another for good (destroy is never reached). */
static void fake_make(struct fake *f, int path, bool cloexec)
{
    int p[2];
    CHECK_OK(pipe(p));
    f->fd = p[0];
    f->other = p[1];
    if (cloexec)
        CHECK_OK(fcntl(f->fd, F_SETFD, FD_CLOEXEC));
    f->t = calloc(1, sizeof *f->t);
    f->side = calloc(1, sizeof *f->side);
    CHECK(f->t != NULL && f->side != NULL, ==, 1);
    /* the TCP kind's object, as tcp_socket_new makes it, with a fake channel */
    struct tcp_sock *made = tcp_of(tcp_socket_new(f->fd, AF_INET, 0));
    CHECK(made != NULL, ==, 1);
    memcpy(f->t, made, sizeof *f->t);
    free(made);
    atomic_init(&f->t->base.refs, 2);
    atomic_init(&f->t->path, path);
    f->t->ch.hdr = (struct chan_hdr *)(void *)fake_hdr;
    f->t->ch.self = f->side;
    atomic_init(&f->side->holders, 1);   /* this process */
    f->t->own_fd = -1;
    fdt_install(f->fd, &f->t->base);
    CHECK(atomic_load(&f->t->base.refs), ==, 2);
}

static void set_cloexec(int fd, bool on)
{
    CHECK_OK(fcntl(fd, F_SETFD, on ? FD_CLOEXEC : 0));
}

/* Which fakes the program spawned with fa will hold (bit k: fakes[k]), as
 * spawn_prepare counts them; spawn_finish then gives the holds back (a
 * failed spawn), and everything must be as before. */
static unsigned reach_path(const posix_spawn_file_actions_t *fa, const char *path, char *const envp[])
{
    struct spawn_plan p;
    unsigned got = 0;
    int refs[NFAKE];
    for (int k = 0; k < NFAKE; k++)
        refs[k] = atomic_load(&fakes[k].t->base.refs);
    memset(&p, 0xa5, sizeof p);
    spawn_prepare(&p, path, fa, envp, false);
    for (int k = 0; k < NFAKE; k++) {
        unsigned h = atomic_load(&fakes[k].side->holders);
        CHECK(h == 1 || h == 2, ==, 1);
        if (h == 2)
            got |= 1u << k;
    }
    spawn_finish(&p, false);
    CHECK(p.n, ==, 0);
    CHECK(p.held, ==, NULL);
    for (int k = 0; k < NFAKE; k++) {
        CHECK(atomic_load(&fakes[k].side->holders), ==, 1);
        CHECK(atomic_load(&fakes[k].t->base.refs), ==, refs[k]);   /* every reference given back */
    }
    return got;
}

static unsigned reach(const posix_spawn_file_actions_t *fa)
{
    return reach_path(fa, NOWHERE, environ);
}

#define A (1u << 0)
#define B (1u << 1)
#define C (1u << 2)     /* close-on-exec */
#define D (1u << 3)     /* close-on-exec */
#define ALL (A | B | C | D)
#define FREE_FD 900     /* a number none of ours has */

/* The wrappers of spawn_calls.c: libc, then the side table. */
static void fa_init(posix_spawn_file_actions_t *fa)
{
    CHECK(posix_spawn_file_actions_init(fa), ==, 0);
    spawn_actions_init(fa);
}

static void fa_destroy(posix_spawn_file_actions_t *fa)
{
    spawn_actions_destroy(fa);
    CHECK(posix_spawn_file_actions_destroy(fa), ==, 0);
}

static void fa_close(posix_spawn_file_actions_t *fa, int fd)
{
    CHECK(posix_spawn_file_actions_addclose(fa, fd), ==, 0);
    spawn_actions_added(fa, SPAWN_CLOSE, fd, -1);
}

static void fa_dup2(posix_spawn_file_actions_t *fa, int fd, int newfd)
{
    CHECK(posix_spawn_file_actions_adddup2(fa, fd, newfd), ==, 0);
    spawn_actions_added(fa, SPAWN_DUP2, fd, newfd);
}

static void fa_open(posix_spawn_file_actions_t *fa, int fd)
{
    CHECK(posix_spawn_file_actions_addopen(fa, fd, "/dev/null", O_RDONLY, 0), ==, 0);
    spawn_actions_added(fa, SPAWN_OPEN, fd, -1);
}

static void fa_closefrom(posix_spawn_file_actions_t *fa, int from)
{
    CHECK(posix_spawn_file_actions_addclosefrom_np(fa, from), ==, 0);
    spawn_actions_added(fa, SPAWN_CLOSEFROM, from, -1);
}

static void fa_chdir(posix_spawn_file_actions_t *fa)
{
    CHECK(posix_spawn_file_actions_addchdir_np(fa, "/"), ==, 0);
    spawn_actions_added(fa, SPAWN_OTHER, -1, -1);
}

static void fa_fchdir(posix_spawn_file_actions_t *fa, int fd)
{
    CHECK(posix_spawn_file_actions_addfchdir_np(fa, fd), ==, 0);
    spawn_actions_added(fa, SPAWN_OTHER, fd, -1);
}

#define FA(fa)                              \
    posix_spawn_file_actions_t fa;          \
    fa_init(&fa)

static int fd_of(unsigned bit)
{
    return fakes[__builtin_ctz(bit)].fd;
}

/* One object, one expectation; destroyed after. */
#define EXPECT(fa, want)                                                                         \
    do {                                                                                         \
        unsigned got_ = reach(&(fa));                                                            \
        if (got_ != (want))                                                                      \
            FAIL("reached 0x%x, expected 0x%x (A=1 B=2 C=4 D=8; C, D close-on-exec)", got_, \
                 (unsigned)(want));                                                              \
    } while (0)

static void test_no_actions(void)
{
    CHECK(reach(NULL), ==, A | B);
    FA(fa);
    EXPECT(fa, A | B);              /* initialised, nothing added */
    fa_chdir(&fa);
    fa_fchdir(&fa, fd_of(A));       /* fchdir names a fd but leaves it alone */
    EXPECT(fa, A | B);
    fa_destroy(&fa);
}

static void test_close_open_closefrom(void)
{
    {
        FA(fa);
        fa_close(&fa, fd_of(A));
        EXPECT(fa, B);
        fa_close(&fa, fd_of(C));    /* closing a close-on-exec one changes nothing */
        EXPECT(fa, B);
        fa_destroy(&fa);
    }
    {
        FA(fa);
        fa_open(&fa, fd_of(B));     /* a file opened there: the socket is gone from it */
        EXPECT(fa, A);
        fa_destroy(&fa);
    }
    {
        FA(fa);
        fa_close(&fa, FREE_FD);     /* a number without a socket */
        fa_open(&fa, FREE_FD + 1);
        EXPECT(fa, A | B);
        fa_destroy(&fa);
    }
    /* closefrom: every fd from its argument up, and none below */
    for (int k = 0; k < NFAKE; k++) {
        FA(fa);
        fa_closefrom(&fa, fakes[k].fd);
        unsigned want = 0;
        for (int j = 0; j < NFAKE; j++)
            if (fakes[j].fd < fakes[k].fd && !(C & (1u << j)) && !(D & (1u << j)))
                want |= 1u << j;
        EXPECT(fa, want);
        fa_destroy(&fa);
    }
    {
        FA(fa);
        fa_closefrom(&fa, FREE_FD);
        EXPECT(fa, A | B);
        fa_destroy(&fa);
    }
}

static void test_dup2(void)
{
    {
        /* a close-on-exec socket dup2'd elsewhere reaches (the new fd is not close-on-exec) */
        FA(fa);
        fa_dup2(&fa, fd_of(C), FREE_FD);
        EXPECT(fa, A | B | C);
        fa_destroy(&fa);
    }
    {
        /* ... and onto itself: glibc clears FD_CLOEXEC */
        FA(fa);
        fa_dup2(&fa, fd_of(D), fd_of(D));
        EXPECT(fa, A | B | D);
        fa_destroy(&fa);
    }
    {
        /* onto another socket's fd: that one's only fd is replaced */
        FA(fa);
        fa_dup2(&fa, fd_of(B), fd_of(A));
        EXPECT(fa, B);
        fa_destroy(&fa);
    }
    {
        /* onto a close-on-exec socket's fd: the copy is not close-on-exec */
        FA(fa);
        fa_dup2(&fa, fd_of(A), fd_of(C));
        fa_close(&fa, fd_of(A));
        EXPECT(fa, A | B);
        fa_destroy(&fa);
    }
    {
        /* a copy survives the close of the original, and a chain of copies the closes */
        FA(fa);
        fa_dup2(&fa, fd_of(A), FREE_FD);
        fa_close(&fa, fd_of(A));
        fa_dup2(&fa, FREE_FD, FREE_FD + 1);
        fa_close(&fa, FREE_FD);
        EXPECT(fa, A | B);
        fa_close(&fa, FREE_FD + 1);
        EXPECT(fa, B);
        fa_destroy(&fa);
    }
    {
        /* the usual child set-up: the socket onto 0 and 1, the original closed,
         * close-on-exec sources included */
        FA(fa);
        fa_dup2(&fa, fd_of(C), 0);
        fa_dup2(&fa, fd_of(C), 1);
        fa_close(&fa, fd_of(A));
        fa_close(&fa, fd_of(B));
        EXPECT(fa, C);
        /* then a file over 0, a copy closed: 1 still holds it */
        fa_open(&fa, 0);
        EXPECT(fa, C);
        fa_close(&fa, 1);
        EXPECT(fa, 0);
        fa_destroy(&fa);
    }
    {
        /* a dup2 from a number without a socket onto a socket's fd: replaced */
        FA(fa);
        fa_dup2(&fa, FREE_FD, fd_of(B));
        EXPECT(fa, A);
        fa_destroy(&fa);
    }
    {
        /* order matters: closefrom after a dup2 below it keeps the copy */
        int low = 2;    /* below every fd of ours */
        FA(fa);
        for (int k = 0; k < NFAKE; k++)
            CHECK(fakes[k].fd, >, low);
        fa_dup2(&fa, fd_of(D), low);
        fa_closefrom(&fa, low + 1);
        EXPECT(fa, D);
        fa_destroy(&fa);
        FA(fb);
        fa_closefrom(&fb, low + 1);
        fa_dup2(&fb, fd_of(D), low);   /* D's fd was closed before: nothing to copy */
        EXPECT(fb, 0);
        fa_destroy(&fb);
    }
}

/* The test's own object for spawn_plan's table that shunt cannot follow:
 * every accelerated socket, close-on-exec or not, is taken as reaching. */
static void test_unknown_objects(void)
{
    {
        /* copied with memcpy: the copy's address has no record */
        FA(fa);
        fa_close(&fa, fd_of(A));
        EXPECT(fa, B);
        posix_spawn_file_actions_t copy;
        memcpy(&copy, &fa, sizeof copy);
        EXPECT(copy, ALL);
        fa_destroy(&fa);
    }
    {
        /* an action libc took but shunt never saw */
        FA(fa);
        fa_close(&fa, fd_of(A));
        CHECK(posix_spawn_file_actions_addclose(&fa, fd_of(B)), ==, 0);
        EXPECT(fa, ALL);
        fa_close(&fa, fd_of(C));    /* still unknown: the record stays broken */
        EXPECT(fa, ALL);
        fa_destroy(&fa);
    }
    {
        /* destroyed for shunt, used again by libc: no record */
        posix_spawn_file_actions_t fa;
        fa_init(&fa);
        fa_close(&fa, fd_of(A));
        spawn_actions_destroy(&fa);
        EXPECT(fa, ALL);
        CHECK(posix_spawn_file_actions_destroy(&fa), ==, 0);
        /* an empty object needs no record */
        CHECK(posix_spawn_file_actions_init(&fa), ==, 0);
        EXPECT(fa, A | B);
        CHECK(posix_spawn_file_actions_destroy(&fa), ==, 0);
    }
    {
        /* never initialised for shunt, zeroed (glibc allows it): the first
         * action starts the record, which is then exact */
        posix_spawn_file_actions_t fa;
        memset(&fa, 0, sizeof fa);
        fa_close(&fa, fd_of(A));
        fa_dup2(&fa, fd_of(D), FREE_FD);
        EXPECT(fa, B | D);
        fa_destroy(&fa);
        /* zeroed, but its first action was missed: the second cannot start one */
        memset(&fa, 0, sizeof fa);
        CHECK(posix_spawn_file_actions_addclose(&fa, fd_of(A)), ==, 0);
        fa_close(&fa, fd_of(B));
        EXPECT(fa, ALL);
        fa_destroy(&fa);
    }
    {
        /* destroyed and initialised again behind shunt's back, then an action
         * shunt sees out of step with libc's count: unknown for good, even
         * once more actions shunt misses bring the counts level again */
        FA(fa);
        fa_close(&fa, fd_of(A));
        fa_close(&fa, fd_of(B));
        CHECK(posix_spawn_file_actions_destroy(&fa), ==, 0);
        CHECK(posix_spawn_file_actions_init(&fa), ==, 0);
        fa_close(&fa, fd_of(C));
        CHECK(posix_spawn_file_actions_addclose(&fa, FREE_FD), ==, 0);
        CHECK(posix_spawn_file_actions_addclose(&fa, FREE_FD + 1), ==, 0);
        EXPECT(fa, ALL);
        fa_destroy(&fa);
    }
    {
        /* init again at the same address (no destroy for shunt): a fresh record */
        FA(fa);
        fa_close(&fa, fd_of(A));
        fa_close(&fa, fd_of(B));
        EXPECT(fa, 0);
        CHECK(posix_spawn_file_actions_destroy(&fa), ==, 0);
        fa_init(&fa);
        fa_dup2(&fa, fd_of(C), FREE_FD);
        EXPECT(fa, A | B | C);
        fa_destroy(&fa);
    }
}

/* ACTIONS_MAX (4096) actions are followed; one more and the object is unknown. */
static void test_many_actions(void)
{
    FA(fa);
    fa_close(&fa, fd_of(A));
    for (int i = 1; i < 4096; i++)
        fa_close(&fa, FREE_FD + (i % 50));
    EXPECT(fa, B);
    fa_close(&fa, FREE_FD);
    EXPECT(fa, ALL);
    fa_destroy(&fa);
}

/* 256 records at most; past that the least recently used one goes. */
static void test_eviction(void)
{
    enum { N = 256 };
    posix_spawn_file_actions_t *fas = calloc(N + 1, sizeof *fas);
    CHECK(fas != NULL, ==, 1);
    for (int i = 0; i < N; i++) {
        fa_init(&fas[i]);
        fa_close(&fas[i], fd_of(A));
    }
    for (int i = 0; i < N; i++)
        EXPECT(fas[i], B);     /* all known; the use makes fas[N-1] the most recent */
    EXPECT(fas[0], B);         /* fas[0] used again: fas[1] is now the oldest */
    fa_init(&fas[N]);          /* one more record: fas[1]'s goes */
    fa_close(&fas[N], fd_of(B));
    EXPECT(fas[N], A);
    EXPECT(fas[1], ALL);
    EXPECT(fas[0], B);
    EXPECT(fas[2], B);
    for (int i = 0; i <= N; i++)
        fa_destroy(&fas[i]);
    free(fas);
}

/* Sockets that are not accelerated never count, whatever the actions. */
static void test_not_accelerated(void)
{
    struct tcp_sock *t = fakes[0].t;
    atomic_store(&t->path, PATH_TCP);
    CHECK(reach(NULL), ==, B);
    atomic_store(&t->path, PATH_OFFERED);    /* negotiating: a channel, counted */
    CHECK(reach(NULL), ==, A | B);
    struct chan_hdr *hdr = t->ch.hdr;
    t->ch.hdr = NULL;                        /* no channel mapped */
    CHECK(reach(NULL), ==, B);
    t->ch.hdr = hdr;
    atomic_store(&t->path, PATH_SHM);
    /* an fd shunt's table has settled on kernel TCP answers passthrough */
    fdt_settle_kernel(fakes[1].fd, &fakes[1].t->base);
    CHECK(reach(NULL), ==, A);
    fdt_install(fakes[1].fd, &fakes[1].t->base);   /* back (the table's reference) */
    sock_get(&fakes[1].t->base);
    atomic_fetch_sub(&fakes[1].t->base.fds, 1);
    CHECK(reach(NULL), ==, A | B);
}

/* spawn_finish: a spawn that happened keeps the holds (the new program
 * holds the sockets), one that failed gives them back. */
static void test_finish(void)
{
    struct spawn_plan p;
    spawn_prepare(&p, NOWHERE, NULL, environ, false);
    CHECK(p.n, ==, NFAKE);    /* every accelerated socket is looked at, each once */
    CHECK(atomic_load(&fakes[0].side->holders), ==, 2);
    CHECK(atomic_load(&fakes[0].t->base.refs), ==, 3);
    spawn_finish(&p, true);
    CHECK(atomic_load(&fakes[0].side->holders), ==, 2);
    CHECK(atomic_load(&fakes[1].side->holders), ==, 2);
    CHECK(atomic_load(&fakes[2].side->holders), ==, 1);
    CHECK(atomic_load(&fakes[0].t->base.refs), ==, 2);
    atomic_store(&fakes[0].side->holders, 1);
    atomic_store(&fakes[1].side->holders, 1);

    /* one socket on two fds of this process is one hold */
    int extra = CHECK_OK(dup(fakes[0].fd));
    sock_get(&fakes[0].t->base);
    fdt_install(extra, &fakes[0].t->base);
    spawn_prepare(&p, NOWHERE, NULL, environ, false);
    CHECK(p.n, ==, NFAKE);
    CHECK(atomic_load(&fakes[0].side->holders), ==, 2);
    spawn_finish(&p, false);
    CHECK(atomic_load(&fakes[0].side->holders), ==, 1);
    /* ... and still reaches when either fd is closed by the actions */
    FA(fa);
    fa_close(&fa, fakes[0].fd);
    EXPECT(fa, A | B);
    fa_close(&fa, extra);
    EXPECT(fa, B);
    fa_destroy(&fa);
    fdt_forget(extra);    /* drops the table's reference */
    atomic_fetch_sub(&fakes[0].t->base.fds, 1);
    CHECK_OK(close(extra));
    CHECK(atomic_load(&fakes[0].t->base.refs), ==, 2);

    /* a program found under shunt (libshunt in its LD_PRELOAD) is held like a failed exec */
    char *env[] = { "PATH=/usr/bin:/bin", "LD_PRELOAD=/nonexistent/lib/libshunt.so", NULL };
    CHECK(runs_shunt_exec("/bin/true", -1, env, false), ==, true);
    CHECK(reach_path(NULL, "/bin/true", env), ==, A | B);
}

/* system and popen: the shell gets environ; popen's pipe replaces one fd. */
static void test_shell(void)
{
    CHECK_OK(setenv("LD_PRELOAD", "/nonexistent/lib/libshunt.so", 1));
    if (!runs_shunt_exec(_PATH_BSHELL, -1, environ, false))
        FAIL("%s with libshunt in LD_PRELOAD is not taken as running shunt", _PATH_BSHELL);
    struct spawn_plan p;
    spawn_prepare_shell(&p, -1);     /* system */
    CHECK(atomic_load(&fakes[0].side->holders), ==, 2);
    CHECK(atomic_load(&fakes[1].side->holders), ==, 2);
    CHECK(atomic_load(&fakes[2].side->holders), ==, 1);
    spawn_finish(&p, false);
    spawn_prepare_shell(&p, fakes[1].fd);   /* popen: its pipe where B was */
    CHECK(atomic_load(&fakes[0].side->holders), ==, 2);
    CHECK(atomic_load(&fakes[1].side->holders), ==, 1);
    spawn_finish(&p, false);
    CHECK(atomic_load(&fakes[0].side->holders), ==, 1);
    CHECK_OK(unsetenv("LD_PRELOAD"));
}

/* fork: the table's lock is held across it; the child's table is whole. */
static void test_fork(void)
{
    FA(fa);
    fa_close(&fa, fd_of(A));
    spawn_actions_before_fork();
    pid_t pid = CHECK_OK(fork());
    spawn_actions_after_fork();
    if (pid == 0) {
        EXPECT(fa, B);
        fa_close(&fa, fd_of(B));
        EXPECT(fa, 0);
        FA(fb);
        fa_dup2(&fb, fd_of(C), FREE_FD);
        EXPECT(fb, ALL & ~D);
        _exit(0);
    }
    int st;
    CHECK_OK(waitpid(pid, &st, 0));
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, ==, 1);
    EXPECT(fa, B);     /* the child's action is the child's */
    fa_destroy(&fa);
}

/* Threads adding to objects of their own at once, between init/destroy
 * cycles of others; each object stays exact. */
enum { THREADS = 4 };
static posix_spawn_file_actions_t thread_fa[THREADS];

static void *adder(void *arg)
{
    int n = (int)(intptr_t)arg;
    posix_spawn_file_actions_t *mine = &thread_fa[n];
    fa_init(mine);
    for (int round = 0; round < 40; round++) {
        posix_spawn_file_actions_t tmp;
        fa_init(&tmp);
        for (int i = 0; i < 20 + n; i++)
            fa_close(&tmp, FREE_FD + i);
        fa_close(mine, FREE_FD + round);
        if (round == 10 + n && (n & 1))
            fa_close(mine, fd_of(A));
        fa_destroy(&tmp);
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&th[i], NULL, adder, (void *)(intptr_t)i), ==, 0);
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_join(th[i], NULL), ==, 0);
    for (int i = 0; i < THREADS; i++) {
        EXPECT(thread_fa[i], (i & 1) ? B : A | B);
        fa_destroy(&thread_fa[i]);
    }
}

int main(void)
{
    shunt_pid = getpid();
    fdt_init();
    fake_make(&fakes[0], PATH_SHM, false);   /* A */
    fake_make(&fakes[1], PATH_SHM, false);   /* B */
    fake_make(&fakes[2], PATH_SHM, true);    /* C: close-on-exec */
    fake_make(&fakes[3], PATH_SHM, true);    /* D: close-on-exec */
    for (int k = 1; k < NFAKE; k++)
        CHECK(fakes[k].fd, >, fakes[k - 1].fd);
    CHECK(fakes[NFAKE - 1].other, <, FREE_FD);

    test_no_actions();
    test_close_open_closefrom();
    test_dup2();
    test_unknown_objects();
    test_many_actions();
    test_eviction();
    test_not_accelerated();
    test_finish();
    test_shell();
    test_fork();
    test_threads();
    /* close-on-exec is read from the kernel at the spawn */
    set_cloexec(fakes[2].fd, false);
    CHECK(reach(NULL), ==, A | B | C);
    set_cloexec(fakes[0].fd, true);
    CHECK(reach(NULL), ==, B | C);
    set_cloexec(fakes[0].fd, false);
    set_cloexec(fakes[2].fd, true);
    CHECK(reach(NULL), ==, A | B);
    printf("test_spawn_plan: ok\n");
    PASS();
}
