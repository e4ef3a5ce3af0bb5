/*
 * env_calls.c: the wrapper of getenv.  It answers as libc's does, from
 * environ, but for the names the calling thread overrides while shunt loads
 * its fabric engine (base/env_override.h): UCX reads its memory-hook options
 * with getenv in its constructor.  It never calls into shunt's
 * initialisation: programs and libraries call getenv before anything else.
 */
#include <stdlib.h>

#include "base/env_override.h"
#include "interpose/wrap.h"

SHUNT_EXPORT char *getenv(const char *name)
{
    const char *v = env_override_get(name);
    return v ? (char *)v : env_lookup(name);
}
