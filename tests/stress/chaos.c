/*
 * chaos.c: the stress and chaos run of make check (tests/stress/run_chaos.py runs it under
 * shunt and judges its last line).
 *
 * Rounds until --seconds have passed. Each round forks one server process and --clients
 * client processes; every client opens --conns connections at once, and on each a thread A
 * waits and reads (poll + recv, a blocking recv with a timeout, or epoll_wait + recv) while a
 * thread B sends and shuts down its side: the races of issue 16, finding 1, since the server
 * accepts at a random moment (before, during or after the client's send and shutdown, so the
 * offer is claimed or withdrawn while A looks at it). The server handles each connection with
 * two threads too, one reading, one sending. Some clients close before they have read all
 * (a close with unread data: a reset). In half of the rounds one process, the server or a
 * client, is killed with SIGKILL at a random moment. With --raw-clones, in a third of the
 * rounds the server, its threads mid-transfer, makes a process with the raw clone system call
 * (shunt moves its connections back to kernel TCP under the threads); make test-stress runs
 * it as its third run.
 *
 * Every byte received is checked against the stream's pattern (tests/lib/net.h), in both
 * directions. A connection whose ends both lived (and did not close early) must deliver
 * every byte, then EOF; one whose peer was killed or closed early may deliver a prefix, then
 * EOF or ECONNRESET; wrong bytes never. Every wait is bounded (socket timeouts, poll
 * timeouts, a deadline per round after which what is left is killed and counted as a hang).
 * At the end a process under shunt opens the registry (its sweep removes what killed
 * processes left) and /dev/shm is searched for files of this run's processes.
 *
 * Last line: "chaos: R rounds, C connections (A accelerated), B bytes checked, K kills,
 * L lost, W wrong, X crashes, H hangs, E errors, S leftovers (K of them after a kill; T before
 * the sweep), N raw clones". Exit 0 if lost, wrong, crashes, hangs, errors are 0 and so are the leftovers
 * (but those a kill explains, see leftovers(), unless --strict-leftovers).
 *
 * This file runs the rounds and judges them; the server and the clients are chaos_peers.c,
 * and chaos.h is what the two share.
 */
#include "check.h"
#include "net.h"

#include <dirent.h>
#include <stdbool.h>
#include <sys/mman.h>

#include "chaos.h"

#define MAX_PIDS 65536
#define ROUND_MS 15000        /* a round still running after this is a hang */

struct shared *sh;
unsigned round_no;
int clients = 3, conns = 6;
bool raw_clone_rounds;

/* ---- the conductor ---- */

/* Every process of the run, with its round: a file in /dev/shm is this run's by the pid in
 * its name, and is explained by a kill if its round had one. */
struct proc {
	pid_t pid;
	unsigned round;
};
static struct proc procs[MAX_PIDS];
static int nprocs;
static bool round_killed[1u << 16];

struct totals {
	unsigned long long conns, accelerated, bytes, kills, lost, wrong, crashes, hangs, errors, raw_clones;
};

static pid_t spawn(void (*fn)(int), int arg)
{
	fflush(NULL);
	pid_t pid = CHECK_OK(fork());

	if (pid == 0)
		fn(arg);
	if (nprocs < MAX_PIDS)
		procs[nprocs++] = (struct proc){ pid, round_no };
	return pid;
}

static void run_server(int unused)
{
	(void)unused;
	chaos_server();
}

/* What each thread of a hung process waits in, before it is killed: its kernel wait channel
 * and system call (/proc), and its user stack by gdb when there is one (make check installs
 * it), so that a hang seen once in CI can be read afterwards. */
static void show_hang(pid_t pid)
{
	char path[320], line[512];
	DIR *d;
	struct dirent *e;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if ((d = opendir(path)) == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char wchan[128] = "?", sys[256] = "?";
		const char *what[2] = { "wchan", "syscall" };
		char *into[2] = { wchan, sys };
		size_t size[2] = { sizeof(wchan), sizeof(sys) };

		for (int k = 0; k < 2; k++) {
			snprintf(path, sizeof(path), "/proc/%d/task/%s/%s", (int)pid, e->d_name, what[k]);
			FILE *f = fopen(path, "r");

			if (f && fgets(line, sizeof(line), f))
				snprintf(into[k], size[k], "%.*s", (int)strcspn(line, "\n"), line);
			if (f)
				fclose(f);
		}
		fprintf(stderr, "    thread %s: wchan %s, syscall %s\n", e->d_name, wchan, sys);
	}
	closedir(d);
	if (access("/usr/bin/gdb", X_OK) != 0)
		return;
	fflush(NULL);
	pid_t g = fork();

	if (g == 0) {
		char p[16];
		char *const env[] = { "PATH=/usr/bin:/bin", NULL };   /* gdb without shunt */

		snprintf(p, sizeof(p), "%d", (int)pid);
		dup2(2, 1);
		execle("/usr/bin/timeout", "timeout", "30", "/usr/bin/gdb", "-q", "-batch", "-p", p,
		       "-ex", "thread apply all bt", (char *)NULL, env);
		_exit(127);
	}
	if (g > 0)
		waitpid(g, NULL, 0);
}

