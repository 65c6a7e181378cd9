/* The CUDA whole-step decoder: a dense Gemma 3 / Gemma 4 decode step resident on the device.
 *
 * At creation: q|k|v (q|k when k_eq_v) and gate|up are concatenated row-wise from the MLX
 * parts and uploaded as one weight each (one mat-vec launch per group; the separate weights
 * are never uploaded), the small vectors and RoPE tables are copied once, and every work
 * buffer and the KV cache (sliding layers: a ring of sliding_window positions; full layers:
 * `capacity` positions) are allocated once.
 *
 * A step is two CUDA graphs captured once and replayed: the body (embedding gather of
 * all_tokens[*pos], every layer, (*pos)++) and the head (final norm, lm_head, softcap,
 * argmax). The body has three forms, picked per position by the host (the one-cluster
 * attention while few keys are live, the split passes, and those with the deep contexts' p·v
 * pass), each captured the first time a step needs it. The position lives in device memory,
 * so the same graphs serve every position;
 * a prompt of n > 1 tokens runs through the batched prompt pass (dec_prefill_run in
 * cuda_decoder_prefill.c: chunks of up to 512 tokens), then the head once. Only the token id
 * (and the logits when asked) is read back.
 * MLXRT_CUDA_GRAPH=0 launches the same work without graphs (debugging). */
#include "cuda_decoder_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_timeline.h"
#include "cuda_timeline_agg.h" /* the timeline's graph ids */

/* decode attention's split shape (docs/PERF.md session 8: mlxrt-attn-bench sweep, tg128 A/B) */
#define SPLIT_KEYS 16
#define SPLIT_BLOCKS_PER_SM 4
#define MAX_SPLITS 256
/* the one-cluster decode attention up to this many live keys, the split passes above: in the
 * attention bench it matches them to 128 keys and loses 6 µs at 512, 15 at 1024, while the
 * step saves two launches per layer (docs/PERF.md, session 11) */
#define CLUSTER_KEYS 256
/* the deep contexts' p·v pass (MLXRT_ATTN_PV_DEEP) above this many live keys: measured ahead of
 * the register path from depth 32768 on, behind at 4096 (docs/PERF.md, sessions 19–20) */
#define DEEP_KEYS 32768



/* ---- concatenated weights ------------------------------------------------------------------ */
typedef struct cat_ctx {
  const accel_weight *w[3];
  int n;
  int il; /* rows interleaved by il (two parts of equal rows: il of the first, il of the second, …); 0: one after the other */
  void *buf[3];
} cat_ctx;

static const void *cat_load(void *ctx, accel_part part, size_t *nbytes, mlxrt_error *err) {
  cat_ctx *c = ctx;
  size_t total = 0;
  for (int i = 0; i < c->n; i++) total += accel_part_bytes(&c->w[i]->spec, part);
  free(c->buf[part]);
  char *out = c->buf[part] = mx_malloc(total ? total : 1, err);
  if (!out) return NULL;
  size_t at = 0;
  for (int i = 0; i < c->n; i++) {
    size_t want = accel_part_bytes(&c->w[i]->spec, part), got = 0;
    if (!want) continue;
    const void *p = c->w[i]->load(c->w[i]->load_ctx, part, &got, err);
    if (!p) return NULL;
    if (got != want) {
      mx_fail(err, "%s: part has %zu bytes, expected %zu", c->w[i]->name ? c->w[i]->name : "weight", got, want);
      return NULL;
    }
    if (c->il) { /* each part's rows are row-major in every part (codes, scales, biases) */
      const int64_t rows = c->w[i]->spec.rows;
      const size_t row = want / (size_t)rows, chunk = row * (size_t)c->il;
      for (int64_t r = 0; r < rows; r += c->il)
        memcpy(out + (size_t)(r * c->n + (int64_t)i * c->il) * row, (const char *)p + (size_t)r * row, chunk);
    } else {
      memcpy(out + at, p, want);
    }
    at += want;
  }
  *nbytes = total;
  return out;
}

static int same_format(const accel_spec *a, const accel_spec *b) {
  if (a->mode != b->mode || a->cols != b->cols || a->experts || b->experts) return 0;
  if (a->mode == ACCEL_MODE_DENSE) return a->dense_dtype == b->dense_dtype;
  if (a->bits != b->bits || a->group_size != b->group_size) return 0;
  return a->mode != ACCEL_MODE_AFFINE || a->scales_dtype == b->scales_dtype;
}

/* k splits of a mat-vec over several blocks per 16-row tile. A product of one wave (its tiles
 * fit the resident blocks at once) runs as long as its fullest SM: down and o of the 31B (336
 * tiles on 132 SMs) put 3 blocks on some SMs and 2 on others, 85 % of the even share. The
 * split with the best balance that still fits one wave is taken where it beats no split by
 * 2 % or more and each block streams at least KS_MIN_UNITS units (6 stages of 16): down with 3
 * splits (1008 blocks, 7 or 8 per SM: 95 %) measured tg128 +1.3 to +1.9 % on the H200
 * (session 16, docs/PERF.md), where o with 3 (43 units per block) measured −1.4 %, and the
 * session-10 runs (3 weight stages, 6 blocks per SM: two waves) had found splits no help.
 * MLXRT_QMV_KSPLIT=N (or per product MLXRT_QMV_KSPLIT_QKV / _GU / _O / _DOWN) forces N. The
 * split changes the float sums' grouping, so the bits (deterministic either way). */
#define KS_MIN_UNITS 96
static int balanced_split(const ck_layout *L) {
  int sms = 0, per_sm = ck_qmv_occupancy(L, 1, &sms);
  if (per_sm < 1 || sms < 1) return 1;
  const int64_t slots = (int64_t)per_sm * sms;
  if (L->tiles > slots) return 1;
  double best_eff = 0.0;
  int best = 1;
  for (int ks = 1; ks <= 8; ks++) {
    if (ks > 1 && (L->tiles * ks > slots || L->nunits / ks < KS_MIN_UNITS)) break;
    double per = (double)(L->tiles * ks) / sms, eff = per / ceil(per);
    if (ks == 1 || eff >= best_eff + 0.02) {
      best_eff = eff;
      best = ks;
    }
  }
  return best;
}

static void choose_split(accel_decoder *D, dec_mv *mv, const char *what) {
  const ck_layout *L = mv->L[0];
  mv->ks = 1;
  mv->stages = 0;
  mv->warps = 0;
  mv->fix_e = CK_XE_ROWMAX;
  mv->rows = 0;
  for (int i = 0; i < mv->n; i++) mv->rows += mv->L[i]->rows;
  /* lm_head's consumer (dk_logits) reads one output: never split */
  if (mv->n != 1 || L->fmt == CK_GENERIC || !strcmp(what, "lm_head")) return;
  /* per product (experiment knobs): MLXRT_QMV_KSPLIT_QKV / _GU / _O / _DOWN */
  const char *own = !strcmp(what, "q|k|v") ? "MLXRT_QMV_KSPLIT_QKV" : !strcmp(what, "gate|up") ? "MLXRT_QMV_KSPLIT_GU"
                  : !strcmp(what, "o_proj") ? "MLXRT_QMV_KSPLIT_O" : "MLXRT_QMV_KSPLIT_DOWN";
  const char *f = getenv(own);
  if (!f || !*f) f = getenv("MLXRT_QMV_KSPLIT");
  /* gate|up's GeGLU epilogue needs whole sums: split only when asked */
  int ks = f && *f ? atoi(f) : strcmp(what, "gate|up") ? balanced_split(L) : 1;
  if (ks < 1) ks = 1;
  if (ks > L->nunits) ks = (int)L->nunits;
  mv->ks = ks;
  if (ks > D->max_ks) D->max_ks = ks;
  /* and its stage count (experiment knobs MLXRT_QMV_STAGES_QKV / _GU / _O / _DOWN: 2, 3 or 4) */
  char sk[40];
  snprintf(sk, sizeof sk, "MLXRT_QMV_STAGES_%s", own + strlen("MLXRT_QMV_KSPLIT_"));
  const char *sv = getenv(sk);
  mv->stages = sv && (!strcmp(sv, "2") || !strcmp(sv, "3") || !strcmp(sv, "4")) ? atoi(sv) : 0;
  /* and its warps per tile (MLXRT_QMV_WARPS_QKV / _GU / _O / _DOWN: 4 or 8; session 15: o and
   * down run one wave of 336 blocks, 10 warps per SM, where the products are latency-bound) */
  snprintf(sk, sizeof sk, "MLXRT_QMV_WARPS_%s", own + strlen("MLXRT_QMV_KSPLIT_"));
  const char *wv = getenv(sk);
  mv->warps = wv && (!strcmp(wv, "4") || !strcmp(wv, "8")) ? atoi(wv) : 0;
}

