/* FULLY_CONNECTED reference kernels, bit-exact with TF Lite Micro's
 * reference_integer_ops::FullyConnected (int8, per-tensor) and reference_ops::FullyConnected
 * (float32). Weights are [output_depth][accum_depth], inputs/outputs [batches][depth].
 * Parameters are precomputed by the generator (converters/cgen.py, converters/qmath.py). */
#include <stddef.h>
#include <stdint.h>

#include "fully_connected.h"
#include "../requant.h"

void qe_fully_connected_s8(const qe_fc_s8_params_t *p, const int8_t *input,
                           const QE_FLASH int8_t *weights, const QE_FLASH int32_t *bias,
                           int8_t *output)
{
    const uint32_t batches = p->batches;
    const uint32_t accum_depth = p->accum_depth;
    const uint32_t output_depth = p->output_depth;
    /* read once: the output stores may alias *p, so the compiler would reload them per value */
    const int32_t output_offset = p->output_offset;
    const int32_t activation_min = p->activation_min;
    const int32_t activation_max = p->activation_max;
    uint32_t b, o, d;

    for (b = 0; b < batches; ++b) {
        const int8_t *in = input + b * accum_depth;
        for (o = 0; o < output_depth; ++o) {
            const QE_FLASH int8_t *w = weights + o * accum_depth;
            int32_t acc = 0;
            for (d = 0; d < accum_depth; ++d) {
                acc += ((int32_t)w[d] + p->filter_offset) * ((int32_t)in[d] + p->input_offset);
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

void qe_fully_connected_f32(const qe_fc_f32_params_t *p, const float *input,
                            const QE_FLASH float *weights, const QE_FLASH float *bias,
                            float *output)
{
    const uint32_t batches = p->batches;
    const uint32_t accum_depth = p->accum_depth;
    const uint32_t output_depth = p->output_depth;
    uint32_t b, o, d;

    for (b = 0; b < batches; ++b) {
        const float *in = input + b * accum_depth;
        for (o = 0; o < output_depth; ++o) {
            const QE_FLASH float *w = weights + o * accum_depth;
            float total = 0.0f;
            float value;
            /* Same order as TFLM: one running float sum from d = 0 up, then + bias (+ 0.0f when
             * there is none, which turns -0.0 into +0.0 exactly as TFLM does). Build with
             * -ffp-contract=off so no multiply-add gets fused. */
            for (d = 0; d < accum_depth; ++d) {
                total += in[d] * w[d];
            }
            value = total + ((bias != QE_FLASH_NULL) ? bias[o] : 0.0f);
            /* std::min(std::max(x, lo), hi): NaN passes through, +inf clamps to hi. */
            if (value < p->activation_min) {
                value = p->activation_min;
            }
            if (p->activation_max < value) {
                value = p->activation_max;
            }
            output[b * output_depth + o] = value;
        }
    }
}

void qe_fully_connected_s8_pc(const qe_fc_pc_params_t *p, const int8_t *input,
                              const QE_FLASH int8_t *weights, const QE_FLASH int32_t *bias,
                              int8_t *output)
{
    /* read once: the output stores may alias *p, so the compiler would reload them per value */
    const int32_t output_offset = p->output_offset;
    const int32_t activation_min = p->activation_min;
    const int32_t activation_max = p->activation_max;
    uint32_t b, o, d;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * p->accum_depth;
        for (o = 0; o < p->output_depth; ++o) {
            const QE_FLASH int8_t *w = weights + o * p->accum_depth;
            const uint32_t c = o * p->channel_stride;
            int32_t acc = 0;
            for (d = 0; d < p->accum_depth; ++d) {
                acc += (int32_t)w[d] * ((int32_t)in[d] + p->input_offset);
            }
            if (bias != QE_FLASH_NULL) {
                acc += bias[o];
            }
            output[b * p->output_depth + o] = (int8_t)qe_requantize_output(
                acc, p->multipliers[c], p->shifts[c], output_offset, activation_min,
                activation_max);
        }
    }
}

void qe_fully_connected_s16(const qe_fc_pc_params_t *p, const int16_t *input,
                            const QE_FLASH int8_t *weights, const QE_FLASH int64_t *bias,
                            int16_t *output)
{
    /* read once: the output stores may alias *p, so the compiler would reload them per value */
    const int32_t output_offset = p->output_offset;
    const int32_t activation_min = p->activation_min;
    const int32_t activation_max = p->activation_max;
    uint32_t b, o, d;

    for (b = 0; b < p->batches; ++b) {
        const int16_t *in = input + b * p->accum_depth;
        for (o = 0; o < p->output_depth; ++o) {
            const QE_FLASH int8_t *w = weights + o * p->accum_depth;
            const uint32_t c = o * p->channel_stride;
            int64_t acc = 0;
            for (d = 0; d < p->accum_depth; ++d) {
                acc += (int32_t)w[d] * ((int32_t)in[d] + p->input_offset);
            }
            if (bias != QE_FLASH_NULL) {
                acc += bias[o];
            }
            output[b * p->output_depth + o] = (int16_t)qe_offset_clamp(
                qe_multiply_by_quantized_multiplier_64(acc, p->multipliers[c], p->shifts[c]),
                output_offset, activation_min, activation_max);
        }
    }
}

void qe_fully_connected_s8_acc_f32(const qe_fc_s8_acc_params_t *p, const int8_t *input,
                                   const QE_FLASH int8_t *weights, const QE_FLASH int32_t *bias,
                                   float *output)
{
    uint32_t b, o, d;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * p->accum_depth;
        for (o = 0; o < p->output_depth; ++o) {
            const QE_FLASH int8_t *w = weights + o * p->accum_depth;
            int32_t acc = 0;
            for (d = 0; d < p->accum_depth; ++d) {
                acc += (int32_t)w[d] * ((int32_t)in[d] + p->input_offset);
            }
            if (bias != QE_FLASH_NULL) {
                acc += bias[o];
            }
            output[b * p->output_depth + o] = (float)acc * p->scales[o * p->channel_stride];
        }
    }
}

/* The generator's packed layout (fully_connected.h, qe_fc_s8_packed_params_t), read one weight at
 * a time: the definition the optimized variants' versions are compared with. */
static int32_t packed_weight(const QE_FLASH int32_t *group, uint32_t row, uint32_t d)
{
    const uint32_t q = d >> 2, h = d & 1u, j = (d >> 1) & 1u;
    const int32_t word = group[(q * 2u + h) * QE_FC_PACKED_ROWS + row];
    /* word = hi * 65536 + (lo mod 65536), lo and hi int16: both halves sign-extended, exactly */
    const int32_t low_bits = (int32_t)((uint32_t)word & 0xFFFFu);
    return j ? (word - low_bits) / 65536 : (low_bits >= 0x8000 ? low_bits - 0x10000 : low_bits);
}

void qe_fully_connected_s8_packed(const qe_fc_s8_packed_params_t *p, const int8_t *input,
                                  const QE_FLASH int32_t *weights, const QE_FLASH int32_t *bias,
                                  int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const uint32_t group_words = (uint32_t)p->padded_depth * QE_FC_PACKED_ROWS / 2u;
    const int32_t output_offset = p->output_offset;
    const int32_t activation_min = p->activation_min;
    const int32_t activation_max = p->activation_max;
    uint32_t b, o, d;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        for (o = 0; o < rows; ++o) {
            const QE_FLASH int32_t *group = weights + (o / QE_FC_PACKED_ROWS) * group_words;
            int32_t acc = bias[o];
            for (d = 0; d < n; ++d) {
                acc += packed_weight(group, o % QE_FC_PACKED_ROWS, d) * (int32_t)in[d];
            }
            output[b * rows + o] = (int8_t)qe_requantize_output(
                acc, p->output_multiplier, p->output_shift, output_offset, activation_min,
                activation_max);
        }
    }
}

/* The mm stream (fully_connected.h, qe_fc_s8_mm_params_t), read one weight at a time: each
 * group's bias'' words, then its words in the packed layout; the doubled sum halved exactly. */
void qe_fully_connected_s8_mm(const qe_fc_s8_mm_params_t *p, const int8_t *input,
                              const QE_FLASH int32_t *stream, int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const uint32_t group_words = QE_FC_PACKED_ROWS + n * QE_FC_PACKED_ROWS / 2u;
    uint32_t o, d;

    for (o = 0; o < rows; ++o) {
        const QE_FLASH int32_t *group = stream + (o / QE_FC_PACKED_ROWS) * group_words;
        int32_t acc = group[o % QE_FC_PACKED_ROWS];
        for (d = 0; d < n; ++d) {
            acc += packed_weight(group + QE_FC_PACKED_ROWS, o % QE_FC_PACKED_ROWS, d)
                   * (int32_t)input[d];
        }
        output[o] = (int8_t)qe_requantize_output(acc / 2, p->multiplier, -(int32_t)p->shift,
                                                 p->output_offset, -128, 127);
    }
}

/* The avr variant's stream layout (fully_connected.h, qe_fc_s8_avr_params_t), read in the
 * plainest way (int32 sums): the definition the avr variant's version is compared with. */
void qe_fully_connected_s8_avr(const qe_fc_s8_avr_params_t *p, const int8_t *input,
                               const QE_FLASH int8_t *stream, const QE_FLASH int32_t *bias,
                               int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    uint32_t b, o, r;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        const QE_FLASH int8_t *s = stream;
        for (o = 0; o < rows; o += QE_FC_AVR_ROWS) {
            int32_t acc[QE_FC_AVR_ROWS];
            uint32_t d = 0, len;
            for (r = 0; r < QE_FC_AVR_ROWS; ++r) {
                acc[r] = bias[o + r];
            }
            while ((len = (uint8_t)*s++) != 0u) {
                for (; len > 0u; --len, ++d) {
                    for (r = 0; r < QE_FC_AVR_ROWS; ++r) {
                        acc[r] += (int32_t)*s++ * (int32_t)in[d];
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

/* The cortex-m0 variant's chunked row-pair layout (fully_connected.h, qe_fc_s8_pairs_params_t),
 * each weight decoded from its word (int32 sums): the definition that variant is compared with. */
void qe_fully_connected_s8_pairs(const qe_fc_s8_pairs_params_t *p, const int8_t *input,
                                 const QE_FLASH int32_t *stream, const QE_FLASH int32_t *bias,
                                 int8_t *output)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    uint32_t b, o, r;

    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        const QE_FLASH int32_t *s = stream;
        for (o = 0; o < rows; o += QE_FC_PAIRS_ROWS) {
            int32_t acc[QE_FC_PAIRS_ROWS];
            uint32_t d = 0;
            int32_t len;
            for (r = 0; r < QE_FC_PAIRS_ROWS; ++r) {
                acc[r] = bias[o + r];
            }
            while ((len = *s++ / 4) != 0) {       /* the chunk's word is 4 L */
                for (; len > 0; --len, ++d, s += 2) {
                    for (r = 0; r < QE_FC_PAIRS_ROWS; ++r) {
                        /* value 65536 * hi + lo, |lo| <= 255: lo is the low half, sign-extended */
                        const int32_t v = s[r >> 1];
                        const int32_t lo = (int32_t)((uint32_t)v & 0xFFFFu)
                                           - (int32_t)(((uint32_t)v & 0x8000u) << 1);
                        const int32_t w = (r & 1u) ? (v - lo) / 65536 : lo;
                        acc[r] += w * (int32_t)in[d];
                    }
                }
            }
            for (r = 0; r < QE_FC_PAIRS_ROWS && o + r < rows; ++r) {
                output[b * rows + o + r] = (int8_t)qe_requantize_output(
                    acc[r], p->output_multiplier, p->output_shift, p->output_offset,
                    p->activation_min, p->activation_max);
            }
        }
    }
}

/* The byte-lane layout (fully_connected.h, qe_fully_connected_s8_bytes), each weight decoded from
 * its byte (int32 sums): the definition the cortex-m0 and rv32 variants are compared with. It
 * needs no scratch. */
void qe_fully_connected_s8_bytes(const qe_fc_s8_pairs_params_t *p, const int8_t *input,
                                 const QE_FLASH uint32_t *words, const QE_FLASH int32_t *bias,
                                 int8_t *output, int32_t *scratch)
{
    const uint32_t n = p->accum_depth, rows = p->output_depth;
    const uint32_t padded = (n + QE_FC_BYTES_DEPTH_STEP - 1u) / QE_FC_BYTES_DEPTH_STEP
                            * QE_FC_BYTES_DEPTH_STEP;
    uint32_t b, o, r, d;

    (void)scratch;
    for (b = 0; b < p->batches; ++b) {
        const int8_t *in = input + b * n;
        for (o = 0; o < rows; o += QE_FC_BYTES_ROWS) {
            const QE_FLASH uint32_t *g = words + (o / QE_FC_BYTES_ROWS) * padded;
            for (r = 0; r < QE_FC_BYTES_ROWS && o + r < rows; ++r) {
                int32_t acc = bias[o + r];
                for (d = 0; d < n; ++d) {
                    const int32_t w = (int32_t)((g[d] >> (8u * r)) & 0xFFu) - 128;
                    acc += w * (int32_t)in[d];
                }
                output[b * rows + o + r] = (int8_t)qe_requantize_output(
                    acc, p->output_multiplier, p->output_shift, p->output_offset,
                    p->activation_min, p->activation_max);
            }
        }
    }
}
