/*
 * ci_internal.h — what the concept files of libalnair_cuda share.
 *
 * Naming: every function and global is prefixed with its file's concept
 * (ci_region_*, ci_tokens_*, ...). Nothing here is exported: the library is
 * built with -fvisibility=hidden and only CI_EXPORT symbols leave it.
 */
#ifndef CI_INTERNAL_H
#define CI_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

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

/* ---- ci_clock.c ---------------------------------------------------------- */

/* The controller's and the bucket's time. A release build reads CLOCK_MONOTONIC and
 * nanosleep and nothing else. The test library (CI_TEST_CLOCK, the testlib build only)
 * reads the fake driver's clock, which a test can make virtual (tests/fake/fake_clock.c);
 * without the fake driver it falls back to the real clock. */
#ifdef CI_TEST_CLOCK
uint64_t ci_clock_test_now_ns(void);
static inline uint64_t ci_now_ns(void)
{
    return ci_clock_test_now_ns();
}
#else
static inline uint64_t ci_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
#endif

/* Wall-clock time on the controller's time line (NVML's sample timestamps): virtual
 * under a virtual test clock, CLOCK_REALTIME otherwise. */
uint64_t ci_clock_unix_ns(void);

/* Wall-clock time for timestamps that readers compare with their own clock (the
 * region's): always CLOCK_REALTIME. */
static inline uint64_t ci_unix_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleeps ns nanoseconds of the controller's time (restarting on EINTR until the
 * deadline). */
void ci_sleep_ns(uint64_t ns);

/* Before starting a thread of the library's own (+1), and when that failed (-1): tells a
 * virtual test clock; nothing in a release build. */
void ci_clock_thread_spawn(int delta);

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

/* ---- ci_ledger.c --------------------------------------------------------- */

/* The workload's memory ledger: what each process holds per GPU, kept as record locks
 * on the region file (the kernel's, not the region's bytes: see ci_ledger.c). */
/* Joins the ledger (claims an index). Without a shared region: a private ledger (the
 * limit holds per process) in local mode, a refusing one in container mode. Called once
 * per process image and again in a forked child. */
void ci_ledger_open(bool container_mode);
/* Reserves `bytes` on `dev` when the workload (every process of the ledger) stays within
 * `limit`; publishes this process's usage into `rec` (may be NULL). Returns 0 when
 * reserved, -1 when refused. */
int ci_ledger_reserve(int dev, uint64_t bytes, uint64_t limit, struct ci_region_device *rec);
/* Returns `bytes` on `dev` (a free or a failed allocation); publishes into `rec`. */
void ci_ledger_release(int dev, uint64_t bytes, struct ci_region_device *rec);
/* Bytes the whole workload holds on `dev` (this process exactly, the others as locked). */
uint64_t ci_ledger_workload_used(int dev);
/* Bytes this process holds on `dev`: everything it charged (allocations, contexts, graph
 * memory, footprint), exact. */
uint64_t ci_ledger_own_bytes(int dev);
/* Rewrites this process's usage into its slot (the region's copy is for readers only and
 * anyone can overwrite it). Skipped when a reservation is in progress. */
void ci_ledger_publish(struct ci_region_slot *slot);
void ci_ledger_lock_for_fork(void);
void ci_ledger_unlock_after_fork(void);
/* Forked child: its own usage is zero, its index and descriptor are its parent's. */
void ci_ledger_after_fork_child(void);

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

/* ---- ci_alloc_table.c ---------------------------------------------------- */

#define CI_ALLOC_DEVICE_PTR 1
#define CI_ALLOC_VMM_HANDLE 2
#define CI_ALLOC_ARRAY 3
#define CI_ALLOC_MIPMAPPED_ARRAY 4
#define CI_ALLOC_CONTEXT 5                    /* a cuCtxCreate context: its footprint */
#define CI_ALLOC_GRAPH_EXEC(dev) (16 + (dev)) /* an executable graph's memory on dev */

/* Records (key, kind) -> (bytes, dev). Returns 0, or -1 when memory for the
 * table could not be obtained (the allocation then stays uncounted at free). */
