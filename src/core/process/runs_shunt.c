/*
 * runs_shunt.c: will the process that gets an accelerated socket run shunt?
 * Asked before exec and before an SCM_RIGHTS send, because a program
 * without shunt that received it would read doorbells as data: the answer
 * "no" moves the connection back to kernel TCP first (downgrade.c).  When
 * in doubt the answer is no: a needless downgrade costs speed, a wrong
 * "yes" would corrupt the stream.
 *
 * exec: the new image runs shunt when libshunt is in the LD_PRELOAD of the
 * new environment (or in /etc/ld.so.preload) and the dynamic loader will
 * honour it: an ELF with an interpreter (not static), not set-user/group-ID
 * (secure execution ignores such preloads), and not a Go program (Go makes
 * its system calls itself).  A script is judged by its interpreter.
 *
 * SCM_RIGHTS: the receivers are the processes that hold the other end of
 * the Unix socket (found by its inode, see runs_shunt_receiver);
 * each must run shunt: libshunt mapped in it, this user.
 */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/env_override.h"
#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "core/conn/downgrade.h"
#include "core/process/runs_shunt.h"
#include "registry/sockdiag.h"

#define LIB_NAME "libshunt"

/* Does a preload list (':' or ' ' separated) name libshunt? */
static bool list_has_shunt(const char *list)
{
    while (list && *list) {
        size_t n = strcspn(list, ": \t\n");
        const char *base = list;
        for (size_t i = 0; i < n; i++)
            if (list[i] == '/')
                base = list + i + 1;
        if ((size_t)(list + n - base) >= sizeof LIB_NAME - 1 && !strncmp(base, LIB_NAME, sizeof LIB_NAME - 1))
            return true;
        list += n;
        list += strspn(list, ": \t\n");
    }
    return false;
}

static bool env_preloads_shunt(char *const envp[])
{
    for (size_t i = 0; envp && envp[i]; i++)
        if (!strncmp(envp[i], "LD_PRELOAD=", 11))
            return list_has_shunt(envp[i] + 11);
    return false;
}

static bool system_preloads_shunt(void)
{
    char buf[4096];
    int fd = open("/etc/ld.so.preload", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = shunt_real.read(fd, buf, sizeof buf - 1);
    shunt_real.close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    return list_has_shunt(buf);
}

/* execvp's search: the first executable file of that name along $PATH. */
static bool search_path(const char *file, char *out, size_t len)
{
    const char *path = env_lookup("PATH");
    if (!path)
        path = "/bin:/usr/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        int w = snprintf(out, len, "%.*s%s%s", (int)n, n ? path : ".", "/", file);
        if (w > 0 && (size_t)w < len && access(out, X_OK) == 0)
            return true;
        path += n;
        if (*path == ':')
            path++;
    }
    return false;
}

/* Go leaves its build id in a section of its own. */
static bool elf_is_go(int fd, const Elf64_Ehdr *eh)
{
    if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shnum == 0 || eh->e_shnum > 4096 ||
        eh->e_shstrndx >= eh->e_shnum)
        return false;
    size_t bytes = (size_t)eh->e_shnum * sizeof(Elf64_Shdr);
    Elf64_Shdr *sh = malloc(bytes);
    bool go = false;
    if (sh && shunt_real.pread(fd, sh, bytes, (off_t)eh->e_shoff) == (ssize_t)bytes) {
        const Elf64_Shdr *strs = &sh[eh->e_shstrndx];
        size_t slen = strs->sh_size < (1u << 20) ? (size_t)strs->sh_size : 0;
        char *names = slen ? malloc(slen + 1) : NULL;
        if (names && shunt_real.pread(fd, names, slen, (off_t)strs->sh_offset) == (ssize_t)slen) {
            names[slen] = 0;
            for (unsigned i = 0; i < eh->e_shnum && !go; i++)
                if (sh[i].sh_name < slen)
                    go = !strcmp(names + sh[i].sh_name, ".go.buildinfo") ||
                         !strcmp(names + sh[i].sh_name, ".note.go.buildid");
        }
        free(names);
    }
    free(sh);
    return go;
}

