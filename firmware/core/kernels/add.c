/* See add.h. */
#include <stdint.h>

#include "add.h"
#include "../requant.h"

void qe_add_s8(const qe_add_s8_params_t *p, const int8_t *input1, const int8_t *input2,
               int8_t *output)
{
    /* read once: the output stores may alias *p, so the compiler would reload them per value */
    const int32_t output_offset = p->output_offset;
    const int32_t activation_min = p->activation_min;
    const int32_t activation_max = p->activation_max;
    qe_broadcast_it_t it;
    uint32_t i;

    qe_broadcast_begin(&it);
    for (i = 0; i < p->bc.size; ++i) {
        const int32_t v1 = p->input1_offset + (int32_t)input1[it.off1];
        const int32_t v2 = p->input2_offset + (int32_t)input2[it.off2];
        /* |v| <= 255, so v * 2^20 fits an int32 */
        const int32_t s1 = qe_multiply_by_quantized_multiplier(v1 * ((int32_t)1 << p->left_shift),
                                                               p->input1_multiplier, p->input1_shift);
        const int32_t s2 = qe_multiply_by_quantized_multiplier(v2 * ((int32_t)1 << p->left_shift),
                                                               p->input2_multiplier, p->input2_shift);
        output[i] = (int8_t)qe_requantize_output(s1 + s2, p->output_multiplier, p->output_shift,
                                                 output_offset, activation_min,
                                                 activation_max);
        qe_broadcast_next(&p->bc, &it);
    }
}

void qe_add_s16(const qe_add_s16_params_t *p, const int16_t *input1, const int16_t *input2,
                int16_t *output)
{
    /* qe_add_s8's loop on int16 values (TFLM's AddElementwise / BroadcastAdd6DSlow for int16) */
    const int32_t output_offset = p->output_offset;
    const int32_t activation_min = p->activation_min;
    const int32_t activation_max = p->activation_max;
    qe_broadcast_it_t it;
    uint32_t i;

    qe_broadcast_begin(&it);
    for (i = 0; i < p->bc.size; ++i) {
        const int32_t v1 = p->input1_offset + (int32_t)input1[it.off1];
        const int32_t v2 = p->input2_offset + (int32_t)input2[it.off2];
        /* |v| <= 65535 and left_shift is 15, so v * 2^15 fits an int32 (add.h) */
        const int32_t s1 = qe_multiply_by_quantized_multiplier(v1 * ((int32_t)1 << p->left_shift),
                                                               p->input1_multiplier, p->input1_shift);
        const int32_t s2 = qe_multiply_by_quantized_multiplier(v2 * ((int32_t)1 << p->left_shift),
                                                               p->input2_multiplier, p->input2_shift);
        output[i] = (int16_t)qe_requantize_output(s1 + s2, p->output_multiplier, p->output_shift,
                                                  output_offset, activation_min,
                                                  activation_max);
        qe_broadcast_next(&p->bc, &it);
    }
}

void qe_add_f32(const qe_binary_f32_params_t *p, const float *input1, const float *input2,
                float *output)
{
    qe_broadcast_it_t it;
    uint32_t i;

    qe_broadcast_begin(&it);
    for (i = 0; i < p->bc.size; ++i) {
        float v = input1[it.off1] + input2[it.off2];
        if (v < p->activation_min) {
            v = p->activation_min;
        }
        if (p->activation_max < v) {
            v = p->activation_max;
        }
        output[i] = v;
        qe_broadcast_next(&p->bc, &it);
    }
}
