/* prefix_every_call: the client sends before the server has accepted, with each call a
 * program may use for it (write, send, writev, sendmsg, sendmmsg, sendfile, splice); then
 * the server accepts, reads every byte once, in order, and answers; the client reads the
 * answer with recvmmsg. Under shunt the bytes before the accept travel by TCP and are
 * counted as the prefix the server reads first: before the fix sendmmsg, sendfile and
 * splice went to the kernel uncounted, and the server took them for doorbells (their
 * bytes lost, its read waiting for ever). recvmmsg on a client whose offer is pending now
 * goes through the same receive as recv (before, a claim landing between shunt's look and
 * the kernel's read had it return doorbells: test_claim_race.py makes that moment certain;
 * here the answer is only checked). */
#include "check.h"
#include "net.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/sendfile.h>

#define N 3000

enum how { WRITE, SEND, WRITEV, SENDMSG, SENDMMSG, SENDFILE, SPLICE, HOWS };
static const char *const names[HOWS] = { "write", "send", "writev", "sendmsg", "sendmmsg", "sendfile",
					  "splice" };

/* A file holding buf, for sendfile and splice. */
static int file_of(const char *buf, size_t len)
{
	char path[] = "/tmp/prefix_every_call.XXXXXX";
	int fd = CHECK_OK(mkstemp(path));

	CHECK_OK(unlink(path));
	CHECK(write(fd, buf, len), ==, (ssize_t)len);
	CHECK(lseek(fd, 0, SEEK_SET), ==, 0);
	return fd;
}

static void send_by(enum how how, int c, const char *buf, size_t len)
{
	struct iovec iov[2] = { { (void *)buf, len / 2 }, { (void *)(buf + len / 2), len - len / 2 } };
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
	struct mmsghdr mm[2] = { { .msg_hdr = { .msg_iov = &iov[0], .msg_iovlen = 1 } },
				 { .msg_hdr = { .msg_iov = &iov[1], .msg_iovlen = 1 } } };
	int fd, p[2];

	switch (how) {
	case WRITE: xwrite_all(c, buf, len); break;
	case SEND: CHECK(send(c, buf, len, 0), ==, (ssize_t)len); break;
	case WRITEV: CHECK(writev(c, iov, 2), ==, (ssize_t)len); break;
	case SENDMSG: CHECK(sendmsg(c, &m, 0), ==, (ssize_t)len); break;
	case SENDMMSG:
		CHECK(sendmmsg(c, mm, 2, 0), ==, 2);
		CHECK(mm[0].msg_len + mm[1].msg_len, ==, len);
		break;
	case SENDFILE:
		fd = file_of(buf, len);
		CHECK(sendfile(c, fd, NULL, len), ==, (ssize_t)len);
		CHECK_OK(close(fd));
		break;
	case SPLICE:
		CHECK_OK(pipe(p));
		CHECK(write(p[1], buf, len), ==, (ssize_t)len);
		CHECK(splice(p[0], NULL, c, NULL, len, 0), ==, (ssize_t)len);
		CHECK_OK(close(p[0]));
		CHECK_OK(close(p[1]));
		break;
	default: FAIL("no such call");
	}
}

/* The server answers, the client reads the answer with recvmmsg. */
static void answer_by_recvmmsg(int c, int s)
{
	char answer[16];
	struct iovec iov = { answer, sizeof(answer) };
	struct mmsghdr mm = { .msg_hdr = { .msg_iov = &iov, .msg_iovlen = 1 } };

	xwrite_all(s, "answer", 6);
	CHECK(wait_fd(c, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
	CHECK(recvmmsg(c, &mm, 1, 0, NULL), ==, 1);
	CHECK(mm.msg_len, ==, 6);
	CHECK(memcmp(answer, "answer", 6), ==, 0);
	expect_accelerated(c);
	expect_accelerated(s);
}

static void one(enum how how)
{
	char buf[N], got[N];
	int lfd, port, c, s;

	lfd = CHECK_OK(tcp_listen(AF_INET, &port));
	c = CHECK_OK(tcp_connect(AF_INET, port));
	pattern_fill(how, 0, buf, N);
	send_by(how, c, buf, N);              /* nobody has accepted yet */
	s = CHECK_OK(accept(lfd, NULL, NULL));
	CHECK_OK(close(lfd));
	CHECK(wait_fd(s, POLLIN, NET_WAIT_MS) & POLLIN, ==, POLLIN);
	xread_exact(s, got, N);
	CHECK_PATTERN(how, 0, got, N);
	answer_by_recvmmsg(c, s);
	CHECK_OK(close(c));
	CHECK(read(s, got, 1), ==, 0);
	CHECK_OK(close(s));
	printf("%s: ok\n", names[how]);
}

/* recvmmsg while the offer is pending: the server claims and answers before the client's
 * first look at the connection. */
static void recvmmsg_pending(void)
{
	char b;
	int lfd, port, c, s;

	lfd = CHECK_OK(tcp_listen(AF_INET, &port));
	c = CHECK_OK(tcp_connect(AF_INET, port));
	s = CHECK_OK(accept(lfd, NULL, NULL));
	CHECK_OK(close(lfd));
	answer_by_recvmmsg(c, s);
	CHECK_OK(close(s));
	CHECK(read(c, &b, 1), ==, 0);
	CHECK_OK(close(c));
	printf("recvmmsg before the first look: ok\n");
}

int main(void)
{
	for (int how = 0; how < HOWS; how++)
		one((enum how)how);
	recvmmsg_pending();
	PASS();
}
