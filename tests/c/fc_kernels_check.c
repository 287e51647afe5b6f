/* Compares an optimized FULLY_CONNECTED variant (firmware/core/kernels/optimized/<v>/
 * fully_connected.c) with the reference, both in this one binary: the variant's file defines the
 * fast qe_fully_connected_s8, _s8_pc and _s8_acc_f32 and carries the reference ones renamed
 * *_reference. Used by tests/test_kernels_optimized.py on the host (portable C path) and on an
 * emulated Cortex-M (the DSP path: linked with the board's start-up code, files through ARM
 * semihosting, `bkpt 0xAB`).
 *
 * Input (host: stdin; board: the file fc_cases.bin in QEMU's working directory), repeated cases:
 *   int32 header[16] = kind (0: s8 per tensor, 1: s8 per channel, 2: s8 -> f32 accumulator head,
 *       3: s8 per tensor, the variant's qe_fully_connected_s8_packed on the generator's layout
 *       against the reference's qe_fully_connected_s8 on the original weights),
 *       batches, accum_depth, output_depth, input_offset, filter_offset, output_offset,
 *       output_multiplier, output_shift, activation_min, activation_max, has_bias,
 *       channel_stride, input misalignment (0..3), weights misalignment (0..3),
 *       kind 3: the padded depth (else 0)
 *   int8 input[batches * accum_depth], int8 weights[output_depth * accum_depth],
 *   int32 bias[output_depth] if has_bias,
 *   kind 1: int32 multipliers[output_depth], int8 shifts[output_depth];
 *   kind 2: float scales[output_depth];
 *   kind 3: int32 packed weights[padded rows * padded depth / 2], int32 bias'[padded rows]
 *   kind 4 (built with -DQE_CHECK_AVR_LAYOUT, the avr variant): s8 per tensor, the variant's
 *       qe_fully_connected_s8_avr on the generator's stream (header[15]: its length in bytes)
 *       against the reference's qe_fully_connected_s8: int8 stream[header[15]],
 *       int32 bias'[padded rows], the output stage's int32 sat_low, sat_high, then 20 bytes:
 *       fast, m_prime[5], round[2][5], byte_moves, 3 zeros (fully_connected.h)
 *   kind 5 (built with -DQE_CHECK_PAIRS_LAYOUT, the cortex-m0 variant): s8 per tensor, the
 *       variant's qe_fully_connected_s8_pairs on the generator's chunked row pairs (header[15]:
 *       the stream's length in words) against the reference's qe_fully_connected_s8:
 *       int32 stream[header[15]], int32 bias'[padded rows], int32 sat_low, sat_above, then the
 *       step table: uint32 present (0 or 1), lo, mul, add, and when present uint32 steps[256];
 *       the reference file's portable qe_fully_connected_s8_pairs (*_reference) must agree too
 *   kind 7 (built with -DQE_CHECK_PAIRS_LAYOUT): s8 per tensor, any depth, the variant's
 *       qe_fully_connected_s8_bytes on the generator's byte lanes (header[15]: the words' count)
 *       against the reference's qe_fully_connected_s8, and the reference file's portable
 *       qe_fully_connected_s8_bytes (*_reference) too: uint32 words[header[15]], then as kind 5
 *       (bias', sat_low, sat_above, the step table); the widened input in pairs_stream
 *   kind 6: s8 per tensor, one batch, the variant's qe_fully_connected_s8_mm on the generator's
 *       mm stream (header[15]: its length in words) against the reference's
 *       qe_fully_connected_s8: int32 params[8] (qe_fc_s8_mm_params_t, the generator's),
 *       int32 stream[header[15]]
 * Output (host: stdout; board: fc_out.bin): per case the reference's output bytes, then the
 * variant's. Exit status 0 when every case matched, 1 when one did not, 2 on bad input.
 *
 * A variant that overrides only some functions (cortex-m0: the packed kernel) carries no
 * *_reference copies of the others: build with -DQE_CHECK_UNRENAMED_REFERENCE, and its own
 * (reference) qe_fully_connected_s8 & co. are the reference. -DQE_CHECK_SMALL_RAM shrinks the
 * buffers for boards with 16 KiB of RAM. */
#include <stdint.h>
#include <string.h>

#include "kernels/fully_connected.h"

