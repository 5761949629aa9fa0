// d5_latency.cu - a standalone study, not part of the library: the least a batch-1 16-head
// decode over 8192 bf16 keys (the bench row D5, target <= 10 us for decode + reduce) can take
// when it is split over the GPU's multiprocessors as the library splits it, with the attention's
// arithmetic left out. docs/PERFORMANCE.md ("D5's structure alone", "D5's structure in
// clusters") has its measurements.
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
// and, at one block an SM (as the library's 16-row decode holds an SM), partials + reduce with
// the reduce launched plainly or as a programmatic dependent (as the library launches it), then
// the pieces launched as clusters of C blocks (8 or 16):
//   cluster merge + reduce: each block leaves its partial in its own shared memory; after a
//                  cluster barrier block r of a cluster merges the r-th slice of the cluster's
//                  partials from its peers' shared memory (distributed shared memory) and writes
//                  it as one of P / C partials, which a second kernel merges;
//   cluster merge, last cluster merges: no second kernel: after writing its slice, block r of a
//                  cluster counts it on slice r's counter, and the block that counts last (every
//                  other cluster's slice r is written) merges slice r of the P / C partials into
//                  o (no block waits for another: no assumption on residency).
// Timed as `make bench` times a row: device events queued behind a spin, median of the runs.
#include "study.h"
#include <cmath>
#include <cstring>
#include <cstdint>
#include <type_traits>
#include <cooperative_groups.h>

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
    unsigned *slice_count;      // [16]: the cluster variants' counts of written slices, back to 0 after each launch
};


// The lse-weighted fold of n partial values x by their lse l: the largest lse m, the sums
// num = sum e^(l - m) x and den = sum e^(l - m) (the merged value num / den, lse m + log den).
template <int N>
__device__ __forceinline__ void fold(const float (&l)[N], const float (&x)[N], float &m, float &num, float &den) {
    m = -INFINITY;
    num = den = 0.0f;
#pragma unroll
    for (int k = 0; k < N; k++) m = fmaxf(m, l[k]);
#pragma unroll
    for (int k = 0; k < N; k++) {
        const float w = __expf(l[k] - m);
        num += w * x[k];
        den += w;
    }
}

// o's kSlice outputs of block b of NB (a slice of one head's dims): the NP partials merged by
// their lse. Thread t takes output t % kSlice over a share of the partials (t / kSlice, +
// kGroups, ...), all its loads in flight at once; the shares meet in shared memory.
template <int NP, int NB = NP>
__device__ void merge_slice(const Args &a, int b) {
    constexpr int kSlice = kH * kDv / NB, kGroups = kThreads / kSlice, kEach = NP / kGroups;
    static_assert(kGroups >= 1 && kEach >= 1 && kGroups * kSlice == kThreads, "a slice a block");
    const int h = b / (kDv / kSlice), d = (b % (kDv / kSlice)) * kSlice + threadIdx.x % kSlice, g = threadIdx.x / kSlice;
    float l[kEach], x[kEach];
#pragma unroll
    for (int k = 0; k < kEach; k++) {
        const int p = g + kGroups * k;
        l[k] = __ldcg(a.part_lse + p * kH + h);
        x[k] = __ldcg(a.part_o + ((int64_t)p * kH + h) * kDv + d);
    }
    float m, num, den;
    fold(l, x, m, num, den);
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

// Piece b of P (keys b * kKeys / P ..., one page, half a page or two): its keys copied into
// smem by bulk copies while the threads copy q, then a few bytes of them folded into what
// the function returns (no attention).
template <int P>
__device__ __forceinline__ unsigned read_piece(const Args &a, unsigned char *smem, uint64_t &bar, int b) {
    constexpr int kN = kKeys / P, kBytes = kN * kD * 2;
    unsigned char *page = smem, *q = smem + kBytes;
    const int tid = threadIdx.x;
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); // a reduce launched as dependent may start
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
    return acc;
}
// A piece's partial o element i and its lse for head h, from what it read.
__device__ __forceinline__ float partial_o(unsigned acc, int i) { return (float)((acc >> (i & 7)) & 255) * (1.0f / 256); }
__device__ __forceinline__ float partial_lse(unsigned acc, int h) { return (float)((acc + h) & 15) * 0.01f; }

