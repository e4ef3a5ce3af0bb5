/*
 * test_seg_lock.c: unit tests of the lock of an end's holders in a
 * channel's segment (src/transport/seg_lock.c).
 *
 * Two processes sharing a segment exclude each other (a count incremented
 * non-atomically under the lock comes out exact); a holder killed inside,
 * or left a zombie, gives the lock up to the next taker at once; a live
 * holder that maps the segment is waited for, and no longer than the bound;
 * words that name no possible holder (the taker's own pid, pid 1, a pid
 * beyond the kernel's limit, stray bits, the waiters bit alone) are
 * refused in well under the bound (-EIO; pid 1 -ETIMEDOUT after a second
 * where the kernel hides its maps), never waited for; a give
 * that finds the word scribbled says so and frees it.  The segment is a
 * real channel (channel_create), unlinked at the end.
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "transport/channel.h"
#include "transport/seg_lock.h"

#define SEC 1000000000ull

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * SEC + (uint64_t)ts.tv_nsec;
}

/* Two processes, ROUNDS each, a plain increment under the lock. */
#define ROUNDS 20000

static void test_exclusion(struct channel *ch)
{
    struct seg_lock *l = &ch->hdr->side[0].tx_lock;
    volatile uint64_t *count = (volatile uint64_t *)(void *)&ch->hdr->side[0].bytes_out;
    *count = 0;
    pid_t child = fork();
    CHECK(child, >=, 0);
    for (int i = 0; i < ROUNDS; i++) {
        CHECK(seg_lock_take(l, ch->name, 10 * SEC), ==, 0);
        uint64_t v = *count;
        if ((i & 63) == 0)
            sched_yield();   /* let the other one try while we hold it */
        *count = v + 1;
        CHECK(seg_lock_give(l), ==, 0);
    }
    if (child == 0)
        _exit(0);
    int st;
    CHECK(waitpid(child, &st, 0), ==, child);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, ==, 1);
    CHECK(*count, ==, 2 * ROUNDS);
    CHECK(atomic_load(&l->word), ==, 0);
    printf("ok: two processes, %d rounds each, exact\n", ROUNDS);
}

/* A child that takes the lock and then waits for a signal. */
static pid_t holder(struct channel *ch, struct seg_lock *l)
{
    int p[2];
    CHECK(pipe(p), ==, 0);
    pid_t child = fork();
    CHECK(child, >=, 0);
    if (child == 0) {
        close(p[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);   /* a failed check of the parent leaves no holder behind */
        if (seg_lock_take(l, ch->name, SEC) != 0)
            _exit(1);
        char c = 1;
        if (write(p[1], &c, 1) != 1)
            _exit(1);
        pause();
        _exit(0);
    }
    close(p[1]);
    char c;
    CHECK(read(p[0], &c, 1), ==, 1);
    close(p[0]);
    return child;
}

static void test_dead_holders(struct channel *ch)
{
    struct seg_lock *l = &ch->hdr->side[0].rx_lock;
    /* killed inside, and reaped: the pid is gone */
    pid_t child = holder(ch, l);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    uint64_t t0 = now_ns();
    CHECK(seg_lock_take(l, ch->name, 10 * SEC), ==, 0);
    CHECK(now_ns() - t0, <, 2 * SEC);
    CHECK(seg_lock_give(l), ==, 0);
    /* killed inside, not reaped yet: a zombie holds nothing */
    child = holder(ch, l);
    kill(child, SIGKILL);
    siginfo_t si;
    CHECK(waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT), ==, 0);
    t0 = now_ns();
    CHECK(seg_lock_take(l, ch->name, 10 * SEC), ==, 0);
    CHECK(now_ns() - t0, <, 2 * SEC);
    CHECK(seg_lock_give(l), ==, 0);
    waitpid(child, NULL, 0);
    printf("ok: a holder killed inside (gone, or a zombie) leaves the lock\n");
}

static void test_live_holder(struct channel *ch)
{
    struct seg_lock *l = &ch->hdr->side[1].tx_lock;
    pid_t child = holder(ch, l);
    uint64_t t0 = now_ns();
    CHECK(seg_lock_take(l, ch->name, SEC / 4), ==, -ETIMEDOUT);
    uint64_t took = now_ns() - t0;
    CHECK(took, >=, SEC / 4);
    CHECK(took, <, 2 * SEC);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    CHECK(seg_lock_take(l, ch->name, 10 * SEC), ==, 0);
    CHECK(seg_lock_give(l), ==, 0);
    printf("ok: a live holder is waited for, %llu ms of a 250 ms bound\n", (unsigned long long)(took / 1000000));
}

