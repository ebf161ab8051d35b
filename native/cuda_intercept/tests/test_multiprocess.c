/*
 * test_multiprocess — one memory limit shared by the processes of a workload
 * (same ALNAIR_WORKSPACE), exact to the byte across processes; a process that
 * exits gives its share back; a process SIGKILLed while it holds the region
 * lock (and owns memory) blocks nothing and leaks nothing: its share is gone at once
 * (the ledger's locks end with it), allocations never wait for the region lock, and
 * the next process to attach recovers the robust mutex and reaps the dead slot.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "ci_test.h"

#define MiB (1u << 20)

/* Runs this program again as `child <mode>` and returns its exit status. */
static int run_child(const char *mode)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/test_multiprocess", getenv("CI_TEST_BIN"));
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

static int child(const char *mode)
{
    CHECK_CU(cuInit(0));
    CUdeviceptr a, b;
    if (strcmp(mode, "fill") == 0) {
        /* parent holds 6 MiB of 10 */
        CHECK(cuMemAlloc_v2(&a, 5 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "5 MiB must not fit");
        CHECK_CU(cuMemAlloc_v2(&a, 4 * MiB));
        CHECK(cuMemAlloc_v2(&b, 1) == CUDA_ERROR_OUT_OF_MEMORY, "exactly at the shared limit");
        return 0; /* exits without freeing: the driver (and the slot) give it back */
    }
    if (strcmp(mode, "attach") == 0) {
        /* parent holds all 10 MiB */
        CHECK(cuMemAlloc_v2(&a, 1) == CUDA_ERROR_OUT_OF_MEMORY, "nothing left");
        return 0;
    }
    if (strcmp(mode, "die-holding-lock") == 0) {
        CHECK_CU(cuMemAlloc_v2(&a, 4 * MiB));
        struct ci_region *r = ct_region();
        CHECK(pthread_mutex_lock((pthread_mutex_t *)(void *)r->header.lock) == 0, "lock");
        kill(getpid(), SIGKILL);
        for (;;)
            pause();
    }
    return 2;
}

int main(int argc, char **argv)
{
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", "10Mi");
    if (argc == 3 && strcmp(argv[1], "child") == 0)
        return child(argv[2]);

    CHECK_CU(cuInit(0));
    CUdeviceptr six, four;
    CHECK_CU(cuMemAlloc_v2(&six, 6 * MiB));
    int st = run_child("fill");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child fill failed (status %d)", st);
    CHECK_CU(cuMemAlloc_v2(&four, 4 * MiB)); /* the exited child's 4 MiB came back */
    CUdeviceptr one;
    CHECK(cuMemAlloc_v2(&one, 1) == CUDA_ERROR_OUT_OF_MEMORY, "limit is shared");
    CHECK_CU(cuMemFree_v2(four));
    printf("ok exact limit across two processes; exit returns the share\n");

    st = run_child("die-holding-lock");
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child should die by SIGKILL (%d)", st);
    struct ci_region *r = ct_region();
    int active = 0;
    for (int i = 0; i < CI_REGION_MAX_SLOTS; i++)
        active += r->slots[i].state == CI_SLOT_ACTIVE && r->slots[i].pid != getpid();
    CHECK(active == 1, "dead child's slot still active before recovery (%d)", active);
    double t0 = ct_now_s();
    CHECK_CU(cuMemAlloc_v2(&four, 4 * MiB)); /* the dead child's 4 MiB ended with it */
    CHECK(ct_now_s() - t0 < 1.0, "allocation waited for the dead holder");
    CHECK(cuMemAlloc_v2(&one, 1) == CUDA_ERROR_OUT_OF_MEMORY, "still exactly at the limit");
    st = run_child("attach"); /* attaching takes the lock: recovers EOWNERDEAD, reaps */
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child attach failed (status %d)", st);
    CHECK(pthread_mutex_trylock((pthread_mutex_t *)(void *)r->header.lock) == 0,
          "lock consistent and free after recovery");
    pthread_mutex_unlock((pthread_mutex_t *)(void *)r->header.lock);
    active = 0;
    for (int i = 0; i < CI_REGION_MAX_SLOTS; i++)
        active += r->slots[i].state == CI_SLOT_ACTIVE && r->slots[i].pid != getpid();
    CHECK(active == 0, "dead child's slot reaped (%d active)", active);
    CHECK_CU(cuMemFree_v2(four));
    CHECK_CU(cuMemFree_v2(six));
    printf("ok SIGKILL while holding the region lock: recovered, share reaped\n");
    return 0;
}
