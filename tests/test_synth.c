/* mlxrt_synth (mlxrt synth): synthetic checkpoints of real Gemma shapes.
 * Expectations come from the architecture reference (gemma-architecture.md §3, §7, §8, §10;
 * Gemma 3 270M from its published config), written out here independently of the generator's
 * preset table. For each case the checkpoint must open through the normal loader, `describe`
 * (what `mlxrt inspect --json` prints) must report the expected layer plan, quantization and
 * parameter count, and a few tokens through the CPU reference path must give finite logits.
 * Also: full-size plans (dry run) match the published parameter counts, output is
 * deterministic in the seed and independent of the thread count, bad arguments fail with one
 * clear line and leave nothing behind. The sanitizer build runs a lighter set of cases. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mlxrt.h"
#include "tools_write.h"
#include "test_util.h"

/* ---- the specification, from the reference doc ------------------------------------------- */
typedef struct spec {
  const char *name;
  int g4, hidden, layers, inter, heads, kv, head_dim, vocab;
  int global_head_dim, global_kv, k_eq_v, pattern, ple, kv_shared, double_wide;
  int experts, top_k, moe_inter;
} spec;

static const spec SPECS[] = {
    {"gemma4-31b", 1, 5376, 60, 21504, 32, 16, 256, 262144, 512, 4, 1, 6, 0, 0, 0, 0, 0, 0},
    {"gemma4-26b-a4b", 1, 2816, 30, 2112, 16, 8, 256, 262144, 512, 2, 1, 6, 0, 0, 0, 128, 8, 704},
    {"gemma4-e2b", 1, 1536, 35, 6144, 8, 1, 256, 262144, 512, 0, 0, 5, 256, 20, 1, 0, 0, 0},
    {"gemma4-e4b", 1, 2560, 42, 10240, 8, 2, 256, 262144, 512, 0, 0, 6, 256, 18, 0, 0, 0, 0},
    {"gemma4-12b", 1, 3840, 48, 15360, 16, 8, 256, 262144, 512, 1, 1, 6, 0, 0, 0, 0, 0, 0},
    {"gemma3-270m", 0, 640, 18, 2048, 4, 1, 256, 262144, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0},
    {"gemma3-1b", 0, 1152, 26, 6912, 4, 1, 256, 262144, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0},
    {"gemma3-4b", 0, 2560, 34, 10240, 8, 4, 256, 262208, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0},
    {"gemma3-12b", 0, 3840, 48, 15360, 16, 8, 256, 262208, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0},
    {"gemma3-27b", 0, 5376, 62, 21504, 32, 16, 128, 262208, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0},
};

static const spec *find_spec(const char *name) {
  for (size_t i = 0; i < sizeof SPECS / sizeof SPECS[0]; i++)
    if (!strcmp(SPECS[i].name, name)) return &SPECS[i];
  return NULL;
}

typedef struct lexp {
  int full, head_dim, kv, k_eq_v, inter, kv_source;
} lexp;

/* The layer plan for n layers; kv_shared is the number of KV-shared layers chosen for n (the
 * full count for the released depth; the test reads it back from config.json otherwise). */
static void expect_layer(const spec *s, int n, int shared, int i, lexp *L) {
  L->full = (s->g4 && i == n - 1) || (i + 1) % s->pattern == 0;
  int first = n - shared;
  L->head_dim = s->g4 && L->full ? s->global_head_dim : s->head_dim;
  L->kv = s->g4 && L->full && s->k_eq_v && s->global_kv ? s->global_kv : s->kv;
  L->k_eq_v = s->g4 && L->full && s->k_eq_v && i < first;
  L->inter = s->inter * (s->double_wide && i >= first ? 2 : 1);
  L->kv_source = i;
  if (i >= first)
    for (int j = first - 1; j >= 0; j--) {
      int fj = (s->g4 && j == n - 1) || (j + 1) % s->pattern == 0;
      if (fj == L->full) {
        L->kv_source = j;
        break;
      }
    }
}

/* Parameters: all = mlx-lm's total_parameters; inspect = what mlxrt inspect counts (matrices,
 * the four layer norms, q/k norms and the final norm). */
