/* Encoding, in HF `tokenizers` order: added tokens that are not normalized are split out of the
 * raw text; the rest is normalized; added tokens that are normalized are split out of that; the
 * rest is pre-tokenized; each piece goes through BPE (merges applied by rank, lowest first, ties
 * to the leftmost pair); the post-processor template wraps the result. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/utf8.h"
#include "mlx/tokenizer_internal.h"

/* ---------------------------------------------------------------------------------------- */
/* UTF-8 and the Unicode properties added-token flags need */

size_t tk_utf8_len(const unsigned char *s, size_t n) {
  const size_t len = mx_utf8_len(s, n);
  return len ? len : 1;
}

static uint32_t utf8_cp(const unsigned char *s, size_t len) {
  if (len == 1) return s[0];
  uint32_t cp = s[0] & (0xFF >> (len + 1));
  for (size_t i = 1; i < len; i++) cp = (cp << 6) | (s[i] & 0x3F);
  return cp;
}

/* Rust char::is_whitespace (Unicode White_Space). */
static int is_ws(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

/* Rust char::is_alphanumeric, used only for single_word added tokens. Exact for ASCII; beyond
 * it, letters of all scripts count and the common punctuation/symbol/emoji blocks do not (an
 * approximation of the Unicode Alphabetic/Numeric tables, which we do not carry). */
static int is_alnum(uint32_t c) {
  if (c < 0x80)
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (c < 0xC0) return c == 0xAA || c == 0xB5 || c == 0xBA || c == 0xB2 || c == 0xB3 ||
                       c == 0xB9 || (c >= 0xBC && c <= 0xBE);
  if (c == 0xD7 || c == 0xF7 || is_ws(c)) return 0;
  if (c >= 0x2000 && c <= 0x2BFF) return 0;  /* punctuation, symbols, arrows, shapes */
  if (c >= 0x3000 && c <= 0x303F) return 0;  /* CJK punctuation */
  if (c >= 0xFE00 && c <= 0xFE0F) return 0;  /* variation selectors */
  if (c >= 0xFF00 && c <= 0xFF0F) return 0;  /* fullwidth punctuation */
  if (c >= 0x1F000 && c <= 0x1FAFF) return 0; /* emoji and pictographs */
  if (c >= 0xE0000) return 0;                /* tags */
  return 1;
}

/* Last char of s[0..n) / first char of s[0..n). */
static uint32_t last_cp(const unsigned char *s, size_t n) {
  size_t i = n - 1;
  while (i > 0 && (s[i] & 0xC0) == 0x80 && n - i < 4) i--;
  size_t l = tk_utf8_len(s + i, n - i);
  if (i + l != n) return s[n - 1];
  return utf8_cp(s + i, l);
}
static uint32_t first_cp(const unsigned char *s, size_t n) {
  return utf8_cp(s, tk_utf8_len(s, n));
}

/* ---------------------------------------------------------------------------------------- */
/* growable buffers */

typedef struct {
  int32_t *v;
  size_t n, cap;
} ids_vec;

static int ids_push(ids_vec *a, int32_t id) {
  if (a->n == a->cap) {
    size_t nc = a->cap ? a->cap * 2 : 64;
    int32_t *nv = realloc(a->v, nc * sizeof *nv);
    if (!nv) return -1;
    a->v = nv;
    a->cap = nc;
  }
  a->v[a->n++] = id;
  return 0;
}

typedef struct {
  char *s;
  size_t n, cap;
} sbuf;

static int sb_put(sbuf *b, const char *s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t nc = (b->n + n + 1) * 2;
    char *ns = realloc(b->s, nc);
    if (!ns) return -1;
    b->s = ns;
    b->cap = nc;
  }
  memcpy(b->s + b->n, s, n);
  b->n += n;
  b->s[b->n] = 0;
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* trie of added tokens */

static uint64_t trie_mix(uint64_t x) {
  x *= 0x9E3779B97F4A7C15ULL;
  return x ^ (x >> 32);
}

static int32_t trie_child(const tk_trie *tr, int32_t node, unsigned char b) {
  if (!tr->keys) return -1;
  uint64_t key = (((uint64_t)node << 8) | b) + 1;
  size_t i = trie_mix(key) & tr->mask;
  for (;;) {
    if (tr->keys[i] == 0) return -1;
    if (tr->keys[i] == key) return tr->vals[i];
    i = (i + 1) & tr->mask;
  }
}

static int trie_grow_map(tk_trie *tr) {
  size_t cap = tr->keys ? (tr->mask + 1) * 2 : 1024;
  uint64_t *keys = calloc(cap, sizeof *keys);
  int32_t *vals = malloc(cap * sizeof *vals);
  if (!keys || !vals) {
    free(keys);
    free(vals);
    return -1;
  }
  for (size_t j = 0; tr->keys && j <= tr->mask; j++) {
    if (!tr->keys[j]) continue;
    size_t i = trie_mix(tr->keys[j]) & (cap - 1);
    while (keys[i]) i = (i + 1) & (cap - 1);
    keys[i] = tr->keys[j];
    vals[i] = tr->vals[j];
  }
  free(tr->keys);
  free(tr->vals);
  tr->keys = keys;
  tr->vals = vals;
  tr->mask = cap - 1;
  return 0;
}

static int32_t trie_new_node(tk_trie *tr) {
  if (tr->nnodes == tr->capnodes) {
    int32_t nc = tr->capnodes ? tr->capnodes * 2 : 256;
    int32_t *nt = realloc(tr->term, (size_t)nc * sizeof *nt);
    if (!nt) return -1;
    tr->term = nt;
    tr->capnodes = nc;
  }
  tr->term[tr->nnodes] = -1;
  return tr->nnodes++;
}

int tk_trie_add(tk_trie *tr, const char *s, size_t n, int32_t index) {
  if (n == 0) return 0; /* an empty pattern never matches in HF either */
  if (tr->nnodes == 0 && trie_new_node(tr) < 0) return -1;
  int32_t node = 0;
  for (size_t k = 0; k < n; k++) {
    unsigned char b = (unsigned char)s[k];
    int32_t c = trie_child(tr, node, b);
    if (c < 0) {
      if ((!tr->keys || (size_t)tr->nnodes * 2 >= tr->mask) && trie_grow_map(tr)) return -1;
      c = trie_new_node(tr);
      if (c < 0) return -1;
      uint64_t key = (((uint64_t)node << 8) | b) + 1;
      size_t i = trie_mix(key) & tr->mask;
      while (tr->keys[i]) i = (i + 1) & tr->mask;
      tr->keys[i] = key;
      tr->vals[i] = c;
    }
    node = c;
  }
  /* the first of identical patterns wins, like aho-corasick's lowest pattern index */
  if (tr->term[node] < 0) tr->term[node] = index;
  if (n > tr->maxlen) tr->maxlen = n;
  tr->first[(unsigned char)s[0]] = 1;
  return 0;
}

void tk_trie_free(tk_trie *tr) {
  free(tr->term);
  free(tr->keys);
  free(tr->vals);
  memset(tr, 0, sizeof *tr);
}

/* Longest pattern starting at s (length in *mlen), or -1. */
static int32_t trie_longest(const tk_trie *tr, const unsigned char *s, size_t n, size_t *mlen) {
  int32_t node = 0, best = -1;
  for (size_t k = 0; k < n; k++) {
    node = trie_child(tr, node, s[k]);
    if (node < 0) break;
    if (tr->term[node] >= 0) {
      best = tr->term[node];
      *mlen = k + 1;
    }
  }
  return best;
}

/* ---------------------------------------------------------------------------------------- */
/* added-token splitting (HF AddedVocabulary::find_matches) */

typedef struct {
  size_t start, stop;
  int32_t added; /* index into t->added, or -1 for text */
} span;

typedef struct {
  span *v;
  size_t n, cap;
} span_vec;

static int span_push(span_vec *a, size_t start, size_t stop, int32_t added) {
  if (a->n == a->cap) {
    size_t nc = a->cap ? a->cap * 2 : 16;
    span *nv = realloc(a->v, nc * sizeof *nv);
    if (!nv) return -1;
    a->v = nv;
    a->cap = nc;
  }
  a->v[a->n++] = (span){start, stop, added};
  return 0;
}

static int find_matches(const mx_tokenizer *t, const tk_trie *tr, const unsigned char *s,
                        size_t n, span_vec *out) {
  out->n = 0;
  size_t start_offset = 0, pos = 0;
  while (tr->nnodes > 0 && pos < n) {
    /* leftmost-longest: the earliest start with any match, then its longest pattern */
    size_t mstart = pos, mlen = 0;
    int32_t idx = -1;
    for (; mstart < n; mstart++) {
      if (!tr->first[s[mstart]]) continue;
      idx = trie_longest(tr, s + mstart, n - mstart, &mlen);
      if (idx >= 0) break;
    }
    if (idx < 0) break;
    size_t start = mstart, stop = mstart + mlen;
    pos = stop; /* the search resumes after the match even when the match is discarded */
    const tk_added *a = &t->added[idx];
    if (a->single_word) {
      int start_space = start == 0 || !is_alnum(last_cp(s, start));
      int stop_space = stop == n || !is_alnum(first_cp(s + stop, n - stop));
      if (!start_space || !stop_space) continue;
    }
    if (a->lstrip) {
      size_t ns = start;
      while (ns > 0) {
        size_t i = ns - 1;
        while (i > 0 && (s[i] & 0xC0) == 0x80 && ns - i < 4) i--;
        size_t l = tk_utf8_len(s + i, ns - i);
        if (i + l != ns) i = ns - 1, l = 1;
        if (!is_ws(utf8_cp(s + i, l))) break;
        ns = i;
      }
      start = ns > start_offset ? ns : start_offset;
    }
    if (a->rstrip) {
      while (stop < n) {
        size_t l = tk_utf8_len(s + stop, n - stop);
        if (!is_ws(utf8_cp(s + stop, l))) break;
        stop += l;
      }
    }
    if (start > start_offset && span_push(out, start_offset, start, -1)) return -1;
    if (span_push(out, start, stop, idx)) return -1;
    start_offset = stop;
  }
  if (start_offset < n && span_push(out, start_offset, n, -1)) return -1;
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* normalizer */

int tk_normalize(const mx_tokenizer *t, const char *s, size_t n, char **out, size_t *outn,
                 mlxrt_error *err) {
  sbuf cur = {0}, next = {0};
  if (sb_put(&cur, s, n)) goto oom;
  for (int k = 0; k < t->nnorms; k++) {
    const tk_norm *nm = &t->norms[k];
    next.n = 0;
    if (nm->kind == TK_NORM_PREPEND) {
      if (cur.n == 0) continue; /* HF prepends only to non-empty strings */
      if (sb_put(&next, nm->content, nm->clen) || sb_put(&next, cur.s, cur.n)) goto oom;
    } else {
      size_t i = 0, last = 0;
      while (i + nm->plen <= cur.n) {
        if (!memcmp(cur.s + i, nm->pattern, nm->plen)) {
          if (sb_put(&next, cur.s + last, i - last) || sb_put(&next, nm->content, nm->clen))
            goto oom;
          i += nm->plen;
          last = i;
        } else {
          i++;
        }
      }
      if (sb_put(&next, cur.s + last, cur.n - last)) goto oom;
    }
    sbuf tmp = cur;
    cur = next;
    next = tmp;
  }
  free(next.s);
  *out = cur.s;
  *outn = cur.n;
  return 0;
oom:
  free(cur.s);
  free(next.s);
  return mx_fail(err, "out of memory normalizing %zu bytes", n);
}

/* ---------------------------------------------------------------------------------------- */
/* BPE on one pre-tokenized piece (HF BPE::merge_word + Word::merge_all) */

typedef struct {
  int32_t id;
  int32_t prev, next;
  uint32_t len;
} sym;

typedef struct {
  uint32_t rank;
  int32_t pos, new_id;
} merge_cand;

typedef struct { /* scratch reused across pieces */
  sym *syms;
  size_t scap;
  merge_cand *heap;
  size_t hn, hcap;
  sbuf tmp;
} bpe_work;

static int cand_less(const merge_cand *a, const merge_cand *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static int heap_push(bpe_work *w, merge_cand c) {
  if (w->hn == w->hcap) {
    size_t nc = w->hcap ? w->hcap * 2 : 64;
    merge_cand *nh = realloc(w->heap, nc * sizeof *nh);
    if (!nh) return -1;
    w->heap = nh;
    w->hcap = nc;
  }
  size_t i = w->hn++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!cand_less(&c, &w->heap[p])) break;
    w->heap[i] = w->heap[p];
    i = p;
  }
  w->heap[i] = c;
  return 0;
}

static merge_cand heap_pop(bpe_work *w) {
  merge_cand top = w->heap[0], last = w->heap[--w->hn];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    const merge_cand *mc = &last;
    if (l < w->hn && cand_less(&w->heap[l], mc)) m = l, mc = &w->heap[l];
    if (r < w->hn && cand_less(&w->heap[r], mc)) m = r;
    if (m == i) break;
    w->heap[i] = w->heap[m];
    i = m;
  }
  if (w->hn) w->heap[i] = last;
  return top;
}

