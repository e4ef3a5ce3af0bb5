/*
 * procstat.h: each process's table of its TCP sockets, for `shunt stat`.
 *
 * One file per process, /dev/shm/shunt-<uid>-<netns>-p<PST_VERSION>-<pid>-<tag>.fds
 * (mode 0600, made with O_EXCL; tag is 64 random bits the registry's entry
 * of the process keeps, so that no other user can make the file first),
 * indexed by fd number: entry N says what this process's fd N is (listener
 * or connection, path, fallback reason, addresses, the socket's inode, which
 * is the connection id shown by `shunt stat` and in the log).  Only the
 * owning process writes it, and only when a socket changes state (listen,
 * connect, accept, fallback, claim, dup, close, fork, exec, an fd received):
 * never on a send or a receive.  The file grows a page at a time up to the
 * highest fd recorded (at most PST_MAX_FDS), so its memory is bounded and
 * follows the process's fds.
 *
 * The registry lists the processes that have a table (struct reg_proc);
 * a process removes its own at exit and _exit.  The registry's sweep
 * removes the table of a process that died without removing it (killed),
 * with the same liveness test as its other entries: all of them when a
 * process first opens the registry, and a few each time a process adds
 * its table, so that a forking server whose children are killed does not
 * pile them up.
 *
 * Each entry is a sequence lock: odd while its owner writes it.  A reader
 * copies the file with pread (never maps it, so a file truncated under it
 * cannot fault), keeps only entries whose sequence was even and unchanged
 * from before to after the copy of its fields, and checks every field.
 */
#ifndef SHUNT_PROCSTAT_H
#define SHUNT_PROCSTAT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "registry/registry_file.h"

#define PST_MAGIC      0x7364666e75687373ULL   /* "sshunfds" */
#define PST_VERSION    3u
#define PST_ENTRY_SIZE 128u
#define PST_MAX_FDS    65536u
#define PST_REASON_MAX 24
#define PST_LANES_MAX  20

enum pst_kind { PST_KIND_NONE, PST_KIND_LISTENER, PST_KIND_CONN, PST_KIND_COUNT };

/* How the bytes of a connection move.  SINGLE_COPY is never recorded: a
 * single-copy send (DESIGN section 4, core/conn/zcopy.c) is one send of a
 * connection on SHM, counted in its channel (chan_side.zc_sends); the value
 * keeps its number and its name for readers of the table. */
enum pst_path { PST_PATH_TCP, PST_PATH_OFFERED, PST_PATH_SHM, PST_PATH_SINGLE_COPY, PST_PATH_FABRIC, PST_PATH_COUNT };

enum pst_role { PST_ROLE_UNKNOWN, PST_ROLE_CLIENT, PST_ROLE_SERVER, PST_ROLE_COUNT };

/* What a process says about one of its fds. */
struct pst_rec {
    uint8_t kind;                   /* enum pst_kind */
    uint8_t path;                   /* enum pst_path; a listener: SHM if registered as accelerated */
    uint8_t role;                   /* enum pst_role */
    uint8_t broken;                 /* the channel was scribbled on or is unreachable */
    int32_t fd;
    uint64_t sock;                  /* the socket's inode, the connection id; 0: not asked (kernel TCP), the fd says */
    uint64_t changed_ns;            /* CLOCK_REALTIME of the last change, to a tick */
    struct reg_addr local;
    struct reg_addr peer;           /* a client's destination while it connects */
    char reason[PST_REASON_MAX];    /* why on kernel TCP (a short key), or "" */
    /* on the fabric (path FABRIC): the engine's lanes, by transport ("sysv,posix",
     * "tcp"), and the proven peer: its process and its host's boot tag */
    char lanes[PST_LANES_MAX];
    uint32_t peer_pid;
    uint32_t peer_boot;
};

struct pst_entry {
    _Atomic uint32_t seq;           /* 0: never written; odd: being written */
    uint32_t used;                  /* 1 while the fd is recorded */
    struct pst_rec r;
};

struct pst_header {
    uint64_t magic;
    uint32_t version;
    uint32_t entry_size;
    uint32_t max_fds;
    int32_t pid;
    uint64_t netns;
    uint32_t uid;
    uint32_t pad0;
    struct reg_owner owner;
};

_Static_assert(sizeof(struct pst_entry) <= PST_ENTRY_SIZE, "an fd's entry fits its slot");
_Static_assert(sizeof(struct pst_header) <= PST_ENTRY_SIZE, "the header fits slot 0");

