/*
 * ci_region_layout.h — the ONE definition of the shared-memory region that the
 * interceptor keeps per workload in "$ALNAIR_WORKSPACE/cuda.region".
 *
 * Readers: every process of the workload (memory limit), the node's exporter
 * (metrics, through libs/common/src/alnair_common/cuda_region.py, which mirrors
 * this file byte for byte — change both together and bump the version).
 *
 * Layout rules
 *   - little-endian, naturally aligned, no implicit padding (static_asserts below);
 *   - file = header (512 bytes) followed by CI_REGION_MAX_SLOTS process slots;
 *   - header.layout_version changes whenever any offset or meaning changes;
 *     readers refuse versions they do not know;
 *   - a slot's monitor-written fields are published under a seqlock: `seq` is
 *     odd while the owner writes; a reader retries when it sees an odd or a
 *     changed `seq`.  memory_used_bytes is also changed by allocations under the
 *     region lock and may be newer than the rest of the record.
 *   - unknown / not measured values: sm_util_percent = CI_REGION_UNKNOWN_U32.
 */
#ifndef CI_REGION_LAYOUT_H
#define CI_REGION_LAYOUT_H

#include <stdint.h>

#define CI_REGION_FILE_NAME "cuda.region"
#define CI_REGION_MAGIC 0x31554341524e4c41ULL /* "ALNRACU1" little-endian */
/* 2: device.sm_util_source; 3: device.footprint_bytes; 4: device.kernel_names */
#define CI_REGION_LAYOUT_VERSION 4u
#define CI_REGION_MAX_DEVICES 16
#define CI_REGION_MAX_SLOTS 128
#define CI_REGION_LOCK_BYTES 64
#define CI_REGION_WORKLOAD_ID_BYTES 64
#define CI_REGION_UNLIMITED UINT64_MAX
#define CI_REGION_UNKNOWN_U32 UINT32_MAX

/* header.limits_source */
#define CI_LIMITS_SOURCE_NONE 0u
#define CI_LIMITS_SOURCE_ENV 1u
#define CI_LIMITS_SOURCE_FILE 2u

/* device.sm_util_source: what the compute controller was fed (sm_util_percent) */
#define CI_UTIL_SOURCE_UNKNOWN 0u     /* no measurement yet (or no compute limit) */
#define CI_UTIL_SOURCE_GPUTIME 1u     /* the interceptor's own event-timed GPU time */
#define CI_UTIL_SOURCE_NVML 2u        /* fallback: NVML per-process utilisation */
#define CI_UTIL_SOURCE_NVML_DEVICE 3u /* fallback: NVML whole-device utilisation */
#define CI_UTIL_SOURCE_OPEN_LOOP 4u   /* fallback: no NVML, unthrottled pace scaled */

/* device.kernel_names */
#define CI_KERNEL_NAMES_READ (1ull << 63)        /* the driver gave kernel names */
#define CI_KERNEL_NAMES_TORCH_SEEN (1ull << 62)  /* a PyTorch (at::native) kernel ran */
#define CI_KERNEL_NAMES_TRAINING_MASK ((1ull << 62) - 1)

/* slot.state */
#define CI_SLOT_FREE 0u   /* never used */
#define CI_SLOT_ACTIVE 1u /* a live process; its memory counts against the limit */
#define CI_SLOT_EXITED 2u /* process gone: final counters kept, memory 0, reusable */

struct ci_region_header {                          /* 512 bytes */
    uint64_t magic;                                /*   0 */
    uint32_t layout_version;                       /*   8 */
    uint32_t header_bytes;                         /*  12 */
    uint32_t slot_bytes;                           /*  16 */
    uint32_t max_slots;                            /*  20 */
    uint32_t max_devices;                          /*  24 */
    uint32_t compute_percent;                      /*  28: 1..100, 100 = no limit */
    uint64_t memory_limit_bytes;                   /*  32: per GPU, UNLIMITED = none */
    uint64_t created_unix_ns;                      /*  40 */
    uint64_t generation;                           /*  48: bumped on attach/release */
    uint32_t limits_source;                        /*  56 */
    uint32_t reserved0;                            /*  60 */
    char workload_id[CI_REGION_WORKLOAD_ID_BYTES]; /*  64 */
    uint8_t lock[CI_REGION_LOCK_BYTES];            /* 128: robust process-shared mutex */
    uint64_t reserved[40];                         /* 192 .. 512 */
};

struct ci_region_device {            /* 128 bytes, one per GPU per process */
    uint64_t memory_used_bytes;      /*   0: live accounted allocations */
    uint64_t memory_peak_bytes;      /*   8 */
    uint64_t alloc_count;            /*  16: successful allocations */
    uint64_t alloc_denied;           /*  24: refused by the memory limit */
    uint64_t kernel_launches;        /*  32: cuLaunchKernel/Ex/Cooperative */
    uint64_t graph_launches;         /*  40: cuGraphLaunch */
    uint64_t memcpy_htod_bytes;      /*  48 */
    uint64_t memcpy_dtoh_bytes;      /*  56 */
    uint64_t memcpy_dtod_bytes;      /*  64 */
    uint64_t throttled_ns;           /*  72: time launches waited for tokens */
    int64_t tokens_available;        /*  80 */
    uint64_t token_rate_per_s;       /*  88: 0 = not throttled */
    uint64_t tokens_charged;         /*  96 */
    uint32_t sm_util_percent;        /* 104: workload SM utilisation, last sample */
    uint32_t sm_util_source;         /* 108: CI_UTIL_SOURCE_* of that sample */
    uint64_t footprint_bytes;        /* 112: the part of memory_used_bytes that no allocation
                                      *      call made: contexts, module images, padding;
                                      *      an exited record keeps its last value */
    uint64_t kernel_names;           /* 120: what the launched kernels' names say
                                      *      (ci_kernel_names.c): CI_KERNEL_NAMES_* bits
                                      *      and, in bits 0..61, launches of kernels
                                      *      named like training (backward,
                                      *      multi_tensor_apply) */
};

struct ci_region_slot {                       /* 64 + 16 * 128 = 2112 bytes */
    uint32_t seq;                             /*  0: seqlock */
    uint32_t state;                           /*  4: CI_SLOT_* */
    int32_t pid;                              /*  8: pid in the workload's namespace */
    int32_t host_pid;                         /* 12: 0 = unknown (node agent may fill) */
    uint64_t start_time_ticks;                /* 16: /proc/<pid>/stat field 22 */
    uint64_t updated_unix_ns;                 /* 24 */
    uint64_t launch_signature;                /* 32: rolling hash of recent launches */
    uint64_t iteration_period_launches;       /* 40: 0 = no repeating sequence yet */
    uint64_t iteration_period_ns;             /* 48: last measured iteration time */
    uint64_t iterations;                      /* 56: repetitions seen */
    struct ci_region_device dev[CI_REGION_MAX_DEVICES]; /* 64 */
};

struct ci_region {
    struct ci_region_header header;
    struct ci_region_slot slots[CI_REGION_MAX_SLOTS];
};

_Static_assert(sizeof(struct ci_region_header) == 512, "header layout");
_Static_assert(sizeof(struct ci_region_device) == 128, "device record layout");
_Static_assert(sizeof(struct ci_region_slot) == 2112, "slot layout");
_Static_assert(sizeof(struct ci_region) == 512 + 128 * 2112, "region layout");

#endif /* CI_REGION_LAYOUT_H */
