/*
 * uring.h: a minimal io_uring for the tests of programs that use one, without liburing: set up,
 * map, one operation at a time (IORING_OP_RECV, IORING_OP_SEND, IORING_OP_EPOLL_CTL), every
 * wait for a completion bounded.
 *
 * Owns: struct test_ring and the two ways a program reaches the kernel with it: through libc's
 * syscall() (libuv, Rust's io-uring crate, most C programs), or with the raw `syscall`
 * instruction (liburing as Debian builds it: it imports neither syscall nor mmap), in which
 * case the rings are mapped with the raw instruction too. x86_64 only for the raw one:
 * uring_raw_supported() says whether it is there.
 */
#ifndef SHUNT_TESTS_URING_H
#define SHUNT_TESTS_URING_H

#include "check.h"
#include "net.h"

#include <linux/io_uring.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>

enum uring_entry { URING_LIBC, URING_RAW };

struct test_ring {
	int fd;
	enum uring_entry via;
	struct io_uring_params p;
	unsigned char *sq;              /* the SQ and CQ rings (one mapping: IORING_FEAT_SINGLE_MMAP) */
	size_t sq_len;
	struct io_uring_sqe *sqes;
	size_t sqes_len;
};

static inline int uring_raw_supported(void)
{
#if defined(__x86_64__)
	return 1;
#else
	return 0;
#endif
}

/* The system call n through the way the ring was asked to use: -1 and errno on failure. */
static inline long uring_sys(enum uring_entry via, long n, long a, long b, long c, long d, long e, long f)
{
	if (via == URING_LIBC)
		return syscall(n, a, b, c, d, e, f);
#if defined(__x86_64__)
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	if (ret < 0 && ret > -4096) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
#else
	(void)a; (void)b; (void)c; (void)d; (void)e; (void)f;
	FAIL("the raw system call instruction is only written for x86_64");
#endif
}

static inline void *uring_map(enum uring_entry via, size_t len, int fd, off_t off)
{
	if (via == URING_LIBC)
		return mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, off);
	long r = uring_sys(via, SYS_mmap, 0, (long)len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, off);
	return r == -1 ? MAP_FAILED : (void *)r;
}

/* Maps the rings of an io_uring fd set up with r->p (by this process or another one). */
static inline void uring_map_rings(struct test_ring *r)
{
	size_t sq = r->p.sq_off.array + r->p.sq_entries * sizeof(unsigned);
	size_t cq = r->p.cq_off.cqes + r->p.cq_entries * sizeof(struct io_uring_cqe);

	CHECK(r->p.features & IORING_FEAT_SINGLE_MMAP, !=, 0);
	r->sq_len = sq > cq ? sq : cq;
	r->sq = uring_map(r->via, r->sq_len, r->fd, IORING_OFF_SQ_RING);
	CHECK(r->sq != MAP_FAILED, ==, 1);
	r->sqes_len = r->p.sq_entries * sizeof(struct io_uring_sqe);
	r->sqes = uring_map(r->via, r->sqes_len, r->fd, IORING_OFF_SQES);
	CHECK(r->sqes != MAP_FAILED, ==, 1);
}

/* A new ring of 8 entries. A kernel without io_uring, or one that refuses it (the sysctl
 * kernel.io_uring_disabled, a seccomp profile), is a machine that lacks it for good: a skip. */
static inline void uring_setup(struct test_ring *r, enum uring_entry via)
{
	memset(r, 0, sizeof(*r));
	r->via = via;
	r->fd = (int)uring_sys(via, __NR_io_uring_setup, 8, (long)&r->p, 0, 0, 0, 0);
	if (r->fd == -1 && (errno == ENOSYS || errno == EPERM))
		SKIP("io_uring_setup: %s (no io_uring on this kernel, or refused)", strerror(errno));
	CHECK_OK(r->fd);
	uring_map_rings(r);
}

#define URING_U32(r, off) ((_Atomic unsigned *)(void *)((r)->sq + (off)))

static inline long uring_enter(struct test_ring *r, unsigned submit, unsigned flags)
{
	return uring_sys(r->via, __NR_io_uring_enter, r->fd, submit, 0, flags, 0, 0);
}

