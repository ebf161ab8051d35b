/*
 * fake_gpu.c — the fake driver's simulated GPU: the time-slicing scheduler that runs
 * every process's queue of kernel work and event markers (fake_streams.c fills them),
 * its clock model, and the utilisation samples fake NVML reports.
 *
 * Alone (default) the GPU is private to the process. With
 * FAKECUDA_SHARED_GPU=<file> every process naming the same file shares one
 * GPU (mapped state, process-shared mutex) the way contexts time-share a real
 * one: the GPU runs one process's queue at a time, for up to a slice
 * (FAKECUDA_SLICE_NS, default 1 ms) or until that queue is empty, then the
 * next process with work (round robin); kernels are never preempted. Each
 * sample names every process that had work in its period with the DEVICE's
 * utilisation — what NVML reports per process on a time-sliced H200
 * (measured; see bench/share_probe.py), i.e. no share.
 * fakecuda_own_busy_ns() (fake_streams.c) is the truth a test compares shares with.
 *
 * FAKECUDA_BOOST_PERCENT=B makes it a power-capped card: flat out it runs kernels
 * at their nominal duration, partly idle it clocks higher — B % faster after a
 * sample period at most half busy, linearly less up to none at full load (the
 * H200: 1530 MHz flat out, 1980 MHz at <= 50 %, B = 29). fakecuda_own_busy_ns()
 * keeps counting nominal durations, i.e. work at full-load speed.
 *
 * FAKECUDA_CLOCK_NOISE_PERCENT=N makes its clock noisy, as a real card's is (the H200
 * flat out wanders 1455-1530 MHz): every kernel runs up to N % longer or shorter at
 * random (uniform, a fixed seed), on top of a slow wander of N/2 % (a sine of period
 * 0.7 s); both average out, so the work a process does alone is unchanged.
 *
 * FAKECUDA_TIMED_KERNEL_PERCENT=N makes a kernel that runs right after an event marker
 * N % longer: it cannot overlap the one before it as back-to-back kernels do, so a kernel
 * timed by an event pair holds the card longer than its share of the stream's throughput
 * (the H100: timed 4096^2 matmuls averaged 220 us where the loop ran one per 206 us).
 * fakecuda_own_busy_ns() counts the nominal durations, as for the boost.
 *
 * FAKECUDA_SWITCH_NS=N makes switching the card between processes cost N ns of idle time
 * each time it starts running a queue other than the last one it ran (a context switch:
 * the H100 loses ~3 % of its time to them when a 10 % tenant runs one matmul per burst
 * beside a busy one). fakecuda_own_switches() counts the times this process's context
 * was switched in.
 *
 * Time is fake_clock.c's (real, or virtual with FAKECUDA_VIRTUAL_TIME=1; a shared
 * GPU's file holds the one clock of its processes).
 *
 * The simulation advances lazily to "now" whenever a call looks at the GPU
 * (gpu_enter), under the lock; an event completes when the GPU reaches its
 * marker in the queue, so an event pair around a kernel spans any other
 * process's slice that ran in between, as on the real GPU.
 */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_internal.h"

#define GPU_MAGIC 0x46414b4547505537ull /* "FAKEGPU7" */

static struct gpu_state private_gpu = {.lock = PTHREAD_MUTEX_INITIALIZER, .cur = -1,
                                       .resident = -1};
static struct gpu_state *gpu;
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;

