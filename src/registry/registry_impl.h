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

#include "registry/registry_file.h"

/* Liveness answers, remembered for one locked operation (a sweep meets the
 * same few pids again and again). */
#define LIVE_SLOTS 32
struct live_cache {
    struct {
        int32_t pid;
        bool alive;
        uint64_t start;
    } slot[LIVE_SLOTS];
};

int reg_get(struct reg_file **out);
int reg_lock(struct reg_file *f, sigset_t *old);
/* The same, waiting at most ms (reg_lock waits reg_lock_timeout_ms). */
int reg_lock_within(struct reg_file *f, sigset_t *old, int ms);
/* What every table operation starts with: the registry opened if need be,
 * and its lock taken (signals blocked into *old).  0 or a negative errno;
 * reg_unlock ends it. */
int reg_enter(struct reg_file **f, sigset_t *old);
void reg_unlock(struct reg_file *f, const sigset_t *old);
void entry_publish(_Atomic uint32_t *state, uint32_t value);
struct reg_owner owner_of(int32_t pid);
const struct reg_owner * self_identity(int32_t *pid);
bool owner_alive(int32_t pid, const struct reg_owner *o, struct live_cache *lc);
void live_cache_init(struct live_cache *lc);
bool addr_eq(const struct in6_addr *a, const struct in6_addr *b);
bool listener_covers(const struct reg_listener *l, const struct reg_addr *dst);
bool reg_addr_eq(const struct reg_addr *a, const struct reg_addr *b);
bool addr_unspecified(const struct in6_addr *a);
bool client_present(const struct reg_conn_ent *e);
bool server_present(const struct reg_conn_ent *e, uint32_t state);
unsigned sweep_listeners(struct reg_file *f, struct live_cache *lc);
unsigned sweep_conns(struct reg_file *f, struct live_cache *lc);
unsigned sweep_procs(struct reg_file *f, struct live_cache *lc);

/* The high-water marks are hints kept under the lock, clamped to the tables. */
static inline uint32_t listener_hwm(const struct reg_file *f)
{
    uint32_t h = f->hdr.listener_hwm;
    return h > REG_LISTENERS ? REG_LISTENERS : h;
}

static inline uint32_t conn_hwm(const struct reg_file *f)
{
    uint32_t h = f->hdr.conn_hwm;
    return h > REG_CONNS ? REG_CONNS : h;
}

static inline uint32_t proc_hwm(const struct reg_file *f)
{
    uint32_t h = f->hdr.proc_hwm;
    return h > REG_PROCS ? REG_PROCS : h;
}

static inline uint32_t entry_state(_Atomic uint32_t *state)
{
    /* pairs with the release store that published the entry (same process
     * under the lock, or a tool reading without it) */
    return atomic_load_explicit(state, memory_order_acquire);
}

#endif
