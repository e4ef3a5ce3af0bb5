/*
 * test_registry.c: the host-local registry (src/registry/registry.c).
 *
 * Runs on a private registry in /dev/shm/shunt-<uid>-test-<pid>/, never the
 * real one.  Covers: addresses; listeners (exact, 0.0.0.0, :: dual-stack and
 * v6only, port mismatch, remove only by the owner, dead and reused pids);
 * offers (post, find incl. wildcard client, claim, find by inode, end, the
 * newest wins); reclaiming with channel unlink; full tables; concurrent
 * creation; 4 processes hammering the tables; a process killed while holding
 * the lock; files the registry must refuse.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "registry/registry.h"
#include "registry/registry_file.h"

/* Until transport/channel.c exists the link needs this; the real one,
 * when linked, takes precedence over a weak definition.  Same contract:
 * only names starting with "shunt-", in /dev/shm. */
__attribute__((weak)) void channel_unlink(const char *name)
{
    char path[128];
    if (strncmp(name, "shunt-", 6) != 0)
        return;
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    unlink(path);
}

static char dir[128];

static void reg_path(const char *d, char *out, size_t len)
{
    snprintf(out, len, "%s/shunt-%u-%llu-r%u.reg", d, (unsigned)geteuid(), (unsigned long long)reg_netns(),
             REG_VERSION);
}

static void rm_dir(const char *d)
{
    DIR *dp = opendir(d);
    if (!dp)
        return;
    struct dirent *de;
    char p[512];
    while ((de = readdir(dp)) != NULL) {
        if (de->d_name[0] == '.' && (de->d_name[1] == 0 || (de->d_name[1] == '.' && de->d_name[2] == 0)))
            continue;
        snprintf(p, sizeof p, "%s/%s", d, de->d_name);
        unlink(p);
    }
    closedir(dp);
    rmdir(d);
}

static unsigned dir_entries(const char *d)
{
    DIR *dp = opendir(d);
    CHECK(dp != NULL, ==, 1);
    unsigned n = 0;
    struct dirent *de;
    while ((de = readdir(dp)) != NULL)
        if (de->d_name[0] != '.')
            n++;
    closedir(dp);
    return n;
}

/* An empty registry of our own in d. */
static void fresh_at(const char *d)
{
    char p[256];
    reg_close_for_test();
    reg_path(d, p, sizeof p);
    unlink(p);
    CHECK(reg_open_at(d), ==, 0);
    CHECK(reg_mapped() != NULL, ==, 1);
}

static void fresh(void)
{
    fresh_at(dir);
}

static struct reg_addr A(const char *ip, uint16_t port)
{
    struct reg_addr a;
    if (strchr(ip, ':')) {
        struct sockaddr_in6 s;
        memset(&s, 0, sizeof s);
        s.sin6_family = AF_INET6;
        s.sin6_port = htons(port);
        CHECK(inet_pton(AF_INET6, ip, &s.sin6_addr), ==, 1);
        CHECK(reg_addr_from_sockaddr(&a, (struct sockaddr *)&s, sizeof s), ==, 0);
    } else {
        struct sockaddr_in s;
        memset(&s, 0, sizeof s);
        s.sin_family = AF_INET;
        s.sin_port = htons(port);
        CHECK(inet_pton(AF_INET, ip, &s.sin_addr), ==, 1);
        CHECK(reg_addr_from_sockaddr(&a, (struct sockaddr *)&s, sizeof s), ==, 0);
    }
    return a;
}

static unsigned count_listeners(void)
{
    struct reg_file *f = reg_mapped();
    unsigned n = 0;
    for (unsigned i = 0; i < REG_LISTENERS; i++)
        n += atomic_load(&f->listeners[i].state) != REG_FREE;
    return n;
}

static unsigned count_conns(void)
{
    struct reg_file *f = reg_mapped();
    unsigned n = 0;
    for (unsigned i = 0; i < REG_CONNS; i++)
        n += atomic_load(&f->conns[i].state) != REG_FREE;
    return n;
}

static void wait_ok(pid_t pid)
{
    int st = 0;
    CHECK(waitpid(pid, &st, 0), ==, pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        FAIL("child %d: status 0x%x", (int)pid, st);
}

/* A child that runs fn and exits 0 (a failed CHECK exits it with 1). */
static pid_t child(void (*fn)(void *), void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid, >=, 0);
    if (pid == 0) {
        fn(arg);
        _exit(0);
    }
    return pid;
}

static void run_child(void (*fn)(void *), void *arg)
{
    wait_ok(child(fn, arg));
}

