/*
 * test_sockdiag.c: sockdiag_lookup finds the very socket of a 4-tuple.
 *
 * Real TCP connections on 127.0.0.1, on ::1, from an IPv6 socket to
 * ::ffff:127.0.0.1 and into a dual-stack listener; each end is looked up by
 * its (local, remote) tuple and must give the inode fstat gives for its fd
 * and our uid.  A tuple without a socket, including one whose local end is
 * a listening socket, gives -ENOENT.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "registry/sockdiag.h"

/* Until transport/channel.c exists the link needs this; the real one,
 * when linked, takes precedence over a weak definition. */
__attribute__((weak)) void channel_unlink(const char *name)
{
    (void)name;
}

static uint64_t fd_inode(int fd)
{
    struct stat st;
    CHECK(fstat(fd, &st), ==, 0);
    return (uint64_t)st.st_ino;
}

static void local_of(int fd, struct reg_addr *a)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    CHECK(getsockname(fd, (struct sockaddr *)&ss, &len), ==, 0);
    CHECK(reg_addr_from_sockaddr(a, (struct sockaddr *)&ss, len), ==, 0);
}

static void remote_of(int fd, struct reg_addr *a)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    CHECK(getpeername(fd, (struct sockaddr *)&ss, &len), ==, 0);
    CHECK(reg_addr_from_sockaddr(a, (struct sockaddr *)&ss, len), ==, 0);
}

/* A listener on addr (port 0); -1 if this family is not available here. */
static int listen_on(int family, const char *addr, int v6only)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 && (errno == EAFNOSUPPORT || errno == EPROTONOSUPPORT))
        return -1;
    CHECK(fd, >=, 0);
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    if (family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)&ss;
        s->sin_family = AF_INET;
        CHECK(inet_pton(AF_INET, addr, &s->sin_addr), ==, 1);
        len = sizeof *s;
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
        s->sin6_family = AF_INET6;
        CHECK(inet_pton(AF_INET6, addr, &s->sin6_addr), ==, 1);
        len = sizeof *s;
        CHECK(setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only), ==, 0);
    }
    if (bind(fd, (struct sockaddr *)&ss, len) < 0) {
        CHECK(errno, ==, EADDRNOTAVAIL);
        close(fd);
        return -1;
    }
    CHECK(listen(fd, 8), ==, 0);
    return fd;
}

/* Connects a new socket of family to addr at the listener's port. */
static int connect_to(int family, const char *addr, int lfd)
{
    struct reg_addr l;
    local_of(lfd, &l);
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(fd, >=, 0);
    struct sockaddr_storage ss;
    socklen_t len;
    memset(&ss, 0, sizeof ss);
    if (family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)&ss;
        s->sin_family = AF_INET;
        s->sin_port = htons(l.port);
        CHECK(inet_pton(AF_INET, addr, &s->sin_addr), ==, 1);
        len = sizeof *s;
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
        s->sin6_family = AF_INET6;
        s->sin6_port = htons(l.port);
        CHECK(inet_pton(AF_INET6, addr, &s->sin6_addr), ==, 1);
        len = sizeof *s;
    }
    CHECK(connect(fd, (struct sockaddr *)&ss, len), ==, 0);
    return fd;
}

/* Both ends of one connection are found by their own tuples. */
static void check_pair(const char *what, int cfd, int sfd)
{
    struct reg_addr src, dst;
    uint64_t inode = 0;
    uid_t uid = (uid_t)-1;

    local_of(cfd, &src);
    remote_of(cfd, &dst);
    CHECK(sockdiag_lookup(&src, &dst, &inode, &uid), ==, 0);
    CHECK(inode, ==, fd_inode(cfd));
    CHECK(uid, ==, geteuid());

    /* the same tuple seen from the server is the accepted socket */
    inode = 0;
    uid = (uid_t)-1;
    CHECK(sockdiag_lookup(&dst, &src, &inode, &uid), ==, 0);
    CHECK(inode, ==, fd_inode(sfd));
    CHECK(uid, ==, geteuid());

    /* a client port nobody uses: nothing */
    struct reg_addr other = src;
    other.port = (uint16_t)(src.port == 65535 ? 1024 : src.port + 1);
    int r = sockdiag_lookup(&other, &dst, &inode, &uid);
    if (r != -ENOENT) {
        /* the neighbouring port may be a real connection of this host */
        CHECK(r, ==, 0);
        CHECK(inode, !=, fd_inode(cfd));
    }
    printf("ok: %s\n", what);
}

