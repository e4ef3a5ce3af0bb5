/*
 * local_wake.c: waking this process's own threads asleep on a socket when
 * another of its threads changes what they wait for (a shutdown).
 */
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>

#include "base/log.h"
#include "base/real.h"
#include "base/fd_place.h"
#include "core/wait/wait_shared.h"

/*
 * The local wake.  A thread asleep in the kernel for a socket wakes for a
 * doorbell from the peer, but shutdown by another thread of this process
 * must wake it too (the kernel's shutdown wakes every waiter of the
 * socket).  So a kernel sleeper watches, beside its companion, one
 * eventfd of the process (made at the first sleep, close-on-exec, kept
 * above the program's fd limit where there is room, base/fd_place.h, and
 * given up when the program runs out of numbers otherwise).  A
 * sleeper registers (lw_pollers, the socket's local_sleepers) under
 * wait_lock before its last look at the rings; shutdown, having changed
 * the state, writes the eventfd if that socket has a registered sleeper
 * and it is not written already (lw_dirty): every registered sleeper then
 * wakes and looks again.  The eventfd is read empty when the last
 * registered sleeper leaves; until then nobody registers anew (a new
 * sleeper would wake at once, again and again): such a sleeper sleeps
 * without it, a millisecond at a time.  So a wake is never lost and a
 * stale one makes nobody spin.
 */
static int lw_fd = -1;          /* wait_lock */
static unsigned lw_pollers;     /* wait_lock */
static bool lw_dirty;           /* wait_lock */
static bool lw_failed;          /* wait_lock: the last try to make it failed */
static bool lw_sandboxed;       /* wait_lock: a seccomp filter came (wait_local_sandbox): never again */

int wait_local_fd(void)
{
    return __atomic_load_n(&lw_fd, __ATOMIC_RELAXED);
}

static void lw_drain(void)
{
    uint64_t v;
    if (shunt_real.read(lw_fd, &v, sizeof v) < 0 && errno != EAGAIN)
        shunt_log(LOG_DEBUG, "local wake: read: %s", strerror(errno));
    lw_dirty = false;
}

