/* FULLY_CONNECTED, reference kernels (bit-exact with TF Lite Micro's reference kernels).
 * output[b][o] = act(bias[o] + sum_d input[b][d] * weights[o][d]); weights are [out][in]. */
#ifndef QE_FULLY_CONNECTED_H
#define QE_FULLY_CONNECTED_H

#include <stdint.h>

#include "../qe_flash.h"

typedef struct {
    int32_t input_offset;       /* -input zero point */
    int32_t filter_offset;      /* -weights zero point (0: symmetric weights) */
    int32_t output_offset;      /* +output zero point */
    int32_t output_multiplier;  /* Q31 multiplier of input_scale*weight_scale/output_scale */
    int32_t output_shift;       /* exponent, TFLite convention: > 0 shifts left */
    int32_t activation_min;     /* fused activation, already in the quantized domain */
    int32_t activation_max;
    uint16_t batches;
    uint16_t accum_depth;
    uint16_t output_depth;
} qe_fc_s8_params_t;

/* bias may be QE_FLASH_NULL */
void qe_fully_connected_s8(const qe_fc_s8_params_t *p, const int8_t *input,
                           const QE_FLASH int8_t *weights, const QE_FLASH int32_t *bias,
                           int8_t *output);

typedef struct {
    float activation_min;       /* -FLT_MAX/FLT_MAX when there is no fused activation */
    float activation_max;
    uint16_t batches;
    uint16_t accum_depth;
    uint16_t output_depth;
} qe_fc_f32_params_t;

void qe_fully_connected_f32(const qe_fc_f32_params_t *p, const float *input,
                            const QE_FLASH float *weights, const QE_FLASH float *bias,
                            float *output);

/* Per-channel requantization (int8 per-channel weights, and the int16x8 path): one multiplier
 * and shift per output channel, or one for all when channel_stride is 0. Weights are
 * symmetric here (no filter offset), as TFLM's per-channel kernels assume. */
typedef struct {
    int32_t input_offset;       /* -input zero point (int16x8: 0) */
    int32_t output_offset;      /* +output zero point (int16x8: 0) */
    int32_t activation_min;
    int32_t activation_max;
    const QE_FLASH int32_t *multipliers; /* Q31, per channel */
    const QE_FLASH int8_t *shifts;       /* TFLite convention, per channel */
    uint8_t channel_stride;     /* 1: per channel, 0: one multiplier for all channels */
    uint16_t batches;
    uint16_t accum_depth;
    uint16_t output_depth;
} qe_fc_pc_params_t;

/* int8 input/output, int8 per-channel weights, int32 bias (may be QE_FLASH_NULL): TFLM
 * reference_integer_ops::FullyConnectedPerChannel. */
void qe_fully_connected_s8_pc(const qe_fc_pc_params_t *p, const int8_t *input,
                              const QE_FLASH int8_t *weights, const QE_FLASH int32_t *bias,
                              int8_t *output);

/* int16 input/output, int8 weights, int64 bias (may be QE_FLASH_NULL), int64 accumulator and the
 * 64-bit MultiplyByQuantizedMultiplier: TFLM's int16x8 FullyConnected (per tensor or per
 * channel). */
void qe_fully_connected_s16(const qe_fc_pc_params_t *p, const int16_t *input,
                            const QE_FLASH int8_t *weights, const QE_FLASH int64_t *bias,
                            int16_t *output);

/* The accumulator readout of quarl-edge's int8-acc scheme (not a TFLite op; quarl_edge/quant/remedies.py):
 * int8 input and per-tensor or per-channel symmetric int8 weights, and instead of requantizing
 * to int8, output[b][o] = (float)(sum_d w[o][d] * (in[b][d] + input_offset) + bias[o]) * scales[o]
 * in float32. argmax over it has none of the ties that rounding to 256 levels makes. */
typedef struct {
    int32_t input_offset;       /* -input zero point */
    const QE_FLASH float *scales; /* input_scale * weight_scale[o] (float32 of the double product) */
    uint8_t channel_stride;     /* 1: per channel, 0: one scale for all outputs */
    uint16_t batches;
    uint16_t accum_depth;
    uint16_t output_depth;
} qe_fc_s8_acc_params_t;

void qe_fully_connected_s8_acc_f32(const qe_fc_s8_acc_params_t *p, const int8_t *input,
                                   const QE_FLASH int8_t *weights, const QE_FLASH int32_t *bias,
                                   float *output);