static int sym_add(bpe_work *w, size_t *ns, int32_t id, uint32_t len) {
  if (*ns == w->scap) {
    size_t nc = w->scap ? w->scap * 2 : 256;
    sym *nv = realloc(w->syms, nc * sizeof *nv);
    if (!nv) return -1;
    w->syms = nv;
    w->scap = nc;
  }
  w->syms[*ns] = (sym){id, (int32_t)*ns - 1, (int32_t)*ns + 1, len};
  (*ns)++;
  return 0;
}

static int bpe_piece(const mx_tokenizer *t, bpe_work *w, const char *s, size_t n, ids_vec *out) {
  if (n == 0) return 0;
  if (t->ignore_merges) {
    int32_t id = tk_model_lookup(t, s, n);
    if (id >= 0) return ids_push(out, id);
  }
  size_t ns = 0;
  int32_t unk = -1;  /* pending (fused) unknown */
  uint32_t unk_len = 0;
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    size_t l = tk_utf8_len(u + i, n - i);
    const char *piece = s + i;
    size_t plen = l;
    if ((i > 0 && t->cs_prefix) || (i + l == n && t->eow_suffix)) {
      w->tmp.n = 0;
      if ((i > 0 && t->cs_prefix && sb_put(&w->tmp, t->cs_prefix, strlen(t->cs_prefix))) ||
          sb_put(&w->tmp, s + i, l) ||
          (i + l == n && t->eow_suffix && sb_put(&w->tmp, t->eow_suffix, strlen(t->eow_suffix))))
        return -1;
      piece = w->tmp.s;
      plen = w->tmp.n;
    }
    int32_t id = tk_model_lookup(t, piece, plen);
    if (id >= 0) {
      if (unk >= 0) {
        if (sym_add(w, &ns, unk, unk_len)) return -1;
        unk = -1;
      }
      if (sym_add(w, &ns, id, (uint32_t)l)) return -1;
    } else {
      int all = t->byte_fallback;
      for (size_t k = 0; all && k < plen; k++) all = t->byte_id[(unsigned char)piece[k]] >= 0;
      if (all) { /* HF adds the byte tokens without flushing a pending unk first */
        for (size_t k = 0; k < plen; k++)
          if (sym_add(w, &ns, t->byte_id[(unsigned char)piece[k]], 1)) return -1;
      } else if (t->unk_id >= 0) {
        if (unk >= 0 && t->fuse_unk) {
          unk_len += (uint32_t)l;
        } else {
          if (unk >= 0 && sym_add(w, &ns, unk, unk_len)) return -1;
          unk = t->unk_id;
          unk_len = (uint32_t)l;
        }
      }
    }
    i += l;
  }
  if (unk >= 0 && sym_add(w, &ns, unk, unk_len)) return -1;
  if (ns == 0) return 0;
  w->syms[ns - 1].next = -1;

  w->hn = 0;
  for (size_t i = 0; i + 1 < ns; i++) {
    int32_t nid;
    uint32_t r = tk_merge_lookup(t, w->syms[i].id, w->syms[i + 1].id, &nid);
    if (r != UINT32_MAX && heap_push(w, (merge_cand){r, (int32_t)i, nid})) return -1;
  }
  while (w->hn) {
    merge_cand top = heap_pop(w);
    sym *cur = &w->syms[top.pos];
    if (cur->len == 0 || cur->next < 0) continue;
    sym *right = &w->syms[cur->next];
    int32_t nid;
    uint32_t r = tk_merge_lookup(t, cur->id, right->id, &nid);
    if (r == UINT32_MAX || nid != top.new_id) continue; /* stale entry */
    cur->id = top.new_id;
    cur->len += right->len;
    cur->next = right->next;
    right->len = 0;
    if (cur->next >= 0) w->syms[cur->next].prev = top.pos;
    if (cur->prev >= 0) {
      r = tk_merge_lookup(t, w->syms[cur->prev].id, cur->id, &nid);
      if (r != UINT32_MAX && heap_push(w, (merge_cand){r, cur->prev, nid})) return -1;
    }
    if (cur->next >= 0) {
      r = tk_merge_lookup(t, cur->id, w->syms[cur->next].id, &nid);
      if (r != UINT32_MAX && heap_push(w, (merge_cand){r, top.pos, nid})) return -1;
    }
  }
  for (size_t i = 0; i < ns; i++)
    if (w->syms[i].len && ids_push(out, w->syms[i].id)) return -1;
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* pre-tokenizer (Split with a literal pattern, HF SplitDelimiterBehavior) */

