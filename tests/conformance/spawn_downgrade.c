/* spawn_downgrade: a program without shunt is started on an accelerated socket moved onto its
 * stdin and stdout, the two ways subprocess modules and inetd-style servers do it: a vfork
 * child that dup2s a close-on-exec socket and execs, and posix_spawn with file actions on a
 * socket that is not close-on-exec. The program reads the bytes that were waiting, then the
 * rest, and its reply arrives intact; both ends are on kernel TCP afterwards. */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <spawn.h>
#include <stdlib.h>

#define PRE 8192
#define BULK 200000

static char buf[PRE + BULK];

static int plain_child(int seed)
{
	expect_no_shunt();
	xread_exact(0, buf, PRE + BULK);
	CHECK_PATTERN(seed, 0, buf, PRE + BULK);
	pattern_fill(seed + 1, 0, buf, BULK);
	xwrite_all(1, buf, BULK);
	return 0;
}

static pid_t start_with_vfork(char **args, int a)
{
	char **env = env_without_shunt();
	pid_t pid;

	CHECK_OK(fcntl(a, F_SETFD, FD_CLOEXEC));
	fflush(NULL);
	pid = vfork();
	if (pid == 0) {
		if (dup2(a, 0) < 0 || dup2(a, 1) < 0)
			_exit(2);
		execve("/proc/self/exe", args, env);
		_exit(3);
	}
	CHECK_OK(pid);
	return pid;
}

static pid_t start_with_posix_spawn(char **args, int a)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;

	CHECK(posix_spawn_file_actions_init(&fa), ==, 0);
	CHECK(posix_spawn_file_actions_adddup2(&fa, a, 0), ==, 0);
	CHECK(posix_spawn_file_actions_adddup2(&fa, a, 1), ==, 0);
	fflush(NULL);
	CHECK(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, env_without_shunt()), ==, 0);
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

static void run(char *argv0, int seed, pid_t (*start)(char **args, int a))
{
	char small[1], seedarg[8];
	char *args[] = { argv0, "--plain-child", seedarg, NULL };
	int a, sa;
	pid_t pid;

	snprintf(seedarg, sizeof(seedarg), "%d", seed);
	tcp_pair_checked(AF_INET, &a, &sa);
	CHECK_OK(fcntl(sa, F_SETFD, FD_CLOEXEC));
	pattern_fill(seed, 0, buf, PRE);
	xwrite_all(sa, buf, PRE);   /* waiting, unread, when the program starts */
	pid = start(args, a);
	pattern_fill(seed, PRE, buf, BULK);
	xwrite_all(sa, buf, BULK);
	xread_exact(sa, buf, BULK);
	CHECK_PATTERN(seed + 1, 0, buf, BULK);
	xwait_child_ok(pid);
	expect_downgraded(a);
	expect_downgraded(sa);
	CHECK_OK(close(a));
	CHECK(recv(sa, small, 1, 0), ==, 0);
	CHECK_OK(close(sa));
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--plain-child") == 0)
		return plain_child(atoi(argv[2]));
	run(argv[0], 7, start_with_vfork);
	run(argv[0], 9, start_with_posix_spawn);
	PASS();
}
