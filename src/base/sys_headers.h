/*
 * sys_headers.h: the system headers that declare every intercepted call, in
 * one place so that calls.def can be expanded anywhere.
 */
#ifndef SHUNT_SYS_HEADERS_H
#define SHUNT_SYS_HEADERS_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

/*
 * Under _GNU_SOURCE glibc passes socket addresses as a transparent union;
 * these give the plain pointer whichever form the header chose.
 */
#if !defined(__cplusplus) && defined(__GNUC__) && defined(__USE_GNU)
#define SOCKADDR_PTR(a) ((a).__sockaddr__)
#define CONST_SOCKADDR_PTR(a) ((a).__sockaddr__)
#else
#define SOCKADDR_PTR(a) (a)
#define CONST_SOCKADDR_PTR(a) (a)
#endif

#endif
