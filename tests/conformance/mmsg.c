/* mmsg: sendmmsg on a TCP socket sends every message in order (each msg_len set), recvmmsg
 * fills one message after another from the stream (300 bytes into 3 x 100), with
 * MSG_WAITFORONE returns what is there (150 bytes: 2 messages, 100 + 50), and on an empty
 * socket with MSG_DONTWAIT fails with EAGAIN. */
#include "check.h"
#include "net.h"

int main(void)
{
	char out[3][2][50], in[3][100];
	struct iovec oiov[3][2], iiov[3];
	struct mmsghdr om[3], im[3];
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	memset(om, 0, sizeof(om));
	memset(im, 0, sizeof(im));
	for (int i = 0; i < 3; i++) {
		for (int j = 0; j < 2; j++) {
			pattern_fill(9, (uint64_t)(i * 100 + j * 50), out[i][j], 50);
			oiov[i][j] = (struct iovec){ out[i][j], 50 };
		}
		om[i].msg_hdr.msg_iov = oiov[i];
		om[i].msg_hdr.msg_iovlen = 2;
		iiov[i] = (struct iovec){ in[i], 100 };
		im[i].msg_hdr.msg_iov = &iiov[i];
		im[i].msg_hdr.msg_iovlen = 1;
	}
	CHECK_ERRNO(recvmmsg(s, im, 3, MSG_DONTWAIT, NULL), EAGAIN);

	CHECK(sendmmsg(c, om, 3, 0), ==, 3);
	for (int i = 0; i < 3; i++)
		CHECK(om[i].msg_len, ==, 100);
	wait_queued(s, 300);
	CHECK(recvmmsg(s, im, 3, 0, NULL), ==, 3);
	for (int i = 0; i < 3; i++) {
		CHECK(im[i].msg_len, ==, 100);
		CHECK(im[i].msg_hdr.msg_flags, ==, 0);
		CHECK_PATTERN(9, (uint64_t)i * 100, in[i], 100);
	}

	/* 150 bytes: the first message gets 100, the second 50, then nothing more. */
	CHECK(sendmmsg(c, om, 1, 0), ==, 1);
	CHECK(send(c, out[1][0], 50, 0), ==, 50);
	wait_queued(s, 150);
	CHECK(recvmmsg(s, im, 3, MSG_WAITFORONE, NULL), ==, 2);
	CHECK(im[0].msg_len, ==, 100);
	CHECK(im[1].msg_len, ==, 50);
	CHECK_PATTERN(9, 0, in[0], 100);
	CHECK_PATTERN(9, 100, in[1], 50);
	CHECK_ERRNO(recvmmsg(s, im, 3, MSG_DONTWAIT, NULL), EAGAIN);

	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
