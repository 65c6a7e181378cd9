/* mlxrt serve: options, loading, the slots and the HTTP daemon, and an orderly stop on
 * SIGINT/SIGTERM (the signals are taken by sigwait in the main thread: every other thread has
 * them blocked, so no handler and no global flag are needed). */
#include <cjson/cJSON.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_file.h"
#include "cli_num.h"
#include "commands.h"
#include "gen_args.h"
#include "serve.h"

static const char USAGE[] =
    "usage: mlxrt serve -m MODEL [--host ADDR] [--port N] [--api-key KEY | --api-key-file FILE]\n"
    "                   [--parallel N] [--cont-batching auto|on|off] [--queue N] [-c CTX]\n"
    "                   [--chat-template FILE]\n"
    "                   [--backend auto|cpu|cuda] [-t THREADS] [--max-body BYTES] [--timeout S]\n"
    "                   [--max-messages N] [--numerics float32|mlx-cpu] [--spec lookup|draft]\n"
    "                   [--draft-model DIR] [--draft-max K] [--spec-ngram N] [--kv-k MODE] [-v]\n"
    "An OpenAI-compatible HTTP server (docs/SERVER.md): POST /v1/chat/completions,\n"
    "POST /v1/completions, GET /v1/models, GET /health, GET /metrics.\n"
    "--host ADDR: address to bind (default 127.0.0.1; 0.0.0.0 for every interface).\n"
    "--port N: TCP port (default 8080; 0 picks a free one, printed at start).\n"
    "--api-key KEY: every endpoint but /health wants 'Authorization: Bearer KEY'.\n"
    "--parallel N: requests answered at once, each by its own slot and session (default 1).\n"
    "--cont-batching auto|on|off: on, the slots' sessions share one batched decoder and the\n"
    "slots answering at once decode as one batch, each weight read once per step for all of\n"
    "them; auto (default) = on where the backend's decoder batches (CUDA; the CPU but with\n"
    "--numerics mlx-cpu) and N > 1, unless --spec is given.\n"
    "--queue N: requests waiting for a slot before 503 (default 64).\n"
    "-c CTX: tokens per slot: prompt + answer (default 4096, at most the model's maximum).\n"
    "--chat-template FILE: a Jinja chat template used instead of the model's.\n"
    "--max-body BYTES: largest request body (default 8388608); --timeout S: idle connection\n"
    "timeout in seconds (default 600); --max-messages N: messages per request (default 4096).\n"
    "The model is listed under the name of its folder (GET /v1/models).\n" GEN_ARGS_SPEC_HELP GEN_ARGS_KVK_HELP;

/* The model's context limit from config.json (top level or text_config); 0 when unknown. */
static int64_t model_max_context(const char *dir) {
  char path[4200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  char buf[65536];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  cJSON *cfg = cJSON_Parse(buf);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "max_position_embeddings");
  if (!cJSON_IsNumber(v))
    v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cfg, "text_config"),
                                         "max_position_embeddings");
  int64_t max = cJSON_IsNumber(v) && v->valuedouble >= 1 ? (int64_t)v->valuedouble : 0;
  cJSON_Delete(cfg);
  return max;
}

