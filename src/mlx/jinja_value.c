/* Values of the Jinja interpreter with Python's semantics: reference counting, truth,
 * equality and ordering, str() and repr() (floats as Python's shortest repr), len() and
 * iteration. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "mlx/jinja_internal.h"

/* ---- errors and budget ------------------------------------------------------------------ */
int jj_fail(jr *r, const jnode *at, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *name = r->t && r->t->name ? r->t->name : "template";
  if (at)
    mx_fail(r->err, "%s:%d:%d: %s", name, at->line, at->col, msg);
  else
    mx_fail(r->err, "%s: %s", name, msg);
  return -1;
}

int jj_work(jr *r, const jnode *at, size_t amount) {
  r->work += amount;
  if (r->work > JJ_MAX_WORK)
    return jj_fail(r, at, "the template does too much work (more than %zu steps and bytes)",
                   (size_t)JJ_MAX_WORK);
  return 0;
}


/* ---- objects ---------------------------------------------------------------------------- */
void jv_incref(jv x) {
  if (jv_is_obj(x) && x.u.o->rc >= 0) x.u.o->rc++;
}

static void obj_free(jv x) {
  jv_obj *o = x.u.o;
  switch (x.t) {
  case JV_LIST: {
    jv_list *l = (jv_list *)o;
    for (size_t i = 0; i < l->n; i++) jv_decref(l->v[i]);
    free(l->v);
    break;
  }
  case JV_DICT:
  case JV_NS: {
    jv_dict *d = (jv_dict *)o;
    for (size_t i = 0; i < d->n; i++) {
      jv_decref(d->k[i]);
      jv_decref(d->v[i]);
    }
    free(d->k);
    free(d->v);
    break;
  }
  case JV_FUNC: jv_decref(((jv_func *)o)->self); break;
  case JV_LOOP: jv_decref(((jv_loop *)o)->items); break;
  default: break;
  }
  free(o);
}

void jv_decref(jv x) {
  if (!jv_is_obj(x) || x.u.o->rc < 0) return;
  if (--x.u.o->rc == 0) obj_free(x);
}

static void *obj_alloc(jr *r, const jnode *at, size_t size, int kind) {
  jv_obj *o = calloc(1, size);
  if (!o) {
    jj_fail(r, at, "out of memory");
    return NULL;
  }
  o->rc = 1;
  o->kind = (uint8_t)kind;
  return o;
}

int jv_mkstr(jr *r, const jnode *at, const char *s, size_t n, jv *out) {
  if (n > JJ_MAX_OUTPUT)
    return jj_fail(r, at, "a string would exceed %u bytes", (unsigned)JJ_MAX_OUTPUT);
  if (jj_work(r, at, n)) return -1;
  jv_str *p = obj_alloc(r, at, sizeof *p + n + 1, JV_STR);
  if (!p) return -1;
  p->len = n;
  if (n) memcpy(p->s, s, n);
  p->s[n] = 0;
  *out = jv_obj_val(JV_STR, p);
  return 0;
}

int jv_sb_str(jr *r, const jnode *at, jsb *b, jv *out) {
  int rc;
  if (b->oom)
    rc = jj_fail(r, at, "out of memory");
  else
    rc = jv_mkstr(r, at, b->p ? b->p : "", b->n, out);
  free(b->p);
  b->p = NULL;
  b->n = b->cap = 0;
  return rc;
}

jv_list *jv_list_new(jr *r, const jnode *at, int tuple, size_t cap) {
  jv_list *l = obj_alloc(r, at, sizeof *l, JV_LIST);
  if (!l) return NULL;
  l->tuple = tuple;
  if (cap) {
    l->v = malloc(cap * sizeof *l->v);
    if (!l->v) {
      free(l);
      jj_fail(r, at, "out of memory");
      return NULL;
    }
    l->cap = cap;
  }
  return l;
}

