/* jinja2's builtin filters and tests as chat templates use them, with the transformers
 * `tojson` (json.dumps with ensure_ascii=False). Filters that jinja2 returns as generators
 * (map, select, ...) return lists here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "mlx/jinja_internal.h"

enum {
  F_ABS, F_ATTR, F_BATCH, F_CAPITALIZE, F_COUNT, F_DEFAULT, F_DICTSORT, F_ESCAPE, F_FIRST,
  F_FLOAT, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX,
  F_MIN, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR,
  F_SORT, F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER, F_WORDCOUNT
};
static const struct { const char *name; int id; } FILTERS[] = {
    {"abs", F_ABS}, {"attr", F_ATTR}, {"batch", F_BATCH}, {"capitalize", F_CAPITALIZE},
    {"count", F_COUNT}, {"d", F_DEFAULT}, {"default", F_DEFAULT}, {"dictsort", F_DICTSORT},
    {"e", F_ESCAPE}, {"escape", F_ESCAPE}, {"first", F_FIRST}, {"float", F_FLOAT},
    {"indent", F_INDENT}, {"int", F_INT}, {"items", F_ITEMS}, {"join", F_JOIN}, {"last", F_LAST},
    {"length", F_LENGTH}, {"list", F_LIST}, {"lower", F_LOWER}, {"map", F_MAP}, {"max", F_MAX},
    {"min", F_MIN}, {"reject", F_REJECT}, {"rejectattr", F_REJECTATTR}, {"replace", F_REPLACE},
    {"reverse", F_REVERSE}, {"round", F_ROUND}, {"safe", F_SAFE}, {"select", F_SELECT},
    {"selectattr", F_SELECTATTR}, {"sort", F_SORT}, {"string", F_STRING}, {"sum", F_SUM},
    {"title", F_TITLE}, {"tojson", F_TOJSON}, {"trim", F_TRIM}, {"unique", F_UNIQUE},
    {"upper", F_UPPER}, {"wordcount", F_WORDCOUNT}};

enum {
  T_DEFINED, T_UNDEFINED, T_NONE, T_STRINGT, T_NUMBER, T_INTEGER, T_FLOATT, T_BOOLEAN, T_TRUE,
  T_FALSE, T_MAPPING, T_ITERABLE, T_SEQUENCE, T_CALLABLE, T_EQ, T_NE, T_LT, T_LE, T_GT, T_GE,
  T_IN, T_ODD, T_EVEN, T_DIVISIBLEBY, T_LOWER, T_UPPER, T_SAMEAS, T_ESCAPED
};
static const struct { const char *name; int id; } TESTS[] = {
    {"defined", T_DEFINED}, {"undefined", T_UNDEFINED}, {"none", T_NONE}, {"string", T_STRINGT},
    {"number", T_NUMBER}, {"integer", T_INTEGER}, {"float", T_FLOATT}, {"boolean", T_BOOLEAN},
    {"true", T_TRUE}, {"false", T_FALSE}, {"mapping", T_MAPPING}, {"iterable", T_ITERABLE},
    {"sequence", T_SEQUENCE}, {"callable", T_CALLABLE}, {"eq", T_EQ}, {"equalto", T_EQ},
    {"==", T_EQ}, {"ne", T_NE}, {"!=", T_NE}, {"lt", T_LT}, {"lessthan", T_LT}, {"<", T_LT},
    {"le", T_LE}, {"<=", T_LE}, {"gt", T_GT}, {"greaterthan", T_GT}, {">", T_GT}, {"ge", T_GE},
    {">=", T_GE}, {"in", T_IN}, {"odd", T_ODD}, {"even", T_EVEN}, {"divisibleby", T_DIVISIBLEBY},
    {"lower", T_LOWER}, {"upper", T_UPPER}, {"sameas", T_SAMEAS}, {"escaped", T_ESCAPED}};

static int name_is(const char *s, size_t n, const char *w) { return strlen(w) == n && !memcmp(s, w, n); }

int jj_filter_id(const char *name, size_t n) {
  for (size_t k = 0; k < sizeof FILTERS / sizeof *FILTERS; k++)
    if (name_is(name, n, FILTERS[k].name)) return FILTERS[k].id;
  return -1;
}

int jj_test_id(const char *name, size_t n) {
  for (size_t k = 0; k < sizeof TESTS / sizeof *TESTS; k++)
    if (name_is(name, n, TESTS[k].name)) return TESTS[k].id;
  return -1;
}

/* ---- tests ------------------------------------------------------------------------------ */
static int is_number(jv x) { return x.t == JV_INT || x.t == JV_FLOAT || x.t == JV_BOOL; }

