/* The int4 FULLY_CONNECTED kernels of an optimized variant against the reference, bit for bit
 * (tests/test_kernels_int4.py): a variant's file (it #includes the reference, whose functions it
 * overrides are then *_reference: -DQE_S4_DSP for cortex-m-dsp's, -DQE_S4_PAIRS for cortex-m0's
 * and rv32's, -DQE_S4_AVR for avr's) or the reference file alone, and per case every layout of the same weights:
 * TFLite's packing (qe_fully_connected_s4) and, where the generator gives them, the cortex-m-dsp
 * layout (qe_fully_connected_s4_packed; deeper than 128 qe_fully_connected_s4_deep), the row-pair layout (qe_fully_connected_s4_pairs) and
 * the avr int4 stream (qe_fully_connected_s4_avr) and the s4 mm stream (qe_fully_connected_s4_mm,
 * the input copied word-aligned), their streams from quarl_edge/converters/ops/optimized/.
 * Outputs, per case, ten blocks: the reference and the variant on TFLite's packing, on the dsp
 * layout, on the row pairs, on the avr stream, on the s4 mm stream (an absent layout's
 * blocks are the first block again); the test compares them all (and the board's with the
 * host's). A function the variant does not override is the reference's, under both names.
 *
 * A case: int32 header[18] = {has dsp stream, batches, depth, rows, input_offset,
 * filter_offset, output_offset, multiplier, shift, act_min, act_max, has_bias, dsp stream
 * words, padded_depth, input misalignment (0..3), pairs stream words (0: none), avr stream bytes (0: none), s4 mm stream words (0: none)}, then
 * the int8 input (batches * depth), the packed weights ((rows * depth + 1) / 2 bytes), the bias
 * (rows int32, if any), the dsp stream, the pairs stream (uint32 each), and with an avr stream
 * int32 avr[19] = {sat_low, sat_high, fast, byte_moves, m_prime[5], round[0][5], round[1][5]},
 * its bias' (one int32 per row padded to 4) and its bytes, and with an s4 mm stream int32 mm[11]
 * (qe_fc_s4_mm_params_t's fields in order) and its words. */
#include <stdint.h>
#include <string.h>

#define IN_FILE "s4_cases.bin"
#define OUT_FILE "s4_out.bin"
#include "checker_io.h"
#include "kernels/fully_connected_s4.h"

#ifdef QE_S4_DSP
void qe_fully_connected_s4_reference(const qe_fc_s8_params_t *p, const int8_t *input,
                                     const QE_FLASH uint8_t *weights,
                                     const QE_FLASH int32_t *bias, int8_t *output);
void qe_fully_connected_s4_packed_reference(const qe_fc_s8_packed_params_t *p,
                                            const int8_t *input, const QE_FLASH uint32_t *stream,
                                            int8_t *output);
void qe_fully_connected_s4_deep_reference(const qe_fc_s8_packed_params_t *p,
                                          const int8_t *input, const QE_FLASH uint32_t *stream,
                                          int8_t *output);
#else
#define qe_fully_connected_s4_reference qe_fully_connected_s4
#define qe_fully_connected_s4_packed_reference qe_fully_connected_s4_packed
#define qe_fully_connected_s4_deep_reference qe_fully_connected_s4_deep
#endif
#ifdef QE_S4_DSP
void qe_fully_connected_s4_mm_reference(const qe_fc_s4_mm_params_t *p, const int8_t *input,
                                        const QE_FLASH uint32_t *stream, int8_t *output);
#else
#define qe_fully_connected_s4_mm_reference qe_fully_connected_s4_mm
#endif
#ifdef QE_S4_PAIRS
void qe_fully_connected_s4_pairs_reference(const qe_fc_s8_params_t *p, const int8_t *input,
                                           const QE_FLASH uint32_t *stream, int8_t *output);
#else
#define qe_fully_connected_s4_pairs_reference qe_fully_connected_s4_pairs
#endif
#ifdef QE_S4_AVR
void qe_fully_connected_s4_avr_reference(const qe_fc_s8_avr_params_t *p, const int8_t *input,
                                         const QE_FLASH uint8_t *stream,
                                         const QE_FLASH int32_t *bias, int8_t *output);
#else
#define qe_fully_connected_s4_avr_reference qe_fully_connected_s4_avr
#endif

#ifdef QE_CHECK_SMALL_RAM          /* the micro:bit's 16 KiB (small_case() in the test) */
#define MAX_IN 512u
#define MAX_OUT 128u
#define MAX_WB 1536u
#define MAX_STREAM 1024u
#define MAX_AVR 2048u
#define MAX_MM 256u
#else
#define MAX_IN 2048u                /* deep_cases: 2 batches of 1,002 */
#define MAX_OUT 256u
#define MAX_WB 10752u
#define MAX_STREAM 3072u
#define MAX_DSP 4096u               /* deep_cases: 136 x 130 rows, 2,376 words */
#define MAX_AVR 12288u
#define MAX_MM (MAX_STREAM / 2u)
#endif
#ifndef MAX_DSP
#define MAX_DSP (MAX_STREAM / 2u)   /* the dsp layout's words */
#endif

static int8_t input_buf[MAX_IN + 4];
static uint8_t weights[MAX_WB];
static int32_t bias[MAX_OUT];
static uint32_t stream[MAX_DSP], pairs[MAX_STREAM];
static uint8_t avr_stream[MAX_AVR];
static int32_t avr_bias[MAX_OUT + 4u];
static uint32_t mm_stream[MAX_MM];
static uint32_t mm_in[QE_FC_PACKED_MAX_DEPTH / 4u];     /* one batch, word-aligned */
static int8_t out[10][MAX_OUT];

