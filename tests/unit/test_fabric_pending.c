/*
 * test_fabric_pending.c: who of a family of processes sends a pending
 * server's hello (src/core/conn/fabric_pending.c): the only live holder
 * claims at once; a holder beside a live other waits for it to close
 * (then claims) or, past the bound, nobody ever does; a dead or zombie
 * holder does not count; a fork under way holds every claim back; "none"
 * sticks for every holder; a page full of live holders has no slot (the
 * caller says hello at once), and takes back the slots of dead ones.
 * The client's bytes the holders read before the hello add up across them.  Processes are real forks sharing the page, as a server's are.
 */
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "base/clock.h"
#include "base/self.h"
#include "core/conn/fabric_pending.h"

static uint64_t next_key = 1000;

static struct fabric_pending opened(void)
{
    struct fabric_pending p;
    CHECK(fabric_pending_open(&p, ++next_key), ==, 1);
    return p;
}

static void pause_ms(long ms)
{
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&t, NULL);
}

/* A child that holds p as a forked server's child does: it becomes a
 * holder, then runs body; the parent registers it too. */
static pid_t fork_holder(const struct fabric_pending *p, int (*body)(const struct fabric_pending *))
{
    fabric_pending_before_fork(p);
    pid_t pid = CHECK_OK(fork());
    if (pid == 0) {
        shunt_pid = getpid();
        fabric_pending_after_fork(p, 0);
        _exit(body(p));
    }
    fabric_pending_after_fork(p, pid);
    return pid;
}

static int exit_status(pid_t pid)
{
    int st;
    CHECK(waitpid(pid, &st, 0), ==, pid);
    CHECK(WIFEXITED(st), ==, 1);
    return WEXITSTATUS(st);
}

static int hold_long(const struct fabric_pending *p)
{
    (void)p;
    pause_ms(3000);   /* killed before this ends */
    return 0;
}

static int claim_once_parent_left(const struct fabric_pending *p)
{
    fabric_pending_count_read(p, 5);   /* the child read 5 of the client's bytes before */
    if (!fabric_pending_claim(p))
        return 3;
    return fabric_pending_read(p) == 7 + 5 ? 0 : 5;   /* and its parent 7: the stream starts at 12 */
}

static int leave_now(const struct fabric_pending *p)
{
    (void)p;
    return 0;
}

static int filled[2];   /* the child says the page is full */

static int fill_the_page(const struct fabric_pending *p)
{
    (void)p;
    struct fabric_pending q;
    int n = 0;
    while (fabric_pending_open(&q, 500000 + (uint64_t)n))
        n++;
    if (write(filled[1], "f", 1) != 1 || n == 0)
        return 4;
    pause_ms(3000);   /* killed, holding them all */
    return 0;
}

static void alone_claims(void)
{
    struct fabric_pending p = opened();
    uint64_t t0 = clock_now_ns();
    CHECK(fabric_pending_claim(&p), ==, 1);
    CHECK(fabric_pending_claim(&p), ==, 1);   /* another thread of the claimer: its claim too */
    CHECK(clock_now_ns() - t0, <, 50ull * 1000 * 1000);
    fabric_pending_drop(&p);
    CHECK(fabric_pending_claim(&p), ==, 0);   /* its slot is free: nothing to claim */
    struct fabric_pending again = opened();
    CHECK(again.slot, ==, p.slot);            /* the freed slot is taken first */
    fabric_pending_drop(&again);
}

static void live_other_holder(void)
{
    struct fabric_pending p = opened();
    pid_t child = fork_holder(&p, hold_long);
    uint64_t t0 = clock_now_ns();
    CHECK(fabric_pending_claim(&p), ==, 0);   /* the child holds it all along */
    CHECK(clock_now_ns() - t0, >=, FABRIC_PENDING_WAIT_NS - 5ull * 1000 * 1000);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    CHECK(fabric_pending_claim(&p), ==, 0);   /* decided: nobody, even alone now */
    fabric_pending_drop(&p);
}

static void parent_closes_soon(void)
{
    struct fabric_pending p = opened();
    fabric_pending_count_read(&p, 7);
    pid_t child = fork_holder(&p, claim_once_parent_left);
    pause_ms(20);
    fabric_pending_drop(&p);   /* the forking server's parent closes its copy */
    CHECK(exit_status(child), ==, 0);
}

static void dead_holders_do_not_count(void)
{
    struct fabric_pending p = opened();
    pid_t child = fork_holder(&p, leave_now);
    pause_ms(30);   /* a zombie now, not waited for */
    CHECK(fabric_pending_claim(&p), ==, 1);
    CHECK(exit_status(child), ==, 0);
    fabric_pending_drop(&p);
}

static void *fork_done_later(void *arg)
{
    pause_ms(30);
    fabric_pending_after_fork(arg, -1);   /* the fork failed */
    return NULL;
}

static void fork_under_way(void)
{
    struct fabric_pending p = opened();
    fabric_pending_before_fork(&p);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, fork_done_later, &p), ==, 0);
    uint64_t t0 = clock_now_ns();
    CHECK(fabric_pending_claim(&p), ==, 1);
    CHECK(clock_now_ns() - t0, >=, 25ull * 1000 * 1000);   /* not before the fork was done */
    pthread_join(th, NULL);
    fabric_pending_drop(&p);
}

static void none_sticks(void)
{
    struct fabric_pending p = opened();
    fabric_pending_none(&p);
    CHECK(fabric_pending_claim(&p), ==, 0);
    fabric_pending_drop(&p);
}

static void full_page(void)
{
    struct fabric_pending p = opened();
    CHECK_OK(pipe(filled));
    pid_t child = fork_holder(&p, fill_the_page);
    char f;
    CHECK(read(filled[0], &f, 1), ==, 1);
    struct fabric_pending q;
    CHECK(fabric_pending_open(&q, ++next_key), ==, 0);   /* full of live holders: none */
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    CHECK(fabric_pending_open(&q, ++next_key), ==, 1);   /* a dead process's slots are taken back */
    fabric_pending_drop(&q);
    fabric_pending_drop(&p);
}

int main(void)
{
    shunt_pid = getpid();
    alone_claims();
    live_other_holder();
    parent_closes_soon();
    dead_holders_do_not_count();
    fork_under_way();
    none_sticks();
    full_page();
    printf("ok\n");
    return 0;
}
