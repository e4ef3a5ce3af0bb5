/* eintr_first_sleep: a signal handled without SA_RESTART while recv is blocked makes it fail
 * with EINTR, whenever in the call it lands: the test runs the call in fresh processes, the
 * signal sent 10 to 50 ms into it, one delay each. Under shunt a blocking call's first sleep
 * is on a futex for 20 ms, then it moves to the companion socket, and a process's first move
 * there sets up its local wake (an eventfd moved near the fd limit: some milliseconds with a
 * large limit). A signal that landed inside that set-up was deferred past it (shunt's
 * critical section), its handler ran just before the companion sleep, and the sleep, which
 * counted handlers from its own start rather than the call's, slept on until the socket's
 * timeout: in most processes with one of these delays. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#define TRIES 9
#define TIMEOUT_S 3
#define LOST 40   /* a child's exit status: the signal did not end its recv */

static volatile sig_atomic_t hits;
static pthread_t main_thread;
static atomic_int calling;
static int delay_ms;

static void on_signal(int sig)
{
	(void)sig;
	hits++;
}

static void *signal_later(void *arg)
{
	(void)arg;
	while (!atomic_load(&calling))
		sleep_ms(1);
	sleep_ms(delay_ms);
	CHECK(pthread_kill(main_thread, SIGUSR1), ==, 0);
	return NULL;
}

/* One process, one blocked recv, one signal delay_ms into it. */
static int one_try(void)
{
	struct sigaction act = { .sa_handler = on_signal };
	struct timeval tv = { TIMEOUT_S, 0 };
	pthread_t th;
	double t0;
	ssize_t r;
	char b;
	int a, sa;

	alarm(20);
	main_thread = pthread_self();
	tcp_pair_checked(AF_INET, &a, &sa);
	CHECK_OK(sigaction(SIGUSR1, &act, NULL));
	/* a lost signal costs the timeout, not the test's whole time */
	CHECK_OK(setsockopt(a, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	CHECK(pthread_create(&th, NULL, signal_later, NULL), ==, 0);
	t0 = now_sec();
	atomic_store(&calling, 1);
	r = recv(a, &b, 1, 0);
	CHECK(r, ==, -1);
	if (errno != EINTR) {
		fprintf(stderr, "signal %d ms into recv: it ran (%d), but recv failed with %s after %.0f ms\n", delay_ms,
			(int)hits, strerror(errno), (now_sec() - t0) * 1000);
		return LOST;
	}
	CHECK(hits, ==, 1);
	CHECK(pthread_join(th, NULL), ==, 0);
	xexchange_both(a, sa);   /* the connection goes on */
	CHECK_OK(close(a));
	CHECK_OK(close(sa));
	return 0;
}

int main(int argc, char **argv)
{
	int failed = 0;

	if (argc == 2) {
		delay_ms = atoi(argv[1]);
		return one_try();
	}
	alarm(120);
	for (int i = 0; i < TRIES; i++) {
		char arg[16];
		int status;
		pid_t pid;

		snprintf(arg, sizeof(arg), "%d", 10 + 5 * i);
		pid = CHECK_OK(fork());
		if (pid == 0) {
			execl("/proc/self/exe", argv[0], arg, (char *)NULL);
			_exit(127);
		}
		CHECK(waitpid(pid, &status, 0), ==, pid);
		CHECK(WIFEXITED(status), ==, 1);
		CHECK(WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == LOST, ==, 1);
		failed += WEXITSTATUS(status) == LOST;
	}
	CHECK(failed, ==, 0);
	PASS();
}
