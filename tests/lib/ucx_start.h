/*
 * ucx_start.h: a UCX context and one single-threaded worker, as the
 * programs that link UCX themselves make them (bench/ucx_probe.c,
 * tests/programs/ucx_echo.c).  Settings come from the environment's UCX_*,
 * as in any UCX program.  Any failure prints what failed and exits 1.
 */
#ifndef SHUNT_TESTS_UCX_START_H
#define SHUNT_TESTS_UCX_START_H

#include <stdio.h>
#include <stdlib.h>

#include <ucp/api/ucp.h>

static inline void ucx_must(const char *what, ucs_status_t s)
{
    if (s == UCS_OK)
        return;
    fprintf(stderr, "%s: %s\n", what, ucs_status_string(s));
    exit(1);
}

/* features: UCP_FEATURE_* */
static inline ucp_worker_h ucx_start(uint64_t features, ucp_context_h *ctx)
{
    ucp_config_t *cfg;
    ucx_must("ucp_config_read", ucp_config_read(NULL, NULL, &cfg));
    ucp_params_t pp = { .field_mask = UCP_PARAM_FIELD_FEATURES, .features = features };
    ucx_must("ucp_init", ucp_init(&pp, cfg, ctx));
    ucp_config_release(cfg);
    ucp_worker_params_t wp = { .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                               .thread_mode = UCS_THREAD_MODE_SINGLE };
    ucp_worker_h w;
    ucx_must("ucp_worker_create", ucp_worker_create(*ctx, &wp, &w));
    return w;
}

#endif
