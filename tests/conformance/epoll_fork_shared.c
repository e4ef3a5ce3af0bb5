/* epoll_fork_shared: an epoll set created before fork is one set shared by both processes:
 * the child sleeps in it and is woken by data the parent's peer sends on an accelerated
 * connection, reads it and answers; then the parent waits in the same set, also while the
 * data arrives, and sees correct events; a registration the child adds (a pipe) is seen by
 * the parent; the child closing its copies does not take the socket out of the set; the
 * child's EPOLL_CTL_DEL and EPOLL_CTL_MOD of the accelerated member change the parent's view. */
#include "check.h"
#include "net.h"

#include <sys/epoll.h>

#define TAG_SOCK 0xabcdef01ULL
#define TAG_PIPE 0x12345678ULL

static int wait1(int ep, uint64_t tag, int timeout_ms)
{
	struct epoll_event out[4];
	int n = CHECK_OK(epoll_wait(ep, out, 4, timeout_ms));

	CHECK(n, <=, 1);
	if (n == 1) {
		CHECK(out[0].data.u64, ==, tag);
		CHECK(out[0].events, ==, EPOLLIN);
	}
	return n;
}

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = TAG_SOCK };
	char buf[8];
	int c, s, ep, pp[2];
	pid_t pid;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(pp));
	ep = CHECK_OK(epoll_create1(0));
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	CHECK(wait1(ep, TAG_SOCK, 0), ==, 0);

	/* The child sleeps in the shared set; the parent sends once it surely sleeps. */
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(c));
		CHECK(wait1(ep, TAG_SOCK, NET_WAIT_MS), ==, 1);
		CHECK(wait1(ep, TAG_SOCK, 0), ==, 1); /* level */
		xread_exact(s, buf, 5);
		CHECK(memcmp(buf, "hello", 5), ==, 0);
		CHECK(wait1(ep, TAG_SOCK, 0), ==, 0);
		xwrite_all(s, "ack", 3);
		/* A registration made here is one of the shared set. */
		ev.events = EPOLLIN;
		ev.data.u64 = TAG_PIPE;
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, pp[0], &ev));
		_exit(0);
	}
	sleep_ms(100);
	xwrite_all(c, "hello", 5);
	CHECK(wait_fd(c, POLLIN, NET_WAIT_MS), ==, POLLIN);
	xread_exact(c, buf, 3);
	CHECK(memcmp(buf, "ack", 3), ==, 0);
	xwait_child_ok(pid);

	/* The parent uses the set now. */
	CHECK(wait1(ep, TAG_SOCK, 0), ==, 0);
	xwrite_all(c, "again", 5);
	CHECK(wait1(ep, TAG_SOCK, NET_WAIT_MS), ==, 1);
	xread_exact(s, buf, 5);
	CHECK(wait1(ep, TAG_SOCK, 0), ==, 0);

	/* The child's pipe registration. */
	xwrite_all(pp[1], "p", 1);
	CHECK(wait1(ep, TAG_PIPE, NET_WAIT_MS), ==, 1);
	xread_exact(pp[0], buf, 1);
	CHECK(wait1(ep, TAG_PIPE, 0), ==, 0);

	/* The parent sleeps in the set while a child sends, and closes all its copies. */
	pid = CHECK_OK(fork());
	if (pid == 0) {
		sleep_ms(100);
		xwrite_all(c, "late", 4);
		CHECK_OK(close(ep));
		CHECK_OK(close(s));
		CHECK_OK(close(c));
		_exit(0);
	}
	CHECK(wait1(ep, TAG_SOCK, NET_WAIT_MS), ==, 1);
	xwait_child_ok(pid);
	xread_exact(s, buf, 4);
	CHECK(memcmp(buf, "late", 4), ==, 0);
	CHECK(wait1(ep, TAG_SOCK, 0), ==, 0);
	xwrite_all(c, "still", 5);
	CHECK(wait1(ep, TAG_SOCK, NET_WAIT_MS), ==, 1);
	xread_exact(s, buf, 5);
	CHECK(wait1(ep, TAG_SOCK, 0), ==, 0);

	/* A child sleeps in the set, which has an accelerated member, for a kernel member. */
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK(wait1(ep, TAG_PIPE, NET_WAIT_MS), ==, 1);
		xread_exact(pp[0], buf, 1);
		CHECK(wait1(ep, TAG_PIPE, 0), ==, 0);
		_exit(0);
	}
	sleep_ms(100);
	xwrite_all(pp[1], "q", 1);
	xwait_child_ok(pid);
	CHECK(wait1(ep, TAG_PIPE, 0), ==, 0);
	CHECK(wait1(ep, TAG_SOCK, 0), ==, 0);

	/* A change the child makes to the accelerated member is one of the shared set. */
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
		_exit(0);
	}
	xwait_child_ok(pid);
	xwrite_all(c, "gone", 4);
	wait_queued(s, 4);
	CHECK(wait1(ep, TAG_SOCK, 0), ==, 0);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL), ENOENT);
	xread_exact(s, buf, 4);
	ev.events = EPOLLIN;
	ev.data.u64 = TAG_SOCK;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	pid = CHECK_OK(fork());
	if (pid == 0) {
		ev.events = EPOLLOUT;
		ev.data.u64 = TAG_PIPE;
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
		_exit(0);
	}
	xwait_child_ok(pid);
	{
		struct epoll_event out[4];

		CHECK(epoll_wait(ep, out, 4, 0), ==, 1);
		CHECK(out[0].data.u64, ==, TAG_PIPE);
		CHECK(out[0].events, ==, EPOLLOUT);
	}

	CHECK_OK(close(ep));
	CHECK_OK(close(pp[0]));
	CHECK_OK(close(pp[1]));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
