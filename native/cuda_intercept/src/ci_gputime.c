/*
 * ci_gputime.c — meters the GPU time of this process's kernels.
 *
 * Why: on a time-sliced GPU (no MPS) NVML's per-process utilisation reports
 * the device's utilisation for every process that has a context — measured on
 * an H200, two processes at true shares of 30 % and 48 % both read 96 % — so
 * it cannot tell a co-located workload its share. The interceptor measures it
 * itself: while a compute limit is active it times a sample of its launches
 * with a pair of CUDA events around the kernel (at most one new sample per
 * CI_GPUTIME_INTERVAL_NS), and the monitor turns
 *     sampled GPU ns per token x tokens per second of all launches
 * into the workload's share of the GPU.
 *
 * Work, not only time: a card that is power-capped at full load runs faster
 * when it is partly idle (H200: 1530 MHz flat out, 1980 MHz at <= 50 %), so a
 * tenant alone on it would get more work than its share of the time says (30 %
 * of the time did 36 % of the work alone). Each key therefore also keeps its
 * mean duration at full load, and a sample is also counted as the time it would
 * have taken at that speed (work_ns: ns x full / typical, where typical is the
 * key's moving mean now; the factor between 1 and CI_GPUTIME_MAX_SPEEDUP). A key
 * never seen at full load counts its plain time.
 *
 * Means, not minima: the card's clock wanders at full load (the H200's 1455-1530
 * MHz), and a single period's shortest sample divided by the shortest under the
 * limit moved a 90 % limit by -3.4 to +5.6 points between processes. The full-load
 * duration is the mean of the key's (clipped) samples in each control period the
 * monitor saw at full load (at least CI_MONITOR_FULL_LOAD busy with no other process
 * on it and no compute limit active; ci_gputime_set_full_load), averaged over up
 * to CI_GPUTIME_FULL_PERIODS such periods; typical is a moving mean with weight
 * 1/CI_GPUTIME_TYPICAL_WEIGHT. NVML tells that a period was at full load only after the fact, so a
 * period's mean is kept pending and taken only when the next period is seen at full
 * load too: the period in which a limit began (the card already clocking up while
 * the last window still read full) is dropped.
 *
 * Only a launch into a stream that is still busy is timed: its start event
 * then fires when the previous work ends, so the pair spans the kernel and not
 * the host's launch latency. A graph launch is timed into an idle stream too: a
 * graph is many kernels, against which the latency (microseconds) is small, and a
 * loop that replays one graph per synchronisation never has a busy stream. Graph
 * launches are few, so each is a candidate (kernels: every 16th, to spare the clock,
 * but every one in the short windows that learn the full-load speed). A stream being captured into a graph is never
 * touched. Another context's time slice falling between the two events
 * inflates a sample; each (function, grid) key keeps its shortest recent
 * duration, and a sample counts at most CI_GPUTIME_CLIP times that.
 *
 * Events are created, queried and destroyed by launching threads only (the
 * monitor never calls the driver), with the thread's stream-capture mode set
 * to relaxed around those calls so that a capture elsewhere is not disturbed.
 */
#include "ci_internal.h"
#include "ci_clock.h"
#include "ci_compute_metering.h"

#define CI_GPUTIME_INFLIGHT 8
#define CI_GPUTIME_INTERVAL_NS 2000000ull /* at most ~500 samples/s */
#define CI_GPUTIME_GATE_MASK 15u          /* the clock is read every 16th launch */
#define CI_GPUTIME_KEYS 256
#define CI_GPUTIME_CLIP 2.0
#define CI_GPUTIME_DRIFT 32 /* a key's shortest duration rises 1/32 per longer sample */
#define CI_GPUTIME_MAX_SPEEDUP 1.6   /* most a partly idle card is believed faster than full */
#define CI_GPUTIME_FULL_MIN_SAMPLES 8 /* a key's shortest is trusted from this many samples */
#define CI_GPUTIME_PERIOD_MIN_SAMPLES 4 /* a full-load period's mean needs this many */
#define CI_GPUTIME_FULL_PERIODS 16   /* the full-load mean is over the last ~this many periods */
#define CI_GPUTIME_TYPICAL_WEIGHT 16 /* typical: moving mean, 1/16 per sample */
#define CI_GPUTIME_ALONE_MIN_SAMPLES 16 /* the mix timed alone is known from this many */