int jj_test(jr *r, const jnode *at, int id, jv x, jv *args, size_t nargs, int *res) {
  jv a = nargs ? args[0] : jv_undef();
  int c;
  switch (id) {
  case T_DEFINED: *res = x.t != JV_UNDEF; return 0;
  case T_UNDEFINED: *res = x.t == JV_UNDEF; return 0;
  case T_NONE: *res = x.t == JV_NONE; return 0;
  case T_STRINGT: *res = x.t == JV_STR; return 0;
  case T_NUMBER: *res = is_number(x); return 0;
  case T_INTEGER: *res = x.t == JV_INT; return 0;
  case T_FLOATT: *res = x.t == JV_FLOAT; return 0;
  case T_BOOLEAN: *res = x.t == JV_BOOL; return 0;
  case T_TRUE: *res = x.t == JV_BOOL && x.u.i; return 0;
  case T_FALSE: *res = x.t == JV_BOOL && !x.u.i; return 0;
  case T_MAPPING: *res = x.t == JV_DICT; return 0;
  case T_ITERABLE: *res = x.t == JV_UNDEF || x.t == JV_STR || x.t == JV_LIST || x.t == JV_DICT; return 0;
  case T_SEQUENCE: *res = x.t == JV_UNDEF || x.t == JV_STR || x.t == JV_LIST || x.t == JV_DICT; return 0;
  case T_CALLABLE: *res = x.t == JV_FUNC; return 0;
  case T_ESCAPED: *res = 0; return 0;
  case T_EQ: *res = jv_eq(x, a); return 0;
  case T_NE: *res = !jv_eq(x, a); return 0;
  case T_SAMEAS:
    *res = x.t == a.t && (jv_is_obj(x) ? x.u.o == a.u.o : x.t == JV_FLOAT ? x.u.f == a.u.f : x.u.i == a.u.i);
    return 0;
  case T_LT:
  case T_LE:
  case T_GT:
  case T_GE:
    if (jv_cmp(r, at, x, a, &c)) return -1;
    *res = id == T_LT ? c < 0 : id == T_LE ? c <= 0 : id == T_GT ? c > 0 : c >= 0;
    return 0;
  case T_IN:
    if (a.t == JV_STR && x.t == JV_STR)
      *res = memmem(JV_STR_OF(a)->s, JV_STR_OF(a)->len, JV_STR_OF(x)->s, JV_STR_OF(x)->len) != NULL || !JV_STR_OF(x)->len;
    else if (a.t == JV_LIST) {
      *res = 0;
      for (size_t i = 0; i < JV_LIST_OF(a)->n; i++) *res |= jv_eq(JV_LIST_OF(a)->v[i], x);
    } else if (a.t == JV_DICT)
      *res = jv_dict_get(JV_DICT_OF(a), x) != NULL;
    else
      return jj_fail(r, at, "test 'in': argument of type '%s' is not a container", jv_type_name(a));
    return 0;
  case T_ODD:
  case T_EVEN:
  case T_DIVISIBLEBY:
    if (x.t != JV_INT && x.t != JV_BOOL) return jj_fail(r, at, "test needs an integer, not %s", jv_type_name(x));
    if (id == T_DIVISIBLEBY) {
      if ((a.t != JV_INT && a.t != JV_BOOL) || a.u.i == 0) return jj_fail(r, at, "divisibleby needs a non-zero integer");
      *res = x.u.i % a.u.i == 0;
    } else {
      *res = (x.u.i % 2 != 0) == (id == T_ODD);
    }
    return 0;
  case T_LOWER:
  case T_UPPER: {
    jsb b = {0};
    if (jv_str_of(r, at, x, &b)) {
      free(b.p);
      return -1;
    }
    int lower = 0, upper = 0;
    for (size_t i = 0; i < b.n;) {
      size_t k;
      uint32_t ch = jj_utf8_dec(b.p + i, b.n - i, &k);
      if (jj_upper(ch) != ch) lower = 1;
      if (jj_lower(ch) != ch) upper = 1;
      i += k;
    }
    free(b.p);
    *res = id == T_LOWER ? lower && !upper : upper && !lower;
    return 0;
  }
  }
  return jj_fail(r, at, "unsupported test");
}

/* ---- helpers ---------------------------------------------------------------------------- */
static int as_str(jr *r, const jnode *at, jv x, jv *out) { return jv_to_str(r, at, x, out); }

/* Dotted attribute paths ("function.name") as jinja2's make_attrgetter: item access per part,
 * integer parts as indices. */
static int attr_path(jr *r, const jnode *at, jv x, jv path, jv *out) {
  if (path.t == JV_INT) return jj_getitem(r, at, x, path, out);
  if (path.t != JV_STR) return jj_fail(r, at, "attribute must be a string");
  jv_str *p = JV_STR_OF(path);
  jv cur = jv_ref(x);
  size_t st = 0;
  for (size_t i = 0; i <= p->len; i++) {
    if (i < p->len && p->s[i] != '.') continue;
    jv key, next;
    int digits = i > st;
    for (size_t k = st; k < i; k++) digits &= p->s[k] >= '0' && p->s[k] <= '9';
    if (digits && i - st < 18) {
      key = jv_int(strtoll(p->s + st, NULL, 10));
    } else if (jv_mkstr(r, at, p->s + st, i - st, &key)) {
      jv_decref(cur);
      return -1;
    }
    int rc = cur.t == JV_UNDEF ? (next = jv_undef(), 0) : jj_getitem(r, at, cur, key, &next);
    jv_decref(key);
    jv_decref(cur);
    if (rc) return -1;
    cur = next;
    st = i + 1;
  }
  *out = cur;
  return 0;
}

/* The sort key of jinja2's case-insensitive filters: strings lowered. */
static int sort_key(jr *r, const jnode *at, jv x, int case_sensitive, jv *out) {
  if (case_sensitive || x.t != JV_STR) {
    *out = jv_ref(x);
    return 0;
  }
  jsb b = {0};
  jv_str *s = JV_STR_OF(x);
  for (size_t i = 0; i < s->len;) {
    size_t k;
    uint32_t c = jj_utf8_dec(s->s + i, s->len - i, &k), m = jj_lower(c);
    char u[4];
    if (m == c) jsb_add(&b, s->s + i, k);
    else jsb_add(&b, u, jj_utf8_enc(m, u));
    i += k;
  }
  return jv_sb_str(r, at, &b, out);
}

/* Stable sort of items by keys (merge sort; comparison errors propagate). */
static int msort(jr *r, const jnode *at, jv *keys, size_t *idx, size_t *tmp, size_t n, int rev) {
  if (n < 2) return 0;
  size_t h = n / 2;
  if (msort(r, at, keys, idx, tmp, h, rev) || msort(r, at, keys, idx + h, tmp, n - h, rev)) return -1;
  size_t i = 0, j = h, o = 0;
  while (i < h && j < n) {
    int c;
    if (jv_cmp(r, at, keys[idx[j]], keys[idx[i]], &c)) return -1;
    if (rev ? c > 0 : c < 0) tmp[o++] = idx[j++];
    else tmp[o++] = idx[i++];
  }
  while (i < h) tmp[o++] = idx[i++];
  while (j < n) tmp[o++] = idx[j++];
  memcpy(idx, tmp, n * sizeof *idx);
  return 0;
}

