/*
 * ci_internal.h — what the concept files of libalnair_cuda share.
 *
 * Naming: every function and global is prefixed with its file's concept
 * (ci_region_*, ci_tokens_*, ...). Nothing here is exported: the library is
 * built with -fvisibility=hidden and only CI_EXPORT symbols leave it.
 *
 * Here: what nearly every file needs (the macros, the log, the limits, MPS, the region,
 * the process's state, the real entry points). The rest, each included where used:
 *   ci_clock.h              the library's time
 *   ci_nvml.h               what the library reads from NVML
 *   ci_memory_accounting.h  the memory limit: ledger, allocations, footprint
 *   ci_compute_metering.h   the compute limit: token bucket, GPU time, monitor thread
 */
#ifndef CI_INTERNAL_H
#define CI_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "ci_cuda.h"
#include "ci_hooks.h"
#include "ci_region_layout.h"

#define CI_EXPORT __attribute__((visibility("default")))
#define CI_LIKELY(x) __builtin_expect(!!(x), 1)
#define CI_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define CI_MAX_DEVICES CI_REGION_MAX_DEVICES

/* ---- ci_log.c ------------------------------------------------------------ */

/* Writes one "alnair-cuda: ..." line to stderr with a single write(2); never
 * allocates. Always printed: use only for errors and one-time warnings. */
void ci_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Same, but only when ALNAIR_CUDA_DEBUG is set to a non-empty value. */
void ci_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ci_log_init(void);
/* Drops the calling thread's lines (both kinds) until ci_log_mute(false): for a second,
 * early reading of input whose problems the first use reports (the constructor's limits,
 * ci_mps.c). One thread at a time. */
void ci_log_mute(bool on);

/* ---- ci_limits.c --------------------------------------------------------- */

/* Container mode: the fixed limits file exists (mounted read-only by the device plugin);
 * it alone names the limits and the workspace. Local mode: no fixed file; the workspace
 * comes from ALNAIR_WORKSPACE (a developer setting, see the README). */
#define CI_LIMITS_MODE_LOCAL 0u
#define CI_LIMITS_MODE_CONTAINER 1u

struct ci_limits {
    uint64_t memory_bytes;     /* per GPU; CI_REGION_UNLIMITED = no limit */
    uint32_t compute_percent;  /* 1..100; 100 = no limit */
    uint32_t source;           /* CI_LIMITS_SOURCE_* */
    uint32_t mode;             /* CI_LIMITS_MODE_* */
    char workload_id[CI_REGION_WORKLOAD_ID_BYTES];
    char workspace[1024];      /* "" = no workspace: process-private region */
    char mps_pipe_directory[1024]; /* "" = time-slicing mode; else MPS mode (ci_mps.c) */
    bool mps_invalid;          /* the file's mps_pipe_directory was no absolute path */
};

/* The fixed limits file of container mode: a compile-time constant, never taken from the
 * environment. Test builds define it to a path in their build directory. */
const char *ci_limits_fixed_path(void);
/* Parses "123", "8Gi", "512M" ... (K/M/G/T and Ki/Mi/Gi/Ti are binary) into
 * bytes. Returns 0 on success, -1 on anything else (empty, sign, junk, overflow). */
int ci_limits_parse_bytes(const char *text, uint64_t *out);
/* Parses an integer percent 1..100. Returns 0 on success, -1 otherwise. */
int ci_limits_parse_percent(const char *text, uint32_t *out);
/* Fills *out: from the fixed file when it exists (container mode), else from the limits
 * file in $ALNAIR_WORKSPACE (local mode); then the environment's limit variables, which
 * can only tighten. Invalid values print one stderr line each and take the strictest
 * value (0 bytes, 1 %), never "unlimited"; an invalid mps_pipe_directory both. */
void ci_limits_load(struct ci_limits *out);

/* ---- ci_mps.c ------------------------------------------------------------ */

