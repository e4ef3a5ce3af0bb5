/* eof_after_last_bytes: bytes the peer sends just before its FIN are read before the EOF, also
 * when they arrive while the reader is between finding nothing to read and noticing the FIN.
 *
 * Each round: the reader polls an empty socket with recv(MSG_DONTWAIT) while a one-shot timer
 * runs; its SIGALRM handler, on the reader's thread, sends the bytes on the other end and shuts
 * it down (SHUT_WR), then the reader reads until EOF and must have every byte. The handler
 * interrupts the reader at a random point of its recv, sometimes right after that recv found
 * nothing: under shunt a signal that arrives while recv holds its ring lock runs when the lock
 * is released, which is exactly there. Before the fix such a recv saw the FIN and returned 0
 * with the bytes still unread (a forking echo server's client read EOF before the whole echo,
 * test_echo_both_shunted, about once in three CI runs). Bounded: at most ROUNDS rounds or
 * SECONDS seconds. */
#include "check.h"
#include "net.h"
#include "settings.h"

#include <sys/time.h>

#define ROUNDS 3000
#define SECONDS 4.0
#define LEN 700
#define SEED 77

static int peer = -1;                   /* the end the handler sends on */
static volatile sig_atomic_t sent;      /* the handler has sent and shut down this round */
static volatile sig_atomic_t send_err;  /* errno of a failed send or shutdown in the handler */

static void on_alarm(int sig)
{
	static unsigned char buf[LEN];
	int saved = errno;

	(void)sig;
	if (peer >= 0 && !sent) {
		pattern_fill(SEED, 0, buf, LEN);
		if (send(peer, buf, LEN, MSG_NOSIGNAL) != LEN || shutdown(peer, SHUT_WR) != 0)
			send_err = errno ? errno : EIO;
		sent = 1;
	}
	errno = saved;
}

static void arm_timer(long us)
{
	struct itimerval it = { { 0, 0 }, { 0, us } };

	CHECK_OK(setitimer(ITIMER_REAL, &it, NULL));
}

int main(void)
{
	struct sigaction sa;
	unsigned char buf[LEN + 1];
	int port, lfd;
	int rounds = 0;
	double end;

	/* many short connections to one listener, each to be accelerated: without this the
	 * later ones would be kernel TCP by design (short_conns.c) */
	test_setting("SHUNT_SHORT_CONNS", "0");
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	CHECK_OK(sigaction(SIGALRM, &sa, NULL));
	lfd = tcp_listen(AF_INET, &port);
	end = now_sec() + SECONDS;
	while (rounds < ROUNDS && now_sec() < end) {
		int c = tcp_connect(AF_INET, port);
		int s = CHECK_OK(accept(lfd, NULL, NULL));
		size_t got = 0;

		expect_accelerated(c);
		expect_accelerated(s);
		sent = 0;
		peer = c;
		arm_timer(5 + (long)(rounds * 7919 % 150));
		for (;;) {
			ssize_t n = recv(s, buf + got, sizeof(buf) - got, MSG_DONTWAIT);

			if (n > 0) {
				got += (size_t)n;
				continue;
			}
			if (n == 0)
				break;
			if (errno != EAGAIN && errno != EINTR)
				CHECK_OK(n);
		}
		CHECK(send_err, ==, 0);
		if (!sent)
			FAIL("round %d: EOF before the peer sent anything", rounds);
		if (got != LEN)
			FAIL("round %d: EOF after %zu of the %d bytes sent before the FIN", rounds, got,
			     LEN);
		CHECK_PATTERN(SEED, 0, buf, LEN);
		peer = -1;
		CHECK_OK(close(s));
		CHECK_OK(close(c));
		rounds++;
	}
	CHECK_OK(close(lfd));
	CHECK(rounds, >=, 50);
	PASS();
}
