/* The CUDA whole-step decoder: a dense Gemma 3 / Gemma 4 decode step resident on the device.
 *
 * At creation: q|k|v (q|k when k_eq_v) and gate|up are concatenated row-wise from the MLX
 * parts and uploaded as one weight each (one mat-vec launch per group; the separate weights
 * are never uploaded), the small vectors and RoPE tables are copied once, and every work
 * buffer and the sliding layers' KV rings (sliding_window + ACCEL_RING_SLACK positions,
 * accel_ring.h) are allocated once. The
 * full-attention layers' K and V are reserved for `capacity` positions and backed by pages as
 * the context grows (kv_grow).
 *
 * A step is two CUDA graphs captured once and replayed: the body (embedding gather of
 * all_tokens[*pos], every layer, (*pos)++) and the head (final norm, lm_head, softcap,
 * argmax). The body has three forms, picked per position by the host (the one-cluster
 * attention while few keys are live, the split passes, and the deep contexts' forms: one pass
 * over K from V, p·v streamed by bulk copies over bf16 K), each captured the first time a step needs it. The position lives in device memory,
 * so the same graphs serve every position;
 * a prompt of n > 1 tokens runs through the batched prompt pass (dec_prefill_run in
 * cuda_decoder_prefill.c: chunks of up to 512 tokens), then the head once. Only the token id
 * (and the logits when asked) is read back. Each decoder has its own stream, so decoders of
 * one backend in several threads capture and replay independently. Tuning constants:
 * tuning.h. */
#include "cuda_decoder_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel_ring.h"
#include "accel/kv_codec.h"
#include "cuda_timeline.h"
#include "cuda_timeline_agg.h" /* the timeline's graph ids */
#include "tuning.h"

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
  /* stacked parts: slab by slab (each slab holds every part's rows of that expert) */
  const int64_t slabs = c->w[0]->spec.experts > 0 ? c->w[0]->spec.experts : 1;
  size_t at = 0;
  for (int i = 0; i < c->n; i++) {
    size_t want = accel_part_bytes(&c->w[i]->spec, part), got = 0;
    if (!want) continue;
    const char *p = c->w[i]->load(c->w[i]->load_ctx, part, &got, err);
    if (!p) return NULL;
    if (got != want) {
      mx_fail(err, "%s: part has %zu bytes, expected %zu", c->w[i]->name ? c->w[i]->name : "weight", got, want);
      return NULL;
    }
    const size_t slab_in = want / (size_t)slabs, slab_out = total / (size_t)slabs;
    for (int64_t x = 0; x < slabs; x++, p += slab_in) {
      char *o = out + (size_t)x * slab_out;
      if (c->il) { /* each part's rows are row-major in every part (codes, scales, biases) */
        const int64_t rows = c->w[i]->spec.rows;
        const size_t row = slab_in / (size_t)rows, chunk = row * (size_t)c->il;
        for (int64_t r = 0; r < rows; r += c->il)
          memcpy(o + (size_t)(r * c->n + (int64_t)i * c->il) * row, p + (size_t)r * row, chunk);
      } else {
        memcpy(o + at, p, slab_in);
      }
    }
    at += want / (size_t)slabs;
  }
  *nbytes = total;
  return out;
}

int dec_same_format(const accel_spec *a, const accel_spec *b) {
  if (a->mode != b->mode || a->cols != b->cols || a->experts != b->experts) return 0;
  if (a->mode == ACCEL_MODE_DENSE) return a->dense_dtype == b->dense_dtype;
  if (a->bits != b->bits || a->group_size != b->group_size) return 0;
  return a->mode != ACCEL_MODE_AFFINE || a->scales_dtype == b->scales_dtype;
}

/* k splits of a mat-vec over several blocks per 16-row tile. A product of one wave (its tiles
 * fit the resident blocks at once) runs as long as its fullest SM: down and o of the 31B (336
 * tiles on 132 SMs) put 3 blocks on some SMs and 2 on others, 85 % of the even share. The
 * split with the best balance that still fits one wave is taken where it beats no split by
 * 2 % or more and each block streams at least KS_MIN_UNITS units (tuning.h). The split changes
 * the float sums' grouping, so the bits (deterministic either way). */
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
  mv->fix_e = CK_XE_ROWMAX;
  mv->rows = 0;
  for (int i = 0; i < mv->n; i++) mv->rows += mv->L[i]->rows;
  /* lm_head's consumer (dk_logits) reads one output, and gate|up's GeGLU epilogue needs whole
   * sums: never split */
  if (mv->n != 1 || L->fmt == CK_GENERIC || !strcmp(what, "lm_head") || !strcmp(what, "gate|up")) return;
  int ks = balanced_split(L);
  if (ks > L->nunits) ks = (int)L->nunits;
  mv->ks = ks;
  if (ks > D->max_ks) D->max_ks = ks;
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
  for (int i = 1; i < n; i++) same &= dec_same_format(&ws[0]->spec, &ws[i]->spec);
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
  if (!(mv->L[0] = dec_upload_cat(D, ws, n, il, what, layer, err))) return -1;
  mv->off[0] = 0;
  mv->n = 1;
  choose_split(D, mv, what);
  mv->xmode = mv_xmode(mv);
  return 0;
}

const ck_layout *dec_upload_cat(accel_decoder *D, const accel_weight *const *ws, int n, int il, const char *what,
                                int layer, mlxrt_error *err) {
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
  const ck_layout *L = cudab_resident(D->b, &cw, err);
  for (int i = 0; i < 3; i++) free(c.buf[i]);
  return L;
}

int dec_make_mv(accel_decoder *D, const accel_weight *const *ws, int n, const char *what, int layer, dec_mv *mv,
                mlxrt_error *err) {
  return make_mv_il(D, ws, n, what, layer, 0, mv, err);
}

