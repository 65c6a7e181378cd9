/* Load-time checks of a checkpoint against its config (model.h): nothing unused, nothing
 * non-finite where a scan is cheap, token ids inside the embedding.
 *
 * Cost of the non-finite scan: it reads every norm/scalar vector and the scales and biases of
 * every quantized matrix; dense matrices are not scanned (that would read the whole model).
 * Measured on the demo gemma-3-270m (2-core machine, pages cached): 4-bit affine, 16.9 MB
 * scanned in 1.3 ms (~12 GB/s); nvfp4 1.0 ms; bf16 (vectors only) 0.1 ms. A 31B 4-bit
 * checkpoint has ~2 GB of scales and biases (1/9 of its bytes): ~0.2 s warm, or the time to
 * read those 2 GB from disk cold (~1 s on NVMe; pages the first forward pass reads anyway).
 * So every scale is checked. The tokenizer check parses tokenizer.json once more than a chat
 * does (~0.2 s for the 262k-token Gemma tokenizer). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/bf16.h"
#include "base/error.h"
#include "mlx/gen_config.h"
#include "mlx/model.h"
#include "mlx/tokenizer.h"

void mx_dim_field(const mx_config *c, int64_t v, char *buf, size_t n) {
  static const char *const names[] = {"hidden_size", "vocab_size", "intermediate_size",
                                      "moe_intermediate_size", "hidden_size_per_layer_input",
                                      "vocab_size_per_layer_input", "head_dim", "global_head_dim",
                                      "num_experts"};
  const int vals[] = {c->hidden_size, c->vocab_size, c->intermediate_size,
                      c->moe_intermediate_size, c->hidden_size_per_layer_input,
                      c->vocab_size_per_layer_input, c->head_dim, c->global_head_dim,
                      c->num_experts};
  for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++)
    if (vals[i] > 0 && vals[i] == v) {
      snprintf(buf, n, "%s%s = %d", c->nested ? "text_config." : "", names[i], vals[i]);
      return;
    }
  snprintf(buf, n, "a size of %lld derived from it", (long long)v);
}

/* ---- non-finite values ------------------------------------------------------------------ */

static int bad_at(const mx_model *m, const st_tensor *t, int64_t i, const char *what,
                  mlxrt_error *err) {
  return mx_fail(err, "%s: tensor '%s' holds %s at index %lld (of %lld): the checkpoint is "
                 "corrupt", m->path, t->name, what, (long long)i, (long long)st_numel(t));
}

static const char *f32_kind(float x) { return x != x ? "NaN" : x > 0 ? "+Inf" : "-Inf"; }

int mx_check_finite(const mx_model *m, const st_tensor *t, accel_mode mode, mlxrt_error *err) {
  int64_t n = st_numel(t);
  const uint8_t *p = t->data;
  if (t->dtype == ST_BF16 || t->dtype == ST_F16) {
    /* exponent all ones: Inf or NaN. One branch-free pass (vectorizes), then find the index. */
    const uint16_t e = t->dtype == ST_BF16 ? 0x7f80 : 0x7c00;
    unsigned any = 0;
    for (int64_t i = 0; i < n; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      any |= (h & e) == e;
    }
    for (int64_t i = 0; any && i < n; i++) {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      if ((h & e) == e) {
        float x = t->dtype == ST_BF16 ? mx_bf16_to_f32(h) : mx_f16_to_f32(h);
        return bad_at(m, t, i, f32_kind(x), err);
      }
    }
  } else if (t->dtype == ST_F32) {
    for (int64_t i = 0; i < n; i++) {
      uint32_t u;
      memcpy(&u, p + 4 * i, 4);
      if ((u & 0x7f800000u) == 0x7f800000u) {
        float x;
        memcpy(&x, &u, 4);
        return bad_at(m, t, i, f32_kind(x), err);
      }
    }
  } else if (t->dtype == ST_U8 && mode != ACCEL_MODE_DENSE) {
    /* fp scales: E4M3 (nvfp4) has NaN at S.1111.111 and no Inf; E8M0 (mx) has NaN at 0xff */
    const uint8_t mask = mode == ACCEL_MODE_NVFP4 ? 0x7f : 0xff;
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t any = 0;
    int64_t i = 0;
    /* eight at a time: nvfp4, x = w & 0x7f.. has a 0x7f byte iff x + 0x01.. sets its high
     * bit (no carries: every byte is <= 0x7f); mx, w has a 0xff byte iff ~w has a zero byte */
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      memcpy(&w, p + i, 8);
      if (mask == 0x7f) any |= ((w & ~highs) + ones) & highs;
      else any |= ((~w) - ones) & w & highs;
    }
    for (; i < n; i++) any |= (p[i] & mask) == mask;
    for (i = 0; any && i < n; i++)
      if ((p[i] & mask) == mask) return bad_at(m, t, i, "a NaN scale", err);
  }
  return 0;
}

