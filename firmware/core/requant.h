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

#endif /* QE_REQUANT_H */
