/* sparse.c - one DeepSeek V3.2 sparse MLA decode step, on the GPU when there is one, else on
 * the CPU reference.
 *
 * Requests with paged fp8_ds_mla caches (656-byte rows, page size 64): write every cached
 * token's latent into the cache (aiter_mla_ds_mla_write), take the indexer's top-k
 * request-local positions for each token (here chosen by a rule, with -1 padding), convert
 * them to global slots through the block table with the count of valid entries as
 * topk_length (aiter_mla_convert_sparse_indices), and attend (aiter_mla_sparse_attention).
 * Checks: the cache against the reference writer's bytes, the slots and counts against the
 * block table by hand, and a naive double-precision softmax over the rows read back from the
 * cache. The program
 * prints the errors and PASS or FAIL, and exits non-zero on failure. */
#define AITER_MLA_IMPLEMENTATION
#include "../aiter_mla.h"
#include "where.h"

enum { BATCH = 4, HEADS = 16, TOPK = 256, PAGE = 64, MAX_PAGES = 32, D = AITER_MLA_HEAD_DIM, L = AITER_MLA_LATENT_DIM };

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
static float frand(float amp) { return ((float)urand() / 4294967296.0f * 2.0f - 1.0f) * amp; }

int main(void) {
    const int num_blocks = BATCH * MAX_PAGES;
    const float sm_scale = 0.1352f;
    const size_t cache_bytes = (size_t)num_blocks * PAGE * AITER_MLA_DS_MLA_ROW_BYTES;
    int32_t seq_lens[BATCH], block_table[BATCH * MAX_PAGES], req_id[BATCH], valid[BATCH];
    int32_t local[BATCH * TOPK], global[BATCH * TOPK];
    int64_t slot_mapping[BATCH * MAX_PAGES * PAGE];
    unsigned char *cache = (unsigned char *)calloc(cache_bytes, 1);
    unsigned char *cache_ref = (unsigned char *)calloc(cache_bytes, 1); /* the reference writer's bytes */
    uint16_t *latent = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)num_blocks * PAGE * D);
    uint16_t *q = (uint16_t *)malloc(sizeof(uint16_t) * BATCH * HEADS * D);
    float *o = (float *)malloc(sizeof(float) * BATCH * HEADS * L), lse[BATCH * HEADS];
    double err2 = 0.0, ref2 = 0.0, max_abs = 0.0, lse_err = 0.0, max_o = 0.0;
    int b, i, h, k, d, n_tok = 0, failed;
    int mismatches = 0; /* the cache against the reference writer's, the slots and counts against the block table */

    where_init();
    /* pages: request b owns pages b, b + BATCH, b + 2 BATCH, ... (interleaved in the cache) */
    for (b = 0; b < BATCH; b++) {
        seq_lens[b] = 300 + (int32_t)(urand() % (MAX_PAGES * PAGE - 300));
        if (seq_lens[b] % 7 == 0) seq_lens[b]++; /* the indexer's picks below, every 7th position back, all distinct */
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
    w.kv_c = dev(latent, sizeof(uint16_t) * (size_t)num_blocks * PAGE * D);
    w.kv_c_stride = D;
    w.k_pe = (const uint16_t *)w.kv_c + L;
    w.k_pe_stride = D;
    w.slot_mapping = (const int64_t *)dev(slot_mapping, sizeof slot_mapping);
    w.kv_cache = dev(cache, cache_bytes);
    w.num_blocks = num_blocks;
    w.kv_cache_bytes = cache_bytes; /* optional: the call checks the cache against it */
    w.block_size = PAGE;
    w.num_tokens = n_tok;
    TRY(OP(aiter_mla_ds_mla_write, &w));
    {
        aiter_mla_ds_mla_write_args wr = w;
        wr.kv_c = latent;
        wr.k_pe = latent + L;
        wr.slot_mapping = slot_mapping;
        wr.kv_cache = cache_ref;
        TRY(aiter_mla_ds_mla_write_ref(&wr));
    }

    /* the indexer's choice: TOPK positions below seq_len (the newest first, then every 7th
     * back), one row padded with -1 after its first third */
    for (b = 0; b < BATCH; b++) {
        const int n = b == 1 ? TOPK / 3 : TOPK;
        for (k = 0; k < TOPK; k++)
            local[b * TOPK + k] = k < n ? (int32_t)((((seq_lens[b] - 1 - 7 * k) % seq_lens[b]) + seq_lens[b]) % seq_lens[b]) : -1;
    }
    for (i = 0; i < BATCH * HEADS * D; i++) q[i] = aiter_mla_f32_to_bf16(frand(1.0f));

    aiter_mla_sparse_index_args c = {0};
    c.indices = (const int32_t *)dev(local, sizeof local);
    c.req_id = (const int32_t *)dev(req_id, sizeof req_id);
    c.block_table = (const int32_t *)dev(block_table, sizeof block_table);
    c.block_table_stride = MAX_PAGES;
    c.block_size = PAGE;
    c.num_requests = BATCH;
    c.num_tokens = BATCH;
    c.topk = TOPK;
    c.out = (int32_t *)dev(global, sizeof global);
    c.valid_counts = (int32_t *)dev(valid, sizeof valid);
    TRY(OP(aiter_mla_convert_sparse_indices, &c));

    aiter_mla_sparse_args a = {0};
    a.q = dev(q, sizeof(uint16_t) * BATCH * HEADS * D);
    a.kv_cache = w.kv_cache;
    a.num_slots = (int64_t)num_blocks * PAGE;
    a.kv_cache_bytes = cache_bytes; /* with cache_is_ds_mla left 0 the call would refuse these bytes */
    a.cache_is_ds_mla = 1;
    a.indices = c.out;
    a.topk_length = c.valid_counts; /* valid entries come first in every row here */
    a.o = dev(o, sizeof(float) * BATCH * HEADS * L);
    a.o_dtype = AITER_MLA_F32;
    a.lse = (float *)dev(lse, sizeof lse);
    a.num_tokens = BATCH;
    a.num_heads = HEADS;
    a.topk = TOPK;
    a.sm_scale = sm_scale;
    a.num_cu = num_cu;
    TRY(OP(aiter_mla_sparse_attention, &a));
    back(cache);
    back(global);
    back(valid);
    back(o);
    back(lse);

    mismatches += memcmp(cache, cache_ref, cache_bytes) != 0; /* the writer's bytes, as the reference writes them */
    /* the slots by hand: position p of request b lies in page block_table[b][p / PAGE] */
    for (b = 0; b < BATCH; b++) {
        int n = 0;
        for (k = 0; k < TOPK; k++) {
            const int32_t p = local[b * TOPK + k];
            const int32_t want = p < 0 ? -1 : block_table[b * MAX_PAGES + p / PAGE] * PAGE + p % PAGE;
            mismatches += global[b * TOPK + k] != want;
            n += p >= 0;
        }
        mismatches += valid[b] != n;
    }
    /* naive: softmax over the selected rows, read back from the cache */
    {
        float *rows = (float *)malloc(sizeof(float) * TOPK * D);
        double *s = (double *)malloc(sizeof(double) * TOPK);
        for (b = 0; b < BATCH && !mismatches; b++) {
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
                    double num = 0.0, want, e;
                    for (k = 0; k < valid[b]; k++) num += exp(s[k] - m) * rows[(size_t)k * D + d];
                    want = num / den;
                    e = o[((size_t)b * HEADS + h) * L + d] - want;
                    err2 += e * e;
                    ref2 += want * want;
                    if (!(fabs(e) <= max_abs)) max_abs = fabs(e); /* a NaN sticks */
                    if (fabs(want) > max_o) max_o = fabs(want);
                }
                if (!(fabs(m + log(den) - lse[b * HEADS + h]) <= lse_err)) lse_err = fabs(m + log(den) - lse[b * HEADS + h]);
            }
        }
        free(rows);
        free(s);
    }
    printf("sparse decode: %d requests, %d heads, top-%d over fp8_ds_mla caches (valid per row:", BATCH, HEADS, TOPK);
    for (b = 0; b < BATCH; b++) printf(" %d", valid[b]);
    printf("), %s\n", where_name());
    printf("cache bytes unlike the reference writer's, slots or counts unlike the block table's: %d\n", mismatches);
    if (mismatches) printf("o and lse not compared (the cache or the slots are wrong)\n");
    else
        printf("max |o - naive| %.3g (max |o| %.3g), relative %.3g, max |lse - naive| %.3g\n", max_abs, max_o,
               ref2 > 0.0 ? sqrt(err2 / ref2) : sqrt(err2), lse_err);
    /* the naive rows are the cache's values exactly: the reference's sums in fp32 stay within
     * 1e-4; the GPU's bf16 products within SPEC 8's bf16 bounds */
    failed = mismatches || !(ref2 > 0.0) || (use_gpu ? !(sqrt(err2 / ref2) <= 1e-2 && lse_err <= 1e-3) : !(max_abs < 1e-4 && lse_err < 1e-4));
    printf("%s\n", failed ? "FAIL" : "PASS");
    free(cache); free(cache_ref); free(latent); free(q); free(o);
    where_done();
    return failed ? 1 : 0;
}
