/*
 * test_sandbox.c: judging a seccomp filter before it is installed
 * (src/core/process/sandbox_filter.c) and probing one a process started
 * under (sandbox_probe.c), over the list of shunt's own calls
 * (sandbox_calls.c).
 *
 * Filters judged: allowing everything; killing everything; refusing with
 * ENOSYS a call shunt copes without (epoll_pwait2, process_vm_readv, as the
 * conformance tests and containers do) and one it needs (eventfd2), or with
 * another errno; a kill on one fcntl command shunt uses and on one it does
 * not; a rule on an argument that varies (write's fd) or on the address a
 * call is made from (both ways followed: refused); an allow-list of the
 * kind OpenSSH's sandbox has; answers computed in A, the scratch memory,
 * a division by an unknown X, a jump off the end.  Probed: a process
 * without a filter (every call runs), and forked children under a killing
 * filter, a trapping one, one answering EPERM to a call shunt needs, and
 * a harmless one; no child of the probe is left behind.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "core/process/sandbox_calls.h"
#include "core/process/sandbox_filter.h"
#include "core/process/sandbox_probe.h"

#define LD_NR BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr))
#define LD_ARG(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args) + 8 * (i))
#define LD_ARCH BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch))
#define LD_IP BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, instruction_pointer))
#define RET(v) BPF_STMT(BPF_RET | BPF_K, (v))
#define JEQ(k, t, f) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (k), (t), (f))
#define ALLOW SECCOMP_RET_ALLOW
#define KILL SECCOMP_RET_KILL_PROCESS

static char why[256];

#define JUDGE(...)                                                                           \
    __extension__({                                                                          \
        struct sock_filter f_[] = { __VA_ARGS__ };                                           \
        why[0] = 0;                                                                          \
        sandbox_filter_allows(f_, sizeof f_ / sizeof f_[0], why, sizeof why);                \
    })

/* Refuses nr with action, allows the rest. */
static bool judge_one(int nr, unsigned action)
{
    return JUDGE(LD_NR, JEQ((unsigned)nr, 0, 1), RET(action), RET(ALLOW));
}

