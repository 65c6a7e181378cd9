/* The CPU KV cache of one session. Keys and values are stored in bf16 (as MLX keeps them),
 * in pages of MX_KV_PAGE positions, so capacity grows page by page without copying.
 * Sliding layers keep a ring of `window` positions (the session gives it its attention window
 * plus the positions it may take back); full layers grow. */
#ifndef MLXRT_MLX_KV_H
#define MLXRT_MLX_KV_H

#include <stdint.h>

#include "mlxrt.h"

#define MX_KV_PAGE 256

typedef struct mx_kv_layer {
  int window;   /* > 0: ring of `window` positions (the last ones written); 0: grows */
  int dim;      /* n_kv_heads × head_dim */
  int page;     /* positions per page: MX_KV_PAGE, or the whole window when smaller */
  uint16_t **k_pages, **v_pages;
  int n_pages, cap_pages;
} mx_kv_layer;

int mx_kv_init(mx_kv_layer *kv, int window, int dim);
void mx_kv_free(mx_kv_layer *kv);
/* Makes room for position pos (allocating pages as needed). */
int mx_kv_reserve(mx_kv_layer *kv, int64_t pos, mlxrt_error *err);
/* Pointers to the key / value vector stored for absolute position pos. For a ring the
 * position must be one of the last `window` written. */
uint16_t *mx_kv_key(const mx_kv_layer *kv, int64_t pos);
uint16_t *mx_kv_value(const mx_kv_layer *kv, int64_t pos);
/* Bytes held. */
uint64_t mx_kv_bytes(const mx_kv_layer *kv);

#endif
