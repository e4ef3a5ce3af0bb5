/* spawn_file_actions: posix_spawn's file actions decide which accelerated sockets the new
 * program holds, not the sockets' close-on-exec flags alone.
 *   - a close-on-exec socket that adddup2 puts on fd 0 and 1 of a program without shunt moves
 *     back to kernel TCP first: the program reads every byte that was waiting and what follows,
 *     and its reply arrives intact (and the same for one that adddup2 puts onto itself, which
 *     clears close-on-exec);
 *   - the same into a program under shunt stays accelerated there (the parent closes its copy
 *     at once: the connection lives on in the child, found by inode);
 *   - sockets that are not close-on-exec, closed for the new program by addclose or
 *     addclosefrom_np, are not there (EBADF) and stay accelerated in the parent;
 *   - file actions shunt never saw being made (the object copied with memcpy): every byte still
 *     arrives (shunt takes every accelerated socket as reaching the program). */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <spawn.h>
#include <stdlib.h>

#define PRE 8192
#define BULK 200000

static char buf[PRE + BULK];

/* The program on the socket: fd in, fd out (0 and 1, or the socket's own number). */
static int echo_child(int in, int out, int seed, int with_shunt)
{
	if (with_shunt) {
		expect_accelerated(in);
	} else {
		expect_no_shunt();
	}
	xread_exact(in, buf, PRE + BULK);
	CHECK_PATTERN(seed, 0, buf, PRE + BULK);
	pattern_fill(seed + 1, 0, buf, BULK);
	xwrite_all(out, buf, BULK);
	return 0;
}

static int closed_child(int fd1, int fd2)
{
	expect_no_shunt();
	CHECK_ERRNO(fcntl(fd1, F_GETFD), EBADF);
	CHECK_ERRNO(fcntl(fd2, F_GETFD), EBADF);
	return 0;
}

/* The parent's side of the echo: PRE bytes were queued before the spawn. */
static void talk(int sa, int seed)
{
	pattern_fill(seed, PRE, buf, BULK);
	xwrite_all(sa, buf, BULK);
	xread_exact(sa, buf, BULK);
	CHECK_PATTERN(seed + 1, 0, buf, BULK);
}

/* posix_spawn of this program with role args; a (close-on-exec) is dup2'd onto 0 and 1, or
 * onto itself when self_dup. */
static pid_t spawn_on(char *argv0, int a, int seed, int with_shunt, int self_dup, int copied)
{
	posix_spawn_file_actions_t fa, copy;
	char seedarg[16], fdarg[16];
	char *args[] = { argv0, with_shunt ? "--shunt-echo" : "--plain-echo", seedarg, fdarg, NULL };
	pid_t pid;

	snprintf(seedarg, sizeof(seedarg), "%d", seed);
	snprintf(fdarg, sizeof(fdarg), "%d", self_dup ? a : 0);
	CHECK(posix_spawn_file_actions_init(&fa), ==, 0);
	if (self_dup) {
		CHECK(posix_spawn_file_actions_adddup2(&fa, a, a), ==, 0);
	} else {
		CHECK(posix_spawn_file_actions_adddup2(&fa, a, 0), ==, 0);
		CHECK(posix_spawn_file_actions_adddup2(&fa, a, 1), ==, 0);
	}
	fflush(NULL);
	memcpy(&copy, &fa, sizeof(fa));
	CHECK(posix_spawn(&pid, "/proc/self/exe", copied ? &copy : &fa, NULL, args,
			  with_shunt ? environ : env_without_shunt()), ==, 0);
	CHECK(posix_spawn_file_actions_destroy(&fa), ==, 0);
	return pid;
}

static void echo_case(char *argv0, int seed, int with_shunt, int self_dup, int copied)
{
	char small[1];
	int a, sa;
	pid_t pid;

	tcp_pair_checked(AF_INET, &a, &sa);
	CHECK_OK(fcntl(a, F_SETFD, FD_CLOEXEC));
	pattern_fill(seed, 0, buf, PRE);
	xwrite_all(sa, buf, PRE);   /* waiting, unread, when the program starts */
	pid = spawn_on(argv0, a, seed, with_shunt, self_dup, copied);
	if (with_shunt) {
		CHECK_OK(close(a));   /* the child's copy keeps the connection */
		talk(sa, seed);
		xwait_child_ok(pid);
		expect_accelerated(sa);
	} else {
		talk(sa, seed);
		xwait_child_ok(pid);
		expect_downgraded(a);
		expect_downgraded(sa);
		CHECK_OK(close(a));
	}
	CHECK(recv(sa, small, 1, 0), ==, 0);
	CHECK_OK(close(sa));
}

/* Two sockets that are not close-on-exec: one closed by addclose, one (the highest fd) by
 * addclosefrom_np. Neither reaches the program; both stay accelerated. */
static void closed_case(char *argv0)
{
	posix_spawn_file_actions_t fa;
	char arg1[16], arg2[16];
	char *args[] = { argv0, "--closed", arg1, arg2, NULL };
	int b, sb, c, sc;
	pid_t pid;

	tcp_pair_checked(AF_INET, &b, &sb);
	tcp_pair_checked(AF_INET, &c, &sc);
	CHECK_OK(fcntl(sb, F_SETFD, FD_CLOEXEC));
	CHECK_OK(fcntl(sc, F_SETFD, FD_CLOEXEC));
	CHECK(c > b, ==, 1);
	snprintf(arg1, sizeof(arg1), "%d", b);
	snprintf(arg2, sizeof(arg2), "%d", c);
	CHECK(posix_spawn_file_actions_init(&fa), ==, 0);
	CHECK(posix_spawn_file_actions_addclose(&fa, b), ==, 0);
	CHECK(posix_spawn_file_actions_addclosefrom_np(&fa, c), ==, 0);
	fflush(NULL);
	CHECK(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, args, env_without_shunt()), ==, 0);
	CHECK(posix_spawn_file_actions_destroy(&fa), ==, 0);
	xwait_child_ok(pid);
	expect_accelerated(b);
	expect_accelerated(sb);
	expect_accelerated(c);
	expect_accelerated(sc);
	xexchange_both(b, sb);
	xexchange_both(c, sc);
	CHECK_OK(close(b));
	CHECK_OK(close(c));
	CHECK(recv(sb, arg1, 1, 0), ==, 0);
	CHECK(recv(sc, arg1, 1, 0), ==, 0);
	CHECK_OK(close(sb));
	CHECK_OK(close(sc));
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--plain-echo") == 0)
		return echo_child(atoi(argv[3]), atoi(argv[3]) ? atoi(argv[3]) : 1, atoi(argv[2]), 0);
	if (argc == 4 && strcmp(argv[1], "--shunt-echo") == 0)
		return echo_child(atoi(argv[3]), atoi(argv[3]) ? atoi(argv[3]) : 1, atoi(argv[2]), 1);
	if (argc == 4 && strcmp(argv[1], "--closed") == 0)
		return closed_child(atoi(argv[2]), atoi(argv[3]));

	echo_case(argv[0], 21, 0, 0, 0);   /* adddup2 onto 0 and 1, no shunt: moved back */
	echo_case(argv[0], 23, 0, 1, 0);   /* adddup2 onto itself, no shunt: moved back */
	echo_case(argv[0], 25, 1, 0, 0);   /* adddup2 onto 0 and 1, under shunt: stays */
	echo_case(argv[0], 27, 0, 0, 1);   /* actions unknown to shunt, no shunt: moved back */
	closed_case(argv[0]);           /* addclose, addclosefrom_np: not there, stay */
	PASS();
}
