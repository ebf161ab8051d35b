/*
 * ci_memory.c — the hard GPU memory limit.
 *
 * Every allocation first RESERVES its size in the workload's ledger (ci_ledger.c: refused
 * when the total of all the workload's processes would pass the limit; kept in kernel
 * record locks, so nothing the tenant writes into the region changes it), then calls the
 * driver without any lock held, then either records the allocation (so the free returns
 * exactly that amount) or returns the reservation. A refusal is CUDA_ERROR_OUT_OF_MEMORY
 * and nothing else happens: the process goes on, and PyTorch raises a catchable
 * OutOfMemoryError.
 *
 * Counted here: cuMemAlloc_v2, cuMemAllocPitch_v2 (pitch * height, known after the
 * call), cuMemAllocManaged, cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemCreate
 * (device locations); freed by cuMemFree_v2, cuMemFreeAsync, cuMemRelease. A
 * stream-ordered allocation on a capturing stream allocates nothing yet: it becomes a
 * memory node of the captured graph, charged when that graph is instantiated
 * (ci_graphmem.c). Elsewhere: CUDA arrays (ci_array.c), contexts and the rest of the
 * driver's footprint (ci_context.c, ci_footprint.c).
 * Reported: cuMemGetInfo_v2, cuDeviceTotalMem_v2 and NVML's
 * nvmlDeviceGetMemoryInfo(_v2) show min(limit, physical) as the total and everything the
 * workload has charged (the footprint included) as used.
 */
#include "ci_internal.h"
#include "ci_memory_accounting.h"
#include "ci_nvml.h"

typedef CUresult (*ci_alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*ci_alloc_pitch_fn)(CUdeviceptr *, size_t *, size_t, size_t, unsigned int);
typedef CUresult (*ci_alloc_managed_fn)(CUdeviceptr *, size_t, unsigned int);
typedef CUresult (*ci_alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*ci_alloc_pool_fn)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
typedef CUresult (*ci_free_fn)(CUdeviceptr);
typedef CUresult (*ci_free_async_fn)(CUdeviceptr, CUstream);
typedef CUresult (*ci_create_fn)(CUmemGenericAllocationHandle *, size_t,
                                 const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*ci_release_fn)(CUmemGenericAllocationHandle);
