/*
 * shm_budget.c: the total of shared memory reserved by this user's
 * channels, against SHUNT_SHM_LIMIT (see shm_budget.h).
 *
 * Owns: the account file /dev/shm/shunt-<euid>.budget (its '.' keeps it
 * apart from channel names, which have none) and the count in it.
 *
 * Its name must be known to every process of the user, so another user
 * can make it first.  So it is made complete (mode 0600, its size) as an
 * unnamed file and then given its name with linkat, which never replaces
 * a name; and an existing one is mapped only if it is this user's regular
 * file with mode 0600 (base/own_file.h).  Another user's file there
 * (or a symlink, a FIFO) is never mapped or written: new channels fail
 * with -EPERM, which the connection records as "not_ours", and the log
 * names the file and its owner (issue 16, finding 3).
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
#include "base/log.h"
#include "base/own_file.h"
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
static atomic_bool refused;   /* the file is another user's: said once, not tried again */

#define BUDGET_DIR "/dev/shm"

/* Makes the file whole before it has its name: -EEXIST when somebody
 * (this user's other process, or another user) has the name already. */
static int budget_create(const char *path)
{
    int fd = open(BUDGET_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    bool named = false;
    if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
        /* no O_TMPFILE: the name itself, exclusively (a process that opens
         * it before it has its size grows it below, as its own) */
        fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        named = true;
    }
    if (fd < 0)
        return -errno;
    int r = 0;
    if (fchmod(fd, 0600) < 0 || ftruncate(fd, sizeof(struct budget)) < 0) {
        r = -errno;
    } else if (!named) {
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
        if (linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW) < 0)
            r = -errno;
    }
    if (r < 0 && named)
        unlink(path);
    shunt_real.close(fd);
    return r;
}

/* The budget, mapped; NULL with *err -EPERM when the name is another
 * user's, or another negative errno. */
static struct budget *budget_map(int *err)
{
    struct budget *b = atomic_load(&mapped);
    if (b)
        return b;
    if (atomic_load(&refused)) {
        *err = -EPERM;
        return NULL;
    }
    char path[96];
    snprintf(path, sizeof path, BUDGET_DIR "/shunt-%u.budget", (unsigned)geteuid());
    struct stat st;
    int fd = own_file_open("shm budget", path, O_RDWR, 0600, &st);
    for (int i = 0; i < 3 && fd == -ENOENT; i++) {
        int r = budget_create(path);
        if (r < 0 && r != -EEXIST) {
            *err = r;
            return NULL;
        }
        fd = own_file_open("shm budget", path, O_RDWR, 0600, &st);
    }
    if (fd < 0) {
        if (fd == -EPERM) {
            atomic_store(&refused, true);
            shunt_log(LOG_WARN, "shm budget: %s is not ours: no new channel while SHUNT_SHM_LIMIT is set "
                                "(reason not_ours)", path);
        }
        *err = fd;
        return NULL;
    }
    void *p = MAP_FAILED;
    if (st.st_size >= (off_t)sizeof(struct budget) || fsize_ftruncate(fd, sizeof(struct budget)) == 0)
        p = mmap(NULL, sizeof(struct budget), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    *err = p == MAP_FAILED ? -errno : 0;
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
    int err = 0;
    struct budget *b = budget_map(&err);
    errno = saved;
    if (!b)   /* a limit that cannot be kept is not ignored */
        return err == -EPERM ? -EPERM : -ENOSPC;
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
