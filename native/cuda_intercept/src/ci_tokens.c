/*
 * ci_tokens.c — the compute limit's token bucket and the launch wrappers.
 *
 * Every kernel launch costs its grid size in blocks (gridX*gridY*gridZ);
 * cooperative launches likewise; a graph launch costs the running average of
 * recent kernel costs (its kernels are not visible at launch). The bucket is
 * refilled lazily from the clock at the rate the controller (ci_controller.c,
 * run by the monitor thread) sets; it holds at most CI_TOKENS_BURST_NS worth
 * of tokens. A launch proceeds while the bucket is positive and may take it
 * negative (a big grid is never starved); otherwise the launching thread
 * sleeps, in steps of at most CI_TOKENS_MAX_SLEEP_NS, until it holds the
 * refill the controller set worth again (CI_TOKENS_REFILL_NS; co-located, more:
 * see ci_tokens_set_rate). So a throttled workload launches in bursts of
 * about that much work rather than one kernel at a time into an idle stream:
 * its stream stays busy within a burst, which is where ci_gputime can time its
 * kernels (a launch into an idle stream would time the host's latency too).
 *
 * Hot path: a few relaxed atomics, one clock read when throttled, no lock,
 * no allocation. With no compute limit the rate is 0 and nothing waits.
 */
#include "ci_internal.h"
#include "ci_clock.h"
#include "ci_compute_metering.h"

#define CI_TOKENS_BURST_NS 20000000ull    /* bucket depth: 20 ms of refill */
#define CI_TOKENS_MIN_SLEEP_NS 20000ull   /* waiting granularity */
#define CI_TOKENS_MAX_SLEEP_NS 2000000ull /* bound on one sleep: rate changes are seen */

struct ci_bucket {
    _Atomic int64_t tokens;
    _Atomic uint64_t last_ns;
    _Atomic uint64_t rate;     /* tokens per second; 0 = unthrottled */
    _Atomic uint64_t refill_ns; /* a waiting launch waits for this much refill */
    _Atomic int64_t burst;
    _Atomic uint64_t charged;  /* tokens spent since start */
    _Atomic uint64_t avg_cost; /* running average of kernel launch cost */
    _Atomic int waiting;       /* threads sleeping for tokens right now */
} __attribute__((aligned(64)));

static struct ci_bucket ci_buckets[CI_MAX_DEVICES];

static int ci_tokens_clamp_dev(int dev)
{
    return (dev >= 0 && dev < CI_MAX_DEVICES) ? dev : 0;
}

/* Adds the tokens accrued since last_ns, capped at the burst. Whole tokens
 * only: the time worth the fractional rest stays in last_ns for next time. */
static void ci_tokens_refill(struct ci_bucket *b, uint64_t now)
{
    uint64_t rate = atomic_load_explicit(&b->rate, memory_order_relaxed);
    uint64_t last = atomic_load_explicit(&b->last_ns, memory_order_relaxed);
    if (rate == 0 || now <= last)
        return;
    uint64_t dt = now - last;
    if (dt > 1000000000ull)
        dt = 1000000000ull;
    double add = (double)rate * (double)dt / 1e9;
    if (add < 1.0)
        return;
    int64_t whole = (int64_t)add;
    int64_t burst = atomic_load_explicit(&b->burst, memory_order_relaxed);
    int64_t cur = atomic_load_explicit(&b->tokens, memory_order_relaxed);
    uint64_t next_last = cur + whole >= burst
                             ? now
                             : last + (uint64_t)((double)whole * 1e9 / (double)rate);
    if (!atomic_compare_exchange_strong(&b->last_ns, &last, next_last))
        return; /* another thread refilled this interval */
    for (;;) {
        int64_t next = cur + whole;
        if (next > burst)
            next = cur > burst ? cur : burst;
        if (atomic_compare_exchange_weak(&b->tokens, &cur, next))
            break;
    }
}

