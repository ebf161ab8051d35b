/*
 * fake_objects.c — the fake driver's contexts, CUDA arrays and inter-process handles.
 *
 * Contexts take FAKECUDA_CTX_BYTES of fake device memory each (the primary context of a
 * device from its first retain until the release that drops its count to 0), so that the
 * free memory cuMemGetInfo and fake NVML report drops across a creation, as on a GPU;
 * fakecuda_contexts() says whether the process has one (fake NVML lists it only then).
 * Arrays take what their descriptor implies (integer/half/float formats; others 4 bytes a
 * channel) plus FAKECUDA_ARRAY_PAD_BYTES (the driver's tiling padding). An IPC handle or an
 * exported VMM handle, opened or imported (in this process or another), takes nothing: the
 * memory is its creator's.
 * Functions (cuModuleGetFunction) are named handles: one per distinct name, whatever the
 * module; cuFuncGetName answers their name, CUDA_ERROR_INVALID_HANDLE for any other
 * pointer (the tests' made-up handles), CUDA_ERROR_NOT_SUPPORTED for all with
 * FAKECUDA_NO_FUNC_NAME=1 (a driver that cannot say).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fake_internal.h"

struct CUctx_st {
    int dev;
    int primary;
};

static pthread_mutex_t obj_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st primaries[16];
static int primary_refs[16];
static int created_contexts;
static __thread CUcontext current_ctx;

FAKE_EXPORT int fakecuda_contexts(void)
{
    pthread_mutex_lock(&obj_lock);
    int n = created_contexts;
    for (int d = 0; d < 16; d++)
        n += primary_refs[d] > 0;
    pthread_mutex_unlock(&obj_lock);
    return n;
}

static uint64_t ctx_bytes(void)
{
    return env_u64("FAKECUDA_CTX_BYTES", 0);
}

F(cuDevicePrimaryCtxRetain, (CUcontext *pctx, CUdevice dev))
{
    count_call("cuDevicePrimaryCtxRetain");
    if (pctx == NULL || dev < 0 || dev >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&obj_lock);
    CUresult r = primary_refs[dev] == 0 ? fake_mem_take(ctx_bytes()) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) {
        primary_refs[dev]++;
        primaries[dev].dev = dev;
        primaries[dev].primary = 1;
        *pctx = &primaries[dev];
    }
    pthread_mutex_unlock(&obj_lock);
    return r;
}

static CUresult primary_release(CUdevice dev)
{
    if (dev < 0 || dev >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&obj_lock);
    CUresult r = primary_refs[dev] > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (r == CUDA_SUCCESS && --primary_refs[dev] == 0) {
        fake_mem_give(ctx_bytes());
        if (current_ctx == &primaries[dev])
            current_ctx = NULL;
    }
    pthread_mutex_unlock(&obj_lock);
    return r;
}
F(cuDevicePrimaryCtxRelease, (CUdevice dev)) { count_call("cuDevicePrimaryCtxRelease"); return primary_release(dev); }
F(cuDevicePrimaryCtxRelease_v2, (CUdevice dev)) { count_call("cuDevicePrimaryCtxRelease_v2"); return primary_release(dev); }

static CUresult ctx_create(CUcontext *pctx, CUdevice dev)
{
    if (pctx == NULL || dev < 0 || dev >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUctx_st *c = calloc(1, sizeof *c);
    if (c == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = fake_mem_take(ctx_bytes());
    if (r != CUDA_SUCCESS) {
        free(c);
        return r;
    }
    c->dev = dev;
    pthread_mutex_lock(&obj_lock);
    created_contexts++;
    pthread_mutex_unlock(&obj_lock);
    current_ctx = c;
    *pctx = c;
    return CUDA_SUCCESS;
}
F(cuCtxCreate_v2, (CUcontext *pctx, unsigned int flags, CUdevice dev)) { (void)flags; count_call("cuCtxCreate_v2"); return ctx_create(pctx, dev); }
F(cuCtxCreate_v3, (CUcontext *pctx, CUexecAffinityParam *p, int n, unsigned int flags, CUdevice dev)) { (void)p; (void)n; (void)flags; count_call("cuCtxCreate_v3"); return ctx_create(pctx, dev); }
F(cuCtxCreate_v4, (CUcontext *pctx, CUctxCreateParams *p, unsigned int flags, CUdevice dev)) { (void)p; (void)flags; count_call("cuCtxCreate_v4"); return ctx_create(pctx, dev); }
F(cuCtxDestroy_v2, (CUcontext ctx))
{
    count_call("cuCtxDestroy_v2");
    if (ctx == NULL || ctx->primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    fake_mem_give(ctx_bytes());
    pthread_mutex_lock(&obj_lock);
    created_contexts--;
    pthread_mutex_unlock(&obj_lock);
    if (current_ctx == ctx)
        current_ctx = NULL;
    free(ctx);
    return CUDA_SUCCESS;
}
F(cuCtxSetCurrent, (CUcontext ctx)) { current_ctx = ctx; return CUDA_SUCCESS; }
F(cuCtxGetCurrent, (CUcontext *ctx)) { *ctx = current_ctx; return CUDA_SUCCESS; }

/* ---- arrays ----------------------------------------------------------------- */

