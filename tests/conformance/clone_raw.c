/* clone_raw: a process made by the clone system call itself, not by fork (vsftpd makes every
 * session with syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWIPC | SIGCHLD), container tools and
 * sandboxes the same), carries on with the connections it inherits, while the process that made
 * it closes its copies at once, as vsftpd's listener does. Every byte both ways is checked, also
 * the bytes that were waiting in each direction when the clone came, and the peer (another
 * process) sees the end of the stream only when the clone closes.
 *
 * Each round: P holds a connection to its peer Q (a forked child) with bytes unread both ways,
 * and a listener. P clones R, then closes its copy of the connection. R reads what Q sent, sends
 * more than a ring holds, reads Q's answer, and accepts on the inherited listener a connection
 * that P makes, echoing its bytes; then it exits. The rounds clone by:
 *   syscall   syscall(SYS_clone, SIGCHLD, 0): R returns from syscall() as from fork; exit()
 *   libc      libc's clone(fn, stack, SIGCHLD, arg): R runs fn on a stack of its own; _exit()
 *   clone3    syscall(SYS_clone3) with no stack: R returns as from fork; exit()
 *   ns        as vsftpd: syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | SIGCHLD)
 *             (root only: another user cannot make namespaces, and that round is left out)
 * Accelerated: the connection was accelerated before the clone and is on kernel TCP after it
 * (P's end "raw_clone", Q's end "downgraded"); a connection P makes after the round is
 * accelerated again; R, which shunt does not follow, accelerates nothing. Before shunt knew of
 * raw clones, P's close ended the stream for Q while R still used it (R's sends: EPIPE). */
#include "check.h"
#include "net.h"
#include "shunt_query.h"

#include <linux/sched.h>
#include <sched.h>
#include <stdint.h>
#include <sys/syscall.h>

#define PRE 3000            /* each way, unread when the clone comes */
#define BULK (600 * 1024)   /* each way after it: more than a ring holds */
#define SEED_PRE_UP 61      /* Q to P, before */
#define SEED_PRE_DOWN 62    /* P to Q, before */
#define SEED_UP 63          /* R to Q */
#define SEED_DOWN 64        /* Q to R */

enum way { BY_SYSCALL, BY_LIBC, BY_CLONE3, BY_NS, WAYS };
static const char *const names[WAYS] = { "syscall", "libc", "clone3", "ns" };

struct job {
	enum way way;
	int fd;         /* R's end of the connection to Q */
	int lfd;        /* the listener P connects to after the clone */
};

static char buf[PRE + BULK];

/* Q: plain calls only. */
static void peer(int fd)
{
	pattern_fill(SEED_PRE_UP, 0, buf, PRE);
	xwrite_all(fd, buf, PRE);
	xread_exact(fd, buf, PRE + BULK);
	CHECK_PATTERN(SEED_PRE_DOWN, 0, buf, PRE);
	CHECK_PATTERN(SEED_UP, 0, buf + PRE, BULK);
	pattern_fill(SEED_DOWN, 0, buf, BULK);
	xwrite_all(fd, buf, BULK);
	CHECK(read(fd, buf, 1), ==, 0);   /* R closed: the end, and nothing stray before it */
	expect_fallback(fd, "downgraded");
	PASS();
}

