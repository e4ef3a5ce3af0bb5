/* prefix_before_accept: the client sends before the server has accepted
 * (under shunt those bytes travel by TCP, before the channel is claimed),
 * then more after; the server reads every byte once, in order, across that
 * seam, and answers. */
#include "check.h"
#include "net.h"

#define BEFORE 10000
#define AFTER 30000

int main(void)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char buf[AFTER + BEFORE];
	int lfd, port, c, s;

	lfd = CHECK_OK(tcp_listen(AF_INET, &port));
	c = CHECK_OK(tcp_connect(AF_INET, port));
	pattern_fill(5, 0, buf, BEFORE);
	xwrite_all(c, buf, BEFORE);           /* nobody has accepted yet */
	s = CHECK_OK(accept(lfd, (struct sockaddr *)&ss, &len));
	CHECK_OK(close(lfd));
	pattern_fill(5, BEFORE, buf, AFTER);
	xwrite_all(c, buf, AFTER);
	xread_exact(s, buf, BEFORE + AFTER);
	CHECK_PATTERN(5, 0, buf, BEFORE + AFTER);
	xwrite_all(s, "done", 4);
	xread_exact(c, buf, 4);
	CHECK(memcmp(buf, "done", 4), ==, 0);
	expect_accelerated(c);
	expect_accelerated(s);
	CHECK_OK(close(c));
	CHECK(read(s, buf, 1), ==, 0);
	CHECK_OK(close(s));
	PASS();
}
