/*
 * ci_footprint.c — device memory the driver takes for a process without an allocation
 * call asking for it: its CUDA contexts (~518 MiB each on the H200, driver 580), the
 * module images loaded into them, and what it rounds and pads. nvidia-smi counts it
 * against the process; so does the memory limit.
 *
 * Two ways in:
 *
 *   Measured around a context's creation (ci_context.c calls ci_footprint_begin/_end around
 *   the real call) and charged before the call returns; the limit can refuse it, and the
 *   context is then undone. The figure, in order of preference:
 *     1. NVML's used memory of this process on that device, after minus before: what
 *        nvidia-smi shows, blind to other processes. The process is found by its pid or,
 *        where NVML names host pids (a container's pid namespace), as the one pid that
 *        appeared in the device's list across the call (remembered for the
 *        reconciliation). Several new pids at once (contexts created side by side): the
 *        smallest of their figures, ours being one of them.
 *     2. The drop of the device's free memory (NVML; cuMemGetInfo needs the very context
 *        being created). Another process allocating or freeing during the call moves it
 *        too; it never goes below 0. On the H200 it read 5.6 MiB more than (1).
 *     3. Nothing (no NVML): the context is not charged, said once on stderr.
 *
 *   Reconciled by the monitor every 100 ms (ci_footprint_reconcile) wherever NVML names
 *   this process: what it holds on a device beyond everything it has charged there is
 *   charged too, without a limit check (the memory is already taken; later allocations
 *   are refused instead). That is how module images are counted: with lazy loading (the
 *   default since CUDA 12.2, and PyTorch's) an image lands at its kernel's first launch,
 *   inside cuLaunchKernel, where nothing may be measured. The cuModuleLoad* and
 *   cuLibraryLoad* calls are therefore not bracketed: a PTX module loaded eagerly read 0 B
 *   there on the H200 (small images share pages the context already holds), and two NVML
 *   queries per load would cost a PyTorch process hundreds of them at start for nothing.
 *   The reconciliation also catches array padding and the 2 MiB page rounding of small
 *   allocations. It only grows, until the device's last context of the process is
 *   destroyed (that memory goes with it): a reading taken between a driver call and its
 *   bookkeeping must not shrink the charge. Growing on such a reading is what the
 *   allocation paths rule out: each reserves before it calls the driver and gives the
 *   charge back after the driver freed (cuMemAllocPitch_v2, which settles on the pitch
 *   after the call, can leave its row padding charged twice), and a device with a context
 *   creation in progress is skipped.
 */
#include <pthread.h>
#include <unistd.h>

#include "ci_internal.h"
#include "ci_memory_accounting.h"
#include "ci_nvml.h"

static pthread_mutex_t ci_footprint_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t ci_footprint_charged[CI_MAX_DEVICES]; /* contexts + reconciled */
static uint64_t ci_footprint_extra[CI_MAX_DEVICES];          /* reconciled part (lock) */
static int ci_footprint_contexts[CI_MAX_DEVICES];            /* live contexts (lock) */
static _Atomic int ci_footprint_busy[CI_MAX_DEVICES];         /* creations in progress */
static _Atomic unsigned int ci_footprint_pid; /* this process as NVML names it, 0 unknown */
static _Atomic int ci_footprint_unmeasured_logged;

static bool ci_footprint_dev_ok(int dev)
{
    return dev >= 0 && dev < CI_MAX_DEVICES;
}

/* Used memory of `pid` in NVML's list, false when it is not listed with a known value. */
static bool ci_footprint_used_of(const nvmlProcessInfo_t *procs, int n, unsigned int pid,
                                 uint64_t *used)
{
    for (int i = 0; i < n; i++) {
        if (procs[i].pid == pid && procs[i].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE) {
            *used = procs[i].usedGpuMemory;
            return true;
        }
    }
    return false;
}

