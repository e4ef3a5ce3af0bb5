/*
 * fabric_prog.c: the cgroup sock_ops program of `shunt fabric enable`,
 * written out as BPF instructions (docs/fabric-discovery.md).
 *
 * What it does, for every TCP socket of the cgroup tree it is attached to:
 *
 *   TCP_CONNECT_CB    an active open, just before its SYN is built: unless
 *                     the destination is loopback (127.0.0.0/8, ::1,
 *                     ::ffff:127.0.0.0/104: never leaves the namespace, and
 *                     shunt's registry pairs those), ask for the header
 *                     option callbacks (WRITE_HDR_OPT_CB_FLAG);
 *   HDR_OPT_LEN_CB    a packet of such a socket is being built: on the SYN
 *                     (SYN without ACK), reserve 16 bytes of option space;
 *                     on the first packet without SYN (the handshake is
 *                     over) turn the callbacks off again, so the
 *                     connection's later packets cost nothing; a SYN-ACK
 *                     (here only when another program flagged a listener)
 *                     is left alone;
 *   WRITE_HDR_OPT_CB  on the SYN, write the option: kind 253, length 16,
 *                     ExID, the boot tag (a constant, filled in here) and
 *                     bpf_get_socket_cookie(), all big-endian.
 *
 * Every other op returns at once without touching `reply`, so the kernel's
 * defaults (RTO, ECN, window) stay as they were.  A retransmitted SYN gets
 * the option again (the flag is still on).  When the SYN has no 16 bytes to
 * spare (MD5 signatures, say), the reservation fails and the SYN goes out
 * without the option: that connection is not paired, nothing else happens.
 *
 * Written with a few macros over struct bpf_insn and a two-pass label fixer,
 * no compiler at run time.  Registers: r1 the context on entry, r6 the
 * context kept across calls, r3 the packet's SYN and ACK bits until the
 * first call, r2-r5 arguments, r0 results; the option is
 * built on the stack at r10-16.
 */
#include <arpa/inet.h>
#include <linux/bpf.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

#include "registry/synopt.h"
#include "tool/fabric_prog.h"

#define TCP_FLAG_SYN 0x02 /* in skb_tcp_flags */
#define TCP_FLAG_ACK 0x10

#define INSN(c, d, s, o, i) ((struct bpf_insn){ .code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i) })
#define MOV64_REG(d, s) INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV64_IMM(d, i) INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define ADD64_IMM(d, i) INSN(BPF_ALU64 | BPF_ADD | BPF_K, d, 0, 0, i)
#define AND32_IMM(d, i) INSN(BPF_ALU | BPF_AND | BPF_K, d, 0, 0, i)
#define OR32_IMM(d, i) INSN(BPF_ALU | BPF_OR | BPF_K, d, 0, 0, i)
#define TO_BE64(d) INSN(BPF_ALU | BPF_END | BPF_TO_BE, d, 0, 0, 64)
/* A 32-bit load of a field of struct bpf_sock_ops (the context) */
#define LD_CTX(d, field) INSN(BPF_LDX | BPF_MEM | BPF_W, d, 6, offsetof(struct bpf_sock_ops, field), 0)
#define LD_W(d, s, off) INSN(BPF_LDX | BPF_MEM | BPF_W, d, s, off, 0)
#define LSH64_IMM(d, i) INSN(BPF_ALU64 | BPF_LSH | BPF_K, d, 0, 0, i)
#define OR64_REG(d, s) INSN(BPF_ALU64 | BPF_OR | BPF_X, d, s, 0, 0)
#define ST_W(d, off, i) INSN(BPF_ST | BPF_MEM | BPF_W, d, 0, off, i)
#define STX_DW(d, s, off) INSN(BPF_STX | BPF_MEM | BPF_DW, d, s, off, 0)
#define CALL(helper) INSN(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_##helper)
#define EXIT() INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
/* Jumps name a label; their offsets are filled in once every label is known. */
#define JA(l) jump(&p, INSN(BPF_JMP | BPF_JA, 0, 0, 0, 0), l)
#define JEQ32(d, i, l) jump(&p, INSN(BPF_JMP32 | BPF_JEQ | BPF_K, d, 0, 0, i), l)
#define JNE32(d, i, l) jump(&p, INSN(BPF_JMP32 | BPF_JNE | BPF_K, d, 0, 0, i), l)
#define EMIT(insn) emit(&p, insn)
#define LABEL(l) (p.at[l] = p.n)

