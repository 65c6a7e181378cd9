/* safetensors reader: every broken file of tests/corpus/safetensors gives its named error;
 * well-formed files (single, padded, sharded with and without index) give exact views; every
 * prefix and many single-byte mutations of a good file are handled without a crash. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "mlx/safetensors.h"
#include "test_util.h"

#define CORPUS "tests/corpus/safetensors"

/* The file in an exact-size heap block, so ASan sees any read past its end. */
static uint8_t *load_exact(const char *path, size_t *len) {
  mlxrt_error err;
  char *text = mx_read_file(path, len, &err);
  if (!text) {
    fprintf(stderr, "%s\n", err.msg);
    return NULL;
  }
  uint8_t *b = malloc(*len ? *len : 1);
  memcpy(b, text, *len);
  free(text);
  return b;
}

static int is_zero(const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

static void test_dtypes(void) {
  static const struct { st_dtype dt; const char *name; size_t size; } want[] = {
      {ST_BOOL, "BOOL", 1}, {ST_U8, "U8", 1},   {ST_I8, "I8", 1},     {ST_U16, "U16", 2},
      {ST_I16, "I16", 2},   {ST_F16, "F16", 2}, {ST_BF16, "BF16", 2}, {ST_U32, "U32", 4},
      {ST_I32, "I32", 4},   {ST_F32, "F32", 4}, {ST_U64, "U64", 8},   {ST_I64, "I64", 8},
      {ST_F64, "F64", 8},   {ST_F8_E4M3, "F8_E4M3", 1},                {ST_F8_E5M2, "F8_E5M2", 1},
  };
  CHECK(sizeof want / sizeof want[0] == ST_DTYPE_COUNT);
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    CHECK(st_dtype_size(want[i].dt) == want[i].size);
    CHECK(strcmp(st_dtype_name(want[i].dt), want[i].name) == 0);
  }
  CHECK(st_dtype_size(ST_DTYPE_COUNT) == 0);
  CHECK(st_dtype_size((st_dtype)-1) == 0);
}

/* ---------------------------------------------------------------------------------------- */
/* Broken corpus */

typedef struct {
  char name[128];
  char frags[4][256];
  int nfrag;
} bad_case;

static int read_expected(bad_case *cases, int cap) {
  FILE *f = fopen(CORPUS "/expected.txt", "r");
  CHECKF(f != NULL, "cannot open " CORPUS "/expected.txt");
  if (!f) return 0;
  int n = 0;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\r\n")] = 0;
    if (!line[0] || line[0] == '#') continue;
    char *tab = strchr(line, '\t');
    CHECKF(tab != NULL, "expected.txt line without a tab: %s", line);
    if (!tab) continue;
    *tab = 0;
    bad_case *c = NULL;
    for (int i = 0; i < n; i++)
      if (strcmp(cases[i].name, line) == 0) c = &cases[i];
    if (!c && n < cap) {
      c = &cases[n++];
      memset(c, 0, sizeof *c);
      snprintf(c->name, sizeof c->name, "%s", line);
    }
    if (c && c->nfrag < 4) snprintf(c->frags[c->nfrag++], sizeof c->frags[0], "%s", tab + 1);
  }
  fclose(f);
  return n;
}

