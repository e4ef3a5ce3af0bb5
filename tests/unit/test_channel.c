/*
 * test_channel.c: unit tests of the shared-memory channel
 * (src/transport/channel.c).
 *
 * create, then attach from a forked child and stream a pattern both ways at
 * once; the layout (sizes, page-aligned data, which ring each side reads);
 * attach's refusals (names, magic, version, ring size, total size, file
 * size, mode, owner, symlinks, sides); unlink, including its refusal of
 * names attach would refuse; errno left alone.  Every /dev/shm file this
 * test makes has this process's "shunt-<euid>-0-c<version>-<pid>-" prefix,
 * and none may be left at exit.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "transport/channel.h"

static char own_prefix[48];   /* "shunt-<euid>-0-c<version>-<pid>-" */

/* Files in /dev/shm that this process (by its pid in the name) made.
 * Other shunt processes may come and go meanwhile; they are not counted. */
static int count_own_files(void)
{
    DIR *d = opendir("/dev/shm");
    CHECK(d, !=, NULL);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, own_prefix, strlen(own_prefix)) == 0)
            n++;
    }
    closedir(d);
    return n;
}

static void shm_path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "/dev/shm/%s", name);
}

static bool shm_exists(const char *name)
{
    char p[128];
    struct stat st;
    shm_path(p, sizeof p, name);
    return lstat(p, &st) == 0;
}

static unsigned char pattern(uint64_t p, unsigned salt)
{
    uint64_t z = (p >> 3) * 0x9e3779b97f4a7c15ull + salt;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (unsigned char)(z >> ((p & 7) * 8));
}

/* Sends `total` bytes into tx while receiving `total` bytes from rx, both
 * patterns checked; returns 0 or the failing stream position + 1. */
#define STREAM_BYTES (16u << 20)

static void stream_both(struct channel *ch, unsigned tx_salt, unsigned rx_salt)
{
    static unsigned char buf[7919];   /* odd, so chunks wrap everywhere */
    uint64_t sent = 0, got = 0;
    unsigned spins = 0;
    while (sent < STREAM_BYTES || got < STREAM_BYTES) {
        bool moved = false;
        if (sent < STREAM_BYTES) {
            size_t n = sizeof buf;
            if (n > STREAM_BYTES - sent)
                n = (size_t)(STREAM_BYTES - sent);
            for (size_t i = 0; i < n; i++)
                buf[i] = pattern(sent + i, tx_salt);
            struct iovec iov = { buf, n };
            ssize_t w = ring_write(&ch->tx, &iov, 1, 0, n);
            CHECK(w, >=, 0);
            /* the unsent rest is resent next round from the same position */
            sent += (uint64_t)w;
            moved |= w > 0;
            if (sent == STREAM_BYTES)
                ring_set_fin(&ch->tx);
        }
        if (got < STREAM_BYTES) {
            unsigned char in[5003];
            struct iovec iov = { in, sizeof in };
            ssize_t r = ring_read(&ch->rx, &iov, 1, 0, sizeof in, false);
            CHECK(r, >=, 0);
            for (ssize_t i = 0; i < r; i++) {
                if (in[i] != pattern(got + (uint64_t)i, rx_salt))
                    FAIL("side %d: byte %llu wrong", ch->side, (unsigned long long)(got + (uint64_t)i));
            }
            got += (uint64_t)r;
            moved |= r > 0;
        }
        if (!moved && ++spins % 64 == 0)
            sched_yield();
    }
    /* the peer set FIN right after its last byte */
    while (ring_at_eof(&ch->rx) == 0)
        sched_yield();
    CHECK(ring_at_eof(&ch->rx), ==, 1);
}