/* Submits one operation and waits for its completion, at most NET_WAIT_MS: a hang of the
 * operation is a failure of the test, not of the runner's watchdog. Returns cqe.res. */
static inline int uring_do(struct test_ring *r, const struct io_uring_sqe *op, const char *what)
{
	unsigned tail = atomic_load_explicit(URING_U32(r, r->p.sq_off.tail), memory_order_relaxed);
	unsigned mask = *URING_U32(r, r->p.sq_off.ring_mask);
	unsigned *array = (unsigned *)(void *)(r->sq + r->p.sq_off.array);
	double end = now_sec() + NET_WAIT_MS / 1000.0;

	r->sqes[tail & mask] = *op;
	r->sqes[tail & mask].user_data = 0x5eed;
	array[tail & mask] = tail & mask;
	atomic_store_explicit(URING_U32(r, r->p.sq_off.tail), tail + 1, memory_order_release);
	CHECK(uring_enter(r, 1, 0), ==, 1);
	for (;;) {
		unsigned head = atomic_load_explicit(URING_U32(r, r->p.cq_off.head), memory_order_relaxed);
		unsigned ctail = atomic_load_explicit(URING_U32(r, r->p.cq_off.tail), memory_order_acquire);

		if (head != ctail) {
			struct io_uring_cqe *cqes = (struct io_uring_cqe *)(void *)(r->sq + r->p.cq_off.cqes);
			struct io_uring_cqe c = cqes[head & *URING_U32(r, r->p.cq_off.ring_mask)];

			atomic_store_explicit(URING_U32(r, r->p.cq_off.head), head + 1, memory_order_release);
			CHECK(c.user_data, ==, 0x5eed);
			return c.res;
		}
		if (now_sec() > end)
			FAIL("io_uring %s: no completion after %d ms", what, NET_WAIT_MS);
		sleep_ms(1);
		CHECK_OK(uring_enter(r, 0, IORING_ENTER_GETEVENTS));
	}
}

/* Exactly len bytes received from fd through the ring (IORING_OP_RECV, as often as needed). */
static inline void uring_recv_exact(struct test_ring *r, int fd, void *buf, size_t len)
{
	for (size_t done = 0; done < len;) {
		struct io_uring_sqe op = { .opcode = IORING_OP_RECV, .fd = fd };
		int n;

		op.addr = (uintptr_t)((char *)buf + done);
		op.len = (unsigned)(len - done);
		n = uring_do(r, &op, "recv");
		if (n == -EINTR || n == -EAGAIN)
			continue;
		if (n <= 0)
			FAIL("io_uring recv on fd %d: %d (%s) after %zu of %zu bytes", fd, n,
			     n < 0 ? strerror(-n) : "EOF", done, len);
		done += (size_t)n;
	}
}

/* All of buf sent to fd through the ring (IORING_OP_SEND). */
static inline void uring_send_all(struct test_ring *r, int fd, const void *buf, size_t len)
{
	for (size_t done = 0; done < len;) {
		struct io_uring_sqe op = { .opcode = IORING_OP_SEND, .fd = fd };
		int n;

		op.addr = (uintptr_t)((const char *)buf + done);
		op.len = (unsigned)(len - done);
		n = uring_do(r, &op, "send");
		if (n == -EINTR || n == -EAGAIN)
			continue;
		if (n <= 0)
			FAIL("io_uring send on fd %d: %d (%s)", fd, n, n < 0 ? strerror(-n) : "0");
		done += (size_t)n;
	}
}

/* epoll_ctl(epfd, op, fd, ev) made by the ring (IORING_OP_EPOLL_CTL), as libuv does. */
static inline void uring_epoll_ctl(struct test_ring *r, int epfd, int op, int fd, struct epoll_event *ev)
{
	struct io_uring_sqe o = { .opcode = IORING_OP_EPOLL_CTL, .fd = epfd };

	o.off = (unsigned)fd;
	o.len = (unsigned)op;
	o.addr = (uintptr_t)ev;
	CHECK(uring_do(r, &o, "epoll_ctl"), ==, 0);
}

static inline void uring_close(struct test_ring *r)
{
	munmap(r->sq, r->sq_len);
	munmap(r->sqes, r->sqes_len);
	CHECK_OK(close(r->fd));
}

#endif
