/*
 * test_mps MODE — MPS mode (ci_mps.c), with this program playing the device plugin
 * (the fixed limits file) and, where it says so, the tenant:
 *
 *   env          a limits file with mps_pipe_directory: the tenant starts the workload
 *                with MPS variables of its own and changes them again while it runs; the
 *                fake driver's first cuDriverGetVersion (not hooked: only the library
 *                constructor can have acted), its first cuInit (changed again after the
 *                first hooked call) and every context creation see the limits' values;
 *                each replaced value is reported once (debug);
 *   untouched    no mps_pipe_directory: the tenant's MPS variables reach the driver as
 *                they were, and the limits still hold;
 *   no-throttle  MPS mode with a control daemon (a socket at <pipe>/control): a compute
 *                limit of 30 % delays no launch (on the throttle cases' virtual clock the
 *                simulated GPU stays ~100 % busy where test_throttle lands on 30 %), while
 *                the counters, the launch signature and the GPU-time measurement go on
 *                and the memory limit still refuses;
 *   no-daemon    MPS mode without a daemon (the driver would run without MPS): the
 *                throttle still holds 30 %, with one line saying why;
 *   bad-directory  mps_pipe_directory = relative/pipe: one "invalid" line, no MPS
 *                variable touched, the strictest limits (no memory, 1 %).
 */
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "ci_test.h"

#define MiB (1u << 20)

/* Not hooked: the program's call goes straight to the driver. */
CUresult cuDriverGetVersion(int *version);

static const char *const PIPE = "CUDA_MPS_PIPE_DIRECTORY";
static const char *const THREADS = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
static const char *const PINNED = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
static const char *const LIMITS_PIPE = "/run/alnair/mps/GPU-test/pipe";

static const char *workspace(void)
{
    const char *ws = getenv("ALNAIR_WORKSPACE");
    CHECK(ws != NULL, "ALNAIR_WORKSPACE not set");
    return ws;
}

/* Plays the device plugin: the fixed file with `extra` and the empty region. */
static void plugin(const char *extra)
{
    char text[2048];
    snprintf(text, sizeof text, "workload_id = ns/pod\nworkspace = %s\n%s", workspace(), extra);
    ct_container(text, workspace(), 1);
}

/* The driver's first call of `entry` saw `var` as `want` (NULL: unset). */
static void seen(const char *entry, const char *var, const char *want)
{
    char got[256];
    int rc = fakecuda_env_seen(entry, var, got, sizeof got);
    CHECK(rc >= 0, "%s was not called", entry);
    if (want == NULL)
        CHECK(rc == 0, "%s saw %s=\"%s\", want it unset", entry, var, got);
    else
        CHECK(rc == 1 && strcmp(got, want) == 0, "%s saw %s %s\"%s\", want \"%s\"", entry, var,
              rc ? "=" : "unset ", got, want);
}

static void env_is(const char *var, const char *want)
{
    const char *got = getenv(var);
    if (want == NULL)
        CHECK(got == NULL, "%s=\"%s\", want it unset", var, got);
    else
        CHECK(got != NULL && strcmp(got, want) == 0, "%s=\"%s\", want \"%s\"", var,
              got ? got : "(unset)", want);
}

/* Runs this program as the workload `child <mode>` with stderr into `log`, the
 * environment as the tenant left it; returns its exit status and copies its output. */
