/* See depthwise_conv.h. Same loop nest as TFLM: batch, output row, output column, input
 * channel, multiplier; then filter rows and columns, skipping padding. */
#include <stddef.h>
#include <stdint.h>

#include "depthwise_conv.h"
#include "../requant.h"

void qe_depthwise_conv_s8(const qe_conv_s8_params_t *p, const int8_t *input,
                          const QE_FLASH int8_t *filter, const QE_FLASH int32_t *bias, int8_t *output)
{
    const qe_window_t *g = &p->g;
    /* read once: the output stores may alias *p, so the compiler would reload them per value */
    const int32_t output_offset = p->output_offset;
    const int32_t activation_min = p->activation_min;
    const int32_t activation_max = p->activation_max;
    int32_t b, oy, ox, ic, m, ky, kx;

    for (b = 0; b < g->batches; ++b) {
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t iy0 = oy * (int32_t)g->stride_h - (int32_t)g->pad_top;
            for (ox = 0; ox < g->out_w; ++ox) {
                const int32_t ix0 = ox * (int32_t)g->stride_w - (int32_t)g->pad_left;
                int8_t *out = output + (((uint32_t)b * g->out_h + (uint32_t)oy) * g->out_w
                                        + (uint32_t)ox) * g->out_c;
                for (ic = 0; ic < g->in_c; ++ic) {
                    for (m = 0; m < g->depth_multiplier; ++m) {
                        const int32_t oc = m + ic * (int32_t)g->depth_multiplier;
                        int32_t acc = 0;
                        for (ky = 0; ky < g->k_h; ++ky) {
                            const int32_t iy = iy0 + (int32_t)g->dil_h * ky;
                            if (iy < 0 || iy >= (int32_t)g->in_h) {
                                continue;
                            }
                            for (kx = 0; kx < g->k_w; ++kx) {
                                const int32_t ix = ix0 + (int32_t)g->dil_w * kx;
                                int32_t in_val;
                                int32_t f_val;
                                if (ix < 0 || ix >= (int32_t)g->in_w) {
                                    continue;
                                }
                                in_val = input[(((uint32_t)b * g->in_h + (uint32_t)iy) * g->in_w
                                                + (uint32_t)ix) * g->in_c + (uint32_t)ic];
                                f_val = filter[((uint32_t)ky * g->k_w + (uint32_t)kx) * g->out_c
                                               + (uint32_t)oc];
                                acc += f_val * (in_val + p->input_offset);
                            }
                        }
                        if (bias != QE_FLASH_NULL) {
                            acc += bias[oc];
                        }
                        out[oc] = (int8_t)qe_requantize_output(
                            acc, p->multipliers[oc], p->shifts[oc], output_offset,
                            activation_min, activation_max);
                    }
                }
            }
        }
    }
}

/* The generator's packed depthwise filter (depthwise_conv.h, qe_dw_s8_packed_params_t), read one
 * weight at a time: the definition the cortex-m-dsp variant's version is compared with. */
static int32_t dw_packed_weight(const QE_FLASH int32_t *filter, uint32_t taps, uint32_t tap,
                                uint32_t c)
{
    const uint32_t word = (uint32_t)filter[((c / QE_DW_PACKED_CH) * taps + tap) * 2u + (c & 1u)];
    const uint32_t half = (c & 2u) ? word >> 16 : word & 0xFFFFu;
    return (half >= 0x8000u) ? (int32_t)half - 0x10000 : (int32_t)half;
}

void qe_depthwise_conv_s8_packed(const qe_dw_s8_packed_params_t *p, const int8_t *input,
                                 const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias,
                                 int8_t *output, int16_t *scratch)
{
    const qe_window_t *g = &p->c.g;
    const uint32_t taps = (uint32_t)g->k_h * g->k_w;
    int32_t b, oy, ox, c, ky, kx;

    (void)scratch;
    for (b = 0; b < g->batches; ++b) {
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t iy0 = oy * (int32_t)g->stride_h - (int32_t)g->pad_top;
            for (ox = 0; ox < g->out_w; ++ox) {
                const int32_t ix0 = ox * (int32_t)g->stride_w - (int32_t)g->pad_left;
                int8_t *out = output + (((uint32_t)b * g->out_h + (uint32_t)oy) * g->out_w
                                        + (uint32_t)ox) * g->out_c;
                for (c = 0; c < g->in_c; ++c) {
                    int32_t acc = bias[c];
                    for (ky = 0; ky < g->k_h; ++ky) {
                        const int32_t iy = iy0 + (int32_t)g->dil_h * ky;
                        if (iy < 0 || iy >= (int32_t)g->in_h) {
                            continue;
                        }
                        for (kx = 0; kx < g->k_w; ++kx) {
                            const int32_t ix = ix0 + (int32_t)g->dil_w * kx;
                            if (ix < 0 || ix >= (int32_t)g->in_w) {
                                continue;
                            }
                            acc += dw_packed_weight(filter, taps, (uint32_t)(ky * g->k_w + kx),
                                                    (uint32_t)c)
                                   * ((int32_t)input[(((uint32_t)b * g->in_h + (uint32_t)iy)
                                                      * g->in_w + (uint32_t)ix) * g->in_c
                                                     + (uint32_t)c]
                                      + p->c.input_offset);
                        }
                    }
                    out[c] = (int8_t)qe_requantize_output(acc, p->c.multipliers[c],
                                                          p->c.shifts[c], p->c.output_offset,
                                                          p->c.activation_min,
                                                          p->c.activation_max);
                }
            }
        }
    }
}

void qe_depthwise_conv_f32(const qe_conv_f32_params_t *p, const float *input,
                           const QE_FLASH float *filter, const QE_FLASH float *bias, float *output)
{
    const qe_window_t *g = &p->g;
    int32_t b, oy, ox, ic, m, ky, kx;

    for (b = 0; b < g->batches; ++b) {
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t iy0 = oy * (int32_t)g->stride_h - (int32_t)g->pad_top;
            for (ox = 0; ox < g->out_w; ++ox) {
                const int32_t ix0 = ox * (int32_t)g->stride_w - (int32_t)g->pad_left;
                float *out = output + (((uint32_t)b * g->out_h + (uint32_t)oy) * g->out_w
                                       + (uint32_t)ox) * g->out_c;
                for (ic = 0; ic < g->in_c; ++ic) {
                    for (m = 0; m < g->depth_multiplier; ++m) {
                        const int32_t oc = m + ic * (int32_t)g->depth_multiplier;
                        float total = 0.0f;
                        float value;
                        for (ky = 0; ky < g->k_h; ++ky) {
                            const int32_t iy = iy0 + (int32_t)g->dil_h * ky;
                            if (iy < 0 || iy >= (int32_t)g->in_h) {
                                continue;
                            }
                            for (kx = 0; kx < g->k_w; ++kx) {
                                const int32_t ix = ix0 + (int32_t)g->dil_w * kx;
                                if (ix < 0 || ix >= (int32_t)g->in_w) {
                                    continue;
                                }
                                total += input[(((uint32_t)b * g->in_h + (uint32_t)iy) * g->in_w
                                                + (uint32_t)ix) * g->in_c + (uint32_t)ic]
                                         * filter[((uint32_t)ky * g->k_w + (uint32_t)kx) * g->out_c
                                                  + (uint32_t)oc];
                            }
                        }
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
}
