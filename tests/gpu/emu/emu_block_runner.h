/* The grid runner of the plain emulation (cuda_runtime.h with EMU_LAUNCH): one block at a time,
 * on blockDim.x fresh host threads (EMU_FIBERS: fibers on this thread, emu_fiber.h), with stale
 * bytes in its dynamic shared memory. A harness
 * includes this once (it defines the emulation's globals) instead of writing its own runner;
 * EMU_SMEM_BYTES sets the dynamic shared memory (default 228 KB, the H200's per-block limit),
 * EMU_STALE_BYTE the bytes a block finds there (default 0xa5). */
#ifndef EMU_BLOCK_RUNNER_H
#define EMU_BLOCK_RUNNER_H
#include <string.h>

#include <functional>
#include <vector>

#include "cuda_runtime.h"

#ifndef EMU_SMEM_BYTES
#define EMU_SMEM_BYTES (228 * 1024)
#endif
#ifndef EMU_STALE_BYTE /* what a block finds in its dynamic shared memory */
#define EMU_STALE_BYTE 0xa5
#endif

thread_local emu_dim3 threadIdx;
emu_dim3 blockIdx, gridDim, blockDim;
emu_barrier_t emu_block_barrier, emu_warp_barrier[EMU_WARPS];
uint64_t emu_xbuf[EMU_WARPS][32];
uint32_t emu_mma_buf[EMU_WARPS][32][6];
alignas(16) unsigned char emu_dyn_smem[EMU_SMEM_BYTES];

#ifndef EMU_FIBERS
struct emu_arg {
  unsigned tid;
  const std::function<void()> *body;
};
static void *emu_thread(void *p) {
  const emu_arg *a = (const emu_arg *)p;
  threadIdx = {a->tid, 0, 0};
  (*a->body)();
  return NULL;
}
#endif

int emu_run_grid(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body) {
  const unsigned n = block.x;
  if (n % 32 || n / 32 > EMU_WARPS || block.y != 1 || block.z != 1 || smem > sizeof emu_dyn_smem) return 1;
  gridDim = {grid.x, grid.y, grid.z};
  blockDim = {n, 1, 1};
#ifndef EMU_FIBERS
  std::vector<pthread_t> th(n);
  std::vector<emu_arg> args(n);
#endif
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x++) {
        blockIdx = {x, y, z};
        memset(emu_dyn_smem, EMU_STALE_BYTE, smem); /* stale shared memory: nothing may rely on zeros */
#ifdef EMU_FIBERS
        emu_bar_init(&emu_block_barrier, n);
        for (unsigned w = 0; w < n / 32; w++) emu_bar_init(&emu_warp_barrier[w], 32);
        emu_fibers_run(n, body);
#else
        pthread_barrier_init(&emu_block_barrier, NULL, n);
        for (unsigned w = 0; w < n / 32; w++) pthread_barrier_init(&emu_warp_barrier[w], NULL, 32);
        for (unsigned t = 0; t < n; t++) {
          args[t] = {t, &body};
          pthread_create(&th[t], NULL, emu_thread, &args[t]);
        }
        for (unsigned t = 0; t < n; t++) pthread_join(th[t], NULL);
        pthread_barrier_destroy(&emu_block_barrier);
        for (unsigned w = 0; w < n / 32; w++) pthread_barrier_destroy(&emu_warp_barrier[w]);
#endif
      }
  return 0;
}

#endif