/* Waits for pid until the deadline; kills it after. What it ended with is judged here. */
static void reap(pid_t pid, double deadline, int killed_by_us, const char *who, struct totals *t)
{
	int status;

	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			break;
		if (now_sec() > deadline) {
			fprintf(stderr, "round %u: %s %d is still running after %d ms; where its threads are:\n",
				round_no, who, (int)pid, ROUND_MS);
			show_hang(pid);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			fprintf(stderr, "round %u: %s %d still running after %d ms: a hang\n", round_no, who,
				(int)pid, ROUND_MS);
			t->hangs++;
			return;
		}
		sleep_ms(1);
	}
	if (WIFSIGNALED(status) && !(WTERMSIG(status) == SIGKILL && killed_by_us)) {
		fprintf(stderr, "round %u: %s %d died of signal %d\n", round_no, who, (int)pid, WTERMSIG(status));
		t->crashes++;
	} else if (WIFEXITED(status) && WEXITSTATUS(status) == EXIT_STALL) {
		fprintf(stderr, "round %u: %s %d found no server within %d ms\n", round_no, who, (int)pid, WAIT_MS);
		t->hangs++;
	} else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
		fprintf(stderr, "round %u: %s %d failed (exit %d)\n", round_no, who, (int)pid, WEXITSTATUS(status));
		t->errors++;
	}
}

/* The server's record of a client's connection: its port and the client's socket. The last
 * one: a connection of a killed client that the server accepted after a new connection had
 * taken the same port found the new one's socket too, and was accepted before it. */
static const struct rec *server_rec(const struct rec *c)
{
	const struct rec *found = NULL;

	for (int i = 0; i < sh->nsrec && i < MAX_RECS; i++)
		if (sh->srec[i].used && sh->srec[i].port == c->port && c->inode &&
		    sh->srec[i].peer_inode == c->inode)
			found = &sh->srec[i];
	return found;
}

/* One direction as its receiver saw it; the sender's process or the receiver's own close
 * may have cut it short (cut), otherwise every byte and then EOF. */
static const char *const how_names[] = { "poll", "blocking recv", "epoll" };
static const char *const end_names[] = { "none", "EOF", "ECONNRESET", "stall", "error", "no connect" };

static void judge(const struct rec *r, const struct rec *other, bool cut, const char *dir, int killed,
		  struct totals *t)
{
	t->bytes += r->got_in;
	if (r->bad_at >= 0) {
		fprintf(stderr, "round %u port %d %s (sock %llu, sender's %llu): wrong byte at stream offset %lld (%s, %s; "
			"killed: %s)\n", round_no, r->port, dir, r->inode, other ? other->inode : 0ull, r->bad_at,
			how_names[r->how], r->accelerated ? "accelerated" : "kernel TCP",
			killed == -2 ? "nobody" : killed == -1 ? "the server" : "a client");
		t->wrong++;
		return;
	}
	if (r->end_in == END_STALL) {
		static const char *const tcp_states[] = { "?", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1",
			"FIN_WAIT2", "TIME_WAIT", "CLOSE", "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING" };
		int st = r->stall_tcp_state;

		fprintf(stderr, "round %u port %d %s (sock %llu, sender's %llu): no progress for %d ms after %llu of %llu "
			"bytes (%s, %s; killed: %s; the sender sent %llu, error %d; at the stall: path %s, kernel socket %s "
			"with %d bytes queued)\n", round_no, r->port, dir, r->inode, other ? other->inode : 0ull, WAIT_MS,
			(unsigned long long)r->got_in, (unsigned long long)r->expect_in, how_names[r->how],
			r->accelerated ? "accelerated" : "kernel TCP",
			killed == -2 ? "nobody" : killed == -1 ? "the server" : "a client",
			other ? (unsigned long long)other->sent_out : 0ull, other ? other->err_out : 0,
			r->stall_path[0] ? r->stall_path : "?",
			st > 0 && st < (int)(sizeof(tcp_states) / sizeof(tcp_states[0])) ? tcp_states[st]
			: st == -2 ? "without a peer address" : "not in the kernel's table",
			r->stall_rqueue);
		t->hangs++;
		return;
	}
	if (cut) {
		if (r->end_in != END_EOF && r->end_in != END_RESET && r->end_in != END_NONE) {
			fprintf(stderr, "round %u port %d %s: cut short with %s (errno %d)\n", round_no, r->port, dir,
				end_names[r->end_in], r->err_in);
			t->errors++;
		}
		return;
	}
	if (r->got_in != r->expect_in || r->end_in != END_EOF) {
		fprintf(stderr, "round %u port %d %s (sock %llu, sender's %llu): %llu of %llu bytes, then %s (errno %d; "
			"%s, %s; the sender sent %llu, error %d, %s)\n", round_no, r->port, dir, r->inode,
			other ? other->inode : 0ull, (unsigned long long)r->got_in,
			(unsigned long long)r->expect_in, end_names[r->end_in], r->err_in, how_names[r->how],
			r->accelerated ? "accelerated" : "kernel TCP", other ? (unsigned long long)other->sent_out : 0ull,
			other ? other->err_out : 0, other && other->accelerated ? "accelerated" : "kernel TCP");
		t->lost++;
	}
}

