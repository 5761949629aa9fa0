// d1_stream.cu - a standalone study, not part of the library: how fast the key bytes of the
// memory-bound decode rows (D1, D2: 16 heads, batch 128, bf16 rows of 576 dims in pages of 64
// keys) stream by themselves, with no attention around them. The library's D1 row runs at
// 89-92 % of the copy ceiling on an H100 (86-90 % before its key copies' L2 policy); its target
// is 90 %. This program reads exactly such a row's key bytes, cut into per-multiprocessor lists
// as the decode plan cuts them, in several ways, so that what memory alone allows can be told
// from what the attention costs.
// docs/PERFORMANCE.md ("D1's key bytes alone") says what its rows tell apart.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o d1_stream d1_stream.cu
//   ./d1_stream [timed runs, default 30]
//
// The data is laid out as the bench lays it out (examples/bench.c): per request a ragged
// context (mean x U[0.5, 1.5], mean 4096 for D1 and 8192 for D2), its pages of 64 keys x 1152
// bytes drawn without replacement from a shuffled pool; two sets of caches rotate past the L2.
// The lists: one a multiprocessor, each an equal share of all keys in request order (a list
// cuts requests, as the plan's do), cut at tile boundaries; a list's tiles (32 keys, half a
// page, as the 16-row decode's; or 64, a whole page) are given by their addresses.
//
// Kernels (one block a multiprocessor, a list each):
//   bulk<S, TK>: tiles of TK keys into S stages of shared memory, one bulk copy a tile
//     (cp.async.bulk) from one thread, counted on the stage's mbarrier, issued S tiles ahead;
//     every thread then reads its share of the tile (16-byte shared loads, the whole tile read
//     once, as the decode's products read it) and the stage is refilled after a block barrier.
//   cpa<S, G>: 16-byte cp.async from every thread, 8 threads a key (a warp instruction reads
//     128 consecutive bytes of each of 4 keys, the 16-row decode's copy mapping), one commit
//     group a tile, S - 1 tiles in flight while one is read; G groups of 256 threads a block,
//     each with its own ring on alternate tiles, meeting at its own barrier. G = 2, S = 2 is
//     the 16-row decode's own copy structure with its products left out.
//   contig: bulk<4, 32> over the same number of bytes laid in one piece (each list's bytes
//     together): the same kernel without the pages' scatter.
//   pages of one (D1-p1, D2-p1): cpa<S, G, true> over the same contexts with every key a row of
//     its own, drawn without replacement from a shuffled pool of rows, tiles of 32 of a
//     request's keys, each key copied from its own address.
//   stream: the same bytes in one piece read by 8 blocks an SM into registers: the best one
//     launch does.
// Each prints the median over the timed runs (device events around each launch, queued behind
// a spin as `make bench` times a row), the rate over the bench row's bytes (keys + q + o) and
// its ratio to the copy ceiling measured here (the faster of cudaMemcpy and a copy kernel,
// bytes read + written, as `make bench` does), and the time the row's 90 % target allows.
#include "study.h"
#include <cstdint>
#include <random>

constexpr int kRow = 1152, kBS = 64, kThreads = 256, kBatch = 128, kH = 16;
constexpr int64_t kPage = (int64_t)kBS * kRow;

struct Lists {
    const unsigned long long *tile_addr; // [tiles]: global address of a tile's first byte
    const unsigned long long *key_addr;  // [tiles * 32]: each key's row (pages of one; cpa<.., true> only)
    const int *tile_bytes;               // [tiles]
    const int *list_begin;               // [lists + 1]: a list's tiles
    unsigned *sum;                       // [lists * kThreads]: what each thread read, xor-ed (keeps the reads)
};

