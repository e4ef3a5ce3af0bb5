/* system_popen: system() and popen() run /bin/sh -c CMD with the process's environment, and the
 * shell gets every fd that is not close-on-exec. The command uses an inherited accelerated
 * socket (reads the bytes waiting on it, writes a reply; popen also talks through its pipe).
 * With LD_PRELOAD kept the shell and its programs run shunt: the connection stays accelerated.
 * With LD_PRELOAD removed from the environment (unsetenv) they do not: the connection must be
 * on kernel TCP before the shell starts, and the peer gets exactly the bytes the command wrote
 * (no doorbell), the command exactly the bytes the peer wrote. Both ways, the connection works
 * afterwards and ends with a clean EOF. */
#include "check.h"
#include "handoff.h"
#include "net.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

/* The peer, in a process of its own (the caller blocks in system, and a downgrade needs the
 * peer's holder to take part): it reads exactly want, then the connection is used both ways
 * and ends with EOF. */
static void peer(int sa, const char *want, int kept)
{
	size_t n = strlen(want);
	char buf[256], small[1];

	xread_exact(sa, buf, n);
	CHECK(memcmp(buf, want, n), ==, 0);
	xwrite_all(sa, "after", 5);
	xread_exact(sa, buf, 4);
	CHECK(memcmp(buf, "back", 4), ==, 0);
	if (kept)
		expect_accelerated(sa);
	else
		expect_downgraded(sa);
	CHECK(recv(sa, small, 1, 0), ==, 0);   /* nothing more: no doorbell byte either */
	CHECK_OK(close(sa));
}

/* A fresh connection whose end *a the shell inherits; the peer's end, close-on-exec, holds
 * "ping" for the command to read and goes to a child running peer(want). */
static pid_t start_peer(int *a, const char *want, int kept)
{
	int sa;
	pid_t pid;

	tcp_pair_checked(AF_INET, a, &sa);
	CHECK(*a, <, 10);   /* a one-digit fd for the shell's redirections */
	CHECK_OK(fcntl(*a, F_SETFD, 0));
	CHECK_OK(fcntl(sa, F_SETFD, FD_CLOEXEC));
	xwrite_all(sa, "ping", 4);   /* waiting, unread, when the shell starts */
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(*a));
		peer(sa, want, kept);
		exit(0);
	}
	CHECK_OK(close(sa));
	return pid;
}

/* After the shell: this end works both ways, then closes. */
static void finish(int a, pid_t pid, int kept)
{
	char buf[8];

	xread_exact(a, buf, 5);
	CHECK(memcmp(buf, "after", 5), ==, 0);
	xwrite_all(a, "back", 4);
	if (kept)
		expect_accelerated(a);
	else
		expect_downgraded(a);
	CHECK_OK(close(a));
	xwait_child_ok(pid);
}

/* Each command echoes the waiting "ping" back, then writes its own part (tail, given the fd):
 * system's and popen "r"'s their text (popen "r" says done on its stdout too), popen "w"'s
 * what comes through its pipe. */
static const struct shell_case {
	const char *popen_mode;   /* NULL: system */
	const char *tail;
	const char *want;
} cases[] = {
	{ NULL, "printf ' from system' >&%d", "ping from system" },
	{ "r", "printf ' from popen' >&%d && echo done", "ping from popen" },
	{ "w", "cat >&%d", "ping through the pipe" },
};

static void run_case(const struct shell_case *c, int kept)
{
	char cmd[128], tail[64], line[64];
	int a;
	pid_t pid = start_peer(&a, c->want, kept);
	FILE *f;

	snprintf(tail, sizeof(tail), c->tail, a);
	snprintf(cmd, sizeof(cmd), "head -c 4 <&%d >&%d && %s", a, a, tail);
	if (!c->popen_mode) {
		CHECK(system(cmd), ==, 0);
	} else {
		f = popen(cmd, c->popen_mode);
		CHECK(f != NULL, ==, 1);
		if (*c->popen_mode == 'r') {
			CHECK(fgets(line, sizeof(line), f) != NULL, ==, 1);
			CHECK(strcmp(line, "done\n"), ==, 0);
		} else {
			CHECK(fputs(" through the pipe", f), >=, 0);
		}
		CHECK(pclose(f), ==, 0);
	}
	finish(a, pid, kept);
}

static void run(int kept)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_case(&cases[i], kept);
}

int main(void)
{
	alarm(25);   /* a command reading doorbells or an empty kernel socket would hang */
	signal(SIGPIPE, SIG_IGN);
	run(1);
	CHECK_OK(unsetenv("LD_PRELOAD"));
	run(0);
	PASS();
}