/* The activation prep the residual norm can write for mv (dk_residual_norm's xmode): every part
 * a fast format without group sums reading the same x layout; else 0 (affine formats need the
 * group sums of x: their prep stays a kernel of its own). */
static int mv_xmode(const dec_mv *mv) {
  int mode = 0;
  for (int i = 0; i < mv->n; i++) {
    const ck_layout *L = mv->L[i];
    int m = L->fmt == CK_DBF16 ? 2 : (L->fmt == CK_NVFP4 || L->fmt == CK_MXFP4 || L->fmt == CK_MXFP8 || L->fmt == CK_DF16) ? 1 : 0;
    if (m == 0 || (i > 0 && m != mode) || L->cols % 32) return 0;
    mode = m;
  }
  return mode;
}

/* Makes the rows of ws[0..n) one resident weight when their formats agree (else each part). */
/* The product of ws[0..n), one concatenated weight where the formats agree (rows interleaved by
 * il when il > 0: see cat_ctx; the parts must then be of equal rows, a multiple of il). */
static int make_mv_il(accel_decoder *D, const accel_weight *const *ws, int n, const char *what, int layer, int il,
                      dec_mv *mv, mlxrt_error *err) {
  int same = 1;
  for (int i = 1; i < n; i++) same &= same_format(&ws[0]->spec, &ws[i]->spec);
  for (int i = 0; i < n; i++)
    if (!ws[i]->load) return mx_fail(err, "decoder: layer %d %s part %d has no loader", layer, what, i);
  mv->n = 0;
  if (il && (n != 2 || !same || ws[0]->spec.rows != ws[1]->spec.rows || ws[0]->spec.rows % il))
    return mx_fail(err, "decoder: layer %d %s: rows interleaved by %d need two parts of one format and equal rows", layer,
                   what, il);
  if (n == 1 || !same) {
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
      if (!(mv->L[i] = cudab_resident(D->b, ws[i], err))) return -1;
      mv->off[i] = off;
      off += ws[i]->spec.rows;
    }
    mv->n = n;
    choose_split(D, mv, what);
    mv->xmode = mv_xmode(mv);
    return 0;
  }
  cat_ctx c = {.n = n, .il = il};
  accel_weight cw = *ws[0];
  char name[200];
  snprintf(name, sizeof name, il ? "layer %d %s (rows interleaved by %d)" : "layer %d %s (concatenated)", layer, what, il);
  cw.name = name;
  cw.load = cat_load;
  cw.load_ctx = &c;
  cw.spec.rows = 0;
  uint64_t key = 0x6a09e667f3bcc909ULL;
  for (int i = 0; i < n; i++) {
    c.w[i] = ws[i];
    cw.spec.rows += ws[i]->spec.rows;
    key = (key ^ ws[i]->key) * 0x100000001b3ULL;
    key ^= key >> 29;
  }
  cw.key = (key ^ 0xc0ca7c0ca7ULL) + (uint64_t)il * 0x9e3779b97f4a7c15ULL; /* another layout, another key */
  mv->L[0] = cudab_resident(D->b, &cw, err);
  for (int i = 0; i < 3; i++) free(c.buf[i]);
  if (!mv->L[0]) return -1;
  mv->off[0] = 0;
  mv->n = 1;
  choose_split(D, mv, what);
  mv->xmode = mv_xmode(mv);
  return 0;
}

static int make_mv(accel_decoder *D, const accel_weight *const *ws, int n, const char *what, int layer, dec_mv *mv,
                   mlxrt_error *err) {
  return make_mv_il(D, ws, n, what, layer, 0, mv, err);
}

/* y = x · Wᵀ for every part (device x bf16, y float32). premax: x's producer already wrote
 * the block maxima the activation prep needs into D->pmax; XP_DONE: it wrote the prep itself
 * (mv->xmode). */
enum { XP_FULL = 0, XP_PREMAX = 1, XP_DONE = 2, XP_FIXED = 3 /* the prep kernel with mv->fix_e, no maxima */ };
static int run_mv_parts(accel_decoder *D, const dec_mv *mv, const uint16_t *x, float *y, int premax, mlxrt_error *err) {
  for (int i = 0; i < mv->n; i++) {
    const ck_layout *L = mv->L[i];
    int st = 0;
    if (L->fmt != CK_GENERIC && premax != XP_DONE)
      st = premax == XP_FIXED ? ck_xprep_fixed(L, x, D->xp, D->xs, D->xexp, mv->fix_e, D->stream)
           : premax       ? ck_xprep_premax(L, x, D->xp, D->xs, D->xexp, D->pmax, D->stream)
                          : ck_xprep(L, x, 1, D->xp, D->xs, D->xexp, D->pmax, D->stream);
    if (rt_status(st, "x prep launch", err)) return -1;
    st = mv->ks > 1 ? ck_qmv_split(L, 0, D->xp, D->xs, D->xexp, 1, y, L->rows, mv->ks, mv->rows, D->stream)
                    : ck_qmv(L, 0, x, D->xp, D->xs, D->xexp, 1, y + mv->off[i], L->rows, D->stream);
    if (rt_status(st, "mat-vec launch", err))
      return -1;
  }
  return 0;
}

static int run_mv(accel_decoder *D, const dec_mv *mv, const uint16_t *x, float *y, int premax, mlxrt_error *err) {
  /* the products whose x prep their producer wrote (XP_DONE: the residual norm, geglu with
   * MLXRT_GEGLU_PREP), and those after a prep kernel, may take their own early-stage counts
   * (experiment knobs; the same bits) */
  const int early = ck_get_qmv_early(), own = premax == XP_DONE ? D->early_norm : D->early_prep;
  const int stages = ck_get_qmv_stages(), warps = ck_get_qmv_warps();
  if (own >= 0) ck_set_qmv_early(own);
  if (mv->stages) ck_set_qmv_stages(mv->stages);
  if (mv->warps) ck_set_qmv_warps(mv->warps);
  int rc = run_mv_parts(D, mv, x, y, premax, err);
  ck_set_qmv_early(early);
  ck_set_qmv_stages(stages);
  ck_set_qmv_warps(warps);
  return rc;
}

/* o's activation-prep exponent where V rows are RMS-normalized without a weight (Gemma 4's
 * v_norm): each attention output is a convex combination of V rows (Σ p = 1 up to the bf16
 * rounding of each p), so |att| ≤ max |V| ≤ √hd, and 2√hd · 2^e stays below 2^15. */
