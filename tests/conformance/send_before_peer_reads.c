/* send_before_peer_reads: a send of more than a fresh connection's ring holds, to a peer that
 * reads nothing yet. Kernel TCP's buffers take it at once on loopback (a few MB), so the send
 * finishes and the bytes wait there. Under shunt a ring starts at 16 KiB and grew only while
 * empty, so such a send waited for the reader: a thread that writes to one end of a connection
 * it holds both ends of, and reads the other end only after, hung for ever; a client that sends
 * and closes before its server reads waited for that read. Now a ring whose reader has not
 * caught up grows in place (no unread byte moves) up to SHUNT_RING_SIZE, and the connection
 * stays accelerated. Rounds: one thread writes 600 KiB in 4 KiB writes to one end, then reads
 * the other; a forked client sends 900 KiB in one write and closes, and the server reads only
 * after 200 ms. Across namespaces (crossns, fabric modes) kernel TCP over the veth holds less
 * (about 500 KB each way measured here), so there both rounds move 300 KiB. */
#include "check.h"
#include "net.h"

#include <sys/wait.h>

#define ONE_THREAD (600 * 1024)
#define CLIENT_SENDS (900 * 1024)
#define CROSS (300 * 1024)
#define SEED_ONE 81
#define SEED_CLIENT 82

static char out[CLIENT_SENDS], in[CLIENT_SENDS];

static void one_thread(void)
{
	size_t each = test_crossns() ? CROSS : ONE_THREAD;
	int c, s;

	tcp_pair(AF_INET, &c, &s);
	expect_accelerated(c);
	expect_accelerated(s);
	pattern_fill(SEED_ONE, 0, out, each);
	for (size_t at = 0; at < each; at += 4096)
		xwrite_all(c, out + at, each - at < 4096 ? each - at : 4096);
	xread_exact(s, in, each);
	CHECK_PATTERN(SEED_ONE, 0, in, each);
	expect_stayed_accelerated(c);
	expect_stayed_accelerated(s);
	CHECK_OK(close(c));
	CHECK(read(s, in, 1), ==, 0);
	CHECK_OK(close(s));
}

static void client_first(void)
{
	size_t each = test_crossns() ? CROSS : CLIENT_SENDS;
	int c, s;
	pid_t pid;

	tcp_pair(AF_INET, &c, &s);
	expect_accelerated(c);
	expect_accelerated(s);
	pid = CHECK_OK(fork());
	if (pid == 0) {
		close(s);
		pattern_fill(SEED_CLIENT, 0, out, each);
		xwrite_all(c, out, each);
		CHECK_OK(close(c));
		_exit(0);
	}
	close(c);
	xwait_child_ok(pid);   /* the client's send and close are done before any read here */
	usleep(200 * 1000);
	xread_exact(s, in, each);
	CHECK_PATTERN(SEED_CLIENT, 0, in, each);
	CHECK(read(s, in, 1), ==, 0);
	CHECK_OK(close(s));
}

int main(void)
{
	one_thread();
	client_first();
	PASS();
}
