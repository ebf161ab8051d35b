/*
 * fake_streams.c — what a process puts on the simulated GPU (fake_gpu.c) and asks of
 * it: its queue of kernel work and event markers, and the stream / event entry points.
 *
 * A launch of `blocks` blocks costs one wave (FAKECUDA_WAVE_NS, 20 us) per FAKECUDA_SMS
 * (132) blocks, nothing with FAKECUDA_BENCH; it blocks while the process's backlog
 * (queued, plus the kernel still running) is over 2 ms, as a full launch queue does.
 * fakecuda_own_busy_ns() adds up the nominal kernel time the process queued.
 *
 * A process's streams are one queue, in order. An event is a slot in the GPU's event
 * table; recording it queues a marker that the GPU stamps when it reaches it, so
 * cuEventQuery and cuEventElapsedTime see the card's timeline, other processes' slices
 * included. A stream is busy while its process has work queued or a kernel running.
 * FAKECUDA_CAPTURING=1 makes every stream report a capture; otherwise the streams
 * cuStreamBeginCapture put in capture mode (fake_graph.c) do.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "fake_internal.h"

#define QUEUE_MAX_NS 2000000ull /* a process's launches block beyond this backlog */
#define EVENT_PENDING UINT64_MAX /* recorded, the GPU has not reached the marker yet */

static uint64_t own_busy_ns; /* kernel time this process submitted */

/* Queues an item for this process, waiting while its backlog is full. */
static void gpu_queue(struct gpu_item it)
{
    struct gpu_state *g = gpu_get();
    for (;;) {
        uint64_t now = gpu_enter(g);
        struct gpu_proc *p = gpu_own(g);
        uint64_t backlog = p->queued_ns + (p->last_end > now ? p->last_end - now : 0);
        if (p->tail - p->head < GPU_QUEUE_LEN && (it.event >= 0 || backlog <= QUEUE_MAX_NS)) {
            p->q[p->tail % GPU_QUEUE_LEN] = it;
            p->tail++;
            p->queued_ns += it.dur;
            own_busy_ns += it.dur;
            pthread_mutex_unlock(&g->lock);
            return;
        }
        pthread_mutex_unlock(&g->lock);
        sleep_ns(backlog > QUEUE_MAX_NS ? backlog - QUEUE_MAX_NS : 50000);
    }
}

void gpu_submit(uint64_t dur)
{
    gpu_queue((struct gpu_item){.dur = dur, .event = -1});
}

void gpu_launch(uint64_t blocks)
{
    if (fake_bench())
        return;
    uint64_t sms = env_u64("FAKECUDA_SMS", 132);
    uint64_t waves = (blocks + sms - 1) / (sms ? sms : 1);
    gpu_submit((waves ? waves : 1) * env_u64("FAKECUDA_WAVE_NS", 20000));
}

FAKE_EXPORT uint64_t fakecuda_own_busy_ns(void)
{
    struct gpu_state *g = gpu_get();
    pthread_mutex_lock(&g->lock);
    uint64_t ns = own_busy_ns;
    pthread_mutex_unlock(&g->lock);
    return ns;
}

/* ---- streams, events, capture ------------------------------------------- */

struct CUevent_st {
    int id; /* slot in the GPU's event table */
};

static __thread CUstreamCaptureMode capture_mode;

