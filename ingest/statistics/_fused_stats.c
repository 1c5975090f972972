/*
 * _fused_stats: the statistics of one block of tensor elements in a single pass.
 *
 * ingest/statistics/kernel.py defines the semantics and has a pure-numpy fallback that gives bit-identical
 * results; this file only makes the same arithmetic fast. One call folds one block into running state:
 *
 *   block(buf, kind, phase, lanes) -> (neg, zero, nan, ninf, pinf, max, min)
 *
 * buf    any C-contiguous buffer of native-byte-order elements of `kind` (an index into KINDS; bfloat16
 *        is given as its raw 16-bit patterns); its length in bytes must be a multiple of the item size.
 * phase  the global index (in storage order) of the block's first element, modulo HALF_BLOCK (256).
 * lanes  a writable buffer of STATE (64) float64, the tensor's running state, zero at its start:
 *        S = lanes[0..15] sums, Q = lanes[16..31] sums of squares, P = lanes[32..47] and R = [48..63]
 *        float32 partials (float16/bfloat16 only).
 *        float32, float64, integers: element i (global index) adds (double)x to S[i % 8] and
 *        (double)x * (double)x to Q[i % 8], strictly in storage order within each lane.
 *        float16, bfloat16: 16 lanes and float32 partials over blocks of HALF_BLOCK elements, see
 *        half_portable below.
 * neg, zero, nan   elements < 0, == 0 (either sign) and NaN in this block (ints: nan is 0);
 * ninf, pinf       elements equal to -inf and +inf (counted only when the block's max or min, or NaN,
 *                  says there may be some);
 * max, min         over the non-NaN elements of the block, as float64 (-inf / +inf when there are
 *                  none); the sign of a zero max/min is unspecified (the caller normalises it).
 *
 * finish(lanes, kind) -> (sum, sum of squares)   the lanes added left to right (0..7, or 0..15 after
 *                                   adding each half lane's pending partials), as tensor_stats does.
 * mapped(fd, offset, nbytes, kind, phase, lanes)   block() on bytes of an open file, read through a
 *                                   mapping (no copy), guarded against the file shrinking (fs_mapped).
 * count(buf, kind, value) -> int   the elements equal to `value` (float kinds).
 *
 * The module must be compiled without -ffast-math and with -ffp-contract=off (setup.py does so), with
 * float arithmetic evaluated in float (FLT_EVAL_METHOD 0, checked below): every sum is then exactly the
 * sequence of IEEE additions described, whatever the vector width. The only fused multiply-adds are
 * explicit ones on squares that are exact (float16 and in-range bfloat16 values squared in float32),
 * where one rounding is all the separate multiply and add have too.
 * On x86-64 a second copy of the kernels is compiled for AVX2 (+F16C, FMA) and chosen at import when
 * the CPU has them (DUMPCAT_STATS_PORTABLE=1 keeps the portable ones); the arithmetic, and so every
 * result, is the same.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_float16.h"

/* mapped(): reading files through a mapping, with a guard against SIGBUS (POSIX systems) */
#if defined(__linux__) || defined(__APPLE__)
#define HAVE_MAPPED 1
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>
#else
#define HAVE_MAPPED 0
#endif

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

static void
build_f16_table(void)
{
    for (uint32_t h = 0; h < 65536u; h++) {
        f16_table[h] = dumpcat_f16_to_float((uint16_t)h);
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

/* 8-lane kinds (the half kinds have half_kernels). */
static kernel_fn kernels[K_COUNT] = {NULL,  NULL,  k_f32, k_f64, k_i8,  k_i16,
                                     k_i32, k_i64, k_u8,  k_u16, k_u32, k_u64};

/*
 * float16 and bfloat16: 16 lanes and float32 blocks (ingest/statistics/kernel.py defines the arithmetic).
 *
 * Element i of the tensor (global index) goes to lane i % 16. Within each block of HBLOCK elements
 * (global indices [k * HBLOCK, (k + 1) * HBLOCK)), lane l keeps two float32 partials, P[l] (x) and
 * R[l] (x * x, exact in float32 for these values), each added to in index order; at the end of the
 * block they are added to the lane's float64 sums S[l] and Q[l] and reset to 0. bfloat16 elements that
 * are not in the float32-safe range (nonzero |x| < 2^-60 or |x| >= 2^60, inf, NaN) skip the partials:
 * (double)x and (double)x * (double)x go straight to S[l] and Q[l], at their place in index order.
 * float16 elements are always in range (squares are exact in float32 and 16 of them cannot overflow).
 *
 * max, min, neg and zero are taken on the 16-bit patterns: key = +|bits| or -|bits| by the sign bit
 * orders the values like the floats do (NaN keys lie beyond +-inf: the caller ignores max/min when the
 * block has NaN), key < 0 is a negative value (or a negative NaN: fs_block subtracts those when it counts
 * NaN) and |bits| == 0 is +-0.
 */
#define HLANES 16
#define HBLOCK 256
#define HROWS (HBLOCK / HLANES)
/* bfloat16 |bits| of 2^-60 and 2^60: values with LO <= |bits| < HI go through the float32 partials. */
#define BF16_LO 0x2180u
#define BF16_HI 0x5d80u
/* Layout of the lanes buffer (float64 slots): S, Q, then P and R (float32 values held as float64). */
#define ST_S 0
#define ST_Q 16
#define ST_P 32
#define ST_R 48
#define STATE 64

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "the float32 partials need float arithmetic evaluated in float (FLT_EVAL_METHOD == 0)"
#endif

typedef struct {
    double S[HLANES], Q[HLANES];
    float P[HLANES], R[HLANES];
} hstate_t;

typedef struct {
    int64_t neg, zero;
    int kmx, kmn; /* keys, see above */
} htally_t;

static inline void
hstate_load(hstate_t *s, const double *st)
{
    for (int l = 0; l < HLANES; l++) {
        s->S[l] = st[ST_S + l];
        s->Q[l] = st[ST_Q + l];
        s->P[l] = (float)st[ST_P + l]; /* exact: they were float32 values */
        s->R[l] = (float)st[ST_R + l];
    }
}

static inline void
hstate_store(const hstate_t *s, double *st)
{
    for (int l = 0; l < HLANES; l++) {
        st[ST_S + l] = s->S[l];
        st[ST_Q + l] = s->Q[l];
        st[ST_P + l] = (double)s->P[l];
        st[ST_R + l] = (double)s->R[l];
    }
}

static inline void
hstate_flush(hstate_t *s)
{
    for (int l = 0; l < HLANES; l++) {
        s->S[l] += (double)s->P[l];
        s->Q[l] += (double)s->R[l];
        s->P[l] = 0.0f;
        s->R[l] = 0.0f;
    }
}

static inline float
bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline int
bf16_in_range(uint16_t h)
{
    uint32_t a = h & 0x7fffu;
    return a == 0 || a - BF16_LO < BF16_HI - BF16_LO; /* unsigned: a < LO wraps around */
}

static inline uint16_t
ld_u16(const unsigned char *p, Py_ssize_t i)
{
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return h;
}

static inline int16_t
ld_i16(const unsigned char *p, Py_ssize_t i)
{
    int16_t h;
    memcpy(&h, p + 2 * i, 2);
    return h;
}

/* One element of a half kind: lane l (the position within its row), tally on its bits. */
static inline void
half_put(hstate_t *s, htally_t *t, unsigned l, uint16_t h, int bf)
{
    int a = h & 0x7fff;
    int key = (h & 0x8000) ? -a : a;
    t->kmx = key > t->kmx ? key : t->kmx;
    t->kmn = key < t->kmn ? key : t->kmn;
    t->neg += key < 0;
    t->zero += a == 0;
    float x = bf ? bf16_to_float(h) : f16_table[h];
    if (!bf || bf16_in_range(h)) {
        s->P[l] = s->P[l] + x;
        s->R[l] = s->R[l] + x * x;
    }
    else {
        double d = (double)x;
        s->S[l] += d;
        s->Q[l] += d * d;
    }
}

static inline double
half_key_value(int key, int bf)
{
    uint16_t h = key < 0 ? (uint16_t)(0x8000 | -key) : (uint16_t)key;
    return bf ? (double)bf16_to_float(h) : (double)f16_table[h];
}

static inline void
htally_out(const htally_t *ht, Py_ssize_t n, int bf, tally_t *t)
{
    t->neg += ht->neg;
    t->zero += ht->zero;
    if (n) {
        t->mx = half_key_value(ht->kmx, bf);
        t->mn = half_key_value(ht->kmn, bf);
    }
}

/* Portable: element by element, rows of 16 written so that compilers can vectorise them. */
static inline void
half_portable(const unsigned char *restrict p, Py_ssize_t n, unsigned pos, double *restrict st,
              tally_t *restrict t, int bf)
{
    hstate_t s;
    htally_t ht = {0, 0, -32768, 32767};
    hstate_load(&s, st);
    Py_ssize_t i = 0;
    while (i < n) {
        if ((pos & (HLANES - 1)) == 0 && n - i >= HLANES) {
            /* a whole row: lanes 0..15 */
            uint16_t hs[HLANES];
            memcpy(hs, p + 2 * i, sizeof hs);
            int all_in = 1;
            if (bf)
                for (int l = 0; l < HLANES; l++)
                    all_in &= bf16_in_range(hs[l]);
            if (all_in) {
                for (int l = 0; l < HLANES; l++) {
                    float x = bf ? bf16_to_float(hs[l]) : f16_table[hs[l]];
                    s.P[l] = s.P[l] + x;
                    s.R[l] = s.R[l] + x * x;
                }
                for (int l = 0; l < HLANES; l++) {
                    int a = hs[l] & 0x7fff;
                    int key = (hs[l] & 0x8000) ? -a : a;
                    ht.kmx = key > ht.kmx ? key : ht.kmx;
                    ht.kmn = key < ht.kmn ? key : ht.kmn;
                    ht.neg += key < 0;
                    ht.zero += a == 0;
                }
            }
            else {
                for (int l = 0; l < HLANES; l++)
                    half_put(&s, &ht, (unsigned)l, hs[l], bf);
            }
            i += HLANES;
            pos += HLANES;
        }
        else {
            half_put(&s, &ht, pos & (HLANES - 1), ld_u16(p, i), bf);
            i++;
            pos++;
        }
        if (pos == HBLOCK) {
            hstate_flush(&s);
            pos = 0;
        }
    }
    hstate_store(&s, st);
    htally_out(&ht, n, bf, t);
}

static void
k_f16(const unsigned char *restrict p, Py_ssize_t n, unsigned pos, double *restrict st, tally_t *restrict t)
{
    half_portable(p, n, pos, st, t, 0);
}

static void
k_bf16(const unsigned char *restrict p, Py_ssize_t n, unsigned pos, double *restrict st,
       tally_t *restrict t)
{
    half_portable(p, n, pos, st, t, 1);
}

/* The special values among half elements, counted on their bits: NaN, NaN with the sign bit (the kernels
   count those in neg), +inf and -inf. Used when the block has NaN, whose keys hide the infinities. */
typedef struct {
    int64_t nan, neg_nan, pinf, ninf;
} hspecial_t;

static void
half_special_counts(const unsigned char *restrict p, Py_ssize_t n, int bf, hspecial_t *out)
{
    const unsigned inf = bf ? 0x7f80u : 0x7c00u;
    int64_t c = 0, cn = 0, pi = 0, ni = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned h = ld_u16(p, i);
        c += (h & 0x7fffu) > inf;
        cn += h > (0x8000u | inf);
        pi += h == inf;
        ni += h == (0x8000u | inf);
    }
    out->nan = c;
    out->neg_nan = cn;
    out->pinf = pi;
    out->ninf = ni;
}

typedef void (*half_fn)(const unsigned char *, Py_ssize_t, unsigned, double *, tally_t *);
static half_fn half_kernels[2] = {k_f16, k_bf16};

#if HAVE_AVX2_CLONE
/*
 * AVX2 kernels for the common kinds, written with intrinsics so that every step is explicit: the same
 * IEEE operations per lane as the portable kernels (8 lanes = two vectors of 4 doubles; no FMA), so the
 * same results. float16 converts with F16C (exact, like the table), bfloat16 by shifting its bits.
 * Counters are int32 per vector slot, folded into int64 every CHUNK elements.
 */
#define AVX2 __attribute__((target("avx2,f16c,fma")))

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

AVX_SP_KERNEL(a_f32, ld8_f32, ld_f32, 4)

AVX2 static inline int64_t
hsum_epi64(__m256i v)
{
    int64_t a[4];
    _mm256_storeu_si256((__m256i *)a, v);
    return a[0] + a[1] + a[2] + a[3];
}

/*
 * float16 / bfloat16 (see half_portable): 16 elements per step, float32 partials in 4 vectors of 8
 * lanes. float16 widens with F16C, 8 consecutive elements per vector (lanes 0-7 and 8-15); bfloat16
 * interleaves its 16-bit patterns with zeros (exact float32), so one vector holds lanes 0-3 and 8-11,
 * the other 4-7 and 12-15. x * x is exact in float32 here, so the fused multiply-add is the same
 * number as the portable kernel's x * x then + (one rounding either way). Tallies on the 16-bit keys,
 * counters in 16-bit slots folded every segment (the rows up to a block's end, at most HROWS).
 *
 * bfloat16 runs each segment optimistically with every element in the partials while it watches the
 * range (max and min key, smallest nonzero |bits|); a segment that had an element outside the
 * float32-safe range is computed again from its start by the careful loop, which sends those elements
 * to S and Q (as float64, 0.0 for the others: adding 0.0 leaves a lane as it is).
 */
AVX2 static inline __m256
ld_lanes8(const float *P, int lo, int hi)
{
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(P + lo)), _mm_loadu_ps(P + hi), 1);
}

