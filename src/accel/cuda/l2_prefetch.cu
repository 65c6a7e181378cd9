/* Weight bytes pulled into the L2 ahead of the product that reads them.
 *
 * In a decode step the DRAM idles while the small kernels run (norms, attention at short
 * contexts, geglu): about a third of the step on the 31B. A prefetch node placed in the
 * kernel chain asks the copy engine to bring the next product's first bytes into the L2
 * (cp.async.bulk.prefetch.L2: no registers, no shared memory, nothing to wait for), so the
 * product then reads them at L2 latency. The node lets its successor launch at once, waits
 * for its predecessor (so the chain's ordering is unchanged: whoever waits on it waits on
 * everything before it), and issues the prefetches before or after that wait. Weights are
 * read-only for the whole step, so either order is safe. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "ck_launch.cuh"
#include "decode_kernels.h"

struct PfArgs {
  const uint8_t *p[DK_PF_MAX];
  unsigned long long bytes[DK_PF_MAX];
  int n;
  int before;   /* 1: issue before waiting for the predecessor (during its tail) */
  int policy;   /* 1: the lines come in as evict_last */
  unsigned chunk; /* bytes per prefetch instruction (multiple of 16) */
};

__device__ __forceinline__ void l2_pf(const void *p, uint32_t bytes, int policy, uint64_t pol) {
  if (policy)
    asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;" ::"l"(p), "r"(bytes), "l"(pol)
                 : "memory");
  else
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

__device__ void pf_issue(const PfArgs &a) {
  uint64_t pol = 0;
  if (a.policy) asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  const unsigned long long tid = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
  const unsigned long long nth = (unsigned long long)gridDim.x * blockDim.x;
  for (int i = 0; i < a.n; i++) {
    const unsigned long long nch = (a.bytes[i] + a.chunk - 1) / a.chunk;
    for (unsigned long long c = tid; c < nch; c += nth) {
      unsigned long long off = c * a.chunk, left = a.bytes[i] - off;
      l2_pf(a.p[i] + off, (uint32_t)(left < a.chunk ? left : a.chunk), a.policy, pol);
    }
  }
}

__global__ void l2_prefetch_kernel(PfArgs a) {
  ck_pdl_trigger();
  if (a.before) pf_issue(a);
  ck_pdl_wait();
  ck_tl_stamp();
  if (!a.before) pf_issue(a);
}

extern "C" int dk_l2_prefetch(const void *const *ptrs, const size_t *bytes, int n, int blocks, int before,
                              int policy, unsigned chunk, void *stream) {
  if (n < 0 || n > DK_PF_MAX || blocks < 1 || chunk < 16 || chunk % 16) return (int)cudaErrorInvalidValue;
  PfArgs a = {};
  for (int i = 0; i < n; i++) {
    /* the copy engine wants 16-byte aligned addresses and sizes */
    uintptr_t p = (uintptr_t)ptrs[i], lo = (p + 15) & ~(uintptr_t)15;
    size_t b = bytes[i] > lo - p ? (bytes[i] - (lo - p)) & ~(size_t)15 : 0;
    a.p[i] = (const uint8_t *)lo;
    a.bytes[i] = b;
  }
  a.n = n;
  a.before = before;
  a.policy = policy;
  a.chunk = chunk;
  return (int)ck_launch(l2_prefetch_kernel, blocks, 32, 0, (cudaStream_t)stream, a);
}

CK_PDL_EARLY_SETTER(ck_pdl_early_l2_prefetch)