static int o_fixed_exp(int hd) {
  int k = 0;
  frexpf(2.0f * sqrtf((float)hd), &k); /* 2√hd < 2^k */
  return 15 - k;
}

/* The activation-prep exponent for x = bf16(bf16(h·r) · w) of a norm over H values, fixed by a
 * bound instead of x's maximum: |h_i|·r ≤ √H (h_i² ≤ Σ h² = H · mean(h²) and r = 1/√(mean(h²) + ε)),
 * so |x_i| ≤ √H · max|w| up to two bf16 roundings; with the bound 2√H · max|w| < 2^k, x·2^(15−k)
 * stays below 2^15 (fp16 keeps every bf16 value ≥ 2^(k−40) exactly; the row maximum's exponent
 * would keep a few binades lower). DK_XE_ROWMAX where w has no finite positive maximum. */
static int norm_fixed_exp(const float *w, int H) {
  float m = 0.0f;
  for (int i = 0; i < H; i++) m = fmaxf(m, fabsf(w[i]));
  if (!(m > 0.0f) || !isfinite(m)) return DK_XE_ROWMAX;
  int k = 0;
  frexpf(2.0f * sqrtf((float)H) * m, &k);
  return 15 - k;
}
/* The exponent a residual norm that writes the prep of mv should use (dk_residual_norm's
 * xe_fixed): fixed (from the norm weight's bound) with D->norm_fixexp, for a prep that needs no
 * group sums; 0 for dense bf16 (unscaled either way). */
static int norm_xe(const accel_decoder *D, const dec_mv *mv, int xe) {
  if (!D->norm_fixexp || !mv->xmode) return DK_XE_ROWMAX;
  return mv->xmode == 2 ? 0 : xe;
}

/* The block maxima a residual norm writes: none with a fixed exponent (nothing reads them). */
static float *norm_pmax(const accel_decoder *D, int xe) { return xe == DK_XE_ROWMAX ? D->pmax : NULL; }

/* The one-launch attention's form (dk_set_attn_cluster_stage) for a call that stages its rows
 * (staged ≠ 0) or not, in the long-context graph (lg) or the short one: MLXRT_ATTN_CLUSTER_STAGE
 * bit 2 picks the one-buffer form for the long graph's rings, bit 3 clusters of 16 blocks there,
 * bit 4 clusters of 16 blocks in the short graph. */
static int stage_mode(const accel_decoder *D, int staged, int lg) {
  if (!staged) return 0;
  return (lg && (D->attn_stage & 4) ? 2 : 1) + (D->attn_stage & (lg ? 8 : 16) ? 2 : 0);
}

/* An integer knob from the environment: def when unset, else within [lo, hi] or an error. */
int dec_env_knob(const char *name, int def, int lo, int hi, int *out, mlxrt_error *err) {
  const char *e = getenv(name);
  *out = def;
  if (!e || !*e) return 0;
  char *end;
  long v = strtol(e, &end, 10);
  if (*end || v < lo || v > hi) return mx_fail(err, "%s=%s: expected an integer in [%d, %d]", name, e, lo, hi);
  *out = (int)v;
  return 0;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */
void cuda_decoder_free(accel_decoder *D) {
  if (!D) return;
  if (D->stream) {
    mlxrt_error ignore;
    rt_stream_sync(D->stream, &ignore);
  }
  rt_graph_destroy(D->g_body[0]);
  rt_graph_destroy(D->g_body[1]);
  rt_graph_destroy(D->g_body[2]);
  rt_graph_destroy(D->g_head);
  cprof_report_free(&D->prof, "CUDA decoder profile (MLXRT_CUDA_PROFILE=1)");
  if (D->timeline) ctl_report_free("CUDA decoder timeline of the graph replays (MLXRT_CUDA_TIMELINE=1)");
  dec_prefill_free(D);
  if (D->ly)
    for (int i = 0; i < D->d->n_layers; i++) {
      rt_free(D->ly[i].norms);
      rt_free(D->ly[i].inv_freq);
      rt_free(D->ly[i].kc);
      rt_free(D->ly[i].vc);
    }
  free(D->ly);
  void *dev[] = {D->final_norm, D->all_tokens, D->tok, D->next, D->pos, D->emb, D->xb, D->attb, D->gub,
                 D->h, D->y, D->q, D->ylog, D->logits, D->xp, D->xs, D->pmax, D->gmax, D->xexp, D->scores,
                 D->smax, D->ssum, D->pacc, D->part_v, D->part_i, D->counts, D->sk_state};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) rt_free(dev[i]);
  rt_host_free(D->h_toks);
  rt_host_free(D->h_pos);
  rt_host_free(D->h_next);
  rt_host_free(D->h_logits);
  free(D);
}

static int upload_floats(accel_decoder *D, float *dst, const float *src, int64_t n, mlxrt_error *err) {
  return rt_h2d(dst, src, (size_t)n * sizeof(float), D->stream, err) || rt_stream_sync(D->stream, err);
}

