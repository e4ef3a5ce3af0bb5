/* ipv4_loopback: a TCP connection over 127.0.0.1 carries data both ways (small messages and
 * 32 KiB blocks checked byte by byte) and both ends report AF_INET addresses. */
#include "check.h"
#include "net.h"

#define BLOCK (32 * 1024)

int main(void)
{
	static char out[BLOCK], in[BLOCK];
	struct sockaddr_storage ss;
	socklen_t len;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	len = sizeof(ss);
	CHECK_OK(getsockname(c, (struct sockaddr *)&ss, &len));
	CHECK(ss.ss_family, ==, AF_INET);
	CHECK(len, ==, sizeof(struct sockaddr_in));
	len = sizeof(ss);
	CHECK_OK(getpeername(s, (struct sockaddr *)&ss, &len));
	CHECK(ss.ss_family, ==, AF_INET);

	xexchange_both(c, s);
	for (int i = 0; i < 8; i++) {
		int from = i % 2 ? s : c, to = i % 2 ? c : s;

		pattern_fill((uint64_t)i, 0, out, BLOCK);
		xwrite_all(from, out, BLOCK);
		xread_exact(to, in, BLOCK);
		CHECK_PATTERN((uint64_t)i, 0, in, BLOCK);
	}
	CHECK_OK(close(c));
	CHECK(read(s, in, 1), ==, 0);
	CHECK_OK(close(s));
	PASS();
}
