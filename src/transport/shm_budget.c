/*
 * shm_budget.c: the total of shared memory reserved by this user's
 * channels, against SHUNT_SHM_LIMIT (see shm_budget.h).
 *
 * Owns: the account file /dev/shm/shunt-<euid>.budget (its '.' keeps it
 * apart from channel names, which have none) and the count in it.
 *
 * The count is only as exact as the processes that keep it: a process
 * killed between creating a segment and recording it, or one running
 * without a limit, leaves it off.  So the count is only trusted below the
 * limit; at the limit it is recomputed from the files themselves (the
 * blocks of every /dev/shm/shunt-<euid>-* file) before a request is
 * refused, which costs a directory scan only when memory is tight.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsize.h"
#include "base/real.h"
#include "transport/shm_budget.h"

#define BUDGET_MAGIC 0x7467646275687373ULL

struct budget {
    _Atomic uint64_t magic;
    _Atomic uint64_t bytes;
};

/* The file's layout, which every process of this user under a limit maps.
 * It has no version (its magic is set, never checked): a change needs a new
 * file name. */
_Static_assert(offsetof(struct budget, magic) == 0 && offsetof(struct budget, bytes) == 8,
               "budget moved: rename the budget file");
_Static_assert(sizeof(struct budget) == 16, "budget resized: rename the budget file");
/* Shared between processes: lock-free, hence address-free. */
_Static_assert(__atomic_always_lock_free(sizeof(uint64_t), 0), "the budget needs lock-free 64-bit atomics");

static struct budget *_Atomic mapped;

static struct budget *budget_map(void)
{
    struct budget *b = atomic_load(&mapped);
    if (b)
        return b;
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/shunt-%u.budget", (unsigned)geteuid());
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() && (st.st_mode & 077) == 0 &&
        (st.st_size >= (off_t)sizeof(struct budget) || fsize_ftruncate(fd, sizeof(struct budget)) == 0))
        p = mmap(NULL, sizeof(struct budget), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    shunt_real.close(fd);
    if (p == MAP_FAILED)
        return NULL;
    struct budget *nb = p;
    uint64_t zero = 0;
    /* a fresh file is all zero; the first to see it says it is counted */
    atomic_compare_exchange_strong(&nb->magic, &zero, BUDGET_MAGIC);
    struct budget *expected = NULL;
    if (!atomic_compare_exchange_strong(&mapped, &expected, nb)) {
        munmap(p, sizeof(struct budget));
        return expected;
    }
    return nb;
}

/* What this user's files under /dev/shm really hold now: the channels, and
 * also the registry and the fd tables (which share the prefix, and are
 * counted against the limit with them). */
static uint64_t rescan(void)
{
    char prefix[32];
    int plen = snprintf(prefix, sizeof prefix, "shunt-%u-", (unsigned)geteuid());
    DIR *d = opendir("/dev/shm");
    if (!d)
        return 0;
    uint64_t sum = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            sum += (uint64_t)st.st_blocks * 512u;
    }
    closedir(d);
    return sum;
}

int shm_budget_take(uint64_t bytes, uint64_t limit)
{
    if (limit == 0)
        return 0;
    int saved = errno;
    struct budget *b = budget_map();
    errno = saved;
    if (!b)
        return -ENOSPC;   /* a limit that cannot be kept is not ignored */
    uint64_t now = atomic_fetch_add(&b->bytes, bytes) + bytes;
    if (now <= limit)
        return 0;
    atomic_fetch_sub(&b->bytes, bytes);
    uint64_t real = rescan();
    errno = saved;
    /* Not atomic with other processes' updates: the count drifts by what
     * they did during the scan, and the next scan at the limit repairs it. */
    atomic_store(&b->bytes, real);
    if (real + bytes > limit)
        return -ENOSPC;
    atomic_fetch_add(&b->bytes, bytes);
    return 0;
}

void shm_budget_give(uint64_t bytes)
{
    struct budget *b = atomic_load(&mapped);
    if (!b)
        return;
    uint64_t n = atomic_load(&b->bytes);
    while (!atomic_compare_exchange_weak(&b->bytes, &n, n > bytes ? n - bytes : 0))
        ;
}
