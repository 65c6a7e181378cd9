/* mlxrt tokenize: encode text with a model's tokenizer.json and show the tokens, or decode ids.
 * Useful to compare with HF tokenizers by eye and to script checks. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/error.h"
#include "cli_args.h"
#include "cli_file.h"
#include "cli_num.h"
#include "commands.h"
#include "mlx/tokenizer.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: mlxrt tokenize -m MODEL|tokenizer.json [-p TEXT | -f FILE] [--ids] [--no-bos]\n"
          "       mlxrt tokenize -m MODEL|tokenizer.json --decode 1,2,3 [--skip-special]\n"
          "\n"
          "  -m, --model PATH   model directory (with tokenizer.json), a Hugging Face repo id\n"
          "                     (org/name) in the local HF cache, or a tokenizer.json\n"
          "  -p, --prompt TEXT  text to encode (- or no -p and no -f: read standard input)\n"
          "  -f, --file FILE    encode the contents of FILE (- is standard input); FILE must be\n"
          "                     a regular text file of at most 256 MiB without a NUL byte\n"
          "      --ids          print only the ids, comma-separated (feeds --decode)\n"
          "      --no-bos       do not add the post-processor's special tokens (<bos>)\n"
          "      --decode IDS   decode comma- or space-separated ids and print the text\n"
          "      --skip-special with --decode: drop special tokens (<bos>, <end_of_turn>, ...)\n"
          "  -v, --verbose      print the load time and token count to stderr\n");
}

/* Token text shown with escapes for control characters and bytes that are not UTF-8. */
static void print_token(const char *s, size_t n) {
  putchar('\'');
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\n') fputs("\\n", stdout);
    else if (c == '\t') fputs("\\t", stdout);
    else if (c == '\r') fputs("\\r", stdout);
    else if (c == '\\') fputs("\\\\", stdout);
    else if (c == '\'') fputs("\\'", stdout);
    else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
    else putchar(c);
  }
  putchar('\'');
}

int cmd_tokenize(int argc, char **argv) {
  tokenize_args o;
  int r = tokenize_args_parse(&o, argc, argv);
  if (r == 1) usage(stdout);
  if (r) return r == 1 ? 0 : 2;
  const char *model = o.model, *prompt = o.prompt;
  const int verbose = o.verbose;
  mlxrt_error err;
  /* a tokenizer.json is taken as it is; a folder or a repo id as every command takes MODEL */
  struct stat st;
  char dir[4096];
  if (stat(model, &st) || S_ISDIR(st.st_mode)) {
    if (gen_args_model_dir("tokenize", model, dir, sizeof dir)) {
      tokenize_args_free(&o);
      return 1;
    }
    model = dir;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  mx_tokenizer *tok = mx_tok_load(model, &err);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (!tok) {
    cli_error("tokenize", "%s", err.msg);
    tokenize_args_free(&o);
    return 1;
  }
  if (verbose)
    fprintf(stderr, "loaded %s: %d ids in %.0f ms\n", model, mx_tok_vocab_size(tok),
            ((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9) * 1e3);
  int rc = 1;
  int32_t *ids = NULL;
  size_t n = 0;
  char *text = NULL;
  size_t len = 0;
  if (o.decode_ids) {
    if (mx_tok_decode(tok, o.decode_ids, o.n_decode, o.skip_special, &text, &len, &err)) {
      cli_error("tokenize", "%s", err.msg);
      goto done;
    }
    fwrite(text, 1, len, stdout);
    putchar('\n');
    rc = 0;
    goto done;
  }
  if (prompt && strcmp(prompt, "-")) {
    len = strlen(prompt);
    text = malloc(len + 1);
    if (text) memcpy(text, prompt, len + 1);
    else cli_error("tokenize", "out of memory");
  } else {
    /* the same reader as run -f: standard input without -p or -f and for -p - */
    text = cli_read_text("tokenize", o.file ? o.file : "-", &len);
  }
  if (!text) goto done;
  if (mx_tok_encode(tok, text, len, o.add_bos, &ids, &n, &err)) {
    cli_error("tokenize", "%s", err.msg);
    goto done;
  }
  if (o.ids_only) {
    for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    putchar('\n');
  } else {
    for (size_t i = 0; i < n; i++) {
      size_t tn;
      const char *ts = mx_tok_id_to_token(tok, ids[i], &tn);
      printf("%7d  ", ids[i]);
      print_token(ts ? ts : "", ts ? tn : 0);
      putchar('\n');
    }
  }
  if (verbose) fprintf(stderr, "%zu tokens for %zu bytes\n", n, len);
  rc = 0;
done:
  free(ids);
  free(text);
  mx_tok_free(tok);
  tokenize_args_free(&o);
  return rc;
}
