/* gelu_approx (gelu.h). Its input is rounded to bf16 before the tanh and its result is a bf16,
 * so on bf16 inputs it is a function of 65,536 values: a table of them (128 KiB) replaces a
 * libm tanhf per value (a fifth of a CPU prompt pass's time) and gives the definition's bits. */
#include "base/gelu.h"

#include <math.h>
#include <pthread.h>

#include "base/bf16.h"

#define R mx_round_bf16

float mx_gelu_approx_exact(float x) {
  /* the constants rounded to bf16 as MLX does */
  const float c_sqrt = R((float)sqrt(2.0 / 3.14159265358979323846)), c_k = R(0.044715f), c_half = 0.5f;
  float x3 = R(x * x * x);
  float t = R(x + R(c_k * x3));
  t = R(c_sqrt * t);
  float th = R(tanhf(t));
  return R(R(c_half * x) * R(1.0f + th));
}

static uint16_t gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void gelu_build(void) {
  for (uint32_t i = 0; i < (1u << 16); i++) {
    const uint32_t b = i << 16;
    float x, y;
    memcpy(&x, &b, sizeof x);
    y = mx_gelu_approx_exact(x);
    uint32_t yb;
    memcpy(&yb, &y, sizeof yb);
    gelu_table[i] = (uint16_t)(yb >> 16); /* y is a bf16 value: its low half is zero */
  }
}

const uint16_t *mx_gelu_table_ready(void) {
  pthread_once(&gelu_once, gelu_build);
  return gelu_table;
}
