/*
 * stdio_calls.c: stdio streams on sockets that are, or may become,
 * accelerated: fdopen, fileno, freopen, the standard streams, and fclose's
 * part (called from fd_calls.c).
 *
 * glibc's stdio moves a FILE's bytes with libc's internal read and write,
 * which no preload sees: on an accelerated connection they would reach the
 * kernel companion socket, where the peer takes them for doorbells.  So:
 *
 *   - fdopen of such a socket returns a cookie stream (fopencookie) whose
 *     callbacks are shunt's own read, write and close on the fd number, so it
 *     is right on every path (channel, TCP, after a downgrade).  fileno and
 *     fileno_unlocked answer the fd for it (glibc says -1 for a cookie).
 *   - while fd 0, 1 or 2 is such a socket, the variable stdin, stdout or
 *     stderr (glibc documents that a program may assign them) points to a
 *     cookie stream of that fd; when the fd stops being one (dup2 of
 *     something else over it, close), the program's own FILE is put back.
 *     What a stream holds at a swap goes where it would have gone: pending
 *     output into the other stream (its next flush writes it to the fd, as
 *     it would have), unread input (bytes pushed back with ungetc too)
 *     ahead of what the new stream reads.
 *     The cookie of a standard stream is never freed: a pointer to it that
 *     somebody kept still writes to its fd number.  The FILE that was
 *     swapped out gets fd -1 meanwhile: a pointer to it kept elsewhere fails
 *     with EBADF instead of writing doorbells.
 *   - what cannot be carried that way falls back: the connection moves back
 *     to kernel TCP (downgrade.c) with the reason FB_STDIO, and the native
 *     stream stays (a wide-oriented standard stream, libstdc++'s standard
 *     streams, which keep the FILE pointer they saw at start-up, or no
 *     memory for a stream).
 *   - at exit every cookie stream is flushed before the channels are let go
 *     of (exit flushes stdio only after every library's destructors).
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>

#include "core/conn/downgrade.h"
#include "core/conn/fabric_conn.h"
#include "base/log.h"
#include "core/conn/sockstat.h"
#include "core/kinds/tcp_socket.h"
#include "interpose/stdio_calls.h"
#include "interpose/wrap.h"

/* The buffer glibc gives a stream on a socket: st_blksize (4096), being
 * below BUFSIZ.  Full buffering (no tty), stderr unbuffered. */
#define STREAM_BUF 4096


struct cstream {
    FILE *fp;
    int fd;                  /* the fd number it reads and writes */
    int std;                 /* 0..2: a standard stream's cookie (never freed); -1: fdopen's */
    bool closed;             /* fclose or freopen closed its fd: I/O fails with EBADF */
    int bufmode;             /* a standard stream's: what the swap set (_IOFBF, _IOLBF, _IONBF) */
    char *pre;               /* input read before a swap: delivered first (under the FILE's lock) */
    size_t pre_len, pre_off;
    struct cstream *next;    /* hash chain */
    char buf[STREAM_BUF];
};

/* ---- which FILEs are shunt's: a hash by pointer ---- */

#define BUCKETS 1024
static struct cstream *table[BUCKETS];
static atomic_int registered;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t bucket(const FILE *fp)
{
    uintptr_t p = (uintptr_t)fp;
    return (size_t)((p >> 4) ^ (p >> 14)) & (BUCKETS - 1);
}

static void reg_add(struct cstream *c)
{
    crit_lock(&reg_lock);
    size_t b = bucket(c->fp);
    c->next = table[b];
    table[b] = c;
    atomic_fetch_add(&registered, 1);
    crit_unlock(&reg_lock);
}

static void reg_del(struct cstream *c)
{
    crit_lock(&reg_lock);
    for (struct cstream **p = &table[bucket(c->fp)]; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            atomic_fetch_sub(&registered, 1);
            break;
        }
    crit_unlock(&reg_lock);
}

/* The stream's record, or NULL.  It stays valid while the program does not
 * close the stream, as the FILE itself does. */
