/* The smallest program on the public API (include/mlxrt.h): loads a checkpoint, continues a
 * prompt with greedy tokens and prints the text. Against an installed mlxrt:
 *
 *   cc hello.c $(pkg-config --cflags --libs mlxrt) -o hello
 *   ./hello MODEL "The capital of France is" 8
 *
 * MODEL is a checkpoint folder or a Hugging Face repo id in the local HF cache. */
#include <mlxrt.h>
#include <stdio.h>
#include <stdlib.h>

static void print_text(void *user, const char *text, size_t len) {
  (void)user;
  fwrite(text, 1, len, stdout);
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: hello MODEL PROMPT [TOKENS]\n");
    return 2;
  }
  int n = argc == 4 ? atoi(argv[3]) : 16;
  if (n < 1) {
    fprintf(stderr, "hello: TOKENS must be a positive number\n");
    return 2;
  }
  mlxrt_error err = {{0}};
  char dir[4096];
  if (mlxrt_resolve_model(argv[1], dir, sizeof dir, &err)) {
    fprintf(stderr, "hello: %s\n", err.msg);
    return 1;
  }
  mlxrt_model *m = mlxrt_model_load(dir, NULL, &err); /* backend: $MLXRT_BACKEND, else auto */
  if (!m) {
    fprintf(stderr, "hello: %s\n", err.msg);
    return 1;
  }
  mlxrt_chat_options o = {0};
  o.use_template = 0; /* continue the text as it is, no chat turn around it */
  mlxrt_gen_params_default(&o.gen);
  o.gen.temperature = 0;
  o.gen.max_tokens = n;
  mlxrt_gen_stats st;
  int rc = 1;
  mlxrt_chat *c = mlxrt_chat_new(m, &o, &err);
  if (c && mlxrt_chat_turn(c, argv[2], print_text, NULL, &st, &err) == 0) {
    printf("\n");
    fprintf(stderr, "mlxrt %s (header %s): %lld tokens on the %s backend\n", mlxrt_version(), MLXRT_VERSION,
            (long long)st.gen_tokens, mlxrt_model_backend_name(m));
    rc = 0;
  } else {
    fprintf(stderr, "hello: %s\n", err.msg);
  }
  mlxrt_chat_free(c);
  mlxrt_model_free(m);
  return rc;
}