enum { CI_GPUTIME_FREE, CI_GPUTIME_OWNED, CI_GPUTIME_PENDING };

struct ci_gputime_sample {
    _Atomic int state;
    int dev;
    CUevent start, end;
    uint64_t key, cost;
};

struct ci_gputime_key {
    uint64_t key;
    uint64_t cost; /* tokens a launch of it is charged */
    int dev;
    uint64_t samples;
    double shortest_ns;      /* recent shortest: clips samples inflated by other contexts */
    double typical_ns;       /* moving mean of the clipped samples */
    double full_ns;          /* mean at full load over confirmed periods; 0: never seen */
    uint32_t full_periods;   /* how many periods full_ns averages (at most FULL_PERIODS) */
    uint32_t pending_n;      /* clipped samples in the full-load period not confirmed yet ... */
    double pending_sum;      /* ... their sum ... */
    uint64_t pending_period; /* ... and that period (0: none) */
    double alone_n;          /* samples while the workload had the device alone, no limit */
};

static struct ci_gputime_sample ci_gputime_samples[CI_GPUTIME_INFLIGHT];
static struct ci_gputime_key ci_gputime_keys[CI_GPUTIME_KEYS];
static atomic_flag ci_gputime_polling = ATOMIC_FLAG_INIT;
static _Atomic int ci_gputime_enabled;
static _Atomic int ci_gputime_every; /* every launch is a candidate, not every 16th */
static _Atomic uint64_t ci_gputime_next_ns;
static _Atomic uint64_t ci_gputime_retried; /* the interval (its start) that had its retry */
static struct {
    _Atomic uint64_t period;    /* the monitor's control period, from 1 */
    _Atomic uint64_t confirmed; /* bit p % 64: period p was at full load, and so was p + 1 */
    _Atomic int full;           /* the current period is believed at full load */
    _Atomic int alone;          /* ... alone without a limit (at any load) */
} ci_gputime_load[CI_MAX_DEVICES];
static struct {
    _Atomic uint64_t ns, work_ns, cost, samples;
} ci_gputime_acc[CI_MAX_DEVICES];
/* Initial-exec TLS: the library is preloaded, and needs nothing from ld.so. */
static __thread unsigned ci_gputime_gate __attribute__((tls_model("initial-exec")));

void ci_gputime_enable(bool on, bool every_launch)
{
    atomic_store_explicit(&ci_gputime_every, every_launch ? 1 : 0, memory_order_relaxed);
    atomic_store_explicit(&ci_gputime_enabled, on ? 1 : 0, memory_order_relaxed);
}

void ci_gputime_set_load(int dev, bool alone, bool full)
{
    if (dev < 0 || dev >= CI_MAX_DEVICES)
        return;
    atomic_store_explicit(&ci_gputime_load[dev].alone, alone ? 1 : 0, memory_order_relaxed);
    uint64_t period = atomic_load_explicit(&ci_gputime_load[dev].period, memory_order_relaxed);
    uint64_t bit = 1ull << (period % 64);
    if (full && atomic_load_explicit(&ci_gputime_load[dev].full, memory_order_relaxed))
        atomic_fetch_or_explicit(&ci_gputime_load[dev].confirmed, bit, memory_order_relaxed);
    else
        atomic_fetch_and_explicit(&ci_gputime_load[dev].confirmed, ~bit, memory_order_relaxed);
    atomic_store_explicit(&ci_gputime_load[dev].full, full ? 1 : 0, memory_order_relaxed);
    atomic_store_explicit(&ci_gputime_load[dev].period, period + 1, memory_order_relaxed);
}

/* Updates `k`'s full-load duration from its pending period's mean (see the top of the
 * file), and adds the sample counted as `counted` ns to the period's mean. */
