/* exec_downgrade_both: both ends of one accelerated connection are exec'd into programs WITHOUT
 * shunt at the same moment (and, in some rounds, a few milliseconds apart either way, or one
 * after the other's new program already runs). Before the exec each end sent bytes the other
 * had not read (from a few bytes to more than the ring holds: a non-blocking send fills it, the
 * new program sends the rest) and read a part of what it was sent; the end that goes second
 * keeps reading during the skew (each piece peeked, then read; or spliced into a pipe), or reads all that is left with
 * one MSG_WAITALL recv that starts on the ring and ends after the other's exec, or sends the rest
 * of its own stream with one blocking send (big enough for single copy) across the other's exec.
 * Each new program checks every byte it receives, in order,
 * from where its old image stopped, sends the rest of its own stream, and after both shut down
 * sees EOF at exactly the end: no byte lost, repeated or added (a doorbell would be an added
 * byte). In some rounds the test's parent holds both ends as well (forked holders, which stay
 * under shunt). Many rounds, so that the two execs race in different ways. */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <stdbool.h>
#include <stdlib.h>

#define ROUNDS 42
#define AFTER 5000          /* sent by every new program: the stream goes on after the exec */
#define CHUNK 65536
#define BIG 1500000         /* more than the ring holds (SHUNT_RING_SIZE 1M by default) */

static char buf[CHUNK];

static const size_t sizes[] = { 7, 3000, 100000, BIG, 1 };

enum { SIMULTANEOUS, CLIENT_LATE, SERVER_LATE, ONE_THEN_OTHER, WAITALL_LATE, SEND_LATE };

#define LATE_SEND 600000    /* more than SHUNT_ZCOPY_THRESHOLD (256K): may go by single copy */

static uint64_t seed_of(int round, int role)
{
	return 1000 + (uint64_t)round * 2 + (uint64_t)role;
}

/* The new program: no shunt; continues both streams from where the old image stopped. */
static int plain_child(char **argv)
{
	int fd = atoi(argv[2]), role = atoi(argv[3]), round = atoi(argv[4]), notify = atoi(argv[9]);
	size_t out = strtoull(argv[5], NULL, 10), in = strtoull(argv[6], NULL, 10);
	size_t total_out = strtoull(argv[7], NULL, 10), total_in = strtoull(argv[8], NULL, 10);
	uint64_t seed_out = seed_of(round, role), seed_in = seed_of(round, !role);
	double end = now_sec() + 20;

	expect_no_shunt();
	if (notify >= 0) {
		CHECK(write(notify, "r", 1), ==, 1);
		CHECK_OK(close(notify));
	}
	set_nonblocking(fd, 1);
	while (out < total_out || in < total_in) {
		struct pollfd p = { .fd = fd, .events = (in < total_in ? POLLIN : 0) |
							(out < total_out ? POLLOUT : 0) };

		if (now_sec() > end)
			FAIL("round %d role %d: stuck at out %zu/%zu in %zu/%zu", round, role, out,
			     total_out, in, total_in);
		if (poll(&p, 1, 100) <= 0)
			continue;
		if ((p.revents & POLLOUT) && out < total_out) {
			size_t n = total_out - out < CHUNK ? total_out - out : CHUNK;
			ssize_t w;

			pattern_fill(seed_out, out, buf, n);
			w = send(fd, buf, n, MSG_NOSIGNAL);
			if (w == -1 && errno != EAGAIN && errno != EINTR)
				CHECK_OK(w);
			if (w > 0)
				out += (size_t)w;
		}
		if ((p.revents & (POLLIN | POLLHUP | POLLERR)) && in < total_in) {
			ssize_t r = recv(fd, buf, CHUNK, 0);

			if (r == -1 && (errno == EAGAIN || errno == EINTR))
				continue;
			CHECK_OK(r);
			if (r == 0)
				FAIL("round %d role %d: EOF after %zu of %zu bytes", round, role, in,
				     total_in);
			if (in + (size_t)r > total_in)
				FAIL("round %d role %d: %zu bytes more than the %zu sent", round, role,
				     in + (size_t)r - total_in, total_in);
			CHECK_PATTERN(seed_in, in, buf, (size_t)r);
			in += (size_t)r;
		}
	}
	CHECK_OK(shutdown(fd, SHUT_WR));
	set_nonblocking(fd, 0);
	CHECK(read(fd, buf, 1), ==, 0);   /* nothing after the peer's last byte */
	CHECK_OK(close(fd));
	return 0;
}

/* Reads what is there now (non-blocking; each piece peeked first, then read), checking it;
 * returns the new count. */
