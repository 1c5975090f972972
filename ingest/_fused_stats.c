/*
 * _fused_stats: the statistics of one block of tensor elements in a single pass.
 *
 * ingest/tensor_stats.py defines the semantics and has a pure-numpy fallback that gives bit-identical
 * results; this file only makes the same arithmetic fast. One call folds one block into running state:
 *
 *   block(buf, kind, phase, lanes) -> (neg, zero, nan, max, min)
 *
 * buf    any C-contiguous buffer of native-byte-order elements of `kind` (an index into KINDS; bfloat16
 *        is given as its raw 16-bit patterns); its length in bytes must be a multiple of the item size.
 * phase  the global index (in storage order) of the block's first element, modulo 8.
 * lanes  a writable buffer of 16 float64: the running sums lanes[0..7] and sums of squares
 *        lanes[8..15]. Element i of the tensor (global index) adds (double)x to lanes[i % 8] and
 *        (double)x * (double)x to lanes[8 + i % 8], strictly in storage order within each lane.
 * neg, zero, nan   elements < 0, == 0 (either sign) and NaN in this block (ints: nan is 0);
 * max, min         over the non-NaN elements of the block, as float64 (-inf / +inf when there are
 *                  none); the sign of a zero max/min is unspecified (the caller normalises it).
 *
 * counts(buf, kind, value) -> int   the elements equal to `value` (used for +-inf, only when the block's
 *                                   max or min says there is one).
 *
 * The module must be compiled without -ffast-math and with -ffp-contract=off (setup.py does so): every
 * sum is then exactly the sequence of IEEE double additions described above, whatever the vector width.
 * On x86-64 a second copy of the kernels is compiled for AVX2 (+F16C for float16) and chosen at import
 * when the CPU has it; the arithmetic, and so every result, is the same.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 8))
#define HAVE_AVX2_CLONE 1
#include <immintrin.h>
#else
#define HAVE_AVX2_CLONE 0
#endif

/* Element kinds, in the order of the KINDS tuple the module exports (tensor_stats checks it). */
enum {
    K_FLOAT16,
    K_BFLOAT16,
    K_FLOAT32,
    K_FLOAT64,
    K_INT8,
    K_INT16,
    K_INT32,
    K_INT64,
    K_UINT8,
    K_UINT16,
    K_UINT32,
    K_UINT64,
    K_COUNT
};
static const char *const kind_names[K_COUNT] = {
    "float16", "bfloat16", "float32", "float64", "int8",   "int16",
    "int32",   "int64",    "uint8",   "uint16",  "uint32", "uint64",
};
static const int kind_size[K_COUNT] = {2, 2, 4, 8, 1, 2, 4, 8, 1, 2, 4, 8};

#define LANES 8
/* Elements per inner chunk: bounds the per-lane integer counters (int64 anyway) and keeps the
   per-chunk bookkeeping negligible. Must be a multiple of LANES. */
#define CHUNK 8192

typedef struct {
    int64_t neg, zero;
    double mx, mn;
} tally_t;

/* float16 -> float32, built once at import: 65536 entries (256 KiB). */
static float f16_table[65536];

