/* short_conns_bulk: downloads judged by what a channel costs them. A connection that carries one
 * request and a bulk answer the server closes after (HTTP/1.0, FTP's data connection, nc < file)
 * is short when the answer is 1 MiB, however many reads the client takes it in (16 KiB each
 * here): four in a row, and the next downloads are kernel TCP (reason "short"), the sample
 * among them too, whose calls shunt counts: a sample of 12 MiB pays for a channel, and the
 * download after it is accelerated again. An answer of 12 MiB pays for its channel: four of
 * those, and the next is accelerated. Every byte exact either way. (Before: a megabyte, or eight reads, made any connection "worth" its channel,
 * and such downloads took three times kernel TCP's time: docs/benchmarks.md, "Downloads".) */
#include "check.h"
#include "net.h"

#include <pthread.h>

#define STREAK 4   /* short connections in a row before TCP (core/conn/short_conns.c) */
#define READ 16384

struct answer {
	int fd;
	size_t size;
};

static unsigned char byte_at(size_t i)
{
	return (unsigned char)(i * 7 + (i >> 12));
}

/* The server's side: the request, the answer, the close at once. */
static void *serve(void *arg)
{
	struct answer *a = arg;
	char req;
	static unsigned char piece[65536];

	xread_exact(a->fd, &req, 1);
	for (size_t off = 0; off < a->size;) {
		size_t n = a->size - off < sizeof(piece) ? a->size - off : sizeof(piece);
		for (size_t i = 0; i < n; i++)
			piece[i] = byte_at(off + i);
		xwrite_all(a->fd, piece, n);
		off += n;
	}
	CHECK_OK(close(a->fd));
	return NULL;
}

/* One download of size bytes; expect: 1 accelerated at both ends, 0 kernel TCP by the
 * short-connection rule. */
static void download(int lfd, int port, size_t size, int expect)
{
	static unsigned char buf[READ];
	int c = tcp_connect(AF_INET, port);
	struct answer a = { CHECK_OK(accept(lfd, NULL, NULL)), size };
	pthread_t th;

	if (expect) {
		expect_accelerated(c);
		expect_accelerated(a.fd);
	} else {
		expect_fallback(c, "short");
		expect_fallback(a.fd, "no_offer");
		if (!test_mode_accelerated())
			expect_accelerated(c);   /* plain: no libshunt; passthrough: 0 */
	}
	CHECK(pthread_create(&th, NULL, serve, &a), ==, 0);
	xwrite_all(c, "G", 1);
	size_t got = 0;
	for (;;) {
		ssize_t n = CHECK_OK(read(c, buf, sizeof(buf)));
		if (n == 0)
			break;
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] != byte_at(got + (size_t)i))
				FAIL("byte %zu of the answer is wrong", got + (size_t)i);
		got += (size_t)n;
	}
	CHECK(got, ==, size);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK_OK(close(c));
}

int main(void)
{
	int port, port2;
	int lfd = tcp_listen(AF_INET, &port);
	int lfd2 = tcp_listen(AF_INET, &port2);

	/* a megabyte each: short */
	for (int i = 0; i < STREAK; i++)
		download(lfd, port, 1 << 20, 1);
	download(lfd, port, 1 << 20, 0);
	download(lfd, port, 1 << 20, 0);
	/* the sample (after two: core/conn/short_conns.c), on kernel TCP, twelve megabytes:
	 * worth a channel, so the next one has one */
	download(lfd, port, 12 << 20, 0);
	download(lfd, port, 1 << 20, 1);
	/* twelve megabytes each, from another listener: worth it */
	for (int i = 0; i < STREAK + 1; i++)
		download(lfd2, port2, 12 << 20, 1);
	CHECK_OK(close(lfd));
	CHECK_OK(close(lfd2));
	PASS();
}
