/*
 * pingpong_conn.c: pingpong's connections: reading and writing whole
 * messages on a socket or the shared-memory floor, the socket options, the
 * listener and its address, connecting and accepting.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "floor_ring.h"
#include "pingpong.h"
#include "shunt_query.h"

_Noreturn void die(const char *what)
{
    perror(what);
    exit(1);
}

/* 1: all n bytes; 0: end of stream first; -1: error. */
int conn_recv(struct conn *c, void *buf, size_t n)
{
    if (c->fd < 0)
        return floor_recv(c->rx, c->peer, buf, n);
    char *b = buf;
    while (n > 0) {
        ssize_t r = read(c->fd, b, n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            return 0;
        b += r;
        n -= (size_t)r;
    }
    return 1;
}

int conn_send(struct conn *c, const void *buf, size_t n)
{
    if (c->fd < 0)
        return floor_send(c->tx, c->peer, buf, n);
    const char *b = buf;
    while (n > 0) {
        ssize_t w = write(c->fd, b, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

int accelerated(int fd)
{
    return shunt_query_accelerated(fd);
}

void socket_options(int fd, enum transport t)
{
    int one = 1;
    struct timeval tv = { 120, 0 }; /* never hang forever */
    if (t == T_TCP && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
        die("TCP_NODELAY");
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* The address of the listener (port 0: the parent's is chosen at bind,
 * the exec'd child is told it with -C). */
void endpoint_address(struct endpoint *e, const struct opts *o, int port)
{
    memset(e, 0, sizeof *e);
    e->fd = -1;
    if (o->transport == T_TCP) {
        struct sockaddr_in *a = (struct sockaddr_in *)&e->addr;
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (o->addr && inet_pton(AF_INET, o->addr, &a->sin_addr) != 1) {
            fprintf(stderr, "pingpong: -a takes an IPv4 address\n");
            exit(2);
        }
        a->sin_port = htons((uint16_t)port);
        e->len = sizeof *a;
    } else if (o->path) {
        struct sockaddr_un *a = (struct sockaddr_un *)&e->addr;
        a->sun_family = AF_UNIX;
        if (strlen(o->path) >= sizeof a->sun_path) {
            fprintf(stderr, "pingpong: -U: the path is too long\n");
            exit(2);
        }
        strcpy(a->sun_path, o->path);
        e->len = sizeof *a;
    } else {
        /* abstract name: nothing on disk to clean up */
        struct sockaddr_un *a = (struct sockaddr_un *)&e->addr;
        a->sun_family = AF_UNIX;
        int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "shunt-bench-%d-%lld", (int)getpid(),
                         now_ns());
        e->len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    }
}

void listen_on(struct endpoint *e, const struct opts *o)
{
    endpoint_address(e, o, 0);
    e->fd = socket(e->addr.ss_family, SOCK_STREAM, 0);
    if (e->fd < 0)
        die("socket");
    if (o->path && o->transport == T_UNIX)
        unlink(o->path);
    if (bind(e->fd, (struct sockaddr *)&e->addr, e->len) < 0)
        die("bind");
    if (listen(e->fd, 128) < 0)
        die("listen");
    if (o->transport == T_TCP && getsockname(e->fd, (struct sockaddr *)&e->addr, &e->len) < 0)
        die("getsockname");
}

int connect_to(const struct endpoint *e)
{
    int fd = socket(e->addr.ss_family, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    if (connect(fd, (const struct sockaddr *)&e->addr, e->len) < 0) {
        int err = errno;
        close(fd);
        errno = err;
        return -1;
    }
    return fd;
}

/* accept, unless the child ended first (its report pipe is readable: it
 * failed, or a cc client ran out of ports): then -1 with errno ECHILD. */
int accept_from_child(int listener, int report_fd)
{
    struct pollfd p[2] = { { listener, POLLIN, 0 }, { report_fd, POLLIN, 0 } };
    for (;;) {
        int r = poll(p, 2, -1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (p[0].revents)
            return accept(listener, NULL, NULL);
        errno = ECHILD;
        return -1;
    }
}
