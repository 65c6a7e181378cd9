/* libFuzzer target: the Jinja interpreter (src/mlx/jinja.h). The input is a template, then
 * optionally a NUL byte and a context JSON (a small chat context when absent). Parsing and
 * rendering must never crash, hang or leak; every failure is a one-line message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mlx/jinja.h"

static void require(int cond) {
  if (!cond) abort();
}

static const char DEFAULT_CTX[] =
    "{\"bos_token\": \"<bos>\", \"add_generation_prompt\": true, \"messages\": ["
    "{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Hi\"},"
    "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c1\", \"function\":"
    " {\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [true, null, 2.5]}}}]},"
    "{\"role\": \"tool\", \"content\": \"ok\"}], \"tools\": [{\"type\": \"function\", \"function\":"
    " {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\":"
    " \"integer\"}}}}}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *nul = memchr(data, 0, size);
  size_t tlen = nul ? (size_t)(nul - data) : size;
  char *ctx = NULL;
  if (nul) {
    size_t clen = size - tlen - 1;
    ctx = malloc(clen + 1);
    if (!ctx) return 0;
    memcpy(ctx, nul + 1, clen);
    ctx[clen] = 0;
  }
  char *src = malloc(tlen ? tlen : 1); /* exact size: ASan sees any overread */
  if (!src) {
    free(ctx);
    return 0;
  }
  memcpy(src, data, tlen);
  mlxrt_error err;
  mx_jinja *t = mx_jinja_parse(src, tlen, "fuzz", &err);
  if (!t) {
    require(strchr(err.msg, '\n') == NULL);
  } else {
    mx_jinja_options o = {1700000000};
    size_t len = 0;
    char *out = mx_jinja_render(t, ctx ? ctx : DEFAULT_CTX, &o, &len, &err);
    if (out) {
      require(strlen(out) <= len); /* output may hold NULs from the context */
      free(out);
    } else {
      require(strchr(err.msg, '\n') == NULL);
    }
    mx_jinja_free(t);
  }
  free(src);
  free(ctx);
  return 0;
}
