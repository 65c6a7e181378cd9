/* Host emulation of the CUDA features sample.cu and attention.cu use
 * (tests/gpu/sample_emulate.cpp, tests/gpu/attention_emulate.cpp; with EMU_CLUSTER, the
 * blocks of a cluster side by side: attention_cluster_emulate.cpp): a block's threads are host
 * threads (with EMU_FIBERS fibers on one host thread: emu_fiber.h), __syncthreads a barrier, warp shuffles go through a per-warp buffer between two
 * warp barriers, __shared__ variables are statics (blocks run one at a time; dynamic shared
 * memory is emu_dyn_smem, see CK_DYNAMIC_SHARED in ck_block.cuh), atomics are host atomics.
 * With EMU_LAUNCH, cudaLaunchKernelEx runs a kernel over its grid on those threads
 * (emu_run_grid, defined by the harness). Not a CUDA header: only for those checks. */
#ifndef SK_EMU_CUDA_RUNTIME_H
#define SK_EMU_CUDA_RUNTIME_H
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __shared__ static
#define __constant__
#define __launch_bounds__(...)

struct emu_dim3 {
  unsigned x, y, z;
};
/* warps per block the harness provides for (a harness may define more before including) */
#ifndef EMU_WARPS
#define EMU_WARPS 8
#endif
#if defined(EMU_CLUSTER) && defined(EMU_FIBERS)
#error "a cluster's blocks run side by side on host threads: EMU_FIBERS is for the plain emulation"
#endif
#ifdef EMU_CLUSTER
/* A cluster's blocks run side by side (tests/gpu/attention_cluster_emulate.cpp): each thread
 * points at its block's barriers, warp buffers and dynamic shared memory. Static __shared__
 * variables would be shared by the blocks, so the kernels run this way keep their shared
 * state in dynamic shared memory (cooperative_groups.h here checks that remote pointers do). */
#define __cluster_dims__(...)
struct emu_block {
  pthread_barrier_t block, warp[EMU_WARPS];
  pthread_barrier_t named; /* bar.sync 1 of EMU_NAMED_T threads (qmv_chain.cu's consumer warps) */
  uint64_t xbuf[EMU_WARPS][32];
  uint32_t mma[EMU_WARPS][32][6];
  unsigned char *smem;
  size_t smem_bytes;
};
extern thread_local emu_block *emu_blk;
extern thread_local emu_dim3 threadIdx, blockIdx;
extern emu_dim3 gridDim, blockDim;
#define emu_block_barrier (emu_blk->block)
#define emu_warp_barrier (emu_blk->warp)
#define emu_xbuf (emu_blk->xbuf)
#define emu_mma_buf (emu_blk->mma)
#define emu_dyn_smem (emu_blk->smem)
#define EMU_BARRIER_WAIT(b) pthread_barrier_wait(b)
#define EMU_YIELD() sched_yield()
#else
extern thread_local emu_dim3 threadIdx;
extern emu_dim3 blockIdx, gridDim, blockDim;
#ifdef EMU_FIBERS /* a block's threads as fibers on one host thread (emu_fiber.h) */
#include "emu_fiber.h"
typedef emu_bar emu_barrier_t;
#define EMU_BARRIER_WAIT(b) emu_bar_wait(b)
#define EMU_YIELD() emu_yield()
#else
typedef pthread_barrier_t emu_barrier_t;
#define EMU_BARRIER_WAIT(b) pthread_barrier_wait(b)
#define EMU_YIELD() sched_yield()
#endif
extern emu_barrier_t emu_block_barrier, emu_warp_barrier[EMU_WARPS];
extern uint64_t emu_xbuf[EMU_WARPS][32];
extern unsigned char emu_dyn_smem[];
#endif

