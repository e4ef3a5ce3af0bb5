/*
 * wrap.h: what every wrapper shares: the generated prototypes, the errno
 * convention and the look-up-and-dispatch pattern.
 *
 * A wrapper saves errno on entry and restores it on success, so nothing
 * shunt does inside leaks into the program's errno; on failure it sets errno
 * from the negative result of the operation.
 */
#ifndef SHUNT_WRAP_H
#define SHUNT_WRAP_H

#include "core/fd/fdtable.h"
#include "interpose/init.h"
#include "base/real.h"
#include "core/conn/private_fds.h"

#define SHUNT_EXPORT __attribute__((visibility("default")))

/* Every wrapper must match libc's prototype exactly: these say so to the compiler. */
#define SHUNT_SYS(ret, name, params, args, sysno) SHUNT_EXPORT ret name params;
#define SHUNT_LIB(ret, name, params) SHUNT_EXPORT ret name params;
#include "base/calls.def"
#undef SHUNT_SYS
#undef SHUNT_LIB

static inline long wrap_finish(long r, int saved_errno)
{
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    errno = saved_errno;
    return r;
}

/* A sandboxed process (core/process/sandbox.c) makes no system call of
 * shunt's own: from the wrapper that begins with this the call goes to libc
 * as it is.  The fd table answers passthrough there too (fdtable.h), so the
 * wrappers that only look an fd up and dispatch (DISPATCH) need nothing
 * more. */
#define SANDBOX_PASS(call)                                 \
    do {                                                   \
        shunt_ensure_init();                               \
        if (__builtin_expect(shunt_sandboxed(), 0))        \
            return call;                                   \
    } while (0)

/* The whole body of a wrapper that hands the call to the fd's operations
 * (a fail-safe its lookup or listen asked for runs before it returns). */
#define DISPATCH(type, fd, op, ...)                        \
    int saved_errno_ = errno;                              \
    shunt_ensure_init();                                   \
    struct fdref f_ = fdt_get(fd);                         \
    type r_ = f_.ops->op(&f_, __VA_ARGS__);                \
    fdt_put(&f_);                                          \
    shunt_run_pending();                                   \
    return (type)wrap_finish((long)r_, saved_errno_)

/* The kernel is about to close fd; when it is the object's last fd in this
 * process, the object is told. */
static inline void release_fd(int fd, struct shunt_sock *s)
{
    if (atomic_fetch_sub(&s->fds, 1) != 1)
        return;
    struct fdref f = { .fd = fd, .sock = s, .ops = s->ops };
    s->ops->release_fd(&f);
}

/* Around a libc call that closes fd (close, fclose, freopen): the number is
 * held in the fd table until the call is over, so that no other thread's
 * open reuses it meanwhile, and the object learns when this was its last
 * fd.  fd < 0 (a stream without one) holds nothing. */
static inline struct shunt_sock *closing_begin(int fd)
{
    struct shunt_sock *s = fd >= 0 ? fdt_close_begin(fd) : NULL;
    if (s)
        release_fd(fd, s);
    return s;
}

static inline void closing_end(int fd, struct shunt_sock *s)
{
    if (fd >= 0)
        fdt_close_end(fd);
    if (s)
        sock_put(s);
}

/* A call that makes an fd failed with EMFILE (r: -1 with errno): true if
 * shunt gave back a number of the program's range it held (the local wake,
 * when the hard limit left no room above the program's: base/fd_place.h),
 * so that the call may be tried again and meet EMFILE only where the kernel
 * alone would. */
static inline bool emfile_retry(long r)
{
    return r < 0 && errno == EMFILE && private_fds_yield();
}

#endif