static bool ci_footprint_listed(const nvmlProcessInfo_t *procs, int n, unsigned int pid)
{
    for (int i = 0; i < n; i++)
        if (procs[i].pid == pid)
            return true;
    return false;
}

static int ci_footprint_total_contexts_locked(void)
{
    int n = 0;
    for (int d = 0; d < CI_MAX_DEVICES; d++)
        n += ci_footprint_contexts[d];
    return n;
}

void ci_footprint_begin(struct ci_footprint_probe *p, int dev)
{
    p->dev = dev;
    p->nprocs = -1;
    p->have_free = false;
    if (!ci_footprint_dev_ok(dev))
        return;
    atomic_fetch_add(&ci_footprint_busy[dev], 1);
    p->nprocs = ci_nvml_processes(dev, p->procs, CI_FOOTPRINT_PROCS);
    p->have_free = ci_nvml_device_free(dev, &p->free_bytes) == 0;
}

/* Source 1: this process's used memory after minus before; false when NVML cannot name
 * this process. */
static bool ci_footprint_by_process(const struct ci_footprint_probe *p, uint64_t *bytes)
{
    nvmlProcessInfo_t after[CI_FOOTPRINT_PROCS];
    int n = p->nprocs < 0 ? -1 : ci_nvml_processes(p->dev, after, CI_FOOTPRINT_PROCS);
    if (n < 0)
        return false;
    unsigned int self = (unsigned int)getpid();
    unsigned int known = atomic_load(&ci_footprint_pid);
    /* Our own pid means us unless NVML listed it before this process had any context: in a
     * pid namespace that number can be another process's host pid. */
    pthread_mutex_lock(&ci_footprint_lock);
    bool first = ci_footprint_total_contexts_locked() == 0;
    pthread_mutex_unlock(&ci_footprint_lock);
    bool self_trusted = known == self || !(first && ci_footprint_listed(p->procs, p->nprocs, self));
    unsigned int candidates[2] = {known, self_trusted ? self : 0};
    for (int c = 0; c < 2; c++) {
        uint64_t before = 0, now;
        if (candidates[c] == 0 || !ci_footprint_used_of(after, n, candidates[c], &now))
            continue;
        if (!ci_footprint_used_of(p->procs, p->nprocs, candidates[c], &before))
            before = 0;
        atomic_store(&ci_footprint_pid, candidates[c]);
        *bytes = now > before ? now - before : 0;
        return true;
    }
    int fresh = 0;
    unsigned int fresh_pid = 0;
    uint64_t smallest = UINT64_MAX;
    for (int i = 0; i < n; i++) {
        if (after[i].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE ||
            ci_footprint_listed(p->procs, p->nprocs, after[i].pid))
            continue;
        fresh++;
        fresh_pid = after[i].pid;
        if (after[i].usedGpuMemory < smallest)
            smallest = after[i].usedGpuMemory;
    }
    if (fresh == 0)
        return false;
    if (fresh == 1 && known == 0) {
        atomic_store(&ci_footprint_pid, fresh_pid);
        ci_debug("NVML names this process %u", fresh_pid);
    }
    *bytes = smallest;
    return true;
}

/* The figure for the creation `p` bracketed (sources 1, 2, 3 of the file comment). */
static uint64_t ci_footprint_measure(const struct ci_footprint_probe *p)
{
    uint64_t bytes = 0, free_after;
    if (ci_footprint_by_process(p, &bytes))
        return bytes;
    if (p->have_free && ci_nvml_device_free(p->dev, &free_after) == 0)
        return p->free_bytes > free_after ? p->free_bytes - free_after : 0;
    if (!atomic_exchange(&ci_footprint_unmeasured_logged, 1))
        ci_log("cannot measure the device memory of a CUDA context (no NVML): not counted");
    return 0;
}