static void ci_gputime_full_load(struct ci_gputime_key *k, int dev, double counted)
{
    uint64_t period = atomic_load_explicit(&ci_gputime_load[dev].period, memory_order_relaxed);
    uint64_t confirmed = atomic_load_explicit(&ci_gputime_load[dev].confirmed, memory_order_relaxed);
    uint64_t p = k->pending_period;
    if (p != 0 && p < period) {
        /* decided: taken if its period was followed by another at full load, else dropped */
        if (period - p < 64 && (confirmed >> (p % 64) & 1) &&
            k->pending_n >= CI_GPUTIME_PERIOD_MIN_SAMPLES) {
            double mean = k->pending_sum / k->pending_n;
            if (k->full_periods < CI_GPUTIME_FULL_PERIODS)
                k->full_periods++;
            k->full_ns += (mean - k->full_ns) / k->full_periods;
            ci_debug("dev %d: key %016llx runs %.0f ns at full load (period mean %.0f ns over "
                     "%u samples, %u periods; now %.0f ns)", dev, (unsigned long long)k->key,
                     k->full_ns, mean, k->pending_n, k->full_periods, k->typical_ns);
        }
        k->pending_period = 0;
    }
    if (!atomic_load_explicit(&ci_gputime_load[dev].full, memory_order_relaxed) ||
        k->samples < CI_GPUTIME_FULL_MIN_SAMPLES)
        return;
    if (k->pending_period != period) {
        k->pending_period = period;
        k->pending_sum = 0.0;
        k->pending_n = 0;
    }
    k->pending_sum += counted;
    k->pending_n++;
}

double ci_gputime_alone_ns_per_token(int dev)
{
    if (dev < 0 || dev >= CI_MAX_DEVICES ||
        atomic_flag_test_and_set_explicit(&ci_gputime_polling, memory_order_acquire))
        return -1.0;
    double ns = 0.0, cost = 0.0, n = 0.0;
    for (int i = 0; i < CI_GPUTIME_KEYS; i++) {
        const struct ci_gputime_key *k = &ci_gputime_keys[i];
        if (k->key == 0 || k->dev != dev || k->alone_n <= 0.0)
            continue;
        ns += k->alone_n * (k->full_ns > 0.0 ? k->full_ns : k->typical_ns);
        cost += k->alone_n * (double)k->cost;
        n += k->alone_n;
    }
    atomic_flag_clear_explicit(&ci_gputime_polling, memory_order_release);
    return n >= CI_GPUTIME_ALONE_MIN_SAMPLES && cost > 0.0 ? ns / cost : -1.0;
}

void ci_gputime_read(int dev, struct ci_gputime_totals *out)
{
    out->ns = atomic_load_explicit(&ci_gputime_acc[dev].ns, memory_order_relaxed);
    out->work_ns = atomic_load_explicit(&ci_gputime_acc[dev].work_ns, memory_order_relaxed);
    out->cost = atomic_load_explicit(&ci_gputime_acc[dev].cost, memory_order_relaxed);
    out->samples = atomic_load_explicit(&ci_gputime_acc[dev].samples, memory_order_relaxed);
}

static bool ci_gputime_driver_ok(void)
{
    return ci_driver.cuEventCreate != NULL && ci_driver.cuEventRecord != NULL &&
           ci_driver.cuEventQuery != NULL && ci_driver.cuEventElapsedTime != NULL &&
           ci_driver.cuEventDestroy != NULL && ci_driver.cuStreamQuery != NULL &&
           ci_driver.cuStreamIsCapturing != NULL &&
           ci_driver.cuThreadExchangeStreamCaptureMode != NULL;
}

/* Counts one finished sample: clipped to CI_GPUTIME_CLIP x its key's shortest, and
 * as work: the time it would have taken at the key's full-load speed. */