/* A real file in /dev/shm standing for a channel; returns its name. */
static const char *make_channel(char *name, size_t len, int n)
{
    char p[160];
    snprintf(name, len, "shunt-%u-test-%d-chan%d", (unsigned)geteuid(), (int)getpid(), n);
    snprintf(p, sizeof p, "/dev/shm/%s", name);
    int fd = open(p, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    CHECK(fd, >=, 0);
    close(fd);
    return name;
}

static bool channel_exists(const char *name)
{
    char p[160];
    snprintf(p, sizeof p, "/dev/shm/%s", name);
    return access(p, F_OK) == 0;
}

static struct reg_conn conn(uint64_t inode, struct reg_addr client, struct reg_addr server, const char *chan)
{
    struct reg_conn c;
    memset(&c, 0, sizeof c);
    c.client_inode = inode;
    c.client = client;
    c.server = server;
    snprintf(c.channel, sizeof c.channel, "%s", chan);
    c.client_pid = (int32_t)getpid();
    return c;
}

/* ---- addresses ---------------------------------------------------------- */

static void test_addresses(void)
{
    struct reg_addr a = A("10.1.2.3", 8080);
    static const uint8_t mapped[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3 };
    CHECK(memcmp(&a.addr, mapped, 16), ==, 0);
    CHECK(a.port, ==, 8080);

    a = A("fe80::1:2", 443);
    struct in6_addr x;
    inet_pton(AF_INET6, "fe80::1:2", &x);
    CHECK(memcmp(&a.addr, &x, 16), ==, 0);
    CHECK(a.port, ==, 443);

    struct sockaddr_in sin = { .sin_family = AF_INET };
    CHECK(reg_addr_from_sockaddr(&a, (struct sockaddr *)&sin, sizeof sin - 1), ==, -EINVAL);
    struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6 };
    CHECK(reg_addr_from_sockaddr(&a, (struct sockaddr *)&sin6, 23), ==, -EINVAL);
    CHECK(reg_addr_from_sockaddr(&a, (struct sockaddr *)&sin6, 24), ==, 0);
    struct sockaddr un = { .sa_family = AF_UNIX };
    CHECK(reg_addr_from_sockaddr(&a, &un, sizeof un), ==, -EAFNOSUPPORT);

    a = A("127.0.0.1", 1);
    CHECK(reg_addr_is_loopback(&a), ==, 1);
    a = A("127.9.8.7", 1);
    CHECK(reg_addr_is_loopback(&a), ==, 1);
    a = A("::1", 1);
    CHECK(reg_addr_is_loopback(&a), ==, 1);
    a = A("::ffff:127.0.0.1", 1);
    CHECK(reg_addr_is_loopback(&a), ==, 1);
    a = A("10.0.0.1", 1);
    CHECK(reg_addr_is_loopback(&a), ==, 0);
    a = A("::2", 1);
    CHECK(reg_addr_is_loopback(&a), ==, 0);
    a = A("128.0.0.1", 1);
    CHECK(reg_addr_is_loopback(&a), ==, 0);

    CHECK(reg_netns(), !=, 0);
    printf("ok: addresses\n");
}

/* ---- listeners ---------------------------------------------------------- */

static void remove_100(void *arg)
{
    (void)arg;
    reg_listener_remove(100);
}

static void test_listeners(void)
{
    fresh();
    struct reg_addr d;

    /* exact IPv4 */
    d = A("127.0.0.1", 5000);
    CHECK(reg_listener_add(100, &d, false), ==, 0);
    CHECK(reg_listener_match(&d), ==, 1);
    d = A("127.0.0.2", 5000);
    CHECK(reg_listener_match(&d), ==, 0);
    d = A("127.0.0.1", 5001);
    CHECK(reg_listener_match(&d), ==, 0);
    d = A("::1", 5000);
    CHECK(reg_listener_match(&d), ==, 0);

    /* 0.0.0.0: every IPv4 destination, no IPv6 one */
    d = A("0.0.0.0", 5001);
    CHECK(reg_listener_add(101, &d, false), ==, 0);
    d = A("10.1.2.3", 5001);
    CHECK(reg_listener_match(&d), ==, 1);
    d = A("127.0.0.1", 5001);
    CHECK(reg_listener_match(&d), ==, 1);
    d = A("::1", 5001);
    CHECK(reg_listener_match(&d), ==, 0);
    d = A("10.1.2.3", 5002);
    CHECK(reg_listener_match(&d), ==, 0);

    /* :: dual-stack */
    d = A("::", 5002);
    CHECK(reg_listener_add(102, &d, false), ==, 0);
    d = A("::1", 5002);
    CHECK(reg_listener_match(&d), ==, 1);
    d = A("127.0.0.1", 5002);
    CHECK(reg_listener_match(&d), ==, 1);
    d = A("2001:db8::5", 5002);
    CHECK(reg_listener_match(&d), ==, 1);

    /* :: v6only */
    d = A("::", 5003);
    CHECK(reg_listener_add(103, &d, true), ==, 0);
    d = A("::1", 5003);
    CHECK(reg_listener_match(&d), ==, 1);
    d = A("127.0.0.1", 5003);
    CHECK(reg_listener_match(&d), ==, 0);

    /* exact IPv6 */
    d = A("::1", 5004);
    CHECK(reg_listener_add(104, &d, true), ==, 0);
    d = A("::1", 5004);
    CHECK(reg_listener_match(&d), ==, 1);
    d = A("::2", 5004);
    CHECK(reg_listener_match(&d), ==, 0);
    d = A("127.0.0.1", 5004);
    CHECK(reg_listener_match(&d), ==, 0);

    /* exact v4-mapped bound address (an IPv6 socket bound to ::ffff:127.0.0.1) */
    d = A("::ffff:127.0.0.1", 5005);
    CHECK(reg_listener_add(105, &d, false), ==, 0);
    d = A("127.0.0.1", 5005);
    CHECK(reg_listener_match(&d), ==, 1);
    CHECK(count_listeners(), ==, 6);

    /* listen() again on the same socket replaces its entry */
    d = A("127.0.0.1", 5000);
    CHECK(reg_listener_add(100, &d, false), ==, 0);
    CHECK(count_listeners(), ==, 6);
    CHECK(reg_listener_match(&d), ==, 1);

    /* a child closing an inherited listener does not unregister ours */
    run_child(remove_100, NULL);
    CHECK(reg_listener_match(&d), ==, 1);

    reg_listener_remove(101);
    d = A("10.1.2.3", 5001);
    CHECK(reg_listener_match(&d), ==, 0);
    reg_listener_remove(100);
    d = A("127.0.0.1", 5000);
    CHECK(reg_listener_match(&d), ==, 0);
    reg_listener_remove(999);   /* unknown: nothing */
    for (uint64_t i = 102; i <= 105; i++)
        reg_listener_remove(i);
    CHECK(count_listeners(), ==, 0);

    CHECK(reg_listener_add(0, &d, false), ==, -EINVAL);
    CHECK(reg_listener_add(1, NULL, false), ==, -EINVAL);

    /* errno is left alone */
    errno = 4242;
    CHECK(reg_listener_add(106, &d, false), ==, 0);
    CHECK(reg_listener_match(&d), ==, 1);
    reg_listener_remove(106);
    CHECK(errno, ==, 4242);
    printf("ok: listeners\n");
}

