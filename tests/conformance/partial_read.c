/* partial_read: a read with a buffer smaller than what is queued returns exactly the buffer's
 * size, and a read with a larger buffer returns what is there without waiting for more. */
#include "check.h"
#include "net.h"

int main(void)
{
	char buf[1000];
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	xwrite_all(c, "0123456789", 10);
	wait_queued(s, 10);

	CHECK(read(s, buf, 4), ==, 4);
	CHECK(memcmp(buf, "0123", 4), ==, 0);
	CHECK(recv(s, buf, 4, 0), ==, 4);
	CHECK(memcmp(buf, "4567", 4), ==, 0);
	/* Only 2 bytes remain; the blocking read must not wait for 4. */
	CHECK(read(s, buf, 4), ==, 2);
	CHECK(memcmp(buf, "89", 2), ==, 0);

	/* Two writes, one large read: returns what is there (all of it once queued). */
	xwrite_all(c, "abc", 3);
	xwrite_all(c, "defgh", 5);
	wait_queued(s, 8);
	CHECK(read(s, buf, sizeof(buf)), ==, 8);
	CHECK(memcmp(buf, "abcdefgh", 8), ==, 0);

	/* A read of one byte at a time walks the stream in order. */
	xwrite_all(c, "xyz", 3);
	for (int i = 0; i < 3; i++) {
		CHECK(read(s, buf, 1), ==, 1);
		CHECK(buf[0], ==, "xyz"[i]);
	}
	CHECK_ERRNO(recv(s, buf, 1, MSG_DONTWAIT), EAGAIN);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