static int run_workload(const char *mode, const char *log)
{
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 2) < 0)
            _exit(126);
        execl("/proc/self/exe", "test_mps", "child", mode, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    FILE *f = fopen(log, "r");
    char line[600];
    while (f != NULL && fgets(line, sizeof line, f))
        fputs(line, stdout);
    if (f != NULL)
        fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ---- env ---------------------------------------------------------------------------- */

static const char *const WANT_PINNED = "0=4096M,1=4096M"; /* 4097 MiB - 1 byte, 2 devices */

static void child_env(void)
{
    /* Before the program's first driver call: the library constructor wrote them. */
    env_is(PIPE, LIMITS_PIPE);
    env_is(THREADS, "30");
    env_is(PINNED, WANT_PINNED);
    int version = 0;
    CHECK_CU(cuDriverGetVersion(&version));
    seen("cuDriverGetVersion", PIPE, LIMITS_PIPE);
    seen("cuDriverGetVersion", THREADS, "30");
    seen("cuDriverGetVersion", PINNED, WANT_PINNED);
    /* The program changes them while it runs: put back when the first hooked call (the
     * CUDA runtime's first, cuGetProcAddress) opens the driver, ... */
    ct_set_env(THREADS, "100");
    ct_set_env(PIPE, "/tmp/tenant-elsewhere");
    unsetenv(PINNED);
    CUresult (*init)(unsigned int) = NULL;
    CHECK_CU(cuGetProcAddress("cuInit", (void **)&init, 12000, 0));
    env_is(THREADS, "30");
    env_is(PINNED, WANT_PINNED);
    /* ... before the real cuInit ... */
    ct_set_env(THREADS, "100");
    ct_set_env(PIPE, "/tmp/tenant-elsewhere");
    unsetenv(PINNED);
    CHECK_CU(init(0));
    seen("cuInit", PIPE, LIMITS_PIPE);
    seen("cuInit", THREADS, "30");
    seen("cuInit", PINNED, WANT_PINNED);
    ct_set_env(THREADS, "100"); /* every cuInit, the limits loaded */
    CHECK_CU(cuInit(0));
    env_is(THREADS, "30");
    /* ... and before a context is created. */
    ct_set_env(THREADS, "90");
    CUcontext ctx;
    CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
    env_is(THREADS, "30");
    printf("ok the limits' MPS settings at the first driver call, cuInit and context creation\n");
}

static void env_case(void)
{
    plugin("mps_pipe_directory = /run/alnair/mps/GPU-test/pipe\n"
           "compute_percent = 30\nmemory_bytes = 4296015871\n"); /* 4 GiB + 1 MiB - 1 */
    /* The tenant's own settings, in the environment the workload starts with. */
    ct_set_env(PIPE, "/tmp/tenant-mps");
    ct_set_env(THREADS, "100");
    ct_set_env(PINNED, "0=80G");
    ct_set_env("CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b");
    ct_set_env("ALNAIR_CUDA_DEBUG", "1");
    char log[1100];
    snprintf(log, sizeof log, "%s/workload.txt", workspace());
    CHECK(run_workload("env", log) == 0, "the workload failed");
    /* Replaced five times (constructor, driver opened, two cuInits, context), reported once. */
    CHECK(ct_count_lines_with(log, "replacing the process's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=\"100\"") == 1,
          "one report of the replaced percentage");
    CHECK(ct_count_lines_with(log, "replacing the process's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == 1,
          "reported once");
    CHECK(ct_count_lines_with(log, "replacing the process's CUDA_MPS_PIPE_DIRECTORY=\"/tmp/tenant-mps\"") == 1,
          "one report of the replaced pipe directory");
    CHECK(ct_count_lines_with(log, "replacing the process's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=\"0=80G\"") == 1,
          "one report of the replaced pinned limit");
    printf("ok the tenant's MPS variables overwritten, each reported once\n");
}

/* ---- untouched ---------------------------------------------------------------------- */

static void child_untouched(void)
{
    int version = 0;
    CHECK_CU(cuDriverGetVersion(&version));
    CHECK_CU(cuInit(0));
    CUcontext ctx;
    CHECK_CU(cuDevicePrimaryCtxRetain(&ctx, 0));
    static const char *const entries[] = {"cuDriverGetVersion", "cuInit"};
    for (int i = 0; i < 2; i++) {
        seen(entries[i], PIPE, "/tmp/tenant-mps");
        seen(entries[i], THREADS, "77");
        seen(entries[i], PINNED, NULL);
    }
    env_is(THREADS, "77");
    CUdeviceptr a, b;
    CHECK_CU(cuMemAlloc_v2(&a, 3 * MiB));
    CHECK(cuMemAlloc_v2(&b, 2 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "the 4 MiB limit holds");
    CHECK(ct_region()->header.compute_percent == 30, "the compute limit is published");
    printf("ok without mps_pipe_directory the tenant's MPS variables are left alone\n");
}

static void untouched_case(void)
{
    plugin("compute_percent = 30\nmemory_bytes = 4Mi\n");
    ct_set_env(PIPE, "/tmp/tenant-mps");
    ct_set_env(THREADS, "77");
    unsetenv(PINNED);
    ct_set_env("ALNAIR_CUDA_DEBUG", "1");
    char log[1100];
    snprintf(log, sizeof log, "%s/workload.txt", workspace());
    CHECK(run_workload("untouched", log) == 0, "the workload failed");
    CHECK(ct_count_lines_with(log, "MPS mode") == 0, "no MPS mode without the key");
}

/* ---- no-throttle, no-daemon --------------------------------------------------------- */

#define K(i) ((CUfunction)(uintptr_t)(0x9000 + 64 * (i)))

/* A pipe directory in /tmp (a socket's path must stay short), with the control daemon's
 * socket when `daemon`. */
static void pipe_directory(char *dir, size_t len, bool daemon, int *sock)
{
    snprintf(dir, len, "/tmp/alnair-mps-XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    *sock = -1;
    if (!daemon)
        return;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/control", dir);
    *sock = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(*sock >= 0 && bind(*sock, (struct sockaddr *)&sa, sizeof sa) == 0, "bind %s", sa.sun_path);
}

static void pipe_directory_remove(const char *dir, int sock)
{
    char path[200];
    snprintf(path, sizeof path, "%s/control", dir);
    if (sock >= 0)
        close(sock);
    unlink(path);
    rmdir(dir);
}

/* Launches a 4-kernel "iteration" of 512-block grids flat out for 4.2 s of virtual time;
 * returns the mean utilisation of the simulated GPU after a 2 s settling time. */
static double flat_out(unsigned long *launches)
{
    double start = ct_now_s();
    uint64_t settle_us = fakecuda_clock_unix_ns() / 1000 + 2000000;
    *launches = 0;
    while (ct_now_s() - start < 4.2) {
        CHECK_CU(cuLaunchKernel(K(*launches % 4), 512, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
        (*launches)++;
    }
    struct fakecuda_sample s[512];
    int n = fakecuda_samples_since(settle_us, s, 512);
    CHECK(n >= 30, "only %d samples after settling", n);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += s[i].util;
    return sum / n;
}

static void throttle_case(bool daemon)
{
    char dir[64], extra[512], log[1100];
    int sock;
    pipe_directory(dir, sizeof dir, daemon, &sock);
    snprintf(extra, sizeof extra, "mps_pipe_directory = %s\ncompute_percent = 30\nmemory_bytes = 4Mi\n",
             dir);
    plugin(extra);
    ct_set_env("FAKECUDA_VIRTUAL_TIME", "1");
    ct_set_env("FAKECUDA_SMS", "132");
    ct_set_env("CUDA_VISIBLE_DEVICES", "GPU-test");
    snprintf(log, sizeof log, "%s/stderr.txt", workspace());
    int saved = ct_capture_stderr(log); /* the first hooked call loads the limits */
    CUresult init = cuInit(0);
    dup2(saved, 2);
    CHECK_CU(init);
    unsigned long launches;
    double mean = flat_out(&launches);
    pipe_directory_remove(dir, sock);
    env_is(THREADS, "30");
    env_is(PINNED, "0=4M");
    struct ci_region *r = ct_region();
    struct ci_region_slot *sl = ct_slot_of(r, getpid());
    CHECK(sl != NULL, "slot");
    uint64_t counted = CT_WAIT_FIELD(sl, 0, kernel_launches, launches);
    printf("MPS mode, %s daemon, compute limit 30%%: mean %.2f%%, %lu launches (%llu counted), "
           "throttled %llu ns, rate %llu/s, util %u%% from source %u\n", daemon ? "with" : "without",
           mean, launches, (unsigned long long)counted,
           (unsigned long long)sl->dev[0].throttled_ns,
           (unsigned long long)sl->dev[0].token_rate_per_s, sl->dev[0].sm_util_percent,
           sl->dev[0].sm_util_source);
    CHECK(counted == launches, "every launch counted");
    CHECK(r->header.compute_percent == 30, "the compute limit is published: %u",
          r->header.compute_percent);
    /* The GPU-time measurement goes on in both: it feeds the published utilisation. */
    CHECK(sl->dev[0].sm_util_source == CI_UTIL_SOURCE_GPUTIME, "source %u, not GPU time",
          sl->dev[0].sm_util_source);
    if (daemon) {
        CHECK(mean >= 99.0, "the SM partition is the limit: no throttle on top (mean %.2f)", mean);
        CHECK(sl->dev[0].throttled_ns == 0 && sl->dev[0].token_rate_per_s == 0,
              "no launch delayed");
        CHECK(sl->dev[0].sm_util_percent >= 95, "measured %u%%", sl->dev[0].sm_util_percent);
        for (int i = 0; i < 200 && __atomic_load_n(&sl->iterations, __ATOMIC_ACQUIRE) < 10; i++)
            ct_sleep_ms(10);
        CHECK(sl->iteration_period_launches == 4 && sl->iterations >= 10,
              "launch signature: period %llu, %llu iterations",
              (unsigned long long)sl->iteration_period_launches,
              (unsigned long long)sl->iterations);
        CHECK(ct_count_lines_with(log, "no MPS control daemon") == 0, "no complaint");
    } else {
        CHECK(mean > 28.5 && mean < 31.5, "without a daemon the throttle holds 30%% (mean %.2f)", mean);
        CHECK(sl->dev[0].throttled_ns > 0, "launches delayed");
        CHECK(ct_count_lines_with(log, "no MPS control daemon") == 1, "one line says why");
    }
    /* Memory is the interceptor's in both modes. */
    CUdeviceptr p;
    unsigned granted = 0;
    while (granted < 64 && cuMemAlloc_v2(&p, MiB) == CUDA_SUCCESS)
        granted++;
    CHECK(granted == 4, "the 4 MiB limit holds: %u MiB granted", granted);
    size_t fr, total;
    CHECK_CU(cuMemGetInfo_v2(&fr, &total));
    CHECK(total == 4 * MiB && fr == 0, "virtualised memory info %zu/%zu", fr, total);
    printf("ok MPS mode %s: %s; memory limit enforced\n", daemon ? "with its daemon" : "without a daemon",
           daemon ? "the compute limit delays no launch, measurement goes on"
                  : "the throttle enforces the compute limit");
}

/* ---- bad-directory ------------------------------------------------------------------ */

static void bad_directory_case(void)
{
    plugin("mps_pipe_directory = relative/pipe\ncompute_percent = 50\nmemory_bytes = 4Mi\n");
    unsetenv(PIPE);
    unsetenv(PINNED);
    ct_set_env(THREADS, "77");
    char log[1100];
    snprintf(log, sizeof log, "%s/stderr.txt", workspace());
    int saved = ct_capture_stderr(log);
    CHECK_CU(cuInit(0));
    CUdeviceptr a;
    CUresult r1 = cuMemAlloc_v2(&a, 1);
    dup2(saved, 2);
    CHECK(ct_count_lines_with(log, "invalid mps_pipe_directory") == 1, "one line says why");
    CHECK(r1 == CUDA_ERROR_OUT_OF_MEMORY, "an invalid mps_pipe_directory refuses allocations");
    struct ci_region *r = ct_region();
    CHECK(r->header.memory_limit_bytes == 0 && r->header.compute_percent == 1,
          "the strictest limits: %llu bytes, %u%%", (unsigned long long)r->header.memory_limit_bytes,
          r->header.compute_percent);
    seen("cuInit", PIPE, NULL);
    seen("cuInit", THREADS, "77");
    seen("cuInit", PINNED, NULL);
    printf("ok a relative mps_pipe_directory: refused, strictest limits, no MPS variable touched\n");
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "child") == 0) {
        if (strcmp(argv[2], "env") == 0)
            child_env();
        else if (strcmp(argv[2], "untouched") == 0)
            child_untouched();
        else
            CHECK(0, "unknown child mode %s", argv[2]);
        return 0;
    }
    CHECK(argc == 2, "usage: test_mps MODE");
    if (strcmp(argv[1], "env") == 0)
        env_case();
    else if (strcmp(argv[1], "untouched") == 0)
        untouched_case();
    else if (strcmp(argv[1], "no-throttle") == 0)
        throttle_case(true);
    else if (strcmp(argv[1], "no-daemon") == 0)
        throttle_case(false);
    else if (strcmp(argv[1], "bad-directory") == 0)
        bad_directory_case();
    else
        CHECK(0, "unknown mode %s", argv[1]);
    return 0;
}