static float
f16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    float f;
    if (exp == 0x1f) { /* inf or NaN: keep the payload, set the quiet bit like hardware does */
        bits = sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u);
    }
    else if (exp != 0) { /* normal: rebias the exponent 15 -> 127 */
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    else { /* zero or subnormal: man * 2^-24 is exact in float32 */
        f = (float)man * 0x1p-24f;
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    memcpy(&f, &bits, 4);
    return f;
}

static void
build_f16_table(void)
{
    for (uint32_t h = 0; h < 65536u; h++) {
        f16_table[h] = f16_to_float((uint16_t)h);
    }
}

/* Loads: memcpy keeps unaligned buffers (npy data offsets need not be aligned) well defined. */
static inline double
ld_f16(const unsigned char *p, Py_ssize_t i)
{
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return (double)f16_table[h];
}
static inline double
ld_bf16(const unsigned char *p, Py_ssize_t i)
{
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return (double)f;
}
static inline double
ld_f32(const unsigned char *p, Py_ssize_t i)
{
    float f;
    memcpy(&f, p + 4 * i, 4);
    return (double)f;
}
static inline double
ld_f64(const unsigned char *p, Py_ssize_t i)
{
    double d;
    memcpy(&d, p + 8 * i, 8);
    return d;
}

/*
 * Float kernel. Each element x (converted to double) does, for its lane l:
 *   s[l] += x; q[l] += x * x; max/min over non-NaN; neg/zero counts (NaN: see count_nan).
 * The head (elements before the next global index that is 0 mod 8) and the tail (after the last
 * whole group of 8) go one element at a time into their lanes; the body does 8 lanes per step.
 */
#define FLOAT_KERNEL(NAME, LOAD, ATTR)                                                                 \
    ATTR static void NAME(const unsigned char *restrict p, Py_ssize_t n, unsigned phase,                \
                          double *restrict ls, double *restrict lq, tally_t *restrict t)              \
    {                                                                                                  \
        Py_ssize_t i = 0;                                                                              \
        int64_t neg = 0, zero = 0;                                                            \
        double mx = t->mx, mn = t->mn;                                                                 \
        for (; phase != 0 && i < n; i++, phase = (phase + 1) & (LANES - 1)) {                          \
            double x = LOAD(p, i);                                                                     \
            ls[phase] += x;                                                                            \
            lq[phase] += x * x;                                                                        \
            mx = x > mx ? x : mx;                                                                      \
            mn = x < mn ? x : mn;                                                                      \
            neg += x < 0;                                                                              \
            zero += x == 0;                                                                            \
        }                                                                                              \
        while (n - i >= LANES) {                                                                       \
            Py_ssize_t len = (n - i) & ~(Py_ssize_t)(LANES - 1);                                       \
            if (len > CHUNK)                                                                           \
                len = CHUNK;                                                                           \
            const Py_ssize_t end = i + len;                                                            \
            double s[LANES], q[LANES], vmx[LANES], vmn[LANES];                                         \
            int64_t cn[LANES], cz[LANES];                                                   \
            for (int j = 0; j < LANES; j++) {                                                          \
                s[j] = ls[j];                                                                          \
                q[j] = lq[j];                                                                          \
                vmx[j] = -INFINITY;                                                                    \
                vmn[j] = INFINITY;                                                                     \
                cn[j] = cz[j] = 0;                                                             \
            }                                                                                          \
            for (; i < end; i += LANES) {                                                              \
                for (int j = 0; j < LANES; j++) {                                                      \
                    double x = LOAD(p, i + j);                                                         \
                    s[j] += x;                                                                         \
                    q[j] += x * x;                                                                     \
                    vmx[j] = x > vmx[j] ? x : vmx[j];                                                  \
                    vmn[j] = x < vmn[j] ? x : vmn[j];                                                  \
                    cn[j] -= -(int64_t)(x < 0);                                                        \
                    cz[j] -= -(int64_t)(x == 0);                                                       \
                }                                                                                      \
            }                                                                                          \
            for (int j = 0; j < LANES; j++) {                                                          \
                ls[j] = s[j];                                                                          \
                lq[j] = q[j];                                                                          \
                mx = vmx[j] > mx ? vmx[j] : mx;                                                        \
                mn = vmn[j] < mn ? vmn[j] : mn;                                                        \
                neg += cn[j];                                                                          \
                zero += cz[j];                                                                         \
            }                                                                                          \
        }                                                                                              \
        for (unsigned l = 0; i < n; i++, l++) {                                                        \
            double x = LOAD(p, i);                                                                     \
            ls[l] += x;                                                                                \
            lq[l] += x * x;                                                                            \
            mx = x > mx ? x : mx;                                                                      \
            mn = x < mn ? x : mn;                                                                      \
            neg += x < 0;                                                                              \
            zero += x == 0;                                                                            \
        }                                                                                              \
        t->neg += neg;                                                                                 \
        t->zero += zero;                                                                               \
        t->mx = mx;                                                                                    \
        t->mn = mn;                                                                                    \
    }

/*
 * Integer kernel: max/min/counts in the integer type, sums of (double)x like the float kernel.
 */
#define INT_KERNEL(NAME, T, ATTR)                                                                      \
    ATTR static void NAME(const unsigned char *restrict p, Py_ssize_t n, unsigned phase,                \
                          double *restrict ls, double *restrict lq, tally_t *restrict t)              \
    {                                                                                                  \
        Py_ssize_t i = 0;                                                                              \
        int64_t neg = 0, zero = 0;                                                                     \
        T imx, imn;                                                                                    \
        T first;                                                                                       \
        if (n == 0)                                                                                    \
            return;                                                                                    \
        memcpy(&first, p, sizeof(T));                                                                  \
        imx = imn = first;                                                                             \
        for (; phase != 0 && i < n; i++, phase = (phase + 1) & (LANES - 1)) {                          \
            T v;                                                                                       \
            memcpy(&v, p + sizeof(T) * i, sizeof(T));                                                  \
            double x = (double)v;                                                                      \
            ls[phase] += x;                                                                            \
            lq[phase] += x * x;                                                                        \
            imx = v > imx ? v : imx;                                                                   \
            imn = v < imn ? v : imn;                                                                   \
            neg += v < 0;                                                                              \
            zero += v == 0;                                                                            \
        }                                                                                              \
        while (n - i >= LANES) {                                                                       \
            Py_ssize_t len = (n - i) & ~(Py_ssize_t)(LANES - 1);                                       \
            if (len > CHUNK)                                                                           \
                len = CHUNK;                                                                           \
            const Py_ssize_t end = i + len;                                                            \
            double s[LANES], q[LANES];                                                                 \
            T vmx[LANES], vmn[LANES];                                                                  \
            int64_t cn[LANES], cz[LANES];                                                              \
            for (int j = 0; j < LANES; j++) {                                                          \
                s[j] = ls[j];                                                                          \
                q[j] = lq[j];                                                                          \
                vmx[j] = vmn[j] = first;                                                               \
                cn[j] = cz[j] = 0;                                                                     \
            }                                                                                          \
            for (; i < end; i += LANES) {                                                              \
                for (int j = 0; j < LANES; j++) {                                                      \
                    T v;                                                                               \
                    memcpy(&v, p + sizeof(T) * (i + j), sizeof(T));                                    \
                    double x = (double)v;                                                              \
                    s[j] += x;                                                                         \
                    q[j] += x * x;                                                                     \
                    vmx[j] = v > vmx[j] ? v : vmx[j];                                                  \
                    vmn[j] = v < vmn[j] ? v : vmn[j];                                                  \
                    cn[j] -= -(int64_t)(v < 0);                                                        \
                    cz[j] -= -(int64_t)(v == 0);                                                       \
                }                                                                                      \
            }                                                                                          \
            for (int j = 0; j < LANES; j++) {                                                          \
                ls[j] = s[j];                                                                          \
                lq[j] = q[j];                                                                          \
                imx = vmx[j] > imx ? vmx[j] : imx;                                                     \
                imn = vmn[j] < imn ? vmn[j] : imn;                                                     \
                neg += cn[j];                                                                          \
                zero += cz[j];                                                                         \
            }                                                                                          \
        }                                                                                              \
        for (unsigned l = 0; i < n; i++, l++) {                                                        \
            T v;                                                                                       \
            memcpy(&v, p + sizeof(T) * i, sizeof(T));                                                  \
            double x = (double)v;                                                                      \
            ls[l] += x;                                                                                \
            lq[l] += x * x;                                                                            \
            imx = v > imx ? v : imx;                                                                   \
            imn = v < imn ? v : imn;                                                                   \
            neg += v < 0;                                                                              \
            zero += v == 0;                                                                            \
        }                                                                                              \
        t->neg += neg;                                                                                 \
        t->zero += zero;                                                                               \
        t->mx = (double)imx;                                                                           \
        t->mn = (double)imn;                                                                           \
    }

typedef void (*kernel_fn)(const unsigned char *, Py_ssize_t, unsigned, double *, double *, tally_t *);

/* The portable kernels. */
FLOAT_KERNEL(k_f16, ld_f16, )
FLOAT_KERNEL(k_bf16, ld_bf16, )
FLOAT_KERNEL(k_f32, ld_f32, )
FLOAT_KERNEL(k_f64, ld_f64, )
INT_KERNEL(k_i8, int8_t, )
INT_KERNEL(k_i16, int16_t, )
INT_KERNEL(k_i32, int32_t, )
INT_KERNEL(k_i64, int64_t, )
INT_KERNEL(k_u8, uint8_t, )
INT_KERNEL(k_u16, uint16_t, )
INT_KERNEL(k_u32, uint32_t, )
INT_KERNEL(k_u64, uint64_t, )

/*
 * Counting passes for float kinds: NaN elements (nan_mode) or elements equal to `value`. The kernels do
 * not count NaN: a square lane x * x is NaN exactly when a NaN went into it (squares are >= 0, so no
 * inf - inf), so the NaN pass runs only when a block leaves a square lane NaN, i.e. only for tensors
 * that have NaN; the +-inf passes only when the block's max or min is infinite.
 */
typedef int64_t (*counter_fn)(const unsigned char *, Py_ssize_t, int, double);

#define PORTABLE_COUNTER(NAME, LOAD)                                                                   \
    static int64_t NAME(const unsigned char *restrict p, Py_ssize_t n, int nan_mode, double value)     \
    {                                                                                                  \
        int64_t c = 0;                                                                                 \
        if (nan_mode) {                                                                                \
            for (Py_ssize_t i = 0; i < n; i++) {                                                       \
                double x = LOAD(p, i);                                                                 \
                c += x != x;                                                                           \
            }                                                                                          \
        }                                                                                              \
        else {                                                                                         \
            for (Py_ssize_t i = 0; i < n; i++)                                                         \
                c += LOAD(p, i) == value;                                                              \
        }                                                                                              \
        return c;                                                                                      \
    }

PORTABLE_COUNTER(c_f16, ld_f16)
PORTABLE_COUNTER(c_bf16, ld_bf16)
PORTABLE_COUNTER(c_f32, ld_f32)
PORTABLE_COUNTER(c_f64, ld_f64)
static counter_fn counters[4] = {c_f16, c_bf16, c_f32, c_f64};

static kernel_fn kernels[K_COUNT] = {k_f16, k_bf16, k_f32, k_f64, k_i8,  k_i16,
                                     k_i32, k_i64,  k_u8,  k_u16, k_u32, k_u64};

#if HAVE_AVX2_CLONE
/*
 * AVX2 kernels for the common kinds, written with intrinsics so that every step is explicit: the same
 * IEEE operations per lane as the portable kernels (8 lanes = two vectors of 4 doubles; no FMA), so the
 * same results. float16 converts with F16C (exact, like the table), bfloat16 by shifting its bits.
 * Counters are int32 per vector slot, folded into int64 every CHUNK elements.
 */
#define AVX2 __attribute__((target("avx2,f16c")))

AVX2 static inline __m256
ld8_f16(const unsigned char *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
AVX2 static inline __m256
ld8_bf16(const unsigned char *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
AVX2 static inline __m256
ld8_f32(const unsigned char *p)
{
    return _mm256_loadu_ps((const float *)p);
}

AVX2 static inline int64_t
hsum_epi32(__m256i v)
{
    int32_t a[8];
    _mm256_storeu_si256((__m256i *)a, v);
    int64_t s = 0;
    for (int j = 0; j < 8; j++)
        s += a[j];
    return s;
}

/* One scalar element into lane l (head and tail of a block). */
#define SCALAR_STEP(x, l)                                                                              \
    do {                                                                                               \
        ls[l] += (x);                                                                                  \
        lq[l] += (x) * (x);                                                                            \
        mx = (x) > mx ? (x) : mx;                                                                      \
        mn = (x) < mn ? (x) : mn;                                                                      \
        neg += (x) < 0;                                                                                \
        zero += (x) == 0;                                                                              \
    } while (0)

/* Kinds whose values are all exact in float32: compare, max and min in float32, sum in float64. */
#define AVX_SP_KERNEL(NAME, LD8, LOAD, ESIZE)                                                          \
    AVX2 static void NAME(const unsigned char *restrict p, Py_ssize_t n, unsigned phase,                \
                          double *restrict ls, double *restrict lq, tally_t *restrict t)              \
    {                                                                                                  \
        Py_ssize_t i = 0;                                                                              \
        int64_t neg = 0, zero = 0;                                                            \
        double mx = t->mx, mn = t->mn;                                                                 \
        for (; phase != 0 && i < n; i++, phase = (phase + 1) & (LANES - 1)) {                          \
            double x = LOAD(p, i);                                                                     \
            SCALAR_STEP(x, phase);                                                                     \
        }                                                                                              \
        if (n - i >= LANES) {                                                                          \
            __m256d s0 = _mm256_loadu_pd(ls), s1 = _mm256_loadu_pd(ls + 4);                           \
            __m256d q0 = _mm256_loadu_pd(lq), q1 = _mm256_loadu_pd(lq + 4);                            \
            __m256 vmx = _mm256_set1_ps(-INFINITY), vmn = _mm256_set1_ps(INFINITY);                    \
            const __m256 z = _mm256_setzero_ps();                                                      \
            while (n - i >= LANES) {                                                                   \
                Py_ssize_t len = (n - i) & ~(Py_ssize_t)(LANES - 1);                                   \
                if (len > CHUNK)                                                                       \
                    len = CHUNK;                                                                       \
                const Py_ssize_t end = i + len;                                                        \
                __m256i cn = _mm256_setzero_si256(), cz = cn;                                 \
                for (; i < end; i += LANES) {                                                          \
                    __m256 v = LD8(p + (ESIZE) * i);                                                   \
                    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));                           \
                    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));                         \
                    s0 = _mm256_add_pd(s0, lo);                                                        \
                    s1 = _mm256_add_pd(s1, hi);                                                        \
                    q0 = _mm256_add_pd(q0, _mm256_mul_pd(lo, lo));                                     \
                    q1 = _mm256_add_pd(q1, _mm256_mul_pd(hi, hi));                                     \
                    vmx = _mm256_max_ps(v, vmx); /* a NaN v keeps vmx */                               \
                    vmn = _mm256_min_ps(v, vmn);                                                       \
                    cn = _mm256_sub_epi32(cn, _mm256_castps_si256(_mm256_cmp_ps(v, z, _CMP_LT_OQ)));   \
                    cz = _mm256_sub_epi32(cz, _mm256_castps_si256(_mm256_cmp_ps(v, z, _CMP_EQ_OQ)));   \
                }                                                                                      \
                neg += hsum_epi32(cn);                                                                 \
                zero += hsum_epi32(cz);                                                                \
            }                                                                                          \
            _mm256_storeu_pd(ls, s0);                                                                  \
            _mm256_storeu_pd(ls + 4, s1);                                                              \
            _mm256_storeu_pd(lq, q0);                                                                  \
            _mm256_storeu_pd(lq + 4, q1);                                                              \
            float a[8], b[8];                                                                          \
            _mm256_storeu_ps(a, vmx);                                                                  \
            _mm256_storeu_ps(b, vmn);                                                                  \
            for (int j = 0; j < 8; j++) {                                                              \
                mx = (double)a[j] > mx ? (double)a[j] : mx;                                            \
                mn = (double)b[j] < mn ? (double)b[j] : mn;                                            \
            }                                                                                          \
        }                                                                                              \
        for (unsigned l = 0; i < n; i++, l++) {                                                        \
            double x = LOAD(p, i);                                                                     \
            SCALAR_STEP(x, l);                                                                         \
        }                                                                                              \
        t->neg += neg;                                                                                 \
        t->zero += zero;                                                                               \
        t->mx = mx;                                                                                    \
        t->mn = mn;                                                                                    \
    }