typedef struct {
  size_t start, stop;
} range;

typedef struct {
  range *v;
  size_t n, cap;
} range_vec;

static int range_push(range_vec *a, size_t start, size_t stop) {
  if (a->n == a->cap) {
    size_t nc = a->cap ? a->cap * 2 : 16;
    range *nv = realloc(a->v, nc * sizeof *nv);
    if (!nv) return -1;
    a->v = nv;
    a->cap = nc;
  }
  a->v[a->n++] = (range){start, stop};
  return 0;
}

/* The next occurrence of the step's literal pattern in s[*i..n), from *i on: 1 and its
 * [*ms, *me), with *i left at it; else 0 (HF's Pattern::find_matches for a string pattern). */
static int next_literal(const tk_pretok *p, const char *s, size_t n, size_t *i, size_t *ms, size_t *me) {
  for (; *i + p->plen <= n; (*i)++)
    if (!memcmp(s + *i, p->pattern, p->plen)) {
      *ms = *i;
      *me = *i + p->plen;
      return 1;
    }
  return 0;
}

/* Splits s[0..n) with one Split step; appends the pieces (offsets into s) to out. */
static int split_step(const tk_pretok *p, const char *s, size_t base, size_t n, range_vec *out) {
  /* (offsets, is_match) as HF's Pattern::find_matches produces them */
  size_t i = 0, prev = 0;
  int prev_match = 0;
  size_t first_out = out->n;
  for (;;) {
    size_t ms = n, me = n;
    int found = next_literal(p, s + base, n, &i, &ms, &me);
    /* pieces: [prev, ms) non-match (if non-empty), [ms, me) match */
    for (int part = 0; part < 2; part++) {
      size_t a = part == 0 ? prev : ms, b = part == 0 ? ms : me;
      int is_match = part == 1;
      if (part == 1 && !found) break;
      if (part == 0 && a == b) continue;
      if (p->invert) is_match = !is_match;
      int merge_into_last = 0, remove = 0;
      switch (p->behavior) {
        case TK_SPLIT_REMOVED: remove = is_match; break;
        case TK_SPLIT_ISOLATED: break;
        case TK_SPLIT_MERGED_PREV: merge_into_last = is_match && !prev_match; break;
        case TK_SPLIT_CONTIGUOUS: merge_into_last = is_match == prev_match; break;
        case TK_SPLIT_MERGED_NEXT: break; /* split_merged_next */
      }
      if (remove) {
        /* dropped */
      } else if (merge_into_last && out->n > first_out) {
        out->v[out->n - 1].stop = base + b;
      } else {
        if (range_push(out, base + a, base + b)) return -1;
      }
      prev_match = is_match;
    }
    if (!found) break;
    i = prev = me;
  }
  return 0;
}