int dec_run_mv(accel_decoder *D, const dec_mv *mv, const uint16_t *x, float *y, int premax, mlxrt_error *err) {
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
int dec_norm_fixed_exp(const float *w, int H) {
  float m = 0.0f;
  for (int i = 0; i < H; i++) m = fmaxf(m, fabsf(w[i]));
  if (!(m > 0.0f) || !isfinite(m)) return DK_XE_ROWMAX;
  int k = 0;
  frexpf(2.0f * sqrtf((float)H) * m, &k);
  return 15 - k;
}
/* The exponent a residual norm that writes the prep of mv should use (dk_residual_norm's
 * xe_fixed): fixed by the norm weight's bound, for a prep that needs no group sums (no third
 * exchange of maxima: tg128 +1.0 %, the same logits bits); 0 for dense bf16 (unscaled either
 * way). */
static int norm_xe(const dec_mv *mv, int xe) {
  if (!mv->xmode) return DK_XE_ROWMAX;
  return mv->xmode == 2 ? 0 : xe;
}

/* The block maxima a residual norm writes: none with a fixed exponent (nothing reads them). */
static float *norm_pmax(const accel_decoder *D, int xe) { return xe == DK_XE_ROWMAX ? D->pmax : NULL; }

/* ---- lifecycle ------------------------------------------------------------------------------ */
void cuda_decoder_free(accel_decoder *D) {
  if (!D) return;
  if (D->stream) {
    mlxrt_error ignore;
    rt_stream_sync(D->stream, &ignore);
  }
  /* the timeline reads its stamps back on D->stream: before the streams go */
  if (D->timeline) ctl_report_free("CUDA decoder timeline of the graph replays (MLXRT_CUDA_TIMELINE=1)");
  rt_graph_destroy(D->g_body[0]);
  rt_graph_destroy(D->g_body[1]);
  rt_graph_destroy(D->g_body[2]);
  rt_graph_destroy(D->g_body[3]);
  rt_graph_destroy(D->g_head);
  rt_stream_destroy(D->stream);
  rt_stream_destroy(D->side);
  rt_event_destroy(D->ev_fork);
  rt_event_destroy(D->ev_join);
  rt_event_destroy(D->ev_ple_fork);
  rt_event_destroy(D->ev_ple_join);
  cprof_report_free(&D->prof, "CUDA decoder profile (MLXRT_CUDA_PROFILE=1)");
  dec_batch_free(D);
  dec_prefill_free(D);
  dec_moe_free(D);
  if (D->ly)
    for (int i = 0; i < D->d->n_layers; i++) {
      rt_free(D->ly[i].norms);
      rt_free(D->ly[i].inv_freq);
      rt_free(D->ly[i].ple_norm);
      if (!D->ly[i].own) continue; /* a KV-shared layer's cache is its source's */
      if (D->ly[i].kvm[0].base) {
        rt_vmem_free(&D->ly[i].kvm[0]);
        rt_vmem_free(&D->ly[i].kvm[1]);
      } else {
        rt_free(D->ly[i].kc);
        rt_free(D->ly[i].vc);
      }
    }
  free(D->ly);
  void *dev[] = {D->ple_xb, D->ple_xp, D->ple_xs, D->ple_pmax, D->ple_y, D->ple_xexp, D->ple_pnorm, D->ple, D->ple_row, D->final_norm, D->all_tokens, D->tok, D->next, D->pos, D->xb, D->attb, D->gub,
                 D->h, D->y, D->q, D->ylog, D->logits, D->xp, D->xs, D->pmax, D->gmax, D->xexp, D->scores,
                 D->smax, D->ssum, D->pacc, D->part_v, D->part_i, D->counts, D->sk_state};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) rt_free(dev[i]);
  rt_host_free(D->h_toks);
  rt_host_free(D->h_pos);
  rt_host_free(D->h_next);
  rt_host_free(D->h_logits);
  rt_free(D->kvc_tab);
  rt_free(D->kvc_flags);
  rt_host_free(D->h_kflags);
  free(D);
}

int dec_upload_floats(accel_decoder *D, float *dst, const float *src, int64_t n, mlxrt_error *err) {
  return rt_h2d(dst, src, (size_t)n * sizeof(float), D->stream, err) || rt_stream_sync(D->stream, err);
}

/* The K/V pages: every owning full-attention layer's K and V are growable arrays
 * (runtime_vmem.c) reserved for the whole capacity and backed by pages as positions are used,
 * KV_MARGIN positions ahead of the last one fed (the attention kernels' tiles read a little past
 * it), at least an eighth more than before each time (a few dozen growths from 1 K to 256 K).
 * Pages are only ever added: their addresses, held by the captured graphs, never change and no
 * byte of the cache moves. Runs before anything of the step is enqueued, so a cache that cannot
 * grow fails the call with nothing changed. */
static int kv_grow(accel_decoder *D, int64_t need, mlxrt_error *err) {
  if (need <= D->kv_positions) return 0;
  int64_t target = need + KV_MARGIN, geo = D->kv_positions + D->kv_positions / 8;
  if (target < geo) target = geo;
  if (target > D->capacity) target = D->capacity;
  const size_t before = D->kv_bytes;
  int64_t backed = D->capacity;
  for (int i = 0; i < D->d->n_layers; i++) {
    dec_layer *y = &D->ly[i];
    if (!y->own || !y->kvm[0].base) continue;
    for (int k = 0; k < 2; k++) {
      if (!y->kvm[k].base) continue;
      /* K's rows are codec blocks where the layer compresses K */
      const size_t row = k == 0 && y->kv.kfmt ? (size_t)y->kv.kps : (size_t)y->kv.ps * sizeof(uint16_t);
      const size_t was = y->kvm[k].mapped;
      if (rt_vmem_grow(&y->kvm[k], (size_t)target * row, err))
        return mx_prefix(err, "CUDA decoder: the KV cache cannot grow to %lld positions (layer %d)", (long long)target, i);
      D->kv_bytes += y->kvm[k].mapped - was;
      if ((int64_t)(y->kvm[k].mapped / row) < backed) backed = (int64_t)(y->kvm[k].mapped / row);
    }
  }
  D->kv_positions = backed;
  if (D->b->verbose && D->kv_bytes != before)
    fprintf(stderr, "mlxrt cuda: KV cache backs %lld of %lld positions: +%.1f MiB of pages, %.1f MiB held\n",
            (long long)backed, (long long)D->capacity, (double)(D->kv_bytes - before) / (1 << 20),
            (double)D->kv_bytes / (1 << 20));
  return 0;
}

