/* Speculative decoding's drafting and verification for the generation loop (generate_core.c):
 * the options checked against the session, drafts from prompt lookup (spec_lookup.h) or a draft
 * model's session, and the choice at each verified position — the greedy argmax, or the
 * rejection rule (spec_rule.h) on the sampler's distributions. */
#ifndef MLXRT_MLX_SPEC_H
#define MLXRT_MLX_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "mlx/api_internal.h"
#include "mlx/sampler.h"

typedef struct mx_spec mx_spec;

/* Checks o (mode, draft_max, ngram_max, the draft model's vocabulary) and that the session can
 * verify drafts (mx_session_check_rowwise), and sets up the drafter; smp is the generation's
 * sampler (its settings are the draft model's too). NULL with err naming the option at fault. */
mx_spec *mx_spec_create(mlxrt_session *S, const mlxrt_spec_options *o, const mx_sampler *smp,
                        const mx_gen_config *stops, mlxrt_error *err);
void mx_spec_free(mx_spec *sp);
/* The most tokens drafted per pass. */
int mx_spec_draft_max(const mx_spec *sp);
/* Brings the draft model's session up to prompt[0..n) (nothing for prompt lookup): 0, 1 when
 * cancelled, -1 on error. */
int mx_spec_prefill(mx_spec *sp, const int32_t *prompt, size_t n, const volatile int *cancel, mlxrt_error *err);
/* Up to k tokens to follow ctx[0..n) (the context, the last token chosen included) into draft;
 * returns how many (0: nothing to propose), or -1. Fewer than draft_max while drafts are being
 * rejected: the length grows by 2 after a pass whose drafts were all kept and shrinks by 1
 * (down to 1) after one with a rejection. */
int mx_spec_draft(mx_spec *sp, const int32_t *ctx, size_t n, int k, int32_t *draft, mlxrt_error *err);
/* The token at a drafted position from the model's logits there (row; pos: the position of the
 * token whose logits they are): for draft token j (x), *tok = x when it is accepted, else the
 * replacement (the argmax at temperature 0, the residual draw otherwise). The draws come from
 * smp's stream. Returns 1 accepted, 0 rejected, -1 on error (non-finite logits included). */
int mx_spec_verify(mx_spec *sp, mx_sampler *smp, const float *row, int64_t pos, int j, int32_t x, int32_t *tok,
                   mlxrt_error *err);

#endif
