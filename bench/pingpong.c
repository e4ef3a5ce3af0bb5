/*
 * pingpong: a syscall-heavy TCP round-trip benchmark over 127.0.0.1.
 *
 *   pingpong [-n ROUND_TRIPS] [-s MESSAGE_SIZE] [-w WARMUP_ROUND_TRIPS]
 *
 * The process listens on 127.0.0.1 (any port) and forks: the child
 * connects and echoes every message back; the parent accepts, sends a
 * message of MESSAGE_SIZE bytes with one blocking write(2), reads the
 * echo with blocking read(2) calls, and repeats.  TCP_NODELAY is set on
 * both ends.  After WARMUP round trips it times ROUND_TRIPS of them and
 * prints one line:
 *
 *   size=S n=N total_ns=T rtt_ns=R libshunt=yes|no
 *
 * where R = T / N and libshunt tells whether libshunt.so is mapped into
 * the process (i.e. whether LD_PRELOAD took effect).  Used by
 * bench/overhead.py, which runs it with and without LD_PRELOAD.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static int read_full(int fd, char *b, size_t n)
{
    while (n > 0) {
        ssize_t r = read(fd, b, n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            return 0; /* EOF */
        b += r;
        n -= (size_t)r;
    }
    return 1;
}

static int write_full(int fd, const char *b, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static void nodelay_and_timeout(int fd)
{
    int one = 1;
    struct timeval tv = {120, 0}; /* never hang forever */
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0)
        die("TCP_NODELAY");
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

static int libshunt_mapped(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "libshunt.so"))
            found = 1;
    fclose(f);
    return found;
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = 200000, warmup = 2000;
    size_t size = 1;
    int opt;
    while ((opt = getopt(argc, argv, "n:s:w:")) != -1) {
        switch (opt) {
        case 'n': n = atol(optarg); break;
        case 's': size = (size_t)atol(optarg); break;
        case 'w': warmup = atol(optarg); break;
        default:
            fprintf(stderr, "usage: %s [-n ROUND_TRIPS] [-s SIZE] [-w WARMUP]\n", argv[0]);
            return 2;
        }
    }
    if (n <= 0 || size == 0 || warmup < 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }

    int ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0)
        die("socket");
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0)
        die("bind");
    if (listen(ls, 1) < 0)
        die("listen");
    if (getsockname(ls, (struct sockaddr *)&a, &alen) < 0)
        die("getsockname");

    char *buf = calloc(1, size);
    if (!buf)
        die("calloc");

    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        /* echo side */
        close(ls);
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (c < 0)
            die("socket");
        if (connect(c, (struct sockaddr *)&a, sizeof a) < 0)
            die("connect");
        nodelay_and_timeout(c);
        for (;;) {
            int r = read_full(c, buf, size);
            if (r < 0)
                die("child read");
            if (r == 0)
                break;
            if (write_full(c, buf, size) < 0)
                die("child write");
        }
        close(c);
        _exit(0);
    }

    int c = accept(ls, NULL, NULL);
    if (c < 0)
        die("accept");
    close(ls);
    nodelay_and_timeout(c);
    memset(buf, 'x', size);

    long long t0 = 0;
    for (long i = 0; i < warmup + n; i++) {
        if (i == warmup)
            t0 = now_ns();
        if (write_full(c, buf, size) < 0)
            die("write");
        if (read_full(c, buf, size) <= 0)
            die("read");
    }
    long long total = now_ns() - t0;

    shutdown(c, SHUT_WR);
    close(c);
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "echo child failed\n");
        return 1;
    }
    printf("size=%zu n=%ld total_ns=%lld rtt_ns=%.1f libshunt=%s\n", size, n, total,
           (double)total / (double)n, libshunt_mapped() ? "yes" : "no");
    return 0;
}
