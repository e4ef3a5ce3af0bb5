/* epoll_threads_first_member: threads asleep in epoll_wait on a set while another thread adds
 * a socket to it, as gRPC's epoll1 poller and other multi-threaded event loops do (issue 17):
 *   - a set holding only an eventfd, its sleeper woken by the peer's data or by its close on
 *     the socket added meanwhile (accelerated: the set's first member of shunt's): the sleeper
 *     gets exactly the data the program registered (0xdeadbeef00000000 | i, a tagged pointer)
 *     with EPOLLIN, never shunt's own registration ("SHUN" and an fd number, which crashed
 *     gRPC); through epoll_wait, epoll_pwait, epoll_pwait2, an outer set holding the set, and
 *     poll on the epoll fd;
 *   - the same when the set has an (idle) accelerated member already, and when the socket is
 *     re-armed with EPOLL_CTL_MOD (EPOLLONESHOT) rather than added;
 *   - worker threads sharing one set (20 ms waits), kicked through its eventfd after each ADD
 *     and again as the peer writes (so the kicked one works while the other, asleep since
 *     before the ADD, is woken), connections coming and going (EPOLLONESHOT, re-armed by a
 *     worker): every event's data is one the program registered, and every message arrives;
 *   - data comes back bit for bit, all 64 bits used, for kernel and accelerated members of one
 *     set, also after EPOLL_CTL_MOD changes it;
 *   - a pipe registered with the raw system call (shunt never sees it) in a set whose
 *     accelerated member is always ready: its events still arrive, with its data. */
#include "check.h"
#include "net.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>

#define DATA_EFD 0xfedcba9876543210ULL
#define DATA_INNER 0x8000000000000001ULL
#define DATA_IDLE 0x7fffffffffffffffULL
#define DATA_PIPE 0x0fedcba987654321ULL
#define DATA_SOCK(i) (0xdeadbeef00000000ULL | (uint64_t)(i))
#define ROUNDS 3

enum waitkind { W_WAIT, W_PWAIT, W_PWAIT2, W_OUTER, W_POLL, W_COUNT };
enum trigger { T_WRITE, T_CLOSE };
enum setup { S_FIRST, S_SECOND, S_REARM, S_COUNT };

static const char *const wait_names[] = { "epoll_wait", "epoll_pwait", "epoll_pwait2", "outer set", "poll" };
static const char *const setup_names[] = { "first member", "second member", "re-armed by MOD" };

static int pwait2_missing;

static void add(int epfd, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	CHECK_OK(epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev));
}

/* One wait of kind how on epfd; poll reports its revents as the event, with no data. */
static int wait_as(int epfd, enum waitkind how, struct epoll_event *out, int max, int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	struct pollfd p = { .fd = epfd, .events = POLLIN };
	sigset_t none;
	int r;

	sigemptyset(&none);
	switch (how) {
	case W_PWAIT:
		return epoll_pwait(epfd, out, max, ms, &none);
	case W_PWAIT2:
		if (!__atomic_load_n(&pwait2_missing, __ATOMIC_RELAXED)) {
			r = epoll_pwait2(epfd, out, max, &ts, &none);
			if (r >= 0 || errno != ENOSYS)
				return r;
			__atomic_store_n(&pwait2_missing, 1, __ATOMIC_RELAXED);
		}
		return epoll_pwait(epfd, out, max, ms, &none);
	case W_POLL:
		r = poll(&p, 1, ms);
		if (r == 1) {
			out[0].events = (uint32_t)p.revents;
			out[0].data.u64 = 0;
		}
		return r;
	default:
		return epoll_wait(epfd, out, max, ms);
	}
}

struct sleeper {
	int epfd;
	enum waitkind how;
	int n;
	struct epoll_event out[8];
	int done;
};

