/*
 * synopt.h: the TCP option `shunt fabric enable` puts on the SYN of an
 * active open (docs/fabric-discovery.md), and its reader.
 *
 * The option is RFC 6994's shared experimental kind 253 with shunt's 16-bit
 * ExID, 16 bytes, every field in network byte order:
 *
 *   0      1      2      3      4           8                       16
 *   +------+------+------+------+-----------+-----------------------+
 *   | 253  |  16  |  ExID 0x5348 | boot tag  | client socket cookie  |
 *   +------+------+------+------+-----------+-----------------------+
 *
 * The cookie is the client socket's SO_COOKIE (host-wide, unique across
 * network namespaces) in its low 56 bits, flags in its top byte; the boot
 * tag is 32 bits of a hash of this boot's /proc/sys/kernel/random/boot_id.
 * Neither is a secret.  Flag SYNOPT_FLAG_PROCESS: the client *process*
 * runs shunt (it marked its socket with TCP_NOTSENT_LOWAT =
 * SYNOPT_CLIENT_MARK before connect, and the program consumed the mark):
 * what a server on another host needs before it may send its hello
 * (registry/hello.h).
 *
 * The reader takes an accepted socket whose listener had TCP_SAVE_SYN set,
 * and says what the SYN's option says, or that it has none.  Nothing here
 * touches the byte stream.
 */
#ifndef SHUNT_SYNOPT_H
#define SHUNT_SYNOPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SYNOPT_KIND 253    /* RFC 6994: experimental, with an ExID */
#define SYNOPT_LEN 16      /* kind, length, ExID, tag, cookie */
#define SYNOPT_EXID 0x5348 /* "SH"; see docs/fabric-discovery.md */

#define SYNOPT_COOKIE_MASK 0x00ffffffffffffffull   /* the cookie; the top byte is flags */
#define SYNOPT_FLAG_PROCESS 0x01                   /* the client process runs shunt */
/* A TCP_NOTSENT_LOWAT no program has a reason to pick (2.1 GB of unsent
 * bytes, as good as the kernel's default of no limit while it stays). */
#define SYNOPT_CLIENT_MARK 0x7F534850

struct synopt {
    uint32_t boot_tag;
    uint64_t cookie;      /* the client socket's SO_COOKIE (the option's low 56 bits) */
    uint8_t flags;        /* SYNOPT_FLAG_* */
};

/* The tag of this boot: 32 bits of FNV-1a over boot_id.  0 with *tag set,
 * or a negative errno (no /proc, an unreadable boot_id). */
int synopt_boot_tag(uint32_t *tag);

/* Parses a saved SYN as TCP_SAVED_SYN gives it: the IPv4 or IPv6 header,
 * then the TCP header.  1 with *out set when it carries shunt's option, 0
 * when it does not (or when anything in it is malformed: a bad length is
 * "none", never a read out of bounds). */
int synopt_parse(const uint8_t *syn, size_t len, struct synopt *out);

/* The option on the SYN of fd, an accepted socket whose listener had
 * TCP_SAVE_SYN: 1 with *out set, 0 for none (no option, no saved SYN,
 * or it was read already: the kernel gives it once), or a negative errno. */
int synopt_read(int fd, struct synopt *out);

/* Asks the kernel to keep the SYN of every connection a listener fd will
 * accept (TCP_SAVE_SYN; set before listen() or after).  0 or a negative errno. */
int synopt_save_syns(int fd);

/* `shunt fabric enable` writes this boot's tag ("%08x\n") here, as root,
 * mode 0644, and disable removes it: how an unprivileged process knows
 * that the SYNs of this host carry the option. */
#define SYNOPT_MARKER_DIR "/run/shunt"
#define SYNOPT_MARKER SYNOPT_MARKER_DIR "/fabric"

/* Is the option on the SYNs of this host (the marker is root's, not
 * writable by others, and holds this boot's tag)?  Asked of the file at
 * most once a second per process; a fault reads as false. */
bool synopt_fabric_on(void);

#endif
