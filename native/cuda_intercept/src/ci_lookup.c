/*
 * ci_lookup.c — how callers reach the wrappers, and how the wrappers reach
 * the real driver.
 *
 * Three doors lead into libcuda and all three are covered:
 *   1. direct linking: LD_PRELOAD puts our exported symbols first;
 *   2. dlsym(handle, "cu...") (cuBLAS, NVRTC users, ctypes): we export dlsym
 *      itself and hand out our wrapper for hooked names that exist in `handle`;
 *      the real dlsym comes from dlvsym(RTLD_NEXT, "dlsym", <glibc version>);
 *   3. cuGetProcAddress (the CUDA runtime since 11.3): we call the real one,
 *      then map the returned pointer back to our wrapper — by pointer identity
 *      first (exact for every version and _ptds/_ptsz variant), by
 *      (name, version, per-thread flag) otherwise. When asked for
 *      cuGetProcAddress itself (runtime: at 11030 and 12000) we return our own,
 *      so everything it resolves afterwards stays hooked.
 *
 * Real entry points come from our own dlopen("libcuda.so.1") and
 * dlopen("libnvidia-ml.so.1") handles, never from a global lookup (which
 * would find our wrappers again).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "ci_internal.h"

/* Our exported wrappers (defined in ci_hooks.c). */
#define CI_X_DECL(sym, base, ver, ptds, handler, params, args) CUresult sym params;
CI_CUDA_HOOKS(CI_X_DECL)
#undef CI_X_DECL
#define CI_X_DECL(sym, handler, params, args) nvmlReturn_t sym params;
CI_NVML_HOOKS(CI_X_DECL)
#undef CI_X_DECL

struct ci_hook_info {
    const char *name;
    const char *base;
    int min_version;
    int per_thread;
    void *wrapper;
};

static const struct ci_hook_info ci_hook_table[CI_HOOK_COUNT] = {
#define CI_X_INFO(sym, base, ver, ptds, handler, params, args) \
    [CI_HOOK_##sym] = {#sym, #base, ver, ptds, (void *)sym},
    CI_CUDA_HOOKS(CI_X_INFO)
#undef CI_X_INFO
};

static const struct {
    const char *name;
    void *wrapper;
} ci_nvml_table[CI_NVML_HOOK_COUNT] = {
#define CI_X_INFO(sym, handler, params, args) [CI_NVML_HOOK_##sym] = {#sym, (void *)sym},
    CI_NVML_HOOKS(CI_X_INFO)
#undef CI_X_INFO
};

/* dlsym runs before the sanitizer runtimes are initialised (they resolve
 * their own interceptors through it) and must tail-call the real dlsym so that
 * RTLD_NEXT stays relative to the original caller: the whole dlsym path is
 * kept free of instrumentation and keeps sibling calls in every build. */
#define CI_DLSYM_PATH \
    __attribute__((no_sanitize("address", "thread", "undefined"), optimize("optimize-sibling-calls")))

static void *_Atomic ci_real_cuda[CI_HOOK_COUNT];
static void *_Atomic ci_real_nvml[CI_NVML_HOOK_COUNT];
struct ci_driver_calls ci_driver;

typedef void *(*ci_dlsym_fn)(void *, const char *);
static ci_dlsym_fn _Atomic ci_real_dlsym_ptr;
static pthread_once_t ci_driver_once = PTHREAD_ONCE_INIT;
static pthread_once_t ci_nvml_once = PTHREAD_ONCE_INIT;

/* Finds the C library's dlsym. glibc >= 2.34 has it in libc as GLIBC_2.34;
 * older ones in libdl as GLIBC_2.2.5 (x86_64) or GLIBC_2.17 (aarch64). */
CI_DLSYM_PATH static ci_dlsym_fn ci_lookup_find_real_dlsym(void)
{
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17",
                                           "GLIBC_2.0"};
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        void *p = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        if (p != NULL)
            return (ci_dlsym_fn)p;
    }
    static const char *const libs[] = {"libc.so.6", "libdl.so.2"};
    for (size_t i = 0; i < sizeof libs / sizeof libs[0]; i++) {
        void *h = dlopen(libs[i], RTLD_NOW | RTLD_NOLOAD);
        if (h == NULL)
            continue;
        for (size_t j = 0; j < sizeof versions / sizeof versions[0]; j++) {
            void *p = dlvsym(h, "dlsym", versions[j]);
            if (p != NULL)
                return (ci_dlsym_fn)p;
        }
    }
    return NULL;
}

