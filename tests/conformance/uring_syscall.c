/* uring_syscall: a program that sets up an io_uring through libc's syscall() (as libuv, Node.js,
 * uvloop and Rust's io-uring crate do) and then does its socket I/O, and its epoll control, through
 * the ring (IORING_OP_RECV, IORING_OP_SEND, IORING_OP_EPOLL_CTL). shunt cannot see that I/O, so
 * it must get out of the way: the connection accelerated before the ring existed moves back to
 * kernel TCP, its unread bytes first (its other end, a child that never uses io_uring, follows and
 * keeps working), and a connection made afterwards is not accelerated; in accelerated mode both
 * record the reason "io_uring". Every byte is checked; every wait is bounded. Before the fix the
 * ring's recv on the accelerated connection waited for bytes that sat in shunt's ring (or read a
 * doorbell byte as data). */
#include "uring_scenario.h"

int main(void)
{
	struct uring_conn_a a = uring_conn_a_start();
	struct test_ring r;
	int c, s;

	uring_setup(&r, URING_LIBC);
	uring_conn_a_check(&r, &a);
	uring_conn_b_make(&c, &s);
	uring_conn_b_check(&r, c, s);
	uring_close(&r);
	PASS();
}
