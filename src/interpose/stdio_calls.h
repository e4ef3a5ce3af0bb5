/*
 * stdio_calls.h: stdio streams on accelerated sockets (stdio_calls.c).
 *
 * glibc's stdio reads and writes a FILE's fd with libc's internal read and
 * write, which no preload sees.  So a stream on a socket that is (or may
 * become) accelerated is a cookie stream whose callbacks go through shunt's
 * own read and write: fdopen makes one, and the standard streams are swapped
 * for one while fd 0, 1 or 2 is such a socket.  These hooks keep the swap in
 * step with the fd table.
 */
#ifndef SHUNT_STDIO_CALLS_H
#define SHUNT_STDIO_CALLS_H

#include <stdbool.h>
#include <stdio.h>

/* glibc's FILE flag bits that <stdio.h> does not name (libio/libio.h). */
#define IO_UNBUFFERED 0x0002
#define IO_NO_READS 0x0004
#define IO_NO_WRITES 0x0008
#define IO_LINE_BUF 0x0200
#define IO_IN_BACKUP 0x0100
#define IO_IS_APPENDING 0x1000
#define IO_FLAGS_SEEN (_IO_EOF_SEEN | _IO_ERR_SEEN)

/* fd 0, 1 or 2 may have changed (dup2 onto it, close, accept or connect
 * that gave or made it, an fd received there): the standard stream of that
 * fd is swapped for a cookie stream, or given back its own FILE. */
void stdio_std_changed_slow(int fd);

static inline void stdio_std_changed(int fd)
{
    if ((unsigned)fd <= 2)
        stdio_std_changed_slow(fd);
}

/* Every fd in [first, last] that is 0, 1 or 2. */
void stdio_std_changed_range(unsigned first, unsigned last);

/* At start-up (the constructor): the standard streams of an image that
 * inherited an accelerated socket on fd 0, 1 or 2. */
void stdio_at_start(void);

/* At exit, before the channels are let go of: every cookie stream is
 * flushed while its connection can still take the bytes. */
void stdio_at_exit(void);

void stdio_after_fork_child(void);

/* fclose of one of shunt's streams (or of a standard FILE swapped out for
 * one): true and the result in *r if it was one. */
bool stdio_fclose(FILE *fp, int *r);

#endif
