/* test_gpu.c - every GPU kernel against the CPU reference, on fresh random inputs with
 * poisoned outputs, over a sweep of shapes (SPEC 8 tolerances). Needs a GPU build
 * (kernels.hip + examples/gpu.hip). `--quick` runs a reduced sweep (for the sanitizers); other
 * arguments pick groups: small, decode, prefill. */
#define AITER_MLA_IMPLEMENTATION
#include "../aiter_mla.h"
#include "testing.h"
#include "../examples/gpu.h"

static int g_quick = 0;
static void *g_stream = NULL;

/* ---- reference in parallel: one CPU reference call per (request, head) ------------------ */
static void ref_decode_parallel(const aiter_mla_decode_args *a, int64_t num_tokens) {
    const int H = a->num_heads;
    const size_t qe = aiter_mla_dtype_size(a->q_dtype ? a->q_dtype : AITER_MLA_BF16);
    const size_t oe = aiter_mla_dtype_size(a->o_dtype ? a->o_dtype : AITER_MLA_BF16);
    const int64_t qst = a->q_stride_token ? a->q_stride_token : (int64_t)H * 576;
    const int64_t ost = a->o_stride_token ? a->o_stride_token : (int64_t)H * 512;
    float *lse_h = (float *)test_malloc((size_t)H * (size_t)(num_tokens + 1) * sizeof(float));
    int job, failures = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : failures)
    for (job = 0; job < a->batch * H; job++) {
        const int b = job / H, h = job % H;
        aiter_mla_decode_args s = *a;
        s.batch = 1;
        s.num_heads = 1;
        s.qo_indptr = a->qo_indptr + b;
        s.kv_indptr = a->kv_indptr + b;
        s.kv_last_page_lens = a->kv_last_page_lens + b;
        s.q = (const char *)a->q + (size_t)h * (a->q_stride_head ? (size_t)a->q_stride_head : 576) * qe;
        s.q_stride_token = qst;
        s.q_stride_head = 576;
        s.o = (char *)a->o + (size_t)h * (a->o_stride_head ? (size_t)a->o_stride_head : 512) * oe;
        s.o_stride_token = ost;
        s.o_stride_head = 512;
        s.lse = a->lse ? lse_h + (int64_t)h * num_tokens : NULL;
        if (aiter_mla_decode_ref(&s) != AITER_MLA_OK) failures++;
    }
    CHECK(failures == 0, "reference decode failed: %s", aiter_mla_last_error());
    if (a->lse) {
        int64_t t;
        int h;
        for (t = 0; t < num_tokens; t++)
            for (h = 0; h < H; h++) a->lse[t * H + h] = lse_h[(int64_t)h * num_tokens + t];
    }
    free(lse_h);
}

static void to_f32(const void *src, float *dst, int64_t n, aiter_mla_dtype t) {
    int64_t i;
    for (i = 0; i < n; i++) dst[i] = aiter_mla_load_f32(src, i, t);
}

/* ---- one decode case ---------------------------------------------------------------------- */
typedef struct decode_case {
    int heads, q_len, page, batch, num_cu;
    aiter_mla_dtype q_dtype, kv_dtype, o_dtype;
    const int32_t *ctx; /* [batch] keys per request (the new tokens included) */
    int with_lse, strided;
} decode_case;

