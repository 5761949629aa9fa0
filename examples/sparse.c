/* sparse.c - one DeepSeek V3.2 sparse MLA decode step, on the CPU reference (the same
 * structs drive the GPU versions: aiter_mla_ds_mla_write, aiter_mla_convert_sparse_indices,
 * aiter_mla_sparse_attention).
 *
 * Requests with paged fp8_ds_mla caches (656-byte rows, page size 64): write the new
 * tokens' latents into the cache, take the indexer's top-k request-local positions for
 * each token (here random, with -1 padding), convert them to global slots through the
 * block table (with the count of valid entries as topk_length), attend, and compare with a
 * naive double-precision softmax over the same rows. */
#define AITER_MLA_IMPLEMENTATION
#ifndef AITER_MLA_NO_GPU
#define AITER_MLA_NO_GPU /* everything here runs on the CPU reference */
#endif
#include "../aiter_mla.h"

#include <stdio.h>
#include <stdlib.h>

enum { BATCH = 4, HEADS = 16, TOPK = 256, PAGE = 64, MAX_PAGES = 32, D = AITER_MLA_HEAD_DIM, L = AITER_MLA_LATENT_DIM };

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
static float frand(float amp) { return ((float)urand() / 4294967296.0f * 2.0f - 1.0f) * amp; }

