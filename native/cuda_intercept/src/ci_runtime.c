/*
 * ci_runtime.c — the process-wide lifecycle of the interceptor.
 *
 * The constructor does almost nothing (every process of the container loads
 * the library, through LD_PRELOAD or /etc/ld.so.preload, and most never touch CUDA): it
 * reads the limits file, quietly, only so that MPS mode (ci_mps.c) sets the MPS client's
 * variables before the program or the driver can read them.
 * The first hooked call runs ci_runtime_ensure(): limits, region, real driver table,
 * region slot, memory ledger. The
 * real cuInit's success starts the monitor thread. pthread_atfork keeps the
 * process-local locks consistent over fork; the child starts over lazily
 * with its own slot, counters and monitor. The destructor publishes the final
 * counters and retires the slot.
 */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "ci_internal.h"
#include "ci_compute_metering.h"
#include "ci_memory_accounting.h"

struct ci_state ci_state = {.slot = -1, .device_count = 1};
struct ci_dev_counters ci_counters[CI_MAX_DEVICES];

static pthread_mutex_t ci_runtime_lock = PTHREAD_MUTEX_INITIALIZER;
static bool ci_runtime_base_done; /* limits loaded, region mapped (survives fork) */
static _Atomic int ci_runtime_ready; /* + driver table, slot (reset in a child) */

/* Loads limits and maps the region once per process image. Lock held. */
static void ci_runtime_base_locked(void)
{
    if (ci_runtime_base_done)
        return;
    ci_limits_load(&ci_state.limits);
    ci_mps_start(&ci_state.limits);
    ci_region_open(&ci_state.limits);
    ci_debug("limits: memory %llu bytes, compute %u%%, source %u, workspace \"%s\", "
             "mps_pipe_directory \"%s\"", (unsigned long long)ci_state.limits.memory_bytes,
             ci_state.limits.compute_percent, ci_state.limits.source, ci_state.limits.workspace,
             ci_state.limits.mps_pipe_directory);
    ci_runtime_base_done = true;
}

void ci_runtime_ensure_base(void)
{
    if (CI_LIKELY(atomic_load_explicit(&ci_runtime_ready, memory_order_acquire)))
        return;
    pthread_mutex_lock(&ci_runtime_lock);
    ci_runtime_base_locked();
    pthread_mutex_unlock(&ci_runtime_lock);
}

void ci_runtime_ensure(void)
{
    if (CI_LIKELY(atomic_load_explicit(&ci_runtime_ready, memory_order_acquire)))
        return;
    pthread_mutex_lock(&ci_runtime_lock);
    if (!atomic_load_explicit(&ci_runtime_ready, memory_order_relaxed)) {
        ci_runtime_base_locked();
        ci_lookup_load_driver();
        if (atomic_load(&ci_state.slot) < 0)
            atomic_store(&ci_state.slot, ci_region_attach());
        ci_ledger_open(ci_state.limits.mode == CI_LIMITS_MODE_CONTAINER);
        atomic_store_explicit(&ci_runtime_ready, 1, memory_order_release);
    }
    pthread_mutex_unlock(&ci_runtime_lock);
}

int ci_runtime_slot(void)
{
    ci_runtime_ensure();
    return atomic_load_explicit(&ci_state.slot, memory_order_relaxed);
}

void ci_runtime_after_cuinit(void)
{
    if (atomic_exchange(&ci_state.cuinit_done, 1))
        return;
    int count = 1;
    if (ci_driver.cuDeviceGetCount != NULL && ci_driver.cuDeviceGetCount(&count) == CUDA_SUCCESS) {
        if (count < 1)
            count = 1;
        if (count > CI_MAX_DEVICES)
            count = CI_MAX_DEVICES;
    }
    for (int d = 0; d < count && ci_driver.cuDeviceGetAttribute != NULL; d++)
        ci_driver.cuDeviceGetAttribute(&ci_state.sm_count[d],
                                       CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d);
    atomic_store(&ci_state.device_count, count);
    ci_monitor_start();
}

int ci_runtime_current_device(void)
{
    if (CI_LIKELY(atomic_load_explicit(&ci_state.device_count, memory_order_relaxed) <= 1))
        return 0;
    CUdevice dev = 0;
    if (ci_driver.cuCtxGetDevice == NULL || ci_driver.cuCtxGetDevice(&dev) != CUDA_SUCCESS)
        return 0;
    return (dev >= 0 && dev < CI_MAX_DEVICES) ? dev : 0;
}

typedef CUresult (*ci_init_fn)(unsigned int);

CUresult ci_on_init(void *real, unsigned int flags)
{
    ci_runtime_ensure();
    ci_mps_enforce();
    CUresult r = ((ci_init_fn)real)(flags);
    if (r == CUDA_SUCCESS)
        ci_runtime_after_cuinit();
    return r;
}

/* ---- fork ----------------------------------------------------------------- */

static void ci_runtime_prepare_fork(void)
{
    pthread_mutex_lock(&ci_runtime_lock);
    ci_alloc_table_lock_for_fork();
    ci_ledger_lock_for_fork();
}

static void ci_runtime_parent_after_fork(void)
{
    ci_ledger_unlock_after_fork();
    ci_alloc_table_unlock_after_fork();
    pthread_mutex_unlock(&ci_runtime_lock);
}

/* The child has one thread and none of the parent's CUDA state: it starts
 * over with a slot, counters, bucket, monitor and ledger index of its own, on first use.
 * Its mapping of the region is redone at once (ci_region_after_fork_child): an inherited
 * one would keep the parent's ledger locks alive after the parent ends. */
static void ci_runtime_child_after_fork(void)
{
    ci_ledger_unlock_after_fork();
    ci_alloc_table_unlock_after_fork();
    ci_alloc_table_reset();
    ci_ledger_after_fork_child();
    ci_region_after_fork_child();
    memset(ci_counters, 0, sizeof ci_counters);
    ci_tokens_reset();
    ci_signature_reset();
    ci_kernel_names_after_fork_child();
    ci_monitor_after_fork_child();
    ci_gputime_after_fork_child();
    ci_footprint_after_fork_child();
    ci_context_after_fork_child();
    ci_graphmem_after_fork_child();
    atomic_store(&ci_state.slot, -1);
    atomic_store(&ci_state.cuinit_done, 0);
    atomic_store(&ci_runtime_ready, 0);
    pthread_mutex_unlock(&ci_runtime_lock);
}

__attribute__((constructor)) static void ci_runtime_constructor(void)
{
    ci_log_init();
    ci_mps_early();
    pthread_atfork(ci_runtime_prepare_fork, ci_runtime_parent_after_fork,
                   ci_runtime_child_after_fork);
}

__attribute__((destructor)) static void ci_runtime_destructor(void)
{
    int slot = atomic_load(&ci_state.slot);
    if (slot < 0 || !atomic_load(&ci_runtime_ready))
        return;
    ci_monitor_retire(slot);
}
