/* exec_downgrade: an accelerated socket inherited by a program exec'd WITHOUT shunt (LD_PRELOAD
 * removed) keeps working on kernel TCP: bytes each side had sent but the other not yet read
 * when the exec happened arrive first, then everything sent afterwards, with no byte lost,
 * repeated or added (a doorbell would be an added byte); the end that stays under shunt is on
 * kernel TCP afterwards. Doorbells flow before the exec (replies come after a pause, so the
 * waiting side sleeps). */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <stdlib.h>
#include <sys/ioctl.h>

#define PRE 16384
#define BULK 3000000   /* more than the ring: a send is under way when the exec happens */

static char buf[PRE + BULK];

static int plain_child(int fd)
{
	expect_no_shunt();
	xread_exact(fd, buf, PRE + BULK);
	CHECK_PATTERN(1, 0, buf, PRE + BULK);
	pattern_fill(2, PRE, buf, BULK);
	xwrite_all(fd, buf, BULK);
	CHECK_OK(close(fd));
	return 0;
}

int main(int argc, char **argv)
{
	char small[8], fdarg[16];
	int a, sa, queued = 0;
	pid_t pid;

	if (argc == 3 && strcmp(argv[1], "--plain-child") == 0)
		return plain_child(atoi(argv[2]));

	tcp_pair_checked(AF_INET, &a, &sa);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(sa));
		for (int i = 0; i < 3; i++) {
			xread_exact(a, small, 4);
			sleep_ms(20);
			xwrite_all(a, "pong", 4);
		}
		pattern_fill(2, 0, buf, PRE);
		xwrite_all(a, buf, PRE);
		/* the parent's PRE bytes (and maybe more) are in, unread, when the exec happens */
		for (int i = 0; i < 500 && queued < PRE; i++) {
			CHECK_OK(ioctl(a, FIONREAD, &queued));
			if (queued < PRE)
				sleep_ms(10);
		}
		CHECK(queued, >=, PRE);
		snprintf(fdarg, sizeof(fdarg), "%d", a);
		exec_self_without_shunt((char *[]){ argv[0], "--plain-child", fdarg, NULL });
	}
	CHECK_OK(close(a));
	for (int i = 0; i < 3; i++) {
		sleep_ms(20);
		xwrite_all(sa, "ping", 4);
		xread_exact(sa, small, 4);
		CHECK(memcmp(small, "pong", 4), ==, 0);
	}
	pattern_fill(1, 0, buf, PRE);
	xwrite_all(sa, buf, PRE);
	xread_exact(sa, buf, PRE);
	CHECK_PATTERN(2, 0, buf, PRE);
	pattern_fill(1, PRE, buf, BULK);
	xwrite_all(sa, buf, BULK);
	xread_exact(sa, buf, BULK);
	CHECK_PATTERN(2, PRE, buf, BULK);
	CHECK(recv(sa, small, 1, 0), ==, 0);
	expect_downgraded(sa);
	xwait_child_ok(pid);
	CHECK_OK(close(sa));
	PASS();
}
