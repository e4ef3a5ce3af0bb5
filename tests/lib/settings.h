/*
 * settings.h: a conformance test that needs one of shunt's settings at a value other than its
 * default (the path under test is off by default, for example) sets it for itself.
 *
 * Owns: test_setting(), which re-executes the test with the variable set when it is not set
 * already. shunt reads its settings when it is loaded, so setting the variable in a running
 * process would be too late; a re-exec keeps LD_PRELOAD and everything else of the mode the
 * runner chose. Call it first in main, before any socket exists. In plain mode the variable is
 * set too and means nothing.
 */
#ifndef SHUNT_TESTS_SETTINGS_H
#define SHUNT_TESTS_SETTINGS_H

#include "check.h"

#include <unistd.h>

static inline void test_setting(const char *name, const char *value)
{
	const char *now = getenv(name);

	if (now != NULL && strcmp(now, value) == 0)
		return;
	CHECK(setenv(name, value, 1), ==, 0);
	char *const args[] = { "/proc/self/exe", NULL };
	execv("/proc/self/exe", args);
	fprintf(stderr, "test_setting: re-exec with %s=%s: %s\n", name, value, strerror(errno));
	exit(TEST_EXIT_FAIL);
}

#endif
