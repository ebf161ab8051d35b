/*
 * ci_monitor.c — the per-process monitor thread.
 *
 * Every CI_MONITOR_TICK_NS (10 ms) it copies this process's counters into its
 * region slot (under the slot's seqlock; the slot's identity and memory in use are
 * rewritten too, since anything of the workload can overwrite them) and records (time, tokens spent,
 * time throttled) per device. Every CI_MONITOR_CONTROL_TICKS ticks it asks
 * NVML for the workload's new utilisation samples and, for a compute limit
 * below 100 %, feeds the controller with the utilisation and the tokens this
 * process spent over exactly the window those samples cover.
 *
 * A process whose launches wait for tokens while NVML's new samples name other
 * processes but not it is starved (0 %): the controller opens its bucket.
 *
 * The controller is fed the interceptor's own GPU-time measurement (ci_gputime.c:
 * tokens/s the workload's processes spent, ci_peers.c, x this process's sampled GPU ns
 * per token) whenever it has enough samples, alone or co-located: on a time-sliced GPU
 * NVML gives every process the device's utilisation, not its share, and alone its figure under-counts bursty work. NVML
 * is the fallback (too few samples yet: mostly launches into an idle stream), and
 * the region says which one fed it (sm_util_source).
 *
 * The GPU time is counted as work: at each kernel's speed when the workload last had
 * the device to itself at full load (NVML's device utilisation >= CI_MONITOR_FULL_LOAD,
 * no other process in its samples; ci_gputime.c), so that a limit is a share of what
 * the card does for the workload flat out, also where a partly idle, power-capped card
 * clocks higher. To learn that speed while no limit is active, launches are sampled
 * for CI_MONITOR_REFERENCE_PERIODS control periods out of every
 * CI_MONITOR_REFERENCE_EVERY while the workload has the device alone (at any load).
 *
 * The samples' time is worth less than it says (a kernel timed between events holds the
 * card longer than its share of back-to-back throughput; H100: every limit held ~8 % low).
 * While the workload runs alone without a limit, each window between two such NVML
 * verdicts tells what its sampled time is worth in the card's time (ci_flatout.c), and the
 * measurement is scaled by that, so that the workload flat out reads 100 %.
 *
 * A workload that never filled the card alone (a launch-bound loop of small kernels, host
 * work between launches: never CI_MONITOR_FULL_LOAD busy while it ran alone without a
 * limit) does flat out what its own pace allows, not what the card could: a time limit
 * above the share of the time it uses would not bind it at all (the H200: a loop at
 * 20-28 % busy got 85-87 % of its work under 50 and 30 % limits). Its pace then is the
 * 100 % mark: the tokens per second it spent alone without a limit (ci_pace.c: a moving
 * mean over the windows it launched in, pauses left out), and a limit caps its rate at
 * that pace x the limit, whatever the time measurement allows (ci_monitor_pace_cap). A
 * workload limited from its first launch has no such pace: its limit is a share of the
 * time.
 *
 * Fallbacks, always towards enforcing: samples that never name the workload's
 * processes (pid namespaces) for over a second -> whole-device utilisation
 * (over-estimates under co-location, so it throttles more, never less); no
 * NVML at all -> the rate measured in the first unthrottled window, scaled to
 * the target (open loop).
 *
 * MPS mode with its daemon (ci_mps.c): everything above is measured and published, but no
 * step sets a rate, so no launch waits: the SM partition is the compute limit.
 *
 * Every CI_MONITOR_FOOTPRINT_TICKS ticks it compares what NVML shows this process
 * holding with what it has charged (ci_footprint_reconcile).
 *
 * The thread blocks all signals, never takes the region lock and never calls
 * the CUDA driver.
 */
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "ci_internal.h"
#include "ci_clock.h"
#include "ci_compute_metering.h"
#include "ci_memory_accounting.h"
#include "ci_nvml.h"

