/*
 * test_hello.c: registry/hello.c writes the server's hello and recognises
 * one at the start of a stream, for this socket only.
 *
 * A hello built with an engine address reads back whole (tag, cookie,
 * nonce, address, length), also with the program's data after it; every
 * strict prefix of it is "partial"; a hello for another socket (one bit of
 * the cookie or the tag), another magic, version or flags, a length out of
 * bounds or disagreeing with the address's, is "not" as soon as the byte
 * that differs is there; the greetings of common protocols are "not" at
 * their first byte; random bytes are never a hello (and "partial" only
 * while they are the magic's), random mutations of a hello are taken only
 * for what they still say, and nothing is read beyond the length
 * given (run under ASan by make test-san).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "registry/hello.h"

__attribute__((weak)) void channel_unlink(const char *name)
{
    (void)name;
}

#define TAG 0x1e442aefu
#define COOKIE 0x0123456789abcdefull

static const uint8_t NONCE[HELLO_NONCE] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 };

/* What hello_match says of exactly len bytes of p (copied to the heap so
 * that ASan sees a read past them). */
static enum hello_seen seen(const uint8_t *p, size_t len, uint32_t tag, uint64_t cookie, struct hello *h)
{
    uint8_t *copy = malloc(len ? len : 1);
    CHECK(copy != NULL, ==, 1);
    memcpy(copy, p, len);
    struct hello tmp;
    enum hello_seen r = hello_match(copy, len, tag, cookie, h ? h : &tmp);
    if (r == HELLO_FOUND && h) {   /* the address must point into the buffer given */
        CHECK(h->addr >= copy && h->addr + h->addr_len <= copy + len, ==, 1);
        h->addr = p + (h->addr - copy);
    }
    free(copy);
    return r;
}

static size_t build(uint8_t *buf, size_t addr_len)
{
    uint8_t addr[HELLO_ADDR_MAX];
    for (size_t i = 0; i < sizeof addr; i++)
        addr[i] = (uint8_t)(i * 7 + 3);
    size_t n = hello_build(buf, HELLO_MAX, TAG, COOKIE, NONCE, addr, addr_len);
    CHECK(n, ==, HELLO_HEAD + addr_len);
    return n;
}

static void test_round_trip(void)
{
    static const size_t lens[] = { 0, 1, 57, 300, HELLO_ADDR_MAX };
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        uint8_t buf[HELLO_MAX + 64];
        size_t n = build(buf, lens[k]);
        memcpy(buf + n, "GET / HTTP/1.1\r\n", 16);   /* the program's data after it */
        for (size_t with = n; with <= n + 16; with += 16) {
            struct hello h;
            CHECK(seen(buf, with, TAG, COOKIE, &h), ==, HELLO_FOUND);
            CHECK(h.len, ==, n);
            CHECK(h.boot_tag, ==, TAG);
            CHECK(h.cookie == COOKIE, ==, 1);
            CHECK(memcmp(h.nonce, NONCE, HELLO_NONCE), ==, 0);
            CHECK(h.addr_len, ==, lens[k]);
            CHECK(h.addr == buf + HELLO_HEAD, ==, 1);
            for (size_t i = 0; i < h.addr_len; i++)
                CHECK(h.addr[i], ==, (uint8_t)(i * 7 + 3));
        }
        for (size_t cut = 0; cut < n; cut++)
            CHECK(seen(buf, cut, TAG, COOKIE, NULL), ==, HELLO_PARTIAL);
    }
    uint8_t small[HELLO_HEAD];
    CHECK(hello_build(small, sizeof small, TAG, COOKIE, NONCE, "x", 1), ==, 0);   /* no room */
    uint8_t big[HELLO_MAX + 8];
    static uint8_t addr[HELLO_ADDR_MAX + 1];
    CHECK(hello_build(big, sizeof big, TAG, COOKIE, NONCE, addr, sizeof addr), ==, 0);   /* too long an address */
    printf("ok: a hello reads back whole; every prefix of it is partial\n");
}

/* Byte i of a valid hello changed: "not" as soon as that byte is there,
 * for every byte of the part that names the socket, the version, the
 * flags and the address's length. */
