/*
 * io_calls.c: wrappers for the calls that move data.  Each describes the
 * call once (struct io_call) and hands it to the fd's recv or send.
 */
#include <string.h>

#include "core/conn/fabric_conn.h"
#include "core/conn/downgrade.h"
#include "core/conn/splice.h"
#include "core/fd/call_marks.h"
#include "core/fd/passthrough.h"
#include "core/kinds/tcp_socket.h"
#include "core/process/downgrade_points.h"
#include "core/process/holders.h"
#include "interpose/stdio_calls.h"
#include "interpose/wrap.h"

static ssize_t do_recv(int fd, struct io_call *c)
{
    int saved = errno;
    shunt_ensure_init();
    if (fdt_kernel_only(fd)) {
        struct fdref k = { .fd = fd, .sock = NULL, .ops = &passthrough_ops };
        return wrap_finish(pt_recv(&k, c), saved);
    }
    struct shunt_sock *marked;
    struct fdref f = fdt_get_call(fd, &marked);
    ssize_t r = f.ops->recv(&f, c);
    fdt_put_call(&f, marked);
    return wrap_finish(r, saved);
}

static ssize_t do_send(int fd, struct io_call *c)
{
    int saved = errno;
    shunt_ensure_init();
    if (fdt_kernel_only(fd)) {
        struct fdref k = { .fd = fd, .sock = NULL, .ops = &passthrough_ops };
        return wrap_finish(pt_send(&k, c), saved);
    }
    struct shunt_sock *marked;
    struct fdref f = fdt_get_call(fd, &marked);
    ssize_t r = f.ops->send(&f, c);
    fdt_put_call(&f, marked);
    return wrap_finish(r, saved);
}

/* The fds a message carries with SCM_RIGHTS: calls fn on each array. */
static void for_passed_fds(const struct msghdr *msg, void (*fn)(const int *fds, size_t n))
{
    if (!msg->msg_control || msg->msg_controllen < sizeof(struct cmsghdr))
        return;
    for (struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *)msg); c; c = CMSG_NXTHDR((struct msghdr *)msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        int fds[n ? n : 1];
        memcpy(fds, CMSG_DATA(c), n * sizeof(int));
        fn(fds, n);
    }
}

/* Received fds take numbers the table may remember wrongly: they are taken
 * up afresh, and an accelerated one attached to its channel. */
static void adopt(const int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        fdt_adopt_passed(fds[i]);
        stdio_std_changed(fds[i]);
    }
}

/* The Unix socket a message with SCM_RIGHTS leaves by (the callback
 * signature has no room for it). */
static SHUNT_TLS int passing_on;
static SHUNT_TLS bool passing_named;

static void leave_unless_shunt(const int *fds, size_t n)
{
    fabric_conn_leave_fds(fds, n, "SCM_RIGHTS");   /* the receiver has no engine of ours */
    downgrade_sending(fds, n, passing_on, passing_named);
}

static void hold_in_flight(const int *fds, size_t n)
{
    holders_in_flight(fds, n, 1);
}

static void release_in_flight(const int *fds, size_t n)
{
    holders_in_flight(fds, n, -1);
}

SHUNT_EXPORT ssize_t read(int fd, void *buf, size_t n)
{
    struct io_call c = { .kind = IO_READ, .buf = buf, .len = n };
    return do_recv(fd, &c);
}

SHUNT_EXPORT ssize_t readv(int fd, const struct iovec *iov, int iovcnt)
{
    struct io_call c = { .kind = IO_READV, .iov = iov, .iovcnt = iovcnt };
    return do_recv(fd, &c);
}

SHUNT_EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    struct io_call c = { .kind = IO_RECV, .buf = buf, .len = n, .flags = flags };
    return do_recv(fd, &c);
}

SHUNT_EXPORT ssize_t recvfrom(int fd, void *restrict buf, size_t n, int flags, __SOCKADDR_ARG addr,
                              socklen_t *restrict len)
{
    struct io_call c = { .kind = IO_RECVFROM, .buf = buf, .len = n, .flags = flags,
                         .addr = SOCKADDR_PTR(addr), .addrlen = len };
    return do_recv(fd, &c);
}

SHUNT_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    struct io_call c = { .kind = IO_RECVMSG, .msg = msg, .flags = flags };
    SANDBOX_PASS(shunt_real.recvmsg(fd, msg, flags));
    ssize_t r = do_recv(fd, &c);
    if (r >= 0) {
        for_passed_fds(msg, adopt);
        shunt_run_pending();   /* an accelerated socket reached a process with io_uring */
    }
    return r;
}

SHUNT_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags, struct timespec *tmo)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.recvmmsg(fd, vec, vlen, flags, tmo));
    struct shunt_sock *marked;
    struct fdref f = fdt_get_call(fd, &marked);
    int r = f.ops->recvmmsg(&f, vec, vlen, flags, tmo);
    fdt_put_call(&f, marked);
    for (int i = 0; i < r; i++)
        for_passed_fds(&vec[i].msg_hdr, adopt);
    shunt_run_pending();   /* an accelerated socket reached a process with io_uring */
    return (int)wrap_finish(r, saved);
}