#define CI_MONITOR_TICK_NS 10000000ull
#define CI_MONITOR_CONTROL_TICKS 5
#define CI_MONITOR_FOOTPRINT_TICKS 10 /* reconcile the footprint with NVML: 100 ms */
#define CI_MONITOR_HISTORY 512 /* ticks: 5 s */
#define CI_MONITOR_NO_MATCH_NS 1000000000ull
#define CI_MONITOR_OPEN_LOOP_NS 200000000ull
#define CI_MONITOR_FALLBACK_WINDOW_NS 200000000ull
#define CI_MONITOR_MAX_WINDOW_NS 500000000ull
#define CI_MONITOR_SHARE_WINDOW_NS 200000000ull
#define CI_MONITOR_GPUTIME_WINDOW_NS 1000000000ull
#define CI_MONITOR_GPUTIME_MIN_SAMPLES 8
#define CI_MONITOR_FULL_LOAD 95.0        /* NVML device utilisation, percent */
#define CI_MONITOR_REFERENCE_PERIODS 2   /* sampled control periods without a limit ... */
#define CI_MONITOR_REFERENCE_EVERY 20    /* ... out of every this many (100 ms a second) */

enum { CI_MONITOR_ALONE_NO, CI_MONITOR_ALONE_PARTLY, CI_MONITOR_ALONE_FULL };

struct ci_monitor_point {
    uint64_t t_ns, charged, throttled_ns;
    uint64_t workload_charged; /* charged + what the workload's other processes spent */
    struct ci_gputime_totals gputime;
};

struct ci_monitor_dev {
    struct ci_controller ctl;
    bool started;
    int alone;      /* NVML's last samples: CI_MONITOR_ALONE_* */
    bool full_load; /* ... alone at full load (keys learn their full-load speed) */
    bool seen_full; /* it was once alone at full load without a limit */
    bool colocated; /* NVML's last samples named another process busy on the card */
    uint64_t verdict_ns; /* when NVML's samples last said */
    struct ci_flatout flatout;
    double scale;   /* card ns per sampled work ns (ci_flatout_scale); 0: not known */
    struct ci_pace pace; /* tokens/s alone without a limit (ci_pace.c) */
    uint64_t last_seen_us;
    uint64_t no_match_ns;
    uint64_t open_loop_start_ns;
    uint64_t fallback_step_ns;
    uint32_t util;
    struct ci_monitor_point hist[CI_MONITOR_HISTORY];
    unsigned hist_next;
};

static _Atomic int ci_monitor_started;
static pthread_mutex_t ci_monitor_publish_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ci_monitor_dev ci_monitor_devs[CI_MAX_DEVICES];
static _Atomic uint32_t ci_monitor_util[CI_MAX_DEVICES];
static _Atomic uint32_t ci_monitor_util_source[CI_MAX_DEVICES];

/* Publishes what the controller was fed on `dev` and where it came from. */
static void ci_monitor_set_util(int dev, double util, uint32_t source)
{
    atomic_store_explicit(&ci_monitor_util[dev], (uint32_t)(util + 0.5), memory_order_relaxed);
    atomic_store_explicit(&ci_monitor_util_source[dev], source, memory_order_relaxed);
}

/* Publishes into `slot` (publish lock held): the slot's identity and memory in use are
 * put back first, since anything of the workload can overwrite them. */
