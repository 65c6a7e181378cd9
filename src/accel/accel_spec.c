/* Byte accounting for weight specs: what each part must hold, what a product streams. */
#include "accel/accel.h"

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
