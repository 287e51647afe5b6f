/* See conv.h. Loop order and accumulation order as TFLM's reference kernels: for each output
 * pixel and channel, filter rows, filter columns, input channels; points outside the image
 * (padding) are skipped. Parameters are precomputed by converters/cgen.py. */
#include <stddef.h>
#include <stdint.h>

#include "conv.h"
#include "../requant.h"

void qe_conv_s8(const qe_conv_s8_params_t *p, const int8_t *input, const QE_FLASH int8_t *filter,
                const QE_FLASH int32_t *bias, int8_t *output)
{
    const qe_window_t *g = &p->g;
    /* read once: the output stores may alias *p, so the compiler would reload them per value */
    const int32_t output_offset = p->output_offset;
    const int32_t activation_min = p->activation_min;
    const int32_t activation_max = p->activation_max;
    int32_t b, oy, ox, oc, ky, kx, c;

    for (b = 0; b < g->batches; ++b) {
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t iy0 = oy * (int32_t)g->stride_h - (int32_t)g->pad_top;
            for (ox = 0; ox < g->out_w; ++ox) {
                const int32_t ix0 = ox * (int32_t)g->stride_w - (int32_t)g->pad_left;
                int8_t *out = output + (((uint32_t)b * g->out_h + (uint32_t)oy) * g->out_w
                                        + (uint32_t)ox) * g->out_c;
                for (oc = 0; oc < g->out_c; ++oc) {
                    int32_t acc = 0;
                    for (ky = 0; ky < g->k_h; ++ky) {
                        const int32_t iy = iy0 + (int32_t)g->dil_h * ky;
                        if (iy < 0 || iy >= (int32_t)g->in_h) {
                            continue;
                        }
                        for (kx = 0; kx < g->k_w; ++kx) {
                            const int32_t ix = ix0 + (int32_t)g->dil_w * kx;
                            const int8_t *in;
                            const QE_FLASH int8_t *f;
                            if (ix < 0 || ix >= (int32_t)g->in_w) {
                                continue;
                            }
                            in = input + (((uint32_t)b * g->in_h + (uint32_t)iy) * g->in_w
                                          + (uint32_t)ix) * g->in_c;
                            f = filter + (((uint32_t)oc * g->k_h + (uint32_t)ky) * g->k_w
                                          + (uint32_t)kx) * g->in_c;
                            for (c = 0; c < g->in_c; ++c) {
                                acc += (int32_t)f[c] * ((int32_t)in[c] + p->input_offset);
                            }
                        }
                    }
                    if (bias != QE_FLASH_NULL) {
                        acc += bias[oc];
                    }
                    out[oc] = (int8_t)qe_requantize_output(acc, p->multipliers[oc], p->shifts[oc],
                                                           output_offset, activation_min,
                                                           activation_max);
                }
            }
        }
    }
}

/* The generator's packed filter (conv.h, qe_conv_s8_packed_params_t), read one weight at a
 * time: the definition the cortex-m-dsp variant's version is compared with. */
static int32_t conv_packed_weight(const QE_FLASH int32_t *filter, uint32_t padded_depth,
                                  uint32_t oc, uint32_t d)
{
    const uint32_t q = d >> 2, h = d & 1u, j = (d >> 1) & 1u;
    const QE_FLASH int32_t *group = filter + (oc / QE_CONV_PACKED_ROWS) * (padded_depth * 2u);
    const int32_t word = group[(q * 2u + h) * QE_CONV_PACKED_ROWS + oc % QE_CONV_PACKED_ROWS];
    /* word = hi * 65536 + (lo mod 65536), lo and hi int16: both halves sign-extended, exactly */
    const int32_t low_bits = (int32_t)((uint32_t)word & 0xFFFFu);
    return j ? (word - low_bits) / 65536 : (low_bits >= 0x8000 ? low_bits - 0x10000 : low_bits);
}