static void add_listener_and_die(void *arg)
{
    struct reg_addr d = A("127.0.0.1", 6000);
    CHECK(reg_listener_add(*(uint64_t *)arg, &d, false), ==, 0);
}

struct pipes {
    int ready[2];
    int go[2];
};

static void add_listener_and_wait(void *arg)
{
    struct pipes *p = arg;
    close(p->go[1]);
    struct reg_addr d = A("127.0.0.1", 6001);
    CHECK(reg_listener_add(301, &d, false), ==, 0);
    char c = 1;
    CHECK(write(p->ready[1], &c, 1), ==, 1);
    (void)!read(p->go[0], &c, 1);
}

static void test_dead_listeners(void)
{
    fresh();
    uint64_t inode = 200;
    run_child(add_listener_and_die, &inode);
    CHECK(count_listeners(), ==, 1);
    uint64_t before = reg_mapped()->hdr.reclaimed_listeners;
    struct reg_addr d = A("127.0.0.1", 6000);
    CHECK(reg_listener_match(&d), ==, 0);
    CHECK(count_listeners(), ==, 0);
    CHECK(reg_mapped()->hdr.reclaimed_listeners, ==, before + 1);

    /* the sweep at open removes them too */
    inode = 201;
    run_child(add_listener_and_die, &inode);
    CHECK(count_listeners(), ==, 1);
    reg_close_for_test();
    CHECK(reg_open_at(dir), ==, 0);
    CHECK(count_listeners(), ==, 0);

    /* a live process whose pid was reused by another is dead: the start time
     * recorded does not match */
    struct pipes p;
    CHECK(pipe(p.ready), ==, 0);
    CHECK(pipe(p.go), ==, 0);
    pid_t pid = child(add_listener_and_wait, &p);
    char c;
    CHECK(read(p.ready[0], &c, 1), ==, 1);
    d = A("127.0.0.1", 6001);
    CHECK(reg_listener_match(&d), ==, 1);
    struct reg_file *f = reg_mapped();
    struct reg_listener *l = NULL;
    for (unsigned i = 0; i < REG_LISTENERS; i++)
        if (atomic_load(&f->listeners[i].state) == REG_USED && f->listeners[i].inode == 301)
            l = &f->listeners[i];
    CHECK(l != NULL, ==, 1);
    CHECK(l->pid, ==, pid);
    CHECK(l->owner.start, !=, 0);
    l->owner.start += 1;
    CHECK(reg_listener_match(&d), ==, 0);
    CHECK(count_listeners(), ==, 0);
    close(p.go[1]);
    wait_ok(pid);
    close(p.go[0]);
    close(p.ready[0]);
    close(p.ready[1]);

    /* our own pid with another start time is an earlier process */
    CHECK(reg_listener_add(302, &d, false), ==, 0);
    for (unsigned i = 0; i < REG_LISTENERS; i++)
        if (atomic_load(&f->listeners[i].state) == REG_USED && f->listeners[i].inode == 302)
            f->listeners[i].owner.start ^= 1;
    CHECK(reg_listener_match(&d), ==, 0);
    CHECK(count_listeners(), ==, 0);
    printf("ok: dead listeners\n");
}

static void fill_listeners(void *arg)
{
    (void)arg;
    for (unsigned i = 0; i < REG_LISTENERS; i++) {
        struct reg_addr d = A("127.0.0.1", (uint16_t)(10000 + i));
        CHECK(reg_listener_add(1000 + i, &d, false), ==, 0);
    }
}

static void test_listeners_full(void)
{
    fresh();
    fill_listeners(NULL);
    struct reg_addr d = A("127.0.0.1", 9999);
    CHECK(reg_listener_add(5000, &d, false), ==, -ENOSPC);
    CHECK(count_listeners(), ==, REG_LISTENERS);
    /* replacing an entry of ours still works when full */
    d = A("127.0.0.1", 10000);
    CHECK(reg_listener_add(1000, &d, false), ==, 0);
    CHECK(count_listeners(), ==, REG_LISTENERS);
    for (unsigned i = 0; i < REG_LISTENERS; i++)
        reg_listener_remove(1000 + i);
    CHECK(count_listeners(), ==, 0);

    /* full of dead entries: reclaimed, then it fits */
    run_child(fill_listeners, NULL);
    CHECK(count_listeners(), ==, REG_LISTENERS);
    d = A("127.0.0.1", 9999);
    CHECK(reg_listener_add(5000, &d, false), ==, 0);
    CHECK(count_listeners(), ==, 1);
    CHECK(reg_listener_match(&d), ==, 1);
    reg_listener_remove(5000);
    printf("ok: full listener table\n");
}

