/* epoll_pwait_sigmask: epoll_pwait's mask replaces the thread's mask only during the wait, on
 * a set of idle accelerated sockets: a signal blocked normally but unblocked by the mask and
 * sent while the wait sleeps ends it with EINTR after its handler ran; a signal the mask
 * blocks is not delivered during the wait (the wait ends by its timeout or by data, not with
 * EINTR) and stays pending while the thread's own mask blocks it. */
#include "check.h"
#include "net.h"
#include "usr1.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>

#define PAIRS 4

static int client;

/* 100 ms from now (the wait surely sleeps), signal the main thread; optionally send data
 * 100 ms after that. */
static void *signal_then_send(void *arg)
{
	sleep_ms(100);
	CHECK(pthread_kill(waiter, SIGUSR1), ==, 0);
	if (arg != NULL) {
		sleep_ms(100);
		xwrite_all(client, "d", 1);
	}
	return NULL;
}

static void set_blocked(int how)
{
	sigset_t m;

	sigemptyset(&m);
	sigaddset(&m, SIGUSR1);
	CHECK(pthread_sigmask(how, &m, NULL), ==, 0);
}

int main(void)
{
	struct sigaction sa;
	struct epoll_event ev = { .events = EPOLLIN }, out[PAIRS];
	sigset_t open_mask, usr1_mask;
	pthread_t th;
	char b;
	int c[PAIRS], s[PAIRS], ep;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr1;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; /* no SA_RESTART (epoll never restarts anyway) */
	CHECK_OK(sigaction(SIGUSR1, &sa, NULL));
	waiter = pthread_self();

	ep = CHECK_OK(epoll_create1(0));
	for (int i = 0; i < PAIRS; i++) {
		tcp_pair_checked(AF_INET, &c[i], &s[i]);
		ev.data.u32 = (uint32_t)i;
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s[i], &ev));
	}
	client = c[PAIRS - 1];
	sigemptyset(&open_mask);
	sigemptyset(&usr1_mask);
	sigaddset(&usr1_mask, SIGUSR1);

	/* Blocked normally, unblocked during the wait: EINTR, the handler ran. */
	set_blocked(SIG_BLOCK);
	CHECK(pthread_create(&th, NULL, signal_then_send, NULL), ==, 0);
	CHECK_ERRNO(epoll_pwait(ep, out, PAIRS, NET_WAIT_MS, &open_mask), EINTR);
	CHECK(handled, ==, 1);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(usr1_pending(), ==, 0);
	/* The thread's mask is back: a signal now stays pending. */
	CHECK(pthread_kill(waiter, SIGUSR1), ==, 0);
	CHECK(handled, ==, 1);
	CHECK(usr1_pending(), ==, 1);
	/* ...until a wait unblocks it, which then fails with EINTR at once. */
	CHECK_ERRNO(epoll_pwait(ep, out, PAIRS, NET_WAIT_MS, &open_mask), EINTR);
	CHECK(handled, ==, 2);

	/* Blocked normally and by the mask: the wait ends by its timeout. */
	CHECK(pthread_create(&th, NULL, signal_then_send, NULL), ==, 0);
	CHECK(epoll_pwait(ep, out, PAIRS, 300, &usr1_mask), ==, 0);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(handled, ==, 2);
	CHECK(usr1_pending(), ==, 1);
	set_blocked(SIG_UNBLOCK); /* delivered now */
	CHECK(handled, ==, 3);
	CHECK(usr1_pending(), ==, 0);

	/* Unblocked normally, blocked by the mask: the wait ends by data, not EINTR; the
	 * signal is delivered once the thread's mask is back. */
	CHECK(pthread_create(&th, NULL, signal_then_send, (void *)1), ==, 0);
	CHECK(epoll_pwait(ep, out, PAIRS, NET_WAIT_MS, &usr1_mask), ==, 1);
	CHECK(out[0].data.u32, ==, PAIRS - 1);
	CHECK(out[0].events, ==, EPOLLIN);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(handled, ==, 4);
	xread_exact(s[PAIRS - 1], &b, 1);

	/* A NULL mask is epoll_wait: an unblocked signal interrupts. */
	CHECK(pthread_create(&th, NULL, signal_then_send, NULL), ==, 0);
	CHECK_ERRNO(epoll_pwait(ep, out, PAIRS, NET_WAIT_MS, NULL), EINTR);
	CHECK(handled, ==, 5);
	CHECK(pthread_join(th, NULL), ==, 0);

	CHECK(epoll_pwait(ep, out, PAIRS, 0, &open_mask), ==, 0);
	CHECK_OK(close(ep));
	for (int i = 0; i < PAIRS; i++) {
		CHECK_OK(close(c[i]));
		CHECK_OK(close(s[i]));
	}
	PASS();
}
