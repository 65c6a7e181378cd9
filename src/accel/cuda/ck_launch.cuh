/* Kernel launches that may overlap their predecessor (programmatic dependent launch, sm_90).
 *
 * When the decoder turns it on (ck_set_pdl), a kernel launched with ck_launch may start while
 * the previous kernel on the stream is still running: every kernel launched this way calls
 * ck_pdl_wait() before it reads anything a predecessor wrote (or writes anything one reads),
 * and ck_pdl_trigger() to let its successor start early. Work that depends on no predecessor
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

/* Each decoder kernel starts with ck_pdl_enter(): wait for the predecessor, then let the
 * successor launch — or, with ck_set_pdl_early(1), the other way round, so that a chain of
 * waiting kernels can be resident before the running one ends (the next mat-vec's weight
 * prologue then overlaps the small kernels before it). Both orders are safe: a kernel reads
 * and writes shared data only after its wait, which returns when the predecessor — and so,
 * transitively, every earlier kernel — has completed. An experiment knob
 * (MLXRT_CUDA_PDL_EARLY=1), off by default: 4 % slower when measured (docs/PERF.md). The flag lives in each
 * translation unit's constant memory; CK_PDL_EARLY_SETTER(name) defines its setter. */
static __constant__ int ck_pdl_early_c;

__device__ __forceinline__ void ck_pdl_enter() {
  if (ck_pdl_early_c) {
    ck_pdl_trigger();
    ck_pdl_wait();
  } else {
    ck_pdl_wait();
    ck_pdl_trigger();
  }
}

#define CK_PDL_EARLY_SETTER(name)                                                    \
  extern "C" int name(int on) {                                                      \
    return (int)cudaMemcpyToSymbol(ck_pdl_early_c, &on, sizeof on);                  \
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
  cfg.numAttrs = ck_pdl_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

#endif
