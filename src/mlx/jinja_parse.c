/* The Jinja parser: tokens to an immutable syntax tree, following jinja2's grammar and
 * operator precedence (filters bind tighter than arithmetic; `not` looser than comparisons;
 * `a if c else b` loosest). Unknown filters, tests and tags fail here, as jinja2 fails them
 * at compile time. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "mlx/jinja_internal.h"

typedef struct ps {
  const jtok *t;
  size_t i, n;
  void **arena;
  const char *name;
  mlxrt_error *err;
  int depth;
  int soft; /* inside an if's branches: jinja2 checks unknown filters and tests only when run */
} ps;

typedef struct nvec {
  jnode **v;
  size_t n, cap;
} nvec;

static int pfail(ps *P, const jtok *at, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int pfail(ps *P, const jtok *at, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  mx_fail(P->err, "%s:%d:%d: %s", P->name, at->line, at->col, msg);
  return -1;
}

static const jtok *cur(ps *P) { return &P->t[P->i]; }
static const jtok *peek(ps *P, size_t k) { return &P->t[P->i + k < P->n ? P->i + k : P->n - 1]; }
static void adv(ps *P) {
  if (P->i + 1 < P->n) P->i++;
}
static int is_op(const jtok *t, const char *op) {
  return t->type == T_OP && t->n == strlen(op) && !memcmp(t->s, op, t->n);
}
static int is_name(const jtok *t, const char *w) {
  return t->type == T_NAME && t->n == strlen(w) && !memcmp(t->s, w, t->n);
}
static const char *tok_desc(const jtok *t, char *buf, size_t cap) {
  switch (t->type) {
  case T_EOF: return "end of template";
  case T_BLOCK_END: return "end of block tag";
  case T_VAR_END: return "end of variable tag";
  case T_TEXT: return "template text";
  case T_STRING: return "string";
  default: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
  }
}

static int expect_op(ps *P, const char *op) {
  char b[64];
  if (!is_op(cur(P), op)) return pfail(P, cur(P), "expected '%s', found %s", op, tok_desc(cur(P), b, sizeof b));
  adv(P);
  return 0;
}

static int expect_end(ps *P, int type) {
  char b[64];
  if (cur(P)->type != type)
    return pfail(P, cur(P), "expected %s, found %s", type == T_BLOCK_END ? "%}" : "}}",
                 tok_desc(cur(P), b, sizeof b));
  adv(P);
  return 0;
}

static jnode *nn(ps *P, int kind, const jtok *at) {
  jnode *e = jj_arena_alloc(P->arena, sizeof *e);
  if (!e) {
    mx_fail(P->err, "%s: out of memory", P->name);
    return NULL;
  }
  e->kind = kind;
  e->line = at->line;
  e->col = at->col;
  return e;
}

static int vpush(ps *P, nvec *v, jnode *e) {
  if (!e) return -1;
  if (v->n == v->cap) {
    size_t cap = v->cap ? v->cap * 2 : 8;
    jnode **p = realloc(v->v, cap * sizeof *p);
    if (!p) return mx_fail(P->err, "%s: out of memory", P->name);
    v->v = p;
    v->cap = cap;
  }
  v->v[v->n++] = e;
  return 0;
}

/* Moves a vector into the arena. */
static int vfinish(ps *P, nvec *v, jnode ***out, size_t *n) {
  *out = NULL;
  *n = v->n;
  if (v->n) {
    *out = jj_arena_alloc(P->arena, v->n * sizeof **out);
    if (!*out) {
      free(v->v);
      return mx_fail(P->err, "%s: out of memory", P->name);
    }
    memcpy(*out, v->v, v->n * sizeof **out);
  }
  free(v->v);
  v->v = NULL;
  v->n = v->cap = 0;
  return 0;
}

/* An immortal string value in the arena. */
static int lit_str(ps *P, const char *s, size_t n, jv *out) {
  jv_str *p = jj_arena_alloc(P->arena, sizeof *p + n + 1);
  if (!p) return mx_fail(P->err, "%s: out of memory", P->name);
  p->h.rc = -1;
  p->h.kind = JV_STR;
  p->len = n;
  memcpy(p->s, s, n);
  p->s[n] = 0;
  *out = jv_obj_val(JV_STR, p);
  return 0;
}

static int enter(ps *P) {
  if (++P->depth > JJ_MAX_PARSE_DEPTH)
    return pfail(P, cur(P), "template nested too deeply (more than %d levels)", JJ_MAX_PARSE_DEPTH);
  return 0;
}

/* ---- expressions ------------------------------------------------------------------------ */
static jnode *p_expr(ps *P, int with_cond);
static jnode *p_tuple(ps *P, int with_cond, int explicit_parens);
static jnode *p_unary(ps *P, int with_filter);
static jnode *p_primary(ps *P);

static jnode *fin(ps *P, jnode *e) {
  P->depth--;
  return e;
}

/* Call arguments after '(' : positional into e->v, keyword into e->w. */
static int p_call_args(ps *P, jnode *e) {
  nvec pos = {0}, kw = {0};
  if (expect_op(P, "(")) return -1;
  while (!is_op(cur(P), ")")) {
    if (pos.n + kw.n) {
      if (expect_op(P, ",")) goto fail;
      if (is_op(cur(P), ")")) break;
    }
    if (is_op(cur(P), "*") || is_op(cur(P), "**")) {
      pfail(P, cur(P), "unsupported call syntax: *args / **kwargs");
      goto fail;
    }
    if (cur(P)->type == T_NAME && is_op(peek(P, 1), "=")) {
      jnode *k = nn(P, N_KW, cur(P));
      if (!k) goto fail;
      k->name = cur(P)->s;
      k->name_len = cur(P)->n;
      adv(P);
      adv(P);
      if (!(k->a = p_expr(P, 1)) || vpush(P, &kw, k)) goto fail;
    } else {
      if (kw.n) {
        pfail(P, cur(P), "positional argument after a keyword argument");
        goto fail;
      }
      if (vpush(P, &pos, p_expr(P, 1))) goto fail;
    }
  }
  adv(P);
  if (vfinish(P, &pos, &e->v, &e->nv)) {
    free(kw.v);
    return -1;
  }
  return vfinish(P, &kw, &e->w, &e->nw);
fail:
  free(pos.v);
  free(kw.v);
  return -1;
}

static jnode *p_subscript_part(ps *P) {
  /* [a], [a:b], [a:b:c] with any part left out */
  const jtok *at = cur(P);
  jnode *first = NULL;
  if (!is_op(cur(P), ":")) {
    first = p_expr(P, 1);
    if (!first) return NULL;
    if (!is_op(cur(P), ":")) return first;
  }
  jnode *s = nn(P, N_SLICE, at);
  if (!s) return NULL;
  s->b = first;
  adv(P); /* ':' */
  if (!is_op(cur(P), "]") && !is_op(cur(P), ",") && !is_op(cur(P), ":"))
    if (!(s->c = p_expr(P, 1))) return NULL;
  if (is_op(cur(P), ":")) {
    adv(P);
    if (!is_op(cur(P), "]") && !is_op(cur(P), ","))
      if (!(s->d = p_expr(P, 1))) return NULL;
  }
  return s;
}

static jnode *p_postfix(ps *P, jnode *e) {
  while (e) {
    const jtok *at = cur(P);
    if (is_op(at, ".")) {
      adv(P);
      const jtok *t = cur(P);
      if (t->type == T_NAME) {
        jnode *a = nn(P, N_ATTR, at);
        if (!a) return NULL;
        a->a = e;
        a->name = t->s;
        a->name_len = t->n;
        adv(P);
        e = a;
      } else if (t->type == T_INT) {
        jnode *a = nn(P, N_ITEM, at), *k = nn(P, N_LIT, t);
        if (!a || !k) return NULL;
        k->lit = jv_int(t->ival);
        a->a = e;
        a->b = k;
        adv(P);
        e = a;
      } else {
        pfail(P, t, "expected a name after '.'");
        return NULL;
      }
    } else if (is_op(at, "[")) {
      adv(P);
      jnode *a = nn(P, N_ITEM, at);
      if (!a) return NULL;
      a->a = e;
      if (!(a->b = p_subscript_part(P))) return NULL;
      if (is_op(cur(P), ",")) {
        pfail(P, cur(P), "unsupported subscript: a tuple of indices");
        return NULL;
      }
      if (expect_op(P, "]")) return NULL;
      e = a;
    } else if (is_op(at, "(")) {
      jnode *c = nn(P, N_CALL, at);
      if (!c) return NULL;
      c->a = e;
      if (p_call_args(P, c)) return NULL;
      e = c;
    } else {
      break;
    }
  }
  return e;
}

/* The filter or test named at the current token (kind N_FILTER or N_TEST) applied to e; jinja2
 * rejects unknown names when compiling, except inside an if's branches where it waits for the
 * call. */
static jnode *p_named(ps *P, int kind, jnode *e, const jtok *at) {
  const char *what = kind == N_FILTER ? "filter" : "test";
  const jtok *t = cur(P);
  if (t->type != T_NAME) {
    pfail(P, t, "expected a %s name", what);
    return NULL;
  }
  int id = kind == N_FILTER ? jj_filter_id(t->s, t->n) : jj_test_id(t->s, t->n);
  if (id < 0 && !P->soft) {
    pfail(P, t, "unsupported %s: '%.*s'", what, (int)(t->n > 40 ? 40 : t->n), t->s);
    return NULL;
  }
  jnode *x = nn(P, kind, at ? at : t);
  if (!x) return NULL;
  x->id = id;
  x->name = t->s;
  x->name_len = t->n;
  x->a = e;
  adv(P);
  return x;
}

/* `| name(args)` applied to e (e may be the hole of a filter block). */
static jnode *p_filter(ps *P, jnode *e) {
  jnode *f = p_named(P, N_FILTER, e, NULL);
  if (!f) return NULL;
  if (is_op(cur(P), ".")) {
    pfail(P, cur(P), "unsupported filter name with '.'");
    return NULL;
  }
  if (is_op(cur(P), "(") && p_call_args(P, f)) return NULL;
  return f;
}

static jnode *p_test(ps *P, jnode *e) {
  const jtok *at = cur(P);
  adv(P); /* is */
  int neg = 0;
  if (is_name(cur(P), "not")) {
    neg = 1;
    adv(P);
  }
  jnode *x = p_named(P, N_TEST, e, at);
  if (!x) return NULL;
  x->flag = neg;
  const jtok *c = cur(P);
  if (is_op(c, "(")) {
    if (p_call_args(P, x)) return NULL;
  } else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT || c->type == T_FLOAT ||
              is_op(c, "[") || is_op(c, "{")) &&
             !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
    if (is_name(c, "is")) {
      pfail(P, c, "tests cannot be chained with 'is'");
      return NULL;
    }
    jnode *arg = p_postfix(P, p_primary(P));
    if (!arg) return NULL;
    x->v = jj_arena_alloc(P->arena, sizeof *x->v);
    if (!x->v) return NULL;
    x->v[0] = arg;
    x->nv = 1;
  }
  return x;
}