typedef CUresult (*ci_info_fn)(size_t *, size_t *);
typedef CUresult (*ci_total_fn)(size_t *, CUdevice);
typedef nvmlReturn_t (*ci_nvml_info_fn)(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t (*ci_nvml_info2_fn)(nvmlDevice_t, nvmlMemory_v2_t *);

static int ci_memory_clamp_dev(int dev)
{
    return (dev >= 0 && dev < CI_MAX_DEVICES) ? dev : 0;
}

/* This process's record of `dev` in its region slot, NULL when it has no slot. */
static struct ci_region_device *ci_memory_record(int dev)
{
    int slot = ci_runtime_slot();
    return slot < 0 ? NULL : &ci_region_get()->slots[slot].dev[dev];
}

int ci_memory_reserve(int dev, uint64_t bytes)
{
    dev = ci_memory_clamp_dev(dev);
    struct ci_region_device *rec = ci_memory_record(dev);
    uint64_t limit = ci_region_memory_limit();
    int rc = ci_ledger_reserve(dev, bytes, limit, rec);
    if (rc != 0) {
        atomic_fetch_add_explicit(&ci_counters[dev].alloc_denied, 1, memory_order_relaxed);
        ci_debug("refusing %llu bytes on device %d: limit %llu", (unsigned long long)bytes, dev,
                 (unsigned long long)limit);
    }
    return rc;
}

void ci_memory_release(int dev, uint64_t bytes)
{
    dev = ci_memory_clamp_dev(dev);
    ci_ledger_release(dev, bytes, ci_memory_record(dev));
}

void ci_memory_charge_taken(int dev, uint64_t bytes)
{
    dev = ci_memory_clamp_dev(dev);
    if (ci_ledger_reserve(dev, bytes, CI_REGION_UNLIMITED, ci_memory_record(dev)) != 0)
        ci_debug("cannot record %llu bytes the driver took on device %d", (unsigned long long)bytes,
                 dev);
}

uint64_t ci_memory_workload_used(int dev)
{
    return ci_ledger_workload_used(ci_memory_clamp_dev(dev));
}

void ci_memory_track(uint64_t key, int kind, uint64_t bytes, int dev)
{
    dev = ci_memory_clamp_dev(dev);
    atomic_fetch_add_explicit(&ci_counters[dev].alloc_count, 1, memory_order_relaxed);
    if (ci_alloc_table_insert(key, kind, bytes, dev) != 0)
        ci_log("allocation table full; %llu bytes stay charged after their free",
               (unsigned long long)bytes);
}

/* Common tail of the simple allocators: reserve, call, record or give back. */
#define CI_MEMORY_ALLOC(call, dptr, bytes)                                      \
    do {                                                                        \
        ci_runtime_ensure();                                                    \
        int dev_ = ci_runtime_current_device();                                 \
        if (ci_memory_reserve(dev_, (bytes)) != 0)                              \
            return CUDA_ERROR_OUT_OF_MEMORY;                                    \
        CUresult r_ = (call);                                                   \
        if (r_ != CUDA_SUCCESS || (dptr) == NULL) {                             \
            ci_memory_release(dev_, (bytes));                                   \
            return r_;                                                          \
        }                                                                       \
        ci_memory_track(*(dptr), CI_ALLOC_DEVICE_PTR, (bytes), dev_);           \
        return r_;                                                              \
    } while (0)

CUresult ci_on_mem_alloc(void *real, CUdeviceptr *dptr, size_t bytes)
{
    CI_MEMORY_ALLOC(((ci_alloc_fn)real)(dptr, bytes), dptr, bytes);
}

CUresult ci_on_mem_alloc_managed(void *real, CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
    CI_MEMORY_ALLOC(((ci_alloc_managed_fn)real)(dptr, bytes, flags), dptr, bytes);
}

/* True when `stream` is capturing (`real` is the entry point called, `ptsz_id` its _ptsz
 * variant, whose stream 0 is the thread's default stream). */
static bool ci_memory_capturing(void *real, ci_hook_id ptsz_id, CUstream stream)
{
    if (ci_driver.cuStreamIsCapturing == NULL)
        return false;
    if (stream == NULL && real == ci_lookup_real(ptsz_id))
        stream = CU_STREAM_PER_THREAD;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return ci_driver.cuStreamIsCapturing(stream, &status) == CUDA_SUCCESS &&
           status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

CUresult ci_on_mem_alloc_async(void *real, CUdeviceptr *dptr, size_t bytes, CUstream stream)
{
    ci_runtime_ensure();
    if (ci_memory_capturing(real, CI_HOOK_cuMemAllocAsync_ptsz, stream))
        return ((ci_alloc_async_fn)real)(dptr, bytes, stream);
    CI_MEMORY_ALLOC(((ci_alloc_async_fn)real)(dptr, bytes, stream), dptr, bytes);
}

CUresult ci_on_mem_alloc_from_pool(void *real, CUdeviceptr *dptr, size_t bytes,
                                   CUmemoryPool pool, CUstream stream)
{
    ci_runtime_ensure();
    if (ci_memory_capturing(real, CI_HOOK_cuMemAllocFromPoolAsync_ptsz, stream))
        return ((ci_alloc_pool_fn)real)(dptr, bytes, pool, stream);
    CI_MEMORY_ALLOC(((ci_alloc_pool_fn)real)(dptr, bytes, pool, stream), dptr, bytes);
}

/* The pitch is chosen by the driver: reserve width*height, then settle on
 * pitch*height once known, undoing the allocation if that passes the limit. */
CUresult ci_on_mem_alloc_pitch(void *real, CUdeviceptr *dptr, size_t *pitch, size_t width,
                               size_t height, unsigned int elem)
{
    ci_runtime_ensure();
    int dev = ci_runtime_current_device();
    uint64_t guess;
    if (__builtin_mul_overflow((uint64_t)width, (uint64_t)height, &guess))
        return CUDA_ERROR_INVALID_VALUE;
    if (ci_memory_reserve(dev, guess) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = ((ci_alloc_pitch_fn)real)(dptr, pitch, width, height, elem);
    if (r != CUDA_SUCCESS || dptr == NULL || pitch == NULL) {
        ci_memory_release(dev, guess);
        return r;
    }
    uint64_t actual = (uint64_t)*pitch * (uint64_t)height;
    if (actual > guess) {
        if (ci_memory_reserve(dev, actual - guess) != 0) {
            if (ci_driver.cuMemFree_v2 != NULL)
                ci_driver.cuMemFree_v2(*dptr);
            ci_memory_release(dev, guess);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    } else if (actual < guess) {
        ci_memory_release(dev, guess - actual);
    }
    ci_memory_track(*dptr, CI_ALLOC_DEVICE_PTR, actual, dev);
    return r;
}

void ci_memory_free_begin(struct ci_memory_free *f, uint64_t key, int kind)
{
    ci_runtime_ensure();
    f->key = key;
    f->kind = kind;
    f->bytes = 0;
    f->dev = 0;
    f->found = ci_alloc_table_remove(key, kind, &f->bytes, &f->dev) == 0;
}

CUresult ci_memory_free_end(const struct ci_memory_free *f, CUresult r)
{
    if (f->found) {
        if (r == CUDA_SUCCESS)
            ci_memory_release(f->dev, f->bytes);
        else
            ci_alloc_table_insert(f->key, f->kind, f->bytes, f->dev);
    }
    return r;
}

#define CI_MEMORY_FREE(call, key, kind)                                         \
    do {                                                                        \
        struct ci_memory_free f_;                                               \
        ci_memory_free_begin(&f_, (key), (kind));                               \
        return ci_memory_free_end(&f_, (call));                                 \
    } while (0)

CUresult ci_on_mem_free(void *real, CUdeviceptr dptr)
{
    CI_MEMORY_FREE(((ci_free_fn)real)(dptr), dptr, CI_ALLOC_DEVICE_PTR);
}

CUresult ci_on_mem_free_async(void *real, CUdeviceptr dptr, CUstream stream)
{
    CI_MEMORY_FREE(((ci_free_async_fn)real)(dptr, stream), dptr, CI_ALLOC_DEVICE_PTR);
}

CUresult ci_on_mem_release(void *real, CUmemGenericAllocationHandle handle)
{
    CI_MEMORY_FREE(((ci_release_fn)real)(handle), handle, CI_ALLOC_VMM_HANDLE);
}

/* Physical memory for the virtual memory API (PyTorch expandable segments).
 * Only device-located allocations count against the GPU limit. */
CUresult ci_on_mem_create(void *real, CUmemGenericAllocationHandle *handle, size_t size,
                          const CUmemAllocationProp *prop, unsigned long long flags)
{
    ci_create_fn fn = (ci_create_fn)real;
    if (prop == NULL || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return fn(handle, size, prop, flags);
    ci_runtime_ensure();
    int dev = prop->location.id;
    if (ci_memory_reserve(dev, size) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = fn(handle, size, prop, flags);
    if (r != CUDA_SUCCESS || handle == NULL) {
        ci_memory_release(dev, size);
        return r;
    }
    ci_memory_track(*handle, CI_ALLOC_VMM_HANDLE, size, dev);
    return r;
}

CUresult ci_on_mem_get_info(void *real, size_t *free_bytes, size_t *total_bytes)
{
    ci_runtime_ensure();
    CUresult r = ((ci_info_fn)real)(free_bytes, total_bytes);
    uint64_t limit = ci_region_memory_limit();
    if (r != CUDA_SUCCESS || limit == CI_REGION_UNLIMITED || free_bytes == NULL ||
        total_bytes == NULL)
        return r;
    uint64_t used = ci_memory_workload_used(ci_runtime_current_device());
    uint64_t total = *total_bytes < limit ? *total_bytes : limit;
    uint64_t free = total > used ? total - used : 0;
    if (free > *free_bytes)
        free = *free_bytes;
    *total_bytes = (size_t)total;
    *free_bytes = (size_t)free;
    return r;
}

CUresult ci_on_device_total_mem(void *real, size_t *bytes, CUdevice dev)
{
    ci_runtime_ensure();
    CUresult r = ((ci_total_fn)real)(bytes, dev);
    uint64_t limit = ci_region_memory_limit();
    if (r == CUDA_SUCCESS && bytes != NULL && limit < *bytes)
        *bytes = (size_t)limit;
    return r;
}

/* nvmlDeviceGetMemoryInfo(_v2): tools inside the workload (nvidia-smi,
 * pynvml) see the limit as the total and the workload's accounted bytes as
 * used, not the physical card. Unchanged when no limit is set; a handle the
 * monitor has not mapped (NVML not started yet, another device) is taken as
 * device 0. Never fails beyond what the real call returned. */
static void ci_memory_clamp_nvml(nvmlDevice_t device, unsigned long long *total,
                                 unsigned long long *free, unsigned long long *used)
{
    ci_runtime_ensure_base();
    uint64_t limit = ci_region_memory_limit();
    if (limit == CI_REGION_UNLIMITED)
        return;
    int dev = ci_nvml_cuda_index(device);
    uint64_t in_use = ci_memory_workload_used(dev < 0 ? 0 : dev);
    uint64_t t = *total < limit ? *total : limit;
    *total = t;
    *used = in_use < t ? in_use : t;
    *free = t - *used;
}

nvmlReturn_t ci_on_nvml_memory_info(void *real, nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlReturn_t r = ((ci_nvml_info_fn)real)(device, memory);
    if (r == NVML_SUCCESS && memory != NULL)
        ci_memory_clamp_nvml(device, &memory->total, &memory->free, &memory->used);
    return r;
}

nvmlReturn_t ci_on_nvml_memory_info_v2(void *real, nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    nvmlReturn_t r = ((ci_nvml_info2_fn)real)(device, memory);
    if (r == NVML_SUCCESS && memory != NULL) {
        ci_memory_clamp_nvml(device, &memory->total, &memory->free, &memory->used);
        memory->reserved = 0;
    }
    return r;
}
