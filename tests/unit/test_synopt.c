/*
 * test_synopt.c: registry/synopt.c reads shunt's SYN option off crafted SYNs.
 *
 * Valid IPv4 and IPv6 SYNs (Linux's own options around ours, NOP padding,
 * an IPv6 hop-by-hop header) give the tag, the 56-bit cookie and the flags
 * of the top byte; everything else is
 * "none" and reads nothing out of bounds: no option, another ExID, kind 254,
 * an option after EOL, a truncated option, option lengths of 0, 1, 12 and
 * past the header, bad data offsets, bad IPv4 header lengths, a protocol
 * that is not TCP, a SYN-ACK, and every truncation of a valid SYN (run under
 * ASan by make test-san).  A real loopback connection through a listener
 * with TCP_SAVE_SYN reads as "none" (loopback is never marked), and the boot
 * tag is stable.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"
#include "registry/synopt.h"

__attribute__((weak)) void channel_unlink(const char *name)
{
    (void)name;
}

#define TAG 0x1e442aefu
/* top byte: the flags (01: the client process runs shunt); the rest the cookie */
#define COOKIE 0x0123456789abcdefull

/* Linux's usual SYN options: MSS, SACK permitted, timestamps, NOP, window scale. */
static const uint8_t LINUX_OPTS[] = { 2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7 };

/* shunt's option with the given kind, length byte and ExID (16 bytes written). */
static size_t ours(uint8_t *p, uint8_t kind, uint8_t len, uint16_t exid)
{
    uint8_t o[16] = { kind, len, exid >> 8, exid & 0xff, TAG >> 24, TAG >> 16 & 0xff, TAG >> 8 & 0xff, TAG & 0xff };
    for (int i = 0; i < 8; i++)
        o[8 + i] = (uint8_t)(COOKIE >> (56 - 8 * i));
    memcpy(p, o, sizeof o);
    return sizeof o;
}

/* A SYN: the IP header of family (4 or 6, with hbh an IPv6 hop-by-hop
 * header in front of TCP), then a TCP header with opts (padded with EOL to
 * a multiple of 4) and the given flags.  Its length. */
static size_t syn(uint8_t *buf, int family, int hbh, const uint8_t *opts, size_t optlen, uint8_t flags)
{
    memset(buf, 0, 256);
    size_t off;
    if (family == 4) {
        buf[0] = 0x45;
        buf[9] = IPPROTO_TCP;
        off = 20;
    } else {
        buf[0] = 0x60;
        buf[6] = hbh ? 0 : IPPROTO_TCP;
        off = 40;
        if (hbh) {
            buf[off] = IPPROTO_TCP; /* next header */
            buf[off + 1] = 0;       /* 8 bytes */
            buf[off + 2] = 1;       /* PadN */
            buf[off + 3] = 4;
            off += 8;
        }
    }
    size_t padded = (optlen + 3) & ~(size_t)3;
    uint8_t *tcp = buf + off;
    tcp[12] = (uint8_t)((20 + padded) / 4) << 4;
    tcp[13] = flags;
    if (optlen)
        memcpy(tcp + 20, opts, optlen);
    return off + 20 + padded;
}

static int parse(const uint8_t *b, size_t len, struct synopt *o)
{
    memset(o, 0, sizeof *o);
    return synopt_parse(b, len, o);
}

static void expect_found(const uint8_t *b, size_t len)
{
    struct synopt o;
    CHECK(parse(b, len, &o), ==, 1);
    CHECK(o.boot_tag, ==, TAG);
    CHECK(o.cookie, ==, COOKIE & SYNOPT_COOKIE_MASK);
    CHECK(o.flags, ==, SYNOPT_FLAG_PROCESS);
}

static void expect_none(const uint8_t *b, size_t len)
{
    struct synopt o;
    CHECK(parse(b, len, &o), ==, 0);
}

