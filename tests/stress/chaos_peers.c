/*
 * chaos_peers.c: the processes of a round of the stress and chaos run (chaos.c runs the
 * rounds and judges them; chaos.h is what both share). The server accepts at random moments
 * and reads and sends with two threads a connection; a client opens its connections at once,
 * and on each one thread waits and reads (poll + recv, a blocking recv, or epoll_wait + recv)
 * while another sends and shuts down. Every byte received is checked against its stream's
 * pattern, and each end leaves its record of a connection in the shared memory.
 */
#include "check.h"
#include "net.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "chaos.h"

static uint64_t seed_of(int port, int dir)
{
	return (uint64_t)round_no * 1000003u + (uint64_t)port * 2u + (uint64_t)dir;
}

/* How long a stream is: a quarter of them 300 bytes (the finding), the rest up to 512 KiB. */
static uint64_t length_of(uint64_t seed)
{
	uint64_t w = pattern_word(seed, 1u << 30);

	switch (w % 4) {
	case 0: return 300;
	case 1: return (w >> 8) % 4096;
	case 2: return 4096 + (w >> 8) % (60 * 1024);
	default: return 65536 + (w >> 8) % (448 * 1024);
	}
}

static int on_channel(int fd)
{
	int (*accelerated)(int);

	*(void **)&accelerated = dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
	return accelerated != NULL && accelerated(fd) == 1;
}

/* The kernel's record (sock_diag) of the loopback TCP socket whose source is src and whose
 * destination is dst, by that exact 4-tuple: true if found. */
static bool diag_lookup(const struct sockaddr_in *src, const struct sockaddr_in *dst, struct inet_diag_msg *out)
{
	struct {
		struct nlmsghdr nh;
		struct inet_diag_req_v2 req;
	} q = { { sizeof(q), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0 },
		{ .sdiag_family = AF_INET, .sdiag_protocol = IPPROTO_TCP, .idiag_states = ~0u } };
	union {
		struct nlmsghdr nh;
		char bytes[8192];
	} a;
	bool found = false;

	q.req.id.idiag_sport = src->sin_port;
	q.req.id.idiag_dport = dst->sin_port;
	q.req.id.idiag_src[0] = src->sin_addr.s_addr;
	q.req.id.idiag_dst[0] = dst->sin_addr.s_addr;
	q.req.id.idiag_cookie[0] = q.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	int nl = CHECK_OK(socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));

	if (send(nl, &q, sizeof(q), 0) == (ssize_t)sizeof(q)) {
		ssize_t n = recv(nl, &a, sizeof(a), 0);

		if (n >= (ssize_t)NLMSG_LENGTH(sizeof(struct inet_diag_msg)) && a.nh.nlmsg_type == SOCK_DIAG_BY_FAMILY) {
			*out = *(struct inet_diag_msg *)NLMSG_DATA(&a.nh);
			found = true;
		}
	}
	close(nl);
	return found;
}

/* fd's own address and its peer's (IPv4): false if either is unknown. */
static bool ends_of(int fd, struct sockaddr_in *me, struct sockaddr_in *peer)
{
	socklen_t len = sizeof(*me);

	if (getsockname(fd, (struct sockaddr *)me, &len) < 0)
		return false;
	len = sizeof(*peer);
	return getpeername(fd, (struct sockaddr *)peer, &len) == 0 && peer->sin_family == AF_INET;
}

/* The inode of the socket at the other end of a loopback connection, found by its exact
 * 4-tuple in the kernel's table (sock_diag), or 0 if that socket is gone. The client's port
 * alone does not name a connection within a round: loopback reuses a port whose connection
 * is in TIME_WAIT (tcp_tw_reuse), or one a killed client left, and a record matched to
 * another connection of that port reported bytes lost that were not. */
static unsigned long long peer_socket_inode(int fd)
{
	struct sockaddr_in me, peer;
	struct inet_diag_msg m;

	/* the peer's socket: its source is our destination */
	return ends_of(fd, &me, &peer) && diag_lookup(&peer, &me, &m) ? m.idiag_inode : 0;
}

