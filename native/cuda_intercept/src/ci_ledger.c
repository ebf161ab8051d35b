/*
 * ci_ledger.c — the workload's memory ledger, kept by the kernel.
 *
 * Why not the region: every process of a workload must be able to write the region (it
 * publishes its counters there), so a tenant can zero its counters, wipe it, or mark its
 * slots free, and a ledger in those bytes would let the next process allocate what others
 * already hold. The ledger is instead a set of open-file-description (OFD) record locks on
 * the region file:
 *
 *   - a lock can be changed only through the open file description that holds it: no
 *     other process, and nothing written into the file, can shrink or remove it;
 *   - the description lives as long as the process's mapping of the region (the mapping
 *     holds a reference to it), so a process that closes its descriptor cannot drop its
 *     locks either, and a process that ends gives them back with nothing to reap;
 *   - locks need no bytes of the file: the ranges below lie far beyond the region's data.
 *
 * Ranges (byte offsets into the region file; all locks are write locks):
 *   GATE               1 byte, held (waiting) around every reservation of the workload,
 *                      so that "the others hold X, I may take Y" is decided one at a time
 *   CLAIM + i          1 byte, i < CI_LEDGER_MAX: the holder owns ledger index i
 *   USAGE(dev, i)      the holder of index i holds `n` bytes on `dev` <=> it locks
 *                      [USAGE(dev, i), USAGE(dev, i) + n); nothing when n = 0
 * A reader sums, for every index but its own, the length of the lock that covers the
 * first byte of that index's range: only the index's owner can hold it (a lock from
 * anyone else there would conflict with the owner's). A tenant process that adds locks of
 * its own can only make the sum larger: stricter, never looser.
 *
 * This process's own usage is also kept in process memory (ci_ledger_own): it is exact,
 * and what is published into the region's slot for readers (the exporter).
 *
 * Modes: SHARED (a region file, an index claimed), PRIVATE (no shared region in local
 * mode: the limit holds per process), BROKEN (container mode without a region or index,
 * or the application closed our descriptor: every reservation is refused).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "ci_internal.h"
#include "ci_memory_accounting.h"

#define CI_LEDGER_MAX 256
#define CI_LEDGER_GATE ((off_t)1 << 56)
#define CI_LEDGER_CLAIM(i) (CI_LEDGER_GATE + 1 + (off_t)(i))
/* Most one process can hold on one GPU (4 TiB): the length of an index's range. */
#define CI_LEDGER_SPAN ((uint64_t)1 << 42)
#define CI_LEDGER_USAGE(dev, i)                                                                 \
    (((off_t)1 << 57) + (off_t)(dev) * (off_t)(CI_LEDGER_SPAN * CI_LEDGER_MAX) +            \
     (off_t)(i) * (off_t)CI_LEDGER_SPAN)

enum ci_ledger_mode { CI_LEDGER_PRIVATE, CI_LEDGER_SHARED, CI_LEDGER_BROKEN };

static pthread_mutex_t ci_ledger_lock = PTHREAD_MUTEX_INITIALIZER;
static enum ci_ledger_mode ci_ledger_mode = CI_LEDGER_PRIVATE;
static int ci_ledger_index = -1;
static _Atomic uint64_t ci_ledger_own[CI_MAX_DEVICES];
static _Atomic int ci_ledger_broken_logged;

/* One fcntl on [start, start + len) of `fd`; `cmd` F_OFD_SETLK/SETLKW/GETLK. For GETLK,
 * *f receives the answer. Returns fcntl's result (EINTR retried for SETLKW). */
static int ci_ledger_fcntl(int fd, int cmd, short type, off_t start, off_t len, struct flock *f)
{
    struct flock local;
    if (f == NULL)
        f = &local;
    int rc;
    do {
        memset(f, 0, sizeof *f); /* l_pid must be 0 for OFD locks */
        f->l_type = type;
        f->l_whence = SEEK_SET;
        f->l_start = start;
        f->l_len = len;
        rc = fcntl(fd, cmd, f);
    } while (rc != 0 && errno == EINTR);
    return rc;
}

static uint64_t ci_ledger_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Marks the ledger broken (lock held): every later reservation is refused. */
static void ci_ledger_break_locked(const char *why)
{
    ci_ledger_mode = CI_LEDGER_BROKEN;
    if (!atomic_exchange(&ci_ledger_broken_logged, 1))
        ci_log("memory ledger unusable (%s): refusing further GPU memory allocations", why);
}

/* Bytes the other processes hold on `dev` over ledger indexes [lo, hi): one probe for
 * the whole range, split only where something is locked. UINT64_MAX when the kernel
 * cannot answer (the caller then refuses). */
