/* The attention over a compressed K cache (kv_layout.h kfmt: planar3 / planar4 blocks of
 * src/accel/kv_codec.h) on host threads (tests/gpu/emu), against the C reference of the codec
 * (kvc_encode_row_bf16, kvc_rotate_q, kvc_dot_rotated: the library's):
 *   - the q/k/v post step (dk_qkv_post) writing a compressed cache: each head's blocks are the
 *     bytes the C reference encodes from the bf16 K the same step writes into a plain cache, V is
 *     the plain step's, and a K head holding NaN leaves its blocks untouched and raises the
 *     non-finite flag;
 *   - the decode attention (dk_attention, the split passes, and at deep contexts p·v by bulk copies):
 *     every score within one bf16 step of
 *     bf16(Σ_b kvc_dot_rotated) of the rotated bf16(q·bf16(scale)), and the output within 1 % of
 *     its largest value of a direct attention over those scores (exactly, on structure cases:
 *     q = 0 and one-hot V); where the deep contexts take one pass (dk_attention_onepass), the
 *     output against a direct attention over the tile kernel's scores (below) with the one
 *     pass's rounding of p;
 *   - the prompt pass's attention (pf_attention_planar): every query row of a chunk the same
 *     way, against a direct attention with its online softmax's rounding (p unrounded, the sum
 *     divided at the end).
 * A CTest (label emulator). Build and run from the repository root:
 *   g++ -std=c++17 -O2 -pthread -ffp-contract=off -DCK_EMULATION -DEMU_LAUNCH -DEMU_FIBERS -Itests/gpu/emu -Isrc \
 *       -Isrc/accel/cuda -Iinclude tests/gpu/attention_planar_emulate.cpp build/libmlxrt.a -o /tmp/ape \
 *       -lcjson -lm && /tmp/ape
 */
#include "../../src/accel/cuda/attention.cu"
#include "../../src/accel/cuda/prefill_attn.cu"
#include "../../src/accel/cuda/prefill_attn_planar.cu"
#include "../../src/accel/cuda/prefill_attn_wg.cu"
#include "../../src/accel/cuda/qkv_post.cu"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "accel/kv_codec.h"
#include "base/bf16.h"
#include "emu_rng.h"
#include "planar_ref.h"

#include "emu_block_runner.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float unit() { return (float)((double)(emu_xorshift64(&g_rng) >> 11) * 0x1p-53); }
static float sym() { return unit() * 2 - 1; }
static uint16_t tob(float x) { return ck_f32_to_bf16(x); }
static float fromb(uint16_t h) { return ck_bf16_to_f32(h); }
static float bf(float x) { return fromb(tob(x)); }

struct Cache {
  int fmt, nkv, hd;
  int64_t kps, cap;
  std::vector<uint8_t> k; /* cap positions of kps bytes */
  std::vector<uint16_t> v; /* cap positions of nkv·hd */
};

/* a cache of cap positions: K from random bf16 rows (each head encoded by the C reference), V random
 * or one-hot (key j → dim j mod hd) */
static Cache make_cache(int fmt, int nkv, int hd, int64_t cap, bool onehot) {
  Cache c{fmt, nkv, hd, dk_kv_planar(nkv, hd, fmt, NULL, NULL).kps, cap, {}, {}};
  c.k.assign((size_t)(cap * c.kps), 0);
  c.v.assign((size_t)(cap * nkv * hd), 0);
  const size_t row = kvc_row_bytes((kvc_format)fmt, hd);
  std::vector<uint16_t> kr((size_t)hd);
  for (int64_t j = 0; j < cap; j++)
    for (int g = 0; g < nkv; g++) {
      const float scale = 0.5f + 2 * unit(); /* keys of different lengths */
      for (int d = 0; d < hd; d++) kr[(size_t)d] = tob(sym() * scale);
      mlxrt_error err;
      if (kvc_encode_row_bf16((kvc_format)fmt, kr.data(), hd, &c.k[(size_t)(j * c.kps) + (size_t)g * row], &err)) {
        fprintf(stderr, "encode: %s\n", err.msg);
        exit(2);
      }
      for (int d = 0; d < hd; d++)
        c.v[(size_t)((j * nkv + g) * hd + d)] = tob(onehot ? (d == (int)(j % hd) ? 1.0f : 0.0f) : sym());
    }
  return c;
}