int jv_list_push(jr *r, const jnode *at, jv_list *l, jv x) {
  if (l->n == l->cap) {
    if (l->n >= JJ_MAX_ITEMS) {
      jv_decref(x);
      return jj_fail(r, at, "a list would exceed %d items", JJ_MAX_ITEMS);
    }
    size_t cap = l->cap ? l->cap * 2 : 8;
    jv *v = realloc(l->v, cap * sizeof *v);
    if (!v) {
      jv_decref(x);
      return jj_fail(r, at, "out of memory");
    }
    l->v = v;
    l->cap = cap;
  }
  l->v[l->n++] = x;
  return jj_work(r, at, 1);
}

jv_dict *jv_dict_new(jr *r, const jnode *at, int kind) { return obj_alloc(r, at, sizeof(jv_dict), kind); }

const jv *jv_dict_get(const jv_dict *d, jv k) {
  for (size_t i = 0; i < d->n; i++)
    if (jv_eq(d->k[i], k)) return &d->v[i];
  return NULL;
}

const jv *jv_dict_gets(const jv_dict *d, const char *k, size_t n) {
  for (size_t i = 0; i < d->n; i++)
    if (d->k[i].t == JV_STR && JV_STR_OF(d->k[i])->len == n && !memcmp(JV_STR_OF(d->k[i])->s, k, n))
      return &d->v[i];
  return NULL;
}

int jv_dict_set(jr *r, const jnode *at, jv_dict *d, jv k, jv v) {
  for (size_t i = 0; i < d->n; i++)
    if (jv_eq(d->k[i], k)) {
      jv_decref(d->v[i]);
      jv_decref(k);
      d->v[i] = v;
      return 0;
    }
  if (d->n == d->cap) {
    size_t cap = d->cap ? d->cap * 2 : 8;
    jv *nk = realloc(d->k, cap * sizeof *nk);
    if (nk) d->k = nk;
    jv *nv = nk ? realloc(d->v, cap * sizeof *nv) : NULL;
    if (nv) d->v = nv;
    if (!nk || !nv || d->n >= JJ_MAX_ITEMS) {
      jv_decref(k);
      jv_decref(v);
      return jj_fail(r, at, "out of memory or a dict too large");
    }
    d->cap = cap;
  }
  d->k[d->n] = k;
  d->v[d->n] = v;
  d->n++;
  return jj_work(r, at, 1);
}

jv_func *jv_func_new(jr *r, const jnode *at, int id, jv self) {
  jv_func *f = obj_alloc(r, at, sizeof *f, JV_FUNC);
  if (!f) {
    jv_decref(self);
    return NULL;
  }
  f->id = id;
  f->self = self;
  return f;
}

/* ---- Python semantics ------------------------------------------------------------------- */
int jv_truthy(jv x) {
  switch (x.t) {
  case JV_UNDEF:
  case JV_NONE: return 0;
  case JV_BOOL:
  case JV_INT: return x.u.i != 0;
  case JV_FLOAT: return x.u.f != 0;
  case JV_STR: return JV_STR_OF(x)->len != 0;
  case JV_LIST: return JV_LIST_OF(x)->gen || JV_LIST_OF(x)->n != 0;
  case JV_DICT: return JV_DICT_OF(x)->n != 0;
  default: return 1;
  }
}

static int is_num(jv x) { return x.t == JV_BOOL || x.t == JV_INT || x.t == JV_FLOAT; }

int jv_eq(jv a, jv b) {
  if (is_num(a) && is_num(b)) {
    if (a.t != JV_FLOAT && b.t != JV_FLOAT) return a.u.i == b.u.i;
    double x = a.t == JV_FLOAT ? a.u.f : (double)a.u.i, y = b.t == JV_FLOAT ? b.u.f : (double)b.u.i;
    return x == y;
  }
  if (a.t != b.t) return 0;
  switch (a.t) {
  case JV_UNDEF:
  case JV_NONE: return 1;
  case JV_STR:
    return JV_STR_OF(a)->len == JV_STR_OF(b)->len &&
           !memcmp(JV_STR_OF(a)->s, JV_STR_OF(b)->s, JV_STR_OF(a)->len);
  case JV_LIST: {
    jv_list *x = JV_LIST_OF(a), *y = JV_LIST_OF(b);
    if (x->gen || y->gen) return x == y;
    if (x->tuple != y->tuple || x->n != y->n) return 0;
    for (size_t i = 0; i < x->n; i++)
      if (!jv_eq(x->v[i], y->v[i])) return 0;
    return 1;
  }
  case JV_DICT: {
    jv_dict *x = JV_DICT_OF(a), *y = JV_DICT_OF(b);
    if (x->n != y->n) return 0;
    for (size_t i = 0; i < x->n; i++) {
      const jv *o = jv_dict_get(y, x->k[i]);
      if (!o || !jv_eq(x->v[i], *o)) return 0;
    }
    return 1;
  }
  default: return a.u.o == b.u.o;
  }
}