AVX_SP_KERNEL(a_f16, ld8_f16, ld_f16, 2)
AVX_SP_KERNEL(a_bf16, ld8_bf16, ld_bf16, 2)
AVX_SP_KERNEL(a_f32, ld8_f32, ld_f32, 4)

AVX2 static inline int64_t
hsum_epi64(__m256i v)
{
    int64_t a[4];
    _mm256_storeu_si256((__m256i *)a, v);
    return a[0] + a[1] + a[2] + a[3];
}

AVX2 static void
a_f64(const unsigned char *restrict p, Py_ssize_t n, unsigned phase, double *restrict ls,
      double *restrict lq, tally_t *restrict t)
{
    Py_ssize_t i = 0;
    int64_t neg = 0, zero = 0;
    double mx = t->mx, mn = t->mn;
    for (; phase != 0 && i < n; i++, phase = (phase + 1) & (LANES - 1)) {
        double x = ld_f64(p, i);
        SCALAR_STEP(x, phase);
    }
    if (n - i >= LANES) {
        __m256d s0 = _mm256_loadu_pd(ls), s1 = _mm256_loadu_pd(ls + 4);
        __m256d q0 = _mm256_loadu_pd(lq), q1 = _mm256_loadu_pd(lq + 4);
        __m256d mx0 = _mm256_set1_pd(-INFINITY), mx1 = mx0;
        __m256d mn0 = _mm256_set1_pd(INFINITY), mn1 = mn0;
        const __m256d z = _mm256_setzero_pd();
        __m256i cn = _mm256_setzero_si256(), cz = cn;
        for (; n - i >= LANES; i += LANES) {
            __m256d x0 = _mm256_loadu_pd((const double *)(p + 8 * i));
            __m256d x1 = _mm256_loadu_pd((const double *)(p + 8 * i + 32));
            s0 = _mm256_add_pd(s0, x0);
            s1 = _mm256_add_pd(s1, x1);
            q0 = _mm256_add_pd(q0, _mm256_mul_pd(x0, x0));
            q1 = _mm256_add_pd(q1, _mm256_mul_pd(x1, x1));
            mx0 = _mm256_max_pd(x0, mx0);
            mx1 = _mm256_max_pd(x1, mx1);
            mn0 = _mm256_min_pd(x0, mn0);
            mn1 = _mm256_min_pd(x1, mn1);
            cn = _mm256_add_epi64(cn, _mm256_castpd_si256(_mm256_cmp_pd(x0, z, _CMP_LT_OQ)));
            cn = _mm256_add_epi64(cn, _mm256_castpd_si256(_mm256_cmp_pd(x1, z, _CMP_LT_OQ)));
            cz = _mm256_add_epi64(cz, _mm256_castpd_si256(_mm256_cmp_pd(x0, z, _CMP_EQ_OQ)));
            cz = _mm256_add_epi64(cz, _mm256_castpd_si256(_mm256_cmp_pd(x1, z, _CMP_EQ_OQ)));
        }
        neg -= hsum_epi64(cn); /* the masks are -1 */
        zero -= hsum_epi64(cz);
        _mm256_storeu_pd(ls, s0);
        _mm256_storeu_pd(ls + 4, s1);
        _mm256_storeu_pd(lq, q0);
        _mm256_storeu_pd(lq + 4, q1);
        double a[8], b[8];
        _mm256_storeu_pd(a, mx0);
        _mm256_storeu_pd(a + 4, mx1);
        _mm256_storeu_pd(b, mn0);
        _mm256_storeu_pd(b + 4, mn1);
        for (int j = 0; j < 8; j++) {
            mx = a[j] > mx ? a[j] : mx;
            mn = b[j] < mn ? b[j] : mn;
        }
    }
    for (unsigned l = 0; i < n; i++, l++) {
        double x = ld_f64(p, i);
        SCALAR_STEP(x, l);
    }
    t->neg += neg;
    t->zero += zero;
    t->mx = mx;
    t->mn = mn;
}