void qe_conv_s8_packed(const qe_conv_s8_packed_params_t *p, const int8_t *input,
                       const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias,
                       int8_t *output)
{
    const qe_window_t *g = &p->c.g;
    const uint32_t pd = p->padded_depth;
    const int32_t zero_point = -p->c.input_offset;
    int32_t b, oy, ox, oc, ky, kx, c;

    for (b = 0; b < g->batches; ++b) {
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t iy0 = oy * (int32_t)g->stride_h - (int32_t)g->pad_top;
            for (ox = 0; ox < g->out_w; ++ox) {
                const int32_t ix0 = ox * (int32_t)g->stride_w - (int32_t)g->pad_left;
                int8_t *out = output + (((uint32_t)b * g->out_h + (uint32_t)oy) * g->out_w
                                        + (uint32_t)ox) * g->out_c;
                for (oc = 0; oc < g->out_c; ++oc) {
                    int32_t acc = bias[oc];
                    uint32_t d = 0;
                    for (ky = 0; ky < g->k_h; ++ky) {
                        const int32_t iy = iy0 + (int32_t)g->dil_h * ky;
                        for (kx = 0; kx < g->k_w; ++kx) {
                            const int32_t ix = ix0 + (int32_t)g->dil_w * kx;
                            const int inside = iy >= 0 && iy < (int32_t)g->in_h && ix >= 0
                                               && ix < (int32_t)g->in_w;
                            const int8_t *in = inside ? input + (((uint32_t)b * g->in_h
                                                                  + (uint32_t)iy) * g->in_w
                                                                 + (uint32_t)ix) * g->in_c
                                                      : input;
                            for (c = 0; c < g->in_c; ++c, ++d) {
                                const int32_t v = inside ? (int32_t)in[c] : zero_point;
                                acc += conv_packed_weight(filter, pd, (uint32_t)oc, d) * v;
                            }
                        }
                    }
                    out[oc] = (int8_t)qe_requantize_output(acc, p->c.multipliers[oc],
                                                           p->c.shifts[oc], p->c.output_offset,
                                                           p->c.activation_min,
                                                           p->c.activation_max);
                }
            }
        }
    }
}

/* The generator's rows filter (conv.h, qe_conv_s8_rows_params_t), read one weight at a time:
 * the definition the cortex-m0 and rv32 variants' versions are compared with. */
void qe_conv_s8_rows(const qe_conv_s8_rows_params_t *p, const int8_t *input,
                     const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias, int8_t *output,
                     int32_t *scratch)
{
    const qe_window_t *g = &p->c.g;
    const uint32_t pd = p->padded_depth;
    const int32_t zero_point = -p->c.input_offset;
    int32_t b, oy, ox, oc, ky, kx, c;

    (void)scratch;
    for (b = 0; b < g->batches; ++b) {
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t iy0 = oy * (int32_t)g->stride_h - (int32_t)g->pad_top;
            for (ox = 0; ox < g->out_w; ++ox) {
                const int32_t ix0 = ox * (int32_t)g->stride_w - (int32_t)g->pad_left;
                int8_t *out = output + (((uint32_t)b * g->out_h + (uint32_t)oy) * g->out_w
                                        + (uint32_t)ox) * g->out_c;
                for (oc = 0; oc < g->out_c; ++oc) {
                    const QE_FLASH int32_t *wg = filter + ((uint32_t)oc / QE_CONV_ROWS) * pd
                                                 * QE_CONV_ROWS + (uint32_t)oc % QE_CONV_ROWS;
                    int32_t acc = bias[oc];
                    uint32_t d = 0;
                    for (ky = 0; ky < g->k_h; ++ky) {
                        const int32_t iy = iy0 + (int32_t)g->dil_h * ky;
                        for (kx = 0; kx < g->k_w; ++kx) {
                            const int32_t ix = ix0 + (int32_t)g->dil_w * kx;
                            const int inside = iy >= 0 && iy < (int32_t)g->in_h && ix >= 0
                                               && ix < (int32_t)g->in_w;
                            const int8_t *in = inside ? input + (((uint32_t)b * g->in_h
                                                                  + (uint32_t)iy) * g->in_w
                                                                 + (uint32_t)ix) * g->in_c
                                                      : input;
                            for (c = 0; c < g->in_c; ++c, ++d) {
                                const int32_t v = inside ? (int32_t)in[c] : zero_point;
                                acc += wg[d * QE_CONV_ROWS] * v;
                            }
                        }
                    }
                    out[oc] = (int8_t)qe_requantize_output(acc, p->c.multipliers[oc],
                                                           p->c.shifts[oc], p->c.output_offset,
                                                           p->c.activation_min,
                                                           p->c.activation_max);
                }
            }
        }
    }
}

