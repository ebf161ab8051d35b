/*
 * ci_compute_metering.h — the compute limit and what launches tell: the token bucket
 * every launch passes (ci_tokens.c), the launches' sampled GPU time (ci_gputime.c) and
 * what it is worth (ci_flatout.c, ci_pace.c), the other processes' spending
 * (ci_peers.c), kernel names and the launch signature (ci_kernel_names.c,
 * ci_signature.c), and the monitor thread that measures and sets the rate (ci_monitor.c)
 * through its controller (ci_controller.c).
 */
#ifndef CI_COMPUTE_METERING_H
#define CI_COMPUTE_METERING_H

#include <stdbool.h>
#include <stdint.h>

#include "ci_cuda.h"
#include "ci_hooks.h"

/* ---- ci_controller.c ----------------------------------------------------- */

/* The compute limit's rate controller, a pure function (tests/test_controller.c builds
 * ci_controller.c alone against this header). */
struct ci_controller {
    double rate;        /* tokens/s handed to the bucket; 0 = unthrottled */
    double target;      /* percent */
    int updates;
};

/* Starts unthrottled (boosted ramp-up) towards `target_percent`. */
void ci_controller_init(struct ci_controller *c, double target_percent);
/* One control step over a measurement window: `util` is the workload's
 * measured SM utilisation (percent), `consumed` the tokens/s this process
 * spent in the same window, `binding` whether launches waited for tokens.
 * Returns the new rate (0 = unthrottled). Pure function of its inputs. */
double ci_controller_update(struct ci_controller *c, double util, double consumed,
                            bool binding);

/* ---- ci_tokens.c --------------------------------------------------------- */

/* Counts one launch of `cost` tokens on `dev` and, when the compute limit is
 * active and the bucket is empty, sleeps (in bounded steps) until it is not.
 * Returns the tokens charged (a graph launch: the running average kernel cost). */
uint64_t ci_tokens_on_launch(int dev, uint64_t cost, bool graph, const void *fn);
/* A waiting launch waits for this much refill (alone). */
#define CI_TOKENS_REFILL_NS 1000000ull
/* Co-located, at most this much: see ci_tokens_shared_refill_ns. */
#define CI_TOKENS_SHARED_REFILL_MAX_NS 10000000ull
/* Sets the refill rate in tokens per second (0 = unthrottled) and how much refill a
 * waiting launch waits for (0: CI_TOKENS_REFILL_NS). */
void ci_tokens_set_rate(int dev, double rate, uint64_t refill_ns);
/* The refill a waiting launch waits for when another context shares the card, under a
 * limit of `percent`: a burst worth about CI_TOKENS_REFILL_NS of the card's time. Each
 * burst costs the card two context switches (H100: a 10 % tenant launching one matmul per
 * burst beside an unlimited one cost the pair 3 % of the card, which the other paid). */
uint64_t ci_tokens_shared_refill_ns(double percent);
double ci_tokens_rate(int dev);
/* Threads of this process currently waiting for tokens on `dev`. */
int ci_tokens_waiting(int dev);
uint64_t ci_tokens_charged(int dev);
int64_t ci_tokens_available(int dev);
void ci_tokens_reset(void);

/* ---- ci_gputime.c -------------------------------------------------------- */
/* Sampling of launch GPU time, on while a compute limit is active and in the windows that
 * learn the full-load speed (`every_launch`: each launch a candidate, not every 16th). */
void ci_gputime_enable(bool on, bool every_launch);
struct ci_gputime_probe {
    struct ci_gputime_sample *sample;
    CUstream stream;
};
/* Before a launch of `cost` tokens of `fn` (a graph launch when `graph`) into `stream`
 * through the real entry point `real` (`ptsz_id`: that entry point's _ptsz variant,
 * whose stream 0 is the per-thread default stream). Returns true when this launch
 * is timed: call ci_gputime_end with the launch's result right after it. */
bool ci_gputime_begin(struct ci_gputime_probe *p, int dev, CUstream stream, void *real,
                      ci_hook_id ptsz_id, const void *fn, uint64_t cost, bool graph);
void ci_gputime_end(struct ci_gputime_probe *p, CUresult launched);
/* What the monitor last saw of `dev`: the workload alone on it without a limit, and at
 * full load (keys learn their full-load speed there). */
