/*
 * fake_graph.c — the fake driver's graphs: memory-allocation and child-graph nodes (no
 * other kind is needed), stream capture (a cuMemAllocAsync on a capturing stream adds a
 * memory node), executable graphs, and the per-device graph memory pool as the H200 showed
 * it: a launch maps the executable graph's memory nodes from the pool (the pool grows to
 * the largest launched graph's need, taking fake device memory), the pool keeps it after
 * cuGraphExecDestroy, cuDeviceGraphMemTrim gives it back (CU_GRAPH_MEM_ATTR_*_MEM_CURRENT
 * report the pool).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fake_internal.h"

#define GRAPH_NODES 64
#define GRAPH_EXECS 64
#define CAPTURES 8

struct CUgraphNode_st {
    CUgraphNodeType type;
    CUDA_MEM_ALLOC_NODE_PARAMS alloc;
    CUgraph child;
};

struct CUgraph_st {
    int n;
    struct CUgraphNode_st nodes[GRAPH_NODES];
};

struct CUgraphExec_st {
    uint64_t bytes[16]; /* memory nodes per device */
};

static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUgraphExec_st *execs[GRAPH_EXECS];
static uint64_t pool[16];
static struct {
    CUstream stream;
    CUgraph graph;
} captures[CAPTURES];

