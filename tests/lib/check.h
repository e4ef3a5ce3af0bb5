/*
 * check.h: the tiny test framework of shunt's conformance and integration tests.
 *
 * Owns: the CHECK family of macros (print file:line, the expression and both values, then
 * exit 1), the exit-status conventions (0 pass, 1 fail, 77 skip), the rule for skips under CI
 * (SKIP and MISSING), expect_accelerated(), which proves that a connection ran on the path
 * the test mode claims, and expect_fallback(), which checks why one that must fall back did.
 *
 * Header-only, C11 + _GNU_SOURCE, link with -ldl (dlsym). Not built on <assert.h>, which
 * vanishes under NDEBUG. Every macro works from any thread; exit() ends the whole process. In
 * a forked child a failed CHECK exits the child with status 1, so the parent must check the
 * child's status.
 */
#ifndef SHUNT_TESTS_CHECK_H
#define SHUNT_TESTS_CHECK_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_EXIT_PASS 0
#define TEST_EXIT_FAIL 1
#define TEST_EXIT_SKIP 77

/* CHECK(a, op, b): both sides are evaluated once and compared as long long. */
#define CHECK(a, op, b)                                                              \
	do {                                                                         \
		long long check_a_ = (long long)(a);                                 \
		long long check_b_ = (long long)(b);                                 \
		if (!(check_a_ op check_b_)) {                                       \
			fprintf(stderr,                                              \
				"%s:%d: CHECK(%s %s %s) failed: %lld %s %lld is false " \
				"(errno now %d: %s)\n",                              \
				__FILE__, __LINE__, #a, #op, #b, check_a_, #op, check_b_, \
				errno, strerror(errno));                             \
			exit(TEST_EXIT_FAIL);                                        \
		}                                                                    \
	} while (0)

/* CHECK_ERRNO(call, e): the call must return -1 with errno == e. */
#define CHECK_ERRNO(call, expected_errno)                                            \
	do {                                                                         \
		errno = 0;                                                           \
		long long check_r_ = (long long)(call);                              \
		int check_e_ = errno;                                                \
		int check_x_ = (expected_errno);                                     \
		if (check_r_ != -1 || check_e_ != check_x_) {                        \
			fprintf(stderr,                                              \
				"%s:%d: CHECK_ERRNO(%s, %s) failed: returned %lld, errno %d " \
				"(%s); expected -1, errno %d (%s)\n",                \
				__FILE__, __LINE__, #call, #expected_errno, check_r_, \
				check_e_, strerror(check_e_), check_x_,              \
				strerror(check_x_));                                 \
			exit(TEST_EXIT_FAIL);                                        \
		}                                                                    \
	} while (0)

