// decode16_fp8.cu - a standalone study, not part of the library: 16-head decode over a
// per-tensor e4m3fn paged cache (pages of 64 keys), one block per request (no plan, no
// splits, no reduce), to find what bounds a 16-head fp8 decode on Hopper. docs/PERFORMANCE.md
// ("A standalone 16-head fp8 decode") has its measurements and what they point to.
//
//   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -o decode16_fp8 decode16_fp8.cu
//   ./decode16_fp8 [timed runs, default 20]
//
// Each row is timed as `make bench` times one (study.h: behind a spin, the median of the runs).
// A block is NG groups of 4 warps; group g takes the request's 64-key tiles g, g + NG, ...
// Per tile and group:
//   - the tile's page (64 rows of 576 e4m3 bytes, contiguous) comes into shared memory by one
//     bulk copy (cp.async.bulk, an mbarrier), issued a group-tile ahead; every thread reads its
//     two keys' bytes into registers (a quad reads 64 consecutive bytes of a row per load);
//   - S^T = K Q^T by mma.sync m16n8k16 in f16: warp w's 16 keys are the A rows, taken straight
//     from those registers (the 576 dims permuted so that a thread's 4 consecutive bytes are one
//     k-step of its A fragment: one converter instruction per register), Q's B fragments from a
//     shared copy laid out in fragment order (every warp reads all of Q: 18 KB a warp);
//   - the widened rows' first 512 dims are stored to a shared V tile on the way (64 KB);
//   - the heads' maxima met across the group's 4 warps (one barrier), P^T written by stmatrix;
//   - O^T += V^T P^T by mma.sync, V^T fragments by ldmatrix.trans of the V tile; warp w owns
//     dims 128 w .. 128 w + 127 of O^T (64 fp32 registers).
// Q is widened to f16 as it is (q here lies in [-1, 1]; the library first scales each row by a
// power of two into f16's range, once a pass). Keys past a request's length read as zeros.
// At the end the groups' (m, l, O) are merged through shared memory; each run prints o's and
// lse's largest errors against a double-precision CPU reference on two requests (reporting
// only: the knobs below that drop work leave the numerics wrong on purpose).
//
// That is layout A (decode16). Layout B (decode16k) moves the traffic from shared memory to
// registers: warp w takes dims 128 w .. + 127 and 512 + 16 w .. + 15 of all 64 keys (Q's 144
// matching dims in 36 registers for the whole request), the four warps' partial S meet through
// shared memory (each warp sums all four, so every warp holds the whole S), P's A fragments come
// from the S accumulators, and V's B fragments from the thread's own widened rows by
// movmatrix.trans (no V tile); the page is double-buffered, its rows read again for P V (KEEP 0)
// or kept in registers from S on (KEEP 1, which spills).
//
// Layouts C and D take every product in e4m3 and have no V tile (see decode16c, decode16d):
// C on mma.sync (which sm_90 runs as two f16 HMMAs on widened operands), D on wgmma.
// `decode16_fp8 [runs] c` and `decode16_fp8 [runs] d` run each beside layout A.
//
// Knobs, for the measurements (each leaves the numerics wrong where it drops work):
//   mode bit 1: no P V; bit 2: no S^T (no conversions, products or V-tile stores: the key bytes
//   only xor-ed); bit 8: keys loaded
//   from global memory straight into registers, a tile ahead, instead of the bulk copy.
//   CV: 0 the hardware converter (cvt.rn.f16x2.e4m3x2), 1 a bit-field conversion (the byte's
//   fields moved into f16's, then times 2^8), 3 half each, 2 none (bytes used as f16 bits).
//   SM bit 1: Q's fragments read once a tile instead of per k-step; bit 2: no V-tile stores.
//   CH: accumulator chains per S^T n8-tile. NG: groups (2: three no longer fit shared memory
//   with the bulk copies).
#include "study.h"
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cmath>

constexpr int H = 16, D = 576, DV = 512, PAGE = 64, NKS = 36;
constexpr int kPRow = 144; // P row bytes (64 keys f16 + 16)
template <int NG>
struct Cfg {
    static constexpr int threads = NG * 128;
    static constexpr int qf = 0;                 // [36][32 lanes] x 16 B
    static constexpr int grp0 = NKS * 32 * 16;   // 18432
    static constexpr int v = 0;                  // [64 keys][1024 B], 16-B chunk c of row r at c ^ (r & 7)
    static constexpr int p = 65536;              // [16 heads][kPRow]
    static constexpr int red = p + 16 * kPRow;   // float [2][16 heads][4 warps]
    static constexpr int bytes = red + 2 * 16 * 4 * 4; // the next tile's e4m3 rows, [64][576] (a page)
    static constexpr int bar = bytes + PAGE * D;         // its mbarrier
    static constexpr int gbytes = bar + 16;
    static constexpr int fin = grp0 + NG * gbytes;   // float m[NG][16], l[NG][4][16]
    static constexpr int total = fin + NG * 16 * 4 + NG * 4 * 16 * 4;
};

