/*
 * chaos.h: what the two files of the stress and chaos run share (chaos.c, which runs the
 * rounds and judges them, and chaos_peers.c, the server and the clients of a round): the
 * bounds, how a receive ended and how its receiver waited, the record each end keeps of a
 * connection in the memory all the run's processes share, the run's globals (chaos.c's) and
 * the two processes (chaos_peers.c's). Nothing else includes it.
 */
#ifndef SHUNT_TESTS_STRESS_CHAOS_H
#define SHUNT_TESTS_STRESS_CHAOS_H

#include <stdbool.h>
#include <stdint.h>

#define MAX_CLIENTS 8
#define MAX_CONNS 16
#define MAX_RECS (MAX_CLIENTS * MAX_CONNS)
#define WAIT_MS 5000          /* a wait without progress this long is a hang */
#define EXIT_STALL 3

enum end { END_NONE, END_EOF, END_RESET, END_STALL, END_ERROR, END_NO_CONNECT };

/* One direction's receiver and the other's sender, as one end saw its connection. */
struct rec {
	int used;
	int port;              /* the client's port: both ends' records meet by it */
	int early_close;       /* the client closes before it has read all (a reset) */
	int accelerated;
	int how;               /* how its receiver waited (enum how) */
	unsigned long long inode;   /* its socket's: the connection id in shunt's log */
	unsigned long long peer_inode;   /* the server's: the client's socket's, by sock_diag */
	uint64_t expect_in, got_in, sent_out;
	int end_in, err_in, err_out;
	long long bad_at;      /* stream offset of the first wrong byte, or -1 */
	/* at a stall, what its receiver saw then: shunt's path for the socket, and the
	 * kernel's (sock_diag) TCP state and bytes queued in the socket, -1 if unknown */
	char stall_path[16];
	int stall_tcp_state, stall_rqueue;
};

struct shared {
	int port;
	int clients_done;
	int server_gone;       /* killed: clients waiting for its port give up */
	int nsrec;
	int raw_clones;        /* made by servers (chaos_peers.c, raw_clone_now) */
	struct rec crec[MAX_RECS];
	struct rec srec[MAX_RECS];
};

enum how { HOW_POLL, HOW_BLOCK, HOW_EPOLL };

/* The run's, set by chaos.c (main, the rounds); the peers read them. */
extern struct shared *sh;
extern unsigned round_no;
extern int clients, conns;
extern bool raw_clone_rounds;   /* --raw-clones */

/* chaos_peers.c: a round's server and its client number index; each ends with _exit. */
void chaos_server(void);
void chaos_client(int index);

#endif