/* The loader will run, and honour preloads, for this file (fd)? */
static bool image_runs_shunt(int fd, int depth)
{
    struct stat st;
    if (fstat(fd, &st) < 0 || (st.st_mode & (S_ISUID | S_ISGID)))
        return false;
    unsigned char head[256];
    ssize_t n = shunt_real.pread(fd, head, sizeof head - 1, 0);
    if (n >= 2 && head[0] == '#' && head[1] == '!') {
        /* a script: its interpreter is what runs */
        head[n] = 0;
        char *p = (char *)head + 2;
        p += strspn(p, " \t");
        size_t len = strcspn(p, " \t\n");
        if (len == 0 || depth > 4)
            return false;
        p[len] = 0;
        int in = open(p, O_RDONLY | O_CLOEXEC);
        bool r = in >= 0 && image_runs_shunt(in, depth + 1);
        if (in >= 0)
            shunt_real.close(in);
        return r;
    }
    if (n < (ssize_t)sizeof(Elf64_Ehdr) || memcmp(head, ELFMAG, SELFMAG) || head[EI_CLASS] != ELFCLASS64)
        return false;
    Elf64_Ehdr eh;
    memcpy(&eh, head, sizeof eh);
    if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > 1024)
        return false;
    bool interp = false;
    for (unsigned i = 0; i < eh.e_phnum && !interp; i++) {
        Elf64_Phdr ph;
        if (shunt_real.pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph)) != (ssize_t)sizeof ph)
            return false;
        interp = ph.p_type == PT_INTERP;
    }
    return interp && !elf_is_go(fd, &eh);
}

/*
 * An exec of a path the kernel will refuse before it reads the file (none
 * there, a file on the way, no execute permission) fails and changes
 * nothing, so nothing needs to leave for it.  A shell walks $PATH with one
 * execve per directory: judging each of those would move every inherited
 * connection back to kernel TCP at the first directory without the program.
 * Only those answers count; any other doubt is left to the judgement.
 */
bool runs_shunt_exec_fails(const char *path, int fd, bool search)
{
    if (!path || fd >= 0)
        return false;
    char found[4096];
    if (search && !strchr(path, '/'))
        return !search_path(path, found, sizeof found);
    if (faccessat(AT_FDCWD, path, X_OK, AT_EACCESS) == 0)
        return false;
    return errno == ENOENT || errno == ENOTDIR || errno == EACCES || errno == ELOOP || errno == ENAMETOOLONG;
}

bool runs_shunt_exec(const char *path, int fd, char *const envp[], bool search)
{
    if (!env_preloads_shunt(envp) && !system_preloads_shunt())
        return false;
    if (!path)
        return image_runs_shunt(fd, 0);
    char found[4096];
    if (search && !strchr(path, '/')) {
        if (!search_path(path, found, sizeof found))
            return false;
        path = found;
    }
    int in = open(path, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return false;
    bool r = image_runs_shunt(in, 0);
    shunt_real.close(in);
    return r;
}

/* libshunt is mapped in that process. */
static bool pid_maps_shunt(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        char *slash = strrchr(line, '/');
        found = slash && !strncmp(slash + 1, LIB_NAME, sizeof LIB_NAME - 1);
    }
    shunt_real.fclose(f);   /* libc's: shunt's own wrapper is a layer above */
    return found;
}

/* The user a process runs as (its effective uid, from /proc/PID/status,
 * which anybody may read); false if it is gone or the file is odd. */
static bool pid_euid(int pid, uid_t *uid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long r, e;
        if (!strncmp(line, "Uid:", 4) && sscanf(line + 4, "%lu %lu", &r, &e) == 2) {
            *uid = (uid_t)e;
            found = true;
        }
    }
    shunt_real.fclose(f);
    return found;
}

/* Does the fd table in dir (an open /proc/PID/fd) hold the socket whose
 * link reads want ("socket:[INODE]")?  -1 when it cannot be read. */
static int fds_hold(int dir, const char *want)
{
    DIR *d = fdopendir(dir);
    if (!d) {
        shunt_real.close(dir);
        return -1;
    }
    int held = 0;
    struct dirent *e;
    errno = 0;
    while (!held && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char link[64];
        ssize_t n = readlinkat(dirfd(d), e->d_name, link, sizeof link - 1);
        if (n > 0) {
            link[n] = 0;
            held = !strcmp(link, want);
        }
    }
    if (!held && errno == EACCES)
        held = -1;
    closedir(d);
    return held;
}

