/*
 * fabric_proof.c: the peer's proof checked against the kernel's view of
 * its process (fabric_proof.h says why and what).
 */
#include <errno.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/real.h"
#include "core/conn/fabric_proof.h"

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

int fabric_proof_make(int fd, uint64_t bell, uint8_t out[FABRIC_PROOF_LEN])
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return -errno;
    put_le(out, (uint64_t)getpid(), 4);
    put_le(out + 4, (uint64_t)(uint32_t)fd, 4);
    put_le(out + 8, (uint64_t)st.st_ino, 8);
    put_le(out + 16, bell, 8);
    return 0;
}

/* A socket's port, from getsockname (peer false) or getpeername. */
static int port_of(int fd, int peer)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    int r = peer ? shunt_real.getpeername(fd, (struct sockaddr *)&ss, &len)
                 : shunt_real.getsockname(fd, (struct sockaddr *)&ss, &len);
    if (r < 0)
        return -1;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -1;
}

/* One row of a TCP table: 1 if it is socket inode's (its ports and owner set). */
static int row_match(const char *line, uint64_t inode, unsigned *lport, unsigned *rport, unsigned long *uid)
{
    /* sl local:port rem:port st tx:rx tr:when retrnsmt uid timeout inode */
    char local[64], rem[64];
    unsigned long u;
    unsigned long long ino;
    if (sscanf(line, " %*s %63s %63s %*s %*s %*s %*s %lu %*s %llu", local, rem, &u, &ino) != 4 || ino != inode)
        return 0;
    char *lc = strrchr(local, ':'), *rc = strrchr(rem, ':');
    if (!lc || !rc)
        return 0;
    *lport = (unsigned)strtoul(lc + 1, NULL, 16);
    *rport = (unsigned)strtoul(rc + 1, NULL, 16);
    *uid = u;
    return 1;
}

/* The row of socket inode in one of /proc/<pid>/net/tcp{,6}: 1 found,
 * 0 not there, -errno.  Read with open and read (no stdio of the
 * program's: shunt wraps it). */
static int row_of(const char *path, uint64_t inode, unsigned *lport, unsigned *rport, unsigned long *uid)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char buf[16384];
    size_t have = 0;
    int found = 0;
    for (;;) {
        ssize_t n = shunt_real.read(fd, buf + have, sizeof buf - 1 - have);
        if (n <= 0)
            break;
        have += (size_t)n;
        buf[have] = 0;
        char *line = buf, *nl;
        while (!found && (nl = strchr(line, '\n'))) {
            *nl = 0;
            found = row_match(line, inode, lport, rport, uid);
            line = nl + 1;
        }
        if (found)
            break;
        have = (size_t)(buf + have - line);
        memmove(buf, line, have);
        if (have == sizeof buf - 1)
            have = 0;   /* a line longer than the buffer: no row of ours */
    }
    shunt_real.close(fd);
    return found;
}

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

/* A socket in another network namespace than its process (made after a
 * setns, or accepted from such a listener) is in none of the process's
 * tables: the socket itself is asked instead, through a copy of the fd
 * (pidfd_getfd: the kernel allows it only to whoever may ptrace the
 * process), the process being this user's (its /proc directory's owner).
 * 1 its ports are (*plocal, *premote), 0 no such copy (-errno), -1 not
 * that socket, -2 that socket, closed already (no peer: ENOTCONN), -3 no
 * fd left in this process for the copy. */
static int ports_by_copy(uint64_t pid, uint64_t pfd, uint64_t inode, unsigned *plocal, unsigned *premote,
                         unsigned long *uid)
{
    char path[32];
    struct stat st;
    snprintf(path, sizeof path, "/proc/%llu", (unsigned long long)pid);
    if (stat(path, &st) < 0)
        return 0;
    /* (shunt_syscall answers as syscall(): -1 and errno; these once compared
     * its answer with -errno, and a peer gone counted as "no copy") */
    long pidfd = shunt_syscall(SYS_pidfd_open, (long)pid, 0L);
    if (pidfd < 0)
        return errno == ESRCH ? -2 : errno == EMFILE || errno == ENFILE ? -3 : 0;
    long copy = shunt_syscall(SYS_pidfd_getfd, pidfd, (long)pfd, 0L);
    int e = errno;
    shunt_real.close((int)pidfd);
    if (copy < 0)   /* its fd, or the process, went meanwhile; or no fd left here */
        return e == EBADF || e == ESRCH ? -2 : e == EMFILE || e == ENFILE ? -3 : 0;
    struct stat cs;
    int lp = port_of((int)copy, 0), rp = port_of((int)copy, 1);
    int closed = rp < 0 && errno == ENOTCONN;
    int same = fstat((int)copy, &cs) == 0 && (uint64_t)cs.st_ino == inode;
    shunt_real.close((int)copy);
    if (same && lp >= 0 && closed)
        return -2;
    if (!same || lp < 0 || rp < 0)
        return -1;
    *plocal = (unsigned)lp;
    *premote = (unsigned)rp;
    *uid = (unsigned long)st.st_uid;
    return 1;
}

