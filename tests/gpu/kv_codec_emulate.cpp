/* Runs the K-cache encoder of kv_codec.cu (ck_kv_encode, through its real launcher) on host
 * threads (tests/gpu/emu/cuda_runtime.h) and requires the bytes of the C reference
 * (kvc_encode_row_bf16, src/accel/kv_codec.c), byte for byte, over the whole output buffer:
 * strided rows (tokens × heads, the output in head-major order with gaps that must stay as they
 * were), random rows at many scales and adversarial ones — zeros and −0, tiny values (the norm
 * below 1e-10, or its square below float's range), powers of two, sparse pairs (rotated values
 * exactly 0, on the zero midpoint), blocks whose rotated value lies exactly on each nonzero
 * midpoint, norms just inside fp16 and beyond it, float overflow, NaN and ±inf at any lane,
 * and blocks whose stored norm would change if either block sum were added in another order (so
 * a reduction order other than the reference's shows in the bytes). A rejected block must be
 * left as it was and its flag raised (each flag alone in its own cases); a launch before the
 * tables are uploaded must write nothing and say so. A CTest. Build and run from the
 * repository root, after building the library (build/libmlxrt.a):
 *   g++ -std=c++17 -O2 -pthread -ffp-contract=off -DCK_EMULATION -DEMU_LAUNCH -DEMU_FIBERS -Itests/gpu/emu -Isrc \
 *       -Isrc/accel/cuda -Iinclude tests/gpu/kv_codec_emulate.cpp build/libmlxrt.a -o /tmp/kve -lcjson -lm
 *   /tmp/kve [seed]
 */
#include "../../src/accel/cuda/kv_codec.cu"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "../kv_codec_ties.h"
#include "base/bf16.h"
#include "emu_cases.h"
#include "emu_rng.h"

#define EMU_SMEM_BYTES 1024
#include "emu_block_runner.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double unit() { return ((double)(emu_xorshift64(&g_rng) >> 11) + 0.5) * 0x1p-53; }
static double gauss() { return sqrt(-2.0 * log(unit())) * cos(2.0 * M_PI * unit()); }
static uint16_t bf(double v) { return mx_f32_to_bf16((float)v); }

/* Row kinds: 0 random at a random scale; then the adversarial ones, cycled one per 128-value
 * block; K_ORDER (only in its own cases) last. */
enum {
  K_RANDOM, K_ZERO, K_NEGZERO, K_TINY, K_UNDERFLOW, K_POW2, K_SPARSE, K_TIE, K_NEAR_MAX, K_RANGE, K_OVERFLOW, K_NAN,
  K_INF, K_NEGINF, K_SUBNORMAL, K_ORDER, K_NKINDS
};
static const char *kind_name[K_NKINDS] = {"random", "zero", "-0", "tiny", "underflow", "pow2", "sparse", "tie",
                                          "near-max", "range", "overflow", "NaN", "+inf", "-inf", "subnormal", "order"};

/* The 32 lane sums added in the reference's fold (order 0) or another order: 1 left to right,
 * 2 adjacent pairs first (a warp's butterfly with its offsets ascending). */
static float combine(const float *p, int order) {
  float v[32];
  memcpy(v, p, sizeof v);
  if (order == 0)
    for (int h = 16; h > 0; h >>= 1)
      for (int i = 0; i < h; i++) v[i] = v[i] + v[i + h];
  else if (order == 1)
    for (int i = 1; i < 32; i++) v[0] = v[0] + v[i];
  else
    for (int h = 1; h < 32; h <<= 1)
      for (int i = 0; i + h < 32; i += 2 * h) v[i] = v[i] + v[i + h];
  return v[0];
}
/* the fp16 norm the encoder would store with its two block sums added in that order */
static uint16_t norm_in_order(const float *x, int fmt, int order) {
  const kvc_tables *t = kvc_tables_get();
  float p[32], q[32];
  int c[4];
  for (int l = 0; l < 32; l++) p[l] = kvc_lane_sumsq(x + 4 * l);
  const float n = sqrtf(combine(p, order));
  for (int l = 0; l < 32; l++) q[l] = kvc_lane_codes(t, fmt, l, x + 4 * l, n, c);
  return kvc_norm_half(n, combine(q, order));
}

