/*
 * test_throttle TARGET SMS GRID [pidns|realtime] — the compute limit converges on the
 * target under utilisation feedback from the fake NVML, on a simulated GPU of
 * SMS multiprocessors, with kernels of GRID blocks launched as fast as the
 * bucket allows. On virtual time (tests/fake/fake_clock.c; the machine's load
 * cannot change the result): after a 2 s settling time the mean utilisation
 * over the next 2 s must be within 1.5 points of the target and no sample may
 * stray more than 10 (no oscillation). "pidns" makes NVML report pids the
 * process does not know (a pid namespace): the monitor must fall back to
 * whole-device utilisation and still enforce. "realtime" is the smoke case on
 * the real clock: the same run, loose bounds (mean within 10 points), since a
 * loaded machine steals the launcher's time.
 */
#include <math.h>
#include <stdbool.h>

#include "ci_test.h"

int main(int argc, char **argv)
{
    CHECK(argc >= 4, "usage: test_throttle TARGET SMS GRID [pidns|realtime]");
    int target = atoi(argv[1]);
    unsigned grid = (unsigned)atoi(argv[3]);
    bool realtime = argc > 4 && strcmp(argv[4], "realtime") == 0;
    double max_mean_off = realtime ? 10.0 : 1.5, max_worst = realtime ? 40.0 : 10.0;
    if (!realtime)
        ct_set_env("FAKECUDA_VIRTUAL_TIME", "1");
    ct_set_env("ALNAIR_VGPU_COMPUTE_PERCENT", argv[1]);
    ct_set_env("FAKECUDA_SMS", argv[2]);
    if (argc > 4 && strcmp(argv[4], "pidns") == 0)
        ct_set_env("FAKENVML_PID_OFFSET", "1000000");
    CHECK_CU(cuInit(0));
    double start = ct_now_s();
    uint64_t settle_us = fakecuda_clock_unix_ns() / 1000 + 2000000;
    unsigned long launches = 0;
    while (ct_now_s() - start < 4.2) {
        CHECK_CU(cuLaunchKernel((CUfunction)0x1000, grid, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
        launches++;
    }
    struct fakecuda_sample s[512];
    int n = fakecuda_samples_since(settle_us, s, 512);
    CHECK(n >= 30, "only %d samples after settling", n);
    double sum = 0, worst = 0;
    for (int i = 0; i < n; i++) {
        sum += s[i].util;
        double d = fabs((double)s[i].util - target);
        if (d > worst)
            worst = d;
    }
    double mean = sum / n;
    printf("target %d%% sms %s grid %u (%s time): mean %.2f%% over %d samples, worst sample "
           "off by %.0f, %lu launches\n", target, argv[2], grid, realtime ? "real" : "virtual",
           mean, n, worst, launches);
    CHECK(fabs(mean - target) <= max_mean_off, "mean %.2f vs target %d", mean, target);
    CHECK(worst <= max_worst, "a sample strayed %.0f points (oscillation)", worst);
    struct ci_region *r = ct_region();
    struct ci_region_slot *sl = ct_slot_of(r, getpid());
    CHECK(sl != NULL && sl->dev[0].token_rate_per_s > 0 && sl->dev[0].throttled_ns > 0,
          "bucket published as active");
    /* Alone too, the controller is fed the interceptor's own GPU-time measurement. */
    CHECK(sl->dev[0].sm_util_source == CI_UTIL_SOURCE_GPUTIME, "fed by source %u, not GPU time",
          sl->dev[0].sm_util_source);
    printf("ok throttled to target\n");
    return 0;
}
