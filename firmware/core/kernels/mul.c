/* See mul.h. */
#include <stdint.h>

#include "mul.h"
#include "../requant.h"

void qe_mul_s8(const qe_mul_s8_params_t *p, const int8_t *input1, const int8_t *input2,
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
        output[i] = (int8_t)qe_requantize_output(v1 * v2, p->output_multiplier, p->output_shift,
                                                 output_offset, activation_min,
                                                 activation_max);
        qe_broadcast_next(&p->bc, &it);
    }
}

void qe_mul_s16(const qe_mul_s16_params_t *p, const int16_t *input1, const int16_t *input2,
                int16_t *output)
{
    /* qe_mul_s8's loop on int16 values */
    const int32_t output_offset = p->output_offset;
    const int32_t activation_min = p->activation_min;
    const int32_t activation_max = p->activation_max;
    qe_broadcast_it_t it;
    uint32_t i;

    qe_broadcast_begin(&it);
    for (i = 0; i < p->bc.size; ++i) {
        const int32_t v1 = p->input1_offset + (int32_t)input1[it.off1];
        const int32_t v2 = p->input2_offset + (int32_t)input2[it.off2];
        /* offsets 0: |v1 * v2| <= 2^30 */
        output[i] = (int16_t)qe_requantize_output(v1 * v2, p->output_multiplier, p->output_shift,
                                                  output_offset, activation_min,
                                                  activation_max);
        qe_broadcast_next(&p->bc, &it);
    }
}

void qe_mul_f32(const qe_binary_f32_params_t *p, const float *input1, const float *input2,
                float *output)
{
    qe_broadcast_it_t it;
    uint32_t i;

    qe_broadcast_begin(&it);
    for (i = 0; i < p->bc.size; ++i) {
        float v = input1[it.off1] * input2[it.off2];
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