int ci_alloc_table_insert(uint64_t key, int kind, uint64_t bytes, int dev);
/* Removes (key, kind). Returns 0 and fills bytes/dev when found, -1 otherwise. */
int ci_alloc_table_remove(uint64_t key, int kind, uint64_t *bytes, int *dev);
/* Drops all entries (forked child: the parent's device memory is not ours). */
void ci_alloc_table_reset(void);
void ci_alloc_table_lock_for_fork(void);
void ci_alloc_table_unlock_after_fork(void);

/* ---- ci_memory.c --------------------------------------------------------- */

/* Reserves `bytes` on `dev` for this process if the workload stays within its
 * limit. Returns 0 when reserved, -1 when the limit would be exceeded. */
int ci_memory_reserve(int dev, uint64_t bytes);
/* Returns a reservation (failed allocation or free). */
void ci_memory_release(int dev, uint64_t bytes);
/* Charges `bytes` that the driver has already taken (no limit check: later allocations
 * are refused instead). */
void ci_memory_charge_taken(int dev, uint64_t bytes);
/* Bytes accounted on `dev` for the whole workload. */
uint64_t ci_memory_workload_used(int dev);
/* Records a successful allocation (key, kind) of `bytes` on `dev` and counts it. */
void ci_memory_track(uint64_t key, int kind, uint64_t bytes, int dev);
/* A free of (key, kind): ci_memory_free_begin forgets the record before the driver call
 * (we still own the address, so no other thread can be handed it yet),
 * ci_memory_free_end returns the charge when the driver freed it, puts the record back
 * when it refused, and passes the driver's answer on. */
struct ci_memory_free {
    uint64_t key, bytes;
    int kind, dev;
    bool found;
};
void ci_memory_free_begin(struct ci_memory_free *f, uint64_t key, int kind);
CUresult ci_memory_free_end(const struct ci_memory_free *f, CUresult r);

/* ---- ci_footprint.c ------------------------------------------------------ */

/* Device memory the driver took for this process that no allocation call asked for
 * (contexts, module images, rounding). A probe brackets one context creation. */
#define CI_FOOTPRINT_PROCS 64
struct ci_footprint_probe {
    int dev;
    int nprocs; /* NVML's process list before the call; -1 when unavailable */
    nvmlProcessInfo_t procs[CI_FOOTPRINT_PROCS];
    bool have_free;
    uint64_t free_bytes; /* the device's free memory before the call */
};
/* Reads the driver's figures before a call that may create a context on `dev`. */
void ci_footprint_begin(struct ci_footprint_probe *p, int dev);
/* After that call: when it created a context (`created`), measures what it took (*bytes)
 * and charges it against the limit. Returns 0 when charged (or nothing was created), -1
 * when the limit refused it: the caller destroys the context and answers
 * CUDA_ERROR_OUT_OF_MEMORY. */
int ci_footprint_end(struct ci_footprint_probe *p, bool created, uint64_t *bytes);
/* A context of `dev` that was charged `bytes` is gone. */
void ci_footprint_discharge(int dev, uint64_t bytes);
/* Monitor thread, every 100 ms: charges what NVML shows this process holding beyond what
 * it has charged. Calls NVML and the ledger, never the driver. */
void ci_footprint_reconcile(void);
/* Footprint charged on `dev` (contexts + reconciled), for the region. */
uint64_t ci_footprint_bytes(int dev);
void ci_footprint_after_fork_child(void);

/* ---- ci_context.c, ci_graphmem.c ----------------------------------------- */

void ci_context_after_fork_child(void);
void ci_graphmem_after_fork_child(void);

/* ---- ci_tokens.c --------------------------------------------------------- */

/* Counts one launch of `cost` tokens on `dev` and, when the compute limit is
 * active and the bucket is empty, sleeps (in bounded steps) until it is not.
 * Returns the tokens charged (a graph launch: the running average kernel cost). */
uint64_t ci_tokens_on_launch(int dev, uint64_t cost, bool graph, const void *fn);
/* A waiting launch waits for this much refill (alone). */
#define CI_TOKENS_REFILL_NS 1000000ull
/* Co-located, at most this much: see ci_tokens_shared_refill_ns. */
#define CI_TOKENS_SHARED_REFILL_MAX_NS 10000000ull
/* Sets the refill rate in tokens per second (0 = unthrottled) and how much refill a
 * waiting launch waits for (0: CI_TOKENS_REFILL_NS). */
