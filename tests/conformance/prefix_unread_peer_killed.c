/* prefix_unread_peer_killed: the client sends 100 bytes before the server accepts (under
 * shunt they travel by TCP, ahead of the channel's doorbells: the server's prefix), then
 * reads nothing; the server never reads them either and only sends. With SO_SNDTIMEO set,
 * a send that fills the buffers returns what it sent and the next one fails with EAGAIN
 * when the timeout is up; once the client's process is killed, a blocking send fails with
 * EPIPE or ECONNRESET. Under shunt a sender waiting for room while the prefix was unread
 * napped in a loop that looked at neither the timeout nor the peer: the chaos run's server
 * hung for ever there after its reader had met the killed client's reset. */
#include "check.h"
#include "net.h"

#include <sys/wait.h>

#define CHUNK (1 << 20)

int main(void)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct timeval tv = { 0, 300000 }, none = { 0, 0 };
	int lfd, port, s, go[2], done[2], status;
	char *buf = malloc(CHUNK), b = 0;
	pid_t pid;
	ssize_t n;

	CHECK(buf != NULL, ==, 1);
	alarm(60);
	CHECK_OK(pipe(go));
	CHECK_OK(pipe(done));
	lfd = CHECK_OK(tcp_listen(AF_INET, &port));
	pid = CHECK_OK(fork());
	if (pid == 0) {
		int c = CHECK_OK(tcp_connect(AF_INET, port));

		alarm(30);
		pattern_fill(9, 0, buf, 100);
		xwrite_all(c, buf, 100);            /* nobody has accepted yet: the prefix */
		CHECK(write(done[1], "c", 1), ==, 1);
		CHECK(read(go[0], &b, 1), ==, 1);   /* accepted */
		expect_accelerated(c);
		CHECK(write(done[1], "a", 1), ==, 1);
		pause();                            /* reads nothing until killed */
		_exit(1);
	}
	CHECK(read(done[0], &b, 1), ==, 1);
	sleep_ms(50);                               /* the 100 bytes are in the server's socket */
	s = CHECK_OK(accept(lfd, (struct sockaddr *)&ss, &len));
	CHECK_OK(close(lfd));
	expect_accelerated(s);
	CHECK(write(go[1], "g", 1), ==, 1);
	CHECK(read(done[0], &b, 1), ==, 1);

	/* the peer lives and does not read: the timeout ends the wait for room */
	memset(buf, 'x', CHUNK);
	CHECK_OK(setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)));
	for (int i = 0;; i++) {
		CHECK(i, <, 256);   /* 256 MiB would not fit in any buffer */
		n = send(s, buf, CHUNK, MSG_NOSIGNAL);
		if (n < 0)
			break;
		CHECK(n, >, 0);
	}
	CHECK(errno == EAGAIN || errno == EWOULDBLOCK, ==, 1);

	/* the peer's process is killed: a blocking send fails instead of waiting for ever */
	CHECK_OK(kill(pid, SIGKILL));
	CHECK(waitpid(pid, &status, 0), ==, pid);
	CHECK_OK(setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none)));
	for (int i = 0;; i++) {
		CHECK(i, <, 256);
		n = send(s, buf, CHUNK, MSG_NOSIGNAL);
		if (n < 0)
			break;
	}
	CHECK(errno == EPIPE || errno == ECONNRESET, ==, 1);
	CHECK_OK(close(s));
	free(buf);
	PASS();
}
