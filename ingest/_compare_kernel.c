/*
 * _compare_kernel: the accumulations of ingest.compare_metrics for a pair of tensors in one pass over
 * both sides, instead of a dozen numpy reductions per block.
 *
 * ingest/compare_metrics.py is the specification (its module docstring) and keeps a pure-numpy path
 * that computes the same numbers; this file only makes them fast. Per element, with x and y the run and
 * baseline values in the result type rt (float32 for float16/bfloat16/float32 pairs, float64 for
 * float64 pairs; both conversions are exact):
 *
 *   - a NaN or ±inf on either side: NaN flags are set; if the two sides do not have the same class
 *     there (both NaN, or both ±inf whatever the signs) the pair is a mismatch, and the rest is only
 *     scanned for NaN; else both values are taken as 0 (msprobe's handle_inf_nan);
 *   - in float64: d = x - y; sums of d*d, x*y, x*x, y*y, |d|, |d|/|y| where |y| > eps64; max |d|;
 *     min and max of each side;
 *   - in rt: RE = |(x' - y') / y'| with x' = x + eps_rt, y' = y + eps_rt where y == 0; max RE and the
 *     counts of RE < 0.001 and RE < 0.005, the thresholds rounded to rt.
 *
 * The KL pass (kl_block, and pair/files after the first pass) takes each side's min and max from the
 * state: u = max((v - min) / (max - min), eps32) (eps32 when max == min), sums of u, of the baseline's
 * w, and of u * log(u / w).
 *
 * Summation order (it is not numpy's pairwise order nor BLAS's: results agree with the numpy path to
 * a few ulps, not bit for bit; tests/ingest/test_compare_kernel.py bounds the difference): a call
 * walks its elements in chunks of CHUNK from its first element; within a chunk element i goes to lane
 * i % LANES, each lane a plain float64 sum in index order; a chunk's lanes are added ((0 + 1) + (2 +
 * 3)) and the chunk sum goes into a Neumaier-compensated running sum (value, compensation) in the
 * state, as the numpy path adds its per-step sums.
 *
 * Built without -ffast-math and with -ffp-contract=off (setup.py), with float arithmetic evaluated in
 * float (FLT_EVAL_METHOD 0, checked below), so that every RE is the float32 (or float64) arithmetic
 * numpy performs, bit for bit: max_rel_err and the error ratios are exact.
 *
 * API (kinds index KINDS; buffers are native-endian, C-contiguous; bfloat16 as its 16-bit patterns):
 *   block(x, xkind, y, ykind, state)     first pass over one block, folded into state (STATE float64)
 *   kl_block(x, xkind, y, ykind, state)  KL pass over one block (after every first-pass block)
 *   pair(x, xkind, y, ykind, state)      both passes over a whole pair held in memory
 *   files(jobs, out)                      pair() on tensors read from files: jobs is a list of
 *       (run path bytes, offset, kind, baseline path bytes, offset, kind, elements); out is a writable
 *       buffer of len(jobs) * STATE float64, each row a fresh state with S_CODE 0 (read), 1 (the run
 *       could not be read) or 2 (the baseline could not be read). One pread per side, GIL released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_float16.h"

#if defined(__unix__) || defined(__APPLE__)
#define HAVE_FILES 1
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#else
#define HAVE_FILES 0
#endif

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8))
#define HAVE_AVX2_CLONE 1
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,f16c")))
#else
#define HAVE_AVX2_CLONE 0
#endif

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "the float32 relative errors need float arithmetic evaluated in float (FLT_EVAL_METHOD == 0)"
#endif

#if defined(__GNUC__)
#define INLINE static inline __attribute__((always_inline))
#define UNLIKELY(c) __builtin_expect(!!(c), 0)
#else
#define INLINE static inline
#define UNLIKELY(c) (c)
#endif

enum { K_FLOAT16, K_BFLOAT16, K_FLOAT32, K_FLOAT64, K_COUNT };
static const char *const kind_names[K_COUNT] = {"float16", "bfloat16", "float32", "float64"};
static const int kind_size[K_COUNT] = {2, 2, 4, 8};

/* The (run kind, baseline kind) pairs the kernel compares, listed once (an X-macro): F(P, run name,
   baseline name, run kind, baseline kind) for each, P passed on. Any other pair is one compare_metrics
   does not compare (a dtype mismatch): NULL in the tables below. */
#define KIND_PAIRS(F, P)                                                                                     \
    F(P, f16, f16, K_FLOAT16, K_FLOAT16)                                                                     \
    F(P, f16, bf16, K_FLOAT16, K_BFLOAT16)                                                                   \
    F(P, f16, f32, K_FLOAT16, K_FLOAT32)                                                                     \
    F(P, bf16, f16, K_BFLOAT16, K_FLOAT16)                                                                   \
    F(P, bf16, bf16, K_BFLOAT16, K_BFLOAT16)                                                                 \
    F(P, bf16, f32, K_BFLOAT16, K_FLOAT32)                                                                   \
    F(P, f32, f16, K_FLOAT32, K_FLOAT16)                                                                     \
    F(P, f32, bf16, K_FLOAT32, K_BFLOAT16)                                                                   \
    F(P, f32, f32, K_FLOAT32, K_FLOAT32)                                                                     \
    F(P, f64, f64, K_FLOAT64, K_FLOAT64)
/* [run kind][baseline kind] -> the function P_x_y of each pair (KIND_PAIRS(TABLE_ENTRY, P) in braces) */
#define TABLE_ENTRY(P, X, Y, XK, YK) [XK][YK] = P##_##X##_##Y,

/* State slots (float64); compare_metrics.py has the same list (_SLOTS) and checks it at import. */
enum {
    S_DD = 0, /* Σ d², then its compensation at S_DD + 1; likewise every sum below */
    S_XY = 2,
    S_XX = 4,
    S_YY = 6,
    S_AD = 8,
    S_ACC = 10,
    S_MAD = 12,
    S_MRE = 13,
    S_C1 = 14,
    S_C5 = 15,
    S_MNX = 16,
    S_MXX = 17,
    S_MNY = 18,
    S_MXY = 19,
    S_NANX = 20,
    S_NANY = 21,
    S_MISMATCH = 22,
    S_N = 23, /* elements seen by the first pass */
    S_P = 24,
    S_Q = 26,
    S_PL = 28,
    S_CODE = 30,
    STATE = 32
};

#define LANES 4
#define CHUNK 256
/* Below this many bytes the GIL stays held: releasing and retaking it costs more than it frees. */
#define NOGIL_BYTES (1 << 18)

static const double EPS64 = DBL_EPSILON;
static const double EPS32 = (double)FLT_EPSILON;

/* -- loading elements --------------------------------------------------------------------------- */

