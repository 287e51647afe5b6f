/* DEPTHWISE_CONV_2D, optimized variant "cortex-m-dsp" (see ../README.md):
 * qe_depthwise_conv_s8 with exactly the reference's results (../../depthwise_conv.c), computed
 * with fewer instructions. The float32 kernel is the reference's, compiled in here from its
 * source; the reference int8 kernel comes along renamed qe_depthwise_conv_s8_reference (the
 * tests compare both in one binary; --gc-sections drops it).
 *
 * Depth multiplier 1 (out_c == in_c), the usual case: four channels at a time. Per filter tap
 * inside the image, one 32-bit load takes four input channels and one four filter values (NHWC
 * input and [k_h][k_w][out_c] filter both hold the channels of a tap contiguously); SXTAB16
 * sign-extends the inputs' even and odd bytes into 16-bit lanes and adds the input offset,
 * SXTB16 does the filter, and SMLABB / SMLATT multiply-accumulate each lane into its own
 * channel's int32 sum: 10 instructions for 4 multiply-accumulates. The taps inside the image
 * are found once per output pixel (inside_taps), so the loops over them test nothing. The last in_c % 4 channels, and
 * every channel when the depth multiplier is larger, take a plain C loop of the same order.
 * Without the DSP extension (the host, for the tests) the four lanes are four C sums.
 *
 * Why the integers are the reference's, bit for bit: the same terms f * (x + input_offset)
 * over the same taps (the padding skipped, as the reference skips it), the products exact (int8
 * zero points: x + input_offset fits a 16-bit lane), and the generator admits only filters whose
 * worst-case sum of |terms| and |bias| fits int32, so the additions cannot overflow; the
 * requantization is requant.h's (dsp.h: requant_s8), per output channel. */
#include <stddef.h>
#include <stdint.h>

#include "../../depthwise_conv.h"   /* the real prototypes, checked against the definitions below */
#include "dsp.h"

#define qe_depthwise_conv_s8 qe_depthwise_conv_s8_reference
#include "../../depthwise_conv.c"
#undef qe_depthwise_conv_s8

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
/* The int16 lanes of four int8: (x + io) of bytes 0 and 2, of bytes 1 and 3; the input offset
 * twice, in both lanes. */
#define IO2(io) ((int16x2_t)(((uint32_t)(io) & 0xFFFFu) * 0x00010001u))
/* a0..a3 += the four channels' products at one tap: the four input channels at x, their four
 * filter values at f (SMLABB: bottom lanes, SMLATT: top lanes). */
#define MAC_4CH(x, f)                                                  \
    do {                                                               \
        const uint32_t xv_ = load_s8x4(x), fv_ = load_s8x4(f);         \
        const int16x2_t x02_ = __sxtab16(io2, xv_);                    \
        const int16x2_t x13_ = sxtab16_ror8(io2, xv_);                 \
        const int16x2_t f02_ = __sxtb16(fv_), f13_ = sxtb16_ror8(fv_); \
        a0 = __smlabb(f02_, x02_, a0);                                 \
        a1 = __smlabb(f13_, x13_, a1);                                 \
        a2 = __smlatt(f02_, x02_, a2);                                 \
        a3 = __smlatt(f13_, x13_, a3);                                 \
    } while (0)
#else
typedef int32_t int16x2_t;   /* the portable path keeps just the input offset in it */
#define IO2(io) (io)
#define MAC_4CH(x, f)                                          \
    do {                                                       \
        a0 += (int32_t)(f)[0] * ((int32_t)(x)[0] + io2);       \
        a1 += (int32_t)(f)[1] * ((int32_t)(x)[1] + io2);       \
        a2 += (int32_t)(f)[2] * ((int32_t)(x)[2] + io2);       \
        a3 += (int32_t)(f)[3] * ((int32_t)(x)[3] + io2);       \
    } while (0)
#endif

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
/* Depth multiplier 1, channels a multiple of 4, and every channel's requantization meeting
 * requant_mm_init's preconditions (dsp.h: right shift 1..21, a normalized multiplier, the full
 * int8 range): the same sums as below, each group's four outputs through requant_mm_s8 with the
 * channels' constants prepared once per call (DW_MM_MAX channels at most). */
#define DW_MM_MAX 128u

