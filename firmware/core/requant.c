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