template <int MODE, int P>
__global__ void __launch_bounds__(kThreads, 2) piece(Args a) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ uint64_t bar;
    const int b = blockIdx.x, tid = threadIdx.x;
    const unsigned acc = read_piece<P>(a, smem, bar, b);
    if constexpr (MODE == kRead) {
        a.sum[b * kThreads + tid] = acc;
    } else { // the piece's partial o [16][512] fp32 and lse [16], from what it read
        for (int i = tid; i < kH * kDv; i += kThreads) a.part_o[(int64_t)b * kH * kDv + i] = partial_o(acc, i);
        if (tid < kH) a.part_lse[b * kH + tid] = partial_lse(acc, tid);
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
// The reduce of NP partials over NB blocks; launched as a programmatic dependent, it waits here
// for the pieces (a no-op otherwise).
template <int NP, int NB>
__global__ void __launch_bounds__(kThreads) reduce_n(Args a) {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    merge_slice<NP, NB>(a, blockIdx.x);
}
__global__ void empty_kernel() {}

// The cluster variants: P pieces in clusters of C. Block r of cluster c merges slice r (kH * kDv
// / C outputs, whole heads) of its cluster's C partials from their shared memory into partial c
// of P / C; with kLast, the block that writes slice r last of all clusters merges the P / C
// partials' slice r into o.
template <int P, int C, bool kLast>
__global__ void __launch_bounds__(kThreads, 1) piece_cluster(Args a) {
    namespace cg = cooperative_groups;
    constexpr int NP = P / C, kSlice = kH * kDv / C, kE = kSlice / kThreads;
    static_assert(kSlice % kDv == 0 && kE >= 1, "a slice is whole heads, outputs a thread");
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ uint64_t bar;
    __shared__ int last;
    const cg::cluster_group cluster = cg::this_cluster();
    const int b = blockIdx.x, tid = threadIdx.x, r = (int)cluster.block_rank(), c = b / C;
    const unsigned acc = read_piece<P>(a, smem, bar, b);
    float *my_o = reinterpret_cast<float *>(smem), *my_lse = my_o + kH * kDv; // over the keys, once read
    __syncthreads();
    for (int i = tid; i < kH * kDv; i += kThreads) my_o[i] = partial_o(acc, i);
    if (tid < kH) my_lse[tid] = partial_lse(acc, tid);
    cluster.sync(); // every peer's partial is in its shared memory
    float res[kE], lse[kE];
#pragma unroll
    for (int k = 0; k < kE; k++) {
        const int idx = r * kSlice + k * kThreads + tid, h = idx / kDv;
        float l[C], x[C], m, num, den;
#pragma unroll
        for (int j = 0; j < C; j++) {
            x[j] = cluster.map_shared_rank(my_o, j)[idx];
            l[j] = cluster.map_shared_rank(my_lse, j)[h];
        }
        fold(l, x, m, num, den);
        res[k] = num / den;
        lse[k] = m + __logf(den);
    }
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); // this block's remote reads are done
#pragma unroll
    for (int k = 0; k < kE; k++) {
        const int idx = r * kSlice + k * kThreads + tid;
        a.part_o[(int64_t)c * kH * kDv + idx] = res[k];
        if (idx % kDv == 0) a.part_lse[c * kH + idx / kDv] = lse[k];
    }
    if constexpr (kLast) {
        __threadfence(); // this thread's part of slice r, before the block counts it
        __syncthreads();
        if (tid == 0) last = atomicAdd(a.slice_count + r, 1u) == NP - 1;
        __syncthreads();
        if (last) { // every cluster's slice r is written: merge them into o
            __threadfence();
#pragma unroll
            for (int k = 0; k < kE; k++) {
                const int idx = r * kSlice + k * kThreads + tid, h = idx / kDv;
                float l[NP], x[NP], m, num, den;
#pragma unroll
                for (int j = 0; j < NP; j++) {
                    l[j] = __ldcg(a.part_lse + j * kH + h);
                    x[j] = __ldcg(a.part_o + (int64_t)j * kH * kDv + idx);
                }
                fold(l, x, m, num, den);
                a.o[idx] = (uint16_t)(__float_as_uint(num / den) >> 16);
            }
            if (tid == 0) a.slice_count[r] = 0; // for the next launch (stream order)
        }
    }
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); // no peer reads this block's memory any more
}

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
    unsigned *slice_count;
    CK(cudaMalloc(&slice_count, 16 * 4));
    CK(cudaMemset(slice_count, 0, 16 * 4));
    unsigned count = 0; // the one-launch barrier's count after the launches so far

    printf("%d sets of %d pages (9.4 MB each)\n| variant | us |\n|---|---|\n", sets, kPages);
    auto time = [&](const char *name, auto &&launch) {
        printf("| %s | %.1f |\n", name, tm.median_us(runs, [&](int r) {
            Args a{pool, tables + (r % sets) * kPages, q, part_o, part_lse, o, sum, counter, 0, slice_count};
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

    // A launch of `kernel` over `grid` blocks in clusters of `cluster` (0: none), as a
    // programmatic dependent of the kernel before it if `dependent`.
    auto launch_ex = [&](auto kernel, int grid, int smem, int cluster, bool dependent, Args &a) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(grid);
        cfg.blockDim = dim3(kThreads);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = st;
        cudaLaunchAttribute at[2];
        int n = 0;
        if (cluster) {
            at[n].id = cudaLaunchAttributeClusterDimension;
            at[n].val.clusterDim.x = cluster;
            at[n].val.clusterDim.y = 1;
            at[n].val.clusterDim.z = 1;
            n++;
        }
        if (dependent) {
            at[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at[n].val.programmaticStreamSerializationAllowed = 1;
            n++;
        }
        cfg.attrs = at;
        cfg.numAttrs = n;
        CK(cudaLaunchKernelEx(&cfg, kernel, a));
    };
    // one block an SM: the shared memory asked for is more than half an SM's
    const int one_an_sm = (int)prop.sharedMemPerMultiprocessor / 2 + 1024;
    auto cluster_variants = [&](auto pieces, auto cl) {
        constexpr int P = decltype(pieces)::value, C = decltype(cl)::value, NP = P / C;
        const int smem = std::max(std::max(kKeys / P * kD * 2 + kQBytes, kH * (kDv + 1) * 4), one_an_sm);
        char name[128];
        CK(cudaFuncSetAttribute(piece<kPartials, P>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        snprintf(name, sizeof name, "%d pieces of %d keys, one an SM: partials + reduce", P, kKeys / P);
        time(name, [&](Args &a) {
            piece<kPartials, P><<<P, kThreads, smem, st>>>(a);
            reduce_n<P, P><<<P, kThreads, 0, st>>>(a);
        });
        snprintf(name, sizeof name, "%d pieces of %d keys, one an SM: partials + reduce (dependent launch)", P, kKeys / P);
        time(name, [&](Args &a) {
            piece<kPartials, P><<<P, kThreads, smem, st>>>(a);
            launch_ex(reduce_n<P, P>, P, 0, 0, true, a);
        });
        int resident = 0;
        for (auto kernel : {piece_cluster<P, C, false>, piece_cluster<P, C, true>}) {
            CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            if (C > 8) CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(P);
            cfg.blockDim = dim3(kThreads);
            cfg.dynamicSmemBytes = smem;
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeClusterDimension;
            at[0].val.clusterDim.x = C;
            at[0].val.clusterDim.y = 1;
            at[0].val.clusterDim.z = 1;
            cfg.attrs = at;
            cfg.numAttrs = 1;
            CK(cudaOccupancyMaxActiveClusters(&resident, kernel, &cfg));
        }
        snprintf(name, sizeof name, "%d pieces, clusters of %d (%d resident at once): cluster merge + reduce of %d", P, C, resident, NP);
        time(name, [&](Args &a) {
            launch_ex(piece_cluster<P, C, false>, P, smem, C, false, a);
            reduce_n<NP, 64><<<64, kThreads, 0, st>>>(a);
        });
        snprintf(name, sizeof name, "%d pieces, clusters of %d: cluster merge + reduce of %d (dependent launch)", P, C, NP);
        time(name, [&](Args &a) {
            launch_ex(piece_cluster<P, C, false>, P, smem, C, false, a);
            launch_ex(reduce_n<NP, 64>, 64, 0, 0, true, a);
        });
        snprintf(name, sizeof name, "%d pieces, clusters of %d: cluster merge, last cluster merges", P, C);
        time(name, [&](Args &a) { launch_ex(piece_cluster<P, C, true>, P, smem, C, false, a); });
    };
    cluster_variants(std::integral_constant<int, 64>(), std::integral_constant<int, 8>());
    cluster_variants(std::integral_constant<int, 128>(), std::integral_constant<int, 8>());
    cluster_variants(std::integral_constant<int, 128>(), std::integral_constant<int, 16>());

    // the cluster variants' o against the plain reduce's, from the same set
    auto o_of = [&](auto &&launch) {
        Args a{pool, tables, q, part_o, part_lse, o, sum, counter, 0, slice_count};
        CK(cudaMemset(o, 0xff, (size_t)kH * kDv * 2));
        launch(a);
        std::vector<uint16_t> h(kH * kDv);
        CK(cudaMemcpy(h.data(), o, h.size() * 2, cudaMemcpyDeviceToHost));
        return h;
    };
    {
        constexpr int P = 128;
        const int smem = one_an_sm;
        const std::vector<uint16_t> want = o_of([&](Args &a) {
            piece<kPartials, P><<<P, kThreads, smem, st>>>(a);
            reduce<P><<<P, kThreads, 0, st>>>(a);
        });
        const std::vector<uint16_t> got = o_of([&](Args &a) { launch_ex(piece_cluster<P, 8, true>, P, smem, 8, false, a); });
        int differ = 0;
        for (size_t i = 0; i < want.size(); i++) {
            const uint32_t x = (uint32_t)want[i] << 16, y = (uint32_t)got[i] << 16;
            float fx, fy;
            memcpy(&fx, &x, 4);
            memcpy(&fy, &y, 4);
            differ += !(fabsf(fx - fy) <= 1e-2f * fabsf(fx) + 1e-3f);
        }
        printf("clusters of 8, last cluster merges: %d of %d outputs differ from the reduce's (o[0] %g)\n", differ, (int)want.size(),
               (double)[&] { uint32_t x = (uint32_t)want[0] << 16; float f; memcpy(&f, &x, 4); return f; }());
    }
    CK(cudaDeviceSynchronize());
    return 0;
}
