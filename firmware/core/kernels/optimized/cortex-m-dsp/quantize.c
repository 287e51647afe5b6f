/* QUANTIZE float32 -> int8, optimized variant "cortex-m-dsp" (see ../README.md): the reference's
 * results (../../quantize.c) in 14 instructions a value instead of ~42, on cores with a
 * single-precision FPU (Cortex-M4F, M7, M33 with FPU); the reference's definition elsewhere.
 *
 * v = x / scale is the same IEEE quotient (one VDIV, as the reference's division). Then:
 *  - t2 = VCVT.S32.F32 with one fraction bit: trunc(2v) (2v is exact), saturated to int32, NaN
 *    -> 0 (NaN is told by VCMP v, v first: -128, as the reference's -131072 + zero point clamps).
 *  - round half away from zero is floor(|v| + 1/2) = floor((2|v| + 1) / 2)
 *    = floor((floor(2|v|) + 1) / 2) = (|t2| + 1) >> 1, with v's sign (t2's, or 0): the
 *    reference's t = trunc(v), frac = v - t, frac >= 1/2 ? t + 1 : t and its negative mirror
 *    give that same integer. With neg = (t2 < 0) that is floor((t2 + 1 - neg) / 2) for either
 *    sign (t2 = -k: floor((1 - k - 1) / 2) = -ceil(k / 2) = -floor((k + 1) / 2)), and + zero
 *    point zp is floor((t2 + 1 - neg + 2 zp) / 2): ADD c - neg (c = 2 zp + 1, small), QADD t2,
 *    then SSAT #8 with ASR #1: three instructions for the rounding, the offset and the clamp.
 *  - QADD saturates only when |t2| > 2^31 - 258, i.e. |v| >= 2^30 - 129: then the int8 result
 *    is -128 / 127 either way, as in the reference (which saturates |v| >= 2^17).
 * tests/test_kernels_optimized_quantize.py compares both on the host and on QEMU mps2-an386
 * over edge and random floats and scales (exact halves and their neighbours, random bit
 * patterns, NaN, infinities). The other QUANTIZE/DEQUANTIZE functions are the reference's,
 * included below. */
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
    const int32_t c = 2 * p->zero_point + 1;
    const float *const end = input + p->size;
    while (input != end) {
        float v = *input++ / scale;
        int32_t t2, q;
        __asm("vcmp.f32 %[v], %[v]\n\t"            /* unordered (V set): v is NaN */
              "vmrs APSR_nzcv, fpscr\n\t"
              "vcvt.s32.f32 %[v], %[v], #1\n\t"    /* trunc(2v), saturated; NaN -> 0 */
              "vmov %[t], %[v]\n\t"
              "add %[q], %[c], %[t], asr #31\n\t"  /* c - neg */
              "qadd %[q], %[q], %[t]\n\t"          /* t2 + 1 - neg + 2 zp, saturated */
              "ssat %[q], #8, %[q], asr #1\n\t"    /* round(v) + zp, clamped to int8 */
              "it vs\n\t"
              "mvnvs %[q], #127"                     /* NaN: -128 */
              : [v] "+t"(v), [t] "=&r"(t2), [q] "=&r"(q)
              : [c] "r"(c)
              : "cc");
        *output++ = (int8_t)q;
    }
}

#else

void qe_quantize_f32_s8(const qe_affine_params_t *p, const float *input, int8_t *output)
{
    qe_quantize_f32_s8_reference(p, input, output);
}

#endif
