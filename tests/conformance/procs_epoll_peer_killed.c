/* procs_epoll_peer_killed: a server process sends without pause (pieces of random size) while
 * the client reads through epoll_wait (level-triggered, then edge-triggered: recv until EAGAIN)
 * and another client thread sends to it; the server is killed with SIGKILL at a random moment.
 * The client must read a prefix of the server's stream, byte for byte, then see its end (EOF
 * or ECONNRESET) within 2 s of the kill, as with the kernel's TCP; the sending thread's send
 * fails with EPIPE or ECONNRESET. Found by the chaos run (tests/stress/): under shunt the
 * companion's end came behind a doorbell byte, epoll (edge-triggered on the companion) named
 * it once, and the look at it saw the doorbell, not the end; once that doorbell was drained
 * nothing named the member again, and the reader waited for ever. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/epoll.h>

#define ROUNDS_MAX 200
#define ROUNDS_SEC 3.0
#define END_MS 2000

static int cfd;

struct result {
	uint64_t got;
	int end;        /* 0: EOF, an errno, or -1: still waiting after END_MS */
};

static void *send_until_error(void *arg)
{
	static char buf[16384];
	int *err = arg;

	memset(buf, 'c', sizeof(buf));
	for (;;) {
		if (send(cfd, buf, sizeof(buf), MSG_NOSIGNAL) < 0) {
			*err = errno;
			return NULL;
		}
	}
}

static void *drain_thread(void *arg)
{
	static char buf[65536];
	int s = *(int *)arg;

	while (recv(s, buf, sizeof(buf), 0) > 0)
		;
	return NULL;
}

/* The server: reads what comes (a thread) and sends its pattern until it is killed. */
static void server(int lfd, uint64_t seed)
{
	static char buf[65536];
	static int s;
	uint64_t off = 0;
	pthread_t t;

	s = CHECK_OK(accept(lfd, NULL, NULL));
	CHECK(pthread_create(&t, NULL, drain_thread, &s), ==, 0);
	for (;;) {
		size_t n = 1 + (size_t)(pattern_word(seed + 1, off) % sizeof(buf));

		pattern_fill(seed, off, buf, n);
		ssize_t k = send(s, buf, n, MSG_NOSIGNAL);

		if (k <= 0)
			_exit(0);
		off += (uint64_t)k;
	}
}

/* Reads through an epoll set until the end; every byte checked. */
static void read_through_epoll(int ep, int edge, uint64_t seed, const long long *killed_ms, struct result *res)
{
	static char buf[65536];

	for (;;) {
		struct epoll_event ev;
		int n = epoll_wait(ep, &ev, 1, 50);

		CHECK(n >= 0 || errno == EINTR, ==, 1);
		if (n <= 0) {
			long long k = __atomic_load_n(killed_ms, __ATOMIC_ACQUIRE);

			if (k > 0 && now_sec() * 1000 - (double)k > END_MS) {
				res->end = -1;
				return;
			}
			continue;
		}
		do {
			ssize_t r = recv(cfd, buf, sizeof(buf), MSG_DONTWAIT);

			if (r < 0 && (errno == EAGAIN || errno == EINTR))
				break;
			if (r <= 0) {
				res->end = r == 0 ? 0 : errno;
				return;
			}
			CHECK_PATTERN(seed, res->got, buf, (size_t)r);
			res->got += (uint64_t)r;
		} while (edge);
	}
}

struct reader_arg {
	int ep, edge;
	uint64_t seed;
	long long killed_ms;    /* when the server was killed (0: not yet) */
	struct result res;
};

static void *reader(void *arg)
{
	struct reader_arg *a = arg;

	read_through_epoll(a->ep, a->edge, a->seed, &a->killed_ms, &a->res);
	return NULL;
}

/* The moment itself, every time: the client's member has turned cold (a wait found nothing),
 * the server sends a few bytes (which ring the doorbell the cold member asked for) and is
 * killed before the client waits again, so the doorbell and the end are both queued when the
 * kernel names the member. */