__device__ __forceinline__ uint32_t cvt_e4m3x2(uint32_t v16) {
    uint32_t r;
    asm("{\n.reg .b16 t;\ncvt.u16.u32 t, %1;\ncvt.rn.f16x2.e4m3x2 %0, t;\n}\n" : "=r"(r) : "r"(v16));
    return r;
}
__device__ __forceinline__ void mma_f16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// 16 bytes into registers, an L2 miss fetching 256 bytes
__device__ __forceinline__ uint4 ldg16_wide(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ uint4 lds16(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}
__device__ __forceinline__ void sts16(uint32_t a, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
    asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};\n" ::"r"(a), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}
__device__ __forceinline__ void ldsm4(uint32_t a, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm4t(uint32_t a, uint32_t (&r)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void stsm4t(uint32_t a, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(a), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
    uint32_t d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
template <int ID>
__device__ __forceinline__ void gsync() { asm volatile("bar.sync %0, 128;\n" ::"n"(ID) : "memory"); }
__device__ __forceinline__ void group_sync(int grp) {
    if (grp == 0) gsync<1>();
    else if (grp == 1) gsync<2>();
    else gsync<3>();
}
__device__ __forceinline__ uint32_t word_of(const uint4 (&r)[9], int s) {
    const uint4 v = r[s >> 2];
    return (s & 3) == 0 ? v.x : (s & 3) == 1 ? v.y : (s & 3) == 2 ? v.z : v.w;
}

struct Args {
    const __nv_bfloat16 *q;   // [B][16][576]
    const uint8_t *cache;     // [pages][64][576] e4m3fn
    const int *bt;            // [B][bt_stride]
    int bt_stride;
    const int *ctx;           // [B]
    __nv_bfloat16 *o;         // [B][16][512]
    float *lse;               // [B][16]
    float scale_log2;         // sm_scale * kv_scale * log2 e
    float kv_scale;
    int mode;                 // see the knobs above
    uint32_t *sink;
};

__device__ unsigned long long g_prof[8];
// e4m3 pair (low byte first, bits 0-15 or 16-31 by HI) to f16x2 without the converter: the
// byte's bits moved into f16's fields (exponent 4 -> 5 bits), then times 2^8 (exact, subnormals too)
template <int HI>
__device__ __forceinline__ uint32_t e4m3x2_alu(uint32_t w) {
    const uint32_t y = __byte_perm(w, 0, HI ? 0x3424 : 0x1404);
    const uint32_t z = (y & 0x80008000u) | ((y >> 1) & 0x3f803f80u);
    uint32_t r;
    asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(z), "r"(0x5c005c00u));
    return r;
}
template <int NG, int CH, int CV, int SM = 0>
__global__ void __launch_bounds__(NG * 128, 1) decode16(Args a) {
    using C = Cfg<NG>;
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, grp = tid >> 7, t = tid & 127, w = t >> 5, l = t & 31, g = l >> 2, qd = l & 3;
    const int b = blockIdx.x, n = a.ctx[b], ntiles = (n + PAGE - 1) / PAGE;
    unsigned char *gs = smem + C::grp0 + grp * C::gbytes;
    const uint32_t qf_a = smem_u32(smem + C::qf), v_a = smem_u32(gs + C::v), p_a = smem_u32(gs + C::p);
    float *red = reinterpret_cast<float *>(gs + C::red);
    const int *bt = a.bt + (int64_t)b * a.bt_stride;

    // Q fragments: entry (s, lane (g, q)) = Q[g][64 (s / 4) + 16 q + 4 (s % 4) .. + 3], Q[g + 8][same], as f16
    for (int e = tid; e < NKS * 32; e += C::threads) {
        const int s = e >> 5, ln = e & 31, gg = ln >> 2, qq = ln & 3, d0 = 64 * (s >> 2) + 16 * qq + 4 * (s & 3);
        const __nv_bfloat16 *q0 = a.q + ((int64_t)b * H + gg) * D + d0, *q1 = q0 + 8 * D;
        auto f = [](const __nv_bfloat16 *x, int i) { return __bfloat162float(x[i]); };
        sts16(qf_a + e * 16, pack_f16(f(q0, 0), f(q0, 1)), pack_f16(f(q0, 2), f(q0, 3)), pack_f16(f(q1, 0), f(q1, 1)), pack_f16(f(q1, 2), f(q1, 3)));
    }
    __syncthreads();

    float acc[8][2][4];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
    float m[4], lsum[4]; // heads 2q, 2q + 1, 8 + 2q, 9 + 2q (log2 units)
#pragma unroll
    for (int h = 0; h < 4; h++) m[h] = -INFINITY, lsum[h] = 0.0f;

    const int ka = 16 * w + g, kb = ka + 8; // this thread's keys of a tile
    uint4 ra[9], rb[9];
    const uint32_t bytes_a = smem_u32(gs + C::bytes), bar_a = smem_u32(gs + C::bar);
    const bool bulk = !(a.mode & 8);
    auto load = [&](int i) { // registers straight from global memory (mode 8)
        const int page = bt[i];
        const uint8_t *row = a.cache + ((int64_t)page * PAGE + ka) * D + 16 * qd;
        const bool oka = i * PAGE + ka < n, okb = i * PAGE + kb < n;
#pragma unroll
        for (int j = 0; j < 9; j++) { // a quad reads 64 consecutive bytes of a row per load
            ra[j] = oka ? ldg16_wide(row + 64 * j) : make_uint4(0, 0, 0, 0);
            rb[j] = okb ? ldg16_wide(row + 8 * D + 64 * j) : make_uint4(0, 0, 0, 0);
        }
    };
    int i = grp;
    uint32_t xs = 0;
    if (t == 0) mbar_init(bar_a, 1);
    __syncthreads();
    if (bulk) {
        if (t == 0 && i < ntiles) bulk_copy(bytes_a, a.cache + (int64_t)bt[i] * PAGE * D, PAGE * D, bar_a);
    } else if (i < ntiles) load(i);
    const bool prof = t == 0;
    unsigned long long ph[7] = {0, 0, 0, 0, 0, 0, 0}, c0 = clock64(), c1;
#define PH(k) if (prof) { c1 = clock64(); ph[k] += c1 - c0; c0 = c1; }
    for (int it = 0; i < ntiles; i += NG, it++) {
        PH(6)
        if (bulk) { // tile i's rows from shared memory; then the next tile's copy into their place
            mbar_wait(bar_a, it & 1);
            const bool oka = i * PAGE + ka < n, okb = i * PAGE + kb < n;
#pragma unroll
            for (int j = 0; j < 9; j++) {
                ra[j] = oka ? lds16(bytes_a + ka * D + 16 * qd + 64 * j) : make_uint4(0, 0, 0, 0);
                rb[j] = okb ? lds16(bytes_a + kb * D + 16 * qd + 64 * j) : make_uint4(0, 0, 0, 0);
            }
        }
        PH(0)
        group_sync(grp); // (A) the group is done with V and P of its last tile (and has read the rows)
        PH(1)
        if (bulk && t == 0 && i + NG < ntiles) bulk_copy(bytes_a, a.cache + (int64_t)bt[i + NG] * PAGE * D, PAGE * D, bar_a);
        float s0[CH][4] = {}, s1[CH][4] = {};
        uint32_t pa0 = 0, pa1 = 0, pa2 = 0, pa3 = 0;
        const uint4 qv0 = (SM & 1) ? lds16(qf_a + l * 16) : make_uint4(0, 0, 0, 0);
        if (a.mode & 2) {
#pragma unroll
            for (int s = 0; s < NKS; s++) xs ^= word_of(ra, s) + word_of(rb, s);
        } else
#pragma unroll
        for (int s = 0; s < NKS; s++) {
            const uint32_t wa = word_of(ra, s), wb = word_of(rb, s);
            uint32_t a0, a1, a2, a3;
            if constexpr (CV == 0) a0 = cvt_e4m3x2(wa & 0xffffu), a2 = cvt_e4m3x2(wa >> 16), a1 = cvt_e4m3x2(wb & 0xffffu), a3 = cvt_e4m3x2(wb >> 16);
            else if constexpr (CV == 1) a0 = e4m3x2_alu<0>(wa), a2 = e4m3x2_alu<1>(wa), a1 = e4m3x2_alu<0>(wb), a3 = e4m3x2_alu<1>(wb);
            else if constexpr (CV == 3) { // half by each
                if (s & 1) a0 = e4m3x2_alu<0>(wa), a2 = e4m3x2_alu<1>(wa), a1 = e4m3x2_alu<0>(wb), a3 = e4m3x2_alu<1>(wb);
                else a0 = cvt_e4m3x2(wa & 0xffffu), a2 = cvt_e4m3x2(wa >> 16), a1 = cvt_e4m3x2(wb & 0xffffu), a3 = cvt_e4m3x2(wb >> 16);
            } else a0 = wa, a2 = wa >> 16, a1 = wb, a3 = wb >> 16;
            const uint4 qv = (SM & 1) ? qv0 : lds16(qf_a + (s * 32 + l) * 16); // SM & 1: k-step 0's Q for all (timing only)
            mma_f16(s0[s % CH], a0, a1, a2, a3, qv.x, qv.y);
            mma_f16(s1[s % CH], a0, a1, a2, a3, qv.z, qv.w);
            if ((SM & 2) == 0 && (s & 1)) { // V chunk of keys ka, kb: dims 64 (s / 4) + 16 q + 8 ((s / 2) & 1) .. + 7
                const int c = 8 * (s >> 2) + 2 * qd + ((s >> 1) & 1);
                if (s < 32) {
                    sts16(v_a + ka * 1024 + ((c ^ (ka & 7)) << 4), pa0, pa2, a0, a2);
                    sts16(v_a + kb * 1024 + ((c ^ (kb & 7)) << 4), pa1, pa3, a1, a3);
                }
            } else {
                pa0 = a0, pa1 = a1, pa2 = a2, pa3 = a3;
            }
        }
        PH(2)
        const int i_here = i;
        if (!bulk && i + NG < ntiles) load(i + NG); // the next tile's keys fly during the softmax and P V
        float x[8]; // (key a, h0), (a, h1), (b, h0), (b, h1), (a, h2), (a, h3), (b, h2), (b, h3)
        const bool oka = i_here * PAGE + ka < n, okb = i_here * PAGE + kb < n;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const bool ok = e < 2 ? oka : okb;
            float u0 = 0.0f, u1 = 0.0f;
#pragma unroll
            for (int c = 0; c < CH; c++) u0 += s0[c][e], u1 += s1[c][e];
            x[e] = ok ? u0 * a.scale_log2 : -INFINITY;
            x[4 + e] = ok ? u1 * a.scale_log2 : -INFINITY;
        }
        float mx[4] = {fmaxf(x[0], x[2]), fmaxf(x[1], x[3]), fmaxf(x[4], x[6]), fmaxf(x[5], x[7])};
#pragma unroll
        for (int h = 0; h < 4; h++)
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], o));
        const int par = it & 1;
        const int hh[4] = {2 * qd, 2 * qd + 1, 8 + 2 * qd, 9 + 2 * qd};
        if (g == 0)
#pragma unroll
            for (int h = 0; h < 4; h++) red[(par * 16 + hh[h]) * 4 + w] = mx[h];
        group_sync(grp); // (C) the warps' maxima
        PH(3)
        float alpha[4], mu[4];
#pragma unroll
        for (int h = 0; h < 4; h++) {
            const float4 r4 = *reinterpret_cast<const float4 *>(red + (par * 16 + hh[h]) * 4);
            const float tm = fmaxf(fmaxf(r4.x, r4.y), fmaxf(r4.z, r4.w));
            const float mn = fmaxf(m[h], tm);
            mu[h] = mn == -INFINITY ? 0.0f : mn;
            alpha[h] = ex2(m[h] - mu[h]);
            m[h] = mn;
        }
        float p[8];
#pragma unroll
        for (int e = 0; e < 8; e++) p[e] = ex2(x[e] - mu[(e >> 2) * 2 + (e & 1)]);
        lsum[0] = lsum[0] * alpha[0] + p[0] + p[2];
        lsum[1] = lsum[1] * alpha[1] + p[1] + p[3];
        lsum[2] = lsum[2] * alpha[2] + p[4] + p[6];
        lsum[3] = lsum[3] * alpha[3] + p[5] + p[7];
        { // P^T [head][key]: matrix mi = l / 8 (keys 16 w + 8 (mi & 1), heads 8 (mi >> 1)), row l % 8
            const int mi = l >> 3, j = l & 7;
            const uint32_t addr = p_a + ((mi >> 1) * 8 + j) * kPRow + (16 * w + (mi & 1) * 8) * 2;
            stsm4t(addr, pack_f16(p[0], p[1]), pack_f16(p[2], p[3]), pack_f16(p[4], p[5]), pack_f16(p[6], p[7]));
        }
        group_sync(grp); // (B) P and V are in
        PH(4)
        if (a.mode & 1) continue;
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
            uint32_t pb[4];
            {
                const int mi = l >> 3, j = l & 7;
                ldsm4(p_a + ((mi >> 1) * 8 + j) * kPRow + (16 * kk + (mi & 1) * 8) * 2, pb);
            }
#pragma unroll
            for (int mt = 0; mt < 8; mt++) {
                const int mi = l >> 3, j = l & 7, key = 16 * kk + (mi >> 1) * 8 + j, c = (128 * w + 16 * mt + (mi & 1) * 8) >> 3;
                uint32_t va[4];
                ldsm4t(v_a + key * 1024 + ((c ^ (key & 7)) << 4), va);
                mma_f16(acc[mt][0], va[0], va[1], va[2], va[3], pb[0], pb[1]);
                mma_f16(acc[mt][1], va[0], va[1], va[2], va[3], pb[2], pb[3]);
            }
        }
    }
    PH(5)
    if (prof) for (int k = 0; k < 7; k++) atomicAdd(&g_prof[k], ph[k]);
    if (a.mode & 2) a.sink[blockIdx.x * blockDim.x + tid] = xs;
    // the groups' rows together: m, l per group; o = sum_g f_g acc_g / L
#pragma unroll
    for (int h = 0; h < 4; h++)
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) lsum[h] += __shfl_xor_sync(0xffffffffu, lsum[h], o);
    float *fm = reinterpret_cast<float *>(smem + C::fin), *fl = fm + NG * 16;
    const int hh[4] = {2 * qd, 2 * qd + 1, 8 + 2 * qd, 9 + 2 * qd};
    if (g == 0)
#pragma unroll
        for (int h = 0; h < 4; h++) {
            fl[(grp * 4 + w) * 16 + hh[h]] = lsum[h];
            if (w == 0) fm[grp * 16 + hh[h]] = m[h];
        }
    __syncthreads(); // also: every group is done with its V tile
    float f[4];
#pragma unroll
    for (int h = 0; h < 4; h++) {
        float M = -INFINITY;
        for (int gg = 0; gg < NG; gg++) M = fmaxf(M, fm[gg * 16 + hh[h]]);
        const float Mu = M == -INFINITY ? 0.0f : M;
        float L = 0.0f;
        for (int gg = 0; gg < NG; gg++) {
            const float fg = ex2(fm[gg * 16 + hh[h]] - Mu);
            for (int ww = 0; ww < 4; ww++) L += fl[(gg * 4 + ww) * 16 + hh[h]] * fg;
        }
        f[h] = L > 0.0f ? ex2(m[h] - Mu) / L * a.kv_scale : 0.0f;
        if (grp == 0 && w == 0 && g == 0) a.lse[b * H + hh[h]] = L > 0.0f ? (Mu + log2f(L)) * 0.69314718f : INFINITY;
    }
    float *ob = reinterpret_cast<float *>(gs + C::v); // [16 heads][512 dims + 4] of this group
    constexpr int kOb = DV + 4;
