/*
 * ci_memcpy.c — bytes copied host->device, device->host and device->device.
 *
 * Explicitly typed copies (HtoD, DtoH, DtoD, Peer) are counted from their
 * name. Unified-address copies (cuMemcpy, cuMemcpyAsync and 2D/3D copies with
 * CU_MEMORYTYPE_UNIFIED) ask the driver for each pointer's memory type;
 * pageable host memory is unknown to the driver and counts as host. Host to
 * host copies are not counted. Bytes are counted when the driver accepted the
 * copy (CUDA_SUCCESS), on the device current to the calling thread.
 */
#include "ci_internal.h"

enum { CI_COPY_NONE, CI_COPY_HTOD, CI_COPY_DTOH, CI_COPY_DTOD };

/* Adds `bytes` to the counter of `dir` when the call succeeded. */
static CUresult ci_memcpy_count(CUresult r, int dir, uint64_t bytes)
{
    if (r != CUDA_SUCCESS || dir == CI_COPY_NONE)
        return r;
    struct ci_dev_counters *c = &ci_counters[ci_runtime_current_device()];
    _Atomic uint64_t *slot = dir == CI_COPY_HTOD ? &c->htod : dir == CI_COPY_DTOH ? &c->dtoh
                                                                                  : &c->dtod;
    atomic_fetch_add_explicit(slot, bytes, memory_order_relaxed);
    return r;
}

/* True when the driver knows `p` as device (or managed) memory. */
static bool ci_memcpy_is_device(CUdeviceptr p)
{
    unsigned int type = 0;
    if (ci_driver.cuPointerGetAttribute == NULL ||
        ci_driver.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) !=
            CUDA_SUCCESS)
        return false;
    return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_ARRAY ||
           type == CU_MEMORYTYPE_UNIFIED;
}

static int ci_memcpy_direction(bool src_dev, bool dst_dev)
{
    if (src_dev && dst_dev)
        return CI_COPY_DTOD;
    if (src_dev)
        return CI_COPY_DTOH;
    if (dst_dev)
        return CI_COPY_HTOD;
    return CI_COPY_NONE;
}

/* Memory type field of a 2D/3D copy -> "is device". */
static bool ci_memcpy_type_is_device(int type, CUdeviceptr unified_ptr)
{
    if (type == CU_MEMORYTYPE_UNIFIED)
        return ci_memcpy_is_device(unified_ptr);
    return type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_ARRAY;
}

typedef CUresult (*ci_htod_fn)(CUdeviceptr, const void *, size_t);
typedef CUresult (*ci_dtoh_fn)(void *, CUdeviceptr, size_t);
typedef CUresult (*ci_dtod_fn)(CUdeviceptr, CUdeviceptr, size_t);
typedef CUresult (*ci_htod_async_fn)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*ci_dtoh_async_fn)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*ci_dtod_async_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef CUresult (*ci_peer_fn) CI_PEER_PARAMS;
typedef CUresult (*ci_peer_async_fn) CI_PEER_ASYNC_PARAMS;
typedef CUresult (*ci_2d_fn)(const CUDA_MEMCPY2D *);
typedef CUresult (*ci_2d_async_fn)(const CUDA_MEMCPY2D *, CUstream);
typedef CUresult (*ci_3d_fn)(const CUDA_MEMCPY3D *);
typedef CUresult (*ci_3d_async_fn)(const CUDA_MEMCPY3D *, CUstream);

CUresult ci_on_memcpy_htod(void *real, CUdeviceptr dst, const void *src, size_t bytes)
{
    return ci_memcpy_count(((ci_htod_fn)real)(dst, src, bytes), CI_COPY_HTOD, bytes);
}

CUresult ci_on_memcpy_dtoh(void *real, void *dst, CUdeviceptr src, size_t bytes)
{
    return ci_memcpy_count(((ci_dtoh_fn)real)(dst, src, bytes), CI_COPY_DTOH, bytes);
}

CUresult ci_on_memcpy_dtod(void *real, CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
    return ci_memcpy_count(((ci_dtod_fn)real)(dst, src, bytes), CI_COPY_DTOD, bytes);
}

CUresult ci_on_memcpy_htod_async(void *real, CUdeviceptr dst, const void *src, size_t bytes,
                                 CUstream stream)
{
    return ci_memcpy_count(((ci_htod_async_fn)real)(dst, src, bytes, stream), CI_COPY_HTOD,
                           bytes);
}

