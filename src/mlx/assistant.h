/* Gemma 4's MTP drafter (transformers' Gemma4AssistantForCausalLM, model_type gemma4_assistant),
 * run beside the model it drafts for on the reference path.
 *
 * A pass drafts from one position P, the position of the last token chosen (not fed yet):
 * the drafter's input is the model's scaled embedding of that token beside the model's final
 * hidden state (after the final norm) at P − 1, projected to the drafter's width. Each of its
 * layers attends with its own queries, RoPE'd at P, to the model's keys and values of the
 * positions before P, from the last layer of the same type that computes them (a sliding
 * layer: the last sliding_window + 1 of them). The drafter's final norm gives the draft's
 * logits (its tied head; with ordered embeddings only the tokens of the top-scored centroids,
 * the rest at the smallest of those minus 1) and, through post_projection, the hidden state
 * that drafts the next token with the token just drafted, at the same position P.
 *
 * transformers' assisted generation slices the model's K/V by the sequence length, so after a
 * rejection its drafter also reads the rejected drafts' K/V; here it reads exactly the kept
 * positions (docs/SPECULATIVE.md). Not thread-safe: one per generation. */
#ifndef MLXRT_MLX_ASSISTANT_H
#define MLXRT_MLX_ASSISTANT_H

#include <stdint.h>

#include "accel/accel.h"
#include "mlx/model.h"
#include "mlx/session.h"

typedef struct mx_assistant mx_assistant;

/* a drafts for target (a session of the model on the reference path): checks that they fit
 * (widths, vocabulary, each layer type's K/V shapes, the sliding rings holding what a pass
 * reads with up to draft_max drafts taken back) and makes target keep its hidden states. */
mx_assistant *mx_assistant_create(const mx_model *a, accel_backend *b, mx_session *target, int draft_max,
                                  mlxrt_error *err);
void mx_assistant_free(mx_assistant *A);
/* Starts a pass at position pos (target holds positions < pos) from token tok. */
int mx_assistant_begin(mx_assistant *A, int32_t tok, int64_t pos, mlxrt_error *err);
/* The next draft's logits ([vocab]) from the pass's current token; then mx_assistant_push
 * gives the token drafted from them. */
const float *mx_assistant_logits(mx_assistant *A, mlxrt_error *err);
void mx_assistant_push(mx_assistant *A, int32_t tok);

#endif