static size_t take_available(int fd, uint64_t seed, size_t in, size_t total_in)
{
	static char peeked[CHUNK];

	for (;;) {
		ssize_t p = recv(fd, peeked, CHUNK, MSG_PEEK | MSG_DONTWAIT), r;

		if (p == -1 && errno == EINTR)
			continue;
		if (p == -1 && errno == EAGAIN)
			return in;
		CHECK(p, >, 0);
		CHECK(in + (size_t)p, <=, total_in);
		CHECK_PATTERN(seed, in, peeked, (size_t)p);
		r = recv(fd, buf, (size_t)p, MSG_DONTWAIT);   /* what was peeked is there */
		CHECK(r, ==, p);
		CHECK(memcmp(buf, peeked, (size_t)p), ==, 0);
		in += (size_t)r;
	}
}

/* The same through splice into a pipe (the ring's bytes go straight into the pipe). */
static size_t splice_available(int fd, int pipe_r, int pipe_w, uint64_t seed, size_t in, size_t total_in)
{
	for (;;) {
		ssize_t n = splice(fd, NULL, pipe_w, NULL, CHUNK, SPLICE_F_NONBLOCK), r;

		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1 && errno == EAGAIN)
			return in;
		CHECK(n, >, 0);
		CHECK(in + (size_t)n, <=, total_in);
		r = read_exact(pipe_r, buf, (size_t)n);
		CHECK(r, ==, n);
		CHECK_PATTERN(seed, in, buf, (size_t)n);
		in += (size_t)n;
	}
}

/* One blocking MSG_WAITALL recv of everything that is left: what the ring holds, then what
 * the other end's new program sends by TCP. */
static size_t take_rest_waitall(int fd, uint64_t seed, size_t in, size_t total_in)
{
	size_t want = total_in - in;
	char *all = malloc(want);
	ssize_t r;

	CHECK(all != NULL, ==, 1);
	set_nonblocking(fd, 0);
	do
		r = recv(fd, all, want, MSG_WAITALL);
	while (r == -1 && errno == EINTR);
	CHECK(r, ==, want);
	CHECK_PATTERN(seed, in, all, want);
	free(all);
	return total_in;
}

struct round {
	int n, kind, first;
	bool keep;           /* the parent holds both ends too (under shunt) until the end */
	size_t pre_out[2];   /* what each old image sends at most */
	size_t pre_in[2];    /* what each old image reads before the barrier */
};

/* The whole stream one end sends: what its old image may send, what its new program sends
 * anyway, and in SEND_LATE rounds what the later end sends with one blocking send. */
static size_t total_of(const struct round *r, int role)
{
	return r->pre_out[role] + AFTER + (r->kind == SEND_LATE && role != r->first ? LATE_SEND : 0);
}