/* The table's layout, which `shunt stat` reads out of every process's file:
 * a change must bump PST_VERSION (struct reg_addr and struct reg_owner come
 * from the registry: see registry_file.h). */
#define PST_AT(s, f, off) _Static_assert(offsetof(struct s, f) == (off), #s "." #f " moved: bump PST_VERSION")
PST_AT(pst_rec, kind, 0);
PST_AT(pst_rec, path, 1);
PST_AT(pst_rec, role, 2);
PST_AT(pst_rec, broken, 3);
PST_AT(pst_rec, fd, 4);
PST_AT(pst_rec, sock, 8);
PST_AT(pst_rec, changed_ns, 16);
PST_AT(pst_rec, local, 24);
PST_AT(pst_rec, peer, 44);
PST_AT(pst_rec, reason, 64);
PST_AT(pst_rec, lanes, 88);
PST_AT(pst_rec, peer_pid, 108);
PST_AT(pst_rec, peer_boot, 112);
_Static_assert(sizeof(struct pst_rec) == 120, "pst_rec resized: bump PST_VERSION");
PST_AT(pst_entry, seq, 0);
PST_AT(pst_entry, used, 4);
PST_AT(pst_entry, r, 8);
_Static_assert(sizeof(struct pst_entry) == 128, "pst_entry resized: bump PST_VERSION");
PST_AT(pst_header, magic, 0);
PST_AT(pst_header, version, 8);
PST_AT(pst_header, entry_size, 12);
PST_AT(pst_header, max_fds, 16);
PST_AT(pst_header, pid, 20);
PST_AT(pst_header, netns, 24);
PST_AT(pst_header, uid, 32);
PST_AT(pst_header, pad0, 36);
PST_AT(pst_header, owner, 40);
#undef PST_AT
_Static_assert(sizeof(struct pst_header) == 56, "pst_header resized: bump PST_VERSION");

/* The header takes the first slot; fd N is at slot N + 1. */
#define PST_OFFSET(fd) ((size_t)((fd) + 1) * PST_ENTRY_SIZE)
#define PST_FILE_MAX   PST_OFFSET(PST_MAX_FDS)

/* ---- the writer: this process's own table -------------------------------- */

/* Records r at r->fd (creating the table on first use).  0 or a negative
 * errno; a process whose table cannot be made simply does not show. */
int pst_put(const struct pst_rec *r);
/* Records r at every fd of this process recorded with socket r->sock (the
 * fds that dup made of it); r->fd is ignored. */
void pst_put_all(const struct pst_rec *r);
/* Forgets fd.  Costs a load and a compare when the fd was never recorded. */
void pst_clear(int fd);
void pst_clear_range(unsigned first, unsigned last);
/* Opens this process's table now, taking over the one the image before
 * exec left (its records of fds that closed at exec are dropped). */
int pst_open(void);
/* This process's record of fd, if it has one.  0 or -ENOENT. */
int pst_get(int fd, struct pst_rec *out);
/* In the child after fork: the mapping is the parent's table.  The child
 * makes a table of its own and copies into it the parent's records of the
 * fds it holds (checked against the kernel: the parent may have changed
 * its table since the fork). */
void pst_after_fork_child(void);
/* The process ends (exit, _exit): the table and its registry entry go,
 * and none is made again. */
void pst_exit(void);

/* ---- the registry's list of processes with a table ---------------------- */

/* wait_ms: how long to wait for the registry's lock (0: as long as every
 * registry operation).  Publishes this process's table under tag (taking
 * over an entry with our pid: after exec, or a dead process's, whose
 * table goes if it has another tag). */
int reg_proc_add(int wait_ms, uint64_t tag);
/* The tag of the entry with this process's pid (the image before exec
 * made it, or a dead process with the same pid did): 0 or -ENOENT. */
int reg_proc_find_self(int wait_ms, uint64_t *tag);
void reg_proc_remove(void);
/* Calls fn for every live process with a table (read-only, without the
 * lock: for tools). */
void reg_proc_each(void (*fn)(int32_t pid, const struct reg_owner *o, uint64_t tag, void *ctx), void *ctx);

/* ---- the reader (shunt stat) -------------------------------------------- */

/* Reads the table of pid, named with tag (reg_proc_each gives both), whose
 * header must name owner: *out (malloc'd, the caller frees) gets the valid
 * records.  0, or a negative errno (-ENOENT: no table). */
int pst_read(int32_t pid, const struct reg_owner *owner, uint64_t tag, struct pst_rec **out, size_t *count);

const char *pst_path_name(unsigned path);
const char *pst_kind_name(unsigned kind);
const char *pst_role_name(unsigned role);

#endif
