/* shutdown_enotconn: shutdown on an unconnected socket (fresh or bound) fails with ENOTCONN
 * for every direction; an invalid direction is EINVAL. Linux quirk (measured in plain mode):
 * shutdown(SHUT_RD) on a listening socket succeeds and stops it listening, so accept then
 * fails with EINVAL. */
#include "check.h"
#include "net.h"

int main(void)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int u, b, lfd, port;

	u = CHECK_OK(socket(AF_INET, SOCK_STREAM, 0));
	CHECK_ERRNO(shutdown(u, SHUT_RD), ENOTCONN);
	CHECK_ERRNO(shutdown(u, SHUT_WR), ENOTCONN);
	CHECK_ERRNO(shutdown(u, SHUT_RDWR), ENOTCONN);
	CHECK_ERRNO(shutdown(u, 3), EINVAL);
	CHECK_ERRNO(shutdown(u, -1), EINVAL);

	b = CHECK_OK(server_socket(AF_INET, SOCK_STREAM));   /* where the listeners are */
	len = loopback_addr(AF_INET, 0, &ss);
	CHECK_OK(bind(b, (struct sockaddr *)&ss, len));
	CHECK_ERRNO(shutdown(b, SHUT_RDWR), ENOTCONN);

	lfd = tcp_listen(AF_INET, &port);
	CHECK_OK(shutdown(lfd, SHUT_RD));
	set_nonblocking(lfd, 1);
	CHECK_ERRNO(accept(lfd, NULL, NULL), EINVAL);

	CHECK_OK(close(u));
	CHECK_OK(close(b));
	CHECK_OK(close(lfd));
	PASS();
}