/* The fd by which process pid holds the socket whose link reads want
 * ("socket:[INODE]"), found by a walk of its fd table; -1 if none (or it
 * cannot be read). */
static long fd_holding(uint64_t pid, const char *want)
{
    char path[32];
    snprintf(path, sizeof path, "/proc/%llu/fd", (unsigned long long)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    long found = -1;
    struct dirent *e;
    while (found < 0 && (e = readdir(d))) {
        char link[64], *end;
        long n = strtol(e->d_name, &end, 10);
        if (e->d_name[0] < '0' || e->d_name[0] > '9' || *end || n > 0x7fffffff)
            continue;
        ssize_t len = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1);
        if (len > 0 && (link[len] = 0, !strcmp(link, want)))
            found = n;
    }
    closedir(d);
    return found;
}

int fabric_proof_check(const uint8_t in[FABRIC_PROOF_LEN], int fd, struct fabric_peer_id *id, char *why,
                       size_t whylen)
{
    uint8_t p[FABRIC_PROOF_LEN];
    memcpy(p, in, sizeof p);   /* read once */
    uint64_t pid = get_le(p, 4), pfd = get_le(p + 4, 4), inode = get_le(p + 8, 8);
    id->pid = (uint32_t)pid;
    id->bell = get_le(p + 16, 8);
    if (pid == 0 || pid > 0x3fffffff || pfd > 0x7fffffff || inode == 0) {
        snprintf(why, whylen, "a proof with pid %llu, fd %llu, inode %llu", (unsigned long long)pid,
                 (unsigned long long)pfd, (unsigned long long)inode);
        return -EPROTO;
    }
    /* the process holds that socket (readable only by its own user, or root) */
    char path[64], link[64], want[40];
    snprintf(path, sizeof path, "/proc/%llu/fd/%llu", (unsigned long long)pid, (unsigned long long)pfd);
    snprintf(want, sizeof want, "socket:[%llu]", (unsigned long long)inode);
    ssize_t n = readlink(path, link, sizeof link - 1);
    int e = n < 0 ? errno : 0;
    if (n >= 0)
        link[n] = 0;
    if (n < 0 || strcmp(link, want)) {
        /* The fd it named may be closed or another file by now while the
         * process still holds the socket by another: a client that read its
         * hello on a copy on fd 0 (stdio's) and then put a file there.  It
         * is the socket that proves, not its number: look for it (before
         * 2026-11-29 that client was refused, its bytes already in the ring,
         * and a program holding both ends in one thread hung). */
        long other = e == ENOENT || e == 0 ? fd_holding(pid, want) : -1;
        if (other < 0) {
            if (n < 0)
                snprintf(why, whylen, "%s: %s", path, strerror(e));
            else
                snprintf(why, whylen, "%s is %s, not %s", path, link, want);
            return e == ENOENT ? -ENOENT : -EPERM;   /* ENOENT: that process, or its fd, is gone */
        }
        pfd = (uint64_t)other;
    }
    /* the socket is this connection's other end, and this user's */
    int lp = port_of(fd, 0), rp = port_of(fd, 1);
    unsigned plocal = 0, premote = 0;
    unsigned long uid = 0;
    int found = 0;
    for (int v6 = 0; v6 < 2 && found == 0; v6++) {
        snprintf(path, sizeof path, "/proc/%llu/net/tcp%s", (unsigned long long)pid, v6 ? "6" : "");
        found = row_of(path, inode, &plocal, &premote, &uid);
    }
    if (found <= 0)
        found = ports_by_copy(pid, pfd, inode, &plocal, &premote, &uid);
    if (found == -2) {
        snprintf(why, whylen, "socket %llu of pid %llu is closed", (unsigned long long)inode, (unsigned long long)pid);
        return -ENOENT;   /* a peer that closed before this end looked */
    }
    if (found == -3) {
        snprintf(why, whylen, "no fd left to ask pid %llu's socket %llu with", (unsigned long long)pid,
                 (unsigned long long)inode);
        return -EMFILE;
    }
    if (found <= 0) {
        snprintf(why, whylen, "socket %llu is in no TCP table of pid %llu (%s)", (unsigned long long)inode,
                 (unsigned long long)pid, found < 0 ? "its copy is another socket" : "no copy of it");
        return -EPERM;
    }
    if (uid != (unsigned long)geteuid() || lp < 0 || rp < 0 || plocal != (unsigned)rp || premote != (unsigned)lp) {
        snprintf(why, whylen, "socket %llu of pid %llu is uid %lu, ports %u to %u (this end: uid %lu, ports %d to %d)",
                 (unsigned long long)inode, (unsigned long long)pid, uid, plocal, premote,
                 (unsigned long)geteuid(), lp, rp);
        return -EPERM;
    }
    return 0;
}