/* ---- tensors the model does not use ------------------------------------------------------ */

/* Non-text parts of multimodal checkpoints (mlx-vlm keeps them; see
 * docs/reference/mlx-checkpoint-format.md §4): accepted and ignored. */
static const char *const NON_TEXT[] = {"vision_tower.", "embed_vision.", "audio_tower.",
                                       "embed_audio.", "vision_embedder.",
                                       "multi_modal_projector."};

static int non_text(const char *name) {
  for (size_t i = 0; i < sizeof NON_TEXT / sizeof NON_TEXT[0]; i++)
    if (strncmp(name, NON_TEXT[i], strlen(NON_TEXT[i])) == 0) return 1;
  return 0;
}

static int starts(const char *s, const char *p) { return strncmp(s, p, strlen(p)) == 0; }

/* Which config field makes the model skip this tensor (best effort, for the message). */
static void why_unused(const mx_model *m, const char *name, char *buf, size_t n) {
  const mx_config *c = &m->cfg;
  const char *tc = c->nested ? "text_config." : "";
  size_t pl = strlen(m->prefix);
  const char *rest = strncmp(name, m->prefix, pl) == 0 ? name + pl : NULL;
  if (rest && starts(rest, "layers.")) {
    char *end;
    long i = strtol(rest + 7, &end, 10);
    if (end != rest + 7 && *end == '.' && i >= 0) {
      const char *s = end + 1;
      if (i >= c->num_layers) {
        snprintf(buf, n, "config.json %snum_hidden_layers = %d, but the checkpoint has layer %ld",
                 tc, c->num_layers, i);
      } else if ((starts(s, "self_attn.k_proj") || starts(s, "self_attn.v_proj") ||
                  starts(s, "self_attn.k_norm")) && c->layer_kv_source[i] != i) {
        snprintf(buf, n, "config.json %snum_kv_shared_layers = %d: layer %ld reads layer %d's K/V",
                 tc, c->num_kv_shared_layers, i, c->layer_kv_source[i]);
      } else if (starts(s, "self_attn.v_proj") && c->layer_k_eq_v[i]) {
        snprintf(buf, n, "config.json %sattention_k_eq_v = true: layer %ld has no v_proj", tc, i);
      } else if ((starts(s, "router.") || starts(s, "experts.") ||
                  starts(s, "post_feedforward_layernorm_") ||
                  starts(s, "pre_feedforward_layernorm_2")) && !c->enable_moe) {
        snprintf(buf, n, "config.json %senable_moe_block is false", tc);
      } else if ((starts(s, "per_layer_") || starts(s, "post_per_layer_input_norm")) &&
                 c->hidden_size_per_layer_input == 0) {
        snprintf(buf, n, "config.json %shidden_size_per_layer_input is 0", tc);
      } else if (starts(s, "layer_scalar") && !c->has_layer_scalar) {
        snprintf(buf, n, "model_type '%s' has no layer_scalar", c->model_type);
      } else {
        snprintf(buf, n, "not a tensor of a %s decoder layer", c->model_type);
      }
      return;
    }
  }
  if (rest && (starts(rest, "embed_tokens_per_layer") || starts(rest, "per_layer_")) &&
      c->hidden_size_per_layer_input == 0) {
    snprintf(buf, n, "config.json %shidden_size_per_layer_input is 0", tc);
  } else if (strstr(name, "lm_head") && c->tie_word_embeddings) {
    snprintf(buf, n, "config.json tie_word_embeddings is true");
  } else {
    snprintf(buf, n, "not a tensor of the %s text model (expected names under '%s', or a known "
             "vision/audio part)", c->model_type, m->prefix);
  }
}

