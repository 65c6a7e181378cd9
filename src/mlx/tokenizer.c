/* tokenizer.json → mx_tokenizer: parsed once into a JSON tree (json_doc.h), then copied into
 * flat arrays and open-addressing hash maps (token → id, merge pair → rank) so that the tree can
 * be freed.
 * Every field the encoder/decoder relies on is validated here; unknown pipeline types are
 * refused so that we never silently tokenize differently from HF. */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "base/error.h"
#include "mlx/json_doc.h"
#include "mlx/tokenizer_internal.h"

/* ---------------------------------------------------------------------------------------- */
/* Hashing and lookups */

uint64_t tk_hash(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
  return h ^ (h >> 29);
}

static uint64_t mix64(uint64_t x) { /* splitmix64 finalizer */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

static size_t pow2_at_least(size_t n) {
  size_t c = 16;
  while (c < n) c <<= 1;
  return c;
}

/* Vocabulary entries live in t->arena as [int32 id][uint32 len][bytes][NUL], 4-aligned; a slot
 * holds (hash >> 32) << 32 | (entry offset / 4 + 1), so a lookup touches one slot and, when the
 * hash tag matches, one entry (the load does ~1.8 million lookups). */
typedef struct {
  int32_t id;
  uint32_t len;
} tk_entry;

static const tk_entry *entry_at(const mx_tokenizer *t, uint64_t slot) {
  return (const tk_entry *)(t->arena + ((slot & 0xffffffffu) - 1) * 4);
}

static int32_t lookup_h(const mx_tokenizer *t, const char *s, size_t n, uint64_t h) {
  uint32_t tag = (uint32_t)(h >> 32);
  size_t i = h & t->str_mask;
  for (;;) {
    uint64_t v = t->str_slots[i];
    if (!v) return -1;
    if ((uint32_t)(v >> 32) == tag) {
      const tk_entry *e = entry_at(t, v);
      if (e->len == n && !memcmp(e + 1, s, n)) return e->id;
    }
    i = (i + 1) & t->str_mask;
  }
}

int32_t tk_model_lookup(const mx_tokenizer *t, const char *s, size_t n) {
  return lookup_h(t, s, n, tk_hash(s, n));
}

/* Returns 1 when the string was new (HF's vocabulary is a map: a repeated key counts once, the
 * last id wins). */
static int str_insert(mx_tokenizer *t, size_t off, uint64_t h) {
  const tk_entry *ne = (const tk_entry *)(t->arena + off);
  uint64_t slot = (h >> 32 << 32) | (off / 4 + 1);
  size_t i = h & t->str_mask;
  while (t->str_slots[i]) {
    const tk_entry *e = entry_at(t, t->str_slots[i]);
    if (e->len == ne->len && !memcmp(e + 1, ne + 1, ne->len)) {
      t->str_slots[i] = slot;
      return 0;
    }
    i = (i + 1) & t->str_mask;
  }
  t->str_slots[i] = slot;
  return 1;
}

static uint64_t merge_key(int32_t a, int32_t b) {
  return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
}

uint32_t tk_merge_lookup(const mx_tokenizer *t, int32_t a, int32_t b, int32_t *new_id) {
  uint64_t key = merge_key(a, b);
  size_t i = mix64(key) & t->mmask;
  for (;;) {
    const tk_merge_slot *m = &t->merges[i];
    if (m->key == 0) return UINT32_MAX;
    if (m->key == key) {
      *new_id = m->new_id;
      return m->rank;
    }
    i = (i + 1) & t->mmask;
  }
}

/* Later duplicates overwrite earlier ones, as HF's HashMap collect does. */
static void merge_insert(mx_tokenizer *t, uint64_t key, uint64_t h, uint32_t rank, int32_t nid) {
  size_t i = h & t->mmask;
  while (t->merges[i].key != 0 && t->merges[i].key != key) i = (i + 1) & t->mmask;
  t->merges[i] = (tk_merge_slot){key, rank, nid};
}

/* ---------------------------------------------------------------------------------------- */
/* JSON helpers */

static const jd_value *jget(const jd_value *o, const char *k) {
  return jd_get(o, k);
}

static int jbool(const jd_value *o, const char *k, int dflt) {
  const jd_value *v = jget(o, k);
  if (jd_is_bool(v)) return v->type == JD_TRUE;
  return dflt;
}

/* Optional string field: NULL when absent or null. Error when it has another type. */
static int jstr_opt(const jd_value *o, const char *k, const char **out, const char *where,
                    mlxrt_error *err) {
  const jd_value *v = jget(o, k);
  *out = NULL;
  if (!v || jd_is(v, JD_NULL)) return 0;
  if (!jd_is(v, JD_STRING)) return mx_fail(err, "%s.%s: expected a string", where, k);
  *out = v->str;
  return 0;
}

static char *dup_or_null(const char *s, mlxrt_error *err, int *failed) {
  if (!s) return NULL;
  char *d = mx_strdup(s, err);
  if (!d) *failed = 1;
  return d;
}

/* {"String": "x"} patterns only; regex patterns need a regex engine we do not carry. */
static int string_pattern(const jd_value *o, const char *where, const char **out, mlxrt_error *err) {
  const jd_value *p = jget(o, "pattern");
  if (!jd_is(p, JD_OBJECT)) return mx_fail(err, "%s.pattern: expected an object", where);
  const jd_value *s = jget(p, "String");
  if (jd_is(s, JD_STRING)) {
    *out = s->str;
    return 0;
  }
  if (jget(p, "Regex"))
    return mx_fail(err, "%s.pattern: Regex patterns are not supported (only String)", where);
  return mx_fail(err, "%s.pattern: expected {\"String\": ...}", where);
}

static const char *jtype(const jd_value *o) {
  const jd_value *ty = jget(o, "type");
  return jd_is(ty, JD_STRING) ? ty->str : NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* model (BPE) */

static int parse_vocab(mx_tokenizer *t, const jd_value *vocab, mlxrt_error *err) {
  if (!jd_is(vocab, JD_OBJECT)) return mx_fail(err, "model.vocab: expected an object");
  size_t count = 0, bytes = 0;
  int64_t maxid = -1;
  for (const jd_value *e = vocab->child; e; e = e->next) {
    if (!jd_is(e, JD_NUMBER) || e->num < 0 || e->num > INT32_MAX - 1 ||
        e->num != (double)(int64_t)e->num)
      return mx_fail(err, "model.vocab[\"%.60s\"]: expected a non-negative integer id",
                     e->key ? e->key : "?");
    if (strlen(e->key) != e->key_len)
      return mx_fail(err, "model.vocab[\"%.60s\"]: a token with a NUL character", e->key);
    if ((int64_t)e->num > maxid) maxid = (int64_t)e->num;
    count++;
    bytes += e->key_len + 1;
  }
  if (count == 0) return mx_fail(err, "model.vocab: empty");
  if (maxid >= (int64_t)count * 4 + 1024)
    return mx_fail(err, "model.vocab: ids are too sparse (largest %lld for %zu tokens)",
                   (long long)maxid, count);
  t->n_model = (int32_t)(maxid + 1);
  bytes += count * (sizeof(tk_entry) + 4);
  if (bytes / 4 >= UINT32_MAX) return mx_fail(err, "model.vocab: too large");
  t->str = mx_calloc((size_t)t->n_model, sizeof *t->str, err);
  t->slen = mx_calloc((size_t)t->n_model, sizeof *t->slen, err);
  t->arena = mx_malloc(bytes, err);
  t->str_mask = pow2_at_least(count * 2) - 1;
  t->str_slots = mx_calloc(t->str_mask + 1, sizeof *t->str_slots, err);
  if (!t->str || !t->slen || !t->arena || !t->str_slots) return -1;
  /* batches: copy and hash 64 entries, prefetching their slots, then insert them */
  size_t off = 0;
  const jd_value *e = vocab->child;
  while (e) {
    size_t offs[64];
    uint64_t hs[64];
    int nb = 0;
    for (; e && nb < 64; e = e->next, nb++) {
      int32_t id = (int32_t)e->num;
      size_t n = e->key_len;
      tk_entry *en = (tk_entry *)(t->arena + off);
      en->id = id;
      en->len = (uint32_t)n;
      memcpy(en + 1, e->key, n + 1);
      t->str[id] = (char *)(en + 1);
      t->slen[id] = (uint32_t)n;
      offs[nb] = off;
      hs[nb] = tk_hash(en + 1, n);
      __builtin_prefetch(&t->str_slots[hs[nb] & t->str_mask], 1);
      off += (sizeof *en + n + 1 + 3) & ~(size_t)3;
    }
    for (int k = 0; k < nb; k++) t->n_entries += str_insert(t, offs[k], hs[k]);
  }
  return 0;
}

static int merges_grow(mx_tokenizer *t) {
  size_t ncap = (t->mmask + 1) * 2;
  tk_merge_slot *nm = calloc(ncap, sizeof *nm), *old = t->merges;
  if (!nm) return -1;
  size_t omask = t->mmask;
  t->merges = nm;
  t->mmask = ncap - 1;
  for (size_t i = 0; i <= omask; i++)
    if (old[i].key) merge_insert(t, old[i].key, mix64(old[i].key), old[i].rank, old[i].new_id);
  free(old);
  return 0;
}

/* One merge of a batch: its two parts, the joined token, and their hashes. */
typedef struct {
  const char *l, *r;
  size_t ln, rn, jn, joff;
  uint64_t hl, hr, hj;
} merge_item;

#define MERGE_BATCH 64

/* The merges are resolved in batches whose hash-table slots are prefetched first: the ~1.5
 * million lookups are random memory accesses, and overlapping their misses is most of the
 * load-time budget. */
static int parse_merges(mx_tokenizer *t, const jd_value *merges, mlxrt_error *err) {
  if (!jd_is(merges, JD_ARRAY)) return mx_fail(err, "model.merges: expected an array");
  /* sized without a counting walk over the (cold) list: grown when half full */
  t->mmask = pow2_at_least((size_t)t->n_model * 4) - 1;
  t->merges = mx_calloc(t->mmask + 1, sizeof *t->merges, err);
  if (!t->merges) return -1;
  size_t plen = t->cs_prefix ? strlen(t->cs_prefix) : 0;
  merge_item it[MERGE_BATCH];
  char *buf = NULL;
  size_t cap = 0;
  uint32_t rank = 0;
  const jd_value *m = merges->child;
  while (m) {
    int nb = 0;
    size_t used = 0;
    /* pass 1: parts, joined token, hashes; prefetch the vocabulary slots */
    for (; m && nb < MERGE_BATCH; m = m->next, nb++) {
      merge_item *x = &it[nb];
      uint32_t r = rank + (uint32_t)nb;
      if (jd_is(m, JD_STRING)) { /* legacy "left right" */
        const char *sp = strchr(m->str, ' ');
        if (!sp || strchr(sp + 1, ' ')) {
          free(buf);
          return mx_fail(err, "model.merges[%u]: \"%.60s\" is not two tokens separated by one "
                              "space", r, m->str);
        }
        x->l = m->str, x->ln = (size_t)(sp - x->l), x->r = sp + 1, x->rn = strlen(x->r);
      } else if (jd_is(m, JD_ARRAY) && jd_is(m->child, JD_STRING) && m->child->next &&
                 jd_is(m->child->next, JD_STRING) && !m->child->next->next) {
        x->l = m->child->str, x->ln = strlen(x->l);
        x->r = m->child->next->str, x->rn = strlen(x->r);
      } else {
        free(buf);
        return mx_fail(err, "model.merges[%u]: expected \"a b\" or [\"a\", \"b\"]", r);
      }
      /* the merged token drops the right part's continuing-subword prefix */
      const char *rs = x->r;
      size_t rsn = x->rn;
      if (plen && rsn >= plen && !memcmp(rs, t->cs_prefix, plen)) rs += plen, rsn -= plen;
      x->jn = x->ln + rsn;
      if (used + x->jn > cap) {
        cap = (used + x->jn) * 2 + 4096;
        char *nbuf = realloc(buf, cap);
        if (!nbuf) {
          free(buf);
          return mx_fail(err, "out of memory");
        }
        buf = nbuf;
      }
      x->joff = used;
      memcpy(buf + used, x->l, x->ln);
      memcpy(buf + used + x->ln, rs, rsn);
      used += x->jn;
      x->hl = tk_hash(x->l, x->ln);
      x->hr = tk_hash(x->r, x->rn);
      x->hj = tk_hash(buf + x->joff, x->jn);
      __builtin_prefetch(&t->str_slots[x->hl & t->str_mask]);
      __builtin_prefetch(&t->str_slots[x->hr & t->str_mask]);
      __builtin_prefetch(&t->str_slots[x->hj & t->str_mask]);
    }
    /* pass 2: prefetch the entries the slots point to */
    for (int k = 0; k < nb; k++) {
      uint64_t v;
      if ((v = t->str_slots[it[k].hl & t->str_mask])) __builtin_prefetch(entry_at(t, v));
      if ((v = t->str_slots[it[k].hr & t->str_mask])) __builtin_prefetch(entry_at(t, v));
      if ((v = t->str_slots[it[k].hj & t->str_mask])) __builtin_prefetch(entry_at(t, v));
    }
    /* pass 3: resolve ids, prefetch the merge-table slots; pass 4: insert in rank order */
    int32_t ids[MERGE_BATCH][3];
    uint64_t mh[MERGE_BATCH];
    for (int k = 0; k < nb; k++) {
      merge_item *x = &it[k];
      ids[k][0] = lookup_h(t, x->l, x->ln, x->hl);
      ids[k][1] = lookup_h(t, x->r, x->rn, x->hr);
      ids[k][2] = lookup_h(t, buf + x->joff, x->jn, x->hj);
      uint32_t r = rank + (uint32_t)k;
      if (ids[k][0] < 0 || ids[k][1] < 0) {
        int left = ids[k][0] < 0;
        size_t n = left ? x->ln : x->rn;
        int rc = mx_fail(err, "model.merges[%u]: token \"%.*s\" is not in the vocabulary", r,
                         (int)(n > 60 ? 60 : n), left ? x->l : x->r);
        free(buf);
        return rc;
      }
      if (ids[k][2] < 0) {
        int rc = mx_fail(err, "model.merges[%u]: merged token \"%.*s\" is not in the vocabulary",
                         r, (int)(x->jn > 60 ? 60 : x->jn), buf + x->joff);
        free(buf);
        return rc;
      }
      mh[k] = mix64(merge_key(ids[k][0], ids[k][1]));
      __builtin_prefetch(&t->merges[mh[k] & t->mmask], 1);
    }
    if ((size_t)rank + (size_t)nb > (t->mmask + 1) / 2) {
      if (merges_grow(t)) {
        free(buf);
        return mx_fail(err, "out of memory");
      }
      for (int k = 0; k < nb; k++) mh[k] = mix64(merge_key(ids[k][0], ids[k][1]));
    }
    for (int k = 0; k < nb; k++)
      merge_insert(t, merge_key(ids[k][0], ids[k][1]), mh[k], rank + (uint32_t)k, ids[k][2]);
    rank += (uint32_t)nb;
  }
  free(buf);
  return 0;
}

static int parse_model(mx_tokenizer *t, const jd_value *model, mlxrt_error *err) {
  if (!jd_is(model, JD_OBJECT)) return mx_fail(err, "model: expected an object");
  const char *ty = jtype(model);
  if (ty && strcmp(ty, "BPE"))
    return mx_fail(err, "model.type \"%s\" is not supported (only BPE)", ty);
  if (!ty && !jget(model, "merges"))
    return mx_fail(err, "model: no type and no merges (only BPE is supported)");
  const jd_value *dropout = jget(model, "dropout");
  if (jd_is(dropout, JD_NUMBER) && dropout->num != 0.0)
    return mx_fail(err, "model.dropout %g is not supported (BPE dropout is random)",
                   dropout->num);
  const char *unk, *pre, *suf;
  if (jstr_opt(model, "unk_token", &unk, "model", err) ||
      jstr_opt(model, "continuing_subword_prefix", &pre, "model", err) ||
      jstr_opt(model, "end_of_word_suffix", &suf, "model", err))
    return -1;
  t->byte_fallback = jbool(model, "byte_fallback", 0);
  t->fuse_unk = jbool(model, "fuse_unk", 0);
  t->ignore_merges = jbool(model, "ignore_merges", 0);
  int failed = 0;
  t->cs_prefix = pre && *pre ? dup_or_null(pre, err, &failed) : NULL;
  t->eow_suffix = suf && *suf ? dup_or_null(suf, err, &failed) : NULL;
  if (failed) return -1;
  if (parse_vocab(t, jget(model, "vocab"), err)) return -1;
  t->unk_id = -1;
  if (unk) {
    t->unk_id = tk_model_lookup(t, unk, strlen(unk));
    if (t->unk_id < 0)
      return mx_fail(err, "model.unk_token \"%.60s\" is not in the vocabulary", unk);
  }
  for (int b = 0; b < 256; b++) {
    char code[8];
    snprintf(code, sizeof code, "<0x%02X>", b);
    t->byte_id[b] = tk_model_lookup(t, code, 6);
  }
  return parse_merges(t, jget(model, "merges"), err);
}

/* ---------------------------------------------------------------------------------------- */
/* normalizer, pre-tokenizer, decoder, post-processor */

static int add_norm(mx_tokenizer *t, const jd_value *n, const char *where, mlxrt_error *err) {
  const char *ty = jtype(n);
  if (!ty) return mx_fail(err, "%s: missing \"type\"", where);
  if (!strcmp(ty, "Sequence")) {
    const jd_value *list = jget(n, "normalizers");
    if (!jd_is(list, JD_ARRAY)) return mx_fail(err, "%s.normalizers: expected an array", where);
    for (const jd_value *c = list->child; c; c = c->next)
      if (add_norm(t, c, where, err)) return -1;
    return 0;
  }
  tk_norm nm = {0};
  const char *pat = NULL, *content = NULL;
  if (!strcmp(ty, "Replace")) {
    nm.kind = TK_NORM_REPLACE;
    if (string_pattern(n, where, &pat, err) || jstr_opt(n, "content", &content, where, err))
      return -1;
    if (!content) return mx_fail(err, "%s.content: expected a string", where);
    if (!*pat) return mx_fail(err, "%s.pattern: empty", where);
  } else if (!strcmp(ty, "Prepend")) {
    nm.kind = TK_NORM_PREPEND;
    if (jstr_opt(n, "prepend", &content, where, err)) return -1;
    if (!content) return mx_fail(err, "%s.prepend: expected a string", where);
  } else {
    return mx_fail(err, "%s: normalizer type \"%s\" is not supported (Replace, Prepend, Sequence)",
                   where, ty);
  }
  tk_norm *nn = realloc(t->norms, (size_t)(t->nnorms + 1) * sizeof *nn);
  if (!nn) return mx_fail(err, "out of memory");
  t->norms = nn;
  int failed = 0;
  nm.pattern = dup_or_null(pat, err, &failed);
  nm.content = dup_or_null(content, err, &failed);
  nm.plen = pat ? strlen(pat) : 0;
  nm.clen = strlen(content);
  t->norms[t->nnorms++] = nm; /* stored even on failure so free() releases it */
  return failed ? -1 : 0;
}

static int add_pretok(mx_tokenizer *t, const jd_value *p, const char *where, mlxrt_error *err) {
  const char *ty = jtype(p);
  if (!ty) return mx_fail(err, "%s: missing \"type\"", where);
  if (!strcmp(ty, "Sequence")) {
    const jd_value *list = jget(p, "pretokenizers");
    if (!jd_is(list, JD_ARRAY)) return mx_fail(err, "%s.pretokenizers: expected an array", where);
    for (const jd_value *c = list->child; c; c = c->next)
      if (add_pretok(t, c, where, err)) return -1;
    return 0;
  }
  if (strcmp(ty, "Split"))
    return mx_fail(err, "%s: pre-tokenizer type \"%s\" is not supported (Split, Sequence)", where,
                   ty);
  const char *pat;
  if (string_pattern(p, where, &pat, err)) return -1;
  if (!*pat) return mx_fail(err, "%s.pattern: empty", where);
  static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                      "MergedWithNext", "Contiguous"};
  const jd_value *bh = jget(p, "behavior");
  int behavior = -1;
  for (int i = 0; i < 5 && jd_is(bh, JD_STRING); i++)
    if (!strcmp(bh->str, names[i])) behavior = i;
  if (behavior < 0) return mx_fail(err, "%s.behavior: expected one of Removed, Isolated, "
                                        "MergedWithPrevious, MergedWithNext, Contiguous", where);
  tk_pretok *np = realloc(t->pretoks, (size_t)(t->npretoks + 1) * sizeof *np);
  if (!np) return mx_fail(err, "out of memory");
  t->pretoks = np;
  int failed = 0;
  tk_pretok pt = {dup_or_null(pat, err, &failed), strlen(pat), (tk_split_behavior)behavior,
                  jbool(p, "invert", 0)};
  t->pretoks[t->npretoks++] = pt;
  return failed ? -1 : 0;
}

static int add_dec(mx_tokenizer *t, const jd_value *d, const char *where, mlxrt_error *err) {
  const char *ty = jtype(d);
  if (!ty) return mx_fail(err, "%s: missing \"type\"", where);
  if (!strcmp(ty, "Sequence")) {
    const jd_value *list = jget(d, "decoders");
    if (!jd_is(list, JD_ARRAY)) return mx_fail(err, "%s.decoders: expected an array", where);
    for (const jd_value *c = list->child; c; c = c->next)
      if (add_dec(t, c, where, err)) return -1;
    return 0;
  }
  tk_dec dc = {0};
  const char *pat = NULL, *content = NULL;
  if (!strcmp(ty, "Replace")) {
    dc.kind = TK_DEC_REPLACE;
    if (string_pattern(d, where, &pat, err) || jstr_opt(d, "content", &content, where, err))
      return -1;
    if (!content) return mx_fail(err, "%s.content: expected a string", where);
    if (!*pat) return mx_fail(err, "%s.pattern: empty", where);
  } else if (!strcmp(ty, "ByteFallback")) {
    dc.kind = TK_DEC_BYTE_FALLBACK;
    t->dec_byte_fallback = 1;
  } else if (!strcmp(ty, "Fuse")) {
    dc.kind = TK_DEC_FUSE;
  } else if (!strcmp(ty, "Strip")) {
    dc.kind = TK_DEC_STRIP;
    const jd_value *st = jget(d, "start"), *sp = jget(d, "stop");
    if (jstr_opt(d, "content", &content, where, err)) return -1;
    if (!content || !jd_is(st, JD_NUMBER) || !jd_is(sp, JD_NUMBER) || st->num < 0 ||
        sp->num < 0)
      return mx_fail(err, "%s: Strip needs content, start and stop", where);
    dc.start = (int)st->num;
    dc.stop = (int)sp->num;
  } else {
    return mx_fail(err, "%s: decoder type \"%s\" is not supported "
                        "(Replace, ByteFallback, Fuse, Strip, Sequence)", where, ty);
  }
  tk_dec *nd = realloc(t->decs, (size_t)(t->ndecs + 1) * sizeof *nd);
  if (!nd) return mx_fail(err, "out of memory");
  t->decs = nd;
  int failed = 0;
  dc.pattern = dup_or_null(pat, err, &failed);
  dc.content = dup_or_null(content, err, &failed);
  dc.plen = pat ? strlen(pat) : 0;
  dc.clen = content ? strlen(content) : 0;
  t->decs[t->ndecs++] = dc;
  return failed ? -1 : 0;
}

static int push_id(int32_t **arr, size_t *n, int32_t id, mlxrt_error *err) {
  int32_t *na = realloc(*arr, (*n + 1) * sizeof *na);
  if (!na) return mx_fail(err, "out of memory");
  na[(*n)++] = id;
  *arr = na;
  return 0;
}

/* TemplateProcessing "single": the special tokens around sequence A. */
static int parse_post(mx_tokenizer *t, const jd_value *p, mlxrt_error *err) {
  const char *ty = jtype(p);
  if (!ty || strcmp(ty, "TemplateProcessing"))
    return mx_fail(err, "post_processor: type \"%s\" is not supported (TemplateProcessing)",
                   ty ? ty : "?");
  const jd_value *single = jget(p, "single"), *specials = jget(p, "special_tokens");
  if (!jd_is(single, JD_ARRAY)) return mx_fail(err, "post_processor.single: expected an array");
  int seen_a = 0;
  for (const jd_value *piece = single->child; piece; piece = piece->next) {
    const jd_value *seq = jget(piece, "Sequence"), *sp = jget(piece, "SpecialToken");
    if (seq) {
      const jd_value *sid = jget(seq, "id");
      if (!jd_is(sid, JD_STRING) || strcmp(sid->str, "A") || seen_a)
        return mx_fail(err, "post_processor.single: expected one Sequence \"A\"");
      seen_a = 1;
    } else if (sp) {
      const jd_value *sid = jget(sp, "id");
      if (!jd_is(sid, JD_STRING)) return mx_fail(err, "post_processor.single: SpecialToken.id");
      const jd_value *ent = jget(specials, sid->str);
      const jd_value *ids = jget(ent, "ids");
      if (!jd_is(ids, JD_ARRAY))
        return mx_fail(err, "post_processor.special_tokens[\"%.60s\"].ids: expected an array",
                       sid->str);
      for (const jd_value *v = ids->child; v; v = v->next) {
        if (!jd_is(v, JD_NUMBER) || v->num < 0 || v->num >= t->n_ids)
          return mx_fail(err, "post_processor.special_tokens[\"%.60s\"]: bad id",
                         sid->str);
        if (seen_a ? push_id(&t->suffix_ids, &t->nsuffix, (int32_t)v->num, err)
                   : push_id(&t->prefix_ids, &t->nprefix, (int32_t)v->num, err))
          return -1;
      }
    } else {
      return mx_fail(err, "post_processor.single: expected Sequence or SpecialToken pieces");
    }
  }
  if (!seen_a) return mx_fail(err, "post_processor.single: no Sequence \"A\"");
  return 0;
}

/* Applies the normalizer chain to a string (used for normalized added-token patterns here,
 * and by the encoder); defined in tokenizer_encode.c. */
int tk_normalize(const mx_tokenizer *t, const char *s, size_t n, char **out, size_t *outn,
                 mlxrt_error *err);

/* Index into added[] of the added token with this content, or -1. */
static int32_t added_find(const mx_tokenizer *t, const char *s, size_t n) {
  if (!t->added_slots) return -1;
  size_t i = tk_hash(s, n) & t->added_mask;
  for (;;) {
    int32_t k = t->added_slots[i];
    if (k < 0) return -1;
    if (t->added[k].len == n && !memcmp(t->added[k].content, s, n)) return k;
    i = (i + 1) & t->added_mask;
  }
}

static void added_insert(mx_tokenizer *t, int32_t k) {
  size_t i = tk_hash(t->added[k].content, t->added[k].len) & t->added_mask;
  while (t->added_slots[i] >= 0) i = (i + 1) & t->added_mask;
  t->added_slots[i] = k;
}

static int parse_added(mx_tokenizer *t, const jd_value *list, mlxrt_error *err) {
  if (!list || jd_is(list, JD_NULL)) return 0;
  if (!jd_is(list, JD_ARRAY)) return mx_fail(err, "added_tokens: expected an array");
  int n = 0;
  for (const jd_value *a = list->child; a; a = a->next) n++;
  t->added = mx_calloc((size_t)n, sizeof *t->added, err);
  t->added_mask = pow2_at_least((size_t)n * 2) - 1;
  t->added_slots = mx_malloc((t->added_mask + 1) * sizeof *t->added_slots, err);
  if (!t->added || !t->added_slots) return -1;
  memset(t->added_slots, 0xff, (t->added_mask + 1) * sizeof *t->added_slots);
  int32_t maxid = -1;
  int i = 0;
  for (const jd_value *a = list->child; a; a = a->next, i++) {
    const jd_value *id = jget(a, "id"), *content = jget(a, "content");
    if (!jd_is(id, JD_NUMBER) || id->num < 0 || id->num > INT32_MAX - 1 ||
        !jd_is(content, JD_STRING))
      return mx_fail(err, "added_tokens[%d]: expected a non-negative id and a content string",
                     i);
    const char *c = content->str;
    size_t clen = content->str_len;
    if (strlen(c) != clen)
      return mx_fail(err, "added_tokens[%d]: content with a NUL character", i);
    /* HF ignores empty and repeated contents */
    if (clen == 0 || added_find(t, c, clen) >= 0) continue;
    tk_added *tk = &t->added[t->nadded];
    tk->content = mx_strdup(c, err);
    if (!tk->content) return -1;
    tk->len = clen;
    added_insert(t, t->nadded++);
    /* HF (AddedVocabulary::add_tokens) keeps the model's id when the model has the token and
     * otherwise numbers new tokens from the vocabulary size on, in list order; the id written
     * in the file is not used */
    int32_t mid = tk_model_lookup(t, tk->content, tk->len);
    if (mid >= 0) tk->id = mid;
    else tk->id = maxid >= t->n_entries ? maxid + 1 : t->n_entries;
    if (tk->id > maxid) maxid = tk->id;
    tk->single_word = (uint8_t)jbool(a, "single_word", 0);
    tk->lstrip = (uint8_t)jbool(a, "lstrip", 0);
    tk->rstrip = (uint8_t)jbool(a, "rstrip", 0);
    tk->normalized = (uint8_t)jbool(a, "normalized", 1);
    tk->special = (uint8_t)jbool(a, "special", 0);
    if (tk->normalized &&
        tk_normalize(t, tk->content, tk->len, &tk->ncontent, &tk->nlen, err))
      return mx_prefix(err, "added_tokens[%d]", i);
  }
  return 0;
}

static int build_added_index(mx_tokenizer *t, mlxrt_error *err) {
  t->n_ids = t->n_model;
  for (int i = 0; i < t->nadded; i++)
    if (t->added[i].id >= t->n_ids) t->n_ids = t->added[i].id + 1;
  t->added_by_id = mx_malloc((size_t)t->n_ids * sizeof *t->added_by_id, err);
  if (!t->added_by_id) return -1;
  memset(t->added_by_id, 0xff, (size_t)t->n_ids * sizeof *t->added_by_id);
  for (int i = 0; i < t->nadded; i++) {
    tk_added *a = &t->added[i];
    t->added_by_id[a->id] = i;
    int rc = a->normalized ? tk_trie_add(&t->norm_trie, a->ncontent, a->nlen, i)
                           : tk_trie_add(&t->raw_trie, a->content, a->len, i);
    if (rc) return mx_fail(err, "out of memory building the added-token trie");
  }
  return 0;
}

/* ---------------------------------------------------------------------------------------- */

void mx_tok_free(mx_tokenizer *t) {
  if (!t) return;
  free(t->name);
  free(t->str);
  free(t->slen);
  free(t->arena);
  free(t->str_slots);
  free(t->merges);
  free(t->cs_prefix);
  free(t->eow_suffix);
  for (int i = 0; i < t->nadded; i++) {
    free(t->added[i].content);
    free(t->added[i].ncontent);
  }
  free(t->added);
  free(t->added_slots);
  free(t->added_by_id);
  tk_trie_free(&t->raw_trie);
  tk_trie_free(&t->norm_trie);
  for (int i = 0; i < t->nnorms; i++) free(t->norms[i].pattern), free(t->norms[i].content);
  free(t->norms);
  for (int i = 0; i < t->npretoks; i++) free(t->pretoks[i].pattern);
  free(t->pretoks);
  for (int i = 0; i < t->ndecs; i++) free(t->decs[i].pattern), free(t->decs[i].content);
  free(t->decs);
  free(t->prefix_ids);
  free(t->suffix_ids);
  free(t);
}

static int parse_all(mx_tokenizer *t, const jd_value *root, mlxrt_error *err) {
  if (!jd_is(root, JD_OBJECT)) return mx_fail(err, "expected a JSON object");
  const jd_value *trunc = jget(root, "truncation");
  if (trunc && !jd_is(trunc, JD_NULL)) return mx_fail(err, "truncation is not supported");
  if (parse_model(t, jget(root, "model"), err)) return -1;
  const jd_value *norm = jget(root, "normalizer");
  if (norm && !jd_is(norm, JD_NULL) && add_norm(t, norm, "normalizer", err)) return -1;
  const jd_value *pre = jget(root, "pre_tokenizer");
  if (pre && !jd_is(pre, JD_NULL) && add_pretok(t, pre, "pre_tokenizer", err)) return -1;
  const jd_value *dec = jget(root, "decoder");
  if (dec && !jd_is(dec, JD_NULL) && add_dec(t, dec, "decoder", err)) return -1;
  if (parse_added(t, jget(root, "added_tokens"), err) || build_added_index(t, err)) return -1;
  const jd_value *post = jget(root, "post_processor");
  if (post && !jd_is(post, JD_NULL) && parse_post(t, post, err)) return -1;
  return 0;
}

mx_tokenizer *mx_tok_parse(const char *json, size_t len, const char *name, mlxrt_error *err) {
  mx_tokenizer *t = mx_calloc(1, sizeof *t, err);
  if (!t) return NULL;
  t->name = mx_strdup(name ? name : "tokenizer.json", err);
  if (!t->name) {
    free(t);
    return NULL;
  }
  size_t off = 0;
  const char *what = NULL;
  jd_doc *doc = jd_parse(json, len, &off, &what);
  if (!doc) {
    mx_fail(err, "%s: invalid JSON near byte %zu: %s", t->name, off, what);
    mx_tok_free(t);
    return NULL;
  }
  int rc = parse_all(t, jd_root(doc), err);
  jd_free(doc);
  if (rc) {
    mx_prefix(err, "%s", t->name);
    mx_tok_free(t);
    return NULL;
  }
  return t;
}

mx_tokenizer *mx_tok_load(const char *path, mlxrt_error *err) {
  struct stat st;
  char *file = NULL;
  if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) file = mx_path_join(path, "tokenizer.json", err);
  else file = mx_strdup(path, err);
  if (!file) return NULL;
  mx_tokenizer *t = NULL;
  /* A regular file only (a FIFO would block, a directory is no tokenizer); it is mapped, the
   * parser takes an explicit length: no copy of the 33 MB text. */
  int fd = mx_open_regular(file, "a tokenizer.json file", &st, err);
  /* the real Gemma tokenizers are ~33 MB; a huge (sparse) file would only crawl */
  const uint64_t max = 1ull << 30;
  if (fd >= 0 && (uint64_t)st.st_size > max) {
    mx_fail(err, "%s: is %llu bytes, more than the %llu a tokenizer.json may have", file,
            (unsigned long long)st.st_size, (unsigned long long)max);
  } else if (fd >= 0 && st.st_size == 0) {
    t = mx_tok_parse("", 0, file, err);
  } else if (fd >= 0) {
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED) mx_fail(err, "%s: cannot map: %s", file, strerror(errno));
    else {
      t = mx_tok_parse(map, (size_t)st.st_size, file, err);
      munmap(map, (size_t)st.st_size);
    }
  }
  if (fd >= 0) close(fd);
  free(file);
  return t;
}

