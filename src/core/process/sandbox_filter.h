/*
 * sandbox_filter.h: what a seccomp filter (classic BPF, as the program
 * hands it to the kernel) would answer to each system call shunt makes of
 * its own accord (sandbox_calls.h).
 */
#ifndef SHUNT_CORE_PROCESS_SANDBOX_FILTER_H
#define SHUNT_CORE_PROCESS_SANDBOX_FILTER_H

#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>

/* True when the filter lets every one of shunt's calls run (or answers one
 * with an errno shunt copes with), whatever the arguments that vary and
 * the address it is made from: every path of the filter such a call may
 * take is followed.  Otherwise false, with the first call refused (or why
 * the filter could not be judged) in why. */
bool sandbox_filter_allows(const struct sock_filter *insns, size_t len, char *why, size_t whylen);

#endif