void ci_gputime_set_load(int dev, bool alone, bool full);
/* GPU ns per token of the launches timed while the workload had `dev` alone without a
 * limit, in their mix (how many of each key were timed) at each key's speed at full load
 * (its moving mean where never at full load): what the sampled work of that mix is now.
 * -1 before 16 such samples, or when a launching thread holds the key table. */
double ci_gputime_alone_ns_per_token(int dev);
/* Sums over the finished samples of `dev`: GPU ns (clipped), the same at each key's
 * full-load speed (work_ns), tokens, count. */
struct ci_gputime_totals {
    uint64_t ns, work_ns, cost, samples;
};
void ci_gputime_read(int dev, struct ci_gputime_totals *out);
void ci_gputime_after_fork_child(void);

/* ---- ci_flatout.c -------------------------------------------------------- */

/* The card's time a workload spends per token while alone without a limit (moving sums
 * over the last few seconds), to scale its sampled GPU time by. Zeroed: nothing learnt. */
struct ci_flatout {
    double card_ns, card_tokens;
    uint64_t windows;
    unsigned outliers; /* windows in a row not taken for lying far from the mark */
    bool full;         /* learning from flat-out windows only */
};
/* A window alone without a limit: `card_ns` of the card's time were the workload's (the
 * window's length flat out, NVML's share of it below), and it spent `tokens`. False when
 * not taken: a window below full load once flat-out ones have been seen, or one far off
 * the mark (a window in which the workload stopped). */
bool ci_flatout_window(struct ci_flatout *f, double card_ns, double tokens, bool full);
/* Card ns per sampled ns, given what the samples say a token takes alone
 * (ci_gputime_alone_ns_per_token); clamped to 0.2..2, 0 until enough was seen. */
double ci_flatout_scale(const struct ci_flatout *f, double sampled_ns_per_token);

/* ---- ci_pace.c ----------------------------------------------------------- */

/* A workload's tokens/s alone without a limit. Zeroed: never seen. */
struct ci_pace {
    double tokens_per_s;
    int off; /* windows in a row too far off it to count */
};
/* A window alone without a limit in which the workload launched, spending `spent` tokens/s. */
void ci_pace_window(struct ci_pace *p, double spent);
/* The pace x `target_percent` (at least 1), or 0: no pace seen, or no limit. */
double ci_pace_cap(const struct ci_pace *p, double target_percent);

/* ---- ci_peers.c ---------------------------------------------------------- */

/* Reads the other slots' tokens_charged (not `own_slot`'s) for devices 0..count-1 and adds
 * what each live peer spent since the last call. Monitor thread. */
void ci_peers_update(int own_slot, int count);
/* Tokens the workload's other processes spent on `dev` since this process began watching
 * (a monotonic count). */
uint64_t ci_peers_charged(int dev);
void ci_peers_after_fork_child(void);

/* ---- ci_kernel_names.c --------------------------------------------------- */

/* Classifies the kernel `fn` launched on `dev` by its name (once per handle, through the
 * driver's cuFuncGetName) and counts the launch when the name is a training one
 * (backward, multi_tensor_apply). Lock-free; does nothing when names cannot be read. */
void ci_kernel_names_note(int dev, const void *fn);
/* The region's device.kernel_names word of `dev`: bit 63 a name was read, bit 62 a
 * PyTorch kernel was seen, bits 0..61 launches of training-named kernels. */
uint64_t ci_kernel_names_word(int dev);
void ci_kernel_names_after_fork_child(void);

/* ---- ci_signature.c ------------------------------------------------------ */

/* Feeds one launched function handle into the rolling launch signature.
 * Lock-free for callers: skipped when another thread is updating. */
void ci_signature_record(const void *fn);
struct ci_signature_snapshot {
    uint64_t hash, period_launches, period_ns, iterations;
};
void ci_signature_snapshot(struct ci_signature_snapshot *out);
void ci_signature_reset(void);

/* ---- ci_monitor.c -------------------------------------------------------- */

/* Starts the monitor thread once per process (again in a forked child). */
void ci_monitor_start(void);
/* Forked child: the thread did not survive; allow a restart. */
void ci_monitor_after_fork_child(void);
/* Writes this process's counters into its slot now (also done every ~10 ms). */
void ci_monitor_publish(void);
/* Final publish and ci_region_detach of `slot`, with no monitor publish in between or
 * after (which would put the retired slot's identity or memory back). */
void ci_monitor_retire(int slot);

#endif /* CI_COMPUTE_METERING_H */
