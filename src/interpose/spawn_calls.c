/*
 * spawn_calls.c: wrappers for posix_spawn_file_actions_*, so that
 * posix_spawn knows what its file actions do to the fds (the object is
 * opaque; core/process/spawn_plan.c keeps a copy of each one's actions).  Each
 * calls libc first and records only what libc accepted.
 */
#include "core/process/spawn_plan.h"
#include "interpose/wrap.h"

SHUNT_EXPORT int posix_spawn_file_actions_init(posix_spawn_file_actions_t *fa)
{
    SANDBOX_PASS(shunt_real.posix_spawn_file_actions_init(fa));
    int r = shunt_real.posix_spawn_file_actions_init(fa);
    if (r == 0)
        spawn_actions_init(fa);
    return r;
}

SHUNT_EXPORT int posix_spawn_file_actions_destroy(posix_spawn_file_actions_t *fa)
{
    SANDBOX_PASS(shunt_real.posix_spawn_file_actions_destroy(fa));
    spawn_actions_destroy(fa);
    return shunt_real.posix_spawn_file_actions_destroy(fa);
}

#define RECORD(call, kind, fd, newfd)                   \
    SANDBOX_PASS(call);                                 \
    int r_ = call;                                      \
    if (r_ == 0)                                        \
        spawn_actions_added(fa, kind, fd, newfd);       \
    return r_

SHUNT_EXPORT int posix_spawn_file_actions_addclose(posix_spawn_file_actions_t *fa, int fd)
{
    RECORD(shunt_real.posix_spawn_file_actions_addclose(fa, fd), SPAWN_CLOSE, fd, -1);
}

SHUNT_EXPORT int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t *fa, int fd, int newfd)
{
    RECORD(shunt_real.posix_spawn_file_actions_adddup2(fa, fd, newfd), SPAWN_DUP2, fd, newfd);
}

SHUNT_EXPORT int posix_spawn_file_actions_addopen(posix_spawn_file_actions_t *restrict fa, int fd,
                                                  const char *restrict path, int oflag, mode_t mode)
{
    RECORD(shunt_real.posix_spawn_file_actions_addopen(fa, fd, path, oflag, mode), SPAWN_OPEN, fd, -1);
}

SHUNT_EXPORT int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *fa, int from)
{
    RECORD(shunt_real.posix_spawn_file_actions_addclosefrom_np(fa, from), SPAWN_CLOSEFROM, from, -1);
}

/* These change no fd; recorded so that the count of actions stays libc's. */
SHUNT_EXPORT int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *restrict fa,
                                                      const char *restrict path)
{
    RECORD(shunt_real.posix_spawn_file_actions_addchdir_np(fa, path), SPAWN_OTHER, -1, -1);
}

SHUNT_EXPORT int posix_spawn_file_actions_addfchdir_np(posix_spawn_file_actions_t *fa, int fd)
{
    RECORD(shunt_real.posix_spawn_file_actions_addfchdir_np(fa, fd), SPAWN_OTHER, fd, -1);
}

SHUNT_EXPORT int posix_spawn_file_actions_addtcsetpgrp_np(posix_spawn_file_actions_t *fa, int tcfd)
{
    RECORD(shunt_real.posix_spawn_file_actions_addtcsetpgrp_np(fa, tcfd), SPAWN_OTHER, tcfd, -1);
}
