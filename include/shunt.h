/*
 * shunt.h: the query API of libshunt.so.  Programs never need it; tests and
 * tools that want to know what shunt did with an fd look it up with
 * dlsym(RTLD_DEFAULT, "shunt_fd_accelerated"), so they also run without shunt.
 */
#ifndef SHUNT_H
#define SHUNT_H

/* 1 if fd is a connection on an accelerated path, 0 if it is not (kernel
 * TCP, or not a socket shunt manages). */
int shunt_fd_accelerated(int fd);

/* One counter of this end of an accelerated connection, by name, or -1
 * (not accelerated, on the fabric: no channel to count in, unknown name).  Names: "bytes_out", "bytes_in",
 * "sends", "recvs", "doorbells", "sleeps", "zc_sends", "zc_bytes",
 * "zc_off" (why single copy is off: 0 on, 1 EPERM, 2 ENOSYS, 3 other pid
 * namespace, 4 other), "doorbells_held", "ring_size" (bytes of its
 * outgoing ring now), "shm_bytes" (bytes of /dev/shm the segment reserved),
 * "holders" (processes counted as holding this end), "turns_given" (not
 * the end's: how many times the calling thread let others run at an epoll,
 * poll or select after SHUNT_YIELD_US without sleeping), "os_polls_skipped"
 * (not the end's either: how many zero-timeout waits of the calling thread
 * over a mixed set left the kernel's look at the other fds out, within
 * SHUNT_POLL_KERNEL_CALLS and SHUNT_POLL_KERNEL_US). */
long long shunt_fd_counter(int fd, const char *name);
/* The name "object" answers for any fd: 1 if shunt keeps a socket object
 * for it (a socket it may accelerate, or one whose object it still needs),
 * 0 if not (not a socket of shunt's, or a connection on kernel TCP for good
 * kept without one: docs/architecture.md, "Short connections"). */

/* Why fd's connection is on kernel TCP, as `shunt stat` shows it: the key
 * of its fallback reason ("no_listener", "downgraded", "io_uring", ...),
 * "" while it is accelerated or offered, NULL if shunt has no record of a
 * connection at fd.  Valid in the calling thread until its next call. */
const char *shunt_fd_fallback(int fd);

/* How fd's connection moves its bytes now, as `shunt stat` shows it: "shm"
 * (shunt's own rings), "fabric" (the engine: moved, or its hello still to
 * come), "offered", "tcp"; NULL if shunt has no record of a connection at
 * fd.  A static string. */
const char *shunt_fd_path(int fd);

#endif
