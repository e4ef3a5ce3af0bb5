/* connect_refused: connecting to a bound but not listening loopback port fails with
 * ECONNREFUSED when blocking; when non-blocking, connect says EINPROGRESS, poll reports the
 * error and SO_ERROR is ECONNREFUSED once (then 0); a later connect is ECONNABORTED. */
#include "check.h"
#include "net.h"

int main(void)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int b, c, port, err = -1;
	socklen_t elen = sizeof(err);
	short rev;

	/* Hold the port bound (never listening) so that no parallel test can take it. */
	b = CHECK_OK(server_socket(AF_INET, SOCK_STREAM));   /* where the listeners are */
	len = loopback_addr(AF_INET, 0, &ss);
	CHECK_OK(bind(b, (struct sockaddr *)&ss, len));
	port = local_port(b);
	len = loopback_addr(AF_INET, port, &ss);

	c = CHECK_OK(socket(AF_INET, SOCK_STREAM, 0));
	CHECK_ERRNO(connect(c, (struct sockaddr *)&ss, len), ECONNREFUSED);
	CHECK_ERRNO(connect(c, (struct sockaddr *)&ss, len), ECONNREFUSED);
	CHECK_OK(close(c));

	c = CHECK_OK(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	CHECK_ERRNO(connect(c, (struct sockaddr *)&ss, len), EINPROGRESS);
	rev = wait_fd(c, POLLOUT, NET_WAIT_MS);
	CHECK(rev & POLLERR, ==, POLLERR);
	CHECK(rev & POLLHUP, ==, POLLHUP);
	CHECK_OK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &elen));
	CHECK(err, ==, ECONNREFUSED);
	/* Reading SO_ERROR clears it. */
	CHECK_OK(getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &elen));
	CHECK(err, ==, 0);
	/* Linux quirk (plain mode measured): connecting again after the asynchronous refusal
	 * gives ECONNABORTED. */
	CHECK_ERRNO(connect(c, (struct sockaddr *)&ss, len), ECONNABORTED);
	CHECK_OK(close(c));

	CHECK_OK(close(b));
	PASS();
}
