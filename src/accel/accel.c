/* Backend selection: auto | cpu | cuda, from options or $MLXRT_BACKEND. The CUDA backend is a
 * plug-in (libmlxrt-cuda.so) opened with dlopen, so one binary runs with or without a GPU. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accel/accel.h"
#include "base/error.h"

#ifndef MLXRT_PLUGIN_DIR
#define MLXRT_PLUGIN_DIR "."
#endif
#ifndef MLXRT_INSTALL_PLUGIN_DIR
#define MLXRT_INSTALL_PLUGIN_DIR "/usr/local/lib"
#endif

#define CUDA_PLUGIN_NAME "libmlxrt-cuda.so"
#define CUDA_PLUGIN_ENTRY "mlxrt_cuda_backend_create"

typedef accel_backend *(*plugin_create_fn)(const accel_options *opt, mlxrt_error *err);

/* Candidate locations, most specific first: $MLXRT_PLUGIN_DIR, the executable's folder, the
 * build folder, the install folder, then the loader's own search path. */
static void *open_cuda_plugin(char *tried, size_t tried_len) {
  char dirs[5][PATH_MAX];
  int n = 0;
  const char *env = getenv("MLXRT_PLUGIN_DIR");
  if (env && *env) snprintf(dirs[n++], PATH_MAX, "%s", env);
  char exe[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len > 0) {
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) {
      *slash = 0;
      snprintf(dirs[n++], PATH_MAX, "%s", exe);
    }
  }
  snprintf(dirs[n++], PATH_MAX, "%s", MLXRT_PLUGIN_DIR);
  snprintf(dirs[n++], PATH_MAX, "%s", MLXRT_INSTALL_PLUGIN_DIR);
  tried[0] = 0;
  for (int i = 0; i < n; i++) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dirs[i], CUDA_PLUGIN_NAME);
    if (access(path, R_OK) != 0) continue;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) return h;
    snprintf(tried, tried_len, "%s", dlerror());
  }
  void *h = dlopen(CUDA_PLUGIN_NAME, RTLD_NOW | RTLD_LOCAL);
  if (!h && !tried[0]) snprintf(tried, tried_len, "%s not found next to the binary, in $MLXRT_PLUGIN_DIR or on the library path", CUDA_PLUGIN_NAME);
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
  accel_backend *b = create_any(opt, err);
  if (b) b->verbose = opt ? opt->verbose : 0;
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