#define TRY(call)                                                                                            \
    do {                                                                                                     \
        aiter_mla_status st_ = (call);                                                                       \
        if (st_ != AITER_MLA_OK) {                                                                           \
            fprintf(stderr, "%s: %s: %s\n", #call, aiter_mla_status_string(st_), aiter_mla_last_error());    \
            return 1;                                                                                        \
        }                                                                                                    \
    } while (0)

int main(void) {
    const int num_blocks = BATCH * MAX_PAGES;
    const float sm_scale = 0.1352f;
    int32_t seq_lens[BATCH], block_table[BATCH * MAX_PAGES], req_id[BATCH], valid[BATCH];
    int32_t local[BATCH * TOPK], global[BATCH * TOPK];
    int64_t slot_mapping[BATCH * MAX_PAGES * PAGE];
    unsigned char *cache = (unsigned char *)calloc((size_t)num_blocks * PAGE, AITER_MLA_DS_MLA_ROW_BYTES);
    uint16_t *latent = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)num_blocks * PAGE * D);
    uint16_t *q = (uint16_t *)malloc(sizeof(uint16_t) * BATCH * HEADS * D);
    float *o = (float *)malloc(sizeof(float) * BATCH * HEADS * L), lse[BATCH * HEADS];
    double max_err = 0.0, max_o = 0.0;
    int b, i, h, k, d, n_tok = 0;

    /* pages: request b owns pages b, b + BATCH, b + 2 BATCH, ... (interleaved in the cache) */
    for (b = 0; b < BATCH; b++) {
        seq_lens[b] = 300 + (int32_t)(urand() % (MAX_PAGES * PAGE - 300));
        req_id[b] = b; /* one new token per request */
        for (i = 0; i < MAX_PAGES; i++) block_table[b * MAX_PAGES + i] = i * BATCH + b;
    }
    /* every cached token's latent, written through the fp8_ds_mla writer (the new token is the last) */
    for (b = 0; b < BATCH; b++)
        for (i = 0; i < seq_lens[b]; i++, n_tok++) {
            slot_mapping[n_tok] = (int64_t)block_table[b * MAX_PAGES + i / PAGE] * PAGE + i % PAGE;
            for (d = 0; d < D; d++) latent[(size_t)n_tok * D + d] = aiter_mla_f32_to_bf16(frand(d < L ? 1.0f : 2.0f));
        }
    aiter_mla_ds_mla_write_args w = {0};
    w.kv_c = latent;
    w.kv_c_stride = D;
    w.k_pe = latent + L;
    w.k_pe_stride = D;
    w.slot_mapping = slot_mapping;
    w.kv_cache = cache;
    w.num_blocks = num_blocks;
    w.block_size = PAGE;
    w.num_tokens = n_tok;
    TRY(aiter_mla_ds_mla_write_ref(&w));

    /* the indexer's choice: TOPK positions below seq_len (the newest first, then every 7th
     * back), one row padded with -1 after its first third */
    for (b = 0; b < BATCH; b++) {
        const int n = b == 1 ? TOPK / 3 : TOPK;
        for (k = 0; k < TOPK; k++)
            local[b * TOPK + k] = k < n ? (int32_t)((((seq_lens[b] - 1 - 7 * k) % seq_lens[b]) + seq_lens[b]) % seq_lens[b]) : -1;
    }
    for (i = 0; i < BATCH * HEADS * D; i++) q[i] = aiter_mla_f32_to_bf16(frand(1.0f));

    aiter_mla_sparse_index_args c = {0};
    c.indices = local;
    c.req_id = req_id;
    c.block_table = block_table;
    c.block_table_stride = MAX_PAGES;
    c.block_size = PAGE;
    c.num_requests = BATCH;
    c.num_tokens = BATCH;
    c.topk = TOPK;
    c.out = global;
    c.valid_counts = valid;
    TRY(aiter_mla_convert_sparse_indices_ref(&c));

    aiter_mla_sparse_args a = {0};
    a.q = q;
    a.kv_cache = cache;
    a.num_slots = (int64_t)num_blocks * PAGE;
    a.cache_is_ds_mla = 1;
    a.indices = global;
    a.topk_length = valid; /* valid entries come first in every row here */
    a.o = o;
    a.o_dtype = AITER_MLA_F32;
    a.lse = lse;
    a.num_tokens = BATCH;
    a.num_heads = HEADS;
    a.topk = TOPK;
    a.sm_scale = sm_scale;
    TRY(aiter_mla_sparse_attention_ref(&a));

    /* naive check: softmax over the selected rows, read back from the cache */
    {
        float *rows = (float *)malloc(sizeof(float) * TOPK * D);
        double *s = (double *)malloc(sizeof(double) * TOPK);
        for (b = 0; b < BATCH; b++) {
            for (k = 0; k < valid[b]; k++)
                aiter_mla_ds_mla_read_row(cache + (size_t)global[b * TOPK + k] * AITER_MLA_DS_MLA_ROW_BYTES, AITER_MLA_FP8_E4M3FN,
                                          rows + (size_t)k * D);
            for (h = 0; h < HEADS; h++) {
                double m = -1e300, den = 0.0;
                for (k = 0; k < valid[b]; k++) {
                    double dot = 0.0;
                    for (d = 0; d < D; d++) dot += (double)aiter_mla_bf16_to_f32(q[((size_t)b * HEADS + h) * D + d]) * rows[(size_t)k * D + d];
                    s[k] = dot * sm_scale;
                    if (s[k] > m) m = s[k];
                }
                for (k = 0; k < valid[b]; k++) den += exp(s[k] - m);
                for (d = 0; d < L; d++) {
                    double num = 0.0, e;
                    for (k = 0; k < valid[b]; k++) num += exp(s[k] - m) * rows[(size_t)k * D + d];
                    e = fabs(num / den - o[((size_t)b * HEADS + h) * L + d]);
                    if (e > max_err) max_err = e;
                    if (fabs(num / den) > max_o) max_o = fabs(num / den);
                }
                if (fabs(m + log(den) - lse[b * HEADS + h]) > max_err) max_err = fabs(m + log(den) - lse[b * HEADS + h]);
            }
        }
        free(rows);
        free(s);
    }
    printf("sparse decode: %d requests, %d heads, top-%d over fp8_ds_mla caches (valid per row:", BATCH, HEADS, TOPK);
    for (b = 0; b < BATCH; b++) printf(" %d", valid[b]);
    printf("), CPU reference\nmax |o - naive| and |lse - naive| = %.3g (max |o| = %.3g)\n", max_err, max_o);
    free(cache); free(latent); free(q); free(o);
    if (!(max_err < 1e-4)) {
        printf("FAILED\n");
        return 1;
    }
    printf("OK\n");
    return 0;
}