void ci_tokens_set_rate(int dev, double rate, uint64_t refill_ns);
/* The refill a waiting launch waits for when another context shares the card, under a
 * limit of `percent`: a burst worth about CI_TOKENS_REFILL_NS of the card's time. Each
 * burst costs the card two context switches (H100: a 10 % tenant launching one matmul per
 * burst beside an unlimited one cost the pair 3 % of the card, which the other paid). */
uint64_t ci_tokens_shared_refill_ns(double percent);
double ci_tokens_rate(int dev);
/* Threads of this process currently waiting for tokens on `dev`. */
int ci_tokens_waiting(int dev);
uint64_t ci_tokens_charged(int dev);
int64_t ci_tokens_available(int dev);
void ci_tokens_reset(void);

/* ---- ci_gputime.c -------------------------------------------------------- */
/* Sampling of launch GPU time, on while a compute limit is active and in the windows that
 * learn the full-load speed (`every_launch`: each launch a candidate, not every 16th). */
void ci_gputime_enable(bool on, bool every_launch);
struct ci_gputime_probe {
    struct ci_gputime_sample *sample;
    CUstream stream;
};
/* Before a launch of `cost` tokens of `fn` (a graph launch when `graph`) into `stream`
 * through the real entry point `real` (`ptsz_id`: that entry point's _ptsz variant,
 * whose stream 0 is the per-thread default stream). Returns true when this launch
 * is timed: call ci_gputime_end with the launch's result right after it. */
bool ci_gputime_begin(struct ci_gputime_probe *p, int dev, CUstream stream, void *real,
                      ci_hook_id ptsz_id, const void *fn, uint64_t cost, bool graph);
void ci_gputime_end(struct ci_gputime_probe *p, CUresult launched);
/* What the monitor last saw of `dev`: the workload alone on it without a limit, and at
 * full load (keys learn their full-load speed there). */
void ci_gputime_set_load(int dev, bool alone, bool full);
/* GPU ns per token of the launches timed while the workload had `dev` alone without a
 * limit, in their mix (how many of each key were timed) at each key's speed at full load
 * (its moving mean where never at full load): what the sampled work of that mix is now.
 * -1 before 16 such samples, or when a launching thread holds the key table. */
double ci_gputime_alone_ns_per_token(int dev);
/* Sums over the finished samples of `dev`: GPU ns (clipped), the same at each key's
 * full-load speed (work_ns), tokens, count. */
struct ci_gputime_totals {
    uint64_t ns, work_ns, cost, samples;
};
void ci_gputime_read(int dev, struct ci_gputime_totals *out);
void ci_gputime_after_fork_child(void);
/* ---- ci_flatout.c -------------------------------------------------------- */

/* The card's time a workload spends per token while alone without a limit (moving sums
 * over the last few seconds), to scale its sampled GPU time by. Zeroed: nothing learnt. */
struct ci_flatout {
    double card_ns, card_tokens;
    uint64_t windows;
};
/* A window alone without a limit: `card_ns` of the card's time were the workload's (the
 * window's length flat out, NVML's share of it below), and it spent `tokens`. */
void ci_flatout_window(struct ci_flatout *f, double card_ns, double tokens);
/* Card ns per sampled ns, given what the samples say a token takes alone
 * (ci_gputime_alone_ns_per_token); clamped to 0.2..2, 0 until enough was seen. */
double ci_flatout_scale(const struct ci_flatout *f, double sampled_ns_per_token);

/* ---- ci_pace.c ----------------------------------------------------------- */

/* A workload's tokens/s alone without a limit. Zeroed: never seen. */
struct ci_pace {
    double tokens_per_s;
    int off; /* windows in a row too far off it to count */
};
/* A window alone without a limit in which the workload launched, spending `spent` tokens/s. */
void ci_pace_window(struct ci_pace *p, double spent);
/* The pace x `target_percent` (at least 1), or 0: no pace seen, or no limit. */
double ci_pace_cap(const struct ci_pace *p, double target_percent);

/* ---- ci_peers.c ---------------------------------------------------------- */

/* Reads the other slots' tokens_charged (not `own_slot`'s) for devices 0..count-1 and adds
 * what each live peer spent since the last call. Monitor thread. */
