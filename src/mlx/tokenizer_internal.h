/* Internal layout of mx_tokenizer, shared by tokenizer.c (loading), tokenizer_encode.c and
 * tokenizer_decode.c. Not part of the API. */
#ifndef MLXRT_MLX_TOKENIZER_INTERNAL_H
#define MLXRT_MLX_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "mlx/tokenizer.h"

/* Pipeline steps the loader understood from the JSON. */
typedef enum { TK_NORM_REPLACE, TK_NORM_PREPEND } tk_norm_kind;
typedef struct {
  tk_norm_kind kind;
  char *pattern, *content; /* Replace: pattern → content; Prepend: content */
  size_t plen, clen;
} tk_norm;

typedef enum {
  TK_SPLIT_REMOVED, TK_SPLIT_ISOLATED, TK_SPLIT_MERGED_PREV, TK_SPLIT_MERGED_NEXT,
  TK_SPLIT_CONTIGUOUS
} tk_split_behavior;
typedef struct {
  char *pattern;           /* literal string (Split with {"String": ...}) */
  size_t plen;
  tk_split_behavior behavior;
  int invert;
} tk_pretok;

typedef enum { TK_DEC_REPLACE, TK_DEC_BYTE_FALLBACK, TK_DEC_FUSE, TK_DEC_STRIP } tk_dec_kind;
typedef struct {
  tk_dec_kind kind;
  char *pattern, *content; /* Replace; Strip: content is the stripped char */
  size_t plen, clen;
  int start, stop;         /* Strip */
} tk_dec;

typedef struct {
  char *content;           /* as written */
  size_t len;
  char *ncontent;          /* normalized form (tokens with normalized = true) */
  size_t nlen;
  int32_t id;
  uint8_t single_word, lstrip, rstrip, normalized, special;
} tk_added;

/* Byte trie over added-token texts (leftmost-longest matching, like aho-corasick's
 * LeftmostLongest). Children are found through a hash of (node, byte). */
typedef struct {
  int32_t *term;           /* per node: index into added[] of the token ending here, or -1 */
  int32_t nnodes, capnodes;
  uint64_t *keys;          /* (node << 8 | byte) + 1, 0 = empty */
  int32_t *vals;
  size_t mask;
  size_t maxlen;
  uint8_t first[256];      /* bytes that start some pattern (skips most positions cheaply) */
} tk_trie;

typedef struct {
  uint64_t key;            /* (left id << 32 | right id) + 1, 0 = empty */
  uint32_t rank;
  int32_t new_id;
} tk_merge_slot;

struct mx_tokenizer {
  char *name;
  /* model vocabulary, by id (holes have NULL) */
  int32_t n_model;         /* 1 + largest model id */
  int32_t n_entries;       /* distinct vocabulary strings (HF's get_vocab_size) */
  char **str;
  uint32_t *slen;
  char *arena;
  uint64_t *str_slots;     /* open addressing: hash tag | entry offset (tokenizer.c), 0 = empty */
  size_t str_mask;
  /* merges: (left id, right id) → rank, result id */
  tk_merge_slot *merges;   /* open addressing over mix64(key) */
  size_t mmask;
  /* BPE options */
  int32_t unk_id;          /* -1 = no unk token */
  int byte_fallback, fuse_unk, ignore_merges;
  char *cs_prefix, *eow_suffix; /* continuing_subword_prefix, end_of_word_suffix (or NULL) */
  int32_t byte_id[256];    /* <0xXX> tokens, -1 if absent */
  /* added tokens */
  tk_added *added;
  int nadded;
  int32_t *added_slots;     /* content → index into added[] (open addressing, -1 = empty) */
  size_t added_mask;
  int32_t *added_by_id;    /* id → index into added[] or -1, size n_ids */
  tk_trie raw_trie, norm_trie;
  int32_t n_ids;           /* 1 + largest id overall */
  /* pipeline */
  tk_norm *norms;
  int nnorms;
  tk_pretok *pretoks;
  int npretoks;
  tk_dec *decs;
  int ndecs;
  int dec_byte_fallback;   /* the decoder chain contains ByteFallback */
  int32_t *prefix_ids, *suffix_ids;
  size_t nprefix, nsuffix;
};

uint64_t tk_hash(const void *p, size_t n);
/* Model-vocabulary lookup only (what BPE uses); -1 when absent. */
int32_t tk_model_lookup(const mx_tokenizer *t, const char *s, size_t n);
/* Merge lookup: returns rank (or UINT32_MAX when the pair does not merge), result in *new_id. */
uint32_t tk_merge_lookup(const mx_tokenizer *t, int32_t a, int32_t b, int32_t *new_id);

/* Trie helpers (tokenizer_encode.c). */
int tk_trie_add(tk_trie *tr, const char *s, size_t n, int32_t index);
void tk_trie_free(tk_trie *tr);
/* Length in bytes of the UTF-8 character at s (1 for an invalid byte); n > 0. */
size_t tk_utf8_len(const unsigned char *s, size_t n);

#endif
