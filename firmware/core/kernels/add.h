/* ADD, bit-exact with TF Lite Micro's reference kernels (with broadcasting, see broadcast.h).
 *
 * int8: TFLM's scheme: both inputs are offset, shifted left by 20, each rescaled to twice the
 * larger input scale (Q31 multiplier, shift <= 0), summed, then rescaled to the output
 * (MultiplyByQuantizedMultiplierSmallerThanOneExp, double rounding), offset and clamped.
 *
 * int16: the same scheme with a left shift of 15 (TFLM's add_common.cc; its int16 Eval calls
 * reference_ops::Add(..., pot_scale = false), i.e. AddGeneralParamScale, and
 * BroadcastAdd6DSlow when broadcasting: never TFLite's power-of-two-scale shortcut). The
 * generator admits zero points 0 only. |v| <= 65535, so v * 2^15 < 2^31 and the sum of the two
 * rescaled values (each at most 2^30 in magnitude: the multipliers are at most one half) fits
 * an int32. */
#ifndef QE_ADD_H
#define QE_ADD_H

#include <stdint.h>

#include "broadcast.h"

typedef struct {
    qe_broadcast_t bc;
    int32_t input1_offset;      /* -zero point */
    int32_t input2_offset;
    int32_t output_offset;      /* +zero point */
    int32_t left_shift;         /* 20 for int8, 15 for int16 */
    int32_t input1_multiplier;
    int32_t input1_shift;       /* <= 0 */
    int32_t input2_multiplier;
    int32_t input2_shift;
    int32_t output_multiplier;
    int32_t output_shift;
    int32_t activation_min;
    int32_t activation_max;
} qe_add_s8_params_t;

void qe_add_s8(const qe_add_s8_params_t *p, const int8_t *input1, const int8_t *input2,
               int8_t *output);

/* int16: int8's parameters (left_shift 15, offsets 0), int16 activation bounds */
typedef qe_add_s8_params_t qe_add_s16_params_t;

void qe_add_s16(const qe_add_s16_params_t *p, const int16_t *input1, const int16_t *input2,
                int16_t *output);

typedef struct {
    qe_broadcast_t bc;
    float activation_min;
    float activation_max;
} qe_binary_f32_params_t;

void qe_add_f32(const qe_binary_f32_params_t *p, const float *input1, const float *input2,
                float *output);

#endif
