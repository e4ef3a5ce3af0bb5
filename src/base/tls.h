/*
 * tls.h: thread-local storage of libshunt.so, in the initial-exec model: a
 * plain %fs-relative access instead of a call to __tls_get_addr on every
 * use.  Fine for a library that is preloaded, which is how shunt is loaded.
 */
#ifndef SHUNT_BASE_TLS_H
#define SHUNT_BASE_TLS_H

#define SHUNT_TLS _Thread_local __attribute__((tls_model("initial-exec")))

#endif