/* ---- connection records ------------------------------------------------- */

static void test_offers(void)
{
    fresh();
    char ch1[64], ch4[64];
    make_channel(ch1, sizeof ch1, 1);
    make_channel(ch4, sizeof ch4, 4);
    struct reg_addr cli = A("127.0.0.1", 40000), srv = A("127.0.0.1", 5000);
    struct reg_conn c = conn(1000, cli, srv, ch1), out;
    int side = -1;

    CHECK(reg_conn_post(&c), ==, 0);
    memset(&out, 0x55, sizeof out);
    CHECK(reg_conn_find_offer(&cli, &srv, &out), ==, 0);
    CHECK(out.client_inode, ==, 1000);
    CHECK(out.server_inode, ==, 0);
    CHECK(out.server_pid, ==, 0);
    CHECK(out.client_pid, ==, getpid());
    CHECK(strcmp(out.channel, ch1), ==, 0);
    CHECK(out.client.port, ==, 40000);
    CHECK(out.server.port, ==, 5000);

    /* anything else about the tuple differs: nothing */
    struct reg_addr x = A("127.0.0.1", 40001);
    CHECK(reg_conn_find_offer(&x, &srv, &out), ==, -ENOENT);
    x = A("127.0.0.2", 40000);
    CHECK(reg_conn_find_offer(&x, &srv, &out), ==, -ENOENT);
    x = A("127.0.0.1", 5001);
    CHECK(reg_conn_find_offer(&cli, &x, &out), ==, -ENOENT);
    x = A("127.0.0.2", 5000);
    CHECK(reg_conn_find_offer(&cli, &x, &out), ==, -ENOENT);

    /* a client bound to a wildcard address matches any address with its port */
    struct reg_addr wild4 = A("0.0.0.0", 40002), wild6 = A("::", 40003), srv6 = A("::1", 5002);
    struct reg_conn c2 = conn(1002, wild4, srv, ch1), c3 = conn(1003, wild6, srv6, ch1);
    CHECK(reg_conn_post(&c2), ==, 0);
    CHECK(reg_conn_post(&c3), ==, 0);
    x = A("127.0.0.1", 40002);
    CHECK(reg_conn_find_offer(&x, &srv, &out), ==, 0);
    CHECK(out.client_inode, ==, 1002);
    x = A("127.0.0.1", 40009);
    CHECK(reg_conn_find_offer(&x, &srv, &out), ==, -ENOENT);
    x = A("::1", 40003);
    CHECK(reg_conn_find_offer(&x, &srv6, &out), ==, 0);
    CHECK(out.client_inode, ==, 1003);
    CHECK(reg_conn_end(1002), ==, 1);   /* unclaimed: goes with its client */
    CHECK(reg_conn_end(1003), ==, 1);
    CHECK(reg_conn_end(1003), ==, 0);

    /* find by inode, before the claim only the client */
    CHECK(reg_conn_find_inode(1000, &out, &side), ==, 0);
    CHECK(side, ==, 0);
    CHECK(out.client_inode, ==, 1000);
    CHECK(reg_conn_find_inode(2000, &out, &side), ==, -ENOENT);
    CHECK(reg_conn_end(2000), ==, 0);

    /* claim */
    CHECK(reg_conn_claimed(1000, 2000, (int32_t)getpid()), ==, 0);
    CHECK(reg_conn_find_offer(&cli, &srv, &out), ==, -ENOENT);
    CHECK(reg_conn_claimed(1000, 2001, (int32_t)getpid()), ==, -EALREADY);
    CHECK(reg_conn_claimed(1999, 2001, (int32_t)getpid()), ==, -ENOENT);
    CHECK(reg_conn_claimed(1000, 0, (int32_t)getpid()), ==, -EINVAL);
    CHECK(reg_conn_find_inode(2000, &out, &side), ==, 0);
    CHECK(side, ==, 1);
    CHECK(out.client_inode, ==, 1000);
    CHECK(out.server_inode, ==, 2000);
    CHECK(out.server_pid, ==, getpid());
    CHECK(strcmp(out.channel, ch1), ==, 0);
    CHECK(reg_conn_find_inode(1000, &out, &side), ==, 0);
    CHECK(side, ==, 0);
    CHECK(out.server_inode, ==, 2000);

    /* ends: the record stays until both have gone (either order) */
    unsigned n = count_conns();
    CHECK(reg_conn_end(1000), ==, 0);
    CHECK(reg_conn_find_inode(1000, &out, &side), ==, -ENOENT);
    CHECK(reg_conn_find_inode(2000, &out, &side), ==, 0);
    CHECK(side, ==, 1);
    CHECK(out.client_inode, ==, 0);
    CHECK(count_conns(), ==, n);
    /* a half-ended claimed record is no offer again */
    CHECK(reg_conn_find_offer(&cli, &srv, &out), ==, -ENOENT);
    CHECK(reg_conn_end(2000), ==, 1);
    CHECK(count_conns(), ==, n - 1);
    CHECK(reg_conn_find_inode(2000, &out, &side), ==, -ENOENT);
    CHECK(reg_conn_end(2000), ==, 0);
    /* unlinking is the caller's, on true (registry.h) */
    CHECK(channel_exists(ch1), ==, 1);
    channel_unlink(ch1);
    CHECK(channel_exists(ch1), ==, 0);

    /* server end first */
    struct reg_conn c4 = conn(1004, cli, srv, ch4);
    CHECK(reg_conn_post(&c4), ==, 0);
    CHECK(reg_conn_claimed(1004, 2004, (int32_t)getpid()), ==, 0);
    CHECK(reg_conn_end(2004), ==, 0);
    CHECK(reg_conn_find_inode(1004, &out, &side), ==, 0);
    CHECK(reg_conn_end(1004), ==, 1);
    channel_unlink(ch4);

    /* several offers for one tuple (a leftover): the newest wins */
    struct reg_conn old = conn(1005, cli, srv, "shunt-x-old"), young = conn(1006, cli, srv, "shunt-x-new");
    CHECK(reg_conn_post(&old), ==, 0);
    CHECK(reg_conn_post(&young), ==, 0);
    CHECK(reg_conn_find_offer(&cli, &srv, &out), ==, 0);
    CHECK(out.client_inode, ==, 1006);
    CHECK(reg_conn_end(1006), ==, 1);
    CHECK(reg_conn_find_offer(&cli, &srv, &out), ==, 0);
    CHECK(out.client_inode, ==, 1005);
    CHECK(reg_conn_end(1005), ==, 1);
    CHECK(count_conns(), ==, 0);

    /* bad records */
    struct reg_conn bad = conn(0, cli, srv, "shunt-x");
    CHECK(reg_conn_post(&bad), ==, -EINVAL);
    bad = conn(1, cli, srv, "");
    CHECK(reg_conn_post(&bad), ==, -EINVAL);
    bad = conn(1, cli, srv, "shunt-x");
    memset(bad.channel, 'a', sizeof bad.channel);
    CHECK(reg_conn_post(&bad), ==, -EINVAL);
    CHECK(reg_conn_post(NULL), ==, -EINVAL);
    CHECK(reg_conn_find_inode(0, &out, &side), ==, -EINVAL);
    printf("ok: offers\n");
}