static void ci_monitor_publish_locked(int slot)
{
    struct ci_region *r = ci_region_get();
    if (slot < 0 || r == NULL || ci_region_heal_slot(slot) != 0)
        return;
    struct ci_region_slot *s = &r->slots[slot];
    ci_ledger_publish(s);
    struct ci_signature_snapshot sig;
    ci_signature_snapshot(&sig);
    uint32_t seq = __atomic_load_n(&s->seq, __ATOMIC_RELAXED);
    __atomic_store_n(&s->seq, seq | 1u, __ATOMIC_RELAXED);
    /* Every field store below is a release store, so none of them can become
     * visible before the odd sequence number (a fence, without TSAN support). */
    for (int d = 0; d < CI_MAX_DEVICES; d++) {
        struct ci_region_device *rd = &s->dev[d];
        struct ci_dev_counters *c = &ci_counters[d];
#define CI_PUB(field, value) __atomic_store_n(&rd->field, (value), __ATOMIC_RELEASE)
        CI_PUB(kernel_launches, atomic_load_explicit(&c->launches, memory_order_relaxed));
        CI_PUB(graph_launches, atomic_load_explicit(&c->graph_launches, memory_order_relaxed));
        CI_PUB(memcpy_htod_bytes, atomic_load_explicit(&c->htod, memory_order_relaxed));
        CI_PUB(memcpy_dtoh_bytes, atomic_load_explicit(&c->dtoh, memory_order_relaxed));
        CI_PUB(memcpy_dtod_bytes, atomic_load_explicit(&c->dtod, memory_order_relaxed));
        CI_PUB(alloc_count, atomic_load_explicit(&c->alloc_count, memory_order_relaxed));
        CI_PUB(alloc_denied, atomic_load_explicit(&c->alloc_denied, memory_order_relaxed));
        CI_PUB(throttled_ns, atomic_load_explicit(&c->throttled_ns, memory_order_relaxed));
        CI_PUB(tokens_available, ci_tokens_available(d));
        CI_PUB(token_rate_per_s, (uint64_t)ci_tokens_rate(d));
        CI_PUB(tokens_charged, ci_tokens_charged(d));
        CI_PUB(sm_util_percent, atomic_load_explicit(&ci_monitor_util[d], memory_order_relaxed));
        CI_PUB(sm_util_source,
               atomic_load_explicit(&ci_monitor_util_source[d], memory_order_relaxed));
        CI_PUB(footprint_bytes, ci_footprint_bytes(d));
        CI_PUB(kernel_names, ci_kernel_names_word(d));
#undef CI_PUB
    }
    __atomic_store_n(&s->launch_signature, sig.hash, __ATOMIC_RELEASE);
    __atomic_store_n(&s->iteration_period_launches, sig.period_launches, __ATOMIC_RELEASE);
    __atomic_store_n(&s->iteration_period_ns, sig.period_ns, __ATOMIC_RELEASE);
    __atomic_store_n(&s->iterations, sig.iterations, __ATOMIC_RELEASE);
    __atomic_store_n(&s->updated_unix_ns, ci_unix_ns(), __ATOMIC_RELEASE);
    __atomic_store_n(&s->seq, (seq | 1u) + 1u, __ATOMIC_RELEASE);
}

void ci_monitor_publish(void)
{
    pthread_mutex_lock(&ci_monitor_publish_lock);
    ci_monitor_publish_locked(atomic_load_explicit(&ci_state.slot, memory_order_relaxed));
    pthread_mutex_unlock(&ci_monitor_publish_lock);
}

void ci_monitor_retire(int slot)
{
    pthread_mutex_lock(&ci_monitor_publish_lock);
    ci_monitor_publish_locked(slot);
    ci_region_detach(slot);
    pthread_mutex_unlock(&ci_monitor_publish_lock);
}

/* Appends the current (time, spent, throttled) of `dev` to its history. */
static void ci_monitor_record(struct ci_monitor_dev *m, int dev, uint64_t now)
{
    struct ci_monitor_point *p = &m->hist[m->hist_next % CI_MONITOR_HISTORY];
    p->t_ns = now;
    p->charged = ci_tokens_charged(dev);
    p->workload_charged = p->charged + ci_peers_charged(dev);
    p->throttled_ns = atomic_load_explicit(&ci_counters[dev].throttled_ns, memory_order_relaxed);
    ci_gputime_read(dev, &p->gputime);
    m->hist_next++;
}

/* The newest history point taken at or before t (the oldest if none). */
static const struct ci_monitor_point *ci_monitor_at(const struct ci_monitor_dev *m, uint64_t t)
{
    unsigned n = m->hist_next < CI_MONITOR_HISTORY ? m->hist_next : CI_MONITOR_HISTORY;
    const struct ci_monitor_point *best = NULL;
    for (unsigned i = 1; i <= n; i++) {
        const struct ci_monitor_point *p = &m->hist[(m->hist_next - i) % CI_MONITOR_HISTORY];
        best = p;
        if (p->t_ns <= t)
            break;
    }
    return best;
}