/* the reference's score of key j for query head h of q (bf16(q·bf16(scale)) rotated, then
 * Σ over the head's blocks of kvc_dot_rotated), rounded to bf16 */
static float ref_score(const Cache &c, const float *qh, float scale, int g, int64_t j) {
  std::vector<float> qs((size_t)c.hd), qr((size_t)c.hd);
  for (int d = 0; d < c.hd; d++) qs[(size_t)d] = scale == 1.0f ? qh[d] : bf(qh[d] * bf(scale));
  mlxrt_error err;
  kvc_rotate_q(qs.data(), c.hd, qr.data(), &err);
  const size_t row = kvc_row_bytes((kvc_format)c.fmt, c.hd);
  return bf(kvc_dot_rotated_row((kvc_format)c.fmt, qr.data(), c.hd, &c.k[(size_t)(j * c.kps) + (size_t)g * row]));
}

/* The warpgroup prompt kernel's keys: every cached key's values in the rotated domain as it
 * decodes them ([cap][nkv][hd], planar_ref.h). */
static std::vector<float> rotated_keys(const Cache &c) {
  std::vector<float> out((size_t)(c.cap * c.nkv * c.hd));
  const size_t row = kvc_row_bytes((kvc_format)c.fmt, c.hd), bb = kvc_block_bytes((kvc_format)c.fmt);
  for (int64_t j = 0; j < c.cap; j++)
    for (int g = 0; g < c.nkv; g++)
      for (int d = 0; d < c.hd; d++)
        out[(size_t)((j * c.nkv + g) * c.hd + d)] = planar_tile_value(
            c.fmt, &c.k[(size_t)(j * c.kps) + (size_t)g * row + (size_t)(d / KVC_BLOCK) * bb], d % KVC_BLOCK);
  return out;
}

/* The warpgroup prompt kernel's score of key j: the rotated query rounded to fp16 times the key's
 * values (rotated_keys), the sum rounded to bf16. */
static float ref_score_tiles(const Cache &c, const std::vector<float> &kr, const float *qh, float scale, int g,
                             int64_t j) {
  std::vector<float> qs((size_t)c.hd), qr((size_t)c.hd);
  for (int d = 0; d < c.hd; d++) qs[(size_t)d] = scale == 1.0f ? qh[d] : bf(qh[d] * bf(scale));
  mlxrt_error err;
  kvc_rotate_q(qs.data(), c.hd, qr.data(), &err);
  double sum = 0;
  for (int d = 0; d < c.hd; d++) sum += (double)planar_h16(qr[(size_t)d]) * kr[(size_t)((j * c.nkv + g) * c.hd + d)];
  return bf((float)sum);
}

static bool close_bf(float a, float b) { /* within one bf16 step of the larger */
  const float m = fmaxf(fabsf(a), fabsf(b));
  return fabsf(a - b) <= (m > 0 ? ldexpf(1.0f, ilogbf(m) - 7) : 0.0f) * 1.0001f;
}

/* decode: one query row per head at pos over the cache; deep: the deep contexts' form (on GQA 8
 * at head dims 256 / 512 with up to 4 KV heads, p·v with V streamed by bulk copies) */