/* Sorts l's items by their key (attribute path or the item, case-folded unless
 * case_sensitive) into a new list. */
static int sorted(jr *r, const jnode *at, jv_list *l, jv attr, int case_sensitive, int rev, int by_value_of_pair,
                  jv *out) {
  size_t n = l->n;
  jv *keys = calloc(n + 1, sizeof *keys);
  size_t *idx = malloc((n + 1) * sizeof *idx), *tmp = malloc((n + 1) * sizeof *tmp);
  int rc = (!keys || !idx || !tmp) ? jj_fail(r, at, "out of memory") : 0;
  for (size_t i = 0; !rc && i < n; i++) {
    jv k = l->v[i], a;
    idx[i] = i;
    if (by_value_of_pair >= 0) k = JV_LIST_OF(k)->v[by_value_of_pair];
    if (attr.t != JV_UNDEF && attr.t != JV_NONE) {
      if ((rc = attr_path(r, at, k, attr, &a))) break;
      rc = sort_key(r, at, a, case_sensitive, &keys[i]);
      jv_decref(a);
    } else {
      rc = sort_key(r, at, k, case_sensitive, &keys[i]);
    }
  }
  if (!rc) rc = msort(r, at, keys, idx, tmp, n, rev);
  jv_list *o = rc ? NULL : jv_list_new(r, at, 0, n);
  if (!rc && !o) rc = -1;
  for (size_t i = 0; !rc && i < n; i++) rc = jv_list_push(r, at, o, jv_ref(l->v[idx[i]]));
  for (size_t i = 0; keys && i < n; i++) jv_decref(keys[i]);
  free(keys);
  free(idx);
  free(tmp);
  if (o) *out = jv_obj_val(JV_LIST, o);
  return rc;
}

int jj_dict_items(jr *r, const jnode *at, jv d, jv *out) {
  jv_dict *m = JV_DICT_OF(d);
  jv_list *l = jv_list_new(r, at, 0, m->n);
  if (!l) return -1;
  *out = jv_obj_val(JV_LIST, l);
  for (size_t i = 0; i < m->n; i++) {
    jv_list *p = jv_list_new(r, at, 1, 2);
    if (!p) return -1;
    p->v[0] = jv_ref(m->k[i]);
    p->v[1] = jv_ref(m->v[i]);
    p->n = 2;
    if (jv_list_push(r, at, l, jv_obj_val(JV_LIST, p))) return -1;
  }
  return 0;
}

static int bool_arg(jv x, int have, int dflt) { return have ? jv_truthy(x) : dflt; }

/* select/reject/selectattr/rejectattr/map: the per-item step. */
static int item_test(jr *r, const jnode *at, jv item, jv *args, size_t nargs, int *keep) {
  if (nargs == 0) {
    *keep = jv_truthy(item);
    return 0;
  }
  if (args[0].t != JV_STR) return jj_fail(r, at, "test name must be a string");
  int tid = jj_test_id(JV_STR_OF(args[0])->s, JV_STR_OF(args[0])->len);
  if (tid < 0) return jj_fail(r, at, "unsupported test: '%s'", JV_STR_OF(args[0])->s);
  return jj_test(r, at, tid, item, args + 1, nargs - 1, keep);
}

static int empty_gen(jr *r, const jnode *at, jv *out) {
  jv_list *o = jv_list_new(r, at, 0, 0);
  if (!o) return -1;
  o->gen = 1;
  *out = jv_obj_val(JV_LIST, o);
  return 0;
}

static int f_select(jr *r, const jnode *at, int id, jv x, jv *args, size_t nargs, jv *out) {
  jv items;
  if (!jv_truthy(x)) return empty_gen(r, at, out); /* jinja2: `if value:` before iterating */
  if (jv_iter_list(r, at, x, &items)) return -1;
  jv_list *l = JV_LIST_OF(items), *o = jv_list_new(r, at, 0, 0);
  int rc = o ? 0 : -1, attr = id == F_SELECTATTR || id == F_REJECTATTR;
  int want = id == F_SELECT || id == F_SELECTATTR;
  if (!rc && attr && nargs < 1) rc = jj_fail(r, at, "selectattr needs an attribute name");
  for (size_t i = 0; !rc && i < l->n; i++) {
    jv v = jv_ref(l->v[i]);
    int keep = 0;
    if (attr) {
      jv a;
      rc = attr_path(r, at, v, args[0], &a);
      if (!rc) rc = item_test(r, at, a, args + 1, nargs - 1, &keep);
      if (!rc) jv_decref(a);
    } else {
      rc = item_test(r, at, v, args, nargs, &keep);
    }
    if (!rc && keep == want) rc = jv_list_push(r, at, o, jv_ref(v));
    jv_decref(v);
  }
  jv_decref(items);
  if (o) {
    o->gen = 1;
    *out = jv_obj_val(JV_LIST, o);
  }
  return rc;
}

