/*
 * test_ledger — what the processes of a workload hold is accounted where the tenant
 * cannot write (ci_ledger.c: kernel record locks on the region file), in container
 * mode with a 4 MiB limit: a tenant process that zeroes every slot and raises the
 * header's limit, or wipes the whole region, gains nothing (the next process is still
 * refused what the first holds, and the first rewrites its slot); a process that closes
 * the region's descriptor is refused from then on while what it holds stays counted; a
 * forked child counts its parent's memory, and a parent that ends gives its memory back
 * even while a child it forked lives on.
 */
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include "ci_test.h"

#define MiB (1u << 20)

/* Runs this program again as `child <mode>` and returns its exit status. */
static int run_child(const char *mode)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/test_ledger", getenv("CI_TEST_BIN"));
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        execl(path, path, "child", mode, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    return status;
}

static void expect_child(const char *mode)
{
    int st = run_child(mode);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %s failed (status %d)", mode, st);
}

/* Waits (up to 5 s) until this process's slot says it holds `bytes` again. */
static void expect_slot_restored(uint64_t bytes)
{
    struct ci_region *r = ct_region();
    for (int i = 0; i < 1000; i++) {
        struct ci_region_slot *s = ct_slot_of(r, getpid());
        if (s != NULL && __atomic_load_n(&s->dev[0].memory_used_bytes, __ATOMIC_ACQUIRE) == bytes)
            return;
        ct_sleep_ms(5);
    }
    CHECK(0, "slot of pid %d not restored to %llu bytes", getpid(), (unsigned long long)bytes);
}

