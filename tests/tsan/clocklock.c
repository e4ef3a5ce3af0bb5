/*
 * clocklock.c: preloaded in ThreadSanitizer runs only (make test-tsan), between
 * libshunt.so and libtsan: pthread_mutex_clocklock as pthread_mutex_timedlock.
 *
 * The registry takes its lock with pthread_mutex_clocklock (CLOCK_MONOTONIC), and
 * this machine's libtsan (GCC 12) has no interceptor for that call: TSan never saw
 * the lock taken, so it reported every unlock as "unlock of an unlocked mutex" and
 * every access under the lock from two threads as a race. timedlock is
 * intercepted; the deadline is moved to CLOCK_REALTIME at the call, so only a jump
 * of the wall clock during the wait changes it. Robust mutexes answer the same
 * (EOWNERDEAD, ENOTRECOVERABLE). Nothing of shunt's behaviour is tested here: this
 * only lets TSan see a lock it otherwise cannot.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <time.h>

/* TSan's own entry points (libtsan is loaded in every run that preloads this file). */
extern void __tsan_mutex_post_lock(void *addr, unsigned flags, int recursion) __attribute__((weak));

static int timedlock(pthread_mutex_t *m, const struct timespec *rt)
{
	int r = pthread_mutex_timedlock(m, rt);

	/* A robust mutex whose owner died answers EOWNERDEAD with the lock taken, and this
	 * libtsan's timedlock records a lock only on 0: unlocking it then was "unlock of an
	 * unlocked mutex", which halted that process inside the lock, so the next one met
	 * EOWNERDEAD in turn. Told here, as TSan's own pthread_mutex_lock does. */
	if (r == EOWNERDEAD && __tsan_mutex_post_lock)
		__tsan_mutex_post_lock(m, 0, 0);
	return r;
}

int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t clock, const struct timespec *abstime)
{
	struct timespec now, rt;
	long long left_ns;

	if (clock == CLOCK_REALTIME)
		return timedlock(m, abstime);
	if (clock != CLOCK_MONOTONIC || abstime->tv_nsec < 0 || abstime->tv_nsec >= 1000000000L)
		return EINVAL;
	clock_gettime(CLOCK_MONOTONIC, &now);
	left_ns = (long long)(abstime->tv_sec - now.tv_sec) * 1000000000LL + (abstime->tv_nsec - now.tv_nsec);
	if (left_ns < 0)
		left_ns = 0;
	clock_gettime(CLOCK_REALTIME, &rt);
	rt.tv_sec += left_ns / 1000000000LL;
	rt.tv_nsec += left_ns % 1000000000LL;
	if (rt.tv_nsec >= 1000000000L) {
		rt.tv_sec++;
		rt.tv_nsec -= 1000000000L;
	}
	return timedlock(m, &rt);
}