#pragma unroll
    for (int mt = 0; mt < 8; mt++)
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            const int d = 128 * w + 16 * mt + g, h0 = 8 * nt + 2 * qd;
            ob[h0 * kOb + d] = acc[mt][nt][0] * f[2 * nt];
            ob[(h0 + 1) * kOb + d] = acc[mt][nt][1] * f[2 * nt + 1];
            ob[h0 * kOb + d + 8] = acc[mt][nt][2] * f[2 * nt];
            ob[(h0 + 1) * kOb + d + 8] = acc[mt][nt][3] * f[2 * nt + 1];
        }
    __syncthreads();
    for (int e = tid; e < H * DV / 2; e += C::threads) {
        const int h = e / (DV / 2), d = (e % (DV / 2)) * 2;
        float x0 = 0.0f, x1 = 0.0f;
        for (int gg = 0; gg < NG; gg++) {
            const float *o2 = reinterpret_cast<const float *>(smem + C::grp0 + gg * C::gbytes + C::v);
            x0 += o2[h * kOb + d];
            x1 += o2[h * kOb + d + 1];
        }
        *reinterpret_cast<__nv_bfloat162 *>(a.o + ((int64_t)b * H + h) * DV + d) = __floats2bfloat162_rn(x0, x1);
    }
}

__device__ __forceinline__ uint32_t movt(uint32_t x) { // 8x8 b16 matrix of the warp, transposed
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}
__device__ __forceinline__ uint32_t lds4(uint32_t a) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ void sts_f4(uint32_t a, float x, float y, float z, float w) {
    asm volatile("st.shared.v4.f32 [%0], {%1,%2,%3,%4};\n" ::"r"(a), "f"(x), "f"(y), "f"(z), "f"(w) : "memory");
}
__device__ __forceinline__ float4 lds_f4(uint32_t a) {
    float4 v;
    asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];\n" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(a));
    return v;
}
// Layout B: warp w of a group takes dims 128 w .. + 127 and 512 + 16 w .. + 15 of all 64 keys of
// a tile (thread (g, q): keys 8 j + g, nope bytes 32 q .. + 31 of the warp's 128, rope bytes 4 q ..
// + 3 of its 16); Q's matching dims live in registers; the four warps' partial S meet through
// shared memory; P from the S accumulators; V's B fragments by movmatrix.trans of the thread's
// own widened rows. KEEP: the rows' bytes stay in registers from S to P V (else read again).
template <int NG>
struct CfgB {
    static constexpr int threads = NG * 128;
    static constexpr int page = PAGE * D;                 // 36864
    static constexpr int stage = 0;                        // [2][page] the group's pages
    static constexpr int red = 2 * page;                   // float4 [2 par][4 warps][8 j][32 lanes]
    static constexpr int bar = red + 2 * 4 * 8 * 32 * 16;  // 2 mbarriers
    static constexpr int gbytes = bar + 16;
    static constexpr int fin = NG * gbytes;                // float m[NG][16], l[NG][16]
    static constexpr int total = fin + NG * 32 * 4;
};
template <int NG, int KEEP>
__global__ void __launch_bounds__(NG * 128, 1) decode16k(Args a) {
    using C = CfgB<NG>;
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, grp = tid >> 7, t = tid & 127, w = t >> 5, l = t & 31, g = l >> 2, qd = l & 3;
    const int b = blockIdx.x, n = a.ctx[b], ntiles = (n + PAGE - 1) / PAGE;
    unsigned char *gs = smem + grp * C::gbytes;
    const uint32_t st_a = smem_u32(gs + C::stage), red_a = smem_u32(gs + C::red), bar_a = smem_u32(gs + C::bar);
    const int *bt = a.bt + (int64_t)b * a.bt_stride;
    // this thread's dims: k-step s < 8: 128 w + 32 q + 4 s .. + 3; s = 8: 512 + 16 w + 4 q .. + 3
    auto dim_of = [&](int s) { return s < 8 ? 128 * w + 32 * qd + 4 * s : 512 + 16 * w + 4 * qd; };
    uint32_t qa[9][4];
#pragma unroll
    for (int s = 0; s < 9; s++) {
        const __nv_bfloat16 *q0 = a.q + ((int64_t)b * H + g) * D + dim_of(s), *q1 = q0 + 8 * D;
        auto f = [](const __nv_bfloat16 *x, int i) { return __bfloat162float(x[i]); };
        qa[s][0] = pack_f16(f(q0, 0), f(q0, 1));
        qa[s][1] = pack_f16(f(q1, 0), f(q1, 1));
        qa[s][2] = pack_f16(f(q0, 2), f(q0, 3));
        qa[s][3] = pack_f16(f(q1, 2), f(q1, 3));
    }
    if (t == 0) {
        mbar_init(bar_a, 1);
        mbar_init(bar_a + 8, 1);
    }
    __syncthreads();
    if (t == 0)
        for (int k = 0; k < 2; k++)
            if (grp + k * NG < ntiles) bulk_copy(st_a + k * C::page, a.cache + (int64_t)bt[grp + k * NG] * PAGE * D, PAGE * D, bar_a + 8 * k);
    float oacc[16][4];
#pragma unroll
    for (int r = 0; r < 16; r++)
#pragma unroll
        for (int e = 0; e < 4; e++) oacc[r][e] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; // heads g, g + 8 (log2 units)
    const bool prof = t == 0;
    unsigned long long ph[7] = {0, 0, 0, 0, 0, 0, 0}, c0 = clock64(), c1;
#define PH(k) if (prof) { c1 = clock64(); ph[k] += c1 - c0; c0 = c1; }
    int it = 0;
    for (int i = grp; i < ntiles; i += NG, it++) {
        const int buf = it & 1;
        const uint32_t pg = st_a + buf * C::page;
        PH(6)
        mbar_wait(bar_a + 8 * buf, (it >> 1) & 1);
        PH(0)
        uint32_t raw[8][9]; // key 8 j + g: words 0..7 nope, 8 rope
        auto read_key = [&](int j) {
            const uint32_t ra = pg + (8 * j + g) * D;
            const uint4 x = lds16(ra + 128 * w + 32 * qd), y = lds16(ra + 128 * w + 32 * qd + 16);
            raw[j][0] = x.x, raw[j][1] = x.y, raw[j][2] = x.z, raw[j][3] = x.w;
            raw[j][4] = y.x, raw[j][5] = y.y, raw[j][6] = y.z, raw[j][7] = y.w;
            raw[j][8] = lds4(ra + 512 + 16 * w + 4 * qd);
        };
        float sacc[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            read_key(j);
            if (i * PAGE + 8 * j + g >= n)
#pragma unroll
                for (int s = 0; s < 9; s++) raw[j][s] = 0u;
#pragma unroll
            for (int e = 0; e < 4; e++) sacc[j][e] = 0.0f;
#pragma unroll
            for (int s = 0; s < 9; s++)
                mma_f16(sacc[j], qa[s][0], qa[s][1], qa[s][2], qa[s][3], cvt_e4m3x2(raw[j][s] & 0xffffu), cvt_e4m3x2(raw[j][s] >> 16));
        }
        PH(1)
        // the four warps' partial S: each stores its own, then sums all four in the same order
        const int par = it & 1;
#pragma unroll
        for (int j = 0; j < 8; j++) sts_f4(red_a + (((par * 4 + w) * 8 + j) * 32 + l) * 16, sacc[j][0], sacc[j][1], sacc[j][2], sacc[j][3]);
        group_sync(grp);
        PH(2)
        if (t == 0 && i + 2 * NG < ntiles && KEEP) // every warp has its bytes: the page after next into this buffer
            bulk_copy(pg, a.cache + (int64_t)bt[i + 2 * NG] * PAGE * D, PAGE * D, bar_a + 8 * buf);
        float x[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float4 acc4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
            for (int ww = 0; ww < 4; ww++) {
                const float4 v = lds_f4(red_a + (((par * 4 + ww) * 8 + j) * 32 + l) * 16);
                acc4.x += v.x, acc4.y += v.y, acc4.z += v.z, acc4.w += v.w;
            }
            const int key = i * PAGE + 8 * j + 2 * qd;
            x[j][0] = key < n ? acc4.x * a.scale_log2 : -INFINITY;
            x[j][1] = key + 1 < n ? acc4.y * a.scale_log2 : -INFINITY;
            x[j][2] = key < n ? acc4.z * a.scale_log2 : -INFINITY;
            x[j][3] = key + 1 < n ? acc4.w * a.scale_log2 : -INFINITY;
        }
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int j = 0; j < 8; j++) mx0 = fmaxf(mx0, fmaxf(x[j][0], x[j][1])), mx1 = fmaxf(mx1, fmaxf(x[j][2], x[j][3]));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        const float u0 = n0 == -INFINITY ? 0.0f : n0, u1 = n1 == -INFINITY ? 0.0f : n1;
        const float al0 = ex2(m0 - u0), al1 = ex2(m1 - u1);
        m0 = n0, m1 = n1;
        float s0 = 0.0f, s1 = 0.0f;
        uint32_t pa[4][4];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float p0 = ex2(x[j][0] - u0), p1 = ex2(x[j][1] - u0), p2 = ex2(x[j][2] - u1), p3 = ex2(x[j][3] - u1);
            s0 += p0 + p1, s1 += p2 + p3;
            pa[j >> 1][(j & 1) * 2] = pack_f16(p0, p1);
            pa[j >> 1][(j & 1) * 2 + 1] = pack_f16(p2, p3);
        }
        l0 = l0 * al0 + s0, l1 = l1 * al1 + s1;
        PH(3)
