/* FULLY_CONNECTED, optimized variant "cortex-m-dsp" (see ../README.md): the int8 kernels
 * qe_fully_connected_s8 (per tensor), qe_fully_connected_s8_pc (per channel) and
 * qe_fully_connected_s8_acc_f32 (int8-acc's accumulator head), with exactly the reference's
 * results (../../fully_connected.c), computed with fewer instructions:
 *
 *  - Two output rows per pass over the input: each input value is loaded, sign-extended and
 *    offset once for both rows.
 *  - The weights' zero point leaves the inner loop: sum_d (w + fo)(x + io) is
 *    sum_d w (x + io) + fo * sum_d (x + io), and the second sum is one number per batch.
 *  - With the DSP extension (__ARM_FEATURE_DSP: Cortex-M4, M7, M33, M55, ...) four int8 at a
 *    time: one 32-bit load (any alignment: LDR allows it on these cores), SXTAB16 sign-extends
 *    bytes 0 and 2 (or, rotated, 1 and 3) into two 16-bit lanes and adds the input offset in the
 *    same instruction, SXTB16 does the weights, SMLAD multiplies both lane pairs and adds them to
 *    the accumulator: 15 instructions per 8 multiply-accumulates instead of ~7 per one. Without
 *    it (the host, Cortex-M0/M3) the same loop structure one value at a time in portable C.
 *
 * Why the integers are the reference's, bit for bit: for int8 zero points, x + io and the
 * weights fit a 16-bit lane; SMLAD's products are exact and it adds in 32 bits, wrapping like
 * the reference's int32 sum would; and the generator admits only shapes whose worst-case sum of
 * |terms| fits int32, so no partial sum overflows in any order: regrouping the additions (the
 * lanes, fo * sum(x + io)) cannot change the total. The requantization is requant.c's
 * arithmetic inlined, its constants computed once per tensor (or channel) instead of per value
 * (see requant_scale below). tests/test_kernels_optimized.py checks all this on the host and
 * under QEMU (Cortex-M4, the DSP path) against the reference compiled into the same binary.
 *
 * The other functions of fully_connected.h (float32, int16x8) are the reference's, compiled in
 * here from its source; its three int8 functions come along renamed to *_reference (linked, so
 * the tests can compare both in one binary; --gc-sections drops them from firmware). */
#include <stddef.h>
#include <stdint.h>

#include "../../fully_connected.h"   /* the real prototypes, checked against the definitions below */
#include "dsp.h"                     /* dot_2rows, dot_1row, sum_inputs, requant_t, requant_s8 */

#define qe_fully_connected_s8 qe_fully_connected_s8_reference
#define qe_fully_connected_s8_pc qe_fully_connected_s8_pc_reference
#define qe_fully_connected_s8_acc_f32 qe_fully_connected_s8_acc_f32_reference
#include "../../fully_connected.c"
#undef qe_fully_connected_s8
#undef qe_fully_connected_s8_pc
#undef qe_fully_connected_s8_acc_f32

void qe_fully_connected_s8(const qe_fc_s8_params_t *p, const int8_t *input,
                           const QE_FLASH int8_t *weights, const QE_FLASH int32_t *bias,
                           int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const int32_t io = p->input_offset;
    requant_t rq;
    uint32_t b, o;

    requant_init(&rq, p->output_multiplier, p->output_shift, p->output_offset,
                 p->activation_min, p->activation_max);
    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        int8_t *out = output + b * rows;
        /* the weights' offset times the sum of the offset inputs: the same for every row */
        const int32_t base = (p->filter_offset != 0) ? p->filter_offset * sum_inputs(in, n, io) : 0;
        for (o = 0; o + 1 < rows; o += 2) {
            int32_t acc[2] = {base, base};
            dot_2rows(in, weights + o * n, weights + (o + 1) * n, n, io, acc);
            if (bias != QE_FLASH_NULL) {
                acc[0] += bias[o];
                acc[1] += bias[o + 1];
            }
            out[o] = requant_s8(&rq, acc[0]);
            out[o + 1] = requant_s8(&rq, acc[1]);
        }
        if (o < rows) {
            int32_t acc = base + dot_1row(in, weights + o * n, n, io);
            if (bias != QE_FLASH_NULL) {
                acc += bias[o];
            }
            out[o] = requant_s8(&rq, acc);
        }
    }
}

void qe_fully_connected_s8_pc(const qe_fc_pc_params_t *p, const int8_t *input,
                              const QE_FLASH int8_t *weights, const QE_FLASH int32_t *bias,
                              int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth, cs = p->channel_stride;
    const int32_t io = p->input_offset;
    requant_t rq;
    uint32_t b, o;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        int8_t *out = output + b * rows;
        for (o = 0; o + 1 < rows; o += 2) {
            int32_t acc[2] = {0, 0};
            dot_2rows(in, weights + o * n, weights + (o + 1) * n, n, io, acc);
            if (bias != QE_FLASH_NULL) {
                acc[0] += bias[o];
                acc[1] += bias[o + 1];
            }
            requant_init(&rq, p->multipliers[o * cs], p->shifts[o * cs], p->output_offset,
                         p->activation_min, p->activation_max);
            out[o] = requant_s8(&rq, acc[0]);
            requant_init(&rq, p->multipliers[(o + 1) * cs], p->shifts[(o + 1) * cs],
                         p->output_offset, p->activation_min, p->activation_max);
            out[o + 1] = requant_s8(&rq, acc[1]);
        }
        if (o < rows) {
            int32_t acc = dot_1row(in, weights + o * n, n, io);
            if (bias != QE_FLASH_NULL) {
                acc += bias[o];
            }
            requant_init(&rq, p->multipliers[o * cs], p->shifts[o * cs], p->output_offset,
                         p->activation_min, p->activation_max);
            out[o] = requant_s8(&rq, acc);
        }
    }
}

void qe_fully_connected_s8_acc_f32(const qe_fc_s8_acc_params_t *p, const int8_t *input,
                                   const QE_FLASH int8_t *weights, const QE_FLASH int32_t *bias,
                                   float *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth, cs = p->channel_stride;
    const int32_t io = p->input_offset;
    uint32_t b, o;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        float *out = output + b * rows;
        for (o = 0; o + 1 < rows; o += 2) {
            int32_t acc[2] = {0, 0};
            dot_2rows(in, weights + o * n, weights + (o + 1) * n, n, io, acc);
            if (bias != QE_FLASH_NULL) {
                acc[0] += bias[o];
                acc[1] += bias[o + 1];
            }
            out[o] = (float)acc[0] * p->scales[o * cs];
            out[o + 1] = (float)acc[1] * p->scales[(o + 1) * cs];
        }
        if (o < rows) {
            int32_t acc = dot_1row(in, weights + o * n, n, io);
            if (bias != QE_FLASH_NULL) {
                acc += bias[o];
            }
            out[o] = (float)acc * p->scales[o * cs];
        }
    }
}
