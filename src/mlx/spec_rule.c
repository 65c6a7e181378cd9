/* The acceptance rule of speculative sampling (spec_rule.h). */
#include "mlx/spec_rule.h"

double mx_spec_accept_prob(const double *p, const double *q, int32_t x) {
  if (!q) return p[x];
  if (p[x] >= q[x]) return 1.0; /* (q(x) = 0 cannot be drafted; it lands here when p(x) = 0 too) */
  return p[x] / q[x];
}

double mx_spec_residual(const double *p, const double *q, int V, int32_t x, double *r) {
  double total = 0.0;
  for (int i = 0; i < V; i++) {
    const double d = q ? p[i] - q[i] : (i == x ? 0.0 : p[i]);
    r[i] = d > 0.0 ? d : 0.0;
    total += r[i];
  }
  return total;
}

int32_t mx_spec_draw(const double *w, int V, double total, double u) {
  if (!(total > 0.0)) return -1;
  const double t = u * total;
  double acc = 0.0;
  int32_t last = -1;
  for (int i = 0; i < V; i++) {
    if (w[i] <= 0.0) continue;
    acc += w[i];
    last = i;
    if (t < acc) return i;
  }
  return last;
}
