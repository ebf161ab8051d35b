/*
 * ci_context.c — CUDA contexts: each one's device memory is measured when it is created
 * and charged against the limit (ci_footprint.c), and given back when it is destroyed.
 *
 * The primary context (the one the CUDA runtime, and so PyTorch, JAX and CuPy, use) is
 * created by the first cuDevicePrimaryCtxRetain of a device in the process and destroyed
 * by the cuDevicePrimaryCtxRelease(_v2) that drops the process's retain count to 0: only
 * that retain is measured and only that release gives the charge back.
 * cuDevicePrimaryCtxReset(_v2) is not hooked: it destroys the context's state but not the
 * retain, and the context comes back, as large, at its next use; the charge stays.
 * Each cuCtxCreate_v2/_v3/_v4 creates a context, measured and charged against its handle,
 * given back by cuCtxDestroy_v2. A creation the limit refuses is undone (released,
 * destroyed) and answered CUDA_ERROR_OUT_OF_MEMORY: a context that does not fit is not
 * created.
 *
 * Measured creations run one at a time in the process under ci_context_lock, held across
 * the real call (the one lock of the library held across a driver call: two threads
 * creating at once would each see both contexts; creations are rare and off every hot
 * path). A creation re-entered from inside the driver on the same thread (a profiler's
 * context callback) passes through unmeasured instead of waiting for itself. Each process
 * has its own contexts and charges them in its own ledger share, so the workload's
 * processes add up.
 */
#include <pthread.h>

#include "ci_internal.h"
#include "ci_memory_accounting.h"
#include "ci_nvml.h"

typedef CUresult (*ci_retain_fn)(CUcontext *, CUdevice);
typedef CUresult (*ci_release_fn)(CUdevice);
typedef CUresult (*ci_create2_fn)(CUcontext *, unsigned int, CUdevice);
typedef CUresult (*ci_create3_fn)(CUcontext *, CUexecAffinityParam *, int, unsigned int, CUdevice);
typedef CUresult (*ci_create4_fn)(CUcontext *, CUctxCreateParams *, unsigned int, CUdevice);
typedef CUresult (*ci_destroy_fn)(CUcontext);

static pthread_mutex_t ci_context_lock = PTHREAD_MUTEX_INITIALIZER;
static int ci_context_primary_refs[CI_MAX_DEVICES];       /* this process's retains (lock) */
static uint64_t ci_context_primary_bytes[CI_MAX_DEVICES]; /* their context's charge (lock) */
/* The thread holding ci_context_lock (0: none): a call from inside a creation on that
 * thread must not wait for itself. No thread-local storage: that would make the library
 * need the dynamic loader's __tls_get_addr. */
static _Atomic uintptr_t ci_context_owner;

static bool ci_context_dev_ok(CUdevice dev)
{
    return dev >= 0 && dev < CI_MAX_DEVICES;
}

/* Takes the creation lock unless this thread holds it already (a call from inside a
 * creation). Returns whether it was taken here: only then is a creation measured. Either
 * way the lock is held until ci_context_leave. */
static bool ci_context_enter(void)
{
    ci_nvml_prepare(); /* its dlopen takes the loader's lock: never under ours */
    ci_mps_enforce();  /* MPS mode: a context is created with the limits' client settings */
    uintptr_t self = (uintptr_t)pthread_self();
    if (atomic_load(&ci_context_owner) == self)
        return false;
    pthread_mutex_lock(&ci_context_lock);
    atomic_store(&ci_context_owner, self);
    return true;
}

static void ci_context_leave(bool taken)
{
    if (!taken)
        return;
    atomic_store(&ci_context_owner, 0);
    pthread_mutex_unlock(&ci_context_lock);
}

