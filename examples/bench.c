/* bench.c - `make bench`: the ceilings of this GPU, the decode, prefill and sparse rows of
 * the project's benchmark shapes (D1-D6, P1-P4, SD1, SP1) and the memory-bound small ops (IDX, DSW, GATH; described above their
 * code), measured in one run.
 *
 * Ceilings: device copy bandwidth (a 16-byte copy kernel and the runtime's device-to-device
 * memcpy, the faster counts; bytes read + written) and the bf16 GEMM rate (8192^3 through
 * cuBLAS / hipBLAS where the build has it).
 * Decode rows: contexts uniform in [0.5, 1.5] x mean (fixed seed), shuffled page pool,
 * several cache copies rotated so that the bytes read are several times the L2; each run
 * timed with device events after warm-up; the median is reported.
 * Bytes: every KV row read once + q + o. FLOPs: sum 2 * H * q_len * ctx * (576 + 512).
 * Rows *-fp8 have an e4m3fn cache and a bf16 q; *-fp8q an e4m3fn q as well (vLLM's fp8
 * decode, which quantises q for an fp8 cache). Rows *-p1 have pages of one key, the others 64.
 * Prefill rows (P1-P4): H 128, dqk 192, dv 128; FLOPs 2 * H * sum(sq * sk) * (192 + 128),
 * halved when causal; without a plan (grid) and through the persistent plan (bf16, fp8),
 * built for the list count and tile_q the header recommends for aiter_mla_prefill
 * (aiter_mla_prefill_plan_fit_lists, tile_q 128; the --prefill options override them);
 * their schedule column reads "grid" or the plan's "lists x tile_q".
 * Sparse rows (SD1, SP1): FLOPs 2 * tokens * H * topk * (576 + 512).
 * V4 rows (V4D-*, V4P-*): described above their code.
 * Every run is timed behind a spin on the stream (timer_start_held), so the host's launch
 * cost is not in the times; rows named *-graph replay captured graphs (see launch_graph).
 * The host planner's cost (batch 256) is timed on the CPU. The launch floor (one and two
 * empty kernels, timed as the rows are) is what any row's time includes at the least.
 * The last lines give each row's host cost: the CPU time of the library calls of one run.
 * Usage: bench [--decode-cu N] [--decode-overhead N] [--decode-granularity N] [--prefill-cu N]
 *              [--prefill-tile-q N] [--prefill-granularity N] [--v4-splits N] [ROW ...]
 * (no row: every row). The --decode options set the decode rows' plan: --decode-cu N plans for
 * N CUs instead of the device's count (N > the count: more work lists than multiprocessors,
 * which the hardware hands out as blocks finish); --decode-overhead and --decode-granularity
 * set aiter_mla_decode_plan_desc's overhead_blocks and kv_granularity. The --prefill options
 * set the persistent prefill rows' plan (aiter_mla_prefill_plan_desc's num_cu, tile_q and
 * kv_granularity). --v4-splits N sets the V4 rows' num_splits (1..64) in place of the bench's
 * choice, except in the V4P-*-ws rows' chunked prefill, which runs one split. */
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
/* the decode plans' desc fields overhead_blocks and kv_granularity, the persistent prefill plans'
 * num_cu, tile_q and kv_granularity, the V4 rows' num_splits (0: the library's default, or the
 * bench's own choice; num_cu: the device's count) */
static int g_decode_overhead, g_decode_granularity, g_prefill_cu, g_prefill_tile_q, g_prefill_granularity, g_v4_splits;
static const char *const kUsage = "bench [--decode-cu N] [--decode-overhead N] [--decode-granularity N] [--prefill-cu N] "
                                  "[--prefill-tile-q N] [--prefill-granularity N] [--v4-splits N] [ROW ...]";

/* Start the timer behind a spin of ~100 us on the stream (gpu_hold): every timed run then
 * measures the device's time for the work, not the host's launch cost in front of it (the
 * way triton's do_bench times FlashMLA: its L2-flushing memset holds the stream). */
static void timer_start_held(void) {
    gpu_hold(g_stream, 200000);
    gpu_timer_start(g_timer, g_stream);
}

