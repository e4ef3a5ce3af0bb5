/*
 * downgrade_points.c: the moments at which an end of an accelerated
 * connection leaves for a program that does not run shunt, and which ends
 * leave: an exec (the sockets that survive it), a vfork child's exec (without
 * touching the parent's fd table), sockets in SCM_RIGHTS messages queued for
 * this process at its exec, and sockets this process sends with SCM_RIGHTS.
 * Also the taking up again, after an exec under shunt, of the channels
 * inherited.  How an end leaves (the protocol with its peer) is downgrade.c.
 */
#include <dirent.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>

#include "base/log.h"
#include "base/real.h"
#include "core/conn/downgrade.h"
#include "core/conn/negotiate.h"
#include "core/conn/private_fds.h"
#include "core/fd/fdtable.h"
#include "core/process/downgrade_points.h"
#include "core/process/runs_shunt.h"

static void leave_if_survives(int fd, void *arg)
{
    (void)arg;
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->kind == SOCK_TCP) {
        struct tcp_sock *t = tcp_of(f.sock);
        int fl = shunt_real.fcntl(fd, F_GETFD);
        if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr && fl >= 0 && !(fl & FD_CLOEXEC))
            downgrade_leave(t, fd);
        if ((t->syn_ours || t->cross_listener) && fl >= 0 && !(fl & FD_CLOEXEC))
            negotiate_listener_leaves(t, fd);   /* its SYNs would be nobody's */
    }
    fdt_put(&f);
}

/* Calls fn for every fd open in this process, read from /proc/self/fd
 * with getdents64 and a buffer on the stack: no allocation, so that a vfork
 * child may do it too. */
static void for_each_open_fd(void (*fn)(int fd, void *ctx), void *ctx)
{
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return;
    char buf[4096];
    long n;
    while ((n = shunt_syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            struct dirent64 *e = (struct dirent64 *)(buf + off);
            off += e->d_reclen;
            char *end;
            long fd = strtol(e->d_name, &end, 10);
            if (*end || end == e->d_name || fd == dir || fd < 0 || fd > INT_MAX)
                continue;
            if (private_fd_is((int)fd))
                continue;   /* shunt's own (a closed socket's private copy, the local wake) */
            fn((int)fd, ctx);
        }
    }
    shunt_real.close(dir);
}

/* Looking an fd up attaches an accelerated socket this image inherited
 * and never used (a shell's redirection, say), so that it moves back too. */
static void take_up(int fd, void *ctx)
{
    (void)ctx;
    struct fdref f = fdt_get(fd);
    fdt_put(&f);
}

void downgrade_take_up_inherited(void)
{
    for_each_open_fd(take_up, NULL);
}

struct by_inode {
    uint64_t inode;
    struct tcp_sock *found;     /* with a reference */
};

static void match_inode(int fd, void *arg)
{
    struct by_inode *b = arg;
    struct fdref f = fdt_get(fd);
    if (!b->found && f.sock && f.sock->kind == SOCK_TCP) {
        struct tcp_sock *t = tcp_of(f.sock);
        if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr && t->inode == b->inode) {
            sock_get(f.sock);
            b->found = t;
        }
    }
    fdt_put(&f);
}

/* A vfork child has fds of its own (it may have moved a socket onto its
 * stdin) but shares its parent's table, which it must not change: each of
 * its sockets that survives exec is found among the parent's objects by
 * inode. */
static void leave_in_vfork_child(int fd, void *ctx)
{
    (void)ctx;
    struct stat st;
    int fl = shunt_real.fcntl(fd, F_GETFD);
    if (fl < 0 || (fl & FD_CLOEXEC) || fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
        return;
    struct by_inode b = { (uint64_t)st.st_ino, NULL };
    shunt_in_vfork_child = false;   /* read the parent's table, as any of its threads may, changing nothing */
    fdt_for_each_object(0, ~0U, match_inode, &b);
    shunt_in_vfork_child = true;
    if (b.found) {
        downgrade_leave(b.found, fd);
        sock_put(&b.found->base);
    }
}

/* Closes an fd this file opened (a peeked one), as the close wrapper would. */
static void close_own(int fd)
{
    struct shunt_sock *s = fdt_close_begin(fd);
    if (s && atomic_fetch_sub(&s->fds, 1) == 1) {
        struct fdref f = { .fd = fd, .sock = s, .ops = s->ops };
        s->ops->release_fd(&f);
    }
    shunt_real.close(fd);
    fdt_close_end(fd);
    if (s)
        sock_put(s);
}

/* A socket found in a message still queued for this process: taken up as
 * a received one (attached without counting: the sender counted its
 * receiver in), moved back if accelerated (that hold goes then), closed. */
static void leave_peeked(int fd)
{
    fdt_adopt_passed(fd);
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->kind == SOCK_TCP) {
        struct tcp_sock *t = tcp_of(f.sock);
        if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr) {
            shunt_log(LOG_INFO, "fd %d: an accelerated socket waits in a Unix socket's queue for the program without shunt", fd);
            downgrade_leave(t, fd);
        }
    }
    fdt_put(&f);
    close_own(fd);
}

#define PEEK_BYTES 65536
#define PEEKS_MAX 4096

