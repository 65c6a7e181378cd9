/* Attribute and item access as jinja2's sandbox does them (x.name: an attribute, then an item;
 * x[key]: an item, then an attribute; mutating methods refused), the Python str/dict/list
 * methods templates call, the loop object, and the globals range, dict, namespace,
 * raise_exception and strftime_now. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "mlx/jinja_internal.h"

static int name_is(const char *s, size_t n, const char *w) { return strlen(w) == n && !memcmp(s, w, n); }

static const struct meth { int type; const char *name; int id; } METHODS[] = {
    {JV_STR, "strip", JF_S_STRIP}, {JV_STR, "lstrip", JF_S_LSTRIP}, {JV_STR, "rstrip", JF_S_RSTRIP},
    {JV_STR, "split", JF_S_SPLIT}, {JV_STR, "rsplit", JF_S_RSPLIT},
    {JV_STR, "startswith", JF_S_STARTSWITH}, {JV_STR, "endswith", JF_S_ENDSWITH},
    {JV_STR, "upper", JF_S_UPPER}, {JV_STR, "lower", JF_S_LOWER}, {JV_STR, "title", JF_S_TITLE},
    {JV_STR, "capitalize", JF_S_CAPITALIZE}, {JV_STR, "replace", JF_S_REPLACE},
    {JV_STR, "find", JF_S_FIND}, {JV_STR, "rfind", JF_S_RFIND}, {JV_STR, "count", JF_S_COUNT},
    {JV_STR, "format", JF_S_FORMAT}, {JV_STR, "join", JF_S_JOIN},
    {JV_STR, "splitlines", JF_S_SPLITLINES}, {JV_STR, "isdigit", JF_S_ISDIGIT},
    {JV_STR, "isalpha", JF_S_ISALPHA}, {JV_STR, "isspace", JF_S_ISSPACE},
    {JV_STR, "isupper", JF_S_ISUPPER}, {JV_STR, "islower", JF_S_ISLOWER},
    {JV_STR, "isalnum", JF_S_ISALNUM}, {JV_STR, "index", JF_S_INDEX}, {JV_STR, "zfill", JF_S_ZFILL},
    {JV_DICT, "items", JF_D_ITEMS}, {JV_DICT, "keys", JF_D_KEYS}, {JV_DICT, "values", JF_D_VALUES},
    {JV_DICT, "get", JF_D_GET}, {JV_LIST, "index", JF_L_INDEX}, {JV_LIST, "count", JF_L_COUNT},
    {JV_LIST, "append", JF_UNSAFE}, {JV_LIST, "pop", JF_UNSAFE}, {JV_LIST, "extend", JF_UNSAFE},
    {JV_LIST, "insert", JF_UNSAFE}, {JV_LIST, "remove", JF_UNSAFE}, {JV_LIST, "sort", JF_UNSAFE},
    {JV_LIST, "reverse", JF_UNSAFE}, {JV_LIST, "clear", JF_UNSAFE},
    {JV_DICT, "pop", JF_UNSAFE}, {JV_DICT, "popitem", JF_UNSAFE}, {JV_DICT, "update", JF_UNSAFE},
    {JV_DICT, "setdefault", JF_UNSAFE}, {JV_DICT, "clear", JF_UNSAFE}};

int jj_method_id(int type, const char *name, size_t n) {
  if (type == JV_LIST || type == JV_DICT || type == JV_STR)
    for (size_t k = 0; k < sizeof METHODS / sizeof *METHODS; k++)
      if (METHODS[k].type == type && name_is(name, n, METHODS[k].name)) return METHODS[k].id;
  return -1;
}

static int bound(jr *r, const jnode *at, int id, jv self, jv *out) {
  jv_func *f = jv_func_new(r, at, id, jv_ref(self));
  if (!f) return -1;
  *out = jv_obj_val(JV_FUNC, f);
  return 0;
}

static int loop_attr(jr *r, const jnode *at, jv_loop *lp, const char *name, size_t n, jv *out) {
  jv_list *l = JV_LIST_OF(lp->items);
  int64_t i = (int64_t)lp->i, len = (int64_t)l->n;
  if (name_is(name, n, "index")) *out = jv_int(i + 1);
  else if (name_is(name, n, "index0")) *out = jv_int(i);
  else if (name_is(name, n, "revindex")) *out = jv_int(len - i);
  else if (name_is(name, n, "revindex0")) *out = jv_int(len - i - 1);
  else if (name_is(name, n, "first")) *out = jv_bool(i == 0);
  else if (name_is(name, n, "last")) *out = jv_bool(i == len - 1);
  else if (name_is(name, n, "length")) *out = jv_int(len);
  else if (name_is(name, n, "depth")) *out = jv_int(lp->depth);
  else if (name_is(name, n, "depth0")) *out = jv_int(lp->depth - 1);
  else if (name_is(name, n, "previtem")) *out = i > 0 ? jv_ref(l->v[i - 1]) : jv_undef();
  else if (name_is(name, n, "nextitem")) *out = i + 1 < len ? jv_ref(l->v[i + 1]) : jv_undef();
  else if (name_is(name, n, "cycle") || name_is(name, n, "changed"))
    return bound(r, at, name_is(name, n, "cycle") ? JF_LOOP_CYCLE : JF_LOOP_CHANGED,
                 jv_obj_val(JV_LOOP, lp), out);
  else *out = jv_undef();
  return 0;
}

int jj_getattr(jr *r, const jnode *at, jv obj, const char *name, size_t n, jv *out) {
  *out = jv_undef();
  if (obj.t == JV_UNDEF)
    return jj_fail(r, at, "attribute '%.*s' of an undefined value", (int)n, name);
  if (obj.t == JV_LOOP) return loop_attr(r, at, (jv_loop *)obj.u.o, name, n, out);
  if (obj.t == JV_NS) {
    const jv *v = jv_dict_gets(JV_DICT_OF(obj), name, n);
    if (v) *out = jv_ref(*v);
    return 0;
  }
  int id = jj_method_id(obj.t, name, n);
  if (id >= 0) return bound(r, at, id, obj, out);
  if (obj.t == JV_DICT) {
    const jv *v = jv_dict_gets(JV_DICT_OF(obj), name, n);
    if (v) *out = jv_ref(*v);
  }
  return 0;
}

int jj_getitem(jr *r, const jnode *at, jv obj, jv key, jv *out) {
  *out = jv_undef();
  if (obj.t == JV_UNDEF) return jj_fail(r, at, "subscript of an undefined value");
  if (obj.t == JV_DICT) {
    const jv *v = jv_dict_get(JV_DICT_OF(obj), key);
    if (v) {
      *out = jv_ref(*v);
      return 0;
    }
  } else if ((obj.t == JV_LIST || obj.t == JV_STR) && (key.t == JV_INT || key.t == JV_BOOL)) {
    int64_t len, i = key.u.i;
    jv_len(obj, &len);
    if (i < 0) i += len;
    if (i < 0 || i >= len) return 0;
    if (obj.t == JV_LIST) {
      *out = jv_ref(JV_LIST_OF(obj)->v[i]);
      return 0;
    }
    jv_str *s = JV_STR_OF(obj);
    size_t off = 0, k = 0;
    for (int64_t c = 0; c < i; c++) {
      jj_utf8_dec(s->s + off, s->len - off, &k);
      off += k;
    }
    jj_utf8_dec(s->s + off, s->len - off, &k);
    return jv_mkstr(r, at, s->s + off, k, out);
  }
  if (key.t == JV_STR) return jj_getattr(r, at, obj, JV_STR_OF(key)->s, JV_STR_OF(key)->len, out);
  return 0;
}

/* ---- arguments -------------------------------------------------------------------------- */
int jj_bind(jr *r, const jnode *at, const char *fname, const char *const *params, size_t np,
            jv *args, size_t nargs, jkw *kw, size_t nkw, jv *slot, int *have) {
  if (nargs > np) return jj_fail(r, at, "%s() takes at most %zu argument(s), %zu given", fname, np, nargs);
  for (size_t i = 0; i < np; i++) {
    slot[i] = i < nargs ? args[i] : jv_undef();
    have[i] = i < nargs;
  }
  for (size_t k = 0; k < nkw; k++) {
    size_t i = 0;
    while (i < np && !name_is(kw[k].name, kw[k].len, params[i])) i++;
    if (i == np)
      return jj_fail(r, at, "%s() got an unexpected keyword argument '%.*s'", fname, (int)kw[k].len, kw[k].name);
    if (have[i]) return jj_fail(r, at, "%s() got multiple values for argument '%s'", fname, params[i]);
    slot[i] = kw[k].v;
    have[i] = 1;
  }
  return 0;
}