/* The same, taken from a chroot without /proc (vsftpd's sessions hold
 * connections so): the owner's /proc entry is missing there, which is no
 * death.  Before, the taker took the lock from the live holder. */
static void test_live_holder_from_chroot(struct channel *ch)
{
    if (geteuid() != 0) {
        printf("left out: a live holder seen from a chroot (chroot needs root)\n");
        return;
    }
    char root[] = "/tmp/shunt-chroot-XXXXXX";
    CHECK(mkdtemp(root) != NULL, ==, 1);
    struct seg_lock *l = &ch->hdr->side[1].rx_lock;
    pid_t owner = holder(ch, l);
    pid_t taker = fork();
    CHECK(taker, >=, 0);
    if (taker == 0) {
        if (chroot(root) != 0 || chdir("/") != 0)
            _exit(2);
        _exit(seg_lock_take(l, ch->name, SEC / 2) == -ETIMEDOUT ? 0 : 1);
    }
    int st;
    CHECK(waitpid(taker, &st, 0), ==, taker);
    CHECK(WIFEXITED(st) ? WEXITSTATUS(st) : -1, ==, 0);
    CHECK(atomic_load(&l->word) & SEG_LOCK_PID_MASK, ==, (uint32_t)owner);
    kill(owner, SIGKILL);
    waitpid(owner, NULL, 0);
    CHECK(seg_lock_take(l, ch->name, 10 * SEC), ==, 0);
    CHECK(seg_lock_give(l), ==, 0);
    CHECK(rmdir(root), ==, 0);
    printf("ok: a live holder seen from a chroot without /proc is waited for\n");
}

static void test_garbage(struct channel *ch)
{
    struct seg_lock *l = &ch->hdr->side[1].wait_lock;
    const uint32_t self = (uint32_t)getpid();
    const uint32_t words[] = {
        self,                                   /* our own pid: none of our threads holds it */
        self | SEG_LOCK_WAITERS,
        1,                                      /* init: alive, but it does not map the segment */
        1 | SEG_LOCK_WAITERS,
        SEG_LOCK_PID_LIMIT,                     /* beyond the kernel's pids */
        SEG_LOCK_PID_MASK,
        SEG_LOCK_WAITERS,                       /* waiters, no owner */
        0x80000000u | 5,                        /* a stray bit */
        0xffffffffu,
    };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        atomic_store(&l->word, words[i]);
        uint64_t t0 = now_ns();
        int r = seg_lock_take(l, ch->name, 10 * SEC);
        uint64_t took = now_ns() - t0;
        /* pid 1 is refused once the kernel shows its maps (no segment
         * there); where it will not (a sandbox, or we are not root), it is
         * waited for a second, not the bound */
        bool init = (words[i] & SEG_LOCK_PID_MASK) == 1;
        if (r != -EIO && !(init && r == -ETIMEDOUT))
            fprintf(stderr, "word %#x: %d after %llu ms\n", words[i], r, (unsigned long long)(took / 1000000));
        CHECK(r == -EIO || (init && r == -ETIMEDOUT), ==, 1);
        CHECK(took, <, 2 * SEC);   /* well under the bound: a verdict, not a timeout */
        /* a refused take leaves the word alone (but for the waiters bit) */
        CHECK(atomic_load(&l->word) & ~SEG_LOCK_WAITERS, ==, words[i] & ~SEG_LOCK_WAITERS);
    }
    /* a give that finds another pid there: freed, and said so */
    atomic_store(&l->word, 0);
    CHECK(seg_lock_take(l, ch->name, SEC), ==, 0);
    atomic_store(&l->word, 1);
    CHECK(seg_lock_give(l), ==, -EIO);
    CHECK(atomic_load(&l->word), ==, 0);
    printf("ok: %zu garbage words refused at once\n", sizeof words / sizeof words[0]);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct channel ch;
    CHECK(channel_create(&ch, 4096, 0, 0), ==, 0);
    test_exclusion(&ch);
    test_dead_holders(&ch);
    test_live_holder(&ch);
    test_live_holder_from_chroot(&ch);
    test_garbage(&ch);
    channel_unlink(ch.name);
    channel_detach(&ch);
    printf("test_seg_lock: ok\n");
    PASS();
}