/* At a stall, what the receiver's socket is: shunt's path for it, and the kernel's TCP state
 * and bytes queued in the socket (what shunt's companion holds: doorbells, or the end), so
 * that a hang seen once in CI says where it stood. State -1: not in the kernel's table; -2:
 * the socket has no peer address (reset). */
static void note_stall(int fd, struct rec *r)
{
	const char *(*path_of)(int);
	struct sockaddr_in me, peer;
	struct inet_diag_msg m;

	*(void **)&path_of = dlsym(RTLD_DEFAULT, "shunt_fd_path");
	const char *path = path_of ? path_of(fd) : NULL;

	snprintf(r->stall_path, sizeof(r->stall_path), "%s", path ? path : "none");
	r->stall_tcp_state = r->stall_rqueue = -1;
	if (!ends_of(fd, &me, &peer))
		r->stall_tcp_state = -2;   /* no peer address: reset, or never connected */
	else if (diag_lookup(&me, &peer, &m)) {
		r->stall_tcp_state = m.idiag_state;
		r->stall_rqueue = (int)m.idiag_rqueue;
	}
}

static void timeouts(int fd)
{
	struct timeval tv = { WAIT_MS / 1000, (WAIT_MS % 1000) * 1000 };

	CHECK_OK(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	CHECK_OK(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)));
}

/* The end of a receive, from recv's answer. */
static void ended(struct rec *r, ssize_t n, int err)
{
	if (n == 0)
		r->end_in = END_EOF;
	else if (err == ECONNRESET)
		r->end_in = END_RESET;
	else if (err == EAGAIN || err == EWOULDBLOCK)
		r->end_in = END_STALL;
	else
		r->end_in = END_ERROR;
	r->err_in = n < 0 ? err : 0;
}

/* Receives until EOF, an error, or (early close) half of the stream; checks every byte. */
static void receive(int fd, uint64_t seed, struct rec *r, enum how how, uint64_t stop_at)
{
	static __thread char buf[65536];
	struct stat st;
	int ep = -1;

	r->how = how;
	r->inode = fstat(fd, &st) == 0 ? (unsigned long long)st.st_ino : 0;
	if (how == HOW_EPOLL) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP };

		ep = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
		CHECK_OK(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
	}
	double idle_since = now_sec();

	for (;;) {
		if (r->got_in >= stop_at)
			break;
		if (how != HOW_BLOCK) {
			int n;

			if (how == HOW_POLL) {
				struct pollfd p = { .fd = fd, .events = POLLIN };

				n = poll(&p, 1, 100);
			} else {
				struct epoll_event ev;

				n = epoll_wait(ep, &ev, 1, 100);
			}
			if (n < 0 && errno != EINTR) {
				r->end_in = END_ERROR;
				r->err_in = errno;
				break;
			}
			if (n <= 0) {
				if ((now_sec() - idle_since) * 1000 > WAIT_MS) {
					r->end_in = END_STALL;
					note_stall(fd, r);
					break;
				}
				continue;
			}
		}
		size_t want = sizeof(buf);
		ssize_t n = recv(fd, buf, want, how == HOW_BLOCK ? 0 : MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && how != HOW_BLOCK && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			if ((now_sec() - idle_since) * 1000 > WAIT_MS) {
				r->end_in = END_STALL;
				note_stall(fd, r);
				break;
			}
			continue;
		}
		if (n <= 0) {
			ended(r, n, errno);
			if (r->end_in == END_STALL)
				note_stall(fd, r);
			break;
		}
		idle_since = now_sec();
		if (r->got_in + (uint64_t)n > r->expect_in) {
			r->bad_at = (long long)r->expect_in;   /* more than was sent */
			break;
		}
		long long bad = pattern_mismatch(seed, r->got_in, buf, (size_t)n);

		if (bad >= 0) {
			r->bad_at = (long long)r->got_in + bad;
			break;
		}
		r->got_in += (uint64_t)n;
	}
	if (ep >= 0)
		close(ep);
}

