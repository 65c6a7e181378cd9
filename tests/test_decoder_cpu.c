/* The CPU backend's whole-step decoder (accel.h decoder_*) against the reference path: for
 * every tiny checkpoint in tests/fixtures/models (dense, MoE, and E2B-shaped with per-layer
 * embeddings, KV sharing and the double-wide MLP), a prompt longer than the sliding window,
 * then greedy decode steps, must give bit-identical logits and the same tokens. Also:
 * rewinding and re-feeding reproduces the logits. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accel/accel.h"
#include "mlx/decoder_desc.h"
#include "mlx/session.h"
#include "test_util.h"

#define FIXTURES MLXRT_SOURCE_DIR "/tests/fixtures/models"
#define PROMPT 29
#define STEPS 24

static int32_t argmax(const float *x, int n) {
  int32_t b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

static void run_fixture(accel_backend *b, const char *name) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/%s", FIXTURES, name);
  mlxrt_error err = {0};
  mx_model *m = mx_model_open(dir, &err);
  CHECKF(m != NULL, "%s: %s", name, err.msg);
  if (!m) return;
  /* the decoders run every fixture: dense, MoE, per-layer embeddings with KV sharing */
  const char *why = mx_decoder_unsupported_reason(m);
  CHECKF(why == NULL, "%s: not supported: %s", name, why ? why : "-");
  int V = m->cfg.vocab_size;
  int64_t cap = PROMPT + STEPS + 8;
  mx_decoder_desc *dd = mx_decoder_desc_create(m, &err);
  CHECKF(dd != NULL, "%s: %s", name, err.msg);
  mx_session *s = mx_session_create(m, b, cap, 0, &err);
  CHECKF(s != NULL, "%s: %s", name, err.msg);
  accel_decoder *dec = dd ? b->decoder_create(b, &dd->d, cap, &err) : NULL;
  CHECKF(dec != NULL, "%s: %s", name, err.msg);
  float *lr = malloc((size_t)V * sizeof(float)), *ld = malloc((size_t)V * sizeof(float));
  if (!s || !dec || !lr || !ld) goto done;

  int32_t prompt[PROMPT];
  for (int i = 0; i < PROMPT; i++) prompt[i] = (int32_t)((i * 37 + 11) % V);
  CHECKF(mx_session_feed(s, prompt, PROMPT, lr, 0, &err) == 0, "%s: reference prompt: %s", name, err.msg);
  int32_t tok = -1;
  CHECKF(b->decoder_step(dec, prompt, PROMPT, 0, NULL, 0.0, ld, &tok, &err) == 0, "%s: decoder prompt: %s", name, err.msg);
  CHECKF(memcmp(lr, ld, (size_t)V * sizeof(float)) == 0, "%s: prompt logits differ", name);
  CHECKF(tok == argmax(lr, V), "%s: prompt argmax %d vs %d", name, tok, argmax(lr, V));

  int same_logits = 1, same_tokens = 1;
  int32_t last_fed = tok;
  int32_t tr = argmax(lr, V);
  for (int st = 0; st < STEPS; st++) {
    int64_t pos = PROMPT + st;
    last_fed = tok;
    if (mx_session_feed(s, &tr, 1, lr, 0, &err) || b->decoder_step(dec, &tok, 1, pos, NULL, 0.0, ld, &tok, &err)) {
      CHECKF(0, "%s: step %d: %s", name, st, err.msg);
      break;
    }
    same_logits &= memcmp(lr, ld, (size_t)V * sizeof(float)) == 0;
    tr = argmax(lr, V);
    same_tokens &= tr == tok;
  }
  CHECKF(same_logits, "%s: decode logits differ from the reference path", name);
  CHECKF(same_tokens, "%s: greedy tokens differ from the reference path", name);

  /* rewind to the last step's position (within every ring) and feed its token again: the
   * same logits come back; next_token alone (no logits) agrees with them */
  int32_t t2 = -1;
  int64_t last = PROMPT + STEPS - 1;
  CHECKF(b->decoder_step(dec, &last_fed, 1, last, NULL, 0.0, NULL, &t2, &err) == 0, "%s: token-only step: %s", name, err.msg);
  CHECKF(b->decoder_step(dec, &last_fed, 1, last, NULL, 0.0, ld, NULL, &err) == 0, "%s: logits-only step: %s", name, err.msg);
  CHECKF(memcmp(lr, ld, (size_t)V * sizeof(float)) == 0, "%s: rewound step logits differ", name);
  CHECKF(t2 == argmax(ld, V), "%s: token-only step gives %d, the logits say %d", name, t2, argmax(ld, V));

  /* the session-side wrapper: same prompt logits */
  mx_decoder *w = mx_decoder_open(m, b, cap, 0, &err);
  CHECKF(w != NULL, "%s: mx_decoder_open: %s", name, err.msg);
  if (w) {
    mx_session *s3 = mx_session_create(m, b, cap, 0, &err);
    if (s3 && mx_session_feed(s3, prompt, PROMPT, lr, 0, &err) == 0) {
      CHECKF(mx_decoder_feed(w, prompt, PROMPT, 0, ld, NULL, &err) == 0, "%s: %s", name, err.msg);
      CHECKF(memcmp(lr, ld, (size_t)V * sizeof(float)) == 0, "%s: wrapper prompt logits differ", name);
    }
    mx_session_free(s3);
    mx_decoder_close(w);
  }

  /* bad input: a token outside the vocabulary, positions beyond the capacity */
  int32_t bad = V;
  CHECKF(b->decoder_step(dec, &bad, 1, 0, NULL, 0.0, ld, NULL, &err) != 0 && strstr(err.msg, "vocabulary"),
         "%s: bad token accepted (%s)", name, err.msg);
  CHECKF(b->decoder_step(dec, &tok, 1, cap, NULL, 0.0, ld, NULL, &err) != 0 && strstr(err.msg, "capacity"),
         "%s: position beyond capacity accepted (%s)", name, err.msg);
done:
  free(lr);
  free(ld);
  if (dec) b->decoder_free(dec);
  mx_session_free(s);
  mx_decoder_desc_free(dd);
  mx_model_close(m);
}

int main(void) {
  mlxrt_error err = {0};
  accel_backend *b = accel_cpu_create(2, &err);
  CHECKF(b != NULL, "cpu backend: %s", err.msg);
  if (!b) TEST_END();
  CHECK(b->decoder_create && b->decoder_step && b->decoder_free);
  DIR *d = opendir(FIXTURES);
  CHECKF(d != NULL, "cannot open %s", FIXTURES);
  int n = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || strncmp(e->d_name, "gemma", 5) != 0) continue;
    run_fixture(b, e->d_name);
    n++;
  }
  if (d) closedir(d);
  CHECKF(n >= 20, "only %d fixtures found", n);
  accel_destroy(b);
  TEST_END();
}
