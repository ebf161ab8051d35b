/*
 * ci_nvml.c — NVML as a source: the workload's SM utilisation for the monitor
 * (nvmlDeviceGetProcessUtilization, whole-device rates as the fallback), the device
 * memory the driver reports for the footprint measurement (ci_footprint.c: the device's
 * free memory, each process's used memory), and the map from CUDA ordinals to NVML
 * handles. The hooked nvmlDeviceGetMemoryInfo(_v2) belongs to the memory limit
 * (ci_memory.c); it only asks this file which CUDA device a handle is, and this file
 * calls the real one.
 *
 * NVML is opened once, by whichever thread needs it first (the monitor thread, or a
 * thread creating a CUDA context), never on a launch path. CUDA ordinals map to NVML
 * handles through the PCI bus id, falling back to the index. The workload's processes are
 * the active slots of the region (their pid, or host_pid when the node agent filled it
 * in). Depends on the lookup (real dlsym, driver calls), the region and the log only.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "ci_internal.h"
#include "ci_nvml.h"

#define CI_NVML_MAX_SAMPLES 512
#define CI_NVML_MAX_PIDS (2 * CI_REGION_MAX_SLOTS)

static struct {
    nvmlReturn_t (*init_v2)(void);
    nvmlReturn_t (*by_pci_v2)(const char *bus, nvmlDevice_t *dev);
    nvmlReturn_t (*by_index_v2)(unsigned int index, nvmlDevice_t *dev);
    nvmlReturn_t (*process_util)(nvmlDevice_t dev, nvmlProcessUtilizationSample_t *samples,
                                 unsigned int *count, unsigned long long last_seen);
    nvmlReturn_t (*util_rates)(nvmlDevice_t dev, nvmlUtilization_t *util);
    nvmlReturn_t (*memory_info)(nvmlDevice_t dev, nvmlMemory_t *memory);
    nvmlReturn_t (*processes)(nvmlDevice_t dev, unsigned int *count, nvmlProcessInfo_t *infos);
} ci_nvml_fn;

static nvmlDevice_t ci_nvml_handles[CI_MAX_DEVICES];
static _Atomic int ci_nvml_count;
static int ci_nvml_state; /* 0 not opened, 1 usable, -1 absent or unusable */
static pthread_once_t ci_nvml_once = PTHREAD_ONCE_INIT;
static nvmlProcessUtilizationSample_t ci_nvml_samples[CI_NVML_MAX_SAMPLES];

/* pthread_once body: loads and initialises NVML, maps every CUDA device (the count cuInit
 * found) to its handle. */