static jnode *p_filter_expr(ps *P, jnode *e) {
  while (e) {
    if (is_op(cur(P), "|")) {
      adv(P);
      e = p_filter(P, e);
    } else if (is_name(cur(P), "is")) {
      e = p_test(P, e);
    } else if (is_op(cur(P), "(")) {
      jnode *c = nn(P, N_CALL, cur(P));
      if (!c) return NULL;
      c->a = e;
      if (p_call_args(P, c)) return NULL;
      e = c;
    } else {
      break;
    }
  }
  return e;
}

static jnode *p_seq(ps *P, int kind, const char *close, const jtok *at) {
  nvec v = {0};
  jnode *e = nn(P, kind, at);
  if (!e) return NULL;
  while (!is_op(cur(P), close)) {
    if (v.n) {
      if (expect_op(P, ",")) goto fail;
      if (is_op(cur(P), close)) break;
    }
    if (vpush(P, &v, p_expr(P, 1))) goto fail;
    if (kind == N_DICT) {
      if (expect_op(P, ":")) goto fail;
      if (vpush(P, &v, p_expr(P, 1))) goto fail;
    }
  }
  adv(P);
  return vfinish(P, &v, &e->v, &e->nv) ? NULL : e;
fail:
  free(v.v);
  return NULL;
}