__attribute__((noinline)) static void dw_mm(const qe_conv_s8_params_t *p, const int8_t *input,
                                            const QE_FLASH int8_t *filter,
                                            const QE_FLASH int32_t *bias, int8_t *output,
                                            const requant_mm_t *mm, int fix)
{
    const qe_window_t geo = p->g, *const g = &geo;
    const int32_t io = p->input_offset;
    const uint32_t in_c = g->in_c, out_c = g->out_c;
    const uint32_t x_step = (uint32_t)g->dil_w * in_c, y_step = (uint32_t)g->dil_h * g->in_w * in_c;
    const uint32_t f_row_step = (uint32_t)g->k_w * out_c;
    const int16x2_t io2 = IO2(io);
    uint32_t b, oy, ox, c, ky, kx, ky0, ky1, kx0, kx1;

    for (b = 0; b < g->batches; ++b) {
        const int8_t *image = input + (uint32_t)b * g->in_h * g->in_w * in_c;
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t iy0 = (int32_t)(oy * g->stride_h) - (int32_t)g->pad_top;
            inside_taps(iy0, g->dil_h, g->k_h, g->in_h, &ky0, &ky1);
            for (ox = 0; ox < g->out_w; ++ox) {
                const int32_t ix0 = (int32_t)(ox * g->stride_w) - (int32_t)g->pad_left;
                int8_t *out = output + ((b * g->out_h + oy) * g->out_w + ox) * out_c;
                const int8_t *x_first;
                const QE_FLASH int8_t *f_first;
                uint32_t ny, nx;
                inside_taps(ix0, g->dil_w, g->k_w, g->in_w, &kx0, &kx1);
                ny = ky1 - ky0;
                nx = (ny > 0u) ? kx1 - kx0 : 0u;
                if (nx == 0u) {
                    ny = 0u;
                    x_first = image;        /* no tap inside: the sums are 0 (+ bias) */
                    f_first = filter;
                } else {
                    x_first = image + ((uint32_t)(iy0 + (int32_t)(g->dil_h * ky0)) * g->in_w
                                       + (uint32_t)(ix0 + (int32_t)(g->dil_w * kx0))) * in_c;
                    f_first = filter + (ky0 * g->k_w + kx0) * out_c;
                }
                for (c = 0; c < in_c; c += 4) {
                    int32_t a0, a1, a2, a3;
                    const int8_t *x_row = x_first + c;
                    const QE_FLASH int8_t *f_row = f_first + c;
                    if (bias != QE_FLASH_NULL) {
                        a0 = bias[c];
                        a1 = bias[c + 1];
                        a2 = bias[c + 2];
                        a3 = bias[c + 3];
                    } else {
                        a0 = a1 = a2 = a3 = 0;
                    }
                    for (ky = 0; ky < ny; ++ky) {
                        const int8_t *x = x_row;
                        const QE_FLASH int8_t *f = f_row;
                        for (kx = 0; kx < nx; ++kx) {
                            MAC_4CH(x, f);
                            x += x_step;
                            f += out_c;
                        }
                        x_row += y_step;
                        f_row += f_row_step;
                    }
                    out[c] = requant_mm_s8(&mm[c], a0, fix);
                    out[c + 1] = requant_mm_s8(&mm[c + 1], a1, fix);
                    out[c + 2] = requant_mm_s8(&mm[c + 2], a2, fix);
                    out[c + 3] = requant_mm_s8(&mm[c + 3], a3, fix);
                }
            }
        }
    }
}
#endif