const char *jv_type_name(jv x) {
  static const char *const names[] = {"Undefined", "NoneType", "bool", "int", "float", "str",
                                      "list", "dict", "Namespace", "function", "LoopContext"};
  if (x.t == JV_LIST && JV_LIST_OF(x)->tuple) return "tuple";
  if (x.t == JV_LIST && JV_LIST_OF(x)->gen) return "generator";
  return names[x.t];
}

int jv_cmp(jr *r, const jnode *at, jv a, jv b, int *res) {
  if (is_num(a) && is_num(b)) {
    if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
      *res = (a.u.i > b.u.i) - (a.u.i < b.u.i);
    } else {
      double x = a.t == JV_FLOAT ? a.u.f : (double)a.u.i;
      double y = b.t == JV_FLOAT ? b.u.f : (double)b.u.i;
      *res = (x > y) - (x < y);
    }
    return 0;
  }
  if (a.t == JV_STR && b.t == JV_STR) {
    jv_str *x = JV_STR_OF(a), *y = JV_STR_OF(b);
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, n); /* UTF-8 byte order is code point order */
    *res = c ? (c > 0 ? 1 : -1) : (x->len > y->len) - (x->len < y->len);
    return 0;
  }
  if (a.t == JV_LIST && b.t == JV_LIST && JV_LIST_OF(a)->tuple == JV_LIST_OF(b)->tuple) {
    jv_list *x = JV_LIST_OF(a), *y = JV_LIST_OF(b);
    for (size_t i = 0; i < x->n && i < y->n; i++) {
      if (jv_eq(x->v[i], y->v[i])) continue;
      return jv_cmp(r, at, x->v[i], y->v[i], res);
    }
    *res = (x->n > y->n) - (x->n < y->n);
    return 0;
  }
  return jj_fail(r, at, "comparison not supported between instances of '%s' and '%s'",
                 jv_type_name(a), jv_type_name(b));
}

/* ---- str() and repr() ------------------------------------------------------------------- */
/* Python's repr of a float: the shortest digits that read back to the same value, written
 * positionally for exponents -4..15 and in e-notation otherwise. Built from digits alone so the
 * C locale's decimal point never matters. */
