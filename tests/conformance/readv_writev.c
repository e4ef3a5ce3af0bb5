/* readv_writev: writev gathers several iovecs (including an empty one) into the stream in
 * order and returns the total; readv scatters the stream over several iovecs filling each in
 * turn; more than IOV_MAX iovecs is EINVAL. */
#include "check.h"
#include "net.h"

#include <limits.h>

#define SEED 31

int main(void)
{
	static char a[1000], b[20000], in[21001 + 16], r2[5000], r3[20000];
	static struct iovec many[IOV_MAX + 1];
	static char m_out[IOV_MAX], m_in[IOV_MAX];
	char r1[3], one = 'o';
	struct iovec out[4] = {
		{ "x", 1 }, { NULL, 0 }, { a, sizeof(a) }, { b, sizeof(b) },
	};
	struct iovec iv[4] = {
		{ r1, sizeof(r1) }, { NULL, 0 }, { r2, sizeof(r2) }, { r3, sizeof(r3) },
	};
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	pattern_fill(SEED, 1, a, sizeof(a));
	pattern_fill(SEED, 1 + sizeof(a), b, sizeof(b));
	CHECK(writev(c, out, 4), ==, 21001);
	wait_queued(s, 21001);

	/* 3 + 0 + 5000 + 20000 = 25003 offered, 21001 there: each iovec filled in turn. */
	CHECK(readv(s, iv, 4), ==, 21001);
	CHECK(r1[0], ==, 'x');
	memcpy(in, r1, 3);
	memcpy(in + 3, r2, 5000);
	memcpy(in + 5003, r3, 21001 - 5003);
	CHECK_PATTERN(SEED, 1, in + 1, 21000);
	CHECK_ERRNO(recv(s, in, 1, MSG_DONTWAIT), EAGAIN);

	/* Many small iovecs, both ways. */
	for (int i = 0; i < IOV_MAX; i++) {
		m_out[i] = (char)(i * 7);
		many[i] = (struct iovec){ &m_out[i], 1 };
	}
	CHECK(writev(s, many, IOV_MAX), ==, IOV_MAX);
	for (int i = 0; i < IOV_MAX; i++)
		many[i] = (struct iovec){ &m_in[i], 1 };
	wait_queued(c, IOV_MAX);
	CHECK(readv(c, many, IOV_MAX), ==, IOV_MAX);
	CHECK(memcmp(m_out, m_in, IOV_MAX), ==, 0);

	for (int i = 0; i <= IOV_MAX; i++)
		many[i] = (struct iovec){ &one, 1 };
	CHECK_ERRNO(writev(c, many, IOV_MAX + 1), EINVAL);
	CHECK_ERRNO(readv(s, many, IOV_MAX + 1), EINVAL);
	CHECK_ERRNO(recv(s, in, 1, MSG_DONTWAIT), EAGAIN); /* nothing was sent */

	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