/* ---- str methods ------------------------------------------------------------------------ */
static int in_chars(const char *set, size_t n, const char *c, size_t k) {
  for (size_t i = 0; i < n;) {
    size_t m;
    jj_utf8_dec(set + i, n - i, &m);
    if (m == k && !memcmp(set + i, c, k)) return 1;
    i += m;
  }
  return 0;
}

/* str.strip family: which = 1 left, 2 right, 3 both. */
static int strip(jr *r, const jnode *at, jv_str *s, jv chars, int which, jv *out) {
  size_t a = 0, b = s->len;
  if (chars.t == JV_STR) {
    jv_str *cs = JV_STR_OF(chars);
    while ((which & 1) && a < b) {
      size_t k;
      jj_utf8_dec(s->s + a, b - a, &k);
      if (!in_chars(cs->s, cs->len, s->s + a, k)) break;
      a += k;
    }
    while ((which & 2) && b > a) {
      size_t st = b - 1, k;
      while (st > a && ((unsigned char)s->s[st] & 0xC0) == 0x80) st--;
      jj_utf8_dec(s->s + st, b - st, &k);
      if (!in_chars(cs->s, cs->len, s->s + st, b - st)) break;
      b = st;
    }
  } else if (chars.t == JV_NONE || chars.t == JV_UNDEF) {
    if (which & 1) a = jj_lspace(s->s, s->len);
    if ((which & 2) && b > a) b = a + jj_rspace(s->s + a, b - a);
  } else {
    return jj_fail(r, at, "strip arg must be None or str");
  }
  return jv_mkstr(r, at, s->s + a, b - a, out);
}