/*
 * A Unix socket that the new program keeps may hold messages sent to this
 * process while it still ran shunt (the sender judged its receivers then):
 * an accelerated socket among them would reach a program that reads its
 * doorbells.  Every queued message is peeked (MSG_PEEK walks the queue with
 * SO_PEEK_OFF, restored afterwards; the fds it installs are close-on-exec)
 * and each accelerated socket found moves back first.  Nothing is taken
 * off the queue.
 */
static void leave_queued(int fd, void *ctx)
{
    char *data = ctx;
    int v = 0, fl = shunt_real.fcntl(fd, F_GETFD);
    socklen_t l = sizeof v;
    if (fl < 0 || (fl & FD_CLOEXEC) || shunt_real.getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &l) < 0 || v != AF_UNIX)
        return;
    l = sizeof v;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &l) < 0 || v)
        return;
    int queued = 0;
    if (shunt_real.ioctl(fd, SIOCINQ, &queued) < 0 || queued <= 0)
        return;
    int old_off = -1, zero = 0;
    l = sizeof old_off;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &old_off, &l) < 0)
        old_off = -1;
    bool walk = shunt_real.setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &zero, sizeof zero) == 0;
    union {
        char b[CMSG_SPACE(253 * sizeof(int))];   /* SCM_MAX_FD */
        struct cmsghdr align;
    } ctl;
    for (int i = 0; i < PEEKS_MAX; i++) {
        struct iovec iov = { data, PEEK_BYTES };
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b };
        ssize_t r = shunt_real.recvmsg(fd, &m, MSG_PEEK | MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        bool fds = false;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
                continue;
            size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t k = 0; k < n; k++) {
                int got;
                memcpy(&got, CMSG_DATA(c) + k * sizeof(int), sizeof got);
                leave_peeked(got);
                fds = true;
            }
        }
        if (m.msg_flags & MSG_CTRUNC)
            shunt_log(LOG_WARN, "fd %d: a queued message carries fds this process could not take to look at", fd);
        if (!walk || (r == 0 && !fds))
            break;
    }
    if (walk)
        shunt_real.setsockopt(fd, SOL_SOCKET, SO_PEEK_OFF, &old_off, sizeof old_off);
}

void downgrade_queued_before_exec(void)
{
    char *data = malloc(PEEK_BYTES);
    if (!data)
        return;
    for_each_open_fd(leave_queued, data);
    free(data);
}

#define VFORK_HOLDS_MAX 64

struct vfork_holds {
    struct tcp_sock *t[VFORK_HOLDS_MAX];    /* with a reference each */
    int n;
};

/* A vfork child about to exec a program under shunt: its parent counted
 * the new program in for every channel with an fd that is not
 * close-on-exec in the parent (vfork.c); one the child moved onto another
 * fd (a close-on-exec socket dup2'd onto its stdin) is counted here, once
 * per channel, so that it outlives the parent's close.  Should the exec
 * fail, the hold stays (a hold never attached only delays the FIN marker). */
static void hold_in_vfork_child(int fd, void *ctx)
{
    struct vfork_holds *h = ctx;
    struct stat st;
    int fl = shunt_real.fcntl(fd, F_GETFD);
    if (fl < 0 || (fl & FD_CLOEXEC) || fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
        return;
    struct by_inode b = { (uint64_t)st.st_ino, NULL };
    shunt_in_vfork_child = false;   /* read the parent's table, changing nothing */
    fdt_for_each_object(0, ~0U, match_inode, &b);
    shunt_in_vfork_child = true;
    if (!b.found)
        return;
    bool counted = b.found->survives_exec;   /* by the parent, before vfork */
    for (int i = 0; i < h->n && !counted; i++)
        counted = h->t[i] == b.found;
    if (counted || h->n == VFORK_HOLDS_MAX) {
        sock_put(&b.found->base);
        return;
    }
    tcp_sock_hold_more(b.found, 1u);   /* the parent's object: its end is shared from now on */
    h->t[h->n++] = b.found;
}

void downgrade_vfork_child_leave(void)
{
    for_each_open_fd(leave_in_vfork_child, NULL);
}

void downgrade_before_exec(const char *path, int fd, char *const envp[], bool search)
{
    if (runs_shunt_exec_fails(path, fd, search))
        return;
    if (runs_shunt_exec(path, fd, envp, search)) {
        if (shunt_in_vfork_child) {
            struct vfork_holds h = { .n = 0 };
            for_each_open_fd(hold_in_vfork_child, &h);
            for (int i = 0; i < h.n; i++)
                sock_put(&h.t[i]->base);   /* the parent's object: no reference may leave with the exec */
        }
        return;
    }
    if (shunt_in_vfork_child) {
        downgrade_vfork_child_leave();
        return;
    }
    downgrade_queued_before_exec();
    for_each_open_fd(take_up, NULL);
    fdt_for_each_object(0, ~0U, leave_if_survives, NULL);
}

void downgrade_sending(const int *fds, size_t n, int unix_fd, bool named)
{
    int verdict = -1;
    for (size_t i = 0; i < n; i++) {
        struct fdref f = fdt_get(fds[i]);
        if (f.sock && f.sock->kind == SOCK_TCP) {
            struct tcp_sock *t = tcp_of(f.sock);
            if (atomic_load(&t->path) != PATH_TCP && t->ch.hdr) {
                if (verdict < 0)
                    verdict = runs_shunt_receiver(unix_fd, named);
                if (!verdict)
                    downgrade_leave(t, fds[i]);
            }
        }
        fdt_put(&f);
    }
}
