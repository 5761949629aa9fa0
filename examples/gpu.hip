// gpu.hip - implementation of examples/gpu.h for HIP (hipcc) and CUDA (nvcc -x cu).
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>

#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__)
#include <cuda_runtime.h>
#if defined(AITER_MLA_WITH_BLAS)
#include <cublas_v2.h>
#endif
#define RT(x) cuda##x
typedef cudaStream_t stream_t;
typedef cudaEvent_t event_t;
typedef cudaGraph_t graph_t;
typedef cudaGraphExec_t graph_exec_t;
typedef cudaDeviceProp prop_t;
#define HOST_ALLOC(p, n) cudaMallocHost(p, n)
#define HOST_FREE(p) cudaFreeHost(p)
#define GRAPH_INSTANTIATE(e, g) cudaGraphInstantiate(e, g, 0)
#else
#include <hip/hip_runtime.h>
#if defined(AITER_MLA_WITH_BLAS)
#include <hipblas/hipblas.h>
#endif
#define RT(x) hip##x
typedef hipStream_t stream_t;
typedef hipEvent_t event_t;
typedef hipGraph_t graph_t;
typedef hipGraphExec_t graph_exec_t;
typedef hipDeviceProp_t prop_t;
#define HOST_ALLOC(p, n) hipHostMalloc(p, n, 0)
#define HOST_FREE(p) hipHostFree(p)
#define GRAPH_INSTANTIATE(e, g) hipGraphInstantiateWithFlags(e, g, 0)
#endif

#include "gpu.h"
#include "../aiter_mla.h"

#define CHECK(call)                                                                       \
    do {                                                                                  \
        auto e_ = (call);                                                                 \
        if (e_ != RT(Success)) {                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, RT(GetErrorString)(e_)); \
            exit(2);                                                                      \
        }                                                                                 \
    } while (0)

static prop_t g_prop;
static int g_prop_ok = -1;

static void props(void) {
    if (g_prop_ok >= 0) return;
    int n = 0;
    g_prop_ok = RT(GetDeviceCount)(&n) == RT(Success) && n > 0 && RT(GetDeviceProperties)(&g_prop, 0) == RT(Success);
    (void)RT(GetLastError)(); // clear a "no device" error
}

extern "C" int gpu_device_count(void) { props(); return g_prop_ok ? 1 : 0; }
extern "C" const char *gpu_name(void) { props(); return g_prop_ok ? g_prop.name : "none"; }
extern "C" int gpu_num_cu(void) { props(); return g_prop_ok ? g_prop.multiProcessorCount : 0; }
extern "C" size_t gpu_l2_bytes(void) { props(); return g_prop_ok ? (size_t)g_prop.l2CacheSize : 0; }
extern "C" size_t gpu_mem_bytes(void) { props(); return g_prop_ok ? (size_t)g_prop.totalGlobalMem : 0; }

extern "C" void *gpu_malloc(size_t bytes) {
    void *p = nullptr;
    CHECK(RT(Malloc)(&p, bytes ? bytes : 1));
    return p;
}
extern "C" void gpu_free(void *p) { if (p) CHECK(RT(Free)(p)); }
// Uploads and memsets run on the legacy default stream, which does not order itself with
// non-blocking streams: wait for the device before (so that no kernel still reads what they
// overwrite) and after (so that a kernel on any stream sees their result).
extern "C" void gpu_upload(void *dst, const void *src, size_t n) {
    CHECK(RT(DeviceSynchronize)());
    CHECK(RT(Memcpy)(dst, src, n, RT(MemcpyHostToDevice)));
    CHECK(RT(DeviceSynchronize)());
}
extern "C" void gpu_download(void *dst, const void *src, size_t n) {
    CHECK(RT(DeviceSynchronize)()); // kernels on non-blocking streams included
    CHECK(RT(Memcpy)(dst, src, n, RT(MemcpyDeviceToHost)));
}
extern "C" void gpu_memset(void *p, int byte, size_t n) {
    CHECK(RT(DeviceSynchronize)());
    CHECK(RT(Memset)(p, byte, n));
    CHECK(RT(DeviceSynchronize)());
}
extern "C" void gpu_sync(void) { CHECK(RT(DeviceSynchronize)()); CHECK(RT(GetLastError)()); }
extern "C" void *gpu_stream_create(void) { stream_t s; CHECK(RT(StreamCreateWithFlags)(&s, RT(StreamNonBlocking))); return (void *)s; }
extern "C" void gpu_stream_destroy(void *s) { CHECK(RT(StreamDestroy)((stream_t)s)); }
extern "C" void *gpu_host_alloc_pinned(size_t n) { void *p = nullptr; CHECK(HOST_ALLOC(&p, n ? n : 1)); return p; }
extern "C" void gpu_host_free_pinned(void *p) { if (p) CHECK(HOST_FREE(p)); }