enum label { L_OUT, L_CONNECT, L_V4, L_MAPPED, L_FIRST_OCTET, L_MARK, L_UNPROVEN, L_LEN, L_HANDSHAKE_OVER,
             L_SET_FLAGS, L_WRITE, L_COOKIE, L_COUNT };

struct prog {
    struct bpf_insn *v;
    size_t n, cap;
    size_t at[L_COUNT];
    struct {
        size_t insn;
        enum label to;
    } jumps[32];
    size_t njumps;
    int overflow;
};

static void emit(struct prog *p, struct bpf_insn insn)
{
    if (p->n == p->cap) {
        p->overflow = 1;
        return;
    }
    p->v[p->n++] = insn;
}

static void jump(struct prog *p, struct bpf_insn insn, enum label to)
{
    if (p->njumps == sizeof p->jumps / sizeof p->jumps[0]) {
        p->overflow = 1;
        return;
    }
    p->jumps[p->njumps].insn = p->n;
    p->jumps[p->njumps].to = to;
    p->njumps++;
    emit(p, insn);
}

/* An address or a word of the option as it lies in memory, read as the
 * native 32-bit word a load or store of the program sees. */
static int32_t word(const uint8_t b[4])
{
    int32_t w;
    memcpy(&w, b, sizeof w);
    return w;
}

static int32_t net32(uint32_t host)
{
    return (int32_t)htonl(host);
}

/* bpf_getsockopt or bpf_setsockopt of the socket's TCP_NOTSENT_LOWAT through
 * the int at r10-4, which is 0 before the call (what a set writes). */
static void lowat_call(struct prog *p, int helper)
{
    emit(p, ST_W(10, -4, 0));
    emit(p, MOV64_REG(1, 6));
    emit(p, MOV64_IMM(2, IPPROTO_TCP));
    emit(p, MOV64_IMM(3, TCP_NOTSENT_LOWAT));
    emit(p, MOV64_REG(4, 10));
    emit(p, ADD64_IMM(4, -4));
    emit(p, MOV64_IMM(5, 4));
    emit(p, INSN(BPF_JMP | BPF_CALL, 0, 0, 0, helper));
}