CI_DLSYM_PATH void *ci_lookup_real_dlsym(void *handle, const char *name)
{
    ci_dlsym_fn fn = atomic_load_explicit(&ci_real_dlsym_ptr, memory_order_acquire);
    if (CI_UNLIKELY(fn == NULL)) {
        fn = ci_lookup_find_real_dlsym();
        if (fn == NULL) {
            ci_log("cannot find the C library's dlsym; dlsym lookups fail");
            return NULL;
        }
        atomic_store_explicit(&ci_real_dlsym_ptr, fn, memory_order_release);
    }
    return fn(handle, name);
}

/* True when p is one of our own wrappers (must never be stored as "real"). */
CI_DLSYM_PATH static bool ci_lookup_is_wrapper(const void *p)
{
    for (int i = 0; i < CI_HOOK_COUNT; i++)
        if (ci_hook_table[i].wrapper == p)
            return true;
    for (int i = 0; i < CI_NVML_HOOK_COUNT; i++)
        if (ci_nvml_table[i].wrapper == p)
            return true;
    return false;
}

/* Stores a real pointer for hook `id` unless one is known or p is ours. */
CI_DLSYM_PATH static void ci_lookup_offer_real(int id, void *p)
{
    if (p == NULL || ci_lookup_is_wrapper(p))
        return;
    void *expected = NULL;
    atomic_compare_exchange_strong(&ci_real_cuda[id], &expected, p);
}

/* pthread_once body: opens the driver and resolves the tables. */
static void ci_lookup_do_load_driver(void)
{
    ci_mps_enforce(); /* MPS mode: before the driver can read its environment */
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h == NULL) {
        ci_log("cannot load libcuda.so.1 (%s)", dlerror());
        return;
    }
    for (int i = 0; i < CI_HOOK_COUNT; i++)
        ci_lookup_offer_real(i, ci_lookup_real_dlsym(h, ci_hook_table[i].name));
#define CI_RESOLVE(field) \
    ci_driver.field = (__typeof__(ci_driver.field))ci_lookup_real_dlsym(h, #field)
    CI_RESOLVE(cuCtxGetDevice);
    CI_RESOLVE(cuDeviceGetCount);
    CI_RESOLVE(cuDeviceGetAttribute);
    CI_RESOLVE(cuDeviceGetPCIBusId);
    CI_RESOLVE(cuPointerGetAttribute);
    CI_RESOLVE(cuMemFree_v2);
    CI_RESOLVE(cuMemRelease);
    CI_RESOLVE(cuEventCreate);
    CI_RESOLVE(cuEventRecord);
    CI_RESOLVE(cuEventQuery);
    CI_RESOLVE(cuStreamQuery);
    CI_RESOLVE(cuStreamIsCapturing);
    CI_RESOLVE(cuThreadExchangeStreamCaptureMode);
    CI_RESOLVE(cuGraphGetNodes);
    CI_RESOLVE(cuGraphNodeGetType);
    CI_RESOLVE(cuGraphMemAllocNodeGetParams);
    CI_RESOLVE(cuGraphChildGraphNodeGetGraph);
    CI_RESOLVE(cuDeviceGetGraphMemAttribute);
    CI_RESOLVE(cuFuncGetName);
    CI_RESOLVE(cuKernelGetName);
#undef CI_RESOLVE
    /* CUDA 12.8 added the _v2 spellings; older drivers have only the first. */
    void *elapsed = ci_lookup_real_dlsym(h, "cuEventElapsedTime_v2");
    if (elapsed == NULL)
        elapsed = ci_lookup_real_dlsym(h, "cuEventElapsedTime");
    ci_driver.cuEventElapsedTime = (__typeof__(ci_driver.cuEventElapsedTime))elapsed;
    ci_driver.cuEventDestroy =
        (__typeof__(ci_driver.cuEventDestroy))ci_lookup_real_dlsym(h, "cuEventDestroy_v2");
}

void ci_lookup_load_driver(void)
{
    pthread_once(&ci_driver_once, ci_lookup_do_load_driver);
}

void *ci_lookup_real(ci_hook_id id)
{
    void *p = atomic_load_explicit(&ci_real_cuda[id], memory_order_acquire);
    if (CI_LIKELY(p != NULL))
        return p;
    ci_lookup_load_driver();
    return atomic_load_explicit(&ci_real_cuda[id], memory_order_acquire);
}

/* pthread_once body: opens NVML and resolves the hooked NVML entries. */
static void ci_lookup_do_load_nvml(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (h == NULL)
        return;
    for (int i = 0; i < CI_NVML_HOOK_COUNT; i++) {
        void *p = ci_lookup_real_dlsym(h, ci_nvml_table[i].name);
        void *expected = NULL;
        if (p != NULL && !ci_lookup_is_wrapper(p))
            atomic_compare_exchange_strong(&ci_real_nvml[i], &expected, p);
    }
}

void *ci_lookup_real_nvml(ci_nvml_hook_id id)
{
    void *p = atomic_load_explicit(&ci_real_nvml[id], memory_order_acquire);
    if (CI_LIKELY(p != NULL))
        return p;
    pthread_once(&ci_nvml_once, ci_lookup_do_load_nvml);
    return atomic_load_explicit(&ci_real_nvml[id], memory_order_acquire);
}

