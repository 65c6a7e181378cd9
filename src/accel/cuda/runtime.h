/* The one place that talks to the CUDA runtime outside kernels. Every call checks its status
 * and turns a failure into one line: "CUDA <what> failed at file:line: <runtime message>".
 * Returns 0 on success, -1 with err set. Streams, events and graphs are opaque pointers. */
#ifndef MLXRT_CUDA_RUNTIME_H
#define MLXRT_CUDA_RUNTIME_H

#include <stddef.h>

#include "mlxrt.h"

typedef struct rt_device_info {
  int index;
  char name[256];
  int cc_major, cc_minor;
  int sms;
  size_t l2_bytes;
  size_t total_mem;
  double mem_clock_khz;
  int mem_bus_bits;
} rt_device_info;

/* Checks a status code returned by a kernel launcher (a cudaError_t). */
int rt_status_at(int status, const char *what, const char *file, int line, mlxrt_error *err);
#define rt_status(st, what, err) rt_status_at((st), (what), __FILE__, __LINE__, (err))

/* Picks a device ($MLXRT_CUDA_DEVICE or 0) and makes it current; fails cleanly without one. */
int rt_device_open_at(rt_device_info *info, const char *file, int line, mlxrt_error *err);
#define rt_device_open(info, err) rt_device_open_at((info), __FILE__, __LINE__, (err))

int rt_malloc_at(void **p, size_t n, const char *file, int line, mlxrt_error *err);
#define rt_malloc(p, n, err) rt_malloc_at((p), (n), __FILE__, __LINE__, (err))
void rt_free(void *p); /* NULL is fine; errors ignored (teardown) */
int rt_host_alloc_at(void **p, size_t n, const char *file, int line, mlxrt_error *err);
#define rt_host_alloc(p, n, err) rt_host_alloc_at((p), (n), __FILE__, __LINE__, (err))
void rt_host_free(void *p);

int rt_stream_create_at(void **s, const char *file, int line, mlxrt_error *err);
#define rt_stream_create(s, err) rt_stream_create_at((s), __FILE__, __LINE__, (err))
void rt_stream_destroy(void *s);
int rt_stream_sync_at(void *s, const char *file, int line, mlxrt_error *err);
#define rt_stream_sync(s, err) rt_stream_sync_at((s), __FILE__, __LINE__, (err))

/* Asynchronous on the stream (host memory should be pinned for true overlap). */
int rt_h2d_at(void *dst, const void *src, size_t n, void *s, const char *file, int line,
              mlxrt_error *err);
#define rt_h2d(d, s_, n, st, err) rt_h2d_at((d), (s_), (n), (st), __FILE__, __LINE__, (err))
int rt_d2h_at(void *dst, const void *src, size_t n, void *s, const char *file, int line,
              mlxrt_error *err);
#define rt_d2h(d, s_, n, st, err) rt_d2h_at((d), (s_), (n), (st), __FILE__, __LINE__, (err))
int rt_memset_at(void *dst, int v, size_t n, void *s, const char *file, int line, mlxrt_error *err);
#define rt_memset(d, v, n, st, err) rt_memset_at((d), (v), (n), (st), __FILE__, __LINE__, (err))

int rt_event_create_at(void **e, const char *file, int line, mlxrt_error *err);
#define rt_event_create(e, err) rt_event_create_at((e), __FILE__, __LINE__, (err))
void rt_event_destroy(void *e);
int rt_event_record_at(void *e, void *s, const char *file, int line, mlxrt_error *err);
#define rt_event_record(e, s, err) rt_event_record_at((e), (s), __FILE__, __LINE__, (err))
/* Work enqueued on s after this waits for e's last record (a fork or join of two streams; in a
 * captured graph, an edge). */
int rt_stream_wait_event_at(void *s, void *e, const char *file, int line, mlxrt_error *err);
#define rt_stream_wait_event(s, e, err) rt_stream_wait_event_at((s), (e), __FILE__, __LINE__, (err))
/* Milliseconds between two recorded events (waits for the second). */
int rt_event_ms_at(void *a, void *b, float *ms, const char *file, int line, mlxrt_error *err);
#define rt_event_ms(a, b, ms, err) rt_event_ms_at((a), (b), (ms), __FILE__, __LINE__, (err))