static jnode *p_primary(ps *P) {
  const jtok *t = cur(P);
  char b[64];
  if (enter(P)) return NULL;
  jnode *e = NULL;
  if (t->type == T_NAME) {
    e = nn(P, N_LIT, t);
    if (!e) return NULL;
    if (is_name(t, "true") || is_name(t, "True")) e->lit = jv_bool(1);
    else if (is_name(t, "false") || is_name(t, "False")) e->lit = jv_bool(0);
    else if (is_name(t, "none") || is_name(t, "None")) e->lit = jv_none();
    else {
      e->kind = N_NAME;
      e->name = t->s;
      e->name_len = t->n;
    }
    adv(P);
  } else if (t->type == T_STRING) {
    jsb s = {0};
    while (cur(P)->type == T_STRING) { /* adjacent literals join */
      jsb_add(&s, cur(P)->s, cur(P)->n);
      adv(P);
    }
    e = nn(P, N_LIT, t);
    int rc = !e || s.oom || lit_str(P, s.p ? s.p : "", s.n, &e->lit);
    free(s.p);
    if (rc) return NULL;
  } else if (t->type == T_INT || t->type == T_FLOAT) {
    e = nn(P, N_LIT, t);
    if (!e) return NULL;
    e->lit = t->type == T_INT ? jv_int(t->ival) : jv_float(t->fval);
    adv(P);
  } else if (is_op(t, "(")) {
    adv(P);
    e = p_tuple(P, 1, 1);
    if (!e || expect_op(P, ")")) return NULL;
  } else if (is_op(t, "[")) {
    adv(P);
    e = p_seq(P, N_LIST, "]", t);
  } else if (is_op(t, "{")) {
    adv(P);
    e = p_seq(P, N_DICT, "}", t);
  } else {
    pfail(P, t, "unexpected %s", tok_desc(t, b, sizeof b));
    return NULL;
  }
  return fin(P, e);
}