/* One 128-value block of a kind. fmt: which codebook's midpoints K_TIE aims at. */
static void fill_block(int kind, int fmt, uint16_t *x) {
  const double scale = exp((unit() - 0.6) * 20.0); /* ~6e-6 .. 3e3 */
  for (int j = 0; j < 128; j++) x[j] = bf(gauss() * scale);
  switch (kind) {
  case K_ZERO: for (int j = 0; j < 128; j++) x[j] = 0; break;
  case K_NEGZERO: for (int j = 0; j < 128; j++) x[j] = j % 3 ? 0x8000 : 0; break;
  case K_TINY: for (int j = 0; j < 128; j++) x[j] = bf(gauss() * 5e-13); break; /* ‖x‖ ≤ 1e-10 */
  case K_UNDERFLOW: for (int j = 0; j < 128; j++) x[j] = bf(gauss() * 1e-25); break; /* x² below float */
  case K_SUBNORMAL: for (int j = 0; j < 128; j++) x[j] = (uint16_t)(j % 2 ? 0x0001 + j : 0x8000 + j); break;
  case K_POW2:
    for (int j = 0; j < 128; j++) x[j] = bf(ldexp(j % 5 == 0 ? -1.0 : 1.0, (int)(unit() * 16) - 8));
    break;
  case K_SPARSE: /* most pairs zero: their rotated values are exactly ±0 */
    for (int p = 0; p < 64; p++)
      if (unit() < 0.8) x[2 * p] = x[2 * p + 1] = unit() < 0.5 ? 0 : 0x8000;
    break;
  case K_TIE: { /* a rotated value exactly on a random nonzero midpoint of fmt's codebook */
    const kvc_tables *t = kvc_tables_get();
    const float *mid = fmt == 3 ? t->mid3 : t->mid4;
    const int nmid = fmt == 3 ? 7 : 15;
    for (int tries = 0; tries < 1000; tries++) {
      const int k = (int)(unit() * nmid), p = (int)(unit() * 64), odd = fabsf(t->sin[p]) > fabsf(t->cos[p]);
      float v[128], r[128], n;
      if (mid[k] == 0.0f || !kvc_tie_block(p, odd, mid[k], v)) continue;
      kvc_rotated_unit(v, r, &n);
      if (r[2 * p + odd] != mid[k]) continue;
      for (int j = 0; j < 128; j++) x[j] = mx_f32_to_bf16(v[j]);
      return;
    }
    fprintf(stderr, "no tie block found\n");
    abort();
  }
  case K_NEAR_MAX: { /* ‖x‖ = 30000: the corrected norm close to fp16's largest */
    double n = 0;
    for (int j = 0; j < 128; j++) n += (double)mx_bf16_to_f32(x[j]) * mx_bf16_to_f32(x[j]);
    for (int j = 0; j < 128; j++) x[j] = bf(mx_bf16_to_f32(x[j]) * 30000.0 / sqrt(n));
    break;
  }
  case K_RANGE: for (int j = 0; j < 128; j++) x[j] = bf(gauss() * 2e5); break;
  case K_OVERFLOW: for (int j = 0; j < 128; j++) x[j] = j % 2 ? 0x7f7f : 0xff7f; break; /* ±bf16 max */
  case K_ORDER: /* the stored norm changes when the block sums are added in either other order */
    for (long tries = 0;; tries++) {
      float v[128];
      const double sc = exp((unit() - 0.5) * 8.0);
      for (int j = 0; j < 128; j++) x[j] = bf(gauss() * sc), v[j] = mx_bf16_to_f32(x[j]);
      const uint16_t h = norm_in_order(v, fmt, 0);
      if (h != norm_in_order(v, fmt, 1) && h != norm_in_order(v, fmt, 2)) {
        uint8_t b[KVC_P4_BYTES];
        if (kvc_encode_block((kvc_format)fmt, v, b, NULL) || (b[0] | b[1] << 8) != h) {
          fprintf(stderr, "the fold here is not the reference's\n");
          abort();
        }
        break;
      }
      if (tries > 50000000) abort();
    }
    break;
  case K_NAN: x[(int)(unit() * 128)] = unit() < 0.5 ? 0x7fc0 : 0xffc1; break;
  case K_INF: x[(int)(unit() * 128)] = 0x7f80; break;
  case K_NEGINF: x[(int)(unit() * 128)] = 0xff80; break;
  default: break;
  }
}

