/* eintr_norestart: without SA_RESTART, a signal handled while a call is blocked makes recv
 * (signal from another thread with pthread_kill, or from setitimer), accept and send into a
 * full socket fail with EINTR; the connection keeps working afterwards. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/time.h>

static volatile sig_atomic_t hits;
static atomic_int done;
static pthread_t main_thread;

static void on_signal(int sig)
{
	(void)sig;
	hits++;
}

/* Signals the main thread every 50 ms until done: one of them lands while it is blocked. */
static void *pester(void *arg)
{
	(void)arg;
	while (!atomic_load(&done)) {
		sleep_ms(50);
		if (!atomic_load(&done))
			CHECK(pthread_kill(main_thread, SIGUSR1), ==, 0);
	}
	return NULL;
}

static void start_pester(pthread_t *th)
{
	atomic_store(&done, 0);
	hits = 0;
	CHECK(pthread_create(th, NULL, pester, NULL), ==, 0);
}

static void stop_pester(pthread_t th)
{
	atomic_store(&done, 1);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(hits, >=, 1);
}

int main(void)
{
	static char big[64 * 1024];
	struct sigaction sa = { .sa_handler = on_signal, .sa_flags = 0 };
	struct itimerval it = { { 0, 100000 }, { 0, 100000 } }, off = { { 0, 0 }, { 0, 0 } };
	char buf[16];
	pthread_t th;
	int c, s, lfd, port, tries;

	main_thread = pthread_self();
	CHECK_OK(sigaction(SIGUSR1, &sa, NULL));
	CHECK_OK(sigaction(SIGALRM, &sa, NULL));
	tcp_pair_checked(AF_INET, &c, &s);

	/* recv, signal from another thread. */
	start_pester(&th);
	CHECK_ERRNO(recv(s, buf, sizeof(buf), 0), EINTR);
	stop_pester(th);

	/* recv, signal from an interval timer (process-directed; only one thread now). */
	hits = 0;
	CHECK_OK(setitimer(ITIMER_REAL, &it, NULL));
	CHECK_ERRNO(recv(s, buf, sizeof(buf), 0), EINTR);
	CHECK_OK(setitimer(ITIMER_REAL, &off, NULL));
	CHECK(hits, >=, 1);

	/* read too. */
	start_pester(&th);
	CHECK_ERRNO(read(s, buf, sizeof(buf)), EINTR);
	stop_pester(th);

	/* The connection is unharmed. */
	xexchange_both(c, s);

	/* accept on an idle listener. */
	lfd = tcp_listen(AF_INET, &port);
	start_pester(&th);
	CHECK_ERRNO(accept(lfd, NULL, NULL), EINTR);
	stop_pester(th);
	CHECK_OK(close(lfd));

	/* send blocked on a full send path: EINTR when it had accepted nothing. */
	start_pester(&th);
	for (tries = 0;; tries++) {
		ssize_t n;

		while (send(c, big, sizeof(big), MSG_DONTWAIT) > 0)
			;
		CHECK(errno, ==, EAGAIN);
		n = send(c, "x", 1, 0);
		if (n == -1) {
			CHECK(errno, ==, EINTR);
			break;
		}
		CHECK(n, ==, 1); /* space opened up meanwhile; fill again */
		if (tries > 1000)
			FAIL("a blocking send into a full socket never blocked");
	}
	stop_pester(th);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
