/*
 * sockdiag.c: one exact NETLINK_SOCK_DIAG lookup of a TCP socket by its
 * 4-tuple (refused when the asking thread's network namespace is not the one
 * named), or of a Unix socket's peer by inode (see sockdiag.h).
 *
 * Owns: building the inet_diag_req_v2, choosing the family, and reading the
 * kernel's answer, every length of which is checked before it is used.  A
 * fresh netlink socket per call (this runs once per accepted connection),
 * with a receive timeout so a lost answer costs a fallback, never a hang.
 *
 * Family: a socket of either family that talks IPv4 sits in the kernel's
 * IPv4 tables, so two v4-mapped addresses are asked as AF_INET first; should
 * the kernel not find it that way, the AF_INET6 question with the mapped
 * addresses follows.  Anything else is AF_INET6.
 *
 * Without NLM_F_DUMP the kernel looks the tuple up as it would for an
 * incoming segment, and falls back to a listening socket on the local
 * address and port; such an answer (or any answer for another tuple) is
 * treated as "no such socket".
 */
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#ifndef SO_NETNS_COOKIE
#define SO_NETNS_COOKIE 71   /* Linux 5.14; older kernels answer ENOPROTOOPT */
#endif

#include "base/log.h"
#include "base/real.h"
#include "registry/sockdiag.h"

#define SOCKDIAG_TIMEOUT_MS 1000
#define SOCKDIAG_MAX_READS  8

static bool mapped(const struct reg_addr *a)
{
    return IN6_IS_ADDR_V4MAPPED(&a->addr);
}

static void put_addr(__be32 out[4], const struct reg_addr *a, int family)
{
    memset(out, 0, 4 * sizeof(__be32));
    if (family == AF_INET)
        memcpy(out, &a->addr.s6_addr[12], 4);
    else
        memcpy(out, &a->addr, 16);
}

/* The address of a reply, normalised as the registry keeps addresses. */
static bool get_addr(struct reg_addr *out, const __be32 in[4], __be16 port, int family)
{
    memset(out, 0, sizeof *out);
    if (family == AF_INET) {
        out->addr.s6_addr[10] = 0xff;
        out->addr.s6_addr[11] = 0xff;
        memcpy(&out->addr.s6_addr[12], in, 4);
    } else if (family == AF_INET6) {
        memcpy(&out->addr, in, 16);
    } else {
        return false;
    }
    out->port = ntohs(port);
    return true;
}

static bool same(const struct reg_addr *a, const struct reg_addr *b)
{
    return a->port == b->port && memcmp(&a->addr, &b->addr, sizeof a->addr) == 0;
}

/* Reads the kernel's answer to request seq.  0, -ENOENT, or a negative errno. */
static int read_answer(int fd, uint32_t seq, const struct reg_addr *src, const struct reg_addr *dst,
                       uint64_t *inode, uid_t *uid)
{
    /* The answer is one inet_diag_msg and a few attributes; a bigger
     * datagram is cut short and refused (MSG_TRUNC). */
    union {
        struct nlmsghdr h;
        char b[8192];
    } buf;

    for (int reads = 0; reads < SOCKDIAG_MAX_READS; reads++) {
        struct sockaddr_nl from;
        struct iovec iov = { .iov_base = buf.b, .iov_len = sizeof buf.b };
        struct msghdr msg = {
            .msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &iov, .msg_iovlen = 1,
        };
        ssize_t n = shunt_real.recvmsg(fd, &msg, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return (errno == EAGAIN || errno == EWOULDBLOCK) ? -ETIMEDOUT : -errno;
        }
        if (msg.msg_flags & MSG_TRUNC)
            return -EPROTO;
        if (msg.msg_namelen < sizeof from || from.nl_family != AF_NETLINK || from.nl_pid != 0)
            continue;   /* not from the kernel */

        size_t len = (size_t)n;
        for (struct nlmsghdr *h = &buf.h; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
            if (h->nlmsg_seq != seq)
                continue;   /* an answer to something else */
            if (h->nlmsg_type == NLMSG_DONE)
                return -ENOENT;
            if (h->nlmsg_type == NLMSG_ERROR) {
                if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct nlmsgerr)))
                    return -EPROTO;
                const struct nlmsgerr *e = NLMSG_DATA(h);
                if (e->error == 0)
                    return -ENOENT;     /* an acknowledgement without an answer */
                /* error is a negative errno; anything else is garbage */
                return (e->error < 0 && e->error > -4096) ? e->error : -EPROTO;
            }
            if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
                continue;
            if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
                return -EPROTO;
            const struct inet_diag_msg *m = NLMSG_DATA(h);
            struct reg_addr got_src, got_dst;
            if (!get_addr(&got_src, m->id.idiag_src, m->id.idiag_sport, m->idiag_family) ||
                !get_addr(&got_dst, m->id.idiag_dst, m->id.idiag_dport, m->idiag_family))
                return -EPROTO;
            if (!same(&got_src, src) || !same(&got_dst, dst))
                return -ENOENT;     /* e.g. the listener on the local port */
            *inode = m->idiag_inode;
            *uid = (uid_t)m->idiag_uid;
            return 0;
        }
    }
    return -ETIMEDOUT;
}

