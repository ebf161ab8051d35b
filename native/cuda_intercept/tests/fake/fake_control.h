/*
 * fake_control.h — control API of the fake libcuda (tests only).
 */
#ifndef FAKE_CONTROL_H
#define FAKE_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#define FAKECUDA_SAMPLE_PIDS 8

struct fakecuda_sample {
    uint64_t ts_us;  /* wall clock, end of the sample period */
    unsigned util;   /* percent of the period the simulated GPU was busy */
    unsigned npids;  /* shared GPU: the processes that had work in the period */
    unsigned pids[FAKECUDA_SAMPLE_PIDS];
};

/* Calls made to exported symbol `name` of the fake driver. */
unsigned long fakecuda_calls(const char *name);
/* The fake driver's own function for `name` (never the interceptor's). */
void *fakecuda_real(const char *name);
/* Fake device memory currently allocated, in bytes. */
uint64_t fakecuda_used_bytes(void);
/* Utilisation samples newer than last_seen_us (at most max); returns count. */
int fakecuda_samples_since(uint64_t last_seen_us, struct fakecuda_sample *out, int max);
/* 1 when FAKECUDA_SHARED_GPU made this process share the timeline. */
int fakecuda_gpu_shared(void);
/* Kernel time this process has put on the timeline, in ns (the truth): nominal
 * durations, i.e. the work at full-load speed (FAKECUDA_BOOST_PERCENT). */
uint64_t fakecuda_own_busy_ns(void);
/* Times the shared card switched to this process's context (FAKECUDA_SWITCH_NS). */
uint64_t fakecuda_own_switches(void);
/* Time the GPU has spent running kernels so far (all processes; at the clock it ran). */
uint64_t fakecuda_gpu_busy_ns(void);
/* The fake driver's clock (fake_clock.c): CLOCK_MONOTONIC, CLOCK_REALTIME and a sleep,
 * virtual with FAKECUDA_VIRTUAL_TIME=1. The interceptor's test build reads these. */
uint64_t fakecuda_clock_ns(void);
uint64_t fakecuda_clock_unix_ns(void);
void fakecuda_clock_sleep_ns(uint64_t ns);
/* +1: a thread about to be created takes part in the virtual clock from now on (its
 * first clock call claims the place); -1: it was not created after all. */
void fakecuda_clock_thread_spawn(int delta);
/* Contexts the process has (primary ones retained + created): fake NVML lists the process
 * only while it has one. */
int fakecuda_contexts(void);
/* What the first call of `entry` ("cuInit" or "cuDriverGetVersion") of this process read
 * of MPS client variable `var` (CUDA_MPS_PIPE_DIRECTORY, _ACTIVE_THREAD_PERCENTAGE,
 * _PINNED_DEVICE_MEM_LIMIT): 1 and its value in out (at most len bytes) when it was set,
 * 0 when unset, -1 when `entry` was not called yet. */
int fakecuda_env_seen(const char *entry, const char *var, char *out, size_t len);
/* Sets the device cuCtxGetDevice reports for the calling thread. */
void fakecuda_set_device(int dev);

#endif
