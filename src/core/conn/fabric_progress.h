/*
 * fabric_progress.h: a thread of shunt's own that drives the engine while
 * the program is busy elsewhere, for engines whose peers' puts, gets and
 * flushes are answered only by this process's progress (UCX's TCP lanes:
 * transport/fabric_am_rma.c).  Without it a peer's move or flush waited
 * for as long as this process sat outside shunt (in waitpid, in a plain
 * accept), and broke after 5 s (docs/architecture.md, "Progress").
 */
#ifndef SHUNT_CORE_CONN_FABRIC_PROGRESS_H
#define SHUNT_CORE_CONN_FABRIC_PROGRESS_H

struct fabric_engine;

/* Under the fabric lock, once the engine e of this process is open: starts
 * the thread if e needs one and the process may have one (no seccomp filter
 * in place: base/self.h, shunt_filtered). */
void fabric_progress_start(struct fabric_engine *e);
/* In a forked child (which has no such thread): what was its parent's goes. */
void fabric_progress_after_fork_child(void);
/* Ends the thread and waits for it (a filter is coming).  Without the
 * fabric lock. */
void fabric_progress_stop(void);

#endif
