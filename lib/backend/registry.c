// registry.c - picks a backend by name. The only C file that knows whether the
// CUDA backend was compiled in (style.md rule 8).
#include "backend/backend.h"
#include "backend/forward-ops.h"

#include <string.h>

enum oscar_status oscar_backend_get(const char * name, const struct oscar_backend_i ** out) {
    *out = NULL;
    if (!name || strcmp(name, "cpu") == 0) {
        *out = osc_backend_cpu();
        return OSCAR_OK;
    }
    if (strcmp(name, "cuda") == 0) {
#ifdef OSCAR_USE_CUDA
        return osc_backend_cuda(out);
#else
        return osc_error(OSCAR_ERR_UNSUPPORTED, "CUDA backend not compiled in (build with make CUDA=1)");
#endif
    }
    return osc_error(OSCAR_ERR_INVALID, "unknown backend '%s' (cpu, cuda)", name);
}

enum oscar_status osc_fwd_ops_get(const char * device, const struct osc_fwd_ops ** out) {
    *out = NULL;
    if (!device || strcmp(device, "cpu") == 0) {
        *out = osc_fwd_ops_cpu();
        return OSCAR_OK;
    }
    if (strcmp(device, "cuda") == 0) {
#ifdef OSCAR_USE_CUDA
        return osc_fwd_ops_cuda(out);
#else
        return osc_error(OSCAR_ERR_UNSUPPORTED, "forward: CUDA backend not compiled in (build with make CUDA=1)");
#endif
    }
    return osc_error(OSCAR_ERR_INVALID, "forward: unknown device '%s' (cpu, cuda)", device);
}
