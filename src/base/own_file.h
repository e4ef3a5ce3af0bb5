/*
 * own_file.h: opening a file that must be this user's own before shunt
 * maps or writes it.  /dev/shm is writable by every user, and a name
 * shunt will use can be made first by another one (a file of theirs, a
 * symlink to a file of ours, a FIFO): such a file is refused, never
 * mapped, never written, never followed, and the log names it with its
 * owner (issue 16, finding 3).
 */
#ifndef SHUNT_BASE_OWN_FILE_H
#define SHUNT_BASE_OWN_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* Opens path with flags (never O_CREAT; O_NOFOLLOW, O_NONBLOCK, O_NOCTTY
 * and O_CLOEXEC are added) and checks what it opened: a regular file,
 * this effective user's, with exactly the permission bits mode.  The fd
 * (*st filled), -ENOENT when there is no such name, -EPERM when what is
 * there is not ours (logged at warn with what: "registry", ...), or
 * another negative errno. */
int own_file_open(const char *what, const char *path, int flags, mode_t mode, struct stat *st);

/* 64 unpredictable bits for a file's name, so that nobody can make the
 * name first.  If getrandom cannot answer (no entropy yet, an old kernel,
 * a seccomp filter), the clock and an address still make a collision
 * unlikely, and the O_EXCL that creates the file turns one into a retry,
 * never into sharing a file. */
uint64_t own_file_random(void);

/* "a regular file of uid 65534, mode 0666", "a symbolic link of uid 0",
 * ... for log lines and error messages. */
void own_file_describe(const struct stat *st, char *out, size_t len);

#endif
