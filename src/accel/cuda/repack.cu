/* Upload-time repack: MLX parts (already on the device) → the tile layout the fast mat-vec
 * streams (kernels.h, docs/CUDA.md "Layouts"). One thread per output word; runs once per
 * weight, so it is written for clarity, not speed. */
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "ck_device.cuh"

struct RepackArgs {
  int fmt;
  int64_t slabs, rows, cols, tiles, nchunks, nunits, ngroups;
  const void *raw_w, *raw_s, *raw_b;
  void *w, *s;
};

/* Code of (row, k) in a slab's raw weight; 0 past the last row (tile padding). */
__device__ __forceinline__ uint32_t raw_code_at(const RepackArgs &a, int64_t slab, int64_t row,
                                                int64_t k, int bits) {
  if (row >= a.rows) return 0;
  int64_t words = a.cols * bits / 32;
  const uint32_t *p = (const uint32_t *)a.raw_w + (slab * a.rows + row) * words;
  return ck_raw_code(p, bits, k);
}

__global__ void repack_codes_kernel(RepackArgs a) {
  int64_t total = a.slabs * a.tiles * a.nchunks * 128;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    int j = (int)(idx & 3), lane = (int)((idx >> 2) & 31);
    int64_t rest = idx >> 7;
    int64_t chunk = rest % a.nchunks;
    rest /= a.nchunks;
    int64_t tile = rest % a.tiles, slab = rest / a.tiles;
    int g = lane >> 2, t = lane & 3;
    uint32_t word = 0;
    if (a.fmt == CK_AFF4 || a.fmt == CK_NVFP4 || a.fmt == CK_MXFP4) {
      for (int i = 0; i < 8; i++) {
        int64_t row = tile * 16 + ck_frag_row(g, i);
        int64_t k = chunk * 64 + 16 * j + ck_frag_k(t, i);
        uint32_t c = raw_code_at(a, slab, row, k, 4);
        /* a zero scale: the group's codes become ±0 (the sign kept, so s·v keeps its sign) */
        if (a.fmt == CK_NVFP4 && row < a.rows &&
            !(((const uint8_t *)a.raw_s)[(slab * a.rows + row) * a.ngroups + k / 16] & 0x7fu))
          c &= 8u;
        if (a.fmt == CK_AFF4)
          word |= c << (4 * ck_aff4_nibble(i));
        else
          word |= ((c & 7u) << ck_fp4_mag_pos(i)) | (((c >> 3) & 1u) << ck_fp4_sign_pos(i));
      }
    } else if (a.fmt == CK_AFF8 || a.fmt == CK_MXFP8) {
      int m = j >> 1, h = j & 1;
      for (int b = 0; b < 4; b++) {
        int i = 4 * h + b;
        int64_t row = tile * 16 + ck_frag_row(g, i);
        int64_t k = chunk * 32 + 16 * m + ck_frag_k(t, i);
        word |= raw_code_at(a, slab, row, k, 8) << (8 * b);
      }
    } else { /* dense 16-bit: word j is register j */
      for (int e = 0; e < 2; e++) {
        int i = 2 * j + e;
        int64_t row = tile * 16 + ck_frag_row(g, i);
        int64_t k = chunk * 16 + ck_frag_k(t, i);
        uint32_t v = 0;
        if (row < a.rows) v = ((const uint16_t *)a.raw_w)[(slab * a.rows + row) * a.cols + k];
        word |= v << (16 * e);
      }
    }
    ((uint32_t *)a.w)[idx] = word;
  }
}

/* Affine: per (slab, tile, group, g) the 16-bit (s_g, b_g, s_g+8, b_g+8), copied as stored. */
__global__ void repack_affine_scales_kernel(RepackArgs a) {
  int64_t total = a.slabs * a.tiles * a.ngroups * 8;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    int g = (int)(idx & 7);
    int64_t rest = idx >> 3;
    int64_t G = rest % a.ngroups;
    rest /= a.ngroups;
    int64_t tile = rest % a.tiles, slab = rest / a.tiles;
    uint16_t out[4] = {0, 0, 0, 0};
    for (int hi = 0; hi < 2; hi++) {
      int64_t row = tile * 16 + g + 8 * hi;
      if (row >= a.rows) continue;
      int64_t at = (slab * a.rows + row) * a.ngroups + G;
      out[2 * hi] = ((const uint16_t *)a.raw_s)[at];
      out[2 * hi + 1] = ((const uint16_t *)a.raw_b)[at];
    }
    uint16_t *o = (uint16_t *)a.s + idx * 4;
    for (int q = 0; q < 4; q++) o[q] = out[q];
  }
}