static void one_round(struct totals *t)
{
	pid_t cpid[MAX_CLIENTS], spid;
	int killed = -2;   /* -1 the server, i client i, -2 nobody */
	uint64_t rnd = pattern_word(round_no, 1234);

	memset(sh, 0, sizeof(*sh));
	spid = spawn(run_server, 0);
	for (int i = 0; i < clients; i++)
		cpid[i] = spawn(chaos_client, i);
	if (rnd % 2) {
		killed = (int)((rnd >> 8) % (unsigned)(clients + 1)) - 1;
		sleep_ms((int)((rnd >> 16) % 120));
		kill(killed < 0 ? spid : cpid[killed], SIGKILL);
		round_killed[round_no % (sizeof(round_killed) / sizeof(round_killed[0]))] = true;
		if (killed < 0)
			__atomic_store_n(&sh->server_gone, 1, __ATOMIC_RELEASE);
		t->kills++;
	}
	double deadline = now_sec() + ROUND_MS / 1000.0;

	for (int i = 0; i < clients; i++)
		reap(cpid[i], deadline, killed == i, "client", t);
	__atomic_store_n(&sh->clients_done, 1, __ATOMIC_RELEASE);
	reap(spid, deadline, killed == -1, "server", t);
	t->raw_clones += (unsigned long long)__atomic_load_n(&sh->raw_clones, __ATOMIC_ACQUIRE);

	for (int i = 0; i < clients * conns; i++) {
		const struct rec *c = &sh->crec[i];

		if (!c->used)
			continue;   /* its client was killed before it got there */
		bool client_killed = killed == i / conns, server_killed = killed == -1;

		t->conns++;
		t->accelerated += (unsigned long long)c->accelerated;
		if (c->end_in == END_NO_CONNECT) {
			if (!server_killed) {
				fprintf(stderr, "round %u: connect failed: %s\n", round_no,
					c->err_in ? strerror(c->err_in) : "connected to itself");
				t->errors++;
			}
			continue;
		}
		const struct rec *s = c->port ? server_rec(c) : NULL;

		/* server to client: cut if the server died, or the client stopped reading early */
		if (!client_killed)
			judge(c, s, server_killed || c->early_close, "server->client", killed, t);
		if (s)
			judge(s, c, client_killed || server_killed || c->early_close, "client->server", killed, t);
		else if (!client_killed && !server_killed && c->port) {
			fprintf(stderr, "round %u port %d: the server never took the connection\n", round_no, c->port);
			t->lost++;
		}
	}
}

static const struct proc *proc_of(pid_t pid)
{
	for (int i = 0; i < nprocs; i++)
		if (procs[i].pid == pid)
			return &procs[i];
	return NULL;
}

/* The names in /dev/shm before the run: pids are reused, so a file of an earlier process
 * that had one of our pids is not ours. */
static char **before_run;
static size_t nbefore;

static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void remember_names(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	size_t cap = 0;

	if (!d)
		return;
	while ((e = readdir(d)) != NULL) {
		if (nbefore == cap) {
			cap = cap ? 2 * cap : 256;
			before_run = realloc(before_run, cap * sizeof(*before_run));
			CHECK(before_run != NULL, ==, 1);
		}
		before_run[nbefore] = strdup(e->d_name);
		CHECK(before_run[nbefore] != NULL, ==, 1);
		nbefore++;
	}
	closedir(d);
	qsort(before_run, nbefore, sizeof(*before_run), name_cmp);
}

