/*
 * release.h: a process lets go of a connection: its last fd closes (or it
 * exits), and the last holder of an end closes the end as TCP would.
 */
#ifndef SHUNT_CORE_CONN_RELEASE_H
#define SHUNT_CORE_CONN_RELEASE_H

#include "core/fd/tcp_sock.h"

/* Lets go of the channel of f's socket; the last holder of the end closes
 * it as TCP would. */
void release_channel(struct fdref *f);

/* The last fd of this process on f's socket closes: calls of other threads
 * that wait on it keep the connection open until the last of them returns
 * (deferred_close.c); otherwise the channel is let go of now. */
void release_last_fd(struct fdref *f);

#endif
