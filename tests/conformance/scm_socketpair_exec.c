/* scm_socketpair_exec: a socketpair made by the parent, one end kept by a child that then exec's
 * a program without shunt; the parent sends an accelerated socket over the pair. The pair's
 * SO_PEERCRED names the parent at both ends, yet the receiver does not run shunt: the socket
 * moves back to kernel TCP before it leaves, and the receiver reads every byte that was
 * waiting and what follows, and its reply arrives intact. The same with a receiver exec'd under
 * shunt: the socket stays accelerated. And with two holders of the receiving end, one under
 * shunt (which reads) and one without (which only holds it): moved back, since either might
 * read, and every byte arrives at the one that reads. Last, a message sent while the receiver
 * still runs shunt (the socket stays accelerated), then the receiver exec's a program without
 * shunt before reading it: the queued socket moves back at that exec. */
#include "check.h"
#include "scm.h"
#include "handoff.h"
#include "net.h"

#include <stdbool.h>
#include <stdlib.h>

#define PRE 10000
#define BULK 200000

static char buf[PRE + BULK];

enum expect { NO_SHUNT, STAYS, MOVED_BACK, NO_SHUNT_QUEUED };

/* The receiver: tells the parent it runs (after its exec), takes the socket, checks every byte. */
static int receiver(int u, enum expect what, int seed)
{
	int fd;

	if (what == NO_SHUNT || what == NO_SHUNT_QUEUED)
		expect_no_shunt();
	if (what != NO_SHUNT_QUEUED)
		xwrite_all(u, "R", 1);
	fd = recv_fd(u);
	if (what == STAYS)
		expect_accelerated(fd);
	if (what == MOVED_BACK)
		expect_downgraded(fd);
	xread_exact(fd, buf, PRE + BULK);
	CHECK_PATTERN(seed, 0, buf, PRE + BULK);
	pattern_fill(seed + 1, 0, buf, BULK);
	xwrite_all(fd, buf, BULK);
	CHECK_OK(close(fd));
	CHECK_OK(close(u));
	return 0;
}

/* Holds the receiving end without reading it, until the parent closes the pipe p. */
static int bystander(int u, int p)
{
	char c;

	expect_no_shunt();
	xwrite_all(u, "R", 1);
	CHECK(read(p, &c, 1), ==, 0);
	return 0;
}

static pid_t start(char *argv0, const char *role, int u, int seed, int p, bool with_shunt)
{
	char uarg[16], seedarg[16], parg[16];
	char *args[] = { argv0, (char *)role, uarg, seedarg, parg, NULL };
	pid_t pid;

	snprintf(uarg, sizeof(uarg), "%d", u);
	snprintf(seedarg, sizeof(seedarg), "%d", seed);
	snprintf(parg, sizeof(parg), "%d", p);
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		if (with_shunt) {
			execv("/proc/self/exe", args);
			_exit(1);
		}
		exec_self_without_shunt(args);
	}
	return pid;
}

/* Sends one end of a fresh accelerated connection over u once `ready` holders said they run;
 * checks the conversation from the other end, which it returns. */
static int hand_over_and_talk(int u, int ready, int seed)
{
	char small[2];
	int a, sa;

	while (ready-- > 0) {
		xread_exact(u, small, 1);   /* the holders have exec'd */
		CHECK(small[0], ==, 'R');
	}
	tcp_pair_checked(AF_INET, &a, &sa);
	pattern_fill(seed, 0, buf, PRE);
	xwrite_all(sa, buf, PRE);   /* waiting, unread, when the socket is sent */
	send_fd(u, a);
	CHECK_OK(close(a));
	pattern_fill(seed, PRE, buf, BULK);
	xwrite_all(sa, buf, BULK);
	xread_exact(sa, buf, BULK);
	CHECK_PATTERN(seed + 1, 0, buf, BULK);
	CHECK(recv(sa, small, 1, 0), ==, 0);
	return sa;
}

