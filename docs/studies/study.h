// study.h - what the standalone studies in this folder share (not part of the library): error
// checks, the device line, and timing as `make bench` times a row (device events around a
// launch queued behind a spin, so that each run measures the device's time for its work and
// not the host's launch in front of it; the median of the runs after 5 untimed ones).
#pragma once
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));                                \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

// Shared-memory addresses, mbarriers and bulk copies (sm_90)
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// one arrival on bar, its current phase waiting for `bytes` more of copies
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}\n" ::"r"(bar), "r"(parity)
                 : "memory");
}
// `bytes` (a multiple of 16) from global src to shared dst, counted on bar
__device__ __forceinline__ void bulk(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst), "l"(src),
                 "r"(bytes), "r"(bar)
                 : "memory");
}
// One thread's whole copy: its arrival on bar expects the `bytes` it then issues
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    mbar_expect(bar, bytes);
    bulk(dst, src, bytes, bar);
}

// 16 bytes from global memory into registers, through the non-coherent path
__device__ __forceinline__ uint4 ldg16(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
// n16 16-byte words read in one piece by the whole grid, four loads in flight a thread, xor-ed
// into sum[thread % nsum] (which keeps the loads): the best a launch that reads them can do.
__global__ void study_stream(const uint4 *__restrict__ a, int64_t n16, unsigned *sum, int64_t nsum) {
    unsigned acc = 0;
    const int64_t step = (int64_t)gridDim.x * blockDim.x;
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (; i + 3 * step < n16; i += 4 * step) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = ldg16(a + i + u * step);
#pragma unroll
        for (int u = 0; u < 4; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += step) {
        const uint4 v = ldg16(a + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    sum[(blockIdx.x * (int64_t)blockDim.x + threadIdx.x) % nsum] = acc;
}
__global__ void study_copy(const uint4 *__restrict__ a, uint4 *__restrict__ b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) b[i] = a[i];
}

// ~cycles of one thread's spin on the stream
__global__ void study_hold(long long cycles) {
    const long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

struct StudyTimer {
    cudaStream_t st;
    cudaEvent_t e0, e1;
    StudyTimer() {
        CK(cudaStreamCreate(&st));
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
    }
    // The median, in us, of `runs` timed calls of launch(r) (r = 5, 6, ...; r = 0 .. 4 untimed):
    // launch enqueues its work on st.
    template <class F>
    double median_us(int runs, F &&launch) {
        std::vector<float> ts;
        for (int r = 0; r < runs + 5; r++) {
            float ms;
            study_hold<<<1, 1, 0, st>>>(200000);
            CK(cudaEventRecord(e0, st));
            launch(r);
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 5) ts.push_back(ms * 1000.0f);
        }
        std::sort(ts.begin(), ts.end());
        return ts[ts.size() / 2];
    }
};

// A device copy of v in *dst (the caller frees it).
template <class T>
inline void study_upload(T **dst, const std::vector<T> &v) {
    CK(cudaMalloc(dst, v.size() * sizeof(T)));
    CK(cudaMemcpy(*dst, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// The device's properties, its name, SM count and L2 size printed on one line.
static cudaDeviceProp study_device() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    return prop;
}

// The copy ceiling as `make bench` measures it: the faster of cudaMemcpy and a copy kernel over
// 1 GiB, bytes read + written, GB/s; both printed on one line.
inline double study_copy_ceiling(const cudaDeviceProp &prop, StudyTimer &tm) {
    const size_t cb = (size_t)1 << 30;
    void *ca, *cbuf;
    CK(cudaMalloc(&ca, cb));
    CK(cudaMalloc(&cbuf, cb));
    CK(cudaMemset(ca, 1, cb));
    const double memcpy_gbs = 2.0 * cb / (tm.median_us(10, [&](int) { CK(cudaMemcpyAsync(cbuf, ca, cb, cudaMemcpyDeviceToDevice, tm.st)); }) * 1e3);
    const double kernel_gbs =
        2.0 * cb / (tm.median_us(10, [&](int) { study_copy<<<prop.multiProcessorCount * 8, 512, 0, tm.st>>>((const uint4 *)ca, (uint4 *)cbuf, cb / 16); }) * 1e3);
    printf("# copy ceiling: memcpy %.0f GB/s, copy kernel %.0f GB/s\n", memcpy_gbs, kernel_gbs);
    CK(cudaFree(ca));
    CK(cudaFree(cbuf));
    return std::max(memcpy_gbs, kernel_gbs);
}
