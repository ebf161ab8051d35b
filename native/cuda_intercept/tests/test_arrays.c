/*
 * test_arrays — CUDA arrays count against the limit with the size their descriptor
 * implies (width x height x depth x element size x channels; a mipmapped array the sum of
 * its levels), reserved before the driver is called and given back by the destroy:
 *
 *   test_arrays plain      cuArrayCreate_v2: 1D and 2D arrays of the integer, half and
 *                          float formats
 *   test_arrays 3d         cuArray3DCreate_v2: 3D, layered and cubemap arrays; block-
 *                          compressed, NV12, packed and unknown formats
 *   test_arrays mipmapped  cuMipmappedArrayCreate: 2D, 3D and layered, levels summed
 *
 * In each: an array that would pass the limit is refused with CUDA_ERROR_OUT_OF_MEMORY
 * before the driver sees it, and after the destroys the counters are back to 0.
 */
#include "ci_test.h"

#define MiB (1ull << 20)
#define LIMIT (16 * MiB)

static struct ci_region_slot *slot;

static unsigned long long used(void)
{
    return slot->dev[0].memory_used_bytes;
}

static CUarray array2d(size_t w, size_t h, int format, unsigned ch, unsigned long long want)
{
    CUDA_ARRAY_DESCRIPTOR d = {.Width = w, .Height = h, .Format = format, .NumChannels = ch};
    unsigned long long before = used();
    CUarray a = NULL;
    CHECK_CU(cuArrayCreate_v2(&a, &d));
    CHECK(used() - before == want, "%zux%zu format %#x x%u charged %llu, want %llu", w, h, format, ch,
          used() - before, want);
    return a;
}

static CUDA_ARRAY3D_DESCRIPTOR desc3(size_t w, size_t h, size_t d, int format, unsigned ch, unsigned flags)
{
    CUDA_ARRAY3D_DESCRIPTOR x = {.Width = w, .Height = h, .Depth = d, .Format = format,
                                 .NumChannels = ch, .Flags = flags};
    return x;
}

static CUarray array3d(CUDA_ARRAY3D_DESCRIPTOR d, unsigned long long want)
{
    unsigned long long before = used();
    CUarray a = NULL;
    CHECK_CU(cuArray3DCreate_v2(&a, &d));
    CHECK(used() - before == want, "%zux%zux%zu format %#x x%u flags %u charged %llu, want %llu",
          d.Width, d.Height, d.Depth, d.Format, d.NumChannels, d.Flags, used() - before, want);
    return a;
}

static CUmipmappedArray mipmapped(CUDA_ARRAY3D_DESCRIPTOR d, unsigned levels, unsigned long long want)
{
    unsigned long long before = used();
    CUmipmappedArray m = NULL;
    CHECK_CU(cuMipmappedArrayCreate(&m, &d, levels));
    CHECK(used() - before == want, "%zux%zux%zu, %u levels charged %llu, want %llu", d.Width,
          d.Height, d.Depth, levels, used() - before, want);
    return m;
}

static void refused(const char *entry, CUresult r)
{
    CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "%s past the limit answered %d", entry, r);
}