INLINE float
ldf(const unsigned char *p, Py_ssize_t i, const int kind)
{
    float f;
    if (kind == K_FLOAT32) {
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    if (kind == K_BFLOAT16) {
        uint32_t b = (uint32_t)h << 16;
        memcpy(&f, &b, 4);
        return f;
    }
    return dumpcat_f16_to_float(h);
}

INLINE double
ld64(const unsigned char *p, Py_ssize_t i)
{
    double v;
    memcpy(&v, p + 8 * i, 8);
    return v;
}

/* -- sums ---------------------------------------------------------------------------------------- */

INLINE void
nadd(double *st, int k, double v)
{
    double s = st[k], t = s + v;
    if (fabs(s) >= fabs(v))
        st[k + 1] += (s - t) + v;
    else
        st[k + 1] += (v - t) + s;
    st[k] = t;
}

INLINE double
lanes_sum(const double *l)
{
    return (l[0] + l[1]) + (l[2] + l[3]);
}

/* A non-finite value on either side: set the NaN flags; nonzero when the positions do not match. */
static int
nonfinite(double x, double y, double *st)
{
    int nx = isnan(x) != 0, ny = isnan(y) != 0;
    if (nx)
        st[S_NANX] = 1.0;
    if (ny)
        st[S_NANY] = 1.0;
    return nx != ny || (isinf(x) != 0) != (isinf(y) != 0);
}

INLINE double
ldd(const unsigned char *p, Py_ssize_t i, const int kind)
{
    return kind == K_FLOAT64 ? ld64(p, i) : (double)ldf(p, i, kind);
}

/* After a mismatch only the NaN flags are still to learn. */
INLINE void
nan_scan(const unsigned char *px, const unsigned char *py, Py_ssize_t i, Py_ssize_t n, double *st, const int xk,
         const int yk)
{
    for (; i < n && !(st[S_NANX] != 0.0 && st[S_NANY] != 0.0); i++) {
        if (isnan(ldd(px, i, xk)))
            st[S_NANX] = 1.0;
        if (isnan(ldd(py, i, yk)))
            st[S_NANY] = 1.0;
    }
}

/* Whether any of elements [i, end) is NaN or ±inf (all exponent bits set); branch-free, so that the
   compiler vectorises it: chunks without any (nearly all) then take the branch-free element loops. */
INLINE int
any_nonfinite(const unsigned char *p, Py_ssize_t i, Py_ssize_t end, const int kind)
{
    unsigned bad = 0;
    for (; i < end; i++) {
        if (kind == K_FLOAT64) {
            uint64_t b;
            memcpy(&b, p + 8 * i, 8);
            bad |= (b & 0x7ff0000000000000u) == 0x7ff0000000000000u;
        }
        else if (kind == K_FLOAT32) {
            uint32_t b;
            memcpy(&b, p + 4 * i, 4);
            bad |= (b & 0x7f800000u) == 0x7f800000u;
        }
        else {
            uint16_t b;
            memcpy(&b, p + 2 * i, 2);
            const uint16_t e = kind == K_BFLOAT16 ? 0x7f80u : 0x7c00u;
            bad |= (uint16_t)(b & e) == e;
        }
    }
    return bad != 0;
}

/*
 * Natural logarithm of a positive, finite, normal double, without branches (so that it vectorises; the
 * KL pass takes one per element and libm's is a call). The method is the classic one of fdlibm's log:
 * v = 2^k * m with m in [sqrt(2)/2, sqrt(2)), f = m - 1, s = f / (2 + f), log(1 + f) = 2s + 2s^3/3 + ...
 * = f - f^2/2 + s * (f^2/2 + R(s^2)) with R the minimax polynomial of degree 7 in s^2 below, and k*ln2
 * in two parts (hi exact in k*hi for |k| < 2^11). Error under 1 ulp; test_compare_kernel.py checks it
 * against libm's log over the whole range the KL pass uses (u / w in [2^-24, 2^24]).
 */
INLINE double
log_pos(double v)
{
    const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    const double c1 = 6.666666666666735130e-01, c2 = 3.999999999940941908e-01, c3 = 2.857142874366239149e-01,
                 c4 = 2.222219843214978396e-01, c5 = 1.818357216161805012e-01, c6 = 1.531383769920937332e-01,
                 c7 = 1.479819860511658591e-01;
    uint64_t b;
    memcpy(&b, &v, 8);
    /* shift the mantissa so that m lands in [sqrt(2)/2, sqrt(2)): add the bits that take 0x3fe6a09e...
       (sqrt(2)/2) to 0x3ff00000..., read the exponent, then subtract them back from the mantissa */
    const uint64_t off = 0x3ff0000000000000u - 0x3fe6a09e667f3bcdu;
    uint64_t t = b + off;
    /* k = exponent - 1023 as a double, exactly: 2^52 + e read from the bits, minus 2^52 + 1023 (there
       is no vector int64 -> double conversion before AVX-512) */
    uint64_t kb = 0x4330000000000000u | (t >> 52);
    double dk;
    memcpy(&dk, &kb, 8);
    dk -= 4503599627370496.0 + 1023.0;
    uint64_t mb = (t & 0x000fffffffffffffu) + 0x3fe6a09e667f3bcdu;
    double m;
    memcpy(&m, &mb, 8);
    double f = m - 1.0;
    double s = f / (2.0 + f);
    double z = s * s, w = z * z;
    double r1 = w * (c2 + w * (c4 + w * c6));
    double r2 = z * (c1 + w * (c3 + w * (c5 + w * c7)));
    double r = r1 + r2;
    double hf = 0.5 * f * f;
    return dk * ln2_hi - ((hf - (s * (hf + r) + dk * ln2_lo)) - f);
}

/* -- the first pass ------------------------------------------------------------------------------ */

typedef struct {
    double dd[LANES], xy[LANES], xx[LANES], yy[LANES], ad[LANES], acc[LANES];
    double mad[LANES], mre[LANES], mnx[LANES], mxx[LANES], mny[LANES], mxy[LANES];
    double c1[LANES], c5[LANES]; /* counts of at most CHUNK / LANES: exact */
} acc_t;

/* One element into lane l; nonzero on a non-finite mismatch. xk, yk and check are compile-time
   constants; check = 0 (a chunk known finite) leaves no branch, for vectorisation. */
INLINE int
elem1(const unsigned char *px, const unsigned char *py, Py_ssize_t i, int l, acc_t *a, double *st, const int xk,
      const int yk, const int check)
{
    const int rt64 = xk == K_FLOAT64;
    double x, y;
    float xf = 0.0f, yf = 0.0f;
    if (rt64) {
        x = ld64(px, i);
        y = ld64(py, i);
    }
    else {
        xf = ldf(px, i, xk);
        yf = ldf(py, i, yk);
        x = xf;
        y = yf;
    }
    if (check && !(isfinite(x) && isfinite(y))) {
        if (nonfinite(x, y, st))
            return 1;
        x = y = 0.0;
        xf = yf = 0.0f;
    }
    a->mnx[l] = x < a->mnx[l] ? x : a->mnx[l];
    a->mxx[l] = x > a->mxx[l] ? x : a->mxx[l];
    a->mny[l] = y < a->mny[l] ? y : a->mny[l];
    a->mxy[l] = y > a->mxy[l] ? y : a->mxy[l];
    double d = x - y, ad = fabs(d), ya = fabs(y);
    a->dd[l] += d * d;
    a->xy[l] += x * y;
    a->xx[l] += x * x;
    a->yy[l] += y * y;
    a->ad[l] += ad;
    a->mad[l] = ad > a->mad[l] ? ad : a->mad[l];
    double q = ad / ya;
    a->acc[l] += ya > EPS64 ? q : 0.0;
    double re, lt1, lt5;
    if (rt64) {
        double xe = y == 0.0 ? x + EPS64 : x, ye = y == 0.0 ? y + EPS64 : y;
        re = fabs((xe - ye) / ye);
        lt1 = re < 0.001 ? 1.0 : 0.0;
        lt5 = re < 0.005 ? 1.0 : 0.0;
    }
    else {
        float xe = yf == 0.0f ? xf + FLT_EPSILON : xf, ye = yf == 0.0f ? yf + FLT_EPSILON : yf;
        float t = fabsf((xe - ye) / ye);
        re = t;
        lt1 = t < 0.001f ? 1.0 : 0.0;
        lt5 = t < 0.005f ? 1.0 : 0.0;
    }
    a->mre[l] = re > a->mre[l] ? re : a->mre[l];
    a->c1[l] += lt1;
    a->c5[l] += lt5;
    return 0;
}

/* Elements [c0, c1) into the lanes (element i to lane (i - c0) % LANES); nonzero on a mismatch. */
INLINE int
chunk1(const unsigned char *px, const unsigned char *py, Py_ssize_t c0, Py_ssize_t c1, acc_t *a, double *st,
       const int xk, const int yk, const int check)
{
    Py_ssize_t i = c0;
    for (; i + LANES <= c1; i += LANES) {
        int bad = 0;
        for (int l = 0; l < LANES; l++)
            bad |= elem1(px, py, i + l, l, a, st, xk, yk, check);
        if (check && bad)
            return 1;
    }
    for (int l = 0; i < c1; i++, l++)
        if (elem1(px, py, i, l, a, st, xk, yk, check) && check)
            return 1;
    return 0;
}

/* -- the KL pass --------------------------------------------------------------------------------- */

INLINE double
unit(double v, double mn, double r)
{
    double u = (v - mn) / r; /* computed either way: no branch */
    u = r > 0.0 ? u : EPS32;
    return u < EPS32 ? EPS32 : u;
}

INLINE void
elem2(const unsigned char *px, const unsigned char *py, Py_ssize_t i, int l, double *sp, double *sq, double *spl,
      const double *nm, const int xk, const int yk, const int check)
{
    double x = ldd(px, i, xk), y = ldd(py, i, yk);
    if (check && !(isfinite(x) && isfinite(y)))
        x = y = 0.0; /* the first pass found the same positions on both sides */
    double u = unit(x, nm[0], nm[1]), w = unit(y, nm[2], nm[3]);
    sp[l] += u;
    sq[l] += w;
    spl[l] += u * log_pos(u / w); /* u, w in [eps32, 1]: u / w is positive and normal */
}

INLINE void
chunk2(const unsigned char *px, const unsigned char *py, Py_ssize_t c0, Py_ssize_t c1, double *sp, double *sq,
       double *spl, const double *nm, const int xk, const int yk, const int check)
{
    Py_ssize_t i = c0;
    for (; i + LANES <= c1; i += LANES)
        for (int l = 0; l < LANES; l++)
            elem2(px, py, i + l, l, sp, sq, spl, nm, xk, yk, check);
    for (int l = 0; i < c1; i++, l++)
        elem2(px, py, i, l, sp, sq, spl, nm, xk, yk, check);
}

#if HAVE_AVX2_CLONE
/* chunk2 of a finite chunk, 4 lanes in one vector: the same operations in the same order per lane as
   elem2 and log_pos, so the same bits. */
AVX2 static inline __m256d
ld4(const unsigned char *p, Py_ssize_t i, const int kind)
{
    if (kind == K_FLOAT64)
        return _mm256_loadu_pd((const double *)(const void *)(p + 8 * i));
    if (kind == K_FLOAT32)
        return _mm256_cvtps_pd(_mm_loadu_ps((const float *)(const void *)(p + 4 * i)));
    __m128i h = _mm_loadl_epi64((const __m128i *)(const void *)(p + 2 * i));
    if (kind == K_FLOAT16)
        return _mm256_cvtps_pd(_mm_cvtph_ps(h));
    return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16)));
}

