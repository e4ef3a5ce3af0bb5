/* prefix_blocked_send: a client thread's one blocking send of 8 MiB, started before the
 * server accepts, fills the socket buffers and blocks; the server then accepts and reads it
 * all: every byte arrives once, in order, and the answer comes back. Under shunt that send
 * goes by TCP (nothing is claimed yet) and cannot finish while the server waits in accept to
 * claim the channel, so accept must give up waiting and leave the connection on TCP (fallback
 * reason "claim did not settle"; the test turns SHUNT_STRICT off for itself): a claim that
 * waited for the send would hang here for ever. */
#include "check.h"
#include "net.h"
#include "settings.h"

#include <pthread.h>

#define BIG (8 << 20)

static int client_fd;
static char *out;

static void *send_big(void *arg)
{
	(void)arg;
	xwrite_all(client_fd, out, BIG);
	return NULL;
}

int main(void)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	char *in = malloc(BIG), answer[4];
	pthread_t th;
	int lfd, port, s;

	test_setting("SHUNT_STRICT", "0");   /* this connection is meant to fall back */
	out = malloc(BIG);
	CHECK(in != NULL && out != NULL, ==, 1);
	pattern_fill(21, 0, out, BIG);
	lfd = CHECK_OK(tcp_listen(AF_INET, &port));
	client_fd = CHECK_OK(tcp_connect(AF_INET, port));
	CHECK(pthread_create(&th, NULL, send_big, NULL), ==, 0);
	sleep_ms(100);   /* the send is under way, and blocked on full buffers */
	s = CHECK_OK(accept(lfd, (struct sockaddr *)&ss, &len));
	CHECK_OK(close(lfd));
	xread_exact(s, in, BIG);
	CHECK_PATTERN(21, 0, in, BIG);
	CHECK(pthread_join(th, NULL), ==, 0);
	xwrite_all(s, "done", 4);
	xread_exact(client_fd, answer, 4);
	CHECK(memcmp(answer, "done", 4), ==, 0);
	if (test_mode_accelerated()) {
		CHECK(shunt_counter(s, "bytes_in"), ==, -1);   /* on TCP: no channel behind it */
	}
	expect_fallback(s, "claim");
	expect_fallback(client_fd, "refused");   /* the server gave up its claim */
	CHECK_OK(close(client_fd));
	CHECK_OK(close(s));
	free(in);
	free(out);
	PASS();
}
