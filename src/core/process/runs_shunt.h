/*
 * runs_shunt.h: will the process that gets an accelerated socket run
 * shunt (runs_shunt.c)?  When in doubt the answer is no.
 */
#ifndef SHUNT_CORE_PROCESS_RUNS_SHUNT_H
#define SHUNT_CORE_PROCESS_RUNS_SHUNT_H

#include <stdbool.h>

/* Would every process holding the other end of this Unix socket attach an
 * accelerated socket it receives?  Only processes known to run shunt do;
 * named as above (the receiver is then not the peer: unknown). */
bool runs_shunt_receiver(int unix_fd, bool named);

/* Would the program exec'd from path (or fd when path is NULL) with envp
 * run shunt?  search: look path up in $PATH as execvp does. */
bool runs_shunt_exec(const char *path, int fd, char *const envp[], bool search);

/* Will that exec fail before any program runs (no such file, not
 * executable)?  Then nothing needs to leave for it. */
bool runs_shunt_exec_fails(const char *path, int fd, bool search);

#endif