/* A layer's cache bytes per position as stored (kv_layout.h): K from V one row of ps elements,
 * a compressed K its blocks beside plain V, else K and V of nkv·hd elements each. */
uint64_t cuda_decoder_kv_read_bytes(accel_decoder *D, int64_t pos) {
  uint64_t b = 0;
  for (int i = 0; i < D->d->n_layers; i++) {
    const dec_layer *y = &D->ly[i];
    const int64_t seen = y->window > 0 && pos + 1 > y->window ? y->window : pos + 1;
    const uint64_t row = y->kv.kfmt  ? (uint64_t)y->kv.kps + (uint64_t)y->nkv * (uint64_t)y->hd * 2u
                         : y->kv.vr ? (uint64_t)y->kv.ps * 2u
                                    : (uint64_t)y->nkv * (uint64_t)y->hd * 4u;
    b += (uint64_t)seen * row;
  }
  return b;
}

int cuda_decoder_memory(accel_decoder *D, accel_memory *m, mlxrt_error *err) {
  size_t free_b = 0, total_b = 0;
  if (rt_mem_info(&free_b, &total_b, err)) return mx_prefix(err, "CUDA decoder");
  /* with batched decode, the slots' pages too (its positions are the decoder's own) */
  *m = (accel_memory){D->kv_bytes + dec_batch_kv_bytes(D), D->kv_positions, total_b - free_b, total_b};
  return 0;
}

/* The memory a context takes on the device beyond the weights before its first token (the
 * sliding rings, the first pages, the attention scores, the token history), checked against
 * what is free before any of it is taken; the pages after those are taken as the context grows
 * and a step that cannot have them fails with the numbers. */
/* The moved pairs per half (kv_layout.h) when layer i keeps K from V, else 0: an owning full-
 * attention layer whose K and V come from one projection with V through the weightless rmsnorm,
 * NeoX RoPE whose frequencies past the first vr pairs are zero, and no other layer reading its
 * cache (a reader's queries would need this layer's k_norm). */
static int kv_from_v_pairs(const accel_backend *b, const accel_model_desc *d, int i, int64_t capacity) {
  const accel_layer_desc *l = &d->layers[i];
  if (b->kv_k != ACCEL_KV_K_AUTO || !l->k_eq_v || !d->v_norm || d->rope_traditional || l->kv_source != i ||
      (l->sliding && d->sliding_window > 0 && d->sliding_window < capacity) || !l->inv_freq || !l->k_norm)
    return 0;
  for (int j = 0; j < d->n_layers; j++)
    if (j != i && d->layers[j].kv_source == i) return 0;
  const int half = l->head_dim / 2;
  int moved = 0;
  for (int j = 0; j < half; j++)
    if (l->inv_freq[j] != 0.0f) moved = j + 1;
  const int vr = (moved + 7) / 8 * 8;
  return vr > 0 && 2 * vr < l->head_dim ? vr : 0;
}

/* The K codec of layer i's cache (kv_layout.h kfmt): 3 / 4 when --kv-k planar3 / planar4 asks for
 * it and the layer is an owning full-attention layer, else 0 (sliding rings stay bf16). */
static int kv_k_format(const accel_backend *b, const accel_model_desc *d, int i) {
  const accel_layer_desc *l = &d->layers[i];
  if ((b->kv_k != ACCEL_KV_K_PLANAR3 && b->kv_k != ACCEL_KV_K_PLANAR4) || l->sliding || l->kv_source != i) return 0;
  return b->kv_k == ACCEL_KV_K_PLANAR3 ? 3 : 4;
}

/* The bytes of one position's K/V rows of layer i (both arrays) */
static int64_t kv_row_bytes(const accel_backend *b, const accel_model_desc *d, int i, int64_t capacity) {
  const accel_layer_desc *l = &d->layers[i];
  const int64_t kvd = (int64_t)l->n_kv_heads * l->head_dim;
  const int kf = kv_k_format(b, d, i);
  if (kf) return dk_kv_planar(l->n_kv_heads, l->head_dim, kf, NULL, NULL).kps + kvd * (int64_t)sizeof(uint16_t);
  const int vr = kv_from_v_pairs(b, d, i, capacity);
  return (vr ? dk_kv_from_v(l->n_kv_heads, l->head_dim, vr).ps : 2 * kvd) * (int64_t)sizeof(uint16_t);
}

