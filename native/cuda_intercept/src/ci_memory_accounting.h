/*
 * ci_memory_accounting.h — the memory limit's accounting: the workload's ledger
 * (ci_ledger.c), this process's allocations (ci_alloc_table.c, ci_memory.c) and the
 * memory the driver takes unasked (ci_footprint.c; contexts and graph memory,
 * ci_context.c and ci_graphmem.c).
 */
#ifndef CI_MEMORY_ACCOUNTING_H
#define CI_MEMORY_ACCOUNTING_H

#include <stdbool.h>
#include <stdint.h>

#include "ci_cuda.h"
#include "ci_region_layout.h"

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

#endif /* CI_MEMORY_ACCOUNTING_H */
