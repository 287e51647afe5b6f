/* QUANTIZE float32 -> int8, optimized variant "cortex-m-dsp" (see ../README.md): the reference's
 * results (../../quantize.c) in ~10.5 instructions a value instead of ~42, on cores with a
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

/* One value (v: x / scale already), NaN included: the stage described above. */
static inline int8_t quantize_one(float v, int32_t c)
{
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
    return (int8_t)q;
}

/* The value in register S (a quotient, not NaN) to int8 at [out], post-incremented. */
#define QUANT_ONE(S)                                                                      \
    "vcvt.s32.f32 " S ", " S ", #1\n\t"                                                   \
    "vmov %[t], " S "\n\t"                                                                \
    "add %[q], %[c], %[t], asr #31\n\t"                                                   \
    "qadd %[q], %[q], %[t]\n\t"                                                           \
    "ssat %[q], #8, %[q], asr #1\n\t"                                                     \
    "strb %[q], [%[out]], #1\n\t"

/* Four values a pass (issue 41): one VLDM, and NaN told once for the four: if their sum
 * (v0 + v1) + (v2 + v3) is not NaN, none of them is (a NaN input stays NaN through the sums; an
 * inf - inf or an overflow makes a NaN sum from numbers too, which only sends those four to the
 * one-value path, exact for every value). Then per value VDIV, VCVT, VMOV, ADD, QADD, SSAT, STRB:
 * ~10.5 instructions a value instead of 14. The quotients are the same VDIVs as quantize_one's,
 * of the inputs themselves (x / scale is NaN exactly when x is). */
void qe_quantize_f32_s8(const qe_affine_params_t *p, const float *input, int8_t *output)
{
    const float scale = p->scale;
    const int32_t c = 2 * p->zero_point + 1;
    const float *const end = input + p->size;
    const float *const end4 = input + (p->size & ~3u);
    while (input != end4) {
        int32_t t2, q, nan;
        __asm volatile("vldmia %[in]!, {s0-s3}\n\t"
                       "vadd.f32 s4, s0, s1\n\t"
                       "vadd.f32 s5, s2, s3\n\t"
                       "vadd.f32 s4, s4, s5\n\t"
                       "vcmp.f32 s4, s4\n\t"
                       "vmrs APSR_nzcv, fpscr\n\t"
                       "mov %[n], #1\n\t"
                       "bvs 1f\n\t"
                       "vdiv.f32 s0, s0, %[s]\n\t"
                       "vdiv.f32 s1, s1, %[s]\n\t"
                       "vdiv.f32 s2, s2, %[s]\n\t"
                       "vdiv.f32 s3, s3, %[s]\n\t"
                       QUANT_ONE("s0") QUANT_ONE("s1") QUANT_ONE("s2") QUANT_ONE("s3")
                       "mov %[n], #0\n"
                       "1:"
                       : [in] "+r"(input), [out] "+r"(output), [t] "=&r"(t2), [q] "=&r"(q),
                         [n] "=&r"(nan)
                       : [c] "r"(c), [s] "t"(scale)
                       : "s0", "s1", "s2", "s3", "s4", "s5", "cc", "memory");
        if (nan) {                      /* a NaN among the four, or inf - inf: one at a time */
            const float *const four = input;
            for (input -= 4; input != four; ++input) {
                *output++ = quantize_one(*input / scale, c);
            }
        }
    }
    while (input != end) {
        *output++ = quantize_one(*input++ / scale, c);
    }
}

#else

void qe_quantize_f32_s8(const qe_affine_params_t *p, const float *input, int8_t *output)
{
    qe_quantize_f32_s8_reference(p, input, output);
}

#endif
