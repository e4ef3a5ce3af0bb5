/*
 * fabric_am_rma.c: puts, gets and flushes carried by active messages, for
 * engines whose lanes may be UCX's TCP lanes (fabric_ucx.h, am_rma).
 *
 * Why not UCX's own: over TCP, UCX emulates a put in software, and the
 * receiver answers each one from inside its progress; when the answer
 * cannot go (the writer's process died or closed, its socket reset), UCX
 * 1.13 calls it an unexpected error and aborts the process (and so does
 * its newest code).  A message a handler of shunt's takes needs no answer;
 * the answers shunt sends itself (a get's bytes, a flush's) fail into
 * their requests, never the process.  It also ends late puts: a message
 * for a region given back finds no region of that id and is dropped,
 * where UCX's software put wrote at an address, mapped or not.
 *
 * A region is named by a random 64-bit id, which the peer gets in place
 * of UCX's packed key ("shuntAM1" and the id).  Every message is the
 * peer's input: its header is read once, its region found by id, its
 * range checked against that region, and anything else dropped.
 *
 * Answers go by an endpoint of the answerer's own to the asker's worker,
 * whose address the request carries: its peer's, or, asked before it
 * attached, one made for answers (kept, a few).  Never by UCX's reply
 * endpoint: a request that names one is dropped by UCX when the endpoint
 * UCX paired with the asker's is gone, and after an endpoint was closed
 * whose peer never made one back (a refused hand-over) the pairing is off
 * by one (seen: test_fabric_stream's handover, a flush unanswered).
 *
 * Order: an endpoint's eager messages go on its one active-message lane
 * (UCX's default of one eager lane) and are handled in the order sent, so
 * data lands before the index put after it, and a flush's answer comes
 * after the peer handled every put before the flush.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/real.h"
#include "transport/fabric_engine.h"
#include "transport/fabric_ucx.h"

static const char KEY_MAGIC[8] = { 's', 'h', 'u', 'n', 't', 'A', 'M', '1' };
#define KEY_LEN 16

struct put_header {
    uint64_t region;
    uint64_t offset;
};

struct get_header {
    uint64_t region;
    uint64_t offset;
    uint64_t len;
    uint64_t seq;
};

struct answer_header {
    uint64_t seq;
};

/* The region id names, if [offset, offset + len) lies inside it. */
static uint8_t *region_range(struct fabric_engine *e, uint64_t id, uint64_t offset, uint64_t len)
{
    for (size_t i = 0; i < e->am.n; i++) {
        struct am_region *r = &e->am.regions[i];
        if (r->id == id)
            return offset <= r->len && len <= r->len - offset ? r->base + offset : NULL;
    }
    return NULL;
}

/* Copies a put into its region: an aligned word (an index) in one store,
 * so a reader in another thread never sees half of it. */
static void land(uint8_t *to, const void *data, size_t len)
{
    if (len == sizeof(uint64_t) && ((uintptr_t)to & (sizeof(uint64_t) - 1)) == 0) {
        uint64_t v;
        memcpy(&v, data, sizeof v);
        __atomic_store_n((uint64_t *)(void *)to, v, __ATOMIC_RELEASE);
    } else {
        memcpy(to, data, len);
        __atomic_thread_fence(__ATOMIC_RELEASE);
    }
}

static ucs_status_t put_heard(void *arg, const void *header, size_t header_len, void *data, size_t len,
                              const ucp_am_recv_param_t *param)
{
    struct put_header h;
    if (header_len != sizeof h || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
        return UCS_OK;   /* not one of ours: every put goes eager */
    memcpy(&h, header, sizeof h);
    uint8_t *to = region_range(arg, h.region, h.offset, len);
    if (to)
        land(to, data, len);
    return UCS_OK;
}

static void answer_sent(void *request, ucs_status_t status, void *buf)
{
    (void)status;
    free(buf);
    ucx.ucp_request_free(request);
}

static void close_ep(ucp_ep_h ep)
{
    ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE };
    ucs_status_ptr_t req = ucx.ucp_ep_close_nbx(ep, &rp);
    if (req && !UCS_PTR_IS_ERR(req))
        ucx.ucp_request_free(req);   /* (it ends by itself) */
}

