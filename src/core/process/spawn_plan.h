/*
 * spawn_plan.h: which accelerated sockets the program started by
 * posix_spawn will hold, read from its file actions.
 *
 * A posix_spawn_file_actions_t is opaque: shunt keeps a copy of the
 * actions added to each one (a side table keyed by its address, filled by
 * the wrappers of posix_spawn_file_actions_*), and before the spawn replays
 * them over this process's accelerated fds, ending with close-on-exec.
 */
#ifndef SHUNT_SPAWN_PLAN_H
#define SHUNT_SPAWN_PLAN_H

#include <spawn.h>
#include <stdbool.h>
#include <stddef.h>

enum spawn_action { SPAWN_CLOSE, SPAWN_DUP2, SPAWN_OPEN, SPAWN_CLOSEFROM, SPAWN_OTHER };

/* The side table: init starts (or restarts) fa's copy, destroy forgets it,
 * added records one action that libc accepted (fd, newfd as given: newfd
 * only for dup2).  Safe before shunt's start-up and from any thread. */
void spawn_actions_init(const posix_spawn_file_actions_t *fa);
void spawn_actions_destroy(const posix_spawn_file_actions_t *fa);
void spawn_actions_added(const posix_spawn_file_actions_t *fa, enum spawn_action kind, int fd, int newfd);

/* fork: the table's lock is held across it, so the child finds it whole. */
void spawn_actions_before_fork(void);
void spawn_actions_after_fork(void);

/* What posix_spawn does around the real call: */
struct spawn_plan {
    size_t n;
    struct spawn_hold *held;    /* channels counted in for the new program */
};

/* Decides for the program path (searched in $PATH when search) with envp
 * and file actions fa (NULL: none): if it will not run shunt, every
 * accelerated socket it would hold moves back to kernel TCP now; if it
 * will, each such channel counts the new program in as a holder. */
void spawn_prepare(struct spawn_plan *p, const char *path, const posix_spawn_file_actions_t *fa,
                   char *const envp[], bool search);

/* The same for system and popen, whose libc spawns /bin/sh with environ
 * out of any wrapper's sight: replaced_fd is the child's fd that popen
 * puts its pipe on (-1 for system). */
void spawn_prepare_shell(struct spawn_plan *p, int replaced_fd);

/* After the real call: a failed spawn gives the holds back. */
void spawn_finish(struct spawn_plan *p, bool spawned);

#endif
