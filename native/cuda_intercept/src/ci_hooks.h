/*
 * ci_hooks.h — the list of intercepted entry points, declared ONCE.
 *
 * CI_CUDA_HOOKS(X) names every libcuda symbol the library exports a wrapper for:
 *   X(symbol, base, min_version, per_thread, handler, params, args)
 *     symbol       exported ABI name in libcuda (e.g. cuMemAlloc_v2, cuLaunchKernel_ptsz)
 *     base         name the CUDA runtime asks cuGetProcAddress for (e.g. cuMemAlloc)
 *     min_version  lowest cudaVersion for which cuGetProcAddress hands out this ABI
 *     per_thread   1 for _ptds/_ptsz variants (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
 *     handler      ci_on_* function in the concept file; called as handler(real, args...)
 *     params/args  the C parameter list and the argument list
 * CI_NVML_HOOKS(X) does the same for libnvidia-ml: X(symbol, handler, params, args).
 *
 * Expanded in ci_hooks.c (exported wrappers), ci_lookup.c (routing tables) and
 * here (handler prototypes and the id enum).
 */
#ifndef CI_HOOKS_H
#define CI_HOOKS_H

#include "ci_cuda.h"

#define CI_LAUNCH_PARAMS                                                        \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,           \
     unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,     \
     CUstream stream, void **params, void **extra)
#define CI_LAUNCH_ARGS (f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)
#define CI_COOP_PARAMS                                                          \
    (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,           \
     unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,     \
     CUstream stream, void **params)
#define CI_COOP_ARGS (f, gx, gy, gz, bx, by, bz, shmem, stream, params)
#define CI_PEER_PARAMS                                                          \
    (CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,    \
     size_t bytes)
#define CI_PEER_ARGS (dst, dst_ctx, src, src_ctx, bytes)
#define CI_PEER_ASYNC_PARAMS                                                    \
    (CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,    \
     size_t bytes, CUstream stream)
#define CI_PEER_ASYNC_ARGS (dst, dst_ctx, src, src_ctx, bytes, stream)
#define CI_CTX3_PARAMS                                                          \
    (CUcontext *pctx, CUexecAffinityParam *params, int nparams, unsigned int flags, \
     CUdevice dev)
#define CI_CTX3_ARGS (pctx, params, nparams, flags, dev)
#define CI_CTX4_PARAMS                                                          \
    (CUcontext *pctx, CUctxCreateParams *params, unsigned int flags, CUdevice dev)
#define CI_CTX4_ARGS (pctx, params, flags, dev)
#define CI_INST_PARAMS                                                          \
    (CUgraphExec *exec, CUgraph graph, CUgraphNode *err_node, char *log, size_t log_bytes)
#define CI_INST_ARGS (exec, graph, err_node, log, log_bytes)
#define CI_GPA_PARAMS (const char *symbol, void **pfn, int version, cuuint64_t flags)
#define CI_GPA_ARGS (symbol, pfn, version, flags)
#define CI_GPA2_PARAMS                                                          \
    (const char *symbol, void **pfn, int version, cuuint64_t flags,             \
     CUdriverProcAddressQueryResult *status)
#define CI_GPA2_ARGS (symbol, pfn, version, flags, status)

