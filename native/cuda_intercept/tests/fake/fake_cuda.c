/*
 * fake_cuda.c — a fake libcuda.so.1 for CI machines without a GPU. Built for
 * the tests only; never shipped.
 *
 * It exports the driver entry points the interceptor wraps (every _v2, _ptds
 * and _ptsz variant), resolves them through cuGetProcAddress /
 * cuGetProcAddress_v2 by (name, version, per-thread flag) like the real
 * driver, counts calls per exported symbol and keeps fake device memory. The
 * copies are fake_copies.c; the simulated GPU (kernel time, utilisation samples for fake NVML)
 * is fake_gpu.c; the work a process queues on it, streams and events fake_streams.c;
 * contexts, arrays and inter-process handles fake_objects.c;
 * graphs, stream capture and the graph memory pool fake_graph.c; what the MPS client's
 * variables were at the first driver calls fake_mps_env.c.
 *
 * Environment: FAKECUDA_DEVICES (1), FAKECUDA_TOTAL_MEM (16 GiB),
 * FAKECUDA_SMS (132), FAKECUDA_WAVE_NS (20000: one wave of blocks),
 * FAKECUDA_GRAPH_NS (200000), FAKENVML_SAMPLE_MS (50), FAKENVML_UTIL (fixed
 * utilisation override), FAKECUDA_SHARED_GPU (a file: processes naming it
 * share one GPU), FAKECUDA_CAPTURING (streams report a capture), FAKECUDA_VIRTUAL_TIME
 * (virtual time: fake_clock.c), FAKECUDA_BENCH (free launches, no counting),
 * FAKECUDA_CTX_BYTES (device memory a context takes, 0), FAKECUDA_LAZY_IMAGE_BYTES (taken
 * once, at the first kernel launch: a lazily loaded module image, 0), FAKECUDA_NO_FUNC_NAME
 * (cuFuncGetName refuses: fake_objects.c). CUDA_MPS_* are only
 * noted, as the first cuInit and cuDriverGetVersion see them (MPS mode's tests).  Control
 * API: fakecuda_* (fake_control.h).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fake_internal.h"

#define DEV_BASE 0x7f0000000000ull
#define DEV_SPAN (1ull << 44)

/* ---- configuration ------------------------------------------------------- */

uint64_t env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    return (v != NULL && *v != '\0') ? strtoull(v, NULL, 10) : def;
}

uint64_t mono_ns(void)
{
    return fakecuda_clock_ns();
}

uint64_t unix_us(void)
{
    return fakecuda_clock_unix_ns() / 1000;
}

void sleep_ns(uint64_t ns)
{
    fakecuda_clock_sleep_ns(ns);
}

/* ---- call counters -------------------------------------------------------- */

#define MAX_NAMES 256
static struct {
    char name[64];
    unsigned long calls;
} counters[MAX_NAMES];
static pthread_mutex_t counters_lock = PTHREAD_MUTEX_INITIALIZER;

/* FAKECUDA_BENCH=1 (bench/launch_bench.c): launches cost nothing and calls are not
 * counted, so that what a benchmark measures is the interceptor, not the fake. */
int fake_bench(void)
{
    static int bench = -1;
    if (__atomic_load_n(&bench, __ATOMIC_RELAXED) < 0)
        __atomic_store_n(&bench, env_u64("FAKECUDA_BENCH", 0) != 0, __ATOMIC_RELAXED);
    return __atomic_load_n(&bench, __ATOMIC_RELAXED);
}

void count_call(const char *name)
{
    if (fake_bench())
        return;
    pthread_mutex_lock(&counters_lock);
    for (int i = 0; i < MAX_NAMES; i++) {
        if (counters[i].name[0] == '\0')
            snprintf(counters[i].name, sizeof counters[i].name, "%s", name);
        if (strcmp(counters[i].name, name) == 0) {
            counters[i].calls++;
            break;
        }
    }
    pthread_mutex_unlock(&counters_lock);
}

FAKE_EXPORT unsigned long fakecuda_calls(const char *name)
{
    unsigned long n = 0;
    pthread_mutex_lock(&counters_lock);
    for (int i = 0; i < MAX_NAMES && counters[i].name[0] != '\0'; i++)
        if (strcmp(counters[i].name, name) == 0)
            n = counters[i].calls;
    pthread_mutex_unlock(&counters_lock);
    return n;
}

