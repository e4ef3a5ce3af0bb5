/* threads_offer_shutdown: two threads of the client use one socket while its offer may still
 * be pending (the server has not accepted yet): thread A loops poll + recv for the server's
 * echo, thread B sends 300 bytes and shuts down its side. The server accepts at a different
 * moment each time (before B sends, while it sends, after its shutdown), so under shunt the
 * offer is claimed, or withdrawn by B's shutdown, while A is looking at it. Every connection
 * must carry exactly the 300 bytes both ways, then EOF, and the process must not crash.
 * Then a prefix send that blocks (the server accepts late and its claim gives up waiting for
 * the send) while A polls every millisecond: A sees the refusal while B is still inside its
 * send. Before the fix, the thread that saw the withdrawal or the refusal unmapped the
 * segment while the other one read (or wrote) its negotiation word: SIGSEGV (issue 16,
 * finding 1). Connections race to fall back by design, so SHUNT_STRICT is off here; one
 * control connection accepted before either thread runs must be accelerated. */
#include "check.h"
#include "net.h"
#include "settings.h"

#include <pthread.h>

#define MSG 300
#define ROUNDS_MAX 3000
#define ROUNDS_SEC 2.5
#define BIG (8 << 20)   /* more than the socket buffers take: the send blocks */
#define BIG_ROUNDS 3

struct conn {
	int fd;
	uint64_t seed;
	size_t len;             /* bytes B sends (and the server echoes) */
	size_t got;             /* bytes A received, checked */
	int eof;
	const char *sendbuf;    /* B's bytes: the pattern of seed */
};

/* Thread A: poll + recv until EOF, every wait bounded; checks the echo byte by byte. */
static void *reader(void *arg)
{
	struct conn *c = arg;
	char buf[4096];
	double end = now_sec() + NET_WAIT_MS / 1000.0;

	while (!c->eof) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		int n = poll(&p, 1, 1);

		if (n == -1 && errno == EINTR)
			continue;
		CHECK_OK(n);
		if (now_sec() > end)
			FAIL("seed %llu: %zu of %zu bytes echoed after %d ms", (unsigned long long)c->seed,
			     c->got, c->len, NET_WAIT_MS);
		if (n == 0)
			continue;
		ssize_t r = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (r == -1 && (errno == EAGAIN || errno == EINTR))
			continue;
		CHECK_OK(r);
		if (r == 0) {
			c->eof = 1;
			break;
		}
		CHECK(c->got + (size_t)r, <=, c->len);
		CHECK_PATTERN(c->seed, c->got, buf, (size_t)r);
		c->got += (size_t)r;
	}
	return NULL;
}

/* Thread B: the bytes in two pieces, then shutdown(SHUT_WR). */
static void *sender(void *arg)
{
	struct conn *c = arg;
	size_t first = c->len > 100 ? 100 : c->len;

	xwrite_all(c->fd, c->sendbuf, first);
	xwrite_all(c->fd, c->sendbuf + first, c->len - first);
	CHECK_OK(shutdown(c->fd, SHUT_WR));
	return NULL;
}

static void spin_us(unsigned us)
{
	double end = now_sec() + us / 1e6;

	while (now_sec() < end)
		;
}

/* The server's side of one connection: everything until EOF, checked, then echoed. */
static void serve(int s, const struct conn *c, char *in)
{
	xread_exact(s, in, c->len);
	CHECK_PATTERN(c->seed, 0, in, c->len);
	CHECK(wait_fd(s, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
	CHECK(recv(s, in, 1, MSG_DONTWAIT), ==, 0);   /* B's shutdown: EOF after the bytes */
	xwrite_all(s, in, c->len);   /* the echo: what was just checked */
	CHECK_OK(close(s));
}

/* 1 if fd's connection is on a channel (shunt_fd_accelerated), 0 otherwise or without shunt. */
static int on_channel(int fd)
{
	int (*accelerated)(int);

	*(void **)&accelerated = dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
	return accelerated != NULL && accelerated(fd) == 1;
}

static unsigned accelerated_count;

/* One connection: A and B start at once; the server accepts after `delay_us`. */
static void one(int lfd, int port, struct conn *c, unsigned delay_us, char *in)
{
	pthread_t a, b;

	c->fd = tcp_connect(AF_INET, port);
	c->got = 0;
	c->eof = 0;
	CHECK(pthread_create(&a, NULL, reader, c), ==, 0);
	CHECK(pthread_create(&b, NULL, sender, c), ==, 0);
	if (delay_us)
		spin_us(delay_us);
	int s = CHECK_OK(accept(lfd, NULL, NULL));

	serve(s, c, in);
	CHECK(pthread_join(b, NULL), ==, 0);
	CHECK(pthread_join(a, NULL), ==, 0);
	CHECK(c->got, ==, c->len);
	accelerated_count += (unsigned)on_channel(c->fd);
	CHECK_OK(close(c->fd));
}

int main(void)
{
	static char small[MSG];
	char *big, *in;
	int lfd, port, c0, s0;
	unsigned rounds = 0;

	test_setting("SHUNT_STRICT", "0");   /* connections race to fall back: see above */
	big = malloc(BIG);
	in = malloc(BIG);
	CHECK(big != NULL && in != NULL, ==, 1);

	/* the control connection: accepted before anything else happens */
	lfd = tcp_listen_backlog(AF_INET, 64, &port);
	c0 = tcp_connect(AF_INET, port);
	s0 = CHECK_OK(accept(lfd, NULL, NULL));
	expect_accelerated(c0);
	expect_accelerated(s0);
	xexchange_both(c0, s0);
	CHECK_OK(close(c0));
	CHECK_OK(close(s0));

	/* A polls and reads, B sends and shuts down, the accept comes at varying moments */
	double end = now_sec() + ROUNDS_SEC;

	while (rounds < ROUNDS_MAX && now_sec() < end) {
		struct conn c = { .seed = 1000 + rounds, .len = MSG, .sendbuf = small };

		pattern_fill(c.seed, 0, small, MSG);
		one(lfd, port, &c, (rounds * 37) % 400, in);
		rounds++;
	}

	/* a prefix send blocked until the claim gives up, while A polls every millisecond */
	for (int i = 0; i < BIG_ROUNDS; i++) {
		struct conn c = { .seed = 77 + (uint64_t)i, .len = BIG, .sendbuf = big };

		pattern_fill(c.seed, 0, big, BIG);
		one(lfd, port, &c, 60000, in);
	}
	CHECK_OK(close(lfd));
	/* both outcomes are expected under shunt: claimed in time, or withdrawn */
	printf("%u connections raced (%u accelerated, the others withdrawn or refused), %d blocked prefix sends\n",
	       rounds + BIG_ROUNDS, accelerated_count, BIG_ROUNDS);
	free(big);
	free(in);
	PASS();
}