accel_decoder *cuda_decoder_create(accel_backend *b, const accel_model_desc *d, int64_t capacity,
                                   mlxrt_error *err) {
  if (!d || d->n_layers <= 0 || d->hidden <= 0 || d->n_heads <= 0 || d->vocab <= 0 || !d->layers ||
      !d->embed || !d->lm_head || !d->final_norm || capacity <= 0 || capacity > 0x7fffffff) {
    mx_fail(err, "CUDA decoder: incomplete model description or capacity %lld", (long long)capacity);
    return NULL;
  }
  accel_decoder *D = mx_calloc(1, sizeof *D, err);
  if (!D) return NULL;
  D->b = b;
  D->d = d;
  D->capacity = capacity;
  D->max_ks = 1;
  D->stream = cudab_stream(b);
  const char *g = getenv("MLXRT_CUDA_GRAPH");
  D->use_graph = !(g && strcmp(g, "0") == 0);
  const char *pdl = getenv("MLXRT_CUDA_PDL");
  D->use_pdl = !(pdl && strcmp(pdl, "0") == 0);
  /* experiment knob: successors launch before each kernel's wait (ck_launch.cuh) */
  const char *early = getenv("MLXRT_CUDA_PDL_EARLY");
  if (early && *early && strcmp(early, "0") && strcmp(early, "1")) {
    mx_fail(err, "MLXRT_CUDA_PDL_EARLY=%s: expected 0 or 1", early);
    goto fail;
  }
  if (rt_status(ck_set_pdl_early(early && !strcmp(early, "1")), "PDL order", err)) goto fail;
  if (cprof_init(&D->prof, D->stream, err)) goto fail;
  if (ctl_init(err)) goto fail;
  D->timeline = ctl_on();
  /* benchmark knob: warps per 16-row tile of every mat-vec (0 = chosen per shape); the
   * mat-vec variant (MLXRT_QMV_VARIANT) is the backend's */
  const char *wq = getenv("MLXRT_QMV_WARPS");
  if (wq && *wq) ck_set_tuning(atoi(wq), ck_get_qmv_variant());
  if (D->prof.on) D->use_graph = 0;
  /* decode attention's split shape (benchmark knobs; defaults measured on the H200) */
  int split_blocks, max_splits_knob, norm_push, attn_prefetch, tma_early;
  /* MLXRT_ATTN_ONEPASS=1: one pass over K and V with an online softmax (attention.cu; p not
   * rounded as the reference path rounds it: an experiment, off by default) */
  /* the attention's last kernel writes the maxima o's x prep needs (the same values; one launch
   * fewer per layer; tg128 +0.8 % in session 7, docs/PERF.md) */
  if (dec_env_knob("MLXRT_ATTN_XMAX", 1, 0, 1, &D->attn_xmax, err) ||
      dec_env_knob("MLXRT_QMV_EARLY_NORM", -1, -1, 4, &D->early_norm, err) ||
      dec_env_knob("MLXRT_QMV_EARLY_PREP", -1, -1, 4, &D->early_prep, err) ||
      dec_env_knob("MLXRT_ATTN_ONEPASS", 0, 0, 1, &D->attn_onepass, err) ||
      /* the split passes' scores with K streamed by bulk copies (3) where the shape allows, the
       * register path elsewhere: tg128 +2.4 % at depth 32768, +0.6 % at 4096 (H200, session 19) */
      dec_env_knob("MLXRT_ATTN_SCORES", 3, 0, 3, &D->attn_kpath, err) ||
      dec_env_knob("MLXRT_ATTN_PV", 0, 0, 2, &D->attn_pv_tc, err) ||
      dec_env_knob("MLXRT_ATTN_SPLIT_KEYS", SPLIT_KEYS, 1, 1 << 20, &D->split_keys, err) ||
      dec_env_knob("MLXRT_ATTN_BLOCKS_PER_SM", SPLIT_BLOCKS_PER_SM, 1, 64, &split_blocks, err) ||
      dec_env_knob("MLXRT_ATTN_MAX_SPLITS", MAX_SPLITS, 1, 4096, &max_splits_knob, err) ||
      dec_env_knob("MLXRT_ATTN_FUSE_POST", 0, 0, 1, &D->fuse_post, err) ||
      dec_env_knob("MLXRT_GEGLU_PREP", 0, 0, 1, &D->geglu_prep, err) ||
      dec_env_knob("MLXRT_GEGLU_EPI", 1, 0, 1, &D->geglu_epi, err) ||
      dec_env_knob("MLXRT_ATTN_OPREP", 0, 0, 1, &D->attn_oprep, err) ||
      dec_env_knob("MLXRT_NORM_FIXEXP", 1, 0, 1, &D->norm_fixexp, err) ||
      dec_env_knob("MLXRT_ATTN_FIXEXP", 1, 0, 1, &D->attn_fixexp, err) ||
      dec_env_knob("MLXRT_ATTN_CLUSTER", 1, 0, 1, &D->attn_cluster, err) ||
      dec_env_knob("MLXRT_ATTN_CLUSTER_STAGE", 11, 0, 31, &D->attn_stage, err) ||
      dec_env_knob("MLXRT_ATTN_CLUSTER_KEYS", CLUSTER_KEYS, 1, 8 * DK_CLUSTER_MAX_KPB, &D->cluster_keys, err) ||
      dec_env_knob("MLXRT_ATTN_CLUSTER_POST", 0, 0, 1, &D->cluster_post, err) ||
      dec_env_knob("MLXRT_NORM_PUSH", 1, 0, 1, &norm_push, err) ||
      dec_env_knob("MLXRT_ATTN_PREFETCH", 1, 0, 2, &attn_prefetch, err) ||
      /* the bulk-copy scores pass's stages before its wait (an experiment; the same bits) */
      dec_env_knob("MLXRT_ATTN_TMA_EARLY", 3, 1, 3, &tma_early, err))
    goto fail;
  if (rt_status(dk_set_attn_tma_early(tma_early), "MLXRT_ATTN_TMA_EARLY", err)) goto fail;
  /* the deep contexts' p·v pass: V streamed by bulk copies once a step's live keys exceed
   * deep_keys (a third body graph). It has more fixed cost and a faster stream than the
   * register path: tg128 −1.0 % at depth 4096, +0.6–1.2 % at 32768, +6.7 % at 131072 (H200,
   * sessions 19–20, docs/PERF.md). The experiments that replace the split passes keep theirs. */
  const int pv_free = !D->fuse_post && !D->attn_onepass && (!D->attn_kpath || D->attn_kpath == 3);
  if (dec_env_knob("MLXRT_ATTN_PV_DEEP", pv_free ? 2 : D->attn_pv_tc, 0, 2, &D->deep_pv, err) ||
      dec_env_knob("MLXRT_ATTN_PV_DEEP_KEYS", DEEP_KEYS, 1, 1 << 30, &D->deep_keys, err))
    goto fail;
  dk_set_norm_push(norm_push); /* (the backend's, like the mat-vec knobs) */
  /* K/V rows prefetched before the attention's wait: 1 (default) the one-launch form only
   * (tg128 +0.6 % at depth 0); 2 also the split passes (−2.7 % at depth 32768: their L2
   * prefetches compete with the products' weight stream; H200, session 13); 0 neither */
  if (rt_status(dk_set_attn_prefetch(attn_prefetch), "MLXRT_ATTN_PREFETCH", err)) goto fail;
  /* the split passes' experiments replace the whole attention: they run without the cluster form
   * (but for the bulk-copy forms, which are for the layers the split passes serve) */
  if (D->fuse_post || D->attn_onepass || (D->attn_kpath && D->attn_kpath != 3) || D->attn_pv_tc == 1 ||
      D->deep_pv == 1)
    D->attn_cluster = 0;
  if (D->fuse_post && (D->attn_onepass || (D->attn_kpath && D->attn_kpath != 3) || D->attn_pv_tc || D->deep_pv)) {
    mx_fail(err, "MLXRT_ATTN_FUSE_POST=1 runs only with the default decode attention (not with "
                 "MLXRT_ATTN_ONEPASS, MLXRT_ATTN_SCORES, MLXRT_ATTN_PV or MLXRT_ATTN_PV_DEEP)");
    goto fail;
  }
  int H = d->hidden, L = d->n_layers, sms = cudab_device(b)->sms;
  int64_t max_rows = H, max_cols = H, max_q = 0, max_hd = 0, max_splits = 1, max_inter = 0;
  if (accel_check_weight(d->embed, d->vocab, H, "embedding", -1, err) ||
      accel_check_weight(d->lm_head, d->vocab, H, "lm_head", -1, err))
    goto fail;
  if (!(D->ly = mx_calloc((size_t)L, sizeof *D->ly, err))) goto fail;
  for (int i = 0; i < L; i++) {
    const accel_layer_desc *l = &d->layers[i];
    dec_layer *y = &D->ly[i];
    if (l->n_kv_heads <= 0 || d->n_heads % l->n_kv_heads || d->n_heads / l->n_kv_heads > 16 ||
        l->head_dim <= 0 || l->head_dim > 1024 || l->head_dim % 2 ||
        (int64_t)(d->n_heads / l->n_kv_heads) * l->head_dim * 4 > 48 * 1024) {
      mx_fail(err, "CUDA decoder: layer %d: %d query heads over %d KV heads of dim %d are not supported", i,
              d->n_heads, l->n_kv_heads, l->head_dim);
      goto fail;
    }
    int64_t qd = (int64_t)d->n_heads * l->head_dim, kvd = (int64_t)l->n_kv_heads * l->head_dim;
    if (accel_check_layer_weights(d, i, err)) goto fail;
    if (D->attn_onepass && !dk_attention_onepass_supports(d->n_heads / l->n_kv_heads, l->head_dim)) {
      mx_fail(err, "MLXRT_ATTN_ONEPASS=1: layer %d's %d query heads per KV head of dim %d are not supported by the "
              "one-pass attention", i, d->n_heads / l->n_kv_heads, l->head_dim);
      goto fail;
    }
    y->hd = l->head_dim;
    y->nkv = l->n_kv_heads;
    y->inter = l->intermediate;
    y->window = l->sliding && d->sliding_window > 0 && d->sliding_window < capacity ? d->sliding_window : 0;
    int64_t slots = y->window > 0 ? y->window : capacity;
    int64_t ctx = l->sliding && d->sliding_window > 0 && d->sliding_window < capacity ? d->sliding_window : capacity;
    /* enough splits that both passes (one block per KV head and split) put split_blocks
     * blocks on every SM at long contexts — one wave of the scores kernel, whose 119
     * registers allow 4 blocks of 128 threads per SM — with at least split_keys keys per
     * split; the kernels keep at least split_keys keys per split at every position, so a
     * session made for a long context runs few, full splits while its context is short.
     * H200, 31B tg128 at depths 0 / 32768 (session 8): 16 keys / 4 per SM 121.6 / 102.0 t/s,
     * 32 keys / 8 per SM 118.8 / 98.5 (the split shape changes the softmax's summation
     * order, so the logits hash; docs/PERF.md) */
    int64_t sp = (ctx + D->split_keys - 1) / D->split_keys,
            cap_sp = ((int64_t)split_blocks * sms + l->n_kv_heads - 1) / l->n_kv_heads;
    if (sp > cap_sp) sp = cap_sp;
    if (sp > max_splits_knob) sp = max_splits_knob;
    y->splits = (int)sp;
    if (sp > max_splits) max_splits = sp;
    /* the short-context graph runs while position + 1 ≤ cluster_keys, so no layer sees more keys
     * there, whatever the session's capacity */
    y->ckeys = ctx < D->cluster_keys ? ctx : D->cluster_keys;
    y->cluster = D->attn_cluster && dk_attention_cluster_fits_s(d->n_heads, l->n_kv_heads, l->head_dim, y->ckeys,
                                                                stage_mode(D, D->attn_stage & 1, 0));
    y->lkeys = D->attn_cluster && (D->attn_stage & 2) &&
                       dk_attention_cluster_fits_s(d->n_heads, l->n_kv_heads, l->head_dim, ctx, stage_mode(D, 1, 1))
                   ? ctx
                   : 0;
    /* smax holds the cluster kernel's block maxima: (blocks per cluster)·nkv */
    const int cl_long = dk_attention_cluster_size(y->lkeys ? stage_mode(D, 1, 1) : 0),
              cl_short = dk_attention_cluster_size(y->cluster ? stage_mode(D, D->attn_stage & 1, 0) : 0),
              cl_blocks = cl_long > cl_short ? cl_long : cl_short;
    if ((y->cluster || y->lkeys) && max_splits < cl_blocks) max_splits = cl_blocks;
    D->any_cluster |= y->cluster;
    /* sliding layer with a window ≥ capacity: a plain buffer of capacity positions */
    const accel_weight *qkv[3] = {l->q, l->k, l->v};
    const accel_weight *gu[2] = {l->gate, l->up};
    /* GeGLU in gate|up's epilogue: one fast-format weight of interleaved rows, no k split */
    const int gu_il = D->geglu_epi && !D->geglu_prep && same_format(&l->gate->spec, &l->up->spec) &&
                              l->gate->spec.rows == l->up->spec.rows && l->gate->spec.rows % 8 == 0
                          ? 8
                          : 0;
    if (make_mv(D, qkv, l->k_eq_v ? 2 : 3, "q|k|v", i, &y->qkv, err) ||
        make_mv_il(D, gu, 2, "gate|up", i, gu_il, &y->gu, err) || make_mv(D, &l->o, 1, "o_proj", i, &y->o, err) ||
        make_mv(D, &l->down, 1, "down_proj", i, &y->down, err))
      goto fail;
    /* o's prep exponent fixed by the attention's bound (MLXRT_ATTN_FIXEXP; o_fixed_exp) */
    if (D->attn_fixexp && y->o.n == 1 && y->o.L[0]->fmt != CK_GENERIC)
      y->o.fix_e = y->o.L[0]->fmt == CK_DBF16 ? 0 : d->v_norm ? o_fixed_exp(l->head_dim) : CK_XE_ROWMAX;
    y->gu_il = gu_il;
    y->gu_epi = gu_il && y->gu.n == 1 && y->gu.L[0]->fmt != CK_GENERIC && y->gu.ks == 1;
    if (y->gu_epi && l->intermediate > max_inter) max_inter = l->intermediate;
    int64_t rows = qd + 2 * kvd;
    if (rows > max_rows) max_rows = rows;
    if (2 * (int64_t)l->intermediate > max_rows) max_rows = 2 * (int64_t)l->intermediate;
    if (qd > max_cols) max_cols = qd;
    if (l->intermediate > max_cols) max_cols = l->intermediate;
    if (qd > max_q) max_q = qd;
    if (l->head_dim > max_hd) max_hd = l->head_dim;
    DALLOC(y->norms, 4 * (int64_t)H + 2 * l->head_dim);
    DALLOC(y->inv_freq, l->head_dim / 2);
    DALLOC(y->kc, slots * kvd);
    DALLOC(y->vc, slots * kvd);
    const float *vs[4] = {l->input_norm, l->post_attn_norm, l->pre_ffw_norm, l->post_ffw_norm};
    y->xe_in = norm_fixed_exp(l->input_norm, H);
    y->xe_ffw = norm_fixed_exp(l->pre_ffw_norm, H);
    for (int k = 0; k < 4; k++)
      if (upload_floats(D, y->norms + (int64_t)k * H, vs[k], H, err)) goto fail;
    if (upload_floats(D, y->norms + 4 * (int64_t)H, l->q_norm, l->head_dim, err) ||
        upload_floats(D, y->norms + 4 * (int64_t)H + l->head_dim, l->k_norm, l->head_dim, err) ||
        upload_floats(D, y->inv_freq, l->inv_freq, l->head_dim / 2, err))
      goto fail;
  }
  if (!(D->embed = cudab_resident(b, d->embed, err)) || make_mv(D, &d->lm_head, 1, "lm_head", -1, &D->head, err))
    goto fail;
  D->xe_final = norm_fixed_exp(d->final_norm, H);
  DALLOC(D->final_norm, H);
  if (upload_floats(D, D->final_norm, d->final_norm, H, err)) goto fail;

  /* x prep scratch for the widest input of any weight used */
  int64_t kp = max_cols + 128;
  int64_t nb = dk_logits_blocks(d->vocab);
  DALLOC(D->all_tokens, capacity);
  DALLOC(D->tok, 1);
  DALLOC(D->next, 1);
  DALLOC(D->pos, 1);
  DALLOC(D->emb, H);
  DALLOC(D->xb, max_cols);
  DALLOC(D->attb, max_q);
  DALLOC(D->gub, max_cols);
  DALLOC(D->h, H);
  DALLOC(D->y, max_rows * D->max_ks);
  DALLOC(D->q, max_q);
  DALLOC(D->ylog, d->vocab);
  DALLOC(D->logits, d->vocab);
  DALLOC(D->xp, kp * 8);
  DALLOC(D->xs, (kp / 32 + 1) * 8);
  DALLOC(D->pmax, ck_xprep_pmax_floats(kp));
  if (max_inter) DALLOC(D->gmax, ck_xprep_pmax_floats(max_inter));
  DALLOC(D->xexp, 8);
  DALLOC(D->scores, (int64_t)d->n_heads * capacity);
  DALLOC(D->smax, (int64_t)d->n_heads * max_splits);
  DALLOC(D->ssum, (int64_t)d->n_heads * max_splits);
  DALLOC(D->pacc, (int64_t)d->n_heads * max_splits * max_hd);
  DALLOC(D->part_v, nb);
  DALLOC(D->part_i, nb);
  DALLOC(D->counts, d->n_heads + 1);
  if (rt_memset(D->counts, 0, (size_t)(d->n_heads + 1) * sizeof(unsigned), D->stream, err)) goto fail;
  if (d->vocab <= ACCEL_SAMPLE_MAX_VOCAB &&
      (rt_malloc(&D->sk_state, sk_state_bytes(), err) || rt_memset(D->sk_state, 0, sk_state_bytes(), D->stream, err)))
    goto fail;
  if (rt_host_alloc((void **)&D->h_toks, STAGE_TOKENS * sizeof(int32_t), err) ||
      rt_host_alloc((void **)&D->h_pos, sizeof(int), err) ||
      rt_host_alloc((void **)&D->h_next, sizeof(int32_t), err) ||
      rt_host_alloc((void **)&D->h_logits, (size_t)d->vocab * sizeof(float), err) ||
      rt_stream_sync(D->stream, err))
    goto fail;
  /* the prompt pass's buffers and cuBLAS handle now, so no prompt pays for them */
  if (dec_prefill_enabled() && dec_prefill_init(D, err)) goto fail;
  return D;
fail:
  mx_prefix(err, "CUDA decoder");
  cuda_decoder_free(D);
  return NULL;
}

