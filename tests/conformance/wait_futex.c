/* wait_futex: blocking recv and send between two processes, each alone holding its end, woken
 * as the kernel wakes them: by the peer's bytes (after short and long sleeps), by the reader
 * freeing space (a blocked send), by a signal (EINTR), by SO_RCVTIMEO shorter and longer than
 * shunt's first sleep, and by the peer's death while the reader sleeps; and a poll() of the
 * one socket, woken by the peer's bytes, its timeout, or a signal.
 * Accelerated: a blocking call of an end held by one process first sleeps on a futex in the
 * segment, woken by the peer with a futex call, not a doorbell byte (core/wait/sleep.c); so the
 * sender rings no doorbell for a reader that slept a few milliseconds (before the futex it
 * rang one for each; a poll() of one socket sleeps there too), and a sleep longer than the futex's 20 ms moves on to the companion,
 * whose doorbell still wakes it. */
#include "check.h"
#include "net.h"

#include <poll.h>
#include <signal.h>
#include <sys/time.h>
#include <sys/wait.h>

#define SHORT_SLEEPS 20
#define POLL_SLEEPS 10
#define LONG_SLEEPS 3

static void on_alarm(int sig)
{
	(void)sig;
}

static void sender(int s, int ctl)
{
	char b = 'x', go;
	int i;

	alarm(30);
	/* each end held by one process from here on: our copy of the other is closed */
	CHECK(write(ctl, "r", 1), ==, 1);
	long long bells0 = shunt_counter(s, "doorbells");
	/* 1: short sleeps of the reader: 3 ms each, well past its spin */
	for (i = 0; i < SHORT_SLEEPS; i++) {
		sleep_ms(3);
		CHECK(send(s, &b, 1, 0), ==, 1);
	}
	/* 1b: the same, the reader waiting in poll() */
	for (i = 0; i < POLL_SLEEPS; i++) {
		sleep_ms(3);
		CHECK(send(s, &b, 1, 0), ==, 1);
	}
	/* 2: long sleeps: 60 ms each, past the futex's 20 ms */
	for (i = 0; i < LONG_SLEEPS; i++) {
		sleep_ms(60);
		CHECK(send(s, &b, 1, 0), ==, 1);
	}
	/* the doorbells this end rang, for the parent to judge */
	long long bells = shunt_counter(s, "doorbells") - bells0;
	CHECK(write(ctl, &bells, sizeof bells), ==, (ssize_t)sizeof bells);
	/* 3: the parent fills our receive side and blocks in send: we free space after 5 ms */
	CHECK(read(ctl, &go, 1), ==, 1);
	sleep_ms(5);
	static char sink[1 << 16];
	size_t got = 0;
	ssize_t r;
	while ((r = recv(s, sink, sizeof sink, MSG_DONTWAIT)) > 0)
		got += (size_t)r;
	CHECK(got, >, 0);
	CHECK(write(ctl, &got, sizeof got), ==, (ssize_t)sizeof got);
	/* 4: the parent blocks in recv; we die 5 ms into its sleep */
	CHECK(read(ctl, &go, 1), ==, 1);
	sleep_ms(5);
	raise(SIGKILL);
}