AVX2 static inline __m256d
log4(__m256d v)
{
    const __m256d ln2_hi = _mm256_set1_pd(6.93147180369123816490e-01);
    const __m256d ln2_lo = _mm256_set1_pd(1.90821492927058770002e-10);
    const __m256d c1 = _mm256_set1_pd(6.666666666666735130e-01), c2 = _mm256_set1_pd(3.999999999940941908e-01),
                  c3 = _mm256_set1_pd(2.857142874366239149e-01), c4 = _mm256_set1_pd(2.222219843214978396e-01),
                  c5 = _mm256_set1_pd(1.818357216161805012e-01), c6 = _mm256_set1_pd(1.531383769920937332e-01),
                  c7 = _mm256_set1_pd(1.479819860511658591e-01);
    const __m256d one = _mm256_set1_pd(1.0), two = _mm256_set1_pd(2.0), half = _mm256_set1_pd(0.5);
    const __m256i sqrt_half = _mm256_set1_epi64x(0x3fe6a09e667f3bcdLL);
    __m256i t = _mm256_add_epi64(_mm256_castpd_si256(v), _mm256_set1_epi64x(0x3ff0000000000000LL - 0x3fe6a09e667f3bcdLL));
    __m256d dk = _mm256_sub_pd(
        _mm256_castsi256_pd(_mm256_or_si256(_mm256_set1_epi64x(0x4330000000000000LL), _mm256_srli_epi64(t, 52))),
        _mm256_set1_pd(4503599627370496.0 + 1023.0));
    __m256i mb = _mm256_add_epi64(_mm256_and_si256(t, _mm256_set1_epi64x(0x000fffffffffffffLL)), sqrt_half);
    __m256d f = _mm256_sub_pd(_mm256_castsi256_pd(mb), one);
    __m256d s = _mm256_div_pd(f, _mm256_add_pd(two, f));
    __m256d z = _mm256_mul_pd(s, s), w = _mm256_mul_pd(z, z);
    __m256d r1 = _mm256_mul_pd(w, _mm256_add_pd(c2, _mm256_mul_pd(w, _mm256_add_pd(c4, _mm256_mul_pd(w, c6)))));
    __m256d r2 = _mm256_mul_pd(
        z, _mm256_add_pd(c1, _mm256_mul_pd(w, _mm256_add_pd(c3, _mm256_mul_pd(w, _mm256_add_pd(c5, _mm256_mul_pd(w, c7)))))));
    __m256d r = _mm256_add_pd(r1, r2);
    __m256d hf = _mm256_mul_pd(_mm256_mul_pd(half, f), f);
    __m256d inner = _mm256_sub_pd(
        _mm256_sub_pd(hf, _mm256_add_pd(_mm256_mul_pd(s, _mm256_add_pd(hf, r)), _mm256_mul_pd(dk, ln2_lo))), f);
    return _mm256_sub_pd(_mm256_mul_pd(dk, ln2_hi), inner);
}

AVX2 static inline __m256d
unit4(__m256d v, __m256d mn, __m256d r, __m256d rpos)
{
    const __m256d eps = _mm256_set1_pd(EPS32);
    __m256d u = _mm256_div_pd(_mm256_sub_pd(v, mn), r);
    u = _mm256_blendv_pd(eps, u, rpos);
    return _mm256_max_pd(u, eps);
}

AVX2 static Py_ssize_t
chunk2_avx2(const unsigned char *px, const unsigned char *py, Py_ssize_t c0, Py_ssize_t c1, double *sp,
            double *sq, double *spl, const double *nm, const int xk, const int yk)
{
    const __m256d mnx = _mm256_set1_pd(nm[0]), rx = _mm256_set1_pd(nm[1]);
    const __m256d mny = _mm256_set1_pd(nm[2]), ry = _mm256_set1_pd(nm[3]);
    const __m256d zero = _mm256_setzero_pd();
    const __m256d rxpos = _mm256_cmp_pd(rx, zero, _CMP_GT_OQ), rypos = _mm256_cmp_pd(ry, zero, _CMP_GT_OQ);
    __m256d vp = _mm256_loadu_pd(sp), vq = _mm256_loadu_pd(sq), vl = _mm256_loadu_pd(spl);
    Py_ssize_t i = c0;
    for (; i + LANES <= c1; i += LANES) {
        __m256d u = unit4(ld4(px, i, xk), mnx, rx, rxpos), w = unit4(ld4(py, i, yk), mny, ry, rypos);
        vp = _mm256_add_pd(vp, u);
        vq = _mm256_add_pd(vq, w);
        vl = _mm256_add_pd(vl, _mm256_mul_pd(u, log4(_mm256_div_pd(u, w))));
    }
    _mm256_storeu_pd(sp, vp);
    _mm256_storeu_pd(sq, vq);
    _mm256_storeu_pd(spl, vl);
    return i;
}

/* the AVX2 chunk2 of each kind pair (called, not inlined, from the generic pass2) */
typedef Py_ssize_t (*chunk2_fn)(const unsigned char *, const unsigned char *, Py_ssize_t, Py_ssize_t, double *,
                                double *, double *, const double *);
#define CHUNK2(P, X, Y, XK, YK)                                                                               \
    AVX2 static Py_ssize_t P##_##X##_##Y(const unsigned char *px, const unsigned char *py, Py_ssize_t c0,    \
                                         Py_ssize_t c1, double *sp, double *sq, double *spl, const double *nm) \
    {                                                                                                        \
        return chunk2_avx2(px, py, c0, c1, sp, sq, spl, nm, XK, YK);                                         \
    }
KIND_PAIRS(CHUNK2, c2)
static const chunk2_fn chunk2_avx2_fns[K_COUNT][K_COUNT] = {KIND_PAIRS(TABLE_ENTRY, c2)};
#endif

#if HAVE_AVX2_CLONE
/* chunk1 of a finite chunk, 4 lanes in one vector: elem1's operations in the same order per lane (min
   and max as vminpd / vmaxpd, which are a < b ? a : b and a > b ? a : b; the relative error in float32
   for float32-or-narrower pairs, in float64 for float64 pairs), so the same bits. Three rewrites with
   the same results and fewer instructions: eps is added where y == 0 as x + (eps & mask), which adds
   +0 elsewhere (x + 0 is x, except -0 -> +0, and then y != 0 so x' - y' = -y either way); the masked
   acc term as q & mask (+0 where elem1 adds 0.0); the counts of RE under the thresholds as integer
   lanes (subtracting the all-ones compare masks) and the max RE in the float32 lanes, both turned into
   float64 once at the end (counts of at most CHUNK are exact, and max commutes with the exact widening
   of non-negative, non-NaN values). */