/* int8 per-tensor FULLY_CONNECTED with the weights laid out by the generator for the optimized
 * variants (converters/ops/optimized/cortex_m_dsp/fully_connected.py, pack_fc_weights): the same
 * results as qe_fully_connected_s8 on the original weights, bit for bit. Boards with the reference kernels
 * never get this layout; this file's portable implementation (fully_connected.c) is the
 * definition the variants' fast versions are tested against.
 *
 * The generator folds both zero points in at generation time, exactly (integer arithmetic):
 *     w'[o][d]  = w[o][d] + filter_offset                    (in [-255, 255]: an int16)
 *     bias'[o]  = bias[o] + input_offset * sum_d w'[o][d]     (an int32: within the generator's
 *                                                              worst-case accumulator bound)
 * so that acc[o] = bias'[o] + sum_d w'[o][d] * x[d] is the reference's
 * bias[o] + sum_d (w[o][d] + filter_offset) * (x[d] + input_offset), and no partial sum, in any
 * order, leaves that bound (|bias'| + sum |w' x| <= |bias| + sum |w'| (|io| + 128)).
 *
 * Layout: rows in groups of QE_FC_PACKED_ROWS (4; the last group padded with zero rows), the
 * depth padded with zero weights to padded_depth (a multiple of 4), and per group, per quad of
 * inputs q (d = 4q .. 4q+3), per half h (0: d = 4q, 4q+2; 1: d = 4q+1, 4q+3), per row r of the
 * group, one int32 word holding two int16 weights: low half w'[4g+r][4q+h], high half
 * w'[4g+r][4q+h+2] (the bit pattern hi:lo, two's complement, as SMLAD reads its lanes; as an
 * int32 value 65536 * hi + (lo mod 65536)).
 * That is the order in which the DSP variant's SXTB16 splits four int8 inputs into two lane
 * pairs, so one LDM fetches the weights of four rows for one SMLAD each. bias' has one int32
 * per padded row. */
#define QE_FC_PACKED_ROWS 4u
#define QE_FC_PACKED_MAX_DEPTH 128u   /* the variants widen the input into a stack buffer */

typedef struct {
    int32_t output_offset;      /* +output zero point */
    int32_t output_multiplier;  /* Q31 */
    int32_t output_shift;       /* TFLite convention: > 0 shifts left */
    int32_t activation_min;
    int32_t activation_max;
    uint16_t batches;
    uint16_t accum_depth;       /* the input's depth, <= QE_FC_PACKED_MAX_DEPTH */
    uint16_t padded_depth;      /* accum_depth rounded up to a multiple of 4 */
    uint16_t output_depth;      /* the real rows (outputs) */
} qe_fc_s8_packed_params_t;

void qe_fully_connected_s8_packed(const qe_fc_s8_packed_params_t *p, const int8_t *input,
                                  const QE_FLASH int32_t *weights, const QE_FLASH int32_t *bias,
                                  int8_t *output);

/* int8 per-tensor FULLY_CONNECTED in the "mm stream" layout (issue 41; converters/ops/optimized/
 * cortex_m_dsp/fully_connected.py, pack_fc_mm): the same results as qe_fully_connected_s8 on the
 * original weights, bit for bit, for the layers the cortex-m-dsp variant's four-instruction output
 * stage fits (cortex-m-dsp/dsp.h, requant_mm_t: right shift e in [1, 21], a normalized multiplier,
 * the full int8 range), with one batch and accum_depth a multiple of 4 (<= QE_FC_PACKED_MAX_DEPTH),
 * the input word-aligned (the generator's arena offsets are multiples of 16).
 *
 * The packed layout above with two changes, both made at generation time:
 *  - every weight word and bias' doubled: w'' = 2 w' (in [-510, 510], an int16), bias'' =
 *    2 bias', so the accumulator is 2 acc, exactly: the generator admits the layout only when
 *    |bias'| + sum_d |w'| * 128 < 2^30 for every row, so no partial sum of the doubled terms
 *    leaves int32 (the DSP stage's QADD(acc, acc) is then not needed);
 *  - each group's four bias'' words come first in its part of the one stream (the kernel loads
 *    them into the accumulators with the same LDM that walks the weights): per group of four
 *    rows, 4 bias'' words, then the group's padded_depth * 2 weight words as in the packed layout.
 * The params carry requant_mm_t's constants (round = 2^(e-1) + output_offset * 2^e) and the
 * unrolled MAC loop's entry (44 bytes a quad), both computed by the generator. */
