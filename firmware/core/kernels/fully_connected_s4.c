/* FULLY_CONNECTED with packed int4 weights: see fully_connected_s4.h. The accumulator is the
 * one of qe_fully_connected_s8 on the unpacked weights (the generator bounds it in int32, so
 * the order of the additions does not matter), then the same output stage. */
#include <stddef.h>
#include <stdint.h>

#include "fully_connected_s4.h"
#include "../requant.h"

/* a nibble (0..15) as the two's-complement int4 it holds, without a signed shift */
#define QE_S4_LOW(byte) ((int32_t)(((uint32_t)(byte) & 15u) ^ 8u) - 8)
#define QE_S4_HIGH(byte) ((int32_t)((((uint32_t)(byte) >> 4) & 15u) ^ 8u) - 8)

void qe_fully_connected_s4(const qe_fc_s8_params_t *p, const int8_t *input,
                           const QE_FLASH uint8_t *weights, const QE_FLASH int32_t *bias,
                           int8_t *output)
{
    const uint32_t batches = p->batches;
    const uint32_t accum_depth = p->accum_depth;
    const uint32_t output_depth = p->output_depth;
    /* read once: the output stores may alias *p, so the compiler would reload them per value */
    const int32_t input_offset = p->input_offset;
    const int32_t filter_offset = p->filter_offset;
    const int32_t output_offset = p->output_offset;
    const int32_t activation_min = p->activation_min;
    const int32_t activation_max = p->activation_max;
    uint32_t b, o, d;

    for (b = 0; b < batches; ++b) {
        const int8_t *in = input + b * accum_depth;
        for (o = 0; o < output_depth; ++o) {
            const uint32_t first = o * accum_depth;        /* the row's first element */
            const QE_FLASH uint8_t *w = weights + (first >> 1);
            int32_t acc = 0;
            d = 0;
            if ((first & 1u) != 0u && accum_depth > 0u) {  /* the row starts on a high nibble */
                acc += (QE_S4_HIGH(*w) + filter_offset) * ((int32_t)in[0] + input_offset);
                ++w;
                d = 1;
            }
            for (; d + 1u < accum_depth; d += 2u) {        /* two weights per byte */
                const uint8_t byte = *w++;
                acc += (QE_S4_LOW(byte) + filter_offset) * ((int32_t)in[d] + input_offset);
                acc += (QE_S4_HIGH(byte) + filter_offset) * ((int32_t)in[d + 1u] + input_offset);
            }
            if (d < accum_depth) {                          /* the last weight, a low nibble */
                acc += (QE_S4_LOW(*w) + filter_offset) * ((int32_t)in[d] + input_offset);
            }
            if (bias != QE_FLASH_NULL) {
                acc += bias[o];
            }
            output[b * output_depth + o] = (int8_t)qe_requantize_output(
                acc, p->output_multiplier, p->output_shift, output_offset, activation_min,
                activation_max);
        }
    }
}

/* w'[4g+r][d] of the generator's int4 layout (fully_connected_s4.h) in the group's words */
static int32_t s4_packed_weight(const QE_FLASH uint32_t *group, uint32_t r, uint32_t d)
{
    const uint32_t word = group[2u * (d / 4u) + (d & 1u)];
    const uint32_t lane = (word >> (16u * ((d >> 1) & 1u))) & 0xFFFFu;
    const uint32_t nibble = (lane >> (12u - 4u * r)) & 15u;
    return (r == 0u) ? (int32_t)(nibble ^ 8u) - 8 : (int32_t)nibble - 8;
}

/* The generator's int4 layout read in the plainest way: the definition the variants' versions
 * are compared with. */
void qe_fully_connected_s4_packed(const qe_fc_s8_packed_params_t *p, const int8_t *input,
                                  const QE_FLASH uint32_t *stream, int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const uint32_t weight_words = (uint32_t)p->padded_depth / 2u;
    const uint32_t group_words = weight_words + QE_FC_PACKED_ROWS;
    const int32_t output_offset = p->output_offset;
    const int32_t activation_min = p->activation_min;
    const int32_t activation_max = p->activation_max;
    uint32_t b, o, d;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        for (o = 0; o < rows; ++o) {
            const QE_FLASH uint32_t *group = stream + (o / QE_FC_PACKED_ROWS) * group_words;
            int32_t acc = (int32_t)group[weight_words + o % QE_FC_PACKED_ROWS];
            for (d = 0; d < n; ++d) {
                acc += s4_packed_weight(group, o % QE_FC_PACKED_ROWS, d) * (int32_t)in[d];
            }
            output[b * rows + o] = (int8_t)qe_requantize_output(
                acc, p->output_multiplier, p->output_shift, output_offset, activation_min,
                activation_max);
        }
    }
}