static int check_context_memory(const accel_backend *b, const accel_model_desc *d, int64_t capacity,
                                 mlxrt_error *err) {
  uint64_t need = (uint64_t)capacity * (sizeof(int32_t) + (uint64_t)d->n_heads * sizeof(float));
  const int64_t first = capacity < KV_MARGIN ? capacity : KV_MARGIN;
  for (int i = 0; i < d->n_layers; i++) {
    const accel_layer_desc *l = &d->layers[i];
    if (l->kv_source != i) continue; /* KV sharing: the source's cache */
    const int64_t slots = l->sliding && d->sliding_window > 0 && d->sliding_window < capacity
                              ? d->sliding_window + ACCEL_RING_SLACK
                              : first;
    need += (uint64_t)slots * (uint64_t)kv_row_bytes(b, d, i, capacity);
  }
  size_t free_b = 0, total_b = 0;
  if (rt_mem_info(&free_b, &total_b, err)) return mx_prefix(err, "CUDA decoder");
  if (need > free_b)
    return mx_fail(err,
                   "CUDA decoder: a context needs %.2f GiB of device memory for its sliding KV rings, first KV "
                   "pages and attention scratch, and %.2f GiB of the device's %.2f GiB are free",
                   (double)need / (1 << 30), (double)free_b / (1 << 30), (double)total_b / (1 << 30));
  return 0;
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
  D->use_graph = 1;
  if (rt_stream_create(&D->stream, err)) goto fail;
  if (cprof_init(&D->prof, D->stream, err)) goto fail;
  if (ctl_init(err)) goto fail;
  D->timeline = ctl_on();
  if (D->prof.on) D->use_graph = 0;
  int H = d->hidden, L = d->n_layers, sms = cudab_device(b)->sms;
  int64_t max_rows = H, max_cols = H, max_q = 0, max_hd = 0, max_splits = 1, max_inter = 0;
  if (accel_check_weight(d->embed, d->vocab, H, "embedding", -1, err) ||
      accel_check_weight(d->lm_head, d->vocab, H, "lm_head", -1, err) || accel_check_ple(d, err) ||
      check_context_memory(b, d, capacity, err))
    goto fail;
  if (!(D->ly = mx_calloc((size_t)L, sizeof *D->ly, err))) goto fail;
  if (b->kv_k == ACCEL_KV_K_PLANAR3 || b->kv_k == ACCEL_KV_K_PLANAR4) {
    if (rt_malloc((void **)&D->kvc_tab, sizeof *D->kvc_tab, err) ||
        rt_h2d(D->kvc_tab, kvc_tables_get(), sizeof *D->kvc_tab, D->stream, err)) goto fail;
    DALLOC(D->kvc_flags, 1);
    if (rt_memset(D->kvc_flags, 0, sizeof *D->kvc_flags, D->stream, err) ||
        rt_host_alloc((void **)&D->h_kflags, sizeof *D->h_kflags, err) || rt_stream_sync(D->stream, err))
      goto fail;
  }
  const int P = d->ple_dim;
  const int64_t LP = (int64_t)L * P;
  if (LP > max_rows) max_rows = LP;
  if (P > max_cols) max_cols = P;
  for (int i = 0; i < L; i++)
    if (d->layers[i].kv_source >= 0 && d->layers[i].kv_source < i) D->ly[d->layers[i].kv_source].feeds = 1;
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
    y->own = l->kv_source == i;
    y->hd = l->head_dim;
    y->nkv = l->n_kv_heads;
    y->inter = l->intermediate;
    y->window = l->sliding && d->sliding_window > 0 && d->sliding_window < capacity ? d->sliding_window : 0;
    int64_t slots = y->window > 0 ? y->window + ACCEL_RING_SLACK : capacity; /* accel_ring.h */
    int64_t ctx = l->sliding && d->sliding_window > 0 && d->sliding_window < capacity ? d->sliding_window : capacity;
    /* enough splits that both passes (one block per KV head and split) put SPLIT_BLOCKS_PER_SM
     * blocks on every SM at long contexts — one wave of the scores kernel — with at least
     * SPLIT_KEYS keys per split; the kernels keep at least SPLIT_KEYS keys per split at every
     * position, so a session made for a long context runs few, full splits while its context
     * is short (the split shape changes the softmax's summation order, so the logits hash) */
    int64_t sp = (ctx + SPLIT_KEYS - 1) / SPLIT_KEYS,
            cap_sp = ((int64_t)SPLIT_BLOCKS_PER_SM * sms + l->n_kv_heads - 1) / l->n_kv_heads;
    if (sp > cap_sp) sp = cap_sp;
    if (sp > MAX_SPLITS) sp = MAX_SPLITS;
    y->splits = (int)sp;
    if (sp > max_splits) max_splits = sp;
    /* the short-context graph runs while position + 1 ≤ CLUSTER_KEYS, so no layer sees more keys
     * there, whatever the session's capacity: clusters of 8 (16 cost 0.6 % at depth 0) */
    y->ckeys = ctx < CLUSTER_KEYS ? ctx : CLUSTER_KEYS;
    /* a compressed K (this layer's, or its KV source's) is scored by the split passes' register
     * path alone: no one-cluster form */
    const int kf = kv_k_format(b, d, i), kread = kv_k_format(b, d, l->kv_source);
    if (kread && (l->head_dim % KVC_BLOCK || l->head_dim > 512)) {
      mx_fail(err, "CUDA decoder: layer %d: a planar%d K cache needs head dims that are multiples of 128 up to 512, "
              "not %d", i, kread, l->head_dim);
      goto fail;
    }
    y->cluster = !kread && dk_attention_cluster_fits(d->n_heads, l->n_kv_heads, l->head_dim, y->ckeys, 0);
    /* a layer whose whole key range fits the wide form (the sliding rings: 1024 keys on the
     * 31B) takes it in the long-context graphs too */
    y->lkeys = !kread && dk_attention_cluster_fits(d->n_heads, l->n_kv_heads, l->head_dim, ctx, 1) ? ctx : 0;
    /* smax holds the cluster kernel's block maxima: (blocks per cluster)·nkv */
    const int cl_blocks = dk_attention_cluster_size(y->lkeys ? 1 : 0);
    if ((y->cluster || y->lkeys) && max_splits < cl_blocks) max_splits = cl_blocks;
    D->any_cluster |= y->cluster;
    /* sliding layer with a window ≥ capacity: a plain buffer of capacity positions */
    const accel_weight *qkv[3] = {l->q, l->k, l->v};
    const accel_weight *gu[2] = {l->gate, l->up};
    /* GeGLU in gate|up's epilogue: one fast-format weight of interleaved rows, no k split */
    const int gu_il = dec_same_format(&l->gate->spec, &l->up->spec) &&
                              l->gate->spec.rows == l->up->spec.rows && l->gate->spec.rows % 8 == 0
                          ? 8
                          : 0;
    if (dec_make_mv(D, qkv, !y->own ? 1 : l->k_eq_v ? 2 : 3, y->own ? "q|k|v" : "q", i, &y->qkv, err) ||
        make_mv_il(D, gu, 2, "gate|up", i, gu_il, &y->gu, err) || dec_make_mv(D, &l->o, 1, "o_proj", i, &y->o, err) ||
        dec_make_mv(D, &l->down, 1, "down_proj", i, &y->down, err) || dec_moe_layer(D, i, err))
      goto fail;
    /* o's prep exponent fixed by the attention's bound (o_fixed_exp): the attention writes no
     * maxima (tg128 +1.2 % at depth 0, the same logits bits) */
    if (y->o.n == 1 && y->o.L[0]->fmt != CK_GENERIC)
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
    const int vr = y->own ? kv_from_v_pairs(b, d, i, capacity) : 0;
    y->kv = kf   ? dk_kv_planar(y->nkv, y->hd, kf, D->kvc_tab, D->kvc_flags)
            : vr ? dk_kv_from_v(y->nkv, y->hd, vr)
                 : dk_kv_plain(y->nkv, y->hd);
    D->any_planar |= kf > 0;
    if (y->own && y->window > 0) {
      DALLOC(y->kc, slots * kvd);
      DALLOC(y->vc, slots * kvd);
      D->kv_bytes += 2 * (size_t)slots * (size_t)kvd * sizeof(uint16_t);
    } else if (y->own) {
      const size_t krow = kf ? (size_t)y->kv.kps : (size_t)y->kv.ps * sizeof(uint16_t);
      if (rt_vmem_reserve(&y->kvm[0], (size_t)slots * krow, err) ||
          (!vr && rt_vmem_reserve(&y->kvm[1], (size_t)slots * (size_t)kvd * sizeof(uint16_t), err)))
        goto fail;
      y->kc = y->kvm[0].base;
      y->vc = vr ? y->kc : y->kvm[1].base;
      if (b->verbose && vr)
        fprintf(stderr, "mlxrt cuda: layer %d keeps K from V (%d of %d dims of K stored per head)\n", i, 2 * vr,
                y->hd);
      if (b->verbose && kf)
        fprintf(stderr, "mlxrt cuda: layer %d keeps K in planar%d (%lld bytes per position for %d heads of %d)\n", i,
                kf, (long long)y->kv.kps, y->nkv, y->hd);
    } else {
      y->kc = D->ly[l->kv_source].kc;
      y->vc = D->ly[l->kv_source].vc;
      y->kv = D->ly[l->kv_source].kv;
    }
    y->onepass = y->window == 0 && dk_attention_onepass(d->n_heads, y->nkv, y->hd, y->kv);
    D->any_onepass |= y->onepass;
    if (P > 0) {
      if (dec_make_mv(D, &l->ple_gate, 1, "per_layer_input_gate", i, &y->pg, err) ||
          dec_make_mv(D, &l->ple_proj, 1, "per_layer_projection", i, &y->pp, err))
        goto fail;
      DALLOC(y->ple_norm, H);
      if (dec_upload_floats(D, y->ple_norm, l->post_ple_norm, H, err)) goto fail;
    }
    const float *vs[4] = {l->input_norm, l->post_attn_norm, l->pre_ffw_norm, l->post_ffw_norm};
    y->xe_in = dec_norm_fixed_exp(l->input_norm, H);
    y->xe_ffw = dec_norm_fixed_exp(l->pre_ffw_norm, H);
    for (int k = 0; k < 4; k++)
      if (dec_upload_floats(D, y->norms + (int64_t)k * H, vs[k], H, err)) goto fail;
    if (dec_upload_floats(D, y->norms + 4 * (int64_t)H, l->q_norm, l->head_dim, err) ||
        (y->own && dec_upload_floats(D, y->norms + 4 * (int64_t)H + l->head_dim, l->k_norm, l->head_dim, err)) ||
        dec_upload_floats(D, y->inv_freq, l->inv_freq, l->head_dim / 2, err))
      goto fail;
  }
  if (!(D->embed = cudab_resident(b, d->embed, err)) || dec_make_mv(D, &d->lm_head, 1, "lm_head", -1, &D->head, err))
    goto fail;
  if (P > 0) {
    if (dec_make_mv(D, &d->ple_model_proj, 1, "per_layer_model_projection", -1, &D->ple_mp, err) ||
        !(D->ple_emb = cudab_resident(b, d->ple_embed, err)))
      goto fail;
    DALLOC(D->ple_pnorm, P);
    DALLOC(D->ple, LP);
    DALLOC(D->ple_row, LP);
    DALLOC(D->ple_xb, H);
    DALLOC(D->ple_xp, (H + 128) * 8);
    DALLOC(D->ple_xs, ((H + 128) / 32 + 1) * 8);
    DALLOC(D->ple_pmax, ck_xprep_pmax_floats(H + 128));
    DALLOC(D->ple_xexp, 8);
    DALLOC(D->ple_y, LP * D->ple_mp.ks);
    if (dec_upload_floats(D, D->ple_pnorm, d->ple_proj_norm, P, err)) goto fail;
  }
  D->xe_final = dec_norm_fixed_exp(d->final_norm, H);
  DALLOC(D->final_norm, H);
  if (dec_upload_floats(D, D->final_norm, d->final_norm, H, err)) goto fail;

  /* x prep scratch for the widest input of any weight used */
  int64_t kp = max_cols + 128;
  int64_t nb = dk_logits_blocks(d->vocab);
  DALLOC(D->all_tokens, capacity);
  DALLOC(D->tok, 1);
  DALLOC(D->next, 1);
  DALLOC(D->pos, 1);
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
  DALLOC(D->counts, d->n_heads + 2); /* attention's per head, then dk_logits' count and bad_rev */
  if (rt_memset(D->counts, 0, (size_t)(d->n_heads + 2) * sizeof(unsigned), D->stream, err)) goto fail;
  if (d->vocab <= ACCEL_SAMPLE_MAX_VOCAB &&
      (rt_malloc(&D->sk_state, sk_state_bytes(), err) || rt_memset(D->sk_state, 0, sk_state_bytes(), D->stream, err)))
    goto fail;
  if (rt_host_alloc((void **)&D->h_toks, STAGE_TOKENS * sizeof(int32_t), err) ||
      rt_host_alloc((void **)&D->h_pos, sizeof(int), err) ||
      rt_host_alloc((void **)&D->h_next, sizeof(int32_t), err) ||
      rt_host_alloc((void **)&D->h_logits, (size_t)d->vocab * sizeof(float), err) ||
      rt_stream_sync(D->stream, err))
    goto fail;
  /* the MoE blocks' step buffers; the prompt pass's buffers and cuBLAS handle now, so no prompt
   * pays for them */
  if (dec_moe_buffers(D, 1, &D->mb, err) || dec_prefill_init(D, err)) goto fail;
  /* the step's branches (the MoE shared MLP, the per-layer inputs) on a second stream; in order
   * on one under the profile and the timeline (whose stamps come in execution order) */
  if ((D->mb || P > 0) && !D->prof.on && !D->timeline &&
      (rt_stream_create(&D->side, err) || rt_event_create(&D->ev_fork, err) || rt_event_create(&D->ev_join, err) ||
       rt_event_create(&D->ev_ple_fork, err) || rt_event_create(&D->ev_ple_join, err)))
    goto fail;
  /* the first pages now, like the buffers above: a first prompt of up to KV_MARGIN tokens
   * maps nothing */
  if (kv_grow(D, 1, err)) {
    cuda_decoder_free(D);
    return NULL;
  }
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

