/*
 * test_share — compute limits of workloads that time-share one GPU.
 *
 *   test_share pair A B   two workloads (own workspaces) on one shared fake GPU
 *                         with limits A % and B %. Fake NVML reports the
 *                         device's utilisation for both, as a time-sliced H200
 *                         does, so only the interceptor's own GPU-time samples
 *                         can tell each its share. On virtual time (the clock
 *                         is shared through the GPU file) after 2.5 s of settling
 *                         each one's true share over 2 s (the kernel time it
 *                         put on the GPU) must be within 2 points of its limit.
 *   test_share switching A B  a pair whose card loses 50 µs at every context switch
 *                         (FAKECUDA_SWITCH_NS), as a real one does: the lower limit
 *                         held, and the higher gets what is left within 3 points — the
 *                         lower one launches in bursts worth ~1 ms of the card, so it is
 *                         switched in ~100 times a second, not once per kernel (each
 *                         1 ms refill bought 0.1 ms of work at 10 %: ~1,000 a second
 *                         cost the card 10 % of its time).
 *   test_share workload A two processes of ONE workload (one workspace) under limit A %:
 *                         their true shares add up to within 2 points of A, and each
 *                         publishes the workload's share, not its own (each had held
 *                         its own share at A: 30 % became 60 %).
 *   test_share sampling   one limited process (virtual time): launches are timed with events,
 *                         at most one new sample per 2 ms; a stream under
 *                         capture (FAKECUDA_CAPTURING) never gets an event.
 *   test_share idle-launches  one process alone without a limit, each kernel done before
 *                         the next launch (an idle stream): in the control periods that
 *                         time every launch (2 of 20 while alone), an untimed candidate
 *                         hands the 2 ms interval to the next launch once per interval,
 *                         not at every launch (checking each one slowed a launch-bound
 *                         loop on an H100).
 */
#include <math.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "ci_test.h"

CUresult cuEventRecord(CUevent e, CUstream s);

#define SETTLE_S 2.5
#define MEASURE_S 2.0

/* Joins the shared virtual clock, then waits until every process of the run has joined
 * (CT_SHARE_START="READY_FD,GO_FD": one byte written to READY, then GO read to its end).
 * While a joined process waits here it counts as running, so time stands still: without
 * this, the first process ran alone in virtual time while the second was still starting
 * in real time (under load its settle window was over before the other's began). */
static void start_together(void)
{
    const char *fds = getenv("CT_SHARE_START");
    int ready = -1, go = -1;
    CHECK(fds != NULL && sscanf(fds, "%d,%d", &ready, &go) == 2, "CT_SHARE_START unset");
    (void)fakecuda_clock_ns();
    CHECK(write(ready, "j", 1) == 1, "cannot report joining the clock");
    close(ready);
    char c;
    while (read(go, &c, 1) > 0)
        ;
    close(go);
}

