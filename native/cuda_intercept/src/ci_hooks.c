/*
 * ci_hooks.c — the exported wrappers, generated from the X-macro lists in
 * ci_hooks.h. Each wrapper fetches the real entry point (loading the driver
 * on first use) and hands it to the concept file's handler; a symbol the
 * installed driver lacks answers CUDA_ERROR_NOT_FOUND /
 * NVML_ERROR_FUNCTION_NOT_FOUND instead of crashing.
 */
#include "ci_internal.h"

#define CI_X_WRAP(sym, base, ver, ptds, handler, params, args)                  \
    CI_EXPORT CUresult sym params;                                              \
    CUresult sym params                                                         \
    {                                                                           \
        void *real_ = ci_lookup_real(CI_HOOK_##sym);                            \
        if (CI_UNLIKELY(real_ == NULL))                                         \
            return CUDA_ERROR_NOT_FOUND;                                        \
        return handler(real_, CI_UNPAREN args);                                 \
    }
CI_CUDA_HOOKS(CI_X_WRAP)
#undef CI_X_WRAP

#define CI_X_WRAP(sym, handler, params, args)                                   \
    CI_EXPORT nvmlReturn_t sym params;                                          \
    nvmlReturn_t sym params                                                     \
    {                                                                           \
        void *real_ = ci_lookup_real_nvml(CI_NVML_HOOK_##sym);                  \
        if (CI_UNLIKELY(real_ == NULL))                                         \
            return NVML_ERROR_FUNCTION_NOT_FOUND;                               \
        return handler(real_, CI_UNPAREN args);                                 \
    }
CI_NVML_HOOKS(CI_X_WRAP)
#undef CI_X_WRAP
