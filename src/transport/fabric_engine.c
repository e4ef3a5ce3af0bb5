/*
 * fabric_engine.c: UCX through dlopen (fabric_engine.h).
 *
 * Owns: the table of UCX functions found with dlsym, the one load per
 * process, the memory hooks setting, and the context, worker, regions and
 * endpoints made with them.
 *
 * The hooks: libucm (loaded with libucp) reads its options (UCX_MEM_EVENTS,
 * UCX_MEM_MALLOC_HOOKS ...) with getenv when it is loaded, and its
 * constructor then patches libc's mmap, munmap, brk ... (measured: the
 * first bytes of mmap change at dlopen).  shunt never sets variables in the
 * program's environment (another thread may read it meanwhile, a child
 * would inherit it), so the loading thread's getenv answers "no" for them
 * during the dlopen (base/env_override.h), and after it, before ucp_init,
 * shunt turns them off in UCM's options too, in place (events off: no handler can be
 * set, so nothing is hooked; the hook mode itself must stay, or UCM's own
 * mmap wrapper, which the events would have used, calls itself), and asks
 * for no registration cache: shunt's regions are made by UCX itself
 * (UCP_MEM_MAP_ALLOCATE) and registered once.  Unless
 * the program had loaded UCX itself before: then the hooks are the
 * program's (an MPI library's registration cache depends on them) and are
 * left as they are.
 *
 * UCX makes fds, threads and sockets of its own; whoever calls in here from
 * inside libshunt.so must have made them invisible to the interposition of
 * the calling thread first (not yet needed: no connection uses the engine).
 */
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/env_override.h"
#include "base/fsize.h"
#include "base/pid_gone.h"
#include "base/real.h"
#include "transport/fabric_engine.h"
#include "transport/fabric_ucx.h"

/* Every lane but UCX's TCP lanes (slower than kernel TCP) and cma (with
 * the active messages of doorbells, UCX added it to the endpoints and half
 * the runs of fabric_ring_bench's polled stream fell from 270 ns and
 * 15 GB/s to 800 ns and 2 GB/s; without it, none did). */
#define DEFAULT_TLS "^tcp,cma"

/* UCX makes its shared-memory segments (the posix lane's, a region's) as
 * files it grows with ftruncate: past the program's RLIMIT_FSIZE that
 * draws SIGXFSZ, whose default action kills (OpenSSH's pre-authentication
 * child sets the limit to 0), inside UCX where shunt cannot take it off
 * as fsize.h does for its own files.  So no engine is opened and no region
 * made while the limit is finite; an engine open already goes on with what
 * it has (a ring does not grow then).  Its lazy growth of receive buffers
 * in progress is not guarded: shunt's rings use puts, which need none. */
#define FSIZE_WHY "the process's RLIMIT_FSIZE is set (UCX's shared-memory files would draw SIGXFSZ)"


struct ucx_calls ucx;

/* The UCX versions the conformance suite passes on, both lane settings:
 * Debian 12's 1.13.1, and PyPI's 1.14.1 to 1.22.0.  Others are refused
 * (the connection stays kernel TCP, the reason in the log): each minor
 * version changed something the engine depends on (1.15: `self` lanes
 * read a region itself; 1.16: new protocols on by default; 1.18: the
 * layout of UCM's options; 1.22: puts of 16 KiB fail with the former
 * protocols), so one not tried is not taken (docs/compatibility.md, "UCX
 * versions"). */
#define UCX_TESTED_MAJOR 1
#define UCX_TESTED_MINOR_FIRST 13
#define UCX_TESTED_MINOR_LAST 22
/* The first version whose engine uses UCX's new protocols (see
 * fabric_engine_open). */
#define UCX_NEW_PROTOCOLS_MINOR 22

/* The head of ucm_global_config_t (ucm/api/ucm.h), the same in every
 * version shunt takes. */
