/*
 * settings.c: the table of SHUNT_* settings and their parsers.  Also linked
 * into the `shunt` command, so it uses nothing but libc.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/env_override.h"
#include "base/settings.h"

static int parse_bool(const char *v, bool *out, char *err, size_t errlen)
{
    if (!strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "on") || !strcmp(v, "true")) {
        *out = true;
        return 0;
    }
    if (!strcmp(v, "0") || !strcmp(v, "no") || !strcmp(v, "off") || !strcmp(v, "false")) {
        *out = false;
        return 0;
    }
    snprintf(err, errlen, "'%s' is not a boolean (use 0 or 1)", v);
    return -1;
}

static int parse_log(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    static const char *const names[] = { "off", "error", "warn", "info", "debug", "trace" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(v, names[i])) {
            s->log_level = (enum log_level)i;
            return 0;
        }
    snprintf(err, errlen, "'%s' is not a log level (off, error, warn, info, debug, trace)", v);
    return -1;
}

static int parse_log_file(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    if (strlen(v) >= sizeof s->log_file) {
        snprintf(err, errlen, "path longer than %zu bytes", sizeof s->log_file - 1);
        return -1;
    }
    strcpy(s->log_file, v);
    return 0;
}

static int parse_accel(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    return parse_bool(v, &s->accel, err, errlen);
}

static int parse_strict(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    return parse_bool(v, &s->strict, err, errlen);
}

static int parse_short_conns(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    return parse_bool(v, &s->short_conns, err, errlen);
}

static int parse_sandbox_probe(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    return parse_bool(v, &s->sandbox_probe, err, errlen);
}

/* A size with an optional k/K or m/M suffix (binary multiples). */
static int parse_size(const char *v, unsigned long long *out, char *err, size_t errlen)
{
    /* digits only: strtoull alone would take blanks, '+' and '-' (modulo 2^64) */
    if (*v < '0' || *v > '9') {
        snprintf(err, errlen, "'%s' is not a size", v);
        return -1;
    }
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno) {
        snprintf(err, errlen, "'%s' is not a size", v);
        return -1;
    }
    unsigned shift = 0;
    if (*end == 'k' || *end == 'K')
        shift = 10;
    else if (*end == 'm' || *end == 'M')
        shift = 20;
    if (shift) {
        end++;
        if (n > (~0ull >> shift)) {   /* the suffix would carry it past 64 bits */
            snprintf(err, errlen, "'%s' is too large", v);
            return -1;
        }
        n <<= shift;
    }
    if (*end) {
        snprintf(err, errlen, "'%s' is not a size (a number, optionally followed by K or M)", v);
        return -1;
    }
    *out = n;
    return 0;
}

/* A ring's size: a power of two from 4K to 1024M. */
static int parse_ring_bytes(const char *v, unsigned *out, char *err, size_t errlen)
{
    unsigned long long n;
    if (parse_size(v, &n, err, errlen) < 0)
        return -1;
    if (n < 4096 || n > (1ull << 30) || (n & (n - 1))) {
        snprintf(err, errlen, "%llu is not a power of two between 4K and 1024M", n);
        return -1;
    }
    *out = (unsigned)n;
    return 0;
}

static int parse_ring_size(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    return parse_ring_bytes(v, &s->ring_size, err, errlen);
}

static int parse_zcopy(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    unsigned long long n;
    if (parse_size(v, &n, err, errlen) < 0)
        return -1;
    if (n > (1ull << 40)) {
        snprintf(err, errlen, "%llu is too large (0 turns single copy off)", n);
        return -1;
    }
    s->zcopy_threshold = (size_t)n;
    return 0;
}

static int parse_ring_start(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    return parse_ring_bytes(v, &s->ring_start, err, errlen);
}

static int parse_shm_limit(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    unsigned long long n;
    if (parse_size(v, &n, err, errlen) < 0)
        return -1;
    s->shm_limit = n;
    return 0;
}

static int parse_chunk(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    unsigned long long n;
    if (parse_size(v, &n, err, errlen) < 0)
        return -1;
    if (n < 1024 || n > (1ull << 30)) {
        snprintf(err, errlen, "%llu is not between 1K and 1024M", n);
        return -1;
    }
    s->chunk_size = (unsigned)n;
    return 0;
}

/* A whole number from 0 to 1000000 of what (for the message). */
static int parse_count(const char *v, unsigned *out, const char *what, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    unsigned long n = strtoul(v, &end, 10);
    if (end == v || *end || errno || n > 1000000) {
        snprintf(err, errlen, "'%s' is not a number of %s from 0 to 1000000", v, what);
        return -1;
    }
    *out = (unsigned)n;
    return 0;
}

static int parse_us(const char *v, unsigned *out, char *err, size_t errlen)
{
    return parse_count(v, out, "microseconds", err, errlen);
}

