/* mlxrt-attn-bench: the decode attention kernels (dk_attention) alone, on the Gemma 4 31B
 * layer shapes, for a sweep of split shapes (splits per KV head × fewest keys per split) at
 * several context lengths. Each case is checked against a float64 attention on the host over
 * the same bf16 inputs (fresh random q, K, V), then timed: 20 calls captured in one CUDA graph
 * with programmatic dependent launch, as the decoder runs them, median of 5 replays. Prints
 * one line per case (with the live keys' K and V bytes over the time, GB/s) and, per shape and
 * context, the fastest split shape.
 *   mlxrt-attn-bench [--quick] [--deep | --cluster | --cluster-wide] [--kfv | --planar3 | --planar4]
 *        [--ctx N]
 *        exit status 1 when any case disagrees with the host
 *   mlxrt-attn-bench --case sliding|full POS SPLITS[,SPLITS...] MIN_KEYS   that case alone (for ncu)
 * --deep runs the split passes as the decoder does past DEEP_KEYS live keys (V streamed by bulk
 * copies where the shape allows). --cluster runs the one-launch form (dk_attention_cluster)
 * instead, on the shapes whose keys fit one cluster (the sliding ring, and a full layer in a
 * session of 2048 positions), once per position, and also checks the x-prep maxima it writes;
 * --cluster-wide its form with clusters of 16 blocks. --kfv keeps the full layer's cache in the
 * K-from-V layout of the decoder's default (kv_layout.h: the 31B's 64 moved pairs per half; K
 * equal to V at the other dims, as such a layer's keys are up to k_norm, which the queries carry)
 * and skips the sliding shape; with --deep that is the one-pass form. --planar3 / --planar4 keep
 * the full layer's K as the codec's blocks (kv_codec.h, encoded by the C reference; the host
 * attention scores them as the C reference does, in the rotated domain) beside plain V, full
 * shape only. --ctx N: the full
 * shape's positions (default 32768), e.g. the flagship depth with --case full 262143 256 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel_ring.h"
#include "accel/kv_codec.h"
#include "base/bf16.h"
#include "base/error.h"
#include "decode_kernels.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "planar_ref.h"
#include "runtime.h"

#define CALLS 20
#define REPLAYS 5

typedef struct shape {
  const char *name;
  int nq, nkv, hd, window; /* window > 0: a ring of window + ACCEL_RING_SLACK slots */
  int cap;                 /* cache slots */
  int ctx;                 /* score row length (the session's capacity: positions index it) */
} shape;

typedef struct bufs {
  uint16_t *kc, *vc, *att;
  float *q, *scores, *smax, *ssum, *pacc, *amax;
  unsigned *count;
  int *pos;
} bufs;