AVX2 static inline void
st_lanes8(float *P, int lo, int hi, __m256 v)
{
    _mm_storeu_ps(P + lo, _mm256_castps256_ps128(v));
    _mm_storeu_ps(P + hi, _mm256_extractf128_ps(v, 1));
}

/* S[lo..lo+3] += lanes 0-3 of v, S[hi..hi+3] += lanes 4-7, as float64 */
AVX2 static inline void
flush_lanes8(double *S, int lo, int hi, __m256 v)
{
    __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    _mm256_storeu_pd(S + lo, _mm256_add_pd(_mm256_loadu_pd(S + lo), a));
    _mm256_storeu_pd(S + hi, _mm256_add_pd(_mm256_loadu_pd(S + hi), b));
}

/* bfloat16 |bits| -> all ones where the element goes into the partials (0 or in [LO, HI)) */
AVX2 static inline __m256i
bf16_ok(__m256i ab)
{
    const __m256i d = _mm256_sub_epi16(ab, _mm256_set1_epi16((short)BF16_LO));
    const __m256i in = _mm256_cmpeq_epi16(_mm256_min_epu16(d, _mm256_set1_epi16(BF16_HI - BF16_LO - 1)), d);
    return _mm256_or_si256(in, _mm256_cmpeq_epi16(ab, _mm256_setzero_si256()));
}

/*
 * The careful loop of bfloat16 (rows [i, end) of one segment): in-range elements into the partials
 * pr = {p0, p1, r0, r1}, the others into S and Q as float64 (0.0 for the rest: adding 0.0 leaves a lane
 * as it is). Two passes over the rows (the partials, then S and Q: separate sums, so the order between
 * them does not matter), in a function of their own, so that the accumulators stay in registers.
 * Returns whether any element was outside the range.
 */