AVX2 static Py_ssize_t
chunk1_avx2(const unsigned char *px, const unsigned char *py, Py_ssize_t c0, Py_ssize_t c1, acc_t *a, const int xk,
            const int yk)
{
    const int rt64 = xk == K_FLOAT64;
    const __m256d sign = _mm256_set1_pd(-0.0), eps64 = _mm256_set1_pd(EPS64), zero = _mm256_setzero_pd();
    const __m256d t1d = _mm256_set1_pd(0.001), t5d = _mm256_set1_pd(0.005);
    const __m128 signf = _mm_set1_ps(-0.0f), epsf = _mm_set1_ps(FLT_EPSILON), zerof = _mm_setzero_ps();
    const __m128 t1f = _mm_set1_ps(0.001f), t5f = _mm_set1_ps(0.005f);
    __m256d dd = _mm256_loadu_pd(a->dd), xy = _mm256_loadu_pd(a->xy), xx = _mm256_loadu_pd(a->xx);
    __m256d yy = _mm256_loadu_pd(a->yy), sad = _mm256_loadu_pd(a->ad), acc = _mm256_loadu_pd(a->acc);
    __m256d mad = _mm256_loadu_pd(a->mad), mre = _mm256_loadu_pd(a->mre);
    __m256d mnx = _mm256_loadu_pd(a->mnx), mxx = _mm256_loadu_pd(a->mxx);
    __m256d mny = _mm256_loadu_pd(a->mny), mxy = _mm256_loadu_pd(a->mxy);
    __m128 mref = zerof;                                                   /* float32 pairs: max RE */
    __m128i n1 = _mm_setzero_si128(), n5 = _mm_setzero_si128();            /* float32 pairs: counts */
    __m256i n1d = _mm256_setzero_si256(), n5d = _mm256_setzero_si256();    /* float64 pairs: counts */
    Py_ssize_t i = c0;
    for (; i + LANES <= c1; i += LANES) {
        __m256d x, y;
        if (rt64) {
            x = _mm256_loadu_pd((const double *)(const void *)(px + 8 * i));
            y = _mm256_loadu_pd((const double *)(const void *)(py + 8 * i));
            const __m256d e = _mm256_and_pd(eps64, _mm256_cmp_pd(y, zero, _CMP_EQ_OQ));
            const __m256d xe = _mm256_add_pd(x, e), ye = _mm256_add_pd(y, e);
            const __m256d re = _mm256_andnot_pd(sign, _mm256_div_pd(_mm256_sub_pd(xe, ye), ye));
            n1d = _mm256_sub_epi64(n1d, _mm256_castpd_si256(_mm256_cmp_pd(re, t1d, _CMP_LT_OQ)));
            n5d = _mm256_sub_epi64(n5d, _mm256_castpd_si256(_mm256_cmp_pd(re, t5d, _CMP_LT_OQ)));
            mre = _mm256_max_pd(re, mre);
        }
        else {
            __m128 xf, yf;
            if (xk == K_FLOAT32)
                xf = _mm_loadu_ps((const float *)(const void *)(px + 4 * i));
            else {
                __m128i h = _mm_loadl_epi64((const __m128i *)(const void *)(px + 2 * i));
                xf = xk == K_FLOAT16 ? _mm_cvtph_ps(h) : _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16));
            }
            if (yk == K_FLOAT32)
                yf = _mm_loadu_ps((const float *)(const void *)(py + 4 * i));
            else {
                __m128i h = _mm_loadl_epi64((const __m128i *)(const void *)(py + 2 * i));
                yf = yk == K_FLOAT16 ? _mm_cvtph_ps(h) : _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16));
            }
            x = _mm256_cvtps_pd(xf);
            y = _mm256_cvtps_pd(yf);
            const __m128 e = _mm_and_ps(epsf, _mm_cmpeq_ps(yf, zerof));
            const __m128 xe = _mm_add_ps(xf, e), ye = _mm_add_ps(yf, e);
            const __m128 t = _mm_andnot_ps(signf, _mm_div_ps(_mm_sub_ps(xe, ye), ye));
            n1 = _mm_sub_epi32(n1, _mm_castps_si128(_mm_cmplt_ps(t, t1f)));
            n5 = _mm_sub_epi32(n5, _mm_castps_si128(_mm_cmplt_ps(t, t5f)));
            mref = _mm_max_ps(t, mref);
        }
        mnx = _mm256_min_pd(x, mnx);
        mxx = _mm256_max_pd(x, mxx);
        mny = _mm256_min_pd(y, mny);
        mxy = _mm256_max_pd(y, mxy);
        const __m256d d = _mm256_sub_pd(x, y), ad = _mm256_andnot_pd(sign, d), ya = _mm256_andnot_pd(sign, y);
        dd = _mm256_add_pd(dd, _mm256_mul_pd(d, d));
        xy = _mm256_add_pd(xy, _mm256_mul_pd(x, y));
        xx = _mm256_add_pd(xx, _mm256_mul_pd(x, x));
        yy = _mm256_add_pd(yy, _mm256_mul_pd(y, y));
        sad = _mm256_add_pd(sad, ad);
        mad = _mm256_max_pd(ad, mad);
        const __m256d q = _mm256_div_pd(ad, ya);
        acc = _mm256_add_pd(acc, _mm256_and_pd(q, _mm256_cmp_pd(ya, eps64, _CMP_GT_OQ)));
    }
    if (!rt64)
        mre = _mm256_max_pd(_mm256_cvtps_pd(mref), mre);
    int32_t k1[LANES], k5[LANES];
    int64_t k1d[LANES], k5d[LANES];
    _mm_storeu_si128((__m128i *)(void *)k1, n1);
    _mm_storeu_si128((__m128i *)(void *)k5, n5);
    _mm256_storeu_si256((__m256i *)(void *)k1d, n1d);
    _mm256_storeu_si256((__m256i *)(void *)k5d, n5d);
    for (int l = 0; l < LANES; l++) {
        a->c1[l] += rt64 ? (double)k1d[l] : (double)k1[l];
        a->c5[l] += rt64 ? (double)k5d[l] : (double)k5[l];
    }
    _mm256_storeu_pd(a->dd, dd);
    _mm256_storeu_pd(a->xy, xy);
    _mm256_storeu_pd(a->xx, xx);
    _mm256_storeu_pd(a->yy, yy);
    _mm256_storeu_pd(a->ad, sad);
    _mm256_storeu_pd(a->acc, acc);
    _mm256_storeu_pd(a->mad, mad);
    _mm256_storeu_pd(a->mre, mre);
    _mm256_storeu_pd(a->mnx, mnx);
    _mm256_storeu_pd(a->mxx, mxx);
    _mm256_storeu_pd(a->mny, mny);
    _mm256_storeu_pd(a->mxy, mxy);
    return i;
}

typedef Py_ssize_t (*chunk1_fn)(const unsigned char *, const unsigned char *, Py_ssize_t, Py_ssize_t, acc_t *);
#define CHUNK1(P, X, Y, XK, YK)                                                                               \
    AVX2 static Py_ssize_t P##_##X##_##Y(const unsigned char *px, const unsigned char *py, Py_ssize_t c0,    \
                                         Py_ssize_t c1, acc_t *a)                                             \
    {                                                                                                        \
        return chunk1_avx2(px, py, c0, c1, a, XK, YK);                                                       \
    }
KIND_PAIRS(CHUNK1, c1)
static const chunk1_fn chunk1_avx2_fns[K_COUNT][K_COUNT] = {KIND_PAIRS(TABLE_ENTRY, c1)};
#endif

