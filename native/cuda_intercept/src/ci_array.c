/*
 * ci_array.c — CUDA arrays (texture and surface memory): cuArrayCreate_v2,
 * cuArray3DCreate_v2 and cuMipmappedArrayCreate, freed by cuArrayDestroy and
 * cuMipmappedArrayDestroy. (The pre-3.2 cuArrayCreate / cuArray3DCreate, with 32-bit
 * descriptors, pass through uncounted like the legacy cuMemAlloc.)
 *
 * Charged like an allocation (ci_memory.c: reserve, call, record, give back at destroy)
 * with the size the descriptor implies: width x height x depth x element bytes, a height or
 * depth of 0 counting 1 (layers and cubemap faces are the depth); a mipmapped array the
 * sum of its levels, each dimension halved per level down to 1 (layers and faces stay).
 * Element bytes: the channel size times the channels for the integer, half and float
 * formats; the packed UNORM/SNORM formats their own size; block-compressed formats 8 or 16
 * bytes per 4x4 block; NV12 1.5 bytes per texel; a format this file does not know 4 bytes
 * per channel.
 *
 * That is a lower bound: the driver stores arrays tiled and in 2 MiB pages, which the
 * descriptor does not tell. On the H200 (driver 580) a 3000x3000 float4 array, 137.3 MiB of
 * texels, took 142 MiB (its rows padded to a multiple of 128), a 1x1 one 2 MiB. What the
 * array takes beyond its charge is charged by the monitor's reconciliation once NVML shows
 * it (ci_footprint.c).
 */
#include "ci_internal.h"
#include "ci_memory_accounting.h"

typedef CUresult (*ci_array_create_fn)(CUarray *, const CUDA_ARRAY_DESCRIPTOR *);
typedef CUresult (*ci_array3d_create_fn)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
typedef CUresult (*ci_mipmap_create_fn)(CUmipmappedArray *, const CUDA_ARRAY3D_DESCRIPTOR *,
                                        unsigned int);
typedef CUresult (*ci_array_destroy_fn)(CUarray);
typedef CUresult (*ci_mipmap_destroy_fn)(CUmipmappedArray);

/* Bytes of a w x h x d array of `format` with `channels` (h, d >= 1). false on overflow. */
static bool ci_array_level_bytes(uint64_t w, uint64_t h, uint64_t d, int format,
                                 unsigned int channels, uint64_t *out)
{
    uint64_t texels, bytes;
    if (format >= CU_AD_FORMAT_BC1_UNORM && format <= CU_AD_FORMAT_BC7_UNORM_SRGB) {
        /* BC1 and BC4 (0x91, 0x92, 0x97, 0x98): 8 bytes per 4x4 block; the others 16. */
        uint64_t block = (format <= 0x92 || format == 0x97 || format == 0x98) ? 8 : 16;
        if (__builtin_mul_overflow((w + 3) / 4, (h + 3) / 4, &texels) ||
            __builtin_mul_overflow(texels, d, &texels) || __builtin_mul_overflow(texels, block, out))
            return false;
        return true;
    }
    if (__builtin_mul_overflow(w, h, &texels) || __builtin_mul_overflow(texels, d, &texels))
        return false;
    if (format == CU_AD_FORMAT_NV12) { /* a full-size luma plane and a half-size chroma one */
        if (__builtin_mul_overflow(texels, 3, &bytes))
            return false;
        *out = bytes / 2;
        return true;
    }
    uint64_t elem;
    switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
        elem = 1ull * channels;
        break;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
        elem = 2ull * channels;
        break;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
        elem = 4ull * channels;
        break;
    default:
        if (format >= CU_AD_FORMAT_UNORM_INT8X1 && format <= CU_AD_FORMAT_SNORM_INT16X4) {
            /* 0xc0 + 6 * signedness + 3 * (16-bit) + (x1, x2, x4) */
            int k = (format - CU_AD_FORMAT_UNORM_INT8X1) % 6;
            elem = (uint64_t)(k < 3 ? 1 : 2) << (k % 3);
        } else {
            elem = 4ull * (channels ? channels : 1);
        }
    }
    return !__builtin_mul_overflow(texels, elem, out);
}