typedef struct {
    int32_t multiplier;         /* m, in [2^30, 2^31) */
    int32_t round;              /* 2^(e-1) + output_offset * 2^e */
    uint32_t shift;             /* e = -output_shift, in [1, 21] */
    uint32_t fix;               /* 1 unless output_offset == -128 (requant_mm_t's sign fix) */
    uint32_t entry;             /* 44 * accum_depth / 4 (the DSP kernel's MAC loop entry) */
    uint32_t output_depth;      /* the real rows (outputs); the stream has them padded to 4 */
    uint32_t accum_depth;       /* a multiple of 4, <= QE_FC_PACKED_MAX_DEPTH */
    int32_t output_offset;      /* in [-128, 127]; the activation is the full int8 range */
} qe_fc_s8_mm_params_t;

void qe_fully_connected_s8_mm(const qe_fc_s8_mm_params_t *p, const int8_t *input,
                              const QE_FLASH int32_t *stream, int8_t *output);

/* int8 per-tensor FULLY_CONNECTED in the layout of the avr variant (converters/ops/
 * fully_connected.py, avr_fc_stream): the same results as qe_fully_connected_s8 on the original
 * weights, bit for bit. Both zero points folded in at generation time, exactly:
 *     w'[o][d] = w[o][d] + filter_offset     (the generator uses this layout only when every w'
 *                                             is an int8)
 *     bias'[o] = bias[o] + input_offset * sum_d w'[o][d]
 * so acc[o] = bias'[o] + sum_d w'[o][d] * x[d] is the reference's accumulator.
 *
 * Layout: rows in groups of QE_FC_AVR_ROWS (4; the last group padded with zero rows); per group
 * a stream of chunks, each one byte L (1..255) then L * 4 int8 weights, input by input
 * (w'[4g][d], w'[4g+1][d], w'[4g+2][d], w'[4g+3][d], then d+1, ...), the chunks covering the depth
 * in order, and a 0 byte ending the group. The generator cuts the chunks so that, for every row,
 * the chunk's sum_d w'x lies in int16 for every int8 input (largest value 127 P + 128 N <= 32767,
 * smallest -128 P - 127 N >= -32768; P, N the chunk's sums of positive and |negative| weights),
 * which lets the kernel sum a chunk in 16 bits, and each row's sum |w'| <= 65535, so the whole
 * dot product lies in 24 bits. bias' has one int32 per padded row. */
#define QE_FC_AVR_ROWS 4u

typedef struct {
    int32_t output_offset;      /* +output zero point */
    int32_t output_multiplier;  /* Q31 */
    int32_t output_shift;       /* TFLite convention: > 0 shifts left */
    int32_t activation_min;
    int32_t activation_max;
    /* The avr variant's output stage, precomputed by the generator (converters/ops/
     * fully_connected.py, avr_output_stage, which says why it is requant.h's, exactly); the
     * portable definition ignores these. With fast = 1: accumulators <= sat_low give
     * activation_min, >= sat_high activation_max, and one strictly between (then a 24-bit
     * integer) gives offset + byte (4 + byte_moves) of acc * m' + r' (m' = m_prime, 5 bytes
     * little-endian; r' = round[acc < 0], bytes 3..7 of a 64-bit constant whose bytes 0..2 are 0). */
    int32_t sat_low;
    int32_t sat_high;
    uint8_t fast;
    uint8_t m_prime[5];
    uint8_t round[2][5];
    uint8_t byte_moves;
    uint16_t batches;
    uint16_t accum_depth;
    uint16_t output_depth;      /* the real rows (outputs) */
} qe_fc_s8_avr_params_t;

void qe_fully_connected_s8_avr(const qe_fc_s8_avr_params_t *p, const int8_t *input,
                               const QE_FLASH int8_t *stream, const QE_FLASH int32_t *bias,
                               int8_t *output);

/* int8 per-tensor FULLY_CONNECTED in the chunked row-pair layout of the cortex-m0 variant
 * (converters/ops/optimized/cortex_m0/fully_connected.py, pairs_fc_stream): the same results as
 * qe_fully_connected_s8 on the original weights, bit for bit. Both zero points folded in as for
 * the avr layout (w' = w + filter_offset in [-255, 255], bias' = bias + input_offset * sum w').
 * Rows in groups of QE_FC_PAIRS_ROWS (4, the last padded with zero rows); per group chunks of
 * the depth, in order, each one int32 word 4 L (L >= 1 inputs: the bytes of the kernel's widened
 * int32 input it spans), then per input two int32 words whose
 * values are 65536 * w'[4g+1][d] + w'[4g][d] and 65536 * w'[4g+3][d] + w'[4g+2][d]; a 0 word
 * ends the group. The generator cuts the chunks (as for the avr stream) so that every row's sum
 * over a chunk lies in int16 for every int8 input: a 32-bit sum of word * x over the chunk is
 * then 65536 H + L (mod 2^32) with L, H the two rows' exact sums, L its low half sign-extended.
 * Depth <= QE_FC_PACKED_MAX_DEPTH (the variant widens the input into a stack buffer). */
