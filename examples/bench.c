/* bench.c - `make bench`: the ceilings of this GPU and the decode rows of BENCHMARKS.md,
 * measured in one run.
 *
 * Ceilings: device copy bandwidth (a 16-byte copy kernel and the runtime's device-to-device
 * memcpy, the faster counts; bytes read + written) and the bf16 GEMM rate (8192^3 through
 * cuBLAS / hipBLAS where the build has it).
 * Decode rows: contexts uniform in [0.5, 1.5] x mean (fixed seed), shuffled page pool,
 * several cache copies rotated so that the bytes read are several times the L2; each run
 * timed with device events after warm-up; the median is reported.
 * Bytes: every KV row read once + q + o. FLOPs: sum 2 * H * q_len * ctx * (576 + 512).
 * Prefill rows (P1-P4): H 128, dqk 192, dv 128; FLOPs 2 * H * sum(sq * sk) * (192 + 128),
 * halved when causal; without a plan (grid) and through the persistent plan (bf16, fp8).
 * The host planner's cost (batch 256) is timed on the CPU.
 * Usage: bench [ROW ...]   (no argument: every row) */
#define _POSIX_C_SOURCE 199309L
#define AITER_MLA_IMPLEMENTATION
#include "../aiter_mla.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef AITER_MLA_NO_GPU
int main(void) {
    fprintf(stderr, "bench needs a GPU build (GPU=cuda or GPU=hip)\n");
    return 1;
}
#else
#include "gpu.h"

