/*
 * fake_copies.c — the fake driver's memory copies (every _v2, _ptds and _ptsz variant of
 * cuMemcpy*, peer, 2D and 3D): each only counted (fakecuda_calls), moving no bytes; the
 * interceptor's copy counters are what the tests read.
 */
#include <stddef.h>

#include "fake_internal.h"

#define COPY3(name, t1, t2) F(name, (t1 a, t2 b, size_t n)) { (void)a; (void)b; (void)n; count_call(#name); return CUDA_SUCCESS; }
#define COPY4(name, t1, t2) F(name, (t1 a, t2 b, size_t n, CUstream s)) { (void)a; (void)b; (void)n; (void)s; count_call(#name); return CUDA_SUCCESS; }
COPY3(cuMemcpyHtoD_v2, CUdeviceptr, const void *)
COPY3(cuMemcpyHtoD_v2_ptds, CUdeviceptr, const void *)
COPY3(cuMemcpyDtoH_v2, void *, CUdeviceptr)
COPY3(cuMemcpyDtoH_v2_ptds, void *, CUdeviceptr)
COPY3(cuMemcpyDtoD_v2, CUdeviceptr, CUdeviceptr)
COPY3(cuMemcpyDtoD_v2_ptds, CUdeviceptr, CUdeviceptr)
COPY3(cuMemcpy, CUdeviceptr, CUdeviceptr)
COPY3(cuMemcpy_ptds, CUdeviceptr, CUdeviceptr)
COPY4(cuMemcpyHtoDAsync_v2, CUdeviceptr, const void *)
COPY4(cuMemcpyHtoDAsync_v2_ptsz, CUdeviceptr, const void *)
COPY4(cuMemcpyDtoHAsync_v2, void *, CUdeviceptr)
COPY4(cuMemcpyDtoHAsync_v2_ptsz, void *, CUdeviceptr)
COPY4(cuMemcpyDtoDAsync_v2, CUdeviceptr, CUdeviceptr)
COPY4(cuMemcpyDtoDAsync_v2_ptsz, CUdeviceptr, CUdeviceptr)
COPY4(cuMemcpyAsync, CUdeviceptr, CUdeviceptr)
COPY4(cuMemcpyAsync_ptsz, CUdeviceptr, CUdeviceptr)
#define PEER(name) F(name, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n)) { (void)d; (void)dc; (void)s; (void)sc; (void)n; count_call(#name); return CUDA_SUCCESS; }
#define PEER_ASYNC(name) F(name, (CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n, CUstream st)) { (void)d; (void)dc; (void)s; (void)sc; (void)n; (void)st; count_call(#name); return CUDA_SUCCESS; }
PEER(cuMemcpyPeer)
PEER(cuMemcpyPeer_ptds)
PEER_ASYNC(cuMemcpyPeerAsync)
PEER_ASYNC(cuMemcpyPeerAsync_ptsz)
#define C2D(name) F(name, (const CUDA_MEMCPY2D *c)) { (void)c; count_call(#name); return CUDA_SUCCESS; }
#define C2DA(name) F(name, (const CUDA_MEMCPY2D *c, CUstream s)) { (void)c; (void)s; count_call(#name); return CUDA_SUCCESS; }
#define C3D(name) F(name, (const CUDA_MEMCPY3D *c)) { (void)c; count_call(#name); return CUDA_SUCCESS; }
#define C3DA(name) F(name, (const CUDA_MEMCPY3D *c, CUstream s)) { (void)c; (void)s; count_call(#name); return CUDA_SUCCESS; }
C2D(cuMemcpy2D_v2)
C2D(cuMemcpy2D_v2_ptds)
C2D(cuMemcpy2DUnaligned_v2)
C2D(cuMemcpy2DUnaligned_v2_ptds)
C2DA(cuMemcpy2DAsync_v2)
C2DA(cuMemcpy2DAsync_v2_ptsz)
C3D(cuMemcpy3D_v2)
C3D(cuMemcpy3D_v2_ptds)
C3DA(cuMemcpy3DAsync_v2)
C3DA(cuMemcpy3DAsync_v2_ptsz)

const struct fake_entry fake_copy_entries[] = {
    FAKE_ENTRY(cuMemcpyHtoD_v2, cuMemcpyHtoD, 3020, 0),
    FAKE_ENTRY(cuMemcpyHtoD_v2_ptds, cuMemcpyHtoD, 7000, 1),
    FAKE_ENTRY(cuMemcpyDtoH_v2, cuMemcpyDtoH, 3020, 0),
    FAKE_ENTRY(cuMemcpyDtoH_v2_ptds, cuMemcpyDtoH, 7000, 1),
    FAKE_ENTRY(cuMemcpyDtoD_v2, cuMemcpyDtoD, 3020, 0),
    FAKE_ENTRY(cuMemcpyDtoD_v2_ptds, cuMemcpyDtoD, 7000, 1),
    FAKE_ENTRY(cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync, 3020, 0),
    FAKE_ENTRY(cuMemcpyHtoDAsync_v2_ptsz, cuMemcpyHtoDAsync, 7000, 1),
    FAKE_ENTRY(cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync, 3020, 0),
    FAKE_ENTRY(cuMemcpyDtoHAsync_v2_ptsz, cuMemcpyDtoHAsync, 7000, 1),
    FAKE_ENTRY(cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync, 3020, 0),
    FAKE_ENTRY(cuMemcpyDtoDAsync_v2_ptsz, cuMemcpyDtoDAsync, 7000, 1),
    FAKE_ENTRY(cuMemcpy, cuMemcpy, 4000, 0), FAKE_ENTRY(cuMemcpy_ptds, cuMemcpy, 7000, 1),
    FAKE_ENTRY(cuMemcpyAsync, cuMemcpyAsync, 4000, 0),
    FAKE_ENTRY(cuMemcpyAsync_ptsz, cuMemcpyAsync, 7000, 1),
    FAKE_ENTRY(cuMemcpyPeer, cuMemcpyPeer, 4000, 0),
    FAKE_ENTRY(cuMemcpyPeer_ptds, cuMemcpyPeer, 7000, 1),
    FAKE_ENTRY(cuMemcpyPeerAsync, cuMemcpyPeerAsync, 4000, 0),
    FAKE_ENTRY(cuMemcpyPeerAsync_ptsz, cuMemcpyPeerAsync, 7000, 1),
    FAKE_ENTRY(cuMemcpy2D_v2, cuMemcpy2D, 3020, 0),
    FAKE_ENTRY(cuMemcpy2D_v2_ptds, cuMemcpy2D, 7000, 1),
    FAKE_ENTRY(cuMemcpy2DUnaligned_v2, cuMemcpy2DUnaligned, 3020, 0),
    FAKE_ENTRY(cuMemcpy2DUnaligned_v2_ptds, cuMemcpy2DUnaligned, 7000, 1),
    FAKE_ENTRY(cuMemcpy2DAsync_v2, cuMemcpy2DAsync, 3020, 0),
    FAKE_ENTRY(cuMemcpy2DAsync_v2_ptsz, cuMemcpy2DAsync, 7000, 1),
    FAKE_ENTRY(cuMemcpy3D_v2, cuMemcpy3D, 3020, 0),
    FAKE_ENTRY(cuMemcpy3D_v2_ptds, cuMemcpy3D, 7000, 1),
    FAKE_ENTRY(cuMemcpy3DAsync_v2, cuMemcpy3DAsync, 3020, 0),
    FAKE_ENTRY(cuMemcpy3DAsync_v2_ptsz, cuMemcpy3DAsync, 7000, 1),
    FAKE_ENTRIES_END,
};
