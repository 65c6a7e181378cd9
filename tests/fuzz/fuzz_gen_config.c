/* libFuzzer target: generation_config.json with its config.json. The input is config.json
 * text, then optionally a NUL byte and generation_config.json text. Whatever parses must give
 * ids in range; a rejection must leave a one-line message naming a file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mlx/gen_config.h"

static void require(int cond) {
  if (!cond) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* a NUL-terminated copy: the first NUL (if any) ends config.json, the rest is
   * generation_config.json */
  char *text = calloc(1, size + 1);
  if (!text) return 0;
  const uint8_t *nul = memchr(data, 0, size);
  memcpy(text, data, size);
  const char *gen = nul ? text + (nul - data) + 1 : NULL;
  mlxrt_error err;
  mx_gen_config g;
  if (mx_gen_config_parse(text, gen, &g, &err) == 0) {
    require(g.n_eos >= 0 && g.n_eos <= MX_GEN_MAX_EOS);
    for (int i = 0; i < g.n_eos; i++) require(g.eos_ids[i] >= 0 && mx_gen_config_is_eos(&g, g.eos_ids[i]));
    require(g.bos_id >= -1 && g.pad_id >= -1);
    if (g.has_top_p) require(g.top_p >= 0 && g.top_p <= 1);
    if (g.has_temperature) require(g.temperature >= 0);
    mx_sampler_params sp;
    memset(&sp, 0, sizeof sp);
    mx_gen_config_apply_sampling(&g, &sp);
  } else {
    require(strchr(err.msg, '\n') == NULL && strstr(err.msg, ".json") != NULL);
  }
  free(text);
  return 0;
}