static int parse_spin(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    return parse_us(v, &s->spin_us, err, errlen);
}

static int parse_yield(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    return parse_us(v, &s->yield_us, err, errlen);
}

static int parse_poll_kernel_us(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    return parse_us(v, &s->poll_kernel_us, err, errlen);
}

static int parse_send_stall(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    return parse_count(v, &s->send_stall_ms, "milliseconds", err, errlen);
}

static int parse_poll_kernel_calls(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    return parse_count(v, &s->poll_kernel_calls, "calls", err, errlen);
}

static int parse_fabric(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    s->fabric_only = strcmp(v, "only") == 0;
    if (s->fabric_only) {
        s->fabric = true;
        return 0;
    }
    return parse_bool(v, &s->fabric, err, errlen);
}

static int parse_fabric_forked(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    return parse_bool(v, &s->fabric_forked, err, errlen);
}

static int parse_fabric_lanes(const char *v, struct shunt_settings *s, char *err, size_t errlen)
{
    if (!*v || strlen(v) >= sizeof s->fabric_lanes || strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789_^,") != strlen(v)) {
        snprintf(err, errlen, "'%s' is not a list of UCX transports (such as sysv,posix or ^tcp,cma)", v);
        return -1;
    }
    strcpy(s->fabric_lanes, v);
    return 0;
}

const struct setting_def shunt_setting_defs[] = {
    { "SHUNT_ACCEL", "1", "0 or 1",
      "Accelerate connections whose peer also runs shunt; 0 leaves every connection on kernel TCP "
      "(calls are still intercepted)", parse_accel },
    { "SHUNT_STRICT", "0", "0 or 1",
      "A connection that should have been accelerated but could not be fails instead of falling back "
      "(for tests)", parse_strict },
    { "SHUNT_RING_SIZE", "1M", "power of two, 4K..1024M",
      "Bytes of shared memory per direction of each accelerated connection, at most: its ring grows to "
      "this under load", parse_ring_size },
    { "SHUNT_RING_START", "16K", "power of two, 4K..1024M",
      "Bytes of each direction's ring backed by memory when a connection starts (an idle connection "
      "holds 4 KiB plus twice this); more than SHUNT_RING_SIZE means SHUNT_RING_SIZE", parse_ring_start },
    { "SHUNT_SHM_LIMIT", "0", "size (K or M suffix); 0 for no bound",
      "Bytes of /dev/shm all of this user's connections may hold together; a connection that would "
      "pass it stays on kernel TCP (reason shm-limit) and a ring that would pass it stops growing",
      parse_shm_limit },
    { "SHUNT_ZCOPY_THRESHOLD", "0", "size (K or M suffix); 0 turns it off",
      "A blocking send of at least this many bytes is copied once, straight from the sender's buffer "
      "into the receiver's (process_vm_readv), instead of through the ring. Off by default: the "
      "sweep in docs/benchmarks.md found the ring faster at every size", parse_zcopy },
    { "SHUNT_CHUNK_SIZE", "64K", "1K..1024M",
      "A large send is published to the ring in pieces of this size, so the reader copies one piece "
      "out while the writer copies the next in", parse_chunk },
    { "SHUNT_SPIN_US", "50", "0..1000000",
      "How long a waiting thread polls the ring before it sleeps (never on one CPU, not for 2 ms after "
      "a yield of its spin let another thread run, and less when spinning stops paying)", parse_spin },
    { "SHUNT_YIELD_US", "100", "0..1000000",
      "A thread that ran this long without sleeping, its waits finding data at once, lets the other "
      "threads queued on its CPU run (sched_yield) at its next epoll, poll or select that may block (a zero "
      "timeout never yields); 0: never",
      parse_yield },
    { "SHUNT_SEND_STALL_MS", "1000", "0..1000000",
      "A blocking send that found its ring full (at SHUNT_RING_SIZE, or unable to grow) and waited this "
      "long while the reader read nothing at all moves the connection to kernel TCP (reason "
      "stalled_reader; on the fabric the writer takes back what was not read), whose buffers hold a few "
      "MB more, and goes on there: a program that sends more "
      "than a ring to a peer that reads only after something else happens (the sender's exit) finishes "
      "as on kernel TCP. Not once a non-blocking send on the connection was told the ring is full. 0: "
      "never", parse_send_stall },
    { "SHUNT_SHORT_CONNS", "1", "0 or 1",
      "A process whose last connections to a destination were too short to pay for a channel (under 8 "
      "data calls and 512 KiB at its end) makes the next ones on kernel TCP (reason short), but for "
      "samples at growing intervals; a sample that pays accelerates them all again. 0 accelerates "
      "every connection", parse_short_conns },
    { "SHUNT_POLL_KERNEL_CALLS", "16", "0..1000000",
      "A poll, ppoll, select, pselect or epoll_wait with a zero timeout over a set that mixes accelerated "
      "sockets with other fds finds the sockets' readiness in user space and asks the kernel about the "
      "others only once in this many such calls on the set (or after SHUNT_POLL_KERNEL_US): their events "
      "come at most that late, never what the calling thread did itself. Waits that may block always ask; "
      "0 or 1: every call asks", parse_poll_kernel_calls },
    { "SHUNT_POLL_KERNEL_US", "50", "0..1000000",
      "...and at the first such call this long after the set's last question to the kernel, whichever "
      "comes first; 0: every call asks", parse_poll_kernel_us },
    { "SHUNT_SANDBOX_PROBE", "1", "0 or 1",
      "A program that starts under a seccomp filter (inherited: systemd's SystemCallFilter=, a "
      "container's profile) first tries the system calls shunt makes of its own in a short-lived child; "
      "if one is refused, or with 0, the program runs with every call passed through and its connections "
      "on kernel TCP (reason sandbox). A filter the program installs itself is read instead", parse_sandbox_probe },
    { "SHUNT_FABRIC", "1", "0 or 1",
      "A connection whose peer process runs shunt where shunt's own rings do not reach (another host, a "
      "container with its own /dev/shm; the SYN says so once `shunt fabric enable` ran on the client's "
      "host) moves onto the fabric engine (UCX, loaded on first need); 0 keeps such connections on kernel "
      "TCP (reason remote_shunt); only: also between namespaces that share a /dev/shm, where shunt's own "
      "rings would reach (for tests, and to measure the engine)", parse_fabric },
    { "SHUNT_FABRIC_FORKED", "0", "0 or 1",
      "1: a process that got a server's connection at fork (a forking server's child) and has no engine "
      "of its own yet opens one (about 12 ms) to put that connection on the fabric; 0: such a connection "
      "stays on kernel TCP (reason fabric_forked), as a short one would lose more than it gains "
      "(benchmarks.md: 0.08x kernel TCP's connection rate with 1)", parse_fabric_forked },
    { "SHUNT_FABRIC_LANES", "^tcp,cma", "UCX transport list",
      "The engine's lanes, in UCX_TLS's syntax: by default every lane but UCX's TCP (slower than kernel "
      "TCP) and cma; tcp forces UCX's TCP lanes (for tests)", parse_fabric_lanes },
    { "SHUNT_LOG", "off", "off|error|warn|info|debug|trace",
      "What shunt records, each line with pid, fd and the connection id shunt stat shows: info the "
      "outcomes (accelerated, or kernel TCP and why), debug each negotiation step and state change, trace "
      "every record written for shunt stat", parse_log },
    { "SHUNT_LOG_FILE", "", "path; %p becomes the pid",
      "Where the log goes; empty means standard error (also when the path is a symlink or another "
      "user's file: it is made with O_EXCL, or must be this user's own)", parse_log_file },
};
const size_t shunt_setting_count = sizeof shunt_setting_defs / sizeof shunt_setting_defs[0];