static jnode *p_unary(ps *P, int with_filter) {
  const jtok *t = cur(P);
  jnode *e;
  if (enter(P)) return NULL;
  if (is_op(t, "-") || is_op(t, "+")) {
    adv(P);
    e = nn(P, is_op(t, "-") ? N_NEG : N_POS, t);
    if (!e || !(e->a = p_unary(P, 0))) return NULL;
  } else {
    e = p_primary(P);
  }
  e = p_postfix(P, e);
  if (with_filter) e = p_filter_expr(P, e);
  return fin(P, e);
}

static jnode *binop(ps *P, const jtok *at, int op, jnode *a, jnode *b) {
  if (!a || !b) return NULL;
  jnode *e = nn(P, N_BIN, at);
  if (!e) return NULL;
  e->op = op;
  e->a = a;
  e->b = b;
  return e;
}

static jnode *p_pow(ps *P) {
  jnode *e = p_unary(P, 1);
  while (e && is_op(cur(P), "**")) {
    const jtok *at = cur(P);
    adv(P);
    e = binop(P, at, OP_POW, e, p_unary(P, 1));
  }
  return e;
}

static jnode *p_math2(ps *P) {
  jnode *e = p_pow(P);
  for (;;) {
    const jtok *at = cur(P);
    int op = is_op(at, "*") ? OP_MUL : is_op(at, "/") ? OP_DIV : is_op(at, "//") ? OP_FLOORDIV
           : is_op(at, "%") ? OP_MOD : -1;
    if (!e || op < 0) return e;
    adv(P);
    e = binop(P, at, op, e, p_pow(P));
  }
}

static jnode *p_concat(ps *P) {
  jnode *e = p_math2(P);
  while (e && is_op(cur(P), "~")) {
    const jtok *at = cur(P);
    adv(P);
    e = binop(P, at, OP_CONCAT, e, p_math2(P));
  }
  return e;
}

static jnode *p_math1(ps *P) {
  jnode *e = p_concat(P);
  for (;;) {
    const jtok *at = cur(P);
    int op = is_op(at, "+") ? OP_ADD : is_op(at, "-") ? OP_SUB : -1;
    if (!e || op < 0) return e;
    adv(P);
    e = binop(P, at, op, e, p_concat(P));
  }
}