static void test_valid(void)
{
    uint8_t opts[40], b[256];
    size_t n = 0;
    memcpy(opts, LINUX_OPTS, sizeof LINUX_OPTS);
    n = sizeof LINUX_OPTS;
    n += ours(opts + n, SYNOPT_KIND, SYNOPT_LEN, SYNOPT_EXID); /* 36 bytes: as Linux sends it */
    expect_found(b, syn(b, 4, 0, opts, n, 0x02));
    expect_found(b, syn(b, 6, 0, opts, n, 0x02));
    expect_found(b, syn(b, 6, 1, opts, n, 0x02));
    expect_found(b, syn(b, 4, 0, opts, n, 0x02 | 0x40 | 0x80)); /* SYN with ECE and CWR */

    /* ours first, then NOP padding and Linux's */
    n = ours(opts, SYNOPT_KIND, SYNOPT_LEN, SYNOPT_EXID);
    opts[n++] = 1;
    opts[n++] = 1;
    memcpy(opts + n, LINUX_OPTS, 20);
    n += 20;
    expect_found(b, syn(b, 4, 0, opts, n, 0x02));

    /* another experiment's option first (kind 253, TFO's ExID) */
    n = ours(opts, SYNOPT_KIND, SYNOPT_LEN, 0xf989);
    n += ours(opts + n, SYNOPT_KIND, SYNOPT_LEN, SYNOPT_EXID);
    expect_found(b, syn(b, 6, 0, opts, n, 0x02));
}

static void test_none(void)
{
    uint8_t opts[40], b[256];
    size_t n;

    expect_none(b, syn(b, 4, 0, LINUX_OPTS, sizeof LINUX_OPTS, 0x02)); /* absent */
    expect_none(b, syn(b, 6, 0, NULL, 0, 0x02));                        /* no options at all */
    expect_none(NULL, 0);
    expect_none(b, 0);

    n = ours(opts, SYNOPT_KIND, SYNOPT_LEN, 0xf989); /* other ExID only */
    expect_none(b, syn(b, 4, 0, opts, n, 0x02));
    n = ours(opts, 254, SYNOPT_LEN, SYNOPT_EXID); /* kind 254 (SMC's), our ExID */
    expect_none(b, syn(b, 4, 0, opts, n, 0x02));

    opts[0] = 0; /* EOL: what follows is not options */
    n = 1 + ours(opts + 1, SYNOPT_KIND, SYNOPT_LEN, SYNOPT_EXID);
    expect_none(b, syn(b, 4, 0, opts, n, 0x02));

    n = ours(opts, SYNOPT_KIND, SYNOPT_LEN, SYNOPT_EXID);
    expect_none(b, syn(b, 4, 0, opts, n, 0x12)); /* SYN-ACK */
    expect_none(b, syn(b, 4, 0, opts, n, 0x10)); /* ACK */

    /* lengths that cannot be */
    static const uint8_t bad_len[] = { 0, 1, 3, 12, 15, 17, 40 };
    for (size_t i = 0; i < sizeof bad_len; i++) {
        memcpy(opts, LINUX_OPTS, 20);
        n = 20 + ours(opts + 20, SYNOPT_KIND, bad_len[i], SYNOPT_EXID);
        expect_none(b, syn(b, 4, 0, opts, n, 0x02));
        expect_none(b, syn(b, 6, 0, opts, n, 0x02));
    }
    /* an earlier option whose length is 0 or runs past the header */
    n = 0;
    opts[n++] = 2;
    opts[n++] = 0;
    n += ours(opts + n, SYNOPT_KIND, SYNOPT_LEN, SYNOPT_EXID);
    expect_none(b, syn(b, 4, 0, opts, n, 0x02));
    opts[1] = 30;
    expect_none(b, syn(b, 4, 0, opts, n, 0x02));

    /* truncated option: the header ends 6 bytes into it (data offset says so) */
    n = ours(opts, SYNOPT_KIND, SYNOPT_LEN, SYNOPT_EXID);
    size_t len = syn(b, 4, 0, opts, n, 0x02);
    b[20 + 12] = (uint8_t)((20 + 8) / 4) << 4;
    expect_none(b, len);

    /* data offset below 5 words, and past the packet */
    len = syn(b, 4, 0, opts, n, 0x02);
    b[20 + 12] = 4 << 4;
    expect_none(b, len);
    b[20 + 12] = 15 << 4;
    expect_none(b, len);

    /* IPv4 header length below 20 and past the packet; not TCP; not IP */
    len = syn(b, 4, 0, opts, n, 0x02);
    b[0] = 0x44;
    expect_none(b, len);
    b[0] = 0x4f;
    expect_none(b, 30);
    b[0] = 0x45;
    b[9] = IPPROTO_UDP;
    expect_none(b, len);
    len = syn(b, 4, 0, opts, n, 0x02);
    b[0] = 0x55;
    expect_none(b, len);

    /* IPv6: an extension header nobody sends on a SYN, one past the packet */
    len = syn(b, 6, 1, opts, n, 0x02);
    b[6] = 44; /* fragment */
    expect_none(b, len);
    b[6] = 0;
    b[40 + 1] = 200;
    expect_none(b, len);
}

