/* MUL, bit-exact with TF Lite Micro's reference kernels (with broadcasting, see broadcast.h).
 * int8: (x1 - zp1) * (x2 - zp2) rescaled by s1*s2/s_out (MultiplyByQuantizedMultiplier, double
 * rounding), + output zero point, clamped. float32: x1 * x2, clamped.
 * int16 (zero points 0, as TFLM's mul_common.cc requires): the same on int16 values
 * (reference_integer_ops::Mul<int16_t> / BroadcastMul6DSlow): the product, at most 2^30 in
 * magnitude, fits an int32 and goes through the int32 MultiplyByQuantizedMultiplier. */
#ifndef QE_MUL_H
#define QE_MUL_H

#include <stdint.h>

#include "add.h"

typedef struct {
    qe_broadcast_t bc;
    int32_t input1_offset;
    int32_t input2_offset;
    int32_t output_offset;
    int32_t output_multiplier;
    int32_t output_shift;
    int32_t activation_min;
    int32_t activation_max;
} qe_mul_s8_params_t;

void qe_mul_s8(const qe_mul_s8_params_t *p, const int8_t *input1, const int8_t *input2,
               int8_t *output);
typedef qe_mul_s8_params_t qe_mul_s16_params_t;

void qe_mul_s16(const qe_mul_s16_params_t *p, const int16_t *input1, const int16_t *input2,
                int16_t *output);
void qe_mul_f32(const qe_binary_f32_params_t *p, const float *input1, const float *input2,
                float *output);

#endif
