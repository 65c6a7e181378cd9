/* The planar3 / planar4 K-cache codec's C reference (src/accel/kv_codec.h): the angle table
 * against the LCG and the published first pairs, the codebooks, the byte layouts on hand-built
 * blocks (an unpacking written here from the format's definition), the round-trip error on
 * isotropic Gaussian blocks against the published figures, scoring in the rotated domain
 * against the decoded dot product, midpoint ties, zero, tiny and huge blocks, NaN and infinities
 * rejected with the output untouched, and planar4's rnorm written as 0. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "accel/kv_codec.h"
#include "base/bf16.h"
#include "kv_codec_ties.h"
#include "test_util.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static double unit(void) {
  g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
  return ((double)(g_rng >> 11) + 0.5) * 0x1p-53;
}
static double gauss(void) { return sqrt(-2.0 * log(unit())) * cos(2.0 * M_PI * unit()); }

/* value j's code, from the format's definition (not the library's unpacking) */
static int code_of(kvc_format f, const uint8_t *b, int j) {
  if (f == KVC_PLANAR3) {
    const int low = (b[2 + j / 4] >> (2 * (j % 4))) & 3, high = (b[2 + 32 + j / 8] >> (j % 8)) & 1;
    return low | high << 2;
  }
  const int byte = b[4 + j / 2];
  return j % 2 == 0 ? byte & 15 : byte >> 4;
}

static const float *codebook(kvc_format f) {
  const kvc_tables *t = kvc_tables_get();
  return f == KVC_PLANAR3 ? t->cb3 : t->cb4;
}

static void test_angles(void) {
  const kvc_tables *t = kvc_tables_get();
  CHECK(t->magic == KVC_TABLES_MAGIC);
  /* the published first three (cos, sin) pairs */
  const double want[3][2] = {{-0.909505, -0.415692}, {0.153558, 0.988140}, {-0.853749, 0.520685}};
  for (int p = 0; p < 3; p++)
    CHECKF(fabs(t->cos[p] - want[p][0]) < 1e-5 && fabs(t->sin[p] - want[p][1]) < 1e-5, "pair %d: (%.6f, %.6f)", p,
           t->cos[p], t->sin[p]);
  /* all 64 from the LCG, recomputed here */
  uint64_t s = 42;
  int bad = 0;
  for (int p = 0; p < KVC_PAIRS; p++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double th = 2.0 * M_PI * ((double)(s >> 11) / 9007199254740992.0);
    bad += fabs(t->cos[p] - cos(th)) > 1e-7 || fabs(t->sin[p] - sin(th)) > 1e-7;
  }
  CHECKF(bad == 0, "%d of 64 angles differ from the LCG's", bad);
}

static void test_codebooks(void) {
  const kvc_tables *t = kvc_tables_get();
  const float c3[4] = {0.021460f, 0.065717f, 0.117832f, 0.190685f};
  const float c4[8] = {0.006938f, 0.020989f, 0.035597f, 0.051262f, 0.068756f, 0.089527f, 0.117195f, 0.173926f};
  for (int i = 0; i < 4; i++) CHECK(t->cb3[4 + i] == c3[i] && t->cb3[3 - i] == -c3[i]);
  for (int i = 0; i < 8; i++) CHECK(t->cb4[8 + i] == c4[i] && t->cb4[7 - i] == -c4[i]);
  for (int k = 0; k < 7; k++) CHECK(t->mid3[k] == (t->cb3[k] + t->cb3[k + 1]) * 0.5f && t->cb3[k] < t->cb3[k + 1]);
  for (int k = 0; k < 15; k++) CHECK(t->mid4[k] == (t->cb4[k] + t->cb4[k + 1]) * 0.5f && t->cb4[k] < t->cb4[k + 1]);
  CHECK(t->mid3[3] == 0.0f && t->mid4[7] == 0.0f);
  CHECK(fabsf(t->mid3[4] - 0.043589f) < 1e-6f && fabsf(t->mid3[5] - 0.091775f) < 1e-6f &&
        fabsf(t->mid3[6] - 0.154259f) < 1e-6f);
  for (int k = 0; k < 8; k++) CHECK(t->sq3[k] == t->cb3[k] * t->cb3[k]);
  for (int k = 0; k < 16; k++) CHECK(t->sq4[k] == t->cb4[k] * t->cb4[k]);
}

