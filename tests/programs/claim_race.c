/*
 * claim_race.c: both ends of test_claim_race.py.
 *
 *   claim_race server   listens on 127.0.0.1 and prints "port N"; at a line
 *                       on stdin accepts, makes a raw clone (which moves
 *                       every accelerated connection of the process back to
 *                       kernel TCP), sends "hello" and closes; prints "sent"
 *   claim_race client N connects to port N, prints "connected", reads with
 *                       MSG_DONTWAIT (where recv_pause_shim.so holds it),
 *                       then reads to the end; prints "got BYTES"
 *   claim_race fionread N   the same, but asks FIONREAD first (where the
 *                       shim holds it) and prints "fionread COUNT" before
 *   claim_race dying    listens and prints "port N"; at a line on stdin
 *                       accepts (under shunt: claims, and rings the client),
 *                       prints "accepted" and kills itself (SIGKILL: no word
 *                       to the peer but the kernel's end of the socket)
 *   claim_race epoll N  connects to port N, prints "connected", waits in an
 *                       epoll set for EPOLLIN | EPOLLRDHUP (its sleep is where
 *                       the shim holds it, with RECV_PAUSE_AT=epoll) for up to
 *                       3 s, prints "events in rdhup" (those it got) or
 *                       "stalled", then "recv R" (R the bytes, or the errno's
 *                       name)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* A listener on 127.0.0.1, its port printed; then waits for a line on stdin. */
static int listen_and_wait(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    int l = socket(AF_INET, SOCK_STREAM, 0);
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4) || getsockname(l, (struct sockaddr *)&a, &len))
        return -1;
    printf("port %d\n", ntohs(a.sin_port));
    fflush(stdout);
    char line[16];
    return fgets(line, sizeof line, stdin) ? l : -1;
}

static int server(void)
{
    int l = listen_and_wait();
    if (l < 0)
        return 1;
    int s = accept(l, NULL, NULL);
    if (s < 0)
        return 1;
    long pid = syscall(SYS_clone, SIGCHLD, 0L, 0L, 0L, 0L);
    if (pid == 0)
        _exit(0);
    if (pid < 0 || waitpid((pid_t)pid, NULL, 0) < 0)
        return 1;
    if (send(s, "hello", 5, MSG_NOSIGNAL) != 5)
        return 1;
    close(s);
    printf("sent\n");
    fflush(stdout);
    return 0;
}

static int dying(void)
{
    int l = listen_and_wait();
    if (l < 0 || accept(l, NULL, NULL) < 0)
        return 1;
    printf("accepted\n");
    fflush(stdout);
    kill(getpid(), SIGKILL);
    return 1;
}

/* A socket connected to 127.0.0.1:port, "connected" printed; -1 if not. */
static int connect_to(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port = htons((unsigned short)port) };
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a))
        return -1;
    printf("connected\n");
    fflush(stdout);
    return c;
}

static int epoll_client(int port)
{
    int c = connect_to(port), ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.fd = c };
    if (c < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev))
        return 1;
    int n = epoll_wait(ep, &ev, 1, 3000);
    if (n < 0)
        return 1;
    if (n == 0)
        printf("stalled\n");
    else
        printf("events%s%s\n", ev.events & EPOLLIN ? " in" : "", ev.events & EPOLLRDHUP ? " rdhup" : "");
    char b[16];
    ssize_t r = recv(c, b, sizeof b, MSG_DONTWAIT);
    if (r >= 0)
        printf("recv %zd\n", r);
    else
        printf("recv %s\n", errno == EAGAIN ? "EAGAIN" : errno == ECONNRESET ? "ECONNRESET" : strerror(errno));
    return 0;
}

static int client(int port, int fionread)
{
    int c = connect_to(port);
    if (c < 0)
        return 1;
    if (fionread) {
        int q = -1;
        if (ioctl(c, FIONREAD, &q) < 0)
            return 1;
        printf("fionread %d\n", q);
    }
    char got[64];
    size_t n = 0;
    ssize_t r = recv(c, got, sizeof got - 1, MSG_DONTWAIT);
    if (r < 0 && errno != EAGAIN)
        return 1;
    n = r > 0 ? (size_t)r : 0;
    while (r != 0 && n < sizeof got - 1) {
        struct pollfd p = { .fd = c, .events = POLLIN };
        if (poll(&p, 1, 5000) != 1)
            break;
        r = recv(c, got + n, sizeof got - 1 - n, 0);
        if (r < 0)
            return 1;
        n += (size_t)r;
    }
    got[n] = 0;
    printf("got %s\n", got);
    close(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "server"))
        return server();
    if (argc == 2 && !strcmp(argv[1], "dying"))
        return dying();
    if (argc == 3 && !strcmp(argv[1], "epoll"))
        return epoll_client(atoi(argv[2]));
    if (argc == 3 && (!strcmp(argv[1], "client") || !strcmp(argv[1], "fionread")))
        return client(atoi(argv[2]), !strcmp(argv[1], "fionread"));
    fprintf(stderr, "usage: claim_race server|dying | claim_race client|fionread|epoll PORT\n");
    return 2;
}