/* The deep layout is the int4 layout (fully_connected_s4.h): the same plain reading. */
void qe_fully_connected_s4_deep(const qe_fc_s8_packed_params_t *p, const int8_t *input,
                                const QE_FLASH uint32_t *stream, int8_t *output)
{
    qe_fully_connected_s4_packed(p, input, stream, output);
}

/* The s4 mm stream (fully_connected_s4.h, qe_fc_s4_mm_params_t): each group's head decoded into
 * its four bias' (exact: the generator's multiples), then the int4 layout's weights. */
void qe_fully_connected_s4_mm(const qe_fc_s4_mm_params_t *p, const int8_t *input,
                              const QE_FLASH uint32_t *stream, int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const uint32_t group_words = QE_FC_PACKED_ROWS + n / 2u;
    uint32_t o, d;

    for (o = 0; o < rows; ++o) {
        const QE_FLASH uint32_t *group = stream + (o / QE_FC_PACKED_ROWS) * group_words;
        const uint32_t r = o % QE_FC_PACKED_ROWS;
        const uint32_t h0 = group[0], h1 = group[1], h2 = group[2], h3 = group[3];
        int32_t acc;
        /* running sums: 4096 b0, + 256 b1, + 16 b2, + b3 (mod 2^32; each difference exact) */
        if (r == 0u) {
            acc = (int32_t)h0 / 4096;
        } else if (r == 1u) {
            acc = (int32_t)(h1 - h0) / 256;
        } else if (r == 2u) {
            acc = (int32_t)(h2 - h1) / 16;
        } else {
            acc = (int32_t)(h3 - h2);
        }
        for (d = 0; d < n; ++d) {
            acc += s4_packed_weight(group + QE_FC_PACKED_ROWS, r, d) * (int32_t)input[d];
        }
        output[o] = (int8_t)qe_requantize_output(acc, p->multiplier, p->output_shift,
                                                 p->output_offset, -128, 127);
    }
}

/* The cortex-m0 / rv32 row-pair layout (fully_connected_s4.h), read in the plainest way: the
 * definition the variants' versions are compared with. */
void qe_fully_connected_s4_pairs(const qe_fc_s8_params_t *p, const int8_t *input,
                                 const QE_FLASH uint32_t *stream, int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const uint32_t group_words = (2u * n + 3u) / 4u + 4u;
    uint32_t b, o, d;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        for (o = 0; o < rows; ++o) {
            const QE_FLASH uint32_t *group = stream + (o / 4u) * group_words;
            const uint32_t r = o % 4u;
            int32_t acc = (int32_t)group[group_words - 4u + r];
            for (d = 0; d < n; ++d) {
                const uint32_t byte_index = 2u * d + r / 2u;
                const uint32_t byte = (group[byte_index / 4u] >> (8u * (byte_index % 4u))) & 0xFFu;
                acc += ((r % 2u) ? QE_S4_HIGH(byte) : QE_S4_LOW(byte)) * (int32_t)in[d];
            }
            output[b * rows + o] = (int8_t)qe_requantize_output(
                acc, p->output_multiplier, p->output_shift, p->output_offset, p->activation_min,
                p->activation_max);
        }
    }
}

/* The avr variant's stream (fully_connected_s4.h), read in the plainest way: the definition the
 * variant's version is compared with. */
void qe_fully_connected_s4_avr(const qe_fc_s8_avr_params_t *p, const int8_t *input,
                               const QE_FLASH uint8_t *stream, const QE_FLASH int32_t *bias,
                               int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    uint32_t b, o, r, d, len;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        const QE_FLASH uint8_t *s = stream;
        for (o = 0; o < rows; o += QE_FC_AVR_ROWS) {
            int32_t acc[QE_FC_AVR_ROWS];
            for (r = 0; r < QE_FC_AVR_ROWS; ++r) {
                acc[r] = bias[o + r];
            }
            d = 0;
            while ((len = *s++) != 0u) {
                for (; len > 0u; --len, ++d, s += 2) {
                    for (r = 0; r < QE_FC_AVR_ROWS; ++r) {
                        const uint32_t byte = s[r / 2u];
                        const int32_t u = (int32_t)((r % 2u) ? byte >> 4 : byte & 15u);
                        acc[r] += (u - 8) * (int32_t)in[d];
                    }
                }
            }
            for (r = 0; r < QE_FC_AVR_ROWS && o + r < rows; ++r) {
                output[b * rows + o + r] = (int8_t)qe_requantize_output(
                    acc[r], p->output_multiplier, p->output_shift, p->output_offset,
                    p->activation_min, p->activation_max);
            }
        }
    }
}