int ci_footprint_end(struct ci_footprint_probe *p, bool created, uint64_t *bytes)
{
    *bytes = 0;
    if (!ci_footprint_dev_ok(p->dev))
        return 0;
    int rc = 0;
    if (created) {
        *bytes = ci_footprint_measure(p);
        pthread_mutex_lock(&ci_footprint_lock);
        rc = *bytes == 0 ? 0 : ci_memory_reserve(p->dev, *bytes);
        if (rc == 0) {
            ci_footprint_contexts[p->dev]++;
            atomic_fetch_add(&ci_footprint_charged[p->dev], *bytes);
        }
        pthread_mutex_unlock(&ci_footprint_lock);
        ci_debug("context on device %d: %llu bytes%s", p->dev, (unsigned long long)*bytes,
                 rc == 0 ? "" : ", refused by the limit");
    }
    atomic_fetch_sub(&ci_footprint_busy[p->dev], 1);
    return rc;
}

void ci_footprint_discharge(int dev, uint64_t bytes)
{
    if (!ci_footprint_dev_ok(dev))
        return;
    pthread_mutex_lock(&ci_footprint_lock);
    if (ci_footprint_contexts[dev] > 0)
        ci_footprint_contexts[dev]--;
    if (ci_footprint_contexts[dev] == 0) {
        bytes += ci_footprint_extra[dev]; /* the device's memory went with its last context */
        ci_footprint_extra[dev] = 0;
    }
    uint64_t charged = atomic_load(&ci_footprint_charged[dev]);
    bytes = bytes < charged ? bytes : charged;
    atomic_store(&ci_footprint_charged[dev], charged - bytes);
    if (bytes > 0)
        ci_memory_release(dev, bytes);
    pthread_mutex_unlock(&ci_footprint_lock);
}

void ci_footprint_reconcile(void)
{
    unsigned int pid = atomic_load(&ci_footprint_pid);
    if (pid == 0)
        return; /* NVML never named this process: nothing to compare with */
    int count = atomic_load(&ci_state.device_count);
    for (int d = 0; d < count && d < CI_MAX_DEVICES; d++) {
        pthread_mutex_lock(&ci_footprint_lock);
        bool live = ci_footprint_contexts[d] > 0;
        pthread_mutex_unlock(&ci_footprint_lock);
        if (!live || atomic_load(&ci_footprint_busy[d]) > 0)
            continue;
        nvmlProcessInfo_t procs[CI_FOOTPRINT_PROCS];
        uint64_t used;
        int n = ci_nvml_processes(d, procs, CI_FOOTPRINT_PROCS);
        if (n < 0 || !ci_footprint_used_of(procs, n, pid, &used))
            continue;
        pthread_mutex_lock(&ci_footprint_lock);
        uint64_t own = ci_ledger_own_bytes(d);
        if (ci_footprint_contexts[d] > 0 && atomic_load(&ci_footprint_busy[d]) == 0 && used > own) {
            uint64_t grow = used - own;
            ci_memory_charge_taken(d, grow);
            ci_footprint_extra[d] += grow;
            atomic_fetch_add(&ci_footprint_charged[d], grow);
            ci_debug("device %d: NVML shows %llu bytes, %llu charged: +%llu footprint", d,
                     (unsigned long long)used, (unsigned long long)own, (unsigned long long)grow);
        }
        pthread_mutex_unlock(&ci_footprint_lock);
    }
}

uint64_t ci_footprint_bytes(int dev)
{
    if (!ci_footprint_dev_ok(dev))
        return 0;
    return atomic_load_explicit(&ci_footprint_charged[dev], memory_order_relaxed);
}

void ci_footprint_after_fork_child(void)
{
    pthread_mutex_init(&ci_footprint_lock, NULL);
    for (int d = 0; d < CI_MAX_DEVICES; d++) {
        atomic_store(&ci_footprint_charged[d], 0);
        ci_footprint_extra[d] = 0;
        ci_footprint_contexts[d] = 0;
        atomic_store(&ci_footprint_busy[d], 0);
    }
    atomic_store(&ci_footprint_pid, 0);
}
