/*
 * fake_nvml.c — a fake libnvidia-ml.so.1 for the tests. Devices and memory
 * come from the fake libcuda; per-process utilisation samples come from its
 * simulated GPU timeline and name the calling process (plus FAKENVML_PID_OFFSET,
 * to imitate a pid namespace). The process list (nvmlDeviceGetComputeRunningProcesses)
 * names the calling process (with that offset) while it has a fake context, with the fake
 * device memory it holds as its used memory; FAKENVML_NO_PROCESS_MEMORY=1 makes it
 * NVML_ERROR_NOT_SUPPORTED (as under MIG without privileges).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ci_cuda.h"
#include "fake_control.h"

#define FAKE_EXPORT __attribute__((visibility("default")))
#define N(name, params) FAKE_EXPORT nvmlReturn_t name params; nvmlReturn_t name params

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes);

static struct nvmlDevice_st {
    int index;
} devices[16] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}};

N(nvmlInit_v2, (void)) { return NVML_SUCCESS; }
N(nvmlShutdown, (void)) { return NVML_SUCCESS; }
N(nvmlDeviceGetCount_v2, (unsigned int *count))
{
    const char *v = getenv("FAKECUDA_DEVICES");
    *count = v ? (unsigned)atoi(v) : 1;
    return NVML_SUCCESS;
}
N(nvmlDeviceGetHandleByIndex_v2, (unsigned int index, nvmlDevice_t *dev))
{
    if (index >= 16)
        return NVML_ERROR_INVALID_ARGUMENT;
    *dev = &devices[index];
    return NVML_SUCCESS;
}
N(nvmlDeviceGetHandleByPciBusId_v2, (const char *bus, nvmlDevice_t *dev))
{
    unsigned b = 0;
    if (sscanf(bus, "%*x:%x:", &b) != 1 || b < 0x10 || b >= 0x20)
        return NVML_ERROR_NOT_FOUND;
    return nvmlDeviceGetHandleByIndex_v2(b - 0x10, dev);
}

static uint64_t fake_total(void)
{
    const char *v = getenv("FAKECUDA_TOTAL_MEM");
    return v ? strtoull(v, NULL, 10) : (16ull << 30);
}

N(nvmlDeviceGetMemoryInfo, (nvmlDevice_t dev, nvmlMemory_t *m))
{
    (void)dev;
    m->total = fake_total();
    m->used = fakecuda_used_bytes();
    m->free = m->total - m->used;
    return NVML_SUCCESS;
}
N(nvmlDeviceGetMemoryInfo_v2, (nvmlDevice_t dev, nvmlMemory_v2_t *m))
{
    (void)dev;
    m->total = fake_total();
    m->reserved = 1 << 20;
    m->used = fakecuda_used_bytes();
    m->free = m->total - m->used - m->reserved;
    return NVML_SUCCESS;
}

static nvmlReturn_t fake_processes(unsigned int *count, nvmlProcessInfo_t *infos)
{
    if (getenv("FAKENVML_NO_PROCESS_MEMORY") && atoi(getenv("FAKENVML_NO_PROCESS_MEMORY")))
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned int n = fakecuda_contexts() > 0 ? 1 : 0;
    if (*count < n || (n > 0 && infos == NULL)) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    *count = n;
    if (n > 0) {
        const char *off = getenv("FAKENVML_PID_OFFSET");
        memset(&infos[0], 0, sizeof infos[0]);
        infos[0].pid = (unsigned)getpid() + (off ? (unsigned)atoi(off) : 0);
        infos[0].usedGpuMemory = fakecuda_used_bytes();
    }
    return NVML_SUCCESS;
}
N(nvmlDeviceGetComputeRunningProcesses_v3, (nvmlDevice_t dev, unsigned int *count, nvmlProcessInfo_t *infos))
{
    (void)dev;
    return fake_processes(count, infos);
}
N(nvmlDeviceGetComputeRunningProcesses_v2, (nvmlDevice_t dev, unsigned int *count, nvmlProcessInfo_t *infos))
{
    (void)dev;
    return fake_processes(count, infos);
}

N(nvmlDeviceGetProcessUtilization, (nvmlDevice_t dev, nvmlProcessUtilizationSample_t *out,
                                    unsigned int *count, unsigned long long last_seen))
{
    (void)dev;
    struct fakecuda_sample s[512];
    int n = fakecuda_samples_since(last_seen, s, 512);
    if (n == 0)
        return NVML_ERROR_NOT_FOUND;
    if (out == NULL || *count < (unsigned)n) {
        *count = (unsigned)n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    /* A private GPU names the caller in every sample; a shared one names each
     * process that had work in the period, with the device's utilisation. */
    const char *off = getenv("FAKENVML_PID_OFFSET");
    unsigned offset = off ? (unsigned)atoi(off) : 0, self = (unsigned)getpid();
    int shared = fakecuda_gpu_shared();
    unsigned m = 0;
    for (int i = 0; i < n; i++) {
        unsigned npids = shared ? s[i].npids : 1;
        for (unsigned k = 0; k < npids; k++, m++) {
            if (m >= *count) {
                *count = m + 1;
                return NVML_ERROR_INSUFFICIENT_SIZE;
            }
            memset(&out[m], 0, sizeof out[m]);
            out[m].pid = (shared ? s[i].pids[k] : self) + offset;
            out[m].timeStamp = s[i].ts_us;
            out[m].smUtil = s[i].util;
        }
    }
    *count = m;
    return NVML_SUCCESS;
}

N(nvmlDeviceGetUtilizationRates, (nvmlDevice_t dev, nvmlUtilization_t *u))
{
    (void)dev;
    struct fakecuda_sample s[512];
    int n = fakecuda_samples_since(0, s, 512);
    u->gpu = n > 0 ? s[n - 1].util : 0;
    u->memory = 0;
    return NVML_SUCCESS;
}
