/* The planar3 / planar4 K-cache codec's C reference (kv_codec.h). The encoder runs the 32 lanes
 * of kv_codec_math.h one after another; the CUDA encoder (cuda/kv_codec.cu) runs them as a warp
 * and writes the same bytes. Linked into the core library and into the CUDA plug-in (whose
 * encoder uploads kvc_tables_get's table). Built with -ffp-contract=off (CMakeLists.txt). */
#include "accel/kv_codec.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/bf16.h"
#include "base/error.h"

/* The codebooks (ascending; a code is its index): 3-bit Lloyd-Max-style levels for N(0, 1/128),
 * and the 4-bit table of the same family. Values as the format defines them. */
static const float CB3[8] = {-0.190685f, -0.117832f, -0.065717f, -0.021460f,
                             0.021460f,  0.065717f,  0.117832f,  0.190685f};
static const float CB4[16] = {-0.173926f, -0.117195f, -0.089527f, -0.068756f, -0.051262f, -0.035597f,
                              -0.020989f, -0.006938f, 0.006938f,  0.020989f,  0.035597f,  0.051262f,
                              0.068756f,  0.089527f,  0.117195f,  0.173926f};

static kvc_tables g_tab;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void tables_build(void) {
  uint64_t state = 42;
  for (int p = 0; p < KVC_PAIRS; p++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const double u = (double)(state >> 11) / 9007199254740992.0; /* 2^53 */
    const double th = 2.0 * 3.14159265358979323846 * u;
    g_tab.cos[p] = (float)cos(th);
    g_tab.sin[p] = (float)sin(th);
  }
  for (int k = 0; k < 8; k++) g_tab.cb3[k] = CB3[k], g_tab.sq3[k] = CB3[k] * CB3[k];
  for (int k = 0; k < 16; k++) g_tab.cb4[k] = CB4[k], g_tab.sq4[k] = CB4[k] * CB4[k];
  for (int k = 0; k < 7; k++) g_tab.mid3[k] = (CB3[k] + CB3[k + 1]) * 0.5f;
  for (int k = 0; k < 15; k++) g_tab.mid4[k] = (CB4[k] + CB4[k + 1]) * 0.5f;
  g_tab.magic = KVC_TABLES_MAGIC;
}

const kvc_tables *kvc_tables_get(void) {
  pthread_once(&g_once, tables_build);
  return &g_tab;
}

size_t kvc_block_bytes(kvc_format f) {
  return f == KVC_PLANAR3 ? KVC_P3_BYTES : f == KVC_PLANAR4 ? KVC_P4_BYTES : 0;
}

size_t kvc_row_bytes(kvc_format f, int head_dim) {
  if (head_dim <= 0 || head_dim % KVC_BLOCK) return 0;
  return (size_t)(head_dim / KVC_BLOCK) * kvc_block_bytes(f);
}

static int bad_format(kvc_format f, mlxrt_error *err) {
  return mx_fail(err, "kv codec: unknown format %d (expected planar3 or planar4)", (int)f);
}

static int bad_head_dim(int head_dim, mlxrt_error *err) {
  return mx_fail(err, "kv codec: head_dim %d is not a positive multiple of 128 (the codec encodes whole "
                 "128-value blocks and does not pad)", head_dim);
}

/* The 32 lane sums folded in halves: the warp's xor-shuffle order (kv_codec_math.h). */
static float fold32(float p[KVC_LANES]) {
  for (int h = KVC_LANES / 2; h > 0; h >>= 1)
    for (int i = 0; i < h; i++) p[i] = KVC_ADD(p[i], p[i + h]);
  return p[0];
}

static float block_norm(const float *x) {
  float p[KVC_LANES];
  for (int l = 0; l < KVC_LANES; l++) p[l] = kvc_lane_sumsq(x + 4 * l);
  return KVC_SQRT(fold32(p));
}

/* blk: -1 for a lone block, else its index in a row (named in the message) */
static int encode(kvc_format f, const float *x, uint8_t *out, int blk, mlxrt_error *err) {
  char where[48] = "";
  if (blk >= 0) snprintf(where, sizeof where, " (block %d of the row)", blk);
  if (f != KVC_PLANAR3 && f != KVC_PLANAR4) return bad_format(f, err);
  for (int j = 0; j < KVC_BLOCK; j++)
    if (!isfinite(x[j]))
      return mx_fail(err, "kv codec: value %d of a 128-value block%s is %s; only finite values can be encoded", j,
                     where, isnan(x[j]) ? "NaN" : x[j] > 0 ? "+inf" : "-inf");
  const kvc_tables *t = kvc_tables_get();
  const float n = block_norm(x);
  int code[KVC_BLOCK];
  float p[KVC_LANES];
  for (int l = 0; l < KVC_LANES; l++) p[l] = kvc_lane_codes(t, (int)f, l, x + 4 * l, n, code + 4 * l);
  const float csq = fold32(p);
  const uint16_t nh = kvc_norm_half(n, csq);
  if (!kvc_half_finite(nh))
    return mx_fail(err, "kv codec: a 128-value block%s of norm %g has a corrected norm %g beyond fp16's largest "
                   "value 65504; it cannot be stored", where, (double)n, (double)(n / sqrtf(csq)));
  uint8_t b[KVC_P4_BYTES];
  memset(b, 0, sizeof b);
  b[0] = (uint8_t)(nh & 0xff);
  b[1] = (uint8_t)(nh >> 8);
  for (int l = 0; l < KVC_LANES; l++) {
    const int *c = code + 4 * l;
    if (f == KVC_PLANAR3) {
      b[KVC_P3_QS + l] = kvc_pack3_qs(c);
      b[KVC_P3_SIGNS + l / 2] |= (uint8_t)(kvc_pack3_signs(c) << (4 * (l & 1)));
    } else {
      b[KVC_P4_QS + 2 * l] = kvc_pack4(c[0], c[1]);
      b[KVC_P4_QS + 2 * l + 1] = kvc_pack4(c[2], c[3]);
    }
  }
  memcpy(out, b, kvc_block_bytes(f));
  return 0;
}

