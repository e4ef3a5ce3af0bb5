/*
 * test_epoll_journal.c: unit tests of the journal that keeps the member
 * tables of an epoll set shared across fork in step
 * (src/core/kinds/epoll_set.c, "the journal").
 *
 * After fork, parent and child hold one kernel epoll set and each its own
 * table of shunt's members; each writes its EPOLL_CTL_ADD, MOD and DEL of
 * accelerated members into the journal (shared memory) and applies the
 * others' records before its next wait or change.  Here the "processes" are
 * epoll_obj tables made by the test that share one journal, the writer told
 * apart by shunt_pid (as the journal tells them apart), and, for the parts
 * that need it, real forked processes.  The members are tcp_socks made here
 * (path PATH_SHM, an inode of their own) entered in the fd table on pipes'
 * fds: the journal needs nothing else of them.
 *
 * Covered: no journal (append and apply do nothing), create is idempotent,
 * free; ADD makes a hot member holding a reference with the recorded events
 * and data, MOD resets them, DEL takes the member out and drops it; records
 * ignored: an inode of 0, an fd that names another inode here or is not an
 * accelerated socket (on kernel TCP, a pipe, closed), MOD or DEL of a number
 * whose member here is another socket, ADD of a member already there, MOD
 * or DEL of no member; a process's own records are never applied to itself,
 * and its applied count follows its own appends only while it is up to date;
 * a reader more than 63 records behind loses the oldest (63 kept, the 64th
 * lost); parent and child across a real fork, both ways; a child writing
 * 20,000 records while the parent applies them: never a torn record, never
 * one out of order, the last one always arrives.
 *
 * Names of epoll_set.h used (a rename there is a sed here): struct
 * epoll_obj, struct ep_entry, epoll_set_journal_create, epoll_set_journal_free, epoll_set_journal_append,
 * epoll_set_journal_apply, epoll_set_slot_for_fd, epoll_set_hot_remove, epoll_set_free, EPOLL_SET_NO_SLOT, M_SOCKET.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "base/self.h"
#include "core/fd/fdtable.h"
#include "core/kinds/epoll_set.h"
#include "core/kinds/tcp_socket.h"

#define JOURNAL_RECORDS 63      /* epoll_set.c keeps this many */

/* Two writers told apart the way the journal tells them: shunt_pid. */
#define PID_A 4000001
#define PID_B 4000002

struct fake {
    struct tcp_sock *t;
    int fd, other;
};

static struct fake X, Y, T;   /* accelerated, accelerated, on kernel TCP */
static int plain_fd;          /* a pipe: passthrough for the fd table */
static char fake_hdr[64];

static void fake_make(struct fake *f, int path, uint64_t inode)
{
    int p[2];
    CHECK_OK(pipe(p));
    f->fd = p[0];
    f->other = p[1];
    f->t = calloc(1, sizeof *f->t);
    CHECK(f->t != NULL, ==, 1);
    /* the TCP kind's object, as tcp_socket_new makes it, with a fake channel */
    struct tcp_sock *made = tcp_of(tcp_socket_new(f->fd, AF_INET, 0));
    CHECK(made != NULL, ==, 1);
    memcpy(f->t, made, sizeof *f->t);
    free(made);
    atomic_init(&f->t->base.refs, 2);      /* the table's and the test's (never destroyed) */
    atomic_init(&f->t->path, path);
    f->t->inode = inode;
    f->t->ch.hdr = (struct chan_hdr *)(void *)fake_hdr;
    f->t->own_fd = -1;
    fdt_install(f->fd, &f->t->base);
}

static struct epoll_obj *ep_new(void)
{
    struct epoll_obj *ep = calloc(1, sizeof *ep);
    CHECK(ep != NULL, ==, 1);
    CHECK(pthread_mutex_init(&ep->lock, NULL), ==, 0);
    ep->kfd = -1;
    return ep;
}

static void ep_delete(struct epoll_obj *ep)
{
    epoll_set_free(ep);
    CHECK(ep->journal, ==, NULL);
    pthread_mutex_destroy(&ep->lock);
    free(ep);
}

/* A second table on the same journal, as the child of a fork finds it. */
static struct epoll_obj *ep_share(struct epoll_obj *from)
{
    struct epoll_obj *ep = ep_new();
    ep->journal = from->journal;
    ep->applied = from->applied;
    return ep;
}

/* The other table's journal pointer is not its to unmap. */
static void ep_unshare(struct epoll_obj *ep)
{
    ep->journal = NULL;
    ep_delete(ep);
}