/* ---------------------------------------------------------------------------------------- */
/* vocabulary access */

int32_t mx_tok_token_to_id(const mx_tokenizer *t, const char *token, size_t len) {
  int32_t k = added_find(t, token, len);
  return k >= 0 ? t->added[k].id : tk_model_lookup(t, token, len);
}

const char *mx_tok_id_to_token(const mx_tokenizer *t, int32_t id, size_t *len) {
  if (id < 0 || id >= t->n_ids) return NULL;
  int32_t a = t->added_by_id[id];
  if (a >= 0) {
    if (len) *len = t->added[a].len;
    return t->added[a].content;
  }
  if (id >= t->n_model || !t->str[id]) return NULL;
  if (len) *len = t->slen[id];
  return t->str[id];
}

int32_t mx_tok_vocab_size(const mx_tokenizer *t) { return t->n_ids; }

int mx_tok_is_special(const mx_tokenizer *t, int32_t id) {
  if (id < 0 || id >= t->n_ids || t->added_by_id[id] < 0) return 0;
  return t->added[t->added_by_id[id]].special;
}

const int32_t *mx_tok_prefix_ids(const mx_tokenizer *t, size_t *n) {
  *n = t->nprefix;
  return t->prefix_ids;
}

const int32_t *mx_tok_suffix_ids(const mx_tokenizer *t, size_t *n) {
  *n = t->nsuffix;
  return t->suffix_ids;
}