static void test_corpus(void) {
  static bad_case cases[256];
  int n = read_expected(cases, 256);
  CHECKF(n >= 40, "only %d cases in expected.txt", n);
  for (int i = 0; i < n; i++) {
    char path[512];
    snprintf(path, sizeof path, CORPUS "/%s", cases[i].name);
    mlxrt_error err = {{0}};
    st_archive a;
    int rc = st_open(path, &a, &err);
    CHECKF(rc == -1, "%s: opened but should fail", cases[i].name);
    CHECKF(a.nfiles == 0 && a.files == NULL && a.index == NULL, "%s: archive not cleared",
           cases[i].name);
    if (rc == 0) st_close(&a);
    if (getenv("ST_VERBOSE")) printf("%s\n", err.msg);
    CHECKF(strstr(err.msg, cases[i].name) != NULL, "%s: message does not name the file: %s",
           cases[i].name, err.msg);
    CHECKF(strchr(err.msg, '\n') == NULL, "%s: message is not one line", cases[i].name);
    for (int k = 0; k < cases[i].nfrag; k++) CHECK_MSG(err, cases[i].frags[k]);

    /* Single files: st_parse on the same bytes says the same thing. */
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
      size_t len;
      uint8_t *buf = load_exact(path, &len);
      mlxrt_error err2 = {{0}};
      st_file f;
      CHECK(buf && st_parse(buf, len, path, &f, &err2) == -1);
      CHECKF(strcmp(err.msg, err2.msg) == 0, "st_parse says \"%s\", st_open \"%s\"", err2.msg,
             err.msg);
      CHECK(f.tensors == NULL && f.path == NULL && f.strings == NULL);
      CHECK(st_parse(buf, len, path, &f, NULL) == -1); /* no error buffer: still no crash */
      free(buf);
    }
  }

  /* Every broken entry on disk is listed (the good ones are tested below). */
  DIR *d = opendir(CORPUS);
  CHECK(d != NULL);
  for (struct dirent *de; d && (de = readdir(d));) {
    if (de->d_name[0] == '.' || strncmp(de->d_name, "good", 4) == 0 ||
        strcmp(de->d_name, "expected.txt") == 0)
      continue;
    int found = 0;
    for (int i = 0; i < n; i++) found |= strcmp(cases[i].name, de->d_name) == 0;
    CHECKF(found, "%s is in the corpus but not in expected.txt", de->d_name);
  }
  if (d) closedir(d);
}

/* ---------------------------------------------------------------------------------------- */
/* Well-formed files */

static const st_tensor *expect_tensor(const st_archive *a, const char *name, st_dtype dt,
                                      int ndim, const int64_t *shape) {
  const st_tensor *t = st_find(a, name);
  CHECKF(t != NULL, "tensor %s not found", name);
  if (!t) return NULL;
  CHECK(strcmp(t->name, name) == 0);
  CHECKF(t->dtype == dt, "%s: dtype %s", name, st_dtype_name(t->dtype));
  CHECKF(t->ndim == ndim, "%s: ndim %d", name, t->ndim);
  int64_t numel = 1;
  for (int i = 0; i < ndim && i < t->ndim; i++) {
    CHECKF(t->shape[i] == shape[i], "%s: shape[%d] = %lld", name, i, (long long)t->shape[i]);
    numel *= shape[i];
  }
  CHECK(st_numel(t) == numel);
  CHECK(t->nbytes == (uint64_t)numel * st_dtype_size(dt));
  /* A view into the mapping at header end + offset: nothing copied. */
  const st_file *f = &a->files[t->file_index];
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->map[i];
  CHECK(t->data == f->map + 8 + hlen + t->offset);
  CHECK(t->offset + t->nbytes <= f->size - 8 - hlen);
  return t;
}

