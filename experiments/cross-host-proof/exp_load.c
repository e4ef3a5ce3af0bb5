/*
 * exp_load.c: experiment 1+2 of FINDINGS.md (issue 19 item 1, cross-host proof).
 *
 * Builds, loads and attaches (ONLY to the cgroup /sys/fs/cgroup/unified/px-proof,
 * created here, BPF_F_ALLOW_MULTI) a hand-written sock_ops program that tests:
 *   - bpf_getsockopt(SOL_TCP, TCP_SAVE_SYN) at TCP_CONNECT_CB on an active socket
 *     (the client process marks its socket with TCP_SAVE_SYN=1 before connect);
 *   - a 4-byte SYN option "P" (kind 253, ExID 0x5350) written only for such sockets
 *     (the decision is re-read from TCP_SAVE_SYN at every SYN, retransmits too);
 *   - bpf_getsockopt(TCP_SAVE_SYN) on a listener at TCP_LISTEN_CB, which turns on the
 *     listener's WRITE_HDR_OPT_CB_FLAG;
 *   - on the SYN-ACK (request socket, not a full socket), bpf_load_hdr_opt with
 *     BPF_LOAD_HDR_OPT_TCP_SYN reading the client's SYN for P, and a 4-byte SYN-ACK
 *     option "S" (kind 253, ExID 0x5351) only when P was there;
 *   - at ACTIVE_ESTABLISHED_CB (skb = the SYN-ACK) the client's program reads S and
 *     bpf_setsockopt(TCP_SAVE_SYN) = 2 (S seen) or 0 (not seen) on the client socket,
 *     which the client reads unprivileged with getsockopt.
 * With -m (experiment 3) the client's mark is instead TCP_NOTSENT_LOWAT = 0x7F534850
 * (a 32-bit magic nobody sets by accident): at TCP_CONNECT_CB the program reads it,
 * resets it to 0 (the kernel default, "use the sysctl") and remembers P in the
 * socket's BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG bit (the SYN path tests that bit;
 * ACTIVE_ESTABLISHED clears it); counter 14 then counts PARSE_HDR_OPT_CB runs.
 * Counters in an array map (index meanings in names[] below); "-n" builds the same
 * program without counters (for the cost measurement).
 * Usage: exp_load [-n] [-m]   (prints "ready"; SIGUSR1 prints counters+stats; SIGTERM/SIGINT
 * prints, detaches, removes the cgroup if empty)
 */
#include <signal.h>
#include <sys/stat.h>
#include "bpfasm.h"

#define CG "/sys/fs/cgroup/unified/px-proof"
#define SOL_TCP_ 6
#define TCP_SAVE_SYN_ 27
#define SYN 0x02
#define ACK 0x10

enum { L_OUT, L_CONNECT, L_LISTEN, L_LEN, L_AEST, L_PEST, L_SYNACK, L_EMIT, L_STORE, L_NONSYN, L_SETV, L_SETFLAG,
       L_C1, L_C2, L_C3, L_C4, L_C5, L_C6, L_C7, L_C8, L_C9, L_C10, L_C11, L_C12, L_C13, L_C14, L_C15, L_C16, L_C17, L_C18, L_C19, L_C20, L_MAX };
static const char *names[16] = {
    "connect_cb", "connect_cb save_syn==1 (P)", "listen_cb", "listen_cb save_syn!=0 (flag)",
    "SYN: reserve P ok", "SYN: store P ok", "SYN-ACK: reserve S ok (SYN had P)", "SYN-ACK: store S ok",
    "active_established", "active_est: S seen -> save_syn=2", "active_est: no S -> save_syn=0", "passive_established",
    "hdr_opt_len on non-SYN fullsock (flag cleared)", "hdr_opt_len on SYN-ACK", "connect getsockopt error", "last error (raw)" };

static int lowat = 0;
#define MAGIC 0x7F534850
#define TCP_NOTSENT_LOWAT_ 25
#define PFLAG BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG
static int counters = 1, mapfd = -1, nextc = L_MAX; /* auto labels after the named ones */