static inline void __syncthreads() { EMU_BARRIER_WAIT(&emu_block_barrier); }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <typename T> static inline T __ldcg(const T *p) {
  T v;
  __atomic_load(p, &v, __ATOMIC_SEQ_CST);
  return v;
}
template <typename T> static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
template <typename T> static inline T atomicOr(T *p, T v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
static inline int __popc(unsigned v) { return __builtin_popcount(v); }
static inline unsigned atomicMax(unsigned *p, unsigned v) {
  unsigned old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
static inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}
static inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline unsigned long long __float2ull_rz(float f) { return (unsigned long long)f; }

template <typename T> static inline T emu_exchange(T v, int src_lane, bool use) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  uint64_t b = 0;
  memcpy(&b, &v, sizeof v);
  emu_xbuf[w][lane] = b;
  EMU_BARRIER_WAIT(&emu_warp_barrier[w]);
  T r = v;
  if (use) memcpy(&r, &emu_xbuf[w][src_lane], sizeof r);
  EMU_BARRIER_WAIT(&emu_warp_barrier[w]);
  return r;
}
/* mma.sync.m16n8k16 (bf16 or fp16 in, f32 accumulate) for one warp, fragments per the PTX layout:
 * every lane publishes its A and B registers, each then forms its own four outputs. The
 * products are summed in k order in float32 (the hardware's order differs: a check of the
 * fragment and index math, not of bits). */
#ifndef EMU_CLUSTER
extern uint32_t emu_mma_buf[EMU_WARPS][32][6];
#endif
static inline float emu_bf2f(uint32_t h) { return __uint_as_float((h & 0xffffu) << 16); }
static inline float emu_h2f(uint32_t h) {
  h &= 0xffffu;
  const unsigned s = (h >> 15) & 1u, e = (h >> 10) & 31u, m = h & 1023u;
  float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 1024u), (int)e - 25);
  return s ? -v : v;
}
template <float (*CV)(uint32_t)>
static inline void emu_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  for (int i = 0; i < 4; i++) emu_mma_buf[w][lane][i] = a[i];
  emu_mma_buf[w][lane][4] = b0;
  emu_mma_buf[w][lane][5] = b1;
  EMU_BARRIER_WAIT(&emu_warp_barrier[w]);
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; l++) {
    const int g = l >> 2, t = l & 3;
    const uint32_t *f = emu_mma_buf[w][l];
    A[g][2 * t] = CV(f[0]), A[g][2 * t + 1] = CV(f[0] >> 16);
    A[g + 8][2 * t] = CV(f[1]), A[g + 8][2 * t + 1] = CV(f[1] >> 16);
    A[g][2 * t + 8] = CV(f[2]), A[g][2 * t + 9] = CV(f[2] >> 16);
    A[g + 8][2 * t + 8] = CV(f[3]), A[g + 8][2 * t + 9] = CV(f[3] >> 16);
    B[2 * t][g] = CV(f[4]), B[2 * t + 1][g] = CV(f[4] >> 16);
    B[2 * t + 8][g] = CV(f[5]), B[2 * t + 9][g] = CV(f[5] >> 16);
  }
  EMU_BARRIER_WAIT(&emu_warp_barrier[w]);
  const int g = lane >> 2, t = lane & 3;
  const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 16; k++) c[i] += A[rows[i]][k] * B[k][cols[i]];
}
static inline void emu_mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emu_mma<emu_bf2f>(c, a, b0, b1);
}
/* the same with fp16 operands (the tensor-core mat-vec's) */
static inline void emu_mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  emu_mma<emu_h2f>(c, a, b0, b1);
}
/* wgmma (m64nNk16, bf16 — or with f16, fp16 — in, f32 accumulate) for one warpgroup, ck_wgmma.cuh's layouts: each
 * thread forms its own accumulator elements — rows 16w + g and 16w + g + 8 of its warp w, the
 * mma.sync column pairs of every 8-column block — from shared memory read through the operand
 * descriptors (128-byte swizzle: the 16-byte chunk bits of an address XOR its row-in-atom bits),
 * or for a register A from its quad's fragments. Products summed in k order in float32, as
 * emu_mma does (a check of layouts and index math, not of the hardware's bits). */
