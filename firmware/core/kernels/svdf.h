/* SVDF (a rank-decomposed memory layer: keyword-spotting models), int8 with an int16 or an int8
 * activation state, bit-exact with TF Lite Micro's reference integer SVDF
 * (EvalIntegerSvdfReference<int16_t / int8_t>):
 *
 * 1. the state [batch][filter][memory] moves one place towards the front (as one flat array,
 *    like TFLM's; each filter's newest slot is overwritten next);
 * 2. feature matmul: for each filter, sum w_feature * (x - input_zero_point), rescaled by
 *    (multiplier_1, shift_1), clamped to the state type, plus the state's zero point, into the
 *    filter's newest slot;
 * 3. time: for each filter, sum w_time * (state - state_zero_point) in int32 (scratch);
 * 4. per unit: bias + the sum of its `rank` filters, rescaled by (multiplier_2, shift_2), plus the
 *    output zero point, clamped to int8 (TFLM's integer SVDF applies no fused activation).
 *
 * Sums wrap in 32 bits as TFLM's int32 arithmetic does on its targets. */
#ifndef QE_SVDF_H
#define QE_SVDF_H

#include <stdint.h>

#include "../qe_flash.h"

typedef struct {
    const QE_FLASH int8_t *weights_feature;   /* [filters][input] */
    const QE_FLASH void *weights_time;        /* [filters][memory]: int16 or int8, as the state */
    const QE_FLASH int32_t *bias;             /* [units] or QE_FLASH_NULL */
    uint16_t batches;
    uint16_t input_size;
    uint16_t filters;                         /* units * rank */
    uint16_t rank;
    uint16_t memory;
    int32_t input_zero_point;
    int32_t state_zero_point;
    int32_t output_zero_point;
    int32_t multiplier_1;                     /* input x feature -> state */
    int32_t shift_1;
    int32_t multiplier_2;                     /* state x time -> output */
    int32_t shift_2;
} qe_svdf_params_t;

/* scratch: (batches * filters + batches * units) int32 */
void qe_svdf_s8_s16(const qe_svdf_params_t *p, const int8_t *input, int16_t *state,
                    int8_t *output, int32_t *scratch);
void qe_svdf_s8_s8(const qe_svdf_params_t *p, const int8_t *input, int8_t *state,
                   int8_t *output, int32_t *scratch);

#endif