static int decode_case(int fmt, int rep, int nkv, int hd, int pos, int splits, bool structure, int deep = 0) {
  const int nq = rep * nkv;
  const int64_t cap = pos + 1;
  Cache c = make_cache(fmt, nkv, hd, cap, structure);
  std::vector<float> q((size_t)nq * hd);
  for (auto &x : q) x = structure ? 0.0f : bf(sym() * 2);
  const float scale = structure ? 1.0f : 1.0f / sqrtf((float)hd);
  unsigned flags = 0;
  const dk_kv_layout L = dk_kv_planar(nkv, hd, fmt, kvc_tables_get(), &flags);
  std::vector<float> scores((size_t)nq * cap, NAN), smax((size_t)nq * splits), ssum((size_t)nq * splits),
      pacc((size_t)nq * splits * hd);
  std::vector<unsigned> count((size_t)nkv, 0u);
  std::vector<uint16_t> att((size_t)nq * hd, 0xffff);
  int p = pos;
  int rc = dk_attention(q.data(), (const uint16_t *)c.k.data(), c.v.data(), nq, nkv, hd, L, scale, &p, 0, splits, 1, deep,
                        cap, scores.data(), smax.data(), ssum.data(), pacc.data(), count.data(), att.data(), NULL, 0,
                        NULL);
  int bad = rc != 0;
  if (rc) printf("FAIL launch rc %d\n", rc);
  /* the deep contexts' one pass (dk_attention_onepass): the tile kernel's scores, p = bf16(exp(s − m))
   * with the split's running max, the output divided by the total at the end; its scores are not
   * stored */
  const bool onepass = deep && dk_attention_onepass(nq, nkv, hd, L);
  const std::vector<float> kr = onepass ? rotated_keys(c) : std::vector<float>();
  double worst = 0;
  for (int h = 0; h < nq && !bad; h++) {
    std::vector<float> s((size_t)cap);
    float m = -INFINITY;
    for (int64_t j = 0; j < cap; j++) {
      s[(size_t)j] = onepass ? ref_score_tiles(c, kr, &q[(size_t)h * hd], scale, h / rep, j)
                             : ref_score(c, &q[(size_t)h * hd], scale, h / rep, j);
      m = fmaxf(m, s[(size_t)j]);
      const float got = scores[(size_t)(h * cap + j)];
      if (!onepass && !close_bf(got, s[(size_t)j])) {
        printf("FAIL score head %d key %lld: %g against %g\n", h, (long long)j, got, s[(size_t)j]);
        bad = 1;
        break;
      }
    }
    double total = 0;
    for (float x : s) total += exp((double)x - m);
    std::vector<double> o((size_t)hd, 0.0);
    for (int64_t j = 0; j < cap; j++) {
      const double e = exp((double)s[(size_t)j] - m), pj = onepass ? bf((float)e) : bf((float)(e / total));
      for (int d = 0; d < hd; d++) o[(size_t)d] += pj * fromb(c.v[(size_t)((j * nkv + h / rep) * hd + d)]);
    }
    if (onepass)
      for (double &x : o) x /= total;
    float mx = 0;
    for (double x : o) mx = fmaxf(mx, fabsf(bf((float)x)));
    for (int d = 0; d < hd; d++) {
      const float want = bf((float)o[(size_t)d]), got = fromb(att[(size_t)h * hd + d]);
      const double e = fabs((double)got - want);
      if (structure ? got != want : e > 0.01 * mx) {
        printf("FAIL output head %d dim %d: %g against %g\n", h, d, got, want);
        bad = 1;
        break;
      }
      if (mx > 0) worst = fmax(worst, e / mx);
    }
  }
  for (unsigned x : count) bad |= x != 0;
  if (flags) bad = 1, printf("FAIL flags %u\n", flags);
  printf("%s decode  planar%d rep %2d nkv %d hd %3d pos %4d splits %2d %-9s%s worst %.2e\n", bad ? "FAIL" : "ok  ",
         fmt, rep, nkv, hd, pos, splits, structure ? "structure" : "values", onepass ? " one pass" : deep ? " deep" : "",
         worst);
  return bad;
}

/* the prompt pass: T queries at p0 … p0 + T − 1 over the cache of p0 + T positions. pf_attention
 * picks the warpgroup kernel for head dims 128, 256 and 512 (keys decoded to bf16 tiles, p =
 * bf16(exp(s − M)·(1/Σ)) with the final max and sum: ref_score_tiles), else the block-per-query
 * kernel (scores in the rotated domain in float32, p unrounded, the sum divided at the end). */