static void run_decode_case(const decode_case *c, test_rng *rng) {
    const int B = c->batch, H = c->heads, P = c->page;
    char what[200];
    int b;
    int32_t *qo = (int32_t *)test_malloc((B + 1) * 4), *kvp = (int32_t *)test_malloc((B + 1) * 4);
    int32_t *last = (int32_t *)test_malloc(B * 4);
    int64_t pages_total = 0, T;
    const int kv_fp8 = dtype_is_fp8(c->kv_dtype);
    const float kv_scale = kv_fp8 ? 0.05f : 1.0f, q_scale = dtype_is_fp8(c->q_dtype) ? 0.25f : 1.0f;
    snprintf(what, sizeof what, "decode H=%d q_len=%d page=%d batch=%d cu=%d q=%s kv=%s o=%s%s%s", H, c->q_len, P, B,
             c->num_cu, aiter_mla_dtype_name(c->q_dtype), aiter_mla_dtype_name(c->kv_dtype), aiter_mla_dtype_name(c->o_dtype),
             c->with_lse ? " lse" : "", c->strided ? " strided" : "");
    qo[0] = kvp[0] = 0;
    for (b = 0; b < B; b++) {
        int32_t pages = (c->ctx[b] + P - 1) / P;
        qo[b + 1] = qo[b] + c->q_len;
        kvp[b + 1] = kvp[b] + pages;
        last[b] = pages ? c->ctx[b] - (pages - 1) * P : 0;
        pages_total += pages;
    }
    T = qo[B];
    /* cache: more pages than used, shuffled, plus a few page ids that point outside */
    int64_t num_pages = pages_total + 7;
    int32_t *perm = (int32_t *)test_malloc((size_t)num_pages * 4), *kv_indices = (int32_t *)test_malloc((size_t)(pages_total + 1) * 4);
    int64_t i;
    for (i = 0; i < num_pages; i++) perm[i] = (int32_t)i;
    rng_shuffle_i32(rng, perm, (int)num_pages);
    for (i = 0; i < pages_total; i++) kv_indices[i] = perm[i];
    if (pages_total > 40) { /* absent keys: a -1 page and one past the cache, skipped by both sides */
        kv_indices[rng_int(rng, 0, (int)pages_total - 1)] = -1;
        kv_indices[rng_int(rng, 0, (int)pages_total - 1)] = (int32_t)num_pages + 3;
    }
    const size_t kv_e = aiter_mla_dtype_size(c->kv_dtype), q_e = aiter_mla_dtype_size(c->q_dtype),
                 o_e = aiter_mla_dtype_size(c->o_dtype);
    const int64_t kv_elems = num_pages * P * 576;
    void *kv = test_malloc((size_t)kv_elems * kv_e);
    fill_random(kv, kv_elems, c->kv_dtype, rng, -1.0f, 1.0f, kv_scale);
    const int64_t q_stride_token = c->strided ? (int64_t)H * 576 + 64 : 0, o_stride_token = c->strided ? (int64_t)H * 512 + 32 : 0;
    const int64_t q_rows = c->strided ? q_stride_token : (int64_t)H * 576, o_rows = c->strided ? o_stride_token : (int64_t)H * 512;
    void *q = test_malloc((size_t)(T * q_rows + 1) * q_e);
    fill_random(q, T * q_rows, c->q_dtype, rng, -2.0f, 2.0f, q_scale);
    void *o_ref = test_malloc((size_t)(T * o_rows + 1) * o_e), *o_gpu = test_malloc((size_t)(T * o_rows + 1) * o_e);
    float *lse_ref = (float *)test_malloc((size_t)(T * H + 1) * 4), *lse_gpu = (float *)test_malloc((size_t)(T * H + 1) * 4);

    /* plan */
    aiter_mla_decode_plan_desc pd;
    aiter_mla_decode_plan_info info;
    memset(&pd, 0, sizeof pd);
    pd.max_batch = B;
    pd.num_heads = H;
    pd.max_q_len = c->q_len;
    pd.num_cu = c->num_cu;
    pd.page_size = P;
    CHECK_STATUS(aiter_mla_decode_plan_get_info(&pd, &info), AITER_MLA_OK, "");
    int32_t *plan = (int32_t *)test_malloc((size_t)info.plan_ints * 4);
    CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, B, plan), AITER_MLA_OK, "");
    CHECK_STATUS(aiter_mla_decode_plan_check(&info, qo, kvp, last, B, plan), AITER_MLA_OK, "");

    /* device buffers */
    void *d_q = gpu_malloc((size_t)(T * q_rows + 1) * q_e), *d_kv = gpu_malloc((size_t)kv_elems * kv_e);
    void *d_o = gpu_malloc((size_t)(T * o_rows + 1) * o_e);
    float *d_lse = (float *)gpu_malloc((size_t)(T * H + 1) * 4);
    int32_t *d_qo = (int32_t *)gpu_malloc((B + 1) * 4), *d_kvp = (int32_t *)gpu_malloc((B + 1) * 4);
    int32_t *d_last = (int32_t *)gpu_malloc(B * 4), *d_idx = (int32_t *)gpu_malloc((size_t)(pages_total + 1) * 4);
    int32_t *d_plan = (int32_t *)gpu_malloc((size_t)info.plan_ints * 4);
    void *d_ws = gpu_malloc(info.workspace_bytes);
    gpu_upload(d_q, q, (size_t)(T * q_rows) * q_e);
    gpu_upload(d_kv, kv, (size_t)kv_elems * kv_e);
    gpu_upload(d_qo, qo, (B + 1) * 4);
    gpu_upload(d_kvp, kvp, (B + 1) * 4);
    gpu_upload(d_last, last, B * 4);
    gpu_upload(d_idx, kv_indices, (size_t)(pages_total + 1) * 4);
    gpu_upload(d_plan, plan, (size_t)info.plan_ints * 4);
    gpu_memset(d_o, 0xff, (size_t)(T * o_rows + 1) * o_e); /* poison: NaN in every float format */
    gpu_memset(d_lse, 0xff, (size_t)(T * H + 1) * 4);
    gpu_memset(d_ws, 0xff, info.workspace_bytes);

    aiter_mla_decode_args a;
    memset(&a, 0, sizeof a);
    a.q = d_q;
    a.q_stride_token = q_stride_token;
    a.kv_cache = d_kv;
    a.num_pages = num_pages;
    a.qo_indptr = d_qo;
    a.kv_indptr = d_kvp;
    a.kv_indices = d_idx;
    a.kv_last_page_lens = d_last;
    a.o = d_o;
    a.o_stride_token = o_stride_token;
    a.lse = c->with_lse ? d_lse : NULL;
    a.plan = d_plan;
    a.plan_info = &info;
    a.workspace = d_ws;
    a.workspace_bytes = info.workspace_bytes;
    a.batch = B;
    a.num_heads = H;
    a.page_size = P;
    a.q_dtype = c->q_dtype;
    a.kv_dtype = c->kv_dtype;
    a.o_dtype = c->o_dtype;
    a.sm_scale = 0.1f;
    a.q_scale = q_scale;
    a.kv_scale = kv_scale;
    CHECK_STATUS(aiter_mla_decode(&a, g_stream), AITER_MLA_OK, "");
    gpu_sync();
    gpu_download(o_gpu, d_o, (size_t)(T * o_rows) * o_e);
    gpu_download(lse_gpu, d_lse, (size_t)(T * H) * 4);

    /* reference on the host copies */
    aiter_mla_decode_args r = a;
    r.q = q;
    r.kv_cache = kv;
    r.qo_indptr = qo;
    r.kv_indptr = kvp;
    r.kv_indices = kv_indices;
    r.kv_last_page_lens = last;
    r.o = o_ref;
    r.lse = lse_ref;
    r.plan = NULL;
    r.workspace = NULL;
    ref_decode_parallel(&r, T);

    /* compare the written region (strided rows: only the [H, 512] part of each row) */
    {
        float *g = (float *)test_malloc((size_t)(T * H * 512 + 1) * 4), *f = (float *)test_malloc((size_t)(T * H * 512 + 1) * 4);
        int64_t t;
        int64_t unwritten = 0;
        for (t = 0; t < T; t++) {
            to_f32((const char *)o_gpu + (size_t)(t * o_rows) * o_e, g + t * H * 512, (int64_t)H * 512, c->o_dtype);
            to_f32((const char *)o_ref + (size_t)(t * o_rows) * o_e, f + t * H * 512, (int64_t)H * 512, c->o_dtype);
        }
        for (i = 0; i < T * H * 512; i++) unwritten += g[i] != g[i];
        CHECK(unwritten == 0, "%s: %lld output elements unwritten or NaN", what, (long long)unwritten);
        if (kv_fp8 || dtype_is_fp8(c->q_dtype)) CHECK_CLOSE(what, g, f, T * H * 512, TOL_FP8_REL, TOL_FP8_COS);
        else CHECK_CLOSE(what, g, f, T * H * 512, TOL_BF16_REL, TOL_BF16_COS);
        if (c->with_lse) CHECK_LSE(what, lse_gpu, lse_ref, T * H);
        free(g);
        free(f);
    }

    gpu_free(d_q); gpu_free(d_kv); gpu_free(d_o); gpu_free(d_lse); gpu_free(d_qo); gpu_free(d_kvp);
    gpu_free(d_last); gpu_free(d_idx); gpu_free(d_plan); gpu_free(d_ws);
    free(qo); free(kvp); free(last); free(perm); free(kv_indices); free(kv); free(q); free(o_ref); free(o_gpu);
    free(lse_ref); free(lse_gpu); free(plan);
}