/* MPS mode: the limits name an mps_pipe_directory; the process's MPS client variables
 * (CUDA_MPS_PIPE_DIRECTORY, _ACTIVE_THREAD_PERCENTAGE, _PINNED_DEVICE_MEM_LIMIT) are
 * written from the limits, over the process's own. None of these fails or blocks; none
 * touches a variable without the key. */
/* Library constructor: reads the limits quietly (their first real use reports their
 * problems) and writes the variables before the program or the driver runs. */
void ci_mps_early(void);
/* The limits were loaded for good: writes the variables again and decides whether the
 * SM partition replaces the throttle (the pipe directory holds the daemon's socket). */
void ci_mps_start(const struct ci_limits *l);
/* Before the driver is opened, a real cuInit or a context creation: puts back what the
 * program changed since (from the loaded limits, else the constructor's reading). */
void ci_mps_enforce(void);
/* True when the compute limit is MPS's SM partition: the controller delays no launch. */
bool ci_mps_partition_active(void);

/* ---- ci_region.c --------------------------------------------------------- */

/* Maps the workload region or, without a workspace or on any error, a process-private
 * anonymous one. Local mode creates the file when missing and (re)initialises it under
 * flock when new or of another layout version; container mode never creates it (the
 * device plugin did, in a workspace the tenant cannot write) and, when it cannot be used,
 * sets this process's memory limit to 0 (refuse) rather than fall back to per-process
 * limits. Keeps the file open: the ledger (ci_ledger.c) locks it. Never fails. Not
 * thread-safe: call once. */
void ci_region_open(const struct ci_limits *limits);
struct ci_region *ci_region_get(void);
/* True when the region is the workspace's shared file (not a private mapping). */
bool ci_region_is_shared(void);
/* Descriptor of the shared region file for the ledger's locks; -1 when there is none or
 * when the descriptor no longer refers to the mapped file (the application closed it). */
int ci_region_file(void);
/* Forked child: maps the region again through a descriptor of its own (so that the
 * parent's ledger locks, which live as long as any mapping of the parent's open file,
 * end with the parent). On failure the child has no region file (ci_region_file -1). */
void ci_region_after_fork_child(void);
/* Takes the robust region mutex. Returns 0 when held (recovering the state of
 * a holder that died), -1 when the mutex is unusable (caller goes on unlocked). */
int ci_region_lock(void);
void ci_region_unlock(void);
/* Claims a slot for the calling process (reaping slots of dead processes when
 * full). Returns the index or -1 when none is free. Takes the lock. */
int ci_region_attach(void);
/* Frees slot `slot` if it still belongs to this process. Takes the lock. */
void ci_region_detach(int slot);
/* Puts back this process's identity in `slot` (state, pid, start time) when something
 * else wrote it, unless another live process now holds the slot. Returns 0 when the slot
 * is this process's, -1 when it is not (publishing skips this period; a slot taken by
 * another process is reclaimed once that process is gone) or was retired by
 * ci_region_detach. Takes no lock (monitor thread). */
int ci_region_heal_slot(int slot);
/* With the lock held: frees slots of processes that no longer exist. Returns
 * how many were reaped. */
int ci_region_reap_locked(void);
/* Start time (clock ticks since boot) of pid, 0 when it does not exist. */
uint64_t ci_region_proc_start_ticks(pid_t pid);
/* Effective limits: the stricter of this process's (as handed to
 * ci_region_open) and the region header's. */
uint64_t ci_region_memory_limit(void);
uint32_t ci_region_compute_percent(void);

/* ---- ci_runtime.c -------------------------------------------------------- */

struct ci_dev_counters {
    _Atomic uint64_t launches;
    _Atomic uint64_t graph_launches;
    _Atomic uint64_t htod, dtoh, dtod;
    _Atomic uint64_t alloc_count, alloc_denied;
    _Atomic uint64_t throttled_ns;
} __attribute__((aligned(64)));

struct ci_state {
    struct ci_limits limits;
    _Atomic int slot;             /* region slot of this process, -1 none */
    _Atomic int device_count;     /* from cuDeviceGetCount after cuInit, >= 1 */
    _Atomic int cuinit_done;      /* cuInit succeeded in this process */
    int sm_count[CI_MAX_DEVICES]; /* multiprocessors per device (0 unknown) */
};

