/* Tokenizer from a Hugging Face tokenizer.json (the Gemma 3 / Gemma 4 kind: BPE over UTF-8
 * characters with byte fallback, "▁" for spaces, added/special tokens matched verbatim).
 * Encoding follows HF `tokenizers` step by step: added tokens split out first, then the
 * normalizer, the pre-tokenizer, the BPE model by merge rank, and the post-processor template.
 * Only the mechanisms these files declare are implemented; anything else in a tokenizer.json is
 * refused at load time with a message naming the field.
 *
 * A loaded tokenizer is read-only: encode/decode may run on several threads at once (a
 * streaming state belongs to one thread), and loads on several threads at once are
 * independent: loading touches no process-wide state.
 *
 * Text is UTF-8 bytes. Invalid UTF-8 input is not an error: each bad byte is its own symbol and
 * goes through byte fallback (the decoder, like HF's, turns such bytes into U+FFFD). */
#ifndef MLXRT_MLX_TOKENIZER_H
#define MLXRT_MLX_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "mlxrt.h"

typedef struct mx_tokenizer mx_tokenizer;

/* Loads `path`: a tokenizer.json file, or a model directory containing one. */
mx_tokenizer *mx_tok_load(const char *path, mlxrt_error *err);
/* Builds a tokenizer from tokenizer.json text (`name` is used in messages). */
mx_tokenizer *mx_tok_parse(const char *json, size_t len, const char *name, mlxrt_error *err);
void mx_tok_free(mx_tokenizer *t);

/* Encodes len bytes of text. add_special = 1 applies the post-processor template (for Gemma:
 * prepends <bos>), like HF's add_special_tokens=True; 0 gives the bare tokens.
 * On success *ids is a malloc'd array (caller frees) of *n ids. Returns 0 or -1. */
int mx_tok_encode(const mx_tokenizer *t, const char *text, size_t len, int add_special,
                  int32_t **ids, size_t *n, mlxrt_error *err);

/* Decodes ids to a malloc'd NUL-terminated string (caller frees; *len without the NUL) the way
 * HF's decoder chain does (for Gemma: "▁" → " ", <0xXX> runs → bytes, invalid byte runs →
 * U+FFFD per byte). skip_special = 1 drops special added tokens (<bos>, <end_of_turn>, ...).
 * Unknown ids are an error. */
int mx_tok_decode(const mx_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                  char **text, size_t *len, mlxrt_error *err);

/* Streaming decode: feed ids one at a time; each call returns the text that became final.
 * Never returns part of a UTF-8 character: incomplete byte sequences are held until complete
 * (or replaced by U+FFFD per byte once they can no longer complete, as the batch decoder does). */
typedef struct mx_tok_stream {
  const mx_tokenizer *tok;
  int skip_special;
  unsigned char hold[4];   /* the start of an incomplete UTF-8 character */
  int nhold;
  int strip_left;          /* leading chars still to strip (Strip decoder), per HF */
  int ntokens;             /* tokens output so far (no decoder: HF joins them with spaces) */
  char *buf;               /* output of the last call */
  size_t cap;
} mx_tok_stream;

void mx_tok_stream_init(mx_tok_stream *s, const mx_tokenizer *t, int skip_special);
/* *text / *len: the ready text (valid until the next call on s; may be empty). Returns 0 or -1
 * (unknown id). */
int mx_tok_stream_put(mx_tok_stream *s, int32_t id, const char **text, size_t *len,
                      mlxrt_error *err);
/* End of stream: anything still held becomes U+FFFD per byte. */
int mx_tok_stream_flush(mx_tok_stream *s, const char **text, size_t *len, mlxrt_error *err);
void mx_tok_stream_free(mx_tok_stream *s);

/* Vocabulary access. token_to_id looks at added tokens first, then the model vocabulary
 * (as HF does); -1 when absent. id_to_token gives the stored token text (NULL if no such id);
 * *len may be NULL. */
int32_t mx_tok_token_to_id(const mx_tokenizer *t, const char *token, size_t len);
const char *mx_tok_id_to_token(const mx_tokenizer *t, int32_t id, size_t *len);
/* Number of ids: 1 + the largest id of the vocabulary and added tokens (262144 for Gemma). */
int32_t mx_tok_vocab_size(const mx_tokenizer *t);
/* 1 if id is an added token marked "special" in tokenizer.json. */
int mx_tok_is_special(const mx_tokenizer *t, int32_t id);
/* The ids the post-processor puts before / after the text when add_special = 1. */
const int32_t *mx_tok_prefix_ids(const mx_tokenizer *t, size_t *n);
const int32_t *mx_tok_suffix_ids(const mx_tokenizer *t, size_t *n);

#endif
