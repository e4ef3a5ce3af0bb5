/*
 * kernel_tcp.h: what the kernel knows about this network namespace's TCP
 * sockets, for `shunt stat`: the state, the queues and the byte and
 * segment counts of each socket by inode (one sock_diag dump per family).
 * shunt counts nothing on a connection that stays on kernel TCP; the
 * kernel does, at no cost to the program.
 */
#ifndef SHUNT_TOOL_KERNEL_TCP_H
#define SHUNT_TOOL_KERNEL_TCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "registry/registry.h"

struct ktcp {
    uint64_t inode;
    unsigned state;                 /* TCP_ESTABLISHED... */
    uint32_t rqueue, wqueue;        /* unread here; sent but not yet acknowledged (listeners: backlog) */
    bool have_info;                 /* the counters below are known */
    uint64_t bytes_acked, bytes_received;
    uint32_t segs_out, segs_in;
    struct reg_addr local, peer;    /* as the kernel has them */
};

struct ktcp_view {
    struct ktcp *v;
    size_t n, cap;
};

/* Fills view with every TCP socket of both families; 0 or a negative errno
 * (the view then holds what was read). */
int ktcp_dump(struct ktcp_view *view);
const struct ktcp *ktcp_find(const struct ktcp_view *view, uint64_t inode);
const char *ktcp_state_name(unsigned state);
void ktcp_free(struct ktcp_view *view);

#endif