/* clang-format off */
#define CI_CUDA_HOOKS(X) \
    X(cuInit, cuInit, 2000, 0, ci_on_init, (unsigned int flags), (flags)) \
    X(cuGetProcAddress, cuGetProcAddress, 11030, 0, ci_on_get_proc_address, CI_GPA_PARAMS, CI_GPA_ARGS) \
    X(cuGetProcAddress_v2, cuGetProcAddress, 12000, 0, ci_on_get_proc_address_v2, CI_GPA2_PARAMS, CI_GPA2_ARGS) \
    X(cuMemAlloc_v2, cuMemAlloc, 3020, 0, ci_on_mem_alloc, (CUdeviceptr *dptr, size_t bytes), (dptr, bytes)) \
    X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020, 0, ci_on_mem_alloc_pitch, (CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem), (dptr, pitch, width, height, elem)) \
    X(cuMemAllocManaged, cuMemAllocManaged, 6000, 0, ci_on_mem_alloc_managed, (CUdeviceptr *dptr, size_t bytes, unsigned int flags), (dptr, bytes, flags)) \
    X(cuMemAllocAsync, cuMemAllocAsync, 11020, 0, ci_on_mem_alloc_async, (CUdeviceptr *dptr, size_t bytes, CUstream stream), (dptr, bytes, stream)) \
    X(cuMemAllocAsync_ptsz, cuMemAllocAsync, 11020, 1, ci_on_mem_alloc_async, (CUdeviceptr *dptr, size_t bytes, CUstream stream), (dptr, bytes, stream)) \
    X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020, 0, ci_on_mem_alloc_from_pool, (CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream stream), (dptr, bytes, pool, stream)) \
    X(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync, 11020, 1, ci_on_mem_alloc_from_pool, (CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream stream), (dptr, bytes, pool, stream)) \
    X(cuMemFree_v2, cuMemFree, 3020, 0, ci_on_mem_free, (CUdeviceptr dptr), (dptr)) \
    X(cuMemFreeAsync, cuMemFreeAsync, 11020, 0, ci_on_mem_free_async, (CUdeviceptr dptr, CUstream stream), (dptr, stream)) \
    X(cuMemFreeAsync_ptsz, cuMemFreeAsync, 11020, 1, ci_on_mem_free_async, (CUdeviceptr dptr, CUstream stream), (dptr, stream)) \
    X(cuMemCreate, cuMemCreate, 10020, 0, ci_on_mem_create, (CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop, unsigned long long flags), (handle, size, prop, flags)) \
    X(cuMemRelease, cuMemRelease, 10020, 0, ci_on_mem_release, (CUmemGenericAllocationHandle handle), (handle)) \
    X(cuMemGetInfo_v2, cuMemGetInfo, 3020, 0, ci_on_mem_get_info, (size_t *free_bytes, size_t *total_bytes), (free_bytes, total_bytes)) \
    X(cuDeviceTotalMem_v2, cuDeviceTotalMem, 3020, 0, ci_on_device_total_mem, (size_t *bytes, CUdevice dev), (bytes, dev)) \
    X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0, ci_on_primary_ctx_retain, (CUcontext *pctx, CUdevice dev), (pctx, dev)) \
    X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, 0, ci_on_primary_ctx_release, (CUdevice dev), (dev)) \
    X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, 0, ci_on_primary_ctx_release, (CUdevice dev), (dev)) \
    X(cuCtxCreate_v2, cuCtxCreate, 3020, 0, ci_on_ctx_create, (CUcontext *pctx, unsigned int flags, CUdevice dev), (pctx, flags, dev)) \
    X(cuCtxCreate_v3, cuCtxCreate, 11040, 0, ci_on_ctx_create_v3, CI_CTX3_PARAMS, CI_CTX3_ARGS) \
    X(cuCtxCreate_v4, cuCtxCreate, 12050, 0, ci_on_ctx_create_v4, CI_CTX4_PARAMS, CI_CTX4_ARGS) \
    X(cuCtxDestroy_v2, cuCtxDestroy, 4000, 0, ci_on_ctx_destroy, (CUcontext ctx), (ctx)) \
    X(cuArrayCreate_v2, cuArrayCreate, 3020, 0, ci_on_array_create, (CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *desc), (arr, desc)) \
    X(cuArray3DCreate_v2, cuArray3DCreate, 3020, 0, ci_on_array3d_create, (CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc), (arr, desc)) \
    X(cuArrayDestroy, cuArrayDestroy, 2000, 0, ci_on_array_destroy, (CUarray arr), (arr)) \
    X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, 0, ci_on_mipmapped_array_create, (CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels), (arr, desc, levels)) \
    X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, 0, ci_on_mipmapped_array_destroy, (CUmipmappedArray arr), (arr)) \
    X(cuGraphInstantiate, cuGraphInstantiate, 10000, 0, ci_on_graph_instantiate, CI_INST_PARAMS, CI_INST_ARGS) \
    X(cuGraphInstantiate_v2, cuGraphInstantiate, 11000, 0, ci_on_graph_instantiate, CI_INST_PARAMS, CI_INST_ARGS) \
    X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, 0, ci_on_graph_instantiate_flags, (CUgraphExec *exec, CUgraph graph, unsigned long long flags), (exec, graph, flags)) \
    X(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, 12000, 0, ci_on_graph_instantiate_params, (CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params), (exec, graph, params)) \
    X(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams, 12000, 1, ci_on_graph_instantiate_params, (CUgraphExec *exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS *params), (exec, graph, params)) \
    X(cuGraphExecDestroy, cuGraphExecDestroy, 10000, 0, ci_on_graph_exec_destroy, (CUgraphExec exec), (exec)) \
    X(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, 11040, 0, ci_on_graph_mem_trim, (CUdevice dev), (dev)) \
    X(cuLaunchKernel, cuLaunchKernel, 4000, 0, ci_on_launch_kernel, CI_LAUNCH_PARAMS, CI_LAUNCH_ARGS) \
    X(cuLaunchKernel_ptsz, cuLaunchKernel, 7000, 1, ci_on_launch_kernel, CI_LAUNCH_PARAMS, CI_LAUNCH_ARGS) \
    X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, 0, ci_on_launch_kernel_ex, (const CUlaunchConfig *config, CUfunction f, void **params, void **extra), (config, f, params, extra)) \
    X(cuLaunchKernelEx_ptsz, cuLaunchKernelEx, 11060, 1, ci_on_launch_kernel_ex, (const CUlaunchConfig *config, CUfunction f, void **params, void **extra), (config, f, params, extra)) \
    X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, 0, ci_on_launch_cooperative, CI_COOP_PARAMS, CI_COOP_ARGS) \
    X(cuLaunchCooperativeKernel_ptsz, cuLaunchCooperativeKernel, 9000, 1, ci_on_launch_cooperative, CI_COOP_PARAMS, CI_COOP_ARGS) \
    X(cuGraphLaunch, cuGraphLaunch, 10000, 0, ci_on_graph_launch, (CUgraphExec exec, CUstream stream), (exec, stream)) \
    X(cuGraphLaunch_ptsz, cuGraphLaunch, 10000, 1, ci_on_graph_launch, (CUgraphExec exec, CUstream stream), (exec, stream)) \
    X(cuMemcpyHtoD_v2, cuMemcpyHtoD, 3020, 0, ci_on_memcpy_htod, (CUdeviceptr dst, const void *src, size_t bytes), (dst, src, bytes)) \
    X(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD, 7000, 1, ci_on_memcpy_htod, (CUdeviceptr dst, const void *src, size_t bytes), (dst, src, bytes)) \
    X(cuMemcpyDtoH_v2, cuMemcpyDtoH, 3020, 0, ci_on_memcpy_dtoh, (void *dst, CUdeviceptr src, size_t bytes), (dst, src, bytes)) \
    X(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH, 7000, 1, ci_on_memcpy_dtoh, (void *dst, CUdeviceptr src, size_t bytes), (dst, src, bytes)) \
    X(cuMemcpyDtoD_v2, cuMemcpyDtoD, 3020, 0, ci_on_memcpy_dtod, (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes)) \
    X(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD, 7000, 1, ci_on_memcpy_dtod, (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes)) \
    X(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync, 3020, 0, ci_on_memcpy_htod_async, (CUdeviceptr dst, const void *src, size_t bytes, CUstream stream), (dst, src, bytes, stream)) \
    X(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync, 7000, 1, ci_on_memcpy_htod_async, (CUdeviceptr dst, const void *src, size_t bytes, CUstream stream), (dst, src, bytes, stream)) \
    X(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync, 3020, 0, ci_on_memcpy_dtoh_async, (void *dst, CUdeviceptr src, size_t bytes, CUstream stream), (dst, src, bytes, stream)) \
    X(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync, 7000, 1, ci_on_memcpy_dtoh_async, (void *dst, CUdeviceptr src, size_t bytes, CUstream stream), (dst, src, bytes, stream)) \
    X(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync, 3020, 0, ci_on_memcpy_dtod_async, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream), (dst, src, bytes, stream)) \
    X(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync, 7000, 1, ci_on_memcpy_dtod_async, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream), (dst, src, bytes, stream)) \
    X(cuMemcpy, cuMemcpy, 4000, 0, ci_on_memcpy, (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes)) \
    X(cuMemcpy_ptds, cuMemcpy, 7000, 1, ci_on_memcpy, (CUdeviceptr dst, CUdeviceptr src, size_t bytes), (dst, src, bytes)) \
    X(cuMemcpyAsync, cuMemcpyAsync, 4000, 0, ci_on_memcpy_async, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream), (dst, src, bytes, stream)) \
    X(cuMemcpyAsync_ptsz, cuMemcpyAsync, 7000, 1, ci_on_memcpy_async, (CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream), (dst, src, bytes, stream)) \
    X(cuMemcpyPeer, cuMemcpyPeer, 4000, 0, ci_on_memcpy_peer, CI_PEER_PARAMS, CI_PEER_ARGS) \
    X(cuMemcpyPeer_ptds, cuMemcpyPeer, 7000, 1, ci_on_memcpy_peer, CI_PEER_PARAMS, CI_PEER_ARGS) \
    X(cuMemcpyPeerAsync, cuMemcpyPeerAsync, 4000, 0, ci_on_memcpy_peer_async, CI_PEER_ASYNC_PARAMS, CI_PEER_ASYNC_ARGS) \
    X(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync, 7000, 1, ci_on_memcpy_peer_async, CI_PEER_ASYNC_PARAMS, CI_PEER_ASYNC_ARGS) \
    X(cuMemcpy2D_v2, cuMemcpy2D, 3020, 0, ci_on_memcpy_2d, (const CUDA_MEMCPY2D *copy), (copy)) \
    X(cuMemcpy2D_v2_ptds, cuMemcpy2D, 7000, 1, ci_on_memcpy_2d, (const CUDA_MEMCPY2D *copy), (copy)) \
    X(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned, 3020, 0, ci_on_memcpy_2d, (const CUDA_MEMCPY2D *copy), (copy)) \
    X(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned, 7000, 1, ci_on_memcpy_2d, (const CUDA_MEMCPY2D *copy), (copy)) \
    X(cuMemcpy2DAsync_v2, cuMemcpy2DAsync, 3020, 0, ci_on_memcpy_2d_async, (const CUDA_MEMCPY2D *copy, CUstream stream), (copy, stream)) \
    X(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync, 7000, 1, ci_on_memcpy_2d_async, (const CUDA_MEMCPY2D *copy, CUstream stream), (copy, stream)) \
    X(cuMemcpy3D_v2, cuMemcpy3D, 3020, 0, ci_on_memcpy_3d, (const CUDA_MEMCPY3D *copy), (copy)) \
    X(cuMemcpy3D_v2_ptds, cuMemcpy3D, 7000, 1, ci_on_memcpy_3d, (const CUDA_MEMCPY3D *copy), (copy)) \
    X(cuMemcpy3DAsync_v2, cuMemcpy3DAsync, 3020, 0, ci_on_memcpy_3d_async, (const CUDA_MEMCPY3D *copy, CUstream stream), (copy, stream)) \
    X(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync, 7000, 1, ci_on_memcpy_3d_async, (const CUDA_MEMCPY3D *copy, CUstream stream), (copy, stream))

