/* test_gpu.c - every GPU kernel against the CPU reference, on fresh random inputs with
 * poisoned outputs, over a sweep of shapes (SPEC 8 tolerances). Needs a GPU build
 * (kernels.hip + examples/gpu.hip). `--quick` runs a reduced sweep (for the sanitizers);
 * test names as arguments (test_merge_gpu, ...) run only those. */
#define AITER_MLA_IMPLEMENTATION
#include "../aiter_mla.h"
#include "testing.h"
#include "../examples/gpu.h"

static int g_quick = 0;
static void *g_stream = NULL;

/* ---- reference in parallel: one CPU reference call per (request, head) ------------------ */
/* The CPU references run slice by slice on every core: fn computes slice `job` of the
 * operation in args (a token, a head, a request and head); extra is the caller's scratch. */
typedef aiter_mla_status (*ref_slice_fn)(const void *args, int64_t job, void *extra);
static void ref_parallel(const char *what, int64_t jobs, ref_slice_fn fn, const void *args, void *extra) {
    char msg[320] = "";
    int64_t job;
    int failures = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : failures)
    for (job = 0; job < jobs; job++)
        if (fn(args, job, extra) != AITER_MLA_OK) {
            failures++;
#pragma omp critical
            if (!msg[0]) snprintf(msg, sizeof msg, "%s", aiter_mla_last_error()); /* the failing thread's message */
        }
    CHECK(failures == 0, "reference %s failed: %s", what, msg);
}