/* A connection made from family cfam to caddr, into a listener of lfam on laddr. */
static void run_case(const char *what, int lfam, const char *laddr, int v6only, int cfam, const char *caddr)
{
    int lfd = listen_on(lfam, laddr, v6only);
    if (lfd < 0) {
        printf("skip: %s (address unavailable)\n", what);
        return;
    }
    int cfd = connect_to(cfam, caddr, lfd);
    int sfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    CHECK(sfd, >=, 0);
    check_pair(what, cfd, sfd);

    /* The local end of the listener with a remote that does not exist: the
     * kernel's lookup would hand back the listener; it must not count. */
    struct reg_addr lsrc, nodst;
    local_of(lfd, &lsrc);
    if (IN6_IS_ADDR_UNSPECIFIED(&lsrc.addr) ||
        (IN6_IS_ADDR_V4MAPPED(&lsrc.addr) && lsrc.addr.s6_addr32[3] == 0))
        local_of(sfd, &lsrc);   /* a wildcard listener: use the address it answered on */
    nodst = lsrc;
    nodst.port = 1;
    uint64_t inode = 0;
    uid_t uid = 0;
    CHECK(sockdiag_lookup(&lsrc, &nodst, &inode, &uid), ==, -ENOENT);

    close(cfd);
    close(sfd);
    close(lfd);
}

static void test_closed_port(void)
{
    /* a connection that existed and is gone (its ports closed before connect) */
    int lfd = listen_on(AF_INET, "127.0.0.1", 0);
    CHECK(lfd, >=, 0);
    struct reg_addr l;
    local_of(lfd, &l);
    close(lfd);
    struct reg_addr src = l, dst = l;
    src.port = l.port;
    dst.port = 9;   /* discard: no connection from the closed listener's port to it */
    uint64_t inode = 0;
    uid_t uid = 0;
    CHECK(sockdiag_lookup(&src, &dst, &inode, &uid), ==, -ENOENT);

    /* v6 tuple without socket */
    struct reg_addr s6, d6;
    memset(&s6, 0, sizeof s6);
    memset(&d6, 0, sizeof d6);
    s6.addr = in6addr_loopback;
    d6.addr = in6addr_loopback;
    s6.port = l.port;
    d6.port = 9;
    int r = sockdiag_lookup(&s6, &d6, &inode, &uid);
    CHECK(r, ==, -ENOENT);

    CHECK(sockdiag_lookup(NULL, &dst, &inode, &uid), ==, -EINVAL);
    printf("ok: tuples without a socket\n");
}

static void test_errno_untouched(void)
{
    int lfd = listen_on(AF_INET, "127.0.0.1", 0);
    int cfd = connect_to(AF_INET, "127.0.0.1", lfd);
    struct reg_addr src, dst;
    local_of(cfd, &src);
    remote_of(cfd, &dst);
    uint64_t inode;
    uid_t uid;
    errno = 4242;
    CHECK(sockdiag_lookup(&src, &dst, &inode, &uid), ==, 0);
    CHECK(errno, ==, 4242);
    dst.port = 9;
    errno = 4242;
    CHECK(sockdiag_lookup(&src, &dst, &inode, &uid), ==, -ENOENT);
    CHECK(errno, ==, 4242);
    close(cfd);
    close(lfd);
    printf("ok: errno untouched\n");
}

int main(void)
{
    run_case("ipv4 127.0.0.1", AF_INET, "127.0.0.1", 0, AF_INET, "127.0.0.1");
    run_case("ipv6 ::1", AF_INET6, "::1", 1, AF_INET6, "::1");
    run_case("ipv6 socket to ::ffff:127.0.0.1", AF_INET, "127.0.0.1", 0, AF_INET6, "::ffff:127.0.0.1");
    run_case("ipv4 into a dual-stack listener", AF_INET6, "::", 0, AF_INET, "127.0.0.1");
    run_case("ipv6 mapped into a dual-stack listener", AF_INET6, "::", 0, AF_INET6, "::ffff:127.0.0.1");
    run_case("ipv6 ::1 into a dual-stack listener", AF_INET6, "::", 0, AF_INET6, "::1");
    test_closed_port();
    test_errno_untouched();
    PASS();
}
