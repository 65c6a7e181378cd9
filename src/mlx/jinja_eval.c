/* The Jinja evaluator: statements and expressions over the syntax tree with jinja2's scoping
 * (a for-loop iteration, a macro call and `with` each get their own scope, so `set` inside
 * them does not leak out; namespaces are the way out) and Python's operators. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "mlx/jinja_internal.h"

enum { EX_OK = 0, EX_BREAK = 1, EX_CONTINUE = 2 };

/* ---- scopes ----------------------------------------------------------------------------- */
static void scope_clear(jscope *s) {
  for (size_t i = 0; i < s->n; i++) jv_decref(s->vals[i]);
  free(s->names);
  free(s->lens);
  free(s->vals);
  s->n = s->cap = 0;
  s->names = NULL;
  s->lens = NULL;
  s->vals = NULL;
}

static int scope_set(jr *r, const jnode *at, jscope *s, const char *name, size_t n, jv v) {
  for (size_t i = 0; i < s->n; i++)
    if (s->lens[i] == n && !memcmp(s->names[i], name, n)) {
      jv_decref(s->vals[i]);
      s->vals[i] = v;
      return 0;
    }
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 8;
    const char **nm = realloc(s->names, cap * sizeof *nm);
    if (nm) s->names = nm;
    size_t *ln = nm ? realloc(s->lens, cap * sizeof *ln) : NULL;
    if (ln) s->lens = ln;
    jv *vl = ln ? realloc(s->vals, cap * sizeof *vl) : NULL;
    if (vl) s->vals = vl;
    if (!vl) {
      jv_decref(v);
      return jj_fail(r, at, "out of memory");
    }
    s->cap = cap;
  }
  s->names[s->n] = name;
  s->lens[s->n] = n;
  s->vals[s->n] = v;
  s->n++;
  return 0;
}

static const jv *scope_get(const jscope *s, const char *name, size_t n) {
  for (; s; s = s->parent)
    for (size_t i = s->n; i-- > 0;)
      if (s->lens[i] == n && !memcmp(s->names[i], name, n)) return &s->vals[i];
  return NULL;
}

static int name_is(const char *s, size_t n, const char *w) { return strlen(w) == n && !memcmp(s, w, n); }

static int lookup(jr *r, const jnode *at, const jscope *s, const char *name, size_t n, jv *out) {
  const jv *v = scope_get(s, name, n);
  if (v) {
    *out = jv_ref(*v);
    return 0;
  }
  static const struct { const char *name; int id; } globals[] = {
      {"range", JF_RANGE}, {"dict", JF_DICT}, {"namespace", JF_NAMESPACE},
      {"raise_exception", JF_RAISE}, {"strftime_now", JF_STRFTIME}};
  for (size_t k = 0; k < sizeof globals / sizeof *globals; k++)
    if (name_is(name, n, globals[k].name)) {
      jv_func *f = jv_func_new(r, at, globals[k].id, jv_undef());
      if (!f) return -1;
      *out = jv_obj_val(JV_FUNC, f);
      return 0;
    }
  if (name_is(name, n, "lipsum") || name_is(name, n, "cycler") || name_is(name, n, "joiner"))
    return jj_fail(r, at, "unsupported global: %.*s", (int)n, name);
  *out = jv_undef();
  return 0;
}

/* ---- evaluation ------------------------------------------------------------------------- */
typedef struct ectx {
  jr *r;
  jscope *s;
} ectx;

static int ev(ectx *c, const jnode *e, jv *out);
static int exec_body(jr *r, jnode *const *v, size_t n, jscope *s, jsb *out);

static int enter(jr *r, const jnode *at) {
  if (++r->depth > JJ_MAX_DEPTH)
    return jj_fail(r, at, "the template recurses too deeply (more than %d levels)", JJ_MAX_DEPTH);
  return 0;
}

static int ev_args(ectx *c, const jnode *e, jv **args, jkw **kw) {
  *args = calloc(e->nv + 1, sizeof **args);
  *kw = calloc(e->nw + 1, sizeof **kw);
  if (!*args || !*kw) return jj_fail(c->r, e, "out of memory");
  for (size_t i = 0; i < e->nv; i++)
    if (ev(c, e->v[i], &(*args)[i])) return -1;
  for (size_t i = 0; i < e->nw; i++) {
    (*kw)[i].name = e->w[i]->name;
    (*kw)[i].len = e->w[i]->name_len;
    if (ev(c, e->w[i]->a, &(*kw)[i].v)) return -1;
  }
  return 0;
}

