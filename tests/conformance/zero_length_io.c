/* zero_length_io: zero-length I/O on a connected TCP socket. write/send of 0 bytes return 0
 * and send nothing; read of 0 bytes returns 0 at once, even on an empty socket (it is not
 * EOF); Linux quirk (measured in plain mode): recv of 0 bytes with MSG_DONTWAIT on an empty
 * socket fails with EAGAIN, and with data queued returns 0 leaving the data in place. */
#include "check.h"
#include "net.h"

int main(void)
{
	char buf[8];
	struct iovec iov = { buf, 0 };
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK(write(c, buf, 0), ==, 0);
	CHECK(send(c, buf, 0, 0), ==, 0);
	CHECK(writev(c, &iov, 1), ==, 0);
	CHECK(read(s, buf, 0), ==, 0);
	CHECK(readv(s, &iov, 0), ==, 0);
	CHECK_ERRNO(recv(s, buf, 0, MSG_DONTWAIT), EAGAIN);
	sleep_ms(20);
	CHECK_ERRNO(recv(s, buf, 1, MSG_DONTWAIT), EAGAIN); /* nothing was sent */

	xwrite_all(c, "ab", 2);
	wait_queued(s, 2);
	CHECK(recv(s, buf, 0, 0), ==, 0);
	CHECK(read(s, buf, 0), ==, 0);
	CHECK(recv(s, buf, sizeof(buf), 0), ==, 2);
	CHECK(memcmp(buf, "ab", 2), ==, 0);

	/* Still connected both ways. */
	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
