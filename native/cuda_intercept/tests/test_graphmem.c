/*
 * test_graphmem — graph memory counts against the limit. The fake driver's graphs map
 * their memory nodes from a per-device pool at launch, keep it after cuGraphExecDestroy and
 * give it back at cuDeviceGraphMemTrim, as the H200 does.
 *
 *   test_graphmem nodes    cuGraphAddMemAllocNode (a child graph's too): every
 *                          cuGraphInstantiate* variant charges the graph's memory nodes
 *                          before the driver instantiates; one that would pass the limit
 *                          is refused with CUDA_ERROR_OUT_OF_MEMORY and not instantiated;
 *                          destroying the executable graph keeps what the pool holds, the
 *                          trim gives it back
 *   test_graphmem capture  cuMemAllocAsync / cuMemAllocFromPoolAsync (and _ptsz) on a
 *                          capturing stream are not charged when captured but when the
 *                          captured graph is instantiated; off capture they are charged as
 *                          before
 */
#include "ci_test.h"

#define MiB (1ull << 20)
#define LIMIT (16 * MiB)

CUresult cuGraphCreate(CUgraph *g, unsigned int flags);
CUresult cuGraphDestroy(CUgraph g);
CUresult cuGraphAddMemAllocNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                CUDA_MEM_ALLOC_NODE_PARAMS *p);
CUresult cuGraphAddChildGraphNode(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                                  CUgraph child);
CUresult cuStreamBeginCapture_v2(CUstream s, int mode);
CUresult cuStreamEndCapture(CUstream s, CUgraph *g);
CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, int attr, void *value);

static struct ci_region_slot *slot;

static unsigned long long used(void)
{
    return slot->dev[0].memory_used_bytes;
}

static void add_node(CUgraph g, unsigned long long bytes)
{
    CUDA_MEM_ALLOC_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    p.poolProps.allocType = 1;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = 0;
    p.bytesize = bytes;
    CUgraphNode n;
    CHECK_CU(cuGraphAddMemAllocNode(&n, g, NULL, 0, &p));
}

/* A graph with 3 + 2 MiB of memory nodes and a child graph with 1 MiB: 6 MiB. */
static CUgraph six_mib_graph(void)
{
    CUgraph g, child;
    CUgraphNode n;
    CHECK_CU(cuGraphCreate(&g, 0));
    CHECK_CU(cuGraphCreate(&child, 0));
    add_node(g, 3 * MiB);
    add_node(g, 2 * MiB);
    add_node(child, 1 * MiB);
    CHECK_CU(cuGraphAddChildGraphNode(&n, g, NULL, 0, child));
    return g;
}

static unsigned long long pool(void)
{
    cuuint64_t v = 0;
    CHECK_CU(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v));
    return v;
}

static void variants(CUgraph g)
{
    CUgraphExec e;
    CUDA_GRAPH_INSTANTIATE_PARAMS params;
    memset(&params, 0, sizeof params);
    const char *names[] = {"cuGraphInstantiate", "cuGraphInstantiate_v2", "cuGraphInstantiateWithFlags",
                           "cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams_ptsz"};
    for (int v = 0; v < 5; v++) {
        CUresult r = v == 0   ? cuGraphInstantiate(&e, g, NULL, NULL, 0)
                     : v == 1 ? cuGraphInstantiate_v2(&e, g, NULL, NULL, 0)
                     : v == 2 ? cuGraphInstantiateWithFlags(&e, g, 0)
                     : v == 3 ? cuGraphInstantiateWithParams(&e, g, &params)
                              : cuGraphInstantiateWithParams_ptsz(&e, g, &params);
        CHECK(r == CUDA_SUCCESS, "%s failed", names[v]);
        CHECK(used() == 6 * MiB, "%s charged %llu, want 6 MiB", names[v], used());
        CHECK_CU(cuGraphExecDestroy(e));
        CHECK(used() == 0, "%s: never launched, destroy gives all back: %llu", names[v], used());
    }
}