/* Sends the stream in pieces of varying size, then shuts its side down. */
static void send_stream(int fd, uint64_t seed, uint64_t len, struct rec *r)
{
	static __thread char buf[65536];
	uint64_t off = 0;

	while (off < len) {
		size_t n = 1 + (size_t)(pattern_word(seed + 7, off) % sizeof(buf));

		if (n > len - off)
			n = (size_t)(len - off);
		pattern_fill(seed, off, buf, n);
		ssize_t k = send(fd, buf, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			r->err_out = errno;
			return;
		}
		off += (uint64_t)k;
		r->sent_out = off;
	}
	if (shutdown(fd, SHUT_WR) < 0)
		r->err_out = errno;
}

struct job {
	int fd;
	uint64_t seed_in, seed_out;
	struct rec *r;
	enum how how;
	uint64_t stop_at;
	unsigned delay_us;
};

static void *job_send(void *arg)
{
	struct job *j = arg;

	/* a client's sender starts at once half of the time (before the server accepts, most
	 * often: the offer is withdrawn at its shutdown, or the claim gives up on a blocked
	 * send), else after up to 3 ms (claimed by then, most often: the rings carry it) */
	if (j->delay_us) {
		struct timespec ts = { 0, (long)j->delay_us * 1000 };

		nanosleep(&ts, NULL);
	}
	send_stream(j->fd, j->seed_out, length_of(j->seed_out), j->r);
	return NULL;
}

static void *job_receive(void *arg)
{
	struct job *j = arg;

	receive(j->fd, j->seed_in, j->r, j->how, j->stop_at);
	return NULL;
}

/* ---- the server ---- */

/* A process made by the raw clone system call (vsftpd's sessions), while this one's threads
 * send and receive on its connections: shunt moves every accelerated one back to kernel TCP
 * under them, which must cost no byte. The clone, which shunt does not follow, ends at once;
 * a clone that fails (a seccomp profile, say) changes nothing of the round's. */
static void raw_clone_now(void)
{
	long pid = syscall(SYS_clone, SIGCHLD, 0L, 0L, 0L, 0L);

	if (pid == 0)
		_exit(0);
	if (pid > 0) {
		__atomic_fetch_add(&sh->raw_clones, 1, __ATOMIC_RELAXED);
		while (waitpid((pid_t)pid, NULL, 0) < 0 && errno == EINTR)
			;
	}
}

static void *serve_one(void *arg)
{
	struct job *j = arg;
	pthread_t tx;

	CHECK(pthread_create(&tx, NULL, job_send, j), ==, 0);
	receive(j->fd, j->seed_in, j->r, j->how, UINT64_MAX);
	CHECK(pthread_join(tx, NULL), ==, 0);
	j->r->accelerated = on_channel(j->fd);
	close(j->fd);
	return NULL;
}

