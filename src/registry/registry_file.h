/*
 * registry_file.h: the registry file as it lies in shared memory (every
 * process under shunt of this user and network namespace maps it), and how
 * to find and map it.  Included by the registry's own files (through
 * registry_impl.h), by procstat.h (struct reg_owner), by the `shunt stat`
 * tool, which reads the tables without the lock, and by the unit tests.
 * Not part of the negotiation contract: that is registry.h.
 *
 * The file (/dev/shm/shunt-<euid>-<netns inode>-r<REG_VERSION>.reg, mode 0600):
 *
 *   struct reg_header                 magic, version, sizes, the lock (a pid word)
 *   struct reg_listener[REG_LISTENERS]
 *   struct reg_conn_ent[REG_CONNS]
 *   struct reg_proc[REG_PROCS]        processes that publish an fd table (procstat.h)
 *   struct reg_verdict[REG_VERDICTS]  destinations judged short (registry.h), without the lock
 *
 * Every table entry is valid or free on its own: an entry is filled while its
 * state word says free and published by storing the state last (release), and
 * a change to a live entry only ever clears one field at a time.  So a process
 * that dies in the middle of an update (the next locker takes the lock over)
 * leaves nothing that needs repair.
 *
 * Every word of it is input: any process of the user can write anything
 * here.  The lock is a pid word taken with a bound (transport/seg_lock.h;
 * up to version 4 a robust pthread mutex, whose list pointers a scribble
 * turned into glibc's asserts and crashes); high-water marks are clamped to
 * the tables, names are bounded and NUL-checked before use, states are
 * compared with the closed set, and pids and inodes are hints the kernel
 * confirms (docs/architecture.md, "Shared memory is input").
 */
#ifndef SHUNT_REGISTRY_FILE_H
#define SHUNT_REGISTRY_FILE_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "registry/registry.h"
#include "transport/seg_lock.h"

#define REG_MAGIC     0x676572746e756873ULL   /* "shuntreg" */
#define REG_VERSION   8u
#define REG_LISTENERS 1024u
#define REG_CONNS     16384u
#define REG_PROCS     8192u

/* Entry states. */
#define REG_FREE    0u
#define REG_USED    1u    /* listener */
#define REG_OFFER   1u    /* connection record, not yet claimed */
#define REG_CLAIMED 2u    /* connection record the server claimed */

/* Who owns an entry: a pid, and what tells a reused pid apart. */
struct reg_owner {
    uint64_t start;     /* field 22 of /proc/<pid>/stat; 0 if unknown */
    uint64_t pidns;     /* inode of the pid namespace the pid belongs to; 0 if unknown */
};

struct reg_header {
    _Atomic uint64_t magic;         /* stored last at creation */
    uint32_t version;
    uint32_t header_size;
    uint32_t listener_count;
    uint32_t listener_size;
    uint32_t conn_count;
    uint32_t conn_size;
    uint32_t proc_count;
    uint32_t proc_size;
    uint64_t total_size;
    uint64_t netns;
    uint32_t uid;
    uint32_t pad0;
    alignas(64) struct seg_lock lock;   /* a pid word, taken with a bound (transport/seg_lock.h) */
    /* Everything below is changed under lock. */
    uint32_t listener_hwm;          /* no used listener at or above this index (a hint, clamped) */
    uint32_t conn_hwm;              /* the same for connection records */
    uint32_t proc_hwm;              /* the same for processes */
    uint32_t proc_sweep_next;       /* where the next table added looks for dead ones (processes.c) */
    uint64_t conn_seq;              /* the sequence number of the last record posted */
    uint64_t recoveries;            /* locks taken over from a dead owner */
    uint64_t reclaimed_listeners;   /* entries of dead processes removed */
    uint64_t reclaimed_conns;
    uint64_t reclaimed_procs;
    uint64_t files_swept_at;        /* CLOCK_BOOTTIME second (+1) of the last sweep of /dev/shm (sweep.c) */
    /* Records in REG_OFFER: counted under lock, recounted at every lookup
     * of an offer, read without the lock by an accept that wants to know
     * whether looking can find anything (connections.c) */
    _Atomic uint32_t offers;
    uint32_t entries_swept_at;      /* CLOCK_BOOTTIME second (+1) of the last sweep of dead entries at an open */
};