CUresult ci_on_primary_ctx_retain(void *real, CUcontext *pctx, CUdevice dev)
{
    ci_runtime_ensure();
    if (!ci_context_dev_ok(dev))
        return ((ci_retain_fn)real)(pctx, dev);
    bool taken = ci_context_enter();
    bool creates = taken && ci_context_primary_refs[dev] == 0;
    struct ci_footprint_probe probe;
    if (creates)
        ci_footprint_begin(&probe, dev);
    CUresult r = ((ci_retain_fn)real)(pctx, dev);
    if (creates) {
        uint64_t bytes = 0;
        if (ci_footprint_end(&probe, r == CUDA_SUCCESS, &bytes) != 0) {
            ci_release_fn undo = (ci_release_fn)ci_lookup_real(CI_HOOK_cuDevicePrimaryCtxRelease_v2);
            if (undo == NULL)
                undo = (ci_release_fn)ci_lookup_real(CI_HOOK_cuDevicePrimaryCtxRelease);
            if (undo != NULL)
                undo(dev);
            if (pctx != NULL)
                *pctx = NULL;
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else if (r == CUDA_SUCCESS) {
            ci_context_primary_bytes[dev] = bytes;
        }
    }
    if (r == CUDA_SUCCESS)
        ci_context_primary_refs[dev]++;
    ci_context_leave(taken);
    return r;
}

/* Both cuDevicePrimaryCtxRelease (CUDA 7) and _v2 (11.0): the same signature. */
CUresult ci_on_primary_ctx_release(void *real, CUdevice dev)
{
    ci_runtime_ensure();
    if (!ci_context_dev_ok(dev))
        return ((ci_release_fn)real)(dev);
    bool taken = ci_context_enter();
    CUresult r = ((ci_release_fn)real)(dev);
    if (r == CUDA_SUCCESS && ci_context_primary_refs[dev] > 0 &&
        --ci_context_primary_refs[dev] == 0) {
        ci_footprint_discharge(dev, ci_context_primary_bytes[dev]);
        ci_context_primary_bytes[dev] = 0;
    }
    ci_context_leave(taken);
    return r;
}

/* Common tail of the cuCtxCreate variants, `p` begun before the real call that answered
 * `r`: charges the new context or destroys it again. */
static CUresult ci_context_created(struct ci_footprint_probe *p, CUresult r, CUcontext *pctx,
                                   CUdevice dev)
{
    bool created = r == CUDA_SUCCESS && pctx != NULL && *pctx != NULL;
    uint64_t bytes = 0;
    if (ci_footprint_end(p, created, &bytes) != 0) {
        ci_destroy_fn destroy = (ci_destroy_fn)ci_lookup_real(CI_HOOK_cuCtxDestroy_v2);
        if (destroy != NULL)
            destroy(*pctx);
        *pctx = NULL;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (created && ci_alloc_table_insert((uint64_t)(uintptr_t)*pctx, CI_ALLOC_CONTEXT, bytes, dev) != 0)
        ci_log("allocation table full; a context's %llu bytes stay charged after it is destroyed",
               (unsigned long long)bytes);
    return r;
}

#define CI_CONTEXT_CREATE(call, pctx, dev)                                      \
    do {                                                                        \
        ci_runtime_ensure();                                                    \
        if (!ci_context_dev_ok(dev))                                            \
            return (call);                                                      \
        bool taken_ = ci_context_enter();                                       \
        CUresult r_;                                                            \
        if (taken_) {                                                           \
            struct ci_footprint_probe probe_;                                   \
            ci_footprint_begin(&probe_, (dev));                                 \
            r_ = ci_context_created(&probe_, (call), (pctx), (dev));            \
        } else {                                                                \
            r_ = (call);                                                        \
        }                                                                       \
        ci_context_leave(taken_);                                               \
        return r_;                                                              \
    } while (0)

CUresult ci_on_ctx_create(void *real, CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CI_CONTEXT_CREATE(((ci_create2_fn)real)(pctx, flags, dev), pctx, dev);
}

CUresult ci_on_ctx_create_v3(void *real, CUcontext *pctx, CUexecAffinityParam *params,
                             int nparams, unsigned int flags, CUdevice dev)
{
    CI_CONTEXT_CREATE(((ci_create3_fn)real)(pctx, params, nparams, flags, dev), pctx, dev);
}

CUresult ci_on_ctx_create_v4(void *real, CUcontext *pctx, CUctxCreateParams *params,
                             unsigned int flags, CUdevice dev)
{
    CI_CONTEXT_CREATE(((ci_create4_fn)real)(pctx, params, flags, dev), pctx, dev);
}

CUresult ci_on_ctx_destroy(void *real, CUcontext ctx)
{
    ci_runtime_ensure();
    uint64_t bytes = 0;
    int dev = 0;
    bool found = ci_alloc_table_remove((uint64_t)(uintptr_t)ctx, CI_ALLOC_CONTEXT, &bytes, &dev) == 0;
    CUresult r = ((ci_destroy_fn)real)(ctx);
    if (found) {
        if (r == CUDA_SUCCESS)
            ci_footprint_discharge(dev, bytes);
        else
            ci_alloc_table_insert((uint64_t)(uintptr_t)ctx, CI_ALLOC_CONTEXT, bytes, dev);
    }
    return r;
}

void ci_context_after_fork_child(void)
{
    pthread_mutex_init(&ci_context_lock, NULL);
    for (int d = 0; d < CI_MAX_DEVICES; d++) {
        ci_context_primary_refs[d] = 0;
        ci_context_primary_bytes[d] = 0;
    }
    atomic_store(&ci_context_owner, 0);
}