/* A NETLINK_SOCK_DIAG socket with a receive timeout, REQ (LEN bytes, a
 * netlink header first) sent on it: its fd, or -errno. */
static int diag_request(const void *req, size_t len)
{
    int fd = shunt_real.socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (fd < 0)
        return -errno;
    struct timeval tv = { .tv_sec = SOCKDIAG_TIMEOUT_MS / 1000,
                          .tv_usec = (SOCKDIAG_TIMEOUT_MS % 1000) * 1000 };
    struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
    ssize_t n = 0;
    int e = 0;
    if (shunt_real.setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0) {
        e = errno;
    } else {
        do
            n = shunt_real.sendto(fd, req, len, 0, (struct sockaddr *)&kernel, sizeof kernel);
        while (n < 0 && errno == EINTR);
        if (n < 0 || (size_t)n != len)
            e = n < 0 ? errno : EIO;
    }
    if (e) {
        shunt_real.close(fd);
        return -e;
    }
    return fd;
}

int sockdiag_send(const struct inet_diag_req_v2 *r, uint16_t flags, uint32_t seq)
{
    struct {
        struct nlmsghdr h;
        struct inet_diag_req_v2 r;
    } req;
    memset(&req, 0, sizeof req);
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.h.nlmsg_flags = (uint16_t)(NLM_F_REQUEST | flags);
    req.h.nlmsg_seq = seq;
    req.r = *r;
    req.r.sdiag_protocol = IPPROTO_TCP;
    return diag_request(&req, sizeof req);
}

uint64_t sockdiag_netns_cookie(int fd)
{
    uint64_t cookie = 0;
    socklen_t len = sizeof cookie;
    int saved = errno;
    if (shunt_real.getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) < 0 || len != sizeof cookie)
        cookie = 0;
    errno = saved;
    return cookie;
}

static int query(int family, uint64_t netns, const struct reg_addr *src, const struct reg_addr *dst,
                 uint64_t *inode, uid_t *uid)
{
    static _Atomic uint32_t next_seq;
    uint32_t seq = atomic_fetch_add(&next_seq, 1) + 1;

    struct inet_diag_req_v2 r;
    memset(&r, 0, sizeof r);
    r.sdiag_family = (uint8_t)family;
    r.idiag_states = ~0u;
    r.id.idiag_sport = htons(src->port);
    r.id.idiag_dport = htons(dst->port);
    put_addr(r.id.idiag_src, src, family);
    put_addr(r.id.idiag_dst, dst, family);
    r.id.idiag_cookie[0] = INET_DIAG_NOCOOKIE;
    r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    int fd = sockdiag_send(&r, 0, seq);
    if (fd < 0)
        return fd;
    if (netns && sockdiag_netns_cookie(fd) != netns) {
        shunt_real.close(fd);
        return -EXDEV;
    }
    int res = read_answer(fd, seq, src, dst, inode, uid);
    shunt_real.close(fd);
    return res;
}

int sockdiag_lookup(const struct reg_addr *src, const struct reg_addr *dst, uint64_t *inode, uid_t *uid)
{
    return sockdiag_lookup_in(0, src, dst, inode, uid);
}

int sockdiag_lookup_in(uint64_t netns, const struct reg_addr *src, const struct reg_addr *dst, uint64_t *inode,
                       uid_t *uid)
{
    if (!src || !dst || !inode || !uid)
        return -EINVAL;
    int saved = errno;
    int r = -ENOENT;
    bool v4 = mapped(src) && mapped(dst);
    if (v4)
        r = query(AF_INET, netns, src, dst, inode, uid);
    if (!v4 || r == -ENOENT)
        r = query(AF_INET6, netns, src, dst, inode, uid);
    if (r < 0 && r != -ENOENT && r != -EXDEV)
        shunt_log(LOG_DEBUG, "sockdiag: lookup failed: %s", strerror(-r));
    errno = saved;
    return r;
}