int main(int argc, char **argv)
{
	int sv[2], p[2], sa;
	pid_t pid, by;

	if (argc == 5 && strcmp(argv[1], "--plain-receiver") == 0)
		return receiver(atoi(argv[2]), NO_SHUNT, atoi(argv[3]));
	if (argc == 5 && strcmp(argv[1], "--shunt-receiver") == 0)
		return receiver(atoi(argv[2]), STAYS, atoi(argv[3]));
	if (argc == 5 && strcmp(argv[1], "--shunt-receiver-moved") == 0)
		return receiver(atoi(argv[2]), MOVED_BACK, atoi(argv[3]));
	if (argc == 5 && strcmp(argv[1], "--plain-queued") == 0)
		return receiver(atoi(argv[2]), NO_SHUNT_QUEUED, atoi(argv[3]));
	if (argc == 5 && strcmp(argv[1], "--bystander") == 0)
		return bystander(atoi(argv[2]), atoi(argv[4]));

	/* a receiver without shunt behind a socketpair the parent made */
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	CHECK_OK(fcntl(sv[0], F_SETFD, FD_CLOEXEC));
	pid = start(argv[0], "--plain-receiver", sv[1], 11, -1, false);
	CHECK_OK(close(sv[1]));
	sa = hand_over_and_talk(sv[0], 1, 11);
	expect_downgraded(sa);
	xwait_child_ok(pid);
	CHECK_OK(close(sa));
	CHECK_OK(close(sv[0]));

	/* the same with a receiver under shunt: stays accelerated */
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	CHECK_OK(fcntl(sv[0], F_SETFD, FD_CLOEXEC));
	pid = start(argv[0], "--shunt-receiver", sv[1], 13, -1, true);
	CHECK_OK(close(sv[1]));
	sa = hand_over_and_talk(sv[0], 1, 13);
	expect_accelerated(sa);
	xwait_child_ok(pid);
	CHECK_OK(close(sa));
	CHECK_OK(close(sv[0]));

	/* two holders of the receiving end: one under shunt reads, one without holds it */
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	CHECK_OK(fcntl(sv[0], F_SETFD, FD_CLOEXEC));
	CHECK_OK(pipe(p));
	CHECK_OK(fcntl(p[1], F_SETFD, FD_CLOEXEC));
	by = start(argv[0], "--bystander", sv[1], 0, p[0], false);
	pid = start(argv[0], "--shunt-receiver-moved", sv[1], 15, -1, true);
	CHECK_OK(close(p[0]));
	CHECK_OK(close(sv[1]));
	sa = hand_over_and_talk(sv[0], 2, 15);
	expect_downgraded(sa);
	xwait_child_ok(pid);
	CHECK_OK(close(p[1]));
	xwait_child_ok(by);
	CHECK_OK(close(sa));
	CHECK_OK(close(sv[0]));

	/* sent while the receiver runs shunt, read after it exec'd a program without it */
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv));
	CHECK_OK(fcntl(sv[0], F_SETFD, FD_CLOEXEC));
	CHECK_OK(pipe(p));
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		char c, uarg[16];

		CHECK_OK(close(p[1]));
		CHECK(read(p[0], &c, 1), ==, 0);   /* the socket is queued by now */
		snprintf(uarg, sizeof(uarg), "%d", sv[1]);
		exec_self_without_shunt((char *[]){ argv[0], "--plain-queued", uarg, "17", "-1", NULL });
	}
	CHECK_OK(close(p[0]));
	CHECK_OK(close(sv[1]));
	{
		char small[2];
		int a;

		tcp_pair_checked(AF_INET, &a, &sa);
		pattern_fill(17, 0, buf, PRE);
		xwrite_all(sa, buf, PRE);
		send_fd(sv[0], a);   /* its receiver runs shunt now: stays accelerated */
		expect_accelerated(sa);
		CHECK_OK(close(a));
		CHECK_OK(close(p[1]));   /* now the receiver exec's */
		pattern_fill(17, PRE, buf, BULK);
		xwrite_all(sa, buf, BULK);
		xread_exact(sa, buf, BULK);
		CHECK_PATTERN(18, 0, buf, BULK);
		CHECK(recv(sa, small, 1, 0), ==, 0);
	}
	expect_downgraded(sa);
	xwait_child_ok(pid);
	CHECK_OK(close(sa));
	CHECK_OK(close(sv[0]));
	PASS();
}
