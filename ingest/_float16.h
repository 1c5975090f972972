/* IEEE float16 -> float32, exactly, shared by dumpcat's C kernels (ingest/statistics/_fused_stats.c,
 * ingest/_compare_kernel.c): normals rebiased (exponent 15 -> 127), zeros and subnormals scaled by
 * 2^-24 through a float multiply (exact in float32), inf and NaN kept with their payload and the
 * quiet bit set as hardware conversions do. Written branch-light so that loops over it vectorise.
 * Needs <stdint.h> and <string.h>. */
#ifndef DUMPCAT_FLOAT16_H
#define DUMPCAT_FLOAT16_H

static inline float
dumpcat_f16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = h & 0x7fffu;
    uint32_t bits;
    float f;
    if (em >= 0x7c00u) {
        bits = sign | 0x7f800000u | ((em & 0x3ffu) << 13) | ((em & 0x3ffu) ? 0x00400000u : 0u);
    }
    else if (em >= 0x0400u) {
        bits = sign | ((em << 13) + (112u << 23));
    }
    else {
        f = (float)em * 0x1p-24f;
        memcpy(&bits, &f, 4);
        bits |= sign;
    }
    memcpy(&f, &bits, 4);
    return f;
}

#endif
