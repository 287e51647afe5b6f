/* See softmax.h. gemmlowp fixed point on int32 ("raw" values with a fixed number of integer
 * bits); Python twin: converters/ops/softmax.py softmax_s8. */
#include <stdint.h>

#include "softmax.h"
#include "../requant.h"

/* gemmlowp SaturatingRoundingMultiplyByPOT<exponent> for exponent 1 or 2 */
static int32_t sat_mul_pot(int32_t x, int32_t exponent)
{
    const int32_t threshold = (int32_t)(((int32_t)1 << (31 - exponent)) - 1);
    if (x > threshold) {
        return INT32_MAX;
    }
    if (x < -threshold) {
        return INT32_MIN;
    }
    return (int32_t)((uint32_t)x << exponent);
}

/* gemmlowp one_over_one_plus_x_for_x_in_0_1 on a Q0.31 x; the result is Q0.31 */
static int32_t one_over_one_plus_x(int32_t x)
{
    /* RoundingHalfSum(x, One) in 64 bits: (a + b + sign) / 2, truncating */
    const int64_t sum = (int64_t)x + (int64_t)INT32_MAX;
    const int32_t half_denominator = (int32_t)((sum + ((sum >= 0) ? 1 : -1)) / 2);
    /* Q2.29: 48/17 + half_denominator * (-32/17), then three Newton-Raphson steps */
    int32_t r = (int32_t)((uint32_t)1515870810 + (uint32_t)qe_saturating_rounding_doubling_high_mul(
                              half_denominator, -1010580540));
    int i;
    for (i = 0; i < 3; ++i) {
        const int32_t hdx = qe_saturating_rounding_doubling_high_mul(half_denominator, r);
        const int32_t one_minus = (int32_t)(((uint32_t)1 << 29) - (uint32_t)hdx);
        r = (int32_t)((uint32_t)r + (uint32_t)sat_mul_pot(
                          qe_saturating_rounding_doubling_high_mul(r, one_minus), 2));
    }
    /* ExactMulByPot<-1> then Rescale<0>: from Q1.30 to Q0.31 */
    return sat_mul_pot(r, 1);
}

static int32_t count_leading_zeros(uint32_t x)
{
    int32_t n = 0;
    if (x == 0u) {
        return 32;
    }
    while ((x & 0x80000000u) == 0u) {
        x <<= 1;
        ++n;
    }
    return n;
}

/* One row: its max, the Q12 sum of the exps, the reciprocal; returns the reciprocal in Q0.31
 * and sets *num_bits_over_unit (TFLM's GetReciprocal(sum, 12)). */
static int32_t row_reciprocal(const qe_softmax_s8_params_t *p, const int8_t *in, int32_t *max_out,
                              int32_t *num_bits_over_unit)
{
    uint32_t c;
    int32_t max_in_row = -128;
    int32_t sum = 0;               /* Q12.19: at most 511 * 2^19 < 2^28, no overflow */
    int32_t headroom_plus_one;

    for (c = 0; c < p->depth; ++c) {
        if (in[c] > max_in_row) {
            max_in_row = in[c];
        }
    }
    for (c = 0; c < p->depth; ++c) {
        /* Rescale<12>: from Q0.31 to Q12.19 */
        sum += qe_rounding_divide_by_pot(p->exp_table[max_in_row - (int32_t)in[c]], 12);
    }
    /* GetReciprocal(sum, 12): normalise to [1, 2), 1 / (1 + x) */
    headroom_plus_one = count_leading_zeros((uint32_t)sum);
    *num_bits_over_unit = 12 - headroom_plus_one;
    *max_out = max_in_row;
    return one_over_one_plus_x(
        (int32_t)(((uint32_t)sum << headroom_plus_one) - ((uint32_t)1 << 31)));
}

/* One output of a row: exp(x - max) / sum as a value of `out_bits` bits, offset by the
 * output type's minimum (TFLM's output zero point, -128 or -32768) and saturated to it. An
 * exp-table entry below TFLM's diff_min is 0: the output is then the minimum, TFLM's value
 * for a skipped element. */
static int32_t row_output(int32_t reciprocal, int32_t e, int32_t num_bits_over_unit,
                          int out_bits)
{
    const int32_t lowest = -((int32_t)1 << (out_bits - 1));
    int32_t v = qe_rounding_divide_by_pot(qe_saturating_rounding_doubling_high_mul(reciprocal, e),
                                          num_bits_over_unit + 31 - out_bits) + lowest;
    if (v < lowest) {
        v = lowest;
    }
    if (v > -lowest - 1) {
        v = -lowest - 1;
    }
    return v;
}

void qe_softmax_s8(const qe_softmax_s8_params_t *p, const int8_t *input, int8_t *output)
{
    uint32_t row;
    uint32_t c;

    for (row = 0; row < p->outer; ++row) {
        const int8_t *in = input + row * p->depth;
        int8_t *out = output + row * p->depth;
        int32_t max_in_row;
        int32_t num_bits_over_unit;
        const int32_t reciprocal = row_reciprocal(p, in, &max_in_row, &num_bits_over_unit);

        for (c = 0; c < p->depth; ++c) {
            out[c] = (int8_t)row_output(reciprocal, p->exp_table[max_in_row - (int32_t)in[c]],
                                        num_bits_over_unit, 8);
        }
    }
}

void qe_softmax_s8_s16(const qe_softmax_s8_params_t *p, const int8_t *input, int16_t *output)
{
    uint32_t row;
    uint32_t c;

    for (row = 0; row < p->outer; ++row) {
        const int8_t *in = input + row * p->depth;
        int16_t *out = output + row * p->depth;
        int32_t max_in_row;
        int32_t num_bits_over_unit;
        const int32_t reciprocal = row_reciprocal(p, in, &max_in_row, &num_bits_over_unit);

        for (c = 0; c < p->depth; ++c) {
            out[c] = (int16_t)row_output(reciprocal, p->exp_table[max_in_row - (int32_t)in[c]],
                                         num_bits_over_unit, 16);
        }
    }
}

void qe_softmax_f32(const qe_softmax_f32_params_t *p, float (*exp_fn)(float),
                    const float *input, float *output)
{
    uint32_t row;
    uint32_t c;

    for (row = 0; row < p->outer; ++row) {
        const float *in = input + row * p->depth;
        float *out = output + row * p->depth;
        float max = -3.40282347e+38f;      /* std::numeric_limits<float>::lowest() */
        float sum = 0.0f;
        for (c = 0; c < p->depth; ++c) {
            if (max < in[c]) {             /* std::max(max, x) */
                max = in[c];
            }
        }
        for (c = 0; c < p->depth; ++c) {
            const float e = exp_fn((in[c] - max) * p->beta);
            out[c] = e;
            sum += e;
        }
        for (c = 0; c < p->depth; ++c) {
            out[c] = out[c] / sum;
        }
    }
}