/* Graph capture of the stream's work, then replay. */
int rt_graph_begin_at(void *s, const char *file, int line, mlxrt_error *err);
#define rt_graph_begin(s, err) rt_graph_begin_at((s), __FILE__, __LINE__, (err))
int rt_graph_end_at(void *s, void **exec, const char *file, int line, mlxrt_error *err);
#define rt_graph_end(s, exec, err) rt_graph_end_at((s), (exec), __FILE__, __LINE__, (err))
int rt_graph_launch_at(void *exec, void *s, const char *file, int line, mlxrt_error *err);
#define rt_graph_launch(exec, s, err) rt_graph_launch_at((exec), (s), __FILE__, __LINE__, (err))
void rt_graph_destroy(void *exec);

/* A growable device array (runtime_vmem.c): a virtual address range reserved once for its
 * largest size, backed by physical memory in whole pages of `page` bytes as it grows (one
 * allocation per growth). The range is `lanes` equal lanes, `stride` bytes apart (a whole
 * number of pages), each backed from its start on: one lane for a sequence's cache, one per
 * slot for a batch's. Its address never changes and mapped pages are never moved or copied,
 * so kernels and captured graphs that hold the address keep working while it grows. Reading
 * past a lane's mapped bytes faults: callers map a margin beyond what their kernels read. Not
 * thread-safe: one owner grows it. */
typedef struct rt_vmem {
  void *base;        /* the reserved range (NULL: none) */
  size_t reserved;   /* its bytes: lanes · stride */
  size_t stride;     /* bytes between two lanes' starts, a multiple of page */
  size_t mapped;     /* bytes backed, every lane's together */
  size_t page;       /* the device's allocation granularity */
  int device;
  int lanes;
  size_t *lane_mapped;         /* [lanes] bytes backed from each lane's start, a multiple of page */
  int npieces;                 /* physical allocations mapped, one per growth */
  unsigned long long *handles; /* [max pages] each piece's allocation */
  size_t *offsets, *sizes;     /* [max pages] its place in the range, its bytes */
} rt_vmem;
/* lanes lanes of lane_bytes each (rounded up to whole pages), nothing backed yet */
int rt_vmem_reserve_lanes_at(rt_vmem *v, int lanes, size_t lane_bytes, const char *file, int line, mlxrt_error *err);
#define rt_vmem_reserve_lanes(v, lanes, n, err) rt_vmem_reserve_lanes_at((v), (lanes), (n), __FILE__, __LINE__, (err))
#define rt_vmem_reserve(v, n, err) rt_vmem_reserve_lanes_at((v), 1, (n), __FILE__, __LINE__, (err))
/* Maps pages until at least min(bytes, stride) bytes of the lane are backed; nothing when they
 * are. On failure (out of device memory) the pages mapped before the call stay as they were. */
int rt_vmem_grow_lane_at(rt_vmem *v, int lane, size_t bytes, const char *file, int line, mlxrt_error *err);
#define rt_vmem_grow_lane(v, lane, n, err) rt_vmem_grow_lane_at((v), (lane), (n), __FILE__, __LINE__, (err))
#define rt_vmem_grow(v, n, err) rt_vmem_grow_lane_at((v), 0, (n), __FILE__, __LINE__, (err))
void rt_vmem_free(rt_vmem *v); /* unmaps, releases and frees the range; a zeroed v is fine */

/* Free and total device memory in bytes. */
int rt_mem_info_at(size_t *free_b, size_t *total_b, const char *file, int line, mlxrt_error *err);
#define rt_mem_info(f, t, err) rt_mem_info_at((f), (t), __FILE__, __LINE__, (err))

/* The (mangled) name of a kernel, or NULL. */
const char *rt_func_name(const void *func);

#endif