static void test_good_file(void) {
  mlxrt_error err = {{0}};
  st_archive a;
  int rc = st_open(CORPUS "/good.safetensors", &a, &err);
  CHECKF(rc == 0, "%s", err.msg);
  if (rc) return;
  CHECK(a.nfiles == 1 && a.ntensors == 15 && a.files[0].ntensors == 15);
  CHECK(a.files[0].owns_map == 1);
  CHECK(strcmp(a.files[0].path, CORPUS "/good.safetensors") == 0);
  for (int i = 1; i < a.ntensors; i++) CHECK(strcmp(a.index[i - 1]->name, a.index[i]->name) < 0);
  for (int i = 1; i < a.files[0].ntensors; i++)
    CHECK(strcmp(a.files[0].tensors[i - 1].name, a.files[0].tensors[i].name) < 0);

  const st_file *f = &a.files[0];
  CHECK(f->nmetadata == 2);
  const char *fmt = st_file_metadata(f, "format"), *note = st_file_metadata(f, "note");
  CHECK(fmt && strcmp(fmt, "mlx") == 0);
  CHECK(note && strcmp(note, "made by make_bad_corpus.py") == 0);
  CHECK(st_file_metadata(f, "absent") == NULL);

  const st_tensor *t;
  if ((t = expect_tensor(&a, "w.bf16", ST_BF16, 2, (int64_t[]){2, 3}))) {
    uint16_t v[6], want[6] = {0x3F80, 0x4000, 0xBF80, 0x0000, 0x7F80, 0x3E80};
    memcpy(v, t->data, sizeof v);
    CHECK(memcmp(v, want, sizeof v) == 0);
    CHECK(t->offset == 0); /* first in data order though not first by name */
  }
  if ((t = expect_tensor(&a, "v.f32", ST_F32, 1, (int64_t[]){4}))) {
    float v[4];
    memcpy(v, t->data, sizeof v);
    CHECK(v[0] == 1.5f && v[1] == -2.0f && v[2] == 3.25f && v[3] == 0.0f);
    CHECK(t->offset == 12);
  }
  if ((t = expect_tensor(&a, "q.u32", ST_U32, 2, (int64_t[]){2, 2}))) {
    uint32_t v[4];
    memcpy(v, t->data, sizeof v);
    CHECK(v[0] == 0xDEADBEEFu && v[1] == 1 && v[2] == 2 && v[3] == 0xFFFFFFFFu);
  }
  if ((t = expect_tensor(&a, "s.i8", ST_I8, 1, (int64_t[]){3}))) {
    const int8_t *v = (const int8_t *)t->data;
    CHECK(v[0] == -128 && v[1] == 0 && v[2] == 127);
  }
  if ((t = expect_tensor(&a, "m.bool", ST_BOOL, 1, (int64_t[]){2})))
    CHECK(t->data[0] == 1 && t->data[1] == 0);
  if ((t = expect_tensor(&a, "h.f16", ST_F16, 1, (int64_t[]){1})))
    CHECK(t->data[0] == 0x00 && t->data[1] == 0x3C);
  if ((t = expect_tensor(&a, "scalar.f64", ST_F64, 0, NULL))) {
    double v;
    memcpy(&v, t->data, sizeof v);
    CHECK(v == 3.141592653589793);
    CHECK(st_numel(t) == 1);
  }
  if ((t = expect_tensor(&a, "empty.u8", ST_U8, 2, (int64_t[]){0, 5})))
    CHECK(t->nbytes == 0 && st_numel(t) == 0);
  if ((t = expect_tensor(&a, "n.i64", ST_I64, 3, (int64_t[]){1, 1, 1}))) {
    int64_t v;
    memcpy(&v, t->data, sizeof v);
    CHECK(v == -((int64_t)1 << 40));
  }
  if ((t = expect_tensor(&a, "e.f8", ST_F8_E4M3, 1, (int64_t[]){4})))
    CHECK(memcmp(t->data, "\x38\x40\xB8\x7E", 4) == 0);
  if ((t = expect_tensor(&a, "f.f8", ST_F8_E5M2, 1, (int64_t[]){2})))
    CHECK(memcmp(t->data, "\x3C\x40", 2) == 0);
  if ((t = expect_tensor(&a, "u16", ST_U16, 1, (int64_t[]){2}))) {
    uint16_t v[2];
    memcpy(v, t->data, sizeof v);
    CHECK(v[0] == 1 && v[1] == 65535);
  }
  if ((t = expect_tensor(&a, "i16", ST_I16, 1, (int64_t[]){2}))) {
    int16_t v[2];
    memcpy(v, t->data, sizeof v);
    CHECK(v[0] == -2 && v[1] == 2);
  }
  if ((t = expect_tensor(&a, "i32", ST_I32, 1, (int64_t[]){1}))) {
    int32_t v;
    memcpy(&v, t->data, sizeof v);
    CHECK(v == -7);
  }
  if ((t = expect_tensor(&a, "u64", ST_U64, 1, (int64_t[]){1}))) {
    uint64_t v;
    memcpy(&v, t->data, sizeof v);
    CHECK(v == UINT64_MAX);
    CHECK(t->data + t->nbytes == a.files[0].map + a.files[0].size); /* last in data order */
  }
  CHECK(st_find(&a, "nope") == NULL);
  CHECK(st_find(&a, "") == NULL);
  CHECK(st_find(&a, "w.bf16x") == NULL);
  CHECK(st_file_find(&a.files[0], "i32") == st_find(&a, "i32"));
  st_close(&a);
  CHECK(a.files == NULL && a.nfiles == 0 && a.index == NULL);
  st_close(&a); /* closing twice is harmless */
}

