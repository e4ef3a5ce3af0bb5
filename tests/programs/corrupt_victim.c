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
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

int main(int argc, char **argv)
{
    /* lenient: the scribble may leave the first connection working (it
     * went back to TCP); only the process and the other connection count */
    int lenient = argc > 1 && strcmp(argv[1], "lenient") == 0;
    int (*accelerated)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "shunt_fd_accelerated");
    int c1, s1, c2, s2;
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