static void old_image(char *self, int fd, int role, const struct round *r, int ready_w, int go_r,
		      int ran_r, int ran_w)
{
	uint64_t seed_out = seed_of(r->n, role), seed_in = seed_of(r->n, !role);
	size_t total_out = total_of(r, role), total_in = total_of(r, !role);
	size_t out = 0, in = 0;
	int skew = (r->kind == CLIENT_LATE && role == 0) || (r->kind == SERVER_LATE && role == 1) ? 2 : 0;
	bool late = r->kind == ONE_THEN_OTHER && role != r->first;
	bool waitall = r->kind == WAITALL_LATE && role != r->first;
	bool send_late = r->kind == SEND_LATE && role != r->first;
	char c, a[10][24];

	expect_accelerated(fd);
	set_nonblocking(fd, 1);
	while (out < r->pre_out[role]) {
		size_t n = r->pre_out[role] - out < CHUNK ? r->pre_out[role] - out : CHUNK;
		ssize_t w;

		pattern_fill(seed_out, out, buf, n);
		w = send(fd, buf, n, MSG_NOSIGNAL);
		if (w == -1 && errno == EAGAIN)
			break;   /* the ring (or the kernel's buffer) is full */
		CHECK(w, >, 0);
		out += (size_t)w;
	}
	if (r->pre_in[role] > 0) {
		CHECK(read_exact(fd, buf, r->pre_in[role]), ==, r->pre_in[role]);
		CHECK_PATTERN(seed_in, 0, buf, r->pre_in[role]);
		in = r->pre_in[role];
	}
	CHECK(write(ready_w, "r", 1), ==, 1);
	CHECK(read(go_r, &c, 1), ==, 1);
	if (skew) {
		double end = now_sec() + skew / 1000.0;
		int pp[2];

		CHECK_OK(pipe2(pp, O_CLOEXEC));
		CHECK_OK(fcntl(pp[0], F_SETPIPE_SZ, CHUNK));
		CHECK_OK(fcntl(pp[1], F_SETPIPE_SZ, CHUNK));
		while (now_sec() < end)   /* the client peeks and reads, the server splices */
			in = role == 0 ? take_available(fd, seed_in, in, total_in)
				       : splice_available(fd, pp[0], pp[1], seed_in, in, total_in);
		CHECK_OK(close(pp[0]));
		CHECK_OK(close(pp[1]));
	}
	if (late) {
		/* the other end's new program runs: its downgrade is done; our next call sees it */
		CHECK(read(ran_r, &c, 1), ==, 1);
		in = take_available(fd, seed_in, in, total_in);
		expect_downgraded(fd);
	}
	if (waitall) {
		/* blocks across the other end's exec: starts on the ring, ends on TCP */
		in = take_rest_waitall(fd, seed_in, in, total_in);
		expect_downgraded(fd);
	}
	if (send_late) {
		/* one blocking send of all the rest, across the other end's exec */
		char *all = malloc(total_out - out);

		CHECK(all != NULL, ==, 1);
		pattern_fill(seed_out, out, all, total_out - out);
		set_nonblocking(fd, 0);
		xwrite_all(fd, all, total_out - out);
		out = total_out;
		free(all);
	}
	if (r->kind == ONE_THEN_OTHER && role == r->first) {
		int fl = CHECK_OK(fcntl(ran_w, F_GETFD));

		CHECK_OK(fcntl(ran_w, F_SETFD, fl & ~FD_CLOEXEC));
	}
	set_nonblocking(fd, 0);
	snprintf(a[0], sizeof(a[0]), "%d", fd);
	snprintf(a[1], sizeof(a[1]), "%d", role);
	snprintf(a[2], sizeof(a[2]), "%d", r->n);
	snprintf(a[3], sizeof(a[3]), "%zu", out);
	snprintf(a[4], sizeof(a[4]), "%zu", in);
	snprintf(a[5], sizeof(a[5]), "%zu", total_out);
	snprintf(a[6], sizeof(a[6]), "%zu", total_in);
	snprintf(a[7], sizeof(a[7]), "%d", r->kind == ONE_THEN_OTHER && role == r->first ? ran_w : -1);
	exec_self_without_shunt((char *[]){ self, "--plain-child", a[0], a[1], a[2], a[3], a[4], a[5],
					    a[6], a[7], NULL });
}

static void one_round(char *self, const struct round *r)
{
	int fds[2], ready[2], go[2], ran[2];
	pid_t pid[2];
	char c[2];

	tcp_pair_checked(AF_INET, &fds[0], &fds[1]);
	CHECK_OK(pipe2(ready, O_CLOEXEC));
	CHECK_OK(pipe2(go, O_CLOEXEC));
	CHECK_OK(pipe2(ran, O_CLOEXEC));
	for (int role = 0; role < 2; role++) {
		pid[role] = CHECK_OK(fork());
		if (pid[role] == 0) {
			CHECK_OK(close(fds[!role]));
			old_image(self, fds[role], role, r, ready[1], go[0], ran[0], ran[1]);
		}
	}
	if (!r->keep) {
		CHECK_OK(close(fds[0]));
		CHECK_OK(close(fds[1]));
	}
	CHECK(read_exact(ready[0], c, 2), ==, 2);
	CHECK(write(go[1], "gg", 2), ==, 2);
	CHECK_OK(close(ran[0]));
	CHECK_OK(close(ran[1]));
	xwait_child_ok(pid[0]);
	xwait_child_ok(pid[1]);
	if (r->keep) {
		CHECK_OK(close(fds[0]));
		CHECK_OK(close(fds[1]));
	}
	CHECK_OK(close(ready[0]));
	CHECK_OK(close(ready[1]));
	CHECK_OK(close(go[0]));
	CHECK_OK(close(go[1]));
}

int main(int argc, char **argv)
{
	static const int kinds[] = { SIMULTANEOUS, SIMULTANEOUS, CLIENT_LATE, SERVER_LATE, ONE_THEN_OTHER,
				     WAITALL_LATE, SEND_LATE };

	if (argc == 10 && strcmp(argv[1], "--plain-child") == 0)
		return plain_child(argv);
	for (int i = 0; i < ROUNDS; i++) {
		struct round r = { .n = i, .kind = kinds[i % 7], .first = (i / 7) % 2, .keep = i % 4 == 1 };

		r.pre_out[0] = sizes[i % 5];
		r.pre_out[1] = sizes[(i / 5 + i) % 5];
		for (int role = 0; role < 2; role++) {
			size_t half = r.pre_out[!role] / 2;

			r.pre_in[role] = (i % 3 == 0) ? 0 : half < 4000 ? half : 4000;
		}
		one_round(argv[0], &r);
	}
	PASS();
}