/* The endpoint to the asker whose worker address is addr, for an engine
 * with no peer of its own there (one that was asked before it attached):
 * kept from an earlier answer, or made now (inside progress, as a
 * listener's callback makes one).  NULL if none can be. */
static ucp_ep_h asker_ep(struct fabric_engine *e, const void *addr, size_t len)
{
    for (size_t i = 0; i < e->am.nas; i++)
        if (e->am.askers[i]->len == len && memcmp(e->am.askers[i]->addr, addr, len) == 0)
            return e->am.askers[i]->ep;
    struct am_asker *a = malloc(sizeof *a + len);
    if (!a)
        return NULL;
    a->len = len;
    memcpy(a->addr, addr, len);
    ucp_ep_params_t ep = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = (const ucp_address_t *)a->addr,
        .err_mode = UCP_ERR_HANDLING_MODE_NONE,
    };
    if (ucx.ucp_ep_create(e->worker, &ep, &a->ep) != UCS_OK) {
        free(a);
        return NULL;
    }
    if (e->am.nas == AM_ASKERS_MAX) {   /* the oldest goes */
        close_ep(e->am.askers[0]->ep);
        free(e->am.askers[0]);
        memmove(e->am.askers, e->am.askers + 1, (AM_ASKERS_MAX - 1) * sizeof e->am.askers[0]);
        e->am.nas--;
    }
    e->am.askers[e->am.nas++] = a;
    return a->ep;
}

/* An answer to a get or a flush (len bytes at from, or none), to the
 * asker whose address came with it, by an endpoint of ours to its worker:
 * a peer's (UCX paired it with the asker's), or one made for answers.
 * Never waited for (a failure is the asker's timeout, or its endpoint's
 * failure).  Header and bytes are copied: UCX 1.13 reads both until the
 * send ends, which may be after this handler returned. */
static void answer(struct fabric_engine *e, const void *addr, size_t addr_len, unsigned id, uint64_t seq,
                   const void *from, size_t len)
{
    ucp_ep_h ep = NULL;
    for (struct fabric_peer *p = e->am.peers; p && !ep; p = p->next)
        if (p->addr_len == addr_len && memcmp(p->addr, addr, addr_len) == 0)
            ep = p->ep;
    if (!ep)
        ep = asker_ep(e, addr, addr_len);
    struct answer_header *h = ep ? malloc(sizeof *h + len) : NULL;
    if (!h)
        return;
    h->seq = seq;
    if (len)
        memcpy(h + 1, from, len);
    ucp_request_param_t rp = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .flags = UCP_AM_SEND_FLAG_EAGER,
        .cb.send = answer_sent,
        .user_data = h,
    };
    ucs_status_ptr_t req = ucx.ucp_am_send_nbx(ep, id, h, sizeof *h, len ? (void *)(h + 1) : NULL, len, &rp);
    if (req == NULL || UCS_PTR_IS_ERR(req))
        free(h);   /* done at once, or failed: no callback comes */
}

/* A request's data is the asker's worker address (an eager message's
 * bytes, not a rendezvous's). */
static bool asker_of(const ucp_am_recv_param_t *param, size_t len)
{
    return !(param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) && len > 0 && len <= AM_ADDR_MAX;
}

static ucs_status_t get_heard(void *arg, const void *header, size_t header_len, void *data, size_t len,
                              const ucp_am_recv_param_t *param)
{
    struct get_header h;
    if (header_len != sizeof h || !asker_of(param, len))
        return UCS_OK;
    memcpy(&h, header, sizeof h);
    const uint8_t *from = region_range(arg, h.region, h.offset, h.len);
    answer(arg, data, len, GET_ANSWER_AM_ID, h.seq, from, from ? h.len : 0);   /* no bytes: no such range */
    return UCS_OK;
}

static ucs_status_t flush_heard(void *arg, const void *header, size_t header_len, void *data, size_t len,
                                const ucp_am_recv_param_t *param)
{
    struct answer_header h;
    if (header_len != sizeof h || !asker_of(param, len))
        return UCS_OK;
    memcpy(&h, header, sizeof h);
    answer(arg, data, len, FLUSH_ANSWER_AM_ID, h.seq, NULL, 0);
    return UCS_OK;
}

