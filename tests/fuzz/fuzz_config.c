/* libFuzzer target: arbitrary bytes as config.json text (NUL-terminated copy). A rejected
 * config must leave nothing allocated (LeakSanitizer checks); an accepted one is queried and
 * freed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mlx/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 1);
  if (!text) return 0;
  memcpy(text, data, size);
  text[size] = 0;
  mlxrt_error err;
  static mx_config cfg; /* large (per-layer arrays): keep it off the stack */
  memset(&cfg, 0, sizeof cfg);
  if (mx_config_parse(text, "fuzz/config.json", &cfg, &err) == 0) {
    static const char *paths[] = {"model.layers.0.mlp.down_proj",
                                  "language_model.model.layers.1.self_attn.q_proj",
                                  "model.embed_tokens", ""};
    volatile int sink = 0;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
      sink += mx_config_qspec(&cfg, paths[i]).bits;
    for (int l = 0; l < cfg.num_layers && l < MX_MAX_LAYERS; l++)
      sink += (int)mx_layer_type_name(cfg.layer_types[l])[0];
    (void)sink;
    mx_config_free(&cfg);
  }
  free(text);
  return 0;
}