/* Integer kinds that widen exactly to int32: max/min/counts in int32, sums in float64. */
AVX2 static inline __m256i
ld8_i8(const unsigned char *p)
{
    return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
}
AVX2 static inline __m256i
ld8_u8(const unsigned char *p)
{
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}
AVX2 static inline __m256i
ld8_i16(const unsigned char *p)
{
    return _mm256_cvtepi16_epi32(_mm_loadu_si128((const __m128i *)p));
}
AVX2 static inline __m256i
ld8_u16(const unsigned char *p)
{
    return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
}
AVX2 static inline __m256i
ld8_i32(const unsigned char *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

#define AVX_I32_KERNEL(NAME, LD8, T)                                                                   \
    AVX2 static void NAME(const unsigned char *restrict p, Py_ssize_t n, unsigned phase,                \
                          double *restrict ls, double *restrict lq, tally_t *restrict t)              \
    {                                                                                                  \
        Py_ssize_t i = 0;                                                                              \
        int64_t neg = 0, zero = 0;                                                                     \
        int32_t imx = INT32_MIN, imn = INT32_MAX;                                                      \
        for (; phase != 0 && i < n; i++, phase = (phase + 1) & (LANES - 1)) {                          \
            T v;                                                                                       \
            memcpy(&v, p + sizeof(T) * i, sizeof(T));                                                  \
            double x = (double)v;                                                                      \
            ls[phase] += x;                                                                            \
            lq[phase] += x * x;                                                                        \
            imx = v > imx ? v : imx;                                                                   \
            imn = v < imn ? v : imn;                                                                   \
            neg += v < 0;                                                                              \
            zero += v == 0;                                                                            \
        }                                                                                              \
        if (n - i >= LANES) {                                                                          \
            __m256d s0 = _mm256_loadu_pd(ls), s1 = _mm256_loadu_pd(ls + 4);                           \
            __m256d q0 = _mm256_loadu_pd(lq), q1 = _mm256_loadu_pd(lq + 4);                            \
            __m256i vmx = _mm256_set1_epi32(INT32_MIN), vmn = _mm256_set1_epi32(INT32_MAX);            \
            const __m256i z = _mm256_setzero_si256();                                                  \
            while (n - i >= LANES) {                                                                   \
                Py_ssize_t len = (n - i) & ~(Py_ssize_t)(LANES - 1);                                   \
                if (len > CHUNK)                                                                       \
                    len = CHUNK;                                                                       \
                const Py_ssize_t end = i + len;                                                        \
                __m256i cn = _mm256_setzero_si256(), cz = cn;                                          \
                for (; i < end; i += LANES) {                                                          \
                    __m256i v = LD8(p + sizeof(T) * i);                                                \
                    __m256d lo = _mm256_cvtepi32_pd(_mm256_castsi256_si128(v));                        \
                    __m256d hi = _mm256_cvtepi32_pd(_mm256_extracti128_si256(v, 1));                   \
                    s0 = _mm256_add_pd(s0, lo);                                                        \
                    s1 = _mm256_add_pd(s1, hi);                                                        \
                    q0 = _mm256_add_pd(q0, _mm256_mul_pd(lo, lo));                                     \
                    q1 = _mm256_add_pd(q1, _mm256_mul_pd(hi, hi));                                     \
                    vmx = _mm256_max_epi32(v, vmx);                                                    \
                    vmn = _mm256_min_epi32(v, vmn);                                                    \
                    cn = _mm256_sub_epi32(cn, _mm256_cmpgt_epi32(z, v));                               \
                    cz = _mm256_sub_epi32(cz, _mm256_cmpeq_epi32(v, z));                               \
                }                                                                                      \
                neg += hsum_epi32(cn);                                                                 \
                zero += hsum_epi32(cz);                                                                \
            }                                                                                          \
            _mm256_storeu_pd(ls, s0);                                                                  \
            _mm256_storeu_pd(ls + 4, s1);                                                              \
            _mm256_storeu_pd(lq, q0);                                                                  \
            _mm256_storeu_pd(lq + 4, q1);                                                              \
            int32_t a[8], b[8];                                                                        \
            _mm256_storeu_si256((__m256i *)a, vmx);                                                    \
            _mm256_storeu_si256((__m256i *)b, vmn);                                                    \
            for (int j = 0; j < 8; j++) {                                                              \
                imx = a[j] > imx ? a[j] : imx;                                                         \
                imn = b[j] < imn ? b[j] : imn;                                                         \
            }                                                                                          \
        }                                                                                              \
        for (unsigned l = 0; i < n; i++, l++) {                                                        \
            T v;                                                                                       \
            memcpy(&v, p + sizeof(T) * i, sizeof(T));                                                  \
            double x = (double)v;                                                                      \
            ls[l] += x;                                                                                \
            lq[l] += x * x;                                                                            \
            imx = v > imx ? v : imx;                                                                   \
            imn = v < imn ? v : imn;                                                                   \
            neg += v < 0;                                                                              \
            zero += v == 0;                                                                            \
        }                                                                                              \
        t->neg += neg;                                                                                 \
        t->zero += zero;                                                                               \
        t->mx = (double)imx;                                                                           \
        t->mn = (double)imn;                                                                           \
    }

AVX_I32_KERNEL(a_i8, ld8_i8, int8_t)
AVX_I32_KERNEL(a_u8, ld8_u8, uint8_t)
AVX_I32_KERNEL(a_i16, ld8_i16, int16_t)
AVX_I32_KERNEL(a_u16, ld8_u16, uint16_t)
AVX_I32_KERNEL(a_i32, ld8_i32, int32_t)


/* Vector counting passes (see counter_fn). */
#define AVX_SP_COUNTER(NAME, LD8, LOAD, ESIZE, FALLBACK)                                               \
    AVX2 static int64_t NAME(const unsigned char *restrict p, Py_ssize_t n, int nan_mode, double value) \
    {                                                                                                  \
        if (!nan_mode && (double)(float)value != value)                                                \
            return FALLBACK(p, n, nan_mode, value); /* not a float32 value: compare in double */       \
        Py_ssize_t i = 0;                                                                              \
        int64_t c = 0;                                                                                 \
        const __m256 val = _mm256_set1_ps((float)value);                                               \
        while (n - i >= LANES) {                                                                       \
            Py_ssize_t len = (n - i) & ~(Py_ssize_t)(LANES - 1);                                       \
            if (len > CHUNK)                                                                           \
                len = CHUNK;                                                                           \
            const Py_ssize_t end = i + len;                                                            \
            __m256i acc = _mm256_setzero_si256();                                                      \
            if (nan_mode) {                                                                            \
                for (; i < end; i += LANES) {                                                          \
                    __m256 v = LD8(p + (ESIZE) * i);                                                   \
                    acc = _mm256_sub_epi32(acc, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))); \
                }                                                                                      \
            }                                                                                          \
            else {                                                                                     \
                for (; i < end; i += LANES) {                                                          \
                    __m256 v = LD8(p + (ESIZE) * i);                                                   \
                    acc = _mm256_sub_epi32(acc, _mm256_castps_si256(_mm256_cmp_ps(v, val, _CMP_EQ_OQ))); \
                }                                                                                      \
            }                                                                                          \
            c += hsum_epi32(acc);                                                                      \
        }                                                                                              \
        return c + FALLBACK(p + (ESIZE) * i, n - i, nan_mode, value);                                  \
    }

