/*
 * sandbox_filter.c: running a program's seccomp filter on shunt's own calls
 * before the kernel gets it (sandbox_filter.h).
 *
 * A filter is classic BPF over struct seccomp_data: the call's number, the
 * architecture, the address it is made from and its six arguments.  For each
 * call of sandbox_calls.c the number, the architecture and the fixed
 * arguments are known; the address and the other arguments are not (they
 * change from one call to the next).  The interpreter keeps, for A, X and
 * the scratch words, a value and whether it is known; a jump on something
 * unknown follows both ways.  Jumps only go forward, so every path ends, and
 * the call is allowed only if every path ends in an answer shunt can live
 * with: SECCOMP_RET_ALLOW, SECCOMP_RET_LOG, or an errno the call may get
 * (sandbox_call.refusable).  Anything else (kill, trap, trace, a user-space
 * supervisor), an instruction the kernel's checker would not let through,
 * or a filter too tangled to follow within the bounds below counts as a
 * refusal: a needless refusal only costs speed (the process's connections
 * move back to kernel TCP), a wrong allowance would get the process killed.
 */
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <stdio.h>

#include "core/process/sandbox_calls.h"
#include "core/process/sandbox_filter.h"

#define MAX_STEPS 200000u    /* instructions run for one call, all paths together */
#define MAX_DEPTH 64u        /* unknown jumps along one path */
#define MAX_ERRNO_VALUE 4095u

struct val {
    uint32_t v;
    bool known;
};

struct state {
    struct val a, x, m[BPF_MEMWORDS];
};

struct walk {
    const struct sock_filter *p;
    size_t len;
    const struct sandbox_call *c;
    unsigned steps, depth;
    const char *fail;          /* why a path was refused */
    uint32_t answer;           /* the answer it ended in, if any */
};

static struct val known(uint32_t v)
{
    return (struct val){ v, true };
}

static const struct val unknown = { 0, false };

/* The word at offset k of the call's seccomp_data; false for an offset the
 * kernel's checker refuses. */
static bool data_word(const struct sandbox_call *c, uint32_t k, struct val *out)
{
    if ((k & 3) || k >= sizeof(struct seccomp_data))
        return false;
    if (k == offsetof(struct seccomp_data, nr))
        *out = known((uint32_t)c->nr);
    else if (k == offsetof(struct seccomp_data, arch))
        *out = known(AUDIT_ARCH_X86_64);
    else if (k < offsetof(struct seccomp_data, args))
        *out = unknown;   /* instruction_pointer: wherever libc makes it from */
    else {
        uint32_t i = (k - (uint32_t)offsetof(struct seccomp_data, args)) / 8;
        bool high = (k - (uint32_t)offsetof(struct seccomp_data, args)) % 8 != 0;
        if (c->fixed & (1u << i))
            *out = known((uint32_t)(high ? c->args[i] >> 32 : c->args[i]));
        else
            *out = unknown;
    }
    return true;
}

static bool refuse(struct walk *w, const char *why)
{
    w->fail = why;
    return false;
}

/* The filter answered r: can shunt live with it for this call? */
static bool answer_ok(struct walk *w, uint32_t r)
{
    uint32_t action = r & SECCOMP_RET_ACTION_FULL;
    w->answer = r;
    if (action == SECCOMP_RET_ALLOW || action == SECCOMP_RET_LOG)
        return true;
    if (action == SECCOMP_RET_ERRNO) {
        uint32_t err = r & SECCOMP_RET_DATA;
        if (err > MAX_ERRNO_VALUE)
            err = MAX_ERRNO_VALUE;
        if (w->c->refusable == SANDBOX_ANY_ERRNO || (uint32_t)w->c->refusable == err)
            return true;
        return refuse(w, "answered with an errno");
    }
    if (action == SECCOMP_RET_TRAP)
        return refuse(w, "trapped (SIGSYS)");
    if (action == SECCOMP_RET_TRACE)
        return refuse(w, "left to a tracer");
    if (action == SECCOMP_RET_USER_NOTIF)
        return refuse(w, "left to a supervisor");
    return refuse(w, "killed");
}

static bool alu(uint16_t op, struct val *a, struct val b)
{
    if (op == BPF_NEG) {
        a->v = -a->v;
        return true;
    }
    if ((op == BPF_DIV || op == BPF_MOD) && (!b.known || b.v == 0))
        return false;   /* a division by zero ends the filter with 0: kill */
    if (!a->known || !b.known) {
        *a = unknown;
        return true;
    }
    switch (op) {
    case BPF_ADD: a->v += b.v; break;
    case BPF_SUB: a->v -= b.v; break;
    case BPF_MUL: a->v *= b.v; break;
    case BPF_DIV: a->v /= b.v; break;
    case BPF_MOD: a->v %= b.v; break;
    case BPF_AND: a->v &= b.v; break;
    case BPF_OR: a->v |= b.v; break;
    case BPF_XOR: a->v ^= b.v; break;
    case BPF_LSH: *a = b.v < 32 ? known(a->v << b.v) : unknown; break;
    case BPF_RSH: *a = b.v < 32 ? known(a->v >> b.v) : unknown; break;
    default: *a = unknown; return false;
    }
    return true;
}