static int prefill_case(int fmt, int rep, int nkv, int hd, int p0, int T, bool structure) {
  const bool tiles = pf_attention_wg_supported(hd);
  const int nq = rep * nkv;
  const int64_t cap = p0 + T;
  Cache c = make_cache(fmt, nkv, hd, cap, structure);
  const std::vector<float> kr = tiles ? rotated_keys(c) : std::vector<float>();
  std::vector<float> q((size_t)T * nq * hd);
  for (auto &x : q) x = structure ? 0.0f : bf(sym() * 2);
  const float scale = structure ? 1.0f : 1.0f / sqrtf((float)hd);
  unsigned flags = 0;
  const dk_kv_layout L = dk_kv_planar(nkv, hd, fmt, kvc_tables_get(), &flags);
  std::vector<uint16_t> att((size_t)T * nq * hd, 0xffff);
  const uint16_t *kc = (const uint16_t *)c.k.data();
  int rc = pf_attention(q.data(), kc, c.v.data(), (const uint16_t *)(c.k.data() + p0 * c.kps),
                        c.v.data() + (int64_t)p0 * nkv * hd, T, p0, nq, nkv, hd, scale, 0, L, att.data(), NULL);
  int bad = rc != 0;
  if (rc) printf("FAIL launch rc %d\n", rc);
  /* the chunk's rows must be the cache's: any other kch is refused */
  if (!rc && pf_attention(q.data(), kc, c.v.data(), kc, c.v.data(), T, p0 + 1, nq, nkv, hd, scale, 0, L, att.data(),
                          NULL) == 0)
    bad = 1, printf("FAIL a chunk's K outside the cache was taken\n");
  double worst = 0;
  for (int t = 0; t < T && !bad; t++)
    for (int h = 0; h < nq && !bad; h++) {
      const float *qh = &q[((size_t)t * nq + h) * hd];
      const int64_t n = p0 + t + 1;
      std::vector<float> s((size_t)n);
      float m = -INFINITY;
      for (int64_t j = 0; j < n; j++)
        m = fmaxf(m, s[(size_t)j] = tiles ? ref_score_tiles(c, kr, qh, scale, h / rep, j) : ref_score(c, qh, scale, h / rep, j));
      double total = 0;
      std::vector<double> o((size_t)hd, 0.0);
      for (int64_t j = 0; j < n; j++) total += exp((double)s[(size_t)j] - m);
      for (int64_t j = 0; j < n; j++) {
        double e = exp((double)s[(size_t)j] - m);
        if (tiles) e = bf((float)e * (float)(1.0 / total)) * total; /* p rounded; total divided back out below */
        for (int d = 0; d < hd; d++) o[(size_t)d] += e * fromb(c.v[(size_t)((j * nkv + h / rep) * hd + d)]);
      }
      float mx = 0;
      for (double x : o) mx = fmaxf(mx, fabsf((float)(x / total)));
      for (int d = 0; d < hd; d++) {
        const float want = structure ? bf((float)o[(size_t)d] / (float)total) : bf((float)(o[(size_t)d] / total));
        const float got = fromb(att[((size_t)t * nq + h) * hd + d]);
        const double e = fabs((double)got - want);
        if (structure ? got != want : e > 0.01 * mx) {
          printf("FAIL output token %d head %d dim %d: %g against %g\n", t, h, d, got, want);
          bad = 1;
          break;
        }
        if (mx > 0) worst = fmax(worst, e / mx);
      }
    }
  if (flags) bad = 1, printf("FAIL flags %u\n", flags);
  printf("%s prefill planar%d rep %2d nkv %d hd %3d p0 %4d T %3d %-9s %s worst %.2e\n", bad ? "FAIL" : "ok  ", fmt,
         rep, nkv, hd, p0, T, structure ? "structure" : "values", tiles ? "tiles" : "rows ", worst);
  return bad;
}

/* the q/k/v post step into a compressed cache at position pos, against the same step into a plain
 * cache; nan_head ≥ 0: that K head's product holds a NaN */