/* ---- one step's work ------------------------------------------------------------------------ */
static const char *const lab_sliding[9] = {"sliding: q|k|v mat-vec", "sliding: q/k/v norm+rope", "sliding: attention",
                                           "sliding: o mat-vec", "sliding: attn residual+norm",
                                           "sliding: gate|up mat-vec", "sliding: geglu", "sliding: down mat-vec",
                                           "sliding: ffn residual+norm"};
static const char *const lab_full[9] = {"full: q|k|v mat-vec", "full: q/k/v norm+rope", "full: attention",
                                        "full: o mat-vec", "full: attn residual+norm", "full: gate|up mat-vec",
                                        "full: geglu", "full: down mat-vec", "full: ffn residual+norm"};

/* dk_attention's p·v bits for this step's body graph (kpath bit 4: tensor cores, bit 8: bulk copies) */
static int pv_bits(const accel_decoder *D) {
  const int pv = D->deep_ctx ? D->deep_pv : D->attn_pv_tc;
  return pv == 1 ? 4 : pv == 2 ? 8 : 0;
}

/* Whether this step's attention of layer y writes o's activation prep itself (D->attn_oprep:
 * the one-launch form, one o weight whose prep needs no group sums), with o_fixed_exp's
 * exponent where V is RMS-normalized (fp16 keeps every bf16 value down to 2^(−25−e) exactly,
 * against 2^(−25−e') with the row maximum's e' ≥ e: below that the two preps may differ in a
 * value's last bits). Dense bf16 o weights take x as it is (no exponent). */
