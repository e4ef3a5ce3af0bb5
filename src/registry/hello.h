/*
 * hello.h: the server's hello, the first bytes a server under shunt sends
 * on a connection from another host whose client process proved on its
 * SYN that it runs shunt (docs/fabric-discovery.md, "Across hosts: proving
 * both processes").  Only such a client can receive it; it removes a hello
 * that names its own socket and takes anything else for the program's data.
 * Format and reader; the fabric stream sends and removes one
 * (core/conn/fabric_stream.c), which no connection runs yet.
 *
 * Every field in network byte order:
 *
 *   0               8       9       10      12      16              24
 *   +---------------+-------+-------+-------+-------+---------------+
 *   | magic         | vers. | flags | length| tag   | client cookie |
 *   +---------------+-------+-------+-------+-------+---------------+
 *   24                              40      42
 *   +-------------------------------+-------+------------------------+
 *   | nonce (128 bits)              | alen  | engine address (alen)  |
 *   +-------------------------------+-------+------------------------+
 *
 * length is the whole hello's; tag and cookie are those the server read
 * off the client's SYN (registry/synopt.h); the nonce binds the engine's
 * side channel to this connection (cookies are a counter and can be
 * guessed); the address is what the client needs to reach the server's
 * engine: its fabric ring's blob (worker address, region key, sizes).  The first 24
 * bytes are what the client matches against its own socket.
 */
#ifndef SHUNT_HELLO_H
#define SHUNT_HELLO_H

#include <stddef.h>
#include <stdint.h>

#define HELLO_VERSION 1
#define HELLO_MATCHED 24          /* magic .. cookie: what names the client's socket */
#define HELLO_HEAD 42             /* everything before the address */
#define HELLO_ADDR_MAX 4096       /* the engine's blob (transport/fabric_ring.h: FABRIC_RING_BLOB_MAX) */
#define HELLO_MAX (HELLO_HEAD + HELLO_ADDR_MAX)
#define HELLO_NONCE 16

extern const uint8_t hello_magic[8];

struct hello {
    uint32_t boot_tag;
    uint64_t cookie;
    uint8_t nonce[HELLO_NONCE];
    const uint8_t *addr;          /* inside the buffer given to hello_match */
    size_t addr_len;
    size_t len;                   /* the whole hello: the bytes to remove */
};

/* Writes a hello into out (cap bytes).  Its length, or 0 if addr_len is
 * beyond HELLO_ADDR_MAX or cap is too small. */
size_t hello_build(uint8_t *out, size_t cap, uint32_t boot_tag, uint64_t cookie, const uint8_t nonce[HELLO_NONCE],
                   const void *addr, size_t addr_len);

/* What the first len bytes of a stream are for the client whose socket is
 * boot_tag and cookie. */
enum hello_seen {
    HELLO_NOT,        /* not a hello for this socket: the program's data, all of it */
    HELLO_PARTIAL,    /* each byte so far is what a hello for this socket would have: more are needed */
    HELLO_FOUND,      /* a whole hello for this socket, checked: *out says what it holds */
};
enum hello_seen hello_match(const uint8_t *buf, size_t len, uint32_t boot_tag, uint64_t cookie, struct hello *out);

#endif
