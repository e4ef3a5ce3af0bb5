/* pread_espipe: a socket is not seekable: pread, pwrite, preadv, pwritev and lseek fail with
 * ESPIPE and transfer nothing (a negative offset is EINVAL first); the connection is unharmed. */
#include "check.h"
#include "net.h"

int main(void)
{
	char buf[8] = "abcdefg";
	struct iovec iov = { buf, 4 };
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	xwrite_all(c, "queued", 6);
	wait_queued(s, 6);

	CHECK_ERRNO(pread(s, buf, 4, 0), ESPIPE);
	CHECK_ERRNO(preadv(s, &iov, 1, 0), ESPIPE);
	CHECK_ERRNO(pwrite(c, buf, 4, 0), ESPIPE);
	CHECK_ERRNO(pwritev(c, &iov, 1, 0), ESPIPE);
	CHECK_ERRNO(pread(s, buf, 4, 10), ESPIPE);
	CHECK_ERRNO(lseek(s, 0, SEEK_CUR), ESPIPE);
	CHECK_ERRNO(lseek(c, 0, SEEK_SET), ESPIPE);
	CHECK_ERRNO(pread(s, buf, 4, -1), EINVAL);

	/* Nothing consumed, nothing sent. */
	CHECK(read(s, buf, sizeof(buf)), ==, 6);
	CHECK(memcmp(buf, "queued", 6), ==, 0);
	CHECK_ERRNO(recv(s, buf, 1, MSG_DONTWAIT), EAGAIN);
	xexchange_both(c, s);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