int main(void)
{
	int c, s, ctl[2];
	char b;
	int i;

	alarm(60);
	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, ctl));
	pid_t pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(c));
		CHECK_OK(close(ctl[0]));
		sender(s, ctl[1]);
		_exit(0);
	}
	CHECK_OK(close(s));
	CHECK_OK(close(ctl[1]));
	CHECK(read(ctl[0], &b, 1), ==, 1);

	long long sleeps0 = shunt_counter(c, "sleeps");
	for (i = 0; i < SHORT_SLEEPS + POLL_SLEEPS + LONG_SLEEPS; i++) {
		if (i >= SHORT_SLEEPS && i < SHORT_SLEEPS + POLL_SLEEPS) {
			struct pollfd p = { .fd = c, .events = POLLIN };
			CHECK(poll(&p, 1, -1), ==, 1);
			CHECK(p.revents, ==, POLLIN);
		}
		CHECK(recv(c, &b, 1, 0), ==, 1);
		CHECK(b, ==, 'x');
	}
	long long bells;
	CHECK(read(ctl[0], &bells, sizeof bells), ==, (ssize_t)sizeof bells);
	if (test_mode_accelerated()) {
		/* it slept for each byte it waited for in recv (a spin is 50 us at most) */
		CHECK(shunt_counter(c, "sleeps") - sleeps0, >=, SHORT_SLEEPS + LONG_SLEEPS);
		/* a doorbell only for a sleep that moved on to the companion */
		CHECK(bells, <=, LONG_SLEEPS);
	}

	/* SO_RCVTIMEO shorter than the futex's sleep, then longer */
	struct timeval tv = { 0, 8000 };
	CHECK_OK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
	double t0 = now_sec();
	CHECK(recv(c, &b, 1, 0), ==, -1);
	CHECK(errno == EAGAIN || errno == EWOULDBLOCK, ==, 1);
	CHECK(now_sec() - t0, >=, 0.007);
	tv.tv_usec = 50000;
	CHECK_OK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));
	t0 = now_sec();
	CHECK(recv(c, &b, 1, 0), ==, -1);
	CHECK(errno == EAGAIN || errno == EWOULDBLOCK, ==, 1);
	CHECK(now_sec() - t0, >=, 0.049);
	tv.tv_usec = 0;
	CHECK_OK(setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv));

	/* poll() with a timeout shorter than the futex's sleep: 0 when it runs out */
	struct pollfd p = { .fd = c, .events = POLLIN };
	t0 = now_sec();
	CHECK(poll(&p, 1, 10), ==, 0);
	CHECK(now_sec() - t0, >=, 0.009);

	/* a signal without SA_RESTART 5 ms into the sleep: EINTR, in recv and in poll */
	struct sigaction sa = { .sa_handler = on_alarm };
	CHECK_OK(sigaction(SIGALRM, &sa, NULL));
	struct itimerval it = { .it_value = { 0, 5000 } };
	CHECK_OK(setitimer(ITIMER_REAL, &it, NULL));
	CHECK(recv(c, &b, 1, 0), ==, -1);
	CHECK(errno, ==, EINTR);
	CHECK_OK(setitimer(ITIMER_REAL, &it, NULL));
	CHECK(poll(&p, 1, -1), ==, -1);
	CHECK(errno, ==, EINTR);
	signal(SIGALRM, SIG_DFL);
	alarm(60);

	/* a send blocked on a full peer is woken when the peer reads */
	set_nonblocking(c, 1);
	static char fill[1 << 16];
	while (send(c, fill, sizeof fill, 0) > 0)
		;
	CHECK(errno == EAGAIN || errno == EWOULDBLOCK, ==, 1);
	set_nonblocking(c, 0);
	CHECK(write(ctl[0], "g", 1), ==, 1);
	CHECK(send(c, fill, 1, 0), ==, 1);
	size_t got;
	CHECK(read(ctl[0], &got, sizeof got), ==, (ssize_t)sizeof got);

	/* the peer killed while we sleep in recv: the call ends (EOF or a reset), as with the
	 * kernel, soon after */
	CHECK(write(ctl[0], "g", 1), ==, 1);
	char buf[4096];
	ssize_t r;
	t0 = now_sec();
	while ((r = recv(c, buf, sizeof buf, 0)) > 0)
		;
	CHECK(r == 0 || errno == ECONNRESET, ==, 1);
	CHECK(now_sec() - t0, <, 5.0);
	int status;
	CHECK(waitpid(pid, &status, 0), ==, pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, ==, 1);
	CHECK_OK(close(c));
	puts("ok");
	return 0;
}
