/* FULLY_CONNECTED with int4 weights (int8 input and output), reference kernel, bit-exact with
 * TF Lite Micro's int4 path: TFLM unpacks the packed weights into int8 at Prepare
 * (tensor_utils::UnpackDenseInt4IntoInt8) and runs reference_integer_ops::FullyConnected on
 * them; this kernel reads the packed weights from flash and unpacks each one in the inner
 * loop, so no int8 copy of the weights is ever held in RAM.
 *
 * Packing (TFLite's INT4 tensors): the weights [output_depth][accum_depth] in row-major order,
 * element e in byte e / 2, its low nibble when e is even, its high nibble when e is odd, each a
 * two's-complement value in [-8, 7]; an odd count leaves the last byte's high nibble unused.
 * A row starts in the middle of a byte when accum_depth is odd. Parameters are those of
 * qe_fully_connected_s8 (per-tensor weights: TFLM's FULLY_CONNECTED refuses per-channel int4). */
#ifndef QE_FULLY_CONNECTED_S4_H
#define QE_FULLY_CONNECTED_S4_H

#include <stdint.h>

#include "../qe_flash.h"
#include "fully_connected.h"

/* bias may be QE_FLASH_NULL; weights hold (output_depth * accum_depth + 1) / 2 bytes */
void qe_fully_connected_s4(const qe_fc_s8_params_t *p, const int8_t *input,
                           const QE_FLASH uint8_t *weights, const QE_FLASH int32_t *bias,
                           int8_t *output);

/* int4 weights in a layout of the generator's for the optimized variants (converters/ops/
 * optimized/cortex_m_dsp/fully_connected_s4.py, pack_fc_s4_weights): the same results as
 * qe_fully_connected_s4 on TFLite's packing, bit for bit, in half the flash of int8's weights.
 * Boards with the reference kernels never get this layout; fully_connected_s4.c's portable
 * definition is the one the variants are tested against. Parameters: qe_fc_s8_packed_params_t
 * (fully_connected.h; accum_depth <= QE_FC_PACKED_MAX_DEPTH).
 *
 * Folded at generation time, exactly (integers):
 *     w'[o][d] = w[o][d] + filter_offset              (the generator uses the layout only when
 *                                                        every w' is in [-8, 7])
 *     bias'[o] = bias[o] + input_offset * sum_d w'[o][d]
 * so acc[o] = bias'[o] + sum_d w'[o][d] * x[d] is the reference's accumulator.
 *
 * Layout: rows in groups of QE_FC_PACKED_ROWS (4; the last padded with zero rows), the depth
 * padded with zero weights to padded_depth (a multiple of 4); per group, per quad q, per half h
 * (d = 4q+h in the low 16-bit lane, d = 4q+h+2 in the high one: SXTB16's order, as in
 * qe_fully_connected_s8_packed), one uint32 word holding the four rows' weights of both inputs,
 * in each 16-bit lane:
 *     bits 12..15  w'[4g+0][d]        two's complement (the lane read as int16: 4096 w')
 *     bits  8..11  w'[4g+1][d] + 8    offset binary (0..15)
 *     bits  4.. 7  w'[4g+2][d] + 8
 *     bits  0.. 3  w'[4g+3][d] + 8
 * so the lane read as an int16 is 4096 w'0 + 256 (w'1 + 8) + 16 (w'2 + 8) + (w'3 + 8): linear in
 * all four weights, which lets the DSP variant take the fourth row from the unmasked word (see
 * optimized/cortex-m-dsp/fully_connected_s4.c). After a group's padded_depth / 2 words come its
 * four bias' (int32 bit patterns), so the stream is read front to back with one pointer. */
void qe_fully_connected_s4_packed(const qe_fc_s8_packed_params_t *p, const int8_t *input,
                                  const QE_FLASH uint32_t *stream, int8_t *output);

/* The int4 layout above for accum_depth > QE_FC_PACKED_MAX_DEPTH (issue 39: MinAtar's FC 1,024 ->
 * 128; converters/ops/optimized/cortex_m_dsp/fully_connected_s4.py, pack_fc_s4_deep): the same
 * layout with padded_depth a multiple of 8, the same results as qe_fully_connected_s4 bit for
 * bit. Its own entry, so that a firmware whose int4 layers are all deep or on the s4 mm stream
 * does not link the packed kernels' unrolled groups (~6 KB on cortex-m-dsp). */
void qe_fully_connected_s4_deep(const qe_fc_s8_packed_params_t *p, const int8_t *input,
                                const QE_FLASH uint32_t *stream, int8_t *output);

/* int4 weights in the "s4 mm stream" (issue 39; converters/ops/optimized/cortex_m_dsp/
 * fully_connected_s4.py, pack_fc_s4_mm): the same results as qe_fully_connected_s4, bit for bit,
 * for one batch, accum_depth a multiple of 4 (<= QE_FC_PACKED_MAX_DEPTH), the full int8 output
 * range, and a stage the cortex-m-dsp kernel's asm covers (mode 0/1: requant_mm_t's right shift
 * e in [1, 21] without / with the sign fix; mode 2: a left shift L = output_shift in [0, 30]), the
 * input word-aligned. The int4 layout above with each group's four bias' words replaced by a
 * head in front of its words, the starting values of the DSP kernel's accumulators, which sum
 * the lanes under nested masks (the whole word, then its bottom one, two, three nibbles cleared):
 *     h0 = 4096 b0, h1 = h0 + 256 b1, h2 = h1 + 16 b2, h3 = h2 + b3 (running sums, mod 2^32)
 * (b_r the row's bias' = bias + input_offset * sum_d w'), so that after the MAC loop, with a0..a3
 * those accumulators and a1 - a0, a2 - a1, a3 - a2 the int4 layout's masked sums, a0 >> 11,
 * ((a1 - a0) >> 7) - 16 X, ((a2 - a1) >> 3) - 16 X and 2 (a3 - a2) - 16 X (X = sum_d x[d]) are
 * the doubled accumulators 2 acc exactly. The generator admits the stream only where every such
 * value lies in int32 for every int8 input: per row |b| + 128 sum_d |w'| < 2^30 (doubled), and for
 * rows 0, 1, 2 the scaled sums (that bound + 1024 accum_depth for rows 1 and 2) below 2^19, 2^23,
 * 2^27; mode 2 also needs that bound times 2^(L+1) below 2^31 (no wrap, no saturation). The
 * running sums themselves may wrap: their differences are those values. */