static void free_args(const jnode *e, jv *args, jkw *kw) {
  for (size_t i = 0; args && i < e->nv; i++) jv_decref(args[i]);
  for (size_t i = 0; kw && i < e->nw; i++) jv_decref(kw[i].v);
  free(args);
  free(kw);
}

static int num_of(jv x, double *f) {
  if (x.t == JV_INT || x.t == JV_BOOL) *f = (double)x.u.i;
  else if (x.t == JV_FLOAT) *f = x.u.f;
  else return 0;
  return 1;
}

static int is_intlike(jv x) { return x.t == JV_INT || x.t == JV_BOOL; }

static int repeat(jr *r, const jnode *at, jv seq, int64_t k, jv *out) {
  if (k < 0) k = 0;
  if (seq.t == JV_STR) {
    jv_str *s = JV_STR_OF(seq);
    if (s->len && (uint64_t)k > JJ_MAX_OUTPUT / s->len)
      return jj_fail(r, at, "a string would exceed %u bytes", (unsigned)JJ_MAX_OUTPUT);
    jsb b = {0};
    for (int64_t i = 0; i < k; i++) jsb_add(&b, s->s, s->len);
    if (jv_sb_str(r, at, &b, out)) return -1;
    JV_STR_OF(*out)->markup = s->markup;
    return 0;
  }
  jv_list *l = JV_LIST_OF(seq);
  if (l->n && (uint64_t)k > JJ_MAX_ITEMS / l->n)
    return jj_fail(r, at, "a list would exceed %d items", JJ_MAX_ITEMS);
  jv_list *o = jv_list_new(r, at, l->tuple, 0);
  if (!o) return -1;
  *out = jv_obj_val(JV_LIST, o);
  for (int64_t i = 0; i < k; i++)
    for (size_t j = 0; j < l->n; j++)
      if (jv_list_push(r, at, o, jv_ref(l->v[j]))) return -1;
  return 0;
}

static int binop(jr *r, const jnode *at, int op, jv a, jv b, jv *out) {
  static const char *const sym[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
  double x, y;
  if (op == OP_CONCAT) {
    jsb s = {0};
    if (jv_str_of(r, at, a, &s) || jv_str_of(r, at, b, &s)) {
      free(s.p);
      return -1;
    }
    return jv_sb_str(r, at, &s, out);
  }
  if (a.t == JV_UNDEF || b.t == JV_UNDEF)
    return jj_fail(r, at, "undefined value used with '%s'", sym[op]);
  if (is_intlike(a) && is_intlike(b)) {
    int64_t i = a.u.i, j = b.u.i, res = 0;
    switch (op) {
    case OP_ADD: if (__builtin_add_overflow(i, j, &res)) goto overflow; break;
    case OP_SUB: if (__builtin_sub_overflow(i, j, &res)) goto overflow; break;
    case OP_MUL: if (__builtin_mul_overflow(i, j, &res)) goto overflow; break;
    case OP_DIV:
      if (!j) return jj_fail(r, at, "division by zero");
      *out = jv_float((double)i / (double)j);
      return 0;
    case OP_FLOORDIV:
    case OP_MOD:
      if (!j) return jj_fail(r, at, "integer division or modulo by zero");
      if (i == INT64_MIN && j == -1) goto overflow;
      res = i / j;
      if ((i % j != 0) && ((i < 0) != (j < 0))) res--;
      if (op == OP_MOD) res = i - res * j;
      break;
    case OP_POW:
      if (j < 0) {
        *out = jv_float(pow((double)i, (double)j));
        return 0;
      }
      res = 1;
      for (int64_t k = 0; k < j; k++) {
        if (__builtin_mul_overflow(res, i, &res)) goto overflow;
        if (res == 0 || res == 1) break;
        if (res == -1) {
          res = (j % 2) ? -1 : 1;
          break;
        }
      }
      break;
    }
    *out = jv_int(res);
    return 0;
  overflow:
    return jj_fail(r, at, "unsupported: integer result beyond 64 bits");
  }
  if (num_of(a, &x) && num_of(b, &y)) {
    double res = 0;
    switch (op) {
    case OP_ADD: res = x + y; break;
    case OP_SUB: res = x - y; break;
    case OP_MUL: res = x * y; break;
    case OP_DIV:
      if (y == 0) return jj_fail(r, at, "float division by zero");
      res = x / y;
      break;
    case OP_FLOORDIV:
    case OP_MOD: { /* Python's float divmod */
      if (y == 0) return jj_fail(r, at, "float modulo by zero");
      double m = fmod(x, y), dv = (x - m) / y;
      if (m != 0) {
        if ((y < 0) != (m < 0)) {
          m += y;
          dv -= 1.0;
        }
      } else {
        m = copysign(0.0, y);
      }
      double fd = copysign(0.0, x / y);
      if (dv != 0) {
        fd = floor(dv);
        if (dv - fd > 0.5) fd += 1.0;
      }
      res = op == OP_MOD ? m : fd;
      break;
    }
    case OP_POW: res = pow(x, y); break;
    }
    *out = jv_float(res);
    return 0;
  }
  if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
    int markup = JV_STR_OF(a)->markup || JV_STR_OF(b)->markup;
    jv ea, eb;
    if (markup) { /* Markup + str escapes the plain side */
      if (jv_html_escape(r, at, a, &ea)) return -1;
      if (jv_html_escape(r, at, b, &eb)) {
        jv_decref(ea);
        return -1;
      }
    } else {
      ea = jv_ref(a);
      eb = jv_ref(b);
    }
    jsb s = {0};
    jsb_add(&s, JV_STR_OF(ea)->s, JV_STR_OF(ea)->len);
    jsb_add(&s, JV_STR_OF(eb)->s, JV_STR_OF(eb)->len);
    jv_decref(ea);
    jv_decref(eb);
    if (s.n > JJ_MAX_OUTPUT) {
      free(s.p);
      return jj_fail(r, at, "a string would exceed %u bytes", (unsigned)JJ_MAX_OUTPUT);
    }
    if (jv_sb_str(r, at, &s, out)) return -1;
    JV_STR_OF(*out)->markup = markup;
    return 0;
  }
  if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST && JV_LIST_OF(a)->tuple == JV_LIST_OF(b)->tuple) {
    jv_list *o = jv_list_new(r, at, JV_LIST_OF(a)->tuple, 0);
    if (!o) return -1;
    *out = jv_obj_val(JV_LIST, o);
    for (int k = 0; k < 2; k++) {
      jv_list *l = JV_LIST_OF(k ? b : a);
      for (size_t i = 0; i < l->n; i++)
        if (jv_list_push(r, at, o, jv_ref(l->v[i]))) return -1;
    }
    return 0;
  }
  if (op == OP_MUL && (a.t == JV_STR || a.t == JV_LIST) && is_intlike(b)) return repeat(r, at, a, b.u.i, out);
  if (op == OP_MUL && (b.t == JV_STR || b.t == JV_LIST) && is_intlike(a)) return repeat(r, at, b, a.u.i, out);
  if (op == OP_MOD && a.t == JV_STR)
    return jj_fail(r, at, "unsupported: printf-style string formatting with '%%'");
  return jj_fail(r, at, "unsupported operand type(s) for %s: '%s' and '%s'", sym[op],
                 jv_type_name(a), jv_type_name(b));
}