/* nvfp4: per (slab, tile, unit, g) two words; word w holds the codes (ck_nv_code) of
 * (row g, group 2w), (g, 2w+1), (g+8, 2w), (g+8, 2w+1) at places 0..3 (ck_nv_place): the
 * scales of the D columns lane (g, t) holds when the mat-vec gives each group its own column
 * (qmv_tc.cu).
 * mxfp4 / mxfp8: per (slab, tile, unit, g) the E8M0 bytes of rows g and g+8: for each pair of
 * groups (G0, G1): [g·G0, g·G1, g8·G0, g8·G1] (mxfp8 has one group per unit: [g, g8]). */
__global__ void repack_fp_scales_kernel(RepackArgs a) {
  const int spu = ck_fp_scale_bytes(a.fmt);
  int64_t total = a.slabs * a.tiles * a.nunits * 8;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    int g = (int)(idx & 7);
    int64_t rest = idx >> 3;
    int64_t u = rest % a.nunits;
    rest /= a.nunits;
    int64_t tile = rest % a.tiles, slab = rest / a.tiles;
    const int gpu = a.fmt == CK_NVFP4 ? 4 : a.fmt == CK_MXFP4 ? 2 : 1;
    auto raw = [&](int hi, int gl) -> uint32_t {
      int64_t row = tile * 16 + g + 8 * hi;
      if (row >= a.rows) return 0;
      return ((const uint8_t *)a.raw_s)[(slab * a.rows + row) * a.ngroups + u * gpu + gl];
    };
    if (a.fmt == CK_NVFP4) {
      uint32_t *o = (uint32_t *)((uint8_t *)a.s + idx * spu);
      for (int w = 0; w < 2; w++) {
        uint32_t word = 0;
        for (int q = 0; q < 4; q++) word |= ck_nv_place(ck_nv_code(raw(q >> 1, 2 * w + (q & 1))), q);
        o[w] = word;
      }
      continue;
    }
    uint8_t *o = (uint8_t *)a.s + idx * spu;
    for (int b = 0; b < spu; b++) {
      int hi = a.fmt == CK_MXFP8 ? b : (b >> 1) & 1, gl = a.fmt == CK_MXFP8 ? 0 : (b >> 2) * 2 + (b & 1);
      o[b] = (uint8_t)raw(hi, gl);
    }
  }
}

/* (the host emulation, tests/gpu/qmv_emulate.cpp, runs each grid-stride kernel as one block of
 * 32 threads) */
#ifdef CK_EMULATION
#define RP_LAUNCH(kernel, total)                                              \
  do {                                                                        \
    cudaLaunchConfig_t cfg_ = {dim3(1), dim3(32), 0, st, nullptr, 0};         \
    if (cudaLaunchKernelEx(&cfg_, kernel, a)) return (int)cudaErrorInvalidValue; \
  } while (0)
#else
#define RP_LAUNCH(kernel, total) kernel<<<grid_for(total), 256, 0, st>>>(a)

static int grid_for(int64_t total) {
  int64_t blocks = (total + 255) / 256;
  return (int)(blocks > 65535 * 8 ? 65535 * 8 : (blocks < 1 ? 1 : blocks));
}
#endif

extern "C" int ck_repack(const ck_layout *L, const void *raw_w, const void *raw_s,
                         const void *raw_b, void *stream) {
  cudaStream_t st = (cudaStream_t)stream;
  RepackArgs a;
  a.fmt = L->fmt;
  a.slabs = L->slabs;
  a.rows = L->rows;
  a.cols = L->cols;
  a.tiles = L->tiles;
  a.nchunks = L->cols / ck_chunk_k(L->fmt);
  a.nunits = L->nunits;
  a.ngroups = L->group_size > 0 ? L->cols / L->group_size : 0;
  a.raw_w = raw_w;
  a.raw_s = raw_s;
  a.raw_b = raw_b;
  a.w = L->w;
  a.s = L->s;
  RP_LAUNCH(repack_codes_kernel, a.slabs * a.tiles * a.nchunks * 128);
  cudaError_t e = cudaGetLastError();
  if (e) return (int)e;
  if (L->fmt == CK_AFF4 || L->fmt == CK_AFF8) {
    RP_LAUNCH(repack_affine_scales_kernel, a.slabs * a.tiles * a.ngroups * 8);
  } else if (L->fmt == CK_NVFP4 || L->fmt == CK_MXFP4 || L->fmt == CK_MXFP8) {
    RP_LAUNCH(repack_fp_scales_kernel, a.slabs * a.tiles * a.nunits * 8);
  }
  return (int)cudaGetLastError();
}
