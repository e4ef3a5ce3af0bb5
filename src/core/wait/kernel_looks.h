/*
 * kernel_looks.h: how often a zero-timeout wait over a set that mixes
 * accelerated sockets with other fds asks the kernel about the others
 * (kernel_looks.c).
 */
#ifndef SHUNT_CORE_KERNEL_LOOKS_H
#define SHUNT_CORE_KERNEL_LOOKS_H

#include <stdbool.h>
#include <stdint.h>

/* One set's bound.  Zeroed: the next wait asks. */
struct kernel_looks {
    uint64_t asked_ns;       /* when the kernel was last asked about the others, */
    uint64_t asked_ticks;    /* ...and then on the tick clock (base/ticks.h) */
    uint32_t skipped;        /* zero-timeout waits that left it out since */
    bool quiet;              /* that question found none of them ready */
    const void *thread;      /* who asked (its pt_kernel_touches' address), */
    uint64_t touches;        /* ...and its count of pt_kernel_touches then */
};

/*
 * A zero-timeout wait on the set r belongs to, its own members answered:
 * true if it may leave the kernel out this time (counted as such).  Only
 * while the last question found the others quiet, was asked by this thread,
 * which touched no fd of the kernel's since (passthrough.h), and
 * SHUNT_POLL_KERNEL_CALLS waits (this one included) have not been made nor
 * SHUNT_POLL_KERNEL_US passed since; either setting at 0 asks every time.
 * False: the caller asks the kernel now and tells kernel_look_asked.
 */
bool kernel_look_skip(struct kernel_looks *r);

/* A moment on both clocks: taken before a question to the kernel. */
struct look_stamp {
    uint64_t ns, ticks;
};
struct look_stamp kernel_look_stamp(void);

/* The kernel was asked about r's other members at at (kernel_look_stamp,
 * taken before the question); found: some of them were ready. */
void kernel_look_asked(struct kernel_looks *r, struct look_stamp at, bool found);

/*
 * The calling thread's bound for a poll or select set, found by key: a hash
 * of the set's fds that are not ours (kernel_looks_key).  A few sets per
 * thread are remembered; any other set starts with a question to the kernel.
 */
struct kernel_looks *kernel_looks_of_thread(uint64_t key);

/*
 * The calling thread's bound for the companion of an accelerated socket
 * whose non-blocking reads find its ring empty, found by key (the socket's
 * object and inode): the look that notices a peer that died without a word
 * (doorbell_check_peer) is a kernel question too.  Kept apart from the
 * sets', so that an event loop's reads of many sockets do not push its poll
 * set out.
 */
struct kernel_looks *kernel_looks_of_socket(uint64_t key);

/* Adds one fd and its events to a set's key (start from KERNEL_LOOKS_KEY0). */
#define KERNEL_LOOKS_KEY0 0x9e3779b97f4a7c15ull
static inline uint64_t kernel_looks_key(uint64_t key, int fd, short events)
{
    key ^= ((uint64_t)(uint32_t)fd << 16) ^ (uint16_t)events;
    key *= 0xff51afd7ed558ccdull;
    return key ^ (key >> 29);
}

/* Zero-timeout waits of the calling thread that left the kernel out (the
 * "os_polls_skipped" counter). */
long long kernel_looks_skipped(void);

#endif