static void doorbell_then_end(int edge)
{
	int port, lfd = tcp_listen(AF_INET, &port), go[2], done[2], status;
	uint64_t seed = 77 + (uint64_t)edge;
	long long never = 0;
	char b;
	pid_t pid;

	CHECK_OK(pipe(go));
	CHECK_OK(pipe(done));
	pid = CHECK_OK(fork());
	if (pid == 0) {
		char buf[1000];
		int s = CHECK_OK(accept(lfd, NULL, NULL));

		CHECK(write(done[1], "a", 1), ==, 1);   /* accepted (and claimed, under shunt) */
		CHECK(read(go[0], &b, 1), ==, 1);
		pattern_fill(seed, 0, buf, sizeof(buf));
		xwrite_all(s, buf, sizeof(buf));
		CHECK(write(done[1], "s", 1), ==, 1);
		pause();   /* killed here, holding the socket */
		_exit(1);
	}
	CHECK_OK(close(lfd));
	cfd = tcp_connect(AF_INET, port);
	CHECK(read(done[0], &b, 1), ==, 1);
	expect_accelerated(cfd);

	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | (edge ? EPOLLET : 0) }, out;
	int ep = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	struct result res = { 0, 0 };

	CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &ev));
	CHECK(epoll_wait(ep, &out, 1, 50), ==, 0);   /* nothing yet: the member asks for a doorbell */
	CHECK(write(go[1], "g", 1), ==, 1);
	CHECK(read(done[0], &b, 1), ==, 1);
	CHECK_OK(kill(pid, SIGKILL));
	CHECK(waitpid(pid, &status, 0), ==, pid);
	__atomic_store_n(&never, (long long)(now_sec() * 1000), __ATOMIC_RELEASE);
	read_through_epoll(ep, edge, seed, &never, &res);
	if (res.end == -1)
		FAIL("%s: no end seen %d ms after the server was killed (%llu bytes read)",
		     edge ? "edge-triggered" : "level-triggered", END_MS, (unsigned long long)res.got);
	CHECK(res.got, ==, 1000);
	CHECK(res.end == 0 || res.end == ECONNRESET, ==, 1);
	CHECK_OK(close(ep));
	CHECK_OK(close(cfd));
	CHECK_OK(close(go[0]));
	CHECK_OK(close(go[1]));
	CHECK_OK(close(done[0]));
	CHECK_OK(close(done[1]));
}

int main(void)
{
	unsigned rounds = 0;

	doorbell_then_end(0);
	doorbell_then_end(1);

	/* then at random moments, with a thread of the client sending meanwhile */
	double end = now_sec() + ROUNDS_SEC;

	while (rounds < ROUNDS_MAX && now_sec() < end) {
		int port, lfd = tcp_listen(AF_INET, &port), send_err = 0, status;
		uint64_t seed = 4000 + rounds;
		pid_t pid = CHECK_OK(fork());

		if (pid == 0)
			server(lfd, seed);
		CHECK_OK(close(lfd));
		cfd = tcp_connect(AF_INET, port);
		wait_fd(cfd, POLLIN, NET_WAIT_MS);   /* the server has accepted and is sending */
		if (rounds == 0)
			expect_accelerated(cfd);

		struct reader_arg a = { .edge = (int)(rounds % 2), .seed = seed };
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP | (a.edge ? EPOLLET : 0) };
		pthread_t tr, ts;

		a.ep = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
		CHECK_OK(epoll_ctl(a.ep, EPOLL_CTL_ADD, cfd, &ev));
		CHECK(pthread_create(&ts, NULL, send_until_error, &send_err), ==, 0);
		CHECK(pthread_create(&tr, NULL, reader, &a), ==, 0);
		sleep_ms(1 + (int)(pattern_word(seed, 3) % 25));
		CHECK_OK(kill(pid, SIGKILL));
		CHECK(waitpid(pid, &status, 0), ==, pid);
		__atomic_store_n(&a.killed_ms, (long long)(now_sec() * 1000), __ATOMIC_RELEASE);
		CHECK(pthread_join(tr, NULL), ==, 0);
		if (a.res.end == -1)
			FAIL("round %u (%s): no end seen %d ms after the server was killed (%llu bytes read)", rounds,
			     a.edge ? "edge-triggered" : "level-triggered", END_MS, (unsigned long long)a.res.got);
		if (a.res.end != 0 && a.res.end != ECONNRESET)
			FAIL("round %u: the read ended with %s", rounds, strerror(a.res.end));
		CHECK(pthread_join(ts, NULL), ==, 0);
		CHECK(send_err == EPIPE || send_err == ECONNRESET, ==, 1);
		CHECK_OK(close(a.ep));
		CHECK_OK(close(cfd));
		rounds++;
	}
	printf("%u servers killed while sending\n", rounds);
	PASS();
}
