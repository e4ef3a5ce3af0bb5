/*
 * api.c: the small query API libshunt.so exports beside the intercepted
 * calls, for tests and tools that want to know what shunt did with an fd.
 */
#include "core/fdtable.h"
#include "core/init.h"
#include "core/tcp_socket.h"
#include "shunt.h"

/* 1 if fd is a connection on an accelerated path, 0 if not (kernel TCP, or
 * not a socket shunt manages). */
__attribute__((visibility("default"))) int shunt_fd_accelerated(int fd)
{
    shunt_ensure_init();
    struct fdref f = fdt_get(fd);
    int r = f.sock && f.sock->ops == &tcp_ops ? tcp_socket_accelerated(f.sock, fd) : 0;
    fdt_put(&f);
    return r;
}