size_t fabric_prog_build(struct bpf_insn *insns, size_t cap, uint32_t boot_tag)
{
    struct prog p = { .v = insns, .cap = cap };
    for (int l = 0; l < L_COUNT; l++)
        p.at[l] = (size_t)-1;
    const uint8_t head[4] = { SYNOPT_KIND, SYNOPT_LEN, SYNOPT_EXID >> 8, SYNOPT_EXID & 0xff };
    const uint8_t tag[4] = { boot_tag >> 24, boot_tag >> 16, boot_tag >> 8, boot_tag };

    EMIT(MOV64_REG(6, 1)); /* r6 = ctx */
    EMIT(LD_CTX(2, op));
    JEQ32(2, BPF_SOCK_OPS_TCP_CONNECT_CB, L_CONNECT);
    /* r3: the packet's SYN and ACK bits (0 when there is no packet).  A
     * SYN without ACK is a client's; a SYN-ACK comes here only when another
     * program asked for callbacks on a listener, and is not ours to mark. */
    EMIT(LD_CTX(3, skb_tcp_flags));
    EMIT(AND32_IMM(3, TCP_FLAG_SYN | TCP_FLAG_ACK));
    JEQ32(2, BPF_SOCK_OPS_HDR_OPT_LEN_CB, L_LEN);
    JEQ32(2, BPF_SOCK_OPS_WRITE_HDR_OPT_CB, L_WRITE);
    LABEL(L_OUT);
    EMIT(MOV64_IMM(0, 1)); /* 1: a sock_ops program's "ok" */
    EMIT(EXIT());

    /* An active open: is the destination loopback? */
    LABEL(L_CONNECT);
    EMIT(LD_CTX(2, family));
    JEQ32(2, AF_INET, L_V4);
    JNE32(2, AF_INET6, L_OUT);
    EMIT(LD_CTX(2, remote_ip6[0])); /* addresses are in network byte order */
    JNE32(2, 0, L_MARK);
    EMIT(LD_CTX(2, remote_ip6[1]));
    JNE32(2, 0, L_MARK);
    EMIT(LD_CTX(2, remote_ip6[2]));
    JEQ32(2, net32(0xffff), L_MAPPED); /* ::ffff:a.b.c.d */
    JNE32(2, 0, L_MARK);
    EMIT(LD_CTX(2, remote_ip6[3]));
    JEQ32(2, net32(1), L_OUT); /* ::1 */
    JA(L_MARK);
    LABEL(L_MAPPED);
    EMIT(LD_CTX(2, remote_ip6[3]));
    JA(L_FIRST_OCTET);
    LABEL(L_V4);
    EMIT(LD_CTX(2, remote_ip4));
    LABEL(L_FIRST_OCTET);
    EMIT(AND32_IMM(2, net32(0xff000000)));
    JEQ32(2, net32(0x7f000000), L_OUT); /* 127.0.0.0/8 */
    /* Marked for the option.  Did the process mark the socket as shunt's
     * (TCP_NOTSENT_LOWAT = SYNOPT_CLIENT_MARK before connect)?  Then the
     * mark is consumed (0: the kernel's default again) and remembered in a
     * callback flag the kernel keeps per socket and calls nothing for in
     * SYN_SENT, until the option is written with the flag "process". */
    LABEL(L_MARK);
    lowat_call(&p, BPF_FUNC_getsockopt);
    JNE32(0, 0, L_UNPROVEN);
    EMIT(LD_W(2, 10, -4));
    JNE32(2, SYNOPT_CLIENT_MARK, L_UNPROVEN);
    lowat_call(&p, BPF_FUNC_setsockopt);
    EMIT(LD_CTX(2, bpf_sock_ops_cb_flags));
    EMIT(OR32_IMM(2, BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG | BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG));
    JA(L_SET_FLAGS);
    LABEL(L_UNPROVEN);
    EMIT(LD_CTX(2, bpf_sock_ops_cb_flags));
    EMIT(OR32_IMM(2, BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG));
    JA(L_SET_FLAGS);

    /* A packet of a marked socket is being sized. */
    LABEL(L_LEN);
    JEQ32(3, 0, L_HANDSHAKE_OVER);
    JEQ32(3, TCP_FLAG_ACK, L_HANDSHAKE_OVER);
    JNE32(3, TCP_FLAG_SYN, L_OUT); /* a SYN-ACK */
    EMIT(MOV64_REG(1, 6));
    EMIT(MOV64_IMM(2, SYNOPT_LEN));
    EMIT(MOV64_IMM(3, 0));
    EMIT(CALL(reserve_hdr_opt));
    JA(L_OUT);
    LABEL(L_HANDSHAKE_OVER);
    EMIT(LD_CTX(2, bpf_sock_ops_cb_flags));
    EMIT(AND32_IMM(2, ~(BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG | BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG)));
    LABEL(L_SET_FLAGS); /* r2: the socket's new callback flags */
    EMIT(MOV64_REG(1, 6));
    EMIT(CALL(sock_ops_cb_flags_set));
    JA(L_OUT);

    /* The SYN's option is written. */
    LABEL(L_WRITE);
    JNE32(3, TCP_FLAG_SYN, L_OUT);
    EMIT(MOV64_REG(1, 6));
    EMIT(CALL(get_socket_cookie)); /* r0 = the socket's cookie, SO_COOKIE */
    EMIT(LD_CTX(2, bpf_sock_ops_cb_flags));
    EMIT(AND32_IMM(2, BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG));
    JEQ32(2, 0, L_COOKIE);
    EMIT(MOV64_IMM(2, SYNOPT_FLAG_PROCESS));
    EMIT(LSH64_IMM(2, 56)); /* the cookie's top byte: flags (a 56-bit count never gets there) */
    EMIT(OR64_REG(0, 2));
    LABEL(L_COOKIE);
    EMIT(TO_BE64(0));
    EMIT(ST_W(10, -16, word(head))); /* kind, length, ExID */
    EMIT(ST_W(10, -12, word(tag)));
    EMIT(STX_DW(10, 0, -8));
    EMIT(MOV64_REG(1, 6));
    EMIT(MOV64_REG(2, 10));
    EMIT(ADD64_IMM(2, -16));
    EMIT(MOV64_IMM(3, SYNOPT_LEN));
    EMIT(MOV64_IMM(4, 0));
    EMIT(CALL(store_hdr_opt));
    JA(L_OUT);

    if (p.overflow)
        return 0;
    for (size_t j = 0; j < p.njumps; j++) {
        size_t to = p.at[p.jumps[j].to];
        if (to == (size_t)-1)
            return 0;
        p.v[p.jumps[j].insn].off = (int16_t)((long)to - (long)p.jumps[j].insn - 1);
    }
    return p.n;
}
