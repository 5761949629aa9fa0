/* dsv4.c - one DeepSeek V4 decode step over three layers (compress ratio 1, 4 and 128) and a
 * chunked prefill of a ratio-4 layer, on the GPU when there is one, else on the CPU reference.
 *
 * Per layer: write every cached token's 512-dim key into the layer's SWA cache (MODEL1
 * pages, 64 tokens per page) and its compressed entries into the compressed cache (64
 * entries per page at ratio 4, 2 at ratio 128), build each token's key lists with the index
 * builders (SWA window; the indexer's top-k at ratio 4; every compressed entry at ratio
 * 128), copy the ragged lists into fixed-capacity buffers as a captured graph would, and
 * attend with a per-head attention sink. Then aiter_mla_v4_prefill runs vLLM's chunked
 * prefill of five requests over a ratio-4 layer (its gathers into a workspace, the combine
 * of each token's rows, the attention). The caches the writer left must equal the reference
 * writer's bytes, and an independent double-precision computation written here (its own
 * reading of the page layout, its own key sets from positions) checks every output; the
 * program prints the errors and PASS or FAIL, and exits non-zero on failure. */
#define AITER_MLA_IMPLEMENTATION
#include "../aiter_mla.h"
#include "where.h"

enum {
    BATCH = 3,          /* requests; request 1 decodes two tokens (speculative decoding) */
    TOKENS = 4,         /* query tokens of the step */
    HEADS = 16,
    D = 512,            /* head_dim: 448 nope + 64 rope */
    W = 128,            /* sliding window */
    SWA_PAGE = 64,      /* SWA cache tokens per page */
    MAX_LEN = 2048,     /* max_model_len */
    TOPK = 64,          /* the indexer's top-k at ratio 4 */
    LAYERS = 3
};

static uint64_t rng_state = 0x5eed4d5ull;
static uint32_t urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}
static float frand(float amp) { return ((float)urand() / 4294967296.0f * 2.0f - 1.0f) * amp; }
/* A step that visits n entries once each, i * step + c mod n being distinct for i < n (as an
 * indexer's top-k entries are): a small prime that does not divide n. */
static int coprime_step(int n) {
    static const int primes[] = {7, 11, 13, 17, 19, 23};
    int i;
    for (i = 0; i < 6; i++)
        if (n % primes[i] != 0) return primes[i];
    return 1;
}

/* The page layout read by hand: block_size rows of 576 bytes (448 fp8, 64 bf16), then
 * block_size records of 8 scale bytes, 2^(byte - 127) each covering 64 values. */
static void naive_row(const unsigned char *cache, int64_t page_bytes, int block_size, int64_t slot, aiter_mla_dtype fp8,
                      double *out) {
    const unsigned char *page = cache + slot / block_size * page_bytes;
    const int off = (int)(slot % block_size);
    int d;
    for (d = 0; d < 448; d++)
        out[d] = (double)aiter_mla_fp8_to_f32(page[off * 576 + d], fp8) * ldexp(1.0, page[block_size * 576 + off * 8 + d / 64] - 127);
    for (d = 0; d < 64; d++) {
        const unsigned char *p = page + off * 576 + 448 + 2 * d;
        out[448 + d] = aiter_mla_bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
    }
}

/* Write `count` random rows (amplitudes varying per 64-value group) at the slots of entries
 * 0..count-1 of a request through its block table: into `cache` where the operations run, and
 * by the reference writer into the host copy `shadow` (the GPU writer's bytes must match it). */