static struct cstream *reg_find(const FILE *fp)
{
    if (!fp || atomic_load_explicit(&registered, memory_order_relaxed) == 0)
        return NULL;
    crit_lock(&reg_lock);
    struct cstream *c = table[bucket(fp)];
    while (c && c->fp != fp)
        c = c->next;
    crit_unlock(&reg_lock);
    return c;
}

/* ---- the cookie stream: shunt's read, write and close on the fd number ---- */

static ssize_t cs_read(void *cookie, char *buf, size_t n)
{
    struct cstream *c = cookie;
    if (c->pre_off < c->pre_len) {
        size_t k = c->pre_len - c->pre_off < n ? c->pre_len - c->pre_off : n;
        memcpy(buf, c->pre + c->pre_off, k);
        c->pre_off += k;
        if (c->pre_off == c->pre_len) {
            free(c->pre);
            c->pre = NULL;
            c->pre_len = c->pre_off = 0;
        }
        return (ssize_t)k;
    }
    if (c->closed) {
        errno = EBADF;
        return -1;
    }
    return read(c->fd, buf, n);   /* shunt's read (io_calls.c) */
}

/* As glibc's own file write: loops over partial writes, stops at an error
 * (no retry on EINTR: the stream's error flag is set, as it would be). */
static ssize_t cs_write(void *cookie, const char *buf, size_t n)
{
    struct cstream *c = cookie;
    if (c->closed) {
        errno = EBADF;
        return 0;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(c->fd, buf + done, n - done);   /* shunt's write */
        if (r <= 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

/* lseek on the fd, as glibc's file stream does: ESPIPE on a socket. */
static int cs_seek(void *cookie, off64_t *off, int whence)
{
    struct cstream *c = cookie;
    if (c->closed) {
        errno = EBADF;
        return -1;
    }
    off_t r = lseek(c->fd, (off_t)*off, whence);
    if (r < 0)
        return -1;
    *off = r;
    return 0;
}

/* fclose of an fdopen stream: after glibc flushed it through cs_write. */
static int cs_close(void *cookie)
{
    struct cstream *c = cookie;
    if (c->std >= 0)
        return 0;   /* a standard stream's cookie is never closed by glibc (stdio_fclose) */
    reg_del(c);
    int r = c->closed ? 0 : close(c->fd);   /* shunt's close: the fd table follows */
    free(c->pre);
    free(c);
    return r;
}

static const cookie_io_functions_t cs_funcs = { cs_read, cs_write, cs_seek, cs_close };

static struct cstream *make_cookie(int fd, int std, const char *mode)
{
    struct cstream *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    c->std = std;
    c->fp = fopencookie(c, mode, cs_funcs);
    if (!c->fp) {
        free(c);
        return NULL;
    }
    if (std == 2)
        setvbuf(c->fp, NULL, _IONBF, 0);
    else
        setvbuf(c->fp, c->buf, _IOFBF, sizeof c->buf);
    reg_add(c);
    return c;
}

/* ---- which sockets need a cookie stream ---- */

/* On a channel now, or offered one (a client waiting for the claim). */
static bool on_channel(int fd)
{
    struct fdref f = fdt_get(fd);
    bool r = f.sock && f.sock->kind == SOCK_TCP && atomic_load(&tcp_of(f.sock)->path) != PATH_TCP;
    fdt_put(&f);
    return r;
}

/* fdopen also wraps a TCP socket that is not connected yet: its connect
 * may put it on a channel after the FILE exists. */
static bool may_get_channel(int fd)
{
    struct fdref f = fdt_get(fd);
    bool r = false;
    if (f.sock && f.sock->kind == SOCK_TCP) {
        struct tcp_sock *t = tcp_of(f.sock);
        if (atomic_load(&t->path) != PATH_TCP) {
            r = true;
        } else if (!t->negotiated && t->listener_pid == 0 && shunt_settings.accel && !shunt_sandbox_refuses()) {
            struct sockaddr_storage ss;
            socklen_t len = sizeof ss;
            int listening = 0;
            socklen_t llen = sizeof listening;
            r = shunt_real.getpeername(fd, (struct sockaddr *)&ss, &len) < 0 && errno == ENOTCONN &&
                shunt_real.getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &llen) == 0 && !listening;
        }
    }
    fdt_put(&f);
    return r;
}

/* What stdio cannot carry on this socket: back to kernel TCP, for good. */
static void fall_back(int fd, const char *why)
{
    struct fdref f = fdt_get(fd);
    if (f.sock && f.sock->kind == SOCK_TCP) {
        struct tcp_sock *t = tcp_of(f.sock);
        if (atomic_load(&t->path) == PATH_FABRIC)
            fabric_conn_leave(t, fd, "stdio");
        downgrade_leave(t, fd);
        if (atomic_load(&t->path) == PATH_TCP) {
            atomic_store(&t->reason, FB_STDIO);
            sockstat_publish(t, fd, 0, 0, NULL, 0);
        }
        shunt_log_sock(LOG_INFO, t, fd, "stdio: moved back to kernel TCP: %s", why);
    }
    fdt_put(&f);
}

/* ---- libstdc++'s standard streams ---- */

/*
 * std::cin, std::cout, std::cerr and std::clog write through the FILE
 * pointer libstdc++ read from stdin/stdout/stderr when it started, which a
 * swap does not change.  libstdc++ is loaded by many programs that never use
 * them (libubsan needs it, say), so what counts is whether another loaded
 * object names one of them in its dynamic symbols: undefined (a library's
 * import), or defined (an executable's copy relocation).
 */
static const char *const cxx_streams[3][4] = {
    { "_ZSt3cin", "_ZSt4wcin", NULL, NULL },
    { "_ZSt4cout", "_ZSt5wcout", NULL, NULL },
    { "_ZSt4cerr", "_ZSt4clog", "_ZSt5wcerr", "_ZSt5wclog" },
};

struct cxx_scan {
    int fd;
    bool found;
};

/* The number of dynamic symbols from a DT_GNU_HASH table: past the highest
 * bucket's chain end. */
static size_t gnu_hash_symbols(const uint32_t *gh)
{
    uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_words = gh[2];
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(gh + 4) + bloom_words);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t last = 0;
    for (uint32_t i = 0; i < nbuckets; i++)
        if (buckets[i] > last)
            last = buckets[i];
    if (last < symoffset)
        return symoffset;
    while (!(chain[last - symoffset] & 1))
        last++;
    return (size_t)last + 1;
}

static int scan_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct cxx_scan *sc = arg;
    if (sc->found || (info->dlpi_name && (strstr(info->dlpi_name, "linux-vdso") ||
                                          strstr(info->dlpi_name, "libstdc++"))))
        return 0;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn)
        return 0;
    ElfW(Addr) base = info->dlpi_addr, symtab = 0, strtab = 0, hash = 0, gnuhash = 0;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        /* ld.so has made these absolute where .dynamic is writable */
        ElfW(Addr) v = d->d_un.d_ptr < base ? base + d->d_un.d_ptr : d->d_un.d_ptr;
        if (d->d_tag == DT_SYMTAB) symtab = v;
        else if (d->d_tag == DT_STRTAB) strtab = v;
        else if (d->d_tag == DT_HASH) hash = v;
        else if (d->d_tag == DT_GNU_HASH) gnuhash = v;
    }
    if (!symtab || !strtab || (!hash && !gnuhash))
        return 0;
    size_t n = hash ? ((const uint32_t *)hash)[1] : gnu_hash_symbols((const uint32_t *)gnuhash);
    const ElfW(Sym) *sym = (const ElfW(Sym) *)symtab;
    for (size_t i = 1; i < n && !sc->found; i++) {
        if (!sym[i].st_name)
            continue;
        const char *name = (const char *)strtab + sym[i].st_name;
        if (name[0] != '_' || name[1] != 'Z' || name[2] != 'S' || name[3] != 't')
            continue;
        for (int k = 0; k < 4 && cxx_streams[sc->fd][k]; k++)
            if (!strcmp(name, cxx_streams[sc->fd][k]))
                sc->found = true;
    }
    return 0;
}