static void append(struct epoll_obj *ep, pid_t as, int op, int fd, uint32_t events, uint64_t data, uint64_t inode)
{
    struct epoll_event ev = { .events = events, .data.u64 = data };
    shunt_pid = as;
    pthread_mutex_lock(&ep->lock);
    epoll_set_journal_append(ep, op, fd, op == EPOLL_CTL_DEL ? NULL : &ev, inode);
    pthread_mutex_unlock(&ep->lock);
}

static void apply(struct epoll_obj *ep, pid_t as)
{
    shunt_pid = as;
    pthread_mutex_lock(&ep->lock);
    epoll_set_journal_apply(ep);
    pthread_mutex_unlock(&ep->lock);
}

/* The member of ep for f, checked whole: events and data as recorded, hot. */
static struct ep_entry *member(struct epoll_obj *ep, const struct fake *f, uint32_t events, uint64_t data)
{
    struct ep_entry *e = epoll_set_slot_for_fd(ep, f->fd);
    if (!e)
        FAIL("fd %d (inode %llu) is no member", f->fd, (unsigned long long)f->t->inode);
    CHECK(e->s, ==, &f->t->base);
    CHECK(e->kind, ==, M_SOCKET);
    CHECK(e->fd, ==, f->fd);
    CHECK(e->events, ==, events);
    CHECK(e->data.u64, ==, data);
    CHECK(e->off, ==, false);
    CHECK(e->hot_pos, !=, EPOLL_SET_NO_SLOT);
    CHECK(ep->hot[e->hot_pos], ==, (uint32_t)(e - ep->v));
    return e;
}

static void test_no_journal(void)
{
    struct epoll_obj *a = ep_new();
    append(a, PID_A, EPOLL_CTL_ADD, X.fd, EPOLLIN, 1, X.t->inode);
    CHECK(a->applied, ==, 0);
    apply(a, PID_B);
    CHECK(a->applied, ==, 0);
    CHECK(a->members, ==, 0);
    epoll_set_journal_free(a);            /* nothing to free */
    CHECK(a->journal, ==, NULL);

    epoll_set_journal_create(a);
    CHECK(a->journal, !=, NULL);
    struct ctl_journal *j = a->journal;
    epoll_set_journal_create(a);          /* made once, before the first fork */
    CHECK(a->journal, ==, j);
    epoll_set_journal_free(a);
    CHECK(a->journal, ==, NULL);
    epoll_set_journal_free(a);
    ep_delete(a);
}

static void test_add_mod_del(void)
{
    struct epoll_obj *a = ep_new();
    epoll_set_journal_create(a);
    struct epoll_obj *b = ep_share(a);
    int refs = atomic_load(&X.t->base.refs);

    append(a, PID_A, EPOLL_CTL_ADD, X.fd, EPOLLIN | EPOLLRDHUP, 42, X.t->inode);
    CHECK(a->applied, ==, 1);           /* its own record: seen */
    CHECK(b->applied, ==, 0);
    apply(b, PID_B);
    CHECK(b->applied, ==, 1);
    struct ep_entry *e = member(b, &X, EPOLLIN | EPOLLRDHUP, 42);
    CHECK(b->members, ==, 1);
    CHECK(b->nhot, ==, 1);
    CHECK(atomic_load(&X.t->epoll_entries), ==, 1);
    CHECK(atomic_load(&X.t->base.refs), ==, refs + 1);
    apply(b, PID_B);                    /* applied once only */
    CHECK(b->members, ==, 1);
    CHECK(atomic_load(&X.t->base.refs), ==, refs + 1);
    apply(a, PID_A);                    /* the writer's own table is its caller's business */
    CHECK(epoll_set_slot_for_fd(a, X.fd), ==, NULL);
    CHECK(a->applied, ==, 1);

    /* MOD: the events and data of a new registration; one-shot re-armed, hot again */
    e->off = true;
    e->last = EPOLLIN;
    e->last_rx = 77;
    e->last_end = true;
    pthread_mutex_lock(&b->lock);
    epoll_set_hot_remove(b, e);
    pthread_mutex_unlock(&b->lock);
    CHECK(e->hot_pos, ==, EPOLL_SET_NO_SLOT);
    append(a, PID_A, EPOLL_CTL_MOD, X.fd, EPOLLOUT | EPOLLET | EPOLLONESHOT, 0xfeedbeef12345678ull, X.t->inode);
    apply(b, PID_B);
    e = member(b, &X, EPOLLOUT | EPOLLET | EPOLLONESHOT, 0xfeedbeef12345678ull);
    CHECK(e->last, ==, 0);
    CHECK(e->last_rx, ==, 0);
    CHECK(e->last_end, ==, false);
    CHECK(b->members, ==, 1);
    CHECK(atomic_load(&X.t->base.refs), ==, refs + 1);

    /* a second member, then DEL of the first */
    append(a, PID_A, EPOLL_CTL_ADD, Y.fd, EPOLLIN, 7, Y.t->inode);
    append(a, PID_A, EPOLL_CTL_DEL, X.fd, 0, 0, X.t->inode);
    CHECK(a->applied, ==, 4);
    apply(b, PID_B);
    CHECK(b->applied, ==, 4);
    CHECK(epoll_set_slot_for_fd(b, X.fd), ==, NULL);
    member(b, &Y, EPOLLIN, 7);
    CHECK(b->members, ==, 1);
    CHECK(b->nhot, ==, 1);
    CHECK(atomic_load(&X.t->epoll_entries), ==, 0);
    CHECK(atomic_load(&X.t->base.refs), ==, refs);
    CHECK(b->nfree, ==, 1);             /* the slot is free for the next */

    /* ADD again after DEL: a member again (in the freed slot) */
    append(a, PID_A, EPOLL_CTL_ADD, X.fd, EPOLLPRI, 9, X.t->inode);
    apply(b, PID_B);
    member(b, &X, EPOLLPRI, 9);
    CHECK(b->members, ==, 2);
    CHECK(b->nfree, ==, 0);
    CHECK(b->nv, ==, 2);

    ep_unshare(b);                      /* epoll_set_free drops both members */
    CHECK(atomic_load(&X.t->base.refs), ==, refs);
    CHECK(atomic_load(&Y.t->epoll_entries), ==, 0);
    ep_delete(a);
}

