/* ipv4_mapped: an AF_INET6 listener (IPV6_V6ONLY off) bound to ::ffff:127.0.0.1 accepts an
 * AF_INET client; the accepted socket sees the peer as ::ffff:127.0.0.1 and the client sees
 * 127.0.0.1 and the listening port; data flows both ways. Skips without IPv6. In crossns mode
 * the listener is in the server's namespace, bound to its IPv4 address mapped, and the client
 * connects from the other namespace (net.h): the addresses seen are the two ends'. */
#include "check.h"
#include "net.h"

int main(void)
{
	struct sockaddr_in6 a6 = { .sin6_family = AF_INET6 }, peer6;
	struct sockaddr_in peer4, local4;
	struct sockaddr_storage server4, client4;
	socklen_t len;
	int off = 0, lfd, port, c, s;

	if (!ipv6_loopback_available())
		SKIP("IPv6 is not available");
	test_end_addr(TEST_SERVER, AF_INET, 0, &server4);
	test_end_addr(TEST_CLIENT, AF_INET, 0, &client4);
	lfd = CHECK_OK(server_socket(AF_INET6, SOCK_STREAM));
	CHECK_OK(setsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)));
	CHECK(inet_pton(AF_INET6, "::ffff:0.0.0.0", &a6.sin6_addr), ==, 1);
	memcpy(&a6.sin6_addr.s6_addr[12], &((struct sockaddr_in *)&server4)->sin_addr, 4);
	CHECK_OK(bind(lfd, (struct sockaddr *)&a6, sizeof(a6)));
	CHECK_OK(listen(lfd, 4));
	port = local_port(lfd);

	c = tcp_connect(AF_INET, port);
	len = sizeof(peer6);
	s = CHECK_OK(accept(lfd, (struct sockaddr *)&peer6, &len));
	expect_accelerated(c);
	expect_accelerated(s);

	CHECK(len, ==, sizeof(struct sockaddr_in6));
	CHECK(peer6.sin6_family, ==, AF_INET6);
	CHECK(IN6_IS_ADDR_V4MAPPED(&peer6.sin6_addr), ==, 1);
	CHECK(memcmp(&peer6.sin6_addr.s6_addr[12], &((struct sockaddr_in *)&client4)->sin_addr, 4), ==,
	      0);
	len = sizeof(local4);
	CHECK_OK(getsockname(c, (struct sockaddr *)&local4, &len));
	CHECK(local4.sin_port, ==, peer6.sin6_port);
	len = sizeof(peer4);
	CHECK_OK(getpeername(c, (struct sockaddr *)&peer4, &len));
	CHECK(len, ==, sizeof(struct sockaddr_in));
	CHECK(is_end_addr(&peer4, TEST_SERVER), ==, 1);
	CHECK(ntohs(peer4.sin_port), ==, port);

	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	CHECK_OK(close(lfd));
	PASS();
}