static void die(const mlxrt_error *err) {
  fprintf(stderr, "mlxrt-attn-bench: %s\n", err->msg);
  exit(2);
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

static int g_cluster, g_wide, g_deep; /* --cluster / --cluster-wide: dk_attention_cluster; --deep */
static int g_kfv;                     /* --kfv: the full shapes' cache in the K-from-V layout */
static int g_kf;                      /* --planar3 / --planar4: the full shapes' K as codec blocks */

/* float64 attention of every query head at position pos over the host copies of K and V (the
 * query already scaled and rounded as the kernel does: bf16(q · bf16(scale)), scores rounded
 * to bf16, p not rounded: the reference for a tolerance check, not for bits). Over a compressed
 * K (pk: codec rows, kps bytes a position) the scores are formed in the rotated domain as the
 * kernel forms them, so that they round to bf16 where its do: the one pass's (kr: each key's
 * tile values, planar_ref.h, times the rotated query rounded to fp16) or the register path's
 * (kvc_dot_rotated_row). Keys decoded and rounded to bf16 instead put the output 1 % of its
 * largest value off at 64 keys already: a score of 2 to 4 moves p by 1.6 % when its bf16
 * rounding flips. */
static void host_attention(const shape *s, const float *q, const uint16_t *kc, const uint8_t *pk, int64_t kps,
                           const float *kr, const uint16_t *vc, int pos, float scale, double *out) {
  const int rep = s->nq / s->nkv, first = s->window > 0 && pos - s->window + 1 > 0 ? pos - s->window + 1 : 0;
  const int n = pos - first + 1;
  double *sc = malloc(sizeof(double) * (size_t)n), *qs = malloc(sizeof(double) * (size_t)s->nq * s->hd);
  float *qf = malloc(sizeof(float) * (size_t)s->hd * 2);
  const float bs = mx_round_bf16(scale);
  const size_t prow = pk ? kvc_row_bytes((kvc_format)g_kf, s->hd) : 0;
  for (int i = 0; i < s->nq * s->hd; i++) qs[i] = mx_round_bf16(q[i] * bs);
  for (int h = 0; h < s->nq; h++) {
    const int g = h / rep;
    double mx = -INFINITY, tot = 0.0;
    if (pk) {
      mlxrt_error err = {0};
      for (int i = 0; i < s->hd; i++) qf[i] = (float)qs[h * s->hd + i];
      if (kvc_rotate_q(qf, s->hd, qf + s->hd, &err)) die(&err);
      if (kr)
        for (int i = 0; i < s->hd; i++) qf[s->hd + i] = planar_h16(qf[s->hd + i]);
    }
    for (int j = 0; j < n; j++) {
      const int64_t slot = s->window > 0 ? (first + j) % (s->window + ACCEL_RING_SLACK) : first + j;
      double d = 0.0;
      if (kr) {
        const float *k = kr + (slot * s->nkv + g) * s->hd;
        for (int i = 0; i < s->hd; i++) d += (double)qf[s->hd + i] * k[i];
      } else if (pk) {
        d = kvc_dot_rotated_row((kvc_format)g_kf, qf + s->hd, s->hd, pk + slot * kps + (int64_t)g * prow);
      } else {
        const uint16_t *k = kc + (slot * s->nkv + g) * s->hd;
        for (int i = 0; i < s->hd; i++) d += qs[h * s->hd + i] * mx_bf16_to_f32(k[i]);
      }
      sc[j] = mx_round_bf16((float)d);
      if (sc[j] > mx) mx = sc[j];
    }
    for (int j = 0; j < n; j++) tot += sc[j] = exp(sc[j] - mx);
    for (int i = 0; i < s->hd; i++) out[h * s->hd + i] = 0.0;
    for (int j = 0; j < n; j++) {
      const int64_t slot = s->window > 0 ? (first + j) % (s->window + ACCEL_RING_SLACK) : first + j;
      const uint16_t *v = vc + (slot * s->nkv + g) * s->hd;
      for (int i = 0; i < s->hd; i++) out[h * s->hd + i] += sc[j] / tot * mx_bf16_to_f32(v[i]);
    }
  }
  free(sc);
  free(qs);
  free(qf);
}

/* max |gpu − ref| / max |ref| over every head */
static double rel_error(const shape *s, const uint16_t *att, const double *ref) {
  double e = 0.0, m = 0.0;
  for (int i = 0; i < s->nq * s->hd; i++) {
    double d = fabs(mx_bf16_to_f32(att[i]) - ref[i]);
    if (d > e) e = d;
    if (fabs(ref[i]) > m) m = fabs(ref[i]);
  }
  return m > 0.0 ? e / m : e;
}

static dk_kv_layout g_kv;             /* the layout of the shape being run */
#define KFV_PAIRS 64

/* The K-from-V array of plain K and V (cap rows): K at the moved dims, V at the others (K's
 * unmoved dims set to V's first, so the host attention reads the same values), the tail V's
 * moved dims. */
static uint16_t *kfv_array(const shape *s, uint16_t *hk, const uint16_t *hv, dk_kv_layout L) {
  uint16_t *c = malloc((size_t)s->cap * L.ps * 2);
  if (!c) return NULL;
  for (int64_t sl = 0; sl < s->cap; sl++)
    for (int g = 0; g < s->nkv; g++)
      for (int d = 0; d < s->hd; d++) {
        const int64_t i = (sl * s->nkv + g) * s->hd + d;
        if (!dk_kv_moved(L, s->hd, d)) hk[i] = hv[i];
        c[sl * L.ps + (int64_t)g * s->hd + d] = hk[i];
        c[sl * L.ps + dk_kv_vcol(L, s->nkv, s->hd, g, d)] = hv[i];
      }
  return c;
}

/* The full shape's K as codec blocks (cap positions of nkv heads, kps bytes a position). NULL on a
 * refused block. */
static uint8_t *planar_array(const shape *s, const uint16_t *hk, dk_kv_layout L) {
  uint8_t *c = malloc((size_t)s->cap * L.kps);
  if (!c) return NULL;
  const size_t row = kvc_row_bytes((kvc_format)g_kf, s->hd);
  mlxrt_error err = {0};
  for (int64_t sl = 0; sl < s->cap; sl++)
    for (int g = 0; g < s->nkv; g++)
      if (kvc_encode_row_bf16((kvc_format)g_kf, hk + (sl * s->nkv + g) * s->hd, s->hd, c + sl * L.kps + (int64_t)g * row,
                              &err)) {
        fprintf(stderr, "mlxrt-attn-bench: %s\n", err.msg);
        free(c);
        return NULL;
      }
  return c;
}
/* The codec rows' values in the rotated domain as the one pass forms them (planar_ref.h),
 * [cap][nkv][hd] floats. */
static float *tile_values(const shape *s, const uint8_t *pk, dk_kv_layout L) {
  float *r = malloc(sizeof(float) * (size_t)s->cap * s->nkv * s->hd);
  if (!r) return NULL;
  const size_t row = kvc_row_bytes((kvc_format)g_kf, s->hd), bb = kvc_block_bytes((kvc_format)g_kf);
  for (int64_t sl = 0; sl < s->cap; sl++)
    for (int g = 0; g < s->nkv; g++)
      for (int d = 0; d < s->hd; d++)
        r[(sl * s->nkv + g) * s->hd + d] =
            planar_tile_value(g_kf, pk + sl * L.kps + (int64_t)g * row + (int64_t)(d / KVC_BLOCK) * bb, d % KVC_BLOCK);
  return r;
}
#define NAMAX 4

static int attend(const shape *s, bufs *b, int splits, int min_keys, float scale, void *st) {
  if (g_cluster)
    return dk_attention_cluster(b->q, b->kc, b->vc, s->nq, s->nkv, s->hd, g_kv, scale, b->pos, s->window,
                                s->window > 0 ? s->window : s->ctx, g_wide, b->att, b->amax, NAMAX, b->smax, b->count,
                                NULL, st);
  return dk_attention(b->q, b->kc, b->vc, s->nq, s->nkv, s->hd, g_kv, scale, b->pos, s->window, splits, min_keys, g_deep,
                      s->ctx, b->scores, b->smax, b->ssum, b->pacc, b->count, b->att, NULL, 0, st);
}

/* µs per call: CALLS calls in one graph (with programmatic dependent launch, as captured), median of REPLAYS */
static double time_case(const shape *s, bufs *b, int splits, int min_keys, float scale, void *st, mlxrt_error *err) {
  void *exec = NULL, *e0 = NULL, *e1 = NULL;
  float t[REPLAYS];
  if (rt_graph_begin(st, err)) die(err);
  for (int c = 0; c < CALLS; c++)
    if (rt_status(attend(s, b, splits, min_keys, scale, st), "dk_attention (capture)", err)) die(err);
  if (rt_graph_end(st, &exec, err)) die(err);
  if (rt_event_create(&e0, err) || rt_event_create(&e1, err) || rt_graph_launch(exec, st, err)) die(err);
  for (int r = 0; r < REPLAYS; r++) {
    if (rt_event_record(e0, st, err) || rt_graph_launch(exec, st, err) || rt_event_record(e1, st, err) ||
        rt_event_ms(e0, e1, &t[r], err))
      die(err);
  }
  rt_graph_destroy(exec);
  rt_event_destroy(e0);
  rt_event_destroy(e1);
  qsort(t, REPLAYS, sizeof *t, cmp_float);
  return t[REPLAYS / 2] * 1e3 / CALLS;
}

int main(int argc, char **argv) {
  int quick = 0, bad = 0, ctx = 32768;
  while (argc > 1 && argv[1][0] == '-' && strcmp(argv[1], "--case")) {
    const char *a = argv[1];
    if (!strcmp(a, "--quick")) quick = 1;
    else if (!strcmp(a, "--deep")) g_deep = 1;
    else if (!strcmp(a, "--cluster")) g_cluster = 1;
    else if (!strcmp(a, "--cluster-wide")) g_cluster = g_wide = 1;
    else if (!strcmp(a, "--kfv")) g_kfv = 1;
    else if (!strcmp(a, "--planar3")) g_kf = 3;
    else if (!strcmp(a, "--planar4")) g_kf = 4;
    else if (!strcmp(a, "--ctx") && argc > 2 && atoi(argv[2]) >= 2048) {
      ctx = atoi(argv[2]);
      argv++, argc--;
    } else bad = 1;
    argv++, argc--;
  }
  int one = argc == 6 && !strcmp(argv[1], "--case");
  int one_shape = one && !strcmp(argv[2], "full"), one_pos = one ? atoi(argv[3]) : 0;
  /* --case: SPLITS may be a comma-separated list, each timed on the same data */
  int one_ns[16], one_nn = 0, one_mk = one ? atoi(argv[5]) : 0;
  for (const char *c = one ? argv[4] : ""; *c && one_nn < 16; c = strchr(c, ',') ? strchr(c, ',') + 1 : "")
    one_ns[one_nn++] = atoi(c);
  int one_n = one_nn ? one_ns[0] : 0, one_lo = one_n; /* the largest and the smallest */
  for (int i = 0; i < one_nn; i++) {
    if (one_ns[i] > one_n) one_n = one_ns[i];
    if (one_ns[i] < one_lo) one_lo = one_ns[i];
  }
  bad |= g_kf && (g_kfv || g_cluster);
  if (bad || (argc > 1 && !one) || (one && (strcmp(argv[2], "full") && strcmp(argv[2], "sliding")))) {
    fprintf(stderr, "usage: mlxrt-attn-bench [--quick] [--deep | --cluster | --cluster-wide] [--kfv | --planar3 | --planar4] "
                    "[--ctx N] [--case sliding|full POS SPLITS[,SPLITS...] MIN_KEYS]\n");
    return 2;
  }
  mlxrt_error err = {0};
  rt_device_info dev;
  if (rt_device_open(&dev, &err)) die(&err);
  void *st = NULL;
  if (rt_stream_create(&st, &err)) die(&err);
  const shape shapes[3] = {{"sliding (32 q, 16 kv, hd 256, window 1024)", 32, 16, 256, 1024, 1024 + ACCEL_RING_SLACK, 4096},
                           {"full (32 q, 4 kv, hd 512)", 32, 4, 512, 0, ctx, ctx},
                           {"full (32 q, 4 kv, hd 512), 2048 positions", 32, 4, 512, 0, 2048, 2048}};
  const int pos_sliding[] = {63, 127, 511, 1023, 4095}, pos_full[] = {63, 127, 511, 1023, 4095, 16383, 32767};
  const int pos_short[] = {0, 1, 15, 127, 1000, 2047};
  const int split_n[] = {4, 8, 16, 32, 64, 128, 256}, min_keys[] = {1, 4, 8, 16, 32, 64, 128};
  const int max_splits = 1024;
  const float scale = 1.0f; /* Gemma 4: the norms carry the scale */
  int failed = 0, cases = 0;
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  printf("device: %s, %d SMs; %d calls per graph, median of %d replays\n", dev.name, dev.sms, CALLS, REPLAYS);
  for (int si = 0; si < 3; si++) {
    const shape *s = &shapes[si];
    if (one && si != one_shape) continue;
    /* the split passes on the first two shapes, the one-cluster form where its keys fit */
    if (g_cluster ? !dk_attention_cluster_fits(s->nq, s->nkv, s->hd, s->window > 0 ? s->window : s->ctx, g_wide)
                  : si == 2)
      continue;
    if ((g_kfv || g_kf) && s->window > 0) continue; /* K from V, planar K: full layers only */
    g_kv = g_kfv ? dk_kv_from_v(s->nkv, s->hd, KFV_PAIRS) : dk_kv_plain(s->nkv, s->hd);
    kvc_tables *d_tab = NULL;
    unsigned *d_flags = NULL;
    if (g_kf) {
      if (rt_malloc((void **)&d_tab, sizeof *d_tab, &err) || rt_malloc((void **)&d_flags, sizeof *d_flags, &err) ||
          rt_h2d(d_tab, kvc_tables_get(), sizeof *d_tab, st, &err) || rt_memset(d_flags, 0, sizeof *d_flags, st, &err))
        die(&err);
      g_kv = dk_kv_planar(s->nkv, s->hd, g_kf, d_tab, d_flags);
    }
    if (g_cluster)
      printf("%s: %d clusters of %d blocks at once, %d needed (cudaOccupancyMaxActiveClusters; 0: unknown)\n",
             s->name, dk_attention_cluster_max_clusters(s->nq, s->nkv, s->hd, s->window > 0 ? s->window : s->ctx, g_wide),
             dk_attention_cluster_size(g_wide), s->nkv);
    const size_t kvn = (size_t)s->cap * s->nkv * s->hd, qn = (size_t)s->nq * s->hd;
    uint16_t *hk = malloc(kvn * 2), *hv = malloc(kvn * 2), *ha = malloc(qn * 2);
    float *hq = malloc(qn * 4);
    double *ref = malloc(qn * sizeof(double));
    if (!hk || !hv || !ha || !hq || !ref) {
      fprintf(stderr, "mlxrt-attn-bench: out of host memory\n");
      return 2;
    }
    /* keys with a spread that makes the softmax neither flat nor one-hot at head dim 512 */
    for (size_t i = 0; i < kvn; i++) hk[i] = mx_f32_to_bf16((float)(rng_unit(&rng) * 2.0 - 1.0) * 0.25f);
    for (size_t i = 0; i < kvn; i++) hv[i] = mx_f32_to_bf16((float)(rng_unit(&rng) * 2.0 - 1.0));
    for (size_t i = 0; i < qn; i++) hq[i] = mx_round_bf16((float)(rng_unit(&rng) * 2.0 - 1.0));
    uint16_t *hc = g_kfv ? kfv_array(s, hk, hv, g_kv) : NULL;
    uint8_t *hpk = g_kf ? planar_array(s, hk, g_kv) : NULL;
    /* the one pass over a compressed K: its reference scores the tile values */
    const int tiles = hpk && g_deep && dk_attention_onepass(s->nq, s->nkv, s->hd, g_kv);
    float *hkr = tiles ? tile_values(s, hpk, g_kv) : NULL;
    if ((g_kfv && !hc) || (g_kf && !hpk) || (tiles && !hkr)) {
      fprintf(stderr, "mlxrt-attn-bench: out of host memory\n");
      return 2;
    }
    const size_t cn = (size_t)s->cap * g_kv.ps; /* elements of the device cache array (each) */
    const size_t kbytes = g_kf ? (size_t)s->cap * g_kv.kps : cn * 2; /* K's array */
    bufs b;
    if (rt_malloc((void **)&b.kc, kbytes, &err) || (!g_kfv && rt_malloc((void **)&b.vc, kvn * 2, &err)) ||
        rt_malloc((void **)&b.att, qn * 2, &err) || rt_malloc((void **)&b.q, qn * 4, &err) ||
        rt_malloc((void **)&b.scores, (size_t)s->nq * s->ctx * 4, &err) ||
        rt_malloc((void **)&b.smax, (size_t)s->nq * max_splits * 4, &err) ||
        rt_malloc((void **)&b.ssum, (size_t)s->nq * max_splits * 4, &err) ||
        rt_malloc((void **)&b.pacc, (size_t)s->nq * max_splits * s->hd * 4, &err) ||
        rt_malloc((void **)&b.count, (size_t)s->nq * 4, &err) || rt_malloc((void **)&b.pos, 4, &err) ||
        rt_malloc((void **)&b.amax, NAMAX * 4, &err) ||
        rt_h2d(b.kc, g_kf ? (const void *)hpk : g_kfv ? (const void *)hc : (const void *)hk, kbytes, st, &err) || (!g_kfv && rt_h2d(b.vc, hv, kvn * 2, st, &err)) ||
        rt_h2d(b.q, hq, qn * 4, st, &err) || rt_memset(b.count, 0, (size_t)s->nq * 4, st, &err))
      die(&err);
    if (g_kfv) b.vc = b.kc; /* one array: V lives in K's rows */
    printf("\n%s\n| pos | splits | min keys | us | K+V GB/s | rel err |\n|---:|---:|---:|---:|---:|---:|\n", s->name);
    const int *ps = one ? &one_pos : si == 0 ? pos_sliding : si == 1 ? pos_full : pos_short;
    const int np = one ? 1 : si == 0 ? (int)(sizeof pos_sliding / sizeof *ps) : si == 1 ? (int)(sizeof pos_full / sizeof *ps)
                                                                               : (int)(sizeof pos_short / sizeof *ps);
    if (one && (one_pos < 0 || one_pos >= s->ctx || one_lo < 1 || one_n > max_splits || one_mk < 1)) {
      fprintf(stderr, "mlxrt-attn-bench: --case: position below %d, 1..%d splits, min keys >= 1\n", s->ctx,
              max_splits);
      return 2;
    }
    char best[16][96] = {{0}};
    for (int pi = 0; pi < np && (!quick || pi < 2); pi++) {
      const int pos = ps[pi];
      if (pos >= s->ctx) continue; /* (--ctx below a listed position) */
      host_attention(s, hq, hk, hpk, g_kv.kps, hkr, hv, pos, scale, ref);
      if (rt_h2d(b.pos, &pos, 4, st, &err)) die(&err);
      double best_us = 1e30;
      for (size_t ni = 0; ni < (one ? (size_t)one_nn : sizeof split_n / sizeof *split_n); ni++)
        for (size_t mi = 0; mi < sizeof min_keys / sizeof *min_keys; mi++) {
          const int n = one ? one_ns[ni] : split_n[ni], mk = one ? one_mk : min_keys[mi];
          if ((one && mi) || (g_cluster && (ni || mi))) continue;
          /* a min_keys that never binds at this position repeats the case with 1 */
          const int cnt = s->window > 0 && pos + 1 > s->window ? s->window : pos + 1;
          if (!one && mk > 1 && (cnt + n - 1) / n >= mk) continue;
          float am[NAMAX];
          if (rt_memset(b.att, 0xff, qn * 2, st, &err) || rt_memset(b.amax, 0xff, NAMAX * 4, st, &err) ||
              rt_status(attend(s, &b, n, mk, scale, st), "dk_attention", &err) ||
              rt_d2h(ha, b.att, qn * 2, st, &err) || rt_d2h(am, b.amax, sizeof am, st, &err) ||
              rt_stream_sync(st, &err))
            die(&err);
          const double e = rel_error(s, ha, ref);
          int bad = !(e <= 1e-2);
          if (g_cluster) { /* amax[0] = max |att| (its bits), the rest zero */
            float m = 0.0f;
            for (size_t i = 0; i < qn; i++) {
              const float f = fabsf(mx_bf16_to_f32(ha[i]));
              if (f > m) m = f;
            }
            int am_bad = memcmp(&am[0], &m, 4) != 0;
            for (int i = 1; i < NAMAX; i++) am_bad |= am[i] != 0.0f;
            if (am_bad) printf("x-prep maxima: %g %g %g %g, expected %g 0 0 0\n", am[0], am[1], am[2], am[3], m);
            bad |= am_bad;
          }
          failed += bad;
          cases++;
          const double us = time_case(s, &b, n, mk, scale, st, &err);
          /* the live keys' K and V rows, each read once (K from V: one 5 KB row per key) */
          const double kv_bytes =
              (double)cnt * (g_kfv ? (double)g_kv.ps * 2 : g_kf ? (double)g_kv.kps + (double)s->nkv * s->hd * 2
                                                                : (double)s->nkv * s->hd * 2 * 2);
          printf("| %d | %d | %d | %.2f | %.0f | %.1e%s |\n", pos, n, mk, us, kv_bytes / (us * 1e3), e,
                 bad ? " FAIL" : "");
          if (us < best_us) {
            best_us = us;
            snprintf(best[pi], sizeof best[pi], "pos %d: %.2f us with %d splits, min %d keys", pos, us, n, mk);
          }
        }
    }
    printf("\nfastest, %s:\n", s->name);
    for (int pi = 0; pi < np && (!quick || pi < 2); pi++)
      if (best[pi][0]) printf("  %s\n", best[pi]);
    if (g_kfv) b.vc = NULL;
    rt_free(b.kc), rt_free(b.vc), rt_free(b.att), rt_free(b.q), rt_free(b.scores), rt_free(b.smax);
    rt_free(b.ssum), rt_free(b.pacc), rt_free(b.count), rt_free(b.pos), rt_free(b.amax);
    free(hk), free(hv), free(ha), free(hq), free(ref), free(hc), free(hpk), free(hkr);
    rt_free(d_tab), rt_free(d_flags);
  }
  printf("\n%d passed, %d failed\n", cases - failed, failed);
  rt_stream_destroy(st);
  return failed ? 1 : 0;
}
