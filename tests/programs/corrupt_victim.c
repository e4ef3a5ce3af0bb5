/*
 * corrupt_victim.c: two accelerated connections in one process; the test
 * scribbles on the first one's shared segment while it is live.  The
 * corrupted connection must fail with ECONNRESET or EIO, the process must
 * not crash, and the second connection must keep working.
 *
 * Protocol on stdout/stdin with tests/integration/test_corruption.py:
 *   prints "ready PID HEAD0 TAIL0 FIN0 DOWN DOWN_TAIL DOWN_TXTAIL BACK_LEN"
 *   (offsets of ring 0's indexes and of the downgrade records in the header)
 *   waits for a line on stdin, then uses both connections and prints a verdict.
 *
 * "shared-lock": the first connection's ends are held by a forked child too,
 * so their locks in the segment are engaged; it prints "ready PID CHILD
 * WAIT_LOCK" (the offset of the server end's wait lock, where the test
 * writes the child's pid: a live holder that never lets go, as a scribble
 * can make it look).  A read on that end then sleeps and must take that
 * lock.  Meanwhile the second connection (not shared) must go on: its
 * reader sleeps between pings, through the process's own wait lock, which
 * the stalled read must not hold.  The stalled read must end with
 * ECONNRESET after the lock's bound, and closing the connection must be
 * quick; it prints "corrupted=ERR other=N stalled_ms=M close_ms=C".
 *
 * "offer-sending": three connections offered and not yet accepted; it
 * prints "ready PID NEG" (the offset of the negotiation word, where the
 * test sets the SENDING bit in each of their segments: a send of another
 * holder's that never ends, as a holder killed in its send or a scribble
 * leaves it).  Then a send on the first, a shutdown of the second and a
 * close of the third must each return (the offer refused after a bounded
 * wait), and the server must read from each, over kernel TCP, exactly
 * what was sent, then the end; it prints "send_ms=S shut_ms=H close_ms=C
 * server=ok" (or what the server read wrong).
 *
 * "dead-drainer": an accelerated connection to a child, which is killed;
 * its side is then marked as in the middle of a drain of doorbells (as a
 * holder killed there leaves it), and this process makes a raw clone,
 * which moves the connection back to kernel TCP.  The move must not wait
 * for that drain: the child's socket is closed, so nobody can be in it.
 * Prints "clone_ms=M read=N" (the clone's time, and what a read then
 * returned: 0, the end).
 *
 * "dead-leaver [read|sent|unread] [kernel]": the same connection, the
 * killed child's side marked as in the middle of its move back to TCP
 * (DOWN_SET, its side, not ready: as a leaver killed there leaves it); a
 * read here must not wait for the leaver's records, whose writer is gone,
 * and meets what a killed peer leaves: the bytes it sent, then EOF, or a
 * reset if it had not read all we sent.  Reads to the end and prints
 * "read_ms=M read=N errno=E got=BYTES" (the last read's answer).  kernel:
 * without shunt, marking nothing.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "transport/channel.h"

static void pair(int *c, int *s)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4) || getsockname(l, (struct sockaddr *)&a, &len)) {
        perror("listener");
        exit(1);
    }
    *c = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(*c, (struct sockaddr *)&a, sizeof a)) {
        perror("connect");
        exit(1);
    }
    *s = accept(l, NULL, NULL);
    if (*s < 0) {
        perror("accept");
        exit(1);
    }
    close(l);
}

static int exchange(int c, int s)
{
    char buf[16];
    if (write(c, "ping", 4) != 4)
        return -errno;
    ssize_t n = read(s, buf, sizeof buf);
    if (n < 0)
        return -errno;
    return n == 4 && !memcmp(buf, "ping", 4) ? 0 : -EBADMSG;
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int c2, s2;
static atomic_bool stop;
static atomic_int pings, ping_errors;

static void *ping_writer(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
        if (write(c2, "ping", 4) != 4)
            atomic_fetch_add(&ping_errors, 1);
    }
    return NULL;
}

static void *ping_reader(void *arg)
{
    (void)arg;
    char buf[64];
    while (!atomic_load(&stop)) {
        ssize_t n = read(s2, buf, sizeof buf);   /* sleeps between pings (SO_RCVTIMEO 2 s) */
        if (n > 0)
            atomic_fetch_add(&pings, 1);
        else
            atomic_fetch_add(&ping_errors, 1);
    }
    return NULL;
}

