/* mlxrt-pfattn-bench: the prompt pass's causal attention (pf_attention) alone, on the Gemma 4
 * 31B layer shapes: a chunk of T queries after P0 cached positions. Each case gets fresh random
 * q, K and V; the output is checked against a float64 attention on the host (sampled query rows,
 * within 1 % of the row's range, as prefill_attn_emulate does), then timed with CUDA events
 * (median of 5 launches). The wgmma primitives are checked alone first. Prints µs and the useful
 * tensor work (4·hd flops per query head and visible key) per second.
 *   mlxrt-pfattn-bench                              the default cases
 *   mlxrt-pfattn-bench --case full|sliding P0 T     one case (for ncu)
 *   --kv-k planar3|planar4: the full layers' K compressed (encoded on the device, the host's
 *   reference keys decoded from the same blocks by the C codec), timed through pf_attention's
 *   pick (kind 0) and the block-per-query kernel (kind 8, pf_attention_planar); sliding cases
 *   stay bf16
 * Exit status 1 when a check fails, 2 on a CUDA or usage error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel_ring.h"
#include "accel/kv_codec.h"
#include "base/bf16.h"
#include "base/error.h"
#include "gpu_test_util.h"
#include "kv_codec_kernels.h"
#include "prefill_kernels.h"
#include "runtime.h"

#define TIMED 5
#define SAMPLES 6
#define MAX_KINDS 10

typedef struct shape {
  const char *name;
  int nq, nkv, hd, window;
} shape;

static const shape SHAPES[] = {{"full", 32, 4, 512, 0}, {"sliding", 32, 16, 256, 1024}};

static void die(const char *what, const mlxrt_error *err) {
  fprintf(stderr, "mlxrt-pfattn-bench: %s: %s\n", what, err->msg);
  exit(2);
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static int64_t first_key(const shape *s, int64_t p) { return s->window > 0 && p - s->window + 1 > 0 ? p - s->window + 1 : 0; }

/* K or V row of key j for KV head g: the chunk's rows from p0 on, else the cache (a ring when
 * the layer slides) — pf_attention's layout */
static const uint16_t *kv_row(const shape *s, const uint16_t *cache, const uint16_t *chunk, int64_t j, int64_t p0, int g) {
  const int64_t kvd = (int64_t)s->nkv * s->hd;
  if (j >= p0) return chunk + (j - p0) * kvd + (int64_t)g * s->hd;
  return cache + (s->window > 0 ? j % (s->window + ACCEL_RING_SLACK) : j) * kvd + (int64_t)g * s->hd;
}

/* float64 attention of query t, head h, with the kernels' rounding points for q and the scores
 * (p is not rounded: a tolerance reference, not a bit reference) */
static void host_row(const shape *s, const float *q, const uint16_t *kc, const uint16_t *vc, const uint16_t *kch,
                     const uint16_t *vch, int64_t p0, int t, int h, float scale, double *out) {
  const int g = h / (s->nq / s->nkv), hd = s->hd;
  const int64_t p = p0 + t, lo = first_key(s, p), n = p - lo + 1;
  double *sc = malloc(sizeof(double) * (size_t)n), *qs = malloc(sizeof(double) * (size_t)hd);
  if (!sc || !qs) {
    fprintf(stderr, "mlxrt-pfattn-bench: out of host memory\n");
    exit(2);
  }
  const float bs = mx_round_bf16(scale);
  for (int i = 0; i < hd; i++) {
    float v = q[((int64_t)t * s->nq + h) * hd + i];
    qs[i] = scale == 1.0f ? v : mx_round_bf16(v * bs);
  }
  double mx = -INFINITY, tot = 0.0;
  for (int64_t j = 0; j < n; j++) {
    const uint16_t *k = kv_row(s, kc, kch, lo + j, p0, g);
    double d = 0.0;
    for (int i = 0; i < hd; i++) d += qs[i] * mx_bf16_to_f32(k[i]);
    sc[j] = mx_round_bf16((float)d);
    if (sc[j] > mx) mx = sc[j];
  }
  for (int64_t j = 0; j < n; j++) tot += sc[j] = exp(sc[j] - mx);
  for (int i = 0; i < hd; i++) out[i] = 0.0;
  for (int64_t j = 0; j < n; j++) {
    const uint16_t *v = kv_row(s, vc, vch, lo + j, p0, g);
    for (int i = 0; i < hd; i++) out[i] += sc[j] / tot * mx_bf16_to_f32(v[i]);
  }
  free(sc);
  free(qs);
}

