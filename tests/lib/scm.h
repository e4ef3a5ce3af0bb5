/*
 * scm.h: passing one fd over a Unix socket with SCM_RIGHTS, for the conformance tests of fd
 * passing (one marker byte 'F' carries the control message).
 *
 * Owns: send_fd() and recv_fd(); recv_fd checks the marker and that one well-formed
 * SCM_RIGHTS message with one fd arrived, untruncated, and returns that fd. flags are
 * recvmsg's (MSG_CMSG_CLOEXEC, say).
 */
#ifndef SHUNT_TESTS_SCM_H
#define SHUNT_TESTS_SCM_H

#include "check.h"

#include <sys/socket.h>
#include <sys/uio.h>

static inline void send_fd(int unix_sock, int fd)
{
	char byte = 'F';
	struct iovec iov = { &byte, 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

	memset(u.buf, 0, sizeof(u.buf));
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	CHECK(sendmsg(unix_sock, &mh, 0), ==, 1);
}

static inline int recv_fd_flags(int unix_sock, int flags)
{
	char byte;
	struct iovec iov = { &byte, 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *cm;
	int fd;

	CHECK(recvmsg(unix_sock, &mh, flags), ==, 1);
	CHECK(byte, ==, 'F');
	CHECK(mh.msg_flags & MSG_CTRUNC, ==, 0);
	cm = CMSG_FIRSTHDR(&mh);
	CHECK(cm != NULL, ==, 1);
	CHECK(cm->cmsg_level, ==, SOL_SOCKET);
	CHECK(cm->cmsg_type, ==, SCM_RIGHTS);
	CHECK(cm->cmsg_len, ==, CMSG_LEN(sizeof(int)));
	memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	return fd;
}

static inline int recv_fd(int unix_sock)
{
	return recv_fd_flags(unix_sock, 0);
}

#endif
