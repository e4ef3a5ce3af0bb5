/*
 * sandbox_probe.h: whether a seccomp filter this process started with
 * (inherited across exec; shunt cannot read it) lets shunt's own calls run,
 * found by making them in a short-lived child (sandbox_probe.c).
 */
#ifndef SHUNT_CORE_PROCESS_SANDBOX_PROBE_H
#define SHUNT_CORE_PROCESS_SANDBOX_PROBE_H

#include <stdbool.h>
#include <stddef.h>

/* True when every call of sandbox_calls.c ran in the child as the kernel
 * would have answered it.  Otherwise false, with what happened in why. */
bool sandbox_probe(char *why, size_t whylen);

#endif