#pragma unroll
        for (int r = 0; r < 16; r++) oacc[r][0] *= al0, oacc[r][1] *= al0, oacc[r][2] *= al1, oacc[r][3] *= al1;
        if (!(a.mode & 1)) {
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                if (!KEEP) {
                    read_key(2 * kk);
                    read_key(2 * kk + 1);
                    if (i * PAGE + 16 * kk + g >= n)
#pragma unroll
                        for (int s = 0; s < 8; s++) raw[2 * kk][s] = 0u;
                    if (i * PAGE + 16 * kk + 8 + g >= n)
#pragma unroll
                        for (int s = 0; s < 8; s++) raw[2 * kk + 1][s] = 0u;
                }
#pragma unroll
                for (int r = 0; r < 16; r++) {
                    const uint32_t wa = raw[2 * kk][r >> 1], wb = raw[2 * kk + 1][r >> 1];
                    const uint32_t va = cvt_e4m3x2((r & 1) ? wa >> 16 : wa & 0xffffu), vb = cvt_e4m3x2((r & 1) ? wb >> 16 : wb & 0xffffu);
                    mma_f16(oacc[r], pa[kk][0], pa[kk][1], pa[kk][2], pa[kk][3], movt(va), movt(vb));
                }
            }
        }
        PH(4)
        if (!KEEP) {
            group_sync(grp); // every warp is done with the page
            if (t == 0 && i + 2 * NG < ntiles) bulk_copy(pg, a.cache + (int64_t)bt[i + 2 * NG] * PAGE * D, PAGE * D, bar_a + 8 * buf);
        }
    }
    PH(5)
    if (prof) for (int k = 0; k < 7; k++) atomicAdd(&g_prof[k], ph[k]);
    // row sums over the quad (each warp holds the same m, l: warp 0 publishes them)
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    float *fm = reinterpret_cast<float *>(smem + C::fin), *fl = fm + NG * 16;
    if (w == 0 && qd == 0) {
        fm[grp * 16 + g] = m0, fm[grp * 16 + g + 8] = m1;
        fl[grp * 16 + g] = l0, fl[grp * 16 + g + 8] = l1;
    }
    __syncthreads(); // also: the pages are no longer read
    float f[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int head = g + 8 * h;
        float M = -INFINITY;
        for (int gg = 0; gg < NG; gg++) M = fmaxf(M, fm[gg * 16 + head]);
        const float Mu = M == -INFINITY ? 0.0f : M;
        float L = 0.0f;
        for (int gg = 0; gg < NG; gg++) L += fl[gg * 16 + head] * ex2(fm[gg * 16 + head] - Mu);
        f[h] = L > 0.0f ? ex2((h ? m1 : m0) - Mu) / L * a.kv_scale : 0.0f;
        if (grp == 0 && w == 0 && qd == 0) a.lse[b * H + head] = L > 0.0f ? (Mu + log2f(L)) * 0.69314718f : INFINITY;
    }
    float *ob = reinterpret_cast<float *>(gs + C::stage); // [16][512 + 4] of this group
    constexpr int kOb = DV + 4;
#pragma unroll
    for (int r = 0; r < 16; r++) {
        const int d = 128 * w + 32 * qd + 2 * r;
        ob[g * kOb + d] = oacc[r][0] * f[0];
        ob[g * kOb + d + 1] = oacc[r][1] * f[0];
        ob[(g + 8) * kOb + d] = oacc[r][2] * f[1];
        ob[(g + 8) * kOb + d + 1] = oacc[r][3] * f[1];
    }
    __syncthreads();
    for (int e = tid; e < H * DV / 2; e += C::threads) {
        const int h = e / (DV / 2), d = (e % (DV / 2)) * 2;
        float x0 = 0.0f, x1 = 0.0f;
        for (int gg = 0; gg < NG; gg++) {
            const float *o2 = reinterpret_cast<const float *>(smem + gg * C::gbytes + C::stage);
            x0 += o2[h * kOb + d];
            x1 += o2[h * kOb + d + 1];
        }
        *reinterpret_cast<__nv_bfloat162 *>(a.o + ((int64_t)b * H + h) * DV + d) = __floats2bfloat162_rn(x0, x1);
    }
}

// Layout C: every product in e4m3, no widening and no V tile. S^T = K Q^T by mma.sync
// m16n8k32 e4m3: a thread's two key rows are its A fragments as they lie (the 576 dims
// permuted as in layout A, two of its words a k-step), and Q goes in as two e4m3 terms,
// hi = e4m3(256 q) and lo = e4m3(256 q - hi), each a product into the same sums (q here lies
// in [-1, 1]; the library would scale each row by a power of two). P' = 64 p goes into P V as two
// e4m3 terms as well, hi and lo of each key side by side in the k dimension, so that k-slots
// (4 q, +1, +2, +3) of step kk are (key, hi), (key, lo), (key + 8, hi), (key + 8, lo) with
// key = 16 kk + q (+ 4 in the upper half of the step): the thread of warp kk that owns those keys'
// scores writes one word a head, and O^T's A fragments (V^T, dims x keys) are the staged bytes
// of four keys, each byte twice, by one prmt a register (dims of O^T's row g of m-tile mt:
// 128 w + 16 g + 2 mt, and + 1 for row g + 8). The staged page lives until P V ends: two
// pages a group. TMP: each tile's P V summed apart from zero and added to O in fp32 (the fp8
// products' sums over one tile only), else straight into O.
__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t word4(const uint4 &v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }
// P' of one head for keys ka (low half of v) and kb as [hi(ka), lo(ka), hi(kb), lo(kb)]
__device__ __forceinline__ uint32_t p_terms(float pa, float pb) {
    const uint32_t v = pack_f16(pa * 64.0f, pb * 64.0f);
    uint16_t hi8, lo8;
    uint32_t hv, r;
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;\n" : "=h"(hi8) : "r"(v));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(hv) : "h"(hi8));
    asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(v), "r"(hv));
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;\n" : "=h"(lo8) : "r"(r));
    return __byte_perm((uint32_t)hi8, (uint32_t)lo8, 0x5140);
}
static __device__ __forceinline__ uint8_t e4m3_code(float x) {
    uint16_t c;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(c) : "f"(0.0f), "f"(x));
    return (uint8_t)(c & 0xff);
}
static __device__ __forceinline__ float e4m3_value(uint8_t c) {
    uint32_t h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(h) : "h"((uint16_t)c));
    return __half2float(__ushort_as_half((unsigned short)(h & 0xffff)));
}
template <int NG>
struct CfgC {
    static constexpr int threads = NG * 128;
    static constexpr int qf = 0;                   // [18 k-steps][hi, lo][32 lanes] x 16 B
    static constexpr int grp0 = 18 * 2 * 32 * 16;  // 18432
    static constexpr int page = PAGE * D;          // 36864
    static constexpr int stage = 0;                // [2][page] the group's pages
    static constexpr int p = 2 * page;             // [4 steps][32 lanes][n-tile][half] words
    static constexpr int red = p + 4 * 32 * 16;    // float [2][16 heads][4 warps]
    static constexpr int bar = red + 2 * 16 * 4 * 4; // 2 mbarriers
    static constexpr int gbytes = bar + 16;
    static constexpr int fin = grp0 + NG * gbytes; // float m[NG][16], l[NG][4][16]
    static constexpr int total = fin + NG * 16 * 4 + NG * 4 * 16 * 4;
};
template <int NG, int TMP>
__global__ void __launch_bounds__(NG * 128, 1) decode16c(Args a) {
    using C = CfgC<NG>;
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, grp = tid >> 7, t = tid & 127, w = t >> 5, l = t & 31, g = l >> 2, qd = l & 3;
    const int b = blockIdx.x, n = a.ctx[b], ntiles = (n + PAGE - 1) / PAGE;
    unsigned char *gs = smem + C::grp0 + grp * C::gbytes;
    const uint32_t qf_a = smem_u32(smem + C::qf), st_a = smem_u32(gs + C::stage), p_a = smem_u32(gs + C::p),
                   bar_a = smem_u32(gs + C::bar);
    float *red = reinterpret_cast<float *>(gs + C::red);
    const int *bt = a.bt + (int64_t)b * a.bt_stride;

    // Q's B fragments: k-step s2, lane (g, q): b0 = dims d(2 s2), b1 = d(2 s2 + 1) of heads g (words
    // 0, 1) and g + 8 (words 2, 3), d(s) = 64 (s / 4) + 16 q + 4 (s % 4) .. + 3; hi, then lo
    for (int e = tid; e < 18 * 32; e += C::threads) {
        const int s2 = e >> 5, ln = e & 31, gg = ln >> 2, qq = ln & 3;
        uint32_t hw[4], lw[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int head = gg + 8 * (k >> 1), s = 2 * s2 + (k & 1), d0 = 64 * (s >> 2) + 16 * qq + 4 * (s & 3);
            uint32_t hv = 0, lv = 0;
            for (int i = 0; i < 4; i++) {
                const float x = __bfloat162float(a.q[((int64_t)b * H + head) * D + d0 + i]) * 256.0f;
                const uint8_t h8 = e4m3_code(x), l8 = e4m3_code(x - e4m3_value(h8));
                hv |= (uint32_t)h8 << (8 * i);
                lv |= (uint32_t)l8 << (8 * i);
            }
            hw[k] = hv, lw[k] = lv;
        }
        sts16(qf_a + ((2 * s2) * 32 + ln) * 16, hw[0], hw[1], hw[2], hw[3]);
        sts16(qf_a + ((2 * s2 + 1) * 32 + ln) * 16, lw[0], lw[1], lw[2], lw[3]);
    }
    if (t == 0) {
        mbar_init(bar_a, 1);
        mbar_init(bar_a + 8, 1);
    }
    __syncthreads();

    float acc[8][2][4];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
    float m[4], lsum[4]; // heads 2q, 2q + 1, 8 + 2q, 9 + 2q (log2 units)
#pragma unroll
    for (int h = 0; h < 4; h++) m[h] = -INFINITY, lsum[h] = 0.0f;

    const int ka = 16 * w + g, kb = ka + 8;
    uint4 ra[9], rb[9];
    if (t == 0 && grp < ntiles) bulk_copy(st_a, a.cache + (int64_t)bt[grp] * PAGE * D, PAGE * D, bar_a);
    const bool prof = t == 0;
    unsigned long long ph[7] = {0, 0, 0, 0, 0, 0, 0}, c0 = clock64(), c1;
#define PH(k) if (prof) { c1 = clock64(); ph[k] += c1 - c0; c0 = c1; }
    int it = 0;
    for (int i = grp; i < ntiles; i += NG, it++) {
        const int buf = it & 1;
        const uint32_t pg = st_a + buf * C::page;
        PH(6)
        mbar_wait(bar_a + 8 * buf, (it >> 1) & 1);
        {
            const bool oka = i * PAGE + ka < n, okb = i * PAGE + kb < n;
#pragma unroll
            for (int j = 0; j < 9; j++) {
                ra[j] = oka ? lds16(pg + ka * D + 16 * qd + 64 * j) : make_uint4(0, 0, 0, 0);
                rb[j] = okb ? lds16(pg + kb * D + 16 * qd + 64 * j) : make_uint4(0, 0, 0, 0);
            }
        }
        PH(0)
        group_sync(grp); // (A) the group is done with P and the other page
        PH(1)
        if (t == 0 && i + NG < ntiles)
            bulk_copy(st_a + (buf ^ 1) * C::page, a.cache + (int64_t)bt[i + NG] * PAGE * D, PAGE * D, bar_a + 8 * (buf ^ 1));
        float s0[2][4] = {}, s1[2][4] = {}; // [hi, lo] chains of heads 0-7, 8-15
#pragma unroll
        for (int s2 = 0; s2 < 18; s2++) {
            const uint32_t a0 = word_of(ra, 2 * s2), a2 = word_of(ra, 2 * s2 + 1), a1 = word_of(rb, 2 * s2), a3 = word_of(rb, 2 * s2 + 1);
            const uint4 qh = lds16(qf_a + ((2 * s2) * 32 + l) * 16), ql = lds16(qf_a + ((2 * s2 + 1) * 32 + l) * 16);
            mma_e4m3(s0[0], a0, a1, a2, a3, qh.x, qh.y);
            mma_e4m3(s1[0], a0, a1, a2, a3, qh.z, qh.w);
            mma_e4m3(s0[1], a0, a1, a2, a3, ql.x, ql.y);
            mma_e4m3(s1[1], a0, a1, a2, a3, ql.z, ql.w);
        }
        PH(2)
        float x[8]; // (key a, h0), (a, h1), (b, h0), (b, h1), (a, h2), (a, h3), (b, h2), (b, h3)
        const bool oka = i * PAGE + ka < n, okb = i * PAGE + kb < n;
        const float sl = a.scale_log2 * (1.0f / 256.0f);
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const bool ok = e < 2 ? oka : okb;
            x[e] = ok ? (s0[0][e] + s0[1][e]) * sl : -INFINITY;
            x[4 + e] = ok ? (s1[0][e] + s1[1][e]) * sl : -INFINITY;
        }
        float mx[4] = {fmaxf(x[0], x[2]), fmaxf(x[1], x[3]), fmaxf(x[4], x[6]), fmaxf(x[5], x[7])};
#pragma unroll
        for (int h = 0; h < 4; h++)
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], o));
        const int par = it & 1;
        const int hh[4] = {2 * qd, 2 * qd + 1, 8 + 2 * qd, 9 + 2 * qd};
        if (g == 0)
