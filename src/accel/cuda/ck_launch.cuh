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
