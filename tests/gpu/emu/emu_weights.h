/* Random weights of every format in MLX's layout, their values, and their repack into the
 * tile layout (repack.cu through its launcher) for the host emulations of the products
 * (tests/gpu/qmv_emulate.cpp, tests/gpu/ple_tail_emulate.cpp). A case type C has fmt, gs, sdt,
 * rows, cols and zero_scale; the harness defines unit() and rnd32() before including this. */
#ifndef EMU_WEIGHTS_H
#define EMU_WEIGHTS_H
#include <vector>

/* bits per code of the formats with codes */
static int code_bits(int fmt) { return fmt == CK_AFF8 || fmt == CK_MXFP8 ? 8 : 4; }
static bool dense(int fmt) { return fmt == CK_DBF16 || fmt == CK_DF16; }

/* MLX's value of (row, k): e2m1 code × E4M3 scale (nvfp4), e2m1 or E4M3 code × E8M0 scale
 * (mxfp4 / mxfp8), s·q + b (affine 4 and 8-bit), or the stored bf16 / f16 value */
struct Weights {
  int fmt, gs, sdt, rows, cols;
  std::vector<uint32_t> w;               /* packed codes, rows × cols·bits/32 */
  std::vector<uint8_t> s8;               /* fp scales (E4M3 or E8M0), rows × cols/gs */
  std::vector<uint16_t> s16, b16;        /* affine scales and biases, rows × cols/gs */
  std::vector<uint16_t> d16;             /* dense values, rows × cols */
  double at(int r, int k) const {
    if (fmt == CK_DBF16) return ck_bf16_to_f32(d16[(size_t)r * cols + k]);
    if (fmt == CK_DF16) return ck_f16_to_f32(d16[(size_t)r * cols + k]);
    const int bits = code_bits(fmt);
    const uint32_t c = ck_raw_code(&w[(size_t)r * (cols * bits / 32)], bits, k);
    const size_t gi = (size_t)r * (cols / gs) + k / gs;
    if (fmt == CK_NVFP4) return (double)ck_fp4_to_f32(c) * (double)ck_e4m3_to_f32(s8[gi]);
    if (fmt == CK_MXFP4) return (double)ck_fp4_to_f32(c) * (double)ck_e8m0_to_f32(s8[gi]);
    if (fmt == CK_MXFP8) return (double)ck_e4m3_to_f32(c) * (double)ck_e8m0_to_f32(s8[gi]);
    const double s = sdt == CKT_F16 ? ck_f16_to_f32(s16[gi]) : ck_bf16_to_f32(s16[gi]);
    const double b = sdt == CKT_F16 ? ck_f16_to_f32(b16[gi]) : ck_bf16_to_f32(b16[gi]);
    return s * (double)c + b;
  }
};

template <typename C> static Weights make_weights(const C &c) {
  Weights W{c.fmt, c.gs, c.sdt, c.rows, c.cols, {}, {}, {}, {}, {}};
  if (dense(c.fmt)) {
    W.d16.resize((size_t)c.rows * c.cols);
    for (uint16_t &v : W.d16) {
      const float f = (unit() * 2 - 1) * 0.05f;
      v = c.fmt == CK_DBF16 ? ck_f32_to_bf16(f) : ck_f32_to_f16(f);
    }
    return W;
  }
  W.w.resize((size_t)c.rows * c.cols * code_bits(c.fmt) / 32);
  for (uint32_t &v : W.w) v = rnd32() ^ (rnd32() << 15);
  const size_t ng = (size_t)c.rows * (c.cols / c.gs);
  if (c.fmt == CK_NVFP4) {
    W.s8.resize(ng);
    for (uint8_t &s : W.s8) s = (uint8_t)(0x20 + rnd32() % 0x40); /* E4M3 2^-3 … 2^4, positive */
    if (c.zero_scale) W.s8[(size_t)(c.rows / 2) * (c.cols / 16) + 3] = 0;
  } else if (c.fmt == CK_MXFP4 || c.fmt == CK_MXFP8) {
    W.s8.resize(ng);
    for (uint8_t &s : W.s8) s = (uint8_t)(120 + rnd32() % 12); /* E8M0 2^-7 … 2^4 */
  } else {
    W.s16.resize(ng);
    W.b16.resize(ng);
    for (size_t i = 0; i < ng; i++) {
      const float s = (0.5f + unit()) * 0.01f, b = (unit() - 0.5f) * 0.1f;
      W.s16[i] = c.sdt == CKT_F16 ? ck_f32_to_f16(s) : ck_f32_to_bf16(s);
      W.b16[i] = c.sdt == CKT_F16 ? ck_f32_to_f16(b) : ck_f32_to_bf16(b);
    }
  }
  return W;
}

/* The layout of a c-shaped weight of `slabs` slabs (buffers set by the caller). */
template <typename C> static ck_layout layout_of(const C &c, int slabs) {
  ck_layout L = {};
  L.fmt = c.fmt;
  L.mode = c.fmt == CK_NVFP4 ? CKM_NVFP4 : c.fmt == CK_MXFP4 ? CKM_MXFP4 : c.fmt == CK_MXFP8 ? CKM_MXFP8
         : dense(c.fmt) ? CKM_DENSE : CKM_AFFINE;
  L.bits = dense(c.fmt) ? 16 : code_bits(c.fmt);
  L.dense_dtype = c.fmt == CK_DF16 ? CKT_F16 : CKT_BF16;
  L.group_size = c.gs;
  L.scales_dtype = c.sdt;
  L.slabs = slabs;
  L.rows = c.rows;
  L.cols = c.cols;
  L.tiles = (c.rows + 15) / 16;
  L.nunits = c.cols / ck_unit_k_c(c.fmt, c.gs);
  return L;
}

static int repack(ck_layout *L, const Weights &W) {
  if (dense(W.fmt)) return ck_repack(L, W.d16.data(), NULL, NULL, NULL);
  if (W.fmt == CK_AFF4 || W.fmt == CK_AFF8) return ck_repack(L, W.w.data(), W.s16.data(), W.b16.data(), NULL);
  return ck_repack(L, W.w.data(), W.s8.data(), NULL, NULL);
}

#endif
