/*
 * fake_internal.h — what the fake driver's files share (fake_cuda.c: entry points,
 * memory, cuGetProcAddress; fake_copies.c: the copies; fake_gpu.c: the simulated GPU;
 * fake_streams.c: the work a process queues on it, streams and events; fake_objects.c,
 * fake_graph.c, fake_clock.c, fake_mps_env.c).
 */
#ifndef FAKE_INTERNAL_H
#define FAKE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
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

/* The simulated GPU's state (fake_gpu.c runs it; fake_streams.c queues work on it and
 * reads its events): one per process, or one per FAKECUDA_SHARED_GPU file mapped by every
 * process naming it. Read and written only under `lock`. Its layout is that file's: a
 * change bumps GPU_MAGIC (fake_gpu.c). */
#define GPU_MAX_PROCS 8
#define GPU_QUEUE_LEN 512
#define GPU_MAX_EVENTS 128
#define GPU_SAMPLE_RING 4096
#define GPU_FUTURE_PERIODS 64

struct gpu_item {
    uint64_t dur; /* kernel ns; 0 with event >= 0: an event marker */
    int event;
};

struct gpu_proc {
    unsigned pid; /* 0 = free slot */
    unsigned head, tail;
    uint64_t queued_ns; /* kernel time waiting in the queue */
    uint64_t last_end;  /* when its last kernel ends */
    bool after_event;   /* the last item it ran was an event marker */
    uint64_t switches;  /* times the card switched to this process (FAKECUDA_SWITCH_NS) */
    struct gpu_item q[GPU_QUEUE_LEN];
};

struct gpu_state {
    uint64_t magic;
    pthread_mutex_t lock;
    struct vclock clock;
    uint64_t sim_t;     /* the GPU has run everything before this time */
    int cur;            /* process holding the GPU, -1 none */
    int resident;       /* the process whose context the card ran last, -1 none */
    uint64_t slice_end; /* end of its slice */
    struct gpu_proc procs[GPU_MAX_PROCS];
    uint64_t event_ts[GPU_MAX_EVENTS];
    unsigned event_used[GPU_MAX_EVENTS];
    uint64_t period_ns, period0; /* period index base time */
    uint64_t cur_period;         /* index of the open period */
    unsigned last_util;          /* busy percent of the last closed period */
    uint64_t busy_total;         /* ns spent running kernels, ever */
    uint64_t noise;              /* FAKECUDA_CLOCK_NOISE_PERCENT's random state */
    uint64_t busy[GPU_FUTURE_PERIODS];
    unsigned pids[GPU_FUTURE_PERIODS][FAKECUDA_SAMPLE_PIDS];
    unsigned npids[GPU_FUTURE_PERIODS];
    struct fakecuda_sample samples[GPU_SAMPLE_RING];
    uint64_t samples_n;
};

/* fake_gpu.c: the GPU, private or the FAKECUDA_SHARED_GPU file's (aborts when that file
 * cannot be mapped). */
struct gpu_state *gpu_get(void);
/* Locks the GPU and runs it up to now; returns now. The caller unlocks. */
uint64_t gpu_enter(struct gpu_state *g);
/* This process's queue (a free or dead process's slot is taken; aborts past
 * GPU_MAX_PROCS). Locked. */
struct gpu_proc *gpu_own(struct gpu_state *g);
void gpu_lock_for_fork(void);
void gpu_unlock_after_fork(void);

/* fake_streams.c: puts `dur` ns of this process's work on the timeline (blocks like a
 * full launch queue); a kernel of `blocks` blocks costs one wave per SM count. */
void gpu_submit(uint64_t dur);
void gpu_launch(uint64_t blocks);

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
extern const struct fake_entry fake_cuda_entries[], fake_copy_entries[], fake_stream_entries[],
    fake_object_entries[], fake_graph_entries[];

#endif