static struct asm_ A;
static int word(uint8_t a, uint8_t b, uint8_t c, uint8_t d) { uint8_t x[4] = { a, b, c, d }; int w; memcpy(&w, x, 4); return w; }

/* counters[key]++ where key is an immediate (reg<0) or in reg; clobbers r1-r5, r0 */
static void count(int key, int reg)
{
    if (!counters) return;
    int skip = nextc++;
    if (reg >= 0) E(STX_W(10, reg, -24)); else E(ST_W(10, -24, key));
    LD_MAP(1, mapfd);
    E(MOV64_REG(2, 10)); E(ADD64_IMM(2, -24));
    E(CALL(BPF_FUNC_map_lookup_elem));
    JEQ64(0, 0, skip);
    E(MOV64_IMM(1, 1));
    E(XADD_DW(0, 1, 0));
    L(skip);
}
/* r0 = bpf_getsockopt(SOL_TCP, TCP_SAVE_SYN) into fp-8 */
static void get_save_syn(void)
{
    E(ST_W(10, -8, 0));
    E(MOV64_REG(1, 6)); E(MOV64_IMM(2, SOL_TCP_)); E(MOV64_IMM(3, TCP_SAVE_SYN_));
    E(MOV64_REG(4, 10)); E(ADD64_IMM(4, -8)); E(MOV64_IMM(5, 4));
    E(CALL(BPF_FUNC_getsockopt));
}

