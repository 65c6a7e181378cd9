/* libFuzzer target: arbitrary bytes as tokenizer.json text, parsed from an exact-size buffer
 * (no terminator to lean on). A rejected file must leave nothing allocated (LeakSanitizer); an
 * accepted one encodes and decodes a fixed text, then is freed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mlx/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size ? size : 1);
  if (!text) return 0;
  memcpy(text, data, size);
  mlxrt_error err;
  mx_tokenizer *t = mx_tok_parse(text, size, "fuzz/tokenizer.json", &err);
  free(text);
  if (!t) return 0;
  static const char sample[] = "Hello, world! é€😀 <bos>  \n\t1234";
  int32_t *ids = NULL;
  size_t n = 0;
  if (mx_tok_encode(t, sample, sizeof sample - 1, 1, &ids, &n, &err) == 0) {
    char *out = NULL;
    size_t on = 0;
    if (mx_tok_decode(t, ids, n, 0, &out, &on, &err) == 0) free(out);
    free(ids);
  }
  mx_tok_free(t);
  return 0;
}