static inline float emu_wg_elem(uint64_t desc, int mn, int k, bool mn_major, bool f16 = false) {
  const uint32_t start = (uint32_t)(desc & 0x3fffu) << 4, lbo = (uint32_t)((desc >> 16) & 0x3fffu) << 4,
                 sbo = (uint32_t)((desc >> 32) & 0x3fffu) << 4;
  if ((desc >> 62) != 1 || ((desc >> 49) & 7) != 0 || ((start >> 7) & 7) != 0 || (!mn_major && (start & 127) + 32 > 128)) {
    fprintf(stderr, "emulation: wgmma descriptor %016llx outside the 128-byte swizzle this emulation knows\n",
            (unsigned long long)desc);
    abort();
  }
  uint32_t off = mn_major ? start + (uint32_t)(mn / 64) * lbo + (uint32_t)(k / 8) * sbo + (uint32_t)(k % 8) * 128u +
                                (uint32_t)(mn % 64) * 2u
                          : start + (uint32_t)(mn / 8) * sbo + (uint32_t)(mn % 8) * 128u + (uint32_t)k * 2u;
  off ^= ((off >> 7) & 7u) << 4;
  uint16_t v;
  memcpy(&v, emu_dyn_smem + off, 2);
  return f16 ? emu_h2f(v) : emu_bf2f(v);
}
static inline void emu_wgmma(float *d, int N, uint64_t da, const uint32_t *a, uint64_t db, bool b_mn_major, int scale_d,
                             bool f16 = false) {
  const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, w = wid & 3, g = lane >> 2, t = lane & 3;
  float A[2][16];
  if (a) {
    for (int i = 0; i < 4; i++) emu_mma_buf[wid][lane][i] = a[i];
    EMU_BARRIER_WAIT(&emu_warp_barrier[wid]);
    for (int q = 0; q < 4; q++) {
      const uint32_t *f = emu_mma_buf[wid][4 * g + q];
      float (*cv)(uint32_t) = f16 ? emu_h2f : emu_bf2f;
      A[0][2 * q] = cv(f[0]), A[0][2 * q + 1] = cv(f[0] >> 16);
      A[1][2 * q] = cv(f[1]), A[1][2 * q + 1] = cv(f[1] >> 16);
      A[0][2 * q + 8] = cv(f[2]), A[0][2 * q + 9] = cv(f[2] >> 16);
      A[1][2 * q + 8] = cv(f[3]), A[1][2 * q + 9] = cv(f[3] >> 16);
    }
    EMU_BARRIER_WAIT(&emu_warp_barrier[wid]);
  } else {
    for (int r = 0; r < 2; r++)
      for (int k = 0; k < 16; k++) A[r][k] = emu_wg_elem(da, 16 * w + g + 8 * r, k, false, f16);
  }
  for (int i = 0; i < N / 2; i++) {
    const int r = (i >> 1) & 1, col = 8 * (i >> 2) + 2 * t + (i & 1);
    float acc = scale_d ? d[i] : 0.f;
    for (int k = 0; k < 16; k++) acc += A[r][k] * emu_wg_elem(db, col, k, b_mn_major, f16);
    d[i] = acc;
  }
}
static inline void __syncwarp(unsigned = 0xffffffffu) { EMU_BARRIER_WAIT(&emu_warp_barrier[threadIdx.x >> 5]); }
template <typename T> static inline T min(T a, T b) { return a < b ? a : b; }

/* mbarriers (sm_90) for the kernels with bulk-copy stages (qmv_tc.cuh, qmv_chain.cu): the 64-bit
 * word holds the phase count, the arrivals still expected, the expected count and the
 * transaction bytes pending, updated under one lock; a bulk copy is a memcpy followed by its
 * complete_tx. try_wait.parity p is true once the phase of parity p has completed. */
#include <sched.h>
#include <stdlib.h>

