/* JSON for the Jinja interpreter: the render context read into values (objects keep their
 * member order, integers stay ints as Python's json.loads keeps them) and the `tojson` filter
 * written as Python's json.dumps writes it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "mlx/jinja_internal.h"

typedef struct jp {
  jr *r;
  const char *s;
  size_t n, i;
  int depth;
} jp;

static int jp_fail(jp *p, const char *what) {
  return jj_fail(p->r, NULL, "context JSON: %s at byte %zu", what, p->i);
}

static void jp_ws(jp *p) {
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                         p->s[p->i] == '\r'))
    p->i++;
}

static int hex4(jp *p, uint32_t *v) {
  if (p->n - p->i < 4) return jp_fail(p, "truncated \\u escape");
  *v = 0;
  for (int k = 0; k < 4; k++) {
    char c = p->s[p->i++];
    int d = c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1;
    if (d < 0) return jp_fail(p, "bad \\u escape");
    *v = *v * 16 + (uint32_t)d;
  }
  return 0;
}

static int jp_string(jp *p, jv *out) {
  jsb b = {0};
  p->i++; /* the quote */
  for (;;) {
    if (p->i >= p->n) {
      free(b.p);
      return jp_fail(p, "unterminated string");
    }
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '"') {
      p->i++;
      break;
    }
    if (c < 0x20) {
      free(b.p);
      return jp_fail(p, "control character in a string");
    }
    if (c != '\\') {
      size_t k = mx_utf8_len((const unsigned char *)p->s + p->i, p->n - p->i);
      if (!k) {
        free(b.p);
        return jp_fail(p, "invalid UTF-8");
      }
      jsb_add(&b, p->s + p->i, k);
      p->i += k;
      continue;
    }
    p->i++;
    if (p->i >= p->n) {
      free(b.p);
      return jp_fail(p, "unterminated string");
    }
    char e = p->s[p->i++];
    const char *map = strchr("\"\"\\\\//b\bf\fn\nr\rt\t", e);
    if (e == 'u') {
      uint32_t v, lo;
      if (hex4(p, &v)) {
        free(b.p);
        return -1;
      }
      if (v >= 0xD800 && v <= 0xDBFF) {
        if (p->n - p->i < 6 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u') {
          free(b.p);
          return jp_fail(p, "unpaired surrogate");
        }
        p->i += 2;
        if (hex4(p, &lo)) {
          free(b.p);
          return -1;
        }
        if (lo < 0xDC00 || lo > 0xDFFF) {
          free(b.p);
          return jp_fail(p, "unpaired surrogate");
        }
        v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
      } else if (v >= 0xDC00 && v <= 0xDFFF) {
        free(b.p);
        return jp_fail(p, "unpaired surrogate");
      }
      char u[4];
      jsb_add(&b, u, jj_utf8_enc(v, u));
    } else if (map && ((map - "\"\"\\\\//b\bf\fn\nr\rt\t") % 2) == 0) {
      jsb_addc(&b, map[1]);
    } else {
      free(b.p);
      return jp_fail(p, "bad escape");
    }
  }
  return jv_sb_str(p->r, NULL, &b, out);
}

/* Digits without a decimal point, so strtod reads them the same in any locale. */
static int jp_number(jp *p, jv *out) {
  size_t st = p->i;
  int is_float = 0;
  if (p->i < p->n && p->s[p->i] == '-') p->i++;
  if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jp_fail(p, "bad number");
  if (p->s[p->i] == '0')
    p->i++;
  else
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
  size_t int_end = p->i, frac_st = p->i, frac_end = p->i;
  if (p->i < p->n && p->s[p->i] == '.') {
    is_float = 1;
    frac_st = ++p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    frac_end = p->i;
    if (frac_end == frac_st) return jp_fail(p, "bad number");
  }
  long exp10 = 0;
  if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
    is_float = 1;
    p->i++;
    int neg = 0;
    if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) neg = p->s[p->i++] == '-';
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return jp_fail(p, "bad number");
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
      if (exp10 < 100000) exp10 = exp10 * 10 + (p->s[p->i] - '0');
      p->i++;
    }
    if (neg) exp10 = -exp10;
  }
  char buf[128];
  size_t ni = int_end - st, nf = frac_end - frac_st;
  if (!is_float && ni < 19) {
    memcpy(buf, p->s + st, ni);
    buf[ni] = 0;
    *out = jv_int(strtoll(buf, NULL, 10));
    return 0;
  }
  /* long mantissas: keep 40 significant digits (more cannot change a double) */
  jsb m = {0};
  jsb_add(&m, p->s + st, ni);
  jsb_add(&m, p->s + frac_st, nf);
  if (m.oom) return jp_fail(p, "out of memory");
  size_t keep = m.n > 40 ? 40 : m.n;
  long drop = (long)(m.n - keep);
  snprintf(buf, sizeof buf, "%.*se%ld", (int)keep, m.p, exp10 - (long)nf + drop);
  free(m.p);
  *out = jv_float(strtod(buf, NULL)); /* an integer too long for int64 reads as a float */
  return 0;
}

