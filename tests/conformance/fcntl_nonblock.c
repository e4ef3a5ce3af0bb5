/* fcntl_nonblock: O_NONBLOCK toggled with fcntl F_SETFL (or ioctl FIONBIO) shows in F_GETFL
 * and changes behaviour: EAGAIN when set; when cleared again recv blocks and returns data
 * that arrives later; SOCK_NONBLOCK at creation shows as O_NONBLOCK; access mode is O_RDWR. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/ioctl.h>

static int peer;

static void *send_later(void *arg)
{
	(void)arg;
	sleep_ms(100);
	xwrite_all(peer, "late", 4);
	return NULL;
}

static int nonblocking(int fd)
{
	return !!(CHECK_OK(fcntl(fd, F_GETFL)) & O_NONBLOCK);
}

int main(void)
{
	char buf[8];
	pthread_t th;
	int c, s, on, u;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK(CHECK_OK(fcntl(s, F_GETFL)) & O_ACCMODE, ==, O_RDWR);
	CHECK(nonblocking(s), ==, 0);

	for (int round = 0; round < 2; round++) {
		set_nonblocking(s, 1);
		CHECK(nonblocking(s), ==, 1);
		CHECK_ERRNO(recv(s, buf, sizeof(buf), 0), EAGAIN);
		CHECK_ERRNO(read(s, buf, sizeof(buf)), EAGAIN);

		set_nonblocking(s, 0);
		CHECK(nonblocking(s), ==, 0);
		peer = c;
		CHECK(pthread_create(&th, NULL, send_later, NULL), ==, 0);
		CHECK(recv(s, buf, sizeof(buf), 0), ==, 4); /* blocked until the data came */
		CHECK(memcmp(buf, "late", 4), ==, 0);
		CHECK(pthread_join(th, NULL), ==, 0);
	}

	/* FIONBIO is the same switch. */
	on = 1;
	CHECK_OK(ioctl(s, FIONBIO, &on));
	CHECK(nonblocking(s), ==, 1);
	CHECK_ERRNO(recv(s, buf, sizeof(buf), 0), EAGAIN);
	on = 0;
	CHECK_OK(ioctl(s, FIONBIO, &on));
	CHECK(nonblocking(s), ==, 0);
	peer = c;
	CHECK(pthread_create(&th, NULL, send_later, NULL), ==, 0);
	CHECK(recv(s, buf, sizeof(buf), 0), ==, 4);
	CHECK(pthread_join(th, NULL), ==, 0);

	/* The other end never changed. */
	CHECK(nonblocking(c), ==, 0);

	u = CHECK_OK(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0));
	CHECK(nonblocking(u), ==, 1);
	CHECK_OK(close(u));

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
