/* The planar3 / planar4 K encoder on the GPU (ck_kv_encode) against the C reference
 * (kvc_encode_row_bf16), block for block: K rows of Gemma 4's head dims (256, 512) at token and
 * head strides, random values with per-channel scales and outlier channels, and adversarial
 * blocks (all zero, tiny, near the fp16 range of the corrected norm, beyond it, a NaN, an
 * infinity). Every block the reference encodes must come back with the same bytes; every block
 * it rejects must be left untouched on the device, with the matching flag set.
 *   mlxrt-kvcodec-test          (exit 0: every block equal) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/kv_codec.h"
#include "accel/kv_codec_math.h"
#include "base/bf16.h"
#include "base/error.h"
#include "gpu_test_util.h"
#include "kv_codec_kernels.h"
#include "runtime.h"

#define NTOK 96
#define NHEAD 4
#define FILL 0xA5

/* block kind of (token t, head h, block b): 0 random, else one adversarial case */
static int kind_of(int t, int h, int b) { return t < 12 && h == (t % NHEAD) && b == 0 ? 1 + t / 2 : 0; }

static void make_rows(uint16_t *k, int hd, uint64_t *rng) {
  float scale[512];
  for (int c = 0; c < hd; c++) scale[c] = (float)exp(0.5 * (rng_unit(rng) * 2 - 1)) * (c % 61 == 7 ? 10.f : 1.f);
  for (int t = 0; t < NTOK; t++)
    for (int h = 0; h < NHEAD; h++)
      for (int c = 0; c < hd; c++) {
        const int kind = kind_of(t, h, c / 128);
        float v = (float)((rng_unit(rng) + rng_unit(rng) + rng_unit(rng) - 1.5) * 2) * scale[c];
        if (kind == 1) v = 0.f;                             /* zero block */
        else if (kind == 2) v *= 1e-30f;                    /* tiny */
        else if (kind == 3) v *= 2000.f;                    /* corrected norm near fp16's top */
        else if (kind == 4) v *= 1e20f;                     /* beyond it: rejected */
        else if (kind == 5 && c % 128 == 77) v = NAN;       /* a NaN: rejected */
        else if (kind == 6 && c % 128 == 5) v = -INFINITY;  /* an infinity: rejected */
        k[((size_t)t * NHEAD + h) * hd + c] = mx_f32_to_bf16(v);
      }
}

static int run(int fmt, int hd, void *st, uint64_t *rng) {
  mlxrt_error err = {0};
  const size_t nrow = (size_t)NTOK * NHEAD, rb = kvc_row_bytes((kvc_format)fmt, hd), bb = kvc_block_bytes(fmt);
  uint16_t *k = malloc(nrow * hd * sizeof *k);
  uint8_t *want = malloc(nrow * rb), *got = malloc(nrow * rb);
  int *rejected = calloc(nrow * (hd / 128), sizeof *rejected);
  void *dk = NULL, *dout = NULL, *dflags = NULL;
  unsigned flags = 0;
  int bad = 0;
  if (!k || !want || !got || !rejected) return 1;
  make_rows(k, hd, rng);
  /* the reference, block by block (a rejected block stays FILL) */
  memset(want, FILL, nrow * rb);
  unsigned want_flags = 0;
  for (size_t r = 0; r < nrow; r++)
    for (int b = 0; b < hd / 128; b++) {
      mlxrt_error e = {0};
      if (kvc_encode_row_bf16((kvc_format)fmt, k + r * hd + b * 128, 128, want + r * rb + b * bb, &e)) {
        rejected[r * (hd / 128) + b] = 1;
        int nonfinite = 0;
        for (int c = 0; c < 128; c++) nonfinite |= !isfinite(mx_bf16_to_f32(k[r * hd + b * 128 + c]));
        want_flags |= nonfinite ? KVC_FLAG_NONFINITE : KVC_FLAG_RANGE;
      }
    }
  /* the device: rows (t, h) at k + t·NHEAD·hd + h·hd, blocks at out + t·NHEAD·rb + h·rb */
  if (rt_malloc(&dk, nrow * hd * 2, &err) || rt_malloc(&dout, nrow * rb, &err) ||
      rt_malloc(&dflags, sizeof flags, &err) || rt_h2d(dk, k, nrow * hd * 2, st, &err) ||
      rt_memset(dout, FILL, nrow * rb, st, &err) || rt_memset(dflags, 0, sizeof flags, st, &err) ||
      rt_status(ck_kv_encode(fmt, dk, NTOK, NHEAD, hd, (int64_t)NHEAD * hd, hd, dout, (int64_t)NHEAD * rb, (int64_t)rb,
                             dflags, st),
                "kv encode launch", &err) ||
      rt_d2h(got, dout, nrow * rb, st, &err) || rt_d2h(&flags, dflags, sizeof flags, st, &err) ||
      rt_stream_sync(st, &err)) {
    fprintf(stderr, "FAIL: %s\n", err.msg);
    return 1;
  }
  int nrej = 0, first_bad = -1;
  for (size_t r = 0; r < nrow; r++)
    for (int b = 0; b < hd / 128; b++) {
      nrej += rejected[r * (hd / 128) + b];
      if (memcmp(got + r * rb + b * bb, want + r * rb + b * bb, bb)) {
        if (first_bad < 0) first_bad = (int)(r * (hd / 128) + b);
        bad++;
      }
    }
  if (flags != want_flags) bad++;
  printf("%s planar%d head_dim %d: %zu blocks, %d rejected, flags %u (want %u)", bad ? "FAIL" : "ok  ", fmt, hd,
         nrow * (hd / 128), nrej, flags, want_flags);
  if (first_bad >= 0) printf(", first differing block %d", first_bad);
  printf("\n");
  rt_free(dk);
  rt_free(dout);
  rt_free(dflags);
  free(k);
  free(want);
  free(got);
  free(rejected);
  return bad != 0;
}

int main(void) {
  mlxrt_error err = {0};
  rt_device_info info;
  void *st = NULL;
  if (rt_device_open(&info, &err) || rt_stream_create(&st, &err) ||
      rt_status(ck_kv_codec_upload(st), "codec table upload", &err)) {
    fprintf(stderr, "FAIL: %s\n", err.msg);
    return 1;
  }
  uint64_t rng = 0x243f6a8885a308d3ull;
  int bad = 0;
  for (int fmt = 3; fmt <= 4; fmt++)
    for (int hd = 256; hd <= 512; hd *= 2) bad |= run(fmt, hd, st, &rng);
  printf(bad ? "FAIL\n" : "PASS\n");
  return bad;
}
