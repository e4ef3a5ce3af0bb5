/*
 * zcopy.h: single-copy sends (DESIGN section 4): above a threshold, a
 * blocking send posts a description of the program's own buffer in the
 * segment, and the receiver copies straight from it with process_vm_readv.
 * The send returns once the receiver took the bytes (the buffer may then be
 * reused), or hands what is left to the ring when the receiver is not
 * taking them, so a send never waits longer for a single copy than the ring
 * would have made it wait.
 */
#ifndef SHUNT_ZCOPY_H
#define SHUNT_ZCOPY_H

#include "core/kinds/tcp_socket.h"

/* Sender: tries to deliver the first bytes of iov by single copy.  Returns
 * how many were delivered (0..total); the caller sends the rest through the
 * ring.  may_block is false for non-blocking sends, which never use it. */
size_t zc_send(struct tcp_sock *t, int fd, const struct iovec *iov, int iovcnt, size_t total, bool may_block);

/* Receiver: when the peer posted a single-copy send at the current read
 * position, copies up to max of it into iov (from byte skip of the iovec).
 * Returns the bytes copied; 0 when nothing is posted there; -EAGAIN when
 * the ring must be looked at again first (bytes ahead of the post, or the
 * post was withdrawn or refused); -EIO for a corrupt description; -EFAULT. */
ssize_t zc_recv(struct tcp_sock *t, int fd, const struct iovec *iov, int iovcnt, size_t skip, size_t max, bool peek);

/* Bytes the peer has posted and this end has not taken yet. */
uint64_t zc_pending(struct tcp_sock *t);

/* True while this end's own single-copy send is posted: the ring must not
 * take bytes from another thread meanwhile (they belong after it). */
bool zc_tx_busy(struct tcp_sock *t);

#endif
