// kernels.hip - the GPU kernels of aiter_mla and their extern "C" launchers.
//
// Build:  hipcc -std=c++17 --offload-arch=gfx942 -c kernels.hip   (AMD; gfx90a, gfx940, gfx950 too)
//         nvcc -x cu -std=c++17 -gencode=arch=compute_90a,code=sm_90a -DAITER_MLA_WGMMA -c kernels.hip
//                                                      (NVIDIA Hopper; AITER_MLA_WGMMA: aiter_mla.h's manual)
// Link the object with the program that defines AITER_MLA_IMPLEMENTATION. Launchers never
// synchronise or allocate; they return the native error code (0 = success) and the
// wrappers in aiter_mla.h turn it into a status.

// ---- portability: write HIP, map to CUDA under nvcc ---------------------------------------
#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__)
#include <cuda.h> // types only (CUtensorMap); the driver's encoder is looked up at run time
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <atomic> // the per-device image arch of the launches (image_arch)
typedef cudaStream_t hipStream_t;
typedef cudaError_t hipError_t;
#define hipSuccess cudaSuccess
#define hipGetLastError cudaGetLastError
#define hipGetErrorString cudaGetErrorString
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipMemsetAsync cudaMemsetAsync
#define AITER_MLA_WARP_SIZE 32
#define aiter_mla__shfl_xor(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define aiter_mla__shfl(v, l) __shfl_sync(0xffffffffu, (v), (l))
#define aiter_mla__ballot(p) ((uint64_t)__ballot_sync(0xffffffffu, (p))) // lane i: bit i
// Device passes compile out the kernels their target cannot run (below sm_80 the tensor-core
// kernels; the warpgroup kernels outside sm_90a; each pass the other passes' mma.sync decode
// instances, which leaves sm_120 without 64-row ones), which leaves those kernels' helpers
// and constants unreferenced there: nvcc's "declared but never referenced" (177) would flood
// an sm_75, sm_80, sm_100 or sm_120 pass.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 900 || __CUDA_ARCH__ >= 1200 || (defined(AITER_MLA_WGMMA) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)))
#pragma nv_diag_suppress 177
#endif
#else
#include <hip/hip_runtime.h>
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define AITER_MLA_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define AITER_MLA_WARP_SIZE 64 // gfx9 (MI200, MI300, MI350) run 64-lane wavefronts
#endif
#define aiter_mla__shfl_xor(v, m) __shfl_xor((v), (m))
#define aiter_mla__shfl(v, l) __shfl((v), (l))
#define aiter_mla__ballot(p) ((uint64_t)__ballot((p)))
#endif

#include <stdint.h>
#include "aiter_mla.h"

#define AITER_MLA__LAUNCH_CHECK() return (int)hipGetLastError()

namespace {

constexpr int kD = AITER_MLA_HEAD_DIM;  // 576: q row, cache row
constexpr int kL = AITER_MLA_LATENT_DIM; // 512: V and o
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Whether o's rows take whole 16-byte stores: a 16-bit dtype, a 16-byte aligned base, strides
// in whole 16-byte units (8 elements).
__host__ __device__ inline bool o_rows16(const void *o, aiter_mla_dtype dtype, int64_t stride_token, int64_t stride_head) {
    return (dtype == AITER_MLA_BF16 || dtype == AITER_MLA_F16) && ((uintptr_t)o & 15) == 0 && stride_token % 8 == 0 &&
           stride_head % 8 == 0;
}

// Whether dtype t is either e4m3 flavour.
__host__ __device__ constexpr bool is_e4m3(int t) { return t == AITER_MLA_FP8_E4M3FN || t == AITER_MLA_FP8_E4M3FNUZ; }

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }
__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

// Programmatic dependent launch (NVIDIA sm_90): a kernel whose partials a reduce merges lets
// that reduce launch while it still runs (release_dependents, at its start), so the reduce's
// launch and its plan reads overlap the producer's last blocks instead of following them.
// The reduce waits (wait_for_producer) for the producer's completion, its memory visible,
// before it reads any partial. Both are no-ops elsewhere, and where the reduce was launched
// plainly (launch_dependent).
__device__ __forceinline__ void release_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_producer() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// The work items of a plan's list l, held to the plan's bounds: [max(indptr[l], 0),
// min(indptr[l + 1], max_work)). The plan is device data: a list that runs past the items holds
// as many as there are, one that ends before it starts holds none. Decode and prefill alike.
struct WorkRange { int begin, end; };
__device__ __forceinline__ WorkRange plan_list_items(const int32_t *work_indptr, int l, int max_work) {
    return {max(work_indptr[l], 0), min(work_indptr[l + 1], max_work)};
}
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
// Four floats (a in the low byte) to e4m3fn by the hardware converter: round to nearest even,
// saturating to +-448; a value that rounds to zero keeps its sign (0x80) and NaN of either
// sign is 0x7f: the header's converter's codes, bit for bit (sm_90, the GPU test of every
// bf16 value through the writers).
__device__ __forceinline__ uint32_t f32x4_to_e4m3x4_hw(float a, float b, float c, float d) {
    uint16_t lo, hi;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(b), "f"(a));
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(d), "f"(c));
    return (uint32_t)lo | (uint32_t)hi << 16;
}
#endif

// ==== dense decode: portable path ==========================================================
// One block per CU runs that CU's work items of the plan. A work item is a query tile of one
// request (up to 128 (token, head) rows) against a range of its keys. Rows go in groups of
// kRows; keys stream through shared memory in tiles of kKeys with 16-byte loads; the softmax
// is online in the log2 domain; fp32 accumulators live in registers (kL / kThreads dims per
// thread and row).
constexpr int kThreads = 256;
constexpr int kRows = 16;
constexpr int kKeys = 8;
constexpr int kDimsPerThread = kL / kThreads; // 2

struct DecodeParams {
    aiter_mla_decode_args a;   // resolved by the wrapper
    const int32_t *work_indptr; // [num_lists + 1]
    const int32_t *work_info;   // [max_work, 8]
    int max_work, max_partial_rows; // the plan's bounds (its info): load_piece holds the items to them
    float *part_o;              // [max_partial_rows, H, 512]
    float *part_lse;            // [max_partial_rows, H]
    float score_scale;          // sm_scale * q_scale * kv_scale * log2(e), fp8 scales only
    int page_shift;             // log2(page_size)
    float v_scale;              // kv_scale for fp8 caches, else 1
    // Sparse attention (SPEC 4) runs these kernels without a plan: block (x, y) takes tokens
    // x, x + gridDim.x, ... < tokens (one query row per head) against their index rows, rows
    // [y * rows_per_block, ..) of the heads. a.kv_indices is then the [T, indices_stride] slot
    // table, a page is one slot.
    int sparse;                 // 0: decode (plan-driven)
    int64_t tokens;             // sparse: T
    int topk;                   // sparse: entries per index row
    int indices_stride;         // sparse: entries between index rows (>= topk)
    const int32_t *topk_length; // sparse: [T] entries that count, optional
    int rows_per_block;         // sparse: heads per block
    const float *attn_sink;     // sparse: [H] optional, enters the denominator only
    float *max_logits;          // sparse: [T, H] optional
    // V4 (SPEC 7), a sparse mode: token t's keys are list 0's entries, then list 1's; with
    // v4_splits > 1 block z of gridDim.z takes the z-th share of them and writes fp32
    // partials (part_o, part_lse at row t * v4_splits + z) merged by the reduce kernel.
    int v4, v4_splits;
    aiter_mla_v4_keys v4_keys[2]; // resolved; list 1 unused while its indices are NULL
    int keys_read_once;         // sparse, V4: the caller's word that no key serves two tokens (key_l2_policy)
    int keys_shared;            // V4: the caller's word that its tokens reread each other's keys (decode_wgmma_kernel's kKept)
    // Decode on the warpgroup kernel: block (x, y) takes rows [64 x, 64 x + 64) of CU y's work
    // items, so the blocks sharing a work item's keys run side by side and share them in L2.
    int row_split;
    // Decode on the warpgroup kernel: the plan's piece counters [max_partial_rows]
    // (count_stored_rows); NULL: none.
    int32_t *arrivals;
};

// Cache row formats beyond the dtypes: fp8_ds_mla rows (656 bytes: 512 e4m3 with 4 fp32
// group scales, then 64 bf16 rope values), in either fp8 flavour; and the V4 key lists
// (512-dim rows, V the whole row): MODEL1 pages (tensor cores: the 576-byte row is copied,
// its 8 scale bytes follow it in the ring), bf16 rows (tensor cores), or any mix of formats
// (portable kernel: each row dequantised to fp32 in shared memory).
constexpr int kDsMlaFn = 100, kDsMlaFnuz = 101, kV4Model1 = 102, kV4Bf16 = 103, kV4Any = 104;
constexpr int kDsRow = AITER_MLA_DS_MLA_ROW_BYTES, kDsScales = AITER_MLA_DS_MLA_SCALES_OFFSET, kDsRope = AITER_MLA_DS_MLA_ROPE_OFFSET;
constexpr int kV4D = AITER_MLA_V4_HEAD_DIM, kV4Nope = AITER_MLA_V4_NOPE_DIM;
__host__ __device__ constexpr bool is_ds_mla(int kvt) { return kvt == kDsMlaFn || kvt == kDsMlaFnuz; }
__host__ __device__ constexpr bool is_v4(int kvt) { return kvt == kV4Model1 || kvt == kV4Bf16 || kvt == kV4Any; }
// Dims of q . k: 576 for MLA decode and V3.2, 512 for V4 (V is the first 512 either way).
__host__ __device__ constexpr int qk_dims(int kvt) { return is_v4(kvt) ? kV4D : kD; }
// Bytes of one cache row of format kvt as it is copied (kV4Any: the fp32 row in shared memory).
__host__ __device__ constexpr int cache_row_bytes(int kvt) {
    return is_ds_mla(kvt)            ? kDsRow
           : kvt == kV4Model1        ? AITER_MLA_V4_ROW_BYTES
           : kvt == kV4Bf16          ? kV4D * 2
           : kvt == kV4Any           ? kV4D * 4
           : kvt == AITER_MLA_BF16 || kvt == AITER_MLA_F16 ? kD * 2
                                     : kD;
}
// Byte offset of the bf16 rope in a cache row of the formats that keep it apart (fp8_ds_mla, MODEL1).
__host__ __device__ constexpr int rope_byte(int kvt) { return is_ds_mla(kvt) ? kDsRope : kV4Nope; }

// One work item of the plan, with the bounds both decode kernels derive from it.
struct Piece {
    int b, loc, qs, qe, ks;  // request, partial row (-1: final), query rows, first page
    int q_begin, q_len;      // the request's query rows
    int64_t kv_len, tok0, n; // the request's keys, the piece's first key, its key count
    int rb, re;              // the (token, head) rows this block takes: [rb, re) of (qe - qs) * H
    int64_t v4_start[2], v4_n0; // V4: each list's first index into its indices; list 0's count
};

// The plan is device data like the indptrs: an item that does not fit the arguments (a plan
// built for other lengths or another batch, or overwritten) runs as an empty piece (no rows, no
// partial), or as its rows with no keys where only its pages or offset do not fit its request,
// so that no plan takes a kernel outside q, o, kv_indices or the workspace. The rows' checks use
// the item and q's row count alone (loaded beside it), so that Q's load waits for nothing more;
// rows of another request than b's come out wrong, never outside q and o.
__device__ __forceinline__ Piece load_piece(const DecodeParams &p, int w) {
    const aiter_mla_decode_args &a = p.a;
    const int32_t *wi = p.work_info + (int64_t)w * AITER_MLA_WORK_INTS;
    const int b = wi[0], loc = wi[1], qs = wi[2], qe = wi[3], ks = wi[4], ke = wi[5], off = wi[6];
    const int q_rows = a.qo_indptr[a.batch], kv_pages = a.kv_indptr[a.batch]; // kv_indices' length
    const bool b_ok = b >= 0 && b < a.batch;
    const bool rows_ok = b_ok && 0 <= qs && qs <= qe && qe <= q_rows && (loc == -1 || (loc >= 0 && (int64_t)loc + qe - qs <= p.max_partial_rows));
    Piece c;
    c.b = b_ok ? b : 0;
    c.loc = rows_ok ? loc : -1;
    c.qs = rows_ok ? qs : 0;
    c.qe = rows_ok ? qe : 0;
    c.q_begin = a.qo_indptr[c.b];
    c.q_len = a.qo_indptr[c.b + 1] - c.q_begin;
    const int kv0 = a.kv_indptr[c.b], kv1 = a.kv_indptr[c.b + 1];
    // the pages inside the request's and inside kv_indices (an indptr that decreases would
    // otherwise pass a piece past the array's end)
    const bool keys_ok = rows_ok && 0 <= ks && kv0 <= ks && ks <= ke && ke <= kv1 && ke <= kv_pages && off >= 0;
    c.ks = keys_ok ? ks : kv0;
    const int last = min(max(a.kv_last_page_lens[c.b], 1), a.page_size);
    c.kv_len = aiter_mla__kv_len(kv1 - kv0, last, a.page_size);
    c.tok0 = (int64_t)(c.ks - kv0) * a.page_size;
    // never more keys than the piece's pages hold, whatever the metadata says
    c.n = keys_ok ? max((int64_t)0, min(c.kv_len - off - c.tok0, (int64_t)(ke - c.ks) * a.page_size)) : 0;
    c.rb = 0;
    c.re = (c.qe - c.qs) * a.num_heads;
    if (p.row_split) {
        c.rb = blockIdx.x * AITER_MLA_SLICE_ROWS;
        c.re = min(c.re, c.rb + AITER_MLA_SLICE_ROWS);
    }
    return c;
}

// Sparse: token t, all of its (valid-length) index row, one row group of heads.
__device__ __forceinline__ Piece sparse_piece(const DecodeParams &p, int t) {
    Piece c;
    c.b = c.qs = c.q_begin = t;
    c.qe = c.b + 1;
    c.q_len = 1;
    c.loc = -1;
    c.ks = c.b * p.indices_stride;
    c.kv_len = p.topk_length ? min(max(p.topk_length[c.b], 0), p.topk) : p.topk;
    c.tok0 = 0;
    c.n = c.kv_len;
    c.rb = blockIdx.y * p.rows_per_block;
    c.re = min(c.rb + p.rows_per_block, p.a.num_heads);
    return c;
}

// V4: token t against its two lists (its blockIdx.z-th share of them when split), one row
// group of heads. Keys [tok0, tok0 + n) of the token's kv_len.
__device__ __forceinline__ Piece v4_piece(const DecodeParams &p, int t) {
    Piece c = sparse_piece(p, t);
    c.v4_n0 = aiter_mla__v4_keys_of(&p.v4_keys[0], c.b, p.tokens, &c.v4_start[0]);
    c.kv_len = c.v4_n0 + aiter_mla__v4_keys_of(&p.v4_keys[1], c.b, p.tokens, &c.v4_start[1]);
    c.n = c.kv_len;
    if (p.v4_splits > 1) {
        const int64_t z = blockIdx.z, lo = c.kv_len * z / p.v4_splits, hi = c.kv_len * (z + 1) / p.v4_splits;
        c.tok0 = lo;
        c.n = hi - lo;
        c.loc = (int)(c.b * (int64_t)p.v4_splits + z); // partial row t * splits + z
    }
    return c;
}

// The pieces of this block: its CU's work items (decode), or its token (sparse, V4). K
// (LaunchKind, below): which of them the instance can meet. kOnce: run is called from one place
// (one loop over either kind of piece), so that a kernel that inlines it holds one copy of its
// body, not one for each kind of launch. The warpgroup decode
// takes it outside its split scheme: ptxas's spill stores there fell from 16-384 to 0-56 bytes
// an instance, and (H200, alternately in one call, three runs each) D6 202.7-203.3 -> 198.4-199.1
// us, SD1 395.4-395.8 -> 393.1-393.5, V4D-h64-k512-b4 14.7-15.0 -> 15.7-15.8 TFLOP/s, -b32
// 65.6-68.6 -> 69.8-70.0, -b128 177.3-178.2 -> 180.6-180.9, D3 and D4 unchanged; but SP1 (the
// split scheme) 4722-4762 -> 4814-4834 us, and the 16-row kernels 0.3-2 % slower (D1 170.4 ->
// 171.0-171.7, D2 321.7 -> 322.5-322.7, V4D-h16-k512-b128 81.3-81.8 -> 79.9-80.2 TFLOP/s).
// The plan's list (CU) of this block: row-split launches put a CU's blocks side by side in x.
__device__ __forceinline__ int block_cu(const DecodeParams &p) { return p.row_split ? blockIdx.y : blockIdx.x; }
// What an instance knows of its launches: any kind (p.sparse and p.v4 tell), decode work
// items only, or V4 tokens only; one that knows leaves the other kinds' pieces out.
enum LaunchKind { kAnyLaunch, kDecodeLaunch, kV4Launch };
template <LaunchKind K> __device__ __forceinline__ bool sparse_launch(const DecodeParams &p) {
    if constexpr (K == kAnyLaunch) return p.sparse;
    else return K == kV4Launch;
}
// Token t's piece of a sparse or V4 launch.
template <LaunchKind K> __device__ __forceinline__ Piece token_piece(const DecodeParams &p, int t) {
    if constexpr (K == kV4Launch) return v4_piece(p, t);
    else return p.v4 ? v4_piece(p, t) : sparse_piece(p, t);
}
template <bool kOnce = false, LaunchKind K = kAnyLaunch, typename F>
__device__ __forceinline__ void for_each_piece(const DecodeParams &p, F &&run) {
    release_dependents(); // the reduce (if any) may launch now
    if constexpr (kOnce) {
        int64_t first = blockIdx.x, end = p.tokens, step = gridDim.x; // sparse and V4: no plan (work_indptr NULL)
        if (!sparse_launch<K>(p)) {
            const WorkRange list = plan_list_items(p.work_indptr, block_cu(p), p.max_work);
            first = list.begin;
            end = list.end;
            step = 1;
        }
        for (int64_t i = first; i < end; i += step) run(!sparse_launch<K>(p) ? load_piece(p, (int)i) : token_piece<K>(p, (int)i));
        return;
    }
    if (sparse_launch<K>(p)) {
        for (int64_t t = blockIdx.x; t < p.tokens; t += gridDim.x) run(token_piece<K>(p, (int)t));
        return;
    }
    const WorkRange list = plan_list_items(p.work_indptr, block_cu(p), p.max_work);
    for (int w = list.begin; w < list.end; w++) run(load_piece(p, w));
}

// Row idx (a (token, head) row of the piece's query tile, heads fastest): its token, the last
// key index it may see (causal, bottom-right aligned), and where its q row starts (in elements).
__device__ __forceinline__ int row_token(const Piece &pc, int idx, int H) { return pc.qs + idx / H; }
__device__ __forceinline__ long long row_key_limit(const Piece &pc, int idx, int H) {
    return pc.kv_len - pc.q_len + (row_token(pc, idx, H) - pc.q_begin);
}
__device__ __forceinline__ int64_t row_q_offset(const aiter_mla_decode_args &a, const Piece &pc, int idx) {
    return (int64_t)row_token(pc, idx, a.num_heads) * a.q_stride_token + (int64_t)(idx % a.num_heads) * a.q_stride_head;
}
// The last key of tile [k0, k0 + nk) a row with limit lim may see, relative to k0 (-1: none).
__device__ __forceinline__ int tile_key_limit(const Piece &pc, long long lim, int64_t k0, int nk) {
    return (int)min(max(lim - pc.tok0 - k0, -1LL), (long long)nk - 1);
}

// A final row's o factor from the attention sink: sum e^s / (sum e^s + e^sink) = 1 / (1 +
// e^(sink - lse)); 1 without a sink, 0 for a sink of +inf. Only for rows that saw a key.
__device__ __forceinline__ float sink_factor(const float *attn_sink, int h, float lse) {
    return attn_sink ? 1.0f / (1.0f + expf(attn_sink[h] - lse)) : 1.0f;
}
// max(a, b), NaN where either is (fmaxf returns the other one).
__device__ __forceinline__ float max_nan(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return a != a || b != b ? a + b : fmaxf(a, b);
#endif
}
// A row's softmax sum l is 0 when no key counted (an empty row) and NaN when a score was NaN
// (a NaN or inf in q or a key): such a row's o and lse come out NaN, as in the references,
// never an empty row's zeros. The one test every finish of a row uses.
__device__ __forceinline__ bool row_has_keys(float l) { return l != 0.0f; }
// The lse (natural log) of a row with keys, from its softmax totals: m in log2 units (the max
// its exponentials were taken against), l their sum. Callers test row_has_keys(l) first (as a
// select, so that an empty row's value is not computed beside it).
__device__ __forceinline__ float row_lse(float m, float l) { return (m + log2f(l)) * kLn2; }

// max_logits of a final row: the largest scaled logit (m is in log2 units), -inf when none.
__device__ __forceinline__ void store_max_logit(const DecodeParams &p, int64_t tok, int h, bool any, float m_log2) {
    if (p.max_logits) p.max_logits[tok * p.a.num_heads + h] = any ? m_log2 * kLn2 : neg_inf();
}

// A finished row of a pass, from its softmax totals (m in log2 units, the max its exponentials
// were taken against; l): its lse (natural log; +inf for a final row that saw no key, -inf for
// such a partial), written with max_logits (final rows; top, the row's largest logit in log2
// units: above m by less than kLazyRise with lazy maxima, m itself in the overload below) or as
// the partial lse when `publish`; *inv: the factor of its o (1 / l, times the fp8 V scale and
// the sink). Returns where its o row (final) or partial row starts.
__device__ __forceinline__ long long finish_row(const DecodeParams &p, const Piece &pc, int idx, float m, float l, bool publish,
                                                float *inv, float top) {
    const aiter_mla_decode_args &a = p.a;
    const int H = a.num_heads;
    const int64_t tok = pc.qs + idx / H, h = idx % H, pr = (int64_t)(pc.loc + tok - pc.qs) * H + h;
    const float lse = row_has_keys(l) ? row_lse(m, l) : (pc.loc < 0 ? pos_inf() : neg_inf());
    *inv = row_has_keys(l) ? p.v_scale * (pc.loc < 0 ? sink_factor(p.attn_sink, (int)h, lse) : 1.0f) / l : 0.0f;
    if (pc.loc < 0) {
        if (publish) {
            if (a.lse) a.lse[tok * H + h] = lse;
            store_max_logit(p, tok, (int)h, row_has_keys(l), top);
        }
        return tok * a.o_stride_token + h * a.o_stride_head;
    }
    if (publish) p.part_lse[pr] = lse;
    return pr * kL;
}
// ... of a softmax with exact maxima: m is the row's largest logit.
__device__ __forceinline__ long long finish_row(const DecodeParams &p, const Piece &pc, int idx, float m, float l, bool publish,
                                                float *inv) {
    return finish_row(p, pc, idx, m, l, publish, inv, m);
}
// Key j (0-based within the piece) of a format-KVT piece, in two steps so that a producer
// can load the index of a later key while it issues the copy of this one.
// key_entry: the index read from memory: the page id (decode, sparse) or the V4 list entry;
// -1 past the piece's keys.
template <int KVT>
__device__ __forceinline__ int32_t key_entry(const DecodeParams &p, const Piece &c, int64_t j) {
    if (j >= c.n) return -1;
    if constexpr (is_v4(KVT)) {
        j += c.tok0; // the token's key index
        // selects rather than an index into the parameter (which would copy it to local memory)
        return j < c.v4_n0 ? p.v4_keys[0].indices[c.v4_start[0] + j] : p.v4_keys[1].indices[c.v4_start[1] + j - c.v4_n0];
    } else {
        return p.a.kv_indices[c.ks + (j >> p.page_shift)];
    }
}
// key_ref: where the key lies. row: the bytes to copy (NULL: absent); scales: MODEL1's 16
// aligned scale bytes holding the row's 8 (those of an even and an odd offset); kind: 0
// absent, else bit 0 set, bit 1 for e4m3fnuz, bit 2 when the row's scales are the upper 8;
// list, at, pos: the V4 entry as aiter_mla__v4_key_at found it.
struct KeyRef {
    const unsigned char *row, *scales, *at;
    int pos, list, kind;
};
constexpr int kKindFnuz = 2, kKindOddScales = 4;
template <int KVT>
__device__ __forceinline__ KeyRef key_ref(const DecodeParams &p, const Piece &c, int64_t j, int32_t entry) {
    KeyRef k{nullptr, nullptr, nullptr, 0, 0, 0};
    if (j >= c.n) return k;
    if constexpr (is_v4(KVT)) {
        k.list = c.tok0 + j < c.v4_n0 ? 0 : 1;
        const aiter_mla_v4_keys L = k.list ? p.v4_keys[1] : p.v4_keys[0]; // a select, not an index (see key_entry)
        const int bs = L.block_size;
        if (!L.rows && (bs & (bs - 1)) == 0) { // aiter_mla__v4_key_at, its division by a power of two (vLLM's 64) a shift
            const int sh = __ffs(bs) - 1;
            if (entry < 0 || (entry >> sh) >= L.num_blocks) return k;
            k.at = static_cast<const unsigned char *>(L.cache) + (int64_t)(entry >> sh) * L.page_stride_bytes;
            k.pos = entry & (bs - 1);
        } else {
            k.at = aiter_mla__v4_key_at(&L, entry, &k.pos);
            if (!k.at) return k;
        }
        k.row = k.at;
        k.kind = 1;
        if (!L.rows) {
            k.row += aiter_mla__v4_row_at(k.pos);
            k.scales = k.at + aiter_mla__v4_scales_at(L.block_size, k.pos & ~1);
            k.kind |= (L.dtype == AITER_MLA_FP8_E4M3FNUZ ? kKindFnuz : 0) | (k.pos & 1 ? kKindOddScales : 0);
        }
    } else {
        if (entry < 0 || entry >= p.a.num_pages) return k;
        k.row = static_cast<const unsigned char *>(p.a.kv_cache) +
                ((int64_t)entry * p.a.page_size + ((c.tok0 + j) & (p.a.page_size - 1))) * cache_row_bytes(KVT); // page_size: a power of two
        k.kind = 1;
    }
    return k;
}

// Element d (0..575) of key `key` of a tile of whole cache rows.
template <int KVT>
__device__ __forceinline__ float kv_elem(const unsigned char *tile, int key, int d) {
    const unsigned char *row = tile + key * cache_row_bytes(KVT);
    if constexpr (KVT == kV4Any) {
        return reinterpret_cast<const float *>(row)[d];
    } else if constexpr (is_ds_mla(KVT)) {
        if (d < kL) {
            float scale;
            memcpy(&scale, row + kDsScales + 4 * (d >> 7), 4);
            return aiter_mla__dequant_fp8(row[d], scale, KVT == kDsMlaFn ? AITER_MLA_FP8_E4M3FN : AITER_MLA_FP8_E4M3FNUZ);
        }
        return aiter_mla_load_f32(row + kDsRope, d - kL, AITER_MLA_BF16);
    } else {
        return aiter_mla_load_f32(row, d, (aiter_mla_dtype)KVT);
    }
}

template <int KVT>
__global__ void __launch_bounds__(kThreads) decode_kernel(DecodeParams p) {
    constexpr int kRowBytes = cache_row_bytes(KVT), kChunks = kRowBytes / 16; // 16-byte chunks per cache row
    // V4 rows are fp32 in shared memory: 8 rows per group keep q and keys within 48 KB
    constexpr int kR = KVT == kV4Any ? kRows / 2 : kRows, kDq = qk_dims(KVT);
    constexpr int kTpp = kThreads / (kR * kKeys); // threads per (row, key) score
    __shared__ float q_s[kR][kDq];
    __shared__ __align__(16) unsigned char k_s[kKeys * kRowBytes];
    __shared__ float s_s[kR][kKeys];
    __shared__ float alpha_s[kR], m_s[kR], l_s[kR];
    __shared__ long long lim_s[kR];
    __shared__ KeyRef ref_s[kKeys];

    const aiter_mla_decode_args &a = p.a;
    const int tid = threadIdx.x, H = a.num_heads;
    for_each_piece(p, [&](const Piece &pc) {
        const int64_t n = pc.n;

        for (int r0 = pc.rb; r0 < pc.re; r0 += kR) {
            const int nr = min(kR, pc.re - r0);
            for (int idx = tid; idx < nr * kDq; idx += kThreads) {
                const int r = idx / kDq, d = idx - r * kDq, row = r0 + r;
                q_s[r][d] = aiter_mla_load_f32(a.q, row_q_offset(a, pc, row) + d, a.q_dtype);
            }
            if (tid < kR) {
                lim_s[tid] = row_key_limit(pc, r0 + tid, H);
                m_s[tid] = neg_inf();
                l_s[tid] = 0.0f;
            }
            float acc[kR][kDimsPerThread];
#pragma unroll
            for (int r = 0; r < kR; r++)
#pragma unroll
                for (int j = 0; j < kDimsPerThread; j++) acc[r][j] = 0.0f;
            __syncthreads();

            for (int64_t k0 = 0; k0 < n; k0 += kKeys) {
                const int nk = (int)min((int64_t)kKeys, n - k0);
                if (tid < kKeys) ref_s[tid] = key_ref<KVT>(p, pc, k0 + tid, key_entry<KVT>(p, pc, k0 + tid));
                __syncthreads();
                if constexpr (KVT == kV4Any) { // V4: each row dequantised to fp32
                    for (int c = tid; c < kKeys * kV4D; c += kThreads) {
                        const KeyRef &k = ref_s[c / kV4D];
                        reinterpret_cast<float *>(k_s)[c] =
                            k.row ? aiter_mla__v4_key_elem(&p.v4_keys[k.list], k.at, k.pos, c % kV4D) : 0.0f;
                    }
                } else { // whole cache rows, 16 bytes at a time
                    for (int c = tid; c < kKeys * kChunks; c += kThreads) {
                        const int key = c / kChunks, part = c - key * kChunks;
                        const unsigned char *row = ref_s[key].row;
                        reinterpret_cast<uint4 *>(k_s)[c] =
                            row ? reinterpret_cast<const uint4 *>(row)[part] : make_uint4(0u, 0u, 0u, 0u);
                    }
                }
                __syncthreads();
                { // scores: kTpp threads per (row, key), each a share of the dims
                    const int pair = tid / kTpp, part = tid % kTpp, r = pair / kKeys, c = pair % kKeys;
                    float s = 0.0f;
                    for (int d = part; d < kDq; d += kTpp) s += q_s[r][d] * kv_elem<KVT>(k_s, c, d);
#pragma unroll
                    for (int o = 1; o < kTpp; o <<= 1) s += aiter_mla__shfl_xor(s, o);
                    if (part == 0) {
                        const bool ok = r < nr && c <= tile_key_limit(pc, lim_s[r], k0, nk) && ref_s[c].row;
                        s_s[r][c] = ok ? s * p.score_scale : neg_inf();
                    }
                }
                __syncthreads();
                if (tid < kR) { // online softmax, one thread per row
                    const int r = tid;
                    float mx = m_s[r];
#pragma unroll
                    for (int c = 0; c < kKeys; c++) mx = fmaxf(mx, s_s[r][c]);
                    float alpha = 1.0f, sum = 0.0f;
                    if (mx != neg_inf()) {
                        alpha = exp2f(m_s[r] - mx);
#pragma unroll
                        for (int c = 0; c < kKeys; c++) {
                            const float e = exp2f(s_s[r][c] - mx);
                            s_s[r][c] = e;
                            sum += e;
                        }
                    } else {
#pragma unroll
                        for (int c = 0; c < kKeys; c++) s_s[r][c] = 0.0f;
                    }
                    l_s[r] = l_s[r] * alpha + sum;
                    m_s[r] = mx;
                    alpha_s[r] = alpha;
                }
                __syncthreads();
                float v[kKeys][kDimsPerThread];
#pragma unroll
                for (int c = 0; c < kKeys; c++)
#pragma unroll
                    for (int j = 0; j < kDimsPerThread; j++) v[c][j] = kv_elem<KVT>(k_s, c, tid + j * kThreads); // V's scale: in finish_row
#pragma unroll
                for (int r = 0; r < kR; r++)
#pragma unroll
                    for (int j = 0; j < kDimsPerThread; j++) {
                        float o = acc[r][j] * alpha_s[r];
#pragma unroll
                        for (int c = 0; c < kKeys; c++) o += s_s[r][c] * v[c][j];
                        acc[r][j] = o;
                    }
                __syncthreads();
            }

#pragma unroll
            for (int r = 0; r < kR; r++) {
                if (r < nr) {
                    float inv;
                    const long long at = finish_row(p, pc, r0 + r, m_s[r], l_s[r], tid == 0, &inv);
#pragma unroll
                    for (int j = 0; j < kDimsPerThread; j++) {
                        const int d = tid + j * kThreads;
                        if (pc.loc < 0) aiter_mla_store_f32(a.o, at + d, a.o_dtype, acc[r][j] * inv);
                        else p.part_o[at + d] = acc[r][j] * inv;
                    }
                }
            }
            __syncthreads(); // q_s, m_s, l_s are refilled by the next row group
        }
    });
}

// ==== dense decode: matrix-core path (AMD MFMA) ============================================
// Same plan, pieces and output conventions as the portable path, for 16-bit q (bf16 or f16,
// 16-byte rows) over a cache of q's type or per-tensor fp8 (widened exactly to q's type: e4m3
// fits both), for e4m3 q over a cache of its flavour (both widened exactly to f16), for
// sparse attention over bf16 or fp8_ds_mla rows, and for V4 attention over bf16 rows or
// MODEL1 pages (store_scaled_rows). A block of 256 threads (4 waves of 64) streams the
// piece's keys in tiles of 32; the next tile's 16-byte loads are in flight in registers while
// this one is computed. Query tiles of up to 16 (token, head) rows take passes of 16 rows; per
// tile: S = Q K^T (wave w: keys 16 (w & 1) .. + 16 over half w >> 1 of the 576 (V4: 512)
// dims, its Q fragments held in registers for the pass; the halves summed by the softmax), an
// online softmax (16 threads a row), O += P V (wave w: latent dims 128 w .. + 128, fp32 in
// registers). Larger tiles take passes of 64, a wave's 16 rows as the prefill's
// (wave_rows_tile), so that a key tile serves 64 rows.
// The one tile operation is a wave's 16x16x16 product (wave_mma): v_mfma_f32_16x16x16bf16_1k
// or _f16 on gfx90a, gfx94x and gfx950; on other targets the same product from shared memory
// (correct, slow). NVIDIA builds with AITER_MLA_MFMA_EMULATE take these kernels (and the
// prefill's below) in place of the mma ones, emulated: `make test-gpu-mfma` runs the decode,
// sparse, V4 and prefill GPU tests on them.
#if defined(__HIP_PLATFORM_AMD__) || defined(AITER_MLA_MFMA_EMULATE)
#define AITER_MLA_HAS_MFMA 1
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__)
#define AITER_MLA_MFMA_NATIVE 1
#endif
namespace mfma {

constexpr int kWave = 64;                    // lanes of one product (MFMA's wave; the emulation: 64 threads)
constexpr int kThreads = 256, kWaves = kThreads / kWave;
constexpr int kM = 16, kN = 32;              // (token, head) rows per pass, keys per tile
constexpr int kPitch = kD * 2 + 16;          // bytes of a 16-bit key row in shared memory
constexpr int kPPitch = kN * 2 + 16;         // bytes of a P row
constexpr int kDimsPerWave = kL / kWaves;    // 128: 8 column tiles of 16
static_assert(kWaves == 4 && kN == 32, "the S split assumes two key tiles of 16 and two dim halves");

// Operand and result fragments of wave_mma, in a lane's registers.
struct Frag { // four 16-bit values: k-slots 4 (lane / 16) + 0..3
    uint32_t lo, hi;
};
struct Acc { // fp32 rows 4 (lane / 16) + 0..3 of column lane % 16
    float v[4];
};
// The emulated product's operands: every thread's A and B fragments, in the kernel's shared
// memory (wave_scratch); none where MFMA is native.
struct WaveScratch {
    Frag a[kThreads], b[kThreads];
};
__device__ __forceinline__ WaveScratch *wave_scratch() {
#ifdef AITER_MLA_MFMA_NATIVE
    return nullptr;
#else
    __shared__ WaveScratch scratch;
    return &scratch;
#endif
}

// Marks a lambda handed to a walk (for_each_piece, for_each_key_tile, for_each_prefill_unit)
// to be inlined always: a body called out of line would take the accumulators it captures by
// address, through scratch memory. (A precaution: what had kept the 64-row decode's O in
// scratch memory was a loop indexing it, see store_o.)
#define AITER_MLA__INLINE_BODY __attribute__((always_inline))

template <int QT>
__device__ __forceinline__ float half_f32(uint32_t h) {
    return QT == AITER_MLA_BF16 ? aiter_mla_bf16_to_f32((uint16_t)h) : aiter_mla_f16_to_f32((uint16_t)h);
}
template <int QT>
__device__ __forceinline__ uint32_t f32_half(float f) {
    return QT == AITER_MLA_BF16 ? aiter_mla_f32_to_bf16(f) : aiter_mla_f32_to_f16(f);
}

// D += A B for one wave, the layout of v_mfma_f32_16x16x16: lane l holds A[l % 16][4 (l / 16)
// + i], B[4 (l / 16) + i][l % 16] and D[4 (l / 16) + i][l % 16]. Every thread of the block
// calls it equally often (the emulation meets at block barriers; one copy of it, not one per
// call site, which tripled the build).
#ifdef AITER_MLA_MFMA_NATIVE
#define AITER_MLA__WAVE_MMA __device__ __forceinline__
#else
#define AITER_MLA__WAVE_MMA __device__ __noinline__
#endif
template <int QT>
AITER_MLA__WAVE_MMA void wave_mma(Acc &d, Frag a, Frag b, WaveScratch *x) {
#ifdef AITER_MLA_MFMA_NATIVE
    static_assert(AITER_MLA_WARP_SIZE == kWave, "MFMA runs on 64-lane waves");
    (void)x;
    typedef float f32x4 __attribute__((ext_vector_type(4)));
    f32x4 c = {d.v[0], d.v[1], d.v[2], d.v[3]};
    if constexpr (QT == AITER_MLA_BF16) {
        typedef short bf16x4 __attribute__((ext_vector_type(4)));
        bf16x4 va, vb;
        memcpy(&va, &a, 8);
        memcpy(&vb, &b, 8);
        c = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(va, vb, c, 0, 0, 0);
    } else {
        typedef _Float16 f16x4 __attribute__((ext_vector_type(4)));
        f16x4 va, vb;
        memcpy(&va, &a, 8);
        memcpy(&vb, &b, 8);
        c = __builtin_amdgcn_mfma_f32_16x16x16f16(va, vb, c, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) d.v[i] = c[i];
#else
    const int t = threadIdx.x, lane = t % kWave, base = t - lane;
    x->a[t] = a;
    x->b[t] = b;
    __syncthreads();
    auto elem = [](const Frag &f, int k) { return half_f32<QT>((k < 2 ? f.lo : f.hi) >> (16 * (k & 1)) & 0xffffu); };
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int row = 4 * (lane / 16) + i, col = lane % 16;
        float s = d.v[i];
        for (int k = 0; k < 16; k++) s += elem(x->a[base + row + 16 * (k / 4)], k % 4) * elem(x->b[base + col + 16 * (k / 4)], k % 4);
        d.v[i] = s;
    }
    __syncthreads();
#endif
}

// Eight e4m3 values (ET, in two words) times scale, each rounded once to the 16-bit type QT
// (with the default scale of 1 exactly: e4m3 fits both types).
template <int ET, int QT>
__device__ __forceinline__ uint4 widen8(uint32_t lo, uint32_t hi, float scale = 1.0f) {
    uint32_t h[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t bytes = (k < 2 ? lo : hi) >> (16 * (k & 1));
        h[k] = f32_half<QT>(aiter_mla_fp8_to_f32((uint8_t)bytes, (aiter_mla_dtype)ET) * scale) |
               f32_half<QT>(aiter_mla_fp8_to_f32((uint8_t)(bytes >> 8), (aiter_mla_dtype)ET) * scale) << 16;
    }
    return make_uint4(h[0], h[1], h[2], h[3]);
}

// Eight dims of q from element `at` on as a fragment of the product type: 16-bit q as stored
// (16-byte loads), e4m3 q (QT) widened exactly to f16 (8-byte loads).
template <int QT>
__device__ __forceinline__ uint4 q_frag(const void *q, int64_t at) {
    if constexpr (is_e4m3(QT)) {
        const uint2 w = *reinterpret_cast<const uint2 *>(static_cast<const uint8_t *>(q) + at);
        return widen8<QT, AITER_MLA_F16>(w.x, w.y);
    } else {
        return *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(q) + at);
    }
}
// The product type of a q type: e4m3 q is widened to f16.
__host__ __device__ constexpr int product_type(int qt) {
    return is_e4m3(qt) ? (int)AITER_MLA_F16 : qt;
}

// A tile of kN rows as 16-byte chunks of their source bytes (SRC per row), thread tid taking
// chunks tid, tid + kThreads, ...: load_rows into registers (row_of(j): row j's bytes, NULL:
// zeros), store_rows into 16-bit rows of PITCH bytes (ET: the source type; e4m3 is widened
// exactly to QT).
template <int SRC>
struct Chunks {
    static constexpr int per_row = SRC / 16, count = kN * per_row, loads = (count + kThreads - 1) / kThreads;
};
template <int SRC, typename RowOf>
__device__ __forceinline__ void load_rows(uint4 (&buf)[Chunks<SRC>::loads], RowOf &&row_of, int tid) {
    using C = Chunks<SRC>;
#pragma unroll
    for (int i = 0; i < C::loads; i++) {
        const int c = tid + i * kThreads, j = c / C::per_row;
        if (C::count % kThreads == 0 || c < C::count) {
            const unsigned char *row = row_of(j);
            buf[i] = row ? reinterpret_cast<const uint4 *>(row)[c - j * C::per_row] : make_uint4(0u, 0u, 0u, 0u);
        }
    }
}
template <int SRC, int ET, int QT, int PITCH>
__device__ __forceinline__ void store_rows(unsigned char *dst, const uint4 (&buf)[Chunks<SRC>::loads], int tid) {
    using C = Chunks<SRC>;
    constexpr bool kWiden = is_e4m3(ET);
#pragma unroll
    for (int i = 0; i < C::loads; i++) {
        const int c = tid + i * kThreads, j = c / C::per_row, part = c - j * C::per_row;
        if (C::count % kThreads == 0 || c < C::count) {
            if constexpr (!kWiden) {
                *reinterpret_cast<uint4 *>(dst + j * PITCH + part * 16) = buf[i];
            } else { // 16 e4m3 values -> 16 of QT
                uint4 *out = reinterpret_cast<uint4 *>(dst + j * PITCH + part * 32);
                out[0] = widen8<ET, QT>(buf[i].x, buf[i].y);
                out[1] = widen8<ET, QT>(buf[i].z, buf[i].w);
            }
        }
    }
}

// A tile's keys as its copies need them: each key's row (NULL: absent) and, for V4's MODEL1
// pages, the row's 8 scale bytes and its e4m3 flavour (V4 lists may differ on gfx942).
struct TileKeys {
    const unsigned char *row[kN], *scales[kN];
    bool fnuz[kN];
};

// Rows of e4m3 values in scaled groups, then bf16 rope values: fp8_ds_mla (656 bytes: 512
// e4m3 in groups of 128, their 4 fp32 scales, 64 bf16) and V4's MODEL1 (576 bytes: 448 e4m3
// in groups of 64, 64 bf16; the UE8M0 scale bytes lie in the page's scale block). They land
// in 16-bit rows as store_rows does: each e4m3 value times its group's scale, rounded once to
// bf16 (as the warpgroup kernels widen them), the rope copied. load_scales loads each e4m3
// chunk's scale beside its load_rows, so that store_scaled_rows waits on no load of its own.
template <int KVT>
struct ScaledRow {
    static constexpr bool ds = is_ds_mla(KVT);
    static constexpr int e4m3_chunks = (ds ? kL : kV4Nope) / 16;          // 16 values each
    static constexpr int rope_chunk = rope_byte(KVT) / 16;               // ds_mla: after the scales
    static constexpr int chunks_per_scale = (ds ? 128 : 64) / 16;
    using C = Chunks<cache_row_bytes(KVT)>;
};
template <int KVT>
__device__ __forceinline__ void load_scales(float (&scale)[ScaledRow<KVT>::C::loads], const TileKeys &t, int tid) {
    using R = ScaledRow<KVT>;
    using C = typename R::C;
#pragma unroll
    for (int i = 0; i < C::loads; i++) {
        const int c = tid + i * kThreads, j = c / C::per_row, part = c - j * C::per_row, group = part / R::chunks_per_scale;
        if (c < C::count && part < R::e4m3_chunks) {
            const unsigned char *row = t.row[j];
            if constexpr (R::ds) scale[i] = row ? *reinterpret_cast<const float *>(row + kDsScales + 4 * group) : 0.0f;
            else scale[i] = row ? aiter_mla__ue8m0_to_f32(t.scales[j][group]) : 0.0f;
        }
    }
}
template <int KVT>
__device__ __forceinline__ void store_scaled_rows(unsigned char *dst, const uint4 (&buf)[ScaledRow<KVT>::C::loads],
                                                  const float (&scale)[ScaledRow<KVT>::C::loads], const TileKeys &t, int tid) {
    using R = ScaledRow<KVT>;
    using C = typename R::C;
    constexpr int kFn = AITER_MLA_FP8_E4M3FN, kFnuz = AITER_MLA_FP8_E4M3FNUZ;
#pragma unroll
    for (int i = 0; i < C::loads; i++) {
        const int c = tid + i * kThreads, j = c / C::per_row, part = c - j * C::per_row;
        if (c < C::count && part < R::e4m3_chunks) {
            uint4 *out = reinterpret_cast<uint4 *>(dst + j * kPitch + part * 32);
            const bool fnuz = R::ds ? KVT == kDsMlaFnuz : t.fnuz[j];
            auto widen = [&](uint32_t lo, uint32_t hi) {
                return fnuz ? widen8<kFnuz, AITER_MLA_BF16>(lo, hi, scale[i]) : widen8<kFn, AITER_MLA_BF16>(lo, hi, scale[i]);
            };
            out[0] = widen(buf[i].x, buf[i].y);
            out[1] = widen(buf[i].z, buf[i].w);
        } else if (c < C::count && part >= R::rope_chunk) {
            *reinterpret_cast<uint4 *>(dst + j * kPitch + R::e4m3_chunks * 32 + (part - R::rope_chunk) * 16) = buf[i];
        }
    }
}
// A piece's key tiles in turn: each lands in k_s as 16-bit rows of q's type QT (fp8,
// fp8_ds_mla and MODEL1 widened) while the next one's 16-byte loads go into registers; then
// body(cur, k0, nk) runs (keys k0 .. k0 + nk of the piece; keys_s[cur].row[j]: key j's row,
// NULL where absent) and the block meets before the next tile is stored.
template <int KVT, int QT, typename Body>
__device__ __forceinline__ void for_each_key_tile(const DecodeParams &p, const Piece &pc, unsigned char *k_s, TileKeys (&keys_s)[2],
                                                  int tid, Body &&body) {
    constexpr bool kScaled = is_ds_mla(KVT) || KVT == kV4Model1;
    const int64_t n = pc.n;
    uint4 buf[Chunks<cache_row_bytes(KVT)>::loads];
    float scale[Chunks<cache_row_bytes(KVT)>::loads]; // scaled rows: each e4m3 chunk's scale
    auto look_up = [&](TileKeys &t, int64_t j) { // threads tid < kN: key j of the piece
        const KeyRef k = key_ref<KVT>(p, pc, j, key_entry<KVT>(p, pc, j));
        t.row[tid] = k.row;
        if constexpr (KVT == kV4Model1) {
            t.scales[tid] = k.row ? k.scales + (k.kind & kKindOddScales ? 8 : 0) : nullptr;
            t.fnuz[tid] = (k.kind & kKindFnuz) != 0;
        }
    };
    auto load_tile = [&](const TileKeys &t) {
        load_rows<cache_row_bytes(KVT)>(buf, [&](int j) { return t.row[j]; }, tid);
        if constexpr (kScaled) load_scales<KVT>(scale, t, tid);
    };
    if (tid < kN) look_up(keys_s[0], tid);
    __syncthreads();
    if (n > 0) load_tile(keys_s[0]);
    int cur = 0;
    for (int64_t k0 = 0; k0 < n; k0 += kN, cur ^= 1) {
        if constexpr (kScaled) store_scaled_rows<KVT>(k_s, buf, scale, keys_s[cur], tid);
        else store_rows<cache_row_bytes(KVT), KVT, QT, kPitch>(k_s, buf, tid);
        if (tid < kN) look_up(keys_s[cur ^ 1], k0 + kN + tid);
        __syncthreads();
        if (k0 + kN < n) load_tile(keys_s[cur ^ 1]);
        body(cur, k0, (int)min((int64_t)kN, n - k0));
        __syncthreads(); // k_s and keys_s[cur] are refilled next
    }
}

// One row's online-softmax step over a key tile of 32 scores that lie two to a lane on 16
// consecutive lanes (log2 units, -inf where masked): e becomes the row's probabilities, m and
// l its running max and sum; returns the factor by which the row's O is rescaled.
__device__ __forceinline__ float softmax_step16(float (&e)[2], float &m, float &l) {
    float mx = fmaxf(m, fmaxf(e[0], e[1]));
#pragma unroll
    for (int off = 1; off < 16; off <<= 1) mx = fmaxf(mx, aiter_mla__shfl_xor(mx, off));
    const bool none = mx == neg_inf();
    const float alpha = none ? 1.0f : exp2f(m - mx), mu = none ? 0.0f : mx; // no key yet: e = 0 (a NaN score stays NaN)
    float sum = 0.0f;
#pragma unroll
    for (int t = 0; t < 2; t++) {
        e[t] = exp2f(e[t] - mu);
        sum += e[t];
    }
#pragma unroll
    for (int off = 1; off < 16; off <<= 1) sum += aiter_mla__shfl_xor(sum, off);
    l = l * alpha + sum;
    m = mx;
    return alpha;
}

// O = alpha O + P V for one wave over a tile of 32 keys: alpha[i] the rescale of the lane's O
// rows 4 (lane / 16) + i, P's 16 rows in QT (pw, rows of kPPitch bytes), VT column tiles of 16
// of V (v: column 0 of key 0, rows of VP bytes, tile j 32 bytes on). A column tile is
// rescaled just before its products, so that only its 4 values leave the accumulators at a
// time (a rescale of all of O at once kept 128 values a lane live in the 64-row decode, which
// then spilled). B's fragment gathers a column's 4 keys from 4 rows.
template <int QT, int VT, int VP>
__device__ __forceinline__ void wave_pv(Acc (&o)[VT], const float (&alpha)[4], const unsigned char *pw, const unsigned char *v,
                                        WaveScratch *x) {
    const int lane = threadIdx.x % kWave, g = lane / 16, c16 = lane % 16;
    uint2 pa[kN / 16];
#pragma unroll
    for (int ks = 0; ks < kN / 16; ks++) pa[ks] = *reinterpret_cast<const uint2 *>(pw + c16 * kPPitch + (16 * ks + 4 * g) * 2);
#pragma unroll
    for (int j = 0; j < VT; j++) {
#pragma unroll
        for (int i = 0; i < 4; i++) o[j].v[i] *= alpha[i];
#pragma unroll
        for (int ks = 0; ks < kN / 16; ks++) {
            const unsigned char *vj = v + (16 * ks + 4 * g) * VP + c16 * 2 + j * 32;
            const uint32_t b0 = *reinterpret_cast<const uint16_t *>(vj), b1 = *reinterpret_cast<const uint16_t *>(vj + VP),
                           b2 = *reinterpret_cast<const uint16_t *>(vj + 2 * VP), b3 = *reinterpret_cast<const uint16_t *>(vj + 3 * VP);
            wave_mma<QT>(o[j], Frag{pa[ks].x, pa[ks].y}, Frag{b0 | b1 << 16, b2 | b3 << 16}, x);
        }
    }
}

// One key tile for the 16 rows of a wave (rows 4 (lane / 16) + i of its S and O fragments):
// S = Q K^T over the 32-dim blocks of Q's fragments qf (K rows of KP bytes), the online
// softmax in registers (valid(i, j): key j of the tile counts for row 4 (lane / 16) + i;
// scale: into log2 units; a row's 32 scores lie on 16 lanes), P through the wave's rows pw in
// shared memory into the A layout, O += P V over VT column tiles of 16 (V rows of VP bytes).
// A lane's O rows are its S rows, so it rescales them itself. Meets once at a block barrier.
template <int QT, int QB, int VT, int KP, int VP, typename Valid>
__device__ __forceinline__ void wave_rows_tile(const uint4 (&qf)[QB], const unsigned char *k_s, const unsigned char *v_s, unsigned char *pw,
                                               float scale, Valid &&valid, float (&m)[4], float (&l)[4], Acc (&o)[VT], WaveScratch *x) {
    const int lane = threadIdx.x % kWave, g = lane / 16, c16 = lane % 16;
    Acc sc[2] = {}; // keys 16 t + c16
#pragma unroll
    for (int b = 0; b < QB; b++)
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const uint4 kf = *reinterpret_cast<const uint4 *>(k_s + (16 * t + c16) * KP + (32 * b + 8 * g) * 2);
            wave_mma<QT>(sc[t], Frag{qf[b].x, qf[b].y}, Frag{kf.x, kf.y}, x);
            wave_mma<QT>(sc[t], Frag{qf[b].z, qf[b].w}, Frag{kf.z, kf.w}, x);
        }
    float alpha[4];
#pragma unroll
    for (int i = 0; i < 4; i++) { // online softmax (log2 domain) of row 4 g + i
        float e[2];
#pragma unroll
        for (int t = 0; t < 2; t++) e[t] = valid(i, 16 * t + c16) ? sc[t].v[i] * scale : neg_inf();
        alpha[i] = softmax_step16(e, m[i], l[i]);
#pragma unroll
        for (int t = 0; t < 2; t++) *reinterpret_cast<uint16_t *>(pw + (4 * g + i) * kPPitch + (16 * t + c16) * 2) = (uint16_t)f32_half<QT>(e[t]);
    }
    __syncthreads(); // P in the A layout: other lanes' stores
    wave_pv<QT, VT, VP>(o, alpha, pw, v_s, x);
}

// One value of a decode's o (bf16, f16 or f32, as the wrapper allows), without the fp8 cases
// of aiter_mla_store_f32: a small body, so that loops of stores over O's fragments unroll.
__device__ __forceinline__ void store_o(void *o, int64_t i, aiter_mla_dtype t, float x) {
    if (t == AITER_MLA_F32) static_cast<float *>(o)[i] = x;
    else static_cast<uint16_t *>(o)[i] = t == AITER_MLA_BF16 ? aiter_mla_f32_to_bf16(x) : aiter_mla_f32_to_f16(x);
}

// M = 16 rows a pass (query tiles of up to 16 rows): the waves split S by key tile and half
// of the dims and O by latent dims, so that all four work on few rows. M = 64 (more rows):
// each wave takes 16 rows through wave_rows_tile, and a tile's keys serve all 64.
template <int KVT, int QT, int M>
__global__ void __launch_bounds__(kThreads) decode_mfma_kernel(DecodeParams p) {
    __shared__ __align__(16) unsigned char k_s[kN * kPitch]; // the key tile, 16-bit rows
    __shared__ TileKeys keys_s[2];                            // this tile's keys, the next tile's
    __shared__ __align__(16) unsigned char p_s[M == 16 ? 1 : kWaves][16 * kPPitch]; // P in q's type (M = 64: a wave's)
    __shared__ float s_s[M == 16 ? 2 : 1][M == 16 ? kM : 1][kN + 1]; // M = 16: S over each half of the dims
    __shared__ float alpha_s[kM], inv_s[kM];
    __shared__ long long at_s[kM];
    WaveScratch *const x = wave_scratch();
    constexpr int kQK = qk_dims(KVT), kPairs = kQK / 64; // dims of q . k; 32-dim blocks in each half of them
    constexpr int PT = product_type(QT);                  // the products' 16-bit type
    const aiter_mla_decode_args &a = p.a;
    const int tid = threadIdx.x, wave = tid / kWave, lane = tid % kWave, g = lane / 16, c16 = lane % 16;
    for_each_piece(p, [&](const Piece &pc) AITER_MLA__INLINE_BODY {
        for (int r0 = pc.rb; r0 < pc.re; r0 += M) {
            const int nr = min(M, pc.re - r0);
            if constexpr (M == 64) {
                // Q fragments: row 16 wave + c16, dims 32 b + 8 g .. + 8 of each block b (two k-steps)
                const int qr = 16 * wave + c16;
                uint4 qf[kQK / 32];
                {
                    const int64_t q0 = qr < nr ? row_q_offset(a, pc, r0 + qr) : 0;
#pragma unroll
                    for (int b = 0; b < kQK / 32; b++) qf[b] = qr < nr ? q_frag<QT>(a.q, q0 + 32 * b + 8 * g) : make_uint4(0u, 0u, 0u, 0u);
                }
                long long lim[4];
                float m[4], l[4];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int r = 16 * wave + 4 * g + i;
                    lim[i] = r < nr ? row_key_limit(pc, r0 + r, a.num_heads) : -1;
                    m[i] = neg_inf();
                    l[i] = 0.0f;
                }
                Acc o[kL / 16] = {};
                for_each_key_tile<KVT, PT>(p, pc, k_s, keys_s, tid, [&](int cur, int64_t k0, int nk) AITER_MLA__INLINE_BODY {
                    wave_rows_tile<PT, kQK / 32, kL / 16, kPitch, kPitch>(
                        qf, k_s, k_s, p_s[wave], p.score_scale,
                        [&](int i, int j) { return keys_s[cur].row[j] && j <= tile_key_limit(pc, lim[i], k0, nk); }, m, l, o, x);
                });
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int r = 16 * wave + 4 * g + i;
                    if (r < nr) {
                        float inv;
                        const long long at = finish_row(p, pc, r0 + r, m[i], l[i], c16 == 0, &inv);
                        // a small body, so that the 128 stores unroll: O indexed by a loop
                        // counter would keep all of it in scratch memory
#pragma unroll
                        for (int j = 0; j < kL / 16; j++) {
                            if (pc.loc < 0) store_o(a.o, at + 16 * j + c16, a.o_dtype, o[j].v[i] * inv);
                            else p.part_o[at + 16 * j + c16] = o[j].v[i] * inv;
                        }
                    }
                }
            } else {
                const int half = wave >> 1, key16 = (wave & 1) * 16;
                const int sr = tid / 16, sk = 2 * (tid % 16); // softmax: row sr, keys sk and sk + 1
                // Q fragments: row c16, dims 32 b + 8 g .. + 8 of each block b of this wave's half;
                // the first four serve one k-step, the rest the next (q . k in any order of dims)
                uint4 qf[kPairs];
                {
                    const int64_t q0 = c16 < nr ? row_q_offset(a, pc, r0 + c16) : 0;
#pragma unroll
                    for (int i = 0; i < kPairs; i++)
                        qf[i] = c16 < nr ? q_frag<QT>(a.q, q0 + (half * kPairs + i) * 32 + 8 * g) : make_uint4(0u, 0u, 0u, 0u);
                }
                const long long lim = sr < nr ? row_key_limit(pc, r0 + sr, a.num_heads) : -1;
                float m = neg_inf(), l = 0.0f;
                Acc o[kDimsPerWave / 16] = {};
                for_each_key_tile<KVT, PT>(p, pc, k_s, keys_s, tid, [&](int cur, int64_t k0, int nk) AITER_MLA__INLINE_BODY {
                    { // S of keys key16 .. + 16 over this wave's half of the dims
                        Acc s = {};
                        const unsigned char *krow = k_s + (key16 + c16) * kPitch;
#pragma unroll
                        for (int i = 0; i < kPairs; i++) {
                            const uint4 kb = *reinterpret_cast<const uint4 *>(krow + ((half * kPairs + i) * 32 + 8 * g) * 2);
                            wave_mma<PT>(s, Frag{qf[i].x, qf[i].y}, Frag{kb.x, kb.y}, x);
                            wave_mma<PT>(s, Frag{qf[i].z, qf[i].w}, Frag{kb.z, kb.w}, x);
                        }
#pragma unroll
                        for (int i = 0; i < 4; i++) s_s[half][4 * g + i][key16 + c16] = s.v[i];
                    }
                    __syncthreads();
                    { // online softmax (log2 domain): 16 threads a row
                        float e[2];
#pragma unroll
                        for (int j = 0; j < 2; j++) {
                            const int c = sk + j;
                            const bool ok = keys_s[cur].row[c] && c <= tile_key_limit(pc, lim, k0, nk);
                            e[j] = ok ? (s_s[0][sr][c] + s_s[1][sr][c]) * p.score_scale : neg_inf();
                        }
                        const float alpha = softmax_step16(e, m, l);
                        *reinterpret_cast<uint32_t *>(p_s[0] + sr * kPPitch + sk * 2) = f32_half<PT>(e[0]) | f32_half<PT>(e[1]) << 16;
                        if (sk == 0) alpha_s[sr] = alpha;
                    }
                    __syncthreads();
                    { // O = alpha O + P V: V is the first 512 dims of the tile's rows
                        float al[4];
#pragma unroll
                        for (int i = 0; i < 4; i++) al[i] = alpha_s[4 * g + i];
                        wave_pv<PT, kDimsPerWave / 16, kPitch>(o, al, p_s[0], k_s + wave * kDimsPerWave * 2, x);
                    }
                });
                if (sk == 0 && sr < nr) {
                    float inv;
                    at_s[sr] = finish_row(p, pc, r0 + sr, m, l, true, &inv);
                    inv_s[sr] = inv;
                }
                __syncthreads();
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const int row = 4 * g + i;
                    if (row < nr) {
                        const float inv = inv_s[row];
                        const long long at = at_s[row];
#pragma unroll
                        for (int j = 0; j < kDimsPerWave / 16; j++) {
                            const int d = wave * kDimsPerWave + j * 16 + c16;
                            if (pc.loc < 0) store_o(a.o, at + d, a.o_dtype, o[j].v[i] * inv);
                            else p.part_o[at + d] = o[j].v[i] * inv;
                        }
                    }
                }
            }
            __syncthreads(); // inv_s, at_s and keys_s are refilled by the next pass
        }
    });
}

} // namespace mfma
#endif

// ==== dense decode: tensor-core path (NVIDIA sm_90, mma.sync m16n8k16 bf16, cp.async) =======
// Same plan, same pieces, same output conventions as the portable path. Per pass a block
// takes up to M (token, head) rows of a work item (Q in shared memory) and streams the
// piece's keys in tiles of 32 through a ring of 16-byte cp.async copies (every thread of a
// group copies a share of each tile; absent keys zero-filled by the copies), as deep as
// shared memory allows. Per tile: S = Q K^T (mma.sync m16n8k16), an online softmax (up to
// 16 threads per row), O += P V. M = 64: one group of 16 warps, warp w owns latent dims
// [32w, 32w + 32). M = 16 (the memory-bound shapes): two groups of 8 warps stream
// alternate key tiles with their own rings and merge at the end of the pass; warp w of a
// group owns [64w, 64w + 64). fp8 caches land in a byte ring and are widened exactly
// (e4m3 fits both): per-tensor e4m3fn to f16 by the hardware converter, the products then
// taken in f16 (see kF16); e4m3fnuz (a 256-entry table), fp8_ds_mla and MODEL1 to bf16.
// Rows leave through shared memory in coalesced stores.
#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__) && !defined(AITER_MLA_MFMA_EMULATE)
#define AITER_MLA_HAS_MMA 1
namespace mma {

// A pass has stored its R rows of a split piece (o and lse; every storing thread past a barrier
// since): one thread makes them visible and adds R to the piece's counter in the plan, at the
// piece's first partial row. The reduce merges a tile once every piece has counted all of its
// rows, while the decode's other blocks still run (reduce_kernel), and sets the counters back.
// Used by the mma kernels and the warpgroup one (NVIDIA only). The fence waits for the stores
// (about a microsecond), so the thread should have slack. Only for counted launches
// (p.arrivals) and split pieces (pc.loc >= 0).
__device__ __forceinline__ void count_stored_rows(const DecodeParams &p, int loc, int rows) {
    __threadfence();
    atomicAdd(p.arrivals + loc, rows);
}
__device__ __forceinline__ void count_stored_rows(const DecodeParams &p, const Piece &pc, int rows) { count_stored_rows(p, pc.loc, rows); }

// Shared memory a block may take, the three layouts of the mma.sync decode: Hopper's (and
// B200's: 227 KB), Ampere's (sm_80, sm_87: 163 KB) and that of the GPUs with 99 KB a block
// (sm_86, sm_89, sm_120: RTX 30/40/50, A10, A40, L4, L40). Hopper's runs 16-row passes in two
// groups of 8 warps; the others run every pass with 16 rows in one group of 16 warps, and the
// 99 KB one has two ring slots, S in two k-parts and, for fp8_ds_mla, the rope left in the ring
// (Smem::small).
constexpr int kSmemLimit = 227 * 1024, kSmemAmpere = 163 * 1024, kSmemSmall = 99 * 1024;
// Whether device pass `arch` (its __CUDA_ARCH__ / 10) compiles the layout for `smem` bytes a
// block: each pass the layouts of the devices that run it (sm_80 code runs on sm_80 to sm_89;
// sm_90 and sm_100 devices have 227 KB, sm_120 ones 99 KB). A build for sm_80 and sm_90a runs
// each pass's own instances; the launch takes the largest layout of the pass its device runs
// (image_arch) that the device's shared memory holds (mma_smem).
__host__ __device__ constexpr bool layout_in_pass(int smem, int arch) {
    return smem == kSmemLimit    ? arch >= 90 && arch < 120
           : smem == kSmemAmpere ? arch >= 80 && arch < 90
           : smem == kSmemSmall  ? (arch >= 80 && arch < 90) || arch >= 120
                                 : false;
}

constexpr int kN = 32, kThreads = 512, kWarps = kThreads / 32;
constexpr int kRowB = kD * 2 + 16;  // bf16 row + 16 B: ldmatrix's 8 rows hit 8 distinct bank groups
constexpr int kPRowB = kN * 2 + 16; // P rows, padded the same way
constexpr int kSRow = kN + 4;       // fp32 S rows, padded so fragment stores spread over banks
constexpr int kStageRow = kL + 8;   // fp32 rows of o staged for the stores, padded the same way
// How a widening loop picks the fp8 flavour: fixed by the format, or per key (V4 lists of both).
constexpr int kFnuzNever = 0, kFnuzAlways = 1, kFnuzByKind = 2;
template <int R>
struct FnuzRule {
    static constexpr int value = R;
};
// Whether a V4 launch's lists hold e4m3fnuz rows (then each key's kind picks its converter).
__device__ __forceinline__ bool v4_lists_fnuz(const DecodeParams &p) {
    return p.v4_keys[0].dtype == AITER_MLA_FP8_E4M3FNUZ || p.v4_keys[1].dtype == AITER_MLA_FP8_E4M3FNUZ;
}
// Calls widen(rule) with the FnuzRule of format KVT: e4m3fnuz formats always; V4 lists per key
// when v4_fnuz (v4_lists_fnuz, taken once per launch, outside the loops: a per-key choice puts
// a branch around every 8 values, which keeps their conversions from overlapping; always per
// key, the 64-row loader took 7265 us on V4P-h64 and 87.5 on V4D-h64-k512-b128, this way 5055
// and 68.1); never otherwise.
template <int KVT, typename F>
__device__ __forceinline__ void with_fnuz_rule(bool v4_fnuz, F &&widen) {
    if constexpr (KVT == AITER_MLA_FP8_E4M3FNUZ || KVT == kDsMlaFnuz) widen(FnuzRule<kFnuzAlways>{});
    else if (is_v4(KVT) && v4_fnuz) widen(FnuzRule<kFnuzByKind>{});
    else widen(FnuzRule<kFnuzNever>{});
}

// Shared-memory plan of one variant. M rows per pass: 16 for the memory-bound shapes, 64
// otherwise. The 16-row variant runs two independent groups of 8 warps, each streaming
// every other key tile with its own ring, barriers and softmax state, merged at the end
// of the pass: a group's barriers then stall only its own 8 warps while the other computes.
// The 64-row variant is one group of 16 warps (its accumulators would not fit twice).
// Ring row bytes of a cache format: its row for the byte rings (widened afterwards; MODEL1:
// the row, then its 8 scale bytes), 0 for bf16 rows (copied straight into padded rows).
__host__ __device__ constexpr int ring_pitch(int kvt) {
    return kvt == AITER_MLA_BF16 || kvt == kV4Bf16 ? 0 : kvt == kV4Model1 ? AITER_MLA_V4_ROW_BYTES + 16 : cache_row_bytes(kvt);
}

// kLimit: the shared memory a block may take; two groups only where Hopper's 227 KB hold them.
template <int SRC, int M, int kLimit = kSmemLimit> // SRC: ring row bytes of a byte-ring format (fp8, ds_mla), 0 for bf16
struct Smem { // byte offsets into the dynamic shared memory
    static constexpr int groups = M == 16 && kLimit >= kSmemLimit ? 2 : 1;
    static constexpr int group_warps = kWarps / groups;
    static constexpr int tile = kN * kRowB;                       // one bf16 key tile
    static constexpr int stage = SRC ? kN * SRC : tile;           // one ring slot
    // The 99 KB layout (one group, two ring slots) takes S in fewer k-parts and, for fp8_ds_mla,
    // widens only the 512 latent dims (S reads the rope from the ring slot): 9,216 and 4,096
    // bytes that its 101,376 would otherwise lack. Those GPUs' memory, not S's products, bounds them.
    static constexpr bool small = kLimit < kSmemAmpere;
    // k-parts of S in passes of one m-tile: paired units 4 (8 warps busy), ds_mla's units
    // group_warps / 4 (every warp); 2 in the 99 KB layout (4 and 8 of its 16 warps busy)
    static constexpr int kparts_mt1 = small ? 2 : SRC == kDsRow ? group_warps / 4 : 4;
    // S rows x k-parts: 16 x kparts_mt1 for a pass of one m-tile; ds_mla's 64-row passes 64, paired tiles' 128
    static constexpr int s_rows = M == 16 ? 16 * kparts_mt1 : SRC == kDsRow ? 64 : 128;
    static constexpr bool rope_in_ring = SRC == kDsRow && small;
    static constexpr int wide_row = rope_in_ring ? kL * 2 + 16 : kRowB; // a widened row (padded as kRowB)
    static constexpr int wide_tile = SRC ? kN * wide_row : 0;    // the widened tile of a byte ring
    static constexpr int group_fixed = wide_tile + s_rows * kSRow * 4 + M * kPRowB + 3 * M * 4;
    static constexpr int shared_fixed = M * kRowB + M * 8 + 512;
    static constexpr int per_stage = stage + kN;                   // slot, valid flags
    static constexpr int fit = (kLimit - shared_fixed - groups * group_fixed) / (groups * per_stage);
    static constexpr int cap = fit > 8 ? 8 : fit;
    // bytes of a group with st ring slots (the layout below, roundings included)
    static constexpr int group_bytes_for(int st) { return (st * stage + group_fixed + st * kN + 127) / 128 * 128; }
    static constexpr int stages = shared_fixed + groups * group_bytes_for(cap) <= kLimit ? cap : cap - 1; // ring slots per group
    // shared by the groups
    static constexpr int q = 0;
    static constexpr int lim = q + M * kRowB;                      // int64 [M]
    static constexpr int lut = lim + M * 8;                        // uint16 [256]
    static constexpr int group0 = lut + 512;
    // per group, at group0 + g * group_bytes
    static constexpr int ring = 0;
    static constexpr int wide = ring + stages * stage;             // fp8: the widened tile
    static constexpr int s = wide + wide_tile;
    static constexpr int p = s + s_rows * kSRow * 4;
    static constexpr int m = p + M * kPRowB;                       // float m, l, alpha [M]
    static constexpr int valid = m + 3 * M * 4;                    // int8 [stages][kN]
    static constexpr int group_bytes = (valid + stages * kN + 127) / 128 * 128;
    static constexpr int total = group0 + groups * group_bytes;
    static_assert(stages >= 2 && total <= kLimit, "shared memory plan does not fit");
    static_assert(groups == 1 || stages * stage >= group_warps * 32 * 4 * (kL / group_warps / 8) * 4,
                  "the merge of the groups reuses a ring");
    static_assert(stages * stage >= 16 * kStageRow * 4, "the staged o rows reuse a ring");
};
// Whether this device pass leaves the body of decode instance (kvt, m, smem) out: the layouts
// of other passes (layout_in_pass), and in an sm_90a pass of an AITER_MLA_WGMMA build, whose
// launches take the warpgroup kernel for every 64-row pass and the bulk-copy kernel (f8::) for
// every 16-row e4m3fn one, those instances (compiled only for the build's other targets). fp8
// keys widen by the hardware converter from sm_89 (sm_80 to sm_87: by arithmetic, exactly the
// same).
__host__ __device__ constexpr bool left_out_here(int kvt, int m, int smem) {
#if defined(__CUDA_ARCH__)
    if (!layout_in_pass(smem, __CUDA_ARCH__ / 10)) return true;
#endif
#if defined(AITER_MLA_WGMMA) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    if (m != 16 || kvt == AITER_MLA_FP8_E4M3FN) return true;
#endif
    return (void)kvt, (void)m, (void)smem, false;
}

__device__ __forceinline__ uint32_t smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
// 16-byte asynchronous copies (sm_80) into shared memory, completing per thread by commit group
// (cp_async_wait) or on an mbarrier (wg::cp_async_arrive_noinc).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes) { // zero-fills the rest
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// The L2 cache policy (sm_80) of a pass's key copies: evict_first where the pass is its keys'
// only reader (a dense decode tile of all its request's tokens, in one pass, in one block; a
// sparse or V4 token's keys, all its heads in one pass, where the caller says no key serves two
// tokens: keys_read_once), so that the keys streaming through the L2 go before the lines of every
// other access (q, o, the partials, the plan, the page tables); evict_normal elsewhere (sparse
// and V4 tokens may share keys with any other token, which the L2 should keep for them; row_split
// blocks and a token's row groups share theirs).
// On the 16-row decodes' key copies (16-byte cp.async, bulk copies) against no policy, H100
// 80GB HBM3, alternately in one call, us: D1 227.5-228.1 -> 219.6-220.0 (89.0 -> 92.3 % of
// copy), D1-p1 223.5-223.6 -> 214.2-215.6, D2 435.7-437.0 -> 428.9-430.4, D2-p1 415.8-416.6 ->
// 407.4-408.4, D1-fp8 125.7-126.9 -> 118.5-119.4, D1-fp8q 132.0-133.2 -> 120.6-120.7, D1-fp8-p1
// 137.2-138.3 -> 129.8-130.6, D2-fp8 224.0-225.2 -> 216.0, D5 within its spread. `.L2::256B`
// on the bf16 copies instead: D1 226 us, D1-p1 228, D2-p1 416 -> 426 (not taken). With
// keys_read_once set (the bench's V4 decode rows), against the normal policy, H100, two runs
// each, alternately in one call: V4D-h16-k512-b4 16.0 -> 15.6-15.7 us, -b32 23.6-23.7 -> 23.0,
// -b128 34.5-34.6 -> 33.4, -b512 119.1-119.2 both, V4D-h16-k1024-b128 50.6-50.7 -> 49.7.
// docs/PERFORMANCE.md, "The 16-row decodes' key rows under an evict-first L2 policy" and
// "keys_read_once".
// L2 cache policies (sm_80) for `.L2::cache_hint` operands, every line under one priority.
__device__ __forceinline__ uint64_t l2_evict_first() {
    uint64_t p;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
__device__ __forceinline__ uint64_t l2_evict_normal() {
    uint64_t p;
    asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
__device__ __forceinline__ uint64_t key_l2_policy(const DecodeParams &p, const Piece &pc, int pass_rows) {
    const bool one_pass = pc.re - pc.rb <= pass_rows;
    const bool only_reader = p.sparse ? p.keys_read_once && pc.rb == 0 && pc.re == p.a.num_heads && one_pass
                                      : !p.row_split && pc.qe - pc.qs == pc.q_len && one_pass;
    const uint64_t first = l2_evict_first(), normal = l2_evict_normal();
    return only_reader ? first : normal;
}
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes, uint64_t l2_policy) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src), "r"(src_bytes),
                 "l"(l2_policy)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Named barrier ID of N threads (a multiple of 32): wait for all of them, or arrive without
// waiting. Not .aligned (bar.sync and bar.arrive are): the threads come to them from code
// whose lanes diverge (per-row work, loops over a thread's share, mbarrier spins), and an
// aligned barrier that a diverged warp reaches is undefined (compute-sanitizer's synccheck
// reports it).
template <int ID, int N>
__device__ __forceinline__ void named_sync() { asm volatile("barrier.sync %0, %1;\n" ::"n"(ID), "n"(N) : "memory"); }
template <int ID, int N>
__device__ __forceinline__ void named_arrive() { asm volatile("barrier.arrive %0, %1;\n" ::"n"(ID), "n"(N) : "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t addr, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(uint32_t addr, uint32_t &r0, uint32_t &r1) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(addr));
}
__device__ __forceinline__ float fast_exp2(float x) { // ex2.approx: exp2(-inf) = +0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
// One row's softmax states from two groups of warps (each: m, in log2 units, the max its
// exponentials were taken against; l, their sum) as one. The 16-row kernels' finish.
struct MergedStates {
    float m;      // the larger m (-inf: neither group saw a key)
    float mu;     // m, or 0 where it is -inf (every exponential is then 0)
    float f0, f1; // each group's factor 2^(m_g - mu): 0 for a group without keys
    float l;      // l0 f0 + l1 f1
};
__device__ __forceinline__ MergedStates merge_states(float m0, float l0, float m1, float l1) {
    MergedStates s;
    s.m = fmaxf(m0, m1);
    s.mu = s.m == neg_inf() ? 0.0f : s.m;
    s.f0 = fast_exp2(m0 - s.mu);
    s.f1 = fast_exp2(m1 - s.mu);
    s.l = l0 * s.f0 + l1 * s.f1;
    return s;
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) { // round to nearest even
    uint32_t d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
    uint32_t d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
// Two OCP e4m3 values (low byte first) as floats, or as two bf16, exactly (NaN stays NaN): by
// the hardware converter from sm_89 (Ada has it), by arithmetic before.
__device__ __forceinline__ float2 e4m3x2_to_f32x2(uint16_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(v));
    return make_float2(__half2float(__ushort_as_half((unsigned short)(h2 & 0xffffu))), __half2float(__ushort_as_half((unsigned short)(h2 >> 16))));
#else
    return make_float2(aiter_mla_fp8_to_f32((uint8_t)v, AITER_MLA_FP8_E4M3FN), aiter_mla_fp8_to_f32((uint8_t)(v >> 8), AITER_MLA_FP8_E4M3FN));
#endif
}
// Two OCP e4m3 values (low byte first) as two f16, exactly: e4m3 fits f16.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint16_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h2) : "h"(v));
    return h2;
#else
    const float2 f = e4m3x2_to_f32x2(v);
    return (uint32_t)__half_as_ushort(__float2half_rn(f.x)) | (uint32_t)__half_as_ushort(__float2half_rn(f.y)) << 16;
#endif
}
__device__ __forceinline__ uint4 e4m3x8_to_f16x8(uint2 v8) {
    return make_uint4(e4m3x2_to_f16x2((uint16_t)v8.x), e4m3x2_to_f16x2((uint16_t)(v8.x >> 16)), e4m3x2_to_f16x2((uint16_t)v8.y),
                      e4m3x2_to_f16x2((uint16_t)(v8.y >> 16)));
}
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint16_t v) {
    const float2 f = e4m3x2_to_f32x2(v);
    return pack_bf16x2(f.x, f.y);
}
__device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) { // exact for powers of two b
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u)); // + (-0): keeps the sign of 0
    return d;
}
// Eight e4m3 values (low byte first) to eight bf16, exactly: the hardware converter for
// e4m3fn; for e4m3fnuz, which has none, the table lut (bf16 of each code) or, without one,
// the header's converter. One branch for the eight (one per pair put a branch on every pair).
__device__ __forceinline__ uint4 e4m3x8_to_bf16x8(uint2 v8, bool fnuz, const uint16_t *lut) {
    uint32_t w[4];
    auto pair = [&](int i) { return (uint16_t)((i < 2 ? v8.x : v8.y) >> ((i & 1) * 16)); };
    if (!fnuz) {
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = e4m3x2_to_bf16x2(pair(i));
    } else if (lut) {
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = lut[pair(i) & 255] | (uint32_t)lut[pair(i) >> 8] << 16;
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++)
            w[i] = pack_bf16x2(aiter_mla_fp8_to_f32((uint8_t)pair(i), AITER_MLA_FP8_E4M3FNUZ),
                               aiter_mla_fp8_to_f32((uint8_t)(pair(i) >> 8), AITER_MLA_FP8_E4M3FNUZ));
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}
__device__ __forceinline__ void store16_shared(uint32_t dst, uint4 v) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
// Whether a decode over format kvt may have an e4m3 q: only over a per-tensor fp8 cache of
// q's flavour (the header refuses other pairs).
__host__ __device__ constexpr bool takes_fp8_q(int kvt) { return is_e4m3(kvt); }
// Query rows r0 .. r0 + rows of a pass (kDq values each, as bf16; zeros past R) into shared
// memory, threads tid, tid + threads, ... taking 16-byte chunks; dst(r, chunk) is a chunk's
// shared address. A bf16 q goes by cp.async (in the caller's commit group); an e4m3 q (8-byte
// rows, widened exactly to bf16), where the instance may meet one (kQ8: takes_fp8_q), by
// plain loads and stores, which the callers' publication of Q covers as well: a block barrier
// (decode_mma_kernel), or a proxy fence and an mbarrier arrival (decode_wgmma_kernel's
// loader; its split scheme, which takes no fence, serves only bf16 rows). Instances without
// kQ8 keep the cp.async loop alone: the branch cost D2-fp8 4 % where it was not needed.
// kBatch > 1 (the warpgroup kernel's loader, 4): an e4m3 q's loads go kBatch at a time
// before their stores, whose memory clobber would hold each load until the store before:
// D3-fp8q 527 -> 496 us (H200). The 16-row kernel keeps one at a time: the batched loop made
// its fp8 instances spill (D1-fp8 164 -> 172 us, bf16 q) and gained nothing there.
template <int kDq, bool kQ8, int kBatch, typename Dst>
__device__ __forceinline__ void copy_q_rows(const aiter_mla_decode_args &a, const Piece &pc, int r0, int R, int rows, int tid,
                                            int threads, Dst dst) {
    const bool fp8 = kQ8 && is_e4m3(a.q_dtype);
    auto load8 = [&](int r, int part) {
        return r < R ? *reinterpret_cast<const uint2 *>(static_cast<const uint8_t *>(a.q) + row_q_offset(a, pc, r0 + r) + part * 8)
                     : make_uint2(0u, 0u);
    };
    auto widen_store = [&](int r, int part, uint2 v8) { store16_shared(dst(r, part), e4m3x8_to_bf16x8(v8, a.q_dtype == AITER_MLA_FP8_E4M3FNUZ, nullptr)); };
    const int chunks = rows * (kDq / 8);
    if constexpr (kBatch > 1) {
        if (fp8) {
            for (int c0 = tid; c0 < chunks; c0 += kBatch * threads) {
                uint2 v8[kBatch];
#pragma unroll
                for (int j = 0; j < kBatch; j++) {
                    const int c = c0 + j * threads, r = c / (kDq / 8);
                    v8[j] = c < chunks ? load8(r, c - r * (kDq / 8)) : make_uint2(0u, 0u);
                }
#pragma unroll
                for (int j = 0; j < kBatch; j++) {
                    const int c = c0 + j * threads, r = c / (kDq / 8);
                    if (c < chunks) widen_store(r, c - r * (kDq / 8), v8[j]);
                }
            }
            return;
        }
    }
    for (int c = tid; c < chunks; c += threads) {
        const int r = c / (kDq / 8), part = c - r * (kDq / 8);
        if (fp8) {
            widen_store(r, part, load8(r, part));
        } else {
            const void *src = r < R ? static_cast<const uint16_t *>(a.q) + row_q_offset(a, pc, r0 + r) + part * 8 : a.q;
            cp_async16(dst(r, part), src, r < R ? 16 : 0);
        }
    }
}
// Eight e4m3 values (low byte first) to eight f16 (F16: the products run in f16) or bf16,
// exactly; fnuz and lut as for e4m3x8_to_bf16x8 (the table holds bf16, so f16 goes without).
template <bool F16>
__device__ __forceinline__ uint4 e4m3x8_to_16x8(uint2 v8, bool fnuz, const uint16_t *lut) {
    if constexpr (F16) {
        if (!fnuz) return e4m3x8_to_f16x8(v8);
        uint32_t w[2] = {v8.x, v8.y}, o[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t pair = w[i >> 1] >> (i & 1) * 16;
            o[i] = pack_f16x2(aiter_mla_fp8_to_f32((uint8_t)pair, AITER_MLA_FP8_E4M3FNUZ),
                              aiter_mla_fp8_to_f32((uint8_t)(pair >> 8), AITER_MLA_FP8_E4M3FNUZ));
        }
        return make_uint4(o[0], o[1], o[2], o[3]);
    } else {
        return e4m3x8_to_bf16x8(v8, fnuz, lut);
    }
}
#ifdef AITER_MLA_WGMMA // only the warpgroup kernels' loader widens this way
// Eight e4m3 values (low byte first) times an fp32 scale, each product rounded once to bf16
// (fp8_ds_mla's group scales), with the converters above. The same as widening, then
// scale_bf16x2 (the same rounding), in fewer instructions: SD1 ~4 % faster measured.
__device__ __forceinline__ uint4 e4m3x8_to_bf16x8_times(uint2 v8, bool fnuz, const uint16_t *lut, float s) {
    uint32_t w[4];
    auto pair = [&](int i) { return (uint16_t)((i < 2 ? v8.x : v8.y) >> ((i & 1) * 16)); };
    auto fnuz_f32 = [&](uint8_t b) { return lut ? __uint_as_float((uint32_t)lut[b] << 16) : aiter_mla_fp8_to_f32(b, AITER_MLA_FP8_E4M3FNUZ); };
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = fnuz ? make_float2(fnuz_f32((uint8_t)pair(i)), fnuz_f32((uint8_t)(pair(i) >> 8))) : e4m3x2_to_f32x2(pair(i));
        w[i] = pack_bf16x2(f.x * s, f.y * s);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}
#endif
// The e4m3fnuz table: bf16 of each code, filled by threads tid, tid + threads, ...
__device__ __forceinline__ void fill_fnuz_lut(uint16_t *lut, int tid, int threads) {
    for (int c = tid; c < 256; c += threads) lut[c] = aiter_mla_f32_to_bf16(aiter_mla_fp8_to_f32((uint8_t)c, AITER_MLA_FP8_E4M3FNUZ));
}
// Two bf16 (low half first) times lo and hi, rounded back to bf16.
__device__ __forceinline__ uint32_t scale_bf16x2(uint32_t v, float lo, float hi) {
    return pack_bf16x2(__uint_as_float(v << 16) * lo, __uint_as_float(v & 0xffff0000u) * hi);
}
// A UE8M0 scale byte as two bf16 (2^(b - 127) is exact in bf16: its fp32 form's low half is 0).
__device__ __forceinline__ uint32_t ue8m0_to_bf16x2(uint8_t b) {
    const uint32_t h = aiter_mla__f32_bits(aiter_mla__ue8m0_to_f32(b)) >> 16;
    return h | h << 16;
}
// Eight e4m3 values times a power-of-two scale (a bf16x2 of it) to bf16: exact wherever the
// product is a normal bf16 (the MODEL1 writer's scales keep it there).
__device__ __forceinline__ uint4 e4m3x8_to_bf16x8_scaled(uint2 v8, bool fnuz, const uint16_t *lut, uint32_t scale2) {
    const uint4 w = e4m3x8_to_bf16x8(v8, fnuz, lut);
    return make_uint4(bf16x2_mul(w.x, scale2), bf16x2_mul(w.y, scale2), bf16x2_mul(w.z, scale2), bf16x2_mul(w.w, scale2));
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <bool F16>
__device__ __forceinline__ void mma16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if (F16) mma_f16(d, a, b0, b1);
    else mma_bf16(d, a, b0, b1);
}
template <bool F16>
__device__ __forceinline__ uint32_t pack16x2(float lo, float hi) { return F16 ? pack_f16x2(lo, hi) : pack_bf16x2(lo, hi); }

// Stores `rows` staged fp32 rows (stage: [rows][kStageRow], row_at: their starts) to o in its
// dtype or to the fp32 partials, consecutive threads on consecutive dims. kRolled (the 16-row
// mma.sync kernel): the loops stay loops (`#pragma unroll 1`) where the compiler would unroll
// them by 4 behind a remainder loop: code that runs once a pass is fetched cold, and there the
// unrolled form's jumps cost more than its loop saves (H200: D1, D2 -3 %, D5 -3 %). Rolled,
// the e4m3fn kernel's rows were 1-1.5 % slower and SD1 (the warpgroup kernel) 6 %.
template <bool kRolled = false>
__device__ __forceinline__ void store_staged_rows(const DecodeParams &p, const Piece &pc, const float *stage,
                                                  const long long *row_at, int rows, int tid, int threads) {
    const aiter_mla_decode_args &a = p.a;
    auto each = [&](int n, auto &&store) { // store(c) for c = tid, tid + threads, ... < n
        if constexpr (kRolled) {
#pragma unroll 1
            for (int c = tid; c < n; c += threads) store(c);
        } else {
            for (int c = tid; c < n; c += threads) store(c);
        }
    };
    if (pc.loc < 0 && o_rows16(a.o, a.o_dtype, a.o_stride_token, a.o_stride_head)) {
        // 16-bit o in 16-byte aligned rows: 8 dims per store (the same rounding as the scalar path)
        each(rows * kL / 8, [&](int c) {
            const float *x = stage + c / (kL / 8) * kStageRow + c % (kL / 8) * 8;
            const float4 u = *reinterpret_cast<const float4 *>(x), v = *reinterpret_cast<const float4 *>(x + 4);
            const bool bf = a.o_dtype == AITER_MLA_BF16;
            auto pk = [&](float lo, float hi) { return bf ? pack_bf16x2(lo, hi) : pack_f16x2(lo, hi); };
            *reinterpret_cast<uint4 *>(static_cast<uint16_t *>(a.o) + row_at[c / (kL / 8)] + c % (kL / 8) * 8) =
                make_uint4(pk(u.x, u.y), pk(u.z, u.w), pk(v.x, v.y), pk(v.z, v.w));
        });
    } else if (pc.loc < 0) {
        each(rows * kL, [&](int c) { aiter_mla_store_f32(a.o, row_at[c / kL] + c % kL, a.o_dtype, stage[c / kL * kStageRow + c % kL]); });
    } else {
        each(rows * kL / 4, [&](int c) {
            *reinterpret_cast<float4 *>(p.part_o + row_at[c / (kL / 4)] + c % (kL / 4) * 4) =
                *reinterpret_cast<const float4 *>(stage + c / (kL / 4) * kStageRow + c % (kL / 4) * 4);
        });
    }
}

// Q rows 0 .. rows of a pass (kDq bf16 values, kRowB apart) to f16 in place, each times the
// power of two 2^e that brings its largest magnitude into [2^14, 2^15): below f16's overflow,
// and every value down to 2^-28 of the largest stays exact (those smaller add less than fp32
// rounding does). 2^-e goes to the row's padding (float at byte kD * 2), for the scores. Warp w
// of `warps` takes rows w, w + warps, ...; rows of zeros, infinities or NaNs keep e = 0, and e
// stops at +-126 (2^e and 2^-e stay normal floats; a row whose largest is a bf16 subnormal
// ends below 1).
template <int kDq = kD>
__device__ __forceinline__ void q_rows_to_f16(unsigned char *q_s, int rows, int warp, int warps, int lane) {
    static_assert(kDq % 64 == 0 && kDq <= kD, "whole words a lane, inside the row");
    constexpr int kWords = kDq / 2 / 32; // bf16 pairs per lane
    for (int r = warp; r < rows; r += warps) {
        uint32_t *row = reinterpret_cast<uint32_t *>(q_s + r * kRowB), w[kWords], amax = 0;
#pragma unroll
        for (int k = 0; k < kWords; k++) {
            w[k] = row[lane + 32 * k];
            amax = max(amax, max(w[k] & 0x7fffu, (w[k] >> 16) & 0x7fffu));
        }
        for (int o = 16; o > 0; o >>= 1) amax = max(amax, (uint32_t)__shfl_xor_sync(0xffffffffu, amax, o));
        const int ebits = (int)(amax >> 7); // the largest magnitude's exponent field
        const int e = amax == 0 || ebits == 255 ? 0 : ebits == 0 ? 126 : min(126, max(-126, 14 - (ebits - 127)));
        const float f = __int_as_float((127 + e) << 23);
#pragma unroll
        for (int k = 0; k < kWords; k++)
            row[lane + 32 * k] = pack_f16x2(__uint_as_float(w[k] << 16) * f, __uint_as_float(w[k] & 0xffff0000u) * f);
        if (lane == 0) *reinterpret_cast<float *>(row + kD / 2) = __int_as_float((127 - e) << 23);
    }
}

// A byte pointer from lane `from` of the warp (every lane calls).
__device__ __forceinline__ const unsigned char *shfl_bytes_ptr(const unsigned char *ptr, int from) {
    return reinterpret_cast<const unsigned char *>(
        (uintptr_t)aiter_mla__shfl((unsigned long long)(uintptr_t)ptr, from));
}

template <int KVT, int M, int kSmem = kSmemLimit>
__global__ void __launch_bounds__(kThreads, 1) decode_mma_kernel(DecodeParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    constexpr bool FP8 = ring_pitch(KVT) != 0;       // a byte ring, widened (fp8, ds_mla, MODEL1)
    // Per-tensor e4m3fn keys take the products in f16 instead: e4m3 widens to f16 in one
    // conversion per pair (to bf16 it takes four), Q rows are scaled into f16's range by
    // q_rows_to_f16, and P is rounded to f16 (finer than bf16 on [0, 1]).
    constexpr bool kF16 = KVT == AITER_MLA_FP8_E4M3FN;
    constexpr int kRowSrc = cache_row_bytes(KVT);    // bytes copied per key
    constexpr int kPitch = FP8 ? ring_pitch(KVT) : kRowB; // ring row bytes
    constexpr int kDq = qk_dims(KVT), kKSteps = kDq / 16; // q . k dims, their k-steps
    using S = Smem<ring_pitch(KVT), M, kSmem>;
    constexpr int kKRow = FP8 ? S::wide_row : kRowB; // bytes a key row of the tile that S and P V read
    constexpr int kM = M, kMT = M / 16, kStages = S::stages, kGroups = S::groups, kGW = S::group_warps;
    constexpr int kGT = kGW * 32, kNT = kL / kGW / 8; // threads per group, n8-tiles of dims per warp
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int grp = warp / kGW, gw = warp % kGW, gt = tid % kGT;
    unsigned char *q_s = smem + S::q, *g_s = smem + S::group0 + grp * S::group_bytes;
    unsigned char *ring = g_s + S::ring, *p_s = g_s + S::p;
    float *s_s = reinterpret_cast<float *>(g_s + S::s);
    float *m_s = reinterpret_cast<float *>(g_s + S::m), *l_s = m_s + kM, *alpha_s = l_s + kM;
    long long *lim_s = reinterpret_cast<long long *>(smem + S::lim);
    signed char *valid_s = reinterpret_cast<signed char *>(g_s + S::valid);
    uint16_t *lut = reinterpret_cast<uint16_t *>(smem + S::lut);
    // a group's own barrier (named barrier 1 + group) or the block's when there is one group
    auto group_sync = [&]() {
        if (kGroups == 1) __syncthreads();
        else if (grp == 0) named_sync<1, kGT>();
        else named_sync<2, kGT>();
    };
    // The block's barrier at a pass's first tile, which a group without tiles meets at another
    // instruction than the busy group: so not the aligned __syncthreads (undefined when reached
    // through two instructions). Only here: every block barrier non-aligned made ptxas spill.
    auto first_tile_sync = [&]() { named_sync<0, kThreads>(); };

    const aiter_mla_decode_args &a = p.a;
    const int H = a.num_heads;
    const bool v4_fnuz = is_v4(KVT) && v4_lists_fnuz(p);
    constexpr bool kFnuzLut = KVT == AITER_MLA_FP8_E4M3FNUZ || KVT == kDsMlaFnuz || KVT == kV4Model1;
    if (kFnuzLut) fill_fnuz_lut(lut, tid, kThreads);
    __syncthreads(); // the table is ready

    if constexpr (!left_out_here(KVT, M, kSmem)) for_each_piece(p, [&](const Piece &pc) {
        const int ntiles_all = (int)((pc.n + kN - 1) / kN);
        const int ntiles = (ntiles_all - grp + kGroups - 1) / kGroups; // this group's: grp, grp + kGroups, ...

        // Producer: the group's copiers, kCTPK threads per key (copier ct takes key ct / kCTPK of a
        // tile and its 16-byte chunks ct % kCTPK, ct % kCTPK + kCTPK, ...), copy the group's i-th
        // key tile into slot i % kStages with cp.async, one commit group per tile and thread (an
        // empty one past the last tile, so that wait_group counts tiles). Spread this way a tile
        // costs each thread a few copies; one warp issuing a bulk copy per row spent most of a
        // tile's time issuing. Absent keys are zero-filled by the copies themselves (MODEL1: the
        // row, then the 16 scale bytes that hold its 8). Where the keys lie comes from tile_key
        // below. valid_s holds the key's kind (0: absent). The copiers are every thread of the
        // group, except where the copies run late (kLateCopies): in 16-row passes over byte rings
        // (fp8, ds_mla, MODEL1 keys, which hardly wait for memory) the next tile's copies are
        // issued during the softmax by the 6 warps it leaves idle (it takes the group's first
        // two), 6 threads a key, instead of by the whole group before the widening: off the
        // group's chain of steps. H100, against the whole group copying first, two runs each:
        // D1-fp8 193-195 -> 179 us, D2-fp8 350-352 -> 320-323, V4D-h16-k512-b128 43-44 -> 41.5,
        // k1024-b128 67-68 -> 64, k512-b512 155-156 -> 151, k512-b4 16.1 -> 16.6. bf16 16-row
        // passes, which wait for memory, have the whole group issue them after S (kCopyAfterS).
        constexpr bool kLateCopies = kM == 16 && FP8;
        constexpr int kCopyWarps = kLateCopies ? kGW - 2 : kGW;
        constexpr int kCTPK = kCopyWarps * 32 / kN;
        static_assert(kCopyWarps * 32 % kN == 0, "copiers");
        const int ct = gt - (kGW - kCopyWarps) * 32; // this thread's place among the copiers (< 0: none)
        const bool copier = ct >= 0;                 // whole warps
        const int c_key = copier ? ct / kCTPK : 0, c_part = copier ? ct % kCTPK : 0;
        // 32-bit unsigned: a piece has fewer than 2^32 keys (V4: two lists of int32 lengths),
        // and int64 arithmetic here cost the fp8 and V4 rows 2-7 %
        auto key_of = [&](int i) { return (uint32_t)(grp + i * kGroups) * kN + c_key; };
        const uint64_t key_policy = key_l2_policy(p, pc, kM);
        auto load_tile = [&](int i, const KeyRef &k) {
            const int slot = i % kStages;
            const uint32_t dst = smem_addr(ring + slot * S::stage + c_key * kPitch);
            constexpr int kRowChunks = kRowSrc / 16, kChunks = kRowChunks + (KVT == kV4Model1 ? 1 : 0);
            // an absent key's copies zero-fill, reading nothing: any address will do (q's)
            const unsigned char *base = k.row ? k.row : static_cast<const unsigned char *>(a.q);
            const int bytes = k.row ? 16 : 0;
#pragma unroll
            for (int j = 0; j < (kChunks + kCTPK - 1) / kCTPK; j++) { // fixed offsets from one base
                const int c = c_part + j * kCTPK;
                if (kChunks % kCTPK != 0 && c >= kChunks) break;
                const void *src = KVT == kV4Model1 && c == kRowChunks ? (k.row ? k.scales : base) : base + c * 16;
                cp_async16(dst + c * 16, src, bytes, key_policy);
            }
            if (c_part == 0) valid_s[slot * kN + c_key] = (signed char)k.kind;
        };
        // The widening: every thread of the group, kTPK a key (thread gt: key gt / kTPK, units gt % kTPK,
        // gt % kTPK + kTPK, ...).
        constexpr int kTPK = kGT / kN;
        const int my_key = gt / kTPK, my_part = gt % kTPK;

        for (int r0 = pc.rb; r0 < pc.re; r0 += kM) {
            // m-tiles of this pass; a constant in the 16-row variant, so its loops unroll
            const int R = min(kM, pc.re - r0), MT = kM == 16 ? 1 : (R + 15) >> 4;
            // Q rows (bf16, zeros past R) by cp.async in the first tile's commit group: their latency
            // overlaps the keys' (an e4m3 q: plain loads, widened). The first iteration's barrier
            // is the block's, for Q, lim, m, l.
            copy_q_rows<kDq, takes_fp8_q(KVT), 1>(a, pc, r0, R, MT * 16, tid, kThreads,
                             [&](int r, int part) { return smem_addr(q_s + r * kRowB + part * 16); });
            if (kF16) cp_async_commit(); // Q in a group of its own, converted before the first tile
            if (tid < kM) lim_s[tid] = row_key_limit(pc, r0 + tid, H);
            float acc[kMT][kNT][4];
#pragma unroll
            for (int mt = 0; mt < kMT; mt++)
#pragma unroll
                for (int nt = 0; nt < kNT; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0.0f;

            // The copier's key in the group's tile t (called for t = 0, 1, ... in order, by whole
            // warps). V4 keys (a list entry, then a page lookup: most of the issue's integer work)
            // copied by the whole group: the kCTPK threads of a key look it up for kCTPK tiles at
            // once, thread c_part for tile t0 + c_part, and hand each tile's lookup round by
            // shuffles (V4D-h16-k1024-b128 70.3 -> 67.5 us). Late copies (6 threads a key, not a
            // lane group) and paged keys (a page id and a shift): each thread looks its key up
            // itself; the shuffles measured slower for paged keys (D1-fp8 194 -> 199 us), and for
            // MODEL1 late copies by 4 warps in lane groups of 4 (V4D-h16-k512-b128 47.5 against
            // 41.5 us; 180 bytes of spills). `next` holds the entry, or the batch's entries, of
            // the following lookup, loaded a tile (a batch) ahead, so a lookup does not wait on memory.
            constexpr int kBatch = is_v4(KVT) && !kLateCopies ? kCTPK : 1;
            static_assert((kBatch & (kBatch - 1)) == 0 && 32 % kBatch == 0, "a lookup batch is a lane group");
            int32_t next = copier ? key_entry<KVT>(p, pc, key_of(kBatch > 1 ? c_part : 0)) : 0;
            [[maybe_unused]] KeyRef batch{};
            auto tile_key = [&](int t) -> KeyRef {
                if constexpr (kBatch == 1) {
                    const KeyRef k = key_ref<KVT>(p, pc, key_of(t), next);
                    next = key_entry<KVT>(p, pc, key_of(t + 1));
                    return k;
                } else {
                    if (t % kBatch == 0) {
                        batch = key_ref<KVT>(p, pc, key_of(t + c_part), next);
                        next = key_entry<KVT>(p, pc, key_of(t + kBatch + c_part));
                    }
                    const int from = (lane & ~(kBatch - 1)) | (t % kBatch);
                    KeyRef k{};
                    k.row = shfl_bytes_ptr(batch.row, from);
                    if constexpr (KVT == kV4Model1) k.scales = shfl_bytes_ptr(batch.scales, from);
                    k.kind = aiter_mla__shfl(batch.kind, from);
                    return k;
                }
            };
            for (int i = 0; i < kStages - 1; i++) {
                if (i < ntiles && copier) load_tile(i, tile_key(i));
                cp_async_commit();
            }
            // during tile i: the copies of tile i + kStages - 1, into the slot of tile i - 1
            auto copy_ahead = [&](int i) {
                if (i + kStages - 1 < ntiles) load_tile(i + kStages - 1, tile_key(i + kStages - 1));
            };
            if (kF16) {
                cp_async_wait<kStages - 1>(); // this thread's copies of Q
                __syncthreads();
                q_rows_to_f16(q_s, MT * 16, warp, kWarps, lane); // published by the first tile's barrier
            }
            // Both groups run the same number of iterations (a group with one tile fewer passes
            // the barriers of an empty one), so their barrier sequences pair up across the
            // block, as race checkers expect.
            const int iters = (ntiles_all + kGroups - 1) / kGroups;
            // bf16 keys in 16-row passes (D1, D2, D5): each warp's Q fragments (the pass's 16 rows
            // over its k-part of S, kp = gw / 2 of 4) are loaded once, at its first tile, and stay
            // in registers, so S loads only K: half of its ldmatrix. H200, against Q from shared
            // memory at every tile, three runs each: D2 335.1-335.4 -> 326.4-326.6 us (88.5 -> 90.9 %
            // of copy), D1 179.3-179.9 -> 175.4-179.4, D5 16.2-16.3 -> 16.4-16.5 (ptxas: 36-40 bytes
            // of spills, all outside the tile loop). The byte-ring and V4 instances keep Q in shared
            // memory: their registers are spent (MODEL1's already spills).
            constexpr bool kQRegs = kM == 16 && kGW == 8 && KVT == AITER_MLA_BF16;
            constexpr int kQSteps = kQRegs ? kKSteps / 4 : 1; // k-steps of a k-part (4 k-parts)
            static_assert(!kQRegs || (kGW == 8 && kKSteps % 4 == 0), "one unit a warp: 2 n8-pairs x 4 k-parts");
            // Those passes issue the next tile's copies after S, not before it: S's ldmatrix no
            // longer queue behind a thread's 9 copies (ncu: registers rewritten while the copies
            // still had to read them held the warps ~10 % of the loop's samples), and the copies'
            // lead, shorter by S, still covers them. H200, three runs each: D1 176.2-176.3 ->
            // 173.0-173.5 us, D1-p1 171.9-172.4 -> 169.5-170.2, D2 and D5 unchanged. Later still
            // (by 6 warps during the softmax, kLateCopies): D2 328 -> 366 us.
            constexpr bool kCopyAfterS = kQRegs;
            [[maybe_unused]] uint32_t qf[kQSteps][4];
            // The online softmax's threads: tpr a row, kpt keys each, the group's first warps (the
            // others go on to the barrier). Each keeps its row's max m and its own keys' part of
            // the row's sum l in registers over the pass (the row's threads agree on m; the parts
            // are summed once, after the last tile), so a tile's softmax neither reads m nor sums l
            // across the row. 16-row passes: 8 threads a row (4 warps, 4 keys each, 16-byte reads)
            // for bf16 rows; 4 (2 warps, 8 keys each) over byte rings, whose other 6 warps issue
            // the next copies meanwhile. H200, against 4 a row with m and l in shared memory, three
            // runs each: D1 174.5-174.7 -> 172.4-172.7 us, D2 329.7-329.9 -> 325.8-326.8, D5
            // 16.3-16.4 -> 16.0-16.1; with m and l in registers alone, D1 and D2 moved within
            // their spread and V4D-h16-k512-b32 (MODEL1, splits) went 1 % faster.
            constexpr int kTprShort = kLateCopies ? 4 : 8;
            const int rows_p2 = MT == 1 ? 16 : MT == 2 ? 32 : 64;
            const int tpr = kM == 16 ? kTprShort : min(16, kGT / rows_p2), kpt = kN / tpr;
            const bool softmax_thread = kM != 16 || gt < 16 * kTprShort; // whole warps
            float row_m = neg_inf(), row_l = 0.0f;
            for (int i = 0; i < iters; i++) {
                if (i >= ntiles) {
                    cp_async_wait<0>(); // this thread's part of Q
#pragma unroll
                    for (int b = 0; b < (FP8 ? 4 : 3); b++) {
                        if (b == 0 && i == 0) first_tile_sync();
                        else group_sync();
                    }
                    continue;
                }
                const int slot = i % kStages;
                cp_async_wait<kStages - 2>(); // this thread's copies of tile i (and Q) are done
                // everyone's are (tile i landed); the group is done with tile i - 1
                if (i == 0) first_tile_sync();
                else group_sync();
                if constexpr (kQRegs) {
                    if (i == 0) {
                        const uint32_t qa = smem_addr(q_s) + (lane & 15) * kRowB + (lane >> 4) * 16 + (gw / 2) * kQSteps * 32;
#pragma unroll
                        for (int j = 0; j < kQSteps; j++) ldsm_x4(qa + j * 32, qf[j]);
                    }
                }
                if constexpr (!kLateCopies && !kCopyAfterS) {
                    copy_ahead(i);
                    cp_async_commit();
                }
                const int64_t k0 = (int64_t)(grp + i * kGroups) * kN;
                const int nk = (int)min((int64_t)kN, pc.n - k0);
                const unsigned char *kt = ring + slot * S::stage;
                if (FP8) { // widen the byte tile to bf16
                    unsigned char *wide = g_s + S::wide;
                    // Units of 8 values: kConv per key converted from e4m3 (times MODEL1's scale),
                    // then kCopy of 16 bytes copied (the bf16 rope of ds_mla and MODEL1). Two loops
                    // without branches in them, so the unrolled units overlap their latencies.
                    constexpr int kConv = KVT == kV4Model1 ? kV4Nope / 8 : is_ds_mla(KVT) ? kL / 8 : kDq / 8;
                    constexpr int kCopy = S::rope_in_ring ? 0 : kDq / 8 - kConv;
                    auto convert = [&](auto rule) { // FnuzRule: e4m3fn, e4m3fnuz, or as the key's kind says
                        [[maybe_unused]] constexpr int kRule = decltype(rule)::value;
                        // the thread's key, units my_part, my_part + kTPK, ...: fixed
                        // offsets, and 8 threads read (write) 64 (128) consecutive bytes of a row
                        const unsigned char *row = kt + my_key * kPitch;
                        unsigned char *out = wide + my_key * kKRow;
                        [[maybe_unused]] const int kind = valid_s[slot * kN + my_key];
                        constexpr int kUnits = (kConv + kTPK - 1) / kTPK;
                        auto has = [&](int j) { return kConv % kTPK == 0 || my_part + j * kTPK < kConv; };
                        uint2 raw[kUnits]; // every load first: their latencies overlap
#pragma unroll
                        for (int j = 0; j < kUnits; j++)
                            if (has(j)) raw[j] = *reinterpret_cast<const uint2 *>(row + (my_part + j * kTPK) * 8);
#pragma unroll
                        for (int j = 0; j < kUnits; j++) {
                            const int part = my_part + j * kTPK;
                            if (!has(j)) break;
                            const uint2 v8 = raw[j];
                            uint4 o;
                            if constexpr (KVT == kV4Model1) {
                                const bool fnuz = kRule == kFnuzByKind ? (kind & kKindFnuz) != 0 : kRule == kFnuzAlways;
                                o = e4m3x8_to_bf16x8_scaled(v8, fnuz, lut, ue8m0_to_bf16x2(row[kRowSrc + (kind & kKindOddScales ? 8 : 0) + (part >> 3)]));
                            } else {
                                o = e4m3x8_to_16x8<kF16>(v8, kRule == kFnuzAlways, lut);
                            }
                            *reinterpret_cast<uint4 *>(out + part * 16) = o;
                        }
                    };
                    with_fnuz_rule<KVT>(v4_fnuz, convert);
                    for (int c = gt; c < kN * kCopy; c += kGT) {
                        const int key = c / (kCopy > 0 ? kCopy : 1), part = c - key * kCopy;
                        *reinterpret_cast<uint4 *>(wide + key * kKRow + (kConv + part) * 16) =
                            *reinterpret_cast<const uint4 *>(kt + key * kPitch + rope_byte(KVT) + part * 16);
                    }
                    group_sync();
                    kt = wide;
                }
                const unsigned char *src_tile = ring + slot * S::stage; // ds_mla: the group scales stay here
                const uint32_t q_addr = smem_addr(q_s), k_addr = smem_addr(kt);

                // S = Q K^T: units of (m-tile, n8-tiles, k-part); short passes split k so that
                // more warps have a unit (a group of 8: every warp; of 16: 8, or 4 in the 99 KB
                // layout); k-parts land in separate rows of s_s. Outside ds_mla a unit is a pair
                // of n8-tiles (one Q fragment serves both, two independent accumulator chains):
                // MT * 2 pairs * kparts units, at most one per warp.
                constexpr bool kPairs = !is_ds_mla(KVT);
                const int kparts = MT == 1 ? S::kparts_mt1 : kPairs ? (MT >= 3 ? 2 : 4) : (MT == 2 && kGW == 16 ? 2 : 1);
                if constexpr (kPairs) {
                    static_assert(kKSteps % 4 == 0 && kGW >= 8 && (kM == 16 || kGW == 16), "at most a unit per warp");
                    const int units = MT * 2 * kparts, steps = kKSteps / kparts;
                    if (gw < units) {
                        const int mt = gw % MT, npair = gw / MT & 1, kp = gw / (2 * MT);
                        float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        const uint32_t qa = q_addr + (mt * 16 + (lane & 15)) * kRowB + (lane >> 4) * 16;
                        const uint32_t ka = k_addr + (npair * 16 + (lane & 7) + (lane >> 4) * 8) * kKRow + ((lane >> 3) & 1) * 16;
                        // Two chains per n8-tile (even and odd k-steps) halve the dependent mma
                        // chain: D2-fp8 57.5 -> 59.9 % of copy; V4's MODEL1 keys measured ~1 % slower.
                        if constexpr (kQRegs) { // MT 1, 4 k-parts: kp = gw / 2, Q from qf
                            float e0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                            for (int j = 0; j < kQSteps; j++) {
                                uint32_t bf[4];
                                ldsm_x4(ka + (kp * kQSteps + j) * 32, bf);
                                mma16<kF16>(j & 1 ? e0 : d0, qf[j], bf[0], bf[1]);
                                mma16<kF16>(j & 1 ? e1 : d1, qf[j], bf[2], bf[3]);
                            }
#pragma unroll
                            for (int e = 0; e < 4; e++) d0[e] += e0[e], d1[e] += e1[e];
                        } else if constexpr (!is_v4(KVT)) {
                            float e0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                            int kk = kp * steps;
#pragma unroll 4
                            for (; kk + 1 < (kp + 1) * steps; kk += 2) {
                                uint32_t af[4], bf[4], ag[4], bg[4];
                                ldsm_x4(qa + kk * 32, af);
                                ldsm_x4(ka + kk * 32, bf);
                                ldsm_x4(qa + kk * 32 + 32, ag);
                                ldsm_x4(ka + kk * 32 + 32, bg);
                                mma16<kF16>(d0, af, bf[0], bf[1]);
                                mma16<kF16>(d1, af, bf[2], bf[3]);
                                mma16<kF16>(e0, ag, bg[0], bg[1]);
                                mma16<kF16>(e1, ag, bg[2], bg[3]);
                            }
                            if (kk < (kp + 1) * steps) {
                                uint32_t af[4], bf[4];
                                ldsm_x4(qa + kk * 32, af);
                                ldsm_x4(ka + kk * 32, bf);
                                mma16<kF16>(d0, af, bf[0], bf[1]);
                                mma16<kF16>(d1, af, bf[2], bf[3]);
                            }
#pragma unroll
                            for (int e = 0; e < 4; e++) d0[e] += e0[e], d1[e] += e1[e];
                        } else {
#pragma unroll 8
                            for (int kk = kp * steps; kk < (kp + 1) * steps; kk++) {
                                uint32_t af[4], bf[4];
                                ldsm_x4(qa + kk * 32, af);
                                ldsm_x4(ka + kk * 32, bf); // keys of tile 2 npair (k low, high), then of the next
                                mma16<kF16>(d0, af, bf[0], bf[1]);
                                mma16<kF16>(d1, af, bf[2], bf[3]);
                            }
                        }
                        const int row = (kp * MT + mt) * 16 + (lane >> 2), col = npair * 16 + (lane & 3) * 2;
                        *reinterpret_cast<float2 *>(s_s + row * kSRow + col) = make_float2(d0[0], d0[1]);
                        *reinterpret_cast<float2 *>(s_s + (row + 8) * kSRow + col) = make_float2(d0[2], d0[3]);
                        *reinterpret_cast<float2 *>(s_s + row * kSRow + col + 8) = make_float2(d1[0], d1[1]);
                        *reinterpret_cast<float2 *>(s_s + (row + 8) * kSRow + col + 8) = make_float2(d1[2], d1[3]);
                    }
                } else {
                    const int units = 4 * MT * kparts, steps = kKSteps / kparts;
                    for (int u = gw; u < units; u += kGW) {
                        const int mt = u % MT, nt = (u / MT) & 3, kp = u / (4 * MT);
                        float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        const uint32_t qa = q_addr + (mt * 16 + (lane & 15)) * kRowB + (lane >> 4) * 16;
                        const uint32_t ka = k_addr + (nt * 8 + (lane & 7)) * kKRow + ((lane >> 3) & 1) * 16;
                        const int kb = kp * steps, ke = kb + steps;
                        int kk = kb;
                        if constexpr (is_ds_mla(KVT)) {
                            // ds_mla: the latent dims hold exact e4m3 values; each 128-dim group's partial
                            // product is scaled by its key's group scale in fp32 (rope: scale 1)
                            const unsigned char *sc0 = src_tile + (nt * 8 + (lane & 3) * 2) * kPitch + kDsScales, *sc1 = sc0 + kPitch;
                            // the rope's k-steps (from kL / 16 on) where it stays in the ring slot
                            [[maybe_unused]] const uint32_t kr =
                                smem_addr(src_tile) + (nt * 8 + (lane & 7)) * kPitch + kDsRope + ((lane >> 3) & 1) * 16 - kL / 16 * 32;
                            float tot[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                            int g = kb >> 3;
                            auto flush = [&]() {
                                const float a0 = g < 4 ? *reinterpret_cast<const float *>(sc0 + 4 * g) : 1.0f;
                                const float a1 = g < 4 ? *reinterpret_cast<const float *>(sc1 + 4 * g) : 1.0f;
                                tot[0] += a0 * d[0];
                                tot[1] += a1 * d[1];
                                tot[2] += a0 * d[2];
                                tot[3] += a1 * d[3];
#pragma unroll
                                for (int e = 0; e < 4; e++) d[e] = 0.0f;
                            };
                            for (; kk < ke; kk++) {
                                if ((kk >> 3) != g) {
                                    flush();
                                    g = kk >> 3;
                                }
                                uint32_t af[4], b0, b1;
                                ldsm_x4(qa + kk * 32, af);
                                ldsm_x2((S::rope_in_ring && kk >= kL / 16 ? kr : ka) + kk * 32, b0, b1);
                                mma16<kF16>(d, af, b0, b1);
                            }
                            flush();
#pragma unroll
                            for (int e = 0; e < 4; e++) d[e] = tot[e];
                        }
#pragma unroll(kM == 16 ? 5 : 1)
                        for (; kk + 1 < ke; kk += 2) { // two accumulators: half the dependent chain
                            uint32_t af[4], b0, b1, af2[4], b2, b3;
                            ldsm_x4(qa + kk * 32, af);
                            ldsm_x2(ka + kk * 32, b0, b1);
                            ldsm_x4(qa + kk * 32 + 32, af2);
                            ldsm_x2(ka + kk * 32 + 32, b2, b3);
                            mma16<kF16>(d, af, b0, b1);
                            mma16<kF16>(d2, af2, b2, b3);
                        }
                        if (kk < ke) {
                            uint32_t af[4], b0, b1;
                            ldsm_x4(qa + kk * 32, af);
                            ldsm_x2(ka + kk * 32, b0, b1);
                            mma16<kF16>(d, af, b0, b1);
                        }
#pragma unroll
                        for (int e = 0; e < 4; e++) d[e] += d2[e];
                        const int row = kp * MT * 16 + mt * 16 + (lane >> 2), col = nt * 8 + (lane & 3) * 2;
                        *reinterpret_cast<float2 *>(s_s + row * kSRow + col) = make_float2(d[0], d[1]);
                        *reinterpret_cast<float2 *>(s_s + (row + 8) * kSRow + col) = make_float2(d[2], d[3]);
                    }
                }
                if constexpr (kCopyAfterS) { // into the slot of tile i - 1, as at the top
                    copy_ahead(i);
                    cp_async_commit();
                }
                group_sync();

                // online softmax (see softmax_thread)
                if (softmax_thread) {
                    const int r = gt / tpr, c0 = (gt % tpr) * kpt;
                    const bool active = r < MT * 16;
                    const signed char *valid = valid_s + slot * kN + c0;
                    // last key of this tile the row may see (causal rule and the piece's end)
                    const int kmax = active ? tile_key_limit(pc, lim_s[r], k0, nk) - c0 : -1;
                    // f16 products: the row's 2^-e undoes its Q scaling (exactly: a power of two)
                    const float unscale = kF16 && active ? *reinterpret_cast<const float *>(q_s + r * kRowB + kD * 2) : 1.0f;
                    float sv[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}, mx = neg_inf();
                    uint64_t ok = 0; // byte j: key c0 + j is present
#pragma unroll
                    for (int kp = 0; kp < 4; kp++) { // the k-parts' sums
                        if (kp >= kparts) continue;
                        const float *src = s_s + (kp * MT * 16 + r) * kSRow + c0;
                        if (kpt == 8) {
                            const float4 x = *reinterpret_cast<const float4 *>(src), y = *reinterpret_cast<const float4 *>(src + 4);
                            sv[0] += x.x, sv[1] += x.y, sv[2] += x.z, sv[3] += x.w, sv[4] += y.x, sv[5] += y.y, sv[6] += y.z, sv[7] += y.w;
                        } else if (kpt == 4) {
                            const float4 x = *reinterpret_cast<const float4 *>(src);
                            sv[0] += x.x, sv[1] += x.y, sv[2] += x.z, sv[3] += x.w;
                        } else {
#pragma unroll
                            for (int j = 0; j < 8; j++)
                                if (j < kpt) sv[j] += src[j];
                        }
                    }
                    if (kpt == 8) ok = *reinterpret_cast<const uint64_t *>(valid);
                    else if (kpt == 4) ok = *reinterpret_cast<const uint32_t *>(valid);
                    else
#pragma unroll
                        for (int j = 0; j < 8; j++) ok |= j < kpt ? (uint64_t)(unsigned char)valid[j] << 8 * j : 0;
#pragma unroll
                    for (int j = 0; j < 8; j++) {
                        sv[j] = j < kpt && j <= kmax && (ok >> 8 * j & 0xff) ? sv[j] * unscale * p.score_scale : neg_inf();
                        mx = fmaxf(mx, sv[j]);
                    }
                    for (int o = 1; o < tpr; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
                    const float m_old = row_m, m_new = fmaxf(m_old, mx); // -inf in inactive rows
                    const float m_use = m_new == neg_inf() ? 0.0f : m_new; // no key yet: every e is 0
                    const float alpha = fast_exp2(m_old - m_use);
                    float sum = 0.0f;
                    uint32_t pw[4];
#pragma unroll
                    for (int j = 0; j < 8; j += 2) {
                        if (j >= kpt) break;
                        const float e0 = fast_exp2(sv[j] - m_use), e1 = fast_exp2(sv[j + 1] - m_use);
                        sum += e0 + e1;
                        pw[j / 2] = pack16x2<kF16>(e0, e1);
                    }
                    unsigned char *prow = p_s + r * kPRowB + c0 * 2;
                    if (active && kpt == 8) *reinterpret_cast<uint4 *>(prow) = make_uint4(pw[0], pw[1], pw[2], pw[3]);
                    else if (active && kpt == 4) *reinterpret_cast<uint2 *>(prow) = make_uint2(pw[0], pw[1]);
                    else if (active)
#pragma unroll
                        for (int j = 0; j < 8; j += 2)
                            if (j < kpt) *reinterpret_cast<uint32_t *>(prow + j * 2) = pw[j / 2];
                    row_l = row_l * alpha + sum;
                    row_m = m_new;
                    if (active && c0 == 0) alpha_s[r] = alpha;
                } else if (kLateCopies && copier) {
                    // the next tile's copies while the softmax runs, into the slot of tile i - 1
                    // (its widening and products are done; this tile's softmax reads slot i's flags)
                    copy_ahead(i);
                }
                if constexpr (kLateCopies) cp_async_commit();
                group_sync();

                // O = O * alpha + P V over this warp's kNT * 8 latent dims
#pragma unroll
                for (int mt = 0; mt < kMT; mt++) {
                    if (mt < MT) {
                        const float a0 = alpha_s[mt * 16 + (lane >> 2)], a1 = alpha_s[mt * 16 + (lane >> 2) + 8];
#pragma unroll
                        for (int nt = 0; nt < kNT; nt++) {
                            acc[mt][nt][0] *= a0;
                            acc[mt][nt][1] *= a0;
                            acc[mt][nt][2] *= a1;
                            acc[mt][nt][3] *= a1;
                        }
                    }
                }
#pragma unroll
                for (int kk = 0; kk < 2; kk++) {
                    uint32_t pa[kMT][4];
#pragma unroll
                    for (int mt = 0; mt < kMT; mt++)
                        if (mt < MT) ldsm_x4(smem_addr(p_s) + (mt * 16 + (lane & 15)) * kPRowB + kk * 32 + (lane >> 4) * 16, pa[mt]);
                    if constexpr (is_ds_mla(KVT)) { // P times each key's scale of this warp's 128-dim group
                        const int gq = (gw * kNT * 8) >> 7, key0 = kk * 16 + (lane & 3) * 2;
                        auto sc = [&](int key) { return *reinterpret_cast<const float *>(src_tile + key * kPitch + kDsScales + 4 * gq); };
                        const float s0 = sc(key0), s1 = sc(key0 + 1), s2 = sc(key0 + 8), s3 = sc(key0 + 9);
#pragma unroll
                        for (int mt = 0; mt < kMT; mt++) {
                            if (mt < MT) {
                                pa[mt][0] = scale_bf16x2(pa[mt][0], s0, s1);
                                pa[mt][1] = scale_bf16x2(pa[mt][1], s0, s1);
                                pa[mt][2] = scale_bf16x2(pa[mt][2], s2, s3);
                                pa[mt][3] = scale_bf16x2(pa[mt][3], s2, s3);
                            }
                        }
                    }
#pragma unroll
                    for (int np = 0; np < kNT / 2; np++) {
                        uint32_t vb[4];
                        ldsm_x4_trans(k_addr + (kk * 16 + (lane & 15)) * kKRow + (gw * kNT * 8 + np * 16 + (lane >> 4) * 8) * 2, vb);
#pragma unroll
                        for (int mt = 0; mt < kMT; mt++) {
                            if (mt < MT) {
                                mma16<kF16>(acc[mt][np * 2], pa[mt], vb[0], vb[1]);
                                mma16<kF16>(acc[mt][np * 2 + 1], pa[mt], vb[2], vb[3]);
                            }
                        }
                    }
                }
            }

            if (softmax_thread) { // the rows' totals of this group, for the finish
                float l = row_l;
                for (int o = 1; o < tpr; o <<= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
                const int r = gt / tpr;
                if (r < MT * 16 && gt % tpr == 0) {
                    m_s[r] = row_m;
                    l_s[r] = l;
                }
            }
            // Two groups: group 1 hands its O to group 0 through its own ring (free now), in
            // register order (warp gw of each group holds the same dims); its m and l stay in
            // its softmax state. Group 0 merges while it writes.
            const float *xo = reinterpret_cast<const float *>(smem + S::group0 + S::group_bytes + S::ring);
            if (kGroups > 1) {
                group_sync(); // group 1's last tile may still be read from its ring
                if (grp == 1) {
                    float *xw = reinterpret_cast<float *>(smem + S::group0 + S::group_bytes + S::ring);
#pragma unroll
                    for (int mt = 0; mt < kMT; mt++)
#pragma unroll
                        for (int nt = 0; nt < kNT; nt++)
#pragma unroll
                            for (int e = 0; e < 4; e++) xw[((gw * kMT + mt) * kNT * 4 + nt * 4 + e) * 32 + lane] = acc[mt][nt][e];
                }
            }
            cp_async_wait<0>(); // Q's copies too when the piece had no key
            __syncthreads(); // every warp is done with the rings (and group 1's O is handed over)

            // Write, an m-tile (16 rows) at a time: group 0 merges the groups' rows, scales them by
            // 1 / l (times the fp8 V scale, and the sink) and stages them as fp32 in its ring (free
            // now); then every thread stores them, consecutive threads on consecutive dims. (The
            // same stores issued from the accumulators, unrolled for every output format, made the
            // kernel's largest block of code, whose instruction fetches cost more than the stores.)
            float *stage_o = reinterpret_cast<float *>(smem + S::group0 + S::ring); // [16][kStageRow]
            long long *row_at = lim_s; // per row: where its o (or partial) row starts; lim_s is free now
            // Each row's totals, once, by thread `row` of group 0 (finish_row's code a single time,
            // where each of the row's 4 x group-warps threads ran it, inlined for each of its rows:
            // code that a block with one piece runs from a cold instruction cache): row_at[row], and
            // in m_s, l_s [row] the factors of group 0's and group 1's o (their 2^(m - M) times
            // finish_row's factor).
            static_assert(kM <= kGT, "a thread of group 0 a row");
            if (tid < R) {
                const float *m1 = reinterpret_cast<const float *>(smem + S::group0 + S::group_bytes + S::m), *l1 = m1 + kM;
                const int row = tid;
                float m = m_s[row], l = l_s[row], fa = 1.0f, fb = 0.0f;
                if (kGroups > 1) {
                    const MergedStates s = merge_states(m, l, m1[row], l1[row]);
                    fa = s.f0;
                    fb = s.f1;
                    l = s.l;
                    m = s.m;
                }
                float inv;
                row_at[row] = finish_row(p, pc, r0 + row, m, l, true, &inv);
                m_s[row] = fa * inv;
                l_s[row] = fb * inv;
            }
            __syncthreads(); // the rows' factors are in
#pragma unroll
            for (int mt = 0; mt < kMT; mt++) {
                if (mt >= MT) continue;
                if (grp == 0) {
#pragma unroll
                    for (int half = 0; half < 2; half++) {
                        const int rr = (lane >> 2) + half * 8, row = mt * 16 + rr;
                        if (row >= R) continue;
                        const float fa = m_s[row], fb = l_s[row];
#pragma unroll
                        for (int nt = 0; nt < kNT; nt++) {
                            const int d = gw * kNT * 8 + nt * 8 + (lane & 3) * 2;
                            float o0 = acc[mt][nt][half * 2] * fa, o1 = acc[mt][nt][half * 2 + 1] * fa;
                            if (kGroups > 1) {
                                const float *x = xo + ((gw * kMT + mt) * kNT * 4 + nt * 4 + half * 2) * 32 + lane;
                                o0 += x[0] * fb;
                                o1 += x[32] * fb;
                            }
                            *reinterpret_cast<float2 *>(stage_o + rr * kStageRow + d) = make_float2(o0, o1);
                        }
                    }
                }
                __syncthreads(); // the m-tile is staged
                store_staged_rows<true>(p, pc, stage_o, row_at + mt * 16, min(16, R - mt * 16), tid, kThreads);
                __syncthreads(); // the stage is refilled by the next m-tile (Q, m, l by the next pass)
            }
            // a split piece's rows are stored: counted for the reduce (the last warp, which the
            // next pass's first steps wait for least). Plans, and so counters, are the dense
            // decode's alone: fp8_ds_mla and V4 instances leave the code out (in MODEL1's it cost
            // 16 bytes more of spills: V4D-h16-k512-b128 42.0-42.7 us in two full runs, 40.9
            // without; H200).
            if constexpr (!is_ds_mla(KVT) && !is_v4(KVT))
                if (p.arrivals && pc.loc >= 0 && tid == kThreads - 1) count_stored_rows(p, pc, R);
        }
    });
#endif
}

} // namespace mma
#endif

// ==== dense decode: warpgroup path (NVIDIA sm_90a, wgmma) ==================================
// Every 64-row pass of the tensor-core decode (MLA decode with more than 16 rows per query
// tile, V3.2 sparse attention, V4 attention; bf16, fp8, fp8_ds_mla and MODEL1 keys), on devices
// that run the sm_90a pass of an AITER_MLA_WGMMA build (which the Makefile defines where ARCH
// has sm_90a; other passes compile these kernels' bodies out and launch the mma.sync ones
// instead). Same plan, pieces and output conventions as the paths above. Three
// warpgroups, key tiles of 64 in two slots:
//   warpgroup 0: S = Q K^T (wgmma, Q and K in shared memory), the online softmax in registers,
//     O[:, 0:256] += P V with P from its registers; it hands P (bf16) and each row's rescale
//     factor to warpgroup 1 through shared memory;
//   warpgroup 1: O[:, 256:512] += P V;
//   warpgroup 2 (the loader): Q (by TMA where a pass is 64 heads of one token, maps.q; else by
//     cp.async) and the key tiles, bf16 rows by cp.async (16 bytes, absent keys zero-filled)
//     or, whole tiles of pages of 64 keys or more, by TMA (maps.cache, kTma); fp8 rows through
//     registers, widened to bf16 on the way.
// fp8_ds_mla keys in two 64-row slices (V3.2 sparse attention with 65-128 heads) run the
// slices as a pair of blocks (a cluster of two) whose loaders each widen half of every tile
// into both blocks' shared memory (kPair, kPairedKeys).
// setmaxnreg moves registers from the loader to warpgroup 0. Warpgroup 0's Q K^T of tile i + 1
// overlaps warpgroup 1's P V of tile i; the loader fills a slot as soon as both are done with
// it. The accumulators stay in registers (128 fp32 per thread for O), which the mma.sync path
// cannot afford for 64 rows: it round-trips S and P through shared memory and reloads Q for
// every tile. Shared tiles are blocks of 64 rows x 64 dims (128-byte rows), 16-byte chunk c of
// row r stored at chunk c ^ (r & 7): the 128-byte swizzle wgmma reads without bank conflicts.
#if defined(AITER_MLA_HAS_MMA) && defined(AITER_MLA_WGMMA)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "AITER_MLA_WGMMA: build Hopper as sm_90a (a launch tells the sm_90a image by its arch, 90)"
#endif
#define AITER_MLA_HAS_WGMMA 1
namespace wg {

using mma::count_stored_rows;
using mma::cp_async16;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::named_arrive;
using mma::named_sync;
using mma::copy_q_rows;
using mma::takes_fp8_q;
using mma::store16_shared;
using mma::fill_fnuz_lut;
using mma::shfl_bytes_ptr;
using mma::fast_exp2;
using mma::kStageRow;
using mma::pack_bf16x2;
using mma::smem_addr;
using mma::store_staged_rows;
using mma::e4m3x8_to_bf16x8;
using mma::e4m3x8_to_bf16x8_times;
using mma::e4m3x8_to_bf16x8_scaled;
using mma::kFnuzAlways;
using mma::kFnuzByKind;
using mma::v4_lists_fnuz;
using mma::with_fnuz_rule;
using mma::ue8m0_to_bf16x2;

constexpr int kThreads = 384, kN = 64, kM = 64; // three warpgroups; keys per tile; rows per pass
template <int N>
struct Const { // a compile-time int argument of a generic lambda
    static constexpr int value = N;
};
constexpr int kPresentWords = kN / 16;          // a tile's present-key words: one per loader warp (16 keys)
// Words a slot keeps for its present keys: room for a pair of blocks, whose 8 loader warps write
// one word each (8 keys, in its low 16 bits; a warp's own word, so that no two warps write one
// word, and a block's 4 words lie together and reach the other block in one 16-byte copy) and
// whose consumers put them together; an unpaired block uses the first kPresentWords (16 keys each).
constexpr int kValidWords = 2 * kPresentWords;
constexpr int kBlk = 64 * 128;                 // one swizzled block: 64 rows x 64 bf16
// Registers per thread of each warpgroup after setmaxnreg. The launch bound gives every thread
// 168 at entry; the budgets redistribute exactly that (the softmax warpgroup holds S, P and half
// of O; the second holds the other half of O). The loader of fp8 keys holds a tile's share of
// the bytes; that of bf16 keys only issues cp.async, and its registers go to the consumers,
// which then need no spills (112 / 160 / 232 left the second 100 bytes of spills).
constexpr int kRegsEntry = 65536 / kThreads / 8 * 8; // the register file over the block, in steps of 8: 168
// A loader in a pair holds half as many bytes (88 / 168 / 248, chosen when it left no spills in
// ds_mla e4m3fn's code, where 112 / 160 / 232 left 36 bytes; the consumers have grown since:
// ptxas now reports 96 bytes of spill stores a thread there).
// In the split scheme (kSplit, below) both consumers hold an S beside their half of O and need
// as many registers.
template <bool kWide, bool kPair = false, bool kSplit = false>
struct Regs {
    static constexpr int load = kPair ? 88 : kWide ? 112 : 56;
    static constexpr int pv = kPair ? 168 : kWide ? 160 : kSplit ? 224 : 192, softmax = kPair ? 248 : kWide ? 232 : kSplit ? 224 : 256;
    static_assert(softmax + pv + load == 3 * kRegsEntry, "the budgets must add up to the entry allocation");
};
// The handoffs, one mbarrier each; every thread of the releasing side arrives (releasing its own
// writes) and the other side waits on the phase parity. kFull + s: slot s holds its tile (loader);
// kEmpty + s: both consumers are done with slot s; kPReady + s: P and alpha of slot s's tile are
// written (warpgroup 0); kQReady: the pass's Q is in (loader); kQFree: the pass's last
// product that reads Q is complete (both consumers), so the next pass's Q may load while
// this one ends; kDone: the pass's rows are stored, the slots and P are free (both consumers).
// In a pair (kPair) the other block's loader also fills this block's slots and its consumers
// also release this block's loader, so kEmpty and kDone count both blocks' threads; kFull counts
// this block's loader and the bytes of the other's bulk copy of its half into the slot; and
// kFirst + s (kHalfReady's mbarriers, unused by pairs) hands over the slot's first 64-dim
// blocks alike, before the rest, so that S starts on them while the rest is widened and copied;
// kSent + s (kHalfFree's): the other block has its copies of slot s's tile (one arrival, from
// its warpgroup 0 after its kFull wait), so this block may write over their source (P into the
// rope block, o staged over the slots).
// The split scheme (bf16 rows) hands over halves of a slot instead: kHalfReady + 2 s + f: half f
// of slot s holds its tile (f = 0: dims 0 .. 255, 1: the rest); kHalfFree + 2 s + f: the one
// consumer that reads that half last is done with it. Its loader arrives on kQReady and on
// kHalfReady twice a thread, plainly and once its copies have landed (cp_async_arrive_noinc).
// Between its two consumers (128 arrivals each): kMaxA: tile i's row maxima are in m_s (warpgroup
// 0); kMaxB: the pair's (warpgroup 1); kP0, kP1: P of tile i, i + 1 is in; kSums: warpgroup 1's
// row sums at a pass's end.
constexpr int kFull = 0, kEmpty = 2, kPReady = 4, kQReady = 6, kDone = 7, kHalfReady = 8, kHalfFree = 12;
constexpr int kFirst = kHalfReady, kSent = kHalfFree; // in a pair (never split)
constexpr int kMaxA = 16, kMaxB = 17, kP0 = 18, kP1 = 19, kSums = 20, kQFree = 21, kHandoffs = 22;
// The arrivals that complete a phase of handoff h: both consumer warpgroups (256) or one
// warpgroup (128); in a pair, twice that for all but the handoffs within a block; in the split
// scheme, the loader's two arrivals a thread on kQReady and kHalfReady.
__host__ __device__ constexpr int handoff_arrivals(int h, bool pair, bool split) {
    const bool consumers = h == kEmpty || h == kEmpty + 1 || h == kDone || h == kQFree;
    // P and Q stay within a block; so do the loaders' arrivals on kFull and kFirst (the other block's half completes bytes)
    const bool across_pair = h != kPReady && h != kPReady + 1 && h != kQReady && h != kQFree && h != kFull && h != kFull + 1 &&
                             h != kFirst && h != kFirst + 1;
    const bool twice = split && (h == kQReady || (h >= kHalfReady && h < kHalfReady + 4));
    if (pair && (h == kSent || h == kSent + 1)) return 1;
    return (consumers ? 256 : 128) * (pair && across_pair ? 2 : 1) * (twice ? 2 : 1);
}

// How the loader brings a key row into a slot. bf16 rows: cp.async. fp8 rows: loaded into
// registers, widened to bf16 (times their scales: ds_mla's fp32 group scales, rounded once to
// bf16; MODEL1's powers of two, exact) and stored. `parts` threads per key, thread `part`
// taking the row's 16-byte chunks part, part + parts, ...: first the e4m3 chunks (16 values,
// two bf16 chunks each), then the bf16 rope chunks (one each). Two threads a key bring a
// whole tile; four, in a pair of blocks, the block's half of it.
template <int KVT, bool kPair = false>
struct Wide {
    static constexpr bool on = KVT != AITER_MLA_BF16 && KVT != kV4Bf16;
    static constexpr int parts = kPair ? 4 : 2;
    static constexpr int nope = !on ? 0 : KVT == kV4Model1 ? kV4Nope / 16 : is_ds_mla(KVT) ? kL / 16 : kD / 16;
    static constexpr int rope = on && (KVT == kV4Model1 || is_ds_mla(KVT)) ? 8 : 0;
    static constexpr int loads = (nope + rope) / parts; // per thread
    static constexpr int keys = on ? 1 : 4;             // keys a loader thread brings per tile
    // byte offset in the row of the j-th chunk of thread `part`
    __device__ static constexpr int chunk_at(int j, int part) {
        return j < nope / parts ? (part + parts * j) * 16
                                : rope_byte(KVT) + (part + parts * (j - nope / parts)) * 16;
    }
    static constexpr bool lut = KVT == AITER_MLA_FP8_E4M3FNUZ || KVT == kDsMlaFnuz || KVT == kV4Model1;
    static_assert(loads * parts == nope + rope && nope % parts == 0 && 8 % parts == 0, "whole chunks per thread, scale groups of whole steps");
    static_assert(on || !kPair, "pairs share widened tiles");
};

// The formats whose 64-row blocks run in pairs (decode_wgmma_kernel's kPair) where the grid's
// row slices pair up: fp8_ds_mla, V3.2's top-k rows (SD1, same run against unpaired blocks:
// H100 644-646 -> 568-569 us, H200 636-641 -> 541-543). Measured and left unpaired: per-tensor
// e4m3 (D3-fp8, H100 606-608 -> 616-629 us, H200 605-606 -> 598-604; with the L2 prefetch
// that unpaired blocks take, H100 567-580 unpaired against 661-663 paired); MODEL1 pages
// (V4P-h128, H200 9887-9912 -> 10292-10300), whose power-of-two scales widen for less, in
// blocks of 10 tiles that pay the pair's lockstep.
template <int KVT>
constexpr bool kPairedKeys = is_ds_mla(KVT);

template <int DQ, bool kLut, bool kSplit = false> // q . k dims; whether the e4m3fnuz table is needed; the split scheme
struct Smem {     // byte offsets from a 1024-byte aligned base
    static constexpr int blocks = DQ / 64;
    static constexpr int q = 0;                   // Q: [blocks] swizzled blocks of the pass's 64 rows
    static constexpr int keys = q + blocks * kBlk; // two slots of a 64-key tile, same layout
    static constexpr int slot = blocks * kBlk;
    // P of a slot's tile (64 rows x 64 keys, one swizzled block), which the other consumer reads:
    // with 576-dim keys slot 0's P takes the tile's rope block, which only S reads (no room for
    // two more blocks); so does slot 1's, but in the split scheme that block goes back to the
    // loader while P is still read, and slot 1's P has a block of its own; 512-dim passes have
    // two blocks of their own
    static constexpr int pbufs = DQ > kL ? (kSplit ? 1 : 0) : 2;
    static constexpr int pbuf = keys + 2 * slot;
    __device__ static constexpr int p_at(int s) {
        return DQ > kL && (s == 0 || !kSplit) ? keys + s * slot + kL / 64 * kBlk : pbuf + (pbufs - 1) * s * kBlk;
    }
    // float [2][64]: each row's rescale factor of a slot's tile; split scheme: [0] each row's
    // running max passed between the consumers, [1] warpgroup 1's row sums at a pass's end
    static constexpr int alpha = pbuf + pbufs * kBlk;
    static constexpr int row_at = alpha + 2 * kM * 4; // int64 [64]: where each row's o (or partial) starts
    static constexpr int valid = row_at + kM * 8;  // uint32 [2][kValidWords]: each slot's present keys (see kValidWords), key c of a word at bits 2 c, 2 c + 1
    static constexpr int inv = valid + 2 * kValidWords * 4; // float [64]: each row's o factor at the end of a pass
    static constexpr int lut = inv + kM * 4;       // uint16 [256]: bf16 of each e4m3fnuz code
    static constexpr int bars = lut + (kLut ? 512 : 0); // uint64 [kHandoffs]
    static constexpr int total = bars + kHandoffs * 8 + 1024; // + the alignment of the base
    static_assert(total <= mma::kSmemLimit, "shared memory plan does not fit");
    static_assert(2 * slot + pbufs * kBlk >= kM * kStageRow * 4, "the staged o rows reuse the key slots and P");
};
template <int KVT, bool kSplit = false>
using SmemOf = Smem<qk_dims(KVT), Wide<KVT>::lut, kSplit>;

// Byte offset of 16-byte chunk c of row r in swizzled blocks of ROWS rows x 64 dims.
template <int ROWS = kM>
__device__ __forceinline__ uint32_t swz(int r, int c) { return (c >> 3) * (ROWS * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4); }
// Shared-memory matrix descriptor, 128-byte swizzle. K-major operands (Q, K, P): sbo = 1024
// (the next 8 rows), lbo unused. MN-major (V): lbo = kBlk (the next 64 dims), sbo = 1024 (the
// next 8 keys).
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3ffff) >> 4) | (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 | 1ull << 62;
}
// The descriptor of the operand `bytes` (a multiple of 16) on from d0's, same layout: the start
// address is the low 14 bits, in 16-byte units, and every shared address lies below 256 KB, so
// an offset adds without a carry: one integer add a product, where desc() from the address
// takes five uniform instructions. With desc() at every k-step, more than a third of the
// decode's warpgroup 0 stall samples (ncu, D3) fell where it issues S's 36 k-steps; built from
// one descriptor a loop, D3, D4, SD1, SP1, V4P and P3 run 1-2 % faster (H100).
__device__ __forceinline__ uint64_t desc_plus(uint64_t d0, uint32_t bytes) {
    return (d0 & ~0xffffffffull) | (uint32_t)((uint32_t)d0 + (bytes >> 4));
}
// Byte offset of k-step kk (32 bytes of each row) in a K-major operand stored as swizzled
// blocks of 64 dims (128-byte rows), block_bytes apart: four k-steps a block.
__device__ __forceinline__ uint32_t kstep_offset(int kk, uint32_t block_bytes) { return (kk >> 2) * block_bytes + (kk & 3) * 32; }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Waits until at most N of this warpgroup's committed wgmma groups are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Generic-proxy writes to shared memory (stores, cp.async) made visible to wgmma's reads.
__device__ __forceinline__ void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// This thread's arrival, releasing its earlier writes to the threads that wait on the phase.
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
// An arrival on mbarrier bar that comes when this thread's cp.async copies issued so far have
// landed, counted as one of the phase's arrivals (.noinc). The split scheme's loader arrives
// plainly too (releasing its generic writes) and counts both: the form without .noinc (one
// count a thread, raised by the copies' arrival) made compute-sanitizer's synccheck report
// "missing wait" on the plain arrival whenever the copies were still in flight.
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
// Waits (acquiring) for the completion of the next phase of handoff h (mbarrier bars + 8 h),
// whose parity is bit h of `phases`, then flips that bit: each thread counts the phases it has
// waited for.
// kCluster: acquiring at cluster scope, for phases the other block of a pair takes part in.
// (one loop text for both: the qualifier `sem` is the only difference)
#define AITER_MLA__MBAR_WAIT(sem, bar, parity)                                                                             \
    asm volatile("{\n.reg .pred done;\nWAIT:\n"                                                                          \
                 "mbarrier.try_wait.parity" sem ".shared::cta.b64 done, [%0], %1;\n"                                    \
                 "@!done bra WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory")
template <bool kCluster = false>
__device__ __forceinline__ void mbar_wait(uint32_t bars, int h, uint32_t &phases) {
    if constexpr (kCluster) AITER_MLA__MBAR_WAIT(".acquire.cluster", bars + 8 * h, (phases >> h) & 1);
    else AITER_MLA__MBAR_WAIT("", bars + 8 * h, (phases >> h) & 1);
    phases ^= 1u << h;
}
#undef AITER_MLA__MBAR_WAIT
// Adds `bytes` to the transactions the current phase of mbarrier bar waits for (TMA copies
// complete them).
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// TMA: the box of tensor map `map` at coordinates (c0, c1, c2) into shared memory at dst (laid
// out as the map's swizzle says), its bytes counted on mbarrier bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n"
                 ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
                 : "memory");
}
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
// The two consumer warpgroups' own barrier (named barrier 1; the loader never joins it).
__device__ __forceinline__ void consumers_sync() { named_sync<1, 256>(); }
// This warpgroup's register budget (sm_90a), raised or lowered to N per thread.
template <int N>
__device__ __forceinline__ void regs_raise() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void regs_lower() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
// ... to N from the entry allocation, whichever way that goes.
template <int N>
__device__ __forceinline__ void regs_set() {
    if constexpr (N > kRegsEntry) regs_raise<N>();
    else if constexpr (N < kRegsEntry) regs_lower<N>();
}
// 16 bytes from global memory (read-only for the kernel, streamed past L1), or zeros when !ok.
// kWide: an L2 miss fetches the 256 bytes around them (.L2::256B). MODEL1 rows take it (H200,
// two or three runs each against the plain load: V4D-h64-k512-b128 65.5-66.3 -> 62.5-63.3 us,
// k512-b32 43.0-43.5 -> 42.4-43.1, k1024-b32 51.9-52.4 -> 50.4-50.5, V4P-h64 4762-4841 ->
// 4575-4586); for fp8_ds_mla and per-tensor e4m3 rows it measured ~1 % slower (SD1 433-437 ->
// 440, D3-fp8 483-485 -> 490).
// kKept (wide loads): under an explicit evict-normal L2 policy (`.L2::cache_hint`), which keeps
// the lines longer than the plain load's default does: the warpgroup kernel's MODEL1 rows where
// the caller says its tokens reread them (keys_shared, a kernel instance of its own). H100, three
// runs each against the plain load, alternately in one call, us: V4P-h64 4505-4528 -> 3747-3794,
// V4P-h128 8693-8948 -> 7395-7459. A decode's keys serve one token, and there the policy costs:
// on every 64-head decode 7-25 % (V4D-h64-k512-b32 40.4-41.8 -> 50.0-51.1), at 128 heads (two row
// groups a key; with the runtime choice below) 5-17 % (V4D-h128-k512-b32 56.6-57.6 -> 67.3-67.4);
// a runtime choice between the two loads in one instance cost the decodes 1-3 %.
// docs/PERFORMANCE.md, "keys_shared".
#define AITER_MLA__LOAD16_OR_ZERO(QUALIFIERS)                                                                              \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n@p ld.global.nc.L1::no_allocate" QUALIFIERS ".v4.u32 {%0, %1, %2, %3}, [%5];\n}\n" \
                 : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)                                                            \
                 : "r"((int)ok), "l"(src))
template <bool kWide = false, bool kKept = false>
__device__ __forceinline__ uint4 load16_or_zero(const void *src, bool ok) {
    static_assert(!kKept || kWide, "kept loads are wide ones");
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if constexpr (kKept) {
        const uint64_t normal = mma::l2_evict_normal();
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %4, 0;\n@p ld.global.nc.L1::no_allocate.L2::cache_hint.L2::256B.v4.u32 {%0, %1, %2, %3}, "
                     "[%5], %6;\n}\n"
                     : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
                     : "r"((int)ok), "l"(src), "l"(normal));
    } else if constexpr (kWide) AITER_MLA__LOAD16_OR_ZERO(".L2::256B");
    else AITER_MLA__LOAD16_OR_ZERO("");
    return v;
}
// Brings `bytes` (a multiple of 16) at a 16-byte aligned global address into the L2.
__device__ __forceinline__ void prefetch_l2(const void *src, uint32_t bytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}
// Brings the 128-byte line holding a global address into the L2.
__device__ __forceinline__ void prefetch_line_l2(const void *src) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(src) : "memory"); }
__device__ __forceinline__ uint4 load16_shared(uint32_t src) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(src) : "memory");
    return v;
}
// Four 8 x 8 matrices of 16-bit values from a warp's accumulator fragments into shared memory
// (matrix k from register rk, where lane l holds row l / 4, columns 2 (l % 4) and + 1; kTrans:
// each matrix transposed); lanes 8 k .. 8 k + 7 give the addresses of matrix k's rows.
template <bool kTrans = false>
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    if constexpr (kTrans)
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1), "r"(r2),
                     "r"(r3)
                     : "memory");
    else
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                     : "memory");
}

// Pairs of blocks (a cluster of two, sm_90) that share their key tiles: each block widens
// half of every tile and stores it into both blocks' shared memory (distributed shared
// memory), the handoffs of the slots then counting both blocks' threads.
// This block's rank in its cluster (0 or 1).
__device__ __forceinline__ int cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return (int)r;
}
// The address in block `rank`'s shared memory of this block's shared address `addr`.
__device__ __forceinline__ uint32_t peer_addr(uint32_t addr, int rank) {
    uint32_t d;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(d) : "r"(addr), "r"(rank));
    return d;
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) of this block's shared memory at
// src into the other block's at dst, completing as many bytes of the current phase of its
// mbarrier bar (dst and bar from peer_addr): a bulk copy through the async proxy, so the
// writes before it need fence.proxy.async.shared::cta. Its completion is that mbarrier's
// alone (bulk groups do not track copies into shared memory): src may be rewritten only once
// the other block has seen bar complete (kSent).
__device__ __forceinline__ void copy_to_peer(uint32_t dst, uint32_t src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst), "r"(src),
                 "r"(bytes), "r"(bar)
                 : "memory");
}
// This thread's arrival on mbarrier bar, adding `bytes` to the transactions its current phase
// waits for (those the other block of a pair stores into this one).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
// This thread's arrival on an mbarrier of the other block (address from peer_addr), releasing
// its earlier writes at cluster scope.
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// The same without ordering this thread's memory accesses: for a release after reads that are
// complete (a consumer's wgmma, waited for), which a cluster-scope release would fence again.
__device__ __forceinline__ void mbar_arrive_cluster_relaxed(uint32_t bar) {
    asm volatile("mbarrier.arrive.relaxed.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Every thread of both blocks meets here (release / acquire at cluster scope); after the
// mbarriers' initialisation, made visible to the other block first.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// O rows ra (factor fa) and rb (fb) of a warpgroup's accumulators times their softmax rescale.
template <int N>
__device__ __forceinline__ void rescale_rows(float (&acc)[N], float fa, float fb) {
#pragma unroll
    for (int j = 0; j < N / 4; j++) {
        acc[4 * j] *= fa;
        acc[4 * j + 1] *= fa;
        acc[4 * j + 2] *= fb;
        acc[4 * j + 3] *= fb;
    }
}
// The same where the factors are mostly exactly 1 (lazy maxima, below): a warp whose rows all
// keep their scale skips the multiplies.
template <int N>
__device__ __forceinline__ void rescale_rows_unless_one(float (&acc)[N], float fa, float fb) {
    if (__any_sync(0xffffffffu, fa != 1.0f || fb != 1.0f)) rescale_rows(acc, fa, fb);
}
// The online softmax over a warpgroup's accumulator rows (shared by the decode and the
// prefill): this thread's scores s[j] of row ra (j & 2 == 0) and rb (j & 2), a row's keys on
// the 4 lanes of its quad; unscaled, masked ones -inf; scale > 0 (it includes log2 e). ma, mb:
// the rows' running max of scale * s (-inf before any key; with kLazy, below, the max P is
// taken against); la, lb: this thread's share of their sums. s becomes P = exp2(scale * s -
// m), the product rounded first so that the row's largest score gets P = 1 exactly (an fma
// here would leave its rounding error in P: a lone key's o would then miss V by an ulp); fa,
// fb: the factors of the rows' O.
// kFused (fp8 prefill, whose softmax no longer hides behind the other consumer's shorter
// products; the decode's bf16 rows): the max over the unscaled scores (scale > 0 keeps their
// order), then P = exp2(fma(s, scale, -m)), one instruction an element fewer (P3-fp8 16.8 ->
// 16.2 ms; H200, five runs each, SP1 4926-4962 -> 4839-4911 us, V4P-h64-ws 2872-2882 ->
// 2840-2849, D3, D4, D6 within their spread); the ulp it costs a lone key is far inside the
// tolerances (FlashMLA forms P so too).
// kLazy (every 64-row softmax: the one-softmax decode's warpgroup 0, both warpgroups of the
// split scheme, the prefill's consumers): a row's m moves only when a tile's max rises above it
// by more than kLazyRise (log2 units; FlashAttention 4's rule), so P may reach 2^kLazyRise
// (fp32 sums, bf16/f16 P: the same relative rounding) and a row's factor is exactly 1 on most
// tiles, which lets a warp skip O's rescale; lse = m + log2 l holds for any such m. ta, tb (when
// given) track the rows' true maxima (max_logits). H200, against exact maxima with the rescale
// always done, two or three runs each: D3 328-329 -> 322-323 us, D4 572-583 -> 560-568, SD1
// 525-528 -> 516-518, V4P-h64 4869-4957 -> 4700-4824, D3-fp8 491-492 -> 484-485 (one-softmax);
// SP1 4991-5020 -> 4923-4929, V4P-h64-ws 2973-2984 -> 2885-2888, V4P-h128-ws 5672-5682 ->
// 5485-5498 (split); P3-fp8 15806-16008 -> 15486-15572, P4-fp8 3849-3855 -> 3785-3790, bf16
// prefill within 1 %. test_decode_rising_keys and the sparse tests' ramp cases move m mid-pass.
constexpr int kLazyRise = 8;
template <int N, bool kFused = false, bool kLazy = false, int kRise = kLazyRise> // kRise: log2 of how far P may reach
__device__ __forceinline__ void online_softmax_rows(float (&s)[N], float scale, float &ma, float &mb, float &la, float &lb, float &fa,
                                                    float &fb, float *ta = nullptr, float *tb = nullptr) {
    float xa = neg_inf(), xb = neg_inf();
#pragma unroll
    for (int j = 0; j < N; j++) {
        if (!kFused) s[j] *= scale;
        if (j & 2) xb = fmaxf(xb, s[j]);
        else xa = fmaxf(xa, s[j]);
    }
    if (kFused) {
        xa *= scale;
        xb *= scale;
    }
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
        xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, o));
        xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, o));
    }
    float na = fmaxf(ma, xa), nb = fmaxf(mb, xb);
    if constexpr (kLazy) {
        if (ta) { // inlined: the branch folds away where no true maxima are wanted
            *ta = fmaxf(*ta, xa);
            *tb = fmaxf(*tb, xb);
        }
        if (!(xa > ma + (float)kRise)) na = ma;
        if (!(xb > mb + (float)kRise)) nb = mb;
    }
    const float ua = na == neg_inf() ? 0.0f : na, ub = nb == neg_inf() ? 0.0f : nb; // no key yet: e = 0
    fa = kLazy && na == ma ? 1.0f : fast_exp2(ma - ua);
    fb = kLazy && nb == mb ? 1.0f : fast_exp2(mb - ub);
    ma = na;
    mb = nb;
    float sa = 0.0f, sbs = 0.0f;
#pragma unroll
    for (int j = 0; j < N; j++) {
        s[j] = fast_exp2(kFused ? fmaf(s[j], scale, -((j & 2) ? ub : ua)) : s[j] - ((j & 2) ? ub : ua));
        if (j & 2) sbs += s[j];
        else sa += s[j];
    }
    la = la * fa + sa;
    lb = lb * fb + sbs;
}
// Pins accumulator registers in place around wgmma (keeps the compiler from moving their
// reads and writes across the fence and the wait).
template <int N>
__device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
// Keeps A-operand registers alive (unmodified) until here: a wgmma in flight still reads them.
template <int N>
__device__ __forceinline__ void pin_regs(const uint32_t (&r)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" ::"r"(r[i][0]), "r"(r[i][1]), "r"(r[i][2]), "r"(r[i][3]) : "memory");
}
// The accumulator operands of a wgmma ("+f" of d[i] .. d[i + 7], of 32, of 128 registers) and
// their places in the instruction text.
#define AITER_MLA__ACC8(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define AITER_MLA__ACC32(d, i) AITER_MLA__ACC8(d, i), AITER_MLA__ACC8(d, i + 8), AITER_MLA__ACC8(d, i + 16), AITER_MLA__ACC8(d, i + 24)
#define AITER_MLA__ACC128(d) AITER_MLA__ACC32(d, 0), AITER_MLA__ACC32(d, 32), AITER_MLA__ACC32(d, 64), AITER_MLA__ACC32(d, 96)
#define AITER_MLA__REGS32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define AITER_MLA__ACC64(d) AITER_MLA__ACC32(d, 0), AITER_MLA__ACC32(d, 32)
#define AITER_MLA__REGS64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define AITER_MLA__REGS128                                                                                                  \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"

// D (+)= A B, m64n64k16, A and B by descriptor (both K-major); accumulate = 0 starts D afresh.
__device__ __forceinline__ void mma_64x64_ss(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " AITER_MLA__REGS32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : AITER_MLA__ACC32(d, 0)
                 : "l"(da), "l"(db), "r"(accumulate));
}
// D += A B, m64n16k16 over 16-bit operands (f16 when F16, else bf16), A from registers (the
// m16n8k16 A fragment of each warp's 16 rows), B by descriptor, K-major.
template <bool F16>
__device__ __forceinline__ void mma_64x16_rs(float (&d)[8], const uint32_t (&a)[4], uint64_t db) {
    if constexpr (F16)
        asm volatile("wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, 1, 1, 1, 0;\n"
                     : AITER_MLA__ACC8(d, 0)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
    else
        asm volatile("wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, 1, 1, 1, 0;\n"
                     : AITER_MLA__ACC8(d, 0)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
// D += A B, m64n256k16, A from registers (the m16n8k16 A fragment of each warp's 16 rows), B by
// descriptor, MN-major (V: keys by rows, dims contiguous).
__device__ __forceinline__ void mma_64x256_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " AITER_MLA__REGS128 ", {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
                 : AITER_MLA__ACC128(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
// D += A B, m64n256k16, A by descriptor (K-major), B by descriptor, MN-major.
__device__ __forceinline__ void mma_64x256_ss(float (&d)[128], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " AITER_MLA__REGS128 ", %128, %129, p, 1, 1, 0, 1;\n}\n"
                 : AITER_MLA__ACC128(d)
                 : "l"(da), "l"(db), "r"(1));
}

// m64n128 products. KT: the shape's k and the operand types ("k16.f32.bf16.bf16"); IMMS: the
// scales of A and B (1) and, for 16-bit operands only, the transpose flags (8-bit operands are
// K-major only, and have none).
// D (+)= A B, A and B by descriptor; accumulate = 0 starts D afresh.
#define AITER_MLA__WGMMA_64x128_SS(KT, IMMS)                                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                \
                 "wgmma.mma_async.sync.aligned.m64n128" KT " " AITER_MLA__REGS64 ", %64, %65, p, " IMMS ";\n}\n"  \
                 : AITER_MLA__ACC64(d)                                                                          \
                 : "l"(da), "l"(db), "r"(accumulate))
// D += A B, A from registers (each warp's 16 rows as an mma.sync A fragment of the type), B by descriptor.
#define AITER_MLA__WGMMA_64x128_RS(KT, IMMS)                                                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                \
                 "wgmma.mma_async.sync.aligned.m64n128" KT " " AITER_MLA__REGS64 ", {%64, %65, %66, %67}, %68, p, " IMMS ";\n}\n" \
                 : AITER_MLA__ACC64(d)                                                                          \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1))
// k16 over 16-bit operands (f16 when F16, else bf16), both K-major.
template <bool F16>
__device__ __forceinline__ void mma_64x128_ss(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
    if constexpr (F16) AITER_MLA__WGMMA_64x128_SS("k16.f32.f16.f16", "1, 1, 0, 0");
    else AITER_MLA__WGMMA_64x128_SS("k16.f32.bf16.bf16", "1, 1, 0, 0");
}
// k16 over 16-bit operands, B MN-major.
template <bool F16>
__device__ __forceinline__ void mma_64x128_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
    if constexpr (F16) AITER_MLA__WGMMA_64x128_RS("k16.f32.f16.f16", "1, 1, 1");
    else AITER_MLA__WGMMA_64x128_RS("k16.f32.bf16.bf16", "1, 1, 1");
}
// k32 over e4m3: S += Q K^T (both by descriptor), O += P V (P from registers, V^T by descriptor).
__device__ __forceinline__ void mma_64x128_ss_e4m3(float (&d)[64], uint64_t da, uint64_t db, int accumulate) {
    AITER_MLA__WGMMA_64x128_SS("k32.f32.e4m3.e4m3", "1, 1");
}
__device__ __forceinline__ void mma_64x128_rs_e4m3(float (&d)[64], const uint32_t (&a)[4], uint64_t db) {
    AITER_MLA__WGMMA_64x128_RS("k32.f32.e4m3.e4m3", "1, 1");
}
// kPair: launched in clusters of two blocks that take the same keys (rows side by side), each
// widening half of every tile into both (fp8 keys; FlashMLA's "crossover"): the widening, the
// loader's bottleneck with 64 rows, is paid once per pair instead of once per block.
// maps.cache: the bf16 paged cache as a tensor map for TMA copies of whole key tiles (decode with
// pages of 64 keys or more, where a tile is 64 consecutive rows of one page): dims (576, cache
// row), boxes of 64 dims x 64 rows in the 128-byte swizzle, one shared block of a slot. Only
// the kTma instance reads it (its own instance: the test alone, in the loader of sparse bf16
// rows, measured SP1 5575 -> 5788 us on an H200).
// kSplit: the split scheme (below) for bf16 rows that mostly come from the L2 (top-k lists of
// a sparse or V4 pass).
// The decode's TMA maps: the bf16 paged cache (cache, kTma instances) and Q as [576 (512 for
// V4), H, tokens] bf16 in the 128-byte swizzle, boxes of 64 x 64 (q_on: decode_q_map made it, a
// pass's 64 rows being 64 heads of one token; else the loader copies Q by cp.async).
struct DecodeMaps {
    CUtensorMap cache, q;
    int q_on;
};
// kKept: MODEL1 rows loaded under the evict-normal L2 policy (load16_or_zero's kKept), for a
// caller's keys_shared.
template <int KVT, bool kPair = false, bool kTma = false, bool kSplit = false, bool kKept = false>
__global__ void __launch_bounds__(kThreads, 1) decode_wgmma_kernel(DecodeParams p, const __grid_constant__ DecodeMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) // sm_90a passes alone (a launch takes it only there)
    static_assert(!kKept || KVT == kV4Model1, "kept loads are MODEL1 rows'");
    static_assert(!kTma || (KVT == AITER_MLA_BF16 && !kPair), "the cache map is bf16 rows, a block's own");
    static_assert(!kSplit || (!Wide<KVT>::on && !kPair && !kTma), "the split scheme takes bf16 rows by cp.async");
    constexpr int kDq = qk_dims(KVT), kKSteps = kDq / 16; // k-steps of a row
    using W = Wide<KVT, kPair>;
    // bf16 rows take the softmax's fused P (online_softmax_rows' kFused); fp8 rows keep the
    // rounded product, which gives a lone key o = its widened row bit for bit (a GPU test)
    constexpr bool kFusedP = KVT == AITER_MLA_BF16 || KVT == kV4Bf16;
    using S = SmemOf<KVT, kSplit>;
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char *base = smem + ((1024 - (smem_addr(smem) & 1023)) & 1023); // the swizzle repeats every 1024 bytes
    const uint32_t sb = smem_addr(base), bars = sb + S::bars;
    const int tid = threadIdx.x, wgi = tid >> 7, t = tid & 127, lane = tid & 31;
    const int ra = (t >> 5) * 16 + (lane >> 2), rb = ra + 8; // this thread's rows of the accumulators
    float *alpha_s = reinterpret_cast<float *>(base + S::alpha), *inv_s = reinterpret_cast<float *>(base + S::inv);
    long long *row_at = reinterpret_cast<long long *>(base + S::row_at);
    uint32_t *valid_s = reinterpret_cast<uint32_t *>(base + S::valid);
    uint16_t *lut = reinterpret_cast<uint16_t *>(base + S::lut);
    const aiter_mla_decode_args &a = p.a;
    const int H = a.num_heads;
    // in a pair: this block's rank (its half of every tile: keys 32 rank ..) and the other's base
    const int rank = kPair ? cluster_rank() : 0;
    const uint32_t peer_sb = kPair ? peer_addr(sb, rank ^ 1) : 0;
    // a tile's half from the other block of a pair, in two hand-overs: 32 widened rows of the
    // first kFirstBlocks 64-dim blocks (kFirst), then of the rest and its 4 warps' present words
    // (kFull). ptxas issues the row loads of the first part before the wait for the slot and
    // the rest after it, so a larger first part puts more of the tile's load latency under
    // that wait: after 3, 4, 5, 6, 7 of the 9 blocks, SD1 439, 416, 405, 402, 416 us (H200,
    // three runs each in three calls); after 7 the rest comes too late.
    constexpr int kFirstBlocks = 6, kFirstKSteps = kFirstBlocks * 4;
    constexpr uint32_t kPeerFirstBytes = kFirstBlocks * kBlk / 2, kPeerRestBytes = (kDq / 64 - kFirstBlocks) * kBlk / 2 + 4 * 4;
    if (tid < kHandoffs) mbar_init(bars + 8 * tid, handoff_arrivals(tid, kPair, kSplit));
    if (W::lut) fill_fnuz_lut(lut, tid, kThreads);
    if constexpr (kPair) { // the other block's mbarriers are ready before anything arrives on them
        fence_mbar_init();
        cluster_sync();
    } else {
        __syncthreads(); // the mbarriers and the table are ready; from here on the warpgroups only meet at the handoffs
    }
    uint32_t phases = 0; // the parity of the next phase this thread waits for, one bit per handoff
    auto wait = [&](int h) { mbar_wait<kPair>(bars, h, phases); };
    auto arrive = [&](int h) { mbar_arrive(bars + 8 * h); };
    // handoffs both blocks of a pair take part in: this block's and the other's. relaxed: the
    // arrival on the other block's orders none of this thread's accesses (a consumer's release
    // of a slot, whose wgmma reads are complete)
    auto arrive_both = [&](int h, bool relaxed = false) {
        mbar_arrive(bars + 8 * h);
        if constexpr (kPair) {
            if (relaxed) mbar_arrive_cluster_relaxed(peer_sb + S::bars + 8 * h);
            else mbar_arrive_cluster(peer_sb + S::bars + 8 * h);
        }
    };
    auto tiles_of = [](const Piece &pc) { return (int)((pc.n + kN - 1) / kN); };
    // A block's passes over a piece: 64 rows each. The blocks of a pair run in step, one pass
    // per piece (their pieces have at most 64 rows), with no rows when a short query tile
    // leaves the block none.
    auto pass_end = [](const Piece &pc) { return kPair ? max(pc.re, pc.rb + 1) : pc.re; };

    // The end of a pass (both consumers), once warpgroup 0 has left each row's o factor in inv_s
    // and its start in row_at: stage the rows as fp32 over the slots and P, store them,
    // consecutive threads on consecutive dims, and hand Q, the slots and P back to the loader.
    auto finish_pass = [&](const float (&acc)[128], const Piece &pc, int R) {
        consumers_sync(); // both are done with the slots and P; inv_s and row_at are written
        float *stage_o = reinterpret_cast<float *>(base + S::keys); // [64][kStageRow]
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int row = half ? rb : ra;
            if (row >= R) continue;
            const float inv = inv_s[row];
#pragma unroll
            for (int j = 0; j < 32; j++) {
                const int d = wgi * 256 + j * 8 + (lane & 3) * 2;
                *reinterpret_cast<float2 *>(stage_o + row * kStageRow + d) = make_float2(acc[4 * j + 2 * half] * inv, acc[4 * j + 2 * half + 1] * inv);
            }
        }
        consumers_sync(); // the rows are staged
        store_staged_rows(p, pc, stage_o, row_at, R, tid, 2 * 128);
        // Both meet once every row is stored: a split piece counts its rows then; and a consumer
        // must not reach the next pass's publish_rows, which rewrites row_at and inv_s, while
        // other warps still store by them. Without this meeting only the one-softmax loader's
        // order kept that (its next Q after kDone); the split loader hands the next Q over first,
        // and a warp ran through a pass without keys into publish_rows (racecheck; V4 tokens
        // without keys, several a block).
        const bool counted = p.arrivals && pc.loc >= 0;
        consumers_sync();
        if constexpr (kPair) fence_async_shared(); // the staged rows (generic) before the other block's copies over them
        arrive_both(kDone); // first: the loader waits for it before the next pass's Q, not for the fence
        if (counted && tid == 128) count_stored_rows(p, pc, R); // warpgroup 1, which waits for warpgroup 0's P next
    };

    // A row's sum from the shares of its quad's 4 threads.
    auto quad_sum = [](float &l) {
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
    };
    // Warpgroup 0 at a pass's end, from its rows' totals (m in log2 units, l): the rows' lse (and
    // max_logits), o factors and starts.
    auto publish_rows = [&](const Piece &pc, int r0, int R, float ma, float mb, float la, float lb, float ta, float tb) {
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int row = half ? rb : ra;
            if (row >= R || (lane & 3) != 0) continue;
            float inv;
            row_at[row] = finish_row(p, pc, r0 + row, half ? mb : ma, half ? lb : la, true, &inv, half ? tb : ta);
            inv_s[row] = inv;
        }
    };
    // A consumer's view of tile i in slot `slot`: its present keys (the loader's bits), the mask
    // of S (absent keys, each row's key limit), P as wgmma A fragments, P into its block.
    auto present_of = [&](int slot) {
        static_assert(kPresentWords == 4, "a tile's present keys are read as one uint4");
        if constexpr (kPair) { // the 8 warps' words, 8 keys each
            const uint4 lo = *reinterpret_cast<const uint4 *>(valid_s + slot * kValidWords);
            const uint4 hi = *reinterpret_cast<const uint4 *>(valid_s + slot * kValidWords + 4);
            return make_uint4(lo.x | lo.y << 16, lo.z | lo.w << 16, hi.x | hi.y << 16, hi.z | hi.w << 16);
        }
        return *reinterpret_cast<const uint4 *>(valid_s + slot * kValidWords);
    };
    auto mask_tile = [&](float (&s)[32], const Piece &pc, int i, long long lima, long long limb, const uint4 &present) {
        const int64_t k0 = (int64_t)i * kN;
        const int nk = (int)min((int64_t)kN, pc.n - k0);
        const int kma = tile_key_limit(pc, lima, k0, nk), kmb = tile_key_limit(pc, limb, k0, nk);
        if ((present.x & present.y & present.z & present.w) != ~0u || min(kma, kmb) < kN - 1) {
            // key c of s[j] is word j / 8's bit 2 c % 32 = 16 (j / 4 % 2) + 4 (lane % 4) + 2 (j % 2)
            const uint32_t pw[4] = {present.x >> 4 * (lane & 3), present.y >> 4 * (lane & 3), present.z >> 4 * (lane & 3),
                                    present.w >> 4 * (lane & 3)};
#pragma unroll
            for (int j = 0; j < 32; j++) {
                const int c = (j >> 2) * 8 + (lane & 3) * 2 + (j & 1);
                if (!(pw[j >> 3] >> (16 * ((j >> 2) & 1) + 2 * (j & 1)) & 1u) || c > ((j & 2) ? kmb : kma)) s[j] = neg_inf();
            }
        }
    };
    // P as the A fragments of the 4 k-steps (keys 16 kk ..): the accumulator layout of two
    // n8-tiles is that of an m16n8k16 A fragment
    auto p_frags = [](const float (&s)[32], uint32_t (&pa)[4][4]) {
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            pa[kk][0] = pack_bf16x2(s[8 * kk], s[8 * kk + 1]);
            pa[kk][1] = pack_bf16x2(s[8 * kk + 2], s[8 * kk + 3]);
            pa[kk][2] = pack_bf16x2(s[8 * kk + 4], s[8 * kk + 5]);
            pa[kk][3] = pack_bf16x2(s[8 * kk + 6], s[8 * kk + 7]);
        }
    };
    auto store_p = [&](const uint32_t (&pa)[4][4], int slot) { // into P's swizzled block: keys 16 kk + 2 (lane & 3), + 8
        uint32_t *p_s = reinterpret_cast<uint32_t *>(base + S::p_at(slot));
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const int w = (lane & 3);
            p_s[(swz(ra, 2 * kk) >> 2) + w] = pa[kk][0];
            p_s[(swz(rb, 2 * kk) >> 2) + w] = pa[kk][1];
            p_s[(swz(ra, 2 * kk + 1) >> 2) + w] = pa[kk][2];
            p_s[(swz(rb, 2 * kk + 1) >> 2) + w] = pa[kk][3];
        }
    };
    // O[:, 256 half ..] += P V over slot `slot`'s tile (V: its dims 256 half .., blocks 4 half ..),
    // issued, not committed: P from registers (pa) or from P's block of slot `pslot`
    auto v_desc = [&](int slot, int half) { return desc(sb + S::keys + slot * S::slot + 4 * half * kBlk, kBlk, 1024); };
    auto pv_regs = [&](float (&acc)[128], const uint32_t (&pa)[4][4], int slot, int half) {
        const uint64_t dv = v_desc(slot, half);
#pragma unroll
        for (int kk = 0; kk < kN / 16; kk++) mma_64x256_rs(acc, pa[kk], desc_plus(dv, kk * 2048));
    };
    auto pv_smem = [&](float (&acc)[128], int pslot, int slot, int half) {
        const uint64_t dp = desc(sb + S::p_at(pslot), 16, 1024), dv = v_desc(slot, half);
#pragma unroll
        for (int kk = 0; kk < kN / 16; kk++) mma_64x256_ss(acc, desc_plus(dp, kk * 32), desc_plus(dv, kk * 2048));
    };
    // S (+)= Q K^T over the k-steps [k0, k1) of slot `slot`, issued, not committed
    auto issue_s = [&](float (&s)[32], int slot, int k0, int k1, bool clear) {
        const uint64_t dq = desc(sb + S::q, 16, 1024), dk = desc(sb + S::keys + slot * S::slot, 16, 1024);
#pragma unroll
        for (int kk = k0; kk < k1; kk++) {
            const uint32_t off = kstep_offset(kk, kBlk);
            mma_64x64_ss(s, desc_plus(dq, off), desc_plus(dk, off), !clear || kk > k0);
        }
    };

    if (wgi == 2) {
        // Loader: Q and the key tiles of each pass, tile i into slot i & 1, two tiles ahead of
        // the consumers. A pass's Q loads once the pass before has done its products with Q
        // (kQFree), while that pass's rows are still staged over the slots and stored. With
        // sparse blocks that take several tokens (launch_mma), H100 against a block per token
        // and Q after the stores: V4P-h64-ws 3417 -> 2960 us, SP1 5275 -> 4990; D3, D4 the
        // same; each alone moved V4P-h64-ws 3395 -> 3396 (early Q) and 3292 (several tokens).
        // fp8 keys: two threads per key (see Wide). bf16 keys: each warp brings 16
        // keys, 8 threads a key, so that each copy instruction reads four whole 128-byte lines
        // (with two threads a key, an instruction read 32 bytes of each of 16 rows: D3 465 -> 450
        // us, D6 319 -> 293, SP1 5845 -> 5577).
        regs_set<Regs<W::on, kPair, kSplit>::load>();
        const int my_part = t & (W::parts - 1);
        // Slot s holds tile i as far as this block's loader goes: its writes (cp.async copies
        // waited for, or widened stores) made visible to wgmma, then each thread's arrival. In a
        // pair each loader widens its half of the tile (keys 32 rank ..) into its own slot only;
        // once all its threads have written the 64-dim blocks [b0, b1), the first copies those
        // rows into the other block's slot (rows 32 rank .. of each 64-row block, 4 KB
        // contiguous, the same offsets in both), completing bytes on that block's mbarrier h + s,
        // and announces the other's on its own: kFirst + s for the first kFirstBlocks (put_as
        // hands them over on the way), kFull + s for the rest with the 4 present words. Its arrival
        // on kFull does not wait for its copies: warpgroup 0 waits for kSent before it writes P.
        auto hand_over = [&](int s, int h, int b0, int b1, uint32_t peer_bytes, bool words_too) {
            fence_async_shared();
            if constexpr (kPair) {
                named_sync<2, 128>(); // the loader's threads (the consumers' barrier is 1)
                if (t == 0) {
                    const uint32_t slot_off = S::keys + s * S::slot, bar = peer_sb + S::bars + 8 * (h + s);
                    for (int b = b0; b < b1; b++) {
                        const uint32_t off = slot_off + b * kBlk + rank * (kBlk / 2);
                        copy_to_peer(peer_sb + off, sb + off, kBlk / 2, bar);
                    }
                    if (words_too) {
                        const uint32_t words = S::valid + (s * kValidWords + 4 * rank) * 4;
                        copy_to_peer(peer_sb + words, sb + words, 16, bar);
                    }
                    mbar_arrive_expect_tx(bars + 8 * (h + s), peer_bytes);
                    return;
                }
            }
            arrive(h + s);
        };
        auto tile_full = [&](int s) { hand_over(s, kFull, kPair ? kFirstBlocks : 0, S::blocks, kPeerRestBytes, true); };
        auto my_key = [&](int q) { return W::on ? 32 * rank + t / W::parts : (t >> 5) * 16 + (lane >> 3) + 4 * q; };
        struct Staged {
            uint4 v[W::on ? W::loads : 1], scales;
        };
        // fp8: this thread's share of a key row into registers (zeros for an absent key)
        auto fetch = [&](const KeyRef &k, Staged &st) {
            if constexpr (W::on) {
                const bool ok = k.row != nullptr;
                const unsigned char *row = ok ? k.row : static_cast<const unsigned char *>(a.q); // a.q: not read
#pragma unroll
                for (int j = 0; j < W::loads; j++) st.v[j] = load16_or_zero<KVT == kV4Model1, kKept>(row + W::chunk_at(j, my_part), ok);
                if constexpr (is_ds_mla(KVT)) st.scales = load16_or_zero(row + kL, ok); // the four fp32 group scales
                if constexpr (KVT == kV4Model1) st.scales = load16_or_zero<true>(ok ? k.scales : row, ok); // the even and the odd row's 8
            }
        };
        // Whether tile i comes by TMA: a whole tile of a present page (all of a tile's keys lie in
        // one page, so every thread's first key tells); the loader's threads agree.
        auto by_tma = [&](const Piece &pc, int i, const KeyRef (&keys)[W::keys]) {
            return kTma && (int64_t)(i + 1) * kN <= pc.n && keys[0].row != nullptr;
        };
        // bf16 keys: the 64-dim blocks [B0, B1) of the thread's keys into slot `slot` by cp.async
        // (a 16-byte chunk of each block a thread, zero-filled when the key is absent) or, for a
        // tile by_tma, by TMA from the first thread (its first key is the tile's first row),
        // counted on mbarrier bar; with `present_too`, the warp's present keys into the slot's
        // word as well. B0, B1: Const, so that the copies unroll to one instruction each.
        auto put_rows = [&](int slot, bool tma, const KeyRef (&keys)[W::keys], auto b0, auto b1, uint32_t bar, bool present_too) {
            constexpr int B0 = decltype(b0)::value, B1 = decltype(b1)::value;
            const uint32_t dst = sb + S::keys + slot * S::slot;
            if (tma && t == 0) {
                // the consumers' generic accesses to the slot (P, staged o) come before TMA's writes
                fence_async_shared();
                const int row = (int)((keys[0].row - static_cast<const unsigned char *>(a.kv_cache)) / cache_row_bytes(KVT));
                mbar_expect_tx(bar, (B1 - B0) * kBlk);
#pragma unroll
                for (int b = B0; b < B1; b++) tma_load_2d(dst + b * kBlk, &maps.cache, 64 * b, row, bar);
            }
            uint32_t present = 0; // the warp's 16 keys: key c at bits 2 c, 2 c + 1
#pragma unroll
            for (int q = 0; q < W::keys; q++) {
                const KeyRef &k = keys[q];
                if (!tma) {
                    const int key = my_key(q);
                    const uint32_t d = dst + swz(key, lane & 7); // chunk lane & 7 of block 0
                    // absent: a.q, an address for the zero-filling copies, which read nothing
                    const unsigned char *src = k.row ? k.row + (lane & 7) * 16 : static_cast<const unsigned char *>(a.q);
                    const int bytes = k.row ? 16 : 0;
#pragma unroll
                    for (int b = B0; b < B1; b++) cp_async16(d + b * kBlk, src + b * 128, bytes);
                }
                if (present_too) {
                    const uint32_t bal = __ballot_sync(0xffffffffu, k.kind != 0); // key 4 q + j at lane 8 j
#pragma unroll
                    for (int j = 0; j < 4; j++) present |= (bal >> 8 * j & 1u) * (3u << 2 * (4 * q + j));
                }
            }
            if (present_too && lane == 0) valid_s[slot * kValidWords + (t >> 5)] = present;
        };
        // the key into slot `slot`: bf16 by put_rows; fp8 widened from st; rule (a FnuzRule) picks
        // the e4m3 flavour
        auto put_as = [&](int slot, bool tma, const KeyRef (&keys)[W::keys], const Staged &st, auto rule) {
            [[maybe_unused]] constexpr int kRule = decltype(rule)::value;
            if constexpr (!W::on) {
                put_rows(slot, tma, keys, Const<0>{}, Const<S::blocks>{}, bars + 8 * (kFull + slot), true);
            } else {
                const KeyRef &k = keys[0];
                const int key = my_key(0);
                const bool fnuz = kRule == kFnuzByKind ? (k.kind & kKindFnuz) != 0 : kRule == kFnuzAlways;
                [[maybe_unused]] const bool odd = (k.kind & kKindOddScales) != 0; // MODEL1 only
                const uint32_t slot_off = S::keys + slot * S::slot;
                auto store = [&](uint32_t off, uint4 v) { store16_shared(sb + slot_off + off, v); };
                constexpr int kParts = W::parts;
#pragma unroll
                for (int j = 0; j < W::nope / kParts; j++) {
                    const int c = my_part + kParts * j; // e4m3 chunk: dims 16 c .. 16 c + 15
                    const uint2 v0 = make_uint2(st.v[j].x, st.v[j].y), v1 = make_uint2(st.v[j].z, st.v[j].w);
                    uint4 lo, hi;
                    if constexpr (is_ds_mla(KVT)) { // 128-dim groups: chunk c's is c >> 3 = (parts j) >> 3
                        const int g = (kParts * j) >> 3;
                        const uint32_t bits = g == 0 ? st.scales.x : g == 1 ? st.scales.y : g == 2 ? st.scales.z : st.scales.w;
                        lo = e4m3x8_to_bf16x8_times(v0, fnuz, lut, __uint_as_float(bits));
                        hi = e4m3x8_to_bf16x8_times(v1, fnuz, lut, __uint_as_float(bits));
                    } else if constexpr (KVT == kV4Model1) { // 64-dim blocks: chunk c's exponent byte is c >> 2 = (parts j) >> 2
                        const int b = (kParts * j) >> 2;
                        const uint32_t word = b < 4 ? (odd ? st.scales.z : st.scales.x) : (odd ? st.scales.w : st.scales.y);
                        const uint32_t s2 = ue8m0_to_bf16x2((uint8_t)(word >> 8 * (b & 3)));
                        lo = e4m3x8_to_bf16x8_scaled(v0, fnuz, lut, s2);
                        hi = e4m3x8_to_bf16x8_scaled(v1, fnuz, lut, s2);
                    } else {
                        lo = e4m3x8_to_bf16x8(v0, fnuz, lut);
                        hi = e4m3x8_to_bf16x8(v1, fnuz, lut);
                    }
                    store(swz(key, 2 * c), lo);
                    store(swz(key, 2 * c + 1), hi);
                    // chunk j's dims are block j's: the first blocks are done
                    if constexpr (kPair)
                        if (j + 1 == kFirstBlocks) hand_over(slot, kFirst, 0, kFirstBlocks, kPeerFirstBytes, false);
                }
#pragma unroll
                for (int j = W::nope / kParts; j < W::loads; j++) // the bf16 rope, as it is
                    store(swz(key, W::nope * 2 + my_part + kParts * (j - W::nope / kParts)), st.v[j]);
                const uint32_t ballot = __ballot_sync(0xffffffffu, k.kind != 0);
                if constexpr (!kPair) { // the tile's present keys: a warp's 16 keys, both threads of each, a word
                    if (lane == 0) valid_s[slot * kValidWords + (t >> 5)] = ballot;
                } else { // a warp's 8 keys, four threads each: its word (key 8 w + c at bits 2 c, 2 c + 1)
                    uint32_t word = 0;
#pragma unroll
                    for (int c = 0; c < 8; c++) word |= (ballot >> 4 * c & 1u) * (3u << 2 * c);
                    const int w = 4 * rank + (t >> 5); // the warp's keys: 8 w ..
                    if (lane == 0) valid_s[slot * kValidWords + w] = word;
                }
            }
        };
        const bool v4_fnuz = is_v4(KVT) && v4_lists_fnuz(p);
        auto put = [&](int slot, bool tma, const KeyRef (&keys)[W::keys], const Staged &st) {
            with_fnuz_rule<KVT>(v4_fnuz, [&](auto rule) { put_as(slot, tma, keys, st, rule); });
        };
        // The thread's keys of tile i from their indices (next), which become those of tile i + 1.
        // Paged keys: each thread looks up its 4 keys itself (a page id and a shift). V4 keys (a
        // list entry, then a page lookup, most of the loader's integer work): the 8 threads of a
        // key group look up one key each and share them by shuffles (looked up 4 times a thread,
        // V4P-h64-ws measured 3660 -> 4390 us).
        constexpr bool kShare = W::keys > 1 && is_v4(KVT);
        constexpr int kLookups = kShare ? 1 : W::keys; // keys a thread looks up per tile
        // (next then holds those of tile i + step; with `later`, next takes later's indices and
        // later those of tile i + step, so that no move waits for the load just issued; threads
        // that share lookups (kShare) take no `later`)
        auto look_up = [&](const Piece &pc, int i, int32_t (&next)[kLookups], KeyRef (&keys)[W::keys], int step = 1,
                           int32_t (*later)[kLookups] = nullptr) {
            if constexpr (kShare) {
                const KeyRef mine = key_ref<KVT>(p, pc, (int64_t)i * kN + my_key(lane & 3), next[0]);
                next[0] = key_entry<KVT>(p, pc, (int64_t)(i + step) * kN + my_key(lane & 3));
#pragma unroll
                for (int q = 0; q < W::keys; q++) {
                    const int from = (lane & ~7) | q;
                    keys[q] = KeyRef{};
                    keys[q].row = shfl_bytes_ptr(mine.row, from);
                    keys[q].kind = aiter_mla__shfl(mine.kind, from);
                }
            } else {
#pragma unroll
                for (int q = 0; q < kLookups; q++) {
                    keys[q] = key_ref<KVT>(p, pc, (int64_t)i * kN + my_key(q), next[q]);
                    int32_t &into = later ? (*later)[q] : next[q];
                    if (later) next[q] = (*later)[q];
                    into = key_entry<KVT>(p, pc, (int64_t)(i + step) * kN + my_key(q));
                }
            }
        };

        // Rows brought through registers (fp8_ds_mla, per-tensor e4m3): the loader holds one tile
        // in flight, so a tile's HBM latency would fall between the slot freeing up and the
        // consumers needing it; each row is pulled into the L2 one tile before its loads are
        // issued (SD1 824 -> 702 us; D3-fp8 610-615 -> 567-580, H100, same run). For bf16 rows
        // (cp.async) and MODEL1 pages the same prefetch measured slower (D3 519 -> 599 us, SP1 6954
        // -> 7647, V4P-h64 8410 -> 8840); so did per-tensor e4m3 in pairs of blocks (D3-fp8 611-624
        // -> 661-663). Per-tensor e4m3 rows: a bulk prefetch of the whole row from one thread a key,
        // which compiles to a loop over the warp's lanes, a pass per address (~850 cycles a tile of
        // the loader's ~6200, clock64). fp8_ds_mla rows: a prefetch instruction per 128-byte line,
        // the key's threads taking alternate lines (H200, same call, two runs each: SD1 429.3 /
        // 430.9 -> 411.6 / 412.1 us; the same for per-tensor e4m3, D3-fp8 481.4 / 483.3 -> 494.1 /
        // 494.4).
        constexpr bool kWarm = is_ds_mla(KVT) || is_e4m3(KVT);
        auto warm = [&](const Piece &pc, int i, const int32_t (&entry)[kLookups]) { // tile i; entry: the thread's indices in it
            if constexpr (kWarm) {
                constexpr int kBytes = cache_row_bytes(KVT);
                const KeyRef k = key_ref<KVT>(p, pc, (int64_t)i * kN + my_key(0), entry[0]);
                if constexpr (is_ds_mla(KVT)) {
                    // the lines of row + 128 m, m = part, part + parts, ..., the last taken at the row's last byte
                    constexpr int kLines = (kBytes + 127) / 128 + 1;
                    if (k.row)
#pragma unroll
                        for (int m = 0; m < (kLines + W::parts - 1) / W::parts; m++) {
                            const int line = my_part + W::parts * m;
                            if (line < kLines) prefetch_line_l2(k.row + min(128 * line, kBytes - 1));
                        }
                } else {
                    if (my_part == 0 && k.row) prefetch_l2(k.row, kBytes);
                }
            }
        };

        bool first = true;
        for_each_piece<!kSplit>(p, [&](const Piece &pc) {
            const int ntiles = tiles_of(pc);
            for (int r0 = pc.rb; r0 < pass_end(pc); r0 += kM) {
                const int R = max(0, min(kM, pc.re - r0));
                // Q while the pass before ends (its products are done with Q), then the indices of
                // the first keys, then the slots once that pass's rows are stored
                if (!first) wait(kQFree);
                if (ntiles > 0) { // Q (no consumer reads Q in a pass without keys)
                    if (maps.q_on) {
                        // by TMA, counted on kQReady: by cp.async (4608 a pass) Q held the loader ~13.7 k
                        // cycles a pass (D3, clock64), and with it the next pass's first tiles. H200,
                        // against cp.async in one call, two runs each: D3 317.8 -> 305.0 us, SD1 400.7 ->
                        // 393.5, SP1 4959 -> 4750, V4P-h64-ws 2853 -> 2531
                        if (t == 0) { // the pass's 64 rows: heads r0 % H .. of token row_token(r0)
                            mbar_expect_tx(bars + 8 * kQReady, kDq / 64 * kBlk);
#pragma unroll
                            for (int b = 0; b < kDq / 64; b++)
                                tma_load_3d(sb + S::q + b * kBlk, &maps.q, 64 * b, r0 % H, row_token(pc, r0, H), bars + 8 * kQReady);
                        }
                    } else {
                        copy_q_rows<kDq, takes_fp8_q(KVT), 4>(a, pc, r0, R, kM, t, 128, [&](int r, int part) { return sb + S::q + swz(r, part); });
                    }
                }
                if constexpr (kSplit) {
                    arrive(kQReady);
                    cp_async_arrive_noinc(bars + 8 * kQReady);
                }
                // the indices of the thread's keys in tiles 0 and 1 (the split scheme, and rows warmed
                // in the L2: two tiles ahead; else tile 1's come with tile 0's lookup)
                constexpr bool kTwoAhead = kSplit || kWarm;
                int32_t next_a[kLookups], next_b[kTwoAhead ? kLookups : 1];
#pragma unroll
                for (int q = 0; q < kLookups; q++) {
                    next_a[q] = key_entry<KVT>(p, pc, my_key(kShare ? lane & 3 : q));
                    if constexpr (kTwoAhead) next_b[q] = key_entry<KVT>(p, pc, kN + my_key(kShare ? lane & 3 : q));
                }
                if (!first) wait(kDone);
                first = false;
                if constexpr (kSplit) {
                    // Each pair of tiles, 2 j into slot 0 and 2 j + 1 into slot 1, half by half in the
                    // order the consumers free them (slot 0's dims 0 .. 255 after warpgroup 0's P V of
                    // them, slot 1's other half after warpgroup 1's, ...). Every handoff of a half is a
                    // plain arrival of each thread and one that comes when the thread's copies have
                    // landed: the loader never waits for its own copies, so no proxy fence follows them
                    // (the other loaders fence after their wait); the consumers' wgmma read the
                    // copies once the mbarrier completes, as in CUTLASS's and FlashAttention 3's sm90
                    // cp.async mainloops. A fence by the consumers after each such wait measured
                    // 0.6-0.9 % slower (SP1, V4P-ws) and is not taken.
                    auto put_half = [&](int slot, auto half, const KeyRef (&keys)[W::keys]) { // by cp.async (no TMA here)
                        constexpr int f = decltype(half)::value; // 0: dims 0 .. 255 (blocks 0 .. 3), 1: the rest
                        const int h = kHalfReady + 2 * slot + f;
                        // the present keys with the half a slot takes first, which both its readers wait for
                        put_rows(slot, false, keys, Const<f ? 4 : 0>{}, Const<f ? S::blocks : 4>{}, bars + 8 * h, f == slot);
                        arrive(h);
                        cp_async_arrive_noinc(bars + 8 * h);
                    };
                    for (int j = 0; 2 * j < ntiles; j++) {
                        const bool has_b = 2 * j + 1 < ntiles;
                        KeyRef ka[W::keys], kb[W::keys];
                        look_up(pc, 2 * j, next_a, ka, 2);
                        if (j > 0) wait(kHalfFree + 0);
                        put_half(0, Const<0>{}, ka);
                        if (has_b) {
                            look_up(pc, 2 * j + 1, next_b, kb, 2);
                            if (j > 0) wait(kHalfFree + 3);
                            put_half(1, Const<1>{}, kb);
                        }
                        if (j > 0) wait(kHalfFree + 1);
                        put_half(0, Const<1>{}, ka);
                        if (has_b) {
                            if (j > 0) wait(kHalfFree + 2);
                            put_half(1, Const<0>{}, kb);
                        }
                    }
                } else {
                    // Tile i's keys; next_a then holds the indices of tile i + 1's. Warmed rows need
                    // them a tile before their loads (warm), when the load of the indices would
                    // otherwise just have been issued (SD1: 9 % of the loader's stall samples): their
                    // indices come two tiles ahead, tile i + 1's moving from next_b to next_a before
                    // tile i + 2's load goes into next_b, so that no move waits for a load in flight
                    // (on its own no faster than moving the new one: SD1, D3-fp8 within 0.7 %)
                    auto look_up_tile = [&](int i, KeyRef (&keys)[W::keys]) {
                        static_assert(!kWarm || !kShare, "warmed rows are looked up by each thread");
                        if constexpr (kWarm) look_up(pc, i, next_a, keys, 2, &next_b);
                        else look_up(pc, i, next_a, keys);
                    };
                    // tiles 0 and 1; commit groups (Q and tile 0), (tile 1): empty ones for fp8 and past the keys
                    for (int i = 0; i < 2; i++) {
                        if (i < ntiles) {
                            KeyRef keys[W::keys];
                            look_up_tile(i, keys);
                            Staged st;
                            fetch(keys[0], st);
                            put(i, by_tma(pc, i, keys), keys, st);
                        }
                        cp_async_commit();
                    }
                    warm(pc, 2, next_a);
                    cp_async_wait<1>(); // Q and tile 0
                    fence_async_shared();
                    arrive(kQReady);
                    if (ntiles > 0) tile_full(0);
                    for (int i = 0; i < ntiles; i++) {
                        if (i + 1 < ntiles) { // tile i + 1 (put since tile i - 1)
                            cp_async_wait<0>();
                            tile_full((i + 1) & 1);
                        }
                        if (i + 2 < ntiles) { // tile i + 2 into slot i & 1 once both consumers are done with tile i
                            KeyRef keys[W::keys];
                            look_up_tile(i + 2, keys);
                            Staged st;
                            fetch(keys[0], st); // in flight while the wait lasts
                            warm(pc, i + 3, next_a);
                            wait(kEmpty + (i & 1));
                            put(i & 1, by_tma(pc, i + 2, keys), keys, st);
                            cp_async_commit();
                        }
                    }
                }
            }
        });
    } else if constexpr (kSplit) {
        // The split scheme (bf16 rows; FlashMLA's sparse prefill on Hopper): the tiles go by pairs,
        // tile i = 2 j in slot 0 and i + 1 in slot 1. Warpgroup 0 computes S of tile i and its
        // softmax, warpgroup 1 those of tile i + 1 from the running maxima warpgroup 0 then has, so
        // that while one runs its softmax the other's products keep the tensor pipe busy. Each
        // keeps half of O: warpgroup 0 dims 0 .. 255 over both tiles (P of tile i from registers,
        // P of i + 1 from warpgroup 1 through shared memory), warpgroup 1 dims 256 .. 511. A slot's
        // halves go back to the loader one by one as their last reader is done (slot 0's first
        // half after warpgroup 0's P V of it, ...), and the S of the next pair starts on the half
        // that came first. The rows' (lazy) maxima pass between the two by m_s; a pair's P and O
        // end on warpgroup 1's maxima, which both keep. At a pass's end m_s brings warpgroup 1's
        // true maxima to warpgroup 0 (max_logits).
        float *m_s = alpha_s, *l_s = alpha_s + kM;
        constexpr int kHalfSteps = 16; // the k-steps of a slot's first half (dims 0 .. 255)
        auto zero_max = [](float m) { return m == neg_inf() ? 0.0f : m; }; // no key yet: e = 0
        if (wgi == 0) {
            regs_set<Regs<W::on, kPair, kSplit>::softmax>();
            for_each_piece<!kSplit>(p, [&](const Piece &pc) {
                const int ntiles = tiles_of(pc);
                for (int r0 = pc.rb; r0 < pass_end(pc); r0 += kM) {
                    const int R = max(0, min(kM, pc.re - r0));
                    const long long lima = row_key_limit(pc, r0 + ra, H), limb = row_key_limit(pc, r0 + rb, H);
                    float acc[128]; // O rows ra, rb; dims 8 j + 2 (lane & 3) (+1) in acc[4 j ..]
#pragma unroll
                    for (int e = 0; e < 128; e++) acc[e] = 0.0f;
                    float ma = neg_inf(), mb = neg_inf(), la = 0.0f, lb = 0.0f; // l: this thread's share of the row sums
                    float ta = neg_inf(), tb = neg_inf(); // the rows' true maxima over tiles i (max_logits)
                    float s[32];
                    wait(kQReady);
                    if (ntiles > 0) {
                        wait(kHalfReady + 0);
                        wgmma_fence();
                        issue_s(s, 0, 0, kHalfSteps, true);
                        wait(kHalfReady + 1);
                        issue_s(s, 0, kHalfSteps, kKSteps, false);
                        wgmma_commit();
                        wgmma_wait0();
                        pin(s);
                    }
                    for (int i = 0; i < ntiles; i += 2) {
                        const bool has_b = i + 1 < ntiles;
                        mask_tile(s, pc, i, lima, limb, present_of(0));
                        float fa, fb;
                        online_softmax_rows<32, kFusedP, true>(s, p.score_scale, ma, mb, la, lb, fa, fb, &ta, &tb); // lazy m
                        if ((lane & 3) == 0) {
                            m_s[ra] = ma;
                            m_s[rb] = mb;
                        }
                        arrive(kMaxA); // tile i's maxima are in m_s
                        uint32_t pa[4][4];
                        p_frags(s, pa);
                        rescale_rows_unless_one(acc, fa, fb);
                        pin(acc);
                        wgmma_fence();
                        pv_regs(acc, pa, 0, 0);
                        wgmma_commit();
                        wgmma_wait0();
                        pin(acc);
                        if (i + 2 < ntiles) arrive(kHalfFree + 0);
                        wait(kMaxB); // the pair's maxima are in m_s
                        const float na = m_s[ra], nb = m_s[rb];
                        const float ga = fast_exp2(ma - zero_max(na)), gb = fast_exp2(mb - zero_max(nb));
                        ma = na;
                        mb = nb;
                        // mostly 1 (lazy maxima): then P's fragments stand and O and l keep their scale
                        const bool moved = __any_sync(0xffffffffu, ga != 1.0f || gb != 1.0f);
                        if (moved) {
#pragma unroll
                            for (int j = 0; j < 32; j++) s[j] *= (j & 2) ? gb : ga;
                            p_frags(s, pa);
                        }
                        store_p(pa, 0); // S, the only other reader of slot 0's rope block, is done
                        fence_async_shared();
                        arrive(kP0); // P of tile i is in
                        if (moved) {
                            rescale_rows(acc, ga, gb);
                            la *= ga;
                            lb *= gb;
                        }
                        if (has_b) {
                            wait(kP1); // P of tile i + 1 is in (so is the tile)
                            pin(acc);
                            wgmma_fence();
                            pv_smem(acc, 1, 1, 0);
                            wgmma_commit();
                        }
                        if (i + 2 < ntiles) { // S of the next pair's first tile beside that P V
                            wait(kHalfReady + 0);
                            wgmma_fence();
                            issue_s(s, 0, 0, kHalfSteps, true);
                            wgmma_commit();
                            wgmma_wait<1>();
                            if (i + 3 < ntiles) arrive(kHalfFree + 2);
                            wait(kHalfReady + 1);
                            issue_s(s, 0, kHalfSteps, kKSteps, false);
                            wgmma_commit();
                        }
                        wgmma_wait0();
                        pin(acc);
                        pin(s);
                    }
                    arrive(kQFree);
                    quad_sum(la);
                    quad_sum(lb);
                    wait(kSums); // warpgroup 1's row sums are in l_s, its true maxima in m_s
                    publish_rows(pc, r0, R, ma, mb, la + l_s[ra], lb + l_s[rb], fmaxf(ta, m_s[ra]), fmaxf(tb, m_s[rb]));
                    finish_pass(acc, pc, R);
                }
            });
        } else {
            regs_set<Regs<W::on, kPair, kSplit>::pv>();
            for_each_piece<!kSplit>(p, [&](const Piece &pc) {
                const int ntiles = tiles_of(pc);
                for (int r0 = pc.rb; r0 < pass_end(pc); r0 += kM) {
                    const int R = max(0, min(kM, pc.re - r0));
                    const long long lima = row_key_limit(pc, r0 + ra, H), limb = row_key_limit(pc, r0 + rb, H);
                    float acc[128]; // O rows ra, rb; dims 256 + 8 j + 2 (lane & 3) (+1) in acc[4 j ..]
#pragma unroll
                    for (int e = 0; e < 128; e++) acc[e] = 0.0f;
                    float ma = neg_inf(), mb = neg_inf(), la = 0.0f, lb = 0.0f; // the maxima O and l are at
                    float ta = neg_inf(), tb = neg_inf(); // the rows' true maxima over tiles i + 1 (max_logits)
                    wait(kQReady);
                    for (int i = 0; i < ntiles; i += 2) {
                        const bool has_b = i + 1 < ntiles;
                        float s[32];
                        if (has_b) { // S of tile i + 1, the half that came first first
                            wait(kHalfReady + 3);
                            wgmma_fence();
                            issue_s(s, 1, kHalfSteps, kKSteps, true);
                            wait(kHalfReady + 2);
                            issue_s(s, 1, 0, kHalfSteps, false);
                            wgmma_commit();
                            wgmma_wait0();
                            pin(s);
                            mask_tile(s, pc, i + 1, lima, limb, present_of(1));
                        }
                        wait(kMaxA); // tile i's maxima
                        float na = m_s[ra], nb = m_s[rb], sa = 0.0f, sbs = 0.0f;
                        if (has_b) {
                            float unused_a, unused_b; // lazy m: moves beyond warpgroup 0's only by more than kLazyRise
                            online_softmax_rows<32, kFusedP, true>(s, p.score_scale, na, nb, sa, sbs, unused_a, unused_b, &ta, &tb);
                            __syncwarp(); // every lane has read warpgroup 0's maxima before they are replaced
                            if ((lane & 3) == 0) {
                                m_s[ra] = na;
                                m_s[rb] = nb;
                            }
                        }
                        arrive(kMaxB); // the pair's maxima
                        const float fa = fast_exp2(ma - zero_max(na)), fb = fast_exp2(mb - zero_max(nb));
                        ma = na;
                        mb = nb;
                        la = la * fa + sa;
                        lb = lb * fb + sbs;
                        rescale_rows_unless_one(acc, fa, fb);
                        pin(acc);
                        uint32_t pa[4][4];
                        if (has_b) {
                            p_frags(s, pa);
                            wgmma_fence();
                            pv_regs(acc, pa, 1, 1);
                            wgmma_commit();
                            store_p(pa, 1);
                            fence_async_shared();
                            arrive(kP1); // P of tile i + 1
                            // slot 1's second half back to the loader before P of tile i is in: the
                            // products take that long anyway, and warpgroup 1's next S starts on it
                            wgmma_wait0();
                            pin_regs(pa);
                            pin(acc);
                            if (i + 3 < ntiles) arrive(kHalfFree + 3);
                        }
                        wait(kP0); // P of tile i
                        wgmma_fence();
                        pv_smem(acc, 0, 0, 1);
                        wgmma_commit();
                        wgmma_wait0();
                        pin(acc);
                        if (i + 2 < ntiles) arrive(kHalfFree + 1);
                    }
                    arrive(kQFree);
                    quad_sum(la);
                    quad_sum(lb);
                    if ((lane & 3) == 0) { // m_s is free: warpgroup 0 read the last pair's maxima before kP0
                        l_s[ra] = la;
                        l_s[rb] = lb;
                        m_s[ra] = ta;
                        m_s[rb] = tb;
                    }
                    arrive(kSums);
                    finish_pass(acc, pc, R);
                }
            });
        }
    } else if (wgi == 0) {
        // S = Q K^T, the online softmax, O[:, 0:256] += P V with P from registers; P and each
        // row's rescale factor handed to warpgroup 1.
        regs_set<Regs<W::on, kPair, kSplit>::softmax>();
        for_each_piece<!kSplit>(p, [&](const Piece &pc) {
            const int ntiles = tiles_of(pc);
            for (int r0 = pc.rb; r0 < pass_end(pc); r0 += kM) {
                const int R = max(0, min(kM, pc.re - r0));
                const long long lima = row_key_limit(pc, r0 + ra, H), limb = row_key_limit(pc, r0 + rb, H);
                float acc[128]; // O rows ra, rb; dims 8 j + 2 (lane & 3) (+1) in acc[4 j ..]
#pragma unroll
                for (int e = 0; e < 128; e++) acc[e] = 0.0f;
                float ma = neg_inf(), mb = neg_inf(), la = 0.0f, lb = 0.0f; // l: this thread's share of the row sums
                float ta = neg_inf(), tb = neg_inf();                             // the rows' true maxima
                wait(kQReady);
                for (int i = 0; i < ntiles; i++) {
                    const int slot = i & 1;
                    float s[32]; // S rows ra, rb; keys 8 j + 2 (lane & 3) (+1) in s[4 j ..]
                    if constexpr (kPair) { // S over the first blocks while the rest comes
                        wait(kFirst + slot);
                        wgmma_fence();
                        issue_s(s, slot, 0, kFirstKSteps, true);
                    }
                    wait(kFull + slot);
                    if constexpr (kPair) // this block has the other's copies of the tile: it may overwrite their source
                        if (t == 0) mbar_arrive_cluster(peer_sb + S::bars + 8 * (kSent + slot));
                    // the tile's present keys, read while S runs (after it, the read queues behind the
                    // loader's copies into shared memory)
                    const uint4 present = present_of(slot);
                    if (!kPair) wgmma_fence();
                    issue_s(s, slot, kPair ? kFirstKSteps : 0, kKSteps, !kPair);
                    wgmma_commit();
                    wgmma_wait0();
                    pin(s);
                    if (i + 1 == ntiles) arrive(kQFree); // the pass's last read of Q
                    mask_tile(s, pc, i, lima, limb, present);
                    float fa, fb;
                    online_softmax_rows<32, kFusedP, true>(s, p.score_scale, ma, mb, la, lb, fa, fb, &ta, &tb); // lazy m
                    uint32_t pa[4][4];
                    p_frags(s, pa);
                    if constexpr (kPair) wait(kSent + slot); // the other block's copies of this slot's rows are in
                    store_p(pa, slot); // S, its only other reader, is done
                    if ((lane & 3) == 0) {
                        alpha_s[slot * kM + ra] = fa;
                        alpha_s[slot * kM + rb] = fb;
                    }
                    fence_async_shared();
                    arrive(kPReady + slot);
                    rescale_rows_unless_one(acc, fa, fb);
                    pin(acc);
                    wgmma_fence();
                    pv_regs(acc, pa, slot, 0);
                    wgmma_commit();
                    wgmma_wait0();
                    pin(acc);
                    if (i + 2 < ntiles) arrive_both(kEmpty + slot, true); // the loader waits for these only
                }
                if (ntiles == 0) arrive(kQFree);
                quad_sum(la);
                quad_sum(lb);
                publish_rows(pc, r0, R, ma, mb, la, lb, ta, tb);
                finish_pass(acc, pc, R);
            }
        });
    } else {
        // O[:, 256:512] += P V with P and the rescale factors from warpgroup 0.
        regs_set<Regs<W::on, kPair, kSplit>::pv>();
        for_each_piece<!kSplit>(p, [&](const Piece &pc) {
            const int ntiles = tiles_of(pc);
            for (int r0 = pc.rb; r0 < pass_end(pc); r0 += kM) {
                const int R = max(0, min(kM, pc.re - r0));
                float acc[128]; // O rows ra, rb; dims 256 + 8 j + 2 (lane & 3) (+1) in acc[4 j ..]
#pragma unroll
                for (int e = 0; e < 128; e++) acc[e] = 0.0f;
                arrive(kQFree); // (reads no Q)
                for (int i = 0; i < ntiles; i++) {
                    const int slot = i & 1;
                    wait(kPReady + slot); // P and alpha of tile i are written (after the tile landed)
                    const float fa = alpha_s[slot * kM + ra], fb = alpha_s[slot * kM + rb];
                    rescale_rows_unless_one(acc, fa, fb);
                    pin(acc);
                    wgmma_fence();
                    pv_smem(acc, slot, slot, 1);
                    wgmma_commit();
                    wgmma_wait0();
                    pin(acc);
                    // released at cluster scope: it covers warpgroup 0's P (written into the slot's
                    // rope block, read here) before the other block's loader copies rows over it
                    if (i + 2 < ntiles) arrive_both(kEmpty + slot);
                }
                finish_pass(acc, pc, R);
            }
        });
    }
    if constexpr (kPair) cluster_sync(); // neither block leaves while the other may still write to it
#endif
}

} // namespace wg
#endif

// ==== 16-row passes over e4m3fn keys: per-tensor caches, V4's MODEL1 pages (NVIDIA sm_90a) ==
// The memory-bound fp8 shapes (a query tile of at most 16 rows: H <= 16 at q_len 1; V4
// attention with up to 16 heads and one split, whose differences decode16_fp8_kernel lists) in
// AITER_MLA_WGMMA builds (other builds take the 16-row mma kernel). Same plan, pieces and
// output conventions as the paths above; S^T's products are wgmma m64n16k16 with the keys from
// registers (they never pass through a widened tile), P.V's mma.sync m16n8k16 (f16 for
// e4m3fn keys, bf16 for MODEL1's, whose scales can leave f16's range). A block is two
// groups of 4 warps; group g takes the piece's 64-key tiles g, g + 2, ... with its own staging
// area, mbarrier, named barrier and softmax state, and the groups merge at the end of a pass.
// A block's passes over its work items follow each other without a gap in the copies: a
// group's first tile of the next pass is copied as soon as the group has read its last tile of
// this one, and a split piece's count for the reduce waits until the next pass's Q is on its
// way. H200, us (docs/PERFORMANCE.md, "The 16-row e4m3fn decode kernel"): D1-fp8 162-163 on
// the 16-row mma kernel; 138-139 as first built here; 125-128 with the copies across passes;
// 133-134 with the groups' iterations paired (see the tile loop), as landed; 127-128 -> 124-125
// with S^T's products by wgmma (from mma.sync, each warp reading all of Q's fragments).
// Per tile and group:
//   - the tile's rows (e4m3, 576 bytes each) come into the staging area by bulk copies
//     (cp.async.bulk, one per run of keys that lie together in a page: one a tile for pages of
//     64 keys or more, 64 for pages of one), issued a group-tile ahead; each thread then reads
//     two keys' bytes (keys 16 w + l / 4 and + 8 of warp w) into registers;
//   - S^T = K Q^T by wgmma m64n16k16 with the group's 64 keys as the A rows, straight from those
//     registers: the 576 dims are taken in a permuted order in which a thread's 4 consecutive
//     bytes are one k-step of its A fragment (one converter instruction a register); Q^T, in
//     the same order, is the B operand in shared memory (kQt), read once a group and k-step;
//   - the widened first 512 dims go to a shared f16 V tile on the way;
//   - the rows' maxima meet across the group's 4 warps, P^T goes to shared memory by stmatrix;
//   - O^T += V^T P^T, V^T by ldmatrix.trans of the V tile; warp w owns dims [128 w, 128 w + 128)
//     of the pass's 16 rows (64 fp32 registers a thread).
// Against the 16-row mma kernel (which widens every tile into shared memory, then reads it
// back as ldmatrix fragments for S) this moves far fewer bytes through shared memory a key.
// docs/PERFORMANCE.md ("A standalone 16-head fp8 decode") has the design's measurements.
#ifdef AITER_MLA_HAS_WGMMA
namespace f8 {

using mma::bf16x2_mul;
using mma::copy_q_rows;
using mma::count_stored_rows;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::e4m3x2_to_f16x2;
using mma::fast_exp2;
using mma::kRowB;
using mma::key_l2_policy;
using mma::kStageRow;
using mma::ldsm_x4;
using mma::ldsm_x4_trans;
using mma::merge_states;
using mma::MergedStates;
using mma::mma16;
using mma::named_sync;
using mma::pack16x2;
using mma::pack_bf16x2;
using mma::pack_f16x2;
using mma::q_rows_to_f16;
using mma::smem_addr;
using mma::store16_shared;
using mma::store_staged_rows;
using mma::takes_fp8_q;
using mma::ue8m0_to_bf16x2;
using wg::cp_async_arrive_noinc;
using wg::load16_shared;
using wg::mbar_arrive_expect_tx;
using wg::mbar_init;
using wg::mbar_wait;
using wg::stmatrix_x4;

constexpr int kThreads = 256, kGroups = 2, kKeys = 64; // two groups of 4 warps; keys a tile
constexpr int kRowBytes = kD;                            // a staged key row: 576 e4m3, or MODEL1's 448 e4m3 + 64 bf16
static_assert(AITER_MLA_V4_ROW_BYTES == kRowBytes, "MODEL1 rows stage like e4m3 ones");
// The formats of this kernel: a per-tensor e4m3fn cache (decode) or MODEL1 pages of e4m3fn
// (V4 attention), whose rows end in 64 bf16 rope values and carry 7 power-of-two scales.
template <int KVT>
constexpr int ksteps = qk_dims(KVT) / 16;              // k-steps of S^T: 36, MODEL1 32 (28 e4m3 + 4 bf16)
constexpr int kNopeSteps = kV4Nope / 16;                // MODEL1's e4m3 k-steps (28), 4 a scale group
constexpr int kPRow = kKeys * 2 + 16;                   // P^T rows: 64 16-bit keys + 16 bytes (ldmatrix rows on distinct banks)
constexpr int kVRow = kL * 2;                           // V tile rows: 512 16-bit dims, 16-byte chunk c of key r at c ^ (r & 7)

template <int KVT>
struct Smem { // byte offsets from a 1024-byte aligned base (the swizzle of Q^T repeats every 1024 bytes)
    static constexpr bool kModel1 = KVT == kV4Model1;
    // shared by the groups
    static constexpr int qt = 0;                       // Q^T, S^T's B operand (kQt): [k-steps / 4][16 rows][128 bytes]
    static constexpr int row_at = qt + ksteps<KVT> * 16 * 32; // int64 [16]: where each row's o (or partial) starts
    static constexpr int fm = row_at + 16 * 8;          // float [2 groups][16 rows]: each group's row maxima at a pass's end
    static constexpr int fl = fm + kGroups * 16 * 4;    // float [2 groups][4 warps][16 rows]: the warps' row sums
    static constexpr int group0 = (fl + kGroups * 4 * 16 * 4 + 127) / 128 * 128;
    // per group, at group0 + g * group_bytes
    static constexpr int v = 0;                        // the V tile [64 keys][kVRow] (f16; MODEL1 bf16); group 0's
                                                       // holds Q's bf16 rows at a pass's start and the staged o rows at its end
    static constexpr int rows = v + kKeys * kVRow;     // the tile's rows [64][576], staged by bulk copies
    static constexpr int scales = rows + kKeys * kRowBytes; // MODEL1: [64][8] each key's scale bytes
    static constexpr int p = scales + (kModel1 ? kKeys * 8 : 0); // P^T [16 rows][kPRow], f16 (MODEL1 bf16)
    static constexpr int red = p + 16 * kPRow;          // float [2 parities][16 rows][4 warps]: the warps' maxima
    static constexpr int present = red + 2 * 16 * 4 * 4; // uint8 [64]: rows copied per run of keys (see below)
    static constexpr int bar = present + kKeys;         // the staging area's mbarrier
    static constexpr int group_bytes = (bar + 8 + 127) / 128 * 128;
    static constexpr int total = group0 + kGroups * group_bytes + 1024; // + the alignment of the base
    static_assert(total <= mma::kSmemLimit, "shared memory plan does not fit");
    static_assert(16 * kRowB <= kKeys * kVRow && 16 * kStageRow * 4 <= kKeys * kVRow, "Q and the staged o rows reuse a V tile");
};

// The dims permutation of S^T's k-steps: in k-step s, a thread of quad q holds its keys' values
// of dims perm_dim(s, q) .. + 3 (its A fragment's k-columns 2 q, 2 q + 1, 2 q + 8, 2 q + 9), 4
// consecutive bytes of the row. e4m3 bytes 16 q + 64 j .. + 15 of a row are k-steps 4 j .. 4 j +
// 3 (dims 64 j + 16 q + 4 (s % 4)); MODEL1's bf16 rope, bytes 448 + 64 h + 16 q .. + 15 (dims 448
// + 32 h + 8 q .. + 7), is k-steps 28 + 2 h, 29 + 2 h.
// kQt: Q^T as wgmma's K-major B, the k-steps' columns in that order: 16 rows of 128-byte swizzled
// blocks of 4 k-steps (wg::swz<16>), 16-byte chunk (s, half) of row r holding Q's values at dims
// perm_dim(s, q) + 2 half, + 1 for q = 0 .. 3 (f16, scaled by q_rows_to_f16; MODEL1: Q's bf16 as is).
template <int KVT>
__device__ __forceinline__ int perm_dim(int s, int q) {
    if (KVT == kV4Model1 && s >= kNopeSteps) return kV4Nope + 32 * ((s - kNopeSteps) >> 1) + 8 * q + 4 * ((s - kNopeSteps) & 1);
    return 64 * (s >> 2) + 16 * q + 4 * (s & 3);
}
// kQt's descriptor for k-step s, from its k-step 0's (qt_desc0) by desc_plus: one integer add a
// product, where building each descriptor from the address took five (uniform) instructions,
// 160 a MODEL1 tile.
__device__ __forceinline__ uint64_t qt_desc0(uint32_t qt) { return wg::desc(qt, 16, 1024); }
__device__ __forceinline__ uint64_t qt_desc(uint64_t d0, int s) { return wg::desc_plus(d0, wg::kstep_offset(s, 16 * 128)); }
__device__ __forceinline__ uint32_t word_of(const uint4 (&r)[9], int s) {
    const uint4 v = r[s >> 2];
    return (s & 3) == 0 ? v.x : (s & 3) == 1 ? v.y : (s & 3) == 2 ? v.z : v.w;
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory at src into
// shared memory at dst, completing as many bytes of the current phase of mbarrier bar; cached in
// the L2 under l2_policy (key_l2_policy).
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar, uint64_t l2_policy) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar), "l"(l2_policy)
                 : "memory");
}

// 8 bytes (both addresses 8-byte aligned) by cp.async, completing by commit group or on an
// mbarrier (cp_async_arrive_noinc).
__device__ __forceinline__ void cp_async8(uint32_t dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
}
// Two f16 (e4m3 values widened) times a power-of-two scale (scale2: bf16x2 of it) as bf16,
// rounded as the 16-row kernel's MODEL1 widening rounds (exact where the product is normal).
__device__ __forceinline__ uint32_t f16x2_to_bf16x2_scaled(uint32_t h2, uint32_t scale2) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&h2));
    return bf16x2_mul(pack_bf16x2(f.x, f.y), scale2);
}
// Byte j of a key's 8 scale bytes (lo, hi: its two words) as bf16x2 of 2^(b - 127).
__device__ __forceinline__ uint32_t scale_of(uint2 sc, int j) { return ue8m0_to_bf16x2((uint8_t)((j < 4 ? sc.x : sc.y) >> (8 * (j & 3)))); }

// The 16-row decode of a per-tensor e4m3fn cache (KVT = AITER_MLA_FP8_E4M3FN: the plan's work
// items) or V4 attention over MODEL1 pages of e4m3fn (kV4Model1: a token a job, as the sparse
// kernels take them). MODEL1 keys differ in three places: each key's 7 scales come with its
// row (its 8 scale bytes by cp.async); S^T's products are bf16, on the keys' e4m3 values times
// their scales (exact: powers of two; as the 16-row kernel widens them) and their bf16 rope,
// against Q^T in bf16; the V tile holds the same values, and P^T is bf16 to match.
template <int KVT>
__global__ void __launch_bounds__(kThreads, 1) decode16_fp8_kernel(DecodeParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) // sm_90a passes alone
    using S = Smem<KVT>;
    constexpr bool kModel1 = KVT == kV4Model1, kF16 = !kModel1; // the P.V products in f16 (MODEL1: bf16)
    constexpr int kSteps = ksteps<KVT>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    const int tid = threadIdx.x, grp = tid >> 7, t = tid & 127, w = t >> 5, lane = tid & 31, g = lane >> 2, qd = lane & 3;
    unsigned char *gs = smem + S::group0 + grp * S::group_bytes;
    const uint32_t qt_a = smem_addr(smem + S::qt), v_a = smem_addr(gs + S::v), rows_a = smem_addr(gs + S::rows);
    const uint64_t qt_d0 = qt_desc0(qt_a);
    const uint32_t scales_a = smem_addr(gs + S::scales), p_a = smem_addr(gs + S::p), bar = smem_addr(gs + S::bar);
    float *red = reinterpret_cast<float *>(gs + S::red);
    unsigned char *present = gs + S::present;
    long long *row_at = reinterpret_cast<long long *>(smem + S::row_at);
    float *fm = reinterpret_cast<float *>(smem + S::fm), *fl = reinterpret_cast<float *>(smem + S::fl);
    unsigned char *q_s = smem + S::group0 + S::v; // group 0's V tile, at a pass's start
    float *stage_o = reinterpret_cast<float *>(smem + S::group0 + S::v); // ... and at its end
    const aiter_mla_decode_args &a = p.a;
    const int H = a.num_heads;
    // A tile's keys in runs of `run` that lie together in one page (page_size a power of two;
    // MODEL1 keys, each looked up apart, runs of one), each copied by one thread of the group,
    // the copiers spread over its warps (pages of one key: issued by 2 warps, D1-fp8-p1 153 us;
    // by 4, 147, H200): copier cr copies run cr, with `present[cr]` its rows copied (0: absent).
    const int run = kModel1 ? 1 : min(a.page_size, kKeys), runs = kKeys / run, run_shift = __ffs(run) - 1;
    const int copier_stride = 128 / runs;
    const bool copier = t % copier_stride == 0;
    const int cr = t / copier_stride;
    if (t == 0) mbar_init(bar, kModel1 ? 2 * runs : runs); // MODEL1: the scale bytes' copies arrive on their own
    __syncthreads(); // the mbarriers are ready
    auto group_sync = [&]() {
        if (grp == 0) named_sync<1, 128>();
        else named_sync<2, 128>();
    };
    uint32_t phases = 0; // the parity of the staging area's next phase (bit 0)
    const int hh[4] = {2 * qd, 2 * qd + 1, 8 + 2 * qd, 9 + 2 * qd}; // this thread's rows of S^T, P and O
    const int ka = 16 * w + g, kb = ka + 8;                         // ... and its keys of a tile

    // A copier's run of a tile: its first row and its rows copied (0: absent);
    // MODEL1: the row's 8 scale bytes; the copy's L2 policy
    struct Run {
        const unsigned char *src, *scales;
        int rows;
        uint64_t l2_policy;
    };
    // this copier's run of tile i of piece pc (i < its tiles), entry its page id or list entry (key_entry)
    auto run_of = [&](const Piece &pc, int i, int32_t entry) {
        const int64_t k = (int64_t)i * kKeys + cr * run;
        const KeyRef ref = key_ref<KVT>(p, pc, k, entry);
        return Run{ref.row, ref.scales + (ref.kind & kKindOddScales ? 8 : 0), ref.row ? (int)min((int64_t)run, pc.n - k) : 0,
                   key_l2_policy(p, pc, 16)};
    };
    auto tiles_of = [](const Piece &pc) { return (int)((pc.n + kKeys - 1) / kKeys); };
    // the copies of a tile into the group's staging area: each copier its run, counted on the
    // mbarrier. MODEL1's 8 scale bytes go by cp.async (a bulk copy each cost more: ~1500 cycles
    // a tile), whose completion arrives on the mbarrier too, absent keys' at once.
    auto copy_run = [&](Run r) {
        present[cr] = (unsigned char)r.rows;
        mbar_arrive_expect_tx(bar, (uint32_t)r.rows * kRowBytes); // releases present[cr]
        if (r.rows) {
            bulk_copy(rows_a + cr * run * kRowBytes, r.src, (uint32_t)r.rows * kRowBytes, bar, r.l2_policy);
            if constexpr (kModel1) cp_async8(scales_a + cr * 8, r.scales);
        }
        if constexpr (kModel1) cp_async_arrive_noinc(bar);
    };
    // The block's passes ("jobs": 16 rows of a job, usually the whole job). Each copies its
    // groups' first tiles at its start. Their lookup used to start a job early, for the next one
    // (its work item, request ints and first page entry, three dependent reads that thread 0
    // waited for before the block's first barrier), and a pass's first tile was copied during the
    // pass before; both held registers over the tile loop. H200, alternately in one call, three
    // runs each, us: the next job's lookup dropped, D1-fp8 115.1-115.5 -> 114.2-115.2, D1-fp8-p1
    // 130.3-131.6 -> 128.8-129.6, V4D-h16-k512-b512 116.5-117.2 -> 114.2-115.2; then the next
    // pass's too (spills: e4m3fn 80 -> 64 bytes, MODEL1 24 -> 0), D1-fp8 114.3-115.1 ->
    // 112.8-114.1, D1-fp8-p1 129.2-130.3 -> 127.7-128.8, D2-fp8 unchanged. (Pieces of several
    // passes, which no bench row has, now wait for each pass's first copy.)
    int count_loc = -1, count_rows = 0; // rows stored by the last job, counted during this one (thread kThreads - 1)
    // the block's jobs: its CU's work items (decode), or tokens blockIdx.x, + gridDim.x, ... (V4;
    // its row group y, its share z of the keys)
    for_each_piece<true, kModel1 ? kV4Launch : kDecodeLaunch>(p, [&](const Piece &pc) {
        const int ntiles = tiles_of(pc);
        // the page id of the copier's run of tile i, loaded a copy ahead of its use
        auto entry_of = [&](int i) { return copier && i < ntiles ? key_entry<KVT>(p, pc, (int64_t)i * kKeys + cr * run) : -1; };
        for (int r0 = pc.rb; r0 < pc.re; r0 += 16) {
            const int R = min(16, pc.re - r0);
            // the entries of the group's first two tiles, then Q, then the first tile's copy: Q's
            // copies do not wait for the entries
            int32_t next = entry_of(grp);
            const int32_t second = entry_of(grp + kGroups);
            // Q rows as bf16 (an e4m3 q widened), zeros past R; e4m3fn: scaled into f16's range
            // (q_rows_to_f16). MODEL1's products are bf16, so its rows go to kQt as they are.
            copy_q_rows<qk_dims(KVT), takes_fp8_q(KVT), 1>(a, pc, r0, R, 16, tid, kThreads,
                                                           [&](int r, int part) { return smem_addr(q_s + r * kRowB + part * 16); });
            cp_async_commit();
            if (copier && grp < ntiles) copy_run(run_of(pc, grp, next)); // the last pass is done with the staging area
            next = second;
            if (tid == kThreads - 1 && count_loc >= 0) count_stored_rows(p, count_loc, count_rows);
            count_loc = -1;
            cp_async_wait<0>();
            __syncthreads();
            if constexpr (!kModel1) {
                q_rows_to_f16<qk_dims(KVT)>(q_s, 16, tid >> 5, kThreads / 32, lane);
                __syncthreads();
            }
            for (int e = tid; e < kSteps * 32; e += kThreads) { // kQt: chunk (s, half) of row r
                const int s = e >> 5, r = (e >> 1) & 15, half = e & 1;
                uint32_t x[4];
#pragma unroll
                for (int q = 0; q < 4; q++) x[q] = *reinterpret_cast<const uint32_t *>(q_s + r * kRowB + (perm_dim<KVT>(s, q) + 2 * half) * 2);
                store16_shared(qt_a + wg::swz<16>(r, 2 * s + half), make_uint4(x[0], x[1], x[2], x[3]));
            }
            wg::fence_async_shared(); // kQt's stores, visible to the products
            // per row of this thread: the score factor (e4m3fn: q_rows_to_f16's 2^-e; the scales,
            // log2 e) and the last key of the piece it may see (-1: none; a piece has fewer than 2^31 keys)
            float rs[4];
            int last[4];
#pragma unroll
            for (int h = 0; h < 4; h++) {
                rs[h] = kModel1 ? p.score_scale : *reinterpret_cast<const float *>(q_s + hh[h] * kRowB + kD * 2) * p.score_scale;
                last[h] = hh[h] < R ? (int)min(max(row_key_limit(pc, r0 + hh[h], H) - pc.tok0, -1LL), (long long)pc.n - 1) : -1;
            }
            __syncthreads(); // kQt is in; group 0's V tile is its own again

            float acc[8][2][4];
#pragma unroll
            for (int mt = 0; mt < 8; mt++)
#pragma unroll
                for (int nt = 0; nt < 2; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0.0f;
            float m[4], lsum[4]; // rows hh[]: running max (log2 units) and this thread's share of the sum
#pragma unroll
            for (int h = 0; h < 4; h++) m[h] = neg_inf(), lsum[h] = 0.0f;
            // Both groups run the same number of iterations (a group with one tile fewer passes the
            // barriers of an empty one), so that their barrier sequences pair up across the block,
            // as race checkers expect: with a group's own count, compute-sanitizer's racecheck
            // reported hazards across the block barriers after the tiles; each group's named
            // barrier is its own and every thread meets the block barriers in the same order, so
            // no race was found in the code, and every test passed either way. With a group's own
            // count racecheck reports 74 errors over `--quick test_decode_variants` (H100), and the
            // pairing costs nothing measurable now (two runs each, alternately: D1-fp8 118.7-119.9
            // us paired, 118.7-119.2 not; D1-fp8-p1 131.4-131.7, 131.2-131.6; D2-fp8 216.1-216.6,
            // 215.9-216.2); it once cost ~4 % on an H200 (D1-fp8 128 -> 133 us; more spills).
            const int iters = (ntiles + kGroups - 1) / kGroups;
            for (int it = 0, par = 0; it < iters; it++, par ^= 1) {
                const int i = grp + it * kGroups;
                if (i >= ntiles) {
#pragma unroll
                    for (int b = 0; b < 3; b++) group_sync(); // (A), (C), (B)
                    continue;
                }
                mbar_wait(bar, 0, phases);
                const int k0 = i * kKeys;
                const bool oka = (ka & (run - 1)) < present[ka >> run_shift], okb = (kb & (run - 1)) < present[kb >> run_shift];
                uint4 ra[9], rb[9]; // a quad reads 64 consecutive bytes of a row a load
#pragma unroll
                for (int j = 0; j < 9; j++) {
                    ra[j] = oka ? load16_shared(rows_a + ka * kRowBytes + 16 * qd + 64 * j) : make_uint4(0u, 0u, 0u, 0u);
                    rb[j] = okb ? load16_shared(rows_a + kb * kRowBytes + 16 * qd + 64 * j) : make_uint4(0u, 0u, 0u, 0u);
                }
                // MODEL1: keys ka, kb's scale bytes (an absent key's 0: 2^-127 times its zeros)
                uint2 sca = make_uint2(0u, 0u), scb = make_uint2(0u, 0u);
                if constexpr (kModel1) {
                    if (oka) sca = *reinterpret_cast<const uint2 *>(gs + S::scales + ka * 8);
                    if (okb) scb = *reinterpret_cast<const uint2 *>(gs + S::scales + kb * 8);
                }
                group_sync(); // (A) the group has read the rows and is done with the last tile's V and P
                if (copier && i + kGroups < ntiles) copy_run(run_of(pc, i + kGroups, next));
                next = entry_of(i + 2 * kGroups);

                // S^T [key][row] by wgmma m64n16k16 (A: the group's 64 keys from registers, B: kQt), a
                // k-step each: sc[e] for key (e & 2 ? kb : ka), row hh[(e >> 2) * 2 + (e & 1)]; the V
                // tile on the way, a 16-byte chunk (8 dims) every two e4m3 k-steps. The products take
                // f16 e4m3 values, MODEL1's bf16 e4m3 values times their scales (exact: powers of two,
                // and what the V tile holds) and its bf16 rope.
                float sc[8] = {};
                uint32_t pa0 = 0, pa1 = 0, pa2 = 0, pa3 = 0;
                // The k-steps in batches of 4, one batch in flight while the next is converted (a
                // batch's A registers are held until its products complete: all 36 at once spilled).
                // e4m3fn issues a batch's 4 products after one fence; MODEL1, whose conversions are
                // longer, each product as its registers are ready (H200, us: D2-fp8 227 -> 219 with
                // the batched fence, V4D-h16-k512-b128 35.7 -> 39.8).
                uint32_t batch[4][4];
                auto product = [&](int s, const uint32_t(&af)[4]) {
                    if constexpr (kModel1) {
                        wg::wgmma_fence(); // af's registers (and, first, sc's zeros) are written
                        wg::mma_64x16_rs<kF16>(sc, af, qt_desc(qt_d0, s));
                    } else {
#pragma unroll
                        for (int e = 0; e < 4; e++) batch[s & 3][e] = af[e];
                        if ((s & 3) == 3) {
                            wg::wgmma_fence(); // the batch's registers (and, first, sc's zeros) are written
#pragma unroll
                            for (int j = 0; j < 4; j++) wg::mma_64x16_rs<kF16>(sc, batch[j], qt_desc(qt_d0, s - 3 + j));
                        }
                    }
                    if ((s & 3) == 3) {
                        wg::wgmma_commit();
                        wg::wgmma_wait<1>();
                    }
                };
#pragma unroll
                for (int s = 0; s < (kModel1 ? kNopeSteps : kSteps); s++) { // the e4m3 k-steps
                    const uint32_t wa = word_of(ra, s), wb = word_of(rb, s);
                    uint32_t af[4] = {e4m3x2_to_f16x2((uint16_t)wa), e4m3x2_to_f16x2((uint16_t)wb), e4m3x2_to_f16x2((uint16_t)(wa >> 16)),
                                      e4m3x2_to_f16x2((uint16_t)(wb >> 16))};
                    if constexpr (kModel1) {
                        const uint32_t s2a = scale_of(sca, s >> 2), s2b = scale_of(scb, s >> 2);
                        af[0] = f16x2_to_bf16x2_scaled(af[0], s2a), af[1] = f16x2_to_bf16x2_scaled(af[1], s2b);
                        af[2] = f16x2_to_bf16x2_scaled(af[2], s2a), af[3] = f16x2_to_bf16x2_scaled(af[3], s2b);
                    }
                    product(s, af);
                    if (s & 1) { // dims perm(s - 1, q) .. + 7 of keys ka, kb: chunk c of their V rows
                        const int c = 8 * (s >> 2) + 2 * qd + ((s >> 1) & 1);
                        if (s < kL / 16) {
                            store16_shared(v_a + ka * kVRow + ((c ^ (ka & 7)) << 4), make_uint4(pa0, pa2, af[0], af[2]));
                            store16_shared(v_a + kb * kVRow + ((c ^ (kb & 7)) << 4), make_uint4(pa1, pa3, af[1], af[3]));
                        }
                    } else {
                        pa0 = af[0], pa1 = af[1], pa2 = af[2], pa3 = af[3];
                    }
                }
                if constexpr (kModel1) {
#pragma unroll
                    for (int h = 0; h < 2; h++) { // the bf16 rope: ra[7 + h], rb[7 + h] (dims 448 + 32 h + 8 q ..), V as it is
                        const uint4 xa = ra[7 + h], xb = rb[7 + h];
                        const uint32_t f0[4] = {xa.x, xb.x, xa.y, xb.y}, f1[4] = {xa.z, xb.z, xa.w, xb.w};
                        product(kNopeSteps + 2 * h, f0);
                        product(kNopeSteps + 2 * h + 1, f1);
                        const int c = kV4Nope / 8 + 4 * h + qd;
                        store16_shared(v_a + ka * kVRow + ((c ^ (ka & 7)) << 4), xa);
                        store16_shared(v_a + kb * kVRow + ((c ^ (kb & 7)) << 4), xb);
                    }
                }
                wg::wgmma_wait0();
                // scores (log2 units), -inf where masked: x[e] = (key a | b by e & 2, row hh[(e >> 2) * 2 + (e & 1)])
                float x[8];
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const int h = (e >> 2) * 2 + (e & 1), key = e & 2 ? kb : ka;
                    const bool ok = (e & 2 ? okb : oka) && k0 + key <= last[h];
                    x[e] = ok ? sc[e] * rs[h] : neg_inf();
                }
                float mx[4] = {fmaxf(x[0], x[2]), fmaxf(x[1], x[3]), fmaxf(x[4], x[6]), fmaxf(x[5], x[7])};
#pragma unroll
                for (int h = 0; h < 4; h++)
#pragma unroll
                    for (int o = 4; o < 32; o <<= 1) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], o));
                if (g == 0)
#pragma unroll
                    for (int h = 0; h < 4; h++) red[(par * 16 + hh[h]) * 4 + w] = mx[h];
                group_sync(); // (C) the warps' maxima are in
                float alpha[4], mu[4];
#pragma unroll
                for (int h = 0; h < 4; h++) {
                    const float4 r4 = *reinterpret_cast<const float4 *>(red + (par * 16 + hh[h]) * 4);
                    const float mn = fmaxf(m[h], fmaxf(fmaxf(r4.x, r4.y), fmaxf(r4.z, r4.w)));
                    mu[h] = mn == neg_inf() ? 0.0f : mn; // no key yet: every e is 0
                    alpha[h] = fast_exp2(m[h] - mu[h]);
                    m[h] = mn;
                }
                float pe[8];
#pragma unroll
                for (int e = 0; e < 8; e++) pe[e] = fast_exp2(x[e] - mu[(e >> 2) * 2 + (e & 1)]);
#pragma unroll
                for (int h = 0; h < 4; h++) lsum[h] = lsum[h] * alpha[h] + pe[(h >> 1) * 4 + (h & 1)] + pe[(h >> 1) * 4 + (h & 1) + 2];
                { // P^T [row][key]: matrix k = lane / 8 holds keys 16 w + 8 (k & 1) .., rows 8 (k >> 1) ..
                    const int mi = lane >> 3;
                    stmatrix_x4<true>(p_a + ((mi >> 1) * 8 + (lane & 7)) * kPRow + (16 * w + (mi & 1) * 8) * 2, pack16x2<kF16>(pe[0], pe[1]),
                                      pack16x2<kF16>(pe[2], pe[3]), pack16x2<kF16>(pe[4], pe[5]), pack16x2<kF16>(pe[6], pe[7]));
                }
                group_sync(); // (B) P and the V tile are in
#pragma unroll
                for (int mt = 0; mt < 8; mt++)
#pragma unroll
                    for (int nt = 0; nt < 2; nt++) {
                        acc[mt][nt][0] *= alpha[2 * nt];
                        acc[mt][nt][1] *= alpha[2 * nt + 1];
                        acc[mt][nt][2] *= alpha[2 * nt];
                        acc[mt][nt][3] *= alpha[2 * nt + 1];
                    }
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    const int mi = lane >> 3, j = lane & 7;
                    uint32_t pb[4];
                    ldsm_x4(p_a + ((mi >> 1) * 8 + j) * kPRow + (16 * kk + (mi & 1) * 8) * 2, pb);
#pragma unroll
                    for (int mt = 0; mt < 8; mt++) {
                        const int key = 16 * kk + (mi >> 1) * 8 + j, c = (128 * w + 16 * mt + (mi & 1) * 8) >> 3;
                        uint32_t va[4];
                        ldsm_x4_trans(v_a + key * kVRow + ((c ^ (key & 7)) << 4), va);
                        mma16<kF16>(acc[mt][0], va, pb[0], pb[1]);
                        mma16<kF16>(acc[mt][1], va, pb[2], pb[3]);
                    }
                }
            }

            // The groups' rows together: M = max of the groups' m, L = sum of each group's sums times
            // 2^(m - M); o = sum over the groups of acc 2^(m - M), times finish_row's factor.
#pragma unroll
            for (int h = 0; h < 4; h++)
#pragma unroll
                for (int o = 4; o < 32; o <<= 1) lsum[h] += __shfl_xor_sync(0xffffffffu, lsum[h], o);
            if (g == 0)
#pragma unroll
                for (int h = 0; h < 4; h++) {
                    fl[(grp * 4 + w) * 16 + hh[h]] = lsum[h];
                    if (w == 0) fm[grp * 16 + hh[h]] = m[h];
                }
            __syncthreads(); // also: both groups are done with their tiles
            // Row r's totals, once, by thread r (finish_row's code a single time: a block with one
            // job runs it from a cold instruction cache), left in fm[r] (Mu) and fm[16 + r] (o's
            // factor) for every thread's f
            static_assert(kGroups == 2, "the finish merges two groups");
            if (tid < 16) {
                const int r = tid;
                auto group_sum = [&](int gg) { return fl[(gg * 4) * 16 + r] + fl[(gg * 4 + 1) * 16 + r] + fl[(gg * 4 + 2) * 16 + r] + fl[(gg * 4 + 3) * 16 + r]; };
                const MergedStates s = merge_states(fm[r], group_sum(0), fm[16 + r], group_sum(1));
                float inv = 0.0f;
                if (r < R) row_at[r] = finish_row(p, pc, r0 + r, s.m, s.l, true, &inv);
                fm[r] = s.mu;
                fm[16 + r] = inv;
            }
            __syncthreads();
            float f[4];
#pragma unroll
            for (int h = 0; h < 4; h++) f[h] = hh[h] < R ? fast_exp2(m[h] - fm[hh[h]]) * fm[16 + hh[h]] : 0.0f;
            // group 1 stages its rows as fp32 in group 0's V tile, then group 0 adds its own
#pragma unroll
            for (int pass = 0; pass < kGroups; pass++) {
                if (grp == kGroups - 1 - pass)
#pragma unroll
                    for (int mt = 0; mt < 8; mt++)
#pragma unroll
                        for (int nt = 0; nt < 2; nt++)
#pragma unroll
                            for (int e = 0; e < 4; e++) {
                                float *at = stage_o + hh[2 * nt + (e & 1)] * kStageRow + 128 * w + 16 * mt + g + (e & 2) * 4;
                                *at = (pass ? *at : 0.0f) + acc[mt][nt][e] * f[2 * nt + (e & 1)];
                            }
                __syncthreads();
            }
            store_staged_rows(p, pc, stage_o, row_at, R, tid, kThreads);
            __syncthreads(); // the stage and row_at are refilled by the next pass
            // a split piece's rows are stored: counted for the reduce (see count_stored_rows)
            // once the next job's Q is on its way (the fence waits for the stores)
            if (p.arrivals && pc.loc >= 0) count_loc = pc.loc, count_rows = R;
        }
    });
    if (tid == kThreads - 1 && count_loc >= 0) count_stored_rows(p, count_loc, count_rows);
#endif
}

} // namespace f8
#endif

// ==== reduce of split pieces (SPEC 1b) =====================================================
// Each span of an output row (query row j of reduce tile t, head h; reduce_span(V) dims) is
// merged by one warp, or, when rows are few and pieces many (a batch-1 decode split over
// every CU), by the warps of a block, each taking every kReduceWarps-th piece and meeting in
// shared memory. A warp's lanes load the pieces' lse (a piece per lane) and fold them into
// the weights by shuffles; then the warp streams its span of the partial rows with 16-byte
// loads, kReduceBatch pieces in flight, and stores 4 values a lane at once. A reduce is a
// chain of dependent loads (plan, lse, partials) whatever its size; launch_reduce picks the
// span.
constexpr int kReduceThreads = 256, kReduceWarps = kReduceThreads / AITER_MLA_WARP_SIZE, kReduceBatch = 4;
// A block's unit with at most kReduceWarps * kReduceOneRound pieces (a batch-1 decode split over
// every CU: D5's 128) loads every piece's lse and its warps' share of partial rows at once, so
// it waits on memory once after its producer, not three times (the lse, then two batches of
// rows): the weights then apply to rows already in registers.
constexpr int kReduceOneRound = 24;
// Dims of a span: a float4 a lane, V of them (reduce_kernel's V).
__host__ __device__ constexpr int reduce_span(int v) { return AITER_MLA_WARP_SIZE * 4 * v; }

struct ReduceParams {
    const int32_t *num_tiles; // device: the plan header's count (graph replays see new plans)
    const int32_t *indptr, *final_map, *partial_map;
    // The plan's bounds (its info), and o's rows if set (device: the indptr's last value). The
    // plan's lists are device data: tiles past max_tiles or o's rows and pieces past
    // max_partials are left out, partial rows held inside the workspace, never read past.
    int max_tiles, max_partials, max_partial_rows;
    const int32_t *o_rows_at;
    // A decode plan's counters (wait_for_pieces; NULL: wait for the producer's completion):
    // arrivals, at each piece's first partial row, the rows the piece has stored; departures,
    // at the first piece's, the units of the tile done. Both are zero between launches.
    int32_t *arrivals, *departures;
    // Without a plan (V4's splits): uniform_splits > 0 pieces per tile, tile t is token t (one
    // query row) and its pieces the partial rows t * uniform_splits + z; uniform_tiles tiles.
    int uniform_splits;
    int64_t uniform_tiles;
    const float *attn_sink;   // [H] optional: a final o times sink_factor (V4)
    const float *part_o, *part_lse;
    void *o;
    int64_t o_stride_token, o_stride_head;
    float *lse;                               // optional
    int64_t lse_stride_token, lse_stride_head; // decode [T, H]: H, 1; prefill [H, Tq]: 1, Tq
    const int32_t *lse_head_stride_at;        // if set, the head stride is read here (prefill: &cu_seqlens_q[batch])
    float empty_lse;                          // a row no piece saw a key for: +inf (decode), -inf (prefill)
    int num_heads, dv;                        // dv: a multiple of 4
    int rows_per_tile;                        // query rows of a reduce tile at most
    aiter_mla_dtype o_dtype;
};

// (m, s) += (x, sx): two partial softmax denominators s * e^m merged, -inf maxima allowed.
// A NaN piece (row_has_keys) makes m, and so the row, NaN, not empty: max_nan, one instruction
// on NVIDIA (the tests of x in fold_lse tried first cost the warp-a-row reduce 48 bytes of
// spills and D3 1 %).
__device__ __forceinline__ void fold_lse(float &m, float &s, float x, float sx) {
    const float mn = max_nan(m, x);
    if (mn == neg_inf()) return;
    s = s * __expf(m - mn) + sx * __expf(x - mn);
    m = mn;
}

// Shared memory of a reduce whose rows take SPLIT > 1 warps (none for a warp per row).
template <int SPLIT, int V>
struct ReduceShared {
    float4 part[SPLIT][AITER_MLA_WARP_SIZE][V];
    int32_t pm[kReduceThreads]; // the chunk's partial rows and weights
    float w[kReduceThreads];
    float2 fold[kReduceWarps];
};
template <int V>
struct ReduceShared<1, V> {};

// Four consecutive values of o from element i on: one store where the type and the address
// allow (16-bit types 8-byte aligned, f32 16-byte aligned), else value by value; the same
// roundings either way.
__device__ __forceinline__ void store4_f32(void *o, int64_t i, aiter_mla_dtype t, float4 v) {
    if ((t == AITER_MLA_BF16 || t == AITER_MLA_F16) && ((uintptr_t)(static_cast<uint16_t *>(o) + i) & 7) == 0) {
        auto h = [&](float x) { return (uint32_t)(t == AITER_MLA_BF16 ? aiter_mla_f32_to_bf16(x) : aiter_mla_f32_to_f16(x)); };
        *reinterpret_cast<uint2 *>(static_cast<uint16_t *>(o) + i) = make_uint2(h(v.x) | h(v.y) << 16, h(v.z) | h(v.w) << 16);
    } else if (t == AITER_MLA_F32 && ((uintptr_t)(static_cast<float *>(o) + i) & 15) == 0) {
        *reinterpret_cast<float4 *>(static_cast<float *>(o) + i) = v;
    } else {
        aiter_mla_store_f32(o, i, t, v.x);
        aiter_mla_store_f32(o, i + 1, t, v.y);
        aiter_mla_store_f32(o, i + 2, t, v.z);
        aiter_mla_store_f32(o, i + 3, t, v.w);
    }
}

// Partials of a counted tile (counted: the reduce runs beside its producer) are read from the
// L2 (NVIDIA: ld.global.cg), where a line an SM cached before its piece was counted cannot
// serve the read; else through L1, where the 64 units of a 16-head tile share their pieces'
// lse (from the L2 each time, D1's reduce took 1-3 us longer).
template <typename T>
__device__ __forceinline__ T load_partial(const T *x, bool counted) {
#if defined(__CUDA_ARCH__)
    return counted ? __ldcg(x) : *x;
#else
    return (void)counted, *x;
#endif
}

// One unit of a reduce: query row j (of its tile) and head h, over the dims of span `span`
// (SPLIT > 1: the block's warps share it; else one warp); merged from np
// pieces, piece k's partial rows starting at partial_row(k); the merged row goes to row tok
// of p.o (and p.lse). Every thread of the block (SPLIT > 1) or of the warp calls it, pm_me
// being partial_row(me) of its first piece me (read before the wait for the producer).
// SPLIT: warps per row (1, or kReduceWarps for few rows with many pieces); V: float4s per
// lane in one span of AITER_MLA_WARP_SIZE * 4 * V dims.
template <int SPLIT, int V, typename PR>
__device__ __forceinline__ void reduce_row(const ReduceParams &p, int span, int j, int h, int np, int64_t tok,
                                           PR partial_row, int32_t pm_me, ReduceShared<SPLIT, V> &sh) {
    constexpr int W = AITER_MLA_WARP_SIZE, kSpan = reduce_span(V);
    const int lane = threadIdx.x % W, warp = threadIdx.x / W, H = p.num_heads;
    const float *lse_col = p.part_lse + (int64_t)j * H + h; // + partial row * H
    const bool counted = p.arrivals != nullptr;
    auto lse_of = [&](int32_t pm) { return load_partial(lse_col + (int64_t)pm * H, counted); };

    // weights: thread `me` folds pieces me, me + C, ... (keeping its first), then the folds meet:
    // the warp's lanes (narrow), or the block's threads (wide: the pieces of a chunk go through
    // shared memory, so that many pieces cost one round of loads, not one per W)
    constexpr int C = SPLIT > 1 ? kReduceThreads : W, kB = SPLIT > 1 ? 2 * kReduceBatch : kReduceBatch;
    const int me = SPLIT > 1 ? (int)threadIdx.x : lane;
    const int d0 = span * kSpan; // the unit's dims
    // span `d0` of the partial row of piece pm (row j, head h), zeros where `in` is false
    auto load_span = [&](int32_t pm, bool in, float4 (&val)[V]) {
        const float4 *row = reinterpret_cast<const float4 *>(p.part_o + (((int64_t)pm + j) * H + h) * p.dv + d0);
#pragma unroll
        for (int v = 0; v < V; v++) {
            const int d4 = lane + v * W;
            val[v] = in && d0 + d4 * 4 < p.dv ? load_partial(row + d4, counted) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    };
    // (m, s) of the pieces folded by every thread: over the warp, then over the block (wide)
    auto fold_all = [&](float &m, float &s) {
        for (int o = W / 2; o > 0; o >>= 1) {
            const float mo = aiter_mla__shfl_xor(m, o), so = aiter_mla__shfl_xor(s, o);
            fold_lse(m, s, mo, so);
        }
        if constexpr (SPLIT > 1) {
            if (lane == 0) sh.fold[warp] = make_float2(m, s);
            __syncthreads();
            m = neg_inf();
            s = 0.0f;
            for (int w2 = 0; w2 < kReduceWarps; w2++) fold_lse(m, s, sh.fold[w2].x, sh.fold[w2].y);
        }
    };
    float4 acc[V];
#pragma unroll
    for (int v = 0; v < V; v++) acc[v] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float m = neg_inf(), s = 0.0f, g = 0.0f, f = 1.0f;
    auto finish_weights = [&]() {
        g = m != neg_inf() ? m + __logf(s) : p.empty_lse;
        f = m != neg_inf() ? sink_factor(p.attn_sink, h, g) : 1.0f; // the weights sum to 1
    };
    if constexpr (SPLIT > 1) {
        if (np <= SPLIT * kReduceOneRound) { // one round of loads (kReduceOneRound)
            sh.pm[me] = me < np ? pm_me : 0;
            __syncthreads();
            const float x = me < np ? lse_of(pm_me) : neg_inf();
            float4 val[kReduceOneRound][V];
#pragma unroll
            for (int b = 0; b < kReduceOneRound; b++) load_span(sh.pm[warp + b * SPLIT], warp + b * SPLIT < np, val[b]);
            m = x;
            s = x == neg_inf() ? 0.0f : 1.0f;
            fold_all(m, s);
            finish_weights();
            sh.w[me] = me < np && m != neg_inf() ? __expf(x - g) : 0.0f;
            __syncthreads();
#pragma unroll
            for (int b = 0; b < kReduceOneRound; b++) {
                const float wb = sh.w[warp + b * SPLIT];
#pragma unroll
                for (int v = 0; v < V; v++) {
                    acc[v].x += wb * val[b][v].x;
                    acc[v].y += wb * val[b][v].y;
                    acc[v].z += wb * val[b][v].z;
                    acc[v].w += wb * val[b][v].w;
                }
            }
            np = 0; // done: the loop below has nothing left
        }
    }
    int32_t pm0 = 0;
    float l0 = neg_inf();
    for (int k = me; k < np; k += C) {
        const int32_t pm = k == me ? pm_me : partial_row(k);
        const float x = lse_of(pm);
        if (k == me) pm0 = pm, l0 = x;
        fold_lse(m, s, x, 1.0f);
    }
    if (np > 0) {
        fold_all(m, s);
        finish_weights();
    }
    for (int c0 = 0; c0 < np && m != neg_inf(); c0 += C) { // C pieces at a time, one per thread
        int32_t pm = pm0;
        float x = l0;
        if (c0 > 0) {
            pm = c0 + me < np ? partial_row(c0 + me) : 0;
            x = c0 + me < np ? lse_of(pm) : neg_inf();
        }
        const float w = __expf(x - g); // 0 past the pieces
        if constexpr (SPLIT > 1) {
            __syncthreads(); // the last chunk's readers are done (and fold's)
            sh.pm[me] = pm;
            sh.w[me] = w;
            __syncthreads();
        }
        const int cnt = min(C, np - c0);
        for (int i = SPLIT > 1 ? warp : 0; i < cnt; i += SPLIT * kB) {
            float4 val[kB][V];
            float wb[kB];
#pragma unroll
            for (int b = 0; b < kB; b++) { // issue every load of the batch first
                const int q = i + b * SPLIT;
                int32_t pmq;
                if constexpr (SPLIT > 1) {
                    pmq = sh.pm[q < C ? q : 0];
                    wb[b] = q < cnt ? sh.w[q] : 0.0f;
                } else {
                    pmq = aiter_mla__shfl(pm, q % W);
                    wb[b] = aiter_mla__shfl(w, q % W);
                }
                load_span(pmq, q < cnt, val[b]);
            }
#pragma unroll
            for (int b = 0; b < kB; b++)
#pragma unroll
                for (int v = 0; v < V; v++) {
                    acc[v].x += wb[b] * val[b][v].x;
                    acc[v].y += wb[b] * val[b][v].y;
                    acc[v].z += wb[b] * val[b][v].z;
                    acc[v].w += wb[b] * val[b][v].w;
                }
        }
    }
    if constexpr (SPLIT > 1) { // the block's warps meet
#pragma unroll
        for (int v = 0; v < V; v++) sh.part[warp][lane][v] = acc[v];
        __syncthreads();
        if (warp == 0)
            for (int w2 = 1; w2 < SPLIT; w2++)
#pragma unroll
                for (int v = 0; v < V; v++) {
                    acc[v].x += sh.part[w2][lane][v].x;
                    acc[v].y += sh.part[w2][lane][v].y;
                    acc[v].z += sh.part[w2][lane][v].z;
                    acc[v].w += sh.part[w2][lane][v].w;
                }
    }
    if (SPLIT == 1 || warp == 0) {
#pragma unroll
        for (int v = 0; v < V; v++) {
            const int d = d0 + (lane + v * W) * 4;
            if (d < p.dv)
                store4_f32(p.o, tok * p.o_stride_token + h * p.o_stride_head + d, p.o_dtype,
                           make_float4(acc[v].x * f, acc[v].y * f, acc[v].z * f, acc[v].w * f));
        }
    }
    if constexpr (SPLIT > 1) __syncthreads(); // part is refilled by the next unit
    if (lane == 0 && span == 0 && (SPLIT == 1 || warp == 0) && p.lse)
        p.lse[tok * p.lse_stride_token + h * (p.lse_head_stride_at ? *p.lse_head_stride_at : p.lse_stride_head)] = g;
}

// Polls before a reduce unit gives up on its pieces' counters (wait_for_pieces): about a
// millisecond, far past any decode's tail.
constexpr int kReduceSpins = 1 << 13;
__device__ __forceinline__ void spin_pause() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(128);
#elif defined(__HIP_DEVICE_COMPILE__)
    __builtin_amdgcn_s_sleep(2);
#endif
}
// The unit's threads (SPLIT > 1: the block's; else the warp's) wait until every piece of its
// tile has counted all `expect` of its rows (count_stored_rows). Few threads poll: the first
// warp's lanes (lane k: pieces k, k + W, ...; W lanes or, for a warp's unit, lane 0 alone), so
// that the counters' few L2 lines do not take a flood of loads while the decode still streams
// through that L2, each with a pause between polls. A poller fences once its pieces
// are in, and the threads meet, so every piece's rows are visible to all of them. Counters that
// never come right (a plan not as built, its counters not zero) give up after kReduceSpins
// polls (about a millisecond) and wait for the producer's completion instead; false then, and
// the thread's later units skip the counters (every partial is in). Counters left between
// zero and `expect` cannot be told from pieces still coming: they merge early.
// (plan_check refuses a plan whose counters are not zero.)
template <int SPLIT, typename PR>
__device__ __forceinline__ bool wait_for_pieces(const ReduceParams &p, PR partial_row, int np, int expect) {
    constexpr int W = AITER_MLA_WARP_SIZE, kPollers = SPLIT > 1 ? W : 1;
    bool ok = true;
    if (threadIdx.x % (SPLIT > 1 ? kReduceThreads : W) < kPollers) {
        for (int k = (int)threadIdx.x % W; k < np && ok; k += kPollers) {
            const volatile int32_t *count = p.arrivals + partial_row(k);
            for (int spins = 0; *count != expect; spins++) {
                if (spins == kReduceSpins) {
                    ok = false;
                    break;
                }
                spin_pause();
            }
        }
        __threadfence();
    }
    bool all;
    if constexpr (SPLIT > 1) {
        all = __syncthreads_and(ok);
    } else {
        all = aiter_mla__ballot(!ok) == 0;
#if defined(__CUDA_ARCH__)
        __syncwarp();
#endif
    }
    if (!all) wait_for_producer();
    return all;
}
// A unit of a counted tile is done (after wait_for_pieces): its leader counts it; the tile's
// last unit of `units` sets the tile's counters back to zero for the plan's next launch.
// The unit's threads clear the pieces' counters together (one thread clearing 128 of them, a
// dependent load each, cost a batch-1 decode about 6 us).
template <int SPLIT, typename PR>
__device__ __forceinline__ void depart_tile(const ReduceParams &p, PR partial_row, int np, int units) {
    constexpr int C = SPLIT > 1 ? kReduceThreads : AITER_MLA_WARP_SIZE;
    const int me = (int)threadIdx.x % C;
    int32_t *done = p.departures + partial_row(0);
    const int mine = me == 0 && atomicAdd(done, 1) == units - 1;
    const bool last = SPLIT > 1 ? __syncthreads_or(mine) != 0 : aiter_mla__shfl(mine, 0) != 0;
    if (!last) return;
    for (int k = me; k < np; k += C) p.arrivals[partial_row(k)] = 0;
    if (me == 0) *done = 0;
}

template <int SPLIT, int V>
__global__ void __launch_bounds__(kReduceThreads) reduce_kernel(ReduceParams p) {
    constexpr int W = AITER_MLA_WARP_SIZE, kSpan = reduce_span(V), kPerBlock = SPLIT > 1 ? 1 : kReduceWarps;
    __shared__ ReduceShared<SPLIT, V> sh;
    const int warp = threadIdx.x / W, H = p.num_heads, R = p.rows_per_tile;
    const int spans = (p.dv + kSpan - 1) / kSpan; // a unit per span of dims
    const bool uniform = p.uniform_splits > 0;
    const int64_t tiles = uniform ? p.uniform_tiles : (int64_t)min(max(*p.num_tiles, 0), p.max_tiles);
    const int64_t units = tiles * R * H * spans, o_rows = p.o_rows_at ? *p.o_rows_at : INT64_MAX;
    bool waited = false; // the plan is the caller's; partials are the producer's (wait_for_producer)
    for (int64_t u0 = (int64_t)blockIdx.x * kPerBlock; u0 < units; u0 += (int64_t)gridDim.x * kPerBlock) {
        const int64_t u = u0 + (SPLIT > 1 ? 0 : warp); // wide: every warp of the block on one unit; narrow: a warp each
        if (u >= units) continue;
        const int span = (int)(u % spans), h = (int)(u / spans % H), j = (int)(u / spans / H % R);
        const int t = (int)(u / spans / H / R);
        // No partials: nothing to merge (most tiles; decided before the tile's rows are read).
        // A plan's lists past its pieces, or rows past o's, are left out (differences in int64:
        // a plan's entries may be anything).
        const int64_t k0_64 = uniform ? (int64_t)t * p.uniform_splits : p.indptr[t];
        const int64_t np_64 = uniform ? p.uniform_splits : p.indptr[t + 1] - k0_64;
        if (np_64 < 2 || (!uniform && (k0_64 < 0 || k0_64 + np_64 > p.max_partials))) continue;
        const int k0 = (int)k0_64, np = (int)np_64;
        const int qs = uniform ? t : p.final_map[2 * t];
        const int rows = uniform ? 1 : (int)min(max((int64_t)p.final_map[2 * t + 1] - qs, (int64_t)0), (int64_t)R);
        if (j >= rows || qs < 0 || (int64_t)qs + j >= o_rows) continue; // past the tile's rows or o's
        // a piece's rows pm + j inside the workspace whatever the plan says (as built, they are)
        auto partial_row = [&](int k) { return uniform ? k0 + k : min(max(p.partial_map[k0 + k], 0), p.max_partial_rows - 1 - j); };
        const int me = SPLIT > 1 ? (int)threadIdx.x : (int)threadIdx.x % W;
        const int32_t pm_me = me < np ? partial_row(me) : 0;
        if (!waited) { // once waited (or given up on the counters), the producer is complete
            if (p.arrivals) {
                waited = !wait_for_pieces<SPLIT>(p, partial_row, np, rows * H);
            } else {
                wait_for_producer();
                waited = true;
            }
        }
        reduce_row<SPLIT, V>(p, span, j, h, np, (int64_t)qs + j, partial_row, pm_me, sh);
        if (p.arrivals) depart_tile<SPLIT>(p, partial_row, np, rows * H * spans);
    }
    // The reduce never ends before its producer (the stream's order): with counters, block 0
    // waits for it; else every thread that had no unit.
    if (p.arrivals ? blockIdx.x == 0 && !waited : !waited) wait_for_producer();
}

// ==== varlen prefill (SPEC 2, 2c) ==========================================================
// Work comes in units: query rows [r0, r1) of request b, one head, against the request's
// keys [j0, j1) (request-local). Without a plan, block (x, h, b) takes query tiles of its
// request from the last (the heaviest under the causal rule) down, every key; with a
// persistent plan, block (c, h) takes CU c's work items, each a query tile against a key
// range, in passes of the kernel's row count, writing o or fp32 partials that the reduce
// merges. Both kernels (portable, tensor cores) share the unit walk and the row limits.
struct PrefillParams {
    aiter_mla_prefill_args a;   // resolved by the wrapper
    const int32_t *work_indptr; // persistent plan: [num_cu + 1]; NULL: no plan
    const int32_t *work_info;   // [max_work, 8]
    int max_work, max_partial_rows; // the plan's bounds (its info): for_each_prefill_unit holds the items to them
    float *part_o;              // [max_partial_rows, H, dv]
    float *part_lse;            // [max_partial_rows, H]
    float score_scale;          // sm_scale (* q_scale * k_scale for fp8) * log2(e)
    float v_scale;              // fp8: v_scale, else 1
    bool o_rows16;              // o_rows16() of o: the wgmma kernel stores whole 16-byte chunks
    // No plan, resident_blocks > 0 (the wgmma kernel): the launch has that many blocks, not
    // prefill_grid's `units` (query tile, head, request), and each takes several of the grid's
    // blocks in turn (for_each_prefill_unit). 0: a block for each grid block. (Derivable as
    // units.x != 0 with units zero otherwise; that form measured P3 and P4 0.8 % slower.)
    dim3 units;
    int resident_blocks;
};

struct PrefillUnit {
    int h, q0, sq, k0, sk; // head; the request's first query row, query rows, first key row, keys
    int r0, r1;            // the unit's query rows (request-local)
    int j0, j1;            // the unit's keys (request-local)
    int loc;               // partial row of the unit's first row, -1: write o and lse
    // Keys row i may see, exclusive: the causal rule (bottom-right aligned) within [.., j1).
    __device__ int limit(int i, bool causal) const { return min(j1, causal ? sk - sq + i + 1 : sk); }
};

// Request b's rows: its first query row and query rows, its first key row and keys (a
// non-monotone request counts as empty).
__device__ __forceinline__ void prefill_request(const aiter_mla_prefill_args &a, int b, PrefillUnit &u) {
    u.q0 = a.cu_seqlens_q[b];
    u.sq = max(0, a.cu_seqlens_q[b + 1] - u.q0);
    u.k0 = a.cu_seqlens_k[b];
    u.sk = max(0, a.cu_seqlens_k[b + 1] - u.k0);
}

// The units of block (bx, by, bz) of the no-plan grid g.
template <int BM, typename F>
__device__ __forceinline__ void grid_block_units(const PrefillParams &p, int bx, int by, int bz, const dim3 &g, F &&run) {
    const aiter_mla_prefill_args &a = p.a;
    PrefillUnit u;
    u.loc = -1;
    for (u.h = by; u.h < a.num_heads; u.h += g.y) {
        for (int64_t b = bz; b < a.batch; b += g.z) { // int64: b + g.z passes INT32_MAX near the end
            prefill_request(a, (int)b, u);
            u.j0 = 0;
            u.j1 = u.sk;
            // a max_seqlen_q below the truth costs time, not rows: the tiles wrap around
            for (int t = (u.sq + BM - 1) / BM - 1 - bx; t >= 0; t -= (int)g.x) {
                u.r0 = t * BM;
                u.r1 = min(u.r0 + BM, u.sq);
                run(u, 0);
            }
        }
    }
}

// Three walks, each with its own copy of the unit body: merged into one walk (one copy, or
// one for the plan and one for both grid cases) the wgmma kernel spilled less but ran 1-6 %
// slower on every H100 prefill row, full-grid ones included.
template <int BM, typename F>
__device__ void for_each_prefill_unit(const PrefillParams &p, F &&run) {
    const aiter_mla_prefill_args &a = p.a;
    release_dependents(); // the plan's reduce may launch now
    if (p.work_indptr) {
        PrefillUnit u;
        for (u.h = blockIdx.y; u.h < a.num_heads; u.h += gridDim.y) {
            const WorkRange list = plan_list_items(p.work_indptr, blockIdx.x, p.max_work);
            for (int w = list.begin; w < list.end; w++) {
                // the plan is device data: an item naming no request, or partial rows outside
                // the workspace, has no rows; its rows and keys are held to its request's (within:
                // x - base into [0, n], in int64, where a plan's entries may be anything)
                const int32_t *wi = p.work_info + (int64_t)w * AITER_MLA_WORK_INTS;
                const int b = wi[0];
                const bool b_ok = b >= 0 && b < a.batch;
                prefill_request(a, b_ok ? b : 0, u);
                u.loc = wi[1];
                auto within = [](int32_t x, int base, int n) { return (int)min(max((int64_t)x - base, (int64_t)0), (int64_t)n); };
                const int qs = within(wi[2], u.q0, u.sq);
                int qe = within(wi[3], u.q0, u.sq);
                if (!b_ok || (u.loc != -1 && (u.loc < 0 || (int64_t)u.loc + qe - qs > p.max_partial_rows))) qe = qs;
                u.j0 = within(wi[4], u.k0, u.sk);
                u.j1 = within(wi[5], u.k0, u.sk);
                for (u.r0 = qs; u.r0 < qe; u.r0 += BM) {
                    u.r1 = min(u.r0 + BM, qe);
                    run(u, u.r0 - qs);
                }
            }
        }
    } else if (p.resident_blocks == 0) {
        grid_block_units<BM>(p, blockIdx.x, blockIdx.y, blockIdx.z, gridDim, run);
    } else {
        // Resident blocks (G of them): round k takes the grid's blocks k G .. k G + G - 1 in their
        // launch order (query tiles heaviest first, head after head), block c the c-th of them in
        // even rounds and the (G - 1 - c)-th in odd ones, so that a block that drew a heavy tile
        // draws a light one next. The next unit's Q and first keys then load while this one ends,
        // and the blocks in flight span the same few heads as the grid's do (their keys stay in
        // the L2).
        const int64_t G = gridDim.x, nx = p.units.x, nxy = nx * p.units.y, total = nxy * p.units.z;
        for (int64_t k = 0, c = blockIdx.x;; k++) {
            const int64_t j = k * G + (k & 1 ? G - 1 - c : c);
            if (j >= total) break;
            grid_block_units<BM>(p, (int)(j % nx), (int)(j % nxy / nx), (int)(j / nxy), p.units, run);
        }
    }
}

// Row i of a split unit (u.loc >= 0): its index among the partial rows (part_lse's values,
// part_o's rows of dv).
__device__ __forceinline__ int64_t prefill_part_row(const PrefillParams &p, const PrefillUnit &u, int i, int prow0) {
    return (int64_t)(u.loc + prow0 + i - u.r0) * p.a.num_heads + u.h;
}
// Row i of a unit is done: o (or the partial row) = acc * scale, lse (natural log, -inf
// when no key). lse [H, Tq] with Tq = cu_seqlens_q[batch].
__device__ __forceinline__ void prefill_store_lse(const PrefillParams &p, const PrefillUnit &u, int i, int prow0, float lse) {
    const aiter_mla_prefill_args &a = p.a;
    if (u.loc < 0) {
        if (a.lse) a.lse[(int64_t)u.h * a.cu_seqlens_q[a.batch] + u.q0 + i] = lse;
    } else {
        p.part_lse[prefill_part_row(p, u, i, prow0)] = lse;
    }
}
__device__ __forceinline__ void prefill_store_o(const PrefillParams &p, const PrefillUnit &u, int i, int prow0, int d, float v) {
    const aiter_mla_prefill_args &a = p.a;
    if (u.loc < 0)
        aiter_mla_store_f32(a.o, (int64_t)(u.q0 + i) * a.o_stride_token + (int64_t)u.h * a.o_stride_head + d, a.o_dtype, v);
    else
        p.part_o[prefill_part_row(p, u, i, prow0) * a.dv + d] = v;
}

// Portable path: 16 rows per pass, keys in tiles of 8 through shared memory (fp32), one
// thread per (row, key) score, then every thread owns dims tid and tid + 128 of V.
constexpr int kPfThreads = 128, kPfRows = 16, kPfKeys = 8, kPfMaxDim = 256;

template <int ET>
__global__ void __launch_bounds__(kPfThreads) prefill_kernel(PrefillParams p) {
    __shared__ float q_s[kPfRows][kPfMaxDim];
    __shared__ float k_s[kPfKeys][kPfMaxDim];
    __shared__ float v_s[kPfKeys][kPfMaxDim];
    __shared__ float s_s[kPfRows][kPfKeys];
    __shared__ float m_s[kPfRows], l_s[kPfRows], alpha_s[kPfRows];
    const aiter_mla_prefill_args &a = p.a;
    const aiter_mla_dtype et = (aiter_mla_dtype)ET;
    const int tid = threadIdx.x, dqk = a.dqk, dv = a.dv;
    for_each_prefill_unit<kPfRows>(p, [&](const PrefillUnit &u, int prow0) {
        const int rows = u.r1 - u.r0, jend = max(u.j0, u.limit(u.r1 - 1, a.causal));
        for (int c = tid; c < kPfRows * dqk; c += kPfThreads) {
            const int r = c / dqk, d = c - r * dqk;
            q_s[r][d] = r < rows ? aiter_mla_load_f32(a.q, (int64_t)(u.q0 + u.r0 + r) * a.q_stride_token +
                                                                (int64_t)u.h * a.q_stride_head + d, et)
                                 : 0.0f;
        }
        if (tid < kPfRows) {
            m_s[tid] = neg_inf();
            l_s[tid] = 0.0f;
        }
        float acc[kPfRows][2];
#pragma unroll
        for (int r = 0; r < kPfRows; r++) acc[r][0] = acc[r][1] = 0.0f;
        for (int kb = u.j0; kb < jend; kb += kPfKeys) {
            const int nk = min(kPfKeys, jend - kb);
            __syncthreads(); // the previous tile is consumed (and q_s, m_s are written)
            for (int c = tid; c < kPfKeys * dqk; c += kPfThreads) {
                const int j = c / dqk, d = c - j * dqk;
                k_s[j][d] = j < nk ? aiter_mla_load_f32(a.k, (int64_t)(u.k0 + kb + j) * a.k_stride_token +
                                                                 (int64_t)u.h * a.k_stride_head + d, et)
                                   : 0.0f;
            }
            for (int c = tid; c < kPfKeys * dv; c += kPfThreads) {
                const int j = c / dv, d = c - j * dv;
                v_s[j][d] = j < nk ? aiter_mla_load_f32(a.v, (int64_t)(u.k0 + kb + j) * a.v_stride_token +
                                                                 (int64_t)u.h * a.v_stride_head + d, et)
                                   : 0.0f;
            }
            __syncthreads();
            { // one score per thread: 16 rows x 8 keys
                const int r = tid / kPfKeys, j = tid % kPfKeys;
                float s = 0.0f;
                for (int d = 0; d < dqk; d++) s += q_s[r][d] * k_s[j][d];
                s_s[r][j] = (r < rows && kb + j < u.limit(u.r0 + r, a.causal)) ? s * p.score_scale : neg_inf();
            }
            __syncthreads();
            if (tid < kPfRows) { // online softmax (log2 domain), one thread per row
                float mx = m_s[tid];
                for (int j = 0; j < kPfKeys; j++) mx = fmaxf(mx, s_s[tid][j]);
                const float mu = mx == neg_inf() ? 0.0f : mx, alpha = exp2f(m_s[tid] - mu);
                float sum = 0.0f;
                for (int j = 0; j < kPfKeys; j++) {
                    const float e = exp2f(s_s[tid][j] - mu);
                    s_s[tid][j] = e;
                    sum += e;
                }
                l_s[tid] = l_s[tid] * alpha + sum;
                m_s[tid] = mx;
                alpha_s[tid] = alpha;
            }
            __syncthreads();
#pragma unroll
            for (int r = 0; r < kPfRows; r++)
#pragma unroll
                for (int x = 0; x < 2; x++) {
                    const int d = tid + x * kPfThreads;
                    if (d < dv) {
                        float o = acc[r][x] * alpha_s[r];
                        for (int j = 0; j < kPfKeys; j++) o += s_s[r][j] * v_s[j][d];
                        acc[r][x] = o;
                    }
                }
        }
        __syncthreads(); // m_s, l_s are final
#pragma unroll
        for (int r = 0; r < kPfRows; r++) {
            if (r < rows) {
                const float l = l_s[r], scale = row_has_keys(l) ? p.v_scale / l : 0.0f;
#pragma unroll
                for (int x = 0; x < 2; x++)
                    if (tid + x * kPfThreads < dv) prefill_store_o(p, u, u.r0 + r, prow0, tid + x * kPfThreads, acc[r][x] * scale);
                if (tid == 0) prefill_store_lse(p, u, u.r0 + r, prow0, row_has_keys(l) ? row_lse(m_s[r], l) : neg_inf());
            }
        }
        __syncthreads(); // q_s, m_s, l_s are refilled by the next unit
    });
}

// ==== varlen prefill: matrix-core path (AMD MFMA) ==========================================
// FlashAttention-2 order on the decode's 16x16x16 product (wave_mma), for head dims 192/128
// and 128/128: 64 query rows per pass, wave w taking rows 16 w .. + 16 with its Q fragments in
// registers; keys in tiles of 32, K and V rows copied into shared memory, the next tile's
// loads in flight in registers while this one is computed. Each wave computes its rows' S
// over the whole tile, the online softmax in registers (a row's 32 scores lie on 16 lanes),
// P through shared memory into the A operand, and O += P V over all dv dims (fp32 in
// registers; a lane's O rows are its S rows, so it rescales them itself). bf16 and f16 take
// products in their type; e4m3 (both flavours) is widened exactly to f16 and P rounded to f16.
#ifdef AITER_MLA_HAS_MFMA
namespace mfma {

constexpr int kPfM = 16 * kWaves; // query rows per pass

template <int ET, int DQK, int DV>
__global__ void __launch_bounds__(kThreads) prefill_mfma_kernel(PrefillParams p) {
    constexpr int QT = product_type(ET), kEsz = QT == ET ? 2 : 1; // product type, source bytes per element
    constexpr int kKPitch = DQK * 2 + 16, kVPitch = DV * 2 + 16, kQPairs = DQK / 32, kVTiles = DV / 16;
    static_assert(DQK % 32 == 0 && DV % 16 == 0, "head dims in whole fragments");
    __shared__ __align__(16) unsigned char k_s[kN * kKPitch];
    __shared__ __align__(16) unsigned char v_s[kN * kVPitch];
    __shared__ __align__(16) unsigned char p_s[kWaves][16 * kPPitch]; // each wave's P
    WaveScratch *const x = wave_scratch();
    const aiter_mla_prefill_args &a = p.a;
    const int tid = threadIdx.x, wave = tid / kWave, lane = tid % kWave, g = lane / 16, c16 = lane % 16;
    unsigned char *const pw = p_s[wave];
    for_each_prefill_unit<kPfM>(p, [&](const PrefillUnit &u, int prow0) AITER_MLA__INLINE_BODY {
        const int rows = u.r1 - u.r0, jend = max(u.j0, u.limit(u.r1 - 1, a.causal));
        // Q fragments: row 16 wave + c16, dims 32 b + 8 g .. + 8 of each block b (two k-steps)
        uint4 qf[kQPairs];
        {
            const int qr = 16 * wave + c16;
            const int64_t q0 = qr < rows ? (int64_t)(u.q0 + u.r0 + qr) * a.q_stride_token + (int64_t)u.h * a.q_stride_head : 0;
#pragma unroll
            for (int b = 0; b < kQPairs; b++) qf[b] = qr < rows ? q_frag<ET>(a.q, q0 + 32 * b + 8 * g) : make_uint4(0u, 0u, 0u, 0u);
        }
        // this lane's softmax rows 4 g + i (of the wave's 16): key bounds, running max and sum
        int lim[4];
        float m[4], l[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = 16 * wave + 4 * g + i;
            lim[i] = r < rows ? u.limit(u.r0 + r, a.causal) : -1;
            m[i] = neg_inf();
            l[i] = 0.0f;
        }
        Acc o[kVTiles] = {};
        const int64_t head_k = (int64_t)u.h * a.k_stride_head, head_v = (int64_t)u.h * a.v_stride_head;
        const unsigned char *kb0 = static_cast<const unsigned char *>(a.k), *vb0 = static_cast<const unsigned char *>(a.v);
        uint4 kbuf[Chunks<DQK * kEsz>::loads], vbuf[Chunks<DV * kEsz>::loads];
        auto load_tile = [&](int kb) {
            const int nk = min(kN, jend - kb);
            load_rows<DQK * kEsz>(kbuf, [&](int j) {
                return j < nk ? kb0 + ((int64_t)(u.k0 + kb + j) * a.k_stride_token + head_k) * kEsz : nullptr; }, tid);
            load_rows<DV * kEsz>(vbuf, [&](int j) {
                return j < nk ? vb0 + ((int64_t)(u.k0 + kb + j) * a.v_stride_token + head_v) * kEsz : nullptr; }, tid);
        };
        if (u.j0 < jend) load_tile(u.j0);
        for (int kb = u.j0; kb < jend; kb += kN) {
            store_rows<DQK * kEsz, ET, QT, kKPitch>(k_s, kbuf, tid);
            store_rows<DV * kEsz, ET, QT, kVPitch>(v_s, vbuf, tid);
            __syncthreads();
            if (kb + kN < jend) load_tile(kb + kN);
            wave_rows_tile<QT, kQPairs, kVTiles, kKPitch, kVPitch>(qf, k_s, v_s, pw, p.score_scale,
                                                                   [&](int i, int j) { return kb + j < lim[i]; }, m, l, o, x);
            __syncthreads(); // k_s, v_s and P are refilled next
        }
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = 16 * wave + 4 * g + i;
            if (r < rows) {
                const float scale = row_has_keys(l[i]) ? p.v_scale / l[i] : 0.0f;
#pragma unroll
                for (int j = 0; j < kVTiles; j++) prefill_store_o(p, u, u.r0 + r, prow0, 16 * j + c16, o[j].v[i] * scale);
                if (c16 == 0) prefill_store_lse(p, u, u.r0 + r, prow0, row_has_keys(l[i]) ? row_lse(m[i], l[i]) : neg_inf());
            }
        }
    });
}

} // namespace mfma
#endif

// ==== varlen prefill: tensor-core path (NVIDIA sm_80+, mma.sync m16n8k16, cp.async) ========
// FlashAttention-2 style. 128 query rows per pass; 4 warps of 32 rows (dv <= 128) or 8 warps
// of 16 rows (dv > 128, whose accumulators are twice as wide). Q stays in shared memory;
// K and V tiles of 64 keys each have one buffer, loaded with 16-byte cp.async (zero-filled
// past the end) so that V streams in during Q K^T and the next K during the softmax and
// P V. Scores stay in registers: the accumulator layout of S is the A-operand layout of P.
// fp8 operands: Q widened on the way in with plain loads; K and V, for the common head-dim
// pairs, copied as bytes by cp.async into staging rows (so that their latency overlaps as
// bf16 tiles' does) and widened to f16 in shared memory before use, the products then
// taken in f16 (exact: e4m3 fits f16; P rounded to f16); for the other pairs widened to
// bf16 on the way in like Q.
#ifdef AITER_MLA_HAS_MMA
namespace mma {

constexpr int kPfN = 64; // keys per tile

// A block's shape and shared-memory layout for head dims (dqk, dv); staged: fp8 K and V staged
// as bytes. The host asks it too, for the device's limit (prefill_kernel_of).
struct PfLayout {
    int mtw, warps, threads, bm, qrow, vrow, q, k, v, kst, vst, total;
};
__host__ __device__ constexpr PfLayout pf_layout(int dqk, int dv, bool staged) {
    const int mtw = dv <= 128 ? 2 : 1; // m16 tiles per warp
    const int warps = 8 / mtw, bm = warps * 16 * mtw;
    const int qrow = dqk * 2 + 16, vrow = dv * 2 + 16; // padded rows: ldmatrix hits 8 bank groups
    const int k = bm * qrow, v = k + kPfN * qrow, kst = v + kPfN * vrow, vst = kst + (staged ? kPfN * dqk : 0); // byte rows of K, V
    return PfLayout{mtw, warps, warps * 32, bm, qrow, vrow, 0, k, v, kst, vst, vst + (staged ? kPfN * dv : 0)};
}
template <int DQK, int DV, bool STAGED = false>
struct PfShape {
    static constexpr PfLayout L = pf_layout(DQK, DV, STAGED);
    static constexpr int mtw = L.mtw, threads = L.threads, bm = L.bm, qrow = L.qrow, vrow = L.vrow;
    static constexpr int q = L.q, k = L.k, v = L.v, total = L.total; // the staged rows: L.kst, L.vst
};

// Rows [row0, row0 + valid) of a [rows, head, D] tensor (element et, head offset in elements)
// into `rows` shared-memory rows of `pitch` bytes, 16-bit (fp8 widened to f16 when F16);
// rows past `valid` are zeros.
template <int D, int THREADS, bool F16 = false>
__device__ __forceinline__ void pf_load_rows(aiter_mla_dtype et, unsigned char *dst, int pitch, const void *src,
                                             int64_t row_stride, int64_t head_off, int64_t row0, int valid, int rows) {
    constexpr int kChunks = D / 8; // 8 elements = 16 bytes in shared memory
    for (int c = threadIdx.x; c < rows * kChunks; c += THREADS) {
        const int r = c / kChunks, part = c - r * kChunks;
        unsigned char *d = dst + r * pitch + part * 16;
        const int64_t e = (row0 + r) * row_stride + head_off + part * 8; // first element
        if (et == AITER_MLA_BF16 || et == AITER_MLA_F16) {
            const uint16_t *g = static_cast<const uint16_t *>(src);
            cp_async16(smem_addr(d), r < valid ? g + e : g, r < valid ? 16 : 0);
        } else {
            *reinterpret_cast<uint4 *>(d) =
                r < valid ? e4m3x8_to_16x8<F16>(*reinterpret_cast<const uint2 *>(static_cast<const uint8_t *>(src) + e),
                                                et == AITER_MLA_FP8_E4M3FNUZ, nullptr)
                          : make_uint4(0u, 0u, 0u, 0u);
        }
    }
}
// The staged form for fp8: the same rows as bytes (D per row, packed) by cp.async, zeros
// past `valid`; then pf_widen_rows into the 16-bit rows, where each thread widens the
// 16-byte chunks it copied itself: after its cp.async wait they are visible to it, so the
// widening needs no barrier before it (only one after, for the readers of the tile).
template <int D, int THREADS>
__device__ __forceinline__ void pf_stage_rows(unsigned char *dst, const void *src, int64_t row_stride, int64_t head_off,
                                              int64_t row0, int valid, int rows) {
    constexpr int kChunks = D / 16;
    const uint8_t *g = static_cast<const uint8_t *>(src);
    for (int c = threadIdx.x; c < rows * kChunks; c += THREADS) {
        const int r = c / kChunks, part = c - r * kChunks;
        cp_async16(smem_addr(dst + r * D + part * 16), r < valid ? g + (row0 + r) * row_stride + head_off + part * 16 : g,
                   r < valid ? 16 : 0);
    }
}
template <int D, int THREADS>
__device__ __forceinline__ void pf_widen_rows(const unsigned char *src, unsigned char *dst, int pitch, int rows, bool fnuz) {
    constexpr int kChunks = D / 16; // pf_stage_rows' chunks: 16 bytes in, 32 out
    for (int c = threadIdx.x; c < rows * kChunks; c += THREADS) {
        const int r = c / kChunks, part = c - r * kChunks;
        const uint4 b = *reinterpret_cast<const uint4 *>(src + r * D + part * 16);
        uint4 *out = reinterpret_cast<uint4 *>(dst + r * pitch + part * 32);
        out[0] = e4m3x8_to_16x8<true>(make_uint2(b.x, b.y), fnuz, nullptr);
        out[1] = e4m3x8_to_16x8<true>(make_uint2(b.z, b.w), fnuz, nullptr);
    }
}

template <int DQK, int DV, bool F16, bool STAGED> // STAGED: fp8 K and V staged as bytes (F16 then)
__global__ void __launch_bounds__(PfShape<DQK, DV>::threads) prefill_mma_kernel(PrefillParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    static_assert(!STAGED || F16, "staged fp8 is widened to f16");
    using Sh = PfShape<DQK, DV, STAGED>;
    constexpr int MTW = Sh::mtw, NT = kPfN / 8, NTV = DV / 8, T = Sh::threads;
    extern __shared__ __align__(128) unsigned char smem[];
    const aiter_mla_prefill_args &a = p.a;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint32_t q_addr = smem_addr(smem + Sh::q), k_addr = smem_addr(smem + Sh::k), v_addr = smem_addr(smem + Sh::v);

    for_each_prefill_unit<Sh::bm>(p, [&](const PrefillUnit &u, int prow0) {
        const int rows = u.r1 - u.r0, jend = max(u.j0, u.limit(u.r1 - 1, a.causal));
        const int ntiles = (jend - u.j0 + kPfN - 1) / kPfN;
        const int wrow0 = warp * 16 * MTW; // the warp's first row in the pass
        // the least limit among the warp's real rows: tiles below it need no mask
        const int warp_lim = u.limit(u.r0 + min(wrow0, rows - 1), a.causal);
        const bool fnuz = a.qkv_dtype == AITER_MLA_FP8_E4M3FNUZ;
        // the K or V tile of keys [kb, kb + kPfN): 16-bit rows, or (STAGED) byte rows to widen
        auto load_k = [&](int kb) {
            const int64_t head = (int64_t)u.h * a.k_stride_head;
            if constexpr (STAGED) pf_stage_rows<DQK, T>(smem + Sh::L.kst, a.k, a.k_stride_token, head, u.k0 + kb, min(kPfN, jend - kb), kPfN);
            else pf_load_rows<DQK, T>(a.qkv_dtype, smem + Sh::k, Sh::qrow, a.k, a.k_stride_token, head, u.k0 + kb, min(kPfN, jend - kb), kPfN);
        };
        auto load_v = [&](int kb) {
            const int64_t head = (int64_t)u.h * a.v_stride_head;
            if constexpr (STAGED) pf_stage_rows<DV, T>(smem + Sh::L.vst, a.v, a.v_stride_token, head, u.k0 + kb, min(kPfN, jend - kb), kPfN);
            else pf_load_rows<DV, T>(a.qkv_dtype, smem + Sh::v, Sh::vrow, a.v, a.v_stride_token, head, u.k0 + kb, min(kPfN, jend - kb), kPfN);
        };
        pf_load_rows<DQK, T, F16>(a.qkv_dtype, smem + Sh::q, Sh::qrow, a.q, a.q_stride_token, (int64_t)u.h * a.q_stride_head,
                                  u.q0 + u.r0, rows, Sh::bm);
        if (ntiles > 0) load_k(u.j0);
        cp_async_commit();

        float acc[MTW][NTV][4], m_r[MTW][2], l_r[MTW][2];
        int lim_r[MTW][2];
#pragma unroll
        for (int mt = 0; mt < MTW; mt++) {
#pragma unroll
            for (int nt = 0; nt < NTV; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mt][nt][e] = 0.0f;
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                m_r[mt][hf] = neg_inf();
                l_r[mt][hf] = 0.0f;
                lim_r[mt][hf] = u.limit(u.r0 + wrow0 + mt * 16 + (lane >> 2) + hf * 8, a.causal);
            }
        }

        for (int t = 0; t < ntiles; t++) {
            const int kb = u.j0 + t * kPfN;
            cp_async_wait<0>();
            // staged: this thread's chunks of K (every warp is done with the previous K: the
            // last barrier came after Q K^T)
            if constexpr (STAGED) pf_widen_rows<DQK, T>(smem + Sh::L.kst, smem + Sh::k, Sh::qrow, kPfN, fnuz);
            __syncthreads(); // K (and Q) landed or widened; every warp is done with the previous V
            load_v(kb);
            cp_async_commit();
            if constexpr (STAGED) { // the next K's bytes go in now, not after Q K^T
                if (t + 1 < ntiles) load_k(kb + kPfN);
                cp_async_commit();
            }

            // S = Q K^T, [16 MTW rows, 64 keys] per warp
            float s[MTW][NT][4];
#pragma unroll
            for (int mt = 0; mt < MTW; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[mt][nt][e] = 0.0f;
#pragma unroll 2
            for (int kk = 0; kk < DQK / 16; kk++) {
                uint32_t qa[MTW][4];
#pragma unroll
                for (int mt = 0; mt < MTW; mt++)
                    ldsm_x4(q_addr + (wrow0 + mt * 16 + (lane & 15)) * Sh::qrow + kk * 32 + (lane >> 4) * 16, qa[mt]);
#pragma unroll
                for (int np = 0; np < NT / 2; np++) {
                    uint32_t kf[4]; // two n8-tiles of keys: np * 16 + 0..7 and + 8..15
                    ldsm_x4(k_addr + (np * 16 + (lane & 7) + (lane >> 4) * 8) * Sh::qrow + kk * 32 + ((lane >> 3) & 1) * 16, kf);
#pragma unroll
                    for (int mt = 0; mt < MTW; mt++) {
                        mma16<F16>(s[mt][2 * np], qa[mt], kf[0], kf[1]);
                        mma16<F16>(s[mt][2 * np + 1], qa[mt], kf[2], kf[3]);
                    }
                }
            }
            if constexpr (!STAGED) {
                __syncthreads(); // every warp is done with K: the next tile may land
                if (t + 1 < ntiles) load_k(kb + kPfN);
                cp_async_commit();
            }

            // online softmax in the log2 domain; a row lives in the 4 lanes of a quad. Scores stay
            // unscaled (the scale is positive) and enter exp2 through one fma.
            if (kb + kPfN > warp_lim) { // a tile that crosses some row's limit: mask (warp-uniform)
#pragma unroll
                for (int mt = 0; mt < MTW; mt++)
#pragma unroll
                    for (int hf = 0; hf < 2; hf++)
#pragma unroll
                        for (int nt = 0; nt < NT; nt++)
#pragma unroll
                            for (int e = 0; e < 2; e++)
                                if (kb + nt * 8 + (lane & 3) * 2 + e >= lim_r[mt][hf]) s[mt][nt][hf * 2 + e] = neg_inf();
            }
            bool same_max = true; // no row's max moved: the rescale of O can be skipped
            float alpha[MTW][2];
#pragma unroll
            for (int mt = 0; mt < MTW; mt++) {
#pragma unroll
                for (int hf = 0; hf < 2; hf++) {
                    float mx = neg_inf();
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) mx = fmaxf(mx, fmaxf(s[mt][nt][hf * 2], s[mt][nt][hf * 2 + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float m_new = fmaxf(m_r[mt][hf], mx * p.score_scale), m_use = m_new == neg_inf() ? 0.0f : m_new;
                    alpha[mt][hf] = fast_exp2(m_r[mt][hf] - m_use);
                    same_max &= m_new == m_r[mt][hf];
                    m_r[mt][hf] = m_new;
                    float sum = 0.0f; // this lane's share; the quad adds them up at the end
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const float pe = fast_exp2(fmaf(s[mt][nt][hf * 2 + e], p.score_scale, -m_use));
                            s[mt][nt][hf * 2 + e] = pe;
                            sum += pe;
                        }
                    l_r[mt][hf] = l_r[mt][hf] * alpha[mt][hf] + sum;
                }
            }
            if (!__all_sync(0xffffffffu, same_max)) {
#pragma unroll
                for (int mt = 0; mt < MTW; mt++)
#pragma unroll
                    for (int nt = 0; nt < NTV; nt++)
#pragma unroll
                        for (int e = 0; e < 4; e++) acc[mt][nt][e] *= alpha[mt][e >> 1];
            }

            cp_async_wait<1>();
            if constexpr (STAGED) pf_widen_rows<DV, T>(smem + Sh::L.vst, smem + Sh::v, Sh::vrow, kPfN, fnuz); // this thread's chunks
            __syncthreads(); // V landed or widened (the next K may still be in flight)
            // O += P V: P's A fragments straight from the S accumulators
#pragma unroll
            for (int kk = 0; kk < kPfN / 16; kk++) {
                uint32_t pa[MTW][4];
#pragma unroll
                for (int mt = 0; mt < MTW; mt++) {
                    pa[mt][0] = pack16x2<F16>(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    pa[mt][1] = pack16x2<F16>(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    pa[mt][2] = pack16x2<F16>(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    pa[mt][3] = pack16x2<F16>(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
#pragma unroll
                for (int np = 0; np < NTV / 2; np++) {
                    uint32_t vf[4];
                    ldsm_x4_trans(v_addr + (kk * 16 + (lane & 15)) * Sh::vrow + (np * 16 + (lane >> 4) * 8) * 2, vf);
#pragma unroll
                    for (int mt = 0; mt < MTW; mt++) {
                        mma16<F16>(acc[mt][2 * np], pa[mt], vf[0], vf[1]);
                        mma16<F16>(acc[mt][2 * np + 1], pa[mt], vf[2], vf[3]);
                    }
                }
            }
        }

        // o = acc / l (times the fp8 V scale); lse in natural log, -inf for a row with no key
#pragma unroll
        for (int mt = 0; mt < MTW; mt++) {
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                float l = l_r[mt][hf];
                l += __shfl_xor_sync(0xffffffffu, l, 1);
                l += __shfl_xor_sync(0xffffffffu, l, 2);
                const int i = u.r0 + wrow0 + mt * 16 + (lane >> 2) + hf * 8;
                if (i >= u.r1) continue;
                const float scale = row_has_keys(l) ? p.v_scale / l : 0.0f;
#pragma unroll
                for (int nt = 0; nt < NTV; nt++) {
                    const int d = nt * 8 + (lane & 3) * 2;
                    prefill_store_o(p, u, i, prow0, d, acc[mt][nt][hf * 2] * scale);
                    prefill_store_o(p, u, i, prow0, d + 1, acc[mt][nt][hf * 2 + 1] * scale);
                }
                if ((lane & 3) == 0) prefill_store_lse(p, u, i, prow0, row_has_keys(l) ? row_lse(m_r[mt][hf], l) : neg_inf());
            }
        }
        cp_async_wait<0>();
        __syncthreads(); // shared memory is refilled by the next unit
    });
#endif
}

} // namespace mma
#endif

// ==== varlen prefill: warpgroup path (NVIDIA sm_90a, wgmma) ================================
// bf16, f16 and e4m3fn q/k/v with head dims 192/128 or 128/128, in builds whose every NVIDIA
// target is sm_90a (AITER_MLA_WGMMA); the other pairs, builds and e4m3fnuz (no wgmma takes it)
// take the mma.sync path. e4m3fn: S from e4m3 Q and K as copied (m64n128k32), P V as e4m3
// products too, P rounded to e4m3 after a factor kPUp and V transposed by the loader (copied
// as bytes to a staging slot, then transposed into its slot; see prefill_wgmma_kernel). An
// earlier form widened V to f16 in shared memory for f16 P V products: P1-fp8 3522 -> 1572 us
// against the mma.sync path (widening K too, and through registers, had made the loader the
// bottleneck: 3519 -> 5445 us).
// 128 query rows a pass, key tiles of 128 in two slots, three warpgroups:
//   warpgroups 0 and 1 (the consumers): 64 query rows each; S = Q K^T (wgmma, Q and K in
//     shared memory), the online softmax in registers, O += P V with P from registers (the
//     accumulator layout of S is the A fragment layout) and V in shared memory. O stays in
//     registers (64 fp32 a thread). S of tile i is issued before P V of tile i - 1, so the
//     softmax of tile i runs while that P V does; and the two take turns to issue (named
//     barriers), so that one's softmax overlaps the other's products rather than both idling
//     the tensor cores at once;
//   warpgroup 2 (the loader): Q and each tile's K and V; K and V are handed over separately, so
//     S starts before V has landed. Whole tiles (128 rows of the request; fp8 too, fp8 V into
//     its staging slot) come by TMA, one copy a 128-byte panel (64 dims, fp8 128) issued by
//     one thread (PfMaps); the rest (a request's last tile, or no maps) by 16-byte cp.async
//     from every loader thread, zero-filled past the keys.
// Same unit walk, masks and outputs as the mma.sync path. Shared tiles are blocks of 128 rows x
// 64 dims, swizzled as in the decode (swz<128>); a consumer's Q is rows 64 w .. 64 w + 63 of Q's
// blocks.
#ifdef AITER_MLA_HAS_WGMMA
namespace wg {
using mma::pack16x2;

constexpr int kPfN = 128, kPfBm = 128;       // keys per tile; query rows per pass (64 a consumer)
constexpr int kPfPanel = 128 * 128;          // one swizzled block: 128 rows x 64 dims
// Registers per thread after setmaxnreg: 2 x 224 + 56 = 3 x 168, the entry allocation. (232 and
// 40 spilled in the loader: 224 and 56 measured P1 1815 -> 1714 us, P1-fp8 1571 -> 1538.)
constexpr int kPfRegsMma = 224, kPfRegsLoad = 56;
static_assert(2 * kPfRegsMma + kPfRegsLoad == 3 * kRegsEntry, "the budgets must add up to the entry allocation");
// The handoffs (mbarriers): kPfQFull: Q is in (loader); kPfQFree: the pass reads Q no more (both
// consumers, after their last S: the next pass's Q loads during the last P V and the stores);
// kPfKFull + s, kPfVFull + s: slot s holds its tile's K, V (loader); kPfKFree + s,
// kPfVFree + s: both consumers are done with slot s's K, V; kPfVStaged + s (fp8, within the
// loader): V's e4m3 rows have come into staging slot s by TMA.
constexpr int kPfQFull = 0, kPfQFree = 1, kPfKFull = 2, kPfVFull = 4, kPfKFree = 6, kPfVFree = 8, kPfVStaged = 10, kPfHandoffs = 12;
__host__ __device__ constexpr int pf_arrivals(int h) { return h >= kPfVStaged ? 1 : h == kPfQFree || h >= kPfKFree ? 256 : 128; }

template <int DQK, int DV, bool FP8>
struct PfSmem { // byte offsets from a 1024-byte aligned base
    static constexpr int qk_blocks = (DQK * (FP8 ? 1 : 2) + 127) / 128; // 128-byte blocks of a Q or K row
    static constexpr int kslot = qk_blocks * kPfPanel;
    static constexpr int q = 0;                           // Q: qk_blocks blocks
    static constexpr int k = q + kslot;                   // two slots of K
    static constexpr int v = k + 2 * kslot;               // two slots of V: 16-bit, DV / 64 blocks; fp8: V^T, [DV][kPfN] e4m3
    static constexpr int vslot = FP8 ? DV * kPfN : DV / 64 * kPfPanel;
    static constexpr int vstage = v + 2 * vslot;          // fp8: two slots of V's e4m3 rows as copied, [kPfN][DV], swizzled
    static constexpr int vstage_slot = FP8 ? kPfN * DV : 0;
    static constexpr int bars = vstage + 2 * vstage_slot; // uint64 [kPfHandoffs]
    static constexpr int stage_warp = 16 * 128;           // a consumer warp's o: 16 rows, 64 16-bit dims at a time
    static constexpr int stage_o = (bars + kPfHandoffs * 8 + 127) / 128 * 128; // [8 consumer warps][stage_warp]
    static constexpr int total = stage_o + 8 * stage_warp + 1024; // + the alignment of the base
    static_assert(total <= mma::kSmemLimit, "shared memory plan does not fit");
};

// Tensor maps of q, k and v for the loader's TMA copies: dims (head dim, head, row), boxes of
// 128 bytes x 1 head x 128 rows in the 128-byte swizzle, i.e. one shared block of the layout
// above (fp8 K's second block of a 192-dim row takes dims 128..255, the map's zeros past 191;
// fp8 V's 128-byte rows land in its staging slot). The row
// extent is unbounded (the host knows no token count): only whole tiles within a request are
// copied this way. on == 0: no maps (cp.async for everything).
struct PfMaps {
    CUtensorMap q, k, v;
    int on;
};

// Rows [0, valid) of a tensor view of kChunks 16-byte chunks a row (row stride in bytes) into
// `rows` rows at dst, swizzled, by the loader's 128 threads; rows past `valid`
// are zeros. Each thread keeps one chunk of the row and steps over rows (kChunks threads a row,
// the rest idle), so that the addresses advance by additions.
template <int kChunks>
__device__ __forceinline__ void pf_copy_rows(uint32_t dst, const unsigned char *src, int64_t row_stride, int valid, int rows, int t) {
    constexpr int kStep = 128 / kChunks; // rows a round
    const int part = t % kChunks;
    if (t >= kStep * kChunks) return;
    const unsigned char *g = src + (t / kChunks) * row_stride + part * 16;
    for (int r = t / kChunks; r < rows; r += kStep, g += kStep * row_stride)
        cp_async16(dst + swz<kPfN>(r, part), r < valid ? g : src, r < valid ? 16 : 0);
}


// FP8: e4m3fn q, k, v (per-tensor scales in score_scale and v_scale): S and P V by e4m3 products,
// P rounded to e4m3 after a factor kPUp, V transposed by the loader (wgmma reads an 8-bit B
// operand only K-major, and V's K dimension is the keys). F16 does not apply (instances take true).
template <int DQK, int DV, bool F16, bool FP8>
__global__ void __launch_bounds__(kThreads, 1) prefill_wgmma_kernel(PrefillParams p, const __grid_constant__ PfMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) // sm_90a passes alone
    static_assert(!FP8 || F16, "one fp8 instance a shape: F16 = true");
    using S = PfSmem<DQK, DV, FP8>;
    constexpr int kElt = FP8 ? 1 : 2; // bytes of a q, k, v element
    extern __shared__ __align__(128) unsigned char smem[];
    unsigned char *base = smem + ((1024 - (smem_addr(smem) & 1023)) & 1023); // the swizzle repeats every 1024 bytes
    const uint32_t sb = smem_addr(base), bars = sb + S::bars;
    // the warpgroup, broadcast from lane 0: ptxas then knows it is the same across the
    // warpgroup, and branches on it (and on what derives from it) do not serialize the wgmma
    const int tid = threadIdx.x, wgi = __shfl_sync(0xffffffffu, tid >> 7, 0), t = tid & 127, lane = tid & 31;
    const aiter_mla_prefill_args &a = p.a;
    if (tid < kPfHandoffs) mbar_init(bars + 8 * tid, pf_arrivals(tid));
    __syncthreads(); // from here on the warpgroups only meet at the handoffs
    uint32_t phases = 0; // the parity of the next phase this thread waits for, one bit per handoff
    auto wait = [&](int h) { mbar_wait(bars, h, phases); };
    auto arrive = [&](int h) { mbar_arrive(bars + 8 * h); };
    // a unit's last key (exclusive) over its rows, and its tiles
    auto key_end = [&](const PrefillUnit &u) { return max(u.j0, u.limit(u.r1 - 1, a.causal)); };
    auto tiles_of = [&](const PrefillUnit &u) { return (key_end(u) - u.j0 + kPfN - 1) / kPfN; };
    int n = 0; // tiles so far in this block: tile n is in slot n & 1

    if (wgi == 2) {
        // Loader: a pass's Q, then its tiles, tile n into slot n & 1. The consumers free slot s's
        // K when S of its tile is done and its V when that tile's P V is (a tile later), so in
        // step i (tile i computed) the loader copies K of tile i + 2, hands over K of tile i + 1
        // and V of tile i (copied a step earlier), then copies V of tile i + 1. A hand-over never
        // waits for a later slot's release: the consumers run half a tile apart, and a K that
        // waited for the later one's P V would hold back the earlier one. Every copy commits a
        // group (empty past the last tile), so the counts to wait for stay fixed. A pass's Q
        // waits for the last pass's final S only; its first tiles wait for their slots like any
        // other (the last pass's final P V may still read a V slot).
        regs_lower<kPfRegsLoad>();
        bool first = true;
        for_each_prefill_unit<kPfBm>(p, [&](const PrefillUnit &u, int) {
            const int ntiles = tiles_of(u), jend = key_end(u);
            if (!first) wait(kPfQFree);
            first = false;
            if (ntiles == 0) {
                arrive(kPfQFull); // no consumer reads Q in a pass without keys
                return;
            }
            constexpr int kQkChunks = DQK * kElt / 16, kVChunks = DV * kElt / 16; // 16-byte chunks of a row
            const int64_t ks = a.k_stride_token * kElt, vs = a.v_stride_token * kElt; // row strides in bytes
            const unsigned char *k = static_cast<const unsigned char *>(a.k) + ((int64_t)u.h * a.k_stride_head + u.k0 * a.k_stride_token) * kElt;
            const unsigned char *v = static_cast<const unsigned char *>(a.v) + ((int64_t)u.h * a.v_stride_head + u.k0 * a.v_stride_token) * kElt;
            const int n0 = n; // the pass's first tile in the block's count
            // 128 rows from `row` on (of the request: whole) by TMA, their bytes added to handoff
            // h's phase, which the loader's threads then complete as for their own copies
            auto tma_rows = [&](const CUtensorMap &m, uint32_t dst, int panels, int row, int h) {
                if (t == 0) {
                    mbar_expect_tx(bars + 8 * h, panels * kPfPanel);
                    for (int pn = 0; pn < panels; pn++) tma_load_3d(dst + pn * kPfPanel, &m, pn * 128 / kElt, u.h, row, bars + 8 * h);
                }
            };
            auto whole = [&](int kb) { return maps.on && kb + kPfN <= jend; }; // tile kb.. by TMA
            auto copy_k = [&](int i) { // K of the pass's tile i, if any, then commit
                if (i < ntiles) {
                    const int slot = (n0 + i) & 1, kb = u.j0 + i * kPfN;
                    if (n0 + i >= 2) wait(kPfKFree + slot);
                    if (whole(kb)) tma_rows(maps.k, sb + S::k + slot * S::kslot, S::qk_blocks, u.k0 + kb, kPfKFull + slot);
                    else pf_copy_rows<kQkChunks>(sb + S::k + slot * S::kslot, k + kb * ks, ks, min(kPfN, jend - kb), kPfN, t);
                }
                cp_async_commit();
            };
            // V of tile i: into its slot (16-bit), or (FP8) as e4m3 rows into its staging slot,
            // which only the loader reads (transpose_v)
            auto copy_v = [&](int i) {
                if (i < ntiles) {
                    const int slot = (n0 + i) & 1, kb = u.j0 + i * kPfN;
                    if constexpr (FP8) {
                        static_assert(!FP8 || DV * kPfN == kPfPanel, "fp8 V's staging slot is one box");
                        if (whole(kb)) {
                            tma_rows(maps.v, sb + S::vstage + slot * S::vstage_slot, 1, u.k0 + kb, kPfVStaged + slot);
                            if (t == 0) arrive(kPfVStaged + slot);
                        } else pf_copy_rows<kVChunks>(sb + S::vstage + slot * S::vstage_slot, v + kb * vs, vs, min(kPfN, jend - kb), kPfN, t);
                    } else {
                        if (n0 + i >= 2) wait(kPfVFree + slot);
                        if (whole(kb)) tma_rows(maps.v, sb + S::v + slot * S::vslot, DV / 64, u.k0 + kb, kPfVFull + slot);
                        else pf_copy_rows<kVChunks>(sb + S::v + slot * S::vslot, v + kb * vs, vs, min(kPfN, jend - kb), kPfN, t);
                    }
                }
                cp_async_commit();
            };
            // FP8: the staged V of tile i (landed: this thread's copies, or TMA's) transposed into
            // its slot, once the slot is free; the loader's threads meet first (named barrier 4:
            // each reads rows others copied, and TMA's next copy into the staging slot follows
            // everyone's reads of it).
            auto transpose_v = [&](int i) {
                if constexpr (FP8) {
                    const int slot = (n0 + i) & 1;
                    if (whole(u.j0 + i * kPfN)) wait(kPfVStaged + slot);
                    if (n0 + i >= 2) wait(kPfVFree + slot);
                    named_sync<4, 128>();
                    // V^T (DV rows of kPfN slots, 128-byte rows, swizzled as wgmma reads them) from the
                    // staged rows (swizzled alike) by ldmatrix.trans / stmatrix on 16-bit pairs of e4m3:
                    // ldmatrix.trans of keys 16 g + 0..7 and 16 g + 8..15 at dim chunk D gives lane
                    // (c, q) = (lane / 4, lane % 4) keys 2 q, 2 q + 1 and 8 + 2 q, 9 + 2 q of dims
                    // 16 D + 2 c, 2 c + 1; one byte permute each makes dim 2 c's and dim 2 c + 1's word
                    // of slots 4 q .. 4 q + 3, the keys in the order pack_p gives P's. Lanes c >= 4 put the odd
                    // dim in the even matrix, so that each stored matrix's 8 rows (dims) have 8
                    // distinct (row & 7) and meet 8 distinct bank groups. Warp w: chunks 2 w, 2 w + 1.
                    static_assert(DV == kPfN && DV == 128, "V^T's rows are 128-byte rows of one swizzled panel");
                    const uint32_t st = sb + S::vstage + slot * S::vstage_slot, vt = sb + S::v + slot * S::vslot;
                    const int w = t >> 5, lr = lane & 7, lm = lane >> 3, odd_first = (lane >> 4) & 1;
                    const uint32_t sel0 = odd_first ? 0x7531u : 0x6420u, sel1 = odd_first ? 0x6420u : 0x7531u;
                    // this lane's row addresses: ldmatrix (key 8 (lm & 1) + lr of a group, chunk 2 w + (lm >> 1)),
                    // stmatrix (dim d of V^T, its chunk g ^ (d & 7) for group g)
                    const uint32_t ld_row = st + (8 * (lm & 1) + lr) * 128 + (((2 * w + (lm >> 1)) ^ lr) << 4);
                    const int d = 16 * (2 * w + (lm >> 1)) + 2 * lr + ((lm & 1) ^ (lr >> 2));
                    const uint32_t st_row = vt + d * 128;
#pragma unroll 1
                    for (int g0 = 0; g0 < kPfN / 16; g0 += 4) { // four groups at a time: their loads in flight together
                        uint32_t x[4][4];
#pragma unroll
                        for (int j = 0; j < 4; j++) mma::ldsm_x4_trans(ld_row + (g0 + j) * 2048, x[j]);
#pragma unroll
                        for (int j = 0; j < 4; j++)
                            stmatrix_x4(st_row + (((g0 + j) ^ (d & 7)) << 4), __byte_perm(x[j][0], x[j][1], sel0), __byte_perm(x[j][0], x[j][1], sel1),
                                        __byte_perm(x[j][2], x[j][3], sel0), __byte_perm(x[j][2], x[j][3], sel1));
                    }
                }
            };
            if (maps.on && u.r1 - u.r0 == kPfBm) tma_rows(maps.q, sb + S::q, S::qk_blocks, u.q0 + u.r0, kPfQFull);
            else
                pf_copy_rows<kQkChunks>(sb + S::q,
                                        static_cast<const unsigned char *>(a.q) + ((u.q0 + u.r0) * a.q_stride_token + (int64_t)u.h * a.q_stride_head) * kElt,
                                        a.q_stride_token * kElt, u.r1 - u.r0, kPfBm, t);
            cp_async_commit();
            copy_k(0);
            copy_k(1);
            copy_v(0);
            cp_async_wait<2>(); // in flight: K of tile 1, V of tile 0
            fence_async_shared();
            arrive(kPfQFull);
            arrive(kPfKFull + (n0 & 1));
            for (int i = 0; i < ntiles; i++, n++) {
                copy_k(i + 2);
                cp_async_wait<2>(); // in flight: V of tile i, K of tile i + 2
                fence_async_shared();
                if (i + 1 < ntiles) arrive(kPfKFull + ((n + 1) & 1));
                cp_async_wait<1>();
                transpose_v(i);
                fence_async_shared();
                arrive(kPfVFull + (n & 1));
                copy_v(i + 1);
            }
        });
    } else {
        // A consumer: rows 64 wgi .. 64 wgi + 63 of each pass.
        regs_raise<kPfRegsMma>();
        // Turns: the consumers take turns to issue their products (S of a tile and P V of the
        // one before), warpgroup 0 first, so that one's softmax runs while the other's products
        // do rather than both at once. Named barrier 2 + w: warpgroup w's turn; every pass has
        // the same number of turns (tiles + 1) in both.
        auto turn_begin = [&] {
            if (wgi == 0) named_sync<2, 256>();
            else named_sync<3, 256>();
        };
        auto turn_end = [&] {
            if (wgi == 0) named_arrive<3, 256>();
            else named_arrive<2, 256>();
        };
        if (wgi == 1) turn_end();
        const int ra = wgi * 64 + (t >> 5) * 16 + (lane >> 2), rb = ra + 8; // this thread's rows of the accumulators
        for_each_prefill_unit<kPfBm>(p, [&](const PrefillUnit &u, int prow0) {
            const int ntiles = tiles_of(u), rows = u.r1 - u.r0;
            const int lima = u.limit(u.r0 + ra, a.causal), limb = u.limit(u.r0 + rb, a.causal);
            // the least and the greatest limit among the warpgroup's real rows: tiles below the
            // least need no mask, tiles from the greatest on are the loader's alone
            const bool any_row = wgi * 64 < rows;
            const int lim_lo = u.limit(u.r0 + min(wgi * 64, rows - 1), a.causal);
            const int lim_hi = any_row ? u.limit(u.r0 + min(wgi * 64 + 63, rows - 1), a.causal) : u.j0;
            float acc[DV / 2]; // O rows ra, rb; dims 8 j + 2 (lane & 3) (+1) in acc[4 j ..] (rb: + 2)
#pragma unroll
            for (int e = 0; e < DV / 2; e++) acc[e] = 0.0f;
            float ma = neg_inf(), mb = neg_inf(), la = 0.0f, lb = 0.0f; // l: this thread's share of the row sums
            // The tiles this warpgroup computes (the rest lie past all its rows' limits), pipelined:
            // S of tile i is issued before P V of tile i - 1, and the softmax of tile i runs while
            // that P V does; O's rescale waits for it.
            const int mine = lim_hi > u.j0 ? min(ntiles, (lim_hi - u.j0 + kPfN - 1) / kPfN) : 0;
            // P of the previous tile: the A fragments of its k-steps (FP8: e4m3, times kPUp, k-steps of 32 keys)
            constexpr int kPSteps = FP8 ? kPfN / 32 : kPfN / 16;
            constexpr float kPUp = FP8 ? 16.0f : 1.0f; // P into e4m3's normal range (SPEC 8's bound on long rows)
            uint32_t pa[kPSteps][4];
            auto pv = [&](int slot) { // O += P V, issued
                wait(kPfVFull + slot);
                wgmma_fence(); // after the wait's loop, else ptxas adds one (and says so)
                if constexpr (FP8) {
                    const uint64_t dv = desc(sb + S::v + slot * S::vslot, 16, 1024);
#pragma unroll
                    for (int kk = 0; kk < kPSteps; kk++) // keys 32 kk .. 32 kk + 31, V^T's slots in the same order
                        mma_64x128_rs_e4m3(acc, pa[kk], desc_plus(dv, kk * 32));
                } else {
                    const uint64_t dv = desc(sb + S::v + slot * S::vslot, kPfPanel, 1024);
#pragma unroll
                    for (int kk = 0; kk < kPfN / 16; kk++) // P's k-step kk: keys 16 kk .. 16 kk + 15
                        mma_64x128_rs<F16>(acc, pa[kk], desc_plus(dv, kk * 2048));
                }
                wgmma_commit();
            };
            auto pv_done = [&](int slot) {
                wgmma_wait0();
                pin(acc);
                pin_regs(pa);
                arrive(kPfVFree + slot);
            };
            auto issue_s = [&](float (&sc)[64], int slot) { // S = Q K^T, issued
                wgmma_fence();
                const uint64_t dq = desc(sb + S::q + wgi * 64 * 128, 16, 1024), dk = desc(sb + S::k + slot * S::kslot, 16, 1024);
#pragma unroll
                for (int kk = 0; kk < DQK * kElt / 32; kk++) { // k-steps of 32 bytes: 16 dims, or 32 (FP8)
                    const uint32_t off = kstep_offset(kk, kPfPanel);
                    if constexpr (FP8) mma_64x128_ss_e4m3(sc, desc_plus(dq, off), desc_plus(dk, off), kk > 0);
                    else mma_64x128_ss<F16>(sc, desc_plus(dq, off), desc_plus(dk, off), kk > 0);
                }
                wgmma_commit();
            };
            // Tile kb's mask (the causal limits; a tile below every row's limit needs none), then
            // the online softmax; fa, fb: the rescale of the rows' O.
            auto softmax = [&](float (&sc)[64], int kb, float &fa, float &fb) {
                if (kb + kPfN > lim_lo) {
#pragma unroll
                    for (int j = 0; j < 64; j++)
                        if (kb + (j >> 2) * 8 + (lane & 3) * 2 + (j & 1) >= ((j & 2) ? limb : lima)) sc[j] = neg_inf();
                }
                // lazy m; e4m3 P: a rise of 2^4 at most, so that P times kPUp stays below e4m3's 448
                online_softmax_rows<64, FP8, true, FP8 ? 4 : kLazyRise>(sc, p.score_scale, ma, mb, la, lb, fa, fb);
            };
            auto pack_p = [&](const float (&sc)[64]) {
                if constexpr (FP8) {
                    // e4m3 A fragments straight from the accumulator, no values moved between lanes:
                    // k-step kk's slots 4 q .. 4 q + 3 (q = lane & 3) stand for keys 2 q, 2 q + 1, 8 + 2 q,
                    // 9 + 2 q of its first 16, the thread's own n8-tiles 4 kk, 4 kk + 1 (a0: row ra,
                    // a1: rb), then 4 kk + 2, 4 kk + 3 for the next 16 (a2, a3); V^T's slots take
                    // the same order (transpose_v)
#pragma unroll
                    for (int kk = 0; kk < kPSteps; kk++) {
                        const float *x = sc + 16 * kk;
                        pa[kk][0] = f32x4_to_e4m3x4_hw(x[0] * kPUp, x[1] * kPUp, x[4] * kPUp, x[5] * kPUp);
                        pa[kk][1] = f32x4_to_e4m3x4_hw(x[2] * kPUp, x[3] * kPUp, x[6] * kPUp, x[7] * kPUp);
                        pa[kk][2] = f32x4_to_e4m3x4_hw(x[8] * kPUp, x[9] * kPUp, x[12] * kPUp, x[13] * kPUp);
                        pa[kk][3] = f32x4_to_e4m3x4_hw(x[10] * kPUp, x[11] * kPUp, x[14] * kPUp, x[15] * kPUp);
                    }
                } else {
#pragma unroll
                    for (int kk = 0; kk < kPfN / 16; kk++) {
                        pa[kk][0] = pack16x2<F16>(sc[8 * kk], sc[8 * kk + 1]);
                        pa[kk][1] = pack16x2<F16>(sc[8 * kk + 2], sc[8 * kk + 3]);
                        pa[kk][2] = pack16x2<F16>(sc[8 * kk + 4], sc[8 * kk + 5]);
                        pa[kk][3] = pack16x2<F16>(sc[8 * kk + 6], sc[8 * kk + 7]);
                    }
                }
            };
            wait(kPfQFull);
            if (mine > 0) {
                // the first tile (O is zero: no rescale), then the pipelined ones, then the last P V;
                // the control flow is the same for every thread, so ptxas keeps the wgmma pipelined
                float s[64]; // S rows ra, rb; keys kb + 8 j + 2 (lane & 3) (+1) in s[4 j ..] (rb: + 2)
                float fa, fb;
                wait(kPfKFull + (n & 1));
                turn_begin();
                issue_s(s, n & 1);
                turn_end();
                wgmma_wait<0>();
                pin(s);
                arrive(kPfKFree + (n & 1));
                softmax(s, u.j0, fa, fb);
                pack_p(s);
                n++;
                for (int i = 1; i < mine; i++, n++) {
                    const int slot = n & 1;
                    wait(kPfKFull + slot);
                    turn_begin();
                    issue_s(s, slot);
                    pv(slot ^ 1);
                    turn_end();
                    wgmma_wait<1>(); // S; P V goes on during the softmax
                    pin(s);
                    arrive(kPfKFree + slot);
                    softmax(s, u.j0 + i * kPfN, fa, fb);
                    pv_done(slot ^ 1);
                    rescale_rows_unless_one(acc, fa, fb);
                    pack_p(s);
                    pin(acc);
                }
                arrive(kPfQFree); // the last S is done: the loader may bring the next unit's Q meanwhile
                turn_begin();
                pv((n - 1) & 1);
                turn_end();
                pv_done((n - 1) & 1);
            } else {
                arrive(kPfQFree); // no S reads Q
                if (ntiles > 0) {
                    turn_begin();
                    turn_end();
                }
            }
            // The rest are the loader's alone: hand the slots back, then pass the turn (the loader
            // copies K of tile i + 2 before it hands over K of tile i + 1, and the other consumer
            // waits for that before its turn).
            for (int i = mine; i < ntiles; i++, n++) {
                wait(kPfKFull + (n & 1));
                arrive(kPfKFree + (n & 1));
                wait(kPfVFull + (n & 1));
                arrive(kPfVFree + (n & 1));
                turn_begin();
                turn_end();
            }

            // o = acc / l; lse in natural log, -inf for a row with no key
            la += __shfl_xor_sync(0xffffffffu, la, 1);
            la += __shfl_xor_sync(0xffffffffu, la, 2);
            lb += __shfl_xor_sync(0xffffffffu, lb, 1);
            lb += __shfl_xor_sync(0xffffffffu, lb, 2);
            const float scale_a = row_has_keys(la) ? p.v_scale / (kPUp * la) : 0.0f, scale_b = row_has_keys(lb) ? p.v_scale / (kPUp * lb) : 0.0f;
            if (p.o_rows16 && u.loc < 0) {
                // 16-bit o: the warp's 16 rows through its staging, 64 dims at a time (stmatrix, rows
                // of 128 B with their 16-byte chunks rotated by the row, so that neither side
                // conflicts), then 16-byte stores, 8 lanes a row. Element by element, the stores
                // took 11 us of a 4096-row block's 54 (P1) and 22 of 196 (P4).
                static_assert(DV % 64 == 0, "o is staged 64 dims at a time");
                const uint32_t st = sb + S::stage_o + (wgi * 4 + (t >> 5)) * S::stage_warp;
                const bool f16_out = a.o_dtype == AITER_MLA_F16;
                const int row0 = wgi * 64 + (t >> 5) * 16; // the warp's first row of the pass
                unsigned char *o_row = static_cast<unsigned char *>(a.o) +
                                       ((int64_t)(u.q0 + u.r0) * a.o_stride_token + (int64_t)u.h * a.o_stride_head) * 2;
#pragma unroll
                for (int part = 0; part < DV / 64; part++) {
                    __syncwarp(); // the warp's reads of the staging are done
#pragma unroll
                    for (int jj = 0; jj < 8; jj += 2) { // n8-tiles j, j + 1: rows ra and rb of each
                        const int j = part * 8 + jj, m = lane >> 3, r = (lane & 7) + (m & 1) * 8, c = jj + (m >> 1);
                        uint32_t x[4];
#pragma unroll
                        for (int q = 0; q < 4; q++) {
                            const int e = 4 * (j + (q >> 1)) + 2 * (q & 1);
                            const float s = q & 1 ? scale_b : scale_a;
                            x[q] = f16_out ? pack16x2<true>(acc[e] * s, acc[e + 1] * s) : pack16x2<false>(acc[e] * s, acc[e + 1] * s);
                        }
                        stmatrix_x4(st + r * 128 + ((c ^ (r & 7)) << 4), x[0], x[1], x[2], x[3]);
                    }
                    __syncwarp();
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int r = i * 4 + (lane >> 3), c = lane & 7;
                        const uint4 v = load16_shared(st + r * 128 + ((c ^ (r & 7)) << 4));
                        if (row0 + r < rows)
                            *reinterpret_cast<uint4 *>(o_row + ((row0 + r) * a.o_stride_token + part * 64 + c * 8) * 2) = v;
                    }
                }
            } else if (u.loc >= 0) {
                // a split tile's fp32 partial rows (prefill_store_o's layout): the row's address
                // once, two dims a store
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int row = half ? rb : ra;
                    if (row >= rows) continue;
                    const float s = half ? scale_b : scale_a;
                    float *dst = p.part_o + prefill_part_row(p, u, u.r0 + row, prow0) * DV + (lane & 3) * 2;
#pragma unroll
                    for (int j = 0; j < DV / 8; j++)
                        *reinterpret_cast<float2 *>(dst + j * 8) = make_float2(acc[4 * j + 2 * half] * s, acc[4 * j + 2 * half + 1] * s);
                }
            } else {
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int row = half ? rb : ra;
                    if (row >= rows) continue;
#pragma unroll
                    for (int j = 0; j < DV / 8; j++) {
                        const int d = j * 8 + (lane & 3) * 2;
                        const float s = half ? scale_b : scale_a;
                        prefill_store_o(p, u, u.r0 + row, prow0, d, acc[4 * j + 2 * half] * s);
                        prefill_store_o(p, u, u.r0 + row, prow0, d + 1, acc[4 * j + 2 * half + 1] * s);
                    }
                }
            }
            if ((lane & 3) == 0) {
                if (ra < rows) prefill_store_lse(p, u, u.r0 + ra, prow0, row_has_keys(la) ? row_lse(ma, la) : neg_inf());
                if (rb < rows) prefill_store_lse(p, u, u.r0 + rb, prow0, row_has_keys(lb) ? row_lse(mb, lb) : neg_inf());
            }
        });
        if (wgi == 0) turn_begin(); // warpgroup 1's last turn_end
    }
#endif
}

} // namespace wg
#endif

// ==== small ops ============================================================================
template <typename T>
__global__ void head_pad_kernel(const T *src, T *dst, int64_t total, int dst_heads, int src_heads, int head_dim,
                                int rep, int unpad) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t d = i % head_dim, th = i / head_dim, t = th / dst_heads;
        const int h = (int)(th % dst_heads), sh = unpad ? h * rep : h / rep;
        dst[i] = src[(t * src_heads + sh) * head_dim + d];
    }
}

// Grids of the small ops are capped (kMaxGrid blocks) and loop: HIP limits a launch to
// 2^32 threads in all.
constexpr int kMaxGrid = 65535;
// The x dimension of the attention grids with a block per token (sparse, V4) or query tile
// (prefill without a plan): capped at 2^22 blocks for the same limit (blocks of up to 1024
// threads), far past any batch; their blocks step through the tokens (tiles) by gridDim.x.
static unsigned token_blocks(int64_t n) { return (unsigned)min(n, (int64_t)1 << 22); }

__global__ void expand_page_indices_kernel(aiter_mla_expand_page_indices_args a) {
    for (int64_t r = blockIdx.x; r < a.batch; r += gridDim.x) { // int64: r + gridDim.x passes INT32_MAX near the end
        const int32_t start = a.cu_num_tokens[r];
        // only positions inside the output are visited: garbage starts and lengths stop there
        const int64_t n = min((int64_t)a.seq_lens[r], a.page_indices_capacity - start), t0 = start < 0 ? -(int64_t)start : 0;
        const int32_t *row = a.block_table + (int64_t)r * a.block_table_stride;
        for (int64_t t = t0 + threadIdx.x; t < n; t += blockDim.x) // start + t in [0, capacity) by t0 and n
            a.page_indices[start + t] = aiter_mla__expand_one(row, a.block_table_stride, (int32_t)t, a.kernel_block_size);
    }
}

__global__ void kv_cache_write_kernel(aiter_mla_kv_cache_write_args a) {
    for (int64_t t = blockIdx.x; t < a.num_tokens; t += gridDim.x)
        for (int c = threadIdx.x; c < kD; c += blockDim.x) aiter_mla__kv_write_elem(&a, t, c);
}

// ---- shared pieces of the memory-bound ops below ------------------------------------------
// Blocks of kSmallThreads. Row-shaped ops give each row a group of threads (a power of two
// up to the block) so short rows (small topk, small head_dim) share a block instead of
// idling most of it.
constexpr int kSmallThreads = 256;

static int threads_per_row(int64_t units) {
    int t = 1;
    while (t < units && t < kSmallThreads) t <<= 1;
    return t;
}
static unsigned grid_for(int64_t items, int64_t items_per_block) {
    return (unsigned)min((items + items_per_block - 1) / items_per_block, (int64_t)kMaxGrid);
}
__host__ __device__ constexpr int dtype_bytes(int dt) {
    return dt == AITER_MLA_F32 ? 4 : dt == AITER_MLA_BF16 || dt == AITER_MLA_F16 ? 2 : 1;
}

// One 8- or 16-byte global access. kOnce: data read or written once (the index conversion's,
// the gather's), marked evict-first on NVIDIA (ld/st.global.cs) so that the caches keep what
// is reused, such as block tables. Measured on H100: IDX 74 -> 77 % of copy, GATH 86.7 ->
// 88 %, but only with both the loads and the stores so marked (either alone: no change);
// the fp8_ds_mla writer was slower with its loads marked, and is not.
template <bool kOnce, typename T>
__device__ __forceinline__ T load_global(const T *p) {
#if defined(__CUDA_ARCH__)
    if constexpr (kOnce) return __ldcs(p);
#endif
    return *p;
}
template <bool kOnce, typename T>
__device__ __forceinline__ void store_global(T *p, const T &v) {
#if defined(__CUDA_ARCH__) // nvcc can split a plain 16-byte store into four 4-byte ones (it did in the index kernels)
    if constexpr (kOnce) __stcs(p, v);
    else __stwb(p, v);
#else
    *p = v;
#endif
}
// N 32-bit words (N = 2: one 8-byte access; N a multiple of 4: 16-byte accesses) at an address
// aligned to the access.
template <int N, bool kOnce = false>
__device__ __forceinline__ void load_words(const void *p, uint32_t (&w)[N]) {
    static_assert(N == 2 || N % 4 == 0, "8 bytes or multiples of 16");
    if constexpr (N == 2) {
        const uint2 v = load_global<kOnce>(reinterpret_cast<const uint2 *>(p));
        w[0] = v.x;
        w[1] = v.y;
    } else {
#pragma unroll
        for (int i = 0; i < N / 4; i++) {
            const uint4 v = load_global<kOnce>(reinterpret_cast<const uint4 *>(p) + i);
            w[4 * i] = v.x;
            w[4 * i + 1] = v.y;
            w[4 * i + 2] = v.z;
            w[4 * i + 3] = v.w;
        }
    }
}
template <int N, bool kOnce = false>
__device__ __forceinline__ void store_words(void *p, const uint32_t (&w)[N]) {
    static_assert(N == 2 || N % 4 == 0, "8 bytes or multiples of 16");
    if constexpr (N == 2) {
        store_global<kOnce>(reinterpret_cast<uint2 *>(p), make_uint2(w[0], w[1]));
    } else {
#pragma unroll
        for (int i = 0; i < N / 4; i++)
            store_global<kOnce>(reinterpret_cast<uint4 *>(p) + i, make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]));
    }
}
__device__ __forceinline__ uint8_t word_byte(const uint32_t *w, int k) { return (uint8_t)(w[k >> 2] >> (8 * (k & 3))); }
__device__ __forceinline__ uint16_t word_half(const uint32_t *w, int k) { return (uint16_t)(w[k >> 1] >> (16 * (k & 1))); }

// N values of dtype DT at element i of p as loaded: raw words, low element first (N * size a
// multiple of 4 bytes). kVec: 8- or 16-byte accesses (the caller checked the alignment);
// otherwise one element at a time. Kept raw, values in flight cost half (16-bit) or a
// quarter (fp8) of the registers of floats.
template <int DT, int N>
using RawVals = uint32_t[N * dtype_bytes(DT) / 4];
template <int DT, int N, bool kVec>
__device__ __forceinline__ void load_raw(const void *p, int64_t i, RawVals<DT, N> &w) {
    const unsigned char *b = static_cast<const unsigned char *>(p) + i * dtype_bytes(DT);
    if constexpr (kVec) {
        load_words(b, w);
    } else {
#pragma unroll
        for (int k = 0; k < N * dtype_bytes(DT) / 4; k++) {
            if constexpr (dtype_bytes(DT) == 4) w[k] = reinterpret_cast<const uint32_t *>(b)[k];
            else if constexpr (dtype_bytes(DT) == 2)
                w[k] = reinterpret_cast<const uint16_t *>(b)[2 * k] | (uint32_t)reinterpret_cast<const uint16_t *>(b)[2 * k + 1] << 16;
            else w[k] = b[4 * k] | (uint32_t)b[4 * k + 1] << 8 | (uint32_t)b[4 * k + 2] << 16 | (uint32_t)b[4 * k + 3] << 24;
        }
    }
}
// Raw values of dtype DT as floats, through the library's converters (fp8 without scale).
template <int DT, int N>
__device__ __forceinline__ void raw_to_f32(const RawVals<DT, N> &w, float (&v)[N]) {
#pragma unroll
    for (int k = 0; k < N; k++) {
        if constexpr (DT == AITER_MLA_F32) v[k] = aiter_mla__bits_f32(w[k]);
        else if constexpr (dtype_bytes(DT) == 2) v[k] = DT == AITER_MLA_BF16 ? aiter_mla_bf16_to_f32(word_half(w, k)) : aiter_mla_f16_to_f32(word_half(w, k));
        else v[k] = aiter_mla_fp8_to_f32(word_byte(w, k), (aiter_mla_dtype)DT);
    }
}
// N values of dtype DT at element i of p as floats: load_raw, then raw_to_f32 (kVec), or one
// element at a time (any N).
template <int DT, int N, bool kVec>
__device__ __forceinline__ void load_vals(const void *p, int64_t i, float (&v)[N]) {
    if constexpr (kVec) {
        RawVals<DT, N> w;
        load_raw<DT, N, true>(p, i, w);
        raw_to_f32<DT, N>(w, v);
    } else {
#pragma unroll
        for (int k = 0; k < N; k++) v[k] = aiter_mla_load_f32(p, i + k, (aiter_mla_dtype)DT);
    }
}
// The converse: N floats stored as dtype DT (bf16, f16 or f32) at element i of p (kOnce: as
// store_global's).
template <int DT, int N, bool kVec, bool kOnce = false>
__device__ __forceinline__ void store_vals(void *p, int64_t i, const float (&v)[N]) {
    if constexpr (kVec) {
        uint32_t w[N * dtype_bytes(DT) / 4];
#pragma unroll
        for (int k = 0; k < N; k++) {
            if constexpr (DT == AITER_MLA_F32) {
                w[k] = aiter_mla__f32_bits(v[k]);
            } else {
                const uint32_t h = DT == AITER_MLA_BF16 ? aiter_mla_f32_to_bf16(v[k]) : aiter_mla_f32_to_f16(v[k]);
                if (k & 1) w[k >> 1] |= h << 16;
                else w[k >> 1] = h;
            }
        }
        store_words<N * dtype_bytes(DT) / 4, kOnce>(static_cast<unsigned char *>(p) + i * dtype_bytes(DT), w);
    } else {
#pragma unroll
        for (int k = 0; k < N; k++) aiter_mla_store_f32(p, i + k, (aiter_mla_dtype)DT, v[k]);
    }
}

// Four floats v[0..3] as e4m3 codes (v[0] in the low byte), aiter_mla_f32_to_fp8's codes bit for
// bit: e4m3fn on sm_89+ by the hardware converter, everything else by the header's converter
// (the writers' cost was this encoding: DSW 44 % of copy with it in software).
__device__ __forceinline__ uint32_t f32x4_to_fp8x4(const float *v, aiter_mla_dtype fp8) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    if (fp8 == AITER_MLA_FP8_E4M3FN) return f32x4_to_e4m3x4_hw(v[0], v[1], v[2], v[3]);
#endif
    uint32_t w = 0u;
#pragma unroll
    for (int k = 0; k < 4; k++) w |= (uint32_t)aiter_mla_f32_to_fp8(v[k], fp8) << (8 * k);
    return w;
}

// q[i] = x[i] / s for the values of one fp8 group of a 16-bit source, as far as fp8 can tell:
// the writers' reference divides each value (IEEE, round to nearest), and a division costs
// ~10 instructions with its range check; aiter_mla__quotient16 takes three. For s in [2^-60,
// 2^100] nothing underflows for any |x / s| >= 2^-11 (|x / s| <= fp8_max: s covers the
// group's largest value); smaller quotients come out within a few ulps, and every value
// under 2^-10 is fp8 code 0 anyway. Other s: the division. A power-of-two s (pow2: MODEL1's
// UE8M0 scales, fp8_ds_mla's pow2_scales) takes one multiply by 1/s, exact: x / 2^k and
// x 2^-k are the same number, rounded once (s = +inf: 1/s = 0, as x / inf).
template <int SRC, int N>
__device__ __forceinline__ void fp8_quotients(const float (&x)[N], float s, float (&q)[N], bool pow2) {
    static_assert(SRC == AITER_MLA_BF16 || SRC == AITER_MLA_F16, "aiter_mla__quotient16 is exact for 16-bit sources only");
    if (pow2) {
        const float y = 1.0f / s;
#pragma unroll
        for (int i = 0; i < N; i++) q[i] = x[i] * y;
    } else if (s >= 0x1p-60f && s <= 0x1p100f) {
        const float y = 1.0f / s;
#pragma unroll
        for (int i = 0; i < N; i++) q[i] = aiter_mla__quotient16(x[i], s, y);
    } else {
#pragma unroll
        for (int i = 0; i < N; i++) q[i] = x[i] / s;
    }
}

// ==== sparse index conversion and filter_prefill_indices (SPEC 4) ==========================
// One group of threads per token row (threads_per_row of its units, kIndexBatch units per
// thread; the sparse conversion at most kIndexRowLanes), 16-byte loads and stores of 4
// indices while the rows are 16-byte aligned, one index at a time after that (and
// everywhere when they are not). A thread loads all units of a batch, converts them all,
// then stores them: the rows and the block table may alias the output as far as the
// compiler knows, so no load moves past a store by itself. The header's block lookup is
// branch-free, so converting a batch takes no branch per entry (ptxas still puts each table
// read right before its use). Each entry goes through the reference's own helper, so the
// output is the reference's bit for bit.
// W = 4 indices (one 16-byte access through load_words / store_words) or W = 1.
template <int W>
__device__ __forceinline__ void load_ints(const int32_t *p, int32_t (&v)[W]) {
    if constexpr (W == 4) {
        uint32_t w[4];
        load_words<4, true>(p, w);
#pragma unroll
        for (int k = 0; k < 4; k++) v[k] = (int32_t)w[k];
    } else {
        v[0] = *p;
    }
}
template <int W>
__device__ __forceinline__ void store_ints(int32_t *p, const int32_t (&v)[W]) {
    if constexpr (W == 4) {
        const uint32_t w[4] = {(uint32_t)v[0], (uint32_t)v[1], (uint32_t)v[2], (uint32_t)v[3]};
        store_words<4, true>(p, w);
    } else {
        *p = v[0];
    }
}

constexpr int kIndexBatch = 8;

// Columns [begin, end) of `in` in steps of `step`, W indices per column, kIndexBatch columns
// at a time: all loaded (-1 past the end), then convert(values) on each, unconditionally (no
// store and no branch between the loads a conversion makes, such as block-table lookups),
// then store(column, values) on each column that exists.
template <int W, typename C, typename S>
__device__ __forceinline__ void index_batches(const int32_t *in, int begin, int end, int step, C &&convert, S &&store) {
    for (int c0 = begin; c0 < end; c0 += step * kIndexBatch) {
        int32_t v[kIndexBatch][W];
#pragma unroll
        for (int b = 0; b < kIndexBatch; b++) {
            if (c0 + b * step < end) load_ints(in + c0 + b * step, v[b]);
            else
                for (auto &e : v[b]) e = -1;
        }
#pragma unroll
        for (int b = 0; b < kIndexBatch; b++) convert(v[b]);
#pragma unroll
        for (int b = 0; b < kIndexBatch; b++)
            if (c0 + b * step < end) store(c0 + b * step, v[b]);
    }
}
// Columns [0, n) of the index row `in`, visited by `lanes` threads: 4 at a time while kVec,
// then one at a time, through index_batches.
template <bool kVec, typename C, typename S>
__device__ __forceinline__ void for_index_columns(const int32_t *in, int lane, int lanes, int n, C &&convert, S &&store) {
    int tail = 0;
    if constexpr (kVec) {
        tail = n & ~3;
        index_batches<4>(in, lane * 4, tail, lanes * 4, convert, store);
    }
    index_batches<1>(in, tail + lane, n, lanes, convert, store);
}

// Columns [0, n) of a row that is only written (the V4 builders), visited by `lanes`
// threads: 4 at a time while kVec, then one at a time. f(column, Width<k>) handles k columns.
template <int N>
struct Width {
    static constexpr int value = N;
};
template <bool kVec, typename F>
__device__ __forceinline__ void for_columns(int lane, int lanes, int n, F &&f) {
    int tail = 0;
    if constexpr (kVec) {
        tail = n & ~3;
        for (int c = lane * 4; c < tail; c += lanes * 4) f(c, Width<4>());
    }
    for (int c = tail + lane; c < n; c += lanes) f(c, Width<1>());
}

// kBlockSize: a block size known at compile time (64, vLLM's), which turns the division of
// every entry into a shift; 0 reads it from the arguments.
template <bool kVec, int kBlockSize>
__global__ void __launch_bounds__(kSmallThreads) sparse_indices_kernel(aiter_mla_sparse_index_args a, int tpr) {
    aiter_mla_sparse_index_args p = a;
    if (kBlockSize) p.block_size = kBlockSize;
    const int rows = kSmallThreads / tpr, lane = threadIdx.x % tpr, r = threadIdx.x / tpr;
    for (int64_t t0 = (int64_t)blockIdx.x * rows; t0 < p.num_tokens; t0 += (int64_t)gridDim.x * rows) {
        const int64_t t = t0 + r;
        int32_t valid = 0;
        if (t < p.num_tokens) {
            const int32_t req = p.req_id[t];
            int32_t *out = p.out + t * p.out_stride;
            for_index_columns<kVec>(
                p.indices + t * p.indices_stride, lane, tpr, p.topk,
                [&](auto &v) {
#pragma unroll
                    for (auto &e : v) {
                        e = aiter_mla__sparse_slot(&p, req, e);
                        valid += e >= 0;
                    }
                },
                [&](int c, const auto &v) { store_ints(out + c, v); });
        }
        // a row's tpr <= kIndexRowLanes lanes lie in one warp, and every lane of the warp is here
        // (t0 is the same for the whole block): the count is summed with shuffles alone
        for (int o = tpr / 2; o > 0; o >>= 1) valid += aiter_mla__shfl_xor(valid, o);
        if (p.valid_counts && lane == 0 && t < p.num_tokens) p.valid_counts[t] = valid;
    }
}

template <bool kVec>
__global__ void __launch_bounds__(kSmallThreads) filter_prefill_kernel(aiter_mla_filter_prefill_args a, int tpr) {
    const int rows = kSmallThreads / tpr, lane = threadIdx.x % tpr;
    for (int64_t t = (int64_t)blockIdx.x * rows + threadIdx.x / tpr; t < a.num_tokens; t += (int64_t)gridDim.x * rows) {
        const int32_t ctx = aiter_mla__filter_ctx_len(&a, a.req_id[t]);
        const int64_t base = t * a.topk;
        for_index_columns<kVec>(
            a.indices + base, lane, tpr, a.topk, [](auto &) {},
            [&](int c, const auto &v) {
                constexpr int W = sizeof(v) / sizeof(v[0]);
                int32_t context[W], fresh[W];
#pragma unroll
                for (int k = 0; k < W; k++) aiter_mla__filter_split(v[k], ctx, &context[k], &fresh[k]);
                store_ints(a.context_out + base + c, context);
                store_ints(a.new_out + base + c, fresh);
            });
    }
}

// ==== fp8_ds_mla writer (SPEC 6) ===========================================================
// One warp per token (32 lanes on NVIDIA, 64 on AMD: kDsVals = 16 or 8 latent values per
// lane), kSmallThreads / kDsThreads tokens per block side by side and kDsBatch after each
// other: a lane first loads its latent values of every token of the batch, lanes 0..7 also
// their 8 rope values, all kept raw, so that a batch's loads are in flight at once (one
// token at a time left DSW at 64 % of copy). Then per token: the lanes of a 128-value group
// take its amax with shuffles, and each quantises its values into one store; lanes 0..7
// convert the rope values (16-byte store). A whole warp per token also halves the per-value
// cost of the scale (two divisions per lane and token) against 64 lanes of 8. The scale
// and the quantisation are the reference's helpers and the amax a max (exact in any order),
// so rows are bit-identical to the reference's. Skipping a token never splits a warp.
// Without 16-byte alignment the same lanes use scalar accesses.
constexpr int kDsThreads = AITER_MLA_WARP_SIZE, kDsTokens = kSmallThreads / kDsThreads, kDsBatch = 2;
constexpr int kDsVals = kL / kDsThreads, kDsGroupLanes = 128 / kDsVals;

template <int SRC, bool kVec>
__global__ void __launch_bounds__(kSmallThreads) ds_mla_write_kernel(aiter_mla_ds_mla_write_args a) {
    static_assert(kDsVals % 8 == 0 && kDsGroupLanes >= 1, "whole 8-value units per lane");
    const int lane = threadIdx.x % kDsThreads;
    const int64_t num_slots = a.num_blocks * a.block_size, step = (int64_t)gridDim.x * kDsTokens;
    const float inv_fp8_max = 1.0f / a.fp8_max; // aiter_mla__quotient16's y for the scales
    const bool fp8_max_ok = a.fp8_max >= 1.0f; // with amax <= 2^100: no overflow (fp8_max <= 448 by the wrapper)
    for (int64_t t0 = (int64_t)blockIdx.x * kDsTokens + threadIdx.x / kDsThreads; t0 < a.num_tokens; t0 += step * kDsBatch) {
        RawVals<SRC, kDsVals> lat[kDsBatch];
        RawVals<SRC, 8> rope[kDsBatch];
        int64_t slot[kDsBatch];
#pragma unroll
        for (int u = 0; u < kDsBatch; u++) {
            const int64_t t = t0 + u * step;
            slot[u] = -1;
            if (t >= a.num_tokens) continue;
            load_raw<SRC, kDsVals, kVec>(a.kv_c, t * a.kv_c_stride + lane * kDsVals, lat[u]);
            if (lane < 8) load_raw<SRC, 8, kVec>(a.k_pe, t * a.k_pe_stride + lane * 8, rope[u]);
            slot[u] = a.slot_mapping[t];
        }
#pragma unroll
        for (int u = 0; u < kDsBatch; u++) {
            if (slot[u] < 0 || slot[u] >= num_slots) continue; // past the tokens, padding or out of range
            unsigned char *row = static_cast<unsigned char *>(a.kv_cache) + slot[u] * AITER_MLA_DS_MLA_ROW_BYTES;
            float x[kDsVals], amax = 0.0f;
            raw_to_f32<SRC, kDsVals>(lat[u], x);
#pragma unroll
            for (int k = 0; k < kDsVals; k++) amax = fmaxf(amax, fabsf(x[k])); // fmaxf drops NaN, as the reference does
#pragma unroll
            for (int o = kDsGroupLanes / 2; o > 0; o >>= 1) amax = fmaxf(amax, aiter_mla__shfl_xor(amax, o));
            // aiter_mla__ds_mla_scale: amax / fp8_max by aiter_mla__quotient16 where it is exact
            // (amax, the magnitude of a 16-bit value, has 11 significant bits at most; nothing
            // underflows above 2^-100), else divided
            const float ratio = amax >= 0x1p-100f && amax <= 0x1p100f && fp8_max_ok
                                    ? aiter_mla__quotient16(amax, a.fp8_max, inv_fp8_max)
                                    : amax / a.fp8_max;
            const float scale = aiter_mla__ds_mla_scale_of_ratio(ratio, a.pow2_scales);
            float q[kDsVals]; // aiter_mla__ds_mla_quant: fp8(x / scale)
            fp8_quotients<SRC>(x, scale, q, a.pow2_scales != 0);
            uint32_t w[kDsVals / 4];
#pragma unroll
            for (int k = 0; k < kDsVals / 4; k++) w[k] = f32x4_to_fp8x4(q + 4 * k, a.fp8_dtype);
            if constexpr (kVec) {
                store_words(row + lane * kDsVals, w);
                if (lane % kDsGroupLanes == 0) *reinterpret_cast<float *>(row + kDsScales + 4 * (lane / kDsGroupLanes)) = scale;
            } else {
                for (int k = 0; k < kDsVals; k++) row[lane * kDsVals + k] = word_byte(w, k);
                if (lane % kDsGroupLanes == 0) memcpy(row + kDsScales + 4 * (lane / kDsGroupLanes), &scale, 4);
            }
            if (lane < 8) {
                uint32_t h[4];
                if constexpr (SRC == AITER_MLA_BF16) {
                    // bf16 -> f32 -> bf16 is the identity but for NaN, which the header's
                    // converter quiets (| 0x40): the same bits in a few integer operations
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        const uint32_t w = rope[u][k], lo = w & 0x7fffu, hi = (w >> 16) & 0x7fffu;
                        h[k] = w | (lo > 0x7f80u ? 0x40u : 0u) | (hi > 0x7f80u ? 0x400000u : 0u);
                    }
                } else {
                    float r[8];
                    raw_to_f32<SRC, 8>(rope[u], r);
#pragma unroll
                    for (int k = 0; k < 4; k++)
                        h[k] = aiter_mla_f32_to_bf16(r[2 * k]) | (uint32_t)aiter_mla_f32_to_bf16(r[2 * k + 1]) << 16;
                }
                if constexpr (kVec) {
                    store_words(row + kDsRope + lane * 16, h);
                } else {
                    for (int k = 0; k < 16; k++) row[kDsRope + lane * 16 + k] = word_byte(h, k);
                }
            }
        }
    }
}

// ==== context gather (SPEC 2b) =============================================================
// A block takes kGatherRows output rows at a time: first one thread per row finds its
// request (binary search of cu_out_rows) and cache slot, then the block copies the rows in
// units of 8 values: every unit of the pass is loaded (16-byte loads; 8 bytes for fp8
// latent values) before any is stored, then converted and stored (16-byte stores). A
// 16-bit cache into its own dtype is a bit copy; everything else goes through the
// reference's converters and dequantisation, so rows are bit-identical to the reference's.
// CACHE 0 is the unaligned fallback: one value per thread through the reference's own
// element helper.
constexpr int kGatherRows = 32, kGatherUnits = kD / 8;

// Request of output row r: the last b with cu_out_rows[b] <= r. cu_out_rows is data here:
// the caller checks that b really holds r.
__device__ __forceinline__ int gather_request(const int32_t *cu, int batch, int64_t r) {
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (cu[mid] <= r) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// One unit of a gathered row as loaded: raw words and, for fp8_ds_mla latent values, the
// group's scale. Absent rows (slot < 0) load nothing and stay zero.
struct GatherUnit {
    uint32_t w[4];
    float scale;
};

template <int CACHE, bool DS>
__device__ __forceinline__ GatherUnit gather_fetch(const aiter_mla_gather_cache_args &a, int64_t slot, int unit) {
    GatherUnit g = {{0u, 0u, 0u, 0u}, 0.0f};
    if (slot < 0) return g;
    const unsigned char *cache = static_cast<const unsigned char *>(a.kv_cache);
    if constexpr (DS) {
        const unsigned char *row = cache + slot * AITER_MLA_DS_MLA_ROW_BYTES;
        if (unit < kL / 8) {
            uint32_t w[2];
            load_words<2, true>(row + unit * 8, w);
            g.w[0] = w[0];
            g.w[1] = w[1];
            g.scale = *reinterpret_cast<const float *>(row + kDsScales + 4 * (unit / 16));
        } else {
            load_words<4, true>(row + kDsRope + (unit - kL / 8) * 16, g.w);
        }
    } else if constexpr (dtype_bytes(CACHE) == 1) {
        uint32_t w[2];
        load_words<2, true>(cache + (slot * kD + unit * 8), w);
        g.w[0] = w[0];
        g.w[1] = w[1];
    } else {
        load_words<4, true>(cache + (slot * kD + unit * 8) * 2, g.w);
    }
    return g;
}

template <int CACHE, int OUT, bool DS>
__device__ __forceinline__ void gather_emit(const aiter_mla_gather_cache_args &a, const GatherUnit &g, int64_t slot,
                                            int64_t dst, int unit) {
    const int64_t o = dst * kD + unit * 8;
    if constexpr (!DS && CACHE == OUT) { // a 16-bit cache into its own dtype: the bits as they are
        store_words<4, true>(static_cast<unsigned char *>(a.out) + o * 2, g.w);
    } else {
        float v[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            if (slot < 0) v[k] = 0.0f;
            else if (DS && unit >= kL / 8) v[k] = aiter_mla_bf16_to_f32(word_half(g.w, k));
            else if (DS) v[k] = aiter_mla__dequant_fp8(word_byte(g.w, k), g.scale, (aiter_mla_dtype)CACHE);
            else if (dtype_bytes(CACHE) == 1) v[k] = aiter_mla__dequant_fp8(word_byte(g.w, k), a.scale, (aiter_mla_dtype)CACHE);
            else v[k] = CACHE == AITER_MLA_BF16 ? aiter_mla_bf16_to_f32(word_half(g.w, k)) : aiter_mla_f16_to_f32(word_half(g.w, k));
        }
        store_vals<OUT, 8, true, true>(a.out, o, v);
    }
}

template <int CACHE, int OUT, bool DS>
__global__ void __launch_bounds__(kSmallThreads) gather_cache_kernel(aiter_mla_gather_cache_args a) {
    __shared__ int64_t slot_s[kGatherRows], dst_s[kGatherRows], end_s;
    if (threadIdx.x == 0) end_s = min((int64_t)a.cu_out_rows[a.batch], a.out_rows); // rows past it are not written
    __syncthreads();
    const int64_t end = end_s;
    for (int64_t r0 = (int64_t)blockIdx.x * kGatherRows; r0 < end; r0 += (int64_t)gridDim.x * kGatherRows) {
        if (threadIdx.x < kGatherRows) {
            const int64_t r = r0 + threadIdx.x;
            int64_t slot = -1, dst = -1;
            if (r < end) {
                const int b = gather_request(a.cu_out_rows, a.batch, r);
                const int64_t first = a.cu_out_rows[b];
                if (first <= r && r < a.cu_out_rows[b + 1]) {
                    dst = r;
                    slot = aiter_mla__gather_slot(&a, b, (int64_t)(a.seq_starts ? a.seq_starts[b] : 0) + (r - first));
                }
            }
            slot_s[threadIdx.x] = slot;
            dst_s[threadIdx.x] = dst;
        }
        __syncthreads();
        if constexpr (CACHE == 0) {
            for (int u = threadIdx.x; u < kGatherRows * kD; u += kSmallThreads) {
                const int i = u / kD, d = u % kD;
                if (dst_s[i] >= 0) aiter_mla__gather_elem(&a, slot_s[i], dst_s[i], d);
            }
        } else {
            constexpr int kPerThread = kGatherRows * kGatherUnits / kSmallThreads;
            static_assert(kGatherRows * kGatherUnits % kSmallThreads == 0, "whole units per thread");
            GatherUnit g[kPerThread];
#pragma unroll
            for (int j = 0; j < kPerThread; j++) {
                const int u = threadIdx.x + j * kSmallThreads, i = u / kGatherUnits;
                if (dst_s[i] >= 0) g[j] = gather_fetch<CACHE, DS>(a, slot_s[i], u % kGatherUnits);
            }
#pragma unroll
            for (int j = 0; j < kPerThread; j++) {
                const int u = threadIdx.x + j * kSmallThreads, i = u / kGatherUnits;
                if (dst_s[i] >= 0) gather_emit<CACHE, OUT, DS>(a, g[j], slot_s[i], dst_s[i], u % kGatherUnits);
            }
        }
        __syncthreads(); // slot_s and dst_s are refilled by the next pass
    }
}

// ==== DeepSeek V4 MODEL1 pages (SPEC 7): writer and gather ==================================
// 64 threads per token row of 512 values, 4 rows per block: thread i holds values 8i ..
// 8i + 7, threads 0..55 the nope values (8 threads per group of 64: amax with shuffles,
// exponent byte by thread 8g), threads 56..63 the bf16 rope values. Loads and stores are
// 16 bytes (8 for fp8) when the bases, the source stride and the page stride are 16-byte
// aligned, one value at a time otherwise. Quantisation, scales and dequantisation are the
// reference's helpers and the amax a max (exact in any order): bit-identical to the
// reference's pages and rows. A row's 64 threads are whole warps on both vendors.
constexpr int kV4Threads = 64, kV4Rows = kSmallThreads / kV4Threads, kV4NopeLanes = AITER_MLA_V4_NOPE_DIM / 8;

template <int SRC, bool kVec>
__global__ void __launch_bounds__(kSmallThreads) v4_cache_write_kernel(aiter_mla_v4_cache_write_args a) {
    static_assert(kV4Threads % AITER_MLA_WARP_SIZE == 0, "a token's threads must be whole warps");
    const int lane = threadIdx.x % kV4Threads;
    const int64_t num_slots = a.num_blocks * a.block_size;
    const aiter_mla_dtype fp8 = a.fp8_dtype;
    for (int64_t t = (int64_t)blockIdx.x * kV4Rows + threadIdx.x / kV4Threads; t < a.num_tokens;
         t += (int64_t)gridDim.x * kV4Rows) {
        float x[8];
        load_vals<SRC, 8, kVec>(a.kv, t * a.kv_stride + lane * 8, x);
        const int64_t slot = a.slot_mapping[t];
        if (slot < 0 || slot >= num_slots) continue; // padding or out of range
        const int pos = (int)(slot % a.block_size);
        unsigned char *page = static_cast<unsigned char *>(a.kv_cache) + slot / a.block_size * a.page_stride_bytes;
        unsigned char *row = page + aiter_mla__v4_row_at(pos);
        unsigned char *sc = page + aiter_mla__v4_scales_at(a.block_size, pos);
        float amax = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) amax = fmaxf(amax, fabsf(x[k])); // fmaxf drops NaN, as the reference does
#pragma unroll
        for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, aiter_mla__shfl_xor(amax, o)); // all lanes: the rope lanes too
        if (lane < kV4NopeLanes) {
            const uint8_t e = aiter_mla__ue8m0_encode(amax, a.fp8_max);
            const float scale = aiter_mla__ue8m0_to_f32(e);
            float q[8]; // aiter_mla__v4_quant: fp8(clamp(x / scale))
            fp8_quotients<SRC>(x, scale, q, true); // UE8M0: a power of two
            for (float &v : q) v = aiter_mla__v4_clamp(v, a.fp8_max);
            uint32_t w[2];
#pragma unroll
            for (int k = 0; k < 2; k++) w[k] = f32x4_to_fp8x4(q + 4 * k, fp8);
            if constexpr (kVec) store_words(row + lane * 8, w);
            else
                for (int k = 0; k < 8; k++) row[lane * 8 + k] = word_byte(w, k);
            if (lane % 8 == 0) sc[lane / 8] = e;
        } else {
            uint32_t h[4];
#pragma unroll
            for (int k = 0; k < 4; k++)
                h[k] = aiter_mla_f32_to_bf16(x[2 * k]) | (uint32_t)aiter_mla_f32_to_bf16(x[2 * k + 1]) << 16;
            unsigned char *dst = row + AITER_MLA_V4_NOPE_DIM + (lane - kV4NopeLanes) * 16;
            if constexpr (kVec) store_words(dst, h);
            else
                for (int k = 0; k < 16; k++) dst[k] = word_byte(h, k);
            if (lane == kV4NopeLanes) sc[AITER_MLA_V4_SCALE_BYTES - 1] = 0;
        }
    }
}

// Output rows (b, i) for i < out_rows - offset, one per 64 threads; rows at or past the
// request's gather_len (and every row of a request whose lengths are invalid) are skipped.
template <int OUT, bool kVec>
__global__ void __launch_bounds__(kSmallThreads) v4_gather_kernel(aiter_mla_v4_gather_args a) {
    const int lane = threadIdx.x % kV4Threads;
    const int64_t per_req = a.out_rows - a.offset, rows = (int64_t)a.batch * per_req;
    const aiter_mla_dtype fp8 = a.fp8_dtype;
    for (int64_t r = (int64_t)blockIdx.x * kV4Rows + threadIdx.x / kV4Threads; r < rows; r += (int64_t)gridDim.x * kV4Rows) {
        const int b = (int)(r / per_req);
        const int64_t i = r % per_req;
        const int32_t s = a.seq_lens[b], g = a.gather_lens ? a.gather_lens[b] : s;
        if (s < 0 || g < 0 || g > s || i >= g) continue;
        const int32_t p = s - g + (int32_t)i;
        const int32_t id = aiter_mla__block_id(a.block_table + (int64_t)b * a.block_table_stride, a.block_table_stride,
                                               p / a.block_size, a.num_blocks);
        float v[8];
        if (id < 0) { // absent: zeros
#pragma unroll
            for (int k = 0; k < 8; k++) v[k] = 0.0f;
        } else {
            const int pos = p % a.block_size;
            const unsigned char *page = static_cast<const unsigned char *>(a.kv_cache) + (int64_t)id * a.page_stride_bytes;
            const unsigned char *row = page + aiter_mla__v4_row_at(pos);
            if constexpr (kVec) {
                if (lane < kV4NopeLanes) {
                    uint32_t w[2];
                    load_words(row + lane * 8, w);
                    const float scale = aiter_mla__ue8m0_to_f32(page[aiter_mla__v4_scales_at(a.block_size, pos) + lane / 8]);
#pragma unroll
                    for (int k = 0; k < 8; k++) v[k] = aiter_mla__dequant_fp8(word_byte(w, k), scale, fp8);
                } else {
                    uint32_t w[4];
                    load_words(row + AITER_MLA_V4_NOPE_DIM + (lane - kV4NopeLanes) * 16, w);
#pragma unroll
                    for (int k = 0; k < 8; k++) v[k] = aiter_mla_bf16_to_f32(word_half(w, k));
                }
            } else {
#pragma unroll
                for (int k = 0; k < 8; k++) v[k] = aiter_mla__v4_load(page, a.block_size, pos, lane * 8 + k, fp8);
            }
        }
        store_vals<OUT, 8, kVec>(a.out, ((int64_t)b * a.out_rows + a.offset + i) * AITER_MLA_V4_HEAD_DIM + lane * 8, v);
    }
}

// ==== DeepSeek V4 index builders (SPEC 7) ==================================================
// Every list comes from the reference's own closed forms (aiter_mla__v4_*_token / _entry), so
// the outputs are the reference's bit for bit. A builder is a small policy over its args:
// rows() (read on the device: the combine's token count is device data), token(r) (length
// and what entry k needs) and entry(tok, r, k). Launches: (1) a group of threads per row
// writes the dense row (-1 padded; 16-byte stores when aligned), lens, and for a ragged
// output the length into indptr[r + 1]; (2) one block scans those lengths into indptr;
// (3) a group per row writes its entries from indptr[r] on, dropping positions >= capacity.
// The top-k builder packs the entries >= 0 of each row instead: one warp per row, a ballot
// per 32/64 columns gives every kept entry its place.
struct V4Swa {
    aiter_mla_v4_swa_index_args a;
    struct Tok {
        int32_t n, req, first;
    };
    __device__ int64_t rows() const { return a.num_tokens; }
    __device__ Tok token(int64_t r) const {
        Tok t;
        t.n = aiter_mla__v4_swa_token(&a, r, &t.req, &t.first);
        return t;
    }
    __device__ int32_t entry(const Tok &t, int64_t, int32_t k) const { return aiter_mla__v4_swa_entry(&a, t.req, t.first + k); }
};
struct V4C128 {
    aiter_mla_v4_c128_args a;
    struct Tok {
        int32_t n, req;
    };
    __device__ int64_t rows() const { return a.num_tokens; }
    __device__ Tok token(int64_t r) const {
        Tok t;
        t.n = aiter_mla__v4_c128_token(&a, r, &t.req);
        return t;
    }
    __device__ int32_t entry(const Tok &t, int64_t, int32_t k) const { return aiter_mla__v4_c128_entry(&a, t.req, k); }
};
struct V4Combine {
    aiter_mla_v4_combine_args a;
    struct Tok {
        int32_t n;
        aiter_mla__v4_combine_tok k;
    };
    __device__ int64_t rows() const {
        const int64_t n = (int64_t)a.query_start_loc[a.num_reqs] - a.query_start_loc[0];
        return n > 0 ? n : 0;
    }
    __device__ Tok token(int64_t r) const {
        Tok t;
        t.n = aiter_mla__v4_combine_token(&a, r, &t.k);
        return t;
    }
    __device__ int32_t entry(const Tok &t, int64_t r, int32_t k) const { return aiter_mla__v4_combine_entry(&a, r, &t.k, k); }
};
struct V4Topk { // lengths and entries by v4_topk_kernel; the policy only feeds the scan
    aiter_mla_v4_topk_args a;
    __device__ int64_t rows() const { return a.num_tokens; }
};

template <class B, bool kVec>
__global__ void __launch_bounds__(kSmallThreads) v4_rows_kernel(B b, int width, int tpr) {
    const aiter_mla_v4_index_out &o = b.a.out;
    const int rows = kSmallThreads / tpr, lane = threadIdx.x % tpr;
    const int64_t T = b.rows();
    for (int64_t r = (int64_t)blockIdx.x * rows + threadIdx.x / tpr; r < T; r += (int64_t)gridDim.x * rows) {
        const typename B::Tok t = b.token(r);
        if (o.dense)
            for_columns<kVec>(lane, tpr, width, [&](int c, auto w) {
                constexpr int W = decltype(w)::value;
                int32_t v[W];
#pragma unroll
                for (int k = 0; k < W; k++) v[k] = c + k < t.n ? b.entry(t, r, c + k) : -1;
                store_ints(o.dense + r * o.dense_stride + c, v);
            });
        if (lane == 0) {
            if (o.lens) o.lens[r] = t.n;
            if (o.indptr) o.indptr[r + 1] = t.n; // the scan's input
        }
    }
}

// Row r's entries at indices[indptr[r] .. min(indptr[r + 1], capacity)).
template <class B>
__global__ void __launch_bounds__(kSmallThreads) v4_emit_kernel(B b, int tpr) {
    const aiter_mla_v4_index_out &o = b.a.out;
    const int rows = kSmallThreads / tpr, lane = threadIdx.x % tpr;
    const int64_t T = b.rows();
    for (int64_t r = (int64_t)blockIdx.x * rows + threadIdx.x / tpr; r < T; r += (int64_t)gridDim.x * rows) {
        const int64_t start = o.indptr[r], end = min((int64_t)o.indptr[r + 1], o.capacity);
        if (start >= end) continue; // empty, or past the capacity
        const typename B::Tok t = b.token(r);
        for (int64_t i = start + lane; i < end && i - start < t.n; i += tpr) o.indices[i] = b.entry(t, r, (int32_t)(i - start));
    }
}

// One warp per row: entries >= 0 of the top-k row in order, each ballot placing up to a
// warp's worth. kEmit = false: dense row (-1 padded), lens, the length into indptr[t + 1];
// kEmit = true: the ragged entries, positions at or past min(indptr[t + 1], capacity) dropped.
template <bool kEmit>
__global__ void __launch_bounds__(kSmallThreads) v4_topk_kernel(aiter_mla_v4_topk_args a) {
    constexpr int kWarps = kSmallThreads / AITER_MLA_WARP_SIZE;
    const int lane = threadIdx.x % AITER_MLA_WARP_SIZE;
    const uint64_t before = ((uint64_t)1 << lane) - 1; // the lanes below this one
    const aiter_mla_v4_index_out &o = a.out;
    for (int64_t t = (int64_t)blockIdx.x * kWarps + threadIdx.x / AITER_MLA_WARP_SIZE; t < a.num_tokens;
         t += (int64_t)gridDim.x * kWarps) { // t, valid, start, end and n are the same across the warp
        const bool valid = !a.is_valid_token || a.is_valid_token[t];
        const int32_t req = a.token_to_req[t];
        const int64_t start = kEmit ? o.indptr[t] : 0, end = kEmit ? min((int64_t)o.indptr[t + 1], o.capacity) : a.topk;
        int32_t n = 0;
        for (int c0 = 0; valid && c0 < a.topk && start + n < end; c0 += AITER_MLA_WARP_SIZE) {
            const int c = c0 + lane;
            const int32_t idx = c < a.topk ? a.topk_indices[t * a.topk_stride + c] : -1;
            const uint64_t kept = aiter_mla__ballot(idx >= 0);
            const int64_t i = start + n + __popcll(kept & before);
            if (idx >= 0 && i < end) {
                const int32_t slot = aiter_mla__v4_topk_slot(&a, req, idx);
                if (kEmit) o.indices[i] = slot;
                else if (o.dense) o.dense[t * o.dense_stride + i] = slot;
            }
            n += __popcll(kept);
        }
        if (!kEmit) {
            if (o.dense)
                for (int k = n + lane; k < a.topk; k += AITER_MLA_WARP_SIZE) o.dense[t * o.dense_stride + k] = -1;
            if (lane == 0) {
                if (o.lens) o.lens[t] = n;
                if (o.indptr) o.indptr[t + 1] = n; // the scan's input
            }
        }
    }
}

// Lengths -> indptr[0] = 0, indptr[r + 1] = running sum (saturated at INT32_MAX), in one block:
// chunks of kScanThreads * kScanItems rows, a shared-memory scan of the threads' sums, the
// total carried to the next chunk. L gives rows(), indptr(), len(r, cut) (cut: entries a row
// loses, summed into *dropped() when that is set). A length may be read from the indptr slot
// it is then overwritten with: each thread reads its items before any is written.
constexpr int kScanThreads = 1024, kScanItems = 8;

template <class B>
struct V4Lens { // a builder's lengths, left in indptr[1 ..] by its first launch
    B b;
    __device__ int64_t rows() const { return b.rows(); }
    __device__ int32_t *indptr() const { return b.a.out.indptr; }
    __device__ int32_t len(int64_t r, int64_t &) const { return b.a.out.indptr[r + 1]; }
    __device__ int64_t *dropped() const { return nullptr; }
};
struct V4CopyLens {
    aiter_mla_v4_ragged_copy_args a;
    __device__ int64_t rows() const { return a.num_rows; }
    __device__ int32_t *indptr() const { return a.indptr_buffer; }
    __device__ int32_t len(int64_t r, int64_t &cut) const {
        int64_t c;
        const int32_t n = aiter_mla__v4_copy_len(&a, r, &c);
        cut += c;
        return n;
    }
    __device__ int64_t *dropped() const { return a.num_dropped; }
};

template <class L>
__global__ void __launch_bounds__(kScanThreads) v4_scan_kernel(L l) {
    __shared__ int64_t part[kScanThreads];
    const int tid = threadIdx.x;
    const int64_t rows = l.rows();
    int32_t *indptr = l.indptr();
    int64_t carry = 0, cut = 0;
    if (tid == 0) indptr[0] = 0;
    for (int64_t c0 = 0; c0 < rows; c0 += kScanThreads * kScanItems) {
        const int64_t r0 = c0 + (int64_t)tid * kScanItems;
        int32_t v[kScanItems];
        int64_t sum = 0;
#pragma unroll
        for (int i = 0; i < kScanItems; i++) {
            v[i] = r0 + i < rows ? l.len(r0 + i, cut) : 0;
            sum += v[i];
        }
        part[tid] = sum;
        __syncthreads();
        for (int off = 1; off < kScanThreads; off <<= 1) { // inclusive scan of the threads' sums
            const int64_t x = tid >= off ? part[tid - off] : 0;
            __syncthreads();
            part[tid] += x;
            __syncthreads();
        }
        int64_t run = carry + part[tid] - sum;
        carry += part[kScanThreads - 1];
#pragma unroll
        for (int i = 0; i < kScanItems; i++) {
            run += v[i];
            if (r0 + i < rows) indptr[r0 + i + 1] = (int32_t)min(run, (int64_t)INT32_MAX);
        }
        __syncthreads(); // part is rewritten by the next chunk
    }
    if (int64_t *dropped = l.dropped()) {
        part[tid] = cut;
        __syncthreads();
        for (int off = kScanThreads / 2; off > 0; off >>= 1) {
            if (tid < off) part[tid] += part[tid + off];
            __syncthreads();
        }
        if (tid == 0) *dropped = part[0];
    }
}

// Ragged copy: row r's taken entries to indices_buffer[indptr_buffer[r] ..], never past the
// next row's start or the buffer's capacity.
__global__ void __launch_bounds__(kSmallThreads) v4_copy_kernel(aiter_mla_v4_ragged_copy_args a, int tpr) {
    const int rows = kSmallThreads / tpr, lane = threadIdx.x % tpr;
    for (int64_t r = (int64_t)blockIdx.x * rows + threadIdx.x / tpr; r < a.num_rows; r += (int64_t)gridDim.x * rows) {
        int64_t cut;
        const int32_t n = aiter_mla__v4_copy_len(&a, r, &cut);
        const int64_t dst = a.indptr_buffer[r];
        const int64_t end = min(min(dst + n, (int64_t)a.indptr_buffer[r + 1]), a.indices_buffer_capacity);
        for (int64_t i = dst + lane; i < end; i += tpr) a.indices_buffer[i] = a.indices[a.indptr[r] + (i - dst)];
    }
}

// The GPU prefill's chunk data (aiter_mla_v4_prefill), from the device's query_start_loc and
// seq_lens of the chunk's n requests: request i's first token among the chunk's `tokens` (the
// host's count) in chunk_qsl[i], clamped into [0, tokens], and chunk_qsl[n] = tokens, so that
// the combine lists exactly the rows the attention reads whatever the device arrays hold;
// its SWA gather length (-1, gathering nothing, when seq_len < q_len) and its compressed
// entries seq_len / ratio (-1 for a negative seq_len).
__global__ void __launch_bounds__(kSmallThreads) v4_prefill_lens_kernel(const int32_t *qsl, const int32_t *seq_lens, int n,
                                                                        int32_t tokens, int window, int ratio, int32_t *chunk_qsl,
                                                                        int32_t *gather_lens, int32_t *compressed_lens) {
    auto first = [&](int i) { return i == n ? tokens : (int32_t)min(max((int64_t)qsl[i] - qsl[0], (int64_t)0), (int64_t)tokens); };
    for (int i = blockIdx.x * kSmallThreads + threadIdx.x; i <= n; i += gridDim.x * kSmallThreads) {
        const int32_t q0 = first(i);
        chunk_qsl[i] = q0;
        if (i == n) continue;
        aiter_mla__v4_prefill_lens(first(i + 1) - q0, seq_lens[i], window, ratio, &gather_lens[i], &compressed_lens[i]);
    }
}

// ==== merge of attention states (SPEC 2a) ==================================================
// One group of threads per (token, head) row; 16-byte accesses (8 bf16/f16 or 4 f32 values)
// when head_dim and the pointers allow, one value at a time otherwise. fp32 math with the
// accurate expf/logf (SPEC 8 tolerances against the double reference); an lse of +inf
// counts as -inf, and two empty sides give o = 0, lse = -inf exactly.
template <int DT, bool kVec>
__global__ void __launch_bounds__(kSmallThreads) merge_kernel(aiter_mla_merge_args a, int tpr) {
    constexpr int N = kVec ? 16 / dtype_bytes(DT) : 1;
    const int rows_per_block = kSmallThreads / tpr, lane = threadIdx.x % tpr, H = a.num_heads, D = a.head_dim;
    const int64_t T = a.num_tokens, rows = T * H;
    for (int64_t row = (int64_t)blockIdx.x * rows_per_block + threadIdx.x / tpr; row < rows;
         row += (int64_t)gridDim.x * rows_per_block) {
        const int64_t t = row / H, li = (row - t * H) * T + t; // lse [H, T]
        float lp = a.lse_prefix[li], ls = a.lse_suffix[li];
        if (lp == pos_inf()) lp = neg_inf();
        if (ls == pos_inf()) ls = neg_inf();
        const float m = max_nan(lp, ls); // a NaN side: NaN o and lse
        const bool empty = m == neg_inf();
        float wp = 0.0f, ws = 0.0f, cp = 0.0f, cs = 0.0f;
        if (!empty) {
            wp = expf(lp - m);
            ws = expf(ls - m);
            cp = wp / (wp + ws);
            cs = ws / (wp + ws);
        }
        for (int c = lane * N; c < D; c += tpr * N) {
            float p[N], s[N], o[N];
            load_vals<DT, N, kVec>(a.o_prefix, row * D + c, p);
            load_vals<DT, N, kVec>(a.o_suffix, row * D + c, s);
#pragma unroll
            for (int k = 0; k < N; k++) o[k] = empty ? 0.0f : p[k] * cp + s[k] * cs;
            store_vals<DT, N, kVec>(a.o, row * D + c, o);
        }
        if (a.lse && lane == 0) a.lse[li] = empty ? neg_inf() : m + logf(wp + ws);
    }
}

} // namespace

// ==== launchers ============================================================================
extern "C" const char *aiter_mla__native_error_string(int code) { return hipGetErrorString((hipError_t)code); }

// The reduce over `rows` output rows, in units of a row's span of dims. wide: the block's
// warps share each unit (few rows, many pieces each). Else a warp per unit: 128-dim spans (the
// most warps in flight, each with the shortest chain) unless those would be many and the rows
// are longer, when a warp takes a whole 512-dim row. Measured on H100 against a warp per row
// for every shape: P1-ps (dv 128) 6194 -> 5463 us, V4D-h16-k512-b4 (64 rows) 20.4 -> 18.0 us;
// D1's 2048 rows of 512 took 13.2-14.0 us of reduce in 128-dim spans, 9.8-11.1 us a row a warp.
constexpr int64_t kSpanUnitsMax = 4096;
// The wide reduce (a block per unit, few units) reserves 120 KB, more than half of an SM's
// 228 KB (sm_90, sm_100): one block an SM. H100, D5: 20.4-21.0 us with none, 19.3-20.1 with
// 60 KB, 18.8-19.3 with 100 KB, 18.4-18.9 with 120 KB.
constexpr int kReduceWideSpread = 120 * 1024;
#ifdef AITER_MLA_HAS_MMA
// A runtime call's error, taken off the runtime's last-error slot: returned once, and not seen
// again by the next launch's hipGetLastError.
static hipError_t taken(hipError_t e) {
    if (e != hipSuccess) (void)hipGetLastError();
    return e;
}
// Which of the build's device passes the current device runs: its __CUDA_ARCH__ / 10 (90 for
// sm_90a, 80 for sm_80 or compute_80 PTX), 0 where the runtime cannot say (no device, no
// image of this file for it; such a launch fails as it would anyway). A fat build (sm_80 and
// sm_90a, say) has the tensor-core kernels' bodies in some images only, so the launches ask
// this, not the build's target list. Looked up once per device (the PTX version of a kernel,
// cudaFuncGetAttributes: no synchronisation, no allocation), then read from a table.
static __global__ void image_probe_kernel() {}
// A value of the current device, looked up once (lookup(dev): 0 where the runtime cannot say)
// and then read from `table` (0: not looked up yet); devices past its slots are looked up at
// every call.
constexpr int kDeviceSlots = 64;
template <typename F>
static int per_device(std::atomic<int> (&table)[kDeviceSlots], F &&lookup) {
    int dev = 0;
    if (taken(cudaGetDevice(&dev)) != hipSuccess) return 0;
    const bool cached = dev >= 0 && dev < kDeviceSlots;
    int v = cached ? table[dev].load(std::memory_order_relaxed) : 0;
    if (v) return v;
    v = lookup(dev);
    if (cached) table[dev].store(v, std::memory_order_relaxed);
    return v;
}
static int image_arch() {
    static std::atomic<int> arch_of[kDeviceSlots];
    return per_device(arch_of, [](int) {
        cudaFuncAttributes fa{};
        return taken(cudaFuncGetAttributes(&fa, image_probe_kernel)) == hipSuccess ? fa.ptxVersion : 0;
    });
}
// The shared memory a block of the current device may opt in to; no more than
// AITER_MLA_MAX_SMEM_PER_BLOCK where a build defines it (a compute_80 or compute_89 build with
// 101376 runs, on a larger GPU, the kernels and layouts that sm_86 or sm_89 devices take).
static int smem_optin() {
    static std::atomic<int> bytes_of[kDeviceSlots];
    return per_device(bytes_of, [](int dev) {
        int bytes = 0;
        if (taken(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != hipSuccess) return 0;
#ifdef AITER_MLA_MAX_SMEM_PER_BLOCK
        bytes = min(bytes, (int)(AITER_MLA_MAX_SMEM_PER_BLOCK));
#endif
        return bytes;
    });
}
// The shared-memory layout of the mma.sync decode on the current device: the largest of the
// pass it runs (layout_in_pass) that its blocks' shared memory holds, 0 where none (the portable
// decode): Hopper's on sm_90 and sm_100 passes with 227 KB, Ampere's on an sm_80 pass with 163 KB
// (A100), the 99 KB one on sm_80 passes with less (sm_86, sm_89) and on sm_120 passes.
static int mma_smem() {
    const int arch = image_arch(), optin = smem_optin();
    for (const int smem : {mma::kSmemLimit, mma::kSmemAmpere, mma::kSmemSmall})
        if (mma::layout_in_pass(smem, arch) && optin >= smem) return smem;
    return 0;
}
// Whether launches on the current device may take the mma.sync decode (a layout: each pass of
// it has 16 rows where the layout is not Hopper's)...
static bool mma_runs() { return mma_smem() != 0; }
// ... the prefill's from sm_80, where its layout fits (mma::pf_layout, at the launch)...
static bool prefill_mma_runs() { return image_arch() >= 80; }
#ifdef AITER_MLA_HAS_WGMMA
// ... and the warpgroup ones (Hopper's pass is sm_90a in these builds; their layouts take up to
// Hopper's 227 KB).
static bool wgmma_runs() { return image_arch() == 90 && smem_optin() >= mma::kSmemLimit; }
#endif
// A launch with one launch attribute (cudaLaunchKernelEx), `bytes` of dynamic shared memory.
template <typename... P, typename... A>
static hipError_t launch_ex(void (*kernel)(P...), dim3 grid, int threads, int bytes, hipStream_t s, const cudaLaunchAttribute &attr,
                            const A &...args) {
    cudaLaunchAttribute attrs[1] = {attr};
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = (size_t)bytes;
    cfg.stream = s;
    cfg.attrs = attrs;
    cfg.numAttrs = 1;
    return taken(cudaLaunchKernelEx(&cfg, kernel, args...));
}
#endif
// A kernel that follows the stream's previous kernel as its programmatic dependent where every
// NVIDIA target of the build has sm_90 (release_dependents), reserving `spread_smem` bytes of
// shared memory it does not use (0: none); a plain launch elsewhere. Launched early, a small
// grid's blocks would crowd onto the few SMs the producer leaves idle (up to 8 blocks each)
// and stream their loads through those SMs alone; the reservation caps the blocks an SM takes.
template <typename... P, typename... A>
static hipError_t launch_dependent(void (*kernel)(P...), unsigned grid, int threads, int spread_smem, hipStream_t s,
                                   const A &...args) {
#ifdef AITER_MLA_HAS_MMA
    if (image_arch() >= 90) {
        // a device with less shared memory (sm_120: 99 KB a block) refuses the limit: no reservation
        if (spread_smem > 48 * 1024 &&
            taken(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, spread_smem)) != hipSuccess) {
            spread_smem = 0;
        }
        cudaLaunchAttribute attr{};
        attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr.val.programmaticStreamSerializationAllowed = 1;
        return launch_ex(kernel, dim3(grid), threads, spread_smem, s, attr, args...);
    }
#endif
    (void)spread_smem;
    kernel<<<grid, threads, 0, s>>>(args...);
    return hipGetLastError();
}
// The reduce of a launch over query tokens (decode's split tiles, V4's splits): p's partials
// into p.a's o and lse [T, H], a row no piece saw a key for +inf, the sink (V4) on the way.
static ReduceParams token_reduce_params(const DecodeParams &p) {
    const aiter_mla_decode_args &a = p.a;
    ReduceParams r{};
    r.part_o = p.part_o;
    r.part_lse = p.part_lse;
    r.o = a.o;
    r.o_stride_token = a.o_stride_token;
    r.o_stride_head = a.o_stride_head;
    r.lse = a.lse;
    r.lse_stride_token = a.num_heads;
    r.lse_stride_head = 1;
    r.empty_lse = HUGE_VALF;
    r.attn_sink = p.attn_sink;
    r.num_heads = a.num_heads;
    r.dv = kL;
    r.o_dtype = a.o_dtype;
    return r;
}
static hipError_t launch_reduce(hipStream_t s, const ReduceParams &r, int64_t rows, bool wide) {
    auto units = [&](int span) { return rows * ((r.dv + span - 1) / span); };
    auto grid = [&](int64_t blocks) { return (unsigned)max((int64_t)1, min(blocks, (int64_t)kMaxGrid)); }; // grid-stride past that
    auto warp_grid = [&](int span) { return grid((units(span) + kReduceWarps - 1) / kReduceWarps); }; // a warp per unit
    if (wide)
        return launch_dependent(reduce_kernel<kReduceWarps, 1>, grid(units(reduce_span(1))), kReduceThreads, kReduceWideSpread, s, r);
    if (r.dv > reduce_span(1) && units(reduce_span(1)) > kSpanUnitsMax)
        return launch_dependent(reduce_kernel<1, 4>, warp_grid(reduce_span(4)), kReduceThreads, 0, s, r);
    return launch_dependent(reduce_kernel<1, 1>, warp_grid(reduce_span(1)), kReduceThreads, 0, s, r);
}
// The reduce of a plan's split tiles (decode and prefill plans share the buffer layout):
// r carries the partials and the output layout, the plan the tile lists and their count.
static hipError_t launch_plan_reduce(hipStream_t s, ReduceParams r, const int32_t *plan, int64_t off_indptr, int64_t off_final_map,
                                     int64_t off_partial_map, int max_tiles, int rows_per_tile, int max_partials, int max_partial_rows,
                                     bool wide) {
    r.num_tiles = plan + AITER_MLA__PH_NUM_REDUCE_TILES; // this plan's count, read on the device
    r.indptr = plan + off_indptr;
    r.final_map = plan + off_final_map;
    r.partial_map = plan + off_partial_map;
    r.rows_per_tile = rows_per_tile;
    r.max_tiles = max_tiles;
    r.max_partials = max_partials;
    r.max_partial_rows = max_partial_rows;
    return launch_reduce(s, r, (int64_t)max_tiles * rows_per_tile * r.num_heads, wide);
}

// Whether launch_mma takes the warpgroup kernel (where it runs): more than 16 rows per tile.
static bool wgmma_rows(int tile_rows) {
#ifdef AITER_MLA_HAS_WGMMA
    return tile_rows > 16 && wgmma_runs();
#else
    return (void)tile_rows, false;
#endif
}

#ifdef AITER_MLA_HAS_MMA
// The tensor-core kernel launch_mma takes for tile_rows query rows per tile: the 16-row kernel
// up to 16 rows, else the warpgroup kernel where it runs (64-row mma.sync otherwise).
static aiter_mla_kernel mma_kernel_of(int tile_rows) {
    if (tile_rows <= 16 || mma_smem() != mma::kSmemLimit) return AITER_MLA_KERNEL_MMA16; // other layouts: 16-row passes only
    return wgmma_rows(tile_rows) ? AITER_MLA_KERNEL_WGMMA : AITER_MLA_KERNEL_MMA;
}
#ifdef AITER_MLA_HAS_WGMMA
// Whether a decode's tensor-core pass goes to the kernel that stages keys by bulk copies
// (f8::decode16_fp8_kernel): every 16-row pass over a per-tensor e4m3fn cache where the
// warpgroup kernels run. The launch and the kernel query both ask it.
static bool decode_takes_bulk16(int kv_dtype, int tile_rows) {
    return kv_dtype == AITER_MLA_FP8_E4M3FN && mma_kernel_of(tile_rows) == AITER_MLA_KERNEL_MMA16 && wgmma_runs();
}
#endif

// A kernel with more than 48 KB of dynamic shared memory. The limit is per device and cheap
// to set: set it at every launch.
template <typename... P, typename... A>
static hipError_t launch_big_smem(void (*kernel)(P...), dim3 grid, int threads, int bytes, hipStream_t s, const A &...args) {
    const hipError_t e = taken(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    if (e != hipSuccess) return e;
    kernel<<<grid, threads, bytes, s>>>(args...);
    return hipSuccess;
}
#ifdef AITER_MLA_HAS_WGMMA
// The same in clusters of `cluster` blocks (sm_90; every grid dimension a multiple of its own).
template <typename... P, typename... A>
static hipError_t launch_big_smem_clusters(void (*kernel)(P...), dim3 grid, dim3 cluster, int threads, int bytes, hipStream_t s,
                                           const A &...args) {
    const hipError_t e = taken(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    if (e != hipSuccess) return e;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster.x;
    attr.val.clusterDim.y = cluster.y;
    attr.val.clusterDim.z = cluster.z;
    return launch_ex(kernel, grid, threads, bytes, s, attr, args...);
}

// The driver's tensor-map encoder, looked up once through the runtime (no link to the driver
// library); NULL where the driver has none.
typedef CUresult (*TensorMapEncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *, const cuuint64_t *,
                                         const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                         CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static TensorMapEncodeTiled tensor_map_encoder() {
    static const TensorMapEncodeTiled fn = [] {
        void *f = nullptr;
        cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
        const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found);
#else
        const cudaError_t e = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &f, cudaEnableDefault, &found);
#endif
        if (e != cudaSuccess || found != cudaDriverEntryPointSuccess)
            f = nullptr;
        return reinterpret_cast<TensorMapEncodeTiled>(f);
    }();
    return fn;
}
// A tiled tensor map of `rank` dims (sizes in elements, strides of dims 1.. in bytes) with
// boxes of `box` elements; false where the driver has no encoder or refuses the layout.
static bool encode_tensor_map(CUtensorMap *m, CUtensorMapDataType type, cuuint32_t rank, const void *base, const cuuint64_t *dims,
                              const cuuint64_t *strides, const cuuint32_t *box, CUtensorMapSwizzle swizzle) {
    const TensorMapEncodeTiled encode = tensor_map_encoder();
    const cuuint32_t steps[3] = {1, 1, 1};
    return encode && encode(m, type, rank, const_cast<void *>(base), dims, strides, box, steps, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
// The map of a [tokens, heads, cols] tensor of `elt`-byte elements (strides in elements, both
// positive) with boxes of 128 bytes x box_heads x box_tokens in the 128-byte swizzle: the
// decode's Q (DecodeMaps::q) and the prefill's q, k and v (wg::PfMaps). Its callers come here
// only with a 16-byte aligned base and strides in whole 16 bytes, as the encoder needs: the
// kernels that read these maps are chosen only for such operands (decode_kernel_of,
// prefill_kernel_of, sparse_kernel_of, v4_kernel_of). false: no map (the loaders copy by cp.async).
static bool encode_rows_map(CUtensorMap *m, const void *base, CUtensorMapDataType type, int elt, int cols, int heads,
                            int64_t stride_head, int64_t stride_token, int box_heads, int box_tokens) {
    if (stride_head <= 0 || stride_token <= 0) return false;
    const cuuint64_t dims[3] = {(cuuint64_t)cols, (cuuint64_t)heads, 0x7fffffffu};
    const cuuint64_t strides[2] = {(cuuint64_t)(stride_head * elt), (cuuint64_t)(stride_token * elt)};
    const cuuint32_t box[3] = {(cuuint32_t)(128 / elt), (cuuint32_t)box_heads, (cuuint32_t)box_tokens};
    return encode_tensor_map(m, type, 3, base, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}
// Q's map (DecodeMaps::q) where a 64-row pass is 64 heads of one token: a bf16 q (or f16: its
// bytes alike) with H a multiple of 64; false: the loader copies Q by cp.async.
static bool decode_q_map(const DecodeParams &p, CUtensorMap *m) {
    const aiter_mla_decode_args &a = p.a;
    return (a.q_dtype == AITER_MLA_BF16 || a.q_dtype == AITER_MLA_F16) && a.num_heads % wg::kM == 0 &&
           encode_rows_map(m, a.q, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, p.v4 ? kV4D : kD, a.num_heads, a.q_stride_head,
                           a.q_stride_token, wg::kM, 1);
}
// The bf16 paged cache's map (DecodeMaps::cache) for a dense decode with pages of
// 64 keys or more; false: no map (the launch takes the cp.async instance).
static bool decode_cache_map(const DecodeParams &p, CUtensorMap *m) {
    const aiter_mla_decode_args &a = p.a;
    const int64_t rows = (int64_t)a.num_pages * a.page_size;
    if (p.sparse || a.kv_dtype != AITER_MLA_BF16 || a.page_size < wg::kN || rows >= INT32_MAX || ((uintptr_t)a.kv_cache & 15)) return false;
    const cuuint64_t dims[2] = {(cuuint64_t)kD, (cuuint64_t)rows}, strides[1] = {(cuuint64_t)kD * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)wg::kN};
    return encode_tensor_map(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, a.kv_cache, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
}
#endif
template <int KVT, int M, int kSmem>
static hipError_t launch_mma_layout(dim3 grid, hipStream_t s, const DecodeParams &p) {
    return launch_big_smem(mma::decode_mma_kernel<KVT, M, kSmem>, grid, mma::kThreads, mma::Smem<mma::ring_pitch(KVT), M, kSmem>::total, s,
                           p);
}
// M rows a pass, in the layout of the device's shared memory (mma_smem: the layouts other than
// Hopper's have 16-row passes only, which mma_kernel_of gives them).
template <int KVT, int M>
static hipError_t launch_mma_rows(dim3 grid, hipStream_t s, const DecodeParams &p) {
    if constexpr (M == 16) {
        const int smem = mma_smem();
        if (smem == mma::kSmemAmpere) return launch_mma_layout<KVT, 16, mma::kSmemAmpere>(grid, s, p);
        if (smem == mma::kSmemSmall) return launch_mma_layout<KVT, 16, mma::kSmemSmall>(grid, s, p);
    }
    return launch_mma_layout<KVT, M, mma::kSmemLimit>(grid, s, p);
}
// 16-row passes when a query tile has at most 16 rows (H <= 16, few tokens), else 64: on the
// warpgroup kernel where the build has it. The kPairedKeys formats (sparse attention only)
// with an even number of 64-row slices of the same keys (along y) run in pairs of blocks that
// widen each tile once between them (kPair).
// num_cu: sparse attention's multiprocessors as the caller gives them (0: not given).
#ifdef AITER_MLA_HAS_WGMMA
// Whether a V4 attention's tensor-core pass goes to the kernel that stages keys by bulk copies
// (f8::decode16_fp8_kernel): a 16-row pass over MODEL1 pages of e4m3fn in both lists, a token's
// keys in one block (splits leave each block a few tiles, where the 16-row mma.sync kernel's
// 32-key tiles and lighter start win). The launch and the kernel query both ask it.
static bool v4_takes_bulk16(int tile_rows, int splits, const aiter_mla_v4_keys &keys, const aiter_mla_v4_keys &extra) {
    return mma_kernel_of(tile_rows) == AITER_MLA_KERNEL_MMA16 && wgmma_runs() && splits == 1 && !keys.rows &&
           keys.dtype == AITER_MLA_FP8_E4M3FN && (!extra.indices || extra.dtype == AITER_MLA_FP8_E4M3FN);
}
// A token-per-block grid (sparse, V4) cut to the blocks that run at once where the caller gave
// its multiprocessors (num_cu > 0; one block an SM), block x then taking tokens x, x + gridDim.x, ...
static dim3 resident_token_blocks(dim3 grid, int num_cu) {
    if (num_cu > 0) grid.x = min(grid.x, max(1u, (unsigned)num_cu / (grid.y * grid.z)));
    return grid;
}
#endif
template <int KVT>
static hipError_t launch_mma(dim3 grid, hipStream_t s, const DecodeParams &p, int tile_rows, [[maybe_unused]] int num_cu = 0) {
#ifdef AITER_MLA_HAS_WGMMA
    // Every 16-row pass over a per-tensor e4m3fn cache (a decode: sparse attention reads bf16
    // or fp8_ds_mla rows; the wrapper holds the cache's base to 16 bytes, as the kernel's bulk
    // copies need), so sm_90a passes leave out the 16-row mma.sync kernel's e4m3fn instance
    if constexpr (KVT == AITER_MLA_FP8_E4M3FN)
        if (decode_takes_bulk16(KVT, tile_rows))
            return launch_big_smem(f8::decode16_fp8_kernel<KVT>, grid, f8::kThreads, f8::Smem<KVT>::total, s, p);
    // ... and 16-row passes of V4 attention over MODEL1 pages of e4m3fn (both lists) with a
    // token's keys in one block: keys split over blocks leave each a few tiles, where the 16-row
    // mma.sync kernel's 32-key tiles and lighter start win (H200, us: V4D-h16-k512-b4, 10
    // splits, 16.2 against 18.1; -b32, 4 splits, 23.4 against 25.1). Given the
    // multiprocessors, only the blocks that run at once (one an SM), each taking tokens in turn
    // so that a token's first tiles copy while the one before ends.
    if constexpr (KVT == kV4Model1)
        if (v4_takes_bulk16(tile_rows, p.v4_splits, p.v4_keys[0], p.v4_keys[1]))
            return launch_big_smem(f8::decode16_fp8_kernel<KVT>, resident_token_blocks(grid, num_cu), f8::kThreads, f8::Smem<KVT>::total, s, p);
#endif
    if (mma_kernel_of(tile_rows) == AITER_MLA_KERNEL_MMA16) return launch_mma_rows<KVT, 16>(grid, s, p);
#ifdef AITER_MLA_HAS_WGMMA
    if (!wgmma_runs()) return launch_mma_rows<KVT, 64>(grid, s, p); // a device that runs another pass
    // Sparse, given the multiprocessors (one block of this kernel fits one): only the blocks
    // that run at once, each taking tokens x, x + gridDim.x, ..., so that a token's Q loads
    // while the one before ends and the blocks of a token's row groups run side by side.
    if (p.sparse) grid = resident_token_blocks(grid, num_cu);
    constexpr int kBytes = wg::SmemOf<KVT>::total;
    wg::DecodeMaps map{}; // zeros where no instance reads them
    map.q_on = decode_q_map(p, &map.q);
    // bf16 top-k rows (sparse, V4): the split scheme, whose loads the L2 mostly serves
    constexpr int kSplitBytes = wg::SmemOf<KVT, true>::total;
    if constexpr (KVT == kV4Bf16) {
        return launch_big_smem(wg::decode_wgmma_kernel<KVT, false, false, true>, grid, wg::kThreads, kSplitBytes, s, p, map);
    } else {
        if constexpr (KVT == AITER_MLA_BF16) {
            if (decode_cache_map(p, &map.cache)) return launch_big_smem(wg::decode_wgmma_kernel<KVT, false, true>, grid, wg::kThreads, kBytes, s, p, map);
            if (p.sparse) return launch_big_smem(wg::decode_wgmma_kernel<KVT, false, false, true>, grid, wg::kThreads, kSplitBytes, s, p, map);
        }
        if constexpr (wg::kPairedKeys<KVT>)
            if (p.sparse && grid.y % 2 == 0)
                return launch_big_smem_clusters(wg::decode_wgmma_kernel<KVT, true>, grid, dim3(1, 2, 1), wg::kThreads, kBytes, s, p, map);
        if constexpr (KVT == kV4Model1)
            if (p.keys_shared) return launch_big_smem(wg::decode_wgmma_kernel<KVT, false, false, false, true>, grid, wg::kThreads, kBytes, s, p, map);
        return launch_big_smem(wg::decode_wgmma_kernel<KVT>, grid, wg::kThreads, kBytes, s, p, map);
    }
#else
    return launch_mma_rows<KVT, 64>(grid, s, p);
#endif
}
#endif

#ifdef AITER_MLA_HAS_MFMA
// Whether q's rows suit the matrix-core decode: a 16-bit type (16-byte aligned) or e4m3
// (8-byte aligned), strides in whole units of 8 elements.
static bool mfma_q_rows(const void *q, aiter_mla_dtype dtype, int64_t stride_token, int64_t stride_head) {
    const bool q16 = dtype == AITER_MLA_BF16 || dtype == AITER_MLA_F16;
    const bool q8 = is_e4m3(dtype);
    return (q16 || q8) && ((uintptr_t)q & (q16 ? 15u : 7u)) == 0 && stride_token % 8 == 0 && stride_head % 8 == 0;
}
// Passes of 16 rows when a query tile has at most 16, else of 64 (each key tile read once for
// them) for a bf16 q over bf16, fp8_ds_mla or V4 rows (the many-head shapes of DeepSeek's
// decode); the other formats keep passes of 16 (each 64-row instance adds about half a
// minute to an AMD build).
template <int KVT, int QT>
static void launch_mfma(dim3 grid, hipStream_t s, const DecodeParams &p, int tile_rows) {
    constexpr bool kWide = QT == AITER_MLA_BF16 && (KVT == AITER_MLA_BF16 || is_ds_mla(KVT) || KVT == kV4Model1 || KVT == kV4Bf16);
    if constexpr (kWide) {
        if (tile_rows > 16) {
            mfma::decode_mfma_kernel<KVT, QT, 64><<<grid, mfma::kThreads, 0, s>>>(p);
            return;
        }
    }
    (void)tile_rows;
    mfma::decode_mfma_kernel<KVT, QT, 16><<<grid, mfma::kThreads, 0, s>>>(p);
}
#endif

// The decode kernel for these arguments: the matrix units' where q's rows and the cache suit
// them, else the portable kernel (tile_rows: a query tile's rows, tokens_per_tile x H).
static aiter_mla_kernel decode_kernel_of(const aiter_mla_decode_args *a, [[maybe_unused]] int tile_rows) {
    [[maybe_unused]] const bool kv_fp8 = is_e4m3(a->kv_dtype), q_fp8 = is_e4m3(a->q_dtype);
#if defined(AITER_MLA_HAS_MFMA)
    // matrix cores: 16-bit q over a cache of q's type or per-tensor fp8; e4m3 q over a cache
    // of its flavour
    if (mfma_q_rows(a->q, a->q_dtype, a->q_stride_token, a->q_stride_head) && (a->kv_dtype == a->q_dtype || (kv_fp8 && !q_fp8)))
        return AITER_MLA_KERNEL_MFMA;
#elif defined(AITER_MLA_HAS_MMA)
    // tensor cores: bf16 q (16-byte rows) or e4m3 q (8-byte rows, widened to bf16 as it
    // loads), bf16 or fp8 cache
    const bool q_ok = (a->q_dtype == AITER_MLA_BF16 || (q_fp8 && a->kv_dtype == a->q_dtype)) &&
                      ((uintptr_t)a->q & (q_fp8 ? 7u : 15u)) == 0 && a->q_stride_token % 8 == 0 && a->q_stride_head % 8 == 0;
    if (q_ok && (a->kv_dtype == AITER_MLA_BF16 || kv_fp8) && mma_runs()) return mma_kernel_of(tile_rows);
#endif
    return AITER_MLA_KERNEL_PORTABLE;
}

extern "C" int aiter_mla__launch_decode(const aiter_mla_decode_args *a, const aiter_mla_decode_plan_info *info,
                                        aiter_mla_kernel *kernel, void *stream) {
    const int tile_rows = info->tokens_per_tile * a->num_heads; // a query tile's rows
    const aiter_mla_kernel k = decode_kernel_of(a, tile_rows);
    if (kernel) {
        *kernel = k;
#ifdef AITER_MLA_HAS_WGMMA
        if (k == AITER_MLA_KERNEL_MMA16 && decode_takes_bulk16(a->kv_dtype, tile_rows)) *kernel = AITER_MLA_KERNEL_BULK16; // launch_mma's pick
#endif
        return 0;
    }
    hipStream_t s = (hipStream_t)stream;
    int32_t *plan = a->plan;
    DecodeParams p{};
    p.a = *a;
    p.work_indptr = plan + info->off_work_indptr;
    p.work_info = plan + info->off_work_info;
    p.max_work = info->max_work;
    p.max_partial_rows = info->max_partial_rows;
    p.part_o = (float *)a->workspace;
    p.part_lse = p.part_o ? p.part_o + (int64_t)info->max_partial_rows * a->num_heads * kL : nullptr;
    const bool kv_fp8 = is_e4m3(a->kv_dtype), q_fp8 = is_e4m3(a->q_dtype);
    p.v_scale = kv_fp8 ? a->kv_scale : 1.0f;
    p.score_scale = a->sm_scale * (q_fp8 ? a->q_scale : 1.0f) * p.v_scale * kLog2e;
    p.page_shift = 0;
    while ((1 << p.page_shift) < a->page_size) p.page_shift++;
    // A query tile of more than 64 rows: blocks (x, y) take rows [64 x, 64 x + 64) of work list
    // y side by side (row_split), sharing its keys in the L2 (info->num_lists: num_cu / slices).
    // The warpgroup kernel takes its rows so at any height (a grid of one slice then).
    const int slices = aiter_mla_decode_slices(info);
    p.row_split = slices > 1 || wgmma_rows(tile_rows);
    const dim3 grid = p.row_split ? dim3((unsigned)slices, info->num_lists) : dim3(info->num_lists), block(kThreads);
    const bool launched = k != AITER_MLA_KERNEL_PORTABLE;
    // few rows (small batches split over many CUs, many pieces each): the reduce takes a block
    // per row and span, else a warp per unit
    const bool wide_reduce = (int64_t)a->batch * info->tokens_per_tile * a->num_heads < info->desc.num_cu;
#if defined(AITER_MLA_HAS_MFMA)
    if (launched) {
        const bool f16 = a->q_dtype == AITER_MLA_F16;
        const int rows = p.row_split ? (int)AITER_MLA_SLICE_ROWS : tile_rows; // a block's
        if (q_fp8 && a->q_dtype == AITER_MLA_FP8_E4M3FN) {
            launch_mfma<AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FN>(grid, s, p, rows);
        } else if (q_fp8) {
            launch_mfma<AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_FP8_E4M3FNUZ>(grid, s, p, rows);
        } else {
            switch (a->kv_dtype) {
            case AITER_MLA_BF16: launch_mfma<AITER_MLA_BF16, AITER_MLA_BF16>(grid, s, p, rows); break;
            case AITER_MLA_F16: launch_mfma<AITER_MLA_F16, AITER_MLA_F16>(grid, s, p, rows); break;
            case AITER_MLA_FP8_E4M3FN:
                f16 ? launch_mfma<AITER_MLA_FP8_E4M3FN, AITER_MLA_F16>(grid, s, p, rows)
                    : launch_mfma<AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16>(grid, s, p, rows);
                break;
            default:
                f16 ? launch_mfma<AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_F16>(grid, s, p, rows)
                    : launch_mfma<AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_BF16>(grid, s, p, rows);
                break;
            }
        }
    }
#elif defined(AITER_MLA_HAS_MMA)
    if (launched) {
        hipError_t e = hipSuccess;
        // Split pieces count their rows for the reduce (count_stored_rows), which then merges each
        // tile as its pieces come in instead of after the whole decode: on the warpgroup kernel
        // (H100/H200, D3 -3.8 %, D6 -4.6 %) and on the mma kernels where the reduce takes a warp
        // a unit (rows >= CUs; the planner runs split pieces first in their lists): H200, D1
        // -0.8 %, D1-p1 -2.0 %, D1-fp8 -1.1 %, D2-p1 -1.4 %. Where the reduce is the wide one
        // (batch 1 over every CU) they cost more than they save (D5 17.6 -> 20-26 us, measured
        // before the split-first order) and the reduce waits for the decode's end.
        if ((k == AITER_MLA_KERNEL_WGMMA || !wide_reduce) && info->max_partials > 0) p.arrivals = plan + info->off_reduce_counters;
        switch (a->kv_dtype) {
        case AITER_MLA_BF16: e = launch_mma<AITER_MLA_BF16>(grid, s, p, tile_rows); break;
        case AITER_MLA_FP8_E4M3FN: e = launch_mma<AITER_MLA_FP8_E4M3FN>(grid, s, p, tile_rows); break;
        default: e = launch_mma<AITER_MLA_FP8_E4M3FNUZ>(grid, s, p, tile_rows); break;
        }
        if (e != hipSuccess) return (int)e;
    }
#endif
    if (!launched) {
        switch (a->kv_dtype) {
        case AITER_MLA_BF16: decode_kernel<AITER_MLA_BF16><<<grid, block, 0, s>>>(p); break;
        case AITER_MLA_F16: decode_kernel<AITER_MLA_F16><<<grid, block, 0, s>>>(p); break;
        case AITER_MLA_FP8_E4M3FN: decode_kernel<AITER_MLA_FP8_E4M3FN><<<grid, block, 0, s>>>(p); break;
        case AITER_MLA_FP8_E4M3FNUZ: decode_kernel<AITER_MLA_FP8_E4M3FNUZ><<<grid, block, 0, s>>>(p); break;
        default: return (int)hipErrorInvalidValue;
        }
    }
    hipError_t e = hipGetLastError();
    if (e != hipSuccess || info->max_partials == 0) return (int)e;
    ReduceParams r = token_reduce_params(p);
    r.arrivals = p.arrivals;
    r.departures = p.arrivals ? p.arrivals + info->max_partial_rows : nullptr;
    r.o_rows_at = a->qo_indptr + a->batch;
    e = launch_plan_reduce(s, r, plan, info->off_reduce_indptr, info->off_reduce_final_map, info->off_reduce_partial_map,
                           info->max_reduce_tiles, info->tokens_per_tile, info->max_partials, info->max_partial_rows, wide_reduce);
    // The decode has counted its pieces: without the reduce that sets the counters back, the
    // plan's next launch would read them as its own.
    if (e != hipSuccess && p.arrivals) (void)hipMemsetAsync(p.arrivals, 0, sizeof(int32_t) * 2 * (size_t)info->max_partial_rows, s);
    return (int)e;
}

// Prefill: the persistent plan's grid is (CU, head); without a plan (query tile, head,
// request). Tensor cores take 16-byte aligned q/k/v with strides in whole 16-byte units.
static dim3 prefill_grid(const aiter_mla_prefill_args *a, int rows_per_pass) {
    const unsigned heads = (unsigned)min(a->num_heads, kMaxGrid);
    if (a->plan) return dim3((unsigned)a->plan_info->desc.num_cu, heads, 1);
    return dim3(token_blocks(((int64_t)a->max_seqlen_q + rows_per_pass - 1) / rows_per_pass), heads, (unsigned)min(a->batch, kMaxGrid));
}

#ifdef AITER_MLA_HAS_WGMMA
// Without a plan and given the caller's num_cu (the library queries no device property), when the
// grid has more blocks than fit at once, the wgmma prefill launches only those that fit and
// each takes several of the grid's blocks in turn (for_each_prefill_unit), so that a unit's
// start (Q and its first keys, ~4 us in a fresh block) overlaps the end of the one before.
// Only while a request has at most kPfResidentTiles query tiles: a fixed order cannot even
// out the spread of longer causal requests as the hardware's handing out of blocks does
// (H100: P1, P2 2-3 % faster, P4 1 %; P3, 128 tiles a request, 2.5 % slower).
constexpr int kPfResidentTiles = 64;

// A [tokens, heads, cols] operand of the wgmma prefill: boxes of 128 bytes x 1 head x wg::kPfN tokens.
static bool encode_pf_map(CUtensorMap *m, const void *base, CUtensorMapDataType type, int elt, int cols, int heads, int64_t stride_head,
                          int64_t stride_token) {
    return encode_rows_map(m, base, type, elt, cols, heads, stride_head, stride_token, 1, wg::kPfN);
}
// q, k and v's maps for the wgmma prefill; on = 0 (the loader copies by cp.async) where the
// driver has no encoder or refuses a layout.
static wg::PfMaps prefill_maps(const aiter_mla_prefill_args &a, bool fp8) {
    wg::PfMaps m{};
    const CUtensorMapDataType type = fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                     : a.qkv_dtype == AITER_MLA_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                                    : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    const int elt = fp8 ? 1 : 2;
    m.on = encode_pf_map(&m.q, a.q, type, elt, a.dqk, a.num_heads, a.q_stride_head, a.q_stride_token) &&
           encode_pf_map(&m.k, a.k, type, elt, a.dqk, a.num_heads, a.k_stride_head, a.k_stride_token) &&
           encode_pf_map(&m.v, a.v, type, elt, a.dv, a.num_heads, a.v_stride_head, a.v_stride_token);
    return m;
}

template <int DQK, int DV, bool F16, bool FP8 = false>
static hipError_t launch_prefill_wgmma(hipStream_t s, PrefillParams p) {
    auto kernel = wg::prefill_wgmma_kernel<DQK, DV, F16, FP8>;
    constexpr int kSmem = wg::PfSmem<DQK, DV, FP8>::total;
    dim3 grid = prefill_grid(&p.a, wg::kPfBm);
    p.units = grid;
    p.resident_blocks = 0;
    // one block fits an SM (384 threads at 168 registers fill its register file): the
    // caller's num_cu is the count that runs at once
    const int resident = p.a.num_cu;
    if (!p.a.plan && resident > 0 && grid.x <= (unsigned)kPfResidentTiles && (int64_t)grid.x * grid.y * grid.z > resident) {
        p.resident_blocks = resident;
        grid = dim3((unsigned)resident, 1, 1);
    }
    return launch_big_smem(kernel, grid, wg::kThreads, kSmem, s, p, prefill_maps(p.a, FP8));
}
#endif
#ifdef AITER_MLA_HAS_MMA
template <int DQK, int DV, bool F16, bool STAGED = false>
static hipError_t launch_prefill_mma(hipStream_t s, const PrefillParams &p) {
    using Sh = mma::PfShape<DQK, DV, STAGED>;
    return launch_big_smem(mma::prefill_mma_kernel<DQK, DV, F16, STAGED>, prefill_grid(&p.a, Sh::bm), Sh::threads, Sh::total, s, p);
}
static hipError_t launch_prefill_mma_bf16(hipStream_t s, const PrefillParams &p) { // fp8 is widened to bf16
    switch (p.a.dqk * 1000 + p.a.dv) {
    case 64064: return launch_prefill_mma<64, 64, false>(s, p);
    case 128064: return launch_prefill_mma<128, 64, false>(s, p);
    case 128128: return launch_prefill_mma<128, 128, false>(s, p);
    case 192064: return launch_prefill_mma<192, 64, false>(s, p);
    case 192128: return launch_prefill_mma<192, 128, false>(s, p);
    case 192192: return launch_prefill_mma<192, 192, false>(s, p);
    case 256064: return launch_prefill_mma<256, 64, false>(s, p);
    case 256128: return launch_prefill_mma<256, 128, false>(s, p);
    case 256192: return launch_prefill_mma<256, 192, false>(s, p);
    case 256256: return launch_prefill_mma<256, 256, false>(s, p);
    default: return hipErrorInvalidValue;
    }
}
#endif

#ifdef AITER_MLA_HAS_MFMA
template <int ET, int DQK, int DV>
static void launch_prefill_mfma(hipStream_t s, const PrefillParams &p) {
    mfma::prefill_mfma_kernel<ET, DQK, DV><<<prefill_grid(&p.a, mfma::kPfM), mfma::kThreads, 0, s>>>(p);
}
#endif
// The prefill kernel for these arguments: the matrix units' for 16-byte aligned q, k, v with
// strides in whole 16-byte units (AMD: head dims 192/128 and 128/128; NVIDIA: on
// AITER_MLA_WGMMA builds the warpgroup kernel for bf16, f16 and e4m3fn at those dims, else
// mma.sync from sm_80, f16 at those dims only), else the portable kernel.
static aiter_mla_kernel prefill_kernel_of(const aiter_mla_prefill_args *a) {
    const bool fp8 = is_e4m3(a->qkv_dtype);
    const int64_t unit = fp8 ? 16 : 8; // elements per 16 bytes
    const bool aligned = (((uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v) & 15) == 0 &&
                         a->q_stride_token % unit == 0 && a->q_stride_head % unit == 0 && a->k_stride_token % unit == 0 &&
                         a->k_stride_head % unit == 0 && a->v_stride_token % unit == 0 && a->v_stride_head % unit == 0;
    [[maybe_unused]] const bool common = (a->dqk == 192 || a->dqk == 128) && a->dv == 128;
#if defined(AITER_MLA_HAS_MFMA)
    if (aligned && common) return AITER_MLA_KERNEL_MFMA;
#elif defined(AITER_MLA_HAS_MMA)
    if (aligned && prefill_mma_runs()) {
#ifdef AITER_MLA_HAS_WGMMA
        // e4m3fn: e4m3 products (wgmma has none for e4m3fnuz, which stays on the staged path)
        if (common && a->qkv_dtype != AITER_MLA_FP8_E4M3FNUZ && wgmma_runs()) return AITER_MLA_KERNEL_WGMMA;
#endif
        // f16, and fp8 staged as bytes, have kernels for the common pairs only (compile time): f16's
        // other pairs run portable, fp8's widen to bf16 on the way in. A block's layout must fit
        // the device's shared memory (99 KB on sm_86, sm_89, sm_120: not 192/192, the 256-dim
        // pairs, nor fp8 staged at 192/128), else the portable kernel.
        if ((a->qkv_dtype != AITER_MLA_F16 || common) && mma::pf_layout(a->dqk, a->dv, fp8 && common).total <= smem_optin())
            return AITER_MLA_KERNEL_MMA;
    }
#endif
    (void)aligned;
    return AITER_MLA_KERNEL_PORTABLE;
}

extern "C" int aiter_mla__launch_prefill(const aiter_mla_prefill_args *a, aiter_mla_kernel *kernel, void *stream) {
    const aiter_mla_kernel k = prefill_kernel_of(a);
    if (kernel) {
        *kernel = k;
        return 0;
    }
    hipStream_t s = (hipStream_t)stream;
    const bool fp8 = is_e4m3(a->qkv_dtype);
    PrefillParams p;
    p.a = *a;
    p.score_scale = a->sm_scale * (fp8 ? a->q_scale * a->k_scale : 1.0f) * kLog2e;
    p.v_scale = fp8 ? a->v_scale : 1.0f;
    p.work_indptr = p.work_info = nullptr;
    p.part_o = p.part_lse = nullptr;
    p.max_work = p.max_partial_rows = 0;
    p.o_rows16 = o_rows16(a->o, a->o_dtype, a->o_stride_token, a->o_stride_head);
    p.units = dim3(0, 0, 0);
    p.resident_blocks = 0; // launch_prefill_wgmma may set both
    const aiter_mla_prefill_plan_info *info = a->plan ? a->plan_info : nullptr;
    if (info) {
        p.work_indptr = a->plan + info->off_work_indptr;
        p.work_info = a->plan + info->off_work_info;
        p.max_work = info->max_work;
        p.max_partial_rows = info->max_partial_rows;
        p.part_o = (float *)a->workspace;
        p.part_lse = p.part_o ? p.part_o + (int64_t)info->max_partial_rows * a->num_heads * a->dv : nullptr;
    }
    const bool launched = k != AITER_MLA_KERNEL_PORTABLE;
    [[maybe_unused]] const bool p192 = a->dqk == 192 && a->dv == 128, p128 = a->dqk == 128 && a->dv == 128;
#if defined(AITER_MLA_HAS_MFMA)
    if (launched) {
        switch (a->qkv_dtype) {
        case AITER_MLA_BF16: p192 ? launch_prefill_mfma<AITER_MLA_BF16, 192, 128>(s, p) : launch_prefill_mfma<AITER_MLA_BF16, 128, 128>(s, p); break;
        case AITER_MLA_F16: p192 ? launch_prefill_mfma<AITER_MLA_F16, 192, 128>(s, p) : launch_prefill_mfma<AITER_MLA_F16, 128, 128>(s, p); break;
        case AITER_MLA_FP8_E4M3FN:
            p192 ? launch_prefill_mfma<AITER_MLA_FP8_E4M3FN, 192, 128>(s, p) : launch_prefill_mfma<AITER_MLA_FP8_E4M3FN, 128, 128>(s, p);
            break;
        default:
            p192 ? launch_prefill_mfma<AITER_MLA_FP8_E4M3FNUZ, 192, 128>(s, p) : launch_prefill_mfma<AITER_MLA_FP8_E4M3FNUZ, 128, 128>(s, p);
            break;
        }
    }
#elif defined(AITER_MLA_HAS_MMA)
    if (launched) {
        const bool f16 = a->qkv_dtype == AITER_MLA_F16;
        hipError_t e = hipSuccess;
#ifdef AITER_MLA_HAS_WGMMA
        if (k == AITER_MLA_KERNEL_WGMMA) {
            if (!fp8 && p192) e = f16 ? launch_prefill_wgmma<192, 128, true>(s, p) : launch_prefill_wgmma<192, 128, false>(s, p);
            else if (!fp8) e = f16 ? launch_prefill_wgmma<128, 128, true>(s, p) : launch_prefill_wgmma<128, 128, false>(s, p);
            else if (p192) e = launch_prefill_wgmma<192, 128, true, true>(s, p);
            else e = launch_prefill_wgmma<128, 128, true, true>(s, p);
        } else
#endif
        if (fp8 && p192) e = launch_prefill_mma<192, 128, true, true>(s, p);
        else if (fp8 && p128) e = launch_prefill_mma<128, 128, true, true>(s, p);
        else if (!f16) e = launch_prefill_mma_bf16(s, p);
        else if (p192) e = launch_prefill_mma<192, 128, true>(s, p);
        else e = launch_prefill_mma<128, 128, true>(s, p);
        if (e != hipSuccess) return (int)e;
    }
#endif
    if (!launched) {
        const dim3 grid = prefill_grid(a, kPfRows);
        switch (a->qkv_dtype) {
        case AITER_MLA_BF16: prefill_kernel<AITER_MLA_BF16><<<grid, kPfThreads, 0, s>>>(p); break;
        case AITER_MLA_F16: prefill_kernel<AITER_MLA_F16><<<grid, kPfThreads, 0, s>>>(p); break;
        case AITER_MLA_FP8_E4M3FN: prefill_kernel<AITER_MLA_FP8_E4M3FN><<<grid, kPfThreads, 0, s>>>(p); break;
        case AITER_MLA_FP8_E4M3FNUZ: prefill_kernel<AITER_MLA_FP8_E4M3FNUZ><<<grid, kPfThreads, 0, s>>>(p); break;
        default: return (int)hipErrorInvalidValue;
        }
    }
    hipError_t e = hipGetLastError();
    if (e != hipSuccess || !info || info->max_partials == 0) return (int)e;
    ReduceParams r{};
    r.part_o = p.part_o;
    r.part_lse = p.part_lse;
    r.o = a->o;
    r.o_stride_token = a->o_stride_token;
    r.o_stride_head = a->o_stride_head;
    r.lse = a->lse;
    r.lse_stride_token = 1;
    r.lse_stride_head = 0;
    r.lse_head_stride_at = r.o_rows_at = a->cu_seqlens_q + a->batch; // lse [H, Tq], Tq on the device
    r.empty_lse = -HUGE_VALF;
    r.num_heads = a->num_heads;
    r.dv = a->dv;
    r.o_dtype = a->o_dtype;
    return (int)launch_plan_reduce(s, r, a->plan, info->off_reduce_indptr, info->off_reduce_final_map, info->off_reduce_partial_map,
                                   info->max_tiles, info->desc.tile_q, info->max_partials, info->max_partial_rows, false);
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

// Row groups of heads of the sparse and V4 blocks on the matrix units: 16 rows up to 16 heads,
// else 64 (the portable kernel's blocks take 64).
static int sparse_rows_per_block(int H) { return H <= 16 ? 16 : 64; }

// The sparse attention kernel for these arguments: the matrix units' for a bf16 q in 16-byte
// aligned rows, else the portable kernel.
static aiter_mla_kernel sparse_kernel_of(const aiter_mla_sparse_args *a) {
#if defined(AITER_MLA_HAS_MFMA)
    if (a->q_dtype == AITER_MLA_BF16 && mfma_q_rows(a->q, a->q_dtype, (int64_t)a->num_heads * kD, kD)) return AITER_MLA_KERNEL_MFMA;
#elif defined(AITER_MLA_HAS_MMA)
    if (a->q_dtype == AITER_MLA_BF16 && ((uintptr_t)a->q & 15) == 0 && mma_runs()) return mma_kernel_of(sparse_rows_per_block(a->num_heads));
#endif
    (void)a;
    return AITER_MLA_KERNEL_PORTABLE;
}

// The parameters that the launches without a plan (sparse attention, V4; their argument
// structs name these fields alike) fill the same way: a query row a token and head, a page a
// key, no fp8 factors. The caller adds the strides, the keys and its mode's fields.
template <typename Args> static DecodeParams token_params(const Args *a) {
    DecodeParams p{};
    aiter_mla_decode_args &d = p.a;
    d.q = a->q;
    d.o = a->o;
    d.lse = a->lse;
    d.num_heads = a->num_heads;
    d.q_dtype = a->q_dtype;
    d.o_dtype = a->o_dtype;
    d.sm_scale = a->sm_scale;
    d.page_size = 1;
    p.score_scale = a->sm_scale * kLog2e;
    p.v_scale = 1.0f;
    p.sparse = 1;
    p.tokens = a->num_tokens;
    p.attn_sink = a->attn_sink;
    p.keys_read_once = a->keys_read_once;
    return p;
}
// A launch without a plan (sparse attention, V4): grid (token, row group of heads, split of
// the keys), p.rows_per_block set for the kernel k.
static dim3 token_grid(aiter_mla_kernel k, DecodeParams &p, unsigned splits) {
    const int H = p.a.num_heads;
    p.rows_per_block = k != AITER_MLA_KERNEL_PORTABLE ? sparse_rows_per_block(H) : 64;
    return dim3(token_blocks(p.tokens), (unsigned)((H + p.rows_per_block - 1) / p.rows_per_block), splits);
}
// ... and its kernel: k's instance for cache format KVT, or the portable kernel's for
// kPortableKVT (V4's portable instance takes any mix of formats).
template <int KVT, int kPortableKVT = KVT>
static hipError_t launch_tokens(aiter_mla_kernel k, dim3 grid, hipStream_t s, const DecodeParams &p, [[maybe_unused]] int num_cu) {
    if (k == AITER_MLA_KERNEL_PORTABLE) {
        decode_kernel<kPortableKVT><<<grid, kThreads, 0, s>>>(p);
    } else {
#if defined(AITER_MLA_HAS_MFMA)
        launch_mfma<KVT, AITER_MLA_BF16>(grid, s, p, p.rows_per_block);
#elif defined(AITER_MLA_HAS_MMA)
        const hipError_t e = launch_mma<KVT>(grid, s, p, p.rows_per_block, num_cu);
        if (e != hipSuccess) return e;
#endif
    }
    return hipGetLastError();
}

// Sparse attention: the decode kernels without a plan (grid: token x row group of heads).
extern "C" int aiter_mla__launch_sparse(const aiter_mla_sparse_args *a, aiter_mla_kernel *kernel, void *stream) {
    const aiter_mla_kernel k = sparse_kernel_of(a);
    if (kernel) {
        *kernel = k;
        return 0;
    }
    hipStream_t s = (hipStream_t)stream;
    const int H = a->num_heads;
    DecodeParams p = token_params(a);
    aiter_mla_decode_args &d = p.a;
    d.q_stride_token = (int64_t)H * kD;
    d.q_stride_head = kD;
    d.kv_cache = a->kv_cache;
    d.num_pages = a->num_slots; // a page is one slot
    d.kv_indices = a->indices;
    d.o_stride_token = (int64_t)H * kL;
    d.o_stride_head = kL;
    p.topk = a->topk;
    p.indices_stride = (int)a->indices_stride;
    p.topk_length = a->topk_length;
    p.max_logits = a->max_logits;
    const int kvt = !a->cache_is_ds_mla ? (int)AITER_MLA_BF16 : a->ds_mla_fp8 == AITER_MLA_FP8_E4M3FNUZ ? kDsMlaFnuz : kDsMlaFn;
    const dim3 grid = token_grid(k, p, 1);
    if (kvt == AITER_MLA_BF16) return (int)launch_tokens<AITER_MLA_BF16>(k, grid, s, p, a->num_cu);
    if (kvt == kDsMlaFn) return (int)launch_tokens<kDsMlaFn>(k, grid, s, p, a->num_cu);
    return (int)launch_tokens<kDsMlaFnuz>(k, grid, s, p, a->num_cu);
}

// The V4 attention kernel for these arguments: the matrix units' for a bf16 q in 16-byte rows
// over two lists of MODEL1 pages or two of bf16 rows (16-byte aligned), else the portable
// kernel (any mix of formats).
static aiter_mla_kernel v4_kernel_of(const aiter_mla_v4_attention_args *a) {
#if defined(AITER_MLA_HAS_MFMA) || defined(AITER_MLA_HAS_MMA)
    const aiter_mla_v4_keys *k1 = a->extra_keys.indices ? &a->extra_keys : &a->keys;
    auto bf16_rows = [](const aiter_mla_v4_keys *k) { return k->rows && k->dtype == AITER_MLA_BF16 && aligned16(k->cache); };
    const bool q_ok = a->q_dtype == AITER_MLA_BF16 && aligned16(a->q) && a->q_stride_token % 8 == 0 && a->q_stride_head % 8 == 0;
#endif
#if defined(AITER_MLA_HAS_MFMA)
    auto model1 = [](const aiter_mla_v4_keys *k) { return !k->rows && aligned16(k->cache) && k->page_stride_bytes % 16 == 0; };
    if (q_ok && ((model1(&a->keys) && model1(k1)) || (bf16_rows(&a->keys) && bf16_rows(k1)))) return AITER_MLA_KERNEL_MFMA;
#elif defined(AITER_MLA_HAS_MMA)
    // (the scale bytes are copied 16 at a time: an odd block size needs 8 bytes of page padding)
    auto model1 = [](const aiter_mla_v4_keys *k) {
        return !k->rows && aligned16(k->cache) && k->page_stride_bytes % 16 == 0 &&
               (k->block_size % 2 == 0 || k->page_stride_bytes >= (int64_t)k->block_size * AITER_MLA_V4_TOKEN_BYTES + 8);
    };
    if (q_ok && ((model1(&a->keys) && model1(k1)) || (bf16_rows(&a->keys) && bf16_rows(k1))) && mma_runs())
        return mma_kernel_of(sparse_rows_per_block(a->num_heads));
#endif
    (void)a;
    return AITER_MLA_KERNEL_PORTABLE;
}

// V4 attention: the sparse mode of the decode kernels over two key lists.
extern "C" int aiter_mla__launch_v4_attention(const aiter_mla_v4_attention_args *a, aiter_mla_kernel *kernel, void *stream) {
    const aiter_mla_kernel k = v4_kernel_of(a);
    if (kernel) {
        *kernel = k;
#ifdef AITER_MLA_HAS_WGMMA
        if (k == AITER_MLA_KERNEL_MMA16 && v4_takes_bulk16(sparse_rows_per_block(a->num_heads), max(a->num_splits, 1), a->keys, a->extra_keys))
            *kernel = AITER_MLA_KERNEL_BULK16; // launch_mma's pick
#endif
        return 0;
    }
    hipStream_t s = (hipStream_t)stream;
    const int H = a->num_heads;
    DecodeParams p = token_params(a);
    aiter_mla_decode_args &d = p.a;
    d.q_stride_token = a->q_stride_token;
    d.q_stride_head = a->q_stride_head;
    d.o_stride_token = a->o_stride_token;
    d.o_stride_head = a->o_stride_head;
    p.v4 = 1;
    p.keys_shared = a->keys_shared;
    p.v4_keys[0] = a->keys;
    p.v4_keys[1] = a->extra_keys;
    p.v4_splits = a->num_splits > 1 ? a->num_splits : 1;
    if (p.v4_splits > 1) {
        p.part_o = (float *)a->workspace;
        p.part_lse = p.part_o + a->num_tokens * p.v4_splits * H * kL;
    }
    const dim3 grid = token_grid(k, p, (unsigned)p.v4_splits);
    const hipError_t e = a->keys.rows ? launch_tokens<kV4Bf16, kV4Any>(k, grid, s, p, a->num_cu)
                                      : launch_tokens<kV4Model1, kV4Any>(k, grid, s, p, a->num_cu);
    if (e != hipSuccess || p.v4_splits == 1) return (int)e;
    ReduceParams r = token_reduce_params(p); // the splits' partials merged by their lse, then the sink
    r.uniform_splits = p.v4_splits;
    r.uniform_tiles = a->num_tokens;
    r.rows_per_tile = 1;
    return (int)launch_reduce(s, r, a->num_tokens * H, false);
}

extern "C" int aiter_mla__launch_head_pad(const aiter_mla_head_pad_args *a, int unpad, void *stream) {
    hipStream_t s = (hipStream_t)stream;
    const int hp = aiter_mla__padded_heads(a->num_heads), rep = hp / a->num_heads;
    const int src_h = unpad ? hp : a->num_heads, dst_h = unpad ? a->num_heads : hp;
    const int64_t total = a->num_tokens * dst_h * a->head_dim;
    const int blocks = (int)min((int64_t)kMaxGrid, (total + 255) / 256);
    switch (aiter_mla__dtype_bytes(a->dtype)) {
    case 1: head_pad_kernel<<<blocks, 256, 0, s>>>((const uint8_t *)a->src, (uint8_t *)a->dst, total, dst_h, src_h, a->head_dim, rep, unpad); break;
    case 2: head_pad_kernel<<<blocks, 256, 0, s>>>((const uint16_t *)a->src, (uint16_t *)a->dst, total, dst_h, src_h, a->head_dim, rep, unpad); break;
    default: head_pad_kernel<<<blocks, 256, 0, s>>>((const uint32_t *)a->src, (uint32_t *)a->dst, total, dst_h, src_h, a->head_dim, rep, unpad); break;
    }
    AITER_MLA__LAUNCH_CHECK();
}

extern "C" int aiter_mla__launch_expand_page_indices(const aiter_mla_expand_page_indices_args *a, void *stream) {
    expand_page_indices_kernel<<<min(a->batch, kMaxGrid), 256, 0, (hipStream_t)stream>>>(*a);
    AITER_MLA__LAUNCH_CHECK();
}

extern "C" int aiter_mla__launch_kv_cache_write(const aiter_mla_kv_cache_write_args *a, void *stream) {
    kv_cache_write_kernel<<<(unsigned)min(a->num_tokens, (int64_t)kMaxGrid), 192, 0, (hipStream_t)stream>>>(*a);
    AITER_MLA__LAUNCH_CHECK();
}

// Threads of an index row of `units` units: a full batch for each thread where the row has them.
static int index_threads_per_row(int64_t units) { return threads_per_row((units + kIndexBatch - 1) / kIndexBatch); }
// The sparse conversion's rows take at most 32 lanes, inside one warp on every target (warps
// of 32 or 64), so that their valid counts need no shared memory and no block barrier; a
// long row loops over its batches instead.
constexpr int kIndexRowLanes = 32;

extern "C" int aiter_mla__launch_convert_sparse_indices(const aiter_mla_sparse_index_args *a, void *stream) {
    hipStream_t s = (hipStream_t)stream;
    const bool vec = aligned16(a->indices) && aligned16(a->out) && a->indices_stride % 4 == 0 && a->out_stride % 4 == 0;
    const int tpr = min(index_threads_per_row(vec ? (a->topk + 3) / 4 : a->topk), kIndexRowLanes);
    const unsigned grid = grid_for(a->num_tokens, kSmallThreads / tpr);
    const bool bs64 = a->block_table && a->block_size == 64;
    if (vec && bs64) sparse_indices_kernel<true, 64><<<grid, kSmallThreads, 0, s>>>(*a, tpr);
    else if (vec) sparse_indices_kernel<true, 0><<<grid, kSmallThreads, 0, s>>>(*a, tpr);
    else if (bs64) sparse_indices_kernel<false, 64><<<grid, kSmallThreads, 0, s>>>(*a, tpr);
    else sparse_indices_kernel<false, 0><<<grid, kSmallThreads, 0, s>>>(*a, tpr);
    AITER_MLA__LAUNCH_CHECK();
}

extern "C" int aiter_mla__launch_filter_prefill_indices(const aiter_mla_filter_prefill_args *a, void *stream) {
    hipStream_t s = (hipStream_t)stream;
    const bool vec = aligned16(a->indices) && aligned16(a->context_out) && aligned16(a->new_out) && a->topk % 4 == 0;
    const int tpr = index_threads_per_row(vec ? a->topk / 4 : a->topk);
    const unsigned grid = grid_for(a->num_tokens, kSmallThreads / tpr);
    if (vec) filter_prefill_kernel<true><<<grid, kSmallThreads, 0, s>>>(*a, tpr);
    else filter_prefill_kernel<false><<<grid, kSmallThreads, 0, s>>>(*a, tpr);
    AITER_MLA__LAUNCH_CHECK();
}

extern "C" int aiter_mla__launch_ds_mla_write(const aiter_mla_ds_mla_write_args *a, void *stream) {
    hipStream_t s = (hipStream_t)stream;
    const bool vec = aligned16(a->kv_c) && aligned16(a->k_pe) && aligned16(a->kv_cache) && a->kv_c_stride % 8 == 0 &&
                     a->k_pe_stride % 8 == 0;
    const unsigned grid = grid_for(a->num_tokens, kDsTokens * kDsBatch);
    const bool bf16 = a->src_dtype == AITER_MLA_BF16;
    if (vec && bf16) ds_mla_write_kernel<AITER_MLA_BF16, true><<<grid, kSmallThreads, 0, s>>>(*a);
    else if (vec) ds_mla_write_kernel<AITER_MLA_F16, true><<<grid, kSmallThreads, 0, s>>>(*a);
    else if (bf16) ds_mla_write_kernel<AITER_MLA_BF16, false><<<grid, kSmallThreads, 0, s>>>(*a);
    else ds_mla_write_kernel<AITER_MLA_F16, false><<<grid, kSmallThreads, 0, s>>>(*a);
    AITER_MLA__LAUNCH_CHECK();
}

template <int CACHE, bool DS>
static void launch_gather_out(const aiter_mla_gather_cache_args &a, unsigned grid, hipStream_t s) {
    switch (a.out_dtype) {
    case AITER_MLA_BF16: gather_cache_kernel<CACHE, AITER_MLA_BF16, DS><<<grid, kSmallThreads, 0, s>>>(a); break;
    case AITER_MLA_F16: gather_cache_kernel<CACHE, AITER_MLA_F16, DS><<<grid, kSmallThreads, 0, s>>>(a); break;
    default: gather_cache_kernel<CACHE, AITER_MLA_F32, DS><<<grid, kSmallThreads, 0, s>>>(a); break;
    }
}

extern "C" int aiter_mla__launch_gather_cache(const aiter_mla_gather_cache_args *a, void *stream) {
    hipStream_t s = (hipStream_t)stream;
    const unsigned grid = grid_for(a->out_rows, kGatherRows);
    const aiter_mla_dtype src = a->cache_is_ds_mla ? a->ds_mla_fp8 : a->cache_dtype;
    if (!aligned16(a->kv_cache) || !aligned16(a->out)) { // rows are multiples of 16 bytes: the bases decide
        gather_cache_kernel<0, 0, false><<<grid, kSmallThreads, 0, s>>>(*a);
    } else if (a->cache_is_ds_mla) {
        if (src == AITER_MLA_FP8_E4M3FN) launch_gather_out<AITER_MLA_FP8_E4M3FN, true>(*a, grid, s);
        else launch_gather_out<AITER_MLA_FP8_E4M3FNUZ, true>(*a, grid, s);
    } else {
        switch (src) {
        case AITER_MLA_BF16: launch_gather_out<AITER_MLA_BF16, false>(*a, grid, s); break;
        case AITER_MLA_F16: launch_gather_out<AITER_MLA_F16, false>(*a, grid, s); break;
        case AITER_MLA_FP8_E4M3FN: launch_gather_out<AITER_MLA_FP8_E4M3FN, false>(*a, grid, s); break;
        default: launch_gather_out<AITER_MLA_FP8_E4M3FNUZ, false>(*a, grid, s); break;
        }
    }
    AITER_MLA__LAUNCH_CHECK();
}

template <int DT>
static void launch_merge_dtype(const aiter_mla_merge_args &a, hipStream_t s) {
    constexpr int N = 16 / dtype_bytes(DT);
    const bool vec = aligned16(a.o_prefix) && aligned16(a.o_suffix) && aligned16(a.o) && a.head_dim % N == 0;
    const int tpr = threads_per_row(vec ? a.head_dim / N : a.head_dim);
    const unsigned grid = grid_for(a.num_tokens * a.num_heads, kSmallThreads / tpr);
    if (vec) merge_kernel<DT, true><<<grid, kSmallThreads, 0, s>>>(a, tpr);
    else merge_kernel<DT, false><<<grid, kSmallThreads, 0, s>>>(a, tpr);
}

extern "C" int aiter_mla__launch_merge_attn_states(const aiter_mla_merge_args *a, void *stream) {
    hipStream_t s = (hipStream_t)stream;
    switch (a->dtype) {
    case AITER_MLA_BF16: launch_merge_dtype<AITER_MLA_BF16>(*a, s); break;
    case AITER_MLA_F16: launch_merge_dtype<AITER_MLA_F16>(*a, s); break;
    default: launch_merge_dtype<AITER_MLA_F32>(*a, s); break;
    }
    AITER_MLA__LAUNCH_CHECK();
}

extern "C" int aiter_mla__launch_v4_cache_write(const aiter_mla_v4_cache_write_args *a, void *stream) {
    hipStream_t s = (hipStream_t)stream;
    const bool vec = aligned16(a->kv) && aligned16(a->kv_cache) && a->kv_stride % 8 == 0 && a->page_stride_bytes % 16 == 0;
    const unsigned grid = grid_for(a->num_tokens, kV4Rows);
    const bool bf16 = a->src_dtype == AITER_MLA_BF16;
    if (vec && bf16) v4_cache_write_kernel<AITER_MLA_BF16, true><<<grid, kSmallThreads, 0, s>>>(*a);
    else if (vec) v4_cache_write_kernel<AITER_MLA_F16, true><<<grid, kSmallThreads, 0, s>>>(*a);
    else if (bf16) v4_cache_write_kernel<AITER_MLA_BF16, false><<<grid, kSmallThreads, 0, s>>>(*a);
    else v4_cache_write_kernel<AITER_MLA_F16, false><<<grid, kSmallThreads, 0, s>>>(*a);
    AITER_MLA__LAUNCH_CHECK();
}

template <bool kVec>
static void launch_v4_gather_out(const aiter_mla_v4_gather_args &a, unsigned grid, hipStream_t s) {
    switch (a.out_dtype) {
    case AITER_MLA_BF16: v4_gather_kernel<AITER_MLA_BF16, kVec><<<grid, kSmallThreads, 0, s>>>(a); break;
    case AITER_MLA_F16: v4_gather_kernel<AITER_MLA_F16, kVec><<<grid, kSmallThreads, 0, s>>>(a); break;
    default: v4_gather_kernel<AITER_MLA_F32, kVec><<<grid, kSmallThreads, 0, s>>>(a); break;
    }
}

extern "C" int aiter_mla__launch_v4_gather(const aiter_mla_v4_gather_args *a, void *stream) {
    hipStream_t s = (hipStream_t)stream;
    const unsigned grid = grid_for((int64_t)a->batch * (a->out_rows - a->offset), kV4Rows);
    if (aligned16(a->kv_cache) && aligned16(a->out) && a->page_stride_bytes % 16 == 0) launch_v4_gather_out<true>(*a, grid, s);
    else launch_v4_gather_out<false>(*a, grid, s);
    AITER_MLA__LAUNCH_CHECK();
}

// The builders' launches: rows (dense, lens, lengths), then for a ragged output the scan and
// the entries. rows_hint sizes the grids (the grids loop, so any size is correct).
template <class B>
static void launch_v4_lists(const B &b, int width, int64_t rows_hint, hipStream_t s) {
    const aiter_mla_v4_index_out &o = b.a.out;
    const bool vec = o.dense && aligned16(o.dense) && o.dense_stride % 4 == 0;
    const int tpr = o.dense ? threads_per_row(vec ? (width + 3) / 4 : width) : 1, etpr = threads_per_row(width);
    rows_hint = max(rows_hint, (int64_t)1);
    if (vec) v4_rows_kernel<B, true><<<grid_for(rows_hint, kSmallThreads / tpr), kSmallThreads, 0, s>>>(b, width, tpr);
    else v4_rows_kernel<B, false><<<grid_for(rows_hint, kSmallThreads / tpr), kSmallThreads, 0, s>>>(b, width, tpr);
    if (o.indptr) {
        v4_scan_kernel<<<1, kScanThreads, 0, s>>>(V4Lens<B>{b});
        v4_emit_kernel<B><<<grid_for(rows_hint, kSmallThreads / etpr), kSmallThreads, 0, s>>>(b, etpr);
    }
}

extern "C" int aiter_mla__launch_v4_swa_indices(const aiter_mla_v4_swa_index_args *a, void *stream) {
    launch_v4_lists(V4Swa{*a}, a->window, a->num_tokens, (hipStream_t)stream);
    AITER_MLA__LAUNCH_CHECK();
}

extern "C" int aiter_mla__launch_v4_c128_indices(const aiter_mla_v4_c128_args *a, void *stream) {
    launch_v4_lists(V4C128{*a}, a->width, a->num_tokens, (hipStream_t)stream);
    AITER_MLA__LAUNCH_CHECK();
}

extern "C" int aiter_mla__launch_v4_combine(const aiter_mla_v4_combine_args *a, void *stream) {
    // valid data has q_len <= gather_len <= M - N per request: at most num_reqs * (M - N) rows
    launch_v4_lists(V4Combine{*a}, a->topk + a->window, (int64_t)a->num_reqs * (a->M - a->N), (hipStream_t)stream);
    AITER_MLA__LAUNCH_CHECK();
}

extern "C" int aiter_mla__launch_v4_global_topk(const aiter_mla_v4_topk_args *a, void *stream) {
    hipStream_t s = (hipStream_t)stream;
    const unsigned grid = grid_for(max(a->num_tokens, (int64_t)1), kSmallThreads / AITER_MLA_WARP_SIZE);
    v4_topk_kernel<false><<<grid, kSmallThreads, 0, s>>>(*a);
    if (a->out.indptr) {
        v4_scan_kernel<<<1, kScanThreads, 0, s>>>(V4Lens<V4Topk>{V4Topk{*a}});
        v4_topk_kernel<true><<<grid, kSmallThreads, 0, s>>>(*a);
    }
    AITER_MLA__LAUNCH_CHECK();
}

extern "C" int aiter_mla__launch_v4_prefill_lens(const int32_t *query_start_loc, const int32_t *seq_lens, int num_reqs,
                                                 int32_t tokens, int window, int compress_ratio, int32_t *chunk_qsl,
                                                 int32_t *gather_lens, int32_t *compressed_lens, void *stream) {
    v4_prefill_lens_kernel<<<grid_for((int64_t)num_reqs + 1, kSmallThreads), kSmallThreads, 0, (hipStream_t)stream>>>(
        query_start_loc, seq_lens, num_reqs, tokens, window, compress_ratio, chunk_qsl, gather_lens, compressed_lens);
    AITER_MLA__LAUNCH_CHECK();
}

extern "C" int aiter_mla__launch_v4_copy_ragged(const aiter_mla_v4_ragged_copy_args *a, void *stream) {
    hipStream_t s = (hipStream_t)stream;
    const int tpr = threads_per_row(a->max_entries_per_row);
    v4_scan_kernel<<<1, kScanThreads, 0, s>>>(V4CopyLens{*a});
    v4_copy_kernel<<<grid_for(max(a->num_rows, (int64_t)1), kSmallThreads / tpr), kSmallThreads, 0, s>>>(*a, tpr);
    AITER_MLA__LAUNCH_CHECK();
}