#ifdef QE_CHECK_UNRENAMED_REFERENCE
#define qe_fully_connected_s8_reference qe_fully_connected_s8
#define qe_fully_connected_s8_pc_reference qe_fully_connected_s8_pc
#define qe_fully_connected_s8_acc_f32_reference qe_fully_connected_s8_acc_f32
#endif

void qe_fully_connected_s8_reference(const qe_fc_s8_params_t *p, const int8_t *input,
                                     const int8_t *weights, const int32_t *bias, int8_t *output);
void qe_fully_connected_s8_pc_reference(const qe_fc_pc_params_t *p, const int8_t *input,
                                        const int8_t *weights, const int32_t *bias,
                                        int8_t *output);
#ifdef QE_CHECK_PAIRS_LAYOUT
void qe_fully_connected_s8_pairs_reference(const qe_fc_s8_pairs_params_t *p, const int8_t *input,
                                           const int32_t *stream, const int32_t *bias,
                                           int8_t *output);
void qe_fully_connected_s8_bytes_reference(const qe_fc_s8_pairs_params_t *p, const int8_t *input,
                                           const uint32_t *words, const int32_t *bias,
                                           int8_t *output, int32_t *scratch);
#endif
void qe_fully_connected_s8_acc_f32_reference(const qe_fc_s8_acc_params_t *p, const int8_t *input,
                                             const int8_t *weights, const int32_t *bias,
                                             float *output);

#ifdef QE_CHECK_SMALL_RAM
#define MAX_IN 1024
#define MAX_W 2048
#define MAX_OUT 64
#define MAX_PACKED 1024
#elif defined(QE_CHECK_PAIRS_LAYOUT)  /* the host's cortex-m0 build: a 1,024 x 128 layer (kind 7) */
#define MAX_IN 4096
#define MAX_W 131072
#define MAX_OUT 256
#define MAX_PACKED 32768
#else
#define MAX_IN 4096
#define MAX_W 32768
#define MAX_OUT 256
#define MAX_PACKED 16384
#endif

#define IN_FILE "fc_cases.bin"
#define OUT_FILE "fc_out.bin"
#include "checker_io.h"

/* ------------------------------------------------------------------------------ cases */
/* aligned: kind 6's kernel needs a word-aligned input (misalignment 0 there) */
static int8_t input_buf[MAX_IN + 4] __attribute__((aligned(16))), weights_buf[MAX_W + 4];
static int32_t bias[MAX_OUT], multipliers[MAX_OUT];
static int8_t shifts[MAX_OUT];
static float scales[MAX_OUT];
static int32_t packed[MAX_PACKED], packed_bias[MAX_OUT + 4];
#ifdef QE_CHECK_AVR_LAYOUT
#define MAX_STREAM 65536
static int8_t avr_stream[MAX_STREAM];
static int32_t avr_sat[2];
static uint8_t avr_stage[20];
#endif
#ifdef QE_CHECK_PAIRS_LAYOUT
#ifdef QE_CHECK_SMALL_RAM
#define MAX_PAIRS 704   /* and the step table beside it */
#else
#define MAX_PAIRS 65536
#endif
static int32_t pairs_stream[MAX_PAIRS];   /* kind 7: the widened input (scratch) */
static int32_t pairs_sat[2];
static uint32_t pairs_steps_h[4];     /* 1, lo, mul, add of the step table (0: none) */
static uint32_t pairs_steps[256];
#endif
static float out_ref[MAX_OUT * 4 + 1], out_opt[MAX_OUT * 4 + 1];   /* int8 outputs too, as bytes */

