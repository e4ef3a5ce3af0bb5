/* many_connections: 300 connections open at once to one listener: all connect, all are
 * accepted (matched to their client by address), one poll over all 300 accepted sockets
 * reports each readable, each carries its own message both ways, and each sees EOF when its
 * client closes. Raises RLIMIT_NOFILE to the hard limit if needed; skips if that is too low. */
#include "check.h"
#include "net.h"

#include <stdlib.h>
#include <sys/resource.h>

#define N 300

static int clients[N], servers[N], owner[N];
static struct pollfd pfd[N];

static int somaxconn(void)
{
	FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
	int v = 128;

	if (f != NULL) {
		if (fscanf(f, "%d", &v) != 1)
			v = 128;
		fclose(f);
	}
	return v;
}

int main(void)
{
	struct rlimit rl;
	rlim_t need = 2 * N + 32;
	int lfd, port, batch, done, ports[N];

	CHECK_OK(getrlimit(RLIMIT_NOFILE, &rl));
	if (rl.rlim_cur < need) {
		if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need)
			MISSING("RLIMIT_NOFILE hard limit %llu < %llu", (unsigned long long)rl.rlim_max,
			     (unsigned long long)need);
		rl.rlim_cur = rl.rlim_max;
		CHECK_OK(setrlimit(RLIMIT_NOFILE, &rl));
	}

	/* Connect in batches the accept queue can hold (all of them at once normally). */
	batch = somaxconn() / 2;
	if (batch > N)
		batch = N;
	if (batch < 8)
		batch = 8;
	lfd = tcp_listen_backlog(AF_INET, batch, &port);
	for (done = 0; done < N;) {
		int end = done + batch < N ? done + batch : N;

		for (int i = done; i < end; i++) {
			clients[i] = tcp_connect(AF_INET, port);
			ports[i] = local_port(clients[i]);
		}
		for (int i = done; i < end; i++) {
			struct sockaddr_storage ss;
			socklen_t len = sizeof(ss);
			int j;

			servers[i] = CHECK_OK(accept(lfd, (struct sockaddr *)&ss, &len));
			for (j = 0; j < end; j++)
				if (ports[j] == sockaddr_port(&ss))
					break;
			if (j == end)
				FAIL("accepted a connection from unknown port %d", sockaddr_port(&ss));
			owner[i] = j;
		}
		done = end;
	}
	for (int i = 0; i < N; i++) {
		expect_accelerated(clients[i]);
		expect_accelerated(servers[i]);
	}

	/* Each client says who it is; one poll sees all 300 readable. */
	for (int i = 0; i < N; i++) {
		char msg[16];

		snprintf(msg, sizeof(msg), "client %03d", i);
		xwrite_all(clients[i], msg, 10);
		pfd[i] = (struct pollfd){ .fd = servers[i], .events = POLLIN };
	}
	double end = now_sec() + NET_WAIT_MS / 1000.0;
	for (;;) {
		int n = CHECK_OK(poll(pfd, N, NET_WAIT_MS));

		if (n == N)
			break;
		if (now_sec() > end)
			FAIL("only %d of %d sockets readable", n, N);
		sleep_ms(5);
	}
	for (int i = 0; i < N; i++) {
		char msg[16], want[16];

		CHECK(pfd[i].revents, ==, POLLIN);
		xread_exact(servers[i], msg, 10);
		snprintf(want, sizeof(want), "client %03d", owner[i]);
		CHECK(memcmp(msg, want, 10), ==, 0);
		snprintf(msg, sizeof(msg), "reply  %03d", owner[i]);
		xwrite_all(servers[i], msg, 10);
	}
	for (int i = 0; i < N; i++) {
		char msg[16], want[16];

		xread_exact(clients[i], msg, 10);
		snprintf(want, sizeof(want), "reply  %03d", i);
		CHECK(memcmp(msg, want, 10), ==, 0);
	}

	for (int i = 0; i < N; i++)
		CHECK_OK(close(clients[i]));
	for (int i = 0; i < N; i++) {
		char b;

		CHECK(read(servers[i], &b, 1), ==, 0);
		CHECK_OK(close(servers[i]));
	}
	CHECK_OK(close(lfd));
	PASS();
}