static void test_each_byte_counts(void)
{
    uint8_t good[HELLO_MAX];
    size_t n = build(good, 100);
    for (size_t i = 0; i < HELLO_HEAD; i++) {
        if (i >= HELLO_MATCHED && i < HELLO_MATCHED + HELLO_NONCE)
            continue;   /* the nonce is the server's choice: any value */
        for (int bit = 0; bit < 8; bit++) {
            uint8_t bad[HELLO_MAX];
            memcpy(bad, good, n);
            bad[i] ^= (uint8_t)(1u << bit);
            enum hello_seen at = seen(bad, i + 1, TAG, COOKIE, NULL);
            enum hello_seen whole = seen(bad, n, TAG, COOKIE, NULL);
            if (i == 10 || i == 11) {
                /* the length: a different one is a hello of another length,
                 * which the address's length must then contradict */
                CHECK(whole, !=, HELLO_FOUND);
            } else {
                CHECK(at, ==, HELLO_NOT);
                CHECK(whole, ==, HELLO_NOT);
            }
        }
    }
    /* another socket's hello: the cookie or the tag of the client differ */
    CHECK(seen(good, n, TAG, COOKIE + 1, NULL), ==, HELLO_NOT);
    CHECK(seen(good, n, TAG ^ 1, COOKIE, NULL), ==, HELLO_NOT);
    CHECK(seen(good, HELLO_MATCHED, TAG, COOKIE ^ (1ull << 63), NULL), ==, HELLO_NOT);
    /* lengths out of bounds, before the address's length is there */
    uint8_t bad[HELLO_MAX];
    memcpy(bad, good, n);
    bad[10] = 0, bad[11] = HELLO_HEAD - 1;
    CHECK(seen(bad, 12, TAG, COOKIE, NULL), ==, HELLO_NOT);
    bad[10] = (uint8_t)((HELLO_MAX + 1) >> 8), bad[11] = (uint8_t)(HELLO_MAX + 1);
    CHECK(seen(bad, 12, TAG, COOKIE, NULL), ==, HELLO_NOT);
    bad[10] = 0xff;
    CHECK(seen(bad, 11, TAG, COOKIE, NULL), ==, HELLO_NOT);
    printf("ok: every byte that names the socket, the version and the lengths counts\n");
}

static void test_other_protocols(void)
{
    static const char *const greetings[] = {
        "HTTP/1.1 200 OK\r\n", "SSH-2.0-OpenSSH_9.2\r\n", "220 mail ESMTP\r\n", "+OK\r\n", "* OK IMAP\r\n",
        "\x16\x03\x01\x02\x00", "\x4a\x00\x00\x00\x0a" "8.0.36", "R\x00\x00\x00\x08",
    };
    for (size_t k = 0; k < sizeof greetings / sizeof greetings[0]; k++)
        for (size_t len = 1; len <= strlen(greetings[k]); len++)
            CHECK(seen((const uint8_t *)greetings[k], len, TAG, COOKIE, NULL), ==, HELLO_NOT);
    CHECK(seen(hello_magic, 1, TAG, COOKIE, NULL), ==, HELLO_PARTIAL);   /* only a byte of 0xFE is held */
    printf("ok: greetings of other protocols are data at their first byte\n");
}

static void test_fuzz(void)
{
    srand(19);
    uint8_t good[HELLO_MAX];
    size_t n = build(good, 200);
    for (int round = 0; round < 200000; round++) {
        uint8_t buf[HELLO_MAX];
        size_t len = (size_t)rand() % (HELLO_MAX + 1);
        struct hello h;
        if (round & 1) {   /* random bytes */
            for (size_t i = 0; i < len; i++)
                buf[i] = (uint8_t)rand();
            enum hello_seen r = seen(buf, len, TAG, COOKIE, &h);
            CHECK(r, !=, HELLO_FOUND);
            if (r == HELLO_PARTIAL)   /* only while the bytes are the magic's */
                CHECK(memcmp(buf, hello_magic, len < 8 ? len : 8), ==, 0);
            continue;
        }
        memcpy(buf, good, n);   /* a hello with a few random bytes changed */
        len = (size_t)rand() % (n + 1);
        for (int k = 1 + rand() % 3; k > 0; k--)
            buf[(size_t)rand() % n] = (uint8_t)rand();
        if (seen(buf, len, TAG, COOKIE, &h) == HELLO_FOUND) {
            CHECK(memcmp(buf, good, HELLO_MATCHED - 14), ==, 0);   /* magic, version, flags */
            CHECK(memcmp(buf + 12, good + 12, 12), ==, 0);         /* tag and cookie */
            CHECK(h.len <= len && h.len == HELLO_HEAD + h.addr_len, ==, 1);
        }
    }
    printf("ok: random bytes never, mutated hellos only as what they still say\n");
}

int main(void)
{
    test_round_trip();
    test_each_byte_counts();
    test_other_protocols();
    test_fuzz();
    PASS();
}