F(cuGraphCreate, (CUgraph *g, unsigned int flags))
{
    (void)flags;
    *g = calloc(1, sizeof **g);
    return *g ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
F(cuGraphDestroy, (CUgraph g)) { free(g); return CUDA_SUCCESS; }

static struct CUgraphNode_st *node_add(CUgraph g, CUgraphNodeType type)
{
    if (g == NULL || g->n >= GRAPH_NODES)
        return NULL;
    struct CUgraphNode_st *node = &g->nodes[g->n++];
    memset(node, 0, sizeof *node);
    node->type = type;
    return node;
}

static CUresult alloc_node(CUgraph g, CUgraphNode *out, CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
    struct CUgraphNode_st *node = node_add(g, CU_GRAPH_NODE_TYPE_MEM_ALLOC);
    if (node == NULL || p == NULL || p->bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    p->dptr = fake_next_address(p->bytesize); /* address space only */
    node->alloc = *p;
    if (out != NULL)
        *out = node;
    return CUDA_SUCCESS;
}

F(cuGraphAddMemAllocNode, (CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps,
                           CUDA_MEM_ALLOC_NODE_PARAMS *p))
{
    (void)deps;
    (void)ndeps;
    count_call("cuGraphAddMemAllocNode");
    return alloc_node(g, out, p);
}
F(cuGraphAddChildGraphNode, (CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t ndeps, CUgraph child))
{
    (void)deps;
    (void)ndeps;
    struct CUgraphNode_st *node = node_add(g, CU_GRAPH_NODE_TYPE_GRAPH);
    if (node == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    node->child = child;
    *out = node;
    return CUDA_SUCCESS;
}
F(cuGraphGetNodes, (CUgraph g, CUgraphNode *nodes, size_t *count))
{
    count_call("cuGraphGetNodes");
    if (g == NULL || count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (nodes != NULL)
        for (size_t i = 0; i < *count && i < (size_t)g->n; i++)
            nodes[i] = &g->nodes[i];
    *count = (size_t)g->n;
    return CUDA_SUCCESS;
}
F(cuGraphNodeGetType, (CUgraphNode node, CUgraphNodeType *type)) { *type = node->type; return CUDA_SUCCESS; }
F(cuGraphMemAllocNodeGetParams, (CUgraphNode node, CUDA_MEM_ALLOC_NODE_PARAMS *p))
{
    if (node->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC)
        return CUDA_ERROR_INVALID_VALUE;
    *p = node->alloc;
    return CUDA_SUCCESS;
}
F(cuGraphChildGraphNodeGetGraph, (CUgraphNode node, CUgraph *g))
{
    if (node->type != CU_GRAPH_NODE_TYPE_GRAPH)
        return CUDA_ERROR_INVALID_VALUE;
    *g = node->child;
    return CUDA_SUCCESS;
}

static void graph_need(CUgraph g, uint64_t *bytes)
{
    for (int i = 0; g != NULL && i < g->n; i++) {
        const struct CUgraphNode_st *node = &g->nodes[i];
        if (node->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && node->alloc.poolProps.location.id >= 0 &&
            node->alloc.poolProps.location.id < 16)
            bytes[node->alloc.poolProps.location.id] += node->alloc.bytesize;
        else if (node->type == CU_GRAPH_NODE_TYPE_GRAPH)
            graph_need(node->child, bytes);
    }
}

static CUresult instantiate(CUgraphExec *out, CUgraph g)
{
    if (out == NULL || g == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUgraphExec_st *e = calloc(1, sizeof *e);
    if (e == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    graph_need(g, e->bytes);
    pthread_mutex_lock(&graph_lock);
    int slot = -1;
    for (int i = 0; i < GRAPH_EXECS && slot < 0; i++)
        if (execs[i] == NULL)
            slot = i;
    if (slot >= 0)
        execs[slot] = e;
    pthread_mutex_unlock(&graph_lock);
    if (slot < 0) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *out = e;
    return CUDA_SUCCESS;
}
F(cuGraphInstantiate, (CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log, size_t n)) { (void)err; (void)log; (void)n; count_call("cuGraphInstantiate"); return instantiate(e, g); }
F(cuGraphInstantiate_v2, (CUgraphExec *e, CUgraph g, CUgraphNode *err, char *log, size_t n)) { (void)err; (void)log; (void)n; count_call("cuGraphInstantiate_v2"); return instantiate(e, g); }
F(cuGraphInstantiateWithFlags, (CUgraphExec *e, CUgraph g, unsigned long long flags)) { (void)flags; count_call("cuGraphInstantiateWithFlags"); return instantiate(e, g); }
F(cuGraphInstantiateWithParams, (CUgraphExec *e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)) { (void)p; count_call("cuGraphInstantiateWithParams"); return instantiate(e, g); }
F(cuGraphInstantiateWithParams_ptsz, (CUgraphExec *e, CUgraph g, CUDA_GRAPH_INSTANTIATE_PARAMS *p)) { (void)p; count_call("cuGraphInstantiateWithParams_ptsz"); return instantiate(e, g); }

/* Index of a fake executable graph, -1 for any other handle (tests launch made-up ones). */
static int exec_index(CUgraphExec e)
{
    for (int i = 0; i < GRAPH_EXECS; i++)
        if (e != NULL && execs[i] == e)
            return i;
    return -1;
}

F(cuGraphExecDestroy, (CUgraphExec e))
{
    count_call("cuGraphExecDestroy");
    pthread_mutex_lock(&graph_lock);
    int i = exec_index(e);
    if (i >= 0)
        execs[i] = NULL;
    pthread_mutex_unlock(&graph_lock);
    if (i < 0)
        return CUDA_ERROR_INVALID_VALUE;
    free(e); /* the pool keeps what the graph mapped */
    return CUDA_SUCCESS;
}

void fake_graph_launch(CUgraphExec g)
{
    pthread_mutex_lock(&graph_lock);
    if (exec_index(g) >= 0)
        for (int d = 0; d < 16; d++)
            if (g->bytes[d] > pool[d] && fake_mem_take(g->bytes[d] - pool[d]) == CUDA_SUCCESS)
                pool[d] = g->bytes[d];
    pthread_mutex_unlock(&graph_lock);
}

F(cuDeviceGetGraphMemAttribute, (CUdevice dev, int attr, void *value))
{
    count_call("cuDeviceGetGraphMemAttribute");
    if (dev < 0 || dev >= 16 || value == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&graph_lock);
    *(cuuint64_t *)value = attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT || attr == CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT ? pool[dev] : 0;
    pthread_mutex_unlock(&graph_lock);
    return CUDA_SUCCESS;
}
F(cuDeviceGraphMemTrim, (CUdevice dev))
{
    count_call("cuDeviceGraphMemTrim");
    if (dev < 0 || dev >= 16)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&graph_lock);
    fake_mem_give(pool[dev]); /* nothing executes in the fake: all of it is unused */
    pool[dev] = 0;
    pthread_mutex_unlock(&graph_lock);
    return CUDA_SUCCESS;
}

/* ---- stream capture ------------------------------------------------------------ */

F(cuStreamBeginCapture_v2, (CUstream s, int mode))
{
    (void)mode;
    pthread_mutex_lock(&graph_lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < CAPTURES && r != CUDA_SUCCESS; i++) {
        if (captures[i].graph == NULL) {
            captures[i].stream = s;
            captures[i].graph = calloc(1, sizeof(struct CUgraph_st));
            r = captures[i].graph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    pthread_mutex_unlock(&graph_lock);
    return r;
}
F(cuStreamEndCapture, (CUstream s, CUgraph *g))
{
    pthread_mutex_lock(&graph_lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < CAPTURES; i++) {
        if (captures[i].graph != NULL && captures[i].stream == s) {
            *g = captures[i].graph;
            captures[i].graph = NULL;
            r = CUDA_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&graph_lock);
    return r;
}

/* Capture graph of stream `s`, NULL when it is not capturing (graph_lock held). */
static CUgraph capture_of(CUstream s)
{
    for (int i = 0; i < CAPTURES; i++)
        if (captures[i].graph != NULL && captures[i].stream == s)
            return captures[i].graph;
    return NULL;
}

int fake_capturing(CUstream s)
{
    pthread_mutex_lock(&graph_lock);
    int on = capture_of(s) != NULL;
    pthread_mutex_unlock(&graph_lock);
    return on;
}

int fake_capture_alloc(CUstream s, CUdeviceptr *dptr, size_t bytes)
{
    pthread_mutex_lock(&graph_lock);
    CUgraph g = capture_of(s);
    int done = 0;
    if (g != NULL) {
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        memset(&p, 0, sizeof p);
        p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.bytesize = bytes;
        done = alloc_node(g, NULL, &p) == CUDA_SUCCESS;
        if (done)
            *dptr = p.dptr;
    }
    pthread_mutex_unlock(&graph_lock);
    return done;
}

const struct fake_entry fake_graph_entries[] = {
    FAKE_ENTRY(cuGraphCreate, cuGraphCreate, 10000, 0),
    FAKE_ENTRY(cuGraphDestroy, cuGraphDestroy, 10000, 0),
    FAKE_ENTRY(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode, 11040, 0),
    FAKE_ENTRY(cuGraphAddChildGraphNode, cuGraphAddChildGraphNode, 10000, 0),
    FAKE_ENTRY(cuGraphGetNodes, cuGraphGetNodes, 10000, 0),
    FAKE_ENTRY(cuGraphNodeGetType, cuGraphNodeGetType, 10000, 0),
    FAKE_ENTRY(cuGraphMemAllocNodeGetParams, cuGraphMemAllocNodeGetParams, 11040, 0),
    FAKE_ENTRY(cuGraphChildGraphNodeGetGraph, cuGraphChildGraphNodeGetGraph, 10000, 0),
    FAKE_ENTRY(cuGraphInstantiate, cuGraphInstantiate, 10000, 0),
    FAKE_ENTRY(cuGraphInstantiate_v2, cuGraphInstantiate, 11000, 0),
    FAKE_ENTRY(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, 0),
    FAKE_ENTRY(cuGraphInstantiateWithParams, cuGraphInstantiateWithParams, 12000, 0),
    FAKE_ENTRY(cuGraphInstantiateWithParams_ptsz, cuGraphInstantiateWithParams, 12000, 1),
    FAKE_ENTRY(cuGraphExecDestroy, cuGraphExecDestroy, 10000, 0),
    FAKE_ENTRY(cuDeviceGetGraphMemAttribute, cuDeviceGetGraphMemAttribute, 11040, 0),
    FAKE_ENTRY(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, 11040, 0),
    FAKE_ENTRY(cuStreamBeginCapture_v2, cuStreamBeginCapture, 10010, 0),
    FAKE_ENTRY(cuStreamEndCapture, cuStreamEndCapture, 10000, 0),
    FAKE_ENTRIES_END,
};
