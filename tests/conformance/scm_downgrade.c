/* scm_downgrade: an accelerated socket sent with SCM_RIGHTS to a process that does not run shunt
 * (a program exec'd without LD_PRELOAD, connected over a Unix socket) moves back to kernel TCP
 * before it leaves: the receiver reads the bytes that were waiting for the sender's end, then
 * what follows, and its reply arrives intact, with no byte added (no doorbell); the peer is on
 * kernel TCP afterwards. Sent the same way to a process that runs shunt, a socket stays
 * accelerated (the receiver is known by SO_PEERCRED). */
#include "check.h"
#include "scm.h"
#include "handoff.h"
#include "net.h"

#include <stdlib.h>
#include <stdbool.h>
#include <sys/un.h>

#define PRE 10000
#define BULK 200000

static char buf[PRE + BULK];

static socklen_t unix_addr(struct sockaddr_un *un)
{
	memset(un, 0, sizeof(*un));
	un->sun_family = AF_UNIX;
	snprintf(un->sun_path, sizeof(un->sun_path), "handoff.sock");
	return sizeof(*un);
}

static int receiver(bool with_shunt)
{
	struct sockaddr_un un;
	socklen_t len = unix_addr(&un);
	int u = CHECK_OK(socket(AF_UNIX, SOCK_STREAM, 0));
	int fd;

	CHECK_OK(connect(u, (struct sockaddr *)&un, len));
	fd = recv_fd(u);
	if (with_shunt)
		expect_accelerated(fd);
	else
		expect_no_shunt();
	xread_exact(fd, buf, PRE + BULK);
	CHECK_PATTERN(4, 0, buf, PRE + BULK);
	pattern_fill(5, 0, buf, BULK);
	xwrite_all(fd, buf, BULK);
	CHECK_OK(close(fd));
	CHECK_OK(close(u));
	return 0;
}

/* Hands one end of a fresh accelerated connection to a receiver; returns the other end. */
static int hand_over(char *argv0, bool with_shunt, pid_t *pid)
{
	struct sockaddr_un un;
	socklen_t len = unix_addr(&un);
	int l = CHECK_OK(socket(AF_UNIX, SOCK_STREAM, 0));
	int a, sa, u;

	unlink(un.sun_path);
	CHECK_OK(bind(l, (struct sockaddr *)&un, len));
	CHECK_OK(listen(l, 1));
	fflush(NULL);
	*pid = CHECK_OK(fork());
	if (*pid == 0) {
		char *args[] = { argv0, with_shunt ? "--shunt-receiver" : "--plain-receiver", NULL };

		if (with_shunt) {
			execv("/proc/self/exe", args);
			_exit(1);
		}
		exec_self_without_shunt(args);
	}
	u = CHECK_OK(accept(l, NULL, NULL));
	CHECK_OK(close(l));
	tcp_pair_checked(AF_INET, &a, &sa);   /* after the fork: the receiver gets it only by SCM_RIGHTS */
	pattern_fill(4, 0, buf, PRE);
	xwrite_all(sa, buf, PRE);   /* waiting, unread, when the socket is sent */
	send_fd(u, a);
	CHECK_OK(close(a));
	CHECK_OK(close(u));
	return sa;
}

static void talk(int sa)
{
	char small[2];

	pattern_fill(4, PRE, buf, BULK);
	xwrite_all(sa, buf, BULK);
	xread_exact(sa, buf, BULK);
	CHECK_PATTERN(5, 0, buf, BULK);
	CHECK(recv(sa, small, 1, 0), ==, 0);
}

int main(int argc, char **argv)
{
	pid_t pid;
	int sa;

	if (argc == 2 && strcmp(argv[1], "--plain-receiver") == 0)
		return receiver(false);
	if (argc == 2 && strcmp(argv[1], "--shunt-receiver") == 0)
		return receiver(true);

	sa = hand_over(argv[0], false, &pid);
	talk(sa);
	expect_downgraded(sa);
	xwait_child_ok(pid);
	CHECK_OK(close(sa));

	sa = hand_over(argv[0], true, &pid);
	talk(sa);
	expect_accelerated(sa);
	xwait_child_ok(pid);
	CHECK_OK(close(sa));
	PASS();
}
