/* rlimit_nofile_zero: a process that lowered RLIMIT_NOFILE to 0 (as vsftpd's unprivileged
 * pre-login child does, soft and hard) still uses the sockets it holds: a blocking recv that
 * waits for data sent later gets it, a blocking send of more than the ring holds waits for the
 * reader and completes, SO_RCVTIMEO still times out with EAGAIN, and the peer's shutdown reads
 * as EOF. The kernel refuses poll and ppoll of more fds than RLIMIT_NOFILE allows (EINVAL), so
 * a wait under shunt cannot poll its companion socket there; before the fix that EINVAL was
 * taken for the peer's death and the recv returned EOF and the send EPIPE (vsftpd's session
 * died at its first wait for the client, in the corpus). */
#include "check.h"
#include "net.h"

#include <sys/resource.h>
#include <sys/wait.h>

#define BIG (4u << 20)
#define SEED 41

static void child(int s, int sync)
{
	struct rlimit zero = { 0, 0 };
	struct timeval tv = { 0, 200000 };
	static unsigned char buf[BIG];
	char b[8];
	double t0;

	CHECK_OK(setrlimit(RLIMIT_NOFILE, &zero));
	/* the kernel's own rule, which the wait has to live with */
	struct pollfd p = { .fd = s, .events = POLLIN };
	CHECK_ERRNO(poll(&p, 1, 0), EINVAL);

	/* a recv that waits: the parent sends 100 ms after our word */
	CHECK(write(sync, "r", 1), ==, 1);
	xread_exact(s, b, 4);
	CHECK(memcmp(b, "ping", 4), ==, 0);

	/* a send of more than the ring holds: the parent starts reading 100 ms later */
	pattern_fill(SEED, 0, buf, BIG);
	CHECK(write(sync, "s", 1), ==, 1);
	xwrite_all(s, buf, BIG);

	/* the socket's timeout still ends a wait */
	CHECK_OK(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	t0 = now_sec();
	CHECK_ERRNO(recv(s, b, sizeof(b), 0), EAGAIN);
	if (now_sec() - t0 < 0.150 || now_sec() - t0 > 5.0)
		FAIL("SO_RCVTIMEO of 200 ms ended the wait after %.3f s", now_sec() - t0);

	/* the peer's shutdown, while we wait */
	tv.tv_usec = 0;
	CHECK_OK(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	CHECK(write(sync, "e", 1), ==, 1);
	CHECK(recv(s, b, sizeof(b), 0), ==, 0);
	_exit(0);
}

int main(void)
{
	static unsigned char buf[BIG];
	int c, s, sync[2];
	char w;
	pid_t pid;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(sync));
	pid = fork();
	CHECK(pid, >=, 0);
	if (pid == 0) {
		close(c);
		close(sync[0]);
		child(s, sync[1]);
	}
	CHECK_OK(close(s));
	CHECK_OK(close(sync[1]));

	CHECK(read(sync[0], &w, 1), ==, 1);
	CHECK(w, ==, 'r');
	sleep_ms(100);
	xwrite_all(c, "ping", 4);

	CHECK(read(sync[0], &w, 1), ==, 1);
	CHECK(w, ==, 's');
	sleep_ms(100);
	xread_exact(c, buf, BIG);
	CHECK_PATTERN(SEED, 0, buf, BIG);

	CHECK(read(sync[0], &w, 1), ==, 1);
	CHECK(w, ==, 'e');
	sleep_ms(100);
	CHECK_OK(shutdown(c, SHUT_WR));
	xwait_child_ok(pid);
	CHECK_OK(close(c));
	PASS();
}
