/*
 * epoll.h: epoll over sets that hold accelerated sockets.  An epoll fd is
 * an object in the fd table that remembers, for each accelerated socket in
 * its set, the program's events and data; the kernel's set holds the same
 * socket watched only for doorbells.
 */
#ifndef SHUNT_EPOLL_H
#define SHUNT_EPOLL_H

#include "core/fd/sock.h"

extern const struct sock_ops epoll_ops;

struct shunt_sock *epoll_object_new(void);
int epoll_control(int epfd, int op, int fd, struct epoll_event *ev);
int epoll_wait_ready(int epfd, struct epoll_event *evs, int max, const struct timespec *tmo, const sigset_t *mask);
bool epoll_kernel_has_pwait2(void);

/* An epoll fd watched by poll/select: its POLLIN from our members and the
 * kernel's; whether it has members of ours at all; and, before the caller
 * sleeps in the kernel on it, every member asks for a doorbell (returns
 * true if something turned out ready meanwhile). */
int epoll_poll_events(struct shunt_sock *s, int fd, short events);
bool epoll_has_members(struct shunt_sock *s);
bool epoll_before_sleep(struct shunt_sock *s);

/* A shutdown of t by this process (fd: the program's fd for it): every set
 * of this process holding t as a cold member is woken, so that a wait
 * asleep on it looks again (as the kernel's shutdown wakes its waiters). */
struct tcp_sock;
void epoll_socket_changed(struct tcp_sock *t, int fd);

/* Start-up: a shutdown (core/conn/stream.c) calls epoll_socket_changed. */
void epoll_init(void);

/* This process counted another process in as a holder of t's end
 * (SCM_RIGHTS, a spawned program), which cannot act on it yet: its sets'
 * cold members of t watch the end's wake FIFO from now on, so that a
 * shutdown by that process wakes them (fork: epoll_before_fork). */
void epoll_socket_shared(struct tcp_sock *t, int fd);

/* fork (before it, in the parent and in the child after it), exec and exit. */
void epoll_before_fork(void);
void epoll_after_fork_parent(void);
void epoll_after_fork_child(void);
void epoll_release_all(void);

/* Before a seccomp filter shunt cannot live with (core/process/sandbox.c),
 * once the connections are on kernel TCP: every set is the kernel's alone
 * again, each member of ours registered as the program asked. */
void epoll_sandbox(void);

#endif