static aiter_mla_status write_entries(void *cache, unsigned char *shadow, int64_t num_blocks, int block_size, const int32_t *bt_row,
                                      int count, aiter_mla_dtype fp8) {
    uint16_t *kv = (uint16_t *)malloc(sizeof(uint16_t) * (size_t)(count > 0 ? count : 1) * D);
    int64_t *slots = (int64_t *)malloc(sizeof(int64_t) * (size_t)(count > 0 ? count : 1));
    aiter_mla_v4_cache_write_args w = {0};
    aiter_mla_status st;
    int i, d;
    for (i = 0; i < count; i++) {
        for (d = 0; d < D; d++) kv[(size_t)i * D + d] = aiter_mla_f32_to_bf16(frand(d < 448 ? (float)(1 + (d / 64) % 3) : 1.0f));
        slots[i] = (int64_t)bt_row[i / block_size] * block_size + i % block_size;
    }
    void *kv_at = temp_copy(kv, sizeof(uint16_t) * (size_t)(count > 0 ? count : 1) * D);
    void *slots_at = temp_copy(slots, sizeof(int64_t) * (size_t)(count > 0 ? count : 1));
    w.kv = kv_at;
    w.slot_mapping = (const int64_t *)slots_at;
    w.kv_cache = cache; /* already where the operations run */
    w.num_blocks = num_blocks;
    w.block_size = block_size;
    w.num_tokens = count;
    w.fp8_dtype = fp8;
    st = OP(aiter_mla_v4_cache_write, &w);
    if (st == AITER_MLA_OK) {
        w.kv = kv;
        w.slot_mapping = slots;
        w.kv_cache = shadow;
        st = aiter_mla_v4_cache_write_ref(&w);
    }
    temp_free(kv_at);
    temp_free(slots_at);
    free(kv);
    free(slots);
    return st;
}

/* A MODEL1 cache as the naive check reads it: pages of block_size rows, a request's block table row. */
typedef struct {
    const unsigned char *pages;
    int64_t page_bytes;
    int block_size;
    const int32_t *bt_row;
    aiter_mla_dtype fp8;
} paged_rows;

/* A layer's two MODEL1 caches for nreq requests: the SWA cache (SWA_PAGE raw tokens a page) and
 * the compressed one (cbs entries a page), request b owning pages b, b + nreq, ... of each. */
typedef struct {
    int nreq, cbs, swa_pages, c_pages;     /* c_pages, swa_pages: pages a request */
    int64_t swa_page_bytes, c_page_bytes;
    aiter_mla_dtype swa_fp8;               /* the compressed cache is e4m3fn */
    unsigned char *swa, *comp;             /* host copies: what the writer left, once layer_fill returns */
    void *swa_at, *comp_at;                /* where the operations run */
    int32_t *swa_bt, *c_bt;                /* block tables [nreq, swa_pages], [nreq, c_pages] */
} layer_caches;

/* Makes a layer's caches and writes request b's seq_lens[b] raw tokens and seq_lens[b] / ratio
 * compressed entries (none at ratio 1); the host copies then hold what the writer left, and
 * *writer_errors counts the caches whose bytes differ from the reference writer's. */
