/*
 * env_override.c: the calling thread's getenv overrides (env_override.h).
 */
#include <stddef.h>
#include <string.h>

#include "base/env_override.h"
#include "base/tls.h"

extern char **environ;

static SHUNT_TLS const char *const *overrides;

void env_override_begin(const char *const *pairs)
{
    overrides = pairs;
}

void env_override_end(void)
{
    overrides = NULL;
}

/* The value in "NAME=value" if entry is name's, else NULL. */
static const char *value_of(const char *entry, const char *name, size_t len)
{
    return strncmp(entry, name, len) == 0 && entry[len] == '=' ? entry + len + 1 : NULL;
}

const char *env_override_get(const char *name)
{
    const char *const *o = overrides;
    if (!o || !name)
        return NULL;
    size_t len = strlen(name);
    for (; *o; o++) {
        const char *v = value_of(*o, name, len);
        if (v)
            return v;
    }
    return NULL;
}

char *env_lookup(const char *name)
{
    if (!name || !name[0] || !environ)   /* as glibc's getenv */
        return NULL;
    size_t len = strlen(name);
    for (char **e = environ; *e; e++) {
        const char *v = value_of(*e, name, len);
        if (v)
            return (char *)v;
    }
    return NULL;
}
