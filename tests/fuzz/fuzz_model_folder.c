/* libFuzzer target: a whole model folder through the real load path (mx_model_open: config,
 * shards, every tensor against the config, non-finite scan, unused tensors, token ids against
 * the embedding), without a forward pass. The input's parts (fuzz_folder.h) become
 * config.json, model.safetensors, tokenizer.json and generation_config.json. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_folder.h"
#include "mlx/model.h"

static void require(int cond) {
  if (!cond) abort();
}

static const char *const NAMES[] = {"config.json", "model.safetensors", "tokenizer.json",
                                    "generation_config.json"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_write_folder(data, size, NAMES, 4);
  mlxrt_error err;
  mx_model *m = mx_model_open(fuzz_dir(), &err);
  if (!m) {
    require(strchr(err.msg, '\n') == NULL && err.msg[0]);
    return 0;
  }
  /* what the forward pass would read: the vectors and every matrix's parts */
  require(m->n_layers == m->cfg.num_layers && m->final_norm.n == m->cfg.hidden_size);
  for (int i = 0; i < m->n_layers; i++) require(m->layers[i].input_norm.v != NULL);
  mx_model_stats st;
  mx_model_stats_compute(m, &st);
  char label[48];
  mx_model_quant_label(m, label, sizeof label);
  mx_model_close(m);
  return 0;
}