int main(void)
{
    int32_t h[16];
    int status = 0;

    if (!io_open()) {
        return io_exit(2);
    }
    while (io_read(h, sizeof h)) {
        const uint32_t kind = (uint32_t)h[0], batches = (uint32_t)h[1], depth = (uint32_t)h[2],
                       rows = (uint32_t)h[3];
        const int has_bias = h[11] != 0;
        int8_t *const in = input_buf + (h[13] & 3);
        int8_t *const w = weights_buf + (h[14] & 3);
        const int32_t *const b = has_bias ? bias : QE_FLASH_NULL;
        const uint32_t out_bytes = batches * rows * (kind == 2u ? 4u : 1u);
        const uint32_t padded = (uint32_t)h[15], prows = (rows + 3u) & ~3u;

#ifdef QE_CHECK_PAIRS_LAYOUT
        if (kind == 5u) {
            if ((uint32_t)h[15] > MAX_PAIRS || batches * depth > MAX_IN || rows * depth > MAX_W
                || rows > MAX_OUT || depth > QE_FC_PACKED_MAX_DEPTH || batches == 0u
                || depth == 0u || rows == 0u
                || !io_read(in, batches * depth) || !io_read(w, rows * depth)
                || (has_bias && !io_read(bias, 4u * rows))
                || !io_read(pairs_stream, 4u * (uint32_t)h[15])
                || !io_read(packed_bias, 4u * prows) || !io_read(pairs_sat, sizeof pairs_sat)
                || !io_read(pairs_steps_h, sizeof pairs_steps_h) || pairs_steps_h[0] > 1u
                || (pairs_steps_h[0] && !io_read(pairs_steps, sizeof pairs_steps))) {
                return io_exit(2);
            }
            memset(out_ref, 0x5A, sizeof out_ref);
            memset(out_opt, 0xA5, sizeof out_opt);
            {
                const qe_fc_s8_params_t p = {h[4], h[5], h[6], h[7], h[8], h[9], h[10],
                                             (uint16_t)batches, (uint16_t)depth, (uint16_t)rows};
                const qe_fc_s8_pairs_params_t pp = {h[6], h[7], h[8], h[9], h[10],
                                                    pairs_sat[0], pairs_sat[1],
                                                    (uint16_t)batches, (uint16_t)depth,
                                                    (uint16_t)rows,
                                                    pairs_steps_h[0] ? pairs_steps : NULL,
                                                    (int32_t)pairs_steps_h[1], pairs_steps_h[2],
                                                    pairs_steps_h[3]};
                qe_fully_connected_s8_reference(&p, in, w, b, (int8_t *)out_ref);
                qe_fully_connected_s8_pairs(&pp, in, pairs_stream, packed_bias, (int8_t *)out_opt);
                io_write(out_ref, out_bytes);
                io_write(out_opt, out_bytes);
                if (memcmp(out_ref, out_opt, out_bytes) != 0
                    || ((uint8_t *)out_opt)[out_bytes] != 0xA5u) {
                    status = 1;
                }
                /* the reference file's portable definition, on the same stream */
                memset(out_opt, 0xA5, sizeof out_opt);
                qe_fully_connected_s8_pairs_reference(&pp, in, pairs_stream, packed_bias,
                                                      (int8_t *)out_opt);
                if (memcmp(out_ref, out_opt, out_bytes) != 0) {
                    status = 1;
                }
            }
            continue;
        }
        if (kind == 7u) {
            const uint32_t dpad = (depth + QE_FC_BYTES_DEPTH_STEP - 1u) / QE_FC_BYTES_DEPTH_STEP
                                  * QE_FC_BYTES_DEPTH_STEP;
            if (batches * depth > MAX_IN || rows * depth > MAX_W || rows > MAX_OUT
                || batches == 0u || depth == 0u || rows == 0u || dpad > MAX_PAIRS
                || (uint32_t)h[15] != prows / 4u * dpad || (uint32_t)h[15] > MAX_PACKED
                || !io_read(in, batches * depth) || !io_read(w, rows * depth)
                || (has_bias && !io_read(bias, 4u * rows))
                || !io_read(packed, 4u * (uint32_t)h[15])
                || !io_read(packed_bias, 4u * prows) || !io_read(pairs_sat, sizeof pairs_sat)
                || !io_read(pairs_steps_h, sizeof pairs_steps_h) || pairs_steps_h[0] > 1u
                || (pairs_steps_h[0] && !io_read(pairs_steps, sizeof pairs_steps))) {
                return io_exit(2);
            }
            memset(out_ref, 0x5A, sizeof out_ref);
            memset(out_opt, 0xA5, sizeof out_opt);
            {
                const qe_fc_s8_params_t p = {h[4], h[5], h[6], h[7], h[8], h[9], h[10],
                                             (uint16_t)batches, (uint16_t)depth, (uint16_t)rows};
                const qe_fc_s8_pairs_params_t pp = {h[6], h[7], h[8], h[9], h[10],
                                                    pairs_sat[0], pairs_sat[1],
                                                    (uint16_t)batches, (uint16_t)depth,
                                                    (uint16_t)rows,
                                                    pairs_steps_h[0] ? pairs_steps : NULL,
                                                    (int32_t)pairs_steps_h[1], pairs_steps_h[2],
                                                    pairs_steps_h[3]};
                qe_fully_connected_s8_reference(&p, in, w, b, (int8_t *)out_ref);
                qe_fully_connected_s8_bytes(&pp, in, (const uint32_t *)packed, packed_bias,
                                            (int8_t *)out_opt, pairs_stream);
                io_write(out_ref, out_bytes);
                io_write(out_opt, out_bytes);
                if (memcmp(out_ref, out_opt, out_bytes) != 0
                    || ((uint8_t *)out_opt)[out_bytes] != 0xA5u) {
                    status = 1;
                }
                /* the reference file's portable definition, on the same layout */
                memset(out_opt, 0xA5, sizeof out_opt);
                qe_fully_connected_s8_bytes_reference(&pp, in, (const uint32_t *)packed,
                                                      packed_bias, (int8_t *)out_opt, NULL);
                if (memcmp(out_ref, out_opt, out_bytes) != 0) {
                    status = 1;
                }
            }
            continue;
        }
#endif
        if (kind == 6u) {
            qe_fc_s8_mm_params_t pm;
            int32_t pw[8];
            if ((uint32_t)h[15] > MAX_PACKED || batches != 1u || depth > MAX_IN
                || rows * depth > MAX_W || rows > MAX_OUT || depth > QE_FC_PACKED_MAX_DEPTH
                || depth == 0u || depth % 4u != 0u || rows == 0u
                || !io_read(in, depth) || !io_read(w, rows * depth)
                || (has_bias && !io_read(bias, 4u * rows))
                || !io_read(pw, sizeof pw) || !io_read(packed, 4u * (uint32_t)h[15])) {
                return io_exit(2);
            }
            memcpy(&pm, pw, sizeof pm);
            memset(out_ref, 0x5A, sizeof out_ref);
            memset(out_opt, 0xA5, sizeof out_opt);
            {
                const qe_fc_s8_params_t p = {h[4], h[5], h[6], h[7], h[8], h[9], h[10],
                                             1u, (uint16_t)depth, (uint16_t)rows};
                qe_fully_connected_s8_reference(&p, in, w, b, (int8_t *)out_ref);
                qe_fully_connected_s8_mm(&pm, in, packed, (int8_t *)out_opt);
            }
            io_write(out_ref, out_bytes);
            io_write(out_opt, out_bytes);
            if (memcmp(out_ref, out_opt, out_bytes) != 0 || ((uint8_t *)out_opt)[out_bytes] != 0xA5u) {
                status = 1;
            }
            continue;
        }
#ifdef QE_CHECK_AVR_LAYOUT
        if (kind == 4u) {
            if ((uint32_t)h[15] > MAX_STREAM || batches * depth > MAX_IN || rows * depth > MAX_W
                || rows > MAX_OUT || batches == 0u || depth == 0u || rows == 0u
                || !io_read(in, batches * depth) || !io_read(w, rows * depth)
                || (has_bias && !io_read(bias, 4u * rows))
                || !io_read(avr_stream, (uint32_t)h[15]) || !io_read(packed_bias, 4u * prows)
                || !io_read(avr_sat, sizeof avr_sat) || !io_read(avr_stage, sizeof avr_stage)) {
                return io_exit(2);
            }
            memset(out_ref, 0x5A, sizeof out_ref);
            memset(out_opt, 0xA5, sizeof out_opt);
            {
                const qe_fc_s8_params_t p = {h[4], h[5], h[6], h[7], h[8], h[9], h[10],
                                             (uint16_t)batches, (uint16_t)depth, (uint16_t)rows};
                qe_fc_s8_avr_params_t pa;
                memset(&pa, 0, sizeof pa);
                pa.output_offset = h[6];
                pa.output_multiplier = h[7];
                pa.output_shift = h[8];
                pa.activation_min = h[9];
                pa.activation_max = h[10];
                pa.sat_low = avr_sat[0];
                pa.sat_high = avr_sat[1];
                pa.fast = avr_stage[0];
                memcpy(pa.m_prime, avr_stage + 1, 5);
                memcpy(pa.round, avr_stage + 6, 10);
                pa.byte_moves = avr_stage[16];
                pa.batches = (uint16_t)batches;
                pa.accum_depth = (uint16_t)depth;
                pa.output_depth = (uint16_t)rows;
                qe_fully_connected_s8_reference(&p, in, w, b, (int8_t *)out_ref);
                qe_fully_connected_s8_avr(&pa, in, avr_stream, packed_bias, (int8_t *)out_opt);
            }
            io_write(out_ref, out_bytes);
            io_write(out_opt, out_bytes);
            if (memcmp(out_ref, out_opt, out_bytes) != 0 || ((uint8_t *)out_opt)[out_bytes] != 0xA5u) {
                status = 1;
            }
            continue;
        }
#endif
        if (kind > 3u || (kind == 3u && (padded < depth || padded % 4u != 0u
                                         || padded > QE_FC_PACKED_MAX_DEPTH
                                         || prows * padded / 2u > MAX_PACKED)) || batches * depth > MAX_IN || rows * depth > MAX_W || rows > MAX_OUT
            || out_bytes + 1u > sizeof out_ref || batches == 0u || depth == 0u || rows == 0u
            || !io_read(in, batches * depth) || !io_read(w, rows * depth)
            || (has_bias && !io_read(bias, 4u * rows))
            || (kind == 1u && (!io_read(multipliers, 4u * rows) || !io_read(shifts, rows)))
            || (kind == 2u && !io_read(scales, 4u * rows))
            || (kind == 3u && (!io_read(packed, 4u * (prows * padded / 2u))
                               || !io_read(packed_bias, 4u * prows)))) {
            return io_exit(2);
        }
        memset(out_ref, 0x5A, sizeof out_ref);
        memset(out_opt, 0xA5, sizeof out_opt);
        if (kind == 0u) {
            const qe_fc_s8_params_t p = {h[4], h[5], h[6], h[7], h[8], h[9], h[10],
                                         (uint16_t)batches, (uint16_t)depth, (uint16_t)rows};
            qe_fully_connected_s8_reference(&p, in, w, b, (int8_t *)out_ref);
            qe_fully_connected_s8(&p, in, w, b, (int8_t *)out_opt);
        } else if (kind == 1u) {
            const qe_fc_pc_params_t p = {h[4], h[6], h[9], h[10], multipliers, shifts,
                                         (uint8_t)h[12], (uint16_t)batches, (uint16_t)depth,
                                         (uint16_t)rows};
            qe_fully_connected_s8_pc_reference(&p, in, w, b, (int8_t *)out_ref);
            qe_fully_connected_s8_pc(&p, in, w, b, (int8_t *)out_opt);
        } else if (kind == 3u) {
            const qe_fc_s8_params_t p = {h[4], h[5], h[6], h[7], h[8], h[9], h[10],
                                         (uint16_t)batches, (uint16_t)depth, (uint16_t)rows};
            const qe_fc_s8_packed_params_t pp = {h[6], h[7], h[8], h[9], h[10],
                                                 (uint16_t)batches, (uint16_t)depth,
                                                 (uint16_t)padded, (uint16_t)rows};
            qe_fully_connected_s8_reference(&p, in, w, b, (int8_t *)out_ref);
            qe_fully_connected_s8_packed(&pp, in, packed, packed_bias, (int8_t *)out_opt);
        } else {
            const qe_fc_s8_acc_params_t p = {h[4], scales, (uint8_t)h[12], (uint16_t)batches,
                                             (uint16_t)depth, (uint16_t)rows};
            qe_fully_connected_s8_acc_f32_reference(&p, in, w, b, out_ref);
            qe_fully_connected_s8_acc_f32(&p, in, w, b, out_opt);
        }
        io_write(out_ref, out_bytes);
        io_write(out_opt, out_bytes);
        /* the variant must write exactly its outputs: the byte after them keeps its fill */
        if (memcmp(out_ref, out_opt, out_bytes) != 0 || ((uint8_t *)out_opt)[out_bytes] != 0xA5u) {
            status = 1;
        }
    }
    return io_exit(status);
}
