/*
 * test_container — container mode, with this program playing the device plugin: the
 * fixed limits file (the test library's CI_LIMITS_PATH) names the limits and the
 * workspace, so the tenant's ALNAIR_WORKSPACE, its own limits files and looser
 * variables change nothing; a stricter variable still tightens; a region the plugin did
 * not create (deleted, or a workspace that is no absolute path) refuses every
 * allocation instead of falling back to a limit per process.
 */
#include <errno.h>

#include "ci_test.h"

#define MiB (1u << 20)

/* The workspace run_tests.sh made for this case (the plugin's, here). */
static const char *workspace(void)
{
    const char *ws = getenv("ALNAIR_WORKSPACE");
    CHECK(ws != NULL, "ALNAIR_WORKSPACE not set");
    return ws;
}

static void fixed_limits(const char *extra)
{
    char text[2048];
    snprintf(text, sizeof text,
             "memory_bytes = 4Mi\ncompute_percent = 40\nworkload_id = ns/pod\nworkspace = %s\n%s",
             workspace(), extra);
    ct_container(text, workspace(), 1);
}

/* Allocates 1 MiB at a time until refused; returns how many MiB were granted. */
static unsigned grab_mib(unsigned at_most)
{
    unsigned n = 0;
    CUdeviceptr p;
    while (n < at_most && cuMemAlloc_v2(&p, MiB) == CUDA_SUCCESS)
        n++;
    return n;
}

static void fixed_file(void)
{
    fixed_limits("");
    char tenant[1100], path[1200];
    snprintf(tenant, sizeof tenant, "%s/tenant", workspace());
    CHECK(mkdir(tenant, 0755) == 0, "mkdir %s", tenant);
    snprintf(path, sizeof path, "%s/limits", tenant);
    ct_write_file(path, "compute_percent = 100\n");   /* its own limits: none */
    snprintf(path, sizeof path, "%s/limits", workspace());
    ct_write_file(path, "compute_percent = 100\n");   /* and over the workspace's */
    ct_set_env("ALNAIR_WORKSPACE", tenant);
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", "1Gi");
    ct_set_env("ALNAIR_VGPU_COMPUTE_PERCENT", "100");
    ct_set_env("ALNAIR_WORKLOAD_ID", "spoofed");
    CHECK_CU(cuInit(0));
    CHECK(grab_mib(64) == 4, "the fixed file's 4 MiB hold");
    snprintf(path, sizeof path, "%s/%s", tenant, CI_REGION_FILE_NAME);
    struct stat st;
    CHECK(stat(path, &st) != 0, "no region in the tenant's directory");
    struct ci_region *r = ct_region_in(getenv("CI_CASE_WORKSPACE"));
    CHECK(r->header.memory_limit_bytes == 4 * MiB && r->header.compute_percent == 40,
          "header %llu %u", (unsigned long long)r->header.memory_limit_bytes,
          r->header.compute_percent);
    CHECK(strcmp(r->header.workload_id, "ns/pod") == 0, "identity %s", r->header.workload_id);
    printf("ok container mode: the fixed file's limits, workspace and identity; the tenant's "
           "variables, workspace and limits files ignored\n");
}

static void env_tightens(void)
{
    fixed_limits("");
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", "2Mi");
    ct_set_env("ALNAIR_VGPU_COMPUTE_PERCENT", "10");
    CHECK_CU(cuInit(0));
    CHECK(grab_mib(64) == 2, "the stricter variable's 2 MiB hold");
    struct ci_region *r = ct_region();
    CHECK(r->header.compute_percent == 10, "compute %u", r->header.compute_percent);
    printf("ok container mode: a stricter variable tightens the fixed file\n");
}

/* The plugin left `extra` in the fixed file and (when `region`) the empty region:
 * every allocation must be refused, with one line saying why, and no region file may
 * appear. */
static void refused(const char *extra, int region, const char *needle)
{
    char text[1200];
    snprintf(text, sizeof text, "memory_bytes = 4Mi\n%s", extra);
    ct_container(text, workspace(), region);
    char log[1100], path[1100];
    snprintf(log, sizeof log, "%s/stderr.txt", workspace());
    int saved = ct_capture_stderr(log);
    CHECK_CU(cuInit(0));
    unsigned got = grab_mib(64);
    dup2(saved, 2);
    CHECK(got == 0, "granted %u MiB without a usable region", got);
    CHECK(ct_count_lines_with(log, needle) == 1, "want one '%s' line", needle);
    snprintf(path, sizeof path, "%s/%s", workspace(), CI_REGION_FILE_NAME);
    struct stat st;
    CHECK(stat(path, &st) != 0, "the interceptor must not create the region");
    printf("ok container mode: %s refuses every allocation\n", needle);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2, "usage: test_container MODE");
    ct_set_env("CI_CASE_WORKSPACE", workspace());
    char extra[1200];
    if (strcmp(argv[1], "fixed-file") == 0) {
        fixed_file();
    } else if (strcmp(argv[1], "env-tightens") == 0) {
        env_tightens();
    } else if (strcmp(argv[1], "region-missing") == 0) {
        snprintf(extra, sizeof extra, "workspace = %s\n", workspace());
        refused(extra, 0, "cannot open region");
    } else if (strcmp(argv[1], "bad-workspace") == 0) {
        refused("workspace = relative/dir\n", 0, "invalid workspace");
    } else {
        CHECK(0, "unknown mode %s", argv[1]);
    }
    return 0;
}