static int push_str(jr *r, const jnode *at, jv_list *l, const char *s, size_t n) {
  jv x;
  return jv_mkstr(r, at, s, n, &x) || jv_list_push(r, at, l, x);
}

static int split(jr *r, const jnode *at, jv_str *s, jv sep, int64_t maxsplit, int right, jv *out) {
  jv_list *l = jv_list_new(r, at, 0, 0);
  if (!l) return -1;
  *out = jv_obj_val(JV_LIST, l);
  const char *p = s->s;
  size_t n = s->len;
  if (sep.t == JV_STR) {
    jv_str *d = JV_STR_OF(sep);
    if (!d->len) return jj_fail(r, at, "empty separator");
    if (!right) {
      size_t st = 0;
      for (size_t i = 0; i + d->len <= n && maxsplit != 0;) {
        if (!memcmp(p + i, d->s, d->len)) {
          if (push_str(r, at, l, p + st, i - st)) return -1;
          i += d->len;
          st = i;
          maxsplit--;
        } else {
          i++;
        }
      }
      return push_str(r, at, l, p + st, n - st);
    }
    /* from the right: collect pieces backwards, then reverse */
    size_t end = n;
    for (size_t i = n; i >= d->len && maxsplit != 0;) {
      if (!memcmp(p + i - d->len, d->s, d->len)) {
        if (push_str(r, at, l, p + i, end - i)) return -1;
        i -= d->len;
        end = i;
        maxsplit--;
      } else {
        i--;
      }
    }
    if (push_str(r, at, l, p, end)) return -1;
  } else if (sep.t == JV_NONE || sep.t == JV_UNDEF) {
    if (!right) {
      size_t i = jj_lspace(p, n);
      while (i < n) {
        size_t st = i, k;
        if (maxsplit == 0) return push_str(r, at, l, p + st, n - st); /* the rest as is */
        while (i < n && !jj_isspace_at(p + i, n - i, &k)) i += k;
        if (push_str(r, at, l, p + st, i - st)) return -1;
        maxsplit--;
        i += jj_lspace(p + i, n - i);
      }
      return 0;
    }
    size_t e = jj_rspace(p, n);
    while (e > 0) {
      if (maxsplit == 0) { /* the rest as is */
        if (push_str(r, at, l, p, e)) return -1;
        break;
      }
      size_t b = e;
      while (b > 0) {
        size_t k, c = b - 1;
        while (c > 0 && ((unsigned char)p[c] & 0xC0) == 0x80) c--;
        if (jj_isspace_at(p + c, b - c, &k)) break;
        b = c;
      }
      if (push_str(r, at, l, p + b, e - b)) return -1;
      maxsplit--;
      e = jj_rspace(p, b);
    }
  } else {
    return jj_fail(r, at, "must be str or None, not %s", jv_type_name(sep));
  }
  for (size_t i = 0, j = l->n ? l->n - 1 : 0; i < j; i++, j--) {
    jv t = l->v[i];
    l->v[i] = l->v[j];
    l->v[j] = t;
  }
  return 0;
}