static void test_create_layout(void)
{
    struct channel ch;
    CHECK(channel_create(&ch, 65536, 0, 0), ==, 0);
    CHECK(strncmp(ch.name, own_prefix, strlen(own_prefix)), ==, 0);
    CHECK(strlen(ch.name), <, CHANNEL_NAME_MAX);
    CHECK(shm_exists(ch.name), ==, 1);

    CHECK(channel_size(65536), ==, 4096 + 2 * 65536);
    CHECK(channel_size(4096), ==, 4096 + 2 * 4096);
    CHECK(ch.map_size, ==, channel_size(65536));
    CHECK(ch.hdr->magic, ==, CHANNEL_MAGIC);
    CHECK(ch.hdr->version, ==, CHANNEL_VERSION);
    CHECK(ch.hdr->ring_size, ==, 65536);
    CHECK(ch.hdr->total_size, ==, channel_size(65536));
    CHECK(ch.side, ==, 0);
    CHECK(ch.tx.hdr, ==, &ch.hdr->ring[0]);
    CHECK(ch.rx.hdr, ==, &ch.hdr->ring[1]);
    CHECK(ch.self, ==, &ch.hdr->side[0]);
    CHECK(ch.peer, ==, &ch.hdr->side[1]);
    CHECK(ch.tx.size, ==, 65536);
    CHECK(ch.rx.size, ==, 65536);
    CHECK((uintptr_t)ch.tx.data % 4096, ==, 0);
    CHECK((uintptr_t)ch.rx.data % 4096, ==, 0);
    CHECK((unsigned char *)ch.tx.data, >=, (unsigned char *)ch.hdr + sizeof(struct chan_hdr));
    CHECK(ch.rx.data, ==, ch.tx.data + 65536);
    CHECK(ch.rx.data + 65536, ==, (unsigned char *)ch.hdr + ch.map_size);
    CHECK(ring_readable(&ch.rx), ==, 0);
    CHECK(ring_writable(&ch.tx), ==, 65536);

    struct stat st;
    char p[128];
    shm_path(p, sizeof p, ch.name);
    CHECK(stat(p, &st), ==, 0);
    CHECK(st.st_mode & 07777, ==, 0600);
    CHECK(st.st_uid, ==, geteuid());
    CHECK(st.st_size, ==, (off_t)channel_size(65536));
    /* the pages are reserved, not sparse: a full /dev/shm fails create */
    CHECK(st.st_blocks * 512, >=, st.st_size);

    /* attaching as side 0 (a client process after exec) sees the same rings */
    struct channel again;
    CHECK(channel_attach(&again, ch.name, 0), ==, 0);
    CHECK(again.side, ==, 0);
    CHECK(again.map_size, ==, ch.map_size);
    unsigned char msg[] = "hello";
    struct iovec iov = { msg, 5 };
    CHECK(ring_write(&again.tx, &iov, 1, 0, 5), ==, 5);
    unsigned char out[5];
    struct iovec oiov = { out, 5 };
    struct channel srv;
    CHECK(channel_attach(&srv, ch.name, 1), ==, 0);
    CHECK(srv.side, ==, 1);
    CHECK((uintptr_t)srv.tx.hdr - (uintptr_t)srv.hdr, ==, (uintptr_t)&ch.hdr->ring[1] - (uintptr_t)ch.hdr);
    CHECK((uintptr_t)srv.rx.data - (uintptr_t)srv.hdr, ==, (uintptr_t)ch.tx.data - (uintptr_t)ch.hdr);
    CHECK((uintptr_t)srv.self - (uintptr_t)srv.hdr, ==, (uintptr_t)ch.peer - (uintptr_t)ch.hdr);
    CHECK(ring_read(&srv.rx, &oiov, 1, 0, 5, false), ==, 5);
    CHECK(memcmp(out, msg, 5), ==, 0);
    channel_detach(&srv);
    channel_detach(&again);
    CHECK(again.hdr, ==, NULL);
    CHECK(again.map_size, ==, 0);
    channel_detach(&again);     /* twice is harmless */

    /* names are unique */
    struct channel other;
    CHECK(channel_create(&other, 4096, 0, 0), ==, 0);
    CHECK(strcmp(other.name, ch.name), !=, 0);
    channel_unlink(other.name);
    channel_detach(&other);

    channel_unlink(ch.name);
    CHECK(shm_exists(ch.name), ==, 0);
    channel_unlink(ch.name);    /* already gone: ignored */
    /* the mapping outlives the name */
    CHECK(ring_readable(&ch.tx), ==, 0);
    channel_detach(&ch);
    CHECK(ch.hdr, ==, NULL);
}

