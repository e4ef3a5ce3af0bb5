/* epoll_mod_del: EPOLL_CTL_MOD and DEL on an accelerated socket, alone and in a set with a
 * pipe: MOD from EPOLLIN to EPOLLOUT (queued data no longer reported), to EPOLLIN|EPOLLET
 * (one edge for the queued data) and back to level, MOD of data, DEL (no more events, data
 * still queued), and the errors: ENOENT for MOD/DEL of an fd not in the set, EEXIST for a
 * second ADD, EINVAL for the set itself, EBADF for a closed fd, EPERM for a regular file,
 * EFAULT for a NULL event with ADD/MOD. */
#include "check.h"
#include "net.h"

#include <sys/epoll.h>

#define TAG_SOCK 0x5151
#define TAG_PIPE 0x7272

/* Events of the socket (by tag) in one wait, 0 if not reported; *pipe_ev likewise. */
static int wait_tags(int ep, int timeout_ms, uint32_t *sock_ev, uint32_t *pipe_ev)
{
	struct epoll_event out[4];
	int n = CHECK_OK(epoll_wait(ep, out, 4, timeout_ms));

	*sock_ev = *pipe_ev = 0;
	for (int i = 0; i < n; i++) {
		if (out[i].data.u64 == TAG_SOCK && *sock_ev == 0)
			*sock_ev = out[i].events;
		else if (out[i].data.u64 == TAG_PIPE && *pipe_ev == 0)
			*pipe_ev = out[i].events;
		else
			FAIL("unexpected event data %#llx", (unsigned long long)out[i].data.u64);
	}
	return n;
}

static void run(int mixed)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = TAG_SOCK };
	uint32_t se, pe;
	char buf[16];
	int c, s, other, ep, pp[2], dead, file;

	tcp_pair_checked(AF_INET, &c, &s);
	tcp_pair_checked(AF_INET, &other, &dead);
	CHECK_OK(close(dead));
	CHECK_OK(pipe(pp));
	ep = CHECK_OK(epoll_create1(0));
	if (mixed) {
		struct epoll_event pv = { .events = EPOLLIN, .data.u64 = TAG_PIPE };

		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, pp[0], &pv));
		xwrite_all(pp[1], "p", 1); /* the pipe stays readable throughout */
	}

	/* Errors. */
	dead = CHECK_OK(dup(other));
	CHECK_OK(close(dead)); /* a closed fd number */
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev), ENOENT);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL), ENOENT);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_ADD, s, NULL), EFAULT);
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev), EEXIST);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_MOD, s, NULL), EFAULT);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev), EINVAL);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_ADD, dead, &ev), EBADF);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_DEL, dead, NULL), EBADF);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_ADD, -1, &ev), EBADF);
	CHECK_ERRNO(epoll_ctl(dead, EPOLL_CTL_ADD, s, &ev), EBADF);
	CHECK_ERRNO(epoll_ctl(other, EPOLL_CTL_ADD, s, &ev), EINVAL); /* not an epoll fd */
	CHECK_ERRNO(epoll_ctl(ep, 99, s, &ev), EINVAL);
	file = CHECK_OK(open("/proc/self/exe", O_RDONLY));
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_ADD, file, &ev), EPERM);
	CHECK_OK(close(file));
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_MOD, other, &ev), ENOENT);

	/* Level EPOLLIN. */
	xwrite_all(c, "0123456789", 10);
	wait_queued(s, 10);
	CHECK(wait_tags(ep, NET_WAIT_MS, &se, &pe), ==, 1 + mixed);
	CHECK(se, ==, EPOLLIN);
	CHECK(pe, ==, mixed ? EPOLLIN : 0);

	/* IN -> OUT: the queued data is not reported, writability is. */
	ev.events = EPOLLOUT;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	for (int i = 0; i < 2; i++) {
		CHECK(wait_tags(ep, 0, &se, &pe), ==, 1 + mixed);
		CHECK(se, ==, EPOLLOUT);
	}
	/* No events asked: nothing (errors and hangups aside). */
	ev.events = 0;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	CHECK(wait_tags(ep, 0, &se, &pe), ==, mixed);
	CHECK(se, ==, 0);

	/* Adding EPOLLET: one edge for what is queued, then none. */
	ev.events = EPOLLIN | EPOLLET;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	CHECK(wait_tags(ep, 0, &se, &pe), ==, 1 + mixed);
	CHECK(se, ==, EPOLLIN);
	CHECK(wait_tags(ep, 0, &se, &pe), ==, mixed);
	CHECK(se, ==, 0);
	xwrite_all(c, "a", 1);
	wait_queued(s, 11);
	CHECK(wait_tags(ep, NET_WAIT_MS, &se, &pe), ==, 1 + mixed);
	CHECK(se, ==, EPOLLIN);
	CHECK(wait_tags(ep, 0, &se, &pe), ==, mixed);
	/* MOD rearms: the queued data is an edge again. */
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	CHECK(wait_tags(ep, 0, &se, &pe), ==, 1 + mixed);
	CHECK(se, ==, EPOLLIN);
	CHECK(wait_tags(ep, 0, &se, &pe), ==, mixed);

	/* Back to level, with new data (the tag). */
	ev.events = EPOLLIN | EPOLLOUT;
	ev.data.u64 = TAG_SOCK;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	for (int i = 0; i < 2; i++) {
		CHECK(wait_tags(ep, 0, &se, &pe), ==, 1 + mixed);
		CHECK(se, ==, EPOLLIN | EPOLLOUT);
	}
	xread_exact(s, buf, 11);
	CHECK(wait_tags(ep, 0, &se, &pe), ==, 1 + mixed);
	CHECK(se, ==, EPOLLOUT);

	/* DEL: no events though data is queued; then errors; ADD again works. */
	xwrite_all(c, "b", 1);
	wait_queued(s, 1);
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL));
	CHECK(wait_tags(ep, 0, &se, &pe), ==, mixed);
	CHECK(se, ==, 0);
	CHECK(wait_tags(ep, 50, &se, &pe), ==, mixed);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL), ENOENT);
	CHECK_ERRNO(epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev), ENOENT);
	ev.events = EPOLLIN;
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	CHECK(wait_tags(ep, 0, &se, &pe), ==, 1 + mixed);
	CHECK(se, ==, EPOLLIN);
	xread_exact(s, buf, 1);
	CHECK(wait_tags(ep, 0, &se, &pe), ==, mixed);
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_DEL, s, &ev)); /* a non-NULL event is ignored */

	if (mixed) {
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_DEL, pp[0], NULL));
		CHECK(wait_tags(ep, 0, &se, &pe), ==, 0);
	}
	CHECK_OK(close(ep));
	CHECK_OK(close(pp[0]));
	CHECK_OK(close(pp[1]));
	CHECK_OK(close(other));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

int main(void)
{
	run(0);
	run(1);
	PASS();
}