static void build(void)
{
    memset(&A, 0, sizeof A);
    for (int i = 0; i < 64; i++) A.at[i] = -1;
    E(MOV64_REG(6, 1));
    E(LD_CTX(7, op));
    JEQ32(7, BPF_SOCK_OPS_TCP_CONNECT_CB, L_CONNECT);
    JEQ32(7, BPF_SOCK_OPS_TCP_LISTEN_CB, L_LISTEN);
    JEQ32(7, BPF_SOCK_OPS_HDR_OPT_LEN_CB, L_LEN);
    JEQ32(7, BPF_SOCK_OPS_WRITE_HDR_OPT_CB, L_LEN);
    JEQ32(7, BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB, L_AEST);
    JEQ32(7, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB, L_PEST);
    if (lowat) { int no = nextc++; JNE32(7, BPF_SOCK_OPS_PARSE_HDR_OPT_CB, no); count(14, -1); L(no); }
    L(L_OUT);
    E(MOV64_IMM(0, 1));
    E(EXIT());

    L(L_CONNECT);
    count(0, -1);
    if (lowat) {
        E(ST_W(10, -8, 0));
        E(MOV64_REG(1, 6)); E(MOV64_IMM(2, SOL_TCP_)); E(MOV64_IMM(3, TCP_NOTSENT_LOWAT_));
        E(MOV64_REG(4, 10)); E(ADD64_IMM(4, -8)); E(MOV64_IMM(5, 4));
        E(CALL(BPF_FUNC_getsockopt));
        JNE64(0, 0, L_OUT);
        E(LDX_W(2, 10, -8));
        JNE32(2, MAGIC, L_OUT);
        E(ST_W(10, -8, 0));
        E(MOV64_REG(1, 6)); E(MOV64_IMM(2, SOL_TCP_)); E(MOV64_IMM(3, TCP_NOTSENT_LOWAT_));
        E(MOV64_REG(4, 10)); E(ADD64_IMM(4, -8)); E(MOV64_IMM(5, 4));
        E(CALL(BPF_FUNC_setsockopt));
        count(1, -1);
        E(LD_CTX(2, bpf_sock_ops_cb_flags));
        E(OR32_IMM(2, BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG | PFLAG));
        E(MOV64_REG(1, 6));
        E(CALL(BPF_FUNC_sock_ops_cb_flags_set));
        JA(L_OUT);
    } else {
        get_save_syn();
        E(MOV64_REG(9, 0));
        { int ok = nextc++; JEQ64(9, 0, ok); count(14, -1); JA(L_OUT); L(ok); }
        E(LDX_W(2, 10, -8));
        JNE32(2, 1, L_OUT);
        count(1, -1);
    }
    L(L_SETFLAG);
    E(LD_CTX(2, bpf_sock_ops_cb_flags));
    E(OR32_IMM(2, BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG));
    E(MOV64_REG(1, 6));
    E(CALL(BPF_FUNC_sock_ops_cb_flags_set));
    JA(L_OUT);

    L(L_LISTEN);
    count(2, -1);
    get_save_syn();
    JNE64(0, 0, L_OUT);
    E(LDX_W(2, 10, -8));
    JEQ32(2, 0, L_OUT);
    count(3, -1);
    JA(L_SETFLAG);

    L(L_LEN); /* r7 = op: HDR_OPT_LEN or WRITE_HDR_OPT */
    E(LD_CTX(3, skb_tcp_flags));
    E(MOV64_REG(9, 3));
    JSET32(9, SYN, L_C20); JA(L_NONSYN); L(L_C20);
    JSET32(9, ACK, L_SYNACK);
    /* a pure SYN: only a full socket whose TCP_SAVE_SYN is 1 */
    E(LD_CTX(2, is_fullsock));
    JEQ32(2, 0, L_OUT);
    if (lowat) {
        E(LD_CTX(2, bpf_sock_ops_cb_flags));
        { int has = nextc++; JSET32(2, PFLAG, has); JA(L_OUT); L(has); }
    } else {
        get_save_syn();
        JNE64(0, 0, L_OUT);
        E(LDX_W(2, 10, -8));
        JNE32(2, 1, L_OUT);
    }
    E(ST_W(10, -16, word(253, 4, 0x53, 0x50)));
    E(MOV64_IMM(8, 4));
    JA(L_EMIT);

    L(L_SYNACK);
    JNE32(7, BPF_SOCK_OPS_HDR_OPT_LEN_CB, L_C19);
    count(13, -1);
    L(L_C19);
    E(ST_W(10, -16, word(253, 4, 0x53, 0x50)));
    E(MOV64_REG(1, 6)); E(MOV64_REG(2, 10)); E(ADD64_IMM(2, -16)); E(MOV64_IMM(3, 4));
    E(MOV64_IMM(4, BPF_LOAD_HDR_OPT_TCP_SYN));
    E(CALL(BPF_FUNC_load_hdr_opt));
    { int found = nextc++; JSLT64(0, 0, L_C18); JA(found); L(L_C18);
      if (counters) { E(MOV64_REG(9, 0)); E(ST_W(10, -24, 15)); LD_MAP(1, mapfd); E(MOV64_REG(2, 10)); E(ADD64_IMM(2, -24));
        E(CALL(BPF_FUNC_map_lookup_elem)); JEQ64(0, 0, L_OUT); E(STX_DW(0, 9, 0)); }
      JA(L_OUT); L(found); }
    E(ST_W(10, -16, word(253, 4, 0x53, 0x51)));
    E(MOV64_IMM(8, 6));

    L(L_EMIT); /* the option is at fp-16, 4 bytes; r8 = counter index */
    JEQ32(7, BPF_SOCK_OPS_WRITE_HDR_OPT_CB, L_STORE);
    E(MOV64_REG(1, 6)); E(MOV64_IMM(2, 4)); E(MOV64_IMM(3, 0));
    E(CALL(BPF_FUNC_reserve_hdr_opt));
    JNE64(0, 0, L_OUT);
    count(0, 8);
    JA(L_OUT);
    L(L_STORE);
    E(MOV64_REG(1, 6)); E(MOV64_REG(2, 10)); E(ADD64_IMM(2, -16)); E(MOV64_IMM(3, 4)); E(MOV64_IMM(4, 0));
    E(CALL(BPF_FUNC_store_hdr_opt));
    JNE64(0, 0, L_OUT);
    E(ADD64_IMM(8, 1));
    count(0, 8);
    JA(L_OUT);

    L(L_NONSYN); /* the handshake is over for this socket: stop the callbacks */
    JNE32(7, BPF_SOCK_OPS_HDR_OPT_LEN_CB, L_OUT);
    E(LD_CTX(2, is_fullsock));
    JEQ32(2, 0, L_OUT);
    count(12, -1);
    E(LD_CTX(2, bpf_sock_ops_cb_flags));
    E(AND32_IMM(2, ~BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG));
    E(MOV64_REG(1, 6));
    E(CALL(BPF_FUNC_sock_ops_cb_flags_set));
    JA(L_OUT);

    L(L_AEST); /* client: handshake done, skb = the SYN-ACK */
    count(8, -1);
    if (lowat) {
        E(LD_CTX(2, bpf_sock_ops_cb_flags));
        { int has = nextc++; JSET32(2, PFLAG, has); JA(L_OUT); L(has); }
        E(AND32_IMM(2, ~PFLAG));
        E(MOV64_REG(1, 6));
        E(CALL(BPF_FUNC_sock_ops_cb_flags_set));
    } else {
        get_save_syn();
        JNE64(0, 0, L_OUT);
        E(LDX_W(2, 10, -8));
        JNE32(2, 1, L_OUT);
    }
    E(ST_W(10, -16, word(253, 4, 0x53, 0x51)));
    E(MOV64_REG(1, 6)); E(MOV64_REG(2, 10)); E(ADD64_IMM(2, -16)); E(MOV64_IMM(3, 4)); E(MOV64_IMM(4, 0));
    E(CALL(BPF_FUNC_load_hdr_opt));
    E(MOV64_REG(9, 0));
    E(ST_W(10, -8, 0));
    JSLT64(9, 0, L_SETV);
    E(ST_W(10, -8, 2));
    L(L_SETV);
    E(MOV64_REG(1, 6)); E(MOV64_IMM(2, SOL_TCP_)); E(MOV64_IMM(3, TCP_SAVE_SYN_));
    E(MOV64_REG(4, 10)); E(ADD64_IMM(4, -8)); E(MOV64_IMM(5, 4));
    E(CALL(BPF_FUNC_setsockopt));
    JNE64(0, 0, L_OUT);
    JSLT64(9, 0, L_C17);
    count(9, -1);
    JA(L_OUT);
    L(L_C17);
    count(10, -1);
    JA(L_OUT);

    L(L_PEST);
    count(11, -1);
    JA(L_OUT);
}

