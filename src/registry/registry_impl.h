/*
 * registry_impl.h: the functions the registry's .c files share with one
 * another: opening the file and its lock (registry.c), entries' state
 * words, process identity and liveness, addresses, and the sweeps of dead
 * entries.  Its users are registry.c, listeners.c, connections.c,
 * processes.c and procstat.c; nothing outside src/registry includes it
 * (the file's layout, which tools read too, is registry_file.h).
 */
#ifndef SHUNT_REGISTRY_IMPL_H
#define SHUNT_REGISTRY_IMPL_H

#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "registry/registry_file.h"

/* Liveness answers, remembered for one locked operation (a sweep meets the
 * same few pids again and again). */
#define LIVE_SLOTS 32
struct reg_live_cache {
    struct {
        int32_t pid;
        bool alive;
        uint64_t start;
    } slot[LIVE_SLOTS];
};

/* ---- the file and its lock (registry.c) --------------------------------- */

/* The registry mapped, opening it first if this process has not yet. */
int reg_get(struct reg_file **out);
/* Takes the lock with every signal blocked (the old mask into *old),
 * waiting at most reg_lock_timeout_ms; a lock whose owner died is taken
 * over.  0 or a negative errno. */
int reg_lock(struct reg_file *f, sigset_t *old);
/* The same, waiting at most ms. */
int reg_lock_within(struct reg_file *f, sigset_t *old, int ms);
/* What every table operation starts with: the registry opened if need be,
 * and its lock taken (signals blocked into *old).  0 or a negative errno;
 * reg_unlock ends it. */
int reg_enter(struct reg_file **f, sigset_t *old);
void reg_unlock(struct reg_file *f, const sigset_t *old);
/* The same for the registry of scope (the host's is opened, never created). */
int reg_get_in(enum reg_scope scope, struct reg_file **out);
int reg_enter_in(enum reg_scope scope, struct reg_file **f, sigset_t *old);
/* The host's registry if this process has mapped it, or NULL. */
/* Publishes an entry's state word (release), after its fields. */
void reg_entry_publish(_Atomic uint32_t *state, uint32_t value);
/* An offer left REG_OFFER (under lock): one fewer in the header's count. */
void reg_offer_gone(struct reg_file *f);
/* The registry's path in dir for uid and a network namespace. */
int reg_name_of(char *out, size_t len, const char *dir, uid_t uid, uint64_t netns);
/* Opens, checks (this user's own file, mode 0600, this version, this
 * namespace) and maps the registry at path; *st gets what was mapped.
 * 0, -ENOENT, -EPERM (not ours: never mapped), -EPROTO, or another
 * negative errno. */
int reg_map_file(const char *path, uid_t uid, uint64_t netns, struct reg_file **out, struct stat *st);

/* ---- the files of /dev/shm nobody uses any more (sweep.c) --------------- */

/* Is a sweep of the files due (at most one per reg_sweep_interval_s per
 * registry)?  If so, records that it is done now.  Lock held. */
bool reg_files_sweep_due(struct reg_file *f);
/* The same for the sweep of dead processes' entries at a process's first
 * open (reg_entries_sweep_interval_s).  Lock held. */
bool reg_entries_sweep_due(struct reg_file *f);
/* Removes this user's files that nobody can use any more: those of
 * namespaces no process of ours is in (their registries included), and
 * those of own's namespace that no record names.  Lock not held. */
void reg_sweep_files(struct reg_file *own);

/* ---- the fd tables' files (processes.c) --------------------------------- */

/* The path of the fd table of pid whose name has tag, in f's directory. */
void reg_table_path(char *out, size_t len, const struct reg_file *f, int32_t pid, uint64_t tag);
/* Is name (a file name, no directory) an fd table of this version?  Then
 * its uid, namespace, pid and tag. */
bool reg_table_name_parse(const char *name, uint32_t *uid, uint64_t *netns, int32_t *pid, uint64_t *tag);

/* ---- process identity and liveness (registry.c) ------------------------- */

/* What to record beside pid: this process's identity if it is ours, else
 * its start time as /proc gives it now. */
struct reg_owner reg_owner_of(int32_t pid);
/* This process's identity (and its pid into *pid if not NULL). */
const struct reg_owner * reg_self_identity(int32_t *pid);
/* Does the process that o describes still live? (answers cached in lc) */
bool reg_owner_alive(int32_t pid, const struct reg_owner *o, struct reg_live_cache *lc);
void reg_live_cache_init(struct reg_live_cache *lc);

/* ---- addresses (registry.c) --------------------------------------------- */

/* Would the listener l take a connection to dst (the kernel's rules)? */
bool reg_listener_covers(const struct reg_listener *l, const struct reg_addr *dst);

/* ---- connection records' ends, and the sweeps (lock held) --------------- */

bool reg_client_present(const struct reg_conn_ent *e);
bool reg_server_present(const struct reg_conn_ent *e, uint32_t state);
/* Each frees the entries of dead processes in its table (reg_sweep_conns
 * unlinks their channels, reg_sweep_procs their fd tables), lowers the
 * table's high-water mark, and returns how many it freed. */
unsigned reg_sweep_listeners(struct reg_file *f, struct reg_live_cache *lc);
unsigned reg_sweep_conns(struct reg_file *f, struct reg_live_cache *lc);
unsigned reg_sweep_procs(struct reg_file *f, struct reg_live_cache *lc);

/* The high-water marks are hints kept under the lock, clamped to the tables. */
static inline uint32_t reg_listener_hwm(const struct reg_file *f)
{
    uint32_t h = f->hdr.listener_hwm;
    return h > REG_LISTENERS ? REG_LISTENERS : h;
}

static inline uint32_t reg_conn_hwm(const struct reg_file *f)
{
    uint32_t h = f->hdr.conn_hwm;
    return h > REG_CONNS ? REG_CONNS : h;
}

static inline uint32_t reg_proc_hwm(const struct reg_file *f)
{
    uint32_t h = f->hdr.proc_hwm;
    return h > REG_PROCS ? REG_PROCS : h;
}

static inline uint32_t reg_entry_state(_Atomic uint32_t *state)
{
    /* pairs with the release store that published the entry (same process
     * under the lock, or a tool reading without it) */
    return atomic_load_explicit(state, memory_order_acquire);
}

#endif