/* GPU ns of work (at full-load speed) per token of the sampled launches over the last
 * second (or the whole history when that holds too few samples); -1 when too few. */
static double ci_monitor_ns_per_token(const struct ci_monitor_dev *m, uint64_t now)
{
    unsigned n = m->hist_next < CI_MONITOR_HISTORY ? m->hist_next : CI_MONITOR_HISTORY;
    if (n < 2)
        return -1.0;
    const struct ci_monitor_point *b = &m->hist[(m->hist_next - 1) % CI_MONITOR_HISTORY];
    const struct ci_monitor_point *a =
        ci_monitor_at(m, now > CI_MONITOR_GPUTIME_WINDOW_NS ? now - CI_MONITOR_GPUTIME_WINDOW_NS : 0);
    if (b->gputime.samples - a->gputime.samples < CI_MONITOR_GPUTIME_MIN_SAMPLES)
        a = &m->hist[(m->hist_next - n) % CI_MONITOR_HISTORY];
    if (b->gputime.samples - a->gputime.samples < CI_MONITOR_GPUTIME_MIN_SAMPLES ||
        b->gputime.cost <= a->gputime.cost)
        return -1.0;
    double ns = (double)(b->gputime.work_ns - a->gputime.work_ns) /
                (double)(b->gputime.cost - a->gputime.cost);
    return m->scale > 0.0 ? ns * m->scale : ns;
}

/* Feeds the window [t0, t1], at both ends of which NVML saw the workload alone without a
 * limit, busy `busy` percent at the end (100: flat out), to its flat-out scale. */
static void ci_monitor_calibrate(struct ci_monitor_dev *m, int dev, uint64_t t0, uint64_t t1,
                                 double busy)
{
    const struct ci_monitor_point *a = ci_monitor_at(m, t0), *b = ci_monitor_at(m, t1);
    if (a == NULL || b == NULL || b->t_ns <= a->t_ns || b->charged <= a->charged)
        return;
    double card_ns = (double)(b->t_ns - a->t_ns) * busy / 100.0;
    double tokens = (double)(b->workload_charged - a->workload_charged);
    bool taken = ci_flatout_window(&m->flatout, card_ns, tokens, busy >= 100.0);
    ci_debug("dev %d: alone %.0f%% busy, %.0f ns per token, %s (mark %.0f over %llu windows)",
             dev, busy, card_ns / tokens, taken ? "taken" : "not taken",
             m->flatout.card_ns / m->flatout.card_tokens, (unsigned long long)m->flatout.windows);
    if (!taken)
        return;
    double sampled = ci_gputime_alone_ns_per_token(dev);
    if (sampled <= 0.0)
        return;
    double scale = ci_flatout_scale(&m->flatout, sampled);
    if (scale > 0.0 && (scale > m->scale + 0.005 || scale < m->scale - 0.005))
        ci_debug("dev %d: alone the card spends %.0f ns per token, the samples say %.0f: "
                 "scale %.3f", dev, m->flatout.card_ns / m->flatout.card_tokens, sampled, scale);
    m->scale = scale;
}

/* Share of the GPU (percent) the workload's launches took over [t0, now]: the tokens/s
 * of all its processes x this process's GPU ns per token. -1 when not known yet. */
static double ci_monitor_gputime_share(const struct ci_monitor_dev *m, uint64_t t0, uint64_t now)
{
    double ns_per_token = ci_monitor_ns_per_token(m, now);
    const struct ci_monitor_point *a = ci_monitor_at(m, t0), *b = ci_monitor_at(m, now);
    if (ns_per_token < 0.0 || a == NULL || b == NULL || b->t_ns <= a->t_ns)
        return -1.0;
    double tokens_per_s =
        (double)(b->workload_charged - a->workload_charged) * 1e9 / (double)(b->t_ns - a->t_ns);
    double share = 100.0 * tokens_per_s * ns_per_token / 1e9;
    return share > 100.0 ? 100.0 : share;
}