static void ci_gputime_account(int dev, uint64_t key, uint64_t cost, double ns)
{
    struct ci_gputime_key *k = &ci_gputime_keys[(key * 0x9E3779B97F4A7C15ull) >> 56];
    double counted = ns;
    if (k->key != key || k->dev != dev || k->shortest_ns <= 0.0) {
        *k = (struct ci_gputime_key){
            .key = key, .cost = cost, .dev = dev, .shortest_ns = ns, .typical_ns = ns};
    } else {
        if (counted > CI_GPUTIME_CLIP * k->shortest_ns)
            counted = CI_GPUTIME_CLIP * k->shortest_ns;
        if (ns < k->shortest_ns)
            k->shortest_ns = ns;
        else
            k->shortest_ns += (ns < 2.0 * k->shortest_ns ? ns - k->shortest_ns : k->shortest_ns) /
                              CI_GPUTIME_DRIFT;
        k->typical_ns += (counted - k->typical_ns) / CI_GPUTIME_TYPICAL_WEIGHT;
    }
    k->samples++;
    if (atomic_load_explicit(&ci_gputime_load[dev].alone, memory_order_relaxed))
        k->alone_n += 1.0;
    ci_gputime_full_load(k, dev, counted);
    double speedup = k->full_ns > k->typical_ns ? k->full_ns / k->typical_ns : 1.0;
    if (speedup > CI_GPUTIME_MAX_SPEEDUP)
        speedup = CI_GPUTIME_MAX_SPEEDUP;
    atomic_fetch_add_explicit(&ci_gputime_acc[dev].ns, (uint64_t)counted, memory_order_relaxed);
    atomic_fetch_add_explicit(&ci_gputime_acc[dev].work_ns, (uint64_t)(counted * speedup),
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&ci_gputime_acc[dev].cost, cost, memory_order_relaxed);
    atomic_fetch_add_explicit(&ci_gputime_acc[dev].samples, 1, memory_order_relaxed);
}

/* Collects the finished samples of `dev`. One thread at a time; others skip. */
static void ci_gputime_poll(int dev)
{
    if (atomic_flag_test_and_set_explicit(&ci_gputime_polling, memory_order_acquire))
        return;
    for (int i = 0; i < CI_GPUTIME_INFLIGHT; i++) {
        struct ci_gputime_sample *s = &ci_gputime_samples[i];
        int expected = CI_GPUTIME_PENDING;
        if (!atomic_compare_exchange_strong(&s->state, &expected, CI_GPUTIME_OWNED))
            continue;
        CUresult r = s->dev == dev ? ci_driver.cuEventQuery(s->end) : CUDA_ERROR_NOT_READY;
        if (r == CUDA_ERROR_NOT_READY) {
            atomic_store(&s->state, CI_GPUTIME_PENDING);
            continue;
        }
        float ms = -1.0f;
        if (r == CUDA_SUCCESS &&
            ci_driver.cuEventElapsedTime(&ms, s->start, s->end) == CUDA_SUCCESS && ms >= 0.0f)
            ci_gputime_account(dev, s->key, s->cost, (double)ms * 1e6);
        atomic_store(&s->state, CI_GPUTIME_FREE);
    }
    atomic_flag_clear_explicit(&ci_gputime_polling, memory_order_release);
}

