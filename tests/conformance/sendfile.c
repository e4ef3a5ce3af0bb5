/* sendfile: sendfile from a regular file to a connected socket, with an offset pointer (the
 * offset advances by the count, the file position does not move), with a NULL offset (the
 * file position advances), short at end of file and 0 at end of file; the receiver gets
 * exactly those file bytes in order. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/sendfile.h>

#define FILE_SIZE (1024 * 1024 + 123)
#define SEED 41
#define PART1_OFF 1000
#define PART1_LEN 300000
#define PART2_OFF 5000
#define PART2_LEN 2000
#define PART3_LEN 10
#define TOTAL (PART1_LEN + PART2_LEN + PART3_LEN)

static int s;

static void *receiver(void *arg)
{
	static char buf[TOTAL + 1];

	(void)arg;
	CHECK(read_exact(s, buf, TOTAL + 1), ==, TOTAL);
	CHECK_PATTERN(SEED, PART1_OFF, buf, PART1_LEN);
	CHECK_PATTERN(SEED, PART2_OFF, buf + PART1_LEN, PART2_LEN);
	CHECK_PATTERN(SEED, FILE_SIZE - PART3_LEN, buf + PART1_LEN + PART2_LEN, PART3_LEN);
	return NULL;
}

/* sendfile until count bytes went or the file ended; returns the total sent. */
static long send_file(int sock, int file, off_t *off, long count)
{
	long done = 0;

	while (done < count) {
		off_t before = off ? *off : CHECK_OK(lseek(file, 0, SEEK_CUR));
		ssize_t n = sendfile(sock, file, off, (size_t)(count - done));

		if (n == -1 && errno == EINTR)
			continue;
		CHECK_OK(n);
		if (off)
			CHECK(*off, ==, before + n);
		else
			CHECK(lseek(file, 0, SEEK_CUR), ==, before + n);
		if (n == 0)
			break;
		done += n;
	}
	return done;
}

int main(void)
{
	static char content[FILE_SIZE];
	char path[] = "/tmp/shunt-conformance-sendfile-XXXXXX";
	pthread_t th;
	off_t off;
	int c, file;

	file = CHECK_OK(mkstemp(path));
	CHECK_OK(unlink(path));
	pattern_fill(SEED, 0, content, FILE_SIZE);
	xwrite_all(file, content, FILE_SIZE);
	CHECK_OK(lseek(file, 0, SEEK_SET));

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK(pthread_create(&th, NULL, receiver, NULL), ==, 0);

	/* With an offset pointer: the file position stays at 0. */
	off = PART1_OFF;
	CHECK(send_file(c, file, &off, PART1_LEN), ==, PART1_LEN);
	CHECK(off, ==, PART1_OFF + PART1_LEN);
	CHECK(lseek(file, 0, SEEK_CUR), ==, 0);

	/* With NULL: from the file position, which advances. */
	CHECK_OK(lseek(file, PART2_OFF, SEEK_SET));
	CHECK(send_file(c, file, NULL, PART2_LEN), ==, PART2_LEN);
	CHECK(lseek(file, 0, SEEK_CUR), ==, PART2_OFF + PART2_LEN);

	/* Past the end: short, then 0. */
	off = FILE_SIZE - PART3_LEN;
	CHECK(sendfile(c, file, &off, 100), ==, PART3_LEN);
	CHECK(off, ==, FILE_SIZE);
	CHECK(sendfile(c, file, &off, 100), ==, 0);
	CHECK(off, ==, FILE_SIZE);

	CHECK_OK(shutdown(c, SHUT_WR));
	CHECK(pthread_join(th, NULL), ==, 0);
	xexchange(s, c, "done");

	CHECK_OK(close(file));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