/* Does this process use libstdc++'s standard stream of fd? */
static bool cxx_stream_used(int fd)
{
    if (!dlsym(RTLD_DEFAULT, "_ZSt4cout"))
        return false;   /* libstdc++ is not loaded */
    struct cxx_scan sc = { fd, false };
    dl_iterate_phdr(scan_object, &sc);
    return sc.found;
}

/* ---- fdopen, fileno ---- */

SHUNT_EXPORT FILE *fdopen(int fd, const char *mode)
{
    int saved = errno;
    SANDBOX_PASS(shunt_real.fdopen(fd, mode));
    if (!mode || !may_get_channel(fd)) {
        errno = saved;
        return shunt_real.fdopen(fd, mode);
    }
    errno = saved;
    /* glibc's rules (libio/iofdopen.c): r, w or a first; a '+' among the
     * next four characters (the rest is ignored); the fd's access mode
     * must allow the stream's; "a" sets O_APPEND on the fd. */
    bool rd, wr, app = false, plus = false;
    switch (mode[0]) {
    case 'r': rd = true, wr = false; break;
    case 'w': rd = false, wr = true; break;
    case 'a': rd = false, wr = true, app = true; break;
    default: errno = EINVAL; return NULL;
    }
    for (int i = 1; i < 5 && mode[i]; i++)
        if (mode[i] == '+') {
            rd = wr = plus = true;
            break;
        }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return NULL;
    if (((fl & O_ACCMODE) == O_RDONLY && wr) || ((fl & O_ACCMODE) == O_WRONLY && rd)) {
        errno = EINVAL;
        return NULL;
    }
    if (app && !(fl & O_APPEND) && fcntl(fd, F_SETFL, fl | O_APPEND) < 0)
        return NULL;
    char m[3] = { mode[0], plus ? '+' : '\0', '\0' };
    struct cstream *c = make_cookie(fd, -1, m);
    if (!c) {
        fall_back(fd, "no memory for a stream");
        errno = saved;
        return shunt_real.fdopen(fd, mode);
    }
    errno = saved;
    return c->fp;
}

