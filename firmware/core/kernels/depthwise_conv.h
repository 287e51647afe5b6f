/* DEPTHWISE_CONV_2D reference kernels, bit-exact with TF Lite Micro's
 * reference_integer_ops::DepthwiseConvPerChannel (int8, per-channel symmetric weights, int32
 * bias) and reference_ops::DepthwiseConv (float32). NHWC input/output, filter
 * [1][k_h][k_w][out_c], out_c = in_c * depth_multiplier, output channel ic * dm + m. */
#ifndef QE_DEPTHWISE_CONV_H
#define QE_DEPTHWISE_CONV_H

#include <stdint.h>

#include "window.h"

/* bias may be QE_FLASH_NULL */
void qe_depthwise_conv_s8(const qe_conv_s8_params_t *p, const int8_t *input,
                          const QE_FLASH int8_t *filter, const QE_FLASH int32_t *bias, int8_t *output);
void qe_depthwise_conv_f32(const qe_conv_f32_params_t *p, const float *input,
                           const QE_FLASH float *filter, const QE_FLASH float *bias, float *output);

#endif
