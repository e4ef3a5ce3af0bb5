/*
 * stat.c: `shunt stat`: its options, and the snapshot (stat_collect.c) as
 * a table for people or as JSON for scripts, once or every few seconds.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/own_file.h"
#include "registry/registry_file.h"
#include "registry/synopt.h"
#include "tool/stat.h"
#include "tool/tool.h"

static const char *addr_str(const struct reg_addr *a, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN];
    bool v4 = IN6_IS_ADDR_V4MAPPED(&a->addr);
    if (v4)
        inet_ntop(AF_INET, &a->addr.s6_addr[12], ip, sizeof ip);
    else
        inet_ntop(AF_INET6, &a->addr, ip, sizeof ip);
    snprintf(buf, len, v4 ? "%s:%u" : "[%s]:%u", ip, a->port);
    return buf;
}

static void holders_str(const struct stat_sock *k, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < k->nholders && o < len; i++) {
        int n = snprintf(buf + o, len - o, "%s%d/%d", i ? "," : "", (int)k->holders[i].pid, (int)k->holders[i].fd);
        if (n < 0)
            break;
        o += (size_t)n;
    }
}

/* The channel's close state of this end and its peer, as words. */
static void channel_state_str(const struct stat_sock *k, char *buf, size_t len, bool json)
{
    static const struct { unsigned bit; const char *name; } bits[] = {
        { SIDE_SHUT_WR, "shut-wr" }, { SIDE_SHUT_RD, "shut-rd" }, { SIDE_CLOSED, "closed" }, { SIDE_RESET, "reset" },
    };
    size_t o = 0;
    buf[0] = 0;
    for (int who = 0; who < 2; who++) {
        unsigned st = who ? k->peer_state : k->side_state;
        for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++) {
            if (!(st & bits[i].bit) || o >= len)
                continue;
            int n = snprintf(buf + o, len - o, json ? "%s\"%s%s\"" : "%s%s%s", o ? "," : "", who ? "peer-" : "",
                             bits[i].name);
            if (n > 0)
                o += (size_t)n;
        }
    }
    if (k->rec.broken && o < len)
        snprintf(buf + o, len - o, json ? "%s\"broken\"" : "%sbroken", o ? "," : "");
}

static void path_str(const struct stat_sock *k, char *buf, size_t len)
{
    if (k->via_host && !k->rec.reason[0])   /* paired across namespaces */
        snprintf(buf, len, "%s+host", pst_path_name(k->rec.path));
    else if (k->rec.reason[0])
        snprintf(buf, len, "%s:%s", pst_path_name(k->rec.path), k->rec.reason);
    else
        snprintf(buf, len, "%s", pst_path_name(k->rec.path));
}

/* A connection on the fabric: where its peer's host is, by the boot tag
 * the proof placed it on ("this": this host's). */
static const char *peer_host(const struct stat_sock *k, char *buf, size_t len)
{
    uint32_t tag = 0;
    if (synopt_boot_tag(&tag) == 0 && tag == k->rec.peer_boot)
        return "this";
    snprintf(buf, len, "boot-%08x", (unsigned)k->rec.peer_boot);
    return buf;
}

