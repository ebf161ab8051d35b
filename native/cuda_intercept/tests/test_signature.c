/*
 * test_signature — the launch-stream signature finds the iteration period of
 * a training-like loop (an iteration of 73 launches with repeated "layers"
 * inside) and counts iterations and their duration.
 */
#include "ci_test.h"

#define K(i) ((CUfunction)(uintptr_t)(0x7000 + 64 * (i)))

static void launch(int i)
{
    CHECK_CU(cuLaunchKernel(K(i), 4, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL));
}

int main(void)
{
    CHECK_CU(cuInit(0));
    const int iterations = 320, per_iter = 1 + 4 * 10 + 1 + 3 * 10 + 1;
    for (int it = 0; it < iterations; it++) {
        launch(0);                       /* embedding */
        for (int l = 0; l < 10; l++)     /* 10 identical layers forward */
            for (int k = 1; k <= 4; k++)
                launch(k);
        launch(5);                       /* loss */
        for (int l = 0; l < 10; l++)     /* backward */
            for (int k = 6; k <= 8; k++)
                launch(k);
        launch(9);                       /* optimizer step */
        ct_sleep_ms(1);
    }
    struct ci_region *r = ct_region();
    struct ci_region_slot *s = ct_slot_of(r, getpid());
    CHECK(s != NULL, "slot");
    for (int i = 0; i < 200 && __atomic_load_n(&s->iterations, __ATOMIC_ACQUIRE) < 100; i++)
        ct_sleep_ms(10);
    printf("period %llu launches, %llu ns, %llu iterations, signature %016llx\n",
           (unsigned long long)s->iteration_period_launches,
           (unsigned long long)s->iteration_period_ns, (unsigned long long)s->iterations,
           (unsigned long long)s->launch_signature);
    CHECK(s->iteration_period_launches == (uint64_t)per_iter, "period %llu, want %d",
          (unsigned long long)s->iteration_period_launches, per_iter);
    CHECK(s->iterations >= 100, "iterations %llu", (unsigned long long)s->iterations);
    CHECK(s->iteration_period_ns >= 1000000 && s->iteration_period_ns < 200000000,
          "period %llu ns", (unsigned long long)s->iteration_period_ns);
    printf("ok iteration period found\n");
    return 0;
}