/* MergedWithNext needs the match flags, so it is done separately: HF folds the reversed list,
 * attaching a match to the following piece unless the following piece is itself a match. */
static int split_merged_next(const tk_pretok *p, const char *s, size_t base, size_t n,
                             range_vec *out) {
  range_vec parts = {0};
  int *flags = NULL;
  size_t nflags = 0, capflags = 0;
  size_t i = 0, prev = 0;
  int rc = -1;
  for (;;) {
    size_t ms = n, me = n;
    int found = next_literal(p, s + base, n, &i, &ms, &me);
    for (int part = 0; part < 2; part++) {
      size_t a = part == 0 ? prev : ms, b = part == 0 ? ms : me;
      if (part == 1 && !found) break;
      if (part == 0 && a == b) continue;
      if (range_push(&parts, a, b)) goto done;
      if (nflags == capflags) {
        capflags = capflags ? capflags * 2 : 16;
        int *nf = realloc(flags, capflags * sizeof *nf);
        if (!nf) goto done;
        flags = nf;
      }
      flags[nflags++] = (part == 1) != (p->invert != 0);
    }
    if (!found) break;
    i = prev = me;
  }
  /* reverse fold: acc built from the end; a match not preceded (in reverse order) by a match
   * extends the last accumulated piece's start */
  size_t first = out->n;
  int prev_match = 0;
  for (size_t k = parts.n; k-- > 0;) {
    int is_match = flags[k];
    if (is_match && !prev_match && out->n > first) {
      out->v[out->n - 1].start = base + parts.v[k].start;
    } else if (range_push(out, base + parts.v[k].start, base + parts.v[k].stop)) {
      goto done;
    }
    prev_match = is_match;
  }
  for (size_t a = first, b = out->n ? out->n - 1 : 0; a < b; a++, b--) {
    range tmp = out->v[a];
    out->v[a] = out->v[b];
    out->v[b] = tmp;
  }
  rc = 0;
done:
  free(parts.v);
  free(flags);
  return rc;
}

