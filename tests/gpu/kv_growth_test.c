/* mlxrt-kvgrowth-test: the device decoder's KV cache grows by pages, on a GPU machine.
 *   mlxrt-kvgrowth-test MODEL_DIR [--to N] [--chunk N] [--full N] [--exhaust GIB]
 * 1. A session at the model's maximum context is fed pseudo-random tokens in chunks of --chunk
 *    (1024) up to --to (65536) tokens. After each chunk: the positions its pages back cover the
 *    tokens fed, the KV bytes held never shrink, and a growth adds whole pages (the log is the
 *    table printed). At 8192 tokens the cache must hold < 10 % of what a bf16 cache of the full
 *    context (--full, 262144) holds.
 * 2. A second session takes the same tokens in one feed (its pages made at once) and its last
 *    logits must equal the first session's bit for bit: growing between chunks moved nothing.
 * 3. --exhaust G: the device's memory is taken (by this process) until G GiB stay free, a new
 *    session is fed until its cache cannot grow: the feed fails naming the KV cache, the
 *    session's position stays at the last chunk that fitted, and once the memory is given back
 *    the same session goes on from there.
 * Exit status 0 when every check holds. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlxrt.h"

static void fill(int32_t *t, int64_t n, int vocab) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    t[i] = (int32_t)(10 + s % (uint64_t)(vocab - 10));
  }
}

static int fails;
#define CHECK(c, ...)                     \
  do {                                    \
    if (!(c)) {                           \
      printf("FAIL: " __VA_ARGS__);       \
      printf("\n");                       \
      fails++;                            \
    }                                     \
  } while (0)

int main(int argc, char **argv) {
  const char *dir = NULL;
  int64_t to = 65536, chunk = 1024, full_ctx = 262144;
  double exhaust = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--to") && i + 1 < argc) to = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--chunk") && i + 1 < argc) chunk = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--full") && i + 1 < argc) full_ctx = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--exhaust") && i + 1 < argc) exhaust = atof(argv[++i]);
    else if (argv[i][0] != '-' && !dir) dir = argv[i];
    else {
      fprintf(stderr, "usage: mlxrt-kvgrowth-test MODEL_DIR [--to N] [--chunk N] [--full N] [--exhaust GIB]\n");
      return 2;
    }
  }
  if (!dir || to < chunk || chunk <= 0) {
    fprintf(stderr, "usage: mlxrt-kvgrowth-test MODEL_DIR [--to N] [--chunk N] [--full N] [--exhaust GIB]\n");
    return 2;
  }
  mlxrt_error err = {{0}};
  mlxrt_options opt = {"cuda", 0, 0, NULL, NULL};
  mlxrt_model *m = mlxrt_model_load(dir, &opt, &err);
  if (!m) {
    fprintf(stderr, "FAIL: %s\n", err.msg);
    return 1;
  }
  const int V = mlxrt_model_vocab_size(m);
  int32_t *toks = malloc((size_t)to * sizeof *toks);
  float *la = malloc((size_t)V * sizeof(float)), *lb = malloc((size_t)V * sizeof(float));
  mlxrt_session *a = mlxrt_session_new(m, 0, &err);
  if (!toks || !la || !lb || !a) {
    fprintf(stderr, "FAIL: %s\n", a ? "out of memory" : err.msg);
    return 1;
  }
  fill(toks, to, V);
  mlxrt_memory mm, prev = {0};
  uint64_t at8k = 0;
  int grows = 0;
  printf("| tokens | positions backed | KV MiB held | added MiB | device GiB in use |\n| ---: | ---: | ---: | ---: | ---: |\n");
  for (int64_t p = 0; p < to; p += chunk) {
    const int64_t n = p + chunk <= to ? chunk : to - p;
    if (mlxrt_session_feed(a, toks + p, n, p + n == to ? la : NULL, 0, &err) || mlxrt_session_memory(a, &mm, &err)) {
      printf("FAIL: feeding %lld..%lld: %s\n", (long long)p, (long long)(p + n), err.msg);
      return 1;
    }
    CHECK(mm.kv_positions >= p + n, "%lld tokens fed, pages back only %lld positions", (long long)(p + n),
          (long long)mm.kv_positions);
    CHECK(mm.kv_bytes >= prev.kv_bytes, "the KV cache shrank from %llu to %llu bytes",
          (unsigned long long)prev.kv_bytes, (unsigned long long)mm.kv_bytes);
    if (mm.kv_bytes != prev.kv_bytes) {
      grows++;
      printf("| %lld | %lld | %.1f | %.1f | %.2f |\n", (long long)(p + n), (long long)mm.kv_positions,
             (double)mm.kv_bytes / 1048576.0, (double)(mm.kv_bytes - prev.kv_bytes) / 1048576.0,
             (double)mm.device_used / 1073741824.0);
    }
    if (p + n <= 8192) at8k = mm.kv_bytes;
    prev = mm;
  }
  /* the bf16 cache of the full context (--full, the 31B's 262144): every layer's K and V (a
   * KV-shared layer's counted too, which only raises it) */
  const uint64_t full = mlxrt_model_kv_bytes_per_token(m, full_ctx - 1);
  printf("grew %d times to %lld tokens; KV held at 8192 tokens: %.1f MiB, at the full context: %.1f MiB (%.2f %%)\n",
         grows, (long long)to, (double)at8k / 1048576.0, (double)full / 1048576.0,
         full ? 100.0 * (double)at8k / (double)full : 0.0);
  CHECK(grows >= 2, "the cache grew %d times", grows);
  CHECK(to < 8192 || (full && (double)at8k < 0.10 * (double)full), "at 8192 tokens the cache holds %.2f %% of the full context's",
        full ? 100.0 * (double)at8k / (double)full : 100.0);

  /* the same tokens in one feed: bit-identical last logits */
  mlxrt_session *b = mlxrt_session_new(m, 0, &err);
  if (!b || mlxrt_session_feed(b, toks, to - chunk, NULL, 0, &err) ||
      mlxrt_session_feed(b, toks + to - chunk, chunk, lb, 0, &err)) {
    printf("FAIL: one-feed session: %s\n", err.msg);
    return 1;
  }
  size_t diff = 0;
  for (int i = 0; i < V; i++) diff += memcmp(&la[i], &lb[i], sizeof(float)) != 0;
  CHECK(diff == 0, "%zu of %d logits differ between the grown session and the one-feed session", diff, V);
  if (!diff) printf("grown session and one-feed session: last logits bit-identical (%d)\n", V);
  mlxrt_session_free(b);
  mlxrt_session_free(a);

  if (exhaust >= 0) {
    size_t fb = 0, tb = 0;
    cudaMemGetInfo(&fb, &tb);
    const size_t keep = (size_t)(exhaust * 1073741824.0);
    void *block = NULL;
    if (fb > keep && cudaMalloc(&block, fb - keep) != cudaSuccess) block = NULL;
    cudaMemGetInfo(&fb, &tb);
    printf("exhaust: %.2f GiB left free\n", (double)fb / 1073741824.0);
    mlxrt_session *c = mlxrt_session_new(m, 0, &err);
    if (!c) {
      printf("FAIL: session with %.2f GiB free: %s\n", (double)fb / 1073741824.0, err.msg);
      return 1;
    }
    int64_t p = 0;
    int failed = 0;
    for (; p < to; p += chunk)
      if (mlxrt_session_feed(c, toks + p, chunk, NULL, 0, &err)) {
        failed = 1;
        break;
      }
    CHECK(failed, "the cache never ran out within %lld tokens: choose a smaller --exhaust", (long long)to);
    if (failed) {
      printf("exhaust: the feed at %lld failed: %s\n", (long long)p, err.msg);
      CHECK(strstr(err.msg, "KV cache cannot grow") != NULL, "the error does not name the KV cache");
      CHECK(mlxrt_session_position(c) == p, "position %lld after the failed feed, expected %lld",
            (long long)mlxrt_session_position(c), (long long)p);
      cudaFree(block);
      block = NULL;
      memset(&err, 0, sizeof err);
      if (mlxrt_session_feed(c, toks + p, chunk, NULL, 0, &err)) printf("FAIL: after the memory came back: %s\n", err.msg), fails++;
      else printf("exhaust: with the memory back the session went on to %lld\n", (long long)mlxrt_session_position(c));
    }
    cudaFree(block);
    mlxrt_session_free(c);
  }
  mlxrt_model_free(m);
  free(toks);
  free(la);
  free(lb);
  printf("%s\n", fails ? "kvgrowth: FAIL" : "kvgrowth: passed");
  return fails ? 1 : 0;
}