F(cuEventCreate, (CUevent *e, unsigned int flags))
{
    (void)flags;
    count_call("cuEventCreate");
    struct gpu_state *g = gpu_get();
    pthread_mutex_lock(&g->lock);
    int id = 0;
    while (id < GPU_MAX_EVENTS && g->event_used[id])
        id++;
    if (id < GPU_MAX_EVENTS) {
        g->event_used[id] = 1;
        g->event_ts[id] = 0;
    }
    pthread_mutex_unlock(&g->lock);
    if (id == GPU_MAX_EVENTS || (*e = malloc(sizeof **e)) == NULL)
        return CUDA_ERROR_OUT_OF_MEMORY;
    (*e)->id = id;
    return CUDA_SUCCESS;
}
F(cuEventDestroy_v2, (CUevent e))
{
    count_call("cuEventDestroy_v2");
    struct gpu_state *g = gpu_get();
    pthread_mutex_lock(&g->lock);
    g->event_used[e->id] = 0;
    pthread_mutex_unlock(&g->lock);
    free(e);
    return CUDA_SUCCESS;
}
static CUresult event_record(CUevent e)
{
    if (e == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    struct gpu_state *g = gpu_get();
    pthread_mutex_lock(&g->lock);
    g->event_ts[e->id] = EVENT_PENDING;
    pthread_mutex_unlock(&g->lock);
    gpu_queue((struct gpu_item){.dur = 0, .event = e->id});
    return CUDA_SUCCESS;
}
F(cuEventRecord, (CUevent e, CUstream s)) { (void)s; count_call("cuEventRecord"); return event_record(e); }
F(cuEventRecord_ptsz, (CUevent e, CUstream s)) { (void)s; count_call("cuEventRecord_ptsz"); return event_record(e); }
/* When the GPU reached the event (EVENT_PENDING: not yet, 0: never recorded). */
static uint64_t event_time(CUevent e)
{
    struct gpu_state *g = gpu_get();
    uint64_t now = gpu_enter(g);
    uint64_t ts = g->event_ts[e->id];
    pthread_mutex_unlock(&g->lock);
    return ts > now ? EVENT_PENDING : ts;
}
F(cuEventQuery, (CUevent e))
{
    count_call("cuEventQuery");
    return event_time(e) == EVENT_PENDING ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}
static CUresult event_elapsed(float *ms, CUevent a, CUevent b)
{
    uint64_t ta = event_time(a), tb = event_time(b);
    if (ta == 0 || tb == 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (ta == EVENT_PENDING || tb == EVENT_PENDING)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)(((double)tb - (double)ta) / 1e6);
    return CUDA_SUCCESS;
}
F(cuEventElapsedTime, (float *ms, CUevent a, CUevent b)) { count_call("cuEventElapsedTime"); return event_elapsed(ms, a, b); }
F(cuEventElapsedTime_v2, (float *ms, CUevent a, CUevent b)) { count_call("cuEventElapsedTime_v2"); return event_elapsed(ms, a, b); }
/* Busy while this process has queued work or a kernel still running. */
static CUresult stream_query(void)
{
    struct gpu_state *g = gpu_get();
    uint64_t now = gpu_enter(g);
    const struct gpu_proc *p = gpu_own(g);
    bool busy = p->head != p->tail || p->last_end > now;
    pthread_mutex_unlock(&g->lock);
    return busy ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}
F(cuStreamQuery, (CUstream s)) { (void)s; count_call("cuStreamQuery"); return stream_query(); }
F(cuStreamQuery_ptsz, (CUstream s)) { (void)s; count_call("cuStreamQuery_ptsz"); return stream_query(); }
/* FAKECUDA_CAPTURING=1: every stream reports an active capture; otherwise the streams
 * that cuStreamBeginCapture put in capture mode (fake_graph.c). */
static CUresult stream_capturing(CUstream s, CUstreamCaptureStatus *st)
{
    *st = env_u64("FAKECUDA_CAPTURING", 0) || fake_capturing(s) ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                                                 : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
}
F(cuStreamIsCapturing, (CUstream s, CUstreamCaptureStatus *st)) { count_call("cuStreamIsCapturing"); return stream_capturing(s, st); }
F(cuStreamIsCapturing_ptsz, (CUstream s, CUstreamCaptureStatus *st)) { count_call("cuStreamIsCapturing_ptsz"); return stream_capturing(s == NULL ? CU_STREAM_PER_THREAD : s, st); }
F(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode *mode))
{
    count_call("cuThreadExchangeStreamCaptureMode");
    CUstreamCaptureMode old = capture_mode;
    capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

const struct fake_entry fake_stream_entries[] = {
    FAKE_ENTRY(cuEventCreate, cuEventCreate, 2000, 0),
    FAKE_ENTRY(cuEventDestroy_v2, cuEventDestroy, 4000, 0),
    FAKE_ENTRY(cuEventRecord, cuEventRecord, 2000, 0),
    FAKE_ENTRY(cuEventRecord_ptsz, cuEventRecord, 7000, 1),
    FAKE_ENTRY(cuEventQuery, cuEventQuery, 2000, 0),
    FAKE_ENTRY(cuEventElapsedTime, cuEventElapsedTime, 2000, 0),
    FAKE_ENTRY(cuEventElapsedTime_v2, cuEventElapsedTime, 12080, 0),
    FAKE_ENTRY(cuStreamQuery, cuStreamQuery, 2000, 0),
    FAKE_ENTRY(cuStreamQuery_ptsz, cuStreamQuery, 7000, 1),
    FAKE_ENTRY(cuStreamIsCapturing, cuStreamIsCapturing, 10000, 0),
    FAKE_ENTRY(cuStreamIsCapturing_ptsz, cuStreamIsCapturing, 10000, 1),
    FAKE_ENTRY(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, 10010, 0),
    FAKE_ENTRIES_END,
};
