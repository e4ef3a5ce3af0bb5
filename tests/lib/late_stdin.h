/*
 * late_stdin.h: a connection made the process's stdin, whose server (a thread of the process)
 * writes its first line only LATE_STDIN_MS after the client began to read: for the stdio_*
 * conformance tests of a client still awaiting its fabric hello (stdio_wide_late_hello,
 * stdio_wscanf_late_hello).
 *
 * Header-only; needs check.h and net.h first, link with -pthread.
 */
#ifndef SHUNT_TESTS_LATE_STDIN_H
#define SHUNT_TESTS_LATE_STDIN_H

#include <pthread.h>
#include <string.h>

#define LATE_STDIN_MS 300

struct late_stdin {
	int c, s, saved;   /* the client (on fd 0 meanwhile), the server, the stdin before */
	const char *line;
	pthread_t th;
};

static inline void *late_stdin_server(void *arg)
{
	struct late_stdin *l = arg;

	sleep_ms(LATE_STDIN_MS);
	xwrite_all(l->s, l->line, strlen(l->line));
	return NULL;
}

/* The connection on fd 0 (stdin's flags cleared), its server started; an alarm of 20 s
 * bounds the read that follows. */
static inline void late_stdin_begin(struct late_stdin *l, const char *line)
{
	l->line = line;
	tcp_pair_checked(AF_INET, &l->c, &l->s);
	l->saved = CHECK_OK(fcntl(0, F_DUPFD_CLOEXEC, 10));
	CHECK(dup2(l->c, 0), ==, 0);
	clearerr(stdin);
	CHECK(pthread_create(&l->th, NULL, late_stdin_server, l), ==, 0);
	alarm(20);
}

/* After the read: the server joined, stdin as it was, the client closed, and the server
 * sees its end. */
static inline void late_stdin_end(struct late_stdin *l)
{
	alarm(0);
	CHECK(pthread_join(l->th, NULL), ==, 0);
	CHECK(dup2(l->saved, 0), ==, 0);
	CHECK_OK(close(l->saved));
	clearerr(stdin);
	CHECK_OK(close(l->c));
	char b;

	CHECK(recv(l->s, &b, 1, 0), ==, 0);
	CHECK_OK(close(l->s));
}

#endif