static int jp_value(jp *p, jv *out);

static int jp_container(jp *p, jv *out) {
  int obj = p->s[p->i] == '{';
  if (++p->depth > 256) return jp_fail(p, "nesting too deep");
  p->i++;
  jv_list *l = obj ? NULL : jv_list_new(p->r, NULL, 0, 0);
  jv_dict *d = obj ? jv_dict_new(p->r, NULL, JV_DICT) : NULL;
  jv self = obj ? jv_obj_val(JV_DICT, d) : jv_obj_val(JV_LIST, l);
  if (!l && !d) return -1;
  jp_ws(p);
  if (p->i < p->n && p->s[p->i] == (obj ? '}' : ']')) {
    p->i++;
    goto done;
  }
  for (;;) {
    jv k = jv_undef(), v;
    jp_ws(p);
    if (obj) {
      if (p->i >= p->n || p->s[p->i] != '"') {
        jp_fail(p, "expected a member name");
        goto fail;
      }
      if (jp_string(p, &k)) goto fail;
      jp_ws(p);
      if (p->i >= p->n || p->s[p->i] != ':') {
        jv_decref(k);
        jp_fail(p, "expected ':'");
        goto fail;
      }
      p->i++;
    }
    if (jp_value(p, &v)) {
      jv_decref(k);
      goto fail;
    }
    if (obj ? jv_dict_set(p->r, NULL, d, k, v) : jv_list_push(p->r, NULL, l, v)) goto fail;
    jp_ws(p);
    if (p->i < p->n && p->s[p->i] == ',') {
      p->i++;
      continue;
    }
    if (p->i < p->n && p->s[p->i] == (obj ? '}' : ']')) {
      p->i++;
      break;
    }
    jp_fail(p, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    goto fail;
  }
done:
  p->depth--;
  *out = self;
  return 0;
fail:
  jv_decref(self);
  return -1;
}

static int jp_value(jp *p, jv *out) {
  jp_ws(p);
  if (p->i >= p->n) return jp_fail(p, "unexpected end");
  char c = p->s[p->i];
  if (c == '{' || c == '[') return jp_container(p, out);
  if (c == '"') return jp_string(p, out);
  if (c == '-' || (c >= '0' && c <= '9')) return jp_number(p, out);
  static const char *const words[] = {"true", "false", "null"};
  for (int k = 0; k < 3; k++) {
    size_t wl = strlen(words[k]);
    if (p->n - p->i >= wl && !memcmp(p->s + p->i, words[k], wl)) {
      p->i += wl;
      *out = k == 2 ? jv_none() : jv_bool(k == 0);
      return 0;
    }
  }
  return jp_fail(p, "unexpected character");
}

int jj_json_parse(jr *r, const char *text, size_t len, jv *out) {
  jp p = {r, text, len, 0, 0};
  *out = jv_undef();
  if (jp_value(&p, out)) {
    *out = jv_undef();
    return -1;
  }
  jp_ws(&p);
  if (p.i != p.n) {
    jv_decref(*out);
    *out = jv_undef();
    return jp_fail(&p, "trailing characters");
  }
  return 0;
}

/* ---- json.dumps ------------------------------------------------------------------------- */
static void dump_str(const char *s, size_t n, int ascii, jsb *b) {
  jsb_addc(b, '"');
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    char esc[16];
    if (c == '"' || c == '\\') {
      jsb_addc(b, '\\');
      jsb_addc(b, (char)c);
      i++;
    } else if (c < 0x20) {
      const char *m = c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
      if (m) {
        jsb_addz(b, m);
      } else {
        snprintf(esc, sizeof esc, "\\u%04x", c);
        jsb_addz(b, esc);
      }
      i++;
    } else if (c >= 0x80 && ascii) {
      size_t k;
      uint32_t u = jj_utf8_dec(s + i, n - i, &k);
      if (u >= 0x10000) {
        u -= 0x10000;
        snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
      } else {
        snprintf(esc, sizeof esc, "\\u%04x", u);
      }
      jsb_addz(b, esc);
      i += k;
    } else {
      jsb_addc(b, (char)c);
      i++;
    }
  }
  jsb_addc(b, '"');
}