struct Case {
  int fmt, head_dim, ntok, nhead;
  int kinds; /* 0: random blocks; -1: one block in two gets the next adversarial kind; else every block this kind */
};

static int run_case(const Case &c) {
  const int hd = c.head_dim, nblk = hd / 128, bb = c.fmt == 3 ? KVC_P3_BYTES : KVC_P4_BYTES;
  /* input [tok][head][hd] with a gap per token; output head-major with gaps per row and head */
  const int64_t k_head = hd, k_tok = (int64_t)c.nhead * hd + 40;
  const int64_t o_tok = (int64_t)nblk * bb + 6, o_head = (int64_t)c.ntok * o_tok + 10;
  std::vector<uint16_t> k((size_t)(k_tok * c.ntok), 0x7fc0); /* the gaps hold NaN: never read */
  std::vector<int> kinds;
  static int next_kind = 1;
  for (int t = 0; t < c.ntok; t++)
    for (int h = 0; h < c.nhead; h++)
      for (int b = 0; b < nblk; b++) {
        int kind = K_RANDOM;
        if (c.kinds > 0) {
          kind = c.kinds;
        } else if (c.kinds < 0 && unit() < 0.5) {
          kind = next_kind;
          next_kind = next_kind % (K_ORDER - 1) + 1;
        }
        kinds.push_back(kind);
        fill_block(kind, c.fmt, &k[(size_t)(t * k_tok + h * k_head + b * 128)]);
      }
  const size_t out_bytes = (size_t)(o_head * c.nhead);
  std::vector<uint8_t> got(out_bytes), want(out_bytes);
  for (size_t i = 0; i < out_bytes; i++) got[i] = want[i] = (uint8_t)(0xa5 ^ (i * 7));
  /* the reference, block by block; the flags the kernel must raise */
  unsigned want_flags = 0;
  int counts[K_NKINDS] = {0}, rejected = 0;
  for (int t = 0, i = 0; t < c.ntok; t++)
    for (int h = 0; h < c.nhead; h++)
      for (int b = 0; b < nblk; b++, i++) {
        const uint16_t *x = &k[(size_t)(t * k_tok + h * k_head + b * 128)];
        mlxrt_error err;
        counts[kinds[(size_t)i]]++;
        if (kvc_encode_row_bf16((kvc_format)c.fmt, x, 128, &want[(size_t)(t * o_tok + h * o_head + b * bb)], &err)) {
          bool nonfinite = false;
          for (int j = 0; j < 128; j++) nonfinite |= (x[j] & 0x7f80) == 0x7f80;
          want_flags |= nonfinite ? KVC_FLAG_NONFINITE : KVC_FLAG_RANGE;
          rejected++;
        }
      }
  unsigned flags = 0;
  const int rc = ck_kv_encode(c.fmt, k.data(), c.ntok, c.nhead, hd, k_tok, k_head, got.data(), o_tok, o_head, &flags,
                              NULL);
  const char *why = NULL;
  size_t at = 0;
  if (rc) why = "launch";
  else if (flags != want_flags) why = "flags";
  else
    for (at = 0; at < out_bytes && !why; at++)
      if (got[at] != want[at]) why = "bytes differ";
  printf("%s planar%d head_dim %3d %2d tokens × %d heads: %zu blocks, %d rejected, flags %u", why ? "FAIL" : "ok  ",
         c.fmt, hd, c.ntok, c.nhead, kinds.size(), rejected, flags);
  if (c.kinds) {
    printf(" (");
    for (int kd = 1, first = 1; kd < K_NKINDS; kd++)
      if (counts[kd]) printf("%s%s %d", first ? "" : ", ", kind_name[kd], counts[kd]), first = 0;
    printf(")");
  }
  if (why && at) {
    at--;
    const int64_t h = (int64_t)at / o_head, t = ((int64_t)at % o_head) / o_tok, off = ((int64_t)at % o_head) % o_tok;
    printf(": %s at byte %zu (head %lld token %lld offset %lld: %02x, reference %02x)", why, at, (long long)h,
           (long long)t, (long long)off, got[at], want[at]);
  } else if (why) {
    printf(": %s (rc %d, flags %u, expected %u)", why, rc, flags, want_flags);
  }
  printf("\n");
  return why != NULL;
}

