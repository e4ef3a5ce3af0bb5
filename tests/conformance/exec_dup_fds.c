/* exec_dup_fds: two fds of one socket are still one socket after exec and after SCM_RIGHTS.
 * 1. A child puts its end of a connection on fds 5 and 6 (dup2, as a shell's `<&4 >&4` does),
 *    closes the original and exec's itself: the new program reads on fd 5, writes on fd 6,
 *    closes fd 5 and goes on with fd 6 alone. Its peer must see no EOF before fd 6 closes: the
 *    kernel closes a socket with its last fd, and so must shunt's end of the channel (it used to
 *    make an object per fd found after exec, and the first close ended the channel).
 * 2. A process sends one of its own sockets to itself with SCM_RIGHTS, closes the original fd
 *    and goes on with the received one: the connection stays up until that one closes too.
 * Accelerated, the end counts one holding process in both cases. */
#include "check.h"
#include "net.h"
#include "scm.h"

#include <stdlib.h>

static int exec_child(void)
{
	char buf[8];

	expect_accelerated(5);
	expect_accelerated(6);
	xread_exact(5, buf, 4);
	CHECK(memcmp(buf, "ping", 4), ==, 0);
	xwrite_all(6, "pong", 4);
	CHECK_OK(close(5));
	if (test_mode_accelerated())   /* the parent closed its copy: this process alone */
		CHECK(shunt_counter(6, "holders"), ==, 1);
	xread_exact(6, buf, 4);   /* the peer sends this only after "left" */
	CHECK(memcmp(buf, "more", 4), ==, 0);
	xwrite_all(6, "again", 5);
	expect_accelerated(6);
	CHECK_OK(close(6));
	return 0;
}

/* The peer's side of part 1: nothing arrives after "pong" but the child's "again", and only
 * then the EOF. */
static void exec_case(char *argv0)
{
	char buf[8];
	int a, sa;
	pid_t pid;

	tcp_pair_checked(AF_INET, &a, &sa);
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(sa));
		CHECK(dup2(a, 5), ==, 5);
		CHECK(dup2(a, 6), ==, 6);
		CHECK_OK(close(a));
		execl("/proc/self/exe", argv0, "--exec-child", (char *)NULL);
		fprintf(stderr, "exec /proc/self/exe: %s\n", strerror(errno));
		_exit(1);
	}
	CHECK_OK(close(a));
	xwrite_all(sa, "ping", 4);
	xread_exact(sa, buf, 4);
	CHECK(memcmp(buf, "pong", 4), ==, 0);
	/* the child closes fd 5 after "pong": its end must stay open */
	CHECK(wait_fd(sa, POLLIN, 300) & (POLLIN | POLLHUP | POLLRDHUP), ==, 0);
	xwrite_all(sa, "more", 4);
	xread_exact(sa, buf, 5);
	CHECK(memcmp(buf, "again", 5), ==, 0);
	expect_accelerated(sa);
	xwait_child_ok(pid);
	CHECK(recv(sa, buf, 1, 0), ==, 0);
	CHECK_OK(close(sa));
}

static void self_passing_case(void)
{
	char buf[8];
	int a, sa, u[2], r;

	tcp_pair_checked(AF_INET, &a, &sa);
	CHECK_OK(socketpair(AF_UNIX, SOCK_STREAM, 0, u));
	send_fd(u[0], a);
	r = recv_fd(u[1]);
	CHECK(r, !=, a);
	CHECK_OK(close(a));
	if (test_mode_accelerated())   /* one process, one hold, however it got the fd */
		CHECK(shunt_counter(r, "holders"), ==, 1);
	CHECK(wait_fd(sa, POLLIN, 300) & (POLLIN | POLLHUP | POLLRDHUP), ==, 0);
	xexchange_both(r, sa);
	expect_accelerated(r);
	expect_accelerated(sa);
	CHECK_OK(close(r));
	CHECK(recv(sa, buf, 1, 0), ==, 0);
	CHECK_OK(close(sa));
	CHECK_OK(close(u[0]));
	CHECK_OK(close(u[1]));
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "--exec-child") == 0)
		return exec_child();
	alarm(20);
	exec_case(argv[0]);
	self_passing_case();
	PASS();
}