static void newline_indent(const jj_json_opt *o, jsb *b, int level) {
  jsb_addc(b, '\n');
  for (int i = 0; i < level; i++) jsb_add(b, o->indent, o->indent_len);
}

/* A dict key as json.dumps writes it: strings as they are, numbers, booleans and None as
 * their JSON text. */
static int key_text(jr *r, const jnode *at, jv k, const jj_json_opt *o, jsb *b) {
  if (k.t == JV_STR) {
    dump_str(JV_STR_OF(k)->s, JV_STR_OF(k)->len, o->ensure_ascii, b);
    return 0;
  }
  if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
    jsb t = {0};
    if (jj_json_dump(r, at, k, o, &t, 0)) {
      free(t.p);
      return -1;
    }
    dump_str(t.p, t.n, 0, b);
    free(t.p);
    return 0;
  }
  return jj_fail(r, at, "tojson: keys must be str, int, float, bool or None, not %s",
                 jv_type_name(k));
}

static int key_order(jr *r, const jnode *at, jv_dict *d, size_t *idx) {
  for (size_t i = 0; i < d->n; i++) idx[i] = i;
  for (size_t i = 1; i < d->n; i++) /* insertion sort: stable, and dicts are small */
    for (size_t j = i; j > 0; j--) {
      int c;
      if (jv_cmp(r, at, d->k[idx[j - 1]], d->k[idx[j]], &c)) return -1;
      if (c <= 0) break;
      size_t t = idx[j];
      idx[j] = idx[j - 1];
      idx[j - 1] = t;
    }
  return 0;
}

int jj_json_dump(jr *r, const jnode *at, jv x, const jj_json_opt *o, jsb *b, int depth) {
  char num[64];
  if (depth > 200) return jj_fail(r, at, "tojson: value nested too deeply");
  if (b->n > JJ_MAX_OUTPUT) return jj_fail(r, at, "tojson: output too large");
  switch (x.t) {
  case JV_NONE: jsb_addz(b, "null"); return 0;
  case JV_BOOL: jsb_addz(b, x.u.i ? "true" : "false"); return 0;
  case JV_INT:
    snprintf(num, sizeof num, "%lld", (long long)x.u.i);
    jsb_addz(b, num);
    return 0;
  case JV_FLOAT:
    if (isnan(x.u.f))
      jsb_addz(b, "NaN");
    else if (isinf(x.u.f))
      jsb_addz(b, x.u.f < 0 ? "-Infinity" : "Infinity");
    else {
      jv_float_repr(x.u.f, num, sizeof num);
      jsb_addz(b, num);
    }
    return 0;
  case JV_STR: dump_str(JV_STR_OF(x)->s, JV_STR_OF(x)->len, o->ensure_ascii, b); return 0;
  case JV_LIST: {
    jv_list *l = JV_LIST_OF(x);
    if (l->gen) return jj_fail(r, at, "tojson: Object of type generator is not JSON serializable");
    if (!l->n) {
      jsb_addz(b, "[]");
      return 0;
    }
    jsb_addc(b, '[');
    for (size_t i = 0; i < l->n; i++) {
      if (i) jsb_add(b, o->item_sep, o->item_sep_len);
      if (o->indent) newline_indent(o, b, depth + 1);
      if (jj_json_dump(r, at, l->v[i], o, b, depth + 1)) return -1;
    }
    if (o->indent) newline_indent(o, b, depth);
    jsb_addc(b, ']');
    return 0;
  }
  case JV_DICT: {
    jv_dict *d = JV_DICT_OF(x);
    if (!d->n) {
      jsb_addz(b, "{}");
      return 0;
    }
    size_t *idx = malloc(d->n * sizeof *idx);
    if (!idx) return jj_fail(r, at, "out of memory");
    int rc = 0;
    if (o->sort_keys)
      rc = key_order(r, at, d, idx);
    else
      for (size_t i = 0; i < d->n; i++) idx[i] = i;
    if (!rc) jsb_addc(b, '{');
    for (size_t i = 0; !rc && i < d->n; i++) {
      if (i) jsb_add(b, o->item_sep, o->item_sep_len);
      if (o->indent) newline_indent(o, b, depth + 1);
      rc = key_text(r, at, d->k[idx[i]], o, b);
      if (!rc) jsb_add(b, o->key_sep, o->key_sep_len);
      if (!rc) rc = jj_json_dump(r, at, d->v[idx[i]], o, b, depth + 1);
    }
    free(idx);
    if (rc) return -1;
    if (o->indent) newline_indent(o, b, depth);
    jsb_addc(b, '}');
    return 0;
  }
  default:
    return jj_fail(r, at, "tojson: Object of type %s is not JSON serializable", jv_type_name(x));
  }
}