/* Ragged context lengths: uniform up to max_ctx, with 0, 1 and `long_ctx` mixed in. */
static void make_ctx(int32_t *ctx, int batch, int q_len, int max_ctx, int long_ctx, test_rng *rng) {
    int b;
    for (b = 0; b < batch; b++) ctx[b] = rng_int(rng, 0, max_ctx);
    if (batch == 1) ctx[0] = long_ctx;
    if (batch >= 3) {
        ctx[0] = 0;
        ctx[1] = 1;
        ctx[batch - 1] = long_ctx;
    }
    if (batch >= 5) ctx[2] = q_len > 1 ? q_len - 1 : 2; /* fewer keys than query rows */
}

static void test_decode_sweep(test_rng *rng) {
    static const int heads[] = {1, 4, 8, 16, 32, 64, 128}, qlens[] = {1, 2, 4}, pages[] = {1, 16, 64}, batches[] = {1, 3, 64};
    static const aiter_mla_dtype caches[] = {AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FNUZ};
    int32_t ctx[64];
    int hi, qi, pi, ci, n = 0;
    for (hi = 0; hi < 7; hi++)
        for (qi = 0; qi < 3; qi++)
            for (pi = 0; pi < 3; pi++)
                for (ci = 0; ci < 3; ci++, n++) {
                    decode_case c;
                    if (g_quick && n % 9 != 0) continue;
                    memset(&c, 0, sizeof c);
                    c.heads = heads[hi];
                    c.q_len = qlens[qi];
                    c.page = pages[pi];
                    c.batch = batches[(hi + qi + pi + ci) % 3]; /* every batch meets every other axis */
                    c.num_cu = gpu_num_cu();
                    c.q_dtype = AITER_MLA_BF16;
                    c.kv_dtype = caches[ci];
                    c.o_dtype = AITER_MLA_BF16;
                    c.with_lse = 1;
                    make_ctx(ctx, c.batch, c.q_len, c.batch == 64 ? 400 : 3000, g_quick ? 1500 : 8192, rng);
                    c.ctx = ctx;
                    run_decode_case(&c, rng);
                }
}

/* Other dtypes, few CUs (long work lists per block), no lse, strided q/o, big page sizes. */
static void test_decode_variants(test_rng *rng) {
    int32_t ctx[64];
    decode_case c;
    int k;
    struct { int heads, q_len, page, batch, num_cu; aiter_mla_dtype q, kv, o; int lse, strided; } v[] = {
        {16, 1, 1, 5, 3, AITER_MLA_F16, AITER_MLA_F16, AITER_MLA_F16, 1, 0},
        {16, 2, 16, 7, 5, AITER_MLA_F16, AITER_MLA_FP8_E4M3FN, AITER_MLA_F32, 1, 1},
        {128, 1, 64, 3, 1, AITER_MLA_BF16, AITER_MLA_BF16, AITER_MLA_BF16, 0, 0},
        {12, 3, 256, 9, 7, AITER_MLA_BF16, AITER_MLA_BF16, AITER_MLA_F32, 1, 1},
        {48, 8, 128, 4, 11, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_BF16, 1, 0},
        {16, 1, 2, 6, 13, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16, 1, 0},
        {8, 4, 32, 5, 2, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_F16, 1, 1},
        {128, 2, 1, 3, 200, AITER_MLA_BF16, AITER_MLA_BF16, AITER_MLA_BF16, 1, 0},
    };
    for (k = 0; k < (int)(sizeof v / sizeof v[0]); k++) {
        if (g_quick && k % 2) continue;
        memset(&c, 0, sizeof c);
        c.heads = v[k].heads;
        c.q_len = v[k].q_len;
        c.page = v[k].page;
        c.batch = v[k].batch;
        c.num_cu = v[k].num_cu;
        c.q_dtype = v[k].q;
        c.kv_dtype = v[k].kv;
        c.o_dtype = v[k].o;
        c.with_lse = v[k].lse;
        c.strided = v[k].strided;
        make_ctx(ctx, c.batch, c.q_len, 1200, 2500, rng);
        c.ctx = ctx;
        run_decode_case(&c, rng);
    }
}

/* Graph capture: capture decode (+ reduce) once, then change q, the cache and even the
 * lengths and plan contents in place, replay, and compare again. */