static int compare(jr *r, const jnode *at, int op, jv a, jv b, int *res) {
  int c;
  switch (op) {
  case OP_EQ: *res = jv_eq(a, b); return 0;
  case OP_NE: *res = !jv_eq(a, b); return 0;
  case OP_IN:
  case OP_NOTIN: {
    int found = 0;
    if (b.t == JV_STR) {
      if (a.t != JV_STR)
        return jj_fail(r, at, "'in <string>' requires string as left operand, not %s", jv_type_name(a));
      jv_str *h = JV_STR_OF(b), *nd = JV_STR_OF(a);
      found = nd->len == 0 || (nd->len <= h->len && memmem(h->s, h->len, nd->s, nd->len) != NULL);
    } else if (b.t == JV_LIST) {
      for (size_t i = 0; !found && i < JV_LIST_OF(b)->n; i++) found = jv_eq(JV_LIST_OF(b)->v[i], a);
    } else if (b.t == JV_DICT) {
      found = jv_dict_get(JV_DICT_OF(b), a) != NULL;
    } else if (b.t != JV_UNDEF) {
      return jj_fail(r, at, "argument of type '%s' is not iterable", jv_type_name(b));
    }
    *res = op == OP_IN ? found : !found;
    return 0;
  }
  default:
    if (jv_cmp(r, at, a, b, &c)) return -1;
    *res = op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
    return 0;
  }
}