/* ---- ceilings ------------------------------------------------------------------------- */
static double copy_ceiling_gbs(double *kernel_gbs, double *memcpy_gbs) {
    const size_t bytes = (size_t)1 << 31;
    void *src = gpu_malloc(bytes), *dst = gpu_malloc(bytes);
    float t[20];
    int i, which;
    gpu_fill_uniform(src, (long long)(bytes / 4), AITER_MLA_F32, -1.0f, 1.0f, 1, g_stream);
    for (which = 0; which < 2; which++) {
        for (i = 0; i < 23; i++) {
            timer_start_held();
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

/* 0 where the build has no BLAS or the BLAS cannot run here; *why says which. */
static double gemm_ceiling_tflops(const char **why) {
    const int n = 8192;
    float t[20];
    int i;
    *why = "no BLAS in this build";
    if (!gpu_gemm_bf16_available()) return 0.0;
    void *a = gpu_malloc((size_t)n * n * 2), *b = gpu_malloc((size_t)n * n * 2), *c = gpu_malloc((size_t)n * n * 2);
    gpu_fill_uniform(a, (long long)n * n, AITER_MLA_BF16, -1.0f, 1.0f, 2, g_stream);
    gpu_fill_uniform(b, (long long)n * n, AITER_MLA_BF16, -1.0f, 1.0f, 3, g_stream);
    *why = NULL;
    for (i = 0; i < 25 && !*why; i++) {
        timer_start_held();
        *why = gpu_gemm_bf16(n, n, n, a, b, c, g_stream);
        float ms = gpu_timer_stop_ms(g_timer, g_stream);
        if (i >= 5) t[i - 5] = ms;
    }
    gpu_free(a);
    gpu_free(b);
    gpu_free(c);
    return *why ? 0.0 : 2.0 * n * (double)n * n / (median(t, 20) * 1e-3) / 1e12;
}

/* ---- timing ------------------------------------------------------------------------------ */
/* launch(ctx, i) issues run i on g_stream; runs rotate over the caller's input sets. */
typedef void (*bench_launch)(void *ctx, int run);

/* Rows whose id ends in "-graph" replay each run as a captured graph (one per input set),
 * as a runtime that captures its decode step runs it: with the stream held before each
 * run, what differs from the plain row is the device's own launch handling. */
static int g_graph;
enum { GRAPH_SETS = 256 }; /* at least rotation_sets' most, so that a graph row rotates over every set */
static gpu_graph *g_graphs[GRAPH_SETS];
static void launch_graph(bench_launch launch, void *ctx, int run) {
    if (!g_graph) {
        launch(ctx, run);
        return;
    }
    if (!g_graphs[run % GRAPH_SETS]) {
        gpu_graph_begin(g_stream);
        launch(ctx, run % GRAPH_SETS);
        g_graphs[run % GRAPH_SETS] = gpu_graph_end(g_stream);
    }
    gpu_graph_launch(g_graphs[run % GRAPH_SETS], g_stream);
}

/* The host's cost of each row: the median CPU time of the calls that enqueue one timed run
 * (validation, plan checks, tensor-map encoding, the launches; for -graph rows the graph's
 * launch), while the stream is held, so nothing waits on the device. Printed at the end. */
enum { MAX_HOST_ROWS = 64 };
static const char *g_row;    /* the row being timed */
static const char *g_kernel; /* its attention kernel's name (NOTE_KERNEL), NULL for other ops */
/* The row's attention kernel as aiter_mla_<op>_kernel reports it for args, listed at the end. */
#define NOTE_KERNEL(op, args)                                                                                       \
    do {                                                                                                            \
        aiter_mla_kernel k_ = AITER_MLA_KERNEL_NONE;                                                                \
        g_kernel = aiter_mla_##op##_kernel(args, &k_) == AITER_MLA_OK ? aiter_mla_kernel_name(k_) : "?";            \
    } while (0)
/* Starts row id: its name for the host-cost list; how it launches (a "-graph" row replays
 * captured graphs, every other row launches directly); and the random draws (contexts,
 * positions, indices) seeded from the name, so that a row measures the same inputs whether it
 * runs alone or after others; a "-graph" row the inputs of the row it replays, and a "-fp8q"
 * row those of its "-fp8" row (rows that differ in q's type alone compare at equal bytes). */
static void start_row(const char *id) {
    const char *end = strstr(id, "-graph");
    size_t n = end ? (size_t)(end - id) : strlen(id);
    size_t i;
    if (n >= 5 && !strncmp(id + n - 5, "-fp8q", 5)) n--;
    g_row = id;
    g_kernel = NULL;
    g_graph = end != NULL;
    rng = 0xcbf29ce484222325ull; /* FNV-1a of the name; never 0, which xorshift would keep */
    for (i = 0; i < n; i++) rng = (rng ^ (unsigned char)id[i]) * 0x100000001b3ull;
    if (rng == 0) rng = 1;
}
static const char *g_host_ids[MAX_HOST_ROWS], *g_host_kernels[MAX_HOST_ROWS];
static double g_host_us[MAX_HOST_ROWS];
static int g_host_rows;

/* Median device-event time in microseconds of one run: three warm-up runs, then as many
 * timed runs as fill about half a second (10 to 200). */
static double time_median_us(bench_launch launch, void *ctx) {
    int it, iters;
    double t0, per;
    float *t, *th;
    if (g_graph) /* capture every set's graph before timing */
        for (it = 0; it < GRAPH_SETS; it++) launch_graph(launch, ctx, it);
    t0 = host_us();
    for (it = 0; it < 3; it++) launch_graph(launch, ctx, it);
    gpu_sync();
    per = (host_us() - t0) / 3;
    iters = (int)(5e5 / (per > 1 ? per : 1));
    if (iters < 10) iters = 10;
    if (iters > 200) iters = 200;
    t = (float *)malloc(sizeof(float) * iters);
    th = (float *)malloc(sizeof(float) * iters);
    for (it = 0; it < iters; it++) {
        timer_start_held();
        t0 = host_us();
        launch_graph(launch, ctx, it);
        th[it] = (float)(host_us() - t0);
        t[it] = gpu_timer_stop_ms(g_timer, g_stream);
    }
    gpu_sync();
    per = median(t, iters) * 1e3;
    if (g_row && g_host_rows < MAX_HOST_ROWS) {
        g_host_ids[g_host_rows] = g_row;
        g_host_kernels[g_host_rows] = g_kernel;
        g_host_us[g_host_rows++] = median(th, iters);
    }
    free(t);
    free(th);
    for (it = 0; it < GRAPH_SETS; it++)
        if (g_graphs[it]) {
            gpu_graph_destroy(g_graphs[it]);
            g_graphs[it] = NULL;
        }
    return per;
}

/* Input sets that rotate so that one set's bytes times the sets is at least 4x the L2
 * (nothing is served from L2), 1 to 256 sets (GRAPH_SETS): the smallest rotated rows, V4D-*-k512-b4
 * at 1.5 MB a set, take 141 sets on a 50 MiB L2. */
static int rotation_sets(size_t set_bytes, size_t l2) {
    size_t sets = (4 * l2 + set_bytes - 1) / (set_bytes ? set_bytes : 1);
    return sets < 1 ? 1 : sets > GRAPH_SETS ? GRAPH_SETS : (int)sets;
}

/* k distinct entries of v[0 .. n) drawn at random into v[0 .. k) (a partial shuffle). */
static void pick_distinct(int32_t *v, int64_t n, int64_t k) {
    int64_t i;
    for (i = 0; i < k; i++) {
        const int64_t m = i + (int64_t)(frand() * (double)(n - i));
        const int32_t e = v[m];
        v[m] = v[i];
        v[i] = e;
    }
}

/* A shuffled permutation of 0 .. n-1. */
static int32_t *shuffled_ids(int64_t n) {
    int32_t *v = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
    int64_t i;
    for (i = 0; i < n; i++) v[i] = (int32_t)i;
    pick_distinct(v, n, n);
    return v;
}

/* ---- decode rows ---------------------------------------------------------------------- */
typedef struct bench_row {
    const char *id;
    int heads, q_len, batch, mean_ctx, page;
    aiter_mla_dtype kv, q; /* q: bf16, or e4m3fn over an e4m3fn cache (vLLM's fp8 decode) */
} bench_row;

typedef struct decode_run {
    aiter_mla_decode_args *a;
    void **cache, **q; /* [sets] */
    int sets;
} decode_run;
static void launch_decode(void *ctx, int i) {
    decode_run *r = (decode_run *)ctx;
    r->a->kv_cache = r->cache[i % r->sets];
    r->a->q = r->q[i % r->sets];
    TRY(aiter_mla_decode(r->a, g_stream));
}

static void bench_decode(const bench_row *r, double copy_gbs, double gemm_tflops, int num_cu, size_t l2) {
    const int B = r->batch, H = r->heads, P = r->page;
    const size_t kv_e = aiter_mla_dtype_size(r->kv), q_e = aiter_mla_dtype_size(r->q);
    int32_t *qo = (int32_t *)malloc((B + 1) * 4), *kvp = (int32_t *)malloc((B + 1) * 4), *last = (int32_t *)malloc(B * 4);
    int64_t pages = 0, keys = 0;
    int b, s;
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
    int32_t *idx = shuffled_ids(pages);
    const int64_t T = qo[B];
    const size_t cache_bytes = (size_t)pages * P * 576 * kv_e;
    const int sets = rotation_sets(cache_bytes, l2);

    aiter_mla_decode_plan_desc pd = {0};
    aiter_mla_decode_plan_info info;
    pd.max_batch = B;
    pd.num_heads = H;
    pd.max_q_len = r->q_len;
    pd.num_cu = num_cu;
    pd.page_size = P;
    pd.overhead_blocks = g_decode_overhead;
    pd.kv_granularity = g_decode_granularity;
    TRY(aiter_mla_decode_plan_get_info(&pd, &info));
    int32_t *plan = (int32_t *)gpu_host_alloc_pinned((size_t)info.plan_ints * 4);
    TRY(aiter_mla_decode_plan_build(&info, qo, kvp, last, B, plan));

    void **d_cache = (void **)malloc(sizeof(void *) * sets), **d_q = (void **)malloc(sizeof(void *) * sets);
    for (s = 0; s < sets; s++) {
        d_cache[s] = gpu_malloc(cache_bytes);
        d_q[s] = gpu_malloc((size_t)T * H * 576 * q_e);
        gpu_fill_uniform(d_cache[s], (long long)(cache_bytes / kv_e), r->kv, -1.0f, 1.0f, 100 + s, g_stream);
        gpu_fill_uniform(d_q[s], (long long)T * H * 576, r->q, -1.0f, 1.0f, 200 + s, g_stream);
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
    a.q_dtype = r->q;
    a.kv_dtype = r->kv;
    a.kv_scale = 1.0f;
    a.sm_scale = 0.1352f;

    a.q = d_q[0]; /* launch_decode sets each run's */
    a.kv_cache = d_cache[0];
    NOTE_KERNEL(decode, &a);
    decode_run run = {&a, d_cache, d_q, sets};
    double us = time_median_us(launch_decode, &run);
    double bytes = (double)keys * 576 * kv_e + (double)T * H * (576 * q_e + 512 * 2);
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
    free(d_cache); free(d_q); free(qo); free(kvp); free(last); free(idx);
}

/* ---- memory-bound small ops -------------------------------------------------------------------
 * IDX  sparse index conversion, decode form (SPEC 4): 4096 tokens x topk 2048 int32, 64
 *      requests of 64 tokens with 32768-token contexts (block size 64, block table
 *      [64, 512], block ids shuffled), 3 % of the entries -1, valid counts written.
 *      Bytes: indices read + slots written + the block table.
 * IDX-L the same with 16384 tokens (256 a request): a prefill chunk's lists, four times the
 *      bytes, so the launch and the ramp weigh a quarter as much.
 * DSW  fp8_ds_mla writer (SPEC 6): 65536 tokens, bf16 kv_c [T, 512] and k_pe [T, 64] into
 *      656-byte rows of a cache of 65536 slots (shuffled slot_mapping), e4m3fn.
 *      Bytes: the bf16 input + 656 per token (118 MB).
 * DSW-L the same with 262144 tokens and slots (474 MB): at 118 MB even a device-to-device
 *      memcpy stays well below the 2 GB copy that sets the ceiling (the launch and the ramp).
 * GATH context gather (SPEC 2b): 65536 rows of a bf16 cache (16 requests x 4096 positions,
 *      block size 64, shuffled block ids) into a bf16 workspace. Bytes: rows read + written. */
static void print_op_row(const char *id, const char *shape, double us, double bytes, double copy_gbs) {
    const double gbs = bytes / (us * 1e-6) / 1e9;
    printf("| %-5s | %-52s | %9.1f | %7.0f | %5.1f %% |\n", id, shape, us, gbs, 100.0 * gbs / copy_gbs);
    fflush(stdout);
}

typedef struct idx_run {
    aiter_mla_sparse_index_args *a;
    int32_t **in, **out; /* [sets] */
    int sets;
} idx_run;
static void launch_idx(void *ctx, int i) {
    idx_run *r = (idx_run *)ctx;
    r->a->indices = r->in[i % r->sets];
    r->a->out = r->out[i % r->sets];
    TRY(aiter_mla_convert_sparse_indices(r->a, g_stream));
}

static void bench_idx(const char *id, int T, double copy_gbs, size_t l2) {
    enum { TOPK = 2048, REQS = 64, CTX = 32768, BS = 64, WIDTH = CTX / BS };
    char shape[64];
    const size_t bytes = (size_t)T * TOPK * 4;
    const int sets = rotation_sets(2 * bytes, l2);
    int32_t *idx = (int32_t *)malloc(bytes), *req = (int32_t *)malloc(T * 4), *bt = shuffled_ids((int64_t)REQS * WIDTH);
    int32_t **d_in = (int32_t **)malloc(sizeof(int32_t *) * sets), **d_out = (int32_t **)malloc(sizeof(int32_t *) * sets);
    int64_t i;
    int s;
    for (i = 0; i < (int64_t)T * TOPK; i++) idx[i] = frand() < 0.03 ? -1 : (int32_t)(frand() * CTX);
    for (i = 0; i < T; i++) req[i] = (int32_t)(i / (T / REQS));
    for (s = 0; s < sets; s++) {
        d_in[s] = (int32_t *)gpu_malloc(bytes);
        d_out[s] = (int32_t *)gpu_malloc(bytes);
        gpu_upload(d_in[s], idx, bytes);
    }
    int32_t *d_req = (int32_t *)gpu_malloc(T * 4), *d_bt = (int32_t *)gpu_malloc((size_t)REQS * WIDTH * 4);
    int32_t *d_counts = (int32_t *)gpu_malloc(T * 4);
    gpu_upload(d_req, req, T * 4);
    gpu_upload(d_bt, bt, (size_t)REQS * WIDTH * 4);
    aiter_mla_sparse_index_args a = {0};
    a.req_id = d_req;
    a.block_table = d_bt;
    a.block_table_stride = WIDTH;
    a.block_size = BS;
    a.num_requests = REQS;
    a.num_tokens = T;
    a.topk = TOPK;
    a.valid_counts = d_counts;
    idx_run run = {&a, d_in, d_out, sets};
    const double us = time_median_us(launch_idx, &run);
    snprintf(shape, sizeof shape, "%d tok x topk 2048, 64 req x ctx 32768, bs 64", T);
    print_op_row(id, shape, us, 2.0 * bytes + (double)REQS * WIDTH * 4, copy_gbs);
    for (s = 0; s < sets; s++) {
        gpu_free(d_in[s]);
        gpu_free(d_out[s]);
    }
    gpu_free(d_req); gpu_free(d_bt); gpu_free(d_counts);
    free(idx); free(req); free(bt); free(d_in); free(d_out);
}

typedef struct dsw_run {
    aiter_mla_ds_mla_write_args *a;
    void **kvc, **kpe, **cache; /* [sets] */
    int sets;
} dsw_run;
static void launch_dsw(void *ctx, int i) {
    dsw_run *r = (dsw_run *)ctx;
    r->a->kv_c = r->kvc[i % r->sets];
    r->a->k_pe = r->kpe[i % r->sets];
    r->a->kv_cache = r->cache[i % r->sets];
    TRY(aiter_mla_ds_mla_write(r->a, g_stream));
}

static void bench_dsw(const char *id, int T, double copy_gbs, size_t l2) {
    enum { BS = 64 };
    char shape[64];
    const size_t in_bytes = (size_t)T * 576 * 2, cache_bytes = (size_t)T * AITER_MLA_DS_MLA_ROW_BYTES;
    const int sets = rotation_sets(in_bytes + cache_bytes, l2);
    int32_t *perm = shuffled_ids(T);
    int64_t *slots = (int64_t *)malloc(sizeof(int64_t) * T);
    void **kvc = (void **)malloc(sizeof(void *) * sets), **kpe = (void **)malloc(sizeof(void *) * sets);
    void **cache = (void **)malloc(sizeof(void *) * sets);
    int64_t i;
    int s;
    for (i = 0; i < T; i++) slots[i] = perm[i];
    for (s = 0; s < sets; s++) {
        kvc[s] = gpu_malloc((size_t)T * 512 * 2);
        kpe[s] = gpu_malloc((size_t)T * 64 * 2);
        cache[s] = gpu_malloc(cache_bytes);
        gpu_fill_uniform(kvc[s], (long long)T * 512, AITER_MLA_BF16, -4.0f, 4.0f, 300 + s, g_stream);
        gpu_fill_uniform(kpe[s], (long long)T * 64, AITER_MLA_BF16, -4.0f, 4.0f, 400 + s, g_stream);
    }
    int64_t *d_slots = (int64_t *)gpu_malloc(sizeof(int64_t) * T);
    gpu_upload(d_slots, slots, sizeof(int64_t) * T);
    aiter_mla_ds_mla_write_args a = {0};
    a.slot_mapping = d_slots;
    a.num_blocks = T / BS;
    a.block_size = BS;
    a.num_tokens = T;
    dsw_run run = {&a, kvc, kpe, cache, sets};
    const double us = time_median_us(launch_dsw, &run);
    snprintf(shape, sizeof shape, "%d tok bf16 -> fp8_ds_mla e4m3fn, shuffled slots", T);
    print_op_row(id, shape, us, (double)T * (576 * 2 + AITER_MLA_DS_MLA_ROW_BYTES), copy_gbs);
    for (s = 0; s < sets; s++) {
        gpu_free(kvc[s]);
        gpu_free(kpe[s]);
        gpu_free(cache[s]);
    }
    gpu_free(d_slots);
    free(perm); free(slots); free(kvc); free(kpe); free(cache);
}

typedef struct gath_run {
    aiter_mla_gather_cache_args *a;
    void **cache, **out; /* [sets] */
    int sets;
} gath_run;
static void launch_gath(void *ctx, int i) {
    gath_run *r = (gath_run *)ctx;
    r->a->kv_cache = r->cache[i % r->sets];
    r->a->out = r->out[i % r->sets];
    TRY(aiter_mla_gather_cache(r->a, g_stream));
}

static void bench_gath(double copy_gbs, size_t l2) {
    enum { ROWS = 65536, REQS = 16, BS = 64, WIDTH = ROWS / REQS / BS, BLOCKS = ROWS / BS };
    const size_t bytes = (size_t)ROWS * 576 * 2;
    const int sets = rotation_sets(2 * bytes, l2);
    int32_t *bt = shuffled_ids(BLOCKS), cu[REQS + 1];
    void **cache = (void **)malloc(sizeof(void *) * sets), **out = (void **)malloc(sizeof(void *) * sets);
    int s, b;
    for (b = 0; b <= REQS; b++) cu[b] = b * (ROWS / REQS);
    for (s = 0; s < sets; s++) {
        cache[s] = gpu_malloc(bytes);
        out[s] = gpu_malloc(bytes);
        gpu_fill_uniform(cache[s], (long long)ROWS * 576, AITER_MLA_BF16, -1.0f, 1.0f, 500 + s, g_stream);
    }
    int32_t *d_bt = (int32_t *)gpu_malloc(sizeof(int32_t) * BLOCKS), *d_cu = (int32_t *)gpu_malloc(sizeof cu);
    gpu_upload(d_bt, bt, sizeof(int32_t) * BLOCKS);
    gpu_upload(d_cu, cu, sizeof cu);
    aiter_mla_gather_cache_args a = {0};
    a.num_blocks = BLOCKS;
    a.block_size = BS;
    a.block_table = d_bt;
    a.block_table_stride = WIDTH;
    a.cu_out_rows = d_cu;
    a.batch = REQS;
    a.out_rows = ROWS;
    gath_run run = {&a, cache, out, sets};
    const double us = time_median_us(launch_gath, &run);
    print_op_row("GATH", "65536 rows bf16 cache -> bf16, 16 req, bs 64", us, 2.0 * bytes, copy_gbs);
    for (s = 0; s < sets; s++) {
        gpu_free(cache[s]);
        gpu_free(out[s]);
    }
    gpu_free(d_bt); gpu_free(d_cu);
    free(bt); free(cache); free(out);
}

/* ---- prefill rows ----------------------------------------------------------------------- */
typedef struct prefill_row {
    const char *id;
    int heads, batch, sq, sk, causal;
    aiter_mla_dtype dtype;
    int persistent; /* through the persistent plan (AITER's fp8 prefill path) */
} prefill_row;

static void launch_prefill(void *ctx, int run) {
    (void)run;
    TRY(aiter_mla_prefill((const aiter_mla_prefill_args *)ctx, g_stream));
}

static void bench_prefill(const prefill_row *r, double gemm_tflops, int num_cu) {
    const int B = r->batch, H = r->heads, DQK = 192, DV = 128;
    const size_t e = aiter_mla_dtype_size(r->dtype);
    const int64_t Tq = (int64_t)B * r->sq, Tk = (int64_t)B * r->sk;
    int32_t *cq = (int32_t *)malloc((B + 1) * 4), *ck = (int32_t *)malloc((B + 1) * 4);
    int b;
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
    a.num_cu = num_cu; /* the grid rows' resident blocks */
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
        pd.dv = DV;
        pd.tile_q = g_prefill_tile_q ? g_prefill_tile_q : 128;
        pd.kv_granularity = g_prefill_granularity;
        pd.num_cu = g_prefill_cu;
        if (!g_prefill_cu) TRY(aiter_mla_prefill_plan_fit_lists(&pd, num_cu, cq, ck, B, r->causal));
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
    NOTE_KERNEL(prefill, &a);
    double us = time_median_us(launch_prefill, &a);
    double flops = 2.0 * H * (double)B * r->sq * r->sk * (DQK + DV) * (r->causal ? 0.5 : 1.0);
    double tfl = flops / (us * 1e-6) / 1e12;
    char sched[32] = "grid";
    if (r->persistent) snprintf(sched, sizeof sched, "%d x %d", info.desc.num_cu, info.desc.tile_q);
    printf("| %-8s | %3d | %d x %5d x %5d | %-6s | %-4s | %-10s | %9.1f | %7.1f | %5.1f %% |\n", r->id, H, B, r->sq, r->sk,
           r->causal ? "causal" : "full", r->dtype == AITER_MLA_BF16 ? "bf16" : "fp8", sched, us, tfl,
           gemm_tflops > 0 ? 100.0 * tfl / gemm_tflops : 0.0);
    fflush(stdout);
    gpu_free(d_q); gpu_free(d_k); gpu_free(d_v); gpu_free(d_o); gpu_free(d_lse); gpu_free(d_cu);
    if (d_plan) gpu_free(d_plan);
    if (d_ws) gpu_free(d_ws);
    free(plan); free(cq); free(ck);
}

/* ---- sparse attention rows (V3.2) ----------------------------------------------------------- */
typedef struct sparse_row {
    const char *id;
    int tokens, heads, topk, requests; /* tokens spread evenly over the requests */
    int64_t slots;                     /* cache slots; each request owns slots / requests of them */
    int ds_mla;                        /* fp8_ds_mla cache (else bf16 rows) */
} sparse_row;

static void launch_sparse(void *ctx, int run) {
    (void)run;
    TRY(aiter_mla_sparse_attention((const aiter_mla_sparse_args *)ctx, g_stream));
}

static void bench_sparse(const sparse_row *r, double gemm_tflops, int num_cu) {
    const int T = r->tokens, H = r->heads, K = r->topk;
    const int64_t per_req = r->slots / r->requests;
    const size_t row = r->ds_mla ? AITER_MLA_DS_MLA_ROW_BYTES : 576 * 2;
    int32_t *idx = (int32_t *)malloc((size_t)T * K * 4), *pick = (int32_t *)malloc((size_t)per_req * 4);
    int64_t i;
    int t;
    for (i = 0; i < per_req; i++) pick[i] = (int32_t)i;
    for (t = 0; t < T; t++) { /* K distinct random slots of the token's request (a top-k list) */
        const int64_t base = (int64_t)(t * (int64_t)r->requests / T) * per_req;
        pick_distinct(pick, per_req, K); /* pick stays a permutation of the request's slots */
        for (i = 0; i < K; i++) idx[(int64_t)t * K + i] = (int32_t)(base + pick[i]);
    }
    free(pick);
    void *d_cache = gpu_malloc((size_t)r->slots * row), *d_q = gpu_malloc((size_t)T * H * 576 * 2);
    void *d_o = gpu_malloc((size_t)T * H * 512 * 2);
    float *d_lse = (float *)gpu_malloc((size_t)T * H * 4);
    int32_t *d_idx = (int32_t *)gpu_malloc((size_t)T * K * 4);
    gpu_upload(d_idx, idx, (size_t)T * K * 4);
    gpu_fill_uniform(d_q, (long long)T * H * 576, AITER_MLA_BF16, -1.0f, 1.0f, 400, g_stream);
    if (r->ds_mla) { /* written by the GPU writer from random latents */
        void *d_kv = gpu_malloc((size_t)r->slots * 576 * 2);
        int64_t *map = (int64_t *)malloc((size_t)r->slots * 8), *d_map = (int64_t *)gpu_malloc((size_t)r->slots * 8);
        aiter_mla_ds_mla_write_args w = {0};
        for (i = 0; i < r->slots; i++) map[i] = i;
        gpu_upload(d_map, map, (size_t)r->slots * 8);
        gpu_fill_uniform(d_kv, (long long)r->slots * 576, AITER_MLA_BF16, -1.0f, 1.0f, 401, g_stream);
        w.kv_c = d_kv;
        w.kv_c_stride = 576;
        w.k_pe = (const uint16_t *)d_kv + 512;
        w.k_pe_stride = 576;
        w.slot_mapping = d_map;
        w.kv_cache = d_cache;
        w.num_blocks = r->slots;
        w.block_size = 1;
        w.num_tokens = r->slots;
        TRY(aiter_mla_ds_mla_write(&w, g_stream));
        gpu_sync();
        gpu_free(d_kv);
        gpu_free(d_map);
        free(map);
    } else {
        gpu_fill_uniform(d_cache, (long long)r->slots * 576, AITER_MLA_BF16, -1.0f, 1.0f, 402, g_stream);
    }
    aiter_mla_sparse_args a = {0};
    a.q = d_q;
    a.kv_cache = d_cache;
    a.num_slots = r->slots;
    a.cache_is_ds_mla = r->ds_mla;
    a.indices = d_idx;
    a.o = d_o;
    a.lse = d_lse;
    a.num_tokens = T;
    a.num_heads = H;
    a.topk = K;
    a.num_cu = num_cu; /* blocks taking several tokens each */
    NOTE_KERNEL(sparse_attention, &a);
    double us = time_median_us(launch_sparse, &a);
    double flops = 2.0 * T * H * (double)K * (576 + 512), tfl = flops / (us * 1e-6) / 1e12;
    printf("| %-4s | %4d tokens x %3d heads x topk %4d, %-11s, %7lld slots | %9.1f | %7.1f | %5.1f %% |\n", r->id, T, H, K,
           r->ds_mla ? "fp8_ds_mla" : "bf16 rows", (long long)r->slots, us, tfl, gemm_tflops > 0 ? 100.0 * tfl / gemm_tflops : 0.0);
    fflush(stdout);
    gpu_free(d_cache); gpu_free(d_q); gpu_free(d_o); gpu_free(d_lse); gpu_free(d_idx);
    free(idx);
}

/* ---- V4 rows (SPEC 7) -------------------------------------------------------------------------
 * V4D-h{H}-k{K}-b{B}: decode, one token per request at a ragged position (mean context
 * 8192), H heads, keys = the SWA cache's last 128 tokens (MODEL1 pages of 64) + K distinct
 * entries of the request's ratio-4 compressed cache (MODEL1 pages of 64 entries), both
 * e4m3fn, sink on. Bytes: every row the lists name (584 B) once + q + o (bf16); cache copies
 * rotate past the L2; keys split over blocks (num_splits) while the batch leaves the GPU's
 * multiprocessors idle. V4P-h{H}: prefill of 4 requests x 4096 new tokens through the same
 * kernel, token at position p attending min(p + 1, 128) raw tokens and min((p + 1) / 4,
 * 512) compressed entries straight from the MODEL1 pages (keys_shared set; the decode rows
 * set keys_read_once); FLOPs 2 * H * keys * (512 + 512); bytes: each row once however many of
 * the request's tokens list it (its 4096 raw tokens and the compressed entries its tokens
 * pick, about 1024) + q + o.
 * V4P-h{H}-ws: the same tokens and keys the way vLLM runs a prefill chunk (SPEC 7), one
 * aiter_mla_v4_prefill a timed step: it gathers the requests' compressed entries and raw
 * tokens into the bf16 workspace, builds the per-token lists into it and attends over its
 * rows; same FLOPs. */
typedef struct v4_row {
    const char *id;
    int heads, topk, batch, q_len; /* q_len: tokens per request (1: decode) */
    int workspace;                 /* prefill through the bf16 workspace (V4P-*-ws) */
} v4_row;

typedef struct v4_run {
    aiter_mla_v4_attention_args *a;
    void **q;
    int32_t **swa, **cmp; /* per set: the dense lists */
    int sets;
    aiter_mla_v4_prefill_args *prefill; /* the workspace flow (V4P-*-ws) */
} v4_run;
static void launch_v4(void *ctx, int i) {
    v4_run *r = (v4_run *)ctx;
    if (r->prefill) {
        TRY(aiter_mla_v4_prefill(r->prefill, g_stream));
        return;
    }
    r->a->q = r->q[i % r->sets];
    r->a->keys.indices = r->swa[i % r->sets];
    r->a->extra_keys.indices = r->cmp[i % r->sets];
    TRY(aiter_mla_v4_attention(r->a, g_stream));
}

/* MODEL1 pages of random rows, written by the GPU writer. */
static void *v4_random_cache(int64_t pages, int bs, unsigned seed) {
    const int64_t slots = pages * bs, chunk = 65536;
    void *cache = gpu_malloc((size_t)(pages * aiter_mla_v4_page_bytes(bs))), *src = gpu_malloc((size_t)chunk * 512 * 2);
    int64_t *map = (int64_t *)malloc((size_t)chunk * 8), *d_map = (int64_t *)gpu_malloc((size_t)chunk * 8), s0, i;
    aiter_mla_v4_cache_write_args w = {0};
    gpu_fill_uniform(src, (long long)chunk * 512, AITER_MLA_BF16, -1.0f, 1.0f, seed, g_stream);
    w.kv = src;
    w.slot_mapping = d_map;
    w.kv_cache = cache;
    w.num_blocks = pages;
    w.block_size = bs;
    for (s0 = 0; s0 < slots; s0 += chunk) {
        w.num_tokens = slots - s0 < chunk ? slots - s0 : chunk;
        for (i = 0; i < w.num_tokens; i++) map[i] = s0 + i;
        gpu_upload(d_map, map, (size_t)w.num_tokens * 8);
        TRY(aiter_mla_v4_cache_write(&w, g_stream));
        gpu_sync();
    }
    gpu_free(src);
    gpu_free(d_map);
    free(map);
    return cache;
}

static void bench_v4(const v4_row *r, double copy_gbs, double gemm_tflops, size_t l2, int num_cu) {
    enum { W = 128, BS = 64 };
    const int B = r->batch, H = r->heads, K = r->topk, Q = r->q_len;
    const int64_t T = (int64_t)B * Q;
    int32_t *ctx = (int32_t *)malloc((size_t)B * 4);
    int64_t swa_pages = 0, cmp_pages = 0, keys = 0, rows = 0, t; /* rows: distinct rows the lists name (set 0) */
    int b, s, j;
    for (b = 0; b < B; b++) {
        ctx[b] = Q > 1 ? Q : (int32_t)(8192 * (0.5 + frand()));
        swa_pages += (ctx[b] + BS - 1) / BS;
        cmp_pages += (ctx[b] / 4 + BS - 1) / BS;
    }
    /* one set's bytes (the rows listed) decide the rotation; each set has its own pages */
    for (b = 0; b < B; b++)
        for (j = 0; j < Q; j++) {
            const int32_t pos = ctx[b] - Q + j, swa = pos + 1 < W ? pos + 1 : W, c = (pos + 1) / 4;
            keys += swa + (c < K ? c : K);
        }
    const int sets = Q > 1 ? 1 : rotation_sets((size_t)keys * AITER_MLA_V4_TOKEN_BYTES, l2);
    void *swa_cache = v4_random_cache(swa_pages * sets, BS, 500), *cmp_cache = v4_random_cache(cmp_pages * sets, BS, 501);
    int32_t *swa = (int32_t *)malloc((size_t)T * W * 4), *cmp = (int32_t *)malloc((size_t)T * K * 4);
    int32_t *swa_len = (int32_t *)malloc((size_t)T * 4), *cmp_len = (int32_t *)malloc((size_t)T * 4);
    int32_t *pick = (int32_t *)malloc((size_t)(8192 * 2) * 4);
    int32_t *local = (int32_t *)malloc((size_t)T * K * 4); /* the top-k rows, request-local (workspace flow) */
    void **d_q = (void **)malloc(sizeof(void *) * sets);
    int32_t **d_swa = (int32_t **)malloc(sizeof(int32_t *) * sets), **d_cmp = (int32_t **)malloc(sizeof(int32_t *) * sets);
    /* the rows set 0's lists name, each counted once (a prefill's tokens share most of theirs) */
    unsigned char *seen_swa = (unsigned char *)calloc((size_t)(swa_pages * BS), 1), *seen_cmp = (unsigned char *)calloc((size_t)(cmp_pages * BS), 1);
    for (s = 0; s < sets; s++) {
        int64_t sp = s * swa_pages, cp = s * cmp_pages; /* this set's first page of each cache */
        for (b = 0, t = 0; b < B; b++) {
            const int32_t ncmp = ctx[b] / 4;
            for (j = 0; j < Q; j++, t++) {
                const int32_t pos = ctx[b] - Q + j, n_swa = pos + 1 < W ? pos + 1 : W, avail = (pos + 1) / 4;
                const int32_t n_cmp = avail < K ? avail : K;
                int k;
                for (k = 0; k < n_swa; k++) {
                    swa[t * W + k] = (int32_t)(sp * BS + pos - n_swa + 1 + k);
                    if (s == 0 && !seen_swa[swa[t * W + k]]) seen_swa[swa[t * W + k]] = 1, rows++;
                }
                for (k = 0; k < avail; k++) pick[k] = k; /* n_cmp distinct entries of the visible ones */
                pick_distinct(pick, avail, n_cmp);
                for (k = 0; k < n_cmp; k++) {
                    const int32_t e = pick[k];
                    cmp[t * K + k] = (int32_t)(cp * BS + e);
                    local[t * K + k] = e;
                    if (s == 0 && !seen_cmp[cmp[t * K + k]]) seen_cmp[cmp[t * K + k]] = 1, rows++;
                }
                for (k = n_cmp; k < K; k++) local[t * K + k] = -1;
                swa_len[t] = n_swa;
                cmp_len[t] = n_cmp;
            }
            sp += (ctx[b] + BS - 1) / BS;
            cp += (ncmp + BS - 1) / BS;
        }
        d_q[s] = gpu_malloc((size_t)T * H * 512 * 2);
        gpu_fill_uniform(d_q[s], (long long)T * H * 512, AITER_MLA_BF16, -1.0f, 1.0f, 600 + s, g_stream);
        d_swa[s] = (int32_t *)gpu_malloc((size_t)T * W * 4);
        d_cmp[s] = (int32_t *)gpu_malloc((size_t)T * K * 4);
        gpu_upload(d_swa[s], swa, (size_t)T * W * 4);
        gpu_upload(d_cmp[s], cmp, (size_t)T * K * 4);
    }
    int32_t *d_swa_len = (int32_t *)gpu_malloc((size_t)T * 4), *d_cmp_len = (int32_t *)gpu_malloc((size_t)T * 4);
    float *d_lse = (float *)gpu_malloc((size_t)T * H * 4), *d_sink = (float *)gpu_malloc((size_t)H * 4);
    void *d_o = gpu_malloc((size_t)T * H * 512 * 2);
    gpu_upload(d_swa_len, swa_len, (size_t)T * 4);
    gpu_upload(d_cmp_len, cmp_len, (size_t)T * 4);
    gpu_fill_uniform(d_sink, H, AITER_MLA_F32, -1.0f, 1.0f, 700, g_stream);

    aiter_mla_v4_attention_args a = {0};
    a.o = d_o;
    a.lse = d_lse;
    a.attn_sink = d_sink;
    a.num_tokens = T;
    a.num_heads = H;
    a.keys.cache = swa_cache;
    a.keys.num_blocks = swa_pages * sets;
    a.keys.indices_stride = W;
    a.keys.lens = d_swa_len;
    a.extra_keys.cache = cmp_cache;
    a.extra_keys.num_blocks = cmp_pages * sets;
    a.extra_keys.indices_stride = K;
    a.extra_keys.lens = d_cmp_len;
    /* splits: enough blocks to fill the GPU, at least 64 keys (a tile per group) each */
    a.num_splits = num_cu / (int)(T * ((H + 63) / 64));
    if (a.num_splits > (W + K) / 64) a.num_splits = (W + K) / 64;
    if (a.num_splits > AITER_MLA_V4_MAX_SPLITS) a.num_splits = AITER_MLA_V4_MAX_SPLITS;
    if (a.num_splits < 1) a.num_splits = 1;
    if (g_v4_splits) a.num_splits = g_v4_splits; /* the wrapper checks it */
    a.num_cu = num_cu; /* past that, blocks taking several tokens each */
    a.keys_read_once = Q == 1; /* a decode step: each token its own request's keys */
    a.keys_shared = Q > 1;     /* a prefill: a request's tokens list the same keys */
    v4_run run = {&a, d_q, d_swa, d_cmp, sets, NULL};
    aiter_mla_v4_prefill_args pf = {0};
    int32_t *meta = NULL, *d_meta = NULL, *d_local = NULL;
    void *d_o_pages = NULL; /* the workspace flow's o is checked against the pages' */
    if (r->workspace) { /* one chunk of B requests, each with Q new tokens and no prefix */
        const int64_t swa_pp = (Q + BS - 1) / BS, cmp_pp = (Q / 4 + BS - 1) / BS; /* pages per request */
        /* query_start_loc [B + 1], seq_lens [B], the two block tables */
        const size_t meta_bytes = (size_t)(2 * B + 1 + B * (swa_pp + cmp_pp)) * 4;
        meta = (int32_t *)malloc(meta_bytes);
        int32_t *qsl = meta, *seq = qsl + B + 1, *swa_bt = seq + B, *cmp_bt = swa_bt + B * swa_pp;
        for (b = 0; b <= B; b++) qsl[b] = b * Q;
        for (b = 0; b < B; b++) {
            seq[b] = Q;
            for (j = 0; j < swa_pp; j++) swa_bt[b * swa_pp + j] = (int32_t)(b * swa_pp + j);
            for (j = 0; j < cmp_pp; j++) cmp_bt[b * cmp_pp + j] = (int32_t)(b * cmp_pp + j);
        }
        d_meta = (int32_t *)gpu_malloc(meta_bytes);
        gpu_upload(d_meta, meta, meta_bytes);
#define ON_DEVICE(host) (d_meta + ((host) - meta)) /* the same array in d_meta */
        d_local = (int32_t *)gpu_malloc((size_t)T * K * 4);
        gpu_upload(d_local, local, (size_t)T * K * 4);
        pf.batch = B;
        pf.query_start_loc = ON_DEVICE(qsl);
        pf.query_start_loc_host = qsl; /* meta lives until the row's end */
        pf.seq_lens = ON_DEVICE(seq);
        pf.compress_ratio = 4;
        pf.window = W;
        pf.max_model_len = Q;
        pf.max_num_batched_tokens = T;
        pf.chunk_size = B;
        pf.topk_indices = d_local;
        pf.topk = K;
        pf.swa_cache = swa_cache;
        pf.swa_num_blocks = swa_pages;
        pf.swa_block_size = BS;
        pf.swa_block_table = ON_DEVICE(swa_bt);
        pf.swa_block_table_stride = swa_pp;
        pf.compressed_cache = cmp_cache;
        pf.compressed_num_blocks = cmp_pages;
        pf.compressed_block_size = BS;
        pf.compressed_block_table = ON_DEVICE(cmp_bt);
        pf.compressed_block_table_stride = cmp_pp;
        TRY(aiter_mla_v4_prefill_workspace_size(&pf, &pf.workspace_bytes));
        pf.workspace = gpu_malloc(pf.workspace_bytes);
        d_o_pages = gpu_malloc((size_t)T * H * 512 * 2);
        a.o = d_o_pages;
        a.q = d_q[0];
        a.keys.indices = d_swa[0];
        a.extra_keys.indices = d_cmp[0];
        TRY(aiter_mla_v4_attention_workspace_size(&a, &a.workspace_bytes));
        a.workspace = a.workspace_bytes ? gpu_malloc(a.workspace_bytes) : NULL;
        TRY(aiter_mla_v4_attention(&a, g_stream));
        if (a.workspace) gpu_free(a.workspace);
        pf.attn = a; /* q, o, lse, the sink, heads, num_cu; the call sets the tokens and keys */
        pf.attn.o = d_o;
        pf.attn.num_tokens = 0;
        pf.attn.num_splits = 1; /* the workspace flow runs one split (--v4-splits or not) */
        pf.attn.workspace = NULL; /* so no workspace */
        pf.attn.workspace_bytes = 0;
        memset(&pf.attn.keys, 0, sizeof pf.attn.keys);
        memset(&pf.attn.extra_keys, 0, sizeof pf.attn.extra_keys);
        run.prefill = &pf;
#undef ON_DEVICE
    }
    TRY(aiter_mla_v4_attention_workspace_size(&a, &a.workspace_bytes));
    a.workspace = a.workspace_bytes ? gpu_malloc(a.workspace_bytes) : NULL;
    if (!run.prefill) { /* (the prefill rows' attention runs on the workspace rows v4_prefill builds) */
        a.q = d_q[0];
        a.keys.indices = d_swa[0];
        a.extra_keys.indices = d_cmp[0];
        NOTE_KERNEL(v4_attention, &a);
    }
    const double us = time_median_us(launch_v4, &run);
    const double bytes = (double)rows * AITER_MLA_V4_TOKEN_BYTES + (double)T * H * 512 * 2 * 2;
    const double flops = 2.0 * H * (double)keys * (512 + 512);
    const double gbs = bytes / (us * 1e-6) / 1e9, tfl = flops / (us * 1e-6) / 1e12;
    printf("| %-21s | %3d | %4d | %3d x %4d | %6d | %9.1f | %7.0f | %7.1f | %5.1f %% | %5.1f %% |\n", r->id, H, K, B, Q,
           run.prefill ? run.prefill->attn.num_splits : a.num_splits, /* the timed call's */
           us, gbs, tfl, 100.0 * gbs / copy_gbs, gemm_tflops > 0 ? 100.0 * tfl / gemm_tflops : 0.0);
    fflush(stdout);
    if (d_o_pages) { /* same keys, other order: o agrees to rounding, else the row is void */
        const size_t n = (size_t)T * H * 512;
        uint16_t *x = (uint16_t *)malloc(n * 2), *y = (uint16_t *)malloc(n * 2);
        double num = 0, den = 0;
        size_t e;
        gpu_sync();
        gpu_download(x, d_o, n * 2);
        gpu_download(y, d_o_pages, n * 2);
        for (e = 0; e < n; e++) {
            const double u = aiter_mla_load_f32(x, (int64_t)e, AITER_MLA_BF16), v = aiter_mla_load_f32(y, (int64_t)e, AITER_MLA_BF16);
            num += (u - v) * (u - v);
            den += v * v;
        }
        if (!(num <= 1e-4 * den)) {
            fprintf(stderr, "bench: %s: o differs from the pages' (relative %.3g)\n", r->id, den > 0 ? sqrt(num / den) : -1.0);
            exit(1);
        }
        free(x);
        free(y);
        gpu_free(d_o_pages);
    }
    for (s = 0; s < sets; s++) {
        gpu_free(d_q[s]);
        gpu_free(d_swa[s]);
        gpu_free(d_cmp[s]);
    }
    gpu_free(swa_cache); gpu_free(cmp_cache); gpu_free(d_swa_len); gpu_free(d_cmp_len); gpu_free(d_lse); gpu_free(d_sink);
    gpu_free(d_o);
    if (a.workspace) gpu_free(a.workspace);
    if (d_meta) gpu_free(d_meta);
    if (d_local) gpu_free(d_local);
    if (pf.workspace) gpu_free(pf.workspace);
    free(meta);
    free(local);
    free(d_q); free(d_swa); free(d_cmp); free(ctx); free(swa); free(cmp); free(swa_len); free(cmp_len); free(pick);
    free(seen_swa); free(seen_cmp);
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

/* ---- launch floor ---------------------------------------------------------------------- */
/* What timing itself and a kernel's launch on the device cost, timed as the rows are: one
 * empty kernel, then two in a row (a decode with its reduce is two launches). */
static void launch_empty(void *ctx, int run) {
    int i, n = *(const int *)ctx;
    (void)run;
    for (i = 0; i < n; i++) gpu_hold(g_stream, 0);
}
static void bench_floor(void) {
    int one = 1, two = 2;
    double t1 = time_median_us(launch_empty, &one), t2 = time_median_us(launch_empty, &two);
    printf("launch floor: one empty kernel %.1f us, two in a row %.1f us (timed as the rows are)\n", t1, t2);
}

/* Arguments, if any, pick rows by id. */
static int wanted(int argc, char **argv, const char *id) {
    int j, w = argc < 2;
    for (j = 1; j < argc; j++) w |= !strcmp(argv[j], id);
    return w;
}

int main(int argc, char **argv) {
    static const bench_row rows[] = {
        {"D1", 16, 1, 128, 4096, 64, AITER_MLA_BF16, AITER_MLA_BF16},
        {"D1-p1", 16, 1, 128, 4096, 1, AITER_MLA_BF16, AITER_MLA_BF16},
        {"D1-fp8", 16, 1, 128, 4096, 64, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16},
        {"D1-fp8q", 16, 1, 128, 4096, 64, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FN},
        {"D1-fp8-p1", 16, 1, 128, 4096, 1, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16},
        {"D2", 16, 1, 128, 8192, 64, AITER_MLA_BF16, AITER_MLA_BF16},
        {"D2-p1", 16, 1, 128, 8192, 1, AITER_MLA_BF16, AITER_MLA_BF16},
        {"D2-fp8", 16, 1, 128, 8192, 64, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16},
        {"D2-fp8-p1", 16, 1, 128, 8192, 1, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16},
        {"D3", 128, 1, 128, 4096, 64, AITER_MLA_BF16, AITER_MLA_BF16},
        {"D3-fp8", 128, 1, 128, 4096, 64, AITER_MLA_FP8_E4M3FN, AITER_MLA_BF16},
        {"D3-fp8q", 128, 1, 128, 4096, 64, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FN},
        {"D4", 128, 2, 128, 4096, 64, AITER_MLA_BF16, AITER_MLA_BF16},
        {"D5", 16, 1, 1, 8192, 64, AITER_MLA_BF16, AITER_MLA_BF16},
        {"D5-graph", 16, 1, 1, 8192, 64, AITER_MLA_BF16, AITER_MLA_BF16},
        {"D6", 64, 1, 128, 4096, 64, AITER_MLA_BF16, AITER_MLA_BF16},
    };
    static const prefill_row prows[] = {
        {"P1", 128, 1, 4096, 4096, 1, AITER_MLA_BF16, 0},   {"P2", 128, 4, 4096, 4096, 1, AITER_MLA_BF16, 0},
        {"P3", 128, 1, 16384, 16384, 1, AITER_MLA_BF16, 0}, {"P4", 128, 1, 4096, 8192, 0, AITER_MLA_BF16, 0},
        {"P1-fp8", 128, 1, 4096, 4096, 1, AITER_MLA_FP8_E4M3FN, 0}, {"P2-fp8", 128, 4, 4096, 4096, 1, AITER_MLA_FP8_E4M3FN, 0},
        {"P3-fp8", 128, 1, 16384, 16384, 1, AITER_MLA_FP8_E4M3FN, 0}, {"P4-fp8", 128, 1, 4096, 8192, 0, AITER_MLA_FP8_E4M3FN, 0},
        {"P1-ps", 128, 1, 4096, 4096, 1, AITER_MLA_BF16, 1},  {"P1-fp8-ps", 128, 1, 4096, 4096, 1, AITER_MLA_FP8_E4M3FN, 1},
    };
    static const sparse_row srows[] = {
        {"SD1", 256, 128, 2048, 128, (int64_t)128 * 8192, 1}, /* decode: batch 128 x q_len 2, 8192 slots each */
        {"SP1", 4096, 128, 2048, 1, 32768, 0},               /* prefill: 4096 tokens over 32768 bf16 slots */
    };
    static const v4_row vrows[] = {
        {"V4D-h16-k512-b4", 16, 512, 4, 1, 0},       {"V4D-h16-k512-b4-graph", 16, 512, 4, 1, 0},
        {"V4D-h16-k512-b32", 16, 512, 32, 1, 0},     {"V4D-h16-k512-b128", 16, 512, 128, 1, 0},
        {"V4D-h16-k512-b512", 16, 512, 512, 1, 0},   {"V4D-h16-k1024-b4", 16, 1024, 4, 1, 0},
        {"V4D-h16-k1024-b32", 16, 1024, 32, 1, 0},   {"V4D-h16-k1024-b128", 16, 1024, 128, 1, 0},
        {"V4D-h16-k1024-b512", 16, 1024, 512, 1, 0}, {"V4D-h64-k512-b4", 64, 512, 4, 1, 0},
        {"V4D-h64-k512-b32", 64, 512, 32, 1, 0},     {"V4D-h64-k512-b128", 64, 512, 128, 1, 0},
        {"V4D-h64-k512-b512", 64, 512, 512, 1, 0},   {"V4D-h64-k1024-b4", 64, 1024, 4, 1, 0},
        {"V4D-h64-k1024-b32", 64, 1024, 32, 1, 0},   {"V4D-h64-k1024-b128", 64, 1024, 128, 1, 0},
        {"V4D-h64-k1024-b512", 64, 1024, 512, 1, 0}, {"V4D-h128-k512-b32", 128, 512, 32, 1, 0},
        {"V4D-h128-k512-b128", 128, 512, 128, 1, 0}, {"V4P-h64", 64, 512, 4, 4096, 0},
        {"V4P-h128", 128, 512, 4, 4096, 0},          {"V4P-h64-ws", 64, 512, 4, 4096, 1},
        {"V4P-h128-ws", 128, 512, 4, 4096, 1},
    };
    double kgbs = 0, mgbs = 0, copy, gemm;
    const char *gemm_why;
    int i, n, decode_header = 0, prefill_header = 0, sparse_header = 0, v4_header = 0, decode_cu = 0;
    /* options first, each with its value; the values are checked by the planners themselves, on
     * plans of the rows' shapes */
    while (argc >= 2 && !strncmp(argv[1], "--", 2)) {
        static const char *const opts[] = {"--decode-cu",  "--decode-overhead", "--decode-granularity", "--prefill-cu",
                                           "--prefill-tile-q", "--prefill-granularity", "--v4-splits"};
        int *const dest[] = {&decode_cu,      &g_decode_overhead,     &g_decode_granularity, &g_prefill_cu,
                             &g_prefill_tile_q, &g_prefill_granularity, &g_v4_splits};
        const int nopts = (int)(sizeof opts / sizeof opts[0]);
        int o = 0;
        char *end = NULL;
        long value;
        while (o < nopts && strcmp(argv[1], opts[o])) o++;
        if (o == nopts) {
            fprintf(stderr, "bench: unknown option %s (usage: %s)\n", argv[1], kUsage);
            return 1;
        }
        value = argc >= 3 ? strtol(argv[2], &end, 10) : 0;
        if (argc < 3 || *end || value < 1 || value > 65536) {
            fprintf(stderr, "bench: %s needs a number in 1..65536\n", opts[o]);
            return 1;
        }
        *dest[o] = (int)value;
        argv[2] = argv[0]; /* the rest behind the program's name */
        argv += 2;
        argc -= 2;
    }
    for (i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--", 2)) {
            fprintf(stderr, "bench: option %s after a row name (usage: %s)\n", argv[i], kUsage);
            return 1;
        }
    {
        aiter_mla_decode_plan_desc pd = {0};
        aiter_mla_decode_plan_info info;
        pd.max_batch = pd.max_q_len = 1;
        pd.num_heads = 16;
        pd.num_cu = decode_cu ? decode_cu : 1;
        pd.page_size = 64;
        pd.overhead_blocks = g_decode_overhead;
        pd.kv_granularity = g_decode_granularity;
        if (aiter_mla_decode_plan_get_info(&pd, &info) != AITER_MLA_OK) {
            fprintf(stderr, "bench: %s\n", aiter_mla_last_error());
            return 1;
        }
    }
    {
        aiter_mla_prefill_plan_desc pd = {0};
        aiter_mla_prefill_plan_info info;
        pd.max_batch = pd.num_heads = 1;
        pd.max_q_tokens = 1;
        pd.num_cu = g_prefill_cu ? g_prefill_cu : 1;
        pd.tile_q = g_prefill_tile_q;
        pd.kv_granularity = g_prefill_granularity;
        if (aiter_mla_prefill_plan_get_info(&pd, &info) != AITER_MLA_OK) {
            fprintf(stderr, "bench: %s\n", aiter_mla_last_error());
            return 1;
        }
    }
    if (!gpu_device_count()) {
        fprintf(stderr, "bench: no GPU device\n");
        return 1;
    }
    g_stream = gpu_stream_create();
    g_timer = gpu_timer_create();
    printf("GPU: %s, %d CUs, L2 %.0f MB\n", gpu_name(), gpu_num_cu(), gpu_l2_bytes() / 1e6);
    copy = copy_ceiling_gbs(&kgbs, &mgbs);
    gemm = gemm_ceiling_tflops(&gemm_why);
    if (gemm > 0)
        printf("ceilings: copy kernel %.0f GB/s, memcpy d2d %.0f GB/s (read + write); bf16 GEMM 8192^3 %.0f TFLOP/s\n", kgbs, mgbs, gemm);
    else /* the % GEMM column then reads 0 */
        printf("ceilings: copy kernel %.0f GB/s, memcpy d2d %.0f GB/s (read + write); bf16 GEMM none (%s)\n", kgbs, mgbs, gemm_why);
    bench_planner(gpu_num_cu());
    bench_floor();
    if (decode_cu || g_decode_overhead || g_decode_granularity)
        printf("decode plans: %d CUs, overhead_blocks %d, kv_granularity %d (0: the default)\n", decode_cu ? decode_cu : gpu_num_cu(),
               g_decode_overhead, g_decode_granularity);
    if (g_prefill_cu || g_prefill_tile_q || g_prefill_granularity) {
        printf("persistent prefill plans: ");
        if (g_prefill_cu) printf("%d lists", g_prefill_cu);
        else printf("lists fitted (aiter_mla_prefill_plan_fit_lists)");
        printf(", tile_q %d, kv_granularity %d (0: the default)\n", g_prefill_tile_q ? g_prefill_tile_q : 128, g_prefill_granularity);
    }
    if (g_v4_splits) printf("V4 decode rows: num_splits %d\n", g_v4_splits);
    for (i = 0; i < (int)(sizeof rows / sizeof rows[0]); i++) {
        if (!wanted(argc, argv, rows[i].id)) continue;
        if (!decode_header) {
            printf("\n| row      |   H | q | batch |   ctx | pg  | cache | median us |    GB/s | TFLOP/s | %% copy | %% GEMM |\n");
            printf("|----------|-----|---|-------|-------|-----|-------|-----------|---------|---------|---------|---------|\n");
            decode_header = 1;
        }
        start_row(rows[i].id);
        bench_decode(&rows[i], copy, gemm, decode_cu ? decode_cu : gpu_num_cu(), gpu_l2_bytes());
    }
    for (i = 0; i < (int)(sizeof srows / sizeof srows[0]); i++) {
        if (!wanted(argc, argv, srows[i].id)) continue;
        if (!sparse_header) {
            printf("\n| row  | shape                                                          | median us | TFLOP/s | %% GEMM |\n");
            printf("|------|----------------------------------------------------------------|-----------|---------|---------|\n");
            sparse_header = 1;
        }
        start_row(srows[i].id);
        bench_sparse(&srows[i], gemm, gpu_num_cu());
    }
    for (i = 0; i < (int)(sizeof vrows / sizeof vrows[0]); i++) {
        if (!wanted(argc, argv, vrows[i].id)) continue;
        if (!v4_header) {
            printf("\n| row                   |   H | topk | batch x q  | splits | median us |    GB/s | TFLOP/s | %% copy  | %% GEMM |\n");
            printf("|-----------------------|-----|------|------------|--------|-----------|---------|---------|---------|---------|\n");
            v4_header = 1;
        }
        start_row(vrows[i].id);
        bench_v4(&vrows[i], copy, gemm, gpu_l2_bytes(), gpu_num_cu());
    }
    if (wanted(argc, argv, "IDX") || wanted(argc, argv, "IDX-L") || wanted(argc, argv, "DSW") || wanted(argc, argv, "DSW-L") ||
        wanted(argc, argv, "GATH")) {
        printf("\n| row   | shape                                                | median us |    GB/s | %% copy  |\n");
        printf("|-------|------------------------------------------------------|-----------|---------|---------|\n");
    }
    if (wanted(argc, argv, "IDX")) start_row("IDX"), bench_idx("IDX", 4096, copy, gpu_l2_bytes());
    if (wanted(argc, argv, "IDX-L")) start_row("IDX-L"), bench_idx("IDX-L", 16384, copy, gpu_l2_bytes());
    if (wanted(argc, argv, "DSW")) start_row("DSW"), bench_dsw("DSW", 65536, copy, gpu_l2_bytes());
    if (wanted(argc, argv, "DSW-L")) start_row("DSW-L"), bench_dsw("DSW-L", 262144, copy, gpu_l2_bytes());
    if (wanted(argc, argv, "GATH")) start_row("GATH"), bench_gath(copy, gpu_l2_bytes());
    for (i = 0; i < (int)(sizeof prows / sizeof prows[0]); i++) {
        if (!wanted(argc, argv, prows[i].id)) continue;
        if (!prefill_header) {
            printf("\n| row       |   H | batch x sq x sk   | mask   | qkv  | schedule   | median us | TFLOP/s | %% GEMM |\n");
            printf("|-----------|-----|-------------------|--------|------|------------|-----------|---------|---------|\n");
            prefill_header = 1;
        }
        start_row(prows[i].id);
        bench_prefill(&prows[i], gemm, gpu_num_cu());
    }
    if (g_host_rows) {
        printf("\nhost cost per run (median CPU us of the calls that enqueue one timed run, stream held):");
        for (i = 0; i < g_host_rows; i++) printf("%s %s %.1f", i % 8 ? "," : "\n ", g_host_ids[i], g_host_us[i]);
        printf("\n\nattention kernel per row (aiter_mla_*_kernel):");
        for (i = 0, n = 0; i < g_host_rows; i++)
            if (g_host_kernels[i]) printf("%s %s %s", n++ % 8 ? "," : "\n ", g_host_ids[i], g_host_kernels[i]);
        printf("\n");
    }
    gpu_timer_destroy(g_timer);
    gpu_stream_destroy(g_stream);
    return 0;
}
#endif
