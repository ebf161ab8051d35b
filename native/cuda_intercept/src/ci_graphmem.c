/*
 * ci_graphmem.c — memory that CUDA graphs allocate: graph memory nodes, whether added with
 * cuGraphAddMemAllocNode or captured from a stream (a cuMemAllocAsync on a capturing
 * stream becomes such a node; ci_memory.c leaves it to this file).
 *
 * What the driver does (seen on the H200, driver 580, a 64 MiB node): adding the node
 * reserves address space only, instantiation maps nothing, the first launch (or upload)
 * maps the node's memory from the device's graph pool (0 -> 64 MiB reserved, the
 * process's nvidia-smi figure +64 MiB), the pool keeps it after the graph's free node ran
 * and after cuGraphExecDestroy, and cuDeviceGraphMemTrim gives it back (0). So:
 *
 *   - every cuGraphInstantiate* walks the graph (child graphs too, 8 deep), sums its
 *     memory nodes per device and reserves that BEFORE the real call: the most the
 *     executable graph can map, known before any of it is. Over the limit:
 *     CUDA_ERROR_OUT_OF_MEMORY and nothing is instantiated. The driver may serve several
 *     executable graphs, or a node and a later one, from the same pages: an upper bound;
 *   - a device's graph charge is max(the sum over its live executable graphs, the pool's
 *     reserved memory as the driver reported it (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT)
 *     at the last cuGraphExecDestroy or cuDeviceGraphMemTrim): destroying an executable
 *     graph gives back only what the pool no longer holds, a trim the rest;
 *   - cuGraphAddMemAllocNode itself is not hooked: it takes no memory, and a graph never
 *     instantiated never does.
 *
 * A process-local lock guards the sums; it is held while the ledger is asked (never the
 * driver). Executable graphs are recorded in the allocation table, one entry per device.
 */
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "ci_internal.h"
#include "ci_memory_accounting.h"

#define CI_GRAPHMEM_MAX_DEPTH 8
#define CI_GRAPHMEM_KEY(exec) ((uint64_t)(uintptr_t)(exec))

typedef CUresult (*ci_inst_fn)(CUgraphExec *, CUgraph, CUgraphNode *, char *, size_t);
typedef CUresult (*ci_inst_flags_fn)(CUgraphExec *, CUgraph, unsigned long long);
typedef CUresult (*ci_inst_params_fn)(CUgraphExec *, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS *);
typedef CUresult (*ci_exec_destroy_fn)(CUgraphExec);
typedef CUresult (*ci_trim_fn)(CUdevice);

static pthread_mutex_t ci_graphmem_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t ci_graphmem_live[CI_MAX_DEVICES];    /* sum over live executable graphs */
static uint64_t ci_graphmem_pool[CI_MAX_DEVICES];    /* the pool's reserved memory, last read */
static uint64_t ci_graphmem_charged[CI_MAX_DEVICES]; /* in the ledger */
static _Atomic int ci_graphmem_unreadable_logged;

static uint64_t ci_graphmem_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Adds the memory nodes of `graph` (and of its child graphs) per device into need[].
 * Returns 0, or -1 when the driver cannot list the graph. */
static int ci_graphmem_sum(CUgraph graph, uint64_t *need, int depth)
{
    size_t n = 0;
    if (ci_driver.cuGraphGetNodes == NULL || ci_driver.cuGraphNodeGetType == NULL ||
        ci_driver.cuGraphMemAllocNodeGetParams == NULL ||
        ci_driver.cuGraphGetNodes(graph, NULL, &n) != CUDA_SUCCESS)
        return -1;
    if (n == 0)
        return 0;
    size_t len = n * sizeof(CUgraphNode);
    CUgraphNode *nodes = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (nodes == MAP_FAILED)
        return -1;
    size_t got = n;
    int rc = ci_driver.cuGraphGetNodes(graph, nodes, &got) == CUDA_SUCCESS ? 0 : -1;
    for (size_t i = 0; rc == 0 && i < got && i < n; i++) {
        CUgraphNodeType type;
        if (ci_driver.cuGraphNodeGetType(nodes[i], &type) != CUDA_SUCCESS)
            continue;
        if (type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
            CUDA_MEM_ALLOC_NODE_PARAMS p;
            memset(&p, 0, sizeof p);
            if (ci_driver.cuGraphMemAllocNodeGetParams(nodes[i], &p) == CUDA_SUCCESS &&
                p.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
                p.poolProps.location.id >= 0 && p.poolProps.location.id < CI_MAX_DEVICES)
                need[p.poolProps.location.id] =
                    ci_graphmem_add(need[p.poolProps.location.id], p.bytesize);
        } else if (type == CU_GRAPH_NODE_TYPE_GRAPH && depth < CI_GRAPHMEM_MAX_DEPTH &&
                   ci_driver.cuGraphChildGraphNodeGetGraph != NULL) {
            CUgraph child;
            if (ci_driver.cuGraphChildGraphNodeGetGraph(nodes[i], &child) == CUDA_SUCCESS)
                rc = ci_graphmem_sum(child, need, depth + 1);
        }
    }
    munmap(nodes, len);
    return rc;
}