static void test_ignored(void)
{
    struct epoll_obj *a = ep_new();
    epoll_set_journal_create(a);
    struct epoll_obj *b = ep_share(a);

    /* inode 0: not recorded at all */
    append(a, PID_A, EPOLL_CTL_ADD, X.fd, EPOLLIN, 1, 0);
    CHECK(a->applied, ==, 0);
    apply(b, PID_B);
    CHECK(b->applied, ==, 0);

    /* ADDs that name nothing this table may hold */
    append(a, PID_A, EPOLL_CTL_ADD, X.fd, EPOLLIN, 1, Y.t->inode);     /* another socket's inode */
    append(a, PID_A, EPOLL_CTL_ADD, T.fd, EPOLLIN, 1, T.t->inode);     /* on kernel TCP */
    append(a, PID_A, EPOLL_CTL_ADD, plain_fd, EPOLLIN, 1, 12345);      /* a pipe */
    append(a, PID_A, EPOLL_CTL_ADD, 987, EPOLLIN, 1, X.t->inode);      /* a closed fd */
    append(a, PID_A, EPOLL_CTL_MOD, X.fd, EPOLLOUT, 2, X.t->inode);    /* MOD, DEL of no member */
    append(a, PID_A, EPOLL_CTL_DEL, Y.fd, 0, 0, Y.t->inode);
    apply(b, PID_B);
    CHECK(b->applied, ==, 6);
    CHECK(b->members, ==, 0);
    CHECK(atomic_load(&X.t->epoll_entries), ==, 0);
    CHECK(atomic_load(&T.t->epoll_entries), ==, 0);

    /* a member here: records for its number but another inode leave it be */
    append(a, PID_A, EPOLL_CTL_ADD, X.fd, EPOLLIN, 10, X.t->inode);
    apply(b, PID_B);
    member(b, &X, EPOLLIN, 10);
    append(a, PID_A, EPOLL_CTL_MOD, X.fd, EPOLLOUT, 11, Y.t->inode);
    append(a, PID_A, EPOLL_CTL_DEL, X.fd, 0, 0, Y.t->inode);
    /* ADD of what is a member already: no second one, its events kept */
    append(a, PID_A, EPOLL_CTL_ADD, X.fd, EPOLLOUT, 12, X.t->inode);
    apply(b, PID_B);
    member(b, &X, EPOLLIN, 10);
    CHECK(b->members, ==, 1);
    CHECK(atomic_load(&X.t->epoll_entries), ==, 1);

    ep_unshare(b);
    ep_delete(a);
}

/* A process never applies its own records; its count of records seen moves
 * with its own appends only while it had seen everything before them. */