#define TRY(call)                                                                                          \
    do {                                                                                                   \
        aiter_mla_status st_ = (call);                                                                     \
        if (st_ != AITER_MLA_OK) {                                                                         \
            fprintf(stderr, "%s: %s: %s\n", #call, aiter_mla_status_string(st_), aiter_mla_last_error());   \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}
static float median(float *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}
static double host_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static void *g_stream;
static gpu_timer *g_timer;

/* ---- ceilings ------------------------------------------------------------------------- */
static double copy_ceiling_gbs(double *kernel_gbs, double *memcpy_gbs) {
    const size_t bytes = (size_t)1 << 31;
    void *src = gpu_malloc(bytes), *dst = gpu_malloc(bytes);
    float t[20];
    int i, which;
    gpu_fill_uniform(src, (long long)(bytes / 4), AITER_MLA_F32, -1.0f, 1.0f, 1, g_stream);
    for (which = 0; which < 2; which++) {
        for (i = 0; i < 23; i++) {
            gpu_timer_start(g_timer, g_stream);
            if (which == 0) gpu_copy_kernel(dst, src, bytes, g_stream);
            else gpu_memcpy_d2d(dst, src, bytes, g_stream);
            float ms = gpu_timer_stop_ms(g_timer, g_stream);
            if (i >= 3) t[i - 3] = ms;
        }
        *(which == 0 ? kernel_gbs : memcpy_gbs) = 2.0 * bytes / (median(t, 20) * 1e-3) / 1e9;
    }
    gpu_free(src);
    gpu_free(dst);
    return *kernel_gbs > *memcpy_gbs ? *kernel_gbs : *memcpy_gbs;
}

static double gemm_ceiling_tflops(void) {
    const int n = 8192;
    float t[20];
    int i;
    if (!gpu_gemm_bf16_available()) return 0.0;
    void *a = gpu_malloc((size_t)n * n * 2), *b = gpu_malloc((size_t)n * n * 2), *c = gpu_malloc((size_t)n * n * 2);
    gpu_fill_uniform(a, (long long)n * n, AITER_MLA_BF16, -1.0f, 1.0f, 2, g_stream);
    gpu_fill_uniform(b, (long long)n * n, AITER_MLA_BF16, -1.0f, 1.0f, 3, g_stream);
    for (i = 0; i < 25; i++) {
        gpu_timer_start(g_timer, g_stream);
        gpu_gemm_bf16(n, n, n, a, b, c, g_stream);
        float ms = gpu_timer_stop_ms(g_timer, g_stream);
        if (i >= 5) t[i - 5] = ms;
    }
    gpu_free(a);
    gpu_free(b);
    gpu_free(c);
    return 2.0 * n * (double)n * n / (median(t, 20) * 1e-3) / 1e12;
}

/* ---- decode rows ---------------------------------------------------------------------- */
typedef struct bench_row {
    const char *id;
    int heads, q_len, batch, mean_ctx, page;
    aiter_mla_dtype kv;
} bench_row;

static void bench_decode(const bench_row *r, double copy_gbs, double gemm_tflops, int num_cu, size_t l2) {
    const int B = r->batch, H = r->heads, P = r->page;
    const size_t kv_e = aiter_mla_dtype_size(r->kv);
    int32_t *qo = (int32_t *)malloc((B + 1) * 4), *kvp = (int32_t *)malloc((B + 1) * 4), *last = (int32_t *)malloc(B * 4);
    int64_t pages = 0, keys = 0, i;
    int b, s, it;
    qo[0] = kvp[0] = 0;
    for (b = 0; b < B; b++) {
        int32_t ctx = B == 1 ? r->mean_ctx : (int32_t)(r->mean_ctx * (0.5 + frand()));
        int32_t np = (ctx + P - 1) / P;
        qo[b + 1] = qo[b] + r->q_len;
        kvp[b + 1] = kvp[b] + np;
        last[b] = ctx - (np - 1) * P;
        pages += np;
        keys += ctx;
    }
    int32_t *idx = (int32_t *)malloc((size_t)pages * 4);
    for (i = 0; i < pages; i++) idx[i] = (int32_t)i;
    for (i = pages - 1; i > 0; i--) {
        int64_t k = (int64_t)(frand() * (double)(i + 1));
        int32_t t = idx[i];
        idx[i] = idx[k];
        idx[k] = t;
    }
    const int64_t T = qo[B];
    const size_t cache_bytes = (size_t)pages * P * 576 * kv_e;
    int sets = (int)((4 * l2 + cache_bytes - 1) / cache_bytes);
    if (sets < 1) sets = 1;
    if (sets > 64) sets = 64;

    aiter_mla_decode_plan_desc pd = {0};
    aiter_mla_decode_plan_info info;
    pd.max_batch = B;
    pd.num_heads = H;
    pd.max_q_len = r->q_len;
    pd.num_cu = num_cu;
    pd.page_size = P;
    TRY(aiter_mla_decode_plan_get_info(&pd, &info));
    int32_t *plan = (int32_t *)gpu_host_alloc_pinned((size_t)info.plan_ints * 4);
    TRY(aiter_mla_decode_plan_build(&info, qo, kvp, last, B, plan));

    void **d_cache = (void **)malloc(sizeof(void *) * sets), **d_q = (void **)malloc(sizeof(void *) * sets);
    for (s = 0; s < sets; s++) {
        d_cache[s] = gpu_malloc(cache_bytes);
        d_q[s] = gpu_malloc((size_t)T * H * 576 * 2);
        gpu_fill_uniform(d_cache[s], (long long)(cache_bytes / kv_e), r->kv, -1.0f, 1.0f, 100 + s, g_stream);
        gpu_fill_uniform(d_q[s], (long long)T * H * 576, AITER_MLA_BF16, -1.0f, 1.0f, 200 + s, g_stream);
    }
    int32_t *d_meta = (int32_t *)gpu_malloc((size_t)(3 * B + 2) * 4), *d_idx = (int32_t *)gpu_malloc((size_t)pages * 4);
    int32_t *d_plan = (int32_t *)gpu_malloc((size_t)info.plan_ints * 4);
    void *d_ws = gpu_malloc(info.workspace_bytes), *d_o = gpu_malloc((size_t)T * H * 512 * 2);
    float *d_lse = (float *)gpu_malloc((size_t)T * H * 4);
    gpu_upload(d_meta, qo, (B + 1) * 4);
    gpu_upload(d_meta + B + 1, kvp, (B + 1) * 4);
    gpu_upload(d_meta + 2 * B + 2, last, B * 4);
    gpu_upload(d_idx, idx, (size_t)pages * 4);
    gpu_upload(d_plan, plan, (size_t)info.plan_ints * 4);

    aiter_mla_decode_args a = {0};
    a.num_pages = pages;
    a.qo_indptr = d_meta;
    a.kv_indptr = d_meta + B + 1;
    a.kv_last_page_lens = d_meta + 2 * B + 2;
    a.kv_indices = d_idx;
    a.o = d_o;
    a.lse = d_lse;
    a.plan = d_plan;
    a.plan_info = &info;
    a.workspace = d_ws;
    a.workspace_bytes = info.workspace_bytes;
    a.batch = B;
    a.num_heads = H;
    a.page_size = P;
    a.kv_dtype = r->kv;
    a.kv_scale = 1.0f;
    a.sm_scale = 0.1352f;

    /* warm-up, then size the run to about half a second */
    double t0 = host_us();
    for (it = 0; it < 3; it++) {
        a.kv_cache = d_cache[it % sets];
        a.q = d_q[it % sets];
        TRY(aiter_mla_decode(&a, g_stream));
    }
    gpu_sync();
    double per = (host_us() - t0) / 3;
    int iters = (int)(5e5 / (per > 1 ? per : 1));
    if (iters < 10) iters = 10;
    if (iters > 200) iters = 200;
    float *t = (float *)malloc(sizeof(float) * iters);
    for (it = 0; it < iters; it++) {
        a.kv_cache = d_cache[it % sets];
        a.q = d_q[it % sets];
        gpu_timer_start(g_timer, g_stream);
        TRY(aiter_mla_decode(&a, g_stream));
        t[it] = gpu_timer_stop_ms(g_timer, g_stream);
    }
    gpu_sync();
    double us = median(t, iters) * 1e3;
    double bytes = (double)keys * 576 * kv_e + (double)T * H * (576 + 512) * 2;
    double flops = 2.0 * H * r->q_len * (double)keys * (576 + 512);
    double gbs = bytes / (us * 1e-6) / 1e9, tfl = flops / (us * 1e-6) / 1e12;
    printf("| %-8s | %3d | %d | %5d | %5d | %3d | %-5s | %9.1f | %7.0f | %6.1f | %5.1f %% | %5.1f %% |\n", r->id, H,
           r->q_len, B, r->mean_ctx, P, r->kv == AITER_MLA_BF16 ? "bf16" : "fp8", us, gbs, tfl, 100.0 * gbs / copy_gbs,
           gemm_tflops > 0 ? 100.0 * tfl / gemm_tflops : 0.0);
    fflush(stdout);

    for (s = 0; s < sets; s++) {
        gpu_free(d_cache[s]);
        gpu_free(d_q[s]);
    }
    gpu_free(d_meta); gpu_free(d_idx); gpu_free(d_plan); gpu_free(d_ws); gpu_free(d_o); gpu_free(d_lse);
    gpu_host_free_pinned(plan);
    free(d_cache); free(d_q); free(qo); free(kvp); free(last); free(idx); free(t);
}

/* ---- prefill rows ----------------------------------------------------------------------- */
typedef struct prefill_row {
    const char *id;
    int heads, batch, sq, sk, causal;
    aiter_mla_dtype dtype;
    int persistent; /* through the persistent plan (AITER's fp8 prefill path) */
} prefill_row;

static void bench_prefill(const prefill_row *r, double gemm_tflops, int num_cu) {
    const int B = r->batch, H = r->heads, DQK = 192, DV = 128;
    const size_t e = aiter_mla_dtype_size(r->dtype);
    const int64_t Tq = (int64_t)B * r->sq, Tk = (int64_t)B * r->sk;
    int32_t *cq = (int32_t *)malloc((B + 1) * 4), *ck = (int32_t *)malloc((B + 1) * 4);
    int b, it;
    for (b = 0; b <= B; b++) {
        cq[b] = b * r->sq;
        ck[b] = b * r->sk;
    }
    void *d_q = gpu_malloc((size_t)Tq * H * DQK * e), *d_k = gpu_malloc((size_t)Tk * H * DQK * e);
    void *d_v = gpu_malloc((size_t)Tk * H * DV * e), *d_o = gpu_malloc((size_t)Tq * H * DV * 2);
    float *d_lse = (float *)gpu_malloc((size_t)Tq * H * 4);
    int32_t *d_cu = (int32_t *)gpu_malloc((size_t)(2 * B + 2) * 4), *d_plan = NULL;
    void *d_ws = NULL;
    gpu_fill_uniform(d_q, (long long)Tq * H * DQK, r->dtype, -1.0f, 1.0f, 300, g_stream);
    gpu_fill_uniform(d_k, (long long)Tk * H * DQK, r->dtype, -1.0f, 1.0f, 301, g_stream);
    gpu_fill_uniform(d_v, (long long)Tk * H * DV, r->dtype, -1.0f, 1.0f, 302, g_stream);
    gpu_upload(d_cu, cq, (B + 1) * 4);
    gpu_upload(d_cu + B + 1, ck, (B + 1) * 4);

    aiter_mla_prefill_args a = {0};
    aiter_mla_prefill_plan_info info;
    int32_t *plan = NULL;
    a.q = d_q;
    a.k = d_k;
    a.v = d_v;
    a.o = d_o;
    a.lse = d_lse;
    a.cu_seqlens_q = d_cu;
    a.cu_seqlens_k = d_cu + B + 1;
    a.batch = B;
    a.max_seqlen_q = r->sq;
    a.num_heads = H;
    a.dqk = DQK;
    a.dv = DV;
    a.causal = r->causal;
    a.qkv_dtype = r->dtype;
    a.o_dtype = AITER_MLA_BF16;
    if (r->persistent) {
        aiter_mla_prefill_plan_desc pd = {0};
        pd.max_batch = B;
        pd.max_q_tokens = Tq;
        pd.num_heads = H;
        pd.num_cu = num_cu;
        pd.dv = DV;
        TRY(aiter_mla_prefill_plan_get_info(&pd, &info));
        plan = (int32_t *)malloc((size_t)info.plan_ints * 4);
        TRY(aiter_mla_prefill_plan_build(&info, cq, ck, B, r->causal, plan));
        d_plan = (int32_t *)gpu_malloc((size_t)info.plan_ints * 4);
        d_ws = gpu_malloc(info.workspace_bytes);
        gpu_upload(d_plan, plan, (size_t)info.plan_ints * 4);
        a.plan = d_plan;
        a.plan_info = &info;
        a.workspace = d_ws;
        a.workspace_bytes = info.workspace_bytes;
    }
    double t0 = host_us();
    for (it = 0; it < 2; it++) TRY(aiter_mla_prefill(&a, g_stream));
    gpu_sync();
    double per = (host_us() - t0) / 2;
    int iters = (int)(1e6 / (per > 1 ? per : 1));
    if (iters < 5) iters = 5;
    if (iters > 100) iters = 100;
    float *t = (float *)malloc(sizeof(float) * iters);
    for (it = 0; it < iters; it++) {
        gpu_timer_start(g_timer, g_stream);
        TRY(aiter_mla_prefill(&a, g_stream));
        t[it] = gpu_timer_stop_ms(g_timer, g_stream);
    }
    double us = median(t, iters) * 1e3;
    double flops = 2.0 * H * (double)B * r->sq * r->sk * (DQK + DV) * (r->causal ? 0.5 : 1.0);
    double tfl = flops / (us * 1e-6) / 1e12;
    printf("| %-8s | %3d | %d x %5d x %5d | %-6s | %-4s | %-10s | %9.1f | %7.1f | %5.1f %% |\n", r->id, H, B, r->sq, r->sk,
           r->causal ? "causal" : "full", r->dtype == AITER_MLA_BF16 ? "bf16" : "fp8", r->persistent ? "persistent" : "grid",
           us, tfl, gemm_tflops > 0 ? 100.0 * tfl / gemm_tflops : 0.0);
    fflush(stdout);
    gpu_free(d_q); gpu_free(d_k); gpu_free(d_v); gpu_free(d_o); gpu_free(d_lse); gpu_free(d_cu);
    if (d_plan) gpu_free(d_plan);
    if (d_ws) gpu_free(d_ws);
    free(plan); free(cq); free(ck); free(t);
}

/* ---- host planner cost ------------------------------------------------------------------ */
static void bench_planner(int num_cu) {
    enum { B = 256, RUNS = 2001 };
    static int32_t qo[B + 1], kvp[B + 1], last[B];
    static float t[RUNS];
    aiter_mla_decode_plan_desc pd = {0};
    aiter_mla_decode_plan_info info;
    int b, i;
    qo[0] = kvp[0] = 0;
    for (b = 0; b < B; b++) {
        qo[b + 1] = b + 1;
        kvp[b + 1] = kvp[b] + (int32_t)(4096 * (0.5 + frand()));
        last[b] = 1;
    }
    pd.max_batch = B;
    pd.num_heads = 16;
    pd.max_q_len = 1;
    pd.num_cu = num_cu;
    TRY(aiter_mla_decode_plan_get_info(&pd, &info));
    int32_t *plan = (int32_t *)malloc((size_t)info.plan_ints * 4);
    for (i = 0; i < RUNS; i++) {
        double t0 = host_us();
        TRY(aiter_mla_decode_plan_build(&info, qo, kvp, last, B, plan));
        t[i] = (float)(host_us() - t0);
    }
    printf("host planner: batch %d, %d CUs, page 1: %.2f us per plan (median of %d)\n", B, num_cu, median(t, RUNS), RUNS);
    free(plan);
}

int main(int argc, char **argv) {
    static const bench_row rows[] = {
        {"D1", 16, 1, 128, 4096, 64, AITER_MLA_BF16},    {"D1-p1", 16, 1, 128, 4096, 1, AITER_MLA_BF16},
        {"D1-fp8", 16, 1, 128, 4096, 64, AITER_MLA_FP8_E4M3FN},
        {"D2", 16, 1, 128, 8192, 64, AITER_MLA_BF16},    {"D2-p1", 16, 1, 128, 8192, 1, AITER_MLA_BF16},
        {"D2-fp8", 16, 1, 128, 8192, 64, AITER_MLA_FP8_E4M3FN},
        {"D3", 128, 1, 128, 4096, 64, AITER_MLA_BF16},   {"D4", 128, 2, 128, 4096, 64, AITER_MLA_BF16},
        {"D5", 16, 1, 1, 8192, 64, AITER_MLA_BF16},      {"D6", 64, 1, 128, 4096, 64, AITER_MLA_BF16},
    };
    static const prefill_row prows[] = {
        {"P1", 128, 1, 4096, 4096, 1, AITER_MLA_BF16, 0},   {"P2", 128, 4, 4096, 4096, 1, AITER_MLA_BF16, 0},
        {"P3", 128, 1, 16384, 16384, 1, AITER_MLA_BF16, 0}, {"P4", 128, 1, 4096, 8192, 0, AITER_MLA_BF16, 0},
        {"P1-fp8", 128, 1, 4096, 4096, 1, AITER_MLA_FP8_E4M3FN, 0}, {"P2-fp8", 128, 4, 4096, 4096, 1, AITER_MLA_FP8_E4M3FN, 0},
        {"P3-fp8", 128, 1, 16384, 16384, 1, AITER_MLA_FP8_E4M3FN, 0}, {"P4-fp8", 128, 1, 4096, 8192, 0, AITER_MLA_FP8_E4M3FN, 0},
        {"P1-ps", 128, 1, 4096, 4096, 1, AITER_MLA_BF16, 1},  {"P1-fp8-ps", 128, 1, 4096, 4096, 1, AITER_MLA_FP8_E4M3FN, 1},
    };
    double kgbs = 0, mgbs = 0, copy, gemm;
    int i, any_decode = argc < 2, any_prefill = argc < 2;
    if (!gpu_device_count()) {
        fprintf(stderr, "bench: no GPU device\n");
        return 1;
    }
    g_stream = gpu_stream_create();
    g_timer = gpu_timer_create();
    printf("GPU: %s, %d CUs, L2 %.0f MB\n", gpu_name(), gpu_num_cu(), gpu_l2_bytes() / 1e6);
    copy = copy_ceiling_gbs(&kgbs, &mgbs);
    gemm = gemm_ceiling_tflops();
    printf("ceilings: copy kernel %.0f GB/s, memcpy d2d %.0f GB/s (read + write); bf16 GEMM 8192^3 %.0f TFLOP/s%s\n",
           kgbs, mgbs, gemm, gemm > 0 ? "" : " (no BLAS in this build)");
    bench_planner(gpu_num_cu());
    for (i = 1; i < argc; i++) { /* arguments, if any, pick rows by id */
        any_decode |= argv[i][0] == 'D';
        any_prefill |= argv[i][0] == 'P';
    }
    if (any_decode) {
        printf("\n| row      |   H | q | batch |   ctx | pg  | cache | median us |    GB/s | TFLOP/s | %% copy | %% GEMM |\n");
        printf("|----------|-----|---|-------|-------|-----|-------|-----------|---------|---------|---------|---------|\n");
    }
    for (i = 0; i < (int)(sizeof rows / sizeof rows[0]); i++) {
        int j, wanted = argc < 2;
        for (j = 1; j < argc; j++) wanted |= !strcmp(argv[j], rows[i].id);
        if (wanted) bench_decode(&rows[i], copy, gemm, gpu_num_cu(), gpu_l2_bytes());
    }
    if (any_prefill) {
        printf("\n| row      |   H | batch x sq x sk       | mask   | qkv  | schedule   | median us | TFLOP/s | %% GEMM |\n");
        printf("|----------|-----|-----------------------|--------|------|------------|-----------|---------|---------|\n");
    }
    for (i = 0; i < (int)(sizeof prows / sizeof prows[0]); i++) {
        int j, wanted = argc < 2;
        for (j = 1; j < argc; j++) wanted |= !strcmp(argv[j], prows[i].id);
        if (wanted) bench_prefill(&prows[i], gemm, gpu_num_cu());
    }
    gpu_timer_destroy(g_timer);
    gpu_stream_destroy(g_stream);
    return 0;
}
#endif
