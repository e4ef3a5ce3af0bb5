/*
 * engine_fd_calls.c: wrappers for the calls the fabric engine (UCX) makes
 * fds of its own with, that no other wrapper sees: eventfd, pipe, pipe2 and
 * shm_open (its shared-memory lanes' files stay open).
 *
 * Made while the calling thread is inside shunt's calls into the engine
 * (base/self.h, shunt_in_engine), such an fd is moved above the program's
 * range (base/fd_place.h), so that the program meets EMFILE at the count
 * it would without shunt (emfile_count: 11 numbers early before), and
 * marked as shunt's own (FDT_OWN), so that a program that closes every fd
 * it does not know leaves it to the engine (threads_shutdown_blocked: UCX's
 * async thread aborted the process when its fds went).  The
 * program's own calls pass straight through, for the price of one
 * thread-local load.  The engine's sockets, epoll sets and what its
 * listeners accept are placed by their own wrappers (socket_calls.c,
 * epoll_calls.c, core/fd/passthrough.c).
 */
#include "base/fd_place.h"
#include "base/self.h"
#include "core/fd/fdtable.h"
#include "interpose/wrap.h"

/* fd, made in the engine's calls: placed, and marked as shunt's own. */
static int engine_own(int fd)
{
    if (fd < 0 || !shunt_in_engine)
        return fd;
    fd = fd_place_move(fd);
    fdt_install_own(fd);
    return fd;
}

SHUNT_EXPORT int eventfd(unsigned int count, int flags)
{
    return engine_own(shunt_real.eventfd(count, flags));
}

static int pipe_placed(int fds[2], int r)
{
    if (r == 0 && shunt_in_engine) {
        fds[0] = engine_own(fds[0]);
        fds[1] = engine_own(fds[1]);
    }
    return r;
}

SHUNT_EXPORT int pipe(int fds[2])
{
    return pipe_placed(fds, shunt_real.pipe(fds));
}

SHUNT_EXPORT int pipe2(int fds[2], int flags)
{
    return pipe_placed(fds, shunt_real.pipe2(fds, flags));
}

SHUNT_EXPORT int shm_open(const char *name, int oflag, mode_t mode)
{
    return engine_own(shunt_real.shm_open(name, oflag, mode));
}
