/* eintr_spin: one signal, handled without SA_RESTART while recv is blocked, makes it fail with
 * EINTR; with SA_RESTART the same recv goes on and returns the data sent later. Under shunt the
 * test runs again with SHUNT_SPIN_US at its maximum, so that the signal lands while the call
 * spins in user space rather than in the kernel (the kernel's call would be interrupted all
 * the same). If the signal is lost, the data sent after a few seconds ends the call and the
 * test fails; under SA_RESTART that data is what the call returns. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static volatile sig_atomic_t hits;
static pthread_t main_thread;
static int writer_fd;
static atomic_int go;
static atomic_int calling;   /* the main thread is about to make its recv */
static int late_ms;

static void on_signal(int sig)
{
	(void)sig;
	hits++;
}

static void *signal_then_data(void *arg)
{
	(void)arg;
	/* a loaded machine may not run the main thread for 50 ms: a signal
	 * before its call interrupts nothing, with or without shunt */
	while (!atomic_load(&calling))
		sleep_ms(1);
	sleep_ms(50);
	CHECK(pthread_kill(main_thread, SIGUSR1), ==, 0);
	for (int i = 0; i < late_ms / 10 && !atomic_load(&go); i++)
		sleep_ms(10);
	xwrite_all(writer_fd, "late", 4);
	return NULL;
}

static void blocked_recv(int a, int sa, int flags, ssize_t expect)
{
	struct sigaction act = { .sa_handler = on_signal, .sa_flags = flags };
	pthread_t th;
	char buf[4];
	ssize_t r;

	CHECK_OK(sigaction(SIGUSR1, &act, NULL));
	hits = 0;
	writer_fd = sa;
	atomic_store(&go, 0);
	atomic_store(&calling, 0);
	late_ms = expect < 0 ? 3000 : 300;
	CHECK(pthread_create(&th, NULL, signal_then_data, NULL), ==, 0);
	atomic_store(&calling, 1);
	r = recv(a, buf, sizeof(buf), 0);
	if (expect < 0) {
		CHECK(r, ==, -1);
		CHECK(errno, ==, EINTR);
		CHECK(hits, ==, 1);
		atomic_store(&go, 1);
		xread_exact(a, buf, 4);   /* the late data is not lost */
	} else {
		CHECK(r, ==, expect);
		CHECK(hits, ==, 1);
	}
	CHECK(memcmp(buf, "late", 4), ==, 0);
	CHECK(pthread_join(th, NULL), ==, 0);
}

int main(int argc, char **argv)
{
	int a, sa;

	(void)argc;
	if (test_mode() != TEST_MODE_PLAIN && !getenv("SHUNT_SPIN_US")) {
		setenv("SHUNT_SPIN_US", "1000000", 1);
		execv("/proc/self/exe", argv);
		FAIL("exec /proc/self/exe: %s", strerror(errno));
	}
	main_thread = pthread_self();
	tcp_pair_checked(AF_INET, &a, &sa);
	blocked_recv(a, sa, 0, -1);
	blocked_recv(a, sa, SA_RESTART, 4);
	xexchange_both(a, sa);
	CHECK_OK(close(a));
	CHECK_OK(close(sa));
	PASS();
}
