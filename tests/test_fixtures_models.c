/* Sanity check of the tiny mlx-lm checkpoints in tests/fixtures/models/ (made by
 * scripts/make_tiny_models.py): every folder has a config.json that parses, a model.safetensors
 * and a golden.safetensors whose headers parse, and the golden tensors have the documented
 * names, dtypes and shapes. The model tests proper compare logits; this only guards the data. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>

#include "test_util.h"

#define FIXTURE_DIR "tests/fixtures/models"

/* Whole file into memory (fixtures are small); NULL if unreadable. */
static char *read_all(const char *path, long *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
      if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
      } else {
        buf[n] = 0;
        *len = n;
      }
    }
  }
  fclose(f);
  return buf;
}

/* Parses the safetensors header of PATH and checks every tensor's span lies in the data
 * area. Returns the header JSON (caller frees) or NULL after recording a failure. */
static cJSON *safetensors_header(const char *path) {
  long len = 0;
  char *buf = read_all(path, &len);
  CHECKF(buf != NULL, "%s: cannot read", path);
  if (!buf) return NULL;
  cJSON *root = NULL;
  uint64_t hlen = 0;
  if (len >= 8) {
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (unsigned char)buf[i];
  }
  CHECKF(len >= 8 && hlen > 0 && hlen <= (uint64_t)len - 8, "%s: header length %llu, file %ld",
         path, (unsigned long long)hlen, len);
  if (len >= 8 && hlen > 0 && hlen <= (uint64_t)len - 8) {
    root = cJSON_ParseWithLength(buf + 8, (size_t)hlen);
    CHECKF(cJSON_IsObject(root), "%s: header is not a JSON object", path);
    uint64_t data_len = (uint64_t)len - 8 - hlen;
    const cJSON *t;
    cJSON_ArrayForEach(t, root) {
      if (strcmp(t->string, "__metadata__") == 0) continue;
      const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
      int ok = cJSON_GetArraySize(off) == 2;
      if (ok) {
        double b = cJSON_GetArrayItem(off, 0)->valuedouble;
        double e = cJSON_GetArrayItem(off, 1)->valuedouble;
        ok = b >= 0 && b <= e && e <= (double)data_len;
      }
      CHECKF(ok, "%s: tensor %s has bad data_offsets", path, t->string);
    }
  }
  free(buf);
  return root;
}

/* Checks tensor NAME in header H has DTYPE and the given shape (dims < 0 are not checked). */
static void check_tensor(const char *path, const cJSON *h, const char *name, const char *dtype,
                         int ndim, long d0, long d1) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, name);
  CHECKF(t != NULL, "%s: no tensor %s", path, name);
  if (!t) return;
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
  CHECKF(cJSON_IsString(dt) && strcmp(dt->valuestring, dtype) == 0, "%s: %s dtype is not %s",
         path, name, dtype);
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
  CHECKF(cJSON_GetArraySize(shape) == ndim, "%s: %s is not rank %d", path, name, ndim);
  if (cJSON_GetArraySize(shape) != ndim) return;
  long want[2] = {d0, d1};
  for (int i = 0; i < ndim && i < 2; i++) {
    long got = (long)cJSON_GetArrayItem(shape, i)->valuedouble;
    CHECKF(want[i] < 0 || got == want[i], "%s: %s dim %d is %ld, expected %ld", path, name, i,
           got, want[i]);
  }
}

static long meta_long(const cJSON *h, const char *key) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(h, "__metadata__");
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, key);
  return cJSON_IsString(v) ? strtol(v->valuestring, NULL, 10) : -1;
}

/* The text part of a config: text_config for the nested (multimodal) form. */
static const cJSON *text_config(const cJSON *cfg) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "text_config");
  return t ? t : cfg;
}

static void check_folder(const char *dir) {
  char path[1024];
  long len = 0;
  snprintf(path, sizeof path, "%s/config.json", dir);
  char *text = read_all(path, &len);
  CHECKF(text != NULL, "%s: missing", path);
  cJSON *cfg = text ? cJSON_Parse(text) : NULL;
  free(text);
  CHECKF(cJSON_IsObject(cfg), "%s: not a JSON object", path);
  const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
  CHECKF(cJSON_IsString(mt), "%s: no model_type", path);
  const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(text_config(cfg), "vocab_size");
  CHECKF(cJSON_IsNumber(vocab), "%s: no vocab_size", path);
  long v = cJSON_IsNumber(vocab) ? (long)vocab->valuedouble : -1;
  /* mlx-lm writes the quantization twice; both must agree when present. */
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(cfg, "quantization");
  const cJSON *qc = cJSON_GetObjectItemCaseSensitive(cfg, "quantization_config");
  CHECKF((q == NULL) == (qc == NULL) && (!q || cJSON_Compare(q, qc, 1)),
         "%s: quantization and quantization_config differ", path);

  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  cJSON *mh = safetensors_header(path);
  if (mh) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(mh, "__metadata__");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m, "format");
    CHECKF(cJSON_IsString(fmt) && strcmp(fmt->valuestring, "mlx") == 0,
           "%s: metadata format is not mlx", path);
    /* Quantized exactly when config.json says so. */
    int any_scales = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, mh) {
      size_t n = strlen(t->string);
      if (n > 7 && strcmp(t->string + n - 7, ".scales") == 0) any_scales = 1;
    }
    CHECKF(any_scales == (q != NULL), "%s: .scales tensors present=%d but quantization=%d",
           path, any_scales, q != NULL);
  }
  cJSON_Delete(mh);

  snprintf(path, sizeof path, "%s/golden.safetensors", dir);
  cJSON *gh = safetensors_header(path);
  if (gh) {
    long p = meta_long(gh, "prompt_len"), g = meta_long(gh, "n_greedy");
    CHECKF(meta_long(gh, "vocab_size") == v, "%s: vocab_size metadata != config %ld", path, v);
    CHECKF(p >= 40 && g > 0, "%s: prompt_len %ld n_greedy %ld", path, p, g);
    check_tensor(path, gh, "prompt", "I32", 1, p, 0);
    check_tensor(path, gh, "logits", "F32", 2, p, v);
    check_tensor(path, gh, "greedy", "I32", 1, g, 0);
    check_tensor(path, gh, "greedy_logits", "F32", 2, g, v);
  }
  cJSON_Delete(gh);
  cJSON_Delete(cfg);
}

int main(void) {
  DIR *d = opendir(FIXTURE_DIR);
  CHECKF(d != NULL, "cannot open %s", FIXTURE_DIR);
  int folders = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURE_DIR, e->d_name);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    check_folder(dir);
    folders++;
  }
  if (d) closedir(d);
  CHECKF(folders >= 4, "only %d fixture folders", folders);
  struct stat st;
  CHECK(stat(FIXTURE_DIR "/VERSIONS.txt", &st) == 0);
  CHECK(stat(FIXTURE_DIR "/README.md", &st) == 0);
  printf("%d fixture folders checked\n", folders);
  TEST_END();
}
