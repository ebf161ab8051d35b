/*
 * test_kernel_names — the region's device.kernel_names word (ci_kernel_names.c).
 *   names:    kernels named like PyTorch's backward, optimizer (multi_tensor_apply) and
 *             elementwise kernels, a custom kernel, a made-up handle the driver cannot
 *             name, graph launches: the word says names were read, a PyTorch kernel ran,
 *             and counts exactly the backward + optimizer launches; the driver is asked
 *             once per handle. A forked child that launches only the custom kernel has
 *             a word of its own: names read, no PyTorch kernel, 0.
 *             Its region is also decoded by tests/integration/interceptor.
 *   no-names: the driver refuses cuFuncGetName (FAKECUDA_NO_FUNC_NAME=1, as a driver
 *             without names): the word stays 0 and each handle is asked about once.
 */
#include <sys/wait.h>

#include "ci_test.h"

CUresult cuModuleGetFunction(CUfunction *f, CUmodule mod, const char *name);

#define BACKWARD "_ZN2at6native29nll_loss_backward_reduce_cuda_kernel_2dIfEEvPT_PKS3_"
#define OPTIMIZER                                                                           \
    "_ZN2at6native12_GLOBAL__N_125multi_tensor_apply_kernelINS1_18TensorListMetadataILi4EEE" \
    "NS1_14FusedAdamMathFunctorIfLi4EEEJEEEvT_T0_DpT1_"
#define ELEMENTWISE "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEEEEvT_"
#define CUSTOM "my_custom_kernel"
#define MADE_UP ((CUfunction)0x9000)

static void launch(CUfunction f, int n)
{
    for (int i = 0; i < n; i++)
        CHECK_CU(i % 2 ? cuLaunchKernel(f, 4, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL)
                       : cuLaunchKernel_ptsz(f, 4, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL));
}

static CUfunction function(const char *name)
{
    CUfunction f = NULL;
    CHECK_CU(cuModuleGetFunction(&f, NULL, name));
    return f;
}

/* The word once the monitor has published at least `want` of it (flags and count only
 * grow), then some ticks more: nothing else may arrive. */
static uint64_t settled_word(struct ci_region_slot *s, uint64_t want)
{
    CT_WAIT_FIELD(s, 0, kernel_names, want);
    ct_sleep_ms(50);
    return __atomic_load_n(&s->dev[0].kernel_names, __ATOMIC_ACQUIRE);
}

static void child_custom_only(CUfunction custom)
{
    pid_t kid = fork();
    CHECK(kid >= 0, "fork");
    if (kid == 0) {
        alarm(20);
        CHECK_CU(cuInit(0));
        launch(custom, 100);
        exit(0);
    }
    int st = 0;
    CHECK(waitpid(kid, &st, 0) == kid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d",
          st);
    struct ci_region *r = ct_region();
    for (int i = 0; i < CI_REGION_MAX_SLOTS; i++) {
        struct ci_region_slot *cs = &r->slots[i];
        if (cs->pid != kid)
            continue;
        CHECK(cs->state == CI_SLOT_EXITED && cs->dev[0].kernel_launches == 100, "child slot");
        CHECK(cs->dev[0].kernel_names == CI_KERNEL_NAMES_READ, "child word %016llx",
              (unsigned long long)cs->dev[0].kernel_names);
        printf("ok forked child: its own word (names read, no PyTorch kernel, 0)\n");
        return;
    }
    CHECK(0, "no slot for child %d", kid);
}

static int names(void)
{
    CHECK_CU(cuInit(0));
    CUfunction backward = function(BACKWARD), optimizer = function(OPTIMIZER),
               elementwise = function(ELEMENTWISE), custom = function(CUSTOM);
    launch(elementwise, 500);
    launch(backward, 300);
    launch(custom, 200);
    launch(MADE_UP, 100);
    launch(optimizer, 50);
    for (int i = 0; i < 10; i++)
        CHECK_CU(cuGraphLaunch((CUgraphExec)0x9100, NULL));
    struct ci_region_slot *s = ct_slot_of(ct_region(), getpid());
    CHECK(s != NULL, "slot");
    uint64_t want = CI_KERNEL_NAMES_READ | CI_KERNEL_NAMES_TORCH_SEEN | 350;
    uint64_t word = settled_word(s, want);
    printf("kernel_names %016llx, kernel launches %llu\n", (unsigned long long)word,
           (unsigned long long)s->dev[0].kernel_launches);
    CHECK(word == want, "word %016llx, want %016llx", (unsigned long long)word,
          (unsigned long long)want);
    CHECK(s->dev[0].kernel_launches == 1150, "launches %llu",
          (unsigned long long)s->dev[0].kernel_launches);
    CHECK(fakecuda_calls("cuFuncGetName") == 5, "cuFuncGetName asked %lu times, want 5 (once a handle)",
          fakecuda_calls("cuFuncGetName"));
    printf("ok 350 training-named launches of 1150, PyTorch seen, one name lookup per handle\n");
    child_custom_only(custom);
    return 0;
}

static int no_names(void)
{
    ct_set_env("FAKECUDA_NO_FUNC_NAME", "1");
    CHECK_CU(cuInit(0));
    CUfunction backward = function(BACKWARD), elementwise = function(ELEMENTWISE);
    launch(elementwise, 200);
    launch(backward, 200);
    struct ci_region_slot *s = ct_slot_of(ct_region(), getpid());
    CHECK(s != NULL, "slot");
    CHECK(CT_WAIT_FIELD(s, 0, kernel_launches, 400) == 400, "launches");
    ct_sleep_ms(50); /* a few more publishes */
    uint64_t word = __atomic_load_n(&s->dev[0].kernel_names, __ATOMIC_ACQUIRE);
    CHECK(word == 0, "word %016llx, want 0", (unsigned long long)word);
    CHECK(fakecuda_calls("cuFuncGetName") == 2, "cuFuncGetName asked %lu times, want 2",
          fakecuda_calls("cuFuncGetName"));
    printf("ok names unavailable: nothing counted, flags 0, asked once a handle\n");
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "names") == 0)
        return names();
    if (strcmp(mode, "no-names") == 0)
        return no_names();
    fprintf(stderr, "usage: test_kernel_names names|no-names\n");
    return 2;
}
