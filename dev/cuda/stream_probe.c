/* mlxrt-stream-probe: what streaming 134 MB (a full layer's K at 32768 keys: 4 KV heads × 512
 * dims × bf16 per key) through shared memory with bulk copies reaches, by pipeline shape, next
 * to plain loads (src/accel/cuda/probe/stream_probe.cu). Each configuration: back-to-back
 * launches rotating over enough buffers to hold ≥ 256 MB (at least two; past the 60 MB L2, so
 * a launch finds little of its buffer there), median of 7 passes of 8 launches; GB/s counts the
 * bytes read. Exit status 1 when a launch fails.
 *   mlxrt-stream-probe [--mb N]    buffer size in MB (default 134) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "probe/stream_probe.h"
#include "runtime.h"

#define PASSES 7
#define LAUNCHES 8
#define MAX_BUFS 16

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int64_t mb = 134;
  if (argc == 3 && !strcmp(argv[1], "--mb")) mb = atoll(argv[2]);
  else if (argc != 1) {
    fprintf(stderr, "usage: mlxrt-stream-probe [--mb N]\n");
    return 2;
  }
  mlxrt_error err = {{0}};
  rt_device_info dev;
  void *st = NULL, *e0 = NULL, *e1 = NULL, *buf[MAX_BUFS] = {NULL};
  float *sink = NULL;
  const int64_t bytes = mb * 1024 * 1024 / 65536 * 65536;
  if (bytes <= 0) {
    fprintf(stderr, "mlxrt-stream-probe: --mb %lld: expected a positive size\n", (long long)mb);
    return 2;
  }
  int nbuf = (int)((256ll * 1024 * 1024 + bytes - 1) / bytes);
  if (nbuf < 2) nbuf = 2;
  if (nbuf > MAX_BUFS) nbuf = MAX_BUFS;
  int fail = rt_device_open(&dev, &err) || rt_stream_create(&st, &err) || rt_event_create(&e0, &err) ||
             rt_event_create(&e1, &err) || rt_malloc((void **)&sink, 4096, &err);
  for (int b = 0; b < nbuf && !fail; b++)
    fail = rt_malloc(&buf[b], (size_t)bytes, &err) || rt_memset(buf[b], 0x3c, (size_t)bytes, st, &err);
  if (fail) {
    fprintf(stderr, "mlxrt-stream-probe: %s\n", err.msg);
    return 2;
  }
  /* name, kind, blocks/SM, warps, stages, rows/stage, row bytes, one copy, work */
  const sp_config cfgs[] = {
      {"plain 16B x4, 8 blk/SM", SP_PLAIN, 8, 8, 4, 0, 0, 0, 0},
      {"plain 16B x8, 4 blk/SM", SP_PLAIN, 4, 8, 8, 0, 0, 0, 0},
      {"block 1/SM 3x16x4K (scores_tma)", SP_BLOCK, 1, 4, 3, 16, 4096, 0, 0},
      {"block 1/SM 3x16x4K, work 256", SP_BLOCK, 1, 4, 3, 16, 4096, 0, 256},
      {"block 1/SM 3x64K one copy", SP_BLOCK, 1, 4, 3, 16, 4096, 1, 0},
      {"block 1/SM 6x8x4K", SP_BLOCK, 1, 4, 6, 8, 4096, 0, 0},
      {"block 1/SM 12x4x4K", SP_BLOCK, 1, 4, 12, 4, 4096, 0, 0},
      {"block 2/SM 3x8x4K", SP_BLOCK, 2, 4, 3, 8, 4096, 0, 0},
      {"block 2/SM 6x4x4K", SP_BLOCK, 2, 4, 6, 4, 4096, 0, 0},
      {"block 4/SM 3x4x4K", SP_BLOCK, 4, 4, 3, 4, 4096, 0, 0},
      {"block 4/SM 6x2x4K", SP_BLOCK, 4, 4, 6, 2, 4096, 0, 0},
      {"block 8/SM 3x2x4K", SP_BLOCK, 8, 4, 3, 2, 4096, 0, 0},
      {"block 8/SM 2x9K one copy (qmv)", SP_BLOCK, 8, 4, 2, 9, 1024, 1, 0},
      {"warp 1/SM x4 3x16x1K", SP_WARP, 1, 4, 3, 16, 1024, 0, 0},
      {"warp 1/SM x4 3x16x1K, work 256", SP_WARP, 1, 4, 3, 16, 1024, 0, 256},
      {"warp 1/SM x8 3x8x1K", SP_WARP, 1, 8, 3, 8, 1024, 0, 0},
      {"warp 1/SM x8 6x4x1K", SP_WARP, 1, 8, 6, 4, 1024, 0, 0},
      {"warp 2/SM x4 3x8x1K", SP_WARP, 2, 4, 3, 8, 1024, 0, 0},
      {"warp 1/SM x16 3x4x1K", SP_WARP, 1, 16, 3, 4, 1024, 0, 0},
  };
  const int n = (int)(sizeof cfgs / sizeof *cfgs);
  printf("device: %s, %d SMs; %lld MiB per launch, %d buffers in rotation\n\n", dev.name, dev.sms,
         (long long)(bytes >> 20), nbuf);
  printf("%-34s %6s %8s %9s %8s\n", "pipeline", "blk/SM", "KB/SM", "us", "GB/s");
  int bad = 0;
  for (int c = 0; c < n; c++) {
    const sp_config *cf = &cfgs[c];
    const int occ = sp_occupancy(cf);
    if (occ < cf->blocks_per_sm) {
      printf("%-34s %6d: does not fit (%d resident per SM)\n", cf->name, cf->blocks_per_sm, occ);
      continue;
    }
    float t[PASSES];
    int failed = 0;
    for (int p = -1; p < PASSES && !failed; p++) {
      if (rt_event_record(e0, st, &err)) failed = 1;
      for (int l = 0; l < LAUNCHES && !failed; l++)
        if (rt_status(sp_launch(cf, buf[l % nbuf], bytes, dev.sms, sink, st), cf->name, &err)) failed = 1;
      float ms = 0;
      if (!failed && (rt_event_record(e1, st, &err) || rt_event_ms(e0, e1, &ms, &err))) failed = 1;
      if (p >= 0) t[p] = ms * 1000.0f / LAUNCHES;
    }
    if (failed) {
      printf("%-34s failed: %s\n", cf->name, err.msg);
      bad = 1;
      break;
    }
    qsort(t, PASSES, sizeof *t, cmp_float);
    const double us = t[PASSES / 2];
    printf("%-34s %6d %8.0f %9.2f %8.0f\n", cf->name, cf->blocks_per_sm,
           (double)sp_smem_bytes(cf) * cf->blocks_per_sm / 1024.0, us, (double)bytes / (us * 1e3));
  }
  for (int b = 0; b < nbuf; b++) rt_free(buf[b]);
  rt_free(sink);
  rt_event_destroy(e0);
  rt_event_destroy(e1);
  rt_stream_destroy(st);
  return bad;
}