/* A layer's q/k/v post step and decode attention: in one launch (the cluster form) while few
 * keys are live or where the layer's whole range fits it, else the split passes. The cluster
 * form also writes o's activation prep where o takes a fixed exponent and no group sums
 * (*o_prep = 1: no prep launch before o). */
static int enqueue_attention(accel_decoder *D, const accel_layer_desc *l, dec_layer *y, const char *const *lb,
                             float *amax, int namax, int *o_prep, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  const int H = d->hidden, nq = d->n_heads;
  const float *nrm = y->norms;
  void *st = D->stream;
  cprof *P = &D->prof;
  if (cprof_mark(P, lb[1], err) ||
      rt_status(dk_qkv_post(D->y, y->qkv.ks, y->qkv.rows, nq, y->nkv, y->hd, l->k_eq_v, nrm + 4 * (int64_t)H,
                            nrm + 4 * (int64_t)H + y->hd, y->inv_freq, d->rope_traditional, d->v_norm, d->eps, D->pos,
                            y->window, y->kv, D->q, y->own ? y->kc : NULL, y->own ? y->vc : NULL, st),
                "q/k/v norm+rope", err) ||
      cprof_mark(P, lb[2], err))
    return -1;
  const int short_cl = y->cluster && D->short_ctx;
  *o_prep = 0;
  if (short_cl || y->lkeys) {
    const dk_att_prep prep = {D->xp, D->xexp, y->o.fix_e, y->o.xmode};
    *o_prep = y->o.xmode && y->o.fix_e != CK_XE_ROWMAX && !amax;
    return rt_status(dk_attention_cluster(D->q, y->kc, y->vc, nq, y->nkv, y->hd, y->kv, d->attn_scale, D->pos, y->window,
                                          short_cl ? y->ckeys : y->lkeys, !short_cl, D->attb, amax, namax, D->smax,
                                          D->counts, *o_prep ? &prep : NULL, st),
                     "attention (one cluster)", err);
  }
  return rt_status(dk_attention(D->q, y->kc, y->vc, nq, y->nkv, y->hd, y->kv, d->attn_scale, D->pos, y->window, y->splits,
                                SPLIT_KEYS, D->deep_ctx >= (y->onepass ? 1 : 2), D->capacity, D->scores, D->smax, D->ssum, D->pacc, D->counts,
                                D->attb, amax, namax, st),
                   "attention", err);
}