void chaos_server(void)
{
	static struct job jobs[MAX_RECS];
	static pthread_t th[MAX_RECS];
	int port;
	int lfd = tcp_listen_backlog(AF_INET, 256, &port);
	int total = clients * conns, n = 0;
	uint64_t rnd = pattern_word(round_no, 77);

	__atomic_store_n(&sh->port, port, __ATOMIC_RELEASE);
	while (n < total) {
		/* accepts at varying moments: at once, after a yield, after up to 400 us */
		switch ((rnd = pattern_word(rnd, n)) % 3) {
		case 0: break;
		case 1: sched_yield(); break;
		default: {
			struct timespec ts = { 0, (long)((rnd >> 8) % 400000) };

			nanosleep(&ts, NULL);
		}
		}
		short ev = wait_fd(lfd, POLLIN, 100);

		if (!(ev & POLLIN)) {
			if (__atomic_load_n(&sh->clients_done, __ATOMIC_ACQUIRE))
				break;   /* a client was killed before it connected */
			continue;
		}
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int fd = accept(lfd, (struct sockaddr *)&ss, &len);

		if (fd < 0)
			continue;   /* the client went away (killed) before we took it */
		timeouts(fd);
		int port = sockaddr_port(&ss);
		struct rec *r = &sh->srec[__atomic_fetch_add(&sh->nsrec, 1, __ATOMIC_RELAXED)];
		struct job *j = &jobs[n];

		r->used = 1;
		r->port = port;
		r->peer_inode = peer_socket_inode(fd);
		r->bad_at = -1;
		j->fd = fd;
		j->seed_in = seed_of(port, 0);
		j->seed_out = seed_of(port, 1);
		r->expect_in = length_of(j->seed_in);
		j->r = r;
		j->how = (j->seed_in >> 3) % 2 ? HOW_POLL : HOW_BLOCK;
		CHECK(pthread_create(&th[n], NULL, serve_one, j), ==, 0);
		n++;
		/* in a third of the rounds, once a few connections are under way */
		if (raw_clone_rounds && round_no % 3 == 2 && n == (total + 1) / 2)
			raw_clone_now();
	}
	for (int i = 0; i < n; i++)
		CHECK(pthread_join(th[i], NULL), ==, 0);
	close(lfd);
	_exit(0);
}

/* ---- a client ---- */

void chaos_client(int index)
{
	static struct job jobs[MAX_CONNS];
	static pthread_t rx[MAX_CONNS], tx[MAX_CONNS];
	double end = now_sec() + WAIT_MS / 1000.0;
	int port;

	while (!(port = __atomic_load_n(&sh->port, __ATOMIC_ACQUIRE))) {
		if (__atomic_load_n(&sh->server_gone, __ATOMIC_ACQUIRE))
			_exit(0);
		if (now_sec() > end)
			_exit(EXIT_STALL);
		sleep_ms(1);
	}
	for (int k = 0; k < conns; k++) {
		struct rec *r = &sh->crec[index * conns + k];
		struct job *j = &jobs[k];
		struct sockaddr_storage ss;
		socklen_t len = loopback_addr(AF_INET, port, &ss);
		int fd = CHECK_OK(socket(AF_INET, SOCK_STREAM, 0));

		timeouts(fd);
		r->used = 1;
		r->bad_at = -1;
		if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
			r->end_in = END_NO_CONNECT;
			r->err_in = errno;
			close(fd);
			j->fd = -1;
			continue;
		}
		r->port = local_port(fd);
		if (r->port == port) {
			/* connected to itself: the killed server's ephemeral port was free, and
			 * the kernel picked it for this socket (as it does without shunt) */
			r->end_in = END_NO_CONNECT;
			r->err_in = 0;
			close(fd);
			j->fd = -1;
			continue;
		}
		struct stat st;

		r->inode = fstat(fd, &st) == 0 ? (unsigned long long)st.st_ino : 0;
		j->fd = fd;
		j->seed_in = seed_of(r->port, 1);
		j->seed_out = seed_of(r->port, 0);
		r->expect_in = length_of(j->seed_in);
		r->early_close = pattern_word(j->seed_in, 5) % 8 == 0 && r->expect_in > 1;
		j->stop_at = r->early_close ? r->expect_in / 2 : UINT64_MAX;
		j->r = r;
		j->how = (enum how)(pattern_word(j->seed_in, 9) % 3);
		j->delay_us = pattern_word(j->seed_in, 11) % 2 ? (unsigned)(pattern_word(j->seed_in, 12) % 3000) : 0;
		CHECK(pthread_create(&rx[k], NULL, job_receive, j), ==, 0);
		CHECK(pthread_create(&tx[k], NULL, job_send, j), ==, 0);
	}
	for (int k = 0; k < conns; k++) {
		if (jobs[k].fd < 0)
			continue;
		CHECK(pthread_join(tx[k], NULL), ==, 0);
		CHECK(pthread_join(rx[k], NULL), ==, 0);
		jobs[k].r->accelerated = on_channel(jobs[k].fd);
		close(jobs[k].fd);
	}
	_exit(0);
}
