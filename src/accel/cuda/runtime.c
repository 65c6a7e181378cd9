/* CUDA runtime wrapper: status → one-line message with the caller's file and line. */
#include "runtime.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static int fail_cuda(cudaError_t st, const char *what, const char *file, int line,
                     mlxrt_error *err) {
  cudaGetLastError(); /* clear a sticky-less error so the next call starts clean */
  return mx_fail(err, "CUDA %s failed at %s:%d: %s (%s)", what, base_name(file), line,
                 cudaGetErrorString(st), cudaGetErrorName(st));
}

#define CHECK(call, what)                                                                  \
  do {                                                                                     \
    cudaError_t st_ = (call);                                                              \
    if (st_ != cudaSuccess) return fail_cuda(st_, (what), file, line, err);               \
  } while (0)

int rt_status_at(int status, const char *what, const char *file, int line, mlxrt_error *err) {
  if (status == 0) return 0;
  return fail_cuda((cudaError_t)status, what, file, line, err);
}

int rt_device_open_at(rt_device_info *info, const char *file, int line, mlxrt_error *err) {
  int n = 0;
  cudaError_t st = cudaGetDeviceCount(&n);
  if (st != cudaSuccess) {
    cudaGetLastError();
    return mx_fail(err, "no usable CUDA device: %s", cudaGetErrorString(st));
  }
  if (n <= 0) return mx_fail(err, "no CUDA device present");
  int dev = 0;
  const char *env = getenv("MLXRT_CUDA_DEVICE");
  if (env && *env) {
    char *end;
    long v = strtol(env, &end, 10);
    if (*end || v < 0 || v >= n)
      return mx_fail(err, "MLXRT_CUDA_DEVICE=%s: expected a device index in [0, %d)", env, n);
    dev = (int)v;
  }
  CHECK(cudaSetDevice(dev), "cudaSetDevice");
  struct cudaDeviceProp p;
  CHECK(cudaGetDeviceProperties(&p, dev), "cudaGetDeviceProperties");
  memset(info, 0, sizeof *info);
  info->index = dev;
  snprintf(info->name, sizeof info->name, "%s", p.name);
  info->cc_major = p.major;
  info->cc_minor = p.minor;
  info->sms = p.multiProcessorCount;
  info->l2_bytes = (size_t)p.l2CacheSize;
  info->total_mem = p.totalGlobalMem;
  int clk = 0, bus = 0;
  if (cudaDeviceGetAttribute(&clk, cudaDevAttrMemoryClockRate, dev) == cudaSuccess)
    info->mem_clock_khz = clk;
  if (cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess)
    info->mem_bus_bits = bus;
  cudaGetLastError();
  return 0;
}

int rt_malloc_at(void **p, size_t n, const char *file, int line, mlxrt_error *err) {
  *p = NULL;
  cudaError_t st = cudaMalloc(p, n ? n : 16);
  if (st != cudaSuccess) {
    char what[160];
    size_t fb = 0, tb = 0;
    cudaGetLastError();
    if (st == cudaErrorMemoryAllocation && cudaMemGetInfo(&fb, &tb) == cudaSuccess)
      snprintf(what, sizeof what, "cudaMalloc of %.1f MB (%.1f MB of %.1f MB free)", (double)n / 1e6,
               (double)fb / 1e6, (double)tb / 1e6);
    else
      snprintf(what, sizeof what, "cudaMalloc of %.1f MB", (double)n / 1e6);
    *p = NULL;
    return fail_cuda(st, what, file, line, err);
  }
  return 0;
}

void rt_free(void *p) {
  if (p) cudaFree(p);
}

int rt_host_alloc_at(void **p, size_t n, const char *file, int line, mlxrt_error *err) {
  *p = NULL;
  cudaError_t st = cudaMallocHost(p, n ? n : 16);
  if (st != cudaSuccess) {
    *p = NULL;
    return fail_cuda(st, "cudaMallocHost", file, line, err);
  }
  return 0;
}

