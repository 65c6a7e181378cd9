/* Shared declarations of the Jinja interpreter (src/mlx/jinja_*.c): values, the syntax tree,
 * the render state and the entry points each part offers the others. */
#ifndef MLXRT_MLX_JINJA_INTERNAL_H
#define MLXRT_MLX_JINJA_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "base/strbuf.h"
#include "mlx/jinja.h"

/* Limits that keep hostile templates finite. */
#define JJ_MAX_OUTPUT (64u << 20)       /* bytes of output and of any one string */
#define JJ_MAX_WORK ((size_t)1 << 28)   /* bytes built plus 16 per iteration, per render */
#define JJ_ITER_WORK 16
#define JJ_MAX_DEPTH 400                /* nested evaluation frames (statements, calls) */
#define JJ_MAX_MACRO_DEPTH 100          /* nested macro calls */
#define JJ_MAX_PARSE_DEPTH 200          /* nested constructs in the source */
#define JJ_MAX_ITEMS 10000000           /* elements of one list (range) */

/* ---- values ---------------------------------------------------------------------------- */
enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_FUNC,
       JV_LOOP };

typedef struct jv_obj {
  int32_t rc; /* < 0: immortal (owned by a parsed template, shared between renders) */
  uint8_t kind;
} jv_obj;

typedef struct jv {
  uint8_t t;
  union {
    int64_t i; /* JV_INT, JV_BOOL */
    double f;  /* JV_FLOAT */
    jv_obj *o; /* JV_STR and later */
  } u;
} jv;

typedef struct jv_str {
  jv_obj h;
  size_t len;
  int markup; /* markupsafe.Markup: `+` with a plain str escapes the other side */
  char s[]; /* NUL-terminated */
} jv_str;

typedef struct jv_list {
  jv_obj h;
  int tuple;
  int gen;      /* a generator (map, select, ...): always true, no len(), iterated once */
  int consumed; /* a generator already iterated */
  size_t n, cap;
  jv *v;
} jv_list;

typedef struct jv_dict { /* a dict or a namespace: insertion-ordered pairs */
  jv_obj h;
  size_t n, cap;
  jv *k, *v;
} jv_dict;

struct jnode;
typedef struct jv_func {
  jv_obj h;
  int id;               /* JF_* */
  jv self;              /* the bound object of a method, or the loop of loop.cycle */
  const struct jnode *mac; /* JF_MACRO */
} jv_func;

typedef struct jv_loop {
  jv_obj h;
  jv items; /* a list */
  size_t i;
  int depth;
} jv_loop;

#define JV_STR_OF(x) ((jv_str *)(x).u.o)
#define JV_LIST_OF(x) ((jv_list *)(x).u.o)
#define JV_DICT_OF(x) ((jv_dict *)(x).u.o)

/* Callables: globals, methods of str/dict/list, loop helpers and macros. */
enum {
  JF_MACRO, JF_RANGE, JF_DICT, JF_NAMESPACE, JF_RAISE, JF_STRFTIME, JF_LOOP_CYCLE,
  JF_LOOP_CHANGED,
  /* str methods */
  JF_S_STRIP, JF_S_LSTRIP, JF_S_RSTRIP, JF_S_SPLIT, JF_S_RSPLIT, JF_S_STARTSWITH,
  JF_S_ENDSWITH, JF_S_UPPER, JF_S_LOWER, JF_S_TITLE, JF_S_CAPITALIZE, JF_S_REPLACE, JF_S_FIND,
  JF_S_RFIND, JF_S_COUNT, JF_S_FORMAT, JF_S_JOIN, JF_S_SPLITLINES, JF_S_ISDIGIT, JF_S_ISALPHA,
  JF_S_ISSPACE, JF_S_ISUPPER, JF_S_ISLOWER, JF_S_ISALNUM, JF_S_INDEX, JF_S_ZFILL,
  /* dict methods */
  JF_D_ITEMS, JF_D_KEYS, JF_D_VALUES, JF_D_GET,
  /* list methods */
  JF_L_INDEX, JF_L_COUNT,
  JF_UNSAFE /* a mutating method the sandbox refuses (append, pop, update, ...) */
};