/* The generator's filter for qe_conv_s8_wide (conv.h), read one weight at a time: tap = ky * k_w
 * + kx, pairs = in_cp / 2. */
static int32_t conv_wide_weight(const QE_FLASH int32_t *filter, uint32_t taps, uint32_t pairs,
                                uint32_t oc, uint32_t tap, uint32_t c)
{
    const uint32_t word = (uint32_t)filter[(((oc / QE_CONV_WIDE_ROWS) * taps + tap) * pairs
                                            + c / 2u) * QE_CONV_WIDE_ROWS
                                           + oc % QE_CONV_WIDE_ROWS];
    const uint32_t half = (c & 1u) ? word >> 16 : word & 0xFFFFu;
    return (half >= 0x8000u) ? (int32_t)half - 0x10000 : (int32_t)half;
}

void qe_conv_s8_wide(const qe_conv_s8_wide_params_t *p, const int8_t *input,
                     const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias,
                     int8_t *output, int16_t *scratch)
{
    const qe_window_t *g = &p->c.g;
    const uint32_t taps = (uint32_t)g->k_h * g->k_w, pairs = p->in_cp / 2u;
    int32_t b, oy, ox, oc, ky, kx, c;

    (void)scratch;
    for (b = 0; b < g->batches; ++b) {
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t iy0 = oy * (int32_t)g->stride_h - (int32_t)g->pad_top;
            for (ox = 0; ox < g->out_w; ++ox) {
                const int32_t ix0 = ox * (int32_t)g->stride_w - (int32_t)g->pad_left;
                int8_t *out = output + (((uint32_t)b * g->out_h + (uint32_t)oy) * g->out_w
                                        + (uint32_t)ox) * g->out_c;
                for (oc = 0; oc < g->out_c; ++oc) {
                    int32_t acc = bias[oc];
                    for (ky = 0; ky < g->k_h; ++ky) {
                        const int32_t iy = iy0 + (int32_t)g->dil_h * ky;
                        if (iy < 0 || iy >= (int32_t)g->in_h) {
                            continue;
                        }
                        for (kx = 0; kx < g->k_w; ++kx) {
                            const int32_t ix = ix0 + (int32_t)g->dil_w * kx;
                            const int8_t *in;
                            if (ix < 0 || ix >= (int32_t)g->in_w) {
                                continue;
                            }
                            in = input + (((uint32_t)b * g->in_h + (uint32_t)iy) * g->in_w
                                          + (uint32_t)ix) * g->in_c;
                            for (c = 0; c < g->in_c; ++c) {
                                acc += conv_wide_weight(filter, taps, pairs, (uint32_t)oc,
                                                        (uint32_t)(ky * g->k_w + kx), (uint32_t)c)
                                       * ((int32_t)in[c] + p->c.input_offset);
                            }
                        }
                    }
                    out[oc] = (int8_t)qe_requantize_output(acc, p->c.multipliers[oc],
                                                           p->c.shifts[oc], p->c.output_offset,
                                                           p->c.activation_min,
                                                           p->c.activation_max);
                }
            }
        }
    }
}

/* int16x8: as qe_conv_s8 with int16 activations (zero point 0: no offsets), an int64 accumulator
 * and bias, and the 64-bit MultiplyByQuantizedMultiplier: TFLM's ConvPerChannel<int64_t> for
 * int16 input (reference_integer_ops/conv.h). */