/* Bytes of a 3D descriptor's array with `levels` mipmap levels (1: a plain array). */
static bool ci_array_bytes(const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels, uint64_t *out)
{
    bool layered = (desc->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) != 0;
    uint64_t w = desc->Width, h = desc->Height, d = desc->Depth, total = 0;
    if (levels == 0)
        levels = 1;
    for (unsigned int l = 0; l < levels && l < 64; l++) {
        uint64_t lw = w >> l ? w >> l : 1;
        uint64_t lh = h == 0 ? 1 : (h >> l ? h >> l : 1);
        uint64_t ld = d == 0 ? 1 : (layered ? d : (d >> l ? d >> l : 1));
        uint64_t bytes;
        if (!ci_array_level_bytes(lw, lh, ld, desc->Format, desc->NumChannels, &bytes) ||
            __builtin_add_overflow(total, bytes, &total))
            return false;
    }
    *out = total;
    return true;
}

/* Reserve, create through `call`, record the handle (or give the reservation back). */
#define CI_ARRAY_CREATE(call, handle, desc3, levels, kind)                      \
    do {                                                                        \
        ci_runtime_ensure();                                                    \
        uint64_t bytes_;                                                        \
        if ((handle) == NULL || !ci_array_bytes((desc3), (levels), &bytes_))   \
            return CUDA_ERROR_INVALID_VALUE;                                    \
        int dev_ = ci_runtime_current_device();                                 \
        if (ci_memory_reserve(dev_, bytes_) != 0)                               \
            return CUDA_ERROR_OUT_OF_MEMORY;                                    \
        CUresult r_ = (call);                                                   \
        if (r_ != CUDA_SUCCESS) {                                               \
            ci_memory_release(dev_, bytes_);                                    \
            return r_;                                                          \
        }                                                                       \
        ci_memory_track((uint64_t)(uintptr_t)*(handle), (kind), bytes_, dev_);  \
        return r_;                                                              \
    } while (0)

CUresult ci_on_array_create(void *real, CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    if (desc == NULL)
        return ((ci_array_create_fn)real)(arr, desc);
    CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = desc->Width, .Height = desc->Height, .Depth = 0,
                                  .Format = desc->Format, .NumChannels = desc->NumChannels};
    CI_ARRAY_CREATE(((ci_array_create_fn)real)(arr, desc), arr, &d3, 1, CI_ALLOC_ARRAY);
}

CUresult ci_on_array3d_create(void *real, CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    if (desc == NULL)
        return ((ci_array3d_create_fn)real)(arr, desc);
    CI_ARRAY_CREATE(((ci_array3d_create_fn)real)(arr, desc), arr, desc, 1, CI_ALLOC_ARRAY);
}

CUresult ci_on_mipmapped_array_create(void *real, CUmipmappedArray *arr,
                                      const CUDA_ARRAY3D_DESCRIPTOR *desc, unsigned int levels)
{
    if (desc == NULL)
        return ((ci_mipmap_create_fn)real)(arr, desc, levels);
    CI_ARRAY_CREATE(((ci_mipmap_create_fn)real)(arr, desc, levels), arr, desc, levels,
                    CI_ALLOC_MIPMAPPED_ARRAY);
}

CUresult ci_on_array_destroy(void *real, CUarray arr)
{
    struct ci_memory_free f;
    ci_memory_free_begin(&f, (uint64_t)(uintptr_t)arr, CI_ALLOC_ARRAY);
    return ci_memory_free_end(&f, ((ci_array_destroy_fn)real)(arr));
}

CUresult ci_on_mipmapped_array_destroy(void *real, CUmipmappedArray arr)
{
    struct ci_memory_free f;
    ci_memory_free_begin(&f, (uint64_t)(uintptr_t)arr, CI_ALLOC_MIPMAPPED_ARRAY);
    return ci_memory_free_end(&f, ((ci_mipmap_destroy_fn)real)(arr));
}
