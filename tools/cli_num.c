#include "cli_num.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

FILE *cli_err_stream;

const char *cli_long_value(const char *arg, char *name, size_t size) {
  if (strncmp(arg, "--", 2) || size == 0) return NULL;
  const char *eq = strchr(arg, '=');
  if (!eq) return NULL;
  size_t n = (size_t)(eq - arg);
  if (n >= size) n = size - 1;
  memcpy(name, arg, n);
  name[n] = 0;
  return eq + 1;
}

void cli_error(const char *cmd, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  FILE *f = cli_err_stream ? cli_err_stream : stderr;
  if (cmd) fprintf(f, "mlxrt %s: ", cmd);
  else fputs("mlxrt: ", f);
  /* a newline or an escape sequence in an argument must not break the one-line contract */
  for (const unsigned char *p = (const unsigned char *)msg; *p; p++)
    if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\x%02x", *p);
    else fputc(*p, f);
  fputc('\n', f);
  fflush(f);
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* [+-]?[0-9]+ and nothing else (strtoll alone would take leading blanks and stop early). */
static int parse_ll(const char *v, long long *x) {
  const char *p = v + (*v == '+' || *v == '-');
  if (!is_digit(*p)) return -1;
  char *end;
  errno = 0;
  long long r = strtoll(v, &end, 10);
  if (errno || *end) return -1;
  *x = r;
  return 0;
}

static int need_ll(const char *cmd, const char *flag, const char *v, long long lo, long long hi, long long *x) {
  if (parse_ll(v, x) || *x < lo || *x > hi) {
    cli_error(cmd, "%s expects an integer in %lld..%lld, got '%.64s'", flag, lo, hi, v);
    return -1;
  }
  return 0;
}

int cli_int(const char *cmd, const char *flag, const char *v, long long lo, long long hi, int *out) {
  long long x;
  if (need_ll(cmd, flag, v, lo, hi, &x)) return -1;
  *out = (int)x;
  return 0;
}

int cli_int64(const char *cmd, const char *flag, const char *v, long long lo, long long hi, int64_t *out) {
  long long x;
  if (need_ll(cmd, flag, v, lo, hi, &x)) return -1;
  *out = (int64_t)x;
  return 0;
}

/* [+-]?digits[.digits][(e|E)[+-]?digits]: no hex floats, no inf/nan, no blanks. */
static int plain_decimal(const char *p) {
  int digits = 0;
  p += *p == '+' || *p == '-';
  for (; is_digit(*p); p++) digits++;
  if (*p == '.')
    for (p++; is_digit(*p); p++) digits++;
  if (!digits) return 0;
  if (*p == 'e' || *p == 'E') {
    p++;
    p += *p == '+' || *p == '-';
    if (!is_digit(*p)) return 0;
    while (is_digit(*p)) p++;
  }
  return *p == 0;
}

int cli_double(const char *cmd, const char *flag, const char *v, double lo, double hi, double *out) {
  char *end;
  double x = 0;
  int ok = plain_decimal(v);
  if (ok) {
    errno = 0;
    x = strtod(v, &end);
    ok = !errno && !*end && isfinite(x) && x >= lo && x <= hi;
  }
  if (!ok) {
    cli_error(cmd, "%s expects a number in %g..%g, got '%.64s'", flag, lo, hi, v);
    return -1;
  }
  *out = x;
  return 0;
}

int cli_float(const char *cmd, const char *flag, const char *v, double lo, double hi, float *out) {
  double x;
  if (cli_double(cmd, flag, v, lo, hi, &x)) return -1;
  *out = (float)x;
  return 0;
}

static const char *skip_blank(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

int cli_int_list(const char *cmd, const char *flag, const char *v, long long lo, long long hi, size_t max_n,
                 int32_t **out, size_t *n) {
  size_t cap = 16, k = 0;
  int32_t *t = malloc(cap * sizeof *t);
  if (!t) {
    cli_error(cmd, "out of memory reading %s", flag);
    return -1;
  }
  const char *p = skip_blank(v);
  int bracket = *p == '[';
  p += bracket;
  for (;;) {
    p = skip_blank(p);
    const char *s = p;
    p += *p == '+' || *p == '-';
    while (is_digit(*p)) p++;
    char item[32];
    long long x;
    size_t len = (size_t)(p - s);
    if (len == 0 || len >= sizeof item) goto bad;
    memcpy(item, s, len);
    item[len] = 0;
    if (parse_ll(item, &x) || x < lo || x > hi) goto bad;
    if (max_n && k == max_n) {
      cli_error(cmd, "%s takes at most %zu values, got '%.64s'", flag, max_n, v);
      free(t);
      return -1;
    }
    if (k == cap) {
      int32_t *nt = realloc(t, (cap *= 2) * sizeof *nt);
      if (!nt) {
        cli_error(cmd, "out of memory reading %s", flag);
        free(t);
        return -1;
      }
      t = nt;
    }
    t[k++] = (int32_t)x;
    const char *after = p;
    p = skip_blank(p);
    if (*p == ',') {
      p++;
      continue;
    }
    if (bracket && *p == ']') {
      if (*skip_blank(p + 1)) goto bad;
      break;
    }
    if (!bracket && !*p) break;
    if (p > after && (is_digit(*p) || *p == '+' || *p == '-')) continue; /* blank-separated */
    goto bad;
  }
  *out = t;
  *n = k;
  return 0;
bad:
  cli_error(cmd, "%s expects comma-separated integers in %lld..%lld, got '%.64s'", flag, lo, hi, v);
  free(t);
  return -1;
}

uint64_t cli_phys_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

int cli_check_memory(const char *cmd, const char *what, const char *for_what, double bytes) {
  uint64_t have = cli_phys_memory();
  if (!have || bytes <= (double)have) return 0;
  cli_error(cmd, "%s needs %.1f GB for %s (this machine has %.1f GB)", what, bytes / 1e9, for_what,
            (double)have / 1e9);
  return -1;
}
