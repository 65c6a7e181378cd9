/* Growable device arrays on the driver's virtual memory management: cuMemAddressReserve for
 * the whole range once, then one cuMemCreate + cuMemMap of whole pages per growth (one
 * allocation of many pages costs the driver about what one page does). The
 * driver entry points are fetched through the runtime (cudaGetDriverEntryPointByVersion), so
 * the plug-in links no driver library of its own. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "runtime.h"

typedef CUresult (*fn_granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
typedef CUresult (*fn_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*fn_addr_free)(CUdeviceptr, size_t);
typedef CUresult (*fn_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*fn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*fn_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*fn_unmap)(CUdeviceptr, size_t);
typedef CUresult (*fn_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
typedef CUresult (*fn_error_name)(CUresult, const char **);

static struct {
  int loaded; /* 1 ok, -1 failed */
  fn_granularity granularity;
  fn_reserve reserve;
  fn_addr_free addr_free;
  fn_create create;
  fn_release release;
  fn_map map;
  fn_unmap unmap;
  fn_set_access set_access;
  fn_error_name error_name;
  const char *missing; /* the entry point not found */
} drv;

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static void load_entry_points(void) {
  struct {
    const char *name;
    void **fn;
  } t[] = {{"cuMemGetAllocationGranularity", (void **)&drv.granularity},
           {"cuMemAddressReserve", (void **)&drv.reserve},
           {"cuMemAddressFree", (void **)&drv.addr_free},
           {"cuMemCreate", (void **)&drv.create},
           {"cuMemRelease", (void **)&drv.release},
           {"cuMemMap", (void **)&drv.map},
           {"cuMemUnmap", (void **)&drv.unmap},
           {"cuMemSetAccess", (void **)&drv.set_access},
           {"cuGetErrorName", (void **)&drv.error_name}};
  drv.loaded = 1;
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t st = cudaGetDriverEntryPointByVersion(t[i].name, t[i].fn, 12000, cudaEnableDefault, &q);
    if (st != cudaSuccess || q != cudaDriverEntryPointSuccess || !*t[i].fn) {
      cudaGetLastError();
      drv.missing = t[i].name;
      drv.loaded = -1;
      return;
    }
  }
}

/* once per process, whichever thread makes the first decoder */
static int load_driver(const char *file, int line, mlxrt_error *err) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, load_entry_points);
  if (drv.loaded > 0) return 0;
  return mx_fail(err, "CUDA driver entry point %s not found at %s:%d (the driver's virtual memory management is needed)",
                 drv.missing, base_name(file), line);
}

static int fail_cu(CUresult r, const char *what, const char *file, int line, mlxrt_error *err) {
  const char *name = NULL;
  if (drv.error_name) drv.error_name(r, &name);
  return mx_fail(err, "CUDA %s failed at %s:%d: %s (%d)", what, base_name(file), line, name ? name : "?", (int)r);
}

static CUmemAllocationProp page_prop(int device) {
  CUmemAllocationProp p;
  memset(&p, 0, sizeof p);
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = device;
  return p;
}

