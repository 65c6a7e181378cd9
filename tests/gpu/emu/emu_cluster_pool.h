/* The grid runner of the EMU_CLUSTER emulation (cuda_runtime.h, cooperative_groups.h): a pool
 * of EMU_POOL_CL · EMU_POOL_T host threads runs one cluster of EMU_POOL_CL blocks at a time, the
 * blocks side by side, each with its own barriers, warp buffers and dynamic shared memory
 * (filled with NaN bytes for every cluster). A harness defines EMU_POOL_CL and EMU_POOL_T,
 * includes this once, and calls emu_pool_start() / emu_pool_stop() around its launches; the
 * launched grid's x extent must be a multiple of EMU_POOL_CL and its blocks EMU_POOL_T wide. */
#ifndef EMU_CLUSTER_POOL_H
#define EMU_CLUSTER_POOL_H
#include <stdio.h>
#include <stdlib.h>

#include <functional>
#include <vector>

#include "cooperative_groups.h"

thread_local emu_dim3 threadIdx, blockIdx;
thread_local emu_block *emu_blk;
emu_dim3 gridDim, blockDim;
pthread_barrier_t *emu_cluster_barrier;
emu_block *emu_cluster_blocks;
unsigned emu_cluster_size = EMU_POOL_CL;

#define EMU_POOL_NT (EMU_POOL_CL * EMU_POOL_T)
static pthread_barrier_t emu_pool_start_b, emu_pool_end_b, emu_pool_cluster_b;
static emu_block emu_pool_blocks[EMU_POOL_CL];
static std::vector<unsigned char> emu_pool_smem[EMU_POOL_CL];
static const std::function<void()> *emu_pool_body;
static emu_dim3 emu_pool_first; /* the running cluster's first block */
static bool emu_pool_quit;
static std::vector<pthread_t> emu_pool_threads;

static void *emu_pool_worker(void *arg) {
  const unsigned t = (unsigned)(uintptr_t)arg, b = t / EMU_POOL_T;
  threadIdx = {t % EMU_POOL_T, 0, 0};
  emu_blk = &emu_pool_blocks[b];
  for (;;) {
    pthread_barrier_wait(&emu_pool_start_b);
    if (emu_pool_quit) return NULL;
    blockIdx = {emu_pool_first.x + b, emu_pool_first.y, emu_pool_first.z};
    (*emu_pool_body)();
    pthread_barrier_wait(&emu_pool_end_b);
  }
}

int emu_run_grid(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body) {
  /* one block of at most a warp (repack.cu's emulated launches: grid-stride loops without
   * barriers or shuffles, which prepare a case's weights) runs on the calling thread, its
   * threads one after another */
  if (grid.x == 1 && grid.y == 1 && grid.z == 1 && block.x <= 32 && block.y == 1 && block.z == 1 && !smem) {
    gridDim = {1, 1, 1};
    blockDim = {block.x, 1, 1};
    for (unsigned t = 0; t < block.x; t++) {
      threadIdx = {t, 0, 0};
      blockIdx = {0, 0, 0};
      body();
    }
    return 0;
  }
  if (block.x != EMU_POOL_T || block.y != 1 || block.z != 1 || grid.x % EMU_POOL_CL) return 1;
  emu_pool_body = &body;
  gridDim = {grid.x, grid.y, grid.z};
  blockDim = {block.x, 1, 1};
  for (unsigned z = 0; z < grid.z; z++)
    for (unsigned y = 0; y < grid.y; y++)
      for (unsigned x = 0; x < grid.x; x += EMU_POOL_CL) {
        emu_pool_first = {x, y, z};
        for (int b = 0; b < EMU_POOL_CL; b++) {
          emu_pool_smem[b].assign(smem ? smem : 1, 0xff);
          emu_pool_blocks[b].smem = emu_pool_smem[b].data();
          emu_pool_blocks[b].smem_bytes = smem;
        }
        pthread_barrier_wait(&emu_pool_start_b);
        pthread_barrier_wait(&emu_pool_end_b);
      }
  return 0;
}

static void emu_pool_start() {
  for (int b = 0; b < EMU_POOL_CL; b++) {
    pthread_barrier_init(&emu_pool_blocks[b].block, NULL, EMU_POOL_T);
    for (int w = 0; w < EMU_POOL_T / 32; w++) pthread_barrier_init(&emu_pool_blocks[b].warp[w], NULL, 32);
#ifdef EMU_NAMED_T
    pthread_barrier_init(&emu_pool_blocks[b].named, NULL, EMU_NAMED_T);
#endif
  }
  pthread_barrier_init(&emu_pool_cluster_b, NULL, EMU_POOL_NT);
  emu_cluster_barrier = &emu_pool_cluster_b;
  emu_cluster_blocks = emu_pool_blocks;
  pthread_barrier_init(&emu_pool_start_b, NULL, EMU_POOL_NT + 1);
  pthread_barrier_init(&emu_pool_end_b, NULL, EMU_POOL_NT + 1);
  emu_pool_threads.resize(EMU_POOL_NT);
  /* small stacks (the kernels keep a few KB each): EMU_POOL_NT threads at the default 8 MB
   * would reserve gigabytes; a machine that cannot start them all gets a clear failure
   * instead of a barrier that never fills */
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setstacksize(&at, (size_t)1 << 20);
  for (int t = 0; t < EMU_POOL_NT; t++) {
    const int e = pthread_create(&emu_pool_threads[(size_t)t], &at, emu_pool_worker, (void *)(uintptr_t)t);
    if (e) {
      fprintf(stderr, "emulation: cannot start host thread %d of %d (error %d)\n", t, EMU_POOL_NT, e);
      exit(2);
    }
  }
  pthread_attr_destroy(&at);
}

static void emu_pool_stop() {
  emu_pool_quit = true;
  pthread_barrier_wait(&emu_pool_start_b);
  for (pthread_t &t : emu_pool_threads) pthread_join(t, NULL);
}
/* Runs every case through run (1 = failed), stops the pool, prints the summary line; the
 * harness's exit status. */
template <typename C, size_t N, typename F>
static int emu_run_cases(const C (&cases)[N], F run) {
  int fails = 0;
  for (const C &c : cases) fails += run(c);
  emu_pool_stop();
  printf("%d passed, %d failed\n", (int)N - fails, fails);
  return fails ? 1 : 0;
}

#endif
