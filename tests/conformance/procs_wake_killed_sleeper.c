/* procs_wake_killed_sleeper: a process holding a socket is killed while it sleeps in recv on
 * it; another holder then sleeps in recv on the same socket, is woken by a shutdown(SHUT_WR)
 * of a third holder (which does not end a recv), and sleeps on: as with Linux, its recv stays
 * asleep until data comes, a few context switches in all, not woken again and again.
 * Accelerated: the sleepers of one end in several processes share a wake (shunt's wake across
 * processes), which a holder killed while asleep must not leave busy; a busy wake makes the
 * others' sleeps end every millisecond. */
#include "check.h"
#include "net.h"

#include <sys/resource.h>
#include <sys/wait.h>

static long switches(void)
{
	struct rusage ru;

	CHECK_OK(getrusage(RUSAGE_SELF, &ru));
	return ru.ru_nvcsw + ru.ru_nivcsw;
}

int main(void)
{
	int c, s, status;
	pid_t killed, sleeper;
	char b = 0;

	alarm(60);
	tcp_pair_checked(AF_INET, &c, &s);

	killed = CHECK_OK(fork());
	if (killed == 0) {
		alarm(20);
		recv(c, &b, 1, 0);   /* killed while asleep here */
		_exit(1);
	}
	sleep_ms(300);
	CHECK(waitpid(killed, &status, WNOHANG), ==, 0);   /* it really sleeps */
	CHECK_OK(kill(killed, SIGKILL));
	CHECK(waitpid(killed, &status, 0), ==, killed);

	sleeper = CHECK_OK(fork());
	if (sleeper == 0) {
		long before;

		alarm(20);
		before = switches();
		CHECK(recv(c, &b, 1, 0), ==, 1);
		CHECK(b, ==, 'x');
		/* about 1 with Linux; a sleep ended every millisecond for the 400 ms makes
		 * hundreds */
		CHECK(switches() - before, <, 40);
		_exit(0);
	}
	sleep_ms(300);
	CHECK(waitpid(sleeper, &status, WNOHANG), ==, 0);
	CHECK_OK(shutdown(c, SHUT_WR));   /* wakes the sleeper, which sleeps again */
	sleep_ms(400);
	CHECK(waitpid(sleeper, &status, WNOHANG), ==, 0);
	CHECK(send(s, "x", 1, 0), ==, 1);
	CHECK(waitpid(sleeper, &status, 0), ==, sleeper);
	CHECK(WIFEXITED(status), ==, 1);
	CHECK(WEXITSTATUS(status), ==, 0);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
