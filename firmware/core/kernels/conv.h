/* CONV_2D reference kernels, bit-exact with TF Lite Micro's reference_integer_ops::ConvPerChannel
 * (int8 input/output, int8 symmetric weights with one scale per output channel, int32 bias) and
 * reference_ops::Conv (float32), and the int16x8 ConvPerChannel (int16 activations, int64
 * bias). NHWC input/output, filter [out_c][k_h][k_w][in_c]; no groups. */
#ifndef QE_CONV_H
#define QE_CONV_H

#include <stdint.h>

#include "window.h"

/* bias may be QE_FLASH_NULL */
void qe_conv_s8(const qe_conv_s8_params_t *p, const int8_t *input, const QE_FLASH int8_t *filter,
                const QE_FLASH int32_t *bias, int8_t *output);
/* int16x8: int16 input/output (zero point 0), int8 filter, int64 bias (may be QE_FLASH_NULL);
 * p's offsets are unused (0) */
void qe_conv_s16(const qe_conv_s8_params_t *p, const int16_t *input,
                 const QE_FLASH int8_t *filter, const QE_FLASH int64_t *bias, int16_t *output);
void qe_conv_f32(const qe_conv_f32_params_t *p, const float *input, const QE_FLASH float *filter,
                 const QE_FLASH float *bias, float *output);

#endif