/* Runs every pre-tokenizer step over s[0..n); the pieces are the (non-empty) ranges left. */
static int pretokenize(const mx_tokenizer *t, const char *s, size_t n, range_vec *pieces,
                       range_vec *scratch) {
  pieces->n = 0;
  if (range_push(pieces, 0, n)) return -1;
  for (int k = 0; k < t->npretoks; k++) {
    const tk_pretok *p = &t->pretoks[k];
    scratch->n = 0;
    for (size_t j = 0; j < pieces->n; j++) {
      range r = pieces->v[j];
      int rc = p->behavior == TK_SPLIT_MERGED_NEXT
                   ? split_merged_next(p, s, r.start, r.stop - r.start, scratch)
                   : split_step(p, s, r.start, r.stop - r.start, scratch);
      if (rc) return -1;
    }
    range_vec tmp = *pieces;
    *pieces = *scratch;
    *scratch = tmp;
  }
  size_t w = 0; /* HF drops empty splits */
  for (size_t j = 0; j < pieces->n; j++)
    if (pieces->v[j].stop > pieces->v[j].start) pieces->v[w++] = pieces->v[j];
  pieces->n = w;
  return 0;
}

/* ---------------------------------------------------------------------------------------- */

typedef struct {
  bpe_work bpe;
  span_vec raw, norm;
  range_vec pieces, scratch;
} enc_work;

