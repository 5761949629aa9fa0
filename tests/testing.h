/* testing.h - a tiny test harness for the aiter_mla host tests (C99, also compiles as C++).
 *
 * Include aiter_mla.h first (in the test's translation unit, with or without the
 * implementation), then this file. Everything here is static and single-translation-unit.
 *
 *   CHECK(cond, fmt, ...)                  counts a pass or prints file:line and the message
 *   CHECK_STATUS(expr, status, "field")    exact aiter_mla_status AND the field's name
 *                                          appears in aiter_mla_last_error() (as a whole
 *                                          identifier, so "q" is not found in "q_dtype")
 *   testing_summary()                      prints "N passed, N failed"; non-zero if failed
 *
 *   test_rng (splitmix64, explicit seed), uniform floats, int ranges, random fills of a
 *   buffer of any aiter_mla_dtype (through aiter_mla_store_f32), independent decoders of
 *   bf16 / f16 / fp8 (written from the formats' definitions, not with the library), and
 *   the SPEC 8 comparison helpers: rel_err, cosine, inf/NaN position check.
 */
#ifndef AITER_MLA_TESTING_H
#define AITER_MLA_TESTING_H

#ifndef AITER_MLA_H
#error "include aiter_mla.h before testing.h"
#endif

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

/* ---- counters and checks ------------------------------------------------------------- */
static int testing_passed = 0;
static int testing_failed = 0;
static int testing_printed = 0;
#define TESTING_MAX_PRINTED 300 /* stop printing (not counting) after this many failures */

