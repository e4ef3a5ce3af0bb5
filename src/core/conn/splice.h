/*
 * splice.h: splice(2) and sendfile(2) with an accelerated socket at one end.
 */
#ifndef SHUNT_SPLICE_H
#define SHUNT_SPLICE_H

#include "core/kinds/tcp_socket.h"

/* Handles the call when either end is an accelerated socket (true, with the
 * result or a negative errno in *result); false leaves it to the kernel. */
bool splice_accelerated(struct fdref *in, off64_t *off_in, struct fdref *out, off64_t *off_out, size_t len,
                        unsigned int flags, ssize_t *result);

/* sendfile onto an accelerated socket: the file's bytes are read straight
 * into the ring, with the kernel's offset rules. */
ssize_t splice_sendfile(struct tcp_sock *t, struct fdref *out, int in_fd, off64_t *off, size_t count);

#endif
