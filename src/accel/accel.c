/* Backend selection: auto | cpu | cuda, from options or $MLXRT_BACKEND. The CUDA backend is a
 * plug-in (libmlxrt-cuda.so) opened with dlopen, so one binary runs with or without a GPU. */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accel/accel.h"
#include "base/error.h"

/* Where an installed bin/ finds its lib/ (from GNUInstallDirs; "../lib" by default). */
#ifndef MLXRT_BIN_TO_LIBDIR
#define MLXRT_BIN_TO_LIBDIR "../lib"
#endif

#define CUDA_PLUGIN_NAME "libmlxrt-cuda.so"
#define CUDA_PLUGIN_ENTRY "mlxrt_cuda_backend_create"

typedef accel_backend *(*plugin_create_fn)(const accel_options *opt, mlxrt_error *err);

/* The folder of the file that holds this code: libmlxrt.so's for a program linked with the
 * shared library, the executable's for one linked with the static library. Symbolic links are
 * resolved, so a linked-to binary or library finds the plug-in beside its real file. */
static int code_dir(char *out, size_t len) {
  Dl_info info;
  struct link_map *map = NULL;
  const char *file = "/proc/self/exe"; /* the main program's link map has no name */
  if (dladdr1((const void *)(uintptr_t)&code_dir, &info, (void **)&map, RTLD_DL_LINKMAP) && map &&
      map->l_name && map->l_name[0])
    file = map->l_name;
  char real[PATH_MAX];
  if (!realpath(file, real)) return -1;
  char *slash = strrchr(real, '/');
  if (!slash) return -1;
  *slash = 0;
  snprintf(out, len, "%s", slash == real ? "/" : real);
  return 0;
}

/* Candidate locations, most specific first: $MLXRT_PLUGIN_DIR, the folder of the code that
 * runs (the build tree keeps the plug-in beside the binaries and libmlxrt.so; an install puts
 * it beside libmlxrt.so), that folder's MLXRT_BIN_TO_LIBDIR (an installed bin/mlxrt finds lib/),
 * then the loader's own search path. No path of the build is compiled in. */
static void *open_cuda_plugin(char *tried, size_t tried_len) {
  char dirs[3][PATH_MAX + 64], here[PATH_MAX] = "?";
  int n = 0;
  const char *env = getenv("MLXRT_PLUGIN_DIR");
  if (env && *env) snprintf(dirs[n++], sizeof dirs[0], "%s", env);
  if (code_dir(here, sizeof here) == 0) {
    snprintf(dirs[n++], sizeof dirs[0], "%s", here);
    snprintf(dirs[n++], sizeof dirs[0], "%s/%s", here, MLXRT_BIN_TO_LIBDIR);
  }
  tried[0] = 0;
  for (int i = 0; i < n; i++) {
    char path[sizeof dirs[0] + 32];
    snprintf(path, sizeof path, "%s/%s", dirs[i], CUDA_PLUGIN_NAME);
    if (access(path, R_OK) != 0) continue;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    snprintf(tried, tried_len, "%s", dlerror());
  }
  void *h = dlopen(CUDA_PLUGIN_NAME, RTLD_NOW | RTLD_LOCAL);
  if (!h && !tried[0])
    snprintf(tried, tried_len, "%s not found in $MLXRT_PLUGIN_DIR, in %.200s (beside the running code) or its %s, "
             "or on the library path", CUDA_PLUGIN_NAME, here, MLXRT_BIN_TO_LIBDIR);
  return h;
}

static accel_backend *create_cuda(const accel_options *opt, mlxrt_error *err) {
  char why[512];
  void *h = open_cuda_plugin(why, sizeof why);
  if (!h) {
    mx_fail(err, "CUDA backend unavailable: %s", why);
    return NULL;
  }
  plugin_create_fn create = (plugin_create_fn)dlsym(h, CUDA_PLUGIN_ENTRY);
  if (!create) {
    mx_fail(err, "CUDA backend unavailable: %s has no %s", CUDA_PLUGIN_NAME, CUDA_PLUGIN_ENTRY);
    dlclose(h);
    return NULL;
  }
  accel_backend *b = create(opt, err);
  /* The plug-in stays loaded for the life of the process: its code backs the returned table. */
  if (!b) dlclose(h);
  return b;
}

static accel_backend *create_any(const accel_options *opt, mlxrt_error *err);

accel_backend *accel_create(const accel_options *opt, mlxrt_error *err) {
  const char *kv_k = opt ? opt->kv_k : NULL;
  int kvk = ACCEL_KV_K_AUTO;
  if (kv_k && *kv_k && strcmp(kv_k, "auto")) {
    kvk = !strcmp(kv_k, "bf16")      ? ACCEL_KV_K_BF16
          : !strcmp(kv_k, "planar3") ? ACCEL_KV_K_PLANAR3
          : !strcmp(kv_k, "planar4") ? ACCEL_KV_K_PLANAR4
                                     : -1;
    if (kvk < 0) {
      mx_fail(err, "kv-k '%s': expected auto, bf16, planar3 or planar4", kv_k);
      return NULL;
    }
  }
  accel_backend *b = create_any(opt, err);
  if (!b) return NULL;
  if ((kvk == ACCEL_KV_K_PLANAR3 || kvk == ACCEL_KV_K_PLANAR4) && !b->kv_k_planar) {
    mx_fail(err, "kv-k %s: the %s backend keeps its K cache in bf16; a compressed K cache is a CUDA decoder mode",
            kv_k, b->name);
    accel_destroy(b);
    return NULL;
  }
  b->verbose = opt ? opt->verbose : 0;
  b->kv_k = kvk;
  return b;
}

static accel_backend *create_any(const accel_options *opt, mlxrt_error *err) {
  accel_options o = {0};
  if (opt) o = *opt;
  const char *want = o.backend;
  if (!want || !*want) want = getenv("MLXRT_BACKEND");
  if (!want || !*want) want = "auto";
  if (o.numerics && *o.numerics && strcmp(o.numerics, "float32") && strcmp(o.numerics, "mlx-cpu")) {
    mx_fail(err, "numerics '%s': expected float32 or mlx-cpu", o.numerics);
    return NULL;
  }
  const int mlx_cpu = o.numerics && !strcmp(o.numerics, "mlx-cpu");
  if (!strcmp(want, "cpu")) return accel_cpu_create_numerics(o.threads, o.numerics, err);
  if (mlx_cpu) {
    mx_fail(err, "numerics mlx-cpu runs on the CPU backend, not '%s'", want);
    return NULL;
  }
  if (!strcmp(want, "cuda")) return create_cuda(&o, err);
  if (!strcmp(want, "auto")) {
    mlxrt_error why = {{0}};
    accel_backend *b = create_cuda(&o, &why);
    if (b) return b;
    if (o.verbose) fprintf(stderr, "mlxrt: using the CPU backend (%s)\n", why.msg);
    return accel_cpu_create_numerics(o.threads, o.numerics, err);
  }
  mx_fail(err, "unknown backend '%s' (expected auto, cpu or cuda)", want);
  return NULL;
}

void accel_destroy(accel_backend *b) {
  if (b && b->destroy) b->destroy(b);
}

void accel_host_for(accel_backend *b, int64_t ntasks, accel_host_task fn, void *ctx) {
  if (b->host_for) {
    b->host_for(b, ntasks, fn, ctx);
    return;
  }
  for (int64_t t = 0; t < ntasks; t++) fn(ctx, t, 0);
}

int accel_host_workers(const accel_backend *b) { return b->host_for && b->host_workers > 0 ? b->host_workers : 1; }
