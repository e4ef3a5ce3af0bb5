/*
 * tcp_socket.c: the TCP socket kind.  It owns the state of a TCP socket as
 * shunt sees it.  Until a transport is attached every operation is the
 * kernel's (the fallback path), so a program sees plain TCP.
 */
#include <netinet/in.h>
#include <stdlib.h>

#include "core/fdtable.h"
#include "core/log.h"
#include "core/passthrough.h"
#include "core/tcp_socket.h"
#include "interpose/real.h"

bool tcp_socket_wanted(int domain, int type, int protocol)
{
    return (domain == AF_INET || domain == AF_INET6) && (type & 0xf) == SOCK_STREAM &&
           (protocol == 0 || protocol == IPPROTO_TCP);
}

struct shunt_sock *tcp_socket_new(int fd, int domain)
{
    struct shunt_sock *s = calloc(1, sizeof *s);
    if (!s) {
        shunt_log(LOG_WARN, "fd %d: no memory for socket state; it passes through", fd);
        return NULL;
    }
    atomic_init(&s->refs, 1);
    s->ops = &tcp_ops;
    s->domain = domain;
    return s;
}

struct shunt_sock *tcp_socket_probe(int fd)
{
    int domain = 0, type = 0, protocol = 0;
    socklen_t len = sizeof domain;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0)
        return NULL;
    len = sizeof type;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
        return NULL;
    len = sizeof protocol;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) < 0)
        return NULL;
    if (!tcp_socket_wanted(domain, type, protocol))
        return NULL;
    shunt_log(LOG_DEBUG, "fd %d: found an inherited TCP socket", fd);
    return tcp_socket_new(fd, domain);
}

int tcp_socket_accelerated(const struct shunt_sock *s)
{
    (void)s;
    return 0;
}

static int tcp_accept(struct fdref *f, struct sockaddr *a, socklen_t *len, int flags)
{
    int fd = (int)sysret(shunt_real.accept4(f->fd, a, len, flags));
    if (fd >= 0)
        fdt_install(fd, tcp_socket_new(fd, f->sock->domain));
    return fd;
}

static void tcp_destroy(struct shunt_sock *s)
{
    free(s);
}

const struct sock_ops tcp_ops = {
    .kind = "tcp",
    .recv = pt_recv,
    .send = pt_send,
    .recvmmsg = pt_recvmmsg,
    .sendmmsg = pt_sendmmsg,
    .sendfile = pt_sendfile,
    .bind = pt_bind,
    .listen = pt_listen,
    .accept = tcp_accept,
    .connect = pt_connect,
    .shutdown = pt_shutdown,
    .getsockopt = pt_getsockopt,
    .setsockopt = pt_setsockopt,
    .getsockname = pt_getsockname,
    .getpeername = pt_getpeername,
    .fcntl = pt_fcntl,
    .ioctl = pt_ioctl,
    .release_fd = pt_release_fd,
    .destroy = tcp_destroy,
};
