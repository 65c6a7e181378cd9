/* Tensor-core and asynchronous-copy primitives shared by the attention kernels (attention.cu,
 * prefill_attn.cu), each with its host emulation (tests/gpu/emu/cuda_runtime.h) so the
 * kernels' index math can be checked on a machine without a GPU. */
#ifndef MLXRT_CK_MMA_CUH
#define MLXRT_CK_MMA_CUH

#include <stdint.h>
#include <string.h>

/* c += A·B, mma.sync.m16n8k16 with bf16 (or, at_mma_f16, fp16) operands and float32 accumulators
 * (PTX fragment layout; the host emulation forms the same products, summed in k order). */
#define AT_MMA_ASM(T)                                                                                               \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "   \
               "{%0,%1,%2,%3};"                                                                                     \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                                     \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
__device__ __forceinline__ void at_mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef CK_EMULATION
  emu_mma_bf16(c, a, b0, b1);
#else
  AT_MMA_ASM("bf16");
#endif
}
/* (the compressed K cache's rotated-domain keys: attention_planar.cuh) */
__device__ __forceinline__ void at_mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#ifdef CK_EMULATION
  emu_mma_f16(c, a, b0, b1);
#else
  AT_MMA_ASM("f16");
#endif
}
#undef AT_MMA_ASM

/* 16 bytes global → shared without passing through registers (cp.async; the host emulation
 * copies at once and its commit / wait are no-ops). */
__device__ __forceinline__ void at_cp16(void *dst, const void *src) {
#ifdef CK_EMULATION
  memcpy(dst, src, 16);
#else
  const unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(src) : "memory");
#endif
}
__device__ __forceinline__ void at_cp_commit() {
#ifndef CK_EMULATION
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void at_cp_wait() {
#ifndef CK_EMULATION
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

/* ldmatrix over a kernel's dynamic shared memory: n = 4 (or 2) 8×8 b16 matrices, lane l giving
 * the address of row l & 7 of matrix l >> 3 (ck_smem_off: a shared-window address, or in the
 * emulation an offset into emu_dyn_smem); .trans hands each lane a column pair instead of a
 * row pair. */
__device__ __forceinline__ uint32_t ck_smem_off(const void *p) {
#ifdef CK_EMULATION
  return (uint32_t)((const unsigned char *)p - emu_dyn_smem);
#else
  return (uint32_t)__cvta_generic_to_shared(p);
#endif
}
template <int N, bool TRANS>
__device__ __forceinline__ void ck_ldsm(uint32_t (&r)[4], uint32_t a) {
#ifdef CK_EMULATION
  emu_ldmatrix(r, N, TRANS, a);
#else
  if (N == 4 && !TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  else if (N == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
  else if (!TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
#endif
}

#endif
