/*
 * test_region_fixture — a deterministic workload whose region the Python
 * reader tests decode (tests/integration/interceptor/test_region_reader.py):
 *   limits file: memory_bytes=1Gi, compute_percent=100, workload_id=fixture/ns/pod
 *   1000 cuLaunchKernel + 10 cuGraphLaunch,
 *   host->device: 3 x 1 MiB (cuMemcpyHtoD_v2) + 2048 (2D copy, 64 x 32),
 *   device->host: 2 x 512 KiB (cuMemcpyDtoHAsync_v2),
 *   device->device: 4096 (unified cuMemcpy between device pointers),
 *   allocations: 2 x 3 MiB, one freed; 1 refused (2 GiB).
 * It exits normally, so its slot is left EXITED with memory 0 and these
 * final counters. It also prints the numbers it checked.
 */
#include "ci_test.h"

int main(void)
{
    ct_write_limits("memory_bytes=1Gi\ncompute_percent=100\nworkload_id=fixture/ns/pod\n");
    CHECK_CU(cuInit(0));
    CUdeviceptr a, b, big;
    CHECK_CU(cuMemAlloc_v2(&a, 3 << 20));
    CHECK_CU(cuMemAlloc_v2(&b, 3 << 20));
    CHECK(cuMemAlloc_v2(&big, 2ull << 30) == CUDA_ERROR_OUT_OF_MEMORY, "2 GiB refused");
    for (int i = 0; i < 1000; i++)
        CHECK_CU(cuLaunchKernel((CUfunction)0x9000, 8, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL));
    for (int i = 0; i < 10; i++)
        CHECK_CU(cuGraphLaunch((CUgraphExec)0x9100, NULL));
    static char host[1 << 20];
    for (int i = 0; i < 3; i++)
        CHECK_CU(cuMemcpyHtoD_v2(a, host, sizeof host));
    for (int i = 0; i < 2; i++)
        CHECK_CU(cuMemcpyDtoHAsync_v2(host, a, 512 << 10, NULL));
    CHECK_CU(cuMemcpy(b, a, 4096));
    CUDA_MEMCPY2D c2;
    memset(&c2, 0, sizeof c2);
    c2.srcMemoryType = CU_MEMORYTYPE_HOST;
    c2.srcHost = host;
    c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c2.dstDevice = a;
    c2.WidthInBytes = 64;
    c2.Height = 32;
    CHECK_CU(cuMemcpy2D_v2(&c2));
    CHECK_CU(cuMemFree_v2(b));
    struct ci_region *r = ct_region();
    struct ci_region_slot *s = ct_slot_of(r, getpid());
    CHECK(s != NULL, "slot");
    /* The 2D copy is the last call: once its bytes are published, all earlier ones are. */
    CHECK(CT_WAIT_FIELD(s, 0, memcpy_htod_bytes, 3 * (1u << 20) + 2048) == 3 * (1u << 20) + 2048,
          "htod %llu", (unsigned long long)s->dev[0].memcpy_htod_bytes);
    CHECK(s->dev[0].memcpy_dtod_bytes == 4096, "dtod");
    CHECK(s->dev[0].memcpy_dtoh_bytes == 1u << 20, "dtoh");
    CHECK(s->dev[0].kernel_launches == 1000 && s->dev[0].graph_launches == 10, "launches");
    CHECK(s->dev[0].memory_used_bytes == 3u << 20, "memory in use");
    printf("ok fixture counters published\n");
    return 0;
}