INLINE void
pass1(const unsigned char *px, const unsigned char *py, Py_ssize_t n, double *st, const int xk, const int yk,
      const int vec)
{
    (void)vec; /* without AVX2 copies there is only the portable loop */
    if (st[S_MISMATCH] != 0.0) {
        nan_scan(px, py, 0, n, st, xk, yk);
        return;
    }
    acc_t a;
    for (int l = 0; l < LANES; l++) {
        a.mad[l] = a.mre[l] = 0.0;
        a.mnx[l] = a.mny[l] = INFINITY;
        a.mxx[l] = a.mxy[l] = -INFINITY;
    }
    for (Py_ssize_t c0 = 0; c0 < n; c0 += CHUNK) {
        const Py_ssize_t c1 = n - c0 < CHUNK ? n : c0 + CHUNK;
        for (int l = 0; l < LANES; l++)
            a.dd[l] = a.xy[l] = a.xx[l] = a.yy[l] = a.ad[l] = a.acc[l] = a.c1[l] = a.c5[l] = 0.0;
        int bad;
        if (any_nonfinite(px, c0, c1, xk) || any_nonfinite(py, c0, c1, yk))
            bad = chunk1(px, py, c0, c1, &a, st, xk, yk, 1);
#if HAVE_AVX2_CLONE
        else if (vec) {
            Py_ssize_t i = chunk1_avx2_fns[xk][yk](px, py, c0, c1, &a);
            bad = chunk1(px, py, i, c1, &a, st, xk, yk, 0); /* the last few, lanes 0.. as ever */
        }
#endif
        else
            bad = chunk1(px, py, c0, c1, &a, st, xk, yk, 0);
        if (bad) {
            st[S_MISMATCH] = 1.0;
            nan_scan(px, py, c0, n, st, xk, yk);
            return;
        }
        nadd(st, S_DD, lanes_sum(a.dd));
        nadd(st, S_XY, lanes_sum(a.xy));
        nadd(st, S_XX, lanes_sum(a.xx));
        nadd(st, S_YY, lanes_sum(a.yy));
        nadd(st, S_AD, lanes_sum(a.ad));
        nadd(st, S_ACC, lanes_sum(a.acc));
        st[S_C1] += lanes_sum(a.c1);
        st[S_C5] += lanes_sum(a.c5);
    }
    for (int l = 0; l < LANES; l++) {
        st[S_MAD] = a.mad[l] > st[S_MAD] ? a.mad[l] : st[S_MAD];
        st[S_MRE] = a.mre[l] > st[S_MRE] ? a.mre[l] : st[S_MRE];
        st[S_MNX] = a.mnx[l] < st[S_MNX] ? a.mnx[l] : st[S_MNX];
        st[S_MXX] = a.mxx[l] > st[S_MXX] ? a.mxx[l] : st[S_MXX];
        st[S_MNY] = a.mny[l] < st[S_MNY] ? a.mny[l] : st[S_MNY];
        st[S_MXY] = a.mxy[l] > st[S_MXY] ? a.mxy[l] : st[S_MXY];
    }
    st[S_N] += (double)n;
}

INLINE void
pass2(const unsigned char *px, const unsigned char *py, Py_ssize_t n, double *st, const int xk, const int yk,
      const int vec)
{
    (void)vec; /* without AVX2 copies there is only the portable loop */
    const double nm[4] = {st[S_MNX], st[S_MXX] - st[S_MNX], st[S_MNY], st[S_MXY] - st[S_MNY]};
    for (Py_ssize_t c0 = 0; c0 < n; c0 += CHUNK) {
        const Py_ssize_t c1 = n - c0 < CHUNK ? n : c0 + CHUNK;
        double sp[LANES] = {0}, sq[LANES] = {0}, spl[LANES] = {0};
        if (any_nonfinite(px, c0, c1, xk) || any_nonfinite(py, c0, c1, yk))
            chunk2(px, py, c0, c1, sp, sq, spl, nm, xk, yk, 1);
#if HAVE_AVX2_CLONE
        else if (vec) {
            Py_ssize_t i = chunk2_avx2_fns[xk][yk](px, py, c0, c1, sp, sq, spl, nm);
            chunk2(px, py, i, c1, sp, sq, spl, nm, xk, yk, 0); /* the last few, lanes 0.. as ever */
        }
#endif
        else
            chunk2(px, py, c0, c1, sp, sq, spl, nm, xk, yk, 0);
        nadd(st, S_P, lanes_sum(sp));
        nadd(st, S_Q, lanes_sum(sq));
        nadd(st, S_PL, lanes_sum(spl));
    }
}

/* -- one function per (run kind, baseline kind) ------------------------------------------------- */

typedef void (*pass_fn)(const unsigned char *, const unsigned char *, Py_ssize_t, double *);

/* On x86-64 each pass is compiled twice, the second time for AVX2 (the same arithmetic in wider
   vectors, so the same bits: no reassociation, no contraction) and chosen at import when the CPU has
   it; DUMPCAT_COMPARE_PORTABLE=1 keeps the portable ones (tests compare the two). */
#if HAVE_AVX2_CLONE
#define AVX2_FNS(X, Y, XK, YK)                                                                              \
    AVX2 static void a1_##X##_##Y(const unsigned char *px, const unsigned char *py, Py_ssize_t n, double *st)  \
    {                                                                                                        \
        pass1(px, py, n, st, XK, YK, 1);                                                                     \
    }                                                                                                        \
    AVX2 static void a2_##X##_##Y(const unsigned char *px, const unsigned char *py, Py_ssize_t n, double *st)  \
    {                                                                                                        \
        pass2(px, py, n, st, XK, YK, 1);                                                                     \
    }
#else
#define AVX2_FNS(X, Y, XK, YK)
#endif

#define PASSES(P, X, Y, XK, YK)                                                                               \
    static void p1_##X##_##Y(const unsigned char *px, const unsigned char *py, Py_ssize_t n, double *st)      \
    {                                                                                                        \
        pass1(px, py, n, st, XK, YK, 0);                                                                     \
    }                                                                                                        \
    static void p2_##X##_##Y(const unsigned char *px, const unsigned char *py, Py_ssize_t n, double *st)      \
    {                                                                                                        \
        pass2(px, py, n, st, XK, YK, 0);                                                                     \
    }                                                                                                        \
    AVX2_FNS(X, Y, XK, YK)
KIND_PAIRS(PASSES, _)

static pass_fn passes1[K_COUNT][K_COUNT] = {KIND_PAIRS(TABLE_ENTRY, p1)};
static pass_fn passes2[K_COUNT][K_COUNT] = {KIND_PAIRS(TABLE_ENTRY, p2)};
#if HAVE_AVX2_CLONE
static const pass_fn avx2_passes1[K_COUNT][K_COUNT] = {KIND_PAIRS(TABLE_ENTRY, a1)};
static const pass_fn avx2_passes2[K_COUNT][K_COUNT] = {KIND_PAIRS(TABLE_ENTRY, a2)};
#endif
static const char *isa = "portable";

static void
init_state(double *st)
{
    memset(st, 0, STATE * sizeof(double));
    st[S_MNX] = st[S_MNY] = INFINITY;
    st[S_MXX] = st[S_MXY] = -INFINITY;
}

static void
whole_pair(const unsigned char *px, const unsigned char *py, Py_ssize_t n, double *st, int xk, int yk)
{
    passes1[xk][yk](px, py, n, st);
    if (st[S_MISMATCH] == 0.0)
        passes2[xk][yk](px, py, n, st);
}

/* -- Python glue --------------------------------------------------------------------------------- */

static int
get_kinds(PyObject *xo, PyObject *yo, int *xk, int *yk)
{
    long a = PyLong_AsLong(xo), b;
    if (a == -1 && PyErr_Occurred())
        return -1;
    b = PyLong_AsLong(yo);
    if (b == -1 && PyErr_Occurred())
        return -1;
    if (a < 0 || a >= K_COUNT || b < 0 || b >= K_COUNT || passes1[a][b] == NULL) {
        PyErr_Format(PyExc_ValueError, "no kernel for kinds %ld and %ld", a, b);
        return -1;
    }
    *xk = (int)a;
    *yk = (int)b;
    return 0;
}

