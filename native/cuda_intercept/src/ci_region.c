/*
 * ci_region.c — the workload's shared-memory region (layout: ci_region_layout.h).
 *
 * One file per workload, "$ALNAIR_WORKSPACE/cuda.region", mapped MAP_SHARED by
 * every process of the workload. Creation and layout checks happen under an
 * flock of that file (only at attach, never on a hot path). Accounting changes
 * happen under a robust process-shared mutex in the header: a process that dies
 * while holding it leaves EOWNERDEAD, the next locker reaps the dead process's
 * slot and marks the mutex consistent. The critical sections are short, touch
 * only the region, and never call the driver.
 *
 * The region is the workload's published state, not its ledger: every process of the
 * workload must write it, so a tenant can write anything into it. Nothing read from it can
 * loosen a limit: the header's limits only ever tighten a process's own, the memory that
 * processes hold is accounted by ci_ledger.c (kernel record locks on this file), and each
 * process rewrites its own slot every monitor period (ci_region_heal_slot, ci_ledger_publish).
 *
 * Local mode: without a workspace (or when the file cannot be used) the region is an
 * anonymous private mapping and limits hold per process. Container mode: the device
 * plugin created the (empty) file in a workspace mounted read-only with the file itself
 * bind-mounted read-write, so it cannot be deleted or replaced; the interceptor never
 * creates it, and when it cannot use it the process's memory limit becomes 0.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ci_internal.h"
#include "ci_clock.h"

_Static_assert(sizeof(pthread_mutex_t) <= CI_REGION_LOCK_BYTES, "mutex fits the header");

static struct ci_region *ci_region_map;
static bool ci_region_shared;
/* The shared file, kept open for the ledger's locks, and what it must still refer to. */
static int ci_region_fd = -1;
static dev_t ci_region_dev;
static ino_t ci_region_ino;
static char ci_region_path[1100];
/* This process's identity as written into its slot (ci_region_heal_slot restores it). */
static uint64_t ci_region_own_start;
static _Atomic int ci_region_slot_lost;    /* another live process holds our slot (logged) */
static _Atomic int ci_region_slot_retired; /* detached: never healed again */
/* This process's own limits (from ci_region_open), tightened by the header's. */
static uint64_t ci_region_own_memory;
static uint32_t ci_region_own_compute;
static _Atomic int ci_region_lock_broken;

static pthread_mutex_t *ci_region_mutex(void)
{
    return (pthread_mutex_t *)(void *)ci_region_map->header.lock;
}

/* Fills a fresh header (the mapping is zeroed) and initialises the mutex. */
static void ci_region_init_header(struct ci_region *r, const struct ci_limits *l)
{
    memset(r, 0, sizeof *r);
    struct ci_region_header *h = &r->header;
    h->layout_version = CI_REGION_LAYOUT_VERSION;
    h->header_bytes = sizeof(struct ci_region_header);
    h->slot_bytes = sizeof(struct ci_region_slot);
    h->max_slots = CI_REGION_MAX_SLOTS;
    h->max_devices = CI_REGION_MAX_DEVICES;
    h->compute_percent = l->compute_percent;
    h->memory_limit_bytes = l->memory_bytes;
    h->created_unix_ns = ci_unix_ns();
    h->limits_source = l->source;
    snprintf(h->workload_id, sizeof h->workload_id, "%s", l->workload_id);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    pthread_mutex_init((pthread_mutex_t *)(void *)h->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    __atomic_store_n(&h->magic, CI_REGION_MAGIC, __ATOMIC_RELEASE);
}

/* True when the mapped file already holds a region of our layout. */
static bool ci_region_valid(const struct ci_region *r)
{
    const struct ci_region_header *h = &r->header;
    return __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == CI_REGION_MAGIC &&
           h->layout_version == CI_REGION_LAYOUT_VERSION &&
           h->header_bytes == sizeof(struct ci_region_header) &&
           h->slot_bytes == sizeof(struct ci_region_slot) &&
           h->max_slots == CI_REGION_MAX_SLOTS && h->max_devices == CI_REGION_MAX_DEVICES;
}

/* Maps the workspace file, creating it only when `create`; returns NULL (with one
 * message, `consequence` saying what follows) on any failure. Keeps the descriptor. */
static struct ci_region *ci_region_map_file(const struct ci_limits *l, bool create,
                                            const char *consequence)
{
    char *path = ci_region_path;
    snprintf(path, sizeof ci_region_path, "%s/%s", l->workspace, CI_REGION_FILE_NAME);
    int fd = open(path, O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0660);
    if (fd < 0) {
        ci_log("cannot open region %s (%s); %s", path, strerror(errno), consequence);
        return NULL;
    }
    while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    struct ci_region *r = NULL;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ci_log("region %s is not a regular file; %s", path, consequence);
        goto out;
    }
    bool fresh = (size_t)st.st_size < sizeof(struct ci_region);
    if (fresh && ftruncate(fd, sizeof(struct ci_region)) != 0) {
        ci_log("cannot size region %s (%s); %s", path, strerror(errno), consequence);
        goto out;
    }
    void *p = mmap(NULL, sizeof(struct ci_region), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        ci_log("cannot map region %s (%s); %s", path, strerror(errno), consequence);
        goto out;
    }
    r = p;
    if (fresh || !ci_region_valid(r)) {
        if (!fresh)
            ci_log("region %s has another layout (version %u); re-initialising it", path,
                   r->header.layout_version);
        ci_region_init_header(r, l);
    }
    ci_region_dev = st.st_dev;
    ci_region_ino = st.st_ino;
out:
    flock(fd, LOCK_UN);
    if (r == NULL)
        close(fd);
    else
        ci_region_fd = fd;
    return r;
}

