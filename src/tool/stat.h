/*
 * stat.h: one snapshot of what `shunt stat` shows: every TCP socket the
 * processes of this user and network namespace recorded in their fd tables
 * (registry/procstat.h), grouped by socket (one socket, many pid/fd
 * holders), with its counters from the channel segment or the kernel.
 */
#ifndef SHUNT_TOOL_STAT_H
#define SHUNT_TOOL_STAT_H

#include <stdbool.h>
#include <stdint.h>

#include "registry/procstat.h"
#include "transport/channel.h"

struct stat_holder {
    int32_t pid;
    int32_t fd;
};

struct stat_counters {
    uint64_t bytes_out, sends, bytes_in, recvs;
    uint64_t unread_by_peer, unread_by_us;   /* ring fill each way (kernel TCP: its queues) */
    uint64_t doorbells, spins_won, spins_lost, sleeps;
};

struct stat_sock {
    struct pst_rec rec;             /* the most informative holder's record */
    struct stat_holder *holders;
    size_t nholders;
    const char *kstate;             /* the kernel's TCP state (ss names), "?" if not found */
    bool registered;                /* a listener with a live registry entry */
    bool have_channel;              /* counters below come from the channel */
    bool have_kernel;               /* kernel TCP: unread_* are the kernel's queues */
    bool have_kernel_info;          /* ... and bytes, and segments in sends/recvs */
    char channel[CHANNEL_NAME_MAX];
    uint64_t peer_sock;             /* the other end's id, when the registry links them */
    bool via_host;                  /* paired through the host's registry (across namespaces) */
    unsigned side_state, peer_state;  /* SIDE_* of this end and of the peer */
    struct stat_counters c;
};

struct stat_snapshot {
    struct stat_sock *socks;
    size_t nsocks;
    size_t stale;                   /* records whose fd no longer holds that socket */
};

/* Builds a snapshot; only_pid > 0 keeps the sockets that process holds.
 * 0, or a negative errno. */
int stat_collect(struct stat_snapshot *s, int32_t only_pid);
void stat_free(struct stat_snapshot *s);

#endif
