/* See transpose_conv.h. The scatter loops visit, per input pixel, the filter taps whose output
 * pixel lies inside the output, and per such tap every output channel with the input channels
 * innermost: per output value that is TFLM's order of additions (its loops run input channel,
 * filter row, filter column, output channel, and one input pixel reaches one output pixel
 * through one tap only). */
#include <stddef.h>
#include <stdint.h>

#include "transpose_conv.h"
#include "../requant.h"

/* The output pixel of input pixel (iy, ix) through tap (ky, kx), or -1 outside the output. */
static int32_t tc_out_index(const qe_window_t *g, int32_t b, int32_t iy, int32_t ix, int32_t ky,
                            int32_t kx)
{
    const int32_t oy = iy * (int32_t)g->stride_h - (int32_t)g->pad_top + ky;
    const int32_t ox = ix * (int32_t)g->stride_w - (int32_t)g->pad_left + kx;
    if (oy < 0 || oy >= (int32_t)g->out_h || ox < 0 || ox >= (int32_t)g->out_w) {
        return -1;
    }
    return ((b * (int32_t)g->out_h + oy) * (int32_t)g->out_w + ox) * (int32_t)g->out_c;
}

#define TC_INPUT(g, b, iy, ix) \
    ((((uint32_t)(b) * (g)->in_h + (uint32_t)(iy)) * (g)->in_w + (uint32_t)(ix)) * (g)->in_c)
#define TC_FILTER(g, oc, ky, kx) \
    ((((uint32_t)(oc) * (g)->k_h + (uint32_t)(ky)) * (g)->k_w + (uint32_t)(kx)) * (g)->in_c)

void qe_transpose_conv_f32(const qe_conv_f32_params_t *p, const float *input,
                           const QE_FLASH float *filter, const QE_FLASH float *bias,
                           float *output)
{
    const qe_window_t *g = &p->g;
    const uint32_t n = (uint32_t)g->batches * g->out_h * g->out_w * g->out_c;
    const float lo = p->activation_min, hi = p->activation_max;
    uint32_t i;
    int32_t b, iy, ix, ky, kx, oc, c;

    for (i = 0; i < n; ++i) {
        output[i] = 0.0f;
    }
    for (b = 0; b < g->batches; ++b) {
        for (iy = 0; iy < g->in_h; ++iy) {
            for (ix = 0; ix < g->in_w; ++ix) {
                const float *in = input + TC_INPUT(g, b, iy, ix);
                for (ky = 0; ky < g->k_h; ++ky) {
                    for (kx = 0; kx < g->k_w; ++kx) {
                        const int32_t o = tc_out_index(g, b, iy, ix, ky, kx);
                        if (o < 0) {
                            continue;
                        }
                        for (oc = 0; oc < g->out_c; ++oc) {
                            const QE_FLASH float *f = filter + TC_FILTER(g, oc, ky, kx);
                            float acc = output[o + oc];
                            for (c = 0; c < g->in_c; ++c) {
                                acc += in[c] * f[c];
                            }
                            output[o + oc] = acc;
                        }
                    }
                }
            }
        }
    }
    for (i = 0; i < n; ++i) {
        /* acc (+ bias), then std::min(std::max(acc, lo), hi) */
        float v = output[i];
        if (bias != QE_FLASH_NULL) {
            v += bias[i % g->out_c];
        }
        if (v < lo) {
            v = lo;
        }
        if (hi < v) {
            v = hi;
        }
        output[i] = v;
    }
}

void qe_transpose_conv_s8(const qe_conv_s8_params_t *p, const int8_t *input,
                          const QE_FLASH int8_t *filter, const QE_FLASH int32_t *bias,
                          int8_t *output, int32_t *scratch)
{
    const qe_window_t *g = &p->g;
    const uint32_t n = (uint32_t)g->batches * g->out_h * g->out_w * g->out_c;
    const int32_t input_offset = p->input_offset;
    uint32_t i;
    int32_t b, iy, ix, ky, kx, oc, c;

    for (i = 0; i < n; ++i) {
        scratch[i] = 0;
    }
    for (b = 0; b < g->batches; ++b) {
        for (iy = 0; iy < g->in_h; ++iy) {
            for (ix = 0; ix < g->in_w; ++ix) {
                const int8_t *in = input + TC_INPUT(g, b, iy, ix);
                for (ky = 0; ky < g->k_h; ++ky) {
                    for (kx = 0; kx < g->k_w; ++kx) {
                        const int32_t o = tc_out_index(g, b, iy, ix, ky, kx);
                        if (o < 0) {
                            continue;
                        }
                        for (oc = 0; oc < g->out_c; ++oc) {
                            const QE_FLASH int8_t *f = filter + TC_FILTER(g, oc, ky, kx);
                            int32_t acc = scratch[o + oc];
                            for (c = 0; c < g->in_c; ++c) {
                                acc += ((int32_t)in[c] + input_offset) * (int32_t)f[c];
                            }
                            scratch[o + oc] = acc;
                        }
                    }
                }
            }
        }
    }
    for (i = 0; i < n; ++i) {
        const uint32_t ch = i % g->out_c;
        int32_t acc = scratch[i];
        if (bias != QE_FLASH_NULL) {
            acc += bias[ch];
        }
        output[i] = (int8_t)qe_requantize_output(acc, p->multipliers[ch], p->shifts[ch],
                                                 p->output_offset, p->activation_min,
                                                 p->activation_max);
    }
}

void qe_transpose_conv_s16(const qe_conv_s8_params_t *p, const int16_t *input,
                           const QE_FLASH int8_t *filter, const QE_FLASH int64_t *bias,
                           int16_t *output, int64_t *scratch)
{
    const qe_window_t *g = &p->g;
    const uint32_t n = (uint32_t)g->batches * g->out_h * g->out_w * g->out_c;
    uint32_t i;
    int32_t b, iy, ix, ky, kx, oc, c;

    for (i = 0; i < n; ++i) {
        scratch[i] = 0;
    }
    for (b = 0; b < g->batches; ++b) {
        for (iy = 0; iy < g->in_h; ++iy) {
            for (ix = 0; ix < g->in_w; ++ix) {
                const int16_t *in = input + TC_INPUT(g, b, iy, ix);
                for (ky = 0; ky < g->k_h; ++ky) {
                    for (kx = 0; kx < g->k_w; ++kx) {
                        const int32_t o = tc_out_index(g, b, iy, ix, ky, kx);
                        if (o < 0) {
                            continue;
                        }
                        for (oc = 0; oc < g->out_c; ++oc) {
                            const QE_FLASH int8_t *f = filter + TC_FILTER(g, oc, ky, kx);
                            int64_t acc = scratch[o + oc];
                            for (c = 0; c < g->in_c; ++c) {
                                acc += (int32_t)in[c] * (int32_t)f[c];
                            }
                            scratch[o + oc] = acc;
                        }
                    }
                }
            }
        }
    }
    for (i = 0; i < n; ++i) {
        const uint32_t ch = i % g->out_c;
        int64_t acc = scratch[i];
        if (bias != QE_FLASH_NULL) {
            acc += bias[ch];
        }
        output[i] = (int16_t)qe_offset_clamp(
            qe_multiply_by_quantized_multiplier_64(acc, p->multipliers[ch], p->shifts[ch]), 0,
            p->activation_min, p->activation_max);
    }
}
