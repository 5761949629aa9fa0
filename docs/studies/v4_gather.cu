// v4_gather.cu - a standalone study, not part of the library: what the key traffic of a V4
// decode at 16 heads costs by itself, with no attention around it. The bench row
// V4D-h16-k512-b128 (128 tokens, each 128 window keys + 512 compressed entries, MODEL1 rows of
// 576 bytes + 8 scale bytes, one token a block) runs at ~37 % of the copy ceiling; its target is
// 70 %. This program moves exactly that row's key bytes, through the same lists, in several
// ways, so that the attention's own cost can be told from the gather's.
// docs/PERFORMANCE.md ("The V4 decode's key traffic alone") has its measurements.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o v4_gather v4_gather.cu
//   ./v4_gather [timed runs, default 40]
//
// The data is laid out as the bench lays it out (examples/bench.c, bench_v4): per request a
// ragged context (8192 x U[0.5, 1.5]); the window's keys are the request's last 128 positions
// of its MODEL1 pages of 64 (runs of consecutive rows); the compressed keys are K distinct
// entries drawn at random from the request's ctx / 4 entries, in pages of 64; lists dense
// ([T, 128] and [T, K]) with their lengths. Several sets of caches and lists rotate past the L2.
//
// Kernels (256 threads, one token a block, a block an SM, as the library's kernel runs this row):
//   bulk<S>: 64-key tiles into S staging areas of shared memory, each key's 576-byte row by a
//     bulk copy (cp.async.bulk) and its 8 scale bytes by cp.async, 64 copier threads a tile
//     (every fourth thread), counted on the stage's mbarrier, issued S tiles ahead; each tile
//     is then read (every thread xors 16 bytes of its key's row into a sum) and its stage
//     refilled. S = 2 is the library kernel's depth (a staging area per group).
//   runs<S>: bulk<S>, but a key whose row follows the previous copier's key's in memory (the
//     window's consecutive positions in a page) rides on that key's copy: one bulk copy a run
//     of a warp's copiers.
//   cpa<S, L>: the rows by cp.async from every thread, L lanes a key (lane part p of a key copying
//     its row's 16-byte chunks p, p + L, ...: an instruction reads 16 L consecutive bytes of each
//     of 32 / L keys), 256 / L keys a round; the key's first lane copies its scale bytes; each
//     thread's copies counted on the stage's mbarrier by one .noinc arrival. cpa_wide: the same
//     with .L2::256B.
//   ldg<S>: no shared memory: each thread loads its quarter of a key's row (9 x 16 bytes, the
//     key's 4 threads reading 64 consecutive bytes a load) straight into registers, S tiles in
//     flight, and xors them into a sum.
//   contig<S>: the same bytes, but each token's rows lie together: one bulk copy a tile. The
//     streaming ceiling of a block an SM, whatever the lists.
//   bulk and contig also run with 2 or 3 blocks a token (SPLIT), each taking every SPLIT-th tile.
//   stream: the same bytes in one piece, read by 8 blocks an SM: the best one launch can do.
// Each prints the median over the timed runs (device events around each launch, queued behind
// a spin as `make bench` times a row), the key bytes' rate and its ratio to the copy ceiling
// measured here (the faster of cudaMemcpy and a copy kernel, bytes read + written, as `make
// bench` does), and the time the bench row's 70 % target allows.
#include "study.h"
#include <cstdint>

constexpr int kW = 128, kBS = 64, kRow = 576, kScale = 8, kKeys = 64, kThreads = 256;
constexpr int kTokens = 128, kSumBlocks = 3 * kTokens; // the bench row's batch; blocks at most (3 a token)
constexpr int kPageBytes = (kBS * (kRow + kScale) + kRow - 1) / kRow * kRow; // SPEC 7: a multiple of 576 bytes

struct Lists {
    const unsigned char *swa_cache, *cmp_cache;
    const int32_t *swa, *cmp, *swa_len, *cmp_len; // [T, kW], [T, K], [T], [T]
    const unsigned char *contig;                   // contig: token t's rows at t * contig_stride
    int64_t contig_stride;
    int K;
    unsigned *sum; // [kSumBlocks * kThreads]: what each thread read, xor-ed (keeps the loads)
};

