/* eintr_restart: with SA_RESTART, a blocked recv or accept interrupted by a handled signal is
 * restarted and returns the data / connection that comes later; poll, select and epoll_wait
 * still fail with EINTR (never restarted), and so does recv when SO_RCVTIMEO is set. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/select.h>

static volatile sig_atomic_t hits;
static atomic_int done;
static pthread_t main_thread;
static int peer_fd, listen_port;

static void on_signal(int sig)
{
	(void)sig;
	hits++;
}

/* A few signals while the main thread is blocked, then the thing it waits for. */
static void *signal_then_send(void *arg)
{
	(void)arg;
	for (int i = 0; i < 4; i++) {
		sleep_ms(50);
		CHECK(pthread_kill(main_thread, SIGUSR1), ==, 0);
	}
	sleep_ms(50);
	xwrite_all(peer_fd, "data", 4);
	return NULL;
}

static void *signal_then_connect(void *arg)
{
	(void)arg;
	for (int i = 0; i < 4; i++) {
		sleep_ms(50);
		CHECK(pthread_kill(main_thread, SIGUSR1), ==, 0);
	}
	sleep_ms(50);
	return (void *)(intptr_t)tcp_connect(AF_INET, listen_port);
}

static void *pester(void *arg)
{
	(void)arg;
	while (!atomic_load(&done)) {
		sleep_ms(50);
		if (!atomic_load(&done))
			CHECK(pthread_kill(main_thread, SIGUSR1), ==, 0);
	}
	return NULL;
}

static void start_pester(pthread_t *th)
{
	atomic_store(&done, 0);
	CHECK(pthread_create(th, NULL, pester, NULL), ==, 0);
}

static void stop_pester(pthread_t th)
{
	atomic_store(&done, 1);
	CHECK(pthread_join(th, NULL), ==, 0);
}

int main(void)
{
	struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESTART };
	struct timeval tv = { 3, 0 };
	struct pollfd p;
	struct epoll_event ev = { .events = EPOLLIN }, out;
	fd_set rd;
	char buf[16];
	pthread_t th;
	void *ret;
	int c, s, s2, lfd, ep;

	main_thread = pthread_self();
	CHECK_OK(sigaction(SIGUSR1, &sa, NULL));
	tcp_pair_checked(AF_INET, &c, &s);

	/* recv is restarted and gets the data. */
	peer_fd = c;
	hits = 0;
	CHECK(pthread_create(&th, NULL, signal_then_send, NULL), ==, 0);
	CHECK(recv(s, buf, sizeof(buf), 0), ==, 4);
	CHECK(memcmp(buf, "data", 4), ==, 0);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(hits, >=, 1);

	/* read too, in the other direction. */
	peer_fd = s;
	hits = 0;
	CHECK(pthread_create(&th, NULL, signal_then_send, NULL), ==, 0);
	CHECK(read(c, buf, sizeof(buf)), ==, 4);
	CHECK(memcmp(buf, "data", 4), ==, 0);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(hits, >=, 1);

	/* accept is restarted and gets the connection. */
	lfd = tcp_listen(AF_INET, &listen_port);
	hits = 0;
	CHECK(pthread_create(&th, NULL, signal_then_connect, NULL), ==, 0);
	s2 = CHECK_OK(accept(lfd, NULL, NULL));
	CHECK(pthread_join(th, &ret), ==, 0);
	CHECK(hits, >=, 1);
	expect_accelerated((int)(intptr_t)ret);
	expect_accelerated(s2);
	xexchange_both((int)(intptr_t)ret, s2);
	CHECK_OK(close((int)(intptr_t)ret));
	CHECK_OK(close(s2));
	CHECK_OK(close(lfd));

	/* Waits are never restarted. */
	start_pester(&th);
	p = (struct pollfd){ .fd = s, .events = POLLIN };
	CHECK_ERRNO(poll(&p, 1, NET_WAIT_MS), EINTR);
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	struct timeval wait = { NET_WAIT_MS / 1000, 0 };
	CHECK_ERRNO(select(s + 1, &rd, NULL, NULL, &wait), EINTR);
	ep = CHECK_OK(epoll_create1(0));
	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	CHECK_ERRNO(epoll_wait(ep, &out, 1, NET_WAIT_MS), EINTR);

	/* Nor is a recv with a receive timeout. */
	CHECK_OK(setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	CHECK_ERRNO(recv(s, buf, sizeof(buf), 0), EINTR);
	stop_pester(th);

	xexchange_both(c, s);
	CHECK_OK(close(ep));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