/* kinds 1 (plain), 2 (the old tensor-core form) and 9 (wgmma: its score sums grouped otherwise)
 * are checked against the host only */
static int same_bits_group(int kind) { return kind != 1 && kind != 2 && kind != 8 && kind != 9; }

/* kind 9's wgmma primitives alone against host products (pf_wg_selftest): 0 when both agree */
static int wg_selftest(uint64_t *rng) {
  mlxrt_error err = {{0}};
  uint16_t A[64 * 64], B[64 * 64], V[64 * 256];
  float d1[64 * 64], d2[64 * 256];
  for (int i = 0; i < 64 * 64; i++) A[i] = mx_f32_to_bf16((float)(rng_unit(rng) * 2 - 1));
  for (int i = 0; i < 64 * 64; i++) B[i] = mx_f32_to_bf16((float)(rng_unit(rng) * 2 - 1));
  for (int i = 0; i < 64 * 256; i++) V[i] = mx_f32_to_bf16((float)(rng_unit(rng) * 2 - 1));
  void *st, *dA, *dB, *dV, *dd1, *dd2;
  if (rt_stream_create(&st, &err) || rt_malloc(&dA, sizeof A, &err) || rt_malloc(&dB, sizeof B, &err) ||
      rt_malloc(&dV, sizeof V, &err) || rt_malloc(&dd1, sizeof d1, &err) || rt_malloc(&dd2, sizeof d2, &err) ||
      rt_h2d(dA, A, sizeof A, st, &err) || rt_h2d(dB, B, sizeof B, st, &err) || rt_h2d(dV, V, sizeof V, st, &err) ||
      rt_memset(dd1, 0xff, sizeof d1, st, &err) || rt_memset(dd2, 0xff, sizeof d2, st, &err) ||
      rt_status(pf_wg_selftest(dd1, dd2, dA, dB, dV, st), "pf_wg_selftest", &err) ||
      rt_d2h(d1, dd1, sizeof d1, st, &err) || rt_d2h(d2, dd2, sizeof d2, st, &err) || rt_stream_sync(st, &err))
    die("wgmma self-test", &err);
  double e1 = 0, e2 = 0, m1 = 0, m2 = 0;
  for (int r = 0; r < 64; r++) {
    for (int c = 0; c < 64; c++) {
      double x = 0;
      for (int k = 0; k < 64; k++) x += (double)mx_bf16_to_f32(A[r * 64 + k]) * mx_bf16_to_f32(B[c * 64 + k]);
      e1 = fmax(e1, fabs(d1[r * 64 + c] - x)), m1 = fmax(m1, fabs(x));
      if (d1[r * 64 + c] != d1[r * 64 + c]) e1 = INFINITY;
    }
    for (int c = 0; c < 256; c++) {
      double x = 0;
      for (int k = 0; k < 64; k++) x += (double)mx_bf16_to_f32(A[r * 64 + k]) * mx_bf16_to_f32(V[k * 256 + c]);
      e2 = fmax(e2, fabs(d2[r * 256 + c] - x)), m2 = fmax(m2, fabs(x));
      if (d2[r * 256 + c] != d2[r * 256 + c]) e2 = INFINITY;
    }
  }
  const int bad = !(e1 <= 1e-4 * m1) + !(e2 <= 1e-4 * m2);
  printf("wgmma primitives: scores form (A·Bt, K-major) worst %.2e of %.2f, p.v form (register A, N-major V) worst "
         "%.2e of %.2f: %s\n",
         e1, m1, e2, m2, bad ? "FAIL" : "ok");
  void *dev[] = {dA, dB, dV, dd1, dd2};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) rt_free(dev[i]);
  rt_stream_destroy(st);
  return bad;
}