static int post_case(int fmt, int rep, int nkv, int hd, int pos, int nan_head) {
  const int nq = rep * nkv;
  const int64_t kvd = (int64_t)nkv * hd, cap = pos + 2;
  std::vector<float> y((size_t)(nq * hd + 2 * kvd)), qn((size_t)hd), kn((size_t)hd), fr((size_t)hd / 2);
  for (auto &x : y) x = sym() * 3;
  for (auto &x : qn) x = 0.5f + unit();
  for (auto &x : kn) x = 0.5f + unit();
  for (int i = 0; i < hd / 2; i++) fr[(size_t)i] = powf(10000.0f, -2.0f * i / hd);
  if (nan_head >= 0) y[(size_t)(nq * hd + (int64_t)nan_head * hd + 5)] = NAN;
  const dk_kv_layout P = dk_kv_plain(nkv, hd);
  unsigned flags = 0;
  const dk_kv_layout C = dk_kv_planar(nkv, hd, fmt, kvc_tables_get(), &flags);
  std::vector<uint16_t> kp((size_t)(cap * kvd), 0), vp((size_t)(cap * kvd), 0), vc((size_t)(cap * kvd), 0);
  std::vector<uint8_t> kcb((size_t)(cap * C.kps), 0x5a);
  std::vector<float> q1((size_t)nq * hd), q2((size_t)nq * hd);
  int p = pos;
  int rc = dk_qkv_post(y.data(), 1, 0, nq, nkv, hd, 0, qn.data(), kn.data(), fr.data(), 0, 1, 1e-6f, &p, 0, P,
                       q1.data(), kp.data(), vp.data(), NULL) ||
           dk_qkv_post(y.data(), 1, 0, nq, nkv, hd, 0, qn.data(), kn.data(), fr.data(), 0, 1, 1e-6f, &p, 0, C,
                       q2.data(), (uint16_t *)kcb.data(), vc.data(), NULL);
  int bad = rc != 0;
  if (rc) printf("FAIL launch\n");
  bad |= q1 != q2 || vp != vc;
  const size_t row = kvc_row_bytes((kvc_format)fmt, hd);
  for (int64_t j = 0; j < cap && !bad; j++)
    for (int g = 0; g < nkv; g++) {
      std::vector<uint8_t> want(row, 0x5a);
      mlxrt_error err;
      if (j == pos && kvc_encode_row_bf16((kvc_format)fmt, &kp[(size_t)(j * kvd + (int64_t)g * hd)], hd, want.data(),
                                          &err) != (g == nan_head ? -1 : 0))
        bad = 1;
      if (memcmp(want.data(), &kcb[(size_t)(j * C.kps) + (size_t)g * row], row)) {
        printf("FAIL K blocks of position %lld head %d\n", (long long)j, g);
        bad = 1;
      }
    }
  if (flags != (nan_head >= 0 ? KVC_FLAG_NONFINITE : 0u)) bad = 1, printf("FAIL flags %u\n", flags);
  printf("%s post    planar%d rep %2d nkv %d hd %3d pos %4d%s\n", bad ? "FAIL" : "ok  ", fmt, rep, nkv, hd, pos,
         nan_head >= 0 ? " (a NaN head: refused)" : "");
  return bad;
}

int main(int argc, char **argv) {
  const bool quick = argc > 1 && !strcmp(argv[1], "--quick");
  int fails = 0, n = 0;
  /* the 31B's full layer (GQA 8, 4 KV heads of 512) scaled down in heads, GQA 16 at 256, GQA 2 at
   * 128 (the 270M's shape class), splits from one to more than keys */
  for (int fmt = 3; fmt <= 4; fmt++) {
    fails += post_case(fmt, 8, 2, 512, 37, -1), n++;
    fails += post_case(fmt, 2, 2, 256, 3, 1), n++;
    fails += decode_case(fmt, 8, 1, 512, 70, 5, true), n++;
    fails += decode_case(fmt, 8, 2, 512, 130, 7, false), n++;
    if (!quick) fails += decode_case(fmt, 8, 4, 512, 40, 3, true, 1), n++;
    fails += decode_case(fmt, 8, 2, 256, 90, 6, false, 1), n++;
    /* the one pass over several stages a split, its ring of half stages wrapping (six halves at
     * two KV heads; at the 31B's four of head dim 512 five over planar3, four over planar4), the
     * last stage's second half empty */
    fails += decode_case(fmt, 8, 2, 512, 40, 1, false, 1), n++;
    fails += decode_case(fmt, 8, 4, 512, 333, 2, false, 1), n++;
    if (!quick) {
      fails += decode_case(fmt, 8, 2, 512, 200, 2, false, 1), n++;
      fails += decode_case(fmt, 8, 4, 256, 60, 2, false, 1), n++;
    }
    fails += decode_case(fmt, 16, 1, 256, 40, 3, false), n++;
    fails += decode_case(fmt, 2, 3, 128, 20, 40, false), n++;
    if (!quick) fails += decode_case(fmt, 1, 2, 256, 300, 16, false), n++;
    fails += prefill_case(fmt, 8, 1, 512, 40, 3, true), n++;
    fails += prefill_case(fmt, 8, 2, 512, 33, 4, false), n++;
    fails += prefill_case(fmt, 16, 1, 256, 0, 5, false), n++;
    fails += (quick ? prefill_case(fmt, 2, 1, 384, 9, 3, false) : prefill_case(fmt, 2, 2, 384, 70, 6, false)), n++;
    fails += prefill_case(fmt, 4, 1, 128, 0, 1, false), n++;
    /* several key tiles and query blocks: the next tile decoded while one is scored */
    fails += prefill_case(fmt, 2, 1, 128, 150, 70, false), n++;
    fails += prefill_case(fmt, 8, 1, 512, 100, 9, false), n++;
  }
  printf("%d passed, %d failed\n", n - fails, fails);
  return fails ? 1 : 0;
}