SHUNT_EXPORT ssize_t write(int fd, const void *buf, size_t n)
{
    struct io_call c = { .kind = IO_WRITE, .buf = (void *)buf, .len = n };
    return do_send(fd, &c);
}

SHUNT_EXPORT ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
    struct io_call c = { .kind = IO_WRITEV, .iov = iov, .iovcnt = iovcnt };
    return do_send(fd, &c);
}

SHUNT_EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    struct io_call c = { .kind = IO_SEND, .buf = (void *)buf, .len = n, .flags = flags };
    return do_send(fd, &c);
}

SHUNT_EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
    struct io_call c = { .kind = IO_SENDTO, .buf = (void *)buf, .len = n, .flags = flags,
                         .dest = CONST_SOCKADDR_PTR(addr), .destlen = len };
    return do_send(fd, &c);
}

/* An accelerated socket sent with SCM_RIGHTS stays held while in flight,
 * so that the sender closing its copy does not end the connection. */
SHUNT_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    struct io_call c = { .kind = IO_SENDMSG, .msg = (struct msghdr *)msg, .flags = flags };
    SANDBOX_PASS(shunt_real.sendmsg(fd, msg, flags));
    if (msg) {
        passing_on = fd;
        passing_named = msg->msg_name != NULL && msg->msg_namelen > 0;
        for_passed_fds(msg, leave_unless_shunt);
        for_passed_fds(msg, hold_in_flight);
    }
    ssize_t r = do_send(fd, &c);
    if (r < 0 && msg) {
        int err = errno;
        for_passed_fds(msg, release_in_flight);
        errno = err;
    }
    return r;
}

/* DISPATCH for a data call: marked on its socket (call_marks.h). */
#define DISPATCH_CALL(type, fd, op, ...)                    \
    int saved_errno_ = errno;                              \
    shunt_ensure_init();                                   \
    struct shunt_sock *marked_;                            \
    struct fdref f_ = fdt_get_call(fd, &marked_);          \
    type r_ = f_.ops->op(&f_, __VA_ARGS__);                \
    fdt_put_call(&f_, marked_);                            \
    return (type)wrap_finish((long)r_, saved_errno_)

SHUNT_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int vlen, int flags)
{
    SANDBOX_PASS(shunt_real.sendmmsg(fd, vec, vlen, flags));
    DISPATCH_CALL(int, fd, sendmmsg, vec, vlen, flags);
}

/* Positioned I/O is never a socket operation: the kernel answers ESPIPE for
 * sockets, which is also the right answer for an accelerated one. */
SHUNT_EXPORT ssize_t pread(int fd, void *buf, size_t n, off_t off)
{
    shunt_ensure_init();
    return shunt_real.pread(fd, buf, n, off);
}

SHUNT_EXPORT ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    shunt_ensure_init();
    return shunt_real.pwrite(fd, buf, n, off);
}

SHUNT_EXPORT ssize_t pread64(int fd, void *buf, size_t n, off64_t off)
{
    shunt_ensure_init();
    return shunt_real.pread64(fd, buf, n, off);
}

SHUNT_EXPORT ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off)
{
    shunt_ensure_init();
    return shunt_real.pwrite64(fd, buf, n, off);
}

/* sendfile and splice are data calls on their socket: marked as recv and
 * send are (call_marks.h), so that a close of the socket by another
 * thread meanwhile leaves the connection to them. */
SHUNT_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off64_t *off, size_t count)
{
    SANDBOX_PASS(shunt_real.sendfile64(out_fd, in_fd, off, count));
    DISPATCH_CALL(ssize_t, out_fd, sendfile, in_fd, off, count);
}

SHUNT_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *off, size_t count)
{
    _Static_assert(sizeof(off_t) == sizeof(off64_t), "sendfile assumes a 64-bit off_t");
    SANDBOX_PASS(shunt_real.sendfile(out_fd, in_fd, off, count));
    return sendfile64(out_fd, in_fd, (off64_t *)off, count);
}

/* splice with an accelerated socket at either end goes through the ring
 * (core/conn/splice.c); anything else is the kernel's.  One end at most is a
 * socket (the other must be a pipe): the mark is that end's. */
SHUNT_EXPORT ssize_t splice(int fd_in, off64_t *off_in, int fd_out, off64_t *off_out, size_t len, unsigned int flags)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.splice(fd_in, off_in, fd_out, off_out, len, flags));
    struct shunt_sock *marked;
    struct fdref in = fdt_get_call(fd_in, &marked);
    struct fdref out = in.sock ? fdt_get(fd_out) : fdt_get_marked(fd_out, &shunt_call_mark.sock);
    ssize_t r;
    if (!splice_accelerated(&in, off_in, &out, off_out, len, flags, &r))
        r = sysret(shunt_real.splice(fd_in, off_in, fd_out, off_out, len, flags));
    fdt_put(&out);
    fdt_put_call(&in, marked);
    return wrap_finish(r, saved);
}
