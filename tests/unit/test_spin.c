/*
 * test_spin.c: unit test of whether a wait may spin at all
 * (src/core/wait/spin.c, wait_may_spin): only with SHUNT_SPIN_US above 0,
 * and only on a machine with two online CPUs or more, which it reads at the
 * first wait that asks (nothing at start-up tells it: a process that never
 * waits on a socket of shunt's does not pay for the read); the same answer
 * at every ask after.
 * Links core/wait and what it stands on.
 */
#include <unistd.h>

#include "check.h"
#include "base/self.h"
#include "base/settings.h"
#include "core/wait/wait.h"

int main(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    shunt_settings.spin_us = 0;
    CHECK(wait_may_spin(), ==, false);   /* (asks nothing of the machine) */
    shunt_settings.spin_us = 50;
    for (int i = 0; i < 3; i++)
        CHECK(wait_may_spin(), ==, cpus >= 2);
    shunt_settings.spin_us = 0;
    CHECK(wait_may_spin(), ==, false);
    printf("%ld online CPUs: a wait %s spin\n", cpus, cpus >= 2 ? "may" : "may not");
    PASS();
}