void ci_region_open(const struct ci_limits *limits)
{
    ci_region_own_memory = limits->memory_bytes;
    ci_region_own_compute = limits->compute_percent;
    bool container = limits->mode == CI_LIMITS_MODE_CONTAINER;
    const char *consequence = container ? "container mode: refusing all GPU memory allocations"
                                        : "limits apply per process";
    struct ci_region *r = NULL;
    if (limits->workspace[0] != '\0')
        r = ci_region_map_file(limits, !container, consequence);
    ci_region_shared = r != NULL;
    if (r == NULL && container)
        ci_region_own_memory = 0;
    if (r == NULL) {
        void *p = mmap(NULL, sizeof(struct ci_region), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            /* Last resort: a static region, so that no pointer is ever NULL. */
            static struct ci_region fallback;
            p = &fallback;
        }
        r = p;
        ci_region_init_header(r, limits);
    }
    ci_region_map = r;
}

bool ci_region_is_shared(void)
{
    return ci_region_shared;
}

int ci_region_file(void)
{
    struct stat st;
    if (ci_region_fd < 0 || fstat(ci_region_fd, &st) != 0 || st.st_dev != ci_region_dev ||
        st.st_ino != ci_region_ino)
        return -1;
    return ci_region_fd;
}

void ci_region_after_fork_child(void)
{
    if (!ci_region_shared)
        return;
    int inherited = ci_region_fd;
    ci_region_fd = -1;
    int fd = open(ci_region_path, O_RDWR | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == ci_region_dev &&
        st.st_ino == ci_region_ino &&
        mmap(ci_region_map, sizeof(struct ci_region), PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_FIXED, fd, 0) != MAP_FAILED) {
        ci_region_fd = fd;
    } else if (fd >= 0) {
        close(fd);
    }
    if (inherited >= 0)
        close(inherited);
    atomic_store(&ci_region_slot_lost, 0);
    atomic_store(&ci_region_slot_retired, 0);
}

struct ci_region *ci_region_get(void)
{
    return ci_region_map;
}

uint64_t ci_region_memory_limit(void)
{
    uint64_t own = ci_region_own_memory;
    uint64_t shared = __atomic_load_n(&ci_region_map->header.memory_limit_bytes, __ATOMIC_RELAXED);
    return own < shared ? own : shared;
}

uint32_t ci_region_compute_percent(void)
{
    uint32_t own = ci_region_own_compute;
    uint32_t shared = __atomic_load_n(&ci_region_map->header.compute_percent, __ATOMIC_RELAXED);
    if (shared < 1 || shared > 100)
        shared = 1;
    return own < shared ? own : shared;
}

uint64_t ci_region_proc_start_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* Field 2 (comm) may contain spaces and ')': parse after the last ')'. */
    char *p = strrchr(buf, ')');
    if (p == NULL)
        return 0;
    p++;
    /* After ')' come fields 3..; the start time is field 22. */
    for (int field = 3; field < 22 && p != NULL; field++) {
        p = strchr(p + 1, ' ');
    }
    if (p == NULL)
        return 0;
    return strtoull(p + 1, NULL, 10);
}

/* True when the process recorded in `s` no longer exists (or its pid was reused). */
static bool ci_region_slot_dead(const struct ci_region_slot *s)
{
    if (s->pid <= 0)
        return true;
    uint64_t start = ci_region_proc_start_ticks(s->pid);
    return start == 0 || (s->start_time_ticks != 0 && start != s->start_time_ticks);
}

/* Retires a slot: its memory was freed by the driver when the process ended;
 * the final counters stay readable until the slot is reused. */
static void ci_region_clear_slot(struct ci_region_slot *s)
{
    __atomic_store_n(&s->state, CI_SLOT_EXITED, __ATOMIC_RELEASE);
    for (int d = 0; d < CI_REGION_MAX_DEVICES; d++)
        __atomic_store_n(&s->dev[d].memory_used_bytes, 0, __ATOMIC_RELAXED);
}

int ci_region_reap_locked(void)
{
    if (!ci_region_shared)
        return 0;
    int reaped = 0;
    pid_t self = getpid();
    for (int i = 0; i < CI_REGION_MAX_SLOTS; i++) {
        struct ci_region_slot *s = &ci_region_map->slots[i];
        if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != CI_SLOT_ACTIVE || s->pid == self)
            continue;
        if (ci_region_slot_dead(s)) {
            ci_debug("reaping slot %d of dead pid %d", i, s->pid);
            ci_region_clear_slot(s);
            reaped++;
        }
    }
    if (reaped)
        __atomic_add_fetch(&ci_region_map->header.generation, 1, __ATOMIC_RELAXED);
    return reaped;
}