static jnode *p_compare(ps *P) {
  const jtok *start = cur(P);
  jnode *e = p_math1(P);
  nvec ops = {0};
  while (e) {
    const jtok *at = cur(P);
    int op = is_op(at, "==") ? OP_EQ : is_op(at, "!=") ? OP_NE : is_op(at, "<") ? OP_LT
           : is_op(at, "<=") ? OP_LE : is_op(at, ">") ? OP_GT : is_op(at, ">=") ? OP_GE
           : is_name(at, "in") ? OP_IN
           : (is_name(at, "not") && is_name(peek(P, 1), "in")) ? OP_NOTIN : -1;
    if (op < 0) break;
    adv(P);
    if (op == OP_NOTIN) adv(P);
    jnode *o = nn(P, N_BIN, at);
    if (!o) break;
    o->op = op;
    if (!(o->a = p_math1(P)) || vpush(P, &ops, o)) {
      free(ops.v);
      return NULL;
    }
  }
  if (!e || !ops.n) {
    free(ops.v);
    return e;
  }
  jnode *c = nn(P, N_CMP, start);
  if (!c) {
    free(ops.v);
    return NULL;
  }
  c->a = e;
  return vfinish(P, &ops, &c->v, &c->nv) ? NULL : c;
}

static jnode *p_not(ps *P) {
  const jtok *t = cur(P);
  if (is_name(t, "not")) {
    if (enter(P)) return NULL;
    adv(P);
    jnode *e = nn(P, N_NOT, t);
    if (!e || !(e->a = p_not(P))) return NULL;
    return fin(P, e);
  }
  return p_compare(P);
}

static jnode *p_and(ps *P) {
  jnode *e = p_not(P);
  while (e && is_name(cur(P), "and")) {
    jnode *x = nn(P, N_AND, cur(P));
    adv(P);
    if (!x || !(x->b = p_not(P))) return NULL;
    x->a = e;
    e = x;
  }
  return e;
}

static jnode *p_or(ps *P) {
  jnode *e = p_and(P);
  while (e && is_name(cur(P), "or")) {
    jnode *x = nn(P, N_OR, cur(P));
    adv(P);
    if (!x || !(x->b = p_and(P))) return NULL;
    x->a = e;
    e = x;
  }
  return e;
}

static jnode *p_expr(ps *P, int with_cond) {
  if (enter(P)) return NULL;
  jnode *e = p_or(P);
  while (with_cond && e && is_name(cur(P), "if")) {
    jnode *c = nn(P, N_COND, cur(P));
    adv(P);
    if (!c || !(c->a = p_or(P))) return NULL;
    c->b = e;
    if (is_name(cur(P), "else")) {
      adv(P);
      if (!(c->c = p_expr(P, 1))) return NULL;
    }
    e = c;
  }
  return fin(P, e);
}

/* Comma-separated expressions: one expression, or a tuple when there is a comma. */
static jnode *p_tuple(ps *P, int with_cond, int explicit_parens) {
  const jtok *at = cur(P);
  nvec v = {0};
  int comma = 0;
  for (;;) {
    if (v.n) {
      if (!is_op(cur(P), ",")) break;
      adv(P);
      comma = 1;
    }
    const jtok *c = cur(P);
    if (c->type == T_BLOCK_END || c->type == T_VAR_END || is_op(c, ")") || is_name(c, "in") ||
        (v.n && is_name(c, "if")))
      break;
    if (vpush(P, &v, p_expr(P, with_cond))) {
      free(v.v);
      return NULL;
    }
  }
  if (v.n == 1 && !comma) {
    jnode *e = v.v[0];
    free(v.v);
    return e;
  }
  if (!v.n && !explicit_parens) {
    char b[64];
    pfail(P, at, "expected an expression, found %s", tok_desc(at, b, sizeof b));
    return NULL;
  }
  jnode *t = nn(P, N_TUPLE, at);
  if (!t || vfinish(P, &v, &t->v, &t->nv)) {
    free(v.v);
    return NULL;
  }
  return t;
}

/* ---- statements ------------------------------------------------------------------------- */
static int p_body(ps *P, const char *const *ends, jnode ***out, size_t *n, const jtok **end_tag);
static int p_body_soft(ps *P, int soft, const char *const *ends, jnode ***out, size_t *n,
                       const jtok **end_tag);

