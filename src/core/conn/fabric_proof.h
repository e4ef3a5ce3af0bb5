/*
 * fabric_proof.h: what an end of a connection proves about itself before
 * the other end attaches to its fabric ring, and the check (issue 19;
 * docs/architecture.md, "Built: the connection paths", who may attach).
 *
 * On UCX's shared-memory lanes a forged key or base in a peer's blob
 * makes this process's puts land anywhere in its own memory, so a blob is
 * attached to only when the kernel shows that it came from the process
 * holding the other socket of this very connection, run by this user: the
 * proof names that process, its fd and the socket's inode, and the check
 * reads /proc/<pid>/fd/<fd> (which only this user may read) and the
 * socket's row in /proc/<pid>/net/tcp{,6} (its owner and its ports, which
 * must be this connection's, mirrored).  A socket in another network
 * namespace than its process (made after a setns) is in none of those
 * tables: then a copy of the fd, which the kernel gives only to whoever may
 * ptrace the process (pidfd_getfd), says its inode and ports, and the
 * process's /proc directory its user.  A peer on another host, or in
 * another pid namespace, cannot be checked so: it is refused, and the
 * connection stays on kernel TCP.
 */
#ifndef SHUNT_CORE_CONN_FABRIC_PROOF_H
#define SHUNT_CORE_CONN_FABRIC_PROOF_H

#include <stddef.h>
#include <stdint.h>

#define FABRIC_PROOF_LEN 24   /* pid, fd (32 bits each), inode, bell (64 each), little-endian */

/* What the proof says besides: the peer's process and the name of its
 * doorbell (fabric_conn.c). */
struct fabric_peer_id {
    uint32_t pid;
    uint64_t bell;
};

/* This process's proof for its socket fd, with its doorbell's name: 0, or
 * -errno (no inode). */
int fabric_proof_make(int fd, uint64_t bell, uint8_t out[FABRIC_PROOF_LEN]);

/* Whether the peer's proof (input: read once, every field checked) names
 * the other end of fd's connection, held by a process of this user: 0
 * (and *id), or -errno with a line in why (-ENOENT: the process named, or
 * its fd, is gone: a peer that closed before this end looked; -EMFILE: no
 * fd left in this process to ask with). */
int fabric_proof_check(const uint8_t in[FABRIC_PROOF_LEN], int fd, struct fabric_peer_id *id, char *why,
                       size_t whylen);

#endif
