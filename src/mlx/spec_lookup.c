/* The n-gram matcher of prompt lookup (spec_lookup.h). A backward scan per draft: a decode step
 * of even a small model costs far more than comparing a few tokens at every context position. */
#include "mlx/spec_lookup.h"

int mx_lookup_draft(const int32_t *ctx, size_t n, int ngram_max, int k, int32_t *draft) {
  if (k <= 0 || n < 2 || ngram_max < 1) return 0;
  for (size_t g = (size_t)ngram_max < n - 1 ? (size_t)ngram_max : n - 1; g >= 1; g--) {
    const int32_t *tail = ctx + n - g;
    /* the occurrence ending at e - 1 (exclusive of the tail itself: e < n), most recent first */
    for (size_t e = n - 1; e >= g; e--) {
      size_t i = 0;
      while (i < g && ctx[e - g + i] == tail[i]) i++;
      if (i < g) continue;
      /* past the context's end the draft continues from itself: a period repeats */
      for (int m = 0; m < k; m++) draft[m] = e + (size_t)m < n ? ctx[e + (size_t)m] : draft[e + (size_t)m - n];
      return k;
    }
  }
  return 0;
}