static int f_map(jr *r, const jnode *at, jv x, jv *args, size_t nargs, jkw *kw, size_t nkw, jv *out) {
  jv items, attr = jv_undef(), dflt = jv_undef();
  int have_default = 0;
  for (size_t k = 0; k < nkw; k++) {
    if (name_is(kw[k].name, kw[k].len, "attribute")) attr = kw[k].v;
    else if (name_is(kw[k].name, kw[k].len, "default")) dflt = kw[k].v, have_default = 1;
    else if (!nargs) return jj_fail(r, at, "map: unexpected keyword argument '%.*s'", (int)kw[k].len, kw[k].name);
  }
  int fid = -1;
  if (attr.t == JV_UNDEF) {
    if (!nargs || args[0].t != JV_STR) return jj_fail(r, at, "map needs a filter name or attribute=");
    fid = jj_filter_id(JV_STR_OF(args[0])->s, JV_STR_OF(args[0])->len);
    if (fid < 0) return jj_fail(r, at, "unsupported filter: '%s'", JV_STR_OF(args[0])->s);
  }
  if (!jv_truthy(x)) return empty_gen(r, at, out);
  if (jv_iter_list(r, at, x, &items)) return -1;
  jv_list *l = JV_LIST_OF(items), *o = jv_list_new(r, at, 0, l->n);
  int rc = o ? 0 : -1;
  if (o) o->gen = 1;
  for (size_t i = 0; !rc && i < l->n; i++) {
    jv v;
    if (fid >= 0) {
      rc = jj_filter(r, at, fid, l->v[i], args + 1, nargs - 1, kw, nkw, &v);
    } else {
      rc = attr_path(r, at, l->v[i], attr, &v);
      if (!rc && v.t == JV_UNDEF && have_default) v = jv_ref(dflt);
    }
    if (!rc) rc = jv_list_push(r, at, o, v);
  }
  jv_decref(items);
  if (o) *out = jv_obj_val(JV_LIST, o);
  return rc;
}

static int f_tojson(jr *r, const jnode *at, jv x, jv *args, size_t nargs, jkw *kw, size_t nkw, jv *out) {
  static const char *const p[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
  jv a[4];
  int have[4];
  if (jj_bind(r, at, "tojson", p, 4, args, nargs, kw, nkw, a, have)) return -1;
  jj_json_opt o = {bool_arg(a[0], have[0], 0), bool_arg(a[3], have[3], 0), NULL, 0, ", ", ": ", 2, 2};
  char spaces[64];
  if (have[1] && a[1].t != JV_NONE) {
    if (a[1].t == JV_INT) {
      int64_t k = a[1].u.i < 0 ? 0 : a[1].u.i;
      if (k > 32) return jj_fail(r, at, "tojson: indent too large");
      memset(spaces, ' ', (size_t)k);
      o.indent = spaces;
      o.indent_len = (size_t)k;
    } else if (a[1].t == JV_STR) {
      o.indent = JV_STR_OF(a[1])->s;
      o.indent_len = JV_STR_OF(a[1])->len;
    } else {
      return jj_fail(r, at, "tojson: indent must be an int or a string");
    }
    o.item_sep = ",";
    o.item_sep_len = 1;
  }
  if (have[2] && a[2].t != JV_NONE) {
    jv s = a[2];
    if (s.t != JV_LIST || JV_LIST_OF(s)->n != 2 || JV_LIST_OF(s)->v[0].t != JV_STR || JV_LIST_OF(s)->v[1].t != JV_STR)
      return jj_fail(r, at, "tojson: separators must be a pair of strings");
    o.item_sep = JV_STR_OF(JV_LIST_OF(s)->v[0])->s;
    o.item_sep_len = JV_STR_OF(JV_LIST_OF(s)->v[0])->len;
    o.key_sep = JV_STR_OF(JV_LIST_OF(s)->v[1])->s;
    o.key_sep_len = JV_STR_OF(JV_LIST_OF(s)->v[1])->len;
  }
  jsb b = {0};
  if (jj_json_dump(r, at, x, &o, &b, 0)) {
    free(b.p);
    return -1;
  }
  return jv_sb_str(r, at, &b, out);
}

static int f_indent(jr *r, const jnode *at, jv s, jv *args, size_t nargs, jkw *kw, size_t nkw, jv *out) {
  static const char *const p[] = {"width", "first", "blank"};
  jv a[3], text;
  int have[3];
  if (jj_bind(r, at, "indent", p, 3, args, nargs, kw, nkw, a, have)) return -1;
  jsb ind = {0};
  if (a[0].t == JV_STR) {
    jsb_add(&ind, JV_STR_OF(a[0])->s, JV_STR_OF(a[0])->len);
  } else {
    int64_t w = have[0] ? (a[0].t == JV_INT ? a[0].u.i : -1) : 4;
    if (w < 0 || w > 256) return jj_fail(r, at, "indent: width must be a small integer or a string");
    for (int64_t i = 0; i < w; i++) jsb_addc(&ind, ' ');
  }
  if (as_str(r, at, s, &text)) {
    free(ind.p);
    return -1;
  }
  /* s += "\n"; lines = s.splitlines(); as jinja2 does */
  jv_str *t = JV_STR_OF(text);
  jsb b = {0};
  int first = bool_arg(a[1], have[1], 0), blank = bool_arg(a[2], have[2], 0);
  if (first) jsb_add(&b, ind.p, ind.n);
  size_t st = 0, line = 0;
  for (size_t i = 0; i <= t->len;) {
    size_t k = 1;
    int br = i == t->len;
    if (!br) {
      uint32_t c = jj_utf8_dec(t->s + i, t->len - i, &k);
      br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
           c == 0x2028 || c == 0x2029;
      if (c == '\r' && i + 1 < t->len && t->s[i + 1] == '\n') k = 2;
    }
    if (br) {
      if (line > 0) {
        jsb_addc(&b, '\n');
        if (blank || i > st) jsb_add(&b, ind.p, ind.n);
      }
      jsb_add(&b, t->s + st, i - st);
      line++;
      st = i + k;
      if (i == t->len) break;
    }
    i += k;
    if (b.n > JJ_MAX_OUTPUT) break;
  }
  free(ind.p);
  jv_decref(text);
  if (b.n > JJ_MAX_OUTPUT) {
    free(b.p);
    return jj_fail(r, at, "a string would exceed %u bytes", (unsigned)JJ_MAX_OUTPUT);
  }
  return jv_sb_str(r, at, &b, out);
}

/* Python's int() of a string: optional blanks and sign, digits with single underscores. */
static int parse_int(const char *s, size_t n, int64_t *v) {
  size_t i = jj_lspace(s, n), e = jj_rspace(s, n);
  int neg = 0, nd = 0;
  if (i < e && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  int64_t x = 0;
  for (; i < e; i++) {
    if (s[i] == '_' && nd && i + 1 < e && s[i + 1] != '_') continue;
    if (s[i] < '0' || s[i] > '9') return -1;
    if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, s[i] - '0', &x)) return -1;
    nd++;
  }
  if (!nd) return -1;
  *v = neg ? -x : x;
  return 0;
}