void ci_peers_update(int own_slot, int count);
/* Tokens the workload's other processes spent on `dev` since this process began watching
 * (a monotonic count). */
uint64_t ci_peers_charged(int dev);
void ci_peers_after_fork_child(void);

/* ---- ci_controller.c ----------------------------------------------------- */

struct ci_controller {
    double rate;        /* tokens/s handed to the bucket; 0 = unthrottled */
    double target;      /* percent */
    int updates;
};

/* Starts unthrottled (boosted ramp-up) towards `target_percent`. */
void ci_controller_init(struct ci_controller *c, double target_percent);
/* One control step over a measurement window: `util` is the workload's
 * measured SM utilisation (percent), `consumed` the tokens/s this process
 * spent in the same window, `binding` whether launches waited for tokens.
 * Returns the new rate (0 = unthrottled). Pure function of its inputs. */
double ci_controller_update(struct ci_controller *c, double util, double consumed,
                            bool binding);

/* ---- ci_kernel_names.c --------------------------------------------------- */

/* Classifies the kernel `fn` launched on `dev` by its name (once per handle, through the
 * driver's cuFuncGetName) and counts the launch when the name is a training one
 * (backward, multi_tensor_apply). Lock-free; does nothing when names cannot be read. */
void ci_kernel_names_note(int dev, const void *fn);
/* The region's device.kernel_names word of `dev`: bit 63 a name was read, bit 62 a
 * PyTorch kernel was seen, bits 0..61 launches of training-named kernels. */
uint64_t ci_kernel_names_word(int dev);
void ci_kernel_names_after_fork_child(void);

/* ---- ci_signature.c ------------------------------------------------------ */

/* Feeds one launched function handle into the rolling launch signature.
 * Lock-free for callers: skipped when another thread is updating. */
void ci_signature_record(const void *fn);
struct ci_signature_snapshot {
    uint64_t hash, period_launches, period_ns, iterations;
};
void ci_signature_snapshot(struct ci_signature_snapshot *out);
void ci_signature_reset(void);

/* ---- ci_nvml.c ----------------------------------------------------------- */

/* Loads libnvidia-ml.so.1 and maps CUDA devices to NVML handles. Returns 0
 * when per-process utilisation can be sampled, -1 otherwise. Monitor thread. */
int ci_nvml_start(int device_count);
/* Mean SM utilisation (percent, summed over the workload's processes) of the
 * samples newer than *last_seen_us on `dev`; advances *last_seen_us. Returns
 * the number of samples used; 0 when nothing is new; -2 when new samples
 * exist but none belongs to the workload (util = 0); -1 when NVML failed.
 * *others: new samples of other processes that were busy (co-location). */
int ci_nvml_workload_util(int dev, uint64_t *last_seen_us, double *util, int *others);
/* CUDA ordinal of an NVML handle the monitor mapped, -1 when unknown. */
int ci_nvml_cuda_index(nvmlDevice_t handle);
/* Whole-device utilisation (percent) as a conservative fallback, -1 on error. */
int ci_nvml_device_util(int dev, double *util);
/* Opens NVML now (once per process), so that a caller about to take a lock does not
 * dlopen under it. */
void ci_nvml_prepare(void);
/* The device's free memory as the driver reports it (the real nvmlDeviceGetMemoryInfo,
 * not the limit's view). Opens NVML on first use (any thread). 0, or -1 without NVML. */
int ci_nvml_device_free(int dev, uint64_t *free_bytes);
/* The processes with a context on `dev` and their used memory (what nvidia-smi shows):
 * at most `max` into `out`. Returns the count, -1 when NVML cannot tell. */
int ci_nvml_processes(int dev, nvmlProcessInfo_t *out, unsigned int max);

/* ---- ci_monitor.c -------------------------------------------------------- */

/* Starts the monitor thread once per process (again in a forked child). */
void ci_monitor_start(void);
/* Forked child: the thread did not survive; allow a restart. */
void ci_monitor_after_fork_child(void);
/* Writes this process's counters into its slot now (also done every ~10 ms). */
void ci_monitor_publish(void);
/* Final publish and ci_region_detach of `slot`, with no monitor publish in between or
 * after (which would put the retired slot's identity or memory back). */
void ci_monitor_retire(int slot);

#endif /* CI_INTERNAL_H */