static void test_other_good_files(void) {
  mlxrt_error err = {{0}};
  st_file f;
  int rc = st_open_file(CORPUS "/good_padded.safetensors", &f, &err);
  CHECKF(rc == 0, "%s", err.msg);
  if (!rc) {
    CHECK(f.ntensors == 2 && f.nmetadata == 1);
    CHECK(st_file_metadata(&f, "format") && strcmp(st_file_metadata(&f, "format"), "pt") == 0);
    const st_tensor *a = st_file_find(&f, "a"), *b = st_file_find(&f, "b");
    CHECK(a && b);
    if (a) {
      float v[6];
      memcpy(v, a->data, sizeof v);
      CHECK(v[0] == 1 && v[5] == 6 && a->nbytes == 24 && a->offset == 0);
    }
    if (b) CHECK(b->offset == 24 && memcmp(b->data, "\x09\x08\x07\x06", 4) == 0);
    st_close_file(&f);
    CHECK(f.map == NULL && f.tensors == NULL);
  }
  rc = st_open_file(CORPUS "/good_no_metadata.safetensors", &f, &err);
  CHECKF(rc == 0, "%s", err.msg);
  if (!rc) {
    CHECK(f.ntensors == 1 && f.nmetadata == 0 && st_file_metadata(&f, "format") == NULL);
    st_close_file(&f);
  }
  st_archive a;
  rc = st_open(CORPUS "/good_empty.safetensors", &a, &err);
  CHECKF(rc == 0, "%s", err.msg);
  if (!rc) {
    CHECK(a.nfiles == 1 && a.ntensors == 0 && st_find(&a, "a") == NULL);
    CHECK(st_file_find(&a.files[0], "a") == NULL && st_file_metadata(&a.files[0], "x") == NULL);
    st_close(&a);
  }

  /* Plain errors not in the corpus. */
  CHECK(st_open(CORPUS "/does_not_exist", &a, &err) == -1);
  CHECK_MSG(err, "does_not_exist: cannot open");
  CHECK(st_open_file(CORPUS "/good_single_dir", &f, &err) == -1);
  CHECK_MSG(err, "good_single_dir: is a directory, expected a .safetensors file");
  CHECK(st_open_file("/dev/null", &f, &err) == -1);
  CHECK_MSG(err, "/dev/null: is not a regular file");
}

static void check_two_shards(const char *dir) {
  mlxrt_error err = {{0}};
  st_archive a;
  int rc = st_open(dir, &a, &err);
  CHECKF(rc == 0, "%s: %s", dir, err.msg);
  if (rc) return;
  CHECK(a.nfiles == 2 && a.ntensors == 2);
  CHECK(strstr(a.files[0].path, "model-00001-of-00002.safetensors") != NULL);
  CHECK(strstr(a.files[1].path, "model-00002-of-00002.safetensors") != NULL);
  CHECK(strstr(a.files[0].path, "//") == NULL);
  const st_tensor *t = expect_tensor(&a, "a", ST_F32, 2, (int64_t[]){2, 3});
  if (t) {
    float v[6];
    memcpy(v, t->data, sizeof v);
    CHECK(t->file_index == 0 && v[0] == 1 && v[5] == 6);
  }
  t = expect_tensor(&a, "b", ST_U8, 1, (int64_t[]){4});
  if (t) CHECK(t->file_index == 1 && memcmp(t->data, "\x09\x08\x07\x06", 4) == 0);
  CHECK(st_file_metadata(&a.files[1], "format") != NULL);
  st_close(&a);
}

static void test_shards(void) {
  check_two_shards(CORPUS "/good_sharded_index");
  check_two_shards(CORPUS "/good_sharded_index/");
  check_two_shards(CORPUS "/good_sharded_glob");
  mlxrt_error err = {{0}};
  st_archive a;
  int rc = st_open(CORPUS "/good_single_dir", &a, &err);
  CHECKF(rc == 0, "%s", err.msg);
  if (!rc) {
    CHECK(a.nfiles == 1 && a.ntensors == 2 && st_find(&a, "a") && st_find(&a, "b"));
    st_close(&a);
  }
}