static void nodes(void)
{
    CUgraph g = six_mib_graph();
    unsigned long long fake0 = fakecuda_used_bytes();
    variants(g);
    CUgraphExec e;
    CHECK_CU(cuGraphInstantiateWithFlags(&e, g, 0));
    CHECK(used() == 6 * MiB && fakecuda_used_bytes() == fake0, "charged before the driver maps anything");
    size_t fr, total;
    CHECK_CU(cuMemGetInfo_v2(&fr, &total));
    CHECK(fr == LIMIT - 6 * MiB, "cuMemGetInfo free %zu", fr);
    CHECK_CU(cuGraphLaunch(e, NULL));
    CHECK(pool() == 6 * MiB && fakecuda_used_bytes() == fake0 + 6 * MiB, "the fake pool did not map");
    CHECK(used() == 6 * MiB, "a launch changes no charge: %llu", used());

    /* a second graph that would pass the limit: refused, never instantiated */
    CUdeviceptr hold;
    CHECK_CU(cuMemAlloc_v2(&hold, 7 * MiB));
    CUgraph g2 = six_mib_graph();
    unsigned long calls = fakecuda_calls("cuGraphInstantiateWithFlags");
    CUgraphExec e2 = NULL;
    CHECK(cuGraphInstantiateWithFlags(&e2, g2, 0) == CUDA_ERROR_OUT_OF_MEMORY, "6 MiB more fits in 3");
    CHECK(fakecuda_calls("cuGraphInstantiateWithFlags") == calls, "a refused graph was instantiated");
    CHECK(used() == 13 * MiB, "refusal changed the accounting: %llu", used());
    CHECK_CU(cuMemFree_v2(hold));

    /* destroyed: the pool keeps the 6 MiB, and so does the charge; the trim gives it back */
    CHECK_CU(cuGraphExecDestroy(e));
    CHECK(used() == 6 * MiB, "the pool still holds 6 MiB, charged %llu", used());
    CHECK_CU(cuGraphInstantiateWithFlags(&e2, g2, 0));
    CHECK(used() == 6 * MiB, "a graph served from the cached pool charged again: %llu", used());
    CHECK_CU(cuGraphExecDestroy(e2));
    CHECK_CU(cuDeviceGraphMemTrim(0));
    CHECK(pool() == 0 && fakecuda_used_bytes() == fake0, "the fake trim kept memory");
    CHECK(used() == 0, "trimmed: charged %llu", used());
    CHECK_CU(cuGraphDestroy(g));
    CHECK_CU(cuGraphDestroy(g2));
    printf("ok graph memory nodes: charged at instantiation, kept while the pool holds them\n");
}

static void capture(void)
{
    CUstream s = (CUstream)0x1000;
    unsigned long long fake0 = fakecuda_used_bytes();
    CUdeviceptr a, b, c, d;
    CHECK_CU(cuStreamBeginCapture_v2(s, 0));
    CHECK_CU(cuMemAllocAsync(&a, 5 * MiB, s));
    CHECK_CU(cuMemAllocFromPoolAsync(&b, 2 * MiB, NULL, s));
    CHECK(used() == 0 && fakecuda_used_bytes() == fake0, "captured allocations charged at capture: %llu", used());
    CUgraph g;
    CHECK_CU(cuStreamEndCapture(s, &g));
    CHECK_CU(cuStreamBeginCapture_v2(CU_STREAM_PER_THREAD, 0));
    CHECK_CU(cuMemAllocAsync_ptsz(&c, 1 * MiB, NULL)); /* the thread's stream is capturing */
    CUgraph g_pt;
    CHECK_CU(cuStreamEndCapture(CU_STREAM_PER_THREAD, &g_pt));
    CHECK(used() == 0, "a _ptsz allocation into a capture was charged: %llu", used());
    CHECK_CU(cuMemAllocAsync(&d, 2 * MiB, (CUstream)0x2000)); /* not capturing: charged */
    CHECK(used() == 2 * MiB, "an allocation off capture: %llu", used());

    CUgraphExec e, e_pt;
    CHECK_CU(cuGraphInstantiateWithFlags(&e, g, 0));
    CHECK(used() == 9 * MiB, "captured graph charged at instantiation: %llu", used());
    CHECK_CU(cuGraphInstantiateWithFlags(&e_pt, g_pt, 0));
    CHECK(used() == 10 * MiB, "captured _ptsz graph: %llu", used());

    /* a captured graph that does not fit */
    CHECK_CU(cuStreamBeginCapture_v2(s, 0));
    CHECK_CU(cuMemAllocAsync(&a, 7 * MiB, s));
    CUgraph big;
    CHECK_CU(cuStreamEndCapture(s, &big));
    CUgraphExec eb = NULL;
    CHECK(cuGraphInstantiateWithFlags(&eb, big, 0) == CUDA_ERROR_OUT_OF_MEMORY, "7 MiB more fits in 6");
    CHECK(used() == 10 * MiB, "refusal changed the accounting: %llu", used());

    CHECK_CU(cuGraphExecDestroy(e)); /* never launched: the pool holds nothing */
    CHECK_CU(cuGraphExecDestroy(e_pt));
    CHECK_CU(cuMemFreeAsync(d, (CUstream)0x2000));
    CHECK(used() == 0, "all given back: %llu", used());
    printf("ok allocations captured into a graph: charged when the graph is instantiated\n");
}

int main(int argc, char **argv)
{
    char limit[32];
    snprintf(limit, sizeof limit, "%llu", LIMIT);
    ct_set_env("ALNAIR_VGPU_MEMORY_BYTES", limit);
    CHECK_CU(cuInit(0));
    slot = ct_slot_of(ct_region(), getpid());
    CHECK(slot != NULL, "no slot");
    const char *mode = argc > 1 ? argv[1] : "nodes";
    if (strcmp(mode, "nodes") == 0)
        nodes();
    else if (strcmp(mode, "capture") == 0)
        capture();
    else
        CHECK(0, "unknown mode %s", mode);
    CHECK(CT_WAIT_FIELD(slot, 0, alloc_denied, 1) >= 1, "the refusal was not published");
    return 0;
}