/* decode: one (request, head) per slice; its lse lands head-major in the scratch */
typedef struct decode_lse_scratch {
    float *lse_h;       /* [H, num_tokens] */
    int64_t num_tokens;
} decode_lse_scratch;
static aiter_mla_status ref_decode_slice(const void *args, int64_t job, void *extra) {
    const aiter_mla_decode_args *a = (const aiter_mla_decode_args *)args;
    const decode_lse_scratch *x = (const decode_lse_scratch *)extra;
    const int H = a->num_heads, b = (int)(job / H), h = (int)(job % H);
    const size_t qe = aiter_mla_dtype_size(a->q_dtype ? a->q_dtype : AITER_MLA_BF16);
    const size_t oe = aiter_mla_dtype_size(a->o_dtype ? a->o_dtype : AITER_MLA_BF16);
    aiter_mla_decode_args s = *a;
    s.batch = 1;
    s.num_heads = 1;
    s.qo_indptr = a->qo_indptr + b;
    s.kv_indptr = a->kv_indptr + b;
    s.kv_last_page_lens = a->kv_last_page_lens + b;
    s.q = (const char *)a->q + (size_t)h * (a->q_stride_head ? (size_t)a->q_stride_head : 576) * qe;
    s.q_stride_token = a->q_stride_token ? a->q_stride_token : (int64_t)H * 576;
    s.q_stride_head = 576;
    s.o = (char *)a->o + (size_t)h * (a->o_stride_head ? (size_t)a->o_stride_head : 512) * oe;
    s.o_stride_token = a->o_stride_token ? a->o_stride_token : (int64_t)H * 512;
    s.o_stride_head = 512;
    s.lse = a->lse ? x->lse_h + (int64_t)h * x->num_tokens : NULL;
    return aiter_mla_decode_ref(&s);
}
static void ref_decode_parallel(const aiter_mla_decode_args *a, int64_t num_tokens) {
    const int H = a->num_heads;
    float *lse_h = (float *)test_malloc((size_t)H * (size_t)(num_tokens + 1) * sizeof(float));
    decode_lse_scratch x = {lse_h, num_tokens};
    poison_f32(lse_h, (int64_t)H * num_tokens);
    ref_parallel("decode", (int64_t)a->batch * H, ref_decode_slice, a, &x);
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

/* ---- caches past 4 GiB ---------------------------------------------------------------------- */
/* A kernel that forms a row's address in 32 bits goes wrong only in a cache larger than 4 GiB,
 * which the other cases never allocate. A far case puts the compact cache it draws behind
 * kFarMiB of device memory filled with 0xff (NaN in every float format, an e4m3fn NaN code) and
 * shifts its page, slot or block ids past that region, so that every row the kernels read lies
 * more than 2^32 bytes (2^31 16-bit elements) from the cache's start; the reference reads the
 * compact host cache with the ids as drawn. A read that wraps lands in the NaN region. */
enum { kFarMiB = 4352 }; /* 4 GiB + 256 MiB */
/* Units (pages, slots, blocks) of unit_bytes that the far region holds when `far` (else 0). */
static int64_t far_units(int far, int64_t unit_bytes) { return far ? (((int64_t)kFarMiB << 20) + unit_bytes - 1) / unit_bytes : 0; }
/* The device cache: far_bytes of 0xff, then the host cache's `bytes`. Freed by gpu_free. */
static void *far_cache_upload(const void *host, size_t bytes, int64_t far_bytes) {
    unsigned char *d = (unsigned char *)gpu_malloc((size_t)far_bytes + bytes);
    if (far_bytes) gpu_memset(d, 0xff, (size_t)far_bytes);
    if (bytes) gpu_upload(d + far_bytes, host, bytes);
    return d;
}
/* Device copy of n ids (room for n + 1), each id >= 0 moved `far` units on (-1 holes stay, ids
 * past the cache stay past it). */
static int32_t *far_ids_upload(const int32_t *ids, int64_t n, int64_t far) {
    int32_t *shifted = (int32_t *)test_malloc((size_t)(n + 1) * 4), *d = (int32_t *)gpu_malloc((size_t)(n + 1) * 4);
    int64_t i, overflows = 0;
    for (i = 0; i < n; i++) {
        overflows += ids[i] >= 0 && ids[i] + far > INT32_MAX;
        shifted[i] = ids[i] < 0 || ids[i] + far > INT32_MAX ? ids[i] : (int32_t)(ids[i] + far);
    }
    if (far) CHECK(overflows == 0, "far ids: %lld ids + %lld pass 2^31 - 1", (long long)overflows, (long long)far);
    if (n) gpu_upload(d, shifted, (size_t)n * 4);
    free(shifted);
    return d;
}

/* A token stride (elements of e bytes) at which row rows - 1 lies past kFarMiB when `far` (else
 * st): a multiple of 64 elements plus st's remainder, so that the rows keep st's alignment. */
static int64_t far_stride(int far, int64_t rows, int64_t st, size_t e) {
    int64_t s;
    if (!far || rows < 2) return st;
    s = (((int64_t)kFarMiB << 20) / ((rows - 1) * (int64_t)e) + 64) / 64 * 64 + st % 64;
    return s > st ? s : st;
}
/* rows of row_bytes between a host array (row stride hst elements of e bytes) and a device one
 * (dst elements): one copy where the strides agree. */
static void strided_upload(void *d, int64_t dst, const void *h, int64_t hst, int64_t rows, size_t row_bytes, size_t e) {
    int64_t t;
    if (dst == hst) gpu_upload(d, h, (size_t)(rows * hst) * e);
    else
        for (t = 0; t < rows; t++) gpu_upload((char *)d + (size_t)(t * dst) * e, (const char *)h + (size_t)(t * hst) * e, row_bytes);
}
static void strided_download(void *h, int64_t hst, const void *d, int64_t dst, int64_t rows, size_t row_bytes, size_t e) {
    int64_t t;
    if (dst == hst) gpu_download(h, d, (size_t)(rows * hst) * e);
    else
        for (t = 0; t < rows; t++) gpu_download((char *)h + (size_t)(t * hst) * e, (const char *)d + (size_t)(t * dst) * e, row_bytes);
}

/* ---- one decode case ---------------------------------------------------------------------- */
typedef struct decode_case {
    int heads, q_len, page, batch, num_cu;
    aiter_mla_dtype q_dtype, kv_dtype, o_dtype;
    const int32_t *ctx; /* [batch] keys per request (the new tokens included) */
    int with_lse, strided;
    int q_exp; /* bf16 q rows times 2^(q_exp + [-3, 3]) each, sm_scale times 2^-q_exp (0: plain) */
    int key_ramp; /* key k of a request times 1 + k / key_ramp (0: plain): the row maxima rise along the pass */
    int nan_key;  /* 1: one value of the last request's first key is NaN: its rows' o and lse are NaN */
    int neg_inf_key; /* 1 (16-bit q and cache, batch >= 2): rope dim kNegInfDim is -inf in request 0's
                      * first key and in every key of request 1, and positive in q's rows of both:
                      * those keys score -inf in every head and weigh 0; request 1's rows see no key */
    int far;         /* 1: the GPU's cache past 4 GiB (see far_cache_upload) */
    int bad_plans;   /* 1: launches on damaged plans first (run_bad_plans) */
} decode_case;
enum { kNegInfDim = 520 }; /* a rope dim: not part of V, whose infinities are outside the contract */

/* Rows (of `dv` values, lse optional) whose reference lse or o is NaN must be all NaN in the
 * result too; both are then zeroed so that the caller's checks compare the other rows (which
 * must be free of NaN). Returns the NaN rows (a test plants at least one). */
static int64_t take_nan_rows(const char *what, float *got, float *ref, float *lse_got, float *lse_ref, int64_t rows, int dv) {
    int64_t r, n = 0;
    int d;
    for (r = 0; r < rows; r++) {
        int ref_nan = lse_ref && lse_ref[r] != lse_ref[r], all = 1;
        for (d = 0; d < dv; d++) ref_nan |= ref[r * dv + d] != ref[r * dv + d];
        if (!ref_nan) continue;
        for (d = 0; d < dv; d++) all &= ref[r * dv + d] != ref[r * dv + d] && got[r * dv + d] != got[r * dv + d];
        if (lse_ref) all &= lse_ref[r] != lse_ref[r] && lse_got[r] != lse_got[r];
        CHECK(all, "%s: row %lld: the reference's NaN row is not all NaN in the reference and the result (lse %g / %g)", what,
              (long long)r, lse_got ? (double)lse_got[r] : 0.0, lse_ref ? (double)lse_ref[r] : 0.0);
        for (d = 0; d < dv; d++) got[r * dv + d] = ref[r * dv + d] = 0.0f;
        if (lse_ref) lse_got[r] = lse_ref[r] = 0.0f;
        n++;
    }
    return n;
}

/* A decode case with lse over `batch` requests of ctx[] keys (the other options off). */
static decode_case decode_case_of(int heads, int q_len, int page, int batch, int num_cu, aiter_mla_dtype q, aiter_mla_dtype kv,
                                  aiter_mla_dtype o, const int32_t *ctx) {
    decode_case c;
    memset(&c, 0, sizeof c);
    c.heads = heads;
    c.q_len = q_len;
    c.page = page;
    c.batch = batch;
    c.num_cu = num_cu;
    c.q_dtype = q;
    c.kv_dtype = kv;
    c.o_dtype = o;
    c.with_lse = 1;
    c.ctx = ctx;
    return c;
}

/* Guard bytes after a device buffer: a write past its end shows there. */
enum { kGuardBytes = 4096, kGuardByte = 0xa5 };
static void *guarded_malloc(size_t bytes) {
    char *d = (char *)gpu_malloc(bytes + kGuardBytes);
    gpu_memset(d + bytes, kGuardByte, kGuardBytes);
    return d;
}
static void check_guard(const char *what, const char *name, const void *d, size_t bytes) {
    unsigned char *g = (unsigned char *)test_malloc(kGuardBytes);
    int64_t changed = 0, i;
    gpu_download(g, (const char *)d + bytes, kGuardBytes);
    for (i = 0; i < kGuardBytes; i++) changed += g[i] != kGuardByte;
    CHECK(changed == 0, "%s: %lld bytes written past %s", what, (long long)changed, name);
    free(g);
}

/* A value for a plan field that does not fit: out of every range, or one off its own. */
static int32_t bad_value(test_rng *rng, int32_t own, int32_t near) {
    const int32_t v[8] = {-1, -2, INT32_MIN, INT32_MAX, near, (int32_t)((uint32_t)near + 1u), (int32_t)((uint32_t)own + 1u),
                          (int32_t)((uint32_t)own - 1u)};
    return v[rng_int(rng, 0, 7)];
}

/* Where a plan buffer (decode or prefill: one layout, SPEC 1a) keeps its lists, and its bounds. */
typedef struct plan_layout {
    int64_t work_indptr, work_info, reduce_indptr, final_map, partial_map; /* offsets */
    int32_t lists, max_work, max_tiles, max_partials, max_partial_rows;
    int32_t near[7]; /* per work-item field, a bound of its range: requests, partial rows, rows (2), pages or keys (2), - */
} plan_layout;
enum { kPlanDamages = 4 };
static const char *const kPlanDamageNames[kPlanDamages] = {"items' fields", "lists past the items", "reduce lists", "all of it"};
/* Damage kind 0: a field of every third item (other requests, rows, pages, partial rows);
 * 1: list bounds past the items; 2: the reduce's tile count, lists and partial rows; 3: all. */
static void damage_plan(int32_t *plan, const plan_layout *l, int kind, test_rng *rng) {
    int32_t *wi = plan + l->work_info, *wp = plan + l->work_indptr, i;
    if (kind == 0 || kind == 3)
        for (i = rng_int(rng, 0, 2); i < plan[AITER_MLA__PH_NUM_WORK]; i += 3) {
            const int f = rng_int(rng, 0, 6);
            wi[(int64_t)i * AITER_MLA_WORK_INTS + f] = bad_value(rng, wi[(int64_t)i * AITER_MLA_WORK_INTS + f], l->near[f]);
        }
    if (kind == 1 || kind == 3)
        for (i = 0; i <= l->lists; i++)
            if (rng_int(rng, 0, 1)) wp[i] = bad_value(rng, wp[i], l->max_work);
    if (kind == 2 || kind == 3) {
        plan[AITER_MLA__PH_NUM_REDUCE_TILES] = rng_int(rng, 0, 1) ? INT32_MAX : l->max_tiles + 3;
        for (i = 0; i <= l->max_tiles; i++)
            if (rng_int(rng, 0, 2) == 0) plan[l->reduce_indptr + i] = bad_value(rng, plan[l->reduce_indptr + i], l->max_partials);
        for (i = 0; i < 2 * l->max_tiles; i++)
            if (rng_int(rng, 0, 2) == 0) plan[l->final_map + i] = bad_value(rng, plan[l->final_map + i], l->near[2]);
        for (i = 0; i < l->max_partials; i++)
            if (rng_int(rng, 0, 1)) plan[l->partial_map + i] = bad_value(rng, plan[l->partial_map + i], l->max_partial_rows);
    }
}

/* Nothing was written past an attention's o, lse, workspace or plan (each guarded_malloc'd;
 * lse, workspace and plan may be NULL: not checked). */
static void check_guards(const char *what, const void *o, size_t o_bytes, const void *lse, size_t lse_bytes, const void *ws,
                         size_t ws_bytes, const void *plan, size_t plan_bytes) {
    check_guard(what, "o", o, o_bytes);
    if (lse) check_guard(what, "lse", lse, lse_bytes);
    if (ws) check_guard(what, "the workspace", ws, ws_bytes);
    if (plan) check_guard(what, "the plan", plan, plan_bytes);
}

/* A planned launch the bad-plan rounds run: a decode or a prefill (the other NULL), with its
 * plan's layout and size and the bytes of its guarded o and lse. */
typedef struct planned_launch {
    aiter_mla_decode_args *decode;
    aiter_mla_prefill_args *prefill;
    plan_layout layout;
    int64_t plan_ints;
    size_t o_bytes, lse_bytes, workspace_bytes;
} planned_launch;

/* One round: plan `bad` uploaded and launched; the call succeeds, and nothing was written past
 * o, lse (optional), the workspace or the plan. */
static void bad_plan_round(const planned_launch *l, const char *round_what, const int32_t *bad) {
    const size_t plan_bytes = (size_t)l->plan_ints * 4;
    void *plan = l->decode ? (void *)l->decode->plan : (void *)l->prefill->plan;
    const void *o = l->decode ? l->decode->o : l->prefill->o, *lse = l->decode ? l->decode->lse : l->prefill->lse;
    const void *ws = l->decode ? l->decode->workspace : l->prefill->workspace;
    aiter_mla_status st;
    gpu_upload(plan, bad, plan_bytes);
    st = l->decode ? aiter_mla_decode(l->decode, g_stream) : aiter_mla_prefill(l->prefill, g_stream);
    CHECK(st == AITER_MLA_OK, "%s: %s (%s)", round_what, testing_status_name(st), aiter_mla_last_error());
    gpu_sync();
    check_guards(round_what, o, l->o_bytes, lse, l->lse_bytes, ws, l->workspace_bytes, plan, plan_bytes);
}

/* A device plan is data (ERRORS in aiter_mla.h): one that does not fit the launch's arguments
 * gives wrong rows but never an access outside q, o, lse, the cache, the indices or the
 * workspace. These rounds launch on the plan as built (`plan`) damaged each way damage_plan
 * knows (in `bad`, plan_ints long); the callers add plans built for other requests (stale).
 * What the rows hold is not checked: there is no right answer. compute-sanitizer's memcheck
 * covers the reads (tests/sanitize.sh). The caller uploads the plan as built again. */
static void damaged_plan_rounds(const char *what, const planned_launch *l, const int32_t *plan, int32_t *bad, test_rng *rng) {
    char round_what[300];
    int kind;
    for (kind = 0; kind < kPlanDamages; kind++) {
        memcpy(bad, plan, (size_t)l->plan_ints * 4);
        damage_plan(bad, &l->layout, kind, rng);
        snprintf(round_what, sizeof round_what, "%s, damaged plan (%s)", what, kPlanDamageNames[kind]);
        bad_plan_round(l, round_what, bad);
    }
}

/* The bad-plan rounds of a decode (`plan`, from qo/kvp/last): the damages, then plans built for
 * requests of twice or half the pages. */
static void run_bad_plans(const char *what, aiter_mla_decode_args *a, const int32_t *plan, const int32_t *qo, const int32_t *kvp,
                          const int32_t *last, size_t o_bytes, size_t lse_bytes, test_rng *rng) {
    const aiter_mla_decode_plan_info *info = a->plan_info;
    const int B = a->batch;
    const planned_launch l = {a, NULL,
                              {info->off_work_indptr, info->off_work_info, info->off_reduce_indptr, info->off_reduce_final_map,
                               info->off_reduce_partial_map, info->num_lists, info->max_work, info->max_reduce_tiles,
                               info->max_partials, info->max_partial_rows,
                               {B, info->max_partial_rows, qo[B], qo[B], kvp[B], kvp[B], 1 << 20}},
                              info->plan_ints, o_bytes, lse_bytes, info->workspace_bytes};
    int32_t *bad = (int32_t *)test_malloc((size_t)info->plan_ints * 4), *kvp2 = (int32_t *)test_malloc((size_t)(B + 1) * 4);
    int32_t *last2 = (int32_t *)test_malloc((size_t)B * 4);
    char round_what[300];
    int longer, b;
    damaged_plan_rounds(what, &l, plan, bad, rng);
    for (longer = 1; longer >= 0; longer--) {
        kvp2[0] = 0;
        for (b = 0; b < B; b++) {
            const int32_t pages = kvp[b + 1] - kvp[b], p2 = longer ? 2 * pages + 1 : pages / 2;
            kvp2[b + 1] = kvp2[b] + p2;
            last2[b] = p2 ? (longer ? a->page_size : last[b]) : 0;
        }
        snprintf(round_what, sizeof round_what, "%s, a plan of %s requests", what, longer ? "longer" : "shorter");
        CHECK_STATUS(aiter_mla_decode_plan_build(info, qo, kvp2, last2, B, bad), AITER_MLA_OK, "");
        bad_plan_round(&l, round_what, bad);
    }
    free(bad);
    free(kvp2);
    free(last2);
}

static void run_decode_case(const decode_case *c, test_rng *rng) {
    const int B = c->batch, H = c->heads, P = c->page;
    char what[200];
    int b;
    int32_t *qo = (int32_t *)test_malloc((B + 1) * 4), *kvp = (int32_t *)test_malloc((B + 1) * 4);
    int32_t *last = (int32_t *)test_malloc(B * 4);
    int64_t pages_total = 0, T;
    const int kv_fp8 = dtype_is_fp8(c->kv_dtype);
    const float kv_scale = kv_fp8 ? 0.05f : 1.0f, q_scale = dtype_is_fp8(c->q_dtype) ? 0.25f : 1.0f;
    snprintf(what, sizeof what, "decode H=%d q_len=%d page=%d batch=%d cu=%d q=%s kv=%s o=%s%s%s q_exp=%d key_ramp=%d%s", H, c->q_len,
             P, B, c->num_cu, aiter_mla_dtype_name(c->q_dtype), aiter_mla_dtype_name(c->kv_dtype), aiter_mla_dtype_name(c->o_dtype),
             c->with_lse ? " lse" : "", c->strided ? " strided" : "", c->q_exp, c->key_ramp,
             c->nan_key ? " nan_key" : c->neg_inf_key ? " neg_inf_key" : c->far ? " far" : "");
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
    if (c->key_ramp) /* each request's keys grow with their position (the cache rows of its pages) */
        for (b = 0; b < B; b++) {
            int32_t k;
            for (k = 0; k < c->ctx[b]; k++) {
                const int32_t page = kv_indices[kvp[b] + k / P];
                const float f = 1.0f + (float)k / (float)c->key_ramp;
                int64_t d, at;
                if (page < 0 || page >= num_pages) continue;
                at = ((int64_t)page * P + k % P) * 576;
                for (d = 0; d < 576; d++)
                    aiter_mla_store_f32(kv, at + d, c->kv_dtype, aiter_mla_load_f32(kv, at + d, c->kv_dtype) * f);
            }
        }
    if (c->nan_key) { /* value 100 of the last request's first key (a present page: the harness keeps that one) */
        const int32_t page = kv_indices[kvp[B - 1]] = perm[kvp[B - 1]];
        CHECK(c->ctx[B - 1] >= c->q_len, "%s: no key to make NaN", what);
        aiter_mla_store_f32(kv, (int64_t)page * P * 576 + 100, c->kv_dtype, NAN);
    }
    if (c->neg_inf_key) {
        CHECK(B >= 2 && kv_e == 2 && q_e == 2 && c->ctx[0] >= c->q_len, "%s: no -inf key to plant", what);
        kv_indices[kvp[0]] = perm[kvp[0]]; /* request 0's first page present */
        for (b = 0; b < 2 && b < B; b++) {
            int32_t k;
            for (k = 0; k < (b ? c->ctx[b] : 1); k++) {
                const int32_t page = kv_indices[kvp[b] + k / P];
                if (page >= 0 && page < num_pages) aiter_mla_store_f32(kv, ((int64_t)page * P + k % P) * 576 + kNegInfDim, c->kv_dtype, -INFINITY);
            }
        }
    }
    const int64_t q_stride_token = c->strided ? (int64_t)H * 576 + 64 : 0, o_stride_token = c->strided ? (int64_t)H * 512 + 32 : 0;
    const int64_t q_rows = c->strided ? q_stride_token : (int64_t)H * 576, o_rows = c->strided ? o_stride_token : (int64_t)H * 512;
    void *q = test_malloc((size_t)(T * q_rows + 1) * q_e);
    fill_random(q, T * q_rows, c->q_dtype, rng, -2.0f, 2.0f, q_scale);
    if (c->q_exp) { /* far from 1, and each row on its own scale (exact: powers of two) */
        int64_t r, d;
        for (r = 0; r < T * H; r++) {
            const float f = ldexpf(1.0f, c->q_exp + rng_int(rng, -3, 3));
            const int64_t at = r / H * q_rows + r % H * 576;
            for (d = 0; d < 576; d++) aiter_mla_store_f32(q, at + d, c->q_dtype, aiter_mla_load_f32(q, at + d, c->q_dtype) * f);
        }
    }
    if (c->neg_inf_key) { /* q positive at kNegInfDim in the rows of requests 0 and 1 */
        int64_t r;
        for (r = (int64_t)qo[0] * H; r < (int64_t)qo[B < 2 ? B : 2] * H; r++) {
            const int64_t at = r / H * q_rows + r % H * 576 + kNegInfDim;
            aiter_mla_store_f32(q, at, c->q_dtype, fabsf(aiter_mla_load_f32(q, at, c->q_dtype)) + 0.25f);
        }
    }
    void *o_ref = test_malloc((size_t)(T * o_rows + 1) * o_e), *o_gpu = test_malloc((size_t)(T * o_rows + 1) * o_e);
    float *lse_ref = (float *)test_malloc((size_t)(T * H + 1) * 4), *lse_gpu = (float *)test_malloc((size_t)(T * H + 1) * 4);
    float *lse_cmp = (float *)test_malloc((size_t)(T * H + 1) * 4);

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
    const int64_t far_pages = far_units(c->far, (int64_t)P * 576 * (int64_t)kv_e), far_bytes = far_pages * P * 576 * (int64_t)kv_e;
    void *d_q = gpu_malloc((size_t)(T * q_rows + 1) * q_e), *d_kv = far_cache_upload(kv, (size_t)kv_elems * kv_e, far_bytes);
    void *d_o = guarded_malloc((size_t)(T * o_rows + 1) * o_e);
    float *d_lse = (float *)guarded_malloc((size_t)(T * H + 1) * 4);
    int32_t *d_qo = (int32_t *)gpu_malloc((B + 1) * 4), *d_kvp = (int32_t *)gpu_malloc((B + 1) * 4);
    int32_t *d_last = (int32_t *)gpu_malloc(B * 4), *d_idx = far_ids_upload(kv_indices, pages_total, far_pages);
    int32_t *d_plan = (int32_t *)guarded_malloc((size_t)info.plan_ints * 4);
    void *d_ws = guarded_malloc(info.workspace_bytes);
    gpu_upload(d_q, q, (size_t)(T * q_rows) * q_e);
    gpu_upload(d_qo, qo, (B + 1) * 4);
    gpu_upload(d_kvp, kvp, (B + 1) * 4);
    gpu_upload(d_last, last, B * 4);
    gpu_upload(d_plan, plan, (size_t)info.plan_ints * 4);
    gpu_memset(d_o, 0xff, (size_t)(T * o_rows + 1) * o_e); /* poison: NaN in every float format */
    gpu_memset(d_lse, 0xff, (size_t)(T * H + 1) * 4);
    gpu_memset(d_ws, 0xff, info.workspace_bytes);

    aiter_mla_decode_args a;
    memset(&a, 0, sizeof a);
    a.q = d_q;
    a.q_stride_token = q_stride_token;
    a.kv_cache = d_kv;
    a.num_pages = far_pages + num_pages;
    a.kv_cache_bytes = (size_t)far_bytes + (size_t)kv_elems * kv_e; /* the allocation: checked, and taken */
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
    a.sm_scale = ldexpf(0.1f, -c->q_exp);
    a.q_scale = q_scale;
    a.kv_scale = kv_scale;

    /* reference on the host copies */
    aiter_mla_decode_args r = a;
    r.q = q;
    r.kv_cache = kv;
    r.num_pages = num_pages;
    r.kv_cache_bytes = (size_t)kv_elems * kv_e;
    r.qo_indptr = qo;
    r.kv_indptr = kvp;
    r.kv_indices = kv_indices;
    r.kv_last_page_lens = last;
    r.o = o_ref;
    r.lse = lse_ref;
    r.plan = NULL;
    r.workspace = NULL;
    poison_fill(o_ref, T * o_rows, c->o_dtype); /* what the reference leaves unwritten compares as NaN */
    poison_f32(lse_ref, T * H);
    ref_decode_parallel(&r, T);

    if (c->bad_plans) {
        run_bad_plans(what, &a, plan, qo, kvp, last, (size_t)(T * o_rows + 1) * o_e, (size_t)(T * H + 1) * 4, rng);
        gpu_upload(d_plan, plan, (size_t)info.plan_ints * 4);
        gpu_memset(d_o, 0xff, (size_t)(T * o_rows + 1) * o_e);
        gpu_memset(d_lse, 0xff, (size_t)(T * H + 1) * 4);
        gpu_memset(d_ws, 0xff, info.workspace_bytes);
    }

    /* two launches on one plan and workspace (as every layer of a step does): the second is as
     * right as the first, and the plan is left as it was uploaded. Where the plan splits a
     * tile, a third launch finds a piece's counter not zero (as an interrupted launch would
     * leave it): the reduce then waits for the whole decode instead, the results stay right,
     * and the counter is zero again after it (or stays as set where the pieces are not counted:
     * the portable and AMD kernels, and the mma ones where the reduce is the wide one, fewer
     * rows than CUs). */
    const aiter_mla_decode_plan_view pv = aiter_mla_decode_plan_view_of(&info, plan);
    const int runs = pv.num_partials > 0 ? 3 : 2;
    aiter_mla_kernel kernel = AITER_MLA_KERNEL_NONE;
    int run;
    CHECK_STATUS(aiter_mla_decode_kernel(&a, &kernel), AITER_MLA_OK, "");
    for (run = 0; run < runs; run++) {
        if (run) { /* the workspace too: launch 1's partials must not stand in for this launch's */
            gpu_memset(d_o, 0xff, (size_t)(T * o_rows + 1) * o_e);
            gpu_memset(d_lse, 0xff, (size_t)(T * H + 1) * 4);
            gpu_memset(d_ws, 0xff, info.workspace_bytes);
        }
        if (run == 2) {
            const int32_t stale = 1 << 30;
            gpu_upload(d_plan + info.off_reduce_counters + pv.reduce_partial_map[0], &stale, 4);
        }
        CHECK_STATUS(aiter_mla_decode(&a, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(o_gpu, d_o, (size_t)(T * o_rows) * o_e);
        gpu_download(lse_gpu, d_lse, (size_t)(T * H) * 4);

        /* compare the written region (strided rows: only the [H, 512] part of each row) */
        float *g = (float *)test_malloc((size_t)(T * H * 512 + 1) * 4), *f = (float *)test_malloc((size_t)(T * H * 512 + 1) * 4);
        int64_t t;
        int64_t unwritten = 0;
        for (t = 0; t < T; t++) {
            to_f32((const char *)o_gpu + (size_t)(t * o_rows) * o_e, g + t * H * 512, (int64_t)H * 512, c->o_dtype);
            to_f32((const char *)o_ref + (size_t)(t * o_rows) * o_e, f + t * H * 512, (int64_t)H * 512, c->o_dtype);
        }
        memcpy(lse_cmp, lse_ref, (size_t)(T * H) * 4); /* take_nan_rows zeroes NaN rows: every launch its own copy */
        if (c->nan_key)
            CHECK(take_nan_rows(what, g, f, c->with_lse ? lse_gpu : NULL, c->with_lse ? lse_cmp : NULL, T * H, 512) == (int64_t)c->q_len * H,
                  "%s: not every row of the last request is NaN", what);
        if (c->neg_inf_key && c->with_lse) { /* the planted case as the reference sees it */
            int64_t r, empty = 0, finite = 0;
            for (r = (int64_t)qo[0] * H; r < (int64_t)qo[1] * H; r++) finite += isfinite(lse_cmp[r]) != 0;
            for (r = (int64_t)qo[1] * H; r < (int64_t)qo[2] * H; r++) empty += lse_cmp[r] == INFINITY;
            CHECK(finite == (int64_t)c->q_len * H && empty == (int64_t)c->q_len * H,
                  "%s: the reference gives %lld finite rows to request 0 and %lld empty ones to request 1", what, (long long)finite,
                  (long long)empty);
        }
        for (i = 0; i < T * H * 512; i++) unwritten += g[i] != g[i];
        CHECK(unwritten == 0, "%s (launch %d): %lld output elements unwritten or NaN", what, run + 1, (long long)unwritten);
        if (c->strided) { /* the padding of o's token stride keeps its poison */
            const int64_t oe = (int64_t)o_e;
            int64_t gap_bytes = 0, b0;
            for (t = 0; t < T; t++)
                for (b0 = (int64_t)H * 512 * oe; b0 < o_rows * oe; b0++) gap_bytes += ((const unsigned char *)o_gpu)[t * o_rows * oe + b0] != 0xff;
            CHECK(gap_bytes == 0, "%s (launch %d): %lld bytes between o's rows written", what, run + 1, (long long)gap_bytes);
        }
        if (kv_fp8 || dtype_is_fp8(c->q_dtype)) CHECK_CLOSE(what, g, f, T * H * 512, TOL_FP8_REL, TOL_FP8_COS);
        else CHECK_CLOSE(what, g, f, T * H * 512, TOL_BF16_REL, TOL_BF16_COS);
        if (c->with_lse) CHECK_LSE(what, lse_gpu, lse_cmp, T * H);
        free(g);
        free(f);
    }
    {
        int32_t *back = (int32_t *)test_malloc((size_t)info.plan_ints * 4);
        gpu_download(back, d_plan, (size_t)info.plan_ints * 4);
        int32_t *counter = back + info.off_reduce_counters + pv.reduce_partial_map[0];
        const int wide = (int64_t)B * info.tokens_per_tile * H < info.desc.num_cu;
        const int counted = kernel == AITER_MLA_KERNEL_WGMMA ||
                            ((kernel == AITER_MLA_KERNEL_MMA16 || kernel == AITER_MLA_KERNEL_MMA || kernel == AITER_MLA_KERNEL_BULK16) && !wide);
        if (runs == 3 && !counted) { /* a launch that does not count leaves it */
            CHECK(*counter == 1 << 30, "%s: the %s kernel changed a piece's counter to %d", what, aiter_mla_kernel_name(kernel), *counter);
            *counter = 0;
        }
        CHECK(memcmp(back, plan, (size_t)info.plan_ints * 4) == 0, "%s: the plan differs after %d decodes", what, runs);
        free(back);
    }
    check_guards(what, d_o, (size_t)(T * o_rows + 1) * o_e, d_lse, (size_t)(T * H + 1) * 4, d_ws, info.workspace_bytes, d_plan,
                 (size_t)info.plan_ints * 4);

    gpu_free(d_q); gpu_free(d_kv); gpu_free(d_o); gpu_free(d_lse); gpu_free(d_qo); gpu_free(d_kvp);
    gpu_free(d_last); gpu_free(d_idx); gpu_free(d_plan); gpu_free(d_ws);
    free(qo); free(kvp); free(last); free(perm); free(kv_indices); free(kv); free(q); free(o_ref); free(o_gpu);
    free(lse_ref); free(lse_gpu); free(lse_cmp); free(plan);
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
                    /* n = 27 hi + 9 qi + 3 pi + ci: every 10th case meets every head count,
                       q_len, page size, cache and batch (every 9th would be pages of 1 and
                       bf16 caches alone) */
                    if (g_quick && n % 10 != 0) continue;
                    memset(&c, 0, sizeof c);
                    c.heads = heads[hi];
                    c.q_len = qlens[qi];
                    c.page = pages[pi];
                    c.batch = batches[(hi + qi + pi + ci) % 3]; /* every batch meets every other axis */
                    c.num_cu = gpu_num_cu();
                    /* an e4m3fn q over the e4m3fn cache (vLLM's fp8 decode) at 4, 16 and 64 heads */
                    c.q_dtype = ci == 1 && hi % 2 ? AITER_MLA_FP8_E4M3FN : AITER_MLA_BF16;
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
    struct { int heads, q_len, page, batch, num_cu; aiter_mla_dtype q, kv, o; int lse, strided, q_exp; } v[] = {
        {16, 1, 1, 5, 3, AITER_MLA_F16, AITER_MLA_F16, AITER_MLA_F16, 1, 0, 0},
        {16, 2, 16, 7, 5, AITER_MLA_F16, AITER_MLA_FP8_E4M3FN, AITER_MLA_F32, 1, 1, 0},
        {128, 1, 64, 3, 1, AITER_MLA_BF16, AITER_MLA_BF16, AITER_MLA_BF16, 0, 0, 0},
        {12, 3, 256, 9, 7, AITER_MLA_BF16, AITER_MLA_BF16, AITER_MLA_F32, 1, 1, 0},
        {48, 8, 128, 4, 11, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_BF16, 1, 0, 0},
        {16, 1, 2, 6, 13, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16, 1, 0, 0},
        {8, 4, 32, 5, 2, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_F16, 1, 1, 0},
        {128, 2, 1, 3, 200, AITER_MLA_BF16, AITER_MLA_BF16, AITER_MLA_BF16, 1, 0, 0},
        /* q far from 1 (the fp8 cache's products run in f16 with each q row scaled) */
        {16, 1, 64, 5, 7, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16, 1, 0, 40},
        {16, 2, 1, 4, 3, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16, 1, 1, -60},
        {64, 1, 16, 3, 5, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16, 1, 0, -100},
        /* 100 heads: two 64-row blocks over each fp8 key tile, the second of 36 rows */
        {100, 2, 64, 4, 9, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16, 1, 0, 0},
        {16, 1, 16, 3, 5, AITER_MLA_BF16, AITER_MLA_BF16, AITER_MLA_BF16, 1, 0, 60},
        /* e4m3 q over its flavour's cache (NVIDIA: widened to bf16 as the tensor-core kernels
         * load it): 16-row passes, 64-row passes */
        {16, 1, 64, 6, 7, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16, 1, 0, 0},
        {16, 2, 16, 5, 3, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_BF16, 1, 1, 0},
        {128, 1, 64, 3, 5, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16, 1, 0, 0},
        {64, 2, 64, 4, 9, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FN, AITER_MLA_F16, 1, 1, 0},
        {128, 1, 1, 3, 4, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_BF16, 0, 0, 0},
        {32, 1, 1, 5, 6, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FN, AITER_MLA_F32, 1, 0, 0},
        /* an e4m3fn cache at 16 rows a pass with pages larger than the 64-key tiles of its
         * kernel (decode16_fp8_kernel in sm_90a builds: a tile then lies inside a page) */
        {16, 1, 256, 5, 7, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16, 1, 0, 0},
        {8, 2, 128, 6, 3, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16, 1, 1, 0},
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
        c.q_exp = v[k].q_exp;
        make_ctx(ctx, c.batch, c.q_len, 1200, 2500, rng);
        c.ctx = ctx;
        run_decode_case(&c, rng);
    }
}

/* Blocks that run many work items of 16-row passes one after another (each pass's ring slots,
 * Q rows and finish handing over to the next): few CUs, long items beside items of a few tiles,
 * items without keys, with one key (no tile for the second group of warps), 31, 33 or 65 keys,
 * items split across blocks; pages of 1, 16 and 64; 16 heads (q_len 1), 8 (q_len 2), 4 (q_len
 * 4): 16 rows a pass each. */
static void test_decode_many_items(test_rng *rng) {
    static const int pages[] = {1, 16, 64};
    static const struct { int heads, q_len; } hq[] = {{16, 1}, {8, 2}, {4, 4}};
    static const int32_t shape[12] = {2500, 0, 3000, 1, 700, 31, 2900, 33, 320, 1800, 65, 2600};
    const int before = testing_failed;
    int32_t ctx[12];
    int pi, hi, k;
    for (pi = 0; pi < 3; pi++)
        for (hi = 0; hi < 3; hi++) {
            decode_case c;
            if (g_quick && (pi + hi) % 2) continue;
            memset(&c, 0, sizeof c);
            c.heads = hq[hi].heads;
            c.q_len = hq[hi].q_len;
            c.page = pages[pi];
            c.batch = 12;
            c.num_cu = 3 + 2 * ((pi + hi) % 3);
            c.q_dtype = c.kv_dtype = c.o_dtype = AITER_MLA_BF16;
            c.with_lse = 1;
            for (k = 0; k < 12; k++) ctx[k] = shape[k] + (shape[k] > 300 ? rng_int(rng, 0, 200) : 0);
            c.ctx = ctx;
            run_decode_case(&c, rng);
        }
    printf("decode, many work items a block: %s\n", testing_failed == before ? "ok" : "FAILED");
}

/* Keys that grow along each request (times 1 + position / 512): a row's scores keep rising over
 * the pass, so its running maximum moves many times after the first tile, by more than the
 * 64-row kernel's lazy threshold (random keys of one scale never do that after the first
 * tiles). 64 and 128 heads (the 64-row kernel), bf16 cache rows by TMA (pages of 64) and by
 * cp.async (pages of 1), e4m3fn rows; few CUs, so each block's piece spans many tiles. */
static void test_decode_rising_keys(test_rng *rng) {
    static const int heads[] = {128, 64};
    static const aiter_mla_dtype caches[] = {AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN};
    const int before = testing_failed;
    int32_t ctx[4];
    int hi, ci, pi;
    for (hi = 0; hi < 2; hi++)
        for (ci = 0; ci < 2; ci++)
            for (pi = 0; pi < 2; pi++) {
                decode_case c;
                if (g_quick && (hi + ci + pi) % 2) continue;
                memset(&c, 0, sizeof c);
                c.heads = heads[hi];
                c.q_len = 1 + hi; /* 128 rows a token either way */
                c.page = pi ? 1 : 64;
                c.batch = 4;
                c.num_cu = 3 + 5 * pi;
                c.q_dtype = c.o_dtype = AITER_MLA_BF16;
                c.kv_dtype = caches[ci];
                c.with_lse = 1;
                c.key_ramp = 512; /* e4m3 codes up to 20 (1 / kv_scale) times 9: inside 448 */
                ctx[0] = 4096;
                ctx[1] = rng_int(rng, 1500, 4000);
                ctx[2] = rng_int(rng, 64, 700);
                ctx[3] = 3000;
                c.ctx = ctx;
                run_decode_case(&c, rng);
            }
    printf("decode, rising keys: %s\n", testing_failed == before ? "ok" : "FAILED");
}

/* Graph capture: capture decode (+ reduce) once, then change q, the cache and even the
 * lengths and plan contents in place, replay, and compare again. H heads, pages of P. */
static void run_decode_graph(test_rng *rng, int H, int P) {
    const int B = 6, maxctx = 3000, max_pages = (maxctx + P - 1) / P;
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
    CHECK_STATUS(aiter_mla_decode_plan_get_info(&pd, &info), AITER_MLA_OK, "");
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
        gpu_memset(d_ws, 0xff, info.workspace_bytes); /* the last replay's partials must not stand in for this one's */
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
        poison_fill(o_ref, (int64_t)B * H * 512, AITER_MLA_BF16); /* not the last replay's expected values */
        poison_f32(lse_ref, (int64_t)B * H);
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

static void test_decode_graph(test_rng *rng) {
    run_decode_graph(rng, 16, 16); /* the 16-row kernel */
    run_decode_graph(rng, 64, 64); /* sm_90a: the warpgroup kernel, whole key tiles by TMA */
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
        CHECK_STATUS(aiter_mla_pad_q_ref(&a), AITER_MLA_OK, "");
        CHECK(memcmp(got, ref, (size_t)nq * 2) == 0, "pad_q H=%d differs from the reference", H);
        /* unpad the padded tensor back */
        fill_random(src, nq, AITER_MLA_BF16, rng, -1.0f, 1.0f, 1.0f);
        gpu_upload(d_src, src, (size_t)nq * 2);
        gpu_memset(d_dst, 0xff, (size_t)nq * 2);
        a.src = d_src;
        a.dst = d_dst;
        CHECK_STATUS(aiter_mla_unpad_o(&a, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(got, d_dst, (size_t)nq * 2);
        a.src = src;
        a.dst = ref;
        CHECK_STATUS(aiter_mla_unpad_o_ref(&a), AITER_MLA_OK, "");
        CHECK(memcmp(got, ref, (size_t)T * H * 576 * 2) == 0, "unpad_o H=%d differs from the reference", H);
        { /* nothing past the unpadded tensor (the poisoned buffer is the padded size) */
            int64_t past = 0, b0;
            for (b0 = (int64_t)T * H * 576 * 2; b0 < (int64_t)nq * 2; b0++) past += ((const unsigned char *)got)[b0] != 0xff;
            CHECK(past == 0, "unpad_o H=%d: %lld bytes written past the output", H, (long long)past);
        }
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
        a.scale = dtype_is_fp8(cache_t[k]) ? 0.05f : 0.0f; /* 30 / 0.05 saturates e4m3fn's 448 and fnuz's 240 */
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
/* prefill: one head per slice */
static aiter_mla_status ref_prefill_slice(const void *args, int64_t h, void *extra) {
    const aiter_mla_prefill_args *a = (const aiter_mla_prefill_args *)args;
    const size_t e = aiter_mla_dtype_size(a->qkv_dtype), oe = aiter_mla_dtype_size(a->o_dtype);
    aiter_mla_prefill_args s = *a;
    (void)extra;
    s.num_heads = 1;
    s.q = (const char *)a->q + (size_t)(h * a->q_stride_head) * e;
    s.k = (const char *)a->k + (size_t)(h * a->k_stride_head) * e;
    s.v = (const char *)a->v + (size_t)(h * a->v_stride_head) * e;
    s.o = (char *)a->o + (size_t)(h * a->o_stride_head) * oe;
    s.lse = a->lse ? a->lse + h * a->cu_seqlens_q[a->batch] : NULL;
    s.plan = NULL;
    return aiter_mla_prefill_ref(&s);
}
static void ref_prefill_parallel(const aiter_mla_prefill_args *a) {
    ref_parallel("prefill", a->num_heads, ref_prefill_slice, a, NULL);
}

typedef struct prefill_case {
    int heads, dqk, dv, batch, causal, max_len;
    int plan_cu;       /* > 0: run through a persistent plan on this many CUs */
    aiter_mla_dtype dtype, o_dtype;
    int with_lse;
    int odd_strides;   /* row strides that are not whole 16-byte units: the portable kernel */
    int o_pad;         /* elements past H * dv in o's row stride alone (3: o stored value by value) */
    int understate;    /* max_seqlen_q a third of the truth: the grid's tiles wrap around */
    int grid_cu;       /* no plan: args.num_cu, the wgmma kernel's resident blocks (0: the full grid) */
    int graph;         /* captured once in a graph, replayed over three fills of q, k and v */
    int sk_fixed;      /* > 0: every request has this many keys (long rows), else sk is drawn */
    int nan_key;       /* 1: one value of head 0's first key of the last request with rows and keys is
                          NaN: every row of it that sees the key has NaN o and lse (not with graph) */
    int far;           /* 1: the GPU's q, k, v and o at token strides that put their last rows past
                          4 GiB (far_stride; the rest of each buffer 0xff) */
    int bad_plans;     /* 1 (with plan_cu): launches on damaged plans first (run_bad_prefill_plans) */
} prefill_case;

/* The bad-plan rounds of a persistent prefill (`plan`, from cq/ck): the damages, then a plan
 * built for the requests in reverse order (stale). */
static void run_bad_prefill_plans(const char *what, aiter_mla_prefill_args *a, const int32_t *plan, const int32_t *cq, const int32_t *ck,
                                  size_t o_bytes, size_t lse_bytes, test_rng *rng) {
    const aiter_mla_prefill_plan_info *info = a->plan_info;
    const int B = a->batch;
    const planned_launch l = {NULL, a,
                              {info->off_work_indptr, info->off_work_info, info->off_reduce_indptr, info->off_reduce_final_map,
                               info->off_reduce_partial_map, info->desc.num_cu, info->max_work, info->max_tiles,
                               info->max_partials, info->max_partial_rows,
                               {B, info->max_partial_rows, cq[B], cq[B], ck[B], ck[B], 1 << 20}},
                              info->plan_ints, o_bytes, lse_bytes, info->workspace_bytes};
    int32_t *bad = (int32_t *)test_malloc((size_t)info->plan_ints * 4), *cq2 = (int32_t *)test_malloc((size_t)(B + 1) * 4);
    int32_t *ck2 = (int32_t *)test_malloc((size_t)(B + 1) * 4);
    char round_what[300];
    int b;
    damaged_plan_rounds(what, &l, plan, bad, rng);
    cq2[0] = ck2[0] = 0;
    for (b = 0; b < B; b++) {
        cq2[b + 1] = cq2[b] + cq[B - b] - cq[B - 1 - b];
        ck2[b + 1] = ck2[b] + ck[B - b] - ck[B - 1 - b];
    }
    snprintf(round_what, sizeof round_what, "%s, a plan of the requests in reverse", what);
    CHECK_STATUS(aiter_mla_prefill_plan_build(info, cq2, ck2, B, a->causal, bad), AITER_MLA_OK, "");
    bad_plan_round(&l, round_what, bad);
    free(bad);
    free(cq2);
    free(ck2);
}

/* fp8 prefill's lse bound per row (testing.h, TOL_FP8_SUM_BITS): tol[h * Tq + t] =
 * dqk / 32 x 2^-TOL_FP8_SUM_BITS x sm_scale x the largest sum_d |q_d k_d| over the request's
 * keys (dequantised values), at least TOL_LSE_ABS. */
static void fp8_prefill_lse_tol(const aiter_mla_prefill_args *a, float *tol) {
    const int H = a->num_heads, D = a->dqk;
    const int64_t Tq = a->cu_seqlens_q[a->batch], Tk = a->cu_seqlens_k[a->batch];
    float *qa = (float *)test_malloc((size_t)(Tq * H * D + 1) * 4), *ka = (float *)test_malloc((size_t)(Tk * H * D + 1) * 4);
    const double step = ldexp((D + 31) / 32, -TOL_FP8_SUM_BITS) * a->sm_scale;
    int64_t i, row;
    for (i = 0; i < Tq * H * D; i++)
        qa[i] = fabsf(aiter_mla_load_f32(a->q, (i / D / H) * a->q_stride_token + (i / D % H) * a->q_stride_head + i % D, a->qkv_dtype) * a->q_scale);
    for (i = 0; i < Tk * H * D; i++)
        ka[i] = fabsf(aiter_mla_load_f32(a->k, (i / D / H) * a->k_stride_token + (i / D % H) * a->k_stride_head + i % D, a->qkv_dtype) * a->k_scale);
#pragma omp parallel for schedule(dynamic, 16)
    for (row = 0; row < Tq * H; row++) {
        const int64_t t = row / H, h = row % H;
        int b = 0;
        int64_t j;
        float most = 0.0f;
        while (a->cu_seqlens_q[b + 1] <= t) b++;
        for (j = a->cu_seqlens_k[b]; j < a->cu_seqlens_k[b + 1]; j++) {
            const float *x = qa + (t * H + h) * D, *y = ka + (j * H + h) * D;
            float sum = 0.0f;
            int d;
            for (d = 0; d < D; d++) sum += x[d] * y[d];
            if (sum > most) most = sum;
        }
        tol[h * Tq + t] = (float)fmax(TOL_LSE_ABS, step * most);
    }
    free(qa);
    free(ka);
}

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
        if (c->sk_fixed > 0) sk = c->sk_fixed;
        cq[b + 1] = cq[b] + sq;
        ck[b + 1] = ck[b] + sk;
        if (sq > max_sq) max_sq = sq;
    }
    const int64_t Tq = cq[B], Tk = ck[B];
    const int64_t pad = c->odd_strides ? 3 : 0;
    const int64_t qst = H * c->dqk + pad, kst = H * c->dqk + pad, vst = H * c->dv + pad, ost = H * c->dv + pad + c->o_pad;
    const size_t e = aiter_mla_dtype_size(c->dtype), oe = aiter_mla_dtype_size(c->o_dtype);
    snprintf(what, sizeof what, "prefill H=%d %d/%d batch=%d Tq=%lld Tk=%lld %s %s o=%s%s%s o_pad=%d plan_cu=%d grid_cu=%d%s%s", H, c->dqk, c->dv,
             B, (long long)Tq, (long long)Tk, c->causal ? "causal" : "full", aiter_mla_dtype_name(c->dtype),
             aiter_mla_dtype_name(c->o_dtype), c->with_lse ? " lse" : "", c->odd_strides ? " odd-strides" : "", c->o_pad,
             c->plan_cu, c->grid_cu, c->understate ? " max_seqlen_q/3" : "", c->graph ? " graph" : "");
    if (c->nan_key) strncat(what, " nan_key", sizeof what - strlen(what) - 1);
    if (c->far) strncat(what, " far", sizeof what - strlen(what) - 1);
    void *q = test_malloc((size_t)(Tq * qst + 1) * e), *k = test_malloc((size_t)(Tk * kst + 1) * e),
         *v = test_malloc((size_t)(Tk * vst + 1) * e);
    fill_random(q, Tq * qst, c->dtype, rng, -2.0f, 2.0f, qs);
    fill_random(k, Tk * kst, c->dtype, rng, -2.0f, 2.0f, ks);
    fill_random(v, Tk * vst, c->dtype, rng, -1.0f, 1.0f, vs);
    if (c->nan_key) {
        for (b = B - 1; b >= 0 && (cq[b + 1] == cq[b] || ck[b + 1] == ck[b]); b--) {}
        CHECK(b >= 0 && !c->graph, "%s: no request with rows and keys", what);
        if (b >= 0) aiter_mla_store_f32(k, (int64_t)ck[b] * kst + 5, c->dtype, NAN);
    }
    void *o_ref = test_malloc((size_t)(Tq * ost + 1) * oe), *o_gpu = test_malloc((size_t)(Tq * ost + 1) * oe);
    float *lse_ref = (float *)test_malloc((size_t)(H * Tq + 1) * 4), *lse_gpu = (float *)test_malloc((size_t)(H * Tq + 1) * 4);

    /* the device's token strides (the host's unless far) */
    const int64_t qsd = far_stride(c->far, Tq, qst, e), ksd = far_stride(c->far, Tk, kst, e), vsd = far_stride(c->far, Tk, vst, e),
                  osd = far_stride(c->far, Tq, ost, oe);
    void *d_q = gpu_malloc((size_t)(Tq * qsd + 1) * e), *d_k = gpu_malloc((size_t)(Tk * ksd + 1) * e),
         *d_v = gpu_malloc((size_t)(Tk * vsd + 1) * e), *d_o = guarded_malloc((size_t)(Tq * osd + 1) * oe);
    float *d_lse = (float *)guarded_malloc((size_t)(H * Tq + 1) * 4);
    int32_t *d_cq = (int32_t *)gpu_malloc((B + 1) * 4), *d_ck = (int32_t *)gpu_malloc((B + 1) * 4), *d_plan = NULL;
    void *d_ws = NULL;
    if (c->far) { /* between the rows: NaN to a read that wraps */
        gpu_memset(d_q, 0xff, (size_t)(Tq * qsd + 1) * e);
        gpu_memset(d_k, 0xff, (size_t)(Tk * ksd + 1) * e);
        gpu_memset(d_v, 0xff, (size_t)(Tk * vsd + 1) * e);
    }
    strided_upload(d_q, qsd, q, qst, Tq, (size_t)qst * e, e);
    strided_upload(d_k, ksd, k, kst, Tk, (size_t)kst * e, e);
    strided_upload(d_v, vsd, v, vst, Tk, (size_t)vst * e, e);
    gpu_upload(d_cq, cq, (B + 1) * 4);
    gpu_upload(d_ck, ck, (B + 1) * 4);
    gpu_memset(d_o, 0xff, (size_t)(Tq * osd + 1) * oe);
    gpu_memset(d_lse, 0xff, (size_t)(H * Tq + 1) * 4);

    aiter_mla_prefill_args a;
    aiter_mla_prefill_plan_info info;
    int32_t *plan = NULL;
    memset(&a, 0, sizeof a);
    a.q = d_q;
    a.k = d_k;
    a.v = d_v;
    a.q_stride_token = qsd;
    a.k_stride_token = ksd;
    a.v_stride_token = vsd;
    a.o_stride_token = osd;
    a.cu_seqlens_q = d_cq;
    a.cu_seqlens_k = d_ck;
    a.o = d_o;
    a.lse = c->with_lse ? d_lse : NULL;
    a.batch = B;
    a.max_seqlen_q = c->understate ? max_sq / 3 + 1 : max_sq;
    a.num_cu = c->grid_cu;
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
    if (c->plan_cu > 0) {
        aiter_mla_prefill_plan_desc pd;
        memset(&pd, 0, sizeof pd);
        pd.max_batch = B;
        pd.max_q_tokens = Tq > 0 ? Tq : 1;
        pd.num_heads = H;
        pd.num_cu = c->plan_cu;
        pd.dv = c->dv;
        CHECK_STATUS(aiter_mla_prefill_plan_get_info(&pd, &info), AITER_MLA_OK, "");
        plan = (int32_t *)test_malloc((size_t)info.plan_ints * 4);
        CHECK_STATUS(aiter_mla_prefill_plan_build(&info, cq, ck, B, c->causal, plan), AITER_MLA_OK, "");
        d_plan = (int32_t *)guarded_malloc((size_t)info.plan_ints * 4);
        d_ws = guarded_malloc(info.workspace_bytes);
        a.plan = d_plan;
        a.plan_info = &info;
        a.workspace = d_ws;
        a.workspace_bytes = info.workspace_bytes;
        if (c->bad_plans) run_bad_prefill_plans(what, &a, plan, cq, ck, (size_t)(Tq * osd + 1) * oe, (size_t)(H * Tq + 1) * 4, rng);
        gpu_upload(d_plan, plan, (size_t)info.plan_ints * 4);
        gpu_memset(d_ws, 0xff, info.workspace_bytes);
        gpu_memset(d_o, 0xff, (size_t)(Tq * osd + 1) * oe);
        gpu_memset(d_lse, 0xff, (size_t)(H * Tq + 1) * 4);
    }
    gpu_graph *graph = NULL;
    aiter_mla_kernel kernel = AITER_MLA_KERNEL_NONE;
    int run;
    CHECK_STATUS(aiter_mla_prefill_kernel(&a, &kernel), AITER_MLA_OK, "");
    for (run = 0; run < (c->graph ? 3 : 1); run++) {
        if (run > 0) { /* the graph's replays: new contents in the same buffers, outputs poisoned again */
            fill_random(q, Tq * qst, c->dtype, rng, -2.0f, 2.0f, qs);
            fill_random(k, Tk * kst, c->dtype, rng, -2.0f, 2.0f, ks);
            fill_random(v, Tk * vst, c->dtype, rng, -1.0f, 1.0f, vs);
            strided_upload(d_q, qsd, q, qst, Tq, (size_t)qst * e, e);
            strided_upload(d_k, ksd, k, kst, Tk, (size_t)kst * e, e);
            strided_upload(d_v, vsd, v, vst, Tk, (size_t)vst * e, e);
            gpu_memset(d_o, 0xff, (size_t)(Tq * osd + 1) * oe);
            gpu_memset(d_lse, 0xff, (size_t)(H * Tq + 1) * 4);
            if (d_ws) gpu_memset(d_ws, 0xff, info.workspace_bytes);
            gpu_sync();
        }
        if (!c->graph) {
            CHECK_STATUS(aiter_mla_prefill(&a, g_stream), AITER_MLA_OK, "");
        } else {
            if (!graph) {
                gpu_graph_begin(g_stream);
                CHECK_STATUS(aiter_mla_prefill(&a, g_stream), AITER_MLA_OK, "");
                graph = gpu_graph_end(g_stream);
            }
            gpu_graph_launch(graph, g_stream);
        }
        gpu_sync();
        strided_download(o_gpu, ost, d_o, osd, Tq, (size_t)ost * oe, oe);
        gpu_download(lse_gpu, d_lse, (size_t)(H * Tq) * 4);

        aiter_mla_prefill_args r = a;
        r.q = q;
        r.k = k;
        r.v = v;
        r.q_stride_token = qst;
        r.k_stride_token = kst;
        r.v_stride_token = vst;
        r.o_stride_token = ost;
        r.cu_seqlens_q = cq;
        r.cu_seqlens_k = ck;
        r.o = o_ref;
        r.lse = lse_ref;
        r.q_stride_head = c->dqk;
        r.k_stride_head = c->dqk;
        r.v_stride_head = c->dv;
        r.o_stride_head = c->dv;
        poison_fill(o_ref, Tq * ost, c->o_dtype); /* not the last replay's expected values, nor malloc's */
        poison_f32(lse_ref, H * Tq);
        ref_prefill_parallel(&r);
        {
            const int64_t n = Tq * H * c->dv;
            float *g = (float *)test_malloc((size_t)(n + 1) * 4), *f = (float *)test_malloc((size_t)(n + 1) * 4);
            int64_t t, i, unwritten = 0;
            for (t = 0; t < Tq; t++) {
                to_f32((const char *)o_gpu + (size_t)(t * ost) * oe, g + t * H * c->dv, (int64_t)H * c->dv, c->o_dtype);
                to_f32((const char *)o_ref + (size_t)(t * ost) * oe, f + t * H * c->dv, (int64_t)H * c->dv, c->o_dtype);
            }
            int64_t pad_written = 0;
            if (c->nan_key) { /* lse is [H, Tq]: take the NaN rows with lse as [Tq, H] */
                float *lg = (float *)test_malloc((size_t)(H * Tq + 1) * 4), *lr = (float *)test_malloc((size_t)(H * Tq + 1) * 4);
                int hh;
                for (t = 0; t < Tq; t++)
                    for (hh = 0; hh < H; hh++) lg[t * H + hh] = lse_gpu[hh * Tq + t], lr[t * H + hh] = lse_ref[hh * Tq + t];
                CHECK(take_nan_rows(what, g, f, c->with_lse ? lg : NULL, c->with_lse ? lr : NULL, Tq * H, c->dv) > 0, "%s: no NaN row", what);
                for (t = 0; t < Tq; t++)
                    for (hh = 0; hh < H; hh++) lse_gpu[hh * Tq + t] = lg[t * H + hh], lse_ref[hh * Tq + t] = lr[t * H + hh];
                free(lg);
                free(lr);
            }
            for (i = 0; i < n; i++) unwritten += g[i] != g[i];
            CHECK(unwritten == 0, "%s: %lld output elements unwritten or NaN", what, (long long)unwritten);
            for (t = 0; t < Tq; t++) /* the stride's padding keeps its poison */
                for (i = (int64_t)H * c->dv * (int64_t)oe; i < ost * (int64_t)oe; i++)
                    pad_written += ((const unsigned char *)o_gpu)[t * ost * (int64_t)oe + i] != 0xff;
            CHECK(pad_written == 0, "%s: %lld bytes of o's row padding written", what, (long long)pad_written);
            if (fp8) CHECK_CLOSE(what, g, f, n, TOL_FP8_REL, TOL_FP8_COS);
            else CHECK_CLOSE(what, g, f, n, TOL_BF16_REL, TOL_BF16_COS);
            /* e4m3 products (the wgmma prefill, e4m3fn alone) keep ~14 bits of their sums: the
             * per-row bound. The other kernels widen e4m3 exactly (f16 or bf16 products, fp32
             * sums), so SPEC 8's lse bound holds there. */
            if (c->with_lse && c->dtype == AITER_MLA_FP8_E4M3FN && kernel == AITER_MLA_KERNEL_WGMMA) {
                float *tol = (float *)test_malloc((size_t)(H * Tq + 1) * 4);
                fp8_prefill_lse_tol(&r, tol);
                CHECK_LSE_TOLS(what, lse_gpu, lse_ref, H * Tq, tol);
                free(tol);
            } else if (c->with_lse) CHECK_LSE(what, lse_gpu, lse_ref, H * Tq);
            free(g);
            free(f);
        }
    }
    if (graph) gpu_graph_destroy(graph);
    check_guards(what, d_o, (size_t)(Tq * osd + 1) * oe, d_lse, (size_t)(H * Tq + 1) * 4, d_ws, d_ws ? info.workspace_bytes : 0, d_plan,
                 d_plan ? (size_t)info.plan_ints * 4 : 0);
    gpu_free(d_q); gpu_free(d_k); gpu_free(d_v); gpu_free(d_o); gpu_free(d_lse); gpu_free(d_cq); gpu_free(d_ck);
    if (d_plan) gpu_free(d_plan);
    if (d_ws) gpu_free(d_ws);
    free(cq); free(ck); free(q); free(k); free(v); free(o_ref); free(o_gpu); free(lse_ref); free(lse_gpu); free(plan);
}

/* A case with lse, no plan, packed strides: the fields most cases set. */
static prefill_case prefill_case_of(int heads, int dqk, int dv, int batch, int causal, int max_len, aiter_mla_dtype dtype,
                                    aiter_mla_dtype o_dtype) {
    prefill_case c;
    memset(&c, 0, sizeof c);
    c.heads = heads;
    c.dqk = dqk;
    c.dv = dv;
    c.batch = batch;
    c.causal = causal;
    c.max_len = max_len;
    c.dtype = dtype;
    c.o_dtype = o_dtype;
    c.with_lse = 1;
    return c;
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
            c = prefill_case_of(3, dims[di][0], dims[di][1], 5, causal, g_quick ? 70 : 300, AITER_MLA_BF16, AITER_MLA_BF16);
            run_prefill_case(&c, rng);
            if (c.dqk == 128 && c.dv == 128) { /* f16 and fp8 have kernels of their own for this pair too */
                c.dtype = AITER_MLA_F16;
                c.o_dtype = AITER_MLA_F16;
                run_prefill_case(&c, rng);
                c.dtype = AITER_MLA_FP8_E4M3FN;
                c.o_dtype = AITER_MLA_BF16;
                run_prefill_case(&c, rng);
            }
        }
    /* heads x dtypes on 192/128, with and without a persistent plan, and the portable kernel */
    for (hi = 0; hi < 3; hi++)
        for (ti = 0; ti < 4; ti++)
            for (causal = 0; causal < 2; causal++) {
                int mode;
                for (mode = 0; mode < 3; mode++) {
                    /* --quick keeps 128 heads for bf16 without a plan: more grid blocks than an
                       H100 has SMs, so the wgmma kernel's resident blocks run under the sanitizers */
                    if (g_quick && (mode == 2 || (hi == 2 && (ti != 0 || mode != 0)))) continue;
                    c = prefill_case_of(heads[hi], 192, 128, heads[hi] == 128 ? 4 : 6, causal, heads[hi] == 128 ? 160 : (g_quick ? 100 : 600),
                                        types[ti], ti == 1 ? AITER_MLA_F16 : (ti == 0 && causal ? AITER_MLA_F32 : AITER_MLA_BF16));
                    c.with_lse = !(ti == 1 && causal);
                    c.plan_cu = mode == 1 ? 1 + rng_int(rng, 0, 131) : 0;
                    /* no plan: an H100's SM count, or a few blocks that each walk many grid blocks */
                    c.grid_cu = mode == 0 ? (causal ? 132 : 1 + rng_int(rng, 0, 15)) : 0;
                    c.odd_strides = mode == 2;
                    run_prefill_case(&c, rng);
                    if (mode == 0 && causal && ti != 1) { /* every head and dtype kernel, short grids */
                        c.understate = 1;
                        run_prefill_case(&c, rng);
                    }
                }
            }
    /* o's stride alone not in whole 16-byte units (values stored one by one), or padded by 16
       bytes (whole 16-byte stores at a stride of its own); 16-bit o from either input type */
    for (di = 0; di < 2; di++)
        for (ti = 0; ti < 2; ti++)
            for (causal = 0; causal < 2; causal++) {
                c = prefill_case_of(16, di ? 128 : 192, 128, 4, causal, g_quick ? 150 : 400, ti ? AITER_MLA_FP8_E4M3FN : AITER_MLA_BF16,
                                    causal ? AITER_MLA_F16 : AITER_MLA_BF16);
                c.o_pad = 3;
                run_prefill_case(&c, rng);
                c.o_pad = 8;
                c.grid_cu = 7; /* the 16-byte stores from resident blocks */
                run_prefill_case(&c, rng);
            }
    /* graph capture: one capture, replayed over new q, k and v (sm_90a: tiles of 128 rows that lie
       in their request come by TMA, through tensor maps encoded at capture), with and without a plan */
    for (ti = 0; ti < 2; ti++)
        for (causal = 0; causal < 2; causal++) {
            c = prefill_case_of(16, 192, 128, 3, causal, 600, ti ? AITER_MLA_FP8_E4M3FN : AITER_MLA_BF16, AITER_MLA_BF16);
            c.graph = 1;
            run_prefill_case(&c, rng);
            c.plan_cu = 1 + rng_int(rng, 0, 131);
            run_prefill_case(&c, rng);
        }
    printf("prefill: %s\n", testing_failed == before ? "ok" : "FAILED");
}

/* Long rows: SPEC 8's bounds hold as a row's keys grow (fp8 rounds P to e4m3 on the wgmma
   kernel: its error does not average out over a row), with and without a plan. */
static void test_prefill_long_rows(test_rng *rng) {
    const int before = testing_failed;
    int ti, causal, mode;
    prefill_case c;
    for (ti = 0; ti < 2; ti++)
        for (causal = 0; causal < 2; causal++)
            for (mode = 0; mode < 2; mode++) {
                /* up to 160 query rows; causal rows end at the last key (bottom-right) */
                c = prefill_case_of(2, 192, 128, 2, causal, 160, ti ? AITER_MLA_FP8_E4M3FN : AITER_MLA_BF16, AITER_MLA_BF16);
                c.sk_fixed = g_quick ? 4096 : 16384;
                c.plan_cu = mode ? 1 + rng_int(rng, 0, 131) : 0;
                run_prefill_case(&c, rng);
            }
    printf("prefill, long rows: %s\n", testing_failed == before ? "ok" : "FAILED");
}

/* Damaged device plans (run_bad_plans, run_bad_prefill_plans) on every decode kernel: the
 * 16-row kernel with the narrow reduce (counted pieces) and with the wide one (batch 1 over
 * many CUs), the 64-row one, a tile of two row slices (128 heads), the e4m3fn kernel, and the
 * portable one (f16 on NVIDIA); and on the prefill kernels through a persistent plan. Each
 * case then runs on its plan as built, checked against the reference as usual. */
static void test_bad_plans(test_rng *rng) {
    static const struct {
        int heads, page, batch, num_cu;
        aiter_mla_dtype q, kv;
    } k[] = {{16, 16, 6, 5, AITER_MLA_BF16, AITER_MLA_BF16},       {16, 64, 1, 40, AITER_MLA_BF16, AITER_MLA_BF16},
             {64, 64, 4, 6, AITER_MLA_BF16, AITER_MLA_BF16},       {128, 1, 3, 6, AITER_MLA_BF16, AITER_MLA_BF16},
             {16, 64, 6, 5, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN}, {16, 16, 6, 5, AITER_MLA_F16, AITER_MLA_F16}};
    const int before = testing_failed;
    int32_t ctx[6];
    int ki, b;
    for (ki = 0; ki < (int)(sizeof k / sizeof k[0]); ki++) {
        for (b = 0; b < k[ki].batch; b++) ctx[b] = b == 1 ? 0 : rng_int(rng, 1, 3000);
        decode_case c = decode_case_of(k[ki].heads, 1, k[ki].page, k[ki].batch, k[ki].num_cu, k[ki].q, k[ki].kv,
                                       k[ki].q == AITER_MLA_F16 ? AITER_MLA_F16 : AITER_MLA_BF16, ctx);
        c.bad_plans = 1;
        run_decode_case(&c, rng);
    }
    /* the persistent prefill plan on the tensor-core prefills: bf16, e4m3fn and f16 at 192/128 or
     * 128/128 (sm_90a: the wgmma kernel; mma.sync elsewhere), 64/64 bf16 (mma.sync; the portable
     * kernel in test_gpu_mfma). No case here reaches the portable prefill on NVIDIA. */
    {
        static const struct {
            int dqk, dv;
            aiter_mla_dtype t;
        } p[] = {{192, 128, AITER_MLA_BF16}, {192, 128, AITER_MLA_FP8_E4M3FN}, {128, 128, AITER_MLA_F16}, {64, 64, AITER_MLA_BF16}};
        int pi, causal;
        for (pi = 0; pi < (int)(sizeof p / sizeof p[0]); pi++)
            for (causal = 0; causal < 2; causal++) {
                prefill_case c = prefill_case_of(4, p[pi].dqk, p[pi].dv, 5, causal, 500, p[pi].t, AITER_MLA_BF16);
                c.plan_cu = 3 + rng_int(rng, 0, 20);
                c.bad_plans = 1;
                run_prefill_case(&c, rng);
            }
    }
    printf("decode and prefill, damaged plans: %s\n", testing_failed == before ? "ok" : "FAILED");
}

/* ---- sparse attention (V3.2) -------------------------------------------------------------- */
/* sparse attention: one token per slice */
static aiter_mla_status ref_sparse_slice(const void *args, int64_t t, void *extra) {
    const aiter_mla_sparse_args *a = (const aiter_mla_sparse_args *)args;
    const size_t qe = aiter_mla_dtype_size(a->q_dtype), oe = aiter_mla_dtype_size(a->o_dtype);
    const int H = a->num_heads;
    aiter_mla_sparse_args s = *a;
    (void)extra;
    s.num_tokens = 1;
    s.q = (const char *)a->q + (size_t)(t * H * 576) * qe;
    s.indices = a->indices + t * (a->indices_stride ? a->indices_stride : a->topk);
    s.topk_length = a->topk_length ? a->topk_length + t : NULL;
    s.o = (char *)a->o + (size_t)(t * H * 512) * oe;
    s.lse = a->lse ? a->lse + t * H : NULL;
    s.max_logits = a->max_logits ? a->max_logits + t * H : NULL;
    return aiter_mla_sparse_attention_ref(&s);
}
static void ref_sparse_parallel(const aiter_mla_sparse_args *a) {
    ref_parallel("sparse attention", a->num_tokens, ref_sparse_slice, a, NULL);
}

typedef struct sparse_case {
    int tokens, heads, topk;
    int cache;              /* 0 bf16 rows, 1 ds_mla e4m3fn, 2 ds_mla e4m3fnuz */
    aiter_mla_dtype q_dtype, o_dtype;
    int with_length, with_sink, holes;
    int num_cu; /* aiter_mla_sparse_args.num_cu: small counts make each block take several tokens */
    int ramp;   /* slot s's latent times 1 + s / ramp and each token's list in ascending order (0: plain):
                   the row maxima rise along the list */
    int nan_slot; /* 1: token 0's first entry is slot 7, one of whose latent values is NaN */
    int pad;      /* index rows padded by this many valid slots past topk (indices_stride topk + pad) */
    int far;      /* 1: the GPU's cache past 4 GiB (see far_cache_upload) */
} sparse_case;

static int cmp_i32(const void *x, const void *y) {
    const int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}
/* Slot s's `width` values of `rows` (row stride `stride`, 16-bit `t`) times 1 + s / ramp. */
static void ramp_rows(void *rows, int64_t n, int64_t stride, int width, aiter_mla_dtype t, int ramp) {
    int64_t s, d;
    for (s = 0; s < n; s++)
        for (d = 0; d < width; d++)
            aiter_mla_store_f32(rows, s * stride + d, t,
                                aiter_mla_load_f32(rows, s * stride + d, t) * (1.0f + (float)s / (float)ramp));
}

static void run_sparse_case(const sparse_case *c, test_rng *rng) {
    const int T = c->tokens, H = c->heads, K = c->topk, W = K + c->pad;
    const int64_t slots = 3000;
    const int ds = c->cache > 0;
    const aiter_mla_dtype fp8 = c->cache == 2 ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
    const size_t row_bytes = ds ? AITER_MLA_DS_MLA_ROW_BYTES : 576 * 2, qe = aiter_mla_dtype_size(c->q_dtype),
                 oe = aiter_mla_dtype_size(c->o_dtype);
    char what[200];
    int64_t i;
    int t, h;
    snprintf(what, sizeof what, "sparse T=%d H=%d topk=%d stride=%d cache=%s q=%s o=%s%s%s holes=%d num_cu=%d ramp=%d%s%s", T, H, K, W,
             c->cache == 0 ? "bf16" : c->cache == 1 ? "ds_mla-fn" : "ds_mla-fnuz", aiter_mla_dtype_name(c->q_dtype),
             aiter_mla_dtype_name(c->o_dtype), c->with_length ? " topk_length" : "", c->with_sink ? " sink" : "", c->holes,
             c->num_cu, c->ramp, c->nan_slot ? " nan_slot" : "", c->far ? " far" : "");
    unsigned char *cache = (unsigned char *)test_malloc((size_t)slots * row_bytes);
    if (ds) { /* written by the reference writer from random latents */
        uint16_t *kv = (uint16_t *)test_malloc((size_t)slots * 512 * 2), *pe = (uint16_t *)test_malloc((size_t)slots * 64 * 2);
        int64_t *map = (int64_t *)test_malloc((size_t)slots * 8);
        aiter_mla_ds_mla_write_args w;
        fill_random(kv, slots * 512, AITER_MLA_BF16, rng, -1.0f, 1.0f, 1.0f);
        fill_random(pe, slots * 64, AITER_MLA_BF16, rng, -1.0f, 1.0f, 1.0f);
        if (c->ramp) {
            ramp_rows(kv, slots, 512, 512, AITER_MLA_BF16, c->ramp);
            ramp_rows(pe, slots, 64, 64, AITER_MLA_BF16, c->ramp);
        }
        for (i = 0; i < slots; i++) map[i] = i;
        memset(&w, 0, sizeof w);
        w.kv_c = kv;
        w.k_pe = pe;
        w.slot_mapping = map;
        w.kv_cache = cache;
        w.num_blocks = slots;
        w.block_size = 1;
        w.num_tokens = slots;
        w.fp8_dtype = fp8;
        CHECK_STATUS(aiter_mla_ds_mla_write_ref(&w), AITER_MLA_OK, "");
        free(kv);
        free(pe);
        free(map);
    } else {
        fill_random(cache, slots * 576, AITER_MLA_BF16, rng, -1.0f, 1.0f, 1.0f);
        if (c->ramp) ramp_rows(cache, slots, 576, 576, AITER_MLA_BF16, c->ramp);
    }
    int32_t *idx = (int32_t *)test_malloc((size_t)T * W * 4), *len = (int32_t *)test_malloc((size_t)T * 4);
    for (t = 0; t < T; t++) {
        for (i = 0; i < W; i++) {
            int32_t v = rng_int(rng, 0, (int)slots - 1); /* as it is in the padding: valid slots that must not count */
            const int r = i < K ? rng_int(rng, 0, 99) : 100;
            if (r < c->holes) v = -1;                          /* -1 holes */
            else if (r < c->holes + 2) v = (int32_t)slots + r; /* out of range: skipped */
            else if (r < c->holes + 6 && i > 0) v = idx[(int64_t)t * W + i - 1]; /* duplicates */
            idx[(int64_t)t * W + i] = v;
        }
        /* token 0 weighs at least one key: no case is empty rows alone (o all 0; topk 1 with
           holes drew such cases), where any kernel that writes zeros would pass */
        if (t == 0 && (idx[0] < 0 || idx[0] >= slots)) idx[0] = (int32_t)(slots / 2);
        if (c->ramp) qsort(idx + (int64_t)t * W, (size_t)K, 4, cmp_i32);
        len[t] = rng_int(rng, 0, K);
        if (t == 0 && len[0] < 1) len[0] = 1;
        if (t == 1) /* a row with no valid entry */
            for (i = 0; i < K; i++) idx[(int64_t)t * W + i] = -1;
    }
    if (c->nan_slot) { /* latent value 100 of slot 7: an e4m3 NaN code in an fp8_ds_mla row */
        idx[0] = 7;
        if (len[0] < 1) len[0] = 1;
        if (ds) cache[7 * row_bytes + 100] = c->cache == 2 ? 0x80 : 0x7f;
        else aiter_mla_store_f32(cache, 7 * 576 + 100, AITER_MLA_BF16, NAN);
    }
    float sink[128];
    for (h = 0; h < H; h++) sink[h] = h % 5 == 0 ? -INFINITY : h % 7 == 3 ? INFINITY : rng_f32(rng, -2.0f, 6.0f);
    void *q = test_malloc((size_t)T * H * 576 * qe);
    fill_random(q, (int64_t)T * H * 576, c->q_dtype, rng, -1.0f, 1.0f, 1.0f);
    const int64_t no = (int64_t)T * H * 512;
    void *o_ref = test_malloc((size_t)no * oe), *o_gpu = test_malloc((size_t)no * oe);
    float *lse_ref = (float *)test_malloc((size_t)T * H * 4), *lse_gpu = (float *)test_malloc((size_t)T * H * 4);
    float *ml_ref = (float *)test_malloc((size_t)T * H * 4), *ml_gpu = (float *)test_malloc((size_t)T * H * 4);

    const int64_t far_slots = far_units(c->far, (int64_t)row_bytes), far_bytes = far_slots * (int64_t)row_bytes;
    void *d_cache = far_cache_upload(cache, (size_t)slots * row_bytes, far_bytes), *d_q = gpu_malloc((size_t)T * H * 576 * qe),
         *d_o = gpu_malloc((size_t)no * oe);
    int32_t *d_idx = far_ids_upload(idx, (int64_t)T * W, far_slots), *d_len = (int32_t *)gpu_malloc((size_t)T * 4);
    float *d_lse = (float *)gpu_malloc((size_t)T * H * 4), *d_ml = (float *)gpu_malloc((size_t)T * H * 4),
          *d_sink = (float *)gpu_malloc(128 * 4);
    gpu_upload(d_q, q, (size_t)T * H * 576 * qe);
    gpu_upload(d_len, len, (size_t)T * 4);
    gpu_upload(d_sink, sink, 128 * 4);
    gpu_memset(d_o, 0xff, (size_t)no * oe);
    gpu_memset(d_lse, 0xff, (size_t)T * H * 4);
    gpu_memset(d_ml, 0xff, (size_t)T * H * 4);

    aiter_mla_sparse_args a;
    memset(&a, 0, sizeof a);
    a.q = d_q;
    a.kv_cache = d_cache;
    a.num_slots = far_slots + slots;
    a.kv_cache_bytes = (size_t)far_bytes + (size_t)slots * row_bytes; /* the allocation: checked, and taken */
    a.cache_is_ds_mla = ds;
    a.ds_mla_fp8 = fp8;
    a.indices = d_idx;
    a.indices_stride = c->pad ? W : 0;
    a.topk_length = c->with_length ? d_len : NULL;
    a.attn_sink = c->with_sink ? d_sink : NULL;
    a.o = d_o;
    a.lse = d_lse;
    a.max_logits = d_ml;
    a.num_tokens = T;
    a.num_heads = H;
    a.topk = K;
    a.q_dtype = c->q_dtype;
    a.o_dtype = c->o_dtype;
    a.num_cu = c->num_cu;
    a.keys_read_once = (int)((T + H + K) & 1); /* a hint, right or wrong here (rows may share slots): the same rows */
    aiter_mla_kernel kernel = AITER_MLA_KERNEL_NONE;
    CHECK_STATUS(aiter_mla_sparse_attention_kernel(&a, &kernel), AITER_MLA_OK, "");
    CHECK_STATUS(aiter_mla_sparse_attention(&a, g_stream), AITER_MLA_OK, "");
    gpu_sync();
    gpu_download(o_gpu, d_o, (size_t)no * oe);
    gpu_download(lse_gpu, d_lse, (size_t)T * H * 4);
    gpu_download(ml_gpu, d_ml, (size_t)T * H * 4);

    aiter_mla_sparse_args r = a;
    r.q = q;
    r.kv_cache = cache;
    r.num_slots = slots;
    r.kv_cache_bytes = (size_t)slots * row_bytes;
    r.indices = idx;
    r.topk_length = c->with_length ? len : NULL;
    r.attn_sink = c->with_sink ? sink : NULL;
    r.o = o_ref;
    r.lse = lse_ref;
    r.max_logits = ml_ref;
    poison_fill(o_ref, no, c->o_dtype);
    poison_f32(lse_ref, (int64_t)T * H);
    poison_f32(ml_ref, (int64_t)T * H);
    ref_sparse_parallel(&r);
    {
        float *g = (float *)test_malloc((size_t)no * 4), *f = (float *)test_malloc((size_t)no * 4);
        int64_t unwritten = 0;
        to_f32(o_gpu, g, no, c->o_dtype);
        to_f32(o_ref, f, no, c->o_dtype);
        if (c->nan_slot) CHECK(take_nan_rows(what, g, f, lse_gpu, lse_ref, (int64_t)T * H, 512) >= H, "%s: token 0's rows are not NaN", what);
        for (i = 0; i < no; i++) unwritten += g[i] != g[i];
        CHECK(unwritten == 0, "%s: %lld output elements unwritten or NaN", what, (long long)unwritten);
        if (ds) CHECK_CLOSE(what, g, f, no, TOL_FP8_REL, TOL_FP8_COS);
        else CHECK_CLOSE(what, g, f, no, TOL_BF16_REL, TOL_BF16_COS);
        /* TOL_DS_MLA_LSE_ABS, for the kernels that round each dequantised key to bf16 (the
         * warpgroup and AMD matrix-core ones), is a share of sum |q k| x sm_scale on keys of
         * magnitude up to 1: a ramp's keys reach 1 + (slots - 1) / ramp times that. The others
         * scale exact e4m3 products in fp32: SPEC 8's bound. */
        const int rounds_keys = ds && (kernel == AITER_MLA_KERNEL_WGMMA || kernel == AITER_MLA_KERNEL_MFMA);
        const float lse_tol =
            rounds_keys ? TOL_DS_MLA_LSE_ABS * (c->ramp ? 1.0f + (float)(slots - 1) / (float)c->ramp : 1.0f) : TOL_LSE_ABS;
        CHECK_LSE_TOL(what, lse_gpu, lse_ref, (int64_t)T * H, lse_tol);
        CHECK_LSE_TOL(what, ml_gpu, ml_ref, (int64_t)T * H, lse_tol);
        free(g);
        free(f);
    }
    gpu_free(d_cache); gpu_free(d_q); gpu_free(d_o); gpu_free(d_idx); gpu_free(d_len); gpu_free(d_lse); gpu_free(d_ml);
    gpu_free(d_sink);
    free(cache); free(idx); free(len); free(q); free(o_ref); free(o_gpu); free(lse_ref); free(lse_gpu); free(ml_ref); free(ml_gpu);
}

static void test_sparse_attention(test_rng *rng) {
    static const int topks[] = {1, 63, 64, 2048};
    static const int heads[] = {1, 16, 64, 128};
    const int before = testing_failed;
    int ki, hi, cache, tokens;
    sparse_case c;
    for (ki = 0; ki < 4; ki++)
        for (hi = 0; hi < 4; hi++)
            for (cache = 0; cache < 3; cache++)
                for (tokens = 1; tokens <= 2; tokens++) { /* s_q 1 and 2 of a few requests */
                    if (g_quick && (topks[ki] == 2048 || heads[hi] == 64)) continue;
                    memset(&c, 0, sizeof c);
                    c.tokens = tokens * 3;
                    c.heads = heads[hi];
                    c.topk = topks[ki];
                    c.cache = cache;
                    c.q_dtype = (ki + hi + cache) % 4 == 3 ? AITER_MLA_F16 : AITER_MLA_BF16; /* f16: the portable kernel */
                    c.o_dtype = (ki + hi) % 3 == 2 ? AITER_MLA_F32 : AITER_MLA_BF16;
                    c.with_length = (ki + cache + tokens) % 2;
                    c.with_sink = (hi + cache + tokens) % 2;
                    c.holes = topks[ki] == 1 ? 30 : 10;
                    c.num_cu = (ki + hi + tokens) % 3 == 0 ? 0 : (ki + hi + tokens) % 3 == 1 ? 2 : 5;
                    c.pad = (ki + hi + cache) % 3 == 1 ? 7 : 0;
                    run_sparse_case(&c, rng);
                }
    /* 100 heads over fp8_ds_mla: blocks in pairs that share each key tile, the second of 36 rows */
    for (cache = 1; cache <= 2; cache++) {
        memset(&c, 0, sizeof c);
        c.tokens = 5;
        c.heads = 100;
        c.topk = cache == 1 ? 2048 : 63;
        c.cache = cache;
        c.q_dtype = c.o_dtype = AITER_MLA_BF16;
        c.with_length = c.with_sink = 1;
        c.holes = 10;
        c.num_cu = cache == 1 ? 0 : 4;
        run_sparse_case(&c, rng);
    }
    /* rising keys (see test_decode_rising_keys): the 64-row kernel's bf16 (split scheme) and
     * fp8_ds_mla (one-softmax) passes, max_logits from the true maxima */
    for (cache = 0; cache <= 1; cache++)
        for (hi = 2; hi <= 3; hi++) {
            if (g_quick && hi == 2) continue;
            memset(&c, 0, sizeof c);
            c.tokens = 3;
            c.heads = heads[hi];
            c.topk = 2048;
            c.cache = cache;
            c.q_dtype = c.o_dtype = AITER_MLA_BF16;
            c.with_length = hi == 3;
            c.with_sink = cache;
            c.holes = 5;
            c.num_cu = 2;
            c.ramp = 256;
            run_sparse_case(&c, rng);
        }
    printf("sparse attention: %s\n", testing_failed == before ? "ok" : "FAILED");
}

/* ---- sparse index ops, fp8_ds_mla writer, gather, merge ----------------------------------- */
/* Index of the first differing byte, or -1. */
static int64_t first_diff(const void *a, const void *b, size_t n) {
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    size_t i;
    for (i = 0; i < n; i++)
        if (x[i] != y[i]) return (int64_t)i;
    return -1;
}
/* Device copy of a host buffer (at least one byte allocated). */
static void *upload_copy(const void *src, size_t bytes) {
    void *d = gpu_malloc(bytes ? bytes : 1);
    if (bytes) gpu_upload(d, src, bytes);
    return d;
}
/* A host buffer and a device buffer of `bytes` bytes, both filled with `byte`: the
 * reference's output and the kernel's start out identical, so unwritten or overwritten
 * bytes show up in a byte comparison. */
static void *poisoned_pair(size_t bytes, int byte, void **dev) {
    void *h = test_malloc(bytes ? bytes : 1);
    memset(h, byte, bytes ? bytes : 1);
    *dev = gpu_malloc(bytes ? bytes : 1);
    gpu_memset(*dev, byte, bytes ? bytes : 1);
    return h;
}

/* fp8 caches are widened to bf16 exactly, e4m3 subnormals included: a request with one key
 * has softmax weight exactly 1, so o (f32) must equal the key's first 512 values bit for bit
 * (-0 comes out as +0: o is a sum). The key holds every finite code of the format (NaN codes
 * replaced by 0). H = 16 runs the 16-row passes, H = 128 the 64-row ones. */
static void test_decode_fp8_codes(test_rng *rng) {
    static const aiter_mla_dtype kinds[2] = {AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FNUZ};
    static const int heads[2] = {16, 128};
    int kind, hi;
    for (kind = 0; kind < 2; kind++) {
        for (hi = 0; hi < 2; hi++) {
            const aiter_mla_dtype fp8 = kinds[kind];
            const int H = heads[hi];
            int32_t qo[2] = {0, 1}, kvp[2] = {0, 1}, last[1] = {1}, idx[1] = {0};
            uint8_t key[576];
            uint16_t *q = (uint16_t *)test_malloc((size_t)H * 576 * 2);
            float *o = (float *)test_malloc((size_t)H * 512 * 4), *lse = (float *)test_malloc((size_t)H * 4);
            float *lse_ref = (float *)test_malloc((size_t)H * 4);
            aiter_mla_decode_plan_desc pd;
            aiter_mla_decode_plan_info info;
            aiter_mla_decode_args a;
            int64_t bad = 0, first = -1, d, h;
            char what[96];
            for (d = 0; d < 576; d++) {
                const uint8_t c = (uint8_t)((d * 37 + 11) & 255);
                key[d] = aiter_mla_fp8_to_f32(c, fp8) != aiter_mla_fp8_to_f32(c, fp8) ? 0 : c;
            }
            fill_random(q, (int64_t)H * 576, AITER_MLA_BF16, rng, -0.05f, 0.05f, 1.0f);
            memset(&pd, 0, sizeof pd);
            pd.max_batch = 1;
            pd.num_heads = H;
            pd.max_q_len = 1;
            pd.num_cu = gpu_num_cu();
            pd.page_size = 1;
            CHECK_STATUS(aiter_mla_decode_plan_get_info(&pd, &info), AITER_MLA_OK, "");
            int32_t *plan = (int32_t *)test_malloc((size_t)info.plan_ints * 4);
            CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, 1, plan), AITER_MLA_OK, "");
            void *d_q = upload_copy(q, (size_t)H * 576 * 2), *d_key = upload_copy(key, 576);
            int32_t *d_meta = (int32_t *)upload_copy(qo, 8), *d_kvp = (int32_t *)upload_copy(kvp, 8);
            int32_t *d_last = (int32_t *)upload_copy(last, 4), *d_idx = (int32_t *)upload_copy(idx, 4);
            int32_t *d_plan = (int32_t *)upload_copy(plan, (size_t)info.plan_ints * 4);
            float *d_o = (float *)gpu_malloc((size_t)H * 512 * 4), *d_lse = (float *)gpu_malloc((size_t)H * 4);
            void *d_ws = gpu_malloc(info.workspace_bytes ? info.workspace_bytes : 16);
            memset(&a, 0, sizeof a);
            a.q = d_q;
            a.kv_cache = d_key;
            a.kv_dtype = fp8;
            a.kv_scale = 1.0f;
            a.num_pages = 1;
            a.qo_indptr = d_meta;
            a.kv_indptr = d_kvp;
            a.kv_last_page_lens = d_last;
            a.kv_indices = d_idx;
            a.o = d_o;
            a.o_dtype = AITER_MLA_F32;
            a.lse = d_lse;
            a.plan = d_plan;
            a.plan_info = &info;
            a.workspace = d_ws;
            a.workspace_bytes = info.workspace_bytes;
            a.batch = 1;
            a.num_heads = H;
            a.page_size = 1;
            a.sm_scale = 0.1f;
            gpu_memset(d_o, 0xff, (size_t)H * 512 * 4);
            gpu_memset(d_lse, 0xff, (size_t)H * 4);
            CHECK_STATUS(aiter_mla_decode(&a, g_stream), AITER_MLA_OK, "");
            gpu_sync();
            gpu_download(o, d_o, (size_t)H * 512 * 4);
            gpu_download(lse, d_lse, (size_t)H * 4);
            for (h = 0; h < H; h++) {
                double s = 0.0;
                for (d = 0; d < 576; d++) s += (double)ref_load(q, h * 576 + d, AITER_MLA_BF16) * aiter_mla_fp8_to_f32(key[d], fp8);
                lse_ref[h] = (float)(s * 0.1);
                for (d = 0; d < 512; d++) {
                    const float want = aiter_mla_fp8_to_f32(key[d], fp8) + 0.0f;
                    if (memcmp(&o[h * 512 + d], &want, 4) != 0 && first < 0) first = h * 512 + d;
                    bad += memcmp(&o[h * 512 + d], &want, 4) != 0;
                }
            }
            snprintf(what, sizeof what, "fp8 codes %s H=%d", kind ? "e4m3fnuz" : "e4m3fn", H);
            CHECK(bad == 0, "%s: %lld values differ (first: dim %lld, got %g, want %g)", what, (long long)bad, (long long)(first % 512),
                  first >= 0 ? (double)o[first] : 0.0, first >= 0 ? (double)aiter_mla_fp8_to_f32(key[first % 512], fp8) + 0.0 : 0.0);
            CHECK_LSE(what, lse, lse_ref, H);
            gpu_free(d_q); gpu_free(d_key); gpu_free(d_meta); gpu_free(d_kvp); gpu_free(d_last); gpu_free(d_idx);
            gpu_free(d_plan); gpu_free(d_o); gpu_free(d_lse); gpu_free(d_ws);
            free(plan); free(q); free(o); free(lse); free(lse_ref);
        }
    }
}

static void test_sparse_indices_gpu(test_rng *rng) {
    /* shift: elements added to the indices/out base pointers (1 = 4-byte aligned only) */
    static const struct { int64_t T; int topk, prefill, counts, pad_in, pad_out, bs, shift; } cases[] = {
        {0, 64, 0, 1, 0, 0, 64, 0},      {1, 2048, 0, 1, 0, 0, 64, 0},   {1, 1, 1, 1, 0, 0, 64, 0},
        {37, 63, 0, 1, 1, 3, 100, 0},    {37, 6, 0, 1, 2, 2, 64, 0},     {300, 2048, 0, 1, 0, 0, 64, 0},
        {300, 2048, 1, 1, 0, 4, 64, 0},  {129, 100, 1, 0, 0, 0, 64, 1},  {77, 2048, 0, 0, 0, 0, 16, 1},
        {600, 2048, 0, 1, 0, 0, 64, 0},  {2000, 512, 1, 1, 4, 0, 64, 0}, {5, 4096, 0, 1, 0, 0, 1, 0},
        {50, 65, 0, 1, 1, 0, 64, 0},     {61, 512, 0, 0, 0, 0, 64, 1}, /* block size 64 on scalar loads */
    };
    int c;
    for (c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        const int64_t T = g_quick && cases[c].T > 300 ? 300 : cases[c].T;
        const int topk = cases[c].topk, bs = cases[c].bs, shift = cases[c].shift;
        const int64_t in_stride = topk + cases[c].pad_in, out_stride = topk + cases[c].pad_out;
        const int nreq = rng_int(rng, 1, 8), width = rng_int(rng, 1, 2 * topk / bs + 2);
        const size_t in_n = (size_t)(T * in_stride + shift), out_n = (size_t)(T * out_stride + shift);
        int32_t *idx = (int32_t *)test_malloc(in_n * 4 + 4), *req = (int32_t *)test_malloc((size_t)T * 4 + 4);
        int32_t *bt = (int32_t *)test_malloc((size_t)nreq * width * 4), starts[8];
        void *d_out, *d_counts;
        int32_t *ref = (int32_t *)poisoned_pair(out_n * 4, 0x7f, &d_out); /* 0x7f7f7f7f: no slot */
        int32_t *counts_ref = (int32_t *)poisoned_pair((size_t)T * 4, 0x7f, &d_counts);
        int32_t *got = (int32_t *)test_malloc(out_n * 4 + 4), *counts_got = (int32_t *)test_malloc((size_t)T * 4 + 4);
        int64_t i, d;
        char what[160];
        for (i = 0; i < nreq * width; i++) bt[i] = rng_int(rng, 0, 9) == 0 ? -1 : rng_int(rng, 0, 5000);
        bt[0] = INT32_MAX / bs + (bs > 1);                   /* its slots past int32 (-1), or at its edge for bs 1 */
        if (nreq * width > 1) bt[1] = INT32_MAX / bs - 1;    /* its slots just inside int32 */
        for (i = 0; i < nreq; i++) starts[i] = rng_int(rng, 0, 100000);
        starts[0] = INT32_MAX - 1000;                        /* prefill slots past int32: -1 */
        for (i = 0; i < T; i++) req[i] = rng_int(rng, 0, 19) == 0 ? (rng_int(rng, 0, 1) ? -1 : nreq) : rng_int(rng, 0, nreq - 1);
        for (i = 0; i < (int64_t)in_n; i++) idx[i] = rng_int(rng, 0, 7) == 0 ? -1 : rng_int(rng, 0, (width + 1) * bs);
        int32_t *d_idx = (int32_t *)upload_copy(idx, in_n * 4), *d_req = (int32_t *)upload_copy(req, (size_t)T * 4);
        int32_t *d_bt = (int32_t *)upload_copy(bt, (size_t)nreq * width * 4), *d_starts = (int32_t *)upload_copy(starts, sizeof starts);
        aiter_mla_sparse_index_args a;
        memset(&a, 0, sizeof a);
        a.indices = d_idx + shift;
        a.indices_stride = in_stride;
        a.req_id = d_req;
        a.block_table = cases[c].prefill ? NULL : d_bt;
        a.block_table_stride = width;
        a.block_size = bs;
        a.workspace_starts = d_starts;
        a.num_requests = nreq;
        a.num_tokens = T;
        a.topk = topk;
        a.out = (int32_t *)d_out + shift;
        a.out_stride = out_stride;
        a.valid_counts = cases[c].counts ? (int32_t *)d_counts : NULL;
        snprintf(what, sizeof what, "convert_sparse_indices %s T=%lld topk=%d bs=%d strides %lld/%lld shift %d%s",
                 cases[c].prefill ? "prefill" : "decode", (long long)T, topk, bs, (long long)in_stride, (long long)out_stride,
                 shift, cases[c].counts ? " counts" : "");
        CHECK_STATUS(aiter_mla_convert_sparse_indices(&a, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(got, d_out, out_n * 4);
        gpu_download(counts_got, d_counts, (size_t)T * 4);
        a.indices = idx + shift;
        a.req_id = req;
        a.block_table = cases[c].prefill ? NULL : bt;
        a.workspace_starts = starts;
        a.out = ref + shift;
        a.valid_counts = cases[c].counts ? counts_ref : NULL;
        CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&a), AITER_MLA_OK, "");
        d = first_diff(got, ref, out_n * 4);
        CHECK(d < 0, "%s: output differs from the reference at int %lld (got %d, want %d)", what, (long long)(d / 4),
              d >= 0 ? got[d / 4] : 0, d >= 0 ? ref[d / 4] : 0);
        d = first_diff(counts_got, counts_ref, (size_t)T * 4);
        CHECK(d < 0, "%s: valid_counts differ at row %lld", what, (long long)(d / 4));
        gpu_free(d_idx); gpu_free(d_req); gpu_free(d_bt); gpu_free(d_starts); gpu_free(d_out); gpu_free(d_counts);
        free(idx); free(req); free(bt); free(ref); free(counts_ref); free(got); free(counts_got);
    }
}

static void test_filter_prefill_gpu(test_rng *rng) {
    static const struct { int64_t T; int topk, shift; } cases[] = {
        {0, 64, 0}, {1, 1, 0}, {1, 2048, 0}, {37, 33, 0}, {300, 512, 0}, {129, 64, 1}, {4096, 512, 0}, {3, 7, 1},
    };
    int c;
    for (c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        const int64_t T = g_quick && cases[c].T > 300 ? 300 : cases[c].T;
        const int topk = cases[c].topk, shift = cases[c].shift, nreq = rng_int(rng, 1, 6);
        const size_t n = (size_t)(T * topk + shift);
        int32_t *idx = (int32_t *)test_malloc(n * 4 + 4), *req = (int32_t *)test_malloc((size_t)T * 4 + 4), ctx[6];
        int32_t *got_c = (int32_t *)test_malloc(n * 4 + 4), *got_n = (int32_t *)test_malloc(n * 4 + 4);
        void *d_ctx_out, *d_new_out;
        int32_t *ref_c = (int32_t *)poisoned_pair(n * 4, 0x7f, &d_ctx_out), *ref_n = (int32_t *)poisoned_pair(n * 4, 0x7f, &d_new_out);
        int64_t i;
        for (i = 0; i < nreq; i++) ctx[i] = rng_int(rng, 0, 3000);
        if (nreq > 2) ctx[1] = -5; /* a negative context length: -1 in both outputs */
        for (i = 0; i < T; i++) req[i] = rng_int(rng, 0, 15) == 0 ? (rng_int(rng, 0, 1) ? -7 : nreq + 2) : rng_int(rng, 0, nreq - 1);
        for (i = 0; i < (int64_t)n; i++) idx[i] = rng_int(rng, 0, 6) == 0 ? -1 : rng_int(rng, 0, 5000);
        int32_t *d_idx = (int32_t *)upload_copy(idx, n * 4), *d_req = (int32_t *)upload_copy(req, (size_t)T * 4);
        int32_t *d_ctx = (int32_t *)upload_copy(ctx, sizeof ctx);
        aiter_mla_filter_prefill_args f;
        memset(&f, 0, sizeof f);
        f.indices = d_idx + shift;
        f.req_id = d_req;
        f.ctx_lens = d_ctx;
        f.num_requests = nreq;
        f.num_tokens = T;
        f.topk = topk;
        f.context_out = (int32_t *)d_ctx_out + shift;
        f.new_out = (int32_t *)d_new_out + shift;
        CHECK_STATUS(aiter_mla_filter_prefill_indices(&f, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(got_c, d_ctx_out, n * 4);
        gpu_download(got_n, d_new_out, n * 4);
        f.indices = idx + shift;
        f.req_id = req;
        f.ctx_lens = ctx;
        f.context_out = ref_c + shift;
        f.new_out = ref_n + shift;
        CHECK_STATUS(aiter_mla_filter_prefill_indices_ref(&f), AITER_MLA_OK, "");
        CHECK(first_diff(got_c, ref_c, n * 4) < 0 && first_diff(got_n, ref_n, n * 4) < 0,
              "filter_prefill_indices T=%lld topk=%d shift %d: outputs differ from the reference (context at byte %lld, new at %lld)",
              (long long)T, topk, shift, (long long)first_diff(got_c, ref_c, n * 4), (long long)first_diff(got_n, ref_n, n * 4));
        gpu_free(d_idx); gpu_free(d_req); gpu_free(d_ctx); gpu_free(d_ctx_out); gpu_free(d_new_out);
        free(idx); free(req); free(got_c); free(got_n); free(ref_c); free(ref_n);
    }
}

/* kv_c values of token rows, group by group at magnitudes 2^-12 .. 2^8 (one group of the
 * first token all zero), and rope values, stored as dtype t in rows of `stride`. */
static void fill_ds_mla_source(void *kvc, int64_t kvc_stride, void *kpe, int64_t kpe_stride, int64_t T, aiter_mla_dtype t,
                               test_rng *rng) {
    int64_t i;
    int g, k;
    for (i = 0; i < T; i++) {
        for (g = 0; g < 4; g++) {
            const float amp = i == 0 && g == 2 ? 0.0f : (float)ldexp(1.0, rng_int(rng, -12, 8));
            for (k = 0; k < 128; k++) aiter_mla_store_f32(kvc, i * kvc_stride + g * 128 + k, t, amp == 0.0f ? 0.0f : rng_f32(rng, -amp, amp));
        }
        for (k = 0; k < 64; k++) aiter_mla_store_f32(kpe, i * kpe_stride + k, t, rng_f32(rng, -3.0f, 3.0f));
    }
}

static void test_ds_mla_write_gpu(test_rng *rng) {
    /* layout 0: rows of 576 with k_pe inside them (vLLM's kv_c | k_pe view); 1: separate
     * contiguous tensors; 2: odd strides (scalar path); 3: cache base 4 bytes off 16 */
    static const int64_t sizes[] = {0, 1, 37, 2048, 300};
    int v, n = 0;
    for (v = 0; v < 2 * 2 * 2 * 4; v++) {
        const int fnuz = v & 1, pow2 = (v >> 1) & 1, f16 = (v >> 2) & 1, layout = v >> 3;
        const aiter_mla_dtype src = f16 ? AITER_MLA_F16 : AITER_MLA_BF16, fp8 = fnuz ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
        const int64_t T = sizes[n++ % 5], bs = 16, blocks = (T + 40) / bs + 1, slots = blocks * bs;
        const int64_t kvc_stride = layout == 0 ? 576 : layout == 2 ? 517 : 512, kpe_stride = layout == 0 ? 576 : layout == 2 ? 67 : 64;
        const size_t cache_off = layout == 3 ? 4 : 0, cache_bytes = (size_t)slots * 656 + cache_off;
        if (g_quick && T > 300) continue;
        void *kvc = test_malloc((size_t)(T * kvc_stride + 1) * 2), *kpe_own = test_malloc((size_t)(T * kpe_stride + 1) * 2);
        int64_t *slot = (int64_t *)test_malloc((size_t)T * 8 + 8), i;
        int32_t *perm = (int32_t *)test_malloc((size_t)slots * 4);
        void *d_cache;
        unsigned char *ref = (unsigned char *)poisoned_pair(cache_bytes, 0xff, &d_cache), *got = (unsigned char *)test_malloc(cache_bytes);
        fill_ds_mla_source(kvc, kvc_stride, layout == 0 ? (char *)kvc + 1024 : kpe_own, kpe_stride, T, src, rng);
        for (i = 0; i < slots; i++) perm[i] = (int32_t)i;
        rng_shuffle_i32(rng, perm, (int)slots);
        for (i = 0; i < T; i++) slot[i] = i % 13 == 5 ? -1 : i % 17 == 9 ? slots + i : perm[i]; /* padding, past the cache */
        void *d_kvc = upload_copy(kvc, (size_t)(T * kvc_stride) * 2), *d_kpe = upload_copy(kpe_own, (size_t)(T * kpe_stride) * 2);
        int64_t *d_slot = (int64_t *)upload_copy(slot, (size_t)T * 8);
        aiter_mla_ds_mla_write_args w;
        memset(&w, 0, sizeof w);
        w.kv_c = d_kvc;
        w.kv_c_stride = kvc_stride;
        w.k_pe = layout == 0 ? (const void *)((const char *)d_kvc + 1024) : d_kpe;
        w.k_pe_stride = kpe_stride;
        w.slot_mapping = d_slot;
        w.kv_cache = (char *)d_cache + cache_off;
        w.num_blocks = blocks;
        w.block_size = (int)bs;
        w.num_tokens = T;
        w.src_dtype = src;
        w.fp8_dtype = fp8;
        w.fp8_max = fnuz && pow2 ? 224.0f : 0.0f; /* vLLM's headroom on gfx942 */
        w.pow2_scales = pow2;
        CHECK_STATUS(aiter_mla_ds_mla_write(&w, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(got, d_cache, cache_bytes);
        w.kv_c = kvc;
        w.k_pe = layout == 0 ? (const void *)((const char *)kvc + 1024) : kpe_own;
        w.slot_mapping = slot;
        w.kv_cache = ref + cache_off;
        CHECK_STATUS(aiter_mla_ds_mla_write_ref(&w), AITER_MLA_OK, "");
        {
            const int64_t d = first_diff(got, ref, cache_bytes);
            CHECK(d < 0, "ds_mla_write T=%lld %s %s%s layout %d: cache differs at byte %lld (slot %lld, byte %lld of the row: got %02x, want %02x)",
                  (long long)T, aiter_mla_dtype_name(src), aiter_mla_dtype_name(fp8), pow2 ? " pow2" : "", layout, (long long)d,
                  d >= 0 ? (long long)((d - (int64_t)cache_off) / 656) : -1LL, d >= 0 ? (long long)((d - (int64_t)cache_off) % 656) : -1LL,
                  d >= 0 ? got[d] : 0, d >= 0 ? ref[d] : 0);
        }
        gpu_free(d_kvc); gpu_free(d_kpe); gpu_free(d_slot); gpu_free(d_cache);
        free(kvc); free(kpe_own); free(slot); free(perm); free(ref); free(got);
    }
}

/* The writers' fp8 encoding against the header's, code by code: every bf16 value of
 * magnitude up to the format's max, NaNs included, goes through the fp8_ds_mla writer with
 * its group scale pinned to 1 (each group of 128 holds the max itself), so the cache holds
 * fp8(x) of each. Covers rounding ties, subnormals, negatives that round to zero (e4m3fn
 * 0x80, fnuz 0x00) and NaN of either sign (0x7f / 0x80): the GPU may use a hardware converter. */
static void test_fp8_encode_gpu(test_rng *rng) {
    int v;
    for (v = 0; v < 4; v++) {
        const int fnuz = v & 1, pow2 = v >> 1;
        const aiter_mla_dtype fp8 = fnuz ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
        const float fp8_max = aiter_mla_fp8_max(fp8);
        uint16_t *codes = (uint16_t *)test_malloc(65536 * 2);
        int64_t n = 0, T, i, k;
        uint32_t c;
        for (c = 0; c < 65536; c++) {
            const float x = aiter_mla_bf16_to_f32((uint16_t)c);
            if (x != x || fabsf(x) <= fp8_max) codes[n++] = (uint16_t)c;
        }
        T = (n + 4 * 127 - 1) / (4 * 127);
        uint16_t *kvc = (uint16_t *)test_malloc((size_t)T * 512 * 2), *kpe = (uint16_t *)test_malloc((size_t)T * 64 * 2);
        int64_t *slot = (int64_t *)test_malloc((size_t)T * 8);
        for (i = 0, k = 0; i < T * 512; i++) /* value 0 of each group: +-max, so the scale is 1 */
            kvc[i] = i % 128 == 0 ? aiter_mla_f32_to_bf16(rng_int(rng, 0, 1) ? fp8_max : -fp8_max)
                                  : k < n ? codes[k++] : aiter_mla_f32_to_bf16(rng_f32(rng, -1.0f, 1.0f));
        for (i = 0; i < T * 64; i++) kpe[i] = aiter_mla_f32_to_bf16(rng_f32(rng, -3.0f, 3.0f));
        for (i = 0; i < T; i++) slot[i] = T - 1 - i;
        const size_t cache_bytes = (size_t)T * 656;
        void *d_cache;
        unsigned char *ref = (unsigned char *)poisoned_pair(cache_bytes, 0xa5, &d_cache), *got = (unsigned char *)test_malloc(cache_bytes);
        void *d_kvc = upload_copy(kvc, (size_t)T * 512 * 2), *d_kpe = upload_copy(kpe, (size_t)T * 64 * 2);
        int64_t *d_slot = (int64_t *)upload_copy(slot, (size_t)T * 8);
        aiter_mla_ds_mla_write_args w;
        memset(&w, 0, sizeof w);
        w.kv_c = d_kvc;
        w.kv_c_stride = 512;
        w.k_pe = d_kpe;
        w.k_pe_stride = 64;
        w.slot_mapping = d_slot;
        w.kv_cache = d_cache;
        w.num_blocks = T;
        w.block_size = 1;
        w.num_tokens = T;
        w.src_dtype = AITER_MLA_BF16;
        w.fp8_dtype = fp8;
        w.pow2_scales = pow2;
        CHECK_STATUS(aiter_mla_ds_mla_write(&w, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(got, d_cache, cache_bytes);
        w.kv_c = kvc;
        w.k_pe = kpe;
        w.slot_mapping = slot;
        w.kv_cache = ref;
        CHECK_STATUS(aiter_mla_ds_mla_write_ref(&w), AITER_MLA_OK, "");
        for (i = 0; i < T * 4; i++) { /* the scales really are 1, so the codes are fp8(x) */
            float s;
            memcpy(&s, ref + i / 4 * 656 + 512 + i % 4 * 4, 4);
            CHECK(s == 1.0f, "fp8 encode %s: scale %lld of row %lld is %g, not 1", aiter_mla_dtype_name(fp8), (long long)(i % 4),
                  (long long)(i / 4), s);
        }
        {
            const int64_t d = first_diff(got, ref, cache_bytes);
            const int64_t row = d >= 0 ? d / 656 : 0, b = d >= 0 ? d % 656 : 0, src = (T - 1 - row) * 512 + b;
            CHECK(d < 0, "fp8 encode %s%s: byte %lld of slot %lld differs: got %02x, want %02x (bf16 source %04x)",
                  aiter_mla_dtype_name(fp8), pow2 ? " pow2" : "", (long long)b, (long long)row, d >= 0 ? got[d] : 0,
                  d >= 0 ? ref[d] : 0, d >= 0 && b < 512 ? kvc[src] : 0);
        }
        gpu_free(d_kvc); gpu_free(d_kpe); gpu_free(d_slot); gpu_free(d_cache);
        free(codes); free(kvc); free(kpe); free(slot); free(ref); free(got);
    }
}

/* Case (f, o) of the paged gather: cache format f (16-bit, fp8 per tensor, fp8_ds_mla of both
 * flavours), output type o; its block size, size and alignment follow from n. far: the cache past
 * 4 GiB (far_cache_upload). */
static void run_gather_cache_case(int f, int o, int n, int far, test_rng *rng) {
    static const aiter_mla_dtype fmts[] = {AITER_MLA_BF16, AITER_MLA_F16, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FNUZ,
                                           AITER_MLA_DTYPE_DEFAULT, AITER_MLA_DTYPE_COUNT};
    static const aiter_mla_dtype outs[] = {AITER_MLA_BF16, AITER_MLA_F16, AITER_MLA_F32};
    const int ds = fmts[f] == AITER_MLA_DTYPE_DEFAULT || fmts[f] == AITER_MLA_DTYPE_COUNT;
    const aiter_mla_dtype ds_fp8 = fmts[f] == AITER_MLA_DTYPE_COUNT ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
    const aiter_mla_dtype cache_t = ds ? AITER_MLA_BF16 : fmts[f], out_t = outs[o];
    const int big = n % 4 == 1 && !g_quick, misaligned = n % 5 == 3; /* misaligned: out 1 element off 16 bytes */
    const int B = big ? 8 : 5, bs = n % 3 == 0 ? 1 : n % 3 == 1 ? 16 : 64, chunk = big ? 256 : 37;
    const int width = (big ? 1100 : 300) / bs + 2;
    const int64_t blocks = (int64_t)B * width / 2 + 3, slots = blocks * bs;
    const float scale = dtype_is_fp8(cache_t) ? 0.03f : 0.0f;
    const size_t row_bytes = ds ? 656 : 576 * aiter_mla_dtype_size(cache_t), oe = aiter_mla_dtype_size(out_t);
    void *cache = test_malloc(row_bytes * (size_t)slots);
    int32_t *bt = (int32_t *)test_malloc((size_t)B * width * 4), ctx[8], starts[8], cu[9];
    int64_t i;
    int b, c;
    if (ds) {
        uint16_t *src = (uint16_t *)test_malloc((size_t)slots * 576 * 2);
        int64_t *sl = (int64_t *)test_malloc((size_t)slots * 8);
        aiter_mla_ds_mla_write_args w;
        fill_ds_mla_source(src, 576, src + 512, 576, slots, AITER_MLA_BF16, rng);
        for (i = 0; i < slots; i++) sl[i] = i;
        memset(&w, 0, sizeof w);
        w.kv_c = src;
        w.kv_c_stride = 576;
        w.k_pe = src + 512;
        w.k_pe_stride = 576;
        w.slot_mapping = sl;
        w.kv_cache = cache;
        w.num_blocks = blocks;
        w.block_size = bs;
        w.num_tokens = slots;
        w.fp8_dtype = ds_fp8;
        w.pow2_scales = n % 2;
        CHECK_STATUS(aiter_mla_ds_mla_write_ref(&w), AITER_MLA_OK, "");
        free(src);
        free(sl);
    } else {
        fill_random(cache, slots * 576, cache_t, rng, -2.0f, 2.0f, scale);
    }
    for (i = 0; i < (int64_t)B * width; i++) bt[i] = rng_int(rng, 0, 11) == 0 ? -1 : rng_int(rng, 0, (int)blocks - 1);
    bt[1] = -1;                /* request 0, second block: absent */
    bt[2] = (int32_t)blocks;   /* third block: out of range */
    for (b = 0; b < B; b++) ctx[b] = rng_int(rng, 0, width * bs + bs); /* some run past the table */
    ctx[0] = width * bs;
    if (B > 3) {
        ctx[1] = 0;
        ctx[2] = 1;
        ctx[3] = chunk + 1;
    }
    const int64_t far_blocks = far_units(far, (int64_t)row_bytes * bs);
    void *d_cache = far_cache_upload(cache, row_bytes * (size_t)slots, far_blocks * (int64_t)row_bytes * bs);
    int32_t *d_bt = far_ids_upload(bt, (int64_t)B * width, far_blocks);
    int32_t *d_meta = (int32_t *)gpu_malloc(sizeof cu + sizeof starts);
    for (c = 0; c * chunk < width * bs + bs; c++) { /* every chunk of the contexts */
        int64_t rows, d;
        cu[0] = 0;
        for (b = 0; b < B; b++) {
            const int lo = c * chunk, hi = ctx[b] < (c + 1) * chunk ? ctx[b] : (c + 1) * chunk;
            starts[b] = lo;
            cu[b + 1] = cu[b] + (hi > lo ? hi - lo : 0);
        }
        rows = cu[B] + 3; /* three spare rows must stay poisoned */
        const size_t out_bytes = (size_t)rows * 576 * oe + (misaligned ? oe : 0);
        void *d_out;
        unsigned char *ref = (unsigned char *)poisoned_pair(out_bytes, 0xff, &d_out), *got = (unsigned char *)test_malloc(out_bytes);
        gpu_upload(d_meta, cu, sizeof cu);
        gpu_upload(d_meta + 9, starts, sizeof starts);
        aiter_mla_gather_cache_args g;
        memset(&g, 0, sizeof g);
        g.kv_cache = d_cache;
        g.num_blocks = far_blocks + blocks;
        g.block_size = bs;
        g.cache_dtype = ds ? AITER_MLA_DTYPE_DEFAULT : cache_t;
        g.scale = scale;
        g.cache_is_ds_mla = ds;
        g.ds_mla_fp8 = ds_fp8;
        g.block_table = d_bt;
        g.block_table_stride = width;
        g.cu_out_rows = d_meta;
        g.seq_starts = c == 0 && n % 2 ? NULL : d_meta + 9; /* NULL: from position 0 */
        g.batch = B;
        g.out = (char *)d_out + (misaligned ? oe : 0);
        g.out_rows = rows;
        g.out_dtype = out_t;
        CHECK_STATUS(aiter_mla_gather_cache(&g, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(got, d_out, out_bytes);
        g.kv_cache = cache;
        g.num_blocks = blocks;
        g.block_table = bt;
        g.cu_out_rows = cu;
        g.seq_starts = g.seq_starts ? starts : NULL;
        g.out = ref + (misaligned ? oe : 0);
        CHECK_STATUS(aiter_mla_gather_cache_ref(&g), AITER_MLA_OK, "");
        d = first_diff(got, ref, out_bytes);
        CHECK(d < 0, "gather_cache %s%s -> %s bs=%d chunk %d (%lld rows)%s%s: output differs at byte %lld (row %lld)",
              ds ? "fp8_ds_mla " : "", aiter_mla_dtype_name(ds ? ds_fp8 : cache_t), aiter_mla_dtype_name(out_t), bs, c,
              (long long)cu[B], misaligned ? " misaligned" : "", far ? " far" : "", (long long)d,
              d >= 0 ? (long long)(d / (576 * (int64_t)oe)) : -1LL);
        gpu_free(d_out);
        free(ref);
        free(got);
    }
    gpu_free(d_cache); gpu_free(d_bt); gpu_free(d_meta);
    free(cache); free(bt);
}
static void test_gather_cache_gpu(test_rng *rng) {
    int f, o, n = 0;
    for (f = 0; f < 6; f++)
        for (o = 0; o < 3; o++, n++) run_gather_cache_case(f, o, n, 0, rng);
    /* device arrays the host cannot check are data: a non-monotone cu_out_rows and rows
     * beyond out_rows leave everything outside [0, out_rows) untouched */
    {
        int32_t cu[4] = {0, 50, 20, 90}, bt[3 * 4] = {0, 1, 2, 3, 3, 2, 1, 0, -1, 4, 2, 1}, starts[3] = {0, -40, 7};
        const int64_t rows = 60, guard = 8;
        uint16_t *cache = (uint16_t *)test_malloc(4 * 16 * 576 * 2), *got = (uint16_t *)test_malloc((size_t)(rows + guard) * 576 * 2);
        int64_t i, bad = 0;
        fill_random(cache, 4 * 16 * 576, AITER_MLA_BF16, rng, -1.0f, 1.0f, 0.0f);
        void *d_cache = upload_copy(cache, 4 * 16 * 576 * 2), *d_out = gpu_malloc((size_t)(rows + guard) * 576 * 2);
        int32_t *d_cu = (int32_t *)upload_copy(cu, sizeof cu), *d_bt = (int32_t *)upload_copy(bt, sizeof bt);
        int32_t *d_st = (int32_t *)upload_copy(starts, sizeof starts);
        gpu_memset(d_out, 0xff, (size_t)(rows + guard) * 576 * 2);
        aiter_mla_gather_cache_args g;
        memset(&g, 0, sizeof g);
        g.kv_cache = d_cache;
        g.num_blocks = 4;
        g.block_size = 16;
        g.block_table = d_bt;
        g.block_table_stride = 4;
        g.cu_out_rows = d_cu;
        g.seq_starts = d_st;
        g.batch = 3;
        g.out = d_out;
        g.out_rows = rows;
        CHECK_STATUS(aiter_mla_gather_cache(&g, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(got, d_out, (size_t)(rows + guard) * 576 * 2);
        for (i = rows * 576; i < (rows + guard) * 576; i++) bad += got[i] != 0xffff;
        CHECK(bad == 0, "gather_cache with bad device metadata wrote %lld values past out_rows", (long long)bad);
        gpu_free(d_cache); gpu_free(d_out); gpu_free(d_cu); gpu_free(d_bt); gpu_free(d_st);
        free(cache); free(got);
    }
}

/* ---- DeepSeek V4 MODEL1 writer and gather ------------------------------------------------- */
/* Token rows of 512 values as dtype t (row stride `stride`): nope groups of 64 at
 * magnitudes 2^-16 .. 2^10 (one group of the first token all zero, one value of the second
 * token +inf and one NaN), then rope values. */
static void fill_v4_source(void *kv, int64_t stride, int64_t T, aiter_mla_dtype t, test_rng *rng) {
    int64_t i;
    int g, k;
    for (i = 0; i < T; i++) {
        for (g = 0; g < 7; g++) {
            const float amp = i == 0 && g == 3 ? 0.0f : (float)ldexp(1.0, rng_int(rng, -16, 10));
            for (k = 0; k < 64; k++) aiter_mla_store_f32(kv, i * stride + g * 64 + k, t, amp == 0.0f ? 0.0f : rng_f32(rng, -amp, amp));
        }
        for (k = 0; k < 64; k++) aiter_mla_store_f32(kv, i * stride + 448 + k, t, rng_f32(rng, -3.0f, 3.0f));
    }
    if (T > 1) {
        aiter_mla_store_f32(kv, stride + 5, t, INFINITY);
        aiter_mla_store_f32(kv, stride + 200, t, NAN);
    }
}

static void test_v4_cache_write_gpu(test_rng *rng) {
    /* layout 0: contiguous rows, default page stride; 1: row stride 576 and a page stride
     * with padding; 2: odd row stride (scalar path); 3: cache base 4 bytes off 16 */
    static const int64_t sizes[] = {0, 1, 37, 2048, 300};
    static const int bss[] = {64, 1, 16, 3};
    int v, n = 0;
    for (v = 0; v < 2 * 2 * 2 * 4; v++) {
        const int fnuz = v & 1, headroom = (v >> 1) & 1, f16 = (v >> 2) & 1, layout = v >> 3;
        const aiter_mla_dtype src = f16 ? AITER_MLA_F16 : AITER_MLA_BF16, fp8 = fnuz ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
        const int64_t T = sizes[n++ % 5], bs = bss[v % 4], blocks = (T + 40) / bs + 1, slots = blocks * bs;
        const int64_t stride = layout == 1 ? 576 : layout == 2 ? 517 : 512;
        const int64_t page = aiter_mla_v4_page_bytes((int)bs) + (layout == 1 ? 576 : 0);
        const size_t cache_off = layout == 3 ? 4 : 0, cache_bytes = (size_t)(blocks * page) + cache_off;
        if (g_quick && T > 300) continue;
        void *kv = test_malloc((size_t)(T * stride + 1) * 2);
        int64_t *slot = (int64_t *)test_malloc((size_t)T * 8 + 8), i;
        int32_t *perm = (int32_t *)test_malloc((size_t)slots * 4);
        void *d_cache;
        unsigned char *ref = (unsigned char *)poisoned_pair(cache_bytes, 0xa5, &d_cache), *got = (unsigned char *)test_malloc(cache_bytes);
        fill_v4_source(kv, stride, T, src, rng);
        for (i = 0; i < slots; i++) perm[i] = (int32_t)i;
        rng_shuffle_i32(rng, perm, (int)slots);
        for (i = 0; i < T; i++) slot[i] = i % 13 == 5 ? -1 : i % 17 == 9 ? slots + i : perm[i]; /* padding, past the cache */
        void *d_kv = upload_copy(kv, (size_t)(T * stride) * 2);
        int64_t *d_slot = (int64_t *)upload_copy(slot, (size_t)T * 8);
        aiter_mla_v4_cache_write_args w;
        memset(&w, 0, sizeof w);
        w.kv = d_kv;
        w.kv_stride = stride;
        w.slot_mapping = d_slot;
        w.kv_cache = (char *)d_cache + cache_off;
        w.num_blocks = blocks;
        w.block_size = (int)bs;
        w.page_stride_bytes = layout == 1 ? page : 0;
        w.num_tokens = T;
        w.src_dtype = src;
        w.fp8_dtype = fp8;
        w.fp8_max = headroom ? (fnuz ? 224.0f : 400.0f) : 0.0f;
        CHECK_STATUS(aiter_mla_v4_cache_write(&w, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(got, d_cache, cache_bytes);
        w.kv = kv;
        w.slot_mapping = slot;
        w.kv_cache = ref + cache_off;
        CHECK_STATUS(aiter_mla_v4_cache_write_ref(&w), AITER_MLA_OK, "");
        {
            const int64_t d = first_diff(got, ref, cache_bytes);
            CHECK(d < 0, "v4_cache_write T=%lld bs=%lld %s %s fp8_max %g layout %d: cache differs at byte %lld (page %lld, byte %lld: got %02x, want %02x)",
                  (long long)T, (long long)bs, aiter_mla_dtype_name(src), aiter_mla_dtype_name(fp8), w.fp8_max, layout, (long long)d,
                  d >= 0 ? (long long)((d - (int64_t)cache_off) / page) : -1LL, d >= 0 ? (long long)((d - (int64_t)cache_off) % page) : -1LL,
                  d >= 0 ? got[d] : 0, d >= 0 ? ref[d] : 0);
        }
        gpu_free(d_kv); gpu_free(d_slot); gpu_free(d_cache);
        free(kv); free(slot); free(perm); free(ref); free(got);
    }
}

/* Case n of the V4 gather (its output type, fp8 flavour, block size, padding, lengths and
 * alignment follow from n); far: the cache past 4 GiB (far_cache_upload). */
static void run_v4_gather_case(int n, int far, test_rng *rng) {
    static const aiter_mla_dtype outs[] = {AITER_MLA_BF16, AITER_MLA_F16, AITER_MLA_F32};
    const aiter_mla_dtype out_t = outs[n % 3], fp8 = n % 2 ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
    const int big = n % 4 == 1 && !g_quick, misaligned = n % 5 == 3; /* misaligned: out 1 element off 16 bytes */
    const int padded = n % 3 == 2;                                  /* page stride with padding (still 16-byte multiple) */
    const int B = big ? 8 : 5, bs = n % 4 == 0 ? 64 : n % 4 == 1 ? 2 : n % 4 == 2 ? 16 : 3;
    const int width = (big ? 1100 : 300) / bs + 2;
    const int64_t blocks = (int64_t)B * width / 2 + 3, slots = blocks * bs;
    const int64_t page = aiter_mla_v4_page_bytes(bs) + (padded ? 576 : 0);
    const size_t oe = aiter_mla_dtype_size(out_t);
    unsigned char *cache = (unsigned char *)test_malloc((size_t)(blocks * page));
    int32_t *bt = (int32_t *)test_malloc((size_t)B * width * 4), seq[8], gl[8];
    int64_t i, out_rows, offset = n % 2 ? 7 : 0, d;
    int b, use_gl = n % 3 != 0;
    memset(cache, 0, (size_t)(blocks * page));
    {
        uint16_t *src = (uint16_t *)test_malloc((size_t)slots * 512 * 2);
        int64_t *sl = (int64_t *)test_malloc((size_t)slots * 8);
        aiter_mla_v4_cache_write_args w;
        fill_v4_source(src, 512, slots, AITER_MLA_BF16, rng);
        for (i = 0; i < slots; i++) sl[i] = i;
        memset(&w, 0, sizeof w);
        w.kv = src;
        w.slot_mapping = sl;
        w.kv_cache = cache;
        w.num_blocks = blocks;
        w.block_size = bs;
        w.page_stride_bytes = page;
        w.num_tokens = slots;
        w.fp8_dtype = fp8;
        CHECK_STATUS(aiter_mla_v4_cache_write_ref(&w), AITER_MLA_OK, "");
        free(src);
        free(sl);
    }
    for (i = 0; i < (int64_t)B * width; i++) bt[i] = rng_int(rng, 0, 11) == 0 ? -1 : rng_int(rng, 0, (int)blocks - 1);
    bt[1] = -1;              /* request 0, second block: absent */
    bt[2] = (int32_t)blocks; /* third block: out of range */
    out_rows = 0;
    for (b = 0; b < B; b++) {
        seq[b] = rng_int(rng, 0, width * bs + bs); /* some run past the table */
        gl[b] = use_gl ? rng_int(rng, 0, seq[b]) : seq[b];
        if (gl[b] > out_rows) out_rows = gl[b];
    }
    seq[0] = width * bs;
    gl[0] = use_gl ? seq[0] / 2 : seq[0];
    if (gl[0] > out_rows) out_rows = gl[0];
    seq[1] = 0;
    gl[1] = 0;
    out_rows += offset + 3; /* rows past each request's gather_len must stay poisoned */
    {
        const size_t out_bytes = (size_t)(B * out_rows * 512) * oe + (misaligned ? oe : 0);
        void *d_out;
        unsigned char *ref = (unsigned char *)poisoned_pair(out_bytes, 0xff, &d_out), *got = (unsigned char *)test_malloc(out_bytes);
        const int64_t far_blocks = far_units(far, page);
        void *d_cache = far_cache_upload(cache, (size_t)(blocks * page), far_blocks * page);
        int32_t *d_bt = far_ids_upload(bt, (int64_t)B * width, far_blocks);
        int32_t *d_meta = (int32_t *)upload_copy(seq, sizeof seq);
        int32_t *d_gl = (int32_t *)upload_copy(gl, sizeof gl);
        aiter_mla_v4_gather_args g;
        memset(&g, 0, sizeof g);
        g.kv_cache = d_cache;
        g.num_blocks = far_blocks + blocks;
        g.block_size = bs;
        g.page_stride_bytes = padded ? page : 0;
        g.fp8_dtype = fp8;
        g.block_table = d_bt;
        g.block_table_stride = width;
        g.seq_lens = d_meta;
        g.gather_lens = use_gl ? d_gl : NULL;
        g.batch = B;
        g.out = (char *)d_out + (misaligned ? oe : 0);
        g.out_rows = out_rows;
        g.offset = offset;
        g.out_dtype = out_t;
        CHECK_STATUS(aiter_mla_v4_gather(&g, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(got, d_out, out_bytes);
        g.kv_cache = cache;
        g.num_blocks = blocks;
        g.block_table = bt;
        g.seq_lens = seq;
        g.gather_lens = use_gl ? gl : NULL;
        g.out = ref + (misaligned ? oe : 0);
        CHECK_STATUS(aiter_mla_v4_gather_ref(&g), AITER_MLA_OK, "");
        d = first_diff(got, ref, out_bytes);
        CHECK(d < 0, "v4_gather %s -> %s bs=%d B=%d offset %lld%s%s%s%s: output differs at byte %lld (row %lld)",
              aiter_mla_dtype_name(fp8), aiter_mla_dtype_name(out_t), bs, B, (long long)offset, use_gl ? " gather_lens" : "",
              padded ? " padded pages" : "", misaligned ? " misaligned" : "", far ? " far" : "", (long long)d,
              d >= 0 ? (long long)(d / (512 * (int64_t)oe)) : -1LL);
        /* lengths only the reference rejects: the GPU skips those requests */
        if (B > 3) {
            int32_t bad_seq[8], bad_gl[8];
            memcpy(bad_seq, seq, sizeof seq);
            memcpy(bad_gl, gl, sizeof gl);
            bad_seq[2] = -5;
            bad_gl[3] = seq[3] + 1;
            gpu_upload(d_meta, bad_seq, sizeof bad_seq);
            gpu_upload(d_gl, bad_gl, sizeof bad_gl);
            gpu_memset(d_out, 0xff, out_bytes);
            g.kv_cache = d_cache;
            g.num_blocks = far_blocks + blocks;
            g.block_table = d_bt;
            g.seq_lens = d_meta;
            g.gather_lens = d_gl;
            g.out = (char *)d_out + (misaligned ? oe : 0);
            CHECK_STATUS(aiter_mla_v4_gather(&g, g_stream), AITER_MLA_OK, "");
            gpu_sync();
            gpu_download(got, d_out, out_bytes);
            /* the reference's output with requests 2 and 3 gathering nothing */
            memset(ref, 0xff, out_bytes);
            bad_seq[2] = 0;
            bad_gl[2] = 0;
            bad_gl[3] = 0;
            g.kv_cache = cache;
            g.num_blocks = blocks;
            g.block_table = bt;
            g.seq_lens = bad_seq;
            g.gather_lens = bad_gl;
            g.out = ref + (misaligned ? oe : 0);
            CHECK_STATUS(aiter_mla_v4_gather_ref(&g), AITER_MLA_OK, "");
            d = first_diff(got, ref, out_bytes);
            CHECK(d < 0, "v4_gather with invalid lengths, case %d%s: output differs at byte %lld (row %lld)", n, far ? " far" : "", (long long)d,
                  d >= 0 ? (long long)(d / (512 * (int64_t)oe)) : -1LL);
        }
        gpu_free(d_out); gpu_free(d_cache); gpu_free(d_bt); gpu_free(d_meta); gpu_free(d_gl);
        free(ref); free(got);
    }
    free(cache); free(bt);
}
static void test_v4_gather_gpu(test_rng *rng) {
    int n;
    for (n = 0; n < 12; n++) run_v4_gather_case(n, 0, rng);
}

/* ---- V4 attention ---------------------------------------------------------------------- */
/* The reference, one token per slice: token t's part of every per-token array. */
static void v4_keys_slice(aiter_mla_v4_keys *k, int64_t t) {
    if (!k->indices) return;
    if (k->indptr) k->indptr += t;
    else {
        k->indices += t * k->indices_stride;
        if (k->lens) k->lens += t;
    }
}
static aiter_mla_status ref_v4_slice(const void *args, int64_t t, void *extra) {
    const aiter_mla_v4_attention_args *a = (const aiter_mla_v4_attention_args *)args;
    const size_t qe = aiter_mla_dtype_size(a->q_dtype), oe = aiter_mla_dtype_size(a->o_dtype);
    aiter_mla_v4_attention_args s = *a;
    (void)extra;
    s.num_tokens = 1;
    s.q = (const char *)a->q + (size_t)(t * a->q_stride_token) * qe;
    s.o = (char *)a->o + (size_t)(t * a->o_stride_token) * oe;
    s.lse = a->lse ? a->lse + t * a->num_heads : NULL;
    v4_keys_slice(&s.keys, t);
    v4_keys_slice(&s.extra_keys, t);
    return aiter_mla_v4_attention_ref(&s);
}
static void ref_v4_parallel(const aiter_mla_v4_attention_args *a) {
    ref_parallel("V4 attention", a->num_tokens, ref_v4_slice, a, NULL);
}

/* A key list's host and device arrays. */
typedef struct v4_list {
    aiter_mla_v4_keys host, dev;
    void *cache, *d_cache;
    int32_t *idx, *ptr, *len, *d_idx, *d_ptr, *d_len;
    int64_t cache_bytes;
} v4_list;

/* format: 0 MODEL1 pages (fp8 flavour fp8), 1 bf16 rows, 2 f32 rows. Entries: random slots
 * with -1 holes, slots past the cache and duplicates; token 1 has none valid, token 2 an
 * empty list. Dense with lens (dense = 1) or ragged. MODEL1 rows have a random padding byte
 * after their 7 scales, which readers ignore. big_group0 (MODEL1): every row's first scale
 * group (dims 0 .. 63) of magnitude up to 2^46, the rest as usual. */
static void v4_list_make(v4_list *l, int64_t T, int format, aiter_mla_dtype fp8, int dense, int width, int big_group0, int far,
                         test_rng *rng) {
    const int bs = format == 0 ? (fp8 == AITER_MLA_FP8_E4M3FNUZ ? 5 : 16) : 1; /* 5: odd, the scale copies need the padding */
    const int64_t blocks = format == 0 ? 40 : 700, slots = blocks * bs;
    int64_t t, i, total = 0;
    memset(l, 0, sizeof *l);
    if (format == 0) { /* MODEL1 pages written by the reference writer from moderate random rows */
        uint16_t *src = (uint16_t *)test_malloc((size_t)slots * 512 * 2);
        int64_t *map = (int64_t *)test_malloc((size_t)slots * 8);
        aiter_mla_v4_cache_write_args w;
        for (i = 0; i < slots; i++) {
            int g;
            for (g = 0; g < 8; g++) {
                const float amp = (float)ldexp(1.0, big_group0 && g == 0 ? 46 : rng_int(rng, -3, 2));
                fill_random_at(src, i * 512 + g * 64, 64, AITER_MLA_BF16, rng, -amp, amp, 1.0f);
            }
            map[i] = i;
        }
        l->cache_bytes = blocks * aiter_mla_v4_page_bytes(bs);
        l->cache = test_malloc((size_t)l->cache_bytes);
        memset(&w, 0, sizeof w);
        w.kv = src;
        w.slot_mapping = map;
        w.kv_cache = l->cache;
        w.num_blocks = blocks;
        w.block_size = bs;
        w.num_tokens = slots;
        w.fp8_dtype = fp8;
        CHECK_STATUS(aiter_mla_v4_cache_write_ref(&w), AITER_MLA_OK, "");
        for (i = 0; i < slots; i++) {
            unsigned char *page = (unsigned char *)l->cache + i / bs * aiter_mla_v4_page_bytes(bs);
            page[aiter_mla__v4_scales_at(bs, i % bs) + AITER_MLA_V4_SCALE_BYTES - 1] = (unsigned char)rng_int(rng, 0, 255);
        }
        free(src);
        free(map);
    } else {
        const aiter_mla_dtype t = format == 1 ? AITER_MLA_BF16 : AITER_MLA_F32;
        l->cache_bytes = slots * 512 * (int64_t)aiter_mla_dtype_size(t);
        l->cache = test_malloc((size_t)l->cache_bytes);
        fill_random(l->cache, slots * 512, t, rng, -1.0f, 1.0f, 1.0f);
    }
    l->idx = (int32_t *)test_malloc((size_t)(T * width) * 4);
    memset(l->idx, 0xff, (size_t)(T * width) * 4); /* a ragged list's entries past its last row: -1 */
    l->ptr = (int32_t *)test_malloc((size_t)(T + 1) * 4);
    l->len = (int32_t *)test_malloc((size_t)T * 4);
    l->ptr[0] = 3; /* the lists need not start at 0 */
    for (t = 0; t < T; t++) {
        const int n = t == 2 ? 0 : rng_int(rng, 1, width);
        int32_t *row = l->idx + (dense ? t * width : l->ptr[0] + total);
        if (!dense && l->ptr[0] + total + n > T * width) break;
        for (i = 0; i < (dense ? width : n); i++) {
            const int r = rng_int(rng, 0, 99);
            int32_t v = rng_int(rng, 0, (int)slots - 1);
            if (t == 1 || r < 8) v = -1;
            else if (r < 10) v = (int32_t)slots + r;
            else if (r < 14 && i > 0) v = row[i - 1];
            else if (r < 40 && i > 0 && row[i - 1] >= 0) v = row[i - 1] + 1; /* runs of consecutive slots, as a window's */
            row[i] = v;
        }
        l->len[t] = t == 3 && dense ? width + 5 : n; /* a length past the width is clamped */
        total += n;
        l->ptr[t + 1] = l->ptr[0] + (int32_t)total;
    }
    for (; t < T; t++) l->ptr[t + 1] = l->ptr[t], l->len[t] = 0;
    l->host.cache = l->cache;
    l->host.num_blocks = format == 0 ? blocks : slots;
    l->host.block_size = bs;
    l->host.rows = format != 0;
    l->host.dtype = format == 0 ? fp8 : format == 1 ? AITER_MLA_BF16 : AITER_MLA_F32;
    l->host.indices = l->idx;
    if (dense) {
        l->host.indices_stride = width;
        l->host.lens = l->len;
    } else {
        l->host.indptr = l->ptr;
    }
    { /* far: the cache past 4 GiB (see far_cache_upload), every slot id moved by whole blocks */
        const int64_t unit = format == 0 ? aiter_mla_v4_page_bytes(bs) : l->cache_bytes / slots, far_blocks = far_units(far, unit);
        l->d_cache = far_cache_upload(l->cache, (size_t)l->cache_bytes, far_blocks * unit);
        l->d_idx = far_ids_upload(l->idx, T * width, far_blocks * bs);
        l->dev = l->host;
        l->dev.num_blocks += far_blocks;
    }
    l->d_ptr = (int32_t *)upload_copy(l->ptr, (size_t)(T + 1) * 4);
    l->d_len = (int32_t *)upload_copy(l->len, (size_t)T * 4);
    l->dev.cache = l->d_cache;
    l->dev.indices = l->d_idx;
    if (dense) l->dev.lens = l->d_len;
    else l->dev.indptr = l->d_ptr;
}
static void v4_list_free(v4_list *l) {
    gpu_free(l->d_cache); gpu_free(l->d_idx); gpu_free(l->d_ptr); gpu_free(l->d_len);
    free(l->cache); free(l->idx); free(l->ptr); free(l->len);
}

typedef struct v4_case {
    int tokens, heads;
    int format0, format1;   /* list formats (see v4_list_make); format1 -1: no extra list */
    aiter_mla_dtype fp8_0, fp8_1, q_dtype, o_dtype;
    int with_sink, strided; /* strided: q and o rows with padding between heads */
    int splits;             /* num_splits */
    int num_cu;             /* small counts make each block take several tokens */
    int tiny_q;             /* q's dims 0 .. 63 below 2^-28 of its row's largest, MODEL1 keys' ~2^46 there */
    int cut;                /* the extra (ragged) list's capacity halfway through its entries, as a
                               builder's overflow leaves it: the GPU reads up to capacity alone */
    int far;                /* 1: both lists' GPU caches past 4 GiB (see far_cache_upload) */
} v4_case;

static void run_v4_case(const v4_case *c, test_rng *rng) {
    const int T = c->tokens, H = c->heads;
    const int64_t qsh = c->strided ? 520 : 512, osh = c->strided ? 528 : 512;
    const size_t qe = aiter_mla_dtype_size(c->q_dtype), oe = aiter_mla_dtype_size(c->o_dtype);
    const int64_t nq = T * H * qsh, no = T * H * osh;
    static const char *fmt_name[] = {"MODEL1", "bf16 rows", "f32 rows"};
    char what[240];
    v4_list l0, l1;
    int h;
    snprintf(what, sizeof what, "v4_attention T=%d H=%d keys %s %s, extra %s %s, q %s o %s%s%s, %d splits, num_cu %d", T, H,
             fmt_name[c->format0], aiter_mla_dtype_name(c->fp8_0), c->format1 < 0 ? "none" : fmt_name[c->format1],
             aiter_mla_dtype_name(c->fp8_1), aiter_mla_dtype_name(c->q_dtype), aiter_mla_dtype_name(c->o_dtype),
             c->with_sink ? " sink" : "", c->strided ? " strided" : "", c->splits, c->num_cu);
    if (c->cut) snprintf(what + strlen(what), sizeof what - strlen(what), ", cut at capacity");
    if (c->far) snprintf(what + strlen(what), sizeof what - strlen(what), ", far");
    v4_list_make(&l0, T, c->format0, c->fp8_0, 1, 128, c->tiny_q, c->far, rng); /* the SWA list: dense, width W */
    if (c->format1 >= 0) v4_list_make(&l1, T, c->format1, c->fp8_1, 0, 512, c->tiny_q, c->far, rng); /* compressed: ragged */
    float sink[128];
    for (h = 0; h < H; h++) sink[h] = h % 5 == 0 ? -INFINITY : h % 7 == 3 ? INFINITY : rng_f32(rng, -2.0f, 6.0f);
    void *q = test_malloc((size_t)nq * qe), *o_ref = test_malloc((size_t)no * oe), *o_gpu = test_malloc((size_t)no * oe);
    float *lse_ref = (float *)test_malloc((size_t)T * H * 4), *lse_gpu = (float *)test_malloc((size_t)T * H * 4);
    fill_random(q, nq, c->q_dtype, rng, -1.0f, 1.0f, 1.0f);
    if (c->tiny_q)
        for (h = 0; h < T * H; h++) fill_random_at(q, h * qsh, 64, c->q_dtype, rng, -0x1p-42f, 0x1p-42f, 1.0f);
    void *d_q = upload_copy(q, (size_t)nq * qe), *d_o = gpu_malloc((size_t)no * oe);
    float *d_lse = (float *)gpu_malloc((size_t)T * H * 4), *d_sink = (float *)upload_copy(sink, sizeof sink);
    gpu_memset(d_o, 0xff, (size_t)no * oe); /* NaN: an unwritten element fails */
    gpu_memset(d_lse, 0xff, (size_t)T * H * 4);

    aiter_mla_v4_attention_args a;
    memset(&a, 0, sizeof a);
    a.q = d_q;
    a.q_stride_head = qsh;
    a.o = d_o;
    a.o_stride_head = osh;
    a.lse = d_lse;
    a.attn_sink = c->with_sink ? d_sink : NULL;
    a.num_tokens = T;
    a.num_heads = H;
    a.q_dtype = c->q_dtype;
    a.o_dtype = c->o_dtype;
    a.keys = l0.dev;
    if (c->format1 >= 0) a.extra_keys = l1.dev;
    int32_t *cut_ptr = NULL; /* the reference's rows: the extra list's indptr cut at the capacity */
    if (c->cut && c->format1 >= 0) {
        const int32_t cap = l1.ptr[0] + (l1.ptr[T] - l1.ptr[0]) / 2;
        int t;
        cut_ptr = (int32_t *)test_malloc((size_t)(T + 1) * 4);
        for (t = 0; t <= T; t++) cut_ptr[t] = l1.ptr[t] < cap ? l1.ptr[t] : cap;
        a.extra_keys.capacity = cap; /* entries past it (valid slots among them) must not count */
    }
    a.num_splits = c->splits;
    a.num_cu = c->num_cu;
    a.keys_read_once = (int)((T + H + c->splits) & 1); /* a hint, right or wrong here (lists may share keys): the same rows */
    a.keys_shared = (int)((T + c->splits) & 1) && !a.keys_read_once; /* the same */
    CHECK_STATUS(aiter_mla_v4_attention_workspace_size(&a, &a.workspace_bytes), AITER_MLA_OK, "");
    a.workspace = a.workspace_bytes ? gpu_malloc(a.workspace_bytes) : NULL;
    if (a.workspace) gpu_memset(a.workspace, 0xff, a.workspace_bytes); /* NaN partials: an unwritten one would show */
    CHECK_STATUS(aiter_mla_v4_attention(&a, g_stream), AITER_MLA_OK, "");
    gpu_sync();
    gpu_download(o_gpu, d_o, (size_t)no * oe);
    gpu_download(lse_gpu, d_lse, (size_t)T * H * 4);

    aiter_mla_v4_attention_args r = a;
    r.q = q;
    r.o = o_ref;
    r.lse = lse_ref;
    r.attn_sink = c->with_sink ? sink : NULL;
    r.keys = l0.host;
    if (c->format1 >= 0) r.extra_keys = l1.host;
    if (cut_ptr) r.extra_keys.indptr = cut_ptr;
    r.q_stride_token = H * qsh; /* the resolved defaults, for the per-token slices */
    r.o_stride_token = H * osh;
    poison_fill(o_ref, no, c->o_dtype);
    poison_f32(lse_ref, (int64_t)T * H);
    ref_v4_parallel(&r);
    if (c->tiny_q) { /* the case tells an exact Q from one whose tiny values were flushed */
        float *lse_flushed = (float *)test_malloc((size_t)T * H * 4);
        void *q_flushed = test_malloc((size_t)nq * qe), *o_flushed = test_malloc((size_t)no * oe);
        double moved;
        int64_t i;
        memcpy(q_flushed, q, (size_t)nq * qe);
        for (i = 0; i < (int64_t)T * H; i++) memset((char *)q_flushed + (size_t)(i * qsh) * qe, 0, 64 * qe);
        r.q = q_flushed;
        r.o = o_flushed;
        r.lse = lse_flushed;
        ref_v4_parallel(&r);
        moved = max_abs_err(lse_flushed, lse_ref, (int64_t)T * H);
        CHECK(moved > 100 * TOL_LSE_ABS, "%s: q's tiny values move no lse by more than %.3g", what, moved);
        free(lse_flushed); free(q_flushed); free(o_flushed);
    }
    {
        const int64_t n = (int64_t)T * H * 512;
        /* calloc: every element is written below, but newer gcc (-Wmaybe-uninitialized) cannot tell */
        float *g = (float *)test_calloc((size_t)n * 4), *f = (float *)test_calloc((size_t)n * 4);
        int64_t unwritten = 0, t;
        for (t = 0; t < (int64_t)T * H; t++) { /* the 512 values of each (token, head), padding skipped */
            int64_t d;
            for (d = 0; d < 512; d++) {
                g[t * 512 + d] = (float)ref_load(o_gpu, t * osh + d, c->o_dtype);
                f[t * 512 + d] = (float)ref_load(o_ref, t * osh + d, c->o_dtype);
                unwritten += g[t * 512 + d] != g[t * 512 + d];
            }
        }
        CHECK(unwritten == 0, "%s: %lld output elements unwritten or NaN", what, (long long)unwritten);
        if (c->format0 == 0 || c->format1 == 0) CHECK_CLOSE(what, g, f, n, TOL_FP8_REL, TOL_FP8_COS);
        else CHECK_CLOSE(what, g, f, n, TOL_BF16_REL, TOL_BF16_COS);
        if (osh > 512) { /* the padding between heads is left alone */
            const unsigned char *ob = (const unsigned char *)o_gpu;
            int64_t bad = 0, e;
            for (t = 0; t < (int64_t)T * H; t++)
                for (e = (t * osh + 512) * (int64_t)oe; e < (t + 1) * osh * (int64_t)oe; e++) bad += ob[e] != 0xff;
            CHECK(bad == 0, "%s: %lld bytes written between heads", what, (long long)bad);
        }
        CHECK_LSE(what, lse_gpu, lse_ref, (int64_t)T * H);
        free(g);
        free(f);
    }
    gpu_free(d_q); gpu_free(d_o); gpu_free(d_lse); gpu_free(d_sink);
    if (a.workspace) gpu_free(a.workspace);
    free(q); free(o_ref); free(o_gpu); free(lse_ref); free(lse_gpu); free(cut_ptr);
    v4_list_free(&l0);
    if (c->format1 >= 0) v4_list_free(&l1);
}

static void test_v4_attention_gpu(test_rng *rng) {
    static const int heads[] = {1, 16, 64, 128};
    /* list formats: MODEL1 + MODEL1 (decode, tensor cores), MODEL1 alone (ratio 1), bf16
     * rows (the prefill workspace, tensor cores), MODEL1 + f32 rows (portable) */
    static const int formats[][2] = {{0, 0}, {0, -1}, {1, -1}, {0, 2}};
    const int before = testing_failed;
    int hi, fi, v;
    v4_case c;
    for (hi = 0; hi < 4; hi++)
        for (fi = 0; fi < 4; fi++)
            for (v = 0; v < 2; v++) {
                if (g_quick && heads[hi] == 64) continue;
                memset(&c, 0, sizeof c);
                c.tokens = 5 + v;
                c.heads = heads[hi];
                c.format0 = formats[fi][0];
                c.format1 = formats[fi][1];
                c.fp8_0 = (hi + v) % 2 ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN; /* the SWA cache: fnuz on gfx942 */
                c.fp8_1 = AITER_MLA_FP8_E4M3FN;
                c.q_dtype = (hi + fi + v) % 5 == 4 ? AITER_MLA_F16 : AITER_MLA_BF16; /* f16: the portable kernel */
                c.o_dtype = (hi + fi) % 3 == 2 ? AITER_MLA_F32 : AITER_MLA_BF16;
                c.with_sink = (hi + v) % 2 == 0 || fi == 0;
                c.strided = (fi + v) % 3 == 1;
                c.splits = (hi + fi + v) % 3 == 0 ? 1 : v ? 3 : 11; /* 11: splits of a few keys, empty ones */
                c.num_cu = (hi + v) % 2 ? 0 : fi + 2;
                run_v4_case(&c, rng);
            }
    /* MODEL1 pages of e4m3fn in both lists, up to 16 heads, one split: the 16-row e4m3fn
     * kernel of sm_90a builds; 40 tokens over 3 blocks take its copies across tokens */
    for (hi = 0; hi < 3; hi++)
        for (v = 0; v < 2; v++) {
            static const int few_heads[] = {1, 5, 16};
            memset(&c, 0, sizeof c);
            c.tokens = v ? 40 : 7;
            c.heads = few_heads[hi];
            c.format0 = 0;
            c.format1 = hi == 1 && v ? -1 : 0;
            c.fp8_0 = c.fp8_1 = AITER_MLA_FP8_E4M3FN;
            c.q_dtype = AITER_MLA_BF16;
            c.o_dtype = v ? AITER_MLA_BF16 : AITER_MLA_F32;
            c.with_sink = hi != 1;
            c.strided = v;
            c.splits = 1;
            c.num_cu = v ? 3 : 0;
            run_v4_case(&c, rng);
        }
    /* A ragged list read up to its capacity, past which its indptr runs (a builder's overflow):
     * the e4m3fn kernel (16 heads, one split), the 16-row mma.sync kernel (splits), the 64-row
     * kernels, the portable one (f16 q) */
    for (v = 0; v < 5; v++) {
        static const int cut_heads[] = {16, 1, 64, 128, 16}, cut_splits[] = {1, 3, 1, 2, 1};
        memset(&c, 0, sizeof c);
        c.tokens = 9;
        c.heads = cut_heads[v];
        c.format0 = c.format1 = 0;
        c.fp8_0 = c.fp8_1 = AITER_MLA_FP8_E4M3FN;
        c.q_dtype = v == 4 ? AITER_MLA_F16 : AITER_MLA_BF16;
        c.o_dtype = AITER_MLA_BF16;
        c.with_sink = v % 2;
        c.splits = cut_splits[v];
        c.cut = 1;
        run_v4_case(&c, rng);
    }
    /* Q values below 2^-28 of their row's largest (2^-42 against ~1, which an f16 form of the
     * row scaled to its largest would flush) where every MODEL1 key's first scale group is
     * ~2^46: their products move each score by several units, so only a kernel that takes Q
     * as it is passes. (At 2^-44 they moved a row's lse by as little as 0.07 for one head and
     * six tokens, under the case's own check of 0.1; at 2^-42 by 1.4 at least in 2000 draws
     * of a model of the case.) The e4m3fn kernel (16 heads, one split), the 16-row mma.sync kernel
     * (splits), the 64-row kernel (64 heads: warpgroup on sm_90a builds, mma.sync otherwise). */
    for (v = 0; v < 3; v++) {
        static const int tiny_heads[] = {16, 1, 64}, tiny_splits[] = {1, 3, 1};
        memset(&c, 0, sizeof c);
        c.tokens = 6;
        c.heads = tiny_heads[v];
        c.format0 = c.format1 = 0;
        c.fp8_0 = c.fp8_1 = AITER_MLA_FP8_E4M3FN;
        c.q_dtype = AITER_MLA_BF16;
        c.o_dtype = AITER_MLA_F32;
        c.with_sink = 1;
        c.splits = tiny_splits[v];
        c.tiny_q = 1;
        run_v4_case(&c, rng);
    }
    printf("v4 attention: %s\n", testing_failed == before ? "ok" : "FAILED");
}

/* Compares a GPU prefill's o and lse (bf16 o, [T, H]) with the reference's; every element
 * written (the outputs were poisoned). */
static void check_v4_prefill_out(const char *what, const uint16_t *o_gpu, const float *lse_gpu, const uint16_t *o_ref,
                                 const float *lse_ref, int64_t T, int H, double rel_tol, double cos_tol) {
    const int64_t nq = T * H * 512;
    float *g = (float *)test_malloc((size_t)nq * 4), *f = (float *)test_malloc((size_t)nq * 4);
    int64_t unwritten = 0, e;
    to_f32(o_gpu, g, nq, AITER_MLA_BF16);
    to_f32(o_ref, f, nq, AITER_MLA_BF16);
    for (e = 0; e < nq; e++) unwritten += g[e] != g[e];
    CHECK(unwritten == 0, "%s: %lld output elements unwritten or NaN", what, (long long)unwritten);
    CHECK_CLOSE(what, g, f, nq, rel_tol, cos_tol);
    CHECK_LSE(what, lse_gpu, lse_ref, T * H);
    free(g);
    free(f);
}

/* A V4 prefill on the GPU two ways, each against vLLM's workspace-based chunked prefill on the
 * CPU (aiter_mla_v4_prefill_ref, chunks of chunk_size requests over a ws_dtype workspace):
 * - directly: each token's SWA list (aiter_mla_v4_swa_indices) and compressed list (ratio 4:
 *   aiter_mla_v4_global_topk on the indexer's rows; ratio 128: aiter_mla_v4_c128_indices) over
 *   the caches themselves, attended by aiter_mla_v4_attention;
 * - vLLM's way in one call, aiter_mla_v4_prefill, on a poisoned workspace (a row listed before
 *   it was gathered would show as NaN); then, with garbage in the first chunk's device
 *   query_start_loc and seq_lens, every output still written and finite where the lse is,
 *   and the other chunks' rows unchanged bit for bit. */
static void run_v4_prefill_gpu_case(int ratio, int H, int chunk_size, aiter_mla_dtype ws_dtype, test_rng *rng) {
    enum { B = 5, SWA_BS = 64, MAXLEN = 1536, W = 128, TOPK4 = 48 };
    const int32_t q_lens[B] = {5, 4, 3, 6, 1}, prefix[B] = {0, 3, 200, 1000, 127};
    const int swa_pages = MAXLEN / SWA_BS, cbs = ratio > 1 ? 256 / ratio : 1, c_pages = ratio > 1 ? MAXLEN / ratio / cbs + 1 : 1;
    const int n_comp = ratio > 1 ? (MAXLEN + ratio - 1) / ratio : 0, topk = ratio == 4 ? TOPK4 : ratio == 128 ? n_comp : 1;
    const int64_t swa_pb = aiter_mla_v4_page_bytes(SWA_BS), c_pb = aiter_mla_v4_page_bytes(cbs);
    int32_t qsl[B + 1], seq[B], swa_bt[B * (MAXLEN / SWA_BS)], c_bt[B * (MAXLEN / 4 / 64 + 1)];
    int b, i, k, T;
    char what[96];
    qsl[0] = 0;
    for (b = 0; b < B; b++) {
        qsl[b + 1] = qsl[b] + q_lens[b];
        seq[b] = prefix[b] + q_lens[b];
    }
    T = qsl[B];
    snprintf(what, sizeof what, "v4 prefill on the GPU, ratio %d, H=%d", ratio, H);
    unsigned char *swa = (unsigned char *)test_malloc((size_t)(B * swa_pages * swa_pb));
    unsigned char *comp = (unsigned char *)test_malloc((size_t)(B * c_pages * c_pb));
    int32_t *local = (int32_t *)test_malloc((size_t)T * topk * 4), *req = (int32_t *)test_malloc((size_t)T * 4);
    int64_t *pos = (int64_t *)test_malloc((size_t)T * 8);
    for (b = 0; b < B; b++) { /* rows written by the reference writer, pages interleaved and reversed */
        uint16_t *kv = (uint16_t *)test_malloc((size_t)seq[b] * 512 * 2);
        int64_t *sl = (int64_t *)test_malloc((size_t)seq[b] * 8);
        aiter_mla_v4_cache_write_args w;
        for (i = 0; i < swa_pages; i++) swa_bt[b * swa_pages + i] = i * B + b;
        for (i = 0; i < c_pages; i++) c_bt[b * c_pages + i] = (c_pages - 1 - i) * B + b;
        for (i = 0; i < q_lens[b]; i++) {
            req[qsl[b] + i] = b;
            pos[qsl[b] + i] = prefix[b] + i;
        }
        memset(&w, 0, sizeof w);
        w.kv = kv;
        w.slot_mapping = sl;
        w.kv_cache = swa;
        w.num_blocks = (int64_t)B * swa_pages;
        w.block_size = SWA_BS;
        w.num_tokens = seq[b];
        fill_random(kv, (int64_t)seq[b] * 512, AITER_MLA_BF16, rng, -2.0f, 2.0f, 1.0f);
        for (i = 0; i < seq[b]; i++) sl[i] = (int64_t)swa_bt[b * swa_pages + i / SWA_BS] * SWA_BS + i % SWA_BS;
        CHECK_STATUS(aiter_mla_v4_cache_write_ref(&w), AITER_MLA_OK, "");
        if (ratio > 1) {
            w.kv_cache = comp;
            w.num_blocks = (int64_t)B * c_pages;
            w.block_size = cbs;
            w.num_tokens = seq[b] / ratio;
            for (i = 0; i < seq[b] / ratio; i++) sl[i] = (int64_t)c_bt[b * c_pages + i / cbs] * cbs + i % cbs;
            CHECK_STATUS(aiter_mla_v4_cache_write_ref(&w), AITER_MLA_OK, "");
        }
        free(kv);
        free(sl);
    }
    /* request-local compressed rows: the indexer's (valid first, then -1) or every entry so far */
    for (i = 0; i < T; i++) {
        const int n = (int)((pos[i] + 1) / (ratio > 1 ? ratio : 1)), take = n < topk ? n : topk;
        for (k = 0; k < topk; k++)
            local[(int64_t)i * topk + k] = ratio == 4 && k < take ? rng_int(rng, 0, n - 1) : ratio == 128 && k < take ? k : -1;
    }
    const int64_t nq = (int64_t)T * H * 512;
    uint16_t *q = (uint16_t *)test_malloc((size_t)nq * 2), *o_gpu = (uint16_t *)test_malloc((size_t)nq * 2),
             *o_ref = (uint16_t *)test_malloc((size_t)nq * 2);
    float *lse_gpu = (float *)test_malloc((size_t)T * H * 4), *lse_ref = (float *)test_malloc((size_t)T * H * 4), sink[128];
    fill_random(q, nq, AITER_MLA_BF16, rng, -1.0f, 1.0f, 1.0f);
    for (i = 0; i < H; i++) sink[i] = i % 3 == 0 ? -INFINITY : rng_f32(rng, -1.0f, 3.0f);

    /* the reference: vLLM's chunks over a workspace, on the CPU */
    aiter_mla_v4_prefill_args p;
    size_t bytes = 0;
    memset(&p, 0, sizeof p);
    p.attn.q = q;
    p.attn.o = o_ref;
    p.attn.lse = lse_ref;
    p.attn.attn_sink = sink;
    p.attn.num_heads = H;
    p.batch = B;
    p.query_start_loc = qsl;
    p.seq_lens = seq;
    p.compress_ratio = ratio;
    p.max_model_len = MAXLEN;
    p.max_num_batched_tokens = T;
    p.topk_indices = ratio > 1 ? local : NULL;
    p.topk = topk;
    p.swa_cache = swa;
    p.swa_num_blocks = (int64_t)B * swa_pages;
    p.swa_block_table = swa_bt;
    p.swa_block_table_stride = swa_pages;
    p.compressed_cache = ratio > 1 ? comp : NULL;
    p.compressed_num_blocks = (int64_t)B * c_pages;
    p.compressed_block_table = c_bt;
    p.compressed_block_table_stride = c_pages;
    p.chunk_size = chunk_size;
    p.workspace_dtype = ws_dtype;
    CHECK_STATUS(aiter_mla_v4_prefill_workspace_size(&p, &bytes), AITER_MLA_OK, "");
    void *ws = test_malloc(bytes);
    p.workspace = ws;
    p.workspace_bytes = bytes;
    poison_fill(o_ref, nq, AITER_MLA_BF16);
    poison_f32(lse_ref, (int64_t)T * H);
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&p), AITER_MLA_OK, "");

    /* the GPU: the two lists of every token, then one attention launch */
    void *d_swa = upload_copy(swa, (size_t)(B * swa_pages * swa_pb)), *d_comp = upload_copy(comp, (size_t)(B * c_pages * c_pb));
    int32_t *d_qsl = (int32_t *)upload_copy(qsl, sizeof qsl), *d_seq = (int32_t *)upload_copy(seq, sizeof seq);
    int32_t *d_swa_bt = (int32_t *)upload_copy(swa_bt, sizeof swa_bt), *d_c_bt = (int32_t *)upload_copy(c_bt, sizeof c_bt);
    int32_t *d_local = (int32_t *)upload_copy(local, (size_t)T * topk * 4), *d_req = (int32_t *)upload_copy(req, (size_t)T * 4);
    int64_t *d_pos = (int64_t *)upload_copy(pos, (size_t)T * 8);
    int32_t *d_swa_list = (int32_t *)gpu_malloc((size_t)T * W * 4), *d_swa_len = (int32_t *)gpu_malloc((size_t)T * 4);
    int32_t *d_c_list = (int32_t *)gpu_malloc((size_t)T * topk * 4), *d_c_len = (int32_t *)gpu_malloc((size_t)T * 4);
    void *d_q = upload_copy(q, (size_t)nq * 2), *d_o = gpu_malloc((size_t)nq * 2);
    float *d_lse = (float *)gpu_malloc((size_t)T * H * 4), *d_sink = (float *)upload_copy(sink, sizeof sink);
    gpu_memset(d_o, 0xff, (size_t)nq * 2);
    gpu_memset(d_lse, 0xff, (size_t)T * H * 4);
    aiter_mla_v4_swa_index_args si;
    memset(&si, 0, sizeof si);
    si.query_start_loc = d_qsl;
    si.seq_lens = d_seq;
    si.block_table = d_swa_bt;
    si.block_table_stride = swa_pages;
    si.block_size = SWA_BS;
    si.num_reqs = B;
    si.num_tokens = T;
    si.out.dense = d_swa_list;
    si.out.lens = d_swa_len;
    CHECK_STATUS(aiter_mla_v4_swa_indices(&si, g_stream), AITER_MLA_OK, "");
    if (ratio == 4) {
        aiter_mla_v4_topk_args tk;
        memset(&tk, 0, sizeof tk);
        tk.topk_indices = d_local;
        tk.topk = topk;
        tk.token_to_req = d_req;
        tk.block_table = d_c_bt;
        tk.block_table_stride = c_pages;
        tk.block_size = cbs;
        tk.num_reqs = B;
        tk.num_tokens = T;
        tk.out.dense = d_c_list;
        tk.out.lens = d_c_len;
        CHECK_STATUS(aiter_mla_v4_global_topk(&tk, g_stream), AITER_MLA_OK, "");
    } else if (ratio == 128) {
        aiter_mla_v4_c128_args c;
        memset(&c, 0, sizeof c);
        c.positions = d_pos;
        c.token_to_req = d_req;
        c.block_table = d_c_bt;
        c.block_table_stride = c_pages;
        c.block_size = cbs;
        c.num_reqs = B;
        c.compress_ratio = 128;
        c.width = topk;
        c.num_tokens = T;
        c.out.dense = d_c_list;
        c.out.lens = d_c_len;
        CHECK_STATUS(aiter_mla_v4_c128_indices(&c, g_stream), AITER_MLA_OK, "");
    }
    aiter_mla_v4_attention_args a;
    memset(&a, 0, sizeof a);
    a.q = d_q;
    a.o = d_o;
    a.lse = d_lse;
    a.attn_sink = d_sink;
    a.num_tokens = T;
    a.num_heads = H;
    a.keys.cache = d_swa;
    a.keys.num_blocks = (int64_t)B * swa_pages;
    a.keys.block_size = SWA_BS;
    a.keys.indices = d_swa_list;
    a.keys.indices_stride = W;
    a.keys.lens = d_swa_len;
    if (ratio > 1) {
        a.extra_keys.cache = d_comp;
        a.extra_keys.num_blocks = (int64_t)B * c_pages;
        a.extra_keys.block_size = cbs;
        a.extra_keys.indices = d_c_list;
        a.extra_keys.indices_stride = topk;
        a.extra_keys.lens = d_c_len;
    }
    a.num_cu = ratio == 128 ? 0 : 5; /* 5: blocks of 64 heads take several tokens each */
    CHECK_STATUS(aiter_mla_v4_attention(&a, g_stream), AITER_MLA_OK, "");
    gpu_sync();
    gpu_download(o_gpu, d_o, (size_t)nq * 2);
    gpu_download(lse_gpu, d_lse, (size_t)T * H * 4);
    check_v4_prefill_out(what, o_gpu, lse_gpu, o_ref, lse_ref, T, H, TOL_FP8_REL, TOL_FP8_COS);

    { /* vLLM's chunks in one call: the same rows as the reference's, so bf16's tolerance */
        aiter_mla_v4_prefill_args g = p;
        void *d_ws = gpu_malloc(bytes);
        int32_t bad_qsl[B + 1], bad_seq[B], *d_bad_qsl, *d_bad_seq;
        uint16_t *o_bad = (uint16_t *)test_malloc((size_t)nq * 2);
        float *lse_bad = (float *)test_malloc((size_t)T * H * 4);
        const int first_chunk = chunk_size ? chunk_size : AITER_MLA_V4_PREFILL_CHUNK;
        int64_t e, nan_lse = 0, nan_o = 0, moved = 0;
        snprintf(what, sizeof what, "v4 prefill in one GPU call, ratio %d, H=%d, chunks of %d, %s workspace", ratio, H, first_chunk,
                 aiter_mla_dtype_name(ws_dtype ? ws_dtype : AITER_MLA_BF16));
        g.attn.q = d_q;
        g.attn.o = d_o;
        g.attn.lse = d_lse;
        g.attn.attn_sink = d_sink;
        g.attn.num_cu = 5;
        g.query_start_loc = d_qsl;
        g.query_start_loc_host = qsl;
        g.seq_lens = d_seq;
        g.topk_indices = ratio > 1 ? d_local : NULL;
        g.swa_cache = d_swa;
        g.swa_block_table = d_swa_bt;
        g.compressed_cache = ratio > 1 ? d_comp : NULL;
        g.compressed_block_table = d_c_bt;
        g.workspace = d_ws;
        gpu_memset(d_ws, 0xff, bytes);
        gpu_memset(d_o, 0xff, (size_t)nq * 2);
        gpu_memset(d_lse, 0xff, (size_t)T * H * 4);
        CHECK_STATUS(aiter_mla_v4_prefill(&g, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(o_gpu, d_o, (size_t)nq * 2);
        gpu_download(lse_gpu, d_lse, (size_t)T * H * 4);
        check_v4_prefill_out(what, o_gpu, lse_gpu, o_ref, lse_ref, T, H, TOL_BF16_REL, TOL_BF16_COS);

        /* the first chunk's device arrays garbled: a request's seq_len below its q_len, one
         * negative, one past any page, and query_start_loc disagreeing with the host copy */
        memcpy(bad_qsl, qsl, sizeof bad_qsl);
        memcpy(bad_seq, seq, sizeof bad_seq);
        bad_seq[0] = INT32_MAX;
        bad_seq[1] = q_lens[1] - 1;
        bad_seq[2] = -5;
        bad_qsl[2] += 100;
        d_bad_qsl = (int32_t *)upload_copy(bad_qsl, sizeof bad_qsl);
        d_bad_seq = (int32_t *)upload_copy(bad_seq, sizeof bad_seq);
        g.query_start_loc = d_bad_qsl;
        g.seq_lens = d_bad_seq;
        gpu_memset(d_o, 0xff, (size_t)nq * 2);
        gpu_memset(d_lse, 0xff, (size_t)T * H * 4);
        CHECK_STATUS(aiter_mla_v4_prefill(&g, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(o_bad, d_o, (size_t)nq * 2);
        gpu_download(lse_bad, d_lse, (size_t)T * H * 4);
        for (e = 0; e < (int64_t)T * H; e++) nan_lse += lse_bad[e] != lse_bad[e];
        for (e = 0; e < nq; e++) nan_o += (o_bad[e] & 0x7fff) > 0x7f80; /* bf16 NaN */
        /* requests 0 .. 2 garbled: the chunks from the first boundary past them are clean */
        const int clean = (3 + first_chunk - 1) / first_chunk * first_chunk < B ? (3 + first_chunk - 1) / first_chunk * first_chunk : B;
        for (e = (int64_t)qsl[clean] * H * 512; e < nq; e++) moved += o_bad[e] != o_gpu[e];
        CHECK(nan_o == 0 && nan_lse == 0, "%s, garbled device arrays: %lld o and %lld lse elements NaN or unwritten", what,
              (long long)nan_o, (long long)nan_lse);
        CHECK(moved == 0, "%s, garbled device arrays: %lld o elements of requests %d.. changed", what, (long long)moved, clean);
        gpu_free(d_ws);
        gpu_free(d_bad_qsl);
        gpu_free(d_bad_seq);
        free(o_bad);
        free(lse_bad);
    }
    gpu_free(d_swa); gpu_free(d_comp); gpu_free(d_qsl); gpu_free(d_seq); gpu_free(d_swa_bt); gpu_free(d_c_bt);
    gpu_free(d_local); gpu_free(d_req); gpu_free(d_pos); gpu_free(d_swa_list); gpu_free(d_swa_len); gpu_free(d_c_list);
    gpu_free(d_c_len); gpu_free(d_q); gpu_free(d_o); gpu_free(d_lse); gpu_free(d_sink);
    free(swa); free(comp); free(local); free(req); free(pos); free(q); free(o_gpu); free(o_ref); free(lse_gpu); free(lse_ref);
    free(ws);
}

static void test_v4_prefill_gpu(test_rng *rng) {
    const int before = testing_failed;
    run_v4_prefill_gpu_case(4, 16, 0, AITER_MLA_DTYPE_DEFAULT, rng);
    run_v4_prefill_gpu_case(128, 64, 2, AITER_MLA_F16, rng);
    run_v4_prefill_gpu_case(1, 16, 1, AITER_MLA_F32, rng);
    run_v4_prefill_gpu_case(4, 128, 3, AITER_MLA_BF16, rng);
    printf("v4 prefill on the GPU: %s\n", testing_failed == before ? "ok" : "FAILED");
}

/* ---- V4 index builders ---------------------------------------------------------------------
 * Each GPU builder against its reference, byte for byte, on outputs poisoned with 0x7f bytes
 * (V4_GUARD poisoned ints after each buffer must stay so), over every output combination:
 * dense alone (16-byte aligned or not, padded stride), lens alone, ragged alone and all three,
 * with ample, exact, short and zero capacity. Short capacity: the GPU writes indptr in full
 * and the entries below the capacity, which the reference (with room) gives as its list's
 * prefix. Device data that the reference refuses is checked against the reference on the
 * equivalent data with the affected rows emptied (v4_builder.empty). */
#define V4_POISON 0x7f7f7f7f
#define V4_GUARD 16

typedef aiter_mla_status (*v4_call)(const void *args, aiter_mla_v4_index_out out);
typedef struct v4_builder {
    char what[200];
    const void *h, *d;    /* args with host / device arrays; out is set per call */
    v4_call ref, gpu;
    int64_t T, width;     /* output rows and the builder's width */
    const uint8_t *empty; /* [T] optional: rows the GPU leaves empty (data h does not show) */
} v4_builder;

#define V4_CALLS(name, type, ref_fn, gpu_fn)                                \
    static aiter_mla_status name##_ref(const void *p, aiter_mla_v4_index_out o) { \
        type a = *(const type *)p;                                          \
        a.out = o;                                                          \
        return ref_fn(&a);                                                  \
    }                                                                       \
    static aiter_mla_status name##_gpu(const void *p, aiter_mla_v4_index_out o) { \
        type a = *(const type *)p;                                          \
        a.out = o;                                                          \
        return gpu_fn(&a, g_stream);                                        \
    }
V4_CALLS(v4_swa, aiter_mla_v4_swa_index_args, aiter_mla_v4_swa_indices_ref, aiter_mla_v4_swa_indices)
V4_CALLS(v4_topk, aiter_mla_v4_topk_args, aiter_mla_v4_global_topk_ref, aiter_mla_v4_global_topk)
V4_CALLS(v4_c128, aiter_mla_v4_c128_args, aiter_mla_v4_c128_indices_ref, aiter_mla_v4_c128_indices)
V4_CALLS(v4_comb, aiter_mla_v4_combine_args, aiter_mla_v4_combine_ref, aiter_mla_v4_combine)
#undef V4_CALLS

/* Index of the first differing int of two n-int buffers, or -1. */
static int64_t first_diff_int(const int32_t *a, const int32_t *b, int64_t n) {
    const int64_t d = first_diff(a, b, (size_t)n * 4);
    return d < 0 ? -1 : d / 4;
}
/* n ints plus the guard, all poisoned, on the host or (v4_dev_poisoned) on the device */
static int32_t *v4_poisoned(int64_t n) {
    int32_t *p = (int32_t *)test_malloc((size_t)(n + V4_GUARD) * 4);
    memset(p, 0x7f, (size_t)(n + V4_GUARD) * 4);
    return p;
}
static int32_t *v4_dev_poisoned(int64_t n) {
    int32_t *p = (int32_t *)gpu_malloc((size_t)(n + V4_GUARD) * 4);
    gpu_memset(p, 0x7f, (size_t)(n + V4_GUARD) * 4);
    return p;
}

/* What the GPU must leave in host buffers o (poisoned; o.indices holds T * width entries):
 * the reference's outputs with b->empty rows emptied (dense row -1, length 0, no entries),
 * then ragged entries at positions >= cap poisoned again. Returns the ragged total. */
static int64_t v4_expected(const v4_builder *b, aiter_mla_v4_index_out o, int64_t cap) {
    int64_t t, k, total;
    o.capacity = b->T * b->width;
    CHECK_STATUS(b->ref(b->h, o), AITER_MLA_OK, "");
    if (b->empty) {
        int64_t start = 0, w = 0; /* start: the reference's indptr[t] */
        for (t = 0; t < b->T; t++) {
            const int64_t end = o.indptr ? o.indptr[t + 1] : 0;
            if (b->empty[t]) {
                if (o.dense)
                    for (k = 0; k < b->width; k++) o.dense[t * o.dense_stride + k] = -1;
                if (o.lens) o.lens[t] = 0;
            } else {
                for (k = start; k < end; k++) o.indices[w++] = o.indices[k];
            }
            if (o.indptr) o.indptr[t + 1] = (int32_t)w;
            start = end;
        }
        for (k = w; k < start; k++) o.indices[k] = V4_POISON;
    }
    total = o.indptr ? o.indptr[b->T] : 0;
    for (k = cap; k < total; k++) o.indices[k] = V4_POISON;
    return total;
}

static void check_v4_builder(const v4_builder *b, test_rng *rng) {
    /* cap: 0 ample, 1 exact, 2 short (when there is an entry), 3 zero */
    static const struct { int dense, lens, ragged, cap; } modes[] = {
        {1, 0, 0, 0}, {0, 1, 0, 0}, {0, 0, 1, 0}, {1, 1, 1, 0}, {0, 1, 1, 1}, {1, 1, 1, 2}, {0, 0, 1, 3},
    };
    const int64_t T = b->T, W = b->width;
    int64_t total = 0, t;
    int m;
    {
        int32_t *lens = v4_poisoned(T);
        aiter_mla_v4_index_out o;
        memset(&o, 0, sizeof o);
        o.lens = lens;
        v4_expected(b, o, 0);
        for (t = 0; t < T; t++) total += lens[t];
        free(lens);
    }
    for (m = 0; m < (int)(sizeof modes / sizeof modes[0]); m++) {
        const int64_t stride = W + (rng_int(rng, 0, 1) ? rng_int(rng, 1, 5) : 0), shift = rng_int(rng, 0, 2) == 0;
        const int64_t cap = modes[m].cap == 0   ? T * W + 7
                            : modes[m].cap == 1 ? total
                            : modes[m].cap == 2 ? (total > 0 ? rng_int(rng, 0, (int)total - 1) : 0)
                                                : 0;
        const int64_t nd = T * stride + shift, ni = cap > T * W ? cap : T * W;
        int32_t *e_dense = v4_poisoned(nd), *e_lens = v4_poisoned(T), *e_idx = v4_poisoned(ni), *e_ptr = v4_poisoned(T + 1);
        int32_t *g_dense = v4_poisoned(nd), *g_lens = v4_poisoned(T), *g_idx = v4_poisoned(cap), *g_ptr = v4_poisoned(T + 1);
        int32_t *d_dense = v4_dev_poisoned(nd), *d_lens = v4_dev_poisoned(T), *d_idx = v4_dev_poisoned(cap),
                *d_ptr = v4_dev_poisoned(T + 1);
        aiter_mla_v4_index_out o, g;
        int64_t d;
        char what[300];
        snprintf(what, sizeof what, "%s, outputs%s%s%s, capacity %lld of %lld, dense stride %lld%s", b->what,
                 modes[m].dense ? " dense" : "", modes[m].lens ? " lens" : "", modes[m].ragged ? " ragged" : "", (long long)cap,
                 (long long)total, (long long)stride, shift ? " misaligned" : "");
        memset(&o, 0, sizeof o);
        o.dense = modes[m].dense ? e_dense + shift : NULL;
        o.dense_stride = stride;
        o.lens = modes[m].lens ? e_lens : NULL;
        o.indices = modes[m].ragged ? e_idx : NULL;
        o.indptr = modes[m].ragged ? e_ptr : NULL;
        g = o;
        g.dense = modes[m].dense ? d_dense + shift : NULL;
        g.lens = modes[m].lens ? d_lens : NULL;
        g.indices = modes[m].ragged ? d_idx : NULL;
        g.indptr = modes[m].ragged ? d_ptr : NULL;
        g.capacity = cap;
        CHECK_STATUS(b->gpu(b->d, g), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(g_dense, d_dense, (size_t)(nd + V4_GUARD) * 4);
        gpu_download(g_lens, d_lens, (size_t)(T + V4_GUARD) * 4);
        gpu_download(g_idx, d_idx, (size_t)(cap + V4_GUARD) * 4);
        gpu_download(g_ptr, d_ptr, (size_t)(T + 1 + V4_GUARD) * 4);
        v4_expected(b, o, cap);
        d = first_diff_int(g_dense, e_dense, nd + V4_GUARD);
        CHECK(d < 0, "%s: dense differs at int %lld (row %lld col %lld): got %d, want %d", what, (long long)d,
              (long long)((d - shift) / stride), (long long)((d - shift) % stride), d >= 0 ? g_dense[d] : 0, d >= 0 ? e_dense[d] : 0);
        d = first_diff_int(g_lens, e_lens, T + V4_GUARD);
        CHECK(d < 0, "%s: lens differ at %lld: got %d, want %d", what, (long long)d, d >= 0 ? g_lens[d] : 0, d >= 0 ? e_lens[d] : 0);
        d = first_diff_int(g_ptr, e_ptr, T + 1 + V4_GUARD);
        CHECK(d < 0, "%s: indptr differs at %lld: got %d, want %d", what, (long long)d, d >= 0 ? g_ptr[d] : 0, d >= 0 ? e_ptr[d] : 0);
        d = first_diff_int(g_idx, e_idx, cap + V4_GUARD);
        CHECK(d < 0, "%s: indices differ at %lld: got %d, want %d", what, (long long)d, d >= 0 ? g_idx[d] : 0, d >= 0 ? e_idx[d] : 0);
        gpu_free(d_dense); gpu_free(d_lens); gpu_free(d_idx); gpu_free(d_ptr);
        free(e_dense); free(e_lens); free(e_idx); free(e_ptr); free(g_dense); free(g_lens); free(g_idx); free(g_ptr);
    }
}

/* A block table [rows, width] of page ids 0..max_id, about one in ten absent (-1 or -5),
 * and one id whose slots pass int32 (block sizes >= 2). */
static int32_t *v4_block_table(test_rng *rng, int rows, int width, int max_id) {
    int32_t *bt = (int32_t *)test_malloc((size_t)rows * width * 4 + 4);
    int64_t i;
    for (i = 0; i < (int64_t)rows * width; i++) bt[i] = rng_int(rng, 0, 9) == 0 ? (rng_int(rng, 0, 1) ? -1 : -5) : rng_int(rng, 0, max_id);
    bt[rng_int(rng, 0, rows * width - 1)] = 1 << 30;
    return bt;
}
/* A device copy of n ints (one int allocated at least), freed by the caller */
static int32_t *v4_up(const int32_t *h, int64_t n) { return (int32_t *)upload_copy(h, (size_t)n * 4); }

/* Request layout of SWA and combine cases: q_lens (a fifth of them 0, all 0 when qmax = 0)
 * from query_start_loc[0] = lead, keys = q_len + a prefix (a quarter 0, else up to
 * prefix_max). */
static void v4_requests(test_rng *rng, int nreq, int lead, int qmax, int prefix_max, int32_t *qsl, int32_t *seq) {
    int b;
    qsl[0] = lead;
    for (b = 0; b < nreq; b++) {
        const int q = qmax == 0 || rng_int(rng, 0, 4) == 0 ? 0 : rng_int(rng, 1, qmax);
        qsl[b + 1] = qsl[b] + q;
        seq[b] = q + (rng_int(rng, 0, 3) == 0 ? 0 : rng_int(rng, 0, prefix_max));
    }
}

/* flags: 1 token_to_req (with wrong requests), 2 is_valid_token, 4 token_offset and tokens
 * outside every request, 8 a request with seq_len < q_len on the device only */
static void v4_swa_case(test_rng *rng, int nreq, int window, int bs, int qmax, int flags) {
    const int W = window ? window : 128, bs_r = bs ? bs : 64;
    int32_t *qsl = (int32_t *)test_malloc((size_t)(nreq + 1) * 4), *seq = (int32_t *)test_malloc((size_t)nreq * 4);
    int32_t *seq_d = (int32_t *)test_malloc((size_t)nreq * 4), *t2r, *bt, *d_qsl, *d_seq, *d_t2r, *d_bt;
    uint8_t *valid, *empty;
    int64_t n_all, off, T, t, max_seq = 1;
    int b, btw, bad = -1;
    aiter_mla_v4_swa_index_args h, d;
    v4_builder vb;
    v4_requests(rng, nreq, flags & 4 ? rng_int(rng, 0, 5) : 0, qmax, 3 * W + 300, qsl, seq);
    for (b = 0; b < nreq; b++) max_seq = seq[b] > max_seq ? seq[b] : max_seq;
    n_all = qsl[nreq] + (flags & 4 ? rng_int(rng, 0, 4) : 0);
    off = flags & 4 ? rng_int(rng, 0, n_all < 7 ? (int)n_all : 7) : 0;
    T = n_all - off;
    t2r = (int32_t *)test_malloc((size_t)n_all * 4 + 4);
    valid = (uint8_t *)test_malloc((size_t)n_all + 1);
    empty = (uint8_t *)test_calloc((size_t)T + 1);
    for (t = 0; t < n_all; t++) {
        t2r[t] = -1;
        for (b = 0; b < nreq; b++)
            if (t >= qsl[b] && t < qsl[b + 1]) t2r[t] = b;
        if ((flags & 1) && rng_int(rng, 0, 15) == 0) t2r[t] = rng_int(rng, -2, nreq + 1); /* any request, in range or not */
        valid[t] = !(flags & 2) || rng_int(rng, 0, 7) != 0;
    }
    memcpy(seq_d, seq, (size_t)nreq * 4);
    if (flags & 8)
        for (b = 0; b < nreq; b++)
            if (qsl[b + 1] > qsl[b]) bad = b;
    if (bad >= 0) { /* the GPU leaves the tokens it would give to request `bad` empty */
        seq_d[bad] = qsl[bad + 1] - qsl[bad] - 1;
        for (t = 0; t < T; t++) empty[t] = t2r[off + t] == bad; /* t2r: the request each token is given */
    }
    btw = (max_seq + bs_r - 1) / bs_r;
    btw = btw > 2 && rng_int(rng, 0, 1) ? btw - 1 : btw; /* the last pages of the longest request beyond the table */
    bt = v4_block_table(rng, nreq, btw, 5000);
    d_qsl = v4_up(qsl, nreq + 1);
    d_seq = v4_up(seq_d, nreq);
    d_t2r = v4_up(t2r, n_all);
    d_bt = v4_up(bt, (int64_t)nreq * btw);
    memset(&h, 0, sizeof h);
    h.query_start_loc = qsl;
    h.seq_lens = seq;
    h.token_to_req = flags & 1 ? t2r : NULL;
    h.is_valid_token = flags & 2 ? valid : NULL;
    h.block_table = bt;
    h.block_table_stride = btw;
    h.block_size = bs;
    h.window = window;
    h.num_reqs = nreq;
    h.token_offset = off;
    h.num_tokens = T;
    d = h;
    d.query_start_loc = d_qsl;
    d.seq_lens = d_seq;
    d.token_to_req = flags & 1 ? d_t2r : NULL;
    d.is_valid_token = flags & 2 ? (const uint8_t *)upload_copy(valid, (size_t)n_all) : NULL;
    d.block_table = d_bt;
    memset(&vb, 0, sizeof vb);
    snprintf(vb.what, sizeof vb.what, "v4_swa_indices reqs=%d W=%d bs=%d T=%lld offset %lld%s%s%s", nreq, W, bs_r, (long long)T,
             (long long)off, flags & 1 ? " token_to_req" : "", flags & 2 ? " is_valid_token" : "",
             bad >= 0 ? " seq_len < q_len on the device" : "");
    vb.h = &h;
    vb.d = &d;
    vb.ref = v4_swa_ref;
    vb.gpu = v4_swa_gpu;
    vb.T = T;
    vb.width = W;
    vb.empty = bad >= 0 ? empty : NULL;
    check_v4_builder(&vb, rng);
    gpu_free(d_qsl); gpu_free(d_seq); gpu_free(d_t2r); gpu_free(d_bt);
    if (d.is_valid_token) gpu_free((void *)d.is_valid_token);
    free(qsl); free(seq); free(seq_d); free(t2r); free(bt); free(valid); free(empty);
}

static void v4_topk_case(test_rng *rng, int64_t T, int topk, int pad, int bs, int nreq, int with_valid) {
    const int bs_r = bs ? bs : 64, btw = rng_int(rng, 1, 40), stride = topk + pad;
    int32_t *idx = (int32_t *)test_malloc((size_t)(T * stride) * 4 + 4), *t2r = (int32_t *)test_malloc((size_t)T * 4 + 4);
    int32_t *bt = v4_block_table(rng, nreq, btw, 100000);
    uint8_t *valid = (uint8_t *)test_malloc((size_t)T + 1);
    aiter_mla_v4_topk_args h, d;
    v4_builder vb;
    int64_t t;
    int k;
    for (t = 0; t < T; t++) {
        const int kind = rng_int(rng, 0, 4), first = rng_int(rng, 0, topk); /* none, all, vLLM's valid-first, holes, sparse */
        for (k = 0; k < stride; k++) {
            const int32_t v = rng_int(rng, 0, btw * bs_r + bs_r); /* a few past the table */
            idx[t * stride + k] = k >= topk ? v                     /* the stride's tail is never read */
                                  : kind == 0 ? -1
                                  : kind == 1 ? v
                                  : kind == 2 ? (k < first ? v : -1)
                                  : rng_int(rng, 0, kind == 3 ? 2 : 9) == 0 ? v : -1;
            if (k < topk && kind == 3 && idx[t * stride + k] < 0 && rng_int(rng, 0, 1)) idx[t * stride + k] = -7;
        }
        t2r[t] = rng_int(rng, 0, 15) == 0 ? (rng_int(rng, 0, 1) ? -1 : nreq) : rng_int(rng, 0, nreq - 1);
        valid[t] = rng_int(rng, 0, 7) != 0;
    }
    memset(&h, 0, sizeof h);
    h.topk_indices = idx;
    h.topk_stride = pad ? stride : 0;
    h.topk = topk;
    h.token_to_req = t2r;
    h.is_valid_token = with_valid ? valid : NULL;
    h.block_table = bt;
    h.block_table_stride = btw;
    h.block_size = bs;
    h.num_reqs = nreq;
    h.num_tokens = T;
    d = h;
    d.topk_indices = v4_up(idx, T * stride);
    d.token_to_req = v4_up(t2r, T);
    d.is_valid_token = with_valid ? (const uint8_t *)upload_copy(valid, (size_t)T) : NULL;
    d.block_table = v4_up(bt, (int64_t)nreq * btw);
    memset(&vb, 0, sizeof vb);
    snprintf(vb.what, sizeof vb.what, "v4_global_topk T=%lld topk=%d stride %d bs=%d reqs=%d%s", (long long)T, topk, stride, bs_r,
             nreq, with_valid ? " is_valid_token" : "");
    vb.h = &h;
    vb.d = &d;
    vb.ref = v4_topk_ref;
    vb.gpu = v4_topk_gpu;
    vb.T = T;
    vb.width = topk;
    check_v4_builder(&vb, rng);
    gpu_free((void *)d.topk_indices); gpu_free((void *)d.token_to_req); gpu_free((void *)d.block_table);
    if (d.is_valid_token) gpu_free((void *)d.is_valid_token);
    free(idx); free(t2r); free(bt); free(valid);
}

static void v4_c128_case(test_rng *rng, int64_t T, int width, int ratio, int global, int bs, int with_valid) {
    const int r = ratio ? ratio : 128, bs_r = bs ? bs : 2, nreq = rng_int(rng, 1, 6), btw = rng_int(rng, 1, width / bs_r + 3);
    int64_t *pos = (int64_t *)test_malloc((size_t)T * 8 + 8);
    int32_t *t2r = (int32_t *)test_malloc((size_t)T * 4 + 4), *bt = v4_block_table(rng, nreq, btw, 100000);
    uint8_t *valid = (uint8_t *)test_malloc((size_t)T + 1);
    aiter_mla_v4_c128_args h, d;
    v4_builder vb;
    int64_t t;
    for (t = 0; t < T; t++) {
        const int kind = rng_int(rng, 0, 9);
        pos[t] = kind == 0 ? -rng_int(rng, 1, 1000) : kind == 1 ? (int64_t)1 << 40 : kind == 2 ? (int64_t)r * rng_int(rng, 0, width + 2) - 1
                                                                                             : rng_int(rng, 0, r * (width + 3));
        t2r[t] = rng_int(rng, 0, 15) == 0 ? (rng_int(rng, 0, 1) ? -3 : nreq) : rng_int(rng, 0, nreq - 1);
        valid[t] = rng_int(rng, 0, 7) != 0;
    }
    memset(&h, 0, sizeof h);
    h.positions = pos;
    h.token_to_req = global ? t2r : NULL;
    h.is_valid_token = with_valid ? valid : NULL;
    h.block_table = global ? bt : NULL;
    h.block_table_stride = btw;
    h.block_size = bs;
    h.num_reqs = nreq;
    h.compress_ratio = ratio;
    h.width = width;
    h.num_tokens = T;
    d = h;
    d.positions = (const int64_t *)upload_copy(pos, (size_t)T * 8);
    d.token_to_req = global ? v4_up(t2r, T) : NULL;
    d.is_valid_token = with_valid ? (const uint8_t *)upload_copy(valid, (size_t)T) : NULL;
    d.block_table = global ? v4_up(bt, (int64_t)nreq * btw) : NULL;
    memset(&vb, 0, sizeof vb);
    snprintf(vb.what, sizeof vb.what, "v4_c128_indices %s T=%lld width=%d ratio=%d bs=%d%s", global ? "global" : "local", (long long)T,
             width, r, bs_r, with_valid ? " is_valid_token" : "");
    vb.h = &h;
    vb.d = &d;
    vb.ref = v4_c128_ref;
    vb.gpu = v4_c128_gpu;
    vb.T = T;
    vb.width = width;
    check_v4_builder(&vb, rng);
    gpu_free((void *)d.positions);
    if (global) {
        gpu_free((void *)d.token_to_req);
        gpu_free((void *)d.block_table);
    }
    if (d.is_valid_token) gpu_free((void *)d.is_valid_token);
    free(pos); free(t2r); free(bt); free(valid);
}

/* gl: 0 gather_lens NULL, 1 random in the allowed range; bad: the device's gather_lens
 * (one request one short of its window) and seq_lens (another below its q_len) are refused
 * by the reference, the GPU empties those requests' tokens */
static void v4_combine_case(test_rng *rng, int nreq, int ratio, int topk, int window, int qmax, int gl, int bad) {
    const int W = window ? window : 128, r = ratio ? ratio : 1, pad = rng_int(rng, 0, 1) * 3, stride = topk + pad;
    int32_t *qsl = (int32_t *)test_malloc((size_t)(nreq + 1) * 4), *seq = (int32_t *)test_malloc((size_t)nreq * 4);
    int32_t *glens = (int32_t *)test_malloc((size_t)nreq * 4), *glens_d = (int32_t *)test_malloc((size_t)nreq * 4);
    int32_t *seq_d = (int32_t *)test_malloc((size_t)nreq * 4), *idx;
    int64_t T, t, max_seq = 0, max_g = 0, N, M;
    int b, bad_g = -1, bad_s = -1;
    uint8_t *empty;
    aiter_mla_v4_combine_args h, d;
    v4_builder vb;
    v4_requests(rng, nreq, rng_int(rng, 0, 20), qmax, 700, qsl, seq);
    T = qsl[nreq] - qsl[0];
    for (b = 0; b < nreq; b++) {
        const int32_t q = qsl[b + 1] - qsl[b], lo = q + (seq[b] - q < W - 1 ? seq[b] - q : W - 1);
        glens[b] = gl ? rng_int(rng, lo, seq[b]) : lo;
        max_seq = seq[b] > max_seq ? seq[b] : max_seq;
        max_g = glens[b] > max_g ? glens[b] : max_g;
    }
    N = r > 1 ? (max_seq + rng_int(rng, 0, 300) + r - 1) / r : 0;
    if (N > 4 && rng_int(rng, 0, 2) == 0) N /= 2; /* fewer compressed rows than the longest request has */
    M = N + max_g + rng_int(rng, 0, 5);
    idx = (int32_t *)test_malloc((size_t)(T * stride) * 4 + 4);
    for (t = 0; t < T * stride; t++) idx[t] = rng_int(rng, 0, 5) == 0 ? -1 : rng_int(rng, -1, (int)N + 5);
    memcpy(glens_d, glens, (size_t)nreq * 4);
    memcpy(seq_d, seq, (size_t)nreq * 4);
    empty = (uint8_t *)test_calloc((size_t)T + 1);
    if (bad)
        for (b = 0; b < nreq; b++) {
            if (qsl[b + 1] == qsl[b]) continue;
            if (bad_g < 0) bad_g = b;
            else if (bad_s < 0) bad_s = b;
        }
    if (bad_g >= 0) { /* one short of q_len + min(prefix, W - 1) */
        const int32_t q = qsl[bad_g + 1] - qsl[bad_g], prefix = seq[bad_g] - q;
        glens_d[bad_g] = q + (prefix < W - 1 ? prefix : W - 1) - 1;
    }
    if (bad_s >= 0) seq_d[bad_s] = qsl[bad_s + 1] - qsl[bad_s] - 1;
    for (b = 0; b < nreq; b++)
        if (b == bad_g || b == bad_s)
            for (t = qsl[b] - qsl[0]; t < qsl[b + 1] - qsl[0]; t++) empty[t] = 1;
    memset(&h, 0, sizeof h);
    h.topk_indices = topk ? idx : NULL;
    h.topk_stride = pad ? stride : 0;
    h.topk = topk;
    h.query_start_loc = qsl;
    h.seq_lens = seq;
    h.gather_lens = gl ? glens : NULL;
    h.num_reqs = nreq;
    h.window = window;
    h.compress_ratio = ratio;
    h.M = M;
    h.N = N;
    d = h;
    d.topk_indices = topk ? v4_up(idx, T * stride) : NULL;
    d.query_start_loc = v4_up(qsl, nreq + 1);
    d.seq_lens = v4_up(seq_d, nreq);
    d.gather_lens = gl || bad_g >= 0 ? v4_up(glens_d, nreq) : NULL;
    memset(&vb, 0, sizeof vb);
    snprintf(vb.what, sizeof vb.what, "v4_combine reqs=%d T=%lld ratio=%d topk=%d W=%d N=%lld M=%lld%s%s%s", nreq, (long long)T, r,
             topk, W, (long long)N, (long long)M, gl ? " gather_lens" : "", bad_g >= 0 ? " bad gather_len on the device" : "",
             bad_s >= 0 ? " bad seq_len on the device" : "");
    vb.h = &h;
    vb.d = &d;
    vb.ref = v4_comb_ref;
    vb.gpu = v4_comb_gpu;
    vb.T = T;
    vb.width = topk + W;
    vb.empty = bad ? empty : NULL;
    check_v4_builder(&vb, rng);
    if (d.topk_indices) gpu_free((void *)d.topk_indices);
    gpu_free((void *)d.query_start_loc); gpu_free((void *)d.seq_lens);
    if (d.gather_lens) gpu_free((void *)d.gather_lens);
    free(qsl); free(seq); free(glens); free(glens_d); free(seq_d); free(idx); free(empty);
}

/* Arbitrary request arrays (query_start_loc not monotone, negative, seq_lens and gather_lens
 * anything): the GPU builders must still write well-formed lists inside their buffers
 * (guards intact, lengths in 0..width, indptr their running sum, dense rows -1 padded). */
static void v4_garbage_case(test_rng *rng, int combine) {
    const int nreq = rng_int(rng, 1, 9), W = combine ? 16 : 128, topk = combine ? 8 : 0;
    const int64_t T = 300, width = topk + W, cap = T * width;
    int32_t qsl[10], seq[9], gls[9], bt[9 * 4], *idx = (int32_t *)test_malloc((size_t)(T * topk) * 4 + 4);
    int32_t *lens = v4_poisoned(T), *ptr = v4_poisoned(T + 1), *dense = v4_poisoned(T * width), *ind = v4_poisoned(cap);
    int32_t *d_lens = v4_dev_poisoned(T), *d_ptr = v4_dev_poisoned(T + 1), *d_dense = v4_dev_poisoned(T * width),
            *d_ind = v4_dev_poisoned(cap), *d_qsl, *d_seq, *d_gls, *d_bt, *d_idx;
    aiter_mla_v4_index_out o;
    int64_t t, k, bad = 0, guard = 0;
    int b;
    for (b = 0; b <= nreq; b++) qsl[b] = rng_int(rng, -50, 400);
    if (combine) { /* the row count comes from the ends: keep it inside the buffers */
        qsl[0] = rng_int(rng, -20, 20);
        qsl[nreq] = qsl[0] + (int32_t)T;
    }
    for (b = 0; b < nreq; b++) {
        seq[b] = rng_int(rng, -10, 500);
        gls[b] = rng_int(rng, -10, 600);
    }
    for (b = 0; b < 9 * 4; b++) bt[b] = rng_int(rng, -2, 100);
    for (t = 0; t < T * topk; t++) idx[t] = rng_int(rng, -3, 300);
    d_qsl = v4_up(qsl, nreq + 1);
    d_seq = v4_up(seq, nreq);
    d_gls = v4_up(gls, nreq);
    d_bt = v4_up(bt, 9 * 4);
    d_idx = v4_up(idx, T * topk);
    memset(&o, 0, sizeof o);
    o.dense = d_dense;
    o.lens = d_lens;
    o.indices = d_ind;
    o.indptr = d_ptr;
    o.capacity = cap;
    if (combine) {
        aiter_mla_v4_combine_args a;
        memset(&a, 0, sizeof a);
        a.topk_indices = d_idx;
        a.topk = topk;
        a.query_start_loc = d_qsl;
        a.seq_lens = d_seq;
        a.gather_lens = d_gls;
        a.num_reqs = nreq;
        a.window = W;
        a.compress_ratio = 4;
        a.N = 100;
        a.M = 400;
        a.out = o;
        CHECK_STATUS(aiter_mla_v4_combine(&a, g_stream), AITER_MLA_OK, "");
    } else {
        aiter_mla_v4_swa_index_args a;
        memset(&a, 0, sizeof a);
        a.query_start_loc = d_qsl;
        a.seq_lens = d_seq;
        a.block_table = d_bt;
        a.block_table_stride = 4;
        a.block_size = 16;
        a.num_reqs = nreq;
        a.num_tokens = T;
        a.out = o;
        CHECK_STATUS(aiter_mla_v4_swa_indices(&a, g_stream), AITER_MLA_OK, "");
    }
    gpu_sync();
    gpu_download(lens, d_lens, (size_t)(T + V4_GUARD) * 4);
    gpu_download(ptr, d_ptr, (size_t)(T + 1 + V4_GUARD) * 4);
    gpu_download(dense, d_dense, (size_t)(T * width + V4_GUARD) * 4);
    gpu_download(ind, d_ind, (size_t)(cap + V4_GUARD) * 4);
    bad += ptr[0] != 0;
    for (t = 0; t < T; t++) {
        bad += lens[t] < 0 || lens[t] > width || ptr[t + 1] != ptr[t] + lens[t];
        for (k = 0; k < width; k++)
            if (k < lens[t]) bad += dense[t * width + k] != ind[ptr[t] + k];
            else bad += dense[t * width + k] != -1;
    }
    for (k = ptr[T]; k < cap; k++) bad += ind[k] != V4_POISON;
    for (k = 0; k < V4_GUARD; k++)
        guard += lens[T + k] != V4_POISON || ptr[T + 1 + k] != V4_POISON || dense[T * width + k] != V4_POISON || ind[cap + k] != V4_POISON;
    CHECK(bad == 0 && guard == 0, "v4 %s on arbitrary request arrays (reqs=%d): %lld inconsistent outputs, %lld guard ints written",
          combine ? "combine" : "swa_indices", nreq, (long long)bad, (long long)guard);
    gpu_free(d_lens); gpu_free(d_ptr); gpu_free(d_dense); gpu_free(d_ind);
    gpu_free(d_qsl); gpu_free(d_seq); gpu_free(d_gls); gpu_free(d_bt); gpu_free(d_idx);
    free(idx); free(lens); free(ptr); free(dense); free(ind);
}

/* Ragged copy: the GPU's buffers and num_dropped against the reference with clamp = 1 (the
 * GPU cuts long rows whatever clamp says); bad: an indptr the reference refuses (a row going
 * back, one starting below 0 and one ending past indptr[num_rows]), expected from the rule
 * the header states (such rows are copied empty); no_indices: indices NULL, every row empty. */
static void v4_copy_case(test_rng *rng, int64_t R, int max_e, int long_rows, int clamp, int bad, int no_indices) {
    const int64_t cap = (R * max_e > 1 ? R * max_e : 1) + rng_int(rng, 0, 3), pcap = R + 1 + rng_int(rng, 0, 2);
    int32_t *ptr = (int32_t *)test_malloc((size_t)(R + 1) * 4), *in, *d_in, *d_ptr;
    int32_t *e_ib = v4_poisoned(cap), *e_pb = v4_poisoned(pcap), *g_ib = v4_poisoned(cap), *g_pb = v4_poisoned(pcap);
    int32_t *d_ib = v4_dev_poisoned(cap), *d_pb = v4_dev_poisoned(pcap);
    int64_t r, i, n_in, e_drop = 0, g_drop = -77, *d_drop = (int64_t *)gpu_malloc(8), d;
    aiter_mla_v4_ragged_copy_args a;
    char what[200];
    ptr[0] = rng_int(rng, 0, 10);
    for (r = 0; r < R; r++)
        ptr[r + 1] = ptr[r] + (long_rows && rng_int(rng, 0, 3) == 0 ? rng_int(rng, max_e + 1, 2 * max_e + 3) : rng_int(rng, 0, max_e));
    n_in = ptr[R];
    in = (int32_t *)test_malloc((size_t)n_in * 4 + 4);
    for (i = 0; i < n_in; i++) in[i] = rng_int(rng, -5, 1 << 30);
    d_in = v4_up(in, n_in);
    gpu_upload(d_drop, &g_drop, 8);
    memset(&a, 0, sizeof a);
    a.indices = in;
    a.indptr = ptr;
    a.num_rows = R;
    a.max_entries_per_row = max_e;
    a.indices_buffer = e_ib;
    a.indices_buffer_capacity = cap;
    a.indptr_buffer = e_pb;
    a.indptr_buffer_capacity = pcap;
    a.clamp = 1;
    a.num_dropped = &e_drop;
    if (!bad && !no_indices) {
        CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&a), AITER_MLA_OK, "");
    } else {
        if (bad && R >= 4) { /* rows 1, 2 and R - 1 are refused */
            ptr[2] = ptr[1] - 1;
            ptr[R] = ptr[R - 1] - 1; /* row R - 1 goes back, and lowers indptr[num_rows] for every row */
        }
        if (bad && R >= 1) ptr[0] = -3;
        e_pb[0] = 0;
        for (r = 0; r < R; r++) { /* the header's rule, written out */
            const int64_t lo = ptr[r], hi = ptr[r + 1], ok = !no_indices && lo >= 0 && hi >= lo && hi <= ptr[R];
            const int64_t n = ok ? (hi - lo < max_e ? hi - lo : max_e) : 0;
            for (i = 0; i < n; i++) e_ib[e_pb[r] + i] = in[lo + i];
            e_pb[r + 1] = (int32_t)(e_pb[r] + n);
            e_drop += ok ? hi - lo - n : 0;
        }
    }
    d_ptr = v4_up(ptr, R + 1);
    a.indices = no_indices ? NULL : d_in;
    a.indptr = d_ptr;
    a.indices_buffer = d_ib;
    a.indptr_buffer = d_pb;
    a.clamp = clamp;
    a.num_dropped = d_drop;
    snprintf(what, sizeof what, "v4_copy_ragged rows=%lld max=%d clamp=%d%s%s%s", (long long)R, max_e, clamp, long_rows ? " long rows" : "",
             bad ? " bad indptr" : "", no_indices ? " indices NULL" : "");
    CHECK_STATUS(aiter_mla_v4_copy_ragged(&a, g_stream), AITER_MLA_OK, "");
    gpu_sync();
    gpu_download(g_ib, d_ib, (size_t)(cap + V4_GUARD) * 4);
    gpu_download(g_pb, d_pb, (size_t)(pcap + V4_GUARD) * 4);
    gpu_download(&g_drop, d_drop, 8);
    d = first_diff_int(g_pb, e_pb, pcap + V4_GUARD);
    CHECK(d < 0, "%s: indptr_buffer differs at %lld: got %d, want %d", what, (long long)d, d >= 0 ? g_pb[d] : 0, d >= 0 ? e_pb[d] : 0);
    d = first_diff_int(g_ib, e_ib, cap + V4_GUARD);
    CHECK(d < 0, "%s: indices_buffer differs at %lld: got %d, want %d", what, (long long)d, d >= 0 ? g_ib[d] : 0, d >= 0 ? e_ib[d] : 0);
    CHECK(g_drop == e_drop, "%s: num_dropped = %lld, want %lld", what, (long long)g_drop, (long long)e_drop);
    if (!bad && !no_indices) { /* num_dropped NULL: the same buffers */
        gpu_memset(d_ib, 0x7f, (size_t)(cap + V4_GUARD) * 4);
        gpu_memset(d_pb, 0x7f, (size_t)(pcap + V4_GUARD) * 4);
        a.num_dropped = NULL;
        CHECK_STATUS(aiter_mla_v4_copy_ragged(&a, g_stream), AITER_MLA_OK, "");
        gpu_sync();
        gpu_download(g_ib, d_ib, (size_t)(cap + V4_GUARD) * 4);
        gpu_download(g_pb, d_pb, (size_t)(pcap + V4_GUARD) * 4);
        CHECK(first_diff(g_pb, e_pb, (size_t)(pcap + V4_GUARD) * 4) < 0 && first_diff(g_ib, e_ib, (size_t)(cap + V4_GUARD) * 4) < 0,
              "%s, num_dropped NULL: buffers differ", what);
    }
    gpu_free(d_in); gpu_free(d_ptr); gpu_free(d_ib); gpu_free(d_pb); gpu_free(d_drop);
    free(ptr); free(in); free(e_ib); free(e_pb); free(g_ib); free(g_pb);
}

static void test_v4_index_builders_gpu(test_rng *rng) {
    const int big = !g_quick;
    int i;
    /* SWA: decode batches, prefill with long requests, small windows and pages, empty batches */
    v4_swa_case(rng, 1, 128, 64, 1, 0);
    v4_swa_case(rng, 37, 128, 64, 1, 1 | 2);
    v4_swa_case(rng, 5, 128, 16, 300, 1 | 2 | 4);
    v4_swa_case(rng, 8, 5, 3, 40, 2 | 4);
    v4_swa_case(rng, 3, 1, 1, 10, 1);
    v4_swa_case(rng, big ? 200 : 40, 0, 0, 64, 2);
    v4_swa_case(rng, 4, 0, 0, 30, 8);
    v4_swa_case(rng, 6, 200, 64, 100, 1 | 2 | 8);
    v4_swa_case(rng, 3, 128, 64, 0, 1 | 4); /* no token in any request */
    v4_swa_case(rng, 2, 128, 64, 0, 0);     /* num_tokens 0 */
    /* top-k (ratio 4 decode): -1 holes anywhere, requests out of range, padding tokens */
    v4_topk_case(rng, 0, 64, 0, 64, 3, 0);
    v4_topk_case(rng, 1, 1, 0, 64, 1, 0);
    v4_topk_case(rng, 37, 7, 3, 0, 4, 1);
    v4_topk_case(rng, 300, 512, 0, 64, 8, 1);
    v4_topk_case(rng, big ? 129 : 20, 2048, 4, 64, 5, 0);
    v4_topk_case(rng, big ? 2000 : 200, 64, 0, 2, 30, 1);
    v4_topk_case(rng, 5, 100, 1, 5, 2, 1);
    /* ratio 128 (and 4, 1): global and local forms */
    v4_c128_case(rng, 0, 8, 128, 1, 2, 0);
    v4_c128_case(rng, 1, 1, 128, 1, 2, 0);
    v4_c128_case(rng, 50, 100, 0, 1, 0, 1);
    v4_c128_case(rng, 50, 300, 4, 1, 64, 1);
    v4_c128_case(rng, 200, 64, 128, 0, 2, 1);
    v4_c128_case(rng, 33, 7, 1, 1, 3, 0);
    v4_c128_case(rng, big ? 1000 : 100, 40, 128, 1, 2, 1);
    /* combine (prefill chunks): ratios 4, 128 and 1, windows 128 and 5, gathered rows beyond the window */
    v4_combine_case(rng, 1, 4, 512, 0, 40, 0, 0);
    v4_combine_case(rng, 4, 128, 16, 128, 200, 1, 0);
    v4_combine_case(rng, 3, 0, 0, 0, 100, 1, 0);
    v4_combine_case(rng, 6, 4, 64, 5, 30, 1, 0);
    v4_combine_case(rng, 4, 4, 2048, 128, big ? 300 : 50, 0, 0);
    v4_combine_case(rng, 5, 4, 32, 128, 60, 1, 1);
    v4_combine_case(rng, 4, 128, 8, 5, 20, 0, 1);
    v4_combine_case(rng, 3, 4, 16, 128, 0, 0, 0); /* no token */
    for (i = 0; i < 6; i++) v4_garbage_case(rng, i % 2);
    /* ragged copy: rows within the limit, long rows with clamp 0 and 1, bad indptr, no rows */
    v4_copy_case(rng, 0, 4, 0, 0, 0, 0);
    v4_copy_case(rng, 1, 1, 0, 0, 0, 0);
    v4_copy_case(rng, 37, 5, 0, 0, 0, 0);
    v4_copy_case(rng, big ? 5000 : 500, 128, 0, 1, 0, 0);
    v4_copy_case(rng, 300, 7, 1, 1, 0, 0);
    v4_copy_case(rng, 300, 7, 1, 0, 0, 0);
    v4_copy_case(rng, 1000, 16, 1, 0, 1, 0);
    v4_copy_case(rng, 50, 16, 0, 1, 0, 1);
    v4_copy_case(rng, big ? 20000 : 2000, 2, 1, 0, 0, 0); /* several chunks of the scan */
}

static void test_merge_gpu(test_rng *rng) {
    static const struct { int64_t T; int H, D; } shapes[] = {
        {0, 1, 1}, {1, 1, 1}, {37, 3, 7}, {5, 16, 128}, {64, 16, 512}, {33, 2, 100}, {1024, 16, 128}, {3, 128, 576},
    };
    static const aiter_mla_dtype dts[] = {AITER_MLA_BF16, AITER_MLA_F16, AITER_MLA_F32};
    int s, k, n = 0;
    for (s = 0; s < (int)(sizeof shapes / sizeof shapes[0]); s++)
        for (k = 0; k < 3; k++, n++) {
            const int64_t T = g_quick && shapes[s].T > 64 ? 64 : shapes[s].T, H = shapes[s].H, D = shapes[s].D, rows = T * H;
            const aiter_mla_dtype t = dts[k];
            const size_t e = aiter_mla_dtype_size(t), shift = n % 4 == 3 ? e : 0; /* 1 element off 16 bytes: scalar path */
            const size_t ob = (size_t)(rows * D) * e + shift;
            const int with_lse = n % 3 != 2;
            void *op = test_malloc(ob + 1), *os = test_malloc(ob + 1);
            float *lp = (float *)test_malloc((size_t)rows * 4 + 4), *ls = (float *)test_malloc((size_t)rows * 4 + 4);
            void *d_o, *d_lse;
            unsigned char *o_ref = (unsigned char *)poisoned_pair(ob, 0xff, &d_o), *o_got = (unsigned char *)test_malloc(ob + 1);
            float *lse_ref = (float *)poisoned_pair((size_t)rows * 4, 0xff, &d_lse), *lse_got = (float *)test_malloc((size_t)rows * 4 + 4);
            int64_t i;
            char what[120];
            fill_random((char *)op + shift, rows * D, t, rng, -2.0f, 2.0f, 0.0f);
            fill_random((char *)os + shift, rows * D, t, rng, -2.0f, 2.0f, 0.0f);
            for (i = 0; i < rows; i++) { /* holes of either kind on either side, and both sides empty */
                const int r = rng_int(rng, 0, 19);
                lp[i] = r == 0 ? -INFINITY : r == 1 ? INFINITY : rng_f32(rng, -8.0f, 8.0f);
                ls[i] = r == 2 ? -INFINITY : r == 3 ? INFINITY : r == 4 ? (rng_int(rng, 0, 1) ? lp[i] : -INFINITY) : rng_f32(rng, -8.0f, 8.0f);
                if (r == 5) lp[i] = ls[i] = INFINITY;
                if (r == 6) lp[i] = -INFINITY, ls[i] = INFINITY;
            }
            void *d_op = upload_copy(op, ob), *d_os = upload_copy(os, ob);
            float *d_lp = (float *)upload_copy(lp, (size_t)rows * 4), *d_ls = (float *)upload_copy(ls, (size_t)rows * 4);
            aiter_mla_merge_args m;
            memset(&m, 0, sizeof m);
            m.o_prefix = (char *)d_op + shift;
            m.lse_prefix = d_lp;
            m.o_suffix = (char *)d_os + shift;
            m.lse_suffix = d_ls;
            m.o = (char *)d_o + shift;
            m.lse = with_lse ? (float *)d_lse : NULL;
            m.num_tokens = T;
            m.num_heads = (int)H;
            m.head_dim = (int)D;
            m.dtype = t;
            snprintf(what, sizeof what, "merge_attn_states T=%lld H=%d D=%d %s%s%s", (long long)T, (int)H, (int)D,
                     aiter_mla_dtype_name(t), with_lse ? " lse" : "", shift ? " misaligned" : "");
            CHECK_STATUS(aiter_mla_merge_attn_states(&m, g_stream), AITER_MLA_OK, "");
            gpu_sync();
            gpu_download(o_got, d_o, ob);
            gpu_download(lse_got, d_lse, (size_t)rows * 4);
            if (rows > 0) { /* o in place of one side (a running merge; the prefix by n): the same bits */
                void *d_io = upload_copy(n & 1 ? op : os, ob);
                unsigned char *io_got = (unsigned char *)test_malloc(ob + 1);
                aiter_mla_merge_args mi = m;
                if (n & 1) mi.o_prefix = (char *)d_io + shift;
                else mi.o_suffix = (char *)d_io + shift;
                mi.o = (char *)d_io + shift;
                mi.lse = NULL;
                CHECK_STATUS(aiter_mla_merge_attn_states(&mi, g_stream), AITER_MLA_OK, "");
                gpu_download(io_got, d_io, ob);
                CHECK(first_diff(io_got + shift, o_got + shift, ob - shift) < 0, "%s: o in place of %s differs", what,
                      n & 1 ? "o_prefix" : "o_suffix");
                gpu_free(d_io);
                free(io_got);
            }
            m.o_prefix = (char *)op + shift;
            m.lse_prefix = lp;
            m.o_suffix = (char *)os + shift;
            m.lse_suffix = ls;
            m.o = o_ref + shift;
            m.lse = with_lse ? lse_ref : NULL;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&m), AITER_MLA_OK, "");
            if (rows > 0) {
                float *g = (float *)test_malloc((size_t)(rows * D) * 4), *f = (float *)test_malloc((size_t)(rows * D) * 4);
                to_f32(o_got + shift, g, rows * D, t);
                to_f32(o_ref + shift, f, rows * D, t);
                CHECK_CLOSE(what, g, f, rows * D, TOL_BF16_REL, TOL_BF16_COS);
                if (with_lse) CHECK_LSE(what, lse_got, lse_ref, rows);
                else CHECK(first_diff(lse_got, lse_ref, (size_t)rows * 4) < 0, "%s: lse written without being asked for", what);
                free(g);
                free(f);
            }
            CHECK(shift == 0 || first_diff(o_got, o_ref, shift) < 0, "%s: wrote before o", what);
            gpu_free(d_op); gpu_free(d_os); gpu_free(d_lp); gpu_free(d_ls); gpu_free(d_o); gpu_free(d_lse);
            free(op); free(os); free(lp); free(ls); free(o_ref); free(o_got); free(lse_ref); free(lse_got);
        }
}

/* A NaN in one key (a NaN, or an inf, in a cache makes NaN scores): the rows that see it have
 * NaN o and lse, on every kernel as in the reference (never an empty row's o = 0), and the other
 * rows stay right. Each case plants one NaN value (run_*_case's nan_key / nan_slot) and checks
 * both halves. */
static void test_nan_rows(test_rng *rng) {
    struct { int heads, q_len, page, num_cu; aiter_mla_dtype q, kv; } dv[] = {
        {16, 1, 64, 7, AITER_MLA_BF16, AITER_MLA_BF16},                 /* 16-row mma, split pieces */
        {16, 2, 1, 3, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN},            /* 16-row, f16 products */
        {16, 1, 16, 5, AITER_MLA_F16, AITER_MLA_F16},                   /* f16: the portable kernel */
        {128, 1, 64, 9, AITER_MLA_BF16, AITER_MLA_BF16},                /* warpgroup, TMA tiles, counted reduce */
        {64, 2, 16, 5, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN},           /* warpgroup, widened fp8 rows */
        {128, 1, 1, 4, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_FP8_E4M3FNUZ}, /* e4m3fnuz */
    };
    const int before = testing_failed;
    int32_t ctx[8];
    int k, b;
    for (k = 0; k < (int)(sizeof dv / sizeof dv[0]); k++) {
        decode_case c = decode_case_of(dv[k].heads, dv[k].q_len, dv[k].page, 5, dv[k].num_cu, dv[k].q, dv[k].kv, AITER_MLA_BF16, ctx);
        c.nan_key = 1;
        for (b = 0; b < c.batch; b++) ctx[b] = rng_int(rng, 200, 900);
        run_decode_case(&c, rng);
    }
    for (k = 0; k < 4; k++) {
        sparse_case c;
        memset(&c, 0, sizeof c);
        c.tokens = 3;
        c.heads = k % 2 ? 128 : 16;
        c.topk = 256;
        c.cache = k < 2 ? 0 : k - 1; /* bf16 rows twice, then fp8_ds_mla e4m3fn and e4m3fnuz */
        c.q_dtype = c.o_dtype = AITER_MLA_BF16;
        c.with_length = k % 2;
        c.with_sink = k >= 2;
        c.holes = 10;
        c.num_cu = k == 1 ? 2 : 0;
        c.nan_slot = 1;
        run_sparse_case(&c, rng);
    }
    for (k = 0; k < 4; k++) {
        static const aiter_mla_dtype types[] = {AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN, AITER_MLA_F16, AITER_MLA_BF16};
        prefill_case c = prefill_case_of(16, 192, 128, 4, k % 2, 200, types[k], types[k] == AITER_MLA_F16 ? AITER_MLA_F16 : AITER_MLA_BF16);
        c.plan_cu = k == 3 ? 7 : 0; /* split tiles through the reduce */
        c.nan_key = 1;
        run_prefill_case(&c, rng);
    }
    printf("NaN rows: %s\n", testing_failed == before ? "ok" : "FAILED");
}

/* Scores of -inf (an infinite key value against a finite q value of its sign) weigh 0, as
 * masked keys do, on every decode kernel that takes 16-bit caches: rows that see such a key
 * among others match the reference, rows that see only such keys come out empty (o 0, lse
 * +inf), split pieces included (run_decode_case's neg_inf_key). */
static void test_neg_inf_scores(test_rng *rng) {
    struct { int heads, q_len, page, num_cu; aiter_mla_dtype t; } dv[] = {
        {16, 1, 64, 7, AITER_MLA_BF16},  /* 16-row mma, split pieces */
        {16, 2, 1, 3, AITER_MLA_BF16},   /* 16-row mma, pages of one */
        {128, 1, 64, 9, AITER_MLA_BF16}, /* warpgroup, lazy maxima, counted reduce */
        {64, 2, 16, 5, AITER_MLA_BF16},  /* warpgroup, two tokens a request */
        {16, 1, 16, 5, AITER_MLA_F16},   /* f16: the portable kernel */
        {1, 1, 64, 2, AITER_MLA_BF16},   /* one head */
    };
    const int before = testing_failed;
    int32_t ctx[4];
    int k, b;
    for (k = 0; k < (int)(sizeof dv / sizeof dv[0]); k++) {
        decode_case c = decode_case_of(dv[k].heads, dv[k].q_len, dv[k].page, 4, dv[k].num_cu, dv[k].t, dv[k].t, dv[k].t, ctx);
        c.neg_inf_key = 1;
        for (b = 0; b < c.batch; b++) ctx[b] = rng_int(rng, 100, 700);
        run_decode_case(&c, rng);
    }
    printf("-inf scores: %s\n", testing_failed == before ? "ok" : "FAILED");
}

/* Caches past 4 GiB (far_cache_upload): every attention kernel's key addresses in 64 bits. Decode
 * on each kernel (16-row mma.sync over pages of 64 and of one, the e4m3fn kernel over both, the
 * warpgroup kernel by TMA, by cp.async and over e4m3 rows, the wide reduce of one request, the
 * portable kernel), sparse attention over bf16 and fp8_ds_mla rows at 16 and 128 heads, V4 over
 * MODEL1 pages, bf16 and f32 rows at 16, 64 and 128 heads, with and without splits; prefill with
 * q, k, v and o at token strides that put their last rows past 4 GiB (the warpgroup kernel by
 * TMA, with a plan, over e4m3fn, f16, the portable kernel's odd strides, 64/64); the paged gathers
 * (gather_cache, v4_gather). One case's device buffers at a time: about 4.3 GiB each. */
static void test_far_caches(test_rng *rng) {
    struct { int heads, q_len, page, batch, num_cu; aiter_mla_dtype q, kv; } dv[] = {
        {16, 1, 64, 5, 7, AITER_MLA_BF16, AITER_MLA_BF16},
        {16, 2, 1, 4, 3, AITER_MLA_BF16, AITER_MLA_BF16},
        {16, 1, 64, 5, 5, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN},
        {16, 1, 1, 4, 3, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FN},
        {128, 1, 64, 3, 9, AITER_MLA_BF16, AITER_MLA_BF16},
        {64, 2, 16, 4, 5, AITER_MLA_BF16, AITER_MLA_BF16},
        {128, 1, 64, 3, 5, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN},
        {64, 1, 1, 4, 5, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_FP8_E4M3FNUZ},
        {16, 1, 64, 1, 64, AITER_MLA_BF16, AITER_MLA_BF16},
        {16, 1, 16, 4, 5, AITER_MLA_F16, AITER_MLA_F16},
    };
    struct { int heads, topk, cache; aiter_mla_dtype q; } sv[] = {
        {128, 2048, 0, AITER_MLA_BF16}, {128, 2048, 1, AITER_MLA_BF16}, {16, 64, 2, AITER_MLA_BF16}, {16, 63, 0, AITER_MLA_F16},
    };
    struct { int heads, format0, format1, splits; aiter_mla_dtype q; } vv[] = {
        {16, 0, 0, 1, AITER_MLA_BF16}, {16, 0, 0, 3, AITER_MLA_BF16}, {64, 0, -1, 1, AITER_MLA_BF16},
        {128, 1, -1, 1, AITER_MLA_BF16}, {16, 0, 2, 1, AITER_MLA_F16},
    };
    struct { int heads, dqk, dv, causal, plan_cu, grid_cu, odd; aiter_mla_dtype t; } pv[] = {
        {128, 192, 128, 1, 0, 132, 0, AITER_MLA_BF16}, {16, 192, 128, 0, 7, 0, 0, AITER_MLA_BF16},
        {16, 192, 128, 1, 0, 0, 0, AITER_MLA_FP8_E4M3FN}, {8, 128, 128, 0, 0, 5, 0, AITER_MLA_F16},
        {4, 192, 128, 1, 0, 0, 1, AITER_MLA_BF16}, {4, 64, 64, 1, 0, 0, 0, AITER_MLA_BF16},
    };
    const int before = testing_failed;
    int32_t ctx[5];
    int k, b;
    if (g_quick) { /* the sanitizers' sweep: gigabytes of allocations add nothing there */
        printf("caches past 4 GiB: not in the quick sweep\n");
        return;
    }
    /* a prefill case holds four far buffers, a V4 case two */
    if (gpu_mem_bytes() < ((size_t)(4 * kFarMiB + 2048) << 20)) {
        printf("caches past 4 GiB: not run (the device has %zu MiB; the cases need about %d)\n", gpu_mem_bytes() >> 20, 4 * kFarMiB + 2048);
        return;
    }
    for (k = 0; k < (int)(sizeof dv / sizeof dv[0]); k++) {
        decode_case c = decode_case_of(dv[k].heads, dv[k].q_len, dv[k].page, dv[k].batch, dv[k].num_cu, dv[k].q, dv[k].kv, AITER_MLA_BF16,
                                       ctx);
        c.far = 1;
        for (b = 0; b < c.batch; b++) ctx[b] = c.batch == 1 ? 3000 : rng_int(rng, 1, 900);
        run_decode_case(&c, rng);
    }
    for (k = 0; k < (int)(sizeof sv / sizeof sv[0]); k++) {
        sparse_case c;
        memset(&c, 0, sizeof c);
        c.tokens = 4;
        c.heads = sv[k].heads;
        c.topk = sv[k].topk;
        c.cache = sv[k].cache;
        c.q_dtype = sv[k].q;
        c.o_dtype = AITER_MLA_BF16;
        c.with_length = c.with_sink = k % 2;
        c.holes = 10;
        c.num_cu = k % 2 ? 3 : 0;
        c.far = 1;
        run_sparse_case(&c, rng);
    }
    for (k = 0; k < (int)(sizeof vv / sizeof vv[0]); k++) {
        v4_case c;
        memset(&c, 0, sizeof c);
        c.tokens = 6;
        c.heads = vv[k].heads;
        c.format0 = vv[k].format0;
        c.format1 = vv[k].format1;
        c.fp8_0 = k % 2 ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
        c.fp8_1 = AITER_MLA_FP8_E4M3FN;
        c.q_dtype = vv[k].q;
        c.o_dtype = AITER_MLA_BF16;
        c.with_sink = 1;
        c.splits = vv[k].splits;
        c.far = 1;
        run_v4_case(&c, rng);
    }
    for (k = 0; k < (int)(sizeof pv / sizeof pv[0]); k++) {
        prefill_case c = prefill_case_of(pv[k].heads, pv[k].dqk, pv[k].dv, 4, pv[k].causal, 150, pv[k].t,
                                         pv[k].t == AITER_MLA_F16 ? AITER_MLA_F16 : AITER_MLA_BF16);
        c.plan_cu = pv[k].plan_cu;
        c.grid_cu = pv[k].grid_cu;
        c.odd_strides = pv[k].odd;
        c.sk_fixed = 180; /* rows enough that the strides stay below 2^32 elements */
        c.far = 1;
        run_prefill_case(&c, rng);
    }
    /* the paged gathers: bf16 pages of 64, e4m3fn pages of 16, fp8_ds_mla slots of one; MODEL1
       pages of 64, of 16 with padding, of 3 into a misaligned output */
    run_gather_cache_case(0, 0, 2, 1, rng);
    run_gather_cache_case(2, 2, 7, 1, rng);
    run_gather_cache_case(4, 1, 12, 1, rng);
    run_v4_gather_case(0, 1, rng);
    run_v4_gather_case(2, 1, rng);
    run_v4_gather_case(3, 1, rng);
    printf("caches past 4 GiB: %s\n", testing_failed == before ? "ok" : "FAILED");
}

/* Usage: test_gpu [--quick] [--seed N] [--list] [TEST ...]: with names (test_merge_gpu, ...),
 * only those run; --seed N mixes N into the seed of the one stream every test draws from, in
 * order, as test_host --seed does into its seeds (0, the default, keeps the fixed draws, so that
 * a failure repeats with the same names);
 * --list prints the tests' names, one a line, and runs nothing (tests/sanitize.sh splits them). */
static int g_argc;
static char **g_argv;
enum { ARG_TEST_RAN = 1, ARG_OPTION = 2 };
static unsigned char *g_matched; /* [argc]: 0, or what argument i turned out to be (main marks the options) */
static int wanted(const char *name) {
    int i, any = 0;
    for (i = 1; i < g_argc; i++) {
        if (g_matched[i] == ARG_OPTION) continue; /* an option or its value */
        any = 1;
        if (!strcmp(g_argv[i], name)) return g_matched[i] = ARG_TEST_RAN;
    }
    return !any;
}
static int g_list; /* --list: name the tests instead of running them */
#define RUN(test)                                 \
    do {                                          \
        if (g_list) puts(#test);                  \
        else if (wanted(#test)) test(&rng);       \
    } while (0)

int main(int argc, char **argv) {
    test_rng rng;
    int i;
    g_argc = argc;
    g_argv = argv;
    g_matched = (unsigned char *)calloc((size_t)argc, 1);
    if (!g_matched) return 1;
    for (i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            g_quick = 1;
            g_matched[i] = ARG_OPTION;
        }
        if (!strcmp(argv[i], "--list")) {
            g_list = 1;
            g_matched[i] = ARG_OPTION;
        }
        if (!strcmp(argv[i], "--seed")) {
            g_matched[i] = ARG_OPTION;
            if (i + 1 >= argc || !testing_set_seed_mix(argv[i + 1])) {
                fprintf(stderr, "test_gpu: --seed takes a number\n");
                return 1;
            }
            g_matched[++i] = ARG_OPTION;
        }
    }
    rng = rng_seed(0x5eed0001u);
    if (!g_list) {
        if (!gpu_device_count()) {
            fprintf(stderr, "test_gpu: no GPU device\n");
            return 1;
        }
        printf("test_gpu on %s (%d CUs), seeds mixed with %#llx%s\n", gpu_name(), gpu_num_cu(),
               (unsigned long long)testing_seed_mix, g_quick ? ", quick sweep" : "");
        g_stream = gpu_stream_create();
    }
    /* first: the process's first launch is then inside a stream capture, where the launches'
       once-per-device lookup of the kernel image (kernels.hip, image_arch) runs too */
    RUN(test_decode_graph);
    RUN(test_head_pad);
    RUN(test_expand_page_indices);
    RUN(test_kv_cache_write);
    RUN(test_decode_variants);
    RUN(test_decode_many_items);
    RUN(test_decode_rising_keys);
    RUN(test_decode_fp8_codes);
    RUN(test_decode_sweep);
    RUN(test_sparse_indices_gpu);
    RUN(test_filter_prefill_gpu);
    RUN(test_ds_mla_write_gpu);
    RUN(test_fp8_encode_gpu);
    RUN(test_gather_cache_gpu);
    RUN(test_v4_cache_write_gpu);
    RUN(test_v4_gather_gpu);
    RUN(test_v4_attention_gpu);
    RUN(test_v4_prefill_gpu);
    RUN(test_v4_index_builders_gpu);
    RUN(test_merge_gpu);
    RUN(test_prefill);
    RUN(test_sparse_attention);
    RUN(test_prefill_long_rows);
    RUN(test_bad_plans);
    RUN(test_nan_rows);
    RUN(test_neg_inf_scores);
    RUN(test_far_caches);
    if (g_list) {
        free(g_matched);
        return 0;
    }
    gpu_stream_destroy(g_stream);
    for (i = 1; i < argc; i++) /* a misspelt test name must not pass by running nothing */
        CHECK(g_matched[i], "no test is named %s", argv[i]);
    free(g_matched);
    return testing_summary();
}
