/* mlxrt logits: float32 logits of every prompt position after one batched pass, and with
 * --decode N the logits of N greedy steps through the KV cache — for comparing engines. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "gen_args.h"
#include "mlxrt.h"
#include "tools_write.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: mlxrt logits -m MODEL_DIR --tokens 2,5,17,... [-o OUT.safetensors] [--decode N]\n"
          "                    [--backend auto|cpu|cuda] [-t THREADS] [--numerics float32|mlx-cpu]\n"
          "Writes 'logits' [positions, vocab] (float32) and, with --decode N, 'greedy' [N] (int32)\n"
          "and 'greedy_logits' [N, vocab]. Without -o, prints the argmax of each position.\n");
}

/* Parses "2,5,17" into a malloc'd array. */
static int32_t *parse_tokens(const char *s, int64_t *n) {
  int64_t cap = 64, k = 0;
  int32_t *t = malloc((size_t)cap * sizeof *t);
  if (!t) return NULL;
  const char *p = s;
  while (*p) {
    char *end;
    errno = 0;
    long v = strtol(p, &end, 10);
    if (end == p || errno || v < 0 || v > 0x7fffffff) {
      free(t);
      return NULL;
    }
    if (k == cap) {
      cap *= 2;
      int32_t *nt = realloc(t, (size_t)cap * sizeof *t);
      if (!nt) {
        free(t);
        return NULL;
      }
      t = nt;
    }
    t[k++] = (int32_t)v;
    p = end;
    if (*p == ',') p++;
    else if (*p) {
      free(t);
      return NULL;
    }
  }
  *n = k;
  return t;
}

static int argmax(const float *x, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

int cmd_logits(int argc, char **argv) {
  const char *model = NULL, *tokens_arg = NULL, *out = NULL, *backend = NULL, *numerics = NULL;
  int decode = 0, threads = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int has = i + 1 < argc;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has) model = argv[++i];
    else if (!strcmp(a, "--tokens") && has) tokens_arg = argv[++i];
    else if (!strcmp(a, "-o") && has) out = argv[++i];
    else if (!strcmp(a, "--decode") && has) decode = atoi(argv[++i]);
    else if (!strcmp(a, "--backend") && has) backend = argv[++i];
    else if (!strcmp(a, "--numerics") && has) numerics = argv[++i];
    else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && has) threads = atoi(argv[++i]);
    else {
      fprintf(stderr, "mlxrt logits: unknown or incomplete option '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (!model || !tokens_arg) {
    fprintf(stderr, "mlxrt logits: -m MODEL_DIR and --tokens are required\n");
    return 2;
  }
  if (decode < 0) {
    fprintf(stderr, "mlxrt logits: --decode must be >= 0\n");
    return 2;
  }
  if (gen_args_apply_numerics(numerics, &backend, "logits")) return 2;
  int64_t n = 0;
  int32_t *tokens = parse_tokens(tokens_arg, &n);
  if (!tokens || n == 0) {
    fprintf(stderr, "mlxrt logits: --tokens must be a comma-separated list of token ids\n");
    free(tokens);
    return 2;
  }
  mlxrt_error err = {{0}};
  mlxrt_options opt = {backend, threads, 0, numerics};
  mlxrt_model *m = mlxrt_model_load(model, &opt, &err);
  int rc = 1;
  float *logits = NULL, *glogits = NULL;
  int32_t *greedy = NULL;
  mlxrt_session *s = NULL;
  if (!m) goto done;
  int64_t V = mlxrt_model_vocab_size(m);
  s = mlxrt_session_new_ex(m, 0, MLXRT_SESSION_ALL_POSITIONS, &err);
  logits = malloc((size_t)(n * V) * sizeof(float));
  glogits = malloc((size_t)((decode ? decode : 1) * V) * sizeof(float));
  greedy = malloc((size_t)(decode ? decode : 1) * sizeof(int32_t));
  if (!s || !logits || !glogits || !greedy) {
    if (!err.msg[0]) snprintf(err.msg, sizeof err.msg, "out of memory");
    goto done;
  }
  if (mlxrt_session_feed(s, tokens, n, logits, 1, &err)) goto done;
  int32_t next = argmax(logits + (n - 1) * V, (int)V);
  for (int i = 0; i < decode; i++) {
    greedy[i] = next;
    if (mlxrt_session_feed(s, &next, 1, glogits + (int64_t)i * V, 0, &err)) goto done;
    next = argmax(glogits + (int64_t)i * V, (int)V);
  }
  if (out) {
    mlxrt_tensor_out t[3] = {
        {"logits", MLXRT_F32, 2, {n, V}, logits},
        {"greedy", MLXRT_I32, 1, {decode}, greedy},
        {"greedy_logits", MLXRT_F32, 2, {decode, V}, glogits},
    };
    const char *meta[] = {"producer", "mlxrt logits", "backend", mlxrt_model_backend_name(m)};
    if (mlxrt_save_safetensors(out, t, decode ? 3 : 1, meta, 2, &err)) goto done;
  } else {
    printf("argmax:");
    for (int64_t i = 0; i < n; i++) printf(" %d", argmax(logits + i * V, (int)V));
    printf("\n");
    if (decode) {
      printf("greedy:");
      for (int i = 0; i < decode; i++) printf(" %d", greedy[i]);
      printf("\n");
    }
  }
  rc = 0;
done:
  if (rc) fprintf(stderr, "mlxrt logits: %s\n", err.msg);
  mlxrt_session_free(s);
  mlxrt_model_free(m);
  free(tokens);
  free(logits);
  free(glogits);
  free(greedy);
  return rc;
}