int kvc_encode_block(kvc_format f, const float *x, uint8_t *out, mlxrt_error *err) {
  return encode(f, x, out, -1, err);
}

int kvc_encode_row_bf16(kvc_format f, const uint16_t *x, int head_dim, uint8_t *out, mlxrt_error *err) {
  if (f != KVC_PLANAR3 && f != KVC_PLANAR4) return bad_format(f, err);
  if (head_dim <= 0 || head_dim % KVC_BLOCK) return bad_head_dim(head_dim, err);
  const size_t bb = kvc_block_bytes(f);
  int rc = 0;
  mlxrt_error e2;
  for (int b = 0; b < head_dim / KVC_BLOCK; b++) {
    float v[KVC_BLOCK];
    for (int j = 0; j < KVC_BLOCK; j++) v[j] = mx_bf16_to_f32(x[b * KVC_BLOCK + j]);
    if (encode(f, v, out + (size_t)b * bb, b, rc ? &e2 : err)) rc = -1; /* the first failure's message */
  }
  return rc;
}

/* value j's code */
static int code_at(kvc_format f, const uint8_t *blk, int j) {
  if (f == KVC_PLANAR3)
    return ((blk[KVC_P3_QS + j / 4] >> (2 * (j % 4))) & 3) | ((blk[KVC_P3_SIGNS + j / 8] >> (j % 8)) & 1) << 2;
  return (blk[KVC_P4_QS + j / 2] >> (4 * (j & 1))) & 15;
}

static float stored_norm(const uint8_t *blk) { return mx_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8)); }

int kvc_decode_block(kvc_format f, const uint8_t *blk, float *x, mlxrt_error *err) {
  if (f != KVC_PLANAR3 && f != KVC_PLANAR4) return bad_format(f, err);
  const float nn = stored_norm(blk);
  if (!isfinite(nn))
    return mx_fail(err, "kv codec: the block's stored norm is not finite (not a block this codec wrote)");
  const kvc_tables *t = kvc_tables_get();
  const float *cb = f == KVC_PLANAR3 ? t->cb3 : t->cb4;
  for (int p = 0; p < KVC_PAIRS; p++) {
    const float c0 = cb[code_at(f, blk, 2 * p)], c1 = cb[code_at(f, blk, 2 * p + 1)];
    const float c = t->cos[p], s = t->sin[p];
    x[2 * p] = nn * (c * c0 + s * c1); /* Rᵀ: the inverse of kvc_rotate */
    x[2 * p + 1] = nn * (c * c1 - s * c0);
  }
  return 0;
}

int kvc_rotate_q(const float *q, int head_dim, float *q_rot, mlxrt_error *err) {
  if (head_dim <= 0 || head_dim % KVC_BLOCK) return bad_head_dim(head_dim, err);
  const kvc_tables *t = kvc_tables_get();
  for (int j = 0; j < head_dim; j += 2) {
    const int p = (j % KVC_BLOCK) / 2;
    kvc_rotate(t->cos[p], t->sin[p], q[j], q[j + 1], &q_rot[j], &q_rot[j + 1]);
  }
  return 0;
}

float kvc_dot_rotated(kvc_format f, const float *q_rot, const uint8_t *blk) {
  if (f != KVC_PLANAR3 && f != KVC_PLANAR4) return NAN;
  const kvc_tables *t = kvc_tables_get();
  const float *cb = f == KVC_PLANAR3 ? t->cb3 : t->cb4;
  float acc = 0.0f;
  for (int j = 0; j < KVC_BLOCK; j++) acc += q_rot[j] * cb[code_at(f, blk, j)];
  return stored_norm(blk) * acc;
}

float kvc_dot_rotated_row(kvc_format f, const float *q_rot, int head_dim, const uint8_t *row) {
  const size_t bb = kvc_block_bytes(f);
  if (!bb || head_dim <= 0 || head_dim % KVC_BLOCK) return NAN;
  float acc = 0.0f;
  for (int b = 0; b < head_dim / KVC_BLOCK; b++) acc += kvc_dot_rotated(f, q_rot + b * KVC_BLOCK, row + b * bb);
  return acc;
}

void kvc_rotated_unit(const float *x, float *r, float *norm) {
  const kvc_tables *t = kvc_tables_get();
  const float n = block_norm(x);
  for (int p = 0; p < KVC_PAIRS; p++)
    kvc_rotate(t->cos[p], t->sin[p], kvc_unit(x[2 * p], n), kvc_unit(x[2 * p + 1], n), &r[2 * p], &r[2 * p + 1]);
  *norm = n;
}

int kvc_fail_flags(unsigned flags, mlxrt_error *err) {
  if (flags & KVC_FLAG_NO_TABLES)
    return mx_fail(err, "kv codec: the device encoder ran without its tables (ck_kv_codec_upload was not called)");
  if (flags & KVC_FLAG_NONFINITE)
    return mx_fail(err, "kv codec: a 128-value block holds NaN or an infinity; only finite values can be encoded");
  if (flags & KVC_FLAG_RANGE)
    return mx_fail(err, "kv codec: a 128-value block has a corrected norm beyond fp16's largest value 65504; it "
                   "cannot be stored");
  return flags ? mx_fail(err, "kv codec: unknown device encoder flags 0x%x", flags) : 0;
}
