/*
 * hello.c: the server's hello (hello.h): writing one, and recognising one
 * at the start of a stream.  The bytes come from the network: every field
 * is checked against what a hello for this very socket must hold, each
 * length is bounded before it is used, and nothing is read beyond len.
 */
#include <string.h>

#include "registry/hello.h"
#include "transport/fabric_ring.h"

_Static_assert(HELLO_ADDR_MAX >= FABRIC_RING_BLOB_MAX, "a hello carries a fabric ring's blob");

/* 0xFE is no ASCII, no UTF-8 and no TLS record type: a greeting of another
 * protocol that starts with it and then "SHNT" is not expected. */
const uint8_t hello_magic[8] = { 0xFE, 'S', 'H', 'N', 'T', 'H', 'L', 'O' };

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static size_t get16(const uint8_t *p)
{
    return (size_t)p[0] << 8 | p[1];
}

/* The first HELLO_MATCHED bytes of a hello for this socket, but for the
 * length (bytes 10 and 11), which is checked by range. */
static void expected(uint8_t out[HELLO_MATCHED], uint32_t boot_tag, uint64_t cookie)
{
    memcpy(out, hello_magic, sizeof hello_magic);
    out[8] = HELLO_VERSION;
    out[9] = 0;   /* no flags in version 1 */
    put16(out + 10, 0);
    put32(out + 12, boot_tag);
    put64(out + 16, cookie);
}

size_t hello_build(uint8_t *out, size_t cap, uint32_t boot_tag, uint64_t cookie, const uint8_t nonce[HELLO_NONCE],
                   const void *addr, size_t addr_len)
{
    if (addr_len > HELLO_ADDR_MAX || cap < HELLO_HEAD + addr_len)
        return 0;
    size_t len = HELLO_HEAD + addr_len;
    expected(out, boot_tag, cookie);
    put16(out + 10, (uint16_t)len);
    memcpy(out + HELLO_MATCHED, nonce, HELLO_NONCE);
    put16(out + HELLO_MATCHED + HELLO_NONCE, (uint16_t)addr_len);
    if (addr_len)
        memcpy(out + HELLO_HEAD, addr, addr_len);
    return len;
}

enum hello_seen hello_match(const uint8_t *buf, size_t len, uint32_t boot_tag, uint64_t cookie, struct hello *out)
{
    uint8_t want[HELLO_MATCHED];
    expected(want, boot_tag, cookie);
    size_t n = len < HELLO_MATCHED ? len : HELLO_MATCHED;
    for (size_t i = 0; i < n; i++)
        if (i != 10 && i != 11 && buf[i] != want[i])
            return HELLO_NOT;
    /* the length's high byte alone already bounds it */
    if (len > 10 && (size_t)buf[10] << 8 > HELLO_MAX)
        return HELLO_NOT;
    if (len < 12)
        return HELLO_PARTIAL;
    size_t total = get16(buf + 10);
    if (total < HELLO_HEAD || total > HELLO_MAX)
        return HELLO_NOT;
    /* the address's length must be what the whole's leaves, byte by byte */
    size_t alen = total - HELLO_HEAD, at = HELLO_MATCHED + HELLO_NONCE;
    if ((len > at && buf[at] != (uint8_t)(alen >> 8)) || (len > at + 1 && buf[at + 1] != (uint8_t)alen))
        return HELLO_NOT;
    if (len < total)
        return HELLO_PARTIAL;
    out->boot_tag = boot_tag;
    out->cookie = cookie;
    memcpy(out->nonce, buf + HELLO_MATCHED, HELLO_NONCE);
    out->addr = buf + HELLO_HEAD;
    out->addr_len = total - HELLO_HEAD;
    out->len = total;
    return HELLO_FOUND;
}