static void test_decode_graph(test_rng *rng) {
    const int B = 6, H = 16, P = 16, maxctx = 3000, max_pages = (maxctx + P - 1) / P;
    const int64_t num_pages = (int64_t)B * max_pages, kv_elems = num_pages * P * 576;
    int32_t qo[7], kvp[7], last[6], *idx = (int32_t *)test_malloc((size_t)num_pages * 4);
    uint16_t *q = (uint16_t *)test_malloc((size_t)B * H * 576 * 2), *kv = (uint16_t *)test_malloc((size_t)kv_elems * 2);
    uint16_t *o = (uint16_t *)test_malloc((size_t)B * H * 512 * 2), *o_ref = (uint16_t *)test_malloc((size_t)B * H * 512 * 2);
    float *lse = (float *)test_malloc((size_t)B * H * 4), *lse_ref = (float *)test_malloc((size_t)B * H * 4);
    aiter_mla_decode_plan_desc pd;
    aiter_mla_decode_plan_info info;
    int rep, b;
    int64_t i;
    memset(&pd, 0, sizeof pd);
    pd.max_batch = B;
    pd.num_heads = H;
    pd.max_q_len = 1;
    pd.num_cu = gpu_num_cu();
    pd.page_size = P;
    aiter_mla_decode_plan_get_info(&pd, &info);
    int32_t *plan = (int32_t *)gpu_host_alloc_pinned((size_t)info.plan_ints * 4);
    void *d_q = gpu_malloc((size_t)B * H * 576 * 2), *d_kv = gpu_malloc((size_t)kv_elems * 2), *d_o = gpu_malloc((size_t)B * H * 512 * 2);
    float *d_lse = (float *)gpu_malloc((size_t)B * H * 4);
    int32_t *d_meta = (int32_t *)gpu_malloc((size_t)(7 + 7 + 6) * 4), *d_idx = (int32_t *)gpu_malloc((size_t)num_pages * 4);
    int32_t *d_plan = (int32_t *)gpu_malloc((size_t)info.plan_ints * 4);
    void *d_ws = gpu_malloc(info.workspace_bytes);
    for (i = 0; i < num_pages; i++) idx[i] = (int32_t)i;
    rng_shuffle_i32(rng, idx, (int)num_pages);
    gpu_upload(d_idx, idx, (size_t)num_pages * 4);
    aiter_mla_decode_args a;
    memset(&a, 0, sizeof a);
    a.q = d_q;
    a.kv_cache = d_kv;
    a.num_pages = num_pages;
    a.qo_indptr = d_meta;
    a.kv_indptr = d_meta + 7;
    a.kv_last_page_lens = d_meta + 14;
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
    a.sm_scale = 0.1f;
    gpu_graph *graph = NULL;
    for (rep = 0; rep < 3; rep++) {
        qo[0] = kvp[0] = 0;
        for (b = 0; b < B; b++) {
            int32_t n = rng_int(rng, rep == 0 ? 1 : 0, maxctx), pages = (n + P - 1) / P;
            qo[b + 1] = b + 1;
            kvp[b + 1] = kvp[b] + pages;
            last[b] = pages ? n - (pages - 1) * P : 0;
        }
        fill_random(q, (int64_t)B * H * 576, AITER_MLA_BF16, rng, -2.0f, 2.0f, 1.0f);
        fill_random(kv, kv_elems, AITER_MLA_BF16, rng, -1.0f, 1.0f, 1.0f);
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, B, plan), AITER_MLA_OK, "");
        gpu_upload(d_q, q, (size_t)B * H * 576 * 2);
        gpu_upload(d_kv, kv, (size_t)kv_elems * 2);
        gpu_upload(d_meta, qo, 28);
        gpu_upload(d_meta + 7, kvp, 28);
        gpu_upload(d_meta + 14, last, 24);
        gpu_upload(d_plan, plan, (size_t)info.plan_ints * 4);
        gpu_memset(d_o, 0xff, (size_t)B * H * 512 * 2);
        gpu_memset(d_lse, 0xff, (size_t)B * H * 4);
        gpu_sync();
        if (!graph) {
            gpu_graph_begin(g_stream);
            CHECK_STATUS(aiter_mla_decode(&a, g_stream), AITER_MLA_OK, "");
            graph = gpu_graph_end(g_stream);
        }
        gpu_graph_launch(graph, g_stream);
        gpu_sync();
        gpu_download(o, d_o, (size_t)B * H * 512 * 2);
        gpu_download(lse, d_lse, (size_t)B * H * 4);
        aiter_mla_decode_args r = a;
        r.q = q;
        r.kv_cache = kv;
        r.qo_indptr = qo;
        r.kv_indptr = kvp;
        r.kv_last_page_lens = last;
        r.kv_indices = idx;
        r.o = o_ref;
        r.lse = lse_ref;
        ref_decode_parallel(&r, B);
        {
            float *g = (float *)test_malloc((size_t)B * H * 512 * 4), *f = (float *)test_malloc((size_t)B * H * 512 * 4);
            to_f32(o, g, (int64_t)B * H * 512, AITER_MLA_BF16);
            to_f32(o_ref, f, (int64_t)B * H * 512, AITER_MLA_BF16);
            CHECK_CLOSE("graph replay", g, f, (int64_t)B * H * 512, TOL_BF16_REL, TOL_BF16_COS);
            CHECK_LSE("graph replay", lse, lse_ref, (int64_t)B * H);
            free(g);
            free(f);
        }
    }
    gpu_graph_destroy(graph);
    gpu_free(d_q); gpu_free(d_kv); gpu_free(d_o); gpu_free(d_lse); gpu_free(d_meta); gpu_free(d_idx);
    gpu_free(d_plan); gpu_free(d_ws);
    gpu_host_free_pinned(plan);
    free(idx); free(q); free(kv); free(o); free(o_ref); free(lse); free(lse_ref);
}