static void test_sizes(void) {
  CHECK(kvc_block_bytes(KVC_PLANAR3) == 50 && kvc_block_bytes(KVC_PLANAR4) == 68);
  CHECK(kvc_block_bytes((kvc_format)5) == 0);
  CHECK(kvc_row_bytes(KVC_PLANAR3, 256) == 100 && kvc_row_bytes(KVC_PLANAR3, 512) == 200);
  CHECK(kvc_row_bytes(KVC_PLANAR4, 256) == 136 && kvc_row_bytes(KVC_PLANAR4, 512) == 272);
  CHECK(kvc_row_bytes(KVC_PLANAR3, 200) == 0 && kvc_row_bytes(KVC_PLANAR3, 0) == 0);
}

/* x = alpha · Rᵀ·C[code] (the format's dequantization with n' = alpha): when ‖C[code]‖ ≈ 1 the
 * encoder's rotated unit vector is C[code] within rounding, so it must find these codes again. */
static void build_block(kvc_format f, const int *code, float alpha, float *x) {
  const kvc_tables *t = kvc_tables_get();
  const float *cb = codebook(f);
  for (int p = 0; p < KVC_PAIRS; p++) {
    const double a = cb[code[2 * p]], b = cb[code[2 * p + 1]], c = t->cos[p], s = t->sin[p];
    x[2 * p] = (float)(alpha * (c * a + s * b));
    x[2 * p + 1] = (float)(alpha * (-s * a + c * b));
  }
}

static void test_layout(void) {
  int code[128];
  float x[128], y[128];
  uint8_t b[68];
  mlxrt_error err = {{0}};
  /* planar3: even values cycle through all 8 codes, odd ones alternate 3 and 4 (‖C‖ ≈ 0.95) */
  for (int j = 0; j < 128; j++) code[j] = j % 2 == 0 ? (j / 2) % 8 : ((j / 2) % 2 ? 4 : 3);
  build_block(KVC_PLANAR3, code, 2.0f, x);
  CHECK(kvc_encode_block(KVC_PLANAR3, x, b, &err) == 0);
  int bad = 0;
  for (int j = 0; j < 128; j++) bad += code_of(KVC_PLANAR3, b, j) != code[j];
  CHECKF(bad == 0, "planar3: %d of 128 codes differ", bad);
  /* values 0..15 have codes 0 3 1 4 | 2 3 3 4 | 4 3 5 4 | 6 3 7 4 */
  CHECKF(b[0] == 0x00 && b[1] == 0x40, "planar3 norm bytes %02x %02x (fp16 2.0 is 00 40)", b[0], b[1]);
  CHECKF(b[2] == 0x1c && b[3] == 0x3e && b[4] == 0x1c && b[5] == 0x3e, "planar3 qs %02x %02x %02x %02x", b[2], b[3],
         b[4], b[5]);
  CHECKF(b[34] == 0x88 && b[35] == 0xdd, "planar3 signs %02x %02x", b[34], b[35]);
  CHECK(kvc_decode_block(KVC_PLANAR3, b, y, &err) == 0);
  float md = 0;
  for (int j = 0; j < 128; j++) md = fmaxf(md, fabsf(y[j] - x[j]));
  CHECKF(md < 1e-5f, "planar3: the hand-built block decodes %g away", md);

  /* planar4: code 7j mod 16 (every code 8 times, ‖C‖ ≈ 0.99) */
  for (int j = 0; j < 128; j++) code[j] = (7 * j) % 16;
  build_block(KVC_PLANAR4, code, 2.0f, x);
  memset(b, 0xff, sizeof b);
  CHECK(kvc_encode_block(KVC_PLANAR4, x, b, &err) == 0);
  bad = 0;
  for (int j = 0; j < 128; j++) bad += code_of(KVC_PLANAR4, b, j) != code[j];
  CHECKF(bad == 0, "planar4: %d of 128 codes differ", bad);
  CHECKF(b[0] == 0x00 && b[1] == 0x40 && b[2] == 0 && b[3] == 0, "planar4 norm, rnorm %02x %02x %02x %02x", b[0], b[1],
         b[2], b[3]);
  CHECKF(b[4] == 0x70 && b[5] == 0x5e && b[67] == ((7 * 126) % 16 | ((7 * 127) % 16) << 4), "planar4 qs %02x %02x %02x",
         b[4], b[5], b[67]);
  CHECK(kvc_decode_block(KVC_PLANAR4, b, y, &err) == 0);
  md = 0;
  for (int j = 0; j < 128; j++) md = fmaxf(md, fabsf(y[j] - x[j]));
  CHECKF(md < 1e-5f, "planar4: the hand-built block decodes %g away", md);
}