void qe_depthwise_conv_s8(const qe_conv_s8_params_t *p, const int8_t *input,
                          const QE_FLASH int8_t *filter, const QE_FLASH int32_t *bias, int8_t *output)
{
    /* copies: the int8 stores below may alias *p, so the compiler would reload fields of it */
    const qe_window_t geo = p->g, *const g = &geo;
    const int32_t io = p->input_offset, output_offset = p->output_offset;
    const int32_t act_min = p->activation_min, act_max = p->activation_max;
    const QE_FLASH int32_t *const mults = p->multipliers;
    const QE_FLASH int8_t *const shifts = p->shifts;
    const uint32_t in_c = g->in_c, out_c = g->out_c, dm = g->depth_multiplier;
    /* channels done four at a time (depth multiplier 1 only) */
    const uint32_t c4 = (dm == 1u) ? (in_c & ~3u) : 0u;
    /* bytes from one tap to the next: along a row (dilated) and down a column */
    const uint32_t x_step = (uint32_t)g->dil_w * in_c, y_step = (uint32_t)g->dil_h * g->in_w * in_c;
    const int16x2_t io2 = IO2(io);
    requant_t rq;
    uint32_t b, oy, ox, c, m, ky, kx, ky0, ky1, kx0, kx1;

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    if (dm == 1u && (in_c & 3u) == 0u && out_c <= DW_MM_MAX) {
        requant_mm_t mm[DW_MM_MAX];
        int mode = REQUANT_MM_NOFIX;
        for (c = 0; c < out_c && mode != REQUANT_MM_NONE; ++c) {
            const int k = requant_mm_init(&mm[c], mults[c], shifts[c], output_offset, act_min,
                                          act_max);
            mode = (k == REQUANT_MM_NONE) ? k : mode;
            mode = (k == REQUANT_MM_FIX) ? k : mode;
        }
        if (mode != REQUANT_MM_NONE) {
            dw_mm(p, input, filter, bias, output, mm, mode == REQUANT_MM_FIX);
            return;
        }
    }
#endif
    for (b = 0; b < g->batches; ++b) {
        const int8_t *image = input + (uint32_t)b * g->in_h * g->in_w * in_c;
        for (oy = 0; oy < g->out_h; ++oy) {
            const int32_t iy0 = (int32_t)(oy * g->stride_h) - (int32_t)g->pad_top;
            inside_taps(iy0, g->dil_h, g->k_h, g->in_h, &ky0, &ky1);
            for (ox = 0; ox < g->out_w; ++ox) {
                const int32_t ix0 = (int32_t)(ox * g->stride_w) - (int32_t)g->pad_left;
                int8_t *out = output + ((b * g->out_h + oy) * g->out_w + ox) * out_c;
                /* the first inside tap (ky0, kx0) of the window, in the image and the filter */
                const int8_t *x_first;
                const QE_FLASH int8_t *f_first;
                inside_taps(ix0, g->dil_w, g->k_w, g->in_w, &kx0, &kx1);
                if (ky0 == ky1 || kx0 == kx1) {
                    x_first = image;        /* no tap inside: the sums are 0 (+ bias) */
                    f_first = filter;
                } else {
                    x_first = image + ((uint32_t)(iy0 + (int32_t)(g->dil_h * ky0)) * g->in_w
                                       + (uint32_t)(ix0 + (int32_t)(g->dil_w * kx0))) * in_c;
                    f_first = filter + (ky0 * g->k_w + kx0) * out_c;
                }
                for (c = 0; c < c4; c += 4) {
                    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
                    const int8_t *x_row = x_first + c;
                    const QE_FLASH int8_t *f_row = f_first + c;
                    for (ky = ky0; ky < ky1; ++ky) {
                        const int8_t *x = x_row;
                        const QE_FLASH int8_t *f = f_row;
                        for (kx = kx0; kx < kx1; ++kx) {
                            MAC_4CH(x, f);
                            x += x_step;
                            f += out_c;
                        }
                        x_row += y_step;
                        f_row += (uint32_t)g->k_w * out_c;
                    }
                    if (bias != QE_FLASH_NULL) {
                        a0 += bias[c];
                        a1 += bias[c + 1];
                        a2 += bias[c + 2];
                        a3 += bias[c + 3];
                    }
                    requant_init(&rq, mults[c], shifts[c], output_offset, act_min, act_max);
                    out[c] = requant_s8(&rq, a0);
                    requant_init(&rq, mults[c + 1], shifts[c + 1], output_offset, act_min, act_max);
                    out[c + 1] = requant_s8(&rq, a1);
                    requant_init(&rq, mults[c + 2], shifts[c + 2], output_offset, act_min, act_max);
                    out[c + 2] = requant_s8(&rq, a2);
                    requant_init(&rq, mults[c + 3], shifts[c + 3], output_offset, act_min, act_max);
                    out[c + 3] = requant_s8(&rq, a3);
                }
                for (; c < in_c; ++c) {           /* the rest, one output channel at a time */
                    for (m = 0; m < dm; ++m) {
                        const uint32_t oc = c * dm + m;
                        const int8_t *x_row = x_first + c;
                        const QE_FLASH int8_t *f_row = f_first + oc;
                        int32_t acc = 0;
                        for (ky = ky0; ky < ky1; ++ky) {
                            const int8_t *x = x_row;
                            const QE_FLASH int8_t *f = f_row;
                            for (kx = kx0; kx < kx1; ++kx) {
                                acc += (int32_t)*f * ((int32_t)*x + io);
                                x += x_step;
                                f += out_c;
                            }
                            x_row += y_step;
                            f_row += (uint32_t)g->k_w * out_c;
                        }
                        if (bias != QE_FLASH_NULL) {
                            acc += bias[oc];
                        }
                        requant_init(&rq, mults[oc], shifts[oc], output_offset, act_min, act_max);
                        out[oc] = requant_s8(&rq, acc);
                    }
                }
            }
        }
    }
}
