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

#endif
