/* mlxrt bench --batch: llama-batched-bench's protocol on an MLX checkpoint. For each prompt
 * length P (-p), generation length N (-n) and sequence count B (--batch): B prompts of P
 * tokens into the slots of one batch (pp: B·P tokens over their time), then N greedy steps of
 * all B sequences together (tg: B·N tokens over their time — the aggregate — and N over it per
 * sequence). Mean ± sd over -r runs after one warm-up (which also captures the step's graphs). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_args.h"
#include "commands.h"
#include "mlxrt.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One run: pp and tg seconds; < 0 on error. */
static int run_batch(mlxrt_batch *b, int B, int pp, int tg, int vocab, uint64_t *seed, double *t_pp, double *t_tg,
                     mlxrt_error *err) {
  int32_t *prompt = malloc((size_t)pp * sizeof *prompt), *tok = malloc((size_t)B * sizeof *tok);
  int *slots = malloc((size_t)B * sizeof *slots);
  int rc = -1;
  if (!prompt || !tok || !slots) {
    snprintf(err->msg, sizeof err->msg, "out of memory");
    goto done;
  }
  double t0 = now_s();
  for (int s = 0; s < B; s++) {
    for (int i = 0; i < pp; i++) {
      *seed ^= *seed << 13;
      *seed ^= *seed >> 7;
      *seed ^= *seed << 17;
      prompt[i] = (int32_t)(10 + *seed % (uint64_t)(vocab - 10));
    }
    slots[s] = s;
    if (mlxrt_batch_prompt(b, s, prompt, pp, &tok[s], err)) goto done;
  }
  double t1 = now_s();
  for (int i = 0; i < tg; i++)
    if (mlxrt_batch_step(b, B, slots, tok, tok, err)) goto done;
  *t_pp = t1 - t0;
  *t_tg = now_s() - t1;
  rc = 0;
done:
  free(prompt);
  free(tok);
  free(slots);
  return rc;
}

static void mean_sd(const double *v, int n, double *mean, double *sd) {
  double s = 0, q = 0;
  for (int i = 0; i < n; i++) s += v[i], q += v[i] * v[i];
  *mean = s / n;
  *sd = n > 1 ? sqrt(fmax(0, (q - s * s / n) / (n - 1))) : 0;
}

int bench_batched(mlxrt_model *m, const bench_args *o) {
  mlxrt_model_info info;
  mlxrt_model_get_info(m, &info);
  mlxrt_error err = {{0}};
  const int json = !strcmp(o->fmt, "json");
  double *pps = malloc((size_t)o->reps * sizeof *pps), *tgs = malloc((size_t)o->reps * sizeof *tgs);
  /* what each run's batch held at its end, printed after the table */
  const size_t nruns = (size_t)o->p.n * (size_t)o->n.n * (size_t)o->batch.n;
  mlxrt_memory *mems = calloc(nruns, sizeof *mems);
  int *mem_b = calloc(nruns, sizeof *mem_b);
  int rc = 0, first = 1, nmem = 0;
  if (!pps || !tgs || !mems || !mem_b) {
    fprintf(stderr, "mlxrt bench: out of memory\n");
    free(pps);
    free(tgs);
    free(mems);
    free(mem_b);
    return 1;
  }
  for (int pi = 0; pi < o->p.n && !rc; pi++)
    for (int ni = 0; ni < o->n.n && !rc; ni++)
      for (int bi = 0; bi < o->batch.n && !rc; bi++) {
        const int pp = o->p.v[pi] > 0 ? o->p.v[pi] : 1, tg = o->n.v[ni], B = o->batch.v[bi];
        int64_t cap = (int64_t)pp + tg + 1;
        if (o->ctx > cap) cap = o->ctx;
        mlxrt_batch *b = mlxrt_batch_new(m, B, cap, &err);
        uint64_t seed = 0x9e3779b97f4a7c15ull;
        double tp, tt;
        if (!b || run_batch(b, B, pp, tg < 4 ? tg : 4, info.vocab_size, &seed, &tp, &tt, &err)) rc = 1;
        for (int r = 0; r < o->reps && !rc; r++) {
          seed = 0x9e3779b97f4a7c15ull + (uint64_t)r;
          if (run_batch(b, B, pp, tg, info.vocab_size, &seed, &tp, &tt, &err)) rc = 1;
          pps[r] = (double)B * pp / tp;
          tgs[r] = tg > 0 ? (double)B * tg / tt : 0;
        }
        mlxrt_memory mem = {0};
        if (!rc && mlxrt_batch_memory(b, &mem, &err)) rc = 1;
        mlxrt_batch_free(b);
        mems[nmem] = mem;
        mem_b[nmem++] = B;
        if (rc) break;
        double pm, psd, tm, tsd;
        mean_sd(pps, o->reps, &pm, &psd);
        mean_sd(tgs, o->reps, &tm, &tsd);
        if (first && json) printf("[\n");
        if (first && !json) {
          printf("| model | backend | PP | TG | B | S_PP t/s | S_TG t/s (aggregate) | t/s per sequence |\n");
          printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        }
        if (json)
          printf("%s  {\"model\": \"%s\", \"quant\": \"%s\", \"backend\": \"%s\", \"n_prompt\": %d, \"n_gen\": %d, "
                 "\"n_batch\": %d, \"pp_avg_ts\": %.4f, \"pp_stddev_ts\": %.4f, \"tg_avg_ts\": %.4f, "
                 "\"tg_stddev_ts\": %.4f, \"tg_per_sequence_ts\": %.4f, \"kv_bytes\": %llu, "
                 "\"device_used_bytes\": %llu}",
                 first ? "" : ",\n", info.variant, info.quant, mlxrt_model_backend_name(m), pp, tg, B, pm, psd, tm,
                 tsd, tm / B, (unsigned long long)mem.kv_bytes, (unsigned long long)mem.device_used);
        else
          printf("| %s %s | %s | %d | %d | %d | %.2f ± %.2f | %.2f ± %.2f | %.2f |\n", info.variant, info.quant,
                 mlxrt_model_backend_name(m), pp, tg, B, pm, psd, tm, tsd, tm / B);
        fflush(stdout);
        first = 0;
      }
  if (json && !first) printf("\n]\n");
  if (!json && nmem) printf("\n");
  for (int i = 0; i < nmem && !json; i++) {
    printf("memory B=%d: KV cache %.1f MiB", mem_b[i], (double)mems[i].kv_bytes / 1048576.0);
    if (mems[i].device_total)
      printf("; device %.2f GiB in use of %.2f GiB", (double)mems[i].device_used / 1073741824.0,
             (double)mems[i].device_total / 1073741824.0);
    printf("\n");
  }
  if (rc) fprintf(stderr, "mlxrt bench: %s\n", err.msg);
  free(pps);
  free(tgs);
  free(mems);
  free(mem_b);
  return rc;
}
