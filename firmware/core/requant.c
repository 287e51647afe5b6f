/* See requant.h. */
#include "requant.h"

int32_t qe_saturating_rounding_doubling_high_mul(int32_t a, int32_t b)
{
    int64_t ab;
    int64_t nudge;
    if (a == b && a == INT32_MIN) {
        return INT32_MAX;
    }
    ab = (int64_t)a * (int64_t)b;
    nudge = (ab >= 0) ? ((int64_t)1 << 30) : ((int64_t)1 - ((int64_t)1 << 30));
    /* C division truncates toward zero, as gemmlowp's does. */
    return (int32_t)((ab + nudge) / ((int64_t)1 << 31));
}

int32_t qe_rounding_divide_by_pot(int32_t x, int32_t exponent)
{
    const int32_t mask = (int32_t)(((int64_t)1 << exponent) - 1);
    const int32_t remainder = x & mask;
    const int32_t threshold = (mask >> 1) + ((x < 0) ? 1 : 0);
    return (x >> exponent) + ((remainder > threshold) ? 1 : 0);
}

int32_t qe_multiply_by_quantized_multiplier(int32_t x, int32_t multiplier, int32_t shift)
{
    const int32_t left_shift = (shift > 0) ? shift : 0;
    const int32_t right_shift = (shift > 0) ? 0 : -shift;
    /* TFLM computes x * (1 << left_shift) in int; it wraps there, so it wraps here (defined). */
    const int32_t shifted = (int32_t)((uint32_t)x << left_shift);
    return qe_rounding_divide_by_pot(
        qe_saturating_rounding_doubling_high_mul(shifted, multiplier), right_shift);
}

int32_t qe_multiply_by_quantized_multiplier_64(int64_t x, int32_t multiplier, int32_t shift)
{
    const int32_t reduced = (multiplier < 0x7FFF0000) ? ((multiplier + ((int32_t)1 << 15)) >> 16) : 0x7FFF;
    const int32_t total_shift = 15 - shift;
    const int64_t result = x * (int64_t)reduced + ((int64_t)1 << (total_shift - 1));
    /* Arithmetic right shift, then the int32 truncation TFLM's static_cast does. */
    return (int32_t)(uint32_t)(uint64_t)(result >> total_shift);
}