struct dead_post {
    uint64_t inode;
    const char *chan;
    bool claim;
};

static void post_and_die(void *arg)
{
    struct dead_post *d = arg;
    struct reg_conn c = conn(d->inode, A("127.0.0.1", 41000), A("127.0.0.1", 5000), d->chan);
    CHECK(reg_conn_post(&c), ==, 0);
    if (d->claim)
        CHECK(reg_conn_claimed(d->inode, d->inode + 1, (int32_t)getpid()), ==, 0);
}

static void test_conn_reclaim(void)
{
    fresh();
    char ch1[64], ch2[64], ch3[64];
    make_channel(ch1, sizeof ch1, 11);
    make_channel(ch2, sizeof ch2, 12);
    make_channel(ch3, sizeof ch3, 13);

    /* an offer of a dead client, a record both of whose processes died, and
     * a record whose client died but whose server (we) lives */
    struct dead_post a = { 3000, ch1, false }, b = { 3010, ch2, true }, c = { 3020, ch3, false };
    run_child(post_and_die, &a);
    run_child(post_and_die, &b);
    run_child(post_and_die, &c);
    CHECK(reg_conn_claimed(3020, 3021, (int32_t)getpid()), ==, 0);
    CHECK(count_conns(), ==, 3);
    uint64_t before = reg_mapped()->hdr.reclaimed_conns;

    reg_close_for_test();
    CHECK(reg_open_at(dir), ==, 0);     /* the sweep at open */
    CHECK(count_conns(), ==, 1);
    CHECK(reg_mapped()->hdr.reclaimed_conns, ==, before + 2);
    CHECK(channel_exists(ch1), ==, 0);
    CHECK(channel_exists(ch2), ==, 0);
    CHECK(channel_exists(ch3), ==, 1);
    struct reg_conn out;
    int side;
    CHECK(reg_conn_find_inode(3021, &out, &side), ==, 0);
    CHECK(side, ==, 1);
    CHECK(reg_conn_end(3021), ==, 0);   /* the (dead) client end is still recorded */
    reg_close_for_test();
    CHECK(reg_open_at(dir), ==, 0);
    CHECK(count_conns(), ==, 0);
    CHECK(channel_exists(ch3), ==, 0);
    printf("ok: records of dead processes reclaimed, channels unlinked\n");
}

static void fill_conns(void *arg)
{
    const char *chan = arg;
    for (unsigned i = 0; i < REG_CONNS; i++) {
        struct reg_conn c = conn(100000 + i, A("127.0.0.1", (uint16_t)(1024 + i)), A("127.0.0.1", 5000), chan);
        CHECK(reg_conn_post(&c), ==, 0);
    }
}

