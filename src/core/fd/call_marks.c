/*
 * call_marks.c: the list of the threads' call marks (call_marks.h).
 *
 * A mark lives in its thread's static TLS block, which goes away with the
 * thread: a thread-specific key whose destructor runs as the thread exits
 * takes the mark off the list first.
 */
#include <pthread.h>

#include "core/fd/call_marks.h"
#include "base/signals.h"

SHUNT_TLS struct call_mark shunt_call_mark;

static pthread_mutex_t marks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct call_mark *marks;
static pthread_key_t exit_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static bool key_ok;

static void unlist(void *p)
{
    struct call_mark *m = p;
    crit_lock(&marks_lock);
    if (m->listed) {
        if (m->prev)
            m->prev->next = m->next;
        else
            marks = m->next;
        if (m->next)
            m->next->prev = m->prev;
        m->prev = m->next = NULL;
        m->listed = false;
    }
    crit_unlock(&marks_lock);
}

static void make_key(void)
{
    key_ok = pthread_key_create(&exit_key, unlist) == 0;
}

void call_mark_list(void)
{
    struct call_mark *m = &shunt_call_mark;
    /* A critical section: a handler of the program that interrupted the
     * pthread_once below and made a data call would wait for the once its
     * own thread is running, for ever.  It runs right after instead. */
    crit_enter();
    pthread_once(&key_once, make_key);
    /* without the key the mark could outlive its thread: left unlisted
     * (a close then does not wait for this thread's calls) */
    if (key_ok && pthread_setspecific(exit_key, m) == 0) {
        crit_lock(&marks_lock);
        if (!m->listed) {
            m->prev = NULL;
            m->next = marks;
            if (marks)
                marks->prev = m;
            marks = m;
            m->listed = true;
        }
        crit_unlock(&marks_lock);
    }
    crit_leave();
}

unsigned call_marks_on(const struct shunt_sock *s)
{
    unsigned n = 0;
    crit_lock(&marks_lock);
    for (struct call_mark *m = marks; m; m = m->next)
        if (m != &shunt_call_mark && atomic_load_explicit(&m->sock, memory_order_relaxed) == s)
            n++;
    crit_unlock(&marks_lock);
    return n;
}

void call_marks_after_fork_child(void)
{
    /* the other threads' marks are copies of memory nobody uses here */
    pthread_mutex_init(&marks_lock, NULL);
    struct call_mark *m = &shunt_call_mark;
    marks = m->listed ? m : NULL;
    m->prev = m->next = NULL;
}
