/*
 * fsize.h: calls that make shunt's own files grow (the registry, channel
 * segments, the tables for shunt stat, the budget, a handed-back prefix,
 * the log), made so that the program's RLIMIT_FSIZE cannot kill it.
 *
 * A file growing past that limit makes the kernel fail the call with EFBIG
 * and send SIGXFSZ, whose default action kills: OpenSSH's
 * pre-authentication child sets the limit to 0, `ulimit -f` in a shell to
 * anything.  The program's own writes get the signal as ever; shunt's only
 * fail (and fall back as for any other failure).
 */
#ifndef SHUNT_BASE_FSIZE_H
#define SHUNT_BASE_FSIZE_H

#include <stdbool.h>
#include <sys/types.h>

/* Whether the process's RLIMIT_FSIZE is finite: a library that grows
 * files of its own (UCX's shared-memory segments) must not be called to
 * make one then. */
bool fsize_limited(void);

int fsize_ftruncate(int fd, off_t len);
int fsize_fallocate(int fd, int mode, off_t off, off_t len);
ssize_t fsize_pwrite(int fd, const void *buf, size_t n, off_t off);
ssize_t fsize_write(int fd, const void *buf, size_t n);

#endif