/* (x, xkind, y, ykind, state) -> 0, then fn over the n elements with the GIL released when big */
static PyObject *
run_pass(PyObject *const *args, Py_ssize_t nargs, const char *name, int which)
{
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "%s(x, xkind, y, ykind, state) takes 5 arguments", name);
        return NULL;
    }
    int xk, yk;
    if (get_kinds(args[1], args[3], &xk, &yk) < 0)
        return NULL;
    Py_buffer bx, by, bs;
    if (PyObject_GetBuffer(args[0], &bx, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[2], &by, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&bx);
        return NULL;
    }
    if (PyObject_GetBuffer(args[4], &bs, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&bx);
        PyBuffer_Release(&by);
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t n = bx.len / kind_size[xk];
    if (bx.len % kind_size[xk] || by.len % kind_size[yk] || by.len / kind_size[yk] != n) {
        PyErr_SetString(PyExc_ValueError, "x and y must hold the same number of whole elements");
        goto done;
    }
    if (bs.len != STATE * (Py_ssize_t)sizeof(double)) {
        PyErr_Format(PyExc_ValueError, "state must be a buffer of %d float64", STATE);
        goto done;
    }
    double st[STATE];
    memcpy(st, bs.buf, sizeof st); /* the state buffer may be unaligned */
    const int nogil = bx.len + by.len >= NOGIL_BYTES;
    PyThreadState *ts = nogil ? PyEval_SaveThread() : NULL;
    const unsigned char *px = bx.buf, *py = by.buf;
    if (which == 0)
        passes1[xk][yk](px, py, n, st);
    else if (which == 1)
        passes2[xk][yk](px, py, n, st);
    else
        whole_pair(px, py, n, st, xk, yk);
    if (nogil)
        PyEval_RestoreThread(ts);
    memcpy(bs.buf, st, sizeof st);
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&bs);
    PyBuffer_Release(&by);
    PyBuffer_Release(&bx);
    return result;
}

static PyObject *
ck_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    return run_pass(args, nargs, "block", 0);
}

static PyObject *
ck_kl_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    return run_pass(args, nargs, "kl_block", 1);
}

static PyObject *
ck_pair(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    return run_pass(args, nargs, "pair", 2);
}

static PyObject *
ck_new_state(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    double st[STATE];
    init_state(st);
    return PyByteArray_FromStringAndSize((const char *)st, sizeof st);
}

#if HAVE_FILES
typedef struct {
    const char *path[2];
    long long off[2];
    int kind[2];
    Py_ssize_t n;
} job_t;

/* n bytes at off of path into buf: 0, or -1 (missing, unreadable, too short) */
static int
read_at(const char *path, long long off, unsigned char *buf, size_t n)
{
    int fd;
    if (path == NULL)
        return -1;
    do
        fd = open(path, O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, buf + got, n - got, (off_t)(off + (long long)got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            close(fd);
            return -1;
        }
        got += (size_t)k;
    }
    close(fd);
    return 0;
}

