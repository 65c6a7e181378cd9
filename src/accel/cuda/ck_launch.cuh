/* Kernel launches that may overlap their predecessor (programmatic dependent launch, sm_90).
 *
 * A kernel launched with ck_launch into a stream being captured (a decoder graph) carries the
 * attribute: it may start while the previous kernel on the stream is still running. Eager
 * launches (the per-product path, the prompt pass, profiling) never do. Every kernel launched
 * this way calls ck_pdl_wait() before it reads anything a predecessor wrote (or writes anything
 * one reads), and ck_pdl_trigger() to let its successor start early. Work that depends on no predecessor
 * (the mat-vec's weight stream) goes before the wait, so it overlaps the previous kernel's
 * tail. Both instructions are no-ops for a kernel launched without the attribute. */
#ifndef MLXRT_CK_LAUNCH_CUH
#define MLXRT_CK_LAUNCH_CUH

#include <cuda_runtime.h>

#include "kernels.h"

__device__ __forceinline__ void ck_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void ck_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The in-graph timeline (MLXRT_CUDA_TIMELINE=1, cuda_timeline.h): when t is set, block 0's
 * thread 0 of every kernel stamps %globaltimer as its wait returns — i.e. once everything
 * before it has completed — so consecutive stamps bound each kernel's share of the step as
 * the graph runs it. With last (MLXRT_CUDA_TIMELINE=2) the grid's last block also stamps as
 * it reaches its wait and as the wait returns, two stamps per launch at t[cap …] counted by
 * n[1]: whether a kernel's blocks were all placed before its predecessor completed. The pointer
 * lives in each translation unit's constant memory (CK_TIMELINE_SETTER defines its setter), so
 * one timeline records per process (cuda_timeline.c enforces it). */
struct ck_tl_dev {
  unsigned long long *t;
  unsigned *n;
  unsigned cap;
  int last;
};
static __constant__ ck_tl_dev ck_tl_c __attribute__((unused));

__device__ __forceinline__ unsigned long long ck_tl_now() {
  unsigned long long now = 0;
#if defined(__CUDA_ARCH__)
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
#endif
  return now;
}
/* this thread is thread 0 of the grid's last block */
__device__ __forceinline__ bool ck_tl_last_block() {
  return (threadIdx.x | threadIdx.y | threadIdx.z) == 0 && blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 &&
         blockIdx.z == gridDim.z - 1;
}

__device__ __forceinline__ void ck_tl_stamp(unsigned long long entered) {
#if defined(__CUDA_ARCH__)
  if (!ck_tl_c.t) return;
  if ((blockIdx.x | blockIdx.y | blockIdx.z | threadIdx.x | threadIdx.y | threadIdx.z) == 0) {
    unsigned long long now = ck_tl_now();
    unsigned i = atomicAdd(ck_tl_c.n, 1u);
    if (i < ck_tl_c.cap) ck_tl_c.t[i] = now;
  }
  if (ck_tl_c.last && ck_tl_last_block()) {
    unsigned long long now = ck_tl_now();
    unsigned i = atomicAdd(ck_tl_c.n + 1, 2u);
    if (i + 1 < ck_tl_c.cap) ck_tl_c.t[ck_tl_c.cap + i] = entered, ck_tl_c.t[ck_tl_c.cap + i + 1] = now;
  }
#else
  (void)entered;
#endif
}

/* Each decoder kernel starts with ck_pdl_enter(): wait for the predecessor (and so,
 * transitively, every earlier kernel), then let the successor launch. (Triggering before the
 * wait, so that a chain of waiting kernels is resident early, measured 4 % slower.) */
__device__ __forceinline__ void ck_pdl_enter() {
  const unsigned long long entered = ck_tl_c.last ? ck_tl_now() : 0ull;
  ck_pdl_wait();
  ck_tl_stamp(entered);
  ck_pdl_trigger();
}

#define CK_TIMELINE_SETTER(name)                                                     \
  extern "C" int name##_timeline(unsigned long long *t, unsigned *n, unsigned cap, int last, void *st) { \
    ck_tl_dev v = {t, n, cap, last};                                                 \
    return (int)cudaMemcpyToSymbolAsync(ck_tl_c, &v, sizeof v, 0, cudaMemcpyHostToDevice, \
                                        (cudaStream_t)st);                           \
  }

/* 1 when a launch into st may overlap its predecessor: st is being captured into a graph (a
 * decoder step), whose kernels all wait before they touch shared data. Decided per launch from
 * its own stream: no process-wide switch. */
static inline int ck_pdl_for(cudaStream_t st) {
#ifdef CK_EMULATION
  (void)st;
  return 0;
#else
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(st, &cs) == cudaSuccess && cs == cudaStreamCaptureStatusActive;
#endif
}

template <typename... KArgs, typename... Args>
static inline cudaError_t ck_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                    cudaStream_t st, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = ck_pdl_for(st);
  ck_tl_note((const void *)kernel);
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

#endif