/* Python slicing of a list, tuple or str. */
static int slice(ectx *c, const jnode *at, jv x, const jnode *sl, jv *out) {
  jr *r = c->r;
  int64_t part[3] = {0, 0, 1};
  int have[3] = {0, 0, 0};
  const jnode *nodes[3] = {sl->b, sl->c, sl->d};
  for (int k = 0; k < 3; k++) {
    if (!nodes[k]) continue;
    jv v;
    if (ev(c, nodes[k], &v)) return -1;
    if (v.t == JV_NONE) continue;
    if (!is_intlike(v)) {
      jv_decref(v);
      return jj_fail(r, at, "slice indices must be integers or None");
    }
    part[k] = v.u.i;
    have[k] = 1;
  }
  int64_t step = part[2];
  if (step == 0) return jj_fail(r, at, "slice step cannot be zero");
  if (x.t == JV_UNDEF) return jj_fail(r, at, "slice of an undefined value");
  if (x.t != JV_LIST && x.t != JV_STR) {
    *out = jv_undef();
    return 0;
  }
  /* code points of a string, so indices count characters */
  size_t n = 0, *offs = NULL;
  if (x.t == JV_STR) {
    jv_str *s = JV_STR_OF(x);
    offs = malloc((s->len + 1) * sizeof *offs);
    if (!offs) return jj_fail(r, at, "out of memory");
    for (size_t i = 0; i < s->len; i++)
      if (((unsigned char)s->s[i] & 0xC0) != 0x80) offs[n++] = i;
    offs[n] = s->len;
  } else {
    n = JV_LIST_OF(x)->n;
  }
  int64_t len = (int64_t)n, start, stop;
  if (step > 0) {
    start = have[0] ? part[0] : 0;
    stop = have[1] ? part[1] : len;
    if (start < 0) start = start + len < 0 ? 0 : start + len;
    if (start > len) start = len;
    if (stop < 0) stop = stop + len < 0 ? 0 : stop + len;
    if (stop > len) stop = len;
  } else {
    start = have[0] ? part[0] : len - 1;
    stop = have[1] ? part[1] : -1 - len;
    if (start < 0) start = start + len < 0 ? -1 : start + len;
    if (start >= len) start = len - 1;
    if (stop < 0) stop = stop + len < 0 ? -1 : stop + len;
    if (stop >= len) stop = len - 1;
  }
  int rc = 0;
  if (x.t == JV_STR) {
    jsb b = {0};
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
      jsb_add(&b, JV_STR_OF(x)->s + offs[i], offs[i + 1] - offs[i]);
    free(offs);
    return jv_sb_str(r, at, &b, out);
  }
  jv_list *l = JV_LIST_OF(x), *o = jv_list_new(r, at, l->tuple, 0);
  if (!o) return -1;
  *out = jv_obj_val(JV_LIST, o);
  for (int64_t i = start; !rc && (step > 0 ? i < stop : i > stop); i += step)
    rc = jv_list_push(r, at, o, jv_ref(l->v[i]));
  return rc;
}

static int call_macro(jr *r, const jnode *at, const jnode *m, jv *args, size_t nargs, jkw *kw,
                      size_t nkw, jv *out);

int jj_call(jr *r, const jnode *at, jv f, jv *args, size_t nargs, jkw *kw, size_t nkw, jv *out) {
  if (f.t == JV_UNDEF) return jj_fail(r, at, "call of an undefined value");
  if (f.t != JV_FUNC) return jj_fail(r, at, "'%s' object is not callable", jv_type_name(f));
  jv_func *fn = (jv_func *)f.u.o;
  if (fn->id == JF_MACRO) return call_macro(r, at, fn->mac, args, nargs, kw, nkw, out);
  return jj_call_builtin(r, at, fn, args, nargs, kw, nkw, out);
}