static int shared_lock(int (*accelerated)(int))
{
    int c1, s1;
    pair(&c1, &s1);
    pid_t child = fork();
    if (child == 0) {
        for (;;)
            pause();   /* holds both ends of the first connection */
    }
    pair(&c2, &s2);
    if (!accelerated(c1) || !accelerated(s1) || !accelerated(c2) || !accelerated(s2)) {
        printf("not accelerated\n");
        return 77;
    }
    if (exchange(c1, s1) || exchange(c2, s2)) {
        printf("exchange before corruption failed\n");
        return 1;
    }
    struct timeval tv = { 2, 0 };
    setsockopt(s2, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    printf("ready %d %d %zu\n", (int)getpid(), (int)child, offsetof(struct chan_hdr, side[1].wait_lock));
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 1;
    pthread_t w, r;
    pthread_create(&r, NULL, ping_reader, NULL);
    pthread_create(&w, NULL, ping_writer, NULL);
    long t0 = now_ms();
    char buf[16];
    ssize_t n = read(s1, buf, sizeof buf);   /* no data: it sleeps, through the scribbled lock */
    int err = n < 0 ? errno : 0;
    long stalled = now_ms() - t0;
    int during = atomic_load(&pings);
    atomic_store(&stop, true);
    pthread_join(w, NULL);
    pthread_join(r, NULL);
    t0 = now_ms();
    close(c1);
    close(s1);
    long closed = now_ms() - t0;
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    printf("corrupted=%s other=%d other_errors=%d stalled_ms=%ld close_ms=%ld\n", n < 0 ? strerror(err) : "data",
           during, atomic_load(&ping_errors), stalled, closed);
    return n < 0 && err == ECONNRESET ? 0 : 1;
}

static int offer_sending(void)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4) || getsockname(l, (struct sockaddr *)&a, &len)) {
        perror("listener");
        return 1;
    }
    int c[3];
    for (int i = 0; i < 3; i++) {
        c[i] = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(c[i], (struct sockaddr *)&a, sizeof a)) {
            perror("connect");
            return 1;
        }
    }
    printf("ready %d %zu\n", (int)getpid(), offsetof(struct chan_hdr, neg));
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 1;
    long t0 = now_ms();
    ssize_t sent = send(c[0], "sent", 4, MSG_NOSIGNAL);
    long send_ms = now_ms() - t0;
    t0 = now_ms();
    int shut = shutdown(c[1], SHUT_WR);
    long shut_ms = now_ms() - t0;
    t0 = now_ms();
    close(c[2]);
    long close_ms = now_ms() - t0;
    if (sent != 4 || shut != 0) {
        printf("send=%zd shutdown=%d: %s\n", sent, shut, strerror(errno));
        return 1;
    }
    close(c[0]);
    const char *want[3] = { "sent", "", "" };
    for (int i = 0; i < 3; i++) {
        int s = accept(l, NULL, NULL);
        char buf[16];
        size_t got = 0;
        ssize_t n;
        while ((n = read(s, buf + got, sizeof buf - got)) > 0)
            got += (size_t)n;
        if (n < 0 || got != strlen(want[i]) || memcmp(buf, want[i], got)) {
            printf("send_ms=%ld shut_ms=%ld close_ms=%ld server=connection %d read %zu bytes, then %zd (%s)\n",
                   send_ms, shut_ms, close_ms, i, got, n, n < 0 ? strerror(errno) : "end");
            return 1;
        }
        close(s);
    }
    close(c[1]);
    printf("send_ms=%ld shut_ms=%ld close_ms=%ld server=ok\n", send_ms, shut_ms, close_ms);
    return 0;
}

/* What the killed child left: "read" (it read all it was sent), "sent"
 * (it sent "zz" more, unread here), "unread" (we sent "w", it never read
 * it).  kernel: the same without shunt (no segment to mark), the answer
 * shunt must give. */
