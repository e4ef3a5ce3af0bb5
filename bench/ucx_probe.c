/*
 * ucx_probe: what UCX gives two processes of one host, the figures behind the
 * fabric transport's design (docs/architecture.md, "Between namespaces and
 * hosts").  A parent and a forked child each make a UCX context and worker
 * (timed), trade worker addresses and the keys of a 64 KiB region over a
 * socketpair, make an endpoint (timed, with a first flush), then ping-pong
 * 64 bytes two ways, each timed as the mean over ROUND_TRIPS after 1000
 * unmeasured, one-way = half a round trip:
 *   put     one-sided: the bytes, a fence, an index word; the other side
 *           polls its own memory (driving its worker) for the index
 *   stream  UCX's stream API, a send and a receive of all 64 bytes
 * and prints the lanes UCX chose.  Links UCX (libucx-dev); libshunt.so never
 * does (it loads UCX with dlopen).
 *
 *   ucx_probe [ROUND_TRIPS]          lanes as UCX_TLS says (default: all)
 *   UCX_TLS=tcp ucx_probe            UCX's TCP lanes
 *   PROBE_NS_PARENT=a PROBE_NS_CHILD=b ucx_probe    each side in a network
 *       namespace of /run/netns first (root; `ip netns add` makes them)
 *
 * Prints
 *   start ucp_init_worker_ms=I endpoint_ms=E
 *   one_way put_ns=P stream_ns=S
 * then UCX's description of the endpoint (its lanes).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "ucx_start.h"

#define MSG 64
#define REGION 65536
#define INDEX_AT 4096
#define WARMUP 1000

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void die(const char *what, ucs_status_t s)
{
    fprintf(stderr, "ucx_probe: %s: %s\n", what, ucs_status_string(s));
    exit(1);
}

#define MUST(call)                      \
    do {                                \
        ucs_status_t s_ = (call);       \
        if (s_ != UCS_OK)               \
            die(#call, s_);             \
    } while (0)

static void send_blob(int fd, const void *p, uint32_t n)
{
    if (write(fd, &n, 4) != 4 || write(fd, p, n) != (ssize_t)n)
        exit(2);
}

static void *recv_blob(int fd)
{
    uint32_t n;
    if (read(fd, &n, 4) != 4)
        exit(2);
    char *p = malloc(n ? n : 1);
    for (uint32_t got = 0; got < n;) {
        ssize_t r = read(fd, p + got, n - got);
        if (r <= 0)
            exit(2);
        got += (uint32_t)r;
    }
    return p;
}

static void finish(ucp_worker_h w, ucs_status_ptr_t req)
{
    if (req == NULL)
        return;
    if (UCS_PTR_IS_ERR(req))
        die("request", UCS_PTR_STATUS(req));
    while (ucp_request_check_status(req) == UCS_INPROGRESS)
        ucp_worker_progress(w);
    ucp_request_free(req);
}

static void sync_with(int fd)
{
    char c = 's';
    if (write(fd, &c, 1) != 1 || read(fd, &c, 1) != 1)
        exit(2);
}

static void enter_netns(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/run/netns/%s", name);
    int fd = open(path, O_RDONLY);
    if (fd < 0 || setns(fd, CLONE_NEWNET) < 0) {
        perror(path);
        exit(4);
    }
    close(fd);
}

static void receive_all(ucp_worker_h w, ucp_ep_h ep, char *buf)
{
    size_t len;
    ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_STREAM_RECV_FLAG_WAITALL };
    finish(w, ucp_stream_recv_nbx(ep, buf, MSG, &len, &rp));
}

int main(int argc, char **argv)
{
    int round_trips = argc > 1 ? atoi(argv[1]) : 20000;
    if (round_trips <= WARMUP)
        round_trips = WARMUP + 1;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return 2;
    pid_t pid = fork();
    bool child = pid == 0;
    int fd = sv[child ? 1 : 0];
    const char *ns = getenv(child ? "PROBE_NS_CHILD" : "PROBE_NS_PARENT");
    if (ns)
        enter_netns(ns);

    uint64_t t0 = now_ns();
    ucp_context_h ctx;
    ucp_worker_h w = ucx_start(UCP_FEATURE_RMA | UCP_FEATURE_STREAM | UCP_FEATURE_WAKEUP, &ctx);
    uint64_t t1 = now_ns();

    ucp_address_t *addr;
    size_t alen;
    MUST(ucp_worker_get_address(w, &addr, &alen));
    send_blob(fd, addr, (uint32_t)alen);
    void *peer_addr = recv_blob(fd);
    uint64_t t2 = now_ns();
    ucp_ep_params_t ep_params = { .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = peer_addr };
    ucp_ep_h ep;
    MUST(ucp_ep_create(w, &ep_params, &ep));
    ucp_mem_map_params_t mp = { .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                                              UCP_MEM_MAP_PARAM_FIELD_FLAGS,
                                .address = NULL,
                                .length = REGION,
                                .flags = UCP_MEM_MAP_ALLOCATE };
    ucp_mem_h mem;
    MUST(ucp_mem_map(ctx, &mp, &mem));
    ucp_mem_attr_t ma = { .field_mask = UCP_MEM_ATTR_FIELD_ADDRESS };
    MUST(ucp_mem_query(mem, &ma));
    char *region = ma.address;
    memset(region, 0, REGION);
    void *rkey_buf;
    size_t rkey_len;
    MUST(ucp_rkey_pack(ctx, mem, &rkey_buf, &rkey_len));
    uint64_t base = (uint64_t)(uintptr_t)region;
    send_blob(fd, &base, 8);
    send_blob(fd, rkey_buf, (uint32_t)rkey_len);
    uint64_t *peer_base = recv_blob(fd);
    void *peer_rkey_buf = recv_blob(fd);
    ucp_rkey_h rkey;
    MUST(ucp_ep_rkey_unpack(ep, peer_rkey_buf, &rkey));
    ucp_request_param_t none = { 0 };
    finish(w, ucp_ep_flush_nbx(ep, &none));
    uint64_t t3 = now_ns();
    sync_with(fd);

    char data[MSG], in[MSG];
    memset(data, 'a', sizeof data);
    volatile uint64_t *index = (volatile uint64_t *)(region + INDEX_AT);
    uint64_t start = 0;
    for (int i = 1; i <= round_trips; i++) {
        if (i == WARMUP)
            start = now_ns();
        uint64_t seq = (uint64_t)i;
        if (child)
            while (*index != seq)
                ucp_worker_progress(w);
        finish(w, ucp_put_nbx(ep, data, MSG, *peer_base, rkey, &none));
        ucp_worker_fence(w);
        finish(w, ucp_put_nbx(ep, &seq, 8, *peer_base + INDEX_AT, rkey, &none));
        if (!child)
            while (*index != seq)
                ucp_worker_progress(w);
    }
    uint64_t put_ns = now_ns() - start;
    sync_with(fd);
    for (int i = 1; i <= round_trips; i++) {
        if (i == WARMUP)
            start = now_ns();
        if (child)
            receive_all(w, ep, in);
        finish(w, ucp_stream_send_nbx(ep, data, MSG, &none));
        if (!child)
            receive_all(w, ep, in);
    }
    uint64_t stream_ns = now_ns() - start;
    sync_with(fd);
    if (!child) {
        int measured = round_trips - WARMUP + 1;
        printf("start ucp_init_worker_ms=%.2f endpoint_ms=%.2f\n", (double)(t1 - t0) / 1e6,
               (double)(t3 - t2) / 1e6);
        printf("one_way put_ns=%.0f stream_ns=%.0f\n", (double)put_ns / 2.0 / measured,
               (double)stream_ns / 2.0 / measured);
        ucp_ep_print_info(ep, stdout);
        fflush(stdout);
    }
    sync_with(fd);
    if (!child)
        waitpid(pid, NULL, 0);
    return 0;
}
