/*
 * fallback.c: the reasons a connection is on kernel TCP, by name and key,
 * and recording one (fallback.h).
 */
#include <stdio.h>
#include <sys/stat.h>

#include "base/real.h"
#include "base/self.h"
#include "core/conn/fallback.h"

static const char *const reason_names[] = {
    [FB_NONE] = "none",
    [FB_DISABLED] = "disabled (SHUNT_ACCEL=0)",
    [FB_NOT_NEGOTIATED] = "not negotiated",
    [FB_NO_LISTENER] = "no accelerated listener",
    [FB_NOT_LOOPBACK] = "destination not on loopback",
    [FB_REGISTRY] = "registry unavailable",
    [FB_REGISTRY_FULL] = "registry full",
    [FB_BIND] = "could not bind",
    [FB_CHANNEL] = "no shared memory for a channel",
    [FB_NO_OFFER] = "client does not run shunt",
    [FB_VERIFY] = "offer does not match the connection",
    [FB_OTHER_USER] = "peer runs as another user",
    [FB_CLAIM] = "claim did not settle",
    [FB_REFUSED] = "server refused",
    [FB_ATTACH] = "channel could not be mapped",
    [FB_CONNECT_FAILED] = "connect failed",
    [FB_INHERITED] = "inherited connection unknown to shunt",
    [FB_WITHDRAWN] = "client shut down before the claim",
    [FB_DOWNGRADED] = "moved back: an end went to a program without shunt",
    [FB_SHM_LIMIT] = "shm-limit: shared memory bound reached",
    [FB_STDIO] = "moved back: stdio shunt cannot carry on this socket",
    [FB_SANDBOX] = "seccomp sandbox: shunt makes no system call of its own",
    [FB_NOT_OURS] = "a file shunt needs in /dev/shm is another user's (the log names it)",
    [FB_URING] = "io_uring in this process: its I/O bypasses shunt",
    [FB_SHORT] = "short: this destination's last connections were too short to pay for a channel",
    [FB_CROSS_VERIFY] = "across namespaces: the offer the SYN names does not match the connection",
    [FB_SAVED_SYN] = "across namespaces: the program reads the listener's saved SYNs itself",
    [FB_NO_COOKIE] = "across namespaces: the socket's cookie could not be read",
    [FB_REMOTE_SHUNT] = "the client runs shunt out of the rings' reach (another host, /dev/shm or user)",
    [FB_FABRIC] = "fabric: the peer runs shunt out of the rings' reach, but no engine or no proof of it (the log says which)",
    [FB_FABRIC_LEFT] = "left the fabric before a call it does not carry (the log says which)",
    [FB_FABRIC_SHARED] = "fabric: another process held the socket too when the server's hello was due",
    [FB_FABRIC_GONE] = "fabric: the peer closed before this end could check its proof",
    [FB_FABRIC_FORKED] = "fabric: a forked child would open an engine for this one connection (SHUNT_FABRIC_FORKED=0)",
    [FB_FABRIC_NO_FD] = "fabric: no fd left for the engine or the peer's proof (the process is at its fd limit)",
    [FB_FABRIC_FSIZE] = "fabric: the process's RLIMIT_FSIZE is set: UCX's shared-memory files would draw SIGXFSZ",
    [FB_FABRIC_FORK_BUSY] = "fabric: forked while the parent's engine was in use on UCX's TCP lanes (no peer could "
                            "reach the child's)",
    [FB_FABRIC_NO_ROOM] = "fabric: no room above the process's fd limit for the engine's fds (its soft RLIMIT_NOFILE "
                          "is its hard one)",
    [FB_RAW_CLONE] = "moved back: a process made by the raw clone system call, which shunt does not follow, got it",
    [FB_BOTH_FULL] = "moved back: both ends waited to send into full rings, neither reading (kernel TCP's buffers hold more)",
    [FB_STALLED_READER] = "moved back: a blocking send waited SHUNT_SEND_STALL_MS for a reader that read nothing (kernel TCP's buffers hold more)",
};