#define CI_NVML_HOOKS(X) \
    X(nvmlDeviceGetMemoryInfo, ci_on_nvml_memory_info, (nvmlDevice_t device, nvmlMemory_t *memory), (device, memory)) \
    X(nvmlDeviceGetMemoryInfo_v2, ci_on_nvml_memory_info_v2, (nvmlDevice_t device, nvmlMemory_v2_t *memory), (device, memory))
/* clang-format on */

#define CI_UNPAREN(...) __VA_ARGS__

typedef enum {
#define CI_X_ENUM(sym, base, ver, ptds, handler, params, args) CI_HOOK_##sym,
    CI_CUDA_HOOKS(CI_X_ENUM)
#undef CI_X_ENUM
    CI_HOOK_COUNT
} ci_hook_id;

typedef enum {
#define CI_X_ENUM(sym, handler, params, args) CI_NVML_HOOK_##sym,
    CI_NVML_HOOKS(CI_X_ENUM)
#undef CI_X_ENUM
    CI_NVML_HOOK_COUNT
} ci_nvml_hook_id;

/* Handler prototypes: handler(void *real, params...). Handlers with several
 * variants appear once per variant here; identical redeclarations are legal. */
#define CI_X_PROTO(sym, base, ver, ptds, handler, params, args)                 \
    CUresult handler(void *real, CI_UNPAREN params);
CI_CUDA_HOOKS(CI_X_PROTO)
#undef CI_X_PROTO
#define CI_X_PROTO(sym, handler, params, args)                                  \
    nvmlReturn_t handler(void *real, CI_UNPAREN params);
CI_NVML_HOOKS(CI_X_PROTO)
#undef CI_X_PROTO

#endif /* CI_HOOKS_H */
