/* QUANTIZE float32 -> int8, optimized variant "cortex-m0" (see ../README.md): the reference's
 * results (../../quantize.c) with one soft-float call per value instead of about ten. Cores
 * without an FPU (ARMv6-M here) pay a library call for every float operation, and the
 * reference's round half away from zero (truncate, convert back, subtract, compare twice, add)
 * and its range checks are six to nine of them: ~800 instructions per value on the micro:bit.
 *
 * Here only the division stays in float: v = x / scale is the very IEEE quotient the reference
 * (and TFLM) rounds. Everything after it reads v's bits as integers:
 *  - NaN -> -131072 + zero point, |v| >= 2^17 (incl. inf) -> +-131072 + zero point, as the
 *    reference's saturation (any such value clamps to int8 anyway);
 *  - otherwise |v| = m * 2^(e - 23) with the 24-bit significand m (denormals and |v| < 0.5 give
 *    0), and round half away from zero is floor(|v| + 1/2) = (m + 2^(22 - e)) >> (23 - e) for
 *    e in [-1, 16], with v's sign. The reference's t = trunc(v), frac = v - t (exact), frac
 *    >= 1/2 ? t + 1 : t (and the negative mirror) is that same integer.
 * tests/test_kernels_optimized.py compares both on the host and on QEMU microbit over edge and
 * random floats. The other QUANTIZE/DEQUANTIZE functions are the reference's, included below. */
#include <stdint.h>
#include <string.h>

#include "../../quantize.h"

#define qe_quantize_f32_s8 qe_quantize_f32_s8_reference
#include "../../quantize.c"
#undef qe_quantize_f32_s8

static int32_t quantize_bits(const qe_affine_params_t *p, float x)
{
    const float v = x / p->scale;
    uint32_t bits, mag, m;
    int32_t e, r;

    memcpy(&bits, &v, sizeof bits);
    mag = bits & 0x7FFFFFFFu;
    if (mag > 0x7F800000u) {                   /* NaN */
        return -131072 + p->zero_point;
    }
    if (mag >= 0x48000000u) {                  /* |v| >= 131072.0f, inf included */
        return ((bits >> 31) ? -131072 : 131072) + p->zero_point;
    }
    e = (int32_t)(mag >> 23) - 127;
    if (e < -1) {                              /* |v| < 0.5 (zeros and denormals too) */
        r = 0;
    } else {
        m = (mag & 0x007FFFFFu) | 0x00800000u;
        r = (int32_t)((m + (1u << (22 - e))) >> (23 - e));
    }
    return ((bits >> 31) ? -r : r) + p->zero_point;
}

void qe_quantize_f32_s8(const qe_affine_params_t *p, const float *input, int8_t *output)
{
    uint32_t i;
    for (i = 0; i < p->size; ++i) {
        int32_t q = quantize_bits(p, input[i]);
        if (q < -128) {
            q = -128;
        }
        if (q > 127) {
            q = 127;
        }
        output[i] = (int8_t)q;
    }
}