/* ---- syntax tree ----------------------------------------------------------------------- */
enum {
  /* expressions */
  N_LIT, N_NAME, N_LIST, N_TUPLE, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_KW, N_FILTER,
  N_TEST, N_BIN, N_NEG, N_POS, N_NOT, N_AND, N_OR, N_CMP, N_COND, N_HOLE,
  /* statements */
  S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_BREAK, S_CONTINUE, S_FILTERBLOCK,
  S_WITH, S_SCOPE
};
/* binary and comparison operators */
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT, OP_EQ, OP_NE,
       OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

typedef struct jnode {
  int kind, op, line, col;
  int flag;             /* N_TEST: negated */
  int id;               /* N_FILTER: filter id; N_TEST: test id */
  const char *name;     /* N_NAME, N_ATTR, N_KW, filters, tests, macros */
  size_t name_len;
  jv lit;               /* N_LIT, S_TEXT */
  struct jnode *a, *b, *c, *d;
  struct jnode **v;        /* items, positional args, bodies, macro parameters */
  size_t nv;
  struct jnode **w;        /* keyword args (N_KW), else bodies, macro body */
  size_t nw;
} jnode;

struct mx_jinja {
  char *name;
  void *arena; /* every node, name and literal lives here */
  jnode *root;    /* S_SCOPE of the top-level statements */
};

/* ---- render state ---------------------------------------------------------------------- */
typedef struct jscope {
  struct jscope *parent;
  size_t n, cap;
  const char **names;
  size_t *lens;
  jv *vals;
} jscope;

typedef struct jr {
  const mx_jinja *t;
  mlxrt_error *err;
  int raised;          /* err holds raise_exception's message as is */
  size_t work;
  int depth, macro_depth;
  int64_t now;
  jscope *root;        /* where macros find the template's variables */
  jv hole;             /* the value N_HOLE stands for (filter blocks) */
  jv_dict **nss;       /* namespaces made in this render: emptied at the end (cycles) */
  size_t nns, cns;
} jr;

typedef struct jkw {
  const char *name;
  size_t len;
  jv v;
} jkw;

/* growable byte buffer (base/strbuf.h) */
typedef mx_strbuf jsb;
static inline void jsb_add(jsb *b, const char *s, size_t n) { mx_strbuf_put(b, s, n); }
static inline void jsb_addc(jsb *b, char c) { mx_strbuf_put(b, &c, 1); }
static inline void jsb_addz(jsb *b, const char *s) { mx_strbuf_puts(b, s); }

