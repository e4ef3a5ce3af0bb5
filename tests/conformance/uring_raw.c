/* uring_raw: a program whose io_uring never goes through libc: set up, mapped and entered with the
 * raw system call instruction, as liburing does as Debian builds it (x86_64; a skip elsewhere).
 * shunt finds such a ring by its fd (anon_inode:[io_uring]) at the moments it looks, and every
 * connection of the process then moves back to kernel TCP, one accelerated before the ring
 * included, before the ring touches it: bytes exact, no hang, reason "io_uring". Two ways, each
 * in a process of its own: the process makes a connection after its ring (shunt looks before a
 * connection is accelerated), or hands the ring's fd to epoll_ctl (as a loop that waits for
 * completions with epoll does). (Linux refuses io_uring fds in SCM_RIGHTS.) Before
 * the fix the ring's recv on the accelerated connection waited for bytes that sat in shunt's ring
 * (or read a doorbell byte as data). */
#include "uring_scenario.h"

enum route { BY_CONNECTION, BY_EPOLL_CTL };

static void run(enum route how)
{
	struct uring_conn_a a = uring_conn_a_start();
	struct test_ring r;
	int c, s;

	uring_setup(&r, URING_RAW);
	if (how == BY_EPOLL_CTL) {
		struct epoll_event ev = { .events = EPOLLIN };
		int ep = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));

		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, r.fd, &ev));
		CHECK_OK(close(ep));
	}
	if (how == BY_CONNECTION)
		uring_conn_b_make(&c, &s);
	uring_conn_a_check(&r, &a);
	if (how != BY_CONNECTION)
		uring_conn_b_make(&c, &s);
	uring_conn_b_check(&r, c, s);
	uring_close(&r);
	PASS();
}

int main(void)
{
	if (!uring_raw_supported())
		SKIP("the raw system call instruction is only written for x86_64");
	for (int how = BY_CONNECTION; how <= BY_EPOLL_CTL; how++) {
		pid_t pid = CHECK_OK(fork());

		if (pid == 0)
			run((enum route)how);
		xwait_child_ok(pid);
	}
	PASS();
}
