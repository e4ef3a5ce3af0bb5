/* both_send_first: two processes that each send more than a ring holds before either reads
 * (each end writes 2.5 MiB, then reads the other's). Kernel TCP's buffers hold that much on
 * loopback (a few MB each way), so both sends finish and every byte arrives. Under shunt the
 * rings (1 MiB) fill both ways and each end waits for the other to read: before, both hung
 * for ever. Now an end that waited for room while the other's ring to it stayed full and the
 * other waited for room too moves the connection to kernel TCP (reason "both_full"; the other
 * end's "downgraded", or "both_full" if it found the same at the same moment), losing nothing.
 * Accelerated: the connection was accelerated first, and at least one end says both_full.
 * Rounds: the client's end in a forked child, with the whole of each write in one call, and in
 * 64 KiB writes; the same with each end held by another process too (an end several processes
 * hold sleeps on the companion, not the futex: before, it hung there even after the first
 * fix); then both ends in one process, a thread each (one write each). Across namespaces (crossns, fabric modes) kernel TCP over the veth
 * holds less than a ring (about 500 KB each way measured here; 1 MB hung without shunt), so
 * there each end sends 400 KiB, which the kernel holds: every byte arrives, on whichever path
 * (a ring grown to the 64 KiB writes is full sooner: then both_full as on loopback; the
 * fabric modes' forked child leaves the engine). */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/wait.h>

#define EACH (2560 * 1024)
#define EACH_CROSS (400 * 1024)
#define SEED_UP 71     /* child to parent */
#define SEED_DOWN 72   /* parent to child */

static char out[EACH], in[EACH], out2[EACH], in2[EACH];

static void send_in(int fd, const char *buf, size_t len, size_t piece)
{
	if (piece > len)
		piece = len;
	for (size_t at = 0; at < len; at += piece)
		xwrite_all(fd, buf + at, len - at < piece ? len - at : piece);
}

/* Sends each bytes (seed mine) in pieces, then reads and checks each (seed theirs), with the
 * buffers given. */
static void send_then_read_in(int fd, uint64_t mine, uint64_t theirs, size_t each, size_t piece, char *o, char *i)
{
	pattern_fill(mine, 0, o, each);
	send_in(fd, o, each, piece);
	xread_exact(fd, i, each);
	CHECK_PATTERN(theirs, 0, i, each);
}

static void send_then_read(int fd, uint64_t mine, uint64_t theirs, size_t each, size_t piece)
{
	send_then_read_in(fd, mine, theirs, each, piece, out, in);
}

/* 1 if this end's reason is both_full, 0 if it is downgraded (or not accelerated mode). */
static int own_reason(int fd)
{
	const char *why;

	if (!test_mode_accelerated() || test_crossns())
		return 0;
	why = fallback_of(fd);
	if (why && strcmp(why, "both_full") == 0) {
		expect_fallback(fd, "both_full");
		return 1;
	}
	expect_fallback(fd, "downgraded");
	return 0;
}

/* A process that holds fd too, doing nothing with it, until *release is closed: the end is
 * shared (its waits are not the futex's). */
static pid_t hold_too(int fd, int release[2])
{
	pid_t pid;

	CHECK_OK(pipe(release));
	pid = CHECK_OK(fork());
	if (pid == 0) {
		char b;

		close(release[1]);
		(void)read(release[0], &b, 1);
		close(fd);
		_exit(0);
	}
	close(release[0]);
	return pid;
}

static void let_go(pid_t holder, int release[2])
{
	close(release[1]);
	xwait_child_ok(holder);
}

/* shared: each end also held by another process of its side. */
static void round_of(size_t piece, int shared)
{
	size_t each = test_crossns() ? EACH_CROSS : EACH;
	int c, s, tell[2], rel[2];
	pid_t pid, holder = 0;
	char child_said = 0;

	tcp_pair(AF_INET, &c, &s);
	expect_accelerated(c);
	expect_accelerated(s);
	CHECK_OK(pipe(tell));
	pid = CHECK_OK(fork());
	if (pid == 0) {
		char r;

		close(s);
		close(tell[0]);
		if (shared)
			holder = hold_too(c, rel);
		send_then_read(c, SEED_UP, SEED_DOWN, each, piece);
		r = (char)('0' + own_reason(c));
		xwrite_all(tell[1], &r, 1);
		CHECK(read(c, in, 1), ==, 0);   /* the parent's close, nothing stray before it */
		if (shared)
			let_go(holder, rel);
		_exit(0);
	}
	close(c);
	close(tell[1]);
	if (shared)
		holder = hold_too(s, rel);
	send_then_read(s, SEED_DOWN, SEED_UP, each, piece);
	xread_exact(tell[0], &child_said, 1);
	if (test_mode_accelerated() && !test_crossns())
		CHECK(own_reason(s) + (child_said == '1'), >=, 1);
	CHECK_OK(close(s));
	if (shared)
		let_go(holder, rel);
	xwait_child_ok(pid);
	close(tell[0]);
}

struct side {
	int fd;
	size_t each;
};

static void *client_thread(void *arg)
{
	struct side *c = arg;

	send_then_read_in(c->fd, SEED_UP, SEED_DOWN, c->each, c->each, out2, in2);
	return NULL;
}

/* Both ends in this process, the client's in a thread of its own. */
static void threads_round(void)
{
	struct side cs;
	pthread_t th;
	int c, s;

	tcp_pair(AF_INET, &c, &s);
	expect_accelerated(c);
	expect_accelerated(s);
	cs.fd = c;
	cs.each = test_crossns() ? EACH_CROSS : EACH;
	CHECK(pthread_create(&th, NULL, client_thread, &cs), ==, 0);
	send_then_read(s, SEED_DOWN, SEED_UP, cs.each, cs.each);
	CHECK(pthread_join(th, NULL), ==, 0);
	if (test_mode_accelerated() && !test_crossns())
		CHECK(own_reason(s) + own_reason(c), >=, 1);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

int main(void)
{
	round_of(SIZE_MAX, 0);
	round_of(64 * 1024, 0);
	round_of(SIZE_MAX, 1);
	threads_round();
	PASS();
}
