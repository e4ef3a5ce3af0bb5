/*
 * listener_flagger.c: another party's sock_ops program, for
 * tests/integration/test_fabric_synopt.py.  Some hosts run sock_ops programs
 * of their own; one that asks for header-option callbacks on listeners (to
 * write an option of its own on SYN-ACKs) makes the kernel call every program
 * of the cgroup tree, shunt's too, for those SYN-ACKs.  shunt's program must
 * then leave them alone: its option belongs on the client's SYN only.
 *
 *   listener_flagger CGROUP_DIR
 *
 * loads a program that, at BPF_SOCK_OPS_TCP_LISTEN_CB, turns on
 * BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG for the listener and writes an option of
 * its own (kind 253, ExID 0x5346) on the listener's SYN-ACKs, attaches it to CGROUP_DIR (BPF_F_ALLOW_MULTI), prints "ready", waits
 * for its standard input to end, detaches it and exits 0.  Raw bpf(2).  Every
 * failure is a message and exit status 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Its own option on the SYN-ACKs of the listeners it flags: the test sees it
 * there, so it knows the callbacks ran. */
#define FLAGGER_KIND 253
#define FLAGGER_EXID 0x5346

#define INSN(c, d, s, o, i) ((struct bpf_insn){ .code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i) })
#define MOV64_REG(d, s) INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV64_IMM(d, i) INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define LD_CTX(d, field) INSN(BPF_LDX | BPF_MEM | BPF_W, d, 6, offsetof(struct bpf_sock_ops, field), 0)
#define JEQ32(d, i, off) INSN(BPF_JMP32 | BPF_JEQ | BPF_K, d, 0, off, i)
#define JNE32(d, i, off) INSN(BPF_JMP32 | BPF_JNE | BPF_K, d, 0, off, i)
#define JA(off) INSN(BPF_JMP | BPF_JA, 0, 0, off, 0)
#define CALL(helper) INSN(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_##helper)

static long sys_bpf(int cmd, union bpf_attr *attr)
{
    return syscall(SYS_bpf, cmd, attr, sizeof *attr);
}

static int fail(const char *what)
{
    fprintf(stderr, "listener_flagger: %s: %s\n", what, strerror(errno));
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: listener_flagger CGROUP_DIR\n");
        return 1;
    }
    /* r6: the context; a jump's offset counts the instructions it skips */
    const uint8_t opt[4] = { FLAGGER_KIND, 4, FLAGGER_EXID >> 8, FLAGGER_EXID & 0xff };
    int32_t optword;
    memcpy(&optword, opt, sizeof optword);
    const struct bpf_insn prog[] = {
        /* 0 */ MOV64_REG(6, 1),
        /* 1 */ LD_CTX(2, op),
        /* 2 */ JEQ32(2, BPF_SOCK_OPS_TCP_LISTEN_CB, 3),     /* -> 6 */
        /* 3 */ JEQ32(2, BPF_SOCK_OPS_HDR_OPT_LEN_CB, 7),    /* -> 11 */
        /* 4 */ JEQ32(2, BPF_SOCK_OPS_WRITE_HDR_OPT_CB, 14), /* -> 19 */
        /* 5 */ JA(23),                                      /* -> 29, out */
        /* a listener: header-option callbacks on */
        /* 6 */ LD_CTX(2, bpf_sock_ops_cb_flags),
        /* 7 */ INSN(BPF_ALU | BPF_OR | BPF_K, 2, 0, 0, BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG),
        /* 8 */ MOV64_REG(1, 6),
        /* 9 */ CALL(sock_ops_cb_flags_set),
        /* 10 */ JA(18),                                     /* -> 29 */
        /* a SYN-ACK is sized: 4 bytes */
        /* 11 */ LD_CTX(3, skb_tcp_flags),
        /* 12 */ INSN(BPF_ALU | BPF_AND | BPF_K, 3, 0, 0, 0x12),
        /* 13 */ JNE32(3, 0x12, 15),                         /* -> 29 */
        /* 14 */ MOV64_REG(1, 6),
        /* 15 */ MOV64_IMM(2, 4),
        /* 16 */ MOV64_IMM(3, 0),
        /* 17 */ CALL(reserve_hdr_opt),
        /* 18 */ JA(10),                                     /* -> 29 */
        /* a SYN-ACK is written: the option */
        /* 19 */ LD_CTX(3, skb_tcp_flags),
        /* 20 */ INSN(BPF_ALU | BPF_AND | BPF_K, 3, 0, 0, 0x12),
        /* 21 */ JNE32(3, 0x12, 7),                          /* -> 29 */
        /* 22 */ INSN(BPF_ST | BPF_MEM | BPF_W, 10, 0, -4, optword),
        /* 23 */ MOV64_REG(1, 6),
        /* 24 */ MOV64_REG(2, 10),
        /* 25 */ INSN(BPF_ALU64 | BPF_ADD | BPF_K, 2, 0, 0, -4),
        /* 26 */ MOV64_IMM(3, 4),
        /* 27 */ MOV64_IMM(4, 0),
        /* 28 */ CALL(store_hdr_opt),
        /* 29 */ MOV64_IMM(0, 1),
        /* 30 */ INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
    };
    static char log[8192];
    union bpf_attr a;
    memset(&a, 0, sizeof a);
    a.prog_type = BPF_PROG_TYPE_SOCK_OPS;
    a.insns = (uint64_t)(uintptr_t)prog;
    a.insn_cnt = sizeof prog / sizeof prog[0];
    a.license = (uint64_t)(uintptr_t) "GPL";
    a.log_buf = (uint64_t)(uintptr_t)log;
    a.log_size = sizeof log;
    a.log_level = 1;
    int pfd = (int)sys_bpf(BPF_PROG_LOAD, &a);
    if (pfd < 0) {
        fprintf(stderr, "%s", log);
        return fail("BPF_PROG_LOAD");
    }
    int cg = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cg < 0)
        return fail(argv[1]);
    memset(&a, 0, sizeof a);
    a.target_fd = (uint32_t)cg;
    a.attach_bpf_fd = (uint32_t)pfd;
    a.attach_type = BPF_CGROUP_SOCK_OPS;
    a.attach_flags = BPF_F_ALLOW_MULTI;
    if (sys_bpf(BPF_PROG_ATTACH, &a) < 0)
        return fail("BPF_PROG_ATTACH");
    printf("ready\n");
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0)
        ;
    a.attach_flags = 0;   /* detach names the program; flags are refused */
    if (sys_bpf(BPF_PROG_DETACH, &a) < 0)
        return fail("BPF_PROG_DETACH");
    return 0;
}
