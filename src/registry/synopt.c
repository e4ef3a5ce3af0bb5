/*
 * synopt.c: reads shunt's TCP option off a saved SYN (synopt.h,
 * docs/fabric-discovery.md).
 *
 * Owns: the boot tag (FNV-1a of boot_id, folded to 32 bits: the same
 * function `shunt fabric enable` writes into its program), the walk of a
 * SYN as TCP_SAVED_SYN returns it (IPv4 header, or IPv6 header and its
 * hop-by-hop, routing and destination options headers; then TCP), and the
 * option walk.  The SYN is input from the network: every length is checked
 * against what is left before anything behind it is read, and anything
 * malformed is "none".  The socket calls are libc's own (base/real.h).
 * The library asks synopt_fabric_on before it offers or listens across
 * namespaces, and reads the SYN of each connection a listener of that kind
 * accepts (core/conn/negotiate.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/real.h"
#include "registry/synopt.h"

#ifndef TCP_SAVE_SYN
#define TCP_SAVE_SYN 27
#endif
#ifndef TCP_SAVED_SYN
#define TCP_SAVED_SYN 28
#endif

#define IP6_HDR_LEN 40
#define TCP_HDR_MIN 20
#define IPPROTO_TCP_NR 6

/* The tag once read (it is the boot's: it never changes in a process):
 * no file opened at each connect, none needed near the fd limit after. */
static _Atomic uint64_t boot_tag_cached;   /* 1 << 32 | tag, 0: not read yet */

static int read_boot_tag(uint32_t *tag);

int synopt_boot_tag(uint32_t *tag)
{
    uint64_t c = atomic_load_explicit(&boot_tag_cached, memory_order_relaxed);
    if (c) {
        *tag = (uint32_t)c;
        return 0;
    }
    int r = read_boot_tag(tag);
    if (r == 0)
        atomic_store_explicit(&boot_tag_cached, 1ull << 32 | *tag, memory_order_relaxed);
    return r;
}

static int read_boot_tag(uint32_t *tag)
{
    char id[64];
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = shunt_real.read(fd, id, sizeof id);
    int e = errno;
    shunt_real.close(fd);
    if (n < 0)
        return -e;
    while (n > 0 && (id[n - 1] == '\n' || id[n - 1] == ' '))
        n--;
    if (n == 0)
        return -ENODATA;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, 64 bits */
    for (ssize_t i = 0; i < n; i++) {
        h ^= (uint8_t)id[i];
        h *= 0x100000001b3ull;
    }
    *tag = (uint32_t)(h ^ (h >> 32));
    return 0;
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Where the TCP header starts in an IPv6 packet of len bytes, or -1:
 * the fixed header, then the extension headers a SYN may carry. */
static long ip6_tcp_offset(const uint8_t *p, size_t len)
{
    if (len < IP6_HDR_LEN)
        return -1;
    uint8_t next = p[6];
    size_t off = IP6_HDR_LEN;
    for (int hops = 0; hops < 8; hops++) {
        if (next == IPPROTO_TCP_NR)
            return (long)off;
        if (next != 0 && next != 43 && next != 60) /* hop-by-hop, routing, destination */
            return -1;
        if (len - off < 8)
            return -1;
        size_t ext = ((size_t)p[off + 1] + 1) * 8;
        if (ext > len - off)
            return -1;
        next = p[off];
        off += ext;
    }
    return -1;
}

/* Where the TCP header starts in an IPv4 packet of len bytes, or -1. */
static long ip4_tcp_offset(const uint8_t *p, size_t len)
{
    if (len < 20)
        return -1;
    size_t ihl = (size_t)(p[0] & 0x0f) * 4;
    if (ihl < 20 || ihl > len || p[9] != IPPROTO_TCP_NR)
        return -1;
    return (long)ihl;
}

/* The options of one TCP header (opt, n bytes): shunt's, or none. */
static int walk_options(const uint8_t *opt, size_t n, struct synopt *out)
{
    size_t i = 0;
    while (i < n) {
        uint8_t kind = opt[i];
        if (kind == 0) /* end of option list */
            return 0;
        if (kind == 1) { /* no-operation */
            i++;
            continue;
        }
        if (n - i < 2)
            return 0;
        size_t olen = opt[i + 1];
        if (olen < 2 || olen > n - i) /* a length that cannot be: stop trusting the rest */
            return 0;
        if (kind == SYNOPT_KIND && olen >= 4 && (opt[i + 2] << 8 | opt[i + 3]) == SYNOPT_EXID) {
            if (olen != SYNOPT_LEN)
                return 0;
            out->boot_tag = be32(opt + i + 4);
            uint64_t word = (uint64_t)be32(opt + i + 8) << 32 | be32(opt + i + 12);
            out->cookie = word & SYNOPT_COOKIE_MASK;
            out->flags = (uint8_t)(word >> 56);
            return 1;
        }
        i += olen;
    }
    return 0;
}

int synopt_parse(const uint8_t *syn, size_t len, struct synopt *out)
{
    if (!syn || len < 1)
        return 0;
    long off;
    switch (syn[0] >> 4) {
    case 4:
        off = ip4_tcp_offset(syn, len);
        break;
    case 6:
        off = ip6_tcp_offset(syn, len);
        break;
    default:
        return 0;
    }
    if (off < 0 || len - (size_t)off < TCP_HDR_MIN)
        return 0;
    const uint8_t *tcp = syn + off;
    size_t tcp_len = len - (size_t)off;
    size_t doff = (size_t)(tcp[12] >> 4) * 4;
    if (doff < TCP_HDR_MIN || doff > tcp_len)
        return 0;
    if ((tcp[13] & 0x12) != 0x02) /* a SYN, not a SYN-ACK */
        return 0;
    return walk_options(tcp + TCP_HDR_MIN, doff - TCP_HDR_MIN, out);
}

int synopt_read(int fd, struct synopt *out)
{
    uint8_t buf[512]; /* IPv6 with extension headers and a full TCP header fit */
    socklen_t len = sizeof buf;
    if (shunt_real.getsockopt(fd, IPPROTO_TCP, TCP_SAVED_SYN, buf, &len) < 0)
        return -errno;
    if (len > sizeof buf)
        return 0;
    return synopt_parse(buf, len, out);
}

int synopt_save_syns(int fd)
{
    int one = 1;
    if (shunt_real.setsockopt(fd, IPPROTO_TCP, TCP_SAVE_SYN, &one, sizeof one) < 0)
        return -errno;
    return 0;
}

/* The marker's answer, kept for a second: (CLOCK_MONOTONIC second + 1) << 1 | on. */
static _Atomic uint64_t fabric_seen;

static bool marker_says_on(void)
{
    uint32_t tag;
    if (synopt_boot_tag(&tag) < 0)
        return false;
    int fd = open(SYNOPT_MARKER, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return false;
    struct stat st;
    char buf[32];
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 0 && !(st.st_mode & 022))
        n = shunt_real.read(fd, buf, sizeof buf - 1);
    shunt_real.close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    char want[16];
    snprintf(want, sizeof want, "%08x\n", tag);
    return strcmp(buf, want) == 0;
}

bool synopt_fabric_on(void)
{
    int saved = errno;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    uint64_t now = (uint64_t)ts.tv_sec + 1;
    uint64_t w = atomic_load_explicit(&fabric_seen, memory_order_relaxed);
    if ((w >> 1) != now) {
        w = (now << 1) | (marker_says_on() ? 1u : 0u);
        atomic_store_explicit(&fabric_seen, w, memory_order_relaxed);
    }
    errno = saved;
    return (w & 1) != 0;
}
