/* See activations_f32.h. Element-wise: input and output may be the same buffer. */
#include <stdint.h>

#include "activations_f32.h"

void qe_relu_f32(uint32_t size, const float *input, float *output)
{
    uint32_t i;
    for (i = 0; i < size; ++i) {
        const float v = input[i];
        output[i] = (v < 0.0f) ? 0.0f : v;
    }
}

void qe_relu6_f32(uint32_t size, const float *input, float *output)
{
    uint32_t i;
    for (i = 0; i < size; ++i) {
        const float v = input[i];
        output[i] = (v > 6.0f) ? 6.0f : (v < 0.0f) ? 0.0f : v;
    }
}

void qe_tanh_f32(uint32_t size, qe_f32_fn tanh_fn, const float *input, float *output)
{
    uint32_t i;
    for (i = 0; i < size; ++i) {
        output[i] = tanh_fn(input[i]);
    }
}

void qe_logistic_f32(uint32_t size, qe_f32_fn exp_fn, const float *input, float *output)
{
    const float cutoff_upper = 16.619047164916992188f;
    const float cutoff_lower = -9.0f;
    uint32_t i;
    for (i = 0; i < size; ++i) {
        const float v = input[i];
        float r;
        if (v > cutoff_upper) {
            r = 1.0f;
        } else if (v < cutoff_lower) {
            r = exp_fn(v);
        } else {
            r = 1.0f / (1.0f + exp_fn(-v));
        }
        output[i] = r;
    }
}
