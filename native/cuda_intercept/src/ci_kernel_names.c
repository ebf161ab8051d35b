/*
 * ci_kernel_names.c — what the names of the launched kernels say about the workload.
 *
 * On the H200 detection corpus (docs/benchmarks.md, "What tells them apart: kernel
 * names") every PyTorch training family launched kernels whose names contain `backward`
 * (autograd) or `multi_tensor_apply` (the fused optimizer step), and no inference family
 * launched either; NVML and the launch signature both call steady batched inference
 * training. So each launched function is classified once, by its name, and per device we
 * count the launches of training-named kernels and note two facts: names could be read at
 * all, and a PyTorch kernel (`at6native`, i.e. at::native, mangled or not) was seen.
 *
 * Names come from the real driver's cuFuncGetName (CUDA >= 12.4), or cuKernelGetName for
 * a CUkernel handle passed to cuLaunchKernel (the CUDA 12 runtime's library loading);
 * without either, or when both refuse a handle, that handle counts for nothing.
 *
 * Cost on the launch path: a direct-mapped cache of CI_KN_CACHE words, each the handle
 * with its class in the low 3 bits (handles are at least 8-byte aligned; 0 = empty): a
 * hit is one relaxed load and a compare (plus one add for a training kernel); a miss asks
 * the driver for the name and scans it once. Two handles on one word evict each other and
 * are classified again: a cost, never a wrong answer. Lock-free, no allocation.
 */
#include <string.h>

#include "ci_internal.h"
#include "ci_compute_metering.h"

#define CI_KN_CACHE 4096u
#define CI_KN_CLASS_MASK 7u
#define CI_KN_UNREADABLE 1u /* the driver gave no name for it */
#define CI_KN_OTHER 2u
#define CI_KN_TORCH 3u      /* PyTorch's own (at::native) kernel, not a training one */
#define CI_KN_TRAINING 4u   /* backward or multi_tensor_apply in its name */

static _Atomic uintptr_t ci_kn_cache[CI_KN_CACHE];

struct ci_kn_dev {
    _Atomic uint64_t training_launches;
    _Atomic uint64_t flags; /* CI_KERNEL_NAMES_READ | CI_KERNEL_NAMES_TORCH_SEEN */
} __attribute__((aligned(64)));

static struct ci_kn_dev ci_kn_devs[CI_MAX_DEVICES];

/* Spreads the handle's bits (allocations are aligned and close together). */
static unsigned ci_kn_index(uintptr_t fn)
{
    uint64_t x = (uint64_t)fn >> 3;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    return (unsigned)(x & (CI_KN_CACHE - 1));
}

/* The class of a kernel called `name`: mangled names keep identifiers verbatim
 * (_ZN2at6native...29nll_loss_backward_reduce_cuda...). */
static unsigned ci_kn_classify_name(const char *name)
{
    if (strstr(name, "backward") != NULL || strstr(name, "multi_tensor_apply") != NULL)
        return CI_KN_TRAINING;
    if (strstr(name, "at6native") != NULL || strstr(name, "at::native") != NULL)
        return CI_KN_TORCH;
    return CI_KN_OTHER;
}

/* Asks the driver for the name of `fn`; CI_KN_UNREADABLE when it has none to give. */
static unsigned ci_kn_classify(const void *fn)
{
    const char *name = NULL;
    if (ci_driver.cuFuncGetName != NULL &&
        ci_driver.cuFuncGetName(&name, (CUfunction)(uintptr_t)fn) != CUDA_SUCCESS)
        name = NULL;
    if (name == NULL && ci_driver.cuKernelGetName != NULL &&
        ci_driver.cuKernelGetName(&name, (CUkernel)(uintptr_t)fn) != CUDA_SUCCESS)
        name = NULL;
    return name != NULL ? ci_kn_classify_name(name) : CI_KN_UNREADABLE;
}

/* Counts one launch of class `cls` on `dev`; the flags are written only when they change. */
static void ci_kn_count(int dev, unsigned cls)
{
    struct ci_kn_dev *d = &ci_kn_devs[dev];
    if (cls == CI_KN_UNREADABLE)
        return;
    if (cls == CI_KN_TRAINING)
        atomic_fetch_add_explicit(&d->training_launches, 1, memory_order_relaxed);
    uint64_t want = CI_KERNEL_NAMES_READ | (cls >= CI_KN_TORCH ? CI_KERNEL_NAMES_TORCH_SEEN : 0);
    if ((atomic_load_explicit(&d->flags, memory_order_relaxed) & want) != want)
        atomic_fetch_or_explicit(&d->flags, want, memory_order_relaxed);
}

void ci_kernel_names_note(int dev, const void *fn)
{
    uintptr_t key = (uintptr_t)fn;
    if (dev < 0 || dev >= CI_MAX_DEVICES || key == 0)
        return;
    if (CI_UNLIKELY(key & CI_KN_CLASS_MASK)) { /* not a pointer we can tag: ask every time */
        ci_kn_count(dev, ci_kn_classify(fn));
        return;
    }
    _Atomic uintptr_t *slot = &ci_kn_cache[ci_kn_index(key)];
    uintptr_t word = atomic_load_explicit(slot, memory_order_relaxed);
    unsigned cls;
    if (CI_LIKELY((word & ~(uintptr_t)CI_KN_CLASS_MASK) == key)) {
        cls = (unsigned)(word & CI_KN_CLASS_MASK);
    } else {
        cls = ci_kn_classify(fn);
        atomic_store_explicit(slot, key | cls, memory_order_relaxed);
    }
    ci_kn_count(dev, cls);
}

uint64_t ci_kernel_names_word(int dev)
{
    if (dev < 0 || dev >= CI_MAX_DEVICES)
        return 0;
    const struct ci_kn_dev *d = &ci_kn_devs[dev];
    uint64_t count = atomic_load_explicit(&d->training_launches, memory_order_relaxed);
    uint64_t flags = atomic_load_explicit(&d->flags, memory_order_relaxed);
    return (flags & (CI_KERNEL_NAMES_READ | CI_KERNEL_NAMES_TORCH_SEEN)) | (count & CI_KERNEL_NAMES_TRAINING_MASK);
}

void ci_kernel_names_after_fork_child(void)
{
    for (unsigned i = 0; i < CI_KN_CACHE; i++)
        atomic_store_explicit(&ci_kn_cache[i], 0, memory_order_relaxed);
    for (int d = 0; d < CI_MAX_DEVICES; d++) {
        atomic_store_explicit(&ci_kn_devs[d].training_launches, 0, memory_order_relaxed);
        atomic_store_explicit(&ci_kn_devs[d].flags, 0, memory_order_relaxed);
    }
}