static void print_text(const struct stat_snapshot *s)
{
    char hold[256], a[64], b[64], path[48], st[96];
    printf("LISTENERS\n%-10s %-22s %-28s %-22s %s\n", "ID", "PID/FD", "ADDRESS", "PATH", "STATE");
    for (size_t i = 0; i < s->nsocks; i++) {
        const struct stat_sock *k = &s->socks[i];
        if (k->rec.kind != PST_KIND_LISTENER)
            continue;
        holders_str(k, hold, sizeof hold);
        path_str(k, path, sizeof path);
        printf("%-10llu %-22s %-28s %-22s %s\n", (unsigned long long)k->rec.sock, hold,
               addr_str(&k->rec.local, a, sizeof a), path, k->kstate);
    }
    printf("CONNECTIONS\n%-10s %-6s %-16s %-22s %-22s %-22s %-12s %s\n", "ID", "ROLE", "PID/FD", "LOCAL", "PEER",
           "PATH", "STATE", "COUNTERS");
    for (size_t i = 0; i < s->nsocks; i++) {
        const struct stat_sock *k = &s->socks[i];
        if (k->rec.kind != PST_KIND_CONN)
            continue;
        holders_str(k, hold, sizeof hold);
        path_str(k, path, sizeof path);
        char cs[80];
        channel_state_str(k, cs, sizeof cs, false);
        snprintf(st, sizeof st, "%s%s%s", k->kstate, cs[0] ? "," : "", cs);
        printf("%-10llu %-6s %-16s %-22s %-22s %-22s %-12s ", (unsigned long long)k->rec.sock,
               pst_role_name(k->rec.role), hold, addr_str(&k->rec.local, a, sizeof a),
               addr_str(&k->rec.peer, b, sizeof b), path, st);
        const struct stat_counters *c = &k->c;
        if (k->have_channel)
            printf("out %llu B/%llu msg, in %llu B/%llu msg, fill out %llu in %llu B, doorbells %llu, "
                   "spins %llu/%llu won/lost, sleeps %llu\n",
                   (unsigned long long)c->bytes_out, (unsigned long long)c->sends, (unsigned long long)c->bytes_in,
                   (unsigned long long)c->recvs, (unsigned long long)c->unread_by_peer,
                   (unsigned long long)c->unread_by_us, (unsigned long long)c->doorbells,
                   (unsigned long long)c->spins_won, (unsigned long long)c->spins_lost,
                   (unsigned long long)c->sleeps);
        else if (k->rec.path == PST_PATH_FABRIC && k->rec.peer_pid) {
            char hb[24];
            printf("fabric: ucx lanes %s, peer pid %u on host %s\n", k->rec.lanes[0] ? k->rec.lanes : "?",
                   (unsigned)k->rec.peer_pid, peer_host(k, hb, sizeof hb));
        } else if (k->have_kernel_info)
            printf("kernel: out %llu B/%llu segs, in %llu B/%llu segs, queued out %llu in %llu B\n",
                   (unsigned long long)c->bytes_out, (unsigned long long)c->sends, (unsigned long long)c->bytes_in,
                   (unsigned long long)c->recvs, (unsigned long long)c->unread_by_peer,
                   (unsigned long long)c->unread_by_us);
        else if (k->have_kernel)
            printf("kernel: queued out %llu in %llu B\n", (unsigned long long)c->unread_by_peer,
                   (unsigned long long)c->unread_by_us);
        else
            printf("-\n");
    }
}

static void json_holders(const struct stat_sock *k)
{
    printf("\"holders\": [");
    for (size_t i = 0; i < k->nholders; i++)
        printf("%s{\"pid\": %d, \"fd\": %d}", i ? ", " : "", (int)k->holders[i].pid, (int)k->holders[i].fd);
    printf("]");
}

static void json_reason(const struct stat_sock *k)
{
    if (k->rec.reason[0])
        printf("\"reason\": \"%s\"", k->rec.reason);   /* checked: [a-z0-9_?] only */
    else
        printf("\"reason\": null");
}

/* The registry's own records (offers and claims), as before fd tables. */
static void json_records(struct reg_file *f)
{
    char a[64], b[64];
    int n = 0;
    printf("\"records\": [");
    for (uint32_t i = 0; f && i < REG_CONNS; i++) {
        struct reg_conn_ent *e = &f->conns[i];
        uint32_t state = atomic_load(&e->state);
        if (state == REG_FREE)
            continue;
        struct reg_conn c = e->c;
        char channel[CHANNEL_NAME_MAX];
        size_t len = strnlen(c.channel, sizeof c.channel);
        for (size_t j = 0; j < len; j++)
            channel[j] = (c.channel[j] >= 0x20 && c.channel[j] < 0x7f && c.channel[j] != '"' && c.channel[j] != '\\')
                             ? c.channel[j] : '?';
        channel[len < sizeof channel ? len : sizeof channel - 1] = 0;
        printf("%s{\"state\": \"%s\", \"client\": \"%s\", \"server\": \"%s\", \"client_pid\": %d, "
               "\"server_pid\": %d, \"client_inode\": %llu, \"server_inode\": %llu, \"channel\": \"%s\"}",
               n++ ? ", " : "", state == REG_CLAIMED ? "accelerated" : "offered", addr_str(&c.client, a, sizeof a),
               addr_str(&c.server, b, sizeof b), c.client_pid, state == REG_CLAIMED ? c.server_pid : 0,
               (unsigned long long)c.client_inode, state == REG_CLAIMED ? (unsigned long long)c.server_inode : 0ULL,
               channel);
    }
    printf("]");
}