/*
 * SCM_RIGHTS: every process that holds the receiving end of the Unix
 * socket must run shunt.  The kernel names that end (sock_diag's
 * UNIX_DIAG_PEER: SO_PEERCRED would name whoever connected or made the
 * socketpair, who may have forked and exec'd since); /proc tells who holds
 * it.  The answer is no when:
 *   - the message names its destination (a datagram to some address), the
 *     socket has no peer, or the kernel does not answer (no unix_diag);
 *   - nobody holds the receiving end: it is itself in flight in another
 *     SCM_RIGHTS message, to a receiver nobody can judge now;
 *   - a holder runs as another user (its registry is another one) or does
 *     not map libshunt;
 *   - the process SO_PEERCRED names (the peer's user must be ours) hides
 *     its fds from us, or /proc cannot be read (nobody found).
 * Other processes whose fds we may not read (another user's when we are not
 * root, or more privileged than we are: not dumpable, more capabilities;
 * pid 1 often is) are not seen: were one of them to hold the receiving end
 * too, it would not be counted (a limit in compatibility.md).  The cost,
 * one netlink question and a readlink per fd of each process we may look
 * at, is paid only when an accelerated socket is about to leave by
 * SCM_RIGHTS.
 */
bool runs_shunt_receiver(int unix_fd, bool named)
{
    struct stat st;
    struct ucred cred;
    socklen_t len = sizeof cred;
    uint64_t peer;
    if (named || fstat(unix_fd, &st) < 0 || !S_ISSOCK(st.st_mode))
        return false;
    if (shunt_real.getsockopt(unix_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != geteuid())
        return false;
    int r = sockdiag_unix_peer((uint64_t)st.st_ino, &peer);
    if (r < 0) {
        shunt_log(LOG_DEBUG, "fd %d: the receiving end of this Unix socket is unknown (%s)", unix_fd, strerror(-r));
        return false;
    }
    char want[48];
    snprintf(want, sizeof want, "socket:[%llu]", (unsigned long long)peer);

    int procfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *proc = procfd >= 0 ? fdopendir(procfd) : NULL;
    if (!proc) {
        if (procfd >= 0)
            shunt_real.close(procfd);
        return false;
    }
    uid_t me = geteuid();
    pid_t self = getpid();
    unsigned holders = 0, hidden = 0;
    bool ok = true;
    struct dirent *e;
    while (ok && (e = readdir(proc))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || end == e->d_name || pid <= 0 || pid > INT_MAX)
            continue;
        char path[64];
        snprintf(path, sizeof path, "%ld/fd", pid);
        int dir = openat(dirfd(proc), path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int held = dir >= 0 ? fds_hold(dir, want) : (errno == EACCES ? -1 : 0);
        uid_t uid;
        if (held == 0)
            continue;   /* gone, or not a holder */
        if (held < 0) {
            /* fds hidden from us (another user, or more privileged than
             * we are: not dumpable, more capabilities): not seen, unless it
             * is the process the kernel names as the peer */
            hidden++;
            if ((pid_t)pid == cred.pid)
                ok = false;
            continue;
        }
        if (!pid_euid((int)pid, &uid)) {
            if (held > 0)
                ok = false;   /* a holder that is gone now, or we cannot tell who it is */
            continue;
        }
        holders++;
        if ((pid_t)pid != self && (uid != me || !pid_maps_shunt((pid_t)pid)))
            ok = false;
        if (!ok)
            shunt_log(LOG_DEBUG, "fd %d: the receiving end %s is held by pid %ld, which does not run shunt", unix_fd,
                      want, pid);
    }
    closedir(proc);
    if (hidden)
        shunt_log(LOG_DEBUG, "fd %d: %u processes hide their fds from this one", unix_fd, hidden);
    if (ok && holders == 0)
        shunt_log(LOG_DEBUG, "fd %d: nobody holds the receiving end %s (in flight?)", unix_fd, want);
    return ok && holders > 0;
}
