/* short_conns_off: with SHUNT_SHORT_CONNS=0 every connection is offered a channel, however
 * short its predecessors to the same listener were: twelve connections of one request and
 * answer each, all accelerated (short_conns.c is the same run with the setting's default). */
#include "check.h"
#include "net.h"
#include "settings.h"

int main(void)
{
	int port, lfd;

	test_setting("SHUNT_SHORT_CONNS", "0");
	lfd = tcp_listen(AF_INET, &port);
	for (int i = 0; i < 12; i++) {
		int c = tcp_connect(AF_INET, port);
		int s = CHECK_OK(accept(lfd, NULL, NULL));

		expect_accelerated(c);
		expect_accelerated(s);
		xexchange(c, s, "GET / HTTP/1.0\r\n\r\n");
		xexchange(s, c, "HTTP/1.0 200 OK\r\n\r\nhello");
		CHECK_OK(close(c));
		CHECK_OK(close(s));
	}
	CHECK_OK(close(lfd));
	PASS();
}