static bool was_there(const char *name)
{
	return nbefore && bsearch(&name, before_run, nbefore, sizeof(*before_run), name_cmp) != NULL;
}

struct leftovers {
	int all;          /* files of this run's processes */
	int after_kill;   /* ... of a round in which a process was killed */
};

/*
 * Files in /dev/shm of this run's processes: segments (shunt-UID-PID-N-RANDOM, and their
 * -back and -wN companions) and shunt stat's tables (shunt-UID-NETNS-PID.fds).
 * A SIGKILL between the making of a segment and the posting of its offer in the registry
 * (or between the end of the record and the unlink, at a close) leaves a file that no record
 * names, which no sweep finds yet: issue 16, item 6, is to sweep segments by the pid in their
 * names. Those are counted apart, as left after a kill, and fail the run only with
 * --strict-leftovers; any other file of the run fails it.
 */
static struct leftovers leftovers(bool print)
{
	struct leftovers l = { 0, 0 };
	char pre[32];
	DIR *d = opendir("/dev/shm");
	struct dirent *e;

	if (!d)
		return l;
	snprintf(pre, sizeof(pre), "shunt-%u-", (unsigned)geteuid());
	while ((e = readdir(d)) != NULL) {
		const char *name = e->d_name;
		const struct proc *p = NULL;
		long long a, b;

		if (strncmp(name, pre, strlen(pre)) != 0 || was_there(name))
			continue;
		name += strlen(pre);
		if (strstr(name, ".fds") && sscanf(name, "%lld-%lld.fds", &a, &b) == 2)
			p = proc_of((pid_t)b);
		else if (sscanf(name, "%lld-%lld-", &a, &b) == 2)
			p = proc_of((pid_t)a);
		if (!p)
			continue;
		bool killed = round_killed[p->round % (sizeof(round_killed) / sizeof(round_killed[0]))];

		l.all++;
		l.after_kill += killed;
		if (print)
			fprintf(stderr, "left in /dev/shm: %s (round %u, %s)\n", e->d_name, p->round,
				killed ? "which had a kill" : "which had no kill");
	}
	closedir(d);
	return l;
}

/* A process under shunt whose first use of the registry sweeps it (its listen). */
static void sweeper(int unused)
{
	int port;

	(void)unused;
	close(tcp_listen(AF_INET, &port));
	_exit(0);
}

int main(int argc, char **argv)
{
	double seconds = 20;
	bool strict_leftovers = false;
	struct totals t = { 0 };

	for (int i = 1; i < argc; i += 2) {
		if (strcmp(argv[i], "--strict-leftovers") == 0) {
			strict_leftovers = true;
			i--;
		} else if (strcmp(argv[i], "--raw-clones") == 0) {
			raw_clone_rounds = true;
			i--;
		} else if (i + 1 >= argc)
			FAIL("%s needs a value", argv[i]);
		else if (strcmp(argv[i], "--seconds") == 0)
			seconds = atof(argv[i + 1]);
		else if (strcmp(argv[i], "--clients") == 0)
			clients = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--conns") == 0)
			conns = atoi(argv[i + 1]);
		else
			FAIL("usage: chaos [--seconds S] [--clients N<=%d] [--conns N<=%d] [--strict-leftovers] "
			     "[--raw-clones]",
			     MAX_CLIENTS, MAX_CONNS);
	}
	CHECK(clients >= 1 && clients <= MAX_CLIENTS && conns >= 1 && conns <= MAX_CONNS, ==, 1);
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(sh != MAP_FAILED, ==, 1);

	remember_names();

	double end = now_sec() + seconds;

	while (now_sec() < end) {
		one_round(&t);
		round_no++;
	}
	struct leftovers before = leftovers(false);

	waitpid(spawn(sweeper, 0), NULL, 0);
	struct leftovers left = leftovers(true);

	printf("chaos: %u rounds, %llu connections (%llu accelerated), %llu bytes checked, %llu kills, "
	       "%llu lost, %llu wrong, %llu crashes, %llu hangs, %llu errors, %d leftovers "
	       "(%d of them after a kill; %d before the sweep), %llu raw clones\n",
	       round_no, t.conns, t.accelerated, t.bytes, t.kills, t.lost, t.wrong, t.crashes, t.hangs, t.errors,
	       left.all, left.after_kill, before.all, t.raw_clones);
	int bad_left = strict_leftovers ? left.all : left.all - left.after_kill;

	return t.lost || t.wrong || t.crashes || t.hangs || t.errors || bad_left ? 1 : 0;
}
