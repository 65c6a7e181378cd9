/* MLX's own CPU sin/cos/exp (src/base/mlx_cpu_math.c) and the RoPE tables of mlx-cpu numerics
 * (src/mlx/ops.c) against golden values from MLX itself (scripts/golden_mlx_cpu_math.py,
 * tests/fixtures/mlx_cpu_math.safetensors): every value must be bit-identical. Also the
 * gelu_approx table (src/base/gelu.c) against its op-by-op definition on every input.
 * A larger file made by that script can be given as argv[1]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bf16.h"
#include "base/error.h"
#include "base/gelu.h"
#include "base/mlx_cpu_math.h"
#include "mlx/ops.h"
#include "mlx/safetensors.h"
#include "test_util.h"

static const float *f32s(const st_file *f, const char *name, int64_t *n) {
  const st_tensor *t = st_file_find(f, name);
  if (!t || t->dtype != ST_F32) return NULL;
  *n = st_numel(t);
  return (const float *)t->data; /* the fixture is written with 4-byte alignment by safetensors */
}

static uint32_t bits(float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

/* Counts inputs where fn(x) differs from MLX's value in any bit; prints the first few, and
 * how often libm's function (what the default numerics use) differs. */
static int64_t compare(const char *what, float (*fn)(float), float (*libm)(float), const float *x,
                       const float *want, int64_t n) {
  int64_t bad = 0, bad_libm = 0;
  for (int64_t i = 0; i < n; i++) {
    float in, w, got;
    memcpy(&in, x + i, 4);
    memcpy(&w, want + i, 4);
    got = fn(in);
    bad_libm += bits(libm(in)) != bits(w);
    if (bits(got) != bits(w) && !(got != got && w != w)) {
      if (bad++ < 5) printf("  %s(%.9g): ours %.9g, MLX %.9g\n", what, in, got, w);
    }
  }
  printf("%s: %lld inputs, %lld differ from MLX (libm's: %lld)\n", what, (long long)n, (long long)bad,
         (long long)bad_libm);
  return bad;
}

/* One RoPE table: the float32 cos/sin MLX multiplies by, then their bf16 roundings as the
 * reference path applies them. */
static void check_rope(const st_file *f, int i) {
  char key[32], name[48];
  snprintf(key, sizeof key, "rope%d", i);
  const char *meta = st_file_metadata(f, key);
  CHECKF(meta != NULL, "fixture lacks metadata %s", key);
  if (!meta) return;
  int kind, dims, rotated;
  double base, factor;
  CHECKF(sscanf(meta, "%d %d %lf %lf %d", &kind, &dims, &base, &factor, &rotated) == 5, "%s: '%s'", key, meta);
  int64_t nc = 0, ns = 0;
  snprintf(name, sizeof name, "rope%d_cos", i);
  const float *wc = f32s(f, name, &nc);
  snprintf(name, sizeof name, "rope%d_sin", i);
  const float *wsn = f32s(f, name, &ns);
  snprintf(name, sizeof name, "rope%d_pos", i);
  const st_tensor *tp = st_file_find(f, name);
  CHECKF(wc && wsn && tp && tp->dtype == ST_I32, "%s: tables missing", key);
  if (!wc || !wsn || !tp) return;
  int half = dims / 2, live = (rotated + 1) / 2;
  int64_t npos = st_numel(tp);
  CHECKF(nc == npos * half && ns == nc, "%s: table shape", key);
  float inv[2048], scale, c[2048], s[2048];
  if (half > 2048 || nc != npos * half) return;
  mx_rope_freqs_mlx_cpu(inv, &scale, kind, base, factor, dims, live);
  int64_t bad = 0, bad_bf16 = 0;
  for (int64_t p = 0; p < npos; p++) {
    int32_t pos;
    memcpy(&pos, tp->data + 4 * p, 4);
    float fp = (float)pos * scale;
    mx_rope_angles(c, s, half, inv, fp, 1);
    for (int j = 0; j < half; j++) {
      float th = fp * inv[j], w1, w2;
      memcpy(&w1, wc + p * half + j, 4);
      memcpy(&w2, wsn + p * half + j, 4);
      float oc = inv[j] == 0.0f ? 1.0f : mx_mlxcpu_cosf(th), os = inv[j] == 0.0f ? 0.0f : mx_mlxcpu_sinf(th);
      if (bits(oc) != bits(w1) || bits(os) != bits(w2)) {
        if (bad++ < 3) printf("  %s pos %d pair %d: ours %.9g %.9g, MLX %.9g %.9g\n", key, pos, j, oc, os, w1, w2);
      }
      if (bits(c[j]) != bits(mx_round_bf16(w1)) || bits(s[j]) != bits(mx_round_bf16(w2))) bad_bf16++;
    }
  }
  printf("%s (%s): %lld positions x %d pairs, %lld float32 and %lld bf16 values differ from MLX\n", key, meta,
         (long long)npos, half, (long long)bad, (long long)bad_bf16);
  CHECKF(bad == 0, "%s: %lld RoPE cos/sin values differ from mx.fast.rope's", key, (long long)bad);
  CHECKF(bad_bf16 == 0, "%s: %lld bf16 RoPE values differ", key, (long long)bad_bf16);
}

/* The table's gelu_approx is the definition's bit for bit: on all 65,536 bf16 inputs (NaNs and
 * infinities included) and on inputs that are not bf16 values (the definition itself). */
static void check_gelu_table(void) {
  const uint16_t *t = mx_gelu_table_ready();
  int bad = 0;
  for (uint32_t i = 0; i < (1u << 16); i++) {
    const uint32_t b = i << 16;
    float x;
    memcpy(&x, &b, 4);
    const float want = mx_gelu_approx_exact(x), got = mx_gelu_approx_bf16(t, x);
    if (bits(want) != bits(got) && bad++ < 4)
      fprintf(stderr, "gelu of bf16 %04x: table %08x, definition %08x\n", i, bits(got), bits(want));
  }
  CHECKF(bad == 0, "gelu table: %d of 65536 bf16 inputs differ from the definition", bad);
  const float off[] = {0.3f, -1.2345678f, 3.0e-5f, 7.77777f, -0.0078125001f};
  for (size_t k = 0; k < sizeof off / sizeof off[0]; k++)
    CHECK(bits(mx_gelu_approx_bf16(t, off[k])) == bits(mx_gelu_approx_exact(off[k])));
  CHECK(mx_gelu_approx_exact(0.0f) == 0.0f && mx_gelu_approx_exact(-20.0f) == 0.0f);
  CHECK(fabsf(mx_gelu_approx_exact(2.0f) - 1.9545977f) < 0.01f); /* 0.5·2·(1 + tanh(1.5957691·1.08943)) */
}

int main(int argc, char **argv) {
  check_gelu_table();
  char path[1024];
  if (argc > 1) snprintf(path, sizeof path, "%s", argv[1]);
  else snprintf(path, sizeof path, "%s/tests/fixtures/mlx_cpu_math.safetensors", MLXRT_SOURCE_DIR);
  st_file f;
  mlxrt_error err = {{0}};
  CHECKF(st_open_file(path, &f, &err) == 0, "%s", err.msg);
  if (err.msg[0]) TEST_END();
  int64_t nx = 0, n1 = 0, n2 = 0, ne = 0, n3 = 0;
  const float *x = f32s(&f, "x", &nx), *sn = f32s(&f, "sin", &n1), *cs = f32s(&f, "cos", &n2);
  const float *ex = f32s(&f, "ex", &ne), *ev = f32s(&f, "exp", &n3);
  CHECKF(x && sn && cs && n1 == nx && n2 == nx && nx > 0, "%s: x/sin/cos missing or mismatched", path);
  CHECKF(ex && ev && n3 == ne && ne > 0, "%s: ex/exp missing or mismatched", path);
  if (x && sn && cs && n1 == nx && n2 == nx) {
    CHECK(compare("sin", mx_mlxcpu_sinf, sinf, x, sn, nx) == 0);
    CHECK(compare("cos", mx_mlxcpu_cosf, cosf, x, cs, nx) == 0);
  }
  if (ex && ev && n3 == ne) CHECK(compare("exp", mx_mlxcpu_expf, expf, ex, ev, ne) == 0);
  for (int i = 0; i < 16; i++) {
    char key[16];
    snprintf(key, sizeof key, "rope%d", i);
    if (st_file_metadata(&f, key)) check_rope(&f, i);
    else CHECKF(i > 0, "%s: no RoPE tables", path);
    if (!st_file_metadata(&f, key)) break;
  }
  st_close_file(&f);
  TEST_END();
}
