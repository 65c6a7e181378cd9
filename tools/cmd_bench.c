/* mlxrt bench: llama-bench's protocol and table on an MLX checkpoint. pp = one batched
 * prompt pass of -p tokens; tg = -n greedy decode steps (argmax, no sampler, as llama-bench);
 * -d DEPTH tokens are cached first (untimed). Reports mean ± sd t/s over -r runs, plus the
 * bytes a decode step streams (the weights and the KV cache as the session's decoder stores it),
 * GB/s, % of the backend's read bandwidth measured in this run,
 * and a hash of the last logits (a determinism check). --sampler SPEC adds, for each tg, the
 * same tg with every step drawn by that sampler (on the device with MLXRT_DECODER=1: only the
 * token id comes back), so the sampler's cost is measured, not guessed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_args.h"
#include "cli_num.h"
#include "commands.h"
#include "gen_args.h"
#include "mlxrt.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int argmax(const float *x, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

static uint64_t hash_floats(const float *x, int64_t n) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char *p = (const unsigned char *)x;
  for (int64_t i = 0; i < n * 4; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static void fill_tokens(int32_t *t, int64_t n, int vocab, uint64_t *state) {
  for (int64_t i = 0; i < n; i++) {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    t[i] = (int32_t)(10 + *state % (uint64_t)(vocab - 10));
  }
}

typedef struct {
  char test[48];
  int n_prompt, n_gen, depth, sampled;
  double mean, sd, gbs, pct;
  uint64_t hash;
  mlxrt_memory mem; /* at the end of the last run: the KV cache held, the device's memory in use */
  uint64_t kv_read; /* the KV bytes a decode step reads at the run's average depth */
} result;

static void usage(FILE *f) {
  fprintf(f,
          "usage: mlxrt bench -m MODEL [-p 512] [-n 128] [-d 0] [-r 5] [-o md|json]\n"
          "                   [-t THREADS] [--backend auto|cpu|cuda] [--numerics float32|mlx-cpu]\n"
          "                   [--sampler SPEC] [-c CTX] [--warmup-depth N] [--kv-k MODE]\n"
          "                   [--batch 1,4,16,64]\n"
          "  MODEL is a directory or a Hugging Face repo id (org/name) in the local HF cache.\n"
          "  -p, -n, -d take comma-separated lists (e.g. -d 0,4096,32768) of at most 16 values.\n"
          "  -p N: prompt tokens of a pp test; -n N: tokens a tg test generates; 0 skips the test\n"
          "  (-n -1, \"until a stop token\" in run and chat, has no meaning here: refused).\n"
          "  -r: repetitions (1..1000); -t THREADS: CPU threads (0, the default: all cores).\n"
          "  -c CTX: each run's session holds CTX tokens (default: just enough, as llama-bench),\n"
          "  e.g. the model's full context, as mlxrt run and chat make it by default.\n"
          "  --kv-k auto|bf16|planar3|planar4: the full-attention layers' K cache on a GPU: auto keeps\n"
          "  K from V where a layer's K and V share one projection (5/8 of the bytes), bf16 keeps K in\n"
          "  bf16, planar3 / planar4 compress it (a comparison mode, docs/KV.md; no --batch).\n"
          "  --sampler temp=0.8,top_k=64,top_p=0.95[,min_p=P][,seed=S]: each tg also runs with\n"
          "  that sampler (a separate row); unnamed settings are off (temperature 1).\n"
          "  --warmup-depth N: the warm-up run before each test caches min(N, DEPTH) tokens\n"
          "  (default: DEPTH, as llama-bench). Every run makes its own session, so its graphs,\n"
          "  and the warm-up serves the first-use uploads only: a long depth's second fill\n"
          "  (minutes at 262144) can be skipped.\n"
          "  --batch B1,B2,... (or -npl): batched decode, as llama-batched-bench -npp P -ntg N -npl B:\n"
          "  B sequences of -p prompt tokens each (pp: the B prompts), then -n greedy steps of all B\n"
          "  together (tg: aggregate and per-sequence t/s). The CPU backend steps the B rows one\n"
          "  after another.\n");
}