/* Files written by MLX itself (tests/fixtures/quant, made by scripts/make_quant_fixtures.py):
 * they open, and since MLX packs data back to back, the spans tile the data area exactly. */
static void test_mlx_written_files(void) {
  const char *dir = "tests/fixtures/quant";
  DIR *d = opendir(dir);
  CHECKF(d != NULL, "cannot open %s", dir);
  int nfiles = 0;
  for (struct dirent *de; d && (de = readdir(d));) {
    size_t n = strlen(de->d_name);
    if (n < 12 || strcmp(de->d_name + n - 12, ".safetensors") != 0) continue;
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    mlxrt_error err = {{0}};
    st_archive a;
    int rc = st_open(path, &a, &err);
    CHECKF(rc == 0, "%s", err.msg);
    if (rc) continue;
    nfiles++;
    const st_file *f = &a.files[0];
    uint64_t hlen = 0, sum = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | f->map[i];
    for (int i = 0; i < a.ntensors; i++) {
      sum += a.index[i]->nbytes;
      CHECK(st_find(&a, a.index[i]->name) == a.index[i]);
    }
    CHECKF(a.ntensors > 0 && sum == f->size - 8 - hlen, "%s: %d tensors, %llu of %llu bytes",
           path, a.ntensors, (unsigned long long)sum, (unsigned long long)(f->size - 8 - hlen));
    st_close(&a);
  }
  if (d) closedir(d);
  CHECKF(nfiles >= 4, "only %d MLX-written files in %s", nfiles, dir);
}

/* ---------------------------------------------------------------------------------------- */
/* Robustness: prefixes and mutations of a good file, and a large header. */

/* Whatever st_parse accepts must satisfy every promise the header makes. */
static void check_invariants(const st_file *f, const uint8_t *buf, size_t len) {
  for (int i = 0; i < f->ntensors; i++) {
    const st_tensor *t = &f->tensors[i];
    CHECK(t->data >= buf && t->data + t->nbytes <= buf + len);
    CHECK(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS);
    CHECK(t->nbytes == (uint64_t)st_numel(t) * st_dtype_size(t->dtype));
    if (i) CHECK(strcmp(f->tensors[i - 1].name, t->name) < 0);
  }
}

static void test_prefixes_and_mutations(void) {
  size_t len;
  uint8_t *good = load_exact(CORPUS "/good.safetensors", &len);
  CHECK(good != NULL);
  if (!good) return;
  mlxrt_error err;
  st_file f;
  int prefix_failures = 0;
  for (size_t n = 0; n < len; n++) {
    uint8_t *b = malloc(n ? n : 1);
    memcpy(b, good, n);
    if (st_parse(b, n, "cut", &f, &err) == -1 && strncmp(err.msg, "cut: ", 5) == 0)
      prefix_failures++;
    else if (f.tensors)
      st_close_file(&f);
    free(b);
  }
  CHECKF(prefix_failures == (int)len, "%d of %zu prefixes failed cleanly", prefix_failures, len);

  /* Every header byte replaced by a few troublesome values. */
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | good[i];
  static const uint8_t subst[] = {0, ' ', '"', '{', '}', '[', ']', ',', ':', '-', '9', 'x', 0xFF};
  int accepted = 0, rejected = 0;
  uint8_t *b = malloc(len);
  for (size_t pos = 0; pos < 8 + hlen; pos++)
    for (size_t k = 0; k < sizeof subst; k++) {
      memcpy(b, good, len);
      if (b[pos] == subst[k]) continue;
      b[pos] = subst[k];
      if (st_parse(b, len, "mut", &f, &err) == 0) {
        accepted++;
        check_invariants(&f, b, len);
        st_close_file(&f);
      } else {
        rejected++;
        CHECK(strncmp(err.msg, "mut: ", 5) == 0);
      }
    }
  free(b);
  printf("mutations: %d accepted, %d rejected\n", accepted, rejected);
  CHECK(rejected > accepted);
  free(good);
}

