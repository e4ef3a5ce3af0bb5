/*
 * test_registry.c: the host-local registry's tables (src/registry/):
 * addresses; listeners (exact, 0.0.0.0, :: dual-stack and v6only, port
 * mismatch, remove only by the owner, dead and reused pids); offers (post,
 * find incl. wildcard client, claim, find by inode, end, the newest wins);
 * reclaiming with channel unlink; full tables.  Processes at once, a holder
 * killed inside the lock and refused files are test_registry_procs.c's.
 */
#include "base/pid_gone.h"
#include "registry_fixture.h"

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

/* The sweep at a process's first open goes at most once per
 * reg_entries_sweep_interval_s for all processes: a second open within it
 * leaves a dead client's offer (a lookup that meets it, or the next sweep
 * due, removes it); once due, the open sweeps it.  Before, every open swept,
 * checking every live process's pid and start time: a process's start cost
 * grew with the processes under shunt. */
static void test_open_sweep_bounded(void)
{
    fresh();
    char ch[64];
    make_channel(ch, sizeof ch, 21);
    reg_close_for_test();
    CHECK(reg_open_at(dir), ==, 0);     /* a sweep now: the next is a second away at least */
    reg_entries_sweep_interval_s = 3600;
    struct dead_post a = { 4000, ch, false };
    run_child(post_and_die, &a);
    uint64_t before = reg_mapped()->hdr.reclaimed_conns;
    reg_close_for_test();
    CHECK(reg_open_at(dir), ==, 0);     /* not due: left */
    CHECK(count_conns(), ==, 1);
    CHECK(reg_mapped()->hdr.reclaimed_conns, ==, before);
    CHECK(channel_exists(ch), ==, 1);
    /* a time ahead of now is no reason to wait (another boot's, a scribble) */
    reg_mapped()->hdr.entries_swept_at = UINT32_MAX;
    reg_close_for_test();
    CHECK(reg_open_at(dir), ==, 0);
    CHECK(count_conns(), ==, 0);
    CHECK(reg_mapped()->hdr.reclaimed_conns, ==, before + 1);
    CHECK(channel_exists(ch), ==, 0);
    reg_entries_sweep_interval_s = 0;
    printf("ok: the sweep at open at most once per interval\n");
}

static void fill_conns(void *arg)
{
    const char *chan = arg;
    for (unsigned i = 0; i < REG_CONNS; i++) {
        struct reg_conn c = conn(100000 + i, A("127.0.0.1", (uint16_t)(1024 + i)), A("127.0.0.1", 5000), chan);
        CHECK(reg_conn_post(&c), ==, 0);
    }
}

/* The count of offers that lets an accept skip the lookup: true while an
 * offer is posted, false once none is (claimed, ended, swept with its dead
 * client); a scribbled count is set right by the next lookup. */
