/*
 * bell_name.h: the name of a process's fabric doorbell in /dev/shm (a
 * datagram socket bound at a path: core/conn/fabric_conn.c), made by its
 * process and removed at its exit, or by the sweep once the process is gone
 * (registry/sweep.c).  shunt-<uid>-bell-<pid>-<16 hex digits of a random id>:
 * the id is in the process's proof, which only a proven peer reads, so the
 * name cannot be made first by another user who would want it.
 */
#ifndef SHUNT_REGISTRY_BELL_NAME_H
#define SHUNT_REGISTRY_BELL_NAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* root/dev/shm/<name> into out (root "" for this process's own, or
 * /proc/<pid>/root for a peer's). */
void bell_path(char *out, size_t len, const char *root, uint32_t uid, uint32_t pid, uint64_t id);

/* Whether name (a file name in /dev/shm) is a doorbell's: its uid and pid. */
bool bell_name_parse(const char *name, uint32_t *uid, uint32_t *pid);

#endif
