/*
 * private_fds.c: the fds shunt keeps for itself, gathered from their
 * owners (private_fds.h).
 */
#include "base/self.h"
#include "core/conn/deferred_close.h"
#include "core/conn/private_fds.h"
#include "core/fd/fdtable.h"
#include "core/wait/wait.h"
#include "core/wait/xwake.h"

_Static_assert(1 + DEFERRED_CLOSE_MAX + XWAKE_KEPT_MAX <= PRIVATE_FDS_MAX, "every private fd fits");

bool private_fd_is(int fd)
{
    if (fd < 0)
        return false;
    return fd == wait_local_fd() || xwake_kept_is(fd) || deferred_close_owns(fd) ||
           (fdt_is_own(fd) && !shunt_in_engine && !shunt_engine_thread);
}

int private_fds_list(int *out, int max)
{
    int n = 0;
    int lw = wait_local_fd();
    if (lw >= 0 && n < max)
        out[n++] = lw;
    n += xwake_kept_fds(out + n, max - n);
    n += deferred_close_fds(out + n, max - n);
    for (int i = 1; i < n; i++)   /* sorted, for close_range */
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            int x = out[j];
            out[j] = out[j - 1];
            out[j - 1] = x;
        }
    return n;
}

bool private_fd_relocate(int fd)
{
    return wait_relocate_local(fd) || xwake_kept_relocate(fd) || deferred_close_relocate(fd);
}

bool private_fds_yield(void)
{
    return wait_local_yield();
}