static void test_create_rejects(void)
{
    struct channel ch;
    uint32_t bad[] = { 0, 1, 2048, 4095, 4097, 6144, 65535, (1u << 31), UINT32_MAX };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(channel_create(&ch, bad[i], 0, 0), ==, -EINVAL);
    CHECK(channel_create(NULL, 4096, 0, 0), ==, -EINVAL);
    CHECK(count_own_files(), ==, 0);
}

/* The client creates, a forked server attaches, and both stream 16 MiB at
 * once, each reading what the other writes. */
static void test_fork_stream(void)
{
    struct channel ch;
    CHECK(channel_create(&ch, 4096 * 4, 0, 0), ==, 0);
    pid_t pid = fork();
    CHECK(pid, >=, 0);
    if (pid == 0) {
        struct channel srv;
        char name[CHANNEL_NAME_MAX];
        memcpy(name, ch.name, sizeof name);
        channel_detach(&ch);    /* the inherited mapping is not the one under test */
        CHECK(channel_attach(&srv, name, 1), ==, 0);
        CHECK(srv.side, ==, 1);
        stream_both(&srv, 2, 1);
        channel_detach(&srv);
        _exit(0);
    }
    stream_both(&ch, 1, 2);
    int status;
    CHECK(waitpid(pid, &status, 0), ==, pid);
    CHECK(WIFEXITED(status), ==, 1);
    CHECK(WEXITSTATUS(status), ==, 0);
    CHECK(atomic_load(&ch.hdr->ring[0].head), ==, STREAM_BYTES);
    CHECK(atomic_load(&ch.hdr->ring[1].tail), ==, STREAM_BYTES);
    channel_unlink(ch.name);
    channel_detach(&ch);
    printf("fork stream: %u MiB each way\n", STREAM_BYTES >> 20);
}

/* Applies a damage to a fresh channel's file and expects attach to fail
 * with want; the file is removed afterwards. */
struct damage {
    const char *what;
    int want;
    int also;       /* another acceptable answer, or 0 */
    void (*apply)(struct channel *ch, const char *path);
};

static void set_magic(struct channel *ch, const char *path)
{
    (void)path;
    ch->hdr->magic ^= 1;
}
static void set_version(struct channel *ch, const char *path)
{
    (void)path;
    ch->hdr->version = CHANNEL_VERSION + 1;
}
static void set_ring_npot(struct channel *ch, const char *path)
{
    (void)path;
    ch->hdr->ring_size = 6144;
}
static void set_ring_small(struct channel *ch, const char *path)
{
    (void)path;
    ch->hdr->ring_size = 2048;
    ch->hdr->total_size = channel_size(2048);
}
static void set_ring_big(struct channel *ch, const char *path)
{
    (void)path;
    ch->hdr->ring_size = 1u << 31;
    ch->hdr->total_size = channel_size(1u << 31);
}
static void set_ring_other(struct channel *ch, const char *path)
{
    /* consistent header, but the file is the size of the old ring */
    (void)path;
    ch->hdr->ring_size = 8192;
    ch->hdr->total_size = channel_size(8192);
}
static void set_total(struct channel *ch, const char *path)
{
    (void)path;
    ch->hdr->total_size += 4096;
}
static void set_total_huge(struct channel *ch, const char *path)
{
    (void)path;
    ch->hdr->total_size = UINT64_MAX;
}
static void truncate_some(struct channel *ch, const char *path)
{
    CHECK(truncate(path, (off_t)ch->map_size - 4096), ==, 0);
}
static void truncate_tiny(struct channel *ch, const char *path)
{
    (void)ch;
    CHECK(truncate(path, 10), ==, 0);
}
static void truncate_empty(struct channel *ch, const char *path)
{
    (void)ch;
    CHECK(truncate(path, 0), ==, 0);
}
static void grow(struct channel *ch, const char *path)
{
    CHECK(truncate(path, (off_t)ch->map_size + 4096), ==, 0);
}
static void mode_0644(struct channel *ch, const char *path)
{
    (void)ch;
    CHECK(chmod(path, 0644), ==, 0);
}
static void mode_0400(struct channel *ch, const char *path)
{
    (void)ch;
    CHECK(chmod(path, 0400), ==, 0);
}
static void mode_0700(struct channel *ch, const char *path)
{
    (void)ch;
    CHECK(chmod(path, 0700), ==, 0);
}