static uint64_t ci_ledger_others(int fd, int dev, int lo, int hi)
{
    struct flock f;
    off_t start = CI_LEDGER_USAGE(dev, lo);
    if (ci_ledger_fcntl(fd, F_OFD_GETLK, F_WRLCK, start, (off_t)((uint64_t)(hi - lo) * CI_LEDGER_SPAN),
                        &f) != 0)
        return UINT64_MAX;
    if (f.l_type == F_UNLCK)
        return 0;
    if (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        return ci_ledger_add(ci_ledger_others(fd, dev, lo, mid), ci_ledger_others(fd, dev, mid, hi));
    }
    /* One index: its owner's usage is the lock covering the range's first byte. */
    if (ci_ledger_fcntl(fd, F_OFD_GETLK, F_WRLCK, start, 1, &f) != 0)
        return UINT64_MAX;
    if (f.l_type == F_UNLCK)
        return 0;
    if (f.l_len == 0) /* to the end of the file: unbounded */
        return UINT64_MAX;
    uint64_t end = (uint64_t)f.l_start + (uint64_t)f.l_len;
    uint64_t window_end = (uint64_t)start + CI_LEDGER_SPAN;
    return (end < window_end ? end : window_end) - (uint64_t)start;
}

void ci_ledger_open(bool container_mode)
{
    pthread_mutex_lock(&ci_ledger_lock);
    ci_ledger_index = -1;
    bool shared = ci_region_is_shared();
    int fd = shared ? ci_region_file() : -1;
    if (fd < 0) {
        /* No shared region: ci_region_open said why (and, in container mode, set the limit
         * to 0). A shared region without a descriptor: a forked child could not map it. */
        ci_ledger_mode = container_mode ? CI_LEDGER_BROKEN : CI_LEDGER_PRIVATE;
        if (shared)
            ci_log("cannot join the memory ledger (the region's descriptor is gone); %s",
                   container_mode ? "refusing all GPU memory allocations" : "limits apply per process");
        pthread_mutex_unlock(&ci_ledger_lock);
        return;
    }
    int err = 0;
    for (int i = 0; i < CI_LEDGER_MAX; i++) {
        if (ci_ledger_fcntl(fd, F_OFD_SETLK, F_WRLCK, CI_LEDGER_CLAIM(i), 1, NULL) == 0) {
            ci_ledger_index = i;
            break;
        }
        err = errno;
        if (err != EAGAIN && err != EACCES)
            break;
    }
    if (ci_ledger_index >= 0) {
        ci_ledger_mode = CI_LEDGER_SHARED;
        ci_debug("memory ledger index %d", ci_ledger_index);
    } else if (container_mode) {
        ci_ledger_break_locked(err == EAGAIN || err == EACCES ? "every ledger index is taken"
                                                              : strerror(err));
    } else {
        ci_ledger_mode = CI_LEDGER_PRIVATE;
        ci_log("cannot join the memory ledger (%s); limits apply per process",
               err == EAGAIN || err == EACCES ? "every ledger index is taken" : strerror(err));
    }
    pthread_mutex_unlock(&ci_ledger_lock);
}

/* Stores this process's usage of `dev` into its region record (lock held). */
static void ci_ledger_publish_dev(int dev, struct ci_region_device *rec)
{
    if (rec == NULL)
        return;
    uint64_t own = atomic_load_explicit(&ci_ledger_own[dev], memory_order_relaxed);
    __atomic_store_n(&rec->memory_used_bytes, own, __ATOMIC_RELAXED);
    if (own > __atomic_load_n(&rec->memory_peak_bytes, __ATOMIC_RELAXED))
        __atomic_store_n(&rec->memory_peak_bytes, own, __ATOMIC_RELAXED);
}

/* SHARED mode, lock held: the gate, the others' sum, our lock grown. 0 or -1. */
static int ci_ledger_reserve_shared(int dev, uint64_t bytes, uint64_t limit, uint64_t own)
{
    int fd = ci_region_file();
    if (fd < 0) {
        ci_ledger_break_locked("the application closed the region's descriptor");
        return -1;
    }
    bool limited = limit != CI_REGION_UNLIMITED;
    if (limited && ci_ledger_fcntl(fd, F_OFD_SETLKW, F_WRLCK, CI_LEDGER_GATE, 1, NULL) != 0) {
        ci_ledger_break_locked(strerror(errno));
        return -1;
    }
    int rc = 0;
    if (limited) {
        uint64_t others = ci_ledger_others(fd, dev, 0, CI_LEDGER_MAX);
        uint64_t total = ci_ledger_add(ci_ledger_add(others, own), bytes);
        if (total > limit)
            rc = -1;
    }
    /* Published even without a limit: another process of the workload may have a
     * stricter one (its environment tightened it) and must see what this one holds. */
    if (rc == 0 && ci_ledger_fcntl(fd, F_OFD_SETLK, F_WRLCK, CI_LEDGER_USAGE(dev, ci_ledger_index),
                                   (off_t)(own + bytes), NULL) != 0) {
        ci_debug("cannot grow the ledger lock on device %d (%s)", dev, strerror(errno));
        rc = -1;
    }
    if (limited)
        ci_ledger_fcntl(fd, F_OFD_SETLK, F_UNLCK, CI_LEDGER_GATE, 1, NULL);
    return rc;
}

