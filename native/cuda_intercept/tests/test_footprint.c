/*
 * test_footprint — a CUDA context's device memory counts against the limit. The fake
 * driver's contexts take FAKECUDA_CTX_BYTES (N) of its device memory, so that the free
 * memory NVML and cuMemGetInfo report drops by N across a creation, as on a GPU.
 *
 *   test_footprint pid        the primary context (first retain only, given back by the
 *                             last release, _v2 or not) and cuCtxCreate_v2/_v3/_v4
 *                             contexts are charged N each, measured through NVML's
 *                             per-process figure: the usable limit shrinks by exactly N,
 *                             cuMemGetInfo and nvmlDeviceGetMemoryInfo report N used, the
 *                             region's footprint_bytes says N; a context that does not fit
 *                             is refused with CUDA_ERROR_OUT_OF_MEMORY and not created
 *   test_footprint pidns      the same where NVML names host pids (FAKENVML_PID_OFFSET):
 *                             the process is found as the pid that appeared
 *   test_footprint device     the same without per-process figures (NVML_ERROR_NOT_SUPPORTED):
 *                             the drop of the device's free memory
 *   test_footprint lazy       a module image loaded at the first launch (inside
 *                             cuLaunchKernel, FAKECUDA_LAZY_IMAGE_BYTES) is charged by the
 *                             monitor's reconciliation within a few hundred ms
 *   test_footprint processes  two processes of one workspace: each context charged once,
 *                             the workload's usable memory shrinks by 2 N
 */
#include <sys/wait.h>

#include "ci_test.h"

#define MiB (1ull << 20)
#define LIMIT (64 * MiB)
#define CTX (5 * MiB + 12345)
#define IMAGE (3 * MiB + 777)

static struct ci_region_slot *slot;

static unsigned long long used(void)
{
    return __atomic_load_n(&slot->dev[0].memory_used_bytes, __ATOMIC_ACQUIRE);
}

static void expect_free(unsigned long long want, const char *what)
{
    size_t fr = 0, total = 0;
    CHECK_CU(cuMemGetInfo_v2(&fr, &total));
    CHECK(total == LIMIT && fr == want, "%s: cuMemGetInfo %zu free of %zu, want %llu", what, fr,
          total, want);
}

/* Exactly `room` bytes fit, one more does not. */
static void expect_room(unsigned long long room, const char *what)
{
    CUdeviceptr a = 0, b = 0;
    CHECK(cuMemAlloc_v2(&a, room + 1) == CUDA_ERROR_OUT_OF_MEMORY, "%s: %llu + 1 bytes fit", what, room);
    CHECK_CU(cuMemAlloc_v2(&a, room));
    CHECK(cuMemAlloc_v2(&b, 1) == CUDA_ERROR_OUT_OF_MEMORY, "%s: past the limit", what);
    CHECK_CU(cuMemFree_v2(a));
}

static void expect_nvml_used(unsigned long long want)
{
    void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    CHECK(nv != NULL, "dlopen NVML");
    nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t *) =
        (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(nv, "nvmlDeviceGetHandleByIndex_v2");
    nvmlReturn_t (*info)(nvmlDevice_t, nvmlMemory_t *) =
        (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))dlsym(nv, "nvmlDeviceGetMemoryInfo");
    nvmlDevice_t dev;
    nvmlMemory_t m;
    CHECK(by_index(0, &dev) == NVML_SUCCESS && info(dev, &m) == NVML_SUCCESS, "NVML memory info");
    CHECK(m.total == LIMIT && m.used == want && m.free == LIMIT - want,
          "NVML total %llu used %llu free %llu, want used %llu", m.total, m.used, m.free, want);
}

