/* The bulk-copy streaming probe (stream_probe.cu; mlxrt-stream-probe). */
#ifndef MLXRT_STREAM_PROBE_H
#define MLXRT_STREAM_PROBE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SP_MAX_NST 16
#define SP_MAX_WARPS 16

enum { SP_PLAIN = 0, SP_BLOCK = 1, SP_WARP = 2 };

typedef struct sp_config {
  const char *name;
  int kind;          /* SP_PLAIN: nst = 16-byte loads in flight per thread (≤ 8) */
  int blocks_per_sm; /* grid = SMs × this */
  int warps;         /* per block */
  int nst;           /* stages per pipeline */
  int rows;          /* rows per stage */
  int row_bytes;     /* bytes per row (one copy each unless onecopy) */
  int onecopy;       /* one copy per stage */
  int work;          /* dependent FMAs per thread and stage */
} sp_config;

size_t sp_smem_bytes(const sp_config *c);
int sp_occupancy(const sp_config *c);
/* one launch over `bytes` of src (a multiple of row_bytes and of 16) */
int sp_launch(const sp_config *c, const void *src, int64_t bytes, int sms, float *sink, void *stream);

#ifdef __cplusplus
}
#endif

#endif
