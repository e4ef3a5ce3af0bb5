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
 * SCM_RIGHTS: the receiver is the process at the other end of the Unix
 * socket (SO_PEERCRED); it runs shunt when libshunt is mapped in it.  A
 * socketpair reports its creator at both ends: when that is this process
 * the receiver is this process or one it forked, which runs shunt unless it
 * exec'd a program without it since (a limit in compatibility.md).
 */
#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/downgrade.h"
#include "core/init.h"
#include "interpose/real.h"

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
    const char *path = getenv("PATH");
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

bool downgrade_exec_runs_shunt(const char *path, int fd, char *const envp[], bool search)
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
    fclose(f);
    return found;
}

bool downgrade_receiver_runs_shunt(int unix_fd)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (shunt_real.getsockopt(unix_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.pid <= 0)
        return false;   /* not connected: whoever reads it is unknown */
    if (cred.pid == getpid())
        return true;
    return cred.uid == geteuid() && pid_maps_shunt(cred.pid);
}