AVX2 static inline __attribute__((always_inline)) int
bf16_careful_body(const unsigned char *restrict p, Py_ssize_t i, Py_ssize_t end, __m256 *restrict pr,
                  double *restrict S, double *restrict Q, __m256i *restrict tv, const int tally)
{
    const __m256i zi = _mm256_setzero_si256(), m7f = _mm256_set1_epi16(0x7fff);
    __m256 p0 = pr[0], p1 = pr[1], r0 = pr[2], r1 = pr[3];
    __m256i smx = tv[0], smn = tv[1], cn = tv[2], cz = tv[3];
    int any = 0;
    for (Py_ssize_t j = i; j < end; j += HLANES) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(p + 2 * j));
        __m256i ab = _mm256_and_si256(h, m7f);
        if (tally) {
            __m256i key = _mm256_sign_epi16(ab, h);
            smx = _mm256_max_epi16(smx, key);
            smn = _mm256_min_epi16(smn, key);
            cn = _mm256_add_epi16(cn, _mm256_srai_epi16(key, 15));
            cz = _mm256_sub_epi16(cz, _mm256_cmpeq_epi16(ab, zi));
        }
        __m256i ok = bf16_ok(ab);
        any |= _mm256_movemask_epi8(ok) != -1;
        __m256i w = _mm256_and_si256(h, ok);
        __m256 a0 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zi, w));
        __m256 a1 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zi, w));
        p0 = _mm256_add_ps(p0, a0);
        p1 = _mm256_add_ps(p1, a1);
        r0 = _mm256_fmadd_ps(a0, a0, r0);
        r1 = _mm256_fmadd_ps(a1, a1, r1);
    }
    pr[0] = p0, pr[1] = p1, pr[2] = r0, pr[3] = r1;
    tv[0] = smx, tv[1] = smn, tv[2] = cn, tv[3] = cz;
    if (!any)
        return 0;
    /* lanes 0-3, 8-11 (low and high half of the unpacklo vector), 4-7, 12-15 */
    __m256d sv0 = _mm256_loadu_pd(S + 0), sv1 = _mm256_loadu_pd(S + 8);
    __m256d sv2 = _mm256_loadu_pd(S + 4), sv3 = _mm256_loadu_pd(S + 12);
    __m256d qv0 = _mm256_loadu_pd(Q + 0), qv1 = _mm256_loadu_pd(Q + 8);
    __m256d qv2 = _mm256_loadu_pd(Q + 4), qv3 = _mm256_loadu_pd(Q + 12);
    for (; i < end; i += HLANES) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(p + 2 * i));
        __m256i ok = bf16_ok(_mm256_and_si256(h, m7f));
        if (_mm256_movemask_epi8(ok) == -1)
            continue;
        __m256i w = _mm256_andnot_si256(ok, h);
        __m256 e0 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zi, w));
        __m256 e1 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zi, w));
        __m256d x0 = _mm256_cvtps_pd(_mm256_castps256_ps128(e0));
        __m256d x1 = _mm256_cvtps_pd(_mm256_extractf128_ps(e0, 1));
        __m256d x2 = _mm256_cvtps_pd(_mm256_castps256_ps128(e1));
        __m256d x3 = _mm256_cvtps_pd(_mm256_extractf128_ps(e1, 1));
        sv0 = _mm256_add_pd(sv0, x0);
        sv1 = _mm256_add_pd(sv1, x1);
        sv2 = _mm256_add_pd(sv2, x2);
        sv3 = _mm256_add_pd(sv3, x3);
        qv0 = _mm256_fmadd_pd(x0, x0, qv0); /* exact square: one rounding either way */
        qv1 = _mm256_fmadd_pd(x1, x1, qv1);
        qv2 = _mm256_fmadd_pd(x2, x2, qv2);
        qv3 = _mm256_fmadd_pd(x3, x3, qv3);
    }
    _mm256_storeu_pd(S + 0, sv0);
    _mm256_storeu_pd(S + 8, sv1);
    _mm256_storeu_pd(S + 4, sv2);
    _mm256_storeu_pd(S + 12, sv3);
    _mm256_storeu_pd(Q + 0, qv0);
    _mm256_storeu_pd(Q + 8, qv1);
    _mm256_storeu_pd(Q + 4, qv2);
    _mm256_storeu_pd(Q + 12, qv3);
    return 1;
}

/* tv = {max key, min key, neg counter, zero counter}, tallied too when the segment starts careful */
AVX2 static __attribute__((noinline)) int
bf16_careful(const unsigned char *restrict p, Py_ssize_t i, Py_ssize_t end, __m256 *restrict pr,
             double *restrict S, double *restrict Q)
{
    __m256i tv[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(),
                     _mm256_setzero_si256()};
    return bf16_careful_body(p, i, end, pr, S, Q, tv, 0);
}

AVX2 static __attribute__((noinline)) int
bf16_careful_tally(const unsigned char *restrict p, Py_ssize_t i, Py_ssize_t end, __m256 *restrict pr,
                   double *restrict S, double *restrict Q, __m256i *restrict tv)
{
    return bf16_careful_body(p, i, end, pr, S, Q, tv, 1);
}

AVX2 static inline __attribute__((always_inline)) void
half_avx2(const unsigned char *restrict p, Py_ssize_t n, unsigned pos, double *restrict st,
          tally_t *restrict t, const int bf)
{
    hstate_t s;
    htally_t ht = {0, 0, -32768, 32767};
    hstate_load(&s, st);
    Py_ssize_t i = 0;
    for (; i < n && (pos & (HLANES - 1)); i++) {
        half_put(&s, &ht, pos & (HLANES - 1), ld_u16(p, i), bf);
        if (++pos == HBLOCK) {
            hstate_flush(&s);
            pos = 0;
        }
    }
    if (n - i >= HLANES) {
        const int o0l = 0, o0h = bf ? 8 : 4, o1l = bf ? 4 : 8, o1h = 12; /* lanes of the 128-bit halves */
        __m256 p0 = ld_lanes8(s.P, o0l, o0h), p1 = ld_lanes8(s.P, o1l, o1h);
        __m256 r0 = ld_lanes8(s.R, o0l, o0h), r1 = ld_lanes8(s.R, o1l, o1h);
        const __m256i zi = _mm256_setzero_si256(), m7f = _mm256_set1_epi16(0x7fff);
        const __m256i one = _mm256_set1_epi16(1), all = _mm256_cmpeq_epi16(zi, zi);
        const __m256i kmin = _mm256_set1_epi16(-32768), kmax = _mm256_set1_epi16(32767);
        __m256i kmx = kmin, kmn = kmax, cn32 = zi, cz32 = zi;
        int careful = 0; /* bfloat16: the last segment had elements outside the range */
        while (n - i >= HLANES) {
            Py_ssize_t rows = (n - i) / HLANES;
            const Py_ssize_t left = (HBLOCK - pos) / HLANES;
            if (rows > left)
                rows = left;
            const Py_ssize_t start = i, end = i + rows * HLANES;
            const __m256 p0s = p0, p1s = p1, r0s = r0, r1s = r1;
            __m256i cn = zi, cz = zi, smx = kmin, smn = kmax, tiny = all;
            int tallied = 0;
            if (!careful) {
                tallied = 1;
                for (; i < end; i += HLANES) {
                    const unsigned char *q = p + 2 * i;
                    __m256i h = _mm256_loadu_si256((const __m256i *)q);
                    __m256 a0, a1;
                    if (bf) {
                        a0 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zi, h));
                        a1 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zi, h));
                    }
                    else {
                        a0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)q));
                        a1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(q + 16)));
                    }
                    p0 = _mm256_add_ps(p0, a0);
                    p1 = _mm256_add_ps(p1, a1);
                    r0 = _mm256_fmadd_ps(a0, a0, r0);
                    r1 = _mm256_fmadd_ps(a1, a1, r1);
                    __m256i ab = _mm256_and_si256(h, m7f);
                    __m256i key = _mm256_sign_epi16(ab, h);
                    smx = _mm256_max_epi16(smx, key);
                    smn = _mm256_min_epi16(smn, key);
                    cn = _mm256_add_epi16(cn, _mm256_srai_epi16(key, 15));
                    cz = _mm256_sub_epi16(cz, _mm256_cmpeq_epi16(ab, zi));
                    if (bf)
                        tiny = _mm256_min_epu16(tiny, _mm256_sub_epi16(ab, one));
                }
                if (bf) {
                    /* any key >= HI or <= -HI (huge, inf, NaN), any nonzero |bits| < LO (tiny)? */
                    __m256i out = _mm256_or_si256(
                        _mm256_or_si256(_mm256_cmpgt_epi16(smx, _mm256_set1_epi16(BF16_HI - 1)),
                                        _mm256_cmpgt_epi16(_mm256_set1_epi16(1 - (int)BF16_HI), smn)),
                        _mm256_cmpeq_epi16(_mm256_min_epu16(tiny, _mm256_set1_epi16(BF16_LO - 2)), tiny));
                    careful = !_mm256_testz_si256(out, out);
                    if (careful) { /* the sums again, carefully, from the segment's start */
                        p0 = p0s, p1 = p1s, r0 = r0s, r1 = r1s;
                        i = start;
                    }
                }
            }
            if (bf && careful) {
                __m256 pr[4] = {p0, p1, r0, r1};
                /* the next segment starts careful only if this one needed it */
                if (tallied) {
                    careful = bf16_careful(p, i, end, pr, s.S, s.Q);
                }
                else {
                    __m256i tv[4] = {smx, smn, cn, cz};
                    careful = bf16_careful_tally(p, i, end, pr, s.S, s.Q, tv);
                    smx = tv[0], smn = tv[1], cn = tv[2], cz = tv[3];
                }
                p0 = pr[0], p1 = pr[1], r0 = pr[2], r1 = pr[3];
                i = end;
            }
            kmx = _mm256_max_epi16(kmx, smx);
            kmn = _mm256_min_epi16(kmn, smn);
            cn32 = _mm256_add_epi32(cn32, _mm256_madd_epi16(cn, one));
            cz32 = _mm256_add_epi32(cz32, _mm256_madd_epi16(cz, one));
            pos += (unsigned)(rows * HLANES);
            if (pos == HBLOCK) {
                flush_lanes8(s.S, o0l, o0h, p0);
                flush_lanes8(s.S, o1l, o1h, p1);
                flush_lanes8(s.Q, o0l, o0h, r0);
                flush_lanes8(s.Q, o1l, o1h, r1);
                p0 = p1 = r0 = r1 = _mm256_setzero_ps();
                pos = 0;
            }
        }
        int16_t a[16], b[16];
        _mm256_storeu_si256((__m256i *)a, kmx);
        _mm256_storeu_si256((__m256i *)b, kmn);
        for (int j = 0; j < 16; j++) {
            ht.kmx = a[j] > ht.kmx ? a[j] : ht.kmx;
            ht.kmn = b[j] < ht.kmn ? b[j] : ht.kmn;
        }
        ht.neg -= hsum_epi32(cn32);
        ht.zero += hsum_epi32(cz32);
        st_lanes8(s.P, o0l, o0h, p0);
        st_lanes8(s.P, o1l, o1h, p1);
        st_lanes8(s.R, o0l, o0h, r0);
        st_lanes8(s.R, o1l, o1h, r1);
    }
    for (; i < n; i++, pos++) /* less than a row: pos stays inside the block */
        half_put(&s, &ht, pos & (HLANES - 1), ld_u16(p, i), bf);
    hstate_store(&s, st);
    htally_out(&ht, n, bf, t);
}

