/* Requantization: the one place the int32 -> int8 rescaling arithmetic lives.
 *
 * Bit-exact with TF Lite Micro's MultiplyByQuantizedMultiplier in its default build
 * (TFLITE_SINGLE_ROUNDING=0, "double rounding"), which is what the tflite-micro interpreter
 * we test against uses: gemmlowp's SaturatingRoundingDoublingHighMul (round half up) followed by
 * RoundingDivideByPOT (round half away from zero). The Python twin is
 * converters/qmath.py:multiply_by_quantized_multiplier.
 *
 * Portable C99: only int32_t/int64_t arithmetic, no assumption about the width of int (AVR).
 * Implementation-defined behaviour relied on (true for gcc/clang on every target we build for):
 * right shift of a negative value is arithmetic, conversion to int32_t wraps modulo 2^32. */
#ifndef QE_REQUANT_H
#define QE_REQUANT_H

#include <stdint.h>

/* round(a * b / 2^31), ties upward; saturates the single overflowing case a == b == INT32_MIN. */
int32_t qe_saturating_rounding_doubling_high_mul(int32_t a, int32_t b);

/* x / 2^exponent rounded to nearest, ties away from zero; exponent in [0, 31]. */
int32_t qe_rounding_divide_by_pot(int32_t x, int32_t exponent);

/* x * multiplier * 2^(shift - 31), multiplier in [0, 2^31) (from QuantizeMultiplier),
 * shift in [-31, 30]; shift > 0 multiplies x by 2^shift first, in int32 (wrapping). */
int32_t qe_multiply_by_quantized_multiplier(int32_t x, int32_t multiplier, int32_t shift);

/* TFLM's MultiplyByQuantizedMultiplier(int64_t x, ...), used by the int16x8 kernels: the Q31
 * multiplier is first reduced to Q15 (rounded), then x * m15 + 2^(14 - shift) is shifted right
 * by 15 - shift (round half up) and truncated to int32. |x| < 2^47, shift in [-31, 7]. */
int32_t qe_multiply_by_quantized_multiplier_64(int64_t x, int32_t multiplier, int32_t shift);

/* ------------------------------------------------------------------------------ output stage
 * The last step of every int8 kernel that requantizes (FULLY_CONNECTED per tensor and per
 * channel, reference and optimized; CONV_2D; DEPTHWISE_CONV_2D; ADD; MUL; MEAN) and of the
 * int16x8 FULLY_CONNECTED: the requantized accumulator `scaled` plus the output zero point
 * `offset`, clamped to the fused activation's [act_min, act_max] -- max first, then min, as
 * TFLM's std::min(std::max(scaled + offset, act_min), act_max). Python twins:
 * converters/qmath.py:offset_clamp and :requantize_output.
 *
 * TFLM adds `scaled + offset` in int32, which overflows (undefined behaviour) when `scaled` is
 * within |offset| of INT32_MIN or INT32_MAX -- a multiplier near 2^31 with a shift near 30 takes
 * a moderate accumulator there. This stage clamps in the offset-shifted domain instead,
 *     clamp(scaled, act_min - offset, act_max - offset) + offset,
 * which is the exact mathematical clamp(scaled + offset, act_min, act_max): so it equals TFLM
 * wherever TFLM's arithmetic is defined, and is the saturated value where TFLM's is not.
 * Chosen over adding in 64 bits before the clamp by measurement, instructions per inference of
 * the shipped int8 CartPole policy (QEMU -icount, gcc 12 -O2): mps2-an386 (Cortex-M4, the
 * cortex-m-dsp FC) 14,098 vs 15,413, lm3s6965evb (Cortex-M3, reference) 41,853 vs 42,912; the
 * old, overflowing int32 add took 14,228 and 41,827.
 *
 * PRECONDITION: offset, act_min and act_max lie in [-32768, 32767] (int16 range). Then
 * act_min - offset and act_max - offset cannot overflow, nor can the final + offset (the clamped
 * value lies within [act_min - offset, act_max - offset]). The generator (converters/cgen.py)
 * is what guarantees it: it admits only int8/int16 zero points within their type, and the
 * activation bounds it emits are then within the output type. Outside the precondition the
 * result is still defined (the arithmetic wraps; tests/test_output_stage.py checks that under
 * UBSan) but may be wrong. */
static inline int32_t qe_offset_clamp(int32_t scaled, int32_t offset, int32_t act_min,
                                      int32_t act_max)
{
    const int32_t lo = (int32_t)((uint32_t)act_min - (uint32_t)offset);
    const int32_t hi = (int32_t)((uint32_t)act_max - (uint32_t)offset);
    if (scaled < lo) {
        scaled = lo;
    }
    if (scaled > hi) {
        scaled = hi;
    }
    /* within [act_min, act_max] now; in uint32_t so that nothing can overflow even outside the
     * precondition (the conversion back is the wrap every target here does) */
    return (int32_t)((uint32_t)scaled + (uint32_t)offset);
}

/* qe_multiply_by_quantized_multiplier(acc, multiplier, shift), then qe_offset_clamp: the whole
 * int8 output stage of a kernel with an int32 accumulator. */
static inline int32_t qe_requantize_output(int32_t acc, int32_t multiplier, int32_t shift,
                                           int32_t offset, int32_t act_min, int32_t act_max)
{
    return qe_offset_clamp(qe_multiply_by_quantized_multiplier(acc, multiplier, shift), offset,
                           act_min, act_max);
}

#endif /* QE_REQUANT_H */