int ci_ledger_reserve(int dev, uint64_t bytes, uint64_t limit, struct ci_region_device *rec)
{
    pthread_mutex_lock(&ci_ledger_lock);
    uint64_t own = atomic_load_explicit(&ci_ledger_own[dev], memory_order_relaxed);
    int rc;
    if (bytes > CI_LEDGER_SPAN || own > CI_LEDGER_SPAN - bytes)
        rc = -1;
    else if (ci_ledger_mode == CI_LEDGER_SHARED)
        rc = ci_ledger_reserve_shared(dev, bytes, limit, own);
    else if (ci_ledger_mode == CI_LEDGER_PRIVATE)
        rc = (limit != CI_REGION_UNLIMITED && (bytes > limit || own > limit - bytes)) ? -1 : 0;
    else
        rc = -1;
    if (rc == 0)
        atomic_store_explicit(&ci_ledger_own[dev], own + bytes, memory_order_relaxed);
    ci_ledger_publish_dev(dev, rec);
    pthread_mutex_unlock(&ci_ledger_lock);
    return rc;
}

void ci_ledger_release(int dev, uint64_t bytes, struct ci_region_device *rec)
{
    pthread_mutex_lock(&ci_ledger_lock);
    uint64_t own = atomic_load_explicit(&ci_ledger_own[dev], memory_order_relaxed);
    uint64_t left = own > bytes ? own - bytes : 0;
    if (ci_ledger_mode == CI_LEDGER_SHARED && left < own) {
        /* Shrinking needs no gate: a reader that sees the old length is only stricter.
         * When the descriptor is gone the lock stays as it was (stricter, too). */
        int fd = ci_region_file();
        if (fd >= 0)
            ci_ledger_fcntl(fd, F_OFD_SETLK, F_UNLCK, CI_LEDGER_USAGE(dev, ci_ledger_index) + (off_t)left,
                            (off_t)(own - left), NULL);
    }
    atomic_store_explicit(&ci_ledger_own[dev], left, memory_order_relaxed);
    ci_ledger_publish_dev(dev, rec);
    pthread_mutex_unlock(&ci_ledger_lock);
}

uint64_t ci_ledger_workload_used(int dev)
{
    uint64_t own = atomic_load_explicit(&ci_ledger_own[dev], memory_order_relaxed);
    pthread_mutex_lock(&ci_ledger_lock);
    uint64_t others = 0;
    if (ci_ledger_mode == CI_LEDGER_SHARED) {
        int fd = ci_region_file();
        others = fd < 0 ? 0 : ci_ledger_others(fd, dev, 0, CI_LEDGER_MAX);
    }
    pthread_mutex_unlock(&ci_ledger_lock);
    return ci_ledger_add(own, others);
}

uint64_t ci_ledger_own_bytes(int dev)
{
    return atomic_load_explicit(&ci_ledger_own[dev], memory_order_relaxed);
}

void ci_ledger_publish(struct ci_region_slot *slot)
{
    if (pthread_mutex_trylock(&ci_ledger_lock) != 0)
        return; /* a reservation is in progress and publishes itself */
    for (int d = 0; d < CI_MAX_DEVICES; d++)
        ci_ledger_publish_dev(d, &slot->dev[d]);
    pthread_mutex_unlock(&ci_ledger_lock);
}

void ci_ledger_lock_for_fork(void)
{
    pthread_mutex_lock(&ci_ledger_lock);
}

void ci_ledger_unlock_after_fork(void)
{
    pthread_mutex_unlock(&ci_ledger_lock);
}

void ci_ledger_after_fork_child(void)
{
    pthread_mutex_lock(&ci_ledger_lock);
    for (int d = 0; d < CI_MAX_DEVICES; d++)
        atomic_store(&ci_ledger_own[d], 0);
    ci_ledger_index = -1;
    if (ci_ledger_mode == CI_LEDGER_SHARED)
        ci_ledger_mode = CI_LEDGER_PRIVATE; /* until ci_ledger_open claims an index */
    atomic_store(&ci_ledger_broken_logged, 0);
    pthread_mutex_unlock(&ci_ledger_lock);
}