#define QE_FC_PAIRS_ROWS 4u

typedef struct {
    int32_t output_offset;      /* +output zero point */
    int32_t output_multiplier;  /* Q31 */
    int32_t output_shift;       /* TFLite convention: > 0 shifts left */
    int32_t activation_min;
    int32_t activation_max;
    /* the generator's saturation bounds (converters/ops/optimized/cortex_m0/fully_connected.py,
     * saturation_bounds; the portable definition ignores them): accumulators <= sat_low give activation_min,
     * accumulators > sat_above activation_max, with no requantization (INT32_MIN, INT32_MAX:
     * none; accumulators lie in [-INT32_MAX, INT32_MAX]) */
    int32_t sat_low;
    int32_t sat_above;
    uint16_t batches;
    uint16_t accum_depth;       /* <= QE_FC_PACKED_MAX_DEPTH (the pairs; the byte lanes: any) */
    uint16_t output_depth;      /* the real rows (outputs) */
    /* the output stage as a step table (converters/ops/optimized/cortex_m0/fully_connected.py,
     * step_table; NULL: none, and the portable definition ignores it): for sat_low < acc <=
     * sat_above, u = acc - steps_lo, b = (u * steps_mul + steps_add) >> 24 (uint32, wrapping);
     * the output byte is b + (u >= steps[b]); steps has 256 entries */
    const uint32_t *steps;
    int32_t steps_lo;
    uint32_t steps_mul;
    uint32_t steps_add;
} qe_fc_s8_pairs_params_t;

void qe_fully_connected_s8_pairs(const qe_fc_s8_pairs_params_t *p, const int8_t *input,
                                 const QE_FLASH int32_t *stream, const QE_FLASH int32_t *bias,
                                 int8_t *output);

/* int8 per-tensor FULLY_CONNECTED of any depth in the byte-lane layout of the cortex-m0 and rv32
 * variants (converters/ops/optimized/cortex_m0/fully_connected.py, bytes_fc_words; the layers
 * deeper than QE_FC_PACKED_MAX_DEPTH, whose row pairs would take twice the int8 weights' flash and
 * a widened input longer than the stack buffer): the same results as qe_fully_connected_s8 on
 * the original weights, bit for bit. The generator uses it only when every w' = w +
 * filter_offset is an int8 (TFLite's symmetric weights), bias' = bias + input_offset * sum w'.
 *
 * Layout: rows in groups of QE_FC_BYTES_ROWS (4, the last padded with zero rows), per group and
 * per input d < padded depth (accum_depth rounded up to QE_FC_BYTES_DEPTH_STEP; the padding's
 * weights are 0) one uint32 word whose byte k (little-endian) is u_k = w'[4g+k][d] + 128, in
 * [0, 255]: one byte a weight, as the int8 weights. The kernel multiplies the word and its
 * logical right shifts by 8, 16 and 24 bits by x[d] and sums each over the depth (32-bit sums,
 * wrapping): S_k = sum_d (word >> 8k) x[d]. Since u_k = (word >> 8k) - 256 (word >> 8(k+1)),
 *     acc[4g+k] = bias' - 128 X + S_k - 256 S_(k+1)   (mod 2^32; S_4 = 0, X = sum_d x[d]),
 * which is the reference's accumulator modulo 2^32, hence equal to it: the reference lowering
 * admits only layers whose accumulator cannot leave int32. No chunk, no bound on the weights
 * beyond that: any depth (accum_depth is a uint16_t).
 *
 * scratch: the arena's (the generator's Kernel.scratch_bytes), 4 * padded depth bytes,
 * word-aligned: the input of one batch widened to int32 (zeros past accum_depth). The params are
 * the pairs layout's (output stage, saturation bounds, step table). */
#define QE_FC_BYTES_ROWS 4u
#define QE_FC_BYTES_DEPTH_STEP 8u    /* the ARMv6-M walk takes eight inputs a pass */

void qe_fully_connected_s8_bytes(const qe_fc_s8_pairs_params_t *p, const int8_t *input,
                                 const QE_FLASH uint32_t *words, const QE_FLASH int32_t *bias,
                                 int8_t *output, int32_t *scratch);

#endif
