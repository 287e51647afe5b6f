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

/* int8 CONV_2D with the filter laid out by the generator for the cortex-m-dsp variant
 * (converters/ops/optimized/cortex_m_dsp/conv.py, lower_conv_packed): the same results as
 * qe_conv_s8 on the original filter, bit for bit. Boards with the reference kernels never get this layout; this file's
 * portable implementation (conv.c) is the definition the variant's fast one is tested against.
 *
 * The filter [out_c][k_h][k_w][in_c] as a matrix [out_c][depth], depth = k_h * k_w * in_c, in
 * the packed layout of fully_connected.h (qe_fc_s8_packed_params_t: int32 words of two int16
 * weights, four output channels interleaved, channels padded to a multiple of 4 and the depth to
 * padded_depth, a multiple of 4, with zeros), and the input offset folded into the bias:
 *     bias'[oc] = bias[oc] + input_offset * sum_d w[oc][d]      (one int32 per padded channel)
 * Then, with the window's column col[d] = the input at tap d, or the input's zero point
 * (-input_offset) where the tap lies in the padding,
 *     acc[oc] = bias'[oc] + sum_d w[oc][d] * col[d]
 *             = bias[oc] + sum_{inside taps} w (x + input_offset) + sum_{padded taps} w (-io + io)
 * which is the reference's accumulator exactly (it skips the padded taps: they add w * 0 here).
 * Every partial sum of either form is bounded by |bias| + taps * 128 * (128 + |input_offset|),
 * which the generator checks fits int32, so no order of the additions overflows.
 *
 * mm, when not QE_FLASH_NULL: per padded channel three int32, {multiplier, round, shift} of the
 * variant's 5-instruction output stage (cortex-m-dsp/dsp.h, requant_mm_t, precomputed as
 * requant_mm_init would: round = 2^(e-1) + output_offset * 2^e, shift = e), present only when
 * every channel meets its preconditions (right shift 1..21, a normalized multiplier, the full
 * int8 range); the padding channels repeat channel 0's. The portable definition ignores it. */
#define QE_CONV_PACKED_ROWS 4u
#define QE_CONV_PACKED_MAX_DEPTH 128u   /* padded_depth: the variant's unrolled MAC loop */

typedef struct {
    qe_conv_s8_params_t c;            /* geometry, offsets, activation, multipliers, shifts */
    const QE_FLASH int32_t *mm;       /* see above, or QE_FLASH_NULL */
    uint16_t padded_depth;            /* k_h * k_w * in_c rounded up to a multiple of 4 */
} qe_conv_s8_packed_params_t;

/* bias' is never QE_FLASH_NULL: one int32 per padded output channel */
void qe_conv_s8_packed(const qe_conv_s8_packed_params_t *p, const int8_t *input,
                       const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias,
                       int8_t *output);

/* int8 CONV_2D on a widened input image, the filter laid out by the generator for the
 * cortex-m-dsp variant (converters/ops/optimized/cortex_m_dsp/conv.py, _wide_conv; dilation 1
 * along x): the same results as qe_conv_s8 on the original filter, bit for bit; this file's portable
 * implementation is the definition the variant's is tested against.
 *
 * in_cp = in_c rounded up to even. Output channels in groups of QE_CONV_WIDE_ROWS (4, padded with
 * zero channels); per group, per tap (ky, kx), per channel pair k (channels 2k, 2k + 1; the
 * padding channel in_c, if any, weight 0), per channel r of the group: one int32 word, low half
 * w[oc][ky][kx][2k], high half w[oc][ky][kx][2k + 1] (two's complement: as an int32 value
 * 65536 * hi + (lo mod 65536)). bias: one int32 per padded channel (zeros without one), not
 * folded. mm: as qe_conv_s8_packed_params_t's.
 *
 * scratch: wide_h * wide_w * in_cp int16 of arena (16-byte aligned), which the variant fills per
 * batch with x + input_offset in the input's own order (so a window row, k_w * in_cp int16, is
 * contiguous) and zeros in the padding around it and in the padding channel: the image padded by
 * pad_top / pad_left and up to wide_h x wide_w (as depthwise_conv.h's scratch). A padded tap
 * then adds w * 0, which is the reference's skipping; the sums are the reference's, every
 * partial sum within the generator's int32 bound. A window row is at most
 * QE_CONV_WIDE_MAX_ROW_WORDS words (the variant's unrolled loop). */
