/*
 * test_memory — the hard memory limit, API by API, in one process:
 * allocate exactly to the limit, one byte more fails with
 * CUDA_ERROR_OUT_OF_MEMORY, free, allocate again; frees return exactly what
 * was charged; a failed real allocation returns its reservation; the pitch
 * allocator is charged pitch*height; cuMemCreate counts device locations
 * only; cuMemGetInfo, cuDeviceTotalMem and nvmlDeviceGetMemoryInfo(_v2)
 * report the limit.
 */
#include "ci_test.h"

#define LIMIT (8u << 20)


static struct ci_region_slot *slot;

static uint64_t used(void)
{
    return slot->dev[0].memory_used_bytes;
}

typedef CUresult (*any_alloc)(CUdeviceptr *, size_t, int);

static CUresult a_plain(CUdeviceptr *p, size_t n, int f) { (void)f; return cuMemAlloc_v2(p, n); }
static CUresult a_managed(CUdeviceptr *p, size_t n, int f) { (void)f; return cuMemAllocManaged(p, n, 1); }
static CUresult a_async(CUdeviceptr *p, size_t n, int f) { return f ? cuMemAllocAsync_ptsz(p, n, NULL) : cuMemAllocAsync(p, n, NULL); }
static CUresult a_pool(CUdeviceptr *p, size_t n, int f) { return f ? cuMemAllocFromPoolAsync_ptsz(p, n, NULL, NULL) : cuMemAllocFromPoolAsync(p, n, NULL, NULL); }
static CUresult f_free(CUdeviceptr p, int f) { (void)f; return cuMemFree_v2(p); }
static CUresult f_async(CUdeviceptr p, int f) { return f ? cuMemFreeAsync_ptsz(p, NULL) : cuMemFreeAsync(p, NULL); }

static void exact_limit(const char *what, any_alloc alloc, CUresult (*release)(CUdeviceptr, int), int flag)
{
    CUdeviceptr a = 0, b = 0, c = 0;
    uint64_t fake0 = fakecuda_used_bytes();
    CHECK(alloc(&a, LIMIT / 2, flag) == CUDA_SUCCESS, "%s: first half", what);
    CHECK(alloc(&b, LIMIT / 2, flag) == CUDA_SUCCESS, "%s: second half", what);
    CHECK(used() == LIMIT, "%s: used %llu", what, (unsigned long long)used());
    CHECK(alloc(&c, 1, flag) == CUDA_ERROR_OUT_OF_MEMORY, "%s: one byte over must fail", what);
    CHECK(fakecuda_used_bytes() == fake0 + LIMIT, "%s: refused allocation reached the driver", what);
    CHECK(release(a, flag) == CUDA_SUCCESS && used() == LIMIT / 2, "%s: free exact", what);
    CHECK(alloc(&c, 1, flag) == CUDA_SUCCESS, "%s: fits after free", what);
    CHECK(release(c, flag) == CUDA_SUCCESS && release(b, flag) == CUDA_SUCCESS, "%s: frees", what);
    CHECK(used() == 0, "%s: all returned, used %llu", what, (unsigned long long)used());
    CHECK(alloc(&a, LIMIT, flag) == CUDA_SUCCESS, "%s: whole limit at once", what);
    CHECK(release(a, flag) == CUDA_SUCCESS && used() == 0, "%s: final free", what);
    printf("ok %s%s\n", what, flag ? " (_ptsz)" : "");
}

static void pitch(void)
{
    CUdeviceptr a = 0, b = 0, c = 0;
    size_t pa = 0, pb = 0, pc = 0;
    /* width 1000 -> pitch 1024: each 4096-row allocation is exactly LIMIT/2 */
    CHECK_CU(cuMemAllocPitch_v2(&a, &pa, 1000, 4096, 4));
    CHECK(pa == 1024 && used() == 1024u * 4096u, "pitch charged pitch*height, used %llu",
          (unsigned long long)used());
    CHECK_CU(cuMemAllocPitch_v2(&b, &pb, 1000, 4096, 4));
    CHECK(used() == LIMIT, "pitch at limit");
    CHECK(cuMemAllocPitch_v2(&c, &pc, 1, 1, 1) == CUDA_ERROR_OUT_OF_MEMORY, "pitch over");
    CHECK_CU(cuMemFree_v2(a));
    uint64_t fake0 = fakecuda_used_bytes();
    /* width*height fits the remaining half, pitch*height does not: undone */
    CHECK(cuMemAllocPitch_v2(&c, &pc, 1000, 4097, 4) == CUDA_ERROR_OUT_OF_MEMORY,
          "pitch whose real size passes the limit must fail");
    CHECK(fakecuda_used_bytes() == fake0 && used() == LIMIT / 2, "pitch overshoot undone");
    CHECK_CU(cuMemFree_v2(b));
    CHECK(used() == 0, "pitch frees");
    printf("ok cuMemAllocPitch_v2\n");
}

