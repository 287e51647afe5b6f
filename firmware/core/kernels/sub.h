/* SUB, bit-exact with TF Lite Micro's reference kernels (sub.cc: reference_ops::Sub /
 * BroadcastQuantSubSlow for int8, SubWithActivation / BroadcastSubSlow for float32), with
 * numpy broadcasting (broadcast.h).
 *
 * int8: ADD's scheme with a difference: both inputs are offset, shifted left by 20, each
 * rescaled to twice the larger input scale (Q31 multiplier, shift <= 0), subtracted, then
 * rescaled to the output (double rounding), offset and clamped. The multipliers and the
 * parameter layout are ADD's (converters/ops/binary.py: add_params_s8).
 *
 * int16: the same scheme with a left shift of 15 (sub_common.cc; sub.cc's int16 Eval calls
 * reference_ops::Sub / BroadcastQuantSubSlow, the general scheme, never TFLite's
 * BroadcastSub16POTSlow). Zero points 0 (TFLM DCHECKs the offsets are 0; the generator
 * refuses others). */
#ifndef QE_SUB_H
#define QE_SUB_H

#include <stdint.h>

#include "add.h"

typedef qe_add_s8_params_t qe_sub_s8_params_t;

/* output = input1 - input2 */
void qe_sub_s8(const qe_sub_s8_params_t *p, const int8_t *input1, const int8_t *input2,
               int8_t *output);

typedef qe_add_s8_params_t qe_sub_s16_params_t;

void qe_sub_s16(const qe_sub_s16_params_t *p, const int16_t *input1, const int16_t *input2,
                int16_t *output);

void qe_sub_f32(const qe_binary_f32_params_t *p, const float *input1, const float *input2,
                float *output);

#endif
