/*
 * epoll_set.h: the table of one epoll set's members that are shunt's
 * (accelerated or negotiating sockets, inner epoll sets), inside core/.
 *
 * epoll_set.c owns the table: slots that stay put while used, an index by
 * fd number, the list of hot members, a member's doorbell request while it
 * is cold, and the journal that keeps the tables of processes sharing one
 * set (after fork) in step.  epoll_ctl.c decides what a member is,
 * epoll_look.c when it turns hot or cold, and epoll_wait.c answers
 * epoll_wait.
 */
#ifndef SHUNT_EPOLL_SET_H
#define SHUNT_EPOLL_SET_H

#include <pthread.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "core/kinds/tcp_socket.h"
#include "core/wait/kernel_looks.h"

#define EPOLL_SET_NO_SLOT UINT32_MAX

/* The high word of the kernel's data for registrations of ours: a member's
 * companion, and a cold member's wake FIFO (xwake.c); the low word is the
 * member's fd. */
#define TAG_HIGH 0x5348554eull    /* "SHUN" */
#define TAG_XWAKE 0x53485558ull   /* "SHUX" */
#define TAG_FABRIC 0x53485546ull  /* "SHUF": the process's fabric wake fd (core/conn/fabric_process.h) */

enum member_kind { M_SOCKET, M_EPOLL };

struct ep_entry {
    struct shunt_sock *s;        /* NULL: free slot; else holds a reference */
    int fd;                      /* the fd it was added under: the kernel's key too */
    int io_fd;                   /* an fd of this process for it (differs after close of a dup) */
    uint8_t kind;                /* enum member_kind */
    bool pending;                /* added before its connect: still the kernel's (see the top) */
    bool off;                    /* EPOLLONESHOT fired */
    bool poked;                  /* its kernel registration was made ready by a local shutdown (epoll_sets.c) */
    uint8_t idle;                /* looks in a row that found nothing */
    uint64_t active_ns;          /* when it last had something, or turned hot */
    int armed;                   /* cold: the doorbells asked for (WANT_*); 0 otherwise */
    int xkeep;                   /* cold: its end's wake FIFO, registered in the kernel set (an
                                    xwake_keep handle), or -1 */
    uint32_t hot_pos;            /* index in hot[], or EPOLL_SET_NO_SLOT */
    uint32_t events;
    epoll_data_t data;
    uint32_t last;               /* EPOLLET: what was ready when last looked at */
    uint64_t last_rx, last_tx;   /* EPOLLET: ring positions then */
    bool last_end;               /* EPOLLET: the peer had finished then */
};

struct ctl_journal;

struct epoll_obj {
    struct shunt_sock base;
    pthread_mutex_t lock;
    struct ep_entry *v;          /* slots, stable while used */
    uint32_t nv, capv;
    uint32_t *free_slots;
    uint32_t nfree, capfree;
    uint32_t *slot_of;           /* fd -> slot + 1 (0: none) */
    uint32_t nslot_of;
    uint32_t *hot;
    uint32_t nhot, caphot;
    uint32_t *woken;             /* slots the kernel just named (ep_filter_kernel) */
    uint32_t nwoken, capwoken;
    /* written under lock; read without it by a wait that finds none of ours
     * (epoll_wait_ready), paired with waiting: so atomic, seq_cst */
    _Atomic uint32_t members;
    uint32_t cold, nested, pending;
    /* the program's own registrations (an upper bound); changed without the
     * lock too, by epoll_ctl's way for a set with no members of ours */
    _Atomic uint32_t kernel_members;
    uint32_t rotate;             /* where the next look starts: ready members take turns */
    unsigned closes_seen;
    unsigned leaves_seen;        /* fallback_leaves when members were last handed back */
    unsigned spin_fails;
    bool kernel_first;           /* the kernel's members and ours take turns being first */
    uint32_t looks;              /* gathers: the kernel is asked every so many even without members of its */
    struct kernel_looks zero_looks;  /* zero-timeout waits: when the kernel was last asked (kernel_looks.h) */
    int kfd;                     /* an fd of this set, as last used by the program (checked before use) */
    atomic_bool tagged;          /* a registration of ours was made in the kernel's set (never reset) */
    int fabric_wake;             /* the fabric wake fd registered in the kernel's set (0: none; fd + 1) */
    bool resend_nap;             /* a member's re-send waits for room (ep_quiesce): sleep 1 ms at most */
    atomic_uint waiting;         /* threads of this process in a wait on it that may sleep */
    atomic_bool watched;         /* polled, or a member of another set: may be slept on from outside */
    struct ctl_journal *journal;     /* shared with the processes forked since (see below) */
    uint64_t applied;                /* journal records seen */
    struct epoll_obj *prev, *next;   /* every epoll object of the process */
};

static inline struct tcp_sock *epoll_set_sock_of(const struct ep_entry *e)
{
    return e->kind == M_SOCKET ? tcp_of(e->s) : NULL;
}

static inline struct ep_entry *epoll_set_slot_for_fd(struct epoll_obj *ep, int fd)
{
    if (fd < 0 || (uint32_t)fd >= ep->nslot_of || !ep->slot_of[fd])
        return NULL;
    return &ep->v[ep->slot_of[fd] - 1];
}

/* A free slot for fd, indexed (NULL: no memory); the caller fills it in,
 * starting with epoll_set_hold (a reference to s, counted in the socket). */
struct ep_entry *epoll_set_new_slot(struct epoll_obj *ep, int fd);
void epoll_set_hold(struct ep_entry *e, struct shunt_sock *s, enum member_kind kind);
/* Takes the member out (its doorbell request back, draining only if the
 * fd is still its socket's) and drops its reference. */
void epoll_set_release_slot(struct epoll_obj *ep, struct ep_entry *e, bool fd_valid);
/* Frees the table of a set that is going away. */
void epoll_set_free(struct epoll_obj *ep);

/* The program's events and data, as a new registration. */
void epoll_set_member_reset(struct ep_entry *e, const struct epoll_event *ev);

/* Hot: looked at on every wait.  Cold: its doorbell asked for (the caller
 * checked it is a settled channel).  Off (one-shot fired): neither. */
void epoll_set_hot_add(struct epoll_obj *ep, struct ep_entry *e);
void epoll_set_hot_remove(struct epoll_obj *ep, struct ep_entry *e);
void epoll_set_make_hot(struct epoll_obj *ep, struct ep_entry *e);
void epoll_set_make_cold(struct epoll_obj *ep, struct ep_entry *e);
void epoll_set_disarm(struct epoll_obj *ep, struct ep_entry *e, bool fd_valid);

/* A cold member whose end another process holds, or is about to, also
 * watches the end's wake FIFO in the kernel set (epoll_set_make_cold does it when the
 * end is shared already, or while epoll_forking: a fork of this process is
 * under way, and the child will hold every end). */
void epoll_set_watch_xwake(struct epoll_obj *ep, struct ep_entry *e);
extern atomic_int epoll_forking;

/* Whether fd still names s in this process (a number the program closed
 * may name another file now). */
bool epoll_set_fd_names(int fd, struct shunt_sock *s);

/* The journal of sets shared across fork: made before the fork, freed
 * with the set; a change is appended, the others' changes applied (under
 * ep->lock). */
void epoll_set_journal_create(struct epoll_obj *ep);
void epoll_set_journal_free(struct epoll_obj *ep);
void epoll_set_journal_append(struct epoll_obj *ep, int op, int fd, const struct epoll_event *ev, uint64_t inode);
void epoll_set_journal_apply(struct epoll_obj *ep);

#endif
