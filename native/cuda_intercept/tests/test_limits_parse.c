/*
 * test_limits_parse — unit test of ci_limits.c: the value grammar, file
 * parsing, precedence (the environment only tightens; container mode's fixed file names
 * the workspace and ALNAIR_WORKSPACE is ignored), mps_pipe_directory (MPS mode) and the
 * strict interpretation of invalid input.
 */
#include "ci_internal.h"
#include "ci_test.h"

static void bytes(const char *text, int rc, uint64_t want)
{
    uint64_t v = 12345;
    int got = ci_limits_parse_bytes(text, &v);
    CHECK(got == rc, "parse_bytes(\"%s\") rc %d", text, got);
    if (rc == 0)
        CHECK(v == want, "parse_bytes(\"%s\") = %llu", text, (unsigned long long)v);
}

static void percent(const char *text, int rc, uint32_t want)
{
    uint32_t v = 0;
    int got = ci_limits_parse_percent(text, &v);
    CHECK(got == rc, "parse_percent(\"%s\") rc %d", text, got);
    if (rc == 0)
        CHECK(v == want, "parse_percent(\"%s\") = %u", text, v);
}

int main(void)
{
    bytes("0", 0, 0);
    bytes("8589934592", 0, 8589934592ull);
    bytes("8Gi", 0, 8ull << 30);
    bytes("8G", 0, 8ull << 30);
    bytes(" 512 MiB ", 0, 512ull << 20);
    bytes("1k", 0, 1024);
    bytes("2T", 0, 2ull << 40);
    bytes("100B", 0, 100);
    bytes("", -1, 0);
    bytes("-1", -1, 0);
    bytes("1.5G", -1, 0);
    bytes("lots", -1, 0);
    bytes("99999999999999999999", -1, 0);
    bytes("17179869184T", -1, 0);
    bytes("8Gx", -1, 0);
    percent("1", 0, 1);
    percent("100", 0, 100);
    percent(" 30% ", 0, 30);
    percent("0", -1, 0);
    percent("101", -1, 0);
    percent("250", -1, 0);
    percent("3.5", -1, 0);
    percent("", -1, 0);
    printf("ok value grammar\n");

    struct ci_limits l;
    unsetenv("ALNAIR_VGPU_MEMORY_BYTES");
    unsetenv("ALNAIR_VGPU_COMPUTE_PERCENT");
    ci_limits_load(&l);
    CHECK(l.memory_bytes == CI_REGION_UNLIMITED && l.compute_percent == 100 &&
              l.source == CI_LIMITS_SOURCE_NONE, "defaults: no limits");
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", "4Gi");
    ct_set_env("ALNAIR_VGPU_COMPUTE_PERCENT", "25");
    ct_set_env("ALNAIR_WORKLOAD_ID", "env-id");
    ci_limits_load(&l);
    CHECK(l.memory_bytes == 4ull << 30 && l.compute_percent == 25 &&
              l.source == CI_LIMITS_SOURCE_ENV && strcmp(l.workload_id, "env-id") == 0, "env");
    ct_write_limits("compute_percent=60\r\n\n  # nothing else\nbogus line\nunknown_key=1\n"
                    "workspace = /elsewhere\n");
    ci_limits_load(&l);
    CHECK(l.source == CI_LIMITS_SOURCE_FILE && l.mode == CI_LIMITS_MODE_LOCAL, "file, local mode");
    CHECK(l.compute_percent == 25 && l.memory_bytes == 4ull << 30,
          "the variables are stricter than the file (which has no memory key): they win");
    CHECK(strcmp(l.workspace, getenv("ALNAIR_WORKSPACE")) == 0, "a workspace cannot name itself");
    ct_set_env("ALNAIR_VGPU_COMPUTE_PERCENT", "90");
    unsetenv("ALNAIR_VGPU_MEMORY_BYTES");
    ci_limits_load(&l);
    CHECK(l.compute_percent == 60 && l.memory_bytes == CI_REGION_UNLIMITED,
          "a looser variable changes nothing");
    ct_write_limits("memory_bytes = nonsense\ncompute_percent = 0\n");
    ci_limits_load(&l);
    CHECK(l.memory_bytes == 0 && l.compute_percent == 1, "invalid file values are strictest");
    printf("ok precedence and strict fallbacks\n");

    /* MPS mode's key: an absolute path; an invalid one is no MPS mode and the strictest
     * limits, whatever the lines after it say; the last valid line wins. */
    ct_write_limits("mps_pipe_directory = /run/mps/GPU-1/pipe   # the card's daemon\n"
                    "compute_percent = 30\n");
    ci_limits_load(&l);
    CHECK(strcmp(l.mps_pipe_directory, "/run/mps/GPU-1/pipe") == 0 && l.compute_percent == 30 &&
              l.memory_bytes == CI_REGION_UNLIMITED, "MPS mode: \"%s\"", l.mps_pipe_directory);
    ct_write_limits("memory_bytes = 8Gi\ncompute_percent = 30\n");
    ci_limits_load(&l);
    CHECK(l.mps_pipe_directory[0] == '\0', "no key: time-slicing mode");
    static const char *const bad[] = {"relative/pipe", "", "./pipe"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "mps_pipe_directory = %s\nmemory_bytes = 8Gi\ncompute_percent = 30\n",
                 bad[i]);
        ct_write_limits(text);
        ci_limits_load(&l);
        CHECK(l.mps_pipe_directory[0] == '\0' && l.memory_bytes == 0 && l.compute_percent == 1,
              "invalid mps_pipe_directory \"%s\": strictest (%llu bytes, %u%%)", bad[i],
              (unsigned long long)l.memory_bytes, l.compute_percent);
    }
    char long_path[1100];
    memset(long_path, 'a', sizeof long_path - 1);
    long_path[0] = '/';
    long_path[sizeof long_path - 1] = '\0';
    char text[1200];
    snprintf(text, sizeof text, "mps_pipe_directory = %s\n", long_path);
    ct_write_limits(text);
    ci_limits_load(&l);
    CHECK(l.mps_pipe_directory[0] == '\0' && l.memory_bytes == 0, "a path too long is invalid");
    ct_write_limits("mps_pipe_directory = relative\nmps_pipe_directory = /run/mps/b\n");
    ci_limits_load(&l);
    CHECK(strcmp(l.mps_pipe_directory, "/run/mps/b") == 0 && l.memory_bytes == CI_REGION_UNLIMITED &&
              l.compute_percent == 90, "a later valid line replaces an invalid one");
    printf("ok mps_pipe_directory\n");

    /* container mode: the fixed file names limits and workspace, the tenant's are ignored */
    ct_container("memory_bytes = 2Gi\nworkspace = /var/run/x\nworkload_id = ns/pod\n", "", 0);
    ct_write_limits("memory_bytes = 64Gi\n");
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", "8Gi");
    ct_set_env("ALNAIR_WORKLOAD_ID", "spoofed");
    ci_limits_load(&l);
    CHECK(l.mode == CI_LIMITS_MODE_CONTAINER && l.source == CI_LIMITS_SOURCE_FILE, "container mode");
    CHECK(strcmp(l.workspace, "/var/run/x") == 0, "workspace from the fixed file: %s", l.workspace);
    CHECK(l.memory_bytes == 2ull << 30 && l.compute_percent == 90,
          "the fixed file's memory; compute, which it leaves open, from the variable: %llu %u",
          (unsigned long long)l.memory_bytes, l.compute_percent);
    CHECK(strcmp(l.workload_id, "ns/pod") == 0, "the fixed file's identity: %s", l.workload_id);
    ct_write_file(CI_LIMITS_PATH, "compute_percent = 50\n");
    ci_limits_load(&l);
    CHECK(strcmp(l.workspace, "/var/run/alnair") == 0, "default container workspace: %s", l.workspace);
    CHECK(l.memory_bytes == 8ull << 30, "the variable adds a limit the file does not set");
    ct_write_file(CI_LIMITS_PATH, "mps_pipe_directory = /run/mps/c\n");
    ci_limits_load(&l);
    CHECK(l.mode == CI_LIMITS_MODE_CONTAINER && strcmp(l.mps_pipe_directory, "/run/mps/c") == 0,
          "the fixed file's mps_pipe_directory");
    ct_write_file(CI_LIMITS_PATH, "workspace = relative/dir\n");
    ci_limits_load(&l);
    CHECK(l.workspace[0] == '\0', "an invalid workspace is none (which refuses allocations)");
    unlink(CI_LIMITS_PATH);
    ci_limits_load(&l);
    CHECK(l.mode == CI_LIMITS_MODE_LOCAL, "without the fixed file: local mode");
    printf("ok container mode: fixed file, workspace, identity\n");
    return 0;
}