static void *sleeper_thread(void *arg)
{
	struct sleeper *w = arg;

	w->n = wait_as(w->epfd, w->how, w->out, 8, NET_WAIT_MS);
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int finished(struct sleeper *w)
{
	return __atomic_load_n(&w->done, __ATOMIC_ACQUIRE);
}

/* One event, exactly {events, data}: any other data is a value the program never gave. */
static void expect_one(const char *what, int n, const struct epoll_event *out, uint32_t events, uint64_t data)
{
	for (int k = 0; k < n; k++)
		if (out[k].data.u64 != data)
			FAIL("%s: event %d of %d has data %#llx (events %#x); the program registered %#llx", what,
			     k, n, (unsigned long long)out[k].data.u64, out[k].events, (unsigned long long)data);
	if (n != 1)
		FAIL("%s: %d events (errno %d), expected 1", what, n, n < 0 ? errno : 0);
	CHECK(out[0].events, ==, events);
}

/*
 * A thread sleeps in a wait of kind how on a set holding an eventfd (and, for S_SECOND, an
 * idle accelerated socket; for S_REARM, the socket, its one-shot fired); this thread adds the
 * socket (re-arms it), then the peer writes a byte or closes. The sleeper must wake at once,
 * with the socket's data.
 */
static void one_round(enum setup setup, enum waitkind how, enum trigger trig, int i)
{
	struct epoll_event out[8];
	struct sleeper w = { .how = how };
	pthread_t th;
	char what[128], b;
	int c, s, c0 = -1, s0 = -1, efd, set, outer = -1;
	uint64_t data = DATA_SOCK(i);
	double t0;

	snprintf(what, sizeof(what), "%s, %s, peer %s, round %d", setup_names[setup], wait_names[how],
		 trig == T_WRITE ? "writes" : "closes", i);
	efd = CHECK_OK(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	set = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	add(set, efd, EPOLLIN, DATA_EFD);
	tcp_pair_checked(AF_INET, &c, &s);
	if (setup == S_SECOND) {
		tcp_pair_checked(AF_INET, &c0, &s0);
		add(set, s0, EPOLLIN, DATA_IDLE);
	} else if (setup == S_REARM) {
		add(set, s, EPOLLIN | EPOLLONESHOT, ~data);
		xwrite_all(c, "a", 1);
		expect_one(what, epoll_wait(set, out, 8, NET_WAIT_MS), out, EPOLLIN, ~data);
		xread_exact(s, &b, 1);
	}
	w.epfd = set;
	if (how == W_OUTER) {
		outer = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
		add(outer, set, EPOLLIN, DATA_INNER);
		w.epfd = outer;
	}
	CHECK(pthread_create(&th, NULL, sleeper_thread, &w), ==, 0);
	sleep_ms(15);
	CHECK(finished(&w), ==, 0);   /* it sleeps */

	if (setup == S_REARM) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.u64 = data };

		CHECK_OK(epoll_ctl(set, EPOLL_CTL_MOD, s, &ev));
	} else {
		add(set, s, EPOLLIN, data);
	}
	if (trig == T_WRITE) {
		xwrite_all(c, "m", 1);
	} else {
		CHECK_OK(close(c));
		c = -1;
	}
	t0 = now_sec();
	while (!finished(&w) && now_sec() - t0 < 3.0)
		sleep_ms(1);
	if (!finished(&w))
		FAIL("%s: the sleeper was not woken (the kernel wakes it at once)", what);
	CHECK(pthread_join(th, NULL), ==, 0);

	if (how == W_POLL) {
		if (w.n != 1)
			FAIL("%s: poll returned %d", what, w.n);
		CHECK(w.out[0].events, ==, POLLIN);
	} else {
		expect_one(what, w.n, w.out, EPOLLIN, how == W_OUTER ? DATA_INNER : data);
	}
	if (how == W_OUTER || how == W_POLL)   /* the set itself has it ready */
		expect_one(what, epoll_wait(set, out, 8, 0), out, EPOLLIN, data);

	if (c >= 0)
		CHECK_OK(close(c));
	CHECK_OK(close(s));
	if (c0 >= 0) {
		CHECK_OK(close(c0));
		CHECK_OK(close(s0));
	}
	if (outer >= 0)
		CHECK_OK(close(outer));
	CHECK_OK(close(set));
	CHECK_OK(close(efd));
}

/* ---- workers sharing one set ---- */

#define WORKERS 2
#define CONNS 32
#define WORKER_WAIT_MS 20
#define MSG 8

struct conn {
	int s;            /* set before the ADD, read by the worker that gets its event */
	int got, done;
};

static struct conn conns[CONNS];
static int live[CONNS];   /* registered in the set now */
static int wset, wefd, stop_workers;

