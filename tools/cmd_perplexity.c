/* mlxrt perplexity: llama.cpp's perplexity protocol. The text is tokenized once, cut into
 * chunks of CTX tokens (each starting with BOS), every chunk runs in a fresh session, and the
 * second half of each chunk is scored (each token sees at least CTX/2 tokens of context). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "cli_file.h"
#include "cli_num.h"
#include "commands.h"
#include "gen_args.h"

static const char USAGE[] =
    "usage: mlxrt perplexity -m MODEL -f TEXT_FILE [-c CTX] [--chunks N] [-t THREADS]\n"
    "                        [--backend auto|cpu|cuda]\n"
    "MODEL is a directory or a Hugging Face repo id (org/name) in the local HF cache.\n"
    "Prints the running estimate per chunk and 'Final estimate: PPL = X +/- Y'.\n"
    "-c CTX: tokens per chunk (8..16777216, default 512); --chunks N: score at most N chunks\n"
    "(0, the default: all). TEXT_FILE is read whole (at most 256 MiB, no NUL byte; - is\n"
    "standard input).\n";

#define SCORE_BATCH 32

int cmd_perplexity(int argc, char **argv) {
  perplexity_args o;
  int r = perplexity_args_parse(&o, argc, argv);
  if (r == 1) fputs(USAGE, stdout);
  if (r) return r == 1 ? 0 : 2;
  gen_args a = o.g;
  const int ctx = o.ctx, max_chunks = o.max_chunks;
  char *text = cli_read_text("perplexity", a.prompt_file, NULL);
  if (!text) return 1;
  mlxrt_model *m = gen_args_load_model(&a, "perplexity");
  if (!m) {
    free(text);
    return 1;
  }
  mlxrt_error err = {{0}};
  int rc = 1;
  char what[32];
  snprintf(what, sizeof what, "-c %d", ctx);
  if (gen_args_check_kv(m, "perplexity", what, ctx)) {
    mlxrt_model_free(m);
    free(text);
    return 1;
  }
  int32_t *ids = NULL, *chunk = NULL;
  size_t n = 0;
  float *logits = NULL;
  a.chat.use_template = 0;
  mlxrt_chat *c = mlxrt_chat_new(m, &a.chat, &err);
  if (!c || mlxrt_chat_tokenize(c, text, 0, &ids, &n, &err)) goto out;
  int64_t V = mlxrt_model_vocab_size(m);
  int64_t nchunks = (int64_t)n / ctx;
  if (max_chunks > 0 && nchunks > max_chunks) nchunks = max_chunks;
  if (nchunks < 1) {
    snprintf(err.msg, sizeof err.msg, "%s has %zu tokens, fewer than one chunk of %d (use a smaller -c)",
             a.prompt_file, n, ctx);
    goto out;
  }
  logits = malloc((size_t)(SCORE_BATCH * V) * sizeof(float));
  chunk = malloc((size_t)ctx * sizeof(int32_t));
  if (!logits || !chunk) {
    snprintf(err.msg, sizeof err.msg, "out of memory");
    goto out;
  }
  fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %d, scoring the second half of each\n", n,
          (long long)nchunks, ctx);
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  int first = ctx / 2;
  for (int64_t k = 0; k < nchunks; k++) {
    memcpy(chunk, ids + k * ctx, (size_t)ctx * sizeof(int32_t));
    chunk[0] = 2; /* BOS, as llama.cpp does for every chunk */
    mlxrt_session *s = mlxrt_session_new_ex(m, ctx, MLXRT_SESSION_ALL_POSITIONS, &err);
    if (!s) goto out;
    /* context only up to first-1; the logits of positions first-1 .. ctx-2 predict the
     * scored tokens first .. ctx-1 */
    int bad = mlxrt_session_feed(s, chunk, first - 1, NULL, 0, &err);
    int64_t p = first - 1;
    while (!bad && p < ctx - 1) {
      int64_t b = ctx - 1 - p < SCORE_BATCH ? ctx - 1 - p : SCORE_BATCH;
      bad = mlxrt_session_feed(s, chunk + p, b, logits, 1, &err);
      for (int64_t i = 0; !bad && i < b; i++) {
        const float *l = logits + i * V;
        float mx = l[0];
        for (int64_t v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
        double sum = 0;
        for (int64_t v = 0; v < V; v++) sum += exp((double)(l[v] - mx));
        double lp = (double)(l[chunk[p + i + 1]] - mx) - log(sum);
        nll -= lp;
        nll2 += lp * lp;
        count++;
      }
      p += b;
    }
    mlxrt_session_free(s);
    if (bad) goto out;
    fprintf(stdout, "[%lld]%.4f,", (long long)(k + 1), exp(nll / (double)count));
    fflush(stdout);
  }
  double mean = nll / (double)count;
  double var = nll2 / (double)count - mean * mean;
  double ppl = exp(mean);
  double unc = var > 0 && count > 1 ? ppl * sqrt(var / (double)(count - 1)) : 0;
  printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, unc);
  rc = 0;
out:
  if (rc) cli_error("perplexity", "%s", err.msg);
  free(ids);
  free(chunk);
  free(logits);
  mlxrt_chat_free(c);
  mlxrt_model_free(m);
  free(text);
  return rc;
}
