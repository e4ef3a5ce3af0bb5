/* stdio_exec_std: a program exec'd (under shunt, as `prog <&3 >&3` from a shell or an inetd-style
 * server does) with an accelerated socket as its stdin and stdout uses stdio only: fgets and
 * fread from stdin, printf and fwrite to stdout, crossing the buffer; its last line is left in
 * stdout's buffer for exit to flush. The connection stays accelerated in the new program (it
 * attaches to the channel), and the peer gets every byte, then EOF. */
#include "check.h"
#include "net.h"

#include <pthread.h>

#define LINES 2000
#define BLOCK 300000

extern char **environ;

static char blk[BLOCK], got[BLOCK];

static int std_child(void)
{
	char line[128];

	expect_accelerated(0);
	expect_accelerated(1);
	CHECK(fileno(stdin), ==, 0);
	CHECK(fileno(stdout), ==, 1);
	while (fgets(line, sizeof(line), stdin)) {
		if (strcmp(line, "big\n") == 0) {
			CHECK(fread(blk, 1, BLOCK, stdin), ==, BLOCK);
			CHECK(fwrite(blk, 1, BLOCK, stdout), ==, BLOCK);
		} else if (strcmp(line, "end\n") == 0) {
			printf("bye\n");   /* exit flushes it */
			return 0;
		} else {
			CHECK(printf("echo:%s", line), >, 0);
		}
	}
	FAIL("stdin ended before \"end\": EOF %d error %d", feof(stdin), ferror(stdin));
}

static void *feed(void *arg)
{
	int fd = *(int *)arg;
	char line[64];

	for (int i = 0; i < LINES; i++) {
		int n = snprintf(line, sizeof(line), "line %d of %d\n", i, LINES);

		xwrite_all(fd, line, (size_t)n);
	}
	xwrite_all(fd, "big\n", 4);
	pattern_fill(9, 0, blk, BLOCK);
	xwrite_all(fd, blk, BLOCK);
	xwrite_all(fd, "end\n", 4);
	return NULL;
}

int main(int argc, char **argv)
{
	int c, s;
	char line[64], want[64];
	pthread_t th;

	if (argc == 2 && strcmp(argv[1], "--std-child") == 0)
		return std_child();

	tcp_pair_checked(AF_INET, &c, &s);
	pid_t pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(dup2(s, 0));
		CHECK_OK(dup2(s, 1));
		CHECK_OK(close(s));
		CHECK_OK(close(c));
		execve("/proc/self/exe", (char *[]){ argv[0], "--std-child", NULL }, environ);
		_exit(127);
	}
	CHECK_OK(close(s));
	CHECK(pthread_create(&th, NULL, feed, &c), ==, 0);
	for (int i = 0; i < LINES; i++) {
		int n = snprintf(want, sizeof(want), "echo:line %d of %d\n", i, LINES);

		xread_exact(c, line, (size_t)n);
		if (memcmp(line, want, (size_t)n) != 0)
			FAIL("reply %d: \"%.*s\", want \"%s\"", i, n, line, want);
	}
	xread_exact(c, got, BLOCK);
	CHECK_PATTERN(9, 0, got, BLOCK);
	xread_exact(c, line, 4);
	CHECK(memcmp(line, "bye\n", 4), ==, 0);
	CHECK(recv(c, line, 1, 0), ==, 0);   /* EOF, nothing else */
	CHECK(pthread_join(th, NULL), ==, 0);
	xwait_child_ok(pid);
	expect_accelerated(c);
	CHECK_OK(close(c));
	PASS();
}
