/* threads_shutdown_epoll: one thread shuts a socket down while another thread of the same
 * process sleeps in epoll_wait (epoll_pwait, epoll_pwait2) on it, as Linux answers: the
 * shutdown wakes the wait at once, with the events the socket has then:
 *   - SHUT_RD: EPOLLIN | EPOLLRDHUP; SHUT_RDWR: EPOLLIN | EPOLLRDHUP | EPOLLHUP;
 *   - SHUT_WR on a socket whose buffer is full (the peer reads nothing): EPOLLOUT;
 * level-triggered and EPOLLET, and through an epoll set nested in another one and through
 * poll on the epoll fd.
 * Accelerated: the waiter sleeps in the kernel with the member's doorbell armed; nothing
 * comes from the peer, so only shunt's own wake can end the wait. */
#include "check.h"
#include "net.h"

#include "shutdown_wake.h"

#include <pthread.h>

struct waiter {
	int epfd;
	enum variant how;
	int ret;
	uint32_t events;
	uint64_t data;
	int done;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;
	struct epoll_event ev;

	w->ret = epoll_wait_as(w->epfd, w->how, &ev);
	w->events = ev.events;
	w->data = ev.data.u64;
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int finished(struct waiter *w)
{
	return __atomic_load_n(&w->done, __ATOMIC_ACQUIRE);
}

static void add(int epfd, int fd, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.u64 = (uint64_t)fd + 1000 };

	CHECK_OK(epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev));
}

/* Starts the waiter, checks it sleeps, shuts down, and checks that it woke at once. */
static void shutdown_wakes(struct waiter *w, int fd, int how)
{
	pthread_t th;
	double t0;

	CHECK(pthread_create(&th, NULL, wait_thread, w), ==, 0);
	sleep_ms(250);
	CHECK(finished(w), ==, 0);   /* it really sleeps */
	t0 = now_sec();
	CHECK_OK(shutdown(fd, how));
	while (!finished(w) && now_sec() - t0 < 3.0)
		sleep_ms(2);
	CHECK(finished(w), ==, 1);   /* woken by the shutdown, not by its 10 s timeout */
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(w->ret, ==, 1);
}

static void one_socket(int how, uint32_t et, enum variant v)
{
	struct waiter w = { .how = v };
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	if (how == SHUT_WR)
		xfill(c);
	w.epfd = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	add(w.epfd, c, shutdown_wanted(how) | et);
	shutdown_wakes(&w, c, how);
	CHECK(w.events, ==, shutdown_events(how));
	CHECK(w.data, ==, (uint64_t)c + 1000);
	CHECK_OK(close(w.epfd));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

/* The set with the socket sits in another set (or under poll): the outer wait wakes. */
static void nested(enum variant v)
{
	struct waiter w = { .how = v };
	int c, s, inner;

	tcp_pair_checked(AF_INET, &c, &s);
	inner = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	add(inner, c, EPOLLIN | EPOLLRDHUP);
	if (v == V_POLL) {
		w.epfd = inner;
	} else {
		w.epfd = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
		add(w.epfd, inner, EPOLLIN);
	}
	shutdown_wakes(&w, c, SHUT_RD);
	CHECK(w.events, ==, EPOLLIN);
	CHECK(w.data, ==, v == V_POLL ? (uint64_t)inner : (uint64_t)inner + 1000);
	if (v != V_POLL)
		CHECK_OK(close(w.epfd));
	CHECK_OK(close(inner));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

int main(void)
{
	alarm(120);
	FOR_EACH_SHUTDOWN_CASE(one_socket);
	nested(V_WAIT);
	nested(V_POLL);
	PASS();
}
