/*
 * log.c: formats and writes log lines.  Each line is one write(2), so lines
 * from several processes sharing a file do not interleave.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/fsize.h"
#include "base/log.h"
#include "base/real.h"

enum log_level shunt_log_level = LOG_OFF;
static int log_fd = 2;

static const char *const level_names[] = { "off", "error", "warn", "info", "debug", "trace" };

void shunt_log_open(const struct shunt_settings *s)
{
    shunt_log_level = s->log_level;
    if (s->log_level == LOG_OFF || !s->log_file[0])
        return;
    char path[sizeof s->log_file + 16];
    size_t o = 0;
    for (const char *p = s->log_file; *p && o < sizeof path - 12; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            o += (size_t)snprintf(path + o, sizeof path - o, "%d", (int)getpid());
            p++;
        } else {
            path[o++] = *p;
        }
    }
    path[o] = 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
        /* keep it out of the program's way: a high fd it is unlikely to dup2 onto */
        int high = shunt_real.fcntl(fd, F_DUPFD_CLOEXEC, 900);
        if (high >= 0) {
            shunt_real.close(fd);
            fd = high;
        }
        log_fd = fd;
    }
}

void shunt_log_write(enum log_level level, const char *fmt, ...)
{
    int saved = errno;
    char line[512];
    int n = snprintf(line, sizeof line, "shunt[%d] %s: ", (int)getpid(), level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    fsize_write(log_fd, line, len);   /* never SIGXFSZ for a program with RLIMIT_FSIZE under the log's size */
    errno = saved;
}