static aiter_mla_status layer_fill(layer_caches *lc, int nreq, const int32_t *seq_lens, int ratio, aiter_mla_dtype swa_fp8,
                                   int *writer_errors) {
    size_t swa_bytes, c_bytes;
    unsigned char *swa_ref, *comp_ref;
    aiter_mla_status st = AITER_MLA_OK;
    int b, i;
    lc->nreq = nreq;
    lc->cbs = AITER_MLA_V4_COMPRESSED_PAGE_TOKENS / ratio;
    lc->swa_pages = MAX_LEN / SWA_PAGE;
    lc->c_pages = ratio > 1 ? MAX_LEN / ratio / lc->cbs : 1;
    lc->swa_page_bytes = aiter_mla_v4_page_bytes(SWA_PAGE);
    lc->c_page_bytes = aiter_mla_v4_page_bytes(lc->cbs);
    lc->swa_fp8 = swa_fp8;
    swa_bytes = (size_t)nreq * lc->swa_pages * lc->swa_page_bytes;
    c_bytes = (size_t)nreq * lc->c_pages * lc->c_page_bytes;
    lc->swa = (unsigned char *)calloc(swa_bytes, 1);
    lc->comp = (unsigned char *)calloc(c_bytes, 1);
    swa_ref = (unsigned char *)calloc(swa_bytes, 1);
    comp_ref = (unsigned char *)calloc(c_bytes, 1);
    lc->swa_bt = (int32_t *)malloc(sizeof(int32_t) * (size_t)nreq * lc->swa_pages);
    lc->c_bt = (int32_t *)malloc(sizeof(int32_t) * (size_t)nreq * lc->c_pages);
    lc->swa_at = dev(lc->swa, swa_bytes);
    lc->comp_at = dev(lc->comp, c_bytes);
    for (b = 0; b < nreq && st == AITER_MLA_OK; b++) {
        for (i = 0; i < lc->swa_pages; i++) lc->swa_bt[b * lc->swa_pages + i] = i * nreq + b;
        for (i = 0; i < lc->c_pages; i++) lc->c_bt[b * lc->c_pages + i] = i * nreq + b;
        st = write_entries(lc->swa_at, swa_ref, (int64_t)nreq * lc->swa_pages, SWA_PAGE, lc->swa_bt + b * lc->swa_pages, seq_lens[b], swa_fp8);
        if (st == AITER_MLA_OK && ratio > 1)
            st = write_entries(lc->comp_at, comp_ref, (int64_t)nreq * lc->c_pages, lc->cbs, lc->c_bt + b * lc->c_pages, seq_lens[b] / ratio,
                               AITER_MLA_FP8_E4M3FN);
    }
    back(lc->swa); /* the naive check reads the pages */
    back(lc->comp);
    *writer_errors += memcmp(lc->swa, swa_ref, swa_bytes) != 0;
    *writer_errors += memcmp(lc->comp, comp_ref, c_bytes) != 0;
    free(swa_ref);
    free(comp_ref);
    return st;
}
static void layer_free(layer_caches *lc) {
    free(lc->swa);
    free(lc->comp);
    free(lc->swa_bt);
    free(lc->c_bt);
}
/* Request b's rows in either cache, as the naive check reads them. */
static paged_rows swa_rows_of(const layer_caches *lc, int b) {
    const paged_rows r = {lc->swa, lc->swa_page_bytes, SWA_PAGE, lc->swa_bt + b * lc->swa_pages, lc->swa_fp8};
    return r;
}
static paged_rows comp_rows_of(const layer_caches *lc, int b) {
    const paged_rows r = {lc->comp, lc->c_page_bytes, lc->cbs, lc->c_bt + b * lc->c_pages, AITER_MLA_FP8_E4M3FN};
    return r;
}
typedef struct {
    double err2, ref2, abs, lse; /* squared error and reference sums of o; the largest |o| and |lse| errors */
    int empty;                   /* (worst) runs whose naive outputs were all zero: nothing was checked */
} errors;

/* The naive answer for one token at position pos: its keys are the raw tokens of the window
 * [pos - W + 1, pos] in the SWA cache and nc compressed entries (entries[i], or i when
 * entries is NULL), read by hand; a two-pass softmax in double with the sink. The token's o
 * [HEADS, D] and lse [HEADS] are measured against it into e. */
