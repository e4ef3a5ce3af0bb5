/*
 * bell_name.c: the fabric doorbell's file name (bell_name.h).
 */
#include <stdio.h>
#include <string.h>

#include "registry/bell_name.h"

void bell_path(char *out, size_t len, const char *root, uint32_t uid, uint32_t pid, uint64_t id)
{
    snprintf(out, len, "%s/dev/shm/shunt-%u-bell-%u-%016llx", root, (unsigned)uid, (unsigned)pid,
             (unsigned long long)id);
}

static const char *number(const char *p, uint64_t *v, uint64_t max)
{
    uint64_t n = 0;
    const char *s = p;
    while (*p >= '0' && *p <= '9' && n <= max)
        n = n * 10 + (uint64_t)(*p++ - '0');
    if (p == s || n > max)
        return NULL;
    *v = n;
    return p;
}

bool bell_name_parse(const char *name, uint32_t *uid, uint32_t *pid)
{
    uint64_t u, p;
    const char *s = strncmp(name, "shunt-", 6) == 0 ? number(name + 6, &u, UINT32_MAX) : NULL;
    if (!s || strncmp(s, "-bell-", 6) != 0 || !(s = number(s + 6, &p, INT32_MAX)) || *s++ != '-')
        return false;
    for (int i = 0; i < 16; i++, s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return false;
    if (*s)
        return false;
    *uid = (uint32_t)u;
    *pid = (uint32_t)p;
    return true;
}
