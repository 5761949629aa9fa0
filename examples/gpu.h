/* gpu.h - the few GPU runtime calls the examples, tests and benchmarks need, as plain C.
 *
 * aiter_mla.h never touches the GPU runtime itself (no allocation, no queries, no
 * streams). A runtime that vendors the library has its own allocator and streams; these
 * programs need a minimal stand-in, built from examples/gpu.hip with the same compiler as
 * kernels.hip (hipcc or nvcc). Every call exits the program with a message on failure:
 * fine for examples and tests, not a pattern for a library. */
#ifndef AITER_MLA_EXAMPLES_GPU_H
#define AITER_MLA_EXAMPLES_GPU_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

int gpu_device_count(void);           /* 0 when there is no usable device */
const char *gpu_name(void);           /* e.g. "NVIDIA H100 80GB HBM3" */
int gpu_num_cu(void);                 /* multiprocessors / compute units */
size_t gpu_l2_bytes(void);
size_t gpu_mem_bytes(void);          /* the device's memory */
void *gpu_malloc(size_t bytes);
void gpu_free(void *p);
/* Uploads, downloads and memsets wait for all device work (every stream's) before they start
 * and are complete when they return. */
void gpu_upload(void *dst, const void *src, size_t bytes);
void gpu_download(void *dst, const void *src, size_t bytes);
void gpu_memset(void *p, int byte, size_t bytes);
void gpu_sync(void);                  /* device-wide; also reports asynchronous kernel errors */
void *gpu_stream_create(void);
void gpu_stream_destroy(void *stream);
void *gpu_host_alloc_pinned(size_t bytes);
void gpu_host_free_pinned(void *p);

/* Timing with device events on a stream. */
typedef struct gpu_timer gpu_timer;
/* Keep the stream busy for about `cycles` GPU clock cycles (one thread spinning). A timer
 * started right after starts when the spin ends, by which time the host has queued the
 * work to be timed: the host's launch cost stays out of the measurement, as it does for
 * work queued behind other work in a running engine. */
void gpu_hold(void *stream, long long cycles);
gpu_timer *gpu_timer_create(void);
void gpu_timer_start(gpu_timer *t, void *stream);
float gpu_timer_stop_ms(gpu_timer *t, void *stream); /* waits for the stop event */
void gpu_timer_destroy(gpu_timer *t);

/* Graph capture of everything launched on a stream between begin and end. */
typedef struct gpu_graph gpu_graph;
void gpu_graph_begin(void *stream);
gpu_graph *gpu_graph_end(void *stream);
void gpu_graph_launch(gpu_graph *g, void *stream);
void gpu_graph_destroy(gpu_graph *g);

/* Ceilings for the benchmark: a 16-byte-per-thread copy kernel, the runtime's
 * device-to-device memcpy, and a bf16 GEMM through the vendor BLAS (returns 0 when the
 * build has none). */
void gpu_copy_kernel(void *dst, const void *src, size_t bytes, void *stream);
void gpu_memcpy_d2d(void *dst, const void *src, size_t bytes, void *stream);
int gpu_gemm_bf16_available(void);
/* Fill n elements of dtype (an aiter_mla_dtype value) with uniform values in [lo, hi),
 * from a counter-based hash of (seed, index): big buffers without a host round trip. */
void gpu_fill_uniform(void *p, long long n, int dtype, float lo, float hi, unsigned long long seed, void *stream);
/* c = a^T b, column-major (a k x m, b k x n, c m x n), bf16 with fp32 sums; returns NULL,
 * or why it could not run (a build whose BLAS has no kernel for the device, as under CUDA_FORCE_PTX_JIT). */
const char *gpu_gemm_bf16(int m, int n, int k, const void *a, const void *b, void *c, void *stream);

#ifdef __cplusplus
}
#endif
#endif