struct CUarray_st {
    uint64_t bytes;
};
struct CUmipmappedArray_st {
    uint64_t bytes;
};

static uint64_t fake_array_bytes(size_t w, size_t h, size_t d, int format, unsigned ch, unsigned levels)
{
    uint64_t elem = format == CU_AD_FORMAT_UNSIGNED_INT8 || format == CU_AD_FORMAT_SIGNED_INT8 ? 1
                    : format == CU_AD_FORMAT_UNSIGNED_INT16 || format == CU_AD_FORMAT_SIGNED_INT16 ||
                              format == CU_AD_FORMAT_HALF
                        ? 2
                        : 4;
    uint64_t total = 0;
    for (unsigned l = 0; l < (levels ? levels : 1); l++) {
        uint64_t lw = w >> l ? w >> l : 1, lh = h ? (h >> l ? h >> l : 1) : 1, ld = d ? (d >> l ? d >> l : 1) : 1;
        total += lw * lh * ld * elem * ch;
    }
    return total + env_u64("FAKECUDA_ARRAY_PAD_BYTES", 0);
}

static CUresult array_new(CUarray *arr, uint64_t bytes)
{
    struct CUarray_st *a = calloc(1, sizeof *a);
    if (a == NULL || fake_mem_take(bytes) != CUDA_SUCCESS) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->bytes = bytes;
    *arr = a;
    return CUDA_SUCCESS;
}