static void test_offers_hint(void)
{
    fresh();
    char ch1[64], ch2[64], ch3[64];
    make_channel(ch1, sizeof ch1, 21);
    make_channel(ch2, sizeof ch2, 22);
    make_channel(ch3, sizeof ch3, 23);
    struct reg_addr cli = A("127.0.0.1", 41000), cli2 = A("127.0.0.1", 41001), srv = A("127.0.0.1", 5000);
    struct reg_conn c1 = conn(4000, cli, srv, ch1), c2 = conn(4001, cli2, srv, ch2), out;

    CHECK(reg_conn_offers_maybe(), ==, false);
    CHECK(reg_conn_post(&c1), ==, 0);
    CHECK(reg_conn_offers_maybe(), ==, true);
    CHECK(reg_conn_claimed(4000, 4100, (int32_t)getpid()), ==, 0);
    CHECK(reg_conn_offers_maybe(), ==, false);   /* claimed: no offer left */

    CHECK(reg_conn_post(&c2), ==, 0);
    c1.client_inode = 4002;
    CHECK(reg_conn_post(&c1), ==, 0);
    CHECK(reg_conn_end(4002), ==, 1);            /* withdrawn */
    CHECK(reg_conn_offers_maybe(), ==, true);    /* 4001 is still there */
    CHECK(reg_conn_end(4001), ==, 1);
    CHECK(reg_conn_offers_maybe(), ==, false);

    /* a scribbled count: too low hides a posted offer (that connection stays
     * on TCP) until the next lookup counts again; too high costs lookups */
    CHECK(reg_conn_post(&c2), ==, 0);
    atomic_store(&reg_mapped()->hdr.offers, 0);
    CHECK(reg_conn_offers_maybe(), ==, false);
    CHECK(reg_conn_find_offer(&cli2, &srv, &out), ==, 0);
    CHECK(reg_conn_offers_maybe(), ==, true);
    CHECK(reg_conn_end(4001), ==, 1);
    atomic_store(&reg_mapped()->hdr.offers, 0xfffffff0u);
    CHECK(reg_conn_offers_maybe(), ==, true);
    CHECK(reg_conn_find_offer(&cli2, &srv, &out), ==, -ENOENT);
    CHECK(reg_conn_offers_maybe(), ==, false);

    /* an offer whose client died goes with the sweep, and the count with it */
    struct dead_post d = { 4010, ch3, false };
    run_child(post_and_die, &d);
    CHECK(reg_conn_offers_maybe(), ==, true);
    reg_close_for_test();
    CHECK(reg_open_at(dir), ==, 0);     /* the sweep at open */
    CHECK(reg_conn_offers_maybe(), ==, false);

    /* and with the sweep of a lookup, once due, in a process that opened the
     * registry long before (a server's accepts): not sooner */
    reg_entries_sweep_interval_s = 3600;
    d.inode = 4020;
    unsigned live = count_conns();   /* 4000's, claimed by us */
    run_child(post_and_die, &d);
    CHECK(reg_conn_find_offer(&cli2, &srv, &out), ==, -ENOENT);
    CHECK(reg_conn_offers_maybe(), ==, true);    /* swept at the open above: not due */
    CHECK(count_conns(), ==, live + 1);
    reg_entries_sweep_interval_s = 0;
    CHECK(reg_conn_find_offer(&cli2, &srv, &out), ==, -ENOENT);
    CHECK(reg_conn_offers_maybe(), ==, false);
    CHECK(count_conns(), ==, live);
    CHECK(channel_exists(ch3), ==, 0);           /* its channel with it */
    printf("ok: the count of offers\n");
}

struct chroot_sweep {
    char root[64];
    struct reg_addr cli, srv;
};

/* In a chroot without /proc (vsftpd's sessions): a lookup whose sweep is
 * due must take the live owner of an offer (the parent) for alive.  Before,
 * /proc/<pid> missing there read as "gone", and the sweep freed every live
 * process's records: vsftpd's next data connection found no offer. */
static void sweep_in_chroot(void *arg)
{
    struct chroot_sweep *c = arg;
    struct reg_conn out;
    CHECK(chroot(c->root), ==, 0);
    CHECK(chdir("/"), ==, 0);
    CHECK(pid_gone((uint32_t)getppid()), ==, false);
    reg_entries_sweep_interval_s = 0;
    CHECK(reg_conn_find_offer(&c->srv, &c->cli, &out), ==, -ENOENT);   /* a lookup, and its sweep */
    CHECK(reg_conn_find_offer(&c->cli, &c->srv, &out), ==, 0);         /* the parent's offer stays */
}

static void test_sweep_without_proc(void)
{
    if (geteuid() != 0) {
        printf("left out: a sweep from a chroot (chroot needs root)\n");
        return;
    }
    fresh();
    char ch[64];
    make_channel(ch, sizeof ch, 31);
    struct chroot_sweep c = { .cli = A("127.0.0.1", 42000), .srv = A("127.0.0.1", 5000) };
    snprintf(c.root, sizeof c.root, "/tmp/shunt-chroot-XXXXXX");
    CHECK(mkdtemp(c.root) != NULL, ==, 1);
    struct reg_conn o = conn(5000, c.cli, c.srv, ch), out;
    CHECK(reg_conn_post(&o), ==, 0);
    run_child(sweep_in_chroot, &c);
    CHECK(count_conns(), ==, 1);
    CHECK(reg_conn_find_offer(&c.cli, &c.srv, &out), ==, 0);
    CHECK(channel_exists(ch), ==, 1);
    CHECK(reg_conn_end(5000), ==, 1);
    CHECK(rmdir(c.root), ==, 0);
    printf("ok: a sweep from a chroot without /proc frees nothing of the living\n");
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

int main(void)
{
    fixture_begin();
    test_addresses();
    test_listeners();
    test_dead_listeners();
    test_listeners_full();
    test_offers();
    test_conn_reclaim();
    test_open_sweep_bounded();
    test_offers_hint();
    test_sweep_without_proc();
    test_conns_full();
    fixture_end();
    PASS();
}