static void primary(void)
{
    unsigned long long fake0 = fakecuda_used_bytes();
    CUcontext c = NULL, again = NULL;
    CHECK_CU(cuDevicePrimaryCtxRetain(&c, 0));
    CHECK(fakecuda_used_bytes() == fake0 + CTX, "the fake context took no memory");
    CHECK(used() == CTX, "primary context charged %llu, want %llu", used(), CTX);
    expect_free(LIMIT - CTX, "primary");
    expect_nvml_used(CTX);
    expect_room(LIMIT - CTX, "primary");
    CHECK(CT_WAIT_FIELD(slot, 0, footprint_bytes, CTX) == CTX, "footprint_bytes %llu",
          (unsigned long long)slot->dev[0].footprint_bytes);
    CHECK_CU(cuDevicePrimaryCtxRetain(&again, 0));
    CHECK(again == c && used() == CTX, "a second retain charged again: %llu", used());
    CHECK_CU(cuDevicePrimaryCtxRelease_v2(0));
    CHECK(used() == CTX, "released with a retain left: %llu", used());
    CHECK_CU(cuDevicePrimaryCtxRelease(0));
    CHECK(used() == 0 && fakecuda_used_bytes() == fake0, "last release: used %llu", used());
    expect_free(LIMIT, "after release");
    printf("ok primary context: charged %llu bytes at the first retain, back at the last release\n", CTX);
}

static void created(void)
{
    CUcontext a, b, c;
    CHECK_CU(cuCtxCreate_v2(&a, 0, 0));
    CHECK(used() == CTX, "cuCtxCreate_v2 charged %llu", used());
    CHECK_CU(cuCtxCreate_v3(&b, NULL, 0, 0, 0));
    CHECK_CU(cuCtxCreate_v4(&c, NULL, 0, 0));
    CHECK(used() == 3 * CTX, "three contexts charged %llu", used());
    expect_free(LIMIT - 3 * CTX, "three contexts");
    expect_room(LIMIT - 3 * CTX, "three contexts");
    CHECK_CU(cuCtxDestroy_v2(b));
    CHECK(used() == 2 * CTX, "destroy gave back %llu", used());
    CHECK_CU(cuCtxDestroy_v2(a));
    CHECK_CU(cuCtxDestroy_v2(c));
    CHECK(used() == 0, "all destroyed: %llu", used());
    printf("ok cuCtxCreate_v2/_v3/_v4 charged, cuCtxDestroy_v2 gives back\n");
}

static void refused(void)
{
    CUcontext own, c;
    CHECK_CU(cuCtxCreate_v2(&own, 0, 0));
    CUdeviceptr hold, one;
    CHECK_CU(cuMemAlloc_v2(&hold, LIMIT - 2 * CTX));
    CHECK_CU(cuDevicePrimaryCtxRetain(&c, 0)); /* exactly fits: measured N, not more */
    CHECK(used() == LIMIT, "at the limit: %llu", used());
    CHECK_CU(cuDevicePrimaryCtxRelease_v2(0));
    CHECK_CU(cuMemAlloc_v2(&one, 1));
    unsigned long long fake0 = fakecuda_used_bytes();
    int contexts0 = fakecuda_contexts();
    c = (CUcontext)&hold;
    CHECK(cuDevicePrimaryCtxRetain(&c, 0) == CUDA_ERROR_OUT_OF_MEMORY && c == NULL,
          "a primary context 1 byte past the limit must be refused");
    CHECK(fakecuda_contexts() == contexts0 && fakecuda_used_bytes() == fake0,
          "refused primary context left behind");
    CHECK(cuCtxCreate_v2(&c, 0, 0) == CUDA_ERROR_OUT_OF_MEMORY && c == NULL, "cuCtxCreate past the limit");
    CHECK(fakecuda_contexts() == contexts0 && fakecuda_used_bytes() == fake0, "refused context left behind");
    CHECK(used() == LIMIT - CTX + 1, "refusals changed the accounting: %llu", used());
    CHECK_CU(cuMemFree_v2(one));
    CHECK_CU(cuMemFree_v2(hold));
    CHECK_CU(cuCtxDestroy_v2(own));
    CHECK(used() == 0, "all given back: %llu", used());
    printf("ok a context that does not fit is refused with CUDA_ERROR_OUT_OF_MEMORY and undone\n");
}