static void expect_params(const spec *s, int n, int shared, uint64_t *all, uint64_t *inspect) {
  uint64_t H = (uint64_t)s->hidden, V = (uint64_t)s->vocab, A = 0, I = 0;
  I = V * H + H;
  A = V * H + H;
  if (s->ple) {
    uint64_t LP = (uint64_t)n * (uint64_t)s->ple;
    I += V * LP + LP * H;
    A += V * LP + LP * H + (uint64_t)s->ple;
  }
  for (int i = 0; i < n; i++) {
    lexp L;
    expect_layer(s, n, shared, i, &L);
    uint64_t nq = (uint64_t)s->heads * (uint64_t)L.head_dim, nkv = (uint64_t)L.kv * (uint64_t)L.head_dim;
    int has_kv = L.kv_source == i;
    uint64_t m = 2 * nq * H + 3 * (uint64_t)L.inter * H;
    if (has_kv) m += nkv * H * (L.k_eq_v ? 1 : 2);
    uint64_t v = 4 * H + (uint64_t)L.head_dim * (has_kv ? 2 : 1);
    uint64_t extra = s->g4 ? 1 : 0; /* layer_scalar */
    if (s->experts) {
      uint64_t E = (uint64_t)s->experts, mi = (uint64_t)s->moe_inter;
      m += E * H + 3 * E * mi * H;
      extra += H + E + 3 * H;
    }
    if (s->ple) {
      m += 2 * (uint64_t)s->ple * H;
      extra += H;
    }
    I += m + v;
    A += m + v + extra;
  }
  *all = A;
  *inspect = I;
}

/* ---- helpers ------------------------------------------------------------------------------ */
static char g_tmp[512];

static void rm_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char p[1024];
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
      unlink(p);
    }
  closedir(d);
  rmdir(dir);
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d))) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}

static char *slurp(const char *path, long *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  if (b) b[n] = 0;
  fclose(f);
  if (len) *len = n;
  return b;
}

static int synth(const char *like, const char *mode, int layers, uint64_t seed, int threads,
                 const char *dir, mlxrt_synth_result *r, mlxrt_error *err) {
  mlxrt_synth_options o = {0};
  o.like = like;
  o.mode = mode;
  o.out_dir = dir;
  o.layers = layers;
  o.seed = seed;
  o.threads = threads;
  o.no_sync = 1; /* the test reads the files back at once; spare the CI disk */
  return mlxrt_synth(&o, r, err);
}

static const char *quant_label(const char *mode) {
  if (!strcmp(mode, "affine4")) return "affine 4-bit g64";
  if (!strcmp(mode, "affine8")) return "affine 8-bit g64";
  return mode; /* nvfp4, mxfp4, mxfp8, bf16 */
}

