/*
 * test_limits — where limits come from (local mode). The environment can only tighten
 * the workspace limits file: a looser variable is ignored, a stricter one wins, an empty
 * one changes nothing; invalid values print one clear stderr line and take the strictest
 * meaning; without a workspace the limit still holds (per process) and no file is
 * written.
 */
#include <sys/stat.h>

#include "ci_test.h"

static void file_beats_env(void)
{
    ct_write_limits("# written by the device plugin\n"
                    "memory_bytes = 1Mi\n"
                    "compute_percent = 50   # half a GPU\n"
                    "workload_id = ns/pod/ctr\n");
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", "1Gi");     /* the tenant tries to loosen */
    ct_set_env("ALNAIR_VGPU_COMPUTE_PERCENT", "100");
    CHECK_CU(cuInit(0));
    CUdeviceptr a, b;
    CHECK_CU(cuMemAlloc_v2(&a, 1 << 20));
    CHECK(cuMemAlloc_v2(&b, 1) == CUDA_ERROR_OUT_OF_MEMORY, "file limit (1 MiB) must hold");
    struct ci_region *r = ct_region();
    CHECK(r->header.limits_source == CI_LIMITS_SOURCE_FILE, "source %u", r->header.limits_source);
    CHECK(r->header.compute_percent == 50, "compute %u", r->header.compute_percent);
    CHECK(r->header.memory_limit_bytes == 1 << 20, "memory");
    CHECK(strcmp(r->header.workload_id, "ns/pod/ctr") == 0, "workload id %s", r->header.workload_id);
    printf("ok limits file beats the environment\n");
}

static void env_tightens(void)
{
    ct_write_limits("memory_bytes = 4Mi\ncompute_percent = 50\n");
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", "1Mi");     /* stricter than the file: honoured */
    ct_set_env("ALNAIR_VGPU_COMPUTE_PERCENT", "");     /* empty: changes nothing */
    CHECK_CU(cuInit(0));
    CUdeviceptr a, b;
    CHECK_CU(cuMemAlloc_v2(&a, 1 << 20));
    CHECK(cuMemAlloc_v2(&b, 1) == CUDA_ERROR_OUT_OF_MEMORY, "the stricter variable (1 MiB) holds");
    struct ci_region *r = ct_region();
    CHECK(r->header.limits_source == CI_LIMITS_SOURCE_FILE, "source %u", r->header.limits_source);
    CHECK(r->header.memory_limit_bytes == 1 << 20 && r->header.compute_percent == 50,
          "memory %llu compute %u", (unsigned long long)r->header.memory_limit_bytes,
          r->header.compute_percent);
    printf("ok a stricter variable tightens the file, an empty one changes nothing\n");
}

static void invalid(const char *var, const char *value, const char *needle)
{
    char log[1100];
    snprintf(log, sizeof log, "%s/stderr.txt", getenv("ALNAIR_WORKSPACE"));
    ct_set_env(var, value);
    int saved = ct_capture_stderr(log);
    CHECK_CU(cuInit(0));
    CUdeviceptr a;
    CUresult r1 = cuMemAlloc_v2(&a, 1);
    CUresult r2 = cuMemAlloc_v2(&a, 1);
    dup2(saved, 2);
    CHECK(ct_count_lines_with(log, needle) == 1, "want exactly one '%s' line", needle);
    struct ci_region *r = ct_region();
    if (strcmp(var, "ALNAIR_VGPU_MEMORY_BYTES") == 0) {
        CHECK(r1 == CUDA_ERROR_OUT_OF_MEMORY && r2 == CUDA_ERROR_OUT_OF_MEMORY,
              "invalid memory limit must refuse allocations, not allow them");
        CHECK(r->header.memory_limit_bytes == 0, "strictest memory limit");
    } else {
        CHECK(r->header.compute_percent == 1, "strictest compute limit, got %u",
              r->header.compute_percent);
    }
    printf("ok invalid %s=%s: one message, strictest limit\n", var, value);
}

static void no_workspace(void)
{
    const char *ws = getenv("ALNAIR_WORKSPACE");
    char region[1100];
    snprintf(region, sizeof region, "%s/%s", ws, CI_REGION_FILE_NAME);
    unsetenv("ALNAIR_WORKSPACE");
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", "1048576");
    CHECK_CU(cuInit(0));
    CUdeviceptr a, b;
    CHECK_CU(cuMemAlloc_v2(&a, 1 << 20));
    CHECK(cuMemAlloc_v2(&b, 1) == CUDA_ERROR_OUT_OF_MEMORY, "per-process limit holds");
    size_t fr, total;
    CHECK_CU(cuMemGetInfo_v2(&fr, &total));
    CHECK(total == 1 << 20 && fr == 0, "mem info %zu/%zu", fr, total);
    struct stat st;
    CHECK(stat(region, &st) != 0, "no region file without a workspace");
    printf("ok no workspace: process-private limit\n");
}

int main(int argc, char **argv)
{
    CHECK(argc == 2, "usage: test_limits MODE");
    if (strcmp(argv[1], "file-beats-env") == 0)
        file_beats_env();
    else if (strcmp(argv[1], "env-tightens") == 0)
        env_tightens();
    else if (strcmp(argv[1], "invalid-memory") == 0)
        invalid("ALNAIR_VGPU_MEMORY_BYTES", "lots", "invalid memory limit");
    else if (strcmp(argv[1], "invalid-compute") == 0)
        invalid("ALNAIR_VGPU_COMPUTE_PERCENT", "250", "invalid compute limit");
    else if (strcmp(argv[1], "no-workspace") == 0)
        no_workspace();
    else
        CHECK(0, "unknown mode %s", argv[1]);
    return 0;
}
