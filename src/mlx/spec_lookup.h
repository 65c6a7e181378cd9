/* Prompt lookup: drafts taken from the context itself (llama.cpp's lookup decoding,
 * transformers' prompt_lookup_num_tokens). The last n tokens of the context, n from ngram_max
 * down to 1, are looked for earlier in the context; the most recent earlier occurrence of the
 * longest n-gram found gives the draft: the tokens that followed it. */
#ifndef MLXRT_MLX_SPEC_LOOKUP_H
#define MLXRT_MLX_SPEC_LOOKUP_H

#include <stddef.h>
#include <stdint.h>

/* k tokens into draft from ctx[0..n) (the whole context, its last token included); returns k,
 * or 0 when no n-gram of length 1..ngram_max recurs (or k ≤ 0). Where the continuation reaches
 * the end of the context it goes on from the draft's own start, so a repeating pattern of
 * period p (the match p tokens back) drafts its next k tokens. */
int mx_lookup_draft(const int32_t *ctx, size_t n, int ngram_max, int k, int32_t *draft);

#endif