static void test_own_records(void)
{
    struct epoll_obj *a = ep_new();
    epoll_set_journal_create(a);
    struct epoll_obj *b = ep_share(a);

    append(a, PID_A, EPOLL_CTL_ADD, X.fd, EPOLLIN, 1, X.t->inode);
    append(b, PID_B, EPOLL_CTL_ADD, Y.fd, EPOLLIN, 2, Y.t->inode);   /* b is behind: stays behind */
    CHECK(a->applied, ==, 1);
    CHECK(b->applied, ==, 0);
    apply(b, PID_B);
    CHECK(b->applied, ==, 2);
    member(b, &X, EPOLLIN, 1);
    CHECK(epoll_set_slot_for_fd(b, Y.fd), ==, NULL);    /* its own ADD: not replayed onto itself */
    CHECK(b->members, ==, 1);
    apply(a, PID_A);
    CHECK(a->applied, ==, 2);
    member(a, &Y, EPOLLIN, 2);
    CHECK(epoll_set_slot_for_fd(a, X.fd), ==, NULL);
    /* now both up to date: each append moves its writer on */
    append(b, PID_B, EPOLL_CTL_MOD, Y.fd, EPOLLOUT, 3, Y.t->inode);
    CHECK(b->applied, ==, 3);
    append(a, PID_A, EPOLL_CTL_MOD, X.fd, EPOLLOUT, 4, X.t->inode);
    CHECK(a->applied, ==, 2);            /* a had not seen b's MOD: it stays behind */
    apply(a, PID_A);
    apply(b, PID_B);
    CHECK(a->applied, ==, 4);
    CHECK(b->applied, ==, 4);
    member(a, &Y, EPOLLOUT, 3);
    member(b, &X, EPOLLOUT, 4);

    ep_unshare(b);
    ep_delete(a);
}

/* n records: ADD of X, then MODs; what a reader that saw none of them gets. */
static struct epoll_obj *behind_by(int n)
{
    struct epoll_obj *a = ep_new();
    epoll_set_journal_create(a);
    struct epoll_obj *b = ep_share(a);
    append(a, PID_A, EPOLL_CTL_ADD, X.fd, 1, 1000, X.t->inode);
    for (int i = 1; i < n; i++)
        append(a, PID_A, EPOLL_CTL_MOD, X.fd, (uint32_t)i + 1, 1000 + (uint64_t)i, X.t->inode);
    CHECK(a->applied, ==, n);
    apply(b, PID_B);
    CHECK(b->applied, ==, n);
    ep_delete(a);        /* unmaps the journal: b must not touch it again */
    b->journal = NULL;
    return b;
}

static void test_overflow(void)
{
    /* 63 records are all kept: the member, with the last MOD's events */
    struct epoll_obj *b = behind_by(JOURNAL_RECORDS);
    member(b, &X, JOURNAL_RECORDS, 1000 + JOURNAL_RECORDS - 1);
    ep_delete(b);
    /* 64: the oldest (the ADD) is lost, and the MODs find no member */
    b = behind_by(JOURNAL_RECORDS + 1);
    CHECK(epoll_set_slot_for_fd(b, X.fd), ==, NULL);
    CHECK(b->members, ==, 0);
    ep_delete(b);
    /* far behind: only the last 63 are looked at, the applied count is the head */
    b = behind_by(1000);
    CHECK(b->members, ==, 0);
    ep_delete(b);
    CHECK(atomic_load(&X.t->epoll_entries), ==, 0);
}

static void wait_ok(pid_t pid)
{
    int st;
    CHECK_OK(waitpid(pid, &st, 0));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        FAIL("child %d: status 0x%x", (int)pid, st);
}

/* Real processes: the child's changes reach the parent and the parent's
 * the child, through the journal mapped before the fork. */