void jv_float_repr(double f, char *buf, size_t cap) {
  if (isnan(f)) {
    snprintf(buf, cap, "nan");
    return;
  }
  if (isinf(f)) {
    snprintf(buf, cap, f < 0 ? "-inf" : "inf");
    return;
  }
  char tmp[64], digits[32];
  int nd = 0, exp10 = 0;
  for (int p = 1; p <= 17; p++) {
    snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
    nd = 0;
    char *e = strchr(tmp, 'e');
    for (char *c = tmp; c < e; c++)
      if (*c >= '0' && *c <= '9') digits[nd++] = *c;
    exp10 = atoi(e + 1);
    char chk[64];
    snprintf(chk, sizeof chk, "%s%.*se%d", f < 0 ? "-" : "", nd, digits, exp10 - nd + 1);
    if (strtod(chk, NULL) == f) break;
  }
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  digits[nd] = 0;
  char *o = buf;
  size_t left = cap;
#define PUT(...)                                      \
  do {                                                \
    int k_ = snprintf(o, left, __VA_ARGS__);          \
    if (k_ > 0 && (size_t)k_ < left) o += k_, left -= (size_t)k_; \
  } while (0)
  if (signbit(f)) PUT("-");
  if (exp10 >= -4 && exp10 < 16) {
    if (exp10 >= 0) {
      for (int i = 0; i <= exp10; i++) PUT("%c", i < nd ? digits[i] : '0');
      PUT(".");
      if (nd > exp10 + 1)
        PUT("%s", digits + exp10 + 1);
      else
        PUT("0");
    } else {
      PUT("0.");
      for (int i = 0; i < -exp10 - 1; i++) PUT("0");
      PUT("%s", digits);
    }
  } else {
    PUT("%c", digits[0]);
    if (nd > 1) PUT(".%s", digits + 1);
    PUT("e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
  }
#undef PUT
}

uint32_t jj_utf8_dec(const char *s, size_t n, size_t *clen) {
  const unsigned char *u = (const unsigned char *)s;
  uint32_t c = u[0];
  size_t k = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
  if (k > n) k = 1;
  if (k == 1) {
    *clen = 1;
    return c;
  }
  c &= 0xFF >> (k + 1);
  for (size_t i = 1; i < k; i++) {
    if ((u[i] & 0xC0) != 0x80) {
      *clen = 1;
      return u[0];
    }
    c = (c << 6) | (u[i] & 0x3F);
  }
  *clen = k;
  return c;
}

size_t jj_utf8_enc(uint32_t c, char *o) {
  if (c < 0x80) {
    o[0] = (char)c;
    return 1;
  }
  if (c < 0x800) {
    o[0] = (char)(0xC0 | (c >> 6));
    o[1] = (char)(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    o[0] = (char)(0xE0 | (c >> 12));
    o[1] = (char)(0x80 | ((c >> 6) & 0x3F));
    o[2] = (char)(0x80 | (c & 0x3F));
    return 3;
  }
  o[0] = (char)(0xF0 | (c >> 18));
  o[1] = (char)(0x80 | ((c >> 12) & 0x3F));
  o[2] = (char)(0x80 | ((c >> 6) & 0x3F));
  o[3] = (char)(0x80 | (c & 0x3F));
  return 4;
}

size_t jv_len_chars(const char *s, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (((unsigned char)s[i] & 0xC0) != 0x80) k++;
  return k;
}

/* Characters Python's repr escapes (str.isprintable false): controls, separators other than
 * the space, format characters, private use. */
static int py_unprintable(uint32_t c) {
  if (c < 0x20 || (c >= 0x7F && c <= 0xA0) || c == 0xAD) return 1;
  if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
      (c >= 0x205F && c <= 0x2064) || (c >= 0x2066 && c <= 0x206F) || c == 0x3000)
    return 1;
  if ((c >= 0x600 && c <= 0x605) || c == 0x61C || c == 0x6DD || c == 0x70F || c == 0x180E)
    return 1;
  if (c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) || (c >= 0xD800 && c <= 0xF8FF)) return 1;
  if ((c >= 0xE0000 && c <= 0xE007F) || c >= 0xF0000) return 1;
  return 0;
}

static void repr_str(const char *s, size_t n, jsb *b) {
  int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
  char q = has_sq && !has_dq ? '"' : '\'';
  jsb_addc(b, q);
  for (size_t i = 0; i < n;) {
    size_t k;
    uint32_t c = jj_utf8_dec(s + i, n - i, &k);
    char esc[16];
    if (c == (uint32_t)q || c == '\\') {
      jsb_addc(b, '\\');
      jsb_addc(b, (char)c);
    } else if (c == '\n') {
      jsb_add(b, "\\n", 2);
    } else if (c == '\r') {
      jsb_add(b, "\\r", 2);
    } else if (c == '\t') {
      jsb_add(b, "\\t", 2);
    } else if (py_unprintable(c)) {
      if (c < 0x100)
        snprintf(esc, sizeof esc, "\\x%02x", c);
      else if (c < 0x10000)
        snprintf(esc, sizeof esc, "\\u%04x", c);
      else
        snprintf(esc, sizeof esc, "\\U%08x", c);
      jsb_addz(b, esc);
    } else {
      jsb_add(b, s + i, k);
    }
    i += k;
  }
  jsb_addc(b, q);
}