/* ---- the standard streams ---- */

static pthread_mutex_t std_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cstream *std_cs[3];      /* created once per fd, never freed */
static FILE *std_orig[3];              /* the FILE swapped out */
static atomic_bool std_swapped[3];
static SHUNT_TLS bool std_busy;        /* this thread is swapping: the close it makes is its own */
static const char *const std_mode[3] = { "r", "w", "w" };

static FILE **std_var(int fd)
{
    return fd == 0 ? &stdin : fd == 1 ? &stdout : &stderr;
}

static void append(char **buf, size_t *len, const char *from, const char *to)
{
    if (!from || from >= to)
        return;
    size_t n = (size_t)(to - from);
    char *nb = realloc(*buf, *len + n);
    if (!nb)
        return;
    memcpy(nb + *len, from, n);
    *buf = nb;
    *len += n;
}

/* Appends the unread input of fp to *buf, in the order fp would give it.
 * Bytes pushed back with ungetc that were not the last ones read put glibc's
 * FILE in its backup area: those are the read area then, and the main
 * area's unread bytes wait in [save_base, save_end) (glibc's
 * _IO_switch_to_backup_area; gnulib's freadahead counts them so too).
 * __fpurge afterwards frees the backup area.  Until 2026-11-30 a standard
 * stream in its backup area fell back to kernel TCP instead, and a cookie
 * in it lost its main area's bytes when swapped out. */
static void take_unread(FILE *fp, char **buf, size_t *len)
{
    append(buf, len, fp->_IO_read_ptr, fp->_IO_read_end);
    if (fp->_flags & IO_IN_BACKUP)
        append(buf, len, fp->_IO_save_base, fp->_IO_save_end);
}

static int bufmode_of(const FILE *fp)
{
    return (fp->_flags & IO_UNBUFFERED) ? _IONBF : (fp->_flags & IO_LINE_BUF) ? _IOLBF : _IOFBF;
}

