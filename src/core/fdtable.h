/*
 * fdtable.h: what shunt knows about each fd number of this process.
 *
 * An entry is one atomic word: UNKNOWN (never seen, or closed: probed lazily
 * on next use, which is how fds inherited across exec or received with
 * SCM_RIGHTS are recognised), PASSTHROUGH (not a socket shunt manages),
 * CLOSING (being closed or replaced: callers go straight to the kernel), or
 * a pointer to a struct shunt_sock holding one reference for the table.
 */
#ifndef SHUNT_FDTABLE_H
#define SHUNT_FDTABLE_H

#include "core/sock.h"

/* True in the child of vfork, which shares our memory but not our fds:
 * the table then answers passthrough for everything and changes nothing. */
extern _Thread_local bool shunt_in_vfork_child;

/* Sizes the table from RLIMIT_NOFILE and fs.nr_open.  Before it runs every
 * lookup answers passthrough. */
void fdt_init(void);

/* Looks fd up, probing it if unknown.  Never fails: an fd shunt does not
 * manage (or a bad fd) gives passthrough_ops. */
struct fdref fdt_get(int fd);
void fdt_put(struct fdref *r);

/* Records a new fd the program got from an intercepted call; takes over one
 * reference to s.  NULL records passthrough. */
void fdt_install(int fd, struct shunt_sock *s);

/* Marks fd as being closed and returns its object with the table's
 * reference (NULL if none); fdt_close_end() ends the closing state. */
struct shunt_sock *fdt_close_begin(int fd);
void fdt_close_end(int fd);

/* The socket s at fd will stay on kernel TCP: from now on lookups of fd
 * answer passthrough without touching s. */
void fdt_settle_kernel(int fd, struct shunt_sock *s);

/* Forgets fd, so that its next use probes it again. */
void fdt_forget(int fd);

/* An fd that just arrived with SCM_RIGHTS: forgets what the table knew
 * about its number and takes it up at once (see tcp_socket_probe). */
void fdt_adopt_passed(int fd);

/* Forgets every fd in [first, last] (after close_range). */
void fdt_forget_range(unsigned first, unsigned last);

/* Calls fn for every fd in [first, last] that has an object. */
void fdt_for_each_object(unsigned first, unsigned last, void (*fn)(int fd, void *ctx), void *ctx);

#endif