static void ci_nvml_do_open(void)
{
    ci_nvml_state = -1;
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (h == NULL) {
        ci_debug("libnvidia-ml.so.1 not available: no utilisation feedback, no footprint measurement");
        return;
    }
#define CI_NVML_RESOLVE(field, name) \
    ci_nvml_fn.field = (__typeof__(ci_nvml_fn.field))ci_lookup_real_dlsym(h, name)
    CI_NVML_RESOLVE(init_v2, "nvmlInit_v2");
    CI_NVML_RESOLVE(by_pci_v2, "nvmlDeviceGetHandleByPciBusId_v2");
    CI_NVML_RESOLVE(by_index_v2, "nvmlDeviceGetHandleByIndex_v2");
    CI_NVML_RESOLVE(process_util, "nvmlDeviceGetProcessUtilization");
    CI_NVML_RESOLVE(util_rates, "nvmlDeviceGetUtilizationRates");
    CI_NVML_RESOLVE(memory_info, "nvmlDeviceGetMemoryInfo");
    /* _v3 and _v2 fill the same 24-byte record; v1 (16 bytes) is not used. */
    CI_NVML_RESOLVE(processes, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (ci_nvml_fn.processes == NULL)
        CI_NVML_RESOLVE(processes, "nvmlDeviceGetComputeRunningProcesses_v2");
#undef CI_NVML_RESOLVE
    if (ci_nvml_fn.init_v2 == NULL || ci_nvml_fn.init_v2() != NVML_SUCCESS) {
        ci_log("NVML present but unusable: no utilisation feedback, no footprint measurement");
        return;
    }
    int device_count = atomic_load(&ci_state.device_count);
    for (int d = 0; d < device_count && d < CI_MAX_DEVICES; d++) {
        char bus[64];
        nvmlDevice_t dev = NULL;
        bool ok = ci_driver.cuDeviceGetPCIBusId != NULL && ci_nvml_fn.by_pci_v2 != NULL &&
                  ci_driver.cuDeviceGetPCIBusId(bus, sizeof bus, d) == CUDA_SUCCESS &&
                  ci_nvml_fn.by_pci_v2(bus, &dev) == NVML_SUCCESS;
        if (!ok && ci_nvml_fn.by_index_v2 != NULL)
            ok = ci_nvml_fn.by_index_v2((unsigned)d, &dev) == NVML_SUCCESS;
        ci_nvml_handles[d] = ok ? dev : NULL;
    }
    atomic_store(&ci_nvml_count, device_count);
    ci_nvml_state = 1;
}

void ci_nvml_prepare(void)
{
    pthread_once(&ci_nvml_once, ci_nvml_do_open);
}

/* Handle of CUDA device `dev`, opening NVML first; NULL when there is none. */
static nvmlDevice_t ci_nvml_handle(int dev)
{
    pthread_once(&ci_nvml_once, ci_nvml_do_open);
    if (ci_nvml_state != 1 || dev < 0 || dev >= atomic_load(&ci_nvml_count))
        return NULL;
    return ci_nvml_handles[dev];
}

int ci_nvml_start(int device_count)
{
    (void)device_count; /* the map covers what cuInit found (ci_state.device_count) */
    pthread_once(&ci_nvml_once, ci_nvml_do_open);
    if (ci_nvml_state != 1)
        return -1;
    if (ci_nvml_fn.process_util == NULL) {
        ci_log("NVML has no per-process utilisation: compute limit runs without feedback");
        return -1;
    }
    return 0;
}

int ci_nvml_device_free(int dev, uint64_t *free_bytes)
{
    nvmlDevice_t h = ci_nvml_handle(dev);
    nvmlMemory_t m;
    if (h == NULL || ci_nvml_fn.memory_info == NULL || ci_nvml_fn.memory_info(h, &m) != NVML_SUCCESS)
        return -1;
    *free_bytes = m.free;
    return 0;
}

int ci_nvml_processes(int dev, nvmlProcessInfo_t *out, unsigned int max)
{
    nvmlDevice_t h = ci_nvml_handle(dev);
    if (h == NULL || ci_nvml_fn.processes == NULL)
        return -1;
    unsigned int count = max;
    nvmlReturn_t r = ci_nvml_fn.processes(h, &count, out);
    if (r != NVML_SUCCESS || count > max)
        return -1;
    return (int)count;
}

int ci_nvml_cuda_index(nvmlDevice_t handle)
{
    int n = atomic_load(&ci_nvml_count);
    for (int d = 0; d < n; d++)
        if (ci_nvml_handles[d] == handle)
            return d;
    return -1;
}

/* Collects the pids of the workload's live processes: this one, whatever its slot says,
 * and the others from the region. */
static int ci_nvml_workload_pids(unsigned int *pids)
{
    const struct ci_region *r = ci_region_get();
    unsigned int self = (unsigned int)getpid();
    int n = 0;
    pids[n++] = self;
    for (int i = 0; i < CI_REGION_MAX_SLOTS && n + 2 <= CI_NVML_MAX_PIDS; i++) {
        const struct ci_region_slot *s = &r->slots[i];
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != CI_SLOT_ACTIVE)
            continue;
        int32_t pid = __atomic_load_n(&s->pid, __ATOMIC_RELAXED);
        int32_t host = __atomic_load_n(&s->host_pid, __ATOMIC_RELAXED);
        if (pid > 0 && (unsigned)pid != self)
            pids[n++] = (unsigned)pid;
        if (host > 0 && host != pid && (unsigned)host != self)
            pids[n++] = (unsigned)host;
    }
    return n;
}

int ci_nvml_workload_util(int dev, uint64_t *last_seen_us, double *util, int *others)
{
    *others = 0;
    if (dev < 0 || dev >= atomic_load(&ci_nvml_count) || ci_nvml_handles[dev] == NULL)
        return -1;
    unsigned int count = CI_NVML_MAX_SAMPLES;
    nvmlReturn_t r = ci_nvml_fn.process_util(ci_nvml_handles[dev], ci_nvml_samples, &count,
                                             *last_seen_us);
    if (r == NVML_ERROR_NOT_FOUND)
        return 0; /* no process ran on the device since last_seen */
    if (r != NVML_SUCCESS)
        return -1;
    unsigned int pids[CI_NVML_MAX_PIDS];
    double sum[CI_NVML_MAX_PIDS];
    int nsamples[CI_NVML_MAX_PIDS];
    int npids = ci_nvml_workload_pids(pids);
    memset(sum, 0, sizeof sum);
    memset(nsamples, 0, sizeof nsamples);
    uint64_t newest = *last_seen_us;
    int used = 0;
    for (unsigned int i = 0; i < count && i < CI_NVML_MAX_SAMPLES; i++) {
        const nvmlProcessUtilizationSample_t *s = &ci_nvml_samples[i];
        if (s->timeStamp <= *last_seen_us)
            continue;
        if (s->timeStamp > newest)
            newest = s->timeStamp;
        int k = 0;
        while (k < npids && pids[k] != s->pid)
            k++;
        if (k == npids) {
            *others += s->smUtil > 0;
            continue;
        }
        sum[k] += s->smUtil > 100 ? 100.0 : (double)s->smUtil;
        nsamples[k]++;
        used++;
    }
    if (newest == *last_seen_us)
        return 0;
    double total = 0.0;
    for (int k = 0; k < npids; k++)
        if (nsamples[k] > 0)
            total += sum[k] / nsamples[k];
    *util = total > 100.0 ? 100.0 : total;
    *last_seen_us = newest;
    return used == 0 ? -2 : used;
}

int ci_nvml_device_util(int dev, double *util)
{
    nvmlUtilization_t u;
    if (dev < 0 || dev >= atomic_load(&ci_nvml_count) || ci_nvml_handles[dev] == NULL ||
        ci_nvml_fn.util_rates == NULL || ci_nvml_fn.util_rates(ci_nvml_handles[dev], &u) != NVML_SUCCESS)
        return -1;
    *util = (double)u.gpu;
    return 0;
}