AVX_SP_COUNTER(ac_f16, ld8_f16, ld_f16, 2, c_f16)
AVX_SP_COUNTER(ac_bf16, ld8_bf16, ld_bf16, 2, c_bf16)
AVX_SP_COUNTER(ac_f32, ld8_f32, ld_f32, 4, c_f32)

AVX2 static int64_t
ac_f64(const unsigned char *restrict p, Py_ssize_t n, int nan_mode, double value)
{
    Py_ssize_t i = 0;
    __m256i acc = _mm256_setzero_si256();
    const __m256d val = _mm256_set1_pd(value);
    if (nan_mode) {
        for (; n - i >= 4; i += 4) {
            __m256d v = _mm256_loadu_pd((const double *)(p + 8 * i));
            acc = _mm256_sub_epi64(acc, _mm256_castpd_si256(_mm256_cmp_pd(v, v, _CMP_UNORD_Q)));
        }
    }
    else {
        for (; n - i >= 4; i += 4) {
            __m256d v = _mm256_loadu_pd((const double *)(p + 8 * i));
            acc = _mm256_sub_epi64(acc, _mm256_castpd_si256(_mm256_cmp_pd(v, val, _CMP_EQ_OQ)));
        }
    }
    return hsum_epi64(acc) + c_f64(p + 8 * i, n - i, nan_mode, value);
}
static const counter_fn avx2_counters[4] = {ac_f16, ac_bf16, ac_f32, ac_f64};

