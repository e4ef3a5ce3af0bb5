/* procs_downgrade_blocked_send: a process blocked in send on a full buffer goes on as soon
 * as the peer reads, also when another process holding the same socket hands it to a
 * program without shunt meanwhile (the connection moves back to kernel TCP under the blocked
 * send). The peer only reads; it sends nothing that could wake the sender, and it gets
 * every byte, in order, then EOF.
 * Accelerated: the sender sleeps for ring space when the other holder's exec moves the
 * connection back to TCP; no doorbell may follow, so only shunt's wake across processes
 * tells it. */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <stdlib.h>

#define CHUNK (128 * 1024)

static char buf[CHUNK];

static int plain_child(int fd)
{
	expect_no_shunt();
	CHECK_OK(close(fd));
	return 0;
}

int main(int argc, char **argv)
{
	char fdarg[16];
	long long filled, got = 0;
	pid_t sender, leaver;
	ssize_t n;
	int c, s;

	if (argc == 3 && strcmp(argv[1], "--plain-child") == 0)
		return plain_child(atoi(argv[2]));
	alarm(60);
	tcp_pair_checked(AF_INET, &c, &s);
	filled = xfill(c);
	sender = CHECK_OK(fork());
	if (sender == 0) {
		CHECK_OK(close(s));
		memset(buf, 'z', sizeof buf);
		CHECK(send(c, buf, sizeof buf, MSG_NOSIGNAL), ==, CHUNK);
		_exit(0);
	}
	sleep_ms(300);   /* the sender is asleep on the full buffer */
	leaver = CHECK_OK(fork());
	if (leaver == 0) {
		CHECK_OK(close(s));
		snprintf(fdarg, sizeof(fdarg), "%d", c);
		exec_self_without_shunt((char *[]){ argv[0], "--plain-child", fdarg, NULL });
	}
	CHECK_OK(close(c));
	for (;;) {
		CHECK(wait_fd(s, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);   /* not stuck */
		n = CHECK_OK(recv(s, buf, sizeof buf, 0));
		if (n == 0)
			break;
		for (ssize_t i = 0; i < n; i++)
			CHECK(buf[i], ==, got + i < filled ? 0 : 'z');
		got += n;
	}
	CHECK(got, ==, filled + CHUNK);
	xwait_child_ok(sender);
	xwait_child_ok(leaver);
	expect_downgraded(s);
	CHECK_OK(close(s));
	PASS();
}
