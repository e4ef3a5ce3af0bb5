/*
 * shm_budget.h: a bound on the shared memory all of this user's channels
 * reserve together (SHUNT_SHM_LIMIT), kept in one small file under
 * /dev/shm that every process under a limit maps.
 */
#ifndef SHUNT_SHM_BUDGET_H
#define SHUNT_SHM_BUDGET_H

#include <stdint.h>

/* Takes bytes from the budget: 0, -ENOSPC when that would pass limit or
 * when the budget file cannot be mapped, or -EPERM when its name is
 * another user's file (limit 0: no limit, nothing is counted). */
int shm_budget_take(uint64_t bytes, uint64_t limit);

/* Gives bytes back (a segment was removed); a no-op in a process that never
 * took any. */
void shm_budget_give(uint64_t bytes);

#endif
