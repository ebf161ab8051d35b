/*
 * test_lookup — every door into the driver reaches the interceptor's
 * wrappers, and each versioned / per-thread variant reaches the matching real
 * entry point:
 *   - direct calls (LD_PRELOAD interposition),
 *   - dlsym(handle, ...) on a dlopen'ed libcuda, and RTLD_DEFAULT,
 *   - cuGetProcAddress asked for cuGetProcAddress itself at 11030 and 12000
 *     (as the CUDA runtime does), then every hooked name through the pointer
 *     it returned, with and without CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
 *   - unhooked and legacy (pre-3020) entry points pass through untouched,
 *   - NVML memory queries found by dlsym are wrapped too.
 */
#include "ci_test.h"

typedef CUresult (*gpa1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*launch_fn)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                              unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*alloc_fn)(CUdeviceptr *, size_t);

/* Our wrapper for exported name `sym`: what the global scope resolves to. */
static void *wrapper_of(const char *sym)
{
    void *p = dlsym(RTLD_DEFAULT, sym);
    CHECK(p != NULL, "no global %s", sym);
    CHECK(p != fakecuda_real(sym), "global %s is the fake driver's, not the wrapper", sym);
    return p;
}

struct expect {
    const char *base;
    int version;
    cuuint64_t flags;
    const char *variant; /* exported symbol the real driver must hand out */
};

static const struct expect cases[] = {
    {"cuInit", 2000, 0, "cuInit"},
    {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
    {"cuMemAlloc", 12000, 0, "cuMemAlloc_v2"},
    {"cuMemAllocPitch", 12000, 0, "cuMemAllocPitch_v2"},
    {"cuMemAllocManaged", 12000, 0, "cuMemAllocManaged"},
    {"cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"},
    {"cuMemAllocAsync", 12000, 2, "cuMemAllocAsync_ptsz"},
    {"cuMemAllocFromPoolAsync", 12000, 0, "cuMemAllocFromPoolAsync"},
    {"cuMemAllocFromPoolAsync", 12000, 2, "cuMemAllocFromPoolAsync_ptsz"},
    {"cuMemFree", 12000, 0, "cuMemFree_v2"},
    {"cuMemFreeAsync", 12000, 2, "cuMemFreeAsync_ptsz"},
    {"cuMemCreate", 12000, 0, "cuMemCreate"},
    {"cuMemRelease", 12000, 0, "cuMemRelease"},
    {"cuMemGetInfo", 12000, 0, "cuMemGetInfo_v2"},
    {"cuDeviceTotalMem", 12000, 0, "cuDeviceTotalMem_v2"},
    {"cuLaunchKernel", 12000, 0, "cuLaunchKernel"},
    {"cuLaunchKernel", 12000, 1, "cuLaunchKernel"},
    {"cuLaunchKernel", 12000, 2, "cuLaunchKernel_ptsz"},
    {"cuLaunchKernelEx", 12000, 0, "cuLaunchKernelEx"},
    {"cuLaunchKernelEx", 12000, 2, "cuLaunchKernelEx_ptsz"},
    {"cuLaunchCooperativeKernel", 12000, 2, "cuLaunchCooperativeKernel_ptsz"},
    {"cuGraphLaunch", 12000, 0, "cuGraphLaunch"},
    {"cuGraphLaunch", 12000, 2, "cuGraphLaunch_ptsz"},
    {"cuMemcpyHtoD", 12000, 0, "cuMemcpyHtoD_v2"},
    {"cuMemcpyHtoD", 12000, 2, "cuMemcpyHtoD_v2_ptds"},
    {"cuMemcpyDtoH", 12000, 2, "cuMemcpyDtoH_v2_ptds"},
    {"cuMemcpyDtoDAsync", 12000, 2, "cuMemcpyDtoDAsync_v2_ptsz"},
    {"cuMemcpyAsync", 12000, 2, "cuMemcpyAsync_ptsz"},
    {"cuMemcpy", 12000, 0, "cuMemcpy"},
    {"cuMemcpy2D", 12000, 2, "cuMemcpy2D_v2_ptds"},
    {"cuMemcpy3DAsync", 12000, 0, "cuMemcpy3DAsync_v2"},
    {"cuMemcpyPeerAsync", 12000, 2, "cuMemcpyPeerAsync_ptsz"},
    /* contexts, arrays, graphs: the variants the H200's driver (580) hands out */
    {"cuDevicePrimaryCtxRetain", 12000, 0, "cuDevicePrimaryCtxRetain"},
    {"cuDevicePrimaryCtxRelease", 12000, 0, "cuDevicePrimaryCtxRelease_v2"},
    {"cuCtxCreate", 11000, 0, "cuCtxCreate_v2"},
    {"cuCtxCreate", 12000, 0, "cuCtxCreate_v3"},
    {"cuCtxCreate", 13000, 0, "cuCtxCreate_v4"},
    {"cuCtxDestroy", 12000, 0, "cuCtxDestroy_v2"},
    {"cuArrayCreate", 12000, 0, "cuArrayCreate_v2"},
    {"cuArray3DCreate", 12000, 0, "cuArray3DCreate_v2"},
    {"cuMipmappedArrayCreate", 12000, 0, "cuMipmappedArrayCreate"},
    {"cuGraphInstantiate", 12000, 0, "cuGraphInstantiate_v2"},
    {"cuGraphInstantiateWithFlags", 12000, 0, "cuGraphInstantiateWithFlags"},
    {"cuGraphInstantiateWithParams", 12000, 2, "cuGraphInstantiateWithParams_ptsz"},
    {"cuGraphExecDestroy", 12000, 0, "cuGraphExecDestroy"},
    {"cuDeviceGraphMemTrim", 12000, 0, "cuDeviceGraphMemTrim"},
};

static void check_proc_address_table(void *gpa, int is_v2)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct expect *e = &cases[i];
        void *p = NULL;
        CUdriverProcAddressQueryResult st = -1;
        CUresult r = is_v2 ? ((gpa2_fn)gpa)(e->base, &p, e->version, e->flags, &st)
                           : ((gpa1_fn)gpa)(e->base, &p, e->version, e->flags);
        CHECK(r == CUDA_SUCCESS && p != NULL, "%s@%d flags %llu not found", e->base, e->version,
              (unsigned long long)e->flags);
        if (is_v2)
            CHECK(st == CU_GET_PROC_ADDRESS_SUCCESS, "status %d", st);
        CHECK(p == wrapper_of(e->variant), "%s@%d flags %llu: got %p, want wrapper of %s",
              e->base, e->version, (unsigned long long)e->flags, p, e->variant);
    }
}

