/* mlxrt tokenize: encode text with a model's tokenizer.json and show the tokens, or decode ids.
 * Useful to compare with HF tokenizers by eye and to script checks. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "commands.h"
#include "mlx/tokenizer.h"

static void usage(FILE *f) {
  fprintf(f,
          "usage: mlxrt tokenize -m DIR|tokenizer.json [-p TEXT | -f FILE] [--ids] [--no-bos]\n"
          "       mlxrt tokenize -m DIR|tokenizer.json --decode 1,2,3 [--skip-special]\n"
          "\n"
          "  -m, --model PATH   model directory (with tokenizer.json) or a tokenizer.json\n"
          "  -p, --prompt TEXT  text to encode (default: read standard input)\n"
          "  -f, --file FILE    encode the contents of FILE\n"
          "      --ids          print only the ids, comma-separated (feeds --decode)\n"
          "      --no-bos       do not add the post-processor's special tokens (<bos>)\n"
          "      --decode IDS   decode comma- or space-separated ids and print the text\n"
          "      --skip-special with --decode: drop special tokens (<bos>, <end_of_turn>, ...)\n"
          "  -v, --verbose      print the load time and token count to stderr\n");
}

static char *read_stream(FILE *f, size_t *len) {
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  for (;;) {
    if (n + 4096 > cap) {
      char *nb = realloc(buf, cap *= 2);
      if (!nb) {
        free(buf);
        return NULL;
      }
      buf = nb;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  buf[n] = 0;
  *len = n;
  return buf;
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

static int parse_id_list(const char *s, int32_t **ids, size_t *n) {
  size_t cap = 16;
  *n = 0;
  *ids = malloc(cap * sizeof **ids);
  if (!*ids) return -1;
  while (*s) {
    while (*s == ',' || *s == ' ' || *s == '\t' || *s == '\n' || *s == '[' || *s == ']') s++;
    if (!*s) break;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || errno || v < 0 || v > INT32_MAX) {
      fprintf(stderr, "mlxrt tokenize: --decode: \"%.20s\" is not a token id\n", s);
      return -1;
    }
    if (*n == cap) {
      int32_t *ni = realloc(*ids, (cap *= 2) * sizeof *ni);
      if (!ni) return -1;
      *ids = ni;
    }
    (*ids)[(*n)++] = (int32_t)v;
    s = end;
  }
  return 0;
}

int cmd_tokenize(int argc, char **argv) {
  const char *model = NULL, *prompt = NULL, *file = NULL, *decode = NULL;
  int ids_only = 0, add_bos = 1, skip_special = 0, verbose = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int has_val = i + 1 < argc;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_val) model = argv[++i];
    else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && has_val) prompt = argv[++i];
    else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_val) file = argv[++i];
    else if (!strcmp(a, "--decode") && has_val) decode = argv[++i];
    else if (!strcmp(a, "--ids")) ids_only = 1;
    else if (!strcmp(a, "--no-bos")) add_bos = 0;
    else if (!strcmp(a, "--skip-special")) skip_special = 1;
    else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) verbose = 1;
    else {
      static const char *const with_value[] = {"-m", "--model", "-p", "--prompt", "-f",
                                               "--file", "--decode"};
      const char *why = "unknown option";
      for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
        if (!strcmp(a, with_value[k])) why = "missing value after";
      fprintf(stderr, "mlxrt tokenize: %s '%s' (try 'mlxrt tokenize --help')\n", why, a);
      return 2;
    }
  }
  if (!model) {
    fprintf(stderr, "mlxrt tokenize: -m/--model is required (try 'mlxrt tokenize --help')\n");
    return 2;
  }
  if ((prompt != NULL) + (file != NULL) + (decode != NULL) > 1) {
    fprintf(stderr, "mlxrt tokenize: give only one of -p, -f and --decode\n");
    return 2;
  }
  mlxrt_error err;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  mx_tokenizer *tok = mx_tok_load(model, &err);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (!tok) {
    fprintf(stderr, "mlxrt tokenize: %s\n", err.msg);
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
  if (decode) {
    if (parse_id_list(decode, &ids, &n)) goto done;
    if (mx_tok_decode(tok, ids, n, skip_special, &text, &len, &err)) {
      fprintf(stderr, "mlxrt tokenize: %s\n", err.msg);
      goto done;
    }
    fwrite(text, 1, len, stdout);
    putchar('\n');
    rc = 0;
    goto done;
  }
  if (prompt) {
    len = strlen(prompt);
    text = malloc(len + 1);
    if (text) memcpy(text, prompt, len + 1);
  } else if (file) {
    text = mx_read_any_file(file, &len, &err);
    if (!text) {
      fprintf(stderr, "mlxrt tokenize: %s\n", err.msg);
      goto done;
    }
  } else {
    text = read_stream(stdin, &len);
  }
  if (!text) {
    fprintf(stderr, "mlxrt tokenize: out of memory reading the input\n");
    goto done;
  }
  if (mx_tok_encode(tok, text, len, add_bos, &ids, &n, &err)) {
    fprintf(stderr, "mlxrt tokenize: %s\n", err.msg);
    goto done;
  }
  if (ids_only) {
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
  return rc;
}