/* The cookie buffers as the FILE it stands for did: line-buffered if that
 * one was (a tty's stdout, or the program's setvbuf), unbuffered likewise;
 * otherwise fully, as glibc buffers a socket.  It is empty here. */
static void set_bufmode(struct cstream *c, int mode)
{
    setvbuf(c->fp, mode == _IONBF ? NULL : c->buf, mode, mode == _IONBF ? 0 : sizeof c->buf);
    c->bufmode = mode;
}

/* Under std_lock: fd is on a channel; its standard stream becomes a cookie. */
static void swap_in(int fd)
{
    FILE **var = std_var(fd);
    FILE *o = *var;
    struct cstream *c = std_cs[fd];
    if (!o || (c && o == c->fp) || shunt_real.fileno(o) != fd)
        return;   /* already, or the variable holds a stream of the program's that is not on fd */
    const char *why = NULL;
    if (cxx_stream_used(fd))
        why = "libstdc++'s standard streams (std::cin, std::cout, std::cerr) keep the FILE they saw at start-up";
    flockfile(o);
    if (!why && o->_mode > 0)
        why = "the standard stream is wide-oriented";
    if (!why && (!c || c->closed)) {
        c = make_cookie(fd, fd, std_mode[fd]);   /* a closed one stays closed for who holds it */
        if (c)
            std_cs[fd] = c;
        else
            why = "no memory for a stream";
    }
    if (why) {
        funlockfile(o);
        fall_back(fd, why);
        return;
    }
    flockfile(c->fp);
    set_bufmode(c, bufmode_of(o));
    /* output it holds: its next flush would have written it to this fd */
    size_t out = __fpending(o);
    if (out)
        fwrite_unlocked(o->_IO_write_base, 1, out, c->fp);
    /* input it read from what was on fd before comes first */
    take_unread(o, &c->pre, &c->pre_len);
    c->fp->_flags = (c->fp->_flags & ~IO_FLAGS_SEEN) | (o->_flags & IO_FLAGS_SEEN);
    __fpurge(o);
    o->_flags &= ~IO_FLAGS_SEEN;
    o->_fileno = -1;
    std_orig[fd] = o;
    *var = c->fp;
    atomic_store(&std_swapped[fd], true);
    funlockfile(c->fp);
    funlockfile(o);
    shunt_log(LOG_DEBUG, "fd %d: standard stream swapped for shunt's stream", fd);
}

/* Under std_lock: fd is not on a channel any more; the program's FILE is
 * back, with what the cookie held. */
static void swap_out(int fd)
{
    struct cstream *c = std_cs[fd];
    FILE *o = std_orig[fd];
    FILE **var = std_var(fd);
    flockfile(c->fp);
    flockfile(o);
    o->_fileno = fd;
    int mode = bufmode_of(c->fp);
    if (mode != c->bufmode)
        setvbuf(o, NULL, mode, 0);   /* the program's setvbuf meanwhile stays with the stream */
    char *unread = NULL;
    size_t nunread = 0;
    if (c->pre_off < c->pre_len) {
        nunread = c->pre_len - c->pre_off;
        unread = malloc(nunread);
        if (unread)
            memcpy(unread, c->pre + c->pre_off, nunread);
        else
            nunread = 0;
    }
    free(c->pre);
    c->pre = NULL;
    c->pre_len = c->pre_off = 0;
    take_unread(c->fp, &unread, &nunread);
    size_t out = __fpending(c->fp);
    if (out)
        fwrite_unlocked(c->fp->_IO_write_base, 1, out, o);   /* for this fd's next flush */
    o->_flags |= c->fp->_flags & IO_FLAGS_SEEN;
    __fpurge(c->fp);
    c->fp->_flags &= ~IO_FLAGS_SEEN;
    for (size_t i = nunread; i-- > 0;)
        ungetc((unsigned char)unread[i], o);
    free(unread);
    if (*var == c->fp)
        *var = o;
    atomic_store(&std_swapped[fd], false);
    funlockfile(o);
    funlockfile(c->fp);
    shunt_log(LOG_DEBUG, "fd %d: standard stream given back", fd);
}

