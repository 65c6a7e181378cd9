/* What streaming a buffer through shared memory with the bulk-copy engine reaches, by pipeline
 * shape (mlxrt-stream-probe, tests/gpu/stream_probe.c). The decode attention's split passes
 * stream each split's K or V rows (~1 MB per block at 32768 keys) and reach ~2 TB/s in every
 * form tried (docs/PERF.md, session 18), where the mat-vec's pipeline streams weights at 4.2:
 * this separates the pipeline's shape (blocks per SM, stages, rows per stage, copy size, one
 * pipeline per block or per warp) from the work done on each stage, with no model code.
 *
 * Each unit (a block, or a warp with per-warp pipelines) streams its own contiguous range of
 * the buffer, as a split does. Per stage the consumers wait on the stage's mbarrier, read one
 * word of it each (so the stage is used), optionally run `work` dependent FMAs (a stand-in for
 * the arithmetic), then release the slot: a block barrier and thread 0's refill (per-block), or
 * __syncwarp and lane 0's refill (per-warp). A plain-load kernel gives the reference. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "qmv_tc.cuh" /* mbarrier and bulk-copy primitives */
#include "stream_probe.h"

/* Streams rows [r0, r1) of `row` bytes of src through nst slots of `rows` rows each (slot
 * stride slot_bytes) with one copy per row (or one per stage when onecopy). Returns a value
 * depending on every stage's first word. */
__device__ __forceinline__ float sp_stream(const uint8_t *src, int64_t r0, int64_t r1, int row, int rows, int nst,
                                           int onecopy, int work, uint8_t *slots, uint32_t slot_bytes, uint64_t *mbar,
                                           bool issuer, int lane_id, bool warp_scope) {
  const int64_t n = r1 - r0, nstage = (n + rows - 1) / rows;
  auto issue = [&](int64_t st) {
    const int slot = (int)(st % nst);
    const int64_t a = r0 + st * rows;
    const int cnt = (int)(r1 - a < rows ? r1 - a : rows);
    mbar_expect(&mbar[slot], (uint32_t)cnt * (uint32_t)row);
    uint8_t *dst = slots + (size_t)slot * slot_bytes;
    if (onecopy) {
      bulk_copy(dst, src + a * row, (uint32_t)cnt * (uint32_t)row, &mbar[slot]);
    } else {
      for (int i = 0; i < cnt; i++) bulk_copy(dst + (size_t)i * row, src + (a + i) * row, (uint32_t)row, &mbar[slot]);
    }
  };
  if (issuer)
    for (int64_t st = 0; st < nst && st < nstage; st++) issue(st);
  float acc = 0.0f;
  for (int64_t st = 0; st < nstage; st++) {
    const int slot = (int)(st % nst);
    mbar_wait(&mbar[slot], (uint32_t)((st / nst) & 1));
    const uint32_t w = *reinterpret_cast<const uint32_t *>(slots + (size_t)slot * slot_bytes + 16 * (lane_id & 7));
    float v = __uint_as_float((w & 0x007fffffu) | 0x3f800000u);
    for (int i = 0; i < work; i++) v = fmaf(v, 0.999f, 0.001f);
    acc += v;
    if (warp_scope) __syncwarp();
    else __syncthreads();
    if (issuer && st + nst < nstage) {
      fence_proxy_async_smem();
      issue(st + nst);
    }
  }
  return acc;
}

__global__ void sp_block_kernel(const uint8_t *src, int64_t nrows, int row, int rows, int nst, int onecopy, int work,
                                float *sink) {
  extern __shared__ __align__(128) uint8_t sp_smem[];
  __shared__ uint64_t mbar[SP_MAX_NST];
  if (threadIdx.x == 0) {
    for (int i = 0; i < nst; i++) mbar_init(&mbar[i], 1);
    mbar_init_fence();
  }
  __syncthreads();
  const int64_t per = (nrows + gridDim.x - 1) / gridDim.x, r0 = blockIdx.x * per;
  const int64_t r1 = r0 + per < nrows ? r0 + per : nrows;
  if (r0 >= r1) return;
  const float v = sp_stream(src, r0, r1, row, rows, nst, onecopy, work, sp_smem, (uint32_t)rows * row, mbar,
                            threadIdx.x == 0, threadIdx.x & 31, false);
  if (v == -1.0f) sink[threadIdx.x] = v; /* never true: keeps the reads */
}