CUresult ci_on_memcpy_dtoh_async(void *real, void *dst, CUdeviceptr src, size_t bytes,
                                 CUstream stream)
{
    return ci_memcpy_count(((ci_dtoh_async_fn)real)(dst, src, bytes, stream), CI_COPY_DTOH,
                           bytes);
}

CUresult ci_on_memcpy_dtod_async(void *real, CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                                 CUstream stream)
{
    return ci_memcpy_count(((ci_dtod_async_fn)real)(dst, src, bytes, stream), CI_COPY_DTOD,
                           bytes);
}

CUresult ci_on_memcpy(void *real, CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
    ci_runtime_ensure();
    int dir = ci_memcpy_direction(ci_memcpy_is_device(src), ci_memcpy_is_device(dst));
    return ci_memcpy_count(((ci_dtod_fn)real)(dst, src, bytes), dir, bytes);
}

CUresult ci_on_memcpy_async(void *real, CUdeviceptr dst, CUdeviceptr src, size_t bytes,
                            CUstream stream)
{
    ci_runtime_ensure();
    int dir = ci_memcpy_direction(ci_memcpy_is_device(src), ci_memcpy_is_device(dst));
    return ci_memcpy_count(((ci_dtod_async_fn)real)(dst, src, bytes, stream), dir, bytes);
}

CUresult ci_on_memcpy_peer(void *real, CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                           CUcontext src_ctx, size_t bytes)
{
    return ci_memcpy_count(((ci_peer_fn)real)(dst, dst_ctx, src, src_ctx, bytes), CI_COPY_DTOD,
                           bytes);
}

CUresult ci_on_memcpy_peer_async(void *real, CUdeviceptr dst, CUcontext dst_ctx,
                                 CUdeviceptr src, CUcontext src_ctx, size_t bytes,
                                 CUstream stream)
{
    return ci_memcpy_count(((ci_peer_async_fn)real)(dst, dst_ctx, src, src_ctx, bytes, stream),
                           CI_COPY_DTOD, bytes);
}

/* Direction and size of a 2D copy; 0 bytes for a NULL descriptor. */
static int ci_memcpy_2d_dir(const CUDA_MEMCPY2D *c, uint64_t *bytes)
{
    if (c == NULL) {
        *bytes = 0;
        return CI_COPY_NONE;
    }
    *bytes = (uint64_t)c->WidthInBytes * (uint64_t)c->Height;
    return ci_memcpy_direction(ci_memcpy_type_is_device(c->srcMemoryType, c->srcDevice),
                               ci_memcpy_type_is_device(c->dstMemoryType, c->dstDevice));
}

static int ci_memcpy_3d_dir(const CUDA_MEMCPY3D *c, uint64_t *bytes)
{
    if (c == NULL) {
        *bytes = 0;
        return CI_COPY_NONE;
    }
    *bytes = (uint64_t)c->WidthInBytes * (uint64_t)c->Height * (uint64_t)c->Depth;
    return ci_memcpy_direction(ci_memcpy_type_is_device(c->srcMemoryType, c->srcDevice),
                               ci_memcpy_type_is_device(c->dstMemoryType, c->dstDevice));
}

CUresult ci_on_memcpy_2d(void *real, const CUDA_MEMCPY2D *copy)
{
    uint64_t bytes;
    int dir = ci_memcpy_2d_dir(copy, &bytes);
    return ci_memcpy_count(((ci_2d_fn)real)(copy), dir, bytes);
}

CUresult ci_on_memcpy_2d_async(void *real, const CUDA_MEMCPY2D *copy, CUstream stream)
{
    uint64_t bytes;
    int dir = ci_memcpy_2d_dir(copy, &bytes);
    return ci_memcpy_count(((ci_2d_async_fn)real)(copy, stream), dir, bytes);
}

CUresult ci_on_memcpy_3d(void *real, const CUDA_MEMCPY3D *copy)
{
    uint64_t bytes;
    int dir = ci_memcpy_3d_dir(copy, &bytes);
    return ci_memcpy_count(((ci_3d_fn)real)(copy), dir, bytes);
}

CUresult ci_on_memcpy_3d_async(void *real, const CUDA_MEMCPY3D *copy, CUstream stream)
{
    uint64_t bytes;
    int dir = ci_memcpy_3d_dir(copy, &bytes);
    return ci_memcpy_count(((ci_3d_async_fn)real)(copy, stream), dir, bytes);
}
