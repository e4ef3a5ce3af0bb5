/*
 * downgrade_internal.h: what the two files of the move back to kernel TCP
 * share (downgrade.c: the records, the leaver, a closing end's copy;
 * downgrade_follow.c: the other end's part and the calls that meet the
 * move); nothing else includes it.  The public side is downgrade.h.
 */
#ifndef SHUNT_CORE_CONN_DOWNGRADE_INTERNAL_H
#define SHUNT_CORE_CONN_DOWNGRADE_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/fd/tcp_sock.h"

/* How long to wait for bytes known to be on their way over loopback (sent
 * already, counted) before deciding the connection is dead. */
#define ARRIVAL_MS 5000
/* How long the other end waits for the leaver's DOWN_READY (each wait of
 * the leaver before it is bounded by ARRIVAL_MS) before taking it for dead. */
#define READY_MS (4 * ARRIVAL_MS)

/* downgrade.c */
void dg_pause_briefly(void);
uint64_t dg_bells_freeze(_Atomic uint64_t *w);
uint64_t dg_take_exact(int fd, uint64_t n, char *buf);
int dg_send_all(int fd, const char *buf, size_t len, bool wait, uint64_t *sent);
int dg_send_ring_span(int fd, const struct ring_view *r, uint64_t from, uint64_t head, bool wait, uint64_t *sent);
void dg_back_path(const struct tcp_sock *t, char *out, size_t len);
void dg_settle_on_tcp(struct tcp_sock *t, int fd);
void dg_shut_on_tcp(struct tcp_sock *t, int fd);
enum { DG_READY, DG_NEVER, DG_DEAD };
int dg_wait_ready(struct tcp_sock *t, int fd);
bool dg_forget_dead_leaver(struct tcp_sock *t, int fd);

/* downgrade_follow.c: a second leaver's part (the other end's, reading
 * nothing more), and a closing end's whole re-send. */
void dg_follow_as_leaver(struct tcp_sock *t, int fd);
void dg_resend_closing(struct tcp_sock *t, int fd);

#endif
