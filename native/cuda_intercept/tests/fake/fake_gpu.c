/*
 * fake_gpu.c — the fake driver's simulated GPU: per-process queues of kernel
 * work and event markers, executed by a time-slicing scheduler, the
 * utilisation samples fake NVML reports, and the stream / event entry points.
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
 * fakecuda_own_busy_ns() is the truth a test compares shares with.
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
 * The simulation advances lazily to "now" whenever a call looks at the GPU,
 * under the lock; an event completes when the GPU reaches its marker in the
 * queue, so an event pair around a kernel spans any other process's slice
 * that ran in between, as on the real GPU.
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

#define SAMPLE_RING 4096
#define FUTURE_PERIODS 64
#define GPU_MAGIC 0x46414b4547505537ull /* "FAKEGPU7" */
#define QUEUE_MAX_NS 2000000ull         /* a process's launches block beyond this backlog */
#define MAX_PROCS 8
#define QUEUE_LEN 512
#define MAX_EVENTS 128
#define EVENT_PENDING UINT64_MAX

struct item {
    uint64_t dur; /* kernel ns; 0 with event >= 0: an event marker */
    int event;
};

struct proc {
    unsigned pid; /* 0 = free slot */
    unsigned head, tail;
    uint64_t queued_ns; /* kernel time waiting in the queue */
    uint64_t last_end;  /* when its last kernel ends */
    bool after_event;   /* the last item it ran was an event marker */
    uint64_t switches;  /* times the card switched to this process (FAKECUDA_SWITCH_NS) */
    struct item q[QUEUE_LEN];
};

struct gpu_state {
    uint64_t magic;
    pthread_mutex_t lock;
    struct vclock clock;
    uint64_t sim_t;     /* the GPU has run everything before this time */
    int cur;            /* process holding the GPU, -1 none */
    int resident;       /* the process whose context the card ran last, -1 none */
    uint64_t slice_end; /* end of its slice */
    struct proc procs[MAX_PROCS];
    uint64_t event_ts[MAX_EVENTS];
    unsigned event_used[MAX_EVENTS];
    uint64_t period_ns, period0; /* period index base time */
    uint64_t cur_period;         /* index of the open period */
    unsigned last_util;          /* busy percent of the last closed period */
    uint64_t busy_total;         /* ns spent running kernels, ever */
    uint64_t noise;              /* FAKECUDA_CLOCK_NOISE_PERCENT's random state */
    uint64_t busy[FUTURE_PERIODS];
    unsigned pids[FUTURE_PERIODS][FAKECUDA_SAMPLE_PIDS];
    unsigned npids[FUTURE_PERIODS];
    struct fakecuda_sample samples[SAMPLE_RING];
    uint64_t samples_n;
};

static struct gpu_state private_gpu = {.lock = PTHREAD_MUTEX_INITIALIZER, .cur = -1,
                                       .resident = -1};
static struct gpu_state *gpu;
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;
static uint64_t own_busy_ns; /* kernel time this process submitted */

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

static struct gpu_state *gpu_get(void)
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
        if (idx >= g->cur_period && idx < g->cur_period + FUTURE_PERIODS) {
            g->busy[idx % FUTURE_PERIODS] += chunk;
            gpu_mark(g, (unsigned)(idx % FUTURE_PERIODS), pid);
        }
        t += chunk;
    }
}

