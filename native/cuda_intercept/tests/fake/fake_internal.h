/*
 * fake_internal.h — what the fake driver's two files (fake_cuda.c: entry
 * points, memory, cuGetProcAddress; fake_gpu.c: the simulated GPU) share.
 */
#ifndef FAKE_INTERNAL_H
#define FAKE_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "ci_cuda.h"
#include "fake_control.h"

#define FAKE_EXPORT __attribute__((visibility("default")))
#define F(name, params) FAKE_EXPORT CUresult name params; CUresult name params

/* The virtual clock (fake_clock.c), in the GPU state: shared with it or private. */
#define VCLOCK_THREADS 64
struct vclock {
    pthread_mutex_t lock; /* robust; process-shared when the GPU is */
    uint32_t seq;         /* futex word: bumped whenever time moves or a thread leaves */
    uint64_t now_ns;        /* virtual CLOCK_MONOTONIC */
    int64_t unix_offset_ns; /* virtual CLOCK_REALTIME - virtual CLOCK_MONOTONIC */
    uint64_t progress;      /* advances so far (stall detection) */
    struct {
        unsigned pid, tid;
        int state;
        uint64_t wake_ns;
    } th[VCLOCK_THREADS];
};
void vclock_init(struct vclock *c, int pshared);
struct vclock *gpu_vclock(void);

uint64_t env_u64(const char *name, uint64_t def);
uint64_t mono_ns(void);
uint64_t unix_us(void);
void sleep_ns(uint64_t ns);
void count_call(const char *name);
int fake_bench(void);

/* Puts `dur` ns of this process's work on the timeline (blocks like a full
 * launch queue); a kernel of `blocks` blocks costs one wave per SM count. */
void gpu_submit(uint64_t dur);
void gpu_launch(uint64_t blocks);
void gpu_lock_for_fork(void);
void gpu_unlock_after_fork(void);

/* Device memory without an address of its own (contexts, arrays, the graph pool, module
 * images): CUDA_ERROR_OUT_OF_MEMORY past FAKECUDA_TOTAL_MEM. */
CUresult fake_mem_take(uint64_t bytes);
void fake_mem_give(uint64_t bytes);
/* A fresh device address range of `bytes` (graph memory nodes, imported handles). */
uint64_t fake_next_address(uint64_t bytes);

/* fake_objects.c: contexts, arrays, inter-process handles. */
int fake_import_release(CUmemGenericAllocationHandle h); /* 1: h was an imported handle */

/* fake_graph.c: graphs, stream capture, the graph memory pool. */
int fake_capturing(CUstream s);
/* On a capturing stream: adds a memory node to the captured graph, *dptr its address;
 * returns 1. Returns 0 (nothing done) on any other stream. */
int fake_capture_alloc(CUstream s, CUdeviceptr *dptr, size_t bytes);
/* fake_mps_env.c: note the MPS client variables as the first call of `entry` sees them. */
void fake_note_env(const char *entry);
/* A launch of `g`: maps its memory nodes from the pool (when g is a fake executable graph). */
void fake_graph_launch(CUgraphExec g);

