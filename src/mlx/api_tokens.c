/* The public token calls (include/mlxrt.h "tokens", "memory"): the model's tokenizer, read-only
 * and shared, so these are thread-safe on a shared model. */
#include <stdlib.h>

#include "base/error.h"
#include "mlx/api_internal.h"
#include "mlx/tokenizer.h"

void mlxrt_free(void *p) { free(p); }

static const mx_tokenizer *model_tokenizer(const mlxrt_model *M, mlxrt_error *err) {
  if (!M->m->tok) mx_fail(err, "%s: no tokenizer.json: the model has no tokenizer", M->m->path);
  return M->m->tok;
}

int mlxrt_tokenize(const mlxrt_model *M, const char *text, size_t len, int add_special,
                   int32_t **ids, size_t *n, mlxrt_error *err) {
  const mx_tokenizer *t = model_tokenizer(M, err);
  if (!t) return -1;
  if (!text && len) return mx_fail(err, "tokenize: text is NULL but its length is %zu", len);
  return mx_tok_encode(t, text ? text : "", len, add_special, ids, n, err);
}

char *mlxrt_detokenize(const mlxrt_model *M, const int32_t *ids, size_t n, int skip_special,
                       size_t *len, mlxrt_error *err) {
  const mx_tokenizer *t = model_tokenizer(M, err);
  if (!t) return NULL;
  if (!ids && n) {
    mx_fail(err, "detokenize: ids is NULL but n is %zu", n);
    return NULL;
  }
  static const int32_t none[1] = {0};
  char *text = NULL;
  size_t l = 0;
  if (mx_tok_decode(t, ids ? ids : none, n, skip_special, &text, &l, err)) return NULL;
  if (len) *len = l;
  return text;
}

int mlxrt_token_is_stop(const mlxrt_model *M, int32_t id) { return mx_gen_config_is_eos(&M->stops, id); }