/* The most tokens/s a limit lets a workload spend that never filled the card alone: its
 * own pace alone without a limit x the limit; 0 when there is no such cap. */
static double ci_monitor_pace_cap(const struct ci_monitor_dev *m)
{
    return m->seen_full ? 0.0 : ci_pace_cap(&m->pace, m->ctl.target);
}

/* Learns the workload's pace alone without a limit from the tokens/s it spent over the
 * last share window, whenever it launched in that window. */
static void ci_monitor_learn_pace(struct ci_monitor_dev *m, uint64_t now)
{
    uint64_t t0 = now > CI_MONITOR_SHARE_WINDOW_NS ? now - CI_MONITOR_SHARE_WINDOW_NS : 0;
    const struct ci_monitor_point *a = ci_monitor_at(m, t0), *b = ci_monitor_at(m, now);
    if (a == NULL || b == NULL || b->t_ns <= a->t_ns || b->charged <= a->charged)
        return;
    double seconds = (double)(b->t_ns - a->t_ns) / 1e9;
    ci_pace_window(&m->pace, (double)(b->charged - a->charged) / seconds);
}

/* Applies one controller step for the window [t0, t1] (monotonic ns). */
static void ci_monitor_step(struct ci_monitor_dev *m, int dev, double util, uint64_t t0,
                            uint64_t t1)
{
    const struct ci_monitor_point *a = ci_monitor_at(m, t0);
    const struct ci_monitor_point *b = ci_monitor_at(m, t1);
    if (a == NULL || b == NULL || b->t_ns <= a->t_ns)
        return;
    double seconds = (double)(b->t_ns - a->t_ns) / 1e9;
    double consumed = (double)(b->charged - a->charged) / seconds;
    if (ci_mps_partition_active()) {
        /* MPS mode: the SM partition is the compute limit; throttling on top would give
         * the workload a share of its share. Measured and published, never enforced. */
        ci_debug("dev %d: util %.1f%% of the MPS partition's %.0f%%, spent %.0f/s, not throttled",
                 dev, util, m->ctl.target, consumed);
        return;
    }
    bool binding = b->throttled_ns > a->throttled_ns || ci_tokens_waiting(dev) > 0;
    double rate = ci_controller_update(&m->ctl, util, consumed, binding);
    double cap = ci_monitor_pace_cap(m);
    if (cap > 0.0 && (rate <= 0.0 || rate > cap))
        rate = m->ctl.rate = cap; /* the controller goes on from the cap: no wind-up */
    ci_tokens_set_rate(dev, rate, m->colocated ? ci_tokens_shared_refill_ns(m->ctl.target) : 0);
    ci_debug("dev %d: util %.1f%% target %.0f%% spent %.0f/s -> rate %.0f/s%s%s", dev, util,
             m->ctl.target, consumed, rate, rate == cap ? " (its own pace x the limit)" : "",
             m->colocated ? " (co-located)" : "");
}

