/*
 * fabric_ucx.h: what the transport's two UCX files share, and nothing else
 * includes: the UCX functions found with dlsym, the engine's and a peer's
 * insides, and the wait for a request (fabric_engine.c), used by the
 * active-message copies of puts, gets and flushes (fabric_am_rma.c).
 */
#ifndef SHUNT_TRANSPORT_FABRIC_UCX_H
#define SHUNT_TRANSPORT_FABRIC_UCX_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <ucm/api/ucm.h>
#include <ucp/api/ucp.h>

/* The functions shunt calls, by the names libucp, libucs and libucm export
 * (ucp_init is an inline calling ucp_init_version). */
#define UCX_CALLS(X)                                                                                          \
    X(ucp_get_version, void, (unsigned *, unsigned *, unsigned *))                                           \
    X(ucp_config_read, ucs_status_t, (const char *, const char *, ucp_config_t **))                          \
    X(ucp_config_modify, ucs_status_t, (ucp_config_t *, const char *, const char *))                         \
    X(ucp_config_release, void, (ucp_config_t *))                                                            \
    X(ucp_init_version, ucs_status_t,                                                                        \
      (unsigned, unsigned, const ucp_params_t *, const ucp_config_t *, ucp_context_h *))                     \
    X(ucp_cleanup, void, (ucp_context_h))                                                                    \
    X(ucp_worker_create, ucs_status_t, (ucp_context_h, const ucp_worker_params_t *, ucp_worker_h *))         \
    X(ucp_worker_destroy, void, (ucp_worker_h))                                                              \
    X(ucp_worker_get_efd, ucs_status_t, (ucp_worker_h, int *))                                               \
    X(ucp_worker_arm, ucs_status_t, (ucp_worker_h))                                                          \
    X(ucp_worker_progress, unsigned, (ucp_worker_h))                                                         \
    X(ucp_worker_get_address, ucs_status_t, (ucp_worker_h, ucp_address_t **, size_t *))                      \
    X(ucp_worker_release_address, void, (ucp_worker_h, ucp_address_t *))                                     \
    X(ucp_worker_fence, ucs_status_t, (ucp_worker_h))                                                        \
    X(ucp_ep_create, ucs_status_t, (ucp_worker_h, const ucp_ep_params_t *, ucp_ep_h *))                      \
    X(ucp_ep_close_nbx, ucs_status_ptr_t, (ucp_ep_h, const ucp_request_param_t *))                           \
    X(ucp_ep_flush_nbx, ucs_status_ptr_t, (ucp_ep_h, const ucp_request_param_t *))                           \
    X(ucp_ep_print_info, void, (ucp_ep_h, FILE *))                                                           \
    X(ucp_mem_map, ucs_status_t, (ucp_context_h, const ucp_mem_map_params_t *, ucp_mem_h *))                 \
    X(ucp_mem_unmap, ucs_status_t, (ucp_context_h, ucp_mem_h))                                               \
    X(ucp_mem_query, ucs_status_t, (const ucp_mem_h, ucp_mem_attr_t *))                                      \
    X(ucp_rkey_pack, ucs_status_t, (ucp_context_h, ucp_mem_h, void **, size_t *))                            \
    X(ucp_rkey_buffer_release, void, (void *))                                                               \
    X(ucp_ep_rkey_unpack, ucs_status_t, (ucp_ep_h, const void *, ucp_rkey_h *))                              \
    X(ucp_rkey_destroy, void, (ucp_rkey_h))                                                                  \
    X(ucp_put_nbx, ucs_status_ptr_t, (ucp_ep_h, const void *, size_t, uint64_t, ucp_rkey_h,                  \
                                      const ucp_request_param_t *))                                          \
    X(ucp_get_nbx, ucs_status_ptr_t, (ucp_ep_h, void *, size_t, uint64_t, ucp_rkey_h,                        \
                                      const ucp_request_param_t *))                                          \
    X(ucp_worker_set_am_recv_handler, ucs_status_t, (ucp_worker_h, const ucp_am_handler_param_t *))          \
    X(ucp_am_send_nbx, ucs_status_ptr_t, (ucp_ep_h, unsigned, const void *, size_t, const void *, size_t,    \
                                          const ucp_request_param_t *))                                      \
    X(ucp_request_check_status, ucs_status_t, (void *))                                                      \
    X(ucp_request_free, void, (void *))                                                                      \
    X(ucp_request_cancel, void, (ucp_worker_h, void *))                                                      \
    X(ucs_status_string, const char *, (ucs_status_t))

struct ucx_calls {
#define FIELD(name, ret, args) ret(*name) args;
    UCX_CALLS(FIELD)
#undef FIELD
};
/* Filled once per process by fabric_engine.c's load. */
extern struct ucx_calls ucx __attribute__((visibility("hidden")));

/* A region a peer may write into, as an engine of active messages knows it
 * (fabric_am_rma.c): by the random id its peer names it with. */
struct am_region {
    uint64_t id;
    uint8_t *base;
    size_t len;
};

/* A region of an RMA engine's.  An endpoint of the worker to itself (both
 * ends of a connection in this process) reaches the region through UCX's
 * `self` lane, which reads and writes the address itself, where the
 * shared-memory lanes map the region's segment for themselves: so a region
 * given back while such an endpoint remains is kept mapped until the last
 * goes (from UCX 1.15 a look at it after its unmap was a SIGSEGV). */
