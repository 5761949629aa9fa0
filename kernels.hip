// kernels.hip - the GPU kernels of aiter_mla and their extern "C" launchers.
//
// Build:  hipcc --offload-arch=gfx942 -c kernels.hip            (AMD; gfx90a, gfx940, gfx950 too)
//         nvcc -x cu -gencode=arch=compute_90a,code=sm_90a -c kernels.hip   (NVIDIA)
// Link the object with the program that defines AITER_MLA_IMPLEMENTATION. Launchers never
// synchronise or allocate; they return the native error code (0 = success) and the
// wrappers in aiter_mla.h turn it into a status.

// ---- portability: write HIP, map to CUDA under nvcc ---------------------------------------
#if defined(__CUDACC__) && !defined(__HIP_PLATFORM_AMD__)
#include <cuda_runtime.h>
typedef cudaStream_t hipStream_t;
typedef cudaError_t hipError_t;
#define hipSuccess cudaSuccess
#define hipGetLastError cudaGetLastError
#define hipGetErrorString cudaGetErrorString
#define hipErrorInvalidValue cudaErrorInvalidValue
#define AITER_MLA_WARP_SIZE 32
#define aiter_mla__shfl_xor(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#else
#include <hip/hip_runtime.h>
#if defined(__AMDGCN_WAVEFRONT_SIZE)
#define AITER_MLA_WARP_SIZE __AMDGCN_WAVEFRONT_SIZE
#else
#define AITER_MLA_WARP_SIZE 64 // gfx9 (MI200, MI300, MI350) run 64-lane wavefronts
#endif
#define aiter_mla__shfl_xor(v, m) __shfl_xor((v), (m))
#endif

#include <stdint.h>
#include "aiter_mla.h"

#define AITER_MLA__LAUNCH_CHECK() return (int)hipGetLastError()

namespace {

constexpr int kD = AITER_MLA_HEAD_DIM;  // 576: q row, cache row
constexpr int kL = AITER_MLA_LATENT_DIM; // 512: V and o
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }
__device__ __forceinline__ float pos_inf() { return __int_as_float(0x7f800000); }

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
    const int32_t *work_indptr; // [num_cu + 1]
    const int32_t *work_info;   // [max_work, 8]
    float *part_o;              // [max_partial_rows, H, 512]
    float *part_lse;            // [max_partial_rows, H]
    float score_scale;          // sm_scale * q_scale * kv_scale * log2(e), fp8 scales only
    float v_scale;              // kv_scale for fp8 caches, else 1
};

template <int KVT>
__device__ __forceinline__ float kv_elem(const unsigned char *tile, int i) {
    return aiter_mla_load_f32(tile, i, (aiter_mla_dtype)KVT);
}

