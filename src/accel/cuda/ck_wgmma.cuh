/* Warpgroup tensor-core primitives (sm_90a wgmma) for prefill_attn_wg.cu, each with a host
 * emulation (tests/gpu/emu/cuda_runtime.h) so the kernel's layouts can be checked on a machine
 * without a GPU. Also the batched step's product (qmm_wg.cu): fp16 A from registers.
 *
 * Shared-memory operands use the 128-byte swizzle: a tile of R rows × C bf16 columns is stored
 * as C/64 column blocks of R rows × 128 bytes, each 1024-byte group of 8 rows one swizzle atom
 * (the 16-byte chunk c of row r stored at chunk c ^ (r & 7)), atoms 1024-byte aligned. The same
 * bytes serve as a K-major operand (rows = M or N, columns = K: the descriptor's stride between
 * 8-row groups is 1024 bytes; a k step of 16 columns moves the start 32 bytes within the block)
 * and as an MN-major one (rows = K, columns = N: 8-row groups 1024 bytes apart, 64-column blocks
 * R·128 bytes apart). Accumulators and register A fragments follow the PTX layouts: warp w of
 * the warpgroup holds rows 16w … 16w + 15, and within a warp the mma.sync m16n8k16 layouts. */
#ifndef MLXRT_CK_WGMMA_CUH
#define MLXRT_CK_WGMMA_CUH

#include <stdint.h>

/* byte offset of element (r, c) in a tile of R rows stored as above (the copies' side) */
__host__ __device__ __forceinline__ uint32_t wg_off(int R, int r, int c) {
  return (uint32_t)(c >> 6) * (uint32_t)(R * 128) + (uint32_t)r * 128u + ((uint32_t)(((c >> 3) & 7) ^ (r & 7)) << 4) +
         (uint32_t)(c & 7) * 2u;
}

/* The batched step's wgmma width for nr rows of x (qmm_wg.cu; ck_xprep_wg lays x out for it). */
__host__ __device__ __forceinline__ int wg_rows_n(int nr) { return nr <= 8 ? 8 : nr <= 16 ? 16 : nr <= 32 ? 32 : 64; }

/* the operand descriptor: start address (a shared-window address), the stride between
 * 64-column blocks (MN-major only; 16 = unused for K-major), 8-row groups 1024 bytes apart,
 * 128-byte swizzle */
__host__ __device__ __forceinline__ uint64_t wg_desc(uint32_t start, uint32_t lbo) {
  return (uint64_t)((start & 0x3ffffu) >> 4) | (uint64_t)((lbo & 0x3ffffu) >> 4) << 16 | (uint64_t)(1024u >> 4) << 32 |
         (uint64_t)1 << 62;
}

#ifdef CK_EMULATION
__device__ __forceinline__ void wg_fence() {}
__device__ __forceinline__ void wg_commit() {}
template <int N>
__device__ __forceinline__ void wg_wait() {}
template <int ND>
__device__ __forceinline__ void wg_pin(float (&)[ND]) {}
__device__ __forceinline__ void wg_pin_a(const uint32_t (&)[4]) {}
/* d (+)= A·B for the warpgroup: A from shared memory (K-major) or from registers, B K-major
 * (TB = false) or N-major (TB = true) */
template <int N>
__device__ __forceinline__ void wg_mma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  emu_wgmma(d, N, da, nullptr, db, false, scale_d);
}
template <int N>
__device__ __forceinline__ void wg_mma_rs_t(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  emu_wgmma(d, N, 0, a, db, true, scale_d);
}
/* wg_mma_ss with fp16 operands */
template <int N>
__device__ __forceinline__ void wg_mma_ss_f16(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
  emu_wgmma(d, N, da, nullptr, db, false, scale_d, true);
}
/* fp16 A from registers, fp16 B K-major */
template <int N>
__device__ __forceinline__ void wg_mma_rs_f16(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  emu_wgmma(d, N, 0, a, db, false, scale_d, true);
}
#else
/* Keeps the compiler from touching an accumulator while a wgmma writes it asynchronously (call
 * after wg_wait, and before the first wgmma of a chain), or from reusing an A fragment's
 * registers before the wgmma that read them are waited for (call after wg_wait). */
template <int ND>
__device__ __forceinline__ void wg_pin(float (&d)[ND]) {
#pragma unroll
  for (int i = 0; i < ND; i++) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wg_pin_a(const uint32_t (&a)[4]) {
  asm volatile("" ::"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]) : "memory");
}
template <int N>
__device__ __forceinline__ void wg_mma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d);
template <int N>
__device__ __forceinline__ void wg_mma_rs_t(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int scale_d);
template <int N>
__device__ __forceinline__ void wg_mma_ss_f16(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d);
template <int N>
__device__ __forceinline__ void wg_mma_rs_f16(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db, int scale_d);

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* orders this warpgroup's register accesses before the wgmma that follow */
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
/* m64n64k16 with both operands from shared memory, TYPE bf16 or f16 */
#define CK_WG_MMA_SS64(NAME, TYPE)                                                                                     \
  template <>                                                                                                          \
  __device__ __forceinline__ void NAME<64>(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {                    \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                          \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {"                                       \
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                              \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"                      \
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                                                     \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),     \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),           \
                   "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),         \
                   "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),         \
                   "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                               \
                 : "l"(da), "l"(db), "r"(scale_d));                                                                    \
  }
CK_WG_MMA_SS64(wg_mma_ss, "bf16")
CK_WG_MMA_SS64(wg_mma_ss_f16, "f16")
#undef CK_WG_MMA_SS64

template <>
__device__ __forceinline__ void wg_mma_rs_t<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

template <>
__device__ __forceinline__ void wg_mma_rs_t<128>(float (&d)[64], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}

template <>
__device__ __forceinline__ void wg_mma_rs_t<256>(float (&d)[128], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
/* m64nNk16, fp16 A from registers, fp16 B K-major (N = 8, 16, 32, 64: the batched step's rows) */
template <>
__device__ __forceinline__ void wg_mma_rs_f16<8>(float (&d)[4], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
template <>
__device__ __forceinline__ void wg_mma_rs_f16<16>(float (&d)[8], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, "
               "{%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
template <>
__device__ __forceinline__ void wg_mma_rs_f16<32>(float (&d)[16], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
               "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
template <>
__device__ __forceinline__ void wg_mma_rs_f16<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int scale_d) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
               "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d));
}
#else
/* wgmma exists on sm_90a only: the compute_90 PTX build (newer GPUs) gets a trap; the launcher
 * never picks this kernel there (pf_attention_wg_supported) */
__device__ __forceinline__ void wg_fence() {}
__device__ __forceinline__ void wg_commit() {}
template <int N>
__device__ __forceinline__ void wg_wait() {}
template <int N>
__device__ __forceinline__ void wg_mma_ss(float (&)[N / 2], uint64_t, uint64_t, int) {
  __trap();
}
template <int N>
__device__ __forceinline__ void wg_mma_rs_t(float (&)[N / 2], const uint32_t (&)[4], uint64_t, int) {
  __trap();
}
template <int N>
__device__ __forceinline__ void wg_mma_ss_f16(float (&)[N / 2], uint64_t, uint64_t, int) {
  __trap();
}
template <int N>
__device__ __forceinline__ void wg_mma_rs_f16(float (&)[N / 2], const uint32_t (&)[4], uint64_t, int) {
  __trap();
}
#endif
#endif

#endif