static int case_map(jr *r, const jnode *at, jv_str *s, int mode, jv *out) {
  /* mode 0 upper, 1 lower, 2 Python title, 3 capitalize */
  jsb b = {0};
  int prev_cased = 0;
  for (size_t i = 0; i < s->len;) {
    size_t k;
    uint32_t c = jj_utf8_dec(s->s + i, s->len - i, &k), m = c;
    if (mode == 0) m = jj_upper(c);
    else if (mode == 1) m = jj_lower(c);
    else if (mode == 2) m = prev_cased ? jj_lower(c) : jj_upper(c);
    else m = i == 0 ? jj_upper(c) : jj_lower(c);
    prev_cased = jj_isalpha(c);
    char u[4];
    if (m == c) jsb_add(&b, s->s + i, k);
    else jsb_add(&b, u, jj_utf8_enc(m, u));
    i += k;
  }
  return jv_sb_str(r, at, &b, out);
}

/* Code point index of a byte offset. */
static int64_t cp_index(const char *s, size_t off) { return (int64_t)jv_len_chars(s, off); }

static int str_format(jr *r, const jnode *at, jv_str *f, jv *args, size_t nargs, jkw *kw, size_t nkw, jv *out) {
  jsb b = {0};
  size_t auto_i = 0;
  for (size_t i = 0; i < f->len; i++) {
    char c = f->s[i];
    if (c == '}' && i + 1 < f->len && f->s[i + 1] == '}') {
      jsb_addc(&b, '}');
      i++;
      continue;
    }
    if (c != '{') {
      jsb_addc(&b, c);
      continue;
    }
    if (i + 1 < f->len && f->s[i + 1] == '{') {
      jsb_addc(&b, '{');
      i++;
      continue;
    }
    const char *end = memchr(f->s + i, '}', f->len - i);
    if (!end) {
      free(b.p);
      return jj_fail(r, at, "format: single '{' encountered");
    }
    const char *field = f->s + i + 1;
    size_t fl = (size_t)(end - field);
    if (memchr(field, ':', fl) || memchr(field, '!', fl) || memchr(field, '.', fl) || memchr(field, '[', fl)) {
      free(b.p);
      return jj_fail(r, at, "unsupported: str.format field '{%.*s}'", (int)(fl > 40 ? 40 : fl), field);
    }
    jv v = jv_undef();
    int found = 0;
    if (fl == 0 || (field[0] >= '0' && field[0] <= '9')) {
      size_t idx = fl == 0 ? auto_i++ : (size_t)strtoul(field, NULL, 10);
      if (idx < nargs) v = args[idx], found = 1;
    } else {
      for (size_t k = 0; k < nkw; k++)
        if (kw[k].len == fl && !memcmp(kw[k].name, field, fl)) v = kw[k].v, found = 1;
    }
    if (!found) {
      free(b.p);
      return jj_fail(r, at, "format: no argument for '{%.*s}'", (int)(fl > 40 ? 40 : fl), field);
    }
    if (jv_str_of(r, at, v, &b)) {
      free(b.p);
      return -1;
    }
    i = (size_t)(end - f->s);
  }
  return jv_sb_str(r, at, &b, out);
}

static int str_pred(jv_str *s, int id) {
  int any = 0, cased_upper = 0, cased_lower = 0;
  for (size_t i = 0; i < s->len;) {
    size_t k;
    uint32_t c = jj_utf8_dec(s->s + i, s->len - i, &k);
    int digit = c >= '0' && c <= '9', alpha = jj_isalpha(c);
    if (id == JF_S_ISDIGIT && !digit) return 0;
    if (id == JF_S_ISALPHA && !alpha) return 0;
    if (id == JF_S_ISALNUM && !alpha && !digit) return 0;
    if (id == JF_S_ISSPACE && !jj_isspace_at(s->s + i, s->len - i, &k)) return 0;
    if (jj_upper(c) != c) cased_lower = 1;
    if (jj_lower(c) != c) cased_upper = 1;
    any = 1;
    i += k;
  }
  if (id == JF_S_ISUPPER) return cased_upper && !cased_lower;
  if (id == JF_S_ISLOWER) return cased_lower && !cased_upper;
  return any;
}