/* The answer to this engine's request under way; an older one's (a request
 * that timed out) is dropped. */
static ucs_status_t answer_heard(void *arg, const void *header, size_t header_len, void *data, size_t len,
                                 const ucp_am_recv_param_t *param)
{
    struct fabric_engine *e = arg;
    struct answer_header h;
    if (header_len != sizeof h || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
        return UCS_OK;
    memcpy(&h, header, sizeof h);
    if (h.seq != e->am.seq || e->am.answered)
        return UCS_OK;
    e->am.answered = true;
    e->am.gone = len == 0 && e->am.get_len > 0;   /* the peer has no such region (any more) */
    e->am.bad = len != e->am.get_len;
    if (!e->am.bad && len)
        memcpy(e->am.get_dst, data, len);
    return UCS_OK;
}

ucs_status_t am_rma_handlers(struct fabric_engine *e)
{
    static const struct {
        unsigned id;
        ucp_am_recv_callback_t cb;
    } handlers[] = {
        { PUT_AM_ID, put_heard },
        { GET_AM_ID, get_heard },
        { GET_ANSWER_AM_ID, answer_heard },
        { FLUSH_AM_ID, flush_heard },
        { FLUSH_ANSWER_AM_ID, answer_heard },
    };
    for (size_t i = 0; i < sizeof handlers / sizeof handlers[0]; i++) {
        ucp_am_handler_param_t hp = {
            .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                          UCP_AM_HANDLER_PARAM_FIELD_ARG,
            .id = handlers[i].id,
            .cb = handlers[i].cb,
            .arg = e,
        };
        ucs_status_t s = ucx.ucp_worker_set_am_recv_handler(e->worker, &hp);
        if (s != UCS_OK)
            return s;
    }
    /* a request carries the asker's address (the engine's self_addr) */
    return e->self_addr_len && e->self_addr_len <= AM_ADDR_MAX ? UCS_OK : UCS_ERR_NO_MEMORY;
}

void am_rma_close(struct fabric_engine *e)
{
    for (size_t i = 0; i < e->am.nas; i++) {
        ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_EP_CLOSE_FLAG_FORCE };
        fabric_ucx_finish(e, ucx.ucp_ep_close_nbx(e->am.askers[i]->ep, &rp));
        free(e->am.askers[i]);
    }
    e->am.nas = 0;
    free(e->am.regions);
    e->am.regions = NULL;
}

int am_region_add(struct fabric_engine *e, void *base, size_t len, void **key, size_t *key_len)
{
    uint64_t id;
    if (getrandom(&id, sizeof id, GRND_NONBLOCK) != (ssize_t)sizeof id)
        return -EAGAIN;
    if (e->am.n == e->am.cap) {
        size_t cap = e->am.cap ? 2 * e->am.cap : 8;
        struct am_region *r = realloc(e->am.regions, cap * sizeof *r);
        if (!r)
            return -ENOMEM;
        e->am.regions = r;
        e->am.cap = cap;
    }
    uint8_t *k = malloc(KEY_LEN);
    if (!k)
        return -ENOMEM;
    memcpy(k, KEY_MAGIC, sizeof KEY_MAGIC);
    memcpy(k + sizeof KEY_MAGIC, &id, sizeof id);
    e->am.regions[e->am.n++] = (struct am_region){ .id = id, .base = base, .len = len };
    *key = k;
    *key_len = KEY_LEN;
    return 0;
}

void am_region_remove(struct fabric_engine *e, void *base, void *key)
{
    for (size_t i = 0; i < e->am.n; i++) {
        if (e->am.regions[i].base == base) {
            e->am.regions[i] = e->am.regions[--e->am.n];
            break;
        }
    }
    free(key);
}

int am_peer_add(struct fabric_peer *p, const void *addr, size_t len)
{
    if (!(p->addr = malloc(len)))
        return -ENOMEM;
    memcpy(p->addr, addr, len);
    p->addr_len = len;
    p->next = p->e->am.peers;
    p->e->am.peers = p;
    return 0;
}