static void lazy(void)
{
    CUcontext c;
    CHECK_CU(cuDevicePrimaryCtxRetain(&c, 0));
    CHECK(used() == CTX, "primary charged %llu", used());
    unsigned long long fake0 = fakecuda_used_bytes();
    CHECK_CU(cuLaunchKernel(NULL, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CHECK(fakecuda_used_bytes() == fake0 + IMAGE, "the fake image took no memory");
    unsigned long long seen = CT_WAIT_FIELD(slot, 0, memory_used_bytes, CTX + IMAGE);
    CHECK(seen == CTX + IMAGE, "reconciled to %llu, want %llu", seen, CTX + IMAGE);
    CHECK(CT_WAIT_FIELD(slot, 0, footprint_bytes, CTX + IMAGE) == CTX + IMAGE, "footprint_bytes %llu",
          (unsigned long long)slot->dev[0].footprint_bytes);
    expect_free(LIMIT - CTX - IMAGE, "lazy image");
    expect_room(LIMIT - CTX - IMAGE, "lazy image");
    ct_sleep_ms(300); /* more reconciliations change nothing */
    CHECK(used() == CTX + IMAGE, "charged twice: %llu", used());
    CHECK_CU(cuDevicePrimaryCtxRelease_v2(0));
    CHECK(used() == 0, "the device's last context took its footprint along: %llu", used());
    printf("ok a lazily loaded image is charged by the reconciliation\n");
}

static int run_child(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/test_footprint", getenv("CI_TEST_BIN"));
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        execl(path, path, "child", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    return status;
}

static void processes(void)
{
    CUcontext c;
    CHECK_CU(cuDevicePrimaryCtxRetain(&c, 0));
    int st = run_child();
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed (status %d)", st);
    expect_free(LIMIT - CTX, "after the child");
    CHECK_CU(cuDevicePrimaryCtxRelease_v2(0));
    printf("ok two processes: each context charged once against the workload's limit\n");
}

static int child(void)
{
    CHECK_CU(cuInit(0));
    slot = ct_slot_of(ct_region(), getpid());
    CHECK(slot != NULL, "child: no slot");
    CUcontext c;
    CHECK_CU(cuDevicePrimaryCtxRetain(&c, 0));
    CHECK(used() == CTX, "child: its own context charged %llu", used());
    expect_free(LIMIT - 2 * CTX, "child");
    expect_room(LIMIT - 2 * CTX, "child");
    return 0; /* exits holding its context: the driver and the ledger give it back */
}

int main(int argc, char **argv)
{
    char value[32];
    snprintf(value, sizeof value, "%llu", LIMIT);
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", value);
    snprintf(value, sizeof value, "%llu", CTX);
    ct_set_env("FAKECUDA_CTX_BYTES", value);
    const char *mode = argc > 1 ? argv[1] : "pid";
    if (strcmp(mode, "child") == 0)
        return child();
    if (strcmp(mode, "pidns") == 0)
        ct_set_env("FAKENVML_PID_OFFSET", "100000");
    if (strcmp(mode, "device") == 0)
        ct_set_env("FAKENVML_NO_PROCESS_MEMORY", "1");
    if (strcmp(mode, "lazy") == 0) {
        snprintf(value, sizeof value, "%llu", IMAGE);
        ct_set_env("FAKECUDA_LAZY_IMAGE_BYTES", value);
    }
    CHECK_CU(cuInit(0));
    slot = ct_slot_of(ct_region(), getpid());
    CHECK(slot != NULL, "no slot");
    if (strcmp(mode, "lazy") == 0) {
        lazy();
    } else if (strcmp(mode, "processes") == 0) {
        processes();
    } else {
        primary();
        created();
        refused();
    }
    printf("ok %s\n", mode);
    return 0;
}
