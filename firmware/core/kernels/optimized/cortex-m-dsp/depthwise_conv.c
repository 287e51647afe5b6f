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
#include <string.h>

#include "../../depthwise_conv.h"   /* the real prototypes, checked against the definitions below */
#include "dsp.h"

#define qe_depthwise_conv_s8 qe_depthwise_conv_s8_reference
#define qe_depthwise_conv_s8_packed qe_depthwise_conv_s8_packed_reference
#include "../../depthwise_conv.c"
#undef qe_depthwise_conv_s8
#undef qe_depthwise_conv_s8_packed

/* keeps gcc from turning a zeroing loop into a memset call (conv.c's NOT_A_LIBCALL) */
#if defined(__GNUC__)
#define NOT_A_LIBCALL_DW() __asm__ volatile("")
#else
#define NOT_A_LIBCALL_DW() ((void)0)
#endif

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

/* ------------------------------------------------------------------------ the packed filter
 * qe_depthwise_conv_s8_packed (depthwise_conv.h, qe_dw_s8_packed_params_t): per batch the input
 * is widened once into the scratch image (x + input_offset in int16 lanes, SXTAB16's order: per
 * group of four channels, per pixel, the words c0|c2, c1|c3; zeros in the padding around it),
 * group by group ([group][wide_h][wide_w][2 words]: a window's taps along a row are 8 bytes
 * apart), so that every output pixel's window is taken whole, no tap tested, and each input value
 * is widened once instead of once per window it lies in. Per tap and four channels: LDRD of the
 * image's two words, LDRD of the pre-widened filter's two, SMLABB / SMLATT into the four
 * channels' sums (6 instructions for 4 multiply-accumulates; a 3-wide undilated row unrolled
 * with constant offsets). The outputs through requant_mm_s8 with the generator's mm table
 * (dsp.h proves it equal to the reference's requantization), else requant_s8 per channel.
 * Without the DSP extension the same loops with the lanes in C (the host tests). */
