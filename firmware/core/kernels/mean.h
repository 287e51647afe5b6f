/* MEAN over a contiguous run of axes (e.g. the spatial axes 1, 2 of NHWC), bit-exact with TF Lite
 * Micro's reference kernels. The input is viewed as [outer][reduce][inner].
 *
 * int8 (reference_ops::QuantizedMeanOrSum): an int32 sum of the raw int8 values, minus
 * input_zero_point * n, rescaled by input_scale / output_scale with 1/n folded into the Q31
 * multiplier (the generator does TFLM's fold: multiplier * 2^k / n, shift - k, k = floor(log2 n)
 * clamped), MultiplyByQuantizedMultiplier (double rounding), + output zero point, clamped.
 * float32: a running float sum from 0.0f in index order, divided by (float)n. */
#ifndef QE_MEAN_H
#define QE_MEAN_H

#include <stdint.h>

typedef struct {
    uint32_t outer;
    uint32_t reduce;            /* n: elements averaged per output */
    uint32_t inner;
    int32_t sum_offset;         /* int8: -input_zero_point * n */
    int32_t multiplier;         /* int8: Q31 with 1/n folded in */
    int32_t shift;
    int32_t output_zero_point;
} qe_mean_params_t;

void qe_mean_s8(const qe_mean_params_t *p, const int8_t *input, int8_t *output);
void qe_mean_f32(const qe_mean_params_t *p, const float *input, float *output);

#endif