void am_peer_remove(struct fabric_peer *p)
{
    for (struct fabric_peer **q = &p->e->am.peers; *q; q = &(*q)->next) {
        if (*q == p) {
            *q = p->next;
            break;
        }
    }
    free(p->addr);
}

bool am_key(const void *key, size_t key_len)
{
    return key_len == KEY_LEN && memcmp(key, KEY_MAGIC, sizeof KEY_MAGIC) == 0;
}

int am_peer_region(struct fabric_peer *p, const void *key, size_t key_len)
{
    if (!am_key(key, key_len))
        return -EPROTO;
    memcpy(&p->region, (const uint8_t *)key + sizeof KEY_MAGIC, sizeof p->region);
    return 0;
}

/* Sends one message of ours on the peer's endpoint and waits until header
 * and data may be reused (UCX reads both until then).  A send that fails
 * while the connection's socket says the peer shut down or went is -EPIPE:
 * the peer is gone, not the lane broken under a live one.  (A process's
 * exit closes the engine's socket and the connection's one after the
 * other: the second is given FABRIC_CLOSING_NS to say so.) */
static int send_am(struct fabric_peer *p, unsigned id, const void *header, size_t header_len, const void *data,
                   size_t len)
{
    ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_AM_SEND_FLAG_EAGER };
    int r = fabric_ucx_finish(p->e, ucx.ucp_am_send_nbx(p->ep, id, header, header_len, data, len, &rp));
    return r < 0 && (fabric_peer_closing(p, (int)(FABRIC_CLOSING_NS / 1000000)) || fabric_peer_ended(p)) ? -EPIPE
                                                                                                  : r;
}

int am_put(struct fabric_peer *p, uint64_t offset, const void *src, size_t len)
{
    struct put_header h = { .region = p->region, .offset = offset };
    return send_am(p, PUT_AM_ID, &h, sizeof h, src, len);
}

/* Asks the peer (a get, or a flush), then drives progress until its answer
 * came, its socket said it is closing and FABRIC_CLOSING_NS passed
 * (fabric_peer_watch), or FABRIC_FINISH_NS passed. */
static int ask(struct fabric_peer *p, unsigned id, const void *header, size_t header_len)
{
    struct fabric_engine *e = p->e;
    if (!e->self_addr_len)
        return -EIO;   /* (no address of ours to be answered at) */
    int r = send_am(p, id, header, header_len, e->self_addr, e->self_addr_len);
    if (r == -EPIPE && id == FLUSH_AM_ID)
        return 0;   /* (a peer gone waits for nothing of ours) */
    if (r < 0)
        return r;
    uint64_t start = fabric_ucx_now_ns();
    struct fabric_peer_wait w = { .looked = start };
    for (unsigned spins = 1; !e->am.answered; spins++) {
        ucx.ucp_worker_progress(e->worker);
        if (spins % 1024)
            continue;
        /* (an answer that comes after we stop names an old request: dropped) */
        uint64_t now = fabric_ucx_now_ns();
        if (now - start > FABRIC_FINISH_NS)
            return -ETIMEDOUT;
        if (fabric_peer_wait_over(p, &w, now))
            return id == FLUSH_AM_ID ? 0 : -EPIPE;
    }
    return e->am.gone ? -ENOENT : e->am.bad ? -EIO : 0;
}

int am_get(struct fabric_peer *p, uint64_t offset, void *dst, size_t len)
{
    struct fabric_engine *e = p->e;
    struct get_header h = { .region = p->region, .offset = offset, .len = len, .seq = ++e->am.seq };
    e->am.answered = false;
    e->am.get_dst = dst;
    e->am.get_len = len;
    int r = ask(p, GET_AM_ID, &h, sizeof h);
    e->am.get_dst = NULL;
    e->am.seq++;   /* nothing may write into dst after this */
    return r;
}

int am_flush(struct fabric_peer *p)
{
    struct fabric_engine *e = p->e;
    struct answer_header h = { .seq = ++e->am.seq };
    e->am.answered = false;
    e->am.get_len = 0;
    int r = ask(p, FLUSH_AM_ID, &h, sizeof h);
    e->am.seq++;
    return r;
}
