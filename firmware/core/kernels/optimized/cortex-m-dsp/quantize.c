/* QUANTIZE float32 -> int8, optimized variant "cortex-m-dsp" (see ../README.md): the reference's
 * results (../../quantize.c) in ~15 instructions a value instead of ~42, on cores with a
 * single-precision FPU (Cortex-M4F, M7, M33 with FPU); the reference's definition elsewhere.
 *
 * v = x / scale is the same IEEE quotient (one VDIV, as the reference's division). Then:
 *  - t2 = VCVT.S32.F32 with one fraction bit: trunc(2v) (2v is exact), saturated to int32, NaN
 *    -> 0 (NaN is taken first: -128, as the reference's -131072 + zero point clamps).
 *  - round half away from zero is floor(|v| + 1/2) = floor((2|v| + 1) / 2)
 *    = floor((floor(2|v|) + 1) / 2) = (|t2| + 1) >> 1, with v's sign (t2's, or 0): the
 *    reference's t = trunc(v), frac = v - t, frac >= 1/2 ? t + 1 : t and its negative mirror
 *    give that same integer.
 *  - t2 is first clamped to [-2^20, 2^20 - 1] (SSAT #21): exact below |v| < 2^19, and beyond,
 *    as in the reference (which saturates |v| >= 2^17), the int8 result is -128 / 127 either
 *    way (|round(v)| >= 2^18 - 1 and |zero point| <= 128).
 * tests/test_kernels_optimized.py compares both on the host and on QEMU mps2-an386 over edge
 * and random floats and scales (exact halves and their neighbours, random bit patterns). The
 * other QUANTIZE/DEQUANTIZE functions are the reference's, included below. */
#include <stdint.h>

#include "../../quantize.h"

#define qe_quantize_f32_s8 qe_quantize_f32_s8_reference
#include "../../quantize.c"
#undef qe_quantize_f32_s8

#if defined(__ARM_FP) && (__ARM_FP & 4) && defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#include <arm_acle.h>

void qe_quantize_f32_s8(const qe_affine_params_t *p, const float *input, int8_t *output)
{
    const float scale = p->scale;
    const int32_t zp = p->zero_point;
    const float *const end = input + p->size;
    while (input != end) {
        float v = *input++ / scale;
        int32_t t2, q;
        if (v != v) {
            *output++ = -128;
            continue;
        }
        __asm("vcvt.s32.f32 %[v], %[v], #1" : [v] "+t"(v));
        __asm("vmov %[t], %[v]" : [t] "=r"(t2) : [v] "t"(v));
        t2 = __ssat(t2, 21);
        q = (t2 >= 0) ? (t2 + 1) >> 1 : -((1 - t2) >> 1);
        *output++ = (int8_t)__ssat(q + zp, 8);
    }
}

#else

void qe_quantize_f32_s8(const qe_affine_params_t *p, const float *input, int8_t *output)
{
    qe_quantize_f32_s8_reference(p, input, output);
}

#endif