int main(void)
{
    /* 1. direct call */
    CHECK_CU(cuInit(0));
    CHECK(fakecuda_calls("cuInit") == 1, "direct cuInit did not reach the fake driver");

    /* 2. dlsym on a dlopen'ed driver and RTLD_DEFAULT */
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(h != NULL, "dlopen libcuda.so.1: %s", dlerror());
    void *via_handle = dlsym(h, "cuLaunchKernel_ptsz");
    CHECK(via_handle == wrapper_of("cuLaunchKernel_ptsz"), "dlsym(handle) not wrapped");
    CHECK(dlsym(h, "cuCtxSynchronize") == fakecuda_real("cuCtxSynchronize"),
          "unhooked symbol must pass through");
    CHECK(dlsym(h, "cuNoSuchFunction") == NULL, "missing symbol must stay missing");
    CHECK(dlsym(h, "cuMemAlloc") == fakecuda_real("cuMemAlloc"), "legacy cuMemAlloc passes through");
    unsigned long before = fakecuda_calls("cuLaunchKernel_ptsz");
    CHECK_CU(((launch_fn)via_handle)(NULL, 4, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL));
    CHECK(fakecuda_calls("cuLaunchKernel_ptsz") == before + 1, "wrong real variant");
    printf("ok dlsym\n");

    /* 3. cuGetProcAddress, the runtime's way in */
    void *gpa_sym = dlsym(h, "cuGetProcAddress");
    CHECK(gpa_sym == wrapper_of("cuGetProcAddress"), "dlsym(cuGetProcAddress) not wrapped");
    void *self11 = NULL, *self12 = NULL;
    CHECK_CU(((gpa1_fn)gpa_sym)("cuGetProcAddress", &self11, 11030, 0));
    CHECK(self11 == wrapper_of("cuGetProcAddress"), "cuGetProcAddress@11030 must return ours");
    CHECK_CU(((gpa1_fn)gpa_sym)("cuGetProcAddress", &self12, 12000, 0));
    CHECK(self12 == wrapper_of("cuGetProcAddress_v2"), "cuGetProcAddress@12000 must return ours");
    check_proc_address_table(self11, 0);
    check_proc_address_table(self12, 1);
    void *p = NULL;
    CHECK_CU(((gpa2_fn)self12)("cuCtxSynchronize", &p, 12000, 0, NULL));
    CHECK(p == fakecuda_real("cuCtxSynchronize"), "unhooked via cuGetProcAddress passes through");
    CHECK_CU(((gpa2_fn)self12)("cuMemAlloc", &p, 2000, 0, NULL));
    CHECK(p == fakecuda_real("cuMemAlloc"), "pre-3020 cuMemAlloc is the legacy ABI, not wrapped");
    CUdriverProcAddressQueryResult st = 0;
    CHECK(((gpa2_fn)self12)("cuNoSuchFunction", &p, 12000, 0, &st) != CUDA_SUCCESS &&
              st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
          "unknown symbol must fail with SYMBOL_NOT_FOUND");
    printf("ok cuGetProcAddress (11030, 12000, per-thread variants)\n");

    /* 4. the pointers handed out really enforce: a 1-byte-over allocation fails */
    void *alloc = NULL;
    CHECK_CU(((gpa2_fn)self12)("cuMemAlloc", &alloc, 12000, 0, NULL));
    CUdeviceptr d = 0;
    CHECK_CU(((alloc_fn)alloc)(&d, 1 << 20));
    struct ci_region *r = ct_region();
    struct ci_region_slot *s = ct_slot_of(r, getpid());
    CHECK(s != NULL, "no region slot");
    CHECK(s->dev[0].memory_used_bytes == 1 << 20, "allocation through cuGetProcAddress not counted");
    CHECK(CT_WAIT_FIELD(s, 0, kernel_launches, 1) >= 1, "launch through dlsym not counted");

    /* 5. NVML found by dlsym is wrapped */
    void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    CHECK(nv != NULL, "dlopen libnvidia-ml.so.1");
    CHECK(dlsym(nv, "nvmlDeviceGetMemoryInfo") == dlsym(RTLD_DEFAULT, "nvmlDeviceGetMemoryInfo") &&
              dlsym(nv, "nvmlDeviceGetMemoryInfo") != NULL,
          "nvmlDeviceGetMemoryInfo not wrapped");
    CHECK(dlsym(nv, "nvmlInit_v2") != NULL, "unhooked NVML passes through");
    printf("ok wrappers enforce; NVML wrapped\n");
    return 0;
}