#pragma unroll
            for (int h = 0; h < 4; h++) red[(par * 16 + hh[h]) * 4 + w] = mx[h];
        group_sync(grp); // (C) the warps' maxima
        PH(3)
        float alpha[4], mu[4];
#pragma unroll
        for (int h = 0; h < 4; h++) {
            const float4 r4 = *reinterpret_cast<const float4 *>(red + (par * 16 + hh[h]) * 4);
            const float tm = fmaxf(fmaxf(r4.x, r4.y), fmaxf(r4.z, r4.w));
            const float mn = fmaxf(m[h], tm);
            mu[h] = mn == -INFINITY ? 0.0f : mn;
            alpha[h] = ex2(m[h] - mu[h]);
            m[h] = mn;
        }
        float p[8];
#pragma unroll
        for (int e = 0; e < 8; e++) p[e] = ex2(x[e] - mu[(e >> 2) * 2 + (e & 1)]);
        lsum[0] = lsum[0] * alpha[0] + p[0] + p[2];
        lsum[1] = lsum[1] * alpha[1] + p[1] + p[3];
        lsum[2] = lsum[2] * alpha[2] + p[4] + p[6];
        lsum[3] = lsum[3] * alpha[3] + p[5] + p[7];
        { // head h's word for keys ka, kb: step w, lane 4 (h % 8) + g % 4, n-tile h / 8, half g / 4
            const int half = g >> 2, qr = g & 3;
#pragma unroll
            for (int h = 0; h < 4; h++) {
                const int head = hh[h], e0 = (h >> 1) * 4 + (h & 1);
                const uint32_t word = p_terms(p[e0], p[e0 + 2]);
                asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(p_a + ((w * 32 + 4 * (head & 7) + qr) * 4 + (head >> 3) * 2 + half) * 4), "r"(word)
                             : "memory");
            }
        }
        group_sync(grp); // (B) P is in
        PH(4)
        if (a.mode & 1) continue;
        constexpr uint32_t kSel[4] = {0x4400u, 0x5511u, 0x6622u, 0x7733u};
        const uint32_t vbase = pg + 128 * w + 16 * g;
        if constexpr (TMP == 0) {
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
                const uint4 pb = lds16(p_a + (kk * 32 + l) * 16);
                const int k0 = 16 * kk + qd;
                const bool nov = a.mode & 32; // diagnostic: no V loads (the page's first words of each lane instead)
                const uint4 v0 = nov ? make_uint4(pb.x, pb.y, l, kk) : lds16(vbase + k0 * D), v1 = nov ? make_uint4(pb.z, l, pb.w, kk) : lds16(vbase + (k0 + 8) * D),
                            v2 = nov ? make_uint4(l, pb.w, kk, pb.x) : lds16(vbase + (k0 + 4) * D), v3 = nov ? make_uint4(kk, pb.y, pb.z, l) : lds16(vbase + (k0 + 12) * D);
#pragma unroll
                for (int mt = 0; mt < 8; mt++) {
                    const int j = mt >> 1, bs = (mt & 1) * 2;
                    const uint32_t w0 = word4(v0, j), w1 = word4(v1, j), w2 = word4(v2, j), w3 = word4(v3, j);
                    const bool nop = a.mode & 16; // diagnostic: the words as they are, no prmt
                    const uint32_t a0 = nop ? w0 : __byte_perm(w0, w1, kSel[bs]), a1 = nop ? w1 : __byte_perm(w0, w1, kSel[bs + 1]),
                                   a2 = nop ? w2 : __byte_perm(w2, w3, kSel[bs]), a3 = nop ? w3 : __byte_perm(w2, w3, kSel[bs + 1]);
                    mma_e4m3(acc[mt][0], a0, a1, a2, a3, pb.x, pb.y);
                    mma_e4m3(acc[mt][1], a0, a1, a2, a3, pb.z, pb.w);
                }
            }
        } else {
            uint4 pb[4], v[4][4];
#pragma unroll
            for (int kk = 0; kk < 4; kk++) {
                pb[kk] = lds16(p_a + (kk * 32 + l) * 16);
                const int k0 = 16 * kk + qd;
                v[kk][0] = lds16(vbase + k0 * D), v[kk][1] = lds16(vbase + (k0 + 8) * D);
                v[kk][2] = lds16(vbase + (k0 + 4) * D), v[kk][3] = lds16(vbase + (k0 + 12) * D);
            }
#pragma unroll
            for (int mt = 0; mt < 8; mt++) {
                float tp[2][4] = {};
                const int j = mt >> 1, bs = (mt & 1) * 2;
#pragma unroll
                for (int kk = 0; kk < 4; kk++) {
                    const uint32_t w0 = word4(v[kk][0], j), w1 = word4(v[kk][1], j), w2 = word4(v[kk][2], j), w3 = word4(v[kk][3], j);
                    const uint32_t a0 = __byte_perm(w0, w1, kSel[bs]), a1 = __byte_perm(w0, w1, kSel[bs + 1]),
                                   a2 = __byte_perm(w2, w3, kSel[bs]), a3 = __byte_perm(w2, w3, kSel[bs + 1]);
                    mma_e4m3(tp[0], a0, a1, a2, a3, pb[kk].x, pb[kk].y);
                    mma_e4m3(tp[1], a0, a1, a2, a3, pb[kk].z, pb[kk].w);
                }
#pragma unroll
                for (int nt = 0; nt < 2; nt++) {
                    acc[mt][nt][0] = acc[mt][nt][0] * alpha[2 * nt] + tp[nt][0];
                    acc[mt][nt][1] = acc[mt][nt][1] * alpha[2 * nt + 1] + tp[nt][1];
                    acc[mt][nt][2] = acc[mt][nt][2] * alpha[2 * nt] + tp[nt][2];
                    acc[mt][nt][3] = acc[mt][nt][3] * alpha[2 * nt + 1] + tp[nt][3];
                }
            }
        }
    }
    PH(5)
    if (prof) for (int k = 0; k < 7; k++) atomicAdd(&g_prof[k], ph[k]);
#pragma unroll
    for (int h = 0; h < 4; h++)
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) lsum[h] += __shfl_xor_sync(0xffffffffu, lsum[h], o);
    float *fm = reinterpret_cast<float *>(smem + C::fin), *fl = fm + NG * 16;
    const int hh[4] = {2 * qd, 2 * qd + 1, 8 + 2 * qd, 9 + 2 * qd};
    if (g == 0)
#pragma unroll
        for (int h = 0; h < 4; h++) {
            fl[(grp * 4 + w) * 16 + hh[h]] = lsum[h];
            if (w == 0) fm[grp * 16 + hh[h]] = m[h];
        }
    __syncthreads(); // also: every group is done with its pages
    float f[4];
#pragma unroll
    for (int h = 0; h < 4; h++) {
        float M = -INFINITY;
        for (int gg = 0; gg < NG; gg++) M = fmaxf(M, fm[gg * 16 + hh[h]]);
        const float Mu = M == -INFINITY ? 0.0f : M;
        float L = 0.0f;
        for (int gg = 0; gg < NG; gg++) {
            const float fg = ex2(fm[gg * 16 + hh[h]] - Mu);
            for (int ww = 0; ww < 4; ww++) L += fl[(gg * 4 + ww) * 16 + hh[h]] * fg;
        }
        f[h] = L > 0.0f ? ex2(m[h] - Mu) / L * a.kv_scale * (1.0f / 64.0f) : 0.0f;
        if (grp == 0 && w == 0 && g == 0) a.lse[b * H + hh[h]] = L > 0.0f ? (Mu + log2f(L)) * 0.69314718f : INFINITY;
    }
    float *ob = reinterpret_cast<float *>(gs + C::stage); // [16 heads][512 dims + 4] of this group
    constexpr int kOb = DV + 4;
