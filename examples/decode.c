/* decode.c - one DeepSeek-V3 MLA decode step, as vLLM runs it with tensor parallelism 8:
 * 16 query heads per GPU, a bf16 latent cache with page size 1, a batch of 8 requests with
 * ragged context lengths up to 4096, one new token each.
 *
 *   1. build the paged-KV metadata from the block table and the split-KV plan (host);
 *   2. write the new tokens' latents (kv_c, k_pe) into the cache;
 *   3. run decode on the GPU when there is one, else the CPU reference replaying the plan;
 *   4. compare with an independent double-precision loop written below, print the error
 *      and the time.
 *
 * Build: make run   (GPU=none builds it without kernels.hip: the CPU path only) */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#define AITER_MLA_IMPLEMENTATION
#include "../aiter_mla.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifndef AITER_MLA_NO_GPU
#include "gpu.h"
#endif

enum { BATCH = 8, HEADS = 16, MAX_CTX = 4096, PAGE = 1, D = AITER_MLA_HEAD_DIM, L = AITER_MLA_LATENT_DIM };

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static double frand(void) { /* uniform in [0, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}
static void fill_bf16(uint16_t *p, size_t n, float amp) {
    size_t i;
    for (i = 0; i < n; i++) p[i] = aiter_mla_f32_to_bf16((float)((2.0 * frand() - 1.0) * amp));
}
static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* The independent check: softmax(scale * q.K^T) V for one query row and head, in double. */
static void naive_attention(const uint16_t *q, const uint16_t *cache, const int32_t *slots, int n, double scale,
                            double *out) {
    double *s = (double *)malloc(sizeof(double) * (n ? n : 1)), m = -1e300, sum = 0.0;
    int j, d;
    for (j = 0; j < n; j++) {
        double dot = 0.0;
        for (d = 0; d < D; d++) dot += (double)aiter_mla_bf16_to_f32(q[d]) * aiter_mla_bf16_to_f32(cache[(size_t)slots[j] * D + d]);
        s[j] = dot * scale;
        if (s[j] > m) m = s[j];
    }
    for (d = 0; d < L; d++) out[d] = 0.0;
    for (j = 0; j < n; j++) {
        double p = exp(s[j] - m);
        sum += p;
        for (d = 0; d < L; d++) out[d] += p * aiter_mla_bf16_to_f32(cache[(size_t)slots[j] * D + d]);
    }
    for (d = 0; d < L; d++) out[d] = sum > 0.0 ? out[d] / sum : 0.0;
    free(s);
}

#define TRY(call)                                                                              \
    do {                                                                                       \
        aiter_mla_status st_ = (call);                                                         \
        if (st_ != AITER_MLA_OK) {                                                             \
            fprintf(stderr, "%s failed: %s: %s\n", #call, aiter_mla_status_string(st_), aiter_mla_last_error()); \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

int main(void) {
    const float sm_scale = 0.1352337788608801f; /* DeepSeek-V3: (192^-0.5) * yarn mscale^2 */
    int32_t ctx[BATCH], seq_lens[BATCH], b, j;
    int32_t qo_indptr[BATCH + 1], kv_indptr[BATCH + 1], kv_last[BATCH];
    int64_t num_pages = 0, i;
    int use_gpu = 0, num_cu = 80;
    double t0, ms;

    /* Context lengths and a shuffled page pool: page size 1, so one page per token. */
    for (b = 0; b < BATCH; b++) {
        ctx[b] = 1 + (int32_t)(frand() * (MAX_CTX - 1));
        seq_lens[b] = ctx[b] + 1; /* the new token attends to itself */
        num_pages += seq_lens[b];
    }
    int32_t *block_table = (int32_t *)malloc(sizeof(int32_t) * BATCH * (MAX_CTX + 1));
    int32_t *pool = (int32_t *)malloc(sizeof(int32_t) * num_pages);
    for (i = 0; i < num_pages; i++) pool[i] = (int32_t)i;
    for (i = num_pages - 1; i > 0; i--) {
        int64_t k = (int64_t)(frand() * (double)(i + 1));
        int32_t t = pool[i];
        pool[i] = pool[k];
        pool[k] = t;
    }
    for (b = 0, i = 0; b < BATCH; b++)
        for (j = 0; j < seq_lens[b]; j++) block_table[b * (MAX_CTX + 1) + j] = pool[i++];

    /* 1. metadata and plan */
    int32_t *kv_indices = (int32_t *)malloc(sizeof(int32_t) * num_pages);
    aiter_mla_decode_metadata_args meta = {0};
    meta.block_table = block_table;
    meta.block_table_stride = MAX_CTX + 1;
    meta.seq_lens = seq_lens;
    meta.batch = BATCH;
    meta.page_size = PAGE;
    meta.qo_indptr = qo_indptr;
    meta.kv_indptr = kv_indptr;
    meta.kv_indices = kv_indices;
    meta.kv_indices_capacity = num_pages;
    meta.kv_last_page_lens = kv_last;
    TRY(aiter_mla_decode_metadata_build(&meta));

#ifndef AITER_MLA_NO_GPU
    use_gpu = gpu_device_count() > 0;
    if (use_gpu) num_cu = gpu_num_cu();
#endif
    aiter_mla_decode_plan_desc pd = {0};
    aiter_mla_decode_plan_info info;
    pd.max_batch = BATCH;
    pd.num_heads = HEADS;
    pd.max_q_len = 1;
    pd.num_cu = num_cu;
    pd.page_size = PAGE;
    TRY(aiter_mla_decode_plan_get_info(&pd, &info));
    int32_t *plan = (int32_t *)malloc(sizeof(int32_t) * info.plan_ints);
    void *workspace = malloc(info.workspace_bytes ? info.workspace_bytes : 1);
    t0 = now_ms();
    TRY(aiter_mla_decode_plan_build(&info, qo_indptr, kv_indptr, kv_last, BATCH, plan));
    ms = now_ms() - t0;
    aiter_mla_decode_plan_view pv = aiter_mla_decode_plan_view_of(&info, plan);
    printf("plan: %d work items over %d CUs, %d of them partial pieces to reduce (built in %.1f us)\n", pv.num_work,
           num_cu, pv.num_partials, ms * 1e3);

    /* the cache as earlier steps left it, the new token's q and latents */
    uint16_t *cache = (uint16_t *)malloc(sizeof(uint16_t) * num_pages * D);
    uint16_t *q = (uint16_t *)malloc(sizeof(uint16_t) * BATCH * HEADS * D);
    uint16_t *kv_c = (uint16_t *)malloc(sizeof(uint16_t) * BATCH * L), *k_pe = (uint16_t *)malloc(sizeof(uint16_t) * BATCH * 64);
    int64_t slot_mapping[BATCH];
    fill_bf16(cache, (size_t)num_pages * D, 1.0f);
    fill_bf16(q, (size_t)BATCH * HEADS * D, 1.0f);
    fill_bf16(kv_c, (size_t)BATCH * L, 1.0f);
    fill_bf16(k_pe, (size_t)BATCH * 64, 1.0f);
    for (b = 0; b < BATCH; b++) slot_mapping[b] = block_table[b * (MAX_CTX + 1) + ctx[b]]; /* page size 1 */
    uint16_t *o = (uint16_t *)malloc(sizeof(uint16_t) * BATCH * HEADS * L);
    float *lse = (float *)malloc(sizeof(float) * BATCH * HEADS);

    aiter_mla_kv_cache_write_args w = {0};
    w.kv_c = kv_c;
    w.k_pe = k_pe;
    w.slot_mapping = slot_mapping;
    w.kv_cache = cache;
    w.num_blocks = num_pages;
    w.kv_cache_bytes = sizeof(uint16_t) * num_pages * D; /* optional: the call checks the cache against it */
    w.block_size = PAGE;
    w.num_tokens = BATCH;

    aiter_mla_decode_args a = {0};
    a.q = q;
    a.kv_cache = cache;
    a.num_pages = num_pages;
    a.kv_cache_bytes = w.kv_cache_bytes;
    a.qo_indptr = qo_indptr;
    a.kv_indptr = kv_indptr;
    a.kv_indices = kv_indices;
    a.kv_last_page_lens = kv_last;
    a.o = o;
    a.lse = lse;
    a.plan = plan;
    a.plan_info = &info;
    a.workspace = workspace;
    a.workspace_bytes = info.workspace_bytes;
    a.batch = BATCH;
    a.num_heads = HEADS;
    a.page_size = PAGE;
    a.sm_scale = sm_scale;

    if (!use_gpu) {
        /* 2 + 3 on the CPU: the reference replays the plan and its reduce */
        TRY(aiter_mla_kv_cache_write_ref(&w));
        t0 = now_ms();
        TRY(aiter_mla_decode_ref_scheduled(&a));
        ms = now_ms() - t0;
        printf("decode on the CPU reference (no GPU): %.1f ms\n", ms);
    }
#ifndef AITER_MLA_NO_GPU
    else {
        /* 2 + 3 on the GPU: device copies of every array, one stream, no synchronisation
         * inside the library; the plan travels in one copy */
        void *s = gpu_stream_create();
        size_t cache_bytes = sizeof(uint16_t) * num_pages * D;
        void *d_cache = gpu_malloc(cache_bytes), *d_q = gpu_malloc(sizeof(uint16_t) * BATCH * HEADS * D);
        void *d_kvc = gpu_malloc(sizeof(uint16_t) * BATCH * L), *d_kpe = gpu_malloc(sizeof(uint16_t) * BATCH * 64);
        void *d_slots = gpu_malloc(sizeof slot_mapping), *d_o = gpu_malloc(sizeof(uint16_t) * BATCH * HEADS * L);
        void *d_lse = gpu_malloc(sizeof(float) * BATCH * HEADS), *d_plan = gpu_malloc(sizeof(int32_t) * info.plan_ints);
        void *d_ws = gpu_malloc(info.workspace_bytes), *d_meta = gpu_malloc(sizeof(int32_t) * (3 * BATCH + 2));
        void *d_idx = gpu_malloc(sizeof(int32_t) * num_pages);
        int32_t *d_m = (int32_t *)d_meta;
        gpu_upload(d_cache, cache, cache_bytes);
        gpu_upload(d_q, q, sizeof(uint16_t) * BATCH * HEADS * D);
        gpu_upload(d_kvc, kv_c, sizeof(uint16_t) * BATCH * L);
        gpu_upload(d_kpe, k_pe, sizeof(uint16_t) * BATCH * 64);
        gpu_upload(d_slots, slot_mapping, sizeof slot_mapping);
        gpu_upload(d_m, qo_indptr, sizeof qo_indptr);
        gpu_upload(d_m + BATCH + 1, kv_indptr, sizeof kv_indptr);
        gpu_upload(d_m + 2 * BATCH + 2, kv_last, sizeof kv_last);
        gpu_upload(d_idx, kv_indices, sizeof(int32_t) * num_pages);
        gpu_upload(d_plan, plan, sizeof(int32_t) * info.plan_ints);

        aiter_mla_kv_cache_write_args wd = w;
        wd.kv_c = d_kvc;
        wd.k_pe = d_kpe;
        wd.slot_mapping = (const int64_t *)d_slots;
        wd.kv_cache = d_cache;
        aiter_mla_decode_args ad = a;
        ad.q = d_q;
        ad.kv_cache = d_cache;
        ad.qo_indptr = d_m;
        ad.kv_indptr = d_m + BATCH + 1;
        ad.kv_last_page_lens = d_m + 2 * BATCH + 2;
        ad.kv_indices = (const int32_t *)d_idx;
        ad.o = d_o;
        ad.lse = (float *)d_lse;
        ad.plan = (int32_t *)d_plan;
        ad.workspace = d_ws;

        gpu_timer *tm = gpu_timer_create();
        aiter_mla_kernel kernel;
        TRY(aiter_mla_decode_kernel(&ad, &kernel)); /* which kernel these arguments take, for the log */
        TRY(aiter_mla_kv_cache_write(&wd, s));
        TRY(aiter_mla_decode(&ad, s)); /* warm-up */
        gpu_timer_start(tm, s);
        for (j = 0; j < 20; j++) TRY(aiter_mla_decode(&ad, s));
        ms = gpu_timer_stop_ms(tm, s) / 20;
        gpu_sync();
        gpu_download(o, d_o, sizeof(uint16_t) * BATCH * HEADS * L);
        gpu_download(lse, d_lse, sizeof(float) * BATCH * HEADS);
        gpu_download(cache, d_cache, cache_bytes); /* with the new tokens written on the GPU */
        printf("decode on %s (%s kernel): %.1f us per step (decode + reduce, mean of 20)\n", gpu_name(),
               aiter_mla_kernel_name(kernel), ms * 1e3);
        gpu_timer_destroy(tm);
        gpu_free(d_cache); gpu_free(d_q); gpu_free(d_kvc); gpu_free(d_kpe); gpu_free(d_slots); gpu_free(d_o);
        gpu_free(d_lse); gpu_free(d_plan); gpu_free(d_ws); gpu_free(d_meta); gpu_free(d_idx);
        gpu_stream_destroy(s);
    }
#endif

    /* 4. the independent check, row by row */
    {
        double out[L], max_err = 0.0, max_ref = 0.0;
        int h, d;
        for (b = 0; b < BATCH; b++)
            for (h = 0; h < HEADS; h++) {
                naive_attention(q + ((size_t)b * HEADS + h) * D, cache, block_table + b * (MAX_CTX + 1), seq_lens[b],
                                sm_scale, out);
                for (d = 0; d < L; d++) {
                    double e = fabs(aiter_mla_bf16_to_f32(o[((size_t)b * HEADS + h) * L + d]) - out[d]);
                    if (e > max_err) max_err = e;
                    if (fabs(out[d]) > max_ref) max_ref = fabs(out[d]);
                }
            }
        printf("batch %d, %d heads, contexts", BATCH, HEADS);
        for (b = 0; b < BATCH; b++) printf(" %d", seq_lens[b]);
        printf("\nmax |o - naive| = %.3g (max |o| = %.3g), lse[0] = %.4f\n", max_err, max_ref, lse[0]);
        if (!(max_err <= 1e-2 * (max_ref > 1e-3 ? max_ref : 1.0) + 4e-3)) {
            printf("FAILED: the output does not match the naive reference\n");
            return 1;
        }
        printf("OK\n");
    }
    free(block_table); free(pool); free(kv_indices); free(plan); free(workspace); free(cache); free(q);
    free(kv_c); free(k_pe); free(o); free(lse);
    return 0;
}