/* The same, as short keys for `shunt stat --json` and scripts. */
static const char *const reason_keys[] = {
    [FB_NONE] = "none",
    [FB_DISABLED] = "disabled",
    [FB_NOT_NEGOTIATED] = "not_negotiated",
    [FB_NO_LISTENER] = "no_listener",
    [FB_NOT_LOOPBACK] = "not_loopback",
    [FB_REGISTRY] = "registry",
    [FB_REGISTRY_FULL] = "registry_full",
    [FB_BIND] = "bind",
    [FB_CHANNEL] = "channel",
    [FB_NO_OFFER] = "no_offer",
    [FB_VERIFY] = "verify",
    [FB_OTHER_USER] = "other_user",
    [FB_CLAIM] = "claim",
    [FB_REFUSED] = "refused",
    [FB_ATTACH] = "attach",
    [FB_CONNECT_FAILED] = "connect_failed",
    [FB_INHERITED] = "inherited",
    [FB_WITHDRAWN] = "withdrawn",
    [FB_DOWNGRADED] = "downgraded",
    [FB_SHM_LIMIT] = "shm_limit",
    [FB_STDIO] = "stdio",
    [FB_SANDBOX] = "sandbox",
    [FB_NOT_OURS] = "not_ours",
    [FB_URING] = "io_uring",
    [FB_SHORT] = "short",
    [FB_CROSS_VERIFY] = "cross_verify",
    [FB_SAVED_SYN] = "saved_syn",
    [FB_NO_COOKIE] = "no_cookie",
    [FB_REMOTE_SHUNT] = "remote_shunt",
    [FB_FABRIC] = "fabric",
    [FB_FABRIC_LEFT] = "fabric_left",
    [FB_FABRIC_SHARED] = "fabric_shared",
    [FB_FABRIC_GONE] = "fabric_gone",
    [FB_FABRIC_FORKED] = "fabric_forked",
    [FB_FABRIC_NO_FD] = "fabric_no_fd",
    [FB_FABRIC_FSIZE] = "fabric_fsize",
    [FB_FABRIC_FORK_BUSY] = "fabric_fork_busy",
    [FB_FABRIC_NO_ROOM] = "fabric_no_room",
    [FB_RAW_CLONE] = "raw_clone",
    [FB_BOTH_FULL] = "both_full",
    [FB_STALLED_READER] = "stalled_reader",
};
_Static_assert(sizeof reason_keys / sizeof reason_keys[0] == sizeof reason_names / sizeof reason_names[0],
               "every fallback reason has a key");

const char *fallback_reason_key(enum fallback_reason r)
{
    return (unsigned)r < sizeof reason_keys / sizeof reason_keys[0] && reason_keys[r] ? reason_keys[r] : "unknown";
}

const char *fallback_reason_name(enum fallback_reason r)
{
    return (unsigned)r < sizeof reason_names / sizeof reason_names[0] && reason_names[r] ? reason_names[r] : "?";
}

atomic_uint fallback_leaves;

void fallback_record(struct tcp_sock *t, int fd, enum fallback_reason why, bool should_have)
{
    atomic_store(&t->reason, why);
    atomic_store(&t->path, PATH_TCP);
    fallback_count_leave(t);
    if (should_have && shunt_settings.strict) {
        t->strict_failed = true;
        char line[160];
        int n = snprintf(line, sizeof line, "shunt: SHUNT_STRICT: fd %d was not accelerated: %s\n", fd,
                         fallback_reason_name(why));
        shunt_real.write(2, line, (size_t)n);
        return;
    }
    shunt_log_sock(should_have ? LOG_WARN : LOG_INFO, t, fd, "kernel TCP: %s", fallback_reason_name(why));
}

void fallback_note(int fd, enum fallback_reason why)
{
    if (__builtin_expect(LOG_INFO > shunt_log_level, 1))
        return;
    struct stat st;
    unsigned long long id = fstat(fd, &st) == 0 ? (unsigned long long)st.st_ino : 0;
    shunt_log_write(LOG_INFO, "fd %d sock %llu: kernel TCP: %s", fd, id, fallback_reason_name(why));
}