/* An assignment target: a name, ns.attr (set only), or a tuple of names. */
static jnode *p_target(ps *P, int allow_attr) {
  const jtok *at = cur(P);
  nvec v = {0};
  int paren = is_op(at, "(");
  if (paren) adv(P);
  for (;;) {
    const jtok *t = cur(P);
    if (t->type != T_NAME) {
      free(v.v);
      pfail(P, t, "expected a variable name to assign to");
      return NULL;
    }
    jnode *e = nn(P, N_NAME, t);
    if (!e) break;
    e->name = t->s;
    e->name_len = t->n;
    adv(P);
    if (allow_attr && !v.n && is_op(cur(P), ".")) {
      adv(P);
      const jtok *a = cur(P);
      if (a->type != T_NAME) {
        free(v.v);
        pfail(P, a, "expected an attribute name");
        return NULL;
      }
      jnode *x = nn(P, N_ATTR, t);
      if (!x) break;
      x->a = e;
      x->name = a->s;
      x->name_len = a->n;
      adv(P);
      free(v.v);
      return x;
    }
    if (vpush(P, &v, e)) break;
    if (!is_op(cur(P), ",")) break;
    adv(P);
  }
  if (paren && expect_op(P, ")")) {
    free(v.v);
    return NULL;
  }
  if (v.n == 1) {
    jnode *e = v.v[0];
    free(v.v);
    return e;
  }
  jnode *t = nn(P, N_TUPLE, at);
  if (!t || !v.n || vfinish(P, &v, &t->v, &t->nv)) {
    free(v.v);
    return NULL;
  }
  return t;
}

static jnode *st_if(ps *P, const jtok *at) {
  static const char *const ends[] = {"elif", "else", "endif", NULL};
  jnode *s = nn(P, S_IF, at);
  const jtok *end;
  if (!s || !(s->a = p_tuple(P, 1, 0)) || expect_end(P, T_BLOCK_END)) return NULL;
  if (p_body_soft(P, 1, ends, &s->v, &s->nv, &end)) return NULL;
  if (is_name(end, "elif")) {
    jnode *e = st_if(P, end);
    if (!e) return NULL;
    s->w = jj_arena_alloc(P->arena, sizeof *s->w);
    if (!s->w) return NULL;
    s->w[0] = e;
    s->nw = 1;
    return s; /* the nested if consumed endif */
  }
  if (is_name(end, "else")) {
    static const char *const ends2[] = {"endif", NULL};
    if (expect_end(P, T_BLOCK_END) || p_body_soft(P, 1, ends2, &s->w, &s->nw, &end)) return NULL;
  }
  return expect_end(P, T_BLOCK_END) ? NULL : s;
}

static jnode *st_for(ps *P, const jtok *at) {
  static const char *const ends[] = {"else", "endfor", NULL};
  jnode *s = nn(P, S_FOR, at);
  const jtok *end;
  if (!s || !(s->a = p_target(P, 0))) return NULL;
  if (!is_name(cur(P), "in")) {
    pfail(P, cur(P), "expected 'in' in a for loop");
    return NULL;
  }
  adv(P);
  if (!(s->b = p_tuple(P, 0, 0))) return NULL;
  if (is_name(cur(P), "if")) {
    adv(P);
    if (!(s->c = p_expr(P, 1))) return NULL;
  }
  if (is_name(cur(P), "recursive")) {
    pfail(P, cur(P), "unsupported construct: recursive for loops");
    return NULL;
  }
  if (expect_end(P, T_BLOCK_END) || p_body(P, ends, &s->v, &s->nv, &end)) return NULL;
  if (is_name(end, "else")) {
    static const char *const ends2[] = {"endfor", NULL};
    if (expect_end(P, T_BLOCK_END) || p_body(P, ends2, &s->w, &s->nw, &end)) return NULL;
  }
  return expect_end(P, T_BLOCK_END) ? NULL : s;
}

/* Filters of a filter block or a block set: a chain applied to the hole. */
static jnode *p_filter_chain(ps *P, const jtok *at) {
  jnode *e = nn(P, N_HOLE, at);
  if (!e || !(e = p_filter(P, e))) return NULL;
  while (e && is_op(cur(P), "|")) {
    adv(P);
    e = p_filter(P, e);
  }
  return e;
}

static jnode *st_set(ps *P, const jtok *at) {
  jnode *s = nn(P, S_SET, at);
  if (!s || !(s->a = p_target(P, 1))) return NULL;
  if (is_op(cur(P), "=")) {
    adv(P);
    if (!(s->b = p_tuple(P, 1, 0))) return NULL;
    return expect_end(P, T_BLOCK_END) ? NULL : s;
  }
  static const char *const ends[] = {"endset", NULL};
  const jtok *end;
  s->kind = S_SETBLOCK;
  if (is_op(cur(P), "|")) {
    adv(P);
    if (!(s->c = p_filter_chain(P, at))) return NULL;
  }
  if (expect_end(P, T_BLOCK_END) || p_body(P, ends, &s->v, &s->nv, &end)) return NULL;
  return expect_end(P, T_BLOCK_END) ? NULL : s;
}