static void naive_token(const uint16_t *q_t, const uint16_t *o_t, const float *lse_t, const float *sink, float sm_scale,
                        int64_t pos, paged_rows swa, paged_rows comp, const int32_t *entries, int nc, errors *e) {
    const int64_t lo = pos - W + 1 > 0 ? pos - W + 1 : 0;
    const int nk = (int)(pos - lo + 1) + nc;
    double *rows = (double *)malloc(sizeof(double) * (size_t)nk * D), *s = (double *)malloc(sizeof(double) * (size_t)nk);
    int k = 0, i, h, d;
    int64_t p;
    for (p = lo; p <= pos; p++, k++)
        naive_row(swa.pages, swa.page_bytes, swa.block_size, (int64_t)swa.bt_row[p / swa.block_size] * swa.block_size + p % swa.block_size,
                  swa.fp8, rows + (size_t)k * D);
    for (i = 0; i < nc; i++, k++) {
        const int j = entries ? entries[i] : i;
        naive_row(comp.pages, comp.page_bytes, comp.block_size, (int64_t)comp.bt_row[j / comp.block_size] * comp.block_size + j % comp.block_size,
                  comp.fp8, rows + (size_t)k * D);
    }
    for (h = 0; h < HEADS; h++) {
        double m = -INFINITY, den = 0.0, sum;
        for (k = 0; k < nk; k++) {
            double dot = 0.0;
            for (d = 0; d < D; d++) dot += (double)aiter_mla_bf16_to_f32(q_t[(size_t)h * D + d]) * rows[(size_t)k * D + d];
            s[k] = dot * sm_scale;
            if (s[k] > m) m = s[k];
        }
        for (k = 0; k < nk; k++) den += exp(s[k] - m);
        sum = den;
        if (sink[h] != -INFINITY) den += exp((double)sink[h] - m);
        for (d = 0; d < D; d++) {
            double num = 0.0, got = aiter_mla_bf16_to_f32(o_t[(size_t)h * D + d]);
            for (k = 0; k < nk; k++) num += exp(s[k] - m) * rows[(size_t)k * D + d];
            e->err2 += (got - num / den) * (got - num / den);
            e->ref2 += (num / den) * (num / den);
            if (!(fabs(got - num / den) <= e->abs)) e->abs = fabs(got - num / den); /* a NaN sticks */
        }
        if (!(fabs(m + log(sum) - lse_t[h]) <= e->lse)) e->lse = fabs(m + log(sum) - lse_t[h]);
    }
    free(rows);
    free(s);
}
static double relative(const errors *e) { return e->err2 == e->err2 ? sqrt(e->err2 / (e->ref2 > 0.0 ? e->ref2 : 1.0)) : INFINITY; }
/* The worst of each measure over the runs checked so far (a NaN counts as the worst). */
static void note_worst(const errors *e, errors *worst) {
    worst->empty += !(e->ref2 > 0.0);
    if (!(relative(e) <= relative(worst))) worst->err2 = e->err2, worst->ref2 = e->ref2;
    if (!(e->abs <= worst->abs)) worst->abs = e->abs;
    if (!(e->lse <= worst->lse)) worst->lse = e->lse;
}