/* Every prefix of a valid SYN: found only when it is whole, no read past it. */
static void test_truncations(void)
{
    uint8_t opts[40], b[256];
    memcpy(opts, LINUX_OPTS, sizeof LINUX_OPTS);
    size_t n = sizeof LINUX_OPTS + ours(opts + sizeof LINUX_OPTS, SYNOPT_KIND, SYNOPT_LEN, SYNOPT_EXID);
    for (int fam = 4; fam <= 6; fam += 2) {
        size_t len = syn(b, fam, fam == 6, opts, n, 0x02);
        for (size_t cut = 0; cut < len; cut++) {
            uint8_t *copy = malloc(cut ? cut : 1); /* exact size: ASan sees any overread */
            CHECK(copy != NULL, ==, 1);
            memcpy(copy, b, cut);
            expect_none(copy, cut);
            free(copy);
        }
        uint8_t *copy = malloc(len);
        CHECK(copy != NULL, ==, 1);
        memcpy(copy, b, len);
        expect_found(copy, len);
        free(copy);
    }
    /* random bytes behind a plausible header: never a crash */
    srand(19);
    for (int round = 0; round < 20000; round++) {
        size_t len = syn(b, round & 1 ? 6 : 4, 0, NULL, 0, 0x02);
        size_t total = len + (size_t)(rand() % 44);
        for (size_t i = len - 20 + 12; i < total; i++)
            if (i != len - 20 + 13)
                b[i] = (uint8_t)rand();
        uint8_t *copy = malloc(total);
        CHECK(copy != NULL, ==, 1);
        memcpy(copy, b, total);
        struct synopt o;
        int r = synopt_parse(copy, total, &o);
        CHECK(r == 0 || r == 1, ==, 1);
        free(copy);
    }
}

/* A loopback connection through a listener that saves SYNs: no option. */
static void test_loopback(void)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(l, >=, 0);
    CHECK(synopt_save_syns(l), ==, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof a;
    CHECK(bind(l, (struct sockaddr *)&a, sizeof a), ==, 0);
    CHECK(listen(l, 4), ==, 0);
    CHECK(getsockname(l, (struct sockaddr *)&a, &alen), ==, 0);
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK(connect(c, (struct sockaddr *)&a, sizeof a), ==, 0);
    int s = accept(l, NULL, NULL);
    CHECK(s, >=, 0);
    struct synopt o;
    CHECK(synopt_read(s, &o), ==, 0);
    CHECK(synopt_read(s, &o), ==, 0); /* the kernel gives it once: then none */
    CHECK(synopt_read(c, &o), ==, 0); /* a client socket saved nothing */
    close(s);
    close(c);
    close(l);
}

static void test_boot_tag(void)
{
    uint32_t a = 0, b = 1;
    CHECK(synopt_boot_tag(&a), ==, 0);
    CHECK(synopt_boot_tag(&b), ==, 0);
    CHECK(a, ==, b);
}

int main(void)
{
    test_valid();
    test_none();
    test_truncations();
    test_loopback();
    test_boot_tag();
    printf("test_synopt: ok\n");
    PASS();
}