/* One control period for `dev`. */
static void ci_monitor_control(struct ci_monitor_dev *m, int dev, bool nvml_ok, uint64_t now)
{
    uint32_t target = ci_region_compute_percent();
    if (!m->started) {
        ci_controller_init(&m->ctl, target);
        m->last_seen_us = ci_clock_unix_ns() / 1000;
        m->started = true;
    }
    m->ctl.target = target;
    if (target >= 100) {
        if (ci_tokens_rate(dev) != 0.0)
            ci_tokens_set_rate(dev, 0.0, 0);
        if (!nvml_ok)
            return;
    }
    if (!nvml_ok) {
        /* Open loop: measure the unthrottled pace once, then scale it. */
        if (m->ctl.rate > 0.0 || ci_tokens_charged(dev) == 0)
            return;
        if (m->open_loop_start_ns == 0)
            m->open_loop_start_ns = now;
        if (now - m->open_loop_start_ns >= CI_MONITOR_OPEN_LOOP_NS) {
            atomic_store_explicit(&ci_monitor_util_source[dev], CI_UTIL_SOURCE_OPEN_LOOP,
                                  memory_order_relaxed);
            ci_monitor_step(m, dev, 100.0, m->open_loop_start_ns, now);
        }
        return;
    }
    uint64_t prev_us = m->last_seen_us;
    double util = 0.0;
    int others = 0;
    int n = ci_nvml_workload_util(dev, &m->last_seen_us, &util, &others);
    if (n != 0 && n != -1)
        m->colocated = others > 0;
    if (n != 0) {
        /* Full load with the device to itself and no limit: its kernels run at their
         * full-load speed (co-located, another context's slices would inflate what is
         * timed; limited, the card clocks up — NVML read a 90 % limit as 95-99 % busy
         * in 1 s of every 3 on the H200, and the speed learnt there undid the limit). */
        double device = 0.0;
        bool alone = target >= 100 && n > 0 && others == 0 &&
                     ci_nvml_device_util(dev, &device) == 0;
        int was = m->alone;
        m->full_load = alone && device >= CI_MONITOR_FULL_LOAD;
        m->alone = !alone ? CI_MONITOR_ALONE_NO
                          : m->full_load ? CI_MONITOR_ALONE_FULL : CI_MONITOR_ALONE_PARTLY;
        m->seen_full |= m->full_load;
        ci_gputime_set_load(dev, alone, m->full_load);
        if (alone && was == m->alone)
            ci_monitor_calibrate(m, dev, m->verdict_ns, now, m->full_load ? 100.0 : util);
        m->verdict_ns = now;
        if (alone)
            ci_monitor_learn_pace(m, now);
        ci_debug("dev %d: device %.0f%% busy, %d samples of others: full load %d", dev, device,
                 others, m->full_load);
    }
    if (n == -1)
        return;
    /* co-located or not, the GPU-time measurement comes first */
    if (target < 100) {
        /* Alone or co-located: the GPU time the interceptor timed itself, whenever there
         * are enough samples. NVML's utilisation under-counts bursty work (H200: a 30 %
         * NVML figure was 36 % of the GPU's real time) and, co-located, is no share. */
        uint64_t t0 = now > CI_MONITOR_SHARE_WINDOW_NS ? now - CI_MONITOR_SHARE_WINDOW_NS : 0;
        double share = ci_monitor_gputime_share(m, t0, now);
        if (share >= 0.0) {
            ci_monitor_set_util(dev, share, CI_UTIL_SOURCE_GPUTIME);
            ci_monitor_step(m, dev, share, t0, now);
            return;
        }
    }
    bool starving = target < 100 && ci_tokens_waiting(dev) > 0 &&
                    m->no_match_ns < CI_MONITOR_NO_MATCH_NS;
    if (n == 0)
        return; /* no new sample yet: NVML samples less often than we look */
    /* NVML timestamps are wall-clock microseconds; the history is monotonic. The
     * window is capped so that a long quiet stretch before the first samples
     * does not dilute the consumption the samples are compared with. */
    int64_t offset = (int64_t)ci_clock_unix_ns() - (int64_t)now;
    uint64_t t1 = (uint64_t)((int64_t)m->last_seen_us * 1000 - offset);
    uint64_t t0 = (uint64_t)((int64_t)prev_us * 1000 - offset);
    if (t1 > CI_MONITOR_MAX_WINDOW_NS && t0 < t1 - CI_MONITOR_MAX_WINDOW_NS)
        t0 = t1 - CI_MONITOR_MAX_WINDOW_NS;
    if (n == -2 && starving) {
        ci_monitor_step(m, dev, 0.0, t0, t1); /* others ran, we did not */
        return;
    }
    if (n == -2) {
        const struct ci_monitor_point *a = ci_monitor_at(m, t0), *b = ci_monitor_at(m, t1);
        bool launched = a != NULL && b != NULL && b->charged > a->charged;
        m->no_match_ns = launched ? m->no_match_ns + (t1 - t0) : 0;
        if (m->no_match_ns < CI_MONITOR_NO_MATCH_NS)
            return;
        /* Device utilisation is an average over NVML's own (unknown) period:
         * step slower, over a longer consumption window, to stay smooth. */
        if (now - m->fallback_step_ns < CI_MONITOR_FALLBACK_WINDOW_NS ||
            ci_nvml_device_util(dev, &util) != 0)
            return;
        t0 = now > CI_MONITOR_FALLBACK_WINDOW_NS ? now - CI_MONITOR_FALLBACK_WINDOW_NS : 0;
        t1 = now;
        m->fallback_step_ns = now;
    } else {
        m->no_match_ns = 0;
    }
    ci_monitor_set_util(dev, util, n == -2 ? CI_UTIL_SOURCE_NVML_DEVICE : CI_UTIL_SOURCE_NVML);
    if (target < 100)
        ci_monitor_step(m, dev, util, t0, t1);
}