/* Mean of ‖x − x̂‖² / ‖x‖² over isotropic Gaussian blocks of random scale. */
static double round_trip_mse(kvc_format f, int nvec) {
  double sum = 0;
  float x[128], y[128];
  uint8_t b[68];
  for (int v = 0; v < nvec; v++) {
    const double scale = exp((unit() - 0.5) * 9.0); /* ~1e-2 .. 1e2 */
    for (int j = 0; j < 128; j++) x[j] = (float)(gauss() * scale);
    mlxrt_error err = {{0}};
    if (kvc_encode_block(f, x, b, &err) || kvc_decode_block(f, b, y, &err)) {
      fprintf(stderr, "round trip: %s\n", err.msg);
      return 1.0;
    }
    double e = 0, n = 0;
    for (int j = 0; j < 128; j++) e += ((double)x[j] - y[j]) * ((double)x[j] - y[j]), n += (double)x[j] * x[j];
    sum += e / n;
  }
  return sum / nvec;
}

static void test_round_trip(void) {
  const double m3 = round_trip_mse(KVC_PLANAR3, 4000), m4 = round_trip_mse(KVC_PLANAR4, 4000);
  printf("relative MSE on isotropic Gaussian blocks: planar3 %.4f (published 0.0348), planar4 %.4f (0.0188)\n", m3, m4);
  CHECKF(fabs(m3 - 0.0348) < 0.002, "planar3 relative MSE %.4f", m3);
  CHECKF(fabs(m4 - 0.0188) < 0.0015, "planar4 relative MSE %.4f", m4);
}

/* bf16 rows: each block as kvc_encode_block encodes its float values, rnorm 0 */
static void test_rows(void) {
  for (int f = 3; f <= 4; f++) {
    for (int hd = 128; hd <= 512; hd *= 2) {
      uint16_t row[512];
      float v[512];
      uint8_t got[4 * 68 + 1], want[4 * 68];
      for (int j = 0; j < hd; j++) row[j] = mx_f32_to_bf16((float)gauss()), v[j] = mx_bf16_to_f32(row[j]);
      memset(got, 0xee, sizeof got);
      mlxrt_error err = {{0}};
      CHECK(kvc_encode_row_bf16((kvc_format)f, row, hd, got, &err) == 0);
      const size_t bb = kvc_block_bytes((kvc_format)f);
      for (int b = 0; b < hd / 128; b++) CHECK(kvc_encode_block((kvc_format)f, v + 128 * b, want + b * bb, &err) == 0);
      CHECKF(memcmp(got, want, (size_t)(hd / 128) * bb) == 0, "format %d head_dim %d: the row differs from its blocks",
             f, hd);
      CHECK(got[(hd / 128) * bb] == 0xee);
      if (f == 4)
        for (int b = 0; b < hd / 128; b++) CHECK(got[b * bb + 2] == 0 && got[b * bb + 3] == 0);
    }
  }
  mlxrt_error err = {{0}};
  uint16_t row[384] = {0};
  uint8_t out[200];
  CHECK(kvc_encode_row_bf16(KVC_PLANAR3, row, 200, out, &err) == -1);
  CHECK_MSG(err, "head_dim 200");
  CHECK(kvc_encode_row_bf16(KVC_PLANAR3, row, 0, out, &err) == -1);
  CHECK(kvc_encode_row_bf16((kvc_format)2, row, 256, out, &err) == -1);
  CHECK_MSG(err, "unknown format 2");
  float q[200], qr[200];
  CHECK(kvc_rotate_q(q, 200, qr, &err) == -1);
  CHECK_MSG(err, "not a positive multiple of 128");
}

static void test_rotated_dot(void) {
  float q[512], qr[512], k[512], y[128];
  uint8_t row[4 * 68];
  mlxrt_error err = {{0}};
  for (int f = 3; f <= 4; f++) {
    double worst = 0;
    for (int trial = 0; trial < 200; trial++) {
      const int hd = trial % 2 ? 512 : 256;
      for (int j = 0; j < hd; j++) q[j] = (float)(gauss() * 3.0), k[j] = (float)(gauss() * 0.5);
      const size_t bb = kvc_block_bytes((kvc_format)f);
      double dref = 0, qn = 0, kn = 0;
      int ok = kvc_rotate_q(q, hd, qr, &err) == 0;
      for (int b = 0; ok && b < hd / 128; b++) {
        ok = kvc_encode_block((kvc_format)f, k + 128 * b, row + b * bb, &err) == 0 &&
             kvc_decode_block((kvc_format)f, row + b * bb, y, &err) == 0;
        for (int j = 0; j < 128; j++) dref += (double)q[128 * b + j] * y[j], kn += (double)y[j] * y[j];
      }
      CHECKF(ok, "%s", err.msg);
      for (int j = 0; j < hd; j++) qn += (double)q[j] * q[j];
      const double d = kvc_dot_rotated_row((kvc_format)f, qr, hd, row);
      worst = fmax(worst, fabs(d - dref) / sqrt(qn * kn));
    }
    CHECKF(worst < 2e-6, "format %d: rotated-domain dot off by %.3g of |q||k|", f, worst);
  }
  CHECK(isnan(kvc_dot_rotated((kvc_format)7, qr, row)));
}

