/*
 * ci_flatout.c — what the sampled GPU time of a workload is worth in the card's time.
 *
 * Why: a kernel timed between two CUDA events holds the card longer than its share of
 * the stream's throughput — it cannot overlap the kernel before it as back-to-back kernels
 * do, and a graph timed into an idle stream carries the host's launch latency. On an
 * H100, timed 4096^2 matmuls averaged 220 us where the loop ran one per 206 us flat out,
 * so every compute limit held ~8 % low (90 % gave 83 % of the work). Tiny kernels are
 * inflated far more.
 *
 * While the workload runs alone without a limit the monitor knows the truth: flat out
 * (NVML: >= CI_MONITOR_FULL_LOAD busy) the card's whole time is the workload's, and below
 * that NVML's utilisation is its share. The scale is that time per token spent, over the
 * sampled time per token of the launches timed meanwhile. The two sides come from
 * different windows: launches are timed in 2 control periods of every 20, and timing
 * every launch there slows a loop by a few per cent, so the token rate is taken from the
 * windows without timed launches and the samples from those with; both are moving sums
 * over the last few seconds, so that a wandering clock (H100 flat out: 1275-1485 MHz)
 * moves both alike. Monitor thread only.
 */
#include "ci_internal.h"

#define CI_FLATOUT_RATE_WEIGHT 64    /* rate windows (~50 ms each): ~3 s of memory */
#define CI_FLATOUT_SAMPLE_WEIGHT 8   /* sampled windows (2 a second): ~4 s */
#define CI_FLATOUT_MIN_RATE_WINDOWS 8
#define CI_FLATOUT_MIN_SAMPLES 16
#define CI_FLATOUT_MIN_SCALE 0.2     /* a tiny kernel's timing may be 5x its share */
#define CI_FLATOUT_MAX_SCALE 2.0

void ci_flatout_rate(struct ci_flatout *f, double card_ns, double tokens)
{
    if (card_ns <= 0.0 || tokens <= 0.0)
        return;
    double keep = 1.0 - 1.0 / CI_FLATOUT_RATE_WEIGHT;
    f->card_ns = f->card_ns * keep + card_ns;
    f->card_tokens = f->card_tokens * keep + tokens;
    f->rate_windows++;
}

void ci_flatout_samples(struct ci_flatout *f, double work_ns, double cost, uint64_t samples)
{
    if (work_ns <= 0.0 || cost <= 0.0 || samples == 0)
        return;
    double keep = 1.0 - 1.0 / CI_FLATOUT_SAMPLE_WEIGHT;
    f->sampled_ns = f->sampled_ns * keep + work_ns;
    f->sampled_cost = f->sampled_cost * keep + cost;
    f->samples += samples;
}

double ci_flatout_scale(const struct ci_flatout *f)
{
    if (f->rate_windows < CI_FLATOUT_MIN_RATE_WINDOWS || f->samples < CI_FLATOUT_MIN_SAMPLES)
        return 0.0;
    double scale = (f->card_ns / f->card_tokens) / (f->sampled_ns / f->sampled_cost);
    if (scale < CI_FLATOUT_MIN_SCALE)
        return CI_FLATOUT_MIN_SCALE;
    return scale > CI_FLATOUT_MAX_SCALE ? CI_FLATOUT_MAX_SCALE : scale;
}