static int attn_writes_o_prep(const accel_decoder *D, const dec_layer *y) {
  return D->attn_oprep && y->cluster && D->short_ctx && y->o.n == 1 && y->o.ks == 1 &&
         (y->o.xmode == 2 || (y->o.xmode == 1 && D->d->v_norm)) && ((int64_t)D->d->n_heads * y->hd) % 32 == 0;
}
static int o_prep_exp(const dec_layer *y) { return y->o.xmode == 1 ? o_fixed_exp(y->hd) : 0; }

/* A layer's q/k/v post step and decode attention (one kernel fewer with D->fuse_post). */
static int enqueue_attention(accel_decoder *D, const accel_layer_desc *l, dec_layer *y, const char *const *lb,
                             float *amax, int namax, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const int H = d->hidden, nq = d->n_heads;
  const float *nrm = y->norms;
  void *st = D->stream;
  cprof *P = &D->prof;
  if (D->fuse_post) {
    const dk_post pp = {D->y, y->qkv.ks, y->qkv.rows, nq, l->k_eq_v, nrm + 4 * (int64_t)H, nrm + 4 * (int64_t)H + y->hd,
                        y->inv_freq, d->rope_traditional, d->v_norm, d->eps};
    return cprof_mark(P, lb[2], err) ||
           rt_status(dk_attention_post(&pp, y->kc, y->vc, nq, y->nkv, y->hd, d->attn_scale, D->pos, y->window, y->splits,
                                       D->split_keys, D->capacity, D->scores, D->smax, D->ssum, D->pacc, D->counts,
                                       D->attb, amax, namax, st),
                     "q/k/v post + attention", err);
  }
  const int oprep = attn_writes_o_prep(D, y);
  const dk_att_prep o_prep = {D->xp, D->xexp, o_prep_exp(y), y->o.xmode};
  const int short_cl = y->cluster && D->short_ctx;
  if (short_cl || y->lkeys) {
    const int stage = dk_get_attn_cluster_stage();
    dk_set_attn_cluster_stage(short_cl ? stage_mode(D, D->attn_stage & 1, 0) : stage_mode(D, 1, 1));
    const int64_t keys = short_cl ? y->ckeys : y->lkeys;
    /* MLXRT_ATTN_CLUSTER_POST=1: the attention makes the post step itself (the same bits) */
    const int in_post = D->cluster_post && dk_attention_cluster_post_fits(nq, y->nkv, y->hd, keys);
    const dk_att_post pp = {D->y, y->qkv.ks, y->qkv.rows, nrm + 4 * (int64_t)H, nrm + 4 * (int64_t)H + y->hd,
                            y->inv_freq, d->rope_traditional, d->v_norm, l->k_eq_v, d->eps, y->kc, y->vc};
    const int rc =
        (!in_post &&
         (cprof_mark(P, lb[1], err) ||
          rt_status(dk_qkv_post(D->y, y->qkv.ks, y->qkv.rows, nq, y->nkv, y->hd, l->k_eq_v, nrm + 4 * (int64_t)H,
                                nrm + 4 * (int64_t)H + y->hd, y->inv_freq, d->rope_traditional, d->v_norm, d->eps,
                                D->pos, y->window, D->q, y->kc, y->vc, st),
                    "q/k/v norm+rope", err))) ||
        cprof_mark(P, lb[2], err) ||
        rt_status(dk_attention_cluster_ex(D->q, y->kc, y->vc, nq, y->nkv, y->hd, d->attn_scale, D->pos, y->window, keys,
                                          D->attb, oprep ? NULL : amax, namax, D->smax, D->counts,
                                          oprep ? &o_prep : NULL, in_post ? &pp : NULL, st),
                  "attention (one cluster)", err);
    dk_set_attn_cluster_stage(stage);
    return rc;
  }
  return cprof_mark(P, lb[1], err) ||
         rt_status(dk_qkv_post(D->y, y->qkv.ks, y->qkv.rows, nq, y->nkv, y->hd, l->k_eq_v, nrm + 4 * (int64_t)H, nrm + 4 * (int64_t)H + y->hd,
                               y->inv_freq, d->rope_traditional, d->v_norm, d->eps, D->pos, y->window, D->q,
                               y->kc, y->vc, st),
                   "q/k/v norm+rope", err) ||
         cprof_mark(P, lb[2], err) ||
         rt_status(D->attn_onepass
                       ? dk_attention_onepass(D->q, y->kc, y->vc, nq, y->nkv, y->hd, d->attn_scale, D->pos, y->window,
                                              y->splits, D->split_keys, D->smax, D->ssum, D->pacc, D->attb, amax, namax, st)
                       : dk_attention(D->q, y->kc, y->vc, nq, y->nkv, y->hd, d->attn_scale, D->pos, y->window,
                                      y->splits, D->split_keys, D->attn_kpath | pv_bits(D), D->capacity, D->scores, D->smax, D->ssum, D->pacc, D->counts,
                                      D->attb, amax, namax, st),
                   "attention", err);
}