static void test_ties(void) {
  const kvc_tables *t = kvc_tables_get();
  for (int f = 3; f <= 4; f++) {
    const float *mid = f == 3 ? t->mid3 : t->mid4;
    const int nmid = f == 3 ? 7 : 15;
    for (int k = 0; k < nmid; k++) {
      if (mid[k] == 0.0f) continue; /* the zero midpoint: test_zero */
      int found = 0;
      for (int p = 0; p < KVC_PAIRS && !found; p++) {
        const int odd = fabsf(t->sin[p]) > fabsf(t->cos[p]);
        float x[128], r[128], n;
        if (!kvc_tie_block(p, odd, mid[k], x)) continue;
        kvc_rotated_unit(x, r, &n);
        if (r[2 * p + odd] != mid[k]) continue;
        found = 1;
        uint8_t b[68];
        mlxrt_error err = {{0}};
        CHECK(kvc_encode_block((kvc_format)f, x, b, &err) == 0);
        CHECKF(code_of((kvc_format)f, b, 2 * p + odd) == k, "format %d: a value on midpoint %d (%g) took code %d", f,
               k, mid[k], code_of((kvc_format)f, b, 2 * p + odd));
      }
      CHECKF(found, "format %d: no block found on midpoint %d (%g)", f, k, mid[k]);
    }
    /* one float either side of each midpoint */
    for (int k = 0; k < nmid; k++) {
      CHECK(kvc_nearest(mid[k], mid, nmid) == k);
      CHECK(kvc_nearest(nextafterf(mid[k], 1.0f), mid, nmid) == k + 1);
      CHECK(kvc_nearest(nextafterf(mid[k], -1.0f), mid, nmid) == k);
    }
  }
}

static void test_zero_tiny(void) {
  float x[128], y[128];
  uint8_t b[68];
  mlxrt_error err = {{0}};
  for (int f = 3; f <= 4; f++) {
    for (int kind = 0; kind < 3; kind++) { /* +0, −0, 1e-13 (norm ≤ 1e-10: treated as zero) */
      for (int j = 0; j < 128; j++) x[j] = kind == 0 ? 0.0f : kind == 1 ? -0.0f : (j % 3 ? 1e-13f : -1e-13f);
      memset(b, 0xff, sizeof b);
      CHECK(kvc_encode_block((kvc_format)f, x, b, &err) == 0);
      CHECKF(b[0] == 0 && b[1] == 0, "format %d kind %d: norm bytes %02x %02x", f, kind, b[0], b[1]);
      int bad = 0; /* u = 0 lies on the zero midpoint: the code below it */
      for (int j = 0; j < 128; j++) bad += code_of((kvc_format)f, b, j) != (f == 3 ? 3 : 7);
      CHECKF(bad == 0, "format %d kind %d: %d codes other than the one below zero", f, kind, bad);
      CHECK(kvc_decode_block((kvc_format)f, b, y, &err) == 0);
      int nz = 0;
      for (int j = 0; j < 128; j++) nz += y[j] != 0.0f;
      CHECK(nz == 0);
    }
    /* a small block above the threshold: encoded (its norm in fp16's subnormal range) */
    for (int j = 0; j < 128; j++) x[j] = (float)(gauss() * 1e-6);
    CHECK(kvc_encode_block((kvc_format)f, x, b, &err) == 0);
    CHECK(kvc_decode_block((kvc_format)f, b, y, &err) == 0);
    double e = 0, n = 0;
    for (int j = 0; j < 128; j++) e += ((double)x[j] - y[j]) * ((double)x[j] - y[j]), n += (double)x[j] * x[j];
    CHECKF(e / n < 0.1, "format %d: a block of norm ~1e-5 decodes with relative error %g", f, e / n);
  }
}