/* one case, every kind: returns the number of failed checks */
static int run_case(const shape *s, int64_t p0, int T, const int *kinds, int nk, int kfmt, uint64_t *rng) {
  mlxrt_error err = {{0}};
  const int64_t kvd = (int64_t)s->nkv * s->hd, qn = (int64_t)T * s->nq * s->hd;
  if (s->window > 0) kfmt = 0;
  /* compressed K: the chunk's rows live in the cache after the p0 cached ones */
  const int64_t slots = s->window > 0 ? s->window + ACCEL_RING_SLACK : kfmt ? p0 + T : (p0 > 0 ? p0 : 1);
  const float scale = 1.0f / sqrtf((float)s->hd);
  float *q = malloc((size_t)qn * 4);
  uint16_t *kc = malloc((size_t)(slots * kvd) * 2), *vc = malloc((size_t)(slots * kvd) * 2);
  uint16_t *kch = malloc((size_t)(T * kvd) * 2), *vch = malloc((size_t)(T * kvd) * 2);
  uint16_t *att = malloc((size_t)qn * 2), *first = malloc((size_t)qn * 2);
  if (!q || !kc || !vc || !kch || !vch || !att || !first) {
    fprintf(stderr, "mlxrt-pfattn-bench: out of host memory\n");
    exit(2);
  }
  for (int64_t i = 0; i < qn; i++) q[i] = mx_round_bf16((float)(rng_unit(rng) * 4 - 2));
  for (int64_t i = 0; i < slots * kvd; i++) {
    kc[i] = mx_f32_to_bf16((float)(rng_unit(rng) * 2 - 1));
    vc[i] = mx_f32_to_bf16((float)(rng_unit(rng) * 2 - 1));
  }
  for (int64_t i = 0; i < T * kvd; i++) {
    kch[i] = mx_f32_to_bf16((float)(rng_unit(rng) * 2 - 1));
    vch[i] = mx_f32_to_bf16((float)(rng_unit(rng) * 2 - 1));
  }
  void *dq, *dkc, *dvc, *dkch, *dvch, *datt, *st, *e0, *e1;
  if (rt_stream_create(&st, &err) || rt_malloc(&dq, (size_t)qn * 4, &err) ||
      rt_malloc(&dkc, (size_t)(slots * kvd) * 2, &err) || rt_malloc(&dvc, (size_t)(slots * kvd) * 2, &err) ||
      rt_malloc(&dkch, (size_t)(T * kvd) * 2, &err) || rt_malloc(&dvch, (size_t)(T * kvd) * 2, &err) ||
      rt_malloc(&datt, (size_t)qn * 2, &err) || rt_event_create(&e0, &err) || rt_event_create(&e1, &err))
    die("setup", &err);
  if (kfmt) { /* the chunk's rows are the cache's last T */
    memcpy(kch, kc + p0 * kvd, (size_t)(T * kvd) * 2);
    memcpy(vch, vc + p0 * kvd, (size_t)(T * kvd) * 2);
  }
  if (rt_h2d(dq, q, (size_t)qn * 4, st, &err) || rt_h2d(dkc, kc, (size_t)(slots * kvd) * 2, st, &err) ||
      rt_h2d(dvc, vc, (size_t)(slots * kvd) * 2, st, &err) || rt_h2d(dkch, kch, (size_t)(T * kvd) * 2, st, &err) ||
      rt_h2d(dvch, vch, (size_t)(T * kvd) * 2, st, &err) || rt_stream_sync(st, &err))
    die("upload", &err);
  dk_kv_layout kv = dk_kv_plain(s->nkv, s->hd);
  void *dkz = NULL, *dtab = NULL, *dflags = NULL;
  if (kfmt) { /* K encoded on the device; the host reference reads the keys those blocks decode to */
    kv = dk_kv_planar(s->nkv, s->hd, kfmt, NULL, NULL);
    const size_t zb = (size_t)(slots * kv.kps), row = kvc_row_bytes((kvc_format)kfmt, s->hd);
    uint8_t *kz = malloc(zb);
    unsigned flags = 0;
    if (!kz || rt_malloc(&dkz, zb, &err) || rt_malloc(&dtab, sizeof(kvc_tables), &err) ||
        rt_malloc(&dflags, sizeof flags, &err) || rt_h2d(dtab, kvc_tables_get(), sizeof(kvc_tables), st, &err) ||
        rt_memset(dflags, 0, sizeof flags, st, &err) || rt_status(ck_kv_codec_upload(st), "codec upload", &err) ||
        rt_status(ck_kv_encode(kfmt, dkc, (int)slots, s->nkv, s->hd, kvd, s->hd, dkz, kv.kps, (int64_t)row, dflags, st),
                  "ck_kv_encode", &err) ||
        rt_d2h(kz, dkz, zb, st, &err) || rt_d2h(&flags, dflags, sizeof flags, st, &err) || rt_stream_sync(st, &err) ||
        kvc_fail_flags(flags, &err))
      die("compressed K", &err);
    float x[KVC_BLOCK];
    for (int64_t j = 0; j < slots; j++)
      for (int g = 0; g < s->nkv; g++)
        for (int b = 0; b < s->hd / KVC_BLOCK; b++) {
          if (kvc_decode_block((kvc_format)kfmt, kz + j * kv.kps + (int64_t)g * row + (int64_t)b * kvc_block_bytes((kvc_format)kfmt), x, &err))
            die("decode", &err);
          for (int i = 0; i < KVC_BLOCK; i++) kc[j * kvd + (int64_t)g * s->hd + b * KVC_BLOCK + i] = mx_f32_to_bf16(x[i]);
        }
    memcpy(kch, kc + p0 * kvd, (size_t)(T * kvd) * 2);
    free(kz);
    kv = dk_kv_planar(s->nkv, s->hd, kfmt, dtab, dflags);
  }
  /* the launch of kind k: pf_attention's pick, or (8) the block-per-query kernel over compressed K */
  const uint16_t *lkc = kfmt ? (const uint16_t *)dkz : dkc;
  const uint16_t *lkch = kfmt ? (const uint16_t *)((uint8_t *)dkz + p0 * kv.kps) : dkch;
  const uint16_t *lvch = kfmt ? (const uint16_t *)dvc + p0 * kvd : dvch;
#define PF_LAUNCH(kind)                                                                                               \
  ((kind) == 8 ? pf_attention_planar(dq, lkc, dvc, T, p0, s->nq, s->nkv, s->hd, scale, kv, datt, st)                   \
               : pf_attention(dq, lkc, dvc, lkch, lvch, T, p0, s->nq, s->nkv, s->hd, scale, s->window, kv, datt, st))
  /* the useful work: every query head's visible keys, 4·hd flops each (q·k and p·v) */
  double keys = 0;
  for (int t = 0; t < T; t++) keys += (double)(p0 + t - first_key(s, p0 + t) + 1);
  const double flops = keys * 4.0 * s->hd * s->nq;
  /* the sampled rows: first and last query, and some between, over several heads */
  int st_t[SAMPLES], st_h[SAMPLES];
  double *ref = malloc(sizeof(double) * SAMPLES * (size_t)s->hd);
  for (int i = 0; i < SAMPLES; i++) {
    st_t[i] = i == 0 ? 0 : i == SAMPLES - 1 ? T - 1 : (int)(rng_next(rng) % (uint64_t)T);
    st_h[i] = (int)(rng_next(rng) % (uint64_t)s->nq);
    host_row(s, q, kc, vc, kch, vch, p0, st_t[i], st_h[i], scale, ref + (size_t)i * s->hd);
  }
  int fails = 0;
  for (int k = 0; k < nk; k++) {
    if (kinds[k] == 8 && !kfmt) continue; /* (a bf16 case of a --kv-k run) */
    if (rt_memset(datt, 0xff, (size_t)qn * 2, st, &err)) die("memset", &err);
    if (rt_status(PF_LAUNCH(kinds[k]), "pf_attention", &err) ||
        rt_d2h(att, datt, (size_t)qn * 2, st, &err) || rt_stream_sync(st, &err))
      die("pf_attention", &err);
    double worst = 0;
    for (int i = 0; i < SAMPLES; i++) {
      const double *r = ref + (size_t)i * s->hd;
      const uint16_t *o = att + ((int64_t)st_t[i] * s->nq + st_h[i]) * s->hd;
      double mx = 0, e = 0;
      for (int d = 0; d < s->hd; d++) mx = fmax(mx, fabs(r[d]));
      for (int d = 0; d < s->hd; d++) e = fmax(e, fabs(mx_bf16_to_f32(o[d]) - r[d]));
      double rel = mx > 0 ? e / mx : e;
      if (!(rel <= worst)) worst = rel; /* a NaN stays */
    }
    int64_t differ = 0;
    if (k == 0)
      memcpy(first, att, (size_t)qn * 2);
    else
      for (int64_t i = 0; i < qn; i++) differ += att[i] != first[i];
    const int bad_ref = !(worst <= 0.01);
    const int bad_bits = k > 0 && same_bits_group(kinds[0]) && same_bits_group(kinds[k]) && differ != 0;
    float t[TIMED];
    for (int r = 0; r < TIMED; r++)
      if (rt_event_record(e0, st, &err) ||
          rt_status(PF_LAUNCH(kinds[k]), "pf_attention", &err) ||
          rt_event_record(e1, st, &err) || rt_event_ms(e0, e1, &t[r], &err))
        die("timing", &err);
    qsort(t, TIMED, sizeof *t, cmp_float);
    const double us = t[TIMED / 2] * 1000.0;
    printf("| %s%s | %lld | %d | %d | %.1f | %.1f | %.2e | %lld | %s |\n", s->name,
           kfmt == 3 ? " planar3" : kfmt == 4 ? " planar4" : "", (long long)p0, T, kinds[k], us,
           flops / (us * 1e-6) / 1e12, worst, (long long)differ, bad_ref || bad_bits ? "FAIL" : "ok");
    fails += bad_ref + bad_bits;
  }
  fflush(stdout);
  rt_event_destroy(e0);
  rt_event_destroy(e1);
#undef PF_LAUNCH
  void *dev[] = {dq, dkc, dvc, dkch, dvch, datt, dkz, dtab, dflags};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) rt_free(dev[i]);
  rt_stream_destroy(st);
  free(q), free(kc), free(vc), free(kch), free(vch), free(att), free(first), free(ref);
  return fails;
}