/* Entry points of fake_objects.c and fake_graph.c, for fake_cuda.c's cuGetProcAddress table. */
CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *p, int n, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int flags, CUdevice dev);
CUresult cuCtxDestroy_v2(CUcontext ctx);
CUresult cuCtxSetCurrent(CUcontext ctx);
CUresult cuCtxGetCurrent(CUcontext *ctx);
CUresult cuArrayCreate_v2(CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *d);
CUresult cuArray3DCreate_v2(CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d);
CUresult cuArrayDestroy(CUarray arr);
CUresult cuMipmappedArrayCreate(CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels);
CUresult cuMipmappedArrayDestroy(CUmipmappedArray arr);
CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p);
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int flags);
CUresult cuIpcCloseMemHandle(CUdeviceptr p);
CUresult cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle h, int type, unsigned long long flags);
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle, int type);
CUresult cuModuleGetFunction(CUfunction *f, CUmodule mod, const char *name);
CUresult cuFuncGetName(const char **name, CUfunction f);
CUresult cuGraphCreate(CUgraph *g, unsigned int flags);
CUresult cuGraphDestroy(CUgraph g);
CUresult cuGraphAddMemAllocNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUDA_MEM_ALLOC_NODE_PARAMS *p);
CUresult cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUgraph child);
CUresult cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *count);
CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type);
CUresult cuGraphMemAllocNodeGetParams(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *p);
CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph *g);
CUresult cuGraphInstantiate(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log, size_t n);
CUresult cuGraphInstantiate_v2(CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log, size_t n);
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags);
CUresult cuGraphInstantiateWithParams(CUgraphExec *e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p);
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p);
CUresult cuGraphExecDestroy(CUgraphExec e);
CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, int attr, void *value);
CUresult cuDeviceGraphMemTrim(CUdevice dev);
CUresult cuStreamBeginCapture_v2(CUstream s, int mode);
CUresult cuStreamEndCapture(CUstream s, CUgraph *g);

/* cuGetProcAddress table entries of fake_objects.c and fake_graph.c (fake_cuda.c's table). */
#define FAKE_OBJECT_ENTRIES \
    E(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0), \
    E(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, 0), \
    E(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, 0), \
    E(cuCtxCreate_v2, cuCtxCreate, 3020, 0), E(cuCtxCreate_v3, cuCtxCreate, 11040, 0), \
    E(cuCtxCreate_v4, cuCtxCreate, 12050, 0), E(cuCtxDestroy_v2, cuCtxDestroy, 4000, 0), \
    E(cuCtxSetCurrent, cuCtxSetCurrent, 4000, 0), E(cuCtxGetCurrent, cuCtxGetCurrent, 4000, 0), \
    E(cuArrayCreate_v2, cuArrayCreate, 3020, 0), E(cuArray3DCreate_v2, cuArray3DCreate, 3020, 0), \
    E(cuArrayDestroy, cuArrayDestroy, 2000, 0), \
    E(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, 0), \
    E(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, 0), \
    E(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010, 0), \
    E(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle, 11000, 0), \
    E(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010, 0), \
    E(cuMemExportToShareableHandle, cuMemExportToShareableHandle, 10020, 0), \
    E(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020, 0), \
    E(cuModuleGetFunction, cuModuleGetFunction, 2000, 0), E(cuFuncGetName, cuFuncGetName, 12040, 0),
#define FAKE_GRAPH_ENTRIES \
    E(cuGraphCreate, cuGraphCreate, 10000, 0), E(cuGraphDestroy, cuGraphDestroy, 10000, 0), \
    E(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode, 11040, 0), \
    E(cuGraphAddChildGraphNode, cuGraphAddChildGraphNode, 10000, 0), \
    E(cuGraphGetNodes, cuGraphGetNodes, 10000, 0), E(cuGraphNodeGetType, cuGraphNodeGetType, 10000, 0), \
    E(cuGraphMemAllocNodeGetParams, cuGraphMemAllocNodeGetParams, 11040, 0), \
    E(cuGraphChildGraphNodeGetGraph, cuGraphChildGraphNodeGetGraph, 10000, 0), \
    E(cuGraphInstantiate, cuGraphInstantiate, 10000, 0), \
    E(cuGraphInstantiate_v2, cuGraphInstantiate, 11000, 0), \
    E(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, 0), \
    E(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, 12000, 0), \
    E(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams, 12000, 1), \
    E(cuGraphExecDestroy, cuGraphExecDestroy, 10000, 0), \
    E(cuDeviceGetGraphMemAttribute, cuDeviceGetGraphMemAttribute, 11040, 0), \
    E(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, 11040, 0), \
    E(cuStreamBeginCapture_v2, cuStreamBeginCapture, 10010, 0), \
    E(cuStreamEndCapture, cuStreamEndCapture, 10000, 0),

#endif