static void gpu_open(void)
{
    gpu = &private_gpu;
    const char *path = getenv("FAKECUDA_SHARED_GPU");
    if (path == NULL || *path == '\0') {
        vclock_init(&private_gpu.clock, 0);
        return;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || flock(fd, LOCK_EX) != 0 || ftruncate(fd, sizeof(struct gpu_state)) != 0) {
        perror("fake_gpu: FAKECUDA_SHARED_GPU");
        abort();
    }
    void *p = mmap(NULL, sizeof(struct gpu_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        perror("fake_gpu: mmap");
        abort();
    }
    struct gpu_state *g = p;
    if (g->magic != GPU_MAGIC) {
        memset(g, 0, sizeof *g);
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        pthread_mutex_init(&g->lock, &a);
        pthread_mutexattr_destroy(&a);
        g->cur = -1;
        g->resident = -1;
        vclock_init(&g->clock, 1);
        g->magic = GPU_MAGIC;
    }
    flock(fd, LOCK_UN);
    close(fd);
    gpu = g;
}

/* The GPU, private or the FAKECUDA_SHARED_GPU file's (mapped on the first call). */
struct gpu_state *gpu_get(void)
{
    pthread_once(&gpu_once, gpu_open);
    return gpu;
}

/* Notes that `pid` had work in period slot `slot`. */
static void gpu_mark(struct gpu_state *g, unsigned slot, unsigned pid)
{
    for (unsigned i = 0; i < g->npids[slot]; i++)
        if (g->pids[slot][i] == pid)
            return;
    if (g->npids[slot] < FAKECUDA_SAMPLE_PIDS)
        g->pids[slot][g->npids[slot]++] = pid;
}

/* Adds [start, end) of `pid`'s kernel time to the utilisation periods. */
static void gpu_account(struct gpu_state *g, uint64_t start, uint64_t end, unsigned pid)
{
    for (uint64_t t = start; t < end;) {
        uint64_t idx = (t - g->period0) / g->period_ns;
        uint64_t pend = g->period0 + (idx + 1) * g->period_ns;
        uint64_t chunk = (end < pend ? end : pend) - t;
        if (idx >= g->cur_period && idx < g->cur_period + GPU_FUTURE_PERIODS) {
            g->busy[idx % GPU_FUTURE_PERIODS] += chunk;
            gpu_mark(g, (unsigned)(idx % GPU_FUTURE_PERIODS), pid);
        }
        t += chunk;
    }
}

/* The next process with queued work, round robin after `after`; -1 none. */
static int gpu_next_proc(struct gpu_state *g, int after)
{
    for (int i = 1; i <= GPU_MAX_PROCS; i++) {
        int k = (after + i + GPU_MAX_PROCS) % GPU_MAX_PROCS;
        if (g->procs[k].pid != 0 && g->procs[k].head != g->procs[k].tail)
            return k;
    }
    return -1;
}

/* How long a kernel of nominal duration `dur` runs at the clock the last period's
 * load left the card at (FAKECUDA_BOOST_PERCENT), with the clock's noise
 * (FAKECUDA_CLOCK_NOISE_PERCENT). */
static uint64_t gpu_clocked(struct gpu_state *g, uint64_t dur, uint64_t boost_percent,
                            uint64_t noise_percent)
{
    double ns = (double)dur;
    if (boost_percent != 0) {
        double idle = g->last_util <= 50 ? 1.0 : (100.0 - g->last_util) / 50.0;
        ns /= 1.0 + (double)boost_percent / 100.0 * idle;
    }
    if (noise_percent != 0) {
        g->noise = g->noise * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(g->noise >> 11) / 9007199254740992.0 * 2.0 - 1.0; /* [-1, 1) */
        double wander = 0.5 * sin(2.0 * M_PI * (double)g->sim_t / 0.7e9);
        ns *= 1.0 + (double)noise_percent / 100.0 * (u + wander);
    }
    return (uint64_t)ns;
}

/* Runs the GPU up to `now`: slices, kernels (never preempted), event markers. */
static void gpu_run(struct gpu_state *g, uint64_t now)
{
    uint64_t slice = env_u64("FAKECUDA_SLICE_NS", 1000000);
    uint64_t boost = env_u64("FAKECUDA_BOOST_PERCENT", 0);
    uint64_t noise = env_u64("FAKECUDA_CLOCK_NOISE_PERCENT", 0);
    uint64_t timed = env_u64("FAKECUDA_TIMED_KERNEL_PERCENT", 0);
    uint64_t switch_ns = env_u64("FAKECUDA_SWITCH_NS", 0);
    if (g->sim_t == 0)
        g->sim_t = now;
    while (g->sim_t < now) {
        struct gpu_proc *p = g->cur >= 0 ? &g->procs[g->cur] : NULL;
        if (p == NULL || p->head == p->tail || g->sim_t >= g->slice_end) {
            int next = gpu_next_proc(g, g->cur < 0 ? GPU_MAX_PROCS - 1 : g->cur);
            if (next < 0) {
                g->cur = -1;
                g->sim_t = now; /* idle */
                break;
            }
            if (next != g->cur || g->sim_t >= g->slice_end)
                g->slice_end = g->sim_t + slice;
            g->cur = next;
            p = &g->procs[next];
            if (next != g->resident) {
                if (g->resident >= 0)
                    p->switches++; /* the first context on the card is no switch */
                g->resident = next;
                g->sim_t += switch_ns;
            }
        }
        struct gpu_item it = p->q[p->head % GPU_QUEUE_LEN];
        p->head++;
        if (it.event >= 0) {
            g->event_ts[it.event] = g->sim_t;
            p->after_event = true;
            continue;
        }
        uint64_t ran = gpu_clocked(g, it.dur, boost, noise);
        if (p->after_event)
            ran += ran * timed / 100;
        p->after_event = false;
        gpu_account(g, g->sim_t, g->sim_t + ran, p->pid);
        g->busy_total += ran;
        g->sim_t += ran;
        p->queued_ns -= it.dur;
        p->last_end = g->sim_t;
    }
}

/* Closes every period that ended before `now`, producing one sample each. */
static void gpu_close_periods(struct gpu_state *g, uint64_t now)
{
    uint64_t idx = (now - g->period0) / g->period_ns;
    uint64_t off_us = unix_us() - now / 1000; /* realtime = monotonic + offset */
    const char *fixed = getenv("FAKENVML_UTIL");
    /* FAKENVML_DIPS=CAP,EVERY,RUN: the first RUN periods of every EVERY read at most CAP %
     * (NVML reading a loop that fills the card below full load now and then) */
    unsigned dip_cap = 100, dip_every = 0, dip_runs = 0;
    const char *dips = getenv("FAKENVML_DIPS");
    if (dips == NULL || sscanf(dips, "%u,%u,%u", &dip_cap, &dip_every, &dip_runs) != 3)
        dip_every = 0;
    while (g->cur_period < idx) {
        unsigned slot = (unsigned)(g->cur_period % GPU_FUTURE_PERIODS);
        unsigned util = (unsigned)(g->busy[slot] * 100 / g->period_ns);
        if (util > 100)
            util = 100;
        g->last_util = util;
        if (fixed != NULL && *fixed != '\0')
            util = (unsigned)atoi(fixed);
        if (dip_every > 0 && g->cur_period % dip_every < dip_runs && util > dip_cap)
            util = dip_cap;
        struct fakecuda_sample *s = &g->samples[g->samples_n % GPU_SAMPLE_RING];
        s->ts_us = (g->period0 + (g->cur_period + 1) * g->period_ns) / 1000 + off_us;
        s->util = util;
        s->npids = g->npids[slot];
        memcpy(s->pids, g->pids[slot], sizeof s->pids);
        g->busy[slot] = 0;
        g->npids[slot] = 0;
        g->samples_n++;
        g->cur_period++;
    }
}

/* Locks the GPU and brings it up to now; returns now. The caller unlocks. */
uint64_t gpu_enter(struct gpu_state *g)
{
    pthread_mutex_lock(&g->lock);
    uint64_t now = mono_ns();
    if (g->period_ns == 0) {
        g->period_ns = env_u64("FAKENVML_SAMPLE_MS", 50) * 1000000ull;
        g->period0 = now;
    }
    gpu_run(g, now);
    gpu_close_periods(g, now);
    return now;
}

/* This process's queue (a free or dead process's slot is taken). Locked. */
struct gpu_proc *gpu_own(struct gpu_state *g)
{
    unsigned pid = (unsigned)getpid();
    struct gpu_proc *spare = NULL;
    for (int i = 0; i < GPU_MAX_PROCS; i++) {
        struct gpu_proc *p = &g->procs[i];
        if (p->pid == pid)
            return p;
        bool gone = p->pid == 0 || (p->head == p->tail && kill((pid_t)p->pid, 0) != 0);
        if (spare == NULL && gone)
            spare = p;
    }
    if (spare == NULL) {
        fprintf(stderr, "fake_gpu: more than %d processes on one GPU\n", GPU_MAX_PROCS);
        abort();
    }
    memset(spare, 0, sizeof *spare);
    spare->pid = pid;
    return spare;
}

FAKE_EXPORT int fakecuda_samples_since(uint64_t last_seen_us, struct fakecuda_sample *out, int max)
{
    struct gpu_state *g = gpu_get();
    gpu_enter(g);
    /* FAKENVML_DELAY_MS: a sample is seen this long after its period ended (a real NVML's
     * samples appear on its own cadence, not when the reader looks) */
    uint64_t visible_us = unix_us() - env_u64("FAKENVML_DELAY_MS", 0) * 1000;
    int n = 0;
    uint64_t first = g->samples_n > GPU_SAMPLE_RING ? g->samples_n - GPU_SAMPLE_RING : 0;
    for (uint64_t i = first; i < g->samples_n && n < max; i++)
        if (g->samples[i % GPU_SAMPLE_RING].ts_us > last_seen_us &&
            g->samples[i % GPU_SAMPLE_RING].ts_us <= visible_us)
            out[n++] = g->samples[i % GPU_SAMPLE_RING];
    pthread_mutex_unlock(&g->lock);
    return n;
}

struct vclock *gpu_vclock(void)
{
    return &gpu_get()->clock;
}

FAKE_EXPORT int fakecuda_gpu_shared(void)
{
    return gpu_get() != &private_gpu;
}

FAKE_EXPORT uint64_t fakecuda_own_switches(void)
{
    struct gpu_state *g = gpu_get();
    gpu_enter(g);
    uint64_t n = gpu_own(g)->switches;
    pthread_mutex_unlock(&g->lock);
    return n;
}

FAKE_EXPORT uint64_t fakecuda_gpu_busy_ns(void)
{
    struct gpu_state *g = gpu_get();
    gpu_enter(g);
    uint64_t ns = g->busy_total;
    pthread_mutex_unlock(&g->lock);
    return ns;
}

void gpu_lock_for_fork(void)
{
    pthread_mutex_lock(&gpu_get()->lock);
}

void gpu_unlock_after_fork(void)
{
    pthread_mutex_unlock(&gpu_get()->lock);
}