/* Takes `cost` tokens, sleeping while the bucket is empty. */
static void ci_tokens_charge(struct ci_bucket *b, int dev, uint64_t cost)
{
    if (atomic_load_explicit(&b->rate, memory_order_relaxed) != 0) {
        uint64_t start = 0;
        int64_t need = 1; /* a launch passes a positive bucket; a waiting one, a refilled one */
        for (;;) {
            uint64_t now = ci_now_ns();
            ci_tokens_refill(b, now);
            if (atomic_load_explicit(&b->tokens, memory_order_relaxed) >= need)
                break;
            uint64_t rate = atomic_load_explicit(&b->rate, memory_order_relaxed);
            if (rate == 0)
                break;
            if (start == 0) {
                start = now;
                atomic_fetch_add_explicit(&b->waiting, 1, memory_order_relaxed);
                int64_t burst = atomic_load_explicit(&b->burst, memory_order_relaxed);
                uint64_t refill = atomic_load_explicit(&b->refill_ns, memory_order_relaxed);
                need = (int64_t)((double)rate * (double)refill / 1e9);
                if (need > burst)
                    need = burst;
                if (need < 1)
                    need = 1;
            }
            int64_t deficit = need - atomic_load_explicit(&b->tokens, memory_order_relaxed);
            double wait = deficit > 0 ? (double)deficit * 1e9 / (double)rate : 0.0;
            uint64_t ns = (uint64_t)wait;
            if (ns < CI_TOKENS_MIN_SLEEP_NS)
                ns = CI_TOKENS_MIN_SLEEP_NS;
            if (ns > CI_TOKENS_MAX_SLEEP_NS)
                ns = CI_TOKENS_MAX_SLEEP_NS;
            ci_sleep_ns(ns);
        }
        atomic_fetch_sub_explicit(&b->tokens, (int64_t)cost, memory_order_relaxed);
        if (start != 0)
            atomic_fetch_sub_explicit(&b->waiting, 1, memory_order_relaxed);
        if (start != 0)
            atomic_fetch_add_explicit(&ci_counters[dev].throttled_ns, ci_now_ns() - start,
                                      memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&b->charged, cost, memory_order_relaxed);
}

uint64_t ci_tokens_on_launch(int dev, uint64_t cost, bool graph, const void *fn)
{
    dev = ci_tokens_clamp_dev(dev);
    struct ci_bucket *b = &ci_buckets[dev];
    if (graph) {
        atomic_fetch_add_explicit(&ci_counters[dev].graph_launches, 1, memory_order_relaxed);
        cost = atomic_load_explicit(&b->avg_cost, memory_order_relaxed);
        if (cost == 0)
            cost = 1;
    } else {
        atomic_fetch_add_explicit(&ci_counters[dev].launches, 1, memory_order_relaxed);
        if (cost == 0)
            cost = 1;
        /* Running average over ~8 launches; a lost update only delays it. */
        uint64_t avg = atomic_load_explicit(&b->avg_cost, memory_order_relaxed);
        uint64_t next = avg == 0 ? cost
                                 : (uint64_t)((int64_t)avg + ((int64_t)cost - (int64_t)avg) / 8);
        atomic_store_explicit(&b->avg_cost, next, memory_order_relaxed);
        ci_kernel_names_note(dev, fn);
    }
    ci_signature_record(fn);
    ci_tokens_charge(b, dev, cost);
    return cost;
}

void ci_tokens_set_rate(int dev, double rate, uint64_t refill_ns)
{
    struct ci_bucket *b = &ci_buckets[ci_tokens_clamp_dev(dev)];
    atomic_store_explicit(&b->refill_ns, refill_ns ? refill_ns : CI_TOKENS_REFILL_NS,
                          memory_order_relaxed);
    uint64_t r = rate <= 0.0 ? 0 : (rate < 1.0 ? 1 : (uint64_t)rate);
    int64_t burst = (int64_t)((double)r * (double)CI_TOKENS_BURST_NS / 1e9);
    if (burst < 1)
        burst = 1;
    atomic_store_explicit(&b->burst, burst, memory_order_relaxed);
    uint64_t old = atomic_exchange_explicit(&b->rate, r, memory_order_relaxed);
    if (old == 0 && r != 0) {
        atomic_store_explicit(&b->last_ns, ci_now_ns(), memory_order_relaxed);
        atomic_store_explicit(&b->tokens, burst, memory_order_relaxed);
    }
    int64_t cur = atomic_load_explicit(&b->tokens, memory_order_relaxed);
    while (cur > burst && !atomic_compare_exchange_weak(&b->tokens, &cur, burst)) {
    }
}

uint64_t ci_tokens_shared_refill_ns(double percent)
{
    if (percent <= 0.0 || percent >= 100.0)
        return CI_TOKENS_REFILL_NS;
    double ns = (double)CI_TOKENS_REFILL_NS * 100.0 / percent;
    return ns > (double)CI_TOKENS_SHARED_REFILL_MAX_NS ? CI_TOKENS_SHARED_REFILL_MAX_NS
                                                        : (uint64_t)ns;
}

double ci_tokens_rate(int dev)
{
    return (double)atomic_load_explicit(&ci_buckets[ci_tokens_clamp_dev(dev)].rate,
                                        memory_order_relaxed);
}

int ci_tokens_waiting(int dev)
{
    return atomic_load_explicit(&ci_buckets[ci_tokens_clamp_dev(dev)].waiting,
                                memory_order_relaxed);
}

uint64_t ci_tokens_charged(int dev)
{
    return atomic_load_explicit(&ci_buckets[ci_tokens_clamp_dev(dev)].charged,
                                memory_order_relaxed);
}

int64_t ci_tokens_available(int dev)
{
    return atomic_load_explicit(&ci_buckets[ci_tokens_clamp_dev(dev)].tokens,
                                memory_order_relaxed);
}

void ci_tokens_reset(void)
{
    for (int d = 0; d < CI_MAX_DEVICES; d++) {
        struct ci_bucket *b = &ci_buckets[d];
        atomic_store(&b->rate, 0);
        atomic_store(&b->tokens, 0);
        atomic_store(&b->charged, 0);
        atomic_store(&b->avg_cost, 0);
        atomic_store(&b->last_ns, 0);
        atomic_store(&b->waiting, 0);
    }
}

/* ---- launch wrappers ----------------------------------------------------- */

typedef CUresult (*ci_launch_fn) CI_LAUNCH_PARAMS;
typedef CUresult (*ci_launch_ex_fn)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*ci_coop_fn) CI_COOP_PARAMS;
typedef CUresult (*ci_graph_fn)(CUgraphExec, CUstream);