#pragma unroll
    for (int mt = 0; mt < 8; mt++)
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            const int d = 128 * w + 16 * g + 2 * mt, h0 = 8 * nt + 2 * qd;
            ob[h0 * kOb + d] = acc[mt][nt][0] * f[2 * nt];
            ob[(h0 + 1) * kOb + d] = acc[mt][nt][1] * f[2 * nt + 1];
            ob[h0 * kOb + d + 1] = acc[mt][nt][2] * f[2 * nt];
            ob[(h0 + 1) * kOb + d + 1] = acc[mt][nt][3] * f[2 * nt + 1];
        }
    __syncthreads();
    for (int e = tid; e < H * DV / 2; e += C::threads) {
        const int h = e / (DV / 2), d = (e % (DV / 2)) * 2;
        float x0 = 0.0f, x1 = 0.0f;
        for (int gg = 0; gg < NG; gg++) {
            const float *o2 = reinterpret_cast<const float *>(smem + C::grp0 + gg * C::gbytes + C::stage);
            x0 += o2[h * kOb + d];
            x1 += o2[h * kOb + d + 1];
        }
        *reinterpret_cast<__nv_bfloat162 *>(a.o + ((int64_t)b * H + h) * DV + d) = __floats2bfloat162_rn(x0, x1);
    }
}

// Layout D: layout C's operands on `wgmma`, the one path to native e4m3 products on sm_90
// (mma.sync's e4m3 runs as two f16 HMMAs on widened operands). Per group (a warpgroup) and tile:
// S^T = K Q^T as 18 m64n32k32, A = the thread's staged key words as they are (its two rows, the
// m16n8k32 A fragment), B = Q^T by descriptor: [5 blocks of 4 k-steps][32 rows: 16 heads hi, 16
// lo][128 B], 128-byte swizzle; O^T += V^T P'^T as 8 m64n16k32 a k-step (M-block b: row 16 w + g
// is dim 128 w + 16 g + 2 b, row + 8 the next dim), A = layout C's prmt of the staged bytes, B =
// P'^T [16 heads][128 k-slots] by descriptor, written by the softmax as layout C writes it.
// TMP: each tile's P V summed from zero apart and added in fp32. PR: S^T's 18 k-steps in PR
// chains, each summed from zero and added into fp32 after a wait (the e4m3 sums keep ~14 bits).
// Every k-step's fence follows its A fragments: with one fence before the loop, ptxas serialized
// the products (C7520). Rows past the context are read as the page holds them (finite here);
// their scores become -inf.
template <int N>
__device__ __forceinline__ void pin(float (&d)[N]) { // accumulators held in place around a fence or a wait
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ uint64_t wdesc(uint32_t addr) { // K-major, 128-byte swizzle, sbo = 8 rows
    return (uint64_t)((addr & 0x3ffff) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | 1ull << 62;
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void fence_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wg_n32(float (&d)[16], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, 1, 1, 1;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
}
__device__ __forceinline__ void wg_n16(float (&d)[8], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t db, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db), "r"(accumulate));
}
template <int NG>
struct CfgD {
    static constexpr int threads = NG * 128;
    static constexpr int qt = 0;                   // [5][32][128 B]
    static constexpr int grp0 = 5 * 32 * 128;      // 20480
    static constexpr int page = PAGE * D;          // 36864
    static constexpr int stage = 0;                // [2][page]
    static constexpr int pt = 2 * page;            // [16 heads][128 B], swizzled
    static constexpr int red = pt + 2048;          // float [2][16 heads][4 warps]
    static constexpr int bar = red + 2 * 16 * 4 * 4;
    static constexpr int gbytes = 76800;           // 75 KB: the next group's pages 1024-aligned
    static constexpr int fin = grp0 + NG * gbytes;
    static constexpr int total = fin + NG * 16 * 4 + NG * 4 * 16 * 4 + 1024; // + the alignment pad
    static_assert(bar + 16 <= gbytes, "group layout");
};
constexpr bool PROF = false; // layout D: its phase clocks and mode 1 off (branches on one thread and on the mode; not measured with them on)
template <int NG, int TMP, int PR = 1>
__global__ void __launch_bounds__(NG * 128, 1) decode16d(Args a) {
    using C = CfgD<NG>;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    unsigned char *smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023); // swizzled blocks want 1024-byte alignment
    const int tid = threadIdx.x, grp = tid >> 7, t = tid & 127, w = t >> 5, l = t & 31, g = l >> 2, qd = l & 3;
    const int b = blockIdx.x, n = a.ctx[b], ntiles = (n + PAGE - 1) / PAGE;
    unsigned char *gs = smem + C::grp0 + grp * C::gbytes;
    const uint32_t qt_a = smem_u32(smem + C::qt), st_a = smem_u32(gs + C::stage), pt_a = smem_u32(gs + C::pt),
                   bar_a = smem_u32(gs + C::bar);
    if ((qt_a & 1023) != 0) __trap();
    float *red = reinterpret_cast<float *>(gs + C::red);
    const int *bt = a.bt + (int64_t)b * a.bt_stride;

    // Q^T: row r (head r % 16; hi for r < 16, lo after), k-step s2, slots 4 qq .. + 3
    for (int e = tid; e < 32 * 18 * 8; e += C::threads) {
        const int r = e / 144, s2 = (e % 144) >> 3, qq = e & 7, head = r & 15;
        const int s = 2 * s2 + (qq >> 2), q = qq & 3, d0 = 64 * (s >> 2) + 16 * q + 4 * (s & 3);
        uint32_t word = 0;
        for (int i = 0; i < 4; i++) {
            const float x = __bfloat162float(a.q[((int64_t)b * H + head) * D + d0 + i]) * 256.0f;
            const uint8_t h8 = e4m3_code(x);
            word |= (uint32_t)(r < 16 ? h8 : e4m3_code(x - e4m3_value(h8))) << (8 * i);
        }
        const int o = (s2 & 3) * 32 + 4 * qq;
        asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(qt_a + (s2 >> 2) * 4096 + r * 128 + (((o >> 4) ^ (r & 7)) << 4) + (o & 15)), "r"(word)
                     : "memory");
    }
    if (t == 0) {
        mbar_init(bar_a, 1);
        mbar_init(bar_a + 8, 1);
    }
    fence_async();
    __syncthreads();

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[i][e] = 0.0f;
    float m[4], lsum[4];
#pragma unroll
    for (int h = 0; h < 4; h++) m[h] = -INFINITY, lsum[h] = 0.0f;
    const int ka = 16 * w + g, kb = ka + 8;
    uint4 ra[9], rb[9];
    if (t == 0 && grp < ntiles) bulk_copy(st_a, a.cache + (int64_t)bt[grp] * PAGE * D, PAGE * D, bar_a);
    const bool prof = t == 0;
    unsigned long long ph[7] = {0, 0, 0, 0, 0, 0, 0}, c0 = clock64(), c1;
#undef PH
#define PH(k) if (PROF && prof) { c1 = clock64(); ph[k] += c1 - c0; c0 = c1; }
    int it = 0;
    for (int i = grp; i < ntiles; i += NG, it++) {
        const int buf = it & 1;
        const uint32_t pg = st_a + buf * C::page;
        PH(6)
        mbar_wait(bar_a + 8 * buf, (it >> 1) & 1);
#pragma unroll
        for (int j = 0; j < 9; j++) { // rows past the context are the page's own (finite) bytes: their scores become -inf
            ra[j] = lds16(pg + ka * D + 16 * qd + 64 * j);
            rb[j] = lds16(pg + kb * D + 16 * qd + 64 * j);
        }
        PH(0)
        group_sync(grp); // (A) the group is done with P'^T and the other page
        PH(1)
        if (t == 0 && i + NG < ntiles)
            bulk_copy(st_a + (buf ^ 1) * C::page, a.cache + (int64_t)bt[i + NG] * PAGE * D, PAGE * D, bar_a + 8 * (buf ^ 1));
        float sd[16];
#pragma unroll
        for (int e = 0; e < 16; e++) sd[e] = 0.0f;
        // PR batches of 18 / PR k-steps, each summed from zero by the products and added here in
        // fp32 (the e4m3 products' own sums keep fewer bits than fp32)
#pragma unroll
        for (int pr = 0; pr < PR; pr++) {
            float sp[16];
#pragma unroll
            for (int e = 0; e < 16; e++) sp[e] = 0.0f;
            pin(sp);
            wg_fence();
#pragma unroll
            for (int s2 = pr * (18 / PR); s2 < (pr + 1) * (18 / PR); s2++)
                wg_n32(sp, word_of(ra, 2 * s2), word_of(rb, 2 * s2), word_of(ra, 2 * s2 + 1), word_of(rb, 2 * s2 + 1),
                       wdesc(qt_a + (s2 >> 2) * 4096 + (s2 & 3) * 32));
            wg_commit();
            wg_wait<0>();
            pin(sp);
#pragma unroll
            for (int e = 0; e < 16; e++) sd[e] += sp[e];
        }
        PH(2)
        float x[8];
        const bool oka = i * PAGE + ka < n, okb = i * PAGE + kb < n;
        const float sl = a.scale_log2 * (1.0f / 256.0f);
#pragma unroll
        for (int e = 0; e < 8; e++) x[e] = ((e & 2) ? okb : oka) ? (sd[e] + sd[e + 8]) * sl : -INFINITY;
        float mx[4] = {fmaxf(x[0], x[2]), fmaxf(x[1], x[3]), fmaxf(x[4], x[6]), fmaxf(x[5], x[7])};
#pragma unroll
        for (int h = 0; h < 4; h++)
#pragma unroll
            for (int o = 4; o < 32; o <<= 1) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], o));
        const int par = it & 1;
        const int hh[4] = {2 * qd, 2 * qd + 1, 8 + 2 * qd, 9 + 2 * qd};
        if (g == 0)
#pragma unroll
            for (int h = 0; h < 4; h++) red[(par * 16 + hh[h]) * 4 + w] = mx[h];
        group_sync(grp); // (C)
        PH(3)
        float alpha[4], mu[4];
