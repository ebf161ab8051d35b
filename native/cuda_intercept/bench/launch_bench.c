/*
 * launch_bench LIB [SCALE] — what the interceptor adds per driver call, in ns.
 *
 * Runs itself three times with LIB (the release library) preloaded over the fake
 * driver in its benchmark mode (FAKECUDA_BENCH=1: launches are free and uncounted), in a
 * fresh workspace (so memory goes through the ledger on the region file, as in a
 * workload): no limit, a memory limit (8 GiB), a compute limit (50 %). Each child times,
 * interleaved, the same calls made through the interceptor (the exported symbols) and
 * straight into the fake driver (its own function pointers): cuLaunchKernel,
 * cuMemAlloc_v2 + cuMemFree_v2 of 1 MiB (one pair) and cuGetProcAddress_v2 of
 * "cuLaunchKernel". Each figure is the median over ROUNDS rounds of ns per call; "added"
 * is the difference. SCALE (default 1) multiplies the iteration counts (CI runs 0.01).
 *
 * A compute limit that never binds is measured (the fake reports no utilisation, so the
 * controller stays in its unthrottled ramp-up): what is timed is the launch path's
 * bookkeeping and GPU-time sampling, not waiting for tokens.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ci_cuda.h"
#include "fake_control.h"

#define ROUNDS 7

CUresult cuInit(unsigned int flags);
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned sh, CUstream s, void **p, void **e);
CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes);
CUresult cuMemFree_v2(CUdeviceptr dptr);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status);

typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);
typedef CUresult (*free_fn)(CUdeviceptr);
typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *);

struct calls {
    launch_fn launch;
    alloc_fn alloc;
    free_fn release;
    gpa_fn gpa;
};

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* ns per call of operation `op` (0 launch, 1 alloc+free, 2 lookup) through `c`. */
static double time_op(const struct calls *c, int op, long iters)
{
    double t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        if (op == 0) {
            if (c->launch((CUfunction)0x1000, 132, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL) != 0)
                exit(2);
        } else if (op == 1) {
            CUdeviceptr p = 0;
            if (c->alloc(&p, 1u << 20) != 0 || c->release(p) != 0)
                exit(3);
        } else {
            void *fn = NULL;
            CUdriverProcAddressQueryResult st;
            if (c->gpa("cuLaunchKernel", &fn, 12000, 0, &st) != 0 || fn == NULL)
                exit(4);
        }
    }
    return (now_ns() - t0) / (double)iters;
}

static int child(const char *mode, double scale)
{
    if (cuInit(0) != CUDA_SUCCESS)
        return 1;
    struct timespec settle = {0, 150000000L}; /* the monitor's first control steps */
    nanosleep(&settle, NULL);
    struct calls hooked = {cuLaunchKernel, cuMemAlloc_v2, cuMemFree_v2, cuGetProcAddress_v2};
    struct calls native = {(launch_fn)fakecuda_real("cuLaunchKernel"),
                           (alloc_fn)fakecuda_real("cuMemAlloc_v2"),
                           (free_fn)fakecuda_real("cuMemFree_v2"),
                           (gpa_fn)fakecuda_real("cuGetProcAddress_v2")};
    if (native.launch == NULL || native.alloc == NULL || native.release == NULL ||
        native.gpa == NULL || (void *)native.launch == (void *)hooked.launch)
        return 1;
    static const char *names[] = {"cuLaunchKernel", "cuMemAlloc+cuMemFree", "cuGetProcAddress_v2"};
    static const long base_iters[] = {2000000, 100000, 200000};
    for (int op = 0; op < 3; op++) {
        long iters = (long)((double)base_iters[op] * scale);
        if (iters < 100)
            iters = 100;
        time_op(&hooked, op, iters / 10 + 1); /* warm up both */
        time_op(&native, op, iters / 10 + 1);
        double h[ROUNDS], n[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) {
            h[r] = time_op(&hooked, op, iters);
            n[r] = time_op(&native, op, iters);
        }
        double mh = median(h, ROUNDS), mn = median(n, ROUNDS);
        printf("| %-7s | %-22s | %9ld | %9.1f | %9.1f | %9.1f |\n", mode, names[op], iters, mn,
               mh, mh - mn);
    }
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && strcmp(argv[1], "child") == 0)
        return child(argv[2], atof(argv[3]));
    if (argc < 2) {
        fprintf(stderr, "usage: launch_bench LIB [SCALE]\n");
        return 2;
    }
    const char *lib = argv[1];
    const char *scale = argc > 2 ? argv[2] : "1";
    char ws_template[] = "/tmp/alnair-launch-bench-XXXXXX";
    char *ws = mkdtemp(ws_template);
    if (ws == NULL || access(lib, R_OK) != 0) {
        perror("launch_bench");
        return 2;
    }
    printf("| limit   | call                   | calls/rnd | native ns | hooked ns |  added ns |\n");
    printf("|---------|------------------------|-----------|-----------|-----------|-----------|\n");
    fflush(stdout);
    static const char *modes[] = {"none", "memory", "compute"};
    int failed = 0;
    for (int m = 0; m < 3; m++) {
        char region[1200];
        snprintf(region, sizeof region, "%s/cuda.region", ws);
        unlink(region);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("LD_PRELOAD", lib, 1);
            setenv("FAKECUDA_BENCH", "1", 1);
            setenv("ALNAIR_WORKSPACE", ws, 1);
            unsetenv("ALNAIR_VGPU_MEMORY_BYTES");
            unsetenv("ALNAIR_VGPU_COMPUTE_PERCENT");
            if (m == 1)
                setenv("ALNAIR_VGPU_MEMORY_BYTES", "8Gi", 1);
            if (m == 2)
                setenv("ALNAIR_VGPU_COMPUTE_PERCENT", "50", 1);
            execl("/proc/self/exe", "launch_bench", "child", modes[m], scale, (char *)NULL);
            _exit(127);
        }
        int st = 0;
        if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "launch_bench: mode %s failed (status %d)\n", modes[m], st);
            failed = 1;
        }
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", ws);
    if (system(cmd) != 0)
        failed = 1;
    return failed;
}
