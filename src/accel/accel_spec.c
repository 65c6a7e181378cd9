/* Byte accounting for weight specs: what each part must hold, what a product streams. */
#include "accel/accel.h"
#include "base/error.h"

static size_t dtype_bytes(accel_dtype dt) { return dt == ACCEL_F32 ? 4 : 2; }

size_t accel_part_bytes(const accel_spec *s, accel_part part) {
  size_t slabs = s->experts > 0 ? (size_t)s->experts : 1;
  size_t rows = (size_t)s->rows, cols = (size_t)s->cols;
  if (s->mode == ACCEL_MODE_DENSE)
    return part == ACCEL_PART_WEIGHT ? slabs * rows * cols * dtype_bytes(s->dense_dtype) : 0;
  size_t groups = s->group_size > 0 ? cols / (size_t)s->group_size : 0;
  switch (part) {
  case ACCEL_PART_WEIGHT:
    return slabs * rows * (cols * (size_t)s->bits / 32) * 4;
  case ACCEL_PART_SCALES:
    return slabs * rows * groups * (s->mode == ACCEL_MODE_AFFINE ? dtype_bytes(s->scales_dtype) : 1);
  case ACCEL_PART_BIASES:
    return s->mode == ACCEL_MODE_AFFINE ? slabs * rows * groups * dtype_bytes(s->scales_dtype) : 0;
  }
  return 0;
}

size_t accel_weight_bytes(const accel_spec *s) {
  return accel_part_bytes(s, ACCEL_PART_WEIGHT) + accel_part_bytes(s, ACCEL_PART_SCALES) +
         accel_part_bytes(s, ACCEL_PART_BIASES);
}

const char *accel_mode_name(accel_mode mode) {
  switch (mode) {
  case ACCEL_MODE_DENSE: return "dense";
  case ACCEL_MODE_AFFINE: return "affine";
  case ACCEL_MODE_NVFP4: return "nvfp4";
  case ACCEL_MODE_MXFP4: return "mxfp4";
  case ACCEL_MODE_MXFP8: return "mxfp8";
  }
  return "?";
}

int accel_check_weight(const accel_weight *w, int64_t rows, int64_t cols, const char *what, int layer,
                       mlxrt_error *err) {
  if (!w) return mx_fail(err, "decoder: layer %d has no %s weight", layer, what);
  if (w->spec.experts > 0 || w->spec.rows != rows || w->spec.cols != cols)
    return mx_fail(err, "decoder: layer %d %s is %lldx%lld (experts %lld), expected %lldx%lld", layer,
                   what, (long long)w->spec.rows, (long long)w->spec.cols, (long long)w->spec.experts,
                   (long long)rows, (long long)cols);
  return 0;
}

int accel_check_stacked(const accel_weight *w, int64_t experts, int64_t rows, int64_t cols, const char *what, int layer,
                        mlxrt_error *err) {
  if (!w) return mx_fail(err, "decoder: layer %d has no %s weight", layer, what);
  if (w->spec.experts != experts || w->spec.rows != rows || w->spec.cols != cols)
    return mx_fail(err, "decoder: layer %d %s is %lldx%lldx%lld, expected %lldx%lldx%lld", layer, what,
                   (long long)w->spec.experts, (long long)w->spec.rows, (long long)w->spec.cols, (long long)experts,
                   (long long)rows, (long long)cols);
  return 0;
}

static int check_moe(const accel_model_desc *d, int i, mlxrt_error *err) {
  const accel_moe_desc *m = &d->layers[i].moe;
  const int64_t H = d->hidden, E = m->experts, I = m->intermediate;
  if (E < 0 || m->top_k < 1 || m->top_k > E || I <= 0)
    return mx_fail(err, "decoder: layer %d: MoE of %d experts, top-k %d, intermediate %d", i, m->experts, m->top_k,
                   m->intermediate);
  if (!m->router_norm || !m->per_expert_scale || !m->post_ffw_norm_1 || !m->pre_ffw_norm_2 || !m->post_ffw_norm_2)
    return mx_fail(err, "decoder: layer %d: MoE block without its norms or per-expert scales", i);
  return accel_check_weight(m->router, E, H, "router", i, err) ||
         accel_check_stacked(m->gate, E, I, H, "experts' gate_proj", i, err) ||
         accel_check_stacked(m->up, E, I, H, "experts' up_proj", i, err) ||
         accel_check_stacked(m->down, E, H, I, "experts' down_proj", i, err);
}

