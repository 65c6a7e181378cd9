/* Decoding: ids → token strings → HF's decoder chain (Replace, ByteFallback, Fuse, Strip),
 * and a streaming variant that emits only whole UTF-8 characters. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "mlx/tokenizer_internal.h"

static const char REPLACEMENT[] = "\xEF\xBF\xBD"; /* U+FFFD */

typedef struct {
  char *s;
  size_t n;
} str;

typedef struct {
  str *v;
  size_t n, cap;
} str_list;

static int list_push(str_list *l, const char *s, size_t n) {
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 64;
    str *nv = realloc(l->v, nc * sizeof *nv);
    if (!nv) return -1;
    l->v = nv;
    l->cap = nc;
  }
  char *c = malloc(n + 1);
  if (!c) return -1;
  memcpy(c, s, n);
  c[n] = 0;
  l->v[l->n++] = (str){c, n};
  return 0;
}

static void list_free(str_list *l) {
  for (size_t i = 0; i < l->n; i++) free(l->v[i].s);
  free(l->v);
  memset(l, 0, sizeof *l);
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* "<0xXX>" → the byte, else -1 (HF ByteFallback's test). */
static int byte_token(const char *s, size_t n) {
  if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
  int h = hexval(s[3]), l = hexval(s[4]);
  return h < 0 || l < 0 ? -1 : h * 16 + l;
}

static int utf8_valid(const unsigned char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    size_t l = tk_utf8_len(s + i, n - i);
    if (l == 1 && s[i] >= 0x80) return 0;
    i += l;
  }
  return 1;
}

/* Replaces every occurrence of pat by rep in s (new malloc'd string). */
static int replace_all(const str *in, const char *pat, size_t plen, const char *rep, size_t rlen,
                       str *out) {
  size_t count = 0;
  for (size_t i = 0; i + plen <= in->n;)
    if (!memcmp(in->s + i, pat, plen)) count++, i += plen;
    else i++;
  size_t n = in->n + count * rlen - count * plen;
  char *o = malloc(n + 1);
  if (!o) return -1;
  size_t w = 0, i = 0;
  while (i < in->n) {
    if (i + plen <= in->n && !memcmp(in->s + i, pat, plen)) {
      memcpy(o + w, rep, rlen);
      w += rlen;
      i += plen;
    } else {
      o[w++] = in->s[i++];
    }
  }
  o[w] = 0;
  out->s = o;
  out->n = w;
  return 0;
}

/* HF Strip: up to `start` leading and `stop` trailing chars equal to content are removed. */
static void strip_token(str *t, const tk_dec *d) {
  size_t cut = 0;
  for (int k = 0; k < d->start && cut + d->clen <= t->n; k++) {
    if (memcmp(t->s + cut, d->content, d->clen)) break;
    cut += d->clen;
  }
  size_t end = t->n;
  for (int k = 0; k < d->stop && end >= cut + d->clen; k++) {
    if (memcmp(t->s + end - d->clen, d->content, d->clen)) break;
    end -= d->clen;
  }
  memmove(t->s, t->s + cut, end - cut);
  t->n = end - cut;
  t->s[t->n] = 0;
}

static int apply_step(const tk_dec *d, str_list *l) {
  str_list out = {0};
  if (d->kind == TK_DEC_REPLACE) {
    for (size_t i = 0; i < l->n; i++) {
      str r;
      if (replace_all(&l->v[i], d->pattern, d->plen, d->content, d->clen, &r)) return -1;
      free(l->v[i].s);
      l->v[i] = r;
    }
    return 0;
  }
  if (d->kind == TK_DEC_STRIP) {
    for (size_t i = 0; i < l->n; i++) strip_token(&l->v[i], d);
    return 0;
  }
  if (d->kind == TK_DEC_FUSE) {
    size_t total = 0;
    for (size_t i = 0; i < l->n; i++) total += l->v[i].n;
    char *all = malloc(total + 1);
    if (!all) return -1;
    size_t w = 0;
    for (size_t i = 0; i < l->n; i++) memcpy(all + w, l->v[i].s, l->v[i].n), w += l->v[i].n;
    all[w] = 0;
    list_free(l);
    l->v = malloc(sizeof *l->v);
    if (!l->v) {
      free(all);
      return -1;
    }
    l->v[0] = (str){all, total};
    l->n = l->cap = 1;
    return 0;
  }
  /* ByteFallback: a run of <0xXX> tokens becomes its bytes if they are valid UTF-8, else one
   * U+FFFD per byte */
  unsigned char *run = malloc(l->n + 1);
  size_t nrun = 0;
  if (!run) return -1;
  int rc = 0;
  for (size_t i = 0; i <= l->n && !rc; i++) {
    int b = i < l->n ? byte_token(l->v[i].s, l->v[i].n) : -1;
    if (b >= 0) {
      run[nrun++] = (unsigned char)b;
      continue;
    }
    if (nrun) {
      if (utf8_valid(run, nrun)) rc = list_push(&out, (const char *)run, nrun);
      else
        for (size_t k = 0; k < nrun && !rc; k++) rc = list_push(&out, REPLACEMENT, 3);
      nrun = 0;
    }
    if (i < l->n && !rc) rc = list_push(&out, l->v[i].s, l->v[i].n);
  }
  free(run);
  list_free(l);
  *l = out;
  return rc;
}

/* Token text of id for decoding; NULL when skipped. -1 on unknown id. */
static int token_text(const mx_tokenizer *t, int32_t id, int skip_special, const char **s,
                      size_t *n) {
  *s = NULL;
  if (id < 0 || id >= t->n_ids) return -1;
  int32_t a = t->added_by_id[id];
  if (a >= 0) {
    if (skip_special && t->added[a].special) return 0;
    *s = t->added[a].content;
    *n = t->added[a].len;
    return 0;
  }
  if (id >= t->n_model || !t->str[id]) return -1;
  *s = t->str[id];
  *n = t->slen[id];
  return 0;
}

int mx_tok_decode(const mx_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                  char **text, size_t *len, mlxrt_error *err) {
  str_list l = {0};
  *text = NULL;
  *len = 0;
  for (size_t i = 0; i < n; i++) {
    const char *s;
    size_t sn;
    if (token_text(t, ids[i], skip_special, &s, &sn)) {
      list_free(&l);
      return mx_fail(err, "%s: cannot decode id %d at position %zu (vocabulary has %d ids)",
                     t->name, ids[i], i, t->n_ids);
    }
    if (s && list_push(&l, s, sn)) goto oom;
  }
  for (int k = 0; k < t->ndecs; k++)
    if (apply_step(&t->decs[k], &l)) goto oom;
  /* without a decoder HF joins tokens with spaces; with one, with nothing */
  const char *sep = t->ndecs ? "" : " ";
  size_t total = 0;
  for (size_t i = 0; i < l.n; i++) total += l.v[i].n + strlen(sep);
  char *o = malloc(total + 1);
  if (!o) goto oom;
  size_t w = 0;
  for (size_t i = 0; i < l.n; i++) {
    if (i && *sep) o[w++] = *sep;
    memcpy(o + w, l.v[i].s, l.v[i].n);
    w += l.v[i].n;
  }
  o[w] = 0;
  list_free(&l);
  *text = o;
  *len = w;
  return 0;
oom:
  list_free(&l);
  return mx_fail(err, "%s: out of memory decoding %zu ids", t->name, n);
}

/* ---------------------------------------------------------------------------------------- */
/* streaming */

void mx_tok_stream_init(mx_tok_stream *s, const mx_tokenizer *t, int skip_special) {
  memset(s, 0, sizeof *s);
  s->tok = t;
  s->skip_special = skip_special;
  /* a Strip after Fuse acts once on the whole text: its leading part is our stream start */
  int fused = 0;
  for (int k = 0; k < t->ndecs; k++) {
    if (t->decs[k].kind == TK_DEC_FUSE) fused = 1;
    if (t->decs[k].kind == TK_DEC_STRIP && fused) s->strip_left += t->decs[k].start;
  }
}

void mx_tok_stream_free(mx_tok_stream *s) {
  free(s->buf);
  s->buf = NULL;
  s->cap = 0;
}

typedef struct {
  mx_tok_stream *s;
  size_t n;
  int oom;
} out_t;

static void out_put(out_t *o, const char *p, size_t n) {
  mx_tok_stream *s = o->s;
  while (n && s->strip_left > 0) { /* Strip (after Fuse): drop leading copies of its char */
    const tk_dec *d = NULL;
    for (int k = 0; k < s->tok->ndecs; k++)
      if (s->tok->decs[k].kind == TK_DEC_STRIP) d = &s->tok->decs[k];
    if (!d || n < d->clen || memcmp(p, d->content, d->clen)) {
      s->strip_left = 0;
      break;
    }
    p += d->clen, n -= d->clen;
    s->strip_left--;
  }
  if (!n) return;
  if (s->strip_left > 0) s->strip_left = 0;
  if (o->n + n + 1 > s->cap) {
    size_t nc = (o->n + n + 1) * 2;
    char *nb = realloc(s->buf, nc);
    if (!nb) {
      o->oom = 1;
      return;
    }
    s->buf = nb;
    s->cap = nc;
  }
  memcpy(s->buf + o->n, p, n);
  o->n += n;
  s->buf[o->n] = 0;
}

/* State of the held bytes: 1 = a complete character, 0 = a valid beginning, -1 = invalid. */
static int hold_state(const unsigned char *h, int n) {
  unsigned c = h[0];
  int len;
  unsigned lo = 0x80, hi = 0xBF;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
  else return -1;
  if (n >= 2 && (h[1] < lo || h[1] > hi)) return -1;
  for (int i = 2; i < n; i++)
    if ((h[i] & 0xC0) != 0x80) return -1;
  return n >= len ? 1 : 0;
}

static void hold_byte(out_t *o, unsigned char b) {
  mx_tok_stream *s = o->s;
  s->hold[s->nhold++] = b;
  while (s->nhold > 0) {
    int st = hold_state(s->hold, s->nhold);
    if (st == 0) return;
    if (st == 1) {
      out_put(o, (const char *)s->hold, (size_t)s->nhold);
      s->nhold = 0;
      return;
    }
    /* the first byte can never start a character: replace it and retry the rest */
    out_put(o, REPLACEMENT, 3);
    memmove(s->hold, s->hold + 1, (size_t)--s->nhold);
  }
}

static void flush_hold(out_t *o) {
  for (int i = 0; i < o->s->nhold; i++) out_put(o, REPLACEMENT, 3);
  o->s->nhold = 0;
}

int mx_tok_stream_put(mx_tok_stream *s, int32_t id, const char **text, size_t *len,
                      mlxrt_error *err) {
  const mx_tokenizer *t = s->tok;
  out_t o = {s, 0, 0};
  const char *p;
  size_t n;
  *text = "";
  *len = 0;
  if (token_text(t, id, s->skip_special, &p, &n))
    return mx_fail(err, "%s: cannot decode id %d (vocabulary has %d ids)", t->name, id, t->n_ids);
  if (!p) return 0;
  if (t->ndecs == 0 && s->ntokens++ > 0) out_put(&o, " ", 1);
  int b = t->dec_byte_fallback ? byte_token(p, n) : -1;
  if (b >= 0) {
    hold_byte(&o, (unsigned char)b);
  } else {
    flush_hold(&o);
    str cur = {(char *)p, n};
    int owned = 0;
    for (int k = 0; k < t->ndecs && !o.oom; k++) {
      const tk_dec *d = &t->decs[k];
      if (d->kind != TK_DEC_REPLACE) continue;
      str r;
      if (replace_all(&cur, d->pattern, d->plen, d->content, d->clen, &r)) {
        o.oom = 1;
        break;
      }
      if (owned) free(cur.s);
      cur = r;
      owned = 1;
    }
    if (!o.oom) out_put(&o, cur.s, cur.n);
    if (owned) free(cur.s);
  }
  if (o.oom) return mx_fail(err, "%s: out of memory in the streaming decoder", t->name);
  *text = o.n ? s->buf : "";
  *len = o.n;
  return 0;
}

int mx_tok_stream_flush(mx_tok_stream *s, const char **text, size_t *len, mlxrt_error *err) {
  out_t o = {s, 0, 0};
  flush_hold(&o);
  *text = o.n ? s->buf : "";
  *len = o.n;
  if (o.oom) return mx_fail(err, "%s: out of memory in the streaming decoder", s->tok->name);
  return 0;
}
