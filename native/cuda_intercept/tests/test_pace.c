/*
 * test_pace TARGET [start-limited] — a workload that cannot fill the card alone (a
 * launch-bound loop: a 40 µs kernel, then 160 µs of host work while it runs: 25 % of the card busy)
 * is limited to a share of its own pace, not of the card's time: a time limit above the
 * 25 % it uses would not bind it at all, and one below would give it four times its
 * limit in work.
 *
 * Virtual time. The loop runs 1.5 s without a limit (its work over the last second is
 * its pace alone), then the limit is set live through the region header; after 2.5 s of
 * settling its work over the next 2 s must be within 2 points of TARGET % of that pace.
 *
 * "start-limited": the limit holds from the first launch, so its pace alone is never
 * seen: the limit is a share of the card's time (the card's busy time at most TARGET
 * + 2 points, and no less than the lesser of TARGET and the loop's own 25 %, - 2).
 *
 * "timed-slower": the loop's 40 µs are two 20 µs kernels back to back, so the second goes
 * into a busy stream and is timed, on a card where a timed kernel runs 5x longer
 * (FAKECUDA_TIMED_KERNEL_PERCENT=400: an event pair around a tiny kernel on a real card is
 * mostly its own overhead). The samples then say the loop fills the card; what they are
 * worth is learnt alone (NVML: 25 % busy), so the time measurement does not bind below
 * the pace cap (the free run is 3 s here).
 *
 * "paused": the loop stops launching for 150 ms between its free run and the limit (as
 * a script does when it changes phase, or a trainer at a checkpoint); a window the loop
 * spent partly idle is no measure of its pace (on an H100 one such window before the limit
 * set the pace 6 % low: a launch-bound loop got 0.94 x every limit).
 */
#include <math.h>
#include <stdbool.h>

#include "ci_test.h"

#define FREE_S 1.5
#define SETTLE_S 2.5
#define MEASURE_S 2.0
#define HOST_NS 160000ull

static bool two_kernels; /* "timed-slower" */
#define PAUSE_NS 150000000ull /* "paused" */

static void step(void)
{
    /* 132 blocks on the fake's 132 SMs: one 20 µs wave; 264: two, 40 µs */
    if (two_kernels) {
        CHECK_CU(cuLaunchKernel((CUfunction)0x4000, 132, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
        CHECK_CU(cuLaunchKernel((CUfunction)0x4000, 132, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
    } else {
        CHECK_CU(cuLaunchKernel((CUfunction)0x4000, 264, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
    }
    fakecuda_clock_sleep_ns(HOST_NS);
}

/* Work (nominal kernel ns) per second over [from, until) of the loop's time. */
static double run_for(double until_s, double from_s, double start)
{
    uint64_t work0 = 0;
    double t0 = 0.0;
    while (ct_now_s() - start < until_s) {
        if (t0 == 0.0 && ct_now_s() - start >= from_s) {
            t0 = ct_now_s();
            work0 = fakecuda_own_busy_ns();
        }
        step();
    }
    return (double)(fakecuda_own_busy_ns() - work0) / (ct_now_s() - t0);
}

int main(int argc, char **argv)
{
    CHECK(argc >= 2, "usage: test_pace TARGET [start-limited|timed-slower|paused]");
    int target = atoi(argv[1]);
    bool start_limited = argc > 2 && strcmp(argv[2], "start-limited") == 0;
    two_kernels = argc > 2 && strcmp(argv[2], "timed-slower") == 0;
    bool paused = argc > 2 && strcmp(argv[2], "paused") == 0;
    ct_set_env("FAKECUDA_VIRTUAL_TIME", "1");
    if (two_kernels)
        ct_set_env("FAKECUDA_TIMED_KERNEL_PERCENT", "400");
    if (start_limited)
        ct_set_env("ALNAIR_VGPU_COMPUTE_PERCENT", argv[1]);
    CHECK_CU(cuInit(0));
    struct ci_region *r = ct_region();
    double start = ct_now_s();
    double alone = 0.0;
    if (!start_limited) {
        /* timed-slower: 3 s free, so that what the samples are worth is surely learnt
         * (launches are timed in 2 control periods of 20 while alone) */
        double free_s = two_kernels ? 3.0 : FREE_S;
        alone = run_for(free_s, free_s - 1.0, start);
        if (paused)
            fakecuda_clock_sleep_ns(PAUSE_NS);
        __atomic_store_n(&r->header.compute_percent, (uint32_t)target, __ATOMIC_RELAXED);
        start = ct_now_s();
    }
    double work = run_for(SETTLE_S + MEASURE_S, SETTLE_S, start);
    if (start_limited) {
        double busy_pct = 100.0 * work / 1e9; /* no boost here: work is the card's time */
        printf("target %d%% limited from the start: card busy %.2f%% of the time\n", target,
               busy_pct);
        double floor = target < 25 ? target : 25.0;
        CHECK(busy_pct <= target + 2.0, "time share %.2f above target %d", busy_pct, target);
        CHECK(busy_pct >= floor - 2.0, "time share %.2f: limited below %.0f", busy_pct, floor);
    } else {
        double share = 100.0 * work / alone;
        printf("target %d%% limited after a free run: %.2f%% of its pace alone (card busy "
               "%.2f%% alone, %.2f%% limited)\n", target, share, 100.0 * alone / 1e9,
               100.0 * work / 1e9);
        CHECK(alone > 0.2e9 && alone < 0.3e9, "the loop used %.1f%% of the card alone, not ~25",
              100.0 * alone / 1e9);
        CHECK(fabs(share - target) <= 2.0, "work share %.2f of its pace vs target %d", share,
              target);
    }
    printf("ok limit held against the loop's own pace\n");
    return 0;
}