__device__ __forceinline__ void cp8(uint32_t dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_arrive_noinc(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}

// Key k of token t: its row and its scale bytes (nullptr past the lists).
struct Key {
    const unsigned char *row, *scales;
};
__device__ __forceinline__ Key key_of(const Lists &L, int t, int k, int n_swa, int n) {
    if (k >= n) return Key{nullptr, nullptr};
    const bool w = k < n_swa;
    const int32_t slot = w ? L.swa[(int64_t)t * kW + k] : L.cmp[(int64_t)t * L.K + k - n_swa];
    const unsigned char *page = (w ? L.swa_cache : L.cmp_cache) + (int64_t)(slot / kBS) * kPageBytes;
    return Key{page + (slot % kBS) * kRow, page + kBS * kRow + (slot % kBS) * kScale};
}

// 16 bytes from global src to shared dst by cp.async (L2 only); kWide: an L2 miss fetches 256 bytes
template <bool kWide>
__device__ __forceinline__ void cp16(uint32_t dst, const void *src) {
    if constexpr (kWide) asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
    else asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}

enum { kBulk, kLdg, kContig, kRuns, kCpa, kCpaWide };

template <int MODE, int S, int SPLIT = 1, int LPK = 8>
__global__ void __launch_bounds__(kThreads) gather(Lists L) {
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int kStage = kKeys * (kRow + kScale);
    const int t = blockIdx.x / SPLIT, z = blockIdx.x % SPLIT, tid = threadIdx.x;
    const int n_swa = L.swa_len[t], n = n_swa + L.cmp_len[t], all_tiles = (n + kKeys - 1) / kKeys;
    const int tiles = (all_tiles - z + SPLIT - 1) / SPLIT; // this block's: z, z + SPLIT, ...
    unsigned acc = 0;
    if constexpr (MODE == kLdg) {
        // thread: key tid % 64 of each tile, chunks (tid / 64) * 16 + 64 j of its row, j < 9
        const int kq = tid % kKeys, part = tid / kKeys;
        uint4 r[S][9];
        auto load = [&](int i, uint4 (&x)[9]) {
            const Key k = key_of(L, t, i * kKeys + kq, n_swa, n);
#pragma unroll
            for (int j = 0; j < 9; j++) x[j] = k.row ? ldg16(k.row + part * 16 + 64 * j) : make_uint4(0, 0, 0, 0);
            if (k.row && part == 0) acc ^= *reinterpret_cast<const unsigned *>(k.scales);
        };
#pragma unroll
        for (int s = 0; s < S; s++)
            if (s < tiles) load(s, r[s]);
        for (int i = 0; i < tiles; i += S) {
#pragma unroll
            for (int s = 0; s < S; s++) {
                if (i + s < tiles) {
#pragma unroll
                    for (int j = 0; j < 9; j++) acc ^= r[s][j].x ^ r[s][j].y ^ r[s][j].z ^ r[s][j].w;
                    if (i + s + S < tiles) load(i + s + S, r[s]);
                }
            }
        }
    } else {
        constexpr bool kAll = MODE == kCpa || MODE == kCpaWide; // every thread copies
        __shared__ uint64_t bars[S];
        const bool copier = kAll || (MODE != kContig ? tid % 4 == 0 : tid == 0);
        const int key = tid / 4; // a bulk copier's key of a tile
        if (tid == 0)
            for (int s = 0; s < S; s++) mbar_init(smem_u32(&bars[s]), kAll ? kThreads : MODE != kContig ? 2 * kKeys : 1);
        __syncthreads();
        auto issue = [&](int j) { // this block's tile j (the token's z + j * SPLIT) into stage j % S
            const int s = j % S, i = z + j * SPLIT;
            const uint32_t bar = smem_u32(&bars[s]), rows = smem_u32(smem + s * kStage), scales = rows + kKeys * kRow;
            if constexpr (kAll) {
                static_assert(kThreads % LPK == 0, "lanes a key");
                constexpr int kPerRound = kThreads / LPK, kRounds = (kKeys + kPerRound - 1) / kPerRound, kChunks = kRow / 16;
                const int part = tid % LPK;
                Key ks[kRounds]; // every round's key looked up before any copy: the lookups' latencies overlap
#pragma unroll
                for (int r = 0; r < kRounds; r++) {
                    const int kr = r * kPerRound + tid / LPK;
                    ks[r] = kr < kKeys ? key_of(L, t, i * kKeys + kr, n_swa, n) : Key{nullptr, nullptr};
                }
#pragma unroll
                for (int r = 0; r < kRounds; r++) {
                    const int kr = r * kPerRound + tid / LPK;
                    if (!ks[r].row) continue;
#pragma unroll
                    for (int c = part; c < kChunks; c += LPK) cp16<MODE == kCpaWide>(rows + kr * kRow + c * 16, ks[r].row + c * 16);
                    if (part == 0) cp8(scales + kr * kScale, ks[r].scales);
                }
                cp_arrive_noinc(bar);
            } else if constexpr (MODE == kBulk || MODE == kRuns) {
                const Key k = key_of(L, t, i * kKeys + key, n_swa, n);
                mbar_expect(bar, k.row ? kRow : 0);
                uint32_t bytes = k.row ? kRow : 0;
                if constexpr (MODE == kRuns) { // a key whose row follows the previous copier's rides on its copy
                    constexpr unsigned kLanes = 0x11111111u; // the copiers: every fourth lane
                    const int lane = tid & 31;
                    const unsigned long long src = reinterpret_cast<uintptr_t>(k.row), prev = __shfl_up_sync(kLanes, src, 4);
                    const bool rides = k.row && lane >= 4 && prev && src == prev + kRow;
                    const unsigned heads = __ballot_sync(kLanes, !rides) & kLanes, later = heads & ~((2u << lane) - 1);
                    bytes = rides ? 0 : bytes * (((later ? __ffs(later) - 1 : 32) - lane) / 4);
                }
                if (bytes) bulk(rows + key * kRow, k.row, bytes, bar);
                if (k.row) cp8(scales + key * kScale, k.scales);
                cp_arrive_noinc(bar);
            } else {
                const int keys = min(kKeys, n - i * kKeys);
                const unsigned char *src = L.contig + t * L.contig_stride + (int64_t)i * kKeys * (kRow + kScale);
                const uint32_t bytes = (keys * (kRow + kScale) + 15) / 16 * 16; // bulk copies take multiples of 16 bytes
                bulk_copy(rows, src, bytes, bar);
            }
        };
        if (copier)
            for (int s = 0; s < S && s < tiles; s++) issue(s);
        for (int i = 0; i < tiles; i++) {
            const int s = i % S;
            mbar_wait(smem_u32(&bars[s]), (i / S) & 1);
            const int k = tid % kKeys;
            if ((z + i * SPLIT) * kKeys + k < n) {
                const uint4 v = *reinterpret_cast<const uint4 *>(smem + s * kStage + k * kRow + (tid / kKeys) * 16);
                acc ^= v.x ^ v.y ^ v.z ^ v.w;
            }
            __syncthreads(); // the stage is read
            if (copier && i + S < tiles) issue(i + S);
        }
    }
    L.sum[(int64_t)blockIdx.x * kThreads + tid] = acc;
}
__global__ void empty_kernel(Lists) {}

struct Set {
    unsigned char *swa_cache, *cmp_cache, *contig;
    int32_t *swa, *cmp;
};

int main(int argc, char **argv) {
    const int runs = argc > 1 ? atoi(argv[1]) : 40;
    const cudaDeviceProp prop = study_device();
    StudyTimer tm;
    const cudaStream_t st = tm.st;

    const double copy_gbs = study_copy_ceiling(prop, tm);

    const int T = kTokens, H = 16;
    for (int K : {512, 1024}) {
        srand(7);
        auto frand = [] { return (double)rand() / ((double)RAND_MAX + 1.0); };
        std::vector<int32_t> ctx(T), swa_len(T), cmp_len(T), swa((size_t)T * kW), cmp((size_t)T * K);
        int64_t swa_pages = 0, cmp_pages = 0, keys = 0;
        for (int b = 0; b < T; b++) {
            ctx[b] = (int32_t)(8192 * (0.5 + frand()));
            swa_pages += (ctx[b] + kBS - 1) / kBS;
            cmp_pages += (ctx[b] / 4 + kBS - 1) / kBS;
            swa_len[b] = std::min(ctx[b], kW);
            cmp_len[b] = std::min(ctx[b] / 4, K);
            keys += swa_len[b] + cmp_len[b];
        }
        const int64_t key_bytes = keys * (kRow + kScale), list_bytes = (int64_t)T * (kW + K + 2) * 4;
        const int sets = (int)std::max<int64_t>(2, (4 * (int64_t)prop.l2CacheSize) / key_bytes + 1);
        std::vector<Set> set(sets);
        int32_t *d_swa_len, *d_cmp_len;
        unsigned *d_sum;
        CK(cudaMalloc(&d_swa_len, T * 4));
        CK(cudaMalloc(&d_cmp_len, T * 4));
        CK(cudaMalloc(&d_sum, (size_t)kSumBlocks * kThreads * 4));
        CK(cudaMemcpy(d_swa_len, swa_len.data(), T * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_cmp_len, cmp_len.data(), T * 4, cudaMemcpyHostToDevice));
        const int64_t contig_stride = (int64_t)(kW + K) * (kRow + kScale);
        std::vector<int32_t> pick(8192 * 2);
        for (auto &s : set) {
            CK(cudaMalloc(&s.swa_cache, swa_pages * kPageBytes));
            CK(cudaMalloc(&s.cmp_cache, cmp_pages * kPageBytes));
            CK(cudaMalloc(&s.contig, T * contig_stride));
            CK(cudaMemset(s.swa_cache, 0x5a, swa_pages * kPageBytes));
            CK(cudaMemset(s.cmp_cache, 0x3c, cmp_pages * kPageBytes));
            CK(cudaMemset(s.contig, 0x77, T * contig_stride));
            int64_t sp = 0, cp = 0;
            for (int b = 0; b < T; b++) {
                const int32_t pos = ctx[b] - 1, avail = ctx[b] / 4;
                for (int k = 0; k < swa_len[b]; k++) swa[(size_t)b * kW + k] = (int32_t)(sp * kBS + pos - swa_len[b] + 1 + k);
                for (int k = 0; k < avail; k++) pick[k] = k;
                for (int k = 0; k < cmp_len[b]; k++) {
                    const int m = k + (int)(frand() * (avail - k)), e = pick[m];
                    pick[m] = pick[k];
                    cmp[(size_t)b * K + k] = (int32_t)(cp * kBS + e);
                }
                sp += (ctx[b] + kBS - 1) / kBS;
                cp += (ctx[b] / 4 + kBS - 1) / kBS;
            }
            CK(cudaMalloc(&s.swa, swa.size() * 4));
            CK(cudaMalloc(&s.cmp, cmp.size() * 4));
            CK(cudaMemcpy(s.swa, swa.data(), swa.size() * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(s.cmp, cmp.data(), cmp.size() * 4, cudaMemcpyHostToDevice));
        }
        // the bench row's bytes (keys + q + o, bf16) at 70 % of copy: the target's time
        const double row_bytes = (double)keys * (kRow + kScale) + (double)T * H * (512 + 512) * 2; // V4 q and o: 512 dims
        printf("\n## %d tokens, window 128 + top-k %d: %lld keys, %.1f MB of key rows, %d sets; the bench row's 70 %% "
               "target: %.1f us\n",
               T, K, (long long)keys, key_bytes / 1e6, sets, row_bytes / (0.7 * copy_gbs * 1e3));
        printf("| kernel | us | GB/s (keys + lists) | %% of copy |\n|---|---|---|---|\n");
        // a row: launch(L) timed over the runs, each on the next set; its rate over `bytes`
        auto time_launch = [&](const char *name, double bytes, auto &&launch) {
            const double us = tm.median_us(runs, [&](int r) {
                const Set &s = set[r % sets];
                launch(Lists{s.swa_cache, s.cmp_cache, s.swa, s.cmp, d_swa_len, d_cmp_len, s.contig, contig_stride, K, d_sum});
            });
            const double gbs = bytes / (us * 1e3);
            printf("| %s | %.1f | %.0f | %.1f %% |\n", name, us, gbs, 100.0 * gbs / copy_gbs);
            fflush(stdout);
        };
        auto time = [&](const char *name, void (*kern)(Lists), int smem, int grid = 0) {
            if (smem > 48 * 1024) CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
            time_launch(name, (double)(key_bytes + list_bytes), [&](const Lists &L) { kern<<<grid ? grid : T, kThreads, smem, st>>>(L); });
        };
        constexpr int kStage = kKeys * (kRow + kScale);
        time("bulk, 2 stages", gather<kBulk, 2>, 2 * kStage);
        time("bulk, 3 stages", gather<kBulk, 3>, 3 * kStage);
        time("bulk, 4 stages", gather<kBulk, 4>, 4 * kStage);
        time("bulk, 5 stages", gather<kBulk, 5>, 5 * kStage);
        time("bulk, 2 stages, consecutive rows as runs", gather<kRuns, 2>, 2 * kStage);
        time("cp.async, 2 stages, 2 lanes a key", gather<kCpa, 2, 1, 2>, 2 * kStage);
        time("cp.async, 2 stages, 32 lanes a key", gather<kCpa, 2, 1, 32>, 2 * kStage);
        time("cp.async, 2 stages, 4 lanes a key", gather<kCpa, 2, 1, 4>, 2 * kStage);
        time("cp.async, 2 stages, 8 lanes a key", gather<kCpa, 2, 1, 8>, 2 * kStage);
        time("cp.async, 2 stages, 16 lanes a key", gather<kCpa, 2, 1, 16>, 2 * kStage);
        time("cp.async, 3 stages, 8 lanes a key", gather<kCpa, 3, 1, 8>, 3 * kStage);
        time("cp.async .L2::256B, 2 stages, 8 lanes a key", gather<kCpaWide, 2, 1, 8>, 2 * kStage);
        time("cp.async .L2::256B, 2 stages, 4 lanes a key", gather<kCpaWide, 2, 1, 4>, 2 * kStage);
        time("cp.async, 2 stages, 8 lanes a key, 2 blocks a token", gather<kCpa, 2, 2, 8>, 2 * kStage, 2 * T);
        time("ldg, 1 tile in flight", gather<kLdg, 1>, 0);
        time("ldg, 2 tiles in flight", gather<kLdg, 2>, 0);
        time("ldg, 3 tiles in flight", gather<kLdg, 3>, 0);
        time("contig, 2 stages", gather<kContig, 2>, 2 * kStage);
        time("contig, 4 stages", gather<kContig, 4>, 4 * kStage);
        time("bulk, 2 stages, 2 blocks a token", gather<kBulk, 2, 2>, 2 * kStage, 2 * T);
        time("bulk, 2 stages, 3 blocks a token", gather<kBulk, 2, 3>, 2 * kStage, 3 * T);
        time("contig, 2 stages, 2 blocks a token", gather<kContig, 2, 2>, 2 * kStage, 2 * T);
        time("contig, 2 stages, 3 blocks a token", gather<kContig, 2, 3>, 2 * kStage, 3 * T);
        time("empty kernel, 128 blocks", empty_kernel, 0);
        time_launch("stream: the key bytes in one piece, every SM", (double)key_bytes,
                    [&](const Lists &L) {
                        study_stream<<<prop.multiProcessorCount * 8, kThreads, 0, st>>>((const uint4 *)L.contig, key_bytes / 16, L.sum,
                                                                                         kSumBlocks * kThreads);
                    });
        for (auto &s : set) {
            CK(cudaFree(s.swa_cache));
            CK(cudaFree(s.cmp_cache));
            CK(cudaFree(s.contig));
            CK(cudaFree(s.swa));
            CK(cudaFree(s.cmp));
        }
        CK(cudaFree(d_swa_len));
        CK(cudaFree(d_cmp_len));
        CK(cudaFree(d_sum));
    }
    return 0;
}