static void test_conns_full(void)
{
    fresh();
    char chan[64];
    snprintf(chan, sizeof chan, "shunt-%u-test-%d-none", (unsigned)geteuid(), (int)getpid());
    fill_conns(chan);
    struct reg_conn c = conn(99, A("127.0.0.1", 999), A("127.0.0.1", 5000), chan);
    CHECK(reg_conn_post(&c), ==, -ENOSPC);
    CHECK(count_conns(), ==, REG_CONNS);
    for (unsigned i = 0; i < REG_CONNS; i++)
        CHECK(reg_conn_end(100000 + i), ==, 1);
    CHECK(count_conns(), ==, 0);

    run_child(fill_conns, chan);
    CHECK(count_conns(), ==, REG_CONNS);
    CHECK(reg_conn_post(&c), ==, 0);
    CHECK(count_conns(), ==, 1);
    CHECK(reg_conn_end(99), ==, 1);
    printf("ok: full record table\n");
}

/* ---- processes at once -------------------------------------------------- */

#define HAMMER_PROCS 4
#define HAMMER_OPS 2000
#define HAMMER_WINDOW 64

static void hammer(void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg;
    uint64_t base = ((uint64_t)(k + 1) << 40);
    char chan[64];
    struct reg_conn out;
    int side;

    for (unsigned i = 0; i < HAMMER_OPS + HAMMER_WINDOW; i++) {
        if (i < HAMMER_OPS) {
            uint64_t ino = base + i;
            snprintf(chan, sizeof chan, "shunt-hammer-%u-%u", k, i);
            struct reg_addr cli = A("127.0.0.1", (uint16_t)(20000 + k * 5000 + i));
            struct reg_addr srv = A("127.0.0.1", (uint16_t)(7000 + k));
            struct reg_conn c = conn(ino, cli, srv, chan);
            CHECK(reg_conn_post(&c), ==, 0);
            CHECK(reg_conn_find_offer(&cli, &srv, &out), ==, 0);
            CHECK(out.client_inode, ==, ino);
            CHECK(strcmp(out.channel, chan), ==, 0);
            CHECK(reg_conn_claimed(ino, ino | (1ull << 39), (int32_t)getpid()), ==, 0);

            struct reg_addr l = A("127.0.0.1", (uint16_t)(3000 + k));
            CHECK(reg_listener_add(base + i, &l, false), ==, 0);
            CHECK(reg_listener_match(&l), ==, 1);
            if (i >= 8)
                reg_listener_remove(base + i - 8);
        }
        if (i >= HAMMER_WINDOW) {
            /* the record posted HAMMER_WINDOW rounds ago: still there, exactly once */
            uint64_t ino = base + i - HAMMER_WINDOW;
            unsigned j = i - HAMMER_WINDOW;
            snprintf(chan, sizeof chan, "shunt-hammer-%u-%u", k, j);
            CHECK(reg_conn_find_inode(ino, &out, &side), ==, 0);
            CHECK(side, ==, 0);
            CHECK(out.server_inode, ==, ino | (1ull << 39));
            CHECK(strcmp(out.channel, chan), ==, 0);
            CHECK(reg_conn_find_inode(ino | (1ull << 39), &out, &side), ==, 0);
            CHECK(side, ==, 1);
            if (j & 1) {
                CHECK(reg_conn_end(ino), ==, 0);
                CHECK(reg_conn_end(ino | (1ull << 39)), ==, 1);
            } else {
                CHECK(reg_conn_end(ino | (1ull << 39)), ==, 0);
                CHECK(reg_conn_end(ino), ==, 1);
            }
            CHECK(reg_conn_find_inode(ino, &out, &side), ==, -ENOENT);
            CHECK(reg_conn_end(ino), ==, 0);
        }
    }
    for (unsigned i = HAMMER_OPS - 8; i < HAMMER_OPS; i++)
        reg_listener_remove(base + i);
    struct reg_addr l = A("127.0.0.1", (uint16_t)(3000 + k));
    CHECK(reg_listener_match(&l), ==, 0);
}

static void test_hammer(void)
{
    fresh();
    uint64_t seq0 = reg_mapped()->hdr.conn_seq;
    pid_t pids[HAMMER_PROCS];
    for (unsigned k = 0; k < HAMMER_PROCS; k++)
        pids[k] = child(hammer, (void *)(uintptr_t)k);
    for (unsigned k = 0; k < HAMMER_PROCS; k++)
        wait_ok(pids[k]);
    CHECK(count_conns(), ==, 0);
    CHECK(count_listeners(), ==, 0);
    CHECK(reg_mapped()->hdr.conn_seq, ==, seq0 + HAMMER_PROCS * HAMMER_OPS);
    CHECK(reg_mapped()->hdr.recoveries, ==, 0);
    printf("ok: %d processes x %d records\n", HAMMER_PROCS, HAMMER_OPS);
}

/* Processes starting at once all create-or-open the same registry and end
 * up in one file. */
#define OPENERS 8

struct openers {
    const char *dir;
    int go[2];
    int done[2];
    int exit[2];
};

static void opener(void *arg)
{
    struct openers *o = arg;
    char c;
    close(o->go[1]);
    CHECK(read(o->go[0], &c, 1), ==, 0);        /* everyone released at once */
    CHECK(reg_open_at(o->dir), ==, 0);
    struct reg_addr d = A("127.0.0.1", 8000);
    CHECK(reg_listener_add((uint64_t)getpid(), &d, false), ==, 0);
    c = 1;
    CHECK(write(o->done[1], &c, 1), ==, 1);
    close(o->exit[1]);
    (void)!read(o->exit[0], &c, 1);             /* stay alive until counted */
}