/* The blocks of down's activation prep (ck_qmv_geglu's maxima, D->gmax). */
static int gu_nblk(const dec_layer *y) { return (int)((y->inter + ck_xprep_block() - 1) / ck_xprep_block()); }

/* gate|up, geglu, then the down product. With y->gu_epi the product's epilogue makes the
 * activation and its prep maxima (ck_qmv_geglu; D->gmax, which the residual norm before it
 * zeroed): no geglu kernel (tg128 +0.9 %, the same bits). */
static int enqueue_ffn_act(accel_decoder *D, dec_layer *y, const char *const *lb, mlxrt_error *err) {
  void *st = D->stream;
  if (y->gu_epi) {
    const ck_layout *G = y->gu.L[0];
    if (!y->gu.xmode && rt_status(ck_xprep_premax(G, D->xb, D->xp, D->xs, D->xexp, D->pmax, st), "x prep launch", err))
      return -1;
    const int rc = ck_qmv_geglu(G, D->xp, D->xs, D->xexp, D->gub, D->gmax, ck_xprep_block(), st);
    if (rt_status(rc, "gate|up + geglu launch", err) || cprof_mark(&D->prof, lb[7], err)) return -1;
    /* down's prep from those maxima (the graph keeps the pointer run_mv reads) */
    float *pmax = D->pmax;
    D->pmax = D->gmax;
    const int r = dec_run_mv(D, &y->down, D->gub, D->y, XP_PREMAX, err);
    D->pmax = pmax;
    return r;
  }
  if (dec_run_mv(D, &y->gu, D->xb, D->y, y->gu.xmode ? XP_DONE : XP_PREMAX, err) || cprof_mark(&D->prof, lb[6], err))
    return -1;
  return rt_status(dk_geglu(D->y, D->y + (y->gu_il ? y->gu_il : y->inter), y->gu.ks, y->gu.rows, D->gub, y->inter, D->pmax,
                           ck_xprep_block(), y->gu_il, st),
                   "geglu", err) ||
         cprof_mark(&D->prof, lb[7], err) || dec_run_mv(D, &y->down, D->gub, D->y, XP_PREMAX, err);
}

