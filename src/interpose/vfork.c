/*
 * vfork.c: vfork, with its real semantics.
 *
 * The child of vfork borrows the parent's memory and stack until it execs
 * or exits, so a wrapper may neither return into a frame of its own in the
 * child nor keep anything on the stack across the call.  On x86_64 vfork is
 * a trampoline (as the sanitizers do it): the caller's return address goes
 * to thread-local storage, libc's vfork is called, and both child and
 * parent then jump back to the caller.  While the child runs,
 * shunt_in_vfork_child is set, and shunt leaves its (shared!) fd table and
 * every shared-memory count alone: to the kernel the child has fds of its
 * own, and whatever it closes must not end the parent's connections.
 */
#include <stdbool.h>

#include "core/conn/fabric_conn.h"
#include "core/kinds/tcp_socket.h"
#include "core/process/holders.h"
#include "interpose/wrap.h"

#define VFORK_DEPTH 8
static SHUNT_TLS void *vfork_return[VFORK_DEPTH];
static SHUNT_TLS int vfork_depth;

void *shunt_vfork_enter(void *ret);
void *shunt_vfork_leave(long result);

/* Before libc's vfork: remembers where to return; gives libc's vfork. */
__attribute__((used)) void *shunt_vfork_enter(void *ret)
{
    shunt_ensure_init();
    if (!shunt_sandboxed()) {   /* a sandboxed process counts nothing in (core/process/sandbox.c) */
        /* the child may exec with a fabric connection's fd: it leaves first, here in the
         * parent (the child must not touch the engine, nor the parent's streams) */
        fabric_conn_leave_all("vfork", true);
        holders_before_spawn();
    }
    if (vfork_depth < VFORK_DEPTH)
        vfork_return[vfork_depth] = ret;
    vfork_depth++;
    return (void *)shunt_real.vfork;
}

/* After it, in the child first (result 0), then in the parent once the
 * child has exec'd or exited: where to return to. */
__attribute__((used)) void *shunt_vfork_leave(long result)
{
    int top = vfork_depth - 1;
    void *ret = vfork_return[top < VFORK_DEPTH ? top : VFORK_DEPTH - 1];
    if (result == 0) {
        shunt_in_vfork_child = true;
    } else {
        shunt_in_vfork_child = false;
        shunt_thread_passes = false;   /* the child's, set in this thread's memory it borrowed */
        vfork_depth--;
        if (result < 0 && !shunt_sandboxed()) {
            int err = errno;
            holders_spawn_failed();
            errno = err;
        }
    }
    return ret;
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl vfork\n"
        ".type vfork,@function\n"
        "vfork:\n"
        "    endbr64\n"
        "    pop %rdi\n"                   /* the caller's return address; the stack is now 16-aligned */
        "    call shunt_vfork_enter\n"
        "    call *%rax\n"                 /* libc's vfork: returns twice, child first */
        "    mov %rax, %rdi\n"
        "    push %rax\n"                  /* the result, over where the return address was */
        "    sub $8, %rsp\n"
        "    call shunt_vfork_leave\n"
        "    add $8, %rsp\n"
        "    mov %rax, %rcx\n"
        "    pop %rax\n"
        "    jmp *%rcx\n"
        ".size vfork, .-vfork\n");
#else
#error "vfork needs a trampoline for this architecture"
#endif