static volatile sig_atomic_t got;
static void on(int s) { got = s; }

static void report(int prog)
{
    uint64_t cnt, ns; uint32_t x;
    if (counters)
        for (uint32_t k = 0; k < 16; k++) {
            uint64_t v = 0;
            map_lookup(mapfd, &k, &v);
            if (v) printf("  [%2u] %-48s %lld\n", k, names[k], k == 15 ? (long long)(int64_t)v : (long long)v);
        }
    if (prog_stats(prog, &cnt, &ns, &x) == 0)
        printf("  runs %llu, run_time_ns %llu, mean %.1f ns, xlated insns %u\n", (unsigned long long)cnt,
               (unsigned long long)ns, cnt ? (double)ns / cnt : 0.0, x);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-n")) counters = 0;
        if (!strcmp(argv[i], "-m")) { lowat = 1; names[1] = "connect_cb notsent_lowat==MAGIC (P), reset to 0"; names[14] = "parse_hdr_opt_cb runs"; }
    }
    if (counters) mapfd = map_create(BPF_MAP_TYPE_ARRAY, 4, 8, 16, 0);
    build();
    if (asm_fix(&A)) return 1;
    int prog = prog_load(&A, BPF_PROG_TYPE_SOCK_OPS, 0, "px_exp");
    if (prog < 0) return 1;
    mkdir(CG, 0755);
    int cg = open(CG, O_RDONLY | O_DIRECTORY);
    if (cg < 0 || attach(cg, prog, BPF_CGROUP_SOCK_OPS) < 0) return 1;
    printf("ready: %d instructions, attached to " CG "\n", A.n);
    fflush(stdout);
    signal(SIGUSR1, on); signal(SIGTERM, on); signal(SIGINT, on);
    for (;;) {
        pause();
        if (got == SIGUSR1) { got = 0; report(prog); continue; }
        break;
    }
    report(prog);
    detach(cg, prog, BPF_CGROUP_SOCK_OPS);
    close(cg);
    if (rmdir(CG) < 0) perror("rmdir " CG);
    printf("detached\n");
    return 0;
}