static int str_or_repr(jr *r, const jnode *at, jv x, jsb *b, int repr, int depth) {
  char num[64];
  if (depth > 200) return jj_fail(r, at, "a value nested too deeply to print");
  switch (x.t) {
  case JV_UNDEF: jsb_addz(b, repr ? "Undefined" : ""); break;
  case JV_NONE: jsb_addz(b, "None"); break;
  case JV_BOOL: jsb_addz(b, x.u.i ? "True" : "False"); break;
  case JV_INT:
    snprintf(num, sizeof num, "%lld", (long long)x.u.i);
    jsb_addz(b, num);
    break;
  case JV_FLOAT:
    jv_float_repr(x.u.f, num, sizeof num);
    jsb_addz(b, num);
    break;
  case JV_STR:
    if (repr)
      repr_str(JV_STR_OF(x)->s, JV_STR_OF(x)->len, b);
    else
      jsb_add(b, JV_STR_OF(x)->s, JV_STR_OF(x)->len);
    break;
  case JV_LIST: {
    jv_list *l = JV_LIST_OF(x);
    if (l->gen) {
      jsb_addz(b, "<generator object>");
      break;
    }
    jsb_addc(b, l->tuple ? '(' : '[');
    for (size_t i = 0; i < l->n; i++) {
      if (i) jsb_add(b, ", ", 2);
      if (str_or_repr(r, at, l->v[i], b, 1, depth + 1)) return -1;
    }
    if (l->tuple && l->n == 1) jsb_addc(b, ',');
    jsb_addc(b, l->tuple ? ')' : ']');
    break;
  }
  case JV_DICT:
  case JV_NS: {
    jv_dict *d = JV_DICT_OF(x);
    if (x.t == JV_NS) jsb_addz(b, "<Namespace ");
    jsb_addc(b, '{');
    for (size_t i = 0; i < d->n; i++) {
      if (i) jsb_add(b, ", ", 2);
      if (str_or_repr(r, at, d->k[i], b, 1, depth + 1)) return -1;
      jsb_add(b, ": ", 2);
      if (str_or_repr(r, at, d->v[i], b, 1, depth + 1)) return -1;
    }
    jsb_addc(b, '}');
    if (x.t == JV_NS) jsb_addc(b, '>');
    break;
  }
  case JV_FUNC: jsb_addz(b, "<function>"); break;
  default: jsb_addz(b, "<LoopContext>"); break;
  }
  if (b->oom) return jj_fail(r, at, "out of memory");
  if (b->n > JJ_MAX_OUTPUT)
    return jj_fail(r, at, "a string would exceed %u bytes", (unsigned)JJ_MAX_OUTPUT);
  return 0;
}

int jv_str_of(jr *r, const jnode *at, jv x, jsb *b) { return str_or_repr(r, at, x, b, 0, 0); }
int jv_repr(jr *r, const jnode *at, jv x, jsb *b) { return str_or_repr(r, at, x, b, 1, 0); }

int jv_to_str(jr *r, const jnode *at, jv x, jv *out) {
  if (x.t == JV_STR) {
    *out = jv_ref(x);
    return 0;
  }
  jsb b = {0};
  if (jv_str_of(r, at, x, &b)) {
    free(b.p);
    return -1;
  }
  return jv_sb_str(r, at, &b, out);
}

int jv_len(jv x, int64_t *n) {
  switch (x.t) {
  case JV_UNDEF: *n = 0; return 0;
  case JV_STR: *n = (int64_t)jv_len_chars(JV_STR_OF(x)->s, JV_STR_OF(x)->len); return 0;
  case JV_LIST:
    if (JV_LIST_OF(x)->gen) return -1;
    *n = (int64_t)JV_LIST_OF(x)->n;
    return 0;
  case JV_DICT: *n = (int64_t)JV_DICT_OF(x)->n; return 0;
  default: return -1;
  }
}