static void test_huge(void) {
  float x[128], y[128];
  uint8_t b[68], keep[68];
  mlxrt_error err = {{0}};
  for (int f = 3; f <= 4; f++) {
    /* ‖x‖ = 40000 encodes; its stored norm is fp16's, finite */
    for (int j = 0; j < 128; j++) x[j] = (float)gauss();
    double n = 0;
    for (int j = 0; j < 128; j++) n += (double)x[j] * x[j];
    for (int j = 0; j < 128; j++) x[j] = (float)(x[j] * 40000.0 / sqrt(n));
    CHECK(kvc_encode_block((kvc_format)f, x, b, &err) == 0);
    CHECK(kvc_decode_block((kvc_format)f, b, y, &err) == 0);
    double yn = 0;
    for (int j = 0; j < 128; j++) yn += (double)y[j] * y[j];
    CHECKF(fabs(sqrt(yn) / 40000.0 - 1.0) < 2e-3, "format %d: a block of norm 40000 decodes to norm %g", f, sqrt(yn));
    /* beyond fp16 (norm 1e6, so n' ≥ 1e6 / max ‖C‖), beyond float's sum of squares (1e30 each),
     * FLT_MAX: rejected, untouched */
    const float big[3] = {1e6f / 11.3f, 1e30f, FLT_MAX};
    for (int i = 0; i < 3; i++) {
      for (int j = 0; j < 128; j++) x[j] = j % 2 ? big[i] : -big[i];
      memset(b, 0x5a, sizeof b);
      memcpy(keep, b, sizeof b);
      CHECK(kvc_encode_block((kvc_format)f, x, b, &err) == -1);
      CHECK_MSG(err, "65504");
      CHECK(memcmp(b, keep, sizeof b) == 0);
    }
  }
}

static void test_nonfinite(void) {
  float x[128];
  uint8_t b[68], keep[68];
  const float bad[3] = {NAN, INFINITY, -INFINITY};
  const char *name[3] = {"NaN", "+inf", "-inf"};
  for (int f = 3; f <= 4; f++)
    for (int i = 0; i < 3; i++)
      for (int pos = 0; pos < 128; pos += 37) {
        for (int j = 0; j < 128; j++) x[j] = (float)gauss();
        x[pos] = bad[i];
        memset(b, 0x33, sizeof b);
        memcpy(keep, b, sizeof b);
        mlxrt_error err = {{0}};
        CHECK(kvc_encode_block((kvc_format)f, x, b, &err) == -1);
        CHECK_MSG(err, name[i]);
        CHECK(memcmp(b, keep, sizeof b) == 0);
      }
  /* a row: the bad block is named and left as it was, the others are written */
  uint16_t row[512];
  uint8_t out[200], want[200];
  for (int j = 0; j < 512; j++) row[j] = mx_f32_to_bf16((float)gauss());
  row[2 * 128 + 5] = 0x7fc0; /* bf16 NaN */
  mlxrt_error err = {{0}};
  memset(out, 0x77, sizeof out);
  CHECK(kvc_encode_row_bf16(KVC_PLANAR3, row, 512, out, &err) == -1);
  CHECK_MSG(err, "block 2 of the row");
  CHECK_MSG(err, "value 5");
  memset(want, 0x77, sizeof want);
  for (int b2 = 0; b2 < 4; b2++) {
    if (b2 == 2) continue;
    uint16_t one[128];
    memcpy(one, row + 128 * b2, sizeof one);
    CHECK(kvc_encode_row_bf16(KVC_PLANAR3, one, 128, want + 50 * b2, &err) == 0);
  }
  CHECK(memcmp(out, want, sizeof out) == 0);
  /* a stored norm that is not finite does not decode; flags become the same errors */
  float y[128];
  memset(out, 0, sizeof out);
  out[1] = 0x7c;
  CHECK(kvc_decode_block(KVC_PLANAR3, out, y, &err) == -1);
  CHECK(kvc_fail_flags(0, &err) == 0);
  CHECK(kvc_fail_flags(KVC_FLAG_NONFINITE, &err) == -1);
  CHECK_MSG(err, "NaN or an infinity");
  CHECK(kvc_fail_flags(KVC_FLAG_RANGE, &err) == -1);
  CHECK_MSG(err, "65504");
  CHECK(kvc_fail_flags(KVC_FLAG_NO_TABLES, &err) == -1);
  CHECK_MSG(err, "tables");
}

int main(void) {
  test_angles();
  test_codebooks();
  test_sizes();
  test_layout();
  test_round_trip();
  test_rows();
  test_rotated_dot();
  test_ties();
  test_zero_tiny();
  test_huge();
  test_nonfinite();
  TEST_END();
}