/* CHECK_OK(call): the call must not return -1. Evaluates to the call's result. */
#define CHECK_OK(call)                                                               \
	__extension__({                                                              \
		__typeof__(call) check_r_ = (call);                                  \
		if (check_r_ == -1) {                                                \
			int check_e_ = errno;                                        \
			fprintf(stderr, "%s:%d: CHECK_OK(%s) failed: errno %d (%s)\n", \
				__FILE__, __LINE__, #call, check_e_, strerror(check_e_)); \
			exit(TEST_EXIT_FAIL);                                        \
		}                                                                    \
		check_r_;                                                            \
	})

/* FAIL(fmt, ...): unconditional failure with a message. */
#define FAIL(...)                                                                    \
	do {                                                                         \
		fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                \
		fprintf(stderr, __VA_ARGS__);                                        \
		fprintf(stderr, "\n");                                               \
		exit(TEST_EXIT_FAIL);                                                \
	} while (0)

/* SKIP(fmt, ...): the behaviour cannot be tested on this machine, for a reason a machine may
 * have for good (a kernel without the call, no IPv6, one CPU): a skip, also under CI. The
 * runner prints this line. docs/testing.md lists every such skip and why. */
#define SKIP(...)                                                                    \
	do {                                                                         \
		fflush(stdout);                                                      \
		fprintf(stderr, "SKIP: ");                                           \
		fprintf(stderr, __VA_ARGS__);                                        \
		fprintf(stderr, "\n");                                               \
		exit(TEST_EXIT_SKIP);                                                \
	} while (0)

/* Under CI: the environment variable CI is set to anything but "", "0", "false" or "no"
 * (hosted CI sets CI=true; so does .ci/run). tests/integration/shunttest.py's in_ci() is the
 * same rule. */
static inline int test_in_ci(void)
{
	const char *ci = getenv("CI");

	return ci != NULL && *ci != '\0' && strcmp(ci, "0") != 0 && strcmp(ci, "false") != 0 &&
	       strcmp(ci, "no") != 0;
}

/* MISSING(fmt, ...): something the machine that tests shunt is expected to provide is not
 * there (a writable /dev/shm, a pty, enough fds): a skip on a developer's machine, a failure
 * under CI, where it would silently hide the test. */
#define MISSING(...)                                                                 \
	do {                                                                         \
		if (test_in_ci()) {                                                  \
			fflush(stdout);                                              \
			fprintf(stderr, "%s:%d: FAIL: missing under CI (CI=%s): ", __FILE__, \
				__LINE__, getenv("CI"));                             \
			fprintf(stderr, __VA_ARGS__);                                \
			fprintf(stderr, "\n");                                       \
			exit(TEST_EXIT_FAIL);                                        \
		}                                                                    \
		SKIP(__VA_ARGS__);                                                   \
	} while (0)

#define PASS()                                                                       \
	do {                                                                         \
		fflush(stdout);                                                      \
		exit(TEST_EXIT_PASS);                                                \
	} while (0)

/* Test modes, from SHUNT_TEST_MODE (set by tests/run_programs.py). crossns is accelerated
 * with the client and the server in two network namespaces (net.h): test_mode() says
 * TEST_MODE_ACCELERATED for it, test_crossns() tells it apart. fabric and fabric-tcp put
 * the ends in the same two namespaces (test_crossns() says so too), their connections on
 * the fabric engine (SHUNT_FABRIC=only): test_mode() says TEST_MODE_FABRIC, whose
 * expect_accelerated is the path "fabric", and whose counters are not a channel's
 * (test_mode_accelerated() is false: what a test checks of shunt's rings is not checked). */
enum test_mode { TEST_MODE_PLAIN, TEST_MODE_PASSTHROUGH, TEST_MODE_ACCELERATED, TEST_MODE_FABRIC };

static inline int test_fabric(void)
{
	const char *m = getenv("SHUNT_TEST_MODE");

	return m != NULL && (strcmp(m, "fabric") == 0 || strcmp(m, "fabric-tcp") == 0);
}

static inline int test_crossns(void)
{
	const char *m = getenv("SHUNT_TEST_MODE");

	return m != NULL && (strcmp(m, "crossns") == 0 || test_fabric());
}

static inline enum test_mode test_mode(void)
{
	const char *m = getenv("SHUNT_TEST_MODE");

	if (m == NULL || *m == '\0' || strcmp(m, "plain") == 0)
		return TEST_MODE_PLAIN;
	if (strcmp(m, "passthrough") == 0)
		return TEST_MODE_PASSTHROUGH;
	if (test_fabric())
		return TEST_MODE_FABRIC;
	if (strcmp(m, "accelerated") == 0 || test_crossns())
		return TEST_MODE_ACCELERATED;
	FAIL("SHUNT_TEST_MODE=%s: expected plain, passthrough, accelerated, crossns, fabric or fabric-tcp", m);
}

static inline int test_mode_accelerated(void)
{
	return test_mode() == TEST_MODE_ACCELERATED;
}

/*
 * expect_accelerated(fd): call on both ends of every TCP connection the test is about, once
 * the connection is established (after accept returned). plain: libshunt must not be loaded
 * (the symbol shunt_fd_accelerated is absent); passthrough: it is loaded and says 0 for this
 * fd; accelerated: it says 1; fabric: the connection's path is "fabric" (shunt_fd_path: the
 * ends move onto the engine with the first bytes, so before them it may not say 1 yet).
 */
static inline void expect_accelerated_mode(int fd, const char *file, int line, int stayed)
{
	enum test_mode mode = test_mode();
	int (*accelerated)(int);
	int got;

	*(void **)&accelerated = dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
	if (mode == TEST_MODE_PLAIN) {
		if (accelerated != NULL) {
			fprintf(stderr, "%s:%d: mode plain, but shunt_fd_accelerated is present "
					"(libshunt.so is loaded)\n", file, line);
			exit(TEST_EXIT_FAIL);
		}
		return;
	}
	if (accelerated == NULL) {
		fprintf(stderr, "%s:%d: mode %s, but shunt_fd_accelerated is absent "
				"(libshunt.so is not loaded)\n", file, line,
			getenv("SHUNT_TEST_MODE"));
		exit(TEST_EXIT_FAIL);
	}
	if (mode == TEST_MODE_FABRIC) {
		const char *(*path_of)(int);
		const char *(*reason_of)(int);
		const char *path, *reason;

		*(void **)&path_of = dlsym(RTLD_DEFAULT, "shunt_fd_path");
		*(void **)&reason_of = dlsym(RTLD_DEFAULT, "shunt_fd_fallback");
		path = path_of ? path_of(fd) : NULL;
		reason = reason_of ? reason_of(fd) : NULL;
		/* on the engine; or off it by design, each end saying why: it left it before a call
		 * the engine does not carry (fork, exec, SCM_RIGHTS, stdio ...), a process that got it
		 * so knows it as inherited, the server's hello never went (another process held its
		 * socket, the client's end came first) and its client read the server's first bytes
		 * without one (no_listener, as from a server without shunt), the peer closed before
		 * this end could check its proof (fabric_gone). A connection that should
		 * have been on it and is not says "kernel TCP: fabric" in its log, which the runner
		 * fails the test for. */
		static const char *const by_design[] = { "fabric_left", "fabric_shared", "inherited",
							 "withdrawn", "no_listener", "fabric_gone", "fabric_forked",
							 "fabric_no_fd", "fabric_fsize", "fabric_fork_busy",
							 "fabric_no_room" };
		if (path != NULL && strcmp(path, "fabric") == 0)
			return;
		for (size_t i = 0; !stayed && path && reason && strcmp(path, "tcp") == 0 &&
				   i < sizeof(by_design) / sizeof(by_design[0]); i++)
			if (strcmp(reason, by_design[i]) == 0)
				return;
		fprintf(stderr, "%s:%d: mode %s, but fd %d's path is %s (%s)\n", file, line,
			getenv("SHUNT_TEST_MODE"), fd, path ? path : "(none)", reason ? reason : "-");
		exit(TEST_EXIT_FAIL);
	}
	got = accelerated(fd);
	if (got != (mode == TEST_MODE_ACCELERATED)) {
		fprintf(stderr, "%s:%d: mode %s, but shunt_fd_accelerated(%d) returned %d\n",
			file, line, getenv("SHUNT_TEST_MODE"), fd, got);
		exit(TEST_EXIT_FAIL);
	}
}

static inline void expect_accelerated_at(int fd, const char *file, int line)
{
	expect_accelerated_mode(fd, file, line, 0);
}

/* expect_accelerated, where in the fabric modes no reason to have left the engine is by
 * design: for a test whose calls the engine carries (a leave would pass expect_accelerated). */
#define expect_stayed_accelerated(fd) expect_accelerated_mode((fd), __FILE__, __LINE__, 1)

/* The parenthesised name keeps the function addressable beside the macro. */
static inline void(expect_accelerated)(int fd)
{
	expect_accelerated_at(fd, "(unknown)", 0);
}
#define expect_accelerated(fd) expect_accelerated_at((fd), __FILE__, __LINE__)

/*
 * shunt_counter(fd, name): a counter of this end of an accelerated connection (shunt.h lists
 * the names), or -1 when libshunt.so is not loaded or the fd is not accelerated. Only
 * meaningful in accelerated mode; tests use it to prove which path the bytes took.
 */
static inline long long shunt_counter(int fd, const char *name)
{
	long long (*get)(int, const char *);

	*(void **)&get = dlsym(RTLD_DEFAULT, "shunt_fd_counter");
	return get ? get(fd, name) : -1;
}

/* The fallback reason shunt records for fd's connection (the key `shunt stat` shows: "" while
 * it is accelerated), or NULL when libshunt.so is not loaded or has no record of it. */
static inline const char *fallback_of(int fd)
{
	const char *(*get)(int);

	*(void **)&get = dlsym(RTLD_DEFAULT, "shunt_fd_fallback");
	return get ? get(fd) : NULL;
}

/* In accelerated mode: fd's connection is on kernel TCP, and the reason recorded for it is key
 * (a fallback a test expects: "io_uring", "downgraded", ...). Other modes: nothing to check. */
#define expect_fallback(fd, key)                                                             \
	do {                                                                                 \
		if (test_mode_accelerated()) {                                               \
			const char *got_ = fallback_of(fd);                                  \
			int (*acc_)(int);                                                    \
			*(void **)&acc_ = dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");       \
			CHECK(acc_ != NULL && acc_(fd) == 0, ==, 1);                         \
			if (got_ == NULL || strcmp(got_, (key)) != 0)                        \
				FAIL("fd %d: fallback reason \"%s\", expected \"%s\"", (fd), \
				     got_ ? got_ : "(none)", (key));                         \
		}                                                                            \
	} while (0)

#endif /* SHUNT_TESTS_CHECK_H */
