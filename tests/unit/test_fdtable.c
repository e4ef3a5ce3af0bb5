/*
 * test_fdtable.c: unit tests of the fd table (src/core/fd/fdtable.c) with a
 * stub probe in place of the TCP kind, linked with the layers below the
 * table only (core/fd, registry, transport, base).
 *
 * What the table must do: answer passthrough for files and, without hooks,
 * for sockets; probe a socket it has not seen once, through the hooks, and
 * keep the answer; share one object among the fds of one socket (the share
 * hook), counting them; drop the table's references on close, forget and
 * forget_range, so that the object is destroyed exactly once after its last
 * fd and last holder; install objects for new fds; answer passthrough for a
 * socket settled on the kernel without touching its object; never cache an
 * answer for a closed fd; visit exactly the fds with objects.
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "core/fd/fdtable.h"

struct stub {
    struct shunt_sock base;
    uint64_t inode;
};

static int probes, shares, destroyed;
static struct stub *last_made;

static void stub_destroy(struct shunt_sock *s)
{
    destroyed++;
    free(s);
}

static const struct sock_ops stub_ops = { .kind = "stub", .destroy = stub_destroy };

struct find { uint64_t inode; struct shunt_sock *found; };

static void find_inode(int fd, void *ctx)
{
    struct find *f = ctx;
    struct fdref r = fdt_get(fd);
    if (!f->found && r.sock && ((struct stub *)r.sock)->inode == f->inode) {
        sock_get(r.sock);
        f->found = r.sock;
    }
    fdt_put(&r);
}

static struct shunt_sock *stub_share(int fd, uint64_t inode, bool passed)
{
    (void)fd;
    (void)passed;
    shares++;
    struct find f = { inode, NULL };
    fdt_for_each_object(0, ~0U, find_inode, &f);
    return f.found;
}

static struct shunt_sock *stub_probe(int fd, uint64_t inode, bool passed)
{
    (void)fd;
    (void)passed;
    probes++;
    struct stub *s = calloc(1, sizeof *s);
    atomic_init(&s->base.refs, 1);
    s->base.kind = SOCK_TCP;
    s->base.ops = &stub_ops;
    s->inode = inode;
    last_made = s;
    return &s->base;
}

static uintptr_t made_from;

static struct shunt_sock *stub_make(int fd, uintptr_t lazy)
{
    made_from = lazy;
    return stub_probe(fd, 0, false);
}

static const struct fdt_probe_hooks hooks = { .share = stub_share, .probe = stub_probe, .make = stub_make };

static void closes(int fd)
{
    struct shunt_sock *s = fdt_close_begin(fd);
    CHECK(close(fd), ==, 0);
    fdt_close_end(fd);
    if (s)
        sock_put(s);
}

static void count_visit(int fd, void *ctx)
{
    (void)fd;
    (*(int *)ctx)++;
}

int main(void)
{
    /* before fdt_init every lookup is passthrough */
    int early = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(early, >=, 0);
    struct fdref r = fdt_get(early);
    CHECK(r.sock == NULL, ==, 1);
    CHECK(r.ops == &passthrough_ops, ==, 1);

    fdt_init();

    /* without hooks, a socket is passthrough, and nothing is probed */
    r = fdt_get(early);
    CHECK(r.sock == NULL, ==, 1);
    CHECK(fdt_kernel_only(early), ==, 1);   /* remembered as the kernel's */
    CHECK(close(early), ==, 0);
    fdt_forget(early);

    fdt_set_probe_hooks(&hooks);

    /* a file: passthrough, never probed */
    int file = open("/dev/null", O_RDONLY);
    CHECK(file, >=, 0);
    r = fdt_get(file);
    CHECK(r.sock == NULL, ==, 1);
    CHECK(r.ops == &passthrough_ops, ==, 1);
    CHECK(probes + shares, ==, 0);

    /* a socket: probed once, the object kept */
    int sk = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(sk, >=, 0);
    struct stat st;
    CHECK(fstat(sk, &st), ==, 0);
    r = fdt_get(sk);
    CHECK(r.sock != NULL, ==, 1);
    CHECK(r.sock == &last_made->base, ==, 1);
    CHECK(r.ops == &stub_ops, ==, 1);
    CHECK(last_made->inode, ==, (long long)st.st_ino);
    CHECK(atomic_load(&r.sock->fds), ==, 1);
    CHECK(atomic_load(&r.sock->refs), ==, 2);   /* the table's and ours */
    fdt_put(&r);
    CHECK(r.sock == NULL, ==, 1);
    CHECK(probes, ==, 1);
    CHECK(shares, ==, 1);   /* asked first whether another fd had it */
    r = fdt_get(sk);
    CHECK(r.sock == &last_made->base, ==, 1);
    fdt_put(&r);
    CHECK(probes, ==, 1);   /* not again */
    CHECK(fdt_kernel_only(sk), ==, 0);

    /* another fd of the same socket, new to the table: shares the object */
    struct stub *first = last_made;
    int dupfd = dup(sk);
    CHECK(dupfd, >=, 0);
    r = fdt_get(dupfd);
    CHECK(r.sock == &first->base, ==, 1);
    CHECK(atomic_load(&first->base.fds), ==, 2);
    fdt_put(&r);
    CHECK(probes, ==, 1);
    CHECK(shares, ==, 2);

    /* visiting: exactly the two fds with an object */
    int seen = 0;
    fdt_for_each_object(0, ~0U, count_visit, &seen);
    CHECK(seen, ==, 2);

    /* closing one fd keeps the object for the other; the last close frees it */
    closes(dupfd);
    CHECK(destroyed, ==, 0);
    r = fdt_get(sk);
    CHECK(r.sock == &first->base, ==, 1);
    fdt_put(&r);
    closes(sk);
    CHECK(destroyed, ==, 1);

    /* a closed fd is not cached: its number probes afresh once reused */
    r = fdt_get(sk);
    CHECK(r.sock == NULL, ==, 1);
    CHECK(probes, ==, 1);
    int again = socket(AF_INET6, SOCK_STREAM, 0);
    CHECK(again, ==, sk);   /* the lowest free number */
    r = fdt_get(again);
    CHECK(r.sock != NULL, ==, 1);
    CHECK(probes, ==, 2);
    fdt_put(&r);

    /* settled on the kernel: passthrough without touching the object */
    fdt_settle_kernel(again, &last_made->base);
    CHECK(fdt_kernel_only(again), ==, 1);
    r = fdt_get(again);
    CHECK(r.sock == NULL, ==, 1);
    CHECK(r.ops == &passthrough_ops, ==, 1);
    /* forgetting drops the table's reference even then */
    fdt_forget(again);
    CHECK(destroyed, ==, 2);
    r = fdt_get(again);   /* probed again: a new object */
    CHECK(probes, ==, 3);
    CHECK(r.sock != NULL, ==, 1);
    fdt_put(&r);

    /* install: an object for a new fd, counted; replacing a stale entry drops it */
    int probes_before;
    int pair[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, pair), ==, 0);
    struct stub *mine = calloc(1, sizeof *mine);
    atomic_init(&mine->base.refs, 1);
    mine->base.kind = SOCK_TCP;
    mine->base.ops = &stub_ops;
    fdt_install(pair[0], &mine->base);
    r = fdt_get(pair[0]);
    CHECK(r.sock == &mine->base, ==, 1);
    CHECK(atomic_load(&mine->base.fds), ==, 1);
    fdt_put(&r);
    fdt_install(pair[0], NULL);   /* the kernel reused the number for something else */
    CHECK(destroyed, ==, 3);
    CHECK(fdt_kernel_only(pair[0]), ==, 1);

    /* forget_range drops every object in it and nothing outside */
    int before = destroyed;
    seen = 0;
    fdt_for_each_object(0, ~0U, count_visit, &seen);
    CHECK(seen, ==, 1);   /* again's */
    fdt_forget_range(0, (unsigned)again - 1);
    CHECK(destroyed, ==, before);
    fdt_forget_range((unsigned)again, (unsigned)again);
    CHECK(destroyed, ==, before + 1);
    seen = 0;
    fdt_for_each_object(0, ~0U, count_visit, &seen);
    CHECK(seen, ==, 0);

    /* a connection kept without an object: the kernel's, known open, never
     * probed, counted with the objects for the look for io_uring, not visited */
    int kept = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(kept, >=, 0);
    long slots = fdt_object_slots();
    probes_before = probes;
    fdt_install_kernel_sock(kept);
    CHECK(fdt_is_kernel_sock(kept), ==, 1);
    CHECK(fdt_kernel_only(kept), ==, 1);
    CHECK(fdt_known_open(kept), ==, 1);
    CHECK(fdt_has_object(kept), ==, 1);
    CHECK(fdt_object_slots(), ==, slots + 1);
    r = fdt_get(kept);
    CHECK(r.sock == NULL, ==, 1);
    CHECK(r.ops == &passthrough_ops, ==, 1);
    CHECK(probes, ==, probes_before);
    seen = 0;
    fdt_for_each_object(0, ~0U, count_visit, &seen);
    CHECK(seen, ==, 0);
    /* its close: no object handed back, the number unknown again */
    CHECK(fdt_close_begin(kept) == NULL, ==, 1);
    CHECK(fdt_object_slots(), ==, slots);
    CHECK(close(kept), ==, 0);
    fdt_close_end(kept);
    CHECK(fdt_is_kernel_sock(kept), ==, 0);
    CHECK(fdt_known_open(kept), ==, 0);

    /* a settled object dropped for the sentinel: the table's reference
     * goes, the caller's stays; only while the entry is still that object */
    int settled = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(settled, >=, 0);
    r = fdt_get(settled);   /* probed: an object, the table's reference and ours */
    CHECK(r.sock != NULL, ==, 1);
    struct shunt_sock *held = r.sock;
    int destroyed_before = destroyed;
    fdt_drop_settled(settled, held);   /* not settled yet: nothing changes */
    CHECK(fdt_is_kernel_sock(settled), ==, 0);
    fdt_settle_kernel(settled, held);
    fdt_drop_settled(settled, held);
    CHECK(fdt_is_kernel_sock(settled), ==, 1);
    CHECK(atomic_load(&held->fds), ==, 0);
    CHECK(atomic_load(&held->refs), ==, 1);   /* ours alone */
    CHECK(destroyed, ==, destroyed_before);
    fdt_put(&r);
    CHECK(destroyed, ==, destroyed_before + 1);
    CHECK(fdt_object_slots(), ==, slots + 1);   /* a socket the table knows, still */
    closes(settled);
    CHECK(fdt_object_slots(), ==, slots);
    /* installing over it (the kernel reused the number) needs no object's drop */
    int other = socket(AF_INET, SOCK_STREAM, 0);
    fdt_install_kernel_sock(other);
    fdt_install(other, NULL);
    CHECK(fdt_is_kernel_sock(other), ==, 0);
    CHECK(fdt_kernel_only(other), ==, 1);
    CHECK(fdt_object_slots(), ==, slots);
    CHECK(close(other), ==, 0);
    fdt_forget(other);

    /* a new socket kept LAZY: known, not the kernel's alone, no object
     * until a lookup; its bits change in place and reach the object */
    int lz = socket(AF_INET6, SOCK_STREAM, 0);
    CHECK(lz, >=, 0);
    slots = fdt_object_slots();
    fdt_install_lazy(lz, FDT_LAZY | FDT_LAZY_V6);
    CHECK(fdt_lazy(lz), ==, (long long)(FDT_LAZY | FDT_LAZY_V6));
    CHECK(fdt_kernel_only(lz), ==, 0);
    CHECK(fdt_known_open(lz), ==, 1);
    CHECK(fdt_object_slots(), ==, slots + 1);
    seen = 0;
    fdt_for_each_object(0, ~0U, count_visit, &seen);
    CHECK(seen, ==, 0);
    seen = 0;
    fdt_for_each_lazy(count_visit, &seen);
    CHECK(seen, ==, 1);
    CHECK(fdt_lazy_set(lz, FDT_LAZY_NONBLOCK, true), ==, 1);
    CHECK(fdt_lazy_set(lz, FDT_LAZY_NODELAY, true), ==, 1);
    CHECK(fdt_lazy_set(lz, FDT_LAZY_NODELAY, false), ==, 1);
    probes_before = probes;
    r = fdt_get(lz);   /* made now, from the bits */
    CHECK(r.sock == &last_made->base, ==, 1);
    CHECK(made_from, ==, (long long)(FDT_LAZY | FDT_LAZY_V6 | FDT_LAZY_NONBLOCK));
    CHECK(probes, ==, probes_before + 1);   /* stub_make makes through stub_probe */
    CHECK(atomic_load(&r.sock->fds), ==, 1);
    CHECK(fdt_lazy(lz), ==, 0);
    CHECK(fdt_lazy_set(lz, FDT_LAZY_NODELAY, true), ==, 0);   /* not lazy any more: the object's way */
    CHECK(fdt_object_slots(), ==, slots + 1);
    fdt_put(&r);
    closes(lz);
    CHECK(fdt_object_slots(), ==, slots);
    /* a lazy socket that connects on kernel TCP: KERNEL_SOCK, never an object */
    lz = socket(AF_INET, SOCK_STREAM, 0);
    fdt_install_lazy(lz, FDT_LAZY);
    probes_before = probes;
    CHECK(fdt_lazy_to_kernel(lz, FDT_LAZY | FDT_LAZY_NONBLOCK), ==, 0);   /* not its value: no change */
    CHECK(fdt_lazy_to_kernel(lz, FDT_LAZY), ==, 1);
    CHECK(fdt_is_kernel_sock(lz), ==, 1);
    CHECK(fdt_kernel_only(lz), ==, 1);
    CHECK(probes, ==, probes_before);
    /* closing a lazy one hands no object back */
    closes(lz);
    lz = socket(AF_INET, SOCK_STREAM, 0);
    fdt_install_lazy(lz, FDT_LAZY);
    CHECK(fdt_close_begin(lz) == NULL, ==, 1);
    CHECK(close(lz), ==, 0);
    fdt_close_end(lz);
    CHECK(fdt_lazy(lz), ==, 0);
    CHECK(fdt_object_slots(), ==, slots);
    CHECK(probes, ==, probes_before);

    /* fds beyond the first chunk (chunks made at first use) and at its
     * edges: visited and forgotten like the others, and the walks that stop
     * at the highest fd ever looked up still reach them */
    int base_sk = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(base_sk, >=, 0);
    const int far[] = { 1023, 1024, 5000, 3000 };   /* 3000 after 5000: a lower one in a new chunk */
    struct stub *far_obj[4];
    for (int i = 0; i < 4; i++) {
        CHECK(dup2(base_sk, far[i]), ==, far[i]);
        far_obj[i] = calloc(1, sizeof *far_obj[i]);
        atomic_init(&far_obj[i]->base.refs, 1);
        far_obj[i]->base.kind = SOCK_TCP;
        far_obj[i]->base.ops = &stub_ops;
        fdt_install(far[i], &far_obj[i]->base);
    }
    seen = 0;
    fdt_for_each_object(0, ~0U, count_visit, &seen);
    CHECK(seen, ==, 4);
    seen = 0;
    fdt_for_each_object(1024, 4999, count_visit, &seen);   /* 1024 and 3000 */
    CHECK(seen, ==, 2);
    seen = 0;
    fdt_for_each_object(1023, 1023, count_visit, &seen);
    CHECK(seen, ==, 1);
    before = destroyed;
    fdt_forget_range(1024, ~0U);
    CHECK(destroyed, ==, before + 3);
    fdt_forget_range(0, 1023);
    CHECK(destroyed, ==, before + 4);
    for (int i = 0; i < 4; i++)
        CHECK(close(far[i]), ==, 0);
    CHECK(close(base_sk), ==, 0);

    /* a bad fd: passthrough, nothing probed, nothing kept */
    probes_before = probes;
    r = fdt_get(1 << 16);
    CHECK(r.sock == NULL, ==, 1);
    CHECK(probes, ==, probes_before);

    printf("test_fdtable: ok (%d probes, %d shares, %d objects destroyed)\n", probes, shares, destroyed);
    return 0;
}
