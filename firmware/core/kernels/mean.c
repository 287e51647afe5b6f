/* See mean.h. */
#include <stdint.h>

#include "mean.h"
#include "../requant.h"

void qe_mean_s8(const qe_mean_params_t *p, const int8_t *input, int8_t *output)
{
    uint32_t o, r, i;

    for (o = 0; o < p->outer; ++o) {
        for (i = 0; i < p->inner; ++i) {
            const int8_t *in = input + o * p->reduce * p->inner + i;
            int32_t sum = 0;
            for (r = 0; r < p->reduce; ++r) {
                sum += in[r * p->inner];
            }
            output[o * p->inner + i] = (int8_t)qe_requantize_output(
                sum + p->sum_offset, p->multiplier, p->shift, p->output_zero_point, -128, 127);
        }
    }
}

void qe_mean_f32(const qe_mean_params_t *p, const float *input, float *output)
{
    uint32_t o, r, i;

    for (o = 0; o < p->outer; ++o) {
        for (i = 0; i < p->inner; ++i) {
            const float *in = input + o * p->reduce * p->inner + i;
            float sum = 0.0f;
            for (r = 0; r < p->reduce; ++r) {
                sum += in[r * p->inner];
            }
            output[o * p->inner + i] = sum / (float)p->reduce;
        }
    }
}
