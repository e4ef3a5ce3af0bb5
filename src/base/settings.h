/*
 * settings.h: the SHUNT_* environment variables, in one table that the
 * library, `shunt run` (which checks them before it execs) and
 * `shunt run --help` all read.
 */
#ifndef SHUNT_SETTINGS_H
#define SHUNT_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

enum log_level { LOG_OFF, LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG, LOG_TRACE };

struct shunt_settings {
    enum log_level log_level;
    char log_file[256];     /* empty: standard error */
    bool accel;             /* accelerate connections at all */
    bool strict;            /* a connection that should be accelerated but is not fails */
    unsigned ring_size;     /* bytes per direction of a channel, at most */
    unsigned ring_start;    /* ... backed by memory when it is created; it grows under load */
    unsigned long long shm_limit; /* bytes of /dev/shm all of this user's channels may hold (0: no bound) */
    unsigned spin_us;       /* how long a waiter spins before it sleeps */
    unsigned yield_us;      /* how long a thread runs on the fast path before it lets others have the CPU; 0: never */
    unsigned poll_kernel_calls; /* a zero-timeout wait over a mixed set asks the kernel at least once in this many; 0, 1: always */
    unsigned poll_kernel_us;    /* ...and at least once this long after its last question; 0: always */
    unsigned send_stall_ms; /* a blocking send whose reader read nothing this long moves to kernel TCP; 0: never */
    unsigned chunk_size;    /* a large send is published to the ring this many bytes at a time */
    size_t zcopy_threshold; /* blocking sends of at least this many bytes go by single copy; 0: never */
    bool short_conns;       /* destinations whose connections proved short get kernel TCP (core/conn/short_conns.c) */
    bool sandbox_probe;     /* a process started under a seccomp filter tries shunt's calls in a child */
    bool fabric;            /* connections to a shunt process out of the rings' reach ride the engine (UCX) */
    bool fabric_only;       /* SHUNT_FABRIC=only: between namespaces always (never the rings) */
    bool fabric_forked;     /* a forked child without an engine opens one for a connection it got at fork */
    char fabric_lanes[64];  /* the engine's lanes (UCX_TLS syntax) */
};

struct setting_def {
    const char *name;
    const char *def;        /* default, as the user would write it */
    const char *values;     /* what is accepted, for --help */
    const char *help;
    /* 0, or -1 with a one-line reason in err (without the setting's name) */
    int (*parse)(const char *value, struct shunt_settings *out, char *err, size_t errlen);
};

extern const struct setting_def shunt_setting_defs[];
extern const size_t shunt_setting_count;

/* Reads every setting from the environment into out (defaults first).
 * On a bad value: -1 and a one-line message naming the setting in err. */
int settings_load(struct shunt_settings *out, char *err, size_t errlen);

/* Names an environment entry "SHUNT_..." that is no setting; NULL if none. */
const char *settings_unknown(char **envp, char *name, size_t namelen);

#endif