static int parse_args(serve_config *c, int argc, char **argv, int *ctx_given) {
  memset(c, 0, sizeof *c);
  c->host = "127.0.0.1";
  c->port = 8080;
  c->parallel = 1;
  c->queue_max = 64;
  c->ctx = 4096;
  c->max_body = 8u << 20;
  c->timeout_s = 600;
  serve_limits_default(&c->limits);
  const char *key_file = NULL;
  for (int i = 1; i < argc; i++) {
    const char *f = argv[i];
    if (!strcmp(f, "-h") || !strcmp(f, "--help")) return 1;
    if (!strcmp(f, "-v") || !strcmp(f, "--verbose")) {
      c->verbose = 1;
      continue;
    }
    if (i + 1 >= argc) {
      cli_error("serve", "%s needs a value", f);
      return 2;
    }
    const char *v = argv[++i];
    int bad = 0;
    int64_t x = 0;
    if (gen_spec_option(&c->spec, f, v, "serve", &bad)) {
      if (bad) return 2;
      continue;
    }
    if (!strcmp(f, "-m") || !strcmp(f, "--model")) c->model_arg = v;
    else if (!strcmp(f, "--host")) c->host = v;
    else if (!strcmp(f, "--port")) bad = cli_int("serve", f, v, 0, 65535, &c->port);
    else if (!strcmp(f, "--api-key")) c->api_key = v;
    else if (!strcmp(f, "--api-key-file")) key_file = v;
    else if (!strcmp(f, "--parallel") || !strcmp(f, "-np")) bad = cli_int("serve", f, v, 1, 256, &c->parallel);
    else if (!strcmp(f, "--cont-batching")) {
      c->batching = v;
      if (strcmp(v, "auto") && strcmp(v, "on") && strcmp(v, "off")) {
        cli_error("serve", "--cont-batching %s: expected auto, on or off", v);
        return 2;
      }
    } else if (!strcmp(f, "--queue")) bad = cli_int("serve", f, v, 0, 1 << 16, &c->queue_max);
    else if (!strcmp(f, "-c") || !strcmp(f, "--ctx-size")) bad = cli_int64("serve", f, v, 2, 1 << 30, &c->ctx), *ctx_given = 1;
    else if (!strcmp(f, "--chat-template")) c->template_file = v;
    else if (!strcmp(f, "--backend")) c->backend = v;
    else if (!strcmp(f, "--numerics")) c->numerics = v;
    else if (!strcmp(f, "--kv-k")) bad = gen_args_check_kv_k(c->kv_k = v, "serve") != 0;
    else if (!strcmp(f, "-t") || !strcmp(f, "--threads")) bad = cli_int("serve", f, v, 0, 1024, &c->threads);
    else if (!strcmp(f, "--max-body")) bad = cli_int64("serve", f, v, 1024, (int64_t)1 << 34, &x), c->max_body = (size_t)x;
    else if (!strcmp(f, "--timeout")) bad = cli_int("serve", f, v, 1, 86400, &c->timeout_s);
    else if (!strcmp(f, "--max-messages")) bad = cli_int64("serve", f, v, 1, 1 << 20, &x), c->limits.max_messages = (size_t)x;
    else {
      cli_error("serve", "unknown option '%s' (try --help)", f);
      return 2;
    }
    if (bad) return 2;
  }
  if (!c->model_arg) {
    cli_error("serve", "-m/--model is required");
    return 2;
  }
  if (c->api_key && key_file) {
    cli_error("serve", "give --api-key or --api-key-file, not both");
    return 2;
  }
  if (key_file) {
    size_t n = 0;
    char *k = cli_read_text("serve", key_file, &n);
    if (!k) return 2;
    while (n && (k[n - 1] == '\n' || k[n - 1] == '\r' || k[n - 1] == ' ')) k[--n] = 0;
    if (!n) {
      free(k);
      cli_error("serve", "--api-key-file %s is empty", key_file);
      return 2;
    }
    c->api_key = k; /* (kept for the process's life; freed at exit) */
    c->key_owned = 1;
  }
  if (c->api_key && !c->api_key[0]) {
    cli_error("serve", "--api-key must not be empty");
    return 2;
  }
  if (gen_spec_finish(&c->spec, &c->spec_opt, "serve")) return 2;
  return gen_args_apply_numerics(c->numerics, &c->backend, "serve");
}

/* The folder's name: what clients put in "model". */
static void model_id_of(const char *dir, char *out, size_t n) {
  size_t len = strlen(dir);
  while (len > 1 && dir[len - 1] == '/') len--;
  size_t start = len;
  while (start > 0 && dir[start - 1] != '/') start--;
  snprintf(out, n, "%.*s", (int)(len - start), dir + start);
}