int main(void) {
    static const int ratios[LAYERS] = {1, 4, 128};
    const int32_t q_lens[BATCH] = {1, 2, 1}, seq_lens[BATCH] = {90, 700, 1500};
    const float sm_scale = 0.044194173824159216f; /* 512^-0.5 */
    int32_t qsl[BATCH + 1], token_req[TOKENS];
    int64_t positions[TOKENS];
    uint16_t *q = (uint16_t *)malloc(sizeof(uint16_t) * TOKENS * HEADS * D);
    uint16_t *o = (uint16_t *)malloc(sizeof(uint16_t) * TOKENS * HEADS * D);
    float lse[TOKENS * HEADS], sink[HEADS];
    errors worst = {0.0, 0.0, 0.0, 0.0, 0}; /* err2 / ref2 of the worst relative error so far */
    int layer, b, t, h, i, failed = 0;
    int writer_errors = 0; /* caches whose bytes differ from the reference writer's */

    qsl[0] = 0;
    for (b = 0; b < BATCH; b++) qsl[b + 1] = qsl[b] + q_lens[b];
    for (b = 0; b < BATCH; b++)
        for (i = 0; i < q_lens[b]; i++) {
            token_req[qsl[b] + i] = b;
            positions[qsl[b] + i] = seq_lens[b] - q_lens[b] + i;
        }
    for (h = 0; h < HEADS; h++) sink[h] = h % 4 == 3 ? -INFINITY : frand(2.0f); /* a sink per head, some none */
    where_init();

    for (layer = 0; layer < LAYERS; layer++) {
        const int ratio = ratios[layer];
        const aiter_mla_dtype swa_fp8 = ratio == 128 ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN; /* gfx942-style SWA */
        const int c128_width = (MAX_LEN + 127) / 128;
        layer_caches lc;
        int32_t local[TOKENS * TOPK];
        int32_t swa_idx[TOKENS * W], swa_ptr[TOKENS + 1], c_idx[TOKENS * (MAX_LEN / 4)], c_ptr[TOKENS + 1];
        /* persistent buffers a captured graph reads (capacity rows x max entries per row) */
        int32_t g_swa_idx[TOKENS * W], g_swa_ptr[TOKENS + 1], g_c_idx[TOKENS * (MAX_LEN / 4)], g_c_ptr[TOKENS + 1];
        aiter_mla_v4_swa_index_args si = {0};
        aiter_mla_v4_ragged_copy_args cp = {0};
        aiter_mla_v4_attention_args a = {0};
        errors err = {0.0, 0.0, 0.0, 0.0, 0};

        TRY(layer_fill(&lc, BATCH, seq_lens, ratio, swa_fp8, &writer_errors));
        for (i = 0; i < TOKENS * HEADS * D; i++) q[i] = aiter_mla_f32_to_bf16(frand(1.0f));

        /* the SWA lists: raw tokens [max(0, pos - 127), pos] */
        si.query_start_loc = (const int32_t *)dev(qsl, sizeof qsl);
        si.seq_lens = (const int32_t *)dev(seq_lens, sizeof seq_lens);
        si.token_to_req = (const int32_t *)dev(token_req, sizeof token_req);
        si.block_table = (const int32_t *)dev(lc.swa_bt, sizeof(int32_t) * BATCH * lc.swa_pages);
        si.block_table_stride = lc.swa_pages;
        si.block_size = SWA_PAGE;
        si.num_reqs = BATCH;
        si.num_tokens = TOKENS;
        si.out.indices = (int32_t *)dev(swa_idx, sizeof swa_idx);
        si.out.indptr = (int32_t *)dev(swa_ptr, sizeof swa_ptr);
        si.out.capacity = TOKENS * W;
        TRY(OP(aiter_mla_v4_swa_indices, &si));
        cp.indices = si.out.indices;
        cp.indptr = si.out.indptr;
        cp.num_rows = TOKENS;
        cp.max_entries_per_row = W;
        cp.indices_buffer = (int32_t *)dev(g_swa_idx, sizeof g_swa_idx);
        cp.indices_buffer_capacity = TOKENS * W;
        cp.indptr_buffer = (int32_t *)dev(g_swa_ptr, sizeof g_swa_ptr);
        cp.indptr_buffer_capacity = TOKENS + 1;
        TRY(OP(aiter_mla_v4_copy_ragged, &cp));

        /* the compressed lists */
        if (ratio == 4) { /* the indexer's choice: entries j < (pos + 1) / 4, valid first, -1 padded */
            aiter_mla_v4_topk_args tk = {0};
            for (t = 0; t < TOKENS; t++) {
                const int n = (int)((positions[t] + 1) / 4), take = n < TOPK ? n : TOPK, step = coprime_step(n);
                for (i = 0; i < TOPK; i++) local[t * TOPK + i] = i < take ? (int32_t)(((int64_t)i * step + t) % n) : -1;
            }
            tk.topk_indices = (const int32_t *)dev(local, sizeof local);
            tk.topk = TOPK;
            tk.token_to_req = si.token_to_req;
            tk.block_table = (const int32_t *)dev(lc.c_bt, sizeof(int32_t) * BATCH * lc.c_pages);
            tk.block_table_stride = lc.c_pages;
            tk.block_size = lc.cbs;
            tk.num_reqs = BATCH;
            tk.num_tokens = TOKENS;
            tk.out.indices = (int32_t *)dev(c_idx, sizeof c_idx);
            tk.out.indptr = (int32_t *)dev(c_ptr, sizeof c_ptr);
            tk.out.capacity = TOKENS * TOPK;
            TRY(OP(aiter_mla_v4_global_topk, &tk));
        } else if (ratio == 128) { /* every compressed entry j < (pos + 1) / 128 */
            aiter_mla_v4_c128_args c = {0};
            c.positions = (const int64_t *)dev(positions, sizeof positions);
            c.token_to_req = si.token_to_req;
            c.block_table = (const int32_t *)dev(lc.c_bt, sizeof(int32_t) * BATCH * lc.c_pages);
            c.block_table_stride = lc.c_pages;
            c.block_size = lc.cbs;
            c.num_reqs = BATCH;
            c.compress_ratio = 128;
            c.width = c128_width;
            c.num_tokens = TOKENS;
            c.out.indices = (int32_t *)dev(c_idx, sizeof c_idx);
            c.out.indptr = (int32_t *)dev(c_ptr, sizeof c_ptr);
            c.out.capacity = TOKENS * c128_width;
            TRY(OP(aiter_mla_v4_c128_indices, &c));
        }
        if (ratio > 1) {
            cp.indices = (const int32_t *)dev(c_idx, sizeof c_idx); /* where the builder wrote them */
            cp.indptr = (const int32_t *)dev(c_ptr, sizeof c_ptr);
            cp.max_entries_per_row = ratio == 4 ? TOPK : c128_width;
            cp.indices_buffer = (int32_t *)dev(g_c_idx, sizeof g_c_idx);
            cp.indices_buffer_capacity = (int64_t)TOKENS * cp.max_entries_per_row;
            cp.indptr_buffer = (int32_t *)dev(g_c_ptr, sizeof g_c_ptr);
            TRY(OP(aiter_mla_v4_copy_ragged, &cp));
        }

        /* attend: keys = SWA cache, extra keys = compressed cache (none at ratio 1) */
        a.q = dev(q, sizeof(uint16_t) * TOKENS * HEADS * D);
        a.o = dev(o, sizeof(uint16_t) * TOKENS * HEADS * D);
        a.lse = (float *)dev(lse, sizeof lse);
        a.attn_sink = (const float *)dev(sink, sizeof sink);
        a.num_tokens = TOKENS;
        a.num_heads = HEADS;
        a.sm_scale = sm_scale;
        a.keys.cache = lc.swa_at;
        a.keys.num_blocks = (int64_t)BATCH * lc.swa_pages;
        a.keys.block_size = SWA_PAGE;
        a.keys.dtype = swa_fp8;
        a.keys.indices = (const int32_t *)dev(g_swa_idx, sizeof g_swa_idx);
        a.keys.indptr = (const int32_t *)dev(g_swa_ptr, sizeof g_swa_ptr);
        a.keys.capacity = TOKENS * W; /* the buffers' entries: the attention reads no row past them */
        if (ratio > 1) {
            a.extra_keys.cache = lc.comp_at;
            a.extra_keys.num_blocks = (int64_t)BATCH * lc.c_pages;
            a.extra_keys.block_size = lc.cbs;
            a.extra_keys.indices = (const int32_t *)dev(g_c_idx, sizeof g_c_idx);
            a.extra_keys.indptr = (const int32_t *)dev(g_c_ptr, sizeof g_c_ptr);
            a.extra_keys.capacity = cp.indices_buffer_capacity;
        }
        a.num_cu = num_cu; /* the GPU's blocks then take several tokens each where there are many */
        TRY(OP(aiter_mla_v4_attention, &a));
        back(o);
        back(lse);
        back(g_swa_ptr);
        back(g_c_ptr);

        /* naive: key sets from the positions, rows read by hand */
        for (t = 0; t < TOKENS; t++) {
            const int r = token_req[t];
            const int64_t pos = positions[t];
            const int nc = ratio == 1 ? 0 : ratio == 4 ? ((pos + 1) / 4 < TOPK ? (int)((pos + 1) / 4) : TOPK) : (int)((pos + 1) / 128);
            naive_token(q + (size_t)t * HEADS * D, o + (size_t)t * HEADS * D, lse + t * HEADS, sink, sm_scale, pos, swa_rows_of(&lc, r),
                        comp_rows_of(&lc, r), ratio == 4 ? local + t * TOPK : NULL, nc, &err);
        }
        printf("layer ratio %3d: SWA keys per token", ratio);
        for (t = 0; t < TOKENS; t++) printf(" %d", g_swa_ptr[t + 1] - g_swa_ptr[t]);
        if (ratio > 1) {
            printf(", compressed keys per token");
            for (t = 0; t < TOKENS; t++) printf(" %d", g_c_ptr[t + 1] - g_c_ptr[t]);
        }
        printf("\n                 max |o - naive| %.3g, relative %.3g, max |lse - naive| %.3g\n", err.abs, relative(&err), err.lse);
        note_worst(&err, &worst);
        layer_free(&lc);
        mirrors_free();
    }
    /* A chunked prefill of a ratio-4 layer (aiter_mla_v4_prefill: vLLM's workspace flow, the
     * requests taken 4 at a time): each request's new tokens after its cached prefix (the
     * first has none); every token attends its window and the indexer's top-k entries. */
    {
        enum { PBATCH = 5, PTOKENS = 87 };
        const int32_t pq_lens[PBATCH] = {40, 20, 16, 8, 3}, pseq[PBATCH] = {40, 300, 700, 1000, 129};
        layer_caches lc;
        int32_t pqsl[PBATCH + 1], ptopk[PTOKENS * TOPK];
        uint16_t *pq = (uint16_t *)malloc(sizeof(uint16_t) * PTOKENS * HEADS * D), *po = (uint16_t *)malloc(sizeof(uint16_t) * PTOKENS * HEADS * D);
        float plse[PTOKENS * HEADS];
        unsigned char *ws;
        aiter_mla_v4_prefill_args pf = {0};
        errors err = {0.0, 0.0, 0.0, 0.0, 0};

        pqsl[0] = 0;
        for (b = 0; b < PBATCH; b++) pqsl[b + 1] = pqsl[b] + pq_lens[b];
        TRY(layer_fill(&lc, PBATCH, pseq, 4, AITER_MLA_FP8_E4M3FN, &writer_errors));
        for (i = 0; i < PTOKENS * HEADS * D; i++) pq[i] = aiter_mla_f32_to_bf16(frand(1.0f));
        for (b = 0; b < PBATCH; b++) /* the indexer's choice, as in the decode layers */
            for (t = pqsl[b]; t < pqsl[b + 1]; t++) {
                const int64_t pos = pseq[b] - pq_lens[b] + (t - pqsl[b]);
                const int n = (int)((pos + 1) / 4), take = n < TOPK ? n : TOPK;
                for (i = 0; i < TOPK; i++) ptopk[t * TOPK + i] = i < take ? (int32_t)(((int64_t)i * coprime_step(n) + t) % n) : -1;
            }
        pf.attn.q = dev(pq, sizeof(uint16_t) * PTOKENS * HEADS * D);
        pf.attn.o = dev(po, sizeof(uint16_t) * PTOKENS * HEADS * D);
        pf.attn.lse = (float *)dev(plse, sizeof plse);
        pf.attn.attn_sink = (const float *)dev(sink, sizeof sink);
        pf.attn.num_heads = HEADS;
        pf.attn.sm_scale = sm_scale;
        pf.attn.num_cu = num_cu;
        pf.batch = PBATCH;
        pf.query_start_loc = (const int32_t *)dev(pqsl, sizeof pqsl);
        pf.query_start_loc_host = pqsl; /* the host reads only this copy */
        pf.seq_lens = (const int32_t *)dev(pseq, sizeof pseq);
        pf.compress_ratio = 4;
        pf.window = W;
        pf.max_model_len = MAX_LEN;
        pf.max_num_batched_tokens = PTOKENS;
        pf.chunk_size = 4;
        pf.topk_indices = (const int32_t *)dev(ptopk, sizeof ptopk);
        pf.topk = TOPK;
        pf.swa_cache = lc.swa_at;
        pf.swa_num_blocks = (int64_t)PBATCH * lc.swa_pages;
        pf.swa_block_size = SWA_PAGE;
        pf.swa_block_table = (const int32_t *)dev(lc.swa_bt, sizeof(int32_t) * PBATCH * lc.swa_pages);
        pf.swa_block_table_stride = lc.swa_pages;
        pf.compressed_cache = lc.comp_at;
        pf.compressed_num_blocks = (int64_t)PBATCH * lc.c_pages;
        pf.compressed_block_size = lc.cbs;
        pf.compressed_block_table = (const int32_t *)dev(lc.c_bt, sizeof(int32_t) * PBATCH * lc.c_pages);
        pf.compressed_block_table_stride = lc.c_pages;
        TRY(aiter_mla_v4_prefill_workspace_size(&pf, &pf.workspace_bytes));
        ws = (unsigned char *)calloc(pf.workspace_bytes, 1);
        pf.workspace = dev(ws, pf.workspace_bytes);
        TRY(OP(aiter_mla_v4_prefill, &pf));
        back(po);
        back(plse);

        for (b = 0; b < PBATCH; b++)
            for (t = pqsl[b]; t < pqsl[b + 1]; t++) {
                const int64_t pos = pseq[b] - pq_lens[b] + (t - pqsl[b]);
                const int nc = (pos + 1) / 4 < TOPK ? (int)((pos + 1) / 4) : TOPK;
                naive_token(pq + (size_t)t * HEADS * D, po + (size_t)t * HEADS * D, plse + t * HEADS, sink, sm_scale, pos, swa_rows_of(&lc, b),
                            comp_rows_of(&lc, b), ptopk + t * TOPK, nc, &err);
            }
        printf("prefill, ratio 4: %d requests in chunks of 4, new tokens", PBATCH);
        for (b = 0; b < PBATCH; b++) printf(" %d", pq_lens[b]);
        printf(" after prefixes of");
        for (b = 0; b < PBATCH; b++) printf(" %d", pseq[b] - pq_lens[b]);
        printf(" (workspace %zu bytes)\n                 max |o - naive| %.3g, relative %.3g, max |lse - naive| %.3g\n",
               pf.workspace_bytes, err.abs, relative(&err), err.lse);
        note_worst(&err, &worst);
        layer_free(&lc);
        free(pq);
        free(po);
        free(ws);
        mirrors_free();
    }

    /* bf16 output against a double-precision reference: SPEC 8's bf16 tolerances */
    failed = !(relative(&worst) <= 1e-2) || !(worst.lse <= 1e-3) || writer_errors || worst.empty;
    printf("caches unlike the reference writer's: %d; runs with an all-zero answer: %d\n", writer_errors, worst.empty);
    printf("DeepSeek V4: a decode step of %d requests (%d tokens) over layers of ratio 1, 4, 128 and a chunked prefill, %d heads (%s)\n",
           BATCH, TOKENS, HEADS, where_name());
    printf("max |o - naive| %.3g, max relative error %.3g (<= 1e-2), max |lse - naive| %.3g (<= 1e-3): %s\n", worst.abs,
           relative(&worst), worst.lse, failed ? "FAIL" : "PASS");
    free(q);
    free(o);
    where_done();
    return failed ? 1 : 0;
}
