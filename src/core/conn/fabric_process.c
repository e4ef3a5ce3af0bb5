/*
 * fabric_process.c: the process's side of the fabric (fabric_process.h):
 * its engine, opened once, the lock over every call into it, and its own
 * doorbell.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/fd_place.h"
#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "base/settings.h"
#include "base/signals.h"
#include "core/conn/fabric_process.h"
#include "core/conn/fabric_progress.h"
#include "core/fd/fdtable.h"
#include "registry/bell_name.h"
#include "transport/fabric_engine.h"

/* Every stream and the engine: UCX's worker is not thread-safe.  Never
 * held across a wait. */
static pthread_mutex_t fab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fabric_engine *engine;
static pid_t engine_pid;
static bool engine_failed;
static bool engine_refused_fork;   /* failed: forked while the parent's was in use (TCP lanes) */
static char engine_why[200];

/*
 * The process's own doorbell, beside the engine's.  UCX's shared-memory
 * lanes wake a peer's worker through an abstract Unix socket, which lives
 * in one network namespace: between two namespaces its sendto is refused
 * and the doorbell lost (seen with strace: ECONNREFUSED), so a sleeper
 * waited for its 100 ms bound each time.  So each process also binds a
 * datagram socket at a path of its /dev/shm, named by a random id its
 * proof carries, and a proven peer (same user, same pid namespace) sends
 * a byte to it through /proc/<pid>/root, which reaches the socket file
 * across mount and network namespaces.  Sleepers wait on wake_fd, an
 * epoll set of the engine's fd and this socket.
 */
static int bell_fd = -1;
static int wake_fd = -1;
static uint64_t bell_id;
static char bell_file[108];
static pid_t bell_pid;

/* Under fab_lock, once the engine is open in this process. */
static void open_wake(void)
{
    int efd = fabric_engine_efd(engine);
    wake_fd = efd;
    bell_fd = -1;
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    if (getrandom(&bell_id, sizeof bell_id, GRND_NONBLOCK) != (ssize_t)sizeof bell_id)
        return;
    bell_path(a.sun_path, sizeof a.sun_path, "", (uint32_t)geteuid(), (uint32_t)shunt_pid, bell_id);
    /* (both above the program's range, as the engine's own fds) */
    int b = shunt_real.socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int w = shunt_real.epoll_create1(EPOLL_CLOEXEC);
    if (b >= 0)
        b = fd_place_move(b);
    if (w >= 0)
        w = fd_place_move(w);
    struct epoll_event ev = { .events = EPOLLIN };
    if (b < 0 || w < 0 || shunt_real.bind(b, (struct sockaddr *)&a, sizeof a) < 0 ||
        shunt_real.epoll_ctl(w, EPOLL_CTL_ADD, efd, &ev) < 0 || shunt_real.epoll_ctl(w, EPOLL_CTL_ADD, b, &ev) < 0) {
        if (b >= 0)
            shunt_real.close(b);
        if (w >= 0)
            shunt_real.close(w);
        unlink(a.sun_path);
        shunt_log(LOG_WARN, "fabric: no doorbell of its own (%s): between namespaces a wait may take 100 ms",
                  strerror(errno));
        return;
    }
    memcpy(bell_file, a.sun_path, sizeof bell_file);
    fdt_install_own(b);   /* never the program's to close */
    fdt_install_own(w);
    bell_fd = b;
    wake_fd = w;
    bell_pid = shunt_pid;
}

__attribute__((destructor)) static void bell_gone(void)
{
    if (bell_fd >= 0 && bell_pid == getpid())
        unlink(bell_file);
}

void fabric_process_lock(void)
{
    crit_lock(&fab_lock);
    shunt_in_engine++;   /* the sockets UCX makes meanwhile (its TCP lanes') are its own */
}

void fabric_process_unlock(void)
{
    shunt_in_engine--;
    crit_unlock(&fab_lock);
}

/* Under fab_lock: the engine and this process's doorbell go (a later
 * connection opens them anew). */
static void close_engine(void)
{
    if (bell_fd >= 0) {
        shunt_real.close(bell_fd);
        fdt_forget(bell_fd);
        unlink(bell_file);
        bell_fd = -1;
    }
    if (wake_fd >= 0 && wake_fd != fabric_engine_efd(engine)) {
        shunt_real.close(wake_fd);
        fdt_forget(wake_fd);
    }
    wake_fd = -1;
    fabric_engine_close(engine);
    engine = NULL;
}

