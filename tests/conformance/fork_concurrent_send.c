/* fork_concurrent_send: after fork, parent and child both write on the same
 * connected socket at the same time (64-byte records, each one write), while
 * a thread of the parent reads the other end: every record arrives whole,
 * and each writer's records arrive in the order written. */
#include <pthread.h>
#include <stdint.h>
#include <sys/wait.h>

#include "check.h"
#include "net.h"

#define RECORDS 20000
#define RECORD 64

struct record {
	uint32_t tag;
	uint32_t seq;
	unsigned char fill[RECORD - 8];
};

static void make(struct record *r, uint32_t tag, uint32_t seq)
{
	r->tag = tag;
	r->seq = seq;
	for (size_t i = 0; i < sizeof(r->fill); i++)
		r->fill[i] = (unsigned char)(tag * 131 + seq * 7 + i);
}

static void write_records(int fd, uint32_t tag)
{
	struct record r;

	for (uint32_t i = 0; i < RECORDS; i++) {
		make(&r, tag, i);
		CHECK(write(fd, &r, sizeof(r)), ==, (ssize_t)sizeof(r));
	}
}

struct reader {
	int fd;
	uint32_t next[3];
};

static void *read_records(void *arg)
{
	struct reader *rd = arg;
	struct record r, want;

	for (int i = 0; i < 2 * RECORDS; i++) {
		xread_exact(rd->fd, &r, sizeof(r));
		CHECK(r.tag == 1 || r.tag == 2, ==, 1);
		CHECK(r.seq, ==, rd->next[r.tag]);
		make(&want, r.tag, r.seq);
		CHECK(memcmp(&r, &want, sizeof(r)), ==, 0);
		rd->next[r.tag]++;
	}
	return NULL;
}

int main(void)
{
	struct reader rd = { 0 };
	pthread_t th;
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	rd.fd = s;
	CHECK(pthread_create(&th, NULL, read_records, &rd), ==, 0);
	pid_t pid = CHECK_OK(fork());
	if (pid == 0) {
		write_records(c, 2);
		_exit(0);
	}
	write_records(c, 1);
	int status;
	CHECK(waitpid(pid, &status, 0), ==, pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, ==, 1);
	CHECK(pthread_join(th, NULL), ==, 0);
	CHECK(rd.next[1], ==, RECORDS);
	CHECK(rd.next[2], ==, RECORDS);
	expect_accelerated(c);
	CHECK_OK(close(c));
	char b;
	CHECK(read(s, &b, 1), ==, 0);   /* the child's copy is gone too: EOF */
	CHECK_OK(close(s));
	PASS();
}
