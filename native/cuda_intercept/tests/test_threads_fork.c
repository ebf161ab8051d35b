/*
 * test_threads_fork — 64 threads allocating, launching and copying at once:
 * the shared limit is never exceeded (exactly limit/size allocations succeed
 * when all threads try together), counts are exact, nothing leaks; fork while
 * other threads allocate does not deadlock; a forked child starts with its
 * own slot and counters.
 */
#include <pthread.h>
#include <sys/wait.h>

#include "ci_test.h"

#define THREADS 64
#define ITERS 200
#define LIMIT (64u << 20)
#define BIG (2u << 20)

static pthread_barrier_t barrier;
static _Atomic int granted;
static _Atomic int stop;

static void *worker(void *arg)
{
    long id = (long)arg;
    char host[100] = {0};
    for (int i = 0; i < ITERS; i++) {
        CUdeviceptr p;
        CHECK_CU(cuMemAlloc_v2(&p, 64 << 10));
        CHECK_CU(id % 2 ? cuLaunchKernel((CUfunction)(uintptr_t)(0x1000 + 16 * (i % 7)), 1, 1, 1, 32, 1, 1,
                                         0, NULL, NULL, NULL)
                        : cuLaunchKernel_ptsz((CUfunction)(uintptr_t)(0x1000 + 16 * (i % 7)), 1, 1, 1, 32,
                                              1, 1, 0, NULL, NULL, NULL));
        CHECK_CU(cuMemcpyHtoD_v2(p, host, sizeof host));
        CHECK_CU(cuMemFree_v2(p));
    }
    /* everyone at once: exactly LIMIT / BIG of them may hold BIG */
    pthread_barrier_wait(&barrier);
    CUdeviceptr big = 0;
    CUresult r = cuMemAlloc_v2(&big, BIG);
    CHECK(r == CUDA_SUCCESS || r == CUDA_ERROR_OUT_OF_MEMORY, "unexpected %d", r);
    if (r == CUDA_SUCCESS)
        granted++;
    pthread_barrier_wait(&barrier);
    if (r == CUDA_SUCCESS)
        CHECK_CU(cuMemFree_v2(big));
    return NULL;
}

static void *churn(void *arg)
{
    (void)arg;
    while (!stop) {
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, 4096) == CUDA_SUCCESS)
            cuMemFree_v2(p);
    }
    return NULL;
}

int main(void)
{
    char lim[32];
    snprintf(lim, sizeof lim, "%u", LIMIT);
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", lim);
    CHECK_CU(cuInit(0));
    struct ci_region *r = ct_region();
    struct ci_region_slot *s = ct_slot_of(r, getpid());
    CHECK(s != NULL, "slot");

    pthread_t t[THREADS];
    pthread_barrier_init(&barrier, NULL, THREADS);
    for (long i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0, "thread");
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(granted == LIMIT / BIG, "granted %d of %d concurrent big allocations", granted,
          THREADS);
    CHECK(s->dev[0].memory_used_bytes == 0 && fakecuda_used_bytes() == 0, "leak after threads");
    uint64_t want = (uint64_t)THREADS * ITERS;
    CHECK(CT_WAIT_FIELD(s, 0, kernel_launches, want) == want, "launches %llu",
          (unsigned long long)s->dev[0].kernel_launches);
    CHECK(CT_WAIT_FIELD(s, 0, memcpy_htod_bytes, want * 100) == want * 100, "htod bytes");
    printf("ok %d threads: limit held (%d x 2 MiB granted), counts exact, no leak\n", THREADS,
           granted);

    /* fork while 8 threads churn allocations: no deadlock, child is independent */
    pthread_t c[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&c[i], NULL, churn, NULL);
    pid_t kids[5];
    for (int k = 0; k < 5; k++) {
        kids[k] = fork();
        CHECK(kids[k] >= 0, "fork");
        if (kids[k] == 0) {
            alarm(20);
            CHECK_CU(cuInit(0));
            CUdeviceptr p;
            CHECK_CU(cuMemAlloc_v2(&p, 1 << 20));
            for (int i = 0; i < 10; i++)
                CHECK_CU(cuLaunchKernel((CUfunction)0x2000, 2, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
            exit(0);
        }
    }
    for (int k = 0; k < 5; k++) {
        int st = 0;
        CHECK(waitpid(kids[k], &st, 0) == kids[k] && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "child %d status %d", k, st);
    }
    stop = 1;
    for (int i = 0; i < 8; i++)
        pthread_join(c[i], NULL);
    for (int k = 0; k < 5; k++) {
        int found = 0;
        for (int i = 0; i < CI_REGION_MAX_SLOTS; i++) {
            struct ci_region_slot *cs = &r->slots[i];
            if (cs->pid != kids[k])
                continue;
            found = 1;
            CHECK(cs->state == CI_SLOT_EXITED, "child slot retired");
            CHECK(cs->dev[0].kernel_launches == 10 && cs->dev[0].alloc_count == 1,
                  "child counters are its own: launches %llu allocs %llu",
                  (unsigned long long)cs->dev[0].kernel_launches,
                  (unsigned long long)cs->dev[0].alloc_count);
            CHECK(cs->dev[0].memory_used_bytes == 0, "exited child holds no memory");
        }
        CHECK(found, "no slot for child %d", kids[k]);
    }
    CHECK(s->state == CI_SLOT_ACTIVE && s->dev[0].memory_used_bytes == 0, "parent slot intact");
    printf("ok fork under load: children independent, no deadlock\n");
    return 0;
}
