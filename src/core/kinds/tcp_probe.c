/*
 * tcp_probe.c: how the TCP kind takes up a socket the fd table has not
 * seen: an fd inherited across exec, received with SCM_RIGHTS, or another
 * fd of a socket this process already has.  The table calls these through
 * the hooks tcp_socket_init gives it (core/fd/fdtable.h).
 */
#include <sys/stat.h>

#include "base/real.h"
#include "core/conn/negotiate.h"
#include "core/conn/sockstat.h"
#include "core/fd/fdtable.h"
#include "core/kinds/tcp_socket.h"

struct shunt_sock *tcp_socket_probe(int fd, uint64_t inode, bool passed)
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
    struct shunt_sock *s = tcp_socket_new(fd, domain, -1);
    if (!s)
        return NULL;
    tcp_of(s)->inode = inode;   /* what tcp_socket_share knows it by */
    int listening = 0;
    len = sizeof listening;
    shunt_real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len);
    if (listening)
        negotiate_listen(tcp_of(s), fd);   /* an inherited listener: this process listens too */
    else
        negotiate_attach_inherited(tcp_of(s), fd, passed);
    sockstat_inherited(tcp_of(s), fd);
    return s;
}

struct shunt_sock *tcp_socket_make(int fd, uintptr_t lazy)
{
    struct shunt_sock *s = tcp_socket_new(fd, (lazy & FDT_LAZY_V6) ? AF_INET6 : AF_INET, (lazy & FDT_LAZY_NONBLOCK) != 0);
    if (s)
        tcp_of(s)->program_nodelay = (lazy & FDT_LAZY_NODELAY) != 0;
    return s;
}

struct known_socket {
    uint64_t inode;
    struct shunt_sock *found;
    int fd;
};

static void find_inode(int fd, void *ctx)
{
    struct known_socket *k = ctx;
    struct fdref f = fdt_get(fd);
    if (!k->found && f.sock && f.sock->kind == SOCK_TCP) {
        struct tcp_sock *t = tcp_of(f.sock);
        /* a connection on kernel TCP learns its id only when asked */
        if (!t->released && tcp_sock_id(t, fd) == k->inode) {
            sock_get(f.sock);
            k->found = f.sock;
            k->fd = fd;
        }
    }
    fdt_put(&f);
}

/* A socket made here whose object is not made yet (fdt_install_lazy): it
 * is made now if its inode is the one looked for, and found. */
static void find_lazy_inode(int fd, void *ctx)
{
    struct known_socket *k = ctx;
    struct stat st;
    if (k->found || fstat(fd, &st) < 0 || (uint64_t)st.st_ino != k->inode)
        return;
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->kind == SOCK_TCP) {
        tcp_of(f.sock)->inode = k->inode;
        sock_get(f.sock);
        k->found = f.sock;
        k->fd = fd;
    }
    fdt_put(&f);
}

struct shunt_sock *tcp_socket_share(int fd, uint64_t inode, bool passed)
{
    struct known_socket k = { inode, NULL, -1 };
    if (!inode)
        return NULL;
    fdt_for_each_object(0, ~0U, find_inode, &k);
    if (!k.found)
        fdt_for_each_lazy(find_lazy_inode, &k);   /* dup'ed behind our back before its first use */
    if (!k.found)
        return NULL;
    struct tcp_sock *t = tcp_of(k.found);
    if (passed && atomic_load(&t->path) != PATH_TCP && t->ch.hdr)
        atomic_fetch_sub(&t->ch.self->holders, 1u);   /* ours stands: never the last */
    sockstat_dup(k.fd, fd);
    return k.found;
}

static const struct fdt_probe_hooks probe_hooks = {
    .share = tcp_socket_share,
    .probe = tcp_socket_probe,
    .make = tcp_socket_make,
};

void tcp_socket_init(void)
{
    fdt_set_probe_hooks(&probe_hooks);
}