struct reg_listener {
    _Atomic uint32_t state;         /* REG_FREE or REG_USED, stored last */
    uint32_t v6only;
    uint64_t inode;
    int32_t pid;
    uint32_t pad0;
    struct reg_owner owner;
    struct reg_addr addr;
    uint32_t pad1;
};

struct reg_conn_ent {
    _Atomic uint32_t state;         /* REG_FREE, REG_OFFER or REG_CLAIMED, stored last */
    uint32_t pad0;
    uint64_t seq;                   /* newer records win when several match */
    struct reg_owner client_owner;
    struct reg_owner server_owner;  /* meaningful only once REG_CLAIMED */
    struct reg_conn c;
};

/* A process that publishes its fd table for `shunt stat` (procstat.h):
 * the sweep removes the table of a process that died without removing it. */
struct reg_proc {
    _Atomic uint32_t state;         /* REG_FREE or REG_USED, stored last */
    int32_t pid;
    struct reg_owner owner;
    uint64_t table_tag;             /* the random part of its table's name (procstat.h) */
};

struct reg_file {
    struct reg_header hdr;
    alignas(64) struct reg_listener listeners[REG_LISTENERS];
    alignas(64) struct reg_conn_ent conns[REG_CONNS];
    alignas(64) struct reg_proc procs[REG_PROCS];
    alignas(64) struct reg_verdict verdicts[REG_VERDICTS];
};

#define REG_FILE_SIZE (((sizeof(struct reg_file) + 4095) / 4096) * 4096)

/* The file's layout, which every process of this user and namespace maps
 * (and `shunt stat` reads): a change must bump REG_VERSION, which is in
 * the file's name.  struct reg_addr and struct reg_conn (registry.h) are
 * part of it; struct reg_owner and struct reg_addr are in the fd tables
 * too (procstat.h: bump PST_VERSION as well). */