void rt_host_free(void *p) {
  if (p) cudaFreeHost(p);
}

int rt_stream_create_at(void **s, const char *file, int line, mlxrt_error *err) {
  cudaStream_t st;
  CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
  *s = st;
  return 0;
}

void rt_stream_destroy(void *s) {
  if (s) cudaStreamDestroy((cudaStream_t)s);
}

int rt_stream_sync_at(void *s, const char *file, int line, mlxrt_error *err) {
  CHECK(cudaStreamSynchronize((cudaStream_t)s), "stream synchronize (a kernel or copy before it)");
  return 0;
}

int rt_h2d_at(void *dst, const void *src, size_t n, void *s, const char *file, int line,
              mlxrt_error *err) {
  CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, (cudaStream_t)s), "host→device copy");
  return 0;
}

int rt_d2h_at(void *dst, const void *src, size_t n, void *s, const char *file, int line,
              mlxrt_error *err) {
  CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, (cudaStream_t)s), "device→host copy");
  return 0;
}

int rt_memset_at(void *dst, int v, size_t n, void *s, const char *file, int line, mlxrt_error *err) {
  CHECK(cudaMemsetAsync(dst, v, n, (cudaStream_t)s), "cudaMemsetAsync");
  return 0;
}

int rt_event_create_at(void **e, const char *file, int line, mlxrt_error *err) {
  cudaEvent_t ev;
  CHECK(cudaEventCreate(&ev), "cudaEventCreate");
  *e = ev;
  return 0;
}

void rt_event_destroy(void *e) {
  if (e) cudaEventDestroy((cudaEvent_t)e);
}

int rt_event_record_at(void *e, void *s, const char *file, int line, mlxrt_error *err) {
  CHECK(cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s), "cudaEventRecord");
  return 0;
}

int rt_stream_wait_event_at(void *s, void *e, const char *file, int line, mlxrt_error *err) {
  CHECK(cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0), "cudaStreamWaitEvent");
  return 0;
}

int rt_event_ms_at(void *a, void *b, float *ms, const char *file, int line, mlxrt_error *err) {
  CHECK(cudaEventSynchronize((cudaEvent_t)b), "cudaEventSynchronize");
  CHECK(cudaEventElapsedTime(ms, (cudaEvent_t)a, (cudaEvent_t)b), "cudaEventElapsedTime");
  return 0;
}

int rt_graph_begin_at(void *s, const char *file, int line, mlxrt_error *err) {
  CHECK(cudaStreamBeginCapture((cudaStream_t)s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  return 0;
}

int rt_graph_end_at(void *s, void **exec, const char *file, int line, mlxrt_error *err) {
  cudaGraph_t g;
  CHECK(cudaStreamEndCapture((cudaStream_t)s, &g), "cudaStreamEndCapture");
  cudaGraphExec_t ge;
  cudaError_t st = cudaGraphInstantiate(&ge, g, 0);
  cudaGraphDestroy(g);
  if (st != cudaSuccess) return fail_cuda(st, "cudaGraphInstantiate", file, line, err);
  *exec = ge;
  return 0;
}

int rt_graph_launch_at(void *exec, void *s, const char *file, int line, mlxrt_error *err) {
  CHECK(cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)s), "cudaGraphLaunch");
  return 0;
}

void rt_graph_destroy(void *exec) {
  if (exec) cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

int rt_mem_info_at(size_t *free_b, size_t *total_b, const char *file, int line, mlxrt_error *err) {
  CHECK(cudaMemGetInfo(free_b, total_b), "cudaMemGetInfo");
  return 0;
}

const char *rt_func_name(const void *func) {
  const char *name = NULL;
#if CUDART_VERSION >= 12030 /* cudaFuncGetName came with CUDA 12.3 */
  if (cudaFuncGetName(&name, func) != cudaSuccess) {
    cudaGetLastError();
    return NULL;
  }
#else
  (void)func;
#endif
  return name;
}