/* ---- one case: write, describe, run ------------------------------------------------------ */
static void check_case(const char *like, const char *mode, int layers, int run) {
  const spec *s = find_spec(like);
  CHECK(s != NULL);
  if (!s) return;
  char dir[600];
  snprintf(dir, sizeof dir, "%s/%s-%s-%d", g_tmp, like, mode, layers);
  mlxrt_synth_result r;
  mlxrt_error err = {{0}};
  int rc = synth(like, mode, layers, 7, 2, dir, &r, &err);
  CHECKF(rc == 0, "%s %s: %s", like, mode, err.msg);
  if (rc) return;
  int n = layers ? layers : s->layers;

  /* KV sharing for a reduced depth is the generator's choice; read it from config.json and
   * check it is valid (every shared layer has an earlier unshared layer of its type). */
  char path[700];
  snprintf(path, sizeof path, "%s/config.json", dir);
  char *cj = slurp(path, NULL);
  cJSON *cfg = cj ? cJSON_Parse(cj) : NULL;
  free(cj);
  CHECK(cfg != NULL);
  int shared = 0;
  if (cfg && s->g4) shared = cJSON_GetObjectItem(cfg, "num_kv_shared_layers")->valueint;
  if (!layers) CHECKF(shared == s->kv_shared, "%s: %d shared layers", like, shared);
  CHECK(cfg && cJSON_GetObjectItem(cfg, "mlxrt_synthetic") != NULL);
  if (cfg && strcmp(mode, "bf16")) {
    const cJSON *q = cJSON_GetObjectItem(cfg, "quantization");
    CHECK(q && cJSON_GetObjectItem(cfg, "quantization_config"));
    if (s->experts) { /* mlx-lm's Gemma 4 quant_predicate: router.proj at 8-bit g64 */
      const cJSON *o = cJSON_GetObjectItem(q, "model.layers.0.router.proj");
      CHECK(o && cJSON_GetObjectItem(o, "bits")->valueint == 8 &&
            cJSON_GetObjectItem(o, "group_size")->valueint == 64 && !cJSON_GetObjectItem(o, "mode"));
    }
  }
  cJSON_Delete(cfg);

  uint64_t want_all, want_inspect;
  expect_params(s, n, shared, &want_all, &want_inspect);
  CHECKF(r.params == want_all, "%s %s: %llu parameters, expected %llu", like, mode,
         (unsigned long long)r.params, (unsigned long long)want_all);
  CHECK(r.layers == n);

  char *js = mlxrt_describe(dir, 1, &err);
  CHECKF(js != NULL, "%s %s: %s", like, mode, err.msg);
  cJSON *d = js ? cJSON_Parse(js) : NULL;
  free(js);
  CHECK(d != NULL);
  if (d) {
    CHECK(cJSON_GetObjectItem(d, "num_layers")->valueint == n);
    CHECK(cJSON_GetObjectItem(d, "hidden_size")->valueint == s->hidden);
    CHECK(cJSON_GetObjectItem(d, "vocab_size")->valueint == s->vocab);
    CHECK(!strcmp(cJSON_GetObjectItem(d, "model_type")->valuestring,
                  s->g4 ? "gemma4_text" : "gemma3_text"));
    CHECK(!strcmp(cJSON_GetObjectItem(d, "tensor_prefix")->valuestring, "model."));
    if (!layers) CHECK(!strcmp(cJSON_GetObjectItem(d, "variant")->valuestring, like));
    double p = cJSON_GetObjectItem(d, "params")->valuedouble;
    CHECKF(p == (double)want_inspect, "%s %s: inspect counts %.0f parameters, expected %llu",
           like, mode, p, (unsigned long long)want_inspect);
    const cJSON *ls = cJSON_GetObjectItem(d, "layers");
    CHECK(cJSON_GetArraySize(ls) == n);
    int i = 0, bad = 0;
    for (const cJSON *l = ls ? ls->child : NULL; l; l = l->next, i++) {
      lexp L;
      expect_layer(s, n, shared, i, &L);
      if (strcmp(cJSON_GetObjectItem(l, "type")->valuestring, L.full ? "full" : "sliding") ||
          cJSON_GetObjectItem(l, "head_dim")->valueint != L.head_dim ||
          cJSON_GetObjectItem(l, "kv_heads")->valueint != L.kv ||
          cJSON_IsTrue(cJSON_GetObjectItem(l, "k_eq_v")) != L.k_eq_v ||
          cJSON_GetObjectItem(l, "intermediate")->valueint != L.inter ||
          cJSON_GetObjectItem(l, "kv_source")->valueint != L.kv_source)
        bad++;
    }
    CHECKF(bad == 0, "%s %s: %d layers differ from the plan", like, mode, bad);
    /* quantization groups: the mode everywhere, plus the 8-bit router on MoE */
    const cJSON *qa = cJSON_GetObjectItem(d, "quantization");
    int groups = cJSON_GetArraySize(qa), want_groups = s->experts && strcmp(mode, "bf16") ? 2 : 1;
    CHECKF(groups == want_groups, "%s %s: %d quantization groups", like, mode, groups);
    int found = 0;
    for (const cJSON *g = qa ? qa->child : NULL; g; g = g->next) {
      const char *f = cJSON_GetObjectItem(g, "format")->valuestring;
      if (!strcmp(f, quant_label(mode))) found = 1;
      else CHECKF(!strcmp(f, "affine 8-bit g64") && strstr(cJSON_GetObjectItem(g, "tensors")->valuestring, "router"),
                  "%s %s: unexpected group %s", like, mode, f);
    }
    CHECKF(found, "%s %s: no %s group", like, mode, quant_label(mode));
    cJSON_Delete(d);
  }

  /* a few tokens through the CPU reference path: finite logits (softcapped on Gemma 4) */
  mlxrt_options opt = {"cpu", 2, 0, NULL, NULL};
  mlxrt_model *m = run ? mlxrt_model_load(dir, &opt, &err) : NULL;
  CHECKF(m != NULL || !run, "%s %s: %s", like, mode, err.msg);
  if (m) {
    mlxrt_session *ss = mlxrt_session_new(m, 64, &err);
    CHECKF(ss != NULL, "%s", err.msg);
    int64_t V = mlxrt_model_vocab_size(m);
    int32_t toks[4] = {2, 818, 5279, 1003};
    float *lg = malloc((size_t)(4 * V) * sizeof(float));
    if (ss && lg) {
      rc = mlxrt_session_feed(ss, toks, 4, lg, 1, &err);
      CHECKF(rc == 0, "%s", err.msg);
      int32_t next = 262143;
      if (!rc) rc = mlxrt_session_feed(ss, &next, 1, lg, 0, &err);
      CHECKF(rc == 0, "%s", err.msg);
      int64_t nonfinite = 0, over = 0;
      double sum2 = 0;
      for (int64_t k = 0; k < (rc ? 0 : V); k++) {
        if (!isfinite(lg[k])) nonfinite++;
        if (s->g4 && fabsf(lg[k]) > 30.0f) over++;
        sum2 += (double)lg[k] * lg[k];
      }
      double rms = sqrt(sum2 / (double)V);
      CHECKF(nonfinite == 0 && over == 0, "%s %s: %lld non-finite logits, %lld beyond the softcap",
             like, mode, (long long)nonfinite, (long long)over);
      CHECKF(rms > 0.05 && rms < 30, "%s %s: logit rms %g", like, mode, rms);
    }
    free(lg);
    mlxrt_session_free(ss);
    mlxrt_model_free(m);
  }
  rm_dir(dir);
}

