/*
 * fake_internal.h — what the fake driver's files share (fake_cuda.c: entry points,
 * memory, cuGetProcAddress; fake_copies.c: the copies; fake_gpu.c: the simulated GPU;
 * fake_objects.c, fake_graph.c, fake_clock.c, fake_mps_env.c).
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

/* cuGetProcAddress: each file lists the entry points it defines (exported name, the base
 * name a program asks for, the driver version that introduced that ABI, per-thread-stream
 * variant or not), ended by FAKE_ENTRIES_END; fake_cuda.c resolves across the lists, so no
 * file needs another's prototypes. */
struct fake_entry {
    const char *name, *base;
    int version, per_thread;
    void *fn;
};
#define FAKE_ENTRY(sym, base, ver, ptds) {#sym, #base, ver, ptds, (void *)sym}
#define FAKE_ENTRIES_END {NULL, NULL, 0, 0, NULL}
extern const struct fake_entry fake_cuda_entries[], fake_copy_entries[], fake_gpu_entries[],
    fake_object_entries[], fake_graph_entries[];

#endif
