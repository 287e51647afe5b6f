/* See leaky_relu.h. */
#include <stdint.h>

#include "leaky_relu.h"
#include "../requant.h"

/* the rescaled value of one input, before the output zero point */
static int32_t qe_leaky_relu_scaled(const qe_leaky_relu_params_t *p, int32_t v)
{
    int32_t s;
    if (v >= 0) {
        return qe_multiply_by_quantized_multiplier(v, p->identity_multiplier, p->identity_shift);
    }
    s = qe_multiply_by_quantized_multiplier(v, p->alpha_multiplier, p->alpha_shift);
    return p->alpha_negative ? -s : s;
}

void qe_leaky_relu_s8(const qe_leaky_relu_params_t *p, uint32_t size, const int8_t *input,
                      int8_t *output)
{
    uint32_t i;
    for (i = 0; i < size; ++i) {
        const int32_t s = qe_leaky_relu_scaled(p, (int32_t)input[i] - p->input_zero_point);
        output[i] = (int8_t)qe_offset_clamp(s, p->output_zero_point, -128, 127);
    }
}

void qe_leaky_relu_s16(const qe_leaky_relu_params_t *p, uint32_t size, const int16_t *input,
                       int16_t *output)
{
    uint32_t i;
    for (i = 0; i < size; ++i) {
        const int32_t s = qe_leaky_relu_scaled(p, (int32_t)input[i] - p->input_zero_point);
        output[i] = (int16_t)qe_offset_clamp(s, p->output_zero_point, -32768, 32767);
    }
}

void qe_leaky_relu_f32(uint32_t size, float alpha, const float *input, float *output)
{
    uint32_t i;
    for (i = 0; i < size; ++i) {
        const float v = input[i];
        output[i] = v > 0.0f ? v : v * alpha;
    }
}