/* int64 / uint32 / uint64 have no AVX2 conversion to double: the portable kernels serve them. */
static const kernel_fn avx2_kernels[K_COUNT] = {a_f16, a_bf16, a_f32, a_f64, a_i8,  a_i16,
                                                a_i32, k_i64,  a_u8,  a_u16, k_u32, k_u64};
#endif

static const char *isa = "portable";

/* Below this many bytes the GIL stays held: releasing and retaking it costs more than it frees. */
#define NOGIL_BYTES (1 << 18)

static PyObject *
fs_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "block(buf, kind, phase, lanes) takes 4 arguments");
        return NULL;
    }
    long kind = PyLong_AsLong(args[1]);
    if (kind == -1 && PyErr_Occurred())
        return NULL;
    if (kind < 0 || kind >= K_COUNT) {
        PyErr_Format(PyExc_ValueError, "unknown kind %ld", kind);
        return NULL;
    }
    long phase = PyLong_AsLong(args[2]);
    if (phase == -1 && PyErr_Occurred())
        return NULL;
    if (phase < 0 || phase >= LANES) {
        PyErr_Format(PyExc_ValueError, "phase %ld is not in 0..7", phase);
        return NULL;
    }
    Py_buffer data, lanes;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[3], &lanes, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    PyObject *result = NULL;
    const int size = kind_size[kind];
    if (data.len % size != 0) {
        PyErr_Format(PyExc_ValueError, "buffer of %zd bytes is not a whole number of %s elements", data.len,
                     kind_names[kind]);
        goto done;
    }
    if (lanes.len != 16 * (Py_ssize_t)sizeof(double)) {
        PyErr_SetString(PyExc_ValueError, "lanes must be a buffer of 16 float64");
        goto done;
    }
    Py_ssize_t n = data.len / size;
    tally_t t = {0, 0, -INFINITY, INFINITY};
    double ls[LANES], lq[LANES];
    memcpy(ls, lanes.buf, sizeof ls); /* the lanes buffer may be unaligned */
    memcpy(lq, (char *)lanes.buf + sizeof ls, sizeof lq);
    if (n) {
        if (data.len >= NOGIL_BYTES) {
            Py_BEGIN_ALLOW_THREADS kernels[kind]((const unsigned char *)data.buf, n, (unsigned)phase, ls, lq,
                                                 &t);
            Py_END_ALLOW_THREADS
        }
        else {
            kernels[kind]((const unsigned char *)data.buf, n, (unsigned)phase, ls, lq, &t);
        }
    }
    int64_t nan = 0;
    if (n && kind <= K_FLOAT64) {
        int any = 0;
        for (int j = 0; j < LANES; j++)
            any |= lq[j] != lq[j];
        if (any)
            nan = counters[kind]((const unsigned char *)data.buf, n, 1, 0.0);
    }
    memcpy(lanes.buf, ls, sizeof ls);
    memcpy((char *)lanes.buf + sizeof ls, lq, sizeof lq);
    result = Py_BuildValue("(LLLdd)", (long long)t.neg, (long long)t.zero, (long long)nan, t.mx, t.mn);
