/*
 * fabric_engine.h: UCX, the engine under the fabric transport (DESIGN
 * section 9), loaded with dlopen on first need: libshunt.so links nothing
 * beyond libc, and a process that never reaches another namespace or host
 * never loads it.
 *
 * What it gives the transport: one context and one worker per process
 * (its start-up, about 10 ms, paid once), the worker's address to hand to a
 * peer, memory regions a peer may write into (the rings: the fabric
 * transport mirrors shunt's own ring protocol with one-sided puts, see
 * docs/architecture.md "Between namespaces and hosts"), puts with a fence
 * between data and the index that publishes it, doorbells (an active
 * message each), and a wake-up fd for shunt's own waits that they ring.
 * Used by the connection paths (core/conn/fabric_conn.c).
 *
 * Where the lanes setting allows UCX's TCP lanes, puts, gets and flushes
 * are shunt's own active messages instead of UCX's (software) RMA, which
 * aborts the process when a put's completion cannot go back to a dead
 * writer (fabric_am_rma.c says why and how).
 *
 * Configured explicitly, never through the program's UCX_ variables: UCX
 * reads SHUNT_UCX_* (so an MPI program's own UCX settings stay its own),
 * its memory hooks are off in processes where shunt loaded it, and the
 * lanes are those of `tls` (default "^tcp,cma": UCX's TCP lanes are slower
 * than kernel TCP, cma made puts bimodal; tests force "tcp").
 */
#ifndef SHUNT_TRANSPORT_FABRIC_ENGINE_H
#define SHUNT_TRANSPORT_FABRIC_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fabric_engine;
struct fabric_peer;

/* Loads UCX (once per process) and makes this process's context and
 * worker, with the lanes of tls (NULL: "^tcp,cma").  0, or -errno with a line
 * saying why in why (no UCX installed, no lane, an engine error). */
int fabric_engine_open(struct fabric_engine **out, const char *tls, char *why, size_t whylen);
void fabric_engine_close(struct fabric_engine *e);
/* No region and no peer of it is in use: closing it loses nothing. */
bool fabric_engine_idle(const struct fabric_engine *e);
/* Whether a child forked while e was open can open an engine of its own.
 * Not where UCX's TCP lanes may be used: their incoming connections are
 * accepted by UCX's own thread, which a child does not have while UCX's
 * memory (copied by the fork) says it runs, so no peer could reach the
 * child's engine (seen: its puts timed out).  The shared-memory lanes
 * connect without it. */
bool fabric_engine_forks_whole(const struct fabric_engine *e);

/* The worker's wake-up fd: readable when progress has work.  arm() before
 * sleeping on it: false means events are pending, progress first. */
int fabric_engine_efd(struct fabric_engine *e);
bool fabric_engine_arm(struct fabric_engine *e);
unsigned fabric_engine_progress(struct fabric_engine *e);
/* Whether a peer's writes and reads of this process's regions, and its
 * flushes, are answered only inside this process's progress (UCX's TCP
 * lanes allowed: fabric_am_rma.c), or a new endpoint's wire-up is (UCX's
 * new protocols, from 1.22), so that a process busy elsewhere keeps its
 * peer waiting unless a thread of its own drives it. */
bool fabric_engine_needs_progress(const struct fabric_engine *e);
/* Doorbells (fabric_bell) that reached this worker so far. */
uint64_t fabric_engine_bells_heard(const struct fabric_engine *e);

/* The worker's address, to give the peer (freed with _address_free). */
int fabric_engine_address(struct fabric_engine *e, void **addr, size_t *len);
void fabric_engine_address_free(struct fabric_engine *e, void *addr);

/* Memory of len bytes the peer may put into: base is ours to read, rkey
 * (rkey_len bytes) is what the peer needs to write it. */
struct fabric_region {
    void *base;
    size_t len;
    void *rkey;
    size_t rkey_len;
    void *mem;   /* the engine's handle */
};
int fabric_region_map(struct fabric_engine *e, size_t len, struct fabric_region *r);
/* Gives the region back.  Where UCX's TCP lanes may be used, a put is an
 * active message naming the region by a random id (fabric_am_rma.c): one
 * that arrives after this finds no region and is dropped.  Elsewhere, while
 * an endpoint of this process's to the region remains (both ends of a
 * connection here: UCX's `self` lane reads and writes the address itself),
 * the memory stays mapped until that endpoint is closed. */
void fabric_region_unmap(struct fabric_engine *e, struct fabric_region *r);

/* A peer: its worker address and the region it mapped for us (its rkey and
 * its base address as the peer sees it).  0 or -errno with why. */
int fabric_peer_connect(struct fabric_engine *e, const void *addr, size_t addr_len, const void *rkey,
                        size_t rkey_len, uint64_t remote_base, struct fabric_peer **out, char *why,
                        size_t whylen);
/* Closes without waiting for a peer that may be dead. */
void fabric_peer_close(struct fabric_peer *p);
/* The connection's socket, whose end (the peer's FIN or reset) bounds a
 * wait for the peer's answer (a put, a get, a flush, on every lane) to
 * FABRIC_CLOSING_NS: a dead peer's engine may not say so for seconds, and
 * a closing one may never drive its worker again.  Such a flush answers 0
 * (nothing of ours depends on it once the peer goes: a wake decision is
 * bounded anyway), such a get -EPIPE, and a put that fails then -EPIPE
 * (the peer gone, not the lane broken).  (A get of a region the peer gave
 * back answers -ENOENT over TCP lanes.)  pid, where not 0, is the peer's
 * process, on this host: its end bounds such a wait too (a killed peer's
 * FIN may wait behind bytes this end has not read, and come only after it
 * reads them, which it cannot while it waits). */
void fabric_peer_watch(struct fabric_peer *p, int fd, uint32_t pid);
#define FABRIC_CLOSING_NS (100ull * 1000 * 1000)

/* Writes len bytes at offset of the peer's region; returns once src may be
 * reused.  fence(): puts before it are seen by the peer before puts after
 * it (data, then the index that publishes it).  flush(): every put so far
 * has reached the peer's memory.  0, -EIO (the peer or the lane failed) or
 * -ETIMEDOUT (not done in 5 s: over TCP lanes a put completes only while the
 * peer drives its worker; the operation is abandoned, not undone, and src
 * may still be read until the caller closes the peer, which it then must). */
int fabric_put(struct fabric_peer *p, uint64_t offset, const void *src, size_t len);
/* Reads len bytes at offset of the peer's region into dst: 0 or -errno,
 * as fabric_put. */
int fabric_get(struct fabric_peer *p, uint64_t offset, void *dst, size_t len);
int fabric_fence(struct fabric_peer *p);
/* A doorbell: an active message that makes the peer's wake-up fd readable
 * (an armed worker's), carrying nothing; a put wakes nobody.  Never waits
 * (the peer may be dead or its endpoint not wired up yet: it goes when it
 * can).  0 or -EIO. */
int fabric_bell(struct fabric_peer *p);
int fabric_flush(struct fabric_peer *p);

/* The lanes the endpoint uses, as UCX names them ("sysv/memory,posix/memory"),
 * for shunt stat and the tests. */
void fabric_peer_lanes(struct fabric_peer *p, char *out, size_t len);

#endif
