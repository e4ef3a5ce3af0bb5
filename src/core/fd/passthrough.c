/*
 * passthrough.c: the operations of an fd shunt does not manage.  Each one
 * replays the program's call on libc unchanged, so the program sees exactly
 * the kernel's answer.  The TCP socket kind uses them too, for everything it
 * leaves to the kernel.
 */
#include "base/fd_place.h"
#include "core/fd/fdtable.h"
#include "core/fd/passthrough.h"
#include "base/real.h"

SHUNT_TLS uint64_t pt_kernel_touches;

ssize_t pt_recv(struct fdref *f, struct io_call *c)
{
    pt_kernel_touches++;   /* a reader makes room for the writer */
    switch (c->kind) {
    case IO_READ: return sysret(shunt_real.read(f->fd, c->buf, c->len));
    case IO_READV: return sysret(shunt_real.readv(f->fd, c->iov, c->iovcnt));
    case IO_RECV: return sysret(shunt_real.recv(f->fd, c->buf, c->len, c->flags));
    case IO_RECVFROM:
        return sysret(shunt_real.recvfrom(f->fd, c->buf, c->len, c->flags, c->addr, c->addrlen));
    case IO_RECVMSG: return sysret(shunt_real.recvmsg(f->fd, c->msg, c->flags));
    default: return -EINVAL;
    }
}

ssize_t pt_send(struct fdref *f, struct io_call *c)
{
    pt_kernel_touches++;
    switch (c->kind) {
    case IO_WRITE: return sysret(shunt_real.write(f->fd, c->buf, c->len));
    case IO_WRITEV: return sysret(shunt_real.writev(f->fd, c->iov, c->iovcnt));
    case IO_SEND: return sysret(shunt_real.send(f->fd, c->buf, c->len, c->flags));
    case IO_SENDTO:
        return sysret(shunt_real.sendto(f->fd, c->buf, c->len, c->flags, c->dest, c->destlen));
    case IO_SENDMSG: return sysret(shunt_real.sendmsg(f->fd, c->msg, c->flags));
    default: return -EINVAL;
    }
}

int pt_recvmmsg(struct fdref *f, struct mmsghdr *vec, unsigned int n, int flags, struct timespec *tmo)
{
    pt_kernel_touches++;
    return (int)sysret(shunt_real.recvmmsg(f->fd, vec, n, flags, tmo));
}

int pt_sendmmsg(struct fdref *f, struct mmsghdr *vec, unsigned int n, int flags)
{
    pt_kernel_touches++;
    return (int)sysret(shunt_real.sendmmsg(f->fd, vec, n, flags));
}

ssize_t pt_sendfile(struct fdref *out, int in_fd, off64_t *off, size_t count)
{
    pt_kernel_touches++;
    return sysret(shunt_real.sendfile64(out->fd, in_fd, off, count));
}

int pt_bind(struct fdref *f, const struct sockaddr *a, socklen_t len)
{
    return (int)sysret(shunt_real.bind(f->fd, a, len));
}

int pt_listen(struct fdref *f, int backlog)
{
    return (int)sysret(shunt_real.listen(f->fd, backlog));
}

int pt_accept(struct fdref *f, struct sockaddr *a, socklen_t *len, int flags)
{
    int fd = (int)sysret(shunt_real.accept4(f->fd, a, len, flags));
    if (fd >= 0 && fdt_is_own(f->fd)) {
        fd = fd_place_move(fd);   /* the engine's listener (UCX's TCP lanes): its connections are its own */
        fdt_install_own(fd);
    } else if (fd >= 0) {
        fdt_install(fd, NULL);
    }
    return fd;
}

int pt_connect(struct fdref *f, const struct sockaddr *a, socklen_t len)
{
    return (int)sysret(shunt_real.connect(f->fd, a, len));
}

int pt_shutdown(struct fdref *f, int how)
{
    pt_kernel_touches++;
    return (int)sysret(shunt_real.shutdown(f->fd, how));
}

int pt_getsockopt(struct fdref *f, int level, int name, void *val, socklen_t *len)
{
    return (int)sysret(shunt_real.getsockopt(f->fd, level, name, val, len));
}

int pt_setsockopt(struct fdref *f, int level, int name, const void *val, socklen_t len)
{
    return (int)sysret(shunt_real.setsockopt(f->fd, level, name, val, len));
}

int pt_getsockname(struct fdref *f, struct sockaddr *a, socklen_t *len)
{
    return (int)sysret(shunt_real.getsockname(f->fd, a, len));
}

int pt_getpeername(struct fdref *f, struct sockaddr *a, socklen_t *len)
{
    return (int)sysret(shunt_real.getpeername(f->fd, a, len));
}

int pt_fcntl(struct fdref *f, int cmd, void *arg)
{
    return (int)sysret(shunt_real.fcntl(f->fd, cmd, arg));
}

int pt_ioctl(struct fdref *f, unsigned long req, void *arg)
{
    return (int)sysret(shunt_real.ioctl(f->fd, req, arg));
}

void pt_release_fd(struct fdref *f)
{
    (void)f;
}

static void pt_destroy(struct shunt_sock *s)
{
    (void)s;
}

const struct sock_ops passthrough_ops = {
    .kind = "passthrough",
    .recv = pt_recv,
    .send = pt_send,
    .recvmmsg = pt_recvmmsg,
    .sendmmsg = pt_sendmmsg,
    .sendfile = pt_sendfile,
    .bind = pt_bind,
    .listen = pt_listen,
    .accept = pt_accept,
    .connect = pt_connect,
    .shutdown = pt_shutdown,
    .getsockopt = pt_getsockopt,
    .setsockopt = pt_setsockopt,
    .getsockname = pt_getsockname,
    .getpeername = pt_getpeername,
    .fcntl = pt_fcntl,
    .ioctl = pt_ioctl,
    .release_fd = pt_release_fd,
    .destroy = pt_destroy,
};