static int child(const char *mode)
{
    struct ci_region *r = ct_region();
    if (strcmp(mode, "zero") == 0) {
        /* a tenant process that never calls CUDA rewrites the region */
        for (int i = 0; i < CI_REGION_MAX_SLOTS; i++) {
            memset(r->slots[i].dev, 0, sizeof r->slots[i].dev);
            r->slots[i].state = CI_SLOT_FREE;
            r->slots[i].pid = 0;
        }
        r->header.memory_limit_bytes = CI_REGION_UNLIMITED;
        return 0;
    }
    if (strcmp(mode, "wipe") == 0) {
        memset(r, 0, sizeof *r);
        return 0;
    }
    CHECK_CU(cuInit(0));
    CUdeviceptr a, b;
    if (strcmp(mode, "holds-3") == 0) {
        /* another process holds 3 MiB of 4 */
        CHECK(cuMemAlloc_v2(&a, 2 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "2 MiB must not fit");
        CHECK_CU(cuMemAlloc_v2(&a, MiB));
        CHECK(cuMemAlloc_v2(&b, 1) == CUDA_ERROR_OUT_OF_MEMORY, "exactly at the limit");
        return 0;
    }
    if (strcmp(mode, "holds-1") == 0) {
        CHECK_CU(cuMemAlloc_v2(&a, 3 * MiB));
        CHECK(cuMemAlloc_v2(&b, 1) == CUDA_ERROR_OUT_OF_MEMORY, "exactly at the limit");
        return 0;
    }
    return 2;
}

static void corrupted(const char *how)
{
    CHECK_CU(cuInit(0));
    CUdeviceptr a, b;
    CHECK_CU(cuMemAlloc_v2(&a, 3 * MiB));
    expect_child(how);
    expect_child("holds-3");
    CHECK(cuMemAlloc_v2(&b, 2 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "own 3 MiB still counted");
    expect_slot_restored(3 * MiB);
    CHECK_CU(cuMemFree_v2(a));
    CHECK_CU(cuMemAlloc_v2(&a, 4 * MiB));
    printf("ok region %s by the tenant: the next process is still refused, the slot restored\n",
           how);
}

/* Closes this process's descriptor of the region, as a tenant could (close_range). */
static void close_region_descriptor(void)
{
    char want[1100], link[1100], target[1100];
    snprintf(want, sizeof want, "%s/%s", getenv("ALNAIR_WORKSPACE"), CI_REGION_FILE_NAME);
    CHECK(realpath(want, target) != NULL, "realpath %s", want);
    DIR *d = opendir("/proc/self/fd");
    CHECK(d != NULL, "opendir");
    int closed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        char seen[1100];
        ssize_t n = readlink(link, seen, sizeof seen - 1);
        if (n <= 0)
            continue;
        seen[n] = '\0';
        if (strcmp(seen, target) == 0 && atoi(e->d_name) != dirfd(d)) {
            close(atoi(e->d_name));
            closed++;
        }
    }
    closedir(d);
    CHECK(closed == 1, "closed %d region descriptors", closed);
}

static void fd_closed(void)
{
    CHECK_CU(cuInit(0));
    CUdeviceptr a, b;
    CHECK_CU(cuMemAlloc_v2(&a, MiB));
    close_region_descriptor();
    char log[1100];
    snprintf(log, sizeof log, "%s/stderr.txt", getenv("ALNAIR_WORKSPACE"));
    int saved = ct_capture_stderr(log);
    CUresult r1 = cuMemAlloc_v2(&b, 1);
    CUresult r2 = cuMemAlloc_v2(&b, 1);
    dup2(saved, 2);
    CHECK(r1 == CUDA_ERROR_OUT_OF_MEMORY && r2 == CUDA_ERROR_OUT_OF_MEMORY,
          "refused after the descriptor was closed");
    CHECK(ct_count_lines_with(log, "memory ledger unusable") == 1, "one line says why");
    expect_child("holds-1"); /* our 1 MiB is still counted: the mapping keeps the lock */
    printf("ok descriptor closed: refused from then on, what it holds stays counted\n");
}

static void forked(void)
{
    int gate[2], checked[2];
    CHECK(pipe(gate) == 0 && pipe(checked) == 0, "pipe");
    pid_t parent = fork();
    CHECK(parent >= 0, "fork");
    if (parent == 0) {
        CHECK_CU(cuInit(0));
        CUdeviceptr a;
        CHECK_CU(cuMemAlloc_v2(&a, 3 * MiB));
        pid_t kid = fork();
        CHECK(kid >= 0, "fork");
        if (kid == 0) {
            /* a child counts its parent's 3 MiB */
            CUdeviceptr b;
            CHECK(cuMemAlloc_v2(&b, 2 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "child: 2 MiB over");
            CHECK_CU(cuMemAlloc_v2(&b, MiB));
            CHECK_CU(cuMemFree_v2(b));
            close(checked[1]); /* the parent may end now (not before: its 3 MiB counts) */
            /* and then outlives its parent, holding nothing */
            close(gate[1]);
            char c;
            ssize_t ignored = read(gate[0], &c, 1);
            (void)ignored;
            _exit(0);
        }
        close(checked[1]);
        char c;
        ssize_t ignored = read(checked[0], &c, 1); /* until the child has checked */
        (void)ignored;
        _exit(0); /* ends holding 3 MiB: the driver frees it, the ledger must too */
    }
    close(checked[0]);
    close(checked[1]);
    int st = 0;
    CHECK(waitpid(parent, &st, 0) == parent && WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "forked parent failed (%d)", st);
    close(gate[0]);
    CHECK_CU(cuInit(0));
    CUdeviceptr a;
    CHECK_CU(cuMemAlloc_v2(&a, 4 * MiB)); /* the ended parent's 3 MiB came back */
    close(gate[1]);
    printf("ok fork: a child counts its parent; an ended parent's share comes back\n");
}

int main(int argc, char **argv)
{
    char text[1200];
    snprintf(text, sizeof text, "memory_bytes = 4Mi\nworkspace = %s\n", getenv("ALNAIR_WORKSPACE"));
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return child(argv[2]);
    CHECK(argc == 2, "usage: test_ledger MODE");
    ct_container(text, getenv("ALNAIR_WORKSPACE"), 1);
    if (strcmp(argv[1], "zeroed") == 0)
        corrupted("zero");
    else if (strcmp(argv[1], "wiped") == 0)
        corrupted("wipe");
    else if (strcmp(argv[1], "fd-closed") == 0)
        fd_closed();
    else if (strcmp(argv[1], "fork") == 0)
        forked();
    else
        CHECK(0, "unknown mode %s", argv[1]);
    return 0;
}