/* The blocks of down's activation prep (ck_qmv_geglu's maxima, D->gmax). */
static int gu_nblk(const dec_layer *y) { return (int)((y->inter + ck_xprep_block() - 1) / ck_xprep_block()); }

/* gate|up, geglu, then the down product. With y->gu_epi the product's epilogue makes the
 * activation and its prep maxima (ck_qmv_geglu; D->gmax, which the residual norm before it
 * zeroed): no geglu kernel. With D->geglu_prep (and a down weight whose prep the producer can
 * write), geglu writes down's activation prep itself and no prep kernel runs between. */
static int enqueue_ffn_act(accel_decoder *D, dec_layer *y, const char *const *lb, mlxrt_error *err) {
  void *st = D->stream;
  if (y->gu_epi) {
    const ck_layout *G = y->gu.L[0];
    const int early = ck_get_qmv_early(), stages = ck_get_qmv_stages(), warps = ck_get_qmv_warps();
    if (!y->gu.xmode && rt_status(ck_xprep_premax(G, D->xb, D->xp, D->xs, D->xexp, D->pmax, st), "x prep launch", err))
      return -1;
    if (y->gu.xmode && D->early_norm >= 0) ck_set_qmv_early(D->early_norm); /* as run_mv does */
    if (y->gu.stages) ck_set_qmv_stages(y->gu.stages);
    if (y->gu.warps) ck_set_qmv_warps(y->gu.warps);
    const int rc = ck_qmv_geglu(G, D->xp, D->xs, D->xexp, D->gub, D->gmax, ck_xprep_block(), st);
    ck_set_qmv_early(early);
    ck_set_qmv_stages(stages);
    ck_set_qmv_warps(warps);
    if (rt_status(rc, "gate|up + geglu launch", err) || cprof_mark(&D->prof, lb[7], err)) return -1;
    /* down's prep from those maxima (the graph keeps the pointer run_mv reads) */
    float *pmax = D->pmax;
    D->pmax = D->gmax;
    const int r = run_mv(D, &y->down, D->gub, D->y, XP_PREMAX, err);
    D->pmax = pmax;
    return r;
  }
  if (run_mv(D, &y->gu, D->xb, D->y, y->gu.xmode ? XP_DONE : XP_PREMAX, err) || cprof_mark(&D->prof, lb[6], err))
    return -1;
  if (D->geglu_prep && y->down.xmode && dk_geglu_prep_ok(y->inter))
    return rt_status(dk_geglu_prep(D->y, D->y + y->inter, y->gu.ks, y->gu.rows, D->gub, y->inter, D->xp, D->xexp,
                                   y->down.xmode, st),
                     "geglu + down's x prep", err) ||
           cprof_mark(&D->prof, lb[7], err) || run_mv(D, &y->down, D->gub, D->y, XP_DONE, err);
  return rt_status(dk_geglu(D->y, D->y + (y->gu_il ? y->gu_il : y->inter), y->gu.ks, y->gu.rows, D->gub, y->inter, D->pmax,
                           ck_xprep_block(), y->gu_il, st),
                   "geglu", err) ||
         cprof_mark(&D->prof, lb[7], err) || run_mv(D, &y->down, D->gub, D->y, XP_PREMAX, err);
}

static int enqueue_body(accel_decoder *D, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  int H = d->hidden, nq = d->n_heads, pb = ck_xprep_block();
  void *st = D->stream;
  cprof *P = &D->prof;
  const int xe0 = norm_xe(D, &D->ly[0].qkv, D->ly[0].xe_in);
  if (cprof_mark(P, "embed + input norm", err) ||
      rt_status(dk_step_begin(D->all_tokens, D->pos, D->tok, st), "step begin", err) ||
      rt_status(ck_embed(D->embed, D->tok, 1, D->emb, st), "embedding gather", err) ||
      rt_status(dk_embed_scale(D->emb, D->h, H, d->embed_scale, st), "embedding scale", err) ||
      rt_status(dk_residual_norm(NULL, 1, 0, NULL, D->h, 0, 0.0f, D->ly[0].norms, D->xb, H, d->eps,
                                 norm_pmax(D, xe0), pb, D->xp, D->xexp, D->ly[0].qkv.xmode, xe0, NULL, 0, st),
                "input norm", err))
    return -1;
  for (int i = 0; i < d->n_layers; i++) {
    const accel_layer_desc *l = &d->layers[i];
    dec_layer *y = &D->ly[i];
    const float *nrm = y->norms;
    int last = i == d->n_layers - 1;
    const float *next_norm = last ? D->final_norm : D->ly[i + 1].norms;
    const char *const *lb = l->sliding ? lab_sliding : lab_full;
    const dec_mv *next_mv = last ? &D->head : &D->ly[i + 1].qkv; /* what the FFN residual's norm feeds */
    /* o's x-prep maxima, from the attention (none when o's prep takes a fixed exponent) */
    float *amax = D->attn_xmax && y->o.fix_e == CK_XE_ROWMAX ? D->pmax : NULL;
    const int namax = (int)(((int64_t)nq * y->hd + pb - 1) / pb);
    const int xe_gu = norm_xe(D, &y->gu, y->xe_ffw), xe_next = norm_xe(D, next_mv, last ? D->xe_final : D->ly[i + 1].xe_in);
    if (cprof_mark(P, lb[0], err) || run_mv(D, &y->qkv, D->xb, D->y, y->qkv.xmode ? XP_DONE : XP_PREMAX, err) ||
        enqueue_attention(D, l, y, lb, amax, namax, err) ||
        cprof_mark(P, lb[3], err) ||
        run_mv(D, &y->o, D->attb, D->y,
               attn_writes_o_prep(D, y)           ? XP_DONE
               : y->o.fix_e != CK_XE_ROWMAX ? XP_FIXED
               : amax                             ? XP_PREMAX
                                                  : XP_FULL,
               err) ||
        cprof_mark(P, lb[4], err) ||
        rt_status(dk_residual_norm(D->y, y->o.ks, y->o.rows, nrm + H, D->h, 0, 0.0f, nrm + 2 * (int64_t)H, D->xb, H, d->eps,
                                   norm_pmax(D, xe_gu), pb, D->xp, D->xexp, y->gu.xmode, xe_gu,
                                   y->gu_epi ? D->gmax : NULL, y->gu_epi ? gu_nblk(y) : 0, st),
                  "attention residual", err) ||
        cprof_mark(P, lb[5], err) || enqueue_ffn_act(D, y, lb, err) ||
        cprof_mark(P, lb[8], err) ||
        rt_status(dk_residual_norm(D->y, y->down.ks, y->down.rows, nrm + 3 * (int64_t)H, D->h, d->has_layer_scalar, l->layer_scalar,
                                   next_norm, D->xb, H, d->eps, norm_pmax(D, xe_next), pb, D->xp, D->xexp, next_mv->xmode,
                                   xe_next, NULL, 0, st),
                  "FFN residual", err))
      return mx_prefix(err, "layer %d", i);
  }
  return cprof_mark(P, "step end", err) || rt_status(dk_step_end(D->pos, st), "step end", err);
}

