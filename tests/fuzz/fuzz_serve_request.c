/* libFuzzer target: mlxrt serve's request parser (tools/serve/serve_request.c) on arbitrary
 * bytes, as a chat and as a completions body. Checks, beyond ASan/UBSan/LSan: a refused body
 * gets a 4xx/5xx OpenAI error with a one-line UTF-8 message; an accepted one satisfies every
 * documented range, and its messages and tools are JSON arrays again. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                                                                   \
  do {                                                                             \
    if (!(c)) {                                                                    \
      fprintf(stderr, "fuzz_serve_request: %s:%d: %s\n", __FILE__, __LINE__, #c); \
      abort();                                                                     \
    }                                                                              \
  } while (0)

static void check_accepted(const serve_request *r, const serve_limits *lim) {
  CHECK(r->max_tokens == -1 || r->max_tokens >= 1);
  CHECK(r->n_stop >= 0 && r->n_stop <= SERVE_MAX_STOP);
  for (int i = 0; i < r->n_stop; i++) CHECK(r->stop[i][0] && strlen(r->stop[i]) <= SERVE_MAX_STOP_BYTES);
  CHECK(r->top_logprobs >= 0 && r->top_logprobs <= SERVE_MAX_TOP_LOGPROBS);
  CHECK(r->temperature == -1 || (r->temperature >= 0 && r->temperature <= 2));
  CHECK(r->top_p == -1 || (r->top_p > 0 && r->top_p <= 1));
  CHECK(r->top_k >= -1);
  if (r->kind == SERVE_CHAT) {
    CHECK(r->messages_json && !r->prompt);
    CHECK(r->n_messages >= 1 && r->n_messages <= lim->max_messages);
    cJSON *m = cJSON_Parse(r->messages_json);
    CHECK(cJSON_IsArray(m) && (size_t)cJSON_GetArraySize(m) == r->n_messages);
    cJSON_Delete(m);
    if (r->tools_json) {
      cJSON *t = cJSON_Parse(r->tools_json);
      CHECK(cJSON_IsArray(t));
      cJSON_Delete(t);
    }
  } else {
    CHECK(r->prompt && !r->messages_json && strlen(r->prompt) == r->prompt_len);
    CHECK(serve_utf8_valid(r->prompt, r->prompt_len));
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  serve_limits lim;
  serve_limits_default(&lim);
  lim.max_messages = 64;
  for (int k = 0; k < 2; k++) {
    serve_request r;
    serve_error e;
    memset(&e, 0, sizeof e);
    if (serve_request_parse((serve_kind)k, (const char *)data, size, &lim, &r, &e) == 0) {
      check_accepted(&r, &lim);
      serve_request_free(&r);
    } else {
      CHECK(e.status >= 400 && e.status < 600 && e.type && e.message[0]);
      CHECK(strchr(e.message, '\n') == NULL && strlen(e.message) < sizeof e.message);
      CHECK(serve_utf8_valid(e.message, strlen(e.message)));
    }
  }
  return 0;
}
