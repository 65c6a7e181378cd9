/* safetensors reader. A file is mapped read-only and its JSON header is checked completely
 * before any tensor is handed out: every later layer may trust dtype, shape and span. Tensors
 * are views into the mapping; the data area is never touched here. */
#include "mlx/safetensors.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"

/* Same cap as the reference Rust implementation: a larger header is corruption, not a model. */
#define ST_MAX_HEADER 100000000ull
/* Integers in the header go through cJSON's double; beyond 2^53 they are no longer exact. */
#define ST_MAX_EXACT 9007199254740992.0
/* Names can be arbitrarily long (and hostile); clip them so the message stays readable. */
#define NM "%.200s"

static const struct {
  const char *name;
  size_t size;
} DTYPES[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1},        [ST_U8] = {"U8", 1},          [ST_I8] = {"I8", 1},
    [ST_U16] = {"U16", 2},          [ST_I16] = {"I16", 2},        [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},        [ST_U32] = {"U32", 4},        [ST_I32] = {"I32", 4},
    [ST_F32] = {"F32", 4},          [ST_U64] = {"U64", 8},        [ST_I64] = {"I64", 8},
    [ST_F64] = {"F64", 8},          [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

static const char KNOWN_DTYPES[] =
    "BF16, F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL, F8_E4M3, F8_E5M2";

size_t st_dtype_size(st_dtype dt) {
  return (unsigned)dt < ST_DTYPE_COUNT ? DTYPES[dt].size : 0;
}

const char *st_dtype_name(st_dtype dt) {
  return (unsigned)dt < ST_DTYPE_COUNT ? DTYPES[dt].name : "?";
}

int64_t st_numel(const st_tensor *t) {
  /* A zero dimension anywhere makes it 0; the other dimensions may then be huge (up to 2^53
   * each), so multiply only when none is zero (then the product fits: it is ≤ nbytes). */
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] == 0) return 0;
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

/* ------------------------------------------------------------------------------------------ */
/* Small helpers for messages */

static const char *json_type(const cJSON *j) {
  if (!j) return "missing";
  if (cJSON_IsObject(j)) return "an object";
  if (cJSON_IsArray(j)) return "an array";
  if (cJSON_IsString(j)) return "a string";
  if (cJSON_IsNumber(j)) return "a number";
  if (cJSON_IsBool(j)) return "a boolean";
  if (cJSON_IsNull(j)) return "null";
  return "invalid";
}

/* Renders a JSON number or the value's type, for "expected X, found Y". */
static const char *json_show(const cJSON *j, char *buf, size_t n) {
  if (cJSON_IsNumber(j)) {
    snprintf(buf, n, "%.17g", j->valuedouble);
    return buf;
  }
  return json_type(j);
}