/* Unix sockets (UNIX_DIAG_PEER of one socket, asked by inode).  The answer
 * is one unix_diag_msg with the attributes asked for; every length is
 * checked as above. */
int sockdiag_unix_peer(uint64_t ino, uint64_t *peer)
{
    static _Atomic uint32_t next_seq;
    uint32_t seq = atomic_fetch_add(&next_seq, 1) + 1;
    if (!peer || ino == 0 || ino > UINT32_MAX)
        return -EINVAL;   /* the request carries 32 bits of inode */
    int saved = errno;
    struct {
        struct nlmsghdr h;
        struct unix_diag_req r;
    } req;
    memset(&req, 0, sizeof req);
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.h.nlmsg_flags = NLM_F_REQUEST;
    req.h.nlmsg_seq = seq;
    req.r.sdiag_family = AF_UNIX;
    req.r.udiag_states = ~0u;
    req.r.udiag_ino = (uint32_t)ino;
    req.r.udiag_show = UDIAG_SHOW_PEER;
    req.r.udiag_cookie[0] = INET_DIAG_NOCOOKIE;
    req.r.udiag_cookie[1] = INET_DIAG_NOCOOKIE;
    int fd = diag_request(&req, sizeof req);
    if (fd < 0) {
        errno = saved;
        return fd;
    }
    int res = -ETIMEDOUT;
    ssize_t n;
    union {
        struct nlmsghdr h;
        char b[4096];
    } buf;
    for (int reads = 0; reads < SOCKDIAG_MAX_READS; reads++) {
        struct sockaddr_nl from;
        struct iovec iov = { .iov_base = buf.b, .iov_len = sizeof buf.b };
        struct msghdr msg = { .msg_name = &from, .msg_namelen = sizeof from, .msg_iov = &iov, .msg_iovlen = 1 };
        n = shunt_real.recvmsg(fd, &msg, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            res = (errno == EAGAIN || errno == EWOULDBLOCK) ? -ETIMEDOUT : -errno;
            goto out;
        }
        if (msg.msg_flags & MSG_TRUNC) {
            res = -EPROTO;
            goto out;
        }
        if (msg.msg_namelen < sizeof from || from.nl_family != AF_NETLINK || from.nl_pid != 0)
            continue;
        size_t len = (size_t)n;
        for (struct nlmsghdr *h = &buf.h; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
            if (h->nlmsg_seq != seq)
                continue;
            if (h->nlmsg_type == NLMSG_DONE) {
                res = -ENOENT;
                goto out;
            }
            if (h->nlmsg_type == NLMSG_ERROR) {
                const struct nlmsgerr *e = NLMSG_DATA(h);
                res = h->nlmsg_len < NLMSG_LENGTH(sizeof *e) ? -EPROTO
                      : e->error == 0                         ? -ENOENT
                      : (e->error < 0 && e->error > -4096)    ? e->error
                                                              : -EPROTO;
                goto out;
            }
            if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY)
                continue;
            if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct unix_diag_msg))) {
                res = -EPROTO;
                goto out;
            }
            const struct unix_diag_msg *m = NLMSG_DATA(h);
            if (m->udiag_family != AF_UNIX || m->udiag_ino != (uint32_t)ino) {
                res = -EPROTO;
                goto out;
            }
            res = -ENOENT;   /* no UNIX_DIAG_PEER: nobody at the other end */
            size_t alen = h->nlmsg_len - NLMSG_LENGTH(sizeof *m);
            const struct nlattr *a = (const struct nlattr *)((const char *)m + NLMSG_ALIGN(sizeof *m));
            while (alen >= sizeof *a && a->nla_len >= sizeof *a && a->nla_len <= alen) {
                if ((a->nla_type & NLA_TYPE_MASK) == UNIX_DIAG_PEER && a->nla_len >= NLA_HDRLEN + sizeof(uint32_t)) {
                    uint32_t p;
                    memcpy(&p, (const char *)a + NLA_HDRLEN, sizeof p);
                    if (p != 0) {
                        *peer = p;
                        res = 0;
                    }
                    break;
                }
                size_t step = NLA_ALIGN(a->nla_len);
                if (step >= alen)
                    break;
                alen -= step;
                a = (const struct nlattr *)((const char *)a + step);
            }
            goto out;
        }
    }
out:
    shunt_real.close(fd);
    errno = saved;
    return res;
}