static int dead_peer(bool leaver, const char *left, bool kernel)
{
    bool sent = strcmp(left, "sent") == 0, unread = strcmp(left, "unread") == 0;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4) || getsockname(l, (struct sockaddr *)&a, &len))
        return 1;
    pid_t child = fork();
    if (child == 0) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        char b;
        if (connect(c, (struct sockaddr *)&a, sizeof a) || write(c, "x", 1) != 1 || read(c, &b, 1) != 1 ||
            (sent && write(c, "zz", 2) != 2))
            _exit(1);
        for (;;)
            pause();
    }
    int s = accept(l, NULL, NULL);
    char b;
    int (*accelerated)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
    if (s < 0 || read(s, &b, 1) != 1 || write(s, "y", 1) != 1)
        return 1;
    if (!kernel && (!accelerated || !accelerated(s))) {
        printf("not accelerated\n");
        return 77;
    }
    usleep(100000);   /* the child has read its byte (and sent its own) */
    if (unread && write(s, "w", 1) != 1)
        return 1;
    usleep(unread ? 100000 : 0);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    /* the child's side of the segment (side 0, the client's): mid-drain */
    char seg[512] = "", line[1024];
    FILE *maps = kernel ? NULL : fopen("/proc/self/maps", "r");
    while (maps && fgets(line, sizeof line, maps)) {
        char *p = strstr(line, "/dev/shm/shunt-");
        if (p && strstr(p, "-c")) {
            p[strcspn(p, "\n")] = 0;
            snprintf(seg, sizeof seg, "%s", p);
        }
    }
    if (maps)
        fclose(maps);
    FILE *f = seg[0] ? fopen(seg, "r+b") : NULL;
    unsigned mark = leaver ? DOWN_SET : 1;   /* the client's side: 0 */
    long at = leaver ? (long)offsetof(struct chan_hdr, down) : (long)offsetof(struct chan_hdr, side[0].draining);
    if (!kernel && (!f || fseek(f, at, SEEK_SET) || fwrite(&mark, sizeof mark, 1, f) != 1 || fclose(f))) {
        printf("no segment to mark (%s)\n", seg);
        return 1;
    }
    long t0 = now_ms();
    if (leaver) {
        /* every read until the end: the bytes the child sent, then 0 or
         * an error */
        char got[16] = "";
        size_t n = 0;
        ssize_t r;
        while ((r = read(s, got + n, sizeof got - 1 - n)) > 0)
            n += (size_t)r;
        int err = r < 0 ? errno : 0;
        printf("read_ms=%ld read=%zd errno=%d got=%s\n", now_ms() - t0, r, err, n ? got : "-");
        return 0;
    }
    long pid = syscall(SYS_clone, SIGCHLD, 0L, 0L, 0L, 0L);
    if (pid == 0)
        _exit(0);
    long took = now_ms() - t0;
    if (pid < 0 || waitpid((pid_t)pid, NULL, 0) < 0)
        return 1;
    ssize_t r = read(s, &b, 1);
    printf("clone_ms=%ld read=%zd\n", took, r);
    return 0;
}

int main(int argc, char **argv)
{
    /* lenient: the scribble may leave the first connection working (it
     * went back to TCP); only the process and the other connection count */
    int lenient = argc > 1 && strcmp(argv[1], "lenient") == 0;
    int (*accelerated)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
    if (argc > 1 && (strcmp(argv[1], "dead-drainer") == 0 || strcmp(argv[1], "dead-leaver") == 0))
        return dead_peer(strcmp(argv[1], "dead-leaver") == 0, argc > 2 ? argv[2] : "read",
                         argc > 3 && strcmp(argv[3], "kernel") == 0);
    if (argc > 1 && strcmp(argv[1], "offer-sending") == 0)
        return offer_sending();
    if (argc > 1 && strcmp(argv[1], "shared-lock") == 0) {
        if (!accelerated) {
            printf("not accelerated\n");
            return 77;
        }
        return shared_lock(accelerated);
    }
    int c1, s1;
    pair(&c1, &s1);
    pair(&c2, &s2);
    if (!accelerated || !accelerated(c1) || !accelerated(s1) || !accelerated(c2) || !accelerated(s2)) {
        printf("not accelerated\n");
        return 77;
    }
    if (exchange(c1, s1) || exchange(c2, s2)) {
        printf("exchange before corruption failed\n");
        return 1;
    }
    /* the first connection's segment is the one this process created first */
    printf("ready %d %zu %zu %zu %zu %zu %zu %zu\n", (int)getpid(), offsetof(struct chan_hdr, ring[0].head),
           offsetof(struct chan_hdr, ring[0].tail), offsetof(struct chan_hdr, ring[0].fin),
           offsetof(struct chan_hdr, down), offsetof(struct chan_hdr, down_tail),
           offsetof(struct chan_hdr, down_txtail), offsetof(struct chan_hdr, back_len));
    fflush(stdout);
    char line[64];
    if (!fgets(line, sizeof line, stdin))
        return 1;

    int r1 = exchange(c1, s1);
    int r2 = exchange(c2, s2);
    printf("corrupted=%s other=%s\n", r1 ? strerror(-r1) : "ok", r2 ? strerror(-r2) : "ok");
    if (r1 != -ECONNRESET && r1 != -EIO && !lenient)
        return 1;
    return r2 == 0 ? 0 : 1;
}