AVX2 static void
a_f16(const unsigned char *restrict p, Py_ssize_t n, unsigned pos, double *restrict st, tally_t *restrict t)
{
    half_avx2(p, n, pos, st, t, 0);
}

AVX2 static void
a_bf16(const unsigned char *restrict p, Py_ssize_t n, unsigned pos, double *restrict st,
       tally_t *restrict t)
{
    half_avx2(p, n, pos, st, t, 1);
}
static const half_fn avx2_half_kernels[2] = {a_f16, a_bf16};

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

AVX_I32_KERNEL(d_i8, ld8_i8, int8_t)
AVX_I32_KERNEL(d_u8, ld8_u8, uint8_t)
AVX_I32_KERNEL(a_i16, ld8_i16, int16_t)
AVX_I32_KERNEL(a_u16, ld8_u16, uint16_t)
AVX_I32_KERNEL(a_i32, ld8_i32, int32_t)

/* The signed and the unsigned kernel of one implementation (its last argument: signed or not). */
#define KERNEL_PAIR(SIGNED, UNSIGNED, IMPL)                                                            \
    AVX2 static void SIGNED(const unsigned char *restrict p, Py_ssize_t n, unsigned phase,              \
                            double *restrict ls, double *restrict lq, tally_t *restrict t)            \
    {                                                                                                  \
        IMPL(p, n, phase, ls, lq, t, 1);                                                               \
    }                                                                                                  \
    AVX2 static void UNSIGNED(const unsigned char *restrict p, Py_ssize_t n, unsigned phase,            \
                              double *restrict ls, double *restrict lq, tally_t *restrict t)          \
    {                                                                                                  \
        IMPL(p, n, phase, ls, lq, t, 0);                                                               \
    }

/*
 * uint32: AVX2 has no unsigned conversion to float64, but flipping the top bit makes a signed int32 whose
 * float64 value plus 2^31 is the exact value of x (both exact, the sum below 2^32); max and min in
 * unsigned compares. Otherwise as AVX_I32_KERNEL.
 */
AVX2 static void
a_u32(const unsigned char *restrict p, Py_ssize_t n, unsigned phase, double *restrict ls, double *restrict lq,
      tally_t *restrict t)
{
    Py_ssize_t i = 0;
    int64_t zero = 0;
    uint32_t imx = 0, imn = UINT32_MAX;
    for (; phase != 0 && i < n; i++, phase = (phase + 1) & (LANES - 1)) {
        uint32_t v;
        memcpy(&v, p + 4 * i, 4);
        double x = (double)v;
        ls[phase] += x;
        lq[phase] += x * x;
        imx = v > imx ? v : imx;
        imn = v < imn ? v : imn;
        zero += v == 0;
    }
    if (n - i >= LANES) {
        __m256d s0 = _mm256_loadu_pd(ls), s1 = _mm256_loadu_pd(ls + 4);
        __m256d q0 = _mm256_loadu_pd(lq), q1 = _mm256_loadu_pd(lq + 4);
        __m256i vmx = _mm256_setzero_si256(), vmn = _mm256_set1_epi32(-1);
        const __m256i z = _mm256_setzero_si256(), top = _mm256_set1_epi32(INT32_MIN);
        const __m256d two31 = _mm256_set1_pd(2147483648.0);
        while (n - i >= LANES) {
            Py_ssize_t len = (n - i) & ~(Py_ssize_t)(LANES - 1);
            if (len > CHUNK)
                len = CHUNK;
            const Py_ssize_t end = i + len;
            __m256i cz = _mm256_setzero_si256();
            for (; i < end; i += LANES) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(p + 4 * i));
                __m256i w = _mm256_xor_si256(v, top);
                __m256d lo = _mm256_add_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(w)), two31);
                __m256d hi = _mm256_add_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(w, 1)), two31);
                s0 = _mm256_add_pd(s0, lo);
                s1 = _mm256_add_pd(s1, hi);
                q0 = _mm256_add_pd(q0, _mm256_mul_pd(lo, lo));
                q1 = _mm256_add_pd(q1, _mm256_mul_pd(hi, hi));
                vmx = _mm256_max_epu32(v, vmx);
                vmn = _mm256_min_epu32(v, vmn);
                cz = _mm256_sub_epi32(cz, _mm256_cmpeq_epi32(v, z));
            }
            zero += hsum_epi32(cz);
        }
        _mm256_storeu_pd(ls, s0);
        _mm256_storeu_pd(ls + 4, s1);
        _mm256_storeu_pd(lq, q0);
        _mm256_storeu_pd(lq + 4, q1);
        uint32_t a[8], b[8];
        _mm256_storeu_si256((__m256i *)a, vmx);
        _mm256_storeu_si256((__m256i *)b, vmn);
        for (int j = 0; j < 8; j++) {
            imx = a[j] > imx ? a[j] : imx;
            imn = b[j] < imn ? b[j] : imn;
        }
    }
    for (unsigned l = 0; i < n; i++, l++) {
        uint32_t v;
        memcpy(&v, p + 4 * i, 4);
        double x = (double)v;
        ls[l] += x;
        lq[l] += x * x;
        imx = v > imx ? v : imx;
        imn = v < imn ? v : imn;
        zero += v == 0;
    }
    t->zero += zero;
    t->mx = (double)imx;
    t->mn = (double)imn;
}

/*
 * int64 / uint64: AVX2 converts 64-bit integers to float64 only through the bits. For -2^51 <= x < 2^51
 * (uint64: x < 2^52), the integer sum of x and the bits of M = 2^52 + 2^51 (uint64: M = 2^52) is the
 * float64 M + x exactly, and subtracting M leaves (double)x. A row of 8 with an element outside that
 * range converts as high * 2^32 + low (words_to_double), which rounds as the C cast does. The float64
 * additions are the same as the portable kernel's. Max and min use 64-bit signed compares (uint64 with
 * the top bit flipped, which orders unsigned values as signed ones).
 */
/* (double)x of 4 64-bit integers, rounded like the C cast: x = high * 2^32 + low, both halves exact in
   float64 (high signed for int64), high * 2^32 exact, so the one addition is the only rounding. */
AVX2 static inline __m256d
words_to_double(__m256i x, const int sgn)
{
    const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7); /* low dwords, then high dwords */
    const __m128i top = _mm_set1_epi32(INT32_MIN);
    const __m256d two31 = _mm256_set1_pd(2147483648.0), two32 = _mm256_set1_pd(4294967296.0);
    const __m256i t = _mm256_permutevar8x32_epi32(x, split);
    const __m128i low = _mm256_castsi256_si128(t), high = _mm256_extracti128_si256(t, 1);
    const __m256d lo = _mm256_add_pd(_mm256_cvtepi32_pd(_mm_xor_si128(low, top)), two31);
    const __m256d hi = sgn ? _mm256_cvtepi32_pd(high)
                           : _mm256_add_pd(_mm256_cvtepi32_pd(_mm_xor_si128(high, top)), two31);
    return _mm256_add_pd(_mm256_mul_pd(hi, two32), lo);
}

