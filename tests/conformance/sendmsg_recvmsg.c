/* sendmsg_recvmsg: sendmsg gathers several iovecs; recvmsg scatters over several iovecs,
 * returns at most their total with msg_flags 0 (TCP never sets MSG_TRUNC), msg_namelen 0
 * and msg_controllen 0; recvfrom reports an address length of 0; an address given to
 * sendto/sendmsg on a connected TCP socket is ignored. */
#include "check.h"
#include "net.h"

int main(void)
{
	char p1[] = "first-", p2[] = "second-", p3[] = "third";
	char r1[4], r2[6], rest[64], ctl[64];
	struct iovec out[3] = { { p1, 6 }, { p2, 7 }, { p3, 5 } };
	struct iovec in[2] = { { r1, sizeof(r1) }, { r2, sizeof(r2) } };
	struct sockaddr_storage name, other;
	socklen_t olen;
	struct msghdr mh = { .msg_iov = out, .msg_iovlen = 3, .msg_flags = 0x7fff };
	int c, s;

	tcp_pair_checked(AF_INET, &c, &s);
	CHECK(sendmsg(c, &mh, 0), ==, 18);
	wait_queued(s, 18);

	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = in;
	mh.msg_iovlen = 2;
	mh.msg_name = &name;
	mh.msg_namelen = sizeof(name);
	mh.msg_control = ctl;
	mh.msg_controllen = sizeof(ctl);
	mh.msg_flags = 0x7fff;
	CHECK(recvmsg(s, &mh, 0), ==, 10);
	CHECK(memcmp(r1, "firs", 4), ==, 0);
	CHECK(memcmp(r2, "t-seco", 6), ==, 0);
	CHECK(mh.msg_flags, ==, 0);
	CHECK(mh.msg_flags & MSG_TRUNC, ==, 0);
	CHECK(mh.msg_namelen, ==, 0);
	CHECK(mh.msg_controllen, ==, 0);

	/* recvmsg with MSG_PEEK, then the rest with recvfrom asking for an address. */
	struct iovec one = { rest, sizeof(rest) };
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &one;
	mh.msg_iovlen = 1;
	CHECK(recvmsg(s, &mh, MSG_PEEK), ==, 8);
	CHECK(mh.msg_flags, ==, 0);
	olen = sizeof(name);
	CHECK(recvfrom(s, rest, sizeof(rest), 0, (struct sockaddr *)&name, &olen), ==, 8);
	CHECK(memcmp(rest, "nd-third", 8), ==, 0);
	CHECK(olen, ==, 0);

	/* A destination address on a connected TCP socket is ignored: the data goes to the peer. */
	olen = loopback_addr(AF_INET, 9, &other);
	CHECK(sendto(s, "to-peer", 7, 0, (struct sockaddr *)&other, olen), ==, 7);
	one = (struct iovec){ "via-msg", 7 };
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &one;
	mh.msg_iovlen = 1;
	mh.msg_name = &other;
	mh.msg_namelen = olen;
	CHECK(sendmsg(s, &mh, 0), ==, 7);
	xread_exact(c, rest, 14);
	CHECK(memcmp(rest, "to-peervia-msg", 14), ==, 0);

	/* Empty queue: EAGAIN with MSG_DONTWAIT. */
	one = (struct iovec){ rest, sizeof(rest) };
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = &one;
	mh.msg_iovlen = 1;
	CHECK_ERRNO(recvmsg(c, &mh, MSG_DONTWAIT), EAGAIN);

	CHECK_OK(close(c));
	CHECK_OK(close(s));
	PASS();
}