int cmd_serve(int argc, char **argv) {
  serve_server srv;
  memset(&srv, 0, sizeof srv);
  serve_config *c = &srv.cfg;
  int ctx_given = 0;
  int r = parse_args(c, argc, argv, &ctx_given);
  if (r == 1) fputs(USAGE, stdout);
  if (r) return r == 1 ? 0 : 2;
  int rc = 1;
  mlxrt_error err = {{0}};
  serve_http *http = NULL;
  if (c->template_file && !(c->template_text = cli_read_text("serve", c->template_file, NULL))) goto out;
  if (mlxrt_resolve_model(c->model_arg, c->model_dir, sizeof c->model_dir, &err)) {
    cli_error("serve", "%s", err.msg);
    goto out;
  }
  model_id_of(c->model_dir, c->model_id, sizeof c->model_id);
  int64_t max_ctx = model_max_context(c->model_dir);
  if (max_ctx > 0 && c->ctx > max_ctx) {
    if (ctx_given) {
      cli_error("serve", "-c %lld is more than the model's context of %lld tokens", (long long)c->ctx,
                (long long)max_ctx);
      goto out;
    }
    c->ctx = max_ctx;
  }
  mlxrt_options opt = {c->backend, c->threads, c->verbose, c->numerics, c->kv_k};
  if (!(srv.model = mlxrt_model_load(c->model_dir, &opt, &err))) {
    cli_error("serve", "%s", err.msg);
    goto out;
  }
  int32_t *probe = NULL;
  size_t n_probe = 0;
  if (mlxrt_tokenize(srv.model, "a", 1, 0, &probe, &n_probe, &err)) { /* a server needs the tokenizer */
    cli_error("serve", "%s", err.msg);
    goto out;
  }
  mlxrt_free(probe);
  if (gen_spec_load_draft(&c->spec, &opt, &c->spec_opt, "serve")) goto out;
  if (c->spec_opt.mode) { /* a speculative setting the slots cannot run fails now, not per request */
    mlxrt_session *s = mlxrt_session_new(srv.model, c->ctx, &err);
    int bad = !s || mlxrt_spec_check(s, &c->spec_opt, &err);
    mlxrt_session_free(s);
    if (bad) {
      cli_error("serve", "%s", err.msg);
      goto out;
    }
  }
  mlxrt_model_info info;
  mlxrt_model_get_info(srv.model, &info);
  if (c->batching && !strcmp(c->batching, "on")) {
    if (c->spec_opt.mode) {
      cli_error("serve", "--cont-batching on steps the slots on a batched decoder, which gives the last position's "
                "logits only: speculative decoding (--spec) cannot run there");
      goto out;
    }
    c->pooled = 1;
  } else c->pooled = (!c->batching || !strcmp(c->batching, "auto")) && info.batched_steps && c->parallel > 1 &&
                     !c->spec_opt.mode;
  if (strcmp(mlxrt_model_backend_name(srv.model), "cpu") == 0) {
    char what[96];
    snprintf(what, sizeof what, "--parallel %d x -c %lld", c->parallel, (long long)c->ctx);
    double kv = (double)mlxrt_model_kv_bytes_per_token(srv.model, c->ctx - 1) * c->parallel;
    if (cli_check_memory("serve", what, "the KV caches", kv)) goto out;
  }
  serve_metrics_init(&srv.metrics, c->parallel);
  /* Every connection is a short-lived thread, and glibc gives new threads arenas of their own (up
   * to 8 per core) that keep their freed memory: under load the resident size creeps up by
   * arenas, not by leaks. One arena keeps it flat; what a request allocates (its JSON, a chunk
   * per token) is small next to the model's work, so sharing the arena's lock costs nothing
   * measurable. */
  mallopt(M_ARENA_MAX, 1);
  /* every thread started from here on inherits the blocked signals; sigwait below takes them */
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, NULL);
  signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error return, not a death */
  if (!(srv.sched = serve_sched_new(&srv, &err))) {
    cli_error("serve", "%s", err.msg);
    goto metrics;
  }
  char why[512];
  if (!(http = serve_http_start(&srv, why, sizeof why))) {
    cli_error("serve", "%s", why);
    goto sched;
  }
  fprintf(stderr, "mlxrt serve: %s (%s backend) as '%s' on http://%s:%d (%d slot%s of %lld tokens%s)\n",
          c->model_dir, mlxrt_model_backend_name(srv.model), c->model_id, c->host, c->port, c->parallel,
          c->parallel > 1 ? "s" : "", (long long)c->ctx, c->pooled ? ", decoded as one batch" : "");
  int sig = 0;
  sigwait(&stop, &sig);
  fprintf(stderr, "mlxrt serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  serve_http_quiesce(http);
  rc = 0;
sched:
  serve_sched_stop(srv.sched); /* in-flight answers are cancelled, waiting requests get 503 */
  serve_http_stop(http);       /* their connections end */
  serve_sched_free(srv.sched);
metrics:
  serve_metrics_destroy(&srv.metrics);
out:
  mlxrt_model_free(srv.model);
  mlxrt_model_free(c->spec_opt.draft_model);
  free(c->template_text);
  if (c->key_owned) free((char *)c->api_key);
  return rc;
}
