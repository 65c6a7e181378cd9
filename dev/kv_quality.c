/* kv_quality: what storing the full-attention layers' K in a compressed representation does to
 * a model's next-token distribution over a long real text, on the CPU reference path. A study,
 * outside the product (the CPU cache never compresses K); built and run by scripts/kv_quality.sh.
 *   kv_quality MODEL TEXT CTX [CHUNK [REPS]]   REPS: a comma list of the representations below
 *   (default all; bf16 always runs, as the reference)
 * One session per representation takes the same CTX tokens (BOS + TEXT's first tokens) in
 * chunks of CHUNK (64): bf16 K (the reference), planar3 and planar4 (docs/KV.md), q8_0 (blocks
 * of 32 int8 with an fp16 absmax scale, 8.5 bits per value) and had-q4_0 (a normalised 128-point
 * Walsh-Hadamard rotation, then q4_0: blocks of 32 4-bit codes with an fp16 scale, 4.5 bits).
 * After each chunk a compressed session's cached K of the full-attention layers at the chunk's
 * positions is replaced by its representation's decoding (rounded to bf16), so every query
 * attends to the keys before its chunk as they would be stored and to its own chunk's keys in
 * bf16, as a prompt pass that keeps its chunk's K in bf16 does. For planar, q·k̂ equals the
 * rotated-domain product Rq·Rk̂ up to float rounding. Sliding layers keep bf16 K. The last
 * position of each chunk is scored against the bf16 session: KL(p_bf16 ‖ p) in nats, argmax
 * agreement, and the text's next-token NLL (perplexity), over all chunks and over the second
 * half (positions ≥ CTX/2), and each representation's relative MSE on the keys it stored. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/kv_codec.h"
#include "base/bf16.h"
#include "mlx/api_internal.h"
#include "mlx/session_internal.h"

typedef struct stats {
  double kl, nll;
  long agree, n;
} stats;

enum { REP_BF16, REP_PLANAR3, REP_PLANAR4, REP_Q8_0, REP_HAD_Q4_0, NREP };
static const char *const REP_NAME[NREP] = {"bf16", "planar3", "planar4", "q8_0", "had-q4_0"};

/* llama.cpp's q8_0 / q4_0 rounding of 32 values, in place */
static void q8_0(float *x) {
  float amax = 0;
  for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
  const float d = mx_f16_to_f32(mx_f32_to_f16(amax / 127.0f)), id = amax > 0 ? 127.0f / amax : 0;
  for (int j = 0; j < 32; j++) x[j] = d * roundf(x[j] * id);
}
static void q4_0(float *x) {
  float amax = 0, max = 0;
  for (int j = 0; j < 32; j++)
    if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
  const float d = max / -8.0f, id = d != 0 ? 1.0f / d : 0, dh = mx_f16_to_f32(mx_f32_to_f16(d));
  for (int j = 0; j < 32; j++) {
    int q = (int)(x[j] * id + 8.5f);
    x[j] = dh * (float)((q > 15 ? 15 : q < 0 ? 0 : q) - 8);
  }
}
/* the normalised Walsh-Hadamard transform of 128 values (its own inverse) */
static void hadamard128(float *x) {
  for (int h = 1; h < 128; h *= 2)
    for (int i = 0; i < 128; i += 2 * h)
      for (int j = i; j < i + h; j++) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  for (int j = 0; j < 128; j++) x[j] *= 0.08838834764831845f; /* 1/√128 */
}

/* Σ‖k − k̂‖² and Σ‖k‖² per representation: the relative MSE on the model's real keys */
static double err2[NREP], norm2[NREP];

static void account(int r, const uint16_t *kh, const float *x, int n) {
  for (int j = 0; j < n; j++) {
    const double k = mx_bf16_to_f32(kh[j]), d = k - mx_round_bf16(x[j]);
    err2[r] += d * d;
    norm2[r] += k * k;
  }
}