static int str_method(jr *r, const jnode *at, jv_func *f, jv *args, size_t nargs, jkw *kw, size_t nkw, jv *out) {
  jv_str *s = JV_STR_OF(f->self);
  jv a[3];
  int have[3];
  static const char *const p_strip[] = {"chars"}, *const p_split[] = {"sep", "maxsplit"},
                           *const p_with[] = {"prefix", "start", "end"},
                           *const p_repl[] = {"old", "new", "count"},
                           *const p_find[] = {"sub", "start", "end"}, *const p_one[] = {"iterable"},
                           *const p_zfill[] = {"width"};
  switch (f->id) {
  case JF_S_STRIP:
  case JF_S_LSTRIP:
  case JF_S_RSTRIP:
    if (jj_bind(r, at, "strip", p_strip, 1, args, nargs, kw, nkw, a, have)) return -1;
    return strip(r, at, s, a[0], f->id == JF_S_STRIP ? 3 : f->id == JF_S_LSTRIP ? 1 : 2, out);
  case JF_S_SPLIT:
  case JF_S_RSPLIT:
    if (jj_bind(r, at, "split", p_split, 2, args, nargs, kw, nkw, a, have)) return -1;
    if (have[1] && a[1].t != JV_INT) return jj_fail(r, at, "split: maxsplit must be an integer");
    return split(r, at, s, a[0], have[1] ? a[1].u.i : -1, f->id == JF_S_RSPLIT, out);
  case JF_S_STARTSWITH:
  case JF_S_ENDSWITH: {
    if (jj_bind(r, at, "startswith", p_with, 3, args, nargs, kw, nkw, a, have)) return -1;
    if (have[1] || have[2]) return jj_fail(r, at, "unsupported: startswith/endswith with start or end");
    jv_list one = {{-1, JV_LIST}, 1, 0, 0, 1, 1, &a[0]};
    jv_list *cands = a[0].t == JV_LIST && JV_LIST_OF(a[0])->tuple ? JV_LIST_OF(a[0]) : &one;
    int res = 0;
    for (size_t i = 0; i < cands->n; i++) {
      jv c = cands->v[i];
      if (c.t != JV_STR) return jj_fail(r, at, "startswith/endswith takes a str or a tuple of str, not %s", jv_type_name(c));
      jv_str *p = JV_STR_OF(c);
      if (p->len <= s->len &&
          !memcmp(f->id == JF_S_STARTSWITH ? s->s : s->s + s->len - p->len, p->s, p->len))
        res = 1;
    }
    *out = jv_bool(res);
    return 0;
  }
  case JF_S_UPPER:
  case JF_S_LOWER:
  case JF_S_TITLE:
  case JF_S_CAPITALIZE:
    if (nargs || nkw) return jj_fail(r, at, "the method takes no arguments");
    return case_map(r, at, s, f->id == JF_S_UPPER ? 0 : f->id == JF_S_LOWER ? 1 : f->id == JF_S_TITLE ? 2 : 3, out);
  case JF_S_REPLACE: {
    if (jj_bind(r, at, "replace", p_repl, 3, args, nargs, kw, nkw, a, have)) return -1;
    if (a[0].t != JV_STR || a[1].t != JV_STR) return jj_fail(r, at, "replace() arguments must be str");
    int64_t count = have[2] && a[2].t == JV_INT ? a[2].u.i : -1;
    jv_str *o = JV_STR_OF(a[0]), *nw = JV_STR_OF(a[1]);
    jsb b = {0};
    if (!o->len) {
      for (size_t i = 0; i <= s->len;) {
        if (count != 0) jsb_add(&b, nw->s, nw->len), count--;
        if (i == s->len) break;
        size_t k;
        jj_utf8_dec(s->s + i, s->len - i, &k);
        jsb_add(&b, s->s + i, k);
        i += k;
        if (b.n > JJ_MAX_OUTPUT) break;
      }
    } else {
      size_t i = 0;
      while (i < s->len) {
        if (count != 0 && i + o->len <= s->len && !memcmp(s->s + i, o->s, o->len)) {
          jsb_add(&b, nw->s, nw->len);
          i += o->len;
          count--;
        } else {
          jsb_addc(&b, s->s[i++]);
        }
        if (b.n > JJ_MAX_OUTPUT) break;
      }
    }
    if (b.n > JJ_MAX_OUTPUT) {
      free(b.p);
      return jj_fail(r, at, "a string would exceed %u bytes", (unsigned)JJ_MAX_OUTPUT);
    }
    return jv_sb_str(r, at, &b, out);
  }
  case JF_S_FIND:
  case JF_S_RFIND:
  case JF_S_INDEX:
  case JF_S_COUNT: {
    if (jj_bind(r, at, "find", p_find, 3, args, nargs, kw, nkw, a, have)) return -1;
    if (a[0].t != JV_STR) return jj_fail(r, at, "must be str, not %s", jv_type_name(a[0]));
    if (have[1] || have[2]) return jj_fail(r, at, "unsupported: find/count with start or end");
    jv_str *sub = JV_STR_OF(a[0]);
    int64_t pos = -1, count = 0;
    if (f->id == JF_S_COUNT) {
      if (!sub->len) {
        *out = jv_int((int64_t)jv_len_chars(s->s, s->len) + 1);
        return 0;
      }
      for (size_t i = 0; i + sub->len <= s->len;)
        if (!memcmp(s->s + i, sub->s, sub->len)) count++, i += sub->len;
        else i++;
      *out = jv_int(count);
      return 0;
    }
    if (sub->len <= s->len) {
      if (f->id == JF_S_RFIND) {
        for (size_t i = s->len - sub->len + 1; i-- > 0;)
          if (!memcmp(s->s + i, sub->s, sub->len)) {
            pos = cp_index(s->s, i);
            break;
          }
      } else {
        const char *hit = memmem(s->s, s->len, sub->s, sub->len);
        if (hit || !sub->len) pos = hit ? cp_index(s->s, (size_t)(hit - s->s)) : 0;
      }
    }
    if (pos < 0 && f->id == JF_S_INDEX) return jj_fail(r, at, "substring not found");
    *out = jv_int(pos);
    return 0;
  }
  case JF_S_FORMAT: return str_format(r, at, s, args, nargs, kw, nkw, out);
  case JF_S_JOIN: {
    jv items;
    if (jj_bind(r, at, "join", p_one, 1, args, nargs, kw, nkw, a, have)) return -1;
    if (jv_iter_list(r, at, a[0], &items)) return -1;
    jsb b = {0};
    jv_list *l = JV_LIST_OF(items);
    int rc = 0;
    for (size_t i = 0; i < l->n && !rc; i++) {
      if (l->v[i].t != JV_STR) {
        rc = jj_fail(r, at, "sequence item %zu: expected str instance, %s found", i, jv_type_name(l->v[i]));
        break;
      }
      if (i) jsb_add(&b, s->s, s->len);
      jsb_add(&b, JV_STR_OF(l->v[i])->s, JV_STR_OF(l->v[i])->len);
      if (b.n > JJ_MAX_OUTPUT) rc = jj_fail(r, at, "a string would exceed %u bytes", (unsigned)JJ_MAX_OUTPUT);
    }
    jv_decref(items);
    if (rc) {
      free(b.p);
      return -1;
    }
    return jv_sb_str(r, at, &b, out);
  }
  case JF_S_SPLITLINES: {
    jv_list *l = jv_list_new(r, at, 0, 0);
    if (!l) return -1;
    *out = jv_obj_val(JV_LIST, l);
    size_t st = 0;
    for (size_t i = 0; i < s->len;) {
      size_t k;
      uint32_t c = jj_utf8_dec(s->s + i, s->len - i, &k);
      int br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
      if (br) {
        if (push_str(r, at, l, s->s + st, i - st)) return -1;
        if (c == '\r' && i + 1 < s->len && s->s[i + 1] == '\n') k = 2;
        st = i + k;
      }
      i += k;
    }
    if (st < s->len && push_str(r, at, l, s->s + st, s->len - st)) return -1;
    return 0;
  }
  case JF_S_ZFILL: {
    if (jj_bind(r, at, "zfill", p_zfill, 1, args, nargs, kw, nkw, a, have)) return -1;
    if (a[0].t != JV_INT) return jj_fail(r, at, "zfill: width must be an integer");
    int64_t len = (int64_t)jv_len_chars(s->s, s->len), w = a[0].u.i;
    if (w > JJ_MAX_OUTPUT) return jj_fail(r, at, "zfill: width too large");
    jsb b = {0};
    size_t st = 0;
    if (s->len && (s->s[0] == '-' || s->s[0] == '+')) jsb_addc(&b, s->s[st++]);
    for (int64_t i = len; i < w; i++) jsb_addc(&b, '0');
    jsb_add(&b, s->s + st, s->len - st);
    return jv_sb_str(r, at, &b, out);
  }
  default:
    if (nargs || nkw) return jj_fail(r, at, "the method takes no arguments");
    *out = jv_bool(str_pred(s, f->id));
    return 0;
  }
}