int rt_vmem_reserve_lanes_at(rt_vmem *v, int lanes, size_t lane_bytes, const char *file, int line, mlxrt_error *err) {
  memset(v, 0, sizeof *v);
  if (lanes < 1) return mx_fail(err, "CUDA growable array of %d lanes", lanes);
  if (load_driver(file, line, err)) return -1;
  if (cudaGetDevice(&v->device) != cudaSuccess) {
    cudaGetLastError();
    return mx_fail(err, "CUDA cudaGetDevice failed at %s:%d", base_name(file), line);
  }
  CUmemAllocationProp p = page_prop(v->device);
  CUresult r = drv.granularity(&v->page, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r != CUDA_SUCCESS || !v->page) return fail_cu(r, "cuMemGetAllocationGranularity", file, line, err);
  const size_t lane_pages = (lane_bytes ? lane_bytes + v->page - 1 : v->page) / v->page;
  if (lane_pages > 0x7fffffff / (size_t)lanes)
    return mx_fail(err, "CUDA growable array of %d × %zu bytes: too many pages", lanes, lane_bytes);
  const size_t pages = lane_pages * (size_t)lanes;
  v->stride = lane_pages * v->page;
  v->reserved = pages * v->page;
  CUdeviceptr base = 0;
  if ((r = drv.reserve(&base, v->reserved, v->page, 0, 0)) != CUDA_SUCCESS) {
    v->reserved = 0;
    return fail_cu(r, "cuMemAddressReserve", file, line, err);
  }
  v->base = (void *)(uintptr_t)base;
  v->lanes = lanes;
  if (!(v->lane_mapped = mx_calloc((size_t)lanes, sizeof *v->lane_mapped, err)) ||
      !(v->handles = mx_calloc(pages, sizeof *v->handles, err)) || !(v->offsets = mx_calloc(pages, sizeof *v->offsets, err)) ||
      !(v->sizes = mx_calloc(pages, sizeof *v->sizes, err))) {
    rt_vmem_free(v);
    return -1;
  }
  return 0;
}

int rt_vmem_grow_lane_at(rt_vmem *v, int lane, size_t bytes, const char *file, int line, mlxrt_error *err) {
  if (lane < 0 || lane >= v->lanes) return mx_fail(err, "CUDA growable array: lane %d of %d", lane, v->lanes);
  if (bytes > v->stride) bytes = v->stride;
  const size_t have = v->lane_mapped[lane];
  if (bytes <= have) return 0;
  const size_t add = (bytes - have + v->page - 1) / v->page * v->page;
  const size_t off = (size_t)lane * v->stride + have;
  CUmemAllocationProp p = page_prop(v->device);
  const CUdeviceptr at = (CUdeviceptr)(uintptr_t)v->base + off;
  CUmemGenericAllocationHandle h;
  CUresult r = drv.create(&h, add, &p, 0);
  const char *what = "cuMemCreate";
  if (r == CUDA_SUCCESS) {
    what = "cuMemMap";
    if ((r = drv.map(at, add, 0, h, 0)) == CUDA_SUCCESS) {
      CUmemAccessDesc a;
      memset(&a, 0, sizeof a);
      a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      a.location.id = v->device;
      a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      what = "cuMemSetAccess";
      if ((r = drv.set_access(at, add, &a, 1)) == CUDA_SUCCESS) {
        v->handles[v->npieces] = h;
        v->offsets[v->npieces] = off;
        v->sizes[v->npieces++] = add;
        v->lane_mapped[lane] += add;
        v->mapped += add;
        return 0;
      }
      drv.unmap(at, add);
    }
    drv.release(h); /* the array stays as it was before the call */
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t fb = 0, tb = 0;
    if (cudaMemGetInfo(&fb, &tb) != cudaSuccess) cudaGetLastError();
    return mx_fail(err, "CUDA device memory exhausted at %s:%d: %zu more bytes wanted (%zu MiB mapped), %.1f MiB of %.1f MiB free",
                   base_name(file), line, add, v->mapped >> 20, (double)fb / (1 << 20), (double)tb / (1 << 20));
  }
  return fail_cu(r, what, file, line, err);
}

void rt_vmem_free(rt_vmem *v) {
  if (!v) return;
  const CUdeviceptr base = (CUdeviceptr)(uintptr_t)v->base;
  if (base) {
    for (int k = 0; k < v->npieces; k++) {
      drv.unmap(base + v->offsets[k], v->sizes[k]);
      drv.release(v->handles[k]);
    }
    drv.addr_free(base, v->reserved);
  }
  free(v->lane_mapped);
  free(v->handles);
  free(v->offsets);
  free(v->sizes);
  memset(v, 0, sizeof *v);
}
