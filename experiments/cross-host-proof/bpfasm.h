/*
 * bpfasm.h: a tiny hand assembler for BPF (macros over struct bpf_insn and a
 * label fixer) plus raw bpf(2) wrappers, for the experiments of FINDINGS.md.
 * Scratch code, not the product: written for issue 19 item 1 (cross-host proof).
 */
#ifndef PX_BPFASM_H
#define PX_BPFASM_H
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define I(c, d, s, o, i) ((struct bpf_insn){ .code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i) })
#define MOV64_REG(d, s) I(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV64_IMM(d, i) I(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define ADD64_IMM(d, i) I(BPF_ALU64 | BPF_ADD | BPF_K, d, 0, 0, i)
#define AND32_IMM(d, i) I(BPF_ALU | BPF_AND | BPF_K, d, 0, 0, i)
#define OR32_IMM(d, i) I(BPF_ALU | BPF_OR | BPF_K, d, 0, 0, i)
#define LDX_W(d, s, o) I(BPF_LDX | BPF_MEM | BPF_W, d, s, o, 0)
#define LDX_DW(d, s, o) I(BPF_LDX | BPF_MEM | BPF_DW, d, s, o, 0)
#define ST_W(d, o, i) I(BPF_ST | BPF_MEM | BPF_W, d, 0, o, i)
#define ST_DW(d, o, i) I(BPF_ST | BPF_MEM | BPF_DW, d, 0, o, i)
#define STX_W(d, s, o) I(BPF_STX | BPF_MEM | BPF_W, d, s, o, 0)
#define STX_DW(d, s, o) I(BPF_STX | BPF_MEM | BPF_DW, d, s, o, 0)
#define XADD_DW(d, s, o) I(BPF_STX | BPF_ATOMIC | BPF_DW, d, s, o, BPF_ADD)
#define LD_CTX(d, field) LDX_W(d, 6, offsetof(struct bpf_sock_ops, field))
#define CALL(h) I(BPF_JMP | BPF_CALL, 0, 0, 0, h)
#define EXIT() I(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
#define TO_BE64(d) I(BPF_ALU | BPF_END | BPF_TO_BE, d, 0, 0, 64)

struct asm_ {
    struct bpf_insn v[512];
    int n;
    int at[64];
    struct { int insn, to; } j[128];
    int nj;
};
static inline void emit(struct asm_ *a, struct bpf_insn x) { a->v[a->n++] = x; }
static inline void jmp(struct asm_ *a, struct bpf_insn x, int to) { a->j[a->nj].insn = a->n; a->j[a->nj++].to = to; emit(a, x); }
static inline void label(struct asm_ *a, int l) { a->at[l] = a->n; }
#define E(x) emit(&A, x)
#define L(l) label(&A, l)
#define JA(l) jmp(&A, I(BPF_JMP | BPF_JA, 0, 0, 0, 0), l)
#define JEQ32(d, i, l) jmp(&A, I(BPF_JMP32 | BPF_JEQ | BPF_K, d, 0, 0, i), l)
#define JNE32(d, i, l) jmp(&A, I(BPF_JMP32 | BPF_JNE | BPF_K, d, 0, 0, i), l)
#define JSLT64(d, i, l) jmp(&A, I(BPF_JMP | BPF_JSLT | BPF_K, d, 0, 0, i), l)
#define JEQ64(d, i, l) jmp(&A, I(BPF_JMP | BPF_JEQ | BPF_K, d, 0, 0, i), l)
#define JNE64(d, i, l) jmp(&A, I(BPF_JMP | BPF_JNE | BPF_K, d, 0, 0, i), l)
#define JSET32(d, i, l) jmp(&A, I(BPF_JMP32 | BPF_JSET | BPF_K, d, 0, 0, i), l)
/* r = map fd (two instructions) */
#define LD_MAP(d, fd) do { E(I(BPF_LD | BPF_DW | BPF_IMM, d, BPF_PSEUDO_MAP_FD, 0, fd)); E(I(0, 0, 0, 0, 0)); } while (0)

static inline int asm_fix(struct asm_ *a)
{
    for (int k = 0; k < a->nj; k++) {
        if (a->at[a->j[k].to] < 0) { fprintf(stderr, "label %d unset\n", a->j[k].to); return -1; }
        a->v[a->j[k].insn].off = (int16_t)(a->at[a->j[k].to] - a->j[k].insn - 1);
    }
    return 0;
}

static inline long sys_bpf(int cmd, union bpf_attr *attr) { return syscall(SYS_bpf, cmd, attr, sizeof *attr); }

static inline int prog_load(struct asm_ *a, int type, int expected_attach, const char *name)
{
    static char log[1 << 20];
    union bpf_attr at;
    memset(&at, 0, sizeof at);
    at.prog_type = type;
    at.expected_attach_type = expected_attach;
    at.insns = (uint64_t)(uintptr_t)a->v;
    at.insn_cnt = a->n;
    at.license = (uint64_t)(uintptr_t)"GPL";
    at.log_buf = (uint64_t)(uintptr_t)log;
    at.log_size = sizeof log;
    at.log_level = 1;
    strncpy(at.prog_name, name, sizeof at.prog_name - 1);
    int fd = (int)sys_bpf(BPF_PROG_LOAD, &at);
    if (fd < 0) fprintf(stderr, "load %s: %s\n%s\n", name, strerror(errno), log);
    return fd;
}

static inline int map_create(int type, int ksz, int vsz, int max, int flags)
{
    union bpf_attr at;
    memset(&at, 0, sizeof at);
    at.map_type = type; at.key_size = ksz; at.value_size = vsz; at.max_entries = max; at.map_flags = flags;
    int fd = (int)sys_bpf(BPF_MAP_CREATE, &at);
    if (fd < 0) perror("map_create");
    return fd;
}

static inline int map_lookup(int fd, const void *k, void *v)
{
    union bpf_attr at;
    memset(&at, 0, sizeof at);
    at.map_fd = fd; at.key = (uint64_t)(uintptr_t)k; at.value = (uint64_t)(uintptr_t)v;
    return (int)sys_bpf(BPF_MAP_LOOKUP_ELEM, &at);
}

static inline int attach(int cg, int prog, int type)
{
    union bpf_attr at;
    memset(&at, 0, sizeof at);
    at.target_fd = cg; at.attach_bpf_fd = prog; at.attach_type = type; at.attach_flags = BPF_F_ALLOW_MULTI;
    int r = (int)sys_bpf(BPF_PROG_ATTACH, &at);
    if (r < 0) perror("attach");
    return r;
}

static inline int detach(int cg, int prog, int type)
{
    union bpf_attr at;
    memset(&at, 0, sizeof at);
    at.target_fd = cg; at.attach_bpf_fd = prog; at.attach_type = type;
    return (int)sys_bpf(BPF_PROG_DETACH, &at);
}

static inline int prog_stats(int fd, uint64_t *cnt, uint64_t *ns, uint32_t *xlated)
{
    struct bpf_prog_info info;
    memset(&info, 0, sizeof info);
    union bpf_attr at;
    memset(&at, 0, sizeof at);
    at.info.bpf_fd = fd; at.info.info_len = sizeof info; at.info.info = (uint64_t)(uintptr_t)&info;
    if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &at) < 0) return -1;
    *cnt = info.run_cnt; *ns = info.run_time_ns; *xlated = info.xlated_prog_len / 8;
    return 0;
}
#endif