extern struct ci_state ci_state;
extern struct ci_dev_counters ci_counters[CI_MAX_DEVICES];

/* Loads the limits and maps the region, nothing else (NVML-only callers). */
void ci_runtime_ensure_base(void);
/* Makes sure the per-process parts (real driver table, region slot) exist;
 * cheap after the first call; re-done in a forked child. */
void ci_runtime_ensure(void);
/* Called after the real cuInit succeeded: device count, monitor thread. */
void ci_runtime_after_cuinit(void);
/* Device of the calling thread's current context, 0 when unknown. Calls the
 * driver only when the process sees more than one device. */
int ci_runtime_current_device(void);
/* Slot of this process, attaching lazily; -1 when the region is full. */
int ci_runtime_slot(void);

/* ---- ci_lookup.c --------------------------------------------------------- */

/* The real dlsym of the C library (found with dlvsym), never NULL after init. */
void *ci_lookup_real_dlsym(void *handle, const char *name);
/* Opens libcuda.so.1 and resolves every hooked and used entry point once. */
void ci_lookup_load_driver(void);
/* Real pointer of hooked symbol `id` (loading the driver first), or NULL. */
void *ci_lookup_real(ci_hook_id id);
/* Real pointer of hooked NVML symbol `id` (loading NVML first), or NULL. */
void *ci_lookup_real_nvml(ci_nvml_hook_id id);
/* Wrapper to hand out for exported name `name`, or NULL when not hooked. */
void *ci_lookup_wrapper_by_name(const char *name);

/* Driver entry points the library calls itself (not hooked). NULL if absent. */
struct ci_driver_calls {
    CUresult (*cuCtxGetDevice)(CUdevice *dev);
    CUresult (*cuDeviceGetCount)(int *count);
    CUresult (*cuDeviceGetAttribute)(int *value, int attrib, CUdevice dev);
    CUresult (*cuDeviceGetPCIBusId)(char *bus_id, int len, CUdevice dev);
    CUresult (*cuPointerGetAttribute)(void *data, int attribute, CUdeviceptr ptr);
    CUresult (*cuMemFree_v2)(CUdeviceptr dptr);
    CUresult (*cuMemRelease)(CUmemGenericAllocationHandle handle);
    /* timing a sample of launches (ci_gputime.c) */
    CUresult (*cuEventCreate)(CUevent *event, unsigned int flags);
    CUresult (*cuEventRecord)(CUevent event, CUstream stream);
    CUresult (*cuEventQuery)(CUevent event);
    CUresult (*cuEventElapsedTime)(float *ms, CUevent start, CUevent end);
    CUresult (*cuEventDestroy)(CUevent event);
    CUresult (*cuStreamQuery)(CUstream stream);
    CUresult (*cuStreamIsCapturing)(CUstream stream, CUstreamCaptureStatus *status);
    CUresult (*cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *mode);
    /* reading a graph's memory nodes and the graph pool (ci_graphmem.c) */
    CUresult (*cuGraphGetNodes)(CUgraph graph, CUgraphNode *nodes, size_t *count);
    CUresult (*cuGraphNodeGetType)(CUgraphNode node, CUgraphNodeType *type);
    CUresult (*cuGraphMemAllocNodeGetParams)(CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *params);
    CUresult (*cuGraphChildGraphNodeGetGraph)(CUgraphNode node, CUgraph *graph);
    CUresult (*cuDeviceGetGraphMemAttribute)(CUdevice dev, int attr, void *value);
    /* launched kernels' names (ci_kernel_names.c): CUDA 12.4 and 12.3 */
    CUresult (*cuFuncGetName)(const char **name, CUfunction f);
    CUresult (*cuKernelGetName)(const char **name, CUkernel k);
};
extern struct ci_driver_calls ci_driver;

#endif /* CI_INTERNAL_H */