/* Moves dev's ledger charge to max(live, pool) (lock held). Growth is limit-checked when
 * `checked` (then -1 when refused, nothing changed); growth the pool already has is
 * charged as taken. */
static int ci_graphmem_settle_locked(int dev, bool checked)
{
    uint64_t target = ci_graphmem_live[dev] > ci_graphmem_pool[dev] ? ci_graphmem_live[dev]
                                                                    : ci_graphmem_pool[dev];
    uint64_t charged = ci_graphmem_charged[dev];
    if (target > charged) {
        if (checked && ci_memory_reserve(dev, target - charged) != 0)
            return -1;
        if (!checked)
            ci_memory_charge_taken(dev, target - charged);
    } else if (target < charged) {
        ci_memory_release(dev, charged - target);
    }
    ci_graphmem_charged[dev] = target;
    return 0;
}

/* The graph pool's reserved memory on `dev` as the driver reports it, `fallback` when it
 * cannot. */
static uint64_t ci_graphmem_pool_now(int dev, uint64_t fallback)
{
    cuuint64_t v = 0;
    if (ci_driver.cuDeviceGetGraphMemAttribute == NULL ||
        ci_driver.cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v) !=
            CUDA_SUCCESS)
        return fallback;
    return v;
}

/* Charges the memory nodes of `graph` and instantiates it through `call` (an expression
 * that stores the executable graph in *exec). */
#define CI_GRAPHMEM_INSTANTIATE(call, exec, graph)                              \
    do {                                                                        \
        ci_runtime_ensure();                                                    \
        uint64_t need_[CI_MAX_DEVICES];                                         \
        if (ci_graphmem_reserve((graph), need_) != 0)                           \
            return CUDA_ERROR_OUT_OF_MEMORY;                                    \
        CUresult r_ = (call);                                                   \
        ci_graphmem_instantiated(r_, (exec), need_);                            \
        return r_;                                                              \
    } while (0)

/* Sums the graph's memory nodes into need[] and reserves them; 0, or -1 when the limit
 * refuses (nothing reserved then). */
static int ci_graphmem_reserve(CUgraph graph, uint64_t *need)
{
    memset(need, 0, sizeof(uint64_t) * CI_MAX_DEVICES);
    if (ci_graphmem_sum(graph, need, 0) != 0) {
        memset(need, 0, sizeof(uint64_t) * CI_MAX_DEVICES);
        if (!atomic_exchange(&ci_graphmem_unreadable_logged, 1))
            ci_log("cannot read a graph's memory nodes: graph memory is not counted");
        return 0;
    }
    pthread_mutex_lock(&ci_graphmem_lock);
    int d = 0, rc = 0;
    for (; d < CI_MAX_DEVICES; d++) {
        if (need[d] == 0)
            continue;
        ci_graphmem_live[d] = ci_graphmem_add(ci_graphmem_live[d], need[d]);
        if (ci_graphmem_settle_locked(d, true) != 0) {
            ci_graphmem_live[d] -= need[d];
            rc = -1;
            break;
        }
    }
    if (rc != 0) {
        for (int u = 0; u < d; u++) {
            if (need[u] == 0)
                continue;
            ci_graphmem_live[u] -= need[u];
            ci_graphmem_settle_locked(u, false);
        }
    }
    pthread_mutex_unlock(&ci_graphmem_lock);
    return rc;
}

/* After the real instantiation: records the executable graph, or gives back what it was
 * reserved when there is none. */