static jnode *st_macro(ps *P, const jtok *at) {
  static const char *const ends[] = {"endmacro", NULL};
  const jtok *end, *t = cur(P);
  jnode *s = nn(P, S_MACRO, at);
  if (!s) return NULL;
  if (t->type != T_NAME) {
    pfail(P, t, "expected a macro name");
    return NULL;
  }
  s->name = t->s;
  s->name_len = t->n;
  adv(P);
  nvec v = {0};
  if (expect_op(P, "(")) return NULL;
  while (!is_op(cur(P), ")")) {
    if (v.n && expect_op(P, ",")) goto fail;
    if (is_op(cur(P), ")")) break;
    const jtok *pn = cur(P);
    if (pn->type != T_NAME) {
      pfail(P, pn, "expected a parameter name");
      goto fail;
    }
    jnode *prm = nn(P, N_NAME, pn);
    if (!prm) goto fail;
    prm->name = pn->s;
    prm->name_len = pn->n;
    adv(P);
    if (is_op(cur(P), "=")) {
      adv(P);
      if (!(prm->a = p_expr(P, 1))) goto fail;
    }
    if (vpush(P, &v, prm)) goto fail;
  }
  adv(P);
  if (vfinish(P, &v, &s->v, &s->nv)) return NULL;
  if (expect_end(P, T_BLOCK_END) || p_body(P, ends, &s->w, &s->nw, &end)) return NULL;
  if (cur(P)->type == T_NAME) adv(P); /* {% endmacro name %} */
  return expect_end(P, T_BLOCK_END) ? NULL : s;
fail:
  free(v.v);
  return NULL;
}

static jnode *st_with(ps *P, const jtok *at) {
  static const char *const ends[] = {"endwith", NULL};
  const jtok *end;
  jnode *s = nn(P, S_WITH, at);
  nvec v = {0};
  if (!s) return NULL;
  while (cur(P)->type != T_BLOCK_END) {
    if (v.n && expect_op(P, ",")) goto fail;
    jnode *a = nn(P, S_SET, cur(P));
    if (!a || !(a->a = p_target(P, 0)) || expect_op(P, "=") || !(a->b = p_expr(P, 1)) ||
        vpush(P, &v, a))
      goto fail;
  }
  if (vfinish(P, &v, &s->v, &s->nv)) return NULL;
  if (expect_end(P, T_BLOCK_END) || p_body(P, ends, &s->w, &s->nw, &end)) return NULL;
  return expect_end(P, T_BLOCK_END) ? NULL : s;
fail:
  free(v.v);
  return NULL;
}

static jnode *st_block(ps *P, int kind, const jtok *at, const char *endname) {
  const char *ends[] = {endname, NULL};
  const jtok *end;
  jnode *s = nn(P, kind, at);
  if (!s) return NULL;
  if (kind == S_FILTERBLOCK && !(s->a = p_filter_chain(P, at))) return NULL;
  if (expect_end(P, T_BLOCK_END) || p_body(P, ends, &s->v, &s->nv, &end)) return NULL;
  return expect_end(P, T_BLOCK_END) ? NULL : s;
}