F(cuArrayCreate_v2, (CUarray *arr, const CUDA_ARRAY_DESCRIPTOR *d))
{
    count_call("cuArrayCreate_v2");
    if (arr == NULL || d == NULL || d->Width == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return array_new(arr, fake_array_bytes(d->Width, d->Height, 0, d->Format, d->NumChannels, 1));
}
F(cuArray3DCreate_v2, (CUarray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d))
{
    count_call("cuArray3DCreate_v2");
    if (arr == NULL || d == NULL || d->Width == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return array_new(arr, fake_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, 1));
}
F(cuArrayDestroy, (CUarray arr))
{
    count_call("cuArrayDestroy");
    if (arr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    fake_mem_give(arr->bytes);
    free(arr);
    return CUDA_SUCCESS;
}
F(cuMipmappedArrayCreate, (CUmipmappedArray *arr, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels))
{
    count_call("cuMipmappedArrayCreate");
    if (arr == NULL || d == NULL || d->Width == 0 || levels == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bytes = fake_array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels, levels);
    struct CUmipmappedArray_st *m = calloc(1, sizeof *m);
    if (m == NULL || fake_mem_take(bytes) != CUDA_SUCCESS) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    m->bytes = bytes;
    *arr = m;
    return CUDA_SUCCESS;
}
F(cuMipmappedArrayDestroy, (CUmipmappedArray arr))
{
    count_call("cuMipmappedArrayDestroy");
    if (arr == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    fake_mem_give(arr->bytes);
    free(arr);
    return CUDA_SUCCESS;
}

/* ---- inter-process handles ---------------------------------------------------- */

#define IMPORTED_MAX 64
#define IMPORTED_KEY 0xE0000000000ull
static uint64_t imported[IMPORTED_MAX];
static uint64_t imported_next = 1;

F(cuIpcGetMemHandle, (CUipcMemHandle *h, CUdeviceptr p))
{
    count_call("cuIpcGetMemHandle");
    memset(h, 0, sizeof *h);
    memcpy(h->reserved, &p, sizeof p);
    return CUDA_SUCCESS;
}
F(cuIpcOpenMemHandle_v2, (CUdeviceptr *p, CUipcMemHandle h, unsigned int flags))
{
    (void)h;
    (void)flags;
    count_call("cuIpcOpenMemHandle_v2");
    *p = fake_next_address(1);
    return CUDA_SUCCESS;
}
F(cuIpcCloseMemHandle, (CUdeviceptr p)) { (void)p; count_call("cuIpcCloseMemHandle"); return CUDA_SUCCESS; }
F(cuMemExportToShareableHandle, (void *shareable, CUmemGenericAllocationHandle h, int type, unsigned long long flags))
{
    (void)type;
    (void)flags;
    count_call("cuMemExportToShareableHandle");
    *(int *)shareable = (int)(h & 0x7fffffff);
    return CUDA_SUCCESS;
}
F(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *h, void *os_handle, int type))
{
    (void)os_handle;
    (void)type;
    count_call("cuMemImportFromShareableHandle");
    pthread_mutex_lock(&obj_lock);
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < IMPORTED_MAX; i++) {
        if (imported[i] == 0) {
            imported[i] = IMPORTED_KEY | (imported_next++ << 4);
            *h = imported[i];
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&obj_lock);
    return r;
}

int fake_import_release(CUmemGenericAllocationHandle h)
{
    int found = 0;
    pthread_mutex_lock(&obj_lock);
    for (int i = 0; i < IMPORTED_MAX && !found; i++)
        if (imported[i] == h && h != 0) {
            imported[i] = 0;
            found = 1;
        }
    pthread_mutex_unlock(&obj_lock);
    return found;
}

/* ---- functions ------------------------------------------------------------ */

#define FUNCTIONS_MAX 64
struct CUfunc_st {
    char name[256];
};
static struct CUfunc_st functions[FUNCTIONS_MAX];
static int functions_used;

F(cuModuleGetFunction, (CUfunction *f, CUmodule mod, const char *name))
{
    (void)mod;
    count_call("cuModuleGetFunction");
    if (f == NULL || name == NULL || strlen(name) >= sizeof functions[0].name)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&obj_lock);
    CUresult r = CUDA_ERROR_NOT_FOUND;
    for (int i = 0; i < FUNCTIONS_MAX; i++) {
        if (i == functions_used) {
            strcpy(functions[i].name, name);
            functions_used++;
        }
        if (strcmp(functions[i].name, name) == 0) {
            *f = &functions[i];
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&obj_lock);
    return r;
}

F(cuFuncGetName, (const char **name, CUfunction f))
{
    count_call("cuFuncGetName");
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (env_u64("FAKECUDA_NO_FUNC_NAME", 0))
        return CUDA_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&obj_lock);
    CUresult r = CUDA_ERROR_INVALID_HANDLE;
    for (int i = 0; i < functions_used; i++)
        if (f == &functions[i]) {
            *name = functions[i].name;
            r = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&obj_lock);
    return r;
}

const struct fake_entry fake_object_entries[] = {
    FAKE_ENTRY(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, 0),
    FAKE_ENTRY(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 7000, 0),
    FAKE_ENTRY(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000, 0),
    FAKE_ENTRY(cuCtxCreate_v2, cuCtxCreate, 3020, 0),
    FAKE_ENTRY(cuCtxCreate_v3, cuCtxCreate, 11040, 0),
    FAKE_ENTRY(cuCtxCreate_v4, cuCtxCreate, 12050, 0),
    FAKE_ENTRY(cuCtxDestroy_v2, cuCtxDestroy, 4000, 0),
    FAKE_ENTRY(cuCtxSetCurrent, cuCtxSetCurrent, 4000, 0),
    FAKE_ENTRY(cuCtxGetCurrent, cuCtxGetCurrent, 4000, 0),
    FAKE_ENTRY(cuArrayCreate_v2, cuArrayCreate, 3020, 0),
    FAKE_ENTRY(cuArray3DCreate_v2, cuArray3DCreate, 3020, 0),
    FAKE_ENTRY(cuArrayDestroy, cuArrayDestroy, 2000, 0),
    FAKE_ENTRY(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000, 0),
    FAKE_ENTRY(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000, 0),
    FAKE_ENTRY(cuIpcGetMemHandle, cuIpcGetMemHandle, 4010, 0),
    FAKE_ENTRY(cuIpcOpenMemHandle_v2, cuIpcOpenMemHandle, 11000, 0),
    FAKE_ENTRY(cuIpcCloseMemHandle, cuIpcCloseMemHandle, 4010, 0),
    FAKE_ENTRY(cuMemExportToShareableHandle, cuMemExportToShareableHandle, 10020, 0),
    FAKE_ENTRY(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020, 0),
    FAKE_ENTRY(cuModuleGetFunction, cuModuleGetFunction, 2000, 0),
    FAKE_ENTRY(cuFuncGetName, cuFuncGetName, 12040, 0),
    FAKE_ENTRIES_END,
};
