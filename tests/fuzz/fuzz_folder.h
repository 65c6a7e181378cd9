/* For the fuzz targets that need files on disk: the input is split on the marker "\n@@FILE@@\n"
 * into parts, and part i is written as names[i] in a private temporary directory (on tmpfs
 * when /dev/shm exists); a part that is absent leaves its file absent. */
#ifndef MLXRT_FUZZ_FOLDER_H
#define MLXRT_FUZZ_FOLDER_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FUZZ_MARK "\n@@FILE@@\n"

static const char *fuzz_dir(void) {
  static char dir[64];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "%s/mlxrt-fuzz-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!mkdtemp(dir)) abort();
  }
  return dir;
}

static void fuzz_path(const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%s/%s", fuzz_dir(), name);
}

/* Writes the parts; returns how many there were. */
static int fuzz_write_folder(const uint8_t *data, size_t size, const char *const *names,
                             int nnames) {
  const size_t ml = sizeof FUZZ_MARK - 1;
  const uint8_t *p = data, *end = data + size;
  int i = 0;
  char path[256];
  for (int k = 0; k < nnames; k++) {
    fuzz_path(names[k], path, sizeof path);
    unlink(path);
  }
  while (i < nnames) {
    const uint8_t *m = end - p >= (ptrdiff_t)ml ? memmem(p, (size_t)(end - p), FUZZ_MARK, ml) : NULL;
    const uint8_t *stop = m ? m : end;
    fuzz_path(names[i], path, sizeof path);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (stop > p && fwrite(p, 1, (size_t)(stop - p), f) != (size_t)(stop - p)) abort();
    fclose(f);
    i++;
    if (!m) break;
    p = m + ml;
  }
  return i;
}

#endif