/* Launches 2-wave kernels as fast as the limit allows; prints its share. */
static int child(int target, const char *result)
{
    start_together();
    CHECK_CU(cuInit(0));
    double start = ct_now_s(), t0 = 0;
    uint64_t busy0 = 0, switches0 = 0;
    while (ct_now_s() - start < SETTLE_S + MEASURE_S) {
        if (t0 == 0 && ct_now_s() - start >= SETTLE_S) {
            t0 = ct_now_s();
            busy0 = fakecuda_own_busy_ns();
            switches0 = fakecuda_own_switches();
        }
        CHECK_CU(cuLaunchKernel((CUfunction)0x2000, 264, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
    }
    double secs = ct_now_s() - t0;
    double share = 100.0 * (double)(fakecuda_own_busy_ns() - busy0) / (secs * 1e9);
    double switches = (double)(fakecuda_own_switches() - switches0) / secs;
    struct fakecuda_sample s[512];
    int n = fakecuda_samples_since(0, s, 512);
    struct ci_region_slot *sl = ct_slot_of(ct_region(), getpid());
    FILE *f = fopen(result, "w");
    CHECK(f != NULL, "cannot write %s", result);
    fprintf(f, "%d %.2f %u %u %.1f\n", target, share, n > 0 ? s[n - 1].util : 0,
            sl != NULL ? sl->dev[0].sm_util_percent : 0, switches);
    fclose(f);
    return 0;
}

/* Runs two limited processes on one shared fake GPU (one workspace when `one_workload`,
 * else one each) and reads their true shares and published figures. */
static void run_two(const int targets[2], bool one_workload, double share[2],
                    unsigned published[2], double switches[2])
{
    const char *ws = getenv("ALNAIR_WORKSPACE");
    char gpu[1024], dir[2][1024], result[2][1024];
    snprintf(gpu, sizeof gpu, "%s/shared-gpu", ws);
    pid_t pids[2];
    int ready[2], go[2];
    CHECK(pipe(ready) == 0 && pipe(go) == 0, "pipe");
    char start[32];
    snprintf(start, sizeof start, "%d,%d", ready[1], go[0]);
    for (int i = 0; i < 2; i++) {
        snprintf(dir[i], sizeof dir[i], "%s/w%d", ws, one_workload ? 0 : i);
        snprintf(result[i], sizeof result[i], "%s/result%d", ws, i);
        mkdir(dir[i], 0700);
        char limit[16];
        snprintf(limit, sizeof limit, "%d", targets[i]);
        pids[i] = fork();
        CHECK(pids[i] >= 0, "fork");
        if (pids[i] == 0) {
            close(ready[0]);
            close(go[1]);
            setenv("CT_SHARE_START", start, 1);
            setenv("ALNAIR_WORKSPACE", dir[i], 1);
            setenv("ALNAIR_VGPU_COMPUTE_PERCENT", limit, 1);
            setenv("FAKECUDA_SHARED_GPU", gpu, 1);
            execl("/proc/self/exe", "test_share", "child", limit, result[i], (char *)NULL);
            _exit(127);
        }
    }
    close(ready[1]);
    close(go[0]);
    char joined[2];
    for (size_t got = 0; got < sizeof joined;) {
        ssize_t n = read(ready[0], joined + got, sizeof joined - got);
        CHECK(n > 0, "a workload exited before it joined the clock");
        got += (size_t)n;
    }
    close(ready[0]);
    close(go[1]); /* both joined: they start on one time line */
    for (int i = 0; i < 2; i++) {
        int st = 0;
        CHECK(waitpid(pids[i], &st, 0) == pids[i] && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "workload %d failed (status %d)", i, st);
    }
    for (int i = 0; i < 2; i++) {
        FILE *f = fopen(result[i], "r");
        CHECK(f != NULL, "no result from process %d", i);
        int target = 0;
        unsigned nvml = 0;
        CHECK(fscanf(f, "%d %lf %u %u %lf", &target, &share[i], &nvml, &published[i],
                     &switches[i]) == 5, "result");
        fclose(f);
        printf("process %d, limit %d%%: true share %.1f%%, NVML per-process %u%%, published "
               "%u%%, switched in %.0f times a second\n", i, target, share[i], nvml,
               published[i], switches[i]);
    }
}

static void pair(int a, int b)
{
    int targets[2] = {a, b};
    double share[2], switches[2];
    unsigned published[2];
    run_two(targets, false, share, published, switches);
    for (int i = 0; i < 2; i++) {
        CHECK(fabs(share[i] - targets[i]) <= 2.0, "share %.1f vs limit %d", share[i], targets[i]);
        CHECK(abs((int)published[i] - targets[i]) <= 3, "published %u vs limit %d",
              published[i], targets[i]);
    }
    printf("ok co-located shares held to their limits\n");
}

static void switching(int low, int high)
{
    setenv("FAKECUDA_SWITCH_NS", "50000", 1);
    int targets[2] = {low, high};
    double share[2], switches[2];
    unsigned published[2];
    run_two(targets, false, share, published, switches);
    CHECK(fabs(share[0] - low) <= 2.0, "share %.1f vs limit %d", share[0], low);
    CHECK(switches[0] <= 200.0, "the %d %% tenant was switched in %.0f times a second: it "
          "launches in bursts too small", low, switches[0]);
    CHECK(share[1] >= 100.0 - share[0] - 3.0, "the %d %% tenant got %.1f %% where %.1f %% was "
          "left", high, share[1], 100.0 - share[0]);
    printf("ok the lower limit held in few bursts, the higher got what was left "
           "(%.1f %% of the card in switches)\n", 100.0 - share[0] - share[1]);
}

static void workload(int limit)
{
    int targets[2] = {limit, limit};
    double share[2], switches[2];
    unsigned published[2];
    run_two(targets, true, share, published, switches);
    double total = share[0] + share[1];
    printf("the workload's two processes together: %.1f%% under a %d%% limit\n", total, limit);
    CHECK(fabs(total - limit) <= 2.0, "the workload got %.1f%% under a %d%% limit", total, limit);
    for (int i = 0; i < 2; i++)
        CHECK(abs((int)published[i] - limit) <= 3, "process %d published %u%%, not the "
              "workload's share near %d%%", i, published[i], limit);
    printf("ok a workload's processes share its limit\n");
}

static unsigned long launch_for(double seconds)
{
    unsigned long n = 0;
    double start = ct_now_s();
    while (ct_now_s() - start < seconds) {
        CHECK_CU(cuLaunchKernel((CUfunction)0x3000, 132, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
        n++;
    }
    return n;
}

static void sampling(void)
{
    ct_set_env("ALNAIR_VGPU_COMPUTE_PERCENT", "50");
    CHECK_CU(cuInit(0));
    ct_sleep_ms(150); /* the monitor's first control step turns sampling on */
    unsigned long before = fakecuda_calls("cuEventRecord");
    double start = ct_now_s();
    unsigned long launches = launch_for(1.0);
    double secs = ct_now_s() - start;
    unsigned long records = fakecuda_calls("cuEventRecord") - before;
    printf("%lu launches, %lu event records in %.2f s\n", launches, records, secs);
    CHECK(records >= 20, "only %lu event records: launches are not being timed", records);
    CHECK(records <= 2 * (unsigned long)(secs / 0.002) + 4, "%lu records: not rate-limited", records);
    CHECK(fakecuda_calls("cuEventElapsedTime_v2") > 0, "samples were never read back");
    setenv("FAKECUDA_CAPTURING", "1", 1);
    before = fakecuda_calls("cuEventRecord");
    unsigned long checks = fakecuda_calls("cuStreamIsCapturing");
    launch_for(0.3);
    CHECK(fakecuda_calls("cuStreamIsCapturing") > checks, "capture state never checked");
    CHECK(fakecuda_calls("cuEventRecord") == before, "an event was recorded into a capturing stream");
    printf("ok launches sampled, rate-limited, never inside a capture\n");
}

static void idle_launches(void)
{
    CHECK_CU(cuInit(0));
    unsigned long checks0 = fakecuda_calls("cuStreamIsCapturing"), launches = 0;
    double start = ct_now_s();
    while (ct_now_s() - start < 3.0) {
        CHECK_CU(cuLaunchKernel((CUfunction)0x3000, 132, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
        fakecuda_clock_sleep_ns(100000); /* the 20 µs kernel is done before the next launch */
        launches++;
    }
    double secs = ct_now_s() - start;
    unsigned long checks = fakecuda_calls("cuStreamIsCapturing") - checks0;
    /* every launch is a candidate in 2 control periods of 20: ~10 % of the time */
    unsigned long bound = 2 * (unsigned long)(0.1 * secs / 0.002 * 1.5) + 8;
    printf("%lu launches into an idle stream in %.1f s, %lu checked (at most %lu)\n", launches,
           secs, checks, bound);
    CHECK(checks > 0, "no launch was ever a candidate: the reference windows did not sample");
    CHECK(checks <= bound, "%lu of %lu idle launches checked", checks, launches);
    printf("ok an idle stream's launches are checked at most twice an interval\n");
}

int main(int argc, char **argv)
{
    /* Virtual time (tests/fake/fake_clock.c), shared by both workloads of a pair
     * through the shared GPU file: what they get does not depend on the machine. */
    ct_set_env("FAKECUDA_VIRTUAL_TIME", "1");
    if (argc == 4 && strcmp(argv[1], "child") == 0)
        return child(atoi(argv[2]), argv[3]);
    if (argc == 4 && strcmp(argv[1], "pair") == 0)
        pair(atoi(argv[2]), atoi(argv[3]));
    else if (argc == 4 && strcmp(argv[1], "switching") == 0)
        switching(atoi(argv[2]), atoi(argv[3]));
    else if (argc == 3 && strcmp(argv[1], "workload") == 0)
        workload(atoi(argv[2]));
    else if (argc == 2 && strcmp(argv[1], "sampling") == 0)
        sampling();
    else if (argc == 2 && strcmp(argv[1], "idle-launches") == 0)
        idle_launches();
    else
        CHECK(0, "usage: test_share pair A B | workload A | sampling | idle-launches");
    return 0;
}
