/* getenv_as_libc: shunt wraps getenv (to answer UCX's own options while it loads its fabric
 * engine, src/interpose/env_calls.c); everywhere else it must answer exactly as glibc's does:
 * after setenv, putenv (the string itself, changed in place), unsetenv, clearenv and a
 * program's own environ array; the first of two entries of one name; "" and a name holding '='
 * (glibc matches it against "NAME=..." text); no answer for UCX_MEM_EVENTS unless set. */
#include "check.h"

#include <stdlib.h>
#include <string.h>

extern char **environ;

int main(void)
{
	CHECK(setenv("SHUNT_T_A", "one", 1), ==, 0);
	CHECK(strcmp(getenv("SHUNT_T_A"), "one"), ==, 0);
	CHECK(setenv("SHUNT_T_A", "two", 0), ==, 0); /* no overwrite */
	CHECK(strcmp(getenv("SHUNT_T_A"), "one"), ==, 0);
	CHECK(getenv("SHUNT_T_") == NULL, ==, 1);     /* a prefix is not a name */
	CHECK(getenv("SHUNT_T_AB") == NULL, ==, 1);
	CHECK(getenv("") == NULL, ==, 1);

	static char kept[] = "SHUNT_T_P=abc";
	CHECK(putenv(kept), ==, 0);
	char *p = getenv("SHUNT_T_P");
	CHECK(p == kept + 10, ==, 1);                 /* the very string */
	kept[10] = 'x';
	CHECK(strcmp(getenv("SHUNT_T_P"), "xbc"), ==, 0);

	CHECK(setenv("SHUNT_T_E", "a=b", 1), ==, 0);
	CHECK(strcmp(getenv("SHUNT_T_E=a"), "b"), ==, 0); /* glibc's answer for a name with '=' */

	CHECK(unsetenv("SHUNT_T_A"), ==, 0);
	CHECK(getenv("SHUNT_T_A") == NULL, ==, 1);
	CHECK(getenv("UCX_MEM_EVENTS") == NULL, ==, 1);

	static char *mine[] = { "SHUNT_T_X=first", "SHUNT_T_X=second", "PATH=/nowhere", NULL };
	environ = mine;
	CHECK(strcmp(getenv("SHUNT_T_X"), "first"), ==, 0);
	CHECK(strcmp(getenv("PATH"), "/nowhere"), ==, 0);
	CHECK(getenv("SHUNT_T_P") == NULL, ==, 1);
	CHECK(clearenv(), ==, 0);
	CHECK(getenv("PATH") == NULL, ==, 1);
	PASS();
}