static void fmt_shape(const int64_t *shape, int ndim, char *buf, size_t n) {
  size_t k = 0;
  k += (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < ndim && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, i ? ",%lld" : "%lld", (long long)shape[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

static uint64_t le64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* A non-negative integer that a double holds exactly. */
static int json_uint(const cJSON *j, uint64_t *out) {
  if (!cJSON_IsNumber(j)) return 0;
  double d = j->valuedouble;
  if (!(d >= 0 && d <= ST_MAX_EXACT && d == floor(d))) return 0;
  *out = (uint64_t)d;
  return 1;
}

static int cmp_tensor_name(const void *a, const void *b) {
  return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}
static int cmp_kv_key(const void *a, const void *b) {
  return strcmp(((const st_kv *)a)->key, ((const st_kv *)b)->key);
}

typedef struct {
  uint64_t begin, end;
  int tensor;
} st_span;

static int cmp_span(const void *a, const void *b) {
  const st_span *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->tensor - y->tensor;
}

/* ------------------------------------------------------------------------------------------ */
/* One tensor entry of the header */

static int parse_tensor(const cJSON *e, const char *path, const uint8_t *data, uint64_t data_len,
                        st_tensor *t, mlxrt_error *err) {
  const char *name = t->name;
  char show[64];
  if (!cJSON_IsObject(e))
    return mx_fail(err, "%s: tensor '" NM "': entry is %s, expected an object with dtype, shape "
                   "and data_offsets", path, name, json_type(e));

  /* cJSON keeps repeated keys; a repeated field would make the entry ambiguous. */
  const char *fields[3] = {"dtype", "shape", "data_offsets"};
  const cJSON *val[3] = {NULL, NULL, NULL};
  for (const cJSON *c = e->child; c; c = c->next)
    for (int k = 0; k < 3; k++)
      if (c->string && strcmp(c->string, fields[k]) == 0) {
        if (val[k])
          return mx_fail(err, "%s: tensor '" NM "': \"%s\" appears twice", path, name, fields[k]);
        val[k] = c;
      }
  for (int k = 0; k < 3; k++)
    if (!val[k]) return mx_fail(err, "%s: tensor '" NM "': missing \"%s\"", path, name, fields[k]);

  /* dtype */
  if (!cJSON_IsString(val[0]))
    return mx_fail(err, "%s: tensor '" NM "': dtype is %s, expected a string", path, name,
                   json_type(val[0]));
  int dt = -1;
  for (int k = 0; k < ST_DTYPE_COUNT; k++)
    if (strcmp(val[0]->valuestring, DTYPES[k].name) == 0) dt = k;
  if (dt < 0)
    return mx_fail(err, "%s: tensor '" NM "': unknown dtype '%.40s', expected one of %s", path,
                   name, val[0]->valuestring, KNOWN_DTYPES);
  t->dtype = (st_dtype)dt;

  /* shape */
  const cJSON *sh = val[1];
  if (!cJSON_IsArray(sh))
    return mx_fail(err, "%s: tensor '" NM "': shape is %s, expected an array of non-negative "
                   "integers", path, name, json_type(sh));
  int ndim = cJSON_GetArraySize(sh);
  if (ndim > ST_MAX_DIMS)
    return mx_fail(err, "%s: tensor '" NM "': shape has %d dimensions, at most %d are supported",
                   path, name, ndim, ST_MAX_DIMS);
  t->ndim = 0;
  for (const cJSON *d = sh->child; d; d = d->next) {
    uint64_t v;
    if (!json_uint(d, &v))
      return mx_fail(err, "%s: tensor '" NM "': shape[%d] is %s, expected a non-negative integer",
                     path, name, t->ndim, json_show(d, show, sizeof show));
    t->shape[t->ndim++] = (int64_t)v;
  }
  char shape_s[200];
  fmt_shape(t->shape, t->ndim, shape_s, sizeof shape_s);

  /* Element count × dtype size, refusing 64-bit overflow (a zero dimension makes it 0). */
  uint64_t need = st_dtype_size(t->dtype);
  int zero = 0;
  for (int i = 0; i < t->ndim; i++) zero |= t->shape[i] == 0;
  if (zero) need = 0;
  for (int i = 0; i < t->ndim && !zero; i++) {
    uint64_t d = (uint64_t)t->shape[i];
    if (need > UINT64_MAX / d)
      return mx_fail(err, "%s: tensor '" NM "': shape %s of %s needs more than 2^64 bytes", path,
                     name, shape_s, DTYPES[dt].name);
    need *= d;
  }

  /* data_offsets */
  const cJSON *off = val[2];
  if (!cJSON_IsArray(off))
    return mx_fail(err, "%s: tensor '" NM "': data_offsets is %s, expected [begin,end]", path,
                   name, json_type(off));
  if (cJSON_GetArraySize(off) != 2)
    return mx_fail(err, "%s: tensor '" NM "': data_offsets has %d elements, expected [begin,end]",
                   path, name, cJSON_GetArraySize(off));
  uint64_t be[2];
  int k = 0;
  for (const cJSON *d = off->child; d; d = d->next, k++)
    if (!json_uint(d, &be[k]))
      return mx_fail(err, "%s: tensor '" NM "': data_offsets[%d] is %s, expected a non-negative "
                     "integer", path, name, k, json_show(d, show, sizeof show));
  if (be[0] > be[1])
    return mx_fail(err, "%s: tensor '" NM "': data_offsets [%llu,%llu] end before they begin",
                   path, name, (unsigned long long)be[0], (unsigned long long)be[1]);
  if (be[1] > data_len)
    return mx_fail(err, "%s: tensor '" NM "': data_offsets [%llu,%llu] run past the data area "
                   "of %llu bytes", path, name, (unsigned long long)be[0],
                   (unsigned long long)be[1], (unsigned long long)data_len);
  if (be[1] - be[0] != need)
    return mx_fail(err, "%s: tensor '" NM "': data_offsets [%llu,%llu] hold %llu bytes but shape "
                   "%s of %s needs %llu", path, name, (unsigned long long)be[0],
                   (unsigned long long)be[1], (unsigned long long)(be[1] - be[0]), shape_s,
                   DTYPES[dt].name, (unsigned long long)need);
  t->offset = be[0];
  t->nbytes = need;
  t->data = data + be[0];
  t->file_index = 0;
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Whole header */

static char *stash(char **cursor, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = *cursor;
  memcpy(p, s, n);
  *cursor += n;
  return p;
}

static int parse_header(const cJSON *root, const char *path, const uint8_t *data,
                        uint64_t data_len, st_file *f, mlxrt_error *err) {
  /* Pass 1: count, check __metadata__, size the string storage. */
  const cJSON *meta = NULL;
  size_t nt = 0, nm = 0, nstr = 0;
  for (const cJSON *c = root->child; c; c = c->next) {
    if (strcmp(c->string, "__metadata__") == 0) {
      if (meta) return mx_fail(err, "%s: __metadata__ appears twice", path);
      meta = c;
      if (!cJSON_IsObject(c))
        return mx_fail(err, "%s: __metadata__ is %s, expected an object mapping strings to "
                       "strings", path, json_type(c));
      for (const cJSON *m = c->child; m; m = m->next) {
        if (!cJSON_IsString(m))
          return mx_fail(err, "%s: __metadata__ '" NM "' is %s, expected a string", path,
                         m->string, json_type(m));
        nm++;
        nstr += strlen(m->string) + strlen(m->valuestring) + 2;
      }
    } else {
      nt++;
      nstr += strlen(c->string) + 1;
    }
  }
  if (nt > INT32_MAX || nm > INT32_MAX)
    return mx_fail(err, "%s: header has too many entries", path);

  f->tensors = mx_calloc(nt, sizeof *f->tensors, err);
  f->metadata = mx_calloc(nm, sizeof *f->metadata, err);
  f->strings = mx_malloc(nstr, err);
  if (!f->tensors || !f->metadata || !f->strings) return mx_prefix(err, "%s", path);
  char *cur = f->strings;

  if (meta) {
    for (const cJSON *m = meta->child; m; m = m->next) {
      st_kv *kv = &f->metadata[f->nmetadata++];
      kv->key = stash(&cur, m->string);
      kv->value = stash(&cur, m->valuestring);
    }
    qsort(f->metadata, (size_t)f->nmetadata, sizeof *f->metadata, cmp_kv_key);
    for (int i = 1; i < f->nmetadata; i++)
      if (strcmp(f->metadata[i - 1].key, f->metadata[i].key) == 0)
        return mx_fail(err, "%s: __metadata__ key '" NM "' appears twice", path,
                       f->metadata[i].key);
  }

  /* Pass 2: every tensor entry. */
  for (const cJSON *c = root->child; c; c = c->next) {
    if (c == meta) continue;
    st_tensor *t = &f->tensors[f->ntensors++];
    t->name = stash(&cur, c->string);
    if (parse_tensor(c, path, data, data_len, t, err)) return -1;
  }

  qsort(f->tensors, (size_t)f->ntensors, sizeof *f->tensors, cmp_tensor_name);
  for (int i = 1; i < f->ntensors; i++)
    if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0)
      return mx_fail(err, "%s: tensor '" NM "' appears twice in the header", path,
                     f->tensors[i].name);

  /* Overlap: sorted by begin, each non-empty span must start at or after the previous end
   * (with no overlap so far, the previous end is the largest end seen). */
  st_span *sp = mx_calloc((size_t)f->ntensors, sizeof *sp, err);
  if (!sp) return mx_prefix(err, "%s", path);
  int ns = 0;
  for (int i = 0; i < f->ntensors; i++)
    if (f->tensors[i].nbytes)
      sp[ns++] = (st_span){f->tensors[i].offset, f->tensors[i].offset + f->tensors[i].nbytes, i};
  qsort(sp, (size_t)ns, sizeof *sp, cmp_span);
  int rc = 0;
  for (int i = 1; i < ns && !rc; i++)
    if (sp[i].begin < sp[i - 1].end) {
      const st_tensor *a = &f->tensors[sp[i - 1].tensor], *b = &f->tensors[sp[i].tensor];
      rc = mx_fail(err, "%s: tensors '" NM "' at [%llu,%llu] and '" NM "' at [%llu,%llu] overlap",
                   path, a->name, (unsigned long long)sp[i - 1].begin,
                   (unsigned long long)sp[i - 1].end, b->name, (unsigned long long)sp[i].begin,
                   (unsigned long long)sp[i].end);
    }
  free(sp);
  return rc;
}

static void free_parsed(st_file *f) {
  free(f->path);
  free(f->tensors);
  free(f->metadata);
  free(f->strings);
}

int st_parse(const uint8_t *buf, size_t len, const char *path, st_file *out, mlxrt_error *err) {
  memset(out, 0, sizeof *out);
  if (!path) path = "<memory>";
  if (len < 8)
    return mx_fail(err, "%s: file is %zu bytes, too short for the 8-byte header length", path,
                   len);
  uint64_t hlen = le64(buf);
  if (hlen == 0) return mx_fail(err, "%s: header length is 0, expected a JSON object", path);
  if (hlen > ST_MAX_HEADER)
    return mx_fail(err, "%s: header length %llu exceeds the limit of %llu bytes", path,
                   (unsigned long long)hlen, ST_MAX_HEADER);
  if (hlen > len - 8)
    return mx_fail(err, "%s: header length %llu runs past the end of the file (%zu bytes after "
                   "the length field)", path, (unsigned long long)hlen, len - 8);

  const char *h = (const char *)buf + 8, *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(h, (size_t)hlen, &end, 0);
  if (!root) {
    size_t at = end && end >= h ? (size_t)(end - h) : 0;
    return mx_fail(err, "%s: header is not valid JSON (parse error at byte %zu of %llu)", path,
                   at, (unsigned long long)hlen);
  }
  int rc = 0;
  /* Writers may pad the header with spaces; anything else after the object is corruption. */
  for (const char *p = end; p < h + hlen && !rc; p++)
    if (!(*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
      rc = mx_fail(err, "%s: header has extra bytes after the JSON value (at byte %zu of %llu), "
                   "expected only spaces", path, (size_t)(p - h), (unsigned long long)hlen);
  if (!rc && !cJSON_IsObject(root))
    rc = mx_fail(err, "%s: header is %s, expected a JSON object", path, json_type(root));
  if (!rc) {
    out->path = mx_strdup(path, err);
    if (!out->path) rc = -1;
  }
  if (!rc)
    rc = parse_header(root, path, buf + 8 + hlen, len - 8 - hlen, out, err);
  cJSON_Delete(root);
  if (rc) {
    free_parsed(out);
    memset(out, 0, sizeof *out);
    return -1;
  }
  out->map = (uint8_t *)buf;
  out->size = len;
  out->owns_map = 0;
  return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Files */

int st_open_file(const char *path, st_file *out, mlxrt_error *err) {
  memset(out, 0, sizeof *out);
  struct stat sb;
  int fd = mx_open_regular(path, "a .safetensors file", &sb, err);
  if (fd < 0) return -1;
  size_t size = (size_t)sb.st_size;
  if (size == 0) {  /* mmap refuses length 0; let the parser give its message */
    close(fd);
    return st_parse((const uint8_t *)"", 0, path, out, err);
  }
  void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  close(fd);
  if (map == MAP_FAILED)
    return mx_fail(err, "%s: cannot mmap %zu bytes: %s", path, size, strerror(e));
  if (st_parse(map, size, path, out, err)) {
    munmap(map, size);
    return -1;
  }
  out->owns_map = 1;
  return 0;
}

void st_close_file(st_file *f) {
  if (!f) return;
  if (f->owns_map && f->map) munmap(f->map, f->size);
  free_parsed(f);
  memset(f, 0, sizeof *f);
}

const st_tensor *st_file_find(const st_file *f, const char *name) {
  if (!f->ntensors) return NULL;
  st_tensor key = {.name = name};
  return bsearch(&key, f->tensors, (size_t)f->ntensors, sizeof *f->tensors, cmp_tensor_name);
}

const char *st_file_metadata(const st_file *f, const char *key) {
  if (!f->nmetadata) return NULL;
  st_kv k = {.key = key};
  const st_kv *kv =
      bsearch(&k, f->metadata, (size_t)f->nmetadata, sizeof *f->metadata, cmp_kv_key);
  return kv ? kv->value : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Checkpoints: one file, or a directory of shards */

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_tensor_ptr(const void *a, const void *b) {
  return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

/* Opens the named shards (in order) into a->files. */
static int open_shards(const char *dir, char **names, int n, st_archive *a, mlxrt_error *err) {
  a->files = mx_calloc((size_t)n, sizeof *a->files, err);
  if (!a->files) return -1;
  for (int i = 0; i < n; i++) {
    char *p = mx_path_join(dir, names[i], err);
    if (!p) return -1;
    int rc = st_open_file(p, &a->files[i], err);
    free(p);
    if (rc) return -1;
    a->nfiles = i + 1;
  }
  return 0;
}

static int is_shard_name(const char *s) {
  static const char suffix[] = ".safetensors";
  size_t n = strlen(s), ns = sizeof suffix - 1;
  return strncmp(s, "model", 5) == 0 && n >= 5 + ns && strcmp(s + n - ns, suffix) == 0;
}

/* Every model*.safetensors of dir, sorted (what mlx-lm loads, index or not). */
static int list_shards(const char *dir, char ***out, int *nout, mlxrt_error *err) {
  DIR *d = opendir(dir);
  if (!d) return mx_fail(err, "%s: cannot open directory: %s", dir, strerror(errno));
  char **names = NULL;
  int n = 0, cap = 0, rc = 0;
  for (struct dirent *de; (de = readdir(d)) != NULL && !rc;) {
    if (!is_shard_name(de->d_name)) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 8;
      char **nn = realloc(names, (size_t)cap * sizeof *names);
      if (!nn) {
        rc = mx_fail(err, "%s: out of memory listing shards", dir);
        break;
      }
      names = nn;
    }
    names[n] = mx_strdup(de->d_name, err);
    if (!names[n]) rc = -1;
    else n++;
  }
  closedir(d);
  if (!rc && n) qsort(names, (size_t)n, sizeof *names, cmp_str); /* names is NULL when n = 0 */
  *out = names;
  *nout = n;
  return rc;
}

static void free_names(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

/* Without an index: every model*.safetensors, sorted. */
static int open_glob(const char *dir, st_archive *a, mlxrt_error *err) {
  char **names;
  int n;
  int rc = list_shards(dir, &names, &n, err);
  if (!rc && n == 0)
    rc = mx_fail(err, "%s: no model.safetensors.index.json and no model*.safetensors files", dir);
  if (!rc) rc = open_shards(dir, names, n, a, err);
  free_names(names, n);
  return rc;
}

/* mlx-lm ignores the index and loads every model*.safetensors: a shard the index does not
 * name would be part of the model there and not here, so it is refused. */
static int check_stray_shards(const char *dir, const char *ipath, char **named, int nnamed,
                              mlxrt_error *err) {
  char **names;
  int n;
  int rc = list_shards(dir, &names, &n, err);
  for (int i = 0; i < n && !rc; i++)
    if (!nnamed || !bsearch(&names[i], named, (size_t)nnamed, sizeof *named, cmp_str))
      rc = mx_fail(err, "%s: '" NM "' is a model*.safetensors file the weight_map does not name "
                   "(mlx-lm would load it; remove it or add its tensors to the index)", ipath,
                   names[i]);
  free_names(names, n);
  return rc;
}

/* The weight_map's tensor names, sorted; a name mapped twice is an error. */
static int mapped_names(const cJSON *wm, const char *ipath, const char ***out, int *nout,
                        mlxrt_error *err) {
  int n = cJSON_GetArraySize(wm), k = 0;
  const char **keys = mx_calloc((size_t)n, sizeof *keys, err);
  if (!keys) return -1;
  for (const cJSON *e = wm->child; e; e = e->next) keys[k++] = e->string;
  qsort(keys, (size_t)k, sizeof *keys, cmp_str);
  for (int i = 1; i < k; i++)
    if (strcmp(keys[i - 1], keys[i]) == 0) {
      mx_fail(err, "%s: weight_map names tensor '" NM "' twice", ipath, keys[i]);
      free(keys);
      return -1;
    }
  *out = keys;
  *nout = k;
  return 0;
}

static int bad_shard_name(const char *s) {
  return !*s || strchr(s, '/') || strcmp(s, ".") == 0 || strcmp(s, "..") == 0;
}

/* With model.safetensors.index.json: the files its weight_map names, each of which must exist
 * and hold the tensors the map puts there. */
static int open_indexed(const char *dir, const char *ipath, st_archive *a, mlxrt_error *err) {
  size_t len;
  char *text = mx_read_file(ipath, &len, err);
  if (!text) return -1;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  char **names = NULL;
  int n = 0, rc = 0;
  const cJSON *wm = NULL;
  size_t after = root ? strspn(end, " \t\r\n") + (size_t)(end - text) : 0;
  if (!root)
    rc = mx_fail(err, "%s: not valid JSON (parse error at byte %zu)", ipath,
                 end && end >= text ? (size_t)(end - text) : 0);
  else if (after != len) /* bytes after the object (a NUL included) would be ignored */
    rc = mx_fail(err, "%s: extra bytes after the JSON value at byte %zu", ipath, after);
  else if (!cJSON_IsObject(root))
    rc = mx_fail(err, "%s: is %s, expected an object with \"weight_map\"", ipath,
                 json_type(root));
  else if (!cJSON_IsObject(wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map")))
    rc = mx_fail(err, "%s: weight_map is %s, expected an object mapping tensor names to files",
                 ipath, json_type(wm));
  else if (!wm->child)
    rc = mx_fail(err, "%s: weight_map is empty, expected at least one tensor", ipath);

  int nent = rc ? 0 : cJSON_GetArraySize(wm);
  if (!rc && !(names = mx_calloc((size_t)nent, sizeof *names, err))) rc = -1;
  for (const cJSON *e = rc ? NULL : wm->child; e && !rc; e = e->next) {
    if (!cJSON_IsString(e))
      rc = mx_fail(err, "%s: weight_map entry '" NM "' is %s, expected a file name", ipath,
                   e->string, json_type(e));
    else if (bad_shard_name(e->valuestring))
      rc = mx_fail(err, "%s: weight_map entry '" NM "' names '" NM "', expected a file name in "
                   "the same directory", ipath, e->string, e->valuestring);
    else
      names[n++] = e->valuestring;
  }
  /* Unique file names, sorted; each must exist before we try to read it. */
  if (!rc) {
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int u = 0;
    for (int i = 0; i < n; i++)
      if (u == 0 || strcmp(names[u - 1], names[i]) != 0) names[u++] = names[i];
    n = u;
    for (int i = 0; i < n && !rc; i++) {
      char *p = mx_path_join(dir, names[i], err);
      if (!p) {
        rc = -1;
        break;
      }
      struct stat sb;
      if (stat(p, &sb) != 0) {
        const char *who = "";
        for (const cJSON *e = wm->child; e; e = e->next)
          if (strcmp(e->valuestring, names[i]) == 0) {
            who = e->string;
            break;
          }
        rc = mx_fail(err, "%s: weight_map puts tensor '" NM "' in '" NM "', which cannot be "
                     "opened: %s", ipath, who, names[i], strerror(errno));
      }
      free(p);
    }
  }
  if (!rc) rc = check_stray_shards(dir, ipath, names, n, err);
  if (!rc) rc = open_shards(dir, names, n, a, err);
  /* Every mapped tensor must be in the file the map names, and every tensor of a shard in the
   * map (the index and the shards describe one checkpoint). */
  for (const cJSON *e = rc ? NULL : wm->child; e && !rc; e = e->next) {
    const char **hit = bsearch(&e->valuestring, names, (size_t)n, sizeof *names, cmp_str);
    int fi = (int)(hit - (const char **)names);
    if (!st_file_find(&a->files[fi], e->string))
      rc = mx_fail(err, "%s: weight_map puts tensor '" NM "' in '" NM "', but %s has no such "
                   "tensor", ipath, e->string, e->valuestring, a->files[fi].path);
  }
  const char **keys = NULL;
  int nkeys = 0;
  if (!rc) rc = mapped_names(wm, ipath, &keys, &nkeys, err);
  for (int i = 0; i < a->nfiles && !rc; i++)
    for (int j = 0; j < a->files[i].ntensors && !rc; j++) {
      const char *tn = a->files[i].tensors[j].name;
      if (!bsearch(&tn, keys, (size_t)nkeys, sizeof *keys, cmp_str))
        rc = mx_fail(err, "%s: tensor '" NM "' of %s is not in the weight_map", ipath, tn,
                     a->files[i].path);
    }
  free(keys);
  free(names);
  cJSON_Delete(root);
  free(text);
  return rc;
}

/* All tensors of all shards, sorted by name; a name in two shards is an error. */
static int build_index(st_archive *a, mlxrt_error *err) {
  size_t total = 0;
  for (int i = 0; i < a->nfiles; i++) total += (size_t)a->files[i].ntensors;
  if (total > INT32_MAX) return mx_fail(err, "checkpoint has too many tensors");
  a->index = mx_calloc(total, sizeof *a->index, err);
  if (!a->index) return -1;
  a->ntensors = 0;
  for (int i = 0; i < a->nfiles; i++)
    for (int j = 0; j < a->files[i].ntensors; j++) {
      a->files[i].tensors[j].file_index = i;
      a->index[a->ntensors++] = &a->files[i].tensors[j];
    }
  qsort(a->index, (size_t)a->ntensors, sizeof *a->index, cmp_tensor_ptr);
  for (int i = 1; i < a->ntensors; i++)
    if (strcmp(a->index[i - 1]->name, a->index[i]->name) == 0)
      return mx_fail(err, "tensor '" NM "' is in both %s and %s", a->index[i]->name,
                     a->files[a->index[i - 1]->file_index].path,
                     a->files[a->index[i]->file_index].path);
  return 0;
}

int st_open(const char *path, st_archive *out, mlxrt_error *err) {
  memset(out, 0, sizeof *out);
  struct stat sb;
  if (stat(path, &sb) != 0) return mx_fail(err, "%s: cannot open: %s", path, strerror(errno));
  int rc;
  if (S_ISDIR(sb.st_mode)) {
    char *ipath = mx_path_join(path, "model.safetensors.index.json", err);
    if (!ipath) return -1;
    struct stat ib;
    if (stat(ipath, &ib) == 0) rc = open_indexed(path, ipath, out, err);
    else if (errno == ENOENT) rc = open_glob(path, out, err);
    else rc = mx_fail(err, "%s: cannot stat: %s", ipath, strerror(errno));
    free(ipath);
  } else {
    out->files = mx_calloc(1, sizeof *out->files, err);
    rc = out->files ? st_open_file(path, &out->files[0], err) : -1;
    if (!rc) out->nfiles = 1;
  }
  if (!rc) rc = build_index(out, err);
  if (rc) st_close(out);
  return rc;
}

void st_close(st_archive *a) {
  if (!a) return;
  for (int i = 0; i < a->nfiles; i++) st_close_file(&a->files[i]);
  free(a->files);
  free(a->index);
  memset(a, 0, sizeof *a);
}

int st_find_pos(const st_archive *a, const char *name) {
  if (!a->ntensors) return -1;
  st_tensor key = {.name = name};
  const st_tensor *kp = &key;
  const st_tensor *const *hit =
      bsearch(&kp, a->index, (size_t)a->ntensors, sizeof *a->index, cmp_tensor_ptr);
  return hit ? (int)(hit - a->index) : -1;
}

const st_tensor *st_find(const st_archive *a, const char *name) {
  int i = st_find_pos(a, name);
  return i < 0 ? NULL : a->index[i];
}