/* An MoE layer's router and its shared MLP: the shared MLP on the side stream (forked here,
 * joined by the experts' combine), the router's chain on the main one — two branches of the
 * step's graph that run side by side (26B-A4B: the shared MLP's three launches off the chain of
 * the router and the experts); in order on one stream without a side stream. */
static int enqueue_moe_shared(accel_decoder *D, int i, const char *const *lb, mlxrt_error *err) {
  dec_layer *y = &D->ly[i];
  if (!D->side) return dec_moe_route(D, i, D->mb, D->h, 1, err) || enqueue_ffn_act(D, y, lb, err);
  void *main_stream = D->stream;
  if (rt_event_record(D->ev_fork, main_stream, err) || rt_stream_wait_event(D->side, D->ev_fork, err)) return -1;
  D->stream = D->side;
  const int rc = enqueue_ffn_act(D, y, lb, err);
  D->stream = main_stream;
  return rc || rt_event_record(D->ev_join, D->side, err) || dec_moe_route(D, i, D->mb, D->h, 1, err);
}

static int enqueue_body(accel_decoder *D, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  int H = d->hidden, nq = d->n_heads, pb = ck_xprep_block();
  void *st = D->stream;
  cprof *P = &D->prof;
  const int xe0 = norm_xe(&D->ly[0].qkv, D->ly[0].xe_in);
  if (cprof_mark(P, "embed + input norm", err) ||
      rt_status(ck_embed_step(D->embed, D->all_tokens, D->pos, D->tok, d->embed_scale, D->h, st), "embedding", err) ||
      (d->ple_dim > 0 && dec_ple_inputs(D, err)) ||
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
    float *amax = y->o.fix_e == CK_XE_ROWMAX ? D->pmax : NULL;
    const int namax = (int)(((int64_t)nq * y->hd + pb - 1) / pb);
    const int xe_gu = norm_xe(&y->gu, y->xe_ffw), xe_next = norm_xe(next_mv, last ? D->xe_final : D->ly[i + 1].xe_in);
    int o_prep = 0;
    if (cprof_mark(P, lb[0], err) || dec_run_mv(D, &y->qkv, D->xb, D->y, y->qkv.xmode ? XP_DONE : XP_PREMAX, err) ||
        enqueue_attention(D, l, y, lb, amax, namax, &o_prep, err) ||
        cprof_mark(P, lb[3], err) ||
        dec_run_mv(D, &y->o, D->attb, D->y,
               o_prep                     ? XP_DONE
               : y->o.fix_e != CK_XE_ROWMAX ? XP_FIXED
               : amax                     ? XP_PREMAX
                                          : XP_FULL,
               err) ||
        cprof_mark(P, lb[4], err) ||
        rt_status(dk_residual_norm(D->y, y->o.ks, y->o.rows, nrm + H, D->h, 0, 0.0f, nrm + 2 * (int64_t)H, D->xb, H, d->eps,
                                   norm_pmax(D, xe_gu), pb, D->xp, D->xexp, y->gu.xmode, xe_gu,
                                   y->gu_epi ? D->gmax : NULL, y->gu_epi ? gu_nblk(y) : 0, st),
                  "attention residual", err) ||
        cprof_mark(P, lb[5], err) || (y->moe ? enqueue_moe_shared(D, i, lb, err) : enqueue_ffn_act(D, y, lb, err)))
      return mx_prefix(err, "layer %d", i);
    /* the FFN's output: the down product, or with an MoE block the block's sum (cuda_decoder_moe.c:
     * its router runs before the shared MLP, its experts after) */
    const float *fy = D->y, *fpost = nrm + 3 * (int64_t)H;
    int fks = y->down.ks;
    int64_t frows = y->down.rows;
    if (y->moe) {
      if (dec_moe_experts(D, i, D->mb, D->y, 0, y->down.ks, y->down.rows, 1, D->side ? D->ev_join : NULL, &fy, err))
        return mx_prefix(err, "layer %d", i);
      fks = 1;
    }
    /* per-layer embeddings: the FFN residual alone (xb = its bf16 for the gate), then the
     * layer's input through gate and projection, whose post-norm is the layer's last residual */
    if (d->ple_dim > 0) {
      if (i == 0 && D->side && rt_stream_wait_event(D->stream, D->ev_ple_join, err)) return mx_prefix(err, "layer %d", i);
      if (dec_ple_tail_ok(D, i)) {
        if (cprof_mark(P, "per-layer tail", err) ||
            dec_ple_tail(D, i, fy, fks, frows, next_norm, next_mv, xe_next, err))
          return mx_prefix(err, "layer %d", i);
        continue;
      }
      if (dec_ple_layer(D, i, fy, fks, frows, err)) return mx_prefix(err, "layer %d", i);
      fy = D->y;
      fks = y->pp.ks;
      frows = y->pp.rows;
      fpost = y->ple_norm;
    }
    if (cprof_mark(P, lb[8], err) ||
        rt_status(dk_residual_norm(fy, fks, frows, fpost, D->h, d->has_layer_scalar, l->layer_scalar,
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
  return cprof_mark(&D->prof, "lm_head mat-vec", err) || dec_run_mv(D, &D->head, D->xb, D->ylog, D->head.xmode ? XP_DONE : XP_PREMAX, err) ||
         cprof_mark(&D->prof, "logits + argmax", err) ||
         rt_status(dk_logits(D->ylog, D->logits, d->vocab, d->final_softcap, D->part_v, D->part_i,
                             D->counts + d->n_heads, D->counts + d->n_heads + 1, D->next, D->stream),
                   "logits", err);
}

/* enq as *graph: eager the first time (occupancy queries and lazy module loading happen outside
 * any capture), then captured once and replayed. The captured kernels overlap their
 * predecessors' tails (programmatic dependent launch: ck_launch.cuh). tg: the timeline's graph
 * id. */
static int graph_launch(accel_decoder *D, int (*enq)(accel_decoder *, mlxrt_error *), void **graph, int *warm,
                        int tg, mlxrt_error *err) {
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

int dec_body_step(accel_decoder *D, int32_t token, int64_t pos, void **graphs, int *warm, mlxrt_error *err) {
  *D->h_toks = token;
  *D->h_pos = (int)pos;
  if (rt_h2d(D->all_tokens + pos, D->h_toks, sizeof(int32_t), D->stream, err) ||
      rt_h2d(D->pos, D->h_pos, sizeof(int), D->stream, err))
    return mx_prefix(err, "CUDA decoder");
  /* the one-cluster attention while every layer's live keys (at most position + 1) are few */
  D->short_ctx = D->any_cluster && pos + 1 <= CLUSTER_KEYS;
  /* the deep contexts' attention: on the one-pass layers (K from V, compressed K) once their
   * live keys exceed ONEPASS_KEYS, on every layer once they exceed DEEP_KEYS */
  D->deep_ctx = D->short_ctx ? 0 : pos + 1 > DEEP_KEYS ? 2 : D->any_onepass && pos + 1 > ONEPASS_KEYS ? 1 : 0;
  const int b = D->short_ctx ? 1 : D->deep_ctx == 2 ? 2 : D->deep_ctx == 1 ? 3 : 0;
  if (graph_launch(D, enqueue_body, &graphs[b], &warm[b], b == 0 ? 0 : b + 1, err) || cprof_flush(&D->prof, err))
    return mx_prefix(err, "CUDA decoder at position %lld", (long long)pos);
  return 0;
}

/* The device's token selection for sp and u (greedy without sp) as sample.cu's parameters;
 * *sample = 0 without sp or token. Fails before anything is enqueued. */
int dec_sample_plan(accel_decoder *D, const accel_sample_params *sp, double u, int want_token, int *sample,
                    sk_params *kp, mlxrt_error *err) {
  *sample = sp && want_token;
  *kp = (sk_params){0};
  if (!*sample) return 0;
  accel_sample_plan pl;
  if (!D->sk_state) return mx_fail(err, "CUDA decoder: no device sampling for a vocabulary of %d", D->d->vocab);
  if (accel_sample_plan_make(sp, D->d->vocab, u, &pl, err)) return mx_prefix(err, "CUDA decoder");
  *kp = (sk_params){pl.greedy, pl.inv_t, pl.use_min_p, pl.log_min_p, pl.top_k, pl.use_top_p, pl.top_p, pl.x53};
  return 0;
}

/* After the prompt pass or the body (D->xb, D->pmax as the head expects): the head graph, the
 * selection (sample: with kp, else the head's argmax), one copy of the id (and the logits when
 * asked) and one stream synchronisation. pos_last: the position whose logits these are. */
int dec_head_select(accel_decoder *D, int64_t pos_last, int sample, const sk_params *kp, float *logits,
                    int32_t *token, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  if (graph_launch(D, enqueue_head, &D->g_head, &D->warm_head, CTL_HEAD, err) || cprof_flush(&D->prof, err) ||
      (sample && (cprof_mark(&D->prof, "sampling", err) ||
                  rt_status(sk_sample(D->logits, d->vocab, kp, D->sk_state, D->next, D->stream), "sampling", err) ||
                  cprof_flush(&D->prof, err))) ||
      rt_d2h(D->h_next, D->next, sizeof(int32_t), D->stream, err) ||
      (logits && rt_d2h(D->h_logits, D->logits, (size_t)d->vocab * sizeof(float), D->stream, err)) ||
      (D->kvc_flags && rt_d2h(D->h_kflags, D->kvc_flags, sizeof *D->h_kflags, D->stream, err)) ||
      rt_stream_sync(D->stream, err))
    return mx_prefix(err, "CUDA decoder head");
  if (D->kvc_flags && *D->h_kflags) { /* a K block the encoder could not store: the step fails */
    const unsigned f = *D->h_kflags;
    if (rt_memset(D->kvc_flags, 0, sizeof *D->kvc_flags, D->stream, err)) return mx_prefix(err, "CUDA decoder");
    kvc_fail_flags(f, err);
    return mx_prefix(err, "CUDA decoder: the K cache at a position up to %lld", (long long)pos_last);
  }
  if (token && *D->h_next <= ACCEL_TOKEN_NONFINITE(0))
    return accel_fail_nonfinite(err, pos_last, ACCEL_NONFINITE_ID(*D->h_next));
  if (sample && *D->h_next < 0) return mx_fail(err, "CUDA decoder: every logit is -inf or NaN, no token can be chosen");
  if (token) *token = *D->h_next;
  if (logits) memcpy(logits, D->h_logits, (size_t)d->vocab * sizeof(float));
  return 0;
}

/* decoder_step: the tokens through the prompt pass (n > 1) or the body graph, then the head
 * graph, then (sp) the selection of accel_sample.h on the device over the head's logits (sample.cu,
 * launched with its parameters and u by value), then one copy of the id (and the logits when
 * asked) and one stream synchronisation. */
int cuda_decoder_step(accel_decoder *D, const int32_t *tokens, int64_t n, int64_t pos, const accel_sample_params *sp,
                      double u, float *logits, int32_t *token, mlxrt_error *err) {
  const accel_model_desc *d = D->d;
  if (accel_check_step(tokens, n, pos, D->capacity, d->vocab, err)) return -1;
  sk_params kp;
  int sample;
  if (dec_sample_plan(D, sp, u, token != NULL, &sample, &kp, err)) return -1;
  if (kv_grow(D, pos + n, err)) return -1;
  const int head = logits || token;
  if (n > 1) {
    if (dec_prefill_run(D, tokens, n, pos, err)) return mx_prefix(err, "CUDA decoder prompt of %lld tokens", (long long)n);
  } else {
    if (dec_body_step(D, tokens[0], pos, D->g_body, D->warm_body, err)) return -1;
    /* the staging buffers are refilled by the next call: without a head, wait for the copies */
    if (!head && rt_stream_sync(D->stream, err)) return mx_prefix(err, "CUDA decoder");
  }
  if (!head) return 0;
  return dec_head_select(D, pos + n - 1, sample, &kp, logits, token, err);
}