typedef struct {
    int32_t multiplier;         /* m, in [2^30, 2^31) */
    int32_t round;              /* modes 0/1: 2^(e-1) + output_offset * 2^e; mode 2: output_offset */
    uint32_t shift;             /* modes 0/1: e = -output_shift in [1, 21]; mode 2: output_shift */
    uint32_t mode;              /* 0: right shift, 1: right shift with the sign fix, 2: left */
    uint32_t entry;             /* the DSP MAC loop's entry, bytes before its odd loop's end */
    uint32_t output_depth;      /* the real rows; the stream has them padded to 4 */
    uint32_t accum_depth;       /* a multiple of 4, <= QE_FC_PACKED_MAX_DEPTH */
    int32_t output_offset;      /* in [-128, 127] */
    int32_t output_shift;       /* TFLite's (the portable definition's requantization) */
    uint32_t block;             /* the DSP output block, bytes after the odd MAC loop's end */
    uint32_t xshift;            /* 16 X's shift there: 4, or 4 + L for the blocks of L <= 3 */
} qe_fc_s4_mm_params_t;

void qe_fully_connected_s4_mm(const qe_fc_s4_mm_params_t *p, const int8_t *input,
                              const QE_FLASH uint32_t *stream, int8_t *output);

/* int4 weights in the generator's row-pair layout for cores without SIMD multiply-accumulate
 * (the cortex-m0 and rv32 variants: converters/ops/optimized/cortex_m0/fully_connected_s4.py,
 * s4_pairs_stream): the same results as qe_fully_connected_s4, bit for bit, half a byte per
 * weight. Parameters: qe_fc_s8_params_t with input_offset = filter_offset = 0 (folded in, as
 * below; any depth). Folded at generation time, exactly: w' = w + filter_offset (in [-8, 7], or
 * the generator keeps TFLite's packing), bias' = bias + input_offset * sum_d w'.
 *
 * Layout: rows in groups of 4 (the last padded with zero rows); per group, per input d, two
 * bytes: (w'[4g+1][d] & 15) << 4 | (w'[4g][d] & 15), then the same for rows 4g+2 (low nibble)
 * and 4g+3; the group's 2 * accum_depth bytes padded with zeros to a whole word, then its four
 * bias' (int32). A byte b is read through a table of 256 int32, 65536 * hi + lo (hi, lo its
 * nibbles as int4), so one 32-bit multiply by x[d] gives two rows' products, and a run of at
 * most QE_S4_PAIRS_CHUNK inputs sums both in one int32 (|sum| <= 31 * 1024 < 2^15 per row:
 * split exactly by a sign extension of the low half). */
#define QE_S4_PAIRS_CHUNK 31u

void qe_fully_connected_s4_pairs(const qe_fc_s8_params_t *p, const int8_t *input,
                                 const QE_FLASH uint32_t *stream, int8_t *output);

/* int4 weights in the avr variant's stream (converters/ops/optimized/avr/fully_connected_s4.py,
 * avr_s4_stream): the same results as qe_fully_connected_s4, bit for bit, half a byte per weight
 * plus a byte per chunk. Parameters: qe_fc_s8_avr_params_t (fully_connected.h: the output stage
 * constants as for the int8 avr stream; the portable definition ignores them). Folded at
 * generation time, exactly: w' = w + filter_offset (in [-8, 7], or the generator keeps TFLite's
 * packing), bias' = bias + input_offset * sum_d w'; the stream holds u = w' + 8 (offset binary,
 * 0..15: the AVR multiplies it unsigned, MULSU), so
 *     acc[o] = bias'[o] + sum_d u[o][d] * x[d] - 8 * sum_d x[d].
 * Layout: rows in groups of QE_FC_AVR_ROWS (4; the last padded with rows of nibbles 0, whose
 * outputs are never stored); per group chunks, each one byte L (1..255) then per input two bytes
 * (u[4g+1][d] << 4 | u[4g][d]) and (u[4g+3][d] << 4 | u[4g+2][d]), the chunks covering the depth
 * in order, and a 0 byte ending the group. The generator cuts the chunks (greedily, as for the
 * int8 stream) so that every row's sum_d u x over a chunk lies in int16 for every int8 input
 * (sum u <= 256), and uses the stream only when every row's sum_d |w'| * 128 < 2^23, so the dot
 * product lies in 24 bits. bias' has one int32 per padded row. */
void qe_fully_connected_s4_avr(const qe_fc_s8_avr_params_t *p, const int8_t *input,
                               const QE_FLASH uint8_t *stream, const QE_FLASH int32_t *bias,
                               int8_t *output);

#endif