/* Python's float() of a string, read from its digits (no locale involved). */
static int parse_float(const char *s, size_t n, double *v) {
  size_t i = jj_lspace(s, n), e = jj_rspace(s, n);
  int neg = 0;
  if (i < e && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  size_t len = e - i;
  if ((len == 3 && !strncasecmp(s + i, "inf", 3)) || (len == 8 && !strncasecmp(s + i, "infinity", 8))) {
    *v = neg ? -INFINITY : INFINITY;
    return 0;
  }
  if (len == 3 && !strncasecmp(s + i, "nan", 3)) {
    *v = NAN;
    return 0;
  }
  char m[64];
  size_t mn = 0;
  long exp10 = 0;
  int nd = 0, in_frac = 0;
  for (; i < e; i++) {
    char c = s[i];
    if (c == '_' && nd) continue;
    if (c == '.' && !in_frac) {
      in_frac = 1;
      continue;
    }
    if (c < '0' || c > '9') break;
    nd++;
    if (mn < 40) {
      m[mn++] = c;
      if (in_frac) exp10--;
    } else if (!in_frac) {
      exp10++;
    }
  }
  if (!nd) return -1;
  if (i < e) {
    if (s[i] != 'e' && s[i] != 'E') return -1;
    char *end;
    char tmp[32];
    size_t tl = e - i - 1 < sizeof tmp - 1 ? e - i - 1 : sizeof tmp - 1;
    memcpy(tmp, s + i + 1, tl);
    tmp[tl] = 0;
    long x = strtol(tmp, &end, 10);
    if (*end || !tl) return -1;
    exp10 += x;
  }
  snprintf(m + mn, sizeof m - mn, "e%ld", exp10);
  *v = strtod(m, NULL);
  if (neg) *v = -*v;
  return 0;
}

static int f_round(jr *r, const jnode *at, jv x, jv *args, size_t nargs, jkw *kw, size_t nkw, jv *out) {
  static const char *const p[] = {"precision", "method"};
  jv a[2];
  int have[2];
  if (jj_bind(r, at, "round", p, 2, args, nargs, kw, nkw, a, have)) return -1;
  int64_t prec = have[0] && a[0].t == JV_INT ? a[0].u.i : 0;
  const char *method = have[1] && a[1].t == JV_STR ? JV_STR_OF(a[1])->s : "common";
  if (x.t != JV_INT && x.t != JV_FLOAT && x.t != JV_BOOL) return jj_fail(r, at, "round needs a number");
  if (prec < -300 || prec > 300) return jj_fail(r, at, "round: precision out of range");
  if (strcmp(method, "common") && strcmp(method, "floor") && strcmp(method, "ceil"))
    return jj_fail(r, at, "round: method must be common, floor or ceil");
  double f = x.t == JV_FLOAT ? x.u.f : (double)x.u.i;
  if (!strcmp(method, "common")) {
    if (x.t != JV_FLOAT && prec >= 0) { /* round(int, n) stays an int */
      *out = jv_int(x.u.i);
      return 0;
    }
    if (isfinite(f) && prec >= 0 && prec < 30) {
      char buf[512];
      snprintf(buf, sizeof buf, "%.*f", (int)prec, f);
      for (char *c = buf; *c; c++)
        if (!((*c >= '0' && *c <= '9') || *c == '-')) *c = '.'; /* any locale's point */
      double v;
      if (parse_float(buf, strlen(buf), &v)) v = f;
      *out = jv_float(v);
    } else {
      double s = pow(10.0, (double)prec);
      *out = jv_float(isfinite(f) ? nearbyint(f * s) / s : f);
    }
    return 0;
  }
  double s = pow(10.0, (double)prec);
  *out = jv_float((!strcmp(method, "floor") ? floor(f * s) : ceil(f * s)) / s);
  return 0;
}

/* jinja2's title filter: upper-case the first character of each word, where words begin after
 * whitespace, '-', '(', '{', '[' or '<'; the rest lower-cased. */
static int f_title(jr *r, const jnode *at, jv_str *s, jv *out) {
  jsb b = {0};
  int begin = 1;
  for (size_t i = 0; i < s->len;) {
    size_t k;
    uint32_t c = jj_utf8_dec(s->s + i, s->len - i, &k);
    int sep = jj_isspace_at(s->s + i, s->len - i, &k) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    uint32_t m = sep ? c : begin ? jj_upper(c) : jj_lower(c);
    char u[4];
    if (m == c) jsb_add(&b, s->s + i, k);
    else jsb_add(&b, u, jj_utf8_enc(m, u));
    begin = sep;
    i += k;
  }
  return jv_sb_str(r, at, &b, out);
}

static int list_out(jr *r, const jnode *at, jv_list **o, jv *out) {
  *o = jv_list_new(r, at, 0, 0);
  if (!*o) return -1;
  *out = jv_obj_val(JV_LIST, *o);
  return 0;
}

int jj_filter(jr *r, const jnode *at, int id, jv x, jv *args, size_t nargs, jkw *kw, size_t nkw,
              jv *out) {
  jv a[4], s, items;
  int have[4], rc = 0;
  jv_list *o;
  *out = jv_undef();
  switch (id) {
  case F_ABS:
    if (x.t == JV_INT || x.t == JV_BOOL) {
      if (x.u.i == INT64_MIN) return jj_fail(r, at, "abs: integer beyond 64 bits");
      *out = jv_int(x.u.i < 0 ? -x.u.i : x.u.i);
    } else if (x.t == JV_FLOAT) {
      *out = jv_float(fabs(x.u.f));
    } else {
      return jj_fail(r, at, "bad operand type for abs(): '%s'", jv_type_name(x));
    }
    return 0;
  case F_ATTR: {
    static const char *const p[] = {"name"};
    if (jj_bind(r, at, "attr", p, 1, args, nargs, kw, nkw, a, have)) return -1;
    if (a[0].t != JV_STR) return jj_fail(r, at, "attr: the name must be a string");
    if (x.t == JV_DICT) { /* attributes only: a dict's keys are not attributes */
      int mid = jj_method_id(JV_DICT, JV_STR_OF(a[0])->s, JV_STR_OF(a[0])->len);
      if (mid < 0) return 0;
    }
    return jj_getattr(r, at, x, JV_STR_OF(a[0])->s, JV_STR_OF(a[0])->len, out);
  }
  case F_BATCH: {
    static const char *const p[] = {"linecount", "fill_with"};
    if (jj_bind(r, at, "batch", p, 2, args, nargs, kw, nkw, a, have)) return -1;
    if (a[0].t != JV_INT || a[0].u.i <= 0) return jj_fail(r, at, "batch: linecount must be a positive integer");
    if (jv_iter_list(r, at, x, &items)) return -1;
    jv_list *l = JV_LIST_OF(items), *cur = NULL;
    rc = list_out(r, at, &o, out);
    if (!rc) o->gen = 1;
    for (size_t i = 0; !rc && i < l->n; i++) {
      if (!cur) {
        cur = jv_list_new(r, at, 0, 0);
        if (!cur || jv_list_push(r, at, o, jv_obj_val(JV_LIST, cur))) rc = -1;
      }
      if (!rc) rc = jv_list_push(r, at, cur, jv_ref(l->v[i]));
      if (cur && (int64_t)cur->n == a[0].u.i) cur = NULL;
    }
    while (!rc && cur && have[1] && a[1].t != JV_NONE && (int64_t)cur->n < a[0].u.i)
      rc = jv_list_push(r, at, cur, jv_ref(a[1]));
    jv_decref(items);
    return rc;
  }
  case F_CAPITALIZE:
  case F_LOWER:
  case F_UPPER:
  case F_TITLE: {
    if (as_str(r, at, x, &s)) return -1;
    if (id == F_TITLE) {
      rc = f_title(r, at, JV_STR_OF(s), out);
    } else {
      jv_func fake = {{-1, JV_FUNC}, id == F_UPPER ? JF_S_UPPER : id == F_LOWER ? JF_S_LOWER : JF_S_CAPITALIZE, s, NULL};
      rc = jj_call_builtin(r, at, &fake, NULL, 0, NULL, 0, out);
    }
    jv_decref(s);
    return rc;
  }
  case F_COUNT:
  case F_LENGTH: {
    int64_t n;
    if (jv_len(x, &n)) return jj_fail(r, at, "object of type '%s' has no len()", jv_type_name(x));
    *out = jv_int(n);
    return 0;
  }
  case F_DEFAULT: {
    static const char *const p[] = {"default_value", "boolean"};
    if (jj_bind(r, at, "default", p, 2, args, nargs, kw, nkw, a, have)) return -1;
    int use = x.t == JV_UNDEF || (bool_arg(a[1], have[1], 0) && !jv_truthy(x));
    if (!use) *out = jv_ref(x);
    else if (have[0]) *out = jv_ref(a[0]);
    else return jv_mkstr(r, at, "", 0, out);
    return 0;
  }
  case F_DICTSORT: {
    static const char *const p[] = {"case_sensitive", "by", "reverse"};
    if (jj_bind(r, at, "dictsort", p, 3, args, nargs, kw, nkw, a, have)) return -1;
    if (x.t != JV_DICT) return jj_fail(r, at, "dictsort needs a mapping, not %s", jv_type_name(x));
    int by_value = 0;
    if (have[1] && a[1].t == JV_STR) {
      if (!strcmp(JV_STR_OF(a[1])->s, "value")) by_value = 1;
      else if (strcmp(JV_STR_OF(a[1])->s, "key")) return jj_fail(r, at, "dictsort: by must be 'key' or 'value'");
    }
    if (jj_dict_items(r, at, x, &items)) return -1;
    rc = sorted(r, at, JV_LIST_OF(items), jv_undef(), bool_arg(a[0], have[0], 0), bool_arg(a[2], have[2], 0),
                by_value, out);
    jv_decref(items);
    return rc;
  }
  case F_ESCAPE: return jv_html_escape(r, at, x, out);
  case F_FIRST:
  case F_LAST:
    if (x.t == JV_UNDEF) return 0;
    if (id == F_LAST && x.t == JV_LIST && JV_LIST_OF(x)->gen)
      return jj_fail(r, at, "last: a generator cannot be reversed");
    if (jv_iter_list(r, at, x, &items)) return -1;
    if (JV_LIST_OF(items)->n)
      *out = jv_ref(JV_LIST_OF(items)->v[id == F_FIRST ? 0 : JV_LIST_OF(items)->n - 1]);
    jv_decref(items);
    return 0;
  case F_FLOAT: {
    static const char *const p[] = {"default"};
    double f;
    if (jj_bind(r, at, "float", p, 1, args, nargs, kw, nkw, a, have)) return -1;
    if (x.t == JV_INT || x.t == JV_BOOL) *out = jv_float((double)x.u.i);
    else if (x.t == JV_FLOAT) *out = x;
    else if (x.t == JV_STR && !parse_float(JV_STR_OF(x)->s, JV_STR_OF(x)->len, &f)) *out = jv_float(f);
    else *out = have[0] ? jv_ref(a[0]) : jv_float(0.0);
    return 0;
  }
  case F_INT: {
    static const char *const p[] = {"default", "base"};
    int64_t v;
    double f;
    if (jj_bind(r, at, "int", p, 2, args, nargs, kw, nkw, a, have)) return -1;
    if (have[1] && !(a[1].t == JV_INT && a[1].u.i == 10)) return jj_fail(r, at, "unsupported: int with a base other than 10");
    if (x.t == JV_INT || x.t == JV_BOOL) *out = jv_int(x.u.i);
    else if (x.t == JV_FLOAT && isfinite(x.u.f) && fabs(x.u.f) < 9.2e18) *out = jv_int((int64_t)x.u.f);
    else if (x.t == JV_STR && !parse_int(JV_STR_OF(x)->s, JV_STR_OF(x)->len, &v)) *out = jv_int(v);
    else if (x.t == JV_STR && !parse_float(JV_STR_OF(x)->s, JV_STR_OF(x)->len, &f) && isfinite(f) && fabs(f) < 9.2e18)
      *out = jv_int((int64_t)f);
    else *out = have[0] ? jv_ref(a[0]) : jv_int(0);
    return 0;
  }
  case F_INDENT: return f_indent(r, at, x, args, nargs, kw, nkw, out);
  case F_ITEMS:
    if (x.t == JV_UNDEF) return empty_gen(r, at, out);
    if (x.t != JV_DICT) return jj_fail(r, at, "items: can only get item pairs from a mapping");
    if (jj_dict_items(r, at, x, out)) return -1;
    JV_LIST_OF(*out)->gen = 1;
    return 0;
  case F_JOIN: {
    static const char *const p[] = {"d", "attribute"};
    if (jj_bind(r, at, "join", p, 2, args, nargs, kw, nkw, a, have)) return -1;
    if (jv_iter_list(r, at, x, &items)) return -1;
    jsb b = {0}, sep = {0};
    if (have[0]) rc = jv_str_of(r, at, a[0], &sep);
    jv_list *l = JV_LIST_OF(items);
    for (size_t i = 0; !rc && i < l->n; i++) {
      if (i) jsb_add(&b, sep.p, sep.n);
      if (have[1] && a[1].t != JV_NONE) {
        jv v;
        rc = attr_path(r, at, l->v[i], a[1], &v);
        if (!rc) rc = jv_str_of(r, at, v, &b);
        if (!rc) jv_decref(v);
      } else {
        rc = jv_str_of(r, at, l->v[i], &b);
      }
    }
    free(sep.p);
    jv_decref(items);
    if (rc) {
      free(b.p);
      return -1;
    }
    return jv_sb_str(r, at, &b, out);
  }
  case F_LIST:
    if (jv_iter_list(r, at, x, &items)) return -1;
    rc = list_out(r, at, &o, out);
    for (size_t i = 0; !rc && i < JV_LIST_OF(items)->n; i++) rc = jv_list_push(r, at, o, jv_ref(JV_LIST_OF(items)->v[i]));
    jv_decref(items);
    return rc;
  case F_MAP: return f_map(r, at, x, args, nargs, kw, nkw, out);
  case F_MAX:
  case F_MIN:
  case F_SORT:
  case F_UNIQUE: {
    static const char *const ps[] = {"reverse", "case_sensitive", "attribute"};
    static const char *const pm[] = {"case_sensitive", "attribute"};
    int is_sort = id == F_SORT;
    if (jj_bind(r, at, id == F_SORT ? "sort" : "max", is_sort ? ps : pm, is_sort ? 3 : 2, args, nargs, kw, nkw, a, have))
      return -1;
    int cs = bool_arg(is_sort ? a[1] : a[0], is_sort ? have[1] : have[0], 0);
    jv attr = is_sort ? a[2] : a[1];
    if (jv_iter_list(r, at, x, &items)) return -1;
    jv_list *l = JV_LIST_OF(items);
    if (id == F_UNIQUE) {
      rc = list_out(r, at, &o, out);
      if (!rc) o->gen = 1;
      jv seen_keys;
      jv_list *seen = jv_list_new(r, at, 0, 0);
      if (!seen) rc = -1;
      seen_keys = seen ? jv_obj_val(JV_LIST, seen) : jv_undef();
      for (size_t i = 0; !rc && i < l->n; i++) {
        jv k, base = l->v[i], av = jv_undef();
        if (attr.t != JV_UNDEF && attr.t != JV_NONE) {
          if ((rc = attr_path(r, at, base, attr, &av))) break;
          base = av;
        }
        rc = sort_key(r, at, base, cs, &k);
        jv_decref(av);
        if (rc) break;
        int dup = 0;
        for (size_t j = 0; j < seen->n && !dup; j++) dup = jv_eq(seen->v[j], k);
        if (dup) {
          jv_decref(k);
        } else {
          rc = jv_list_push(r, at, seen, k);
          if (!rc) rc = jv_list_push(r, at, o, jv_ref(l->v[i]));
        }
      }
      jv_decref(seen_keys);
      jv_decref(items);
      return rc;
    }
    jv srt;
    rc = sorted(r, at, l, attr, cs, is_sort ? bool_arg(a[0], have[0], 0) : 0, -1, &srt);
    jv_decref(items);
    if (rc) return -1;
    if (is_sort) {
      *out = srt;
      return 0;
    }
    jv_list *sl = JV_LIST_OF(srt);
    if (sl->n) *out = jv_ref(sl->v[id == F_MIN ? 0 : sl->n - 1]);
    if (id == F_MAX && sl->n) { /* max keeps the first of equal maxima, as Python's max */
      jv kl, kc;
      size_t pick = sl->n - 1;
      if (sort_key(r, at, sl->v[pick], cs, &kl) == 0) {
        while (pick > 0) {
          if (sort_key(r, at, sl->v[pick - 1], cs, &kc)) break;
          int same = jv_eq(kc, kl) && (attr.t == JV_UNDEF || attr.t == JV_NONE);
          jv_decref(kc);
          if (!same) break;
          pick--;
        }
        jv_decref(kl);
        jv_decref(*out);
        *out = jv_ref(sl->v[pick]);
      }
    }
    jv_decref(srt);
    return 0;
  }
  case F_REJECT:
  case F_REJECTATTR:
  case F_SELECT:
  case F_SELECTATTR:
    if (nkw) return jj_fail(r, at, "select filters take no keyword arguments");
    return f_select(r, at, id, x, args, nargs, out);
  case F_REPLACE: {
    static const char *const p[] = {"old", "new", "count"};
    if (jj_bind(r, at, "replace", p, 3, args, nargs, kw, nkw, a, have)) return -1;
    jv so, sn;
    if (as_str(r, at, x, &s)) return -1;
    if (as_str(r, at, a[0], &so)) {
      jv_decref(s);
      return -1;
    }
    if (as_str(r, at, a[1], &sn)) {
      jv_decref(s);
      jv_decref(so);
      return -1;
    }
    jv margs[3] = {so, sn, have[2] && a[2].t != JV_NONE ? a[2] : jv_int(-1)};
    jv_func fake = {{-1, JV_FUNC}, JF_S_REPLACE, s, NULL};
    rc = jj_call_builtin(r, at, &fake, margs, 3, NULL, 0, out);
    jv_decref(s);
    jv_decref(so);
    jv_decref(sn);
    return rc;
  }
  case F_REVERSE:
    if (x.t == JV_STR) {
      jv_str *t = JV_STR_OF(x);
      jsb b = {0};
      for (size_t i = t->len; i > 0;) {
        size_t st = i - 1;
        while (st > 0 && ((unsigned char)t->s[st] & 0xC0) == 0x80) st--;
        jsb_add(&b, t->s + st, i - st);
        i = st;
      }
      return jv_sb_str(r, at, &b, out);
    }
    if (jv_iter_list(r, at, x, &items)) return -1;
    rc = list_out(r, at, &o, out);
    if (!rc) o->gen = 1; /* a reverse iterator */
    for (size_t i = JV_LIST_OF(items)->n; !rc && i > 0; i--) rc = jv_list_push(r, at, o, jv_ref(JV_LIST_OF(items)->v[i - 1]));
    jv_decref(items);
    return rc;
  case F_ROUND: return f_round(r, at, x, args, nargs, kw, nkw, out);
  case F_SAFE:
    if (x.t == JV_STR && JV_STR_OF(x)->markup) {
      *out = jv_ref(x);
      return 0;
    }
    if (as_str(r, at, x, &s)) return -1;
    rc = jv_mkstr(r, at, JV_STR_OF(s)->s, JV_STR_OF(s)->len, out);
    jv_decref(s);
    if (!rc) JV_STR_OF(*out)->markup = 1;
    return rc;
  case F_STRING: return as_str(r, at, x, out);
  case F_SUM: {
    static const char *const p[] = {"attribute", "start"};
    if (jj_bind(r, at, "sum", p, 2, args, nargs, kw, nkw, a, have)) return -1;
    if (jv_iter_list(r, at, x, &items)) return -1;
    jv acc = have[1] ? jv_ref(a[1]) : jv_int(0);
    for (size_t i = 0; !rc && i < JV_LIST_OF(items)->n; i++) {
      jv v = jv_ref(JV_LIST_OF(items)->v[i]), nx;
      if (have[0] && a[0].t != JV_NONE) {
        jv t;
        rc = attr_path(r, at, v, a[0], &t);
        jv_decref(v);
        v = t;
        if (rc) break;
      }
      double fa, fb;
      if ((acc.t == JV_INT || acc.t == JV_BOOL) && (v.t == JV_INT || v.t == JV_BOOL)) {
        if (__builtin_add_overflow(acc.u.i, v.u.i, &nx.u.i)) rc = jj_fail(r, at, "sum: integer beyond 64 bits");
        nx.t = JV_INT;
      } else if ((acc.t == JV_INT || acc.t == JV_BOOL || acc.t == JV_FLOAT) &&
                 (v.t == JV_INT || v.t == JV_BOOL || v.t == JV_FLOAT)) {
        fa = acc.t == JV_FLOAT ? acc.u.f : (double)acc.u.i;
        fb = v.t == JV_FLOAT ? v.u.f : (double)v.u.i;
        nx = jv_float(fa + fb);
      } else {
        rc = jj_fail(r, at, "sum: unsupported operand types '%s' and '%s'", jv_type_name(acc), jv_type_name(v));
      }
      jv_decref(v);
      if (!rc) {
        jv_decref(acc);
        acc = nx;
      }
    }
    jv_decref(items);
    if (rc) {
      jv_decref(acc);
      return -1;
    }
    *out = acc;
    return 0;
  }
  case F_TOJSON: return f_tojson(r, at, x, args, nargs, kw, nkw, out);
  case F_TRIM: {
    static const char *const p[] = {"chars"};
    if (jj_bind(r, at, "trim", p, 1, args, nargs, kw, nkw, a, have)) return -1;
    if (as_str(r, at, x, &s)) return -1;
    jv_func fake = {{-1, JV_FUNC}, JF_S_STRIP, s, NULL};
    rc = jj_call_builtin(r, at, &fake, a, have[0] ? 1 : 0, NULL, 0, out);
    jv_decref(s);
    return rc;
  }
  case F_WORDCOUNT: {
    if (as_str(r, at, x, &s)) return -1;
    jv_str *t = JV_STR_OF(s);
    int64_t words = 0;
    int in_word = 0;
    for (size_t i = 0; i < t->len;) {
      size_t k;
      uint32_t c = jj_utf8_dec(t->s + i, t->len - i, &k);
      int w = c == '_' || (c >= '0' && c <= '9') || jj_isalpha(c) || (c >= 0x80 && !jj_isspace_at(t->s + i, t->len - i, &k));
      if (w && !in_word) words++;
      in_word = w;
      i += k;
    }
    jv_decref(s);
    *out = jv_int(words);
    return 0;
  }
  }
  return jj_fail(r, at, "unsupported filter");
}
