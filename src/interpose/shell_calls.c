/*
 * shell_calls.c: wrappers for system and popen, which start /bin/sh -c CMD
 * with environ through libc's internal posix_spawn, out of sight of the
 * posix_spawn and exec wrappers.  The shell gets every fd that is not
 * close-on-exec (popen's pipe on its stdin or stdout): before the real call
 * those sockets move back to kernel TCP if the shell will not run shunt,
 * or count it in as a holder if it will (core/process/spawn_plan.c).  The real
 * function does the rest, so its return values and system's handling of
 * SIGINT, SIGQUIT and SIGCHLD stay libc's.
 */
#include <paths.h>
#include <stdlib.h>

#include "core/conn/downgrade.h"
#include "core/process/downgrade_points.h"
#include "core/process/spawn_plan.h"
#include "interpose/wrap.h"

extern char **environ;

static void before_shell(struct spawn_plan *plan, int replaced_fd)
{
    shunt_ensure_init();
    if (shunt_in_vfork_child)
        downgrade_before_exec(_PATH_BSHELL, -1, environ, false);
    else
        spawn_prepare_shell(plan, replaced_fd);
}

SHUNT_EXPORT int system(const char *command)
{
    if (!command)   /* libc asks the shell to run "exit 0": it touches no fd */
        return shunt_real.system(command);
    SANDBOX_PASS(shunt_real.system(command));
    struct spawn_plan plan = { 0 };
    before_shell(&plan, -1);
    int r = shunt_real.system(command);
    int err = errno;
    /* Whether the shell started is not told apart from its exit status 127
     * (libc reports a failed spawn so): the holds stay, as a hold never
     * attached only delays the FIN marker, while one given back that the
     * shell did take would end the connection under the other holders. */
    spawn_finish(&plan, true);
    errno = err;
    return r;
}

/* The child's fd that carries the pipe, or -1 for a mode libc refuses
 * (one of 'r' and 'w', and 'e'). */
static int popen_child_fd(const char *mode)
{
    bool r = false, w = false;
    for (; *mode; mode++)
        if (*mode == 'r')
            r = true;
        else if (*mode == 'w')
            w = true;
        else if (*mode != 'e')
            return -1;
    return r == w ? -1 : r ? STDOUT_FILENO : STDIN_FILENO;
}

SHUNT_EXPORT FILE *popen(const char *command, const char *mode)
{
    int fd = mode ? popen_child_fd(mode) : -1;
    if (fd < 0)
        return shunt_real.popen(command, mode);   /* fails without a spawn */
    SANDBOX_PASS(shunt_real.popen(command, mode));
    struct spawn_plan plan = { 0 };
    before_shell(&plan, fd);
    FILE *f = shunt_real.popen(command, mode);
    int err = errno;
    spawn_finish(&plan, f != NULL);
    errno = err;
    return f;
}
