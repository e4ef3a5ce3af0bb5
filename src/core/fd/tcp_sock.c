/*
 * tcp_sock.c: a TCP socket's connection id (tcp_sock.h).
 */
#include <sys/stat.h>

#include "core/fd/tcp_sock.h"

uint64_t tcp_sock_id(struct tcp_sock *t, int fd)
{
    if (!t->inode) {
        struct stat st;
        if (fstat(fd, &st) == 0)
            t->inode = (uint64_t)st.st_ino;
    }
    return t->inode;
}