extern char **environ;

int settings_load(struct shunt_settings *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    char why[200];
    for (size_t i = 0; i < shunt_setting_count; i++) {
        const struct setting_def *d = &shunt_setting_defs[i];
        if (d->parse(d->def, out, why, sizeof why) < 0) {
            snprintf(err, errlen, "shunt: internal error: default of %s: %s", d->name, why);
            return -1;
        }
    }
    /* Most processes have no SHUNT_ variable at all: one look through the
     * environment then, instead of one a setting. */
    bool any = false;
    for (char **e = environ; e && *e && !any; e++)
        any = !strncmp(*e, "SHUNT_", 6);
    for (size_t i = 0; any && i < shunt_setting_count; i++) {
        const struct setting_def *d = &shunt_setting_defs[i];
        const char *v = env_lookup(d->name);
        if (v && d->parse(v, out, why, sizeof why) < 0) {
            snprintf(err, errlen, "shunt: bad setting %s=%s: %s", d->name, v, why);
            return -1;
        }
    }
    return 0;
}

const char *settings_unknown(char **envp, char *name, size_t namelen)
{
    for (char **e = envp; e && *e; e++) {
        if (strncmp(*e, "SHUNT_", 6))
            continue;
        size_t len = strcspn(*e, "=");
        bool known = false;
        for (size_t i = 0; i < shunt_setting_count && !known; i++)
            known = strlen(shunt_setting_defs[i].name) == len && !strncmp(*e, shunt_setting_defs[i].name, len);
        /* SHUNT_TEST_* belongs to the test suite, not to shunt */
        if (!known && strncmp(*e, "SHUNT_TEST_", 11)) {
            snprintf(name, namelen, "%.*s", (int)len, *e);
            return name;
        }
    }
    return NULL;
}