/* one head vector of hd values through representation r, in place */
static int represent(int r, uint16_t *kh, int hd, mlxrt_error *err) {
  float x[128];
  uint8_t blk[8 * 68];
  if (r == REP_PLANAR3 || r == REP_PLANAR4) {
    const kvc_format f = r == REP_PLANAR3 ? KVC_PLANAR3 : KVC_PLANAR4;
    const size_t bb = kvc_block_bytes(f);
    if (kvc_encode_row_bf16(f, kh, hd, blk, err)) return -1;
    for (int b = 0; b < hd / 128; b++) {
      if (kvc_decode_block(f, blk + b * bb, x, err)) return -1;
      account(r, kh + b * 128, x, 128);
      for (int j = 0; j < 128; j++) kh[b * 128 + j] = mx_f32_to_bf16(x[j]);
    }
    return 0;
  }
  for (int b = 0; b < hd / 128; b++) {
    for (int j = 0; j < 128; j++) x[j] = mx_bf16_to_f32(kh[b * 128 + j]);
    if (r == REP_HAD_Q4_0) hadamard128(x);
    for (int g = 0; g < 4; g++) (r == REP_Q8_0 ? q8_0 : q4_0)(x + 32 * g);
    if (r == REP_HAD_Q4_0) hadamard128(x);
    account(r, kh + b * 128, x, 128);
    for (int j = 0; j < 128; j++) kh[b * 128 + j] = mx_f32_to_bf16(x[j]);
  }
  return 0;
}

/* the cached K of every full-attention layer at positions [p0, p1) through representation r */
static int roundtrip(mx_session *s, int r, int64_t p0, int64_t p1, mlxrt_error *err) {
  for (int i = 0; i < s->m->n_layers; i++) {
    const mx_layer *ly = &s->m->layers[i];
    if (!ly->has_kv || ly->type == MX_LAYER_SLIDING) continue;
    const int hd = ly->head_dim;
    if (hd % 128 || hd > 1024) return mx_fail(err, "layer %d: head dim %d", i, hd);
    for (int64_t p = p0; p < p1; p++)
      for (int h = 0; h < ly->n_kv_heads; h++)
        if (represent(r, mx_kv_key(&s->kv[i], p) + (size_t)h * hd, hd, err)) return -1;
  }
  return 0;
}

