/*
 * shunt.c: the `shunt` command.  `shunt run` puts libshunt.so into
 * LD_PRELOAD, keeping what is there, and execs the program; it checks the
 * SHUNT_* settings first so that a typo is an error, not a surprise.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/settings.h"
#include "tool/tool.h"

#ifndef SHUNT_VERSION
#define SHUNT_VERSION "0.0.0"
#endif

extern char **environ;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: shunt COMMAND [ARGS]\n"
            "\n"
            "Runs unmodified socket programs over shared memory when both ends of a TCP\n"
            "connection on this host run under shunt; everything else stays kernel TCP.\n"
            "\n"
            "commands:\n"
            "  run [--] PROGRAM [ARGS]   run PROGRAM with libshunt.so preloaded\n"
            "  stat [-p PID] [--json] [--watch [S]]\n"
            "                            this user's sockets under shunt: path, reason, counters\n"
            "  bench [--quick] [--out DIR] [--netns]\n"
            "                            kernel TCP, Unix sockets, shunt and a shared-memory floor\n"
            "                            measured side by side: tables, CSV, graphs (bench --help);\n"
            "                            --netns: between two network namespaces (root)\n"
            "  fabric enable|disable|status\n"
            "                            (root) mark SYNs so that shunt can find its peer in another\n"
            "                            network namespace (fabric --help)\n"
            "\n"
            "options:\n"
            "  -h, --help      this text (shunt run --help lists the settings)\n"
            "  -V, --version   the version\n");
}

static void run_usage(FILE *out)
{
    fprintf(out,
            "usage: shunt run [--] PROGRAM [ARGS]\n"
            "\n"
            "Runs PROGRAM with libshunt.so added to LD_PRELOAD (entries already there are\n"
            "kept). Children and exec'd programs inherit it through the environment.\n"
            "\n"
            "settings (environment variables):\n");
    for (size_t i = 0; i < shunt_setting_count; i++) {
        const struct setting_def *d = &shunt_setting_defs[i];
        fprintf(out, "  %-16s default %-6s %s\n  %-16s %s\n", d->name, d->def[0] ? d->def : "\"\"", d->values,
                "", d->help);
    }
}

/* The directory this command runs from (the build tree, or PREFIX/bin). */
int tool_self_dir(char *out, size_t outlen)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        return -1;
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (!slash || (size_t)(slash - self) >= outlen)
        return -1;
    *slash = 0;
    memcpy(out, self, (size_t)(slash - self) + 1);
    return 0;
}

/* libshunt.so sits beside the command in the build tree, or in ../lib when installed. */
static int find_library(char *out, size_t outlen)
{
    char self[PATH_MAX];
    if (tool_self_dir(self, sizeof self) < 0)
        return -1;
    const char *candidates[] = { "%s/libshunt.so", "%s/../lib/libshunt.so" };
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, candidates[i], self);
        if (access(path, R_OK) == 0 && realpath(path, out)) {
            (void)outlen;
            return 0;
        }
    }
    return -1;
}

static int already_preloaded(const char *list, const char *lib)
{
    size_t len = strlen(lib);
    for (const char *p = list; (p = strstr(p, lib)); p += len) {
        bool starts = p == list || p[-1] == ' ' || p[-1] == ':';
        bool ends = p[len] == 0 || p[len] == ' ' || p[len] == ':';
        if (starts && ends)
            return 1;
    }
    return 0;
}

static int cmd_run(int argc, char **argv)
{
    int i = 0;
    if (i < argc && (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))) {
        run_usage(stdout);
        return 0;
    }
    if (i < argc && !strcmp(argv[i], "--"))
        i++;
    if (i >= argc) {
        run_usage(stderr);
        return 2;
    }

    struct shunt_settings s;
    char err[400];
    if (settings_load(&s, err, sizeof err) < 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    char unknown[128];
    if (settings_unknown(environ, unknown, sizeof unknown)) {
        fprintf(stderr, "shunt: unknown setting %s (shunt run --help lists them)\n", unknown);
        return 2;
    }

    char lib[PATH_MAX];
    if (find_library(lib, sizeof lib) < 0) {
        fprintf(stderr, "shunt: cannot find libshunt.so beside this command or in ../lib\n");
        return 1;
    }
    const char *old = getenv("LD_PRELOAD");
    if (!old || !*old) {
        setenv("LD_PRELOAD", lib, 1);
    } else if (!already_preloaded(old, lib)) {
        size_t len = strlen(old) + strlen(lib) + 2;
        char *both = malloc(len);
        if (!both) {
            fprintf(stderr, "shunt: out of memory\n");
            return 1;
        }
        snprintf(both, len, "%s %s", old, lib);
        setenv("LD_PRELOAD", both, 1);
        free(both);
    }
    execvp(argv[i], &argv[i]);
    fprintf(stderr, "shunt: cannot run %s: %s\n", argv[i], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
        printf("shunt %s\n", SHUNT_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "run"))
        return cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "stat"))
        return cmd_stat(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench"))
        return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(cmd, "fabric"))
        return cmd_fabric(argc - 2, argv + 2);
    fprintf(stderr, "shunt: unknown command '%s' (shunt --help lists them)\n", cmd);
    return 2;
}