static int encode_normalized(const mx_tokenizer *t, enc_work *w, const char *s, size_t n,
                             ids_vec *out) {
  if (find_matches(t, &t->norm_trie, (const unsigned char *)s, n, &w->norm)) return -1;
  for (size_t k = 0; k < w->norm.n; k++) {
    span sp = w->norm.v[k];
    if (sp.added >= 0) {
      if (ids_push(out, t->added[sp.added].id)) return -1;
      continue;
    }
    if (t->npretoks == 0) {
      if (bpe_piece(t, &w->bpe, s + sp.start, sp.stop - sp.start, out)) return -1;
      continue;
    }
    if (pretokenize(t, s + sp.start, sp.stop - sp.start, &w->pieces, &w->scratch)) return -1;
    for (size_t j = 0; j < w->pieces.n; j++)
      if (bpe_piece(t, &w->bpe, s + sp.start + w->pieces.v[j].start,
                    w->pieces.v[j].stop - w->pieces.v[j].start, out))
        return -1;
  }
  return 0;
}

int mx_tok_encode(const mx_tokenizer *t, const char *text, size_t len, int add_special,
                  int32_t **ids, size_t *n, mlxrt_error *err) {
  ids_vec out = {0};
  enc_work w = {0};
  int rc = -1;
  *ids = NULL;
  *n = 0;
  if (add_special)
    for (size_t i = 0; i < t->nprefix; i++)
      if (ids_push(&out, t->prefix_ids[i])) goto oom;
  if (find_matches(t, &t->raw_trie, (const unsigned char *)text, len, &w.raw)) goto oom;
  for (size_t k = 0; k < w.raw.n; k++) {
    span sp = w.raw.v[k];
    if (sp.added >= 0) {
      if (ids_push(&out, t->added[sp.added].id)) goto oom;
      continue;
    }
    char *norm;
    size_t nn;
    if (tk_normalize(t, text + sp.start, sp.stop - sp.start, &norm, &nn, err)) goto fail;
    int r = encode_normalized(t, &w, norm, nn, &out);
    free(norm);
    if (r) goto oom;
  }
  if (add_special)
    for (size_t i = 0; i < t->nsuffix; i++)
      if (ids_push(&out, t->suffix_ids[i])) goto oom;
  if (!out.v && !(out.v = malloc(sizeof *out.v))) goto oom;
  *ids = out.v;
  *n = out.n;
  out.v = NULL;
  rc = 0;
  goto done;
oom:
  mx_fail(err, "%s: out of memory encoding %zu bytes", t->name, len);
fail:
done:
  free(out.v);
  free(w.bpe.syms);
  free(w.bpe.heap);
  free(w.bpe.tmp.s);
  free(w.raw.v);
  free(w.norm.v);
  free(w.pieces.v);
  free(w.scratch.v);
  return rc;
}
