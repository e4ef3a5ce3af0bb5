/*
 * sockstat.h: what this process tells `shunt stat` about its TCP sockets,
 * and the connection id its log lines carry.  Written at state changes
 * only (listen, connect, accept, fallback, claim, dup, close, fork, exec,
 * an fd received), never on the data path; see registry/procstat.h for
 * the table itself.
 */
#ifndef SHUNT_SOCKSTAT_H
#define SHUNT_SOCKSTAT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "registry/registry.h"

struct tcp_sock;

/* Kept in the socket object: what does not change with its path. */
struct sockstat_info {
    bool published;         /* the socket has a record */
    uint8_t kind;           /* enum pst_kind */
    uint8_t role;           /* enum pst_role */
    struct reg_addr local;
    struct reg_addr peer;
};

/* The connection id of t at fd: its socket's inode (looked up once). */
uint64_t sockstat_id(struct tcp_sock *t, int fd);

/* Records t at fd (and at the other fds of this process that hold it).
 * kind and role: 0 keeps what was recorded; dst: a connecting client's
 * destination, for the peer address until the kernel knows it. */
void sockstat_publish(struct tcp_sock *t, int fd, unsigned kind, unsigned role, const struct sockaddr *dst,
                      socklen_t dstlen);

/* A socket found by probing (after exec, or received with SCM_RIGHTS). */
void sockstat_inherited(struct tcp_sock *t, int fd);

/* newfd is a duplicate of fd. */
void sockstat_dup(int fd, int newfd);

/* fd (or the range) was closed. */
void sockstat_gone(int fd);
void sockstat_gone_range(unsigned first, unsigned last);

void sockstat_after_fork_child(void);
void sockstat_at_exit(void);

/* A log line about a socket, with pid (from the log), fd and connection id. */
#define shunt_log_sock(level, t, fd, fmt, ...)                                                            \
    do {                                                                                                  \
        if (__builtin_expect((level) <= shunt_log_level, 0))                                              \
            shunt_log_write((level), "fd %d sock %llu: " fmt, (fd),                                        \
                            (unsigned long long)sockstat_id((t), (fd)), ##__VA_ARGS__);                   \
    } while (0)

#endif