static pthread_mutex_t emu_mbar_lock = PTHREAD_MUTEX_INITIALIZER;
struct emu_mbar_state { /* 8 bytes, as the hardware's; the transaction count as wide as its 2^20 */
  uint8_t phase, pending, expected, pad;
  uint32_t tx;
};
static inline emu_mbar_state *emu_mbar(uint64_t *m) { return reinterpret_cast<emu_mbar_state *>(m); }
static inline void emu_mbar_step(emu_mbar_state *b) { /* (lock held) */
  if (b->pending == 0 && b->tx == 0) {
    b->phase++;
    b->pending = b->expected;
  }
}
static inline void emu_mbar_init(uint64_t *m, unsigned count) {
  pthread_mutex_lock(&emu_mbar_lock);
  if (count < 1 || count > 255) {
    fprintf(stderr, "emulation: mbarrier count %u outside 1..255\n", count);
    abort();
  }
  *emu_mbar(m) = emu_mbar_state{0, (uint8_t)count, (uint8_t)count, 0, 0};
  pthread_mutex_unlock(&emu_mbar_lock);
}
static inline void emu_mbar_arrive(uint64_t *m, unsigned tx_add) {
  pthread_mutex_lock(&emu_mbar_lock);
  emu_mbar_state *b = emu_mbar(m);
  if (b->pending == 0 || (uint64_t)b->tx + tx_add > 0xfffffu) {
    fprintf(stderr, "emulation: mbarrier arrival beyond its count\n");
    abort();
  }
  b->tx += tx_add;
  b->pending--;
  emu_mbar_step(b);
  pthread_mutex_unlock(&emu_mbar_lock);
}
static inline void emu_bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *m) {
  if (bytes % 16 || (uintptr_t)dst % 16 || (uintptr_t)src % 16) {
    fprintf(stderr, "emulation: bulk copy of %u bytes, %p -> %p: not 16-byte aligned\n", bytes, src, dst);
    abort();
  }
  memcpy(dst, src, bytes);
  pthread_mutex_lock(&emu_mbar_lock);
  emu_mbar_state *b = emu_mbar(m);
  if (b->tx < bytes) {
    fprintf(stderr, "emulation: bulk copy of %u bytes beyond the %u expected\n", bytes, (unsigned)b->tx);
    abort();
  }
  b->tx -= bytes;
  emu_mbar_step(b);
  pthread_mutex_unlock(&emu_mbar_lock);
}
static inline bool emu_mbar_test(uint64_t *m, unsigned parity) {
  pthread_mutex_lock(&emu_mbar_lock);
  const bool done = (emu_mbar(m)->phase & 1u) != (parity & 1u);
  pthread_mutex_unlock(&emu_mbar_lock);
  return done;
}
static inline void emu_mbar_wait(uint64_t *m, unsigned parity) {
  for (long spin = 0; !emu_mbar_test(m, parity); spin++) {
    if (spin > 200000000l) {
      fprintf(stderr, "emulation: an mbarrier wait never ended\n");
      abort();
    }
    EMU_YIELD();
  }
}
static inline void __nanosleep(unsigned) { EMU_YIELD(); }

/* ldmatrix (m8n8, b16) over emu_dyn_smem: lane l gives the byte offset of row l & 7 of matrix
 * l >> 3; without trans lane l receives row l / 4, columns 2(l % 4) and 2(l % 4) + 1 of each
 * matrix, with trans rows 2(l % 4) and 2(l % 4) + 1 of column l / 4. */
static inline void emu_ldmatrix(uint32_t (&r)[4], int n, bool trans, uint32_t off) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  emu_xbuf[w][lane] = off;
  EMU_BARRIER_WAIT(&emu_warp_barrier[w]);
  for (int i = 0; i < n; i++) {
    uint16_t lo, hi;
    if (!trans) {
      const unsigned char *row = emu_dyn_smem + emu_xbuf[w][8 * i + (lane >> 2)];
      memcpy(&lo, row + 4 * (lane & 3), 2);
      memcpy(&hi, row + 4 * (lane & 3) + 2, 2);
    } else {
      memcpy(&lo, emu_dyn_smem + emu_xbuf[w][8 * i + 2 * (lane & 3)] + 2 * (lane >> 2), 2);
      memcpy(&hi, emu_dyn_smem + emu_xbuf[w][8 * i + 2 * (lane & 3) + 1] + 2 * (lane >> 2), 2);
    }
    r[i] = (uint32_t)lo | (uint32_t)hi << 16;
  }
  EMU_BARRIER_WAIT(&emu_warp_barrier[w]);
}
template <typename T> static inline T __shfl_up_sync(unsigned, T v, int o) {
  const int lane = threadIdx.x & 31;
  return emu_exchange(v, lane - o, lane >= o);
}
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int o) {
  return emu_exchange(v, (int)(threadIdx.x & 31) ^ o, true);
}
template <typename T> static inline T __shfl_sync(unsigned, T v, int src) {
  return emu_exchange(v, src & 31, true);
}
static inline int __any_sync(unsigned m, int p) {
  int v = p != 0;
  for (int o = 16; o > 0; o >>= 1) v |= __shfl_xor_sync(m, v, o);
  return v;
}