__device__ __forceinline__ void cp16(uint32_t dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ uint4 lds16(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}

// Thread t of kThreads xors its 16-byte chunks t, t + kThreads, ... of a tile's `bytes` into acc.
__device__ __forceinline__ void read_tile(uint32_t base, int bytes, int t, unsigned &acc) {
    for (int c = t; c < bytes / 16; c += kThreads) {
        const uint4 v = lds16(base + c * 16);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
}

template <int S, int TK>
__global__ void __launch_bounds__(kThreads, 1) bulk(Lists L) {
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int kStage = TK * kRow;
    __shared__ __align__(8) unsigned long long full[S];
    const int b0 = L.list_begin[blockIdx.x], n = L.list_begin[blockIdx.x + 1] - b0;
    const uint32_t ring = smem_u32(smem);
    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) mbar_init(smem_u32(&full[s]), 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        for (int s = 0; s < S && s < n; s++)
            bulk_copy(ring + s * kStage, (const void *)L.tile_addr[b0 + s], (uint32_t)L.tile_bytes[b0 + s], smem_u32(&full[s]));
    }
    __syncthreads();
    unsigned acc = 0;
    for (int i = 0; i < n; i++) {
        const int s = i % S;
        mbar_wait(smem_u32(&full[s]), (uint32_t)(i / S) & 1);
        read_tile(ring + s * kStage, L.tile_bytes[b0 + i], threadIdx.x, acc);
        __syncthreads(); // everyone is done with stage s
        if (threadIdx.x == 0 && i + S < n)
            bulk_copy(ring + s * kStage, (const void *)L.tile_addr[b0 + i + S], (uint32_t)L.tile_bytes[b0 + i + S], smem_u32(&full[s]));
    }
    L.sum[blockIdx.x * kThreads + threadIdx.x] = acc;
}

// cpa<S, G, PerKey>: G groups of kThreads threads a block, each with its own ring of S stages,
// group g taking tiles g, g + G, ... and meeting at its own barrier (the block's when G = 1).
// PerKey: each key's row from its own address (pages of one), else the tile's keys together.
template <int S, int G, bool PerKey = false>
__global__ void __launch_bounds__(G * kThreads, 1) cpa(Lists L) {
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int kTK = 32, kStage = kTK * kRow, kTPK = kThreads / kTK, kChunks = kRow / 16; // 8 threads a key, 72 chunks a row
    const int g = threadIdx.x / kThreads, gt = threadIdx.x % kThreads;
    const int b0 = L.list_begin[blockIdx.x], all = L.list_begin[blockIdx.x + 1] - b0, n = (all - g + G - 1) / G;
    const uint32_t ring = smem_u32(smem) + g * S * kStage;
    const int key = gt / kTPK, part = gt % kTPK;
    auto sync = [&]() {
        if (G == 1) __syncthreads();
        else asm volatile("bar.sync %0, %1;\n" ::"r"(1 + g), "n"(kThreads) : "memory");
    };
    auto load = [&](int i) { // the group's i-th tile
        const int t = b0 + g + G * i, bytes = L.tile_bytes[t];
        const unsigned char *src = PerKey ? (const unsigned char *)L.key_addr[(int64_t)t * kTK + key]
                                          : (const unsigned char *)L.tile_addr[t] + key * kRow;
        const uint32_t dst = ring + (i % S) * kStage + key * kRow;
        const bool present = key * kRow < bytes;
#pragma unroll
        for (int j = 0; j < kChunks / kTPK; j++) {
            const int c = part + j * kTPK;
            cp16(dst + c * 16, present ? src + c * 16 : (const void *)L.tile_addr[t], present ? 16 : 0);
        }
    };
    for (int s = 0; s < S - 1; s++) {
        if (s < n) load(s);
        cp_commit();
    }
    unsigned acc = 0;
    for (int i = 0; i < n; i++) {
        cp_wait<S - 2>();
        sync(); // the group's tile i landed (everyone's copies); the group is done with its tile i - 1
        if (i + S - 1 < n) load(i + S - 1);
        cp_commit();
        read_tile(ring + (i % S) * kStage, L.tile_bytes[b0 + g + G * i], gt, acc);
    }
    cp_wait<0>();
    L.sum[blockIdx.x * G * kThreads + threadIdx.x] = acc;
}

__global__ void empty_kernel(Lists) {}

// One set: a cache of pages in a shuffled pool and, per tile size, its lists' tile addresses.
struct Set {
    unsigned char *cache = nullptr, *contig = nullptr;
    unsigned char *rows = nullptr;     // pages of one: a shuffled pool of rows
    unsigned long long *addr[4] = {};  // tiles of 32 keys, of 64 keys, contiguous tiles of 32, tiles of 32 rows (pages of one)
    unsigned long long *key_addr = nullptr; // pages of one: each key's row, 32 a tile
    int *bytes[4] = {}, *begin[4] = {};
};

// The lists of one layout as they are built: tiles in request order, a list ending with the
// tile that fills its equal share of the keys.
struct ListBuilder {
    std::vector<unsigned long long> addr;
    std::vector<int> bytes, begin{0};
    int64_t in_list = 0;
    void add_tile(const unsigned char *src, int keys, int64_t share, int lists) {
        addr.push_back((unsigned long long)(uintptr_t)src);
        bytes.push_back(keys * kRow);
        in_list += keys;
        if (in_list >= share && (int)begin.size() < lists) {
            begin.push_back((int)addr.size());
            in_list = 0;
        }
    }
    void upload(unsigned long long **d_addr, int **d_bytes, int **d_begin, int lists) {
        while ((int)begin.size() < lists + 1) begin.push_back((int)addr.size());
        study_upload(d_addr, addr);
        study_upload(d_bytes, bytes);
        study_upload(d_begin, begin);
    }
};

int main(int argc, char **argv) {
    const int runs = argc > 1 ? atoi(argv[1]) : 30;
    const cudaDeviceProp prop = study_device();
    const int lists = prop.multiProcessorCount;
    StudyTimer tm;
    const cudaStream_t st = tm.st;

    const double copy_gbs = study_copy_ceiling(prop, tm);

    unsigned *d_sum;
    const int nsum = prop.multiProcessorCount * 8 * kThreads; // the stream's threads; more than the lists' (2 groups a block at most)
    CK(cudaMalloc(&d_sum, (size_t)nsum * 4));
    for (int mean : {4096, 8192}) {
        std::mt19937 rng(11);
        std::uniform_real_distribution<double> u(0.5, 1.5);
        std::vector<int> ctx(kBatch);
        int64_t keys = 0, pages = 0;
        for (int b = 0; b < kBatch; b++) {
            ctx[b] = (int)(mean * u(rng));
            keys += ctx[b];
            pages += (ctx[b] + kBS - 1) / kBS;
        }
        const int64_t key_bytes = keys * kRow;
        const double row_bytes = (double)key_bytes + (double)kBatch * kH * (576 + 512) * 2; // + q and o, bf16
        const int sets = 2;
        std::vector<Set> set(sets);
        for (auto &s : set) {
            const int64_t pool = pages + pages / 8; // a pool with free pages, as a serving cache has
            CK(cudaMalloc(&s.cache, pool * kPage));
            CK(cudaMalloc(&s.contig, key_bytes + 64 * kRow));
            CK(cudaMemset(s.cache, 0x5a, pool * kPage));
            CK(cudaMemset(s.contig, 0x3c, key_bytes + 64 * kRow));
            std::vector<int64_t> perm(pool);
            for (int64_t p = 0; p < pool; p++) perm[p] = p;
            std::shuffle(perm.begin(), perm.end(), rng);
            // the requests' keys in order, a request's tiles within its pages; a list ends with the
            // tile that fills its equal share
            const int64_t share = (keys + lists - 1) / lists;
            for (int v = 0; v < 3; v++) {
                const int tk = v == 1 ? 64 : 32;
                ListBuilder lb;
                int64_t used = 0, next_page = 0;
                for (int b = 0; b < kBatch; b++) {
                    const int np = (ctx[b] + kBS - 1) / kBS;
                    for (int p = 0; p < np; p++) {
                        const int64_t page = perm[next_page + p];
                        const int page_keys = std::min(kBS, ctx[b] - p * kBS);
                        for (int k0 = 0; k0 < page_keys; k0 += tk) {
                            const int nk = std::min(tk, page_keys - k0);
                            lb.add_tile(v == 2 ? s.contig + used * kRow : s.cache + page * kPage + (int64_t)k0 * kRow, nk, share, lists);
                            used += nk;
                        }
                    }
                    next_page += np;
                }
                lb.upload(&s.addr[v], &s.bytes[v], &s.begin[v], lists);
            }
            // pages of one (D1-p1): each key a row drawn without replacement from a shuffled pool;
            // tiles of 32 of a request's keys, the lists cut as above
            {
                const int64_t pool = keys + keys / 8;
                CK(cudaMalloc(&s.rows, pool * kRow));
                CK(cudaMemset(s.rows, 0x6b, pool * kRow));
                std::vector<int64_t> row(pool);
                for (int64_t r = 0; r < pool; r++) row[r] = r;
                std::shuffle(row.begin(), row.end(), rng);
                ListBuilder lb;
                std::vector<unsigned long long> key_addr;
                int64_t next_row = 0;
                for (int b = 0; b < kBatch; b++)
                    for (int k0 = 0; k0 < ctx[b]; k0 += 32) {
                        const int nk = std::min(32, ctx[b] - k0);
                        for (int k = 0; k < 32; k++) // a tile's absent keys: its first row (never copied)
                            key_addr.push_back((unsigned long long)(uintptr_t)(s.rows + row[next_row + (k < nk ? k : 0)] * kRow));
                        lb.add_tile(s.rows + row[next_row] * kRow, nk, share, lists);
                        next_row += nk;
                    }
                lb.upload(&s.addr[3], &s.bytes[3], &s.begin[3], lists);
                study_upload(&s.key_addr, key_addr);
            }
        }
        printf("\n## batch %d, mean context %d: %lld keys, %.1f MB of key rows, %d lists, %d sets; the row's 90 %% target: %.1f us\n",
               kBatch, mean, (long long)keys, key_bytes / 1e6, lists, sets, row_bytes / (0.9 * copy_gbs * 1e3));
        printf("| kernel | us | GB/s (the row's bytes) | %% of copy |\n|---|---|---|---|\n");
        auto report = [&](const char *name, double us) {
            const double gbs = row_bytes / (us * 1e3);
            printf("| %s | %.1f | %.0f | %.1f %% |\n", name, us, gbs, 100.0 * gbs / copy_gbs);
            fflush(stdout);
        };
        auto time = [&](const char *name, void (*kern)(Lists), int smem, int v, int threads = kThreads) {
            if (smem > 48 * 1024) CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            report(name, tm.median_us(runs, [&](int r) {
                       const Set &s = set[r % sets];
                       kern<<<lists, threads, smem, st>>>(Lists{s.addr[v], s.key_addr, s.bytes[v], s.begin[v], d_sum});
                       CK(cudaGetLastError());
                   }));
        };
        constexpr int k32 = 32 * kRow, k64 = 64 * kRow;
        time("bulk, 32-key tiles, 2 stages", bulk<2, 32>, 2 * k32, 0);
        time("bulk, 32-key tiles, 3 stages", bulk<3, 32>, 3 * k32, 0);
        time("bulk, 32-key tiles, 4 stages", bulk<4, 32>, 4 * k32, 0);
        time("bulk, 32-key tiles, 6 stages", bulk<6, 32>, 6 * k32, 0);
        time("bulk, 64-key tiles, 2 stages", bulk<2, 64>, 2 * k64, 0);
        time("bulk, 64-key tiles, 3 stages", bulk<3, 64>, 3 * k64, 0);
        time("cp.async, 32-key tiles, 2 stages", cpa<2, 1>, 2 * k32, 0);
        time("cp.async, 32-key tiles, 3 stages", cpa<3, 1>, 3 * k32, 0);
        time("cp.async, 32-key tiles, 4 stages", cpa<4, 1>, 4 * k32, 0);
        time("cp.async, 32-key tiles, 6 stages", cpa<6, 1>, 6 * k32, 0);
        time("cp.async, two groups of 256 threads on alternate tiles, 2 stages each (the 16-row decode's copies)", cpa<2, 2>, 4 * k32, 0,
             2 * kThreads);
        time("cp.async, two groups on alternate tiles, 3 stages each", cpa<3, 2>, 6 * k32, 0, 2 * kThreads);
        time("contig: bulk, 32-key tiles, 4 stages, each list's bytes together", bulk<4, 32>, 4 * k32, 2);
        time("pages of one: cp.async, 32-key tiles, 4 stages", cpa<4, 1, true>, 4 * k32, 3);
        time("pages of one: cp.async, two groups on alternate tiles, 2 stages each (the 16-row decode's copies)", cpa<2, 2, true>,
             4 * k32, 3, 2 * kThreads);
        time("pages of one: cp.async, two groups on alternate tiles, 3 stages each", cpa<3, 2, true>, 6 * k32, 3, 2 * kThreads);
        time("empty kernel, a block an SM", empty_kernel, 0, 0);
        report("stream: the key bytes in one piece, 8 blocks an SM", tm.median_us(runs, [&](int r) {
                   study_stream<<<prop.multiProcessorCount * 8, kThreads, 0, st>>>((const uint4 *)set[r % sets].contig, key_bytes / 16, d_sum, nsum);
               }));
        for (auto &s : set) {
            CK(cudaFree(s.cache));
            CK(cudaFree(s.contig));
            CK(cudaFree(s.rows));
            CK(cudaFree(s.key_addr));
            for (int v = 0; v < 4; v++) {
                CK(cudaFree(s.addr[v]));
                CK(cudaFree(s.bytes[v]));
                CK(cudaFree(s.begin[v]));
            }
        }
    }
    CK(cudaFree(d_sum));
    return 0;
}