/* Before the upload the table is empty: nothing written, the flag raised. Bad shapes refused. */
static int no_tables_and_shapes() {
  std::vector<uint16_t> k(512, 0x3f80);
  std::vector<uint8_t> out(200, 0x11);
  unsigned flags = 0;
  int bad = 0;
  if (ck_kv_encode(3, k.data(), 1, 1, 512, 512, 512, out.data(), 200, 200, &flags, NULL) || flags != KVC_FLAG_NO_TABLES)
    bad++, printf("FAIL a launch before the upload: flags %u\n", flags);
  for (uint8_t v : out) bad += v != 0x11;
  if (ck_kv_encode(5, k.data(), 1, 1, 512, 512, 512, out.data(), 200, 200, &flags, NULL) == 0) bad++;
  if (ck_kv_encode(3, k.data(), 1, 1, 200, 512, 512, out.data(), 200, 200, &flags, NULL) == 0) bad++;
  if (ck_kv_encode(3, k.data(), 1, 1, 512, 512, 512, out.data(), 200, 200, NULL, NULL) == 0) bad++;
  if (ck_kv_encode(3, k.data(), 0, 1, 512, 512, 512, out.data(), 200, 200, &flags, NULL) != 0) bad++;
  printf("%s no tables, bad shapes\n", bad ? "FAIL" : "ok  ");
  return bad != 0;
}

int main(int argc, char **argv) {
  if (argc > 1) g_rng = strtoull(argv[1], NULL, 0) | 1;
  int fails = no_tables_and_shapes();
  if (ck_kv_codec_upload(NULL)) {
    printf("FAIL upload\n");
    return 1;
  }
  const Case cases[] = {
      {3, 128, 3, 2, 0},        {4, 128, 3, 2, 0},        {3, 256, 4, 4, 0},        {4, 512, 2, 4, 0},
      {3, 512, 5, 3, -1},       {4, 512, 5, 3, -1},       {3, 256, 9, 4, -1},       {4, 256, 9, 4, -1},
      {3, 128, 17, 3, -1},      {4, 128, 17, 3, -1},      {3, 512, 12, 4, 0},       {4, 512, 12, 4, 0},
      {3, 128, 3, 1, K_ORDER},  {4, 128, 3, 1, K_ORDER},  {3, 256, 2, 2, K_INF},    {4, 256, 2, 2, K_NEGINF},
      {3, 128, 2, 2, K_NAN},    {4, 256, 2, 2, K_RANGE},  {3, 256, 2, 2, K_OVERFLOW}, {4, 128, 3, 2, K_TIE},
  };
  fails += emu_run_cases(cases, run_case);
  return fails ? 1 : 0;
}