/* ---- dict and list methods -------------------------------------------------------------- */
int jj_dict_items(jr *r, const jnode *at, jv d, jv *out); /* jinja_filters.c */

static int dict_method(jr *r, const jnode *at, jv_func *f, jv *args, size_t nargs, jkw *kw, size_t nkw, jv *out) {
  jv_dict *d = JV_DICT_OF(f->self);
  if (f->id == JF_D_GET) {
    static const char *const p[] = {"key", "default"};
    jv a[2];
    int have[2];
    if (nkw) return jj_fail(r, at, "get() takes no keyword arguments");
    if (jj_bind(r, at, "get", p, 2, args, nargs, kw, nkw, a, have)) return -1;
    if (!have[0]) return jj_fail(r, at, "get expected at least 1 argument, got 0");
    const jv *v = jv_dict_get(d, a[0]);
    *out = v ? jv_ref(*v) : have[1] ? jv_ref(a[1]) : jv_none();
    return 0;
  }
  if (nargs || nkw) return jj_fail(r, at, "the method takes no arguments");
  if (f->id == JF_D_ITEMS) return jj_dict_items(r, at, f->self, out);
  jv_list *l = jv_list_new(r, at, 0, d->n);
  if (!l) return -1;
  *out = jv_obj_val(JV_LIST, l);
  for (size_t i = 0; i < d->n; i++)
    if (jv_list_push(r, at, l, jv_ref(f->id == JF_D_KEYS ? d->k[i] : d->v[i]))) return -1;
  return 0;
}