/* R: the connection from P's side, then the listener. Its status is the round's verdict. */
static int clone_body(void *arg)
{
	struct job *j = arg;
	char small[8];
	int a;

	xread_exact(j->fd, buf, PRE);
	CHECK_PATTERN(SEED_PRE_UP, 0, buf, PRE);
	pattern_fill(SEED_UP, 0, buf, BULK);
	xwrite_all(j->fd, buf, BULK);
	xread_exact(j->fd, buf, BULK);
	CHECK_PATTERN(SEED_DOWN, 0, buf, BULK);
	CHECK_OK(close(j->fd));

	/* the listener R inherited: P connects after the clone (in P's network namespace, where
	 * the listener is, whatever namespace R is in) */
	a = CHECK_OK(accept(j->lfd, NULL, NULL));
	xread_exact(a, small, 5);
	CHECK(memcmp(small, "hello", 5), ==, 0);
	xwrite_all(a, "olleh", 5);
	CHECK(shunt_query_accelerated(a) <= 0, ==, 1);   /* shunt does not follow R */
	CHECK_OK(close(a));
	CHECK_OK(close(j->lfd));
	if (j->way != BY_NS) {
		/* a connection R makes itself: kernel TCP, and exact */
		int c, s;

		tcp_pair(AF_INET, &c, &s);
		CHECK(shunt_query_accelerated(c) <= 0, ==, 1);
		CHECK(shunt_query_accelerated(s) <= 0, ==, 1);
		xexchange_both(c, s);
		CHECK_OK(close(c));
		CHECK_OK(close(s));
	}
	return 0;
}

static pid_t make_clone(struct job *j)
{
	static char stack[256 * 1024] __attribute__((aligned(16)));
	long pid;

	switch (j->way) {
	case BY_SYSCALL:
	case BY_NS:
		pid = syscall(SYS_clone, SIGCHLD | (j->way == BY_NS ? CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC : 0),
			      0L, 0L, 0L, 0L);
		if (pid == 0)
			exit(clone_body(j));
		return (pid_t)pid;
	case BY_LIBC:
		return clone(clone_body, stack + sizeof stack, SIGCHLD, j);
	case BY_CLONE3: {
		struct clone_args ca;

		memset(&ca, 0, sizeof ca);
		ca.exit_signal = SIGCHLD;
		pid = syscall(SYS_clone3, &ca, sizeof ca);
		if (pid == 0)
			exit(clone_body(j));
		return (pid_t)pid;
	}
	default:
		FAIL("no such way");
	}
}

static void round_of(enum way way)
{
	struct job j = { .way = way };
	int c, s, port, p;
	pid_t q, r;
	char small[8];

	tcp_pair_checked(AF_INET, &c, &s);
	q = CHECK_OK(fork());
	if (q == 0) {
		CHECK_OK(close(s));
		peer(c);
	}
	CHECK_OK(close(c));
	pattern_fill(SEED_PRE_DOWN, 0, buf, PRE);
	xwrite_all(s, buf, PRE);
	wait_queued(s, PRE);   /* Q's first bytes are here, unread */
	j.fd = s;
	j.lfd = tcp_listen(AF_INET, &port);

	fflush(stdout);   /* R exits through exit() with a copy of it */
	r = make_clone(&j);
	if (r < 0)
		FAIL("%s: clone: %s", names[way], strerror(errno));
	expect_fallback(s, "raw_clone");
	CHECK_OK(close(s));   /* as vsftpd's listener: the clone carries on alone */

	/* P still listens too: its client finds a listener under shunt, which R, accepting,
	 * does not claim */
	p = tcp_connect(AF_INET, port);
	xwrite_all(p, "hello", 5);
	xread_exact(p, small, 5);
	CHECK(memcmp(small, "olleh", 5), ==, 0);
	CHECK(shunt_query_accelerated(p) <= 0, ==, 1);
	CHECK_OK(close(p));
	CHECK_OK(close(j.lfd));

	xwait_child_ok(r);
	xwait_child_ok(q);

	/* P itself goes on: what it makes now is accelerated again */
	tcp_pair_checked(AF_INET, &c, &s);
	xexchange_both(c, s);
	CHECK_OK(close(c));
	CHECK_OK(close(s));
	printf("%s: ok\n", names[way]);
}

int main(void)
{
	for (enum way w = 0; w < WAYS; w++) {
		if (w == BY_NS && geteuid() != 0) {
			printf("%s: left out (namespaces need root)\n", names[w]);
			continue;
		}
		round_of(w);
	}
	PASS();
}
