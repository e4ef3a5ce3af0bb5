/*
 * pingpong.h: what the files of pingpong (bench/pingpong.c, its main;
 * pingpong_conn.c, the connections; pingpong_cc.c, the client of the modes
 * that make a connection each time) share: the options, the two ends of a
 * connection, the listener, and their functions.
 */
#ifndef SHUNT_BENCH_PINGPONG_H
#define SHUNT_BENCH_PINGPONG_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

struct floor_ring; /* floor_ring.h */

enum transport { T_TCP, T_UNIX, T_SHM, T_MEMCPY };
enum mode { M_PP, M_SWEEP, M_STREAM, M_RR, M_CC, M_CRR, M_GET };
/* The modes that make a connection each time. */
#define CONN_MODE(m) ((m) == M_CC || (m) == M_CRR || (m) == M_GET)

struct conn {
    int fd;                    /* the socket; -1 on the floor */
    struct floor_ring *tx, *rx;
    pid_t peer;                /* the floor notices a dead peer by this */
    char *mirror;              /* -t memcpy: the other buffer; no peer at all */
};

/* The listener, and the address the child connects to. */
struct endpoint {
    int fd;
    struct sockaddr_storage addr;
    socklen_t len;
};

struct opts {
    enum transport transport;
    enum mode mode;
    long n, warmup, trials;
    size_t size, min, max;
    long pert;
    int pow2;
    double seconds, target_ms;
    const char *addr;          /* -a: the TCP listener's address */
    const char *path;          /* -U: the Unix socket's path */
    char **wrap;               /* -X: the child's command, nwrap words */
    int nwrap;
    int child_report, child_stop, child_port; /* -C: this is the exec'd child */
};

/* pingpong.c */
long long now_ns(void);

/* pingpong_conn.c */
_Noreturn void die(const char *what);
int conn_recv(struct conn *c, void *buf, size_t n);
int conn_send(struct conn *c, const void *buf, size_t n);
int accelerated(int fd);
void socket_options(int fd, enum transport t);
void endpoint_address(struct endpoint *e, const struct opts *o, int port);
void listen_on(struct endpoint *e, const struct opts *o);
int connect_to(const struct endpoint *e);
int accept_from_child(int listener, int report_fd);

/* pingpong_cc.c */
void cc_client(const struct endpoint *e, int stop_fd, size_t size, bool get, char *buf, long *made, long *accel);

#endif
