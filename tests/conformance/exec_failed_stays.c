/* exec_failed_stays: an exec that fails changes nothing. A child holding an accelerated socket
 * tries execve on a path that does not exist, one under a file (ENOTDIR) and a file that is not
 * executable (EACCES), as a shell walking $PATH does, then exec's itself for real: the new
 * program still has the connection accelerated (it was moved back to kernel TCP before each
 * attempt), and the bytes waiting on it are intact. */
#include "check.h"
#include "net.h"

#include <stdlib.h>
#include <sys/stat.h>

static int exec_child(int fd)
{
	char buf[8];

	expect_accelerated(fd);
	xread_exact(fd, buf, 4);
	CHECK(memcmp(buf, "ping", 4), ==, 0);
	xwrite_all(fd, "pong", 4);
	expect_accelerated(fd);
	CHECK_OK(close(fd));
	return 0;
}

int main(int argc, char **argv)
{
	char fdarg[16], plain[] = "/tmp/shunt-exec-failed-XXXXXX", under[64], buf[8];
	char *args[] = { argv[0], "--exec-child", fdarg, NULL };
	int a, sa, tmp;
	pid_t pid;

	if (argc == 3 && strcmp(argv[1], "--exec-child") == 0)
		return exec_child(atoi(argv[2]));
	alarm(20);
	tmp = CHECK_OK(mkstemp(plain));   /* mode 0600: not executable */
	CHECK_OK(close(tmp));
	snprintf(under, sizeof(under), "%s/prog", plain);

	tcp_pair_checked(AF_INET, &a, &sa);
	xwrite_all(sa, "ping", 4);   /* waiting, unread, across the failed attempts */
	snprintf(fdarg, sizeof(fdarg), "%d", a);
	fflush(NULL);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		CHECK_OK(close(sa));
		CHECK_ERRNO(execve("/nonexistent-shunt-dir/prog", args, environ), ENOENT);
		CHECK_ERRNO(execve(under, args, environ), ENOTDIR);
		CHECK_ERRNO(execve(plain, args, environ), EACCES);   /* root too: no x bit at all */
		execve("/proc/self/exe", args, environ);
		fprintf(stderr, "exec /proc/self/exe: %s\n", strerror(errno));
		_exit(1);
	}
	CHECK_OK(close(a));
	xread_exact(sa, buf, 4);
	CHECK(memcmp(buf, "pong", 4), ==, 0);
	expect_accelerated(sa);
	xwait_child_ok(pid);
	CHECK(recv(sa, buf, 1, 0), ==, 0);
	CHECK_OK(close(sa));
	CHECK_OK(unlink(plain));
	PASS();
}