/* One timed repetition; returns seconds or < 0 on error. */
static double run_once(mlxrt_model *m, int64_t ctx, int depth, int pp, int tg, const mlxrt_gen_params *sampler,
                       float *logits, int32_t *toks, uint64_t *seed, uint64_t *hash, mlxrt_memory *mem,
                       uint64_t *kv_read, mlxrt_error *err) {
  int V = mlxrt_model_vocab_size(m);
  mlxrt_sampler *smp = sampler ? mlxrt_sampler_new(m, sampler, err) : NULL;
  if (sampler && !smp) return -1;
  int64_t need = (int64_t)depth + pp + tg + 1;
  mlxrt_session *s = mlxrt_session_new(m, ctx > need ? ctx : need, err);
  if (!s) {
    mlxrt_sampler_free(smp);
    return -1;
  }
  double t = -1;
  if (depth > 0) {
    fill_tokens(toks, depth, V, seed);
    if (mlxrt_session_feed(s, toks, depth, NULL, 0, err)) goto done;
  }
  if (pp > 0) {
    fill_tokens(toks, pp, V, seed);
    double t0 = now_s();
    if (mlxrt_session_feed(s, toks, pp, logits, 0, err)) goto done;
    t = now_s() - t0;
    *hash = hash_floats(logits, V);
  } else {
    int32_t tok;
    fill_tokens(&tok, 1, V, seed);
    double t0 = now_s();
    /* greedy argmax on the device when the backend decodes whole steps; the last step also
     * returns its logits for the determinism hash */
    for (int i = 0; i + 1 < tg; i++)
      if (smp ? mlxrt_session_step_sample(s, tok, smp, &tok, err) : mlxrt_session_step_greedy(s, tok, &tok, err))
        goto done;
    if (tg > 0) {
      if (mlxrt_session_feed(s, &tok, 1, logits, 0, err)) goto done;
      tok = argmax(logits, V);
    }
    t = now_s() - t0;
    *hash = hash_floats(logits, V);
  }
  if (mlxrt_session_memory(s, mem, err)) t = -1;
  *kv_read = mlxrt_session_kv_read_bytes(s, depth + tg / 2);
done:
  mlxrt_session_free(s);
  mlxrt_sampler_free(smp);
  return t;
}

static void print_json_row(const result *R, const mlxrt_model_info *info, const mlxrt_model *m, int threads, double bw,
                           const char *sampler_spec, int after_another) {
  printf("%s  {\"model\": \"%s\", \"quant\": \"%s\", \"model_size\": %llu, \"model_n_params\": %llu, "
         "\"backend\": \"%s\", \"n_threads\": %d, \"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, "
         "\"avg_ts\": %.4f, \"stddev_ts\": %.4f, \"gbs\": %.2f, \"bandwidth_gbs\": %.2f, "
         "\"roofline_pct\": %.2f, \"logits_hash\": \"%016llx\", \"sampler\": \"%s\", \"kv_bytes\": %llu, "
         "\"kv_positions\": %lld, \"device_used_bytes\": %llu}",
         after_another ? ",\n" : "", info->variant, info->quant, (unsigned long long)info->bytes_on_disk,
         (unsigned long long)info->params, mlxrt_model_backend_name(m), threads, R->n_prompt, R->n_gen, R->depth,
         R->mean, R->sd, R->gbs, bw, R->pct, (unsigned long long)R->hash, R->sampled ? sampler_spec : "greedy",
         (unsigned long long)R->mem.kv_bytes, (long long)R->mem.kv_positions, (unsigned long long)R->mem.device_used);
}

