/* safetensors reader: mmap, complete header validation, lazy tensor views, shards.
 * Nothing is read from the data area until someone dereferences a view's `data`. */
#ifndef MLXRT_MLX_SAFETENSORS_H
#define MLXRT_MLX_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "mlxrt.h"

typedef enum {
  ST_BOOL = 0, ST_U8, ST_I8, ST_U16, ST_I16, ST_F16, ST_BF16, ST_U32, ST_I32, ST_F32,
  ST_U64, ST_I64, ST_F64, ST_F8_E4M3, ST_F8_E5M2, ST_DTYPE_COUNT
} st_dtype;

#define ST_MAX_DIMS 8

typedef struct st_tensor {
  const char *name;       /* owned by the file */
  st_dtype dtype;
  int ndim;
  int64_t shape[ST_MAX_DIMS];
  uint64_t nbytes;
  uint64_t offset;        /* from the start of the data area */
  const uint8_t *data;    /* view into the mapping (unaligned in general) */
  int file_index;         /* which shard */
} st_tensor;

typedef struct st_kv {
  const char *key, *value;
} st_kv;

typedef struct st_file {
  char *path;
  uint8_t *map;           /* whole file mapping (or caller buffer for st_parse) */
  size_t size;
  int owns_map;
  st_tensor *tensors;     /* sorted by name */
  int ntensors;
  st_kv *metadata;        /* __metadata__ */
  int nmetadata;
  char *strings;          /* storage for names/metadata */
} st_file;

/* A checkpoint: one or more shards, tensor names unique across them. */
typedef struct st_archive {
  st_file *files;
  int nfiles;
  const st_tensor **index; /* all tensors of all files, sorted by name */
  int ntensors;
} st_archive;

size_t st_dtype_size(st_dtype dt);
const char *st_dtype_name(st_dtype dt);

/* Validates a whole file image held in memory (what st_open_file maps). `path` is used in
 * messages only. On success `out` refers into `buf`, which must outlive it.
 * Every opener fills `err` with one line naming the file (and tensor) on failure, and then
 * leaves `out` zeroed with nothing allocated, so the matching close is optional but harmless.
 * The header is checked completely: dtype known, shape of at most ST_MAX_DIMS non-negative
 * integers, data_offsets [begin,end] inside the data area holding exactly numel·dtype size
 * bytes, non-empty spans disjoint, names unique, __metadata__ a string→string map. */
int st_parse(const uint8_t *buf, size_t len, const char *path, st_file *out, mlxrt_error *err);
int st_open_file(const char *path, st_file *out, mlxrt_error *err);
void st_close_file(st_file *f);

/* Opens a checkpoint directory: shards from model.safetensors.index.json when present (every
 * file it names must exist and hold the tensors its weight_map puts there), otherwise every
 * model*.safetensors (sorted). Also accepts a single .safetensors path. Tensor names must be
 * unique across shards. */
int st_open(const char *path, st_archive *out, mlxrt_error *err);
void st_close(st_archive *a);

/* Binary search by name; NULL when absent. */
const st_tensor *st_find(const st_archive *a, const char *name);
/* The position of a tensor in a->index (-1 when absent). */
int st_find_pos(const st_archive *a, const char *name);
const st_tensor *st_file_find(const st_file *f, const char *name);
const char *st_file_metadata(const st_file *f, const char *key);
int64_t st_numel(const st_tensor *t);

#endif
