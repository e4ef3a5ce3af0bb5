/*
 * negotiate_plan.c: what a connection's negotiation decides before any
 * socket object exists (negotiate.h): a client's plan (kernel TCP and why,
 * or an offer to make) and an accepted connection that nothing can claim.
 * Both run on every connect and accept of a program, most of which stay
 * on kernel TCP: they read process-local state and the registry's
 * lock-free hints only, and make no system call.
 */
#include "base/self.h"
#include "base/settings.h"
#include "core/conn/negotiate.h"
#include "core/conn/short_conns.h"
#include "core/fd/uring_watch.h"
#include "registry/registry.h"
#include "registry/synopt.h"

enum fallback_reason negotiate_plan(const struct sockaddr *dst_sa, socklen_t len, struct offer_plan *plan)
{
    plan->mark = plan->unrecorded = plan->cross = plan->watch = false;
    if (!shunt_settings.accel)
        return FB_DISABLED;
    if (shunt_sandbox_refuses())
        return FB_SANDBOX;
    if (uring_seen())
        return FB_URING;
    if (atomic_load_explicit(&shunt_raw_clones, memory_order_acquire))
        return FB_RAW_CLONE;
    if (reg_addr_from_sockaddr(&plan->dst, dst_sa, len) < 0) {
        plan->unrecorded = true;   /* AF_UNSPEC and friends: the kernel will answer */
        return FB_NOT_NEGOTIATED;
    }
    /* another namespace's listener is found only when the SYN will carry
     * this socket's cookie (`shunt fabric enable`) */
    plan->cross = !reg_addr_is_loopback(&plan->dst);
    if (plan->cross && !synopt_fabric_on())
        return FB_NOT_LOOPBACK;
    int r = reg_open();
    if (r < 0)
        return r == -EPERM ? FB_NOT_OURS : FB_REGISTRY;
    /* before the listener's lookup, which costs the registry's lock: a
     * destination judged short had an accelerated listener a moment ago */
    if (short_conns_skip(&plan->dst, &plan->watch))
        return FB_SHORT;
    if (plan->cross && shunt_settings.fabric_only) {
        plan->mark = true;   /* no offer: the server's hello, and the engine */
        return FB_NO_LISTENER;
    }
    int m = plan->cross ? reg_host_listener_match(&plan->dst) : reg_listener_match(&plan->dst);
    if (m <= 0) {
        plan->mark = plan->cross && m == 0;
        return m < 0 ? FB_REGISTRY : FB_NO_LISTENER;
    }
    return FB_NONE;
}

enum fallback_reason negotiate_no_offer_reason(const struct tcp_sock *listener)
{
    return uring_seen() ? FB_URING : listener->syn_program ? FB_SAVED_SYN : FB_NO_OFFER;
}

enum fallback_reason negotiate_unclaimable(const struct tcp_sock *listener)
{
    if (!shunt_settings.accel)
        return FB_DISABLED;
    if (shunt_sandbox_refuses())
        return FB_SANDBOX;
    if (atomic_load_explicit(&shunt_raw_clones, memory_order_acquire))
        return FB_RAW_CLONE;
    if (!reg_conn_offers_maybe())
        return negotiate_no_offer_reason(listener);
    return FB_NONE;
}
