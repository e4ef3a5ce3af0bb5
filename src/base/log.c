/*
 * log.c: formats and writes log lines.  Each line is one write(2), so lines
 * from several processes sharing a file do not interleave.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsize.h"
#include "base/log.h"
#include "base/own_file.h"
#include "base/real.h"

enum log_level shunt_log_level = LOG_OFF;
static int log_fd = 2;
static bool log_own;   /* log_fd is a file shunt opened (SHUNT_LOG_FILE) */

static const char *const level_names[] = { "off", "error", "warn", "info", "debug", "trace" };

/* SHUNT_LOG_FILE is often in a directory every user may write (/tmp), and
 * "%p" makes its name easy to tell in advance: another user could put a
 * symlink there to a file of ours (a root program would append its log to
 * /etc/passwd), or a file of theirs that we would fill with our
 * addresses.  So the file is made with O_EXCL, or an existing one is
 * opened without following a symlink and kept only if it is this user's
 * own (or a character device: /dev/null, our terminal).  Otherwise the
 * log goes to standard error, with a line saying why.  -1 then. */
static int log_file_open(const char *path)
{
    int flags = O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY;
    int fd = open(path, flags | O_CREAT | O_EXCL, 0600);
    if (fd >= 0 || errno != EEXIST)
        return fd;
    /* O_NONBLOCK: a FIFO without a reader fails here instead of blocking
     * the program's start; the writes block again as they should */
    fd = open(path, flags | O_NONBLOCK);
    struct stat st;
    char desc[96] = "a symbolic link";
    if (fd >= 0 && fstat(fd, &st) == 0) {
        if (st.st_uid == geteuid() || S_ISCHR(st.st_mode)) {
            shunt_real.fcntl(fd, F_SETFL, O_APPEND);
            return fd;
        }
        own_file_describe(&st, desc, sizeof desc);
    } else if (lstat(path, &st) == 0) {
        own_file_describe(&st, desc, sizeof desc);
    }
    if (fd >= 0)
        shunt_real.close(fd);
    char line[600];
    int n = snprintf(line, sizeof line, "shunt[%d] warn: SHUNT_LOG_FILE %s is %s, not this user's: logging to "
                                        "standard error\n", (int)getpid(), path, desc);
    if (n > 0)
        shunt_real.write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    return -1;
}

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
    int fd = log_file_open(path);
    if (fd >= 0) {
        log_fd = fd;
        log_own = true;
    }
}

void shunt_log_place(void)
{
    if (!log_own)
        return;
    /* out of the program's way: a high fd it is unlikely to dup2 onto */
    int high = shunt_real.fcntl(log_fd, F_DUPFD_CLOEXEC, 900);
    if (high >= 0) {
        shunt_real.close(log_fd);
        log_fd = high;
    }
}

int shunt_log_own_fd(void)
{
    return log_own ? log_fd : -1;
}

void shunt_log_close(void)
{
    if (log_own)
        shunt_real.close(log_fd);
    log_own = false;
    log_fd = -1;
    shunt_log_level = LOG_OFF;
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