static inline uint32_t ld32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static inline void st32(void *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
#define SMLABB_(w, x, a) __smlabb((int32_t)(w), (int32_t)(x), (a))
#define SMLATT_(w, x, a) __smlatt((int32_t)(w), (int32_t)(x), (a))
#else
#define SMLABB_(w, x, a) ((a) + (int32_t)(int16_t)((w) & 0xFFFFu) * (int32_t)(int16_t)((x) & 0xFFFFu))
#define SMLATT_(w, x, a) ((a) + (int32_t)(int16_t)((w) >> 16) * (int32_t)(int16_t)((x) >> 16))
#endif

static inline uint32_t lanes(int32_t lo, int32_t hi)
{
    return ((uint32_t)lo & 0xFFFFu) | ((uint32_t)hi << 16);
}

/* n bytes (a multiple of 4) of zeros */
static inline void zero_words(uint8_t *d, uint32_t n)
{
    uint8_t *const end = d + n;
    for (; d != end; d += 4) {
        st32(d, 0u);
        NOT_A_LIBCALL_DW();
    }
}

/* the scratch image of one batch (see above), row by row: the padding's words zero, the inside
 * pixels widened (four channels per load) */
static void dw_widen(const qe_dw_s8_packed_params_t *p, const int8_t *image, uint8_t *wide)
{
    const qe_window_t *const g = &p->c.g;
    const uint32_t in_c = g->in_c, groups = p->padded_c / 4u, ww = p->wide_w;
    const uint32_t plane = (uint32_t)p->wide_h * ww * 8u;   /* one group's bytes */
    const uint32_t left = 8u * g->pad_left, inside = 8u * g->in_w;
    const int32_t io = p->c.input_offset;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    const int16x2_t io2 = IO2(io);
#endif
    uint32_t iy, ix, k;

    for (iy = 0; iy < p->wide_h; ++iy) {
        const uint32_t yy = iy - g->pad_top;           /* (wraps above the image: outside) */
        uint8_t *const row = wide + iy * ww * 8u;
        const int8_t *src;
        if (yy >= g->in_h) {
            for (k = 0; k < groups; ++k) {
                zero_words(row + k * plane, 8u * ww);
            }
            continue;
        }
        src = image + yy * g->in_w * in_c;
        for (k = 0; k < groups; ++k) {
            zero_words(row + k * plane, left);
            zero_words(row + k * plane + left + inside, 8u * ww - left - inside);
        }
        for (ix = 0; ix < g->in_w; ++ix) {
            uint8_t *d = row + left + 8u * ix;
            uint32_t c;
            for (c = 0; c + 4u <= in_c; c += 4u, d += plane, src += 4) {
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
                const uint32_t v = load_s8x4(src);
                st32(d, (uint32_t)__sxtab16(io2, v));
                st32(d + 4, (uint32_t)sxtab16_ror8(io2, v));
#else
                st32(d, lanes(src[0] + io, src[2] + io));
                st32(d + 4, lanes(src[1] + io, src[3] + io));
#endif
            }
            if (c < in_c) {                              /* the last, partial group */
                int32_t x[4] = {0, 0, 0, 0};
                for (k = 0; c + k < in_c; ++k) {
                    x[k] = src[k] + io;
                }
                src += in_c - c;
                st32(d, lanes(x[0], x[2]));
                st32(d + 4, lanes(x[1], x[3]));
            }
        }
    }
}

/* one tap: the image's two words at x, the filter's two at w */
#define DW_TAP(x, w)                                                       \
    do {                                                                   \
        const uint32_t x02_ = ld32(x), x13_ = ld32((x) + 4);               \
        const uint32_t w02_ = (uint32_t)(w)[0], w13_ = (uint32_t)(w)[1];   \
        a0 = SMLABB_(w02_, x02_, a0);                                      \
        a2 = SMLATT_(w02_, x02_, a2);                                      \
        a1 = SMLABB_(w13_, x13_, a1);                                      \
        a3 = SMLATT_(w13_, x13_, a3);                                      \
    } while (0)

#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
/* A 3x3 window undilated along x, four channels, a whole output row of pixels, with the mm
 * table: one hand-allocated asm function (gcc spills the sums and constants of the C loop). Per
 * pixel: the bias LDM, per tap LDRD of the image's two words (constant offsets 0, 8, 16 along a
 * row, + y_step down), LDM of the filter's two and SMLABB / SMLATT x4 (6 instructions for 4
 * multiply-accumulates), per output one LDM of {multiplier, round, shift} + REQUANT_MM_*_ASM.
 * Registers: sums r2 (c0), r3 (c1), r12 (c2), lr (c3); image r0, filter r1, data r4-r6, r8;
 * y_step r9, mm r10, output r11, the context r7. */
typedef struct {
    const QE_FLASH int32_t *bias;   /* 0: the group's four biases */
    const QE_FLASH int32_t *w;      /* 4: the group's filter */
    const uint8_t *x;               /* 8: the next pixel's window in the image */
    uint32_t x_step;                /* 12: stride_w * 8 */
    uint32_t y_step;                /* 16: dil_h * wide_w * 8 */
    const QE_FLASH int32_t *mm;     /* 20: the group's {multiplier, round, shift} x 4 */
    int8_t *out;                    /* 24: the row's first output of the group */
    uint32_t out_skip;              /* 28: out_c - 4 */
    uint32_t count;                 /* 32: pixels left */
} dw_ctx_t;

#define DW_CHECK_(name, cond) typedef char dw_check_##name[(cond) ? 1 : -1]
DW_CHECK_(w, offsetof(dw_ctx_t, w) == 4);
DW_CHECK_(x, offsetof(dw_ctx_t, x) == 8);
DW_CHECK_(x_step, offsetof(dw_ctx_t, x_step) == 12);
DW_CHECK_(y_step, offsetof(dw_ctx_t, y_step) == 16);
DW_CHECK_(mm, offsetof(dw_ctx_t, mm) == 20);
DW_CHECK_(out, offsetof(dw_ctx_t, out) == 24);
DW_CHECK_(out_skip, offsetof(dw_ctx_t, out_skip) == 28);
DW_CHECK_(count, offsetof(dw_ctx_t, count) == 32);

#define DW_TAP_ASM(OFF) "ldrd r4, r5, [r0, #" OFF "]\n\t" "ldmia r1!, {r6, r8}\n\t"          \
    "smlabb r2, r6, r4, r2\n\t" "smlatt r12, r6, r4, r12\n\t"                              \
    "smlabb r3, r8, r5, r3\n\t" "smlatt lr, r8, r5, lr\n\t"
#define DW_ROW_ASM DW_TAP_ASM("0") DW_TAP_ASM("8") DW_TAP_ASM("16") "add r0, r0, r9\n\t"
#define DW_OUT_ASM(OUT, A) "ldmia r10!, {r4, r5, r6}\n\t" OUT(A)
#define DW_ROW3(NAME, OUT)                                                                \
    __attribute__((naked, noinline)) static void NAME(dw_ctx_t *c)                       \
    {                                                                                     \
        (void)c;                                                                          \
        __asm volatile(                                                                   \
            "push {r4-r11, lr}\n\t"                                                       \
            "mov r7, r0\n\t"                                                              \
            "ldr r9, [r7, #16]\n\t"                                                       \
            "ldr r11, [r7, #24]\n"                                                         \
            ".L" #NAME "_pixel:\n\t"                                                      \
            "ldr r4, [r7, #0]\n\t"                                                        \
            "ldm r4, {r2, r3, r12, lr}\n\t"                                               \
            "ldr r1, [r7, #4]\n\t"                                                        \
            "ldr r0, [r7, #8]\n\t"                                                        \
            "ldr r4, [r7, #12]\n\t"                                                       \
            "add r4, r0, r4\n\t"                                                          \
            "str r4, [r7, #8]\n\t"                                                        \
            DW_ROW_ASM DW_ROW_ASM DW_ROW_ASM                                              \
            "ldr r10, [r7, #20]\n\t"                                                      \
            DW_OUT_ASM(OUT, "r2") DW_OUT_ASM(OUT, "r3") DW_OUT_ASM(OUT, "r12")             \
            DW_OUT_ASM(OUT, "lr")                                                         \
            "ldr r4, [r7, #28]\n\t"                                                       \
            "add r11, r11, r4\n\t"                                                        \
            "ldr r4, [r7, #32]\n\t"                                                       \
            "subs r4, r4, #1\n\t"                                                         \
            "str r4, [r7, #32]\n\t"                                                       \
            "bne .L" #NAME "_pixel\n\t"                                                   \
            "pop {r4-r11, pc}\n\t");                                                      \
    }

DW_ROW3(dw_row3_fix, REQUANT_MM_FIX_ASM)
DW_ROW3(dw_row3_nofix, REQUANT_MM_NOFIX_ASM)
#endif

void qe_depthwise_conv_s8_packed(const qe_dw_s8_packed_params_t *p, const int8_t *input,
                                 const QE_FLASH int32_t *filter, const QE_FLASH int32_t *bias,
                                 int8_t *output, int16_t *scratch)
{
    const qe_window_t geo = p->c.g, *const g = &geo;
    const uint32_t cp = p->padded_c, out_c = g->out_c;
    const uint32_t plane = (uint32_t)p->wide_h * p->wide_w * 8u;
    const uint32_t x_step = (uint32_t)g->dil_w * 8u;
    const uint32_t y_step = (uint32_t)g->dil_h * p->wide_w * 8u;
    const uint32_t k_h = g->k_h, k_w = g->k_w, taps = k_h * k_w;
    const int row3 = k_w == 3u && g->dil_w == 1u;
    uint8_t *const wide = (uint8_t *)(void *)scratch;
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
    const QE_FLASH int32_t *const mm_tab = p->mm;
    const int fix = p->c.output_offset != -128;
    typedef char mm_is_three_words[(sizeof(requant_mm_t) == 12u) ? 1 : -1];
    (void)sizeof(mm_is_three_words);
#endif
    requant_t rq;
    uint32_t b, oy, ox, c, ky, kx, r;

    for (b = 0; b < g->batches; ++b) {
        dw_widen(p, input + (uint32_t)b * g->in_h * g->in_w * g->in_c, wide);
        for (c = 0; c < cp; c += 4u) {
            const uint8_t *const group = wide + (c / 4u) * plane;
            const QE_FLASH int32_t *const wg = filter + (c / 4u) * taps * 2u;
            const int32_t b0 = bias[c], b1 = bias[c + 1u], b2 = bias[c + 2u], b3 = bias[c + 3u];
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
            if (mm_tab != QE_FLASH_NULL && c + 4u <= out_c && row3 && k_h == 3u
                && g->out_w > 0u) {
                void (*const row_fn)(dw_ctx_t *) = fix ? dw_row3_fix : dw_row3_nofix;
                dw_ctx_t cx;
                cx.bias = bias + c;
                cx.w = wg;
                cx.x_step = g->stride_w * 8u;
                cx.y_step = y_step;
                cx.mm = mm_tab + 3u * c;
                cx.out_skip = out_c - 4u;
                for (oy = 0; oy < g->out_h; ++oy) {
                    cx.x = group + (oy * g->stride_h) * p->wide_w * 8u;
                    cx.out = output + ((b * g->out_h + oy) * g->out_w) * out_c + c;
                    cx.count = g->out_w;
                    row_fn(&cx);
                }
                continue;
            }
#endif
            for (oy = 0; oy < g->out_h; ++oy) {
                const uint8_t *x_first = group + (oy * g->stride_h) * p->wide_w * 8u;
                int8_t *out = output + ((b * g->out_h + oy) * g->out_w) * out_c + c;
                for (ox = 0; ox < g->out_w; ++ox, x_first += g->stride_w * 8u, out += out_c) {
                    int32_t a0 = b0, a1 = b1, a2 = b2, a3 = b3;
                    int32_t a[4];
                    const QE_FLASH int32_t *w = wg;
                    const uint8_t *x_row = x_first;
                    if (row3) {
                        for (ky = 0; ky < k_h; ++ky, x_row += y_step, w += 6) {
                            DW_TAP(x_row, w);
                            DW_TAP(x_row + 8, w + 2);
                            DW_TAP(x_row + 16, w + 4);
                        }
                    } else {
                        for (ky = 0; ky < k_h; ++ky, x_row += y_step) {
                            const uint8_t *x = x_row;
                            for (kx = 0; kx < k_w; ++kx, x += x_step, w += 2) {
                                DW_TAP(x, w);
                            }
                        }
                    }
#if defined(__ARM_FEATURE_DSP) && __ARM_FEATURE_DSP
                    if (mm_tab != QE_FLASH_NULL && c + 4u <= out_c) {
                        const requant_mm_t *const mm =
                            (const requant_mm_t *)(const void *)(mm_tab + 3u * c);
                        out[0] = requant_mm_s8(&mm[0], a0, fix);
                        out[1] = requant_mm_s8(&mm[1], a1, fix);
                        out[2] = requant_mm_s8(&mm[2], a2, fix);
                        out[3] = requant_mm_s8(&mm[3], a3, fix);
                        continue;
                    }
#endif
                    a[0] = a0;
                    a[1] = a1;
                    a[2] = a2;
                    a[3] = a3;
                    for (r = 0; r < 4u && c + r < out_c; ++r) {
                        requant_init(&rq, p->c.multipliers[c + r], p->c.shifts[c + r],
                                     p->c.output_offset, p->c.activation_min, p->c.activation_max);
                        out[r] = requant_s8(&rq, a[r]);
                    }
                }
            }
        }
    }
}