template <int KVT>
__global__ void __launch_bounds__(kThreads) decode_kernel(DecodeParams p) {
    constexpr int kElem = (KVT == AITER_MLA_BF16 || KVT == AITER_MLA_F16) ? 2 : 1;
    constexpr int kChunks = kD * kElem / 16; // 16-byte chunks per cache row
    __shared__ float q_s[kRows][kD];
    __shared__ __align__(16) unsigned char k_s[kKeys * kD * kElem];
    __shared__ float s_s[kRows][kKeys];
    __shared__ float alpha_s[kRows], m_s[kRows], l_s[kRows];
    __shared__ long long lim_s[kRows];
    __shared__ int page_s[kKeys];

    const aiter_mla_decode_args &a = p.a;
    const int tid = threadIdx.x, H = a.num_heads, P = a.page_size;
    const int w_end = p.work_indptr[blockIdx.x + 1];
    for (int w = p.work_indptr[blockIdx.x]; w < w_end; w++) {
        const int32_t *wi = p.work_info + (int64_t)w * AITER_MLA_WORK_INTS;
        const int b = wi[0], loc = wi[1], qs = wi[2], qe = wi[3], ks = wi[4], ke = wi[5], off = wi[6];
        const int q_begin = a.qo_indptr[b], q_len = a.qo_indptr[b + 1] - q_begin;
        const int pages = a.kv_indptr[b + 1] - a.kv_indptr[b];
        const int last = min(max(a.kv_last_page_lens[b], 1), P);
        const int64_t kv_len = aiter_mla__kv_len(pages, last, P);
        const int64_t tok0 = (int64_t)(ks - a.kv_indptr[b]) * P;
        // keys of this piece; never more than its pages hold, whatever the metadata says
        const int64_t n = max((int64_t)0, min(kv_len - off - tok0, (int64_t)(ke - ks) * P));
        const int rows_total = (qe - qs) * H;

        for (int r0 = 0; r0 < rows_total; r0 += kRows) {
            const int nr = min(kRows, rows_total - r0);
            for (int idx = tid; idx < nr * kD; idx += kThreads) {
                const int r = idx / kD, d = idx - r * kD, row = r0 + r;
                const int64_t tok = qs + row / H, h = row % H;
                q_s[r][d] = aiter_mla_load_f32(a.q, tok * a.q_stride_token + h * a.q_stride_head + d, a.q_dtype);
            }
            if (tid < kRows) {
                const int row = r0 + tid, i = qs + row / H - q_begin;
                lim_s[tid] = kv_len - q_len + i; // last visible key of the row (causal, bottom-right)
                m_s[tid] = neg_inf();
                l_s[tid] = 0.0f;
            }
            float acc[kRows][kDimsPerThread];
#pragma unroll
            for (int r = 0; r < kRows; r++)
#pragma unroll
                for (int j = 0; j < kDimsPerThread; j++) acc[r][j] = 0.0f;
            __syncthreads();

            for (int64_t k0 = 0; k0 < n; k0 += kKeys) {
                const int nk = (int)min((int64_t)kKeys, n - k0);
                if (tid < kKeys) {
                    int page = -1;
                    if (tid < nk) {
                        page = a.kv_indices[ks + (k0 + tid) / P];
                        if (page < 0 || page >= a.num_pages) page = -1; // absent key
                    }
                    page_s[tid] = page;
                }
                __syncthreads();
                for (int c = tid; c < kKeys * kChunks; c += kThreads) {
                    const int key = c / kChunks, part = c - key * kChunks, page = page_s[key];
                    uint4 v = make_uint4(0u, 0u, 0u, 0u);
                    if (page >= 0) {
                        const int64_t slot = (int64_t)page * P + (tok0 + k0 + key) % P;
                        v = reinterpret_cast<const uint4 *>(static_cast<const unsigned char *>(a.kv_cache) +
                                                            slot * (kD * kElem))[part];
                    }
                    reinterpret_cast<uint4 *>(k_s)[c] = v;
                }
                __syncthreads();
                { // scores: two threads per (row, key), each half of the 576 dims
                    const int pair = tid >> 1, half = tid & 1, r = pair / kKeys, c = pair % kKeys;
                    float s = 0.0f;
                    for (int d = half; d < kD; d += 2) s += q_s[r][d] * kv_elem<KVT>(k_s, c * kD + d);
                    s += aiter_mla__shfl_xor(s, 1);
                    if (half == 0) {
                        const bool ok = r < nr && c < nk && page_s[c] >= 0 && tok0 + k0 + c <= lim_s[r];
                        s_s[r][c] = ok ? s * p.score_scale : neg_inf();
                    }
                }
                __syncthreads();
                if (tid < kRows) { // online softmax, one thread per row
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
                    for (int j = 0; j < kDimsPerThread; j++) v[c][j] = kv_elem<KVT>(k_s, c * kD + tid + j * kThreads) * p.v_scale;
#pragma unroll
                for (int r = 0; r < kRows; r++)
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
            for (int r = 0; r < kRows; r++) {
                if (r < nr) {
                    const int row = r0 + r;
                    const int64_t tok = qs + row / H, h = row % H;
                    const float l = l_s[r], inv = l > 0.0f ? 1.0f / l : 0.0f;
                    const float lse = l > 0.0f ? (m_s[r] + log2f(l)) * kLn2 : (loc < 0 ? pos_inf() : neg_inf());
                    if (loc < 0) {
#pragma unroll
                        for (int j = 0; j < kDimsPerThread; j++)
                            aiter_mla_store_f32(a.o, tok * a.o_stride_token + h * a.o_stride_head + tid + j * kThreads,
                                                a.o_dtype, acc[r][j] * inv);
                        if (tid == 0 && a.lse) a.lse[tok * H + h] = lse;
                    } else {
                        const int64_t pr = (int64_t)(loc + tok - qs) * H + h;
#pragma unroll
                        for (int j = 0; j < kDimsPerThread; j++) p.part_o[pr * kL + tid + j * kThreads] = acc[r][j] * inv;
                        if (tid == 0) p.part_lse[pr] = lse;
                    }
                }
            }
            __syncthreads(); // q_s, m_s, l_s are refilled by the next row group
        }
    }
}

// ==== reduce of split pieces (SPEC 1b) =====================================================
// One block per reduce tile; one warp per (token, head) row; lanes split the dv dims.
struct ReduceParams {
    const int32_t *num_tiles; // device: the plan header's count (graph replays see new plans)
    const int32_t *indptr, *final_map, *partial_map;
    const float *part_o, *part_lse;
    void *o;
    int64_t o_stride_token, o_stride_head;
    float *lse;
    int num_heads, dv;
    aiter_mla_dtype o_dtype;
};

__global__ void __launch_bounds__(kThreads) reduce_kernel(ReduceParams p) {
    const int t = blockIdx.x;
    if (t >= *p.num_tiles) return;
    const int k0 = p.indptr[t], k1 = p.indptr[t + 1];
    if (k1 - k0 < 2) return;
    const int qs = p.final_map[2 * t], rows = (p.final_map[2 * t + 1] - qs) * p.num_heads;
    const int lane = threadIdx.x % AITER_MLA_WARP_SIZE, warp = threadIdx.x / AITER_MLA_WARP_SIZE;
    const int warps = blockDim.x / AITER_MLA_WARP_SIZE;
    for (int rh = warp; rh < rows; rh += warps) {
        const int tok = qs + rh / p.num_heads, h = rh % p.num_heads;
        float m = neg_inf();
        for (int k = k0; k < k1; k++) m = fmaxf(m, p.part_lse[(int64_t)(p.partial_map[k] + tok - qs) * p.num_heads + h]);
        float g = pos_inf(), sum = 0.0f;
        if (m != neg_inf()) {
            for (int k = k0; k < k1; k++) sum += __expf(p.part_lse[(int64_t)(p.partial_map[k] + tok - qs) * p.num_heads + h] - m);
            g = m + __logf(sum);
        }
        for (int d = lane; d < p.dv; d += AITER_MLA_WARP_SIZE) {
            float o = 0.0f;
            if (m != neg_inf())
                for (int k = k0; k < k1; k++) {
                    const int64_t pr = (int64_t)(p.partial_map[k] + tok - qs) * p.num_heads + h;
                    o += __expf(p.part_lse[pr] - g) * p.part_o[pr * p.dv + d];
                }
            aiter_mla_store_f32(p.o, tok * p.o_stride_token + h * p.o_stride_head + d, p.o_dtype, o);
        }
        if (lane == 0 && p.lse) p.lse[(int64_t)tok * p.num_heads + h] = g;
    }
}

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

__global__ void expand_page_indices_kernel(aiter_mla_expand_page_indices_args a) {
    const int r = blockIdx.x;
    const int32_t start = a.cu_num_tokens[r], n = a.seq_lens[r];
    const int32_t *row = a.block_table + (int64_t)r * a.block_table_stride;
    for (int32_t t = threadIdx.x; t < n; t += blockDim.x) {
        const int64_t i = (int64_t)start + t;
        if (i >= 0 && i < a.page_indices_capacity)
            a.page_indices[i] = aiter_mla__expand_one(row, a.block_table_stride, t, a.kernel_block_size);
    }
}

__global__ void kv_cache_write_kernel(aiter_mla_kv_cache_write_args a) {
    for (int c = threadIdx.x; c < kD; c += blockDim.x) aiter_mla__kv_write_elem(&a, blockIdx.x, c);
}

} // namespace

// ==== launchers ============================================================================
extern "C" const char *aiter_mla__native_error_string(int code) { return hipGetErrorString((hipError_t)code); }

extern "C" int aiter_mla__launch_decode(const aiter_mla_decode_args *a, const aiter_mla_decode_plan_info *info,
                                        void *stream) {
    hipStream_t s = (hipStream_t)stream;
    const int32_t *plan = a->plan;
    DecodeParams p;
    p.a = *a;
    p.work_indptr = plan + info->off_work_indptr;
    p.work_info = plan + info->off_work_info;
    p.part_o = (float *)a->workspace;
    p.part_lse = p.part_o ? p.part_o + (int64_t)info->max_partial_rows * a->num_heads * kL : nullptr;
    const bool kv_fp8 = a->kv_dtype == AITER_MLA_FP8_E4M3FN || a->kv_dtype == AITER_MLA_FP8_E4M3FNUZ;
    const bool q_fp8 = a->q_dtype == AITER_MLA_FP8_E4M3FN || a->q_dtype == AITER_MLA_FP8_E4M3FNUZ;
    p.v_scale = kv_fp8 ? a->kv_scale : 1.0f;
    p.score_scale = a->sm_scale * (q_fp8 ? a->q_scale : 1.0f) * p.v_scale * kLog2e;
    const dim3 grid(info->desc.num_cu), block(kThreads);
    switch (a->kv_dtype) {
    case AITER_MLA_BF16: decode_kernel<AITER_MLA_BF16><<<grid, block, 0, s>>>(p); break;
    case AITER_MLA_F16: decode_kernel<AITER_MLA_F16><<<grid, block, 0, s>>>(p); break;
    case AITER_MLA_FP8_E4M3FN: decode_kernel<AITER_MLA_FP8_E4M3FN><<<grid, block, 0, s>>>(p); break;
    case AITER_MLA_FP8_E4M3FNUZ: decode_kernel<AITER_MLA_FP8_E4M3FNUZ><<<grid, block, 0, s>>>(p); break;
    default: return (int)hipErrorInvalidValue;
    }
    hipError_t e = hipGetLastError();
    if (e != hipSuccess || info->max_partials == 0) return (int)e;
    ReduceParams r;
    r.num_tiles = plan + AITER_MLA__PH_NUM_REDUCE_TILES; // this plan's count, read on the device
    r.indptr = plan + info->off_reduce_indptr;
    r.final_map = plan + info->off_reduce_final_map;
    r.partial_map = plan + info->off_reduce_partial_map;
    r.part_o = p.part_o;
    r.part_lse = p.part_lse;
    r.o = a->o;
    r.o_stride_token = a->o_stride_token;
    r.o_stride_head = a->o_stride_head;
    r.lse = a->lse;
    r.num_heads = a->num_heads;
    r.dv = kL;
    r.o_dtype = a->o_dtype;
    reduce_kernel<<<dim3(info->max_reduce_tiles), block, 0, s>>>(r);
    AITER_MLA__LAUNCH_CHECK();
}

extern "C" int aiter_mla__launch_head_pad(const aiter_mla_head_pad_args *a, int unpad, void *stream) {
    hipStream_t s = (hipStream_t)stream;
    const int hp = aiter_mla_padded_num_heads(a->num_heads), rep = hp / a->num_heads;
    const int src_h = unpad ? hp : a->num_heads, dst_h = unpad ? a->num_heads : hp;
    const int64_t total = a->num_tokens * dst_h * a->head_dim;
    const int blocks = (int)min((int64_t)65535, (total + 255) / 256);
    switch (aiter_mla_dtype_size(a->dtype)) {
    case 1: head_pad_kernel<<<blocks, 256, 0, s>>>((const uint8_t *)a->src, (uint8_t *)a->dst, total, dst_h, src_h, a->head_dim, rep, unpad); break;
    case 2: head_pad_kernel<<<blocks, 256, 0, s>>>((const uint16_t *)a->src, (uint16_t *)a->dst, total, dst_h, src_h, a->head_dim, rep, unpad); break;
    default: head_pad_kernel<<<blocks, 256, 0, s>>>((const uint32_t *)a->src, (uint32_t *)a->dst, total, dst_h, src_h, a->head_dim, rep, unpad); break;
    }
    AITER_MLA__LAUNCH_CHECK();
}

extern "C" int aiter_mla__launch_expand_page_indices(const aiter_mla_expand_page_indices_args *a, void *stream) {
    expand_page_indices_kernel<<<a->batch, 256, 0, (hipStream_t)stream>>>(*a);
    AITER_MLA__LAUNCH_CHECK();
}

extern "C" int aiter_mla__launch_kv_cache_write(const aiter_mla_kv_cache_write_args *a, void *stream) {
    kv_cache_write_kernel<<<(unsigned)a->num_tokens, 192, 0, (hipStream_t)stream>>>(*a);
    AITER_MLA__LAUNCH_CHECK();
}
