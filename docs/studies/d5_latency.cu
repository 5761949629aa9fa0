// d5_latency.cu - a standalone study, not part of the library: the least a batch-1 16-head
// decode over 8192 bf16 keys (the bench row D5, target <= 10 us for decode + reduce) can take
// when it is split over the GPU's multiprocessors as the library splits it, with the attention's
// arithmetic left out. docs/PERFORMANCE.md ("D5's structure alone") has its measurements.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o d5_latency d5_latency.cu
//   ./d5_latency [timed runs, default 60]
//
// The request's 128 pages of 64 keys (576 bf16 each, 73,728 bytes a page) lie at random in a
// pool, found through a block table, as in the bench; many sets of pages and tables rotate past
// the L2. The keys are cut into P pieces (64, 128 or 256: two pages, one page, as the library's
// plan cuts D5, or half a page), a block a piece (256 threads; all resident at once). Each block
// reads its pages' ids from the block table, copies its keys into shared memory (a bulk copy a
// page) while its threads copy q (16 x 576 bf16), waits, and "computes": every thread folds 16
// bytes of each of a few rows into a sum (no attention). The variants then differ in what
// follows:
//   read:          nothing (one word a thread): the reads' floor;
//   partials:      each block writes a partial o (16 x 512 fp32) and its 16 lse, as a split
//                  piece does;
//   partials + reduce: then a second kernel merges the P partials of each (head, dim) by their
//                  lse into a bf16 o (P blocks, each a slice of one head's dims), as the
//                  library's reduce does after a split decode;
//   one launch:    the same merge inside the first kernel, after a grid-wide barrier (a counter
//                  every block adds to and spins on).
// Timed as `make bench` times a row: device events queued behind a spin, median of the runs.
#include "study.h"
#include <cmath>
#include <cstdint>
#include <type_traits>

constexpr int kH = 16, kD = 576, kDv = 512, kPage = 64, kKeys = 8192, kPages = kKeys / kPage, kThreads = 256;
constexpr int kPageBytes = kPage * kD * 2, kQBytes = kH * kD * 2;

struct Args {
    const unsigned char *pool;  // pages of kPageBytes
    const int32_t *block_table; // [kPages]: the request's pages in the pool
    const uint4 *q;             // [kH, kD] bf16
    float *part_o, *part_lse;   // [P, kH, kDv], [P, kH] (P pieces)
    uint16_t *o;                // [kH, kDv] bf16
    unsigned *sum;              // [P * kThreads]: what the reads gave (keeps them)
    unsigned *counter;          // the one-launch barrier's count, never reset: a launch waits for `target`
    unsigned target;
};


// o's kSlice outputs of block b (one head's dims): the P pieces merged by their lse. Thread t
// takes output t % kSlice over a share of the pieces (t / kSlice, + kGroups, ...), all its loads
// in flight at once; the shares meet in shared memory.
template <int P>
__device__ void merge_slice(const Args &a, int b) {
    constexpr int kSlice = kH * kDv / P, kGroups = kThreads / kSlice, kEach = P / kGroups;
    const int h = b / (kDv / kSlice), d = (b % (kDv / kSlice)) * kSlice + threadIdx.x % kSlice, g = threadIdx.x / kSlice;
    float l[kEach], x[kEach];
#pragma unroll
    for (int k = 0; k < kEach; k++) {
        const int p = g + kGroups * k;
        l[k] = __ldcg(a.part_lse + p * kH + h);
        x[k] = __ldcg(a.part_o + ((int64_t)p * kH + h) * kDv + d);
    }
    float m = -INFINITY, num = 0.0f, den = 0.0f;
#pragma unroll
    for (int k = 0; k < kEach; k++) m = fmaxf(m, l[k]);
#pragma unroll
    for (int k = 0; k < kEach; k++) {
        const float w = __expf(l[k] - m);
        num += w * x[k];
        den += w;
    }
    __shared__ float part[3][kThreads];
    part[0][threadIdx.x] = m;
    part[1][threadIdx.x] = num;
    part[2][threadIdx.x] = den;
    __syncthreads();
    if (g == 0) {
        float mm = -INFINITY, n = 0.0f, s = 0.0f;
        for (int k = 0; k < kGroups; k++) mm = fmaxf(mm, part[0][k * kSlice + threadIdx.x]);
        for (int k = 0; k < kGroups; k++) {
            const float w = __expf(part[0][k * kSlice + threadIdx.x] - mm);
            n += w * part[1][k * kSlice + threadIdx.x];
            s += w * part[2][k * kSlice + threadIdx.x];
        }
        const float v = n / s;
        a.o[h * kDv + d] = (uint16_t)(__float_as_uint(v) >> 16);
    }
}