#define QE_CONV_WIDE_ROWS 4u
#define QE_CONV_WIDE_MAX_ROW_WORDS 64u

typedef struct {
    qe_conv_s8_params_t c;            /* geometry (dil_w 1), offsets, requantization */
    const QE_FLASH int32_t *mm;       /* or QE_FLASH_NULL */
    uint16_t in_cp;                   /* in_c rounded up to even */
    uint16_t wide_h, wide_w;          /* the scratch image's rows and columns */
} qe_conv_s8_wide_params_t;

void qe_conv_s8_wide(const qe_conv_s8_wide_params_t *p, const int8_t *input,
                     const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias,
                     int8_t *output, int16_t *scratch);

/* int8 CONV_2D with the filter laid out by the generator for the variants without SIMD
 * (cortex-m0, rv32; converters/ops/optimized/cortex_m0/conv.py, lower_conv_rows): the same
 * results as qe_conv_s8 on the original filter, bit for bit; this file's portable definition is
 * the one the variants are tested against (it ignores rq, steps and scratch). The variants widen the
 * input once per batch into an int32 image in scratch, padded with the input's zero point
 * (-input_offset) to wide_h x wide_w (pad_top / pad_left before it), copy each output pixel's
 * window (depth = k_h * k_w * in_c values, in the filter's order) from it into a column of int32
 * after the image in scratch, and run the output channels over the column as FULLY_CONNECTED rows.
 *
 * filter: int32 words, the output channels in groups of QE_CONV_ROWS (4, the last padded with
 * zero channels); per group, per d < padded_depth (depth rounded up to even, zeros past depth),
 * the four channels' w[oc][d] (so one LDM of four words feeds four MULs by one column value).
 * bias': bias[oc] + input_offset * sum_d w[oc][d], one int32 per padded channel: the column's
 * zero points in the padding then add w * (-input_offset) + input_offset * w = 0, the
 * reference's skipped tap, and every other tap w * (x + input_offset), exactly (the generator's
 * int32 bound covers every partial sum).
 *
 * rq, when not QE_FLASH_NULL: per padded channel QE_CONV_RQ_WORDS int32, the right-shift output
 * stage of the cortex-m0 variant precomputed (its requant_right.h, requant_right_t's ten words as
 * requant_right_init sets them, then sat_low and sat_above of fully_connected.h's pairs params:
 * accumulators <= sat_low give activation_min, > sat_above activation_max); present only when
 * every channel's shift is a right shift.
 *
 * steps, when not QE_FLASH_NULL (then rq is not either): the output stage as step tables
 * (converters/ops/optimized/cortex_m0/fully_connected.py, step_table, per channel, with the
 * index from 0): per padded channel a block of n + 5 int32 (n = activation_max -
 * activation_min): {lo, span, mul, add}, then the channel's table t[0..n]. For an accumulator a, u = a - lo
 * (uint32); u > span: saturated (a < lo: activation_min, else activation_max); else
 * k = (u * mul + add) >> 24 (uint32, wrapping) is the output's index or one less, and the
 * output is activation_min + k + (u >= t[k]).
 *
 * scratch: wide_h * wide_w * in_c + padded_depth + out_c rounded up to 4 int32 of arena (4-byte
 * aligned): the image, the column, the accumulators. */
#define QE_CONV_ROWS 4u
#define QE_CONV_ROWS_MAX_DEPTH 128u   /* padded_depth */
#define QE_CONV_RQ_WORDS 12u

typedef struct {
    qe_conv_s8_params_t c;            /* geometry, offsets, activation, multipliers, shifts */
    const QE_FLASH int32_t *rq;       /* see above, or QE_FLASH_NULL */
    const QE_FLASH int32_t *steps;    /* see above, or QE_FLASH_NULL */
    uint16_t padded_depth;            /* k_h * k_w * in_c rounded up to even */
    uint16_t wide_h, wide_w;          /* the scratch image's rows and columns */
} qe_conv_s8_rows_params_t;

/* bias' is never QE_FLASH_NULL: one int32 per padded output channel */
void qe_conv_s8_rows(const qe_conv_s8_rows_params_t *p, const int8_t *input,
                     const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias, int8_t *output,
                     int32_t *scratch);

#endif