/* ---- jinja_value.c ---------------------------------------------------------------------- */
int jj_fail(jr *r, const jnode *at, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int jj_work(jr *r, const jnode *at, size_t amount);
static inline jv jv_undef(void) { jv x = {JV_UNDEF, {0}}; return x; }
static inline jv jv_none(void) { jv x = {JV_NONE, {0}}; return x; }
static inline jv jv_bool(int b) { jv x = {JV_BOOL, {.i = b ? 1 : 0}}; return x; }
static inline jv jv_int(int64_t i) { jv x = {JV_INT, {.i = i}}; return x; }
static inline jv jv_float(double f) { jv x = {JV_FLOAT, {.f = f}}; return x; }
static inline int jv_is_obj(jv x) { return x.t >= JV_STR; }
void jv_incref(jv x);
void jv_decref(jv x);
static inline jv jv_ref(jv x) { jv_incref(x); return x; }
int jv_mkstr(jr *r, const jnode *at, const char *s, size_t n, jv *out);
int jv_sb_str(jr *r, const jnode *at, jsb *b, jv *out); /* takes the buffer's text (frees it) */
jv_list *jv_list_new(jr *r, const jnode *at, int tuple, size_t cap);
int jv_list_push(jr *r, const jnode *at, jv_list *l, jv x); /* takes x */
jv_dict *jv_dict_new(jr *r, const jnode *at, int kind);
int jv_dict_set(jr *r, const jnode *at, jv_dict *d, jv k, jv v); /* takes k and v */
const jv *jv_dict_get(const jv_dict *d, jv k);                 /* borrowed or NULL */
const jv *jv_dict_gets(const jv_dict *d, const char *k, size_t n);
static inline jv jv_obj_val(int t, void *o) { jv x; x.t = (uint8_t)t; x.u.o = o; return x; }
jv_func *jv_func_new(jr *r, const jnode *at, int id, jv self); /* takes self */

/* Python semantics */
int jv_truthy(jv x);
int jv_eq(jv a, jv b);
int jv_cmp(jr *r, const jnode *at, jv a, jv b, int *res); /* <0, 0, >0; error on mixed types */
const char *jv_type_name(jv x);
int jv_str_of(jr *r, const jnode *at, jv x, jsb *b);      /* str(x) */
int jv_repr(jr *r, const jnode *at, jv x, jsb *b);        /* repr(x) */
int jv_to_str(jr *r, const jnode *at, jv x, jv *out);     /* str(x) as a value */
void jv_float_repr(double f, char *buf, size_t cap);
size_t jv_len_chars(const char *s, size_t n); /* code points */
int jv_len(jv x, int64_t *n);                  /* -1: no len() */
int jv_iter_list(jr *r, const jnode *at, jv x, jv *out); /* a list of what `for` visits */
int jv_html_escape(jr *r, const jnode *at, jv x, jv *out); /* markupsafe.escape */

/* JSON */
int jj_json_parse(jr *r, const char *text, size_t len, jv *out);
typedef struct jj_json_opt {
  int ensure_ascii, sort_keys;
  const char *indent; /* NULL: no newlines */
  size_t indent_len;
  const char *item_sep, *key_sep;
  size_t item_sep_len, key_sep_len;
} jj_json_opt;
int jj_json_dump(jr *r, const jnode *at, jv x, const jj_json_opt *o, jsb *b, int depth);

/* text helpers shared by filters and methods */
int jj_isspace_at(const char *s, size_t n, size_t *clen);     /* Python str.isspace of one char */
size_t jj_rspace(const char *s, size_t n);                    /* length without trailing space */
size_t jj_lspace(const char *s, size_t n);                    /* leading whitespace bytes */
uint32_t jj_utf8_dec(const char *s, size_t n, size_t *clen);  /* lenient decode */
size_t jj_utf8_enc(uint32_t c, char *out);
uint32_t jj_upper(uint32_t c);
uint32_t jj_lower(uint32_t c);
int jj_isalpha(uint32_t c);

/* ---- jinja_lex.c / jinja_parse.c ------------------------------------------------------- */
enum { T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING, T_INT,
       T_FLOAT, T_OP, T_EOF };
typedef struct jtok {
  int type, line, col;
  const char *s; /* T_TEXT, T_STRING: the text (decoded); T_NAME, T_OP: the source */
  size_t n;
  int64_t ival;
  double fval;
} jtok;
typedef struct jlex {
  jtok *tok;
  size_t n, cap;
} jlex;
/* Splits the source into text and tag tokens with the environment's whitespace rules applied
 * (trim_blocks, lstrip_blocks, - and + markers, comments and raw blocks dropped or unwrapped).
 * Strings live in *arena. */
int jj_lex(const char *src, size_t len, const char *name, void **arena, jlex *out,
           mlxrt_error *err);
void *jj_arena_alloc(void **arena, size_t n);
void jj_arena_free(void *arena);
int jj_filter_id(const char *name, size_t n);
int jj_test_id(const char *name, size_t n);

/* ---- jinja_eval.c ----------------------------------------------------------------------- */
int jj_eval(jr *r, const jnode *e, jv *out);
int jj_call(jr *r, const jnode *at, jv f, jv *args, size_t nargs, jkw *kw, size_t nkw, jv *out);
int jj_getattr(jr *r, const jnode *at, jv obj, const char *name, size_t n, jv *out);
int jj_getitem(jr *r, const jnode *at, jv obj, jv key, jv *out);

/* ---- jinja_filters.c -------------------------------------------------------------------- */
int jj_filter(jr *r, const jnode *at, int id, jv x, jv *args, size_t nargs, jkw *kw, size_t nkw,
              jv *out);
int jj_test(jr *r, const jnode *at, int id, jv x, jv *args, size_t nargs, int *res);
int jj_method_id(int type, const char *name, size_t n); /* -1: no such method */
int jj_call_builtin(jr *r, const jnode *at, jv_func *f, jv *args, size_t nargs, jkw *kw,
                    size_t nkw, jv *out);

/* Binds positional and keyword arguments to the named parameters of a builtin:
 * slot[i] borrowed (JV_UNDEF with have[i] = 0 when not given). */
int jj_bind(jr *r, const jnode *at, const char *fname, const char *const *params, size_t np,
            jv *args, size_t nargs, jkw *kw, size_t nkw, jv *slot, int *have);

#endif