void stdio_std_changed_slow(int fd)
{
    if (shunt_in_vfork_child || std_busy || !shunt_initialised())
        return;   /* a vfork child shares our memory, stdout included */
    int saved = errno;
    if (on_channel(fd) != atomic_load(&std_swapped[fd])) {
        crit_lock(&std_lock);
        std_busy = true;
        bool want = on_channel(fd);
        if (want && !atomic_load(&std_swapped[fd]))
            swap_in(fd);
        else if (!want && atomic_load(&std_swapped[fd]))
            swap_out(fd);
        std_busy = false;
        crit_unlock(&std_lock);
    }
    errno = saved;
}

void stdio_std_changed_range(unsigned first, unsigned last)
{
    for (unsigned fd = first; fd <= last && fd <= 2; fd++)
        stdio_std_changed_slow((int)fd);
}

void stdio_at_start(void)
{
    for (int fd = 0; fd <= 2; fd++)
        stdio_std_changed_slow(fd);
}

/* The index of the standard stream fp is (its cookie, or the FILE swapped
 * out for it), or -1.  Under std_lock. */
static int std_index(const FILE *fp)
{
    for (int i = 0; i <= 2; i++)
        if (std_cs[i] && (fp == std_cs[i]->fp || (atomic_load(&std_swapped[i]) && fp == std_orig[i])))
            return i;
    return -1;
}

static int fd_of(FILE *fp)
{
    for (int i = 0; i <= 2; i++)
        if (atomic_load(&std_swapped[i]) && fp == std_orig[i])
            return i;
    struct cstream *c = reg_find(fp);
    return c && !c->closed ? c->fd : -1;
}

static int do_fileno(FILE *fp, int (*real)(FILE *))
{
    int saved = errno;
    shunt_ensure_init();
    int r = real(fp);
    if (r >= 0)
        return r;
    int fd = fd_of(fp);
    if (fd < 0)
        return r;
    errno = saved;
    return fd;
}

SHUNT_EXPORT int fileno(FILE *fp)
{
    return do_fileno(fp, shunt_real.fileno);
}

SHUNT_EXPORT int fileno_unlocked(FILE *fp)
{
    return do_fileno(fp, shunt_real.fileno_unlocked);
}

/* fclose of a standard stream swapped for a cookie (through either
 * pointer): flushed, its fd closed, and the program's FILE back in the
 * variable, closed (fd -1: what is written to it fails with EBADF).  Under
 * std_lock. */
static int close_std(int i)
{
    struct cstream *c = std_cs[i];
    int r = fflush(c->fp) == 0 ? 0 : EOF;
    flockfile(c->fp);
    bool was_open = !c->closed;
    c->closed = true;
    funlockfile(c->fp);
    if (was_open && close(c->fd) < 0)   /* shunt's close; its hook waits for us (std_busy) */
        r = EOF;
    if (atomic_load(&std_swapped[i])) {
        swap_out(i);
        std_orig[i]->_fileno = -1;
    }
    return r;
}

bool stdio_fclose(FILE *fp, int *r)
{
    if (!fp || atomic_load_explicit(&registered, memory_order_relaxed) == 0)
        return false;
    crit_lock(&std_lock);
    int i = std_index(fp);
    if (i >= 0) {
        std_busy = true;
        *r = close_std(i);
        std_busy = false;
    }
    crit_unlock(&std_lock);
    if (i >= 0)
        return true;
    if (!reg_find(fp))
        return false;
    *r = shunt_real.fclose(fp);   /* flushes through cs_write, then cs_close closes the fd */
    return true;
}

/* ---- freopen ---- */

/* freopen of a cookie stream: glibc cannot turn one into a file stream (it
 * would write through the cookie FILE's missing wide data), so the cookie
 * stays and its fd number now holds the file, with the new mode. */