static void *worker(void *arg)
{
	struct epoll_event out[4];
	char buf[64];

	(void)arg;
	while (!__atomic_load_n(&stop_workers, __ATOMIC_ACQUIRE)) {
		int n = epoll_wait(wset, out, 4, WORKER_WAIT_MS);

		if (n < 0 && errno == EINTR)
			continue;
		CHECK(n, >=, 0);
		for (int k = 0; k < n; k++) {
			uint64_t d = out[k].data.u64, i = d & 0xffff;
			uint64_t v;

			if (d == DATA_EFD) {
				(void)!read(wefd, &v, sizeof(v));
				sleep_ms(1);   /* work */
				continue;
			}
			if (d != DATA_SOCK(i) || i >= CONNS || !__atomic_load_n(&live[i], __ATOMIC_ACQUIRE))
				FAIL("a worker got data %#llx (events %#x), which the program never registered "
				     "(or had removed)", (unsigned long long)d, out[k].events);
			struct conn *cn = &conns[i];
			int fd = __atomic_load_n(&cn->s, __ATOMIC_ACQUIRE);
			ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

			if (r > 0)
				cn->got += (int)r;
			else if (r < 0 && errno != EAGAIN)
				FAIL("recv on connection %d: %s", (int)i, strerror(errno));
			if (cn->got >= MSG) {
				__atomic_store_n(&cn->done, 1, __ATOMIC_RELEASE);
			} else {   /* one-shot: this worker re-arms it */
				struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.u64 = d };

				CHECK_OK(epoll_ctl(wset, EPOLL_CTL_MOD, fd, &ev));
			}
		}
	}
	return NULL;
}

static void kick(void)
{
	uint64_t one = 1;

	CHECK(write(wefd, &one, sizeof(one)), ==, (ssize_t)sizeof(one));
}