static int make_eventfd(void *arg)
{
    (void)arg;
    return shunt_real.eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

/* Under wait_lock. */
int local_wake_register(struct tcp_sock *t, int *efd)
{
    if (lw_fd < 0) {
        if (lw_sandboxed)
            return LW_NONE;
        int hi = fd_place_make(make_eventfd, NULL, true);
        if (hi < 0) {
            /* No fd left (the program took every number it may, and the
             * hard limit leaves shunt no room above): sleep a millisecond at
             * a time, so that a shutdown by another thread is still seen,
             * and try again at the next sleep. */
            if (!lw_failed)
                shunt_log(LOG_INFO, "local wake: no eventfd (%s): sleeps look again every millisecond",
                          strerror(errno));
            lw_failed = true;
            return LW_BUSY;
        }
        lw_failed = false;
        __atomic_store_n(&lw_fd, hi, __ATOMIC_RELAXED);
    }
    if (lw_dirty && lw_pollers == 0)
        lw_drain();
    if (lw_dirty)
        return LW_BUSY;
    lw_pollers++;
    t->local_sleepers++;
    *efd = lw_fd;
    return LW_ON;
}

/* Under wait_lock. */
void local_wake_unregister(struct tcp_sock *t, int lw)
{
    if (lw != LW_ON)
        return;
    lw_pollers--;
    t->local_sleepers--;
    if (lw_pollers == 0 && lw_dirty)
        lw_drain();
}

void wait_wake_local(struct tcp_sock *t)
{
    crit_lock(&wait_lock);
    if (t->local_sleepers > 0 && !lw_dirty && lw_fd >= 0) {
        uint64_t one = 1;
        if (shunt_real.write(lw_fd, &one, sizeof one) == (ssize_t)sizeof one)
            lw_dirty = true;
    }
    atomic_fetch_add(&t->wait_gen, 1);
    bool others = t->futex_waiters > 0;
    crit_unlock(&wait_lock);
    if (others)
        futex_wake_all(&t->wait_gen);
    futex_wake_end(t);   /* the kernel sleeper, if it sleeps on the end's futex */
}

void wait_local_lost(int efd)
{
    crit_lock(&wait_lock);
    if (lw_fd == efd) {
        /* closed behind libc's back (a raw close system call): a new one at
         * the next sleep, rather than a sleep that never blocks */
        shunt_log(LOG_WARN, "local wake: fd %d was closed under shunt; making another", efd);
        __atomic_store_n(&lw_fd, -1, __ATOMIC_RELAXED);
        lw_dirty = false;
    }
    crit_unlock(&wait_lock);
}

bool wait_relocate_local(int fd)
{
    bool moved = false;
    crit_lock(&wait_lock);
    if (lw_fd >= 0 && lw_fd == fd) {
        /* the same eventfd under another number: a sleeper that watches
         * the old one still sees every wake */
        int hi = fd_place_high(fd);
        if (hi >= 0) {
            __atomic_store_n(&lw_fd, hi, __ATOMIC_RELAXED);
            moved = true;
        }
    }
    crit_unlock(&wait_lock);
    return moved;
}

bool wait_local_yield(void)
{
    bool freed = false;
    crit_lock(&wait_lock);
    if (lw_fd >= 0 && lw_pollers == 0 && !fd_place_in_room(lw_fd)) {
        shunt_real.close(lw_fd);
        __atomic_store_n(&lw_fd, -1, __ATOMIC_RELAXED);
        lw_dirty = false;
        freed = true;
    }
    crit_unlock(&wait_lock);
    return freed;
}

/*
 * Before a seccomp filter shunt cannot live with (core/process/sandbox.c):
 * the local wake goes, since shunt will neither write nor read it again.
 * The sockets are on kernel TCP by now, so a sleeper registered on it is
 * woken to look again and sleeps on its socket alone from then on; it is
 * waited for a moment.  The eventfd is closed if nobody watches it any
 * more, and forgotten either way (a sleeper still inside its ppoll keeps
 * its file: the program may close or reuse the number).
 */
void wait_local_sandbox(void)
{
    crit_lock(&wait_lock);
    if (lw_fd >= 0 && lw_pollers > 0 && !lw_dirty) {
        uint64_t one = 1;
        if (shunt_real.write(lw_fd, &one, sizeof one) == (ssize_t)sizeof one)
            lw_dirty = true;
    }
    crit_unlock(&wait_lock);
    for (int i = 0; i < 100; i++) {
        crit_lock(&wait_lock);
        unsigned pollers = lw_pollers;
        crit_unlock(&wait_lock);
        if (pollers == 0)
            break;
        struct timespec ms = { 0, 1000000 };
        nanosleep(&ms, NULL);
    }
    crit_lock(&wait_lock);
    int fd = lw_fd;
    __atomic_store_n(&lw_fd, -1, __ATOMIC_RELAXED);
    lw_sandboxed = true;   /* and no other is made */
    lw_dirty = false;
    if (fd >= 0 && lw_pollers == 0)
        shunt_real.close(fd);
    else if (fd >= 0)
        shunt_log(LOG_WARN, "local wake: fd %d is still watched by a sleeper; left open", fd);
    crit_unlock(&wait_lock);
}

void wait_after_fork_child(void)
{
    /* the parent's threads are not here, and its eventfd is its own */
    lw_pollers = 0;
    lw_dirty = false;
    if (lw_fd >= 0) {
        int e = shunt_real.eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (e < 0 || shunt_real.dup3(e, lw_fd, O_CLOEXEC) < 0) {
            shunt_real.close(lw_fd);
            lw_fd = -1;
        }
        if (e >= 0)
            shunt_real.close(e);
    }
}