static void test_attach_rejects(void)
{
    const struct damage damages[] = {
        { "wrong magic", -EPROTO, 0, set_magic },
        { "wrong version", -EPROTO, 0, set_version },
        { "ring size not a power of two", -EPROTO, 0, set_ring_npot },
        { "ring size too small", -EPROTO, 0, set_ring_small },
        { "ring size too big", -EPROTO, 0, set_ring_big },
        { "ring size not the file's", -EPROTO, 0, set_ring_other },
        { "total size mismatch", -EPROTO, 0, set_total },
        { "total size huge", -EPROTO, 0, set_total_huge },
        { "truncated file", -EPROTO, 0, truncate_some },
        { "file shorter than the header", -EPROTO, 0, truncate_tiny },
        { "empty file", -EPROTO, 0, truncate_empty },
        { "file longer than the header says", -EPROTO, 0, grow },
        { "mode 0644", -EPERM, 0, mode_0644 },
        { "mode 0400", -EPERM, -EACCES, mode_0400 },   /* open fails first unless root */
        { "mode 0700", -EPERM, 0, mode_0700 },
    };
    for (size_t i = 0; i < sizeof damages / sizeof damages[0]; i++) {
        struct channel ch, att;
        char path[128];
        CHECK(channel_create(&ch, 4096, 0, 0), ==, 0);
        shm_path(path, sizeof path, ch.name);
        damages[i].apply(&ch, path);
        memset(&att, 0x55, sizeof att);
        int r = channel_attach(&att, ch.name, 1);
        if (r != damages[i].want && (damages[i].also == 0 || r != damages[i].also))
            FAIL("%s: attach returned %d, expected %d", damages[i].what, r, damages[i].want);
        CHECK(att.hdr, ==, NULL);   /* left zeroed */
        channel_unlink(ch.name);
        channel_detach(&ch);
    }

    /* owned by someone else (needs root to arrange) */
    if (geteuid() == 0) {
        struct channel ch, att;
        char path[128];
        CHECK(channel_create(&ch, 4096, 0, 0), ==, 0);
        shm_path(path, sizeof path, ch.name);
        CHECK(chown(path, 65534, 65534), ==, 0);
        CHECK(channel_attach(&att, ch.name, 1), ==, -EPERM);
        channel_unlink(ch.name);
        channel_detach(&ch);
    } else {
        printf("attach rejects: other owner not tested (not root)\n");
    }

    /* a symlink with a valid name to a valid channel is not followed */
    {
        struct channel ch, att;
        char path[128], link[128], lname[64];
        CHECK(channel_create(&ch, 4096, 0, 0), ==, 0);
        shm_path(path, sizeof path, ch.name);
        snprintf(lname, sizeof lname, "%slink", own_prefix);
        shm_path(link, sizeof link, lname);
        CHECK(symlink(path, link), ==, 0);
        /* refused as a file that is not ours (the open's ELOOP says no more) */
        CHECK(channel_attach(&att, lname, 1), ==, -EPERM);
        CHECK(unlink(link), ==, 0);
        channel_unlink(ch.name);
        channel_detach(&ch);
    }

    /* a directory with a valid name */
    {
        struct channel att;
        char dname[64], dpath[128];
        snprintf(dname, sizeof dname, "%sdir", own_prefix);
        shm_path(dpath, sizeof dpath, dname);
        CHECK(mkdir(dpath, 0700), ==, 0);
        int r = channel_attach(&att, dname, 1);
        CHECK(r == -EISDIR || r == -EPERM, ==, 1);
        CHECK(rmdir(dpath), ==, 0);
    }

    /* names */
    {
        struct channel ch, att;
        CHECK(channel_create(&ch, 4096, 0, 0), ==, 0);
        char longname[CHANNEL_NAME_MAX + 8];
        memset(longname, 'a', sizeof longname);
        memcpy(longname, "shunt-", 6);
        longname[CHANNEL_NAME_MAX] = '\0';          /* 64 characters: one too many */
        char unterminated[CHANNEL_NAME_MAX];
        memcpy(unterminated, longname, sizeof unterminated);
        char just_fits[CHANNEL_NAME_MAX];
        memcpy(just_fits, longname, sizeof just_fits);
        just_fits[CHANNEL_NAME_MAX - 1] = '\0';     /* 63: valid, but no such file */
        char traversal[96];
        snprintf(traversal, sizeof traversal, "shunt-/../../dev/shm/%s", ch.name);
        char dotted[96];
        snprintf(dotted, sizeof dotted, "%s.reg", ch.name);
        const char *bad[] = {
            "", "shunt-", "shunt", "Shunt-1", "xshunt-1", "/shunt-1", "shunt-1/2", "shunt-..",
            "shunt-1 2", "shunt-\n", "shunt-\xc3\xa9", traversal, dotted, longname,
            ch.name + 1,
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            int r = channel_attach(&att, bad[i], 1);
            if (r != -EINVAL)
                FAIL("attach(\"%s\") returned %d, expected -EINVAL", bad[i], r);
        }
        CHECK(channel_attach(&att, NULL, 1), ==, -EINVAL);
        CHECK(channel_attach(&att, unterminated, 1), ==, -EINVAL);
        CHECK(channel_attach(&att, just_fits, 1), ==, -ENOENT);
        CHECK(channel_attach(&att, ch.name, 2), ==, -EINVAL);
        CHECK(channel_attach(&att, ch.name, -1), ==, -EINVAL);
        CHECK(channel_attach(NULL, ch.name, 1), ==, -EINVAL);
        char missing[CHANNEL_NAME_MAX];
        snprintf(missing, sizeof missing, "%sgone", own_prefix);
        CHECK(channel_attach(&att, missing, 1), ==, -ENOENT);
        /* still attachable after all that */
        CHECK(channel_attach(&att, ch.name, 1), ==, 0);
        channel_detach(&att);
        channel_unlink(ch.name);
        channel_detach(&ch);
    }
    CHECK(count_own_files(), ==, 0);
}

