/* ipv6_loopback: a TCP connection over ::1 carries data both ways (small messages and 32 KiB
 * blocks checked byte by byte) and both ends report AF_INET6 ::1 addresses that agree. Skips
 * when ::1 is unavailable. In crossns mode the same over IPv6 between two namespaces, the
 * addresses those of the two ends (net.h). */
#include "check.h"
#include "net.h"

#define BLOCK (32 * 1024)

int main(void)
{
	static char out[BLOCK], in[BLOCK];
	struct sockaddr_in6 cl, cp, sl, sp;
	socklen_t len;
	int c, s;

	if (!ipv6_loopback_available())
		SKIP("::1 is not available");
	tcp_pair_checked(AF_INET6, &c, &s);

	len = sizeof(cl);
	CHECK_OK(getsockname(c, (struct sockaddr *)&cl, &len));
	CHECK(len, ==, sizeof(struct sockaddr_in6));
	len = sizeof(cp);
	CHECK_OK(getpeername(c, (struct sockaddr *)&cp, &len));
	len = sizeof(sl);
	CHECK_OK(getsockname(s, (struct sockaddr *)&sl, &len));
	len = sizeof(sp);
	CHECK_OK(getpeername(s, (struct sockaddr *)&sp, &len));
	CHECK(len, ==, sizeof(struct sockaddr_in6));
	CHECK(cl.sin6_family, ==, AF_INET6);
	CHECK(sp.sin6_family, ==, AF_INET6);
	CHECK(is_end_addr(&cl, TEST_CLIENT), ==, 1);
	CHECK(is_end_addr(&cp, TEST_SERVER), ==, 1);
	CHECK(is_end_addr(&sl, TEST_SERVER), ==, 1);
	CHECK(is_end_addr(&sp, TEST_CLIENT), ==, 1);
	CHECK(IN6_IS_ADDR_LOOPBACK(&cl.sin6_addr), ==, !test_crossns());
	CHECK(cl.sin6_port, ==, sp.sin6_port);
	CHECK(cp.sin6_port, ==, sl.sin6_port);

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