/* A free sample slot whose events belong to `dev` (created when missing). */
static struct ci_gputime_sample *ci_gputime_claim(int dev)
{
    for (int i = 0; i < CI_GPUTIME_INFLIGHT; i++) {
        struct ci_gputime_sample *s = &ci_gputime_samples[i];
        int expected = CI_GPUTIME_FREE;
        if (!atomic_compare_exchange_strong(&s->state, &expected, CI_GPUTIME_OWNED))
            continue;
        if (s->start != NULL && s->dev != dev) {
            ci_driver.cuEventDestroy(s->start);
            ci_driver.cuEventDestroy(s->end);
            s->start = s->end = NULL;
        }
        if (s->start == NULL) {
            if (ci_driver.cuEventCreate(&s->start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
                s->start = NULL;
                atomic_store(&s->state, CI_GPUTIME_FREE);
                return NULL;
            }
            if (ci_driver.cuEventCreate(&s->end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
                ci_driver.cuEventDestroy(s->start);
                s->start = s->end = NULL;
                atomic_store(&s->state, CI_GPUTIME_FREE);
                return NULL;
            }
        }
        s->dev = dev;
        return s;
    }
    return NULL;
}

bool ci_gputime_begin(struct ci_gputime_probe *p, int dev, CUstream stream, void *real,
                      ci_hook_id ptsz_id, const void *fn, uint64_t cost, bool graph)
{
    if (CI_LIKELY(!atomic_load_explicit(&ci_gputime_enabled, memory_order_relaxed)) ||
        (!graph && (++ci_gputime_gate & CI_GPUTIME_GATE_MASK) != 0 &&
         !atomic_load_explicit(&ci_gputime_every, memory_order_relaxed)) ||
        dev < 0 || dev >= CI_MAX_DEVICES)
        return false;
    uint64_t now = ci_now_ns();
    uint64_t next = atomic_load_explicit(&ci_gputime_next_ns, memory_order_relaxed);
    if (now < next ||
        !atomic_compare_exchange_strong(&ci_gputime_next_ns, &next, now + CI_GPUTIME_INTERVAL_NS) ||
        !ci_gputime_driver_ok())
        return false;
    if (stream == NULL && real == ci_lookup_real(ptsz_id))
        stream = CU_STREAM_PER_THREAD; /* a _ptsz launch: 0 is the thread's default stream */
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (ci_driver.cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS)
        return false;
    ci_gputime_poll(dev);
    struct ci_gputime_sample *s = NULL;
    CUstreamCaptureStatus capture = -1;
    if (ci_driver.cuStreamIsCapturing(stream, &capture) == CUDA_SUCCESS &&
        capture == CU_STREAM_CAPTURE_STATUS_NONE &&
        (graph || ci_driver.cuStreamQuery(stream) == CUDA_ERROR_NOT_READY))
        s = ci_gputime_claim(dev);
    if (s != NULL && ci_driver.cuEventRecord(s->start, stream) != CUDA_SUCCESS) {
        atomic_store(&s->state, CI_GPUTIME_FREE);
        s = NULL;
    }
    ci_driver.cuThreadExchangeStreamCaptureMode(&mode);
    if (s == NULL) {
        /* Not timed (an idle stream, a capture, no free slot): the next launch may be, once
         * per interval. A loop that launches after each host gap would otherwise spend every
         * interval on the first launch of a burst, always into an idle stream, and never be
         * timed; checking every launch instead slowed a launch-bound loop (~3 driver calls
         * per launch) in the windows that learn its pace. */
        uint64_t mine = now + CI_GPUTIME_INTERVAL_NS;
        uint64_t retried = atomic_load_explicit(&ci_gputime_retried, memory_order_relaxed);
        if (retried != next && atomic_compare_exchange_strong(&ci_gputime_retried, &retried, next))
            atomic_compare_exchange_strong(&ci_gputime_next_ns, &mine, next);
        return false;
    }
    s->key = (uint64_t)(uintptr_t)fn ^ (cost * 0xC2B2AE3D27D4EB4Full);
    s->cost = cost;
    p->sample = s;
    p->stream = stream;
    return true;
}

void ci_gputime_end(struct ci_gputime_probe *p, CUresult launched)
{
    struct ci_gputime_sample *s = p->sample;
    int next = CI_GPUTIME_FREE;
    if (launched == CUDA_SUCCESS) {
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        if (ci_driver.cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS) {
            if (ci_driver.cuEventRecord(s->end, p->stream) == CUDA_SUCCESS)
                next = CI_GPUTIME_PENDING;
            ci_driver.cuThreadExchangeStreamCaptureMode(&mode);
        }
    }
    atomic_store(&s->state, next);
}

void ci_gputime_after_fork_child(void)
{
    /* The parent's events and contexts are not usable here: forget them. */
    for (int i = 0; i < CI_GPUTIME_INFLIGHT; i++) {
        struct ci_gputime_sample *s = &ci_gputime_samples[i];
        s->start = s->end = NULL;
        atomic_store(&s->state, CI_GPUTIME_FREE);
    }
    atomic_flag_clear(&ci_gputime_polling);
    for (int d = 0; d < CI_MAX_DEVICES; d++) {
        atomic_store(&ci_gputime_acc[d].ns, 0);
        atomic_store(&ci_gputime_acc[d].work_ns, 0);
        atomic_store(&ci_gputime_acc[d].cost, 0);
        atomic_store(&ci_gputime_acc[d].samples, 0);
    }
}
