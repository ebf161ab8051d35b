/*
 * ci_nvml.h — what the library reads from NVML (ci_nvml.c): the workload's utilisation
 * for the compute limit, the device's free memory and its processes' use for the memory
 * footprint. Through NVML's real entry points, never the hooked ones.
 */
#ifndef CI_NVML_H
#define CI_NVML_H

#include <stdint.h>

#include "ci_cuda.h"

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

#endif /* CI_NVML_H */
