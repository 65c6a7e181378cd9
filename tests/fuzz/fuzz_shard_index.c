/* libFuzzer target: shard discovery. The input's parts (fuzz_folder.h) become
 * model.safetensors.index.json, model-00001-of-00002.safetensors,
 * model-00002-of-00002.safetensors and model.safetensors in a temporary folder, which st_open
 * reads as a checkpoint. An accepted archive must keep its promises (tensors unique and sorted
 * across shards, views inside their shard); a rejection leaves one line naming the problem. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_folder.h"
#include "mlx/safetensors.h"

static void require(int cond) {
  if (!cond) abort();
}

static const char *const NAMES[] = {"model.safetensors.index.json",
                                    "model-00001-of-00002.safetensors",
                                    "model-00002-of-00002.safetensors", "model.safetensors"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_write_folder(data, size, NAMES, 4);
  mlxrt_error err;
  st_archive a;
  if (st_open(fuzz_dir(), &a, &err) != 0) {
    require(a.files == NULL && a.index == NULL && strchr(err.msg, '\n') == NULL);
    return 0;
  }
  volatile uint8_t sink = 0;
  for (int i = 0; i < a.ntensors; i++) {
    const st_tensor *t = a.index[i];
    require(t->file_index >= 0 && t->file_index < a.nfiles);
    const st_file *f = &a.files[t->file_index];
    require(t->data >= f->map && t->data + t->nbytes <= f->map + f->size);
    if (t->nbytes) sink ^= t->data[0] ^ t->data[t->nbytes - 1];
    if (i) require(strcmp(a.index[i - 1]->name, t->name) < 0);
    require(st_find(&a, t->name) == t);
  }
  (void)sink;
  st_close(&a);
  return 0;
}