/* channel_unlink refuses what attach refuses: a file whose name has a '.'
 * (the registry's) survives it. */
static void test_unlink_rejects(void)
{
    char name[64], path[128];
    snprintf(name, sizeof name, "%sx.reg", own_prefix);
    shm_path(path, sizeof path, name);
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    CHECK(fd, >=, 0);
    close(fd);
    channel_unlink(name);
    CHECK(shm_exists(name), ==, 1);
    channel_unlink(NULL);
    channel_unlink("");
    channel_unlink("shunt-");
    CHECK(unlink(path), ==, 0);
}

/* Internal calls report through their return value and leave errno as
 * they found it (DESIGN, conventions). */
static void test_errno_kept(void)
{
    struct channel ch, att;
    errno = 4242;
    CHECK(channel_create(&ch, 4096, 0, 0), ==, 0);
    CHECK(errno, ==, 4242);
    CHECK(channel_attach(&att, "shunt-nonexistent-0", 1), ==, -ENOENT);
    CHECK(errno, ==, 4242);
    CHECK(channel_attach(&att, ch.name, 1), ==, 0);
    CHECK(errno, ==, 4242);
    channel_detach(&att);
    channel_unlink(ch.name);
    channel_unlink(ch.name);    /* ENOENT inside */
    CHECK(errno, ==, 4242);
    channel_detach(&ch);
    CHECK(errno, ==, 4242);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* no registry here: the names carry namespace 0 */
    snprintf(own_prefix, sizeof own_prefix, "shunt-%u-0-c%u-%d-", (unsigned)geteuid(), CHANNEL_VERSION, (int)getpid());
    if (access("/dev/shm", W_OK) != 0)
        MISSING("/dev/shm is not writable");
    CHECK(count_own_files(), ==, 0);
    test_create_layout();
    test_create_rejects();
    test_fork_stream();
    test_attach_rejects();
    test_unlink_rejects();
    test_errno_kept();
    CHECK(count_own_files(), ==, 0);
    printf("test_channel: ok\n");
    PASS();
}