static void test_fork(void)
{
    shunt_pid = getpid();
    struct epoll_obj *p = ep_new();
    epoll_set_journal_create(p);

    pid_t pid = CHECK_OK(fork());
    if (pid == 0) {
        shunt_pid = getpid();
        append(p, getpid(), EPOLL_CTL_ADD, X.fd, EPOLLIN, 21, X.t->inode);
        append(p, getpid(), EPOLL_CTL_ADD, Y.fd, EPOLLIN, 22, Y.t->inode);
        append(p, getpid(), EPOLL_CTL_MOD, X.fd, EPOLLIN | EPOLLOUT, 23, X.t->inode);
        append(p, getpid(), EPOLL_CTL_DEL, Y.fd, 0, 0, Y.t->inode);
        _exit(0);
    }
    wait_ok(pid);
    apply(p, getpid());
    CHECK(p->applied, ==, 4);
    member(p, &X, EPOLLIN | EPOLLOUT, 23);
    CHECK(epoll_set_slot_for_fd(p, Y.fd), ==, NULL);

    int go[2];
    CHECK_OK(pipe(go));
    pid = CHECK_OK(fork());
    if (pid == 0) {
        char c;
        shunt_pid = getpid();
        CHECK_OK(close(go[1]));
        CHECK(read(go[0], &c, 1), ==, 1);
        apply(p, getpid());
        CHECK(p->applied, ==, 6);
        member(p, &X, EPOLLRDHUP, 31);
        member(p, &Y, EPOLLOUT, 32);
        _exit(0);
    }
    CHECK_OK(close(go[0]));
    append(p, getpid(), EPOLL_CTL_MOD, X.fd, EPOLLRDHUP, 31, X.t->inode);
    append(p, getpid(), EPOLL_CTL_ADD, Y.fd, EPOLLOUT, 32, Y.t->inode);
    CHECK(write(go[1], "g", 1), ==, 1);
    CHECK_OK(close(go[1]));
    wait_ok(pid);
    /* the parent's own records did not change its own table */
    member(p, &X, EPOLLIN | EPOLLOUT, 23);
    CHECK(epoll_set_slot_for_fd(p, Y.fd), ==, NULL);
    ep_delete(p);
}

/* A child rewrites a member 20,000 times while the parent applies: each
 * state the parent sees is one the child wrote (data matches events), they
 * come in order, and the last always arrives. */
#define ROUNDS 20000

static void test_concurrent(void)
{
    shunt_pid = getpid();
    struct epoll_obj *p = ep_new();
    epoll_set_journal_create(p);
    struct epoll_obj *w = ep_share(p);
    append(w, PID_A, EPOLL_CTL_ADD, X.fd, 0, 1, X.t->inode);
    ep_unshare(w);
    apply(p, getpid());
    member(p, &X, 0, 1);

    int go[2];
    CHECK_OK(pipe(go));
    pid_t pid = CHECK_OK(fork());
    if (pid == 0) {
        char c;
        shunt_pid = getpid();
        CHECK(read(go[0], &c, 1), ==, 1);
        for (uint32_t i = 1; i <= ROUNDS; i++) {
            append(p, getpid(), EPOLL_CTL_MOD, X.fd, i, (uint64_t)i * 7 + 1, X.t->inode);
            for (volatile int k = 0; k < 300; k++)   /* about a microsecond: the reader gets to look */
                ;
        }
        _exit(0);
    }
    CHECK(write(go[1], "g", 1), ==, 1);
    CHECK_OK(close(go[0]));
    CHECK_OK(close(go[1]));
    uint32_t seen = 0;
    unsigned looks = 0, changes = 0;
    for (;;) {
        int st;
        pid_t done = waitpid(pid, &st, WNOHANG);
        CHECK(done, !=, -1);
        apply(p, getpid());
        looks++;
        struct ep_entry *e = epoll_set_slot_for_fd(p, X.fd);
        CHECK(e != NULL, ==, 1);
        CHECK(e->data.u64, ==, (uint64_t)e->events * 7 + 1);
        CHECK(e->events, >=, seen);
        if (e->events != seen)
            changes++;
        seen = e->events;
        if (done == pid) {
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, ==, 1);
            break;
        }
    }
    apply(p, getpid());
    member(p, &X, ROUNDS, (uint64_t)ROUNDS * 7 + 1);
    CHECK(p->applied, ==, ROUNDS + 1);
    CHECK(changes, >=, 1);
    printf("concurrent: %u looks, %u changes seen\n", looks, changes);
    ep_delete(p);
}

int main(void)
{
    shunt_pid = getpid();
    fdt_init();
    fake_make(&X, PATH_SHM, 0x5a0001);
    fake_make(&Y, PATH_SHM, 0x5a0002);
    fake_make(&T, PATH_TCP, 0x5a0003);
    int p[2];
    CHECK_OK(pipe(p));
    plain_fd = p[0];
    CHECK(fcntl(987, F_GETFD), ==, -1);

    test_no_journal();
    test_add_mod_del();
    test_ignored();
    test_own_records();
    test_overflow();
    test_fork();
    test_concurrent();
    CHECK(atomic_load(&X.t->epoll_entries), ==, 0);
    CHECK(atomic_load(&X.t->base.refs), ==, 2);
    CHECK(atomic_load(&Y.t->base.refs), ==, 2);
    printf("test_epoll_journal: ok\n");
    PASS();
}
