/* prefill.c - a chunked MLA prefill as vLLM's forward_mha runs it, on the CPU reference
 * (the same structs drive the GPU versions: aiter_mla_gather_cache, aiter_mla_prefill,
 * aiter_mla_merge_attn_states).
 *
 * One request with a cached prefix of CTX tokens (in the paged latent cache) and NEW new
 * tokens. For each context chunk: gather its latent rows from the cache, decompress them
 * into per-head k (128 nope + 64 rope = 192) and v (128) with this example's own small
 * GEMM standing in for the runtime's kv_b_proj, attend the new tokens' queries to the
 * chunk without a causal mask, keeping the lse, and merge into the running result. Then
 * attend the new tokens causally among themselves and merge once more. The result is
 * compared with a single causal pass over all CTX + NEW keys. */
#define _POSIX_C_SOURCE 199309L
#define AITER_MLA_IMPLEMENTATION
#ifndef AITER_MLA_NO_GPU
#define AITER_MLA_NO_GPU /* everything here runs on the CPU reference */
#endif
#include "../aiter_mla.h"

#include <stdio.h>
#include <stdlib.h>

enum { H = 8, NOPE = 128, ROPE = 64, DQK = NOPE + ROPE, DV = 128, L = AITER_MLA_LATENT_DIM, D = AITER_MLA_HEAD_DIM };
enum { CTX = 300, NEW = 40, CHUNK = 128, PAGE = 16 };

static uint64_t rng_state = 0x853c49e6748fea9bull;
static float frand(float amp) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)(((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0) * amp);
}