#pragma unroll
        for (int h = 0; h < 4; h++) {
            const float4 r4 = *reinterpret_cast<const float4 *>(red + (par * 16 + hh[h]) * 4);
            const float tm = fmaxf(fmaxf(r4.x, r4.y), fmaxf(r4.z, r4.w));
            const float mn = fmaxf(m[h], tm);
            mu[h] = mn == -INFINITY ? 0.0f : mn;
            alpha[h] = ex2(m[h] - mu[h]);
            m[h] = mn;
        }
        float p[8];
#pragma unroll
        for (int e = 0; e < 8; e++) p[e] = ex2(x[e] - mu[(e >> 2) * 2 + (e & 1)]);
        lsum[0] = lsum[0] * alpha[0] + p[0] + p[2];
        lsum[1] = lsum[1] * alpha[1] + p[1] + p[3];
        lsum[2] = lsum[2] * alpha[2] + p[4] + p[6];
        lsum[3] = lsum[3] * alpha[3] + p[5] + p[7];
        {
            const int half = g >> 2, qr = g & 3, o = w * 32 + 16 * half + 4 * qr;
#pragma unroll
            for (int h = 0; h < 4; h++) {
                const int head = hh[h], e0 = (h >> 1) * 4 + (h & 1);
                const uint32_t word = p_terms(p[e0], p[e0 + 2]);
                asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(pt_a + (head >> 3) * 1024 + (head & 7) * 128 + (((o >> 4) ^ (head & 7)) << 4) + (o & 15)),
                             "r"(word)
                             : "memory");
            }
        }
        fence_async();
        group_sync(grp); // (B) P'^T is in
        PH(4)
        if (PROF && (a.mode & 1)) continue;
        constexpr uint32_t kSel[4] = {0x4400u, 0x5511u, 0x6622u, 0x7733u};
        const uint32_t vbase = pg + 128 * w + 16 * g;
        float tp[TMP ? 8 : 1][8];
        if constexpr (!TMP) {
#pragma unroll
            for (int mb = 0; mb < 8; mb++)
#pragma unroll
                for (int e = 0; e < 8; e++) acc[mb][e] *= alpha[(e >> 2) * 2 + (e & 1)];
        }
#pragma unroll
        for (int mb = 0; mb < 8; mb++) {
            if constexpr (TMP) pin(tp[mb]);
            else pin(acc[mb]);
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            const int k0 = 16 * kk + qd;
            const uint4 v0 = lds16(vbase + k0 * D), v1 = lds16(vbase + (k0 + 8) * D), v2 = lds16(vbase + (k0 + 4) * D),
                        v3 = lds16(vbase + (k0 + 12) * D);
            const uint64_t db = wdesc(pt_a + kk * 32);
            uint32_t af[8][4]; // this k-step's A fragments, all built before the fence
#pragma unroll
            for (int mb = 0; mb < 8; mb++) {
                const int j = mb >> 1, bs = (mb & 1) * 2;
                const uint32_t w0 = word4(v0, j), w1 = word4(v1, j), w2 = word4(v2, j), w3 = word4(v3, j);
                af[mb][0] = __byte_perm(w0, w1, kSel[bs]), af[mb][1] = __byte_perm(w0, w1, kSel[bs + 1]);
                af[mb][2] = __byte_perm(w2, w3, kSel[bs]), af[mb][3] = __byte_perm(w2, w3, kSel[bs + 1]);
            }
            wg_fence();
#pragma unroll
            for (int mb = 0; mb < 8; mb++) {
                if constexpr (TMP) wg_n16(tp[mb], af[mb][0], af[mb][1], af[mb][2], af[mb][3], db, kk);
                else wg_n16(acc[mb], af[mb][0], af[mb][1], af[mb][2], af[mb][3], db, 1);
            }
            wg_commit();
        }
        wg_wait<0>();
#pragma unroll
        for (int mb = 0; mb < 8; mb++) {
            if constexpr (TMP) pin(tp[mb]);
            else pin(acc[mb]);
        }
        if constexpr (TMP) {
#pragma unroll
            for (int mb = 0; mb < 8; mb++)
#pragma unroll
                for (int e = 0; e < 8; e++) acc[mb][e] = acc[mb][e] * alpha[(e >> 2) * 2 + (e & 1)] + tp[mb][e];
        }
    }
    PH(5)
    if (PROF && prof) for (int k = 0; k < 7; k++) atomicAdd(&g_prof[k], ph[k]);
#pragma unroll
    for (int h = 0; h < 4; h++)
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) lsum[h] += __shfl_xor_sync(0xffffffffu, lsum[h], o);
    float *fm = reinterpret_cast<float *>(smem + C::fin), *fl = fm + NG * 16;
    const int hh[4] = {2 * qd, 2 * qd + 1, 8 + 2 * qd, 9 + 2 * qd};
    if (g == 0)
#pragma unroll
        for (int h = 0; h < 4; h++) {
            fl[(grp * 4 + w) * 16 + hh[h]] = lsum[h];
            if (w == 0) fm[grp * 16 + hh[h]] = m[h];
        }
    __syncthreads();
    float f[4];
#pragma unroll
    for (int h = 0; h < 4; h++) {
        float M = -INFINITY;
        for (int gg = 0; gg < NG; gg++) M = fmaxf(M, fm[gg * 16 + hh[h]]);
        const float Mu = M == -INFINITY ? 0.0f : M;
        float L = 0.0f;
        for (int gg = 0; gg < NG; gg++) {
            const float fg = ex2(fm[gg * 16 + hh[h]] - Mu);
            for (int ww = 0; ww < 4; ww++) L += fl[(gg * 4 + ww) * 16 + hh[h]] * fg;
        }
        f[h] = L > 0.0f ? ex2(m[h] - Mu) / L * a.kv_scale * (1.0f / 64.0f) : 0.0f;
        if (grp == 0 && w == 0 && g == 0) a.lse[b * H + hh[h]] = L > 0.0f ? (Mu + log2f(L)) * 0.69314718f : INFINITY;
    }
    float *ob = reinterpret_cast<float *>(gs + C::stage);
    constexpr int kOb = DV + 4;
#pragma unroll
    for (int mb = 0; mb < 8; mb++)
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            const int d = 128 * w + 16 * g + 2 * mb, h0 = 8 * nt + 2 * qd;
            ob[h0 * kOb + d] = acc[mb][4 * nt + 0] * f[2 * nt];
            ob[(h0 + 1) * kOb + d] = acc[mb][4 * nt + 1] * f[2 * nt + 1];
            ob[h0 * kOb + d + 1] = acc[mb][4 * nt + 2] * f[2 * nt];
            ob[(h0 + 1) * kOb + d + 1] = acc[mb][4 * nt + 3] * f[2 * nt + 1];
        }
    __syncthreads();
    for (int e = tid; e < H * DV / 2; e += C::threads) {
        const int h = e / (DV / 2), d = (e % (DV / 2)) * 2;
        float x0 = 0.0f, x1 = 0.0f;
        for (int gg = 0; gg < NG; gg++) {
            const float *o2 = reinterpret_cast<const float *>(smem + C::grp0 + gg * C::gbytes + C::stage);
            x0 += o2[h * kOb + d];
            x1 += o2[h * kOb + d + 1];
        }
        *reinterpret_cast<__nv_bfloat162 *>(a.o + ((int64_t)b * H + h) * DV + d) = __floats2bfloat162_rn(x0, x1);
    }
}

static float e4m3_slow(uint8_t v) {
    const int s = v >> 7, e = (v >> 3) & 15, mnt = v & 7;
    if (e == 15 && mnt == 7) return NAN;
    const float x = e == 0 ? ldexpf((float)mnt / 8.0f, -6) : ldexpf(1.0f + mnt / 8.0f, e - 7);
    return s ? -x : x;
}
static float g_e4m3[256];
static float e4m3(uint8_t v) { return g_e4m3[v]; }
static float bf(__nv_bfloat16 x) { return __bfloat162float(x); }