/* One statement after "{%"; *end set when the tag is one of the ends of the enclosing body. */
static jnode *p_stmt(ps *P, const char *const *ends, int *is_end) {
  const jtok *t = cur(P);
  *is_end = 0;
  if (t->type != T_NAME) {
    pfail(P, t, "expected a tag name after {%%");
    return NULL;
  }
  for (int k = 0; ends && ends[k]; k++)
    if (is_name(t, ends[k])) {
      *is_end = 1;
      return NULL;
    }
  if (enter(P)) return NULL;
  adv(P);
  jnode *s = NULL;
  if (is_name(t, "if")) s = st_if(P, t);
  else if (is_name(t, "for")) s = st_for(P, t);
  else if (is_name(t, "set")) s = st_set(P, t);
  else if (is_name(t, "macro")) s = st_macro(P, t);
  else if (is_name(t, "with")) s = st_with(P, t);
  else if (is_name(t, "filter")) s = st_block(P, S_FILTERBLOCK, t, "endfilter");
  else if (is_name(t, "generation")) s = st_block(P, S_SCOPE, t, "endgeneration");
  else if (is_name(t, "break") || is_name(t, "continue")) {
    s = nn(P, is_name(t, "break") ? S_BREAK : S_CONTINUE, t);
    if (s && expect_end(P, T_BLOCK_END)) s = NULL;
  } else {
    static const char *const known[] = {"call", "include", "import", "from", "extends", "block",
                                        "autoescape", "do", "trans", NULL};
    int k = 0;
    while (known[k] && !is_name(t, known[k])) k++;
    if (known[k])
      pfail(P, t, "unsupported tag: '%s'", known[k]);
    else
      pfail(P, t, "unknown tag '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
    return NULL;
  }
  return fin(P, s);
}

/* Statements up to a block tag named in ends (the tag's name token is left in *end_tag and
 * consumed; its %} is not), or to the end of the template when ends is NULL. */
static int p_body_in(ps *P, const char *const *ends, jnode ***out, size_t *n, const jtok **end_tag);

/* A body in a new frame (soft = 0) or in an if's branch (soft = 1). */
static int p_body_soft(ps *P, int soft, const char *const *ends, jnode ***out, size_t *n,
                       const jtok **end_tag) {
  int saved = P->soft;
  P->soft = soft;
  int rc = p_body_in(P, ends, out, n, end_tag);
  P->soft = saved;
  return rc;
}

static int p_body(ps *P, const char *const *ends, jnode ***out, size_t *n, const jtok **end_tag) {
  return p_body_soft(P, 0, ends, out, n, end_tag);
}

static int p_body_in(ps *P, const char *const *ends, jnode ***out, size_t *n, const jtok **end_tag) {
  nvec v = {0};
  for (;;) {
    const jtok *t = cur(P);
    if (t->type == T_EOF) {
      if (!ends) break;
      free(v.v);
      return pfail(P, t, "unexpected end of template: missing {%% %s %%}", ends[0]);
    }
    if (t->type == T_TEXT) {
      jnode *s = nn(P, S_TEXT, t);
      if (!s || lit_str(P, t->s, t->n, &s->lit) || vpush(P, &v, s)) goto fail;
      adv(P);
    } else if (t->type == T_VAR_BEGIN) {
      adv(P);
      jnode *s = nn(P, S_OUT, t);
      if (!s || !(s->a = p_tuple(P, 1, 0)) || expect_end(P, T_VAR_END) || vpush(P, &v, s)) goto fail;
    } else if (t->type == T_BLOCK_BEGIN) {
      adv(P);
      int is_end;
      jnode *s = p_stmt(P, ends, &is_end);
      if (is_end) {
        *end_tag = cur(P);
        adv(P);
        break;
      }
      if (!s || vpush(P, &v, s)) goto fail;
    } else {
      char b[64];
      pfail(P, t, "unexpected %s", tok_desc(t, b, sizeof b));
      goto fail;
    }
  }
  return vfinish(P, &v, out, n);
fail:
  free(v.v);
  return -1;
}

mx_jinja *mx_jinja_parse(const char *src, size_t len, const char *name, mlxrt_error *err) {
  if (!name) name = "template";
  if (!src) {
    mx_fail(err, "%s: no template text", name);
    return NULL;
  }
  mx_jinja *t = calloc(1, sizeof *t);
  if (!t || !(t->name = strdup(name))) {
    free(t);
    mx_fail(err, "%s: out of memory", name);
    return NULL;
  }
  jlex lx = {0};
  if (jj_lex(src, len, name, &t->arena, &lx, err)) goto fail;
  ps P = {lx.tok, 0, lx.n, &t->arena, name, err, 0, 0};
  jnode *root = nn(&P, S_SCOPE, &lx.tok[0]);
  const jtok *end = NULL;
  if (!root || p_body(&P, NULL, &root->v, &root->nv, &end)) goto fail;
  t->root = root;
  free(lx.tok);
  return t;
fail:
  free(lx.tok);
  mx_jinja_free(t);
  return NULL;
}

void mx_jinja_free(mx_jinja *t) {
  if (!t) return;
  jj_arena_free(t->arena);
  free(t->name);
  free(t);
}