int mx_model_check_unused(const mx_model *m, mlxrt_error *err) {
  int first = -1, count = 0;
  for (int i = 0; i < m->st.ntensors; i++)
    if (!m->used[i] && !non_text(m->st.index[i]->name)) {
      if (first < 0) first = i;
      count++;
    }
  if (first < 0) return 0;
  char why[256];
  why_unused(m, m->st.index[first]->name, why, sizeof why);
  return mx_fail(err, "%s: tensor '%s' is not used by the model config.json describes (%s); "
                 "%d unused tensor%s in all: the config does not match the checkpoint",
                 m->path, m->st.index[first]->name, why, count, count == 1 ? "" : "s");
}

/* ---- token ids against the embedding ------------------------------------------------------ */

static int check_id(const mx_model *m, const char *file, const char *field, int id,
                    mlxrt_error *err) {
  int rows = m->cfg.vocab_size;
  if (id < rows) return 0;
  return mx_fail(err, "%s/%s: %s %d is not below the embedding's %d rows (config.json "
                 "vocab_size = %d)", m->path, file, field, id, rows, rows);
}

int mx_model_check_ids(mx_model *m, mlxrt_error *err) {
  const mx_config *c = &m->cfg;
  int rows = c->vocab_size; /* the embedding's rows: load_linear checked them against it */
  for (int i = 0; i < c->n_eos; i++)
    if (check_id(m, "config.json", "eos_token_id", c->eos_token_ids[i], err)) return -1;
  if (check_id(m, "config.json", "bos_token_id", c->bos_token_id, err) ||
      check_id(m, "config.json", "pad_token_id", c->pad_token_id, err))
    return -1;
  mx_gen_config g;
  if (mx_gen_config_load(m->path, &g, err)) return -1;
  for (int i = 0; i < g.n_eos; i++)
    if (check_id(m, "generation_config.json", "eos_token_id", g.eos_ids[i], err)) return -1;
  if (check_id(m, "generation_config.json", "bos_token_id", g.bos_id, err) ||
      check_id(m, "generation_config.json", "pad_token_id", g.pad_id, err))
    return -1;

  /* The tokenizer, when the folder has one: an id past the embedding would only fail (or
   * worse) when that token first appears in a prompt. */
  char *tp = mx_path_join(m->path, "tokenizer.json", err);
  if (!tp) return -1;
  struct stat st;
  int absent = lstat(tp, &st) != 0 && errno == ENOENT;
  mx_tokenizer *t = absent ? NULL : mx_tok_load(m->path, err); /* the folder's tokenizer.json */
  free(tp);
  if (absent) return 0;
  if (!t) return -1;
  int n = mx_tok_vocab_size(t), rc = 0;
  if (n > rows) {
    int32_t id = rows;
    size_t len = 0;
    const char *s = NULL;
    for (; id < n && !(s = mx_tok_id_to_token(t, id, &len)); id++) {}
    rc = mx_fail(err, "%s/tokenizer.json: token '%.*s' has id %d, but the model's embedding has "
                 "%d rows (config.json vocab_size = %d); the tokenizer has %d ids", m->path,
                 s ? (int)(len > 200 ? 200 : len) : 0, s ? s : "", (int)id, rows, rows, n);
  }
  if (rc) mx_tok_free(t);
  else m->tok = t; /* kept: sessions of this model encode with it (read-only, shared) */
  return rc;
}