static int ev(ectx *c, const jnode *e, jv *out) {
  jr *r = c->r;
  int rc = 0;
  *out = jv_undef();
  if (enter(r, e)) return -1;
  switch (e->kind) {
  case N_LIT: *out = jv_ref(e->lit); break;
  case N_HOLE: *out = jv_ref(r->hole); break;
  case N_NAME: rc = lookup(r, e, c->s, e->name, e->name_len, out); break;
  case N_LIST:
  case N_TUPLE: {
    jv_list *l = jv_list_new(r, e, e->kind == N_TUPLE, e->nv);
    if (!l) {
      rc = -1;
      break;
    }
    *out = jv_obj_val(JV_LIST, l);
    for (size_t i = 0; !rc && i < e->nv; i++) {
      jv x;
      rc = ev(c, e->v[i], &x);
      if (!rc) rc = jv_list_push(r, e, l, x);
    }
    break;
  }
  case N_DICT: {
    jv_dict *d = jv_dict_new(r, e, JV_DICT);
    if (!d) {
      rc = -1;
      break;
    }
    *out = jv_obj_val(JV_DICT, d);
    for (size_t i = 0; !rc && i + 1 < e->nv; i += 2) {
      jv k, v;
      if ((rc = ev(c, e->v[i], &k))) break;
      if ((rc = ev(c, e->v[i + 1], &v))) {
        jv_decref(k);
        break;
      }
      rc = jv_dict_set(r, e, d, k, v);
    }
    break;
  }
  case N_ATTR: {
    jv x;
    if ((rc = ev(c, e->a, &x))) break;
    rc = jj_getattr(r, e, x, e->name, e->name_len, out);
    jv_decref(x);
    break;
  }
  case N_ITEM: {
    jv x, k;
    if ((rc = ev(c, e->a, &x))) break;
    if (e->b->kind == N_SLICE) {
      rc = slice(c, e, x, e->b, out);
    } else if (!(rc = ev(c, e->b, &k))) {
      rc = jj_getitem(r, e, x, k, out);
      jv_decref(k);
    }
    jv_decref(x);
    break;
  }
  case N_CALL: {
    jv f, *args = NULL;
    jkw *kw = NULL;
    if ((rc = ev(c, e->a, &f))) break;
    rc = ev_args(c, e, &args, &kw);
    if (!rc) rc = jj_call(r, e, f, args, e->nv, kw, e->nw, out);
    free_args(e, args, kw);
    jv_decref(f);
    break;
  }
  case N_FILTER: {
    jv x, *args = NULL;
    jkw *kw = NULL;
    if ((rc = ev(c, e->a, &x))) break;
    rc = ev_args(c, e, &args, &kw);
    if (!rc && e->id < 0)
      rc = jj_fail(r, e, "unsupported filter: '%.*s'", (int)e->name_len, e->name);
    if (!rc) rc = jj_filter(r, e, e->id, x, args, e->nv, kw, e->nw, out);
    free_args(e, args, kw);
    jv_decref(x);
    break;
  }
  case N_TEST: {
    jv x, *args = NULL;
    jkw *kw = NULL;
    int res = 0;
    if ((rc = ev(c, e->a, &x))) break;
    rc = ev_args(c, e, &args, &kw);
    if (!rc && e->nw) rc = jj_fail(r, e, "unsupported: keyword arguments to a test");
    if (!rc && e->id < 0) rc = jj_fail(r, e, "unsupported test: '%.*s'", (int)e->name_len, e->name);
    if (!rc) rc = jj_test(r, e, e->id, x, args, e->nv, &res);
    free_args(e, args, kw);
    jv_decref(x);
    *out = jv_bool(e->flag ? !res : res);
    break;
  }
  case N_BIN: {
    jv a, b;
    if ((rc = ev(c, e->a, &a))) break;
    if ((rc = ev(c, e->b, &b))) {
      jv_decref(a);
      break;
    }
    rc = binop(r, e, e->op, a, b, out);
    jv_decref(a);
    jv_decref(b);
    break;
  }
  case N_NEG:
  case N_POS: {
    jv a;
    if ((rc = ev(c, e->a, &a))) break;
    if (is_intlike(a) && !(e->kind == N_NEG && a.u.i == INT64_MIN))
      *out = jv_int(e->kind == N_NEG ? -a.u.i : a.u.i);
    else if (a.t == JV_FLOAT)
      *out = jv_float(e->kind == N_NEG ? -a.u.f : a.u.f);
    else
      rc = jj_fail(r, e, "bad operand type for unary %c: '%s'", e->kind == N_NEG ? '-' : '+',
                   jv_type_name(a));
    jv_decref(a);
    break;
  }
  case N_NOT: {
    jv a;
    if ((rc = ev(c, e->a, &a))) break;
    *out = jv_bool(!jv_truthy(a));
    jv_decref(a);
    break;
  }
  case N_AND:
  case N_OR: {
    jv a;
    if ((rc = ev(c, e->a, &a))) break;
    if (jv_truthy(a) == (e->kind == N_OR)) {
      *out = a;
      break;
    }
    jv_decref(a);
    rc = ev(c, e->b, out);
    break;
  }
  case N_CMP: {
    jv left;
    int res = 1;
    if ((rc = ev(c, e->a, &left))) break;
    for (size_t i = 0; res && i < e->nv; i++) {
      jv right;
      if ((rc = ev(c, e->v[i]->a, &right))) break;
      rc = compare(r, e->v[i], e->v[i]->op, left, right, &res);
      jv_decref(left);
      left = right;
      if (rc) break;
    }
    jv_decref(left);
    *out = jv_bool(res);
    break;
  }
  case N_COND: {
    jv cond;
    if ((rc = ev(c, e->a, &cond))) break;
    int t = jv_truthy(cond);
    jv_decref(cond);
    if (t)
      rc = ev(c, e->b, out);
    else if (e->c)
      rc = ev(c, e->c, out);
    break;
  }
  default: rc = jj_fail(r, e, "unsupported expression");
  }
  r->depth--;
  if (rc) {
    jv_decref(*out);
    *out = jv_undef();
  }
  return rc;
}

