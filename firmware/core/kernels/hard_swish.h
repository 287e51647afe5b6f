/* HARD_SWISH, bit-exact with TF Lite Micro's reference kernels (hard_swish.cc:
 * reference_ops::HardSwish, float32 and int8).
 *
 * float32: x * min(6, max(0, x + 3)) / 6, in that order of operations.
 *
 * int8: TFLM's int16 fixed point. The input (minus its zero point) is put on a 2^7 finer
 * "hires" scale; rescaled by the output multiplier (Q15, a right shift after) it is x on the
 * output scale; rescaled by the "reluish" multiplier (Q15, with a saturating left shift or a
 * rounding right shift) it is x / 3 in Q15, saturated to [-1, 1], then mapped to
 * (x / 3 + 1) / 2 = relu6(x + 3) / 6 in [0, 1]. Their product (a truncating doubling high
 * multiply, which TFLM picked to cancel the rounding biases), shifted to the output scale, plus
 * the zero point (added in int16_t, as TFLM does), clamped to int8. The multipliers come from
 * TFLM's Prepare (converters/ops/hard_swish.py: hard_swish_params_s8; the Python twin of this
 * kernel is hard_swish_s8 there). */
#ifndef QE_HARD_SWISH_H
#define QE_HARD_SWISH_H

#include <stdint.h>

typedef struct {
    int32_t input_zero_point;
    int32_t output_zero_point;
    int16_t output_multiplier;      /* Q15 */
    int16_t reluish_multiplier;     /* Q15 */
    int32_t output_exponent;        /* in [-31, 0] */
    int32_t reluish_exponent;       /* in [-31, 31] */
} qe_hard_swish_params_t;

/* input and output may be the same buffer */
void qe_hard_swish_s8(const qe_hard_swish_params_t *p, uint32_t size, const int8_t *input,
                      int8_t *output);
void qe_hard_swish_f32(uint32_t size, const float *input, float *output);

#endif
