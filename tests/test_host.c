/* test_host.c - host-side tests of aiter_mla.h (converters, helpers, planners, CPU references,
 * validation). Build (from the repository root):
 *
 *   gcc -std=c99 -Wall -Wextra -Werror -pedantic -g -fsanitize=address,undefined -I. \
 *       tests/test_host.c -lm && ./a.out
 *
 * Every expected value is computed here, from SPEC.md and the header's comments, with code
 * written for the test (never with the library function under test). The last line printed
 * is "N passed, N failed"; the exit status is non-zero when anything failed. */
#ifndef AITER_MLA_IMPLEMENTATION
#define AITER_MLA_IMPLEMENTATION
#endif
#ifndef AITER_MLA_NO_GPU
#define AITER_MLA_NO_GPU
#endif
#include <stdlib.h>
/* The library's host scratch comes through here, so that a test can make it run out. */
static int g_alloc_failures; /* > 0: that many of the next AITER_MLA_MALLOC calls return NULL */
static void *test_host_alloc(size_t n) {
    if (g_alloc_failures > 0) {
        g_alloc_failures--;
        return NULL;
    }
    return malloc(n);
}
#define AITER_MLA_MALLOC(n) test_host_alloc(n)
#define AITER_MLA_FREE(p) free(p)
#include "../aiter_mla.h"
#include "testing.h"

/* expr (a call that succeeds as it stands) with the library's next host allocation failing:
 * ERR_OUT_OF_MEMORY, after asking for it (before any output is written: the callers' outputs
 * are checked by the same call succeeding afterwards). */
#define CHECK_OUT_OF_MEMORY(expr)                                                                   \
    do {                                                                                            \
        g_alloc_failures = 1;                                                                       \
        CHECK_STATUS((expr), AITER_MLA_ERR_OUT_OF_MEMORY, "out of host memory");                    \
        CHECK(g_alloc_failures == 0, "%s: asked for no host memory", #expr);                        \
        g_alloc_failures = 0;                                                                       \
    } while (0)

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }
static int ceil_div(int a, int b) { return (a + b - 1) / b; }
static float bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static int32_t *alloc_i32(int64_t n) { return (int32_t *)test_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t)); }
static float *alloc_f32(int64_t n) { return (float *)test_malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }
static double *alloc_f64(int64_t n) { return (double *)test_malloc((size_t)(n > 0 ? n : 1) * sizeof(double)); }
/* bytes of src copied one byte past the start of buf (from malloc, bytes + 1 long or more):
 * a caller's misaligned array, its contents what src holds. */
static void *misaligned_copy(void *buf, const void *src, size_t bytes) {
    memcpy((char *)buf + 1, src, bytes);
    return (char *)buf + 1;
}
static void *alloc_elems(int64_t n, aiter_mla_dtype t) {
    return test_malloc((size_t)(n > 0 ? n : 1) * test_dtype_bytes(t));
}
/* A failure message without its op name ("decode: num_heads ..." -> "num_heads ..."). */
static const char *after_op_name(const char *msg) {
    const char *p = strstr(msg, ": ");
    return p ? p + 2 : msg;
}

/* aiter_mla_<op>_kernel against aiter_mla_<op> on the same args: the same refusal (status and
 * message after the op name), or where the call gets past its checks (ERR_NO_GPU in this
 * build, with nothing to launch too; never OK) OK and AITER_MLA_KERNEL_NONE. */
#define CHECK_KERNEL_LIKE_CALL(op, args)                                                                      \
    do {                                                                                                              \
        char kc_msg_[320];                                                                                            \
        aiter_mla_kernel kc_k_ = AITER_MLA_KERNEL_MFMA;                                                               \
        const aiter_mla_status kc_call_ = aiter_mla_##op((args), NULL);                                              \
        aiter_mla_status kc_query_;                                                                                   \
        snprintf(kc_msg_, sizeof kc_msg_, "%s", kc_call_ == AITER_MLA_OK ? "" : aiter_mla_last_error());             \
        kc_query_ = aiter_mla_##op##_kernel((args), &kc_k_);                                                          \
        if (kc_call_ == AITER_MLA_ERR_NO_GPU)                                                                         \
            CHECK(kc_query_ == AITER_MLA_OK && kc_k_ == AITER_MLA_KERNEL_NONE,                                        \
                  "%s_kernel(%s): %s \"%s\", kernel %s; the call: %s", #op, #args, testing_status_name(kc_query_),     \
                  aiter_mla_last_error(), aiter_mla_kernel_name(kc_k_), testing_status_name(kc_call_));               \
        else                                                                                                          \
            CHECK(kc_call_ != AITER_MLA_OK && kc_query_ == kc_call_ &&                                                \
                      !strcmp(after_op_name(kc_msg_), after_op_name(aiter_mla_last_error())),                         \
                  "%s_kernel(%s): %s \"%s\"; the call: %s \"%s\"", #op, #args, testing_status_name(kc_query_),          \
                  aiter_mla_last_error(), testing_status_name(kc_call_), kc_msg_);                                    \
    } while (0)

/* A known message left in aiter_mla_last_error() before a call (a success leaves the message
 * as it was), so that a failure shows it wrote its own; armed holds ARMED_MSG_BYTES. */
enum { ARMED_MSG_BYTES = 320 };
static void arm_last_error(char *armed) {
    (void)aiter_mla_merge_attn_states_ref(NULL);
    snprintf(armed, ARMED_MSG_BYTES, "%s", aiter_mla_last_error());
}
/* st is a failure status with a message of its own (not the armed one, not empty). */
static int failed_with_message(aiter_mla_status st, const char *armed) {
    const char *msg = aiter_mla_last_error();
    return st > AITER_MLA_OK && st < AITER_MLA_STATUS_COUNT && msg[0] != '\0' && strcmp(msg, armed) != 0;
}

/* =====================================================================================
 * scalar fields at their extremes: each size, stride, count, flag, dtype and scale of a
 * valid call, set alone to every value of its kind's list (and to its own value +-1 and
 * doubled). The GPU wrapper (its checks alone in this build) accepts (ERR_NO_GPU; OK from the
 * host-only ops the sweep also takes) or refuses with a status and a message of its own; a refusal is the
 * reference's too (status and message after the op name) and the kernel query's. The binary
 * runs under ASan/UBSan: an overflow in a check, or a read past a buffer, aborts it.
 * tests/check_sweep_fields.sh holds the sweep_*_fields tables below against the header's
 * structs: a new field goes into its table, or is named there as "sweep-skip: NAME (why)".
 * ===================================================================================== */
typedef enum { SW_INT, SW_I64, SW_SIZE, SW_DTYPE, SW_FLOAT } sweep_kind;
typedef struct sweep_field {
    const char *name;
    size_t offset, size;
    sweep_kind kind;
    int gpu_only; /* a field the reference ignores, or reads without the GPU call's check against its plan:
                     the reference is not called */
} sweep_field;
/* The host ABI's alignment of int64_t (8 on x86-64, 4 on i386): half of it misaligns one. */
typedef struct int64_in_struct {
    char c;
    int64_t x;
} int64_in_struct;
#define INT64_ALIGN offsetof(int64_in_struct, x)
#define SW(T, f, kind) {#f, offsetof(T, f), sizeof(((T *)0)->f), kind, 0}
#define SWG(T, f, kind) {#f, offsetof(T, f), sizeof(((T *)0)->f), kind, 1}
typedef struct sweep_op {
    const char *name;
    size_t args_size;
    aiter_mla_status (*gpu)(const void *args);                       /* the wrapper, stream NULL */
    aiter_mla_status (*ref)(const void *args);                       /* NULL: none to compare */
    aiter_mla_status (*query)(const void *args, aiter_mla_kernel *k); /* NULL: no kernel query */
} sweep_op;
/* sweep_<op>: aiter_mla_<op> (stream NULL) against aiter_mla_<op>_ref; _QUERY adds aiter_mla_<op>_kernel. */
#define SWEEP_CALLS_(op, T)                                                                              \
    static aiter_mla_status sweep_gpu_##op(const void *a) { return aiter_mla_##op((const T *)a, NULL); } \
    static aiter_mla_status sweep_ref_##op(const void *a) { return aiter_mla_##op##_ref((const T *)a); }
#define SWEEP_OP(op, T) \
    SWEEP_CALLS_(op, T) \
    static const sweep_op sweep_##op = {#op, sizeof(T), sweep_gpu_##op, sweep_ref_##op, NULL}
#define SWEEP_OP_QUERY(op, T)                                                                                               \
    SWEEP_CALLS_(op, T)                                                                                                     \
    static aiter_mla_status sweep_query_##op(const void *a, aiter_mla_kernel *k) { return aiter_mla_##op##_kernel((const T *)a, k); } \
    static const sweep_op sweep_##op = {#op, sizeof(T), sweep_gpu_##op, sweep_ref_##op, sweep_query_##op}

static int sweep_rounds = 1; /* test_host --rounds */
static const int64_t sweep_ints[] = {-1, 0, 1, 2, 3, 7, 15, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512,
                                     513, 575, 576, 577, 1023, 1024, 1025, 65535, 65536, 65537, 1 << 24, INT32_MAX - 1,
                                     INT32_MAX, INT32_MIN, INT32_MIN + 1, -2, -(1 << 20)};
static const int64_t sweep_i64s[] = {(int64_t)1 << 31, ((int64_t)1 << 31) + 1, (int64_t)1 << 32, ((int64_t)1 << 32) + 1,
                                     (int64_t)1 << 40, (int64_t)1 << 53, (int64_t)1 << 62, INT64_MAX - 1, INT64_MAX,
                                     INT64_MIN, INT64_MIN + 1, -((int64_t)1 << 32), -((int64_t)1 << 40)};
static const float sweep_floats[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 1e-45f, 1e-38f, 1e-30f, 1e30f, FLT_MAX,
                                     -FLT_MAX, 240.0f, 448.0f, 57344.0f};

/* The field's value in args as an int64 (floats: 0). */
static int64_t sweep_get(const unsigned char *args, const sweep_field *f) {
    int32_t v32;
    int64_t v64;
    size_t vz;
    switch (f->kind) {
    case SW_I64: memcpy(&v64, args + f->offset, 8); return v64;
    case SW_SIZE: memcpy(&vz, args + f->offset, sizeof vz); return (int64_t)vz;
    case SW_FLOAT: return 0;
    default: memcpy(&v32, args + f->offset, 4); return v32;
    }
}
static void sweep_set(unsigned char *args, const sweep_field *f, int64_t v, float fv) {
    const int32_t v32 = (int32_t)(v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : v);
    const size_t vz = (size_t)v;
    switch (f->kind) {
    case SW_I64: memcpy(args + f->offset, &v, 8); break;
    case SW_SIZE: memcpy(args + f->offset, &vz, sizeof vz); break;
    case SW_FLOAT: memcpy(args + f->offset, &fv, 4); break;
    default: memcpy(args + f->offset, &v32, 4); break;
    }
}

/* Refusals only the GPU call makes (documented in the header): its 32-bit indexing, a plan
 * sized for other arguments, and the plan or workspace over an input (the references take
 * neither). */
static int sweep_gpu_rule(const char *msg) {
    static const char *const rules[] = {"(split the batch)", "but the plan was sized for", "workspace overlaps", "plan overlaps"};
    size_t i;
    for (i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (strstr(msg, rules[i])) return 1;
    return 0;
}
/* One call's arguments (gpu_only: the reference is not to be called; several: more than one
 * field changed, where the GPU call, which cannot read device arrays, may meet another of the
 * errors first, so that the reference need only refuse too): the checks' answers. Returns NULL when they hold, else what broke
 * (written into why). */
static const char *sweep_one(const sweep_op *op, int gpu_only, int several, const unsigned char *args, char *why, size_t n) {
    char msg[ARMED_MSG_BYTES];
    aiter_mla_status st, st_ref, st_q;
    aiter_mla_kernel k = AITER_MLA_KERNEL_MFMA;
    arm_last_error(msg);
    st = op->gpu(args);
    if (st == AITER_MLA_OK || st == AITER_MLA_ERR_NO_GPU) {
        if (op->query && ((st_q = op->query(args, &k)) != AITER_MLA_OK || k != AITER_MLA_KERNEL_NONE)) {
            snprintf(why, n, "the call accepted it, the kernel query says %s \"%s\" (kernel %s)", testing_status_name(st_q),
                     st_q == AITER_MLA_OK ? "" : aiter_mla_last_error(), aiter_mla_kernel_name(k));
            return why;
        }
        return NULL;
    }
    if (!failed_with_message(st, msg)) {
        snprintf(why, n, "the call returned %d without a message of its own (last error \"%s\")", (int)st, aiter_mla_last_error());
        return why;
    }
    snprintf(msg, sizeof msg, "%s", aiter_mla_last_error());
    if (op->query) {
        st_q = op->query(args, &k);
        if (st_q != st || strcmp(after_op_name(msg), after_op_name(aiter_mla_last_error()))) {
            snprintf(why, n, "the wrapper: %s \"%s\"; the kernel query: %s \"%s\"", testing_status_name(st), msg,
                     testing_status_name(st_q), aiter_mla_last_error());
            return why;
        }
    }
    if (op->ref && !gpu_only && !sweep_gpu_rule(msg)) {
        st_ref = op->ref(args);
        if (several ? st_ref == AITER_MLA_OK : st_ref != st || strcmp(after_op_name(msg), after_op_name(aiter_mla_last_error()))) {
            snprintf(why, n, "the wrapper: %s \"%s\"; the reference: %s \"%s\"", testing_status_name(st), msg,
                     testing_status_name(st_ref), st_ref == AITER_MLA_OK ? "" : aiter_mla_last_error());
            return why;
        }
    }
    return NULL;
}

/* Value j of field f's list into *v or *fv: the kind's list, then (integers) own - 1, own + 1
 * and 2 own. 0 once j is past the list. */
static int sweep_value(const sweep_field *f, int j, int64_t own, int64_t *v, float *fv) {
    const int ni = (int)(sizeof sweep_ints / sizeof sweep_ints[0]), nl = (int)(sizeof sweep_i64s / sizeof sweep_i64s[0]);
    const int nf = (int)(sizeof sweep_floats / sizeof sweep_floats[0]), nd = (int)AITER_MLA_DTYPE_COUNT;
    *v = 0;
    *fv = 0.0f;
    switch (f->kind) {
    case SW_FLOAT:
        if (j >= nf + 3) return 0;
        *fv = j < nf ? sweep_floats[j] : j == nf ? NAN : j == nf + 1 ? INFINITY : -INFINITY;
        return 1;
    case SW_DTYPE: /* -1 .. nd, then far outside */
        if (j > nd + 4) return 0;
        *v = j <= nd + 1 ? j - 1 : j == nd + 2 ? 1000 : j == nd + 3 ? INT32_MAX : INT32_MIN;
        return 1;
    default:
        if (j < ni) *v = sweep_ints[j];
        else if (j < ni + 3) *v = j == ni ? own - 1 : j == ni + 1 ? own + 1 : own * 2;
        else if (f->kind != SW_INT && j < ni + 3 + nl) *v = sweep_i64s[j - ni - 3];
        else return 0;
        return 1;
    }
}

/* "name = value" of field f into dst (n bytes); snprintf's count. */
static int sweep_print(char *dst, size_t n, const sweep_field *f, int64_t v, float fv) {
    if (f->kind == SW_FLOAT) return snprintf(dst, n, "%s = %g", f->name, (double)fv);
    return snprintf(dst, n, "%s = %lld", f->name, (long long)v);
}

/* Every field of `fields` through every value of its list (one check a field), then random
 * sets of two or three fields at once (one check), where products of sizes overflow. */
static void sweep_fields(const sweep_op *op, const void *base, const sweep_field *fields, int num_fields) {
    unsigned char *args = (unsigned char *)test_malloc(op->args_size);
    char why[900], what[200] = "";
    const char *bad = NULL;
    test_rng r = rng_seed(0x5eeb);
    int i, j, t;
    for (i = 0; i < num_fields; i++) {
        const sweep_field *f = &fields[i];
        const size_t want = f->kind == SW_I64 ? 8 : f->kind == SW_SIZE ? sizeof(size_t) : 4;
        int64_t v;
        float fv;
        if (f->size != want) {
            CHECK(0, "%s sweep: field %s has %zu bytes, its kind %zu", op->name, f->name, f->size, want);
            free(args);
            return;
        }
        for (bad = NULL, j = 0; !bad && sweep_value(f, j, sweep_get((const unsigned char *)base, f), &v, &fv); j++) {
            memcpy(args, base, op->args_size);
            sweep_set(args, f, v, fv);
            bad = sweep_one(op, f->gpu_only, 0, args, why, sizeof why);
            sweep_print(what, sizeof what, f, v, fv);
        }
        CHECK(!bad, "%s sweep: %s: %s", op->name, what, bad ? bad : "");
    }
    for (bad = NULL, t = 0; !bad && num_fields > 1 && t < 40 * num_fields * sweep_rounds; t++) {
        const int n = rng_int(&r, 2, num_fields > 2 ? 3 : 2);
        int gpu_only = 0, k;
        size_t len = 0;
        memcpy(args, base, op->args_size);
        for (k = 0; k < n; k++) {
            const sweep_field *f = &fields[rng_int(&r, 0, num_fields - 1)];
            const int64_t own = sweep_get((const unsigned char *)base, f);
            int64_t v;
            float fv;
            int count = 0;
            while (sweep_value(f, count, own, &v, &fv)) count++;
            sweep_value(f, rng_int(&r, 0, count - 1), own, &v, &fv);
            sweep_set(args, f, v, fv);
            gpu_only |= f->gpu_only;
            if (k) len += (size_t)snprintf(what + len, sizeof what - len, ", ");
            if (len >= sizeof what) len = sizeof what - 1;
            len += (size_t)sweep_print(what + len, sizeof what - len, f, v, fv);
            if (len >= sizeof what) len = sizeof what - 1;
        }
        bad = sweep_one(op, gpu_only, 1, args, why, sizeof why);
    }
    if (num_fields > 1) CHECK(!bad, "%s sweep, fields together: %s: %s", op->name, what, bad ? bad : "");
    free(args);
}
#define SWEEP(op, base, fields) sweep_fields(&sweep_##op, &(base), fields, (int)(sizeof fields / sizeof fields[0]))

/* A cache's optional size, field f of args (from base), where `need` is the bytes base's other
 * fields describe: exactly need is taken by op's reference and its GPU wrapper, need - 1 refused
 * by both, the message naming `name`. */
#define CACHE_BYTES_CASES(op, args, base, f, need, name)                                       \
    do {                                                                                         \
        args = base;                                                                             \
        args.f = (size_t)(need);                                                                 \
        CHECK_STATUS(aiter_mla_##op##_ref(&args), AITER_MLA_OK, "");                             \
        CHECK_STATUS(aiter_mla_##op(&args, NULL), AITER_MLA_ERR_NO_GPU, "");                     \
        args.f = (size_t)(need) - 1;                                                             \
        CHECK_STATUS(aiter_mla_##op##_ref(&args), AITER_MLA_ERR_BUFFER_TOO_SMALL, name);         \
        CHECK_STATUS(aiter_mla_##op(&args, NULL), AITER_MLA_ERR_BUFFER_TOO_SMALL, name);         \
    } while (0)

/* Calls that size a plan or a workspace: OK, or a refusal of their own (nothing to compare). */
static aiter_mla_status sweep_gpu_decode_plan_get_info(const void *a) {
    aiter_mla_decode_plan_info info;
    return aiter_mla_decode_plan_get_info((const aiter_mla_decode_plan_desc *)a, &info);
}
static aiter_mla_status sweep_gpu_prefill_plan_get_info(const void *a) {
    aiter_mla_prefill_plan_info info;
    return aiter_mla_prefill_plan_get_info((const aiter_mla_prefill_plan_desc *)a, &info);
}
static aiter_mla_status sweep_gpu_v4_attention_workspace_size(const void *a) {
    size_t bytes;
    return aiter_mla_v4_attention_workspace_size((const aiter_mla_v4_attention_args *)a, &bytes);
}
static aiter_mla_status sweep_gpu_v4_prefill_workspace_size(const void *a) {
    size_t bytes;
    return aiter_mla_v4_prefill_workspace_size((const aiter_mla_v4_prefill_args *)a, &bytes);
}
/* Host calls with no GPU twin: OK, or a refusal of their own. Their tables hold only the
 * fields that cannot widen what the call reads or writes of the caller's arrays. */
static aiter_mla_status sweep_gpu_decode_metadata_build(const void *a) {
    return aiter_mla_decode_metadata_build((const aiter_mla_decode_metadata_args *)a);
}
static aiter_mla_status sweep_gpu_reduce_ref(const void *a) { return aiter_mla_reduce_ref((const aiter_mla_reduce_args *)a); }
static const sweep_op sweep_decode_metadata_build = {"decode_metadata_build", sizeof(aiter_mla_decode_metadata_args),
                                                     sweep_gpu_decode_metadata_build, NULL, NULL};
static const sweep_op sweep_reduce_ref = {"reduce_ref", sizeof(aiter_mla_reduce_args), sweep_gpu_reduce_ref, NULL, NULL};
static const sweep_op sweep_decode_plan_get_info = {"decode_plan_get_info", sizeof(aiter_mla_decode_plan_desc),
                                                    sweep_gpu_decode_plan_get_info, NULL, NULL};
static const sweep_op sweep_prefill_plan_get_info = {"prefill_plan_get_info", sizeof(aiter_mla_prefill_plan_desc),
                                                     sweep_gpu_prefill_plan_get_info, NULL, NULL};
static const sweep_op sweep_v4_attention_workspace_size = {"v4_attention_workspace_size", sizeof(aiter_mla_v4_attention_args),
                                                           sweep_gpu_v4_attention_workspace_size, NULL, NULL};
static const sweep_op sweep_v4_prefill_workspace_size = {"v4_prefill_workspace_size", sizeof(aiter_mla_v4_prefill_args),
                                                         sweep_gpu_v4_prefill_workspace_size, NULL, NULL};
SWEEP_OP(pad_q, aiter_mla_head_pad_args);
SWEEP_OP(unpad_o, aiter_mla_head_pad_args);
SWEEP_OP(expand_page_indices, aiter_mla_expand_page_indices_args);
SWEEP_OP(kv_cache_write, aiter_mla_kv_cache_write_args);
SWEEP_OP_QUERY(decode, aiter_mla_decode_args);
SWEEP_OP(convert_sparse_indices, aiter_mla_sparse_index_args);
SWEEP_OP(filter_prefill_indices, aiter_mla_filter_prefill_args);
SWEEP_OP(ds_mla_write, aiter_mla_ds_mla_write_args);
SWEEP_OP(gather_cache, aiter_mla_gather_cache_args);
SWEEP_OP(v4_cache_write, aiter_mla_v4_cache_write_args);
SWEEP_OP(v4_gather, aiter_mla_v4_gather_args);
SWEEP_OP(v4_swa_indices, aiter_mla_v4_swa_index_args);
SWEEP_OP(v4_global_topk, aiter_mla_v4_topk_args);
SWEEP_OP(v4_c128_indices, aiter_mla_v4_c128_args);
SWEEP_OP(v4_combine, aiter_mla_v4_combine_args);
SWEEP_OP(v4_copy_ragged, aiter_mla_v4_ragged_copy_args);
SWEEP_OP(merge_attn_states, aiter_mla_merge_args);
SWEEP_OP_QUERY(prefill, aiter_mla_prefill_args);
SWEEP_OP_QUERY(sparse_attention, aiter_mla_sparse_args);
SWEEP_OP_QUERY(v4_attention, aiter_mla_v4_attention_args);
SWEEP_OP(v4_prefill, aiter_mla_v4_prefill_args);

#define T_ aiter_mla_decode_plan_desc
static const sweep_field sweep_decode_desc_fields[] = {SW(T_, max_batch, SW_INT),     SW(T_, num_heads, SW_INT), SW(T_, max_q_len, SW_INT),
                                                       SW(T_, num_cu, SW_INT),        SW(T_, page_size, SW_INT), SW(T_, kv_granularity, SW_INT),
                                                       SW(T_, overhead_blocks, SW_INT)};
#undef T_
#define T_ aiter_mla_prefill_plan_desc
static const sweep_field sweep_prefill_desc_fields[] = {SW(T_, max_batch, SW_INT), SW(T_, max_q_tokens, SW_I64), SW(T_, num_heads, SW_INT),
                                                        SW(T_, num_cu, SW_INT),    SW(T_, dv, SW_INT),           SW(T_, tile_q, SW_INT),
                                                        SW(T_, kv_granularity, SW_INT)};
#undef T_
#define T_ aiter_mla_decode_metadata_args
/* sweep-skip: block_table_stride (a wider stride reads past the caller's block table) */
/* sweep-skip: batch (more requests read past seq_lens and write past the outputs) */
static const sweep_field sweep_metadata_fields[] = {SW(T_, q_len, SW_INT), SW(T_, page_size, SW_INT),
                                                    SW(T_, kv_indices_capacity, SW_I64)};
#undef T_
#define T_ aiter_mla_reduce_args
/* sweep-skip: num_tiles (more tiles read past the caller's maps) */
/* sweep-skip: num_heads (more heads read past the partials and write past o and lse) */
/* sweep-skip: dv (a wider row reads past the partials and writes past o) */
/* sweep-skip: o_stride_token (a wider stride writes past o) */
/* sweep-skip: o_stride_head (a wider stride writes past o) */
/* sweep-skip: lse_stride_token (a wider stride writes past lse) */
/* sweep-skip: lse_stride_head (a wider stride writes past lse) */
static const sweep_field sweep_reduce_fields[] = {SW(T_, num_partial_rows, SW_INT), SW(T_, empty_lse_neg_inf, SW_INT),
                                                  SW(T_, o_dtype, SW_DTYPE)};
#undef T_
#define T_ aiter_mla_head_pad_args
static const sweep_field sweep_head_pad_fields[] = {SW(T_, num_tokens, SW_I64), SW(T_, num_heads, SW_INT), SW(T_, head_dim, SW_INT),
                                                    SW(T_, dtype, SW_DTYPE)};
#undef T_
#define T_ aiter_mla_expand_page_indices_args
static const sweep_field sweep_expand_fields[] = {SW(T_, block_table_stride, SW_I64), SW(T_, page_indices_capacity, SW_I64),
                                                  SW(T_, batch, SW_INT), SW(T_, kernel_block_size, SW_INT)};
#undef T_
#define T_ aiter_mla_kv_cache_write_args
static const sweep_field sweep_kv_write_fields[] = {SW(T_, kv_c_stride, SW_I64), SW(T_, k_pe_stride, SW_I64), SW(T_, num_blocks, SW_I64), SW(T_, kv_cache_bytes, SW_SIZE),
                                                    SW(T_, block_size, SW_INT),   SW(T_, num_tokens, SW_I64), SW(T_, src_dtype, SW_DTYPE),
                                                    SW(T_, cache_dtype, SW_DTYPE), SW(T_, scale, SW_FLOAT)};
#undef T_
#define T_ aiter_mla_decode_args
static const sweep_field sweep_decode_fields[] = {
    SW(T_, q_stride_token, SW_I64), SW(T_, q_stride_head, SW_I64), SW(T_, num_pages, SW_I64),   SW(T_, kv_cache_bytes, SW_SIZE), SW(T_, o_stride_token, SW_I64),
    SW(T_, o_stride_head, SW_I64),  SWG(T_, workspace_bytes, SW_SIZE), SWG(T_, batch, SW_INT), SW(T_, num_heads, SW_INT),
    SW(T_, page_size, SW_INT),      SW(T_, q_dtype, SW_DTYPE),       SW(T_, kv_dtype, SW_DTYPE), SW(T_, o_dtype, SW_DTYPE),
    SW(T_, sm_scale, SW_FLOAT),     SW(T_, q_scale, SW_FLOAT),       SW(T_, kv_scale, SW_FLOAT)};
#undef T_
#define T_ aiter_mla_sparse_index_args
static const sweep_field sweep_sparse_index_fields[] = {SW(T_, indices_stride, SW_I64), SW(T_, block_table_stride, SW_I64),
                                                        SW(T_, block_size, SW_INT),     SW(T_, num_requests, SW_INT),
                                                        SW(T_, num_tokens, SW_I64),     SW(T_, topk, SW_INT),
                                                        SW(T_, out_stride, SW_I64)};
#undef T_
#define T_ aiter_mla_filter_prefill_args
static const sweep_field sweep_filter_fields[] = {SW(T_, num_requests, SW_INT), SW(T_, num_tokens, SW_I64), SW(T_, topk, SW_INT)};
#undef T_
#define T_ aiter_mla_ds_mla_write_args
static const sweep_field sweep_ds_write_fields[] = {SW(T_, kv_c_stride, SW_I64), SW(T_, k_pe_stride, SW_I64), SW(T_, num_blocks, SW_I64), SW(T_, kv_cache_bytes, SW_SIZE),
                                                    SW(T_, block_size, SW_INT),   SW(T_, num_tokens, SW_I64), SW(T_, src_dtype, SW_DTYPE),
                                                    SW(T_, fp8_dtype, SW_DTYPE),  SW(T_, fp8_max, SW_FLOAT),  SW(T_, pow2_scales, SW_INT)};
#undef T_
#define T_ aiter_mla_gather_cache_args
static const sweep_field sweep_gather_fields[] = {SW(T_, num_blocks, SW_I64), SW(T_, kv_cache_bytes, SW_SIZE),     SW(T_, block_size, SW_INT), SW(T_, cache_dtype, SW_DTYPE),
                                                  SW(T_, scale, SW_FLOAT),        SW(T_, cache_is_ds_mla, SW_INT), SW(T_, ds_mla_fp8, SW_DTYPE),
                                                  SW(T_, block_table_stride, SW_I64), SW(T_, batch, SW_INT), SW(T_, out_rows, SW_I64),
                                                  SW(T_, out_dtype, SW_DTYPE)};
#undef T_
#define T_ aiter_mla_v4_cache_write_args
static const sweep_field sweep_v4_write_fields[] = {SW(T_, kv_stride, SW_I64),   SW(T_, num_blocks, SW_I64), SW(T_, kv_cache_bytes, SW_SIZE), SW(T_, block_size, SW_INT),
                                                    SW(T_, page_stride_bytes, SW_I64), SW(T_, num_tokens, SW_I64), SW(T_, src_dtype, SW_DTYPE),
                                                    SW(T_, fp8_dtype, SW_DTYPE), SW(T_, fp8_max, SW_FLOAT)};
#undef T_
#define T_ aiter_mla_v4_gather_args
static const sweep_field sweep_v4_gather_fields[] = {SW(T_, num_blocks, SW_I64), SW(T_, kv_cache_bytes, SW_SIZE), SW(T_, block_size, SW_INT), SW(T_, page_stride_bytes, SW_I64),
                                                     SW(T_, fp8_dtype, SW_DTYPE), SW(T_, block_table_stride, SW_I64), SW(T_, batch, SW_INT),
                                                     SW(T_, out_rows, SW_I64),    SW(T_, offset, SW_I64), SW(T_, out_dtype, SW_DTYPE)};
#undef T_
#define T_ aiter_mla_v4_swa_index_args
static const sweep_field sweep_v4_swa_fields[] = {SW(T_, block_table_stride, SW_I64), SW(T_, block_size, SW_INT), SW(T_, window, SW_INT),
                                                  SW(T_, num_reqs, SW_INT), SW(T_, token_offset, SW_I64), SW(T_, num_tokens, SW_I64),
                                                  SW(T_, out.dense_stride, SW_I64), SW(T_, out.capacity, SW_I64)};
#undef T_
#define T_ aiter_mla_v4_topk_args
static const sweep_field sweep_v4_topk_fields[] = {SW(T_, topk_stride, SW_I64), SW(T_, topk, SW_INT), SW(T_, block_table_stride, SW_I64),
                                                   SW(T_, block_size, SW_INT), SW(T_, num_reqs, SW_INT), SW(T_, num_tokens, SW_I64),
                                                   SW(T_, out.dense_stride, SW_I64), SW(T_, out.capacity, SW_I64)};
#undef T_
#define T_ aiter_mla_v4_c128_args
static const sweep_field sweep_v4_c128_fields[] = {SW(T_, block_table_stride, SW_I64), SW(T_, block_size, SW_INT), SW(T_, num_reqs, SW_INT),
                                                   SW(T_, compress_ratio, SW_INT), SW(T_, width, SW_INT), SW(T_, num_tokens, SW_I64),
                                                   SW(T_, out.dense_stride, SW_I64), SW(T_, out.capacity, SW_I64)};
#undef T_
#define T_ aiter_mla_v4_combine_args
static const sweep_field sweep_v4_combine_fields[] = {SW(T_, topk_stride, SW_I64), SW(T_, topk, SW_INT), SW(T_, num_reqs, SW_INT),
                                                      SW(T_, window, SW_INT), SW(T_, compress_ratio, SW_INT), SW(T_, M, SW_I64),
                                                      SW(T_, N, SW_I64), SW(T_, out.dense_stride, SW_I64), SW(T_, out.capacity, SW_I64)};
#undef T_
#define T_ aiter_mla_v4_ragged_copy_args
static const sweep_field sweep_v4_copy_fields[] = {SW(T_, num_rows, SW_I64), SW(T_, max_entries_per_row, SW_INT),
                                                   SW(T_, indices_buffer_capacity, SW_I64), SW(T_, indptr_buffer_capacity, SW_I64),
                                                   SW(T_, clamp, SW_INT)};
#undef T_
#define T_ aiter_mla_merge_args
static const sweep_field sweep_merge_fields[] = {SW(T_, num_tokens, SW_I64), SW(T_, num_heads, SW_INT), SW(T_, head_dim, SW_INT),
                                                 SW(T_, dtype, SW_DTYPE)};
#undef T_
#define T_ aiter_mla_prefill_args
static const sweep_field sweep_prefill_fields[] = {
    SW(T_, q_stride_token, SW_I64), SW(T_, q_stride_head, SW_I64), SW(T_, k_stride_token, SW_I64), SW(T_, k_stride_head, SW_I64),
    SW(T_, v_stride_token, SW_I64), SW(T_, v_stride_head, SW_I64), SW(T_, o_stride_token, SW_I64), SW(T_, o_stride_head, SW_I64),
    SW(T_, batch, SW_INT),          SWG(T_, max_seqlen_q, SW_INT), SWG(T_, num_cu, SW_INT),        SW(T_, num_heads, SW_INT),
    SW(T_, dqk, SW_INT),            SW(T_, dv, SW_INT),            SW(T_, causal, SW_INT),         SW(T_, sm_scale, SW_FLOAT),
    SW(T_, q_scale, SW_FLOAT),      SW(T_, k_scale, SW_FLOAT),     SW(T_, v_scale, SW_FLOAT),      SW(T_, qkv_dtype, SW_DTYPE),
    SW(T_, o_dtype, SW_DTYPE),      SWG(T_, workspace_bytes, SW_SIZE)};
#undef T_
#define T_ aiter_mla_sparse_args
static const sweep_field sweep_sparse_fields[] = {SW(T_, num_slots, SW_I64), SW(T_, kv_cache_bytes, SW_SIZE),  SW(T_, cache_is_ds_mla, SW_INT), SW(T_, ds_mla_fp8, SW_DTYPE),
                                                  SW(T_, indices_stride, SW_I64), SW(T_, num_tokens, SW_I64), SW(T_, num_heads, SW_INT),
                                                  SW(T_, topk, SW_INT),       SW(T_, sm_scale, SW_FLOAT),      SW(T_, q_dtype, SW_DTYPE),
                                                  SW(T_, o_dtype, SW_DTYPE),  SWG(T_, num_cu, SW_INT),     SW(T_, keys_read_once, SW_INT)};
#undef T_
/* An aiter_mla_v4_keys member k of T_ */
#define SW_KEYS_(k)                                                                                                     \
    SW(T_, k.num_blocks, SW_I64), SW(T_, k.cache_bytes, SW_SIZE), SW(T_, k.block_size, SW_INT), SW(T_, k.page_stride_bytes, SW_I64), SW(T_, k.rows, SW_INT), \
        SW(T_, k.dtype, SW_DTYPE), SW(T_, k.indices_stride, SW_I64), SW(T_, k.capacity, SW_I64)
#define T_ aiter_mla_v4_attention_args
static const sweep_field sweep_v4_attention_fields[] = {
    SW(T_, q_stride_token, SW_I64), SW(T_, q_stride_head, SW_I64), SW(T_, o_stride_token, SW_I64), SW(T_, o_stride_head, SW_I64),
    SW(T_, num_tokens, SW_I64),     SW(T_, num_heads, SW_INT),     SW(T_, sm_scale, SW_FLOAT),     SW(T_, q_dtype, SW_DTYPE),
    SW(T_, o_dtype, SW_DTYPE),      SW_KEYS_(keys),                SW_KEYS_(extra_keys),           SWG(T_, num_splits, SW_INT),
    SWG(T_, workspace_bytes, SW_SIZE), SWG(T_, num_cu, SW_INT), SW(T_, keys_read_once, SW_INT), SW(T_, keys_shared, SW_INT)};
#undef T_
#define T_ aiter_mla_v4_prefill_args
/* sweep-skip: batch (the GPU call reads batch + 1 entries of the host array query_start_loc_host) */
static const sweep_field sweep_v4_prefill_fields[] = {
    SW(T_, attn.q_stride_token, SW_I64), SW(T_, attn.q_stride_head, SW_I64), SW(T_, attn.o_stride_token, SW_I64),
    SW(T_, attn.o_stride_head, SW_I64), SW(T_, attn.num_tokens, SW_I64), SW(T_, attn.num_heads, SW_INT),
    SW(T_, attn.sm_scale, SW_FLOAT), SW(T_, attn.q_dtype, SW_DTYPE), SW(T_, attn.o_dtype, SW_DTYPE),
    SWG(T_, attn.num_cu, SW_INT), SWG(T_, attn.num_splits, SW_INT), SW(T_, attn.keys_read_once, SW_INT), SW(T_, attn.keys_shared, SW_INT), SW(T_, compress_ratio, SW_INT), SW(T_, window, SW_INT),
    SW(T_, max_model_len, SW_I64), SW(T_, max_num_batched_tokens, SW_I64), SW(T_, chunk_size, SW_INT),
    SW(T_, topk_stride, SW_I64), SW(T_, topk, SW_INT), SW(T_, swa_num_blocks, SW_I64), SW(T_, swa_cache_bytes, SW_SIZE), SW(T_, swa_block_size, SW_INT),
    SW(T_, swa_page_stride_bytes, SW_I64), SW(T_, swa_fp8_dtype, SW_DTYPE), SW(T_, swa_block_table_stride, SW_I64),
    SW(T_, compressed_num_blocks, SW_I64), SW(T_, compressed_cache_bytes, SW_SIZE), SW(T_, compressed_block_size, SW_INT), SW(T_, compressed_page_stride_bytes, SW_I64),
    SW(T_, compressed_fp8_dtype, SW_DTYPE), SW(T_, compressed_block_table_stride, SW_I64), SW(T_, workspace_dtype, SW_DTYPE),
    SWG(T_, workspace_bytes, SW_SIZE), SW_KEYS_(attn.keys), SW_KEYS_(attn.extra_keys), SWG(T_, attn.workspace_bytes, SW_SIZE)};
#undef T_
#undef SW_KEYS_
/* =====================================================================================
 * status strings, dtype helpers
 * ===================================================================================== */
static void test_status_and_dtypes(void) {
    int i, j;
    for (i = AITER_MLA_KERNEL_NONE; i <= AITER_MLA_KERNEL_BULK16; i++) { /* kernel names: distinct, none "?" */
        const char *s = aiter_mla_kernel_name((aiter_mla_kernel)i);
        CHECK(s[0] != '\0' && strcmp(s, "?") != 0, "kernel %d has no name", i);
        for (j = AITER_MLA_KERNEL_NONE; j < i; j++)
            CHECK(strcmp(s, aiter_mla_kernel_name((aiter_mla_kernel)j)) != 0, "kernels %d and %d share a name", i, j);
    }
    CHECK(!strcmp(aiter_mla_kernel_name((aiter_mla_kernel)(AITER_MLA_KERNEL_BULK16 + 1)), "?"), "an unknown kernel's name");
    for (i = 0; i < (int)AITER_MLA_STATUS_COUNT; i++) {
        const char *s = aiter_mla_status_string((aiter_mla_status)i);
        CHECK(s != NULL && s[0] != '\0', "status %d has no string", i);
        for (j = 0; j < i; j++) {
            const char *t = aiter_mla_status_string((aiter_mla_status)j);
            CHECK(s == NULL || t == NULL || strcmp(s, t) != 0, "status %d and %d share the string \"%s\"", i, j,
                  s ? s : "");
        }
    }
    CHECK(aiter_mla_status_string(AITER_MLA_OK) != NULL && strcmp(aiter_mla_status_string(AITER_MLA_OK), "ok") == 0,
          "status string of OK is not \"ok\"");
    CHECK(aiter_mla_last_error() != NULL, "aiter_mla_last_error() returned NULL");

    CHECK(aiter_mla_dtype_size(AITER_MLA_BF16) == 2, "bf16 size");
    CHECK(aiter_mla_dtype_size(AITER_MLA_F16) == 2, "f16 size");
    CHECK(aiter_mla_dtype_size(AITER_MLA_F32) == 4, "f32 size");
    CHECK(aiter_mla_dtype_size(AITER_MLA_FP8_E4M3FN) == 1, "e4m3fn size");
    CHECK(aiter_mla_dtype_size(AITER_MLA_FP8_E4M3FNUZ) == 1, "e4m3fnuz size");
    CHECK(aiter_mla_dtype_size(AITER_MLA_DTYPE_DEFAULT) == 0, "DEFAULT size must be 0");
    CHECK(aiter_mla_dtype_size(AITER_MLA_DTYPE_COUNT) == 0, "invalid dtype size must be 0");
    for (i = 1; i < (int)AITER_MLA_DTYPE_COUNT; i++) {
        const char *s = aiter_mla_dtype_name((aiter_mla_dtype)i);
        CHECK(s != NULL && s[0] != '\0', "dtype %d has no name", i);
        for (j = 1; j < i; j++) {
            const char *t = aiter_mla_dtype_name((aiter_mla_dtype)j);
            CHECK(s == NULL || t == NULL || strcmp(s, t) != 0, "dtypes %d and %d share the name", i, j);
        }
    }
}

/* =====================================================================================
 * converters
 * ===================================================================================== */
/* Expected e4m3 code of x by brute force: the nearest finite code (saturating), ties to the
 * even code. Zero results: fnuz 0x00; e4m3fn keeps x's sign (0x80 for -0 and negatives that
 * round to zero, as torch's float8_e4m3fn does). *alt: a second accepted code (-NaN's 0xff). */
static int ref_f32_to_fp8(float x, int fnuz, int *alt) {
    int c, best = -1, max_code = fnuz ? 0x7f : 0x7e;
    double best_d = INFINITY;
    *alt = -1;
    if (x != x) {
        if (!fnuz && signbit(x)) *alt = 0xff;
        return fnuz ? 0x80 : 0x7f;
    }
    /* saturating: beyond the largest finite value (and +-inf) is +-max. (The search below
     * would also find it, but differences of huge floats lose precision in double.) */
    if (fabs((double)x) >= (fnuz ? 240.0 : 448.0)) return x > 0 ? max_code : (0x80 | max_code);
    for (c = 0; c < 256; c++) {
        double v = ref_fp8_to_f64((uint8_t)c, fnuz), d;
        if (v != v) continue;
        if (!fnuz && c == 0x80) continue; /* -0: handled with +0 below */
        d = fabs((double)x - v);
        if (d < best_d || (d == best_d && (c & 1) == 0)) {
            best_d = d;
            best = c;
        }
    }
    if (ref_fp8_to_f64((uint8_t)best, fnuz) == 0.0) best = !fnuz && signbit(x) ? 0x80 : 0;
    return best;
}

static void test_fp8_decode(void) {
    int f, c;
    for (f = 0; f < 2; f++) {
        aiter_mla_dtype t = f ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
        int bad = 0, first = -1, bad_load = 0;
        for (c = 0; c < 256; c++) {
            double want = ref_fp8_to_f64((uint8_t)c, f);
            float got = aiter_mla_fp8_to_f32((uint8_t)c, t);
            uint8_t byte = (uint8_t)c;
            float got_load = aiter_mla_load_f32(&byte, 0, t);
            int ok;
            if (want != want) ok = got != got;
            else ok = (double)got == want && (!!signbit(got)) == (!!signbit(want));
            if (!ok) {
                bad++;
                if (first < 0) first = c;
            }
            if (!(want != want ? got_load != got_load : (double)got_load == want && !!signbit(got_load) == !!signbit(want))) bad_load++;
        }
        CHECK(bad == 0, "%s: %d of 256 codes decode wrongly (first 0x%02x: got %g, want %g)", f ? "fnuz" : "fn", bad,
              first, first >= 0 ? (double)aiter_mla_fp8_to_f32((uint8_t)first, t) : 0.0,
              first >= 0 ? ref_fp8_to_f64((uint8_t)first, f) : 0.0);
        CHECK(bad_load == 0, "%s: aiter_mla_load_f32 disagrees on %d codes", f ? "fnuz" : "fn", bad_load);
        CHECK(aiter_mla_fp8_max(t) == (f ? 240.0f : 448.0f), "fp8_max(%s) = %g", f ? "fnuz" : "fn",
              (double)aiter_mla_fp8_max(t));
    }
    /* hand-checked anchors of the independent formula and the library */
    CHECK(aiter_mla_fp8_to_f32(0x7e, AITER_MLA_FP8_E4M3FN) == 448.0f, "fn 0x7e != 448");
    CHECK(aiter_mla_fp8_to_f32(0xfe, AITER_MLA_FP8_E4M3FN) == -448.0f, "fn 0xfe != -448");
    CHECK(aiter_mla_fp8_to_f32(0x7f, AITER_MLA_FP8_E4M3FNUZ) == 240.0f, "fnuz 0x7f != 240");
    CHECK(aiter_mla_fp8_to_f32(0xff, AITER_MLA_FP8_E4M3FNUZ) == -240.0f, "fnuz 0xff != -240");
    CHECK(aiter_mla_fp8_to_f32(0x38, AITER_MLA_FP8_E4M3FN) == 1.0f, "fn 0x38 != 1");
    CHECK(aiter_mla_fp8_to_f32(0x40, AITER_MLA_FP8_E4M3FNUZ) == 1.0f, "fnuz 0x40 != 1");
    CHECK(aiter_mla_fp8_to_f32(0x01, AITER_MLA_FP8_E4M3FN) == 0.001953125f, "fn 0x01 != 2^-9");
    CHECK(aiter_mla_fp8_to_f32(0x01, AITER_MLA_FP8_E4M3FNUZ) == 0.0009765625f, "fnuz 0x01 != 2^-10");
    CHECK(aiter_mla_fp8_to_f32(0x08, AITER_MLA_FP8_E4M3FN) == 0.015625f, "fn 0x08 != 2^-6");
    CHECK(aiter_mla_fp8_to_f32(0x07, AITER_MLA_FP8_E4M3FN) == 0.013671875f, "fn 0x07 != 7*2^-9");
    {
        float z = aiter_mla_fp8_to_f32(0x80, AITER_MLA_FP8_E4M3FN);
        float n1 = aiter_mla_fp8_to_f32(0x7f, AITER_MLA_FP8_E4M3FN);
        float n2 = aiter_mla_fp8_to_f32(0xff, AITER_MLA_FP8_E4M3FN);
        float n3 = aiter_mla_fp8_to_f32(0x80, AITER_MLA_FP8_E4M3FNUZ);
        CHECK(z == 0.0f && signbit(z), "fn 0x80 must be -0.0, got %g", (double)z);
        CHECK(n1 != n1 && n2 != n2, "fn 0x7f/0xff must be NaN");
        CHECK(n3 != n3, "fnuz 0x80 must be NaN");
        CHECK(aiter_mla_fp8_to_f32(0x7f, AITER_MLA_FP8_E4M3FN) != 480.0f, "fn 0x7f is not 480");
    }
    CHECK(ref_fp8_to_f64(0x7e, 0) == 448.0 && ref_fp8_to_f64(0x7f, 1) == 240.0 && ref_fp8_to_f64(0x38, 0) == 1.0 &&
              ref_fp8_to_f64(0x40, 1) == 1.0,
          "independent fp8 formula self-check");
}

static void fp8_encode_one(float x, int f, int *bad, float *first_x, int *first_got) {
    aiter_mla_dtype t = f ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
    int alt, want = ref_f32_to_fp8(x, f, &alt);
    int got = aiter_mla_f32_to_fp8(x, t);
    uint8_t stored = 0xAA;
    aiter_mla_store_f32(&stored, 0, t, x);
    if ((got != want && got != alt) || stored != (uint8_t)got) {
        if (*bad == 0) {
            *first_x = x;
            *first_got = got;
        }
        (*bad)++;
    }
}

static void test_fp8_encode(void) {
    int f;
    test_rng r = rng_seed(0xf8f8f8f8ull);
    for (f = 0; f < 2; f++) {
        const char *nm = f ? "fnuz" : "fn";
        aiter_mla_dtype t = f ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
        double pos[128];
        int npos = 0, c, i, bad, fg;
        float fx;
        /* exact values round trip */
        bad = 0;
        fx = 0;
        fg = 0;
        for (c = 0; c < 256; c++) {
            double v = ref_fp8_to_f64((uint8_t)c, f);
            if (v != v) continue;
            fp8_encode_one((float)v, f, &bad, &fx, &fg);
        }
        CHECK(bad == 0, "%s: %d exact values do not round-trip (first %g -> 0x%02x)", nm, bad, (double)fx, fg);
        /* midpoints between neighbours (ties go to the even code), and one float either side */
        for (c = 0; c < 128; c++) {
            double v = ref_fp8_to_f64((uint8_t)c, f);
            if (v == v) pos[npos++] = v;
        }
        bad = 0;
        for (i = 0; i + 1 < npos; i++) {
            float mid = (float)((pos[i] + pos[i + 1]) * 0.5);
            CHECK((double)mid == (pos[i] + pos[i + 1]) * 0.5, "midpoint not exact in float");
            fp8_encode_one(mid, f, &bad, &fx, &fg);
            fp8_encode_one(-mid, f, &bad, &fx, &fg);
            fp8_encode_one(nextafterf(mid, 0.0f), f, &bad, &fx, &fg);
            fp8_encode_one(nextafterf(mid, 1e9f), f, &bad, &fx, &fg);
            fp8_encode_one(-nextafterf(mid, 0.0f), f, &bad, &fx, &fg);
            fp8_encode_one(-nextafterf(mid, 1e9f), f, &bad, &fx, &fg);
        }
        CHECK(bad == 0, "%s: %d midpoint cases wrong (first %.9g -> 0x%02x)", nm, bad, (double)fx, fg);
        /* tie examples checked by hand: fn 1.0625 is between 1.0 (0x38) and 1.125 (0x39) -> 0x38;
         * 1.1875 between 0x39 and 1.25 (0x3a) -> 0x3a. */
        if (!f) {
            CHECK(aiter_mla_f32_to_fp8(1.0625f, t) == 0x38, "fn 1.0625 -> 0x%02x, want 0x38",
                  aiter_mla_f32_to_fp8(1.0625f, t));
            CHECK(aiter_mla_f32_to_fp8(1.1875f, t) == 0x3a, "fn 1.1875 -> 0x%02x, want 0x3a",
                  aiter_mla_f32_to_fp8(1.1875f, t));
            CHECK(aiter_mla_f32_to_fp8(-1.1875f, t) == 0xba, "fn -1.1875 -> 0x%02x, want 0xba",
                  aiter_mla_f32_to_fp8(-1.1875f, t));
            CHECK(aiter_mla_f32_to_fp8(0.0009765625f, t) == 0x00, "fn 2^-10 (half the min subnormal) -> 0x%02x",
                  aiter_mla_f32_to_fp8(0.0009765625f, t));
        } else {
            CHECK(aiter_mla_f32_to_fp8(1.0625f, t) == 0x40, "fnuz 1.0625 -> 0x%02x, want 0x40",
                  aiter_mla_f32_to_fp8(1.0625f, t));
            CHECK(aiter_mla_f32_to_fp8(0.00048828125f, t) == 0x00, "fnuz 2^-11 -> 0x%02x, want 0x00",
                  aiter_mla_f32_to_fp8(0.00048828125f, t));
        }
        /* random values: uniform, log-uniform, raw bit patterns */
        bad = 0;
        for (i = 0; i < 60000; i++) {
            float x;
            int kind = i % 3;
            if (kind == 0) x = rng_f32(&r, -600.0f, 600.0f);
            else if (kind == 1) {
                x = rng_ldexp(&r, 1.0, 2.0, -14, 10);
                if (rng_u32(&r) & 1) x = -x;
            } else
                x = bits_to_f32(rng_u32(&r));
            fp8_encode_one(x, f, &bad, &fx, &fg);
        }
        CHECK(bad == 0, "%s: %d random values encode wrongly (first %.9g -> 0x%02x)", nm, bad, (double)fx, fg);
        /* saturation, infinities, NaN, zeros */
        {
            int maxc = f ? 0x7f : 0x7e;
            float big[] = {448.0f, 449.0f, 464.0f, 479.0f, 480.0f, 500.0f, 1e6f, 1e30f, FLT_MAX, 240.0f, 241.0f,
                           247.9f, 248.0f, 250.0f, 256.0f};
            for (i = 0; i < ARRAY_LEN(big); i++) {
                int want_p = big[i] >= (f ? 240.0f : 448.0f) ? maxc : -1;
                if (want_p < 0) continue;
                CHECK(aiter_mla_f32_to_fp8(big[i], t) == want_p, "%s: %g must saturate to 0x%02x, got 0x%02x", nm,
                      (double)big[i], want_p, aiter_mla_f32_to_fp8(big[i], t));
                CHECK(aiter_mla_f32_to_fp8(-big[i], t) == (0x80 | want_p), "%s: %g must saturate to 0x%02x, got 0x%02x",
                      nm, (double)-big[i], 0x80 | want_p, aiter_mla_f32_to_fp8(-big[i], t));
            }
            CHECK(aiter_mla_f32_to_fp8(INFINITY, t) == maxc, "%s: +inf -> 0x%02x", nm, aiter_mla_f32_to_fp8(INFINITY, t));
            CHECK(aiter_mla_f32_to_fp8(-INFINITY, t) == (0x80 | maxc), "%s: -inf -> 0x%02x", nm,
                  aiter_mla_f32_to_fp8(-INFINITY, t));
            CHECK(aiter_mla_fp8_to_f32(aiter_mla_f32_to_fp8(1e9f, t), t) == (f ? 240.0f : 448.0f),
                  "%s: saturated value does not decode to max", nm);
            if (f) {
                CHECK(aiter_mla_f32_to_fp8(NAN, t) == 0x80, "fnuz NaN -> 0x%02x", aiter_mla_f32_to_fp8(NAN, t));
                CHECK(aiter_mla_f32_to_fp8(-NAN, t) == 0x80, "fnuz -NaN -> 0x%02x", aiter_mla_f32_to_fp8(-NAN, t));
                CHECK(aiter_mla_f32_to_fp8(-0.0f, t) == 0x00, "fnuz -0.0 -> 0x%02x", aiter_mla_f32_to_fp8(-0.0f, t));
                CHECK(aiter_mla_f32_to_fp8(-1e-30f, t) == 0x00, "fnuz -1e-30 -> 0x%02x",
                      aiter_mla_f32_to_fp8(-1e-30f, t));
                CHECK(aiter_mla_f32_to_fp8(-0.00048828125f, t) == 0x00, "fnuz -2^-11 -> 0x%02x",
                      aiter_mla_f32_to_fp8(-0.00048828125f, t));
                CHECK(aiter_mla_f32_to_fp8(-0.0004f, t) == 0x00, "fnuz -0.0004 -> 0x%02x",
                      aiter_mla_f32_to_fp8(-0.0004f, t));
                CHECK(aiter_mla_f32_to_fp8(-0.0006f, t) == 0x81, "fnuz -0.0006 -> 0x%02x, want 0x81",
                      aiter_mla_f32_to_fp8(-0.0006f, t));
            } else {
                CHECK(aiter_mla_f32_to_fp8(NAN, t) == 0x7f, "fn NaN -> 0x%02x", aiter_mla_f32_to_fp8(NAN, t));
                CHECK((aiter_mla_f32_to_fp8(-NAN, t) & 0x7f) == 0x7f, "fn -NaN -> 0x%02x", aiter_mla_f32_to_fp8(-NAN, t));
                CHECK(aiter_mla_f32_to_fp8(-0.0f, t) == 0x80, "fn -0.0 -> 0x%02x, want 0x80", aiter_mla_f32_to_fp8(-0.0f, t));
                CHECK(aiter_mla_f32_to_fp8(-1e-30f, t) == 0x80, "fn -1e-30 -> 0x%02x, want 0x80",
                      aiter_mla_f32_to_fp8(-1e-30f, t));
                CHECK(aiter_mla_f32_to_fp8(0.0f, t) == 0x00, "fn +0 -> 0x%02x", aiter_mla_f32_to_fp8(0.0f, t));
            }
        }
    }
}

/* ---- bf16 / f16 ---- */
/* expected bf16 value of f with round-to-nearest-even, computed in double */
static double ref_round_bf16(float f) {
    uint32_t u = f32_to_bits(f), a = u & 0x7fffffffu;
    uint16_t lo;
    double vlo, vhi, ax, dl, dh, v;
    int up;
    if (f != f) return NAN;
    if (isinf(f)) return (double)f;
    lo = (uint16_t)(a >> 16);
    vlo = ref_bf16_to_f64(lo);
    vhi = (lo + 1 == 0x7f80) ? ldexp(1.0, 128) : ref_bf16_to_f64((uint16_t)(lo + 1));
    ax = fabs((double)f);
    dl = ax - vlo;
    dh = vhi - ax;
    up = dh < dl || (dh == dl && (lo & 1));
    v = up ? ((lo + 1 == 0x7f80) ? INFINITY : vhi) : vlo;
    return (u >> 31) ? -v : v;
}
/* expected f16 value of f with round-to-nearest-even (overflow to inf), computed in double */
static double ref_round_f16(float f) {
    double ax = fabs((double)f), q, n, fl, fr, k, v;
    if (f != f) return NAN;
    if (isinf(f)) return (double)f;
    if (ax < ldexp(1.0, -14)) q = ldexp(1.0, -24);
    else {
        int e;
        frexp(ax, &e);
        q = ldexp(1.0, e - 1 - 10);
    }
    n = ax / q;
    fl = floor(n);
    fr = n - fl;
    k = fl;
    if (fr > 0.5 || (fr == 0.5 && fmod(fl, 2.0) != 0.0)) k = fl + 1.0;
    v = k * q;
    if (v > 65504.0) v = INFINITY;
    return signbit(f) ? -v : v;
}

static int same_value(double got, double want) {
    if (want != want) return got != got;
    return got == want && (!!signbit(got)) == (!!signbit(want));
}

static void test_bf16_f16(void) {
    test_rng r = rng_seed(0xbf16f16ull);
    int c, i, bad, first;
    float fx;
    /* decode every code */
    bad = 0;
    first = -1;
    for (c = 0; c < 65536; c++) {
        if (!same_value(aiter_mla_bf16_to_f32((uint16_t)c), ref_bf16_to_f64((uint16_t)c))) {
            if (first < 0) first = c;
            bad++;
        }
    }
    CHECK(bad == 0, "bf16 decode: %d codes wrong (first 0x%04x)", bad, first);
    bad = 0;
    first = -1;
    for (c = 0; c < 65536; c++) {
        if (!same_value(aiter_mla_f16_to_f32((uint16_t)c), ref_f16_to_f64((uint16_t)c))) {
            if (first < 0) first = c;
            bad++;
        }
    }
    CHECK(bad == 0, "f16 decode: %d codes wrong (first 0x%04x: got %g want %g)", bad, first,
          first >= 0 ? (double)aiter_mla_f16_to_f32((uint16_t)first) : 0.0,
          first >= 0 ? ref_f16_to_f64((uint16_t)first) : 0.0);
    /* round trip of every non-NaN code; NaN codes stay NaN */
    bad = 0;
    first = -1;
    for (c = 0; c < 65536; c++) {
        double v = ref_bf16_to_f64((uint16_t)c);
        uint16_t back = aiter_mla_f32_to_bf16(aiter_mla_bf16_to_f32((uint16_t)c));
        int ok = v != v ? ref_bf16_to_f64(back) != ref_bf16_to_f64(back) : back == c;
        if (!ok) {
            if (first < 0) first = c;
            bad++;
        }
    }
    CHECK(bad == 0, "bf16 round trip: %d codes wrong (first 0x%04x)", bad, first);
    bad = 0;
    first = -1;
    for (c = 0; c < 65536; c++) {
        double v = ref_f16_to_f64((uint16_t)c);
        uint16_t back = aiter_mla_f32_to_f16(aiter_mla_f16_to_f32((uint16_t)c));
        int ok = v != v ? ref_f16_to_f64(back) != ref_f16_to_f64(back) : back == c;
        if (!ok) {
            if (first < 0) first = c;
            bad++;
        }
    }
    CHECK(bad == 0, "f16 round trip: %d codes wrong (first 0x%04x)", bad, first);

    /* rounding of random floats, ties and near-ties */
    bad = 0;
    fx = 0;
    for (i = 0; i < 300000; i++) {
        float x;
        int kind = i % 4;
        uint16_t g;
        if (kind == 0) x = bits_to_f32(rng_u32(&r));
        else if (kind == 1) {
            uint32_t hi = rng_u32(&r) & 0xffff0000u;
            static const int lows[] = {0x8000, 0x7fff, 0x8001, 0x0000, 0xffff};
            uint32_t low = (uint32_t)rng_pick(&r, lows, 5);
            x = bits_to_f32(hi | low);
        } else if (kind == 2)
            x = rng_f32(&r, -3.0f, 3.0f);
        else
            x = rng_ldexp(&r, -2.0, 2.0, -140, 127);
        g = aiter_mla_f32_to_bf16(x);
        if (!same_value(ref_bf16_to_f64(g), ref_round_bf16(x))) {
            if (bad == 0) fx = x;
            bad++;
        }
    }
    CHECK(bad == 0, "f32->bf16: %d values rounded wrongly (first %.9g bits 0x%08x -> 0x%04x, want %.9g)", bad,
          (double)fx, f32_to_bits(fx), aiter_mla_f32_to_bf16(fx), ref_round_bf16(fx));
    /* bf16 specials */
    CHECK(aiter_mla_f32_to_bf16(bits_to_f32(0x3f808000u)) == 0x3f80, "bf16 tie to even (down) failed");
    CHECK(aiter_mla_f32_to_bf16(bits_to_f32(0x3f818000u)) == 0x3f82, "bf16 tie to even (up) failed");
    CHECK(aiter_mla_f32_to_bf16(bits_to_f32(0x7f7fffffu)) == 0x7f80, "bf16: FLT_MAX must overflow to inf");
    CHECK(aiter_mla_f32_to_bf16(bits_to_f32(0x7f7f7fffu)) == 0x7f7f, "bf16: just below the overflow tie");
    {
        uint16_t n1 = aiter_mla_f32_to_bf16(NAN), n2 = aiter_mla_f32_to_bf16(bits_to_f32(0x7f800001u)),
                 n3 = aiter_mla_f32_to_bf16(bits_to_f32(0xff800001u));
        CHECK(ref_bf16_to_f64(n1) != ref_bf16_to_f64(n1), "bf16(NaN) is not NaN (0x%04x)", n1);
        CHECK(ref_bf16_to_f64(n2) != ref_bf16_to_f64(n2), "bf16(NaN with low payload) is not NaN (0x%04x)", n2);
        CHECK(ref_bf16_to_f64(n3) != ref_bf16_to_f64(n3), "bf16(-NaN with low payload) is not NaN (0x%04x)", n3);
        CHECK(aiter_mla_f32_to_bf16(INFINITY) == 0x7f80 && aiter_mla_f32_to_bf16(-INFINITY) == 0xff80, "bf16 inf");
        CHECK(aiter_mla_f32_to_bf16(-0.0f) == 0x8000, "bf16 -0");
        CHECK(aiter_mla_f32_to_bf16(bits_to_f32(0x00018000u)) == 0x0002, "bf16 subnormal tie");
    }

    bad = 0;
    fx = 0;
    for (i = 0; i < 300000; i++) {
        float x;
        int kind = i % 5;
        uint16_t g;
        if (kind == 0) x = bits_to_f32(rng_u32(&r));
        else if (kind == 1) { /* exact midpoint of two neighbouring finite halves (or nudged) */
            uint16_t h = (uint16_t)rng_int(&r, 0, 0x7bfe);
            double mid = (ref_f16_to_f64(h) + ref_f16_to_f64((uint16_t)(h + 1))) * 0.5;
            int nudge = rng_int(&r, -1, 1);
            x = (float)mid;
            if (nudge < 0) x = nextafterf(x, 0.0f);
            if (nudge > 0) x = nextafterf(x, 1e9f);
            if (rng_u32(&r) & 1) x = -x;
        } else if (kind == 2)
            x = rng_f32(&r, -70000.0f, 70000.0f);
        else if (kind == 3)
            x = rng_ldexp(&r, -2.0, 2.0, -27, 16);
        else
            x = (float)ldexp((double)rng_int(&r, -2100, 2100) * 0.5, -24); /* subnormal ties */
        g = aiter_mla_f32_to_f16(x);
        if (!same_value(ref_f16_to_f64(g), ref_round_f16(x))) {
            if (bad == 0) fx = x;
            bad++;
        }
    }
    CHECK(bad == 0, "f32->f16: %d values rounded wrongly (first %.9g bits 0x%08x -> 0x%04x, want %.9g)", bad,
          (double)fx, f32_to_bits(fx), aiter_mla_f32_to_f16(fx), ref_round_f16(fx));
    CHECK(aiter_mla_f32_to_f16(65504.0f) == 0x7bff, "f16 65504");
    CHECK(aiter_mla_f32_to_f16(nextafterf(65520.0f, 0.0f)) == 0x7bff, "f16 just below 65520 must give 65504");
    CHECK(aiter_mla_f32_to_f16(65520.0f) == 0x7c00, "f16 65520 must overflow to inf (got 0x%04x)",
          aiter_mla_f32_to_f16(65520.0f));
    CHECK(aiter_mla_f32_to_f16(-65520.0f) == 0xfc00, "f16 -65520 must overflow to -inf");
    CHECK(aiter_mla_f32_to_f16(1e10f) == 0x7c00 && aiter_mla_f32_to_f16(INFINITY) == 0x7c00, "f16 overflow/inf");
    CHECK(aiter_mla_f32_to_f16(-INFINITY) == 0xfc00, "f16 -inf");
    CHECK(aiter_mla_f32_to_f16((float)ldexp(1.0, -25)) == 0x0000, "f16 2^-25 ties to 0");
    CHECK(aiter_mla_f32_to_f16((float)ldexp(3.0, -25)) == 0x0002, "f16 3*2^-25 ties to 2*2^-24");
    CHECK(aiter_mla_f32_to_f16((float)ldexp(1.0, -24)) == 0x0001, "f16 min subnormal");
    CHECK(aiter_mla_f32_to_f16((float)ldexp(1023.5, -24)) == 0x0400, "f16 max-subnormal/min-normal tie");
    CHECK(aiter_mla_f32_to_f16(-(float)ldexp(1.0, -26)) == 0x8000, "f16 tiny negative -> -0");
    CHECK(aiter_mla_f32_to_f16(1.0f + (float)ldexp(1.0, -11)) == 0x3c00, "f16 tie 1+2^-11 -> 1");
    CHECK(aiter_mla_f32_to_f16(1.0f + (float)ldexp(3.0, -11)) == 0x3c02, "f16 tie 1+3*2^-11 -> 1+2^-9");
    {
        uint16_t n1 = aiter_mla_f32_to_f16(NAN), n2 = aiter_mla_f32_to_f16(bits_to_f32(0x7f800001u)),
                 n3 = aiter_mla_f32_to_f16(bits_to_f32(0xffc00000u));
        CHECK(ref_f16_to_f64(n1) != ref_f16_to_f64(n1), "f16(NaN) not NaN (0x%04x)", n1);
        CHECK(ref_f16_to_f64(n2) != ref_f16_to_f64(n2), "f16(NaN low payload) not NaN (0x%04x)", n2);
        CHECK(ref_f16_to_f64(n3) != ref_f16_to_f64(n3), "f16(-NaN) not NaN (0x%04x)", n3);
    }
    /* load/store through the generic helpers */
    {
        uint16_t b16[1];
        float f32v[1];
        aiter_mla_store_f32(b16, 0, AITER_MLA_BF16, 1.5f);
        CHECK(b16[0] == 0x3fc0, "store bf16 1.5");
        CHECK(aiter_mla_load_f32(b16, 0, AITER_MLA_BF16) == 1.5f, "load bf16 1.5");
        aiter_mla_store_f32(b16, 0, AITER_MLA_F16, -2.5f);
        CHECK(b16[0] == 0xc100, "store f16 -2.5 (got 0x%04x)", b16[0]);
        CHECK(aiter_mla_load_f32(b16, 0, AITER_MLA_F16) == -2.5f, "load f16 -2.5");
        aiter_mla_store_f32(f32v, 0, AITER_MLA_F32, 0.1f);
        CHECK(f32v[0] == (float)0.1f && aiter_mla_load_f32(f32v, 0, AITER_MLA_F32) == (float)0.1f, /* binary32, not x87's 0.1 */
              "f32 load/store");
    }
}

/* =====================================================================================
 * head padding (SPEC 1c)
 * ===================================================================================== */
static void test_head_padding(void) {
    test_rng r = rng_seed(0x4ead);
    int H, bad = 0, first = 0;
    static const int Hs[] = {1, 2, 4, 8, 16, 32};
    static const aiter_mla_dtype dts[] = {AITER_MLA_DTYPE_DEFAULT, AITER_MLA_F16, AITER_MLA_F32, AITER_MLA_FP8_E4M3FN};
    int hi, di, hdi, ni;
    for (H = 1; H <= 130; H++) {
        int want = H >= 16 ? (H % 16 == 0) : (16 % H == 0);
        if (aiter_mla_num_heads_is_valid(H) != want) {
            if (!bad) first = H;
            bad++;
        }
    }
    CHECK(bad == 0, "aiter_mla_num_heads_is_valid wrong for %d head counts (first H=%d)", bad, first);
    CHECK(aiter_mla_num_heads_is_valid(0) == 0, "H=0 must be invalid");
    CHECK(aiter_mla_num_heads_is_valid(-1) == 0, "H=-1 must be invalid");
    for (H = 1; H <= 128; H++) {
        if (!(H >= 16 ? (H % 16 == 0) : (16 % H == 0))) continue;
        CHECK(aiter_mla_padded_num_heads(H) == imax(H, 16), "padded_num_heads(%d) = %d", H, aiter_mla_padded_num_heads(H));
    }

    for (hi = 0; hi < ARRAY_LEN(Hs); hi++)
        for (di = 0; di < ARRAY_LEN(dts); di++)
            for (hdi = 0; hdi < 2; hdi++)
                for (ni = 0; ni < 2; ni++) {
                    int h = Hs[hi], Hp = imax(h, 16), rep = Hp / h;
                    aiter_mla_dtype dt = dts[di];
                    aiter_mla_dtype et = dt == AITER_MLA_DTYPE_DEFAULT ? AITER_MLA_BF16 : dt;
                    int hd_arg = hdi ? 5 : 0, hd = hdi ? 5 : 576;
                    int64_t N = ni ? 3 : 1, n;
                    size_t es = test_dtype_bytes(et);
                    size_t row = (size_t)hd * es;
                    unsigned char *src = (unsigned char *)test_malloc((size_t)N * h * row);
                    unsigned char *dst = (unsigned char *)test_malloc((size_t)N * Hp * row);
                    unsigned char *src2 = (unsigned char *)test_malloc((size_t)N * Hp * row);
                    unsigned char *dst2 = (unsigned char *)test_malloc((size_t)N * h * row);
                    unsigned char *back = (unsigned char *)test_malloc((size_t)N * h * row);
                    aiter_mla_head_pad_args a;
                    int pad_bad = 0, unpad_bad = 0;
                    fill_random(src, N * h * hd, et, &r, -4.0f, 4.0f, 1.0f);
                    fill_random(src2, N * Hp * hd, et, &r, -4.0f, 4.0f, 1.0f);
                    memset(dst, 0xCD, (size_t)N * Hp * row);
                    memset(dst2, 0xCD, (size_t)N * h * row);
                    memset(back, 0xCD, (size_t)N * h * row);
                    memset(&a, 0, sizeof a);
                    a.src = src;
                    a.dst = dst;
                    a.num_tokens = N;
                    a.num_heads = h;
                    a.head_dim = hd_arg;
                    a.dtype = dt;
                    CHECK_STATUS(aiter_mla_pad_q_ref(&a), AITER_MLA_OK, "");
                    for (n = 0; n < N; n++) {
                        int hp;
                        for (hp = 0; hp < Hp; hp++)
                            if (memcmp(dst + ((size_t)n * Hp + hp) * row, src + ((size_t)n * h + hp / rep) * row, row))
                                pad_bad++;
                    }
                    CHECK(pad_bad == 0, "pad_q_ref H=%d dtype=%d hd=%d N=%d: %d padded heads wrong", h, (int)dt, hd,
                          (int)N, pad_bad);
                    a.src = src2;
                    a.dst = dst2;
                    CHECK_STATUS(aiter_mla_unpad_o_ref(&a), AITER_MLA_OK, "");
                    for (n = 0; n < N; n++) {
                        int hh;
                        for (hh = 0; hh < h; hh++)
                            if (memcmp(dst2 + ((size_t)n * h + hh) * row, src2 + ((size_t)n * Hp + hh * rep) * row, row))
                                unpad_bad++;
                    }
                    CHECK(unpad_bad == 0, "unpad_o_ref H=%d dtype=%d hd=%d N=%d: %d heads wrong", h, (int)dt, hd,
                          (int)N, unpad_bad);
                    a.src = dst; /* pad then unpad is the identity */
                    a.dst = back;
                    CHECK_STATUS(aiter_mla_unpad_o_ref(&a), AITER_MLA_OK, "");
                    CHECK(memcmp(back, src, (size_t)N * h * row) == 0, "unpad(pad(x)) != x for H=%d dtype=%d", h, (int)dt);
                    if (hi == 0 && hdi == 0 && ni == 0) { /* every dtype: a base one byte off (2- and 4-byte elements) */
                        const int el = (int)aiter_mla_dtype_size(et);
                        a.src = src + 1;
                        a.dst = dst;
                        CHECK_STATUS(aiter_mla_pad_q(&a, NULL), el > 1 ? AITER_MLA_ERR_INVALID_ARGUMENT : AITER_MLA_ERR_NO_GPU,
                                     el > 1 ? "src is not" : "");
                        a.src = src;
                        a.dst = dst + 1;
                        CHECK_STATUS(aiter_mla_pad_q(&a, NULL), el > 1 ? AITER_MLA_ERR_INVALID_ARGUMENT : AITER_MLA_ERR_NO_GPU,
                                     el > 1 ? "dst is not" : "");
                        if (el > 1) CHECK_STATUS(aiter_mla_pad_q_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "dst is not");
                    }
                    if (hi == 0 && di == 0 && hdi == 0 && ni == 0) {
                        a.src = src;
                        a.dst = dst;
                        CHECK_STATUS(aiter_mla_pad_q(&a, NULL), AITER_MLA_ERR_NO_GPU, "");
                        SWEEP(pad_q, a, sweep_head_pad_fields);
                        a.src = src2;
                        a.dst = dst2;
                        CHECK_STATUS(aiter_mla_unpad_o(&a, NULL), AITER_MLA_ERR_NO_GPU, "");
                        SWEEP(unpad_o, a, sweep_head_pad_fields);
                        /* invalid inputs */
                        a.src = src;
                        a.dst = dst;
                        a.num_heads = 3;
                        CHECK_STATUS(aiter_mla_pad_q_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
                        CHECK_STATUS(aiter_mla_unpad_o_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
                        a.num_heads = 24;
                        CHECK_STATUS(aiter_mla_pad_q_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
                        CHECK_STATUS(aiter_mla_unpad_o_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
                        a.num_heads = 0;
                        CHECK_STATUS(aiter_mla_pad_q_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
                        CHECK_STATUS(aiter_mla_unpad_o_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
                        CHECK_STATUS(aiter_mla_pad_q(&a, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
                        a.num_heads = 1;
                        a.src = NULL;
                        CHECK_STATUS(aiter_mla_pad_q_ref(&a), AITER_MLA_ERR_NULL_POINTER, "src");
                        a.src = src;
                        a.dst = NULL;
                        CHECK_STATUS(aiter_mla_unpad_o_ref(&a), AITER_MLA_ERR_NULL_POINTER, "dst");
                        a.dst = dst;
                        /* in place: refused where heads repeat (rows would be read after being
                         * written), allowed for 16 heads and more (src == dst: nothing moves) */
                        a.dst = (void *)src;
                        CHECK_STATUS(aiter_mla_pad_q_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "dst overlaps src");
                        CHECK_STATUS(aiter_mla_unpad_o(&a, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "dst overlaps src");
                        a.dst = src + row; /* partly, one head row on */
                        CHECK_STATUS(aiter_mla_unpad_o_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "dst overlaps src");
                        a.dst = src2;
                        a.src = src2 + (size_t)N * Hp * row - row; /* src's first row is dst's last */
                        CHECK_STATUS(aiter_mla_pad_q_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "dst overlaps src");
                        a.src = src2 + (size_t)N * Hp * row; /* right after it: apart */
                        CHECK_STATUS(aiter_mla_pad_q(&a, NULL), AITER_MLA_ERR_NO_GPU, "");
                        a.num_heads = 16, a.src = src2, a.dst = src2;
                        CHECK_STATUS(aiter_mla_pad_q_ref(&a), AITER_MLA_OK, "");
                        a.num_heads = 1, a.src = src, a.dst = dst;
                        a.num_tokens = -1;
                        CHECK_STATUS(aiter_mla_pad_q_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
                        a.num_tokens = N;
                        a.head_dim = -3;
                        CHECK_STATUS(aiter_mla_pad_q_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "head_dim");
                        /* each field in range, the tensor's bytes past int64 (2^30 heads of 2^16 fp32 for 2^20 tokens) */
                        a.num_tokens = 1 << 20;
                        a.num_heads = 1 << 30;
                        a.head_dim = 65536;
                        a.dtype = AITER_MLA_F32;
                        CHECK_STATUS(aiter_mla_pad_q_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
                        CHECK_STATUS(aiter_mla_unpad_o_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
                        CHECK_STATUS(aiter_mla_pad_q(&a, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
                        /* 2^63 - 32 bytes of fp8: inside int64, but a launch's count rounded up to
                           blocks (+ 255) or a grid-stride step past the end would leave it */
                        a.num_tokens = 486737;
                        a.num_heads = 291184224;
                        a.head_dim = 65077;
                        a.dtype = AITER_MLA_FP8_E4M3FN;
                        CHECK_STATUS(aiter_mla_pad_q(&a, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "pass 2^62");
                        CHECK_STATUS(aiter_mla_unpad_o_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "pass 2^62");
                        a.num_tokens = N;
                        a.num_heads = h;
                        a.head_dim = hd_arg;
                        a.dtype = dt;
                    }
                    free(src);
                    free(dst);
                    free(src2);
                    free(dst2);
                    free(back);
                }
}

/* =====================================================================================
 * page-index expansion (SPEC 1d)
 * ===================================================================================== */
static void test_expand_page_indices(void) {
    test_rng r = rng_seed(0xe7a9d);
    static const int Ks[] = {1, 2, 16, 64, 256, 0};
    const int32_t SENT = 0x7eadbeef;
    int ki, it;
    for (ki = 0; ki < ARRAY_LEN(Ks); ki++)
        for (it = 0; it < 6; it++) {
            int K = Ks[ki] ? Ks[ki] : 1, batch = rng_int(&r, 1, 6), b, maxblk = 0, bad = 0, first_b = -1, first_t = -1;
            int32_t seq[6], cu[7];
            int64_t stride;
            int32_t *bt, *out;
            int with_neg = it % 2, gaps = it % 3 == 2;
            aiter_mla_expand_page_indices_args a;
            for (b = 0; b < batch; b++) {
                int kind = rng_int(&r, 0, 4);
                seq[b] = kind == 0 ? 0 : kind == 1 ? 1 : kind == 2 ? K + 1 : rng_int(&r, 0, 600);
                maxblk = imax(maxblk, ceil_div(seq[b], K));
            }
            stride = maxblk + rng_int(&r, 0, 3);
            if (stride == 0) stride = 1;
            bt = alloc_i32(batch * stride);
            for (b = 0; b < batch * stride; b++) bt[b] = rng_int(&r, 0, 5000);
            if (with_neg)
                for (b = 0; b < batch * stride; b++)
                    if (rng_int(&r, 0, 4) == 0) bt[b] = rng_int(&r, 0, 1) ? -1 : -7;
            cu[0] = 0;
            for (b = 0; b < batch; b++) cu[b + 1] = cu[b] + seq[b] + (gaps ? rng_int(&r, 0, 3) : 0);
            out = alloc_i32(cu[batch] + 2);
            for (b = 0; b < cu[batch] + 2; b++) out[b] = SENT;
            memset(&a, 0, sizeof a);
            a.block_table = bt;
            a.block_table_stride = stride;
            a.cu_num_tokens = cu;
            a.seq_lens = seq;
            a.page_indices = out;
            a.page_indices_capacity = cu[batch] + (it % 2) * 2;
            a.batch = batch;
            a.kernel_block_size = Ks[ki];
            CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_OK, "");
            for (b = 0; b < batch; b++) {
                int t;
                for (t = 0; t < seq[b]; t++) {
                    int32_t blk = bt[b * stride + t / K], got = out[cu[b] + t];
                    int ok = blk >= 0 ? got == blk * K + t % K : got == -1;
                    if (!ok) {
                        if (!bad) {
                            first_b = b;
                            first_t = t;
                        }
                        bad++;
                    }
                }
                for (t = cu[b] + seq[b]; t < cu[b + 1]; t++)
                    if (out[t] != SENT) bad++;
            }
            if (out[cu[batch]] != SENT || out[cu[batch] + 1] != SENT) bad++;
            CHECK(bad == 0, "expand K=%d batch=%d: %d wrong entries (first request %d token %d)", K, batch, bad, first_b,
                  first_t);
            if (ki == 0 && it == 0) {
                aiter_mla_expand_page_indices_args m = a;
                m.page_indices = seq;
                if (!m.page_indices_capacity) m.page_indices_capacity = 1; /* a draw with no tokens: the output still spans an entry */
                CHECK_STATUS(aiter_mla_expand_page_indices_ref(&m), AITER_MLA_ERR_INVALID_ARGUMENT, "page_indices overlaps");
                CHECK_STATUS(aiter_mla_expand_page_indices(&m, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "page_indices overlaps");
                CHECK_STATUS(aiter_mla_expand_page_indices(&a, NULL), AITER_MLA_ERR_NO_GPU, "");
                SWEEP(expand_page_indices, a, sweep_expand_fields);
                { /* the GPU call at its batch limit (arrays it cannot read; the output below the inputs,
                     whose spans then reach far past this arena without meeting it) */
                    static int32_t arena[4];
                    m = a;
                    m.page_indices = arena;
                    m.page_indices_capacity = 1;
                    m.block_table = arena + 1;
                    m.cu_num_tokens = arena + 2;
                    m.seq_lens = arena + 3;
                    m.batch = INT32_MAX - 1; /* the reference's limit is the GPU's too (its kernel counts requests in int64) */
                    CHECK_STATUS(aiter_mla_expand_page_indices(&m, NULL), AITER_MLA_ERR_NO_GPU, "");
                    m.batch = INT32_MAX; /* cu_num_tokens has batch + 1 entries */
                    CHECK_STATUS(aiter_mla_expand_page_indices(&m, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "batch");
                }
            }
            if (ki == 2 && it == 0) {
                a.kernel_block_size = 3;
                CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "kernel_block_size");
                a.kernel_block_size = 512;
                CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "kernel_block_size");
                a.kernel_block_size = K;
                a.batch = -1;
                CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "batch");
                a.batch = batch;
                a.block_table = NULL;
                CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_ERR_NULL_POINTER, "block_table");
                a.block_table = bt;
                a.page_indices = NULL;
                CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_ERR_NULL_POINTER, "page_indices");
                a.page_indices = out;
                a.seq_lens = NULL;
                CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_ERR_NULL_POINTER, "seq_lens");
                a.seq_lens = seq;
                a.cu_num_tokens = NULL;
                CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_ERR_NULL_POINTER, "cu_num_tokens");
                a.cu_num_tokens = cu;
                a.block_table_stride = 0;
                CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "block_table_stride");
                a.block_table_stride = INT64_MAX; /* b * stride would overflow */
                CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "block_table_stride");
                a.block_table_stride = stride;
                a.page_indices_capacity = -1;
                CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT,
                             "page_indices_capacity");
                a.page_indices_capacity = cu[batch];
            }
            free(bt);
            free(out);
        }
    /* A request longer than the table is wide (block_table_stride < ceil(seq_len / K)):
     * either rejected naming block_table_stride, or the entries beyond the width are -1.
     * Either way nothing may be read past the table (ASan watches the single row). */
    {
        int32_t bt1[1] = {5}, seq1[1] = {3}, cu1[2] = {0, 3}, out1[3] = {SENT, SENT, SENT}, seq2[2] = {2, 2},
                cu2[3] = {0, 3, 2}, cu3[3] = {0, 2, 4}, bt2[4] = {1, 2, 3, 4}, out2[4];
        aiter_mla_expand_page_indices_args a;
        aiter_mla_status st;
        int32_t *btp = (int32_t *)test_malloc(sizeof(int32_t));
        btp[0] = bt1[0];
        memset(&a, 0, sizeof a);
        a.block_table = btp;
        a.block_table_stride = 1;
        a.cu_num_tokens = cu1;
        a.seq_lens = seq1;
        a.page_indices = out1;
        a.page_indices_capacity = 3;
        a.batch = 1;
        a.kernel_block_size = 1;
        st = aiter_mla_expand_page_indices_ref(&a);
        CHECK(st == AITER_MLA_OK && out1[0] == 5 && out1[1] == -1 && out1[2] == -1,
              "expand beyond the table width (header: -1): status %s, got [%d, %d, %d], want [5, -1, -1]",
              testing_status_name(st), out1[0], out1[1], out1[2]);
        free(btp);
        /* cu_num_tokens not monotone / not holding seq_lens: rejected by the reference */
        memset(&a, 0, sizeof a);
        a.block_table = bt2;
        a.block_table_stride = 2;
        a.cu_num_tokens = cu2;
        a.seq_lens = seq2;
        a.page_indices = out2;
        a.page_indices_capacity = 4;
        a.batch = 2;
        a.kernel_block_size = 1;
        CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "cu_num_tokens");
        /* output buffer too small for cu_num_tokens[batch] = 4 */
        a.cu_num_tokens = cu3;
        a.page_indices_capacity = 3;
        CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_ERR_BUFFER_TOO_SMALL, "page_indices_capacity");
        a.page_indices_capacity = 4;
        CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_OK, "");
        CHECK(out2[0] == 1 && out2[1] == 2 && out2[2] == 3 && out2[3] == 4, "expand K=1 copy: [%d %d %d %d]", out2[0],
              out2[1], out2[2], out2[3]);
        { /* request 0's range holds one entry less than its seq_len (by exactly one): refused, else its
             last entry would land on request 1's first */
            int32_t cu4[3] = {0, 1, 4};
            a.cu_num_tokens = cu4;
            CHECK_STATUS(aiter_mla_expand_page_indices_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "cu_num_tokens");
        }
    }
}

/* =====================================================================================
 * decode metadata (host)
 * ===================================================================================== */
static void test_metadata_build(void) {
    test_rng r = rng_seed(0x3e7a);
    static const int pss[] = {1, 16, 64, 256, 0};
    const int32_t SENT = -77777;
    int it;
    for (it = 0; it < 50; it++) {
        int ps_arg = pss[it % ARRAY_LEN(pss)], ps = ps_arg ? ps_arg : 1;
        int batch = rng_int(&r, 1, 20), b, maxp = 0, total = 0, bad = 0;
        int32_t seq[20], ql[20];
        int use_ql = it % 3 != 0, qlen_scalar = it % 3 == 0 ? (it % 2 ? 3 : 0) : 0;
        int64_t stride, cap;
        int32_t *bt, *qo, *kvp, *kvi, *last;
        aiter_mla_decode_metadata_args a;
        for (b = 0; b < batch; b++) {
            int kind = rng_int(&r, 0, 6);
            seq[b] = kind == 0 ? 0 : kind == 1 ? 1 : kind == 2 ? ps : kind == 3 ? ps + 1 : kind == 4 ? 2 * ps - 1
                                                                                                       : rng_int(&r, 0, 1500);
            ql[b] = rng_int(&r, 1, 4);
            maxp = imax(maxp, ceil_div(seq[b], ps));
            total += ceil_div(seq[b], ps);
        }
        stride = maxp + rng_int(&r, 0, 2);
        if (stride == 0) stride = 1;
        bt = alloc_i32(batch * stride);
        for (b = 0; b < batch * stride; b++) bt[b] = rng_int(&r, 0, 99999);
        cap = total + rng_int(&r, 0, 5);
        qo = alloc_i32(batch + 1);
        kvp = alloc_i32(batch + 1);
        kvi = alloc_i32(cap);
        last = alloc_i32(batch);
        for (b = 0; b < cap; b++) kvi[b] = SENT;
        for (b = 0; b <= batch; b++) qo[b] = kvp[b] = SENT;
        for (b = 0; b < batch; b++) last[b] = SENT;
        memset(&a, 0, sizeof a);
        a.block_table = bt;
        a.block_table_stride = stride;
        a.seq_lens = seq;
        a.q_lens = use_ql ? ql : NULL;
        a.q_len = qlen_scalar;
        a.batch = batch;
        a.page_size = ps_arg;
        a.qo_indptr = qo;
        a.kv_indptr = kvp;
        a.kv_indices = kvi;
        a.kv_indices_capacity = cap;
        a.kv_last_page_lens = last;
        if (it == 0) { /* outputs over inputs or each other: refused before any write */
            aiter_mla_decode_metadata_args m = a;
            m.qo_indptr = seq;
            CHECK_STATUS(aiter_mla_decode_metadata_build(&m), AITER_MLA_ERR_INVALID_ARGUMENT, "qo_indptr overlaps");
            m = a;
            m.kv_indices = bt;
            CHECK_STATUS(aiter_mla_decode_metadata_build(&m), total ? AITER_MLA_ERR_INVALID_ARGUMENT : AITER_MLA_OK,
                         total ? "kv_indices overlaps" : "");
            m = a;
            m.kv_last_page_lens = kvp + 1;
            CHECK_STATUS(aiter_mla_decode_metadata_build(&m), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_last_page_lens overlaps kv_indptr");
        }
        CHECK_STATUS(aiter_mla_decode_metadata_build(&a), AITER_MLA_OK, "");
        {
            int32_t q_acc = 0, k_acc = 0;
            if (qo[0] != 0 || kvp[0] != 0) bad++;
            for (b = 0; b < batch; b++) {
                int pages = ceil_div(seq[b], ps), p;
                int qlb = use_ql ? ql[b] : (qlen_scalar ? qlen_scalar : 1);
                int want_last = pages == 0 ? 0 : seq[b] - (pages - 1) * ps;
                q_acc += qlb;
                if (qo[b + 1] != q_acc) bad++;
                for (p = 0; p < pages; p++)
                    if (kvi[k_acc + p] != bt[b * stride + p]) bad++;
                k_acc += pages;
                if (kvp[b + 1] != k_acc) bad++;
                if (last[b] != want_last) bad++;
            }
            for (b = total; b < cap; b++)
                if (kvi[b] != SENT) bad++;
        }
        CHECK(bad == 0, "metadata build it=%d (batch %d, page_size %d, q_lens %s): %d wrong entries", it, batch, ps,
              use_ql ? "array" : "scalar", bad);
        if (it == 0) SWEEP(decode_metadata_build, a, sweep_metadata_fields); /* q_len alone, page size 1 */
        if (total > 0 && it < 10) {
            a.kv_indices_capacity = total - 1;
            CHECK_STATUS(aiter_mla_decode_metadata_build(&a), AITER_MLA_ERR_BUFFER_TOO_SMALL, "kv_indices");
            a.kv_indices_capacity = -5; /* a range error, not a buffer too small */
            CHECK_STATUS(aiter_mla_decode_metadata_build(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_indices_capacity");
            a.kv_indices_capacity = cap;
        }
        if (it == 1) {
            int32_t saved = seq[0];
            seq[0] = -1;
            CHECK_STATUS(aiter_mla_decode_metadata_build(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "seq_lens");
            seq[0] = saved;
            a.page_size = 24;
            CHECK_STATUS(aiter_mla_decode_metadata_build(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "page_size");
            a.page_size = 512;
            CHECK_STATUS(aiter_mla_decode_metadata_build(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "page_size");
            a.page_size = ps_arg;
            a.batch = 0;
            CHECK_STATUS(aiter_mla_decode_metadata_build(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "batch");
            a.batch = batch;
            a.block_table = NULL;
            CHECK_STATUS(aiter_mla_decode_metadata_build(&a), AITER_MLA_ERR_NULL_POINTER, "block_table");
            a.block_table = bt;
            a.kv_indptr = NULL;
            CHECK_STATUS(aiter_mla_decode_metadata_build(&a), AITER_MLA_ERR_NULL_POINTER, "kv_indptr");
            a.kv_indptr = kvp;

        }
        if (it < 12 && maxp > 1 && use_ql) {
            int32_t saved_q = ql[0];
            a.block_table_stride = maxp - 1; /* narrower than the longest request needs */
            CHECK_STATUS(aiter_mla_decode_metadata_build(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "block_table_stride");
            CHECK(ps_arg || strstr(aiter_mla_last_error(), "page_size = 1 (0 means 1)"),
                  "a defaulted page_size is not named as such: %s", aiter_mla_last_error());
            a.block_table_stride = INT64_MAX; /* b * stride would overflow */
            CHECK_STATUS(aiter_mla_decode_metadata_build(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "block_table_stride");
            a.block_table_stride = stride;
            ql[0] = 9; /* more than AITER_MLA_MAX_Q_LEN */
            CHECK_STATUS(aiter_mla_decode_metadata_build(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "q_lens");
            ql[0] = saved_q;
        }
        free(bt);
        free(qo);
        free(kvp);
        free(kvi);
        free(last);
    }
}

/* =====================================================================================
 * split-KV plan (SPEC 1a)
 * ===================================================================================== */
/* Rows (token x head) of one query tile, from the header's comment: tokens_per_tile =
 * min(max_q_len, max(1, 64 / H)). (The first draft of the header said 128.) */
#define TEST_TILE_ROWS 64

static void expected_plan_info(const aiter_mla_decode_plan_desc *d, aiter_mla_decode_plan_info *e) {
    int B, H, mql, cu, tpt, tiles;
    memset(e, 0, sizeof *e);
    e->desc = *d;
    if (e->desc.page_size == 0) e->desc.page_size = 1;
    if (e->desc.kv_granularity == 0) e->desc.kv_granularity = 64;
    if (e->desc.overhead_blocks == 0) e->desc.overhead_blocks = 2;
    B = d->max_batch;
    H = d->num_heads;
    mql = d->max_q_len;
    tpt = imin(mql, imax(1, TEST_TILE_ROWS / H));
    /* work lists: a tile's rows run as ceil(rows / 64) blocks side by side, a list per that many CUs */
    cu = imax(1, d->num_cu / ceil_div(tpt * H, 64));
    tiles = ceil_div(mql, tpt);
    e->tokens_per_tile = tpt;
    e->num_lists = cu;
    e->max_tiles = tiles;
    e->max_work = (B + cu - 1) * tiles;
    e->max_reduce_tiles = B * tiles;
    e->max_partials = imin(B * tiles + cu - 1, 2 * (cu - 1));
    e->max_partial_rows = e->max_partials * tpt;
    e->off_work_indptr = AITER_MLA_PLAN_HEADER_INTS;
    e->off_work_info = e->off_work_indptr + cu + 1;
    e->off_reduce_indptr = e->off_work_info + (int64_t)e->max_work * AITER_MLA_WORK_INTS;
    e->off_reduce_final_map = e->off_reduce_indptr + e->max_reduce_tiles + 1;
    e->off_reduce_partial_map = e->off_reduce_final_map + 2 * (int64_t)e->max_reduce_tiles;
    e->off_reduce_counters = e->off_reduce_partial_map + imax(e->max_partials, 1);
    e->plan_ints = e->off_reduce_counters + 2 * (int64_t)e->max_partial_rows;
    e->workspace_bytes = (size_t)e->max_partial_rows * (size_t)H * (512 + 1) * sizeof(float);
}

static int info_mismatch(const aiter_mla_decode_plan_info *g, const aiter_mla_decode_plan_info *e, char *what, size_t n) {
#define IM_FIELD(f)                                                                                  \
    if ((int64_t)g->f != (int64_t)e->f) {                                                            \
        snprintf(what, n, #f " = %lld, want %lld", (long long)g->f, (long long)e->f);                \
        return 1;                                                                                    \
    }
    IM_FIELD(desc.max_batch)
    IM_FIELD(desc.num_heads)
    IM_FIELD(desc.max_q_len)
    IM_FIELD(desc.num_cu)
    IM_FIELD(desc.page_size)
    IM_FIELD(desc.kv_granularity)
    IM_FIELD(desc.overhead_blocks)
    IM_FIELD(tokens_per_tile)
    IM_FIELD(num_lists)
    IM_FIELD(max_tiles)
    IM_FIELD(max_work)
    IM_FIELD(max_reduce_tiles)
    IM_FIELD(max_partials)
    IM_FIELD(max_partial_rows)
    IM_FIELD(off_work_indptr)
    IM_FIELD(off_work_info)
    IM_FIELD(off_reduce_indptr)
    IM_FIELD(off_reduce_final_map)
    IM_FIELD(off_reduce_partial_map)
    IM_FIELD(off_reduce_counters)
    IM_FIELD(workspace_bytes)
#undef IM_FIELD
    /* The layout lists reduce_counters [2, max_partial_rows] last; allow a little tail padding. */
    if (g->plan_ints < e->plan_ints || g->plan_ints > e->plan_ints + 16) {
        snprintf(what, n, "plan_ints = %lld, want %lld (+ at most 16 padding)", (long long)g->plan_ints,
                 (long long)e->plan_ints);
        return 1;
    }
    return 0;
}

static void test_plan_info(void) {
    static const int Hs[] = {1, 2, 3, 8, 16, 24, 32, 48, 64, 100, 128};
    static const int Bs[] = {1, 7, 256};
    static const int cus[] = {1, 2, 80, 304};
    static const int pss[] = {0, 1, 16, 256};
    static const int grans[] = {0, 16, 64, 4096};
    static const int ovhs[] = {0, 1, 64};
    int hi, mql, bi, ci, n = 0, bad = 0, bad_status = 0;
    char first[200] = "";
    for (hi = 0; hi < ARRAY_LEN(Hs); hi++)
        for (mql = 1; mql <= 8; mql++)
            for (bi = 0; bi < ARRAY_LEN(Bs); bi++)
                for (ci = 0; ci < ARRAY_LEN(cus); ci++) {
                    aiter_mla_decode_plan_desc d;
                    aiter_mla_decode_plan_info g, e;
                    char what[160];
                    memset(&d, 0, sizeof d);
                    d.max_batch = Bs[bi];
                    d.num_heads = Hs[hi];
                    d.max_q_len = mql;
                    d.num_cu = cus[ci];
                    d.page_size = pss[n % ARRAY_LEN(pss)];
                    d.kv_granularity = grans[(n / 3) % ARRAY_LEN(grans)];
                    d.overhead_blocks = ovhs[(n / 5) % ARRAY_LEN(ovhs)];
                    n++;
                    memset(&g, 0x5a, sizeof g);
                    if (aiter_mla_decode_plan_get_info(&d, &g) != AITER_MLA_OK) {
                        bad_status++;
                        continue;
                    }
                    expected_plan_info(&d, &e);
                    if (info_mismatch(&g, &e, what, sizeof what)) {
                        if (!bad)
                            snprintf(first, sizeof first, "B=%d H=%d mql=%d cu=%d: %s", d.max_batch, d.num_heads,
                                     d.max_q_len, d.num_cu, what);
                        bad++;
                    }
                }
    CHECK(bad_status == 0, "plan_get_info failed on %d valid descs (last error: %s)", bad_status, aiter_mla_last_error());
    CHECK(bad == 0, "plan_get_info: %d of %d descs differ from the header's formulas; first: %s", bad, n, first);
}

typedef struct plan_piece {
    int tile, ks, ke, loc, rows, cu, w;
} plan_piece;

static int piece_cmp(const void *x, const void *y) {
    const plan_piece *a = (const plan_piece *)x, *b = (const plan_piece *)y;
    if (a->tile != b->tile) return a->tile < b->tile ? -1 : 1;
    if (a->ks != b->ks) return a->ks < b->ks ? -1 : 1;
    if (a->ke != b->ke) return a->ke < b->ke ? -1 : 1;
    return a->w < b->w ? -1 : a->w > b->w;
}

static int req_kv_len(const int32_t *kvp, const int32_t *last, int b, int ps) {
    int pages = kvp[b + 1] - kvp[b];
    return pages > 0 ? (pages - 1) * ps + last[b] : 0;
}

/* Independent check of a built plan against the header's documentation. Returns the number
 * of problems (the first is described in err). cu_cost (optional, [num_cu]) receives each
 * CU's sum over its items of ceil(keys / kv_granularity) + overhead_blocks. */
static int verify_plan(const aiter_mla_decode_plan_info *info, const int32_t *qo, const int32_t *kvp,
                       const int32_t *last, int batch, int32_t *plan, char *err, size_t errn, int64_t *cu_cost) {
    aiter_mla_decode_plan_view v = aiter_mla_decode_plan_view_of(info, plan);
    int cu = info->num_lists, tpt = info->tokens_per_tile, ps = info->desc.page_size;
    int gran = info->desc.kv_granularity, ovh = info->desc.overhead_blocks;
    int nerr = 0, b, c, t, np = 0, total_tiles, p;
    int32_t *tile_base = alloc_i32(batch + 1);
    plan_piece *pieces = NULL;
    unsigned char *row_used = NULL;
    err[0] = '\0';
#define PERR(...)                                                  \
    do {                                                           \
        if (nerr++ == 0) snprintf(err, errn, __VA_ARGS__);         \
    } while (0)
    tile_base[0] = 0;
    for (b = 0; b < batch; b++) tile_base[b + 1] = tile_base[b] + ceil_div(qo[b + 1] - qo[b], tpt);
    total_tiles = tile_base[batch];
    if (cu_cost)
        for (c = 0; c < cu; c++) cu_cost[c] = 0;
    if (v.num_lists != cu) PERR("header num_lists %d != %d", v.num_lists, cu);
    if (v.batch != batch) PERR("header batch %d != %d", v.batch, batch);
    if (v.num_reduce_tiles != total_tiles) PERR("num_reduce_tiles %d != %d query tiles", v.num_reduce_tiles, total_tiles);
    for (p = 0; p < 2 * info->max_partial_rows; p++)
        if (plan[info->off_reduce_counters + p] != 0) PERR("reduce_counters[%d] = %d, not zero", p, plan[info->off_reduce_counters + p]);
    if (total_tiles > info->max_reduce_tiles) PERR("%d tiles > max_reduce_tiles %d", total_tiles, info->max_reduce_tiles);
    if (v.num_work < 0 || v.num_work > info->max_work) {
        PERR("num_work %d outside 0..max_work %d", v.num_work, info->max_work);
        goto out;
    }
    if (v.num_partials < 0 || v.num_partials > info->max_partials) {
        PERR("num_partials %d outside 0..max_partials %d", v.num_partials, info->max_partials);
        goto out;
    }
    if (v.num_partial_rows < 0 || v.num_partial_rows > info->max_partial_rows) {
        PERR("num_partial_rows %d outside 0..max_partial_rows %d", v.num_partial_rows, info->max_partial_rows);
        goto out;
    }
    if (v.work_indptr[0] != 0) PERR("work_indptr[0] = %d", v.work_indptr[0]);
    for (c = 0; c < cu; c++)
        if (v.work_indptr[c + 1] < v.work_indptr[c]) {
            PERR("work_indptr not monotone at CU %d", c);
            goto out;
        }
    if (v.work_indptr[cu] != v.num_work) {
        PERR("work_indptr[num_lists] = %d != num_work %d", v.work_indptr[cu], v.num_work);
        goto out;
    }
    if (v.work_indptr[0] != 0) goto out;
    /* reduce_indptr: starts at 0, monotone, tail repeats, bounded by max_partials */
    if (v.reduce_indptr[0] != 0) {
        PERR("reduce_indptr[0] = %d", v.reduce_indptr[0]);
        goto out;
    }
    for (t = 0; t < total_tiles; t++)
        if (v.reduce_indptr[t + 1] < v.reduce_indptr[t]) {
            PERR("reduce_indptr not monotone at tile %d", t);
            goto out;
        }
    if (total_tiles <= info->max_reduce_tiles) {
        if (v.reduce_indptr[total_tiles] != v.num_partials) {
            PERR("reduce_indptr[num_tiles] = %d != num_partials %d", v.reduce_indptr[total_tiles], v.num_partials);
            goto out;
        }
        for (t = total_tiles + 1; t <= info->max_reduce_tiles; t++)
            if (v.reduce_indptr[t] != v.reduce_indptr[total_tiles]) {
                PERR("reduce_indptr tail entry %d = %d does not repeat %d", t, v.reduce_indptr[t],
                     v.reduce_indptr[total_tiles]);
                break;
            }
    } else
        goto out;

    pieces = (plan_piece *)test_malloc(sizeof(plan_piece) * (size_t)(v.num_work > 0 ? v.num_work : 1));
    for (c = 0; c < cu; c++) {
        int w, whole_seen = 0;
        for (w = v.work_indptr[c]; w < v.work_indptr[c + 1]; w++) {
            const int32_t *wk = v.work_info + (int64_t)AITER_MLA_WORK_INTS * w;
            int bi = wk[0], loc = wk[1], qs = wk[2], qe = wk[3], kvs = wk[4], kve = wk[5], off = wk[6];
            int kv_len, ks, ke;
            /* a list runs its split pieces first, so that the reduce can merge their tiles early */
            if (loc >= 0 && whole_seen) PERR("list %d: split piece %d after a whole tile", c, w);
            whole_seen |= loc < 0;
            if (bi < 0 || bi >= batch) {
                PERR("work %d: batch_idx %d out of range", w, bi);
                continue;
            }
            if (qs < qo[bi] || qs >= qo[bi + 1] || (qs - qo[bi]) % tpt != 0 || qe != imin(qs + tpt, qo[bi + 1])) {
                PERR("work %d: rows [%d, %d) are not a query tile of request %d (rows [%d, %d), %d per tile)", w, qs, qe,
                     bi, qo[bi], qo[bi + 1], tpt);
                continue;
            }
            kv_len = req_kv_len(kvp, last, bi, ps);
            if (kvs < kvp[bi] || kve < kvs || kve > kvp[bi + 1]) {
                PERR("work %d: pages [%d, %d) outside request %d's [%d, %d)", w, kvs, kve, bi, kvp[bi], kvp[bi + 1]);
                continue;
            }
            if (off < 0 || off > kv_len) {
                PERR("work %d: kv_offset %d outside 0..%d", w, off, kv_len);
                continue;
            }
            ke = kv_len - off;
            ks = (kvs - kvp[bi]) * ps;
            if (ceil_div(ke, ps) != kve - kvp[bi]) {
                PERR("work %d (request %d, kv_len %d): kv_end %d does not match kv_offset %d", w, bi, kv_len, kve, off);
                continue;
            }
            if (ke < ks) {
                PERR("work %d: key range [%d, %d) reversed", w, ks, ke);
                continue;
            }
            /* SPEC 1a: a causal tail shorter than q_len is not left alone (the cut is
             * extended to the end), so a piece that stops early leaves >= q_len keys */
            if (off > 0 && off < qo[bi + 1] - qo[bi]) {
                PERR("work %d (request %d, q_len %d, kv_len %d): cut leaves a causal tail of %d keys", w, bi,
                     qo[bi + 1] - qo[bi], kv_len, off);
                continue;
            }
            pieces[np].tile = tile_base[bi] + (qs - qo[bi]) / tpt;
            pieces[np].ks = ks;
            pieces[np].ke = ke;
            pieces[np].loc = loc;
            pieces[np].rows = qe - qs;
            pieces[np].cu = c;
            pieces[np].w = w;
            np++;
            if (cu_cost) cu_cost[c] += ceil_div(ke - ks, gran) + ovh;
        }
    }
    qsort(pieces, (size_t)np, sizeof(plan_piece), piece_cmp);
    row_used = (unsigned char *)test_calloc((size_t)(info->max_partial_rows > 0 ? info->max_partial_rows : 1));
    p = 0;
    b = 0;
    {
        int split_pieces = 0;
        for (t = 0; t < total_tiles; t++) {
            int start = p, cnt, k, cur = 0, lt, qs, qe, kv_len, qlb, vis, rstart, rcnt;
            while (p < np && pieces[p].tile == t) p++;
            cnt = p - start;
            while (tile_base[b + 1] <= t) b++;
            lt = t - tile_base[b];
            qs = qo[b] + lt * tpt;
            qe = imin(qs + tpt, qo[b + 1]);
            kv_len = req_kv_len(kvp, last, b, ps);
            qlb = qo[b + 1] - qo[b];
            vis = imax(0, imin(kv_len, kv_len - qlb + (qe - qo[b])));
            if (cnt == 0) {
                PERR("tile %d (request %d, rows [%d, %d), kv_len %d) has no work item", t, b, qs, qe, kv_len);
                continue;
            }
            for (k = start; k < p; k++) {
                if (pieces[k].ks != cur) {
                    PERR("tile %d (request %d, kv_len %d): keys %s at %d (piece [%d, %d))", t, b, kv_len,
                         pieces[k].ks < cur ? "covered twice" : "not covered", imin(cur, pieces[k].ks), pieces[k].ks,
                         pieces[k].ke);
                    break;
                }
                cur = pieces[k].ke;
            }
            if (k == p && (cur < vis || cur > kv_len))
                PERR("tile %d (request %d): pieces cover keys [0, %d), need [0, %d) within kv_len %d", t, b, cur, vis,
                     kv_len);
            if (cnt == 1) {
                if (pieces[start].loc != -1)
                    PERR("tile %d: single piece has partial_qo_loc %d (want -1)", t, pieces[start].loc);
            } else {
                for (k = start; k < p; k++) {
                    int lo = pieces[k].loc, r;
                    split_pieces++;
                    if (lo < 0 || lo + pieces[k].rows > v.num_partial_rows) {
                        PERR("tile %d: split piece partial_qo_loc %d (+%d rows) outside 0..num_partial_rows %d", t, lo,
                             pieces[k].rows, v.num_partial_rows);
                        continue;
                    }
                    for (r = lo; r < lo + pieces[k].rows; r++) {
                        if (row_used[r]) PERR("partial row %d used twice (tile %d)", r, t);
                        row_used[r] = 1;
                    }
                }
            }
            if (v.reduce_final_map[2 * t] != qs || v.reduce_final_map[2 * t + 1] != qe)
                PERR("reduce_final_map[%d] = (%d, %d), want (%d, %d)", t, v.reduce_final_map[2 * t],
                     v.reduce_final_map[2 * t + 1], qs, qe);
            rstart = v.reduce_indptr[t];
            rcnt = v.reduce_indptr[t + 1] - rstart;
            if (rcnt != (cnt >= 2 ? cnt : 0))
                PERR("reduce tile %d lists %d pieces, the tile has %d", t, rcnt, cnt);
            else
                for (k = 0; k < rcnt; k++)
                    if (v.reduce_partial_map[rstart + k] != pieces[start + k].loc) {
                        PERR("reduce_partial_map of tile %d entry %d = %d, want %d (pieces in KV order)", t, k,
                             v.reduce_partial_map[rstart + k], pieces[start + k].loc);
                        break;
                    }
        }
        if (nerr == 0 && split_pieces != v.num_partials)
            PERR("%d split pieces but num_partials %d", split_pieces, v.num_partials);
    }
out:
    free(tile_base);
    free(pieces);
    free(row_used);
#undef PERR
    return nerr;
}

/* A random batch: q lengths 1..mql and context lengths of the given style.
 * style 0: mixed (0, 1, short, 8192+, medium, fewer keys than q); 1: all kv_uniform. */
static void make_lengths(test_rng *r, int batch, int mql, int ps, int style, int kv_uniform, int32_t *qo, int32_t *kvp,
                         int32_t *last, int32_t *kvlen) {
    int b;
    qo[0] = 0;
    kvp[0] = 0;
    for (b = 0; b < batch; b++) {
        int ql = rng_int(r, 1, mql), kv, pages;
        if (style == 1) {
            kv = kv_uniform;
            ql = mql;
        } else {
            int kind = rng_int(r, 0, 6);
            kv = kind == 0 ? 0 : kind == 1 ? 1 : kind == 2 ? rng_int(r, 2, 300) : kind == 3 ? rng_int(r, 8192, 9000)
                                                                            : kind == 4 ? rng_int(r, 1, 3000)
                                                                            : kind == 5 ? ql - 1
                                                                                        : rng_int(r, 300, 1200);
        }
        pages = ceil_div(kv, ps);
        qo[b + 1] = qo[b] + ql;
        kvp[b + 1] = kvp[b] + pages;
        last[b] = pages ? kv - (pages - 1) * ps : 0;
        if (kvlen) kvlen[b] = kv;
    }
}

static void test_plan_random(void) {
    test_rng r = rng_seed(0x91a9);
    static const int Hs[] = {1, 8, 16, 32, 64, 128};
    static const int pss[] = {1, 16, 64, 256};
    static const int cus[] = {1, 2, 7, 80, 132, 304};
    static const int grans[] = {0, 16, 32, 64, 128, 1024, 4096};
    static const int ovhs[] = {0, 1, 2, 5, 64};
    int it, n_build_fail = 0, n_check_fail = 0, n_verify_fail = 0, n_split = 0, iters = 240;
    char first_build[1024] = "", first_check[1024] = "", first_verify[1024] = "";
    for (it = 0; it < iters; it++) {
        int batch = it < 20 ? rng_int(&r, 1, 3) : (it % 8 == 0 ? rng_int(&r, 200, 300) : rng_int(&r, 1, 40));
        aiter_mla_decode_plan_desc d;
        aiter_mla_decode_plan_info info;
        int32_t *qo = alloc_i32(batch + 1), *kvp = alloc_i32(batch + 1), *last = alloc_i32(batch);
        int32_t *plan;
        int64_t i;
        aiter_mla_status st;
        char err[400];
        memset(&d, 0, sizeof d);
        d.num_heads = rng_pick(&r, Hs, ARRAY_LEN(Hs));
        d.max_q_len = rng_int(&r, 1, 8);
        d.page_size = rng_pick(&r, pss, ARRAY_LEN(pss));
        d.num_cu = rng_pick(&r, cus, ARRAY_LEN(cus));
        d.kv_granularity = rng_pick(&r, grans, ARRAY_LEN(grans));
        d.overhead_blocks = rng_pick(&r, ovhs, ARRAY_LEN(ovhs));
        d.max_batch = batch + rng_int(&r, 0, 5);
        make_lengths(&r, batch, d.max_q_len, d.page_size, it % 11 == 5 ? 1 : 0, rng_int(&r, 0, 9000), qo, kvp, last,
                     NULL);
        if (aiter_mla_decode_plan_get_info(&d, &info) != AITER_MLA_OK) {
            n_build_fail++;
            if (!first_build[0]) snprintf(first_build, sizeof first_build, "get_info: %s", aiter_mla_last_error());
            free(qo);
            free(kvp);
            free(last);
            continue;
        }
        plan = alloc_i32(info.plan_ints);
        for (i = 0; i < info.plan_ints; i++) plan[i] = 0x5a5a5a5a;
        st = aiter_mla_decode_plan_build(&info, qo, kvp, last, batch, plan);
        if (st != AITER_MLA_OK) {
            n_build_fail++;
            if (!first_build[0])
                snprintf(first_build, sizeof first_build, "it %d (batch %d H %d mql %d ps %d cu %d): %s: %s", it, batch,
                         d.num_heads, d.max_q_len, d.page_size, d.num_cu, testing_status_name(st), aiter_mla_last_error());
        } else {
            st = aiter_mla_decode_plan_check(&info, qo, kvp, last, batch, plan);
            if (st != AITER_MLA_OK) {
                n_check_fail++;
                if (!first_check[0])
                    snprintf(first_check, sizeof first_check, "it %d (batch %d H %d mql %d ps %d cu %d): %s: %s", it,
                             batch, d.num_heads, d.max_q_len, d.page_size, d.num_cu, testing_status_name(st),
                             aiter_mla_last_error());
            }
            if (verify_plan(&info, qo, kvp, last, batch, plan, err, sizeof err, NULL)) {
                n_verify_fail++;
                if (!first_verify[0])
                    snprintf(first_verify, sizeof first_verify,
                             "it %d (batch %d H %d mql %d ps %d cu %d gran %d ovh %d): %s", it, batch, d.num_heads,
                             d.max_q_len, d.page_size, d.num_cu, d.kv_granularity, d.overhead_blocks, err);
            }
            if (aiter_mla_decode_plan_view_of(&info, plan).num_partials > 0) n_split++;
        }
        free(plan);
        free(qo);
        free(kvp);
        free(last);
    }
    CHECK(n_build_fail == 0, "plan build failed in %d of %d random configs; first: %s", n_build_fail, iters, first_build);
    CHECK(n_check_fail == 0, "plan_check rejected %d freshly built plans; first: %s", n_check_fail, first_check);
    CHECK(n_verify_fail == 0, "independent plan verification failed for %d of %d plans; first: %s", n_verify_fail, iters,
          first_verify);
    CHECK(n_split >= iters / 10, "only %d of %d random plans split any request (test is not exercising splits)", n_split,
          iters);

    /* cuts near the end of a request with q_len 8: every kv_len 17..400 on 2, 3, 5 CUs */
    {
        static const int tcus[] = {2, 3, 5};
        int ci, kv, nfail = 0, nsplit = 0;
        char first[1024] = "";
        for (ci = 0; ci < ARRAY_LEN(tcus); ci++)
            for (kv = 17; kv <= 400; kv++) {
                aiter_mla_decode_plan_desc d;
                aiter_mla_decode_plan_info info;
                int32_t qo[2] = {0, 8}, kvp[2] = {0, kv}, last[1] = {1}, *plan;
                char err[400];
                memset(&d, 0, sizeof d);
                d.max_batch = 1;
                d.num_heads = 16;
                d.max_q_len = 8;
                d.num_cu = tcus[ci];
                d.page_size = 1;
                d.kv_granularity = 16;
                if (aiter_mla_decode_plan_get_info(&d, &info) != AITER_MLA_OK) {
                    nfail++;
                    continue;
                }
                plan = alloc_i32(info.plan_ints);
                if (aiter_mla_decode_plan_build(&info, qo, kvp, last, 1, plan) != AITER_MLA_OK ||
                    aiter_mla_decode_plan_check(&info, qo, kvp, last, 1, plan) != AITER_MLA_OK ||
                    verify_plan(&info, qo, kvp, last, 1, plan, err, sizeof err, NULL)) {
                    if (!nfail) snprintf(first, sizeof first, "kv %d, %d CUs: %s / %s", kv, tcus[ci], err, aiter_mla_last_error());
                    nfail++;
                }
                if (aiter_mla_decode_plan_view_of(&info, plan).num_partials > 0) nsplit++;
                free(plan);
            }
        CHECK(nfail == 0, "q_len 8 near-end cuts: %d plans wrong; first: %s", nfail, first);
        CHECK(nsplit > 300, "q_len 8 near-end cuts: only %d plans split", nsplit);
    }
}

static void test_plan_balance(void) {
    static const int cfg[][4] = {/* batch, kv_len, page_size, num_cu */
                                 {1, 8192, 1, 80},   {4, 8192, 16, 80},  {37, 5000, 64, 132}, {8, 8192, 1, 7},
                                 {128, 8192, 16, 304}, {3, 20000, 1, 132}, {2, 9000, 64, 304}};
    int ci;
    test_rng r = rng_seed(7);
    for (ci = 0; ci < ARRAY_LEN(cfg); ci++) {
        int batch = cfg[ci][0], kv = cfg[ci][1], ps = cfg[ci][2], cu = cfg[ci][3], c;
        aiter_mla_decode_plan_desc d;
        aiter_mla_decode_plan_info info;
        int32_t *qo = alloc_i32(batch + 1), *kvp = alloc_i32(batch + 1), *last = alloc_i32(batch), *plan;
        int64_t *cost = (int64_t *)test_malloc(sizeof(int64_t) * (size_t)cu), maxc = 0, total, payload;
        char err[400];
        int gran, ovh;
        memset(&d, 0, sizeof d);
        d.max_batch = batch;
        d.num_heads = 16;
        d.max_q_len = 1;
        d.num_cu = cu;
        d.page_size = ps;
        make_lengths(&r, batch, 1, ps, 1, kv, qo, kvp, last, NULL);
        CHECK_STATUS(aiter_mla_decode_plan_get_info(&d, &info), AITER_MLA_OK, "");
        gran = info.desc.kv_granularity;
        ovh = info.desc.overhead_blocks;
        plan = alloc_i32(info.plan_ints);
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, batch, plan), AITER_MLA_OK, "");
        CHECK(verify_plan(&info, qo, kvp, last, batch, plan, err, sizeof err, cost) == 0, "balance cfg %d: %s", ci, err);
        total = (int64_t)batch * (ceil_div(kv, gran) + ovh);
        payload = (total + cu - 1) / cu + ovh;
        for (c = 0; c < cu; c++)
            if (cost[c] > maxc) maxc = cost[c];
        CHECK(maxc <= payload + ovh,
              "balance cfg %d (batch %d, kv %d, page %d, %d CUs): busiest CU holds %lld blocks, payload %lld (+%d allowed)",
              ci, batch, kv, ps, cu, (long long)maxc, (long long)payload, ovh);
        free(qo);
        free(kvp);
        free(last);
        free(plan);
        free(cost);
    }
}

/* Ragged contexts (uniform in [0.5, 1.5] x 4096, as the bench's D1), pages of 64, every
 * kv_granularity from a quarter page to two pages and overheads 1..4: no list may cost more
 * than the lists' mean plus a step, two overheads and a block, nor less than the mean minus as
 * much and the last list's drift below (each list but the last holds its share of the work left, rounded up, with the overhead
 * of a cut to come and half a step, less what the cut's rounding to whole steps leaves), a
 * list's cost counted as the planner documents it (each item's pages in steps of max(page,
 * kv_granularity) keys, a step costing max(1, page / kv_granularity) blocks, plus
 * overhead_blocks). With its cuts rounded down to whole steps and nothing to make up for them,
 * the planner had left the last list 60 % above the mean (kv_granularity 32 on the bench's D1
 * contexts); with a payload fixed at the start, it left D1's last list empty. */
static void test_plan_balance_ragged(void) {
    static const int grans[] = {16, 32, 64, 128}, ovhs[] = {1, 2, 4}, cus[] = {132, 80, 7};
    enum { B = 128, PS = 64 };
    test_rng r = rng_seed(11);
    int32_t qo[B + 1], kvp[B + 1], last[B];
    int gi, oi, ci, b, c, w;
    qo[0] = kvp[0] = 0;
    for (b = 0; b < B; b++) {
        const int ctx = rng_int(&r, 2048, 6144), pages = ceil_div(ctx, PS);
        qo[b + 1] = b + 1;
        kvp[b + 1] = kvp[b] + pages;
        last[b] = ctx - (pages - 1) * PS;
    }
    for (gi = 0; gi < ARRAY_LEN(grans); gi++)
        for (oi = 0; oi < ARRAY_LEN(ovhs); oi++)
            for (ci = 0; ci < ARRAY_LEN(cus); ci++) {
                const int pages_per_step = imax(1, grans[gi] / PS), step = imax(1, PS / grans[gi]);
                aiter_mla_decode_plan_desc d;
                aiter_mla_decode_plan_info info;
                aiter_mla_decode_plan_view v;
                int64_t sum = 0, maxc = 0, minc = INT64_MAX, slack;
                int32_t *plan;
                char err[400];
                memset(&d, 0, sizeof d);
                d.max_batch = B;
                d.num_heads = 16;
                d.max_q_len = 1;
                d.num_cu = cus[ci];
                d.page_size = PS;
                d.kv_granularity = grans[gi];
                d.overhead_blocks = ovhs[oi];
                CHECK_STATUS(aiter_mla_decode_plan_get_info(&d, &info), AITER_MLA_OK, "");
                plan = alloc_i32(info.plan_ints);
                CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, B, plan), AITER_MLA_OK, "");
                CHECK(verify_plan(&info, qo, kvp, last, B, plan, err, sizeof err, NULL) == 0, "ragged balance: %s", err);
                v = aiter_mla_decode_plan_view_of(&info, plan);
                for (c = 0; c < cus[ci]; c++) {
                    int64_t cost = 0;
                    for (w = v.work_indptr[c]; w < v.work_indptr[c + 1]; w++) {
                        const int32_t *item = v.work_info + (int64_t)w * AITER_MLA_WORK_INTS;
                        cost += (int64_t)ceil_div(item[5] - item[4], pages_per_step) * step + ovhs[oi];
                    }
                    sum += cost;
                    if (cost > maxc) maxc = cost;
                    if (cost < minc) minc = cost;
                }
                slack = (int64_t)(step + 2 * ovhs[oi] + 1) * cus[ci]; /* times the list count, as sum */
                CHECK(maxc * cus[ci] <= sum + slack,
                      "ragged balance (kv_granularity %d, overhead %d, %d CUs): busiest list %lld blocks, mean %.1f", grans[gi],
                      ovhs[oi], cus[ci], (long long)maxc, (double)sum / cus[ci]);
                { /* The last list also takes what the others' rounding left: each list before it may
                   * run ahead of its share by the half step and the rounding up (step / 2 + 1
                   * blocks), which comes out of the lists after it, so the last list can fall short
                   * by that times H(lists - 1) = 1 + 1/2 + ... + 1/(lists - 1) (5.7 blocks under the
                   * mean with 80 lists, kv_granularity 32, overhead 1 at test_host --seed 3). */
                    double harmonic = 0.0;
                    for (c = 1; c < cus[ci]; c++) harmonic += 1.0 / c;
                    slack += (int64_t)ceil((step / 2 + 1) * harmonic) * cus[ci];
                }
                CHECK(minc * cus[ci] >= sum - slack,
                      "ragged balance (kv_granularity %d, overhead %d, %d CUs): lightest list %lld blocks, mean %.1f", grans[gi],
                      ovhs[oi], cus[ci], (long long)minc, (double)sum / cus[ci]);
                free(plan);
            }
}

/* Copy `plan`, let the caller corrupt the copy, then both the library's checker and the
 * test's verifier must reject it. */
static void expect_corrupt_rejected(const char *what, const aiter_mla_decode_plan_info *info, const int32_t *qo,
                                    const int32_t *kvp, const int32_t *last, int batch, int32_t *bad_plan) {
    char err[400];
    aiter_mla_status st = aiter_mla_decode_plan_check(info, qo, kvp, last, batch, bad_plan);
    CHECK(st == AITER_MLA_ERR_PLAN_INVALID, "corrupted plan (%s): plan_check returned %s (want ERR_PLAN_INVALID); %s", what,
          testing_status_name(st), aiter_mla_last_error());
    CHECK(verify_plan(info, qo, kvp, last, batch, bad_plan, err, sizeof err, NULL) > 0,
          "corrupted plan (%s): the test's own verifier did not notice", what);
}

static void test_plan_corruption(void) {
    const int batch = 3;
    int32_t qo[4] = {0, 1, 3, 4}, kvp[4], last[3], kvlen[3] = {3000, 2000, 50};
    aiter_mla_decode_plan_desc d;
    aiter_mla_decode_plan_info info;
    aiter_mla_decode_plan_view v;
    int32_t *plan, *c;
    int b, wa = -1, wb = -1, w, tile_a = -1;
    char err[400];
    kvp[0] = 0;
    for (b = 0; b < batch; b++) {
        kvp[b + 1] = kvp[b] + kvlen[b];
        last[b] = 1;
    }
    memset(&d, 0, sizeof d);
    d.max_batch = 4;
    d.num_heads = 16;
    d.max_q_len = 2;
    d.num_cu = 8;
    d.page_size = 1;
    if (!CHECK(aiter_mla_decode_plan_get_info(&d, &info) == AITER_MLA_OK, "get_info: %s", aiter_mla_last_error())) return;
    plan = alloc_i32(info.plan_ints);
    c = alloc_i32(info.plan_ints);
    CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, batch, plan), AITER_MLA_OK, "");
    CHECK_STATUS(aiter_mla_decode_plan_check(&info, qo, kvp, last, batch, plan), AITER_MLA_OK, "");
    CHECK(verify_plan(&info, qo, kvp, last, batch, plan, err, sizeof err, NULL) == 0, "base plan: %s", err);
    v = aiter_mla_decode_plan_view_of(&info, plan);
    { /* an info that get_info would not make: a zeroed view, not pointers far past the plan */
        aiter_mla_decode_plan_info bad = info;
        aiter_mla_decode_plan_view z;
        bad.off_work_info = INT64_MAX / 2;
        z = aiter_mla_decode_plan_view_of(&bad, plan);
        CHECK(!z.work_info && !z.work_indptr && z.num_work == 0 && strstr(aiter_mla_last_error(), "plan_info.off_work_info differs"),
              "plan_view_of of a made-up info: work_info %p, last error \"%s\"", (void *)z.work_info, aiter_mla_last_error());
        aiter_mla__fail(AITER_MLA_ERR_INVALID_ARGUMENT, "an earlier message"); /* a NULL plan says so itself */
        z = aiter_mla_decode_plan_view_of(&info, NULL);
        CHECK(!z.work_info && z.num_work == 0 && strstr(aiter_mla_last_error(), "plan is NULL"),
              "plan_view_of a NULL plan: work_info %p, last error \"%s\"", (void *)z.work_info, aiter_mla_last_error());
    }
    /* two adjacent pieces of one split tile: A ends where B starts */
    for (w = 0; w < v.num_work && wa < 0; w++) {
        const int32_t *x = v.work_info + 8 * w;
        int u;
        if (x[1] < 0) continue;
        for (u = 0; u < v.num_work; u++) {
            const int32_t *y = v.work_info + 8 * u;
            if (u != w && y[0] == x[0] && y[2] == x[2] && y[1] >= 0 && y[4] == x[5] && y[5] > y[4] && x[5] > x[4]) {
                wa = w;
                wb = u;
                break;
            }
        }
    }
    if (!CHECK(wa >= 0, "the base plan (3 requests, 8 CUs, 3000/2000/50 keys) has no split tile to corrupt")) {
        free(plan);
        free(c);
        return;
    }
    { /* the reduce tile of A: the tile whose final map starts at A's qo_start */
        const int32_t *x = v.work_info + 8 * wa;
        int bb;
        for (bb = 0; bb < v.num_reduce_tiles; bb++)
            if (v.reduce_final_map[2 * bb] == x[2]) tile_a = bb;
    }
#define CORRUPT_BEGIN()                                                        \
    do {                                                                       \
        aiter_mla_decode_plan_view cv;                                         \
        int32_t *A, *B;                                                        \
        memcpy(c, plan, sizeof(int32_t) * (size_t)info.plan_ints);             \
        cv = aiter_mla_decode_plan_view_of(&info, c);                          \
        A = cv.work_info + 8 * wa;                                             \
        B = cv.work_info + 8 * wb;                                             \
        (void)A;                                                               \
        (void)B;
#define CORRUPT_END(what)                                                      \
        expect_corrupt_rejected(what, &info, qo, kvp, last, batch, c);         \
    } while (0)

    CORRUPT_BEGIN();
    B[4] -= 1; /* B starts one page early: overlaps A */
    CORRUPT_END("overlapping pieces");

    CORRUPT_BEGIN();
    A[5] -= 1; /* A ends one key early (kv_offset kept consistent): a gap */
    A[6] += 1;
    CORRUPT_END("gap between pieces");

    CORRUPT_BEGIN();
    A[6] += 1; /* kv_offset no longer matches kv_end */
    CORRUPT_END("kv_offset inconsistent with kv_end");

    CORRUPT_BEGIN();
    {
        int kv_len = req_kv_len(kvp, last, B[0], 1);
        B[5] = B[4]; /* drop B's keys */
        B[6] = kv_len - (B[4] - kvp[B[0]]);
    }
    CORRUPT_END("dropped piece");

    CORRUPT_BEGIN();
    {
        int k, old = B[1];
        B[1] = A[1]; /* two pieces share a partial row */
        for (k = 0; k < cv.num_partials; k++)
            if (cv.reduce_partial_map[k] == old) cv.reduce_partial_map[k] = A[1];
    }
    CORRUPT_END("duplicate partial row");

    CORRUPT_BEGIN();
    A[1] = -1; /* split piece claims to write o directly */
    CORRUPT_END("split piece with partial_qo_loc -1");

    CORRUPT_BEGIN();
    {
        int k, old = A[1];
        A[1] = info.max_partial_rows; /* beyond the workspace */
        for (k = 0; k < cv.num_partials; k++)
            if (cv.reduce_partial_map[k] == old) cv.reduce_partial_map[k] = A[1];
    }
    CORRUPT_END("partial row outside the workspace");

    if (tile_a >= 0) {
        CORRUPT_BEGIN();
        cv.reduce_indptr[tile_a + 1] += 1; /* tile claims one piece too many */
        CORRUPT_END("reduce_indptr off by one");

        CORRUPT_BEGIN();
        cv.reduce_indptr[tile_a + 1] = cv.reduce_indptr[tile_a] - 1; /* not monotone */
        CORRUPT_END("reduce_indptr not monotone");

        CORRUPT_BEGIN();
        cv.reduce_partial_map[cv.reduce_indptr[tile_a]] += 1; /* reduce reads a wrong row */
        CORRUPT_END("reduce_partial_map wrong row");

        CORRUPT_BEGIN();
        cv.reduce_final_map[2 * tile_a + 1] += 1;
        CORRUPT_END("reduce_final_map wrong qo_end");
    }

    CORRUPT_BEGIN();
    A[0] = batch; /* batch_idx out of range */
    CORRUPT_END("batch_idx out of range");

    CORRUPT_BEGIN();
    A[3] += 1; /* qo_end past the tile */
    CORRUPT_END("qo_end beyond the tile");

    CORRUPT_BEGIN();
    A[5] = kvp[batch] + 5; /* kv_end beyond the request (and kv_indices) */
    A[6] = 0;
    CORRUPT_END("kv_end out of range");

    CORRUPT_BEGIN();
    if (info.num_lists >= 2) {
        int x = cv.work_indptr[1];
        cv.work_indptr[1] = cv.work_indptr[2] + 1;
        if (cv.work_indptr[1] == x) cv.work_indptr[1] += 1;
    }
    CORRUPT_END("work_indptr not monotone");

    CORRUPT_BEGIN();
    c[info.off_reduce_counters + info.max_partial_rows] = 1; /* a counter left set (an interrupted launch) */
    CORRUPT_END("nonzero reduce counter");

    /* the last piece of request 0 stops one key short (offsets consistent): only the
     * end-of-sequence coverage shows it */
    {
        int wl = -1;
        for (w = 0; w < v.num_work; w++) {
            const int32_t *x = v.work_info + 8 * w;
            if (x[0] == 0 && x[5] == kvp[1] && x[5] - x[4] >= 2) wl = w;
        }
        if (CHECK(wl >= 0, "no last piece of request 0 found")) {
            int32_t *L;
            memcpy(c, plan, sizeof(int32_t) * (size_t)info.plan_ints);
            L = aiter_mla_decode_plan_view_of(&info, c).work_info + 8 * wl;
            L[5] -= 1;
            L[6] += 1;
            expect_corrupt_rejected("last piece one key short", &info, qo, kvp, last, batch, c);
        }
    }
    /* the plan against a longer last request than it was built for */
    {
        int32_t kvp3[4];
        memcpy(kvp3, kvp, sizeof kvp);
        kvp3[batch] += 3;
        CHECK(aiter_mla_decode_plan_check(&info, qo, kvp3, last, batch, plan) == AITER_MLA_ERR_PLAN_INVALID,
              "plan_check accepted a plan for a last request 3 keys longer than it was built for");
    }
    /* the plan against arrays it was not built from (longer context for request 0) */
    {
        int32_t kvp2[4], last2[3];
        memcpy(kvp2, kvp, sizeof kvp);
        memcpy(last2, last, sizeof last);
        for (b = 1; b <= batch; b++) kvp2[b] += 7;
        CHECK(aiter_mla_decode_plan_check(&info, qo, kvp2, last2, batch, plan) == AITER_MLA_ERR_PLAN_INVALID,
              "plan_check accepted a plan against longer kv lengths than it was built for");
    }
    /* a request shorter than the plan was built for (100 keys in pages of 64 -> 20): the
     * message names where the piece should have ended */
    {
        aiter_mla_decode_plan_desc d64 = d;
        aiter_mla_decode_plan_info info64;
        int32_t q1[2] = {0, 1}, kv_built[2] = {0, 2}, last_built[1] = {36}, kv_now[2] = {0, 1}, last_now[1] = {20};
        int32_t *p64;
        d64.page_size = 64;
        d64.num_cu = 1; /* one piece: pages 0..2 */
        if (CHECK(aiter_mla_decode_plan_get_info(&d64, &info64) == AITER_MLA_OK, "get_info: %s", aiter_mla_last_error())) {
            p64 = alloc_i32(info64.plan_ints);
            CHECK_STATUS(aiter_mla_decode_plan_build(&info64, q1, kv_built, last_built, 1, p64), AITER_MLA_OK, "");
            CHECK(aiter_mla_decode_plan_check(&info64, q1, kv_now, last_now, 1, p64) == AITER_MLA_ERR_PLAN_INVALID &&
                      strstr(aiter_mla_last_error(), "an end by 1") != NULL,
                  "plan_check on a shortened request: %s", aiter_mla_last_error());
            free(p64);
        }
    }
#undef CORRUPT_BEGIN
#undef CORRUPT_END
    free(plan);
    free(c);
}

static void test_plan_validation(void) {
    aiter_mla_decode_plan_desc d0, d;
    aiter_mla_decode_plan_info info, tmp;
    int32_t qo[5] = {0, 1, 3, 4, 5}, kvp[5] = {0, 2, 5, 5, 6}, last[4] = {16, 3, 0, 16};
    int32_t *plan;
    memset(&d0, 0, sizeof d0);
    d0.max_batch = 4;
    d0.num_heads = 16;
    d0.max_q_len = 2;
    d0.num_cu = 4;
    d0.page_size = 16;
#define DESC_CASE(field, value, fname)                                                                   \
    do {                                                                                                 \
        d = d0;                                                                                          \
        d.field = value;                                                                                 \
        CHECK_STATUS(aiter_mla_decode_plan_get_info(&d, &tmp), AITER_MLA_ERR_INVALID_ARGUMENT, fname);   \
    } while (0)
    DESC_CASE(num_heads, 129, "num_heads");
    DESC_CASE(num_heads, 0, "num_heads");
    DESC_CASE(max_q_len, 9, "max_q_len");
    DESC_CASE(max_q_len, 0, "max_q_len");
    DESC_CASE(num_cu, 0, "num_cu");
    DESC_CASE(num_cu, -3, "num_cu");
    DESC_CASE(kv_granularity, 24, "kv_granularity");
    DESC_CASE(kv_granularity, 8, "kv_granularity");
    DESC_CASE(kv_granularity, 8192, "kv_granularity");
    DESC_CASE(page_size, 24, "page_size");
    DESC_CASE(page_size, 512, "page_size");
    DESC_CASE(max_batch, 0, "max_batch");
    DESC_CASE(overhead_blocks, 65, "overhead_blocks");
    DESC_CASE(overhead_blocks, -1, "overhead_blocks");
#undef DESC_CASE
    CHECK(aiter_mla_decode_plan_get_info(NULL, &tmp) == AITER_MLA_ERR_NULL_POINTER, "get_info(NULL desc)");
    CHECK(aiter_mla_decode_plan_get_info(&d0, NULL) == AITER_MLA_ERR_NULL_POINTER, "get_info(NULL info)");

    if (!CHECK(aiter_mla_decode_plan_get_info(&d0, &info) == AITER_MLA_OK, "get_info: %s", aiter_mla_last_error())) return;
    plan = alloc_i32(info.plan_ints);
    CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, 4, plan), AITER_MLA_OK, "");
    CHECK_STATUS(aiter_mla_decode_plan_check(&info, qo, kvp, last, 4, plan), AITER_MLA_OK, "");
    {
        int32_t q2[5] = {0, 2, 1, 3, 4};
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, q2, kvp, last, 4, plan), AITER_MLA_ERR_INVALID_ARGUMENT, "qo_indptr");
    }
    {
        int32_t k2[5] = {0, 3, 2, 5, 6};
        int32_t l2[4] = {16, 16, 16, 16};
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, k2, l2, 4, plan), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_indptr");
    }
    {
        int32_t q3[5] = {0, 1, 4, 5, 6}; /* request 1 has 3 query tokens > max_q_len 2 */
        aiter_mla_status st = aiter_mla_decode_plan_build(&info, q3, kvp, last, 4, plan);
        const char *m = aiter_mla_last_error();
        CHECK(st == AITER_MLA_ERR_PLAN_MISMATCH && m && (strstr(m, "max_q_len") || strstr(m, "qo_indptr")),
              "q_len 3 > max_q_len 2 at plan build: got %s \"%s\", want ERR_PLAN_MISMATCH naming max_q_len or qo_indptr",
              testing_status_name(st), m ? m : "");
    }
    {
        int32_t l3[4] = {16, 0, 0, 16}; /* request 1 has 3 pages but 0 keys in its last */
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, l3, 4, plan), AITER_MLA_ERR_INVALID_ARGUMENT,
                     "kv_last_page_lens");
        l3[1] = 17; /* more than a page */
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, l3, 4, plan), AITER_MLA_ERR_INVALID_ARGUMENT,
                     "kv_last_page_lens");
        l3[1] = -1;
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, l3, 4, plan), AITER_MLA_ERR_INVALID_ARGUMENT,
                     "kv_last_page_lens");
    }
    {
        int32_t q5[7] = {0, 1, 2, 3, 4, 5, 6}, k5[7] = {0, 1, 2, 3, 4, 5, 6}, l5[6] = {1, 1, 1, 1, 1, 1};
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, q5, k5, l5, 5, plan), AITER_MLA_ERR_PLAN_MISMATCH, "batch");
    }
    CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, 4, NULL), AITER_MLA_ERR_NULL_POINTER, "plan");
    CHECK_STATUS(aiter_mla_decode_plan_build(&info, NULL, kvp, last, 4, plan), AITER_MLA_ERR_NULL_POINTER, "qo_indptr");
    CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, NULL, last, 4, plan), AITER_MLA_ERR_NULL_POINTER, "kv_indptr");
    CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, NULL, 4, plan), AITER_MLA_ERR_NULL_POINTER,
                 "kv_last_page_lens");
    CHECK(aiter_mla_decode_plan_build(NULL, qo, kvp, last, 4, plan) == AITER_MLA_ERR_NULL_POINTER, "plan_build(NULL info)");
    free(plan);
}

/* =====================================================================================
 * CPU reference decode (SPEC 1) and its scheduled replay
 * ===================================================================================== */
typedef struct dec_case {
    const char *name;
    int batch, H, ps_arg; /* ps_arg 0 means the default (1) */
    int q_lens[8], kv_lens[8];
    aiter_mla_dtype q_dtype, kv_dtype, o_dtype; /* DEFAULT allowed */
    float sm_scale, q_scale, kv_scale;          /* 0 allowed (defaults) */
    int64_t q_st, q_sh, o_st, o_sh;             /* 0 = contiguous */
    int with_lse, bad_pages;
    int cus[3]; /* scheduled replays with these num_cu (0 = none) */
    int kv_gran;
    uint64_t seed;
} dec_case;

static dec_case make_dec_case(const char *name, int batch, int H, int ps_arg, aiter_mla_dtype qt, aiter_mla_dtype kt,
                              aiter_mla_dtype ot, uint64_t seed) {
    dec_case c;
    memset(&c, 0, sizeof c);
    c.name = name;
    c.batch = batch;
    c.H = H;
    c.ps_arg = ps_arg;
    c.q_dtype = qt;
    c.kv_dtype = kt;
    c.o_dtype = ot;
    c.seed = seed;
    c.with_lse = 1;
    return c;
}
static void set_ints(int *dst, int n, ...) {
    va_list ap;
    int i;
    va_start(ap, n);
    for (i = 0; i < n; i++) dst[i] = va_arg(ap, int);
    va_end(ap);
}

typedef struct dec_setup {
    const dec_case *c;
    int batch, H, ps, T;
    aiter_mla_dtype qt, kt, ot;
    int32_t *qo, *kvp, *kvi, *last;
    int64_t num_pages, q_st, q_sh, o_st, o_sh, o_elems;
    void *q, *cache;
    double *ref_o, *ref_lse;
    unsigned char *row_empty;
} dec_setup;

static int g_sched_runs = 0, g_sched_split_runs = 0;

static void dec_setup_build(dec_setup *s, const dec_case *c) {
    test_rng r = rng_seed(c->seed);
    int b, t, h;
    int64_t i;
    int32_t *perm;
    float qsc = c->q_scale != 0.0f ? c->q_scale : 1.0f, ksc = c->kv_scale != 0.0f ? c->kv_scale : 1.0f;
    memset(s, 0, sizeof *s);
    s->c = c;
    s->batch = c->batch;
    s->H = c->H;
    s->ps = c->ps_arg ? c->ps_arg : 1;
    s->qt = c->q_dtype != AITER_MLA_DTYPE_DEFAULT ? c->q_dtype : AITER_MLA_BF16;
    s->kt = c->kv_dtype != AITER_MLA_DTYPE_DEFAULT ? c->kv_dtype : (dtype_is_fp8(s->qt) ? AITER_MLA_BF16 : s->qt);
    s->ot = c->o_dtype != AITER_MLA_DTYPE_DEFAULT ? c->o_dtype : (dtype_is_fp8(s->qt) ? AITER_MLA_BF16 : s->qt);
    s->qo = alloc_i32(s->batch + 1);
    s->kvp = alloc_i32(s->batch + 1);
    s->last = alloc_i32(s->batch);
    s->qo[0] = 0;
    s->kvp[0] = 0;
    for (b = 0; b < s->batch; b++) {
        int pages = ceil_div(c->kv_lens[b], s->ps);
        s->qo[b + 1] = s->qo[b] + c->q_lens[b];
        s->kvp[b + 1] = s->kvp[b] + pages;
        s->last[b] = pages ? c->kv_lens[b] - (pages - 1) * s->ps : 0;
    }
    s->T = s->qo[s->batch];
    s->num_pages = s->kvp[s->batch] + 3;
    perm = alloc_i32(s->num_pages);
    for (i = 0; i < s->num_pages; i++) perm[i] = (int32_t)i;
    rng_shuffle_i32(&r, perm, (int)s->num_pages);
    s->kvi = alloc_i32(s->kvp[s->batch]);
    for (i = 0; i < s->kvp[s->batch]; i++) s->kvi[i] = perm[i];
    free(perm);
    if (c->bad_pages) {
        for (i = s->kvp[0]; i < s->kvp[1]; i++)
            if (i % 3 == 1) s->kvi[i] = (i % 2) ? -1 : -100;
        for (i = s->kvp[s->batch - 1]; i < s->kvp[s->batch]; i++) s->kvi[i] = (int32_t)(s->num_pages + i);
    }
    s->q_sh = c->q_sh ? c->q_sh : 576;
    s->q_st = c->q_st ? c->q_st : (int64_t)s->H * 576;
    s->q = alloc_elems((int64_t)s->T * s->q_st, s->qt);
    poison_fill(s->q, (int64_t)s->T * s->q_st, s->qt);
    for (t = 0; t < s->T; t++)
        for (h = 0; h < s->H; h++)
            fill_random_at(s->q, t * s->q_st + h * s->q_sh, 576, s->qt, &r, -1.0f, 1.0f, dtype_is_fp8(s->qt) ? qsc : 1.0f);
    s->cache = alloc_elems(s->num_pages * s->ps * 576, s->kt);
    fill_random(s->cache, s->num_pages * s->ps * 576, s->kt, &r, -1.0f, 1.0f, dtype_is_fp8(s->kt) ? ksc : 1.0f);
    s->o_sh = c->o_sh ? c->o_sh : 512;
    s->o_st = c->o_st ? c->o_st : (int64_t)s->H * 512;
    s->o_elems = (int64_t)s->T * s->o_st;
}

static void dec_setup_free(dec_setup *s) {
    free(s->qo);
    free(s->kvp);
    free(s->kvi);
    free(s->last);
    free(s->q);
    free(s->cache);
    free(s->ref_o);
    free(s->ref_lse);
    free(s->row_empty);
}

/* naive double-precision attention, straight from SPEC 1 */
static void dec_reference(dec_setup *s) {
    const dec_case *c = s->c;
    int H = s->H, ps = s->ps, b, t, h, d, max_kv = 1;
    int64_t i, nk_all = s->num_pages * ps * 576;
    double *qd = alloc_f64((int64_t)s->T * H * 576), *kd = alloc_f64(nk_all), *sc;
    int64_t *keys;
    double sm = c->sm_scale != 0.0f ? (double)c->sm_scale : 1.0 / sqrt(576.0);
    double qs = c->q_scale != 0.0f ? (double)c->q_scale : 1.0, ks = c->kv_scale != 0.0f ? (double)c->kv_scale : 1.0;
    double scale = sm * qs * ks;
    for (t = 0; t < s->T; t++)
        for (h = 0; h < H; h++)
            for (d = 0; d < 576; d++) qd[((int64_t)t * H + h) * 576 + d] = ref_load(s->q, t * s->q_st + h * s->q_sh + d, s->qt);
    for (i = 0; i < nk_all; i++) kd[i] = ref_load(s->cache, i, s->kt);
    for (b = 0; b < s->batch; b++) max_kv = imax(max_kv, c->kv_lens[b]);
    keys = (int64_t *)test_malloc(sizeof(int64_t) * (size_t)max_kv);
    sc = alloc_f64(max_kv);
    s->ref_o = alloc_f64((int64_t)s->T * H * 512);
    s->ref_lse = alloc_f64((int64_t)s->T * H);
    s->row_empty = (unsigned char *)test_calloc((size_t)s->T + 1);
    for (b = 0; b < s->batch; b++) {
        int kv_len = c->kv_lens[b], qlb = c->q_lens[b], qi;
        for (qi = 0; qi < qlb; qi++) {
            int lim = kv_len - qlb + qi, j, nk = 0;
            t = s->qo[b] + qi;
            for (j = 0; j < kv_len && j <= lim; j++) {
                int32_t pid = s->kvi[s->kvp[b] + j / ps];
                if (pid < 0 || pid >= s->num_pages) continue;
                keys[nk++] = ((int64_t)pid * ps + j % ps) * 576;
            }
            s->row_empty[t] = nk == 0;
            for (h = 0; h < H; h++) {
                const double *qv = qd + ((int64_t)t * H + h) * 576;
                double *o = s->ref_o + ((int64_t)t * H + h) * 512, m = -INFINITY, sum = 0.0;
                int k;
                for (d = 0; d < 512; d++) o[d] = 0.0;
                if (nk == 0) {
                    s->ref_lse[(int64_t)t * H + h] = INFINITY;
                    continue;
                }
                for (k = 0; k < nk; k++) {
                    double dot = 0.0;
                    const double *kv = kd + keys[k];
                    for (d = 0; d < 576; d++) dot += qv[d] * kv[d];
                    sc[k] = scale * dot;
                    if (sc[k] > m) m = sc[k];
                }
                for (k = 0; k < nk; k++) sum += exp(sc[k] - m);
                for (k = 0; k < nk; k++) {
                    double p = exp(sc[k] - m) / sum * ks;
                    const double *kv = kd + keys[k];
                    for (d = 0; d < 512; d++) o[d] += p * kv[d];
                }
                s->ref_lse[(int64_t)t * H + h] = m + log(sum);
            }
        }
    }
    free(qd);
    free(kd);
    free(keys);
    free(sc);
}

static void dec_args(const dec_setup *s, aiter_mla_decode_args *a) {
    const dec_case *c = s->c;
    memset(a, 0, sizeof *a);
    a->q = s->q;
    a->q_stride_token = c->q_st;
    a->q_stride_head = c->q_sh;
    a->kv_cache = s->cache;
    a->num_pages = s->num_pages;
    a->qo_indptr = s->qo;
    a->kv_indptr = s->kvp;
    a->kv_indices = s->kvi;
    a->kv_last_page_lens = s->last;
    a->o_stride_token = c->o_st;
    a->o_stride_head = c->o_sh;
    a->batch = s->batch;
    a->num_heads = s->H;
    a->page_size = c->ps_arg;
    a->q_dtype = c->q_dtype;
    a->kv_dtype = c->kv_dtype;
    a->o_dtype = c->o_dtype;
    a->sm_scale = c->sm_scale;
    a->q_scale = c->q_scale;
    a->kv_scale = c->kv_scale;
}

/* o (in the output dtype, strided) as float [T, H, 512] */
static float *dec_gather_o(const dec_setup *s, const void *o) {
    int t, h, d;
    float *g = alloc_f32((int64_t)s->T * s->H * 512);
    for (t = 0; t < s->T; t++)
        for (h = 0; h < s->H; h++)
            for (d = 0; d < 512; d++)
                g[((int64_t)t * s->H + h) * 512 + d] = (float)ref_load(o, t * s->o_st + h * s->o_sh + d, s->ot);
    return g;
}

static void dec_compare(const dec_setup *s, const char *what, const void *o, const float *lse) {
    int64_t n = (int64_t)s->T * s->H * 512, i, empty_bad = 0, pad_bad = 0;
    float *got = dec_gather_o(s, o), *ref = alloc_f32(n);
    unsigned char *mark = (unsigned char *)test_calloc((size_t)s->o_elems + 1);
    int t, h, d;
    for (i = 0; i < n; i++) ref[i] = (float)s->ref_o[i];
    for (t = 0; t < s->T; t++)
        for (h = 0; h < s->H; h++)
            for (d = 0; d < 512; d++) {
                mark[t * s->o_st + h * s->o_sh + d] = 1;
                if (s->row_empty[t] && !(got[((int64_t)t * s->H + h) * 512 + d] == 0.0f)) empty_bad++;
            }
    CHECK(empty_bad == 0, "%s: %lld outputs of rows that see no key are not 0", what, (long long)empty_bad);
    CHECK_CLOSE(what, got, ref, n, TOL_BF16_REL, TOL_BF16_COS);
    for (i = 0; i < s->o_elems; i++)
        if (!mark[i] && !is_poison(o, i, s->ot)) pad_bad++;
    CHECK(pad_bad == 0, "%s: %lld elements between the o strides were written", what, (long long)pad_bad);
    if (lse) {
        int64_t m = (int64_t)s->T * s->H;
        float *rl = alloc_f32(m);
        for (i = 0; i < m; i++) rl[i] = (float)s->ref_lse[i];
        CHECK_LSE(what, lse, rl, m);
        free(rl);
    }
    free(got);
    free(ref);
    free(mark);
}

static void run_decode_case(const dec_case *c) {
    dec_setup s;
    aiter_mla_decode_args a;
    void *o1;
    float *l1;
    aiter_mla_status st;
    int64_t nl, i;
    int ci, b, mql = 1;
    char what[200];
    dec_setup_build(&s, c);
    dec_reference(&s);
    dec_args(&s, &a);
    nl = (int64_t)s.T * s.H;
    o1 = alloc_elems(s.o_elems, s.ot);
    poison_fill(o1, s.o_elems, s.ot);
    l1 = alloc_f32(nl);
    poison_f32(l1, nl);
    a.o = o1;
    a.lse = c->with_lse ? l1 : NULL;
    st = aiter_mla_decode_ref(&a);
    snprintf(what, sizeof what, "decode_ref [%s]", c->name);
    if (CHECK(st == AITER_MLA_OK, "%s returned %s: %s", what, testing_status_name(st), aiter_mla_last_error())) {
        dec_compare(&s, what, o1, c->with_lse ? l1 : NULL);
        if (!c->with_lse) {
            int64_t touched = 0;
            for (i = 0; i < nl; i++)
                if (!is_poison(l1, i, AITER_MLA_F32)) touched++;
            CHECK(touched == 0, "%s: lse buffer written although lse = NULL", what);
        }
    }
    for (b = 0; b < s.batch; b++) mql = imax(mql, c->q_lens[b]);
    for (ci = 0; ci < 3 && c->cus[ci]; ci++) {
        aiter_mla_decode_plan_desc d;
        aiter_mla_decode_plan_info info;
        aiter_mla_decode_args a2;
        int32_t *plan;
        void *ws, *o2;
        float *l2;
        char err[400], what2[240];
        memset(&d, 0, sizeof d);
        d.max_batch = s.batch + 1;
        d.num_heads = s.H;
        d.max_q_len = mql;
        d.num_cu = c->cus[ci];
        d.page_size = c->ps_arg;
        d.kv_granularity = c->kv_gran;
        snprintf(what2, sizeof what2, "decode_ref_scheduled [%s, %d CUs]", c->name, d.num_cu);
        if (!CHECK(aiter_mla_decode_plan_get_info(&d, &info) == AITER_MLA_OK, "%s: get_info: %s", what2,
                   aiter_mla_last_error()))
            continue;
        plan = alloc_i32(info.plan_ints);
        for (i = 0; i < info.plan_ints; i++) plan[i] = 0x5a5a5a5a;
        if (!CHECK(aiter_mla_decode_plan_build(&info, s.qo, s.kvp, s.last, s.batch, plan) == AITER_MLA_OK,
                   "%s: plan_build: %s", what2, aiter_mla_last_error())) {
            free(plan);
            continue;
        }
        CHECK_STATUS(aiter_mla_decode_plan_check(&info, s.qo, s.kvp, s.last, s.batch, plan), AITER_MLA_OK, "");
        CHECK(verify_plan(&info, s.qo, s.kvp, s.last, s.batch, plan, err, sizeof err, NULL) == 0, "%s: plan: %s", what2,
              err);
        g_sched_runs++;
        if (aiter_mla_decode_plan_view_of(&info, plan).num_partials > 0) g_sched_split_runs++;
        ws = test_malloc(info.workspace_bytes);
        poison_f32((float *)ws, (int64_t)(info.workspace_bytes / sizeof(float)));
        o2 = alloc_elems(s.o_elems, s.ot);
        poison_fill(o2, s.o_elems, s.ot);
        l2 = alloc_f32(nl);
        poison_f32(l2, nl);
        a2 = a;
        a2.o = o2;
        a2.lse = c->with_lse ? l2 : NULL;
        a2.plan = plan;
        a2.plan_info = &info;
        a2.workspace = ws;
        a2.workspace_bytes = info.workspace_bytes;
        st = aiter_mla_decode_ref_scheduled(&a2);
        if (CHECK(st == AITER_MLA_OK, "%s returned %s: %s", what2, testing_status_name(st), aiter_mla_last_error())) {
            float *g2, *g1;
            char what3[280];
            dec_compare(&s, what2, o2, c->with_lse ? l2 : NULL);
            /* and against the unscheduled reference's own output */
            g2 = dec_gather_o(&s, o2);
            g1 = dec_gather_o(&s, o1);
            snprintf(what3, sizeof what3, "%s vs decode_ref", what2);
            CHECK_CLOSE(what3, g2, g1, nl * 512, TOL_BF16_REL, TOL_BF16_COS);
            if (c->with_lse) CHECK_LSE(what3, l2, l1, nl);
            free(g1);
            free(g2);
        }
        free(plan);
        free(ws);
        free(o2);
        free(l2);
    }
    free(o1);
    free(l1);
    dec_setup_free(&s);
}

static void test_decode_ref(void) {
    dec_case c;

    c = make_dec_case("bf16 defaults, page 1, H16", 3, 16, 0, AITER_MLA_DTYPE_DEFAULT, AITER_MLA_DTYPE_DEFAULT,
                      AITER_MLA_DTYPE_DEFAULT, 101);
    set_ints(c.q_lens, 3, 1, 1, 1);
    set_ints(c.kv_lens, 3, 37, 0, 200);
    set_ints(c.cus, 2, 3, 132);
    c.kv_gran = 16;
    run_decode_case(&c);

    c = make_dec_case("f16, page 16, causal rows without keys", 4, 8, 16, AITER_MLA_F16, AITER_MLA_F16,
                      AITER_MLA_DTYPE_DEFAULT, 102);
    set_ints(c.q_lens, 4, 2, 3, 1, 4);
    set_ints(c.kv_lens, 4, 1, 2, 50, 130);
    set_ints(c.cus, 2, 3, 80);
    c.kv_gran = 16;
    c.sm_scale = 0.12f;
    run_decode_case(&c);

    c = make_dec_case("bf16 q, e4m3fn cache, strided q/o, page 64", 3, 4, 64, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN,
                      AITER_MLA_BF16, 103);
    set_ints(c.q_lens, 3, 4, 1, 2);
    set_ints(c.kv_lens, 3, 300, 65, 64);
    c.kv_scale = 0.5f;
    c.q_sh = 580;
    c.q_st = 4 * 580 + 37;
    c.o_sh = 520;
    c.o_st = 4 * 520 + 11;
    set_ints(c.cus, 2, 7, 132);
    c.kv_gran = 16;
    run_decode_case(&c);

    c = make_dec_case("bf16 q, e4m3fnuz cache, f32 o, long", 2, 2, 16, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FNUZ,
                      AITER_MLA_F32, 104);
    set_ints(c.q_lens, 2, 1, 2);
    set_ints(c.kv_lens, 2, 2000, 1999);
    c.kv_scale = 2.0f;
    c.sm_scale = 0.09f;
    set_ints(c.cus, 2, 3, 132);
    c.kv_gran = 64;
    run_decode_case(&c);

    c = make_dec_case("f16 q, e4m3fn cache, H1, 2048 keys", 1, 1, 1, AITER_MLA_F16, AITER_MLA_FP8_E4M3FN, AITER_MLA_F16,
                      105);
    set_ints(c.q_lens, 1, 1);
    set_ints(c.kv_lens, 1, 2048);
    c.kv_scale = 0.25f;
    set_ints(c.cus, 2, 132, 3);
    c.kv_gran = 16;
    run_decode_case(&c);

    c = make_dec_case("e4m3fn q and cache, q_scale", 2, 16, 16, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FN,
                      AITER_MLA_DTYPE_DEFAULT, 106);
    set_ints(c.q_lens, 2, 1, 2);
    set_ints(c.kv_lens, 2, 100, 33);
    c.q_scale = 0.5f;
    c.kv_scale = 1.5f;
    set_ints(c.cus, 1, 3);
    c.kv_gran = 16;
    run_decode_case(&c);

    c = make_dec_case("e4m3fnuz q and cache, f16 o", 2, 8, 1, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_FP8_E4M3FNUZ,
                      AITER_MLA_F16, 107);
    set_ints(c.q_lens, 2, 3, 1);
    set_ints(c.kv_lens, 2, 40, 2);
    c.q_scale = 2.0f;
    c.kv_scale = 0.75f;
    set_ints(c.cus, 1, 5);
    c.kv_gran = 16;
    run_decode_case(&c);

    c = make_dec_case("bf16, page ids outside [0, num_pages)", 3, 2, 16, AITER_MLA_BF16, AITER_MLA_BF16, AITER_MLA_BF16,
                      108);
    set_ints(c.q_lens, 3, 1, 2, 1);
    set_ints(c.kv_lens, 3, 100, 40, 20);
    c.bad_pages = 1;
    set_ints(c.cus, 1, 3);
    c.kv_gran = 16;
    run_decode_case(&c);

    c = make_dec_case("bf16, every request empty", 2, 4, 16, AITER_MLA_BF16, AITER_MLA_BF16, AITER_MLA_BF16, 109);
    set_ints(c.q_lens, 2, 1, 3);
    set_ints(c.kv_lens, 2, 0, 0);
    set_ints(c.cus, 1, 3);
    run_decode_case(&c);

    c = make_dec_case("bf16, H128, two tiles", 2, 128, 1, AITER_MLA_BF16, AITER_MLA_BF16, AITER_MLA_BF16, 110);
    set_ints(c.q_lens, 2, 1, 2);
    set_ints(c.kv_lens, 2, 50, 7);
    set_ints(c.cus, 2, 3, 132);
    c.kv_gran = 16;
    run_decode_case(&c);

    c = make_dec_case("bf16 q, e4m3fn cache, H64, q_len 4", 2, 64, 64, AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN,
                      AITER_MLA_BF16, 111);
    set_ints(c.q_lens, 2, 4, 3);
    set_ints(c.kv_lens, 2, 129, 3);
    c.kv_scale = 0.5f;
    set_ints(c.cus, 1, 7);
    c.kv_gran = 16;
    run_decode_case(&c);

    c = make_dec_case("f16, H32, ragged, f32 o, no lse", 4, 32, 64, AITER_MLA_F16, AITER_MLA_F16, AITER_MLA_F32, 112);
    set_ints(c.q_lens, 4, 4, 1, 2, 3);
    set_ints(c.kv_lens, 4, 129, 3, 0, 64);
    c.with_lse = 0;
    set_ints(c.cus, 2, 3, 132);
    c.kv_gran = 16;
    run_decode_case(&c);

    c = make_dec_case("bf16, sharp softmax, no lse", 2, 16, 16, AITER_MLA_BF16, AITER_MLA_BF16, AITER_MLA_BF16, 113);
    set_ints(c.q_lens, 2, 1, 1);
    set_ints(c.kv_lens, 2, 500, 17);
    c.sm_scale = 0.2f;
    c.with_lse = 0;
    set_ints(c.cus, 1, 132);
    run_decode_case(&c);

    c = make_dec_case("bf16 q, e4m3fnuz cache, page 256, q_len 8, H 16", 2, 16, 256, AITER_MLA_BF16,
                      AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_BF16, 114);
    set_ints(c.q_lens, 2, 8, 5);
    set_ints(c.kv_lens, 2, 300, 6);
    c.kv_scale = 0.3f;
    set_ints(c.cus, 2, 3, 132);
    c.kv_gran = 16;
    run_decode_case(&c);

    CHECK(g_sched_runs >= 20, "only %d scheduled replays ran", g_sched_runs);
    CHECK(g_sched_split_runs >= 10, "only %d of %d scheduled replays had split pieces", g_sched_split_runs, g_sched_runs);
}

/* =====================================================================================
 * reduce of split pieces (SPEC 1b)
 * ===================================================================================== */
/* Output rows that overlap are refused: the rule against every small layout, counted
 * element by element, and its messages in the wrappers that take o and lse strides. */
static int naive_rows_overlap(int64_t st, int64_t sh, int64_t heads, int64_t tokens, int64_t len) {
    const int64_t T = tokens < 0 ? 2 : tokens;
    int64_t t1, h1, t2, h2;
    for (t1 = 0; t1 < T; t1++)
        for (h1 = 0; h1 < heads; h1++)
            for (t2 = 0; t2 < T; t2++)
                for (h2 = 0; h2 < heads; h2++) {
                    const int64_t a = t1 * st + h1 * sh, b = t2 * st + h2 * sh;
                    if ((t1 != t2 || h1 != h2) && a < b + len && b < a + len) return 1;
                }
    return 0;
}
static void test_overlapping_rows(void) {
    int64_t st, sh, heads, tokens, len, dt, dh, bad = 0, refused = 0, cases = 0;
    for (len = 1; len <= 6; len += 5)
        for (heads = 1; heads <= 5; heads++)
            for (tokens = -1; tokens <= 5; tokens++)
                for (st = 0; st <= 40; st++)
                    for (sh = 0; sh <= 40; sh++) {
                        const int want = naive_rows_overlap(st, sh, heads, tokens, len);
                        const int got = aiter_mla__rows_overlap(st, sh, heads, tokens, len, &dt, &dh);
                        cases++, refused += got;
                        /* the pair it names overlaps */
                        if (got != want || (got && (llabs(dt * st + dh * sh) >= len || llabs(dt) >= (tokens < 0 ? 2 : tokens) ||
                                                    dh < 0 || dh >= heads)))
                            bad++;
                    }
    CHECK(bad == 0 && refused > 0 && refused < cases, "rows_overlap: %lld of %lld layouts judged wrong (%lld refused)", (long long)bad,
          (long long)cases, (long long)refused);
    { /* large strides: no overflow, nested layouts pass at once */
        CHECK(!aiter_mla__rows_overlap((int64_t)1 << 32, 512, 128, INT32_MAX, 512, &dt, &dh), "token-major, 2^31 tokens");
        CHECK(!aiter_mla__rows_overlap(512, (int64_t)1 << 32, 128, (int64_t)1 << 23, 512, &dt, &dh), "head-major, 2^23 tokens");
        CHECK(aiter_mla__rows_overlap(512, (int64_t)1 << 32, 128, ((int64_t)1 << 23) + 1, 512, &dt, &dh) && dt == -(1 << 23) && dh == 1,
              "head-major, one token past the room: got %lld tokens, %lld heads apart", (long long)dt, (long long)dh);
    }
    { /* the wrappers: decode (T on the device: checked as two tokens), V4 (T known), reduce's lse */
        enum { T = 2, H = 2 };
        static TEST_ALIGN16 uint16_t q[T * H * 576], cache[4 * 576], o[T * H * 512 * 2];
        int32_t qo[2] = {0, 2}, kvp[2] = {0, 3}, kvi[3] = {0, 1, 2}, last[1] = {1};
        int i;
        aiter_mla_decode_args a;
        for (i = 0; i < T * H * 576; i++) q[i] = aiter_mla_f32_to_bf16((float)(i % 7) / 8.0f);
        for (i = 0; i < 4 * 576; i++) cache[i] = aiter_mla_f32_to_bf16((float)(i % 11) / 8.0f);
        memset(&a, 0, sizeof a);
        a.q = q, a.kv_cache = cache, a.num_pages = 4, a.o = o, a.qo_indptr = qo, a.kv_indptr = kvp, a.kv_indices = kvi;
        a.kv_last_page_lens = last, a.batch = 1, a.num_heads = H, a.page_size = 1;
        a.o_stride_token = 512, a.o_stride_head = 512; /* token 0 head 1 on token 1 head 0 */
        CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT,
                     "o_stride_token = 512 and o_stride_head = 512 put the o rows of (token t, head h) and (token t-1, head h+1)");
        CHECK_STATUS(aiter_mla_decode(&a, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_token = 512 and o_stride_head = 512");
        a.o_stride_token = 700, a.o_stride_head = 600; /* partly */
        CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_token = 700 and o_stride_head = 600");
        a.o_stride_token = 1100, a.o_stride_head = 512; /* a gap after each token's rows */
        CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_OK, "");
        a.o_stride_token = 512, a.o_stride_head = 1024; /* head-major with room for two tokens */
        CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_OK, "");
        {
            static TEST_ALIGN16 uint16_t q4[T * H * 512], rows[4 * 512];
            int32_t idx[T * 2] = {0, 1, 2, 3};
            aiter_mla_v4_attention_args v;
            memset(&v, 0, sizeof v);
            for (i = 0; i < T * H * 512; i++) q4[i] = aiter_mla_f32_to_bf16((float)(i % 5) / 8.0f);
            for (i = 0; i < 4 * 512; i++) rows[i] = aiter_mla_f32_to_bf16((float)(i % 3) / 8.0f);
            v.q = q4, v.o = o, v.num_tokens = T, v.num_heads = H;
            v.keys.cache = rows, v.keys.num_blocks = 4, v.keys.rows = 1, v.keys.indices = idx, v.keys.indices_stride = 2;
            v.o_stride_token = 512, v.o_stride_head = 512;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&v), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_token = 512 and o_stride_head = 512");
            v.num_tokens = 1; /* one token: its two heads' rows lie apart */
            CHECK_STATUS(aiter_mla_v4_attention_ref(&v), AITER_MLA_OK, "");
            v.num_tokens = T, v.o_stride_token = 512, v.o_stride_head = 1024;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&v), AITER_MLA_OK, "");
        }
        {
            static TEST_ALIGN16 float po[4 * 2 * 512], pl[4 * 2], lse[8];
            int32_t ri[2] = {0, 2}, fm[2] = {0, 2}, pm[2] = {0, 2};
            aiter_mla_reduce_args r;
            memset(&r, 0, sizeof r);
            r.partial_o = po, r.partial_lse = pl, r.reduce_indptr = ri, r.reduce_final_map = fm, r.reduce_partial_map = pm;
            r.num_tiles = 1, r.num_partial_rows = 4, r.num_heads = 2, r.o = o, r.lse = lse;
            r.lse_stride_token = 1, r.lse_stride_head = 1; /* (row 0, head 1) on (row 1, head 0) */
            CHECK_STATUS(aiter_mla_reduce_ref(&r), AITER_MLA_ERR_INVALID_ARGUMENT, "lse_stride_token = 1 and lse_stride_head = 1 put the lse of (token t, head h) and (token t-1, head h+1)");
            r.lse_stride_head = 2; /* prefill's [H, T] with T = 2 */
            CHECK_STATUS(aiter_mla_reduce_ref(&r), AITER_MLA_OK, "");
            fm[1] = 1, r.lse_stride_head = 1; /* [H, T] with one row: nothing shared */
            CHECK_STATUS(aiter_mla_reduce_ref(&r), AITER_MLA_OK, "");
        }
    }
    { /* three tokens in head-major rows with room for two: the references count every token
       * (token 2's head 0 is token 0's head 1), the GPU wrappers two (T is on the device) */
        enum { T = 3, H = 2 };
        static const char *const named = "put the o rows of (token t, head h) and (token t-2, head h+1)";
        static TEST_ALIGN16 uint16_t q[T * H * 576], cache[3 * 576], o[T * H * 512], k[T * H * 192], v[T * H * 128];
        static TEST_ALIGN16 float po[6 * H * 512], pl[6 * H];
        int32_t qo[2] = {0, T}, kvp[2] = {0, 3}, kvi[3] = {0, 1, 2}, last[1] = {1}, ri[2] = {0, 2}, fm[2] = {0, T}, pm[2] = {0, T};
        int i;
        aiter_mla_decode_plan_desc d;
        aiter_mla_decode_plan_info info;
        aiter_mla_decode_args a;
        aiter_mla_prefill_args f;
        aiter_mla_reduce_args r;
        for (i = 0; i < T * H * 576; i++) q[i] = aiter_mla_f32_to_bf16((float)(i % 7) / 8.0f);
        for (i = 0; i < 3 * 576; i++) cache[i] = aiter_mla_f32_to_bf16((float)(i % 11) / 8.0f);
        memset(&a, 0, sizeof a);
        a.q = q, a.kv_cache = cache, a.num_pages = 3, a.o = o, a.qo_indptr = qo, a.kv_indptr = kvp, a.kv_indices = kvi;
        a.kv_last_page_lens = last, a.batch = 1, a.num_heads = H, a.page_size = 1;
        a.o_stride_token = 512, a.o_stride_head = 1024;
        CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, named);
        memset(&d, 0, sizeof d);
        d.max_batch = 1, d.num_heads = H, d.max_q_len = T, d.page_size = 1, d.num_cu = 2;
        if (CHECK_STATUS(aiter_mla_decode_plan_get_info(&d, &info), AITER_MLA_OK, "")) {
            int32_t *plan = alloc_i32(info.plan_ints);
            void *ws = test_malloc(info.workspace_bytes ? info.workspace_bytes : 1);
            CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, 1, plan), AITER_MLA_OK, "");
            a.plan = plan, a.plan_info = &info, a.workspace = ws, a.workspace_bytes = info.workspace_bytes;
            CHECK_STATUS(aiter_mla_decode_ref_scheduled(&a), AITER_MLA_ERR_INVALID_ARGUMENT, named);
            CHECK_STATUS(aiter_mla_decode(&a, NULL), AITER_MLA_ERR_NO_GPU, "");
            a.o_stride_token = 0, a.o_stride_head = 0; /* the default layout */
            CHECK_STATUS(aiter_mla_decode_ref_scheduled(&a), AITER_MLA_OK, "");
            CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_OK, "");
            free(plan);
            free(ws);
        }
        memset(&f, 0, sizeof f);
        for (i = 0; i < T * H * 192; i++) k[i] = aiter_mla_f32_to_bf16((float)(i % 5) / 8.0f);
        for (i = 0; i < T * H * 128; i++) v[i] = aiter_mla_f32_to_bf16((float)(i % 3) / 8.0f);
        f.q = q, f.k = k, f.v = v, f.cu_seqlens_q = qo, f.cu_seqlens_k = qo, f.o = o, f.batch = 1, f.num_heads = H;
        f.dqk = 192, f.dv = 128, f.max_seqlen_q = T;
        f.o_stride_token = 128, f.o_stride_head = 256;
        CHECK_STATUS(aiter_mla_prefill_ref(&f), AITER_MLA_ERR_INVALID_ARGUMENT, named);
        CHECK_STATUS(aiter_mla_prefill(&f, NULL), AITER_MLA_ERR_NO_GPU, "");
        f.o_stride_head = 384; /* room for three */
        CHECK_STATUS(aiter_mla_prefill_ref(&f), AITER_MLA_OK, "");
        memset(&r, 0, sizeof r);
        r.partial_o = po, r.partial_lse = pl, r.reduce_indptr = ri, r.reduce_final_map = fm, r.reduce_partial_map = pm;
        r.num_tiles = 1, r.num_partial_rows = 6, r.num_heads = H, r.o = o, r.o_stride_token = 512, r.o_stride_head = 1024;
        CHECK_STATUS(aiter_mla_reduce_ref(&r), AITER_MLA_ERR_INVALID_ARGUMENT, named);
        fm[1] = 2; /* two rows fit */
        CHECK_STATUS(aiter_mla_reduce_ref(&r), AITER_MLA_OK, "");
    }
}

static void test_reduce_ref(void) {
    test_rng r = rng_seed(0x7ed);
    static const int tile_tokens[6] = {1, 2, 1, 3, 1, 2};
    static const int tile_pieces[6] = {2, 3, 1, 0, 2, 4};
    const int ntiles = 6, H = 3;
    int variant;
    for (variant = 0; variant < 3; variant++) {
        aiter_mla_dtype ot_arg = variant == 0 ? AITER_MLA_DTYPE_DEFAULT : variant == 1 ? AITER_MLA_F32 : AITER_MLA_F16;
        aiter_mla_dtype ot = ot_arg == AITER_MLA_DTYPE_DEFAULT ? AITER_MLA_BF16 : ot_arg;
        int dv_arg = variant == 0 ? 8 : variant == 1 ? 0 : 16, dv = dv_arg ? dv_arg : 512;
        int64_t o_sh_arg = variant == 2 ? dv + 3 : 0, o_st_arg = variant == 2 ? (int64_t)H * (dv + 3) + 5 : 0;
        int64_t o_sh = o_sh_arg ? o_sh_arg : dv, o_st = o_st_arg ? o_st_arg : (int64_t)H * dv;
        int T = 0, P = 0, npieces = 0, t, k, row, h, d;
        int32_t ri[7], fm[12], pm[16], qs[6];
        float *po, *pl, *lse, *got, *ref, *gl, *rl;
        void *o;
        int64_t n_o, i, cnt = 0, untouched_bad = 0, empty_bad = 0;
        aiter_mla_reduce_args a;
        ri[0] = 0;
        for (t = 0; t < ntiles; t++) {
            qs[t] = T;
            fm[2 * t] = T;
            fm[2 * t + 1] = T + tile_tokens[t];
            T += tile_tokens[t];
            for (k = 0; k < tile_pieces[t]; k++) {
                pm[npieces++] = P;
                P += tile_tokens[t] + 1; /* a spare row between pieces */
            }
            ri[t + 1] = npieces;
        }
        po = alloc_f32((int64_t)P * H * dv);
        pl = alloc_f32((int64_t)P * H);
        for (i = 0; i < (int64_t)P * H * dv; i++) po[i] = rng_f32(&r, -1.0f, 1.0f);
        for (i = 0; i < (int64_t)P * H; i++) pl[i] = rng_f32(&r, -5.0f, 5.0f);
        /* tile 4: every piece empty for every row and head -> o = 0, lse = +inf */
        for (k = ri[4]; k < ri[5]; k++)
            for (h = 0; h < H; h++) pl[(int64_t)pm[k] * H + h] = -INFINITY;
        /* tile 5: piece 1 empty */
        for (row = 0; row < tile_tokens[5]; row++)
            for (h = 0; h < H; h++) pl[(int64_t)(pm[ri[5] + 1] + row) * H + h] = -INFINITY;
        /* tile 0, head 1: piece 0 empty; tile 1, head 0: far-apart lse */
        pl[(int64_t)pm[ri[0]] * H + 1] = -INFINITY;
        pl[(int64_t)pm[ri[1]] * H + 0] = 50.0f;
        pl[(int64_t)pm[ri[1] + 1] * H + 0] = -50.0f;
        pl[(int64_t)pm[ri[1] + 2] * H + 0] = 0.0f;
        n_o = (int64_t)T * o_st;
        o = alloc_elems(n_o, ot);
        poison_fill(o, n_o, ot);
        lse = alloc_f32((int64_t)T * H);
        poison_f32(lse, (int64_t)T * H);
        memset(&a, 0, sizeof a);
        a.partial_o = po;
        a.partial_lse = pl;
        a.reduce_indptr = ri;
        a.reduce_final_map = fm;
        a.reduce_partial_map = pm;
        a.num_tiles = ntiles;
        a.num_partial_rows = P;
        a.num_heads = H;
        a.dv = dv_arg;
        a.o = o;
        a.o_stride_token = o_st_arg;
        a.o_stride_head = o_sh_arg;
        a.lse = lse;
        a.o_dtype = ot_arg;
        if (!CHECK(aiter_mla_reduce_ref(&a) == AITER_MLA_OK, "reduce_ref variant %d: %s", variant, aiter_mla_last_error()))
            goto next;
        got = alloc_f32((int64_t)T * H * dv);
        ref = alloc_f32((int64_t)T * H * dv);
        gl = alloc_f32((int64_t)T * H);
        rl = alloc_f32((int64_t)T * H);
        for (t = 0; t < ntiles; t++) {
            int np = ri[t + 1] - ri[t];
            for (row = 0; row < tile_tokens[t]; row++) {
                int tok = qs[t] + row;
                for (h = 0; h < H; h++) {
                    if (np < 2) { /* not visited: untouched */
                        for (d = 0; d < dv; d++)
                            if (!is_poison(o, tok * o_st + h * o_sh + d, ot)) untouched_bad++;
                        if (!is_poison(lse, (int64_t)tok * H + h, AITER_MLA_F32)) untouched_bad++;
                        continue;
                    }
                    {
                        double m = -INFINITY, sum = 0.0, g;
                        for (k = ri[t]; k < ri[t + 1]; k++) {
                            double l = pl[(int64_t)(pm[k] + row) * H + h];
                            if (l > m) m = l;
                        }
                        if (m == -INFINITY) {
                            for (d = 0; d < dv; d++) {
                                double v = ref_load(o, tok * o_st + h * o_sh + d, ot);
                                if (!(v == 0.0)) empty_bad++;
                            }
                            if (!(lse[(int64_t)tok * H + h] == INFINITY)) empty_bad++;
                            continue;
                        }
                        for (k = ri[t]; k < ri[t + 1]; k++) sum += exp(pl[(int64_t)(pm[k] + row) * H + h] - m);
                        g = m + log(sum);
                        for (d = 0; d < dv; d++) {
                            double acc = 0.0;
                            for (k = ri[t]; k < ri[t + 1]; k++) {
                                int64_t pr = pm[k] + row;
                                acc += exp(pl[pr * H + h] - g) * po[(pr * H + h) * dv + d];
                            }
                            got[cnt] = (float)ref_load(o, tok * o_st + h * o_sh + d, ot);
                            ref[cnt] = (float)acc;
                            cnt++;
                        }
                        gl[(int64_t)tok * H + h] = lse[(int64_t)tok * H + h];
                        rl[(int64_t)tok * H + h] = (float)g;
                    }
                }
            }
        }
        {
            char what[80];
            int64_t nl = 0;
            snprintf(what, sizeof what, "reduce_ref variant %d (dtype %d, dv %d)", variant, (int)ot, dv);
            CHECK(untouched_bad == 0, "%s: %lld elements of tiles with < 2 pieces were written", what, (long long)untouched_bad);
            CHECK(empty_bad == 0, "%s: %lld values of all-empty rows are not o = 0 / lse = +inf", what, (long long)empty_bad);
            if (ot == AITER_MLA_F32) CHECK_CLOSE(what, got, ref, cnt, 1e-5, 0.999999);
            else CHECK_CLOSE(what, got, ref, cnt, TOL_BF16_REL, TOL_BF16_COS);
            /* compact the lse pairs that were filled */
            for (t = 0; t < ntiles; t++) {
                if (ri[t + 1] - ri[t] < 2 || t == 4) continue;
                for (row = 0; row < tile_tokens[t]; row++)
                    for (h = 0; h < H; h++) {
                        int64_t ix = (int64_t)(qs[t] + row) * H + h;
                        gl[nl] = gl[ix];
                        rl[nl] = rl[ix];
                        nl++;
                    }
            }
            CHECK_LSE(what, gl, rl, nl);
        }
        free(got);
        free(ref);
        free(gl);
        free(rl);
    next:
        if (variant == 0) {
            aiter_mla_reduce_args b = a;
            b.num_heads = 0;
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
            b.num_heads = 65536;
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
            b = a;
            b.empty_lse_neg_inf = 2;
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "empty_lse_neg_inf");
            b = a;
            b.o_dtype = AITER_MLA_FP8_E4M3FN;
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_UNSUPPORTED, "o_dtype");
            b = a;
            b.partial_o = NULL;
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_NULL_POINTER, "partial_o");
            b = a;
            b.num_tiles = -1;
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tiles");
            b = a;
            b.dv = -1;
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "dv");
            /* o or lse over the maps the loop follows after its first writes */
            b = a;
            b.o = (void *)a.reduce_final_map;
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "o overlaps");
            b = a;
            b.lse = (float *)a.reduce_partial_map;
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "lse overlaps");
            /* indices the reduce would follow are checked before any write */
            b = a;
            b.num_partial_rows = P - 2; /* the last piece ends at row P - 1 */
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "num_partial_rows");
            b = a;
            b.o_stride_head = -512;
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_head");
            b = a;
            b.o_stride_token = 0;
            b.o_stride_head = (int64_t)1 << 32; /* within 2^32, but not num_heads times it */
            if (b.num_heads < 2) b.num_heads = 2;  /* refused before anything is read */
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_token = 0 means");
            b.o_stride_head = 3; /* heads' rows 3 apart: they overlap */
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_head = 3 is below");
            b.o_stride_head = 0;
            b.o_stride_token = 1; /* tokens' rows 1 apart */
            CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_token = 1 is below");
            {
                int32_t bad_fm[2 * 8], bad_pm[64], bad_ri[9];
                memcpy(bad_fm, fm, sizeof(int32_t) * 2 * ntiles);
                memcpy(bad_pm, pm, sizeof(int32_t) * npieces);
                memcpy(bad_ri, ri, sizeof(int32_t) * (ntiles + 1));
                b = a;
                b.reduce_final_map = bad_fm;
                bad_fm[0] = -5;
                CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "reduce_final_map");
                b = a;
                b.reduce_partial_map = bad_pm;
                bad_pm[0] = -1;
                CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "reduce_partial_map");
                b = a;
                b.reduce_indptr = bad_ri;
                bad_ri[1] = bad_ri[2] + 1;
                CHECK_STATUS(aiter_mla_reduce_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "reduce_indptr decreases");
            }
        }
        if (variant == 1) SWEEP(reduce_ref, a, sweep_reduce_fields); /* f32 o: the widest element */
        free(po);
        free(pl);
        free(o);
        free(lse);
    }
}

/* =====================================================================================
 * merge of attention states (SPEC 2a)
 * ===================================================================================== */
static void test_merge_ref(void) {
    test_rng r = rng_seed(0x3e26e);
    int variant;
    for (variant = 0; variant < 4; variant++) {
        aiter_mla_dtype dt_arg = variant == 0 ? AITER_MLA_DTYPE_DEFAULT : variant == 1 ? AITER_MLA_F16
                                                                      : variant == 2 ? AITER_MLA_F32
                                                                                     : AITER_MLA_BF16;
        aiter_mla_dtype dt = dt_arg == AITER_MLA_DTYPE_DEFAULT ? AITER_MLA_BF16 : dt_arg;
        int T = 7, H = 3, D = variant == 2 ? 512 : 16, t, h, d, with_lse = variant != 3;
        int64_t n = (int64_t)T * H * D, i, exact_bad = 0;
        void *op = alloc_elems(n, dt), *os = alloc_elems(n, dt), *o = alloc_elems(n, dt);
        /* lp and ls have room after their H x T values for an o or lse placed on them (below):
           that output then overlaps that lse alone, whatever the allocator puts next */
        float *lp = alloc_f32((int64_t)H * T + n), *ls = alloc_f32((int64_t)H * T + n), *lo = alloc_f32((int64_t)H * T);
        float *got = alloc_f32(n), *ref = alloc_f32(n), *rl = alloc_f32((int64_t)H * T);
        aiter_mla_merge_args a;
        char what[80];
        snprintf(what, sizeof what, "merge_ref variant %d (dtype %d, D %d)", variant, (int)dt, D);
        fill_random(op, n, dt, &r, -1.0f, 1.0f, 1.0f);
        fill_random(os, n, dt, &r, -1.0f, 1.0f, 1.0f);
        for (i = 0; i < (int64_t)H * T; i++) {
            lp[i] = rng_f32(&r, -4.0f, 4.0f);
            ls[i] = rng_f32(&r, -4.0f, 4.0f);
        }
#define LIX(hh, tt) ((int64_t)(hh) * T + (tt))
        lp[LIX(0, 0)] = INFINITY;                              /* prefix empty (+inf counts as -inf) */
        ls[LIX(0, 1)] = INFINITY;                              /* suffix empty */
        lp[LIX(1, 2)] = -INFINITY, ls[LIX(1, 2)] = -INFINITY;  /* both empty */
        lp[LIX(1, 3)] = INFINITY, ls[LIX(1, 3)] = INFINITY;    /* both empty */
        lp[LIX(2, 4)] = -INFINITY, ls[LIX(2, 4)] = INFINITY;   /* both empty */
        lp[LIX(2, 5)] = -INFINITY;                             /* prefix empty */
        lp[LIX(0, 6)] = 80.0f, ls[LIX(0, 6)] = -80.0f;         /* far apart */
        poison_fill(o, n, dt);
        poison_f32(lo, (int64_t)H * T);
        memset(&a, 0, sizeof a);
        a.o_prefix = op;
        a.lse_prefix = lp;
        a.o_suffix = os;
        a.lse_suffix = ls;
        a.o = o;
        a.lse = with_lse ? lo : NULL;
        a.num_tokens = T;
        a.num_heads = H;
        a.head_dim = D;
        a.dtype = dt_arg;
        if (CHECK(aiter_mla_merge_attn_states_ref(&a) == AITER_MLA_OK, "%s: %s", what, aiter_mla_last_error())) {
            for (t = 0; t < T; t++)
                for (h = 0; h < H; h++) {
                    double x = lp[LIX(h, t)], y = ls[LIX(h, t)], m, wp, ws;
                    if (x == INFINITY) x = -INFINITY;
                    if (y == INFINITY) y = -INFINITY;
                    m = x > y ? x : y;
                    for (d = 0; d < D; d++) {
                        int64_t e = ((int64_t)t * H + h) * D + d;
                        double vp = ref_load(op, e, dt), vs = ref_load(os, e, dt), want;
                        got[e] = (float)ref_load(o, e, dt);
                        if (m == -INFINITY) want = 0.0;
                        else {
                            wp = exp(x - m);
                            ws = exp(y - m);
                            want = (wp * vp + ws * vs) / (wp + ws);
                            /* one side empty: the other side, exactly */
                            if (x == -INFINITY && !(got[e] == (float)vs)) exact_bad++;
                            if (y == -INFINITY && !(got[e] == (float)vp)) exact_bad++;
                        }
                        if (m == -INFINITY && !(got[e] == 0.0f)) exact_bad++;
                        ref[e] = (float)want;
                    }
                    if (m == -INFINITY) rl[LIX(h, t)] = -INFINITY;
                    else rl[LIX(h, t)] = (float)(m + log(exp(x - m) + exp(y - m)));
                }
            CHECK(exact_bad == 0, "%s: %lld outputs with an empty side are not exactly the other side (or 0)", what,
                  (long long)exact_bad);
            if (dt == AITER_MLA_F32) CHECK_CLOSE(what, got, ref, n, 1e-5, 0.999999);
            else CHECK_CLOSE(what, got, ref, n, TOL_BF16_REL, TOL_BF16_COS);
            if (with_lse) CHECK_LSE(what, lo, rl, (int64_t)H * T);
            else {
                int64_t touched = 0;
                for (i = 0; i < (int64_t)H * T; i++)
                    if (!is_poison(lo, i, AITER_MLA_F32)) touched++;
                CHECK(touched == 0, "%s: lse written although NULL", what);
            }
        }
#undef LIX
        { /* o in place of one side (a running merge; the prefix in odd variants): the same bits */
            const size_t bytes = (size_t)n * aiter_mla_dtype_size(dt);
            void *io = alloc_elems(n, dt);
            aiter_mla_merge_args b = a;
            memcpy(io, variant & 1 ? op : os, bytes);
            if (variant & 1) b.o_prefix = io;
            else b.o_suffix = io;
            b.o = io;
            b.lse = NULL;
            if (CHECK(aiter_mla_merge_attn_states_ref(&b) == AITER_MLA_OK, "%s in place: %s", what, aiter_mla_last_error()))
                CHECK(memcmp(io, o, bytes) == 0, "%s: o in place of %s differs", what, variant & 1 ? "o_prefix" : "o_suffix");
            free(io);
        }
        if (variant == 0) {
            aiter_mla_merge_args b = a;
            b.num_heads = 0;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
            b = a;
            b.head_dim = 0;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "head_dim");
            b = a;
            b.num_tokens = -1;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
            b = a;
            b.dtype = AITER_MLA_FP8_E4M3FN;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_UNSUPPORTED, "dtype");
            b = a;
            b.o = NULL;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_NULL_POINTER, "o");
            b = a;
            b.lse_prefix = NULL;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_NULL_POINTER, "lse_prefix");
            /* overlaps the kernels would race on: o across an input (not on it), lse on an
             * input's lse or on o; refused before anything is read */
            b = a;
            b.o = (char *)os + aiter_mla_dtype_size(dt);
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "o_suffix");
            b = a;
            b.o = (char *)op + (size_t)(n - 1) * aiter_mla_dtype_size(dt); /* its first element on the last */
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "o_prefix");
            b = a;
            b.lse = ls;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "lse_suffix");
            b = a;
            b.lse = lp + (int64_t)H * T - 1;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "lse_prefix");
            b = a;
            b.lse = (float *)o;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "lse overlaps o");
            b = a; /* lse over an o input's last bytes: its rows would change under later reads */
            b.lse = (float *)((char *)op + (size_t)n * aiter_mla_dtype_size(dt) - sizeof(float));
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "o_prefix");
            b = a;
            b.lse = (float *)((char *)os + (size_t)n * aiter_mla_dtype_size(dt) - sizeof(float));
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "o_suffix");
            b = a; /* o over an input's lse (its lse may still be read after o's first rows are written) */
            b.o = ls;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "lse_suffix");
            b = a;
            b.o = lp + (int64_t)H * T - 1;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "lse_prefix");
            b = a; /* an lse buffer of its own */
            b.lse = lo;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&b), AITER_MLA_OK, "");
        }
        free(op);
        free(os);
        free(o);
        free(lp);
        free(ls);
        free(lo);
        free(got);
        free(ref);
        free(rl);
    }
}

/* =====================================================================================
 * KV cache write (SPEC 3)
 * ===================================================================================== */
static void test_kv_cache_write(void) {
    test_rng r = rng_seed(0xcac4e);
    static const struct {
        aiter_mla_dtype src, cache;
        float scale;
        int block_size, strided;
    } cases[] = {
        {AITER_MLA_BF16, AITER_MLA_BF16, 0.0f, 16, 1},
        {AITER_MLA_F16, AITER_MLA_F16, 0.0f, 1, 0},
        {AITER_MLA_BF16, AITER_MLA_FP8_E4M3FN, 0.5f, 16, 1},
        {AITER_MLA_BF16, AITER_MLA_FP8_E4M3FNUZ, 2.0f, 16, 0},
        {AITER_MLA_F16, AITER_MLA_FP8_E4M3FN, 0.25f, 0, 1},
        {AITER_MLA_DTYPE_DEFAULT, AITER_MLA_DTYPE_DEFAULT, 0.0f, 16, 0},
        {AITER_MLA_F16, AITER_MLA_FP8_E4M3FNUZ, 0.0f, 8, 1},
    };
    int ci;
    for (ci = 0; ci < ARRAY_LEN(cases); ci++) {
        aiter_mla_dtype src = cases[ci].src ? cases[ci].src : AITER_MLA_BF16;
        aiter_mla_dtype cdt = cases[ci].cache ? cases[ci].cache : src;
        int bs = cases[ci].block_size ? cases[ci].block_size : 1, nb = bs == 1 ? 48 : 48 / bs;
        int64_t nslots = (int64_t)nb * bs, ntok = 24, tok, i;
        int64_t cst = cases[ci].strided ? 520 : 512, pst = cases[ci].strided ? 70 : 64;
        float scale = cases[ci].scale != 0.0f ? cases[ci].scale : 1.0f;
        size_t ces = test_dtype_bytes(cdt), ses = test_dtype_bytes(src);
        void *kvc = alloc_elems(ntok * cst, src), *kpe = alloc_elems(ntok * pst, src);
        unsigned char *cache = (unsigned char *)test_malloc((size_t)nslots * 576 * ces);
        int64_t slots[24];
        int32_t perm[48];
        unsigned char *written = (unsigned char *)test_calloc((size_t)nslots);
        int64_t bad = 0, untouched_bad = 0;
        aiter_mla_kv_cache_write_args a;
        fill_random(kvc, ntok * cst, src, &r, -3.0f, 3.0f, 1.0f);
        fill_random(kpe, ntok * pst, src, &r, -3.0f, 3.0f, 1.0f);
        /* values that saturate fp8 (after / scale) */
        aiter_mla_store_f32(kvc, 0, src, 1000.0f);
        aiter_mla_store_f32(kvc, 1, src, -1000.0f);
        aiter_mla_store_f32(kvc, 2, src, 300.0f);
        aiter_mla_store_f32(kpe, 3, src, -250.0f);
        aiter_mla_store_f32(kvc, cst + 5, src, 1e-4f);
        memset(cache, 0xA5, (size_t)nslots * 576 * ces);
        for (i = 0; i < nslots; i++) perm[i] = (int32_t)i;
        rng_shuffle_i32(&r, perm, (int)nslots);
        for (tok = 0; tok < ntok; tok++) slots[tok] = perm[tok];
        slots[3] = -1;
        slots[7] = nslots;
        slots[11] = 1000000;
        slots[15] = -2;
        slots[19] = (int64_t)1 << 40;
        memset(&a, 0, sizeof a);
        a.kv_c = kvc;
        a.kv_c_stride = cases[ci].strided ? cst : 0;
        a.k_pe = kpe;
        a.k_pe_stride = cases[ci].strided ? pst : 0;
        a.slot_mapping = slots;
        a.kv_cache = cache;
        a.num_blocks = nb;
        a.block_size = cases[ci].block_size;
        a.num_tokens = ntok;
        a.src_dtype = cases[ci].src;
        a.cache_dtype = cases[ci].cache;
        a.scale = cases[ci].scale;
        if (CHECK(aiter_mla_kv_cache_write_ref(&a) == AITER_MLA_OK, "kv_cache_write case %d: %s", ci,
                  aiter_mla_last_error())) {
            for (tok = 0; tok < ntok; tok++) {
                int64_t s = slots[tok];
                int d;
                if (s < 0 || s >= nslots) continue;
                written[s] = 1;
                for (d = 0; d < 576; d++) {
                    const void *sp = d < 512 ? kvc : kpe;
                    int64_t si = d < 512 ? tok * cst + d : tok * pst + (d - 512);
                    const unsigned char *cp = cache + ((size_t)s * 576 + (size_t)d) * ces;
                    if (dtype_is_fp8(cdt)) {
                        int alt, want;
                        float x = (float)ref_load(sp, si, src);
                        want = ref_f32_to_fp8((float)((double)x / scale), cdt == AITER_MLA_FP8_E4M3FNUZ, &alt);
                        if (cp[0] != want && cp[0] != alt) bad++;
                    } else if (cdt == src) {
                        if (memcmp(cp, (const unsigned char *)sp + (size_t)si * ses, ses)) bad++;
                    }
                }
            }
            for (i = 0; i < nslots * 576 * (int64_t)ces; i++)
                if (!written[i / (576 * (int64_t)ces)] && cache[i] != 0xA5) untouched_bad++;
            CHECK(bad == 0, "kv_cache_write case %d (src %d -> cache %d, scale %g): %lld elements wrong", ci, (int)src,
                  (int)cdt, (double)scale, (long long)bad);
            CHECK(untouched_bad == 0, "kv_cache_write case %d: %lld bytes of unaddressed slots changed", ci,
                  (long long)untouched_bad);
        }
        if (ci == 0) {
            aiter_mla_kv_cache_write_args b = a;
            CHECK_STATUS(aiter_mla_kv_cache_write(&a, NULL), AITER_MLA_ERR_NO_GPU, "");
            SWEEP(kv_cache_write, a, sweep_kv_write_fields);
            CACHE_BYTES_CASES(kv_cache_write, b, a, kv_cache_bytes, nslots * 576 * (int64_t)ces, "kv_cache_bytes");
            b = a; /* fp8 rows described as bf16: twice the bytes the cache holds */
            b.cache_dtype = AITER_MLA_BF16;
            b.kv_cache_bytes = (size_t)nslots * 576;
            CHECK_STATUS(aiter_mla_kv_cache_write_ref(&b), AITER_MLA_ERR_BUFFER_TOO_SMALL, "kv_cache_bytes");
            CHECK_STATUS(aiter_mla_kv_cache_write(&b, NULL), AITER_MLA_ERR_BUFFER_TOO_SMALL, "kv_cache_bytes");
            b = a;
            b.kv_cache = (void *)a.slot_mapping; /* refused before any write, by both */
            CHECK_STATUS(aiter_mla_kv_cache_write_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_cache overlaps slot_mapping");
            CHECK_STATUS(aiter_mla_kv_cache_write(&b, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_cache overlaps slot_mapping");
            b = a;
            b.cache_dtype = AITER_MLA_F32;
            CHECK_STATUS(aiter_mla_kv_cache_write_ref(&b), AITER_MLA_ERR_UNSUPPORTED, "cache_dtype");
            CHECK_STATUS(aiter_mla_kv_cache_write(&b, NULL), AITER_MLA_ERR_UNSUPPORTED, "cache_dtype");
            b = a;
            b.src_dtype = AITER_MLA_FP8_E4M3FN;
            CHECK_STATUS(aiter_mla_kv_cache_write_ref(&b), AITER_MLA_ERR_UNSUPPORTED, "src_dtype");
            b.src_dtype = AITER_MLA_F32;
            CHECK_STATUS(aiter_mla_kv_cache_write_ref(&b), AITER_MLA_ERR_UNSUPPORTED, "src_dtype");
            b = a;
            b.kv_c = NULL;
            CHECK_STATUS(aiter_mla_kv_cache_write_ref(&b), AITER_MLA_ERR_NULL_POINTER, "kv_c");
            b = a;
            b.k_pe = NULL;
            CHECK_STATUS(aiter_mla_kv_cache_write_ref(&b), AITER_MLA_ERR_NULL_POINTER, "k_pe");
            b = a;
            b.slot_mapping = NULL;
            CHECK_STATUS(aiter_mla_kv_cache_write_ref(&b), AITER_MLA_ERR_NULL_POINTER, "slot_mapping");
            b = a;
            b.kv_cache = NULL;
            CHECK_STATUS(aiter_mla_kv_cache_write_ref(&b), AITER_MLA_ERR_NULL_POINTER, "kv_cache");
            b = a;
            b.num_blocks = 0;
            CHECK_STATUS(aiter_mla_kv_cache_write_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "num_blocks");
            b = a;
            b.num_tokens = -1;
            CHECK_STATUS(aiter_mla_kv_cache_write_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
            b = a;
            b.block_size = -2;
            CHECK_STATUS(aiter_mla_kv_cache_write_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
            b = a; /* each in range, their product past int64 once times the row's 576 values */
            b.num_blocks = INT64_MAX / (1 << 20);
            b.block_size = 1 << 16;
            CHECK_STATUS(aiter_mla_kv_cache_write_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "num_blocks * block_size");
        }
        free(kvc);
        free(kpe);
        free(cache);
        free(written);
    }
}

/* =====================================================================================
 * decode argument validation
 * ===================================================================================== */
static void test_decode_validation(void) {
    dec_case c = make_dec_case("validation base", 3, 16, 16, AITER_MLA_BF16, AITER_MLA_BF16, AITER_MLA_BF16, 201);
    dec_setup s;
    aiter_mla_decode_args base, a;
    aiter_mla_decode_plan_desc d;
    aiter_mla_decode_plan_info info;
    int32_t *plan;
    void *ws, *o;
    float *lse;
    set_ints(c.q_lens, 3, 1, 1, 1);
    set_ints(c.kv_lens, 3, 20, 5, 7);
    dec_setup_build(&s, &c);
    memset(&d, 0, sizeof d);
    d.max_batch = 2;
    d.num_heads = 16;
    d.max_q_len = 1;
    d.num_cu = 4;
    d.page_size = 16;
    if (!CHECK(aiter_mla_decode_plan_get_info(&d, &info) == AITER_MLA_OK, "get_info: %s", aiter_mla_last_error())) {
        dec_setup_free(&s);
        return;
    }
    plan = alloc_i32(info.plan_ints);
    CHECK_STATUS(aiter_mla_decode_plan_build(&info, s.qo, s.kvp, s.last, 2, plan), AITER_MLA_OK, "");
    ws = test_malloc(info.workspace_bytes);
    o = alloc_elems(s.o_elems, s.ot);
    lse = alloc_f32((int64_t)s.T * s.H);
    dec_args(&s, &base);
    base.batch = 2;
    base.o = o;
    base.lse = lse;
    base.plan = plan;
    base.plan_info = &info;
    base.workspace = ws;
    base.workspace_bytes = info.workspace_bytes;
    CHECK(info.workspace_bytes > 0, "validation plan has no workspace (needs num_cu > 1)");

    CHECK_OUT_OF_MEMORY(aiter_mla_decode_ref_scheduled(&base));
    CHECK_OUT_OF_MEMORY(aiter_mla_decode_plan_check(&info, base.qo_indptr, base.kv_indptr, base.kv_last_page_lens, base.batch, plan));
    CHECK_STATUS(aiter_mla_decode_plan_check(&info, base.qo_indptr, base.kv_indptr, base.kv_last_page_lens, 1, plan),
                 AITER_MLA_ERR_PLAN_INVALID, "batch 2 (info"); /* what it was built for, then what it was called with */
    CHECK(strstr(aiter_mla_last_error(), "; called with batch 1)") != NULL, "plan_check names the batch it was called with: %s",
          aiter_mla_last_error());
    CHECK_STATUS(aiter_mla_decode_ref(&base), AITER_MLA_OK, "");
    CHECK_STATUS(aiter_mla_decode_ref_scheduled(&base), AITER_MLA_OK, "");
    CHECK_STATUS(aiter_mla_decode(&base, NULL), AITER_MLA_ERR_NO_GPU, "");
    CHECK_KERNEL_LIKE_CALL(decode, &base);
    SWEEP(decode, base, sweep_decode_fields);
    SWEEP(decode_plan_get_info, d, sweep_decode_desc_fields);
    CACHE_BYTES_CASES(decode, a, base, kv_cache_bytes, base.num_pages * base.page_size * 576 * 2, "kv_cache_bytes");
    a = base; /* the same bytes read as fp8 rows fit; an fp8 cache's bytes read as bf16 rows do not */
    a.kv_dtype = AITER_MLA_FP8_E4M3FN;
    a.kv_cache_bytes = (size_t)(base.num_pages * base.page_size * 576);
    CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_OK, "");
    a.kv_dtype = AITER_MLA_DTYPE_DEFAULT;
    CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_ERR_BUFFER_TOO_SMALL, "kv_cache_bytes");
    CHECK_STATUS(aiter_mla_decode(&a, NULL), AITER_MLA_ERR_BUFFER_TOO_SMALL, "kv_cache_bytes");
    CHECK_STATUS(aiter_mla_decode_kernel(&base, NULL), AITER_MLA_ERR_NULL_POINTER, "kernel");
    CHECK_STATUS(aiter_mla_prefill_kernel(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "kernel");
    CHECK_STATUS(aiter_mla_sparse_attention_kernel(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "kernel");
    CHECK_STATUS(aiter_mla_v4_attention_kernel(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "kernel");

#define DEC_CASE(fn, mutate, status, field) \
    do {                                    \
        a = base;                           \
        mutate;                             \
        CHECK_STATUS(fn, status, field);    \
        CHECK_KERNEL_LIKE_CALL(decode, &a); \
    } while (0)
    /* pointers */
    DEC_CASE(aiter_mla_decode_ref(&a), a.q = NULL, AITER_MLA_ERR_NULL_POINTER, "q");
    DEC_CASE(aiter_mla_decode_ref(&a), a.kv_cache = NULL, AITER_MLA_ERR_NULL_POINTER, "kv_cache");
    DEC_CASE(aiter_mla_decode_ref(&a), a.o = NULL, AITER_MLA_ERR_NULL_POINTER, "o");
    DEC_CASE(aiter_mla_decode_ref(&a), a.qo_indptr = NULL, AITER_MLA_ERR_NULL_POINTER, "qo_indptr");
    DEC_CASE(aiter_mla_decode_ref(&a), a.kv_indptr = NULL, AITER_MLA_ERR_NULL_POINTER, "kv_indptr");
    DEC_CASE(aiter_mla_decode_ref(&a), a.kv_indices = NULL, AITER_MLA_ERR_NULL_POINTER, "kv_indices");
    DEC_CASE(aiter_mla_decode_ref(&a), a.kv_last_page_lens = NULL, AITER_MLA_ERR_NULL_POINTER, "kv_last_page_lens");
    /* every array at its elements' alignment (a 2-byte value at an odd address faults on the GPU) */
    DEC_CASE(aiter_mla_decode_ref(&a), a.q = (const char *)a.q + 1, AITER_MLA_ERR_INVALID_ARGUMENT, "q is not 2-byte aligned");
    DEC_CASE(aiter_mla_decode_ref(&a), a.kv_cache = (const char *)a.kv_cache + 1, AITER_MLA_ERR_INVALID_ARGUMENT,
             "kv_cache is not 2-byte aligned");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.o = (char *)a.o + 1, AITER_MLA_ERR_INVALID_ARGUMENT, "o is not 2-byte aligned");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.lse = (float *)((char *)a.lse + 2), AITER_MLA_ERR_INVALID_ARGUMENT,
             "lse is not 4-byte aligned");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.kv_indices = (const int32_t *)((const char *)a.kv_indices + 2),
             AITER_MLA_ERR_INVALID_ARGUMENT, "kv_indices is not 4-byte aligned");
    DEC_CASE(aiter_mla_decode(&a, NULL), (a.q_dtype = a.kv_dtype = AITER_MLA_FP8_E4M3FN, a.q = (const char *)a.q + 1),
             AITER_MLA_ERR_NO_GPU, ""); /* fp8 q: bytes */
    DEC_CASE(aiter_mla_decode_ref_scheduled(&a), a.workspace = (char *)a.workspace + 2, AITER_MLA_ERR_INVALID_ARGUMENT,
             "workspace is not 4-byte aligned"); /* fp32 partials (refused before any write) */
    DEC_CASE(aiter_mla_decode_ref(&a), a.plan = (int32_t *)((char *)a.plan + 2), AITER_MLA_OK, ""); /* not read, not checked */
    /* outputs over the arrays the references read after their first writes */
    DEC_CASE(aiter_mla_decode_ref(&a), a.lse = (float *)s.last, AITER_MLA_ERR_INVALID_ARGUMENT, "lse overlaps");
    DEC_CASE(aiter_mla_decode_ref(&a), a.o = s.kvi, AITER_MLA_ERR_INVALID_ARGUMENT, "o overlaps");
    DEC_CASE(aiter_mla_decode_ref(&a), a.o = (void *)a.q, AITER_MLA_ERR_INVALID_ARGUMENT, "o overlaps q"); /* not in place */
    DEC_CASE(aiter_mla_decode_ref_scheduled(&a), a.lse = (float *)a.q, AITER_MLA_ERR_INVALID_ARGUMENT, "lse overlaps q");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.o = (void *)a.q, AITER_MLA_ERR_NO_GPU, ""); /* q's extent is on the device */
    DEC_CASE(aiter_mla_decode_ref_scheduled(&a), a.workspace = plan, AITER_MLA_ERR_INVALID_ARGUMENT, "workspace overlaps");
    /* the GPU call: its partials and the plan's counters against the arrays the host can size */
    DEC_CASE(aiter_mla_decode(&a, NULL), a.workspace = s.kvp, AITER_MLA_ERR_INVALID_ARGUMENT, "workspace overlaps");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.plan = s.last, AITER_MLA_ERR_INVALID_ARGUMENT, "plan overlaps");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.workspace = s.cache, AITER_MLA_ERR_INVALID_ARGUMENT, "workspace overlaps kv_cache");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.plan = (int32_t *)s.cache + 3, AITER_MLA_ERR_INVALID_ARGUMENT, "plan overlaps kv_cache");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.q = NULL, AITER_MLA_ERR_NULL_POINTER, "q");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.o = NULL, AITER_MLA_ERR_NULL_POINTER, "o");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.qo_indptr = NULL, AITER_MLA_ERR_NULL_POINTER, "qo_indptr");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.kv_indptr = NULL, AITER_MLA_ERR_NULL_POINTER, "kv_indptr");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.kv_indices = NULL, AITER_MLA_ERR_NULL_POINTER, "kv_indices");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.kv_last_page_lens = NULL, AITER_MLA_ERR_NULL_POINTER, "kv_last_page_lens");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.kv_cache = NULL, AITER_MLA_ERR_NULL_POINTER, "kv_cache");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.plan = NULL, AITER_MLA_ERR_NULL_POINTER, "plan");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.plan_info = NULL, AITER_MLA_ERR_NULL_POINTER, "plan_info");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.workspace = NULL, AITER_MLA_ERR_NULL_POINTER, "workspace");
    DEC_CASE(aiter_mla_decode_ref_scheduled(&a), a.plan = NULL, AITER_MLA_ERR_NULL_POINTER, "plan");
    DEC_CASE(aiter_mla_decode_ref_scheduled(&a), a.plan_info = NULL, AITER_MLA_ERR_NULL_POINTER, "plan_info");
    /* integers out of range */
    DEC_CASE(aiter_mla_decode_ref(&a), a.num_heads = 0, AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    DEC_CASE(aiter_mla_decode_ref(&a), a.num_heads = 129, AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.num_heads = 129, AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    DEC_CASE(aiter_mla_decode_ref(&a), a.page_size = 24, AITER_MLA_ERR_INVALID_ARGUMENT, "page_size");
    DEC_CASE(aiter_mla_decode_ref(&a), a.page_size = 512, AITER_MLA_ERR_INVALID_ARGUMENT, "page_size");
    DEC_CASE(aiter_mla_decode_ref(&a), a.num_pages = 0, AITER_MLA_ERR_INVALID_ARGUMENT, "num_pages = 0 is below 1");
    DEC_CASE(aiter_mla_decode_ref(&a), a.batch = 0, AITER_MLA_ERR_INVALID_ARGUMENT, "batch = 0 is below 1");
    DEC_CASE(aiter_mla_decode_ref(&a), a.num_heads = 0, AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads = 0 is outside 1..128");
    /* dtypes */
    DEC_CASE(aiter_mla_decode_ref(&a), (a.q_dtype = AITER_MLA_FP8_E4M3FN, a.kv_dtype = AITER_MLA_BF16),
             AITER_MLA_ERR_UNSUPPORTED, "kv_dtype");
    DEC_CASE(aiter_mla_decode_ref(&a), a.kv_dtype = AITER_MLA_F16, AITER_MLA_ERR_UNSUPPORTED, "kv_dtype");
    DEC_CASE(aiter_mla_decode_ref(&a), a.kv_dtype = AITER_MLA_F32, AITER_MLA_ERR_UNSUPPORTED, "kv_dtype");
    DEC_CASE(aiter_mla_decode_ref(&a), (a.q_dtype = AITER_MLA_F16, a.kv_dtype = AITER_MLA_BF16),
             AITER_MLA_ERR_UNSUPPORTED, "kv_dtype");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.kv_dtype = AITER_MLA_F32, AITER_MLA_ERR_UNSUPPORTED, "kv_dtype");
    DEC_CASE(aiter_mla_decode_ref(&a), a.o_dtype = AITER_MLA_FP8_E4M3FN, AITER_MLA_ERR_UNSUPPORTED, "o_dtype");
    DEC_CASE(aiter_mla_decode_ref(&a), a.o_dtype = AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_ERR_UNSUPPORTED, "o_dtype");
    DEC_CASE(aiter_mla_decode_ref(&a), (a.q_dtype = AITER_MLA_F32, a.kv_dtype = AITER_MLA_F32), AITER_MLA_ERR_UNSUPPORTED,
             "q_dtype");
    /* indptr / last page lengths */
    {
        int32_t q2[4] = {0, 2, 1, 3}, k2[4] = {0, 2, 1, 3}, l2[3] = {16, 0, 7}, l3[3] = {16, 17, 7};
        memcpy(l2, s.last, sizeof(int32_t) * 3);
        l2[0] = 0;
        memcpy(l3, s.last, sizeof(int32_t) * 3);
        l3[0] = 17;
        DEC_CASE(aiter_mla_decode_ref(&a), a.qo_indptr = q2, AITER_MLA_ERR_INVALID_ARGUMENT,
                 "qo_indptr decreases: qo_indptr[2] = 1 < qo_indptr[1] = 2");
        DEC_CASE(aiter_mla_decode_ref(&a), a.kv_indptr = k2, AITER_MLA_ERR_INVALID_ARGUMENT,
                 "kv_indptr decreases: kv_indptr[2] = 1 < kv_indptr[1] = 2");
        DEC_CASE(aiter_mla_decode_ref(&a), a.kv_last_page_lens = l2, AITER_MLA_ERR_INVALID_ARGUMENT, "kv_last_page_lens");
        DEC_CASE(aiter_mla_decode_ref(&a), a.kv_last_page_lens = l3, AITER_MLA_ERR_INVALID_ARGUMENT,
                 "another page_size?"); /* 17 over pages of 16: a page size up to 256 could have made it */
    }
    /* host index arrays at their alignment before their first read (reading a misaligned
     * int32_t * is undefined behaviour, which aborts this binary under UBSan), ahead of the rules
     * on their contents; the scheduled reference names them as its own, not within the plan's
     * check, and the planner holds its output plan to the same */
    {
        const size_t plan_bytes = (size_t)info.plan_ints * sizeof(int32_t);
        char *buf = (char *)test_malloc(plan_bytes + 1);
        const int32_t k2[3] = {0, 2, 1}; /* decreases */
        DEC_CASE(aiter_mla_decode_ref(&a), a.qo_indptr = (const int32_t *)misaligned_copy(buf, s.qo, 3 * sizeof(int32_t)),
                 AITER_MLA_ERR_INVALID_ARGUMENT, "decode_ref: qo_indptr is not 4-byte aligned");
        DEC_CASE(aiter_mla_decode_ref(&a), a.kv_indptr = (const int32_t *)misaligned_copy(buf, s.kvp, 3 * sizeof(int32_t)),
                 AITER_MLA_ERR_INVALID_ARGUMENT, "decode_ref: kv_indptr is not 4-byte aligned");
        DEC_CASE(aiter_mla_decode_ref(&a), a.kv_last_page_lens = (const int32_t *)misaligned_copy(buf, s.last, 2 * sizeof(int32_t)),
                 AITER_MLA_ERR_INVALID_ARGUMENT, "decode_ref: kv_last_page_lens is not 4-byte aligned");
        DEC_CASE(aiter_mla_decode_ref(&a), a.kv_indptr = (const int32_t *)misaligned_copy(buf, k2, sizeof k2),
                 AITER_MLA_ERR_INVALID_ARGUMENT, "decode_ref: kv_indptr is not 4-byte aligned");
        DEC_CASE(aiter_mla_decode_ref_scheduled(&a), a.qo_indptr = (const int32_t *)misaligned_copy(buf, s.qo, 3 * sizeof(int32_t)),
                 AITER_MLA_ERR_INVALID_ARGUMENT, "decode_ref_scheduled: qo_indptr is not 4-byte aligned");
        DEC_CASE(aiter_mla_decode_ref_scheduled(&a),
                 a.kv_last_page_lens = (const int32_t *)misaligned_copy(buf, s.last, 2 * sizeof(int32_t)),
                 AITER_MLA_ERR_INVALID_ARGUMENT, "decode_ref_scheduled: kv_last_page_lens is not 4-byte aligned");
        DEC_CASE(aiter_mla_decode_ref_scheduled(&a), a.plan = (int32_t *)misaligned_copy(buf, plan, plan_bytes),
                 AITER_MLA_ERR_INVALID_ARGUMENT, "decode_ref_scheduled: plan is not 4-byte aligned");
        CHECK_STATUS(aiter_mla_decode_plan_check(&info, (const int32_t *)misaligned_copy(buf, s.qo, 3 * sizeof(int32_t)), s.kvp,
                                                 s.last, 2, plan),
                     AITER_MLA_ERR_INVALID_ARGUMENT, "decode_plan_check: qo_indptr is not 4-byte aligned");
        CHECK_STATUS(aiter_mla_decode_plan_check(&info, s.qo, s.kvp, s.last, 2, (const int32_t *)misaligned_copy(buf, plan, plan_bytes)),
                     AITER_MLA_ERR_INVALID_ARGUMENT, "decode_plan_check: plan is not 4-byte aligned");
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, s.qo, (const int32_t *)misaligned_copy(buf, k2, sizeof k2), s.last, 2, plan),
                     AITER_MLA_ERR_INVALID_ARGUMENT, "decode_plan_build: kv_indptr is not 4-byte aligned");
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, s.qo, s.kvp, s.last, 2, (int32_t *)(void *)(buf + 1)),
                     AITER_MLA_ERR_INVALID_ARGUMENT, "decode_plan_build: plan is not 4-byte aligned"); /* written, not read */
        CHECK_STATUS(aiter_mla_decode_plan_check(&info, s.qo, s.kvp, s.last, 2, plan), AITER_MLA_OK, ""); /* left as built */
        free(buf);
    }
    /* plan disagreements and workspace */
    DEC_CASE(aiter_mla_decode(&a, NULL), a.workspace_bytes = info.workspace_bytes - 1, AITER_MLA_ERR_BUFFER_TOO_SMALL,
             "workspace_bytes");
    DEC_CASE(aiter_mla_decode_ref_scheduled(&a), a.workspace_bytes = info.workspace_bytes - 1,
             AITER_MLA_ERR_BUFFER_TOO_SMALL, "workspace_bytes");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.num_heads = 8, AITER_MLA_ERR_PLAN_MISMATCH, "num_heads");
    DEC_CASE(aiter_mla_decode_ref_scheduled(&a), a.num_heads = 8, AITER_MLA_ERR_PLAN_MISMATCH, "num_heads");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.batch = 3, AITER_MLA_ERR_PLAN_MISMATCH, "batch");
    DEC_CASE(aiter_mla_decode_ref_scheduled(&a), a.batch = 3, AITER_MLA_ERR_PLAN_MISMATCH, "batch");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.page_size = 1, AITER_MLA_ERR_PLAN_MISMATCH, "page_size");
    DEC_CASE(aiter_mla_decode_ref_scheduled(&a), a.page_size = 64, AITER_MLA_ERR_PLAN_MISMATCH, "page_size");
    /* the plain reference neither reads nor checks the plan's fields */
    DEC_CASE(aiter_mla_decode_ref(&a), a.num_heads = 8, AITER_MLA_OK, "");
    DEC_CASE(aiter_mla_decode_ref(&a), (a.plan = NULL, a.plan_info = NULL, a.workspace = NULL, a.workspace_bytes = 0), AITER_MLA_OK, "");
    /* the scales that apply make one fp32 score factor: bounded like each scale */
    DEC_CASE(aiter_mla_decode_ref(&a), (a.kv_dtype = AITER_MLA_FP8_E4M3FN, a.sm_scale = 1e16f, a.kv_scale = 1e16f),
             AITER_MLA_ERR_INVALID_ARGUMENT, "sm_scale x kv_scale");
    DEC_CASE(aiter_mla_decode(&a, NULL), (a.kv_dtype = AITER_MLA_FP8_E4M3FN, a.sm_scale = 1e16f, a.kv_scale = 1e16f),
             AITER_MLA_ERR_INVALID_ARGUMENT, "sm_scale x kv_scale");
    DEC_CASE(aiter_mla_decode_ref(&a),
             (a.q_dtype = a.kv_dtype = AITER_MLA_FP8_E4M3FN, a.sm_scale = 1e10f, a.q_scale = 1e10f, a.kv_scale = 1e10f),
             AITER_MLA_ERR_INVALID_ARGUMENT, "sm_scale x q_scale x kv_scale");
    DEC_CASE(aiter_mla_decode(&a, NULL), (a.sm_scale = 1e16f, a.q_scale = 1e16f, a.kv_scale = 1e16f), AITER_MLA_ERR_NO_GPU,
             ""); /* bf16: neither q_scale nor kv_scale applies */
    /* each scale alone: positive and below 1e30 (bf16, where no product bound applies) */
    DEC_CASE(aiter_mla_decode_ref(&a), a.sm_scale = INFINITY, AITER_MLA_ERR_INVALID_ARGUMENT, "sm_scale");
    DEC_CASE(aiter_mla_decode_ref(&a), a.sm_scale = 1e30f, AITER_MLA_ERR_INVALID_ARGUMENT, "sm_scale");
    DEC_CASE(aiter_mla_decode(&a, NULL), a.sm_scale = FLT_MAX, AITER_MLA_ERR_INVALID_ARGUMENT, "sm_scale");
    DEC_CASE(aiter_mla_decode_ref(&a), a.kv_scale = INFINITY, AITER_MLA_ERR_INVALID_ARGUMENT, "kv_scale");
    DEC_CASE(aiter_mla_decode_ref(&a), a.sm_scale = 9.9e29f, AITER_MLA_OK, "");
#undef DEC_CASE
    free(plan);
    free(ws);
    free(o);
    free(lse);
    dec_setup_free(&s);
}

/* =====================================================================================
 * hardening: tampered plan info, overflowing slots, misaligned workspace
 * ===================================================================================== */
/* A prefill plan for two requests of up to 64 query tokens, in tiles and KV units of 16. */
static aiter_mla_prefill_plan_desc small_prefill_plan_desc(int num_heads, int num_cu) {
    aiter_mla_prefill_plan_desc d;
    memset(&d, 0, sizeof d);
    d.max_batch = 2;
    d.max_q_tokens = 64;
    d.num_heads = num_heads;
    d.num_cu = num_cu;
    d.tile_q = 16;
    d.kv_granularity = 16;
    return d;
}

/* A plan builder zeroes its plan before it reads the lengths again: lengths inside the plan
 * buffer would change under it (a million tiles from two requests), so they are refused. */
static void test_plan_build_overlap(void) {
    {
        aiter_mla_decode_plan_desc d;
        aiter_mla_decode_plan_info info;
        int32_t kvp[3] = {0, 1, 2}, last[2] = {1, 1}, *plan, *qo;
        memset(&d, 0, sizeof d);
        d.max_batch = 2;
        d.num_heads = 16;
        d.max_q_len = 1;
        d.num_cu = 4;
        CHECK_STATUS(aiter_mla_decode_plan_get_info(&d, &info), AITER_MLA_OK, "");
        plan = alloc_i32(info.plan_ints + 1);
        qo = plan + info.plan_ints - 2; /* qo_indptr's first two entries are the plan's last two */
        qo[0] = 1000000;
        qo[1] = 1000001;
        qo[2] = 1000002;
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, 2, plan), AITER_MLA_ERR_INVALID_ARGUMENT,
                     "plan overlaps qo_indptr");
        CHECK(qo[0] == 1000000 && qo[1] == 1000001, "decode plan build wrote its plan before refusing it");
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, kvp, kvp, last, 2, plan + 1), AITER_MLA_OK, "");
        free(plan);
    }
    {
        const aiter_mla_prefill_plan_desc d = small_prefill_plan_desc(1, 4);
        aiter_mla_prefill_plan_info info;
        int32_t ck[3] = {0, 16, 32}, *plan, *cq;
        CHECK_STATUS(aiter_mla_prefill_plan_get_info(&d, &info), AITER_MLA_OK, "");
        plan = alloc_i32(info.plan_ints + 1);
        cq = plan + info.plan_ints - 2;
        cq[0] = 100000000;
        cq[1] = 100000016;
        cq[2] = 100000032;
        CHECK_STATUS(aiter_mla_prefill_plan_build(&info, cq, ck, 2, 0, plan), AITER_MLA_ERR_INVALID_ARGUMENT,
                     "plan overlaps cu_seqlens_q");
        CHECK_STATUS(aiter_mla_prefill_plan_build(&info, ck, cq, 2, 0, plan), AITER_MLA_ERR_INVALID_ARGUMENT,
                     "plan overlaps cu_seqlens_k");
        CHECK(cq[0] == 100000000 && cq[1] == 100000016, "prefill plan build wrote its plan before refusing it");
        CHECK_STATUS(aiter_mla_prefill_plan_build(&info, ck, ck, 2, 0, plan), AITER_MLA_OK, "");
        free(plan);
    }
}

static void test_hardening(void) {
    aiter_mla_decode_plan_desc d;
    aiter_mla_decode_plan_info info, bad;
    int32_t qo[3] = {0, 1, 2}, kvp[3] = {0, 3, 5}, last[2] = {1, 1}, *plan;
    memset(&d, 0, sizeof d);
    d.max_batch = 2;
    d.num_heads = 16;
    d.max_q_len = 1;
    d.num_cu = 65536; /* a list per CU can be a grid's y dimension: at most 65535 */
    CHECK_STATUS(aiter_mla_decode_plan_get_info(&d, &info), AITER_MLA_ERR_INVALID_ARGUMENT, "num_cu");
    d.num_cu = 4;
    CHECK_STATUS(aiter_mla_decode_plan_get_info(&d, &info), AITER_MLA_OK, "");
    plan = (int32_t *)test_malloc((size_t)info.plan_ints * sizeof(int32_t));
    /* an info changed after get_info is refused, whatever field changed */
    bad = info;
    bad.desc.kv_granularity = 0;
    CHECK_STATUS(aiter_mla_decode_plan_build(&bad, qo, kvp, last, 2, plan), AITER_MLA_ERR_PLAN_MISMATCH, "plan_info.desc.kv_granularity");
    bad = info;
    bad.max_reduce_tiles += 100;
    CHECK_STATUS(aiter_mla_decode_plan_build(&bad, qo, kvp, last, 2, plan), AITER_MLA_ERR_PLAN_MISMATCH, "plan_info.max_reduce_tiles");
    bad = info;
    bad.desc.num_cu = 8; /* the sizes no longer fit the desc */
    CHECK_STATUS(aiter_mla_decode_plan_build(&bad, qo, kvp, last, 2, plan), AITER_MLA_ERR_PLAN_MISMATCH, "plan_info.num_lists");
    bad = info;
    bad.off_work_info += 1;
    CHECK_STATUS(aiter_mla_decode_plan_check(&bad, qo, kvp, last, 2, plan), AITER_MLA_ERR_PLAN_MISMATCH, "plan_info.off_work_info");
    bad = info;
    bad.desc.num_heads = 0; /* a desc get_info refuses: its own rule, named */
    CHECK_STATUS(aiter_mla_decode_plan_check(&bad, qo, kvp, last, 2, plan), AITER_MLA_ERR_INVALID_ARGUMENT, "plan_info.desc is not valid");
    CHECK(strstr(aiter_mla_last_error(), "num_heads") != NULL, "invalid desc: %s", aiter_mla_last_error());
    /* kv_indptr that would overflow a subtraction is rejected as not monotone */
    {
        int32_t kv_bad[3] = {0, 5, INT32_MIN};
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kv_bad, last, 2, plan), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_indptr");
    }
    CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, 2, plan), AITER_MLA_OK, "");
    /* the GPU wrapper refuses a misaligned workspace (validation runs before ERR_NO_GPU) */
    {
        aiter_mla_decode_args a;
        TEST_ALIGN16 uint16_t q[2 * 16 * 576], cache[8 * 576 + 8], o[2 * 16 * 512];
        int32_t idx[5] = {0, 1, 2, 3, 4};
        char *ws = (char *)test_malloc(info.workspace_bytes + 32); /* the plan's size, room to misalign */
        memset(&a, 0, sizeof a);
        a.q = q;
        a.kv_cache = (void *)(((uintptr_t)cache + 15) & ~(uintptr_t)15);
        a.num_pages = 7;
        a.qo_indptr = qo;
        a.kv_indptr = kvp;
        a.kv_indices = idx;
        a.kv_last_page_lens = last;
        a.o = o;
        a.plan = plan;
        a.plan_info = &info;
        a.workspace = (char *)(((uintptr_t)ws + 15) & ~(uintptr_t)15) + 4;
        a.workspace_bytes = info.workspace_bytes;
        a.batch = 2;
        a.num_heads = 16;
        CHECK(info.workspace_bytes > 0, "the plan splits (its partials need a workspace)");
        CHECK_STATUS(aiter_mla_decode(&a, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "workspace");
        CHECK_KERNEL_LIKE_CALL(decode, &a);
        a.workspace = (void *)(((uintptr_t)ws + 15) & ~(uintptr_t)15);
        a.kv_cache = (char *)a.kv_cache + 2; /* bf16-aligned, not 16-byte aligned */
        CHECK_STATUS(aiter_mla_decode(&a, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_cache");
        CHECK_KERNEL_LIKE_CALL(decode, &a);
        a.kv_cache = (void *)(((uintptr_t)cache + 15) & ~(uintptr_t)15);
        CHECK_STATUS(aiter_mla_decode(&a, NULL), AITER_MLA_ERR_NO_GPU, "AITER_MLA_NO_GPU");
        CHECK_KERNEL_LIKE_CALL(decode, &a);
        a.q_stride_token = (int64_t)1 << 40;
        CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "q_stride_token");
        /* head strides within 2^32 whose default token strides (16 x them) are not */
        a.q_stride_token = 0;
        a.q_stride_head = (int64_t)1 << 32;
        CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "q_stride_token = 0 means");
        CHECK_STATUS(aiter_mla_decode(&a, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "q_stride_token = 0 means");
        CHECK_KERNEL_LIKE_CALL(decode, &a);
        a.q_stride_head = 0;
        a.o_stride_head = (int64_t)1 << 32;
        CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_token = 0 means");
        /* o rows that overlap: heads' rows closer than 512, tokens' rows closer than 512 */
        a.o_stride_head = 1;
        CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_head = 1 is below");
        CHECK_STATUS(aiter_mla_decode(&a, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_head = 1 is below");
        a.o_stride_head = 0;
        a.o_stride_token = 100;
        CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_token = 100 is below");
        a.o_stride_token = 0;
        /* a plan header's counts beyond its capacities, by name */
        {
            const int32_t keep = plan[AITER_MLA__PH_NUM_PARTIALS];
            CHECK_STATUS(aiter_mla_decode_plan_check(&info, qo, kvp, last, 2, plan), AITER_MLA_OK, "");
            plan[AITER_MLA__PH_NUM_PARTIALS] = info.max_partials + 1;
            CHECK_STATUS(aiter_mla_decode_plan_check(&info, qo, kvp, last, 2, plan), AITER_MLA_ERR_PLAN_INVALID, "max_partials");
            plan[AITER_MLA__PH_NUM_PARTIALS] = keep;
        }
        free(ws);
    }
    /* a slot that does not fit int32 expands to -1, not to an overflowed value */
    {
        aiter_mla_expand_page_indices_args e;
        int32_t bt[2] = {16777216, 3}, cu[2] = {0, 300}, sl[1] = {300}, out[300];
        memset(&e, 0, sizeof e);
        e.block_table = bt;
        e.block_table_stride = 2;
        e.cu_num_tokens = cu;
        e.seq_lens = sl;
        e.page_indices = out;
        e.page_indices_capacity = 300;
        e.batch = 1;
        e.kernel_block_size = 256;
        CHECK_STATUS(aiter_mla_expand_page_indices_ref(&e), AITER_MLA_OK, "");
        CHECK(out[0] == -1 && out[255] == -1, "slot 16777216 * 256 must expand to -1, got %d", out[0]);
        CHECK(out[256] == 3 * 256 && out[299] == 3 * 256 + 43, "block 3 must expand normally, got %d", out[256]);
    }
    { /* query rows at the top of the int32 range: the planner's tiles step without overflow */
        aiter_mla_decode_plan_desc dt = d;
        aiter_mla_decode_plan_info it;
        int32_t qt[2] = {INT32_MAX - 1, INT32_MAX}, kt[2] = {0, 1}, lt[1] = {1}, *pt;
        dt.max_q_len = 8; /* tiles of 4 rows at 16 heads */
        dt.num_cu = 1;
        CHECK_STATUS(aiter_mla_decode_plan_get_info(&dt, &it), AITER_MLA_OK, "");
        pt = (int32_t *)test_calloc((size_t)it.plan_ints * sizeof(int32_t));
        CHECK_STATUS(aiter_mla_decode_plan_build(&it, qt, kt, lt, 1, pt), AITER_MLA_OK, "");
        CHECK_STATUS(aiter_mla_decode_plan_check(&it, qt, kt, lt, 1, pt), AITER_MLA_OK, "");
        free(pt);
        /* a request of more keys than int32 holds: the message names kv_indptr */
        kt[1] = 1 << 24;
        dt.page_size = 256;
        CHECK_STATUS(aiter_mla_decode_plan_get_info(&dt, &it), AITER_MLA_OK, "");
        pt = (int32_t *)test_calloc((size_t)it.plan_ints * sizeof(int32_t));
        CHECK_STATUS(aiter_mla_decode_plan_build(&it, qt, kt, lt, 1, pt), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_indptr");
        free(pt);
    }
    { /* a prefill plan whose split piece claims partial row INT32_MAX is refused, not overflowed */
        const aiter_mla_prefill_plan_desc pd = small_prefill_plan_desc(2, 3);
        aiter_mla_prefill_plan_info pi;
        int32_t cq[3] = {0, 20, 50}, ck[3] = {0, 40, 100}, *pp, w, corrupted = 0;
        CHECK_STATUS(aiter_mla_prefill_plan_get_info(&pd, &pi), AITER_MLA_OK, "");
        pp = (int32_t *)test_calloc((size_t)pi.plan_ints * sizeof(int32_t));
        CHECK_STATUS(aiter_mla_prefill_plan_build(&pi, cq, ck, 2, 1, pp), AITER_MLA_OK, "");
        for (w = 0; w < pi.max_work && !corrupted; w++) {
            int32_t *wi = pp + pi.off_work_info + (int64_t)w * AITER_MLA_WORK_INTS;
            if (wi[1] >= 0) {
                wi[1] = INT32_MAX;
                corrupted = 1;
            }
        }
        CHECK(corrupted, "the prefill plan of this shape must split a tile");
        CHECK_STATUS(aiter_mla_prefill_plan_check(&pi, cq, ck, 2, 1, pp), AITER_MLA_ERR_PLAN_INVALID, "");
        free(pp);
    }
    { /* a non-monotone reduce_indptr is refused before any piece past the map's end is read
         (the map is exactly reduce_indptr[num_tiles] entries, so ASan would see that read) */
        int32_t *ri = (int32_t *)test_malloc(3 * sizeof(int32_t)), *fm = (int32_t *)test_malloc(4 * sizeof(int32_t)),
                *pm = (int32_t *)test_malloc(4 * sizeof(int32_t));
        TEST_ALIGN16 float po[6 * 2 * 8] = {0}, pl[6 * 2] = {0}, lse[3 * 2];
        TEST_ALIGN16 uint16_t o[3 * 2 * 8];
        aiter_mla_reduce_args ra;
        ri[0] = 0, ri[1] = 100, ri[2] = 4;
        fm[0] = 0, fm[1] = 1, fm[2] = 1, fm[3] = 3;
        pm[0] = 0, pm[1] = 1, pm[2] = 2, pm[3] = 4;
        memset(&ra, 0, sizeof ra);
        ra.partial_o = po;
        ra.partial_lse = pl;
        ra.reduce_indptr = ri;
        ra.reduce_final_map = fm;
        ra.reduce_partial_map = pm;
        ra.num_tiles = 2;
        ra.num_partial_rows = 6;
        ra.num_heads = 2;
        ra.dv = 8;
        ra.o = o;
        ra.lse = lse;
        CHECK_STATUS(aiter_mla_reduce_ref(&ra), AITER_MLA_ERR_INVALID_ARGUMENT,
                     "reduce_ref: reduce_indptr decreases: reduce_indptr[2] = 4 < reduce_indptr[1] = 100");
        { /* the maps at their alignment before their first read (UBSan aborts this binary on a
             misaligned int32_t * read), ahead of the rules on their contents */
            char *buf = (char *)test_malloc(4 * sizeof(int32_t) + 1);
            const int32_t *bad_ri = (const int32_t *)misaligned_copy(buf, ri, 3 * sizeof(int32_t));
            aiter_mla_reduce_args rb = ra;
            rb.reduce_indptr = bad_ri; /* still decreasing */
            CHECK_STATUS(aiter_mla_reduce_ref(&rb), AITER_MLA_ERR_INVALID_ARGUMENT, "reduce_ref: reduce_indptr is not 4-byte aligned");
            ri[1] = 2; /* now sound: the only fault left is the alignment */
            CHECK_STATUS(aiter_mla_reduce_ref(&ra), AITER_MLA_OK, "");
            rb = ra;
            rb.reduce_indptr = (const int32_t *)misaligned_copy(buf, ri, 3 * sizeof(int32_t));
            CHECK_STATUS(aiter_mla_reduce_ref(&rb), AITER_MLA_ERR_INVALID_ARGUMENT, "reduce_ref: reduce_indptr is not 4-byte aligned");
            rb = ra;
            rb.reduce_final_map = (const int32_t *)misaligned_copy(buf, fm, 4 * sizeof(int32_t));
            CHECK_STATUS(aiter_mla_reduce_ref(&rb), AITER_MLA_ERR_INVALID_ARGUMENT,
                         "reduce_ref: reduce_final_map is not 4-byte aligned");
            rb = ra;
            rb.reduce_partial_map = (const int32_t *)misaligned_copy(buf, pm, 4 * sizeof(int32_t));
            CHECK_STATUS(aiter_mla_reduce_ref(&rb), AITER_MLA_ERR_INVALID_ARGUMENT,
                         "reduce_ref: reduce_partial_map is not 4-byte aligned");
            free(buf);
        }
        free(ri);
        free(fm);
        free(pm);
    }
    free(plan);
}

/* =====================================================================================
 * sparse index conversion, filter_prefill_indices, base-2 lse (SPEC 4)
 * ===================================================================================== */
/* the expected slot, written out case by case */
static int32_t naive_sparse_slot(int32_t idx, int32_t req, int nreq, const int32_t *bt, int64_t bt_stride, int bs,
                                 const int32_t *starts) {
    int64_t v;
    if (idx < 0) return -1;
    if (req < 0) return -1;
    if (req >= nreq) return -1;
    if (bt == NULL) {
        v = (int64_t)starts[req] + (int64_t)idx;
    } else {
        int64_t which = (int64_t)idx / bs;
        if (which >= bt_stride) return -1;
        if (bt[(int64_t)req * bt_stride + which] < 0) return -1;
        v = (int64_t)bt[(int64_t)req * bt_stride + which] * bs + (int64_t)(idx % bs);
    }
    if (v < 0 || v > 2147483647LL) return -1;
    return (int32_t)v;
}

/* The slot arithmetic at the edge of int32 (the 32-bit form's q and rem), block sizes that
 * divide INT32_MAX + 1 and ones that do not, against the definition in 64 bits. */
static void test_expand_one_edges(void) {
    static const int ks[] = {1, 2, 3, 7, 64, 100, 256, 1 << 20, 1000003, INT32_MAX};
    int ki, ii, ri, b;
    for (ki = 0; ki < (int)(sizeof ks / sizeof ks[0]); ki++) {
        const int k = ks[ki];
        const int32_t q = INT32_MAX / k, rem = INT32_MAX % k;
        const int32_t ids[] = {0, 1, q - 1, q, q < INT32_MAX ? q + 1 : q, INT32_MAX, -1, INT32_MIN};
        const int32_t rs[] = {0, rem, rem + 1 < k ? rem + 1 : rem, k - 1};
        for (ii = 0; ii < 8; ii++)
            for (ri = 0; ri < 4; ri++)
                for (b = 0; b < 3; b++) { /* blocks 0 and 1 of a row of 2, and position -1 */
                    const int32_t row[2] = {b == 1 ? 5 : ids[ii], b == 1 ? ids[ii] : 5};
                    const int64_t t64 = b == 2 ? -1 : (int64_t)b * k + rs[ri];
                    int64_t want;
                    int32_t got;
                    if (t64 > INT32_MAX) continue;
                    got = aiter_mla__expand_one(row, 2, (int32_t)t64, k);
                    want = t64 < 0 || ids[ii] < 0 ? -1 : (int64_t)ids[ii] * k + t64 % k;
                    if (want > INT32_MAX) want = -1;
                    CHECK(got == want, "expand_one k=%d id=%d t=%lld: %d, want %lld", k, ids[ii], (long long)t64, got, (long long)want);
                }
    }
    {   /* past the row (block 2 of 2) and a row longer than any reachable block */
        const int32_t row[3] = {4, 6, 8};
        CHECK(aiter_mla__expand_one(row, 2, 2 * 64, 64) == -1, "block 2 of a row of 2");
        CHECK(aiter_mla__expand_one(row, (int64_t)1 << 40, 2 * 64 + 5, 64) == 8 * 64 + 5, "a row of 2^40 entries");
    }
}

static void test_sparse_indices(void) {
    static const int topks[] = {1, 63, 64, 2048}, bss[] = {1, 64, 100};
    test_rng r = rng_seed(0x5a5e01);
    int iter, valid_by_topk[4] = {0, 0, 0, 0}; /* the draws' valid entries over each top-k's 12 cases */
    for (iter = 0; iter < 48; iter++) {
        const int topk = topks[iter % 4], bs = bss[(iter / 4) % 3], prefill = (iter / 12) % 2;
        const int nreq = rng_int(&r, 1, 6), T = topk >= 2048 ? 3 : rng_int(&r, 1, 40), width = rng_int(&r, 1, 9);
        const int64_t in_stride = topk + (iter % 3), out_stride = topk + (iter % 2) * 5;
        int32_t *idx = (int32_t *)test_malloc(sizeof(int32_t) * (size_t)(T * in_stride));
        int32_t *out = (int32_t *)test_malloc(sizeof(int32_t) * (size_t)(T * out_stride));
        int32_t *bt = (int32_t *)test_malloc(sizeof(int32_t) * (size_t)(nreq * width)), starts[6], req[40], counts[40];
        aiter_mla_sparse_index_args a;
        int t, i, bad = 0, bad_count = 0, nvalid = 0;
        for (i = 0; i < nreq * width; i++) bt[i] = rng_int(&r, 0, 9) == 0 ? -1 : rng_int(&r, 0, 5000);
        if (iter == 5) bt[0] = 40000000; /* 40000000 * 64 is past int32: -1 */
        for (i = 0; i < nreq; i++) starts[i] = rng_int(&r, 0, 100000);
        for (t = 0; t < T; t++) req[t] = rng_int(&r, 0, 19) == 0 ? (rng_int(&r, 0, 1) ? -1 : nreq) : rng_int(&r, 0, nreq - 1);
        for (i = 0; i < T * in_stride; i++) idx[i] = rng_int(&r, 0, 6) == 0 ? -1 : rng_int(&r, 0, (width + 1) * bs);
        for (i = 0; i < T * out_stride; i++) out[i] = 0x5a5a5a5a;
        memset(&a, 0, sizeof a);
        a.indices = idx;
        a.indices_stride = in_stride;
        a.req_id = req;
        a.block_table = prefill ? NULL : bt;
        a.block_table_stride = width;
        a.block_size = bs;
        a.workspace_starts = starts;
        a.num_requests = nreq;
        a.num_tokens = T;
        a.topk = topk;
        a.out = out;
        a.out_stride = out_stride;
        a.valid_counts = counts;
        if (!CHECK(aiter_mla_convert_sparse_indices_ref(&a) == AITER_MLA_OK, "convert iter %d: %s", iter, aiter_mla_last_error()))
            goto next;
        for (t = 0; t < T; t++) {
            int c = 0;
            for (i = 0; i < topk; i++) {
                int32_t want = naive_sparse_slot(idx[t * in_stride + i], req[t], nreq, prefill ? NULL : bt, width, bs, starts);
                bad += out[t * out_stride + i] != want;
                c += want >= 0;
            }
            for (i = topk; i < out_stride; i++) bad += out[t * out_stride + i] != 0x5a5a5a5a; /* padding untouched */
            bad_count += counts[t] != c;
            nvalid += c;
        }
        CHECK(bad == 0, "convert iter %d (topk %d, bs %d, %s): %d entries differ", iter, topk, bs, prefill ? "prefill" : "decode", bad);
        CHECK(bad_count == 0, "convert iter %d: %d valid counts differ", iter, bad_count);
        valid_by_topk[iter % 4] += nvalid;
    next:
        free(idx);
        free(out);
        free(bt);
    }
    /* a single case may draw no valid entry (top-k 1, few tokens); a top-k's twelve may not */
    for (iter = 0; iter < 4; iter++)
        CHECK(valid_by_topk[iter] > 0, "convert, top-k %d: no valid entry in any case (test too weak)", topks[iter]);
    /* filter_prefill_indices */
    for (iter = 0; iter < 8; iter++) {
        const int nreq = 3, T = 17, topk = 33;
        int32_t idx[17 * 33], ctxo[17 * 33], newo[17 * 33], req[17], ctx[3] = {0, 5, 40};
        aiter_mla_filter_prefill_args f;
        int t, i, bad = 0;
        for (t = 0; t < T; t++) req[t] = t == 3 ? 7 : rng_int(&r, 0, nreq - 1);
        for (i = 0; i < T * topk; i++) idx[i] = rng_int(&r, 0, 5) == 0 ? -1 : rng_int(&r, 0, 80);
        memset(&f, 0, sizeof f);
        f.indices = idx;
        f.req_id = req;
        f.ctx_lens = ctx;
        f.num_requests = nreq;
        f.num_tokens = T;
        f.topk = topk;
        f.context_out = ctxo;
        f.new_out = newo;
        CHECK_STATUS(aiter_mla_filter_prefill_indices_ref(&f), AITER_MLA_OK, "");
        for (t = 0; t < T; t++)
            for (i = 0; i < topk; i++) {
                int32_t v = idx[t * topk + i], c = req[t] < nreq ? ctx[req[t]] : -1, wc = -1, wn = -1;
                if (v >= 0 && c >= 0) {
                    if (v < c) wc = v;
                    else wn = v - c;
                }
                bad += ctxo[t * topk + i] != wc || newo[t * topk + i] != wn;
            }
        CHECK(bad == 0, "filter_prefill_indices iter %d: %d entries differ", iter, bad);
    }
    /* base-2 lse */
    {
        float l[4] = {1.0f, -2.5f, INFINITY, -INFINITY};
        aiter_mla_lse_base2_to_natural(l, 4);
        CHECK(fabs(l[0] - 0.693147f) < 1e-6 && fabs(l[1] + 2.5 * 0.693147) < 1e-5 && l[2] == INFINITY && l[3] == -INFINITY,
              "lse base 2 -> e: got %g %g %g %g", l[0], l[1], l[2], l[3]);
    }
    /* validation */
    {
        int32_t idx[4] = {0, 1, 2, 3}, req[1] = {0}, out[8], bt[2] = {0, 1}, st[1] = {0};
        aiter_mla_sparse_index_args a, b;
        memset(&a, 0, sizeof a);
        a.indices = idx;
        a.req_id = req;
        a.block_table = bt;
        a.block_table_stride = 2;
        a.num_requests = 1;
        a.num_tokens = 1;
        a.topk = 4;
        a.out = out;
        CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&a), AITER_MLA_OK, "");
        CHECK(out[0] == 0 && out[3] == 3, "block_size 0 means 64: got %d %d", out[0], out[3]);
        b = a;
        b.topk = 0;
        CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "topk");
        b = a;
        b.indices = NULL;
        CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&b), AITER_MLA_ERR_NULL_POINTER, "indices");
        b = a;
        b.block_table = NULL;
        CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&b), AITER_MLA_ERR_NULL_POINTER, "workspace_starts");
        b.workspace_starts = st;
        CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&b), AITER_MLA_OK, "");
        b = a;
        b.block_size = 5000;
        CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
        b = a;
        b.out_stride = 3;
        CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "out_stride");
        b = a;
        b.num_requests = 0;
        CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "num_requests");
    }
}

/* =====================================================================================
 * fp8_ds_mla rows (SPEC 6) and the sparse attention reference (SPEC 4)
 * ===================================================================================== */
/* the test's own reading of a 656-byte row: scales by memcpy, fp8 by the independent decoder */
static void naive_ds_mla_row(const unsigned char *row, int fnuz, double *out) {
    int i;
    for (i = 0; i < 512; i++) {
        float sc;
        memcpy(&sc, row + 512 + 4 * (i / 128), 4);
        out[i] = ref_fp8_to_f64(row[i], fnuz) * sc;
    }
    for (i = 0; i < 64; i++) {
        uint16_t hb;
        memcpy(&hb, row + 528 + 2 * i, 2);
        out[512 + i] = ref_bf16_to_f64(hb);
    }
}

/* The GPU writers' division-free quotient (aiter_mla__quotient16) against IEEE division: x of
 * every bf16 and f16 significand against random binary32 significands s and the fp8 maxima,
 * and the fp8_ds_mla scale's amax / fp8_max for every positive bf16 amax above 2^-100. The
 * first check also counts how often q = RN(x RN(1/s)) alone is wrong, so that it can fail. */
static void test_quotient16(void) {
    static const float maxima[] = {448.0f, 240.0f, 224.0f, 100.5f, 1.0f};
    test_rng r = rng_seed(0x9016);
    int64_t wrong = 0, wrong_plain = 0, n = 0;
    int i, k, m;
    for (i = 0; i < 4096 + 5; i++) {
        const float s = i < 5 ? maxima[i] : 1.0f + (float)(rng_u64(&r) >> 41) * 0x1p-23f, y = 1.0f / s;
        for (k = 0; k < 128 + 1024; k++) { /* bf16 significands, then f16 ones */
            const float x = k < 128 ? 1.0f + (float)k * 0x1p-7f : 1.0f + (float)(k - 128) * 0x1p-10f;
            /* the casts round to binary32 where arithmetic is wider (x87: FLT_EVAL_METHOD 2) */
            wrong += aiter_mla__quotient16(x, s, y) != (float)(x / s);
            wrong_plain += (float)(x * y) != (float)(x / s);
            n++;
        }
    }
    CHECK(wrong == 0, "quotient16: %lld of %lld quotients differ from x / s", (long long)wrong, (long long)n);
    CHECK(wrong_plain > 0, "quotient16: RN(x RN(1/s)) was right for all %lld pairs: the check above cannot fail", (long long)n);
    for (m = 0; m < 5; m++) {
        const float fm = maxima[m], y = 1.0f / fm;
        wrong = 0;
        for (k = 1; k < 0x7f80; k++) {
            const float amax = aiter_mla_bf16_to_f32((uint16_t)k);
            if (amax >= 0x1p-100f && amax <= 0x1p100f) wrong += aiter_mla__quotient16(amax, fm, y) != (float)(amax / fm);
        }
        CHECK(wrong == 0, "quotient16: %lld bf16 amax / %g differ from the division", (long long)wrong, (double)fm);
    }
    CHECK(signbit(aiter_mla__quotient16(-0.0f, 3.0f, 1.0f / 3.0f)) && aiter_mla__quotient16(-0.0f, 3.0f, 1.0f / 3.0f) == 0.0f,
          "quotient16: -0 does not stay -0");
}

static void test_ds_mla_rows(void) {
    test_rng r = rng_seed(0xd5a1);
    int variant;
    for (variant = 0; variant < 4; variant++) {
        const int fnuz = variant & 1, pow2 = variant >> 1, T = 9, blocks = 3, bs = 4;
        const double fmax = fnuz ? 240.0 : 448.0;
        uint16_t kvc[9 * 520], kpe[9 * 70];
        int64_t slots[9];
        unsigned char cache[3 * 4 * 656];
        aiter_mla_ds_mla_write_args w;
        int t, g, i, bad_scale = 0, bad_code = 0, bad_rope = 0, bad_err = 0, touched = 0;
        for (t = 0; t < T; t++) {
            for (g = 0; g < 4; g++) { /* groups of very different magnitudes; group 2 of token 0 all zero */
                const float amp = t == 0 && g == 2 ? 0.0f : (float)ldexp(1.0, rng_int(&r, -12, 8));
                for (i = 0; i < 128; i++) kvc[t * 520 + g * 128 + i] = aiter_mla_f32_to_bf16(rng_f32(&r, -amp, amp));
            }
            for (i = 0; i < 64; i++) kpe[t * 70 + i] = aiter_mla_f32_to_bf16(rng_f32(&r, -3.0f, 3.0f));
            slots[t] = t == 4 ? -1 : t == 6 ? 3 * 4 + 2 : t; /* a padding token and one past the cache */
        }
        memset(cache, 0xa5, sizeof cache);
        memset(&w, 0, sizeof w);
        w.kv_c = kvc;
        w.kv_c_stride = 520;
        w.k_pe = kpe;
        w.k_pe_stride = 70;
        w.slot_mapping = slots;
        w.kv_cache = cache;
        w.num_blocks = blocks;
        w.block_size = bs;
        w.num_tokens = T;
        w.fp8_dtype = fnuz ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
        w.pow2_scales = pow2;
        CHECK_STATUS(aiter_mla_ds_mla_write_ref(&w), AITER_MLA_OK, "");
        for (t = 0; t < T; t++) {
            const unsigned char *row;
            double got[576];
            if (slots[t] < 0 || slots[t] >= blocks * bs) continue;
            row = cache + slots[t] * 656;
            touched++;
            for (g = 0; g < 4; g++) {
                double amax = 0.0, want;
                float sc;
                for (i = 0; i < 128; i++) {
                    double x = fabs(ref_bf16_to_f64(kvc[t * 520 + g * 128 + i]));
                    if (x > amax) amax = x;
                }
                if (pow2) want = ldexp(1.0, (int)ceil(log2(amax / fmax > 1e-4 ? amax / fmax : 1e-4)));
                else want = amax / fmax > 1.17549435e-38 ? (double)(float)(amax / fmax) : 1.17549435e-38;
                memcpy(&sc, row + 512 + 4 * g, 4);
                bad_scale += fabs(sc - want) > 1e-6 * want;
                for (i = 0; i < 128; i++) {
                    const double x = ref_bf16_to_f64(kvc[t * 520 + g * 128 + i]);
                    int alt; /* the test's own encoder (a NaN's code may carry its sign) */
                    const int want = ref_f32_to_fp8((float)(x / sc), w.fp8_dtype == AITER_MLA_FP8_E4M3FNUZ, &alt);
                    bad_code += row[g * 128 + i] != want && row[g * 128 + i] != alt;
                }
            }
            for (i = 0; i < 64; i++) {
                uint16_t hb;
                memcpy(&hb, row + 528 + 2 * i, 2);
                bad_rope += hb != kpe[t * 70 + i];
            }
            /* reading back: within half an fp8 step (2^-4 relative) of the group's scale range */
            naive_ds_mla_row(row, fnuz, got);
            for (i = 0; i < 512; i++) {
                float sc;
                double x = ref_bf16_to_f64(kvc[t * 520 + i]);
                memcpy(&sc, row + 512 + 4 * (i / 128), 4);
                if (fabs(got[i] - x) > fabs(x) / 15.0 + sc * (fnuz ? 1.0 / 1024 : 1.0 / 512)) bad_err++;
            }
            {
                float lib[576];
                aiter_mla_ds_mla_read_row(row, w.fp8_dtype, lib);
                for (i = 0; i < 576; i++) bad_err += lib[i] != (float)got[i];
            }
        }
        CHECK(touched == 7, "ds_mla variant %d: %d rows written, expected 7", variant, touched);
        CHECK(bad_scale == 0 && bad_code == 0 && bad_rope == 0 && bad_err == 0,
              "ds_mla variant %d: %d scales, %d codes, %d rope values, %d read-backs wrong", variant, bad_scale, bad_code,
              bad_rope, bad_err);
        { /* slots -1 and past the cache leave the cache alone: the rows no token maps to stay 0xa5 */
            int untouched = 1, row_i;
            for (row_i = 0; row_i < blocks * bs; row_i++) {
                int mapped = 0;
                for (t = 0; t < T; t++) mapped |= slots[t] == row_i;
                for (i = 0; !mapped && i < 656; i++) untouched &= cache[row_i * 656 + i] == 0xa5;
            }
            CHECK(untouched, "ds_mla variant %d: a row no slot maps to was written", variant);
        }
        if (variant == 0) {
            aiter_mla_ds_mla_write_args b = w;
            b.fp8_dtype = AITER_MLA_BF16;
            CHECK_STATUS(aiter_mla_ds_mla_write_ref(&b), AITER_MLA_ERR_UNSUPPORTED, "fp8_dtype");
            b = w;
            b.fp8_max = 500.0f;
            CHECK_STATUS(aiter_mla_ds_mla_write_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "fp8_max");
            b.fp8_max = 1.0f; /* the scale of the largest bf16 would overflow */
            CHECK_STATUS(aiter_mla_ds_mla_write_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "fp8_max = 1 is outside [2, 448]");
            { /* at the bound, a group holding 3e38 reads back finite under both rules */
                int rule, finite = 1;
                float back[576];
                kvc[0] = aiter_mla_f32_to_bf16(3.0e38f);
                for (rule = 0; rule < 2; rule++) {
                    b.fp8_max = 2.0f;
                    b.pow2_scales = rule;
                    CHECK_STATUS(aiter_mla_ds_mla_write_ref(&b), AITER_MLA_OK, "");
                    aiter_mla_ds_mla_read_row(cache, b.fp8_dtype, back);
                    for (i = 0; i < 512; i++) finite &= isfinite(back[i]) != 0;
                }
                CHECK(finite && back[0] > 1e38f, "ds_mla_write_ref: fp8_max 2 over 3e38 reads back %g", back[0]);
            }
            b = w;
            b.slot_mapping = NULL;
            CHECK_STATUS(aiter_mla_ds_mla_write_ref(&b), AITER_MLA_ERR_NULL_POINTER, "slot_mapping");
        }
    }
}

static void test_sparse_attention_ref(void) {
    static const struct { int heads, topk, tokens, ds_mla, with_len; } cases[] = {
        {1, 1, 3, 0, 0}, {16, 63, 3, 0, 1}, {64, 64, 2, 1, 0}, {128, 64, 2, 0, 1},
        {16, 2048, 2, 1, 1}, {1, 2048, 2, 0, 0}, {16, 64, 3, 1, 1},
    };
    test_rng r = rng_seed(0x5b0a);
    int c;
    for (c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        const int H = cases[c].heads, K = cases[c].topk, T = cases[c].tokens, ds = cases[c].ds_mla;
        const int W = c % 3 == 2 ? K + 5 : K; /* index row stride: padded rows in some cases */
        const int64_t S = 700;
        const float scale = 0.1f;
        uint16_t *q = (uint16_t *)test_malloc(sizeof(uint16_t) * (size_t)T * H * 576);
        void *cache = test_malloc(ds ? (size_t)S * 656 : sizeof(uint16_t) * (size_t)S * 576);
        int32_t *idx = (int32_t *)test_malloc(sizeof(int32_t) * (size_t)T * W), len[3];
        float *o = (float *)test_malloc(sizeof(float) * (size_t)T * H * 512), *ref = (float *)test_malloc(sizeof(float) * (size_t)T * H * 512);
        float lse[3 * 128], lse_ref[3 * 128], mx[3 * 128], mx_ref[3 * 128], sink[128];
        double *rows = (double *)test_malloc(sizeof(double) * (size_t)S * 576);
        aiter_mla_sparse_args a;
        int t, h, k, d;
        int64_t i;
        fill_random(q, (int64_t)T * H * 576, AITER_MLA_BF16, &r, -2.0f, 2.0f, 1.0f);
        if (ds) { /* write the rows through the writer, read them with the test's own decoder */
            uint16_t *kvc = (uint16_t *)test_malloc(sizeof(uint16_t) * (size_t)S * 576);
            int64_t *sl = (int64_t *)test_malloc(sizeof(int64_t) * (size_t)S);
            aiter_mla_ds_mla_write_args w;
            fill_random(kvc, S * 576, AITER_MLA_BF16, &r, -1.0f, 1.0f, 1.0f);
            for (i = 0; i < S; i++) sl[i] = i;
            memset(&w, 0, sizeof w);
            w.kv_c = kvc;
            w.kv_c_stride = 576;
            w.k_pe = kvc + 512;
            w.k_pe_stride = 576;
            w.slot_mapping = sl;
            w.kv_cache = cache;
            w.num_blocks = S;
            w.block_size = 1;
            w.num_tokens = S;
            CHECK_STATUS(aiter_mla_ds_mla_write_ref(&w), AITER_MLA_OK, "");
            for (i = 0; i < S; i++) naive_ds_mla_row((const unsigned char *)cache + i * 656, 0, rows + i * 576);
            free(kvc);
            free(sl);
        } else {
            fill_random(cache, S * 576, AITER_MLA_BF16, &r, -1.0f, 1.0f, 1.0f);
            for (i = 0; i < S * 576; i++) rows[i] = ref_bf16_to_f64(((uint16_t *)cache)[i]);
        }
        for (i = 0; i < (int64_t)T * W; i++) /* holes, past the end; a row's padding past topk valid slots */
            idx[i] = i % W >= K ? rng_int(&r, 0, (int)S - 1) : rng_int(&r, 0, 7) == 0 ? -1 : rng_int(&r, 0, (int)S + 5);
        if (K > 1) idx[1] = idx[0];                                  /* a duplicate */
        for (k = 0; k < K; k++) idx[(T - 1) * W + k] = k % 2 ? -1 : (int)S + k; /* last token: no valid slot */
        for (t = 0; t < T; t++) len[t] = cases[c].with_len ? rng_int(&r, 0, K) : K;
        for (h = 0; h < H; h++) sink[h] = h % 3 == 0 ? -INFINITY : h % 3 == 1 ? rng_f32(&r, -2.0f, 6.0f) : INFINITY;
        for (; h < 128; h++) sink[h] = 0.5f; /* read by the sweep's calls with more heads */
        memset(&a, 0, sizeof a);
        a.q = q;
        a.kv_cache = cache;
        a.num_slots = S;
        a.cache_is_ds_mla = ds;
        a.indices = idx;
        a.indices_stride = W == K ? 0 : W;
        a.topk_length = cases[c].with_len ? len : NULL;
        a.attn_sink = c % 2 ? sink : NULL;
        a.o = o;
        a.lse = lse;
        a.max_logits = mx;
        a.num_tokens = T;
        a.num_heads = H;
        a.topk = K;
        a.sm_scale = scale;
        a.o_dtype = AITER_MLA_F32;
        poison_f32(o, (int64_t)T * H * 512);
        poison_f32(lse, T * H);
        poison_f32(mx, T * H);
        if (!CHECK(aiter_mla_sparse_attention_ref(&a) == AITER_MLA_OK, "sparse case %d: %s", c, aiter_mla_last_error())) goto next;
        /* naive: two passes over the valid entries, straight from the formula */
        for (t = 0; t < T; t++)
            for (h = 0; h < H; h++) {
                const int n = cases[c].with_len ? len[t] : K;
                double m = -HUGE_VAL, den = 0.0, num[512];
                for (d = 0; d < 512; d++) num[d] = 0.0;
                for (k = 0; k < n; k++) {
                    const int32_t sl = idx[t * W + k];
                    double s = 0.0;
                    if (sl < 0 || sl >= S) continue;
                    for (d = 0; d < 576; d++) s += ref_bf16_to_f64(q[((int64_t)t * H + h) * 576 + d]) * rows[(int64_t)sl * 576 + d];
                    s *= scale;
                    if (s > m) m = s;
                }
                for (k = 0; k < n; k++) {
                    const int32_t sl = idx[t * W + k];
                    double s = 0.0, e;
                    if (sl < 0 || sl >= S) continue;
                    for (d = 0; d < 576; d++) s += ref_bf16_to_f64(q[((int64_t)t * H + h) * 576 + d]) * rows[(int64_t)sl * 576 + d];
                    e = exp(s * scale - m);
                    den += e;
                    for (d = 0; d < 512; d++) num[d] += e * rows[(int64_t)sl * 576 + d];
                }
                lse_ref[t * H + h] = den > 0.0 ? (float)(m + log(den)) : INFINITY;
                mx_ref[t * H + h] = (float)m;
                if (a.attn_sink && den > 0.0) den += exp((double)sink[h] - m);
                for (d = 0; d < 512; d++) ref[((int64_t)t * H + h) * 512 + d] = den > 0.0 ? (float)(num[d] / den) : 0.0f;
            }
        {
            char what[96];
            snprintf(what, sizeof what, "sparse H=%d topk=%d stride=%d %s%s%s", H, K, W, ds ? "fp8_ds_mla" : "bf16",
                     cases[c].with_len ? " topk_length" : "", a.attn_sink ? " sink" : "");
            CHECK_CLOSE(what, o, ref, (int64_t)T * H * 512, 1e-4, 0.999999);
            CHECK_LSE(what, lse, lse_ref, T * H);
            CHECK_LSE(what, mx, mx_ref, T * H);
        }
        if (c == 0) {
            aiter_mla_sparse_args b = a;
            b.num_heads = 129;
            CHECK_STATUS(aiter_mla_sparse_attention_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
            b = a;
            b.indices = NULL;
            CHECK_STATUS(aiter_mla_sparse_attention_ref(&b), AITER_MLA_ERR_NULL_POINTER, "indices");
            b = a;
            b.q_dtype = AITER_MLA_FP8_E4M3FN;
            CHECK_STATUS(aiter_mla_sparse_attention_ref(&b), AITER_MLA_ERR_UNSUPPORTED, "q_dtype");
            b = a;
            b.topk = 0;
            CHECK_STATUS(aiter_mla_sparse_attention_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "topk");
            b = a;
            b.indices_stride = -1;
            CHECK_STATUS(aiter_mla_sparse_attention_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "indices_stride");
        }
        if (W > K) { /* a stride below topk would overlap the rows */
            aiter_mla_sparse_args b = a;
            b.indices_stride = K - 1;
            CHECK_STATUS(aiter_mla_sparse_attention_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "indices_stride");
        }
    next:
        free(q);
        free(cache);
        free(idx);
        free(o);
        free(ref);
        free(rows);
    }
}

/* =====================================================================================
 * context gather (SPEC 2b, and the dequantising gather of SPEC 6)
 * ===================================================================================== */
static void test_gather_cache(void) {
    static const aiter_mla_dtype fmts[] = {AITER_MLA_BF16, AITER_MLA_F16, AITER_MLA_FP8_E4M3FN, AITER_MLA_FP8_E4M3FNUZ, AITER_MLA_DTYPE_DEFAULT};
    test_rng r = rng_seed(0x6a7e);
    int f;
    for (f = 0; f < 5; f++) {
        const int ds = fmts[f] == AITER_MLA_DTYPE_DEFAULT, B = 3, bs = 16, blocks = 20, width = 6, chunk = 37;
        const float scale = aiter_mla__is_fp8(fmts[f]) ? 0.03f : 0.0f;
        const size_t row_bytes = ds ? 656 : 576 * aiter_mla_dtype_size(fmts[f]);
        unsigned char *cache = (unsigned char *)test_malloc(row_bytes * blocks * bs);
        int32_t bt[3 * 6], ctx[3] = {70, 5, 96}, starts[3], cu[4];
        float *out;
        aiter_mla_gather_cache_args g;
        int c, b, i, d, bad = 0, rows = 0;
        int64_t n;
        if (ds) {
            uint16_t *kv = (uint16_t *)test_malloc(sizeof(uint16_t) * 576 * blocks * bs);
            int64_t *sl = (int64_t *)test_malloc(sizeof(int64_t) * blocks * bs);
            aiter_mla_ds_mla_write_args w;
            fill_random(kv, (int64_t)576 * blocks * bs, AITER_MLA_BF16, &r, -2.0f, 2.0f, 1.0f);
            for (i = 0; i < blocks * bs; i++) sl[i] = i;
            memset(&w, 0, sizeof w);
            w.kv_c = kv;
            w.kv_c_stride = 576;
            w.k_pe = kv + 512;
            w.k_pe_stride = 576;
            w.slot_mapping = sl;
            w.kv_cache = cache;
            w.num_blocks = blocks;
            w.block_size = bs;
            w.num_tokens = blocks * bs;
            aiter_mla_ds_mla_write_ref(&w);
            free(kv);
            free(sl);
        } else {
            fill_random(cache, (int64_t)576 * blocks * bs, fmts[f], &r, -2.0f, 2.0f, scale);
        }
        for (i = 0; i < B * width; i++) bt[i] = rng_int(&r, 0, blocks - 1);
        bt[1] = -1;      /* request 0, positions 16..31: absent */
        bt[2] = blocks;  /* request 0, positions 32..47: out of range */
        for (c = 0; c * chunk < 96; c++) { /* every chunk of every request */
            cu[0] = 0;
            for (b = 0; b < B; b++) {
                const int lo = c * chunk, hi = ctx[b] < (c + 1) * chunk ? ctx[b] : (c + 1) * chunk;
                starts[b] = lo;
                cu[b + 1] = cu[b] + (hi > lo ? hi - lo : 0);
            }
            n = cu[B];
            out = (float *)test_malloc(sizeof(float) * (size_t)(n + 1) * 576);
            poison_f32(out, (n + 1) * 576);
            memset(&g, 0, sizeof g);
            g.kv_cache = cache;
            g.num_blocks = blocks;
            g.block_size = bs;
            g.cache_dtype = ds ? AITER_MLA_DTYPE_DEFAULT : fmts[f];
            g.scale = scale;
            g.cache_is_ds_mla = ds;
            g.block_table = bt;
            g.block_table_stride = width;
            g.cu_out_rows = cu;
            g.seq_starts = starts;
            g.batch = B;
            g.out = out;
            g.out_rows = n + 1;
            g.out_dtype = AITER_MLA_F32;
            CHECK_STATUS(aiter_mla_gather_cache_ref(&g), AITER_MLA_OK, "");
            for (b = 0; b < B; b++)
                for (i = 0; i < cu[b + 1] - cu[b]; i++) {
                    const int pos = starts[b] + i, blk = pos / bs, id = blk < width ? bt[b * width + blk] : -1;
                    double rowv[576];
                    if (id < 0 || id >= blocks) {
                        for (d = 0; d < 576; d++) rowv[d] = 0.0;
                    } else if (ds) {
                        naive_ds_mla_row(cache + ((size_t)id * bs + pos % bs) * 656, 0, rowv);
                    } else {
                        for (d = 0; d < 576; d++)
                            rowv[d] = ref_load(cache, ((int64_t)id * bs + pos % bs) * 576 + d, fmts[f]) * (scale != 0.0f ? scale : 1.0);
                    }
                    for (d = 0; d < 576; d++) bad += fabs(out[(int64_t)(cu[b] + i) * 576 + d] - rowv[d]) > 1e-6 * (1.0 + fabs(rowv[d]));
                    rows++;
                }
            for (d = 0; d < 576; d++) bad += !is_poison(out, n * 576 + d, AITER_MLA_F32); /* the spare row stays */
            free(out);
        }
        CHECK(bad == 0 && rows == 70 + 5 + 96, "gather format %d: %d values wrong over %d rows", f, bad, rows);
        if (f == 0) {
            aiter_mla_gather_cache_args h = g;
            int32_t cu_bad[4] = {0, 5, 3, 9};
            float small[576];
            h.out = small;
            h.out_rows = 0;
            h.cu_out_rows = cu_bad;
            CHECK_STATUS(aiter_mla_gather_cache_ref(&h), AITER_MLA_ERR_INVALID_ARGUMENT, "cu_out_rows");
            h.cu_out_rows = cu;
            CHECK_STATUS(aiter_mla_gather_cache_ref(&h), AITER_MLA_ERR_BUFFER_TOO_SMALL, "out_rows");
            h = g;
            h.out = small; /* g.out was freed with its chunk */
            h.cache_dtype = AITER_MLA_F32;
            CHECK_STATUS(aiter_mla_gather_cache_ref(&h), AITER_MLA_ERR_UNSUPPORTED, "cache_dtype");
            h = g;
            h.out = small;
            h.block_table = NULL;
            CHECK_STATUS(aiter_mla_gather_cache_ref(&h), AITER_MLA_ERR_NULL_POINTER, "block_table");
        }
        free(cache);
    }
}

/* =====================================================================================
 * varlen prefill reference (SPEC 2, 2c), and chunked context + merge = one pass (SPEC 2a)
 * ===================================================================================== */
static void test_prefill_ref(void) {
    static const int dims[][2] = {{192, 128}, {64, 64}, {128, 64}, {256, 256}, {256, 192}};
    test_rng r = rng_seed(0x9f111);
    int c;
    for (c = 0; c < 10; c++) {
        const int B = 4, H = c % 3 == 0 ? 1 : 3, dqk = dims[c % 5][0], dv = dims[c % 5][1], causal = c % 2;
        const aiter_mla_dtype dt = c == 7 ? AITER_MLA_FP8_E4M3FN : c == 8 ? AITER_MLA_F16 : AITER_MLA_BF16;
        const float qs = dt == AITER_MLA_FP8_E4M3FN ? 0.5f : 0.0f, ks = dt == AITER_MLA_FP8_E4M3FN ? 0.25f : 0.0f;
        const int64_t kst = (int64_t)H * dqk + 8; /* k rows strided, as a view of a wider buffer */
        int32_t cq[5], ck[5], sq[4] = {3, 0, 1, 9}, sk[4] = {5, 4, 0, 6};
        int b, i, j, h, d;
        void *q, *k, *v;
        float *o, *ref, *lse, *lse_ref;
        aiter_mla_prefill_args a;
        cq[0] = ck[0] = 0;
        for (b = 0; b < B; b++) {
            cq[b + 1] = cq[b] + sq[b];
            ck[b + 1] = ck[b] + sk[b];
        }
        q = test_malloc((size_t)cq[B] * H * dqk * 2 + 16);
        k = test_malloc((size_t)ck[B] * kst * 2 + 16);
        v = test_malloc((size_t)ck[B] * H * dv * 2 + 16);
        fill_random(q, (int64_t)cq[B] * H * dqk, dt, &r, -1.0f, 1.0f, qs);
        fill_random(k, (int64_t)ck[B] * kst, dt, &r, -1.0f, 1.0f, ks);
        fill_random(v, (int64_t)ck[B] * H * dv, dt, &r, -1.0f, 1.0f, 0.0f);
        o = (float *)test_malloc(sizeof(float) * (size_t)cq[B] * H * dv);
        ref = (float *)test_malloc(sizeof(float) * (size_t)cq[B] * H * dv);
        lse = (float *)test_malloc(sizeof(float) * (size_t)H * cq[B] + 4);
        lse_ref = (float *)test_malloc(sizeof(float) * (size_t)H * cq[B] + 4);
        poison_f32(o, (int64_t)cq[B] * H * dv);
        poison_f32(lse, (int64_t)H * cq[B]);
        memset(&a, 0, sizeof a);
        a.q = q;
        a.k = k;
        a.v = v;
        a.k_stride_token = kst;
        a.cu_seqlens_q = cq;
        a.cu_seqlens_k = ck;
        a.o = o;
        a.lse = lse;
        a.batch = B;
        a.num_heads = H;
        a.dqk = dqk;
        a.dv = dv;
        a.causal = causal;
        a.sm_scale = 0.15f;
        a.q_scale = qs;
        a.k_scale = ks;
        a.qkv_dtype = dt;
        a.o_dtype = AITER_MLA_F32;
        if (!CHECK(aiter_mla_prefill_ref(&a) == AITER_MLA_OK, "prefill case %d: %s", c, aiter_mla_last_error())) goto next;
        for (b = 0; b < B; b++)
            for (i = 0; i < sq[b]; i++)
                for (h = 0; h < H; h++) {
                    const double sc = 0.15 * (dt == AITER_MLA_FP8_E4M3FN ? 0.5 * 0.25 : 1.0);
                    const int last = causal ? sk[b] - sq[b] + i : sk[b] - 1; /* last visible key */
                    double m = -HUGE_VAL, den = 0.0, num[256], sv[16];
                    for (d = 0; d < dv; d++) num[d] = 0.0;
                    for (j = 0; j <= last && j < sk[b]; j++) {
                        double s = 0.0;
                        for (d = 0; d < dqk; d++)
                            s += ref_load(q, ((int64_t)(cq[b] + i) * H + h) * dqk + d, dt) *
                                 ref_load(k, (int64_t)(ck[b] + j) * kst + (int64_t)h * dqk + d, dt);
                        sv[j] = s * sc;
                        if (sv[j] > m) m = sv[j];
                    }
                    for (j = 0; j <= last && j < sk[b]; j++) {
                        const double e = exp(sv[j] - m);
                        den += e;
                        for (d = 0; d < dv; d++) num[d] += e * ref_load(v, ((int64_t)(ck[b] + j) * H + h) * dv + d, dt);
                    }
                    for (d = 0; d < dv; d++) ref[((int64_t)(cq[b] + i) * H + h) * dv + d] = den > 0.0 ? (float)(num[d] / den) : 0.0f;
                    lse_ref[(int64_t)h * cq[B] + cq[b] + i] = den > 0.0 ? (float)(m + log(den)) : -INFINITY;
                }
        {
            char what[80];
            snprintf(what, sizeof what, "prefill %d/%d %s%s H=%d", dqk, dv, aiter_mla_dtype_name(dt), causal ? " causal" : "", H);
            CHECK_CLOSE(what, o, ref, (int64_t)cq[B] * H * dv, 1e-5, 0.99999);
            CHECK_LSE(what, lse, lse_ref, (int64_t)H * cq[B]);
        }
        if (c == 0) {
            aiter_mla_prefill_args e = a;
            e.dqk = 96;
            CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "dqk");
            e = a;
            e.dv = 256;
            CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "dv");
            e = a;
            e.cu_seqlens_k = sq; /* {3, 0, ...}: not monotone */
            CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "cu_seqlens_k");
            e = a;
            e.causal = 2;
            CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "causal");
        }
    next:
        free(q);
        free(k);
        free(v);
        free(o);
        free(ref);
        free(lse);
        free(lse_ref);
    }

    /* chunked prefill: new tokens (causal among themselves, seeing the whole context) as
     * two non-causal context chunks + one causal pass, merged by lse, equal one causal pass
     * over context + new keys */
    {
        enum { H = 2, DQK = 64, DV = 64, CTX = 23, NEW = 6, CH = 10 };
        uint16_t q[NEW * H * DQK], k[(CTX + NEW) * H * DQK], v[(CTX + NEW) * H * DV];
        float full[NEW * H * DV], part[NEW * H * DV], acc[NEW * H * DV], lse_acc[H * NEW], lse_part[H * NEW], lse_full[H * NEW], tmp[H * NEW];
        int32_t cq[2] = {0, NEW}, ck[2], ch;
        aiter_mla_prefill_args p;
        aiter_mla_merge_args m;
        fill_random(q, NEW * H * DQK, AITER_MLA_BF16, &r, -1.0f, 1.0f, 0.0f);
        fill_random(k, (CTX + NEW) * H * DQK, AITER_MLA_BF16, &r, -1.0f, 1.0f, 0.0f);
        fill_random(v, (CTX + NEW) * H * DV, AITER_MLA_BF16, &r, -1.0f, 1.0f, 0.0f);
        memset(&p, 0, sizeof p);
        p.q = q;
        p.cu_seqlens_q = cq;
        p.cu_seqlens_k = ck;
        p.batch = 1;
        p.num_heads = H;
        p.dqk = DQK;
        p.dv = DV;
        p.sm_scale = 0.2f;
        p.o_dtype = AITER_MLA_F32;
        /* one pass: all CTX + NEW keys, causal */
        ck[0] = 0;
        ck[1] = CTX + NEW;
        p.k = k;
        p.v = v;
        p.causal = 1;
        p.o = full;
        p.lse = lse_full;
        CHECK_STATUS(aiter_mla_prefill_ref(&p), AITER_MLA_OK, "");
        /* new tokens alone, causal */
        ck[1] = NEW;
        p.k = k + CTX * H * DQK;
        p.v = v + CTX * H * DV;
        p.o = acc;
        p.lse = lse_acc;
        CHECK_STATUS(aiter_mla_prefill_ref(&p), AITER_MLA_OK, "");
        /* each context chunk, non-causal, merged in */
        for (ch = 0; ch * CH < CTX; ch++) {
            ck[1] = (ch + 1) * CH < CTX ? CH : CTX - ch * CH;
            p.k = k + ch * CH * H * DQK;
            p.v = v + ch * CH * H * DV;
            p.causal = 0;
            p.o = part;
            p.lse = lse_part;
            CHECK_STATUS(aiter_mla_prefill_ref(&p), AITER_MLA_OK, "");
            memset(&m, 0, sizeof m);
            m.o_prefix = part;
            m.lse_prefix = lse_part;
            m.o_suffix = acc;
            m.lse_suffix = lse_acc;
            m.o = acc; /* in place: each element is read before it is written */
            m.lse = tmp;
            m.num_tokens = NEW;
            m.num_heads = H;
            m.head_dim = DV;
            m.dtype = AITER_MLA_F32;
            CHECK_STATUS(aiter_mla_merge_attn_states_ref(&m), AITER_MLA_OK, "");
            memcpy(lse_acc, tmp, sizeof tmp);
        }
        CHECK_CLOSE("chunked prefill + merge", acc, full, NEW * H * DV, 1e-5, 0.99999);
        CHECK_LSE("chunked prefill + merge", lse_acc, lse_full, H * NEW);
    }
}

/* =====================================================================================
 * persistent prefill plan (SPEC 2c): planner, checker, scheduled replay
 * ===================================================================================== */
static void test_prefill_plan(void) {
    static const int cus[] = {1, 3, 16, 132};
    test_rng r = rng_seed(0x9191);
    int iter, split_plans = 0, short_workspace_checked = 0;
    for (iter = 0; iter < 24; iter++) {
        const int B = rng_int(&r, 1, 4), H = 2, dqk = 64, dv = 64, causal = iter % 2, ncu = cus[iter % 4];
        const aiter_mla_dtype dt = iter % 3 == 2 ? AITER_MLA_FP8_E4M3FN : AITER_MLA_BF16;
        int32_t cq[5], ck[5];
        aiter_mla_prefill_plan_desc d;
        aiter_mla_prefill_plan_info info;
        aiter_mla_prefill_args a;
        int32_t *plan;
        void *q, *k, *v, *ws;
        float *o, *o_ref, *lse, *lse_ref;
        int b;
        cq[0] = ck[0] = 0;
        for (b = 0; b < B; b++) {
            int32_t sq = rng_int(&r, 0, 70), sk = rng_int(&r, 0, 90);
            if (b == 0 && iter % 4 == 1) sk = sq; /* square */
            cq[b + 1] = cq[b] + sq;
            ck[b + 1] = ck[b] + sk;
        }
        memset(&d, 0, sizeof d);
        d.max_batch = 4;
        d.max_q_tokens = 300;
        d.num_heads = H;
        d.num_cu = ncu;
        d.dv = dv;
        d.tile_q = 16;
        d.kv_granularity = 16;
        CHECK_STATUS(aiter_mla_prefill_plan_get_info(&d, &info), AITER_MLA_OK, "");
        plan = (int32_t *)test_malloc(sizeof(int32_t) * (size_t)info.plan_ints);
        if (!CHECK(aiter_mla_prefill_plan_build(&info, cq, ck, B, causal, plan) == AITER_MLA_OK, "ps build %d: %s", iter,
                   aiter_mla_last_error()))
            goto free_plan;
        if (iter == 0) CHECK_OUT_OF_MEMORY(aiter_mla_prefill_plan_check(&info, cq, ck, B, causal, plan));
        CHECK_STATUS(aiter_mla_prefill_plan_check(&info, cq, ck, B, causal, plan), AITER_MLA_OK, "");
        split_plans += plan[4] > 0; /* header: split pieces */
        { /* independent: zig-zag order of the first request's tiles */
            const int32_t n = (cq[1] - cq[0] + 15) / 16, *fm = plan + info.off_reduce_final_map;
            int32_t t, bad = 0;
            for (t = 0; t < n; t++) {
                const int32_t want = (t % 2 ? n - 1 - t / 2 : t / 2) * 16;
                bad += fm[2 * t] != want;
            }
            CHECK(bad == 0, "ps plan %d: tiles of request 0 not visited zig-zag", iter);
        }
        { /* corruptions are caught */
            int32_t *bad = (int32_t *)test_malloc(sizeof(int32_t) * (size_t)info.plan_ints);
            const int32_t nw = plan[2];
            if (nw > 0) {
                memcpy(bad, plan, sizeof(int32_t) * (size_t)info.plan_ints);
                bad[info.off_work_info + 5] += 1; /* first piece one key longer */
                CHECK_STATUS(aiter_mla_prefill_plan_check(&info, cq, ck, B, causal, bad), AITER_MLA_ERR_PLAN_INVALID, "");
                memcpy(bad, plan, sizeof(int32_t) * (size_t)info.plan_ints);
                bad[info.off_work_info + 7] = 0; /* q_head_range */
                CHECK_STATUS(aiter_mla_prefill_plan_check(&info, cq, ck, B, causal, bad), AITER_MLA_ERR_PLAN_INVALID, "");
            }
            free(bad);
        }
        /* scheduled replay (pieces + reduce) against the direct reference */
        q = test_malloc((size_t)(cq[B] + 1) * H * dqk * 2);
        k = test_malloc((size_t)(ck[B] + 1) * H * dqk * 2);
        v = test_malloc((size_t)(ck[B] + 1) * H * dv * 2);
        fill_random(q, (int64_t)cq[B] * H * dqk, dt, &r, -1.0f, 1.0f, dt == AITER_MLA_BF16 ? 0.0f : 0.5f);
        fill_random(k, (int64_t)ck[B] * H * dqk, dt, &r, -1.0f, 1.0f, dt == AITER_MLA_BF16 ? 0.0f : 0.5f);
        fill_random(v, (int64_t)ck[B] * H * dv, dt, &r, -1.0f, 1.0f, 0.0f);
        o = (float *)test_malloc(sizeof(float) * (size_t)(cq[B] + 1) * H * dv);
        o_ref = (float *)test_malloc(sizeof(float) * (size_t)(cq[B] + 1) * H * dv);
        lse = (float *)test_malloc(sizeof(float) * (size_t)(cq[B] + 1) * H);
        lse_ref = (float *)test_malloc(sizeof(float) * (size_t)(cq[B] + 1) * H);
        ws = test_malloc(info.workspace_bytes);
        poison_f32(o, (int64_t)cq[B] * H * dv);
        poison_f32(lse, (int64_t)cq[B] * H);
        poison_f32((float *)ws, (int64_t)(info.workspace_bytes / 4));
        memset(&a, 0, sizeof a);
        a.q = q;
        a.k = k;
        a.v = v;
        a.cu_seqlens_q = cq;
        a.cu_seqlens_k = ck;
        a.batch = B;
        a.num_heads = H;
        a.dqk = dqk;
        a.dv = dv;
        a.causal = causal;
        a.qkv_dtype = dt;
        a.q_scale = a.k_scale = dt == AITER_MLA_BF16 ? 0.0f : 0.5f;
        a.o_dtype = AITER_MLA_F32;
        a.o = o_ref;
        a.lse = lse_ref;
        CHECK_STATUS(aiter_mla_prefill_ref(&a), AITER_MLA_OK, "");
        a.o = o;
        a.lse = lse;
        a.plan = plan;
        a.plan_info = &info;
        a.workspace = ws;
        a.workspace_bytes = info.workspace_bytes;
        if (iter == 0) CHECK_OUT_OF_MEMORY(aiter_mla_prefill_ref_scheduled(&a));
        if (CHECK(aiter_mla_prefill_ref_scheduled(&a) == AITER_MLA_OK, "ps replay %d: %s", iter, aiter_mla_last_error()) && cq[B] > 0) {
            char what[64];
            snprintf(what, sizeof what, "ps replay %d (%d CUs, %s%s)", iter, ncu, aiter_mla_dtype_name(dt), causal ? ", causal" : "");
            CHECK_CLOSE(what, o, o_ref, (int64_t)cq[B] * H * dv, 1e-5, 0.99999);
            CHECK_LSE(what, lse, lse_ref, (int64_t)cq[B] * H);
        }
        if (info.workspace_bytes > 0 && !short_workspace_checked++) { /* the first plan that splits */
            aiter_mla_prefill_args e = a;
            e.workspace_bytes = info.workspace_bytes - 4;
            CHECK_STATUS(aiter_mla_prefill_ref_scheduled(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "workspace_bytes");
            e = a; /* the partials over the plan: the replay and the GPU call refuse it alike (the input
                      named is the plan, or the allocation after it that the workspace reaches) */
            e.workspace = plan;
            CHECK_STATUS(aiter_mla_prefill_ref_scheduled(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "workspace overlaps");
            CHECK_STATUS(aiter_mla_prefill(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "workspace overlaps");
            CHECK_STATUS(aiter_mla_prefill(&a, NULL), AITER_MLA_ERR_NO_GPU, "");
        }
        if (iter == 0) {
            aiter_mla_prefill_args e = a;
            e.num_heads = 3;
            CHECK_STATUS(aiter_mla_prefill_ref_scheduled(&e), AITER_MLA_ERR_PLAN_MISMATCH, "num_heads");
            CHECK_STATUS(aiter_mla_prefill_plan_build(&info, cq, ck, 5, causal, plan), AITER_MLA_ERR_PLAN_MISMATCH, "max_batch");
            {
                aiter_mla_prefill_plan_info bad_info = info;
                bad_info.off_work_indptr += 1000000;
                CHECK_STATUS(aiter_mla_prefill_plan_check(&bad_info, cq, ck, B, causal, plan), AITER_MLA_ERR_PLAN_MISMATCH, "plan_info");
            }
            d.tile_q = 24;
            CHECK_STATUS(aiter_mla_prefill_plan_get_info(&d, &info), AITER_MLA_ERR_INVALID_ARGUMENT, "tile_q");
        }
        free(q);
        free(k);
        free(v);
        free(o);
        free(o_ref);
        free(lse);
        free(lse_ref);
        free(ws);
    free_plan:
        free(plan);
    }
    CHECK(split_plans >= 6, "only %d of 24 prefill plans split a tile (test too weak)", split_plans);
    CHECK(short_workspace_checked > 0, "no prefill plan needed a workspace: its size check never ran");
    { /* one request of 4 units on 2 CUs: 2 + 2; handing CU 0's last item to CU 1 gives 1 + 3 */
        int32_t cq[2] = {0, 16}, ck[2] = {0, 64}, *plan;
        aiter_mla_prefill_plan_desc d;
        aiter_mla_prefill_plan_info info;
        memset(&d, 0, sizeof d);
        d.max_batch = 1;
        d.max_q_tokens = 16;
        d.num_heads = 1;
        d.num_cu = 2;
        d.tile_q = 16;
        d.kv_granularity = 16;
        aiter_mla_prefill_plan_get_info(&d, &info);
        plan = (int32_t *)test_malloc(sizeof(int32_t) * (size_t)info.plan_ints);
        CHECK_STATUS(aiter_mla_prefill_plan_build(&info, cq, ck, 1, 0, plan), AITER_MLA_OK, "");
        CHECK_STATUS(aiter_mla_prefill_plan_check(&info, cq, ck, 1, 0, plan), AITER_MLA_OK, "");
        CHECK(plan[info.off_work_indptr + 1] == 1 && plan[info.off_work_info + 5] == 32, "2 CUs x 2 units expected");
        plan[info.off_work_info + 5] = 16; /* piece 0: keys 0..16, piece 1: 16..64 */
        plan[info.off_work_info + 6] = 48;
        plan[info.off_work_info + AITER_MLA_WORK_INTS + 4] = 16;
        CHECK_STATUS(aiter_mla_prefill_plan_check(&info, cq, ck, 1, 0, plan), AITER_MLA_ERR_PLAN_INVALID, "share");
        free(plan);
    }
}

/* aiter_mla_prefill_plan_fit_lists: the list rule min(CUs, 16 CUs / H, U / 64), at least 1, on
 * the shapes it was measured on and a few more (132 CUs; U worked out by hand: a causal request
 * of n tiles over as many keys as rows has 1 + 2 + ... + n units of a tile's rows), a plan
 * built for each fitted count, a second call alike, and the refusals. */
static void test_prefill_plan_fit_lists(void) {
    static const struct {
        int heads, batch, sq, sk, causal, tile_q, gran, lists; /* batch requests of sq query rows over sk keys */
    } cases[] = {
        {128, 1, 4096, 4096, 1, 128, 0, 8},    /* U = 528 (32 tiles): 528 / 64 = 8 < 16 * 132 / 128 = 16 */
        {128, 4, 4096, 4096, 1, 128, 0, 16},   /* U = 2112: 33; 16 */
        {128, 1, 16384, 16384, 1, 128, 0, 16}, /* U = 8256: 129; 16 */
        {16, 1, 4096, 4096, 1, 128, 0, 8},     /* U = 528: 8; 132 */
        {16, 8, 8192, 8192, 1, 128, 0, 132},   /* U = 8 * 2080: 260; 16 * 132 / 16 = 132 */
        {8, 8, 8192, 8192, 1, 128, 0, 132},    /* U = 16640: 260; 264; the CUs, 132, least */
        {32, 2, 4096, 4096, 1, 128, 0, 16},    /* U = 1056: 16; 66 */
        {128, 1, 4096, 4096, 0, 128, 0, 16},   /* not causal: U = 32 * 32 = 1024: 16; 16 */
        {128, 1, 1024, 8192, 1, 128, 0, 7},    /* tile i of 8 sees 7168 + 128 i keys: U = 8 * 56 + 36 = 484: 7 */
        {128, 1, 4096, 4096, 1, 0, 0, 4},      /* tile_q 256 (the default): U = 2 (1 + ... + 16) = 272: 4 */
        {128, 1, 4096, 4096, 1, 128, 64, 16},  /* kv_granularity 64: U = 1056: 16; 16 */
        {128, 1, 100, 100, 1, 128, 0, 1},      /* U = 1: 0, at least 1 */
    };
    int c;
    for (c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++) {
        const int B = cases[c].batch;
        int32_t cq[9], ck[9], *plan;
        int b;
        aiter_mla_prefill_plan_desc d;
        aiter_mla_prefill_plan_info info;
        for (b = 0; b <= B; b++) {
            cq[b] = b * cases[c].sq;
            ck[b] = b * cases[c].sk;
        }
        memset(&d, 0, sizeof d);
        d.max_batch = B;
        d.max_q_tokens = cq[B];
        d.num_heads = cases[c].heads;
        d.tile_q = cases[c].tile_q;
        d.kv_granularity = cases[c].gran;
        if (!CHECK_STATUS(aiter_mla_prefill_plan_fit_lists(&d, 132, cq, ck, B, cases[c].causal), AITER_MLA_OK, "")) continue;
        CHECK(d.num_cu == cases[c].lists, "fit_lists case %d: %d lists, expected %d", c, d.num_cu, cases[c].lists);
        CHECK(d.tile_q == cases[c].tile_q && d.kv_granularity == cases[c].gran && d.num_heads == cases[c].heads,
              "fit_lists case %d changed another field", c);
        CHECK_STATUS(aiter_mla_prefill_plan_fit_lists(&d, 132, cq, ck, B, cases[c].causal), AITER_MLA_OK, "");
        CHECK(d.num_cu == cases[c].lists, "fit_lists case %d, a second call: %d lists", c, d.num_cu);
        if (!CHECK_STATUS(aiter_mla_prefill_plan_get_info(&d, &info), AITER_MLA_OK, "")) continue;
        plan = (int32_t *)test_malloc(sizeof(int32_t) * (size_t)info.plan_ints);
        CHECK_STATUS(aiter_mla_prefill_plan_build(&info, cq, ck, B, cases[c].causal, plan), AITER_MLA_OK, "");
        CHECK_STATUS(aiter_mla_prefill_plan_check(&info, cq, ck, B, cases[c].causal, plan), AITER_MLA_OK, "");
        free(plan);
    }
    {
        int32_t cq[3] = {0, 64, 128}, ck[3] = {0, 64, 128}, bad[3] = {0, 64, 32};
        aiter_mla_prefill_plan_desc d, e;
        memset(&d, 0, sizeof d);
        d.max_batch = 2;
        d.max_q_tokens = 128;
        d.num_heads = 16;
        d.num_cu = 8;
        CHECK_STATUS(aiter_mla_prefill_plan_fit_lists(NULL, 132, cq, ck, 2, 1), AITER_MLA_ERR_NULL_POINTER, "desc");
        CHECK_STATUS(aiter_mla_prefill_plan_fit_lists(&d, 132, NULL, ck, 2, 1), AITER_MLA_ERR_NULL_POINTER, "cu_seqlens_q");
        CHECK_STATUS(aiter_mla_prefill_plan_fit_lists(&d, 0, cq, ck, 2, 1), AITER_MLA_ERR_INVALID_ARGUMENT, "device_cu");
        CHECK_STATUS(aiter_mla_prefill_plan_fit_lists(&d, 132, cq, ck, 3, 1), AITER_MLA_ERR_PLAN_MISMATCH, "max_batch");
        CHECK_STATUS(aiter_mla_prefill_plan_fit_lists(&d, 132, cq, ck, 2, 2), AITER_MLA_ERR_INVALID_ARGUMENT, "causal");
        CHECK_STATUS(aiter_mla_prefill_plan_fit_lists(&d, 132, cq, bad, 2, 1), AITER_MLA_ERR_INVALID_ARGUMENT, "cu_seqlens_k");
        e = d;
        e.tile_q = 24;
        CHECK_STATUS(aiter_mla_prefill_plan_fit_lists(&e, 132, cq, ck, 2, 1), AITER_MLA_ERR_INVALID_ARGUMENT, "tile_q");
        CHECK(strstr(aiter_mla_last_error(), "prefill_plan_fit_lists") != NULL, "fit_lists' message names another call: %s",
              aiter_mla_last_error());
        CHECK(d.num_cu == 8 && e.num_cu == 8, "a refused fit_lists changed num_cu");
    }
}

/* =====================================================================================
 * GPU wrappers of the small ops: the same validation as their references (status and
 * message after the op name), ERR_NO_GPU only once it passes (empty work included: a build
 * without a GPU answers every GPU call alike); device-array contents are not checked by the
 * wrappers
 * ===================================================================================== */
/* ref_call and gpu_call on the same args; expect is the case's outcome. ERR_NO_GPU: the
 * reference accepts (returns OK) and the wrapper, having accepted too, says it has no GPU (this
 * build; also for empty work). Any other status: the reference refuses with exactly
 * that status, and the wrapper with the same status and the same message after the op name. */
#define CHECK_LIKE_REF(ref_call, gpu_call, expect, what)                                                              \
    do {                                                                                                              \
        char lr_msg_[320];                                                                                            \
        aiter_mla_status lr_exp_ = (expect), lr_ref_ = (ref_call), lr_gpu_;                                           \
        const int lr_accept_ = lr_exp_ == AITER_MLA_OK || lr_exp_ == AITER_MLA_ERR_NO_GPU;                            \
        snprintf(lr_msg_, sizeof lr_msg_, "%s", lr_ref_ == AITER_MLA_OK ? "" : aiter_mla_last_error());               \
        lr_gpu_ = (gpu_call);                                                                                         \
        if (lr_accept_)                                                                                               \
            CHECK(lr_ref_ == AITER_MLA_OK && lr_gpu_ == lr_exp_,                                                      \
                  "%s: expected reference OK and GPU wrapper %s; reference says %s \"%s\", GPU wrapper %s \"%s\"",    \
                  (what), testing_status_name(lr_exp_), testing_status_name(lr_ref_), lr_msg_,                        \
                  testing_status_name(lr_gpu_), aiter_mla_last_error());                                              \
        else                                                                                                          \
            CHECK(lr_ref_ == lr_exp_ && lr_gpu_ == lr_exp_ &&                                                         \
                      !strcmp(after_op_name(lr_msg_), after_op_name(aiter_mla_last_error())),                         \
                  "%s: expected %s (same message) from both; reference says %s \"%s\", GPU wrapper %s \"%s\"",        \
                  (what), testing_status_name(lr_exp_), testing_status_name(lr_ref_), lr_msg_,                        \
                  testing_status_name(lr_gpu_), aiter_mla_last_error());                                              \
    } while (0)

/* An output of op's reference moved over an input (args = base, then `mutation`): refused
 * before any write, the message naming the output ("o overlaps": which input it meets first
 * depends on where the arrays lie). Without the check these writes run past their arrays, which
 * ASan reports. */
#define REF_OVERLAP_CASE(op, args, base, mutation, named)                                                   \
    do {                                                                                                    \
        args = base;                                                                                        \
        mutation;                                                                                           \
        CHECK_STATUS(aiter_mla_##op##_ref(&args), AITER_MLA_ERR_INVALID_ARGUMENT, named);                   \
    } while (0)

/* REF_OVERLAP_CASE for an op whose GPU call sizes the arrays alike (every size a host field):
 * the GPU wrapper refuses it too, with the reference's message. */
#define OVERLAP_CASE(op, args, base, mutation, named)                                                                   \
    do {                                                                                                                \
        REF_OVERLAP_CASE(op, args, base, mutation, named);                                                              \
        CHECK_LIKE_REF(aiter_mla_##op##_ref(&args), aiter_mla_##op(&args, NULL), AITER_MLA_ERR_INVALID_ARGUMENT,        \
                       #op " { " #mutation " }");                                                                       \
    } while (0)

/* One validation case of op (aiter_mla_<op>_ref against aiter_mla_<op>): args = base, then
 * `mutation` on args, then CHECK_LIKE_REF with `expect`. */
#define LIKE_REF_CASE(op, args, base, mutation, expect)                                                         \
    do {                                                                                                        \
        args = base;                                                                                            \
        mutation;                                                                                               \
        CHECK_LIKE_REF(aiter_mla_##op##_ref(&args), aiter_mla_##op(&args, NULL), expect, #op " { " #mutation " }"); \
    } while (0)

static void test_small_op_wrappers(void) {
    { /* sparse index conversion */
        int32_t idx[8] = {0, 1, 70, -1, 5, 6, 7, 8}, req[2] = {0, 1}, bt[4] = {0, 1, 2, 3}, out[8], counts[2], st[2] = {0, 9};
        aiter_mla_sparse_index_args a, b;
        memset(&a, 0, sizeof a);
        a.indices = idx;
        a.req_id = req;
        a.block_table = bt;
        a.block_table_stride = 2;
        a.num_requests = 2;
        a.num_tokens = 2;
        a.topk = 4;
        a.out = out;
        a.valid_counts = counts;
        a.workspace_starts = st;
#define SI_CASE(mutation, expect) LIKE_REF_CASE(convert_sparse_indices, b, a, mutation, expect)
        SI_CASE(b.out = (int32_t *)((char *)out + 2), AITER_MLA_ERR_INVALID_ARGUMENT); /* int32 at 2 bytes */
        OVERLAP_CASE(convert_sparse_indices, b, a, b.valid_counts = req, "valid_counts overlaps");
        OVERLAP_CASE(convert_sparse_indices, b, a, b.out = idx + 4, "out overlaps");
        SI_CASE((void)0, AITER_MLA_ERR_NO_GPU);
        SWEEP(convert_sparse_indices, a, sweep_sparse_index_fields);
        SI_CASE(b.block_table = NULL, AITER_MLA_ERR_NO_GPU);
        SI_CASE(b.num_tokens = 0, AITER_MLA_ERR_NO_GPU);
        SI_CASE(b.num_tokens = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        SI_CASE(b.topk = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        SI_CASE(b.num_requests = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        SI_CASE(b.indices = NULL, AITER_MLA_ERR_NULL_POINTER);
        SI_CASE(b.req_id = NULL, AITER_MLA_ERR_NULL_POINTER);
        SI_CASE(b.out = NULL, AITER_MLA_ERR_NULL_POINTER);
        SI_CASE(b.out_stride = 3, AITER_MLA_ERR_INVALID_ARGUMENT);
        SI_CASE(b.indices_stride = (int64_t)1 << 40, AITER_MLA_ERR_INVALID_ARGUMENT);
        SI_CASE(b.block_size = 5000, AITER_MLA_ERR_INVALID_ARGUMENT);
        SI_CASE(b.block_table_stride = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        SI_CASE((b.block_table = NULL, b.workspace_starts = NULL), AITER_MLA_ERR_NULL_POINTER);
        SI_CASE((b.req_id = NULL, b.num_tokens = 0), AITER_MLA_ERR_NO_GPU);
#undef SI_CASE
        CHECK_STATUS(aiter_mla_convert_sparse_indices(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    }
    { /* filter_prefill_indices */
        int32_t idx[8] = {0, 1, 70, -1, 5, 6, 7, 8}, req[2] = {0, 1}, ctx[2] = {3, 6}, co[8], no[8];
        aiter_mla_filter_prefill_args a, b;
        memset(&a, 0, sizeof a);
        a.indices = idx;
        a.req_id = req;
        a.ctx_lens = ctx;
        a.num_requests = 2;
        a.num_tokens = 2;
        a.topk = 4;
        a.context_out = co;
        a.new_out = no;
#define FP_CASE(mutation, expect) LIKE_REF_CASE(filter_prefill_indices, b, a, mutation, expect)
        FP_CASE(b.new_out = (int32_t *)((char *)no + 2), AITER_MLA_ERR_INVALID_ARGUMENT);
        OVERLAP_CASE(filter_prefill_indices, b, a, b.new_out = ctx, "new_out overlaps");
        OVERLAP_CASE(filter_prefill_indices, b, a, b.context_out = idx + 2, "context_out overlaps");
        FP_CASE((void)0, AITER_MLA_ERR_NO_GPU);
        SWEEP(filter_prefill_indices, a, sweep_filter_fields);
        FP_CASE(b.num_tokens = 0, AITER_MLA_ERR_NO_GPU);
        FP_CASE(b.topk = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        FP_CASE(b.num_requests = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        FP_CASE(b.ctx_lens = NULL, AITER_MLA_ERR_NULL_POINTER);
        FP_CASE(b.context_out = NULL, AITER_MLA_ERR_NULL_POINTER);
        FP_CASE(b.new_out = NULL, AITER_MLA_ERR_NULL_POINTER);
        FP_CASE(b.indices = NULL, AITER_MLA_ERR_NULL_POINTER);
#undef FP_CASE
        CHECK_STATUS(aiter_mla_filter_prefill_indices(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    }
    { /* fp8_ds_mla writer */
        TEST_ALIGN16 uint16_t kvc[2 * 512], kpe[2 * 64];
        int64_t slots[2] = {1, -1};
        unsigned char cache[4 * 656 + 1]; /* + 1: room for the rows moved a byte (below) */
        aiter_mla_ds_mla_write_args a, b;
        int i;
        for (i = 0; i < 2 * 512; i++) kvc[i] = aiter_mla_f32_to_bf16((float)(i % 37) - 18.0f);
        for (i = 0; i < 2 * 64; i++) kpe[i] = aiter_mla_f32_to_bf16((float)i);
        memset(&a, 0, sizeof a);
        a.kv_c = kvc;
        a.k_pe = kpe;
        a.slot_mapping = slots;
        a.kv_cache = cache;
        a.num_blocks = 2;
        a.block_size = 2;
        a.num_tokens = 2;
#define DS_CASE(mutation, expect) LIKE_REF_CASE(ds_mla_write, b, a, mutation, expect)
        DS_CASE(b.kv_c = (const char *)kvc + 1, AITER_MLA_ERR_INVALID_ARGUMENT);
        DS_CASE(b.slot_mapping = (const int64_t *)((const char *)slots + INT64_ALIGN / 2), AITER_MLA_ERR_INVALID_ARGUMENT);
        DS_CASE(b.kv_cache = cache + 1, AITER_MLA_ERR_NO_GPU); /* fp8_ds_mla rows: bytes (the GPU wants 16, where it runs) */
        OVERLAP_CASE(ds_mla_write, b, a, b.kv_cache = slots, "kv_cache overlaps");
        DS_CASE((void)0, AITER_MLA_ERR_NO_GPU);
        SWEEP(ds_mla_write, a, sweep_ds_write_fields);
        CACHE_BYTES_CASES(ds_mla_write, b, a, kv_cache_bytes, 4 * 656, "kv_cache_bytes");
        DS_CASE((b.fp8_dtype = AITER_MLA_FP8_E4M3FNUZ, b.pow2_scales = 1, b.fp8_max = 224.0f), AITER_MLA_ERR_NO_GPU);
        DS_CASE(b.num_tokens = 0, AITER_MLA_ERR_NO_GPU);
        DS_CASE(b.fp8_dtype = AITER_MLA_BF16, AITER_MLA_ERR_UNSUPPORTED);
        DS_CASE(b.fp8_max = 500.0f, AITER_MLA_ERR_INVALID_ARGUMENT);
        DS_CASE((b.fp8_dtype = AITER_MLA_FP8_E4M3FNUZ, b.fp8_max = 448.0f), AITER_MLA_ERR_INVALID_ARGUMENT);
        DS_CASE(b.src_dtype = AITER_MLA_F32, AITER_MLA_ERR_UNSUPPORTED);
        DS_CASE(b.slot_mapping = NULL, AITER_MLA_ERR_NULL_POINTER);
        DS_CASE(b.kv_cache = NULL, AITER_MLA_ERR_NULL_POINTER);
        DS_CASE(b.pow2_scales = 2, AITER_MLA_ERR_INVALID_ARGUMENT);
        DS_CASE(b.pow2_scales = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        DS_CASE(b.num_blocks = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        DS_CASE(b.block_size = -2, AITER_MLA_ERR_INVALID_ARGUMENT);
        DS_CASE(b.kv_c_stride = 100, AITER_MLA_ERR_INVALID_ARGUMENT);
        DS_CASE(b.k_pe_stride = 63, AITER_MLA_ERR_INVALID_ARGUMENT);
#undef DS_CASE
        CHECK_STATUS(aiter_mla_ds_mla_write(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    }
    { /* context gather: cu_out_rows and seq_starts are device arrays for the GPU wrapper */
        TEST_ALIGN16 uint16_t cache[4 * 576], out[3 * 576];
        int32_t bt[4] = {0, 1, 2, 3}, cu[3] = {0, 2, 3}, cu_bad[3] = {0, 2, 1}, cu_big[3] = {0, 2, 9}, cu_zero[3] = {0, 0, 0};
        int32_t starts[2] = {0, 1}, starts_bad[2] = {0, -1};
        aiter_mla_gather_cache_args a, b;
        memset(cache, 0x3c, sizeof cache);
        memset(&a, 0, sizeof a);
        a.kv_cache = cache;
        a.num_blocks = 4;
        a.block_table = bt;
        a.block_table_stride = 2;
        a.cu_out_rows = cu;
        a.seq_starts = starts;
        a.batch = 2;
        a.out = out;
        a.out_rows = 3;
#define GA_CASE(mutation, expect) LIKE_REF_CASE(gather_cache, b, a, mutation, expect)
        GA_CASE(b.out = (char *)out + 1, AITER_MLA_ERR_INVALID_ARGUMENT);
        GA_CASE(b.kv_cache = (const char *)cache + 1, AITER_MLA_ERR_INVALID_ARGUMENT);
        OVERLAP_CASE(gather_cache, b, a, b.out = bt, "out overlaps");
        GA_CASE((void)0, AITER_MLA_ERR_NO_GPU);
        SWEEP(gather_cache, a, sweep_gather_fields);
        CACHE_BYTES_CASES(gather_cache, b, a, kv_cache_bytes, 4 * 576 * 2, "kv_cache_bytes");
        b = a; /* these bytes as fp8_ds_mla rows fit */
        b.cache_is_ds_mla = 1;
        b.kv_cache_bytes = 4 * 656;
        CHECK_STATUS(aiter_mla_gather_cache_ref(&b), AITER_MLA_OK, "");
        b.kv_cache_bytes = 4 * 656 - 1;
        CHECK_STATUS(aiter_mla_gather_cache(&b, NULL), AITER_MLA_ERR_BUFFER_TOO_SMALL, "kv_cache_bytes");
        GA_CASE((b.cache_is_ds_mla = 1, b.ds_mla_fp8 = AITER_MLA_FP8_E4M3FNUZ), AITER_MLA_ERR_NO_GPU);
        GA_CASE((b.cu_out_rows = cu_zero, b.out_rows = 0), AITER_MLA_ERR_NO_GPU);
        GA_CASE(b.cache_dtype = AITER_MLA_F32, AITER_MLA_ERR_UNSUPPORTED);
        GA_CASE((b.cache_is_ds_mla = 1, b.ds_mla_fp8 = AITER_MLA_BF16), AITER_MLA_ERR_UNSUPPORTED);
        GA_CASE(b.out_dtype = AITER_MLA_FP8_E4M3FN, AITER_MLA_ERR_UNSUPPORTED);
        GA_CASE((b.cache_dtype = AITER_MLA_FP8_E4M3FN, b.scale = -1.0f), AITER_MLA_ERR_INVALID_ARGUMENT);
        GA_CASE(b.batch = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        GA_CASE(b.out_rows = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        GA_CASE(b.cache_is_ds_mla = 2, AITER_MLA_ERR_INVALID_ARGUMENT);
        GA_CASE(b.block_table = NULL, AITER_MLA_ERR_NULL_POINTER);
        GA_CASE(b.cu_out_rows = NULL, AITER_MLA_ERR_NULL_POINTER);
        GA_CASE(b.out = NULL, AITER_MLA_ERR_NULL_POINTER);
        GA_CASE(b.kv_cache = NULL, AITER_MLA_ERR_NULL_POINTER);
        GA_CASE(b.block_table_stride = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
#undef GA_CASE
        /* what only the reference can read: contents of cu_out_rows and seq_starts */
        b = a;
        b.cu_out_rows = cu_bad;
        CHECK_STATUS(aiter_mla_gather_cache_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "cu_out_rows");
        CHECK_STATUS(aiter_mla_gather_cache(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        b.cu_out_rows = cu_big;
        CHECK_STATUS(aiter_mla_gather_cache_ref(&b), AITER_MLA_ERR_BUFFER_TOO_SMALL, "out_rows");
        CHECK_STATUS(aiter_mla_gather_cache(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        b = a;
        b.seq_starts = starts_bad;
        CHECK_STATUS(aiter_mla_gather_cache_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "seq_starts");
        CHECK_STATUS(aiter_mla_gather_cache(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        CHECK_STATUS(aiter_mla_gather_cache(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    }
    { /* V4 MODEL1 writer */
        TEST_ALIGN16 uint16_t kv[2 * 512];
        int64_t slots[2] = {1, -1};
        unsigned char cache[2 * 1728];
        aiter_mla_v4_cache_write_args a, b;
        int i;
        for (i = 0; i < 2 * 512; i++) kv[i] = aiter_mla_f32_to_bf16((float)(i % 37) - 18.0f);
        memset(&a, 0, sizeof a);
        a.kv = kv;
        a.slot_mapping = slots;
        a.kv_cache = cache;
        a.num_blocks = 2;
        a.block_size = 2;
        a.num_tokens = 2;
#define V4W_CASE(mutation, expect) LIKE_REF_CASE(v4_cache_write, b, a, mutation, expect)
        OVERLAP_CASE(v4_cache_write, b, a, b.kv_cache = slots, "kv_cache overlaps");
        V4W_CASE((void)0, AITER_MLA_ERR_NO_GPU);
        SWEEP(v4_cache_write, a, sweep_v4_write_fields);
        CACHE_BYTES_CASES(v4_cache_write, b, a, kv_cache_bytes, 2 * aiter_mla_v4_page_bytes(2), "kv_cache_bytes");
        V4W_CASE((b.fp8_dtype = AITER_MLA_FP8_E4M3FNUZ, b.fp8_max = 224.0f, b.src_dtype = AITER_MLA_F16), AITER_MLA_ERR_NO_GPU);
        V4W_CASE(b.num_tokens = 0, AITER_MLA_ERR_NO_GPU);
        V4W_CASE((b.num_tokens = 0, b.kv = NULL, b.slot_mapping = NULL), AITER_MLA_ERR_NO_GPU);
        V4W_CASE(b.num_tokens = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4W_CASE(b.fp8_dtype = AITER_MLA_BF16, AITER_MLA_ERR_UNSUPPORTED);
        V4W_CASE(b.fp8_max = 500.0f, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4W_CASE((b.fp8_dtype = AITER_MLA_FP8_E4M3FNUZ, b.fp8_max = 448.0f), AITER_MLA_ERR_INVALID_ARGUMENT);
        V4W_CASE(b.src_dtype = AITER_MLA_F32, AITER_MLA_ERR_UNSUPPORTED);
        V4W_CASE(b.kv = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4W_CASE(b.slot_mapping = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4W_CASE(b.kv_cache = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4W_CASE(b.num_blocks = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4W_CASE(b.block_size = 2000, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4W_CASE(b.page_stride_bytes = 100, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4W_CASE(b.kv_stride = 511, AITER_MLA_ERR_INVALID_ARGUMENT);
#undef V4W_CASE
        CHECK_STATUS(aiter_mla_v4_cache_write(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    }
    { /* V4 gather: seq_lens and gather_lens are device arrays for the GPU wrapper */
        unsigned char cache[4 * 1728];
        TEST_ALIGN16 float out[2 * 4 * 512];
        int32_t bt[4] = {0, 1, 2, 3}, sl[2] = {3, 2}, gl[2] = {2, 1}, sl_neg[2] = {3, -1}, gl_big[2] = {4, 1}, sl_big[2] = {9, 2};
        aiter_mla_v4_gather_args a, b;
        memset(cache, 0x3c, sizeof cache);
        memset(&a, 0, sizeof a);
        a.kv_cache = cache;
        a.num_blocks = 4;
        a.block_size = 2;
        a.block_table = bt;
        a.block_table_stride = 2;
        a.seq_lens = sl;
        a.gather_lens = gl;
        a.batch = 2;
        a.out = out;
        a.out_rows = 4;
        a.offset = 1;
#define V4G_CASE(mutation, expect) LIKE_REF_CASE(v4_gather, b, a, mutation, expect)
        OVERLAP_CASE(v4_gather, b, a, b.out = sl, "out overlaps");
        V4G_CASE((void)0, AITER_MLA_ERR_NO_GPU);
        SWEEP(v4_gather, a, sweep_v4_gather_fields);
        CACHE_BYTES_CASES(v4_gather, b, a, kv_cache_bytes, 4 * aiter_mla_v4_page_bytes(2), "kv_cache_bytes");
        V4G_CASE((b.gather_lens = NULL, b.offset = 0, b.out_dtype = AITER_MLA_F32, b.fp8_dtype = AITER_MLA_FP8_E4M3FNUZ),
                 AITER_MLA_ERR_NO_GPU);
        V4G_CASE((b.out_rows = 1, b.offset = 1, gl[0] = 0, gl[1] = 0), AITER_MLA_ERR_NO_GPU);
        gl[0] = 2;
        gl[1] = 1;
        V4G_CASE(b.out_dtype = AITER_MLA_FP8_E4M3FN, AITER_MLA_ERR_UNSUPPORTED);
        V4G_CASE(b.fp8_dtype = AITER_MLA_F16, AITER_MLA_ERR_UNSUPPORTED);
        V4G_CASE(b.batch = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4G_CASE(b.out_rows = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4G_CASE(b.offset = 5, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4G_CASE(b.offset = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4G_CASE((b.batch = (1 << 23) + 2, b.out_rows = INT32_MAX), AITER_MLA_ERR_INVALID_ARGUMENT); /* out's bytes pass int64 */
        V4G_CASE(b.block_table = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4G_CASE(b.seq_lens = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4G_CASE(b.out = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4G_CASE(b.kv_cache = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4G_CASE(b.block_table_stride = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4G_CASE(b.num_blocks = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4G_CASE(b.page_stride_bytes = 1000, AITER_MLA_ERR_INVALID_ARGUMENT);
#undef V4G_CASE
        /* what only the reference can read: contents of seq_lens and gather_lens */
        b = a;
        b.seq_lens = sl_neg;
        CHECK_STATUS(aiter_mla_v4_gather_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "seq_lens");
        CHECK_STATUS(aiter_mla_v4_gather(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        b = a;
        b.gather_lens = gl_big;
        CHECK_STATUS(aiter_mla_v4_gather_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "gather_lens");
        CHECK_STATUS(aiter_mla_v4_gather(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        b = a;
        b.seq_lens = sl_big;
        b.gather_lens = NULL;
        CHECK_STATUS(aiter_mla_v4_gather_ref(&b), AITER_MLA_ERR_BUFFER_TOO_SMALL, "out_rows");
        CHECK_STATUS(aiter_mla_v4_gather(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        CHECK_STATUS(aiter_mla_v4_gather(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    }
    { /* V4 SWA indices: query_start_loc, seq_lens and the ragged total are device data for the GPU wrapper */
        int32_t qsl[3] = {0, 1, 3}, seq[2] = {5, 2}, bt[4] = {0, 1, 2, 3}, dense[3 * 8], lens[3], idx[24], ptr[4];
        int32_t qsl_bad[3] = {0, 2, 1}, seq_bad[2] = {5, 1};
        aiter_mla_v4_swa_index_args a, b;
        memset(&a, 0, sizeof a);
        a.query_start_loc = qsl;
        a.seq_lens = seq;
        a.block_table = bt;
        a.block_table_stride = 2;
        a.block_size = 4;
        a.window = 8;
        a.num_reqs = 2;
        a.num_tokens = 3;
        a.out.dense = dense;
        a.out.lens = lens;
        a.out.indices = idx;
        a.out.indptr = ptr;
        a.out.capacity = 24;
#define V4S_CASE(mutation, expect) LIKE_REF_CASE(v4_swa_indices, b, a, mutation, expect)
        OVERLAP_CASE(v4_swa_indices, b, a, b.out.lens = seq, "out.lens overlaps");
        OVERLAP_CASE(v4_swa_indices, b, a, b.out.dense = qsl, "out.dense overlaps");
        OVERLAP_CASE(v4_swa_indices, b, a, b.out.indptr = idx + 1, "out.indptr overlaps out.indices");
        V4S_CASE((void)0, AITER_MLA_ERR_NO_GPU);
        SWEEP(v4_swa_indices, a, sweep_v4_swa_fields);
        V4S_CASE((b.out.dense = NULL, b.out.lens = NULL, b.block_size = 0, b.window = 0), AITER_MLA_ERR_NO_GPU);
        V4S_CASE((b.out.indices = NULL, b.out.indptr = NULL, b.token_offset = 1, b.num_tokens = 2), AITER_MLA_ERR_NO_GPU);
        V4S_CASE((b.num_tokens = 0, b.out.indices = NULL, b.out.indptr = NULL), AITER_MLA_ERR_NO_GPU); /* nothing to launch */
        V4S_CASE(b.num_tokens = 0, AITER_MLA_ERR_NO_GPU);                                     /* indptr[0] = 0 still */
        V4S_CASE(b.num_reqs = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4S_CASE(b.block_size = 2000, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4S_CASE(b.window = 70000, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4S_CASE(b.block_table_stride = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4S_CASE(b.num_tokens = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4S_CASE(b.token_offset = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4S_CASE(b.token_offset = INT32_MAX, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4S_CASE(b.out.dense_stride = 7, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4S_CASE(b.out.capacity = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4S_CASE(memset(&b.out, 0, sizeof b.out), AITER_MLA_ERR_NULL_POINTER);
        V4S_CASE(b.out.indptr = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4S_CASE(b.out.indices = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4S_CASE(b.query_start_loc = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4S_CASE(b.seq_lens = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4S_CASE(b.block_table = NULL, AITER_MLA_ERR_NULL_POINTER);
#undef V4S_CASE
        /* what only the reference can read */
        b = a;
        b.query_start_loc = qsl_bad;
        CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "query_start_loc");
        CHECK_STATUS(aiter_mla_v4_swa_indices(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        b = a;
        b.seq_lens = seq_bad;
        CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "seq_lens");
        CHECK_STATUS(aiter_mla_v4_swa_indices(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        b = a;
        b.out.capacity = 7; /* the lists hold 8 entries */
        CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&b), AITER_MLA_ERR_BUFFER_TOO_SMALL, "capacity");
        CHECK_STATUS(aiter_mla_v4_swa_indices(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        CHECK_STATUS(aiter_mla_v4_swa_indices(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    }
    { /* V4 global top-k */
        int32_t tk[2 * 4] = {0, -1, 5, 3, -1, -1, 2, 1}, t2r[2] = {0, 1}, bt[4] = {0, 1, 2, 3}, dense[8], lens[2], idx[8], ptr[3];
        aiter_mla_v4_topk_args a, b;
        memset(&a, 0, sizeof a);
        a.topk_indices = tk;
        a.topk = 4;
        a.token_to_req = t2r;
        a.block_table = bt;
        a.block_table_stride = 2;
        a.block_size = 4;
        a.num_reqs = 2;
        a.num_tokens = 2;
        a.out.dense = dense;
        a.out.lens = lens;
        a.out.indices = idx;
        a.out.indptr = ptr;
        a.out.capacity = 8;
#define V4K_CASE(mutation, expect) LIKE_REF_CASE(v4_global_topk, b, a, mutation, expect)
        OVERLAP_CASE(v4_global_topk, b, a, b.out.indices = t2r, "out.indices overlaps");
        V4K_CASE((void)0, AITER_MLA_ERR_NO_GPU);
        SWEEP(v4_global_topk, a, sweep_v4_topk_fields);
        V4K_CASE((b.topk = 2, b.topk_stride = 4, b.block_size = 0, b.out.dense = NULL), AITER_MLA_ERR_NO_GPU);
        V4K_CASE((b.num_tokens = 0, b.out.indices = NULL, b.out.indptr = NULL), AITER_MLA_ERR_NO_GPU);
        V4K_CASE(b.num_tokens = 0, AITER_MLA_ERR_NO_GPU);
        V4K_CASE(b.topk = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4K_CASE(b.topk_stride = 3, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4K_CASE(b.num_reqs = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4K_CASE(b.block_size = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4K_CASE(b.block_table_stride = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4K_CASE(b.num_tokens = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4K_CASE(b.out.dense_stride = 3, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4K_CASE((b.out.indices = NULL, b.out.dense = NULL, b.out.lens = NULL), AITER_MLA_ERR_NULL_POINTER);
        V4K_CASE(b.topk_indices = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4K_CASE(b.token_to_req = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4K_CASE(b.block_table = NULL, AITER_MLA_ERR_NULL_POINTER);
#undef V4K_CASE
        b = a;
        b.out.capacity = 4; /* 5 entries: only the device counts them */
        CHECK_STATUS(aiter_mla_v4_global_topk_ref(&b), AITER_MLA_ERR_BUFFER_TOO_SMALL, "capacity");
        CHECK_STATUS(aiter_mla_v4_global_topk(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        CHECK_STATUS(aiter_mla_v4_global_topk(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    }
    { /* V4 ratio-128 lists */
        int64_t pos[3] = {0, 300, 1000};
        int32_t t2r[3] = {0, 1, 0}, bt[8] = {0, 1, 2, 3, 4, 5, 6, 7}, dense[3 * 10], lens[3], idx[30], ptr[4];
        aiter_mla_v4_c128_args a, b;
        memset(&a, 0, sizeof a);
        a.positions = pos;
        a.token_to_req = t2r;
        a.block_table = bt;
        a.block_table_stride = 4;
        a.block_size = 2;
        a.num_reqs = 2;
        a.compress_ratio = 128;
        a.width = 10;
        a.num_tokens = 3;
        a.out.dense = dense;
        a.out.lens = lens;
        a.out.indices = idx;
        a.out.indptr = ptr;
        a.out.capacity = 30;
#define V4C_CASE(mutation, expect) LIKE_REF_CASE(v4_c128_indices, b, a, mutation, expect)
        OVERLAP_CASE(v4_c128_indices, b, a, b.out.lens = (int32_t *)pos, "out.lens overlaps");
        { /* one shared byte: is_valid_token (bytes) starting on the last byte of out.lens */
            int32_t lens_buf[4] = {0, 0, 0, 0x01010101};
            OVERLAP_CASE(v4_c128_indices, b, a, (b.out.lens = lens_buf, b.is_valid_token = (const uint8_t *)(lens_buf + 3) - 1),
                         "out.lens overlaps is_valid_token");
            OVERLAP_CASE(v4_c128_indices, b, a, (b.out.lens = lens_buf + 1, b.is_valid_token = (const uint8_t *)lens_buf + 2),
                         "out.lens overlaps is_valid_token"); /* the other way: its last byte on out.lens's first */
            LIKE_REF_CASE(v4_c128_indices, b, a, (b.out.lens = lens_buf, b.is_valid_token = (const uint8_t *)(lens_buf + 3)),
                          AITER_MLA_ERR_NO_GPU); /* adjacent, no byte shared */
        }
        V4C_CASE((void)0, AITER_MLA_ERR_NO_GPU);
        SWEEP(v4_c128_indices, a, sweep_v4_c128_fields);
        V4C_CASE((b.block_table = NULL, b.token_to_req = NULL, b.num_reqs = 0, b.block_size = -3), AITER_MLA_ERR_NO_GPU);
        V4C_CASE((b.compress_ratio = 0, b.block_size = 0, b.out.lens = NULL), AITER_MLA_ERR_NO_GPU);
        V4C_CASE((b.num_tokens = 0, b.out.indices = NULL, b.out.indptr = NULL), AITER_MLA_ERR_NO_GPU);
        V4C_CASE(b.num_tokens = 0, AITER_MLA_ERR_NO_GPU);
        V4C_CASE(b.width = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4C_CASE(b.width = (1 << 24) + 1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4C_CASE(b.compress_ratio = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4C_CASE(b.compress_ratio = 70000, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4C_CASE(b.num_reqs = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4C_CASE(b.block_size = 2000, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4C_CASE(b.block_table_stride = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4C_CASE(b.num_tokens = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4C_CASE(b.out.capacity = -2, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4C_CASE(b.token_to_req = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4C_CASE(b.positions = NULL, AITER_MLA_ERR_NULL_POINTER);
#undef V4C_CASE
        b = a;
        b.out.capacity = 2; /* 9 entries */
        CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&b), AITER_MLA_ERR_BUFFER_TOO_SMALL, "capacity");
        CHECK_STATUS(aiter_mla_v4_c128_indices(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        CHECK_STATUS(aiter_mla_v4_c128_indices(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    }
    { /* V4 combine: the token count, lengths and gather_lens are device data for the GPU wrapper */
        int32_t qsl[3] = {4, 5, 7}, seq[2] = {3, 10}, gl[2] = {3, 10}, tk[3 * 4] = {0, 1, 2, 3, 0, -1, 1, 2, 2, 1, 0, -1};
        int32_t qsl_empty[3] = {4, 4, 4}, qsl_bad[3] = {4, 6, 5}, gl_short[2] = {3, 8}, dense[3 * 12], lens[3], idx[36], ptr[4];
        aiter_mla_v4_combine_args a, b;
        memset(&a, 0, sizeof a);
        a.topk_indices = tk;
        a.topk = 4;
        a.query_start_loc = qsl;
        a.seq_lens = seq;
        a.gather_lens = gl;
        a.num_reqs = 2;
        a.window = 8;
        a.compress_ratio = 4;
        a.N = 3;
        a.M = 13;
        a.out.dense = dense;
        a.out.lens = lens;
        a.out.indices = idx;
        a.out.indptr = ptr;
        a.out.capacity = 36;
#define V4M_CASE(mutation, expect) LIKE_REF_CASE(v4_combine, b, a, mutation, expect)
        REF_OVERLAP_CASE(v4_combine, b, a, b.out.lens = qsl, "out.lens overlaps"); /* sized by the tokens */
        CHECK_STATUS(aiter_mla_v4_combine(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        { /* indptr[0] is written whatever the token count: the GPU call checks that element (each
             array here inside its own buffer, so that both calls name the same overlap) */
            int32_t qsl_buf[8] = {4, 5, 7}, seq_buf[8] = {3, 10}, idx_buf[40];
            OVERLAP_CASE(v4_combine, b, a, (b.query_start_loc = qsl_buf, b.out.indptr = qsl_buf),
                         "out.indptr overlaps query_start_loc");
            OVERLAP_CASE(v4_combine, b, a, (b.seq_lens = seq_buf, b.out.indptr = seq_buf + 1), "out.indptr overlaps seq_lens");
            OVERLAP_CASE(v4_combine, b, a, (b.out.indices = idx_buf, b.out.indptr = idx_buf + 35),
                         "out.indptr overlaps out.indices");
            LIKE_REF_CASE(v4_combine, b, a, (b.query_start_loc = qsl_buf, b.out.indptr = qsl_buf + 4), AITER_MLA_ERR_NO_GPU);
        }
        OVERLAP_CASE(v4_combine, b, a, b.out.indices = gl, "out.indices overlaps");       /* by out.capacity */
        V4M_CASE((void)0, AITER_MLA_ERR_NO_GPU);
        SWEEP(v4_combine, a, sweep_v4_combine_fields);
        V4M_CASE((b.gather_lens = NULL, b.window = 0, b.M = 140, b.out.dense = NULL), AITER_MLA_ERR_NO_GPU);
        V4M_CASE((b.topk = 0, b.topk_indices = NULL, b.compress_ratio = 0, b.N = 0, b.out.indptr = NULL, b.out.indices = NULL),
                 AITER_MLA_ERR_NO_GPU);
        V4M_CASE((b.query_start_loc = qsl_empty, b.topk_indices = NULL), AITER_MLA_ERR_NULL_POINTER); /* topk > 0 needs it, tokens or not */
        V4M_CASE((b.query_start_loc = qsl_empty, b.gather_lens = NULL), AITER_MLA_ERR_NO_GPU); /* no token: always launched */
        V4M_CASE(b.num_reqs = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4M_CASE(b.topk = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4M_CASE(b.topk_stride = 2, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4M_CASE(b.window = 70000, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4M_CASE(b.compress_ratio = 70000, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4M_CASE(b.M = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4M_CASE(b.N = 14, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4M_CASE(b.N = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4M_CASE(b.M = INT32_MAX, AITER_MLA_ERR_INVALID_ARGUMENT); /* M * num_reqs past int32 */
        V4M_CASE(b.out.dense_stride = 11, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4M_CASE((b.out.indptr = NULL, b.out.dense = NULL, b.out.lens = NULL), AITER_MLA_ERR_NULL_POINTER);
        V4M_CASE(b.query_start_loc = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4M_CASE(b.seq_lens = NULL, AITER_MLA_ERR_NULL_POINTER);
#undef V4M_CASE
        /* what only the reference can read */
        b = a;
        b.query_start_loc = qsl_bad;
        CHECK_STATUS(aiter_mla_v4_combine_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "query_start_loc");
        CHECK_STATUS(aiter_mla_v4_combine(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        b = a;
        b.gather_lens = gl_short;
        CHECK_STATUS(aiter_mla_v4_combine_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "gather_lens");
        CHECK_STATUS(aiter_mla_v4_combine(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        b = a;
        b.M = 12; /* N + 10 gathered rows pass it */
        CHECK_STATUS(aiter_mla_v4_combine_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "M");
        CHECK_STATUS(aiter_mla_v4_combine(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        b = a;
        b.topk_indices = NULL; /* topk > 0 needs it: both refuse */
        CHECK_STATUS(aiter_mla_v4_combine_ref(&b), AITER_MLA_ERR_NULL_POINTER, "topk_indices");
        CHECK_STATUS(aiter_mla_v4_combine(&b, NULL), AITER_MLA_ERR_NULL_POINTER, "topk_indices");
        b = a;
        b.out.capacity = 10;
        CHECK_STATUS(aiter_mla_v4_combine_ref(&b), AITER_MLA_ERR_BUFFER_TOO_SMALL, "capacity");
        CHECK_STATUS(aiter_mla_v4_combine(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        CHECK_STATUS(aiter_mla_v4_combine(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    }
    { /* V4 ragged copy: indptr's contents are device data for the GPU wrapper */
        int32_t in[6] = {9, 8, 7, 6, 5, 4}, ptr[3] = {1, 3, 6}, ptr_back[3] = {1, 0, 6}, ptr_neg[3] = {-1, 3, 6}, ib[8], pb[4];
        int64_t dropped = 0;
        aiter_mla_v4_ragged_copy_args a, b;
        memset(&a, 0, sizeof a);
        a.indices = in;
        a.indptr = ptr;
        a.num_rows = 2;
        a.max_entries_per_row = 3;
        a.indices_buffer = ib;
        a.indices_buffer_capacity = 6;
        a.indptr_buffer = pb;
        a.indptr_buffer_capacity = 3;
        a.num_dropped = &dropped;
#define V4R_CASE(mutation, expect) LIKE_REF_CASE(v4_copy_ragged, b, a, mutation, expect)
        OVERLAP_CASE(v4_copy_ragged, b, a, b.indptr_buffer = ptr, "indptr_buffer overlaps");
        V4R_CASE((void)0, AITER_MLA_ERR_NO_GPU);
        SWEEP(v4_copy_ragged, a, sweep_v4_copy_fields);
        V4R_CASE((b.clamp = 1, b.max_entries_per_row = 2, b.indices_buffer_capacity = 4, b.num_dropped = NULL), AITER_MLA_ERR_NO_GPU);
        V4R_CASE((b.num_rows = 0, b.indices = NULL), AITER_MLA_ERR_NO_GPU); /* indptr_buffer[0] and num_dropped still */
        V4R_CASE(b.num_rows = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4R_CASE(b.max_entries_per_row = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4R_CASE(b.clamp = 2, AITER_MLA_ERR_INVALID_ARGUMENT);
        V4R_CASE(b.indptr_buffer_capacity = 2, AITER_MLA_ERR_BUFFER_TOO_SMALL);
        V4R_CASE(b.indices_buffer_capacity = 5, AITER_MLA_ERR_BUFFER_TOO_SMALL);
        V4R_CASE(b.indptr = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4R_CASE(b.indptr_buffer = NULL, AITER_MLA_ERR_NULL_POINTER);
        V4R_CASE(b.indices_buffer = NULL, AITER_MLA_ERR_NULL_POINTER);
#undef V4R_CASE
        /* what only the reference can read: long rows with clamp = 0 (the GPU cuts them), indptr, indices NULL */
        b = a;
        b.max_entries_per_row = 2;
        CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&b), AITER_MLA_ERR_BUFFER_TOO_SMALL, "max_entries_per_row");
        CHECK_STATUS(aiter_mla_v4_copy_ragged(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        b = a;
        b.indptr = ptr_back;
        CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "indptr");
        CHECK_STATUS(aiter_mla_v4_copy_ragged(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        b.indptr = ptr_neg;
        CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "indptr");
        CHECK_STATUS(aiter_mla_v4_copy_ragged(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        b = a;
        b.indices = NULL;
        CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&b), AITER_MLA_ERR_NULL_POINTER, "indices");
        CHECK_STATUS(aiter_mla_v4_copy_ragged(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        CHECK_STATUS(aiter_mla_v4_copy_ragged(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    }
    { /* merge of attention states */
        TEST_ALIGN16 uint16_t op[2 * 3 * 8], os[2 * 3 * 8], o[2 * 3 * 8];
        TEST_ALIGN16 float lp[6] = {0.0f, 1.0f, -INFINITY, INFINITY, 2.0f, 3.0f}, ls[6] = {1.0f, -1.0f, -INFINITY, 0.5f, INFINITY, 3.0f}, lse[6];
        aiter_mla_merge_args a, b;
        int i;
        for (i = 0; i < 48; i++) {
            op[i] = aiter_mla_f32_to_bf16((float)i);
            os[i] = aiter_mla_f32_to_bf16((float)-i);
        }
        memset(&a, 0, sizeof a);
        a.o_prefix = op;
        a.lse_prefix = lp;
        a.o_suffix = os;
        a.lse_suffix = ls;
        a.o = o;
        a.lse = lse;
        a.num_tokens = 2;
        a.num_heads = 3;
        a.head_dim = 8;
#define MG_CASE(mutation, expect) LIKE_REF_CASE(merge_attn_states, b, a, mutation, expect)
        MG_CASE(b.o_suffix = (const char *)os + 1, AITER_MLA_ERR_INVALID_ARGUMENT);
        MG_CASE(b.lse = (float *)((char *)lse + 2), AITER_MLA_ERR_INVALID_ARGUMENT);
        MG_CASE((void)0, AITER_MLA_ERR_NO_GPU);
        SWEEP(merge_attn_states, a, sweep_merge_fields);
        MG_CASE(b.lse = NULL, AITER_MLA_ERR_NO_GPU);
        MG_CASE(b.num_tokens = 0, AITER_MLA_ERR_NO_GPU);
        MG_CASE(b.num_tokens = -3, AITER_MLA_ERR_INVALID_ARGUMENT);
        MG_CASE(b.dtype = AITER_MLA_FP8_E4M3FN, AITER_MLA_ERR_UNSUPPORTED);
        MG_CASE(b.num_heads = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
        MG_CASE(b.head_dim = 70000, AITER_MLA_ERR_INVALID_ARGUMENT);
        MG_CASE(b.lse_suffix = NULL, AITER_MLA_ERR_NULL_POINTER);
        MG_CASE(b.o = NULL, AITER_MLA_ERR_NULL_POINTER);
#undef MG_CASE
        CHECK_STATUS(aiter_mla_merge_attn_states(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    }
}

/* =====================================================================================
 * every entry point refuses a NULL or zeroed argument struct with a status (never a crash)
 * ===================================================================================== */
/* GPU wrappers of prefill and sparse attention: the references' validation, plus what only
 * the GPU path needs (max_seqlen_q without a plan, aligned buffers, 32-bit index range). */
static void test_attention_wrappers(void) {
    static TEST_ALIGN16 uint16_t q[4 * 2 * 192], k[6 * 2 * 192], v[6 * 2 * 128], o[4 * 2 * 128];
    static TEST_ALIGN16 uint16_t sq[2 * 4 * 576], so[2 * 4 * 512];
    uint16_t *cache = (uint16_t *)test_calloc((8 * 576 + 8) * 2); /* malloc: 16-byte aligned */
    int32_t cq[3] = {0, 1, 4}, ck[3] = {0, 2, 6}, idx[2 * 3] = {0, 5, -1, 7, 2, 2};
    TEST_ALIGN16 float lse[2 * 4];
    aiter_mla_prefill_args a, b;
    aiter_mla_sparse_args s, t;
    memset(&a, 0, sizeof a);
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.lse = lse;
    a.cu_seqlens_q = cq;
    a.cu_seqlens_k = ck;
    a.batch = 2;
    a.max_seqlen_q = 3;
    a.num_heads = 2;
    a.causal = 1;
#define PF_CASE(mutation, expect) LIKE_REF_CASE(prefill, b, a, mutation, expect)
    PF_CASE(b.k = (const char *)k + 1, AITER_MLA_ERR_INVALID_ARGUMENT); /* checked by the plan-less GPU call too */
    PF_CASE(b.o = (char *)o + 1, AITER_MLA_ERR_INVALID_ARGUMENT);
    REF_OVERLAP_CASE(prefill, b, a, b.lse = (float *)ck, "lse overlaps");
    REF_OVERLAP_CASE(prefill, b, a, b.o = k, "o overlaps");
    REF_OVERLAP_CASE(prefill, b, a, b.o = (void *)a.q, "o overlaps q");
    PF_CASE((void)0, AITER_MLA_ERR_NO_GPU);
    SWEEP(prefill, a, sweep_prefill_fields);
    PF_CASE(b.dqk = 100, AITER_MLA_ERR_UNSUPPORTED);
    PF_CASE((b.dqk = 128, b.dv = 192), AITER_MLA_ERR_UNSUPPORTED);
    PF_CASE(b.num_heads = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
    PF_CASE(b.q = NULL, AITER_MLA_ERR_NULL_POINTER);
    PF_CASE(b.qkv_dtype = AITER_MLA_F32, AITER_MLA_ERR_UNSUPPORTED);
    PF_CASE(b.sm_scale = -1.0f, AITER_MLA_ERR_INVALID_ARGUMENT);
    PF_CASE(b.q_stride_token = -3, AITER_MLA_ERR_INVALID_ARGUMENT);
    PF_CASE(b.k_stride_head = (int64_t)1 << 32, AITER_MLA_ERR_INVALID_ARGUMENT); /* x 2 heads: the default token stride */
    PF_CASE(b.v_scale = -1.0f, AITER_MLA_ERR_INVALID_ARGUMENT);
    PF_CASE(b.num_cu = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
    PF_CASE(b.num_cu = 65537, AITER_MLA_ERR_INVALID_ARGUMENT);
#undef PF_CASE
    b = a; /* the message names the scale that is wrong */
    b.k_scale = -1.0f;
    CHECK_STATUS(aiter_mla_prefill_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "k_scale");
    b = a; /* fp8: sm_scale x q_scale x k_scale is the kernels' one fp32 score factor, bounded like each scale */
    b.qkv_dtype = AITER_MLA_FP8_E4M3FN, b.sm_scale = 1e10f, b.q_scale = 1e10f, b.k_scale = 1e10f;
    CHECK_STATUS(aiter_mla_prefill_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "sm_scale x q_scale x k_scale");
    CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "sm_scale x q_scale x k_scale");
    b.qkv_dtype = a.qkv_dtype; /* bf16: the fp8 scales do not apply */
    CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
    b = a; /* and the token stride whose default passes 2^32 */
    b.v_stride_head = (int64_t)1 << 32;
    CHECK_STATUS(aiter_mla_prefill_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "v_stride_token = 0 means");
    /* what only the GPU path checks; cu_seqlens contents are device data there */
    b = a;
    b.max_seqlen_q = 0;
    CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "max_seqlen_q");
    CHECK_KERNEL_LIKE_CALL(prefill, &b);
    b = a;
    b.batch = INT32_MAX - 1; /* the reference's limit is the GPU's too (the grid counts requests in int64) */
    CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
    CHECK_KERNEL_LIKE_CALL(prefill, &b);
    b.batch = INT32_MAX; /* cu_seqlens have batch + 1 entries */
    CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "batch");
    CHECK_KERNEL_LIKE_CALL(prefill, &b);
    b = a;
    b.num_cu = -1;
    CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "num_cu");
    CHECK_KERNEL_LIKE_CALL(prefill, &b);
    b.num_cu = 65537;
    CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "num_cu");
    CHECK_KERNEL_LIKE_CALL(prefill, &b);
    b.num_cu = 65536;
    CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
    CHECK_KERNEL_LIKE_CALL(prefill, &b);
    b = a;
    cq[1] = 9; /* not monotone: the reference refuses, the GPU wrapper cannot read it */
    CHECK_STATUS(aiter_mla_prefill_ref(&b), AITER_MLA_ERR_INVALID_ARGUMENT, "cu_seqlens_q");
    CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
    CHECK_KERNEL_LIKE_CALL(prefill, &b);
    cq[1] = 1;
    { /* with a persistent plan: plan_info must match, the workspace fit and be aligned */
        aiter_mla_prefill_plan_desc pd;
        aiter_mla_prefill_plan_info info;
        int32_t *plan;
        float *ws;
        memset(&pd, 0, sizeof pd);
        pd.max_batch = 2;
        pd.max_q_tokens = 4;
        pd.num_heads = 2;
        pd.num_cu = 3;
        CHECK_STATUS(aiter_mla_prefill_plan_get_info(&pd, &info), AITER_MLA_OK, "");
        SWEEP(prefill_plan_get_info, pd, sweep_prefill_desc_fields);
        plan = (int32_t *)test_malloc((size_t)info.plan_ints * 4);
        ws = (float *)test_malloc(info.workspace_bytes + 64);
        CHECK_STATUS(aiter_mla_prefill_plan_build(&info, cq, ck, 2, 1, plan), AITER_MLA_OK, "");
        b = a;
        b.max_seqlen_q = 0; /* unused with a plan */
        b.plan = plan;
        b.plan_info = &info;
        b.workspace = ws;
        b.workspace_bytes = info.workspace_bytes;
        CHECK_STATUS(aiter_mla_prefill_ref_scheduled(&b), AITER_MLA_OK, "");
        CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_NO_GPU, "");
        CHECK_KERNEL_LIKE_CALL(prefill, &b);
        b.workspace = (char *)ws + 4;
        CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "workspace");
        CHECK_KERNEL_LIKE_CALL(prefill, &b);
        b.workspace = ws;
        b.workspace_bytes = info.workspace_bytes - 4;
        CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_BUFFER_TOO_SMALL, "workspace_bytes");
        CHECK_KERNEL_LIKE_CALL(prefill, &b);
        b.workspace_bytes = info.workspace_bytes;
        b.num_heads = 1;
        CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_PLAN_MISMATCH, "num_heads");
        CHECK_KERNEL_LIKE_CALL(prefill, &b);
        b.num_heads = 2;
        info.off_work_info += 1000000; /* a tampered offset the launch would trust */
        CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_PLAN_MISMATCH, "plan_info");
        CHECK_KERNEL_LIKE_CALL(prefill, &b);
        info.off_work_info -= 1000000;
        b.plan_info = NULL;
        CHECK_STATUS(aiter_mla_prefill(&b, NULL), AITER_MLA_ERR_NULL_POINTER, "plan_info");
        CHECK_KERNEL_LIKE_CALL(prefill, &b);
        free(plan);
        free(ws);
    }

    memset(&s, 0, sizeof s);
    s.q = sq;
    s.kv_cache = cache;
    s.num_slots = 8;
    s.indices = idx;
    s.o = so;
    s.num_tokens = 2;
    s.num_heads = 4;
    s.topk = 3;
#define SP_CASE(mutation, expect) LIKE_REF_CASE(sparse_attention, t, s, mutation, expect)
    SP_CASE(t.indices = (const int32_t *)((const char *)idx + 2), AITER_MLA_ERR_INVALID_ARGUMENT);
    SP_CASE(t.q = (const char *)sq + 1, AITER_MLA_ERR_INVALID_ARGUMENT);
    OVERLAP_CASE(sparse_attention, t, s, t.lse = (float *)idx, "lse overlaps");
    OVERLAP_CASE(sparse_attention, t, s, t.o = (void *)s.q, "o overlaps q");
    OVERLAP_CASE(sparse_attention, t, s, t.max_logits = (float *)s.q + 9, "max_logits overlaps q");
    SP_CASE((void)0, AITER_MLA_ERR_NO_GPU);
    SWEEP(sparse_attention, s, sweep_sparse_fields);
    CACHE_BYTES_CASES(sparse_attention, t, s, kv_cache_bytes, 8 * 576 * 2, "kv_cache_bytes");
    t = s; /* a cache of fp8_ds_mla rows with cache_is_ds_mla left 0: refused, not read as bf16 rows */
    t.kv_cache_bytes = 8 * 656;
    CHECK_STATUS(aiter_mla_sparse_attention_ref(&t), AITER_MLA_ERR_BUFFER_TOO_SMALL, "kv_cache_bytes");
    CHECK_STATUS(aiter_mla_sparse_attention(&t, NULL), AITER_MLA_ERR_BUFFER_TOO_SMALL, "kv_cache_bytes");
    SP_CASE(t.num_tokens = 0, AITER_MLA_ERR_NO_GPU);
    SP_CASE(t.num_heads = 129, AITER_MLA_ERR_INVALID_ARGUMENT);
    SP_CASE(t.topk = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
    SP_CASE(t.indices_stride = 2, AITER_MLA_ERR_INVALID_ARGUMENT); /* below topk */
    SP_CASE(t.indices_stride = (int64_t)1 << 31, AITER_MLA_ERR_INVALID_ARGUMENT);
    SP_CASE(t.indices = NULL, AITER_MLA_ERR_NULL_POINTER);
    SP_CASE(t.q_dtype = AITER_MLA_FP8_E4M3FN, AITER_MLA_ERR_UNSUPPORTED);
    SP_CASE((t.cache_is_ds_mla = 1, t.ds_mla_fp8 = AITER_MLA_BF16), AITER_MLA_ERR_UNSUPPORTED);
    SP_CASE(t.sm_scale = -2.0f, AITER_MLA_ERR_INVALID_ARGUMENT);
    SP_CASE(t.cache_is_ds_mla = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
    SP_CASE(t.keys_read_once = 2, AITER_MLA_ERR_INVALID_ARGUMENT);
    SP_CASE(t.keys_read_once = 1, AITER_MLA_ERR_NO_GPU);
#undef SP_CASE
    t = s;
    t.num_tokens = 1 << 20;
    t.topk = 1 << 12; /* 2^32 entries: past the kernels' 32-bit index range */
    CHECK_STATUS(aiter_mla_sparse_attention(&t, NULL), AITER_MLA_ERR_UNSUPPORTED, "num_tokens");
    CHECK_KERNEL_LIKE_CALL(sparse_attention, &t);
    t = s;
    t.num_tokens = 1 << 20;
    t.indices_stride = 1 << 12; /* rows of 3 entries 4096 apart: the same range */
    CHECK_STATUS(aiter_mla_sparse_attention(&t, NULL), AITER_MLA_ERR_UNSUPPORTED, "indices_stride");
    CHECK_KERNEL_LIKE_CALL(sparse_attention, &t);
    t = s;
    t.kv_cache = (const char *)cache + 2;
    CHECK_STATUS(aiter_mla_sparse_attention(&t, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_cache");
    CHECK_KERNEL_LIKE_CALL(sparse_attention, &t);
    t.num_tokens = 0; /* nothing to launch: the cache's alignment is not checked, by the query either */
    CHECK_STATUS(aiter_mla_sparse_attention(&t, NULL), AITER_MLA_ERR_NO_GPU, "AITER_MLA_NO_GPU");
    CHECK_KERNEL_LIKE_CALL(sparse_attention, &t);
    t = s; /* no tokens, q off its alignment: the call, its query and the reference refuse it alike */
    t.num_tokens = 0;
    t.q = (const char *)s.q + 1;
    CHECK_STATUS(aiter_mla_sparse_attention(&t, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "q");
    CHECK_STATUS(aiter_mla_sparse_attention_ref(&t), AITER_MLA_ERR_INVALID_ARGUMENT, "q");
    CHECK_KERNEL_LIKE_CALL(sparse_attention, &t);
    free(cache);
}

static void test_null_and_zeroed_args(void) {
    aiter_mla_head_pad_args hp;
    aiter_mla_expand_page_indices_args ep;
    aiter_mla_decode_metadata_args md;
    aiter_mla_decode_plan_desc dd;
    aiter_mla_decode_plan_info di;
    aiter_mla_decode_args da;
    aiter_mla_reduce_args ra;
    aiter_mla_merge_args ma;
    aiter_mla_prefill_args pa;
    aiter_mla_prefill_plan_desc pd;
    aiter_mla_prefill_plan_info pi;
    aiter_mla_kv_cache_write_args kw;
    aiter_mla_sparse_index_args si;
    aiter_mla_filter_prefill_args fp;
    aiter_mla_ds_mla_write_args dw;
    aiter_mla_sparse_args sa;
    aiter_mla_gather_cache_args ga;
    int32_t one[2] = {0, 1}, plan[64];
    memset(&hp, 0, sizeof hp);
    memset(&ep, 0, sizeof ep);
    memset(&md, 0, sizeof md);
    memset(&dd, 0, sizeof dd);
    memset(&di, 0, sizeof di);
    memset(&da, 0, sizeof da);
    memset(&ra, 0, sizeof ra);
    memset(&ma, 0, sizeof ma);
    memset(&pa, 0, sizeof pa);
    memset(&pd, 0, sizeof pd);
    memset(&pi, 0, sizeof pi);
    memset(&kw, 0, sizeof kw);
    memset(&si, 0, sizeof si);
    memset(&fp, 0, sizeof fp);
    memset(&dw, 0, sizeof dw);
    memset(&sa, 0, sizeof sa);
    memset(&ga, 0, sizeof ga);
    /* NULL args: a null-pointer status naming "args" (or the first pointer) */
    CHECK_STATUS(aiter_mla_pad_q_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_unpad_o(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_expand_page_indices(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_decode_metadata_build(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_decode_plan_get_info(NULL, &di), AITER_MLA_ERR_NULL_POINTER, "desc");
    CHECK_STATUS(aiter_mla_decode_plan_build(NULL, one, one, one, 1, plan), AITER_MLA_ERR_NULL_POINTER, "plan_info");
    CHECK_STATUS(aiter_mla_decode_plan_check(NULL, one, one, one, 1, plan), AITER_MLA_ERR_NULL_POINTER, "plan_info");
    CHECK_STATUS(aiter_mla_decode(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_KERNEL_LIKE_CALL(decode, NULL);
    CHECK_STATUS(aiter_mla_decode_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_decode_ref_scheduled(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_reduce_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_merge_attn_states_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_prefill_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_prefill_ref_scheduled(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_prefill_plan_get_info(NULL, &pi), AITER_MLA_ERR_NULL_POINTER, "desc");
    CHECK_STATUS(aiter_mla_prefill_plan_build(NULL, one, one, 1, 0, plan), AITER_MLA_ERR_NULL_POINTER, "plan_info");
    CHECK_STATUS(aiter_mla_prefill_plan_check(NULL, one, one, 1, 0, plan), AITER_MLA_ERR_NULL_POINTER, "plan_info");
    CHECK_STATUS(aiter_mla_kv_cache_write(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_filter_prefill_indices_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_ds_mla_write_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_sparse_attention_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_sparse_attention(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_KERNEL_LIKE_CALL(sparse_attention, NULL);
    CHECK_STATUS(aiter_mla_prefill(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_KERNEL_LIKE_CALL(prefill, NULL);
    CHECK_STATUS(aiter_mla_gather_cache_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    /* zeroed structs: refused with a status (which field depends on the op), or a no-op */
    CHECK_STATUS(aiter_mla_pad_q_ref(&hp), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    CHECK_STATUS(aiter_mla_expand_page_indices_ref(&ep), AITER_MLA_ERR_INVALID_ARGUMENT, "block_table_stride");
    CHECK(aiter_mla_decode_metadata_build(&md) != AITER_MLA_OK, "zeroed metadata args accepted");
    CHECK(aiter_mla_decode_plan_get_info(&dd, &di) != AITER_MLA_OK, "zeroed plan desc accepted");
    CHECK(aiter_mla_decode_plan_build(&di, one, one, one, 1, plan) != AITER_MLA_OK, "zeroed plan info accepted");
    CHECK(aiter_mla_decode(&da, NULL) != AITER_MLA_OK && aiter_mla_decode(&da, NULL) != AITER_MLA_ERR_NO_GPU,
          "zeroed decode args passed validation");
    CHECK(aiter_mla_decode_ref(&da) != AITER_MLA_OK, "zeroed decode args accepted");
    CHECK(aiter_mla_decode_ref_scheduled(&da) != AITER_MLA_OK, "zeroed decode args accepted");
    CHECK(aiter_mla_reduce_ref(&ra) != AITER_MLA_OK, "zeroed reduce args accepted");
    CHECK(aiter_mla_merge_attn_states_ref(&ma) != AITER_MLA_OK, "zeroed merge args accepted");
    CHECK(aiter_mla_prefill_ref(&pa) != AITER_MLA_OK, "zeroed prefill args accepted");
    CHECK(aiter_mla_prefill_ref_scheduled(&pa) != AITER_MLA_OK, "zeroed prefill args accepted");
    CHECK(aiter_mla_prefill_plan_get_info(&pd, &pi) != AITER_MLA_OK, "zeroed prefill plan desc accepted");
    CHECK(aiter_mla_prefill_plan_build(&pi, one, one, 1, 0, plan) != AITER_MLA_OK, "zeroed prefill plan info accepted");
    CHECK_STATUS(aiter_mla_kv_cache_write_ref(&kw), AITER_MLA_ERR_INVALID_ARGUMENT, "num_blocks");
    CHECK(aiter_mla_convert_sparse_indices_ref(&si) != AITER_MLA_OK, "zeroed sparse index args accepted");
    CHECK(aiter_mla_filter_prefill_indices_ref(&fp) != AITER_MLA_OK, "zeroed filter args accepted");
    CHECK_STATUS(aiter_mla_ds_mla_write_ref(&dw), AITER_MLA_ERR_INVALID_ARGUMENT, "num_blocks");
    CHECK(aiter_mla_sparse_attention_ref(&sa) != AITER_MLA_OK, "zeroed sparse args accepted");
    CHECK(aiter_mla_gather_cache_ref(&ga) != AITER_MLA_OK, "zeroed gather args accepted");
    CHECK(aiter_mla_merge_attn_states(&ma, NULL) != AITER_MLA_OK, "zeroed merge args accepted");
    CHECK(aiter_mla_convert_sparse_indices(&si, NULL) != AITER_MLA_OK, "zeroed sparse index args accepted");
    CHECK(aiter_mla_filter_prefill_indices(&fp, NULL) != AITER_MLA_OK, "zeroed filter args accepted");
    CHECK_STATUS(aiter_mla_ds_mla_write(&dw, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "num_blocks");
    CHECK(aiter_mla_gather_cache(&ga, NULL) != AITER_MLA_OK, "zeroed gather args accepted");
    CHECK(aiter_mla_decode_plan_view_of(NULL, plan).work_info == NULL, "view of a NULL info");
    aiter_mla_lse_base2_to_natural(NULL, 5); /* no-op */
}

/* =====================================================================================
 * DeepSeek V4 (SPEC 7): MODEL1 pages, index builders, attention, chunked prefill
 * ===================================================================================== */
#define V4_SENTINEL 0x5a5a5a5a /* int32 poison of the builders' outputs */

static int64_t naive_v4_page_bytes(int bs) { return ((int64_t)bs * 584 + 575) / 576 * 576; }
/* The bytes a key list's fields describe: its pages, or its rows of 512 values. */
static int64_t v4_keys_cache_bytes(const aiter_mla_v4_keys *k) {
    if (k->rows) return k->num_blocks * 512 * (int64_t)test_dtype_bytes(k->dtype ? k->dtype : AITER_MLA_BF16);
    return k->num_blocks * (k->page_stride_bytes ? k->page_stride_bytes : naive_v4_page_bytes(k->block_size ? k->block_size : 64));
}

/* the test's own reading of a MODEL1 token: rows of 576 bytes, then 8-byte scale records */
static void naive_v4_row(const unsigned char *cache, int64_t page_bytes, int bs, int64_t slot, int fnuz, double *out) {
    const unsigned char *page = cache + slot / bs * page_bytes;
    const int off = (int)(slot % bs);
    int d;
    for (d = 0; d < 448; d++) out[d] = ref_fp8_to_f64(page[off * 576 + d], fnuz) * ldexp(1.0, (int)page[bs * 576 + off * 8 + d / 64] - 127);
    for (d = 0; d < 64; d++) {
        uint16_t hb;
        memcpy(&hb, page + off * 576 + 448 + 2 * d, 2);
        out[448 + d] = ref_bf16_to_f64(hb);
    }
}

/* expected exponent byte: ceil(log2(max(amax, 1e-4) / fmax)) + 127 (frexp, in double), <= 254 */
static int naive_ue8m0(double amax, double fmax) {
    double x = (amax > 1e-4 ? amax : 1e-4) / fmax, m;
    int e;
    if (isinf(x)) return 254;
    m = frexp(x, &e); /* x = m 2^e, m in [0.5, 1): ceil(log2 x) = e - 1 exactly at m = 0.5 */
    e = m == 0.5 ? e - 1 : e;
    return e + 127 > 254 ? 254 : e + 127;
}

/* random 512-value rows, amplitudes varying per 64-value group */
static void v4_random_rows(test_rng *r, uint16_t *kv, int64_t rows, aiter_mla_dtype t) {
    int64_t i;
    int d;
    for (i = 0; i < rows; i++)
        for (d = 0; d < 512; d++) {
            const float amp = d < 448 ? (float)ldexp(1.0, ((int)(i + d / 64) % 5) - 2) : 1.5f;
            aiter_mla_store_f32(kv, i * 512 + d, t, rng_f32(r, -amp, amp));
        }
}

static void v4_write(void *cache, int64_t nblocks, int bs, const uint16_t *kv, const int64_t *slots, int64_t n, aiter_mla_dtype fp8) {
    aiter_mla_v4_cache_write_args w;
    memset(&w, 0, sizeof w);
    w.kv = kv;
    w.slot_mapping = slots;
    w.kv_cache = cache;
    w.num_blocks = nblocks;
    w.block_size = bs;
    w.num_tokens = n;
    w.fp8_dtype = fp8;
    CHECK_STATUS(aiter_mla_v4_cache_write_ref(&w), AITER_MLA_OK, "");
}

static void fill_i32(int32_t *p, int64_t n, int32_t v) {
    int64_t i;
    for (i = 0; i < n; i++) p[i] = v;
}

/* A builder's three outputs, poisoned: dense [T, width + 2], lens, ragged of capacity cap. */
typedef struct v4_outs {
    int32_t *dense, *lens, *idx, *ptr;
    int64_t T, width, cap;
} v4_outs;

static aiter_mla_v4_index_out v4_outs_make(v4_outs *b, int64_t T, int64_t width, int64_t cap) {
    aiter_mla_v4_index_out o;
    b->T = T;
    b->width = width;
    b->cap = cap;
    b->dense = alloc_i32(T * (width + 2));
    b->lens = alloc_i32(T);
    b->idx = alloc_i32(cap + 3);
    b->ptr = alloc_i32(T + 1);
    fill_i32(b->dense, T * (width + 2), V4_SENTINEL);
    fill_i32(b->lens, T, V4_SENTINEL);
    fill_i32(b->idx, cap + 3, V4_SENTINEL);
    fill_i32(b->ptr, T + 1, V4_SENTINEL);
    memset(&o, 0, sizeof o);
    o.dense = b->dense;
    o.dense_stride = width + 2;
    o.lens = b->lens;
    o.indices = b->idx;
    o.indptr = b->ptr;
    o.capacity = cap;
    return o;
}
static void v4_outs_free(v4_outs *b) {
    free(b->dense);
    free(b->lens);
    free(b->idx);
    free(b->ptr);
}
/* Mismatches of the three outputs against the expected lists exp[t * width ..], exp_len[t]:
 * dense rows padded with -1 up to width (the stride's tail untouched), lengths, CSR (the
 * ragged buffer untouched past the total). */
static int v4_outs_bad(const v4_outs *b, const int32_t *exp, const int32_t *exp_len) {
    int64_t t, k, total = 0;
    int bad = 0;
    bad += b->ptr[0] != 0;
    for (t = 0; t < b->T; t++) {
        for (k = 0; k < b->width + 2; k++) {
            const int32_t want = k >= b->width ? V4_SENTINEL : k < exp_len[t] ? exp[t * b->width + k] : -1;
            bad += b->dense[t * (b->width + 2) + k] != want;
        }
        bad += b->lens[t] != exp_len[t];
        for (k = 0; k < exp_len[t]; k++) bad += total + k >= b->cap || b->idx[total + k] != exp[t * b->width + k];
        total += exp_len[t];
        bad += b->ptr[t + 1] != total;
    }
    for (k = total; k < b->cap + 3; k++) bad += b->idx[k] != V4_SENTINEL;
    return bad;
}

static void test_v4_cache_rows(void) {
    static const struct { int fnuz, f16, bs; float fmax; int64_t extra_stride; } variants[] = {
        {0, 0, 64, 0.0f, 0}, {1, 0, 64, 0.0f, 0}, {1, 1, 2, 224.0f, 0}, {0, 1, 5, 0.0f, 100}, {0, 0, 1, 300.0f, 576}, {1, 0, 3, 0.0f, 7},
    };
    static const int sizes[] = {1, 2, 3, 7, 64, 128, 256, 1024};
    test_rng r = rng_seed(0x5e4c0de);
    int v, i;
    for (i = 0; i < ARRAY_LEN(sizes); i++)
        CHECK(aiter_mla_v4_page_bytes(sizes[i]) == naive_v4_page_bytes(sizes[i]) && aiter_mla_v4_page_bytes(sizes[i]) % 576 == 0,
              "page bytes of %d: %lld, expected %lld", sizes[i], (long long)aiter_mla_v4_page_bytes(sizes[i]),
              (long long)naive_v4_page_bytes(sizes[i]));
    CHECK(aiter_mla_v4_page_bytes(64) == 37440 && aiter_mla_v4_page_bytes(0) == 0 && aiter_mla_v4_page_bytes(-3) == 0,
          "page bytes of 64 / 0 / -3: %lld %lld %lld", (long long)aiter_mla_v4_page_bytes(64), (long long)aiter_mla_v4_page_bytes(0),
          (long long)aiter_mla_v4_page_bytes(-3));
    for (v = 0; v < ARRAY_LEN(variants); v++) {
        const int fnuz = variants[v].fnuz, bs = variants[v].bs, T = 12;
        const aiter_mla_dtype src = variants[v].f16 ? AITER_MLA_F16 : AITER_MLA_BF16;
        const aiter_mla_dtype fp8 = fnuz ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
        const double fmax = variants[v].fmax != 0.0f ? variants[v].fmax : fnuz ? 240.0 : 448.0;
        const int64_t stride = naive_v4_page_bytes(bs) + variants[v].extra_stride, nblocks = (T + 3 + bs - 1) / bs + 1;
        const int64_t nslots = nblocks * bs, kv_stride = 530;
        unsigned char *cache = (unsigned char *)test_malloc((size_t)(nblocks * stride));
        uint16_t *kv = (uint16_t *)test_malloc(sizeof(uint16_t) * (size_t)T * kv_stride);
        int64_t slots[12];
        int32_t perm[64];
        aiter_mla_v4_cache_write_args w;
        int t, g, d, bad_scale = 0, bad_code = 0, bad_rope = 0, bad_read = 0, bad_err = 0, bad_untouched = 0, written = 0;
        int64_t b, k;
        for (t = 0; t < T; t++)
            for (g = 0; g < 8; g++) { /* 7 nope groups, then the rope */
                const double amp = g == 7 ? 2.0 : ldexp(1.0, rng_int(&r, -14, 9));
                for (d = 0; d < 64; d++) aiter_mla_store_f32(kv, (int64_t)t * kv_stride + g * 64 + d, src, rng_f32(&r, (float)-amp, (float)amp));
            }
        for (d = 0; d < 64; d++) aiter_mla_store_f32(kv, d, src, 0.0f);                 /* token 0 group 0: all zero (1e-4 floor) */
        for (d = 0; d < 64; d++) /* token 0 group 1: amax = fmax 2^-3 exactly */
            aiter_mla_store_f32(kv, 64 + d, src, d == 5 ? (float)(fmax / 8) : (float)(fmax / 64));
        aiter_mla_store_f32(kv, kv_stride + 2 * 64 + 9, src, INFINITY);                   /* token 1 group 2: inf, clamped */
        aiter_mla_store_f32(kv, 2 * kv_stride + 3 * 64 + 1, src, NAN);                    /* token 2 group 3: NaN stays NaN */
        for (i = 0; i < nslots && i < 64; i++) perm[i] = i;
        rng_shuffle_i32(&r, perm, (int)(nslots < 64 ? nslots : 64));
        for (t = 0; t < T; t++) slots[t] = perm[t];
        slots[4] = -1;         /* padding */
        slots[6] = nslots;     /* one past the cache */
        slots[7] = (int64_t)1 << 40;
        memset(cache, 0xa5, (size_t)(nblocks * stride));
        memset(&w, 0, sizeof w);
        w.kv = kv;
        w.kv_stride = kv_stride;
        w.slot_mapping = slots;
        w.kv_cache = cache;
        w.num_blocks = nblocks;
        w.block_size = bs;
        w.page_stride_bytes = variants[v].extra_stride ? stride : 0;
        w.num_tokens = T;
        w.src_dtype = src;
        w.fp8_dtype = fp8;
        w.fp8_max = variants[v].fmax;
        if (!CHECK_STATUS(aiter_mla_v4_cache_write_ref(&w), AITER_MLA_OK, "")) continue;
        for (t = 0; t < T; t++) {
            const unsigned char *page, *row, *sc;
            double got[512];
            float lib[512];
            int off;
            if (slots[t] < 0 || slots[t] >= nslots) continue;
            written++;
            page = cache + slots[t] / bs * stride;
            off = (int)(slots[t] % bs);
            row = page + off * 576;
            sc = page + bs * 576 + off * 8;
            for (g = 0; g < 7; g++) {
                double amax = 0.0, scale;
                for (d = 0; d < 64; d++) {
                    const double x = fabs(ref_load(kv, (int64_t)t * kv_stride + g * 64 + d, src));
                    if (x > amax) amax = x; /* NaN is not greater: ignored */
                }
                bad_scale += sc[g] != naive_ue8m0(amax, fmax);
                scale = ldexp(1.0, (int)sc[g] - 127);
                for (d = 0; d < 64; d++) {
                    double x = ref_load(kv, (int64_t)t * kv_stride + g * 64 + d, src) / scale;
                    int alt, want;
                    if (x > fmax) x = fmax;
                    if (x < -fmax) x = -fmax;
                    want = ref_f32_to_fp8((float)x, fnuz, &alt);
                    bad_code += row[g * 64 + d] != want && row[g * 64 + d] != alt;
                }
            }
            bad_scale += sc[7] != 0;
            for (d = 0; d < 64; d++) {
                uint16_t hb;
                memcpy(&hb, row + 448 + 2 * d, 2);
                bad_rope += !same_value(ref_bf16_to_f64(hb), ref_round_bf16((float)ref_load(kv, (int64_t)t * kv_stride + 448 + d, src)));
            }
            naive_v4_row(cache, stride, bs, slots[t], fnuz, got);
            aiter_mla_v4_read_row(cache, variants[v].extra_stride ? stride : 0, bs, slots[t], fp8, lib);
            for (d = 0; d < 512; d++) {
                const double x = ref_load(kv, (int64_t)t * kv_stride + d, src), sc_d = d < 448 ? ldexp(1.0, (int)sc[d / 64] - 127) : 0.0;
                bad_read += !same_value((double)lib[d], (double)(float)got[d]); /* the inf group's max: 448 2^127 is inf in f32 */
                /* round trip: half an fp8 step (2^-4 relative, or the subnormal quantum) of the group's scale */
                if (isfinite(x) && fabs(got[d] - x) > fabs(x) / 16.0 + sc_d * (fnuz ? 1.0 / 1024 : 1.0 / 512)) bad_err++;
            }
        }
        /* untouched: the rows and scale records of slots never written, and every page's tail */
        for (b = 0; b < nblocks; b++) {
            for (k = (int64_t)bs * 584; k < stride; k++) bad_untouched += cache[b * stride + k] != 0xa5;
            for (i = 0; i < bs; i++) {
                const int64_t s = b * bs + i;
                int used = 0;
                for (t = 0; t < T; t++) used |= slots[t] == s;
                if (used) continue;
                for (k = 0; k < 576; k++) bad_untouched += cache[b * stride + i * 576 + k] != 0xa5;
                for (k = 0; k < 8; k++) bad_untouched += cache[b * stride + bs * 576 + i * 8 + k] != 0xa5;
            }
        }
        CHECK(written == 9, "v4 rows variant %d: %d rows written, expected 9", v, written);
        CHECK(bad_scale + bad_code + bad_rope + bad_read + bad_err + bad_untouched == 0,
              "v4 rows variant %d: %d scale bytes, %d codes, %d rope values, %d reads, %d round trips, %d untouched bytes wrong", v,
              bad_scale, bad_code, bad_rope, bad_read, bad_err, bad_untouched);
        if (v == 0) { /* the scale rule at a glance: zero group -> 2^-22 (byte 105), exact power -> no round-up, inf -> 254 */
            const unsigned char *sc0 = cache + slots[0] / bs * stride + bs * 576 + (slots[0] % bs) * 8;
            const unsigned char *sc1 = cache + slots[1] / bs * stride + bs * 576 + (slots[1] % bs) * 8;
            CHECK(sc0[0] == 105 && sc0[1] == 124 && sc1[2] == 254, "v4 scale bytes %d %d %d, expected 105 124 254", sc0[0], sc0[1], sc1[2]);
            CHECK(cache[slots[0] / bs * stride + (slots[0] % bs) * 576 + 64 + 5] == 0x7e, "amax / scale = 448 must encode as 0x7e");
        }
        if (v == 1) {
            aiter_mla_v4_cache_write_args e = w;
            e.fp8_dtype = AITER_MLA_BF16;
            CHECK_STATUS(aiter_mla_v4_cache_write_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "fp8_dtype");
            e = w;
            e.fp8_max = 241.0f;
            CHECK_STATUS(aiter_mla_v4_cache_write_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "fp8_max");
            e.fp8_max = 1.9f; /* the largest bf16 would need an exponent byte past 254 */
            CHECK_STATUS(aiter_mla_v4_cache_write_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "fp8_max = 1.9 is outside [2, 240]");
            { /* at the bound, a group holding 3e38 reads back as itself within e4m3's rounding */
                uint16_t big[530];
                float back[512];
                memcpy(big, kv, sizeof big);
                aiter_mla_store_f32(big, 0, src, 3.0e38f);
                e.kv = big;
                e.num_tokens = 1;
                e.fp8_max = 2.0f;
                CHECK_STATUS(aiter_mla_v4_cache_write_ref(&e), AITER_MLA_OK, "");
                aiter_mla_v4_read_row(cache, 0, bs, slots[0], fp8, back);
                CHECK(isfinite(back[0]) && fabs(back[0] / ref_load(big, 0, src) - 1.0) < 0.07,
                      "v4_cache_write_ref: fp8_max 2 over 3e38 reads back %g", (double)back[0]);
            }
            e = w;
            e.page_stride_bytes = (int64_t)bs * 584 - 1;
            CHECK_STATUS(aiter_mla_v4_cache_write_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "page_stride_bytes");
            e = w;
            e.src_dtype = AITER_MLA_F32;
            CHECK_STATUS(aiter_mla_v4_cache_write_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "src_dtype");
            e = w;
            e.block_size = 2000;
            CHECK_STATUS(aiter_mla_v4_cache_write_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
            e = w;
            e.kv_stride = 511;
            CHECK_STATUS(aiter_mla_v4_cache_write_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_stride");
            e = w;
            e.kv = NULL;
            CHECK_STATUS(aiter_mla_v4_cache_write_ref(&e), AITER_MLA_ERR_NULL_POINTER, "kv");
            e.num_tokens = 0; /* nothing to write: no pointer needed */
            CHECK_STATUS(aiter_mla_v4_cache_write_ref(&e), AITER_MLA_OK, "");
        }
        free(cache);
        free(kv);
    }
}

static void test_v4_gather(void) {
    static const aiter_mla_dtype outs[] = {AITER_MLA_F32, AITER_MLA_BF16, AITER_MLA_F16};
    test_rng r = rng_seed(0x6a7e4);
    const int B = 3, bs = 16, width = 6, nblocks = 14;
    const int64_t stride = naive_v4_page_bytes(bs);
    int32_t bt[3 * 6], seq[3] = {40, 0, 100}, glens[3] = {10, 0, 100};
    int fl, mode, o, b, i, d;
    for (i = 0; i < B * width; i++) bt[i] = rng_int(&r, 0, nblocks - 1);
    bt[1] = -1;          /* request 0, positions 16..31: absent */
    bt[2 * width + 3] = nblocks; /* request 2, positions 48..63: out of range (and 96..99 beyond the table) */
    for (fl = 0; fl < 2; fl++) {
        const aiter_mla_dtype fp8 = fl ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
        unsigned char *cache = (unsigned char *)test_malloc((size_t)(nblocks * stride));
        uint16_t *kv = (uint16_t *)test_malloc(sizeof(uint16_t) * (size_t)nblocks * bs * 512);
        int64_t *sl = (int64_t *)test_malloc(sizeof(int64_t) * (size_t)nblocks * bs);
        v4_random_rows(&r, kv, (int64_t)nblocks * bs, AITER_MLA_BF16);
        for (i = 0; i < nblocks * bs; i++) sl[i] = i;
        v4_write(cache, nblocks, bs, kv, sl, (int64_t)nblocks * bs, fp8);
        for (mode = 0; mode < 2; mode++)
            for (o = 0; o < ARRAY_LEN(outs); o++) {
                const int64_t rows = 110, offset = mode ? 5 : 0;
                void *out = test_malloc((size_t)B * rows * 512 * 4);
                aiter_mla_v4_gather_args g;
                int bad = 0, nrows = 0;
                poison_fill(out, (int64_t)B * rows * 512, outs[o]);
                memset(&g, 0, sizeof g);
                g.kv_cache = cache;
                g.num_blocks = nblocks;
                g.block_size = bs;
                g.fp8_dtype = fp8;
                g.block_table = bt;
                g.block_table_stride = width;
                g.seq_lens = seq;
                g.gather_lens = mode ? glens : NULL;
                g.batch = B;
                g.out = out;
                g.out_rows = rows;
                g.offset = offset;
                g.out_dtype = outs[o] == AITER_MLA_BF16 ? AITER_MLA_DTYPE_DEFAULT : outs[o];
                if (!CHECK_STATUS(aiter_mla_v4_gather_ref(&g), AITER_MLA_OK, "")) {
                    free(out);
                    continue;
                }
                for (b = 0; b < B; b++) {
                    const int gl = mode ? glens[b] : seq[b];
                    int64_t row;
                    for (row = 0; row < rows; row++) {
                        const int64_t base = ((int64_t)b * rows + row) * 512;
                        if (row < offset || row >= offset + gl) { /* not addressed: still poison */
                            for (d = 0; d < 512; d++) bad += !is_poison(out, base + d, outs[o]);
                            continue;
                        }
                        {
                            const int pos = seq[b] - gl + (int)(row - offset), blk = pos / bs;
                            const int id = blk < width ? bt[b * width + blk] : -1;
                            double want[512];
                            if (id < 0 || id >= nblocks) {
                                for (d = 0; d < 512; d++) want[d] = 0.0;
                            } else {
                                naive_v4_row(cache, stride, bs, (int64_t)id * bs + pos % bs, fl, want);
                            }
                            for (d = 0; d < 512; d++) {
                                const double got = ref_load(out, base + d, outs[o]);
                                /* dequantised values are fp8 x 2^k: exact in f32 and bf16; f16 rounds */
                                bad += outs[o] == AITER_MLA_F16 ? fabs(got - want[d]) > fabs(want[d]) * 1e-3 + 1e-7 : got != want[d];
                            }
                            nrows++;
                        }
                    }
                }
                CHECK(bad == 0 && nrows == (mode ? 110 : 140), "v4 gather %s mode %d out %s: %d values wrong over %d rows",
                      aiter_mla_dtype_name(fp8), mode, aiter_mla_dtype_name(outs[o]), bad, nrows);
                if (fl == 0 && mode == 1 && o == 0) {
                    aiter_mla_v4_gather_args e = g;
                    int32_t too_long[3] = {10, 1, 100}, neg[3] = {40, -1, 100};
                    e.gather_lens = too_long;
                    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "gather_lens");
                    e = g;
                    e.offset = 11;
                    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "out_rows");
                    e = g;
                    e.seq_lens = neg;
                    e.gather_lens = NULL;
                    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "seq_lens");
                    e = g;
                    e.out_dtype = AITER_MLA_FP8_E4M3FN;
                    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "out_dtype");
                    e = g;
                    e.block_table = NULL;
                    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_NULL_POINTER, "block_table");
                }
                free(out);
            }
        free(cache);
        free(kv);
        free(sl);
    }
}

/* Window of a token from the definitions: slot of raw token p through the block table, -1
 * when the page is absent or beyond the table. */
static int32_t naive_table_slot(const int32_t *bt_row, int width, int bs, int64_t p) {
    const int64_t blk = p / bs;
    if (blk >= width || bt_row[blk] < 0) return -1;
    return (int32_t)((int64_t)bt_row[blk] * bs + p % bs);
}

static void test_v4_swa_indices(void) {
    /* requests: pos 0; pos 127, 128, 129 (the window's edge); no tokens; pos 125, 126; pos 296..299 */
    const int32_t qsl[6] = {0, 1, 4, 4, 6, 10}, seq[5] = {1, 130, 7, 127, 300};
    const int32_t t2r[10] = {0, 1, 1, 1, 3, 3, 4, 4, 4, 4};
    const uint8_t valid[10] = {1, 1, 1, 1, 0, 1, 1, 1, 1, 1}; /* token 4: padding */
    int variant;
    for (variant = 0; variant < 4; variant++) {
        const int bs = variant == 3 ? 64 : 16, W = variant == 2 ? 5 : 128, width = 20;
        const int64_t off = variant == 1 ? 3 : 0, T = 10 - off;
        int32_t bt[5 * 20], *exp = alloc_i32(T * W), exp_len[10];
        v4_outs ob;
        aiter_mla_v4_swa_index_args a;
        int req, i;
        int64_t t;
        for (req = 0; req < 5; req++)
            for (i = 0; i < width; i++) bt[req * width + i] = 100 * req + 3 * i + 1;
        bt[4 * width + 17] = -1; /* request 4: positions 272..287 absent (block size 16) */
        bt[3 * width + 2] = -7;
        for (t = 0; t < T; t++) {
            const int64_t tok = off + t;
            const int rq = t2r[tok];
            const int32_t q_len = qsl[rq + 1] - qsl[rq], pos = seq[rq] - q_len + (int32_t)(tok - qsl[rq]);
            const int32_t lo = pos - W + 1 > 0 ? pos - W + 1 : 0;
            exp_len[t] = valid[tok] ? pos - lo + 1 : 0;
            for (i = 0; i < exp_len[t]; i++) exp[t * W + i] = naive_table_slot(bt + rq * width, width, bs, lo + i);
        }
        memset(&a, 0, sizeof a);
        a.query_start_loc = qsl;
        a.seq_lens = seq;
        a.token_to_req = variant == 0 ? NULL : t2r; /* NULL: found from query_start_loc */
        a.is_valid_token = valid;
        a.block_table = bt;
        a.block_table_stride = width;
        a.block_size = variant == 3 ? 0 : bs; /* 0 means 64 */
        a.window = variant == 2 ? W : 0;     /* 0 means 128 */
        a.num_reqs = 5;
        a.token_offset = off;
        a.num_tokens = T;
        a.out = v4_outs_make(&ob, T, W, T * W);
        if (variant == 0) CHECK_OUT_OF_MEMORY(aiter_mla_v4_swa_indices_ref(&a));
        if (CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&a), AITER_MLA_OK, ""))
            CHECK(v4_outs_bad(&ob, exp, exp_len) == 0, "v4 swa indices variant %d: %d outputs wrong", variant, v4_outs_bad(&ob, exp, exp_len));
        if (variant == 0) {
            int32_t total = 0, bad_seq[5] = {1, 130, 7, 1, 300}, bad_qsl[6] = {0, 1, 4, 3, 6, 10};
            aiter_mla_v4_swa_index_args e = a;
            v4_outs fresh;
            for (t = 0; t < T; t++) total += exp_len[t];
            v4_outs_free(&ob);
            e.out = v4_outs_make(&ob, T, W, total - 1); /* one entry short: refused, nothing written */
            e.out.dense = NULL;
            e.out.lens = NULL;
            CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "capacity");
            CHECK(ob.ptr[0] == V4_SENTINEL && ob.idx[0] == V4_SENTINEL, "v4 swa: a refused call wrote its outputs");
            e.out.capacity = total; /* exactly enough */
            CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&e), AITER_MLA_OK, "");
            e = a;
            memset(&e.out, 0, sizeof e.out);
            CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&e), AITER_MLA_ERR_NULL_POINTER, "out");
            e.out = v4_outs_make(&fresh, T, W, T * W);
            e.out.indptr = NULL;
            CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&e), AITER_MLA_ERR_NULL_POINTER, "indptr");
            e.out.indptr = fresh.ptr;
            e.out.dense_stride = W - 1;
            CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "dense_stride");
            e.out.dense_stride = 0;
            e.seq_lens = bad_seq;
            CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "seq_lens");
            e.seq_lens = seq;
            e.query_start_loc = bad_qsl;
            CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "query_start_loc");
            e.query_start_loc = qsl;
            e.window = 70000;
            CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "window");
            e.window = 0;
            e.block_table = NULL;
            CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&e), AITER_MLA_ERR_NULL_POINTER, "block_table");
            v4_outs_free(&fresh);
        }
        v4_outs_free(&ob);
        free(exp);
    }
}

static void test_v4_global_topk(void) {
    test_rng r = rng_seed(0x70b4);
    const int T = 7, topk = 8, stride = 10, nreq = 3, width = 5;
    const int32_t t2r[7] = {0, 0, 1, 2, 2, 5, -1};
    const uint8_t valid[7] = {1, 1, 1, 1, 0, 1, 1}; /* token 4: padding */
    int variant;
    for (variant = 0; variant < 2; variant++) {
        const int bs = variant ? 2 : 64;
        int32_t topk_idx[7 * 10], bt[3 * 5], exp[7 * 8], exp_len[7];
        v4_outs ob;
        aiter_mla_v4_topk_args a;
        int t, k, i;
        for (i = 0; i < nreq * width; i++) bt[i] = rng_int(&r, 0, 50);
        bt[1 * width + 1] = -1; /* request 1's second page: absent */
        for (i = 0; i < T * stride; i++) topk_idx[i] = V4_SENTINEL; /* the stride's tail is never read */
        for (t = 0; t < T; t++)
            for (k = 0; k < topk; k++) topk_idx[t * stride + k] = -1;
        for (k = 0; k < 3; k++) topk_idx[0 * stride + k] = rng_int(&r, 0, bs * width - 1); /* valid first */
        topk_idx[1 * stride + 1] = rng_int(&r, 0, bs * width - 1);                        /* holes between entries */
        topk_idx[1 * stride + 4] = rng_int(&r, 0, bs * width - 1);
        topk_idx[1 * stride + 7] = 0;
        /* token 2: empty top-k */
        for (k = 0; k < topk; k++) topk_idx[3 * stride + k] = k < 6 ? (k == 2 ? bs * width + 3 : rng_int(&r, 0, bs * width - 1)) : -1;
        for (k = 0; k < topk; k++) topk_idx[4 * stride + k] = k; /* padding token */
        topk_idx[5 * stride + 0] = 3;                            /* request out of range: -1 entries, still counted */
        topk_idx[5 * stride + 3] = 4;
        topk_idx[6 * stride + 2] = 1;
        for (t = 0; t < T; t++) {
            int n = 0;
            for (k = 0; k < topk; k++) {
                const int32_t idx = topk_idx[t * stride + k];
                if (idx < 0 || !valid[t]) continue;
                exp[t * topk + n++] = t2r[t] < 0 || t2r[t] >= nreq ? -1 : naive_table_slot(bt + t2r[t] * width, width, bs, idx);
            }
            exp_len[t] = n;
        }
        CHECK(exp_len[2] == 0 && exp_len[4] == 0 && exp_len[5] == 2, "v4 top-k test setup");
        memset(&a, 0, sizeof a);
        a.topk_indices = topk_idx;
        a.topk_stride = stride;
        a.topk = topk;
        a.token_to_req = t2r;
        a.is_valid_token = valid;
        a.block_table = bt;
        a.block_table_stride = width;
        a.block_size = variant ? bs : 0; /* 0 means 64 */
        a.num_reqs = nreq;
        a.num_tokens = T;
        a.out = v4_outs_make(&ob, T, topk, T * topk);
        if (CHECK_STATUS(aiter_mla_v4_global_topk_ref(&a), AITER_MLA_OK, ""))
            CHECK(v4_outs_bad(&ob, exp, exp_len) == 0, "v4 global top-k bs %d: %d outputs wrong", bs, v4_outs_bad(&ob, exp, exp_len));
        if (variant == 0) {
            aiter_mla_v4_topk_args e = a;
            int total = 0;
            for (t = 0; t < T; t++) total += exp_len[t];
            e.out.capacity = total - 1;
            CHECK_STATUS(aiter_mla_v4_global_topk_ref(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "capacity");
            e = a;
            e.topk_stride = topk - 1;
            CHECK_STATUS(aiter_mla_v4_global_topk_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "topk_stride");
            e = a;
            e.token_to_req = NULL;
            CHECK_STATUS(aiter_mla_v4_global_topk_ref(&e), AITER_MLA_ERR_NULL_POINTER, "token_to_req");
            e = a;
            e.num_tokens = 0; /* no tokens: indptr [0] only */
            ob.ptr[0] = V4_SENTINEL;
            CHECK_STATUS(aiter_mla_v4_global_topk_ref(&e), AITER_MLA_OK, "");
            CHECK(ob.ptr[0] == 0, "v4 global top-k of no tokens: indptr[0] = %d", ob.ptr[0]);
        }
        v4_outs_free(&ob);
    }
}

static void test_v4_c128_indices(void) {
    const int64_t pos[9] = {0, 126, 127, 255, 256, 1000, 20000, -1, 383};
    const int32_t t2r[9] = {0, 1, 1, 0, 2, 2, 1, 0, 7};
    const uint8_t valid[9] = {1, 1, 1, 1, 1, 0, 1, 1, 1};
    const int T = 9, width = 100, bs = 2, nreq = 3, btw = 60;
    int variant;
    for (variant = 0; variant < 3; variant++) {
        const int global = variant != 1, ratio = variant == 2 ? 4 : 128;
        int32_t bt[3 * 60], *exp = alloc_i32((int64_t)T * width), exp_len[9];
        v4_outs ob;
        aiter_mla_v4_c128_args a;
        int t, j, i;
        for (i = 0; i < nreq * btw; i++) bt[i] = 1000 + 7 * i;
        bt[2 * btw + 1] = -1; /* request 2, entries 2 and 3: absent */
        for (t = 0; t < T; t++) {
            int64_t n = pos[t] < 0 || !valid[t] ? 0 : (pos[t] + 1) / ratio;
            if (n > width) n = width;
            exp_len[t] = (int32_t)n;
            for (j = 0; j < n; j++)
                exp[t * width + j] = !global ? j : t2r[t] >= nreq ? -1 : naive_table_slot(bt + t2r[t] * btw, btw, bs, j);
        }
        if (ratio == 128)
            CHECK(exp_len[0] == 0 && exp_len[1] == 0 && exp_len[2] == 1 && exp_len[3] == 2 && exp_len[4] == 2 && exp_len[6] == 100,
                  "v4 c128 setup");
        memset(&a, 0, sizeof a);
        a.positions = pos;
        a.token_to_req = global ? t2r : NULL;
        a.is_valid_token = valid;
        a.block_table = global ? bt : NULL;
        a.block_table_stride = btw;
        a.block_size = variant == 0 ? 0 : bs; /* 0 means 2 */
        a.num_reqs = nreq;
        a.compress_ratio = variant == 2 ? 4 : 0; /* 0 means 128 */
        a.width = width;
        a.num_tokens = T;
        a.out = v4_outs_make(&ob, T, width, (int64_t)T * width);
        if (CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&a), AITER_MLA_OK, ""))
            CHECK(v4_outs_bad(&ob, exp, exp_len) == 0, "v4 c128 variant %d: %d outputs wrong", variant, v4_outs_bad(&ob, exp, exp_len));
        if (variant == 0) {
            aiter_mla_v4_c128_args e = a;
            e.width = 0;
            CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "width");
            e = a;
            e.token_to_req = NULL;
            CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&e), AITER_MLA_ERR_NULL_POINTER, "token_to_req");
            e = a;
            e.positions = NULL;
            CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&e), AITER_MLA_ERR_NULL_POINTER, "positions");
        }
        v4_outs_free(&ob);
        free(exp);
    }
}

static void test_v4_combine(void) {
    /* a chunk of three requests: prefix 0, prefix 50 (< W - 1), prefix 600 (>= W - 1); tokens 7.. */
    const int32_t qsl[4] = {7, 10, 14, 19}, seq[3] = {3, 54, 605};
    test_rng r = rng_seed(0xc0b1);
    int variant;
    int64_t n_comp;
    CHECK(aiter_mla_v4_workspace_rows(1024, 4, 0, 16, &n_comp) == 256 + 128 + 16 && n_comp == 256, "workspace rows, ratio 4");
    CHECK(aiter_mla_v4_workspace_rows(1000, 128, 128, 16, &n_comp) == 8 + 128 + 16 && n_comp == 8, "workspace rows, ratio 128");
    CHECK(aiter_mla_v4_workspace_rows(1000, 1, 64, 16, &n_comp) == 64 + 16 && n_comp == 0, "workspace rows, ratio 1");
    CHECK(aiter_mla_v4_workspace_rows(-1, 4, 0, 16, &n_comp) == -1 && n_comp == -1, "workspace rows of a negative length");
    for (variant = 0; variant < 4; variant++) {
        const int ratio = variant == 2 ? 1 : variant == 3 ? 128 : 4, topk = ratio == 1 ? 0 : 16, stride = 20, W = 128, T = 12;
        const int64_t N = ratio == 1 ? 0 : (1024 + ratio - 1) / ratio, M = N + W + 80; /* any M >= N + gather_len */
        int32_t glens[3], *topk_idx = alloc_i32(T * stride), *exp = alloc_i32((int64_t)T * (topk + W)), exp_len[12];
        v4_outs ob;
        aiter_mla_v4_combine_args a;
        int b, i, k;
        for (b = 0; b < 3; b++) { /* variant 1 gathers more of request 2 than its window needs */
            const int32_t q_len = qsl[b + 1] - qsl[b], prefix = seq[b] - q_len;
            glens[b] = variant == 1 && b == 2 ? 200 : q_len + (prefix < W - 1 ? prefix : W - 1);
        }
        for (i = 0; i < T * stride; i++) {
            const int pick = rng_int(&r, 0, 9);
            topk_idx[i] = pick == 0 ? -1 : pick == 1 ? (int32_t)N + rng_int(&r, 0, 3) : pick == 2 ? 160 : rng_int(&r, 0, 150);
        }
        for (b = 0; b < 3; b++) /* the edge of the gathered compressed rows: the last one, and one past */
            for (i = qsl[b] - qsl[0]; i < qsl[b + 1] - qsl[0] && ratio > 1; i++) {
                const int64_t ncomp = (int64_t)seq[b] / ratio < N ? (int64_t)seq[b] / ratio : N;
                topk_idx[i * stride + 0] = (int32_t)ncomp;
                topk_idx[i * stride + 1] = (int32_t)ncomp - 1;
            }
        for (b = 0; b < 3; b++) {
            const int32_t q_len = qsl[b + 1] - qsl[b];
            for (i = 0; i < q_len; i++) {
                const int t = qsl[b] - qsl[0] + i, pos = seq[b] - q_len + i;
                const int tl = ratio == 1 ? 0 : ((pos + 1) / ratio < topk ? (pos + 1) / ratio : topk);
                const int swa = pos + 1 < W ? pos + 1 : W, g_start = seq[b] - glens[b];
                const int64_t ncomp = (int64_t)seq[b] / ratio < N ? (int64_t)seq[b] / ratio : N;
                int n = 0;
                for (k = 0; k < tl; k++) {
                    const int32_t j = topk_idx[t * stride + k];
                    exp[t * (topk + W) + n++] = j >= 0 && j < ncomp ? (int32_t)(M * b + j) : -1;
                }
                for (k = 0; k < swa; k++) exp[t * (topk + W) + n++] = (int32_t)(M * b + N + (pos - swa + 1 + k) - g_start);
                exp_len[t] = n;
            }
        }
        memset(&a, 0, sizeof a);
        a.topk_indices = ratio == 1 ? NULL : topk_idx;
        a.topk_stride = stride;
        a.topk = topk;
        a.query_start_loc = qsl;
        a.seq_lens = seq;
        a.gather_lens = variant == 0 ? NULL : glens;
        a.num_reqs = 3;
        a.compress_ratio = ratio == 1 ? 0 : ratio; /* 0 means 1 */
        a.M = M;
        a.N = N;
        a.out = v4_outs_make(&ob, T, topk + W, (int64_t)T * (topk + W));
        if (CHECK_STATUS(aiter_mla_v4_combine_ref(&a), AITER_MLA_OK, ""))
            CHECK(v4_outs_bad(&ob, exp, exp_len) == 0, "v4 combine variant %d: %d outputs wrong", variant, v4_outs_bad(&ob, exp, exp_len));
        if (variant == 1) {
            aiter_mla_v4_combine_args e = a;
            int32_t short_g[3];
            memcpy(short_g, glens, sizeof short_g);
            short_g[2] = 5 + 126; /* one short of q_len + min(prefix, W - 1) */
            e.gather_lens = short_g;
            CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "gather_lens");
            e = a;
            e.M = N + 54 - 1; /* request 1 gathers 54 rows */
            CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "M");
            e = a;
            e.N = M + 1;
            CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "N");
            e = a;
            e.topk_indices = NULL;
            CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_NULL_POINTER, "topk_indices");
        }
        v4_outs_free(&ob);
        free(topk_idx);
        free(exp);
    }
}

static void test_v4_copy_ragged(void) {
    /* five rows of 3, 0, 7, 2, 5 entries, starting at entry 4 of the input */
    const int32_t indptr[6] = {4, 7, 7, 14, 16, 21};
    int32_t in[21], ibuf[40], pbuf[8];
    int64_t dropped = -5;
    aiter_mla_v4_ragged_copy_args a;
    int i, r, bad = 0;
    for (i = 0; i < 21; i++) in[i] = i < 4 ? -99 : 1000 + i;
    memset(&a, 0, sizeof a);
    a.indices = in;
    a.indptr = indptr;
    a.num_rows = 5;
    a.max_entries_per_row = 6;
    a.indices_buffer = ibuf;
    a.indices_buffer_capacity = 40;
    a.indptr_buffer = pbuf;
    a.indptr_buffer_capacity = 8;
    a.num_dropped = &dropped;
    fill_i32(ibuf, 40, V4_SENTINEL);
    fill_i32(pbuf, 8, V4_SENTINEL);
    /* overflow refused: row 2 has 7 > 6 entries; nothing written */
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&a), AITER_MLA_ERR_BUFFER_TOO_SMALL, "max_entries_per_row");
    for (i = 0; i < 40; i++) bad += ibuf[i] != V4_SENTINEL;
    for (i = 0; i < 8; i++) bad += pbuf[i] != V4_SENTINEL;
    CHECK(bad == 0 && dropped == -5, "v4 copy: a refused copy wrote %d entries", bad);
    /* fits: rebased indptr, entries copied, the buffers' tails untouched */
    a.max_entries_per_row = 7;
    if (CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&a), AITER_MLA_OK, "")) {
        const int32_t want_ptr[6] = {0, 3, 3, 10, 12, 17};
        bad = 0;
        for (r = 0; r < 6; r++) bad += pbuf[r] != want_ptr[r];
        for (i = 0; i < 17; i++) bad += ibuf[i] != 1000 + 4 + i;
        for (i = 17; i < 40; i++) bad += ibuf[i] != V4_SENTINEL;
        for (i = 6; i < 8; i++) bad += pbuf[i] != V4_SENTINEL;
        CHECK(bad == 0 && dropped == 0, "v4 copy: %d values wrong, %lld dropped", bad, (long long)dropped);
    }
    /* clamp: row 2 keeps its first 6 entries, one is dropped */
    fill_i32(ibuf, 40, V4_SENTINEL);
    a.max_entries_per_row = 6;
    a.clamp = 1;
    if (CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&a), AITER_MLA_OK, "")) {
        const int32_t want_ptr[6] = {0, 3, 3, 9, 11, 16};
        int k = 0;
        bad = 0;
        for (r = 0; r < 6; r++) bad += pbuf[r] != want_ptr[r];
        for (r = 0; r < 5; r++)
            for (i = indptr[r]; i < indptr[r + 1] && i - indptr[r] < 6; i++) bad += ibuf[k++] != in[i];
        for (i = 16; i < 40; i++) bad += ibuf[i] != V4_SENTINEL;
        CHECK(bad == 0 && k == 16 && dropped == 1, "v4 copy clamped: %d values wrong, %lld dropped", bad, (long long)dropped);
    }
    a.clamp = 0;
    a.max_entries_per_row = 7;
    a.indptr_buffer_capacity = 5;
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&a), AITER_MLA_ERR_BUFFER_TOO_SMALL, "indptr_buffer_capacity");
    a.indptr_buffer_capacity = 6;
    a.indices_buffer_capacity = 34;
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&a), AITER_MLA_ERR_BUFFER_TOO_SMALL, "indices_buffer_capacity");
    a.indices_buffer_capacity = 35; /* 5 rows x 7 */
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&a), AITER_MLA_OK, "");
    {
        const int32_t bad_ptr[6] = {4, 7, 6, 14, 16, 21};
        a.indptr = bad_ptr;
        CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "indptr");
        a.indptr = indptr;
    }
    a.clamp = 2;
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "clamp");
    a.clamp = 0;
    a.indices = NULL;
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&a), AITER_MLA_ERR_NULL_POINTER, "indices");
    a.num_rows = 0; /* no rows: indptr [0], no entries needed */
    pbuf[0] = V4_SENTINEL;
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&a), AITER_MLA_OK, "");
    CHECK(pbuf[0] == 0, "v4 copy of no rows: indptr[0] = %d", pbuf[0]);
}

/* The naive V4 attention of one token: q [H, 512] (element offset q_off, dtype qt), nk key
 * rows [nk, 512] in double, two passes straight from SPEC 7. o_ref [H, 512], lse_ref [H]. */
static void naive_v4_attend(const void *q, int64_t q_off, aiter_mla_dtype qt, int H, const double *rows, int nk, double scale,
                            const float *sink, float *o_ref, float *lse_ref) {
    double *s = alloc_f64(nk);
    int h, k, d;
    for (h = 0; h < H; h++) {
        double m = -HUGE_VAL, den = 0.0, sum;
        for (k = 0; k < nk; k++) {
            double dot = 0.0;
            for (d = 0; d < 512; d++) dot += ref_load(q, q_off + (int64_t)h * 512 + d, qt) * rows[(int64_t)k * 512 + d];
            s[k] = dot * scale;
            if (s[k] > m) m = s[k];
        }
        for (k = 0; k < nk; k++) den += exp(s[k] - m);
        sum = den;
        if (nk > 0 && sink && sink[h] != -INFINITY) den += exp((double)sink[h] - m); /* +inf: den = inf, o = 0 */
        for (d = 0; d < 512; d++) {
            double num = 0.0;
            for (k = 0; k < nk; k++) num += exp(s[k] - m) * rows[(int64_t)k * 512 + d];
            o_ref[(int64_t)h * 512 + d] = nk > 0 ? (float)(num / den) : 0.0f;
        }
        lse_ref[h] = nk > 0 ? (float)(m + log(sum)) : INFINITY;
    }
    free(s);
}

/* o of any dtype to floats (for the comparisons) */
static float *v4_o_floats(const void *o, int64_t n, aiter_mla_dtype t) {
    float *f = alloc_f32(n);
    int64_t i;
    for (i = 0; i < n; i++) f[i] = (float)ref_load(o, i, t);
    return f;
}

/* Compare o (o_dtype) and lse with the naive ones: SPEC 8's bf16 tolerances for 16-bit o,
 * tighter for f32 (both sides are double precision over the same rows). */
static void v4_compare(const char *what, const void *o, aiter_mla_dtype ot, const float *lse, const float *o_ref,
                       const float *lse_ref, int64_t T, int H) {
    float *got = v4_o_floats(o, T * H * 512, ot);
    if (ot == AITER_MLA_F32) CHECK_CLOSE(what, got, o_ref, T * H * 512, 1e-5, 0.99999);
    else CHECK_CLOSE(what, got, o_ref, T * H * 512, TOL_BF16_REL, TOL_BF16_COS);
    CHECK_LSE(what, lse, lse_ref, T * H);
    free(got);
}

/* A token's rows of a ragged V4 key list, as the GPU reads them from any indptr (device data
 * there): a row outside [0, indptr[T]], the entries indices holds, is empty. */
static void test_v4_keys_of_bounds(void) {
    static const int32_t good[3] = {0, 2, 4}, past[3] = {0, 1000000, 4}, late[3] = {5, 6, 4}, neg[3] = {-3, 1, 4};
    static const int32_t *const ptrs[4] = {good, past, late, neg};
    static const int64_t want[4][2] = {{2, 2}, {0, 0}, {0, 0}, {0, 3}};
    int32_t idx[4] = {0, 1, 2, 3};
    int c, t;
    for (c = 0; c < 4; c++) {
        aiter_mla_v4_keys k;
        memset(&k, 0, sizeof k);
        k.indices = idx;
        k.indptr = ptrs[c];
        for (t = 0; t < 2; t++) {
            int64_t start = -7, n = aiter_mla__v4_keys_of(&k, t, 2, &start);
            CHECK(n == want[c][t] && (n == 0 || (start >= 0 && start + n <= ptrs[c][2])),
                  "v4_keys_of case %d token %d: %lld entries from %lld, want %lld inside [0, %d]", c, t, (long long)n,
                  (long long)start, (long long)want[c][t], ptrs[c][2]);
        }
    }
    { /* a capacity below indptr[num_tokens] (a builder's overflow): the lists cut there */
        static const int64_t caps[4] = {3, 2, 1, 4}, want_cap[4][2] = {{2, 1}, {2, 0}, {1, 0}, {2, 2}};
        aiter_mla_v4_keys k;
        memset(&k, 0, sizeof k);
        k.indices = idx;
        k.indptr = good;
        for (c = 0; c < 4; c++) {
            k.capacity = caps[c];
            for (t = 0; t < 2; t++) {
                int64_t start = -7, n = aiter_mla__v4_keys_of(&k, t, 2, &start);
                CHECK(n == want_cap[c][t] && (n == 0 || (start >= 0 && start + n <= caps[c])),
                      "v4_keys_of capacity %lld token %d: %lld entries from %lld, want %lld inside [0, %lld]", (long long)caps[c], t,
                      (long long)n, (long long)start, (long long)want_cap[c][t], (long long)caps[c]);
            }
        }
    }
}

static void test_v4_attention(void) {
    /* key sources: A = MODEL1 e4m3fn pages of 16, B = MODEL1 e4m3fnuz pages of 2 (padded
     * stride), C = bf16 rows (a prefill workspace) */
    static const struct { int H, keys_src, extra_src, keys_dense, extra_dense, with_lens, sink_mode; aiter_mla_dtype qt, ot; } cases[] = {
        {1, 0, -1, 0, 0, 1, 0, AITER_MLA_BF16, AITER_MLA_F32},
        {16, 0, 1, 1, 0, 1, 1, AITER_MLA_BF16, AITER_MLA_BF16},
        {64, 2, 1, 0, 1, 1, 1, AITER_MLA_F16, AITER_MLA_F32},
        {128, 0, -1, 1, 0, 0, 2, AITER_MLA_BF16, AITER_MLA_F16},
        {128, 1, 0, 0, 0, 1, 1, AITER_MLA_BF16, AITER_MLA_F32},
        {16, 2, -1, 1, 0, 1, 3, AITER_MLA_BF16, AITER_MLA_F32},
    };
    const int bsz[3] = {16, 2, 1}, nbl[3] = {12, 40, 150}, fnuz[3] = {0, 1, 0};
    const int64_t pstride[3] = {naive_v4_page_bytes(16), naive_v4_page_bytes(2) + 576, 0};
    test_rng r = rng_seed(0xa77e4);
    void *cache[3];
    double *rows[3];
    int src, c;
    for (src = 0; src < 3; src++) { /* write the caches, and read them back with the test's decoder */
        const int64_t n = (int64_t)nbl[src] * bsz[src];
        uint16_t *kv = (uint16_t *)test_malloc(sizeof(uint16_t) * (size_t)n * 512);
        int64_t i, *sl = (int64_t *)test_malloc(sizeof(int64_t) * (size_t)n);
        rows[src] = alloc_f64(n * 512);
        v4_random_rows(&r, kv, n, AITER_MLA_BF16);
        if (src == 2) {
            cache[src] = kv;
            for (i = 0; i < n * 512; i++) rows[src][i] = ref_bf16_to_f64(kv[i]);
        } else {
            aiter_mla_v4_cache_write_args w;
            cache[src] = test_malloc((size_t)(nbl[src] * pstride[src]));
            for (i = 0; i < n; i++) sl[i] = i;
            memset(&w, 0, sizeof w);
            w.kv = kv;
            w.slot_mapping = sl;
            w.kv_cache = cache[src];
            w.num_blocks = nbl[src];
            w.block_size = bsz[src];
            w.page_stride_bytes = pstride[src];
            w.num_tokens = n;
            w.fp8_dtype = fnuz[src] ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
            CHECK_STATUS(aiter_mla_v4_cache_write_ref(&w), AITER_MLA_OK, "");
            for (i = 0; i < n; i++) naive_v4_row((const unsigned char *)cache[src], pstride[src], bsz[src], i, fnuz[src], rows[src] + i * 512);
            free(kv);
        }
        free(sl);
    }
    for (c = 0; c < ARRAY_LEN(cases); c++) {
        const int H = cases[c].H, T = 4, K = 40;
        const int srcs[2] = {cases[c].keys_src, cases[c].extra_src}, dense[2] = {cases[c].keys_dense, cases[c].extra_dense};
        const float scale = c % 2 ? 0.0f : 0.07f; /* 0 means 512^-0.5 */
        void *q = test_malloc(sizeof(uint16_t) * (size_t)T * H * 512), *o = test_malloc(sizeof(float) * (size_t)T * H * 512);
        float *o_ref = alloc_f32((int64_t)T * H * 512), lse[4 * 128], lse_ref[4 * 128], sink[128];
        int32_t idx[2][4 * 40], ptr[2][5], lens[2][4];
        double *krows = alloc_f64((int64_t)2 * K * 512);
        aiter_mla_v4_attention_args a;
        int l, t, k, h;
        fill_random(q, (int64_t)T * H * 512, cases[c].qt, &r, -1.0f, 1.0f, 0.0f);
        for (h = 0; h < H; h++) /* 1: -inf / finite / +inf by head; 2: all +inf; 3: all finite */
            sink[h] = cases[c].sink_mode == 2 ? INFINITY : cases[c].sink_mode == 3 || h % 3 == 1 ? rng_f32(&r, -1.0f, 3.0f)
                                                                                                  : h % 3 == 0 ? -INFINITY : INFINITY;
        for (; h < 128; h++) sink[h] = 0.5f; /* read by the sweep's calls with more heads */
        for (l = 0; l < 2; l++) {
            const int64_t slots = srcs[l] < 0 ? 1 : (int64_t)nbl[srcs[l]] * bsz[srcs[l]];
            ptr[l][0] = 0;
            for (t = 0; t < T; t++) {
                /* token 0: only absent entries; token 2: none at all (length 0); duplicates, holes, past the end */
                const int n = t == 2 ? 0 : rng_int(&r, 1, K);
                lens[l][t] = n;
                for (k = 0; k < K; k++) {
                    int32_t e = t == 0 ? (k % 2 ? -1 : (int32_t)slots + k) : rng_int(&r, 0, 9) == 0 ? -1 : rng_int(&r, 0, (int)slots + 3);
                    if (k == 1 && t == 1) e = dense[l] ? idx[l][t * K] : idx[l][ptr[l][t]];
                    if (k == 0 && t == 3) e = (int32_t)slots; /* one past the last slot */
                    if (dense[l]) idx[l][t * K + k] = e;
                    else if (k < n) idx[l][ptr[l][t] + k] = e;
                }
                if (!dense[l]) ptr[l][t + 1] = ptr[l][t] + n;
            }
        }
        /* naive over the entries that count */
        for (t = 0; t < T; t++) {
            int nk = 0;
            for (l = 0; l < 2; l++) {
                const int64_t slots = srcs[l] < 0 ? 0 : (int64_t)nbl[srcs[l]] * bsz[srcs[l]];
                const int n = srcs[l] < 0 ? 0 : dense[l] && !cases[c].with_lens ? K : lens[l][t];
                for (k = 0; k < n; k++) {
                    const int32_t e = dense[l] ? idx[l][t * K + k] : idx[l][ptr[l][t] + k];
                    if (e < 0 || e >= slots) continue;
                    memcpy(krows + (int64_t)nk++ * 512, rows[srcs[l]] + (int64_t)e * 512, 512 * sizeof(double));
                }
            }
            naive_v4_attend(q, (int64_t)t * H * 512, cases[c].qt, H, krows, nk, scale != 0.0f ? scale : 1.0 / sqrt(512.0),
                            cases[c].sink_mode ? sink : NULL, o_ref + (int64_t)t * H * 512, lse_ref + t * H);
        }
        memset(&a, 0, sizeof a);
        a.q = q;
        a.o = o;
        a.lse = lse;
        a.attn_sink = cases[c].sink_mode ? sink : NULL;
        a.num_tokens = T;
        a.num_heads = H;
        a.sm_scale = scale;
        a.q_dtype = cases[c].qt == AITER_MLA_BF16 ? AITER_MLA_DTYPE_DEFAULT : cases[c].qt;
        a.o_dtype = cases[c].ot;
        for (l = 0; l < 2; l++) {
            aiter_mla_v4_keys *kk = l ? &a.extra_keys : &a.keys;
            if (srcs[l] < 0) continue;
            kk->cache = cache[srcs[l]];
            kk->num_blocks = nbl[srcs[l]];
            kk->block_size = bsz[srcs[l]] == 64 ? 0 : bsz[srcs[l]];
            kk->page_stride_bytes = srcs[l] == 1 ? pstride[1] : 0;
            kk->rows = srcs[l] == 2;
            kk->dtype = srcs[l] == 1 ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_DTYPE_DEFAULT;
            kk->indices = idx[l];
            if (dense[l]) {
                kk->indices_stride = K;
                kk->lens = cases[c].with_lens ? lens[l] : NULL;
            } else {
                kk->indptr = ptr[l];
            }
        }
        poison_fill(o, (int64_t)T * H * 512, cases[c].ot);
        poison_f32(lse, T * H);
        if (c == 0 && T > 0) CHECK_OUT_OF_MEMORY(aiter_mla_v4_attention_ref(&a));
        if (CHECK_STATUS(aiter_mla_v4_attention_ref(&a), AITER_MLA_OK, "")) {
            char what[96];
            int zeros_ok = 1;
            snprintf(what, sizeof what, "v4 attention case %d (H=%d)", c, H);
            v4_compare(what, o, cases[c].ot, lse, o_ref, lse_ref, T, H);
            for (t = 0; t < T; t++) /* +inf sink or no valid key: o exactly 0, no NaN */
                for (h = 0; h < H; h++)
                    if ((cases[c].sink_mode && sink[h] == INFINITY) || lse_ref[t * H + h] == INFINITY) {
                        int d;
                        for (d = 0; d < 512; d++) zeros_ok &= ref_load(o, ((int64_t)t * H + h) * 512 + d, cases[c].ot) == 0.0;
                    }
            CHECK(lse_ref[0] == INFINITY, "%s: token 0 should see no key", what);
            CHECK(zeros_ok, "%s: a +inf sink or an empty token did not give o = 0 (or the lse is off)", what);
        }
        if (c == 1) { /* padded q and o rows, o_dtype left DEFAULT (q's bf16): the same o, the gaps untouched */
            const int64_t qsh = 520, qst = H * qsh + 8, osh = 528, ost = H * osh + 16;
            uint16_t *qs = (uint16_t *)test_malloc(sizeof(uint16_t) * (size_t)(T * qst)), *os = (uint16_t *)test_malloc(sizeof(uint16_t) * (size_t)(T * ost));
            aiter_mla_v4_attention_args e = a;
            int64_t i, bad = 0, gaps = 0;
            for (i = 0; i < T * qst; i++) qs[i] = 0x7fc1; /* NaN in the gaps: read, it would spoil o */
            for (t = 0; t < T; t++)
                for (h = 0; h < H; h++) memcpy(qs + t * qst + h * qsh, (const uint16_t *)q + ((int64_t)t * H + h) * 512, 512 * 2);
            for (i = 0; i < T * ost; i++) os[i] = 0x7fc3;
            e.q = qs;
            e.q_stride_token = qst;
            e.q_stride_head = qsh;
            e.o = os;
            e.o_stride_token = ost;
            e.o_stride_head = osh;
            e.o_dtype = AITER_MLA_DTYPE_DEFAULT;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_OK, "");
            for (i = 0; i < T * ost; i++) {
                const int64_t tt = i / ost, rem = i % ost, hh = rem / osh, d = rem % osh;
                if (hh < H && d < 512) bad += os[i] != ((const uint16_t *)o)[(tt * H + hh) * 512 + d];
                else gaps += os[i] != 0x7fc3;
            }
            CHECK(bad == 0 && gaps == 0, "v4 attention, padded q/o rows: %lld values differ from the dense call's, %lld gap values written",
                  (long long)bad, (long long)gaps);
            free(qs);
            free(os);
        }
        if (c == 1) {
            aiter_mla_v4_attention_args e = a;
            float nan_sink[16];
            int32_t bad_ptr[5] = {0, 3, 2, 4, 4};
            memcpy(nan_sink, sink, sizeof nan_sink);
            nan_sink[5] = NAN;
            e.attn_sink = nan_sink;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "attn_sink");
            e = a;
            e.keys.rows = 2;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "rows");
            e = a;
            e.extra_keys.dtype = AITER_MLA_BF16; /* MODEL1 pages need an fp8 flavour */
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "dtype");
            e = a;
            e.extra_keys.indptr = bad_ptr;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "indptr");
            e = a;
            e.keys.indices_stride = 0;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "indices_stride");
            e = a;
            e.keys.indices = NULL;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_NULL_POINTER, "indices");
            e = a;
            e.keys.cache = NULL;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_NULL_POINTER, "cache");
            e = a;
            e.q_dtype = AITER_MLA_FP8_E4M3FN;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "q_dtype");
            e = a;
            e.o_dtype = AITER_MLA_FP8_E4M3FN;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "o_dtype");
            e = a;
            e.num_heads = 129;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
            /* o rows that overlap: heads' rows closer than 512; tokens' rows closer than 512 (T = 4),
             * a stride no row can overlap by with one token */
            e = a;
            e.num_heads = 2;
            e.q_stride_token = 0;
            e.o_stride_head = 100;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_head = 100 is below");
            e = a;
            e.o_stride_token = 300;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_token = 300 is below");
            e.num_tokens = 1;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_OK, "");
            e = a;
            e.sm_scale = -1.0f;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "sm_scale");
            e = a;
            e.extra_keys.cache = NULL;
            e.extra_keys.num_blocks = 0;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_NULL_POINTER, "extra_keys.cache");
            e = a; /* o or lse over a key list's arrays, which later tokens read */
            e.lse = (float *)a.keys.indices;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "lse overlaps");
            e = a;
            e.o = (void *)a.extra_keys.indices; /* o's rows may reach lse first: either output is named */
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "overlaps");
            e = a;
            e.o = NULL;
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_NULL_POINTER, "o");
            e.num_tokens = 0; /* no tokens: nothing to write */
            CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_OK, "");
            /* the GPU wrapper refuses what the reference refuses, and reads no device array */
#define V4A_CASE(mutation, expect) LIKE_REF_CASE(v4_attention, e, a, mutation, expect)
            V4A_CASE((void)0, AITER_MLA_ERR_NO_GPU);
            SWEEP(v4_attention, a, sweep_v4_attention_fields);
            CACHE_BYTES_CASES(v4_attention, e, a, keys.cache_bytes, v4_keys_cache_bytes(&a.keys), "keys.cache_bytes");
            if (a.extra_keys.indices)
                CACHE_BYTES_CASES(v4_attention, e, a, extra_keys.cache_bytes, v4_keys_cache_bytes(&a.extra_keys),
                                  "extra_keys.cache_bytes");
            if (!a.keys.rows) { /* a MODEL1 cache too small for its pages names their token count, a likely fault */
                char want[64];
                snprintf(want, sizeof want, "(pages of block_size = %d tokens)", a.keys.block_size ? a.keys.block_size : 64);
                e = a;
                e.keys.cache_bytes = (size_t)v4_keys_cache_bytes(&a.keys) - 1;
                CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, want);
            }
            SWEEP(v4_attention_workspace_size, a, sweep_v4_attention_fields);
            V4A_CASE(e.keys.rows = 2, AITER_MLA_ERR_INVALID_ARGUMENT);
            V4A_CASE(e.extra_keys.dtype = AITER_MLA_BF16, AITER_MLA_ERR_UNSUPPORTED);
            V4A_CASE(e.keys.indices_stride = 0, AITER_MLA_ERR_INVALID_ARGUMENT);
            V4A_CASE(e.keys_read_once = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
            V4A_CASE(e.keys_read_once = 1, AITER_MLA_ERR_NO_GPU);
            V4A_CASE(e.keys_shared = 2, AITER_MLA_ERR_INVALID_ARGUMENT);
            V4A_CASE(e.keys_shared = 1, AITER_MLA_ERR_NO_GPU);
            V4A_CASE((e.keys_shared = 1, e.keys_read_once = 1), AITER_MLA_ERR_INVALID_ARGUMENT);
            { /* a token's two lists hold at most 2^31 - 1 entries (the kernels count a token's keys
                 in int32): two dense strides past it, and ragged rows past it on the host */
                static const int32_t p0[5] = {0, 0x7fff0000, 0x7fff0000, 0x7fff0000, 0x7fff0000};
                static const int32_t p1[5] = {0, 0x10000, 0x10000, 0x10000, 0x10000}, p2[5] = {0, 0, 0, 0, 0}; /* T = 4 */
                e = a;
                e.extra_keys = e.keys;
                e.keys.indptr = e.extra_keys.indptr = NULL;
                e.keys.lens = e.extra_keys.lens = NULL;
                e.keys.indices_stride = INT32_MAX;
                e.extra_keys.indices_stride = 1;
                CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "indices_stride");
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "indices_stride");
                e.keys.indices_stride = (int64_t)INT32_MAX + 1; /* one list alone */
                e.extra_keys.indices = NULL;
                CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "indices_stride");
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "indices_stride");
                e = a;
                e.extra_keys = e.keys;
                e.keys.indptr = p0;
                e.extra_keys.indptr = p1;
                CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "2^31 - 1 a token");
                e.extra_keys.indptr = p2; /* no entries in extra_keys: within the bound */
                /* past the bound check the reference would read keys.indptr[T] entries, far more
                   than keys.indices holds: lse placed inside them stops it at the overlap check,
                   the check after the bound, whatever the stack's layout */
                e.lse = (float *)(void *)(e.keys.indices + 1);
                CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "overlaps keys.indices");
            }
            { /* a ragged list's capacity (case 1's extra_keys): the reference refuses an indptr[T]
                 past it, both calls a capacity outside 0..2^31 - 1, and the GPU call checks the
                 outputs against the entries it sizes */
                const int32_t end = a.extra_keys.indptr ? a.extra_keys.indptr[T] : -1;
                CHECK(end > 0, "v4 attention: case 1's extra_keys should be ragged with entries (indptr[T] = %d)", (int)end);
                e = a;
                e.extra_keys.capacity = end;
                CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_OK, "");
                e.extra_keys.capacity = end - 1;
                CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "capacity");
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_NO_GPU, ""); /* the GPU cuts rows there */
                e.extra_keys.capacity = -1;
                CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "capacity");
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "capacity");
                e.extra_keys.capacity = (int64_t)INT32_MAX + 1;
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "capacity");
                e = a;
                e.lse = (float *)(void *)(a.extra_keys.indices + end - 1); /* within the entries */
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_NO_GPU, ""); /* unsized on the GPU */
                e.extra_keys.capacity = end;
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "lse overlaps extra_keys.indices");
            }
            V4A_CASE(e.keys.indices = NULL, AITER_MLA_ERR_NULL_POINTER);
            V4A_CASE(e.keys.cache = NULL, AITER_MLA_ERR_NULL_POINTER);
            V4A_CASE(e.extra_keys.cache = NULL, AITER_MLA_ERR_NULL_POINTER);
            V4A_CASE(e.extra_keys.indices = NULL, AITER_MLA_ERR_NO_GPU);
            V4A_CASE(e.q_dtype = AITER_MLA_FP8_E4M3FN, AITER_MLA_ERR_UNSUPPORTED);
            V4A_CASE(e.o_dtype = AITER_MLA_FP8_E4M3FN, AITER_MLA_ERR_UNSUPPORTED);
            V4A_CASE(e.num_heads = 129, AITER_MLA_ERR_INVALID_ARGUMENT);
            V4A_CASE(e.num_tokens = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
            V4A_CASE(e.sm_scale = -1.0f, AITER_MLA_ERR_INVALID_ARGUMENT);
            V4A_CASE(e.q_stride_head = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
            V4A_CASE((e.num_heads = 2, e.q_stride_token = 0, e.o_stride_token = 0, e.o_stride_head = (int64_t)1 << 32),
                     AITER_MLA_ERR_INVALID_ARGUMENT); /* the default o_stride_token, 2 x 2^32 */
            V4A_CASE(e.o = NULL, AITER_MLA_ERR_NULL_POINTER);
            OVERLAP_CASE(v4_attention, e, a, e.lse = (float *)a.keys.indices, "lse overlaps"); /* dense keys: host-sized */
            OVERLAP_CASE(v4_attention, e, a, e.o = (void *)a.q, "o overlaps q");
            V4A_CASE((e.o = NULL, e.num_tokens = 0), AITER_MLA_ERR_NO_GPU);
            V4A_CASE(e.num_splits = 65, AITER_MLA_ERR_INVALID_ARGUMENT);
            V4A_CASE(e.num_splits = -1, AITER_MLA_ERR_INVALID_ARGUMENT);
#undef V4A_CASE
            { /* split over several blocks: the GPU needs the workspace (the reference ignores it) */
                size_t need = 0;
                char ws_small[16];
                void *ws;
                e = a;
                e.num_splits = 4;
                CHECK_STATUS(aiter_mla_v4_attention_workspace_size(&e, &need), AITER_MLA_OK, "");
                CHECK(need == (size_t)e.num_tokens * 4 * e.num_heads * 513 * 4, "v4 attention workspace: %zu bytes", need);
                CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_OK, "");
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_NULL_POINTER, "workspace");
                CHECK_KERNEL_LIKE_CALL(v4_attention, &e);
                e.workspace = ws_small;
                e.workspace_bytes = sizeof ws_small;
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_BUFFER_TOO_SMALL, "workspace_bytes");
                CHECK_KERNEL_LIKE_CALL(v4_attention, &e);
                e.num_tokens = 0; /* nothing to launch: no workspace needed, by the query either */
                e.workspace = ws_small + 1;
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_NO_GPU, "AITER_MLA_NO_GPU");
                CHECK_KERNEL_LIKE_CALL(v4_attention, &e);
                e.q = (const char *)a.q + 1; /* q off its alignment: refused alike with no tokens too */
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "q");
                CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "q");
                CHECK_KERNEL_LIKE_CALL(v4_attention, &e);
                e.q = a.q;
                e.num_tokens = a.num_tokens;
                e.workspace = ws = malloc(need);
                e.workspace_bytes = need;
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_NO_GPU, "");
                CHECK_KERNEL_LIKE_CALL(v4_attention, &e);
                /* the partials over an output, or over what the keys read: each placed inside the
                   partials, so that the span names it whatever lies past the test's buffers */
                e.o = (char *)ws + 64;
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "workspace overlaps o");
                e.o = a.o;
                /* keys.indices, a device array: its contents are not read here */
                e.keys.indices = (const int32_t *)ws + 16;
                CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "workspace overlaps keys.indices");
                e.keys.indices = a.keys.indices;
                free(ws);
                e.num_splits = 1;
                CHECK_STATUS(aiter_mla_v4_attention_workspace_size(&e, &need), AITER_MLA_OK, "");
                CHECK(need == 0, "v4 attention workspace for one split: %zu bytes", need);
                CHECK_STATUS(aiter_mla_v4_attention_workspace_size(NULL, &need), AITER_MLA_ERR_NULL_POINTER, "args");
                CHECK_STATUS(aiter_mla_v4_attention_workspace_size(&e, NULL), AITER_MLA_ERR_NULL_POINTER, "bytes");
                { /* the most splits over the most tokens they allow: over 4 GiB, exact in a 64-bit size_t, refused in a 32-bit one */
                    uint64_t most;
                    e.num_splits = AITER_MLA_V4_MAX_SPLITS;
                    e.num_tokens = INT32_MAX / AITER_MLA_V4_MAX_SPLITS;
                    most = (uint64_t)e.num_tokens * AITER_MLA_V4_MAX_SPLITS * (uint64_t)e.num_heads * 513 * 4;
                    if (most <= SIZE_MAX) {
                        CHECK_STATUS(aiter_mla_v4_attention_workspace_size(&e, &need), AITER_MLA_OK, "");
                        CHECK(need == most, "v4 attention workspace, most splits: %zu bytes, expected %llu", need, (unsigned long long)most);
                    } else {
                        CHECK_STATUS(aiter_mla_v4_attention_workspace_size(&e, &need), AITER_MLA_ERR_INVALID_ARGUMENT,
                                     "pass size_t on this host");
                    }
                }
            }
            e = a;
            e.attn_sink = nan_sink;
            CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_NO_GPU, "");
            CHECK_KERNEL_LIKE_CALL(v4_attention, &e);
            e = a;
            e.extra_keys.indptr = bad_ptr;
            CHECK_STATUS(aiter_mla_v4_attention(&e, NULL), AITER_MLA_ERR_NO_GPU, "");
            CHECK_KERNEL_LIKE_CALL(v4_attention, &e);
            CHECK_STATUS(aiter_mla_v4_attention(NULL, NULL), AITER_MLA_ERR_NULL_POINTER, "args");
            CHECK_KERNEL_LIKE_CALL(v4_attention, NULL);
        }
        free(q);
        free(o);
        free(o_ref);
        free(krows);
    }
    for (src = 0; src < 3; src++) {
        free(cache[src]);
        free(rows[src]);
    }
}

/* One decode step of a layer of compress ratio `ratio` with H heads, built the way a
 * runtime builds it (writer, builders, graph-buffer copy), against a naive computation that
 * takes every key set from positions. Requests: shorter than one compressed block, at the
 * window's edge (two tokens), below the window, long (two tokens, the last marked invalid:
 * its request, position and top-k entries would give it keys, so only is_valid_token
 * empties its lists). */
static void run_v4_decode_case(int ratio, int H, uint64_t seed) {
    enum { B = 4, T = 6, SWA_BS = 64, MAXLEN = 1024, TOPK = 32 };
    const int32_t qsl[B + 1] = {0, 1, 3, 4, 6}, seq[B] = {3, 130, 100, 700};
    const int32_t t2r[T] = {0, 1, 1, 2, 3, 3};
    const uint8_t valid[T] = {1, 1, 1, 1, 1, 0};
    const int swa_pages = MAXLEN / SWA_BS, cbs = 256 / ratio, c_pages = ratio > 1 ? MAXLEN / ratio / cbs + 1 : 1;
    const int c128w = MAXLEN / 128;
    const aiter_mla_dtype swa_fp8 = ratio == 128 ? AITER_MLA_FP8_E4M3FNUZ : AITER_MLA_FP8_E4M3FN;
    const int64_t swa_pb = naive_v4_page_bytes(SWA_BS), c_pb = naive_v4_page_bytes(cbs);
    test_rng r = rng_seed(seed);
    unsigned char *swa = (unsigned char *)test_malloc((size_t)(B * swa_pages * swa_pb));
    unsigned char *comp = (unsigned char *)test_malloc((size_t)(B * c_pages * c_pb));
    int32_t swa_bt[B * (MAXLEN / SWA_BS)], c_bt[B * (MAXLEN / 4 / 64 + 1)], local[T * TOPK];
    int64_t positions[T];
    uint16_t *q = (uint16_t *)test_malloc(sizeof(uint16_t) * T * H * 512);
    float *o = alloc_f32((int64_t)T * H * 512), *o_ref = alloc_f32((int64_t)T * H * 512), lse[T * 128], lse_ref[T * 128], sink[128];
    double *krows = alloc_f64((int64_t)(128 + TOPK + c128w) * 512);
    v4_outs swa_o, c_o;
    int32_t g_idx[T * 128], g_ptr[T + 1];
    aiter_mla_v4_swa_index_args si;
    aiter_mla_v4_ragged_copy_args cp;
    aiter_mla_v4_attention_args a;
    int b, i, t, k;
    char what[96];
    for (b = 0; b < B; b++) { /* interleaved pages, every cached token and compressed entry written */
        uint16_t *kv = (uint16_t *)test_malloc(sizeof(uint16_t) * (size_t)seq[b] * 512);
        int64_t *sl = (int64_t *)test_malloc(sizeof(int64_t) * (size_t)seq[b]);
        for (i = 0; i < swa_pages; i++) swa_bt[b * swa_pages + i] = (swa_pages - 1 - i) * B + b;
        for (i = 0; i < c_pages; i++) c_bt[b * c_pages + i] = i * B + (B - 1 - b);
        v4_random_rows(&r, kv, seq[b], AITER_MLA_BF16);
        for (i = 0; i < seq[b]; i++) sl[i] = (int64_t)swa_bt[b * swa_pages + i / SWA_BS] * SWA_BS + i % SWA_BS;
        v4_write(swa, (int64_t)B * swa_pages, SWA_BS, kv, sl, seq[b], swa_fp8);
        if (ratio > 1) {
            for (i = 0; i < seq[b] / ratio; i++) sl[i] = (int64_t)c_bt[b * c_pages + i / cbs] * cbs + i % cbs;
            v4_random_rows(&r, kv, seq[b] / ratio, AITER_MLA_BF16);
            v4_write(comp, (int64_t)B * c_pages, cbs, kv, sl, seq[b] / ratio, AITER_MLA_FP8_E4M3FN);
        }
        free(kv);
        free(sl);
    }
    for (t = 0; t < T; t++) positions[t] = seq[t2r[t]] - (qsl[t2r[t] + 1] - qsl[t2r[t]]) + (t - qsl[t2r[t]]);
    /* the indexer: min(n, TOPK) entries j < n = (pos + 1) / 4, valid first; token 1: half as
     * many, with holes between them; token 3: empty */
    for (t = 0; t < T; t++) {
        const int n = (int)((positions[t] + 1) / 4), take = n < (t == 1 ? TOPK / 2 : TOPK) ? n : (t == 1 ? TOPK / 2 : TOPK);
        for (k = 0; k < TOPK; k++) local[t * TOPK + k] = -1;
        if (t == 3) continue;
        for (k = 0; k < take; k++) local[t * TOPK + (t == 1 ? 2 * k + 1 : k)] = rng_int(&r, 0, n - 1);
    }
    fill_random(q, (int64_t)T * H * 512, AITER_MLA_BF16, &r, -1.0f, 1.0f, 0.0f);
    for (i = 0; i < H; i++) sink[i] = i % 4 == 0 ? -INFINITY : i % 4 == 3 ? INFINITY : rng_f32(&r, -2.0f, 4.0f);
    for (; i < 128; i++) sink[i] = 0.5f; /* read by the sweep's calls with more heads */

    /* SWA lists (ragged), into persistent buffers */
    memset(&si, 0, sizeof si);
    si.query_start_loc = qsl;
    si.seq_lens = seq;
    si.token_to_req = t2r;
    si.is_valid_token = valid;
    si.block_table = swa_bt;
    si.block_table_stride = swa_pages;
    si.num_reqs = B;
    si.num_tokens = T;
    si.out = v4_outs_make(&swa_o, T, 128, T * 128);
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&si), AITER_MLA_OK, "");
    memset(&cp, 0, sizeof cp);
    cp.indices = swa_o.idx;
    cp.indptr = swa_o.ptr;
    cp.num_rows = T;
    cp.max_entries_per_row = 128;
    cp.indices_buffer = g_idx;
    cp.indices_buffer_capacity = T * 128;
    cp.indptr_buffer = g_ptr;
    cp.indptr_buffer_capacity = T + 1;
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&cp), AITER_MLA_OK, "");
    /* compressed lists: ratio 4 dense (table + lengths), ratio 128 ragged */
    if (ratio == 4) {
        aiter_mla_v4_topk_args tk;
        memset(&tk, 0, sizeof tk);
        tk.topk_indices = local;
        tk.topk = TOPK;
        tk.token_to_req = t2r;
        tk.is_valid_token = valid;
        tk.block_table = c_bt;
        tk.block_table_stride = c_pages;
        tk.block_size = cbs;
        tk.num_reqs = B;
        tk.num_tokens = T;
        tk.out = v4_outs_make(&c_o, T, TOPK, T * TOPK);
        CHECK_STATUS(aiter_mla_v4_global_topk_ref(&tk), AITER_MLA_OK, "");
    } else if (ratio == 128) {
        aiter_mla_v4_c128_args c;
        memset(&c, 0, sizeof c);
        c.positions = positions;
        c.token_to_req = t2r;
        c.is_valid_token = valid;
        c.block_table = c_bt;
        c.block_table_stride = c_pages;
        c.num_reqs = B;
        c.width = c128w;
        c.num_tokens = T;
        c.out = v4_outs_make(&c_o, T, c128w, T * c128w);
        CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&c), AITER_MLA_OK, "");
    }
    memset(&a, 0, sizeof a);
    a.q = q;
    a.o = o;
    a.lse = lse;
    a.attn_sink = sink;
    a.num_tokens = T;
    a.num_heads = H;
    a.o_dtype = AITER_MLA_F32;
    a.keys.cache = swa;
    a.keys.num_blocks = (int64_t)B * swa_pages;
    a.keys.dtype = swa_fp8;
    a.keys.indices = g_idx;
    a.keys.indptr = g_ptr;
    if (ratio > 1) {
        a.extra_keys.cache = comp;
        a.extra_keys.num_blocks = (int64_t)B * c_pages;
        a.extra_keys.block_size = cbs;
        a.extra_keys.indices = ratio == 4 ? c_o.dense : c_o.idx;
        if (ratio == 4) {
            a.extra_keys.indices_stride = c_o.width + 2;
            a.extra_keys.lens = c_o.lens;
        } else {
            a.extra_keys.indptr = c_o.ptr;
        }
    }
    poison_f32(o, (int64_t)T * H * 512);
    poison_f32(lse, T * H);
    CHECK_STATUS(aiter_mla_v4_attention_ref(&a), AITER_MLA_OK, "");
    /* naive: keys from positions */
    for (t = 0; t < T; t++) {
        int nk = 0;
        if (valid[t]) {
            const int rq = t2r[t];
            const int64_t pos = positions[t], lo = pos - 127 > 0 ? pos - 127 : 0;
            int64_t p;
            for (p = lo; p <= pos; p++)
                naive_v4_row(swa, swa_pb, SWA_BS, (int64_t)swa_bt[rq * swa_pages + p / SWA_BS] * SWA_BS + p % SWA_BS, ratio == 128,
                             krows + (int64_t)nk++ * 512);
            if (ratio == 4)
                for (k = 0; k < TOPK; k++) {
                    const int32_t j = local[t * TOPK + k];
                    if (j < 0) continue;
                    naive_v4_row(comp, c_pb, cbs, (int64_t)c_bt[rq * c_pages + j / cbs] * cbs + j % cbs, 0, krows + (int64_t)nk++ * 512);
                }
            if (ratio == 128)
                for (k = 0; k < (pos + 1) / 128; k++)
                    naive_v4_row(comp, c_pb, cbs, (int64_t)c_bt[rq * c_pages + k / cbs] * cbs + k % cbs, 0, krows + (int64_t)nk++ * 512);
        }
        naive_v4_attend(q, (int64_t)t * H * 512, AITER_MLA_BF16, H, krows, nk, 1.0 / sqrt(512.0), sink, o_ref + (int64_t)t * H * 512,
                        lse_ref + t * H);
    }
    snprintf(what, sizeof what, "v4 decode ratio %d H=%d", ratio, H);
    v4_compare(what, o, AITER_MLA_F32, lse, o_ref, lse_ref, T, H);
    CHECK(lse[5 * H] == INFINITY && o[(int64_t)5 * H * 512] == 0.0f, "%s: the invalid token must give o = 0, lse = +inf", what);
    v4_outs_free(&swa_o);
    if (ratio > 1) v4_outs_free(&c_o);
    free(swa);
    free(comp);
    free(q);
    free(o);
    free(o_ref);
    free(krows);
}

static void test_v4_decode(void) {
    run_v4_decode_case(1, 16, 0xd1);
    run_v4_decode_case(4, 64, 0xd4);
    run_v4_decode_case(128, 128, 0xd128);
    run_v4_decode_case(4, 1, 0xd41);
    run_v4_decode_case(128, 16, 0xd12816);
}

/* vLLM's chunked prefill of a layer against a naive computation over the caches. Six
 * requests: no prefix, short prefixes, prefixes at and past the window, long. */
static void run_v4_prefill_case(int ratio, int H, int chunk_size, aiter_mla_dtype ws_dtype, uint64_t seed) {
    enum { B = 6, SWA_BS = 64, MAXLEN = 1536, MBT = 64, TOPK = 48 };
    const int32_t q_lens[B] = {5, 4, 3, 2, 6, 1}, prefix[B] = {0, 3, 200, 126, 1000, 127};
    const int swa_pages = MAXLEN / SWA_BS, cbs = ratio > 1 ? 256 / ratio : 1, c_pages = ratio > 1 ? MAXLEN / ratio / cbs + 1 : 1;
    const int n_comp = ratio > 1 ? (MAXLEN + ratio - 1) / ratio : 0, topk = ratio == 4 ? TOPK : ratio == 128 ? n_comp : 0;
    const int64_t swa_pb = naive_v4_page_bytes(SWA_BS), c_pb = naive_v4_page_bytes(cbs);
    test_rng r = rng_seed(seed);
    int32_t qsl[B + 1], seq[B], swa_bt[B * (MAXLEN / SWA_BS)], c_bt[B * (MAXLEN / 4 / 64 + 1)], *topk_idx;
    unsigned char *swa = (unsigned char *)test_malloc((size_t)(B * swa_pages * swa_pb));
    unsigned char *comp = (unsigned char *)test_malloc((size_t)(B * c_pages * c_pb));
    uint16_t *q;
    float *o, *o_ref, *lse, *lse_ref, sink[128];
    double *krows = alloc_f64((int64_t)(128 + TOPK + n_comp) * 512);
    aiter_mla_v4_prefill_args p;
    size_t bytes = 0;
    void *ws;
    int b, i, k, T;
    char what[128];
    qsl[0] = 0;
    for (b = 0; b < B; b++) {
        qsl[b + 1] = qsl[b] + q_lens[b];
        seq[b] = prefix[b] + q_lens[b];
    }
    T = qsl[B];
    q = (uint16_t *)test_malloc(sizeof(uint16_t) * (size_t)T * H * 512);
    o = alloc_f32((int64_t)T * H * 512 * 3); /* room for the split partials placed on it (below) */
    o_ref = alloc_f32((int64_t)T * H * 512);
    lse = alloc_f32((int64_t)T * H);
    lse_ref = alloc_f32((int64_t)T * H);
    topk_idx = alloc_i32((int64_t)T * (topk + 3));
    for (b = 0; b < B; b++) {
        uint16_t *kv = (uint16_t *)test_malloc(sizeof(uint16_t) * (size_t)seq[b] * 512);
        int64_t *sl = (int64_t *)test_malloc(sizeof(int64_t) * (size_t)seq[b]);
        for (i = 0; i < swa_pages; i++) swa_bt[b * swa_pages + i] = i * B + b;
        for (i = 0; i < c_pages; i++) c_bt[b * c_pages + i] = (c_pages - 1 - i) * B + b;
        v4_random_rows(&r, kv, seq[b], AITER_MLA_BF16);
        for (i = 0; i < seq[b]; i++) sl[i] = (int64_t)swa_bt[b * swa_pages + i / SWA_BS] * SWA_BS + i % SWA_BS;
        v4_write(swa, (int64_t)B * swa_pages, SWA_BS, kv, sl, seq[b], AITER_MLA_FP8_E4M3FN);
        if (ratio > 1) {
            for (i = 0; i < seq[b] / ratio; i++) sl[i] = (int64_t)c_bt[b * c_pages + i / cbs] * cbs + i % cbs;
            v4_random_rows(&r, kv, seq[b] / ratio, AITER_MLA_BF16);
            v4_write(comp, (int64_t)B * c_pages, cbs, kv, sl, seq[b] / ratio, AITER_MLA_FP8_E4M3FN);
        }
        free(kv);
        free(sl);
    }
    /* top-k rows: ratio 4, the indexer's (min(n, TOPK) entries j < n, then -1); ratio 128, the
     * local lists of aiter_mla_v4_c128_indices_ref (width N) */
    if (ratio == 128) {
        int64_t *pos = (int64_t *)test_malloc(sizeof(int64_t) * (size_t)T);
        aiter_mla_v4_c128_args c;
        for (b = 0; b < B; b++)
            for (i = 0; i < q_lens[b]; i++) pos[qsl[b] + i] = prefix[b] + i;
        memset(&c, 0, sizeof c);
        c.positions = pos;
        c.width = topk;
        c.num_tokens = T;
        c.out.dense = topk_idx;
        c.out.dense_stride = topk + 3;
        CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&c), AITER_MLA_OK, "");
        free(pos);
    } else if (ratio == 4) {
        for (b = 0; b < B; b++)
            for (i = 0; i < q_lens[b]; i++) {
                const int tt = qsl[b] + i, n = (prefix[b] + i + 1) / 4, take = n < TOPK ? n : TOPK;
                for (k = 0; k < topk + 3; k++) topk_idx[tt * (topk + 3) + k] = k < take ? rng_int(&r, 0, n - 1) : -1;
            }
    }
    fill_random(q, (int64_t)T * H * 512, AITER_MLA_BF16, &r, -1.0f, 1.0f, 0.0f);
    for (i = 0; i < H; i++) sink[i] = i % 3 == 0 ? -INFINITY : rng_f32(&r, -1.0f, 3.0f);
    for (; i < 128; i++) sink[i] = 0.5f; /* read by the sweep's calls with more heads */
    /* naive: each token's window and compressed entries read from the caches */
    for (b = 0; b < B; b++)
        for (i = 0; i < q_lens[b]; i++) {
            const int tt = qsl[b] + i, pos = prefix[b] + i, lo = pos - 127 > 0 ? pos - 127 : 0;
            const int tl = ratio == 1 ? 0 : (pos + 1) / ratio < topk ? (pos + 1) / ratio : topk;
            int nk = 0, pp;
            for (pp = lo; pp <= pos; pp++)
                naive_v4_row(swa, swa_pb, SWA_BS, (int64_t)swa_bt[b * swa_pages + pp / SWA_BS] * SWA_BS + pp % SWA_BS, 0,
                             krows + (int64_t)nk++ * 512);
            for (k = 0; k < tl; k++) { /* ratio 128: entries 0 .. tl - 1, not the builder's list */
                const int32_t j = ratio == 128 ? k : topk_idx[tt * (topk + 3) + k];
                naive_v4_row(comp, c_pb, cbs, (int64_t)c_bt[b * c_pages + j / cbs] * cbs + j % cbs, 0, krows + (int64_t)nk++ * 512);
            }
            naive_v4_attend(q, (int64_t)tt * H * 512, AITER_MLA_BF16, H, krows, nk, 1.0 / sqrt(512.0), sink,
                            o_ref + (int64_t)tt * H * 512, lse_ref + tt * H);
        }
    memset(&p, 0, sizeof p);
    p.attn.q = q;
    p.attn.o = o;
    p.attn.lse = lse;
    p.attn.attn_sink = sink;
    p.attn.num_heads = H;
    p.attn.o_dtype = AITER_MLA_F32;
    p.batch = B;
    p.query_start_loc = qsl;
    p.seq_lens = seq;
    p.compress_ratio = ratio;
    p.max_model_len = MAXLEN;
    p.max_num_batched_tokens = MBT;
    p.chunk_size = chunk_size;
    p.topk_indices = ratio > 1 ? topk_idx : NULL;
    p.topk_stride = topk + 3;
    p.topk = topk;
    p.swa_cache = swa;
    p.swa_num_blocks = (int64_t)B * swa_pages;
    p.swa_block_table = swa_bt;
    p.swa_block_table_stride = swa_pages;
    p.compressed_cache = ratio > 1 ? comp : NULL;
    p.compressed_num_blocks = (int64_t)B * c_pages;
    p.compressed_block_table = c_bt;
    p.compressed_block_table_stride = c_pages;
    p.workspace_dtype = ws_dtype;
    CHECK_STATUS(aiter_mla_v4_prefill_workspace_size(&p, &bytes), AITER_MLA_OK, "");
    {
        const int64_t N = n_comp, M = N + 128 + MBT;
        const size_t want = (size_t)((chunk_size ? chunk_size : 4) * M * 512) * test_dtype_bytes(ws_dtype ? ws_dtype : AITER_MLA_BF16) +
                            4 * (size_t)(3 * (chunk_size ? chunk_size : 4) + 1 + MBT + 1 + MBT * (topk + 128));
        CHECK(bytes == want, "v4 prefill workspace: %zu bytes, expected %zu", bytes, want);
    }
    ws = test_malloc(bytes);
    memset(ws, 0xff, bytes); /* NaN everywhere: a row read before it was gathered would show */
    p.workspace = ws;
    p.workspace_bytes = bytes;
    poison_f32(o, (int64_t)T * H * 512);
    poison_f32(lse, (int64_t)T * H);
    snprintf(what, sizeof what, "v4 prefill ratio %d H=%d chunk %d workspace %s", ratio, H, chunk_size,
             aiter_mla_dtype_name(ws_dtype ? ws_dtype : AITER_MLA_BF16));
    if (CHECK_STATUS(aiter_mla_v4_prefill_ref(&p), AITER_MLA_OK, "")) {
        /* the workspace holds the dequantised rows exactly (fp8 x 2^k fits bf16): f32 tolerance */
        v4_compare(what, o, AITER_MLA_F32, lse, o_ref, lse_ref, T, H);
    }
    if (ratio == 4 && chunk_size == 0) {
        aiter_mla_v4_prefill_args e = p;
        int32_t long_seq[B];
        e.workspace_bytes = bytes - 1;
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "workspace_bytes");
        e = p;
        memcpy(long_seq, seq, sizeof long_seq);
        long_seq[3] = MAXLEN + 1;
        e.seq_lens = long_seq;
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "max_model_len");
        e = p;
        e.max_num_batched_tokens = T - 1;
        e.workspace_bytes = bytes; /* larger than needed now */
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "max_num_batched_tokens");
        e = p;
        e.topk_indices = NULL;
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_NULL_POINTER, "topk_indices");
        e = p; /* the workspace over an input (seq_lens copied into its last bytes): refused before the first chunk */
        e.seq_lens = (const int32_t *)((char *)ws + bytes - sizeof seq);
        memcpy((char *)ws + bytes - sizeof seq, seq, sizeof seq);
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "workspace overlaps seq_lens");
        memset((char *)ws + bytes - sizeof seq, 0xff, sizeof seq);
        e = p; /* a workspace whose bytes would run past the end of the address space: no pointer into it is formed */
        e.workspace = (void *)(UINTPTR_MAX - 4095);
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "run past the end of the address space");
        e = p;
        e.attn.lse = (float *)p.query_start_loc;
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "attn.lse overlaps");
        e = p;
        e.attn.o = (void *)p.attn.q;
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "attn.o overlaps attn.q");
        e = p;
        e.compressed_block_size = 2000;
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "compressed_block_size");
        e = p;
        e.swa_fp8_dtype = AITER_MLA_F16;
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "swa_fp8_dtype");
        e = p;
        e.attn.q = NULL;
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_NULL_POINTER, "attn.q");
        e = p;
        e.workspace_dtype = AITER_MLA_FP8_E4M3FN;
        CHECK_STATUS(aiter_mla_v4_prefill_workspace_size(&e, &bytes), AITER_MLA_ERR_UNSUPPORTED, "workspace_dtype");
        e = p; /* a chunk's lists, max_num_batched_tokens x (topk + window) entries, take an int32 indptr */
        e.compress_ratio = 4, e.topk = 1 << 20, e.topk_stride = 0, e.window = 128, e.max_num_batched_tokens = 2048;
        {
            size_t big;
            CHECK_STATUS(aiter_mla_v4_prefill_workspace_size(&e, &big), AITER_MLA_ERR_INVALID_ARGUMENT,
                         "max_num_batched_tokens x (topk + window) = 2048 x 1048704");
            e.max_num_batched_tokens = 2047; /* fits int32, but its lists take 8 GiB: past a 32-bit size_t */
            if (sizeof(size_t) >= 8)
                CHECK_STATUS(aiter_mla_v4_prefill_workspace_size(&e, &big), AITER_MLA_OK, "");
            else
                CHECK_STATUS(aiter_mla_v4_prefill_workspace_size(&e, &big), AITER_MLA_ERR_INVALID_ARGUMENT, "passes size_t on this host");
        }
        {
            /* The GPU call reads only query_start_loc_host on the host: its device arrays here are
             * addresses no host read survives, and it passes validation (ERR_NO_GPU in this build). */
            const int32_t *device = (const int32_t *)(uintptr_t)64;
            int32_t bad_qsl[B + 1];
            e = p;
            e.query_start_loc = device;
            e.seq_lens = device;
            e.topk_indices = device;
            e.swa_block_table = device;
            e.compressed_block_table = device;
            CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_NULL_POINTER, "query_start_loc_host");
            e.query_start_loc_host = qsl;
            CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_NO_GPU, "");
            e.attn.o = (char *)p.workspace + 64; /* its outputs sized by host fields: refused as by the reference */
            CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "attn.o overlaps workspace");
            e.attn.o = p.attn.o;
            memcpy(bad_qsl, qsl, sizeof bad_qsl);
            { /* the host arrays, so that the reference may read what the wrapper refuses */
                aiter_mla_v4_prefill_args h = p;
                h.query_start_loc_host = qsl;
                SWEEP(v4_prefill, h, sweep_v4_prefill_fields);
                SWEEP(v4_prefill_workspace_size, h, sweep_v4_prefill_fields);
                {
                    aiter_mla_v4_prefill_args g;
                    const int cbs = 256 / ratio > 1 ? 256 / ratio : 1;
                    CACHE_BYTES_CASES(v4_prefill, g, h, swa_cache_bytes, h.swa_num_blocks * naive_v4_page_bytes(64), "swa_cache_bytes");
                    if (ratio > 1)
                        CACHE_BYTES_CASES(v4_prefill, g, h, compressed_cache_bytes, h.compressed_num_blocks * naive_v4_page_bytes(cbs),
                                          "compressed_cache_bytes");
                }
            }
            bad_qsl[2] = bad_qsl[1] - 1;
            e.query_start_loc_host = bad_qsl;
            CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "query_start_loc_host");
            e.query_start_loc_host = qsl;
            e.max_num_batched_tokens = T - 1;
            CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "max_num_batched_tokens");
            e.max_num_batched_tokens = p.max_num_batched_tokens;
            e.workspace_bytes = bytes - 1;
            CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_BUFFER_TOO_SMALL, "workspace_bytes");
            e.workspace_bytes = bytes;
            { /* split attention: partials of the largest chunk (requests 0..3: 14 tokens), checked before any launch */
                const size_t split_need = (size_t)(qsl[4] - qsl[0]) * 2 * H * 513 * 4;
                void *parts = test_malloc(split_need);
                e.attn.num_splits = 2;
                CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_NULL_POINTER, "attn.workspace");
                e.attn.workspace = parts;
                e.attn.workspace_bytes = split_need - 1;
                CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_BUFFER_TOO_SMALL, "attn.workspace_bytes");
                e.attn.workspace_bytes = split_need;
                CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_NO_GPU, "");
                /* the partials are an output like the others: not on the lists' workspace, a cache, o */
                e.attn.workspace = (char *)ws + 64;
                e.attn.workspace_bytes = split_need;
                CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "attn.workspace overlaps workspace");
                e.attn.workspace = (void *)p.swa_cache;
                CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "attn.workspace overlaps swa_cache");
                { /* both on one buffer that holds either, so that neither span runs on into the test's other buffers */
                    void *both = test_malloc((size_t)qsl[B] * H * 512 * 4 + split_need);
                    e.attn.workspace = both;
                    e.attn.o = both;
                    CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "attn.o overlaps attn.workspace");
                    e.attn.o = p.attn.o;
                    free(both);
                }
                e.attn.workspace = parts;
                CHECK(qsl[4] - qsl[0] > qsl[6] - qsl[4], "v4 prefill test: the first chunk must be the largest");
                /* a request a chunk: the largest is request 4 (6 tokens), not the first (5) */
                CHECK(qsl[5] - qsl[4] > qsl[1] - qsl[0], "v4 prefill test: request 4 must be the longest");
                e.chunk_size = 1;
                e.attn.workspace_bytes = (size_t)(qsl[5] - qsl[4]) * 2 * H * 513 * 4 - 1;
                CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_BUFFER_TOO_SMALL, "attn.workspace_bytes");
                e.attn.workspace_bytes++;
                CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_NO_GPU, "");
                e.chunk_size = p.chunk_size;
                free(parts);
                e.attn = p.attn;
            }
            { /* the gathers write the workspace before the attention reads q: q may not lie there */
                aiter_mla_v4_prefill_args h = p;
                h.attn.q = (const char *)ws + 128;
                CHECK_STATUS(aiter_mla_v4_prefill_ref(&h), AITER_MLA_ERR_INVALID_ARGUMENT, "workspace overlaps attn.q");
                e.attn.q = h.attn.q;
                CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "workspace overlaps attn.q");
                /* a workspace_bytes past 2^63 still spans what the call writes */
                h.workspace_bytes = e.workspace_bytes = SIZE_MAX;
                CHECK_STATUS(aiter_mla_v4_prefill_ref(&h), AITER_MLA_ERR_INVALID_ARGUMENT, "workspace overlaps attn.q");
                CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "workspace overlaps attn.q");
                e.workspace_bytes = p.workspace_bytes;
                e.attn.q = p.attn.q;
            }
        }
        {
            /* An absent SWA page (request 4's page 14, keys 896..959 of its window 873..1005):
             * the gather writes its keys as zero rows and the combine lists them, so they count
             * (score 0, value 0), exactly as a present page of zero rows; the header says so. */
            const int drop = 4 * swa_pages + 14, id = swa_bt[drop];
            unsigned char *saved = (unsigned char *)test_malloc((size_t)swa_pb);
            float *o_zero = alloc_f32((int64_t)T * H * 512), *lse_zero = alloc_f32((int64_t)T * H);
            int differs = 0;
            int64_t x;
            e = p;
            e.workspace_bytes = bytes;
            e.attn.o = o_zero;
            e.attn.lse = lse_zero;
            memcpy(saved, swa + (int64_t)id * swa_pb, (size_t)swa_pb);
            memset(swa + (int64_t)id * swa_pb, 0, (size_t)swa_pb); /* e4m3 0, scale byte 0, bf16 0: zeros */
            poison_f32(o_zero, (int64_t)T * H * 512);
            poison_f32(lse_zero, (int64_t)T * H);
            CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_OK, "");
            memcpy(swa + (int64_t)id * swa_pb, saved, (size_t)swa_pb);
            swa_bt[drop] = -1;
            poison_f32(o, (int64_t)T * H * 512);
            poison_f32(lse, (int64_t)T * H);
            CHECK_STATUS(aiter_mla_v4_prefill_ref(&p), AITER_MLA_OK, "");
            swa_bt[drop] = id;
            for (x = 0; x < (int64_t)T * H * 512; x++)
                if (memcmp(&o[x], &o_zero[x], sizeof(float)) != 0) break;
            CHECK(x == (int64_t)T * H * 512, "v4 prefill, absent SWA page: o[%lld] = %g, with a page of zero rows %g", (long long)x,
                  x < (int64_t)T * H * 512 ? o[x] : 0.0, x < (int64_t)T * H * 512 ? o_zero[x] : 0.0);
            CHECK(memcmp(lse, lse_zero, sizeof(float) * (size_t)T * H) == 0, "v4 prefill, absent SWA page: lse differs from a page of zero rows");
            for (x = (int64_t)qsl[4] * H * 512; x < (int64_t)qsl[5] * H * 512; x++) differs |= fabsf(o[x] - o_ref[x]) > 1e-3f;
            CHECK(differs, "v4 prefill, absent SWA page: request 4's o did not change (the page was not read)");
            free(saved);
            free(o_zero);
            free(lse_zero);
        }
    }
    free(ws);
    free(swa);
    free(comp);
    free(q);
    free(o);
    free(o_ref);
    free(lse);
    free(lse_ref);
    free(topk_idx);
    free(krows);
}

static void test_v4_prefill(void) {
    run_v4_prefill_case(4, 16, 0, AITER_MLA_DTYPE_DEFAULT, 0xf4);
    run_v4_prefill_case(128, 64, 4, AITER_MLA_BF16, 0xf128);
    run_v4_prefill_case(1, 16, 1, AITER_MLA_F32, 0xf1);
    run_v4_prefill_case(4, 1, 5, AITER_MLA_F16, 0xf41);
}

/* every V4 entry point refuses a NULL or zeroed argument struct, naming the field */
static void test_v4_rejects(void) {
    aiter_mla_v4_cache_write_args w;
    aiter_mla_v4_gather_args g;
    aiter_mla_v4_swa_index_args s;
    aiter_mla_v4_topk_args k;
    aiter_mla_v4_c128_args c;
    aiter_mla_v4_combine_args m;
    aiter_mla_v4_ragged_copy_args cp;
    aiter_mla_v4_attention_args a;
    aiter_mla_v4_prefill_args p;
    size_t bytes = 0;
    memset(&w, 0, sizeof w);
    memset(&g, 0, sizeof g);
    memset(&s, 0, sizeof s);
    memset(&k, 0, sizeof k);
    memset(&c, 0, sizeof c);
    memset(&m, 0, sizeof m);
    memset(&cp, 0, sizeof cp);
    memset(&a, 0, sizeof a);
    memset(&p, 0, sizeof p);
    CHECK_STATUS(aiter_mla_v4_cache_write_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_v4_gather_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_v4_global_topk_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_v4_c128_indices_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_v4_combine_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_v4_attention_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_v4_prefill_ref(NULL), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_v4_prefill_workspace_size(NULL, &bytes), AITER_MLA_ERR_NULL_POINTER, "args");
    CHECK_STATUS(aiter_mla_v4_prefill_workspace_size(&p, NULL), AITER_MLA_ERR_NULL_POINTER, "bytes");
    CHECK_STATUS(aiter_mla_v4_cache_write_ref(&w), AITER_MLA_ERR_INVALID_ARGUMENT, "num_blocks");
    CHECK_STATUS(aiter_mla_v4_gather_ref(&g), AITER_MLA_ERR_INVALID_ARGUMENT, "num_blocks");
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&s), AITER_MLA_ERR_INVALID_ARGUMENT, "num_reqs");
    CHECK_STATUS(aiter_mla_v4_global_topk_ref(&k), AITER_MLA_ERR_INVALID_ARGUMENT, "topk");
    CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&c), AITER_MLA_ERR_INVALID_ARGUMENT, "width");
    CHECK_STATUS(aiter_mla_v4_combine_ref(&m), AITER_MLA_ERR_INVALID_ARGUMENT, "num_reqs");
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&cp), AITER_MLA_ERR_INVALID_ARGUMENT, "max_entries_per_row");
    CHECK_STATUS(aiter_mla_v4_attention_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&p), AITER_MLA_ERR_INVALID_ARGUMENT, "max_model_len");
    CHECK_STATUS(aiter_mla_v4_prefill_workspace_size(&p, &bytes), AITER_MLA_ERR_INVALID_ARGUMENT, "max_model_len");
    /* the first field a runtime forgets once the sizes are in: a list's pointers are named
     * before its sizes (a list set without its cache names the cache, not num_blocks) */
    a.num_heads = 16;
    a.num_tokens = 1;
    CHECK_STATUS(aiter_mla_v4_attention_ref(&a), AITER_MLA_ERR_NULL_POINTER, "keys.cache");
    { /* with its pointers set, the list's size is the next field named */
        static const unsigned char page[1];
        static const int32_t entry[1];
        a.keys.cache = page;
        a.keys.indices = entry;
        CHECK_STATUS(aiter_mla_v4_attention_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "keys.num_blocks");
    }
    s.num_reqs = 1;
    s.block_table_stride = 1;
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&s), AITER_MLA_ERR_NULL_POINTER, "out");
    CHECK(aiter_mla_v4_workspace_rows(1024, 4, 0, INT64_MAX, NULL) == -1, "workspace rows beyond int32");
}
/* Host index arrays that a call's validation reads are held to their elements' alignment
 * before that first read (ERRORS): a misaligned int32_t * read is undefined behaviour, which
 * aborts this binary under UBSan. Each case copies valid contents one byte off, so the
 * alignment is the only fault, and once more with bad contents, which the alignment is named
 * ahead of. (The decode's and the reduce's cases are with their other checks.) */
static void test_host_arrays_aligned(void) {
    { /* decode metadata: seq_lens and q_lens size the outputs */
        int32_t bt[2 * 4] = {0, 1, 2, 3, 4, 5, 6, 7}, seq[2] = {5, 3}, ql[2] = {1, 2}, neg[2] = {5, -1};
        int32_t qo[3], kvp[3], kvi[8], last[2];
        char *buf = (char *)test_malloc(sizeof seq + 1);
        aiter_mla_decode_metadata_args m, e;
        memset(&m, 0, sizeof m);
        m.block_table = bt, m.block_table_stride = 4, m.seq_lens = seq, m.q_lens = ql, m.batch = 2, m.page_size = 2;
        m.qo_indptr = qo, m.kv_indptr = kvp, m.kv_indices = kvi, m.kv_indices_capacity = 8, m.kv_last_page_lens = last;
        CHECK_STATUS(aiter_mla_decode_metadata_build(&m), AITER_MLA_OK, "");
        e = m;
        e.seq_lens = (const int32_t *)misaligned_copy(buf, seq, sizeof seq);
        CHECK_STATUS(aiter_mla_decode_metadata_build(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "decode_metadata: seq_lens is not 4-byte aligned");
        e.seq_lens = (const int32_t *)misaligned_copy(buf, neg, sizeof neg);
        CHECK_STATUS(aiter_mla_decode_metadata_build(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "decode_metadata: seq_lens is not 4-byte aligned");
        e = m;
        e.q_lens = (const int32_t *)misaligned_copy(buf, ql, sizeof ql); /* optional, and read when given */
        CHECK_STATUS(aiter_mla_decode_metadata_build(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "decode_metadata: q_lens is not 4-byte aligned");
        free(buf);
    }
    { /* prefill: the reference and the planners read cu_seqlens, the plan's checker and the
         scheduled reference the plan; the planner writes it */
        enum { TQ = 4 };
        TEST_ALIGN16 uint16_t q[TQ * 192], k[TQ * 192], v[TQ * 128], o[TQ * 128];
        TEST_ALIGN16 float lse[TQ];
        const int32_t cq[2] = {0, TQ}, ck[2] = {0, TQ}, bad[2] = {-1, TQ};
        aiter_mla_prefill_plan_desc d, fit;
        aiter_mla_prefill_plan_info info;
        aiter_mla_prefill_args f, e;
        int32_t *plan;
        void *ws;
        char *buf;
        size_t plan_bytes;
        memset(q, 0, sizeof q), memset(k, 0, sizeof k), memset(v, 0, sizeof v);
        memset(&d, 0, sizeof d);
        d.max_batch = 1, d.max_q_tokens = TQ, d.num_heads = 1, d.num_cu = 2;
        if (!CHECK_STATUS(aiter_mla_prefill_plan_get_info(&d, &info), AITER_MLA_OK, "")) return;
        plan_bytes = (size_t)info.plan_ints * sizeof(int32_t);
        plan = alloc_i32(info.plan_ints);
        ws = test_malloc(info.workspace_bytes);
        buf = (char *)test_malloc(plan_bytes + 1);
        CHECK_STATUS(aiter_mla_prefill_plan_build(&info, cq, ck, 1, 1, plan), AITER_MLA_OK, "");
        memset(&f, 0, sizeof f);
        f.q = q, f.k = k, f.v = v, f.o = o, f.lse = lse, f.cu_seqlens_q = cq, f.cu_seqlens_k = ck, f.batch = 1, f.num_heads = 1;
        f.causal = 1, f.plan = plan, f.plan_info = &info, f.workspace = ws, f.workspace_bytes = info.workspace_bytes;
        CHECK_STATUS(aiter_mla_prefill_ref(&f), AITER_MLA_OK, "");
        CHECK_STATUS(aiter_mla_prefill_ref_scheduled(&f), AITER_MLA_OK, "");
        e = f;
        e.cu_seqlens_k = (const int32_t *)misaligned_copy(buf, ck, sizeof ck);
        CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "prefill_ref: cu_seqlens_k is not 4-byte aligned");
        e = f;
        e.cu_seqlens_q = (const int32_t *)misaligned_copy(buf, bad, sizeof bad);
        CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "prefill_ref: cu_seqlens_q is not 4-byte aligned");
        e = f;
        e.cu_seqlens_q = (const int32_t *)misaligned_copy(buf, cq, sizeof cq);
        CHECK_STATUS(aiter_mla_prefill_ref_scheduled(&e), AITER_MLA_ERR_INVALID_ARGUMENT,
                     "prefill_ref_scheduled: cu_seqlens_q is not 4-byte aligned");
        e = f;
        e.plan = (const int32_t *)misaligned_copy(buf, plan, plan_bytes);
        CHECK_STATUS(aiter_mla_prefill_ref_scheduled(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "prefill_ref_scheduled: plan is not 4-byte aligned");
        fit = d;
        CHECK_STATUS(aiter_mla_prefill_plan_fit_lists(&fit, 2, (const int32_t *)misaligned_copy(buf, cq, sizeof cq), ck, 1, 1),
                     AITER_MLA_ERR_INVALID_ARGUMENT, "prefill_plan_fit_lists: cu_seqlens_q is not 4-byte aligned");
        CHECK_STATUS(aiter_mla_prefill_plan_build(&info, cq, (const int32_t *)misaligned_copy(buf, ck, sizeof ck), 1, 1, plan),
                     AITER_MLA_ERR_INVALID_ARGUMENT, "prefill_plan_build: cu_seqlens_k is not 4-byte aligned");
        CHECK_STATUS(aiter_mla_prefill_plan_build(&info, cq, ck, 1, 1, (int32_t *)(void *)(buf + 1)), AITER_MLA_ERR_INVALID_ARGUMENT,
                     "prefill_plan_build: plan is not 4-byte aligned"); /* written, not read */
        CHECK_STATUS(aiter_mla_prefill_plan_check(&info, (const int32_t *)misaligned_copy(buf, bad, sizeof bad), ck, 1, 1, plan),
                     AITER_MLA_ERR_INVALID_ARGUMENT, "prefill_plan_check: cu_seqlens_q is not 4-byte aligned");
        CHECK_STATUS(aiter_mla_prefill_plan_check(&info, cq, ck, 1, 1, (const int32_t *)misaligned_copy(buf, plan, plan_bytes)),
                     AITER_MLA_ERR_INVALID_ARGUMENT, "prefill_plan_check: plan is not 4-byte aligned");
        CHECK_STATUS(aiter_mla_prefill_plan_check(&info, cq, ck, 1, 1, plan), AITER_MLA_OK, ""); /* left as built */
        free(plan);
        free(ws);
        free(buf);
    }
    { /* V4 prefill: the reference reads query_start_loc, seq_lens and attn.attn_sink; the GPU
         call, of its arrays, only query_start_loc_host */
        enum { T = 2 };
        const int32_t qsl[2] = {0, T}, seq[1] = {T}, bt[1] = {0}, back[2] = {T, 0};
        const float sink[1] = {0.0f};
        TEST_ALIGN16 uint16_t q[T * 512], o[T * 512];
        unsigned char *cache = (unsigned char *)test_calloc((size_t)aiter_mla_v4_page_bytes(64));
        char *buf = (char *)test_malloc(sizeof qsl + 1);
        aiter_mla_v4_prefill_args p, e;
        size_t bytes = 0;
        memset(q, 0, sizeof q);
        memset(&p, 0, sizeof p);
        p.attn.q = q, p.attn.o = o, p.attn.num_heads = 1, p.attn.attn_sink = sink;
        p.batch = 1, p.query_start_loc = qsl, p.query_start_loc_host = qsl, p.seq_lens = seq;
        p.max_model_len = 64, p.max_num_batched_tokens = T;
        p.swa_cache = cache, p.swa_num_blocks = 1, p.swa_block_table = bt, p.swa_block_table_stride = 1;
        CHECK_STATUS(aiter_mla_v4_prefill_workspace_size(&p, &bytes), AITER_MLA_OK, "");
        p.workspace = test_malloc(bytes);
        p.workspace_bytes = bytes;
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&p), AITER_MLA_OK, "");
        CHECK_STATUS(aiter_mla_v4_prefill(&p, NULL), AITER_MLA_ERR_NO_GPU, "");
        e = p;
        e.query_start_loc = (const int32_t *)misaligned_copy(buf, qsl, sizeof qsl);
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "v4_prefill_ref: query_start_loc is not 4-byte aligned");
        e.query_start_loc = (const int32_t *)misaligned_copy(buf, back, sizeof back);
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "v4_prefill_ref: query_start_loc is not 4-byte aligned");
        e = p;
        e.seq_lens = (const int32_t *)misaligned_copy(buf, seq, sizeof seq);
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "v4_prefill_ref: seq_lens is not 4-byte aligned");
        e = p;
        e.attn.attn_sink = (const float *)misaligned_copy(buf, sink, sizeof sink);
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "v4_prefill_ref: attn.attn_sink is not 4-byte aligned");
        e = p;
        e.query_start_loc_host = (const int32_t *)misaligned_copy(buf, qsl, sizeof qsl);
        CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "v4_prefill: query_start_loc_host is not 4-byte aligned");
        CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_OK, ""); /* which the reference ignores */
        e.query_start_loc_host = (const int32_t *)misaligned_copy(buf, back, sizeof back);
        CHECK_STATUS(aiter_mla_v4_prefill(&e, NULL), AITER_MLA_ERR_INVALID_ARGUMENT, "v4_prefill: query_start_loc_host is not 4-byte aligned");
        free(p.workspace);
        free(cache);
        free(buf);
    }
}
/* =====================================================================================
 * index contents under fuzzing: every CPU operation that follows an index array gets
 * garbage there (ERRORS: a status and a message, never an access outside the buffers the
 * arguments describe; page ids and slots out of range are data). The binary runs under
 * ASan/UBSan, so a stray access aborts it.
 * ===================================================================================== */
static char fuzz_armed_msg[ARMED_MSG_BYTES];
static int fuzz_calls = 0, fuzz_skipped = 0;

/* One entry of an int32 index array whose valid values are [0, hi): -1, another negative,
 * the int32 extremes, hi or just past it, or (half the time) a valid value. */
static int32_t fuzz_i32(test_rng *r, int64_t hi) {
    const int64_t top = hi < 1 ? 1 : hi > INT32_MAX ? INT32_MAX : hi;
    const int64_t past = top + rng_int(r, 1, 16);
    switch (rng_int(r, 0, 11)) {
    case 0: return -1;
    case 1: return -rng_int(r, 2, 1 << 20);
    case 2: return INT32_MIN + rng_int(r, 0, 1);
    case 3: return INT32_MAX - rng_int(r, 0, 1);
    case 4: return (int32_t)top;
    case 5: return (int32_t)(past > INT32_MAX ? INT32_MAX : past);
    default: return rng_int(r, 0, (int)top - 1);
    }
}
/* The same for int64 slots, with the int64 extremes and values just past int32. */
static int64_t fuzz_i64(test_rng *r, int64_t hi) {
    switch (rng_int(r, 0, 5)) {
    case 0: return INT64_MIN + rng_int(r, 0, 1);
    case 1: return INT64_MAX - rng_int(r, 0, 1);
    case 2: return (int64_t)INT32_MAX + rng_int(r, 0, 2);
    case 3: return -((int64_t)1 << rng_int(r, 31, 62));
    default: return fuzz_i32(r, hi);
    }
}
/* Garbage into an array of n entries: every entry, or (whole = 0) one to three of them. */
static void fuzz_fill(test_rng *r, int32_t *p, int64_t n, int64_t hi, int whole) {
    int64_t i, k = whole ? n : rng_int(r, 1, 3);
    for (i = 0; i < k; i++) {
        const int64_t at = whole ? i : rng_int(r, 0, (int)n - 1); /* drawn before the value */
        p[at] = fuzz_i32(r, hi);
    }
}
static void fuzz_fill64(test_rng *r, int64_t *p, int64_t n, int64_t hi) {
    int64_t i;
    for (i = 0; i < n; i++) p[i] = fuzz_i64(r, hi);
}
/* p[0 .. n] starts at >= 0 and never decreases: the indptr rule that ERRORS promises to check. */
static int fuzz_indptr_ok(const int32_t *p, int64_t n) {
    int64_t i;
    if (p[0] < 0) return 0;
    for (i = 0; i < n; i++)
        if (p[i + 1] < p[i]) return 0;
    return 1;
}
/* Before a fuzzed call: arm_last_error, and count the call. */
static void fuzz_arm(void) {
    arm_last_error(fuzz_armed_msg);
    fuzz_calls++;
}
/* The answer of a fuzzed call (fuzz_arm just before it): OK, or a failure status with a
 * message of its own. 1 for OK. */
static int fuzz_answer(aiter_mla_status st, const char *what, int it) {
    CHECK(st == AITER_MLA_OK || failed_with_message(st, fuzz_armed_msg), "%s, iteration %d: status %d, last_error \"%s\"", what,
          it, (int)st, aiter_mla_last_error());
    return st == AITER_MLA_OK;
}
/* Attention rows (token t in [t0, t1), head h) of dv fp32 values at o[(t * H + h) * dv] and
 * their lse at lse[t * lse_t + h * lse_h]: the number that break SPEC's conventions (o
 * finite; lse finite or the op's empty value; an empty row all zeros). */
static int64_t fuzz_attn_bad(const float *o, const float *lse, int64_t t0, int64_t t1, int H, int dv, int64_t lse_t,
                             int64_t lse_h, float empty) {
    int64_t t, bad = 0;
    int h, d;
    for (t = t0; t < t1; t++)
        for (h = 0; h < H; h++) {
            const float *row = o + (t * H + h) * dv;
            int zero = 1;
            for (d = 0; d < dv; d++) {
                bad += !isfinite(row[d]);
                zero &= row[d] == 0.0f;
            }
            if (lse) {
                const float l = lse[t * lse_t + h * lse_h];
                bad += !(isfinite(l) || l == empty) || (l == empty && !zero);
            }
        }
    return bad;
}
static int fuzz_all_poison_f32(const float *p, int64_t n) {
    int64_t i;
    for (i = 0; i < n; i++)
        if (!is_poison(p, i, AITER_MLA_F32)) return 0;
    return 1;
}
/* Slot of position p through a block-table row of `width` blocks of bs, from the definition
 * in 64 bits: -1 for a negative position or id, a block past the row, or a slot past int32. */
static int32_t fuzz_table_slot(const int32_t *row, int64_t width, int64_t bs, int64_t p) {
    int64_t blk, v;
    if (p < 0) return -1;
    blk = p / bs;
    if (blk >= width || row[blk] < 0) return -1;
    v = (int64_t)row[blk] * bs + p % bs;
    return v > INT32_MAX ? -1 : (int32_t)v;
}

/* Dense decode: a block table through the metadata build, the planner, the reference and the
 * plan's replay; then lengths, indptrs and plan entries as garbage. q and o hold QMAX tokens a
 * request and kv_indices KVCAP entries: garbage that passes the checks but asks for more is
 * skipped (those sizes are trusted). */
static void fuzz_decode(test_rng *r) {
    enum { B = 3, H = 2, PS = 2, STRIDE = 24, NPAGES = 30, QMAX = 8, TA = B * QMAX, KVCAP = 64, ITERS = 60 };
    const int32_t seq0[B] = {40, 0, 23};
    int32_t bt[B * STRIDE], seq[B], ql[B], qo[B + 1], kvp[B + 1], last[B], *kvi = alloc_i32(KVCAP), *plan, *plan2;
    void *q = alloc_elems((int64_t)TA * H * 576, AITER_MLA_BF16), *cache = alloc_elems((int64_t)NPAGES * PS * 576, AITER_MLA_BF16);
    float *o = alloc_f32((int64_t)TA * H * 512), *o2 = alloc_f32((int64_t)TA * H * 512), *lse = alloc_f32(TA * H),
          *lse2 = alloc_f32(TA * H), *ws;
    aiter_mla_decode_plan_desc d, dd;
    aiter_mla_decode_plan_info info, info2;
    aiter_mla_decode_metadata_args m, mm;
    aiter_mla_decode_args a, e;
    int it, b, i, ok_runs = 0, err_runs = 0, sched_runs = 0;
    fill_random(q, (int64_t)TA * H * 576, AITER_MLA_BF16, r, -1.0f, 1.0f, 0.0f);
    fill_random(cache, (int64_t)NPAGES * PS * 576, AITER_MLA_BF16, r, -1.0f, 1.0f, 0.0f);
    memset(&d, 0, sizeof d);
    d.max_batch = B;
    d.num_heads = H;
    d.max_q_len = QMAX;
    d.num_cu = 4; /* request 0 is cut in two: the reduce runs */
    d.page_size = PS;
    d.kv_granularity = 16;
    CHECK_STATUS(aiter_mla_decode_plan_get_info(&d, &info), AITER_MLA_OK, "");
    plan = alloc_i32(info.plan_ints);
    plan2 = alloc_i32(info.plan_ints);
    ws = (float *)test_malloc(info.workspace_bytes);
    memset(&m, 0, sizeof m);
    m.block_table = bt;
    m.block_table_stride = STRIDE;
    m.seq_lens = seq;
    m.q_lens = ql;
    m.batch = B;
    m.page_size = PS;
    m.qo_indptr = qo;
    m.kv_indptr = kvp;
    m.kv_indices = kvi;
    m.kv_indices_capacity = KVCAP;
    m.kv_last_page_lens = last;
    memset(&a, 0, sizeof a);
    a.q = q;
    a.kv_cache = cache;
    a.num_pages = NPAGES;
    a.qo_indptr = qo;
    a.kv_indptr = kvp;
    a.kv_indices = kvi;
    a.kv_last_page_lens = last;
    a.lse = lse;
    a.plan_info = &info;
    a.workspace = ws;
    a.workspace_bytes = info.workspace_bytes;
    a.batch = B;
    a.num_heads = H;
    a.page_size = PS;
    a.o_dtype = AITER_MLA_F32;
    for (it = 0; it < ITERS; it++) {
        /* 0: block table; 1: seq_lens, q_lens; 2: kv_indices; 3: indptrs, last pages against a
         * plan built before; 4: plan entries */
        const int mode = it % 5;
        int plan_ok, ref_ok, bad = 0;
        aiter_mla_status st;
        memcpy(seq, seq0, sizeof seq);
        for (b = 0; b < B; b++) ql[b] = 2;
        for (i = 0; i < B * STRIDE; i++) bt[i] = (i * 7) % NPAGES;
        fuzz_fill(r, kvi, KVCAP, NPAGES, 1); /* entries past the build's are garbage too */
        if (mode == 0) fuzz_fill(r, bt, B * STRIDE, NPAGES, 1);
        if (mode == 1) {
            fuzz_fill(r, seq, B, 2 * STRIDE + 1, rng_int(r, 0, 1));
            fuzz_fill(r, ql, B, QMAX + 1, rng_int(r, 0, 1));
        }
        fuzz_arm();
        st = aiter_mla_decode_metadata_build(&m);
        if (mode != 1) CHECK(st == AITER_MLA_OK, "decode_metadata_build, iteration %d: page ids are data, got %s", it, aiter_mla_last_error());
        if (!fuzz_answer(st, "decode_metadata_build", it)) {
            err_runs++;
            continue;
        }
        /* the metadata, from its definition */
        bad += qo[0] != 0 || kvp[0] != 0;
        for (b = 0; b < B; b++) {
            const int32_t p = (seq[b] + PS - 1) / PS;
            bad += qo[b + 1] != qo[b] + ql[b] || kvp[b + 1] != kvp[b] + p || last[b] != (p ? seq[b] - (p - 1) * PS : 0);
            for (i = 0; i < p && kvp[b + 1] == kvp[b] + p; i++) bad += kvi[kvp[b] + i] != bt[b * STRIDE + i];
        }
        CHECK(bad == 0, "decode_metadata_build, iteration %d: %d entries differ from the block table", it, bad);
        if (mode == 2) fuzz_fill(r, kvi, kvp[B], NPAGES, 1);
        if (mode == 3) CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, B, plan), AITER_MLA_OK, "");
        if (mode == 3) {
            const int which = rng_int(r, 0, 2);
            if (which == 0) fuzz_fill(r, qo, B + 1, TA + 1, 0);
            if (which == 1) fuzz_fill(r, kvp, B + 1, KVCAP + 1, 0);
            if (which == 2) fuzz_fill(r, last, B, PS + 1, 0);
        }
        /* the planner reads the same arrays; a plan it builds passes its own check */
        fuzz_arm();
        st = aiter_mla_decode_plan_build(&info, qo, kvp, last, B, mode == 3 ? plan2 : plan);
        plan_ok = fuzz_answer(st, "decode_plan_build", it);
        if (plan_ok)
            CHECK_STATUS(aiter_mla_decode_plan_check(&info, qo, kvp, last, B, mode == 3 ? plan2 : plan), AITER_MLA_OK, "");
        if (mode == 3) plan_ok = 1; /* replay the plan of the arrays before the garbage */
        if (mode == 4 && plan_ok) fuzz_fill(r, plan, info.plan_ints, 64, 0);
        if ((fuzz_indptr_ok(qo, B) && qo[B] > TA) || (fuzz_indptr_ok(kvp, B) && kvp[B] > KVCAP)) {
            fuzz_skipped++;
            continue;
        }
        poison_f32(o, (int64_t)TA * H * 512);
        poison_f32(lse, TA * H);
        a.o = o;
        a.lse = lse;
        fuzz_arm();
        st = aiter_mla_decode_ref(&a);
        if (mode != 3) CHECK(st == AITER_MLA_OK, "decode_ref, iteration %d: page ids are data, got %s", it, aiter_mla_last_error());
        if (!fuzz_indptr_ok(qo, B) || !fuzz_indptr_ok(kvp, B))
            CHECK(st != AITER_MLA_OK, "decode_ref, iteration %d: an indptr that decreases or starts below 0 was taken", it);
        ref_ok = fuzz_answer(st, "decode_ref", it);
        if (ref_ok) {
            ok_runs++;
            CHECK(fuzz_attn_bad(o, lse, qo[0], qo[B], H, 512, H, 1, INFINITY) == 0,
                  "decode_ref, iteration %d: o not finite, or lse neither finite nor +inf with o = 0", it);
        } else {
            err_runs++;
            CHECK(fuzz_all_poison_f32(o, (int64_t)TA * H * 512), "decode_ref, iteration %d: o written before the refusal", it);
        }
        if (!plan_ok) continue;
        poison_f32(o2, (int64_t)TA * H * 512);
        poison_f32(lse2, TA * H);
        a.o = o2;
        a.lse = lse2;
        a.plan = plan;
        fuzz_arm();
        st = aiter_mla_decode_ref_scheduled(&a);
        if (mode < 3) CHECK(st == AITER_MLA_OK, "decode_ref_scheduled, iteration %d: got %s", it, aiter_mla_last_error());
        if (fuzz_answer(st, "decode_ref_scheduled", it)) {
            int64_t n = 0, t;
            float diff = 0.0f;
            sched_runs++;
            CHECK(ref_ok, "decode_ref_scheduled, iteration %d: took arrays that decode_ref refused", it);
            if (!ref_ok) continue;
            for (t = (int64_t)qo[0] * H; t < (int64_t)qo[B] * H; t++) {
                n += !(lse[t] == lse2[t] || fabsf(lse[t] - lse2[t]) <= 1e-4f);
                for (i = 0; i < 512; i++) diff = fmaxf(diff, fabsf(o[t * 512 + i] - o2[t * 512 + i]));
            }
            CHECK(n == 0 && diff <= 1e-4f, "decode_ref_scheduled, iteration %d: %lld lse and o (max diff %g) differ from decode_ref", it,
                  (long long)n, (double)diff);
        } else {
            CHECK(fuzz_all_poison_f32(o2, (int64_t)TA * H * 512), "decode_ref_scheduled, iteration %d: o written before the refusal", it);
        }
    }
    CHECK(ok_runs > 0 && err_runs > 0 && sched_runs > 0, "decode fuzz: %d runs, %d refusals, %d replays", ok_runs, err_runs, sched_runs);

    /* counts out of range: refused, naming the field, before any write */
    memcpy(seq, seq0, sizeof seq);
    for (b = 0; b < B; b++) ql[b] = 2;
    for (i = 0; i < B * STRIDE; i++) bt[i] = i % NPAGES;
    CHECK_STATUS(aiter_mla_decode_metadata_build(&m), AITER_MLA_OK, "");
    CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, B, plan), AITER_MLA_OK, "");
    CHECK(aiter_mla_decode_plan_view_of(&info, plan).num_partials > 0, "decode fuzz: the valid plan must split a tile");
    a.plan = plan;
    a.o = o;
    a.lse = lse;
    poison_f32(o, (int64_t)TA * H * 512);
    e = a, e.batch = 0;
    CHECK_STATUS(aiter_mla_decode_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "batch");
    e = a, e.batch = -1;
    CHECK_STATUS(aiter_mla_decode_ref_scheduled(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "batch");
    e = a, e.num_heads = 0;
    CHECK_STATUS(aiter_mla_decode_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    e = a, e.num_heads = 129;
    CHECK_STATUS(aiter_mla_decode_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    e = a, e.page_size = 3;
    CHECK_STATUS(aiter_mla_decode_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "page_size");
    e = a, e.page_size = 512;
    CHECK_STATUS(aiter_mla_decode_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "page_size");
    e = a, e.page_size = -2;
    CHECK_STATUS(aiter_mla_decode_ref_scheduled(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "page_size");
    e = a, e.num_pages = 0;
    CHECK_STATUS(aiter_mla_decode_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_pages");
    e = a, e.num_heads = 1; /* in range, but not the plan's */
    CHECK_STATUS(aiter_mla_decode_ref_scheduled(&e), AITER_MLA_ERR_PLAN_MISMATCH, "num_heads");
    e = a, e.page_size = 4;
    CHECK_STATUS(aiter_mla_decode_ref_scheduled(&e), AITER_MLA_ERR_PLAN_MISMATCH, "page_size");
    e = a, e.workspace_bytes = info.workspace_bytes - 1;
    CHECK_STATUS(aiter_mla_decode_ref_scheduled(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "workspace_bytes");
    CHECK(fuzz_all_poison_f32(o, (int64_t)TA * H * 512), "decode: o written by a refused call");
    mm = m, mm.batch = 0;
    CHECK_STATUS(aiter_mla_decode_metadata_build(&mm), AITER_MLA_ERR_INVALID_ARGUMENT, "batch");
    mm = m, mm.page_size = 3;
    CHECK_STATUS(aiter_mla_decode_metadata_build(&mm), AITER_MLA_ERR_INVALID_ARGUMENT, "page_size");
    mm = m, mm.page_size = 1024;
    CHECK_STATUS(aiter_mla_decode_metadata_build(&mm), AITER_MLA_ERR_INVALID_ARGUMENT, "page_size");
    mm = m, mm.q_lens = NULL, mm.q_len = 9;
    CHECK_STATUS(aiter_mla_decode_metadata_build(&mm), AITER_MLA_ERR_INVALID_ARGUMENT, "q_len");
    mm = m, mm.q_lens = NULL, mm.q_len = -1;
    CHECK_STATUS(aiter_mla_decode_metadata_build(&mm), AITER_MLA_ERR_INVALID_ARGUMENT, "q_len");
    mm = m, mm.block_table_stride = 1;
    CHECK_STATUS(aiter_mla_decode_metadata_build(&mm), AITER_MLA_ERR_INVALID_ARGUMENT, "block_table_stride");
    mm = m, mm.kv_indices_capacity = 1;
    CHECK_STATUS(aiter_mla_decode_metadata_build(&mm), AITER_MLA_ERR_BUFFER_TOO_SMALL, "kv_indices_capacity");
    dd = d, dd.max_batch = 0;
    CHECK_STATUS(aiter_mla_decode_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "max_batch");
    dd = d, dd.num_heads = 129;
    CHECK_STATUS(aiter_mla_decode_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    dd = d, dd.max_q_len = 9;
    CHECK_STATUS(aiter_mla_decode_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "max_q_len");
    dd = d, dd.num_cu = 0;
    CHECK_STATUS(aiter_mla_decode_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "num_cu");
    dd = d, dd.page_size = 6;
    CHECK_STATUS(aiter_mla_decode_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "page_size");
    dd = d, dd.kv_granularity = 8;
    CHECK_STATUS(aiter_mla_decode_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_granularity");
    dd = d, dd.overhead_blocks = 65;
    CHECK_STATUS(aiter_mla_decode_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "overhead_blocks");
    CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, 0, plan), AITER_MLA_ERR_INVALID_ARGUMENT, "batch");
    free(kvi);
    free(plan);
    free(plan2);
    free(q);
    free(cache);
    free(o);
    free(o2);
    free(lse);
    free(lse2);
    free(ws);
}

/* Page-index expansion: block ids are data (-1 where absent or past int32); cu_num_tokens
 * and seq_lens are checked against the capacity, so any garbage there gets a status. */
static void fuzz_expand(test_rng *r) {
    enum { B = 3, STRIDE = 4, CAP = 24, ITERS = 45 };
    static const int ks[4] = {1, 4, 16, 256};
    const int32_t seq0[B] = {5, 0, 9}, cu0[B + 1] = {0, 5, 5, 14};
    int32_t bt[B * STRIDE], seq[B], cu[B + 1], out[CAP];
    aiter_mla_expand_page_indices_args x, e;
    int it, b, t, i, ok_runs = 0, err_runs = 0;
    memset(&x, 0, sizeof x);
    x.block_table = bt;
    x.block_table_stride = STRIDE;
    x.cu_num_tokens = cu;
    x.seq_lens = seq;
    x.page_indices = out;
    x.page_indices_capacity = CAP;
    x.batch = B;
    for (it = 0; it < ITERS; it++) {
        const int mode = it % 3; /* 0: block ids; 1: seq_lens; 2: cu_num_tokens */
        aiter_mla_status st;
        int bad = 0;
        memcpy(seq, seq0, sizeof seq);
        memcpy(cu, cu0, sizeof cu);
        fuzz_fill(r, bt, B * STRIDE, 64, 1);
        if (mode == 1) fuzz_fill(r, seq, B, 10, rng_int(r, 0, 1));
        if (mode == 2) fuzz_fill(r, cu, B + 1, CAP + 1, rng_int(r, 0, 1));
        x.kernel_block_size = ks[rng_int(r, 0, 3)];
        fill_i32(out, CAP, V4_SENTINEL);
        fuzz_arm();
        st = aiter_mla_expand_page_indices_ref(&x);
        if (mode == 0) CHECK(st == AITER_MLA_OK, "expand_page_indices_ref, iteration %d: block ids are data, got %s", it, aiter_mla_last_error());
        if (fuzz_answer(st, "expand_page_indices_ref", it)) {
            ok_runs++;
            for (b = 0; b < B; b++)
                for (t = 0; t < seq[b]; t++)
                    bad += out[cu[b] + t] != fuzz_table_slot(bt + b * STRIDE, STRIDE, x.kernel_block_size, t);
            CHECK(bad == 0, "expand_page_indices_ref, iteration %d: %d slots differ from SPEC 1d", it, bad);
        } else {
            err_runs++;
            for (i = 0; i < CAP; i++) bad += out[i] != V4_SENTINEL;
            CHECK(bad == 0, "expand_page_indices_ref, iteration %d: written before the refusal", it);
        }
    }
    CHECK(ok_runs > 0 && err_runs > 0, "expand fuzz: %d runs, %d refusals", ok_runs, err_runs);
    memcpy(seq, seq0, sizeof seq);
    memcpy(cu, cu0, sizeof cu);
    x.kernel_block_size = 4;
    e = x, e.batch = -1;
    CHECK_STATUS(aiter_mla_expand_page_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "batch");
    e = x, e.kernel_block_size = 3;
    CHECK_STATUS(aiter_mla_expand_page_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "kernel_block_size");
    e = x, e.kernel_block_size = 512;
    CHECK_STATUS(aiter_mla_expand_page_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "kernel_block_size");
    e = x, e.kernel_block_size = -4;
    CHECK_STATUS(aiter_mla_expand_page_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "kernel_block_size");
    e = x, e.block_table_stride = 0;
    CHECK_STATUS(aiter_mla_expand_page_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "block_table_stride");
    e = x, e.page_indices_capacity = -1;
    CHECK_STATUS(aiter_mla_expand_page_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "page_indices_capacity");
    e = x, e.page_indices_capacity = 13; /* cu_num_tokens ends at 14 */
    CHECK_STATUS(aiter_mla_expand_page_indices_ref(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "page_indices_capacity");
}

/* Reduce with its maps as garbage: the map is exactly reduce_indptr[num_tiles] entries and o
 * T rows, so garbage the checks pass that asks for more is skipped (o's size is trusted). */
static void fuzz_reduce(test_rng *r) {
    enum { NT = 3, PR = 10, H = 2, DV = 16, T = 6, NMAP = 5, ITERS = 45 };
    const int32_t ri0[NT + 1] = {0, 2, 2, 5}, fm0[2 * NT] = {0, 2, 2, 3, 3, 5}, pm0[NMAP] = {0, 2, 4, 6, 8};
    int32_t *ri = alloc_i32(NT + 1), *fm = alloc_i32(2 * NT), *pm = alloc_i32(NMAP);
    float *po = alloc_f32(PR * H * DV), *pl = alloc_f32(PR * H), *o = alloc_f32(T * H * DV), *lse = alloc_f32(T * H);
    aiter_mla_reduce_args a, e;
    int it, t, k, i, ok_runs = 0, err_runs = 0;
    fill_random(po, PR * H * DV, AITER_MLA_F32, r, -1.0f, 1.0f, 0.0f);
    for (i = 0; i < PR * H; i++) pl[i] = i % 5 == 1 ? -INFINITY : rng_f32(r, -4.0f, 4.0f);
    pl[4 * H] = pl[6 * H] = pl[8 * H] = -INFINITY; /* row 3, head 0: every piece empty */
    memset(&a, 0, sizeof a);
    a.partial_o = po;
    a.partial_lse = pl;
    a.reduce_indptr = ri;
    a.reduce_final_map = fm;
    a.reduce_partial_map = pm;
    a.num_tiles = NT;
    a.num_partial_rows = PR;
    a.num_heads = H;
    a.dv = DV;
    a.o = o;
    a.lse = lse;
    a.o_dtype = AITER_MLA_F32;
    for (it = 0; it < ITERS; it++) {
        const int mode = it % 3, whole = it % 2;
        int valid, fits = 1;
        aiter_mla_status st;
        memcpy(ri, ri0, sizeof ri0);
        memcpy(fm, fm0, sizeof fm0);
        memcpy(pm, pm0, sizeof pm0);
        if (mode == 0) fuzz_fill(r, ri, NT + 1, NMAP + 1, whole);
        if (mode == 1) fuzz_fill(r, fm, 2 * NT, T + 1, whole);
        if (mode == 2) fuzz_fill(r, pm, NMAP, PR + 1, whole);
        a.empty_lse_neg_inf = it % 4 == 3;
        /* the rules of the maps (SPEC 1b, the struct's comments): an indptr; each tile of two
         * or more pieces a row range whose pieces lie inside num_partial_rows */
        valid = fuzz_indptr_ok(ri, NT);
        if (valid && ri[NT] > NMAP) fits = 0;
        for (t = 0; valid && fits && t < NT; t++) {
            const int32_t qs = fm[2 * t], qe = fm[2 * t + 1];
            if (ri[t + 1] - ri[t] < 2) continue;
            if (qs < 0 || qe < qs) valid = 0;
            for (k = ri[t]; valid && k < ri[t + 1]; k++) valid = pm[k] >= 0 && (int64_t)pm[k] + (qe - qs) <= PR;
        }
        for (t = 0; valid && fits && t < NT; t++)
            if (ri[t + 1] - ri[t] >= 2 && fm[2 * t + 1] > T) fits = 0;
        if (!fits) {
            fuzz_skipped++;
            continue;
        }
        poison_f32(o, T * H * DV);
        poison_f32(lse, T * H);
        fuzz_arm();
        st = aiter_mla_reduce_ref(&a);
        CHECK((st == AITER_MLA_OK) == valid, "reduce_ref, iteration %d: status %s for maps the rules call %s (%s)", it,
              testing_status_name(st), valid ? "valid" : "invalid", aiter_mla_last_error());
        if (fuzz_answer(st, "reduce_ref", it)) {
            int64_t bad = 0;
            ok_runs++;
            for (t = 0; t < NT; t++)
                if (ri[t + 1] - ri[t] >= 2)
                    bad += fuzz_attn_bad(o, lse, fm[2 * t], fm[2 * t + 1], H, DV, H, 1, a.empty_lse_neg_inf ? -INFINITY : INFINITY);
            CHECK(bad == 0, "reduce_ref, iteration %d: %lld rows break SPEC 1b's conventions", it, (long long)bad);
        } else {
            err_runs++;
            CHECK(fuzz_all_poison_f32(o, T * H * DV) && fuzz_all_poison_f32(lse, T * H), "reduce_ref, iteration %d: written before the refusal", it);
        }
    }
    CHECK(ok_runs > 0 && err_runs > 0, "reduce fuzz: %d runs, %d refusals", ok_runs, err_runs);
    memcpy(ri, ri0, sizeof ri0);
    memcpy(fm, fm0, sizeof fm0);
    memcpy(pm, pm0, sizeof pm0);
    poison_f32(o, T * H * DV);
    e = a, e.num_tiles = -1;
    CHECK_STATUS(aiter_mla_reduce_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tiles");
    e = a, e.num_heads = 0;
    CHECK_STATUS(aiter_mla_reduce_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    e = a, e.num_heads = 65536;
    CHECK_STATUS(aiter_mla_reduce_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    e = a, e.dv = -1;
    CHECK_STATUS(aiter_mla_reduce_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "dv");
    e = a, e.num_partial_rows = -1;
    CHECK_STATUS(aiter_mla_reduce_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_partial_rows");
    e = a, e.num_partial_rows = 9; /* tile 2's last piece ends at row 10 */
    CHECK_STATUS(aiter_mla_reduce_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_partial_rows");
    e = a, e.empty_lse_neg_inf = 2;
    CHECK_STATUS(aiter_mla_reduce_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "empty_lse_neg_inf");
    e = a, e.o_dtype = AITER_MLA_FP8_E4M3FN;
    CHECK_STATUS(aiter_mla_reduce_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "o_dtype");
    CHECK(fuzz_all_poison_f32(o, T * H * DV), "reduce: o written by a refused call");
    free(ri);
    free(fm);
    free(pm);
    free(po);
    free(pl);
    free(o);
    free(lse);
}

/* Merge: no index array, but its lse inputs are codes (+inf and -inf mark an empty side):
 * garbage among them still gives finite o, and lse = -inf exactly where both sides are empty
 * (SPEC 2a). */
static void fuzz_merge(test_rng *r) {
    enum { T = 4, H = 2, D = 8, ITERS = 30 };
    static const float codes[6] = {INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 0.0f, 88.0f};
    float op[T * H * D], os[T * H * D], o[T * H * D], lp[H * T], ls[H * T], lse[H * T];
    aiter_mla_merge_args a, e;
    int it, i, d;
    fill_random(op, T * H * D, AITER_MLA_F32, r, -1.0f, 1.0f, 0.0f);
    fill_random(os, T * H * D, AITER_MLA_F32, r, -1.0f, 1.0f, 0.0f);
    memset(&a, 0, sizeof a);
    a.o_prefix = op;
    a.lse_prefix = lp;
    a.o_suffix = os;
    a.lse_suffix = ls;
    a.o = o;
    a.lse = lse;
    a.num_tokens = T;
    a.num_heads = H;
    a.head_dim = D;
    a.dtype = AITER_MLA_F32;
    for (it = 0; it < ITERS; it++) {
        int64_t bad = 0;
        for (i = 0; i < H * T; i++) {
            lp[i] = rng_int(r, 0, 2) ? codes[rng_int(r, 0, 5)] : rng_f32(r, -30.0f, 30.0f);
            ls[i] = rng_int(r, 0, 2) ? codes[rng_int(r, 0, 5)] : rng_f32(r, -30.0f, 30.0f);
        }
        poison_f32(o, T * H * D);
        poison_f32(lse, H * T);
        fuzz_arm();
        if (!fuzz_answer(aiter_mla_merge_attn_states_ref(&a), "merge_attn_states_ref", it)) continue;
        for (i = 0; i < H * T; i++) { /* i = h * T + t */
            const int h = i / T, t = i % T, empty = isinf(lp[i]) && isinf(ls[i]);
            for (d = 0; d < D; d++) bad += !isfinite(o[(t * H + h) * D + d]) || (empty && o[(t * H + h) * D + d] != 0.0f);
            bad += empty ? lse[i] != -INFINITY : !(isfinite(lse[i]));
        }
        CHECK(bad == 0, "merge_attn_states_ref, iteration %d: %lld values break SPEC 2a", it, (long long)bad);
    }
    e = a, e.num_tokens = -1;
    CHECK_STATUS(aiter_mla_merge_attn_states_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
    e = a, e.num_heads = 0;
    CHECK_STATUS(aiter_mla_merge_attn_states_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    e = a, e.head_dim = 0;
    CHECK_STATUS(aiter_mla_merge_attn_states_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "head_dim");
    e = a, e.dtype = AITER_MLA_FP8_E4M3FN;
    CHECK_STATUS(aiter_mla_merge_attn_states_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "dtype");
}

/* The three cache writers (SPEC 3, 6, 7): slots are data; a row outside the written slots
 * keeps its bytes, and a written slot holds (in its bf16 rope part) the row of a token mapped
 * to it. kind 0: kv_cache_write (bf16 or fp8 cache), 1: ds_mla_write, 2: v4_cache_write. */
static void fuzz_cache_writes(test_rng *r) {
    enum { NB = 4, BS = 4, SLOTS = NB * BS, NT = 7, ITERS = 20 };
    const int64_t v4_page = naive_v4_page_bytes(BS), bytes_max = NB * v4_page > SLOTS * 1152 ? NB * v4_page : SLOTS * 1152;
    uint16_t *kv = (uint16_t *)alloc_elems(NT * 576, AITER_MLA_BF16);
    unsigned char *cache = (unsigned char *)test_malloc((size_t)bytes_max), *before = (unsigned char *)test_malloc((size_t)bytes_max),
                  *mask = (unsigned char *)test_malloc((size_t)bytes_max);
    int64_t slots[NT];
    aiter_mla_kv_cache_write_args kw, ke;
    aiter_mla_ds_mla_write_args dw, de;
    aiter_mla_v4_cache_write_args vw, ve;
    int it, kind, t, i;
    fill_random(kv, NT * 576, AITER_MLA_BF16, r, -2.0f, 2.0f, 0.0f);
    memset(&kw, 0, sizeof kw); /* kv_c = columns 0..511 of kv, k_pe = 512..575, rows of 576 */
    kw.kv_c = kv;
    kw.kv_c_stride = 576;
    kw.k_pe = kv + 512;
    kw.k_pe_stride = 576;
    kw.slot_mapping = slots;
    kw.kv_cache = cache;
    kw.num_blocks = NB;
    kw.block_size = BS;
    kw.num_tokens = NT;
    memset(&dw, 0, sizeof dw);
    dw.kv_c = kv;
    dw.kv_c_stride = 576;
    dw.k_pe = kv + 512;
    dw.k_pe_stride = 576;
    dw.slot_mapping = slots;
    dw.kv_cache = cache;
    dw.num_blocks = NB;
    dw.block_size = BS;
    dw.num_tokens = NT;
    memset(&vw, 0, sizeof vw); /* 448 nope + 64 rope: columns 0..511 of kv */
    vw.kv = kv;
    vw.kv_stride = 576;
    vw.slot_mapping = slots;
    vw.kv_cache = cache;
    vw.num_blocks = NB;
    vw.block_size = BS;
    vw.num_tokens = NT;
    for (it = 0; it < 3 * ITERS; it++) {
        const char *what = NULL;
        /* where a slot's bytes live, and where its 64 bf16 rope values start (row-relative) */
        int64_t row_bytes = 0, rope_at = 0, bad = 0;
        aiter_mla_status st = AITER_MLA_OK;
        kind = it % 3;
        fuzz_fill64(r, slots, NT, SLOTS);
        for (i = 0; i < bytes_max; i++) cache[i] = (unsigned char)rng_u32(r);
        memcpy(before, cache, (size_t)bytes_max);
        memset(mask, 0, (size_t)bytes_max);
        fuzz_arm();
        if (kind == 0) {
            kw.cache_dtype = it % 2 ? AITER_MLA_FP8_E4M3FN : AITER_MLA_BF16;
            row_bytes = kw.cache_dtype == AITER_MLA_BF16 ? 1152 : 576;
            rope_at = kw.cache_dtype == AITER_MLA_BF16 ? 1024 : -1;
            what = "kv_cache_write_ref";
            st = aiter_mla_kv_cache_write_ref(&kw);
        } else if (kind == 1) {
            row_bytes = 656;
            rope_at = 528;
            what = "ds_mla_write_ref";
            st = aiter_mla_ds_mla_write_ref(&dw);
        } else {
            rope_at = 448;
            what = "v4_cache_write_ref";
            st = aiter_mla_v4_cache_write_ref(&vw);
        }
        CHECK(st == AITER_MLA_OK, "%s, iteration %d: slots are data, got %s", what, it, aiter_mla_last_error());
        if (!fuzz_answer(st, what, it)) continue;
        for (t = 0; t < NT; t++) { /* the bytes each valid slot may change */
            const int64_t s = slots[t];
            if (s < 0 || s >= SLOTS) continue;
            if (kind < 2) {
                memset(mask + s * row_bytes, 1, (size_t)row_bytes);
            } else {
                memset(mask + s / BS * v4_page + s % BS * 576, 1, 576);
                memset(mask + s / BS * v4_page + BS * 576 + s % BS * 8, 1, 8);
            }
        }
        for (i = 0; i < bytes_max; i++) bad += !mask[i] && cache[i] != before[i];
        CHECK(bad == 0, "%s, iteration %d: %lld bytes outside the written slots changed", what, it, (long long)bad);
        for (t = 0; t < NT && rope_at >= 0; t++) { /* a written slot's rope is some mapped token's */
            const int64_t s = slots[t];
            const unsigned char *at;
            int found = 0, u;
            if (s < 0 || s >= SLOTS) continue;
            at = kind < 2 ? cache + s * row_bytes + rope_at : cache + s / BS * v4_page + s % BS * 576 + rope_at;
            for (u = 0; u < NT && !found; u++) found = slots[u] == s && memcmp(at, kv + u * 576 + (kind == 2 ? 448 : 512), 128) == 0;
            bad += !found;
        }
        CHECK(bad == 0, "%s, iteration %d: %lld written slots hold no mapped token's rope values", what, it, (long long)bad);
    }
    for (i = 0; i < NT; i++) slots[i] = i;
    memset(cache, 0x77, (size_t)bytes_max);
    ke = kw, ke.num_blocks = 0;
    CHECK_STATUS(aiter_mla_kv_cache_write_ref(&ke), AITER_MLA_ERR_INVALID_ARGUMENT, "num_blocks");
    ke = kw, ke.block_size = -1;
    CHECK_STATUS(aiter_mla_kv_cache_write_ref(&ke), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
    ke = kw, ke.block_size = (1 << 16) + 1;
    CHECK_STATUS(aiter_mla_kv_cache_write_ref(&ke), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
    ke = kw, ke.num_tokens = -1;
    CHECK_STATUS(aiter_mla_kv_cache_write_ref(&ke), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
    ke = kw, ke.kv_c_stride = 100;
    CHECK_STATUS(aiter_mla_kv_cache_write_ref(&ke), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_c_stride");
    ke = kw, ke.scale = -1.0f;
    CHECK_STATUS(aiter_mla_kv_cache_write_ref(&ke), AITER_MLA_ERR_INVALID_ARGUMENT, "scale");
    ke = kw, ke.cache_dtype = AITER_MLA_F32;
    CHECK_STATUS(aiter_mla_kv_cache_write_ref(&ke), AITER_MLA_ERR_UNSUPPORTED, "cache_dtype");
    de = dw, de.num_blocks = -3;
    CHECK_STATUS(aiter_mla_ds_mla_write_ref(&de), AITER_MLA_ERR_INVALID_ARGUMENT, "num_blocks");
    de = dw, de.block_size = -1;
    CHECK_STATUS(aiter_mla_ds_mla_write_ref(&de), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
    de = dw, de.num_tokens = -1;
    CHECK_STATUS(aiter_mla_ds_mla_write_ref(&de), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
    de = dw, de.pow2_scales = 2;
    CHECK_STATUS(aiter_mla_ds_mla_write_ref(&de), AITER_MLA_ERR_INVALID_ARGUMENT, "pow2_scales");
    de = dw, de.fp8_max = 500.0f;
    CHECK_STATUS(aiter_mla_ds_mla_write_ref(&de), AITER_MLA_ERR_INVALID_ARGUMENT, "fp8_max");
    de = dw, de.fp8_dtype = AITER_MLA_BF16;
    CHECK_STATUS(aiter_mla_ds_mla_write_ref(&de), AITER_MLA_ERR_UNSUPPORTED, "fp8_dtype");
    ve = vw, ve.num_blocks = 0;
    CHECK_STATUS(aiter_mla_v4_cache_write_ref(&ve), AITER_MLA_ERR_INVALID_ARGUMENT, "num_blocks");
    ve = vw, ve.block_size = 1025;
    CHECK_STATUS(aiter_mla_v4_cache_write_ref(&ve), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
    ve = vw, ve.block_size = -1;
    CHECK_STATUS(aiter_mla_v4_cache_write_ref(&ve), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
    ve = vw, ve.page_stride_bytes = 100;
    CHECK_STATUS(aiter_mla_v4_cache_write_ref(&ve), AITER_MLA_ERR_INVALID_ARGUMENT, "page_stride_bytes");
    ve = vw, ve.num_tokens = -1;
    CHECK_STATUS(aiter_mla_v4_cache_write_ref(&ve), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
    ve = vw, ve.kv_stride = 10;
    CHECK_STATUS(aiter_mla_v4_cache_write_ref(&ve), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_stride");
    ve = vw, ve.fp8_max = 1000.0f;
    CHECK_STATUS(aiter_mla_v4_cache_write_ref(&ve), AITER_MLA_ERR_INVALID_ARGUMENT, "fp8_max");
    ve = vw, ve.src_dtype = AITER_MLA_F32;
    CHECK_STATUS(aiter_mla_v4_cache_write_ref(&ve), AITER_MLA_ERR_UNSUPPORTED, "src_dtype");
    for (i = 0, t = 0; i < bytes_max; i++) t += cache[i] != 0x77;
    CHECK(t == 0, "cache writes: %d bytes written by refused calls", t);
    free(kv);
    free(cache);
    free(before);
    free(mask);
}

/* Context gather (SPEC 2b): block ids are data (a row of zeros where absent); cu_out_rows and
 * seq_starts are checked against out_rows. bf16 into bf16 is a bit copy. */
static void fuzz_gather_cache(test_rng *r) {
    enum { NB = 6, BS = 4, B = 3, STRIDE = 3, OUT = 12, ITERS = 40 };
    const int32_t cu0[B + 1] = {0, 5, 5, 11}, ss0[B] = {0, 3, 1};
    int32_t bt[B * STRIDE], cu[B + 1], ss[B];
    uint16_t *cache = (uint16_t *)alloc_elems(NB * BS * 576, AITER_MLA_BF16), *out = (uint16_t *)alloc_elems(OUT * 576, AITER_MLA_BF16);
    aiter_mla_gather_cache_args g, e;
    int it, b, i, d, ok_runs = 0, err_runs = 0;
    fill_random(cache, NB * BS * 576, AITER_MLA_BF16, r, -1.0f, 1.0f, 0.0f);
    memset(&g, 0, sizeof g);
    g.kv_cache = cache;
    g.num_blocks = NB;
    g.block_size = BS;
    g.block_table = bt;
    g.block_table_stride = STRIDE;
    g.cu_out_rows = cu;
    g.seq_starts = ss;
    g.batch = B;
    g.out = out;
    g.out_rows = OUT;
    for (it = 0; it < ITERS; it++) {
        const int mode = it % 3; /* 0: block ids; 1: cu_out_rows; 2: seq_starts */
        int64_t bad = 0;
        aiter_mla_status st;
        memcpy(cu, cu0, sizeof cu);
        memcpy(ss, ss0, sizeof ss);
        fuzz_fill(r, bt, B * STRIDE, NB, 1);
        if (mode == 1) fuzz_fill(r, cu, B + 1, OUT + 1, it % 2);
        if (mode == 2) fuzz_fill(r, ss, B, 8, it % 2);
        memset(out, 0xa5, OUT * 576 * 2);
        fuzz_arm();
        st = aiter_mla_gather_cache_ref(&g);
        if (mode == 0) CHECK(st == AITER_MLA_OK, "gather_cache_ref, iteration %d: block ids are data, got %s", it, aiter_mla_last_error());
        if (fuzz_answer(st, "gather_cache_ref", it)) {
            ok_runs++;
            for (b = 0; b < B; b++)
                for (i = 0; i < cu[b + 1] - cu[b]; i++) {
                    const int64_t p = (int64_t)ss[b] + i, blk = p / BS;
                    const int32_t id = blk < STRIDE ? bt[b * STRIDE + blk] : -1;
                    for (d = 0; d < 576; d++)
                        bad += out[(int64_t)(cu[b] + i) * 576 + d] != (id >= 0 && id < NB ? cache[((int64_t)id * BS + p % BS) * 576 + d] : 0);
                }
            for (i = 0; i < OUT * 576; i++) bad += (i < cu[0] * 576 || i >= cu[B] * 576) && out[i] != 0xa5a5;
            CHECK(bad == 0, "gather_cache_ref, iteration %d: %lld values differ from SPEC 2b", it, (long long)bad);
        } else {
            err_runs++;
            for (i = 0; i < OUT * 576; i++) bad += out[i] != 0xa5a5;
            CHECK(bad == 0, "gather_cache_ref, iteration %d: written before the refusal", it);
        }
    }
    CHECK(ok_runs > 0 && err_runs > 0, "gather_cache fuzz: %d runs, %d refusals", ok_runs, err_runs);
    memcpy(cu, cu0, sizeof cu);
    memcpy(ss, ss0, sizeof ss);
    e = g, e.batch = 0;
    CHECK_STATUS(aiter_mla_gather_cache_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "batch");
    e = g, e.block_size = -1;
    CHECK_STATUS(aiter_mla_gather_cache_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
    e = g, e.num_blocks = 0;
    CHECK_STATUS(aiter_mla_gather_cache_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_blocks");
    e = g, e.block_table_stride = 0;
    CHECK_STATUS(aiter_mla_gather_cache_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "block_table_stride");
    e = g, e.out_rows = -1;
    CHECK_STATUS(aiter_mla_gather_cache_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "out_rows");
    e = g, e.out_rows = 10; /* cu_out_rows ends at 11 */
    CHECK_STATUS(aiter_mla_gather_cache_ref(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "out_rows");
    e = g, e.cache_is_ds_mla = 2;
    CHECK_STATUS(aiter_mla_gather_cache_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "cache_is_ds_mla");
    e = g, e.out_dtype = AITER_MLA_FP8_E4M3FN;
    CHECK_STATUS(aiter_mla_gather_cache_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "out_dtype");
    free(cache);
    free(out);
}

/* V3.2 index conversion and filter (SPEC 4): every array is data, so every call is OK and
 * every entry follows the definition. */
static void fuzz_sparse_index(test_rng *r) {
    enum { T = 4, TOPK = 6, NREQ = 3, STRIDE = 4, BS = 8, ITERS = 30 };
    static const int sizes[4] = {1, BS, 1000, 4096};
    int32_t idx[T * TOPK], req[T], bt[NREQ * STRIDE], starts[NREQ], ctx[NREQ], out[T * TOPK], cnt[T], ctx_out[T * TOPK],
        new_out[T * TOPK];
    aiter_mla_sparse_index_args c, e;
    aiter_mla_filter_prefill_args f, fe;
    int it, t, k;
    memset(&c, 0, sizeof c);
    c.indices = idx;
    c.req_id = req;
    c.block_table_stride = STRIDE;
    c.block_size = BS;
    c.workspace_starts = starts;
    c.num_requests = NREQ;
    c.num_tokens = T;
    c.topk = TOPK;
    c.out = out;
    c.valid_counts = cnt;
    memset(&f, 0, sizeof f);
    f.indices = idx;
    f.req_id = req;
    f.ctx_lens = ctx;
    f.num_requests = NREQ;
    f.num_tokens = T;
    f.topk = TOPK;
    f.context_out = ctx_out;
    f.new_out = new_out;
    for (it = 0; it < ITERS; it++) {
        int bad = 0;
        fuzz_fill(r, idx, T * TOPK, STRIDE * BS, 1);
        fuzz_fill(r, req, T, NREQ, 1);
        fuzz_fill(r, bt, NREQ * STRIDE, 100, 1);
        fuzz_fill(r, starts, NREQ, 1000, 1);
        fuzz_fill(r, ctx, NREQ, STRIDE * BS, 1);
        c.block_table = it % 2 ? bt : NULL;
        c.block_size = sizes[rng_int(r, 0, 3)];
        fuzz_arm();
        CHECK(fuzz_answer(aiter_mla_convert_sparse_indices_ref(&c), "convert_sparse_indices_ref", it), "indices are data: %s",
              aiter_mla_last_error());
        for (t = 0; t < T; t++) {
            int valid = 0;
            for (k = 0; k < TOPK; k++) {
                const int32_t want = naive_sparse_slot(idx[t * TOPK + k], req[t], NREQ, c.block_table, STRIDE, c.block_size, starts);
                bad += out[t * TOPK + k] != want;
                valid += want != -1;
            }
            bad += cnt[t] != valid;
        }
        CHECK(bad == 0, "convert_sparse_indices_ref, iteration %d: %d entries differ from SPEC 4", it, bad);
        fuzz_arm();
        CHECK(fuzz_answer(aiter_mla_filter_prefill_indices_ref(&f), "filter_prefill_indices_ref", it), "indices are data: %s",
              aiter_mla_last_error());
        for (t = 0; t < T; t++)
            for (k = 0; k < TOPK; k++) {
                const int32_t i = idx[t * TOPK + k], cl = req[t] >= 0 && req[t] < NREQ ? ctx[req[t]] : -1;
                const int known = i >= 0 && cl >= 0;
                bad += ctx_out[t * TOPK + k] != (known && i < cl ? i : -1);
                bad += new_out[t * TOPK + k] != (known && i >= cl ? i - cl : -1);
            }
        CHECK(bad == 0, "filter_prefill_indices_ref, iteration %d: %d entries differ from SPEC 4", it, bad);
    }
    c.block_table = bt;
    c.block_size = BS;
    e = c, e.topk = 0;
    CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "topk");
    e = c, e.num_requests = 0;
    CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_requests");
    e = c, e.num_tokens = -1;
    CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
    e = c, e.block_size = 4097;
    CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
    e = c, e.block_size = -8;
    CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
    e = c, e.block_table_stride = 0;
    CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "block_table_stride");
    e = c, e.indices_stride = TOPK - 1;
    CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "indices_stride");
    e = c, e.out_stride = TOPK - 1;
    CHECK_STATUS(aiter_mla_convert_sparse_indices_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "out_stride");
    fe = f, fe.topk = 0;
    CHECK_STATUS(aiter_mla_filter_prefill_indices_ref(&fe), AITER_MLA_ERR_INVALID_ARGUMENT, "topk");
    fe = f, fe.num_requests = -2;
    CHECK_STATUS(aiter_mla_filter_prefill_indices_ref(&fe), AITER_MLA_ERR_INVALID_ARGUMENT, "num_requests");
    fe = f, fe.num_tokens = -1;
    CHECK_STATUS(aiter_mla_filter_prefill_indices_ref(&fe), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
}

/* V3.2 sparse attention (SPEC 4): slots and topk_length are data, over bf16 rows and
 * fp8_ds_mla rows; a token with no slot in range gets o = 0, lse = +inf, max_logits = -inf. */
static void fuzz_sparse_attention(test_rng *r) {
    enum { SLOTS = 10, T = 3, H = 2, TOPK = 6, ITERS = 30 };
    uint16_t *q = (uint16_t *)alloc_elems(T * H * 576, AITER_MLA_BF16), *rows = (uint16_t *)alloc_elems(SLOTS * 576, AITER_MLA_BF16);
    unsigned char *ds = (unsigned char *)test_malloc(SLOTS * 656);
    int32_t idx[T * TOPK], len[T];
    int64_t slots[SLOTS];
    float o[T * H * 512], lse[T * H], ml[T * H];
    aiter_mla_ds_mla_write_args w;
    aiter_mla_sparse_args a, e;
    int it, t, k, h;
    fill_random(q, T * H * 576, AITER_MLA_BF16, r, -1.0f, 1.0f, 0.0f);
    fill_random(rows, SLOTS * 576, AITER_MLA_BF16, r, -1.0f, 1.0f, 0.0f);
    for (k = 0; k < SLOTS; k++) slots[k] = k;
    memset(&w, 0, sizeof w);
    w.kv_c = rows;
    w.kv_c_stride = 576;
    w.k_pe = rows + 512;
    w.k_pe_stride = 576;
    w.slot_mapping = slots;
    w.kv_cache = ds;
    w.num_blocks = 1;
    w.block_size = SLOTS;
    w.num_tokens = SLOTS;
    CHECK_STATUS(aiter_mla_ds_mla_write_ref(&w), AITER_MLA_OK, "");
    memset(&a, 0, sizeof a);
    a.q = q;
    a.num_slots = SLOTS;
    a.indices = idx;
    a.o = o;
    a.lse = lse;
    a.max_logits = ml;
    a.num_tokens = T;
    a.num_heads = H;
    a.topk = TOPK;
    a.o_dtype = AITER_MLA_F32;
    for (it = 0; it < ITERS; it++) {
        int64_t bad = 0;
        a.cache_is_ds_mla = it % 2;
        a.kv_cache = a.cache_is_ds_mla ? (const void *)ds : (const void *)rows;
        a.topk_length = it % 3 ? len : NULL;
        fuzz_fill(r, idx, T * TOPK, SLOTS, 1);
        fuzz_fill(r, len, T, TOPK + 1, 1);
        poison_f32(o, T * H * 512);
        poison_f32(lse, T * H);
        poison_f32(ml, T * H);
        fuzz_arm();
        CHECK(fuzz_answer(aiter_mla_sparse_attention_ref(&a), "sparse_attention_ref", it), "slots are data: %s", aiter_mla_last_error());
        bad += fuzz_attn_bad(o, lse, 0, T, H, 512, H, 1, INFINITY);
        for (t = 0; t < T; t++) {
            const int n = !a.topk_length ? TOPK : len[t] < 0 ? 0 : len[t] < TOPK ? len[t] : TOPK;
            int seen = 0;
            for (k = 0; k < n; k++) seen |= idx[t * TOPK + k] >= 0 && idx[t * TOPK + k] < SLOTS;
            for (h = 0; h < H; h++)
                bad += seen ? !isfinite(lse[t * H + h]) || !isfinite(ml[t * H + h])
                            : lse[t * H + h] != INFINITY || ml[t * H + h] != -INFINITY;
        }
        CHECK(bad == 0, "sparse_attention_ref, iteration %d: %lld values break SPEC 4's conventions", it, (long long)bad);
    }
    a.kv_cache = rows;
    a.cache_is_ds_mla = 0;
    poison_f32(o, T * H * 512);
    e = a, e.num_heads = 0;
    CHECK_STATUS(aiter_mla_sparse_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    e = a, e.num_heads = 129;
    CHECK_STATUS(aiter_mla_sparse_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    e = a, e.topk = 0;
    CHECK_STATUS(aiter_mla_sparse_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "topk");
    e = a, e.num_slots = 0;
    CHECK_STATUS(aiter_mla_sparse_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_slots");
    e = a, e.num_cu = -1;
    CHECK_STATUS(aiter_mla_sparse_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_cu");
    e = a, e.num_cu = 65537;
    CHECK_STATUS(aiter_mla_sparse_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_cu");
    e = a, e.num_tokens = -1;
    CHECK_STATUS(aiter_mla_sparse_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
    e = a, e.cache_is_ds_mla = 2;
    CHECK_STATUS(aiter_mla_sparse_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "cache_is_ds_mla");
    e = a, e.q_dtype = AITER_MLA_FP8_E4M3FN;
    CHECK_STATUS(aiter_mla_sparse_attention_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "q_dtype");
    CHECK(fuzz_all_poison_f32(o, T * H * 512), "sparse_attention: o written by a refused call");
    free(q);
    free(rows);
    free(ds);
}

/* Varlen prefill (SPEC 2, 2c) and its persistent plan: cu_seqlens and plan entries as garbage.
 * q/k/v/o hold TQ and TK rows; garbage the checks pass that asks for more is skipped. */
static void fuzz_prefill(test_rng *r) {
    enum { B = 2, H = 2, DQK = 64, DV = 64, TQ = 40, TK = 72, ITERS = 96 };
    const int32_t cq0[B + 1] = {0, 20, 37}, ck0[B + 1] = {0, 30, 70};
    int32_t cq[B + 1], ck[B + 1], *plan, *plan2;
    uint16_t *q = (uint16_t *)alloc_elems(TQ * H * DQK, AITER_MLA_BF16), *k = (uint16_t *)alloc_elems(TK * H * DQK, AITER_MLA_BF16),
             *v = (uint16_t *)alloc_elems(TK * H * DV, AITER_MLA_BF16);
    float *o = alloc_f32(TQ * H * DV), *o2 = alloc_f32(TQ * H * DV), *lse = alloc_f32(H * TQ), *lse2 = alloc_f32(H * TQ), *ws;
    aiter_mla_prefill_plan_desc d, dd;
    aiter_mla_prefill_plan_info info, info2;
    aiter_mla_prefill_args a, e;
    int it, i, ok_runs = 0, err_runs = 0, sched_runs = 0;
    fill_random(q, TQ * H * DQK, AITER_MLA_BF16, r, -1.0f, 1.0f, 0.0f);
    fill_random(k, TK * H * DQK, AITER_MLA_BF16, r, -1.0f, 1.0f, 0.0f);
    fill_random(v, TK * H * DV, AITER_MLA_BF16, r, -1.0f, 1.0f, 0.0f);
    memset(&d, 0, sizeof d);
    d.max_batch = B;
    d.max_q_tokens = TQ;
    d.num_heads = H;
    d.num_cu = 4; /* quotas 3, 3, 2, 2 units: request 0's second tile is cut, the reduce runs */
    d.dv = DV;
    d.tile_q = 16;
    d.kv_granularity = 16;
    CHECK_STATUS(aiter_mla_prefill_plan_get_info(&d, &info), AITER_MLA_OK, "");
    plan = alloc_i32(info.plan_ints);
    plan2 = alloc_i32(info.plan_ints);
    ws = (float *)test_malloc(info.workspace_bytes);
    memset(&a, 0, sizeof a);
    a.q = q;
    a.k = k;
    a.v = v;
    a.cu_seqlens_q = cq;
    a.cu_seqlens_k = ck;
    a.batch = B;
    a.num_heads = H;
    a.dqk = DQK;
    a.dv = DV;
    a.o_dtype = AITER_MLA_F32;
    a.plan_info = &info;
    a.workspace = ws;
    a.workspace_bytes = info.workspace_bytes;
    for (it = 0; it < ITERS; it++) {
        /* 0: cu_seqlens_q; 1: cu_seqlens_k (a plan built from the garbage when it is taken, or
         * else the one of the arrays before); 2: plan entries */
        const int mode = it % 3;
        int ref_ok;
        aiter_mla_status st;
        memcpy(cq, cq0, sizeof cq);
        memcpy(ck, ck0, sizeof ck);
        a.causal = it % 2;
        CHECK_STATUS(aiter_mla_prefill_plan_build(&info, cq, ck, B, a.causal, plan), AITER_MLA_OK, "");
        if (mode == 0) fuzz_fill(r, cq, B + 1, TQ + 1, it % 4 == 0);
        if (mode == 1) fuzz_fill(r, ck, B + 1, TK + 1, it % 4 == 1);
        if (mode < 2) {
            fuzz_arm();
            if (fuzz_answer(aiter_mla_prefill_plan_build(&info, cq, ck, B, a.causal, plan2), "prefill_plan_build", it)) {
                CHECK_STATUS(aiter_mla_prefill_plan_check(&info, cq, ck, B, a.causal, plan2), AITER_MLA_OK, "");
                memcpy(plan, plan2, (size_t)info.plan_ints * sizeof(int32_t));
            }
        } else {
            fuzz_fill(r, plan, info.plan_ints, 64, 0);
        }
        if ((fuzz_indptr_ok(cq, B) && cq[B] > TQ) || (fuzz_indptr_ok(ck, B) && ck[B] > TK)) {
            fuzz_skipped++;
            continue;
        }
        poison_f32(o, TQ * H * DV);
        poison_f32(lse, H * TQ);
        a.plan = NULL;
        a.o = o;
        a.lse = lse;
        fuzz_arm();
        st = aiter_mla_prefill_ref(&a);
        CHECK((st == AITER_MLA_OK) == (fuzz_indptr_ok(cq, B) && fuzz_indptr_ok(ck, B)),
              "prefill_ref, iteration %d: status %s, but the cu_seqlens are %s", it, testing_status_name(st),
              fuzz_indptr_ok(cq, B) && fuzz_indptr_ok(ck, B) ? "monotone" : "not monotone");
        ref_ok = fuzz_answer(st, "prefill_ref", it);
        if (ref_ok) {
            ok_runs++;
            CHECK(fuzz_attn_bad(o, lse, cq[0], cq[B], H, DV, 1, cq[B], -INFINITY) == 0,
                  "prefill_ref, iteration %d: o not finite, or lse neither finite nor -inf with o = 0", it);
        } else {
            err_runs++;
            CHECK(fuzz_all_poison_f32(o, TQ * H * DV), "prefill_ref, iteration %d: o written before the refusal", it);
        }
        poison_f32(o2, TQ * H * DV);
        poison_f32(lse2, H * TQ);
        a.plan = plan;
        a.o = o2;
        a.lse = lse2;
        fuzz_arm();
        st = aiter_mla_prefill_ref_scheduled(&a);
        if (fuzz_answer(st, "prefill_ref_scheduled", it)) {
            int64_t t, n = 0;
            float diff = 0.0f;
            sched_runs++;
            CHECK(ref_ok, "prefill_ref_scheduled, iteration %d: took arrays that prefill_ref refused", it);
            if (!ref_ok) continue;
            for (t = (int64_t)cq[0] * H; t < (int64_t)cq[B] * H; t++) {
                const int64_t li = (t % H) * cq[B] + t / H; /* lse is [H, Tq] */
                n += !(lse[li] == lse2[li] || fabsf(lse[li] - lse2[li]) <= 1e-4f);
                for (i = 0; i < DV; i++) diff = fmaxf(diff, fabsf(o[t * DV + i] - o2[t * DV + i]));
            }
            CHECK(n == 0 && diff <= 1e-4f, "prefill_ref_scheduled, iteration %d: %lld lse and o (max diff %g) differ from prefill_ref", it,
                  (long long)n, (double)diff);
        } else {
            CHECK(fuzz_all_poison_f32(o2, TQ * H * DV), "prefill_ref_scheduled, iteration %d: o written before the refusal", it);
        }
    }
    CHECK(ok_runs > 0 && err_runs > 0 && sched_runs > 0, "prefill fuzz: %d runs, %d refusals, %d replays", ok_runs, err_runs, sched_runs);
    memcpy(cq, cq0, sizeof cq);
    memcpy(ck, ck0, sizeof ck);
    a.causal = 1;
    CHECK_STATUS(aiter_mla_prefill_plan_build(&info, cq, ck, B, 1, plan), AITER_MLA_OK, "");
    CHECK(plan[AITER_MLA__PH_NUM_PARTIALS] > 0, "prefill fuzz: the valid plan must split a tile");
    { /* a header count out of bounds is named, and so is a plan built for another batch */
        const int32_t keep = plan[AITER_MLA__PH_NUM_WORK];
        CHECK_STATUS(aiter_mla_prefill_plan_check(&info, cq, ck, B, 1, plan), AITER_MLA_OK, "");
        plan[AITER_MLA__PH_NUM_WORK] = -5;
        CHECK_STATUS(aiter_mla_prefill_plan_check(&info, cq, ck, B, 1, plan), AITER_MLA_ERR_PLAN_INVALID, "num_work = -5 is outside 0..max_work");
        plan[AITER_MLA__PH_NUM_WORK] = keep;
        plan[AITER_MLA__PH_BATCH] = B + 1;
        CHECK_STATUS(aiter_mla_prefill_plan_check(&info, cq, ck, B, 1, plan), AITER_MLA_ERR_PLAN_INVALID, "was built for");
        plan[AITER_MLA__PH_BATCH] = B;
    }
    a.plan = plan;
    a.o = o;
    a.lse = lse;
    poison_f32(o, TQ * H * DV);
    e = a, e.batch = 0;
    CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "batch");
    e = a, e.num_heads = 2, e.o_stride_head = 5, e.o_stride_token = 0; /* heads' rows 5 apart */
    CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "o_stride_head = 5 is below");
    e = a, e.num_heads = 1, e.o_stride_head = 7, e.o_stride_token = 0; /* one head: the default token stride is 7 */
    CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads x o_stride_head");
    e = a, e.num_heads = 0;
    CHECK_STATUS(aiter_mla_prefill_ref_scheduled(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    e = a, e.num_heads = 65537;
    CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    e = a, e.dqk = 100;
    CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "dqk");
    e = a, e.dv = 512;
    CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "dv");
    e = a, e.causal = 2;
    CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "causal");
    e = a, e.num_cu = -1;
    CHECK_STATUS(aiter_mla_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_cu");
    e = a, e.num_heads = 1; /* in range, but not the plan's */
    CHECK_STATUS(aiter_mla_prefill_ref_scheduled(&e), AITER_MLA_ERR_PLAN_MISMATCH, "num_heads");
    e = a, e.workspace_bytes = info.workspace_bytes - 1;
    CHECK_STATUS(aiter_mla_prefill_ref_scheduled(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "workspace_bytes");
    CHECK(fuzz_all_poison_f32(o, TQ * H * DV), "prefill: o written by a refused call");
    dd = d, dd.max_batch = 0;
    CHECK_STATUS(aiter_mla_prefill_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "max_batch");
    dd = d, dd.max_q_tokens = 0;
    CHECK_STATUS(aiter_mla_prefill_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "max_q_tokens");
    dd = d, dd.num_heads = 0;
    CHECK_STATUS(aiter_mla_prefill_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    dd = d, dd.num_cu = -1;
    CHECK_STATUS(aiter_mla_prefill_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "num_cu");
    dd = d, dd.dv = 32;
    CHECK_STATUS(aiter_mla_prefill_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "dv");
    dd = d, dd.dv = 100; /* in 64..256, but no prefill call takes it */
    CHECK_STATUS(aiter_mla_prefill_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "dv");
    dd = d, dd.tile_q = 24;
    CHECK_STATUS(aiter_mla_prefill_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "tile_q");
    dd = d, dd.kv_granularity = 8192;
    CHECK_STATUS(aiter_mla_prefill_plan_get_info(&dd, &info2), AITER_MLA_ERR_INVALID_ARGUMENT, "kv_granularity");
    CHECK_STATUS(aiter_mla_prefill_plan_build(&info, cq, ck, B, 2, plan), AITER_MLA_ERR_INVALID_ARGUMENT, "causal");
    free(plan);
    free(plan2);
    free(q);
    free(k);
    free(v);
    free(o);
    free(o2);
    free(lse);
    free(lse2);
    free(ws);
}

/* V4 gather (SPEC 7): block ids are data (zeros where absent); seq_lens and gather_lens are
 * checked against out_rows. The rows come back exactly (fp8 times a power of two fits f32). */
static void fuzz_v4_gather(test_rng *r) {
    enum { NB = 4, BS = 4, B = 3, STRIDE = 3, OUT = 12, OFF = 2, ITERS = 40 };
    const int64_t pb = naive_v4_page_bytes(BS);
    const int32_t seq0[B] = {5, 0, 9}, gl0[B] = {5, 0, 4};
    int32_t bt[B * STRIDE], seq[B], gl[B];
    unsigned char *cache = (unsigned char *)test_malloc((size_t)(NB * pb));
    uint16_t *kv = (uint16_t *)alloc_elems(NB * BS * 512, AITER_MLA_BF16);
    int64_t slots[NB * BS];
    float *out = alloc_f32(B * OUT * 512);
    double row[512];
    aiter_mla_v4_gather_args g, e;
    int it, b, i, d, ok_runs = 0, err_runs = 0;
    for (i = 0; i < NB * BS; i++) slots[i] = i;
    v4_random_rows(r, kv, NB * BS, AITER_MLA_BF16);
    v4_write(cache, NB, BS, kv, slots, NB * BS, AITER_MLA_FP8_E4M3FN);
    memset(&g, 0, sizeof g);
    g.kv_cache = cache;
    g.num_blocks = NB;
    g.block_size = BS;
    g.block_table = bt;
    g.block_table_stride = STRIDE;
    g.seq_lens = seq;
    g.batch = B;
    g.out = out;
    g.out_rows = OUT;
    g.offset = OFF;
    g.out_dtype = AITER_MLA_F32;
    for (it = 0; it < ITERS; it++) {
        const int mode = it % 3; /* 0: block ids; 1: seq_lens; 2: gather_lens */
        int64_t bad = 0;
        aiter_mla_status st;
        memcpy(seq, seq0, sizeof seq);
        memcpy(gl, gl0, sizeof gl);
        fuzz_fill(r, bt, B * STRIDE, NB, 1);
        if (mode == 1) fuzz_fill(r, seq, B, 11, it % 2);
        if (mode == 2) fuzz_fill(r, gl, B, 11, it % 2);
        g.gather_lens = mode == 2 || it % 2 ? gl : NULL;
        poison_f32(out, B * OUT * 512);
        fuzz_arm();
        st = aiter_mla_v4_gather_ref(&g);
        if (mode == 0) CHECK(st == AITER_MLA_OK, "v4_gather_ref, iteration %d: block ids are data, got %s", it, aiter_mla_last_error());
        if (fuzz_answer(st, "v4_gather_ref", it)) {
            ok_runs++;
            for (b = 0; b < B; b++) {
                const int32_t n = g.gather_lens ? gl[b] : seq[b];
                for (i = 0; i < OUT; i++) {
                    const float *o = out + ((int64_t)b * OUT + i) * 512;
                    const int64_t p = (int64_t)seq[b] - n + (i - OFF);
                    if (i < OFF || i >= OFF + n) {
                        bad += !fuzz_all_poison_f32(o, 512);
                        continue;
                    }
                    if (p / BS < STRIDE && bt[b * STRIDE + p / BS] >= 0 && bt[b * STRIDE + p / BS] < NB)
                        naive_v4_row(cache, pb, BS, (int64_t)bt[b * STRIDE + p / BS] * BS + p % BS, 0, row);
                    else
                        for (d = 0; d < 512; d++) row[d] = 0.0;
                    for (d = 0; d < 512; d++) bad += o[d] != (float)row[d];
                }
            }
            CHECK(bad == 0, "v4_gather_ref, iteration %d: %lld values differ from SPEC 7's rows", it, (long long)bad);
        } else {
            err_runs++;
            CHECK(fuzz_all_poison_f32(out, B * OUT * 512), "v4_gather_ref, iteration %d: written before the refusal", it);
        }
    }
    CHECK(ok_runs > 0 && err_runs > 0, "v4_gather fuzz: %d runs, %d refusals", ok_runs, err_runs);
    memcpy(seq, seq0, sizeof seq);
    memcpy(gl, gl0, sizeof gl);
    g.gather_lens = gl;
    poison_f32(out, B * OUT * 512);
    e = g, e.batch = 0;
    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "batch");
    e = g, e.block_table_stride = 0;
    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "block_table_stride");
    e = g, e.out_rows = -1;
    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "out_rows");
    e = g, e.offset = OUT + 1;
    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "offset");
    e = g, e.offset = -1;
    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "offset");
    e = g, e.offset = OUT - 4; /* request 0 gathers 5 rows */
    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "out_rows");
    e = g, e.num_blocks = 0;
    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_blocks");
    e = g, e.block_size = 2000;
    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
    e = g, e.out_dtype = AITER_MLA_FP8_E4M3FN;
    CHECK_STATUS(aiter_mla_v4_gather_ref(&e), AITER_MLA_ERR_UNSUPPORTED, "out_dtype");
    CHECK(fuzz_all_poison_f32(out, B * OUT * 512), "v4_gather: out written by a refused call");
    free(cache);
    free(kv);
    free(out);
}

/* The request of token tok, with [qsl[b], qsl[b + 1]) holding it; -1 when none. */
static int32_t fuzz_req_of(const int32_t *qsl, int n, int64_t tok) {
    int b;
    for (b = 0; b < n; b++)
        if (qsl[b] <= tok && tok < qsl[b + 1]) return b;
    return -1;
}

/* V4 index builders (SPEC 7 and their prototypes' comments), each list from its definition:
 * SWA windows, the ratio-4 top-k lists and the ratio-128 lists. Page ids, requests, top-k
 * entries, positions and validity bytes are data; query_start_loc and seq_lens are checked. */
static void fuzz_v4_builders(test_rng *r) {
    enum { NREQ = 3, T = 6, W = 8, BS = 4, STRIDE = 12, TOPK = 4, TSTRIDE = 5, CW = 6, ITERS = 36 };
    static const int windows[3] = {1, 3, W}, sizes[5] = {1, 3, 4, 7, 1024}, ratios[5] = {1, 2, 4, 128, 65536};
    const int32_t qsl0[NREQ + 1] = {0, 2, 3, 6}, seq0[NREQ] = {10, 1, 40};
    int32_t qsl[NREQ + 1], seq[NREQ], t2r[T], bt[NREQ * STRIDE], topk[T * TSTRIDE], exp[T * W], exp_len[T];
    int64_t pos[T];
    uint8_t valid[T];
    v4_outs ob;
    aiter_mla_v4_swa_index_args s, se;
    aiter_mla_v4_topk_args k, ke;
    aiter_mla_v4_c128_args c, ce;
    int it, t, i, ok_runs = 0, err_runs = 0;
    { /* position INT64_MAX at ratio 1 sees (pos + 1) / 1 = 2^63 entries: min(2^63, width) = width */
        int64_t last_pos = INT64_MAX;
        int32_t len = -7;
        memset(&c, 0, sizeof c);
        c.positions = &last_pos;
        c.compress_ratio = 1;
        c.width = 4;
        c.num_tokens = 1;
        c.out.lens = &len;
        CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&c), AITER_MLA_OK, "");
        CHECK(len == 4, "v4_c128_indices_ref: position INT64_MAX at ratio 1 has %d entries, SPEC 7 gives 4", len);
    }
    memset(&s, 0, sizeof s);
    s.query_start_loc = qsl;
    s.seq_lens = seq;
    s.block_table = bt;
    s.block_table_stride = STRIDE;
    s.block_size = BS;
    s.window = W;
    s.num_reqs = NREQ;
    memset(&k, 0, sizeof k);
    k.topk_indices = topk;
    k.topk_stride = TSTRIDE;
    k.topk = TOPK;
    k.token_to_req = t2r;
    k.block_table = bt;
    k.block_table_stride = STRIDE;
    k.block_size = BS;
    k.num_reqs = NREQ;
    k.num_tokens = T;
    memset(&c, 0, sizeof c);
    c.positions = pos;
    c.token_to_req = t2r;
    c.block_table_stride = STRIDE;
    c.block_size = 2;
    c.num_reqs = NREQ;
    c.compress_ratio = 4;
    c.width = CW;
    c.num_tokens = T;
    for (it = 0; it < ITERS; it++) {
        const int mode = it % 3; /* 0: data only; 1: query_start_loc; 2: seq_lens */
        aiter_mla_status st;
        memcpy(qsl, qsl0, sizeof qsl);
        memcpy(seq, seq0, sizeof seq);
        fuzz_fill(r, bt, NREQ * STRIDE, 64, 1);
        fuzz_fill(r, t2r, T, NREQ, 1);
        fuzz_fill(r, topk, T * TSTRIDE, 40, 1);
        fuzz_fill64(r, pos, T, 40);
        for (t = 0; t < T; t++) valid[t] = (uint8_t)(rng_int(r, 0, 3) ? 1 : rng_int(r, 0, 1) * 255);
        if (mode == 1) fuzz_fill(r, qsl, NREQ + 1, T + 1, it % 2);
        if (mode == 2) fuzz_fill(r, seq, NREQ, 41, it % 2);

        /* SWA: rows token_offset .., a request from token_to_req or from query_start_loc */
        s.window = windows[rng_int(r, 0, 2)];
        s.block_size = sizes[rng_int(r, 0, 4)];
        s.token_offset = it % 4 == 1;
        s.num_tokens = T - s.token_offset;
        s.token_to_req = it % 2 ? t2r : NULL;
        s.is_valid_token = it % 3 == 1 ? valid : NULL;
        s.out = v4_outs_make(&ob, s.num_tokens, s.window, s.num_tokens * s.window);
        fuzz_arm();
        st = aiter_mla_v4_swa_indices_ref(&s);
        if (mode == 0) CHECK(st == AITER_MLA_OK, "v4_swa_indices_ref, iteration %d: page ids are data, got %s", it, aiter_mla_last_error());
        if (fuzz_answer(st, "v4_swa_indices_ref", it)) {
            ok_runs++;
            for (t = 0; t < s.num_tokens; t++) {
                const int64_t tok = s.token_offset + t;
                const int32_t b = s.token_to_req ? t2r[tok] : fuzz_req_of(qsl, NREQ, tok);
                int64_t p = -1, first;
                exp_len[t] = 0;
                if ((s.is_valid_token && !valid[tok]) || b < 0 || b >= NREQ || tok < qsl[b] || tok >= qsl[b + 1]) continue;
                p = (int64_t)seq[b] - (qsl[b + 1] - qsl[b]) + (tok - qsl[b]);
                first = p - s.window + 1 > 0 ? p - s.window + 1 : 0;
                exp_len[t] = (int32_t)(p - first + 1);
                for (i = 0; i < exp_len[t]; i++) exp[t * s.window + i] = fuzz_table_slot(bt + b * STRIDE, STRIDE, s.block_size, first + i);
            }
            CHECK(v4_outs_bad(&ob, exp, exp_len) == 0, "v4_swa_indices_ref, iteration %d: lists differ from SPEC 7's windows", it);
        } else {
            int bad = 0;
            err_runs++;
            for (i = 0; i < s.num_tokens * (s.window + 2); i++) bad += ob.dense[i] != V4_SENTINEL;
            for (i = 0; i <= s.num_tokens; i++) bad += ob.ptr[i] != V4_SENTINEL;
            CHECK(bad == 0, "v4_swa_indices_ref, iteration %d: written before the refusal", it);
        }
        v4_outs_free(&ob);

        /* top-k: the entries >= 0 of each row, in order, through the token's request's row */
        k.block_size = sizes[rng_int(r, 0, 4)];
        k.is_valid_token = it % 2 ? valid : NULL;
        k.out = v4_outs_make(&ob, T, TOPK, T * TOPK);
        fuzz_arm();
        CHECK(fuzz_answer(aiter_mla_v4_global_topk_ref(&k), "v4_global_topk_ref", it), "top-k entries are data: %s", aiter_mla_last_error());
        for (t = 0; t < T; t++) {
            exp_len[t] = 0;
            if (k.is_valid_token && !valid[t]) continue;
            for (i = 0; i < TOPK; i++)
                if (topk[t * TSTRIDE + i] >= 0)
                    exp[t * TOPK + exp_len[t]++] =
                        t2r[t] >= 0 && t2r[t] < NREQ ? fuzz_table_slot(bt + t2r[t] * STRIDE, STRIDE, k.block_size, topk[t * TSTRIDE + i]) : -1;
        }
        CHECK(v4_outs_bad(&ob, exp, exp_len) == 0, "v4_global_topk_ref, iteration %d: lists differ from the definition", it);
        v4_outs_free(&ob);

        /* ratio-128 builder at any ratio, width CW: entries j < min((pos + 1) / ratio, CW), local or
         * through the table (block size 0: 256 / ratio, at least 1) */
        c.compress_ratio = ratios[rng_int(r, 0, 4)];
        c.block_size = rng_int(r, 0, 1) ? 0 : sizes[rng_int(r, 0, 4)];
        c.block_table = it % 2 ? bt : NULL;
        c.is_valid_token = it % 3 == 2 ? valid : NULL;
        c.out = v4_outs_make(&ob, T, CW, it % 5 == 4 ? 5 : T * CW); /* sometimes too small: refused */
        fuzz_arm();
        st = aiter_mla_v4_c128_indices_ref(&c);
        if (fuzz_answer(st, "v4_c128_indices_ref", it)) {
            const int cbs = c.block_size ? c.block_size : c.compress_ratio < 256 ? 256 / c.compress_ratio : 1;
            int64_t total = 0;
            for (t = 0; t < T; t++) { /* (pos + 1) / ratio in 64 unsigned bits: exact for every pos >= 0 */
                const uint64_t n = pos[t] < 0 || (c.is_valid_token && !valid[t]) ? 0 : ((uint64_t)pos[t] + 1) / (uint64_t)c.compress_ratio;
                exp_len[t] = (int32_t)(n < CW ? n : CW);
                total += exp_len[t];
                for (i = 0; i < exp_len[t]; i++)
                    exp[t * CW + i] = !c.block_table ? i
                                      : t2r[t] >= 0 && t2r[t] < NREQ ? fuzz_table_slot(bt + t2r[t] * STRIDE, STRIDE, cbs, i)
                                                                     : -1;
            }
            CHECK(total <= ob.cap && v4_outs_bad(&ob, exp, exp_len) == 0, "v4_c128_indices_ref, iteration %d: lists differ from the definition", it);
        } else {
            CHECK(st == AITER_MLA_ERR_BUFFER_TOO_SMALL && ob.cap == 5, "v4_c128_indices_ref, iteration %d: refused with %s", it, aiter_mla_last_error());
        }
        v4_outs_free(&ob);
    }
    CHECK(ok_runs > 0 && err_runs > 0, "v4_swa_indices fuzz: %d runs, %d refusals", ok_runs, err_runs);
    memcpy(qsl, qsl0, sizeof qsl);
    memcpy(seq, seq0, sizeof seq);
    s.window = W;
    s.block_size = BS;
    s.token_to_req = NULL; /* every token valid, in its query_start_loc range: 6 lists of >= 1 */
    s.is_valid_token = NULL;
    k.block_size = BS;
    c.compress_ratio = 4;
    c.block_size = 2;
    s.token_offset = 0;
    s.num_tokens = T;
    s.out = v4_outs_make(&ob, T, W, T * W);
    se = s, se.num_reqs = 0;
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&se), AITER_MLA_ERR_INVALID_ARGUMENT, "num_reqs");
    se = s, se.block_size = 1025;
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&se), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
    se = s, se.block_size = -1;
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&se), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
    se = s, se.window = 65537;
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&se), AITER_MLA_ERR_INVALID_ARGUMENT, "window");
    se = s, se.window = -1;
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&se), AITER_MLA_ERR_INVALID_ARGUMENT, "window");
    se = s, se.block_table_stride = 0;
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&se), AITER_MLA_ERR_INVALID_ARGUMENT, "block_table_stride");
    se = s, se.num_tokens = -1;
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&se), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
    se = s, se.token_offset = -1;
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&se), AITER_MLA_ERR_INVALID_ARGUMENT, "token_offset");
    se = s, se.out.dense_stride = W - 1;
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&se), AITER_MLA_ERR_INVALID_ARGUMENT, "dense_stride");
    se = s, se.out.capacity = 3;
    CHECK_STATUS(aiter_mla_v4_swa_indices_ref(&se), AITER_MLA_ERR_BUFFER_TOO_SMALL, "capacity");
    v4_outs_free(&ob);
    k.out = v4_outs_make(&ob, T, TOPK, T * TOPK);
    ke = k, ke.topk = 0;
    CHECK_STATUS(aiter_mla_v4_global_topk_ref(&ke), AITER_MLA_ERR_INVALID_ARGUMENT, "topk");
    ke = k, ke.topk_stride = TOPK - 1;
    CHECK_STATUS(aiter_mla_v4_global_topk_ref(&ke), AITER_MLA_ERR_INVALID_ARGUMENT, "topk_stride");
    ke = k, ke.num_reqs = 0;
    CHECK_STATUS(aiter_mla_v4_global_topk_ref(&ke), AITER_MLA_ERR_INVALID_ARGUMENT, "num_reqs");
    ke = k, ke.block_size = 1025;
    CHECK_STATUS(aiter_mla_v4_global_topk_ref(&ke), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
    ke = k, ke.block_table_stride = -1;
    CHECK_STATUS(aiter_mla_v4_global_topk_ref(&ke), AITER_MLA_ERR_INVALID_ARGUMENT, "block_table_stride");
    ke = k, ke.num_tokens = -1;
    CHECK_STATUS(aiter_mla_v4_global_topk_ref(&ke), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
    v4_outs_free(&ob);
    c.block_table = bt;
    c.out = v4_outs_make(&ob, T, CW, T * CW);
    ce = c, ce.compress_ratio = -1;
    CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&ce), AITER_MLA_ERR_INVALID_ARGUMENT, "compress_ratio");
    ce = c, ce.compress_ratio = 65537;
    CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&ce), AITER_MLA_ERR_INVALID_ARGUMENT, "compress_ratio");
    ce = c, ce.width = 0;
    CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&ce), AITER_MLA_ERR_INVALID_ARGUMENT, "width");
    ce = c, ce.num_tokens = -1;
    CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&ce), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
    ce = c, ce.num_reqs = 0;
    CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&ce), AITER_MLA_ERR_INVALID_ARGUMENT, "num_reqs");
    ce = c, ce.block_size = 1025;
    CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&ce), AITER_MLA_ERR_INVALID_ARGUMENT, "block_size");
    ce = c, ce.block_table_stride = 0;
    CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&ce), AITER_MLA_ERR_INVALID_ARGUMENT, "block_table_stride");
    ce = c, ce.token_to_req = NULL;
    CHECK_STATUS(aiter_mla_v4_c128_indices_ref(&ce), AITER_MLA_ERR_NULL_POINTER, "token_to_req");
    for (i = 0, t = 0; i < T * (CW + 2); i++) t += ob.dense[i] != V4_SENTINEL;
    CHECK(t == 0, "v4 builders: dense written by a refused call");
    v4_outs_free(&ob);
}

/* V4 combine (SPEC 7): top-k entries are data (-1 outside the gathered compressed rows);
 * query_start_loc, seq_lens and gather_lens are checked. The outputs and top-k rows hold TA
 * tokens: garbage the checks pass that asks for more is skipped (the count is trusted). */
static void fuzz_v4_combine(test_rng *r) {
    enum { NREQ = 3, TA = 8, W = 8, TOPK = 3, TSTRIDE = 4, N = 16, M = N + W + 16, WIDTH = TOPK + W, ITERS = 48 };
    static const int windows[3] = {1, 3, W}, ratios[3] = {1, 4, 128};
    const int32_t qsl0[NREQ + 1] = {0, 2, 3, 6}, seq0[NREQ] = {10, 1, 40}, gl0[NREQ] = {9, 1, 12};
    int32_t qsl[NREQ + 1], seq[NREQ], gl[NREQ], *topk = alloc_i32(TA * TSTRIDE), exp[TA * WIDTH], exp_len[TA];
    v4_outs ob;
    aiter_mla_v4_combine_args c, e;
    int it, t, i, ok_runs = 0, err_runs = 0, ok_gather_runs = 0;
    memset(&c, 0, sizeof c);
    c.topk_indices = topk;
    c.topk_stride = TSTRIDE;
    c.topk = TOPK;
    c.query_start_loc = qsl;
    c.seq_lens = seq;
    c.num_reqs = NREQ;
    c.M = M;
    c.N = N;
    for (it = 0; it < ITERS; it++) {
        const int mode = it % 4; /* 0: top-k entries; 1: query_start_loc; 2: seq_lens; 3: gather_lens */
        int64_t count;
        aiter_mla_status st;
        memcpy(qsl, qsl0, sizeof qsl);
        memcpy(seq, seq0, sizeof seq);
        memcpy(gl, gl0, sizeof gl);
        fuzz_fill(r, topk, TA * TSTRIDE, N + 1, 1);
        if (mode == 1) fuzz_fill(r, qsl, NREQ + 1, TA + 1, it % 2);
        if (mode == 2) fuzz_fill(r, seq, NREQ, 41, it % 2);
        if (mode == 3) fuzz_fill(r, gl, NREQ, 41, it % 2);
        c.gather_lens = mode == 3 || (it / 4) % 2 ? gl : NULL; /* given lengths also with valid arrays */
        c.window = windows[rng_int(r, 0, 2)];
        c.compress_ratio = ratios[rng_int(r, 0, 2)];
        count = (int64_t)qsl[NREQ] - qsl[0];
        if (fuzz_indptr_ok(qsl, NREQ) && count > TA) {
            fuzz_skipped++;
            continue;
        }
        c.out = v4_outs_make(&ob, TA, TOPK + c.window, TA * (TOPK + c.window));
        fuzz_arm();
        st = aiter_mla_v4_combine_ref(&c);
        if (mode == 0) CHECK(st == AITER_MLA_OK, "v4_combine_ref, iteration %d: top-k entries are data, got %s", it, aiter_mla_last_error());
        if (fuzz_answer(st, "v4_combine_ref", it)) {
            const int wd = TOPK + c.window;
            ok_runs++;
            ok_gather_runs += c.gather_lens != NULL;
            for (t = 0; t < TA; t++) {
                const int64_t tok = qsl[0] + t;
                const int32_t b = fuzz_req_of(qsl, NREQ, tok);
                int64_t pos, prefix, g, ncomp, tl, sl;
                exp_len[t] = 0;
                if (t >= count || b < 0) continue;
                prefix = (int64_t)seq[b] - (qsl[b + 1] - qsl[b]);
                pos = prefix + (tok - qsl[b]);
                g = c.gather_lens ? gl[b] : (qsl[b + 1] - qsl[b]) + (prefix < c.window - 1 ? prefix : c.window - 1);
                ncomp = seq[b] / c.compress_ratio < N ? seq[b] / c.compress_ratio : N;
                tl = (pos + 1) / c.compress_ratio < TOPK ? (pos + 1) / c.compress_ratio : TOPK;
                sl = pos + 1 < c.window ? pos + 1 : c.window;
                for (i = 0; i < tl; i++) {
                    const int32_t j = topk[t * TSTRIDE + i];
                    exp[t * wd + exp_len[t]++] = j >= 0 && j < ncomp ? (int32_t)((int64_t)M * b + j) : -1;
                }
                for (i = 0; i < sl; i++) exp[t * wd + exp_len[t]++] = (int32_t)((int64_t)M * b + N + (pos - sl + 1 + i) - (seq[b] - g));
            }
            ob.T = count; /* the lists of the chunk's tokens; rows past them untouched */
            for (i = (int)count * (wd + 2), t = 0; i < TA * (wd + 2); i++) t += ob.dense[i] != V4_SENTINEL;
            CHECK(t == 0 && v4_outs_bad(&ob, exp, exp_len) == 0, "v4_combine_ref, iteration %d: lists differ from SPEC 7's combine", it);
        } else {
            int bad = 0;
            err_runs++;
            for (i = 0; i < TA * (TOPK + c.window + 2); i++) bad += ob.dense[i] != V4_SENTINEL;
            CHECK(bad == 0, "v4_combine_ref, iteration %d: written before the refusal", it);
        }
        v4_outs_free(&ob);
    }
    CHECK(ok_runs > 0 && err_runs > 0 && ok_gather_runs > 0, "v4_combine fuzz: %d runs (%d with gather_lens), %d refusals", ok_runs,
          ok_gather_runs, err_runs);
    memcpy(qsl, qsl0, sizeof qsl);
    memcpy(seq, seq0, sizeof seq);
    memcpy(gl, gl0, sizeof gl);
    c.gather_lens = gl;
    c.window = W;
    c.compress_ratio = 4;
    c.out = v4_outs_make(&ob, TA, WIDTH, TA * WIDTH);
    e = c, e.num_reqs = 0;
    CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_reqs");
    e = c, e.topk = -1;
    CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "topk");
    e = c, e.topk_stride = TOPK - 1;
    CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "topk_stride");
    e = c, e.window = 65537;
    CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "window");
    e = c, e.compress_ratio = -1;
    CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "compress_ratio");
    e = c, e.M = 0;
    CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "M");
    e = c, e.N = M + 1;
    CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "N");
    e = c, e.M = INT32_MAX; /* M * num_reqs rows past int32 */
    CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "M");
    e = c, e.M = N + 11; /* request 2 gathers 12 rows */
    CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "M");
    e = c, e.topk_indices = NULL;
    CHECK_STATUS(aiter_mla_v4_combine_ref(&e), AITER_MLA_ERR_NULL_POINTER, "topk_indices");
    for (i = 0, t = 0; i < TA * (WIDTH + 2); i++) t += ob.dense[i] != V4_SENTINEL;
    CHECK(t == 0, "v4_combine: dense written by a refused call");
    v4_outs_free(&ob);
    free(topk);
}

/* Ragged copy: the entries are copied as they are; indptr is checked. indices holds NIDX
 * entries: a monotone indptr that asks for more is skipped (that length is trusted). */
static void fuzz_v4_copy_ragged(test_rng *r) {
    enum { ROWS = 4, NIDX = 10, MAXE = 4, CAP = ROWS * MAXE, ITERS = 40 };
    const int32_t ptr0[ROWS + 1] = {0, 3, 3, 7, 10}; /* every row fits MAXE: taken without clamp too */
    int32_t *idx = alloc_i32(NIDX), ptr[ROWS + 1], ibuf[CAP], pbuf[ROWS + 1];
    int64_t dropped;
    aiter_mla_v4_ragged_copy_args a, e;
    int it, i, row, ok_runs = 0, err_runs = 0, ok_unclamped = 0;
    memset(&a, 0, sizeof a);
    a.indices = idx;
    a.indptr = ptr;
    a.num_rows = ROWS;
    a.max_entries_per_row = MAXE;
    a.indices_buffer = ibuf;
    a.indices_buffer_capacity = CAP;
    a.indptr_buffer = pbuf;
    a.indptr_buffer_capacity = ROWS + 1;
    a.num_dropped = &dropped;
    for (it = 0; it < ITERS; it++) {
        int bad = 0;
        aiter_mla_status st;
        memcpy(ptr, ptr0, sizeof ptr);
        fuzz_fill(r, idx, NIDX, 64, 1);
        if (it % 4) fuzz_fill(r, ptr, ROWS + 1, NIDX + 1, it % 4 == 1);
        a.clamp = (it / 4) % 2; /* the arrays as given, with and without clamp */
        if (fuzz_indptr_ok(ptr, ROWS) && ptr[ROWS] > NIDX) {
            fuzz_skipped++;
            continue;
        }
        fill_i32(ibuf, CAP, V4_SENTINEL);
        fill_i32(pbuf, ROWS + 1, V4_SENTINEL);
        dropped = -7;
        fuzz_arm();
        st = aiter_mla_v4_copy_ragged_ref(&a);
        if (!fuzz_indptr_ok(ptr, ROWS)) CHECK(st != AITER_MLA_OK, "v4_copy_ragged_ref, iteration %d: a decreasing indptr was taken", it);
        if (fuzz_answer(st, "v4_copy_ragged_ref", it)) {
            int64_t out = 0, cut = 0;
            ok_runs++;
            ok_unclamped += !a.clamp;
            bad += pbuf[0] != 0;
            for (row = 0; row < ROWS; row++) {
                const int32_t n = ptr[row + 1] - ptr[row], take = n < MAXE ? n : MAXE;
                bad += !a.clamp && n > MAXE; /* refused without clamp */
                for (i = 0; i < take; i++) bad += ibuf[out + i] != idx[ptr[row] + i];
                out += take;
                cut += n - take;
                bad += pbuf[row + 1] != out;
            }
            for (i = (int)out; i < CAP; i++) bad += ibuf[i] != V4_SENTINEL;
            bad += dropped != cut;
            CHECK(bad == 0, "v4_copy_ragged_ref, iteration %d: %d entries differ from the copy", it, bad);
        } else {
            err_runs++;
            for (i = 0; i < CAP; i++) bad += ibuf[i] != V4_SENTINEL;
            for (i = 0; i <= ROWS; i++) bad += pbuf[i] != V4_SENTINEL;
            CHECK(bad == 0 && dropped == -7, "v4_copy_ragged_ref, iteration %d: written before the refusal", it);
        }
    }
    CHECK(ok_runs > 0 && err_runs > 0 && ok_unclamped > 0, "v4_copy_ragged fuzz: %d runs (%d without clamp), %d refusals", ok_runs,
          ok_unclamped, err_runs);
    memcpy(ptr, ptr0, sizeof ptr);
    a.clamp = 1;
    e = a, e.num_rows = -1;
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_rows");
    e = a, e.max_entries_per_row = 0;
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "max_entries_per_row");
    e = a, e.clamp = 2;
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "clamp");
    e = a, e.indptr_buffer_capacity = ROWS;
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "indptr_buffer_capacity");
    e = a, e.indices_buffer_capacity = CAP - 1;
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "indices_buffer_capacity");
    ptr[3] = 8; /* row 2 holds 5 entries, one more than a row of the buffers */
    e = a, e.clamp = 0;
    CHECK_STATUS(aiter_mla_v4_copy_ragged_ref(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "max_entries_per_row");
    free(idx);
}

/* V4 attention (SPEC 7): key entries and dense lengths are data (an entry outside the cache is
 * skipped); a ragged indptr is checked, and over NIDX entries a monotone one asking for more
 * is skipped. keys: MODEL1 pages; extra_keys: bf16 rows. */
static void fuzz_v4_attention(test_rng *r) {
    enum { NB = 4, BS = 4, ROWS = 12, T = 3, H = 2, NIDX = 12, XSTRIDE = 4, ITERS = 30 };
    const int64_t pb = naive_v4_page_bytes(BS);
    const int32_t ptr0[T + 1] = {0, 5, 5, 12};
    unsigned char *pages = (unsigned char *)test_malloc((size_t)(NB * pb));
    uint16_t *kv = (uint16_t *)alloc_elems(NB * BS * 512, AITER_MLA_BF16), *rows = (uint16_t *)alloc_elems(ROWS * 512, AITER_MLA_BF16),
             *q = (uint16_t *)alloc_elems(T * H * 512, AITER_MLA_BF16);
    int32_t *idx = alloc_i32(NIDX), ptr[T + 1], xidx[T * XSTRIDE], xlen[T];
    int64_t slots[NB * BS];
    float o[T * H * 512], lse[T * H], sink[H];
    aiter_mla_v4_attention_args a, e;
    int it, t, i, h, ok_runs = 0, err_runs = 0;
    for (i = 0; i < NB * BS; i++) slots[i] = i;
    v4_random_rows(r, kv, NB * BS, AITER_MLA_BF16);
    v4_write(pages, NB, BS, kv, slots, NB * BS, AITER_MLA_FP8_E4M3FN);
    fill_random(rows, ROWS * 512, AITER_MLA_BF16, r, -1.0f, 1.0f, 0.0f);
    fill_random(q, T * H * 512, AITER_MLA_BF16, r, -1.0f, 1.0f, 0.0f);
    memset(&a, 0, sizeof a);
    a.q = q;
    a.o = o;
    a.lse = lse;
    a.num_tokens = T;
    a.num_heads = H;
    a.o_dtype = AITER_MLA_F32;
    a.keys.cache = pages;
    a.keys.num_blocks = NB;
    a.keys.block_size = BS;
    a.keys.indices = idx;
    a.keys.indptr = ptr;
    a.extra_keys.cache = rows;
    a.extra_keys.num_blocks = ROWS;
    a.extra_keys.rows = 1;
    a.extra_keys.indices_stride = XSTRIDE;
    for (it = 0; it < ITERS; it++) {
        const int mode = it % 3; /* 0, 1: entries and lengths; 2: indptr */
        aiter_mla_status st;
        memcpy(ptr, ptr0, sizeof ptr);
        fuzz_fill(r, idx, NIDX, NB * BS, 1);
        fuzz_fill(r, xidx, T * XSTRIDE, ROWS, 1);
        fuzz_fill(r, xlen, T, XSTRIDE + 1, 1);
        if (mode == 2) fuzz_fill(r, ptr, T + 1, NIDX + 1, it % 2);
        a.extra_keys.indices = it % 4 ? xidx : NULL;
        a.extra_keys.lens = it % 2 ? xlen : NULL;
        sink[0] = it % 5 == 4 ? INFINITY : -INFINITY; /* +inf: o = 0, lse as without it */
        sink[1] = 0.5f;
        a.attn_sink = it % 3 == 1 ? NULL : sink;
        if (fuzz_indptr_ok(ptr, T) && ptr[T] > NIDX) {
            fuzz_skipped++;
            continue;
        }
        poison_f32(o, T * H * 512);
        poison_f32(lse, T * H);
        fuzz_arm();
        st = aiter_mla_v4_attention_ref(&a);
        if (mode < 2) CHECK(st == AITER_MLA_OK, "v4_attention_ref, iteration %d: key entries are data, got %s", it, aiter_mla_last_error());
        if (!fuzz_indptr_ok(ptr, T)) CHECK(st != AITER_MLA_OK, "v4_attention_ref, iteration %d: a decreasing indptr was taken", it);
        if (fuzz_answer(st, "v4_attention_ref", it)) {
            int64_t bad = fuzz_attn_bad(o, lse, 0, T, H, 512, H, 1, INFINITY);
            ok_runs++;
            for (t = 0; t < T; t++) { /* lse is +inf exactly when no entry of either list is in its cache */
                int seen = 0;
                const int n = !a.extra_keys.lens ? XSTRIDE : xlen[t] < 0 ? 0 : xlen[t] < XSTRIDE ? xlen[t] : XSTRIDE;
                for (i = ptr[t]; i < ptr[t + 1]; i++) seen |= idx[i] >= 0 && idx[i] < NB * BS;
                for (i = 0; a.extra_keys.indices && i < n; i++) seen |= xidx[t * XSTRIDE + i] >= 0 && xidx[t * XSTRIDE + i] < ROWS;
                for (h = 0; h < H; h++) bad += seen != isfinite(lse[t * H + h]);
            }
            CHECK(bad == 0, "v4_attention_ref, iteration %d: %lld values break SPEC 7's conventions", it, (long long)bad);
        } else {
            err_runs++;
            CHECK(fuzz_all_poison_f32(o, T * H * 512), "v4_attention_ref, iteration %d: o written before the refusal", it);
        }
    }
    CHECK(ok_runs > 0 && err_runs > 0, "v4_attention fuzz: %d runs, %d refusals", ok_runs, err_runs);
    memcpy(ptr, ptr0, sizeof ptr);
    a.extra_keys.indices = xidx;
    poison_f32(o, T * H * 512);
    e = a, e.num_heads = 0;
    CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    e = a, e.num_heads = 129;
    CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_heads");
    e = a, e.num_tokens = -1;
    CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_tokens");
    e = a, e.num_splits = 65;
    CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_splits");
    e = a, e.num_cu = -1;
    CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "num_cu");
    e = a, e.keys.rows = 2;
    CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "keys.rows");
    e = a, e.keys.num_blocks = 0;
    CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "keys.num_blocks");
    e = a, e.keys.block_size = 1025;
    CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "keys.block_size");
    e = a, e.extra_keys.num_blocks = -1;
    CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "extra_keys.num_blocks");
    e = a, e.extra_keys.indices_stride = 0;
    CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "extra_keys.indices_stride");
    sink[0] = NAN;
    e = a, e.attn_sink = sink;
    CHECK_STATUS(aiter_mla_v4_attention_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "attn_sink");
    CHECK(fuzz_all_poison_f32(o, T * H * 512), "v4_attention: o written by a refused call");
    free(pages);
    free(kv);
    free(rows);
    free(q);
    free(idx);
}

/* V4 chunked prefill (SPEC 7): both block tables and the top-k entries are data; the request
 * ranges and lengths are checked. q and o hold max_num_batched_tokens rows, so every range the
 * checks pass fits. Every token lists at least its own raw token (a zero row when its page is
 * absent), so its lse is finite. */
static void fuzz_v4_prefill(test_rng *r) {
    enum { B = 3, H = 2, W = 8, RATIO = 4, MAXLEN = 64, MBT = 16, TOPK = 3, TSTRIDE = 4, SBS = 8, SSTRIDE = 8, SNB = 12,
           CBS = 4, CSTRIDE = 4, CNB = 6, ITERS = 24 };
    const int64_t spb = naive_v4_page_bytes(SBS), cpb = naive_v4_page_bytes(CBS);
    const int32_t qsl0[B + 1] = {0, 2, 3, 7}, seq0[B] = {10, 1, 40};
    unsigned char *swa = (unsigned char *)test_malloc((size_t)(SNB * spb)), *comp = (unsigned char *)test_malloc((size_t)(CNB * cpb));
    uint16_t *kv = (uint16_t *)alloc_elems(SNB * SBS * 512, AITER_MLA_BF16), *q = (uint16_t *)alloc_elems(MBT * H * 512, AITER_MLA_BF16);
    int32_t qsl[B + 1], seq[B], sbt[B * SSTRIDE], cbt[B * CSTRIDE], *topk = alloc_i32(MBT * TSTRIDE);
    int64_t slots[SNB * SBS];
    float *o = alloc_f32(MBT * H * 512), lse[MBT * H];
    size_t bytes = 0;
    void *ws;
    aiter_mla_v4_prefill_args p, e;
    int it, i, ok_runs = 0, err_runs = 0;
    for (i = 0; i < SNB * SBS; i++) slots[i] = i;
    v4_random_rows(r, kv, SNB * SBS, AITER_MLA_BF16);
    v4_write(swa, SNB, SBS, kv, slots, SNB * SBS, AITER_MLA_FP8_E4M3FN);
    v4_random_rows(r, kv, CNB * CBS, AITER_MLA_BF16);
    v4_write(comp, CNB, CBS, kv, slots, CNB * CBS, AITER_MLA_FP8_E4M3FN);
    fill_random(q, MBT * H * 512, AITER_MLA_BF16, r, -1.0f, 1.0f, 0.0f);
    memset(&p, 0, sizeof p);
    p.attn.q = q;
    p.attn.o = o;
    p.attn.lse = lse;
    p.attn.num_heads = H;
    p.attn.o_dtype = AITER_MLA_F32;
    p.batch = B;
    p.query_start_loc = qsl;
    p.seq_lens = seq;
    p.compress_ratio = RATIO;
    p.window = W;
    p.max_model_len = MAXLEN;
    p.max_num_batched_tokens = MBT;
    p.chunk_size = 2;
    p.topk_indices = topk;
    p.topk_stride = TSTRIDE;
    p.topk = TOPK;
    p.swa_cache = swa;
    p.swa_num_blocks = SNB;
    p.swa_block_size = SBS;
    p.swa_block_table = sbt;
    p.swa_block_table_stride = SSTRIDE;
    p.compressed_cache = comp;
    p.compressed_num_blocks = CNB;
    p.compressed_block_size = CBS;
    p.compressed_block_table = cbt;
    p.compressed_block_table_stride = CSTRIDE;
    CHECK_STATUS(aiter_mla_v4_prefill_workspace_size(&p, &bytes), AITER_MLA_OK, "");
    ws = test_malloc(bytes);
    p.workspace = ws;
    p.workspace_bytes = bytes;
    for (it = 0; it < ITERS; it++) {
        const int mode = it % 3; /* 0: block tables and top-k entries; 1: query_start_loc; 2: seq_lens */
        aiter_mla_status st;
        int64_t tokens;
        memcpy(qsl, qsl0, sizeof qsl);
        memcpy(seq, seq0, sizeof seq);
        fuzz_fill(r, sbt, B * SSTRIDE, SNB, 1);
        fuzz_fill(r, cbt, B * CSTRIDE, CNB, 1);
        fuzz_fill(r, topk, MBT * TSTRIDE, MAXLEN / RATIO, 1);
        if (mode == 1) fuzz_fill(r, qsl, B + 1, MBT + 1, it % 2);
        if (mode == 2) fuzz_fill(r, seq, B, MAXLEN + 1, it % 2);
        memset(ws, 0xff, bytes);
        poison_f32(o, MBT * H * 512);
        poison_f32(lse, MBT * H);
        fuzz_arm();
        st = aiter_mla_v4_prefill_ref(&p);
        if (mode == 0) CHECK(st == AITER_MLA_OK, "v4_prefill_ref, iteration %d: page ids and top-k entries are data, got %s", it,
                             aiter_mla_last_error());
        if (fuzz_answer(st, "v4_prefill_ref", it)) {
            ok_runs++;
            tokens = (int64_t)qsl[B] - qsl[0];
            CHECK(fuzz_attn_bad(o, lse, 0, tokens, H, 512, H, 1, NAN) == 0,
                  "v4_prefill_ref, iteration %d: o or lse not finite", it);
        } else {
            err_runs++;
            CHECK(fuzz_all_poison_f32(o, MBT * H * 512), "v4_prefill_ref, iteration %d: o written before the refusal", it);
        }
    }
    CHECK(ok_runs > 0 && err_runs > 0, "v4_prefill fuzz: %d runs, %d refusals", ok_runs, err_runs);
    memcpy(qsl, qsl0, sizeof qsl);
    memcpy(seq, seq0, sizeof seq);
    poison_f32(o, MBT * H * 512);
    e = p, e.batch = 0;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "batch");
    e = p, e.chunk_size = -1;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "chunk_size");
    e = p, e.compress_ratio = -1;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "compress_ratio");
    e = p, e.window = 65537;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "window");
    e = p, e.max_model_len = 0;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "max_model_len");
    e = p, e.max_model_len = 39; /* request 2 has 40 keys */
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "max_model_len");
    e = p, e.max_num_batched_tokens = 0;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "max_num_batched_tokens");
    e = p, e.max_num_batched_tokens = 6; /* the batch has 7 tokens */
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "max_num_batched_tokens");
    e = p, e.topk = 0;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "topk");
    e = p, e.swa_num_blocks = 0;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "swa_num_blocks");
    e = p, e.swa_block_size = 1025;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "swa_block_size");
    e = p, e.swa_block_table_stride = 0;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "swa_block_table_stride");
    e = p, e.compressed_num_blocks = 0;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "compressed_num_blocks");
    e = p, e.compressed_block_table_stride = -1;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "compressed_block_table_stride");
    e = p, e.attn.num_heads = 0;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_INVALID_ARGUMENT, "attn.num_heads");
    e = p, e.workspace_bytes = bytes - 1;
    CHECK_STATUS(aiter_mla_v4_prefill_ref(&e), AITER_MLA_ERR_BUFFER_TOO_SMALL, "workspace_bytes");
    CHECK(fuzz_all_poison_f32(o, MBT * H * 512), "v4_prefill: o written by a refused call");
    free(swa);
    free(comp);
    free(kv);
    free(q);
    free(topk);
    free(o);
    free(ws);
}

/* Every CPU operation that follows an index array, its arrays overwritten with garbage a few
 * dozen times each (one seed: the run is deterministic), then its checked counts out of range. */
/* Rows of n values: all NaN (expect_nan) or all finite. */
static int rows_nan(const float *x, int64_t n, int expect_nan) {
    int64_t i;
    for (i = 0; i < n; i++)
        if ((x[i] != x[i]) != expect_nan || (!expect_nan && isinf(x[i]))) return 0;
    return 1;
}

/* A NaN score (a NaN value in a key the row sees) makes the row's o and lse NaN in every
 * reference, scheduled ones and the reduce included; rows that do not see it stay finite; a
 * piece or merge side that is NaN is never taken for an empty one; a NaN sink is refused. */
static void test_nan_scores(void) {
    test_rng r = rng_seed(0x7a4e);
    enum { B = 2, H = 2, PS = 16 };
    /* decode: request 0 (100 keys) has a NaN at key 70, request 1 (60 keys) none */
    {
        int32_t qo[B + 1] = {0, 1, 2}, kvp[B + 1] = {0, 7, 11}, last[B] = {4, 12}, idx[11];
        uint16_t *q = (uint16_t *)test_malloc((size_t)B * H * 576 * 2), *kv = (uint16_t *)test_malloc((size_t)11 * PS * 576 * 2);
        float o[B * H * 512], lse[B * H], o2[B * H * 512], lse2[B * H];
        aiter_mla_decode_args a;
        aiter_mla_decode_plan_desc d;
        aiter_mla_decode_plan_info info;
        int32_t *plan;
        void *ws;
        int i;
        for (i = 0; i < 11; i++) idx[i] = 10 - i;
        fill_random(q, (int64_t)B * H * 576, AITER_MLA_BF16, &r, -1.0f, 1.0f, 1.0f);
        fill_random(kv, (int64_t)11 * PS * 576, AITER_MLA_BF16, &r, -1.0f, 1.0f, 1.0f);
        aiter_mla_store_f32(kv, ((int64_t)idx[70 / PS] * PS + 70 % PS) * 576 + 300, AITER_MLA_BF16, NAN);
        memset(&a, 0, sizeof a);
        a.q = q;
        a.kv_cache = kv;
        a.num_pages = 11;
        a.qo_indptr = qo;
        a.kv_indptr = kvp;
        a.kv_indices = idx;
        a.kv_last_page_lens = last;
        a.o = o;
        a.lse = lse;
        a.batch = B;
        a.num_heads = H;
        a.page_size = PS;
        a.o_dtype = AITER_MLA_F32;
        CHECK_STATUS(aiter_mla_decode_ref(&a), AITER_MLA_OK, "");
        CHECK(rows_nan(o, H * 512, 1) && rows_nan(lse, H, 1), "decode_ref: the NaN key's rows are not NaN (o %g, lse %g)", o[0], lse[0]);
        CHECK(rows_nan(o + H * 512, H * 512, 0) && rows_nan(lse + H, H, 0), "decode_ref: the other request's rows are not finite");
        memset(&d, 0, sizeof d);
        d.max_batch = B;
        d.num_heads = H;
        d.max_q_len = 1;
        d.num_cu = 5;
        d.page_size = PS;
        d.kv_granularity = 16;
        CHECK_STATUS(aiter_mla_decode_plan_get_info(&d, &info), AITER_MLA_OK, "");
        plan = alloc_i32(info.plan_ints);
        CHECK_STATUS(aiter_mla_decode_plan_build(&info, qo, kvp, last, B, plan), AITER_MLA_OK, "");
        CHECK(aiter_mla_decode_plan_view_of(&info, plan).num_partials >= 2, "decode plan: request 0 is not split");
        ws = test_malloc(info.workspace_bytes);
        a.o = o2;
        a.lse = lse2;
        a.plan = plan;
        a.plan_info = &info;
        a.workspace = ws;
        a.workspace_bytes = info.workspace_bytes;
        CHECK_STATUS(aiter_mla_decode_ref_scheduled(&a), AITER_MLA_OK, "");
        CHECK(rows_nan(o2, H * 512, 1) && rows_nan(lse2, H, 1), "decode_ref_scheduled: the NaN key's rows are not NaN (o %g, lse %g)",
              o2[0], lse2[0]);
        CHECK(rows_nan(o2 + H * 512, H * 512, 0) && rows_nan(lse2 + H, H, 0), "decode_ref_scheduled: the other rows are not finite");
        free(plan);
        free(ws);
        free(q);
        free(kv);
    }
    /* reduce: pieces (NaN, finite), (NaN, NaN) and (empty, empty) */
    {
        float po[6 * 4], pl[6] = {NAN, 0.5f, NAN, NAN, -INFINITY, -INFINITY}, o[3 * 4], lse[3];
        int32_t indptr[4] = {0, 2, 4, 6}, fmap[6] = {0, 1, 1, 2, 2, 3}, pmap[6] = {0, 1, 2, 3, 4, 5};
        aiter_mla_reduce_args a;
        int i;
        for (i = 0; i < 24; i++) po[i] = (float)i / 8.0f;
        memset(&a, 0, sizeof a);
        a.partial_o = po;
        a.partial_lse = pl;
        a.reduce_indptr = indptr;
        a.reduce_final_map = fmap;
        a.reduce_partial_map = pmap;
        a.num_tiles = 3;
        a.num_partial_rows = 6;
        a.num_heads = 1;
        a.dv = 4;
        a.o = o;
        a.lse = lse;
        a.o_dtype = AITER_MLA_F32;
        CHECK_STATUS(aiter_mla_reduce_ref(&a), AITER_MLA_OK, "");
        CHECK(rows_nan(o, 8, 1) && rows_nan(lse, 2, 1), "reduce_ref: a NaN piece's row is not NaN (lse %g, %g)", lse[0], lse[1]);
        CHECK(o[8] == 0.0f && o[11] == 0.0f && lse[2] == INFINITY, "reduce_ref: the empty row is not empty (lse %g)", lse[2]);
    }
    /* merge: a NaN side, a NaN side against an empty one, two empty sides */
    {
        float op[3] = {1.0f, 2.0f, 3.0f}, os[3] = {4.0f, 5.0f, 6.0f}, lp[3] = {NAN, NAN, INFINITY}, ls[3] = {0.0f, -INFINITY, INFINITY};
        float o[3], lse[3];
        aiter_mla_merge_args a;
        memset(&a, 0, sizeof a);
        a.o_prefix = op;
        a.lse_prefix = lp;
        a.o_suffix = os;
        a.lse_suffix = ls;
        a.o = o;
        a.lse = lse;
        a.num_tokens = 3;
        a.num_heads = 1;
        a.head_dim = 1;
        a.dtype = AITER_MLA_F32;
        CHECK_STATUS(aiter_mla_merge_attn_states_ref(&a), AITER_MLA_OK, "");
        CHECK(rows_nan(o, 2, 1) && rows_nan(lse, 2, 1), "merge_attn_states_ref: a NaN side is not NaN (o %g %g)", o[0], o[1]);
        CHECK(o[2] == 0.0f && lse[2] == -INFINITY, "merge_attn_states_ref: two empty sides give %g, lse %g", o[2], lse[2]);
    }
    /* sparse: token 0 sees slot 5 (a NaN value), token 1 does not; a NaN sink is refused; then infinities */
    {
        uint16_t q[2 * H * 576], cache[10 * 576];
        int32_t ids[2 * 2] = {2, 5, 1, 3};
        float o[2 * H * 512], lse[2 * H], ml[2 * H], sink[H] = {0.5f, NAN};
        aiter_mla_sparse_args a;
        int h, d, same = 1, finite = 1;
        fill_random(q, 2 * H * 576, AITER_MLA_BF16, &r, -1.0f, 1.0f, 1.0f);
        fill_random(cache, 10 * 576, AITER_MLA_BF16, &r, -1.0f, 1.0f, 1.0f);
        aiter_mla_store_f32(cache, 5 * 576 + 17, AITER_MLA_BF16, NAN);
        memset(&a, 0, sizeof a);
        a.q = q;
        a.kv_cache = cache;
        a.num_slots = 10;
        a.indices = ids;
        a.o = o;
        a.lse = lse;
        a.max_logits = ml;
        a.num_tokens = 2;
        a.num_heads = H;
        a.topk = 2;
        a.o_dtype = AITER_MLA_F32;
        CHECK_STATUS(aiter_mla_sparse_attention_ref(&a), AITER_MLA_OK, "");
        CHECK(rows_nan(o, H * 512, 1) && rows_nan(lse, H, 1), "sparse_attention_ref: the NaN slot's rows are not NaN (o %g, lse %g)", o[0],
              lse[0]);
        CHECK(rows_nan(o + H * 512, H * 512, 0) && rows_nan(lse + H, H, 0), "sparse_attention_ref: the other token's rows are not finite");
        a.attn_sink = sink;
        CHECK_STATUS(aiter_mla_sparse_attention_ref(&a), AITER_MLA_ERR_INVALID_ARGUMENT, "attn_sink[1] is NaN");
        /* infinities: a -inf score weighs 0, as a masked key does; a +inf score makes the row NaN.
         * Token 0 sees slot 5 first, then 2: slot 5's rope element 530 is -inf where q's is
         * positive, so o is slot 2's V row (the -inf first: the running max must not become
         * -inf - -inf). Token 1 (slots 1, 3): both 0.25 at element 17, where q is +inf. Then
         * token 0 with slot 5 alone: every score -inf, an empty row (o 0, lse +inf, max -inf). */
        a.attn_sink = NULL;
        ids[0] = 5;
        ids[1] = 2;
        aiter_mla_store_f32(cache, 5 * 576 + 17, AITER_MLA_BF16, 0.0f);
        for (h = 0; h < H; h++) {
            aiter_mla_store_f32(q, (int64_t)h * 576 + 530, AITER_MLA_BF16, 0.5f);
            aiter_mla_store_f32(q, (int64_t)(H + h) * 576 + 17, AITER_MLA_BF16, INFINITY);
        }
        aiter_mla_store_f32(cache, 5 * 576 + 530, AITER_MLA_BF16, -INFINITY);
        aiter_mla_store_f32(cache, 1 * 576 + 17, AITER_MLA_BF16, 0.25f);
        aiter_mla_store_f32(cache, 3 * 576 + 17, AITER_MLA_BF16, 0.25f);
        CHECK_STATUS(aiter_mla_sparse_attention_ref(&a), AITER_MLA_OK, "");
        for (h = 0; h < H; h++) {
            finite &= isfinite(lse[h]) != 0;
            for (d = 0; d < 512; d++) same &= o[h * 512 + d] == aiter_mla_load_f32(cache, 2 * 576 + d, AITER_MLA_BF16);
        }
        CHECK(same && finite, "sparse_attention_ref: a -inf score did not weigh 0 (o[0] %g against slot 2's %g, lse %g)", o[0],
              aiter_mla_load_f32(cache, 2 * 576, AITER_MLA_BF16), lse[0]);
        CHECK(rows_nan(o + H * 512, H * 512, 1) && rows_nan(lse + H, H, 1), "sparse_attention_ref: a +inf score's row is not NaN (o %g, lse %g)",
              o[H * 512], lse[H]);
        ids[1] = -1;
        CHECK_STATUS(aiter_mla_sparse_attention_ref(&a), AITER_MLA_OK, "");
        same = 1;
        for (h = 0; h < H; h++) {
            same &= lse[h] == INFINITY && ml[h] == -INFINITY;
            for (d = 0; d < 512; d++) same &= o[h * 512 + d] == 0.0f;
        }
        CHECK(same, "sparse_attention_ref: a row of -inf scores is not empty (o[0] %g, lse %g, max_logits %g)", o[0], lse[0], ml[0]);
        /* scores finite in double but past fp32's range count as the kernels' fp32 scores do:
         * token 0's slot 5 (-5e40) weighs 0, token 1's row (2.5e40 and up) is NaN, not lse +inf */
        ids[1] = 2;
        a.sm_scale = 1e29f;
        aiter_mla_store_f32(cache, 5 * 576 + 530, AITER_MLA_BF16, -1e12f);
        for (h = 0; h < H; h++) aiter_mla_store_f32(q, (int64_t)(H + h) * 576 + 17, AITER_MLA_BF16, 1e12f);
        CHECK_STATUS(aiter_mla_sparse_attention_ref(&a), AITER_MLA_OK, "");
        same = 1, finite = 1;
        for (h = 0; h < H; h++) {
            finite &= isfinite(lse[h]) != 0;
            for (d = 0; d < 512; d++) same &= o[h * 512 + d] == aiter_mla_load_f32(cache, 2 * 576 + d, AITER_MLA_BF16);
        }
        CHECK(same && finite, "sparse_attention_ref: a score below -FLT_MAX did not weigh 0 (o[0] %g, lse %g)", o[0], lse[0]);
        CHECK(rows_nan(o + H * 512, H * 512, 1) && rows_nan(lse + H, H, 1),
              "sparse_attention_ref: a score above FLT_MAX did not make the row NaN (o %g, lse %g)", o[H * 512], lse[H]);
    }
    /* prefill, causal, sq 2, sk 3: key 2 (NaN) is seen by row 1 only; scheduled on a plan too */
    {
        int32_t cq[2] = {0, 2}, ck[2] = {0, 3};
        uint16_t q[2 * 192], k[3 * 192], v[3 * 128];
        float o[2 * 128], lse[2];
        aiter_mla_prefill_args a;
        fill_random(q, 2 * 192, AITER_MLA_BF16, &r, -1.0f, 1.0f, 1.0f);
        fill_random(k, 3 * 192, AITER_MLA_BF16, &r, -1.0f, 1.0f, 1.0f);
        fill_random(v, 3 * 128, AITER_MLA_BF16, &r, -1.0f, 1.0f, 1.0f);
        aiter_mla_store_f32(k, 2 * 192 + 9, AITER_MLA_BF16, NAN);
        memset(&a, 0, sizeof a);
        a.q = q;
        a.k = k;
        a.v = v;
        a.cu_seqlens_q = cq;
        a.cu_seqlens_k = ck;
        a.o = o;
        a.lse = lse;
        a.batch = 1;
        a.num_heads = 1;
        a.causal = 1;
        a.o_dtype = AITER_MLA_F32;
        CHECK_STATUS(aiter_mla_prefill_ref(&a), AITER_MLA_OK, "");
        CHECK(rows_nan(o, 128, 0) && rows_nan(lse, 1, 0), "prefill_ref: row 0 (keys 0, 1) is not finite");
        CHECK(rows_nan(o + 128, 128, 1) && rows_nan(lse + 1, 1, 1), "prefill_ref: row 1 (keys 0..2, one NaN) is not NaN (o %g, lse %g)",
              o[128], lse[1]);
    }
}

static void test_fuzz_index_contents(void) {
    test_rng r = rng_seed(0xf022);
    fuzz_expand(&r);
    fuzz_decode(&r);
    fuzz_reduce(&r);
    fuzz_merge(&r);
    fuzz_cache_writes(&r);
    fuzz_gather_cache(&r);
    fuzz_sparse_index(&r);
    fuzz_sparse_attention(&r);
    fuzz_prefill(&r);
    fuzz_v4_gather(&r);
    fuzz_v4_combine(&r);
    fuzz_v4_copy_ragged(&r);
    fuzz_v4_attention(&r);
    fuzz_v4_prefill(&r);
    fuzz_v4_builders(&r);
    CHECK(fuzz_skipped * 4 < fuzz_calls, "fuzz: %d of %d calls skipped as asking for more than the trusted buffers", fuzz_skipped, fuzz_calls);
}

int main(int argc, char **argv) {
    int usage_ok = 1, i;
    for (i = 1; usage_ok && i < argc; i += 2) {
        char *end = NULL;
        if (i + 1 >= argc) usage_ok = 0;
        else if (!strcmp(argv[i], "--seed")) usage_ok = testing_set_seed_mix(argv[i + 1]); /* other draws for every test's cases */
        else if (!strcmp(argv[i], "--rounds")) { /* more random field sets a sweep tries (a longer search) */
            const long n = strtol(argv[i + 1], &end, 10);
            usage_ok = end != argv[i + 1] && !*end && n >= 1 && n <= 100000;
            if (usage_ok) sweep_rounds = (int)n;
        } else usage_ok = 0;
    }
    if (!usage_ok) {
        fprintf(stderr, "usage: test_host [--seed N] [--rounds N (1..100000, default 1)]\n");
        return 1;
    }
    if (testing_seed_mix) printf("test_host: seeds mixed with %#llx\n", (unsigned long long)testing_seed_mix);
    test_status_and_dtypes();
    test_fp8_decode();
    test_fp8_encode();
    test_bf16_f16();
    test_head_padding();
    test_expand_page_indices();
    test_metadata_build();
    test_plan_info();
    test_plan_random();
    test_plan_balance();
    test_plan_balance_ragged();
    test_plan_corruption();
    test_plan_validation();
    test_decode_ref();
    test_reduce_ref();
    test_overlapping_rows();
    test_merge_ref();
    test_kv_cache_write();
    test_decode_validation();
    test_plan_build_overlap();
    test_hardening();
    test_expand_one_edges();
    test_sparse_indices();
    test_quotient16();
    test_ds_mla_rows();
    test_sparse_attention_ref();
    test_gather_cache();
    test_prefill_ref();
    test_prefill_plan();
    test_prefill_plan_fit_lists();
    test_small_op_wrappers();
    test_attention_wrappers();
    test_null_and_zeroed_args();
    test_v4_cache_rows();
    test_v4_gather();
    test_v4_swa_indices();
    test_v4_global_topk();
    test_v4_c128_indices();
    test_v4_combine();
    test_v4_copy_ragged();
    test_v4_keys_of_bounds();
    test_v4_attention();
    test_v4_decode();
    test_v4_prefill();
    test_v4_rejects();
    test_host_arrays_aligned();
    test_nan_scores();
    test_fuzz_index_contents();
    return testing_summary();
}
