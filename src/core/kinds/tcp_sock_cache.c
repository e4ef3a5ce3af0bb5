/*
 * tcp_sock_cache.c: the objects of closed TCP sockets, kept for new ones.
 *
 * Every socket() and accept() of a program under shunt makes an object,
 * also for a connection that stays on kernel TCP, and its close frees it.
 * In a server whose own allocations fragment the heap (nginx's pools) that
 * calloc cost about 500 instructions and the free as many (callgrind of an
 * nginx worker serving a connection per request): a sixth of what
 * libshunt.so added to each request.  A small stack of freed objects makes
 * it a memset.
 *
 * The stack's lock is only ever tried: a thread that finds it taken (another
 * thread, or a signal handler interrupting this one inside it) goes to the
 * heap instead, so nobody ever waits on it, and a fork that copied it taken
 * leaves the child going to the heap.  Sanitizer builds always use the heap,
 * where their checks of use after free are.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/kinds/tcp_sock_cache.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)

struct tcp_sock *tcp_sock_cache_get(void)
{
    return calloc(1, sizeof(struct tcp_sock));
}

void tcp_sock_cache_put(struct tcp_sock *t)
{
    free(t);
}

#else

#define CACHED 16

static struct tcp_sock *kept[CACHED];
static unsigned nkept;
static atomic_flag busy = ATOMIC_FLAG_INIT;

struct tcp_sock *tcp_sock_cache_get(void)
{
    struct tcp_sock *t = NULL;
    if (!atomic_flag_test_and_set_explicit(&busy, memory_order_acquire)) {
        if (nkept)
            t = kept[--nkept];
        atomic_flag_clear_explicit(&busy, memory_order_release);
    }
    if (!t)
        return calloc(1, sizeof *t);
    memset(t, 0, sizeof *t);
    return t;
}

void tcp_sock_cache_put(struct tcp_sock *t)
{
    if (!atomic_flag_test_and_set_explicit(&busy, memory_order_acquire)) {
        bool room = nkept < CACHED;
        if (room)
            kept[nkept++] = t;
        atomic_flag_clear_explicit(&busy, memory_order_release);
        if (room)
            return;
    }
    free(t);
}

#endif
