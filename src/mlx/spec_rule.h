/* Speculative sampling's acceptance rule (Leviathan et al. 2023, Chen et al. 2023) on explicit
 * distributions over a vocabulary of V tokens: a token x drafted from q is kept with probability
 * min(1, p(x) / q(x)); when it is not, the token is drawn from norm(max(0, p − q)). Whatever
 * q is, the token that comes out is distributed as p, the target's own distribution. A
 * deterministic drafter (prompt lookup) is the point mass q = δ_x (q NULL here): x is kept
 * with probability p(x), else the token is drawn from p with x removed. */
#ifndef MLXRT_MLX_SPEC_RULE_H
#define MLXRT_MLX_SPEC_RULE_H

#include <stdint.h>

/* min(1, p(x) / q(x)); q NULL: p(x). */
double mx_spec_accept_prob(const double *p, const double *q, int32_t x);
/* The distribution to draw from after x was rejected, unnormalised, into r[V]: max(0, p − q)
 * (q NULL: p with r(x) = 0). Returns its total, > 0 whenever rejection had a probability > 0. */
double mx_spec_residual(const double *p, const double *q, int V, int32_t x, double *r);
/* The token of the unnormalised w[V] (total = Σ w) that u in [0, 1) falls on: the lowest id
 * whose running sum exceeds u · total (the last token with weight > 0 if rounding leaves u past
 * them all); -1 when total ≤ 0. */
int32_t mx_spec_draw(const double *w, int V, double total, double u);

#endif
