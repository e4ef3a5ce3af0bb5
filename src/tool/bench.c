/*
 * bench.c: `shunt bench`.  The measuring and reporting live in Python
 * (bench/shuntbench.py, with graphs by matplotlib); this only finds that
 * driver, installed beside the library (PREFIX/lib/shunt/) or in the
 * source tree beside the build directory, and execs python3 on it, telling
 * it which shunt command to measure.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tool/tool.h"

int cmd_bench(int argc, char **argv)
{
    char dir[PATH_MAX], self[PATH_MAX + 8], driver[PATH_MAX + 32];
    if (tool_self_dir(dir, sizeof dir) < 0 || snprintf(self, sizeof self, "%s/shunt", dir) >= (int)sizeof self) {
        fprintf(stderr, "shunt bench: cannot find where this command is\n");
        return 2;
    }
    const char *candidates[] = { "%s/../lib/shunt/shuntbench.py", "%s/../bench/shuntbench.py" };
    int found = 0;
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0] && !found; i++) {
        found = snprintf(driver, sizeof driver, candidates[i], dir) < (int)sizeof driver &&
                access(driver, R_OK) == 0;
    }
    if (!found) {
        fprintf(stderr, "shunt bench: cannot find shuntbench.py in %s/../lib/shunt or %s/../bench\n", dir, dir);
        return 2;
    }
    char **args = calloc((size_t)argc + 5, sizeof *args);
    if (!args) {
        fprintf(stderr, "shunt bench: out of memory\n");
        return 1;
    }
    int n = 0;
    args[n++] = "python3";
    args[n++] = driver;
    args[n++] = "--shunt";
    args[n++] = self;
    for (int i = 0; i < argc; i++)
        args[n++] = argv[i];
    args[n] = NULL;
    execvp(args[0], args);
    fprintf(stderr, "shunt bench: cannot run python3: %s\n", strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
