/* A small safetensors writer for results (logits, tokens): header via cJSON, data packed,
 * written to PATH.tmp and renamed so a failure never leaves half a file behind. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "mlxrt.h"
#include "tools_write.h"

int mlxrt_save_safetensors(const char *path, const mlxrt_tensor_out *t, int n,
                           const char *const *meta_kv, int n_meta, mlxrt_error *err) {
  cJSON *h = cJSON_CreateObject();
  if (!h) return mx_fail(err, "%s: out of memory", path);
  if (n_meta > 0) {
    cJSON *md = cJSON_AddObjectToObject(h, "__metadata__");
    for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(md, meta_kv[2 * i], meta_kv[2 * i + 1]);
  }
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    uint64_t numel = 1;
    for (int d = 0; d < t[i].ndim; d++) numel *= (uint64_t)t[i].shape[d];
    uint64_t bytes = numel * 4;
    cJSON *e = cJSON_AddObjectToObject(h, t[i].name);
    cJSON_AddStringToObject(e, "dtype", t[i].dtype == MLXRT_F32 ? "F32" : "I32");
    cJSON *sh = cJSON_AddArrayToObject(e, "shape");
    for (int d = 0; d < t[i].ndim; d++) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].shape[d]));
    cJSON *of = cJSON_AddArrayToObject(e, "data_offsets");
    cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
    cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + bytes)));
    off += bytes;
  }
  char *js = cJSON_PrintUnformatted(h);
  cJSON_Delete(h);
  if (!js) return mx_fail(err, "%s: out of memory", path);
  size_t hl = strlen(js), pad = (8 - hl % 8) % 8;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    free(js);
    return mx_fail(err, "%s: cannot create: %s", tmp, strerror(errno));
  }
  uint64_t len = hl + pad;
  uint8_t le[8];
  for (int i = 0; i < 8; i++) le[i] = (uint8_t)(len >> (8 * i));
  int ok = fwrite(le, 1, 8, f) == 8 && fwrite(js, 1, hl, f) == hl && fwrite("        ", 1, pad, f) == pad;
  free(js);
  for (int i = 0; ok && i < n; i++) {
    uint64_t numel = 1;
    for (int d = 0; d < t[i].ndim; d++) numel *= (uint64_t)t[i].shape[d];
    ok = fwrite(t[i].data, 4, numel, f) == numel;
  }
  if (fclose(f) != 0) ok = 0;
  if (!ok || rename(tmp, path) != 0) {
    remove(tmp);
    return mx_fail(err, "%s: write failed: %s", path, strerror(errno));
  }
  return 0;
}
