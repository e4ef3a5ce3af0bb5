/* fork_child_close: after fork, a child that closes its copy of a connected socket does not
 * disturb the parent's connection (works both ways, peer sees no EOF); a child that writes
 * on its inherited copy and exits delivers its bytes in order; EOF comes only when the parent
 * closes too. */
#include "check.h"
#include "net.h"

int main(void)
{
	char buf[32];
	pid_t pid;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	xexchange_both(c, s);

	/* Child 1 closes its copy and exits. */
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(c));
		_exit(0);
	}
	xwait_child_ok(pid);
	CHECK_ERRNO(recv(s, buf, 1, MSG_DONTWAIT), EAGAIN);
	expect_accelerated(c);
	xexchange_both(c, s);

	/* Child 2 writes on its copy (and exits without closing it explicitly). */
	xwrite_all(c, "parent-1|", 9);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		expect_accelerated(c);
		xwrite_all(c, "child|", 6);
		_exit(0);
	}
	xwait_child_ok(pid);
	xwrite_all(c, "parent-2", 8);
	xread_exact(s, buf, 23);
	CHECK(memcmp(buf, "parent-1|child|parent-2", 23), ==, 0);
	CHECK_ERRNO(recv(s, buf, 1, MSG_DONTWAIT), EAGAIN);

	/* Child 3 reads what the peer sends, on its copy. */
	pid = CHECK_OK(fork());
	if (pid == 0) {
		char in[8];

		xread_exact(c, in, 7);
		CHECK(memcmp(in, "to-kid!", 7), ==, 0);
		xwrite_all(c, "got it", 6);
		_exit(0);
	}
	xwrite_all(s, "to-kid!", 7);
	xread_exact(s, buf, 6);
	CHECK(memcmp(buf, "got it", 6), ==, 0);
	xwait_child_ok(pid);
	xexchange_both(c, s);

	CHECK_OK(close(c));
	CHECK(recv(s, buf, 1, 0), ==, 0);
	CHECK_OK(close(s));
	PASS();
}