static void shared_workers(void)
{
	pthread_t th[WORKERS];

	wefd = CHECK_OK(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	wset = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	add(wset, wefd, EPOLLIN | EPOLLET, DATA_EFD);   /* edge-triggered, as gRPC's wake-up fd */
	for (int k = 0; k < WORKERS; k++)
		CHECK(pthread_create(&th[k], NULL, worker, NULL), ==, 0);
	for (int i = 0; i < CONNS; i++) {
		struct conn *cn = &conns[i];
		double t0;
		int c, s;

		tcp_pair_checked(AF_INET, &c, &s);
		__atomic_store_n(&cn->s, s, __ATOMIC_RELEASE);
		__atomic_store_n(&live[i], 1, __ATOMIC_RELEASE);
		sleep_ms(WORKER_WAIT_MS + 5);   /* both workers wait anew, on a set without a socket */
		add(wset, s, EPOLLIN | EPOLLONESHOT, DATA_SOCK(i));
		kick();        /* one worker wakes, works, waits again, now on a set with the socket */
		sleep_ms(3);
		kick();        /* it works again while the bytes come: the other one is woken */
		xwrite_all(c, "01234567", MSG);
		t0 = now_sec();
		while (!__atomic_load_n(&cn->done, __ATOMIC_ACQUIRE) && now_sec() - t0 < 3.0)
			sleep_ms(1);
		if (!__atomic_load_n(&cn->done, __ATOMIC_ACQUIRE))
			FAIL("connection %d: its %d bytes were not received (got %d)", i, MSG, cn->got);
		CHECK(cn->got, ==, MSG);
		CHECK_OK(epoll_ctl(wset, EPOLL_CTL_DEL, s, NULL));
		__atomic_store_n(&live[i], 0, __ATOMIC_RELEASE);
		CHECK_OK(close(c));
		CHECK_OK(close(s));
	}
	__atomic_store_n(&stop_workers, 1, __ATOMIC_RELEASE);
	for (int k = 0; k < WORKERS; k++)
		CHECK(pthread_join(th[k], NULL), ==, 0);
	CHECK_OK(close(wset));
	CHECK_OK(close(wefd));
}

/* ---- data bit for bit ---- */

#define NDATA 4

/* Waits (bounded) until every member has been reported, each with exactly its data. */
static void expect_all(int set, const uint64_t *data, const char *what)
{
	struct epoll_event out[8];
	int seen[NDATA] = { 0 }, all = 0;
	double t0 = now_sec();

	while (all < NDATA && now_sec() - t0 < NET_WAIT_MS / 1000.0) {
		int n = CHECK_OK(epoll_wait(set, out, 8, 100)), once[NDATA] = { 0 };

		for (int k = 0; k < n; k++) {
			int m = 0;

			while (m < NDATA && out[k].data.u64 != data[m])
				m++;
			if (m == NDATA)
				FAIL("%s: data %#llx (events %#x) is none the program registered", what,
				     (unsigned long long)out[k].data.u64, out[k].events);
			CHECK(out[k].events, ==, EPOLLIN);
			CHECK(once[m]++, ==, 0);
			if (!seen[m]++)
				all++;
		}
	}
	for (int m = 0; m < NDATA; m++)
		if (!seen[m])
			FAIL("%s: data %#llx never reported", what, (unsigned long long)data[m]);
}

static void data_bit_for_bit(void)
{
	uint64_t data[NDATA] = { DATA_EFD, 0x8000000000000001ULL, DATA_SOCK(7), 0xffffffffffffffffULL };
	int fds[NDATA], pp[2], c1, s1, c2, s2, set;
	uint64_t one = 1;

	fds[0] = CHECK_OK(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
	CHECK_OK(pipe(pp));
	fds[1] = pp[0];
	tcp_pair_checked(AF_INET, &c1, &s1);
	tcp_pair_checked(AF_INET, &c2, &s2);
	fds[2] = s1;
	fds[3] = s2;
	set = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	for (int m = 0; m < NDATA; m++)
		add(set, fds[m], EPOLLIN, data[m]);
	CHECK(write(fds[0], &one, sizeof(one)), ==, (ssize_t)sizeof(one));
	xwrite_all(pp[1], "p", 1);
	xwrite_all(c1, "1", 1);
	xwrite_all(c2, "2", 1);
	expect_all(set, data, "added");
	for (int m = 0; m < NDATA; m++) {
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = data[m] = ~data[m] ^ (1ULL << 62) };

		CHECK_OK(epoll_ctl(set, EPOLL_CTL_MOD, fds[m], &ev));
	}
	expect_all(set, data, "modified");
	CHECK_OK(close(set));
	CHECK_OK(close(fds[0]));
	CHECK_OK(close(pp[0]));
	CHECK_OK(close(pp[1]));
	CHECK_OK(close(c1));
	CHECK_OK(close(s1));
	CHECK_OK(close(c2));
	CHECK_OK(close(s2));
}

/* ---- a registration shunt does not see ---- */

static void unseen_registration(int timeout_ms)
{
	struct epoll_event out[8], ev = { .events = EPOLLIN, .data.u64 = DATA_PIPE };
	int pp[2], c, s, set, pipe_seen = 0, tries;
	double t0;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK_OK(pipe(pp));
	set = CHECK_OK(epoll_create1(EPOLL_CLOEXEC));
	add(set, s, EPOLLIN, DATA_SOCK(99));
	xwrite_all(c, "x", 1);   /* never read: the socket stays ready */
	CHECK(syscall(SYS_epoll_ctl, set, EPOLL_CTL_ADD, pp[0], &ev), ==, 0);
	xwrite_all(pp[1], "p", 1);
	t0 = now_sec();
	for (tries = 0; !pipe_seen && tries < 5000 && now_sec() - t0 < 3.0; tries++) {
		int n = CHECK_OK(epoll_wait(set, out, 8, timeout_ms));

		for (int k = 0; k < n; k++) {
			if (out[k].data.u64 == DATA_PIPE)
				pipe_seen = 1;
			else if (out[k].data.u64 != DATA_SOCK(99))
				FAIL("unseen registration: data %#llx", (unsigned long long)out[k].data.u64);
			CHECK(out[k].events, ==, EPOLLIN);
		}
	}
	if (!pipe_seen)
		FAIL("a pipe registered with the raw system call: no event in %d waits (timeout %d ms)", tries,
		     timeout_ms);
	CHECK_OK(close(set));
	CHECK_OK(close(pp[0]));
	CHECK_OK(close(pp[1]));
	CHECK_OK(close(c));
	CHECK_OK(close(s));
}

/* Every part, or the one named: close, write, workers, data, unseen. */
int main(int argc, char **argv)
{
	const char *only = argc > 1 ? argv[1] : "";

	alarm(60);
	/* The peer's close first: before the fix, the leak it shows is certain. */
	for (int trig = T_CLOSE; trig >= T_WRITE; trig--) {
		if (*only && strcmp(only, trig == T_CLOSE ? "close" : "write"))
			continue;
		for (int setup = 0; setup < S_COUNT; setup++)
			for (int how = 0; how < W_COUNT; how++)
				for (int i = 0; i < ROUNDS; i++)
					one_round((enum setup)setup, (enum waitkind)how, (enum trigger)trig, i);
	}
	if (!*only || !strcmp(only, "workers"))
		shared_workers();
	if (!*only || !strcmp(only, "data"))
		data_bit_for_bit();
	if (!*only || !strcmp(only, "unseen")) {
		unseen_registration(NET_WAIT_MS);
		unseen_registration(0);
	}
	PASS();
}
