/* mlxrt logits: float32 logits of every prompt position after one batched pass, and with
 * --decode N the logits of N greedy steps through the KV cache — for comparing engines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_args.h"
#include "cli_num.h"
#include "commands.h"
#include "gen_args.h"
#include "mlxrt.h"
#include "tools_write.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: mlxrt logits -m MODEL --tokens 2,5,17,... [-o OUT.safetensors] [-n|--decode N]\n"
          "                    [--backend auto|cpu|cuda] [-t THREADS] [--numerics float32|mlx-cpu]\n"
          "                    [--kv-k MODE]\n"
          "MODEL is a directory or a Hugging Face repo id (org/name) in the local HF cache.\n"
          "Writes 'logits' [positions, vocab] (float32) and, with --decode N, 'greedy' [N] (int32)\n"
          "and 'greedy_logits' [N, vocab]. Without -o, prints the argmax of each position.\n"
          "-n N, --decode N: greedy tokens to generate after the prompt (0, the default: none; -1,\n"
          "\"until a stop token\" in run and chat, is refused: logits has no stop token). The\n"
          "logits are held in memory: a request larger than the machine's memory is refused.\n");
}

static int argmax(const float *x, int n) {
  int b = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[b]) b = i;
  return b;
}

int cmd_logits(int argc, char **argv) {
  logits_args o;
  int r = logits_args_parse(&o, argc, argv);
  if (r == 1) usage(stdout);
  if (r) return r == 1 ? 0 : 2;
  const char *out = o.out;
  const int decode = o.decode;
  int32_t *tokens = o.tokens;
  const int64_t n = (int64_t)o.n_tokens;
  mlxrt_error err = {{0}};
  mlxrt_options opt = {o.backend, o.threads, 0, o.numerics, o.kv_k};
  char dir[4096];
  mlxrt_model *m = gen_args_model_dir("logits", o.model, dir, sizeof dir) ? NULL : mlxrt_model_load(dir, &opt, &err);
  int rc = 1;
  float *logits = NULL, *glogits = NULL;
  int32_t *greedy = NULL;
  mlxrt_session *s = NULL;
  if (!m) goto done;
  int64_t V = mlxrt_model_vocab_size(m);
  char what[64];
  if (decode) snprintf(what, sizeof what, "--decode %d", decode);
  else snprintf(what, sizeof what, "--tokens (%lld ids)", (long long)n);
  if (cli_check_memory("logits", what, "the logits", (double)(n + decode) * (double)V * sizeof(float))) {
    err.msg[0] = 0;
    goto done;
  }
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
  if (rc && err.msg[0]) cli_error("logits", "%s", err.msg);
  mlxrt_session_free(s);
  mlxrt_model_free(m);
  logits_args_free(&o);
  free(logits);
  free(glogits);
  free(greedy);
  return rc;
}