static uint64_t ci_tokens_grid(unsigned gx, unsigned gy, unsigned gz)
{
    return (uint64_t)gx * (uint64_t)gy * (uint64_t)gz;
}

/* Charges the launch, then runs it (timing it when ci_gputime picks it). */
#define CI_TOKENS_LAUNCH(cost, graph, fn, stream, ptsz_id, call)                              \
    do {                                                                                      \
        ci_runtime_ensure();                                                                  \
        int dev_ = ci_runtime_current_device();                                               \
        uint64_t cost_ = ci_tokens_on_launch(dev_, (cost), (graph), (fn));                    \
        struct ci_gputime_probe probe_;                                                       \
        if (CI_LIKELY(!ci_gputime_begin(&probe_, dev_, (stream), real, (ptsz_id), (fn),       \
                                        cost_, (graph))))                                     \
            return call;                                                                      \
        CUresult r_ = call;                                                                   \
        ci_gputime_end(&probe_, r_);                                                          \
        return r_;                                                                            \
    } while (0)

CUresult ci_on_launch_kernel(void *real, CUfunction f, unsigned int gx, unsigned int gy,
                             unsigned int gz, unsigned int bx, unsigned int by, unsigned int bz,
                             unsigned int shmem, CUstream stream, void **params, void **extra)
{
    CI_TOKENS_LAUNCH(ci_tokens_grid(gx, gy, gz), false, f, stream, CI_HOOK_cuLaunchKernel_ptsz,
                     ((ci_launch_fn)real)(f, gx, gy, gz, bx, by, bz, shmem, stream, params,
                                          extra));
}

CUresult ci_on_launch_kernel_ex(void *real, const CUlaunchConfig *config, CUfunction f,
                                void **params, void **extra)
{
    uint64_t cost = config != NULL
                        ? ci_tokens_grid(config->gridDimX, config->gridDimY, config->gridDimZ)
                        : 1;
    CI_TOKENS_LAUNCH(cost, false, f, config != NULL ? config->hStream : NULL,
                     CI_HOOK_cuLaunchKernelEx_ptsz,
                     ((ci_launch_ex_fn)real)(config, f, params, extra));
}

CUresult ci_on_launch_cooperative(void *real, CUfunction f, unsigned int gx, unsigned int gy,
                                  unsigned int gz, unsigned int bx, unsigned int by,
                                  unsigned int bz, unsigned int shmem, CUstream stream,
                                  void **params)
{
    CI_TOKENS_LAUNCH(ci_tokens_grid(gx, gy, gz), false, f, stream,
                     CI_HOOK_cuLaunchCooperativeKernel_ptsz,
                     ((ci_coop_fn)real)(f, gx, gy, gz, bx, by, bz, shmem, stream, params));
}

CUresult ci_on_graph_launch(void *real, CUgraphExec exec, CUstream stream)
{
    CI_TOKENS_LAUNCH(0, true, exec, stream, CI_HOOK_cuGraphLaunch_ptsz,
                     ((ci_graph_fn)real)(exec, stream));
}
