/* QUANTIZE float32 -> int8 / int16, bit-exact with TF Lite Micro's reference_ops::AffineQuantize:
 *     q = clamp(roundf(x / scale) + zero_point, -128, 127)
 * with the division in float and roundf rounding half away from zero.
 *
 * Where TFLM's float -> int32 conversion is undefined behaviour (|x / scale| >= 2^31, NaN) this
 * kernel is defined instead: finite values saturate (to -128 or 127), NaN gives -128. */
#include <stdint.h>

#include "quantize.h"
#include "requant.h"

/* roundf() without libm: half away from zero. |v| < 2^23 here, so (int32_t)v is exact truncation
 * and v - trunc(v) is exact. */
static float qe_round_half_away(float v)
{
    const float t = (float)(int32_t)v;
    const float frac = v - t;
    if (frac >= 0.5f) {
        return t + 1.0f;
    }
    if (frac <= -0.5f) {
        return t - 1.0f;
    }
    return t;
}

/* roundf(x / scale) + zero_point as int32, saturated far outside any int16 range. */
static int32_t qe_quantize_one(const qe_affine_params_t *p, float x)
{
    const float v = x / p->scale;
    /* Any |round(v)| >= 2^17 saturates int8 and int16 whatever the zero point. */
    if (v >= 131072.0f) {
        return 131072 + p->zero_point;
    }
    if (v <= -131072.0f || v != v) {
        return -131072 + p->zero_point;
    }
    return (int32_t)qe_round_half_away(v) + p->zero_point;
}

void qe_quantize_f32_s8(const qe_affine_params_t *p, const float *input, int8_t *output)
{
    uint32_t i;
    for (i = 0; i < p->size; ++i) {
        int32_t q = qe_quantize_one(p, input[i]);
        if (q < -128) {
            q = -128;
        }
        if (q > 127) {
            q = 127;
        }
        output[i] = (int8_t)q;
    }
}

/* The same with floor(2^48 / the scale's significand) from the generator (the cortex-m0 and
 * rv32 variants divide with it; 0: none); here it is not needed. */
void qe_quantize_f32_s8_inv(const qe_affine_params_t *p, uint32_t inv, const float *input,
                            int8_t *output)
{
    (void)inv;
    qe_quantize_f32_s8(p, input, output);
}

void qe_quantize_f32_s16(const qe_affine_params_t *p, const float *input, int16_t *output)
{
    uint32_t i;
    for (i = 0; i < p->size; ++i) {
        int32_t q = qe_quantize_one(p, input[i]);
        if (q < -32768) {
            q = -32768;
        }
        if (q > 32767) {
            q = 32767;
        }
        output[i] = (int16_t)q;
    }
}

/* ------------------------------------------------------------ integer -> integer (Requantize) */
static int32_t qe_requantize_one(const qe_requantize_params_t *p, int32_t x, int32_t lo,
                                 int32_t hi)
{
    int32_t q = qe_multiply_by_quantized_multiplier(x - p->input_zero_point, p->multiplier,
                                                    p->shift) + p->output_zero_point;
    return q < lo ? lo : (q > hi ? hi : q);
}

void qe_requantize_s8_s8(const qe_requantize_params_t *p, const int8_t *input, int8_t *output)
{
    uint32_t i;
    for (i = 0; i < p->size; ++i)
        output[i] = (int8_t)qe_requantize_one(p, input[i], -128, 127);
}

void qe_requantize_s16_s8(const qe_requantize_params_t *p, const int16_t *input, int8_t *output)
{
    uint32_t i;
    for (i = 0; i < p->size; ++i)
        output[i] = (int8_t)qe_requantize_one(p, input[i], -128, 127);
}

void qe_requantize_s8_s16(const qe_requantize_params_t *p, const int8_t *input, int16_t *output)
{
    uint32_t i;
    for (i = 0; i < p->size; ++i)
        output[i] = (int16_t)qe_requantize_one(p, input[i], -32768, 32767);
}

void qe_requantize_s16_s16(const qe_requantize_params_t *p, const int16_t *input,
                           int16_t *output)
{
    uint32_t i;
    for (i = 0; i < p->size; ++i)
        output[i] = (int16_t)qe_requantize_one(p, input[i], -32768, 32767);
}

static int32_t qe_requantize_wide(const qe_requantize_params_t *p, int32_t x)
{
    int64_t q = (int64_t)qe_multiply_by_quantized_multiplier(x - p->input_zero_point,
                                                             p->multiplier, p->shift)
                + p->output_zero_point;
    return q < INT32_MIN ? INT32_MIN : (q > INT32_MAX ? INT32_MAX : (int32_t)q);
}

void qe_requantize_s8_s32(const qe_requantize_params_t *p, const int8_t *input, int32_t *output)
{
    uint32_t i;
    for (i = 0; i < p->size; ++i)
        output[i] = qe_requantize_wide(p, input[i]);
}

void qe_requantize_s16_s32(const qe_requantize_params_t *p, const int16_t *input,
                           int32_t *output)
{
    uint32_t i;
    for (i = 0; i < p->size; ++i)
        output[i] = qe_requantize_wide(p, input[i]);
}

void qe_requantize_s32_s8(const qe_requantize_params_t *p, const int32_t *input, int8_t *output)
{
    uint32_t i;
    for (i = 0; i < p->size; ++i)
        output[i] = (int8_t)qe_requantize_one(p, input[i], -128, 127);
}

void qe_requantize_s32_s16(const qe_requantize_params_t *p, const int32_t *input,
                           int16_t *output)
{
    uint32_t i;
    for (i = 0; i < p->size; ++i)
        output[i] = (int16_t)qe_requantize_one(p, input[i], -32768, 32767);
}