AVX2 static inline __attribute__((always_inline)) void
words_avx2(const unsigned char *restrict p, Py_ssize_t n, unsigned phase, double *restrict ls,
           double *restrict lq, tally_t *restrict t, const int sgn)
{
    Py_ssize_t i = 0;
    int64_t neg = 0, zero = 0;
    /* max and min kept in the flipped (signed-ordered) domain */
    const uint64_t flip = sgn ? 0 : (uint64_t)1 << 63;
    int64_t fmx = INT64_MIN, fmn = INT64_MAX;
#define WORD_STEP(k, l)                                                                                \
    do {                                                                                               \
        uint64_t u;                                                                                    \
        memcpy(&u, p + 8 * (k), 8);                                                                    \
        double x = sgn ? (double)(int64_t)u : (double)u;                                               \
        ls[l] += x;                                                                                    \
        lq[l] += x * x;                                                                                \
        int64_t f = (int64_t)(u ^ flip);                                                               \
        fmx = f > fmx ? f : fmx;                                                                       \
        fmn = f < fmn ? f : fmn;                                                                       \
        neg += sgn && (int64_t)u < 0;                                                                  \
        zero += u == 0;                                                                                \
    } while (0)
    for (; phase != 0 && i < n; i++, phase = (phase + 1) & (LANES - 1))
        WORD_STEP(i, phase);
    if (n - i >= LANES) {
        __m256d s0 = _mm256_loadu_pd(ls), s1 = _mm256_loadu_pd(ls + 4);
        __m256d q0 = _mm256_loadu_pd(lq), q1 = _mm256_loadu_pd(lq + 4);
        const __m256i z = _mm256_setzero_si256(), vflip = _mm256_set1_epi64x((long long)flip);
        const __m256i bias = _mm256_set1_epi64x(sgn ? (long long)1 << 51 : 0);
        const __m256i magic = _mm256_set1_epi64x(sgn ? 0x4338000000000000LL : 0x4330000000000000LL);
        const __m256d magic_d = _mm256_set1_pd(sgn ? 6755399441055744.0 : 4503599627370496.0);
        __m256i vmx = _mm256_set1_epi64x(INT64_MIN), vmn = _mm256_set1_epi64x(INT64_MAX);
        __m256i cn = z, cz = z;
        for (; n - i >= LANES; i += LANES) {
            const __m256i x0 = _mm256_loadu_si256((const __m256i *)(p + 8 * i));
            const __m256i x1 = _mm256_loadu_si256((const __m256i *)(p + 8 * i + 32));
            const __m256i r = _mm256_or_si256(_mm256_srli_epi64(_mm256_add_epi64(x0, bias), 52),
                                              _mm256_srli_epi64(_mm256_add_epi64(x1, bias), 52));
            __m256d lo, hi;
            if (_mm256_testz_si256(r, r)) {
                lo = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_add_epi64(x0, magic)), magic_d);
                hi = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_add_epi64(x1, magic)), magic_d);
            }
            else {
                lo = words_to_double(x0, sgn);
                hi = words_to_double(x1, sgn);
            }
            s0 = _mm256_add_pd(s0, lo);
            s1 = _mm256_add_pd(s1, hi);
            q0 = _mm256_add_pd(q0, _mm256_mul_pd(lo, lo));
            q1 = _mm256_add_pd(q1, _mm256_mul_pd(hi, hi));
            const __m256i f0 = _mm256_xor_si256(x0, vflip), f1 = _mm256_xor_si256(x1, vflip);
            vmx = _mm256_blendv_epi8(vmx, f0, _mm256_cmpgt_epi64(f0, vmx));
            vmx = _mm256_blendv_epi8(vmx, f1, _mm256_cmpgt_epi64(f1, vmx));
            vmn = _mm256_blendv_epi8(vmn, f0, _mm256_cmpgt_epi64(vmn, f0));
            vmn = _mm256_blendv_epi8(vmn, f1, _mm256_cmpgt_epi64(vmn, f1));
            if (sgn) {
                cn = _mm256_sub_epi64(cn, _mm256_cmpgt_epi64(z, x0));
                cn = _mm256_sub_epi64(cn, _mm256_cmpgt_epi64(z, x1));
            }
            cz = _mm256_sub_epi64(cz, _mm256_cmpeq_epi64(x0, z));
            cz = _mm256_sub_epi64(cz, _mm256_cmpeq_epi64(x1, z));
        }
        _mm256_storeu_pd(ls, s0);
        _mm256_storeu_pd(ls + 4, s1);
        _mm256_storeu_pd(lq, q0);
        _mm256_storeu_pd(lq + 4, q1);
        neg += hsum_epi64(cn);
        zero += hsum_epi64(cz);
        int64_t a[4], b[4];
        _mm256_storeu_si256((__m256i *)a, vmx);
        _mm256_storeu_si256((__m256i *)b, vmn);
        for (int j = 0; j < 4; j++) {
            fmx = a[j] > fmx ? a[j] : fmx;
            fmn = b[j] < fmn ? b[j] : fmn;
        }
    }
    for (unsigned l = 0; i < n; i++, l++)
        WORD_STEP(i, l);
#undef WORD_STEP
    t->neg += neg;
    t->zero += zero;
    if (n) {
        uint64_t umx = (uint64_t)fmx ^ flip, umn = (uint64_t)fmn ^ flip;
        t->mx = sgn ? (double)(int64_t)umx : (double)umx;
        t->mn = sgn ? (double)(int64_t)umn : (double)umn;
    }
}

KERNEL_PAIR(a_i64, a_u64, words_avx2)

/*
 * int8 / uint8, exactly: every lane sum of these kinds is an integer, and while a lane's sums stay
 * below 2^53 each float64 addition the definition makes is exact, so the lane holds the exact integer
 * sum whatever the order of the additions. This kernel therefore sums in integers (int32 vector slots,
 * folded into int64 per lane every BYTE_ROWS rows of 32 bytes) and adds each lane's exact sums to its
 * float64 lanes at the end: the same bits as the float64 kernels, several times faster (those are
 * bound by one float64 addition chain per 4 lanes). Where a lane could pass 2^52 during the call
 * (tensors of about 2^40 elements, or lanes already that big), the float64 kernel runs instead.
 *
 * A row of 32 bytes holds lanes 0-7 four times (it starts at a lane-0 element). Widened to 16-bit
 * halves lo (bytes 0-15) and hi (16-31), unpacklo(lo, hi) pairs the bytes of lanes 0-3 (in both 128-bit
 * halves) and unpackhi those of lanes 4-7; madd of a pair with itself is the sum of the two squares,
 * with ones the sum of the two values, both into int32 slots of the pair's lane.
 */
#define BYTE_ROWS 240 /* 8-bit neg/zero counters take one per row: flushed before they wrap */

AVX2 static inline int64_t
hsum_epu8_counts(__m256i c)
{
    return hsum_epi64(_mm256_sad_epu8(c, _mm256_setzero_si256()));
}

/* lanes 0-3 from the two halves of a (unpacklo layout), 4-7 from b, into acc[0..7] */
AVX2 static inline void
fold_pair_lanes(__m256i a, __m256i b, int64_t *acc)
{
    int32_t x[8], y[8];
    _mm256_storeu_si256((__m256i *)x, a);
    _mm256_storeu_si256((__m256i *)y, b);
    for (int j = 0; j < 4; j++) {
        acc[j] += (int64_t)x[j] + x[j + 4];
        acc[j + 4] += (int64_t)y[j] + y[j + 4];
    }
}

/*
 * What the exact kernels (bytes_exact, words_exact) share: the guard that the lanes stay exact, the
 * elements they take one by one (before a row starts at lane 0, and after the last whole row), and
 * how they hand over their sums and tally.
 */
typedef struct {
    int64_t neg, zero;
    int mx, mn;
    int have; /* any element seen (max/min of none stay -inf/+inf) */
} exact_tally_t;

/* Whether every lane's sums stay below 2^52 over n more elements of at most max_abs in magnitude and
   max_sq squared: a float64 addition of integers is exact there. */
static inline int
lanes_stay_exact(const double *ls, const double *lq, Py_ssize_t n, double max_abs, double max_sq)
{
    const double big = 4503599627370496.0; /* 2^52 */
    const double per = (double)(n / LANES + 2);
    for (int j = 0; j < LANES; j++)
        if (fabs(ls[j]) + per * max_abs > big || lq[j] + per * max_sq > big)
            return 0;
    return 1;
}

/* One element v of lane l, added as the float64 kernels add it. */
static inline void
exact_step(int v, unsigned l, double *restrict ls, double *restrict lq, exact_tally_t *e)
{
    double x = (double)v;
    ls[l] += x;
    lq[l] += x * x;
    e->mx = v > e->mx ? v : e->mx;
    e->mn = v < e->mn ? v : e->mn;
    e->neg += v < 0;
    e->zero += v == 0;
    e->have = 1;
}

/* Each lane's exact integer sums S and Q into its float64 lanes. */
static inline void
exact_lanes_add(double *restrict ls, double *restrict lq, const int64_t *S, const int64_t *Q)
{
    for (int j = 0; j < LANES; j++) {
        ls[j] += (double)S[j]; /* exact: both integers, the result below 2^53 */
        lq[j] += (double)Q[j];
    }
}

