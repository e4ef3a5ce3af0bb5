/*
 * ucx_echo: a program that uses UCX itself (as an MPI library does), for
 * the test that runs it under shunt (tests/integration/test_ucx_programs.py).
 * Two processes trade their worker addresses over a TCP connection of
 * their own, then the client sends TOTAL bytes of a known pattern over a
 * UCX stream endpoint in pieces of varied sizes, the server echoes every
 * piece back, and the client checks every byte both ways; then each side
 * tag-sends the other one message of 64 KiB, checked too.  With
 * UCX_TLS=tcp and UCX_NET_DEVICES=lo, UCX moves those bytes over TCP
 * connections of its own on loopback, which shunt takes as the program's.
 *
 *   ucx_echo server PORT            prints "port P" once listening (0: any)
 *   ucx_echo client PORT [TOTAL]    prints "ok BYTES" when every byte matched
 *
 * Links UCX (libucx-dev) as such a program would.  Every wait is bounded:
 * a socket timeout and a deadline on UCX's progress (exit 3).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include "ucx_start.h"

#define DEADLINE_S 60
#define TAG_BYTES 65536

static time_t deadline;

static void die(const char *what, const char *why)
{
    fprintf(stderr, "ucx_echo: %s: %s\n", what, why);
    exit(1);
}

#define MUST(call)                                      \
    do {                                                \
        ucs_status_t s_ = (call);                       \
        if (s_ != UCS_OK)                               \
            die(#call, ucs_status_string(s_));          \
    } while (0)

static void full(int fd, void *p, size_t n, bool out)
{
    for (size_t done = 0; done < n;) {
        ssize_t r = out ? write(fd, (char *)p + done, n - done) : read(fd, (char *)p + done, n - done);
        if (r <= 0)
            die(out ? "write" : "read", r == 0 ? "EOF" : "error");
        done += (size_t)r;
    }
}

static void send_blob(int fd, const void *p, uint32_t n)
{
    full(fd, &n, 4, true);
    full(fd, (void *)p, n, true);
}

static void *recv_blob(int fd)
{
    uint32_t n;
    full(fd, &n, 4, false);
    if (n > (1u << 20))
        die("blob", "too long");
    void *p = malloc(n ? n : 1);
    full(fd, p, n, false);
    return p;
}

static void finish(ucp_worker_h w, ucs_status_ptr_t req)
{
    if (req == NULL)
        return;
    if (UCS_PTR_IS_ERR(req))
        die("request", ucs_status_string(UCS_PTR_STATUS(req)));
    while (ucp_request_check_status(req) == UCS_INPROGRESS) {
        ucp_worker_progress(w);
        if (time(NULL) > deadline) {
            fprintf(stderr, "ucx_echo: HANG\n");
            exit(3);
        }
    }
    ucs_status_t s = ucp_request_check_status(req);
    ucp_request_free(req);
    if (s != UCS_OK)
        die("completion", ucs_status_string(s));
}

static void stream_recv(ucp_worker_h w, ucp_ep_h ep, char *buf, size_t n)
{
    size_t len;
    ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS, .flags = UCP_STREAM_RECV_FLAG_WAITALL };
    finish(w, ucp_stream_recv_nbx(ep, buf, n, &len, &rp));
}

static unsigned char pattern(uint64_t i)
{
    return (unsigned char)((i * 2654435761u) >> 13);
}

/* The piece sizes: 1 byte to 256 KiB, in an order that repeats. */
static size_t piece(unsigned k)
{
    static const size_t sizes[] = { 1, 7, 100, 4096, 65536, 3, 262144, 1500, 8191, 131072 };
    return sizes[k % (sizeof sizes / sizeof sizes[0])];
}

static int connected(const char *role, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct timeval tv = { DEADLINE_S, 0 };
    if (strcmp(role, "server") == 0) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        socklen_t len = sizeof a;
        if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 1) < 0 ||
            getsockname(fd, (struct sockaddr *)&a, &len) < 0)
            die("listen", "failed");
        printf("port %d\n", ntohs(a.sin_port));
        fflush(stdout);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        int c = accept(fd, NULL, NULL);
        if (c < 0)
            die("accept", "failed");
        close(fd);
        fd = c;
    } else if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        die("connect", "failed");
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    return fd;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "server") && strcmp(argv[1], "client")))
        die("usage", "ucx_echo server|client PORT [TOTAL]");
    bool server = strcmp(argv[1], "server") == 0;
    uint64_t total = argc > 3 ? strtoull(argv[3], NULL, 0) : (8u << 20);
    deadline = time(NULL) + DEADLINE_S;
    int fd = connected(argv[1], atoi(argv[2]));

    ucp_context_h ctx;
    ucp_worker_h w = ucx_start(UCP_FEATURE_STREAM | UCP_FEATURE_TAG, &ctx);
    ucp_address_t *addr;
    size_t alen;
    MUST(ucp_worker_get_address(w, &addr, &alen));
    send_blob(fd, addr, (uint32_t)alen);
    void *peer = recv_blob(fd);
    ucp_ep_params_t ep_params = { .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = peer };
    ucp_ep_h ep;
    MUST(ucp_ep_create(w, &ep_params, &ep));
    ucp_request_param_t none = { 0 };

    char *buf = malloc(262144), *back = malloc(262144);
    uint64_t pos = 0;
    for (unsigned k = 0; pos < total; k++) {
        size_t n = piece(k);
        if (n > total - pos)
            n = (size_t)(total - pos);
        if (server) {
            stream_recv(w, ep, buf, n);
            finish(w, ucp_stream_send_nbx(ep, buf, n, &none));
        } else {
            for (size_t i = 0; i < n; i++)
                buf[i] = (char)pattern(pos + i);
            finish(w, ucp_stream_send_nbx(ep, buf, n, &none));
            stream_recv(w, ep, back, n);
            if (memcmp(buf, back, n) != 0)
                die("echo", "bytes differ");
        }
        pos += n;
    }
    /* one tagged message each way */
    char *tag_out = malloc(TAG_BYTES), *tag_in = malloc(TAG_BYTES);
    for (size_t i = 0; i < TAG_BYTES; i++)
        tag_out[i] = (char)pattern(i + (server ? 7 : 3));
    ucp_request_param_t rp = { 0 };
    ucs_status_ptr_t r = ucp_tag_recv_nbx(w, tag_in, TAG_BYTES, server ? 1 : 2, ~0ull, &rp);
    finish(w, ucp_tag_send_nbx(ep, tag_out, TAG_BYTES, server ? 2 : 1, &none));
    finish(w, r);
    for (size_t i = 0; i < TAG_BYTES; i++)
        if ((unsigned char)tag_in[i] != pattern(i + (server ? 3 : 7)))
            die("tag", "bytes differ");
    /* both done before either endpoint goes */
    char c = 'd';
    full(fd, &c, 1, true);
    full(fd, &c, 1, false);
    finish(w, ucp_ep_close_nbx(ep, &none));
    if (!server)
        printf("ok %llu\n", (unsigned long long)pos);
    ucp_worker_release_address(w, addr);
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    close(fd);
    return 0;
}