/* one pipeline per warp: warp w of block b streams unit b·W + w with its own slots and mbarriers */
__global__ void sp_warp_kernel(const uint8_t *src, int64_t nrows, int row, int rows, int nst, int onecopy, int work,
                               float *sink) {
  extern __shared__ __align__(128) uint8_t sp_smem[];
  __shared__ uint64_t mbar[SP_MAX_WARPS][SP_MAX_NST];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
  if (lane == 0) {
    for (int i = 0; i < nst; i++) mbar_init(&mbar[warp][i], 1);
    mbar_init_fence();
  }
  __syncwarp();
  const int64_t units = (int64_t)gridDim.x * nw, u = (int64_t)blockIdx.x * nw + warp;
  const int64_t per = (nrows + units - 1) / units, r0 = u * per;
  const int64_t r1 = r0 + per < nrows ? r0 + per : nrows;
  if (r0 >= r1) return;
  const uint32_t slot_bytes = (uint32_t)rows * row;
  const float v = sp_stream(src, r0, r1, row, rows, nst, onecopy, work, sp_smem + (size_t)warp * nst * slot_bytes,
                            slot_bytes, mbar[warp], lane == 0, lane, true);
  if (v == -1.0f) sink[threadIdx.x] = v;
}

/* plain 16-byte loads, `inflight` per thread, each block over its own contiguous range */
__global__ void sp_plain_kernel(const uint4 *src, int64_t n16, int inflight, float *sink) {
  const int64_t per = (n16 + gridDim.x - 1) / gridDim.x, a = blockIdx.x * per;
  const int64_t b = a + per < n16 ? a + per : n16;
  uint32_t x = 0;
  for (int64_t i = a + threadIdx.x; i < b; i += (int64_t)blockDim.x * inflight) {
    uint4 v[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
      if (k < inflight && i + (int64_t)k * blockDim.x < b) v[k] = ld_stream(src + i + (int64_t)k * blockDim.x);
      else v[k] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < 8; k++) x ^= v[k].x ^ v[k].w;
  }
  if (x == 0x12345678u) sink[threadIdx.x] = 1.0f;
}

extern "C" size_t sp_smem_bytes(const sp_config *c) {
  const size_t slot = (size_t)c->rows * c->row_bytes * c->nst;
  return c->kind == SP_WARP ? slot * (size_t)c->warps : c->kind == SP_BLOCK ? slot : 0;
}

extern "C" int sp_launch(const sp_config *c, const void *src, int64_t bytes, int sms, float *sink, void *stream) {
  cudaStream_t st = (cudaStream_t)stream;
  const int blocks = sms * c->blocks_per_sm, threads = 32 * c->warps;
  if (c->kind == SP_PLAIN) {
    sp_plain_kernel<<<blocks, threads, 0, st>>>((const uint4 *)src, bytes / 16, c->nst, sink);
    return (int)cudaGetLastError();
  }
  const size_t smem = sp_smem_bytes(c);
  void (*fn)(const uint8_t *, int64_t, int, int, int, int, int, float *) =
      c->kind == SP_WARP ? sp_warp_kernel : sp_block_kernel;
  cudaError_t e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e) return (int)e;
  fn<<<blocks, threads, smem, st>>>((const uint8_t *)src, bytes / c->row_bytes, c->row_bytes, c->rows, c->nst,
                                    c->onecopy, c->work, sink);
  return (int)cudaGetLastError();
}

/* blocks of this configuration resident per SM (0: it does not fit) */
extern "C" int sp_occupancy(const sp_config *c) {
  if (c->kind == SP_PLAIN) return c->blocks_per_sm;
  int n = 0;
  void (*fn)(const uint8_t *, int64_t, int, int, int, int, int, float *) =
      c->kind == SP_WARP ? sp_warp_kernel : sp_block_kernel;
  const size_t smem = sp_smem_bytes(c);
  if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) return 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, 32 * c->warps, smem)) return 0;
  return n;
}
