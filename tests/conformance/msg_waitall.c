/* msg_waitall: recv(MSG_WAITALL) returns the full count even when the sender writes it in
 * small pieces with pauses from another thread; at EOF it returns the short remainder. */
#include "check.h"
#include "net.h"

#include <pthread.h>

#define PIECE 4096
#define PIECES 16
#define SEED 11

static int c;

static void *sender(void *arg)
{
	static char buf[PIECE];

	(void)arg;
	for (int i = 0; i < PIECES; i++) {
		pattern_fill(SEED, (uint64_t)i * PIECE, buf, PIECE);
		xwrite_all(c, buf, PIECE);
		sleep_ms(15);
	}
	xwrite_all(c, "tail", 4);
	sleep_ms(50);
	CHECK_OK(shutdown(c, SHUT_WR));
	return NULL;
}

int main(void)
{
	static char buf[PIECE * PIECES + 1000];
	pthread_t th;
	int s;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK(pthread_create(&th, NULL, sender, NULL), ==, 0);

	CHECK(recv(s, buf, PIECE * PIECES, MSG_WAITALL), ==, PIECE * PIECES);
	CHECK_PATTERN(SEED, 0, buf, PIECE * PIECES);
	/* Only 4 bytes, then EOF: MSG_WAITALL returns what there was. */
	CHECK(recv(s, buf, 1000, MSG_WAITALL), ==, 4);
	CHECK(memcmp(buf, "tail", 4), ==, 0);
	CHECK(recv(s, buf, 1000, MSG_WAITALL), ==, 0);

	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