int main(void)
{
    int32_t h[18];
    int status = 0;

    if (!io_open()) {
        return io_exit(2);
    }
    while (io_read(h, sizeof h)) {
        const uint32_t layout = (uint32_t)h[0], batches = (uint32_t)h[1], depth = (uint32_t)h[2],
                       rows = (uint32_t)h[3], words = (uint32_t)h[12],
                       pwords = (uint32_t)h[15], abytes = (uint32_t)h[16],
                       mwords = (uint32_t)h[17];
        int32_t avr[19], mm[11];
        const uint32_t wbytes = (rows * depth + 1u) / 2u, outs = batches * rows;
        int8_t *const in = input_buf + (h[14] & 3);
        const int has_bias = h[11] != 0;
        uint32_t k;
        if (batches * depth > MAX_IN || wbytes > MAX_WB || outs > MAX_OUT || words > MAX_DSP
            || pwords > MAX_STREAM || rows > MAX_OUT || batches == 0u || depth == 0u
            || rows == 0u || !io_read(in, batches * depth) || !io_read(weights, wbytes)
            || (has_bias && !io_read(bias, 4u * rows)) || !io_read(stream, 4u * words)
            || !io_read(pairs, 4u * pwords) || abytes > MAX_AVR
            || (abytes && (!io_read(avr, sizeof avr) || !io_read(avr_bias, 4u * ((rows + 3u) & ~3u))
                           || !io_read(avr_stream, abytes)))
            || mwords > MAX_MM || (mwords && (batches != 1u || depth > QE_FC_PACKED_MAX_DEPTH))
            || (mwords && (!io_read(mm, sizeof mm) || !io_read(mm_stream, 4u * mwords)))) {
            return io_exit(2);
        }
        memset(out, 0x5A, sizeof out);
        {
            const qe_fc_s8_params_t p = {h[4], h[5], h[6], h[7], h[8], h[9], h[10],
                                         (uint16_t)batches, (uint16_t)depth, (uint16_t)rows};
            const qe_fc_s8_packed_params_t pp = {h[6], h[7], h[8], h[9], h[10],
                                                 (uint16_t)batches, (uint16_t)depth,
                                                 (uint16_t)h[13], (uint16_t)rows};
            const int32_t *b = has_bias ? bias : QE_FLASH_NULL;
            qe_fully_connected_s4_reference(&p, in, weights, b, out[0]);
            qe_fully_connected_s4(&p, in, weights, b, out[1]);
            const qe_fc_s8_params_t p0 = {0, 0, h[6], h[7], h[8], h[9], h[10],
                                          (uint16_t)batches, (uint16_t)depth, (uint16_t)rows};
            if (layout && depth > QE_FC_PACKED_MAX_DEPTH) {   /* the generator's deep entry */
                qe_fully_connected_s4_deep_reference(&pp, in, stream, out[2]);
                qe_fully_connected_s4_deep(&pp, in, stream, out[3]);
            } else if (layout) {
                qe_fully_connected_s4_packed_reference(&pp, in, stream, out[2]);
                qe_fully_connected_s4_packed(&pp, in, stream, out[3]);
            } else {
                memcpy(out[2], out[0], outs);
                memcpy(out[3], out[0], outs);
            }
            if (pwords) {
                qe_fully_connected_s4_pairs_reference(&p0, in, pairs, out[4]);
                qe_fully_connected_s4_pairs(&p0, in, pairs, out[5]);
            } else {
                memcpy(out[4], out[0], outs);
                memcpy(out[5], out[0], outs);
            }
            if (abytes) {
                qe_fc_s8_avr_params_t pa;
                memset(&pa, 0, sizeof pa);
                pa.output_offset = h[6];
                pa.output_multiplier = h[7];
                pa.output_shift = h[8];
                pa.activation_min = h[9];
                pa.activation_max = h[10];
                pa.sat_low = avr[0];
                pa.sat_high = avr[1];
                pa.fast = (uint8_t)avr[2];
                pa.byte_moves = (uint8_t)avr[3];
                for (k = 0; k < 5u; ++k) {
                    pa.m_prime[k] = (uint8_t)avr[4 + k];
                    pa.round[0][k] = (uint8_t)avr[9 + k];
                    pa.round[1][k] = (uint8_t)avr[14 + k];
                }
                pa.batches = (uint16_t)batches;
                pa.accum_depth = (uint16_t)depth;
                pa.output_depth = (uint16_t)rows;
                qe_fully_connected_s4_avr_reference(&pa, in, avr_stream, avr_bias, out[6]);
                qe_fully_connected_s4_avr(&pa, in, avr_stream, avr_bias, out[7]);
            } else {
                memcpy(out[6], out[0], outs);
                memcpy(out[7], out[0], outs);
            }
            if (mwords) {
                const qe_fc_s4_mm_params_t pm = {mm[0], mm[1], (uint32_t)mm[2], (uint32_t)mm[3],
                                                 (uint32_t)mm[4], (uint32_t)mm[5],
                                                 (uint32_t)mm[6], mm[7], mm[8],
                                                 (uint32_t)mm[9], (uint32_t)mm[10]};
                memcpy(mm_in, in, depth);
                qe_fully_connected_s4_mm_reference(&pm, (const int8_t *)mm_in, mm_stream, out[8]);
                qe_fully_connected_s4_mm(&pm, (const int8_t *)mm_in, mm_stream, out[9]);
            } else {
                memcpy(out[8], out[0], outs);
                memcpy(out[9], out[0], outs);
            }
        }
        for (k = 0; k < 10u; ++k) {
            io_write(out[k], outs);
            if (memcmp(out[k], out[0], outs) != 0) {
                status = 1;
            }
        }
    }
    return io_exit(status);
}
