/* TRANSPOSE_CONV reference kernels, bit-exact with TF Lite Micro's transpose_conv.cc:
 * reference_ops::TransposeConv (float32), reference_integer_ops::TransposeConv (int8 input and
 * output, int8 symmetric filter with one scale per output channel or one for all, int32 bias)
 * and its int16x8 form (int16 activations, zero point 0; int8 filter; int64 bias and an int64
 * accumulator). NHWC input and output, filter [out_c][k_h][k_w][in_c].
 *
 * A "scatter": every input pixel adds its products to the output pixels its window covers,
 *     out_y = in_y * stride_h - pad_top + filter_y,   out_x = in_x * stride_w - pad_left + filter_x
 * (outside the output: dropped), then per output value the bias, the requantization and the
 * clamp. The geometry (qe_window_t, dilation 1) is TFLM's: pad_top / pad_left are
 * ComputePaddingHeightWidth of the OUTPUT's height and width with the filter and the strides;
 * in_* are the op's input, out_* its output.
 *
 * float32 accumulates in the output itself (as TFLM); per output value the products are added
 * in TFLM's order (input pixels in row-major order, then input channels), so the sums are its
 * sums bit for bit (built with -ffp-contract=off). int8 and int16x8 accumulate in `scratch`,
 * batches * out_h * out_w * out_c int32 (int8) or int64 (int16x8) of arena: TFLM's scratch
 * buffer, the size it requests (output flat size times the accumulator's size). The generator
 * (converters/ops/transpose_conv.py) checks that no partial sum can leave int32 (int8) or 48
 * bits (int16x8, what the 64-bit MultiplyByQuantizedMultiplier admits). */
#ifndef QE_TRANSPOSE_CONV_H
#define QE_TRANSPOSE_CONV_H

#include <stdint.h>

#include "window.h"

/* bias may be QE_FLASH_NULL */
void qe_transpose_conv_f32(const qe_conv_f32_params_t *p, const float *input,
                           const QE_FLASH float *filter, const QE_FLASH float *bias,
                           float *output);
void qe_transpose_conv_s8(const qe_conv_s8_params_t *p, const int8_t *input,
                          const QE_FLASH int8_t *filter, const QE_FLASH int32_t *bias,
                          int8_t *output, int32_t *scratch);
/* p's offsets are unused (0) */
void qe_transpose_conv_s16(const qe_conv_s8_params_t *p, const int16_t *input,
                           const QE_FLASH int8_t *filter, const QE_FLASH int64_t *bias,
                           int16_t *output, int64_t *scratch);

#endif
