/* LEAKY_RELU, bit-exact with TF Lite Micro's reference kernels (leaky_relu.cc:
 * reference_ops::LeakyRelu for float32, QuantizeLeakyRelu for int8 and int16).
 *
 * float32: x > 0 ? x : x * alpha (alpha may be negative or above one).
 * int8/int16: TFLM's two multipliers, both from its Prepare (QuantizeMultiplier of the ratios
 * s_in / s_out and s_in * alpha / s_out, in double): v = q - zero_point_in; v >= 0 is rescaled by
 * the identity multiplier, v < 0 by the alpha one (whose magnitude is stored, with a sign flag:
 * TFLM negates the rescaled value for a negative alpha); then + zero_point_out, clamped to the
 * type's range. */
#ifndef QE_LEAKY_RELU_H
#define QE_LEAKY_RELU_H

#include <stdint.h>

typedef struct {
    int32_t input_zero_point;
    int32_t output_zero_point;
    int32_t identity_multiplier;    /* Q31, >= 0 */
    int32_t identity_shift;
    int32_t alpha_multiplier;       /* Q31 magnitude, >= 0 */
    int32_t alpha_shift;
    int32_t alpha_negative;         /* 1: the rescaled negative part is negated */
} qe_leaky_relu_params_t;

/* input and output may be the same buffer */
void qe_leaky_relu_s8(const qe_leaky_relu_params_t *p, uint32_t size, const int8_t *input,
                      int8_t *output);
void qe_leaky_relu_s16(const qe_leaky_relu_params_t *p, uint32_t size, const int16_t *input,
                       int16_t *output);
void qe_leaky_relu_f32(uint32_t size, float alpha, const float *input, float *output);

#endif
