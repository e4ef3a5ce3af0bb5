/* splice_socket: splice moves stream bytes from a socket into a pipe and from a pipe into a
 * socket, in order and exactly, also between send and recv calls on a connection that has
 * carried bytes both ways already; splice from an empty non-blocking socket is EAGAIN. */
#include "check.h"
#include "net.h"

#define LEN 20000
#define SEED 71
#define SECT 4000

int main(void)
{
	static char buf[LEN];
	int pp[2], c, s;
	ssize_t moved = 0;

	CHECK_OK(pipe(pp));
	tcp_pair_checked(AF_INET, &c, &s);
	/* SPLICE_F_NONBLOCK only concerns the pipe: a blocking socket would block (measured). */
	set_nonblocking(s, 1);
	CHECK_ERRNO(splice(s, NULL, pp[1], NULL, 100, SPLICE_F_NONBLOCK), EAGAIN);
	CHECK_ERRNO(splice(s, NULL, pp[1], NULL, 100, 0), EAGAIN);
	set_nonblocking(s, 0);

	/* socket -> pipe */
	pattern_fill(SEED, 0, buf, LEN);
	xwrite_all(c, buf, LEN);
	while (moved < LEN) {
		ssize_t n = CHECK_OK(splice(s, NULL, pp[1], NULL, (size_t)(LEN - moved), 0));

		CHECK(n, >, 0);
		moved += n;
		/* drain the pipe as we go (its capacity is 64 KiB, enough, but stay general) */
		xread_exact(pp[0], buf + moved - n, (size_t)n);
	}
	CHECK_PATTERN(SEED, 0, buf, LEN);
	CHECK_ERRNO(recv(s, buf, 1, MSG_DONTWAIT), EAGAIN);

	/* pipe -> socket */
	pattern_fill(SEED + 1, 0, buf, LEN);
	xwrite_all(pp[1], buf, LEN);
	for (moved = 0; moved < LEN;) {
		ssize_t n = CHECK_OK(splice(pp[0], NULL, c, NULL, (size_t)(LEN - moved), 0));

		CHECK(n, >, 0);
		moved += n;
	}
	memset(buf, 0, LEN);
	xread_exact(s, buf, LEN);
	CHECK_PATTERN(SEED + 1, 0, buf, LEN);

	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));

	/* a connection that carried bytes both ways first: send, splice in, send; the peer
	 * reads them in that order; then recv, splice out, recv the same way (SECT bytes: what
	 * a connection holds unread is not the point here) */
	tcp_pair_checked(AF_INET, &c, &s);
	xexchange_both(c, s);
	xwrite_all(c, "head", 4);
	pattern_fill(SEED + 2, 0, buf, SECT);
	xwrite_all(pp[1], buf, SECT);
	for (moved = 0; moved < SECT;)
		moved += CHECK_OK(splice(pp[0], NULL, c, NULL, (size_t)(SECT - moved), 0));
	xwrite_all(c, "tail", 4);
	memset(buf, 0, SECT);
	xread_exact(s, buf, 4);
	CHECK(memcmp(buf, "head", 4), ==, 0);
	xread_exact(s, buf, SECT);
	CHECK_PATTERN(SEED + 2, 0, buf, SECT);
	xread_exact(s, buf, 4);
	CHECK(memcmp(buf, "tail", 4), ==, 0);
	pattern_fill(SEED + 3, 0, buf, SECT);
	xwrite_all(s, buf, SECT);
	xread_exact(c, buf, 100);
	CHECK_PATTERN(SEED + 3, 0, buf, 100);
	for (moved = 100; moved < SECT;) {
		ssize_t n = CHECK_OK(splice(c, NULL, pp[1], NULL, (size_t)(SECT - moved), 0));

		CHECK(n, >, 0);
		xread_exact(pp[0], buf + moved, (size_t)n);
		moved += n;
	}
	CHECK_PATTERN(SEED + 3, 0, buf, SECT);
	xexchange_both(c, s);
	CHECK_OK(close(pp[0]));
	CHECK_OK(close(pp[1]));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