/* ---- full-size plans --------------------------------------------------------------------- */
static void check_full_plans(void) {
  for (size_t i = 0; i < sizeof SPECS / sizeof SPECS[0]; i++) {
    mlxrt_synth_options o = {0};
    o.like = SPECS[i].name;
    o.mode = "nvfp4";
    o.dry_run = 1;
    mlxrt_synth_result r;
    mlxrt_error err = {{0}};
    CHECKF(mlxrt_synth(&o, &r, &err) == 0, "%s", err.msg);
    uint64_t all, insp;
    expect_params(&SPECS[i], SPECS[i].layers, SPECS[i].kv_shared, &all, &insp);
    CHECKF(r.params == all, "%s: %llu parameters, expected %llu", SPECS[i].name,
           (unsigned long long)r.params, (unsigned long long)all);
    /* nvfp4: 4.5 bits per matrix weight; shards at most 5 GiB */
    CHECKF(r.bytes > all / 2 && r.bytes < all * 6 / 10, "%s: %llu bytes", SPECS[i].name,
           (unsigned long long)r.bytes);
    int least = (int)((r.bytes + (5ull << 30) - 1) / (5ull << 30));
    CHECKF(r.shards >= least && r.shards <= least + 1, "%s: %d shards", SPECS[i].name, r.shards);
  }
  /* published totals (gemma-architecture.md §3.1: 31B ≈ 30.7B; Gemma 3 27B ≈ 27.0B) */
  mlxrt_synth_options o = {0};
  mlxrt_synth_result r;
  o.like = "gemma4-31b", o.mode = "nvfp4", o.dry_run = 1;
  CHECK(mlxrt_synth(&o, &r, NULL) == 0 && r.params / 100000000 == 306 && r.shards == 4);
  o.like = "gemma3-27b";
  CHECK(mlxrt_synth(&o, &r, NULL) == 0 && r.params / 100000000 == 270);
  o.like = "gemma4-31b", o.mode = "bf16";
  CHECK(mlxrt_synth(&o, &r, NULL) == 0 && r.bytes > 61000000000ull && r.shards == 12);
}

/* ---- determinism ------------------------------------------------------------------------- */
static void check_determinism(void) {
  char a[600], b[600], c[600], pa[700], pb[700], pc[700];
  snprintf(a, sizeof a, "%s/det-a", g_tmp);
  snprintf(b, sizeof b, "%s/det-b", g_tmp);
  snprintf(c, sizeof c, "%s/det-c", g_tmp);
  mlxrt_error err = {{0}};
  CHECKF(synth("gemma3-270m", "affine4", 2, 11, 1, a, NULL, &err) == 0, "%s", err.msg);
  CHECKF(synth("gemma3-270m", "affine4", 2, 11, 3, b, NULL, &err) == 0, "%s", err.msg);
  CHECKF(synth("gemma3-270m", "affine4", 2, 12, 2, c, NULL, &err) == 0, "%s", err.msg);
  snprintf(pa, sizeof pa, "%s/model.safetensors", a);
  snprintf(pb, sizeof pb, "%s/model.safetensors", b);
  snprintf(pc, sizeof pc, "%s/model.safetensors", c);
  long la = 0, lb = 0, lc = 0;
  char *da = slurp(pa, &la), *db = slurp(pb, &lb), *dc = slurp(pc, &lc);
  CHECK(da && db && dc && la == lb && la == lc && la > 1000000);
  if (da && db && dc && la == lb && la == lc) {
    CHECKF(memcmp(da, db, (size_t)la) == 0, "same seed, different thread counts: files differ");
    CHECKF(memcmp(da, dc, (size_t)la) != 0, "different seeds: identical files");
    /* the data starts 64-byte aligned after the padded header */
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)(uint8_t)da[i] << (8 * i);
    CHECK((8 + hl) % 64 == 0);
  }
  free(da);
  free(db);
  free(dc);
  rm_dir(a);
  rm_dir(b);
  rm_dir(c);
}