/* The max and min of the vectors vmx and vmn (of 8-bit or 16-bit elements, signed or not) into e. */
AVX2 static inline void
exact_extremes(exact_tally_t *e, __m256i vmx, __m256i vmn, int width, int sgn)
{
    unsigned char a[32], b[32];
    _mm256_storeu_si256((__m256i *)a, vmx);
    _mm256_storeu_si256((__m256i *)b, vmn);
    for (int j = 0; j < 32 / width; j++) {
        int x, y;
        if (width == 1) {
            x = sgn ? (int)(int8_t)a[j] : (int)a[j];
            y = sgn ? (int)(int8_t)b[j] : (int)b[j];
        }
        else {
            x = sgn ? (int)ld_i16(a, j) : (int)ld_u16(a, j);
            y = sgn ? (int)ld_i16(b, j) : (int)ld_u16(b, j);
        }
        e->mx = x > e->mx ? x : e->mx;
        e->mn = y < e->mn ? y : e->mn;
    }
    e->have = 1;
}

static inline void
exact_tally_out(const exact_tally_t *e, tally_t *t)
{
    t->neg += e->neg;
    t->zero += e->zero;
    if (e->have) {
        t->mx = (double)e->mx;
        t->mn = (double)e->mn;
    }
}

AVX2 static inline __attribute__((always_inline)) void
bytes_exact(const unsigned char *restrict p, Py_ssize_t n, unsigned phase, double *restrict ls,
            double *restrict lq, tally_t *restrict t, const int sgn)
{
    /* the largest |x| and x * x of the kind; a lane's sums grow by at most that per element */
    if (!lanes_stay_exact(ls, lq, n, sgn ? 128.0 : 255.0, sgn ? 16384.0 : 65025.0)) {
        if (sgn)
            d_i8(p, n, phase, ls, lq, t);
        else
            d_u8(p, n, phase, ls, lq, t);
        return;
    }
    Py_ssize_t i = 0;
    exact_tally_t e = {0, 0, sgn ? -128 : 0, sgn ? 127 : 255, 0};
#define BYTE_AT(k) (sgn ? (int)(int8_t)p[k] : (int)p[k])
    for (; phase != 0 && i < n; i++, phase = (phase + 1) & (LANES - 1))
        exact_step(BYTE_AT(i), phase, ls, lq, &e);
    if (n - i >= 32) {
        int64_t S[LANES] = {0}, Q[LANES] = {0};
        const __m256i z = _mm256_setzero_si256(), one16 = _mm256_set1_epi16(1);
        __m256i vmx = _mm256_set1_epi8(sgn ? -128 : 0), vmn = _mm256_set1_epi8(sgn ? 127 : (char)255);
        while (n - i >= 32) {
            Py_ssize_t rows = (n - i) / 32;
            if (rows > BYTE_ROWS)
                rows = BYTE_ROWS;
            const Py_ssize_t end = i + rows * 32;
            __m256i sa = z, sb = z, qa = z, qb = z, cn = z, cz = z;
            for (; i < end; i += 32) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(p + i));
                const __m128i v0 = _mm256_castsi256_si128(v), v1 = _mm256_extracti128_si256(v, 1);
                const __m256i lo = sgn ? _mm256_cvtepi8_epi16(v0) : _mm256_cvtepu8_epi16(v0);
                const __m256i hi = sgn ? _mm256_cvtepi8_epi16(v1) : _mm256_cvtepu8_epi16(v1);
                const __m256i u0 = _mm256_unpacklo_epi16(lo, hi), u1 = _mm256_unpackhi_epi16(lo, hi);
                sa = _mm256_add_epi32(sa, _mm256_madd_epi16(u0, one16));
                sb = _mm256_add_epi32(sb, _mm256_madd_epi16(u1, one16));
                qa = _mm256_add_epi32(qa, _mm256_madd_epi16(u0, u0));
                qb = _mm256_add_epi32(qb, _mm256_madd_epi16(u1, u1));
                if (sgn) {
                    vmx = _mm256_max_epi8(vmx, v);
                    vmn = _mm256_min_epi8(vmn, v);
                    cn = _mm256_sub_epi8(cn, _mm256_cmpgt_epi8(z, v));
                }
                else {
                    vmx = _mm256_max_epu8(vmx, v);
                    vmn = _mm256_min_epu8(vmn, v);
                }
                cz = _mm256_sub_epi8(cz, _mm256_cmpeq_epi8(v, z));
            }
            /* an int32 slot takes two elements a row: sums within 240 * 2 * 255, squares 240 * 2 * 65025 */
            fold_pair_lanes(sa, sb, S);
            fold_pair_lanes(qa, qb, Q);
            e.neg += hsum_epu8_counts(cn);
            e.zero += hsum_epu8_counts(cz);
        }
        exact_lanes_add(ls, lq, S, Q);
        exact_extremes(&e, vmx, vmn, 1, sgn);
    }
    for (unsigned l = 0; i < n; i++, l = (l + 1) & (LANES - 1)) /* up to 31 elements: lanes wrap */
        exact_step(BYTE_AT(i), l, ls, lq, &e);
#undef BYTE_AT
    exact_tally_out(&e, t);
}

KERNEL_PAIR(a_i8, a_u8, bytes_exact)

/*
 * int16 / uint16, exactly, as bytes_exact: a lane's sums are integers, exact in float64 below 2^53, so
 * summing them in integers gives the float64 kernel's bits (which is bound by its addition chains:
 * int16 ran at 0.3-0.45x a page-cache read). Two rows of 16 elements at a time (each row holds lanes
 * 0-7 twice): unpacklo(A, B) pairs the words of lanes 0-3 (in both 128-bit halves), unpackhi those of
 * lanes 4-7, as bytes_exact's pairs, and madd sums a pair (with ones) or its two squares (with itself).
 * uint16 does not fit madd's signed words: it sums y = x - 32768 (the top bit flipped) and its squares,
 * and adds back 32768 a lane element for the sum and 65536 * y + 2^30 for the square. A square pair of
 * int16 reaches 2^31 (two -32768): its int32 slot is read as unsigned and widened to int64 at once.
 */
#define WORD_ROWS 8192 /* pairs of rows between flushes: 16-bit counters take two a pair */

/* the even and the odd unsigned 32-bit slots of v, as int64 */
AVX2 static inline void
add_u32_slots(__m256i v, __m256i *even, __m256i *odd)
{
    *even = _mm256_add_epi64(*even, _mm256_and_si256(v, _mm256_set1_epi64x(0xffffffff)));
    *odd = _mm256_add_epi64(*odd, _mm256_srli_epi64(v, 32));
}

/* lanes of the unpacklo layout (slots 0-3 of each half: lanes 0-3) from its even and odd int64 sums */
AVX2 static inline void
fold_u32_slots(__m256i even, __m256i odd, int64_t *acc)
{
    int64_t e[4], o[4];
    _mm256_storeu_si256((__m256i *)e, even);
    _mm256_storeu_si256((__m256i *)o, odd);
    /* e holds slots 0, 2 (low half) and 4, 6 (high half): lanes 0, 2, 0, 2; o lanes 1, 3, 1, 3 */
    acc[0] += e[0] + e[2];
    acc[2] += e[1] + e[3];
    acc[1] += o[0] + o[2];
    acc[3] += o[1] + o[3];
}

