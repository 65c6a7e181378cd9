/* Host emulation of the thread-block clusters of cooperative_groups (EMU_CLUSTER builds of
 * tests/gpu/emu/cuda_runtime.h): the harness runs a cluster's blocks side by side and provides
 * the cluster barrier and the blocks' dynamic shared memory by rank. Not a CUDA header. */
#ifndef EMU_COOPERATIVE_GROUPS_H
#define EMU_COOPERATIVE_GROUPS_H
#include <stdio.h>
#include <stdlib.h>

#include "cuda_runtime.h"

#ifndef EMU_CLUSTER
#error "cooperative_groups.h (emulation): clusters need EMU_CLUSTER"
#endif

extern pthread_barrier_t *emu_cluster_barrier; /* the current cluster's threads */
extern emu_block *emu_cluster_blocks;          /* its blocks, by rank */
extern unsigned emu_cluster_size;

namespace cooperative_groups {
struct cluster_group {
  void sync() const { pthread_barrier_wait(emu_cluster_barrier); }
  /* a split barrier: the arrival is a no-op here and the wait a whole barrier (stronger) */
  void barrier_arrive() const {}
  void barrier_wait() const { pthread_barrier_wait(emu_cluster_barrier); }
  unsigned block_rank() const { return blockIdx.x % emu_cluster_size; }
  /* p in this block's dynamic shared memory → the same offset in block r's (anything else,
   * e.g. a static __shared__ variable, has no per-block copy here: a harness error) */
  template <typename T> T *map_shared_rank(T *p, unsigned r) const {
    const unsigned char *b = reinterpret_cast<const unsigned char *>(p);
    if (r >= emu_cluster_size || b < emu_blk->smem || b + sizeof(T) > emu_blk->smem + emu_blk->smem_bytes) {
      fprintf(stderr, "emulation: map_shared_rank of a pointer outside dynamic shared memory (or rank %u)\n", r);
      abort();
    }
    return reinterpret_cast<T *>(emu_cluster_blocks[r].smem + (b - emu_blk->smem));
  }
};
inline cluster_group this_cluster() { return cluster_group(); }
} // namespace cooperative_groups
#endif