static PyObject *
ck_files(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "files(jobs: list, out) takes 2 arguments");
        return NULL;
    }
    PyObject *jobs = args[0];
    const Py_ssize_t count = PyList_GET_SIZE(jobs);
    Py_buffer out;
    if (PyObject_GetBuffer(args[1], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        return NULL;
    PyObject *result = NULL;
    job_t *js = NULL;
    unsigned char *buf = NULL;
    if (out.len != count * STATE * (Py_ssize_t)sizeof(double) || ((uintptr_t)out.buf & 7u)) {
        PyErr_Format(PyExc_ValueError, "out must be an aligned buffer of len(jobs) * %d float64", STATE);
        goto done;
    }
    js = PyMem_Calloc(count ? (size_t)count : 1, sizeof *js);
    if (js == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    size_t most = 0;
    for (Py_ssize_t j = 0; j < count; j++) {
        PyObject *t = PyList_GET_ITEM(jobs, j);
        const char *px, *py;
        Py_ssize_t lx, ly, n;
        long long ox, oy;
        int kx, ky;
        if (!PyTuple_Check(t) || !PyArg_ParseTuple(t, "y#Liy#Lin", &px, &lx, &ox, &kx, &py, &ly, &oy, &ky, &n))
            goto bad;
        if (kx < 0 || kx >= K_COUNT || ky < 0 || ky >= K_COUNT || passes1[kx][ky] == NULL || n < 0 || ox < 0 ||
            oy < 0) {
            PyErr_Format(PyExc_ValueError, "job %zd: bad kinds, count or offsets", j);
            goto done;
        }
        /* a path with a NUL byte is no file: read_at(NULL) fails, as open() does in Python */
        js[j] = (job_t){{strlen(px) == (size_t)lx ? px : NULL, strlen(py) == (size_t)ly ? py : NULL},
                        {ox, oy},
                        {kx, ky},
                        n};
        size_t need = (size_t)n * (size_t)(kind_size[kx] > kind_size[ky] ? kind_size[kx] : kind_size[ky]);
        most = need > most ? need : most;
    }
    buf = PyMem_RawMalloc(2 * most + 16);
    if (buf == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    double *rows = out.buf;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t j = 0; j < count; j++) {
        const job_t *b = &js[j];
        double *st = rows + j * STATE;
        unsigned char *bx = buf, *by = buf + most + 8;
        init_state(st);
        if (read_at(b->path[0], b->off[0], bx, (size_t)b->n * (size_t)kind_size[b->kind[0]]) < 0)
            st[S_CODE] = 1.0;
        else if (read_at(b->path[1], b->off[1], by, (size_t)b->n * (size_t)kind_size[b->kind[1]]) < 0)
            st[S_CODE] = 2.0;
        else
            whole_pair(bx, by, b->n, st, b->kind[0], b->kind[1]);
    }
    Py_END_ALLOW_THREADS;
    result = Py_NewRef(Py_None);
    goto done;
bad:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_TypeError, "a job is (bytes, int, int, bytes, int, int, int)");
done:
    PyMem_RawFree(buf);
    PyMem_Free(js);
    PyBuffer_Release(&out);
    return result;
}
#endif

/* -- a batch of pairs as columns, metrics out as columns ------------------------------------------ */

/* Statuses columns() writes; compare_metrics.STATUSES starts with these, in this order (checked at
   import). */
enum { ST_OK, ST_UNSUPPORTED, ST_NAN_IN_RUN, ST_NAN_IN_BASELINE, ST_NAN_IN_BOTH, ST_INF_MISMATCH,
       ST_UNREADABLE_RUN, ST_UNREADABLE_BASELINE, ST_COUNT };
static const char *const status_names[ST_COUNT] = {
    "ok", "unsupported", "nan_in_run", "nan_in_baseline", "nan_in_both", "inf_mismatch", "unreadable_run",
    "unreadable_baseline",
};
/* The metric columns, in compare_metrics.METRIC_FIELDS' order; NaN stands for NULL (no metric is
   ever NaN: compare_metrics turns NaN into NULL). */
enum { M_COSINE, M_MAX_ABS, M_MAX_REL, M_MEAN_ABS, M_RMSE, M_REL_EUC, M_KL, M_ACC_REL, M_R1E3, M_R5E3, METRICS };

/* The metrics of a pair from its final state: compare_metrics._from_state, _result, _kl_value and _num
   line for line, with the same IEEE operations (sqrt and division are correctly rounded; log is the C
   library's, as math.log's), so the same bits. Returns the status. */
static int
finish(const double *s, Py_ssize_t n, int zero_d, double *m)
{
    const double nan = NAN;
    const int nx = s[S_NANX] != 0.0, ny = s[S_NANY] != 0.0, mismatch = s[S_MISMATCH] != 0.0;
    const int status = nx && ny ? ST_NAN_IN_BOTH
                       : nx     ? ST_NAN_IN_RUN
                       : ny     ? ST_NAN_IN_BASELINE
                       : mismatch ? ST_INF_MISMATCH
                       : n == 1 ? ST_UNSUPPORTED
                                : ST_OK;
    for (int k = 0; k < METRICS; k++)
        m[k] = nan;
    if (mismatch)
        return status;
    const double sp = s[S_P] + s[S_P + 1], sq = s[S_Q] + s[S_Q + 1], spl = s[S_PL] + s[S_PL + 1];
    if (sp > 0 && sq > 0) {
        double kl = spl / sp + log(sq / sp);
        if (isfinite(kl))
            m[M_KL] = fabs(kl) < EPS64 ? 0.0 : kl;
    }
    const double sdd = s[S_DD] + s[S_DD + 1], sxx = s[S_XX] + s[S_XX + 1], syy = s[S_YY] + s[S_YY + 1];
    const double sxy = s[S_XY] + s[S_XY + 1], sad = s[S_AD] + s[S_AD + 1], sacc = s[S_ACC] + s[S_ACC + 1];
    const double dn = (double)n;
    if (n > 1) {
        const double a = sqrt(sxx), b = sqrt(syy);
        if (a <= EPS64 && b <= EPS64)
            m[M_COSINE] = 1.0;
        else if (a > EPS64 && b > EPS64) {
            const double c = sxy / (a * b);
            if (isfinite(c))
                m[M_COSINE] = c > 1.0 ? 1.0 : c;
        }
    }
    m[M_MAX_ABS] = s[S_MAD];
    m[M_MAX_REL] = s[S_MRE];
    m[M_MEAN_ABS] = sad / dn;
    m[M_RMSE] = sqrt(sdd / dn);
    m[M_REL_EUC] = sqrt(syy) <= EPS64 ? 0.0 : sqrt(sdd / syy);
    m[M_ACC_REL] = sacc;
    if (!zero_d) {
        m[M_R1E3] = s[S_C1] / dn; /* the counts are whole numbers below 2^53: int(c) / n in Python */
        m[M_R5E3] = s[S_C5] / dn;
    }
    return status;
}

#if HAVE_FILES
/* buffer i of args as a C-contiguous buffer of exactly `count` items of `size` bytes (count < 0: any) */
static int
get_column(PyObject *obj, Py_buffer *b, Py_ssize_t count, Py_ssize_t size, int writable, const char *name)
{
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if ((count >= 0 && b->len != count * size) || (size > 1 && ((uintptr_t)b->buf % (uintptr_t)size))) {
        PyErr_Format(PyExc_ValueError, "columns(): %s must be an aligned buffer of %zd items of %zd bytes", name,
                     count, size);
        PyBuffer_Release(b);
        b->obj = NULL;
        return -1;
    }
    return 0;
}

/* A buffer of at least n bytes, this thread's own, kept from call to call: a fresh one per call would
   page-fault on every first touch (megabytes for the biggest pairs columns() reads). Freed when its
   thread ends (compare_table runs columns() in short-lived threads). NULL: no memory. */
typedef struct {
    unsigned char *buf;
    size_t len;
} scratch_t;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void
scratch_free(void *p)
{
    scratch_t *s = p;
    free(s->buf);
    free(s);
}

static void
scratch_init(void)
{
    scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0;
}

static unsigned char *
scratch(size_t n)
{
    pthread_once(&scratch_once, scratch_init);
    if (!scratch_key_ok)
        return NULL;
    scratch_t *s = pthread_getspecific(scratch_key);
    if (s == NULL) {
        s = calloc(1, sizeof *s);
        if (s == NULL)
            return NULL;
        if (pthread_setspecific(scratch_key, s) != 0) {
            free(s);
            return NULL;
        }
    }
    if (n > s->len) {
        unsigned char *p = realloc(s->buf, n);
        if (p == NULL)
            return NULL;
        s->buf = p;
        s->len = n;
    }
    return s->buf;
}

/* Directories of the files a columns() call reads, each kept open (O_PATH) for the rest of the call:
   a file is then opened relative to its directory (openat of the last name), so that the kernel does
   not walk the whole absolute path again per file (a task's pairs share a few directories; on a
   12-deep dump path this is ~0.3 us a file). Only absolute paths, so that a change of the working
   directory cannot matter; a directory that cannot be opened, or a path ending in '/', falls back to
   open() of the whole path, whose answer is then the same as the pair-by-pair path's. */
#define DIRS 8
#ifdef O_PATH
#define DIR_FLAGS (O_PATH | O_DIRECTORY | O_CLOEXEC)
#else
#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_CLOEXEC)
#endif
typedef struct {
    char *name[DIRS]; /* the directory part of a path, up to its last '/' (excluded; "/" for the root) */
    size_t len[DIRS];
    int fd[DIRS];
    int next; /* the slot the next new directory takes (oldest first) */
} dir_cache;

static void
dirs_close(dir_cache *d)
{
    for (int i = 0; i < DIRS; i++) {
        if (d->fd[i] >= 0)
            close(d->fd[i]);
        PyMem_RawFree(d->name[i]);
        d->name[i] = NULL;
        d->fd[i] = -1;
    }
}

/* open(path, O_RDONLY | O_CLOEXEC), through the directory cache when it can */
static int
open_in(dir_cache *d, const char *path)
{
    int fd;
    const char *slash = strrchr(path, '/');
    if (d != NULL && path[0] == '/' && slash[1] != 0) {
        const size_t len = slash == path ? 1 : (size_t)(slash - path);
        int dfd = -1;
        for (int i = 0; i < DIRS; i++)
            if (d->fd[i] >= 0 && d->len[i] == len && memcmp(d->name[i], path, len) == 0) {
                dfd = d->fd[i];
                break;
            }
        if (dfd < 0) {
            char *name = PyMem_RawMalloc(len + 1);
            if (name != NULL) {
                memcpy(name, path, len);
                name[len] = 0;
                do
                    dfd = open(name, DIR_FLAGS);
                while (dfd < 0 && errno == EINTR);
                if (dfd >= 0) {
                    const int i = d->next;
                    d->next = (i + 1) % DIRS;
                    if (d->fd[i] >= 0)
                        close(d->fd[i]);
                    PyMem_RawFree(d->name[i]);
                    d->name[i] = name;
                    d->len[i] = len;
                    d->fd[i] = dfd;
                }
                else
                    PyMem_RawFree(name);
            }
        }
        if (dfd >= 0) {
            do
                fd = openat(dfd, slash + 1, O_RDONLY | O_CLOEXEC);
            while (fd < 0 && errno == EINTR);
            return fd;
        }
    }
    do
        fd = open(path, O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    return fd;
}

/* A side's open file, kept while consecutive pairs read from it (a raw dump holds an operator's inputs
   and outputs in one file). */
typedef struct {
    char *path; /* its name, "" when none is open */
    int fd;
} open_file;

/* n bytes at off of path into buf, through the side's open file: 0, or -1 (missing, unreadable, too
   short); path NULL: -1 */
static int
read_cached(open_file *f, dir_cache *d, const char *path, long long off, unsigned char *buf, size_t n)
{
    if (path == NULL)
        return -1;
    if (f->fd < 0 || strcmp(f->path, path) != 0) {
        if (f->fd >= 0)
            close(f->fd);
        f->path[0] = 0;
        f->fd = open_in(d, path);
        if (f->fd < 0)
            return -1;
        strcpy(f->path, path);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(f->fd, buf + got, n - got, (off_t)(off + (long long)got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

/* path j of a side (paths blob and its m + 1 end offsets) into buf as a C string; NULL when the bytes
   hold a NUL (no file has that name: unreadable, as open() says in Python) */
static const char *
column_path(const char *blob, const int64_t *ends, Py_ssize_t j, char *buf)
{
    const int64_t a = ends[j], b = ends[j + 1];
    const size_t len = (size_t)(b - a);
    if (memchr(blob + a, 0, len) != NULL)
        return NULL;
    memcpy(buf, blob + a, len);
    buf[len] = 0;
    return buf;
}

/*
 * columns(xpaths, xends, ypaths, yends, offsets, kinds, numel, zero_d, status, metrics): a batch of
 * pairs read from their files and finished into metric columns in one call, the GIL released, no
 * Python object per pair. xpaths / ypaths: the run's / baseline's paths end to end (bytes), xends /
 * yends their m + 1 end offsets (int64, from 0); offsets: int64 (m, 2), the data offset of each side;
 * kinds: int8 (m, 2); numel: int64 (m), elements of both sides (> 0); zero_d: uint8 (m), 0-d pairs.
 * Out: status int8 (m), an index of STATUSES; metrics float64 (m, METRICS), NaN for NULL.
 */
static PyObject *
ck_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "columns(xpaths, xends, ypaths, yends, offsets, kinds, numel, zero_d, "
                                         "status, metrics) takes 10 arguments");
        return NULL;
    }
    Py_buffer bn = {0}, b[10];
    memset(b, 0, sizeof b);
    PyObject *result = NULL;
    unsigned char *data = NULL;
    char *names = NULL;
    if (get_column(args[6], &bn, -1, 8, 0, "numel") < 0)
        return NULL;
    const Py_ssize_t m = bn.len / 8;
    static const char *const what[10] = {"xpaths", "xends", "ypaths", "yends", "offsets", "kinds", "numel",
                                         "zero_d", "status", "metrics"};
    const Py_ssize_t counts[10] = {-1, m + 1, -1, m + 1, 2 * m, 2 * m, m, m, m, m * METRICS};
    const Py_ssize_t sizes[10] = {1, 8, 1, 8, 8, 1, 8, 1, 1, 8};
    for (int a = 0; a < 10; a++)
        if (a != 6 && get_column(args[a], &b[a], counts[a], sizes[a], a >= 8, what[a]) < 0)
            goto done;
    const char *xblob = b[0].buf, *yblob = b[2].buf;
    const int64_t *xends = b[1].buf, *yends = b[3].buf, *offs = b[4].buf, *numel = bn.buf;
    const signed char *kinds = b[5].buf;
    const unsigned char *zero_d = b[7].buf;
    signed char *status = b[8].buf;
    double *metrics = b[9].buf;
    size_t most = 0, longest = 0;
    for (Py_ssize_t j = 0; j < m; j++) {
        const int kx = kinds[2 * j], ky = kinds[2 * j + 1];
        if (kx < 0 || kx >= K_COUNT || ky < 0 || ky >= K_COUNT || passes1[kx][ky] == NULL || numel[j] <= 0 ||
            offs[2 * j] < 0 || offs[2 * j + 1] < 0 || xends[j] < 0 || xends[j] > xends[j + 1] ||
            xends[j + 1] > b[0].len || yends[j] < 0 || yends[j] > yends[j + 1] || yends[j + 1] > b[2].len) {
            PyErr_Format(PyExc_ValueError, "columns(): pair %zd has bad kinds, counts, offsets or path ends", j);
            goto done;
        }
        const size_t nx = (size_t)(xends[j + 1] - xends[j]), ny = (size_t)(yends[j + 1] - yends[j]);
        longest = nx > longest ? nx : longest;
        longest = ny > longest ? ny : longest;
        const size_t need = (size_t)numel[j] * (size_t)(kind_size[kx] > kind_size[ky] ? kind_size[kx] : kind_size[ky]);
        most = need > most ? need : most;
    }
    data = scratch(2 * most + 16);
    names = PyMem_RawMalloc(3 * (longest + 1));
    if (data == NULL || names == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    open_file fx = {names + longest + 1, -1}, fy = {names + 2 * (longest + 1), -1};
    fx.path[0] = fy.path[0] = 0;
    dir_cache dirs = {.next = 0};
    for (int i = 0; i < DIRS; i++)
        dirs.fd[i] = -1;
    Py_BEGIN_ALLOW_THREADS;
    double st[STATE];
    for (Py_ssize_t j = 0; j < m; j++) {
        const int kx = kinds[2 * j], ky = kinds[2 * j + 1];
        const Py_ssize_t n = (Py_ssize_t)numel[j];
        unsigned char *bx = data, *by = data + most + 8;
        double *row = metrics + j * METRICS;
        const char *px = column_path(xblob, xends, j, names);
        if (read_cached(&fx, &dirs, px, offs[2 * j], bx, (size_t)n * (size_t)kind_size[kx]) < 0) {
            status[j] = ST_UNREADABLE_RUN;
            for (int k = 0; k < METRICS; k++)
                row[k] = NAN;
            continue;
        }
        const char *py = column_path(yblob, yends, j, names);
        if (read_cached(&fy, &dirs, py, offs[2 * j + 1], by, (size_t)n * (size_t)kind_size[ky]) < 0) {
            status[j] = ST_UNREADABLE_BASELINE;
            for (int k = 0; k < METRICS; k++)
                row[k] = NAN;
            continue;
        }
        init_state(st);
        whole_pair(bx, by, n, st, kx, ky);
        status[j] = (signed char)finish(st, n, zero_d[j] != 0, row);
    }
    if (fx.fd >= 0)
        close(fx.fd);
    if (fy.fd >= 0)
        close(fy.fd);
    dirs_close(&dirs);
    Py_END_ALLOW_THREADS;
    result = Py_NewRef(Py_None);
done:
    PyMem_RawFree(names);
    for (int a = 0; a < 10; a++)
        if (b[a].obj != NULL)
            PyBuffer_Release(&b[a]);
    PyBuffer_Release(&bn);
    return result;
}
#endif

static PyMethodDef ck_methods[] = {
    {"block", (PyCFunction)(void (*)(void))ck_block, METH_FASTCALL,
     "block(x, xkind, y, ykind, state): the first pass over one block, folded into state."},
    {"kl_block", (PyCFunction)(void (*)(void))ck_kl_block, METH_FASTCALL,
     "kl_block(x, xkind, y, ykind, state): the KL pass over one block (min and max from state)."},
    {"pair", (PyCFunction)(void (*)(void))ck_pair, METH_FASTCALL,
     "pair(x, xkind, y, ykind, state): both passes over a whole pair in memory."},
    {"new_state", ck_new_state, METH_NOARGS, "new_state() -> bytearray: a fresh state of STATE float64."},
#if HAVE_FILES
    {"files", (PyCFunction)(void (*)(void))ck_files, METH_FASTCALL,
     "files(jobs, out): pair() on tensors read from files, one state row of out per job."},
    {"columns", (PyCFunction)(void (*)(void))ck_columns, METH_FASTCALL,
     "columns(xpaths, xends, ypaths, yends, offsets, kinds, numel, zero_d, status, metrics): a batch of "
     "pairs read from files, their metrics as columns."},
#endif
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef ck_module = {
    PyModuleDef_HEAD_INIT, "_compare_kernel",
    "One-pass pair metrics for ingest.compare_metrics (see the top of _compare_kernel.c).", -1, ck_methods,
};

PyMODINIT_FUNC
PyInit__compare_kernel(void)
{
#if HAVE_AVX2_CLONE
    const char *portable = getenv("DUMPCAT_COMPARE_PORTABLE");
    __builtin_cpu_init();
    if (!(portable && *portable && strcmp(portable, "0") != 0) && __builtin_cpu_supports("avx2")) {
        memcpy(passes1, avx2_passes1, sizeof passes1);
        memcpy(passes2, avx2_passes2, sizeof passes2);
        isa = "avx2";
    }
#endif
    PyObject *m = PyModule_Create(&ck_module);
    if (m == NULL)
        return NULL;
    PyObject *names = Py_BuildValue("(ssss)", kind_names[0], kind_names[1], kind_names[2], kind_names[3]);
    PyObject *slots = Py_BuildValue("(iiiiiiiiiiiiiiiiiiiiii)", S_DD, S_XY, S_XX, S_YY, S_AD, S_ACC, S_MAD,
                                    S_MRE, S_C1, S_C5, S_MNX, S_MXX, S_MNY, S_MXY, S_NANX, S_NANY, S_MISMATCH,
                                    S_N, S_P, S_Q, S_PL, S_CODE);
    if (names == NULL || slots == NULL || PyModule_AddObject(m, "KINDS", names) < 0) {
        Py_XDECREF(names);
        Py_XDECREF(slots);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddObject(m, "SLOTS", slots) < 0) {
        Py_DECREF(slots);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *statuses = PyTuple_New(ST_COUNT);
    if (statuses == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    for (int i = 0; i < ST_COUNT; i++) {
        PyObject *name = PyUnicode_FromString(status_names[i]);
        if (name == NULL) {
            Py_DECREF(statuses);
            Py_DECREF(m);
            return NULL;
        }
        PyTuple_SET_ITEM(statuses, i, name);
    }
    if (PyModule_AddObject(m, "STATUSES", statuses) < 0) {
        Py_DECREF(statuses);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "METRICS", METRICS) < 0 || PyModule_AddIntConstant(m, "STATE", STATE) < 0 || PyModule_AddStringConstant(m, "ISA", isa) < 0 || PyModule_AddIntConstant(m, "FILES", HAVE_FILES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