/* log-softmax of a row into out, returns its argmax */
static int log_softmax(const float *x, int V, double *out) {
  int am = 0;
  for (int i = 1; i < V; i++)
    if (x[i] > x[am]) am = i;
  double sum = 0;
  for (int i = 0; i < V; i++) sum += exp((double)x[i] - x[am]);
  const double lse = x[am] + log(sum);
  for (int i = 0; i < V; i++) out[i] = (double)x[i] - lse;
  return am;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: kv_quality MODEL TEXT CTX [CHUNK [REPS]]\n");
    return 2;
  }
  const int64_t ctx = atoll(argv[3]), chunk = argc > 4 ? atoll(argv[4]) : 64;
  mlxrt_error err = {{0}};
  mlxrt_options opt = {"cpu", 0, 0, NULL, NULL};
  mlxrt_model *m = mlxrt_model_load(argv[1], &opt, &err);
  FILE *f = fopen(argv[2], "rb");
  if (!m || !f || ctx < 16 || chunk < 1) {
    fprintf(stderr, "kv_quality: %s\n", !m ? err.msg : !f ? "cannot open the text" : "bad CTX or CHUNK");
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *text = malloc((size_t)len + 1);
  if (!text || fread(text, 1, (size_t)len, f) != (size_t)len) return 1;
  fclose(f);
  text[len] = 0;
  int32_t *ids = NULL;
  size_t nids = 0;
  if (mlxrt_tokenize(m, text, (size_t)len, 1, &ids, &nids, &err)) {
    fprintf(stderr, "kv_quality: %s\n", err.msg);
    return 1;
  }
  if ((int64_t)nids < ctx + 1) {
    fprintf(stderr, "kv_quality: the text has %zu tokens, %lld needed\n", nids, (long long)ctx + 1);
    return 1;
  }
  const int V = mlxrt_model_vocab_size(m);
  int use[NREP] = {1, 1, 1, 1, 1};
  if (argc > 5)
    for (int k = 1; k < NREP; k++) {
      const char *at = strstr(argv[5], REP_NAME[k]);
      const size_t l = strlen(REP_NAME[k]);
      use[k] = at && (at == argv[5] || at[-1] == ',') && (at[l] == 0 || at[l] == ',');
    }
  mlxrt_session *S[NREP] = {0};
  float *lg[NREP] = {0};
  for (int k = 0; k < NREP; k++) {
    if (!use[k]) continue;
    S[k] = mlxrt_session_new_ex(m, ctx, MLXRT_SESSION_ALL_POSITIONS, &err);
    lg[k] = malloc((size_t)V * sizeof(float));
    if (!S[k] || !lg[k]) {
      fprintf(stderr, "kv_quality: %s\n", err.msg[0] ? err.msg : "out of memory");
      return 1;
    }
  }
  double *lr = malloc((size_t)V * sizeof(double)), *lm = malloc((size_t)V * sizeof(double));
  stats all[NREP] = {{0}}, half[NREP] = {{0}};
  for (int64_t p0 = 0; p0 < ctx; p0 += chunk) {
    const int64_t n = p0 + chunk <= ctx ? chunk : ctx - p0, pos = p0 + n - 1;
    for (int k = 0; k < NREP; k++)
      if (use[k] && (mlxrt_session_feed(S[k], ids + p0, n, lg[k], 0, &err) ||
                     (k > 0 && roundtrip(S[k]->s, k, p0, p0 + n, &err)))) {
        fprintf(stderr, "kv_quality: %s at %lld: %s\n", REP_NAME[k], (long long)p0, err.msg);
        return 1;
      }
    const int next = ids[pos + 1];
    const int ar = log_softmax(lg[0], V, lr);
    for (int k = 0; k < NREP; k++) {
      if (!use[k]) continue;
      int am = ar;
      double kl = 0;
      if (k > 0) {
        am = log_softmax(lg[k], V, lm);
        for (int i = 0; i < V; i++) kl += exp(lr[i]) * (lr[i] - lm[i]);
      }
      const double nll = -(k > 0 ? lm : lr)[next];
      stats *st[2] = {&all[k], pos >= ctx / 2 ? &half[k] : NULL};
      for (int j = 0; j < 2; j++)
        if (st[j]) {
          st[j]->kl += kl;
          st[j]->nll += nll;
          st[j]->agree += am == ar;
          st[j]->n++;
        }
    }
    fprintf(stderr, "\rkv_quality: %lld / %lld", (long long)(p0 + n), (long long)ctx);
  }
  fprintf(stderr, "\n");
  printf("| K | bits / value | relative MSE of K | context | positions scored | mean KL (nats) | top-1 agreement | perplexity |\n");
  printf("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n");
  static const double BITS[NREP] = {16, 3.125, 4.25, 8.5, 4.5};
  for (int k = 0; k < NREP; k++)
    for (int j = 0; j < 2 && use[k]; j++) {
      const stats *st = j ? &half[k] : &all[k];
      printf("| %s | %.3g | %.4f | %lld | %s (%ld) | %.5f | %.2f %% | %.4f |\n", REP_NAME[k], BITS[k],
             norm2[k] > 0 ? err2[k] / norm2[k] : 0.0, (long long)ctx,
             j ? "second half" : "all", st->n, st->kl / st->n, 100.0 * st->agree / st->n, exp(st->nll / st->n));
    }
  for (int k = 0; k < NREP; k++) {
    mlxrt_session_free(S[k]);
    free(lg[k]);
  }
  free(lr);
  free(lm);
  mlxrt_free(ids);
  free(text);
  mlxrt_model_free(m);
  return 0;
}