struct rma_region {
    struct rma_region *next;
    ucp_mem_h mem;
    uint8_t *base;
    unsigned self_peers;   /* endpoints of this worker's to it */
    bool given_back;       /* fabric_region_unmap came */
};

/* An asker this engine answered without a peer of its own to it
 * (fabric_am_rma.c): its worker's address and the endpoint made for it.
 * At most AM_ASKERS_MAX, the oldest closed for a new one. */
struct am_asker {
    ucp_ep_h ep;
    size_t len;
    unsigned char addr[];
};
#define AM_ASKERS_MAX 16
#define AM_ADDR_MAX 4096   /* a worker address longer than this is not one */

struct fabric_engine {
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd;
    uint64_t bells_heard;   /* doorbells that arrived (the handler runs inside progress) */
    unsigned users;         /* regions and peers not given back */
    /* Lanes that may be UCX's TCP lanes: puts, gets and flushes go as
     * active messages (fabric_am_rma.c). */
    bool am_rma;
    /* UCX's new protocols (1.22 and later): a new endpoint's first put or
     * get waits for the peer's worker to answer its wire-up, so every
     * engine needs a progress thread (fabric_engine_needs_progress). */
    bool new_protocols;
    struct rma_region *regions;   /* RMA engines */
    void *self_addr;              /* this worker's address (a request names it; a peer that is us) */
    size_t self_addr_len;
    struct {
        struct am_region *regions;
        size_t n, cap;
        uint64_t seq;       /* the last get's or flush's, which its answer names */
        bool answered, bad, gone;   /* its answer came; of the wrong length; with no bytes (no such region) */
        void *get_dst;
        size_t get_len;
        struct am_asker *askers[AM_ASKERS_MAX];
        size_t nas;
        struct fabric_peer *peers;
    } am;
};

/* The active messages of shunt's own worker (no program's id can clash). */
enum {
    BELL_AM_ID = 1,   /* a doorbell */
    PUT_AM_ID,        /* the active-message engines' copies of RMA */
    GET_AM_ID,
    GET_ANSWER_AM_ID,
    FLUSH_AM_ID,
    FLUSH_ANSWER_AM_ID,
};

struct fabric_peer {
    struct fabric_engine *e;
    ucp_ep_h ep;
    ucp_rkey_h rkey;        /* RMA engines: the peer's region, where it is */
    uint64_t remote_base;
    uint64_t region;        /* active-message engines: the peer's region, by its id */
    struct rma_region *self_region;   /* RMA engines: the peer is this worker, the region ours */
    int watch_fd;           /* the connection's own socket, to see the peer closing (-1: none) */
    uint32_t watch_pid;     /* the peer's process on this host (0: unknown) */
    struct fabric_peer *next;   /* active-message engines: the engine's peers, whose endpoints answer */
    size_t addr_len;        /* ... and the worker address each was made with */
    unsigned char *addr;
};

/* Waits for a request of the worker to end, driving progress, for at most
 * FABRIC_FINISH_NS: then it is let go and the answer is -ETIMEDOUT. */
int fabric_ucx_finish(struct fabric_engine *e, ucs_status_ptr_t req);

/* The peer's end, as its connection's socket (shut down or gone, now or
 * within wait_ms) and its process (ended: a look at /proc) tell it
 * (fabric_peer_watch). */
bool fabric_peer_closing(const struct fabric_peer *p, int wait_ms);
bool fabric_peer_ended(const struct fabric_peer *p);
/* A wait for the peer's answer, looked at now and then (at now): true once
 * the peer was seen closing FABRIC_CLOSING_NS ago, or its process ended
 * (its answers, if any, came already).  looked starts as the wait's start. */
struct fabric_peer_wait {
    uint64_t closing, looked;
};
bool fabric_peer_wait_over(const struct fabric_peer *p, struct fabric_peer_wait *w, uint64_t now);
#define FABRIC_FINISH_NS (5ull * 1000 * 1000 * 1000)
uint64_t fabric_ucx_now_ns(void);

/* fabric_am_rma.c: the handlers (at the worker's creation), a region's id
 * and key (at its map; -errno), its end, and the three operations. */
ucs_status_t am_rma_handlers(struct fabric_engine *e);
void am_rma_close(struct fabric_engine *e);   /* before the worker goes */
int am_region_add(struct fabric_engine *e, void *base, size_t len, void **key, size_t *key_len);
void am_region_remove(struct fabric_engine *e, void *base, void *key);
int am_peer_region(struct fabric_peer *p, const void *key, size_t key_len);
/* A peer of the engine's, whose endpoint may answer what its worker asks
 * (addr: the worker address it was made with), and its end. */
int am_peer_add(struct fabric_peer *p, const void *addr, size_t len);
void am_peer_remove(struct fabric_peer *p);
/* Whether key is an active-message engine's (an RMA engine refuses it). */
bool am_key(const void *key, size_t key_len);
int am_put(struct fabric_peer *p, uint64_t offset, const void *src, size_t len);
int am_get(struct fabric_peer *p, uint64_t offset, void *dst, size_t len);
int am_flush(struct fabric_peer *p);

#endif