int jj_eval(jr *r, const jnode *e, jv *out) {
  ectx c = {r, r->root};
  return ev(&c, e, out);
}

/* ---- statements ------------------------------------------------------------------------- */
static int out_add(jr *r, const jnode *at, jsb *out, const char *s, size_t n) {
  jsb_add(out, s, n);
  if (out->oom) return jj_fail(r, at, "out of memory");
  if (out->n > JJ_MAX_OUTPUT)
    return jj_fail(r, at, "the output would exceed %u bytes", (unsigned)JJ_MAX_OUTPUT);
  return jj_work(r, at, n);
}

/* Binds an assignment target (a name or a tuple of names) in s; takes v. */
static int bind(jr *r, jscope *s, const jnode *t, jv v) {
  if (t->kind == N_NAME) return scope_set(r, t, s, t->name, t->name_len, v);
  jv items;
  if (v.t != JV_LIST && v.t != JV_STR && v.t != JV_DICT) {
    int rc = jj_fail(r, t, "cannot unpack non-iterable %s object", jv_type_name(v));
    jv_decref(v);
    return rc;
  }
  int rc = jv_iter_list(r, t, v, &items);
  jv_decref(v);
  if (rc) return -1;
  jv_list *l = JV_LIST_OF(items);
  if (l->n != t->nv) {
    jj_fail(r, t, "cannot unpack %zu values into %zu names", l->n, t->nv);
    jv_decref(items);
    return -1;
  }
  for (size_t i = 0; !rc && i < t->nv; i++) rc = bind(r, s, t->v[i], jv_ref(l->v[i]));
  jv_decref(items);
  return rc;
}

static int exec_for(jr *r, const jnode *st, jscope *s, jsb *out) {
  ectx c = {r, s};
  jv seq, items;
  if (ev(&c, st->b, &seq)) return -1;
  int rc = jv_iter_list(r, st->b, seq, &items);
  jv_decref(seq);
  if (rc) return -1;
  if (st->c) { /* the inline filter: keep the items it accepts */
    jv_list *all = JV_LIST_OF(items), *kept = jv_list_new(r, st, 0, 0);
    if (!kept) {
      jv_decref(items);
      return -1;
    }
    for (size_t i = 0; !rc && i < all->n; i++) {
      jscope it = {s, 0, 0, NULL, NULL, NULL};
      ectx ic = {r, &it};
      jv ok = jv_undef();
      rc = bind(r, &it, st->a, jv_ref(all->v[i]));
      if (!rc) rc = ev(&ic, st->c, &ok);
      if (!rc && jv_truthy(ok)) rc = jv_list_push(r, st, kept, jv_ref(all->v[i]));
      jv_decref(ok);
      scope_clear(&it);
    }
    jv_decref(items);
    items = jv_obj_val(JV_LIST, kept);
    if (rc) {
      jv_decref(items);
      return -1;
    }
  }
  jv_list *l = JV_LIST_OF(items);
  if (l->n == 0) {
    jv_decref(items);
    jscope es = {s, 0, 0, NULL, NULL, NULL};
    rc = exec_body(r, st->w, st->nw, &es, out);
    scope_clear(&es);
    return rc;
  }
  jv_loop *lp = calloc(1, sizeof *lp);
  if (!lp) {
    jv_decref(items);
    return jj_fail(r, st, "out of memory");
  }
  lp->h.rc = 1;
  lp->h.kind = JV_LOOP;
  lp->items = items;
  lp->depth = 1;
  jv loopv = jv_obj_val(JV_LOOP, lp);
  rc = 0;
  for (size_t i = 0; i < l->n; i++) {
    jscope it = {s, 0, 0, NULL, NULL, NULL};
    lp->i = i;
    rc = jj_work(r, st, JJ_ITER_WORK);
    if (!rc) rc = bind(r, &it, st->a, jv_ref(l->v[i]));
    if (!rc) rc = scope_set(r, st, &it, "loop", 4, jv_ref(loopv));
    if (!rc) rc = exec_body(r, st->v, st->nv, &it, out);
    scope_clear(&it);
    if (rc == EX_CONTINUE) rc = 0;
    if (rc) break;
  }
  jv_decref(loopv);
  return rc == EX_BREAK ? 0 : rc;
}