static void test_concurrent_create(bool named)
{
    char d[160];
    snprintf(d, sizeof d, "%s/create%d", dir, named);
    rm_dir(d);
    CHECK(mkdir(d, 0700), ==, 0);
    reg_close_for_test();
    reg_test_named_tmp = named;

    struct openers o = { .dir = d };
    CHECK(pipe(o.go), ==, 0);
    CHECK(pipe(o.done), ==, 0);
    CHECK(pipe(o.exit), ==, 0);
    pid_t pids[OPENERS];
    for (int k = 0; k < OPENERS; k++)
        pids[k] = child(opener, &o);
    close(o.go[0]);
    close(o.go[1]);                              /* go */
    char c;
    for (int k = 0; k < OPENERS; k++)
        CHECK(read(o.done[0], &c, 1), ==, 1);

    CHECK(reg_open_at(d), ==, 0);
    CHECK(count_listeners(), ==, OPENERS);
    struct reg_file *f = reg_mapped();
    for (int k = 0; k < OPENERS; k++) {
        bool seen = false;
        for (unsigned i = 0; i < REG_LISTENERS; i++)
            seen |= atomic_load(&f->listeners[i].state) == REG_USED && f->listeners[i].pid == pids[k];
        CHECK(seen, ==, 1);
    }
    close(o.exit[0]);
    close(o.exit[1]);
    for (int k = 0; k < OPENERS; k++)
        wait_ok(pids[k]);
    close(o.done[0]);
    close(o.done[1]);

    /* one file, 0600, ours, of the right size; no temporary left behind */
    CHECK(dir_entries(d), ==, 1);
    char p[256];
    reg_path(d, p, sizeof p);
    struct stat st;
    CHECK(lstat(p, &st), ==, 0);
    CHECK(S_ISREG(st.st_mode), ==, 1);
    CHECK(st.st_mode & 07777, ==, 0600);
    CHECK(st.st_uid, ==, geteuid());
    CHECK(st.st_size, ==, (long long)REG_FILE_SIZE);

    reg_close_for_test();
    reg_test_named_tmp = false;
    rm_dir(d);
    CHECK(reg_open_at(dir), ==, 0);
    printf("ok: %d processes create one registry (%s)\n", OPENERS, named ? "named temporary" : "O_TMPFILE");
}

/* ---- a process killed while holding the lock ---------------------------- */

struct locker {
    int ready[2];
    uint64_t clear_inode;   /* nonzero: die in the middle of ending this record */
};

static void lock_and_hang(void *arg)
{
    struct locker *l = arg;
    struct reg_file *f = reg_mapped();
    CHECK(pthread_mutex_lock(&f->hdr.lock), ==, 0);
    if (l->clear_inode) {
        /* what reg_conn_end does before it frees the record: both ends
         * cleared, the state not yet */
        for (unsigned i = 0; i < REG_CONNS; i++) {
            struct reg_conn_ent *e = &f->conns[i];
            if (atomic_load(&e->state) != REG_FREE && e->c.client_inode == l->clear_inode) {
                e->c.client_inode = 0;
                e->c.server_inode = 0;
            }
        }
        /* and a record half written into a free slot */
        struct reg_conn_ent *e = &f->conns[REG_CONNS - 1];
        CHECK(atomic_load(&e->state), ==, REG_FREE);
        e->c.client_inode = 777;
        e->c.server_inode = 778;
    }
    char c = 1;
    CHECK(write(l->ready[1], &c, 1), ==, 1);
    for (;;)
        pause();
}