/* The next process with queued work, round robin after `after`; -1 none. */
static int gpu_next_proc(struct gpu_state *g, int after)
{
    for (int i = 1; i <= MAX_PROCS; i++) {
        int k = (after + i + MAX_PROCS) % MAX_PROCS;
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
        struct proc *p = g->cur >= 0 ? &g->procs[g->cur] : NULL;
        if (p == NULL || p->head == p->tail || g->sim_t >= g->slice_end) {
            int next = gpu_next_proc(g, g->cur < 0 ? MAX_PROCS - 1 : g->cur);
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
        struct item it = p->q[p->head % QUEUE_LEN];
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
    while (g->cur_period < idx) {
        unsigned slot = (unsigned)(g->cur_period % FUTURE_PERIODS);
        unsigned util = (unsigned)(g->busy[slot] * 100 / g->period_ns);
        if (util > 100)
            util = 100;
        g->last_util = util;
        if (fixed != NULL && *fixed != '\0')
            util = (unsigned)atoi(fixed);
        struct fakecuda_sample *s = &g->samples[g->samples_n % SAMPLE_RING];
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

/* Locks the GPU and brings it up to now; returns now. */
static uint64_t gpu_enter(struct gpu_state *g)
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
static struct proc *gpu_own(struct gpu_state *g)
{
    unsigned pid = (unsigned)getpid();
    struct proc *spare = NULL;
    for (int i = 0; i < MAX_PROCS; i++) {
        struct proc *p = &g->procs[i];
        if (p->pid == pid)
            return p;
        bool gone = p->pid == 0 || (p->head == p->tail && kill((pid_t)p->pid, 0) != 0);
        if (spare == NULL && gone)
            spare = p;
    }
    if (spare == NULL) {
        fprintf(stderr, "fake_gpu: more than %d processes on one GPU\n", MAX_PROCS);
        abort();
    }
    memset(spare, 0, sizeof *spare);
    spare->pid = pid;
    return spare;
}

/* Queues an item for this process, waiting while its backlog is full. */
static void gpu_queue(struct item it)
{
    struct gpu_state *g = gpu_get();
    for (;;) {
        uint64_t now = gpu_enter(g);
        struct proc *p = gpu_own(g);
        uint64_t backlog = p->queued_ns + (p->last_end > now ? p->last_end - now : 0);
        if (p->tail - p->head < QUEUE_LEN && (it.event >= 0 || backlog <= QUEUE_MAX_NS)) {
            p->q[p->tail % QUEUE_LEN] = it;
            p->tail++;
            p->queued_ns += it.dur;
            own_busy_ns += it.dur;
            pthread_mutex_unlock(&g->lock);
            return;
        }
        pthread_mutex_unlock(&g->lock);
        sleep_ns(backlog > QUEUE_MAX_NS ? backlog - QUEUE_MAX_NS : 50000);
    }
}

void gpu_submit(uint64_t dur)
{
    gpu_queue((struct item){.dur = dur, .event = -1});
}

void gpu_launch(uint64_t blocks)
{
    if (fake_bench())
        return;
    uint64_t sms = env_u64("FAKECUDA_SMS", 132);
    uint64_t waves = (blocks + sms - 1) / (sms ? sms : 1);
    gpu_submit((waves ? waves : 1) * env_u64("FAKECUDA_WAVE_NS", 20000));
}

FAKE_EXPORT int fakecuda_samples_since(uint64_t last_seen_us, struct fakecuda_sample *out, int max)
{
    struct gpu_state *g = gpu_get();
    gpu_enter(g);
    int n = 0;
    uint64_t first = g->samples_n > SAMPLE_RING ? g->samples_n - SAMPLE_RING : 0;
    for (uint64_t i = first; i < g->samples_n && n < max; i++)
        if (g->samples[i % SAMPLE_RING].ts_us > last_seen_us)
            out[n++] = g->samples[i % SAMPLE_RING];
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

FAKE_EXPORT uint64_t fakecuda_own_busy_ns(void)
{
    struct gpu_state *g = gpu_get();
    pthread_mutex_lock(&g->lock);
    uint64_t ns = own_busy_ns;
    pthread_mutex_unlock(&g->lock);
    return ns;
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

/* ---- streams, events, capture ------------------------------------------- */

struct CUevent_st {
    int id; /* slot in the GPU's event table */
};

static __thread CUstreamCaptureMode capture_mode;

F(cuEventCreate, (CUevent *e, unsigned int flags))
{
    (void)flags;
    count_call("cuEventCreate");
    struct gpu_state *g = gpu_get();
    pthread_mutex_lock(&g->lock);
    int id = 0;
    while (id < MAX_EVENTS && g->event_used[id])
        id++;
    if (id < MAX_EVENTS) {
        g->event_used[id] = 1;
        g->event_ts[id] = 0;
    }
    pthread_mutex_unlock(&g->lock);
    if (id == MAX_EVENTS || (*e = malloc(sizeof **e)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    (*e)->id = id;
    return CUDA_SUCCESS;
}
F(cuEventDestroy_v2, (CUevent e))
{
    count_call("cuEventDestroy_v2");
    struct gpu_state *g = gpu_get();
    pthread_mutex_lock(&g->lock);
    g->event_used[e->id] = 0;
    pthread_mutex_unlock(&g->lock);
    free(e);
    return CUDA_SUCCESS;
}
static CUresult event_record(CUevent e)
{
    if (e == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct gpu_state *g = gpu_get();
    pthread_mutex_lock(&g->lock);
    g->event_ts[e->id] = EVENT_PENDING;
    pthread_mutex_unlock(&g->lock);
    gpu_queue((struct item){.dur = 0, .event = e->id});
    return CUDA_SUCCESS;
}
F(cuEventRecord, (CUevent e, CUstream s)) { (void)s; count_call("cuEventRecord"); return event_record(e); }
F(cuEventRecord_ptsz, (CUevent e, CUstream s)) { (void)s; count_call("cuEventRecord_ptsz"); return event_record(e); }
/* When the GPU reached the event (EVENT_PENDING: not yet, 0: never recorded). */
static uint64_t event_time(CUevent e)
{
    struct gpu_state *g = gpu_get();
    uint64_t now = gpu_enter(g);
    uint64_t ts = g->event_ts[e->id];
    pthread_mutex_unlock(&g->lock);
    return ts > now ? EVENT_PENDING : ts;
}
F(cuEventQuery, (CUevent e))
{
    count_call("cuEventQuery");
    return event_time(e) == EVENT_PENDING ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}
static CUresult event_elapsed(float *ms, CUevent a, CUevent b)
{
    uint64_t ta = event_time(a), tb = event_time(b);
    if (ta == 0 || tb == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (ta == EVENT_PENDING || tb == EVENT_PENDING)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)(((double)tb - (double)ta) / 1e6);
    return CUDA_SUCCESS;
}
F(cuEventElapsedTime, (float *ms, CUevent a, CUevent b)) { count_call("cuEventElapsedTime"); return event_elapsed(ms, a, b); }
F(cuEventElapsedTime_v2, (float *ms, CUevent a, CUevent b)) { count_call("cuEventElapsedTime_v2"); return event_elapsed(ms, a, b); }
/* Busy while this process has queued work or a kernel still running. */
static CUresult stream_query(void)
{
    struct gpu_state *g = gpu_get();
    uint64_t now = gpu_enter(g);
    const struct proc *p = gpu_own(g);
    bool busy = p->head != p->tail || p->last_end > now;
    pthread_mutex_unlock(&g->lock);
    return busy ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}
F(cuStreamQuery, (CUstream s)) { (void)s; count_call("cuStreamQuery"); return stream_query(); }
F(cuStreamQuery_ptsz, (CUstream s)) { (void)s; count_call("cuStreamQuery_ptsz"); return stream_query(); }
/* FAKECUDA_CAPTURING=1: every stream reports an active capture; otherwise the streams
 * that cuStreamBeginCapture put in capture mode (fake_graph.c). */
static CUresult stream_capturing(CUstream s, CUstreamCaptureStatus *st)
{
    *st = env_u64("FAKECUDA_CAPTURING", 0) || fake_capturing(s) ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                                                 : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
F(cuStreamIsCapturing, (CUstream s, CUstreamCaptureStatus *st)) { count_call("cuStreamIsCapturing"); return stream_capturing(s, st); }
F(cuStreamIsCapturing_ptsz, (CUstream s, CUstreamCaptureStatus *st)) { count_call("cuStreamIsCapturing_ptsz"); return stream_capturing(s == NULL ? CU_STREAM_PER_THREAD : s, st); }
F(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode *mode))
{
    count_call("cuThreadExchangeStreamCaptureMode");
    CUstreamCaptureMode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

const struct fake_entry fake_gpu_entries[] = {
    FAKE_ENTRY(cuEventCreate, cuEventCreate, 2000, 0),
    FAKE_ENTRY(cuEventDestroy_v2, cuEventDestroy, 4000, 0),
    FAKE_ENTRY(cuEventRecord, cuEventRecord, 2000, 0),
    FAKE_ENTRY(cuEventRecord_ptsz, cuEventRecord, 7000, 1),
    FAKE_ENTRY(cuEventQuery, cuEventQuery, 2000, 0),
    FAKE_ENTRY(cuEventElapsedTime, cuEventElapsedTime, 2000, 0),
    FAKE_ENTRY(cuEventElapsedTime_v2, cuEventElapsedTime, 12080, 0),
    FAKE_ENTRY(cuStreamQuery, cuStreamQuery, 2000, 0),
    FAKE_ENTRY(cuStreamQuery_ptsz, cuStreamQuery, 7000, 1),
    FAKE_ENTRY(cuStreamIsCapturing, cuStreamIsCapturing, 10000, 0),
    FAKE_ENTRY(cuStreamIsCapturing_ptsz, cuStreamIsCapturing, 10000, 1),
    FAKE_ENTRY(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, 10010, 0),
    FAKE_ENTRIES_END,
};
