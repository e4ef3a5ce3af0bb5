/*
 * usr1.h: SIGUSR1 for the tests of interrupted waits.  A handler that
 * counts; threads that, 100 ms from now (when the wait surely sleeps),
 * signal the waiting thread or write a byte to late_fd; whether SIGUSR1 is
 * pending.  The test sets waiter (and late_fd) before starting them.
 */
#ifndef SHUNT_TESTS_USR1_H
#define SHUNT_TESTS_USR1_H

#include <pthread.h>
#include <signal.h>

#include "check.h"
#include "net.h"

static volatile sig_atomic_t handled;
static pthread_t waiter;
static int late_fd __attribute__((unused));

static inline void on_usr1(int sig)
{
	(void)sig;
	handled++;
}

static inline void *signal_later(void *arg)
{
	(void)arg;
	sleep_ms(100);
	CHECK(pthread_kill(waiter, SIGUSR1), ==, 0);
	return NULL;
}

static inline void *write_later(void *arg)
{
	(void)arg;
	sleep_ms(100);
	xwrite_all(late_fd, "w", 1);
	return NULL;
}

static inline int usr1_pending(void)
{
	sigset_t p;

	CHECK_OK(sigpending(&p));
	return sigismember(&p, SIGUSR1);
}

#endif
