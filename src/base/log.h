/*
 * log.h: shunt's own log (SHUNT_LOG, SHUNT_LOG_FILE).  Off by default, and
 * then a log call costs one predictable branch.
 */
#ifndef SHUNT_LOG_H
#define SHUNT_LOG_H

#include "base/settings.h"

/* Hidden: a log call site compiles to one compare of this variable in
 * memory and one branch not taken (no GOT load), the call out of line. */
extern enum log_level shunt_log_level __attribute__((visibility("hidden")));

/* The log as the settings say.  Its file is opened at the lowest free fd:
 * shunt_log_place then moves it high, which a seccomp filter inherited at
 * start may refuse by killing (fcntl F_DUPFD: the sandbox probe asks
 * first), or shunt_log_close gives the number back and ends the log. */
void shunt_log_open(const struct shunt_settings *s);
void shunt_log_place(void);
/* The log's fd when it is a file shunt opened (SHUNT_LOG_FILE), else -1:
 * the fd table marks it as shunt's own (interpose/init.c). */
int shunt_log_own_fd(void);
void shunt_log_close(void);
void shunt_log_write(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define shunt_log(level, ...)                                   \
    do {                                                        \
        if (__builtin_expect((level) <= shunt_log_level, 0))    \
            shunt_log_write((level), __VA_ARGS__);              \
    } while (0)

#endif
