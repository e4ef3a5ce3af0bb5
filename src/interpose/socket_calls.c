/*
 * socket_calls.c: wrappers for creating, naming, connecting and configuring
 * sockets.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <string.h>

#include "base/fd_place.h"
#include "core/kinds/tcp_socket.h"
#include "interpose/stdio_calls.h"
#include "interpose/wrap.h"

SHUNT_EXPORT int socket(int domain, int type, int protocol)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.socket(domain, type, protocol));
    int fd = shunt_real.socket(domain, type, protocol);
    if (emfile_retry(fd))
        fd = shunt_real.socket(domain, type, protocol);
    if (fd < 0)
        return -1;
    /* a TCP socket's object is made at its first use that needs one: a
     * connect that stays kernel TCP never does (fdtable.h, LAZY); the
     * engine's own are never the program's (passed through, and so is
     * what their listeners accept) */
    if (shunt_in_engine) {
        fd = fd_place_move(fd);   /* above the program's range */
        fdt_install_own(fd);
    } else if (tcp_socket_wanted(domain, type, protocol)) {
        fdt_install_lazy(fd, tcp_socket_lazy(domain, type));
    } else {
        fdt_install(fd, NULL);
    }
    errno = saved;
    return fd;
}

SHUNT_EXPORT int socketpair(int domain, int type, int protocol, int sv[2])
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.socketpair(domain, type, protocol, sv));
    int r = shunt_real.socketpair(domain, type, protocol, sv);
    if (emfile_retry(r))
        r = shunt_real.socketpair(domain, type, protocol, sv);
    if (r < 0)
        return -1;
    /* Only AF_UNIX has socket pairs: shunt leaves them to the kernel. */
    fdt_install(sv[0], NULL);
    fdt_install(sv[1], NULL);
    errno = saved;
    return 0;
}

SHUNT_EXPORT int bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
    if (fdt_lazy(fd))   /* nothing of shunt's in a bind (a client's, before its connect) */
        return shunt_real.bind(fd, addr, len);
    DISPATCH(int, fd, bind, CONST_SOCKADDR_PTR(addr), len);
}

SHUNT_EXPORT int listen(int fd, int backlog)
{
    DISPATCH(int, fd, listen, backlog);
}

/* accept and connect can put a connection on fd 0, 1 or 2 (a program that
 * closed them): its standard stream must then go through shunt. */
static int do_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
    int saved = errno;
    shunt_ensure_init();
    struct fdref f = fdt_get(fd);
    int r = f.ops->accept(&f, addr, len, flags);
    if (r == -EMFILE && private_fds_yield())
        r = f.ops->accept(&f, addr, len, flags);
    fdt_put(&f);
    stdio_std_changed(r);
    shunt_run_pending();   /* io_uring seen by the accept's look: the fail-safe, now */
    return (int)wrap_finish(r, saved);
}

SHUNT_EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *restrict len)
{
    SANDBOX_PASS(shunt_real.accept(fd, addr, len));
    return do_accept(fd, SOCKADDR_PTR(addr), len, 0);
}

SHUNT_EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *restrict len, int flags)
{
    SANDBOX_PASS(shunt_real.accept4(fd, addr, len, flags));
    return do_accept(fd, SOCKADDR_PTR(addr), len, flags);
}

SHUNT_EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.connect(fd, addr, len));
    int r;
    uintptr_t lazy = fdt_lazy(fd);
    if (!lazy || !tcp_connect_lazy(fd, lazy, CONST_SOCKADDR_PTR(addr), len, &r)) {
        struct fdref f = fdt_get(fd);
        r = f.ops->connect(&f, CONST_SOCKADDR_PTR(addr), len);
        fdt_put(&f);
    }
    if (r == 0 || r == -EINPROGRESS || r == -EINTR)
        stdio_std_changed(fd);
    shunt_run_pending();   /* io_uring seen by the connect's look: the fail-safe, now */
    return (int)wrap_finish(r, saved);
}

SHUNT_EXPORT int shutdown(int fd, int how)
{
    DISPATCH(int, fd, shutdown, how);
}

SHUNT_EXPORT int getsockopt(int fd, int level, int name, void *restrict val, socklen_t *restrict len)
{
    DISPATCH(int, fd, getsockopt, level, name, val, len);
}

SHUNT_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
    /* TCP_NODELAY before connect (a client's usual): kept in the LAZY entry */
    if (level == IPPROTO_TCP && name == TCP_NODELAY && val && len >= (socklen_t)sizeof(int) && fdt_lazy(fd)) {
        int saved = errno;
        SANDBOX_PASS(shunt_real.setsockopt(fd, level, name, val, len));
        int v;
        memcpy(&v, val, sizeof v);
        int r = (int)sysret(shunt_real.setsockopt(fd, level, name, val, len));
        if (r < 0 || fdt_lazy_set(fd, FDT_LAZY_NODELAY, v != 0))
            return (int)wrap_finish(r, saved);
        /* its object was made meanwhile: it keeps the program's value */
    }
    DISPATCH(int, fd, setsockopt, level, name, val, len);
}

/* The names are the kernel's on every path; a new socket's (Python asks at
 * socket()) needs no object made for it. */
SHUNT_EXPORT int getsockname(int fd, __SOCKADDR_ARG addr, socklen_t *restrict len)
{
    if (fdt_lazy(fd))
        return shunt_real.getsockname(fd, addr, len);
    DISPATCH(int, fd, getsockname, SOCKADDR_PTR(addr), len);
}

SHUNT_EXPORT int getpeername(int fd, __SOCKADDR_ARG addr, socklen_t *restrict len)
{
    if (fdt_lazy(fd))
        return shunt_real.getpeername(fd, addr, len);
    DISPATCH(int, fd, getpeername, SOCKADDR_PTR(addr), len);
}
