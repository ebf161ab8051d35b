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
 * that NVML's utilisation is its share. The scale is that time per token spent, over what
 * the samples say a token takes in the mix timed meanwhile, at each kernel's full-load
 * speed (ci_gputime_alone_ns_per_token): the very speeds a sample under a limit is counted
 * at, so that for one kernel the two cancel and a limit is exactly a share of the
 * workload's token rate alone (a first version compared each window's samples with its
 * own token rate: their means and the keys' full-load means, averaged differently over a
 * wandering clock, left limits 3-5 % high on an H100). The card's side is a moving sum
 * over the last ~3 s of windows. Monitor thread only.
 *
 * Flat-out windows only, once there has been one: a workload that fills the card is 100 %
 * of it in every window, but NVML may read it below CI_MONITOR_FULL_LOAD in some — above all
 * a process's first window, before NVML has seen the load (an H100 read 1 % busy while the
 * matmul loop had already spent a burst of tokens). Counted at NVML's figure, such a window
 * credits the card with less time than its tokens took, so the mark came out fast by
 * however many tokens it had (1.005 to 1.030 x every limit, a different factor each run).
 * A workload never seen flat out learns from NVML's share, as before.
 *
 * Outlying flat-out windows neither, once the mark is known: NVML's period and the window do not
 * line up, so the window in which a workload stops (a pause for data or a checkpoint, its
 * exit) can read the card flat out for the few tokens it had before stopping (an H100
 * read a matmul loop's last window at 4.6 x the mark's time per token), while the window
 * in which it starts again reads below full load and is skipped, so nothing evens them
 * out. A window more than CI_FLATOUT_BAND off the mark either way is not taken (a
 * flat-out matmul loop's windows on the H100: 0.95-1.15 x); CI_FLATOUT_NEW_REGIME such
 * windows in a row are the workload changed, and the mark starts again from them.
 */
#include "ci_compute_metering.h"

#define CI_FLATOUT_WEIGHT 64      /* windows (~50 ms each): ~3 s of memory */
#define CI_FLATOUT_MIN_WINDOWS 8
#define CI_FLATOUT_MIN_SCALE 0.2  /* a tiny kernel's timing may be 5x its share */
#define CI_FLATOUT_MAX_SCALE 2.0
#define CI_FLATOUT_BAND 1.2       /* a window's ns per token against the mark's */
#define CI_FLATOUT_NEW_REGIME 8   /* outlying windows in a row: the workload changed */

/* Whether a window's time per token lies so far from the mark that it is not taken. */
static bool ci_flatout_outlier(struct ci_flatout *f, double card_ns, double tokens)
{
    if (!f->full || f->windows < CI_FLATOUT_MIN_WINDOWS)
        return false; /* NVML's share below full load: its windows' errors even out */
    double ratio = card_ns / tokens / (f->card_ns / f->card_tokens);
    if (ratio <= CI_FLATOUT_BAND && ratio >= 1.0 / CI_FLATOUT_BAND) {
        f->outliers = 0;
        return false;
    }
    if (++f->outliers < CI_FLATOUT_NEW_REGIME)
        return true;
    *f = (struct ci_flatout){.full = f->full}; /* consistently off: learnt again */
    return false;
}

bool ci_flatout_window(struct ci_flatout *f, double card_ns, double tokens, bool full)
{
    if (card_ns <= 0.0 || tokens <= 0.0 || (f->full && !full))
        return false;
    if (full && !f->full)
        *f = (struct ci_flatout){.full = true}; /* what partial windows taught: forgotten */
    else if (ci_flatout_outlier(f, card_ns, tokens))
        return false;
    double keep = 1.0 - 1.0 / CI_FLATOUT_WEIGHT;
    f->card_ns = f->card_ns * keep + card_ns;
    f->card_tokens = f->card_tokens * keep + tokens;
    f->windows++;
    return true;
}

double ci_flatout_scale(const struct ci_flatout *f, double sampled_ns_per_token)
{
    if (f->windows < CI_FLATOUT_MIN_WINDOWS || sampled_ns_per_token <= 0.0)
        return 0.0;
    double scale = f->card_ns / f->card_tokens / sampled_ns_per_token;
    if (scale < CI_FLATOUT_MIN_SCALE)
        return CI_FLATOUT_MIN_SCALE;
    return scale > CI_FLATOUT_MAX_SCALE ? CI_FLATOUT_MAX_SCALE : scale;
}
