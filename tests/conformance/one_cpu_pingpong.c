/* one_cpu_pingpong: two processes pinned to one CPU exchange 64-byte messages, each one
 * answered before the next is sent (blocking read and write, then the same through
 * epoll_wait): every byte arrives in order. Under shunt the two ends, which share the CPU, spin
 * with a yield at every look, so the one queued behind the other runs at the yield and neither
 * sleeps: the parent rings the child's doorbell on fewer than a third of the messages. Before,
 * ends on one CPU never spun, and each message put the reader to sleep and cost a doorbell
 * (about one per message). Needs two CPUs online (shunt never spins on one). */
#include "check.h"
#include "net.h"

#include <sched.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/wait.h>

#define ROUNDS 3000
#define MSG 64

static void exchange(int fd, bool first, bool use_epoll, uint64_t seed)
{
	int ep = -1;
	char buf[MSG];

	if (use_epoll) {
		struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

		ep = CHECK_OK(epoll_create1(0));
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
	}
	for (uint64_t i = 0; i < ROUNDS; i++) {
		if (first) {
			pattern_fill(seed, i * MSG, buf, MSG);
			xwrite_all(fd, buf, MSG);
		}
		if (use_epoll) {
			struct epoll_event out;

			CHECK(epoll_wait(ep, &out, 1, 10000), ==, 1);
			CHECK(out.data.fd, ==, fd);
		}
		xread_exact(fd, buf, MSG);
		CHECK_PATTERN(seed, i * MSG, buf, MSG);
		if (!first)
			xwrite_all(fd, buf, MSG);
	}
	if (ep >= 0)
		CHECK_OK(close(ep));
}

int main(void)
{
	cpu_set_t one;
	int c, s;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		SKIP("one CPU online: shunt does not spin at all");
	CPU_ZERO(&one);
	CPU_SET(sched_getcpu(), &one);
	CHECK_OK(sched_setaffinity(0, sizeof(one), &one));
	tcp_pair_checked(AF_INET, &c, &s);
	long long rung = shunt_counter(c, "doorbells");
	pid_t pid = CHECK_OK(fork());

	if (pid == 0) {
		CHECK_OK(close(c));
		exchange(s, false, false, 11);
		exchange(s, false, true, 12);
		_exit(0);
	}
	CHECK_OK(close(s));
	exchange(c, true, false, 11);
	exchange(c, true, true, 12);
	if (test_mode_accelerated()) {
		long long now = shunt_counter(c, "doorbells");

		fprintf(stderr, "doorbells rung by the parent: %lld for %d messages\n", now - rung, 2 * ROUNDS);
		CHECK(now - rung, <, 2 * ROUNDS / 3);
	}
	xwait_child_ok(pid);
	CHECK_OK(close(c));
	PASS();
}