static inline int testing_check(int ok, const char *file, int line, const char *expr, const char *fmt, ...) {
    if (ok) {
        testing_passed++;
        return 1;
    }
    testing_failed++;
    if (testing_printed < TESTING_MAX_PRINTED) {
        va_list ap;
        testing_printed++;
        fprintf(stderr, "%s:%d: FAIL (%s): ", file, line, expr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    } else if (testing_printed == TESTING_MAX_PRINTED) {
        testing_printed++;
        fprintf(stderr, "... further failures not printed\n");
    }
    return 0;
}

/* CHECK(cond, fmt, args...): fmt is required (C99 needs one argument for "..."). */
#define CHECK(cond, ...) testing_check((cond) ? 1 : 0, __FILE__, __LINE__, #cond, __VA_ARGS__)

static inline const char *testing_status_name(aiter_mla_status s) {
    switch (s) {
#define TESTING__NAME(name, text) \
    case AITER_MLA_##name: return "AITER_MLA_" #name;
        AITER_MLA_STATUS_LIST(TESTING__NAME)
#undef TESTING__NAME
    default: return "(unknown status)";
    }
}

static inline int testing_is_ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
/* 1 when msg contains field as a whole identifier ("q" does not match inside "q_dtype" or
 * "seq"; "page_indices" does not match inside "expand_page_indices"). An empty field
 * matches any message. */
static inline int testing_names_field(const char *msg, const char *field) {
    size_t n;
    const char *p;
    if (!msg || !field) return 0;
    n = strlen(field);
    if (n == 0) return 1;
    for (p = strstr(msg, field); p; p = strstr(p + 1, field)) {
        int before_ok = p == msg || !testing_is_ident_char(p[-1]);
        int after_ok = !testing_is_ident_char(p[n]);
        if (before_ok && after_ok) return 1;
    }
    return 0;
}

static inline int testing_check_status(aiter_mla_status got, aiter_mla_status want, const char *field,
                                       const char *expr, const char *file, int line) {
    const char *msg = aiter_mla_last_error();
    int ok_status = got == want;
    int ok_field = want == AITER_MLA_OK || testing_names_field(msg, field);
    return testing_check(ok_status && ok_field, file, line, expr,
                         "expected %s naming \"%s\", got %s, last_error = \"%s\"", testing_status_name(want),
                         field ? field : "", testing_status_name(got), msg ? msg : "(null)");
}

/* Calls expr once; the status must be exactly `expected` and (unless expected is OK) the
 * thread's last error must contain `field` as a whole identifier ("" accepts any text). */
#define CHECK_STATUS(expr, expected, field) \
    testing_check_status((expr), (expected), (field), #expr, __FILE__, __LINE__)

/* Prints exactly "N passed, N failed" on its own line; non-zero when anything failed. */
static inline int testing_summary(void) {
    printf("%d passed, %d failed\n", testing_passed, testing_failed);
    fflush(stdout);
    return testing_failed > 0 ? 1 : 0;
}

/* ---- deterministic RNG (splitmix64) ---------------------------------------------------- */
typedef struct test_rng {
    uint64_t s;
} test_rng;

/* Mixed into every seed (test_host and test_gpu --seed N: the same cases over other draws);
 * 0 unless set. */
static uint64_t testing_seed_mix;
/* --seed's value (a number in C's notations) into testing_seed_mix; 0 if s is not one. */
static inline int testing_set_seed_mix(const char *s) {
    char *end = NULL;
    testing_seed_mix = strtoull(s, &end, 0);
    return end != s && !*end;
}
static inline test_rng rng_seed(uint64_t seed) {
    test_rng r;
    r.s = seed ^ testing_seed_mix;
    return r;
}
static inline uint64_t rng_u64(test_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline uint32_t rng_u32(test_rng *r) { return (uint32_t)(rng_u64(r) >> 32); }
/* uniform in [0, 1) with 53 random bits */
static inline double rng_unit(test_rng *r) { return (double)(rng_u64(r) >> 11) * (1.0 / 9007199254740992.0); }
static inline double rng_uniform(test_rng *r, double lo, double hi) { return lo + (hi - lo) * rng_unit(r); }
static inline float rng_f32(test_rng *r, float lo, float hi) { return (float)rng_uniform(r, lo, hi); }
/* uniform integer in [lo, hi] (inclusive) */
static inline int rng_int(test_rng *r, int lo, int hi) {
    uint64_t span = (uint64_t)((int64_t)hi - (int64_t)lo + 1);
    return (int)((int64_t)lo + (int64_t)(rng_u64(r) % span));
}
/* A value in [lo, hi) times 2^e, e in [emin, emax]: the two draws in this order (as a call's
 * arguments their order would be the compiler's, and a seed's inputs with it). */
static inline float rng_ldexp(test_rng *r, double lo, double hi, int emin, int emax) {
    const double m = rng_uniform(r, lo, hi);
    return (float)ldexp(m, rng_int(r, emin, emax));
}
static inline int rng_pick(test_rng *r, const int *v, int n) { return v[rng_int(r, 0, n - 1)]; }
static inline void rng_shuffle_i32(test_rng *r, int32_t *v, int n) {
    int i;
    for (i = n - 1; i > 0; i--) {
        int j = rng_int(r, 0, i);
        int32_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

/* ---- independent decoders (from the format definitions) -------------------------------- */
static inline double ref_bf16_to_f64(uint16_t h) {
    int sign = h >> 15, e = (h >> 7) & 0xff, m = h & 0x7f;
    double v;
    if (e == 0xff) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -126 - 7);
    else v = ldexp(1.0 + m / 128.0, e - 127);
    return sign ? -v : v;
}
static inline double ref_f16_to_f64(uint16_t h) {
    int sign = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0x1f) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -24);
    else v = ldexp(1.0 + m / 1024.0, e - 15);
    return sign ? -v : v;
}
/* e4m3fn: bias 7, NaN = S.1111.111, has -0.  e4m3fnuz: bias 8, NaN = 0x80 only, no -0. */
static inline double ref_fp8_to_f64(uint8_t c, int fnuz) {
    int sign = c >> 7, e = (c >> 3) & 0xf, m = c & 7, bias = fnuz ? 8 : 7;
    double v;
    if (fnuz && c == 0x80) return NAN;
    if (!fnuz && (c & 0x7f) == 0x7f) return NAN;
    if (e == 0) v = ldexp((double)m / 8.0, 1 - bias);
    else v = ldexp(1.0 + m / 8.0, e - bias);
    return sign ? -v : v;
}
static inline int dtype_is_fp8(aiter_mla_dtype t) { return t == AITER_MLA_FP8_E4M3FN || t == AITER_MLA_FP8_E4M3FNUZ; }
static inline size_t test_dtype_bytes(aiter_mla_dtype t) {
    switch (t) {
    case AITER_MLA_BF16:
    case AITER_MLA_F16: return 2;
    case AITER_MLA_F32: return 4;
    case AITER_MLA_FP8_E4M3FN:
    case AITER_MLA_FP8_E4M3FNUZ: return 1;
    default: return 0;
    }
}
/* element i of a buffer of dtype t, decoded independently of the library */
static inline double ref_load(const void *p, int64_t i, aiter_mla_dtype t) {
    switch (t) {
    case AITER_MLA_BF16: return ref_bf16_to_f64(((const uint16_t *)p)[i]);
    case AITER_MLA_F16: return ref_f16_to_f64(((const uint16_t *)p)[i]);
    case AITER_MLA_F32: return (double)((const float *)p)[i];
    case AITER_MLA_FP8_E4M3FN: return ref_fp8_to_f64(((const uint8_t *)p)[i], 0);
    case AITER_MLA_FP8_E4M3FNUZ: return ref_fp8_to_f64(((const uint8_t *)p)[i], 1);
    default: return NAN;
    }
}

/* ---- poison (NaN) fills ----------------------------------------------------------------- */
static inline void poison_elem(void *p, int64_t i, aiter_mla_dtype t) {
    switch (t) {
    case AITER_MLA_BF16: ((uint16_t *)p)[i] = 0x7fc1u; break;
    case AITER_MLA_F16: ((uint16_t *)p)[i] = 0x7e01u; break;
    case AITER_MLA_F32: {
        uint32_t u = 0x7fc00001u;
        memcpy((float *)p + i, &u, 4);
        break;
    }
    case AITER_MLA_FP8_E4M3FN: ((uint8_t *)p)[i] = 0x7f; break;
    case AITER_MLA_FP8_E4M3FNUZ: ((uint8_t *)p)[i] = 0x80; break;
    default: break;
    }
}
static inline void poison_fill(void *p, int64_t n, aiter_mla_dtype t) {
    int64_t i;
    for (i = 0; i < n; i++) poison_elem(p, i, t);
}
/* 1 when element i still holds the exact poison pattern */
static inline int is_poison(const void *p, int64_t i, aiter_mla_dtype t) {
    switch (t) {
    case AITER_MLA_BF16: return ((const uint16_t *)p)[i] == 0x7fc1u;
    case AITER_MLA_F16: return ((const uint16_t *)p)[i] == 0x7e01u;
    case AITER_MLA_F32: {
        uint32_t u;
        memcpy(&u, (const float *)p + i, 4);
        return u == 0x7fc00001u;
    }
    case AITER_MLA_FP8_E4M3FN: return ((const uint8_t *)p)[i] == 0x7f;
    case AITER_MLA_FP8_E4M3FNUZ: return ((const uint8_t *)p)[i] == 0x80;
    default: return 0;
    }
}
static inline void poison_f32(float *p, int64_t n) { poison_fill(p, n, AITER_MLA_F32); }

/* ---- random fills ----------------------------------------------------------------------- */
/* Element i = store(x / scale), x uniform in [lo, hi); scale 0 means 1. */
static inline void fill_random(void *p, int64_t n, aiter_mla_dtype t, test_rng *r, float lo, float hi, float scale) {
    int64_t i;
    if (scale == 0.0f) scale = 1.0f;
    for (i = 0; i < n; i++) aiter_mla_store_f32(p, i, t, rng_f32(r, lo, hi) / scale);
}
/* Random values at element offsets base + k (k < n). */
static inline void fill_random_at(void *p, int64_t base, int64_t n, aiter_mla_dtype t, test_rng *r, float lo, float hi,
                                  float scale) {
    int64_t i;
    if (scale == 0.0f) scale = 1.0f;
    for (i = 0; i < n; i++) aiter_mla_store_f32(p, base + i, t, rng_f32(r, lo, hi) / scale);
}

/* ---- SPEC 8 comparison helpers ---------------------------------------------------------- */
#define TOL_BF16_REL 1e-2
#define TOL_BF16_COS 0.9999
#define TOL_FP8_REL 3e-2
#define TOL_FP8_COS 0.999
#define TOL_LSE_ABS 1e-3
/* fp8_ds_mla keys on the warpgroup (sm_90a) and AMD matrix-core kernels are dequantised to bf16
 * once (e4m3 times the fp32 group scale, rounded; FlashMLA's kernels round the scale to bf16 as
 * well; aiter_mla_sparse_attention_kernel says which kernel a case takes), which moves
 * a score by up to 2^-9 of sum |q k| x sm_scale: about 1e-3 on the tests' data. Three times the
 * bf16 bound, as for o (SPEC 8's fp8 tolerances). */
#define TOL_DS_MLA_LSE_ABS 3e-3
/* fp8 (e4m3fn) prefill on Hopper takes q K^T as e4m3 products on the warpgroup tensor cores,
 * whose sums keep about 14 significant bits (the DeepSeek-V3 report, 3.3.2): each 32-dim step
 * truncates its products against the largest magnitude in the sum, the same way every step, so
 * a score's error grows with the steps instead of averaging out. The tests bound such an lse row
 * by row (fp8_prefill_lse_tol in test_gpu.c): a step loses at most 2^-TOL_FP8_SUM_BITS of the
 * row's largest sum_d |q_d k_d| (which bounds every partial sum), a score at most dqk / 32 such
 * steps, and an lse, a smooth maximum of its row's scores, moves by at most its largest score
 * error; rows whose bound is below TOL_LSE_ABS keep TOL_LSE_ABS. On an H100 the largest error
 * over the e4m3 cases of test_gpu --seed 7 and of test_prefill at four other seeds was 0.47 of
 * its row's bound (5.03e-3 against 1.06e-2: H 16, 488 keys), every other case at most 0.25. A
 * constant bound (5e-3, set from --seed 1 .. 7) had failed on that row. */
#define TOL_FP8_SUM_BITS 13

/* ||got - ref|| / ||ref|| over the elements where ref is finite (absolute norm when ref is 0) */
static inline double rel_err(const float *got, const float *ref, int64_t n) {
    double num = 0.0, den = 0.0;
    int64_t i;
    for (i = 0; i < n; i++) {
        double d;
        if (!isfinite(ref[i])) continue;
        d = (double)got[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * (double)ref[i];
    }
    if (num != num) return INFINITY;
    if (den == 0.0) return sqrt(num);
    return sqrt(num / den);
}
/* cosine similarity over the elements where ref is finite (1 when both are all zero) */
static inline double cosine(const float *got, const float *ref, int64_t n) {
    double ab = 0.0, aa = 0.0, bb = 0.0;
    int64_t i;
    for (i = 0; i < n; i++) {
        if (!isfinite(ref[i])) continue;
        ab += (double)got[i] * ref[i];
        aa += (double)got[i] * got[i];
        bb += (double)ref[i] * ref[i];
    }
    if (ab != ab || aa != aa) return -2.0;
    if (aa == 0.0 && bb == 0.0) return 1.0;
    if (aa == 0.0 || bb == 0.0) return 0.0;
    return ab / sqrt(aa * bb);
}
/* Number of positions where got or ref is NaN, or where +-inf in ref and got differ (either
 * way). A NaN in ref counts too: rel_err, cosine and max_abs_err skip every element whose ref
 * is not finite, so an expected element left unwritten (poisoned) or NaN would otherwise pass
 * whatever got holds there; rows meant to be NaN are taken out by the caller first.
 * *first receives the first bad index (-1 when none). */
static inline int64_t inf_nan_mismatches(const float *got, const float *ref, int64_t n, int64_t *first) {
    int64_t i, bad = 0;
    if (first) *first = -1;
    for (i = 0; i < n; i++) {
        int b = 0;
        if (got[i] != got[i] || ref[i] != ref[i]) b = 1;
        else if (isinf(ref[i]) || isinf(got[i])) b = !(got[i] == ref[i]);
        if (b) {
            if (first && *first < 0) *first = i;
            bad++;
        }
    }
    return bad;
}
/* Largest |got - ref| over positions where ref is finite (inf when got is not finite there). */
static inline double max_abs_err(const float *got, const float *ref, int64_t n) {
    double m = 0.0;
    int64_t i;
    for (i = 0; i < n; i++) {
        double d;
        if (!isfinite(ref[i])) continue;
        if (!isfinite(got[i])) return INFINITY;
        d = fabs((double)got[i] - (double)ref[i]);
        if (d > m) m = d;
    }
    return m;
}

/* One call: inf/NaN positions, relative error and cosine of an output tensor. */
#define CHECK_CLOSE(what, got, ref, n, rel_tol, cos_tol)                                                         \
    do {                                                                                                         \
        int64_t cc_first_;                                                                                       \
        int64_t cc_bad_ = inf_nan_mismatches((got), (ref), (n), &cc_first_);                                     \
        double cc_rel_ = rel_err((got), (ref), (n)), cc_cos_ = cosine((got), (ref), (n));                        \
        CHECK(cc_bad_ == 0, "%s: %lld inf/NaN mismatches (first at %lld: got %g, ref %g)", (what),              \
              (long long)cc_bad_, (long long)cc_first_, cc_first_ >= 0 ? (double)(got)[cc_first_] : 0.0,         \
              cc_first_ >= 0 ? (double)(ref)[cc_first_] : 0.0);                                                  \
        CHECK(cc_rel_ <= (rel_tol), "%s: relative error %.3e > %.1e", (what), cc_rel_, (double)(rel_tol));       \
        CHECK(cc_cos_ >= (cos_tol), "%s: cosine %.7f < %.5f", (what), cc_cos_, (double)(cos_tol));               \
    } while (0)

/* lse: identical inf positions, no NaN, absolute error <= tol elsewhere */
#define CHECK_LSE(what, got, ref, n) CHECK_LSE_TOL(what, got, ref, n, TOL_LSE_ABS)
#define CHECK_LSE_TOL(what, got, ref, n, tol)                                                                  \
    do {                                                                                                       \
        double cl_err_ = max_abs_err((got), (ref), (n));                                                       \
        CHECK_LSE_INF(what, got, ref, n);                                                                      \
        CHECK(cl_err_ <= (tol), "%s: lse max abs error %.3e > %.1e", (what), cl_err_, (double)(tol));         \
    } while (0)
/* lse's inf positions identical, no NaN */
#define CHECK_LSE_INF(what, got, ref, n)                                                                       \
    do {                                                                                                       \
        int64_t cl_first_;                                                                                     \
        int64_t cl_bad_ = inf_nan_mismatches((got), (ref), (n), &cl_first_);                                   \
        CHECK(cl_bad_ == 0, "%s: %lld inf/NaN mismatches in lse (first at %lld: got %g, ref %g)", (what),     \
              (long long)cl_bad_, (long long)cl_first_, cl_first_ >= 0 ? (double)(got)[cl_first_] : 0.0,       \
              cl_first_ >= 0 ? (double)(ref)[cl_first_] : 0.0);                                               \
    } while (0)

/* lse with a bound per element (tols[i] for element i): identical inf positions, no NaN,
 * |got - ref| <= tols[i] elsewhere; the message names the row that exceeds its bound most. */
static inline double lse_excess(const float *got, const float *ref, const float *tols, int64_t n, int64_t *worst) {
    double m = 0.0;
    int64_t i;
    *worst = -1;
    for (i = 0; i < n; i++) {
        double d;
        if (!isfinite(ref[i])) continue;
        d = isfinite(got[i]) ? fabs((double)got[i] - (double)ref[i]) / tols[i] : INFINITY;
        if (d != d) d = INFINITY; /* a NaN or zero bound: never within it */
        if (*worst < 0 || d > m) {
            m = d;
            *worst = i;
        }
    }
    return m;
}
#define CHECK_LSE_TOLS(what, got, ref, n, tols)                                                                \
    do {                                                                                                       \
        int64_t cl_worst_;                                                                                     \
        double cl_x_ = lse_excess((got), (ref), (tols), (n), &cl_worst_);                                      \
        CHECK_LSE_INF(what, got, ref, n);                                                                      \
        CHECK(cl_x_ <= 1.0, "%s: lse error %.3e at %lld, %.2f x its bound %.3e", (what),                      \
              cl_worst_ >= 0 ? fabs((double)(got)[cl_worst_] - (double)(ref)[cl_worst_]) : 0.0,                \
              (long long)cl_worst_, cl_x_, cl_worst_ >= 0 ? (double)(tols)[cl_worst_] : 0.0);                 \
    } while (0)

/* ---- allocation -------------------------------------------------------------------------- */
/* For a test's own arrays that reach GPU wrappers, which refuse rows that are not 16-byte
 * aligned: x86-64's ABI aligns arrays of 16 bytes or more so; other ABIs, i386's among them, need not. */
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define TEST_ALIGN16 _Alignas(16)
#elif defined(__GNUC__)
#define TEST_ALIGN16 __attribute__((aligned(16)))
#else
#define TEST_ALIGN16
#endif
static inline void *test_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}
static inline void *test_calloc(size_t n) {
    void *p = test_malloc(n);
    memset(p, 0, n ? n : 1);
    return p;
}

#endif /* AITER_MLA_TESTING_H */