static FILE *reopen_cookie(struct cstream *c, const char *path, const char *mode)
{
    FILE *fp = c->fp;
    fflush(fp);
    if (!path) {
        /* glibc reopens /proc/self/fd/N, which a socket refuses; the stream is closed */
        if (!c->closed)
            close(c->fd);
        c->closed = true;
        errno = ENXIO;
        return NULL;
    }
    FILE *nf = fopen(path, mode);
    if (!nf) {
        int err = errno;
        if (!c->closed)
            close(c->fd);
        c->closed = true;
        errno = err;
        return NULL;
    }
    int nfd = shunt_real.fileno(nf);
    int r = nfd == c->fd ? 0 : dup3(nfd, c->fd, strchr(mode, 'e') ? O_CLOEXEC : 0);   /* shunt's dup3 */
    int err = errno;
    int access = nf->_flags & (IO_NO_READS | IO_NO_WRITES | IO_IS_APPENDING);
    if (nfd == c->fd)
        nf->_fileno = -1;   /* the FILE goes, the fd stays */
    shunt_real.fclose(nf);
    if (r < 0) {
        if (!c->closed)
            close(c->fd);
        c->closed = true;
        errno = err;
        return NULL;
    }
    flockfile(fp);
    __fpurge(fp);
    fp->_flags = (fp->_flags & ~(IO_NO_READS | IO_NO_WRITES | IO_IS_APPENDING | IO_FLAGS_SEEN)) | access;
    c->closed = false;
    funlockfile(fp);
    return fp;
}

static FILE *do_freopen(FILE *(*real)(const char *, const char *, FILE *), const char *path, const char *mode,
                        FILE *fp)
{
    int saved = errno;
    shunt_ensure_init();
    if (!fp || !mode)
        return real(path, mode, fp);
    /* a standard stream swapped for a cookie: it is flushed to the socket
     * (as freopen's close would), then the program's FILE is reopened */
    if (atomic_load_explicit(&registered, memory_order_relaxed) != 0) {
        crit_lock(&std_lock);
        int i = std_index(fp);
        if (i >= 0 && atomic_load(&std_swapped[i])) {
            std_busy = true;
            fflush(std_cs[i]->fp);
            swap_out(i);
            fp = std_orig[i];
            std_busy = false;
        }
        crit_unlock(&std_lock);
        struct cstream *c = i >= 0 && fp == std_orig[i] ? NULL : reg_find(fp);
        if (c) {
            FILE *r = reopen_cookie(c, path, mode);
            if (r)
                errno = saved;
            return r;
        }
    }
    if (shunt_sandboxed())
        return real(path, mode, fp);
    /* a file stream: glibc closes its fd, or dup3s the new file over it,
     * behind shunt's back; the fd table is told as close would tell it */
    int fd = fp->_fileno;
    struct shunt_sock *s = closing_begin(fd);
    FILE *r = real(path, mode, fp);
    int err = errno;
    closing_end(fd, s);
    stdio_std_changed(fd);
    errno = r ? saved : err;
    return r;
}

SHUNT_EXPORT FILE *freopen(const char *restrict path, const char *restrict mode, FILE *restrict fp)
{
    return do_freopen(shunt_real.freopen, path, mode, fp);
}

SHUNT_EXPORT FILE *freopen64(const char *restrict path, const char *restrict mode, FILE *restrict fp)
{
    return do_freopen(shunt_real.freopen64, path, mode, fp);
}

/* ---- exit and fork ---- */

void stdio_at_exit(void)
{
    if (atomic_load(&registered) == 0)
        return;
    /* As exit's own flush, without waiting for a lock another thread may
     * hold for ever; the streams' bytes go while the channels take them. */
    crit_lock(&reg_lock);
    for (size_t b = 0; b < BUCKETS; b++)
        for (struct cstream *c = table[b]; c; c = c->next) {
            bool locked = ftrylockfile(c->fp) == 0;
            fflush_unlocked(c->fp);
            if (locked)
                funlockfile(c->fp);
        }
    crit_unlock(&reg_lock);
}

void stdio_after_fork_child(void)
{
    /* another thread of the parent may have held them at the fork */
    pthread_mutex_init(&reg_lock, NULL);
    pthread_mutex_init(&std_lock, NULL);
}