static int list_method(jr *r, const jnode *at, jv_func *f, jv *args, size_t nargs, jkw *kw, size_t nkw, jv *out) {
  jv_list *l = JV_LIST_OF(f->self);
  if (nargs != 1 || nkw) return jj_fail(r, at, "the method takes exactly one argument");
  (void)kw;
  int64_t count = 0;
  for (size_t i = 0; i < l->n; i++)
    if (jv_eq(l->v[i], args[0])) {
      if (f->id == JF_L_INDEX) {
        *out = jv_int((int64_t)i);
        return 0;
      }
      count++;
    }
  if (f->id == JF_L_INDEX) return jj_fail(r, at, "value is not in list");
  *out = jv_int(count);
  return 0;
}

/* ---- globals ---------------------------------------------------------------------------- */
static int g_range(jr *r, const jnode *at, jv *args, size_t nargs, size_t nkw, jv *out) {
  int64_t p[3] = {0, 0, 1};
  if (nkw || nargs < 1 || nargs > 3) return jj_fail(r, at, "range expects 1 to 3 integer arguments");
  for (size_t i = 0; i < nargs; i++) {
    if (args[i].t != JV_INT && args[i].t != JV_BOOL)
      return jj_fail(r, at, "range: '%s' object cannot be interpreted as an integer", jv_type_name(args[i]));
    p[nargs == 1 ? 1 : i] = args[i].u.i;
  }
  if (p[2] == 0) return jj_fail(r, at, "range() arg 3 must not be zero");
  double count = p[2] > 0 ? ((double)p[1] - (double)p[0]) / (double)p[2] : ((double)p[0] - (double)p[1]) / (double)-p[2];
  if (count > 100000) /* the sandbox's MAX_RANGE */
    return jj_fail(r, at, "range too big: the sandbox allows at most 100000 items");
  jv_list *l = jv_list_new(r, at, 0, 0);
  if (!l) return -1;
  *out = jv_obj_val(JV_LIST, l);
  for (int64_t i = p[0]; p[2] > 0 ? i < p[1] : i > p[1]; i += p[2])
    if (jv_list_push(r, at, l, jv_int(i))) return -1;
  return 0;
}

