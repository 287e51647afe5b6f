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

/* int8 DEPTHWISE_CONV_2D with depth multiplier 1, the filter laid out by the generator for the
 * cortex-m-dsp variant (converters/ops/optimized/cortex_m_dsp/conv.py, _packed_depthwise): the
 * same results as qe_depthwise_conv_s8 on the original filter, bit for bit. Boards with the reference kernels
 * never get this layout; this file's portable implementation (depthwise_conv.c) is the
 * definition the variant's fast one is tested against.
 *
 * Channels in groups of 4 (padded_c = in_c rounded up to 4; the padding channels' weights 0);
 * per group, per tap (ky, kx) in order, two int32 words of two int16 weights each, as SXTB16
 * splits four channels: w[c0] | w[c2] << 16, then w[c1] | w[c3] << 16 (low half the bit pattern
 * of the first). bias: one int32 per padded channel (zeros without a bias). mm: as conv.h's
 * qe_conv_s8_packed_params_t (per padded channel {multiplier, round, shift} of
 * cortex-m-dsp/dsp.h's requant_mm_t, or QE_FLASH_NULL).
 *
 * scratch: wide_h * wide_w * padded_c int16 of arena (16-byte aligned), which the variant fills
 * per batch with the input + input_offset, widened (group by group of four channels), and zeros
 * around it: the image padded by
 * pad_top / pad_left and up to wide_h x wide_w, enough for every window tap
 * (wide_h >= (out_h - 1) * stride_h + (k_h - 1) * dil_h + 1 and >= pad_top + in_h; likewise wide_w).
 * A padded tap then adds w * 0, which is what the reference's skipping adds: the sums are the
 * reference's, and the generator's bound on |bias| + sum |w (x + input_offset)| keeps every
 * partial sum in int32. The portable definition does not use it. */
#define QE_DW_PACKED_CH 4u

typedef struct {
    qe_conv_s8_params_t c;            /* geometry (depth multiplier 1), offsets, requantization */
    const QE_FLASH int32_t *mm;       /* or QE_FLASH_NULL */
    uint16_t padded_c;                /* in_c rounded up to a multiple of 4 */
    uint16_t wide_h, wide_w;          /* the scratch image's rows and columns */
} qe_dw_s8_packed_params_t;

void qe_depthwise_conv_s8_packed(const qe_dw_s8_packed_params_t *p, const int8_t *input,
                                 const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias,
                                 int8_t *output, int16_t *scratch);

#endif
