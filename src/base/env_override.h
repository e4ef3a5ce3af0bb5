/*
 * env_override.h: answers of getenv that differ from the environment, for
 * the calling thread only and only while it loads a library of the engine
 * (transport/fabric_engine.c): UCX's memory hooks are installed by libucm's
 * constructor from what getenv says at that moment, and shunt must never
 * write to the program's environment (another thread may read it, a child
 * would inherit it).  The interposed getenv (interpose/env_calls.c) asks
 * env_override_get first.
 */
#ifndef SHUNT_BASE_ENV_OVERRIDE_H
#define SHUNT_BASE_ENV_OVERRIDE_H

/* pairs: "NAME=value" strings, NULL-terminated, alive until _end. */
void env_override_begin(const char *const *pairs);
void env_override_end(void);

/* The calling thread's override of name, or NULL. */
const char *env_override_get(const char *name);

/* getenv's answer from environ itself (what libc's getenv does). */
char *env_lookup(const char *name);

#endif
