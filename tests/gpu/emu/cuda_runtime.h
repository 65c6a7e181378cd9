/* Host emulation of the CUDA features sample.cu uses (tests/gpu/sample_emulate.cpp): a block's
 * 256 threads are host threads, __syncthreads a barrier, warp shuffles go through a per-warp
 * buffer between two warp barriers, __shared__ variables are statics (blocks run one at a
 * time), atomics are host atomics. Not a CUDA header: only for that check. */
#ifndef SK_EMU_CUDA_RUNTIME_H
#define SK_EMU_CUDA_RUNTIME_H
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __constant__
#define __launch_bounds__(...)

struct emu_dim3 {
  unsigned x, y, z;
};
extern thread_local emu_dim3 threadIdx;
extern emu_dim3 blockIdx, gridDim, blockDim;
extern pthread_barrier_t emu_block_barrier, emu_warp_barrier[8];
extern uint64_t emu_xbuf[8][32];

static inline void __syncthreads() { pthread_barrier_wait(&emu_block_barrier); }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <typename T> static inline T __ldcg(const T *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
template <typename T> static inline T atomicAdd(T *p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
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
  pthread_barrier_wait(&emu_warp_barrier[w]);
  T r = v;
  if (use) memcpy(&r, &emu_xbuf[w][src_lane], sizeof r);
  pthread_barrier_wait(&emu_warp_barrier[w]);
  return r;
}
template <typename T> static inline T __shfl_up_sync(unsigned, T v, int o) {
  const int lane = threadIdx.x & 31;
  return emu_exchange(v, lane - o, lane >= o);
}
template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int o) {
  return emu_exchange(v, (int)(threadIdx.x & 31) ^ o, true);
}
#endif