static void test_owner_dead(void)
{
    fresh();
    struct locker l = { .clear_inode = 0 };
    CHECK(pipe(l.ready), ==, 0);
    pid_t pid = child(lock_and_hang, &l);
    char c;
    CHECK(read(l.ready[0], &c, 1), ==, 1);

    /* held by a live process: a bounded wait, then a refusal */
    int saved_timeout = reg_lock_timeout_ms;
    reg_lock_timeout_ms = 300;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct reg_addr d = A("127.0.0.1", 8100);
    CHECK(reg_listener_add(800, &d, false), ==, -ETIMEDOUT);
    CHECK(reg_listener_match(&d), ==, 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    CHECK(ms, >=, 550);
    CHECK(ms, <, 3000);
    reg_lock_timeout_ms = saved_timeout;

    /* killed while holding it: the next operation takes it over */
    uint64_t rec = reg_mapped()->hdr.recoveries;
    CHECK(kill(pid, SIGKILL), ==, 0);
    int st;
    CHECK(waitpid(pid, &st, 0), ==, pid);
    CHECK(WIFSIGNALED(st), ==, 1);
    CHECK(reg_listener_add(800, &d, false), ==, 0);
    CHECK(reg_mapped()->hdr.recoveries, ==, rec + 1);
    CHECK(reg_listener_match(&d), ==, 1);
    reg_listener_remove(800);
    CHECK(reg_listener_match(&d), ==, 0);

    /* killed in the middle of updates: a record left with no end and a half
     * written one are both harmless, and the first goes at the next sweep */
    char ch[64];
    make_channel(ch, sizeof ch, 21);
    struct reg_conn cr = conn(900, A("127.0.0.1", 41900), A("127.0.0.1", 5000), ch), out;
    CHECK(reg_conn_post(&cr), ==, 0);
    CHECK(reg_conn_claimed(900, 901, (int32_t)getpid()), ==, 0);
    l.clear_inode = 900;
    pid = child(lock_and_hang, &l);
    CHECK(read(l.ready[0], &c, 1), ==, 1);
    CHECK(kill(pid, SIGKILL), ==, 0);
    CHECK(waitpid(pid, &st, 0), ==, pid);
    int side;
    CHECK(reg_conn_find_inode(777, &out, &side), ==, -ENOENT);
    CHECK(reg_conn_find_inode(778, &out, &side), ==, -ENOENT);
    CHECK(reg_conn_find_inode(900, &out, &side), ==, -ENOENT);
    CHECK(reg_conn_find_inode(901, &out, &side), ==, -ENOENT);
    CHECK(reg_mapped()->hdr.recoveries, ==, rec + 2);
    CHECK(count_conns(), ==, 1);
    reg_close_for_test();
    CHECK(reg_open_at(dir), ==, 0);
    CHECK(count_conns(), ==, 0);
    CHECK(channel_exists(ch), ==, 0);
    close(l.ready[0]);
    close(l.ready[1]);
    printf("ok: lock held by a stopped process, then by a dead one\n");
}

/* ---- files the registry refuses ----------------------------------------- */

static void put_file(const char *p, mode_t mode, off_t size, const void *content, size_t len)
{
    unlink(p);
    int fd = open(p, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    CHECK(fd, >=, 0);
    CHECK(fchmod(fd, mode), ==, 0);
    CHECK(ftruncate(fd, size), ==, 0);
    if (content)
        CHECK(pwrite(fd, content, len, 0), ==, (long long)len);
    close(fd);
}

static void test_refusals(void)
{
    char d[160], p[256], good[256];
    snprintf(d, sizeof d, "%s/refuse", dir);
    rm_dir(d);
    CHECK(mkdir(d, 0700), ==, 0);
    reg_path(d, p, sizeof p);

    /* a genuine one to copy from */
    reg_close_for_test();
    CHECK(reg_open_at(d), ==, 0);
    struct reg_header hdr = reg_mapped()->hdr;
    reg_close_for_test();
    snprintf(good, sizeof good, "%s/good", d);
    CHECK(rename(p, good), ==, 0);

    put_file(p, 0644, (off_t)REG_FILE_SIZE, &hdr, sizeof hdr);
    CHECK(reg_open_at(d), ==, -EPERM);
    put_file(p, 0600, 4096, &hdr, sizeof hdr);
    CHECK(reg_open_at(d), ==, -EPROTO);
    put_file(p, 0600, (off_t)REG_FILE_SIZE, NULL, 0);          /* no magic */
    CHECK(reg_open_at(d), ==, -EPROTO);
    struct reg_header h2 = hdr;
    h2.version = REG_VERSION + 1;
    put_file(p, 0600, (off_t)REG_FILE_SIZE, &h2, sizeof h2);
    CHECK(reg_open_at(d), ==, -EPROTO);
    h2 = hdr;
    h2.netns ^= 1;
    put_file(p, 0600, (off_t)REG_FILE_SIZE, &h2, sizeof h2);
    CHECK(reg_open_at(d), ==, -EPROTO);
    unlink(p);
    CHECK(symlink(good, p), ==, 0);
    CHECK(reg_open_at(d), ==, -EPERM);
    unlink(p);
    CHECK(mkfifo(p, 0600), ==, 0);
    CHECK(reg_open_at(d), ==, -EPERM);
    /* operations then fail the same way (they retry the open), and touch nothing */
    struct reg_addr a = A("127.0.0.1", 1);
    CHECK(reg_listener_match(&a), ==, 0);
    CHECK(reg_listener_add(1, &a, false), ==, -EPERM);
    CHECK(reg_conn_end(1), ==, 0);
    CHECK(reg_mapped() == NULL, ==, 1);
    unlink(p);
    if (geteuid() == 0) {
        put_file(p, 0600, (off_t)REG_FILE_SIZE, &hdr, sizeof hdr);
        CHECK(chown(p, 12345, 12345), ==, 0);
        CHECK(reg_open_at(d), ==, -EPERM);
        unlink(p);
    }
    CHECK(reg_mapped() == NULL, ==, 1);

    /* the genuine copy opens */
    CHECK(rename(good, p), ==, 0);
    CHECK(reg_open_at(d), ==, 0);
    reg_close_for_test();

    /* a umask that would strip the owner's bits changes nothing */
    unlink(p);
    mode_t um = umask(0377);
    CHECK(reg_open_at(d), ==, 0);
    umask(um);
    struct stat st;
    CHECK(stat(p, &st), ==, 0);
    CHECK(st.st_mode & 07777, ==, 0600);
    reg_close_for_test();
    rm_dir(d);
    CHECK(reg_open_at(dir), ==, 0);
    printf("ok: refused files\n");
}

int main(void)
{
    snprintf(dir, sizeof dir, "/dev/shm/shunt-%u-test-%d", (unsigned)geteuid(), (int)getpid());
    rm_dir(dir);
    CHECK(mkdir(dir, 0700), ==, 0);

    test_addresses();
    test_listeners();
    test_dead_listeners();
    test_listeners_full();
    test_offers();
    test_conn_reclaim();
    test_conns_full();
    test_hammer();
    test_concurrent_create(false);
    test_concurrent_create(true);
    test_owner_dead();
    test_refusals();

    reg_close_for_test();
    rm_dir(dir);
    PASS();
}
