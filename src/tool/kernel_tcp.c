/*
 * kernel_tcp.c: one NETLINK_SOCK_DIAG dump of the TCP sockets of each
 * family, with their tcp_info (kernel_tcp.h).  Every length in the answer is
 * checked before it is used; a kernel too old for a field leaves it out.
 */
#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "registry/sockdiag.h"
#include "tool/kernel_tcp.h"

static int add(struct ktcp_view *view, const struct ktcp *k)
{
    if (view->n == view->cap) {
        size_t cap = view->cap ? view->cap * 2 : 256;
        struct ktcp *v = realloc(view->v, cap * sizeof *v);
        if (!v)
            return -ENOMEM;
        view->v = v;
        view->cap = cap;
    }
    view->v[view->n++] = *k;
    return 0;
}

static void take_info(struct ktcp *k, const struct tcp_info *info, size_t len)
{
    /* Only what the kernel's struct (of whatever age) includes. */
    if (len < offsetof(struct tcp_info, tcpi_segs_in) + sizeof info->tcpi_segs_in)
        return;
    k->have_info = true;
    k->bytes_acked = info->tcpi_bytes_acked;
    k->bytes_received = info->tcpi_bytes_received;
    k->segs_out = info->tcpi_segs_out;
    k->segs_in = info->tcpi_segs_in;
}

/* An address of the dump's id, as the registry writes them. */
static void take_addr(struct reg_addr *out, int family, const __be32 *ip, __be16 port)
{
    memset(out, 0, sizeof *out);
    if (family == AF_INET) {
        out->addr.s6_addr[10] = out->addr.s6_addr[11] = 0xff;
        memcpy(&out->addr.s6_addr[12], ip, 4);
    } else {
        memcpy(out->addr.s6_addr, ip, 16);
    }
    out->port = ntohs(port);
}

static int parse(struct ktcp_view *view, struct nlmsghdr *h, size_t len, bool *done)
{
    for (; NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
        if (h->nlmsg_type == NLMSG_DONE) {
            *done = true;
            return 0;
        }
        if (h->nlmsg_type == NLMSG_ERROR)
            return -EPROTO;
        if (h->nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
            continue;
        const struct inet_diag_msg *m = NLMSG_DATA(h);
        struct ktcp k = { .inode = m->idiag_inode, .state = m->idiag_state, .rqueue = m->idiag_rqueue,
                          .wqueue = m->idiag_wqueue };
        take_addr(&k.local, m->idiag_family, m->id.idiag_src, m->id.idiag_sport);
        take_addr(&k.peer, m->idiag_family, m->id.idiag_dst, m->id.idiag_dport);
        int alen = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof *m));
        for (struct rtattr *a = (struct rtattr *)(void *)((char *)m + NLMSG_ALIGN(sizeof *m)); RTA_OK(a, alen);
             a = RTA_NEXT(a, alen)) {
            if (a->rta_type == INET_DIAG_INFO) {
                struct tcp_info info;
                size_t payload = (size_t)RTA_PAYLOAD(a);
                size_t n = payload < sizeof info ? payload : sizeof info;
                memset(&info, 0, sizeof info);
                memcpy(&info, RTA_DATA(a), n);
                take_info(&k, &info, n);
            }
        }
        int r = add(view, &k);
        if (r < 0)
            return r;
    }
    return 0;
}

static int dump_family(struct ktcp_view *view, int family)
{
    struct inet_diag_req_v2 req;
    memset(&req, 0, sizeof req);
    req.sdiag_family = (unsigned char)family;
    req.idiag_states = ~0u;
    req.idiag_ext = 1u << (INET_DIAG_INFO - 1);
    int fd = sockdiag_send(&req, NLM_F_DUMP, 1);
    if (fd < 0)
        return fd;
    int r = 0;
    static char buf[65536] __attribute__((aligned(8)));
    bool done = false;
    for (int reads = 0; !done && reads < 100000; reads++) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
            r = n < 0 ? -errno : -EPROTO;
            break;
        }
        r = parse(view, (struct nlmsghdr *)(void *)buf, (size_t)n, &done);
        if (r < 0)
            break;
    }
    close(fd);
    return r;
}

int ktcp_dump(struct ktcp_view *view)
{
    int r4 = dump_family(view, AF_INET);
    int r6 = dump_family(view, AF_INET6);
    return r4 < 0 ? r4 : r6;
}

const struct ktcp *ktcp_find(const struct ktcp_view *view, uint64_t inode)
{
    for (size_t i = 0; i < view->n; i++)
        if (view->v[i].inode == inode)
            return &view->v[i];
    return NULL;
}

const char *ktcp_state_name(unsigned st)
{
    static const char *const names[] = { "?", "estab", "syn-sent", "syn-recv", "fin-wait-1", "fin-wait-2",
                                         "time-wait", "close", "close-wait", "last-ack", "listen", "closing" };
    return st < sizeof names / sizeof names[0] ? names[st] : "?";
}

void ktcp_free(struct ktcp_view *view)
{
    free(view->v);
    memset(view, 0, sizeof *view);
}
