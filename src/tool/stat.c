/*
 * stat.c: `shunt stat`: what the registry of this user and network
 * namespace holds: accelerated listeners and connection records (offers
 * and claimed connections), one line each, or JSON.  Read-only apart from
 * the sweep every process does when it opens the registry (entries of dead
 * processes go).
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "registry/registry_internal.h"
#include "tool/tool.h"

static const char *addr_str(const struct reg_addr *a, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN];
    if (IN6_IS_ADDR_V4MAPPED(&a->addr))
        inet_ntop(AF_INET, &a->addr.s6_addr[12], ip, sizeof ip);
    else
        inet_ntop(AF_INET6, &a->addr, ip, sizeof ip);
    snprintf(buf, len, IN6_IS_ADDR_V4MAPPED(&a->addr) ? "%s:%u" : "[%s]:%u", ip, a->port);
    return buf;
}

static unsigned long long ld(_Atomic uint64_t *v)
{
    return (unsigned long long)atomic_load_explicit(v, memory_order_relaxed);
}

/* What an end has sent and received, how it waited, and how full the ring
 * it writes is (bytes the peer has not read yet). */
static void print_side(const char *who, struct chan_hdr *h, int side)
{
    struct chan_side *s = &h->side[side];
    unsigned long long fill = ld(&h->ring[side].head) - ld(&h->ring[side].tail);
    printf("           %-6s out %llu B in %llu sends, in %llu B in %llu recvs; unread by peer %llu B; "
           "doorbells %llu, spins %llu won %llu lost, sleeps %llu\n",
           who, ld(&s->bytes_out), ld(&s->sends), ld(&s->bytes_in), ld(&s->recvs), fill, ld(&s->doorbells),
           ld(&s->spins_won), ld(&s->spins_lost), ld(&s->sleeps));
}

static void print_side_json(const char *key, struct chan_hdr *h, int side)
{
    struct chan_side *s = &h->side[side];
    printf(", \"%s\": {\"bytes_out\": %llu, \"sends\": %llu, \"bytes_in\": %llu, \"recvs\": %llu, "
           "\"unread_by_peer\": %llu, \"doorbells\": %llu, \"spins_won\": %llu, \"spins_lost\": %llu, "
           "\"sleeps\": %llu}",
           key, ld(&s->bytes_out), ld(&s->sends), ld(&s->bytes_in), ld(&s->recvs),
           ld(&h->ring[side].head) - ld(&h->ring[side].tail), ld(&s->doorbells), ld(&s->spins_won),
           ld(&s->spins_lost), ld(&s->sleeps));
}

int cmd_stat(int argc, char **argv)
{
    bool json = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: shunt stat [--json]\n\n"
                   "Lists the accelerated listeners and connections of this user in this network\n"
                   "namespace, from the registry in /dev/shm.\n");
            return 0;
        } else {
            fprintf(stderr, "shunt stat: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    int r = reg_open();
    struct reg_file *f = reg_mapped();
    if (r < 0 || !f) {
        fprintf(stderr, "shunt stat: cannot open the registry: %s\n", strerror(-r));
        return 1;
    }
    char a[64], b[64];
    if (json)
        printf("{\"listeners\": [");
    else
        printf("%-10s %-8s %-10s %-28s %s\n", "KIND", "PID", "INODE", "LOCAL", "DETAILS");
    int n = 0;
    for (uint32_t i = 0; i < REG_LISTENERS; i++) {
        struct reg_listener *l = &f->listeners[i];
        if (atomic_load(&l->state) != REG_USED)
            continue;
        addr_str(&l->addr, a, sizeof a);
        if (json)
            printf("%s{\"pid\": %d, \"inode\": %llu, \"address\": \"%s\", \"v6only\": %s}", n++ ? ", " : "",
                   l->pid, (unsigned long long)l->inode, a, l->v6only ? "true" : "false");
        else
            printf("%-10s %-8d %-10llu %-28s%s\n", "listener", l->pid, (unsigned long long)l->inode, a,
                   l->v6only ? " v6only" : "");
    }
    if (json)
        printf("], \"connections\": [");
    n = 0;
    for (uint32_t i = 0; i < REG_CONNS; i++) {
        struct reg_conn_ent *e = &f->conns[i];
        uint32_t state = atomic_load(&e->state);
        if (state == REG_FREE)
            continue;
        const char *st = state == REG_CLAIMED ? "accelerated" : "offered";
        char channel[CHANNEL_NAME_MAX + 1];
        snprintf(channel, sizeof channel, "%.*s", CHANNEL_NAME_MAX, e->c.channel);
        addr_str(&e->c.client, a, sizeof a);
        addr_str(&e->c.server, b, sizeof b);
        struct chan_hdr h;
        bool have = channel_peek(channel, &h) == 0;
        if (json) {
            printf("%s{\"state\": \"%s\", \"client\": \"%s\", \"server\": \"%s\", \"client_pid\": %d, "
                   "\"server_pid\": %d, \"client_inode\": %llu, \"server_inode\": %llu, \"channel\": \"%s\"",
                   n++ ? ", " : "", st, a, b, e->c.client_pid, e->c.server_pid,
                   (unsigned long long)e->c.client_inode, (unsigned long long)e->c.server_inode, channel);
            if (have)
                for (int side = 0; side < 2; side++)
                    print_side_json(side ? "server_side" : "client_side", &h, side);
            printf("}");
        } else {
            printf("%-10s %-8d %-10llu %-28s -> %s (server pid %d, inode %llu, %s)\n", st, e->c.client_pid,
                   (unsigned long long)e->c.client_inode, a, b, e->c.server_pid,
                   (unsigned long long)e->c.server_inode, channel);
            if (have)
                for (int side = 0; side < 2; side++)
                    print_side(side ? "server" : "client", &h, side);
        }
    }
    if (json)
        printf("]}\n");
    return 0;
}
