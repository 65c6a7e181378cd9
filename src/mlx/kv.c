#include "mlx/kv.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

int mx_kv_init(mx_kv_layer *kv, int window, int dim) {
  memset(kv, 0, sizeof *kv);
  kv->window = window;
  kv->dim = dim;
  kv->page = window > 0 && window < MX_KV_PAGE ? window : MX_KV_PAGE;
  return 0;
}

void mx_kv_free(mx_kv_layer *kv) {
  for (int i = 0; i < kv->n_pages; i++) {
    free(kv->k_pages[i]);
    free(kv->v_pages[i]);
  }
  free(kv->k_pages);
  free(kv->v_pages);
  memset(kv, 0, sizeof *kv);
}

static int64_t slot_of(const mx_kv_layer *kv, int64_t pos) {
  return kv->window > 0 ? pos % kv->window : pos;
}

/* Positions page i holds: a ring's last page only what the ring needs. */
static int page_len(const mx_kv_layer *kv, int i) {
  if (kv->window > 0 && (i + 1) * kv->page > kv->window) return kv->window - i * kv->page;
  return kv->page;
}

int mx_kv_reserve(mx_kv_layer *kv, int64_t pos, mlxrt_error *err) {
  int64_t slot = kv->window > 0 && pos >= kv->window ? kv->window - 1 : slot_of(kv, pos);
  int need = (int)(slot / kv->page) + 1;
  if (need <= kv->n_pages) return 0;
  if (need > kv->cap_pages) {
    int cap = kv->cap_pages ? kv->cap_pages * 2 : 4;
    while (cap < need) cap *= 2;
    uint16_t **k = realloc(kv->k_pages, (size_t)cap * sizeof *k);
    if (!k) return mx_fail(err, "out of memory growing the KV page table");
    kv->k_pages = k;
    uint16_t **v = realloc(kv->v_pages, (size_t)cap * sizeof *v);
    if (!v) return mx_fail(err, "out of memory growing the KV page table");
    kv->v_pages = v;
    kv->cap_pages = cap;
  }
  while (kv->n_pages < need) {
    size_t page_bytes = (size_t)page_len(kv, kv->n_pages) * (size_t)kv->dim * sizeof(uint16_t);
    uint16_t *kp = malloc(page_bytes), *vp = malloc(page_bytes);
    if (!kp || !vp) {
      free(kp);
      free(vp);
      return mx_fail(err, "out of memory allocating a KV page (%zu bytes)", page_bytes);
    }
    kv->k_pages[kv->n_pages] = kp;
    kv->v_pages[kv->n_pages] = vp;
    kv->n_pages++;
  }
  return 0;
}

uint16_t *mx_kv_key(const mx_kv_layer *kv, int64_t pos) {
  int64_t s = slot_of(kv, pos);
  return kv->k_pages[s / kv->page] + (s % kv->page) * kv->dim;
}

uint16_t *mx_kv_value(const mx_kv_layer *kv, int64_t pos) {
  int64_t s = slot_of(kv, pos);
  return kv->v_pages[s / kv->page] + (s % kv->page) * kv->dim;
}

uint64_t mx_kv_bytes(const mx_kv_layer *kv) {
  uint64_t positions = 0;
  for (int i = 0; i < kv->n_pages; i++) positions += (uint64_t)page_len(kv, i);
  return positions * 2u * (uint64_t)kv->dim * sizeof(uint16_t);
}
