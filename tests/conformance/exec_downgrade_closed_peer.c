/* exec_downgrade_closed_peer: a client sends a request and closes (its last holder gone);
 * only then is the server's end handed to a program without shunt (inetd style: exec after
 * fork, a vfork child that dup2s the socket onto its stdin, posix_spawn), with all of the
 * request, or the part the server did not read first, still unread. The new program must
 * read exactly the rest of the request, in order, then EOF: nobody is left to re-send those
 * bytes, so the closing end must have left them where the new program finds them. Requests
 * from a few bytes to most of a ring; the server reads a part before the client's close, or
 * after it, or nothing; in some rounds the server's own process keeps its copy of the socket
 * (under shunt) until the new program is done. The client's end goes by close, or (the second
 * half of the rounds) by _exit with the socket still open, which runs no destructor. */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <spawn.h>
#include <stdlib.h>

#define SEED_BASE 500
#define MAXREQ 900000

static char buf[MAXREQ];

static const size_t sizes[] = { 7, 3000, 100000, MAXREQ };

enum { BY_EXEC, BY_VFORK, BY_SPAWN, HOW_N };
enum { READ_NONE, READ_BEFORE_CLOSE, READ_AFTER_CLOSE, READ_N };

/* The new program: the rest of the request, then EOF. */
static int plain_child(int fd, int seed, size_t from, size_t total)
{
	size_t want = total - from;

	expect_no_shunt();
	xread_exact(fd, buf, want);
	CHECK_PATTERN(seed, from, buf, want);
	CHECK(read(fd, buf, 1), ==, 0);
	return 0;
}

static pid_t start(int how, char *argv0, int s, int seed, size_t from, size_t total)
{
	char a[4][24];
	char *args[] = { argv0, "--plain-child", a[0], a[1], a[2], a[3], NULL };
	pid_t pid;

	snprintf(a[0], sizeof(a[0]), "%d", how == BY_EXEC ? s : 0);
	snprintf(a[1], sizeof(a[1]), "%d", seed);
	snprintf(a[2], sizeof(a[2]), "%zu", from);
	snprintf(a[3], sizeof(a[3]), "%zu", total);
	fflush(NULL);
	if (how == BY_EXEC) {
		pid = CHECK_OK(fork());
		if (pid == 0)
			exec_self_without_shunt(args);
	} else if (how == BY_VFORK) {
		char **env = env_without_shunt();

		CHECK_OK(fcntl(s, F_SETFD, FD_CLOEXEC));
		pid = vfork();
		if (pid == 0) {
			if (dup2(s, 0) < 0)
				_exit(2);
			execve("/proc/self/exe", args, env);
			_exit(3);
		}
		CHECK_OK(pid);
	} else {
		posix_spawn_file_actions_t fa;

		CHECK(posix_spawn_file_actions_init(&fa), ==, 0);
		CHECK(posix_spawn_file_actions_adddup2(&fa, s, 0), ==, 0);
		CHECK(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, env_without_shunt()), ==, 0);
		posix_spawn_file_actions_destroy(&fa);
	}
	return pid;
}

static void one_round(char *argv0, int round, int by_exit)
{
	size_t total = sizes[round % 4];
	int how = (round / 4) % HOW_N, when = round % READ_N, seed = SEED_BASE + round;
	int keep = round % 5 == 2;
	size_t part = when == READ_NONE ? 0 : total / 3;
	int c, s, go[2], closed[2];
	pid_t client, handed;
	char x;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe2(go, O_CLOEXEC));
	CHECK_OK(pipe2(closed, O_CLOEXEC));
	client = CHECK_OK(fork());
	if (client == 0) {
		/* the client: its request, then close; it is the last holder of its end */
		CHECK_OK(close(s));
		CHECK(read(go[0], &x, 1), ==, 1);
		pattern_fill(seed, 0, buf, total);
		xwrite_all(c, buf, total);
		if (when == READ_BEFORE_CLOSE)   /* the server's read ends before the close */
			CHECK(read(go[0], &x, 1), ==, 1);
		if (by_exit)
			_exit(0);   /* c still open: the process's end is its close */
		CHECK_OK(close(c));
		CHECK(write(closed[1], "c", 1), ==, 1);
		_exit(0);
	}
	CHECK_OK(close(c));
	CHECK(write(go[1], "g", 1), ==, 1);
	if (when == READ_BEFORE_CLOSE) {
		xread_exact(s, buf, part);
		CHECK_PATTERN(seed, 0, buf, part);
		CHECK(write(go[1], "r", 1), ==, 1);
	}
	/* Accelerated, the whole request fits the ring: the client has closed before the
	 * hand-over. Without shunt a large one may wait in the client's send until the new
	 * program reads, so the hand-over does not wait for that. */
	if (by_exit) {
		/* the client has ended once it is a zombie: waitid without reaping */
		siginfo_t si;

		if (test_mode_accelerated() || total < 100000)
			CHECK_OK(waitid(P_PID, client, &si, WEXITED | WNOWAIT));
	} else if (test_mode_accelerated()) {
		CHECK(wait_fd(closed[0], POLLIN, 10000) & POLLIN, !=, 0);
	} else {
		wait_fd(closed[0], POLLIN, total < 100000 ? 2000 : 100);
	}
	if (when == READ_AFTER_CLOSE) {
		xread_exact(s, buf, part);
		CHECK_PATTERN(seed, 0, buf, part);
	}
	handed = start(how, argv0, s, seed, part, total);
	if (!keep)
		CHECK_OK(close(s));
	xwait_child_ok(handed);
	xwait_child_ok(client);
	if (keep) {
		expect_downgraded(s);
		CHECK_OK(close(s));
	}
	CHECK_OK(close(go[0]));
	CHECK_OK(close(go[1]));
	CHECK_OK(close(closed[0]));
	CHECK_OK(close(closed[1]));
}

int main(int argc, char **argv)
{
	if (argc == 6 && strcmp(argv[1], "--plain-child") == 0)
		return plain_child(atoi(argv[2]), atoi(argv[3]), strtoull(argv[4], NULL, 10),
				   strtoull(argv[5], NULL, 10));
	alarm(120);   /* inherited by the new programs: a stuck one ends too */
	for (int round = 0; round < 2 * 4 * HOW_N * READ_N; round++)
		one_round(argv[0], round % (4 * HOW_N * READ_N), round >= 4 * HOW_N * READ_N);
	PASS();
}
