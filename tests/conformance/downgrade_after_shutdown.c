/* downgrade_after_shutdown: a connection whose write side one end shut down while it was
 * accelerated, then moved back to kernel TCP (here by a raw clone of one end's process; an exec
 * into a program without shunt, SCM_RIGHTS to one, io_uring and a seccomp sandbox take the same
 * path), keeps the kernel's end of stream: the other end's reads return 0 again and again, not
 * wait and not return bytes, and the shut end's writes fail with EPIPE.
 *
 *   leaver     P shuts down, Q reads the end; P (whose process makes the raw clone) leaves
 *   follower   Q shuts down, P reads the end; P leaves, Q follows (woken in a read)
 *
 * Every wait is bounded (poll, 5 s). Before the fix the FIN stayed in the ring nobody reads any
 * more: Q's read after its end of stream waited, and a write of P's that the kernel refuses
 * went through and was read by Q after the end. Also after the fix of the race: a shutdown
 * whose FIN reached the ring after the downgrade began (tests/stress's raw clone rounds saw
 * both as connections that never ended). */
#include "check.h"
#include "net.h"

#include <sys/syscall.h>

static void raw_clone_and_reap(void)
{
	long pid = syscall(SYS_clone, SIGCHLD, 0L, 0L, 0L, 0L);

	if (pid == 0)
		_exit(0);
	CHECK(pid > 0, ==, 1);
	xwait_child_ok((pid_t)pid);
}

/* fd has reached its end of stream: a read returns 0 at once, twice */
static void expect_end(int fd)
{
	char b;

	CHECK(wait_fd(fd, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
	CHECK(read(fd, &b, 1), ==, 0);
	CHECK(wait_fd(fd, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
	CHECK(read(fd, &b, 1), ==, 0);
}

static void leaver_shut(void)
{
	int c, s, go[2], back[2];
	char b;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(go));
	CHECK_OK(pipe(back));
	pid_t q = CHECK_OK(fork());

	if (q == 0) {
		CHECK_OK(close(s));
		xread_exact(c, &b, 1);
		CHECK(b, ==, 'a');
		CHECK(read(c, &b, 1), ==, 0);           /* P's end, from the ring */
		xwrite_all(back[1], "e", 1);
		xread_exact(go[0], &b, 1);              /* P has left */
		expect_end(c);                          /* and again, over TCP now */
		xwrite_all(c, "q", 1);                  /* P's read side is open */
		expect_fallback(c, "downgraded");
		_exit(0);
	}
	CHECK_OK(close(c));
	xwrite_all(s, "a", 1);
	CHECK_OK(shutdown(s, SHUT_WR));
	xread_exact(back[0], &b, 1);
	raw_clone_and_reap();
	expect_fallback(s, "raw_clone");
	CHECK_ERRNO(send(s, "x", 1, MSG_NOSIGNAL), EPIPE);   /* shut: the kernel refuses it */
	xwrite_all(go[1], "g", 1);
	xread_exact(s, &b, 1);
	CHECK(b, ==, 'q');
	expect_end(s);                              /* Q exits: its end */
	xwait_child_ok(q);
	CHECK_OK(close(s));
	printf("leaver: ok\n");
}

static void follower_shut(void)
{
	int c, s, back[2];
	char b;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(back));
	pid_t q = CHECK_OK(fork());

	if (q == 0) {
		CHECK_OK(close(s));
		xwrite_all(c, "b", 1);
		CHECK_OK(shutdown(c, SHUT_WR));
		xread_exact(c, &b, 1);                  /* asleep here when P leaves: woken */
		CHECK(b, ==, 'p');
		CHECK_ERRNO(send(c, "x", 1, MSG_NOSIGNAL), EPIPE);
		expect_end(c);
		expect_fallback(c, "downgraded");
		_exit(0);
	}
	CHECK_OK(close(c));
	xread_exact(s, &b, 1);
	CHECK(b, ==, 'b');
	CHECK(read(s, &b, 1), ==, 0);               /* Q's end, from the ring */
	raw_clone_and_reap();
	expect_fallback(s, "raw_clone");
	expect_end(s);                              /* over TCP now: Q's FIN, after Q followed */
	xwrite_all(s, "p", 1);
	CHECK_OK(shutdown(s, SHUT_WR));
	xwait_child_ok(q);
	CHECK_OK(close(s));
	printf("follower: ok\n");
}

int main(void)
{
	leaver_shut();
	follower_shut();
	PASS();
}