static void ci_graphmem_instantiated(CUresult r, CUgraphExec *exec, const uint64_t *need)
{
    bool ok = r == CUDA_SUCCESS && exec != NULL && *exec != NULL;
    pthread_mutex_lock(&ci_graphmem_lock);
    for (int d = 0; d < CI_MAX_DEVICES; d++) {
        if (need[d] == 0)
            continue;
        if (ok && ci_alloc_table_insert(CI_GRAPHMEM_KEY(*exec), CI_ALLOC_GRAPH_EXEC(d), need[d], d) == 0)
            continue;
        if (ok)
            ci_log("allocation table full; a graph's %llu bytes stay charged after it is destroyed",
                   (unsigned long long)need[d]);
        else {
            ci_graphmem_live[d] -= need[d];
            ci_graphmem_settle_locked(d, false);
        }
    }
    pthread_mutex_unlock(&ci_graphmem_lock);
}

CUresult ci_on_graph_instantiate(void *real, CUgraphExec *exec, CUgraph graph,
                                 CUgraphNode *err_node, char *log, size_t log_bytes)
{
    CI_GRAPHMEM_INSTANTIATE(((ci_inst_fn)real)(exec, graph, err_node, log, log_bytes), exec, graph);
}

CUresult ci_on_graph_instantiate_flags(void *real, CUgraphExec *exec, CUgraph graph,
                                       unsigned long long flags)
{
    CI_GRAPHMEM_INSTANTIATE(((ci_inst_flags_fn)real)(exec, graph, flags), exec, graph);
}

CUresult ci_on_graph_instantiate_params(void *real, CUgraphExec *exec, CUgraph graph,
                                        CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
    CI_GRAPHMEM_INSTANTIATE(((ci_inst_params_fn)real)(exec, graph, params), exec, graph);
}

CUresult ci_on_graph_exec_destroy(void *real, CUgraphExec exec)
{
    ci_runtime_ensure();
    uint64_t bytes[CI_MAX_DEVICES];
    bool any = false;
    for (int d = 0; d < CI_MAX_DEVICES; d++) {
        int dev;
        bytes[d] = 0;
        if (ci_alloc_table_remove(CI_GRAPHMEM_KEY(exec), CI_ALLOC_GRAPH_EXEC(d), &bytes[d], &dev) == 0)
            any = true;
    }
    CUresult r = ((ci_exec_destroy_fn)real)(exec);
    if (!any)
        return r;
    if (r != CUDA_SUCCESS) {
        for (int d = 0; d < CI_MAX_DEVICES; d++)
            if (bytes[d] != 0)
                ci_alloc_table_insert(CI_GRAPHMEM_KEY(exec), CI_ALLOC_GRAPH_EXEC(d), bytes[d], d);
        return r;
    }
    uint64_t pool[CI_MAX_DEVICES];
    for (int d = 0; d < CI_MAX_DEVICES; d++)
        pool[d] = bytes[d] == 0 ? 0 : ci_graphmem_pool_now(d, UINT64_MAX);
    pthread_mutex_lock(&ci_graphmem_lock);
    for (int d = 0; d < CI_MAX_DEVICES; d++) {
        if (bytes[d] == 0)
            continue;
        ci_graphmem_live[d] -= bytes[d] < ci_graphmem_live[d] ? bytes[d] : ci_graphmem_live[d];
        /* Unreadable pool: keep charging what this graph could have mapped. */
        ci_graphmem_pool[d] = pool[d] != UINT64_MAX ? pool[d] : ci_graphmem_charged[d];
        ci_graphmem_settle_locked(d, false);
    }
    pthread_mutex_unlock(&ci_graphmem_lock);
    return r;
}

CUresult ci_on_graph_mem_trim(void *real, CUdevice dev)
{
    ci_runtime_ensure();
    CUresult r = ((ci_trim_fn)real)(dev);
    if (r != CUDA_SUCCESS || dev < 0 || dev >= CI_MAX_DEVICES)
        return r;
    uint64_t pool = ci_graphmem_pool_now(dev, 0);
    pthread_mutex_lock(&ci_graphmem_lock);
    ci_graphmem_pool[dev] = pool;
    ci_graphmem_settle_locked(dev, false);
    pthread_mutex_unlock(&ci_graphmem_lock);
    return r;
}

void ci_graphmem_after_fork_child(void)
{
    pthread_mutex_init(&ci_graphmem_lock, NULL);
    memset(ci_graphmem_live, 0, sizeof ci_graphmem_live);
    memset(ci_graphmem_pool, 0, sizeof ci_graphmem_pool);
    memset(ci_graphmem_charged, 0, sizeof ci_graphmem_charged);
}