static bool jump_true(uint16_t op, uint32_t a, uint32_t b)
{
    switch (op) {
    case BPF_JEQ: return a == b;
    case BPF_JGT: return a > b;
    case BPF_JGE: return a >= b;
    default: return (a & b) != 0;   /* BPF_JSET */
    }
}

/* Follows every path from pc with state s; false at the first one that ends
 * in an answer shunt cannot live with (or cannot be followed). */
static bool follow(struct walk *w, size_t pc, struct state s)
{
    for (;;) {
        if (pc >= w->len)
            return refuse(w, "ran off the end of the filter");
        if (++w->steps > MAX_STEPS)
            return refuse(w, "too long to follow");
        const struct sock_filter *in = &w->p[pc];
        uint16_t code = in->code;
        uint32_t k = in->k;
        switch (BPF_CLASS(code)) {
        case BPF_LD:
        case BPF_LDX: {
            struct val *dst = BPF_CLASS(code) == BPF_LD ? &s.a : &s.x;
            if (BPF_SIZE(code) != BPF_W)
                return refuse(w, "has a load the kernel refuses");
            if (BPF_MODE(code) == BPF_ABS && BPF_CLASS(code) == BPF_LD) {
                if (!data_word(w->c, k, dst))
                    return refuse(w, "loads outside seccomp_data");
            } else if (BPF_MODE(code) == BPF_IMM) {
                *dst = known(k);
            } else if (BPF_MODE(code) == BPF_MEM && k < BPF_MEMWORDS) {
                *dst = s.m[k];
            } else if (BPF_MODE(code) == BPF_LEN) {
                *dst = known(sizeof(struct seccomp_data));
            } else {
                return refuse(w, "has a load the kernel refuses");
            }
            pc++;
            break;
        }
        case BPF_ST:
        case BPF_STX:
            if (k >= BPF_MEMWORDS)
                return refuse(w, "stores outside the scratch memory");
            s.m[k] = BPF_CLASS(code) == BPF_ST ? s.a : s.x;
            pc++;
            break;
        case BPF_ALU:
            if (!alu(BPF_OP(code), &s.a, BPF_SRC(code) == BPF_X ? s.x : known(k)))
                return refuse(w, "may divide by zero");
            pc++;
            break;
        case BPF_JMP: {
            if (BPF_OP(code) == BPF_JA) {
                if (k >= w->len - pc)
                    return refuse(w, "jumps off the end of the filter");
                pc += 1 + k;
                break;
            }
            if (BPF_OP(code) != BPF_JEQ && BPF_OP(code) != BPF_JGT && BPF_OP(code) != BPF_JGE &&
                BPF_OP(code) != BPF_JSET)
                return refuse(w, "has a jump the kernel refuses");
            struct val b = BPF_SRC(code) == BPF_X ? s.x : known(k);
            if ((s.a.known && b.known) || in->jt == in->jf) {
                pc += 1 + (in->jt == in->jf || jump_true(BPF_OP(code), s.a.v, b.v) ? in->jt : in->jf);
                break;
            }
            /* the call's arguments decide: both ways */
            if (w->depth >= MAX_DEPTH)
                return refuse(w, "too tangled to follow");
            w->depth++;
            bool ok = follow(w, pc + 1 + in->jt, s);
            w->depth--;
            if (!ok)
                return false;
            pc += 1 + in->jf;
            break;
        }
        case BPF_RET:
            if (BPF_RVAL(code) == BPF_K)
                return answer_ok(w, k);
            if (BPF_RVAL(code) == BPF_A && s.a.known)
                return answer_ok(w, s.a.v);
            return refuse(w, "answers with a value that depends on the call");
        case BPF_MISC:
            if (BPF_MISCOP(code) == BPF_TAX)
                s.x = s.a;
            else
                s.a = s.x;
            pc++;
            break;
        default:
            return refuse(w, "has an instruction the kernel refuses");
        }
    }
}

bool sandbox_filter_allows(const struct sock_filter *insns, size_t len, char *why, size_t whylen)
{
    for (size_t i = 0; i < sandbox_call_count; i++) {
        struct walk w = { .p = insns, .len = len, .c = &sandbox_calls[i] };
        struct state s = { .a = known(0), .x = known(0) };
        for (unsigned m = 0; m < BPF_MEMWORDS; m++)
            s.m[m] = unknown;
        if (!follow(&w, 0, s)) {
            snprintf(why, whylen, "%s: %s (%#x)", sandbox_calls[i].name, w.fail, (unsigned)w.answer);
            return false;
        }
    }
    return true;
}
