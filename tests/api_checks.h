/* Checks shared by the public-API tests (after test_util.h). */
#ifndef MLXRT_TESTS_API_CHECKS_H
#define MLXRT_TESTS_API_CHECKS_H

#include "mlxrt.h"
#include "test_util.h"

/* detokenize(tokenize(x)) == x for each sample (no special tokens added, none skipped). */
static void check_roundtrip(const mlxrt_model *m, const char *const *samples, size_t n_samples) {
  mlxrt_error err = {{0}};
  for (size_t i = 0; i < n_samples; i++) {
    int32_t *ids = NULL;
    size_t n = 0, len = 0;
    CHECKF(mlxrt_tokenize(m, samples[i], strlen(samples[i]), 0, &ids, &n, &err) == 0, "%s", err.msg);
    char *back = mlxrt_detokenize(m, ids, n, 0, &len, &err);
    CHECKF(back && len == strlen(samples[i]) && !strcmp(back, samples[i]), "'%s' came back as '%s'", samples[i],
           back ? back : err.msg);
    mlxrt_free(back);
    mlxrt_free(ids);
  }
}

#endif
