/*
 * pingpong_cc.c: the child's client in the modes that make a connection
 * each time (cc, crr, get): it connects over and over until the parent
 * tells it to stop.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pingpong.h"

/* The parent closes its end of the (non-blocking) stop pipe when it has
 * accepted enough. */
static int told_to_stop(int stop_fd)
{
    char x;
    return read(stop_fd, &x, 1) == 0;
}

/* get: the answer to the end; true if it was size bytes, then the end. */
static bool get_answer(int fd, char *buf, size_t size)
{
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, buf, size);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 && got == size;
        got += (size_t)r;
    }
}

/* cc: connect, wait for the server's close, close; until told to stop.
 * crr (size > 0): connect, a request of size bytes, its answer, close: the
 * client closes first, so TIME_WAIT stays with its own ports (a server's
 * TIME_WAIT held a SYN that reused a port up for a second now and then);
 * cc cannot, its client would fill the backlog.  Counts the connections
 * made and those that were accelerated. */
void cc_client(const struct endpoint *e, int stop_fd, size_t size, bool get, char *buf, long *made,
               long *accel)
{
    while (!told_to_stop(stop_fd)) {
        int fd = connect_to(e);
        if (fd < 0) {
            int err = errno;   /* the stop pipe's read sets its own */
            if (told_to_stop(stop_fd))
                return;
            /* out of ephemeral ports (TIME_WAIT): end early, the parent
             * reports the rate of what it accepted */
            if (err == EADDRNOTAVAIL)
                return;
            errno = err;
            die("child: connect");
        }
        struct conn k = { .fd = fd };
        if (get) {
            if (conn_send(&k, buf, 1) < 0 || !get_answer(fd, buf, size)) {
                close(fd);
                if (told_to_stop(stop_fd))
                    return;
                die("child: get");
            }
        } else if (size > 0) {
            if (conn_send(&k, buf, size) < 0 || conn_recv(&k, buf, size) != 1) {
                close(fd);
                if (told_to_stop(stop_fd))
                    return;
                die("child: crr request");
            }
        }
        char b;
        ssize_t r = 0;
        while (size == 0 && !get && (r = read(fd, &b, 1)) < 0 && errno == EINTR)   /* get: read already */
            ;
        if (r != 0) {
            close(fd);
            if (told_to_stop(stop_fd))
                return; /* reset: left in the backlog of the closed listener */
            fprintf(stderr, "pingpong: cc: expected the server's close, got %zd (%s)\n", r,
                    r < 0 ? strerror(errno) : "data");
            exit(1);
        }
        int a = accelerated(fd);   /* asked once: the run's rate includes the question */
        if (a == 1)
            (*accel)++;
        else if (a < 0)
            *accel = -1; /* no libshunt: nothing to count */
        (*made)++;
        close(fd);
    }
}