enum { kRead, kPartials, kOneLaunch };

// Piece b of P: keys b * kKeys / P .. (one page, half a page or two)
template <int MODE, int P>
__global__ void __launch_bounds__(kThreads, 2) piece(Args a) {
    constexpr int kN = kKeys / P, kBytes = kN * kD * 2;
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ uint64_t bar;
    unsigned char *page = smem, *q = smem + kBytes;
    const int b = blockIdx.x, tid = threadIdx.x;
    if (tid == 0) {
        mbar_init(smem_u32(&bar), 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        mbar_expect(smem_u32(&bar), kBytes);
        for (int j = 0; j < (kN + kPage - 1) / kPage; j++) { // the piece's pages (or its part of one)
            const int key = b * kN + j * kPage, n = kN < kPage ? kN : kPage;
            const unsigned char *src = a.pool + (int64_t)a.block_table[key / kPage] * kPageBytes + (key % kPage) * kD * 2;
            bulk(smem_u32(page + j * kPageBytes), src, n * kD * 2, smem_u32(&bar));
        }
    }
    for (int i = tid; i < kQBytes / 16; i += kThreads) reinterpret_cast<uint4 *>(q)[i] = a.q[i];
    __syncthreads(); // the barrier is initialised, q is in
    mbar_wait(smem_u32(&bar), 0);
    unsigned acc = reinterpret_cast<const unsigned *>(q)[tid];
#pragma unroll
    for (int k = 0; k < 4; k++) { // 16 bytes of rows tid % 64 ...: the page is there
        const uint4 v = reinterpret_cast<const uint4 *>(page + (tid % kN) * kD * 2)[(tid / kN + 4 * k) % (kD / 8)];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if constexpr (MODE == kRead) {
        a.sum[b * kThreads + tid] = acc;
    } else { // the piece's partial o [16][512] fp32 and lse [16], from what it read
        for (int i = tid; i < kH * kDv; i += kThreads) a.part_o[(int64_t)b * kH * kDv + i] = (float)((acc >> (i & 7)) & 255) * (1.0f / 256);
        if (tid < kH) a.part_lse[b * kH + tid] = (float)(acc & 15) * 0.01f;
    }
    if constexpr (MODE == kOneLaunch) {
        __syncthreads();
        if (tid == 0) {
            __threadfence(); // the block's partials, before its count
            atomicAdd(a.counter, 1u);
            while (*(volatile unsigned *)a.counter < a.target) __nanosleep(64);
            __threadfence();
        }
        __syncthreads();
        merge_slice<P>(a, b);
    }
}
template <int P>
__global__ void __launch_bounds__(kThreads) reduce(Args a) { merge_slice<P>(a, blockIdx.x); }
__global__ void empty_kernel() {}

int main(int argc, char **argv) {
    const int runs = argc > 1 ? atoi(argv[1]) : 60;
    const cudaDeviceProp prop = study_device();
    StudyTimer tm;
    const cudaStream_t st = tm.st;

    // sets of the request's pages (and their table) rotating past the L2
    const int sets = (int)(4 * (int64_t)prop.l2CacheSize / ((int64_t)kPages * kPageBytes)) + 2, pool_pages = sets * kPages;
    unsigned char *pool;
    CK(cudaMalloc(&pool, (size_t)pool_pages * kPageBytes));
    CK(cudaMemset(pool, 0x3c, (size_t)pool_pages * kPageBytes));
    std::vector<int32_t> perm(pool_pages);
    for (int i = 0; i < pool_pages; i++) perm[i] = i;
    srand(5);
    for (int i = pool_pages - 1; i > 0; i--) std::swap(perm[i], perm[rand() % (i + 1)]);
    int32_t *tables;
    CK(cudaMalloc(&tables, (size_t)pool_pages * 4));
    CK(cudaMemcpy(tables, perm.data(), (size_t)pool_pages * 4, cudaMemcpyHostToDevice));
    constexpr int kMaxPieces = 256;
    uint4 *q;
    float *part_o, *part_lse;
    uint16_t *o;
    unsigned *sum, *counter;
    CK(cudaMalloc(&q, kQBytes));
    CK(cudaMemset(q, 0x11, kQBytes));
    CK(cudaMalloc(&part_o, (size_t)kMaxPieces * kH * kDv * 4));
    CK(cudaMalloc(&part_lse, (size_t)kMaxPieces * kH * 4));
    CK(cudaMalloc(&o, (size_t)kH * kDv * 2));
    CK(cudaMalloc(&sum, (size_t)kMaxPieces * kThreads * 4));
    CK(cudaMalloc(&counter, 4));
    CK(cudaMemset(counter, 0, 4));
    unsigned count = 0; // the one-launch barrier's count after the launches so far

    printf("%d sets of %d pages (9.4 MB each)\n| variant | us |\n|---|---|\n", sets, kPages);
    auto time = [&](const char *name, auto &&launch) {
        printf("| %s | %.1f |\n", name, tm.median_us(runs, [&](int r) {
            Args a{pool, tables + (r % sets) * kPages, q, part_o, part_lse, o, sum, counter, 0};
            launch(a);
        }));
        fflush(stdout);
    };
    time("empty kernel, 128 blocks", [&](Args &) { empty_kernel<<<128, kThreads, 0, st>>>(); });
    time("two empty kernels", [&](Args &) {
        empty_kernel<<<128, kThreads, 0, st>>>();
        empty_kernel<<<128, kThreads, 0, st>>>();
    });
    auto variants = [&](auto pieces) {
        constexpr int P = decltype(pieces)::value;
        const int smem = kKeys / P * kD * 2 + kQBytes;
        CK(cudaFuncSetAttribute(piece<kRead, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        CK(cudaFuncSetAttribute(piece<kPartials, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        CK(cudaFuncSetAttribute(piece<kOneLaunch, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        char name[96];
        snprintf(name, sizeof name, "%d pieces of %d keys: read", P, kKeys / P);
        time(name, [&](Args &a) { piece<kRead, P><<<P, kThreads, smem, st>>>(a); });
        snprintf(name, sizeof name, "%d pieces of %d keys: partials", P, kKeys / P);
        time(name, [&](Args &a) { piece<kPartials, P><<<P, kThreads, smem, st>>>(a); });
        snprintf(name, sizeof name, "%d pieces of %d keys: partials + reduce", P, kKeys / P);
        time(name, [&](Args &a) {
            piece<kPartials, P><<<P, kThreads, smem, st>>>(a);
            reduce<P><<<P, kThreads, 0, st>>>(a);
        });
        snprintf(name, sizeof name, "%d pieces of %d keys: one launch (grid barrier, merge)", P, kKeys / P);
        time(name, [&](Args &a) {
            a.target = count += P;
            piece<kOneLaunch, P><<<P, kThreads, smem, st>>>(a);
        });
    };
    variants(std::integral_constant<int, 64>());
    variants(std::integral_constant<int, 128>());
    variants(std::integral_constant<int, 256>());
    CK(cudaDeviceSynchronize());
    return 0;
}