void qe_conv_s16(const qe_conv_s8_params_t *p, const int16_t *input,
                 const QE_FLASH int8_t *filter, const QE_FLASH int64_t *bias, int16_t *output)
{
    const qe_window_t *g = &p->g;
    const int32_t activation_min = p->activation_min;
    const int32_t activation_max = p->activation_max;
    int32_t b, oy, ox, oc, ky, kx, c;

    for (b = 0; b < g->batches; ++b) {
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t iy0 = oy * (int32_t)g->stride_h - (int32_t)g->pad_top;
            for (ox = 0; ox < g->out_w; ++ox) {
                const int32_t ix0 = ox * (int32_t)g->stride_w - (int32_t)g->pad_left;
                int16_t *out = output + (((uint32_t)b * g->out_h + (uint32_t)oy) * g->out_w
                                         + (uint32_t)ox) * g->out_c;
                for (oc = 0; oc < g->out_c; ++oc) {
                    int64_t acc = 0;
                    for (ky = 0; ky < g->k_h; ++ky) {
                        const int32_t iy = iy0 + (int32_t)g->dil_h * ky;
                        if (iy < 0 || iy >= (int32_t)g->in_h) {
                            continue;
                        }
                        for (kx = 0; kx < g->k_w; ++kx) {
                            const int32_t ix = ix0 + (int32_t)g->dil_w * kx;
                            const int16_t *in;
                            const QE_FLASH int8_t *f;
                            if (ix < 0 || ix >= (int32_t)g->in_w) {
                                continue;
                            }
                            in = input + (((uint32_t)b * g->in_h + (uint32_t)iy) * g->in_w
                                          + (uint32_t)ix) * g->in_c;
                            f = filter + (((uint32_t)oc * g->k_h + (uint32_t)ky) * g->k_w
                                          + (uint32_t)kx) * g->in_c;
                            for (c = 0; c < g->in_c; ++c) {
                                acc += (int32_t)f[c] * (int32_t)in[c];
                            }
                        }
                    }
                    if (bias != QE_FLASH_NULL) {
                        acc += bias[oc];
                    }
                    out[oc] = (int16_t)qe_offset_clamp(
                        qe_multiply_by_quantized_multiplier_64(acc, p->multipliers[oc],
                                                               p->shifts[oc]),
                        0, activation_min, activation_max);
                }
            }
        }
    }
}

void qe_conv_f32(const qe_conv_f32_params_t *p, const float *input, const QE_FLASH float *filter,
                 const QE_FLASH float *bias, float *output)
{
    const qe_window_t *g = &p->g;
    int32_t b, oy, ox, oc, ky, kx, c;

    for (b = 0; b < g->batches; ++b) {
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t iy0 = oy * (int32_t)g->stride_h - (int32_t)g->pad_top;
            for (ox = 0; ox < g->out_w; ++ox) {
                const int32_t ix0 = ox * (int32_t)g->stride_w - (int32_t)g->pad_left;
                float *out = output + (((uint32_t)b * g->out_h + (uint32_t)oy) * g->out_w
                                       + (uint32_t)ox) * g->out_c;
                for (oc = 0; oc < g->out_c; ++oc) {
                    float total = 0.0f;
                    float value;
                    for (ky = 0; ky < g->k_h; ++ky) {
                        const int32_t iy = iy0 + (int32_t)g->dil_h * ky;
                        if (iy < 0 || iy >= (int32_t)g->in_h) {
                            continue;
                        }
                        for (kx = 0; kx < g->k_w; ++kx) {
                            const int32_t ix = ix0 + (int32_t)g->dil_w * kx;
                            const float *in;
                            const QE_FLASH float *f;
                            if (ix < 0 || ix >= (int32_t)g->in_w) {
                                continue;
                            }
                            in = input + (((uint32_t)b * g->in_h + (uint32_t)iy) * g->in_w
                                          + (uint32_t)ix) * g->in_c;
                            f = filter + (((uint32_t)oc * g->k_h + (uint32_t)ky) * g->k_w
                                          + (uint32_t)kx) * g->in_c;
                            for (c = 0; c < g->in_c; ++c) {
                                total += in[c] * f[c];
                            }
                        }
                    }
                    /* total + bias (+ 0.0f without one), then std::min(std::max(x, lo), hi) */
                    value = total + ((bias != QE_FLASH_NULL) ? bias[oc] : 0.0f);
                    if (value < p->activation_min) {
                        value = p->activation_min;
                    }
                    if (p->activation_max < value) {
                        value = p->activation_max;
                    }
                    out[oc] = value;
                }
            }
        }
    }
}