/* ---- small ops -------------------------------------------------------------------------- */
static void test_head_pad(test_rng *rng) {
    static const int hs[] = {1, 2, 4, 8, 16, 32};
    int k;
    for (k = 0; k < 6; k++) {
        const int H = hs[k], Hp = aiter_mla_padded_num_heads(H);
        const int64_t T = 37, nq = T * Hp * 576;
        uint16_t *src = (uint16_t *)test_malloc((size_t)nq * 2), *ref = (uint16_t *)test_malloc((size_t)nq * 2), *got = (uint16_t *)test_malloc((size_t)nq * 2);
        void *d_src = gpu_malloc((size_t)nq * 2), *d_dst = gpu_malloc((size_t)nq * 2);
        aiter_mla_head_pad_args a;
        memset(&a, 0, sizeof a);
        a.num_tokens = T;
        a.num_heads = H;
        fill_random(src, T * H * 576, AITER_MLA_BF16, rng, -1.0f, 1.0f, 1.0f);
        gpu_upload(d_src, src, (size_t)T * H * 576 * 2);
        gpu_memset(d_dst, 0xff, (size_t)nq * 2);
        a.src = d_src;
        a.dst = d_dst;
        CHECK_STATUS(aiter_mla_pad_q(&a, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(got, d_dst, (size_t)nq * 2);
        a.src = src;
        a.dst = ref;
        aiter_mla_pad_q_ref(&a);
        CHECK(memcmp(got, ref, (size_t)nq * 2) == 0, "pad_q H=%d differs from the reference", H);
        /* unpad the padded tensor back */
        fill_random(src, nq, AITER_MLA_BF16, rng, -1.0f, 1.0f, 1.0f);
        gpu_upload(d_src, src, (size_t)nq * 2);
        gpu_memset(d_dst, 0xff, (size_t)nq * 2);
        a.src = d_src;
        a.dst = d_dst;
        CHECK_STATUS(aiter_mla_unpad_o(&a, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(got, d_dst, (size_t)T * H * 576 * 2);
        a.src = src;
        a.dst = ref;
        aiter_mla_unpad_o_ref(&a);
        CHECK(memcmp(got, ref, (size_t)T * H * 576 * 2) == 0, "unpad_o H=%d differs from the reference", H);
        gpu_free(d_src); gpu_free(d_dst);
        free(src); free(ref); free(got);
    }
}

static void test_expand_page_indices(test_rng *rng) {
    static const int ks[] = {1, 2, 16, 64, 256};
    int k;
    for (k = 0; k < 5; k++) {
        const int K = ks[k], B = 33, stride = 40;
        int32_t bt[33 * 40], cu[34], sl[33], b;
        for (b = 0; b < B * stride; b++) bt[b] = rng_int(rng, -1, 5000);
        cu[0] = 0;
        for (b = 0; b < B; b++) {
            sl[b] = b == 0 ? 0 : rng_int(rng, 0, stride * K + K); /* some run past the table */
            cu[b + 1] = cu[b] + sl[b];
        }
        int32_t *ref = (int32_t *)test_malloc((size_t)cu[B] * 4 + 4), *got = (int32_t *)test_malloc((size_t)cu[B] * 4 + 4);
        int32_t *d_bt = (int32_t *)gpu_malloc(sizeof bt), *d_cu = (int32_t *)gpu_malloc(sizeof cu), *d_sl = (int32_t *)gpu_malloc(sizeof sl);
        int32_t *d_out = (int32_t *)gpu_malloc((size_t)cu[B] * 4 + 4);
        gpu_upload(d_bt, bt, sizeof bt);
        gpu_upload(d_cu, cu, sizeof cu);
        gpu_upload(d_sl, sl, sizeof sl);
        gpu_memset(d_out, 0x7f, (size_t)cu[B] * 4 + 4);
        aiter_mla_expand_page_indices_args a;
        memset(&a, 0, sizeof a);
        a.block_table = d_bt;
        a.block_table_stride = stride;
        a.cu_num_tokens = d_cu;
        a.seq_lens = d_sl;
        a.page_indices = d_out;
        a.page_indices_capacity = cu[B];
        a.batch = B;
        a.kernel_block_size = K;
        CHECK_STATUS(aiter_mla_expand_page_indices(&a, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(got, d_out, (size_t)cu[B] * 4 + 4);
        a.block_table = bt;
        a.cu_num_tokens = cu;
        a.seq_lens = sl;
        a.page_indices = ref;
        CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_OK, "");
        CHECK(memcmp(got, ref, (size_t)cu[B] * 4) == 0, "expand_page_indices K=%d differs from the reference", K);
        CHECK(got[cu[B]] == 0x7f7f7f7f, "expand_page_indices K=%d wrote past the capacity", K);
        gpu_free(d_bt); gpu_free(d_cu); gpu_free(d_sl); gpu_free(d_out);
        free(ref); free(got);
    }
}

static void test_kv_cache_write(test_rng *rng) {
    static const aiter_mla_dtype src_t[] = {AITER_MLA_BF16, AITER_MLA_F16, AITER_MLA_BF16, AITER_MLA_F16};
    static const aiter_mla_dtype cache_t[] = {AITER_MLA_BF16, AITER_MLA_F16, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FNUZ};
    int k;
    for (k = 0; k < 4; k++) {
        const int64_t T = 300, blocks = 40, bs = 16, cache_elems = blocks * bs * 576;
        const size_t ce = aiter_mla_dtype_size(cache_t[k]);
        int64_t slots[300], t;
        uint16_t *kvc = (uint16_t *)test_malloc((size_t)T * 600 * 2), *kpe = (uint16_t *)test_malloc((size_t)T * 70 * 2);
        unsigned char *ref = (unsigned char *)test_malloc((size_t)cache_elems * ce), *got = (unsigned char *)test_malloc((size_t)cache_elems * ce);
        int32_t *perm = (int32_t *)test_malloc((size_t)blocks * bs * 4);
        for (t = 0; t < blocks * bs; t++) perm[t] = (int32_t)t;
        rng_shuffle_i32(rng, perm, (int)(blocks * bs));
        for (t = 0; t < T; t++) slots[t] = t % 17 == 3 ? -1 : t % 23 == 5 ? blocks * bs + t : perm[t];
        fill_random(kvc, T * 600, src_t[k], rng, -30.0f, 30.0f, 1.0f);
        fill_random(kpe, T * 70, src_t[k], rng, -30.0f, 30.0f, 1.0f);
        memset(ref, 0x5a, (size_t)cache_elems * ce);
        void *d_kvc = gpu_malloc((size_t)T * 600 * 2), *d_kpe = gpu_malloc((size_t)T * 70 * 2), *d_cache = gpu_malloc((size_t)cache_elems * ce);
        int64_t *d_slots = (int64_t *)gpu_malloc(sizeof slots);
        gpu_upload(d_kvc, kvc, (size_t)T * 600 * 2);
        gpu_upload(d_kpe, kpe, (size_t)T * 70 * 2);
        gpu_upload(d_slots, slots, sizeof slots);
        gpu_upload(d_cache, ref, (size_t)cache_elems * ce);
        aiter_mla_kv_cache_write_args a;
        memset(&a, 0, sizeof a);
        a.kv_c = d_kvc;
        a.kv_c_stride = 600;
        a.k_pe = d_kpe;
        a.k_pe_stride = 70;
        a.slot_mapping = d_slots;
        a.kv_cache = d_cache;
        a.num_blocks = blocks;
        a.block_size = (int)bs;
        a.num_tokens = T;
        a.src_dtype = src_t[k];
        a.cache_dtype = cache_t[k];
        a.scale = dtype_is_fp8(cache_t[k]) ? 0.1f : 0.0f; /* 30 / 0.1 saturates */
        CHECK_STATUS(aiter_mla_kv_cache_write(&a, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(got, d_cache, (size_t)cache_elems * ce);
        a.kv_c = kvc;
        a.k_pe = kpe;
        a.slot_mapping = slots;
        a.kv_cache = ref;
        CHECK_STATUS(aiter_mla_kv_cache_write_ref(&a), AITER_MLA_OK, "");
        CHECK(memcmp(got, ref, (size_t)cache_elems * ce) == 0, "kv_cache_write %s -> %s differs from the reference",
              aiter_mla_dtype_name(src_t[k]), aiter_mla_dtype_name(cache_t[k]));
        gpu_free(d_kvc); gpu_free(d_kpe); gpu_free(d_cache); gpu_free(d_slots);
        free(kvc); free(kpe); free(ref); free(got); free(perm);
    }
}

/* ---- varlen prefill ------------------------------------------------------------------------ */
/* The CPU reference one head at a time, in parallel (it is double precision). */
static void ref_prefill_parallel(const aiter_mla_prefill_args *a) {
    const size_t e = aiter_mla_dtype_size(a->qkv_dtype), oe = aiter_mla_dtype_size(a->o_dtype);
    const int64_t tq = a->cu_seqlens_q[a->batch];
    int h, failures = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : failures)
    for (h = 0; h < a->num_heads; h++) {
        aiter_mla_prefill_args s = *a;
        s.num_heads = 1;
        s.q = (const char *)a->q + (size_t)(h * a->q_stride_head) * e;
        s.k = (const char *)a->k + (size_t)(h * a->k_stride_head) * e;
        s.v = (const char *)a->v + (size_t)(h * a->v_stride_head) * e;
        s.o = (char *)a->o + (size_t)(h * a->o_stride_head) * oe;
        s.lse = a->lse ? a->lse + h * tq : NULL;
        s.plan = NULL;
        if (aiter_mla_prefill_ref(&s) != AITER_MLA_OK) failures++;
    }
    CHECK(failures == 0, "reference prefill failed: %s", aiter_mla_last_error());
}

typedef struct prefill_case {
    int heads, dqk, dv, batch, causal, max_len;
    int num_cu;        /* > 0: run through a persistent plan on this many CUs */
    aiter_mla_dtype dtype, o_dtype;
    int with_lse;
    int odd_strides;   /* row strides that are not whole 16-byte units: the portable kernel */
} prefill_case;

static void run_prefill_case(const prefill_case *c, test_rng *rng) {
    const int B = c->batch, H = c->heads;
    const int fp8 = dtype_is_fp8(c->dtype);
    const float qs = fp8 ? 0.5f : 1.0f, ks = fp8 ? 0.25f : 1.0f, vs = fp8 ? 0.125f : 1.0f;
    int32_t *cq = (int32_t *)test_malloc((B + 1) * 4), *ck = (int32_t *)test_malloc((B + 1) * 4);
    int b, max_sq = 1;
    char what[200];
    cq[0] = ck[0] = 0;
    for (b = 0; b < B; b++) { /* ragged, sq != sk, with 0 and 1 mixed in */
        int sq = rng_int(rng, 0, c->max_len), sk = c->causal && rng_int(rng, 0, 3) ? sq + rng_int(rng, 0, c->max_len) : rng_int(rng, 0, c->max_len);
        if (b == 1) sq = 1;
        if (b == 2) sk = 0;
        if (b == 3) sq = sk + 5; /* causal: the first rows see no key */
        cq[b + 1] = cq[b] + sq;
        ck[b + 1] = ck[b] + sk;
        if (sq > max_sq) max_sq = sq;
    }
    const int64_t Tq = cq[B], Tk = ck[B];
    const int64_t pad = c->odd_strides ? 3 : 0;
    const int64_t qst = H * c->dqk + pad, kst = H * c->dqk + pad, vst = H * c->dv + pad, ost = H * c->dv + pad;
    const size_t e = aiter_mla_dtype_size(c->dtype), oe = aiter_mla_dtype_size(c->o_dtype);
    snprintf(what, sizeof what, "prefill H=%d %d/%d batch=%d Tq=%lld Tk=%lld %s %s o=%s%s%s cu=%d", H, c->dqk, c->dv, B,
             (long long)Tq, (long long)Tk, c->causal ? "causal" : "full", aiter_mla_dtype_name(c->dtype),
             aiter_mla_dtype_name(c->o_dtype), c->with_lse ? " lse" : "", c->odd_strides ? " odd-strides" : "", c->num_cu);
    void *q = test_malloc((size_t)(Tq * qst + 1) * e), *k = test_malloc((size_t)(Tk * kst + 1) * e),
         *v = test_malloc((size_t)(Tk * vst + 1) * e);
    fill_random(q, Tq * qst, c->dtype, rng, -2.0f, 2.0f, qs);
    fill_random(k, Tk * kst, c->dtype, rng, -2.0f, 2.0f, ks);
    fill_random(v, Tk * vst, c->dtype, rng, -1.0f, 1.0f, vs);
    void *o_ref = test_malloc((size_t)(Tq * ost + 1) * oe), *o_gpu = test_malloc((size_t)(Tq * ost + 1) * oe);
    float *lse_ref = (float *)test_malloc((size_t)(H * Tq + 1) * 4), *lse_gpu = (float *)test_malloc((size_t)(H * Tq + 1) * 4);

    void *d_q = gpu_malloc((size_t)(Tq * qst + 1) * e), *d_k = gpu_malloc((size_t)(Tk * kst + 1) * e),
         *d_v = gpu_malloc((size_t)(Tk * vst + 1) * e), *d_o = gpu_malloc((size_t)(Tq * ost + 1) * oe);
    float *d_lse = (float *)gpu_malloc((size_t)(H * Tq + 1) * 4);
    int32_t *d_cq = (int32_t *)gpu_malloc((B + 1) * 4), *d_ck = (int32_t *)gpu_malloc((B + 1) * 4), *d_plan = NULL;
    void *d_ws = NULL;
    gpu_upload(d_q, q, (size_t)(Tq * qst) * e);
    gpu_upload(d_k, k, (size_t)(Tk * kst) * e);
    gpu_upload(d_v, v, (size_t)(Tk * vst) * e);
    gpu_upload(d_cq, cq, (B + 1) * 4);
    gpu_upload(d_ck, ck, (B + 1) * 4);
    gpu_memset(d_o, 0xff, (size_t)(Tq * ost + 1) * oe);
    gpu_memset(d_lse, 0xff, (size_t)(H * Tq + 1) * 4);

    aiter_mla_prefill_args a;
    aiter_mla_prefill_plan_info info;
    int32_t *plan = NULL;
    memset(&a, 0, sizeof a);
    a.q = d_q;
    a.k = d_k;
    a.v = d_v;
    a.q_stride_token = qst;
    a.k_stride_token = kst;
    a.v_stride_token = vst;
    a.o_stride_token = ost;
    a.cu_seqlens_q = d_cq;
    a.cu_seqlens_k = d_ck;
    a.o = d_o;
    a.lse = c->with_lse ? d_lse : NULL;
    a.batch = B;
    a.max_seqlen_q = max_sq;
    a.num_heads = H;
    a.dqk = c->dqk;
    a.dv = c->dv;
    a.causal = c->causal;
    a.sm_scale = 0.08f;
    a.q_scale = qs;
    a.k_scale = ks;
    a.v_scale = vs;
    a.qkv_dtype = c->dtype;
    a.o_dtype = c->o_dtype;
    if (c->num_cu > 0) {
        aiter_mla_prefill_plan_desc pd;
        memset(&pd, 0, sizeof pd);
        pd.max_batch = B;
        pd.max_q_tokens = Tq > 0 ? Tq : 1;
        pd.num_heads = H;
        pd.num_cu = c->num_cu;
        pd.dv = c->dv;
        CHECK_STATUS(aiter_mla_prefill_plan_get_info(&pd, &info), AITER_MLA_OK, "");
        plan = (int32_t *)test_malloc((size_t)info.plan_ints * 4);
        CHECK_STATUS(aiter_mla_prefill_plan_build(&info, cq, ck, B, c->causal, plan), AITER_MLA_OK, "");
        d_plan = (int32_t *)gpu_malloc((size_t)info.plan_ints * 4);
        d_ws = gpu_malloc(info.workspace_bytes);
        gpu_upload(d_plan, plan, (size_t)info.plan_ints * 4);
        gpu_memset(d_ws, 0xff, info.workspace_bytes);
        a.plan = d_plan;
        a.plan_info = &info;
        a.workspace = d_ws;
        a.workspace_bytes = info.workspace_bytes;
    }
    CHECK_STATUS(aiter_mla_prefill(&a, g_stream), AITER_MLA_OK, "");
    gpu_sync();
    gpu_download(o_gpu, d_o, (size_t)(Tq * ost) * oe);
    gpu_download(lse_gpu, d_lse, (size_t)(H * Tq) * 4);

    aiter_mla_prefill_args r = a;
    r.q = q;
    r.k = k;
    r.v = v;
    r.cu_seqlens_q = cq;
    r.cu_seqlens_k = ck;
    r.o = o_ref;
    r.lse = lse_ref;
    r.q_stride_head = c->dqk;
    r.k_stride_head = c->dqk;
    r.v_stride_head = c->dv;
    r.o_stride_head = c->dv;
    ref_prefill_parallel(&r);
    {
        const int64_t n = Tq * H * c->dv;
        float *g = (float *)test_malloc((size_t)(n + 1) * 4), *f = (float *)test_malloc((size_t)(n + 1) * 4);
        int64_t t, i, unwritten = 0;
        for (t = 0; t < Tq; t++) {
            to_f32((const char *)o_gpu + (size_t)(t * ost) * oe, g + t * H * c->dv, (int64_t)H * c->dv, c->o_dtype);
            to_f32((const char *)o_ref + (size_t)(t * ost) * oe, f + t * H * c->dv, (int64_t)H * c->dv, c->o_dtype);
        }
        for (i = 0; i < n; i++) unwritten += g[i] != g[i];
        CHECK(unwritten == 0, "%s: %lld output elements unwritten or NaN", what, (long long)unwritten);
        if (fp8) CHECK_CLOSE(what, g, f, n, TOL_FP8_REL, TOL_FP8_COS);
        else CHECK_CLOSE(what, g, f, n, TOL_BF16_REL, TOL_BF16_COS);
        if (c->with_lse) CHECK_LSE(what, lse_gpu, lse_ref, H * Tq);
        free(g);
        free(f);
    }
    gpu_free(d_q); gpu_free(d_k); gpu_free(d_v); gpu_free(d_o); gpu_free(d_lse); gpu_free(d_cq); gpu_free(d_ck);
    if (d_plan) gpu_free(d_plan);
    if (d_ws) gpu_free(d_ws);
    free(cq); free(ck); free(q); free(k); free(v); free(o_ref); free(o_gpu); free(lse_ref); free(lse_gpu); free(plan);
}

static void test_prefill(test_rng *rng) {
    static const int dims[][2] = {{64, 64}, {128, 64}, {128, 128}, {192, 64}, {192, 128}, {192, 192},
                                  {256, 64}, {256, 128}, {256, 192}, {256, 256}};
    static const int heads[] = {1, 16, 128};
    static const aiter_mla_dtype types[] = {AITER_MLA_BF16, AITER_MLA_F16, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FNUZ};
    int di, hi, ti, causal;
    const int before = testing_failed;
    prefill_case c;
    /* every head-dim pair, causal and not, bf16 (f16 and fp8 on the DeepSeek shape below) */
    for (di = 0; di < 10; di++)
        for (causal = 0; causal < 2; causal++) {
            memset(&c, 0, sizeof c);
            c.heads = 3;
            c.dqk = dims[di][0];
            c.dv = dims[di][1];
            c.batch = 5;
            c.causal = causal;
            c.max_len = g_quick ? 70 : 300;
            c.dtype = AITER_MLA_BF16;
            c.o_dtype = AITER_MLA_BF16;
            c.with_lse = 1;
            run_prefill_case(&c, rng);
        }
    /* heads x dtypes on 192/128, with and without a persistent plan, and the portable kernel */
    for (hi = 0; hi < 3; hi++)
        for (ti = 0; ti < 4; ti++)
            for (causal = 0; causal < 2; causal++) {
                int mode;
                for (mode = 0; mode < 3; mode++) {
                    if (g_quick && (hi == 2 || mode == 2)) continue;
                    memset(&c, 0, sizeof c);
                    c.heads = heads[hi];
                    c.dqk = 192;
                    c.dv = 128;
                    c.batch = heads[hi] == 128 ? 4 : 6;
                    c.causal = causal;
                    c.max_len = heads[hi] == 128 ? 160 : (g_quick ? 100 : 600);
                    c.dtype = types[ti];
                    c.o_dtype = ti == 1 ? AITER_MLA_F16 : (ti == 0 && causal ? AITER_MLA_F32 : AITER_MLA_BF16);
                    c.with_lse = !(ti == 1 && causal);
                    c.num_cu = mode == 1 ? 1 + rng_int(rng, 0, 131) : 0;
                    c.odd_strides = mode == 2;
                    run_prefill_case(&c, rng);
                }
            }
    printf("prefill: %s\n", testing_failed == before ? "ok" : "FAILED");
}

/* Arguments other than --quick name the groups to run (e.g. `test_gpu prefill decode`). */
static int g_argc;
static char **g_argv;
static int wanted(const char *group) {
    int i, any = 0;
    for (i = 1; i < g_argc; i++) {
        if (!strcmp(g_argv[i], "--quick")) continue;
        any = 1;
        if (!strcmp(g_argv[i], group)) return 1;
    }
    return !any;
}

int main(int argc, char **argv) {
    test_rng rng = rng_seed(0x5eed0001u);
    int i;
    g_argc = argc;
    g_argv = argv;
    for (i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--quick")) g_quick = 1;
    if (!gpu_device_count()) {
        fprintf(stderr, "test_gpu: no GPU device\n");
        return 1;
    }
    printf("test_gpu on %s (%d CUs)%s\n", gpu_name(), gpu_num_cu(), g_quick ? ", quick sweep" : "");
    g_stream = gpu_stream_create();
    if (wanted("small")) {
        test_head_pad(&rng);
        test_expand_page_indices(&rng);
        test_kv_cache_write(&rng);
    }
    if (wanted("decode")) {
        test_decode_variants(&rng);
        test_decode_graph(&rng);
        test_decode_sweep(&rng);
    }
    if (wanted("prefill")) test_prefill(&rng);
    gpu_stream_destroy(g_stream);
    return testing_summary();
}
