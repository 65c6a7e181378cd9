/* Host emulation (tests/gpu/emu/cuda_runtime.h): the device headers include <cuda_bf16.h> but
 * handle bf16 as raw bits (ck_device.cuh), so the emulation needs nothing from it. Not a CUDA
 * header. */
#ifndef SK_EMU_CUDA_BF16_H
#define SK_EMU_CUDA_BF16_H
#endif