static void print_md_row(const result *R, const mlxrt_model_info *info, const mlxrt_model *m, int threads, double bw) {
  char gb[32] = "", pc[32] = "";
  if (R->n_gen) {
    snprintf(gb, sizeof gb, "%.1f", R->gbs);
    if (bw > 0) snprintf(pc, sizeof pc, "%.1f %%", R->pct);
  }
  printf("| %s %s | %.2f MiB | %.2f M | %s | %d | %s | %.2f ± %.2f | %s | %s | %016llx |\n", info->variant, info->quant,
         (double)info->bytes_on_disk / 1048576.0, (double)info->params / 1e6, mlxrt_model_backend_name(m), threads,
         R->test, R->mean, R->sd, gb, pc, (unsigned long long)R->hash);
}

int cmd_bench(int argc, char **argv) {
  bench_args o;
  int r = bench_args_parse(&o, argc, argv);
  if (r == 1) usage(stdout);
  if (r) return r == 1 ? 0 : 2;
  const char *model = o.model, *fmt = o.fmt, *sampler_spec = o.sampler_spec;
  const bench_list P = o.p, N = o.n, D = o.d;
  const int reps = o.reps, threads = o.threads, warmup_depth = o.warmup_depth;
  const long long ctx = o.ctx;
  mlxrt_gen_params sampler = o.sampler;
  mlxrt_error err = {{0}};
  mlxrt_options opt = {o.backend, threads, 0, o.numerics, o.kv_k};
  char dir[4096];
  if (gen_args_model_dir("bench", model, dir, sizeof dir)) return 1;
  mlxrt_model *m = mlxrt_model_load(dir, &opt, &err);
  if (!m) {
    fprintf(stderr, "mlxrt bench: %s\n", err.msg);
    return 1;
  }
  if (o.batch.n) {
    const int brc = bench_batched(m, &o);
    mlxrt_model_free(m);
    return brc;
  }
  mlxrt_model_info info;
  mlxrt_model_get_info(m, &info);
  int V = info.vocab_size, maxtok = 1, maxp = 0, maxn = 0, maxd = 0;
  for (int i = 0; i < P.n; i++) maxp = P.v[i] > maxp ? P.v[i] : maxp;
  for (int i = 0; i < N.n; i++) maxn = N.v[i] > maxn ? N.v[i] : maxn;
  for (int i = 0; i < D.n; i++) maxd = D.v[i] > maxd ? D.v[i] : maxd;
  maxtok = maxp > maxd ? maxp : maxd > 1 ? maxd : 1;
  /* the largest session a run makes (run_once): depth + pp + tg + 1, or -c */
  int64_t most = (int64_t)maxd + (maxp > maxn ? maxp : maxn) + 1;
  char what[96];
  if (ctx > most) snprintf(what, sizeof what, "-c %lld", ctx);
  else snprintf(what, sizeof what, "-d %d with -p/-n %d", maxd, maxp > maxn ? maxp : maxn);
  if (gen_args_check_kv(m, "bench", what, ctx > most ? ctx : most)) {
    mlxrt_model_free(m);
    return 1;
  }
  float *logits = malloc((size_t)V * sizeof(float));
  int32_t *toks = malloc((size_t)maxtok * sizeof(int32_t));
  double *times = malloc((size_t)reps * sizeof(double));
  result res[3 * BENCH_MAX_VALUES * BENCH_MAX_VALUES + 1];
  int nres = 0, rc = 0;
  double bw = mlxrt_model_read_bandwidth(m);
  if (!logits || !toks || !times) {
    fprintf(stderr, "mlxrt bench: out of memory\n");
    rc = 1;
    goto out;
  }
  /* each row printed as it is measured: a run cut short keeps what it measured (the JSON array is
   * closed on an error too) */
  const int json = !strcmp(fmt, "json");
  if (json)
    printf("[\n");
  else
    printf("| model | size | params | backend | threads | test | t/s | GB/s | %% of %.0f GB/s | logits hash |\n"
           "| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |\n",
           bw);
  fflush(stdout);
  for (int di = 0; di < D.n && !rc; di++)
    for (int kind = 0; kind < 3 && !rc; kind++) { /* pp, tg, tg with the sampler */
      const bench_list *L = kind ? &N : &P;
      const mlxrt_gen_params *smp = kind == 2 ? &sampler : NULL;
      if (kind == 2 && !sampler_spec) break;
      for (int li = 0; li < L->n && !rc; li++) {
        int pp = kind ? 0 : L->v[li], tg = kind ? L->v[li] : 0, depth = D.v[di];
        if (pp == 0 && tg == 0) continue;
        uint64_t seed = 0x9e3779b97f4a7c15ull, hash = 0;
        /* one warm-up run (first-use uploads, page faults), as llama-bench does */
        const int wdepth = warmup_depth >= 0 && warmup_depth < depth ? warmup_depth : depth;
        mlxrt_memory mem;
        uint64_t kv_read = 0;
        if (run_once(m, ctx, wdepth, pp ? pp : 0, tg ? (tg < 4 ? tg : 4) : 0, smp, logits, toks, &seed, &hash, &mem,
                     &kv_read, &err) < 0) {
          rc = 1;
          break;
        }
        for (int r = 0; r < reps; r++) {
          seed = 0x9e3779b97f4a7c15ull;
          times[r] = run_once(m, ctx, depth, pp, tg, smp, logits, toks, &seed, &hash, &mem, &kv_read, &err);
          if (times[r] < 0) {
            rc = 1;
            break;
          }
        }
        if (rc) break;
        result *R = &res[nres++];
        memset(R, 0, sizeof *R);
        int nt = pp ? pp : tg;
        double sum = 0, sq = 0;
        for (int r = 0; r < reps; r++) {
          double ts = nt / times[r];
          sum += ts;
          sq += ts * ts;
        }
        R->mean = sum / reps;
        R->sd = reps > 1 ? sqrt(fmax(0, (sq - sum * sum / reps) / (reps - 1))) : 0;
        R->n_prompt = pp;
        R->n_gen = tg;
        R->depth = depth;
        R->hash = hash;
        R->mem = mem;
        R->kv_read = kv_read;
        R->sampled = smp != NULL;
        snprintf(R->test, sizeof R->test, "%s%d", pp ? "pp" : "tg", nt);
        if (depth) snprintf(R->test + strlen(R->test), sizeof R->test - strlen(R->test), " @ d%d", depth);
        if (smp) snprintf(R->test + strlen(R->test), sizeof R->test - strlen(R->test), " +sampler");
        if (ctx) snprintf(R->test + strlen(R->test), sizeof R->test - strlen(R->test), " ctx %lld", ctx);
        if (tg) {
          /* bytes per step: weights + the KV read at the average depth of the run */
          double bytes = (double)info.bytes_per_token + (double)kv_read;
          R->gbs = bytes * R->mean / 1e9;
          R->pct = bw > 0 ? 100.0 * R->gbs / bw : 0;
        }
        if (json)
          print_json_row(R, &info, m, threads, bw, sampler_spec, nres > 1);
        else
          print_md_row(R, &info, m, threads, bw);
        fflush(stdout);
      }
    }
  if (rc) {
    if (json) printf(nres ? "\n]\n" : "]\n");
    fprintf(stderr, "mlxrt bench: %s\n", err.msg);
    goto out;
  }
  if (json) {
    printf(nres ? "\n]\n" : "]\n");
  } else {
    if (sampler_spec) printf("\n+sampler: every tg step drawn with %s\n", sampler_spec);
    /* what a run holds at its end (the KV cache only grows during a run) */
    printf("\n");
    for (int i = 0; i < nres; i++) {
      const mlxrt_memory *mm = &res[i].mem;
      printf("memory %s: KV cache %.1f MiB backing %lld positions", res[i].test, (double)mm->kv_bytes / 1048576.0,
             (long long)mm->kv_positions);
      if (mm->device_total)
        printf("; device %.2f GiB in use of %.2f GiB", (double)mm->device_used / 1073741824.0,
               (double)mm->device_total / 1073741824.0);
      printf("\n");
    }
  }
out:
  free(logits);
  free(toks);
  free(times);
  mlxrt_model_free(m);
  return rc;
}