done:
    PyBuffer_Release(&lanes);
    PyBuffer_Release(&data);
    return result;
}

/* count(buf, kind, value): elements equal to `value` (float kinds; see counter_fn). */
static PyObject *
fs_count(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "count(buf, kind, value) takes 3 arguments");
        return NULL;
    }
    long kind = PyLong_AsLong(args[1]);
    if (kind == -1 && PyErr_Occurred())
        return NULL;
    if (kind < K_FLOAT16 || kind > K_FLOAT64) {
        PyErr_Format(PyExc_ValueError, "count() takes a float kind, not %ld", kind);
        return NULL;
    }
    double value = PyFloat_AsDouble(args[2]);
    if (value == -1.0 && PyErr_Occurred())
        return NULL;
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    const int size = kind_size[kind];
    if (data.len % size != 0) {
        PyBuffer_Release(&data);
        PyErr_SetString(PyExc_ValueError, "buffer is not a whole number of elements");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)data.buf;
    Py_ssize_t n = data.len / size;
    int64_t c = counters[kind](p, n, 0, value);
    PyBuffer_Release(&data);
    return PyLong_FromLongLong((long long)c);
}

static PyMethodDef fs_methods[] = {
    {"block", (PyCFunction)(void (*)(void))fs_block, METH_FASTCALL,
     "block(buf, kind, phase, lanes) -> (neg, zero, nan, max, min); updates lanes in place."},
    {"count", (PyCFunction)(void (*)(void))fs_count, METH_FASTCALL,
     "count(buf, kind, value) -> number of elements equal to value (float kinds)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fs_module = {
    PyModuleDef_HEAD_INIT, "_fused_stats",
    "One-pass tensor statistics kernels for ingest.tensor_stats (see its module docstring).", -1,
    fs_methods,
};

PyMODINIT_FUNC
PyInit__fused_stats(void)
{
    build_f16_table();
#if HAVE_AVX2_CLONE
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
        memcpy(kernels, avx2_kernels, sizeof kernels);
        memcpy(counters, avx2_counters, sizeof counters);
        isa = "avx2";
    }
#endif
    PyObject *m = PyModule_Create(&fs_module);
    if (m == NULL)
        return NULL;
    PyObject *names = PyTuple_New(K_COUNT);
    if (names == NULL)
        goto fail;
    for (int k = 0; k < K_COUNT; k++) {
        PyObject *s = PyUnicode_FromString(kind_names[k]);
        if (s == NULL) {
            Py_DECREF(names);
            goto fail;
        }
        PyTuple_SET_ITEM(names, k, s);
    }
    if (PyModule_AddObject(m, "KINDS", names) < 0) {
        Py_DECREF(names);
        goto fail;
    }
    if (PyModule_AddStringConstant(m, "ISA", isa) < 0 || PyModule_AddIntConstant(m, "LANES", LANES) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