static void print_json(const struct stat_snapshot *s)
{
    char a[64], b[64];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    printf("{\"time\": %lld.%03ld, \"listeners\": [", (long long)now.tv_sec, now.tv_nsec / 1000000);
    int n = 0;
    for (size_t i = 0; i < s->nsocks; i++) {
        const struct stat_sock *k = &s->socks[i];
        if (k->rec.kind != PST_KIND_LISTENER)
            continue;
        printf("%s{\"id\": %llu, \"address\": \"%s\", \"path\": \"%s\", \"registered\": %s, \"state\": \"%s\", ",
               n++ ? ", " : "", (unsigned long long)k->rec.sock, addr_str(&k->rec.local, a, sizeof a),
               pst_path_name(k->rec.path), k->registered ? "true" : "false", k->kstate);
        json_reason(k);
        printf(", ");
        json_holders(k);
        printf("}");
    }
    printf("], \"connections\": [");
    n = 0;
    for (size_t i = 0; i < s->nsocks; i++) {
        const struct stat_sock *k = &s->socks[i];
        if (k->rec.kind != PST_KIND_CONN)
            continue;
        char cs[120];
        channel_state_str(k, cs, sizeof cs, true);
        printf("%s{\"id\": %llu, \"role\": \"%s\", \"local\": \"%s\", \"peer\": \"%s\", \"path\": \"%s\", "
               "\"state\": \"%s\", \"channel_state\": [%s], ",
               n++ ? ", " : "", (unsigned long long)k->rec.sock, pst_role_name(k->rec.role),
               addr_str(&k->rec.local, a, sizeof a), addr_str(&k->rec.peer, b, sizeof b), pst_path_name(k->rec.path),
               k->kstate, cs);
        json_reason(k);
        printf(", ");
        json_holders(k);
        if (k->have_channel)
            printf(", \"channel\": \"%s\", \"peer_id\": %llu, \"pairing\": \"%s\"", k->channel,
                   (unsigned long long)k->peer_sock, k->via_host ? "host" : "namespace");
        if (k->rec.path == PST_PATH_FABRIC && k->rec.peer_pid) {
            char hb[24];
            printf(", \"fabric\": {\"engine\": \"ucx\", \"lanes\": \"%s\", \"peer_pid\": %u, \"peer_host\": \"%s\"}",
                   k->rec.lanes, (unsigned)k->rec.peer_pid, peer_host(k, hb, sizeof hb));
        }
        const struct stat_counters *c = &k->c;
        if (k->have_channel)
            printf(", \"counters\": {\"source\": \"channel\", \"bytes_out\": %llu, \"sends\": %llu, "
                   "\"bytes_in\": %llu, \"recvs\": %llu, "
                   "\"unread_by_peer\": %llu, \"unread_by_us\": %llu, \"doorbells\": %llu, \"spins_won\": %llu, "
                   "\"spins_lost\": %llu, \"sleeps\": %llu}",
                   (unsigned long long)c->bytes_out, (unsigned long long)c->sends, (unsigned long long)c->bytes_in,
                   (unsigned long long)c->recvs, (unsigned long long)c->unread_by_peer,
                   (unsigned long long)c->unread_by_us, (unsigned long long)c->doorbells,
                   (unsigned long long)c->spins_won, (unsigned long long)c->spins_lost,
                   (unsigned long long)c->sleeps);
        else if (k->have_kernel_info)
            printf(", \"counters\": {\"source\": \"kernel\", \"bytes_out\": %llu, \"segs_out\": %llu, "
                   "\"bytes_in\": %llu, \"segs_in\": %llu, \"unread_by_peer\": %llu, \"unread_by_us\": %llu}",
                   (unsigned long long)c->bytes_out, (unsigned long long)c->sends, (unsigned long long)c->bytes_in,
                   (unsigned long long)c->recvs, (unsigned long long)c->unread_by_peer,
                   (unsigned long long)c->unread_by_us);
        else if (k->have_kernel)
            printf(", \"counters\": {\"source\": \"kernel\", \"unread_by_peer\": %llu, \"unread_by_us\": %llu}",
                   (unsigned long long)c->unread_by_peer, (unsigned long long)c->unread_by_us);
        else
            printf(", \"counters\": null");
        printf("}");
    }
    printf("], ");
    json_records(reg_mapped());
    printf(", \"stale_records\": %zu}\n", s->stale);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: shunt stat [-p PID] [--json] [--watch [SECONDS]] [--count N]\n"
            "\n"
            "Lists the TCP sockets of this user's programs under shunt in this network\n"
            "namespace: listeners, and one line per connection with every pid/fd holding it,\n"
            "its addresses, its path (shm, fabric, or tcp with the reason it fell back), its\n"
            "state and its counters (bytes and messages each way, ring fill, doorbells, spins,\n"
            "sleeps); on the fabric, the engine's lanes and the proven peer's pid and host.\n"
            "\n"
            "  -p PID             only the sockets process PID holds\n"
            "  --json             one JSON document (per refresh)\n"
            "  --watch [SECONDS]  refresh every SECONDS (default 1) until interrupted\n"
            "  --count N          stop after N refreshes\n");
}

