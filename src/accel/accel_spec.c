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

int accel_check_layer_weights(const accel_model_desc *d, int i, mlxrt_error *err) {
  const accel_layer_desc *l = &d->layers[i];
  const int64_t H = d->hidden;
  const int64_t qd = (int64_t)d->n_heads * l->head_dim, kvd = (int64_t)l->n_kv_heads * l->head_dim;
  if (accel_check_weight(l->q, qd, H, "q_proj", i, err) || accel_check_weight(l->k, kvd, H, "k_proj", i, err) ||
      (!l->k_eq_v && accel_check_weight(l->v, kvd, H, "v_proj", i, err)) ||
      accel_check_weight(l->o, H, qd, "o_proj", i, err) ||
      accel_check_weight(l->gate, l->intermediate, H, "gate_proj", i, err) ||
      accel_check_weight(l->up, l->intermediate, H, "up_proj", i, err) ||
      accel_check_weight(l->down, H, l->intermediate, "down_proj", i, err))
    return -1;
  return 0;
}
