/* libFuzzer target: arbitrary bytes as a whole safetensors file image. Whatever st_parse
 * accepts must keep every promise of the header (views inside the buffer, sizes consistent,
 * names sorted and unique, spans disjoint); whatever it rejects must leave nothing allocated. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mlx/safetensors.h"

static void require(int cond) {
  if (!cond) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mlxrt_error err;
  st_file f;
  if (st_parse(data, size, "fuzz.safetensors", &f, &err) != 0) {
    require(f.tensors == NULL && f.strings == NULL && f.path == NULL);
    require(strncmp(err.msg, "fuzz.safetensors: ", 18) == 0);
    return 0;
  }
  volatile uint8_t sink = 0;
  for (int i = 0; i < f.ntensors; i++) {
    const st_tensor *t = &f.tensors[i];
    require(t->ndim >= 0 && t->ndim <= ST_MAX_DIMS);
    require(t->nbytes == (uint64_t)st_numel(t) * st_dtype_size(t->dtype));
    require(t->data >= data && t->nbytes <= size && t->data + t->nbytes <= data + size);
    if (t->nbytes) sink ^= t->data[0] ^ t->data[t->nbytes - 1]; /* ASan checks the ends */
    if (i) require(strcmp(f.tensors[i - 1].name, t->name) < 0);
    require(st_file_find(&f, t->name) == t);
    for (int j = 0; j < i; j++) { /* spans disjoint (quadratic, but inputs are small) */
      const st_tensor *u = &f.tensors[j];
      if (t->nbytes && u->nbytes)
        require(t->offset + t->nbytes <= u->offset || u->offset + u->nbytes <= t->offset);
    }
  }
  for (int i = 0; i < f.nmetadata; i++)
    require(st_file_metadata(&f, f.metadata[i].key) == f.metadata[i].value);
  (void)sink;
  st_close_file(&f);
  return 0;
}
