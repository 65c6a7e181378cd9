/* gelu_approx with MLX's bf16 rounding points, shared by the model layer's reference path and
 * the CPU decoder. */
#ifndef MLXRT_BASE_GELU_H
#define MLXRT_BASE_GELU_H

#include <stdint.h>
#include <string.h>

/* 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), op by op in bf16: the definition. */
float mx_gelu_approx_exact(float x);

/* The same bits, from a table of every bf16 input (built once per process, thread-safe) when x
 * is a bf16 value, as the products' rounded outputs always are; else the definition. */
extern const uint16_t *mx_gelu_table_ready(void);
static inline float mx_gelu_approx_bf16(const uint16_t *table, float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  if (b & 0xffffu) return mx_gelu_approx_exact(x);
  const uint32_t r = (uint32_t)table[b >> 16] << 16;
  float y;
  memcpy(&y, &r, sizeof y);
  return y;
}

#endif