/* ---- device memory -------------------------------------------------------- */

#define MEM_SLOTS (1u << 16)
static struct {
    uint64_t key;
    uint64_t bytes;
    int used;
} mem[MEM_SLOTS];
static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t mem_next = DEV_BASE, mem_used_bytes, handle_next = 1;

static CUresult mem_add(uint64_t key, uint64_t bytes)
{
    uint64_t total = env_u64("FAKECUDA_TOTAL_MEM", 16ull << 30);
    if (mem_used_bytes + bytes > total)
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (uint32_t i = 0, h = (uint32_t)(key >> 4); i < MEM_SLOTS; i++) {
        uint32_t k = (h + i) & (MEM_SLOTS - 1);
        if (!mem[k].used) {
            mem[k].used = 1;
            mem[k].key = key;
            mem[k].bytes = bytes;
            mem_used_bytes += bytes;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

static CUresult mem_remove(uint64_t key)
{
    for (uint32_t i = 0, h = (uint32_t)(key >> 4); i < MEM_SLOTS; i++) {
        uint32_t k = (h + i) & (MEM_SLOTS - 1);
        if (mem[k].used && mem[k].key == key) {
            mem[k].used = 0;
            mem_used_bytes -= mem[k].bytes;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_mem_take(uint64_t bytes)
{
    pthread_mutex_lock(&mem_lock);
    uint64_t total = env_u64("FAKECUDA_TOTAL_MEM", 16ull << 30);
    CUresult r = mem_used_bytes + bytes > total ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        mem_used_bytes += bytes;
    pthread_mutex_unlock(&mem_lock);
    return r;
}

void fake_mem_give(uint64_t bytes)
{
    pthread_mutex_lock(&mem_lock);
    mem_used_bytes -= bytes < mem_used_bytes ? bytes : mem_used_bytes;
    pthread_mutex_unlock(&mem_lock);
}

uint64_t fake_next_address(uint64_t bytes)
{
    pthread_mutex_lock(&mem_lock);
    uint64_t p = mem_next;
    mem_next += (bytes + 511) & ~511ull;
    pthread_mutex_unlock(&mem_lock);
    return p;
}

static CUresult fake_alloc(CUdeviceptr *dptr, size_t bytes)
{
    if (dptr == NULL || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mem_lock);
    uint64_t p = mem_next;
    CUresult r = mem_add(p, bytes);
    if (r == CUDA_SUCCESS) {
        mem_next += (bytes + 511) & ~511ull;
        *dptr = p;
    }
    pthread_mutex_unlock(&mem_lock);
    return r;
}

static CUresult fake_free(uint64_t key)
{
    pthread_mutex_lock(&mem_lock);
    CUresult r = mem_remove(key);
    pthread_mutex_unlock(&mem_lock);
    return r;
}

FAKE_EXPORT uint64_t fakecuda_used_bytes(void)
{
    pthread_mutex_lock(&mem_lock);
    uint64_t u = mem_used_bytes;
    pthread_mutex_unlock(&mem_lock);
    return u;
}

/* ---- entry points ---------------------------------------------------------- */

static __thread int current_device;

FAKE_EXPORT void fakecuda_set_device(int dev)
{
    current_device = dev;
}


F(cuInit, (unsigned int flags)) { (void)flags; count_call("cuInit"); fake_note_env("cuInit"); return CUDA_SUCCESS; }
/* Not hooked by the interceptor: a program's call reaches the fake directly. */
F(cuDriverGetVersion, (int *version))
{
    count_call("cuDriverGetVersion");
    fake_note_env("cuDriverGetVersion");
    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *version = 12080;
    return CUDA_SUCCESS;
}
F(cuDeviceGetCount, (int *count)) { *count = (int)env_u64("FAKECUDA_DEVICES", 1); return CUDA_SUCCESS; }
F(cuDeviceGet, (CUdevice *dev, int ordinal)) { *dev = ordinal; return CUDA_SUCCESS; }
F(cuCtxGetDevice, (CUdevice *dev)) { *dev = current_device; return CUDA_SUCCESS; }
F(cuCtxSynchronize, (void)) { count_call("cuCtxSynchronize"); return CUDA_SUCCESS; }
F(cuDeviceGetAttribute, (int *value, int attrib, CUdevice dev))
{
    (void)dev;
    *value = attrib == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT ? (int)env_u64("FAKECUDA_SMS", 132) : 0;
    return CUDA_SUCCESS;
}
F(cuDeviceGetPCIBusId, (char *bus, int len, CUdevice dev))
{
    snprintf(bus, (size_t)len, "00000000:%02X:00.0", 0x10 + dev);
    return CUDA_SUCCESS;
}
F(cuPointerGetAttribute, (void *data, int attribute, CUdeviceptr ptr))
{
    if (attribute != CU_POINTER_ATTRIBUTE_MEMORY_TYPE || ptr < DEV_BASE || ptr >= DEV_BASE + DEV_SPAN)
        return CUDA_ERROR_INVALID_VALUE;
    *(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
    return CUDA_SUCCESS;
}

/* Legacy 32-bit-pointer ABI: must never be wrapped by the interceptor. */
F(cuMemAlloc, (unsigned int *dptr, size_t bytes)) { (void)bytes; count_call("cuMemAlloc"); *dptr = 0x1000; return CUDA_SUCCESS; }

F(cuMemAlloc_v2, (CUdeviceptr *dptr, size_t bytes)) { count_call("cuMemAlloc_v2"); return fake_alloc(dptr, bytes); }
F(cuMemAllocManaged, (CUdeviceptr *dptr, size_t bytes, unsigned int flags)) { (void)flags; count_call("cuMemAllocManaged"); return fake_alloc(dptr, bytes); }
F(cuMemAllocPitch_v2, (CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem))
{
    (void)elem;
    count_call("cuMemAllocPitch_v2");
    *pitch = (width + 511) & ~(size_t)511;
    return fake_alloc(dptr, *pitch * height);
}
/* On a capturing stream (fake_graph.c) an asynchronous allocation is a memory node of the
 * captured graph: an address, no memory. */
#define PT_STREAM(s, pt) ((pt) && (s) == NULL ? CU_STREAM_PER_THREAD : (s)) /* _ptsz: 0 is per-thread */
#define ASYNC_ALLOC(name, pt) F(name, (CUdeviceptr *dptr, size_t bytes, CUstream s)) { count_call(#name); return fake_capture_alloc(PT_STREAM(s, pt), dptr, bytes) ? CUDA_SUCCESS : fake_alloc(dptr, bytes); }
ASYNC_ALLOC(cuMemAllocAsync, 0)
ASYNC_ALLOC(cuMemAllocAsync_ptsz, 1)
#define POOL_ALLOC(name, pt) F(name, (CUdeviceptr *dptr, size_t bytes, CUmemoryPool p, CUstream s)) { (void)p; count_call(#name); return fake_capture_alloc(PT_STREAM(s, pt), dptr, bytes) ? CUDA_SUCCESS : fake_alloc(dptr, bytes); }
POOL_ALLOC(cuMemAllocFromPoolAsync, 0)
POOL_ALLOC(cuMemAllocFromPoolAsync_ptsz, 1)
F(cuMemFree_v2, (CUdeviceptr dptr)) { count_call("cuMemFree_v2"); return fake_free(dptr); }
#define ASYNC_FREE(name) F(name, (CUdeviceptr dptr, CUstream s)) { (void)s; count_call(#name); return fake_free(dptr); }
ASYNC_FREE(cuMemFreeAsync)
ASYNC_FREE(cuMemFreeAsync_ptsz)
F(cuMemCreate, (CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop, unsigned long long flags))
{
    (void)prop; (void)flags;
    count_call("cuMemCreate");
    pthread_mutex_lock(&mem_lock);
    uint64_t key = (handle_next++) << 4 | 0xF0000000000ull;
    CUresult r = mem_add(key, size);
    pthread_mutex_unlock(&mem_lock);
    if (r == CUDA_SUCCESS)
        *h = key;
    return r;
}
F(cuMemRelease, (CUmemGenericAllocationHandle h)) { count_call("cuMemRelease"); return fake_import_release(h) ? CUDA_SUCCESS : fake_free(h); }
F(cuMemGetInfo_v2, (size_t *free_bytes, size_t *total_bytes))
{
    count_call("cuMemGetInfo_v2");
    uint64_t total = env_u64("FAKECUDA_TOTAL_MEM", 16ull << 30);
    *total_bytes = total;
    *free_bytes = total - fakecuda_used_bytes();
    return CUDA_SUCCESS;
}
F(cuDeviceTotalMem_v2, (size_t *bytes, CUdevice dev)) { (void)dev; count_call("cuDeviceTotalMem_v2"); *bytes = env_u64("FAKECUDA_TOTAL_MEM", 16ull << 30); return CUDA_SUCCESS; }

/* FAKECUDA_LAZY_IMAGE_BYTES: the first launch loads a module image (lazy loading). */
static void fake_lazy_image(void)
{
    static int loaded;
    if (!__atomic_exchange_n(&loaded, 1, __ATOMIC_ACQ_REL) && env_u64("FAKECUDA_LAZY_IMAGE_BYTES", 0))
        fake_mem_take(env_u64("FAKECUDA_LAZY_IMAGE_BYTES", 0));
}

#define LAUNCH(name) \
    F(name, (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned sh, CUstream s, void **p, void **e)) \
    { (void)f; (void)bx; (void)by; (void)bz; (void)sh; (void)s; (void)p; (void)e; count_call(#name); fake_lazy_image(); gpu_launch((uint64_t)gx * gy * gz); return CUDA_SUCCESS; }
LAUNCH(cuLaunchKernel)
LAUNCH(cuLaunchKernel_ptsz)
#define LAUNCH_EX(name) \
    F(name, (const CUlaunchConfig *c, CUfunction f, void **p, void **e)) \
    { (void)f; (void)p; (void)e; count_call(#name); gpu_launch((uint64_t)c->gridDimX * c->gridDimY * c->gridDimZ); return CUDA_SUCCESS; }
LAUNCH_EX(cuLaunchKernelEx)
LAUNCH_EX(cuLaunchKernelEx_ptsz)
#define LAUNCH_COOP(name) \
    F(name, (CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned sh, CUstream s, void **p)) \
    { (void)f; (void)bx; (void)by; (void)bz; (void)sh; (void)s; (void)p; count_call(#name); gpu_launch((uint64_t)gx * gy * gz); return CUDA_SUCCESS; }
LAUNCH_COOP(cuLaunchCooperativeKernel)
LAUNCH_COOP(cuLaunchCooperativeKernel_ptsz)
#define GRAPH(name) F(name, (CUgraphExec g, CUstream s)) { (void)s; count_call(#name); fake_graph_launch(g); gpu_submit(env_u64("FAKECUDA_GRAPH_NS", 200000)); return CUDA_SUCCESS; }
GRAPH(cuGraphLaunch)
GRAPH(cuGraphLaunch_ptsz)

/* ---- cuGetProcAddress ---------------------------------------------------- */

F(cuGetProcAddress, (const char *symbol, void **pfn, int version, cuuint64_t flags));
F(cuGetProcAddress_v2, (const char *symbol, void **pfn, int version, cuuint64_t flags,
                        CUdriverProcAddressQueryResult *status));

const struct fake_entry fake_cuda_entries[] = {
    FAKE_ENTRY(cuInit, cuInit, 2000, 0),
    FAKE_ENTRY(cuDriverGetVersion, cuDriverGetVersion, 2020, 0),
    FAKE_ENTRY(cuDeviceGetCount, cuDeviceGetCount, 2000, 0),
    FAKE_ENTRY(cuDeviceGet, cuDeviceGet, 2000, 0),
    FAKE_ENTRY(cuCtxGetDevice, cuCtxGetDevice, 2000, 0),
    FAKE_ENTRY(cuCtxSynchronize, cuCtxSynchronize, 2000, 0),
    FAKE_ENTRY(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, 0),
    FAKE_ENTRY(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId, 4010, 0),
    FAKE_ENTRY(cuPointerGetAttribute, cuPointerGetAttribute, 4000, 0),
    FAKE_ENTRY(cuGetProcAddress, cuGetProcAddress, 11030, 0),
    FAKE_ENTRY(cuGetProcAddress_v2, cuGetProcAddress, 12000, 0),
    FAKE_ENTRY(cuMemAlloc, cuMemAlloc, 2000, 0), FAKE_ENTRY(cuMemAlloc_v2, cuMemAlloc, 3020, 0),
    FAKE_ENTRY(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, 0),
    FAKE_ENTRY(cuMemAllocManaged, cuMemAllocManaged, 6000, 0),
    FAKE_ENTRY(cuMemAllocAsync, cuMemAllocAsync, 11020, 0),
    FAKE_ENTRY(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, 1),
    FAKE_ENTRY(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0),
    FAKE_ENTRY(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, 1),
    FAKE_ENTRY(cuMemFree_v2, cuMemFree, 3020, 0),
    FAKE_ENTRY(cuMemFreeAsync, cuMemFreeAsync, 11020, 0),
    FAKE_ENTRY(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, 1),
    FAKE_ENTRY(cuMemCreate, cuMemCreate, 10020, 0),
    FAKE_ENTRY(cuMemRelease, cuMemRelease, 10020, 0),
    FAKE_ENTRY(cuMemGetInfo_v2, cuMemGetInfo, 3020, 0),
    FAKE_ENTRY(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, 0),
    FAKE_ENTRY(cuLaunchKernel, cuLaunchKernel, 4000, 0),
    FAKE_ENTRY(cuLaunchKernel_ptsz, cuLaunchKernel, 7000, 1),
    FAKE_ENTRY(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 0),
    FAKE_ENTRY(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 11060, 1),
    FAKE_ENTRY(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, 0),
    FAKE_ENTRY(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 9000, 1),
    FAKE_ENTRY(cuGraphLaunch, cuGraphLaunch, 10000, 0),
    FAKE_ENTRY(cuGraphLaunch_ptsz, cuGraphLaunch, 10000, 1),
    FAKE_ENTRIES_END,
};

static const struct fake_entry *const lists[] = {
    fake_cuda_entries, fake_copy_entries, fake_stream_entries, fake_object_entries, fake_graph_entries, NULL,
};

/* Like the driver: the newest ABI of `symbol` not newer than `version`, the
 * per-thread variant when asked for and available. */
static int resolve(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    int want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) ? 1 : 0;
    const struct fake_entry *best = NULL;
    int found_name = 0;
    for (const struct fake_entry *const *list = lists; *list != NULL; list++)
        for (const struct fake_entry *e = *list; e->name != NULL; e++) {
            if (strcmp(e->base, symbol) != 0)
                continue;
            found_name = 1;
            if (e->version > version || (e->per_thread && !want_pt))
                continue;
            if (best == NULL || e->per_thread > best->per_thread ||
                (e->per_thread == best->per_thread && e->version > best->version))
                best = e;
        }
    if (best == NULL) {
        *pfn = NULL;
        return found_name ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                          : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    *pfn = best->fn;
    return CU_GET_PROC_ADDRESS_SUCCESS;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int version, cuuint64_t flags)
{
    count_call("cuGetProcAddress");
    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    return resolve(symbol, pfn, version, flags) == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
    count_call("cuGetProcAddress_v2");
    if (symbol == NULL || pfn == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    int st = resolve(symbol, pfn, version, flags);
    if (status != NULL)
        *status = st;
    return st == 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FAKE_EXPORT void *fakecuda_real(const char *name)
{
    for (const struct fake_entry *const *list = lists; *list != NULL; list++)
        for (const struct fake_entry *e = *list; e->name != NULL; e++)
            if (strcmp(e->name, name) == 0)
                return e->fn;
    return NULL;
}

/* Forked children (tests fork under load) must not inherit a held lock. */
static void fake_prepare(void)
{
    pthread_mutex_lock(&counters_lock);
    pthread_mutex_lock(&mem_lock);
    gpu_lock_for_fork();
}

static void fake_after(void)
{
    gpu_unlock_after_fork();
    pthread_mutex_unlock(&mem_lock);
    pthread_mutex_unlock(&counters_lock);
}

__attribute__((constructor)) static void fake_init(void)
{
    pthread_atfork(fake_prepare, fake_after, fake_after);
}