static int exec_set(jr *r, const jnode *st, jscope *s, jv v) {
  const jnode *t = st->a;
  if (t->kind != N_ATTR) return bind(r, s, t, v);
  const jv *ns = scope_get(s, t->a->name, t->a->name_len);
  if (!ns || ns->t != JV_NS) {
    jv_decref(v);
    return jj_fail(r, t, "cannot assign attribute on non-namespace object '%.*s'",
                   (int)t->a->name_len, t->a->name);
  }
  if (t->name_len && t->name[0] == '_') {
    jv_decref(v);
    return jj_fail(r, t, "namespace attributes may not start with '_'");
  }
  jv k;
  if (jv_mkstr(r, t, t->name, t->name_len, &k)) {
    jv_decref(v);
    return -1;
  }
  return jv_dict_set(r, t, JV_DICT_OF(*ns), k, v);
}

/* Renders a body into a string value (block set, filter blocks, macro calls). */
static int capture(jr *r, jnode *const *v, size_t n, jscope *s, jv *out) {
  jsb b = {0};
  int rc = exec_body(r, v, n, s, &b);
  if (rc) {
    free(b.p);
    return rc < 0 ? -1 : jj_fail(r, v[0], "break or continue outside a loop");
  }
  return jv_sb_str(r, NULL, &b, out);
}

/* Applies a filter chain (whose innermost operand is the hole) to v; takes v. */
static int apply_chain(jr *r, const jnode *chain, jscope *s, jv v, jv *out) {
  jv saved = r->hole;
  ectx c = {r, s};
  r->hole = v;
  int rc = ev(&c, chain, out);
  r->hole = saved;
  jv_decref(v);
  return rc;
}

static int call_macro(jr *r, const jnode *at, const jnode *m, jv *args, size_t nargs, jkw *kw,
                      size_t nkw, jv *out) {
  if (nargs > m->nv)
    return jj_fail(r, at, "macro '%.*s' takes not more than %zu argument(s)", (int)m->name_len,
                   m->name, m->nv);
  for (size_t k = 0; k < nkw; k++) {
    size_t p = 0;
    while (p < m->nv && !(m->v[p]->name_len == kw[k].len && !memcmp(m->v[p]->name, kw[k].name, kw[k].len))) p++;
    if (p == m->nv)
      return jj_fail(r, at, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->name_len,
                     m->name, (int)kw[k].len, kw[k].name);
    if (p < nargs)
      return jj_fail(r, at, "macro '%.*s' got multiple values for argument '%.*s'",
                     (int)m->name_len, m->name, (int)kw[k].len, kw[k].name);
  }
  if (++r->macro_depth > JJ_MAX_MACRO_DEPTH) {
    r->macro_depth--;
    return jj_fail(r, at, "macro calls nested too deeply (more than %d)", JJ_MAX_MACRO_DEPTH);
  }
  jscope ms = {r->root, 0, 0, NULL, NULL, NULL};
  ectx c = {r, &ms};
  int rc = 0;
  for (size_t p = 0; !rc && p < m->nv; p++) {
    const jnode *prm = m->v[p];
    jv v = jv_undef();
    int given = 0;
    if (p < nargs) {
      v = jv_ref(args[p]);
      given = 1;
    }
    for (size_t k = 0; !given && k < nkw; k++)
      if (prm->name_len == kw[k].len && !memcmp(prm->name, kw[k].name, kw[k].len)) {
        v = jv_ref(kw[k].v);
        given = 1;
      }
    if (!given && prm->a) rc = ev(&c, prm->a, &v);
    if (!rc) rc = scope_set(r, prm, &ms, prm->name, prm->name_len, v);
  }
  if (!rc) rc = capture(r, m->w, m->nw, &ms, out);
  scope_clear(&ms);
  r->macro_depth--;
  return rc;
}

