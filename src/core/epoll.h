/*
 * epoll.h: epoll over sets that hold accelerated sockets.  An epoll fd is
 * an object in the fd table that remembers, for each accelerated socket in
 * its set, the program's events and data; the kernel's set holds the same
 * socket watched only for doorbells.
 */
#ifndef SHUNT_EPOLL_H
#define SHUNT_EPOLL_H

#include "core/sock.h"

extern const struct sock_ops epoll_ops;

struct shunt_sock *epoll_object_new(void);
int epoll_control(int epfd, int op, int fd, struct epoll_event *ev);
int epoll_wait_ready(int epfd, struct epoll_event *evs, int max, const struct timespec *tmo, const sigset_t *mask);

#endif
