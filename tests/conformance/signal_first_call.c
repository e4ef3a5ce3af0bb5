/* signal_first_call: a signal handler that calls recv while its thread is inside its very first
 * data call (recv) still runs and returns, as it does without shunt.
 *
 * shunt lists a thread's call mark at the thread's first data call (call_marks.c), once per
 * process through pthread_once. A handler that ran inside that pthread_once and made a data call
 * of its own waited for the once that its own thread was running: the process hung for ever.
 * eof_after_last_bytes hit it now and then (its SIGALRM handler sends while main's first recv
 * runs). Here each of many forked children (a fresh process, whose first data call comes after
 * the fork) arms a timer of a few random microseconds and calls recv(MSG_DONTWAIT) on an
 * accelerated connection; the handler does the same. Every child must exit within a bound. The
 * parent makes no data call of its own, so that every child's first call is the first of its
 * process. Bounded: at most CHILDREN children or SECONDS seconds. */
#include "check.h"
#include "net.h"

#include <sys/time.h>
#include <sys/wait.h>

#define CHILDREN 4000
#define SECONDS 5.0
#define CHILD_BOUND_SEC 3.0

static int sock = -1;
static volatile sig_atomic_t handled;

static void on_alarm(int sig)
{
	(void)sig;
	int saved = errno;
	char b;
	recv(sock, &b, 1, MSG_DONTWAIT);   /* EAGAIN: nothing was sent */
	handled = 1;
	errno = saved;
}

static void child(unsigned seed)
{
	struct itimerval it = { { 0, 0 }, { 0, 1 + (long)(seed % 40) } };
	char b;
	CHECK(setitimer(ITIMER_REAL, &it, NULL), ==, 0);
	ssize_t r = recv(sock, &b, 1, MSG_DONTWAIT);
	CHECK(r, ==, -1);
	CHECK(errno == EAGAIN || errno == EWOULDBLOCK, ==, 1);
	while (!handled)   /* the timer fires within microseconds */
		;
	_exit(0);
}

int main(void)
{
	int c, s;
	tcp_pair_checked(AF_INET, &c, &s);
	sock = c;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	CHECK(sigaction(SIGALRM, &sa, NULL), ==, 0);

	double start = now_sec();
	int n;
	for (n = 0; n < CHILDREN && now_sec() - start < SECONDS; n++) {
		pid_t pid = fork();
		CHECK(pid, >=, 0);
		if (pid == 0)
			child((unsigned)n * 2654435761u);
		double t0 = now_sec();
		int st = 0;
		pid_t w;
		while ((w = waitpid(pid, &st, WNOHANG)) == 0 && now_sec() - t0 < CHILD_BOUND_SEC)
			sleep_ms(0);
		if (w == 0) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			fprintf(stderr, "child %d (pid %d) hung in its first recv with a handler's recv inside it\n",
				n, (int)pid);
			return TEST_EXIT_FAIL;
		}
		CHECK(w, ==, pid);
		CHECK(WIFEXITED(st), ==, 1);
		CHECK(WEXITSTATUS(st), ==, 0);
	}
	printf("signal_first_call: %d children, none hung\n", n);
	close(c);
	close(s);
	return TEST_EXIT_PASS;
}