/* ---- bad input --------------------------------------------------------------------------- */
static void check_errors(void) {
  char dir[600], tmpname[700];
  snprintf(dir, sizeof dir, "%s/err", g_tmp);
  mlxrt_error err = {{0}};
  CHECK(synth("gemma5-1t", "nvfp4", 0, 0, 1, dir, NULL, &err) != 0);
  CHECK_MSG(err, "unknown model 'gemma5-1t'");
  CHECK_MSG(err, "gemma4-31b");
  CHECK(synth("gemma4-31b", "int3", 0, 0, 1, dir, NULL, &err) != 0);
  CHECK_MSG(err, "unknown mode 'int3'");
  CHECK(synth("gemma4-31b", "nvfp4", 300, 0, 1, dir, NULL, &err) != 0);
  CHECK_MSG(err, "out of range");
  CHECK(synth("gemma4-31b", NULL, 0, 0, 1, dir, NULL, &err) != 0);
  CHECK(synth("gemma4-31b", "nvfp4", 0, 0, 1, NULL, NULL, &err) != 0);
  CHECK_MSG(err, "no output directory");
  CHECK(count_entries(g_tmp) == 0);

  /* a non-empty output directory is refused and left alone */
  mkdir(dir, 0755);
  snprintf(tmpname, sizeof tmpname, "%s/keep.txt", dir);
  FILE *f = fopen(tmpname, "w");
  if (f) fclose(f);
  CHECK(synth("gemma3-270m", "nvfp4", 1, 0, 1, dir, NULL, &err) != 0);
  CHECK_MSG(err, "not empty");
  CHECK(count_entries(dir) == 1);
  unlink(tmpname);
  /* an empty one is used */
  CHECKF(synth("gemma3-270m", "nvfp4", 1, 0, 1, dir, NULL, &err) == 0, "%s", err.msg);
  CHECK(count_entries(dir) == 4); /* config, generation_config, index, model.safetensors */
  snprintf(tmpname, sizeof tmpname, "%s/tokenizer.json", dir);
  CHECK(access(tmpname, F_OK) != 0);
  rm_dir(dir);

  /* missing parent directory */
  char deep[700];
  snprintf(deep, sizeof deep, "%s/no/such/dir", g_tmp);
  CHECK(synth("gemma3-270m", "nvfp4", 1, 0, 1, deep, NULL, &err) != 0);
  CHECK_MSG(err, "cannot create");

  /* cancellation: nothing left behind, neither DIR nor its temporary */
  volatile int cancel = 1;
  mlxrt_synth_options o = {0};
  o.like = "gemma3-270m", o.mode = "nvfp4", o.out_dir = dir, o.layers = 1, o.cancel = &cancel;
  CHECK(mlxrt_synth(&o, NULL, &err) != 0);
  CHECK_MSG(err, "cancelled");
  CHECKF(count_entries(g_tmp) == 0, "%d entries left in %s", count_entries(g_tmp), g_tmp);
  CHECK(strchr(err.msg, '\n') == NULL);
}

int main(void) {
  const char *t = getenv("TMPDIR");
  snprintf(g_tmp, sizeof g_tmp, "%s/mlxrt-synth-XXXXXX", t && *t ? t : "/tmp");
  if (!mkdtemp(g_tmp)) {
    perror("mkdtemp");
    return 1;
  }
  check_errors();
  check_full_plans();
  check_determinism();
  /* every mode at least once; Gemma 4 dense/k_eq_v, MoE, PLE + KV sharing + double-wide */
  /* (the sanitizer build runs the model only once: its -O0 forward pass is slow) */
  check_case("gemma3-270m", "nvfp4", TEST_SANITIZED ? 2 : 0, 1);
  check_case("gemma3-270m", "affine8", 0, !TEST_SANITIZED);
  check_case("gemma4-e2b", "mxfp8", 2, !TEST_SANITIZED);
  check_case("gemma4-e2b", "affine4", 7, !TEST_SANITIZED); /* 7 layers keep KV sharing, double-wide MLP */
  if (!TEST_SANITIZED) {
    check_case("gemma3-270m", "bf16", 0, 1);
    check_case("gemma3-270m", "mxfp4", 60, 1); /* a deep stack stays finite */
    check_case("gemma4-31b", "nvfp4", 2, 1);
    check_case("gemma4-31b", "affine4", 2, 1);
    check_case("gemma4-26b-a4b", "mxfp4", 2, 1);
  }
  rm_dir(g_tmp);
  TEST_END();
}
