/* exec_downgrade_prefix: the server end of an accelerated connection is exec'd into a program
 * without shunt while the bytes the client sent before the accept (sent over TCP) and bytes sent
 * after it (through shared memory) are still unread: the new program reads all of them in the
 * order they were sent, then what the client sends afterwards, and its reply arrives intact. */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <stdlib.h>

#define PREFIX 5000
#define RING 20000
#define BULK 200000
#define TOTAL (PREFIX + RING + BULK)

static char buf[TOTAL];

static int plain_child(int fd)
{
	expect_no_shunt();
	xread_exact(fd, buf, TOTAL);
	CHECK_PATTERN(3, 0, buf, TOTAL);
	xwrite_all(fd, "ok", 2);
	CHECK_OK(close(fd));
	return 0;
}

int main(int argc, char **argv)
{
	char small[4], fdarg[16];
	int lfd, port, c, s;
	pid_t pid;

	if (argc == 3 && strcmp(argv[1], "--plain-child") == 0)
		return plain_child(atoi(argv[2]));

	lfd = tcp_listen(AF_INET, &port);
	c = tcp_connect(AF_INET, port);
	pattern_fill(3, 0, buf, PREFIX);
	xwrite_all(c, buf, PREFIX);
	s = CHECK_OK(accept(lfd, NULL, NULL));
	CHECK_OK(close(lfd));
	expect_accelerated(c);
	expect_accelerated(s);
	pattern_fill(3, PREFIX, buf, RING);
	xwrite_all(c, buf, RING);

	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(c));
		snprintf(fdarg, sizeof(fdarg), "%d", s);
		exec_self_without_shunt((char *[]){ argv[0], "--plain-child", fdarg, NULL });
	}
	CHECK_OK(close(s));
	pattern_fill(3, PREFIX + RING, buf, BULK);
	xwrite_all(c, buf, BULK);
	xread_exact(c, small, 2);
	CHECK(memcmp(small, "ok", 2), ==, 0);
	CHECK(recv(c, small, 1, 0), ==, 0);
	expect_downgraded(c);
	xwait_child_ok(pid);
	CHECK_OK(close(c));
	PASS();
}