/* dict(...) and namespace(...): a mapping or pairs, then keyword arguments. */
static int g_mapping(jr *r, const jnode *at, int kind, jv *args, size_t nargs, jkw *kw, size_t nkw, jv *out) {
  jv_dict *d = jv_dict_new(r, at, kind);
  if (!d) return -1;
  *out = jv_obj_val(kind, d);
  if (kind == JV_NS) {
    if (r->nns == r->cns) {
      size_t cap = r->cns ? r->cns * 2 : 8;
      jv_dict **p = realloc(r->nss, cap * sizeof *p);
      if (!p) return jj_fail(r, at, "out of memory");
      r->nss = p;
      r->cns = cap;
    }
    r->nss[r->nns++] = d;
    d->h.rc++;
  }
  if (nargs > 1) return jj_fail(r, at, "expected at most 1 positional argument, got %zu", nargs);
  if (nargs == 1) {
    if (args[0].t == JV_DICT) {
      jv_dict *s = JV_DICT_OF(args[0]);
      for (size_t i = 0; i < s->n; i++)
        if (jv_dict_set(r, at, d, jv_ref(s->k[i]), jv_ref(s->v[i]))) return -1;
    } else if (args[0].t == JV_LIST) {
      jv_list *s = JV_LIST_OF(args[0]);
      for (size_t i = 0; i < s->n; i++) {
        jv p = s->v[i];
        if (p.t != JV_LIST || JV_LIST_OF(p)->n != 2)
          return jj_fail(r, at, "dictionary update sequence element #%zu has the wrong length", i);
        if (jv_dict_set(r, at, d, jv_ref(JV_LIST_OF(p)->v[0]), jv_ref(JV_LIST_OF(p)->v[1]))) return -1;
      }
    } else if (args[0].t != JV_UNDEF) {
      return jj_fail(r, at, "'%s' object is not iterable", jv_type_name(args[0]));
    }
  }
  for (size_t i = 0; i < nkw; i++) {
    jv k;
    if (kind == JV_NS && kw[i].len && kw[i].name[0] == '_')
      return jj_fail(r, at, "namespace attributes may not start with '_'");
    if (jv_mkstr(r, at, kw[i].name, kw[i].len, &k) || jv_dict_set(r, at, d, k, jv_ref(kw[i].v))) return -1;
  }
  return 0;
}

static int g_strftime(jr *r, const jnode *at, jv *args, size_t nargs, jv *out) {
  if (nargs != 1 || args[0].t != JV_STR) return jj_fail(r, at, "strftime_now expects one format string");
  time_t now = (time_t)r->now;
  struct tm tm;
  if (!localtime_r(&now, &tm)) return jj_fail(r, at, "strftime_now: bad time");
  jv_str *f = JV_STR_OF(args[0]);
  if (f->len > 256) return jj_fail(r, at, "strftime_now: format too long");
  char buf[4096];
  size_t n = f->len ? strftime(buf, sizeof buf, f->s, &tm) : 0;
  if (f->len && n == 0 && strcmp(f->s, "%p") != 0) buf[0] = 0;
  return jv_mkstr(r, at, buf, n, out);
}

int jj_call_builtin(jr *r, const jnode *at, jv_func *f, jv *args, size_t nargs, jkw *kw,
                    size_t nkw, jv *out) {
  *out = jv_undef();
  switch (f->id) {
  case JF_RANGE: return g_range(r, at, args, nargs, nkw, out);
  case JF_DICT: return g_mapping(r, at, JV_DICT, args, nargs, kw, nkw, out);
  case JF_NAMESPACE: return g_mapping(r, at, JV_NS, args, nargs, kw, nkw, out);
  case JF_RAISE: {
    jsb b = {0};
    if (nargs >= 1 && jv_str_of(r, at, args[0], &b)) {
      free(b.p);
      return -1;
    }
    mx_fail(r->err, "%s", b.p ? b.p : "");
    r->raised = 1;
    free(b.p);
    return -1;
  }
  case JF_STRFTIME: return g_strftime(r, at, args, nargs, out);
  case JF_LOOP_CYCLE: {
    if (!nargs) return jj_fail(r, at, "no items for cycling given");
    *out = jv_ref(args[((jv_loop *)f->self.u.o)->i % nargs]);
    return 0;
  }
  case JF_LOOP_CHANGED: return jj_fail(r, at, "unsupported: loop.changed()");
  case JF_UNSAFE: return jj_fail(r, at, "the sandbox refuses methods that modify a list or dict");
  case JF_D_ITEMS:
  case JF_D_KEYS:
  case JF_D_VALUES:
  case JF_D_GET: return dict_method(r, at, f, args, nargs, kw, nkw, out);
  case JF_L_INDEX:
  case JF_L_COUNT: return list_method(r, at, f, args, nargs, kw, nkw, out);
  default: return str_method(r, at, f, args, nargs, kw, nkw, out);
  }
}