// LB < 0: layout A (decode16<NG, CH, CV, SM>); LB = 0 or 1: layout B (decode16k<NG, KEEP = LB>);
// LB = 2 or 3: layout C (decode16c<NG, TMP = LB - 2>); LB = 4 or 5: layout D (decode16d<NG, TMP = LB - 4>)
template <int NG, int CH, int CV = 0, int SM = 0, int LB = -1>
static void run(StudyTimer &tm, int B, int mean, bool ragged, int reps, int mode = 0) {
    std::vector<int> ctx(B);
    srand(1234 + B + mean);
    for (int b = 0; b < B; b++) ctx[b] = ragged ? (int)(mean * (0.5 + (double)rand() / RAND_MAX)) : mean;
    int maxp = 0;
    for (int b = 0; b < B; b++) maxp = std::max(maxp, (ctx[b] + PAGE - 1) / PAGE);
    int pages = 0;
    for (int b = 0; b < B; b++) pages += (ctx[b] + PAGE - 1) / PAGE;
    std::vector<int> perm(pages);
    for (int i = 0; i < pages; i++) perm[i] = i;
    for (int i = pages - 1; i > 0; i--) std::swap(perm[i], perm[rand() % (i + 1)]);
    std::vector<int> bt((size_t)B * maxp, 0);
    int k = 0;
    for (int b = 0; b < B; b++)
        for (int j = 0; j < (ctx[b] + PAGE - 1) / PAGE; j++) bt[(size_t)b * maxp + j] = perm[k++];
    const size_t cbytes = (size_t)pages * PAGE * D;
    std::vector<uint8_t> cache(cbytes);
    uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)(B * 131 + mean); // xorshift: rand() per byte took seconds a row
    for (size_t i = 0; i < cbytes; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        cache[i] = (uint8_t)((x >> 8) % 0x7e) | (uint8_t)(x & 0x80); // any finite e4m3 code below 0x7e, either sign
    }
    std::vector<__nv_bfloat16> q((size_t)B * H * D);
    for (auto &x : q) x = __float2bfloat16((float)rand() / RAND_MAX * 2.0f - 1.0f);
    const float kv_scale = 0.05f, sm_scale = 1.0f / sqrtf(576.0f);
    uint8_t *dc; __nv_bfloat16 *dq, *dout; int *dbt, *dctx; float *dlse;
    CK(cudaMalloc(&dc, cbytes)); CK(cudaMalloc(&dq, q.size() * 2)); CK(cudaMalloc(&dout, (size_t)B * H * DV * 2));
    CK(cudaMalloc(&dbt, bt.size() * 4)); CK(cudaMalloc(&dctx, B * 4)); CK(cudaMalloc(&dlse, B * H * 4));
    CK(cudaMemcpy(dc, cache.data(), cbytes, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dq, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dbt, bt.data(), bt.size() * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dctx, ctx.data(), B * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(dout, 0xff, (size_t)B * H * DV * 2));
    uint32_t *dsink;
    CK(cudaMalloc(&dsink, (size_t)B * 512 * 4));
    Args a{dq, dc, dbt, maxp, dctx, dout, dlse, sm_scale * kv_scale * 1.4426950408889634f, kv_scale, mode, dsink};
    constexpr int kSmem = LB < 0 ? Cfg<NG>::total : LB < 2 ? CfgB<NG>::total : LB < 4 ? CfgC<NG>::total : CfgD<NG>::total, kThreads = NG * 128;
    void (*kernel)(Args);
    if constexpr (LB < 0) kernel = decode16<NG, CH, CV, SM>;
    else if constexpr (LB < 2) kernel = decode16k<NG, LB>;
    else if constexpr (LB < 4) kernel = decode16c<NG, LB - 2>;
    else if constexpr (LB < 6) kernel = decode16d<NG, LB - 4>;
    else kernel = decode16d<NG, 0, LB == 6 ? 3 : LB == 7 ? 6 : 18>;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    kernel<<<B, kThreads, kSmem, tm.st>>>(a);
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(tm.st));
    // check some requests
    std::vector<__nv_bfloat16> o((size_t)B * H * DV);
    std::vector<float> lse(B * H);
    CK(cudaMemcpy(o.data(), dout, o.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse.data(), dlse, lse.size() * 4, cudaMemcpyDeviceToHost));
    double maxerr = 0, maxref = 0, lerr = 0;
    for (int b = 0; b < ((mode & 51) ? 0 : B); b += B / 2) {
        const int nb = ctx[b];
        std::vector<double> s(nb);
        for (int h = 0; h < H; h++) {
            double mx = -1e300;
            for (int kk = 0; kk < nb; kk++) {
                const uint8_t *row = &cache[((size_t)bt[(size_t)b * maxp + kk / PAGE] * PAGE + kk % PAGE) * D];
                double acc = 0;
                for (int d = 0; d < D; d++) acc += (double)bf(q[((size_t)b * H + h) * D + d]) * e4m3(row[d]);
                s[kk] = acc * kv_scale * sm_scale;
                mx = std::max(mx, s[kk]);
            }
            double L = 0;
            for (int kk = 0; kk < nb; kk++) L += exp(s[kk] - mx);
            for (int d = 0; d < DV; d++) {
                double acc = 0;
                for (int kk = 0; kk < nb; kk++) {
                    const uint8_t *row = &cache[((size_t)bt[(size_t)b * maxp + kk / PAGE] * PAGE + kk % PAGE) * D];
                    acc += exp(s[kk] - mx) * e4m3(row[d]) * kv_scale;
                }
                const double ref = acc / L, got = bf(o[((size_t)b * H + h) * DV + d]);
                maxerr = std::max(maxerr, fabs(ref - got));
                maxref = std::max(maxref, fabs(ref));
            }
            lerr = std::max(lerr, fabs(mx + log(L) - lse[b * H + h]));
        }
    }
    const double us = tm.median_us(reps, [&](int) { kernel<<<B, kThreads, kSmem, tm.st>>>(a); });
    {
        unsigned long long hp[8];
        CK(cudaMemcpyFromSymbol(hp, g_prof, sizeof hp));
        const double tiles = (double)(reps + 6) * B * ((mean + 63) / 64); // the check's launch, 5 untimed, reps timed
        if (LB < 0 || LB >= 2)
            printf("  cycles per group-tile (each group's first thread): wait+read rows %.0f, bar A %.0f, S^T %.0f, max+bar C %.0f, "
                   "softmax+P+bar B %.0f, P V %.0f (loop end %.0f)\n",
                   hp[0] / tiles, hp[1] / tiles, hp[2] / tiles, hp[3] / tiles, hp[4] / tiles, hp[6] / tiles, hp[5] / tiles);
        else
            printf("  cycles per group-tile (each group's first thread): page wait %.0f, S %.0f, S stores+barrier %.0f, sums+softmax %.0f, "
                   "P V %.0f, loop top %.0f (end %.0f)\n",
                   hp[0] / tiles, hp[1] / tiles, hp[2] / tiles, hp[3] / tiles, hp[4] / tiles, hp[6] / tiles, hp[5] / tiles);
        unsigned long long z[8] = {};
        CK(cudaMemcpyToSymbol(g_prof, z, sizeof z));
    }
    size_t keys = 0;
    for (int b = 0; b < B; b++) keys += ctx[b];
    const double bytes = (double)keys * D + (double)B * H * (D * 2 + DV * 2);
    printf("LB %d SM %d CV %d mode %d CH=%d NG=%d B=%d ctx=%d%s: %.1f us, %.0f GB/s  (max |err| %.3g of max |ref| %.3g, lse err %.3g)\n", LB, SM, CV, mode, CH, NG, B, mean, ragged ? " ragged" : "", us,
           bytes / us / 1e3, maxerr, maxref, lerr);
    cudaFree(dsink);
    cudaFree(dc); cudaFree(dq); cudaFree(dout); cudaFree(dbt); cudaFree(dctx); cudaFree(dlse);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    for (int v = 0; v < 256; v++) g_e4m3[v] = e4m3_slow((uint8_t)v);
    study_device();
    StudyTimer tm;
    { // copy ceiling: device-to-device memcpy of 2 x 1 GB
        const size_t n = (size_t)1 << 30;
        void *x, *y;
        CK(cudaMalloc(&x, n)); CK(cudaMalloc(&y, n));
        const double us = tm.median_us(10, [&](int) { CK(cudaMemcpyAsync(y, x, n, cudaMemcpyDeviceToDevice, tm.st)); });
        printf("memcpy d2d: %.0f GB/s\n", 2.0 * n / (us * 1e3));
        cudaFree(x); cudaFree(y);
    }
    const int reps = argc > 1 ? atoi(argv[1]) : 20;
    if (argc > 2 && argv[2][0] == 'd') { // layout A beside layout D
        for (int k = 0; k < 2; k++) {
            run<2, 2, 0, 0>(tm, 128, 4096, false, reps, 0);
            run<2, 0, 0, 0, 4>(tm, 128, 4096, false, reps, 0);
            run<2, 0, 0, 0, 5>(tm, 128, 4096, false, reps, 0);
        }
        for (int k = 0; k < 2; k++) { // S^T promoted to fp32 every 6, 3 and 1 k-steps
            run<2, 0, 0, 0, 6>(tm, 128, 4096, false, reps, 0);
            run<2, 0, 0, 0, 7>(tm, 128, 4096, false, reps, 0);
            run<2, 0, 0, 0, 8>(tm, 128, 4096, false, reps, 0);
        }
        run<2, 2, 0, 0>(tm, 128, 8192, false, reps, 0);
        run<2, 0, 0, 0, 4>(tm, 128, 8192, false, reps, 0);
        run<2, 0, 0, 0, 5>(tm, 128, 8192, false, reps, 0);
        run<2, 0, 0, 0, 6>(tm, 128, 8192, false, reps, 0);
        run<2, 0, 0, 0, 7>(tm, 128, 8192, false, reps, 0);
        run<2, 2, 0, 0>(tm, 128, 4096, true, reps, 0);
        run<2, 0, 0, 0, 4>(tm, 128, 4096, true, reps, 0);
        run<2, 0, 0, 0, 7>(tm, 128, 4096, true, reps, 0);
        return 0;
    }
    if (argc > 2 && argv[2][0] == 'c') { // layout A beside layout C
        for (int k = 0; k < 2; k++) {
            run<2, 2, 0, 0>(tm, 128, 4096, false, reps, 0);
            run<2, 0, 0, 0, 2>(tm, 128, 4096, false, reps, 0);
            run<2, 0, 0, 0, 3>(tm, 128, 4096, false, reps, 0);
        }
        run<2, 0, 0, 0, 2>(tm, 128, 4096, false, reps, 1); // C without P V
        run<2, 0, 0, 0, 2>(tm, 128, 4096, false, reps, 16); // C's P V without prmt (wrong values)
        run<2, 0, 0, 0, 2>(tm, 128, 4096, false, reps, 32); // C's P V without V loads (wrong values)
        run<2, 0, 0, 0, 2>(tm, 128, 4096, false, reps, 48); // neither
        run<2, 2, 0, 0>(tm, 128, 8192, false, reps, 0);
        run<2, 0, 0, 0, 2>(tm, 128, 8192, false, reps, 0);
        run<2, 0, 0, 0, 3>(tm, 128, 8192, false, reps, 0);
        run<2, 2, 0, 0>(tm, 128, 4096, true, reps, 0);
        run<2, 0, 0, 0, 3>(tm, 128, 4096, true, reps, 0);
        return 0;
    }
    run<2, 2, 0, 0>(tm, 128, 4096, false, reps, 0); // as designed
    run<2, 2, 0, 0>(tm, 128, 8192, false, reps, 0);
    run<2, 2, 0, 0>(tm, 132, 4096, false, reps, 0);
    run<2, 2, 0, 0>(tm, 128, 4096, true, reps, 0);  // ragged: one block a request is uneven
    for (int mode : {8, 1, 2, 3}) run<2, 2, 0, 0>(tm, 128, 4096, false, reps, mode);
    run<2, 2, 1, 0>(tm, 128, 4096, false, reps, 0);
    run<2, 2, 3, 0>(tm, 128, 4096, false, reps, 0);
    run<2, 2, 2, 0>(tm, 128, 4096, false, reps, 0);
    run<2, 2, 0, 1>(tm, 128, 4096, false, reps, 0);
    run<2, 2, 0, 2>(tm, 128, 4096, false, reps, 0);
    run<2, 2, 0, 3>(tm, 128, 4096, false, reps, 0);
    run<2, 4, 0, 0>(tm, 128, 4096, false, reps, 0);
    run<2, 0, 0, 0, 0>(tm, 128, 4096, false, reps, 0); // layout B, the rows read again for P V
    run<2, 0, 0, 0, 1>(tm, 128, 4096, false, reps, 0); // layout B, the rows kept in registers (spills)
    run<2, 0, 0, 0, 1>(tm, 128, 4096, false, reps, 1);
    return 0;
}