static int exec_stmt(jr *r, const jnode *st, jscope *s, jsb *out) {
  ectx c = {r, s};
  jv v = jv_undef();
  int rc = 0;
  switch (st->kind) {
  case S_TEXT: return out_add(r, st, out, JV_STR_OF(st->lit)->s, JV_STR_OF(st->lit)->len);
  case S_OUT: {
    jsb b = {0};
    if (ev(&c, st->a, &v)) return -1;
    if (v.t == JV_STR) {
      rc = out_add(r, st, out, JV_STR_OF(v)->s, JV_STR_OF(v)->len);
    } else {
      rc = jv_str_of(r, st, v, &b);
      if (!rc) rc = out_add(r, st, out, b.p ? b.p : "", b.n);
      free(b.p);
    }
    jv_decref(v);
    return rc;
  }
  case S_IF: {
    if (ev(&c, st->a, &v)) return -1;
    int t = jv_truthy(v);
    jv_decref(v);
    return t ? exec_body(r, st->v, st->nv, s, out) : exec_body(r, st->w, st->nw, s, out);
  }
  case S_FOR: return exec_for(r, st, s, out);
  case S_SET:
    if (ev(&c, st->b, &v)) return -1;
    return exec_set(r, st, s, v);
  case S_SETBLOCK:
    if (capture(r, st->v, st->nv, s, &v)) return -1;
    if (st->c) {
      jv f;
      if (apply_chain(r, st->c, s, v, &f)) return -1;
      v = f;
    }
    return exec_set(r, st, s, v);
  case S_MACRO: {
    jv_func *f = jv_func_new(r, st, JF_MACRO, jv_undef());
    if (!f) return -1;
    f->mac = st;
    return scope_set(r, st, s, st->name, st->name_len, jv_obj_val(JV_FUNC, f));
  }
  case S_BREAK: return EX_BREAK;
  case S_CONTINUE: return EX_CONTINUE;
  case S_FILTERBLOCK: {
    jv f;
    jsb b = {0};
    if (capture(r, st->v, st->nv, s, &v) || apply_chain(r, st->a, s, v, &f)) return -1;
    rc = jv_str_of(r, st, f, &b);
    if (!rc) rc = out_add(r, st, out, b.p ? b.p : "", b.n);
    free(b.p);
    jv_decref(f);
    return rc;
  }
  case S_WITH:
  case S_SCOPE: {
    jscope ws = {s, 0, 0, NULL, NULL, NULL};
    ectx wc = {r, &ws};
    for (size_t i = 0; !rc && i < st->nv && st->kind == S_WITH; i++) {
      if (!(rc = ev(&wc, st->v[i]->b, &v))) rc = bind(r, &ws, st->v[i]->a, v);
    }
    if (!rc) rc = st->kind == S_WITH ? exec_body(r, st->w, st->nw, &ws, out) : exec_body(r, st->v, st->nv, &ws, out);
    scope_clear(&ws);
    return rc;
  }
  default: return jj_fail(r, st, "unsupported statement");
  }
}

static int exec_body(jr *r, jnode *const *v, size_t n, jscope *s, jsb *out) {
  for (size_t i = 0; i < n; i++) {
    if (enter(r, v[i])) return -1;
    int rc = exec_stmt(r, v[i], s, out);
    r->depth--;
    if (rc) return rc;
  }
  return 0;
}

/* ---- entry point ------------------------------------------------------------------------ */
char *mx_jinja_render(const mx_jinja *t, const char *context_json, const mx_jinja_options *o,
                      size_t *len, mlxrt_error *err) {
  if (!t) {
    mx_fail(err, "no template");
    return NULL;
  }
  jr r;
  memset(&r, 0, sizeof r);
  r.t = t;
  r.err = err;
  r.now = o && o->now ? o->now : (int64_t)time(NULL);
  jv ctx = jv_undef();
  jscope root = {NULL, 0, 0, NULL, NULL, NULL};
  jsb out = {0};
  char *res = NULL;
  const char *cj = context_json ? context_json : "{}";
  if (jj_json_parse(&r, cj, strlen(cj), &ctx)) goto done;
  if (ctx.t != JV_DICT) {
    jj_fail(&r, NULL, "the context must be a JSON object");
    goto done;
  }
  jv_dict *d = JV_DICT_OF(ctx);
  for (size_t i = 0; i < d->n; i++)
    if (scope_set(&r, NULL, &root, JV_STR_OF(d->k[i])->s, JV_STR_OF(d->k[i])->len, jv_ref(d->v[i])))
      goto done;
  r.root = &root;
  int rc = exec_body(&r, t->root->v, t->root->nv, &root, &out);
  if (rc > 0) {
    jj_fail(&r, NULL, "break or continue outside a loop");
    goto done;
  }
  if (rc) goto done;
  if (out.oom) {
    jj_fail(&r, NULL, "out of memory");
    goto done;
  }
  res = out.p ? out.p : strdup("");
  if (!res) jj_fail(&r, NULL, "out of memory");
  if (len) *len = out.n;
  out.p = NULL;
done:
  free(out.p);
  scope_clear(&root);
  jv_decref(ctx);
  /* namespaces can hold themselves: empty them so every cycle breaks */
  for (size_t i = 0; i < r.nns; i++) {
    jv_dict *ns = r.nss[i];
    size_t n = ns->n;
    ns->n = 0;
    for (size_t k = 0; k < n; k++) {
      jv_decref(ns->k[k]);
      jv_decref(ns->v[k]);
    }
    jv_decref(jv_obj_val(JV_NS, ns));
  }
  free(r.nss);
  return res;
}