static void plain(void)
{
    CUarray a = array2d(1024, 1024, CU_AD_FORMAT_FLOAT, 1, 4 * MiB);
    CUarray b = array2d(1000, 1000, CU_AD_FORMAT_UNSIGNED_INT8, 4, 4000000);
    CUarray c = array2d(4096, 0, CU_AD_FORMAT_HALF, 2, 16384); /* 1D: height 0 */
    CUarray d = array2d(300, 200, CU_AD_FORMAT_SIGNED_INT16, 1, 120000);
    CUarray e = array2d(10, 10, CU_AD_FORMAT_SIGNED_INT32, 2, 800);
    unsigned long long held = 4 * MiB + 4000000 + 16384 + 120000 + 800;
    CHECK(used() == held, "held %llu", used());
    unsigned long calls = fakecuda_calls("cuArrayCreate_v2");
    unsigned long long fake0 = fakecuda_used_bytes();
    CUDA_ARRAY_DESCRIPTOR big = {.Width = 3000, .Height = 1024, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
    CUarray x = NULL;
    refused("cuArrayCreate_v2", cuArrayCreate_v2(&x, &big)); /* 12.3 MB on top of 8.3 */
    CHECK(fakecuda_calls("cuArrayCreate_v2") == calls && fakecuda_used_bytes() == fake0,
          "a refused array reached the driver");
    CHECK(used() == held, "refusal changed the accounting: %llu", used());
    CHECK_CU(cuArrayDestroy(a));
    CHECK(used() == held - 4 * MiB, "destroy gave back %llu", held - used());
    CHECK_CU(cuArrayCreate_v2(&x, &big)); /* fits now */
    CHECK_CU(cuArrayDestroy(x));
    CHECK_CU(cuArrayDestroy(b));
    CHECK_CU(cuArrayDestroy(c));
    CHECK_CU(cuArrayDestroy(d));
    CHECK_CU(cuArrayDestroy(e));
    CHECK(used() == 0, "all destroyed: %llu", used());
    printf("ok cuArrayCreate_v2\n");
}

static void three_d(void)
{
    CUarray a[9];
    int n = 0;
    a[n++] = array3d(desc3(64, 64, 64, CU_AD_FORMAT_FLOAT, 4, 0), 4 * MiB);
    a[n++] = array3d(desc3(256, 256, 10, CU_AD_FORMAT_UNSIGNED_INT16, 1, CUDA_ARRAY3D_LAYERED), 1310720);
    a[n++] = array3d(desc3(128, 128, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP), 393216);
    a[n++] = array3d(desc3(1024, 1024, 0, 0x91 /* BC1: 8 B per 4x4 */, 4, 0), 524288);
    a[n++] = array3d(desc3(1000, 1000, 0, 0x9d /* BC7: 16 B per 4x4 */, 4, 0), 1000000);
    a[n++] = array3d(desc3(1922, 1080, 0, 0x93 /* BC2, 1922 -> 481 blocks */, 4, 0), 481ull * 270 * 16);
    a[n++] = array3d(desc3(1920, 1080, 0, CU_AD_FORMAT_NV12, 3, 0), 3110400);
    a[n++] = array3d(desc3(100, 100, 0, 0xc5 /* UNORM_INT16X4 */, 4, 0), 80000);
    a[n++] = array3d(desc3(10, 10, 0, 0x50 /* unknown: 4 B a channel */, 3, 0), 1200);
    unsigned long long held = used();
    CUarray x = NULL;
    CUDA_ARRAY3D_DESCRIPTOR big = desc3(256, 256, 64, CU_AD_FORMAT_FLOAT, 1, 0);
    unsigned long calls = fakecuda_calls("cuArray3DCreate_v2");
    refused("cuArray3DCreate_v2", cuArray3DCreate_v2(&x, &big));
    CHECK(fakecuda_calls("cuArray3DCreate_v2") == calls, "a refused 3D array reached the driver");
    CHECK(used() == held, "refusal changed the accounting");
    for (int i = 0; i < n; i++)
        CHECK_CU(cuArrayDestroy(a[i]));
    CHECK(used() == 0, "all destroyed: %llu", used());
    printf("ok cuArray3DCreate_v2\n");
}

static void mipmaps(void)
{
    /* 1024^2 float, 11 levels: 4 MiB + 1 MiB + 256 KiB + ... + 4 B */
    CUmipmappedArray a = mipmapped(desc3(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 1, 0), 11, 5592404);
    /* 64^3 bytes, 7 levels: every dimension halves */
    CUmipmappedArray b = mipmapped(desc3(64, 64, 64, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0), 7, 299593);
    /* 256^2 float, 4 layers, 3 levels: the layers do not halve */
    CUmipmappedArray c = mipmapped(desc3(256, 256, 4, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED), 3,
                                   (65536ull + 16384 + 4096) * 4 * 4);
    /* 1000 x 1 texels of 2 B, 4 levels: 1000, 500, 250, 125 */
    CUmipmappedArray d = mipmapped(desc3(1000, 0, 0, CU_AD_FORMAT_HALF, 1, 0), 4, (1000ull + 500 + 250 + 125) * 2);
    unsigned long long held = used();
    CUmipmappedArray x = NULL;
    CUDA_ARRAY3D_DESCRIPTOR big = desc3(2048, 2048, 0, CU_AD_FORMAT_FLOAT, 1, 0);
    unsigned long calls = fakecuda_calls("cuMipmappedArrayCreate");
    refused("cuMipmappedArrayCreate", cuMipmappedArrayCreate(&x, &big, 1));
    CHECK(fakecuda_calls("cuMipmappedArrayCreate") == calls, "a refused mipmapped array reached the driver");
    CHECK(used() == held, "refusal changed the accounting");
    CHECK_CU(cuMipmappedArrayDestroy(a));
    CHECK(used() == held - 5592404, "destroy gave back %llu", held - used());
    CHECK_CU(cuMipmappedArrayDestroy(b));
    CHECK_CU(cuMipmappedArrayDestroy(c));
    CHECK_CU(cuMipmappedArrayDestroy(d));
    CHECK(used() == 0, "all destroyed: %llu", used());
    printf("ok cuMipmappedArrayCreate\n");
}

int main(int argc, char **argv)
{
    char limit[32];
    snprintf(limit, sizeof limit, "%llu", LIMIT);
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", limit);
    CHECK_CU(cuInit(0));
    slot = ct_slot_of(ct_region(), getpid());
    CHECK(slot != NULL, "no slot");
    const char *mode = argc > 1 ? argv[1] : "plain";
    if (strcmp(mode, "plain") == 0)
        plain();
    else if (strcmp(mode, "3d") == 0)
        three_d();
    else if (strcmp(mode, "mipmapped") == 0)
        mipmaps();
    else
        CHECK(0, "unknown mode %s", mode);
    CHECK(CT_WAIT_FIELD(slot, 0, alloc_denied, 1) >= 1, "the refusal was not published");
    CHECK(CT_WAIT_FIELD(slot, 0, alloc_count, 4) >= 4, "the arrays were not counted as allocations");
    return 0;
}