static bool parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v > 0) || v > 86400)
        return false;
    *out = v;
    return true;
}

static bool parse_count(const char *s, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v <= 0)
        return false;
    *out = v;
    return true;
}

int cmd_stat(int argc, char **argv)
{
    bool json = false, watch = false;
    double interval = 1.0;
    long count = 0;
    long pid = 0;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--json")) {
            json = true;
        } else if (!strcmp(o, "-p") || !strcmp(o, "--pid")) {
            if (i + 1 >= argc || !parse_count(argv[i + 1], &pid)) {
                fprintf(stderr, "shunt stat: %s needs a process id\n", o);
                return 2;
            }
            i++;
        } else if (!strcmp(o, "--watch") || !strcmp(o, "-w")) {
            watch = true;
            if (i + 1 < argc && parse_seconds(argv[i + 1], &interval))
                i++;
        } else if (!strcmp(o, "--count") || !strcmp(o, "-c")) {
            if (i + 1 >= argc || !parse_count(argv[i + 1], &count)) {
                fprintf(stderr, "shunt stat: %s needs a positive number\n", o);
                return 2;
            }
            i++;
        } else if (!strcmp(o, "-h") || !strcmp(o, "--help")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "shunt stat: unknown option '%s' (shunt stat --help lists them)\n", o);
            return 2;
        }
    }
    if (pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
        fprintf(stderr, "shunt stat: no process %ld\n", pid);
        return 1;
    }
    char path[4200];
    if (reg_file_path(path, sizeof path) < 0 || access(path, F_OK) < 0) {
        fprintf(stderr, "shunt stat: no shunt registry (%s): no program has run under shunt as this user "
                        "in this network namespace\n", path);
        return 1;
    }
    if (!watch)
        count = 1;
    for (long round = 0; count == 0 || round < count; round++) {
        if (round) {
            struct timespec ts = { (time_t)interval, (long)((interval - (double)(time_t)interval) * 1e9) };
            while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
        }
        struct stat_snapshot s;
        int r = stat_collect(&s, (int32_t)pid);
        if (r < 0) {
            char owner[256] = "it is not a plain file of this user with mode 0600";
            struct stat st;
            char desc[96];
            if (r == -EPERM && lstat(path, &st) == 0) {
                own_file_describe(&st, desc, sizeof desc);
                snprintf(owner, sizeof owner, "it is %s, not this user's (uid %u) with mode 0600: every connection of "
                         "this user here stays on kernel TCP (not_ours)", desc, (unsigned)geteuid());
            }
            const char *why = r == -EPROTO ? "it was made by another version of shunt (it can be removed once no "
                                             "program runs under shunt here)"
                              : r == -EPERM ? owner
                                            : strerror(-r);
            fprintf(stderr, "shunt stat: cannot read the registry %s: %s\n", path, why);
            return 1;
        }
        if (json) {
            print_json(&s);
        } else {
            if (watch) {
                time_t t = time(NULL);
                struct tm tm;
                char when[32];
                strftime(when, sizeof when, "%H:%M:%S", localtime_r(&t, &tm));
                printf("%s--- %s\n", round && isatty(1) ? "\033[H\033[2J" : "", when);
            }
            print_text(&s);
        }
        fflush(stdout);
        stat_free(&s);
    }
    return 0;
}
