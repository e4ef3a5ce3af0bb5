/* shutdown_wr: after shutdown(SHUT_WR) the peer reads all data sent before it, then EOF
 * (repeatedly); we can no longer send (EPIPE) but the peer can still send to us; poll shows
 * POLLRDHUP on the peer's side only. */
#include "check.h"
#include "net.h"

#include <pthread.h>

#define TOTAL (1024 * 1024)
#define SEED 21

static int c;

static void *sender(void *arg)
{
	static char buf[TOTAL];

	(void)arg;
	pattern_fill(SEED, 0, buf, TOTAL);
	xwrite_all(c, buf, TOTAL);
	CHECK_OK(shutdown(c, SHUT_WR));
	return NULL;
}

static short revents(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT | POLLRDHUP };

	CHECK(poll(&p, 1, 0), ==, 1);
	return p.revents;
}

int main(void)
{
	static char buf[TOTAL + 1];
	pthread_t th;
	int s;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK(pthread_create(&th, NULL, sender, NULL), ==, 0);
	CHECK(read_exact(s, buf, TOTAL + 1), ==, TOTAL); /* short: EOF after TOTAL */
	CHECK_PATTERN(SEED, 0, buf, TOTAL);
	CHECK(read(s, buf, 1), ==, 0);
	CHECK(recv(s, buf, 1, 0), ==, 0);
	CHECK(pthread_join(th, NULL), ==, 0);

	CHECK(revents(s), ==, POLLIN | POLLOUT | POLLRDHUP);
	CHECK(revents(c), ==, POLLOUT); /* our own SHUT_WR does not make us readable */
	CHECK_ERRNO(send(c, "x", 1, MSG_NOSIGNAL), EPIPE);

	/* The other direction is still open. */
	xexchange(s, c, "reply after half-close");
	xexchange(s, c, "and another");
	CHECK_ERRNO(recv(c, buf, 1, MSG_DONTWAIT), EAGAIN);

	/* The peer closes too: now we see EOF. */
	CHECK_OK(close(s));
	CHECK(read(c, buf, 1), ==, 0);
	CHECK_OK(close(c));
	PASS();
}