struct ucm_opts_head {
    ucs_log_level_t log_level;
    int enable_events;
    ucm_mmap_hook_mode_t mmap_hook_mode;
    int enable_malloc_hooks;
    int enable_malloc_reloc;
};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static int load_err;
static unsigned ucx_minor;   /* the version loaded, 1.ucx_minor */
static char load_why[160];

static void say(char *why, size_t len, const char *what, const char *detail)
{
    if (why && len)
        snprintf(why, len, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
}

/* The libraries, in the order they depend on one another; libucp brings the
 * others, which dlsym finds through its handle's dependencies. */
static void load(void)
{
    bool had = dlopen("libucp.so.0", RTLD_NOW | RTLD_NOLOAD) != NULL;   /* the program's own UCX */
    /* libucm patches libc's mmap and friends in its constructor, unless
     * getenv says no then (env_override.h) */
    static const char *const loading[] = {
        "UCX_MEM_EVENTS=no", "UCX_MEM_MALLOC_HOOKS=no", "UCX_MEM_MALLOC_RELOC=no", "UCX_MEM_DYNAMIC_MMAP_THRESH=no",
        /* nothing on the program's stderr: shunt says what failed, in its own log */
        "UCX_LOG_LEVEL=fatal", "UCX_WARN_UNUSED_ENV_VARS=n", NULL
    };
    if (!had)
        env_override_begin(loading);
    void *h = dlopen("libucp.so.0", RTLD_NOW | RTLD_LOCAL);
    env_override_end();
    if (!h) {
        load_err = -ENOENT;
        say(load_why, sizeof load_why, "UCX is not installed (libucp.so.0)", dlerror());
        return;
    }
#define FIND(name, ret, args)                                                              \
    if (!(*(void **)&ucx.name = dlsym(h, #name))) {                                        \
        load_err = -ENOSYS;                                                                \
        say(load_why, sizeof load_why, "UCX lacks " #name, NULL);                          \
        return;                                                                            \
    }
    UCX_CALLS(FIND)
#undef FIND
    unsigned major = 0, minor = 0, release = 0;
    ucx.ucp_get_version(&major, &minor, &release);
    if (major != UCX_TESTED_MAJOR || minor < UCX_TESTED_MINOR_FIRST || minor > UCX_TESTED_MINOR_LAST) {
        load_err = -ENOTSUP;
        snprintf(load_why, sizeof load_why, "UCX %u.%u.%u is not a version shunt was tested with (%d.%d to %d.%d)",
                 major, minor, release, UCX_TESTED_MAJOR, UCX_TESTED_MINOR_FIRST, UCX_TESTED_MAJOR,
                 UCX_TESTED_MINOR_LAST);
        return;   /* (before anything below reads UCX's structures by this build's layout) */
    }
    ucx_minor = minor;
    /* the options UCX read from the environment, but for the hooks: set in
     * place, in the head of UCM's structure, whose layout is the same from
     * 1.13 to 1.22 at least (the fields after it moved: cuda_hook_modes became 64
     * bits in 1.18); the rest (the dynamic mmap threshold) came from the
     * environment the load saw */
    struct ucm_opts_head *now = dlsym(h, "ucm_global_opts");
    if (!had && now) {
        now->enable_events = 0;   /* no handler can be set: nothing is ever hooked */
        now->enable_malloc_hooks = 0;
        now->enable_malloc_reloc = 0;
    }
}

static int failed(ucs_status_t s, const char *what, char *why, size_t len)
{
    say(why, len, what, ucx.ucs_status_string(s));
    return s == UCS_ERR_NO_MEMORY ? -ENOMEM : s == UCS_ERR_UNREACHABLE || s == UCS_ERR_NO_DEVICE ? -ENETUNREACH : -EIO;
}

/* A doorbell arrived: it has done its work by waking the worker's fd and
 * ending a wait; what to read is in the rings. */
static ucs_status_t bell_heard(void *arg, const void *header, size_t header_len, void *data, size_t len,
                               const ucp_am_recv_param_t *param)
{
    (void)header, (void)header_len, (void)data, (void)len, (void)param;
    ((struct fabric_engine *)arg)->bells_heard++;
    return UCS_OK;
}

static bool lane_listed(const char *list, const char *lane);

/* Whether UCX may choose its TCP lanes with this list ("^a,b": all but
 * those).  Over them UCX's puts are software: the receiver answers each
 * from inside its progress, and an answer that cannot go (the writer's
 * process died, its socket reset) is an error UCX 1.13 does not handle:
 * it aborts the process (ucp_request_try_send, from ucp_put_handler; seen
 * in poll_before_claim and procs_epoll_peer_killed).  Such engines carry
 * puts, gets and flushes as active messages of shunt's (fabric_am_rma.c). */
static bool tcp_allowed(const char *lanes)
{
    if (lanes[0] == '^')
        return !lane_listed(lanes + 1, "tcp");
    return lane_listed(lanes, "tcp") || lane_listed(lanes, "all");
}

/* The worker's own address, kept: a request of the active-message engines
 * carries it, and a peer whose address it is is this worker (self_region). */
static ucs_status_t own_address(struct fabric_engine *e)
{
    ucp_address_t *a;
    size_t len;
    ucs_status_t s = ucx.ucp_worker_get_address(e->worker, &a, &len);
    if (s != UCS_OK)
        return s;
    if ((e->self_addr = malloc(len)) != NULL) {
        memcpy(e->self_addr, a, len);
        e->self_addr_len = len;
    }
    ucx.ucp_worker_release_address(e->worker, a);
    return e->self_addr ? UCS_OK : UCS_ERR_NO_MEMORY;
}

int fabric_engine_open(struct fabric_engine **out, const char *tls, char *why, size_t whylen)
{
    if (fsize_limited()) {
        say(why, whylen, FSIZE_WHY, NULL);
        return -EFBIG;
    }
    pthread_once(&load_once, load);
    if (load_err) {
        say(why, whylen, load_why, NULL);
        return load_err;
    }
    struct fabric_engine *e = calloc(1, sizeof *e);
    if (!e)
        return -ENOMEM;
    ucp_config_t *cfg;
    ucs_status_t s = ucx.ucp_config_read("SHUNT", NULL, &cfg);   /* SHUNT_UCX_*, never the program's UCX_* */
    if (s != UCS_OK) {
        free(e);
        return failed(s, "UCX configuration", why, whylen);
    }
    const char *lanes = tls ? tls : DEFAULT_TLS;
    e->am_rma = tcp_allowed(lanes);
    s = ucx.ucp_config_modify(cfg, "TLS", lanes);
    if (s == UCS_OK)
        s = ucx.ucp_config_modify(cfg, "RCACHE_ENABLE", "n");
    /* UCX's former protocols (the default up to 1.15), up to 1.21.  With
     * the new ones an endpoint's first put or get waits until the peer's
     * worker answered its wire-up, on the shared-memory lanes too, and a
     * peer busy outside shunt (a plain accept, waitpid) never does:
     * emfile_count's client waited for ever with 1.16 to 1.21; and the
     * worker's fence flushes every endpoint.  From 1.22 the former ones
     * fail a put of 16 KiB on the shared-memory lanes: the new ones, and
     * this process's progress thread answers the wire-up of its peers
     * (fabric_engine_needs_progress). */
    e->new_protocols = ucx_minor >= UCX_NEW_PROTOCOLS_MINOR;
    if (s == UCS_OK && !e->new_protocols)
        s = ucx.ucp_config_modify(cfg, "PROTO_ENABLE", "n");
    if (s == UCS_OK) {
        ucp_params_t p = {
            .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
            .features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
            .mt_workers_shared = 0,
        };
        s = ucx.ucp_init_version(UCP_API_MAJOR, UCP_API_MINOR, &p, cfg, &e->ctx);
    }
    ucx.ucp_config_release(cfg);
    if (s != UCS_OK) {
        free(e);
        return failed(s, "UCX context", why, whylen);
    }
    /* serialized by shunt's own lock around every call into the worker */
    ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                               .thread_mode = UCS_THREAD_MODE_SERIALIZED };
    s = ucx.ucp_worker_create(e->ctx, &wp, &e->worker);
    if (s == UCS_OK && (s = own_address(e)) != UCS_OK)
        ucx.ucp_worker_destroy(e->worker);
    if (s == UCS_OK) {
        ucp_am_handler_param_t hp = {
            .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                          UCP_AM_HANDLER_PARAM_FIELD_ARG,
            .id = BELL_AM_ID,
            .cb = bell_heard,
            .arg = e,
        };
        if ((s = ucx.ucp_worker_set_am_recv_handler(e->worker, &hp)) == UCS_OK && e->am_rma)
            s = am_rma_handlers(e);
        if (s == UCS_OK)
            s = ucx.ucp_worker_get_efd(e->worker, &e->efd);
        if (s != UCS_OK)
            ucx.ucp_worker_destroy(e->worker);
    }
    if (s != UCS_OK) {
        ucx.ucp_cleanup(e->ctx);
        free(e->self_addr);
        free(e);
        return failed(s, "UCX worker", why, whylen);
    }
    *out = e;
    return 0;
}

void fabric_engine_close(struct fabric_engine *e)
{
    if (!e)
        return;
    if (e->am_rma)
        am_rma_close(e);
    while (e->regions) {   /* (regions kept for peers the program never closed) */
        struct rma_region *h = e->regions;
        e->regions = h->next;
        ucx.ucp_mem_unmap(e->ctx, h->mem);
        free(h);
    }
    free(e->self_addr);
    ucx.ucp_worker_destroy(e->worker);
    ucx.ucp_cleanup(e->ctx);
    free(e);
}

bool fabric_engine_idle(const struct fabric_engine *e)
{
    return e->users == 0;
}

bool fabric_engine_forks_whole(const struct fabric_engine *e)
{
    return !e->am_rma;
}

int fabric_engine_efd(struct fabric_engine *e)
{
    return e->efd;
}

bool fabric_engine_arm(struct fabric_engine *e)
{
    return ucx.ucp_worker_arm(e->worker) == UCS_OK;   /* UCS_ERR_BUSY: events pending */
}

unsigned fabric_engine_progress(struct fabric_engine *e)
{
    return ucx.ucp_worker_progress(e->worker);
}

bool fabric_engine_needs_progress(const struct fabric_engine *e)
{
    return e->am_rma || e->new_protocols;
}

uint64_t fabric_engine_bells_heard(const struct fabric_engine *e)
{
    return e->bells_heard;
}

int fabric_engine_address(struct fabric_engine *e, void **addr, size_t *len)
{
    ucp_address_t *a;
    if (ucx.ucp_worker_get_address(e->worker, &a, len) != UCS_OK)
        return -EIO;
    *addr = a;
    return 0;
}

void fabric_engine_address_free(struct fabric_engine *e, void *addr)
{
    ucx.ucp_worker_release_address(e->worker, addr);
}

int fabric_region_map(struct fabric_engine *e, size_t len, struct fabric_region *r)
{
    memset(r, 0, sizeof *r);
    if (fsize_limited())
        return -EFBIG;   /* (FSIZE_WHY) */
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        .address = NULL,
        .length = len,
        .flags = UCP_MEM_MAP_ALLOCATE,   /* the engine's memory: remotely writable on shared-memory lanes too */
    };
    ucp_mem_h mem;
    if (ucx.ucp_mem_map(e->ctx, &mp, &mem) != UCS_OK)
        return -ENOMEM;
    ucp_mem_attr_t ma = { .field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH };
    bool keyed = ucx.ucp_mem_query(mem, &ma) == UCS_OK && ma.length >= len &&
                 (e->am_rma ? am_region_add(e, ma.address, len, &r->rkey, &r->rkey_len) == 0
                            : ucx.ucp_rkey_pack(e->ctx, mem, &r->rkey, &r->rkey_len) == UCS_OK);
    struct rma_region *held = NULL;
    if (keyed && !e->am_rma && !(held = calloc(1, sizeof *held))) {
        ucx.ucp_rkey_buffer_release(r->rkey);
        keyed = false;
    }
    if (!keyed) {
        ucx.ucp_mem_unmap(e->ctx, mem);
        return -EIO;
    }
    if (held) {
        *held = (struct rma_region){ .next = e->regions, .mem = mem, .base = ma.address };
        e->regions = held;
    }
    r->base = ma.address;
    r->len = len;
    r->mem = mem;
    e->users++;
    return 0;
}

/* An RMA engine's region goes when it was given back and no endpoint of
 * this worker's to itself is left to read or write it (struct rma_region). */
static void rma_region_settle(struct fabric_engine *e, struct rma_region *h)
{
    if (!h->given_back || h->self_peers)
        return;
    for (struct rma_region **at = &e->regions; *at; at = &(*at)->next)
        if (*at == h) {
            *at = h->next;
            break;
        }
    ucx.ucp_mem_unmap(e->ctx, h->mem);
    free(h);
}

void fabric_region_unmap(struct fabric_engine *e, struct fabric_region *r)
{
    if (e->am_rma && r->rkey)
        am_region_remove(e, r->base, r->rkey);   /* a late put for it finds no region */
    else if (r->rkey)
        ucx.ucp_rkey_buffer_release(r->rkey);
    if (r->mem) {
        e->users--;
        struct rma_region *h = e->regions;
        while (h && h->mem != r->mem)
            h = h->next;
        if (h) {
            h->given_back = true;
            rma_region_settle(e, h);
        } else {
            ucx.ucp_mem_unmap(e->ctx, r->mem);
        }
    }
    memset(r, 0, sizeof *r);
}

/* The region of ours a peer's blob names, if that peer is this very worker
 * (its address is ours: both ends of the connection are in this process). */
static struct rma_region *self_region(struct fabric_engine *e, const void *addr, size_t addr_len,
                                      uint64_t remote_base)
{
    if (addr_len != e->self_addr_len || memcmp(addr, e->self_addr, addr_len) != 0)
        return NULL;
    for (struct rma_region *h = e->regions; h; h = h->next)
        if (!h->given_back && (uint64_t)(uintptr_t)h->base == remote_base)
            return h;
    return NULL;
}

/* How long a put or a flush may take: over a lane that needs the peer's
 * progress (TCP) a peer that stopped driving its worker never completes
 * one, and no wait of shunt's may be unbounded. */
#define CANCEL_GRACE_NS (100ull * 1000 * 1000)

uint64_t fabric_ucx_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* How often a wait for an answer looks at the peer's process. */
#define PID_LOOK_NS (10ull * 1000 * 1000)

bool fabric_peer_closing(const struct fabric_peer *p, int wait_ms)
{
    struct pollfd q = { .fd = p->watch_fd, .events = POLLRDHUP };
    return p->watch_fd >= 0 && shunt_real.poll(&q, 1, wait_ms) > 0 &&
           (q.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

bool fabric_peer_ended(const struct fabric_peer *p)
{
    return p->watch_pid && pid_gone(p->watch_pid);
}

bool fabric_peer_wait_over(const struct fabric_peer *p, struct fabric_peer_wait *w, uint64_t now)
{
    if (!w->closing && fabric_peer_closing(p, 0))
        w->closing = now;
    if (!w->closing && now - w->looked > PID_LOOK_NS) {
        w->looked = now;
        if (fabric_peer_ended(p))
            w->closing = now - FABRIC_CLOSING_NS;
    }
    return w->closing && now - w->closing >= FABRIC_CLOSING_NS;
}

/* fabric_ucx_finish, and where p is not NULL, ended early with if_gone once
 * the peer's end says no answer will come (fabric_peer_wait_over). */
static int finish(struct fabric_engine *e, const struct fabric_peer *p, ucs_status_ptr_t req, int if_gone)
{
    if (req == NULL)
        return 0;
    if (UCS_PTR_IS_ERR(req))
        return -EIO;
    ucs_status_t s;
    uint64_t start = 0;
    struct fabric_peer_wait w = { 0 };
    for (unsigned spins = 0; (s = ucx.ucp_request_check_status(req)) == UCS_INPROGRESS; spins++) {
        ucx.ucp_worker_progress(e->worker);
        if (spins % 1024 == 0) {   /* the clock now and then: a put is usually done at once */
            uint64_t now = fabric_ucx_now_ns();
            if (!start)
                start = w.looked = now;
            bool gone = p && fabric_peer_wait_over(p, &w, now);
            if (gone || now - start > FABRIC_FINISH_NS) {
                /* UCX cancels only receives: a put or a flush may stay in
                 * progress (found: a flush to a peer that stopped driving
                 * its worker spun here for minutes).  So a short grace,
                 * then the request is let go: UCX frees it when it ends,
                 * and the caller closes the endpoint, which ends it. */
                ucx.ucp_request_cancel(e->worker, req);
                for (uint64_t t = now; ucx.ucp_request_check_status(req) == UCS_INPROGRESS &&
                                       fabric_ucx_now_ns() - t < CANCEL_GRACE_NS;)
                    ucx.ucp_worker_progress(e->worker);
                ucx.ucp_request_free(req);
                return gone ? if_gone : -ETIMEDOUT;
            }
        }
    }
    ucx.ucp_request_free(req);
    return s == UCS_OK ? 0 : -EIO;
}

int fabric_ucx_finish(struct fabric_engine *e, ucs_status_ptr_t req)
{
    return finish(e, NULL, req, 0);
}

int fabric_peer_connect(struct fabric_engine *e, const void *addr, size_t addr_len, const void *rkey,
                        size_t rkey_len, uint64_t remote_base, struct fabric_peer **out, char *why,
                        size_t whylen)
{
    if (am_key(rkey, rkey_len) != e->am_rma) {
        say(why, whylen, "the peer's engine carries bytes otherwise (SHUNT_FABRIC_LANES differs: UCX's TCP lanes "
                         "allowed at one end only)", NULL);
        return -EPROTO;
    }
    struct fabric_peer *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->e = e;
    p->remote_base = remote_base;
    p->watch_fd = -1;
    p->watch_pid = 0;
    /* A dead peer is told by the companion TCP socket, on every lane, as
     * for shunt's own rings, and every wait here is bounded.  Not by UCX's
     * peer error handling: UCX 1.13's shared-memory lanes have none (the
     * endpoint is unreachable in that mode), and with it a forced close of
     * an endpoint whose peer never made one back (a refused hand-over) left
     * that peer's worker unable to put to this one again: the next
     * endpoint's first put failed, EOPNOTSUPP, on both kinds of lanes
     * (test_fabric_stream's refusal, then an exchange). */
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = addr,
        .err_mode = UCP_ERR_HANDLING_MODE_NONE,
    };
    ucs_status_t s = ucx.ucp_ep_create(e->worker, &ep, &p->ep);
    if (s != UCS_OK) {
        free(p);
        return failed(s, "UCX endpoint", why, whylen);
    }
    e->users++;
    if (e->am_rma) {
        if (am_peer_region(p, rkey, rkey_len) < 0 || am_peer_add(p, addr, addr_len) < 0) {
            fabric_peer_close(p);
            say(why, whylen, "the peer's region key is not one, or no memory", NULL);
            return -EPROTO;
        }
    } else if ((s = ucx.ucp_ep_rkey_unpack(p->ep, rkey, &p->rkey)) != UCS_OK) {
        fabric_peer_close(p);
        return failed(s, "UCX remote key", why, whylen);
    } else if ((p->self_region = self_region(e, addr, addr_len, remote_base)) != NULL) {
        p->self_region->self_peers++;
    }
    *out = p;
    return 0;
}

void fabric_peer_close(struct fabric_peer *p)
{
    if (!p)
        return;
    if (p->rkey)
        ucx.ucp_rkey_destroy(p->rkey);
    if (p->e->am_rma)
        am_peer_remove(p);
    ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE };
    fabric_ucx_finish(p->e, ucx.ucp_ep_close_nbx(p->ep, &rp));
    p->e->users--;
    if (p->self_region) {
        p->self_region->self_peers--;
        rma_region_settle(p->e, p->self_region);
    }
    free(p);
}

int fabric_put(struct fabric_peer *p, uint64_t offset, const void *src, size_t len)
{
    if (p->e->am_rma)
        return am_put(p, offset, src, len);
    ucp_request_param_t rp = { 0 };
    return finish(p->e, p, ucx.ucp_put_nbx(p->ep, src, len, p->remote_base + offset, p->rkey, &rp), -EPIPE);
}

int fabric_get(struct fabric_peer *p, uint64_t offset, void *dst, size_t len)
{
    if (p->e->am_rma)
        return am_get(p, offset, dst, len);
    ucp_request_param_t rp = { 0 };
    return finish(p->e, p, ucx.ucp_get_nbx(p->ep, dst, len, p->remote_base + offset, p->rkey, &rp), -EPIPE);
}

void fabric_peer_watch(struct fabric_peer *p, int fd, uint32_t pid)
{
    p->watch_fd = fd;
    if (pid)
        p->watch_pid = pid;
}

int fabric_bell(struct fabric_peer *p)
{
    /* never waited for: the peer may be dead (its FIFO full) or not wired
     * up yet; UCX frees the request when it ends, and a static byte stays
     * valid until then */
    static const char one;
    ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_AM_SEND_FLAG_EAGER };
    ucs_status_ptr_t req = ucx.ucp_am_send_nbx(p->ep, BELL_AM_ID, NULL, 0, &one, 1, &rp);
    if (UCS_PTR_IS_ERR(req))
        return -EIO;
    if (req)
        ucx.ucp_request_free(req);
    return 0;
}

int fabric_fence(struct fabric_peer *p)
{
    return ucx.ucp_worker_fence(p->e->worker) == UCS_OK ? 0 : -EIO;
}

int fabric_flush(struct fabric_peer *p)
{
    if (p->e->am_rma)
        return am_flush(p);
    ucp_request_param_t rp = { 0 };
    return finish(p->e, p, ucx.ucp_ep_flush_nbx(p->ep, &rp), 0);   /* (a peer gone waits for nothing of ours) */
}

/* Whether lane is one of the comma-separated names in list. */
static bool lane_listed(const char *list, const char *lane)
{
    size_t n = strlen(lane);
    for (const char *l = list; *l; l += strcspn(l, ",") + (l[strcspn(l, ",")] == ',')) {
        if (strncmp(l, lane, n) == 0 && (l[n] == ',' || l[n] == '\0'))
            return true;
    }
    return false;
}

/* ucp_ep_print_info's lines "lane[0]:  3:sysv/memory.0 md[2] ...": the
 * transport/device of each, without the index. */
void fabric_peer_lanes(struct fabric_peer *p, char *out, size_t len)
{
    out[0] = '\0';
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    if (!f)
        return;
    ucx.ucp_ep_print_info(p->ep, f);
    shunt_real.fclose(f);   /* not a socket's stream, but the layers call libc so */
    size_t used = 0;
    for (char *l = text ? strstr(text, "lane[") : NULL; l; l = strstr(l + 1, "lane[")) {
        char *colon = strchr(l, ':');
        if (!colon)
            break;
        char *name = colon + 1;
        name += strspn(name, " ");
        name += strspn(name, "0123456789");
        if (*name == ':')
            name++;
        size_t n = strcspn(name, " .\n");
        if (used + n + 2 > len)
            break;
        char lane[64];
        snprintf(lane, sizeof lane, "%.*s", (int)n, name);
        if (lane_listed(out, lane))
            continue;   /* the same lane twice (active messages and puts) */
        used += (size_t)snprintf(out + used, len - used, "%s%s", used ? "," : "", lane);
    }
    free(text);
}