int ci_region_lock(void)
{
    if (atomic_load_explicit(&ci_region_lock_broken, memory_order_relaxed))
        return -1;
    int rc = pthread_mutex_lock(ci_region_mutex());
    if (rc == 0)
        return 0;
    if (rc == EOWNERDEAD) {
        /* The holder died inside a critical section. Every critical section
         * leaves the region consistent after each single store, so the only
         * repair is to drop the dead process's slot. */
        ci_log("region lock holder died; recovering");
        ci_region_reap_locked();
        pthread_mutex_consistent(ci_region_mutex());
        return 0;
    }
    if (!atomic_exchange(&ci_region_lock_broken, 1))
        ci_log("region lock unusable (%s); continuing without cross-process locking",
               strerror(rc));
    return -1;
}

void ci_region_unlock(void)
{
    pthread_mutex_unlock(ci_region_mutex());
}

/* Finds a never-used slot, else the oldest kind of reusable one (exited), or -1. Lock held. */
static int ci_region_find_free_locked(void)
{
    for (int i = 0; i < CI_REGION_MAX_SLOTS; i++)
        if (__atomic_load_n(&ci_region_map->slots[i].state, __ATOMIC_ACQUIRE) == CI_SLOT_FREE)
            return i;
    for (int i = 0; i < CI_REGION_MAX_SLOTS; i++)
        if (__atomic_load_n(&ci_region_map->slots[i].state, __ATOMIC_ACQUIRE) == CI_SLOT_EXITED)
            return i;
    return -1;
}

int ci_region_attach(void)
{
    pid_t self = getpid();
    uint64_t start = ci_region_proc_start_ticks(self);
    int locked = ci_region_lock();
    int idx = ci_region_find_free_locked();
    if (idx < 0 && ci_region_reap_locked() > 0)
        idx = ci_region_find_free_locked();
    if (idx >= 0) {
        struct ci_region_slot *s = &ci_region_map->slots[idx];
        memset(s, 0, sizeof *s);
        s->pid = (int32_t)self;
        s->start_time_ticks = start;
        ci_region_own_start = start;
        s->updated_unix_ns = ci_unix_ns();
        for (int d = 0; d < CI_REGION_MAX_DEVICES; d++)
            s->dev[d].sm_util_percent = CI_REGION_UNKNOWN_U32;
        __atomic_store_n(&s->state, CI_SLOT_ACTIVE, __ATOMIC_RELEASE);
        __atomic_add_fetch(&ci_region_map->header.generation, 1, __ATOMIC_RELAXED);
    }
    if (locked == 0)
        ci_region_unlock();
    if (idx < 0)
        ci_log("region full (%d processes); this process is not accounted",
               CI_REGION_MAX_SLOTS);
    return idx;
}

void ci_region_detach(int slot)
{
    if (slot < 0 || slot >= CI_REGION_MAX_SLOTS || ci_region_map == NULL)
        return;
    struct ci_region_slot *s = &ci_region_map->slots[slot];
    atomic_store(&ci_region_slot_retired, 1);
    int locked = ci_region_lock();
    if (s->pid == (int32_t)getpid()) {
        ci_region_clear_slot(s);
        __atomic_add_fetch(&ci_region_map->header.generation, 1, __ATOMIC_RELAXED);
    }
    if (locked == 0)
        ci_region_unlock();
}

int ci_region_heal_slot(int slot)
{
    if (slot < 0 || slot >= CI_REGION_MAX_SLOTS || atomic_load(&ci_region_slot_retired))
        return -1;
    if (!ci_region_shared)
        return 0;
    struct ci_region_slot *s = &ci_region_map->slots[slot];
    int32_t self = (int32_t)getpid();
    int32_t pid = __atomic_load_n(&s->pid, __ATOMIC_RELAXED);
    bool active = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == CI_SLOT_ACTIVE;
    if (active && pid == self &&
        __atomic_load_n(&s->start_time_ticks, __ATOMIC_RELAXED) == ci_region_own_start)
        return 0;
    if (active && pid != self && pid > 0 && !ci_region_slot_dead(s)) {
        /* Not taken back by force: no lock is held (the monitor never takes the region
         * lock), and the other process's counters are as good as ours. */
        if (!atomic_exchange(&ci_region_slot_lost, 1))
            ci_log("region slot %d now belongs to pid %d; this process publishes no counters "
                   "until it is free again (its memory stays accounted by the ledger)",
                   slot, (int)pid);
        return -1;
    }
    atomic_store(&ci_region_slot_lost, 0);
    ci_debug("region slot %d was overwritten; restoring it", slot);
    __atomic_store_n(&s->pid, self, __ATOMIC_RELAXED);
    __atomic_store_n(&s->start_time_ticks, ci_region_own_start, __ATOMIC_RELAXED);
    __atomic_store_n(&s->state, CI_SLOT_ACTIVE, __ATOMIC_RELEASE);
    return 0;
}
