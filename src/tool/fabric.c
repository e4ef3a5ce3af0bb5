/*
 * fabric.c: `shunt fabric enable | disable | status`, the one privileged
 * step of discovery across network namespaces and hosts
 * (docs/fabric-discovery.md).
 *
 * enable loads the sock_ops program of fabric_prog.c with this boot's tag,
 * attaches it to the root of the cgroup2 hierarchy (BPF_CGROUP_SOCK_OPS,
 * BPF_F_ALLOW_MULTI: other programs there stay) and pins it as
 * /sys/fs/bpf/shunt/synopt (mounting bpffs if it is not), which keeps it
 * loaded after this command exits and lets disable find it.  disable
 * detaches the pinned program and removes the pin.  status says whether it
 * is pinned and attached.  Raw bpf(2), no libbpf.  Every failure is a
 * message and an exit status: 1 an error, 2 a usage error; status exits 0
 * when enabled, 3 when not.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "registry/synopt.h"
#include "tool/fabric_prog.h"
#include "tool/tool.h"

#define BPFFS "/sys/fs/bpf"
#define PIN_DIR BPFFS "/shunt"
#define PIN_PROG PIN_DIR "/synopt"
#define EXIT_NOT_ENABLED 3

static long sys_bpf(int cmd, union bpf_attr *attr)
{
    return syscall(SYS_bpf, cmd, attr, sizeof *attr);
}

static void fabric_usage(FILE *out)
{
    fprintf(out,
            "usage: shunt fabric enable | disable | status\n"
            "\n"
            "Marks the SYN of every TCP connection this host opens (not to loopback) with\n"
            "a TCP option naming the client socket, so that a server under shunt in\n"
            "another network namespace can pair the two sockets (docs/fabric-discovery.md).\n"
            "Needs root. The program stays loaded until disable or reboot.\n"
            "\n"
            "  enable    load and attach the program (cgroup2 root), pin it in " PIN_DIR "\n"
            "  disable   detach it and remove the pin\n"
            "  status    say whether it is attached (exit 0), or not (exit 3)\n");
}

/* Where cgroup2 is mounted (the first such line of mountinfo). */
static int cgroup2_root(char *out, size_t len)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -errno;
    char line[4096];
    int found = -ENOENT;
    while (found < 0 && fgets(line, sizeof line, f)) {
        /* id parent major:minor root mountpoint options ... - fstype source ... */
        char mnt[4096], fstype[64];
        const char *dash = strstr(line, " - ");
        if (!dash || sscanf(line, "%*s %*s %*s %*s %4095s", mnt) != 1 || sscanf(dash + 3, "%63s", fstype) != 1)
            continue;
        if (!strcmp(fstype, "cgroup2") && strlen(mnt) < len) {
            strcpy(out, mnt);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

static int open_cgroup(char *path, size_t len)
{
    int e = cgroup2_root(path, len);
    if (e < 0) {
        fprintf(stderr, "shunt fabric: no cgroup2 file system is mounted (mount -t cgroup2 none /sys/fs/cgroup)\n");
        return -1;
    }
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        fprintf(stderr, "shunt fabric: cannot open %s: %s\n", path, strerror(errno));
    return fd;
}

/* Mounts bpffs on /sys/fs/bpf unless it is there already; 0 or -1 with a message. */
static int bpffs_ready(void)
{
    struct statfs sf;
    if (statfs(BPFFS, &sf) == 0 && sf.f_type == BPF_FS_MAGIC)
        return 0;
    if (mount("bpf", BPFFS, "bpf", 0, "mode=0700") < 0) {
        fprintf(stderr, "shunt fabric: cannot mount the bpf file system on " BPFFS ": %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

static int pinned_prog(void)
{
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.pathname = (uint64_t)(uintptr_t)PIN_PROG;
    a.file_flags = BPF_F_RDONLY;
    return (int)sys_bpf(BPF_OBJ_GET, &a);
}

/* The reason a bpf() call failed, in words a user can act on. */
static const char *why(int e)
{
    switch (e) {
    case EPERM:
    case EACCES:
        return "not permitted: run as root (CAP_BPF, CAP_NET_ADMIN and CAP_SYS_ADMIN)";
    case ENOSYS:
        return "this kernel has no bpf() system call (CONFIG_BPF_SYSCALL)";
    case EINVAL:
        return "this kernel refuses it: TCP header options from BPF need Linux 5.10 or later, and "
               "cgroup BPF (CONFIG_CGROUP_BPF)";
    default:
        return strerror(e);
    }
}

/* For disable and status: the pinned program and the cgroup2 root, both
 * open.  0; else, after saying why, 1 (an error) or EXIT_NOT_ENABLED
 * (nothing is pinned). */
static int open_pinned(int *prog, int *cg, char *cgpath, size_t len)
{
    *prog = pinned_prog();
    if (*prog < 0 && errno == ENOENT) {
        printf("shunt fabric: not enabled\n");
        return EXIT_NOT_ENABLED;
    }
    if (*prog < 0) {
        fprintf(stderr, "shunt fabric: cannot read " PIN_PROG ": %s\n", why(errno));
        return 1;
    }
    *cg = open_cgroup(cgpath, len);
    if (*cg < 0) {
        close(*prog);
        return 1;
    }
    return 0;
}

static long detach(int cg, int prog)
{
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.target_fd = (uint32_t)cg;
    a.attach_bpf_fd = (uint32_t)prog;
    a.attach_type = BPF_CGROUP_SOCK_OPS;
    return sys_bpf(BPF_PROG_DETACH, &a);
}

static int prog_info(int prog, struct bpf_prog_info *info)
{
    memset(info, 0, sizeof *info);
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.info.bpf_fd = (uint32_t)prog;
    a.info.info_len = sizeof *info;
    a.info.info = (uint64_t)(uintptr_t)info;
    if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) < 0)
        return -errno;
    return 0;
}

static int prog_id(int prog, uint32_t *id)
{
    struct bpf_prog_info info;
    int e = prog_info(prog, &info);
    *id = info.id;
    return e;
}

/* 1 if the program with this id is attached to cg for sock_ops, 0 if not,
 * or a negative errno. */
static int attached(int cg, uint32_t id)
{
    uint32_t ids[64];
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.query.target_fd = (uint32_t)cg;
    a.query.attach_type = BPF_CGROUP_SOCK_OPS;
    a.query.prog_ids = (uint64_t)(uintptr_t)ids;
    a.query.prog_cnt = sizeof ids / sizeof ids[0];
    if (sys_bpf(BPF_PROG_QUERY, &a) < 0)
        return -errno;
    for (uint32_t i = 0; i < a.query.prog_cnt && i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i] == id)
            return 1;
    return 0;
}

static int load(uint32_t tag)
{
    struct bpf_insn insns[FABRIC_PROG_MAX];
    size_t n = fabric_prog_build(insns, FABRIC_PROG_MAX, tag);
    if (n == 0) {
        fprintf(stderr, "shunt fabric: the program does not fit in %d instructions (a bug)\n", FABRIC_PROG_MAX);
        return -1;
    }
    static char log[16384];
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.prog_type = BPF_PROG_TYPE_SOCK_OPS;
    a.expected_attach_type = BPF_CGROUP_SOCK_OPS;
    a.insns = (uint64_t)(uintptr_t)insns;
    a.insn_cnt = (uint32_t)n;
    a.license = (uint64_t)(uintptr_t) "GPL";
    a.log_buf = (uint64_t)(uintptr_t)log;
    a.log_size = sizeof log;
    a.log_level = 1;
    memcpy(a.prog_name, "shunt_synopt", sizeof "shunt_synopt");
    int fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
    if (fd < 0) {
        int e = errno;
        fprintf(stderr, "shunt fabric: cannot load the program: %s\n", why(e));
        if (log[0] && e != EPERM)
            fprintf(stderr, "the kernel's verifier said:\n%s\n", log);
        return -1;
    }
    return fd;
}

/* The marker the library reads to know the SYNs of this host carry the
 * option (synopt_fabric_on): root's file, this boot's tag in it.  Made
 * whole under another name, then renamed over. */
static int write_marker(uint32_t tag)
{
    if (mkdir(SYNOPT_MARKER_DIR, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "shunt fabric: cannot make " SYNOPT_MARKER_DIR ": %s\n", strerror(errno));
        return -1;
    }
    const char *tmp = SYNOPT_MARKER ".new";
    unlink(tmp);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    char line[16];
    int n = snprintf(line, sizeof line, "%08x\n", tag);
    if (fd < 0 || write(fd, line, (size_t)n) != n || fchmod(fd, 0644) < 0 || close(fd) < 0 ||
        rename(tmp, SYNOPT_MARKER) < 0) {
        fprintf(stderr, "shunt fabric: cannot write " SYNOPT_MARKER ": %s\n", strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

static void remove_marker(void)
{
    unlink(SYNOPT_MARKER);
    rmdir(SYNOPT_MARKER_DIR); /* only if nothing else is in it */
}

static int enable(void)
{
    char cgpath[4096];
    uint32_t tag;
    int e = synopt_boot_tag(&tag);
    if (e < 0) {
        fprintf(stderr, "shunt fabric: cannot read /proc/sys/kernel/random/boot_id: %s\n", strerror(-e));
        return 1;
    }
    int cg = open_cgroup(cgpath, sizeof cgpath);
    if (cg < 0)
        return 1;
    int old = pinned_prog();
    uint32_t id;
    if (old >= 0 && prog_id(old, &id) == 0 && attached(cg, id) == 1) {
        printf("shunt fabric: already enabled (program %u on %s)\n", id, cgpath);
        close(old);
        close(cg);
        return write_marker(tag) < 0 ? 1 : 0;
    }
    if (old >= 0) { /* pinned but not attached: what a crash between the two leaves */
        close(old);
        unlink(PIN_PROG);
    }
    int prog = load(tag);
    if (prog < 0) {
        close(cg);
        return 1;
    }
    int rc = 1;
    if (bpffs_ready() < 0)
        goto out;
    if (mkdir(PIN_DIR, 0700) < 0 && errno != EEXIST) {
        fprintf(stderr, "shunt fabric: cannot make " PIN_DIR ": %s\n", strerror(errno));
        goto out;
    }
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.target_fd = (uint32_t)cg;
    a.attach_bpf_fd = (uint32_t)prog;
    a.attach_type = BPF_CGROUP_SOCK_OPS;
    a.attach_flags = BPF_F_ALLOW_MULTI;
    if (sys_bpf(BPF_PROG_ATTACH, &a) < 0) {
        fprintf(stderr, "shunt fabric: cannot attach the program to %s: %s\n", cgpath, why(errno));
        goto out;
    }
    memset(&a, 0, sizeof a);
    a.pathname = (uint64_t)(uintptr_t)PIN_PROG;
    a.bpf_fd = (uint32_t)prog;
    if (sys_bpf(BPF_OBJ_PIN, &a) < 0) {
        fprintf(stderr, "shunt fabric: cannot pin the program as " PIN_PROG ": %s\n", strerror(errno));
        detach(cg, prog); /* nothing left behind that disable cannot find */
        goto out;
    }
    if (write_marker(tag) < 0) {
        detach(cg, prog);
        unlink(PIN_PROG);
        goto out;
    }
    if (prog_id(prog, &id) < 0)
        id = 0;
    printf("shunt fabric: enabled (program %u on %s, boot tag %08x)\n", id, cgpath, tag);
    rc = 0;
out:
    close(prog);
    close(cg);
    return rc;
}

static int disable(void)
{
    char cgpath[4096];
    remove_marker(); /* first: processes stop offering across namespaces */
    int prog, cg, e = open_pinned(&prog, &cg, cgpath, sizeof cgpath);
    if (e)
        return e == EXIT_NOT_ENABLED ? 0 : e; /* nothing to disable is no error */
    int rc = 0;
    if (detach(cg, prog) < 0 && errno != ENOENT) {
        fprintf(stderr, "shunt fabric: cannot detach the program from %s: %s\n", cgpath, why(errno));
        rc = 1;
    } else if (unlink(PIN_PROG) < 0) {
        fprintf(stderr, "shunt fabric: cannot remove " PIN_PROG ": %s\n", strerror(errno));
        rc = 1;
    } else {
        rmdir(PIN_DIR); /* only if nothing else is in it */
        printf("shunt fabric: disabled\n");
    }
    close(prog);
    close(cg);
    return rc;
}

static int status(void)
{
    char cgpath[4096];
    int prog, cg, e = open_pinned(&prog, &cg, cgpath, sizeof cgpath);
    if (e)
        return e;
    uint32_t id = 0, tag = 0;
    int on = prog_id(prog, &id) < 0 ? -1 : attached(cg, id);
    int rc = 1;
    if (on == 1) {
        int have_tag = synopt_boot_tag(&tag) == 0;
        printf("shunt fabric: enabled (program %u on %s, pinned as " PIN_PROG ", boot tag %s%08x)\n", id, cgpath,
               have_tag ? "" : "unknown ", tag);
        struct bpf_prog_info info;
        if (prog_info(prog, &info) == 0 && info.run_cnt) /* counted while kernel.bpf_stats_enabled=1 */
            printf("  %llu runs, %llu ns on average\n", (unsigned long long)info.run_cnt,
                   (unsigned long long)(info.run_time_ns / info.run_cnt));
        rc = 0;
    } else if (on == 0) {
        printf("shunt fabric: not enabled (program %u pinned as " PIN_PROG " but not attached to %s; "
               "shunt fabric disable removes it)\n",
               id, cgpath);
        rc = EXIT_NOT_ENABLED;
    } else {
        fprintf(stderr, "shunt fabric: cannot ask the kernel what is attached: %s\n", why(errno));
    }
    close(prog);
    close(cg);
    return rc;
}

int cmd_fabric(int argc, char **argv)
{
    if (argc != 1) {
        fabric_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[0], "-h") || !strcmp(argv[0], "--help")) {
        fabric_usage(stdout);
        return 0;
    }
    if (!strcmp(argv[0], "enable"))
        return enable();
    if (!strcmp(argv[0], "disable"))
        return disable();
    if (!strcmp(argv[0], "status"))
        return status();
    fabric_usage(stderr);
    return 2;
}