AVX2 static inline __attribute__((always_inline)) void
words_exact(const unsigned char *restrict p, Py_ssize_t n, unsigned phase, double *restrict ls,
            double *restrict lq, tally_t *restrict t, const int sgn)
{
    if (!lanes_stay_exact(ls, lq, n, sgn ? 32768.0 : 65535.0, sgn ? 1073741824.0 : 4294836225.0)) {
        if (sgn)
            a_i16(p, n, phase, ls, lq, t);
        else
            a_u16(p, n, phase, ls, lq, t);
        return;
    }
    Py_ssize_t i = 0;
    exact_tally_t e = {0, 0, sgn ? -32768 : 0, sgn ? 32767 : 65535, 0};
#define WORD_AT(k) (sgn ? (int)ld_i16(p, k) : (int)ld_u16(p, k))
    for (; phase != 0 && i < n; i++, phase = (phase + 1) & (LANES - 1))
        exact_step(WORD_AT(i), phase, ls, lq, &e);
    if (n - i >= 32) {
        int64_t S[LANES] = {0}, Q[LANES] = {0}, per_lane = 0;
        const __m256i z = _mm256_setzero_si256(), one16 = _mm256_set1_epi16(1);
        const __m256i flip = _mm256_set1_epi16((short)0x8000);
        __m256i vmx = sgn ? _mm256_set1_epi16(-32768) : z;
        __m256i vmn = sgn ? _mm256_set1_epi16(32767) : _mm256_set1_epi16(-1);
        __m256i qe_a = z, qo_a = z, qe_b = z, qo_b = z;
        while (n - i >= 32) {
            Py_ssize_t pairs = (n - i) / 32;
            if (pairs > WORD_ROWS)
                pairs = WORD_ROWS;
            const Py_ssize_t end = i + pairs * 32;
            __m256i sa = z, sb = z, cn = z, cz = z;
            for (; i < end; i += 32) {
                const __m256i a = _mm256_loadu_si256((const __m256i *)(p + 2 * i));
                const __m256i b = _mm256_loadu_si256((const __m256i *)(p + 2 * i + 32));
                if (sgn) {
                    vmx = _mm256_max_epi16(vmx, _mm256_max_epi16(a, b));
                    vmn = _mm256_min_epi16(vmn, _mm256_min_epi16(a, b));
                    cn = _mm256_sub_epi16(cn, _mm256_cmpgt_epi16(z, a));
                    cn = _mm256_sub_epi16(cn, _mm256_cmpgt_epi16(z, b));
                }
                else {
                    vmx = _mm256_max_epu16(vmx, _mm256_max_epu16(a, b));
                    vmn = _mm256_min_epu16(vmn, _mm256_min_epu16(a, b));
                }
                cz = _mm256_sub_epi16(cz, _mm256_cmpeq_epi16(a, z));
                cz = _mm256_sub_epi16(cz, _mm256_cmpeq_epi16(b, z));
                const __m256i ya = sgn ? a : _mm256_xor_si256(a, flip);
                const __m256i yb = sgn ? b : _mm256_xor_si256(b, flip);
                const __m256i u0 = _mm256_unpacklo_epi16(ya, yb), u1 = _mm256_unpackhi_epi16(ya, yb);
                sa = _mm256_add_epi32(sa, _mm256_madd_epi16(u0, one16));
                sb = _mm256_add_epi32(sb, _mm256_madd_epi16(u1, one16));
                add_u32_slots(_mm256_madd_epi16(u0, u0), &qe_a, &qo_a);
                add_u32_slots(_mm256_madd_epi16(u1, u1), &qe_b, &qo_b);
            }
            /* an int32 slot takes two elements a pair of rows: within 8192 * 2 * 32768 */
            fold_pair_lanes(sa, sb, S);
            e.neg += hsum_epi32(_mm256_madd_epi16(cn, one16)); /* counts up to 16384: positive words */
            e.zero += hsum_epi32(_mm256_madd_epi16(cz, one16));
            per_lane += 4 * pairs; /* each lane: 2 elements a row, 2 rows a pair */
        }
        fold_u32_slots(qe_a, qo_a, Q);
        fold_u32_slots(qe_b, qo_b, Q + 4);
        for (int j = 0; j < LANES && !sgn; j++) {
            /* x = y + 32768: sum x = sum y + 32768 m, sum x^2 = sum y^2 + 65536 sum y + 2^30 m */
            Q[j] += 65536 * S[j] + ((int64_t)1 << 30) * per_lane;
            S[j] += 32768 * per_lane;
        }
        exact_lanes_add(ls, lq, S, Q);
        exact_extremes(&e, vmx, vmn, 2, sgn);
    }
    for (unsigned l = 0; i < n; i++, l = (l + 1) & (LANES - 1)) /* up to 31 elements: lanes wrap */
        exact_step(WORD_AT(i), l, ls, lq, &e);
#undef WORD_AT
    exact_tally_out(&e, t);
}

KERNEL_PAIR(w_i16, w_u16, words_exact)


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

static const kernel_fn avx2_kernels[K_COUNT] = {NULL,  NULL,  a_f32, a_f64, a_i8,  w_i16,
                                                a_i32, a_i64, a_u8,  w_u16, a_u32, a_u64};
#endif

static const char *isa = "portable";

/* Below this many bytes the GIL stays held: releasing and retaking it costs more than it frees. */
#define NOGIL_BYTES (1 << 18)

/* What block() and mapped() return for a region of elements. */
typedef struct {
    int64_t neg, zero, nan, ninf, pinf;
    double mx, mn;
} region_t;

/* Every statistic of n elements at p into the running state st (see the top of this file). */
static void
compute_region(const unsigned char *p, Py_ssize_t n, int kind, unsigned phase, double *st, region_t *r)
{
    tally_t t = {0, 0, -INFINITY, INFINITY};
    const int half = kind == K_FLOAT16 || kind == K_BFLOAT16;
    r->nan = r->ninf = r->pinf = 0;
    if (n) {
        if (half)
            half_kernels[kind](p, n, phase, st, &t);
        else
            kernels[kind](p, n, phase & (LANES - 1), st + ST_S, st + ST_Q, &t);
    }
    if (n && kind <= K_FLOAT64) {
        /* a square lane (or partial) is NaN exactly when a NaN went into it, in this block or before */
        int any = 0;
        for (int j = 0; j < (half ? HLANES : LANES); j++)
            any |= (st[ST_Q + j] != st[ST_Q + j]) | (half && st[ST_R + j] != st[ST_R + j]);
        if (any && half) {
            /* NaN keys lie beyond the infinities' keys: max and min cannot tell whether there are any */
            hspecial_t sp;
            half_special_counts(p, n, kind == K_BFLOAT16, &sp);
            t.neg -= sp.neg_nan;
            r->nan = sp.nan;
            r->pinf = sp.pinf;
            r->ninf = sp.ninf;
        }
        else {
            if (any)
                r->nan = counters[kind](p, n, 1, 0.0);
            /* max and min skip NaN here (and nothing is NaN for the half kinds in this branch) */
            if (t.mx == INFINITY)
                r->pinf = counters[kind](p, n, 0, INFINITY);
            if (t.mn == -INFINITY)
                r->ninf = counters[kind](p, n, 0, -INFINITY);
        }
    }
    r->neg = t.neg;
    r->zero = t.zero;
    r->mx = t.mx;
    r->mn = t.mn;
}

static PyObject *
region_tuple(const region_t *r)
{
    return Py_BuildValue("(LLLLLdd)", (long long)r->neg, (long long)r->zero, (long long)r->nan,
                         (long long)r->ninf, (long long)r->pinf, r->mx, r->mn);
}

/* kind and phase arguments, checked; 0 or -1 with an exception set */
static int
parse_kind_phase(PyObject *kind_arg, PyObject *phase_arg, int *kind, unsigned *phase)
{
    long k = PyLong_AsLong(kind_arg);
    if (k == -1 && PyErr_Occurred())
        return -1;
    if (k < 0 || k >= K_COUNT) {
        PyErr_Format(PyExc_ValueError, "unknown kind %ld", k);
        return -1;
    }
    long ph = PyLong_AsLong(phase_arg);
    if (ph == -1 && PyErr_Occurred())
        return -1;
    if (ph < 0 || ph >= HBLOCK) {
        PyErr_Format(PyExc_ValueError, "phase %ld is not in 0..%d", ph, HBLOCK - 1);
        return -1;
    }
    *kind = (int)k;
    *phase = (unsigned)ph;
    return 0;
}

/* the lanes argument: a writable buffer of STATE float64 (released by the caller on success) */
static int
get_lanes(PyObject *obj, Py_buffer *lanes)
{
    if (PyObject_GetBuffer(obj, lanes, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        return -1;
    if (lanes->len != STATE * (Py_ssize_t)sizeof(double)) {
        PyBuffer_Release(lanes);
        PyErr_Format(PyExc_ValueError, "lanes must be a buffer of %d float64", STATE);
        return -1;
    }
    return 0;
}

static PyObject *
fs_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "block(buf, kind, phase, lanes) takes 4 arguments");
        return NULL;
    }
    int kind;
    unsigned phase;
    if (parse_kind_phase(args[1], args[2], &kind, &phase) < 0)
        return NULL;
    Py_buffer data, lanes;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (get_lanes(args[3], &lanes) < 0) {
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
    double st[STATE];
    memcpy(st, lanes.buf, sizeof st); /* the lanes buffer may be unaligned */
    region_t r;
    const int nogil = data.len >= NOGIL_BYTES;
    PyThreadState *ts = nogil ? PyEval_SaveThread() : NULL;
    compute_region((const unsigned char *)data.buf, data.len / size, kind, phase, st, &r);
    if (nogil)
        PyEval_RestoreThread(ts);
    memcpy(lanes.buf, st, sizeof st);
    result = region_tuple(&r);
done:
    PyBuffer_Release(&lanes);
    PyBuffer_Release(&data);
    return result;
}

#if HAVE_MAPPED
/*
 * mapped(fd, offset, nbytes, kind, phase, lanes): block() on bytes [offset, offset + nbytes) of an open
 * file, read through a read-only mapping of the page cache instead of a copy into a buffer (about twice
 * the speed for big tensors: the copy costs as much as the statistics).
 *
 * A mapped file that shrinks under the reader (a producer rewriting it in place) makes the kernel raise
 * SIGBUS on the missing pages, which would kill the process. While this thread reads a mapping, a
 * SIGBUS handler is installed; a fault inside the mapping jumps back here and the call raises EOFError
 * (tensor_stats reports the tensor as truncated). Any other SIGBUS goes to the handler there was
 * before (faulthandler's, or the default action). The handler is installed by the first reader in the
 * process and the previous one put back by the last.
 */
