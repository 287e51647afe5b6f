/* MAXIMUM and MINIMUM, bit-exact with TF Lite Micro's reference kernels (maximum_minimum.cc:
 * MaximumMinimumBroadcastSlow with MaximumOp / MinimumOp), with numpy broadcasting
 * (broadcast.h).
 *
 * max: a > b ? a : b; min: a < b ? a : b (so a NaN in the second input never wins, one in the
 * first is kept only when the comparison is false, exactly as TFLM). Integer types compare
 * raw values: the generator admits int8/int16 only when both inputs and the output share one
 * quantization (TFLM does not rescale). */
#ifndef QE_MAXIMUM_MINIMUM_H
#define QE_MAXIMUM_MINIMUM_H

#include <stdint.h>

#include "broadcast.h"

void qe_maximum_f32(const qe_broadcast_t *bc, const float *input1, const float *input2, float *output);
void qe_minimum_f32(const qe_broadcast_t *bc, const float *input1, const float *input2, float *output);
void qe_maximum_s8(const qe_broadcast_t *bc, const int8_t *input1, const int8_t *input2, int8_t *output);
void qe_minimum_s8(const qe_broadcast_t *bc, const int8_t *input1, const int8_t *input2, int8_t *output);
void qe_maximum_s16(const qe_broadcast_t *bc, const int16_t *input1, const int16_t *input2,
                    int16_t *output);
void qe_minimum_s16(const qe_broadcast_t *bc, const int16_t *input1, const int16_t *input2,
                    int16_t *output);

#endif