/* Launch sampling: on under a compute limit, and for a few periods of every
 * CI_MONITOR_REFERENCE_EVERY while the workload has a device to itself without a limit
 * (to learn what its samples are worth, and its kernels' speed at full load). */
static void ci_monitor_sampling(int count, unsigned period)
{
    bool alone = false;
    for (int d = 0; d < count; d++)
        alone |= ci_monitor_devs[d].alone != CI_MONITOR_ALONE_NO;
    bool reference = alone && period % CI_MONITOR_REFERENCE_EVERY < CI_MONITOR_REFERENCE_PERIODS;
    bool limited = ci_region_compute_percent() < 100;
    ci_gputime_enable(limited || reference, reference && !limited);
}

static void *ci_monitor_main(void *arg)
{
    (void)arg;
    bool nvml_ok = ci_nvml_start(atomic_load(&ci_state.device_count)) == 0;
    for (unsigned tick = 1;; tick++) {
        ci_sleep_ns(CI_MONITOR_TICK_NS);
        uint64_t now = ci_now_ns();
        int count = atomic_load(&ci_state.device_count);
        ci_peers_update(atomic_load_explicit(&ci_state.slot, memory_order_relaxed), count);
        for (int d = 0; d < count; d++)
            ci_monitor_record(&ci_monitor_devs[d], d, now);
        if (tick % CI_MONITOR_FOOTPRINT_TICKS == 0)
            ci_footprint_reconcile();
        ci_monitor_publish();
        if (tick % CI_MONITOR_CONTROL_TICKS != 0)
            continue;
        for (int d = 0; d < count; d++)
            ci_monitor_control(&ci_monitor_devs[d], d, nvml_ok, now);
        ci_monitor_sampling(count, tick / CI_MONITOR_CONTROL_TICKS);
    }
    return NULL;
}

void ci_monitor_start(void)
{
    if (atomic_exchange(&ci_monitor_started, 1))
        return;
    for (int d = 0; d < CI_MAX_DEVICES; d++)
        atomic_store(&ci_monitor_util[d], CI_REGION_UNKNOWN_U32);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    pthread_t thread;
    ci_clock_thread_spawn(1);
    int rc = pthread_create(&thread, &attr, ci_monitor_main, NULL);
    if (rc != 0)
        ci_clock_thread_spawn(-1);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        ci_log("cannot start the monitor thread (error %d): no metrics, no compute limit", rc);
        atomic_store(&ci_monitor_started, 0);
        return;
    }
    pthread_setname_np(thread, "alnair-monitor");
}

void ci_monitor_after_fork_child(void)
{
    pthread_mutex_init(&ci_monitor_publish_lock, NULL);
    memset(ci_monitor_devs, 0, sizeof ci_monitor_devs);
    ci_peers_after_fork_child();
    atomic_store(&ci_monitor_started, 0);
}
