/* short_conns: a process whose connections to one listener keep carrying a request and its
 * answer and nothing more stops paying for channels: once four in a row were short, its next
 * connections to that listener are kernel TCP (reason "short" at the client, "no_offer" at
 * the server), but for samples at growing intervals, kernel TCP as well, whose calls shunt
 * counts; a sample that carries a long exchange accelerates the connections after it again. Every connection, accelerated or not, carries
 * its bytes exactly: the choice never shows in the stream. A connection to another listener
 * is judged apart. */
#include "check.h"
#include "net.h"

#define STREAK 4   /* short connections in a row before TCP (core/conn/short_conns.c) */

struct conn {
	int c, s;
};

static struct conn open_conn(int lfd, int port)
{
	struct conn k;

	k.c = tcp_connect(AF_INET, port);
	k.s = CHECK_OK(accept(lfd, NULL, NULL));
	return k;
}

/* rounds request/response exchanges, then both ends close. */
/* both ends, each check naming the caller's line */
#define expect_both_accelerated(k)            \
	do {                                  \
		expect_accelerated((k).c);    \
		expect_accelerated((k).s);    \
	} while (0)

static void use_and_close(struct conn k, int rounds)
{
	for (int i = 0; i < rounds; i++) {
		xexchange(k.c, k.s, "GET / HTTP/1.0\r\n\r\n");
		xexchange(k.s, k.c, "HTTP/1.0 200 OK\r\n\r\nhello");
	}
	CHECK_OK(close(k.c));
	CHECK_OK(close(k.s));
}

int main(void)
{
	int port, port2;
	int lfd = tcp_listen(AF_INET, &port);
	int lfd2 = tcp_listen(AF_INET, &port2);
	struct conn k;

	/* four short ones: each accelerated, each judged short at its close */
	for (int i = 0; i < STREAK; i++) {
		k = open_conn(lfd, port);
		expect_both_accelerated(k);
		use_and_close(k, 1);
	}
	/* the next two stay on TCP, their bytes intact */
	for (int i = 0; i < 2; i++) {
		k = open_conn(lfd, port);
		expect_fallback(k.c, "short");
		expect_fallback(k.s, "no_offer");
		if (!test_mode_accelerated())
			expect_accelerated(k.c);   /* plain: no libshunt; passthrough: 0 */
		use_and_close(k, 1);
	}
	/* another listener has no history: accelerated */
	k = open_conn(lfd2, port2);
	expect_both_accelerated(k);
	use_and_close(k, 1);
	/* the sample: kernel TCP too (its calls counted), and long this time */
	k = open_conn(lfd, port);
	expect_fallback(k.c, "short");
	expect_fallback(k.s, "no_offer");
	if (!test_mode_accelerated())
		expect_accelerated(k.c);
	use_and_close(k, 20);
	/* it paid: the next ones are accelerated again */
	for (int i = 0; i < 2; i++) {
		k = open_conn(lfd, port);
		expect_both_accelerated(k);
		use_and_close(k, 1);
	}
	CHECK_OK(close(lfd));
	CHECK_OK(close(lfd2));
	PASS();
}
