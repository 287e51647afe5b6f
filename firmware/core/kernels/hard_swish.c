/* See hard_swish.h. The int16 helpers are gemmlowp's fixed-point primitives instantiated for
 * int16_t, as TFLM's reference uses them; every intermediate is kept in int32_t and narrowed
 * with an explicit (wrapping) conversion where the C++ narrows to int16_t. */
#include <stdint.h>

#include "hard_swish.h"

/* round(a * b / 2^15), ties away from zero; saturates a == b == INT16_MIN */
static int16_t qe_srdhm16(int16_t a, int16_t b)
{
    const int32_t ab = (int32_t)a * (int32_t)b;
    const int32_t nudge = ab >= 0 ? (1 << 14) : 1 - (1 << 14);
    if (a == b && a == INT16_MIN) {
        return INT16_MAX;
    }
    return (int16_t)((ab + nudge) / (1 << 15));
}

/* gemmlowp's RoundingDivideByPOT with int16_t operands: mask and threshold are int16_t as
 * well, which changes the result for exponents above 14 (TFLM's arithmetic, kept) */
static int16_t qe_rdbpot16(int16_t x, int32_t exponent)
{
    const int16_t mask = (int16_t)(((int64_t)1 << exponent) - 1);
    const int16_t remainder = (int16_t)(x & mask);
    const int16_t threshold = (int16_t)((mask >> 1) + (x < 0 ? 1 : 0));
    return (int16_t)(((int32_t)x >> exponent) + (remainder > threshold ? 1 : 0));
}

static int16_t qe_sat_left_shift16(int16_t x, int32_t amount)
{
    const int64_t v = (int64_t)x * ((int64_t)1 << amount);
    return (int16_t)(v > INT16_MAX ? INT16_MAX : v < INT16_MIN ? INT16_MIN : v);
}

void qe_hard_swish_s8(const qe_hard_swish_params_t *p, uint32_t size, const int8_t *input,
                      int8_t *output)
{
    const int32_t rexp = p->reluish_exponent;
    uint32_t i;
    for (i = 0; i < size; ++i) {
        const int16_t v = (int16_t)((int32_t)input[i] - p->input_zero_point);
        const int16_t hires = (int16_t)(v * 128);                  /* |v| <= 255: fits */
        const int16_t on_output_scale = qe_srdhm16(hires, p->output_multiplier);
        int16_t reluish = hires;
        int16_t pre;
        int16_t out;
        if (rexp > 0) {
            reluish = qe_sat_left_shift16(reluish, rexp - 1);
        }
        reluish = qe_srdhm16(reluish, p->reluish_multiplier);
        if (rexp > 0) {
            reluish = qe_sat_left_shift16(reluish, 1);
        } else if (rexp < 0) {
            reluish = qe_rdbpot16(reluish, -rexp);
        }
        reluish = (int16_t)(((int32_t)reluish + (1 << 15)) >> 1);   /* [-1, 1] -> [0, 1] */
        /* SaturatingDoublingHighMul: truncating; reluish >= 0, so it cannot saturate */
        pre = (int16_t)(((int32_t)reluish * (int32_t)on_output_scale) / (1 << 15));
        out = qe_rdbpot16(pre, -p->output_exponent);
        out = (int16_t)((int32_t)out + p->output_zero_point);
        output[i] = (int8_t)(out > 127 ? 127 : out < -128 ? -128 : out);
    }
}

void qe_hard_swish_f32(uint32_t size, const float *input, float *output)
{
    uint32_t i;
    for (i = 0; i < size; ++i) {
        const float x = input[i];
        float r = x + 3.0f;
        /* std::min(6, std::max(0, x + 3)), operand order kept: max(0, NaN) is 0 */
        r = 0.0f < r ? r : 0.0f;
        r = r < 6.0f ? r : 6.0f;
        output[i] = x * r / 6.0f;
    }
}