/* ---- what attention.cu and the shared device headers need besides ---------------------- */
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return uint4{a, b, c, d}; }
static inline float4 make_float4(float a, float b, float c, float d) { return float4{a, b, c, d}; }
static inline float2 make_float2(float a, float b) { return float2{a, b}; }
static inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
template <typename T> static inline T __ldg(const T *p) { return *p; }
static inline uint4 __ldcg(const uint4 *p) { return *p; } /* (the template above needs libatomic for 16 bytes) */
static inline float4 __ldcg(const float4 *p) { return *p; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const uint64_t b = (uint64_t)y << 32 | x;
  unsigned r = 0;
  for (int k = 0; k < 4; k++) r |= (unsigned)(b >> (8 * ((s >> (4 * k)) & 7)) & 0xffu) << (8 * k);
  return r;
}
static inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
  s &= 31;
  return s ? (hi << s) | (lo >> (32 - s)) : hi;
}

#ifdef EMU_LAUNCH
#include <functional>
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInvalidConfiguration = 9 };
typedef void *cudaStream_t;
enum cudaLaunchAttributeID { cudaLaunchAttributeProgrammaticStreamSerialization = 1, cudaLaunchAttributeCooperative = 2 };
struct cudaLaunchAttribute {
  cudaLaunchAttributeID id;
  struct { int programmaticStreamSerializationAllowed, cooperative; } val;
};
/* the device's figures a launcher asks for: a harness defines them (emu_dev_attr) */
enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81
};
int emu_dev_attr(cudaDeviceAttr a);
static inline int cudaGetDevice(int *d) { *d = 0; return 0; }
static inline int cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) { *v = emu_dev_attr(a); return 0; }
/* every grid the emulation runs is resident at once (the cluster pool runs a whole grid) */
template <typename F> static inline int cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *n, F, int, size_t) {
  *n = 64;
  return 0;
}
struct cudaLaunchConfig_t {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes;
  cudaStream_t stream;
  cudaLaunchAttribute *attrs;
  unsigned numAttrs;
};
/* Runs body once per block of grid on blockDim host threads; non-zero when the shape is one
 * the harness cannot run. */
int emu_run_grid(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body);
template <typename... KArgs, typename... Args>
static inline cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *cfg, void (*kernel)(KArgs...), Args... args) {
  return emu_run_grid(cfg->gridDim, cfg->blockDim, cfg->dynamicSmemBytes, [=]() { kernel(args...); })
             ? cudaErrorInvalidValue
             : cudaSuccess;
}
template <typename T> static inline cudaError_t cudaMemcpyToSymbol(T &sym, const void *src, size_t n) {
  memcpy(&sym, src, n);
  return cudaSuccess;
}
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1 };
template <typename T>
static inline cudaError_t cudaMemcpyToSymbolAsync(T &sym, const void *src, size_t n, size_t off, cudaMemcpyKind,
                                                  cudaStream_t) {
  memcpy(reinterpret_cast<char *>(&sym) + off, src, n);
  return cudaSuccess;
}
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8, cudaFuncAttributeNonPortableClusterSizeAllowed = 12 };
template <typename F> static inline cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
static inline cudaError_t cudaGetLastError() { return cudaSuccess; }
/* the timeline's launch log (src/accel/cuda/cuda_timeline.c) is not part of the emulation */
extern "C" inline void ck_tl_note(const void *) {}
#endif
#endif