int jv_iter_list(jr *r, const jnode *at, jv x, jv *out) {
  if (x.t == JV_LIST && JV_LIST_OF(x)->gen && JV_LIST_OF(x)->consumed) {
    x = jv_undef(); /* a generator yields its items once */
  } else if (x.t == JV_LIST) {
    JV_LIST_OF(x)->consumed = JV_LIST_OF(x)->gen;
    *out = jv_ref(x);
    return 0;
  }
  jv_list *l;
  if (x.t == JV_UNDEF) {
    l = jv_list_new(r, at, 0, 0);
  } else if (x.t == JV_DICT) {
    jv_dict *d = JV_DICT_OF(x);
    l = jv_list_new(r, at, 0, d->n);
    for (size_t i = 0; l && i < d->n; i++)
      if (jv_list_push(r, at, l, jv_ref(d->k[i]))) goto fail;
  } else if (x.t == JV_STR) {
    jv_str *s = JV_STR_OF(x);
    l = jv_list_new(r, at, 0, 0);
    for (size_t i = 0; l && i < s->len;) {
      size_t k;
      jv c;
      jj_utf8_dec(s->s + i, s->len - i, &k);
      if (jv_mkstr(r, at, s->s + i, k, &c) || jv_list_push(r, at, l, c)) goto fail;
      i += k;
    }
  } else {
    return jj_fail(r, at, "'%s' object is not iterable", jv_type_name(x));
  }
  if (!l) return -1;
  *out = jv_obj_val(JV_LIST, l);
  return 0;
fail:
  jv_decref(jv_obj_val(JV_LIST, l));
  return -1;
}

/* ---- text ------------------------------------------------------------------------------- */
int jj_isspace_at(const char *s, size_t n, size_t *clen) {
  uint32_t c = jj_utf8_dec(s, n, clen);
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t jj_rspace(const char *s, size_t n) {
  while (n > 0) {
    size_t st = n - 1, k;
    while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80 && n - st < 4) st--;
    if (!jj_isspace_at(s + st, n - st, &k) || st + k != n) break;
    n = st;
  }
  return n;
}

size_t jj_lspace(const char *s, size_t n) {
  size_t i = 0, k;
  while (i < n && jj_isspace_at(s + i, n - i, &k)) i += k;
  return i;
}

/* Case mapping for the scripts templates meet: ASCII, Latin-1, Latin Extended-A, Greek and
 * Cyrillic. Other characters keep their case. */
uint32_t jj_upper(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c == 0xB5) return 0x39C;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149) {
    int odd_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_lower ? (c & 1) == 0 : (c & 1) == 1) return c - 1;
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

uint32_t jj_lower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149) {
    int odd_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_lower ? (c & 1) == 1 : (c & 1) == 0) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

int jj_isalpha(uint32_t c) {
  if (c < 0x80) return (c | 32) >= 'a' && (c | 32) <= 'z';
  return jj_upper(c) != c || jj_lower(c) != c || (c >= 0x4E00 && c <= 0x9FFF) ||
         c == 0xAA || c == 0xBA || c == 0xDF;
}

int jv_html_escape(jr *r, const jnode *at, jv x, jv *out) {
  if (x.t == JV_STR && JV_STR_OF(x)->markup) {
    *out = jv_ref(x);
    return 0;
  }
  jsb t = {0}, b = {0};
  if (jv_str_of(r, at, x, &t)) {
    free(t.p);
    return -1;
  }
  for (size_t i = 0; i < t.n; i++) {
    char c = t.p[i];
    if (c == '&') jsb_addz(&b, "&amp;");
    else if (c == '<') jsb_addz(&b, "&lt;");
    else if (c == '>') jsb_addz(&b, "&gt;");
    else if (c == '"') jsb_addz(&b, "&#34;");
    else if (c == '\'') jsb_addz(&b, "&#39;");
    else jsb_addc(&b, c);
  }
  free(t.p);
  if (jv_sb_str(r, at, &b, out)) return -1;
  JV_STR_OF(*out)->markup = 1;
  return 0;
}