static _Thread_local sigjmp_buf *volatile bus_jump; /* set while this thread reads a mapping */
static _Thread_local const unsigned char *volatile bus_lo, *volatile bus_hi;
static struct sigaction bus_before;
static pthread_mutex_t bus_lock = PTHREAD_MUTEX_INITIALIZER;
static int bus_readers;

static void
on_sigbus(int sig, siginfo_t *info, void *ctx)
{
    (void)ctx;
    sigjmp_buf *jump = bus_jump;
    const unsigned char *a = info ? (const unsigned char *)info->si_addr : NULL;
    if (jump != NULL && a >= bus_lo && a < bus_hi) {
        bus_jump = NULL;
        siglongjmp(*jump, 1);
    }
    /* not a read of ours: the previous disposition takes it. A fault happens again when the faulting
       instruction runs again on return; a signal someone sent is raised again (blocked until return). */
    sigaction(SIGBUS, &bus_before, NULL);
    if (info == NULL || info->si_code <= 0)
        raise(sig);
}

static int
bus_enter(void)
{
    int rc = 0;
    pthread_mutex_lock(&bus_lock);
    if (bus_readers == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        rc = sigaction(SIGBUS, &sa, &bus_before);
    }
    if (rc == 0)
        bus_readers++;
    pthread_mutex_unlock(&bus_lock);
    return rc;
}

static void
bus_leave(void)
{
    pthread_mutex_lock(&bus_lock);
    if (--bus_readers == 0)
        sigaction(SIGBUS, &bus_before, NULL);
    pthread_mutex_unlock(&bus_lock);
}

/* compute_region over a mapping [base, base + len); -1 if the mapping faulted (st and r are then junk) */
static int
guarded_region(const unsigned char *base, size_t len, const unsigned char *p, Py_ssize_t n, int kind,
               unsigned phase, double *st, region_t *r)
{
    sigjmp_buf jump;
    if (sigsetjmp(jump, 1) != 0)
        return -1; /* the handler cleared bus_jump */
    bus_lo = base;
    bus_hi = base + len;
    bus_jump = &jump;
    atomic_signal_fence(memory_order_seq_cst); /* no read of the mapping before the guard is up */
    compute_region(p, n, kind, phase, st, r);
    atomic_signal_fence(memory_order_seq_cst);
    bus_jump = NULL;
    return 0;
}

static PyObject *
fs_mapped(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "mapped(fd, offset, nbytes, kind, phase, lanes) takes 6 arguments");
        return NULL;
    }
    int fd = PyObject_AsFileDescriptor(args[0]);
    if (fd < 0)
        return NULL;
    long long offset = PyLong_AsLongLong(args[1]);
    if (offset == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t nbytes = PyLong_AsSsize_t(args[2]);
    if (nbytes == -1 && PyErr_Occurred())
        return NULL;
    if (offset < 0 || nbytes < 0) {
        PyErr_SetString(PyExc_ValueError, "offset and nbytes must not be negative");
        return NULL;
    }
    int kind;
    unsigned phase;
    if (parse_kind_phase(args[3], args[4], &kind, &phase) < 0)
        return NULL;
    if (nbytes % kind_size[kind] != 0) {
        PyErr_Format(PyExc_ValueError, "%zd bytes are not a whole number of %s elements", nbytes,
                     kind_names[kind]);
        return NULL;
    }
    Py_buffer lanes;
    if (get_lanes(args[5], &lanes) < 0)
        return NULL;
    double st[STATE];
    memcpy(st, lanes.buf, sizeof st);
    region_t r;
    if (nbytes == 0) {
        compute_region(NULL, 0, kind, phase, st, &r);
        PyBuffer_Release(&lanes);
        return region_tuple(&r);
    }
    const long long page = sysconf(_SC_PAGESIZE);
    const long long start = offset - offset % page;
    const size_t len = (size_t)nbytes + (size_t)(offset - start);
    int err = 0, faulted = 0;
    if (bus_enter() != 0) {
        err = errno;
        goto out;
    }
    PyThreadState *ts = PyEval_SaveThread();
    void *map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, (off_t)start);
    if (map == MAP_FAILED) {
        err = errno;
    }
    else {
        const unsigned char *base = (const unsigned char *)map;
        faulted = guarded_region(base, len, base + (offset - start), nbytes / kind_size[kind], kind, phase, st,
                                 &r) != 0;
        munmap(map, len);
    }
    PyEval_RestoreThread(ts);
    bus_leave();
out:
    if (err) {
        PyBuffer_Release(&lanes);
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if (faulted) {
        PyBuffer_Release(&lanes);
        PyErr_SetString(PyExc_EOFError, "the file ended inside the tensor's data while it was read (truncated)");
        return NULL;
    }
    memcpy(lanes.buf, st, sizeof st);
    PyBuffer_Release(&lanes);
    return region_tuple(&r);
}
#endif

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

/* finish(lanes, kind) -> (sum, sum of squares): the lanes added left to right (a half kind's lane first
   takes the partials of its last, unfinished block), as tensor_stats' Python code does. */
static PyObject *
fs_finish(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "finish(lanes, kind) takes 2 arguments");
        return NULL;
    }
    long kind = PyLong_AsLong(args[1]);
    if (kind == -1 && PyErr_Occurred())
        return NULL;
    if (kind < 0 || kind >= K_COUNT) {
        PyErr_Format(PyExc_ValueError, "unknown kind %ld", kind);
        return NULL;
    }
    Py_buffer lanes;
    if (PyObject_GetBuffer(args[0], &lanes, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (lanes.len != STATE * (Py_ssize_t)sizeof(double)) {
        PyBuffer_Release(&lanes);
        PyErr_Format(PyExc_ValueError, "lanes must be a buffer of %d float64", STATE);
        return NULL;
    }
    double st[STATE];
    memcpy(st, lanes.buf, sizeof st);
    PyBuffer_Release(&lanes);
    double s, q;
    if (kind == K_FLOAT16 || kind == K_BFLOAT16) {
        s = st[ST_S] + st[ST_P];
        q = st[ST_Q] + st[ST_R];
        for (int j = 1; j < HLANES; j++) {
            s += st[ST_S + j] + st[ST_P + j];
            q += st[ST_Q + j] + st[ST_R + j];
        }
    }
    else {
        s = st[ST_S];
        q = st[ST_Q];
        for (int j = 1; j < LANES; j++) {
            s += st[ST_S + j];
            q += st[ST_Q + j];
        }
    }
    return Py_BuildValue("(dd)", s, q);
}

static PyMethodDef fs_methods[] = {
    {"block", (PyCFunction)(void (*)(void))fs_block, METH_FASTCALL,
     "block(buf, kind, phase, lanes) -> (neg, zero, nan, ninf, pinf, max, min); updates lanes in place."},
#if HAVE_MAPPED
    {"mapped", (PyCFunction)(void (*)(void))fs_mapped, METH_FASTCALL,
     "mapped(fd, offset, nbytes, kind, phase, lanes) -> block() on a file's bytes, read through a mapping; "
     "EOFError if the file shrinks while it is read."},
#endif
    {"finish", (PyCFunction)(void (*)(void))fs_finish, METH_FASTCALL,
     "finish(lanes, kind) -> (sum, sum of squares) of a tensor's lanes."},
    {"count", (PyCFunction)(void (*)(void))fs_count, METH_FASTCALL,
     "count(buf, kind, value) -> number of elements equal to value (float kinds)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fs_module = {
    PyModuleDef_HEAD_INIT, "_fused_stats",
    "One-pass tensor statistics kernels for ingest.statistics.kernel (see its module docstring).", -1,
    fs_methods,
};

PyMODINIT_FUNC
PyInit__fused_stats(void)
{
    build_f16_table();
#if HAVE_AVX2_CLONE
    /* DUMPCAT_STATS_PORTABLE=1 keeps the portable kernels (tests compare them with the AVX2 ones) */
    const char *portable = getenv("DUMPCAT_STATS_PORTABLE");
    __builtin_cpu_init();
    if (!(portable && *portable && strcmp(portable, "0") != 0) && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma")) {
        memcpy(kernels, avx2_kernels, sizeof kernels);
        memcpy(half_kernels, avx2_half_kernels, sizeof half_kernels);
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
    if (PyModule_AddStringConstant(m, "ISA", isa) < 0 || PyModule_AddIntConstant(m, "LANES", LANES) < 0 ||
        PyModule_AddIntConstant(m, "HALF_LANES", HLANES) < 0 || PyModule_AddIntConstant(m, "HALF_BLOCK", HBLOCK) < 0 ||
        PyModule_AddIntConstant(m, "STATE", STATE) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