void fabric_process_fork_lock(void)
{
    /* An engine nothing uses is closed before a fork, so that the child
     * starts from a UCX that runs nothing: one that had started its
     * threads leaves the child a UCX whose memory says they run.  Over
     * TCP lanes such a child's engine could never be reached
     * (fabric_engine_forks_whole); over any lane its event handlers would
     * be added to the parent's thread's set, shared through the fork.
     * shunt's own progress thread ends first (it waits for this lock). */
    crit_lock(&fab_lock);
    bool idle = engine && engine_pid == shunt_pid && fabric_engine_idle(engine);
    if (idle) {
        crit_unlock(&fab_lock);
        fabric_progress_stop();
        crit_lock(&fab_lock);
        if (engine && engine_pid == shunt_pid && fabric_engine_idle(engine)) {
            close_engine();
            shunt_log(LOG_INFO, "fabric: the engine, unused, closed before a fork");
        } else if (engine && engine_pid == shunt_pid && bell_fd >= 0) {
            fabric_progress_start(engine);   /* taken up meanwhile: it goes on */
        }
    }
}

void fabric_process_fork_unlock(bool child)
{
    if (child)
        fabric_progress_after_fork_child();
    crit_unlock(&fab_lock);   /* in both, this thread took it: it lets it go, as atfork handlers do */
}

bool fabric_process_fork_refused(void)
{
    return engine_refused_fork && engine_pid == shunt_pid;
}

bool fabric_process_has_engine(void)
{
    return engine && engine_pid == shunt_pid;
}

/*
 * The engine's fds (about 11 of UCX's, one more per peer over TCP lanes)
 * go above the program's fd limit (interpose/engine_fd_calls.c), in the
 * room up to the hard limit.  With no room (the soft limit equal to the
 * hard one, as `ulimit -n N` sets both) they go near the top of the
 * program's range instead (base/fd_place.h), taking numbers a program that
 * opens nearly all it may would have had: it would meet EMFILE that many
 * early.  Below NO_ROOM_LIMIT, where programs do reach their limit (a
 * `ulimit -n 64`, select's 1024), no engine is opened then (by design:
 * fabric_no_room); at or above it (this workplace's machines set 20000
 * for both, containers 1048576) the engine opens (compatibility.md).
 */
#define ROOM_MIN 32u
#define NO_ROOM_LIMIT 4096u

bool fabric_process_no_room(void)
{
    struct rlimit rl;
    return getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < NO_ROOM_LIMIT &&
           rl.rlim_max != RLIM_INFINITY && rl.rlim_max - rl.rlim_cur < ROOM_MIN;
}

struct fabric_engine *fabric_process_engine(char *why, size_t whylen)
{
    if (engine_pid != shunt_pid) {   /* a forked child: its parent's engine is not its own */
        engine_failed = false;
        engine_refused_fork = false;
        if (engine && !fabric_engine_forks_whole(engine)) {
            /* the parent's was in use at the fork: no peer could reach ours */
            engine_failed = true;
            engine_refused_fork = true;
            snprintf(engine_why, sizeof engine_why,
                     "forked while the parent's engine was in use, whose lanes (UCX's TCP lanes) a child cannot "
                     "be reached on");
        }
        engine = NULL;
        engine_pid = shunt_pid;
    }
    if (!engine && !engine_failed && fabric_process_no_room()) {
        snprintf(why, whylen, "no engine: no room above the fd limit for its fds");
        return NULL;   /* (not for good: the limit may be raised) */
    }
    if (!engine && !engine_failed) {
        if (fabric_engine_open(&engine, shunt_settings.fabric_lanes, engine_why, sizeof engine_why) < 0) {
            engine = NULL;
            engine_failed = true;
        } else {
            open_wake();
            if (bell_fd >= 0)   /* (its news reach sleepers through the doorbell) */
                fabric_progress_start(engine);
        }
    }
    if (!engine)
        snprintf(why, whylen, "no engine: %.150s", engine_why);
    return engine;
}

uint64_t fabric_process_bell_id(void)
{
    return bell_id;
}

int fabric_process_wake_fd(void)
{
    return wake_fd;
}

void fabric_process_drain_bells(void)
{
    char b[64];
    if (bell_fd >= 0)
        while (shunt_real.recv(bell_fd, b, sizeof b, MSG_DONTWAIT) > 0)
            ;
}

void fabric_process_wake_self(void)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    if (bell_fd < 0 || bell_pid != shunt_pid)
        return;
    memcpy(a.sun_path, bell_file, sizeof a.sun_path);
    fabric_process_ring(&a);
}

void fabric_process_peer_bell(struct sockaddr_un *out, uint32_t pid, uint64_t id)
{
    char root[32];
    snprintf(root, sizeof root, "/proc/%u/root", (unsigned)pid);
    memset(out, 0, sizeof *out);
    out->sun_family = AF_UNIX;
    bell_path(out->sun_path, sizeof out->sun_path, root, (uint32_t)geteuid(), pid, id);
}

void fabric_process_ring(const struct sockaddr_un *peer)
{
    if (bell_fd >= 0)
        shunt_real.sendto(bell_fd, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL, (const struct sockaddr *)peer, sizeof *peer);
}
