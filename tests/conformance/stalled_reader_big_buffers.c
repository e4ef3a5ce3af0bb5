/* stalled_reader_big_buffers: a client whose socket buffers are large (SO_SNDBUFFORCE, and
 * SO_RCVBUFFORCE on the listener, 8 MiB each: the kernel doubles them) sends 3 MiB in 64 KiB
 * blocking sends to a server that reads nothing until the client has exited. Kernel TCP holds
 * it all, over loopback and over a veth between namespaces alike (about 33 MB measured there),
 * so the client finishes and exits, and the server then reads every byte, in order, and the
 * end. This is the case of two hosts, where kernel TCP holds several MB by default: more than
 * any ring of shunt's. Under shunt the client's ring fills (SHUNT_RING_SIZE, 1 MiB) and its
 * send waits SHUNT_SEND_STALL_MS (1 s) with the reader reading nothing; then, on shunt's own
 * rings, the connection moves to kernel TCP (stalled_reader, send_to_stalled_reader's first
 * round), and on the fabric the writer takes back what the reader has not read, sends it again
 * by TCP, and goes on there (docs/architecture.md, "A stalled reader"). Before 2026-11-30 the
 * fabric's client waited for ever, and so did the server. Rounds: the server reads nothing at
 * all before the client's exit (not even the client's header in its ring, on the fabric), or
 * reads the first 10 KiB first. The server says go with a byte of its own on the connection,
 * so that on the fabric its hello has come and the client's bytes go into the ring (a server
 * that makes no call sends no hello: the client's bytes would all go by kernel TCP). */
#include "check.h"
#include "net.h"

#include <sys/wait.h>

#define BUFS (8 << 20)
#define TOTAL (3u << 20)
#define SEED 19

static void round_with(uint64_t read_first)
{
	struct sockaddr_storage ss;
	socklen_t len = loopback_addr(AF_INET, 0, &ss);
	int bufs = BUFS, status;
	int lfd = CHECK_OK(server_socket(AF_INET, SOCK_STREAM));

	/* before listen: the window scale the SYN-ACK offers follows the receive buffer */
	CHECK_OK(setsockopt(lfd, SOL_SOCKET, SO_RCVBUFFORCE, &bufs, sizeof(bufs)));
	CHECK_OK(bind(lfd, (struct sockaddr *)&ss, len));
	CHECK_OK(listen(lfd, 4));
	int port = local_port(lfd);

	pid_t pid = CHECK_OK(fork());

	if (pid == 0) {
		char b;

		alarm(30);
		CHECK_OK(close(lfd));
		len = loopback_addr(AF_INET, port, &ss);
		int c = CHECK_OK(socket(AF_INET, SOCK_STREAM, 0));

		CHECK_OK(setsockopt(c, SOL_SOCKET, SO_SNDBUFFORCE, &bufs, sizeof(bufs)));
		CHECK_OK(connect(c, (struct sockaddr *)&ss, len));
		/* the server's first byte: on the fabric its hello comes before it, and this end
		 * moves onto the ring with it */
		CHECK(read(c, &b, 1), ==, 1);
		CHECK(b, ==, 'g');
		xsend_pattern(c, SEED, 0, TOTAL);
		CHECK_OK(close(c));
		_exit(0);
	}
	int s = CHECK_OK(accept(lfd, NULL, NULL));

	CHECK_OK(close(lfd));
	expect_accelerated(s);
	CHECK(write(s, "g", 1), ==, 1);
	if (read_first)
		xread_pattern(s, SEED, 0, read_first);
	/* a client that never finishes fails the test, not the runner's timeout */
	alarm(30);
	CHECK(waitpid(pid, &status, 0), ==, pid);
	alarm(0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, ==, 1);
	xread_pattern(s, SEED, read_first, TOTAL);
	char b;

	CHECK(read(s, &b, 1), ==, 0);
	CHECK_OK(close(s));
}

int main(void)
{
	round_with(0);
	round_with(10240);
	PASS();
}