static void judging(void)
{
    CHECK(JUDGE(RET(ALLOW)), ==, true);
    CHECK(JUDGE(RET(SECCOMP_RET_LOG)), ==, true);
    CHECK(JUDGE(RET(KILL)), ==, false);
    fprintf(stderr, "kill all: %s\n", why);
    CHECK(strstr(why, "killed") != NULL, ==, 1);
    CHECK(JUDGE(RET(SECCOMP_RET_TRAP)), ==, false);
    CHECK(JUDGE(RET(SECCOMP_RET_USER_NOTIF)), ==, false);
    CHECK(JUDGE(RET(SECCOMP_RET_ERRNO | EPERM)), ==, false);

    /* errno answers: what shunt copes with, and what it does not */
    CHECK(judge_one(SYS_epoll_pwait2, SECCOMP_RET_ERRNO | ENOSYS), ==, true);
    CHECK(judge_one(SYS_epoll_pwait2, SECCOMP_RET_ERRNO | EPERM), ==, false);
    CHECK(judge_one(SYS_process_vm_readv, SECCOMP_RET_ERRNO | EPERM), ==, true);
    CHECK(judge_one(SYS_eventfd2, SECCOMP_RET_ERRNO | ENOSYS), ==, false);
    CHECK(strstr(why, "eventfd2") != NULL, ==, 1);
    CHECK(judge_one(SYS_unlink, KILL), ==, false);
    CHECK(judge_one(SYS_acct, KILL), ==, true);
    CHECK(judge_one(SYS_mount, SECCOMP_RET_TRAP), ==, true);

    /* arguments shunt passes as they are: judged exactly */
    CHECK(JUDGE(LD_NR, JEQ(SYS_fcntl, 0, 3), LD_ARG(1), JEQ(F_DUPFD, 0, 1), RET(KILL), RET(ALLOW)), ==, true);
    CHECK(JUDGE(LD_NR, JEQ(SYS_fcntl, 0, 3), LD_ARG(1), JEQ(F_DUPFD_CLOEXEC, 0, 1), RET(KILL), RET(ALLOW)), ==,
          false);
    CHECK(strstr(why, "F_DUPFD_CLOEXEC") != NULL, ==, 1);
    CHECK(JUDGE(LD_NR, JEQ(SYS_socket, 0, 3), LD_ARG(0), JEQ(AF_NETLINK, 0, 1), RET(KILL), RET(ALLOW)), ==, false);
    CHECK(JUDGE(LD_NR, JEQ(SYS_socket, 0, 3), LD_ARG(0), JEQ(AF_PACKET, 0, 1), RET(KILL), RET(ALLOW)), ==, true);
    /* the high half of a fixed argument */
    CHECK(JUDGE(LD_NR, JEQ(SYS_fcntl, 0, 3),
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args) + 8 + 4),
                JEQ(0, 1, 0), RET(KILL), RET(ALLOW)), ==, true);
    /* arguments that vary (write's fd), and the address of the call: both ways */
    CHECK(JUDGE(LD_NR, JEQ(SYS_write, 0, 3), LD_ARG(0), JEQ(1, 1, 0), RET(KILL), RET(ALLOW)), ==, false);
    CHECK(JUDGE(LD_NR, JEQ(SYS_write, 0, 3), LD_ARG(0), JEQ(1, 1, 0), RET(ALLOW), RET(ALLOW)), ==, true);
    CHECK(JUDGE(LD_IP, JEQ(0x1000, 0, 1), RET(KILL), RET(ALLOW)), ==, false);
    /* the architecture is known */
    CHECK(JUDGE(LD_ARCH, JEQ(AUDIT_ARCH_X86_64, 1, 0), RET(KILL), RET(ALLOW)), ==, true);
    CHECK(JUDGE(LD_ARCH, JEQ(AUDIT_ARCH_I386, 0, 1), RET(ALLOW), RET(KILL)), ==, false);

    /* an allow-list with a default kill (OpenSSH's sandbox): shunt's unlink is not on it */
    CHECK(JUDGE(LD_NR, JEQ(SYS_read, 6, 0), JEQ(SYS_write, 5, 0), JEQ(SYS_ppoll, 4, 0), JEQ(SYS_futex, 3, 0),
                JEQ(SYS_exit_group, 2, 0), JEQ(SYS_close, 1, 0), RET(KILL), RET(ALLOW)), ==, false);

    /* computed answers, scratch memory */
    CHECK(JUDGE(BPF_STMT(BPF_LD | BPF_IMM, ALLOW), BPF_STMT(BPF_RET | BPF_A, 0)), ==, true);
    CHECK(JUDGE(LD_ARG(0), BPF_STMT(BPF_RET | BPF_A, 0)), ==, false);
    CHECK(JUDGE(BPF_STMT(BPF_LD | BPF_IMM, ALLOW), BPF_STMT(BPF_ST, 3), BPF_STMT(BPF_LD | BPF_IMM, KILL),
                BPF_STMT(BPF_LD | BPF_MEM, 3), BPF_STMT(BPF_RET | BPF_A, 0)), ==, true);
    CHECK(JUDGE(LD_NR, BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0), JEQ(0, 0, 1), RET(ALLOW), RET(KILL)), ==, true);
    /* a division by an X the call decides may be by zero: the filter returns 0, a kill */
    CHECK(JUDGE(LD_ARG(0), BPF_STMT(BPF_MISC | BPF_TAX, 0), BPF_STMT(BPF_LD | BPF_IMM, 8),
                BPF_STMT(BPF_ALU | BPF_DIV | BPF_X, 0), RET(ALLOW)), ==, false);
    /* off the end */
    CHECK(JUDGE(LD_NR, JEQ(SYS_read, 0, 1), RET(ALLOW)), ==, false);
    CHECK(JUDGE(BPF_STMT(BPF_JMP | BPF_JA, 5), RET(ALLOW)), ==, false);
}

static void install(struct sock_filter *f, unsigned short n)
{
    struct sock_fprog prog = { n, f };
    CHECK_OK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
    CHECK_OK(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog));
}

/* In a forked child under the filter refusing nr with action: the probe's answer. */
static void probe_under(int nr, unsigned action, bool expect)
{
    fflush(NULL);
    pid_t pid = CHECK_OK(fork());
    if (pid == 0) {
        struct sock_filter f[] = { LD_NR, JEQ((unsigned)nr, 0, 1), RET(action), RET(ALLOW) };
        install(f, 4);
        bool ok = sandbox_probe(why, sizeof why);
        fprintf(stderr, "probe under a filter refusing %d with %#x: %s %s\n", nr, action, ok ? "yes" : "no",
                ok ? "" : why);
        /* the probe's child is gone: nothing to wait for */
        siginfo_t si = { 0 };
        CHECK(waitid(P_ALL, 0, &si, WEXITED | __WALL | WNOHANG), ==, -1);
        CHECK(errno, ==, ECHILD);
        _exit(ok == expect ? 0 : 1);
    }
    int status;
    CHECK(waitpid(pid, &status, 0), ==, pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, ==, 1);
}

static void probing(void)
{
    CHECK(sandbox_probe(why, sizeof why), ==, true);
    probe_under(SYS_eventfd2, KILL, false);
    probe_under(SYS_unlink, SECCOMP_RET_TRAP, false);
    probe_under(SYS_eventfd2, SECCOMP_RET_ERRNO | EPERM, false);
    probe_under(SYS_epoll_pwait2, SECCOMP_RET_ERRNO | ENOSYS, true);
    probe_under(SYS_acct, KILL, true);
}

int main(void)
{
    CHECK(sandbox_call_count, >, 50);
    judging();
    probing();
    printf("test_sandbox: ok\n");
    return 0;
}