CI_DLSYM_PATH void *ci_lookup_wrapper_by_name(const char *name)
{
    if (name[0] == 'c' && name[1] == 'u') {
        for (int i = 0; i < CI_HOOK_COUNT; i++)
            if (strcmp(ci_hook_table[i].name, name) == 0)
                return ci_hook_table[i].wrapper;
    } else if (strncmp(name, "nvml", 4) == 0) {
        for (int i = 0; i < CI_NVML_HOOK_COUNT; i++)
            if (strcmp(ci_nvml_table[i].name, name) == 0)
                return ci_nvml_table[i].wrapper;
    }
    return NULL;
}

/* Records a real pointer obtained by someone else's dlsym for a hooked name. */
CI_DLSYM_PATH static void ci_lookup_note_real(const char *name, void *p)
{
    if (name[0] == 'c') {
        for (int i = 0; i < CI_HOOK_COUNT; i++)
            if (strcmp(ci_hook_table[i].name, name) == 0)
                ci_lookup_offer_real(i, p);
        return;
    }
    for (int i = 0; i < CI_NVML_HOOK_COUNT; i++) {
        void *expected = NULL;
        if (strcmp(ci_nvml_table[i].name, name) == 0 && !ci_lookup_is_wrapper(p))
            atomic_compare_exchange_strong(&ci_real_nvml[i], &expected, p);
    }
}

/* The dlsym everyone in the process calls. For hooked names that exist in
 * `handle` it answers with our wrapper; everything else is a tail call into
 * the real dlsym so that RTLD_NEXT keeps meaning "after the caller". */
CI_DLSYM_PATH CI_EXPORT void *dlsym(void *handle, const char *name)
{
    if ((name[0] == 'c' && name[1] == 'u') || name[0] == 'n') {
        void *wrapper = ci_lookup_wrapper_by_name(name);
        if (wrapper != NULL) {
            void *real = ci_lookup_real_dlsym(handle, name);
            if (real == NULL)
                return NULL;
            ci_lookup_note_real(name, real);
            return wrapper;
        }
    }
    return ci_lookup_real_dlsym(handle, name);
}

/* Maps what the real cuGetProcAddress returned to the pointer we hand out. */
static void *ci_lookup_route(const char *symbol, void *real, int version, cuuint64_t flags)
{
    for (int i = 0; i < CI_HOOK_COUNT; i++)
        if (atomic_load_explicit(&ci_real_cuda[i], memory_order_relaxed) == real)
            return ci_hook_table[i].wrapper;
    if (ci_lookup_is_wrapper(real))
        return real;
    /* Not an exported symbol we resolved: route by name, version and flag. */
    int per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? 1 : 0;
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; pass++) {
        for (int i = 0; i < CI_HOOK_COUNT; i++) {
            const struct ci_hook_info *h = &ci_hook_table[i];
            if (strcmp(h->base, symbol) != 0 && strcmp(h->name, symbol) != 0)
                continue;
            if (h->min_version > version || h->per_thread != per_thread)
                continue;
            if (best < 0 || h->min_version > ci_hook_table[best].min_version)
                best = i;
        }
        per_thread = 0; /* no per-thread variant: the driver gave the legacy one */
    }
    if (best < 0)
        return real;
    ci_lookup_offer_real(best, real);
    if (atomic_load_explicit(&ci_real_cuda[best], memory_order_relaxed) != real) {
        ci_debug("cuGetProcAddress(%s, %d, %llu): unknown implementation; not hooked", symbol,
                 version, (unsigned long long)flags);
        return real;
    }
    return ci_hook_table[best].wrapper;
}

typedef CUresult (*ci_gpa_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*ci_gpa2_fn)(const char *, void **, int, cuuint64_t,
                               CUdriverProcAddressQueryResult *);

CUresult ci_on_get_proc_address(void *real, const char *symbol, void **pfn, int version,
                                cuuint64_t flags)
{
    CUresult r = ((ci_gpa_fn)real)(symbol, pfn, version, flags);
    if (r == CUDA_SUCCESS && symbol != NULL && pfn != NULL && *pfn != NULL)
        *pfn = ci_lookup_route(symbol, *pfn, version, flags);
    return r;
}

CUresult ci_on_get_proc_address_v2(void *real, const char *symbol, void **pfn, int version,
                                   cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    CUresult r = ((ci_gpa2_fn)real)(symbol, pfn, version, flags, status);
    if (r == CUDA_SUCCESS && symbol != NULL && pfn != NULL && *pfn != NULL)
        *pfn = ci_lookup_route(symbol, *pfn, version, flags);
    return r;
}