/* After the body: xb holds bf16 final_norm(h) of the last token. */
static int enqueue_head(accel_decoder *D, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  return cprof_mark(&D->prof, "lm_head mat-vec", err) || run_mv(D, &D->head, D->xb, D->ylog, D->head.xmode ? XP_DONE : XP_PREMAX, err) ||
         cprof_mark(&D->prof, "logits + argmax", err) ||
         rt_status(dk_logits(D->ylog, D->logits, d->vocab, d->final_softcap, D->part_v, D->part_i,
                             D->counts + d->n_heads, D->next, D->stream),
                   "logits", err);
}

/* The step's kernels may overlap their predecessors' tails while the decoder enqueues them. */
static int enqueue_pdl_body(accel_decoder *D, mlxrt_error *err) {
  ck_set_pdl(D->use_pdl);
  int rc = enqueue_body(D, err);
  ck_set_pdl(0);
  return rc;
}

static int enqueue_pdl_head(accel_decoder *D, mlxrt_error *err) {
  ck_set_pdl(D->use_pdl);
  int rc = enqueue_head(D, err);
  ck_set_pdl(0);
  return rc;
}

/* Eager the first time (occupancy queries and lazy module loading happen outside any
 * capture), then captured once and replayed. */
static int launch(accel_decoder *D, int head, mlxrt_error *err) {
  int (*enq)(accel_decoder *, mlxrt_error *) = head ? enqueue_pdl_head : enqueue_pdl_body;
  const int b = D->short_ctx ? 1 : D->deep_ctx ? 2 : 0;
  void **graph = head ? &D->g_head : &D->g_body[b];
  int *warm = head ? &D->warm_head : &D->warm_body[b];
  const int tg = head ? CTL_HEAD : b == 1 ? 2 : b == 2 ? 3 : 0; /* the timeline's graph id */
  if (!D->use_graph || !*warm) {
    *warm = 1;
    return enq(D, err);
  }
  if (!*graph) {
    /* a capture that fails (nothing ran) falls back to eager launches, said once */
    mlxrt_error ce = {0}, e2;
    void *exec = NULL;
    int rc = rt_graph_begin(D->stream, &ce);
    if (!rc) {
      ctl_capture_begin(tg);
      rc = enq(D, &ce);
      ctl_capture_end();
      if (rt_graph_end(D->stream, &exec, rc ? &e2 : &ce)) rc = -1;
    }
    if (rc) {
      rt_graph_destroy(exec);
      fprintf(stderr, "mlxrt cuda: decode graph capture failed (%s); running without graphs\n", ce.msg);
      D->use_graph = 0;
      return enq(D, err);
    }
    *graph = exec;
  }
  return ctl_replay_begin(tg, D->stream, err) || rt_graph_launch(*graph, D->stream, err) ||
         ctl_replay_end(D->stream, err);
}


int cuda_decoder_step(accel_decoder *D, const int32_t *tokens, int64_t n, int64_t pos, float *logits,
                      int32_t *next_token, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  if (n <= 0) return mx_fail(err, "decoder: step of %lld tokens", (long long)n);
  if (pos < 0 || pos + n > D->capacity)
    return mx_fail(err, "decoder: positions %lld..%lld outside the capacity of %lld", (long long)pos,
                   (long long)(pos + n - 1), (long long)D->capacity);
  for (int64_t i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= d->vocab)
      return mx_fail(err, "decoder: token id %d at position %lld is outside the vocabulary [0, %d)",
                     tokens[i], (long long)(pos + i), d->vocab);
  int64_t fed = 0; /* tokens already through the batched prompt pass */
  if (n > 1 && dec_prefill_enabled()) {
    if (dec_prefill_run(D, tokens, n, pos, err)) return mx_prefix(err, "CUDA decoder prompt of %lld tokens", (long long)n);
    fed = n;
  }
  for (int64_t done = fed; done < n;) {
    int64_t k = n - done < STAGE_TOKENS ? n - done : STAGE_TOKENS;
    memcpy(D->h_toks, tokens + done, (size_t)k * sizeof(int32_t));
    *D->h_pos = (int)(pos + done);
    if (rt_h2d(D->all_tokens + pos + done, D->h_toks, (size_t)k * sizeof(int32_t), D->stream, err) ||
        rt_h2d(D->pos, D->h_pos, sizeof(int), D->stream, err))
      return mx_prefix(err, "CUDA decoder");
    for (int64_t i = 0; i < k; i++) {
      /* the one-cluster attention while every layer's live keys (at most position + 1) are few */
      D->short_ctx = D->any_cluster && pos + done + i + 1 <= D->cluster_keys;
      /* the deep contexts' p·v pass once the live keys exceed deep_keys */
      D->deep_ctx = !D->short_ctx && D->deep_pv != D->attn_pv_tc && pos + done + i + 1 > D->deep_keys;
      if (launch(D, 0, err) || cprof_flush(&D->prof, err))
        return mx_prefix(err, "CUDA decoder at position %lld", (long long)(pos + done + i));
    }
    done += k;
    /* the staging buffers are refilled for the next chunk, or by the next call when no head
     * follows (the head's own wait covers the last chunk's copies) */
    if ((done < n || (!logits && !next_token)) && rt_stream_sync(D->stream, err)) return mx_prefix(err, "CUDA decoder");
  }
  if (!logits && !next_token) return 0;
  if (launch(D, 1, err) || cprof_flush(&D->prof, err) || rt_d2h(D->h_next, D->next, sizeof(int32_t), D->stream, err) ||
      (logits && rt_d2h(D->h_logits, D->logits, (size_t)d->vocab * sizeof(float), D->stream, err)) ||
      rt_stream_sync(D->stream, err))
    return mx_prefix(err, "CUDA decoder head");
  if (next_token) *next_token = *D->h_next;
  if (logits) memcpy(logits, D->h_logits, (size_t)d->vocab * sizeof(float));
  return 0;
}

/* decoder_step_sample: the body and the head as in a greedy step, then the selection of
 * accel_sample.h on the device over the head's logits (sample.cu, launched eagerly with its
 * parameters and u by value: while the step's graphs run these launches cost no GPU time),
 * overwriting the greedy id; only that id is read back. */
int cuda_decoder_step_sample(accel_decoder *D, const int32_t *tokens, int64_t n, int64_t pos,
                             const accel_sample_params *sp, double u, int32_t *token, mlxrt_error *err) {
  accel_sample_plan pl;
  if (!D->sk_state) return mx_fail(err, "CUDA decoder: no device sampling for a vocabulary of %d", D->d->vocab);
  if (accel_sample_plan_make(sp, D->d->vocab, u, &pl, err)) return mx_prefix(err, "CUDA decoder");
  sk_params kp = {pl.greedy, pl.inv_t, pl.use_min_p, pl.log_min_p, pl.top_k, pl.use_top_p, pl.top_p, pl.x53};
  if (cuda_decoder_step(D, tokens, n, pos, NULL, NULL, err)) return -1;
  if (launch(D, 1, err) || cprof_mark(&D->prof, "sampling", err) ||
      rt_status(sk_sample(D->logits, D->d->vocab, &kp, D->sk_state, D->next, D->stream), "sampling", err) ||
      cprof_flush(&D->prof, err) || rt_d2h(D->h_next, D->next, sizeof(int32_t), D->stream, err) ||
      rt_stream_sync(D->stream, err))
    return mx_prefix(err, "CUDA decoder head");
  if (*D->h_next < 0) return mx_fail(err, "CUDA decoder: every logit is -inf or NaN, no token can be chosen");
  *token = *D->h_next;
  return 0;
}