static void vmm(void)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h1, h2, h3, hh;
    CHECK_CU(cuMemCreate(&h1, LIMIT / 2, &prop, 0));
    CHECK_CU(cuMemCreate(&h2, LIMIT / 2, &prop, 0));
    CHECK(used() == LIMIT, "cuMemCreate charged");
    CHECK(cuMemCreate(&h3, 2u << 20, &prop, 0) == CUDA_ERROR_OUT_OF_MEMORY, "cuMemCreate over");
    CUmemAllocationProp host = prop;
    host.location.type = 2; /* host location: not GPU memory */
    CHECK_CU(cuMemCreate(&hh, LIMIT, &host, 0));
    CHECK_CU(cuMemRelease(hh));
    CHECK_CU(cuMemRelease(h1));
    CHECK(used() == LIMIT / 2, "cuMemRelease exact");
    CHECK_CU(cuMemCreate(&h3, LIMIT / 2, &prop, 0));
    CHECK_CU(cuMemRelease(h2));
    CHECK_CU(cuMemRelease(h3));
    CHECK(used() == 0, "VMM all released");
    printf("ok cuMemCreate/cuMemRelease\n");
}

static void reporting(void)
{
    CUdeviceptr a;
    CHECK_CU(cuMemAlloc_v2(&a, 3u << 20));
    size_t fr = 0, total = 0;
    CHECK_CU(cuMemGetInfo_v2(&fr, &total));
    CHECK(total == LIMIT && fr == LIMIT - (3u << 20), "cuMemGetInfo %zu/%zu", fr, total);
    size_t t2 = 0;
    CHECK_CU(cuDeviceTotalMem_v2(&t2, 0));
    CHECK(t2 == LIMIT, "cuDeviceTotalMem %zu", t2);
    void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    CHECK(nv != NULL, "dlopen NVML");
    nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t *) = (nvmlReturn_t(*)(unsigned, nvmlDevice_t *))dlsym(nv, "nvmlDeviceGetHandleByIndex_v2");
    nvmlReturn_t (*info)(nvmlDevice_t, nvmlMemory_t *) = (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_t *))dlsym(nv, "nvmlDeviceGetMemoryInfo");
    nvmlReturn_t (*info2)(nvmlDevice_t, nvmlMemory_v2_t *) = (nvmlReturn_t(*)(nvmlDevice_t, nvmlMemory_v2_t *))dlsym(nv, "nvmlDeviceGetMemoryInfo_v2");
    nvmlDevice_t dev;
    CHECK(by_index(0, &dev) == NVML_SUCCESS, "NVML handle");
    nvmlMemory_t m;
    CHECK(info(dev, &m) == NVML_SUCCESS, "nvmlDeviceGetMemoryInfo");
    CHECK(m.total == LIMIT && m.used == (3u << 20) && m.free == LIMIT - (3u << 20),
          "NVML v1 total %llu used %llu free %llu", m.total, m.used, m.free);
    nvmlMemory_v2_t m2;
    memset(&m2, 0, sizeof m2);
    CHECK(info2(dev, &m2) == NVML_SUCCESS, "nvmlDeviceGetMemoryInfo_v2");
    CHECK(m2.total == LIMIT && m2.used == (3u << 20) && m2.free == LIMIT - (3u << 20),
          "NVML v2 total %llu used %llu free %llu", m2.total, m2.used, m2.free);
    CHECK_CU(cuMemFree_v2(a));
    printf("ok cuMemGetInfo, cuDeviceTotalMem, nvmlDeviceGetMemoryInfo(_v2) report the limit\n");
}

static void failures(void)
{
    /* the driver itself fails: the reservation must come back */
    ct_set_env("FAKECUDA_TOTAL_MEM", "1048576");
    CUdeviceptr a = 0;
    CHECK(cuMemAlloc_v2(&a, 2u << 20) == CUDA_ERROR_OUT_OF_MEMORY, "fake driver OOM");
    CHECK(used() == 0, "reservation of a failed allocation returned");
    unsetenv("FAKECUDA_TOTAL_MEM");
    /* freeing an unknown pointer changes nothing */
    CHECK_CU(cuMemAlloc_v2(&a, 1u << 20));
    CHECK(cuMemFree_v2(a + 4096) != CUDA_SUCCESS, "bogus free fails in the driver");
    CHECK(used() == 1u << 20, "bogus free did not change accounting");
    CHECK_CU(cuMemFree_v2(a));
    CHECK(cuMemFree_v2(a) != CUDA_SUCCESS && used() == 0, "double free does not go negative");
    printf("ok driver failures keep the accounting exact\n");
}

int main(void)
{
    char limit[32];
    snprintf(limit, sizeof limit, "%u", LIMIT);
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", limit);
    CHECK_CU(cuInit(0));
    struct ci_region *r = ct_region();
    slot = ct_slot_of(r, getpid());
    CHECK(slot != NULL, "no slot");
    CHECK(r->header.memory_limit_bytes == LIMIT, "header limit %llu",
          (unsigned long long)r->header.memory_limit_bytes);
    exact_limit("cuMemAlloc_v2", a_plain, f_free, 0);
    exact_limit("cuMemAllocManaged", a_managed, f_free, 0);
    exact_limit("cuMemAllocAsync", a_async, f_async, 0);
    exact_limit("cuMemAllocAsync", a_async, f_async, 1);
    exact_limit("cuMemAllocFromPoolAsync", a_pool, f_async, 0);
    exact_limit("cuMemAllocFromPoolAsync", a_pool, f_async, 1);
    pitch();
    vmm();
    reporting();
    failures();
    uint64_t count = CT_WAIT_FIELD(slot, 0, alloc_count, 31);
    CHECK(count >= 31, "alloc_count published: %llu", (unsigned long long)count);
    CHECK(CT_WAIT_FIELD(slot, 0, alloc_denied, 9) >= 9, "alloc_denied published");
    return 0;
}