#define TRY(call)                                                                                            \
    do {                                                                                                     \
        aiter_mla_status st_ = (call);                                                                       \
        if (st_ != AITER_MLA_OK) {                                                                           \
            fprintf(stderr, "%s: %s: %s\n", #call, aiter_mla_status_string(st_), aiter_mla_last_error());    \
            exit(1);                                                                                         \
        }                                                                                                    \
    } while (0)

/* kv_b_proj stand-in: latent rows [n, 576] (bf16) -> k [n, H, 192], v [n, H, 128] (bf16).
 * k = [latent[:512] W_uk[h] | rope], v = latent[:512] W_uv[h]. */
static void decompress(const uint16_t *latent, int n, const float *w_uk, const float *w_uv, uint16_t *k, uint16_t *v) {
    int t, h, j, c;
    for (t = 0; t < n; t++)
        for (h = 0; h < H; h++) {
            for (j = 0; j < NOPE; j++) {
                float s = 0.0f;
                for (c = 0; c < L; c++) s += aiter_mla_bf16_to_f32(latent[t * D + c]) * w_uk[((size_t)h * NOPE + j) * L + c];
                k[((size_t)t * H + h) * DQK + j] = aiter_mla_f32_to_bf16(s);
            }
            for (j = 0; j < ROPE; j++) k[((size_t)t * H + h) * DQK + NOPE + j] = latent[t * D + L + j];
            for (j = 0; j < DV; j++) {
                float s = 0.0f;
                for (c = 0; c < L; c++) s += aiter_mla_bf16_to_f32(latent[t * D + c]) * w_uv[((size_t)h * DV + j) * L + c];
                v[((size_t)t * H + h) * DV + j] = aiter_mla_f32_to_bf16(s);
            }
        }
}

int main(void) {
    const int total = CTX + NEW, pages = (total + PAGE - 1) / PAGE;
    float *w_uk = (float *)malloc(sizeof(float) * H * NOPE * L), *w_uv = (float *)malloc(sizeof(float) * H * DV * L);
    uint16_t *cache = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)pages * PAGE * D);
    uint16_t *q = (uint16_t *)malloc(sizeof(uint16_t) * NEW * H * DQK);
    uint16_t *lat = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)total * D);
    uint16_t *k = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)total * H * DQK);
    uint16_t *v = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)total * H * DV);
    float *o = (float *)malloc(sizeof(float) * NEW * H * DV), *part = (float *)malloc(sizeof(float) * NEW * H * DV);
    float *ref = (float *)malloc(sizeof(float) * NEW * H * DV);
    float lse[H * NEW], lse_part[H * NEW], lse_tmp[H * NEW], lse_ref[H * NEW];
    int32_t block_table[(CTX + NEW + PAGE - 1) / PAGE], cu_q[2] = {0, NEW}, cu_k[2], cu_rows[2], start[1];
    int i, c, n_chunks = 0;
    double max_err = 0.0, max_ref = 0.0;

    for (i = 0; i < H * NOPE * L; i++) w_uk[i] = frand(0.05f);
    for (i = 0; i < H * DV * L; i++) w_uv[i] = frand(0.05f);
    for (i = 0; i < NEW * H * DQK; i++) q[i] = aiter_mla_f32_to_bf16(frand(1.0f));
    for (i = 0; i < pages; i++) block_table[i] = (i * 7 + 3) % pages; /* a shuffled page order */
    /* the cache holds every token's latent row (context and new tokens, as the KV write left it) */
    for (i = 0; i < pages * PAGE * D; i++) cache[i] = aiter_mla_f32_to_bf16(frand(1.0f));

    aiter_mla_prefill_args p = {0};
    p.q = q;
    p.cu_seqlens_q = cu_q;
    p.cu_seqlens_k = cu_k;
    p.batch = 1;
    p.num_heads = H;
    p.dqk = DQK;
    p.dv = DV;
    p.sm_scale = 0.1352f;
    p.o_dtype = AITER_MLA_F32;

    aiter_mla_gather_cache_args g = {0};
    g.kv_cache = cache;
    g.num_blocks = pages;
    g.block_size = PAGE;
    g.block_table = block_table;
    g.block_table_stride = pages;
    g.cu_out_rows = cu_rows;
    g.seq_starts = start;
    g.batch = 1;
    g.out = lat;
    g.out_rows = total;

    aiter_mla_merge_args m = {0};
    m.num_tokens = NEW;
    m.num_heads = H;
    m.head_dim = DV;
    m.dtype = AITER_MLA_F32;

    /* 1. the new tokens, causal among themselves (the last NEW cached rows) */
    start[0] = CTX;
    cu_rows[0] = 0;
    cu_rows[1] = NEW;
    TRY(aiter_mla_gather_cache_ref(&g));
    decompress(lat, NEW, w_uk, w_uv, k, v);
    cu_k[0] = 0;
    cu_k[1] = NEW;
    p.k = k;
    p.v = v;
    p.causal = 1;
    p.o = o;
    p.lse = lse;
    TRY(aiter_mla_prefill_ref(&p));

    /* 2. each context chunk: gather, decompress, attend without a mask, merge */
    for (c = 0; c * CHUNK < CTX; c++, n_chunks++) {
        const int n = (c + 1) * CHUNK < CTX ? CHUNK : CTX - c * CHUNK;
        start[0] = c * CHUNK;
        cu_rows[1] = n;
        TRY(aiter_mla_gather_cache_ref(&g));
        decompress(lat, n, w_uk, w_uv, k, v);
        cu_k[1] = n;
        p.causal = 0;
        p.o = part;
        p.lse = lse_part;
        TRY(aiter_mla_prefill_ref(&p));
        m.o_prefix = part;
        m.lse_prefix = lse_part;
        m.o_suffix = o;
        m.lse_suffix = lse;
        m.o = o;
        m.lse = lse_tmp;
        TRY(aiter_mla_merge_attn_states_ref(&m));
        for (i = 0; i < H * NEW; i++) lse[i] = lse_tmp[i];
    }

    /* 3. the single-pass reference: all CTX + NEW keys at once, causal */
    start[0] = 0;
    cu_rows[1] = total;
    TRY(aiter_mla_gather_cache_ref(&g));
    decompress(lat, total, w_uk, w_uv, k, v);
    cu_k[1] = total;
    p.causal = 1;
    p.o = ref;
    p.lse = lse_ref;
    TRY(aiter_mla_prefill_ref(&p));

    for (i = 0; i < NEW * H * DV; i++) {
        double e = fabs((double)o[i] - ref[i]);
        if (e > max_err) max_err = e;
        if (fabs(ref[i]) > max_ref) max_ref = fabs(ref[i]);
    }
    for (i = 0; i < H * NEW; i++) {
        double e = fabs((double)lse[i] - lse_ref[i]);
        if (e > max_err) max_err = e;
    }
    printf("prefill: %d new tokens over a %d-token cached prefix in %d chunks of %d, %d heads, %d/%d head dims (CPU reference)\n",
           NEW, CTX, n_chunks, CHUNK, H, DQK, DV);
    printf("max |chunked + merged - single pass| = %.3g (o and lse; max |o| = %.3g)\n", max_err, max_ref);
    free(w_uk); free(w_uv); free(cache); free(q); free(lat); free(k); free(v); free(o); free(part); free(ref);
    if (!(max_err < 1e-4)) {
        printf("FAILED\n");
        return 1;
    }
    printf("OK\n");
    return 0;
}
