/* SOFTMAX over the last axis, bit-exact with TF Lite Micro's reference kernels.
 *
 * int8 -> int8 (output scale 1/256, zero point -128): TFLM's gemmlowp fixed-point softmax.
 * The generator precomputes exp(beta * input_scale * d) in Q0.31 for every possible
 * difference d = x - row_max in [-255, 0] with TFLM's own fixed-point arithmetic (a 256-entry
 * int32 table; entries below TFLM's diff_min are 0, which this kernel treats exactly as TFLM
 * treats a skipped element). Here: the Q12 sum of the row, its reciprocal by gemmlowp's
 * one_over_one_plus_x Newton-Raphson, and the final rounding shift. depth <= 511.
 *
 * int8 -> int16 (output scale 1/65536, zero point -32768): the same arithmetic with the same
 * table; only TFLM's final shift (num_bits_over_unit + 31 - 16), the offset (-32768) and the
 * clamp (int16) differ, as in TFLM's reference Softmax<int8_t, int16_t>.
 *
 * float32: exp((x - max) * beta) with the libm expf passed in, a running float sum, a division. */
#ifndef QE_SOFTMAX_H
#define QE_SOFTMAX_H

#include <stdint.h>

#include "../qe_flash.h"

typedef struct {
    const QE_FLASH int32_t *exp_table;   /* [256]: exp_table[-d] for d = x - row_max */
    uint32_t outer;             /* number of rows */
    uint16_t depth;             /* row length (the last axis), 1..511 */
} qe_softmax_s8_params_t;

void qe_softmax_s8(const qe_softmax_s8_params_t *p, const int8_t *input, int8_t *output);
void qe_softmax_s8_s16(const qe_softmax_s8_params_t *p, const int8_t *input, int16_t *output);

typedef struct {
    float beta;
    uint32_t outer;
    uint32_t depth;
} qe_softmax_f32_params_t;

void qe_softmax_f32(const qe_softmax_f32_params_t *p, float (*exp_fn)(float),
                    const float *input, float *output);

#endif