#define REG_AT(s, f, off) _Static_assert(offsetof(struct s, f) == (off), #s "." #f " moved: bump REG_VERSION")
REG_AT(reg_addr, addr, 0);
REG_AT(reg_addr, port, 16);
_Static_assert(sizeof(struct reg_addr) == 20, "reg_addr resized: bump REG_VERSION and PST_VERSION");
REG_AT(reg_owner, start, 0);
REG_AT(reg_owner, pidns, 8);
_Static_assert(sizeof(struct reg_owner) == 16, "reg_owner resized: bump REG_VERSION and PST_VERSION");
REG_AT(reg_conn, client_inode, 0);
REG_AT(reg_conn, server_inode, 8);
REG_AT(reg_conn, client, 16);
REG_AT(reg_conn, server, 36);
REG_AT(reg_conn, channel, 56);
REG_AT(reg_conn, client_pid, 120);
REG_AT(reg_conn, server_pid, 124);
REG_AT(reg_conn, cookie, 128);
_Static_assert(sizeof(struct reg_conn) == 136, "reg_conn resized: bump REG_VERSION");
REG_AT(reg_header, magic, 0);
REG_AT(reg_header, version, 8);
REG_AT(reg_header, header_size, 12);
REG_AT(reg_header, listener_count, 16);
REG_AT(reg_header, listener_size, 20);
REG_AT(reg_header, conn_count, 24);
REG_AT(reg_header, conn_size, 28);
REG_AT(reg_header, proc_count, 32);
REG_AT(reg_header, proc_size, 36);
REG_AT(reg_header, total_size, 40);
REG_AT(reg_header, netns, 48);
REG_AT(reg_header, uid, 56);
REG_AT(reg_header, pad0, 60);
REG_AT(reg_header, lock, 64);
#define REG_AFTER_LOCK 80   /* struct seg_lock: 16 bytes */
REG_AT(reg_header, listener_hwm, REG_AFTER_LOCK);
REG_AT(reg_header, conn_hwm, REG_AFTER_LOCK + 4);
REG_AT(reg_header, proc_hwm, REG_AFTER_LOCK + 8);
REG_AT(reg_header, proc_sweep_next, REG_AFTER_LOCK + 12);
REG_AT(reg_header, conn_seq, REG_AFTER_LOCK + 16);
REG_AT(reg_header, recoveries, REG_AFTER_LOCK + 24);
REG_AT(reg_header, reclaimed_listeners, REG_AFTER_LOCK + 32);
REG_AT(reg_header, reclaimed_conns, REG_AFTER_LOCK + 40);
REG_AT(reg_header, reclaimed_procs, REG_AFTER_LOCK + 48);
REG_AT(reg_header, files_swept_at, REG_AFTER_LOCK + 56);
REG_AT(reg_header, offers, REG_AFTER_LOCK + 64);
REG_AT(reg_header, entries_swept_at, REG_AFTER_LOCK + 68);
#undef REG_AFTER_LOCK
_Static_assert(sizeof(struct reg_header) == 192, "reg_header resized: bump REG_VERSION");
REG_AT(reg_listener, state, 0);
REG_AT(reg_listener, v6only, 4);
REG_AT(reg_listener, inode, 8);
REG_AT(reg_listener, pid, 16);
REG_AT(reg_listener, pad0, 20);
REG_AT(reg_listener, owner, 24);
REG_AT(reg_listener, addr, 40);
REG_AT(reg_listener, pad1, 60);
_Static_assert(sizeof(struct reg_listener) == 64, "reg_listener resized: bump REG_VERSION");
REG_AT(reg_conn_ent, state, 0);
REG_AT(reg_conn_ent, pad0, 4);
REG_AT(reg_conn_ent, seq, 8);
REG_AT(reg_conn_ent, client_owner, 16);
REG_AT(reg_conn_ent, server_owner, 32);
REG_AT(reg_conn_ent, c, 48);
_Static_assert(sizeof(struct reg_conn_ent) == 184, "reg_conn_ent resized: bump REG_VERSION");
REG_AT(reg_proc, state, 0);
REG_AT(reg_proc, pid, 4);
REG_AT(reg_proc, owner, 8);
REG_AT(reg_proc, table_tag, 24);
_Static_assert(sizeof(struct reg_proc) == 32, "reg_proc resized: bump REG_VERSION");
REG_AT(reg_file, hdr, 0);
REG_AT(reg_file, listeners, 192);
REG_AT(reg_file, conns, 65728);
REG_AT(reg_verdict, key, 0);
REG_AT(reg_verdict, listener, 8);
REG_AT(reg_verdict, streak, 16);
REG_AT(reg_verdict, skip, 20);
REG_AT(reg_verdict, sampled, 24);
REG_AT(reg_verdict, pad, 28);
_Static_assert(sizeof(struct reg_verdict) == 32, "reg_verdict resized: bump REG_VERSION");
REG_AT(reg_file, procs, 3080384);
REG_AT(reg_file, verdicts, 3342528);
#undef REG_AT
_Static_assert(sizeof(struct reg_file) == 3375296 && REG_FILE_SIZE == 3379200, "registry file resized: bump REG_VERSION");
/* The state words and the magic are atomics that processes share: lock-free,
 * hence address-free (an atomic emulated with a lock would keep the lock in
 * each process's own memory). */
_Static_assert(__atomic_always_lock_free(sizeof(uint32_t), 0) && __atomic_always_lock_free(sizeof(uint64_t), 0),
               "the registry's shared words need lock-free atomics");

/* The directory the registry and the fd tables live in (/dev/shm, or the
 * one a test gave reg_open_at). */
const char *reg_directory(void);

/* The registry's file name for this user and network namespace (tools
 * look before they open: reg_open would create it). */
int reg_file_path(char *out, size_t len);

/* reg_open with another directory than /dev/shm (the unit tests use a
 * private one).  Does nothing if a registry is already open. */
int reg_open_at(const char *dir);

/* The registry this process has mapped, or NULL; the host's likewise
 * (after reg_open_host). */
struct reg_file *reg_mapped(void);
struct reg_file *reg_host_mapped(void);

/* Unmaps it, so that the next operation opens (and sweeps) again.  Only for
 * tests: nothing else may be using the registry at the time. */
void reg_close_for_test(void);

/* Tests: create the file under a named temporary instead of O_TMPFILE. */
extern bool reg_test_named_tmp;

/* Tests: how long an operation waits for the lock before giving up. */
extern int reg_lock_timeout_ms;

/* Tests: how often the files of /dev/shm are swept (seconds between two
 * sweeps of one registry), and how old a file must be to go (sweep.c). */
extern int reg_sweep_interval_s;
extern int reg_sweep_grace_s;

/* How often a process's first open sweeps the entries of dead processes
 * (seconds between two such sweeps of one registry, sweep.c): 0 at every
 * open, as `shunt stat` and tests want. */
extern int reg_entries_sweep_interval_s;

#endif
