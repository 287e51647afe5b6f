/* See arg_max.h. */
#include <stdint.h>

#include "arg_max.h"

void qe_arg_max_s8(const qe_arg_max_params_t *p, const int8_t *input, int32_t *output)
{
    uint32_t o, a, i;
    for (o = 0; o < p->outer; ++o) {
        for (i = 0; i < p->inner; ++i) {
            const int8_t *in = input + o * p->axis * p->inner + i;
            int8_t best = in[0];
            int32_t best_index = 0;
            for (a = 1; a < p->axis; ++a) {
                if (in[a * p->inner] > best) {
                    best = in[a * p->inner];
                    best_index = (int32_t)a;
                }
            }
            output[o * p->inner + i] = best_index;
        }
    }
}

void qe_arg_max_f32(const qe_arg_max_params_t *p, const float *input, int32_t *output)
{
    uint32_t o, a, i;
    for (o = 0; o < p->outer; ++o) {
        for (i = 0; i < p->inner; ++i) {
            const float *in = input + o * p->axis * p->inner + i;
            float best = in[0];
            int32_t best_index = 0;
            for (a = 1; a < p->axis; ++a) {
                if (in[a * p->inner] > best) {
                    best = in[a * p->inner];
                    best_index = (int32_t)a;
                }
            }
            output[o * p->inner + i] = best_index;
        }
    }
}