int main(int argc, char **argv) {
  int kinds[MAX_KINDS] = {0}, nk = 1; /* one dispatch: the kernel pf_attention picks */
  const shape *one = NULL;
  int64_t one_p0 = 0;
  int one_T = 0, kfmt = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--kv-k") && i + 1 < argc) {
      kfmt = !strcmp(argv[i + 1], "planar3") ? 3 : !strcmp(argv[i + 1], "planar4") ? 4 : !strcmp(argv[i + 1], "bf16") ? 0 : -1;
      if (kfmt < 0) {
        fprintf(stderr, "mlxrt-pfattn-bench: --kv-k %s: expected planar3, planar4 or bf16\n", argv[i + 1]);
        return 2;
      }
      if (kfmt) kinds[nk++] = 8;
      i++;
      continue;
    }
    if (!strcmp(argv[i], "--case") && i + 3 < argc) {
      for (size_t k = 0; k < sizeof SHAPES / sizeof SHAPES[0]; k++)
        if (!strcmp(argv[i + 1], SHAPES[k].name)) one = &SHAPES[k];
      one_p0 = atoll(argv[i + 2]);
      one_T = atoi(argv[i + 3]);
      if (!one || one_p0 < 0 || one_T <= 0) {
        fprintf(stderr, "mlxrt-pfattn-bench: --case %s %s %s: expected full|sliding P0>=0 T>0\n", argv[i + 1],
                argv[i + 2], argv[i + 3]);
        return 2;
      }
      i += 3;
    } else {
      fprintf(stderr, "usage: mlxrt-pfattn-bench [--case full|sliding P0 T] [--kv-k planar3|planar4|bf16]\n");
      return 2;
    }
  }
  mlxrt_error err = {{0}};
  rt_device_info info;
  if (rt_device_open(&info, &err)) die("device", &err);
  uint64_t rng = 0x5eed5eedULL;
  int fails = 0, cases = 0;
  for (int k = 0; k < nk; k++)
    if (pf_attention_wg_supported(512)) {
      fails += wg_selftest(&rng);
      cases++;
      break;
    }
  printf("| shape | P0 | T | kind | us | TFLOP/s (useful) | worst vs host | bits differing from the first kind | check |\n"
         "|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
  if (one) {
    fails += run_case(one, one_p0, one_T, kinds, nk, kfmt, &rng);
    cases += nk;
  } else {
    static const struct {
      int shape;
      int64_t p0;
    } list[] = {{0, 0}, {0, 4096}, {0, 32768}, {1, 0}, {1, 32768}};
    for (size_t c = 0; c < sizeof list / sizeof list[0]; c++) {
      fails += run_case(&SHAPES[list[c].shape], list[c].p0, 512, kinds, nk, list[c].shape == 0 ? kfmt : 0, &rng);
      cases += nk;
    }
  }
  printf("%d passed, %d failed\n", cases - fails, fails);
  return fails ? 1 : 0;
}