struct gpu_timer { event_t a, b; };
extern "C" gpu_timer *gpu_timer_create(void) {
    gpu_timer *t = (gpu_timer *)malloc(sizeof *t);
    CHECK(RT(EventCreate)(&t->a));
    CHECK(RT(EventCreate)(&t->b));
    return t;
}
static __global__ void hold_stream(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}
extern "C" void gpu_hold(void *s, long long cycles) {
    hold_stream<<<1, 1, 0, (stream_t)s>>>(cycles);
    CHECK(RT(GetLastError)());
}
extern "C" void gpu_timer_start(gpu_timer *t, void *s) { CHECK(RT(EventRecord)(t->a, (stream_t)s)); }
extern "C" float gpu_timer_stop_ms(gpu_timer *t, void *s) {
    float ms = 0;
    CHECK(RT(EventRecord)(t->b, (stream_t)s));
    CHECK(RT(EventSynchronize)(t->b));
    CHECK(RT(EventElapsedTime)(&ms, t->a, t->b));
    return ms;
}
extern "C" void gpu_timer_destroy(gpu_timer *t) {
    CHECK(RT(EventDestroy)(t->a));
    CHECK(RT(EventDestroy)(t->b));
    free(t);
}

struct gpu_graph { graph_t g; graph_exec_t e; };
extern "C" void gpu_graph_begin(void *s) { CHECK(RT(StreamBeginCapture)((stream_t)s, RT(StreamCaptureModeThreadLocal))); }
extern "C" gpu_graph *gpu_graph_end(void *s) {
    gpu_graph *g = (gpu_graph *)malloc(sizeof *g);
    CHECK(RT(StreamEndCapture)((stream_t)s, &g->g));
    CHECK(GRAPH_INSTANTIATE(&g->e, g->g));
    return g;
}
extern "C" void gpu_graph_launch(gpu_graph *g, void *s) { CHECK(RT(GraphLaunch)(g->e, (stream_t)s)); }
extern "C" void gpu_graph_destroy(gpu_graph *g) {
    CHECK(RT(GraphExecDestroy)(g->e));
    CHECK(RT(GraphDestroy)(g->g));
    free(g);
}

static __global__ void copy16(uint4 *__restrict__ dst, const uint4 *__restrict__ src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] = src[i];
}
extern "C" void gpu_copy_kernel(void *dst, const void *src, size_t bytes, void *s) {
    props();
    copy16<<<g_prop.multiProcessorCount * 8, 512, 0, (stream_t)s>>>((uint4 *)dst, (const uint4 *)src, bytes / 16);
    CHECK(RT(GetLastError)());
}
extern "C" void gpu_memcpy_d2d(void *dst, const void *src, size_t bytes, void *s) {
    CHECK(RT(MemcpyAsync)(dst, src, bytes, RT(MemcpyDeviceToDevice), (stream_t)s));
}

static __global__ void fill_uniform(void *p, long long n, int dtype, float lo, float hi, unsigned long long seed) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        unsigned long long z = seed + 0x9e3779b97f4a7c15ull * (unsigned long long)(i + 1); // splitmix64
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        const float u = (float)(z >> 40) * (1.0f / 16777216.0f);
        aiter_mla_store_f32(p, i, (aiter_mla_dtype)dtype, lo + (hi - lo) * u);
    }
}
extern "C" void gpu_fill_uniform(void *p, long long n, int dtype, float lo, float hi, unsigned long long seed, void *s) {
    props();
    fill_uniform<<<g_prop.multiProcessorCount * 8, 256, 0, (stream_t)s>>>(p, n, dtype, lo, hi, seed);
    CHECK(RT(GetLastError)());
}

#if defined(AITER_MLA_WITH_BLAS) && defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__)
extern "C" int gpu_gemm_bf16_available(void) { return 1; }
extern "C" const char *gpu_gemm_bf16(int m, int n, int k, const void *a, const void *b, void *c, void *s) {
    static cublasHandle_t h = nullptr;
    if (!h && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return "cublasCreate failed";
    if (cublasSetStream(h, (stream_t)s) != CUBLAS_STATUS_SUCCESS) return "cublasSetStream failed";
    const float one = 1.0f, zero = 0.0f;
    if (cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one, a, CUDA_R_16BF, k, b, CUDA_R_16BF, k, &zero, c,
                     CUDA_R_16BF, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS)
        return "cublasGemmEx failed";
    return nullptr;
}
#elif defined(AITER_MLA_WITH_BLAS)
extern "C" int gpu_gemm_bf16_available(void) { return 1; }
extern "C" const char *gpu_gemm_bf16(int m, int n, int k, const void *a, const void *b, void *c, void *s) {
    static hipblasHandle_t h = nullptr;
    if (!h && hipblasCreate(&h) != HIPBLAS_STATUS_SUCCESS) return "hipblasCreate failed";
    if (hipblasSetStream(h, (stream_t)s) != HIPBLAS_STATUS_SUCCESS) return "hipblasSetStream failed";
    const float one = 1.0f, zero = 0.0f;
    if (hipblasGemmEx(h, HIPBLAS_OP_T, HIPBLAS_OP_N, m, n, k, &one, a, HIPBLAS_R_16B, k, b, HIPBLAS_R_16B, k, &zero, c,
                      HIPBLAS_R_16B, m, HIPBLAS_R_32F, HIPBLAS_GEMM_DEFAULT) != HIPBLAS_STATUS_SUCCESS)
        return "hipblasGemmEx failed";
    return nullptr;
}
#else
extern "C" int gpu_gemm_bf16_available(void) { return 0; }
extern "C" const char *gpu_gemm_bf16(int, int, int, const void *, const void *, void *, void *) { return "no BLAS in this build"; }
#endif