/* Edge cases that must be accepted, built in memory: header text + data size. */
static void test_accepted_edges(void) {
  static const struct { const char *header; size_t data; int ntensors; } cases[] = {
      /* zero-sized: other dimensions may be huge, the product is still 0 */
      {"{\"z\":{\"dtype\":\"F64\",\"shape\":[9007199254740992,9007199254740992,0],"
       "\"data_offsets\":[0,0]}}", 0, 1},
      /* a zero-sized span inside another tensor's span overlaps nothing */
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
       "\"e\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[2,2]}}", 4, 2},
      /* whitespace around the object, unused bytes after the last tensor */
      {" \n{\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]}}\n  ", 12, 1},
      /* fields in any order; unknown fields ignored; empty __metadata__; non-ASCII names */
      {"{\"__metadata__\":{},\"\u00e9\":{\"data_offsets\":[0,2],\"extra\":[1],\"shape\":[1],"
       "\"dtype\":\"BF16\"}}", 2, 1},
      /* integers written as 2.0 / 1e1 are still integers */
      {"{\"a\":{\"dtype\":\"U8\",\"shape\":[2.0,5],\"data_offsets\":[0,1e1]}}", 10, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t hl = strlen(cases[i].header), len = 8 + hl + cases[i].data;
    uint8_t *buf = calloc(1, len);
    for (int k = 0; k < 8; k++) buf[k] = (uint8_t)((uint64_t)hl >> (8 * k));
    memcpy(buf + 8, cases[i].header, hl);
    mlxrt_error err = {{0}};
    st_file f;
    int rc = st_parse(buf, len, "edge", &f, &err);
    CHECKF(rc == 0, "edge case %zu: %s", i, err.msg);
    if (!rc) {
      CHECK(f.ntensors == cases[i].ntensors);
      check_invariants(&f, buf, len);
      st_close_file(&f);
    }
    free(buf);
  }
}

/* 3000 tensors in reverse order, one zero-sized: every name is found by binary search. */
static void test_many_tensors(void) {
  enum { N = 3000 };
  size_t cap = (size_t)N * 100 + 64;
  char *h = malloc(cap);
  size_t k = (size_t)snprintf(h, cap, "{\"__metadata__\":{\"format\":\"mlx\"}");
  uint64_t off = 0;
  for (int i = N - 1; i >= 0; i--) {
    int n = i == 7 ? 0 : i % 5 + 1;
    k += (size_t)snprintf(h + k, cap - k,
                          ",\"layers.%d.w\":{\"dtype\":\"I16\",\"shape\":[%d],"
                          "\"data_offsets\":[%llu,%llu]}",
                          i, n, (unsigned long long)off, (unsigned long long)(off + 2 * n));
    off += 2 * (uint64_t)n;
  }
  k += (size_t)snprintf(h + k, cap - k, "}");
  size_t len = 8 + k + off;
  uint8_t *buf = calloc(1, len);
  for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)k >> (8 * i));
  memcpy(buf + 8, h, k);
  free(h);
  mlxrt_error err = {{0}};
  st_file f;
  int rc = st_parse(buf, len, "many", &f, &err);
  CHECKF(rc == 0, "%s", err.msg);
  if (!rc) {
    CHECK(f.ntensors == N && f.owns_map == 0 && f.map == buf);
    int found = 0;
    for (int i = 0; i < N; i++) {
      char name[64];
      snprintf(name, sizeof name, "layers.%d.w", i);
      const st_tensor *t = st_file_find(&f, name);
      found += t && t->shape[0] == (i == 7 ? 0 : i % 5 + 1) && is_zero(t->data, t->nbytes);
    }
    CHECK(found == N);
    CHECK(st_file_find(&f, "layers.3000.w") == NULL);
    st_close_file(&f);
  }
  free(buf);
}

int main(void) {
  test_dtypes();
  test_corpus();
  test_good_file();
  test_other_good_files();
  test_shards();
  test_mlx_written_files();
  test_prefixes_and_mutations();
  test_many_tensors();
  test_accepted_edges();
  TEST_END();
}