int accel_check_layer_weights(const accel_model_desc *d, int i, mlxrt_error *err) {
  const accel_layer_desc *l = &d->layers[i];
  const int64_t H = d->hidden;
  const int64_t qd = (int64_t)d->n_heads * l->head_dim, kvd = (int64_t)l->n_kv_heads * l->head_dim;
  const int own = l->kv_source == i;
  if (l->kv_source < 0 || l->kv_source > i)
    return mx_fail(err, "decoder: layer %d: KV source layer %d is not an earlier layer", i, l->kv_source);
  if (!own) {
    const accel_layer_desc *s = &d->layers[l->kv_source];
    if (s->kv_source != l->kv_source || s->sliding != l->sliding || s->head_dim != l->head_dim ||
        s->n_kv_heads != l->n_kv_heads)
      return mx_fail(err, "decoder: layer %d: KV source layer %d is shared itself or of another type or shape", i,
                     l->kv_source);
  }
  if (accel_check_weight(l->q, qd, H, "q_proj", i, err) ||
      (own && accel_check_weight(l->k, kvd, H, "k_proj", i, err)) ||
      (own && !l->k_eq_v && accel_check_weight(l->v, kvd, H, "v_proj", i, err)) ||
      accel_check_weight(l->o, H, qd, "o_proj", i, err) ||
      accel_check_weight(l->gate, l->intermediate, H, "gate_proj", i, err) ||
      accel_check_weight(l->up, l->intermediate, H, "up_proj", i, err) ||
      accel_check_weight(l->down, H, l->intermediate, "down_proj", i, err) ||
      (l->moe.experts && check_moe(d, i, err)))
    return -1;
  if (own && !l->k_norm) return mx_fail(err, "decoder: layer %d: no k_norm", i);
  if (d->ple_dim > 0 && (accel_check_weight(l->ple_gate, d->ple_dim, H, "per_layer_input_gate", i, err) ||
                         accel_check_weight(l->ple_proj, H, d->ple_dim, "per_layer_projection", i, err)))
    return -1;
  if (d->ple_dim > 0 && !l->post_ple_norm) return mx_fail(err, "decoder: layer %d: no post_per_layer_input_norm", i);
  return 0;
}

int accel_check_ple(const accel_model_desc *d, mlxrt_error *err) {
  if (d->ple_dim <= 0) return 0;
  const int64_t LP = (int64_t)d->n_layers * d->ple_dim;
  if (accel_check_weight(d->ple_embed, d->vocab, LP, "embed_tokens_per_layer", -1, err) ||
      accel_check_weight(d->ple_model_proj, LP, d->hidden, "per_layer_model_projection", -1, err))
    return -1;
  if (!d->ple_proj_norm) return mx_fail(err, "decoder: no per_layer_projection_norm");
  return 0;
}

int accel_spec_check(const accel_spec *s, const char *name, mlxrt_error *err) {
  if (!name) name = "(unnamed)";
  if (s->rows <= 0 || s->cols <= 0 || s->experts < 0)
    return mx_fail(err, "%s: bad shape experts=%lld rows=%lld cols=%lld", name,
                   (long long)s->experts, (long long)s->rows, (long long)s->cols);
  if (s->mode == ACCEL_MODE_DENSE) {
    if (s->dense_dtype != ACCEL_BF16 && s->dense_dtype != ACCEL_F16 &&
        s->dense_dtype != ACCEL_F32)
      return mx_fail(err, "%s: dense weight dtype %d is not bf16, f16 or f32", name,
                     (int)s->dense_dtype);
    return 0;
  }
  int bits = s->bits, gs = s->group_size;
  switch (s->mode) {
  case ACCEL_MODE_AFFINE:
    if (bits < 2 || bits > 8 || bits == 7)
      return mx_fail(err, "%s: affine bits %d not in {2,3,4,5,6,8}", name, bits);
    if (gs != 32 && gs != 64 && gs != 128)
      return mx_fail(err, "%s: affine group size %d not in {32,64,128}", name, gs);
    if (s->scales_dtype != ACCEL_BF16 && s->scales_dtype != ACCEL_F16 &&
        s->scales_dtype != ACCEL_F32)
      return mx_fail(err, "%s: affine scales dtype %d is not bf16, f16 or f32", name,
                     (int)s->scales_dtype);
    break;
  case ACCEL_MODE_NVFP4:
    if (bits != 4 || gs != 16)
      return mx_fail(err, "%s: nvfp4 needs bits 4 and group size 16, got %d/%d", name, bits, gs);
    break;
  case ACCEL_MODE_MXFP4:
    if (bits != 4 || gs != 32)
      return mx_fail(err, "%s: mxfp4 needs bits 4 and group size 32, got %d/%d", name, bits, gs);
    break;
  case ACCEL_MODE_MXFP8:
    if (bits != 8 || gs != 32)
      return mx_fail(err, "%s: mxfp8 needs bits 8 and group size 32, got %d/%d", name, bits, gs);
    break;
  default:
    return mx_fail(err, "%s: unknown quantization mode %d", name, (int)s->mode);
  }
  if (s->cols % gs != 0)
    return mx_fail(err, "%s: %lld columns are not a multiple of the group size %d", name,
                   (long long)s->cols, gs);
  if ((s->cols * bits) % 32 != 0)
    return mx_fail(err, "%s: %lld columns of %d bits do not fill whole uint32 words", name,
                   (long long)s->cols, bits);
  return 0;
}
